//! Knative's `helloworld` test image as a fiber: every request gets the same greeting
//! (upstream's `Fprintln`, so with a newline).
#![no_std]
#![no_main]

use lampyr_guest::{Request, Response};

fn handle(_req: Request) -> Response {
    Response::text(200, "Hello World! How about some tasty noodles?\n")
}

lampyr_guest::entry!(handle);
