//! Responses a guest streams: its head (status and headers) sent while its handler
//! still runs (`LampyrStreamHead`), then body bytes (`LampyrStreamWrite`), then what
//! the handler returns as the last bytes. The host functions run on the fiber's
//! thread and hand the pieces over bounded channels; [`ResponseStream`] is the body
//! the client reads. Once the head is out, the call's deadline moves to
//! [`lampyr_router::body::STREAM_LIFETIME`] after it: the request deadline is a
//! time to first byte, as upstream's queue-proxy applies `timeoutSeconds`.

use std::cell::RefCell;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame};
use lampyr_abi::stream_status::{CLOSED, MALFORMED, OUT_OF_ORDER, SENT, TOO_LARGE};
use lampyr_abi::{Limits, Response, decode_response};
use lampyr_router::InvokeError;
use lampyr_router::body::{BodyError, STREAM_LIFETIME};
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::watchdog::CallState;

/// Body chunks waiting for the client, per streamed response: the guest blocks when they are full.
const CHUNKS_IN_FLIGHT: usize = 8;
/// How often a guest blocked on a full stream checks whether its call was interrupted.
const FULL_STREAM_SLICE: Duration = Duration::from_millis(1);

/// A streamed response's head, with the receiver of the body bytes that follow.
pub struct StreamHead {
    /// Status and headers (an empty body: the head frame's body is the first chunk).
    pub head: Response,
    /// The body bytes the guest writes, in order; closed when its call returns.
    pub chunks: mpsc::Receiver<Bytes>,
}

/// The stream of the guest call running on this thread: where its head and bytes go.
pub struct StreamSink {
    head: Option<oneshot::Sender<StreamHead>>,
    chunks: Option<mpsc::Sender<Bytes>>,
    state: Arc<CallState>,
    limits: Limits,
    written: u64,
    failure: Option<String>,
}

thread_local! {
    /// The sink of the guest call running on this thread, if any.
    static CURRENT_SINK: RefCell<Option<StreamSink>> = const { RefCell::new(None) };
}

impl StreamSink {
    /// A sink sending the head to `head`, bounded by the response `limits`, for the call behind `state`.
    pub fn new(head: oneshot::Sender<StreamHead>, state: Arc<CallState>, limits: Limits) -> Self {
        StreamSink { head: Some(head), chunks: None, state, limits, written: 0, failure: None }
    }

    /// Runs `call` with this sink as the thread's current stream; returns the sink after.
    pub fn around<T>(self, call: impl FnOnce() -> T) -> (T, StreamSink) {
        CURRENT_SINK.with(|s| *s.borrow_mut() = Some(self));
        let result = call();
        let sink = CURRENT_SINK.with(|s| s.borrow_mut().take()).expect("the sink set before the call");
        (result, sink)
    }

    /// Whether the head went out (the call's answer is a stream).
    pub fn streamed(&self) -> bool {
        self.head.is_none()
    }

    /// Body bytes the guest streamed.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Why the streamed response cannot end well (its body went over the limit), if it cannot.
    pub fn failure(&self) -> Option<&str> {
        self.failure.as_deref()
    }

    fn send_head(&mut self, frame: &[u8]) -> u32 {
        let Some(head_tx) = self.head.take() else { return OUT_OF_ORDER };
        let mut head = match decode_response(frame, &self.limits) {
            Ok(head) => head,
            Err(e) => {
                tracing::debug!(error = %e, "a guest's streamed head is not a response frame");
                self.head = Some(head_tx);
                return MALFORMED;
            }
        };
        let (tx, chunks) = mpsc::channel(CHUNKS_IN_FLIGHT);
        let first = std::mem::take(&mut head.body);
        self.written = first.len() as u64;
        if !first.is_empty() {
            // The channel is new and empty: this cannot be full.
            let _ = tx.try_send(Bytes::from(first));
        }
        self.state.extend_deadline(Instant::now() + STREAM_LIFETIME);
        self.chunks = Some(tx);
        match head_tx.send(StreamHead { head, chunks }) {
            Ok(()) => SENT,
            Err(_) => CLOSED,
        }
    }

    fn write(&mut self, bytes: Vec<u8>) -> u32 {
        let Some(tx) = &self.chunks else { return OUT_OF_ORDER };
        if self.failure.is_some() {
            return TOO_LARGE;
        }
        let total = self.written.saturating_add(bytes.len() as u64);
        if total > self.limits.max_body as u64 {
            self.failure = Some(format!("the streamed response body exceeds the limit of {} bytes", self.limits.max_body));
            return TOO_LARGE;
        }
        self.written = total;
        let mut chunk = Bytes::from(bytes);
        loop {
            match tx.try_send(chunk) {
                Ok(()) => return SENT,
                Err(TrySendError::Closed(_)) => return CLOSED,
                Err(TrySendError::Full(back)) if !self.state.interruption().is_set() => {
                    chunk = back;
                    std::thread::sleep(FULL_STREAM_SLICE);
                }
                Err(TrySendError::Full(_)) => return CLOSED,
            }
        }
    }
}

/// `LampyrStreamHead`: sends the guest's response head now. Returns a [`lampyr_abi::stream_status`] code.
pub fn guest_stream_head(frame: Vec<u8>) -> u32 {
    CURRENT_SINK.with(|s| s.borrow_mut().as_mut().map_or(CLOSED, |sink| sink.send_head(&frame)))
}

/// `LampyrStreamWrite`: sends the next body bytes, waiting while the client is behind.
pub fn guest_stream_write(bytes: Vec<u8>) -> u32 {
    CURRENT_SINK.with(|s| s.borrow_mut().as_mut().map_or(CLOSED, |sink| sink.write(bytes)))
}

/// The end of a streamed call, as the pool reports it: the last bytes or why the body fails.
pub type StreamEnd = Result<Bytes, InvokeError>;

/// The body of a streamed response: the guest's bytes as it writes them, then what its
/// handler returned. A call that ends badly after the head ends the body with an error,
/// so the client sees a reset, never a short body taken as whole. Dropping it before
/// the end interrupts the guest (the client is gone).
pub struct ResponseStream {
    chunks: mpsc::Receiver<Bytes>,
    end: Option<Pin<Box<dyn Future<Output = StreamEnd> + Send>>>,
}

impl ResponseStream {
    /// The body of `chunks`, finished by `end` once they close.
    pub fn new(chunks: mpsc::Receiver<Bytes>, end: impl Future<Output = StreamEnd> + Send + 'static) -> Self {
        ResponseStream { chunks, end: Some(Box::pin(end)) }
    }
}

impl HttpBody for ResponseStream {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = &mut *self;
        if let Some(chunk) = std::task::ready!(this.chunks.poll_recv(cx)) {
            return Poll::Ready(Some(Ok(Frame::data(chunk))));
        }
        let Some(end) = this.end.as_mut() else { return Poll::Ready(None) };
        let end = std::task::ready!(end.as_mut().poll(cx));
        this.end = None;
        match end {
            Ok(last) if last.is_empty() => Poll::Ready(None),
            Ok(last) => Poll::Ready(Some(Ok(Frame::data(last)))),
            Err(e) => Poll::Ready(Some(Err(e.into()))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.end.is_none()
    }
}
