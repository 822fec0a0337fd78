//! Knative's `autoscale` test image as a fiber. Query parameters, all optional (a bare
//! request answers 200 with an empty body):
//! - `sleep`: milliseconds, or a Go duration (`100ms`); appends `Slept for <waited>.`
//! - `prime=N`: appends `The largest prime less than N is P.`
//! - `bloat=M`: allocates M MiB (upstream also fills them; see [`mebibyte`]), appends `Allocated M Mb of memory.` (more than
//!   the guest's heap, which is the Revision's memory limit, aborts the guest, which the host
//!   answers with a 5xx, as upstream's OOM-killed container is answered).
//!
//! Invalid values get upstream's 400 messages. `sleep-stddev` (a random sleep) is not
//! offered: a fiber has no entropy source and no clock of its own.
#![no_std]
#![no_main]

extern crate alloc;

use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

use lampyr_conformance_guests::{go_duration_ms, http_error};
use lampyr_guest::{Request, Response};

/// One MiB of the heap, allocated but written only at its start: the heap (the
/// Revision's memory limit) is what bounds the allocation, and every page first
/// written costs milliseconds under emulated KVM (filling 200 MiB takes minutes).
/// In MiB pieces because the guest's buddy allocator gives no block over half the heap.
fn mebibyte() -> Vec<u8> {
    let mut block = Vec::with_capacity(1 << 20);
    block.push(1u8);
    block
}

/// Upstream's `http.Error` with 400.
fn bad_request(message: &str) -> Response {
    http_error(400, message)
}

fn param<'a>(query: &'a str, name: &str) -> Option<&'a str> {
    query.split('&').filter_map(|pair| pair.split_once('=')).find(|(key, _)| *key == name).map(|(_, value)| value)
}

/// Milliseconds as Go prints a `time.Duration` of whole milliseconds.
fn go_duration_text(ms: u64) -> String {
    match ms {
        0 => "0s".into(),
        1..=999 => format!("{ms}ms"),
        _ => {
            let (minutes, rest) = (ms / 60_000, ms % 60_000);
            let seconds = format!("{}.{:03}", rest / 1000, rest % 1000);
            let seconds = seconds.trim_end_matches('0').trim_end_matches('.');
            if minutes > 0 { format!("{minutes}m{seconds}s") } else { format!("{seconds}s") }
        }
    }
}

fn largest_prime_below(n: usize) -> Option<usize> {
    let mut composite = vec![false; n];
    let mut largest = None;
    for i in 2..n {
        if !composite[i] {
            largest = Some(i);
            let mut j = i * i;
            while j < n {
                composite[j] = true;
                j += i;
            }
        }
    }
    largest
}

fn handle(req: Request) -> Response {
    let query = req.query().unwrap_or("");
    let mut body = String::new();
    if let Some(sleep) = param(query, "sleep") {
        let ms = match sleep.parse::<i64>() {
            Ok(ms) => ms,
            Err(_) => match go_duration_ms(sleep) {
                Some(ms) => ms,
                None => return bad_request(&format!("time: invalid duration \"{sleep}\"")),
            },
        };
        if ms < 0 {
            return bad_request("Negative query params are not supported");
        }
        let waited = lampyr_guest::sleep_ms(ms as u64);
        body.push_str(&format!("Slept for {}.\n", go_duration_text(waited)));
    }
    if let Some(prime) = param(query, "prime") {
        let n = match prime.parse::<i64>() {
            Ok(n) if n > 0 => n as usize,
            Ok(_) => return bad_request("Non-positive query params are not supported"),
            Err(_) => return bad_request(&format!("strconv.Atoi: parsing \"{prime}\": invalid syntax")),
        };
        if let Some(p) = largest_prime_below(n) {
            body.push_str(&format!("The largest prime less than {n} is {p}.\n"));
        }
    }
    if let Some(bloat) = param(query, "bloat") {
        let mb = match bloat.parse::<i64>() {
            Ok(mb) if mb > 0 => mb as usize,
            Ok(_) => return bad_request("Non-positive durations are not supported"),
            Err(_) => return bad_request(&format!("strconv.Atoi: parsing \"{bloat}\": invalid syntax")),
        };
        let memory: Vec<Vec<u8>> = (0..mb).map(|_| mebibyte()).collect();
        core::hint::black_box(&memory);
        body.push_str(&format!("Allocated {mb} Mb of memory.\n"));
    }
    if body.is_empty() {
        return Response::new(200);
    }
    Response::text(200, body)
}

lampyr_guest::entry!(handle);
