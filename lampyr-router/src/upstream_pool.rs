//! Connections to one upstream: a pool of hyper HTTP/1.1 connections (or one shared HTTP/2
//! cleartext connection) per serving thread, each driven by a task on that thread's runtime
//! (one pool for a multi-thread runtime, whose tasks move between its threads).
//!
//! A request takes the most recently used idle connection, or connects. An HTTP/1.1
//! connection goes back to its pool once its answer is read to the end ([`Lease`]); one
//! whose answer is abandoned, or that switched protocols, is closed instead. A request that
//! a pooled connection closed before sending (the upstream closed it while it was idle) is
//! sent again on another connection: no byte of it was sent. Idle connections are closed
//! after the idle timeout, and at most the pool's limit stay idle.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use thread_local::ThreadLocal;
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::http_backend::Lent;

/// How connections to an upstream are made and kept.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PoolSettings {
    /// Longest wait for a TCP connection.
    pub connect_timeout: Duration,
    /// How long an idle connection is kept open.
    pub idle_timeout: Duration,
    /// Most idle connections kept, per thread.
    pub max_idle: usize,
    /// HTTP/2 cleartext with prior knowledge instead of HTTP/1.1.
    pub http2: bool,
}

/// Why a request got no answer.
#[derive(Debug)]
pub(crate) enum SendError {
    /// No connection could be made: nothing was sent.
    Connect(String),
    /// The exchange failed on a connection.
    Exchange {
        /// Why.
        error: hyper::Error,
        /// How long the connection had been idle in the pool; `None`: a new connection.
        idle: Option<Duration>,
    },
}

/// A pooled connection idle at least this long that closes unanswered was most likely
/// closed by the upstream as idle (servers keep idle connections for seconds, not less).
const STALE_AFTER: Duration = Duration::from_secs(1);

impl SendError {
    /// A connection idle in the pool for a while closed before any of the answer arrived:
    /// most likely the upstream closed it as idle while the request went out, so an
    /// idempotent request may be sent again on a new connection (RFC 9110, 9.2.2). One used
    /// moments before that drops a request failed with the request in it.
    pub(crate) fn stale_connection(&self) -> bool {
        matches!(self, SendError::Exchange { error, idle: Some(idle) } if *idle >= STALE_AFTER && error.is_incomplete_message())
    }
}

/// Connections to one upstream: pooled per thread for single-threaded runtimes (each
/// serving thread's), one pool for every multi-thread runtime's worker (tasks move between them).
pub(crate) struct UpstreamPool {
    upstream: SocketAddr,
    settings: PoolSettings,
    per_thread: ThreadLocal<Arc<Pool>>,
    shared: OnceLock<Arc<Pool>>,
}

/// The connections of one serving thread (or of a multi-thread runtime).
struct Pool {
    /// HTTP/1.1 connections back from their last exchange, most recently used last.
    idle: Mutex<Vec<Idle>>,
    /// Most connections kept in `idle`.
    max_idle: usize,
    /// The HTTP/2 connection every request of this thread shares.
    shared: Mutex<Option<http2::SendRequest<Lent>>>,
}

struct Idle {
    sender: http1::SendRequest<Lent>,
    since: Instant,
}

/// The HTTP/1.1 connection an answer arrived on: [`Lease::release`] it to its pool once the
/// answer's body is read to the end; dropping it closes the connection after this exchange.
pub(crate) struct Lease(Option<(http1::SendRequest<Lent>, Weak<Pool>)>);

impl UpstreamPool {
    /// No connection yet; they are made on first use, on each thread that sends.
    pub(crate) fn new(upstream: SocketAddr, settings: PoolSettings) -> Self {
        UpstreamPool { upstream, settings, per_thread: ThreadLocal::new(), shared: OnceLock::new() }
    }

    /// Whether requests go out as HTTP/2 cleartext.
    pub(crate) fn is_h2c(&self) -> bool {
        self.settings.http2
    }

    /// Sends `req` and waits for the answer's head; `fresh` skips idle connections.
    pub(crate) async fn send(&self, req: hyper::Request<Lent>, fresh: bool) -> Result<(hyper::Response<Incoming>, Lease), SendError> {
        let pool = self.pool();
        if self.settings.http2 {
            return self.send_h2(&pool, req).await.map(|resp| (resp, Lease(None)));
        }
        let mut req = req;
        loop {
            let pooled = if fresh { None } else { pool.take(self.settings.idle_timeout) };
            let idle = pooled.as_ref().map(|(_, idle)| *idle);
            let mut sender = match pooled {
                Some((sender, _)) => sender,
                None => self.connect_h1().await?,
            };
            // A connection whose last answer was just read is ready once its task has run.
            if idle.is_some() && sender.ready().await.is_err() {
                continue;
            }
            match sender.try_send_request(req).await {
                Ok(resp) => return Ok((resp, Lease(Some((sender, Arc::downgrade(&pool)))))),
                Err(mut failed) => match failed.take_message() {
                    // Closed by the upstream before this request was written: try another.
                    Some(unsent) if idle.is_some() => req = unsent,
                    _ => return Err(SendError::Exchange { error: failed.into_error(), idle }),
                },
            }
        }
    }

    /// Sends over this thread's HTTP/2 connection, connecting when there is none (or it closed).
    async fn send_h2(&self, pool: &Pool, mut req: hyper::Request<Lent>) -> Result<hyper::Response<Incoming>, SendError> {
        loop {
            let shared = lock(&pool.shared).as_ref().filter(|s| !s.is_closed()).cloned();
            let reused = shared.is_some();
            let mut sender = match shared {
                Some(sender) => sender,
                None => {
                    let sender = self.connect_h2().await?;
                    *lock(&pool.shared) = Some(sender.clone());
                    sender
                }
            };
            if sender.ready().await.is_err() && reused {
                lock(&pool.shared).take();
                continue;
            }
            match sender.try_send_request(req).await {
                Ok(resp) => return Ok(resp),
                Err(mut failed) => match failed.take_message() {
                    Some(unsent) if reused => {
                        lock(&pool.shared).take();
                        req = unsent;
                    }
                    _ => return Err(SendError::Exchange { error: failed.into_error(), idle: None }),
                },
            }
        }
    }

    /// The pool this task uses: its thread's on a single-threaded runtime, else the shared one.
    fn pool(&self) -> Arc<Pool> {
        let single = tokio::runtime::Handle::current().runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread;
        let pool = if single { self.per_thread.get_or(|| self.new_pool()) } else { self.shared.get_or_init(|| self.new_pool()) };
        Arc::clone(pool)
    }

    /// An empty pool, with the task that closes its idle connections.
    fn new_pool(&self) -> Arc<Pool> {
        let pool = Arc::new(Pool { idle: Mutex::default(), max_idle: self.settings.max_idle, shared: Mutex::default() });
        tokio::spawn(close_idle(Arc::downgrade(&pool), self.settings.idle_timeout));
        pool
    }

    async fn tcp(&self) -> Result<TokioIo<TcpStream>, SendError> {
        let upstream = self.upstream;
        let stream = match tokio::time::timeout(self.settings.connect_timeout, TcpStream::connect(upstream)).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => return Err(SendError::Connect(format!("could not connect to upstream {upstream}: {e}"))),
            Err(_) => {
                let waited = self.settings.connect_timeout;
                return Err(SendError::Connect(format!("could not connect to upstream {upstream} within {waited:?}")));
            }
        };
        // Small requests must not wait on Nagle's algorithm.
        let _ = stream.set_nodelay(true);
        Ok(TokioIo::new(stream))
    }

    async fn connect_h1(&self) -> Result<http1::SendRequest<Lent>, SendError> {
        let io = self.tcp().await?;
        let (mut sender, conn) = http1::Builder::new().handshake(io).await.map_err(|e| self.handshake_failed(&e))?;
        let upstream = self.upstream;
        tokio::spawn(async move {
            if let Err(error) = conn.with_upgrades().await {
                tracing::debug!(%error, %upstream, "upstream connection ended with an error");
            }
        });
        sender.ready().await.map_err(|e| self.handshake_failed(&e))?;
        Ok(sender)
    }

    async fn connect_h2(&self) -> Result<http2::SendRequest<Lent>, SendError> {
        let io = self.tcp().await?;
        let (sender, conn) = http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .handshake(io)
            .await
            .map_err(|e| self.handshake_failed(&e))?;
        let upstream = self.upstream;
        tokio::spawn(async move {
            if let Err(error) = conn.await {
                tracing::debug!(%error, %upstream, "upstream HTTP/2 connection ended with an error");
            }
        });
        Ok(sender)
    }

    fn handshake_failed(&self, e: &hyper::Error) -> SendError {
        SendError::Connect(format!("could not start HTTP with upstream {}: {e}", self.upstream))
    }
}

impl Pool {
    /// The most recently used idle connection and how long it was idle; drops closed ones
    /// it meets, and every one when the newest has expired (the rest are older).
    fn take(&self, idle_timeout: Duration) -> Option<(http1::SendRequest<Lent>, Duration)> {
        let mut idle = lock(&self.idle);
        let now = Instant::now();
        while let Some(newest) = idle.pop() {
            let idle_for = now.duration_since(newest.since);
            if idle_for >= idle_timeout {
                idle.clear();
                return None;
            }
            if !newest.sender.is_closed() {
                return Some((newest.sender, idle_for));
            }
        }
        None
    }

    fn put(&self, sender: http1::SendRequest<Lent>) {
        let mut idle = lock(&self.idle);
        if idle.len() < self.max_idle && !sender.is_closed() {
            idle.push(Idle { sender, since: Instant::now() });
        }
    }
}

impl Lease {
    /// Gives the connection back to its pool: its answer was read to the end.
    pub(crate) fn release(mut self) {
        if let Some((sender, pool)) = self.0.take()
            && let Some(pool) = pool.upgrade()
        {
            pool.put(sender);
        }
    }
}

/// An answer's body that releases its [`Lease`] when read to the end.
pub(crate) struct Leased {
    body: Incoming,
    lease: Option<Lease>,
}

impl Leased {
    /// `body`, releasing `lease` at its end.
    pub(crate) fn new(body: Incoming, lease: Lease) -> Self {
        Leased { body, lease: Some(lease) }
    }
}

impl HttpBody for Leased {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        if (matches!(polled, Poll::Ready(None)) || self.body.is_end_stream())
            && let Some(lease) = self.lease.take()
        {
            lease.release();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// Closes `pool`'s connections idle past `timeout`, every `timeout`, until the pool is gone.
async fn close_idle(pool: Weak<Pool>, timeout: Duration) {
    let mut ticks = tokio::time::interval(timeout.max(Duration::from_millis(100)));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        let Some(pool) = pool.upgrade() else { return };
        let now = Instant::now();
        lock(&pool.idle).retain(|c| !c.sender.is_closed() && now.duration_since(c.since) < timeout);
    }
}

/// The data behind `mutex`, also after a panic elsewhere poisoned it (every update here is one
/// push, remove or replace, so the data stays whole).
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
