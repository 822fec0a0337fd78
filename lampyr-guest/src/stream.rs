//! Streamed responses: a handler sends its status and headers, then body bytes, while
//! it still runs, as a server that flushes early does. Knative's `timeoutSeconds` is a
//! time to the first byte, so a handler that starts its answer in time may take longer
//! to finish it.
//!
//! ```
//! use lampyr_guest::{Request, Response, stream};
//!
//! fn handle(_req: Request) -> Response {
//!     stream::start(Response::new(200).with_header("content-type", "text/plain"));
//!     for step in ["one\n", "two\n"] {
//!         lampyr_guest::sleep_ms(1_000);
//!         if !stream::write(step.as_bytes()) {
//!             break; // the client is gone: stop working for it
//!         }
//!     }
//!     Response::new(200).with_body("done\n") // its body is the last bytes; its head is ignored
//! }
//! # assert_eq!(lampyr_guest::host::body_text(&lampyr_guest::host::serve(handle, lampyr_guest::host::request("GET", "/"))), "one\ntwo\ndone\n");
//! ```
//!
//! On a host that cannot stream (an older Lampyr, or `cargo test`), the head and bytes
//! are kept and sent with what the handler returns: the same response, all at once.

use lampyr_abi::Response;

/// Where this request's response is.
enum State {
    /// Nothing started: the handler's return is the whole response.
    Whole,
    /// The head went to the host; bytes follow through it.
    Streaming,
    /// Started where the host cannot stream: the head and the bytes so far.
    Kept(Response),
}

#[cfg(target_os = "none")]
static STATE: spin::Mutex<State> = spin::Mutex::new(State::Whole);

#[cfg(not(target_os = "none"))]
std::thread_local! {
    static STATE: core::cell::RefCell<State> = const { core::cell::RefCell::new(State::Whole) };
}

fn with_state<T>(f: impl FnOnce(&mut State) -> T) -> T {
    #[cfg(target_os = "none")]
    return f(&mut STATE.lock());
    #[cfg(not(target_os = "none"))]
    return STATE.with(|s| f(&mut s.borrow_mut()));
}

/// Sends `head`'s status and headers now, and its body as the first bytes. Returns
/// false when a head was already sent or the client is gone (stop working for it).
pub fn start(head: Response) -> bool {
    with_state(|state| {
        if !matches!(state, State::Whole) {
            return false;
        }
        match send_head(&head) {
            Some(sent) => {
                *state = State::Streaming;
                sent
            }
            None => {
                *state = State::Kept(head);
                true
            }
        }
    })
}

/// Sends the next body bytes, waiting while the client is behind. Returns false when
/// no head was sent ([`start`] first), the client is gone, or the bytes would take the
/// body over the service's response limit (the response then fails: the client sees
/// a reset, not a short body).
pub fn write(bytes: &[u8]) -> bool {
    with_state(|state| match state {
        State::Whole => false,
        State::Streaming => send_bytes(bytes),
        State::Kept(head) => {
            head.body.extend_from_slice(bytes);
            true
        }
    })
}

/// What the host sends for the handler's `response`: the response itself when nothing
/// was started, its body after the kept head and bytes, or only its body when streaming.
/// Ends this request's stream.
pub(crate) fn finish(mut response: Response) -> Response {
    match with_state(|state| core::mem::replace(state, State::Whole)) {
        State::Whole | State::Streaming => response,
        State::Kept(mut head) => {
            head.body.append(&mut response.body);
            head
        }
    }
}

/// `LampyrStreamHead`: `Some(sent)` when the host streams, `None` when it cannot.
#[cfg(target_os = "none")]
fn send_head(head: &Response) -> Option<bool> {
    let frame = lampyr_abi::encode_response(head);
    let status = hyperlight_guest_bin::host_comm::call_host::<u32>(lampyr_abi::STREAM_HEAD_FUNCTION, (frame,)).ok()?;
    Some(status == lampyr_abi::stream_status::SENT)
}

#[cfg(not(target_os = "none"))]
fn send_head(_head: &Response) -> Option<bool> {
    None
}

/// `LampyrStreamWrite`: whether the host took the bytes.
#[cfg(target_os = "none")]
fn send_bytes(bytes: &[u8]) -> bool {
    let sent = hyperlight_guest_bin::host_comm::call_host::<u32>(lampyr_abi::STREAM_WRITE_FUNCTION, (bytes.to_vec(),));
    sent.is_ok_and(|status| status == lampyr_abi::stream_status::SENT)
}

#[cfg(not(target_os = "none"))]
fn send_bytes(_bytes: &[u8]) -> bool {
    false
}
