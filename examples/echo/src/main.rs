//! Echoes the request back: method, path, headers (one per line) and body.
//! Serve it in a fiber: `ly run examples/echo`; test the handler on the host: `cargo test`.
#![cfg_attr(target_os = "none", no_std, no_main)]

extern crate alloc;

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write;

use lampyr_guest::{Request, Response};

fn handle(req: Request) -> Response {
    let mut head = String::new();
    let _ = writeln!(head, "method: {}", req.method);
    let _ = writeln!(head, "path: {}", req.path());
    if let Some(q) = req.query() {
        let _ = writeln!(head, "query: {q}");
    }
    for h in &req.headers {
        let _ = writeln!(head, "header: {}: {}", h.name, String::from_utf8_lossy(&h.value));
    }
    let _ = writeln!(head, "body-length: {}", req.body.len());
    head.push('\n');
    let mut body: Vec<u8> = head.into_bytes();
    body.extend_from_slice(&req.body);
    Response::new(200)
        .with_header("content-type", "text/plain; charset=utf-8")
        .with_header("x-echo-method", req.method.as_bytes())
        .with_body(body)
}

lampyr_guest::entry!(handle);

#[cfg(test)]
mod tests {
    use lampyr_guest::Header;
    use lampyr_guest::host::{body_text, header, request};

    use super::handle;

    #[test]
    fn echoes_method_path_query_headers_and_body() {
        let mut req = request("PUT", "/a/b?x=1");
        req.headers.push(Header { name: "X-Test".into(), value: b"yes".to_vec() });
        req.body = b"payload".to_vec();
        let answer = handle(req);
        assert_eq!(header(&answer, "x-echo-method"), Some("PUT"));
        let expected = "method: PUT\npath: /a/b\nquery: x=1\nheader: X-Test: yes\nbody-length: 7\n\npayload";
        assert_eq!(body_text(&answer), expected);
    }
}
