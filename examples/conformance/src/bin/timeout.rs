//! Knative's `timeout` test image as a fiber: waits `initialTimeout` ms, sends its
//! head (`200`, no body yet), waits `timeout` ms, then answers `Slept for <timeout>
//! milliseconds` (no newline). The head is the first byte `timeoutSeconds` bounds,
//! as upstream's image writes and flushes its header between the two waits.
#![no_std]
#![no_main]

use alloc::format;

use lampyr_guest::{Request, Response, stream};

extern crate alloc;

/// The integer value of query parameter `name`; 0 when absent or not an integer, as upstream.
fn millis(req: &Request, name: &str) -> u64 {
    let query = req.query().unwrap_or("");
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(key, _)| *key == name)
        .and_then(|(_, value)| value.parse().ok())
        .unwrap_or(0)
}

fn handle(req: Request) -> Response {
    lampyr_guest::sleep_ms(millis(&req, "initialTimeout"));
    if !stream::start(Response::new(200)) {
        return Response::new(200); // the client is gone
    }
    let timeout = millis(&req, "timeout");
    lampyr_guest::sleep_ms(timeout);
    Response::new(200).with_body(format!("Slept for {timeout} milliseconds"))
}

lampyr_guest::entry!(handle);
