//! Knative's `pizzaplanetv2` test image as a fiber: one fixed body, no newline.
#![no_std]
#![no_main]

use lampyr_guest::{Request, Response};

fn handle(_req: Request) -> Response {
    Response::text(200, "Re-energize yourself with a slice of pepperoni!")
}

lampyr_guest::entry!(handle);
