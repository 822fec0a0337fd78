//! Test guest: exhausts its heap on `/exhaust`, answers 200 otherwise.
#![no_std]
#![no_main]

extern crate alloc;

use alloc::vec::Vec;

use lampyr_guest::{Request, Response};

fn handle(req: Request) -> Response {
    if req.path() == "/exhaust" {
        let mut hoard: Vec<Vec<u8>> = Vec::new();
        loop {
            hoard.push(alloc::vec![0xA5; 64 * 1024]);
        }
    }
    Response::text(200, "heap fine\n")
}

lampyr_guest::entry!(handle);
