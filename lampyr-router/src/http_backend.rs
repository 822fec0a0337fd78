//! A Revision served by an upstream HTTP/1.1 server (a plain container, or a
//! fiberd instance in a cluster), reached through pooled keep-alive connections
//! (one pool per thread that sends, so a connection stays on the thread that uses it).
//!
//! The upstream speaks HTTP/1.1, or HTTP/2 with prior knowledge (h2c) when
//! built with [`HttpBackend::speaking`]. [`crate::FiberdBackend`] forwards through
//! the same code, one `HttpBackend` per fiberd instance.
//!
//! Failures map onto [`InvokeError`] so the router answers them like fiber
//! failures, with one distinction callers can route on:
//! [`InvokeError::Unavailable`] (503, [`InvokeError::retryable`]) means no
//! connection could be made, so no byte of the request reached the upstream;
//! every failure after that is a non-retryable [`InvokeError::FiberFailed`] (502).
//! The request deadline bounds connecting too: a deadline that passes first is
//! [`InvokeError::Timeout`] (504), so keep [`HttpLimits::connect_timeout`] below it.
//!
//! An HTTP/1.1 `Upgrade` request (WebSocket) that the client's connection can hand over
//! keeps its `Connection: upgrade` and `Upgrade` fields on an HTTP/1.1 upstream; when the
//! upstream answers `101 Switching Protocols`, the two connections are joined byte for byte
//! until either side closes, past the request deadline (which bounds only the handshake).

use std::error::Error as StdError;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use crate::InvokeError;
use bytes::Bytes;
use http::header::{CONNECTION, CONTENT_LENGTH, HOST, HeaderName, HeaderValue, UPGRADE};
use http::uri::{self, Authority, PathAndQuery, Scheme};
use http::{HeaderMap, Method, StatusCode, Uri};
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use lampyr_abi::DecodeError;
use prometheus_client::metrics::gauge::Gauge;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

use crate::backend::{Backend, BackendStats, BoxFuture};
use crate::body::{self, Body, BodyError, DeadlinePassed, TooLarge, caused_by};
use crate::upstream_pool::{Leased, PoolSettings, SendError, UpstreamPool};

/// Responses of at most this many bytes, declared by `Content-Length`, are read whole
/// before they are answered; longer or undeclared ones stream.
pub const BUFFERED_RESPONSE: u64 = 64 * 1024;

/// The pause before a request is tried again on an upstream that took no connection.
const FIRST_CONNECT_PAUSE: Duration = Duration::from_millis(50);

/// Limits and pool settings of an [`HttpBackend`].
#[derive(Clone, Debug)]
pub struct HttpLimits {
    /// Largest upstream response body streamed, in bytes; a larger declared one
    /// is a 502, a larger streamed one is cut off with a reset.
    pub max_response_body: u64,
    /// Longest wait for a TCP connection to the upstream.
    pub connect_timeout: Duration,
    /// How long an idle pooled connection is kept open.
    pub pool_idle_timeout: Duration,
    /// Most idle pooled connections kept open.
    pub pool_max_idle: usize,
    /// Tries a request gets (through [`Backend::invoke`]) while the upstream refuses or does
    /// not accept connections, pausing 50 ms, then 200 ms, … between them within the
    /// deadline: nothing was sent, so a Service whose endpoint is being replaced, or whose
    /// Pod is Ready before its server listens (no readiness probe), is retried. The
    /// default 5 tries span about 4.25 s.
    pub connect_attempts: u32,
    /// Longest an upgraded connection (a WebSocket) stays open with no byte either way;
    /// then both sides are closed. Envoy's default stream idle timeout, 5 minutes.
    pub upgraded_idle_timeout: Duration,
    /// Counts the upgraded connections open (give it the router's
    /// [`crate::metrics::RouterMetrics::upgraded_connections`]).
    pub upgraded: Gauge,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            max_response_body: 8 * 1024 * 1024,
            connect_timeout: Duration::from_secs(1),
            // Below the 30 s after which fiberd (hyper's default) closes an idle connection, so
            // the router does not send on a connection as the upstream closes it.
            pool_idle_timeout: Duration::from_secs(20),
            pool_max_idle: 256,
            connect_attempts: 5,
            upgraded_idle_timeout: Duration::from_secs(300),
            upgraded: Gauge::default(),
        }
    }
}

/// Forwards a Revision's requests to one upstream HTTP/1.1 (or h2c) server.
pub struct HttpBackend {
    upstream: SocketAddr,
    authority: Authority,
    /// Pooled per thread that sends, so a connection's task lives on the thread that uses
    /// it ([`crate::workers`]).
    pool: UpstreamPool,
    max_request_body: u64,
    max_response_body: u64,
    connect_attempts: u32,
    upgraded_idle_timeout: Duration,
    upgraded: Gauge,
    in_flight: AtomicUsize,
}

impl HttpBackend {
    /// A backend for `upstream` accepting request bodies up to `max_request_body` bytes.
    /// Connections are made on first use and kept alive for reuse.
    pub fn new(upstream: SocketAddr, max_request_body: u64, limits: HttpLimits) -> Self {
        Self::speaking(upstream, max_request_body, limits, false)
    }

    /// Like [`HttpBackend::new`]; when `http2`, speaks HTTP/2 cleartext with prior
    /// knowledge (the upstream must accept h2c without an upgrade) and requests
    /// share multiplexed connections.
    pub fn speaking(upstream: SocketAddr, max_request_body: u64, limits: HttpLimits, http2: bool) -> Self {
        let pool = PoolSettings {
            connect_timeout: limits.connect_timeout,
            idle_timeout: limits.pool_idle_timeout,
            max_idle: limits.pool_max_idle,
            http2,
        };
        let authority = Authority::try_from(upstream.to_string()).expect("a socket address is a valid authority");
        HttpBackend {
            upstream,
            authority,
            pool: UpstreamPool::new(upstream, pool),
            max_request_body,
            max_response_body: limits.max_response_body,
            connect_attempts: limits.connect_attempts.max(1),
            upgraded_idle_timeout: limits.upgraded_idle_timeout,
            upgraded: limits.upgraded.clone(),
            in_flight: AtomicUsize::new(0),
        }
    }

    /// The upstream address.
    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    /// Whether requests go out as HTTP/2 cleartext.
    pub fn is_h2c(&self) -> bool {
        self.pool.is_h2c()
    }

    /// Requests in flight to this upstream.
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    /// Counts one request in flight until the guard is dropped, as [`HttpBackend::send`] does.
    #[cfg(test)]
    pub(crate) fn hold(&self) -> InFlight<'_> {
        InFlight::enter(&self.in_flight)
    }

    /// The request for this backend's upstream: `outgoing`'s head aimed at its
    /// address, and a body that goes back to `outgoing` if it is never read.
    fn addressed(&self, outgoing: &Outgoing) -> Result<hyper::Request<Lent>, InvokeError> {
        let target = outgoing.head.uri.path_and_query().cloned().unwrap_or_else(|| PathAndQuery::from_static("/"));
        let mut uri = uri::Parts::default();
        if self.pool.is_h2c() {
            // HTTP/2 names the upstream in its pseudo-headers; HTTP/1.1 sends the origin form
            // (an absolute target would override the Host the client sent).
            uri.scheme = Some(Scheme::HTTP);
            uri.authority = Some(self.authority.clone());
        }
        uri.path_and_query = Some(target);
        let uri = Uri::from_parts(uri).map_err(|e| unforwardable(format!("invalid request target: {e}")))?;
        let mut out = hyper::Request::new(outgoing.lend()?);
        *out.method_mut() = outgoing.head.method.clone();
        *out.uri_mut() = uri;
        *out.headers_mut() = outgoing.head.headers.clone();
        if self.pool.is_h2c() {
            // HTTP/2 has no connection-specific fields, and no Upgrade.
            strip_hop_by_hop(out.headers_mut());
        } else if !out.headers().contains_key(HOST) {
            // HTTP/1.1 requires a Host: a client that sent none gets the upstream's.
            let host = HeaderValue::from_str(self.authority.as_str()).map_err(|e| unforwardable(format!("upstream authority: {e}")))?;
            out.headers_mut().insert(HOST, host);
        }
        Ok(out)
    }

    /// Sends an [`Outgoing`] request to this upstream; the response head must
    /// arrive before `deadline`, and its body streams for up to [`body::STREAM_LIFETIME`] after.
    ///
    /// `Err(InvokeError::Unavailable)` means no connection could be made, so
    /// nothing was sent, the body is still in `outgoing`, and another upstream may be tried.
    pub(crate) async fn send(&self, outgoing: &Outgoing, deadline: Instant) -> Result<http::Response<Body>, InvokeError> {
        let _in_flight = InFlight::enter(&self.in_flight);
        let req = self.addressed(outgoing)?;
        // One timer for the head and, for a small answer, its body. Dropping the exchange at
        // the deadline closes its connection, so a late answer never reaches a pooled
        // connection's next request.
        match tokio::time::timeout_at(deadline, self.exchange(outgoing, req)).await {
            Ok(answer) => answer,
            // Still reading the client's body at the deadline: the client was too slow, not the upstream.
            Err(_) if outgoing.body_unfinished() => Err(InvokeError::RequestTimeout),
            Err(_) => Err(InvokeError::Timeout),
        }
    }

    /// [`HttpBackend::send`]'s exchange, without its deadline.
    async fn exchange(&self, outgoing: &Outgoing, req: hyper::Request<Lent>) -> Result<http::Response<Body>, InvokeError> {
        let head = req.method() == Method::HEAD;
        let (resp, lease) = match self.pool.send(req, false).await {
            Ok(answer) => answer,
            Err(stale) if stale.stale_connection() && idempotent(&outgoing.head.method) && outgoing.can_resend() => {
                tracing::debug!(upstream = %self.upstream, "a pooled connection closed before answering; sending again on a new one");
                self.pool.send(self.addressed(outgoing)?, true).await.map_err(|e| self.send_error(e))?
            }
            Err(e) => return Err(self.send_error(e)),
        };
        if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
            // The connection is the upgrade's now: the lease is dropped, never released.
            return self.switch_protocols(outgoing, resp);
        }
        let (mut parts, incoming) = resp.into_parts();
        let max = self.max_response_body;
        // A HEAD, 204 or 304 answer's Content-Length describes a body that is not sent.
        let bodiless = head || matches!(parts.status.as_u16(), 204 | 304);
        let declared = body::declared_length(&parts.headers);
        if let Some(len) = declared.filter(|len| *len > max && !bodiless) {
            return Err(response_too_large(len, max));
        }
        strip_hop_by_hop(&mut parts.headers);
        if bodiless || declared.is_some_and(|len| len <= BUFFERED_RESPONSE) {
            // A small answer of known length is read whole (as nginx buffers): the client
            // gets head and body in one write, and the upstream connection is free at once.
            let whole = incoming.collect().await.map_err(|e| self.body_error(&e))?.to_bytes();
            lease.release();
            return Ok(http::Response::from_parts(parts, body::full(whole)));
        }
        let body_deadline = Instant::now() + body::STREAM_LIFETIME;
        let streamed = body::boxed(Leased::new(incoming, lease));
        Ok(http::Response::from_parts(parts, body::bounded(streamed, max, body_deadline)))
    }

    /// The upstream's `101` to an upgrade: answered to the client as is, with a task that
    /// joins the client's connection to the upstream's once hyper hands both over.
    fn switch_protocols(
        &self,
        outgoing: &Outgoing,
        mut resp: hyper::Response<hyper::body::Incoming>,
    ) -> Result<http::Response<Body>, InvokeError> {
        let upstream = self.upstream;
        let Some((client_side, slot)) = outgoing.take_upgrade() else {
            return Err(InvokeError::FiberFailed(format!("upstream {upstream} switched protocols, but the request asked for no upgrade")));
        };
        let upstream_side = hyper::upgrade::on(&mut resp);
        let (mut parts, _) = resp.into_parts();
        let protocol = parts.headers.get(UPGRADE).cloned();
        strip_hop_by_hop(&mut parts.headers);
        mark_upgrade(&mut parts.headers, protocol);
        let open = self.upgraded.clone();
        let idle = self.upgraded_idle_timeout;
        tokio::spawn(async move {
            open.inc();
            join_upgraded(client_side, upstream_side, upstream, idle).await;
            open.dec();
            drop(slot);
        });
        Ok(http::Response::from_parts(parts, body::empty()))
    }

    /// An upstream response body that broke off.
    fn body_error(&self, err: &hyper::Error) -> InvokeError {
        InvokeError::FiberFailed(format!("reading the response body from upstream {} failed: {}", self.upstream, causes(err)))
    }

    /// Classifies a failed exchange: no connection (nothing sent) is retryable;
    /// a client body past its limit or deadline is the client's; the rest is the upstream's.
    fn send_error(&self, err: SendError) -> InvokeError {
        let err = match err {
            SendError::Connect(why) => return InvokeError::Unavailable(why),
            SendError::Exchange { error, .. } => error,
        };
        if caused_by::<TooLarge>(&err) {
            InvokeError::RequestTooLarge { size: self.max_request_body.saturating_add(1), max: self.max_request_body }
        } else if caused_by::<DeadlinePassed>(&err) {
            InvokeError::RequestTimeout
        } else {
            InvokeError::FiberFailed(format!("upstream {} failed: {}", self.upstream, causes(&err)))
        }
    }
}

/// Whether `method` is idempotent (RFC 9110, 9.2.2): sending it twice has the effect of once.
fn idempotent(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE)
}

/// Sends `outgoing` to the upstream `pick` gives for each try, trying again (up to
/// `attempts` times, pausing 50 ms, then 200 ms, … within `deadline`) while no connection
/// could be made: nothing was sent, so the body is still in `outgoing`. `pick` giving
/// none is [`InvokeError::Unavailable`] with `none_why`.
pub(crate) async fn send_retrying<B: std::ops::Deref<Target = HttpBackend>>(
    outgoing: &Outgoing,
    deadline: Instant,
    attempts: u32,
    mut pick: impl FnMut() -> Option<B>,
    none_why: &str,
) -> Result<http::Response<Body>, InvokeError> {
    let (mut attempt, mut pause) = (1, FIRST_CONNECT_PAUSE);
    loop {
        let answer = match pick() {
            Some(upstream) => upstream.send(outgoing, deadline).await,
            None => Err(InvokeError::Unavailable(none_why.to_string())),
        };
        match answer {
            Err(InvokeError::Unavailable(why)) if attempt < attempts && Instant::now() + pause < deadline => {
                tracing::debug!(attempt, %why, "no connection to the upstream; trying again");
                tokio::time::sleep(pause).await;
                (attempt, pause) = (attempt + 1, pause * 4);
            }
            answer => return answer,
        }
    }
}

impl Backend for HttpBackend {
    fn invoke(&self, req: http::Request<Body>, deadline: Instant) -> BoxFuture<'_, Result<http::Response<Body>, InvokeError>> {
        Box::pin(async move {
            let outgoing = Outgoing::new(req, self.max_request_body)?;
            send_retrying(&outgoing, deadline, self.connect_attempts, || Some(self), "").await
        })
    }

    fn max_request_body(&self) -> u64 {
        self.max_request_body
    }

    /// Requests in flight to the upstream. `queued`, `fibers` and `desired` are
    /// always 0: the upstream's capacity is not visible from here, and nothing
    /// here scales it.
    fn stats(&self) -> BackendStats {
        BackendStats { in_flight: self.in_flight(), ..BackendStats::default() }
    }
}

/// A request on its way upstream: the head as forwarded (hop-by-hop fields
/// removed, the host kept as `Host`), and the body, which stays here until a
/// connection reads it, so a refused connection leaves it for the next upstream.
/// A [`Outgoing::replayable`] one also keeps a copy of a small body as it is read,
/// so an upstream that read it and then refused to run the request can be replaced.
pub(crate) struct Outgoing {
    head: http::request::Parts,
    body: Arc<Mutex<Option<Body>>>,
    /// Set once an attempt has read the body to its end.
    finished: Arc<AtomicBool>,
    /// The body as read so far, while it is within its limit.
    copy: Option<Arc<Mutex<BodyCopy>>>,
    /// The client's connection, handed over when an upgrade it asked for is answered `101`,
    /// and its place under the listener's connection limit.
    upgrade: Mutex<Option<(OnUpgrade, Option<ConnectionSlot>)>>,
}

/// A client connection's place under its listener's connection limit. The listener puts it
/// in the extensions of a request asking for an upgrade; the tunnel a `101` opens holds it
/// until it closes, so upgraded connections keep counting after hyper lets go of them.
#[derive(Clone)]
pub struct ConnectionSlot(pub Arc<tokio::sync::OwnedSemaphorePermit>);

/// What a [`Lent`] body has yielded, kept up to `limit` bytes.
struct BodyCopy {
    chunks: Vec<Bytes>,
    size: usize,
    limit: usize,
    /// Over the limit, or trailers: the body cannot be sent again.
    lost: bool,
}

impl BodyCopy {
    fn keep(&mut self, frame: &Frame<Bytes>) {
        if self.lost {
            return;
        }
        match frame.data_ref() {
            Some(data) if self.size + data.len() <= self.limit => {
                self.size += data.len();
                self.chunks.push(data.clone());
            }
            _ => {
                self.lost = true;
                self.chunks = Vec::new();
            }
        }
    }
}

impl Outgoing {
    /// Prepares `req`; a declared body over `max_body` bytes is refused here.
    pub(crate) fn new(req: http::Request<Body>, max_body: u64) -> Result<Self, InvokeError> {
        let (mut head, body) = req.into_parts();
        body::refuse_declared_over(&head.headers, max_body)?;
        if head.uri.path_and_query().is_none_or(|pq| !pq.as_str().starts_with('/')) {
            return Err(unforwardable(format!("request target {:?} is not a path", head.uri)));
        }
        // HTTP/2 carries the host as :authority; the upstream sees it as Host either way.
        if !head.headers.contains_key(HOST)
            && let Some(value) = head.uri.authority().and_then(|a| HeaderValue::from_str(a.as_str()).ok())
        {
            head.headers.insert(HOST, value);
        }
        let upgrade = upgrade_request(&mut head);
        strip_hop_by_hop(&mut head.headers);
        if let Some((protocol, _, _)) = &upgrade {
            mark_upgrade(&mut head.headers, Some(protocol.clone()));
        }
        // The client recomputes the length from the body, and nothing waits for `100 Continue`.
        head.headers.remove(CONTENT_LENGTH);
        head.headers.remove(http::header::EXPECT);
        head.version = http::Version::HTTP_11;
        Ok(Outgoing {
            head,
            body: Arc::new(Mutex::new(Some(body))),
            finished: Arc::new(AtomicBool::new(false)),
            copy: None,
            upgrade: Mutex::new(upgrade.map(|(_, on, slot)| (on, slot))),
        })
    }

    /// The client's side of an upgrade it asked for and its connection's slot, once (a `101`
    /// answer takes them).
    fn take_upgrade(&self) -> Option<(OnUpgrade, Option<ConnectionSlot>)> {
        self.upgrade.lock().ok().and_then(|mut u| u.take())
    }

    /// Keeps a copy of the body as it is read, up to `limit` bytes, so that
    /// [`Outgoing::can_resend`] stays true after an attempt read a body that small.
    pub(crate) fn replayable(mut self, limit: usize) -> Self {
        self.copy = Some(Arc::new(Mutex::new(BodyCopy { chunks: Vec::new(), size: 0, limit, lost: false })));
        self
    }

    /// Whether another attempt can send the whole body: nobody read it yet, or an
    /// attempt read all of it and a copy was kept.
    pub(crate) fn can_resend(&self) -> bool {
        self.unread() || self.copy_complete()
    }

    /// No attempt has taken the body yet.
    fn unread(&self) -> bool {
        self.body.lock().map(|b| b.is_some()).unwrap_or(false)
    }

    /// An attempt has read the body to its end and all of it was copied.
    fn copy_complete(&self) -> bool {
        self.finished.load(Ordering::Acquire) && self.copy.as_ref().and_then(|c| c.lock().ok()).is_some_and(|c| !c.lost)
    }

    /// The whole body, when [`Outgoing::copy_complete`].
    fn copied(&self) -> Option<Bytes> {
        if !self.copy_complete() {
            return None;
        }
        let copy = self.copy.as_ref()?.lock().ok()?;
        Some(copy.chunks.concat().into())
    }

    /// Sets `name` to `value`, replacing what the client sent.
    pub(crate) fn set_header(&mut self, name: HeaderName, value: HeaderValue) {
        self.head.headers.insert(name, value);
    }

    /// A body for one attempt: the request's own while nobody read it, else its copy;
    /// fails when an earlier attempt read it and no whole copy was kept.
    fn lend(&self) -> Result<Lent, InvokeError> {
        if self.unread() {
            return Ok(Lent { slot: Arc::clone(&self.body), body: None, finished: Arc::clone(&self.finished), copy: self.copy.clone() });
        }
        match self.copied() {
            Some(bytes) => Ok(Lent {
                slot: Arc::new(Mutex::new(Some(body::full(bytes)))),
                body: None,
                finished: Arc::new(AtomicBool::new(false)),
                copy: None,
            }),
            None => Err(InvokeError::FiberFailed("the request body was already sent to another upstream".into())),
        }
    }

    /// An attempt has started reading the body and not reached its end.
    fn body_unfinished(&self) -> bool {
        let taken = self.body.lock().map(|b| b.is_none()).unwrap_or(false);
        taken && !self.finished.load(Ordering::Acquire)
    }
}

/// The body of one attempt: takes the request's body from its [`Outgoing`] on first read.
pub(crate) struct Lent {
    slot: Arc<Mutex<Option<Body>>>,
    body: Option<Body>,
    finished: Arc<AtomicBool>,
    /// Where what is read is copied, for a replayable [`Outgoing`].
    copy: Option<Arc<Mutex<BodyCopy>>>,
}

impl Lent {
    fn with_body<T>(&self, f: impl FnOnce(&Body) -> T, otherwise: T) -> T {
        match &self.body {
            Some(body) => f(body),
            None => match self.slot.lock() {
                Ok(slot) => slot.as_ref().map_or(otherwise, f),
                Err(_) => otherwise,
            },
        }
    }
}

impl HttpBody for Lent {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        if self.body.is_none() {
            let taken = self.slot.lock().ok().and_then(|mut slot| slot.take());
            match taken {
                Some(body) => self.body = Some(body),
                None => return Poll::Ready(Some(Err("the request body was taken by another attempt".into()))),
            }
        }
        let polled = match self.body.as_mut() {
            Some(body) => Pin::new(body).poll_frame(cx),
            None => Poll::Ready(None),
        };
        match &polled {
            Poll::Ready(None) => self.finished.store(true, Ordering::Release),
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(mut copy) = self.copy.as_ref().and_then(|c| c.lock().ok()) {
                    copy.keep(frame);
                }
                // A client that knows the length stops reading at the last frame, never seeing the end.
                if self.body.as_ref().is_some_and(HttpBody::is_end_stream) {
                    self.finished.store(true, Ordering::Release);
                }
            }
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.with_body(HttpBody::is_end_stream, false)
    }

    fn size_hint(&self) -> SizeHint {
        self.with_body(HttpBody::size_hint, SizeHint::default())
    }
}

/// Counts one request in flight until dropped (also when the caller abandons it).
pub(crate) struct InFlight<'a>(&'a AtomicUsize);

impl<'a> InFlight<'a> {
    pub(crate) fn enter(counter: &'a AtomicUsize) -> Self {
        counter.fetch_add(1, Ordering::AcqRel);
        InFlight(counter)
    }

    /// Takes over a count the caller has already added to `counter`.
    pub(crate) fn entered(counter: &'a AtomicUsize) -> Self {
        InFlight(counter)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// An HTTP/1.1 upgrade the client asked for (`Connection: upgrade` with an `Upgrade`
/// protocol) and whose connection its server can hand over: the protocol, that hand-over and
/// the connection's slot under its listener's limit (when it has one).
fn upgrade_request(head: &mut http::request::Parts) -> Option<(HeaderValue, OnUpgrade, Option<ConnectionSlot>)> {
    let protocol = head.headers.get(UPGRADE)?.clone();
    let asked = connection_tokens(&head.headers).any(|token| token.eq_ignore_ascii_case("upgrade"));
    if !asked || head.version != http::Version::HTTP_11 {
        return None;
    }
    Some((protocol, head.extensions.remove::<OnUpgrade>()?, head.extensions.remove::<ConnectionSlot>()))
}

/// Joins an upgraded client connection to the upgraded upstream one until either closes,
/// or until neither has sent a byte for `idle`.
async fn join_upgraded(client: OnUpgrade, upstream: OnUpgrade, addr: SocketAddr, idle: Duration) {
    let (client, upstream) = match tokio::try_join!(client, upstream) {
        Ok(both) => both,
        Err(e) => {
            tracing::debug!(upstream = %addr, error = %e, "an upgraded connection was not handed over");
            return;
        }
    };
    let clock = Arc::new(Activity::new());
    let mut client = Active { inner: TokioIo::new(client), clock: Arc::clone(&clock) };
    let mut upstream = Active { inner: TokioIo::new(upstream), clock: Arc::clone(&clock) };
    tokio::select! {
        copied = tokio::io::copy_bidirectional(&mut client, &mut upstream) => match copied {
            Ok((sent, received)) => tracing::debug!(upstream = %addr, sent, received, "upgraded connection closed"),
            Err(e) => tracing::debug!(upstream = %addr, error = %e, "upgraded connection broke off"),
        },
        () = clock.idle_for(idle) => tracing::debug!(upstream = %addr, ?idle, "upgraded connection idle past its limit; closed both sides"),
    }
}

/// When bytes last moved through a joined pair of connections.
struct Activity {
    start: Instant,
    /// Milliseconds after `start`.
    last: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Activity { start: Instant::now(), last: AtomicU64::new(0) }
    }

    fn touch(&self) {
        self.last.store(u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// Returns once no bytes have moved for `limit`.
    async fn idle_for(&self, limit: Duration) {
        loop {
            let since = self.start.elapsed().saturating_sub(Duration::from_millis(self.last.load(Ordering::Relaxed)));
            if since >= limit {
                return;
            }
            tokio::time::sleep(limit - since).await;
        }
    }
}

/// A connection that reports each read or write that moves bytes to its [`Activity`].
struct Active<T> {
    inner: T,
    clock: Arc<Activity>,
}

impl<T: AsyncRead + Unpin> AsyncRead for Active<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.clock.touch();
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Active<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(polled, Poll::Ready(Ok(1..))) {
            self.clock.touch();
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Removes the connection-specific fields (RFC 9110 §7.6.1) and those the `Connection` field names.
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = connection_tokens(headers).filter_map(|name| HeaderName::from_bytes(name.as_bytes()).ok()).collect();
    for name in named {
        headers.remove(name);
    }
    for name in HOP_BY_HOP {
        headers.remove(*name);
    }
}

/// The options the `Connection` fields list, trimmed.
fn connection_tokens(headers: &HeaderMap) -> impl Iterator<Item = &str> {
    headers.get_all(CONNECTION).iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(',')).map(str::trim)
}

/// Asks for (or, in a `101`, confirms) an upgrade, to `protocol` when it is named, on the next hop.
fn mark_upgrade(headers: &mut HeaderMap, protocol: Option<HeaderValue>) {
    headers.insert(CONNECTION, HeaderValue::from_static("upgrade"));
    if let Some(protocol) = protocol {
        headers.insert(UPGRADE, protocol);
    }
}

const HOP_BY_HOP: &[&str] = &[
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

fn unforwardable(why: String) -> InvokeError {
    InvokeError::FiberFailed(format!("the request cannot be forwarded upstream: {why}"))
}

fn response_too_large(len: u64, max: u64) -> InvokeError {
    let clamp = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
    InvokeError::BadResponse(DecodeError::TooLarge { field: "upstream response body", len: clamp(len), max: clamp(max) })
}

/// `err` and its sources, joined with `: ` (the client's own message names only the error kind).
fn causes(err: &(dyn StdError + 'static)) -> String {
    let mut out = err.to_string();
    let mut source = err.source();
    while let Some(e) = source {
        out.push_str(": ");
        out.push_str(&e.to_string());
        source = e.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_fields_and_those_connection_names_are_removed() {
        let mut h = HeaderMap::new();
        h.insert("connection", HeaderValue::from_static("keep-alive, X-Private"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert("x-private", HeaderValue::from_static("1"));
        h.insert("transfer-encoding", HeaderValue::from_static("chunked"));
        h.insert("x-kept", HeaderValue::from_static("2"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h.keys().map(|k| k.as_str()).collect::<Vec<_>>(), ["x-kept"]);
    }

    #[tokio::test]
    async fn requests_keep_method_target_and_headers_and_an_unread_body_stays_for_the_next_attempt() {
        let backend = HttpBackend::new(SocketAddr::from(([127, 0, 0, 1], 8080)), 1024, HttpLimits::default());
        let req = http::Request::builder()
            .method("PATCH")
            .uri("http://hello.default.example.com/a/b?c=d")
            .version(http::Version::HTTP_2)
            .header("X-Multi", "1")
            .header("X-Multi", "2")
            .header("Content-Length", "3")
            .header("Upgrade", "websocket")
            .body(body::full("abc"))
            .expect("request");
        let outgoing = Outgoing::new(req, 1024).expect("forwardable");
        let first = backend.addressed(&outgoing).expect("addressed");
        assert_eq!(first.method(), Method::PATCH);
        assert_eq!(first.uri(), "/a/b?c=d", "HTTP/1.1 sends the origin form");
        let h2c = HttpBackend::speaking(SocketAddr::from(([127, 0, 0, 1], 8080)), 1024, HttpLimits::default(), true);
        assert_eq!(h2c.addressed(&outgoing).expect("addressed").uri(), "http://127.0.0.1:8080/a/b?c=d", "h2c names the upstream");
        assert_eq!(first.headers().get("host").map(|v| v.as_bytes()), Some(b"hello.default.example.com".as_slice()));
        assert_eq!(first.headers().get_all("x-multi").iter().count(), 2);
        assert!(!first.headers().contains_key("content-length") && !first.headers().contains_key("upgrade"));
        assert_eq!(first.body().size_hint().exact(), Some(3), "the length is known before the body is read");
        drop(first);
        use http_body_util::BodyExt;
        let second = backend.addressed(&outgoing).expect("the unread body is still there");
        assert_eq!(second.into_body().collect().await.expect("body").to_bytes(), "abc");
        assert!(backend.addressed(&outgoing).is_err(), "a body read once cannot be sent again");

        let too_big = http::Request::builder().header("content-length", "2000").body(body::empty()).expect("request");
        assert_eq!(Outgoing::new(too_big, 1024).err().map(|e| e.http_status()), Some(413));
    }

    #[tokio::test]
    async fn a_replayable_body_read_whole_is_sent_again_and_one_over_its_limit_is_not() {
        use http_body_util::BodyExt;
        let backend = HttpBackend::new(SocketAddr::from(([127, 0, 0, 1], 8080)), 1024, HttpLimits::default());
        let post = |body: &'static str| http::Request::post("/").body(body::full(body)).expect("request");
        let outgoing = Outgoing::new(post("abc"), 1024).expect("forwardable").replayable(3);
        assert!(outgoing.can_resend(), "nobody read it yet");
        // Read as a client that knows the length reads it: up to the last frame, not to the end.
        let mut first = backend.addressed(&outgoing).expect("addressed").into_body();
        let mut read = Vec::new();
        while !first.is_end_stream() {
            let frame = first.frame().await.expect("a frame").expect("data");
            read.extend_from_slice(frame.data_ref().expect("data"));
        }
        assert_eq!(read, b"abc");
        assert!(outgoing.can_resend(), "read whole, within the limit");
        for _ in 0..2 {
            let again = backend.addressed(&outgoing).expect("the copy").into_body();
            assert_eq!(again.collect().await.expect("body").to_bytes(), "abc");
        }

        let large = Outgoing::new(post("abcd"), 1024).expect("forwardable").replayable(3);
        let first = backend.addressed(&large).expect("addressed").into_body();
        assert_eq!(first.collect().await.expect("body").to_bytes(), "abcd");
        assert!(!large.can_resend(), "over the limit: no copy");
        assert!(backend.addressed(&large).is_err());

        let plain = Outgoing::new(post("abc"), 1024).expect("forwardable");
        drop(backend.addressed(&plain).expect("addressed").into_body().collect().await);
        assert!(!plain.can_resend(), "only a replayable request keeps a copy");
    }
}
