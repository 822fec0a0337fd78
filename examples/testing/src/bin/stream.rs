//! Test guest: streams its responses (`lampyr_guest::stream`).
//! `/stream?MS`: head (`x-streamed: yes`, body `head\n`), waits MS ms, writes
//! `middle\n`, waits MS ms, returns `end\n`. `/late?MS`: waits MS ms, then streams `late\n`. `/big?N`: head, then N bytes in 16 KiB
//! writes. `/panic`: head, `partial\n`, then a panic. `/twice`: reports whether a
//! second head and bytes before a head were refused. Anything else: `not streaming\n`.
#![no_std]
#![no_main]

extern crate alloc;

use alloc::format;
use alloc::vec;

use lampyr_guest::{Request, Response, stream};

fn number(req: &Request) -> u64 {
    req.query().and_then(|q| q.parse().ok()).unwrap_or(0)
}

fn handle(req: Request) -> Response {
    match req.path() {
        "/stream" => {
            let wait = number(&req);
            stream::start(Response::new(200).with_header("x-streamed", "yes").with_body("head\n"));
            lampyr_guest::sleep_ms(wait);
            stream::write(b"middle\n");
            lampyr_guest::sleep_ms(wait);
            Response::new(500).with_body("end\n")
        }
        "/late" => {
            lampyr_guest::sleep_ms(number(&req));
            stream::start(Response::new(200));
            Response::new(200).with_body("late\n")
        }
        "/big" => {
            stream::start(Response::new(200));
            let mut left = number(&req) as usize;
            while left > 0 {
                let n = left.min(16 * 1024);
                if !stream::write(&vec![b'x'; n]) {
                    return Response::text(200, "refused\n");
                }
                left -= n;
            }
            Response::new(200)
        }
        "/panic" => {
            stream::start(Response::new(200));
            stream::write(b"partial\n");
            panic!("failing after the head");
        }
        "/twice" => {
            let early_write = stream::write(b"too early");
            let first = stream::start(Response::new(200));
            let second = stream::start(Response::new(201));
            Response::new(200).with_body(format!("write before head {early_write}, first head {first}, second head {second}\n"))
        }
        _ => Response::text(200, "not streaming\n"),
    }
}

lampyr_guest::entry!(handle);
