//! Sending a structured CloudEvent to a sink in binary mode (the CloudEvents HTTP binding:
//! `ce-` headers, `content-type` from `datacontenttype`, the data as the body), as Knative
//! sources send to Brokers and Services. Sinks are cluster-local `http://` addresses.

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine as _;
use base64::prelude::BASE64_STANDARD;
use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

/// An HTTP/1.1 client for sinks (connections kept and reused per sink).
pub type SinkClient = Client<HttpConnector, Full<Bytes>>;

/// A new [`SinkClient`].
pub fn sink_client() -> SinkClient {
    Client::builder(TokioExecutor::new()).build_http()
}

/// How long one event's delivery to the sink may take.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(30);

/// Why an event was not delivered.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The sink could not be reached or did not answer in time.
    #[error("sending event {id} to {sink}: {why}")]
    Unreachable {
        /// The event's id.
        id: String,
        /// The sink URL.
        sink: String,
        /// Why.
        why: String,
    },
    /// The sink answered, but not with a 2xx.
    #[error("sink {sink} answered {status} to event {id}")]
    Refused {
        /// The event's id.
        id: String,
        /// The sink URL.
        sink: String,
        /// The status it answered.
        status: u16,
    },
    /// The event cannot be put in binary mode.
    #[error("event {id}: {what}")]
    Malformed {
        /// The event's id.
        id: String,
        /// What is wrong.
        what: String,
    },
}

/// An event in binary mode: its headers (`name`, `value`) and body.
pub type BinaryRequest = (Vec<(String, String)>, Vec<u8>);

/// The HTTP request of `event` in binary mode, with `extensions` set (overriding the event's).
pub fn binary_request(event: &Value, extensions: &BTreeMap<String, String>) -> Result<BinaryRequest, SendError> {
    let id = event.get("id").and_then(Value::as_str).unwrap_or_default().to_string();
    let malformed = |what: String| SendError::Malformed { id: id.clone(), what };
    let Value::Object(fields) = event else { return Err(malformed("is not a JSON object".into())) };
    let mut headers = Vec::new();
    let mut content_type = None;
    for (name, value) in fields {
        match name.as_str() {
            "data" | "data_base64" => {}
            "datacontenttype" => content_type = value.as_str().map(str::to_string),
            _ if extensions.contains_key(name) => {}
            _ => headers.push((format!("ce-{name}"), percent_encode(&attribute_text(value)))),
        }
    }
    for (name, value) in extensions {
        headers.push((format!("ce-{name}"), percent_encode(value)));
    }
    let body = match (fields.get("data_base64"), fields.get("data")) {
        (Some(encoded), _) => {
            let text = encoded.as_str().ok_or_else(|| malformed("data_base64 is not a string".into()))?;
            BASE64_STANDARD.decode(text).map_err(|e| malformed(format!("data_base64: {e}")))?
        }
        (None, Some(Value::String(text))) if !is_json(content_type.as_deref()) => text.clone().into_bytes(),
        (None, Some(data)) => {
            content_type.get_or_insert_with(|| "application/json".to_string());
            data.to_string().into_bytes()
        }
        (None, None) => Vec::new(),
    };
    if let Some(content_type) = content_type {
        headers.push(("content-type".to_string(), content_type));
    }
    Ok((headers, body))
}

/// POSTs `event` to `sink` (an `http://` URL) in binary mode; a non-2xx answer is an error.
pub async fn send(client: &SinkClient, sink: &str, event: &Value, extensions: &BTreeMap<String, String>) -> Result<(), SendError> {
    let (headers, body) = binary_request(event, extensions)?;
    let id = event.get("id").and_then(Value::as_str).unwrap_or_default().to_string();
    let unreachable = |why: String| SendError::Unreachable { id: id.clone(), sink: sink.to_string(), why };
    if !sink.starts_with("http://") {
        return Err(unreachable("only http:// sinks are supported (cluster-local addresses)".into()));
    }
    let mut request = http::Request::post(sink);
    for (name, value) in headers {
        request = request.header(name, value);
    }
    let request = request.body(Full::new(Bytes::from(body))).map_err(|e| unreachable(e.to_string()))?;
    let response = match tokio::time::timeout(SEND_TIMEOUT, client.request(request)).await {
        Ok(Ok(response)) => response,
        Ok(Err(e)) => return Err(unreachable(e.to_string())),
        Err(_) => return Err(unreachable(format!("no answer within {SEND_TIMEOUT:?}"))),
    };
    let status = response.status().as_u16();
    if response.status().is_success() { Ok(()) } else { Err(SendError::Refused { id, sink: sink.to_string(), status }) }
}

/// A JSON media type (`application/json`, `text/json`, `…+json`), or none given.
fn is_json(content_type: Option<&str>) -> bool {
    let Some(content_type) = content_type else { return true };
    let media = content_type.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    media == "application/json" || media == "text/json" || media.ends_with("+json")
}

/// An attribute's value as its header text (strings as they are, other JSON as JSON).
fn attribute_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Percent-encodes what the CloudEvents HTTP binding says a header value may not hold raw:
/// bytes outside printable ASCII, space, `"` and `%`.
fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_graphic() && byte != b'"' && byte != b'%' {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
        headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    #[test]
    fn attributes_become_ce_headers_and_json_data_the_body() {
        let event = json!({
            "specversion": "1.0", "id": "1", "source": "/t", "type": "Microsoft.Storage.BlobCreated",
            "subject": "uploads/cat café.png", "datacontenttype": "application/json", "data": { "size": 3 },
        });
        let extensions = BTreeMap::from([("team".to_string(), "images".to_string())]);
        let (headers, body) = binary_request(&event, &extensions).expect("binary");
        assert_eq!(header(&headers, "ce-type"), Some("Microsoft.Storage.BlobCreated"));
        assert_eq!(header(&headers, "ce-subject"), Some("uploads/cat%20caf%C3%A9.png"), "percent-encoded");
        assert_eq!(header(&headers, "ce-team"), Some("images"));
        assert_eq!(header(&headers, "content-type"), Some("application/json"));
        assert!(header(&headers, "ce-data").is_none() && header(&headers, "ce-datacontenttype").is_none());
        assert_eq!(body, br#"{"size":3}"#);
    }

    #[test]
    fn text_and_base64_data_are_sent_as_bytes() {
        let text = json!({ "specversion": "1.0", "id": "1", "source": "/t", "type": "t", "datacontenttype": "text/plain", "data": "hi" });
        assert_eq!(binary_request(&text, &BTreeMap::new()).expect("binary").1, b"hi");
        let binary = json!({ "specversion": "1.0", "id": "1", "source": "/t", "type": "t", "data_base64": "AAEC" });
        assert_eq!(binary_request(&binary, &BTreeMap::new()).expect("binary").1, [0, 1, 2]);
        let broken = json!({ "specversion": "1.0", "id": "9", "source": "/t", "type": "t", "data_base64": "!!" });
        assert!(binary_request(&broken, &BTreeMap::new()).expect_err("bad base64").to_string().starts_with("event 9: data_base64"));
    }
}
