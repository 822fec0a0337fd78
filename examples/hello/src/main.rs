//! The smallest Lampyr service: answers every request with a greeting.
//! Run it: `cargo run -p lampyr-cli -- run examples/hello`
#![no_std]
#![no_main]

extern crate alloc;

use alloc::format;

use lampyr_guest::{Request, Response};

fn handle(_req: Request) -> Response {
    let target = lampyr_guest::env::var("TARGET").unwrap_or("World");
    Response::text(200, format!("Hello {target}!\n"))
}

lampyr_guest::entry!(handle);
