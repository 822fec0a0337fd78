//! CloudEvents over HTTP (the CloudEvents 1.0 HTTP protocol binding), as Knative Eventing
//! delivers events to a subscriber and takes its replies.
//!
//! [`Event::from_request`] reads a delivery in binary mode (attributes in `ce-*` headers,
//! the data as the body) or structured mode (`application/cloudevents+json`);
//! [`Event::batch_from_request`] also reads a batch (`application/cloudevents-batch+json`).
//! An [`Event`] returned by a handler is its reply event, sent in binary mode with status
//! 200; answer [`Response::new(202)`](Response::new) to acknowledge without a reply.
//!
//! ```
//! use lampyr_guest::event::Event;
//! use lampyr_guest::{Error, Request};
//!
//! fn handle(req: Request) -> Result<Event, Error> {
//!     let event = Event::from_request(&req)?;
//!     let name: String = event.data_json()?;
//!     Event::new(format!("{}-reply", event.id), "/greeter", "dev.example.greeting")
//!         .with_json(&format!("Hello {name}!"))
//! }
//! ```

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use base64::Engine as _;
use lampyr_abi::{Request, Response};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::{Error, IntoResponse};

/// The CloudEvents specification version this module reads and writes.
pub const SPEC_VERSION: &str = "1.0";
/// The media type of one event in structured mode.
pub const STRUCTURED: &str = "application/cloudevents+json";
/// The media type of a batch of events in structured mode.
pub const BATCH: &str = "application/cloudevents-batch+json";

/// Attributes every event has, besides the extensions and data.
const CORE: [&str; 8] = ["specversion", "id", "source", "type", "subject", "time", "dataschema", "datacontenttype"];

/// One CloudEvent: its context attributes and its data (the bytes as delivered).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// `id`: unique for its `source`.
    pub id: String,
    /// `source`: a URI reference naming where the event happened.
    pub source: String,
    /// `type`: what happened, e.g. `dev.knative.sources.ping`.
    pub ty: String,
    /// `specversion` (always [`SPEC_VERSION`] once read).
    pub specversion: String,
    /// `subject`, if given.
    pub subject: Option<String>,
    /// `time` (RFC 3339), if given, as given.
    pub time: Option<String>,
    /// `dataschema`, if given.
    pub dataschema: Option<String>,
    /// `datacontenttype`: the media type of `data`, if given.
    pub datacontenttype: Option<String>,
    /// Extension attributes, by name (lowercase letters and digits), as text.
    pub extensions: BTreeMap<String, String>,
    /// The event's data: the body in binary mode; in structured mode `data` as JSON text (or
    /// the string itself when its content type is not JSON), or `data_base64` decoded.
    pub data: Vec<u8>,
}

impl Event {
    /// An event with no data.
    pub fn new(id: impl Into<String>, source: impl Into<String>, ty: impl Into<String>) -> Event {
        Event {
            id: id.into(),
            source: source.into(),
            ty: ty.into(),
            specversion: SPEC_VERSION.into(),
            subject: None,
            time: None,
            dataschema: None,
            datacontenttype: None,
            extensions: BTreeMap::new(),
            data: Vec::new(),
        }
    }

    /// The event with `data` of media type `content_type`.
    pub fn with_data(mut self, content_type: impl Into<String>, data: impl Into<Vec<u8>>) -> Event {
        self.datacontenttype = Some(content_type.into());
        self.data = data.into();
        self
    }

    /// The event with `value` as JSON data; a value that cannot be serialised is a 500.
    pub fn with_json<T: Serialize + ?Sized>(self, value: &T) -> Result<Event, Error> {
        let data = serde_json::to_vec(value).map_err(|e| Error::internal(format!("serialising the event's data: {e}")))?;
        Ok(self.with_data("application/json", data))
    }

    /// The event with its `subject`.
    pub fn with_subject(mut self, subject: impl Into<String>) -> Event {
        self.subject = Some(subject.into());
        self
    }

    /// The event with extension attribute `name` (lowercase ASCII letters and digits, not a
    /// core attribute's name) set to `value`; another name is a 500 naming it.
    pub fn with_extension(mut self, name: &str, value: impl Into<String>) -> Result<Event, Error> {
        if !is_extension_name(name) || CORE.contains(&name) {
            return Err(Error::internal(format!(
                "{name:?} cannot name a CloudEvents extension: use lowercase letters and digits, and no core attribute's name"
            )));
        }
        self.extensions.insert(name.to_string(), value.into());
        Ok(self)
    }

    /// Extension attribute `name`, if the event has it.
    pub fn extension(&self, name: &str) -> Option<&str> {
        self.extensions.get(name).map(String::as_str)
    }

    /// The data parsed as JSON of type `T`; data that is not is a 400 saying where.
    pub fn data_json<T: DeserializeOwned>(&self) -> Result<T, Error> {
        serde_json::from_slice(&self.data)
            .map_err(|e| Error::bad_request(format!("the data of event {:?} is not the JSON expected: {e}", self.id)))
    }

    /// The data as UTF-8 text; other bytes are a 400.
    pub fn data_text(&self) -> Result<&str, Error> {
        core::str::from_utf8(&self.data).map_err(|_| Error::bad_request(format!("the data of event {:?} is not UTF-8 text", self.id)))
    }

    /// The event `req` delivers, in binary or structured mode. A request that is no
    /// CloudEvent, or lacks a required attribute, is a 400 naming what is wrong; a batch is a
    /// 400 pointing at [`Event::batch_from_request`].
    pub fn from_request(req: &Request) -> Result<Event, Error> {
        match media_type(req).as_deref() {
            Some(STRUCTURED) => structured(&req.body),
            Some(BATCH) => {
                Err(Error::bad_request("a batch of CloudEvents arrived where one was expected (read it with Event::batch_from_request)"))
            }
            _ => binary(req),
        }
    }

    /// Every event `req` delivers: a batch's, or the one of a binary or structured delivery.
    pub fn batch_from_request(req: &Request) -> Result<Vec<Event>, Error> {
        if media_type(req).as_deref() != Some(BATCH) {
            return Event::from_request(req).map(|event| alloc::vec![event]);
        }
        let items: Vec<Value> = serde_json::from_slice(&req.body)
            .map_err(|e| Error::bad_request(format!("a CloudEvents batch is a JSON array of events: {e}")))?;
        items.into_iter().enumerate().map(|(i, item)| from_json(item).map_err(|e| in_batch(i, e))).collect()
    }

    /// The event in binary mode: `ce-*` headers, its content type and its data as the body.
    pub fn to_response(&self, status: u16) -> Response {
        let mut resp = Response::new(status)
            .with_header("ce-specversion", &self.specversion)
            .with_header("ce-id", percent_encode(&self.id))
            .with_header("ce-source", percent_encode(&self.source))
            .with_header("ce-type", percent_encode(&self.ty));
        let optional = [("ce-subject", &self.subject), ("ce-time", &self.time), ("ce-dataschema", &self.dataschema)];
        for (name, value) in optional {
            if let Some(value) = value {
                resp = resp.with_header(name, percent_encode(value));
            }
        }
        for (name, value) in &self.extensions {
            resp = resp.with_header(format!("ce-{name}"), percent_encode(value));
        }
        if let Some(kind) = &self.datacontenttype {
            resp = resp.with_header("content-type", kind);
        }
        resp.with_body(self.data.clone())
    }
}

impl IntoResponse for Event {
    /// The reply event, in binary mode with status 200.
    fn into_response(self) -> Response {
        self.to_response(200)
    }
}

/// The request's media type, lowercase, without parameters.
fn media_type(req: &Request) -> Option<String> {
    let value = req.header_values("content-type").next()?;
    let text = core::str::from_utf8(value).ok()?;
    Some(text.split(';').next().unwrap_or("").trim().to_ascii_lowercase())
}

/// A binary-mode event: attributes from `ce-*` headers, the body as data.
fn binary(req: &Request) -> Result<Event, Error> {
    let mut attributes = BTreeMap::new();
    for header in req.headers.iter().filter(|h| h.name.len() > 3 && h.name[..3].eq_ignore_ascii_case("ce-")) {
        let name = header.name[3..].to_ascii_lowercase();
        let value = percent_decode(&header.value).ok_or_else(|| Error::bad_request(format!("header {} is not UTF-8 text", header.name)))?;
        attributes.insert(name, value);
    }
    if !attributes.contains_key("specversion") {
        return Err(Error::bad_request(format!(
            "not a CloudEvent: no ce-specversion header (binary mode), and the content type is not {STRUCTURED} (structured mode)"
        )));
    }
    let content_type = req.header_values("content-type").next().map(|v| String::from_utf8_lossy(v).into_owned());
    let mut event = from_attributes(attributes, "header ce-")?;
    event.datacontenttype = content_type;
    event.data = req.body.clone();
    Ok(event)
}

/// A structured-mode event from its JSON document.
fn structured(body: &[u8]) -> Result<Event, Error> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| Error::bad_request(format!("a structured CloudEvent is a JSON object: {e}")))?;
    from_json(value)
}

/// An event from its JSON form: attributes as members, `data` or `data_base64`.
fn from_json(value: Value) -> Result<Event, Error> {
    let Value::Object(mut members) = value else {
        return Err(Error::bad_request("a structured CloudEvent is a JSON object"));
    };
    let data = members.remove("data");
    let data_base64 = members.remove("data_base64");
    let mut attributes = BTreeMap::new();
    for (name, member) in members {
        let text = match member {
            Value::String(s) => s,
            Value::Bool(_) | Value::Number(_) => member.to_string(),
            Value::Null => continue,
            Value::Array(_) | Value::Object(_) => {
                return Err(Error::bad_request(format!("attribute {name:?} is not a string, number or boolean")));
            }
        };
        attributes.insert(name, text);
    }
    let mut event = from_attributes(attributes, "attribute ")?;
    event.data = match (data, data_base64) {
        (Some(_), Some(_)) => return Err(Error::bad_request("an event has data or data_base64, not both")),
        (Some(Value::String(text)), None) if !is_json(event.datacontenttype.as_deref()) => text.into_bytes(),
        (Some(value), None) => serde_json::to_vec(&value).unwrap_or_default(),
        (None, Some(Value::String(encoded))) => base64::engine::general_purpose::STANDARD
            .decode(encoded.as_bytes())
            .map_err(|e| Error::bad_request(format!("data_base64 is not base64: {e}")))?,
        (None, Some(_)) => return Err(Error::bad_request("data_base64 is not a string")),
        (None, None) => Vec::new(),
    };
    Ok(event)
}

/// An event from its attributes by name; `spelled` says how a missing one is named.
fn from_attributes(mut attributes: BTreeMap<String, String>, spelled: &str) -> Result<Event, Error> {
    let version = attributes.remove("specversion").unwrap_or_default();
    if version != SPEC_VERSION {
        return Err(Error::bad_request(format!("CloudEvents specversion {version:?} is not supported (only {SPEC_VERSION:?})")));
    }
    let mut required = |name: &str| match attributes.remove(name).filter(|v| !v.is_empty()) {
        Some(value) => Ok(value),
        None => Err(Error::bad_request(format!("the CloudEvent has no {spelled}{name}, which every event must have"))),
    };
    let (id, source, ty) = (required("id")?, required("source")?, required("type")?);
    let mut event = Event::new(id, source, ty);
    event.subject = attributes.remove("subject");
    event.time = attributes.remove("time");
    event.dataschema = attributes.remove("dataschema");
    event.datacontenttype = attributes.remove("datacontenttype");
    event.extensions = attributes;
    Ok(event)
}

fn in_batch(index: usize, e: Error) -> Error {
    Error::bad_request(format!("event {index} of the batch: {}", e.message))
}

/// Whether a `datacontenttype` says JSON (absent means JSON in the JSON format).
fn is_json(content_type: Option<&str>) -> bool {
    let Some(kind) = content_type else { return true };
    let essence = kind.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    essence == "application/json" || essence == "text/json" || essence.ends_with("+json")
}

fn is_extension_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

/// A header value as the binding writes it: space, `"`, `%` and anything outside printable
/// ASCII percent-encoded (as UTF-8 bytes).
fn percent_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if (0x21..=0x7e).contains(&byte) && byte != b'"' && byte != b'%' {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// A header value with its `%XX` escapes decoded; `None` when the result is not UTF-8.
fn percent_decode(value: &[u8]) -> Option<String> {
    String::from_utf8(crate::percent::decode(value)).ok()
}

#[cfg(test)]
mod tests;
