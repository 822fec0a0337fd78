//! The adapter's HTTP endpoint: Event Grid delivers to `/<namespace>/<name>` of an
//! AzureEventGridSource; handshakes are answered, events sent to the source's sink one by
//! one in delivery order. A delivery is acknowledged (200) only when every event of it was
//! delivered, so Event Grid retries the rest; `/healthz` answers for probes. At most
//! [`MAX_CONNECTIONS`] connections are served at once, a head must arrive within
//! [`HEADER_TIMEOUT`] and a body within [`BODY_TIMEOUT`] after it.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt as _, Full, Limited};
use hyper::body::Incoming;
use lampyr_process::serve::{ServeLimits, serve_http};
use serde_json::json;
use tokio::net::TcpListener;

use crate::delivery::{self, Delivery, MAX_BODY};
use crate::send::{SEND_TIMEOUT, SinkClient, send, sink_client};
use crate::sources::Sinks;

/// Connections served at once; more wait in the listen backlog (Event Grid retries what times out).
pub const MAX_CONNECTIONS: usize = 256;
/// Longest wait for a delivery's head; a connection still sending one then is closed.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest wait for a delivery's body once its head arrived; a slower one is answered `408`
/// (Event Grid retries it), so a stalled client cannot hold one of the connections for good.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest delivery head served.
const MAX_HEAD_BYTES: usize = 64 * 1024;

/// The adapter, bound and not yet serving.
pub struct Adapter {
    listener: TcpListener,
    state: State,
    limits: ServeLimits,
}

struct State {
    sinks: Sinks,
    client: SinkClient,
    body_timeout: Duration,
}

impl Adapter {
    /// Binds `addr`; deliveries go to the sinks `sinks` holds.
    pub async fn bind(addr: SocketAddr, sinks: Sinks) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let limits = ServeLimits { max_connections: MAX_CONNECTIONS, header_timeout: HEADER_TIMEOUT, drain_timeout: SEND_TIMEOUT };
        Ok(Adapter { listener, state: State { sinks, client: sink_client(), body_timeout: BODY_TIMEOUT }, limits })
    }

    /// Serves within `limits`, reading each body for at most `body_timeout`, instead of
    /// [`MAX_CONNECTIONS`], [`HEADER_TIMEOUT`], [`BODY_TIMEOUT`] and a drain of [`SEND_TIMEOUT`].
    pub fn with_limits(mut self, limits: ServeLimits, body_timeout: Duration) -> Self {
        self.limits = limits;
        self.state.body_timeout = body_timeout;
        self
    }

    /// The bound address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` completes, then lets open deliveries finish (at most [`SEND_TIMEOUT`]).
    pub async fn serve(self, shutdown: impl Future<Output = ()>) {
        let state = Arc::new(self.state);
        let handle = move |req: Request<Incoming>| {
            let state = Arc::clone(&state);
            async move { state.handle(req).await }
        };
        serve_http("eventgrid-adapter", self.listener, &self.limits, MAX_HEAD_BYTES, shutdown, handle).await;
    }
}

impl State {
    async fn handle(&self, req: Request<Incoming>) -> Response<Full<Bytes>> {
        let path = req.uri().path().to_string();
        if path == "/healthz" {
            return text(StatusCode::OK, "ok\n");
        }
        let mut parts = path.trim_matches('/').split('/');
        let (Some(namespace), Some(name), None) = (parts.next(), parts.next(), parts.next()) else {
            return text(StatusCode::NOT_FOUND, "deliveries go to /<namespace>/<AzureEventGridSource name>\n");
        };
        let (namespace, name) = (namespace.to_string(), name.to_string());
        let target = match self.sinks.get(&namespace, &name) {
            None => return text(StatusCode::NOT_FOUND, &format!("no AzureEventGridSource {namespace}/{name}\n")),
            Some(target) => target,
        };
        let (method, headers) = (req.method().clone(), req.headers().clone());
        let body = match tokio::time::timeout(self.body_timeout, Limited::new(req.into_body(), MAX_BODY).collect()).await {
            Ok(Ok(body)) => body.to_bytes(),
            Err(_) => {
                let wait = self.body_timeout;
                return text(StatusCode::REQUEST_TIMEOUT, &format!("the delivery's body did not arrive within {wait:?}\n"));
            }
            Ok(Err(e)) => {
                return text(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    &format!("the delivery is over Event Grid's {MAX_BODY} bytes or broken: {e}\n"),
                );
            }
        };
        let delivery = match parse(&method, &headers, &body) {
            Ok(delivery) => delivery,
            Err(e) => return text(StatusCode::BAD_REQUEST, &format!("AzureEventGridSource {namespace}/{name}: {e}\n")),
        };
        match delivery {
            Delivery::Validation { code } => {
                tracing::info!(source = %format!("{namespace}/{name}"), "answered Event Grid's subscription validation");
                json_response(StatusCode::OK, &json!({ "validationResponse": code }))
            }
            Delivery::AbuseProtection { origin } => {
                let mut response = text(StatusCode::OK, "");
                if let Ok(value) = origin.parse() {
                    response.headers_mut().insert("webhook-allowed-origin", value);
                }
                response
            }
            Delivery::Events(events) => {
                let target = match target {
                    Ok(target) => target,
                    Err(why) => {
                        return text(
                            StatusCode::SERVICE_UNAVAILABLE,
                            &format!("AzureEventGridSource {namespace}/{name} has no sink: {why}\n"),
                        );
                    }
                };
                for (index, event) in events.iter().enumerate() {
                    if let Err(e) = send(&self.client, &target.sink, event, &target.extensions).await {
                        tracing::warn!(source = %format!("{namespace}/{name}"), error = %e, "an event was not delivered");
                        let message = format!("{e} (event {index} of {}; those before it were delivered)\n", events.len());
                        return text(StatusCode::SERVICE_UNAVAILABLE, &message);
                    }
                }
                tracing::debug!(source = %format!("{namespace}/{name}"), events = events.len(), "delivered");
                text(StatusCode::OK, "")
            }
        }
    }
}

fn parse(method: &Method, headers: &HeaderMap, body: &[u8]) -> Result<Delivery, delivery::DeliveryError> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    delivery::parse(method.as_str(), header("content-type"), header(delivery::EVENT_TYPE_HEADER), header("webhook-request-origin"), body)
}

fn text(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = status;
    if !body.is_empty() {
        response.headers_mut().insert("content-type", http::HeaderValue::from_static("text/plain; charset=utf-8"));
    }
    response
}

fn json_response(status: StatusCode, body: &serde_json::Value) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = status;
    response.headers_mut().insert("content-type", http::HeaderValue::from_static("application/json"));
    response
}
