//! Knative's `runtime` test image as a fiber, as far as a fiber can honestly answer:
//! a JSON document (upstream's `types.RuntimeInfo`) with the request (method, URI, host,
//! headers keyed as Go canonicalises them) and the environment the guest was given.
//! and its arguments (the container's `command` then `args`).
//! What a fiber does not have is reported empty or as an error, never invented:
//! no files, cgroups or mounts, no standard input, no Unix user, no clock
//! (so no timestamp). The HTTP version is the one of the request the host received (the
//! hop into the guest), when the host says.
#![no_std]
#![no_main]

extern crate alloc;

use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write;

use lampyr_guest::{Request, Response};

/// `text` as a JSON string literal.
fn json_string(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A header name as Go's `http.CanonicalHeaderKey` writes it (`x-b3-spanid` → `X-B3-Spanid`);
/// a name with a byte outside the token set stays as it is, as in Go.
fn canonical(name: &str) -> String {
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if !name.chars().all(token) {
        return name.into();
    }
    let mut upper = true;
    name.chars()
        .map(|c| {
            let out = if upper { c.to_ascii_uppercase() } else { c.to_ascii_lowercase() };
            upper = c == '-';
            out
        })
        .collect()
}

fn handle(req: Request) -> Response {
    let mut host = String::new();
    let mut headers: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for h in &req.headers {
        let value = String::from_utf8_lossy(&h.value).into_owned();
        if h.name.eq_ignore_ascii_case("host") {
            host = value;
        } else {
            headers.entry(canonical(&h.name)).or_default().push(value);
        }
    }
    let mut out = String::from("{\"request\":{\"uri\":");
    json_string(&mut out, &req.uri);
    out.push_str(",\"host\":");
    json_string(&mut out, &host);
    out.push_str(",\"method\":");
    json_string(&mut out, &req.method);
    out.push_str(",\"headers\":{");
    for (i, (name, values)) in headers.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        json_string(&mut out, name);
        out.push_str(":[");
        for (j, value) in values.iter().enumerate() {
            if j > 0 {
                out.push(',');
            }
            json_string(&mut out, value);
        }
        out.push(']');
    }
    out.push('}');
    if let Some((major, minor)) = req.version.numbers() {
        let _ = write!(out, ",\"protoMajor\":{major},\"protoMinor\":{minor}");
    }
    out.push_str("},\"host\":{\"envs\":{");
    // A later duplicate wins, as for a process environment.
    let envs: BTreeMap<&str, &str> = lampyr_guest::env::vars().iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    for (i, (name, value)) in envs.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        json_string(&mut out, name);
        out.push(':');
        json_string(&mut out, value);
    }
    out.push_str("},\"args\":[");
    for (i, arg) in lampyr_guest::env::args().iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        json_string(&mut out, arg);
    }
    out.push_str("],\"files\":{},\"fileaccess\":{},\"cgroups\":[],\"mounts\":[],");
    out.push_str("\"stdin\":{\"error\":\"a fiber has no standard input\"}}}");
    Response::json(200, out)
}

lampyr_guest::entry!(handle);
