//! The guest side of Lampyr's ABI: the functions the host calls, and the host
//! functions a guest calls (sleep, log). Exists only in `x86_64-unknown-none` builds.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use hyperlight_guest_bin::guest_function;
use lampyr_abi::{ABI_VERSION, Limits, Request, Response, decode_env, decode_request, encode_response};

static RAW_OVERRIDE: spin::Mutex<Option<Vec<u8>>> = spin::Mutex::new(None);

unsafe extern "Rust" {
    /// Defined by [`entry!`](crate::entry) in the guest binary.
    fn __lampyr_handle(req: Request) -> Response;
    /// Defined by [`entry!`](crate::entry) in the guest binary; runs once before the snapshot.
    fn __lampyr_init();
    /// Defined by [`entry!`](crate::entry) in the guest binary; runs once per Revision, after its
    /// environment is set and before the Revision's template snapshot.
    fn __lampyr_start();
}

/// `LampyrSleep`, or 0 when the host does not offer it.
pub(crate) fn sleep_ms(ms: u64) -> u64 {
    hyperlight_guest_bin::host_comm::call_host::<u64>("LampyrSleep", (ms,)).unwrap_or(0)
}

/// `LampyrLog`; dropped when the host does not offer it (a log line is never worth a failed request).
pub(crate) fn log(level: u32, message: String, fields: String) {
    let _ = hyperlight_guest_bin::host_comm::call_host::<u32>("LampyrLog", (level, message, fields));
}

pub(crate) fn return_raw_frame(frame: Vec<u8>) {
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
            crate::env::install(env);
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
        Ok(req) => crate::stream::finish(unsafe { __lampyr_handle(req) }),
        Err(e) => Response::text(400, format!("lampyr guest: request frame refused: {e}\n")),
    };
    match RAW_OVERRIDE.lock().take() {
        Some(raw) => raw,
        None => encode_response(&response),
    }
}
