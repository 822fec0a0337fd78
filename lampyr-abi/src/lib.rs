//! The host↔guest ABI of a Lampyr fiber: versioned binary frames for HTTP
//! requests, responses and the Revision environment (see `docs/abi.md`).
//!
//! The crate is `no_std` + `alloc` so the host runtime and the guest SDK share
//! one definition. Decoding is bounded and total: any byte string yields either
//! a value within the given [`Limits`] or a [`DecodeError`] naming the field and
//! offset, never a panic.
#![no_std]

extern crate alloc;

mod decode;
mod encode;
mod frame;

pub use decode::{DecodeError, decode_env, decode_request, decode_response};
pub use encode::{encode_env, encode_request, encode_response};
pub use frame::{Env, Header, HttpVersion, Limits, Request, Response};

/// Version of the frame format described in `docs/abi.md`.
pub const ABI_VERSION: u16 = 1;

/// Guest function that serves one request frame and returns a response frame.
pub const HANDLE_FUNCTION: &str = "LampyrHandle";
/// Guest function that installs the Revision's environment before the template snapshot.
pub const CONFIGURE_FUNCTION: &str = "LampyrConfigure";
/// Guest function that runs the guest's one-time `init`, called before the snapshot is taken.
pub const INIT_FUNCTION: &str = "LampyrInit";
/// Guest function that returns the guest's ABI version as a `u32`.
pub const ABI_VERSION_FUNCTION: &str = "LampyrAbiVersion";

/// Host function a guest calls with a response frame to send its status and headers
/// (and the frame's body, as the first bytes) before its handler returns.
pub const STREAM_HEAD_FUNCTION: &str = "LampyrStreamHead";
/// Host function a guest calls with the next bytes of a response body it started streaming.
pub const STREAM_WRITE_FUNCTION: &str = "LampyrStreamWrite";

/// What the stream host functions return to the guest.
pub mod stream_status {
    /// Sent.
    pub const SENT: u32 = 0;
    /// Out of order: a second head, or bytes before the head.
    pub const OUT_OF_ORDER: u32 = 1;
    /// The client is gone or the call was interrupted: nothing more will be read.
    pub const CLOSED: u32 = 2;
    /// The bytes would take the response body over the Revision's limit; the response fails.
    pub const TOO_LARGE: u32 = 3;
    /// The head frame is not a valid response frame.
    pub const MALFORMED: u32 = 4;
}

/// Magic bytes opening a request frame.
pub const REQUEST_MAGIC: [u8; 4] = *b"LYRQ";
/// Magic bytes opening a response frame.
pub const RESPONSE_MAGIC: [u8; 4] = *b"LYRS";
/// Magic bytes opening an environment frame.
pub const ENV_MAGIC: [u8; 4] = *b"LYEV";

#[cfg(test)]
mod tests;
