//! The CloudEvents HTTP binding, checked against deliveries shaped as the specification's
//! examples and Knative's broker send them.

use alloc::vec;
use alloc::vec::Vec;

use lampyr_abi::{Header, HttpVersion, Request};

use super::*;

fn request(headers: &[(&str, &str)], body: &str) -> Request {
    Request {
        method: "POST".into(),
        uri: "/".into(),
        headers: headers.iter().map(|(n, v)| Header { name: (*n).into(), value: v.as_bytes().to_vec() }).collect(),
        body: body.as_bytes().to_vec(),
        version: HttpVersion::Http11,
    }
}

fn header<'a>(resp: &'a Response, name: &str) -> Option<&'a str> {
    resp.headers.iter().find(|h| h.name.eq_ignore_ascii_case(name)).and_then(|h| core::str::from_utf8(&h.value).ok())
}

#[test]
fn a_binary_delivery_gives_its_headers_as_attributes_and_its_body_as_data() {
    let req = request(
        &[
            ("Ce-Specversion", "1.0"),
            ("ce-id", "A234-1234-1234"),
            ("ce-source", "/mycontext/subcontext"),
            ("ce-type", "com.example.someevent"),
            ("ce-time", "2018-04-05T17:31:00Z"),
            ("ce-knativearrivaltime", "2026-12-06T08:00:00Z"),
            ("ce-subject", "caf%C3%A9 %22menu%22"),
            ("Content-Type", "application/json"),
        ],
        r#"{"name":"Ada"}"#,
    );
    let event = Event::from_request(&req).expect("a binary event");
    assert_eq!(
        (event.id.as_str(), event.source.as_str(), event.ty.as_str()),
        ("A234-1234-1234", "/mycontext/subcontext", "com.example.someevent")
    );
    assert_eq!(event.time.as_deref(), Some("2018-04-05T17:31:00Z"));
    assert_eq!(event.subject.as_deref(), Some("café \"menu\""), "percent-encoded header values are decoded");
    assert_eq!(event.extension("knativearrivaltime"), Some("2026-12-06T08:00:00Z"), "other ce- headers are extensions");
    assert_eq!(event.datacontenttype.as_deref(), Some("application/json"));
    let data: serde_json::Value = event.data_json().expect("JSON data");
    assert_eq!(data["name"], "Ada");
}

#[test]
fn a_structured_delivery_reads_json_data_text_data_and_base64_data() {
    let json = r#"{"specversion":"1.0","type":"com.example.someevent","source":"/src","id":"1",
                   "comexampleextension1":"value","comexampleothervalue":5,"data":{"name":"Ada"}}"#;
    let event =
        Event::from_request(&request(&[("content-type", "application/cloudevents+json; charset=utf-8")], json)).expect("structured");
    assert_eq!(event.data, br#"{"name":"Ada"}"#.to_vec(), "JSON data stays JSON");
    assert_eq!(event.datacontenttype, None);
    assert_eq!(event.extension("comexampleextension1"), Some("value"));
    assert_eq!(event.extension("comexampleothervalue"), Some("5"), "a number extension reads as its text");

    let text = r#"{"specversion":"1.0","type":"t","source":"/s","id":"2","datacontenttype":"text/plain","data":"hi there"}"#;
    let event = Event::from_request(&request(&[("content-type", STRUCTURED)], text)).expect("text data");
    assert_eq!(event.data_text().expect("text"), "hi there", "a string of a non-JSON type is its text");

    let binary =
        r#"{"specversion":"1.0","type":"t","source":"/s","id":"3","datacontenttype":"application/octet-stream","data_base64":"AAEC/w=="}"#;
    let event = Event::from_request(&request(&[("content-type", STRUCTURED)], binary)).expect("base64 data");
    assert_eq!(event.data, vec![0, 1, 2, 255]);
}

#[test]
fn a_batch_gives_every_event_and_a_single_delivery_reads_as_a_batch_of_one() {
    let batch = r#"[{"specversion":"1.0","type":"t","source":"/s","id":"1","data":1},
                    {"specversion":"1.0","type":"t","source":"/s","id":"2","data":2},
                    {"specversion":"1.0","type":"t","source":"/s","id":"3","data":3}]"#;
    let events = Event::batch_from_request(&request(&[("content-type", BATCH)], batch)).expect("a batch");
    let ids: Vec<&str> = events.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids, ["1", "2", "3"]);
    let single = request(&[("ce-specversion", "1.0"), ("ce-id", "9"), ("ce-source", "/s"), ("ce-type", "t")], "");
    assert_eq!(Event::batch_from_request(&single).expect("one").len(), 1);
    let err = Event::from_request(&request(&[("content-type", BATCH)], batch)).expect_err("one expected");
    assert!(err.message.contains("batch_from_request"), "{err}");
    let bad = r#"[{"specversion":"1.0","type":"t","source":"/s","id":"1"},{"specversion":"1.0","type":"t","id":"2"}]"#;
    let err = Event::batch_from_request(&request(&[("content-type", BATCH)], bad)).expect_err("no source");
    assert!(err.message.contains("event 1 of the batch") && err.message.contains("source"), "{err}");
}

#[test]
fn what_is_not_a_valid_event_is_a_400_saying_what_is_wrong() {
    let cases: [(&[(&str, &str)], &str, &str); 7] = [
        (&[("content-type", "application/json")], "{}", "no ce-specversion"),
        (&[("ce-specversion", "0.3"), ("ce-id", "1"), ("ce-source", "/s"), ("ce-type", "t")], "", "specversion \"0.3\""),
        (&[("ce-specversion", "1.0"), ("ce-source", "/s"), ("ce-type", "t")], "", "header ce-id"),
        (&[("content-type", STRUCTURED)], r#"{"specversion":"1.0","id":"1","source":"/s"}"#, "attribute type"),
        (&[("content-type", STRUCTURED)], "not json", "JSON object"),
        (
            &[("content-type", STRUCTURED)],
            r#"{"specversion":"1.0","id":"1","source":"/s","type":"t","data":1,"data_base64":"AA=="}"#,
            "not both",
        ),
        (&[("content-type", STRUCTURED)], r#"{"specversion":"1.0","id":"1","source":"/s","type":"t","data_base64":"!!"}"#, "not base64"),
    ];
    for (headers, body, says) in cases {
        let err = Event::from_request(&request(headers, body)).expect_err(says);
        assert_eq!(err.status, 400, "{err}");
        assert!(err.message.contains(says), "expected {says:?} in {err}");
    }
    let event = Event::from_request(&request(
        &[("content-type", STRUCTURED)],
        r#"{"specversion":"1.0","id":"1","source":"/s","type":"t","data":"x"}"#,
    ))
    .expect("an event");
    assert!(event.data_json::<u32>().expect_err("not a number").message.contains("not the JSON expected"));
}

#[test]
fn a_reply_is_sent_in_binary_mode_and_reads_back_as_the_same_event() {
    let reply = Event::new("r-1", "/greeter", "dev.example.greeting")
        .with_subject("100% \"done\"")
        .with_extension("traceparent", "00-abc-def-01")
        .expect("a valid extension name")
        .with_json(&"Hello Ada!")
        .expect("JSON data");
    let resp = reply.clone().into_response();
    assert_eq!(resp.status, 200);
    assert_eq!(header(&resp, "ce-specversion"), Some("1.0"));
    assert_eq!(header(&resp, "ce-type"), Some("dev.example.greeting"));
    assert_eq!(header(&resp, "ce-subject"), Some("100%25%20%22done%22"), "space, quote and percent are encoded");
    assert_eq!(header(&resp, "ce-traceparent"), Some("00-abc-def-01"));
    assert_eq!(header(&resp, "content-type"), Some("application/json"));
    let back = request(
        &resp.headers.iter().map(|h| (h.name.as_str(), core::str::from_utf8(&h.value).unwrap_or(""))).collect::<Vec<_>>(),
        "\"Hello Ada!\"",
    );
    assert_eq!(Event::from_request(&back).expect("reads back"), reply);
    for bad in ["Upper", "with-dash", "", "type"] {
        assert!(Event::new("1", "/s", "t").with_extension(bad, "v").is_err(), "{bad:?} is refused");
    }
}
