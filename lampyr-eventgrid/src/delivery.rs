//! What an Azure Event Grid push delivery asks of its endpoint, read from the HTTP request
//! as Event Grid sends it: a subscription validation handshake (Event Grid schema), the
//! CloudEvents abuse-protection handshake (`OPTIONS`), or events — Event Grid schema (a
//! JSON array), CloudEvents schema (one `application/cloudevents+json` event or an
//! `application/cloudevents-batch+json` array) — each turned into a structured CloudEvent.

use serde_json::{Map, Value};

/// Event Grid's header naming the kind of a delivery.
pub const EVENT_TYPE_HEADER: &str = "aeg-event-type";
/// The event type of Event Grid's subscription validation event.
pub const VALIDATION_EVENT: &str = "Microsoft.EventGrid.SubscriptionValidationEvent";
/// The largest body Event Grid sends (1 MB per delivery, batched or not).
pub const MAX_BODY: usize = 1024 * 1024;

/// What a delivery asks for.
#[derive(Clone, Debug, PartialEq)]
pub enum Delivery {
    /// Event Grid schema's validation handshake: answer `{"validationResponse": code}`.
    Validation {
        /// The code to echo.
        code: String,
    },
    /// CloudEvents' abuse-protection handshake: answer with `WebHook-Allowed-Origin: origin`.
    AbuseProtection {
        /// The origin asking (`eventgrid.azure.net`).
        origin: String,
    },
    /// Events to send on, as structured CloudEvents (JSON objects), in delivery order.
    Events(Vec<Value>),
}

/// Why a delivery cannot be read; each says what was wrong and where (answered with a 400).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeliveryError {
    /// The body is not JSON.
    #[error("the body is not JSON: {0}")]
    NotJson(String),
    /// An Event Grid schema delivery that is not an array of events.
    #[error("an Event Grid schema delivery is a JSON array of events; this body is {0}")]
    NotAnArray(&'static str),
    /// An event lacks a field or has one of the wrong type.
    #[error("event {index}: {what}")]
    Event {
        /// Its position in the delivery, from 0.
        index: usize,
        /// What is wrong.
        what: String,
    },
    /// A validation event without its code.
    #[error("the SubscriptionValidationEvent has no data.validationCode")]
    NoValidationCode,
    /// A delivery of a kind this endpoint does not take.
    #[error("{0}")]
    Unsupported(String),
}

/// Reads one delivery: `method`, `content_type` and the `aeg-event-type` and
/// `WebHook-Request-Origin` headers (when present), and the body.
pub fn parse(
    method: &str,
    content_type: Option<&str>,
    event_type_header: Option<&str>,
    request_origin: Option<&str>,
    body: &[u8],
) -> Result<Delivery, DeliveryError> {
    if method.eq_ignore_ascii_case("OPTIONS") {
        return match request_origin {
            Some(origin) => Ok(Delivery::AbuseProtection { origin: origin.to_string() }),
            None => Err(DeliveryError::Unsupported("OPTIONS without WebHook-Request-Origin is no abuse-protection handshake".into())),
        };
    }
    if !method.eq_ignore_ascii_case("POST") {
        return Err(DeliveryError::Unsupported(format!("{method}: Event Grid delivers with POST (and OPTIONS to validate)")));
    }
    let media = content_type.unwrap_or_default().split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    let json: Value = serde_json::from_slice(body).map_err(|e| DeliveryError::NotJson(e.to_string()))?;
    match media.as_str() {
        "application/cloudevents+json" => Ok(Delivery::Events(vec![cloud_event(0, json)?])),
        "application/cloudevents-batch+json" => {
            let Value::Array(events) = json else { return Err(DeliveryError::NotAnArray(kind_of(&json))) };
            events.into_iter().enumerate().map(|(i, e)| cloud_event(i, e)).collect::<Result<_, _>>().map(Delivery::Events)
        }
        _ => event_grid_schema(event_type_header, json),
    }
}

/// An Event Grid schema delivery: the validation handshake, or events to convert.
fn event_grid_schema(event_type_header: Option<&str>, json: Value) -> Result<Delivery, DeliveryError> {
    let Value::Array(events) = json else { return Err(DeliveryError::NotAnArray(kind_of(&json))) };
    let validation =
        event_type_header.is_some_and(|h| h.eq_ignore_ascii_case("SubscriptionValidation")) || events.first().is_some_and(is_validation);
    if validation {
        let code = events.first().and_then(|e| e.pointer("/data/validationCode")).and_then(Value::as_str);
        return code.map(|code| Delivery::Validation { code: code.to_string() }).ok_or(DeliveryError::NoValidationCode);
    }
    events.into_iter().enumerate().map(|(i, e)| from_event_grid(i, e)).collect::<Result<_, _>>().map(Delivery::Events)
}

fn is_validation(event: &Value) -> bool {
    event.get("eventType").and_then(Value::as_str) == Some(VALIDATION_EVENT)
}

/// An Event Grid schema event as a CloudEvent, as Event Grid itself maps the two schemas:
/// `id`, `source` from `topic`, `type` from `eventType`, `subject`, `time` from `eventTime`,
/// `data`, and `dataVersion` as the `dataversion` extension.
pub fn from_event_grid(index: usize, event: Value) -> Result<Value, DeliveryError> {
    let Value::Object(fields) = event else { return Err(event_error(index, format!("is {}, not an object", kind_of(&event)))) };
    let text = |name: &str| -> Result<Option<String>, DeliveryError> {
        match fields.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(event_error(index, format!("{name} is {}, not a string", kind_of(other)))),
        }
    };
    let required = |name: &str| text(name)?.filter(|s| !s.is_empty()).ok_or_else(|| event_error(index, format!("has no {name}")));
    let mut out = Map::new();
    out.insert("specversion".into(), "1.0".into());
    out.insert("id".into(), required("id")?.into());
    out.insert("source".into(), required("topic")?.into());
    out.insert("type".into(), required("eventType")?.into());
    for (from, to) in [("subject", "subject"), ("eventTime", "time"), ("dataVersion", "dataversion")] {
        if let Some(value) = text(from)?.filter(|s| !s.is_empty()) {
            out.insert(to.into(), value.into());
        }
    }
    if let Some(data) = fields.get("data").filter(|d| !d.is_null()) {
        out.insert("datacontenttype".into(), "application/json".into());
        out.insert("data".into(), data.clone());
    }
    Ok(Value::Object(out))
}

/// A CloudEvents schema event: checked for the attributes CloudEvents 1.0 requires.
fn cloud_event(index: usize, event: Value) -> Result<Value, DeliveryError> {
    let Value::Object(fields) = &event else { return Err(event_error(index, format!("is {}, not an object", kind_of(&event)))) };
    for name in ["specversion", "id", "source", "type"] {
        match fields.get(name) {
            Some(Value::String(s)) if !s.is_empty() => {}
            _ => return Err(event_error(index, format!("has no {name} (a CloudEvent needs specversion, id, source and type)"))),
        }
    }
    if fields.get("specversion").and_then(Value::as_str) != Some("1.0") {
        return Err(event_error(index, "specversion is not 1.0".into()));
    }
    Ok(event)
}

fn event_error(index: usize, what: String) -> DeliveryError {
    DeliveryError::Event { index, what }
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests;
