//! Lampyr guest SDK: turns one handler into a Hyperlight guest that speaks
//! Lampyr's ABI (see `docs/abi.md`), and lets the same handler run on the host
//! under `cargo test` with no VM.
//!
//! ```
//! #![cfg_attr(target_os = "none", no_std, no_main)]
//! use lampyr_guest::{Request, Response};
//!
//! fn handle(_req: Request) -> Response {
//!     Response::text(200, "hello\n")
//! }
//! lampyr_guest::entry!(handle);
//! ```
//!
//! A handler returns anything that is [`IntoResponse`]: a [`Response`], an
//! [`Error`] (a JSON error answer with its status) or a `Result` of both, so `?`
//! works on the SDK's fallible calls. [`Router`] dispatches by method and path,
//! [`json`] reads and writes JSON bodies, [`mod@env`] reads the Revision's
//! environment and configuration, [`stream`] sends a response's head and bytes
//! before the handler returns, [`event`] reads CloudEvents Knative Eventing delivers and
//! answers reply events, and [`info!`] and its siblings log through the host.
//!
//! Build for `x86_64-unknown-none` with `-C link-arg=-eentrypoint`
//! (`ly run` and `ly snapshot build DIR` do this). Guests must stay soft-float.
//! On any other target the crate builds with `std` for host-side tests:
//! [`entry!`] then makes a `main` that answers one request given on its command
//! line (`cargo run -- GET /items`).
#![cfg_attr(target_os = "none", no_std)]

extern crate alloc;

pub mod env;
mod error;
pub mod event;
#[cfg(target_os = "none")]
mod fiber;
#[cfg(not(target_os = "none"))]
pub mod host;
pub mod json;
pub mod log;
mod percent;
mod router;
pub mod stream;

pub use error::{Error, IntoResponse};
pub use lampyr_abi::{ABI_VERSION, Env, Header, HttpVersion, Request, Response};
pub use router::{Params, Route, Router};

/// Waits `ms` milliseconds (at most 600 s) in the host, off the CPU, and returns how
/// long it waited: less when the request was interrupted (its deadline passed or its
/// client went away), after which the guest is stopped. There is no clock in a fiber;
/// this is how a handler waits, as upstream's test images sleep. Returns 0 on a host
/// that does not offer it. On the host (tests) it is a plain thread sleep.
pub fn sleep_ms(ms: u64) -> u64 {
    #[cfg(target_os = "none")]
    return fiber::sleep_ms(ms);
    #[cfg(not(target_os = "none"))]
    return host::sleep_ms(ms);
}

/// Test support: make the current request return `frame` verbatim instead of
/// an encoded [`Response`]. Lets test guests send malformed output to the host.
#[doc(hidden)]
pub fn __return_raw_frame(frame: alloc::vec::Vec<u8>) {
    #[cfg(target_os = "none")]
    fiber::return_raw_frame(frame);
    #[cfg(not(target_os = "none"))]
    drop(frame);
}

/// Declares the guest's request handler, and optionally an `init` function
/// that runs once when the snapshot is built (its effects are in every fiber)
/// and a `start` function that runs once per Revision with its environment set
/// (`env::var` works; its effects are in every fiber of that Revision; a panic
/// there fails the Revision, as a container that exits at start would).
///
/// The handler takes a [`Request`] and returns any [`IntoResponse`]. In a guest
/// build this exports the functions Lampyr's host calls; in a host build it
/// defines `main`, which runs `init`, `start` and one request from the command line
/// (see [`host::main`]).
#[macro_export]
macro_rules! entry {
    ($handler:path) => {
        $crate::entry!($handler, init = $crate::__no_init, start = $crate::__no_init);
    };
    ($handler:path, init = $init:path) => {
        $crate::entry!($handler, init = $init, start = $crate::__no_init);
    };
    ($handler:path, start = $start:path) => {
        $crate::entry!($handler, init = $crate::__no_init, start = $start);
    };
    ($handler:path, init = $init:path, start = $start:path) => {
        #[cfg(target_os = "none")]
        #[unsafe(no_mangle)]
        fn __lampyr_handle(req: $crate::Request) -> $crate::Response {
            $crate::IntoResponse::into_response($handler(req))
        }
        #[cfg(target_os = "none")]
        #[unsafe(no_mangle)]
        fn __lampyr_init() {
            $init()
        }
        #[cfg(target_os = "none")]
        #[unsafe(no_mangle)]
        fn __lampyr_start() {
            $start()
        }
        #[cfg(not(target_os = "none"))]
        #[allow(dead_code, reason = "a guest crate's own `no_main` build never calls it")]
        fn main() -> ::std::process::ExitCode {
            $crate::host::main($init, $start, |req| $crate::IntoResponse::into_response($handler(req)))
        }
    };
}

/// The default, empty `init` and `start`.
#[doc(hidden)]
pub fn __no_init() {}

#[cfg(test)]
mod tests;
