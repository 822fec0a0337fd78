//! Knative's `singlethreaded` test image as a fiber: each request takes 500 ms and
//! answers `One at a time`; a request that overlaps another in the same instance gets
//! 500. A fiber serves one request at a time by construction, so the flag can only
//! ever see its own request; it stays to keep the image's contract visible.
#![no_std]
#![no_main]

use core::sync::atomic::{AtomicBool, Ordering};

use lampyr_guest::{Request, Response};

static BUSY: AtomicBool = AtomicBool::new(false);

fn handle(_req: Request) -> Response {
    if BUSY.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire).is_err() {
        return Response::new(500);
    }
    lampyr_guest::sleep_ms(500);
    BUSY.store(false, Ordering::Release);
    Response::text(200, "One at a time")
}

lampyr_guest::entry!(handle);
