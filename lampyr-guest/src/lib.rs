//! Lampyr guest SDK: turns one `fn handle(Request) -> Response` into a
//! Hyperlight guest that speaks Lampyr's ABI (see `docs/abi.md`).
//!
//! ```ignore
//! #![no_std]
//! #![no_main]
//! use lampyr_guest::{Request, Response};
//!
//! fn handle(_req: Request) -> Response {
//!     Response::text(200, "hello\n")
//! }
//! lampyr_guest::entry!(handle);
//! ```
//!
//! Build for `x86_64-unknown-none` with `-C link-arg=-eentrypoint`
//! (`ly snapshot build DIR` does this). Guests must stay soft-float.
#![no_std]

extern crate alloc;

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use hyperlight_guest_bin::guest_function;
pub use lampyr_abi::{ABI_VERSION, Env, Header, Request, Response};
use lampyr_abi::{Limits, decode_env, decode_request, encode_response};

static ENV: spin::Once<Env> = spin::Once::new();
static RAW_OVERRIDE: spin::Mutex<Option<Vec<u8>>> = spin::Mutex::new(None);

unsafe extern "Rust" {
    /// Defined by [`entry!`] in the guest binary.
    fn __lampyr_handle(req: Request) -> Response;
    /// Defined by [`entry!`] in the guest binary; runs once before the snapshot.
    fn __lampyr_init();
    /// Defined by [`entry!`] in the guest binary; runs once per Revision, after its
    /// environment is set and before the Revision's template snapshot.
    fn __lampyr_start();
}

/// Environment variables of the Revision (its `env`), set before the first request.
pub mod env {
    /// Value of the Revision environment variable `name`, if set.
    pub fn var(name: &str) -> Option<&'static str> {
        super::ENV.get().and_then(|env| env.get(name))
    }

    /// Every Revision environment variable, in declaration order.
    pub fn vars() -> &'static [(alloc::string::String, alloc::string::String)] {
        super::ENV.get().map(|env| env.vars.as_slice()).unwrap_or(&[])
    }

    /// The Revision's arguments: its container's `command`, then `args` (empty when none).
    pub fn args() -> &'static [alloc::string::String] {
        super::ENV.get().map(|env| env.args.as_slice()).unwrap_or(&[])
    }
}

/// Waits `ms` milliseconds (at most 600 s) in the host, off the CPU, and returns how
/// long it waited: less when the request was interrupted (its deadline passed or its
/// client went away), after which the guest is stopped. There is no clock in a fiber;
/// this is how a handler waits, as upstream's test images sleep. Returns 0 on a host
/// that does not offer it.
pub fn sleep_ms(ms: u64) -> u64 {
    hyperlight_guest_bin::host_comm::call_host::<u64>("LampyrSleep", (ms,)).unwrap_or(0)
}

/// Test support: make the current request return `frame` verbatim instead of
/// an encoded [`Response`]. Lets test guests send malformed output to the host.
#[doc(hidden)]
pub fn __return_raw_frame(frame: Vec<u8>) {
    *RAW_OVERRIDE.lock() = Some(frame);
}

/// Runs the guest's `init` once; the host calls it while building the snapshot.
#[guest_function("LampyrInit")]
fn lampyr_init() -> u32 {
    // SAFETY: `entry!` defines `__lampyr_init` with exactly this signature in
    // the guest binary; it is a plain Rust function with no preconditions.
    unsafe { __lampyr_init() };
    0
}

#[guest_function("LampyrAbiVersion")]
fn lampyr_abi_version() -> u32 {
    u32::from(ABI_VERSION)
}

#[guest_function("LampyrConfigure")]
fn lampyr_configure(frame: Vec<u8>) -> String {
    match decode_env(&frame, &Limits::for_body(0)) {
        Ok(env) => {
            ENV.call_once(|| env);
            // SAFETY: as for `lampyr_init`; `__lampyr_start` is the guest's `start`.
            // A panic here aborts the call: the Revision's template does not load.
            unsafe { __lampyr_start() };
            String::new()
        }
        Err(e) => format!("environment frame refused: {e}"),
    }
}

#[guest_function("LampyrHandle")]
fn lampyr_handle(frame: Vec<u8>) -> Vec<u8> {
    // The host already enforced its limits; decode within the frame's own size.
    let limits = Limits { max_frame: frame.len(), max_body: frame.len(), ..Limits::default() };
    let decoded = decode_request(&frame, &limits);
    drop(frame); // free the frame before the handler allocates its response
    let response = match decoded {
        // SAFETY: as for `lampyr_init`; `__lampyr_handle` is the user's handler.
        Ok(req) => unsafe { __lampyr_handle(req) },
        Err(e) => Response::text(400, format!("lampyr guest: request frame refused: {e}\n")),
    };
    match RAW_OVERRIDE.lock().take() {
        Some(raw) => raw,
        None => encode_response(&response),
    }
}

/// Declares the guest's request handler, and optionally an `init` function
/// that runs once when the snapshot is built (its effects are in every fiber)
/// and a `start` function that runs once per Revision with its environment set
/// (`env::var` works; its effects are in every fiber of that Revision; a panic
/// there fails the Revision, as a container that exits at start would).
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
        #[unsafe(no_mangle)]
        fn __lampyr_handle(req: $crate::Request) -> $crate::Response {
            $handler(req)
        }
        #[unsafe(no_mangle)]
        fn __lampyr_init() {
            $init()
        }
        #[unsafe(no_mangle)]
        fn __lampyr_start() {
            $start()
        }
    };
}

/// The default, empty `init` and `start`.
#[doc(hidden)]
pub fn __no_init() {}
