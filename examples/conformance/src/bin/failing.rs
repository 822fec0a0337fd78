//! Knative's `failing` test image as a fiber: upstream's container logs `Started...`,
//! then exits with code 5 before serving anything. A fiber's equivalent of a process
//! that dies at start is a guest whose `start` (run once per Revision, before its
//! template is taken) panics: the template never loads and the Revision fails.
#![no_std]
#![no_main]

use lampyr_guest::{Request, Response};

fn handle(_req: Request) -> Response {
    Response::text(500, "unreachable: this guest never starts\n")
}

fn crash() {
    panic!("Crashed...");
}

lampyr_guest::entry!(handle, start = crash);
