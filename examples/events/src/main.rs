//! A Knative Eventing subscriber (a Trigger's target): answers each `dev.lampyr.greet` event,
//! and each PingSource tick (`dev.knative.sources.ping`), whose data is `{"name": "…"}` with a
//! `dev.lampyr.greeting` reply event, which the Broker delivers on; acknowledges events of any
//! other type with 202 and no reply. Binary, structured and
//! batched deliveries all work (`lampyr_guest::event`).
//! Serve it in a fiber: `ly run examples/events`; test the handler on the host: `cargo test`.
#![cfg_attr(target_os = "none", no_std, no_main)]

extern crate alloc;

use alloc::format;
use alloc::string::String;

use lampyr_guest::event::Event;
use lampyr_guest::{Error, IntoResponse, Request, Response};

/// The types of event this subscriber greets: its own, and a PingSource's ticks (a PingSource
/// whose `data` names someone greets them on a schedule).
const GREETS: [&str; 2] = ["dev.lampyr.greet", "dev.knative.sources.ping"];
/// The type of its replies.
const GREETING: &str = "dev.lampyr.greeting";

#[derive(serde::Deserialize)]
struct Greet {
    name: String,
}

fn handle(req: Request) -> Result<Response, Error> {
    let event = Event::from_request(&req)?;
    if !GREETS.contains(&event.ty.as_str()) {
        lampyr_guest::info!("acknowledged an event", id = event.id.as_str(), event_type = event.ty.as_str());
        return Ok(Response::new(202));
    }
    let greet: Greet = event.data_json()?;
    let reply = Event::new(format!("{}-greeting", event.id), "/lampyr/examples/events", GREETING)
        .with_subject(greet.name.clone())
        .with_json(&serde_json::json!({ "greeting": format!("Hello {}!", greet.name) }))?;
    Ok(reply.into_response())
}

lampyr_guest::entry!(handle);

#[cfg(test)]
mod tests {
    use lampyr_guest::host::{body_text, header, request};

    use super::handle;

    fn delivery(ty: &str, data: &str) -> lampyr_guest::Request {
        let mut req = request("POST", "/");
        for (name, value) in
            [("ce-specversion", "1.0"), ("ce-id", "e-1"), ("ce-source", "/test"), ("ce-type", ty), ("content-type", "application/json")]
        {
            req.headers.push(lampyr_guest::Header { name: name.into(), value: value.as_bytes().to_vec() });
        }
        req.body = data.as_bytes().to_vec();
        req
    }

    #[test]
    fn a_greet_event_gets_a_greeting_reply_event() {
        let resp = handle(delivery("dev.lampyr.greet", r#"{"name": "Ada"}"#)).expect("a reply");
        assert_eq!(resp.status, 200);
        assert_eq!(header(&resp, "ce-type").as_deref(), Some("dev.lampyr.greeting"));
        assert_eq!(header(&resp, "ce-id").as_deref(), Some("e-1-greeting"));
        assert_eq!(header(&resp, "ce-subject").as_deref(), Some("Ada"));
        assert_eq!(body_text(&resp), r#"{"greeting":"Hello Ada!"}"#);
    }

    #[test]
    fn other_events_are_acknowledged_without_a_reply() {
        let resp = handle(delivery("dev.example.other", "{}")).expect("an acknowledgement");
        assert_eq!(resp.status, 202);
        assert!(header(&resp, "ce-type").is_none(), "no reply event");
    }

    #[test]
    fn a_request_that_is_no_event_or_has_the_wrong_data_is_a_400() {
        let err = handle(request("POST", "/")).expect_err("no event");
        assert_eq!(err.status, 400);
        let err = handle(delivery("dev.lampyr.greet", r#"{"who": "Ada"}"#)).expect_err("no name");
        assert!(err.message.contains("missing field `name`"), "{err}");
        let mut req = request("POST", "/");
        req.headers.push(lampyr_guest::Header { name: "content-type".into(), value: b"application/cloudevents+json".to_vec() });
        req.body = br#"{"specversion":"1.0","id":"s-1","source":"/test","type":"dev.lampyr.greet","data":{"name":"Bo"}}"#.to_vec();
        assert_eq!(body_text(&handle(req).expect("structured")), r#"{"greeting":"Hello Bo!"}"#);
    }
}
