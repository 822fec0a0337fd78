//! Test guest: loops forever on `/loop`, answers 200 otherwise.
#![no_std]
#![no_main]

use lampyr_guest::{Request, Response};

fn handle(req: Request) -> Response {
    if req.path() == "/loop" {
        loop {
            core::hint::spin_loop();
        }
    }
    Response::text(200, "not looping\n")
}

lampyr_guest::entry!(handle);
