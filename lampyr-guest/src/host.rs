//! The SDK on the host (any target but a fiber's): handlers run as plain functions,
//! for `cargo test` and for `cargo run -- GET /path`. No VM, the same types.

use std::cell::Cell;
use std::io::Write as _;
use std::process::ExitCode;

use lampyr_abi::{Env, Request, Response};

use crate::log::Level;

thread_local! {
    /// The environment [`with_env`] set for this thread.
    static TEST_ENV: Cell<Option<&'static Env>> = const { Cell::new(None) };
}

/// The environment a host test set on this thread, if any.
pub(crate) fn test_env() -> Option<&'static Env> {
    TEST_ENV.with(Cell::get)
}

/// Runs `f` with `vars` as the Revision environment seen by [`crate::env`] on this thread
/// (the previous one is restored after, even when `f` panics). Each call leaks its small
/// environment so `env::var` can return `&'static str` as it does in a fiber: for tests.
pub fn with_env<T>(vars: &[(&str, &str)], f: impl FnOnce() -> T) -> T {
    struct Restore(Option<&'static Env>);
    impl Drop for Restore {
        fn drop(&mut self) {
            TEST_ENV.with(|e| e.set(self.0));
        }
    }
    let env = Env { vars: vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(), args: Vec::new() };
    let _restore = Restore(TEST_ENV.with(|e| e.replace(Some(Box::leak(Box::new(env))))));
    f()
}

/// A request with `method` and `uri` (path and query), no headers and no body.
pub fn request(method: &str, uri: &str) -> Request {
    Request { method: method.to_string(), uri: uri.to_string(), ..Request::default() }
}

/// The response body as text (lossy), for assertions.
pub fn body_text(response: &Response) -> String {
    String::from_utf8_lossy(&response.body).into_owned()
}

/// The first value of header `name` in `response` (ASCII case-insensitive), as text.
pub fn header<'a>(response: &'a Response, name: &str) -> Option<&'a str> {
    response.headers.iter().find(|h| h.name.eq_ignore_ascii_case(name)).and_then(|h| std::str::from_utf8(&h.value).ok())
}

/// Runs `handler` on `req` as a fiber would answer it: a response the handler streamed
/// ([`crate::stream`]) comes back whole, its head and bytes before the returned body.
pub fn serve<R: crate::IntoResponse>(handler: impl FnOnce(Request) -> R, req: Request) -> Response {
    crate::stream::finish(handler(req).into_response())
}

pub(crate) fn sleep_ms(ms: u64) -> u64 {
    let ms = ms.min(600_000);
    std::thread::sleep(std::time::Duration::from_millis(ms));
    ms
}

pub(crate) fn log(level: Level, message: &str, fields: &str) {
    let _ = writeln!(std::io::stderr(), "{} {message}{}{fields}", level.as_str(), if fields.is_empty() { "" } else { " " });
}

/// What [`crate::entry!`]'s host `main` does: answers one request named on the command line,
/// `[METHOD] PATH [BODY]` (method `GET` by default), with the process environment as the
/// Revision's, after running `init` and `start`; prints the status line, headers and body.
/// Exits 0 for a status below 500, 1 for a 5xx, 2 for a usage error.
pub fn main(init: fn(), start: fn(), handler: impl Fn(Request) -> Response) -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (method, uri, body) = match args.as_slice() {
        [uri] if uri.starts_with('/') => ("GET", uri.as_str(), ""),
        [method, uri] => (method.as_str(), uri.as_str(), ""),
        [method, uri, body] => (method.as_str(), uri.as_str(), body.as_str()),
        _ => {
            eprintln!("usage: cargo run -- [METHOD] PATH [BODY]   (runs the handler on the host, no fiber)");
            eprintln!("serve it in a fiber instead: ly run .");
            return ExitCode::from(2);
        }
    };
    let vars = std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))).collect();
    crate::env::install(Env { vars, args: Vec::new() });
    init();
    start();
    let mut req = request(&method.to_ascii_uppercase(), uri);
    req.body = body.as_bytes().to_vec();
    let response = serve(handler, req);
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}", response.status);
    for h in &response.headers {
        let _ = writeln!(out, "{}: {}", h.name, String::from_utf8_lossy(&h.value));
    }
    let _ = writeln!(out);
    let _ = out.write_all(&response.body);
    let _ = out.flush();
    if response.status >= 500 { ExitCode::from(1) } else { ExitCode::SUCCESS }
}
