//! The accept loop every Lampyr HTTP server runs: at most a set number of connections at
//! once, a deadline for each request's head, and a bounded drain on shutdown.
//!
//! fiber-router (and through it fiberd and `ly run`), the controllers' admin endpoint and the
//! Event Grid adapter all accept connections here, so a client that opens connections and
//! never finishes a request head is closed at the same deadline everywhere, and
//! none of them holds more connections than it was given.

use std::error::Error as StdError;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::{Body, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Wait after a failed `accept` (EMFILE and friends) before the next, instead of spinning.
const ACCEPT_RETRY: Duration = Duration::from_millis(50);

/// Smallest buffer for a request head, whatever the header limit (hyper's own floor is 8 KiB).
const MIN_HEAD_BUFFER: usize = 16 * 1024;

/// How a server accepts and keeps its connections.
#[derive(Clone, Debug)]
pub struct ServeLimits {
    /// Connections served at once; more wait in the listen backlog until one ends.
    pub max_connections: usize,
    /// Longest wait for a request head (HTTP/1.1; a TLS handshake too, where the server has
    /// one): past it the connection is closed (hyper sends no answer).
    pub header_timeout: Duration,
    /// Longest wait on shutdown for connections with a request in flight.
    pub drain_timeout: Duration,
}

/// A connection [`accept_loop`] accepted, for the server to serve.
pub struct Accepted {
    /// The connection, `TCP_NODELAY` set (small answers must not wait on Nagle's algorithm).
    pub stream: TcpStream,
    /// The client's address.
    pub peer: SocketAddr,
    /// The connection's place under [`ServeLimits::max_connections`]: hold it while the
    /// connection (or a tunnel it became) is open.
    pub permit: OwnedSemaphorePermit,
    /// Lets the loop drain the connection on shutdown: watch the hyper connection with it.
    pub watcher: Watcher,
}

/// Accepts connections from `listener` until `shutdown` completes, at most
/// `limits.max_connections` at once, and runs `serve` on a task of its own for each; then
/// stops accepting and waits up to `limits.drain_timeout` for the watched connections to
/// finish their requests. `server` names the server in its logs.
pub async fn accept_loop<F, Fut>(
    server: &str,
    listener: TcpListener,
    limits: &ServeLimits,
    shutdown: impl Future<Output = ()>,
    mut serve: F,
) where
    F: FnMut(Accepted) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let graceful = GracefulShutdown::new();
    let limit = Arc::new(Semaphore::new(limits.max_connections));
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            permit = Arc::clone(&limit).acquire_owned() => match permit { Ok(p) => p, Err(_) => break },
            () = &mut shutdown => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::warn!(server, %error, "accept failed");
                    tokio::time::sleep(ACCEPT_RETRY).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(serve(Accepted { stream, peer, permit, watcher: graceful.watcher() }));
    }
    drop(listener);
    if tokio::time::timeout(limits.drain_timeout, graceful.shutdown()).await.is_err() {
        tracing::warn!(server, timeout = ?limits.drain_timeout, "drain deadline passed with requests in flight");
    }
}

/// HTTP/1.1 and HTTP/2 (prior knowledge) connection settings: a request head must arrive
/// within `header_timeout` and fit in about `max_head_bytes` (twice that, at least 16 KiB,
/// is refused while it is read, before it is buffered).
pub fn http_builder(header_timeout: Duration, max_head_bytes: usize) -> auto::Builder<TokioExecutor> {
    let max_buf = max_head_bytes.saturating_mul(2).max(MIN_HEAD_BUFFER);
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(header_timeout).max_buf_size(max_buf);
    builder.http2().max_header_list_size(u32::try_from(max_buf).unwrap_or(u32::MAX));
    builder
}

/// Serves `handle` on every connection of `listener` (HTTP/1.1, or HTTP/2 by prior
/// knowledge) within `limits` until `shutdown` completes, as [`accept_loop`] does. For
/// servers with one kind of listener and no upgrades: the admin endpoint, the adapters.
pub async fn serve_http<H, Fut, B>(
    server: &'static str,
    listener: TcpListener,
    limits: &ServeLimits,
    max_head_bytes: usize,
    shutdown: impl Future<Output = ()>,
    handle: H,
) where
    H: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<B>> + Send + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn StdError + Send + Sync>>,
{
    let builder = Arc::new(http_builder(limits.header_timeout, max_head_bytes));
    accept_loop(server, listener, limits, shutdown, move |conn: Accepted| {
        let (builder, handle) = (Arc::clone(&builder), handle.clone());
        async move {
            let service = hyper::service::service_fn(move |req| {
                let answer = handle(req);
                async move { Ok::<_, std::convert::Infallible>(answer.await) }
            });
            let served = conn.watcher.watch(builder.serve_connection(TokioIo::new(conn.stream), service).into_owned()).await;
            if let Err(error) = served {
                tracing::debug!(server, %error, peer = %conn.peer, "connection ended with an error");
            }
            drop(conn.permit);
        }
    })
    .await;
}
