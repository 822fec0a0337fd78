//! The HTTP front: accepts HTTP/1.1 and h2c, answers probes, health and
//! metrics, routes requests to Revisions, maps every failure to one status.
//!
//! A request is routed, in order, by:
//! 1. its host, when a KIngress rule names it ([`RouteTable::host`]): the
//!    first matching path, a split by percent, the path's and split's headers
//!    added (and the host rewritten, if the path says so). `ly run` programs
//!    the same rules from its Services ([`crate::route`]);
//! 2. its `Knative-Serving-Namespace` and `Knative-Serving-Revision` headers
//!    (what Kourier's splits append), internal listeners only;
//! 3. otherwise the router's own endpoints: `/healthz` on every listener but
//!    public ones, `/metrics` only on admin listeners (and on a listener that
//!    serves everything, as `ly run`'s).
//!
//! Which of these a listener serves is its [`Exposure`]; HTTPS listeners are
//! public and take their certificates from the table ([`crate::tls`]).
//!
//! Bodies stream both ways. Limits are enforced here, at the edge: headers
//! over [`RouterConfig::max_header_bytes`] are answered `431`, a request body
//! over the Revision's limit `413`, one still arriving at the deadline `408`,
//! a backend that does not answer by then `504`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::InvokeError;
use crate::body::{self, Body};
use arc_swap::ArcSwap;
use http::{HeaderMap, HeaderValue, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use lampyr_process::serve::{self, ServeLimits};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::time::Instant;

use crate::forwarded::Hop;
use crate::http_backend::ConnectionSlot;
use crate::metrics::{RevisionMetrics, RouterMetrics, revision_labels};
use crate::table::{HostRoute, RevisionEntry, RouteTable};
use lampyr_api::networking::IngressVisibility;

/// Header naming the Revision on the cluster path (set by the KIngress split).
pub const REVISION_HEADER: &str = "knative-serving-revision";
/// Header naming the Revision's namespace on the cluster path.
pub const NAMESPACE_HEADER: &str = "knative-serving-namespace";
/// Header on an answer to a request no guest code ran for ([`InvokeError::retryable`]),
/// naming the outcome: fiber-router sends such a request to another instance. Guests cannot set it.
pub const REFUSED_HEADER: &str = "lampyr-refused";
use crate::peers::{HASH_HEADER, PROBE_HEADER};

/// Router settings.
#[derive(Clone, Debug)]
pub struct RouterConfig {
    /// How long in-flight requests may finish after shutdown starts.
    pub drain_timeout: Duration,
    /// Most open connections, upgraded ones (WebSockets) included; more wait in the listen backlog.
    pub max_connections: usize,
    /// Longest wait for a request's headers.
    pub header_timeout: Duration,
    /// Largest request head (each header's name and value, plus 4 bytes each, as
    /// HPACK counts them); a larger one is answered `431`.
    pub max_header_bytes: usize,
}

impl Default for RouterConfig {
    fn default() -> Self {
        RouterConfig {
            drain_timeout: Duration::from_secs(30),
            max_connections: 10_000,
            header_timeout: Duration::from_secs(30),
            max_header_bytes: 64 * 1024,
        }
    }
}

type Resp = hyper::Response<Body>;

/// What a listener serves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Exposure {
    /// Everything on one listener: every KIngress rule, header-routed requests,
    /// `/healthz` and `/metrics`. For a router only its own host reaches
    /// (`ly run`, fiberd).
    #[default]
    All,
    /// Traffic from inside the cluster: every KIngress rule (`ClusterLocal`
    /// ones too), Revisions picked by the `Knative-Serving-*` headers, and
    /// `/healthz`; no `/metrics`.
    Internal,
    /// `ExternalIP` KIngress rules only: a client can neither pick a Revision
    /// with headers nor reach a `ClusterLocal` host, nor read the router's endpoints.
    Public,
    /// The router's own endpoints only: `/healthz` and `/metrics`.
    Admin,
}

impl Exposure {
    /// Whether hosts of rules with `visibility` are served.
    fn serves(self, visibility: IngressVisibility) -> bool {
        match self {
            Exposure::All | Exposure::Internal => true,
            Exposure::Public => visibility == IngressVisibility::ExternalIp,
            Exposure::Admin => false,
        }
    }

    /// Whether a Revision may be picked by the `Knative-Serving-*` headers.
    fn routes_by_headers(self) -> bool {
        matches!(self, Exposure::All | Exposure::Internal)
    }

    /// Whether `/healthz` is answered.
    fn serves_health(self) -> bool {
        self != Exposure::Public
    }

    /// Whether `/metrics` is answered.
    fn serves_metrics(self) -> bool {
        matches!(self, Exposure::All | Exposure::Admin)
    }
}

/// How one connection reached the router.
#[derive(Clone, Debug)]
struct Arrival {
    exposure: Exposure,
    /// Over TLS: `https` in `Forwarded`, and no redirect to HTTPS.
    secure: bool,
    /// The proxy headers its requests get, made once per connection.
    hop: Arc<Hop>,
}

impl Arrival {
    fn new(peer: SocketAddr, exposure: Exposure, secure: bool) -> Self {
        let proto = if secure { "https" } else { "http" };
        Arrival { exposure, secure, hop: Arc::new(Hop::new(peer.ip().to_canonical(), proto)) }
    }
}

/// fiber-router: a routing table behind an HTTP server.
pub struct Router {
    table: ArcSwap<RouteTable>,
    config: RouterConfig,
    metrics: RouterMetrics,
    registry: Registry,
}

impl Router {
    /// A router with an empty table; `registry` holds every metric `/metrics` shows
    /// (the router registers its own into it).
    pub fn new(config: RouterConfig, mut registry: Registry) -> Arc<Self> {
        let metrics = RouterMetrics::default();
        metrics.register(&mut registry);
        Arc::new(Router { table: ArcSwap::from_pointee(RouteTable::default()), config, metrics, registry })
    }

    /// The current table.
    pub fn table(&self) -> Arc<RouteTable> {
        self.table.load_full()
    }

    /// Replaces the table; requests in flight keep the Revisions they picked.
    pub fn set_table(&self, table: RouteTable) {
        self.table.store(Arc::new(table));
    }

    /// The router's metric families (backends built for it count into them).
    pub fn metrics(&self) -> &RouterMetrics {
        &self.metrics
    }

    /// Metrics text, refreshed with the backends' current counts.
    pub fn render_metrics(&self) -> String {
        for rev in self.table.load().revisions() {
            let labels = revision_labels(&rev.namespace, &rev.name);
            let stats = rev.backend.stats();
            self.metrics.fibers_desired.get_or_create(&labels).set(stats.desired as i64);
            self.metrics.fibers_actual.get_or_create(&labels).set(stats.fibers as i64);
            self.metrics.queue_depth.get_or_create(&labels).set(stats.queued as i64);
        }
        crate::metrics::render(&self.registry)
    }

    /// Serves connections from `listener` until `shutdown` resolves, then drains.
    /// The listener is [`Exposure::All`].
    pub async fn serve(self: Arc<Self>, listener: TcpListener, shutdown: impl std::future::Future<Output = ()>) {
        self.serve_exposed(listener, Exposure::All, shutdown).await;
    }

    /// Serves plain-HTTP connections from `listener`, exposing what `exposure`
    /// says, until `shutdown` resolves, then drains.
    pub async fn serve_exposed(
        self: Arc<Self>,
        listener: TcpListener,
        exposure: Exposure,
        shutdown: impl std::future::Future<Output = ()>,
    ) {
        self.serve_listener(listener, exposure, None, shutdown).await;
    }

    /// Serves HTTPS connections from `listener` as an [`Exposure::Public`]
    /// listener with `tls` (from [`crate::tls::server_config`]: KIngress
    /// `spec.tls` certificates chosen by SNI, HTTP/2 or HTTP/1.1 by ALPN).
    pub async fn serve_tls(
        self: Arc<Self>,
        listener: TcpListener,
        tls: Arc<rustls::ServerConfig>,
        shutdown: impl std::future::Future<Output = ()>,
    ) {
        self.serve_listener(listener, Exposure::Public, Some(tokio_rustls::TlsAcceptor::from(tls)), shutdown).await;
    }

    async fn serve_listener(
        self: Arc<Self>,
        listener: TcpListener,
        exposure: Exposure,
        tls: Option<tokio_rustls::TlsAcceptor>,
        shutdown: impl std::future::Future<Output = ()>,
    ) {
        let limits = ServeLimits {
            max_connections: self.config.max_connections,
            header_timeout: self.config.header_timeout,
            drain_timeout: self.config.drain_timeout,
        };
        let builder = Arc::new(serve::http_builder(self.config.header_timeout, self.config.max_header_bytes));
        let router = Arc::clone(&self);
        serve::accept_loop("fiber-router", listener, &limits, shutdown, move |conn| {
            let arrival = Arrival::new(conn.peer, exposure, tls.is_some());
            let slot = ConnectionSlot(Arc::new(conn.permit));
            let service = Router::connection_service(Arc::clone(&router), arrival, slot.clone());
            let (builder, tls, peer) = (Arc::clone(&builder), tls.clone(), conn.peer);
            let handshake_timeout = limits.header_timeout;
            async move {
                let served = match tls {
                    None => {
                        conn.watcher.watch(builder.serve_connection_with_upgrades(TokioIo::new(conn.stream), service).into_owned()).await
                    }
                    Some(acceptor) => match tokio::time::timeout(handshake_timeout, acceptor.accept(conn.stream)).await {
                        Ok(Ok(stream)) => {
                            conn.watcher.watch(builder.serve_connection_with_upgrades(TokioIo::new(stream), service).into_owned()).await
                        }
                        Ok(Err(e)) => Err(format!("TLS handshake failed: {e}").into()),
                        Err(_) => Err(format!("TLS handshake took longer than {handshake_timeout:?}").into()),
                    },
                };
                if let Err(e) = served {
                    tracing::debug!(error = %e, %peer, "connection ended with an error");
                }
                drop(slot);
            }
        })
        .await;
    }

    /// The service answering one connection's requests; a request asking for an upgrade
    /// carries the connection's `slot`, so a tunnel it opens keeps its place under the limit.
    fn connection_service(
        router: Arc<Self>,
        arrival: Arrival,
        slot: ConnectionSlot,
    ) -> impl hyper::service::Service<
        hyper::Request<Incoming>,
        Response = Resp,
        Error = std::convert::Infallible,
        Future = impl std::future::Future<Output = Result<Resp, std::convert::Infallible>> + Send + 'static,
    > + Clone
    + Send
    + 'static {
        hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
            if req.headers().contains_key(http::header::UPGRADE) {
                req.extensions_mut().insert(slot.clone());
            }
            let (router, arrival) = (Arc::clone(&router), arrival.clone());
            async move { Ok::<_, std::convert::Infallible>(router.handle_arrival(req, arrival).await) }
        })
    }

    /// Answers one request arriving on an [`Exposure::All`] listener.
    pub async fn handle(&self, req: hyper::Request<Incoming>, peer: SocketAddr) -> Resp {
        self.handle_exposed(req, peer, Exposure::All).await
    }

    /// Answers one request arriving on a plain-HTTP listener exposing `exposure`.
    pub async fn handle_exposed(&self, req: hyper::Request<Incoming>, peer: SocketAddr, exposure: Exposure) -> Resp {
        self.handle_arrival(req, Arrival::new(peer, exposure, false)).await
    }

    async fn handle_arrival(&self, mut req: hyper::Request<Incoming>, arrival: Arrival) -> Resp {
        if let Some(resp) = self.oversized_head(&req) {
            return resp;
        }
        let table = self.table.load_full();
        if let Some(hash) = probe_hash(req.headers()).filter(|_| arrival.exposure != Exposure::Admin) {
            return self.probe_answer(&table, request_host(&req), hash);
        }
        let entry = match self.resolve(&table, &mut req, &arrival) {
            Ok(entry) => entry,
            Err(resp) => return resp,
        };
        arrival.hop.add_to(req.headers_mut());
        self.serve_revision(&entry, req).await
    }

    /// `431` when the request's head is over [`RouterConfig::max_header_bytes`].
    fn oversized_head<B>(&self, req: &hyper::Request<B>) -> Option<Resp> {
        let size: usize = req.headers().iter().map(|(name, value)| name.as_str().len() + value.len() + 4).sum::<usize>()
            + req.uri().path_and_query().map_or(0, |pq| pq.as_str().len());
        let max = self.config.max_header_bytes;
        (size > max).then(|| {
            self.metrics.unrouted.inc();
            text(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE, &format!("the request's headers take {size} bytes; the limit is {max}\n"))
        })
    }

    /// A Knative network probe: `K-Network-Hash: override` asks for the hash of the KIngress
    /// this router has programmed for the host (404 when it has none yet); any other hash
    /// is echoed (the prober names the version it expects).
    fn probe_answer(&self, table: &RouteTable, host: &str, requested: Option<HeaderValue>) -> Resp {
        let answer = match requested {
            Some(h) if h == crate::peers::OVERRIDE => match table.host(host) {
                Some(route) if route.hash.is_empty() => {
                    let why = format!(
                        "KIngress {} is programmed for host {host:?}, but a Service it routes to has no ready endpoint here yet\n",
                        route.ingress
                    );
                    return text(StatusCode::SERVICE_UNAVAILABLE, &why);
                }
                Some(route) => HeaderValue::from_str(&route.hash).ok(),
                None => return text(StatusCode::NOT_FOUND, &format!("no KIngress programmed for host {host:?}\n")),
            },
            other => other,
        };
        let mut resp = text(StatusCode::OK, "");
        if let Some(hash) = answer {
            resp.headers_mut().insert(HASH_HEADER, hash);
        }
        resp
    }

    // The error is the ready answer itself; it is built once per failed lookup.
    #[allow(clippy::result_large_err)]
    fn resolve(&self, table: &RouteTable, req: &mut hyper::Request<Incoming>, arrival: &Arrival) -> Result<Arc<RevisionEntry>, Resp> {
        let exposure = arrival.exposure;
        if let Some(route) = table.host(request_host(req)).filter(|r| exposure.serves(r.visibility)) {
            return self.route_ingress(table, route, req, arrival.secure, true);
        }
        let (headers, host) = (req.headers(), request_host(req));
        if !exposure.routes_by_headers() {
            return Err(self.own_endpoint(req.uri().path(), host, exposure));
        }
        if let (Some(ns), Some(rev)) = (header_str(headers, NAMESPACE_HEADER), header_str(headers, REVISION_HEADER)) {
            return table.revision(ns, rev).cloned().ok_or_else(|| {
                self.metrics.unrouted.inc();
                text(StatusCode::NOT_FOUND, &format!("revision {ns}/{rev} is not served here\n"))
            });
        }
        Err(self.own_endpoint(req.uri().path(), host, exposure))
    }

    /// Routes by a KIngress rule: path, split, headers, host rewrite. A path
    /// whose split is no Revision here but which rewrites the host (a
    /// DomainMapping's) continues, once, with the rewritten host's rule.
    #[allow(clippy::result_large_err)]
    fn route_ingress(
        &self,
        table: &RouteTable,
        route: &HostRoute,
        req: &mut hyper::Request<Incoming>,
        secure: bool,
        may_rewrite: bool,
    ) -> Result<Arc<RevisionEntry>, Resp> {
        let Some(path) = route.route(req.uri().path(), req.headers()) else {
            self.metrics.unrouted.inc();
            return Err(text(StatusCode::NOT_FOUND, &format!("no path of KIngress {} matches this request\n", route.ingress)));
        };
        if route.redirect_to_https && !secure {
            return Err(https_redirect(req));
        }
        let total = path.total_percent();
        let Some(split) = path.pick(if total == 0 { 0 } else { fastrand::u32(0..total) }) else {
            return Err(text(StatusCode::SERVICE_UNAVAILABLE, &format!("KIngress {} has no backend for this path\n", route.ingress)));
        };
        let headers = req.headers_mut();
        for (name, value) in path.append_headers.iter().chain(&split.append_headers) {
            headers.insert(name.clone(), value.clone());
        }
        if let Some(host) = &path.rewrite_host {
            headers.insert(http::header::HOST, host.clone());
        }
        if let Some(entry) = table.revision(&split.namespace, &split.service) {
            return Ok(Arc::clone(entry));
        }
        let rewritten = path.rewrite_host.as_ref().and_then(|h| h.to_str().ok()).and_then(|h| table.host(h));
        if let Some(next) = rewritten.filter(|_| may_rewrite) {
            return self.route_ingress(table, next, req, secure, false);
        }
        let mut resp = text(
            StatusCode::SERVICE_UNAVAILABLE,
            &format!(
                "revision {}/{} is not published to this router (no Home, and no Service with a cluster IP and that port)\n",
                split.namespace, split.service
            ),
        );
        resp.headers_mut().insert(http::header::RETRY_AFTER, HeaderValue::from_static("1"));
        Err(resp)
    }

    /// The router's own endpoints, reached by a Host that names no Service.
    fn own_endpoint(&self, path: &str, host: &str, exposure: Exposure) -> Resp {
        match path {
            "/healthz" if exposure.serves_health() => text(StatusCode::OK, "ok\n"),
            "/metrics" if exposure.serves_metrics() => {
                let mut resp = text(StatusCode::OK, &self.render_metrics());
                resp.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
                );
                resp
            }
            _ => {
                self.metrics.unrouted.inc();
                let expected = match exposure {
                    Exposure::All | Exposure::Internal => "a host of a Service's route",
                    Exposure::Public => "a public host of a Service's route",
                    Exposure::Admin => "/healthz or /metrics: this listener serves no route",
                };
                text(StatusCode::NOT_FOUND, &format!("no service for host {host:?} (expected {expected})\n"))
            }
        }
    }

    async fn serve_revision(&self, entry: &RevisionEntry, req: hyper::Request<Incoming>) -> Resp {
        let started = Instant::now();
        let deadline = started + entry.policy.request_deadline();
        let cold = entry.backend.is_cold();
        let max = entry.backend.max_request_body();
        let resp = if let Err(too_large) = body::refuse_declared_over(req.headers(), max) {
            error_response(&too_large)
        } else {
            // A request without a body (most) needs no limits on it, nor their timer.
            let req = req.map(|incoming| {
                if hyper::body::Body::is_end_stream(&incoming) {
                    body::empty()
                } else {
                    body::bounded(body::boxed(incoming), max, deadline)
                }
            });
            match entry.backend.invoke(req, deadline).await {
                Ok(resp) => match entry.policy.timeouts.idle {
                    Some(idle) => resp.map(|body| body::idle_bounded(body, idle)),
                    None => resp,
                },
                Err(e) => error_response(&e),
            }
        };
        let m = entry.metrics.get_or_init(|| RevisionMetrics::new(&self.metrics, &entry.namespace, &entry.name));
        let elapsed = started.elapsed().as_secs_f64();
        m.observe(&self.metrics, resp.status().as_u16(), elapsed);
        if cold {
            m.cold_starts.inc();
            m.cold_start_seconds.observe(elapsed);
        }
        resp
    }
}

/// `Some(hash)` when the request is a Knative network probe.
fn probe_hash(headers: &HeaderMap) -> Option<Option<HeaderValue>> {
    headers.contains_key(PROBE_HEADER).then(|| headers.get(HASH_HEADER).cloned())
}

/// The request's host: the URI's authority (HTTP/2, absolute form) or the Host header.
fn request_host<B>(req: &hyper::Request<B>) -> &str {
    req.uri().authority().map(|a| a.as_str()).or_else(|| header_str(req.headers(), "host")).unwrap_or("")
}

/// `301` to the same host and target over HTTPS (Envoy's `https_redirect`, as Kourier configures it).
fn https_redirect<B>(req: &hyper::Request<B>) -> Resp {
    let host = request_host(req);
    let host = host.rsplit_once(':').filter(|(_, port)| port.bytes().all(|b| b.is_ascii_digit())).map_or(host, |(h, _)| h);
    let target = req.uri().path_and_query().map_or("/", |pq| pq.as_str());
    let mut resp = text(StatusCode::MOVED_PERMANENTLY, "");
    match HeaderValue::from_str(&format!("https://{host}{target}")) {
        Ok(location) => {
            resp.headers_mut().insert(http::header::LOCATION, location);
            resp
        }
        Err(_) => text(StatusCode::BAD_REQUEST, "the request's host cannot be redirected\n"),
    }
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok()).filter(|v| !v.is_empty())
}

/// The single place an invocation failure becomes an HTTP answer.
fn error_response(err: &InvokeError) -> Resp {
    let status = StatusCode::from_u16(err.http_status()).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut resp = text(status, &format!("{err}\n"));
    if status == StatusCode::SERVICE_UNAVAILABLE {
        resp.headers_mut().insert(http::header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    if err.retryable() {
        resp.headers_mut().insert(REFUSED_HEADER, HeaderValue::from_static(err.outcome()));
    }
    resp
}

fn text(status: StatusCode, message: &str) -> Resp {
    let mut resp = hyper::Response::new(body::full(message.to_string()));
    *resp.status_mut() = status;
    if !message.is_empty() {
        resp.headers_mut().insert(http::header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    }
    resp
}
