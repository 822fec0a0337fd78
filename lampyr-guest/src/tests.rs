//! Host-side tests of the SDK's handler-facing pieces: errors, JSON, environment.

use alloc::string::String;

use crate::host::{body_text, header, request, with_env};
use crate::json::Json;
use crate::{Error, IntoResponse, Response, env, json};

/// An item as `[name, price_cents]` (the SDK's own tests have no serde derive: no dev-dependencies
/// outside a workspace).
type Item = (String, u32);

#[test]
fn an_error_is_a_json_answer_with_its_status() {
    let answer = Error::bad_request("no \"name\"").into_response();
    assert_eq!(answer.status, 400);
    assert_eq!(header(&answer, "content-type"), Some("application/json"));
    assert_eq!(body_text(&answer), r#"{"error":"no \"name\""}"#);
    let failed: Result<Response, Error> = Err(Error::not_found("gone"));
    assert_eq!(failed.into_response().status, 404);
}

#[test]
fn json_bodies_parse_and_refuse_what_is_not_json_of_that_shape() {
    let mut req = request("POST", "/items");
    req.body = br#"["wick", 75]"#.to_vec();
    let item: Item = json::body(&req).expect("a valid body");
    assert_eq!(item, ("wick".into(), 75));

    req.body = br#"["wick"]"#.to_vec();
    let missing = json::body::<Item>(&req).expect_err("an element is missing");
    assert_eq!(missing.status, 400);
    assert!(missing.message.contains("invalid length 1"), "{missing}");

    req.headers.push(crate::Header { name: "Content-Type".into(), value: b"text/plain".to_vec() });
    assert_eq!(json::body::<Item>(&req).expect_err("not JSON").status, 415);
    req.headers[0].value = b"application/merge-patch+json; charset=utf-8".to_vec();
    req.body = br#"["wick", 1]"#.to_vec();
    assert!(json::body::<Item>(&req).is_ok(), "a +json type is JSON");
}

#[test]
fn json_responses_serialise_the_value() {
    let item: Item = ("jar".into(), 450);
    let answer = Json(item).into_response();
    assert_eq!((answer.status, body_text(&answer).as_str()), (200, r#"["jar",450]"#));
    assert_eq!(json::response(201, &[1, 2]).status, 201);
}

#[test]
fn configuration_is_read_typed_and_missing_or_bad_values_name_the_variable() {
    with_env(&[("LIMIT", "12"), ("RATE", "fast")], || {
        assert_eq!(env::var("LIMIT"), Some("12"));
        assert_eq!(env::parse::<u32>("LIMIT"), Ok(Some(12)));
        assert_eq!(env::parse_or::<u32>("ABSENT", 5), Ok(5));
        let bad = env::parse::<u32>("RATE").expect_err("not a number");
        assert_eq!(bad.status, 500);
        assert!(bad.message.contains(r#"RATE="fast""#), "{bad}");
        assert!(env::require("ABSENT").expect_err("unset").message.contains("ABSENT"));
    });
    assert_eq!(env::var("LIMIT"), None, "the test environment ends with the closure");
}
