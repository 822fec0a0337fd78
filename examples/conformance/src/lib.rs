//! What several of the conformance guests share.
#![no_std]

extern crate alloc;

use lampyr_guest::Response;

/// Go's `http.Error`: the message and a newline, plain text, `nosniff`.
pub fn http_error(status: u16, message: &str) -> Response {
    Response::new(status)
        .with_header("content-type", "text/plain; charset=utf-8")
        .with_header("x-content-type-options", "nosniff")
        .with_body(alloc::format!("{message}\n"))
}

/// A Go duration (`1.5s`, `100ms`, `2m`) in milliseconds.
pub fn go_duration_ms(text: &str) -> Option<i64> {
    let (number, unit) = text.split_at(text.find(|c: char| c.is_ascii_alphabetic())?);
    let scale = match unit {
        "ns" => 0.000_001,
        "us" | "µs" => 0.001,
        "ms" => 1.0,
        "s" => 1_000.0,
        "m" => 60_000.0,
        "h" => 3_600_000.0,
        _ => return None,
    };
    let value: f64 = number.parse().ok()?;
    Some((value * scale) as i64)
}
