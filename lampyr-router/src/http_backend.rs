//! A Revision served by an upstream HTTP/1.1 server (a plain container, or a
//! fiberd instance in a cluster), reached through a pooled keep-alive client.
//!
//! The upstream speaks HTTP/1.1, or HTTP/2 with prior knowledge (h2c) when
//! built with [`HttpBackend::h2c`]. [`crate::FiberdBackend`] forwards through
//! the same code, one `HttpBackend` per fiberd instance.
//!
//! Failures map onto [`InvokeError`] so the router answers them like fiber
//! failures, with one distinction callers can route on:
//! [`InvokeError::Unavailable`] (503, [`InvokeError::retryable`]) means no
//! connection could be made, so no byte of the request reached the upstream;
//! every failure after that is a non-retryable [`InvokeError::FiberFailed`] (502).
//! The request deadline bounds connecting too: a deadline that passes first is
//! [`InvokeError::Timeout`] (504), so keep [`HttpLimits::connect_timeout`] below it.

use std::error::Error as StdError;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::InvokeError;
use bytes::Bytes;
use http::header::{CONNECTION, CONTENT_LENGTH, HeaderName, HeaderValue};
use http::uri::{Authority, Scheme};
use http::{HeaderMap, Method, Uri};
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use lampyr_abi::{DecodeError, Header, Request, Response};
use tokio::time::Instant;

use crate::backend::{Backend, BackendStats, BoxFuture};

/// Limits and pool settings of an [`HttpBackend`].
#[derive(Clone, Debug)]
pub struct HttpLimits {
    /// Largest upstream response body read, in bytes; a larger one is a 502.
    pub max_response_body: u64,
    /// Longest wait for a TCP connection to the upstream.
    pub connect_timeout: Duration,
    /// How long an idle pooled connection is kept open.
    pub pool_idle_timeout: Duration,
    /// Most idle pooled connections kept open.
    pub pool_max_idle: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            max_response_body: 8 * 1024 * 1024,
            connect_timeout: Duration::from_secs(1),
            pool_idle_timeout: Duration::from_secs(30),
            pool_max_idle: 256,
        }
    }
}

/// Forwards a Revision's requests to one upstream HTTP/1.1 (or h2c) server.
pub struct HttpBackend {
    upstream: SocketAddr,
    authority: Authority,
    client: Client<HttpConnector, Full<Bytes>>,
    http2: bool,
    max_request_body: u64,
    max_response_body: u64,
    in_flight: AtomicUsize,
}

impl HttpBackend {
    /// A backend for `upstream` accepting request bodies up to `max_request_body` bytes.
    /// Connections are made on first use and kept alive for reuse.
    pub fn new(upstream: SocketAddr, max_request_body: u64, limits: HttpLimits) -> Self {
        Self::build(upstream, max_request_body, limits, false)
    }

    /// Like [`HttpBackend::new`], speaking HTTP/2 cleartext with prior knowledge
    /// (the upstream must accept h2c without an upgrade): requests share
    /// multiplexed connections.
    pub fn h2c(upstream: SocketAddr, max_request_body: u64, limits: HttpLimits) -> Self {
        Self::build(upstream, max_request_body, limits, true)
    }

    fn build(upstream: SocketAddr, max_request_body: u64, limits: HttpLimits, http2: bool) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(limits.connect_timeout));
        connector.enforce_http(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(limits.pool_idle_timeout)
            .pool_max_idle_per_host(limits.pool_max_idle)
            .http2_only(http2)
            .build(connector);
        let authority = Authority::try_from(upstream.to_string()).expect("a socket address is a valid authority");
        HttpBackend {
            upstream,
            authority,
            client,
            http2,
            max_request_body,
            max_response_body: limits.max_response_body,
            in_flight: AtomicUsize::new(0),
        }
    }

    /// The upstream address.
    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    /// Whether requests go out as HTTP/2 cleartext.
    pub fn is_h2c(&self) -> bool {
        self.http2
    }

    /// Requests in flight to this upstream.
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    /// The upstream request for this backend's address.
    #[cfg(test)]
    fn upstream_request(&self, req: Request) -> Result<hyper::Request<Full<Bytes>>, InvokeError> {
        let prepared = prepare(req)?;
        self.addressed(&prepared)
    }

    /// A copy of `prepared` aimed at this backend's upstream (the body is shared, not copied).
    fn addressed(&self, prepared: &hyper::Request<Full<Bytes>>) -> Result<hyper::Request<Full<Bytes>>, InvokeError> {
        let target = prepared.uri().path_and_query().map_or("/", |pq| pq.as_str());
        let uri = Uri::builder()
            .scheme(Scheme::HTTP)
            .authority(self.authority.clone())
            .path_and_query(target)
            .build()
            .map_err(|e| unforwardable(format!("invalid request target {target:?}: {e}")))?;
        let mut out = hyper::Request::new(prepared.body().clone());
        *out.method_mut() = prepared.method().clone();
        *out.uri_mut() = uri;
        *out.headers_mut() = prepared.headers().clone();
        Ok(out)
    }

    /// Sends a [`prepare`]d request to this upstream before `deadline`.
    ///
    /// `Err(InvokeError::Unavailable)` means no connection could be made, so
    /// nothing was sent and another upstream may be tried.
    pub(crate) async fn send(&self, prepared: &hyper::Request<Full<Bytes>>, deadline: Instant) -> Result<Response, InvokeError> {
        let _in_flight = InFlight::enter(&self.in_flight);
        let req = self.addressed(prepared)?;
        // Dropping the exchange at the deadline closes its connection, so a late
        // answer never reaches a pooled connection's next request.
        tokio::time::timeout_at(deadline, self.exchange(req)).await.unwrap_or(Err(InvokeError::Timeout))
    }

    /// Sends `req` and reads the whole, bounded response.
    async fn exchange(&self, req: hyper::Request<Full<Bytes>>) -> Result<Response, InvokeError> {
        let head = req.method() == Method::HEAD;
        let resp = self.client.request(req).await.map_err(|e| self.send_error(&e))?;
        let (parts, body) = resp.into_parts();
        let max = self.max_response_body;
        // A HEAD, 204 or 304 answer's Content-Length describes a body that is not sent.
        let bodiless = head || matches!(parts.status.as_u16(), 204 | 304);
        let declared = parts.headers.get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        if let Some(len) = declared.filter(|len| *len > max && !bodiless) {
            return Err(response_too_large(len, max));
        }
        let limit = usize::try_from(max).unwrap_or(usize::MAX);
        let body = match Limited::new(body, limit).collect().await {
            Ok(collected) => collected.to_bytes(),
            // Streamed without a length: all that is known is that it passed the limit.
            Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => {
                return Err(response_too_large(max.saturating_add(1), max));
            }
            Err(e) => {
                return Err(InvokeError::FiberFailed(format!(
                    "reading the response body from upstream {} failed: {}",
                    self.upstream,
                    causes(e.as_ref())
                )));
            }
        };
        let mut headers = parts.headers;
        strip_hop_by_hop(&mut headers);
        let headers =
            headers.iter().map(|(name, value)| Header { name: name.as_str().to_string(), value: value.as_bytes().to_vec() }).collect();
        Ok(Response { status: parts.status.as_u16(), headers, body: body.to_vec() })
    }

    /// Classifies a failed exchange: no connection (nothing sent) is retryable, the rest is not.
    fn send_error(&self, err: &hyper_util::client::legacy::Error) -> InvokeError {
        if err.is_connect() {
            InvokeError::Unavailable(format!("could not connect to upstream {}: {}", self.upstream, causes(err)))
        } else {
            InvokeError::FiberFailed(format!("upstream {} failed: {}", self.upstream, causes(err)))
        }
    }
}

impl Backend for HttpBackend {
    fn invoke(&self, req: Request, deadline: Instant) -> BoxFuture<'_, Result<Response, InvokeError>> {
        Box::pin(async move {
            let size = req.body.len() as u64;
            if size > self.max_request_body {
                return Err(InvokeError::RequestTooLarge { size, max: self.max_request_body });
            }
            let req = prepare(req)?;
            self.send(&req, deadline).await
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

/// Builds the upstream request from a guest-shaped one: same method, path and
/// query (origin form; [`HttpBackend::send`] adds the upstream's address),
/// headers minus hop-by-hop ones.
pub(crate) fn prepare(req: Request) -> Result<hyper::Request<Full<Bytes>>, InvokeError> {
    let method = Method::from_bytes(req.method.as_bytes()).map_err(|_| unforwardable(format!("invalid method {:?}", req.method)))?;
    if !req.uri.starts_with('/') {
        return Err(unforwardable(format!("request target {:?} is not a path", req.uri)));
    }
    let uri = Uri::try_from(req.uri.as_str()).map_err(|e| unforwardable(format!("invalid request target {:?}: {e}", req.uri)))?;
    let mut headers = HeaderMap::with_capacity(req.headers.len());
    for h in req.headers {
        let name = HeaderName::from_bytes(h.name.as_bytes()).map_err(|_| unforwardable(format!("invalid header name {:?}", h.name)))?;
        let value = HeaderValue::from_bytes(&h.value).map_err(|_| unforwardable(format!("invalid value of header {name}")))?;
        headers.append(name, value);
    }
    strip_hop_by_hop(&mut headers);
    // The body is whole: the length is recomputed, and nothing waits for `100 Continue`.
    headers.remove(CONTENT_LENGTH);
    headers.remove(http::header::EXPECT);
    let mut out = hyper::Request::new(Full::new(Bytes::from(req.body)));
    *out.method_mut() = method;
    *out.uri_mut() = uri;
    *out.headers_mut() = headers;
    Ok(out)
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

/// Removes the connection-specific fields (RFC 9110 §7.6.1) and those the `Connection` field names.
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in HOP_BY_HOP {
        headers.remove(*name);
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

    #[test]
    fn requests_keep_method_target_and_headers() {
        let backend = HttpBackend::new(SocketAddr::from(([127, 0, 0, 1], 8080)), 1024, HttpLimits::default());
        let req = Request {
            method: "PATCH".into(),
            uri: "/a/b?c=d".into(),
            headers: vec![
                Header { name: "Host".into(), value: b"hello.default.example.com".to_vec() },
                Header { name: "X-Multi".into(), value: b"1".to_vec() },
                Header { name: "X-Multi".into(), value: b"2".to_vec() },
                Header { name: "Content-Length".into(), value: b"3".to_vec() },
                Header { name: "Upgrade".into(), value: b"websocket".to_vec() },
            ],
            body: b"abc".to_vec(),
            ..Request::default()
        };
        let out = backend.upstream_request(req).expect("forwardable");
        assert_eq!(out.method(), Method::PATCH);
        assert_eq!(out.uri(), "http://127.0.0.1:8080/a/b?c=d");
        assert_eq!(out.headers().get("host").map(|v| v.as_bytes()), Some(b"hello.default.example.com".as_slice()));
        assert_eq!(out.headers().get_all("x-multi").iter().count(), 2);
        assert!(!out.headers().contains_key("content-length") && !out.headers().contains_key("upgrade"));

        let bad = Request { method: "GET".into(), uri: "*".into(), ..Request::default() };
        assert!(matches!(backend.upstream_request(bad), Err(InvokeError::FiberFailed(_))));
    }
}
