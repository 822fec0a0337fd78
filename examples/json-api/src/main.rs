//! A small JSON API with routing: a read-only catalogue of items.
//!
//! - `GET /items` lists items
//! - `GET /items/{id}` returns one item or 404
//! - `POST /echo` returns the posted JSON wrapped in an envelope
//! - anything else: 404 / 405 with a JSON error
#![no_std]
#![no_main]

extern crate alloc;

use alloc::format;
use alloc::string::String;

use lampyr_guest::{Request, Response};

const ITEMS: &[(u32, &str, u32)] = &[(1, "lantern", 1200), (2, "firefly jar", 450), (3, "wick", 75)];

fn item_json(&(id, name, price_cents): &(u32, &str, u32)) -> String {
    format!(r#"{{"id":{id},"name":"{name}","priceCents":{price_cents}}}"#)
}

fn error(status: u16, message: &str) -> Response {
    Response::json(status, format!(r#"{{"error":"{message}"}}"#))
}

fn handle(req: Request) -> Response {
    let segments: alloc::vec::Vec<&str> = req.path().split('/').filter(|s| !s.is_empty()).collect();
    match (req.method.as_str(), segments.as_slice()) {
        ("GET", ["items"]) => {
            let list: alloc::vec::Vec<String> = ITEMS.iter().map(item_json).collect();
            Response::json(200, format!(r#"{{"items":[{}]}}"#, list.join(",")))
        }
        ("GET", ["items", id]) => match id.parse::<u32>().ok().and_then(|id| ITEMS.iter().find(|i| i.0 == id)) {
            Some(item) => Response::json(200, item_json(item)),
            None => error(404, "no such item"),
        },
        ("POST", ["echo"]) => match core::str::from_utf8(&req.body) {
            Ok(text) if !text.trim().is_empty() => Response::json(200, format!(r#"{{"received":{text}}}"#)),
            _ => error(400, "body must be non-empty UTF-8 JSON"),
        },
        (_, ["items"] | ["items", _] | ["echo"]) => error(405, "method not allowed"),
        _ => error(404, "not found"),
    }
}

lampyr_guest::entry!(handle);
