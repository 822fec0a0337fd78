//! Knative's `readiness` test image as a fiber. Its probe paths (`/healthz/readiness`,
//! `/healthz/liveness`) and every other path answer the hello text; `/query?probe=ok`
//! answers as upstream's does (the text, then `no query`), else 500.
//!
//! Upstream's container serves at once but fails readiness for `READY_DELAY`, or starts
//! listening only after `LISTEN_DELAY`. A fiber's equivalent of both is a template that is
//! not ready until the delay has passed: `start` (run once per Revision, before its
//! template is taken) waits it out, so the Revision becomes ready no sooner than upstream's.
//!
//! Upstream's `/start-failing` flips a process-wide flag. A fiber is restored to its
//! template after every request, so the flag lasts only for that request: the answer is
//! upstream's, and readiness keeps passing (docs/conformance-reasons.yaml). The liveness
//! counter likewise counts one request. `HEALTHCHECK_PORT` (a second port) is not offered:
//! a fiber serves one.
#![no_std]
#![no_main]

use lampyr_conformance_guests::{go_duration_ms, http_error};
use lampyr_guest::{Request, Response, env, sleep_ms};

const HELLO: &str = "Hello World! How about some tasty noodles?";

extern crate alloc;

fn handle(req: Request) -> Response {
    let (path, query) = req.uri.split_once('?').unwrap_or((req.uri.as_str(), ""));
    match path {
        "/start-failing" => Response::text(200, "will now fail readiness"),
        "/healthz/liveness" => Response::text(200, "1"),
        "/healthz/livenessCounter" => Response::text(200, "0"),
        "/query" if query.split('&').any(|pair| pair == "probe=ok") => Response::text(200, alloc::format!("{HELLO}no query\n")),
        "/query" => http_error(500, "no query"),
        _ => Response::text(200, HELLO),
    }
}

/// Waits out `READY_DELAY` and `LISTEN_DELAY` before the template is taken.
fn start() {
    for name in ["READY_DELAY", "LISTEN_DELAY"] {
        if let Some(ms) = env::var(name).and_then(go_duration_ms) {
            sleep_ms(u64::try_from(ms).unwrap_or(0));
        }
    }
}

lampyr_guest::entry!(handle, start = start);
