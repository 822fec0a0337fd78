//! The smallest Lampyr service: answers every request with a greeting.
//! Serve it in a fiber: `ly run examples/hello`; test the handler on the host: `cargo test`.
#![cfg_attr(target_os = "none", no_std, no_main)]

extern crate alloc;

use alloc::format;

use lampyr_guest::{Request, Response};

fn handle(_req: Request) -> Response {
    let target = lampyr_guest::env::var("TARGET").unwrap_or("World");
    Response::text(200, format!("Hello {target}!\n"))
}

lampyr_guest::entry!(handle);

#[cfg(test)]
mod tests {
    use lampyr_guest::host::{body_text, request, with_env};

    use super::handle;

    #[test]
    fn greets_the_target_it_is_configured_with() {
        let answer = with_env(&[("TARGET", "Lampyr")], || handle(request("GET", "/")));
        assert_eq!((answer.status, body_text(&answer).as_str()), (200, "Hello Lampyr!\n"));
    }

    #[test]
    fn greets_the_world_without_a_target() {
        assert_eq!(body_text(&handle(request("GET", "/"))), "Hello World!\n");
    }
}
