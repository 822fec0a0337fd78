//! Knative's `pizzaplanetv1` test image as a fiber: one fixed body, no newline.
#![no_std]
#![no_main]

use lampyr_guest::{Request, Response};

fn handle(_req: Request) -> Response {
    Response::text(200, "What a spaceport!")
}

lampyr_guest::entry!(handle);
