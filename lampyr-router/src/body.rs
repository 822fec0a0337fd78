//! The streaming body every request and response travels with, and the
//! wrappers that bound it: a size limit and a deadline.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, Full};
use tokio::time::{Instant, Sleep};

/// Longest a response body streams after its head arrived: Knative's largest
/// `timeoutSeconds`. A request's deadline bounds the time to its response head
/// (`timeoutSeconds` is a time to first byte, as upstream's queue-proxy applies it);
/// this bounds what follows.
pub const STREAM_LIFETIME: std::time::Duration = std::time::Duration::from_secs(600);

/// Why a body stopped streaming.
pub type BodyError = Box<dyn std::error::Error + Send + Sync>;

/// A streaming body: what [`crate::Backend`]s take and return.
pub type Body = UnsyncBoxBody<Bytes, BodyError>;

/// A body of `bytes`, whole.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).map_err(|never| match never {}).boxed_unsync()
}

/// An empty body.
pub fn empty() -> Body {
    Empty::new().map_err(|never| match never {}).boxed_unsync()
}

/// Any body, boxed.
pub fn boxed<B>(body: B) -> Body
where
    B: HttpBody<Data = Bytes> + Send + 'static,
    B::Error: Into<BodyError>,
{
    body.map_err(Into::into).boxed_unsync()
}

/// A body passed its size limit while streaming.
#[derive(Debug, thiserror::Error)]
#[error("the body exceeds the limit of {limit} bytes")]
pub struct TooLarge {
    /// The limit, in bytes.
    pub limit: u64,
}

/// A body was still streaming when its request's deadline passed.
#[derive(Debug, thiserror::Error)]
#[error("the body was still streaming when the request deadline passed")]
pub struct DeadlinePassed;

/// Bounds `body` to `limit` bytes and to `deadline`: past either, it ends with
/// [`TooLarge`] or [`DeadlinePassed`] (the far side sees a reset, never a short body).
pub fn bounded(body: Body, limit: u64, deadline: Instant) -> Body {
    Bounded { inner: body, limit, seen: 0, deadline: Box::pin(tokio::time::sleep_until(deadline)) }.boxed_unsync()
}

struct Bounded {
    inner: Body,
    limit: u64,
    seen: u64,
    deadline: Pin<Box<Sleep>>,
}

impl HttpBody for Bounded {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if polled.is_pending() {
            return match this.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(DeadlinePassed.into()))),
                Poll::Pending => Poll::Pending,
            };
        }
        if let Poll::Ready(Some(Ok(frame))) = &polled
            && let Some(data) = frame.data_ref()
        {
            this.seen = this.seen.saturating_add(data.len() as u64);
            if this.seen > this.limit {
                return Poll::Ready(Some(Err(TooLarge { limit: this.limit }.into())));
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A response body went longer than its idle limit without a byte.
#[derive(Debug, thiserror::Error)]
#[error("the response body sent nothing for {0:?} (the Revision's idleTimeoutSeconds)")]
pub struct IdlePassed(pub std::time::Duration);

/// Bounds the gaps in `body`: once `idle` passes with no frame, it ends with
/// [`IdlePassed`] (the client sees a reset, and the body's source is dropped).
pub fn idle_bounded(body: Body, idle: std::time::Duration) -> Body {
    IdleBounded { inner: body, idle, timer: Box::pin(tokio::time::sleep(idle)) }.boxed_unsync()
}

struct IdleBounded {
    inner: Body,
    idle: std::time::Duration,
    timer: Pin<Box<Sleep>>,
}

impl HttpBody for IdleBounded {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Pending => match this.timer.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(IdlePassed(this.idle).into()))),
                Poll::Pending => Poll::Pending,
            },
            ready => {
                this.timer.as_mut().reset(Instant::now() + this.idle);
                ready
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The body length `headers` declare (`Content-Length`), when it is a number.
pub fn declared_length(headers: &http::HeaderMap) -> Option<u64> {
    headers.get(http::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse().ok())
}

/// [`crate::InvokeError::RequestTooLarge`] when `headers` declare a request body over `max` bytes.
pub fn refuse_declared_over(headers: &http::HeaderMap, max: u64) -> Result<(), crate::InvokeError> {
    match declared_length(headers) {
        Some(size) if size > max => Err(crate::InvokeError::RequestTooLarge { size, max }),
        _ => Ok(()),
    }
}

/// Whether `err`, or an error it wraps, is a `T`.
pub fn caused_by<T: std::error::Error + 'static>(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(err);
    while let Some(e) = next {
        if e.is::<T>() {
            return true;
        }
        next = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_body_past_its_limit_fails_instead_of_ending_short() {
        let deadline = Instant::now() + Duration::from_secs(60);
        let err = bounded(full(vec![0u8; 11]), 10, deadline).collect().await.expect_err("over the limit");
        assert!(caused_by::<TooLarge>(err.as_ref()), "{err}");
        let ok = bounded(full(vec![0u8; 10]), 10, deadline).collect().await.expect("at the limit");
        assert_eq!(ok.to_bytes().len(), 10);
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_silent_past_its_idle_limit_fails_and_one_that_keeps_sending_does_not() {
        let idle = Duration::from_secs(5);
        let stalled = http_body_util::StreamBody::new(futures::stream::pending::<Result<Frame<Bytes>, BodyError>>());
        let err = idle_bounded(boxed(stalled), idle).collect().await.expect_err("silent for 5 s");
        assert!(caused_by::<IdlePassed>(err.as_ref()), "{err}");
        // Three frames 4 s apart: 12 s in all, never 5 s silent.
        let ticking = futures::stream::unfold(0, |n| async move {
            if n == 3 {
                return None;
            }
            tokio::time::sleep(Duration::from_secs(4)).await;
            Some((Ok::<_, BodyError>(Frame::data(Bytes::from_static(b"x"))), n + 1))
        });
        let body = idle_bounded(boxed(http_body_util::StreamBody::new(ticking)), idle).collect().await.expect("kept alive");
        assert_eq!(body.to_bytes().len(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_body_fails_at_the_deadline() {
        let stalled = http_body_util::StreamBody::new(futures::stream::pending::<Result<Frame<Bytes>, BodyError>>());
        let deadline = Instant::now() + Duration::from_secs(5);
        let err = bounded(boxed(stalled), 10, deadline).collect().await.expect_err("the deadline passes");
        assert!(caused_by::<DeadlinePassed>(err.as_ref()), "{err}");
    }
}
