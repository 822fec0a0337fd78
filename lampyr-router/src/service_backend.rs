//! A KIngress split's ordinary Service, served at its ready endpoints (from its
//! EndpointSlices) rather than its cluster IP, as upstream ingresses route: a new
//! Service is reachable as soon as its endpoints are ready, without waiting for
//! kube-proxy to program the cluster IP. Requests go round the endpoints in turn;
//! one that takes no connection is passed to the next.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use tokio::time::Instant;

use crate::InvokeError;
use crate::backend::{Backend, BackendStats, BoxFuture};
use crate::body::Body;
use crate::http_backend::{HttpBackend, HttpLimits, Outgoing, send_retrying};

/// Serves a Service's requests from its ready endpoints.
pub struct ServiceBackend {
    /// `namespace/name`, for messages.
    service: String,
    endpoints: RwLock<Vec<Arc<HttpBackend>>>,
    next: AtomicUsize,
    max_request_body: u64,
    limits: HttpLimits,
    h2c: bool,
}

impl ServiceBackend {
    /// A backend for Service `service` (`namespace/name`) with no endpoints yet, speaking h2c when `h2c`.
    pub fn new(service: String, max_request_body: u64, limits: HttpLimits, h2c: bool) -> Self {
        ServiceBackend { service, endpoints: RwLock::new(Vec::new()), next: AtomicUsize::new(0), max_request_body, limits, h2c }
    }

    /// Whether requests go out as HTTP/2 cleartext.
    pub fn is_h2c(&self) -> bool {
        self.h2c
    }

    /// Serves from `addresses` from now on; endpoints that stay keep their connections.
    pub fn set_endpoints(&self, addresses: &[SocketAddr]) {
        let Ok(mut endpoints) = self.endpoints.write() else { return };
        if endpoints.iter().map(|e| e.upstream()).eq(addresses.iter().copied()) {
            return;
        }
        let kept: Vec<Arc<HttpBackend>> = addresses
            .iter()
            .map(|address| match endpoints.iter().find(|e| e.upstream() == *address) {
                Some(kept) => Arc::clone(kept),
                None => Arc::new(HttpBackend::speaking(*address, self.max_request_body, self.limits.clone(), self.h2c)),
            })
            .collect();
        tracing::info!(service = %self.service, endpoints = ?addresses, "Service endpoints changed");
        *endpoints = kept;
    }

    /// The endpoints served now.
    pub fn endpoints(&self) -> Vec<SocketAddr> {
        self.endpoints.read().map(|e| e.iter().map(|e| e.upstream()).collect()).unwrap_or_default()
    }

    /// The next endpoint in turn, if there is one.
    fn pick(&self) -> Option<Arc<HttpBackend>> {
        let endpoints = self.endpoints.read().ok()?;
        let n = endpoints.len();
        (n > 0).then(|| Arc::clone(&endpoints[self.next.fetch_add(1, Ordering::Relaxed) % n]))
    }
}

impl Backend for ServiceBackend {
    fn invoke(&self, req: http::Request<Body>, deadline: Instant) -> BoxFuture<'_, Result<http::Response<Body>, InvokeError>> {
        Box::pin(async move {
            let outgoing = Outgoing::new(req, self.max_request_body)?;
            let none = format!("Service {} has no ready endpoints", self.service);
            let attempts = self.limits.connect_attempts.max(1);
            send_retrying(&outgoing, deadline, attempts, || self.pick(), &none).await
        })
    }

    fn max_request_body(&self) -> u64 {
        self.max_request_body
    }

    /// Requests in flight to the endpoints; nothing here is queued or scaled.
    fn stats(&self) -> BackendStats {
        let in_flight = self.endpoints.read().map(|e| e.iter().map(|e| e.in_flight()).sum()).unwrap_or(0);
        BackendStats { in_flight, ..BackendStats::default() }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn endpoints_that_stay_keep_their_backend_and_turns_go_round() {
        let b = ServiceBackend::new("ns/s".into(), 1024, HttpLimits::default(), false);
        assert!(b.pick().is_none(), "no endpoints yet");
        let (one, two, three): (SocketAddr, SocketAddr, SocketAddr) =
            ("10.0.0.1:80".parse().unwrap(), "10.0.0.2:80".parse().unwrap(), "10.0.0.3:80".parse().unwrap());
        b.set_endpoints(&[one, two]);
        let first = b.pick().expect("an endpoint");
        let second = b.pick().expect("an endpoint");
        assert_ne!(first.upstream(), second.upstream(), "turns go round");
        b.set_endpoints(&[two, three]);
        assert_eq!(b.endpoints(), vec![two, three]);
        let kept = b.endpoints.read().unwrap()[0].clone();
        let was = if first.upstream() == two { first } else { second };
        assert!(Arc::ptr_eq(&kept, &was), "an endpoint that stayed kept its backend (and its connections)");
    }
}
