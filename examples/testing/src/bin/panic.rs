//! Test guest: panics on `/panic`, answers 200 otherwise.
#![no_std]
#![no_main]

use lampyr_guest::{Request, Response};

fn handle(req: Request) -> Response {
    if req.path() == "/panic" {
        panic!("guest panicked on purpose");
    }
    Response::text(200, "still alive\n")
}

lampyr_guest::entry!(handle);
