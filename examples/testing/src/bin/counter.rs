//! Test guest: counts requests in a static and reports the count, so tests can
//! prove fibers are restored between requests (the answer must stay 1).
//! `/big?N` answers with an N-byte body; `/hostile` returns a malformed frame;
//! `/log?MARKER` logs one info event with field `marker=MARKER` through the host.
#![no_std]
#![no_main]

extern crate alloc;

use alloc::format;
use alloc::vec;
use core::sync::atomic::{AtomicU64, Ordering};

use lampyr_guest::{Request, Response};

static SERVED: AtomicU64 = AtomicU64::new(0);

fn handle(req: Request) -> Response {
    let n = SERVED.fetch_add(1, Ordering::Relaxed) + 1;
    match req.path() {
        "/big" => {
            let len: usize = req.query().and_then(|q| q.parse().ok()).unwrap_or(0);
            Response::new(200).with_body(vec![b'x'; len])
        }
        "/hostile" => {
            // A response frame whose header count claims four billion entries.
            let mut frame = lampyr_abi_frame_prefix();
            frame.extend_from_slice(&u32::MAX.to_le_bytes());
            lampyr_guest::__return_raw_frame(frame);
            Response::new(200)
        }
        "/log" => {
            lampyr_guest::info!("counted", marker = req.query().unwrap_or(""));
            Response::text(200, format!("{n}\n"))
        }
        "/env" => Response::text(200, format!("{:?}\n", lampyr_guest::env::vars())),
        _ => Response::text(200, format!("{n}\n")),
    }
}

/// Magic, ABI version 1, flags 0, status 200.
fn lampyr_abi_frame_prefix() -> alloc::vec::Vec<u8> {
    let mut frame = b"LYRS".to_vec();
    frame.extend_from_slice(&1u16.to_le_bytes());
    frame.extend_from_slice(&0u16.to_le_bytes());
    frame.extend_from_slice(&200u16.to_le_bytes());
    frame
}

lampyr_guest::entry!(handle);
