//! What serves a Revision's requests: local fiber pools, or (in a cluster)
//! fiberd instances reached over the network.

use std::future::Future;
use std::pin::Pin;

use crate::InvokeError;
use crate::body::Body;
use tokio::time::Instant;

/// A boxed future, as returned by [`Backend::invoke`].
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Counts a backend reports for metrics and scaling.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BackendStats {
    /// Requests executing.
    pub in_flight: usize,
    /// Requests waiting for a fiber.
    pub queued: usize,
    /// Fibers alive.
    pub fibers: usize,
    /// Fibers the scaler wants.
    pub desired: usize,
}

/// Serves one Revision's requests.
pub trait Backend: Send + Sync {
    /// Serves `req` before `deadline`; dropping the future abandons the request.
    /// The request body arrives bounded by [`Backend::max_request_body`] and the
    /// deadline (it fails with [`crate::body::TooLarge`] or
    /// [`crate::body::DeadlinePassed`] past them); the response body streams.
    fn invoke(&self, req: http::Request<Body>, deadline: Instant) -> BoxFuture<'_, Result<http::Response<Body>, InvokeError>>;
    /// Largest request body accepted, in bytes.
    fn max_request_body(&self) -> u64;
    /// Current counts.
    fn stats(&self) -> BackendStats;
    /// True when a request now would have to wake the Revision from zero.
    fn is_cold(&self) -> bool {
        false
    }
}
