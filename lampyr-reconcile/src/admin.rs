//! The controllers' admin HTTP server: `/metrics` (Prometheus text format from a
//! `prometheus-client` [`Registry`]), `/healthz` (liveness) and `/readyz`
//! (readiness). Generic: it knows nothing about Revisions or grants.
//!
//! - `/healthz` answers `200 ok` while the process serves HTTP at all: a
//!   controller whose runtime is wedged stops answering and is restarted.
//! - `/readyz` answers `200 ok` once every [`Readiness`] check registered with
//!   [`Health::check`] is ready, else `503` listing the checks that are not
//!   (for example `leader: waiting for the lease`).
//! - `/metrics` renders the registry in the OpenMetrics text format, which
//!   Prometheus scrapes as its text format.
//!
//! ```no_run
//! # async fn f() -> std::io::Result<()> {
//! use lampyr_reconcile::admin::{AdminServer, Health};
//! use prometheus_client::registry::Registry;
//! let health = Health::default();
//! let synced = health.check("informers");
//! let server = AdminServer::bind("127.0.0.1:9090".parse().unwrap(), Registry::default(), health).await?;
//! tokio::spawn(server.serve(std::future::pending::<()>()));
//! synced.set_ready();
//! # Ok(()) }
//! ```

use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use lampyr_process::serve::{ServeLimits, serve_http};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

/// The content type of `/metrics`.
pub const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Debug)]
struct Check {
    name: String,
    /// `None` when ready, else why not.
    waiting: Option<String>,
}

/// The readiness checks behind `/readyz`. Cheap to clone; every clone shares
/// the same checks.
#[derive(Debug, Clone, Default)]
pub struct Health {
    checks: Arc<Mutex<Vec<Check>>>,
}

/// One named readiness check, not ready until [`Readiness::set_ready`].
#[derive(Debug, Clone)]
pub struct Readiness {
    health: Health,
    index: usize,
}

impl Health {
    /// Registers a check named `name`, initially not ready ("starting").
    pub fn check(&self, name: impl Into<String>) -> Readiness {
        let mut checks = self.lock();
        checks.push(Check { name: name.into(), waiting: Some("starting".into()) });
        Readiness { health: self.clone(), index: checks.len() - 1 }
    }

    /// `Ok` when every check is ready, else the `name: reason` of each that is not.
    pub fn ready(&self) -> Result<(), Vec<String>> {
        let waiting: Vec<String> = self.lock().iter().filter_map(|c| c.waiting.as_ref().map(|why| format!("{}: {why}", c.name))).collect();
        if waiting.is_empty() { Ok(()) } else { Err(waiting) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Check>> {
        // A check only holds plain data: a panic elsewhere cannot leave it inconsistent.
        self.checks.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Readiness {
    /// Marks the check ready.
    pub fn set_ready(&self) {
        self.health.lock()[self.index].waiting = None;
    }

    /// Marks the check not ready, saying why (shown by `/readyz`).
    pub fn set_not_ready(&self, why: impl Into<String>) {
        self.health.lock()[self.index].waiting = Some(why.into());
    }

    /// Whether this check is ready.
    pub fn is_ready(&self) -> bool {
        self.health.lock()[self.index].waiting.is_none()
    }
}

/// Connections the admin server serves at once (probes and scrapes); more wait in the backlog.
pub const MAX_CONNECTIONS: usize = 64;
/// Longest wait for a request head; a connection still sending one then is closed.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest wait on shutdown for requests in flight.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest request head served (probes and scrapes send a few hundred bytes).
const MAX_HEAD_BYTES: usize = 8 * 1024;

/// The admin server, bound and not yet serving.
pub struct AdminServer {
    listener: TcpListener,
    state: Arc<State>,
    limits: ServeLimits,
}

struct State {
    registry: Registry,
    health: Health,
}

impl AdminServer {
    /// Binds `addr` (port 0 picks a free port; see [`AdminServer::local_addr`]).
    pub async fn bind(addr: SocketAddr, registry: Registry, health: Health) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let limits = ServeLimits { max_connections: MAX_CONNECTIONS, header_timeout: HEADER_TIMEOUT, drain_timeout: DRAIN_TIMEOUT };
        Ok(AdminServer { listener, state: Arc::new(State { registry, health }), limits })
    }

    /// Serves within `limits` instead of [`MAX_CONNECTIONS`], [`HEADER_TIMEOUT`] and a 5 s drain.
    pub fn with_limits(mut self, limits: ServeLimits) -> Self {
        self.limits = limits;
        self
    }

    /// The bound address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` completes, then lets open connections finish
    /// their request (at most 5 seconds) and returns.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) {
        let state = self.state;
        let handle = move |req: Request<Incoming>| {
            let state = Arc::clone(&state);
            async move { state.handle(&req) }
        };
        serve_http("admin", self.listener, &self.limits, MAX_HEAD_BYTES, shutdown, handle).await;
    }
}

impl State {
    fn handle(&self, req: &Request<Incoming>) -> Response<Full<Bytes>> {
        if req.method() != Method::GET && req.method() != Method::HEAD {
            return text(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n".into());
        }
        match req.uri().path() {
            "/healthz" | "/livez" => text(StatusCode::OK, "ok\n".into()),
            "/readyz" => match self.health.ready() {
                Ok(()) => text(StatusCode::OK, "ok\n".into()),
                Err(waiting) => text(StatusCode::SERVICE_UNAVAILABLE, format!("not ready:\n{}\n", waiting.join("\n"))),
            },
            "/metrics" => {
                let mut body = String::new();
                match prometheus_client::encoding::text::encode(&mut body, &self.registry) {
                    Ok(()) => {
                        let mut resp = text(StatusCode::OK, body);
                        resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(METRICS_CONTENT_TYPE));
                        resp
                    }
                    Err(err) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("encoding metrics: {err}\n")),
                }
            }
            _ => text(StatusCode::NOT_FOUND, "not found: try /metrics, /healthz or /readyz\n".into()),
        }
    }
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    resp
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use prometheus_client::metrics::counter::Counter;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        let status = out[9..12].parse().unwrap();
        let body = out.split_once("\r\n\r\n").unwrap().1.to_string();
        (status, body)
    }

    #[tokio::test]
    async fn serves_metrics_health_and_readiness() {
        let mut registry = Registry::default();
        let counter = Counter::<u64>::default();
        registry.register("test_things", "Things counted", counter.clone());
        counter.inc_by(3);
        let health = Health::default();
        let leader = health.check("leader");
        let synced = health.check("informers");
        let server = AdminServer::bind("127.0.0.1:0".parse().unwrap(), registry, health).await.unwrap();
        let addr = server.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(server.serve(async move {
            let _ = stopped.await;
        }));

        let (status, body) = get(addr, "/metrics").await;
        assert_eq!(status, 200);
        assert!(body.contains("test_things_total 3"), "{body}");
        assert_eq!(get(addr, "/healthz").await.0, 200);

        let (status, body) = get(addr, "/readyz").await;
        assert_eq!(status, 503);
        assert!(body.contains("leader: starting") && body.contains("informers: starting"), "{body}");
        leader.set_ready();
        synced.set_not_ready("waiting for caches");
        let (status, body) = get(addr, "/readyz").await;
        assert_eq!(status, 503);
        assert!(!body.contains("leader") && body.contains("informers: waiting for caches"), "{body}");
        synced.set_ready();
        assert!(synced.is_ready());
        assert_eq!(get(addr, "/readyz").await, (200, "ok\n".into()));
        assert_eq!(get(addr, "/nope").await.0, 404);

        stop.send(()).unwrap();
        task.await.unwrap();
        assert!(tokio::net::TcpStream::connect(addr).await.is_err(), "the listener is closed after shutdown");
    }

    #[tokio::test]
    async fn a_connection_that_never_finishes_its_head_is_closed_and_probes_are_still_answered() {
        let limits = ServeLimits {
            max_connections: 2,
            header_timeout: std::time::Duration::from_millis(300),
            drain_timeout: std::time::Duration::from_secs(1),
        };
        let server = AdminServer::bind("127.0.0.1:0".parse().unwrap(), Registry::default(), Health::default()).await.unwrap();
        let addr = server.local_addr().unwrap();
        tokio::spawn(server.with_limits(limits).serve(std::future::pending::<()>()));
        // Two stalled clients hold both places; each is closed at the header timeout.
        let mut stalled = Vec::new();
        for _ in 0..2 {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n").await.unwrap();
            stalled.push(s);
        }
        for mut s in stalled {
            let mut rest = Vec::new();
            let closed = tokio::time::timeout(std::time::Duration::from_secs(20), s.read_to_end(&mut rest)).await;
            assert!(matches!(closed, Ok(Ok(0))), "a stalled connection is closed without an answer: {closed:?}");
        }
        let probe = tokio::time::timeout(std::time::Duration::from_secs(20), get(addr, "/healthz")).await;
        assert_eq!(probe.unwrap().0, 200, "a probe after the stalled connections");
    }
}
