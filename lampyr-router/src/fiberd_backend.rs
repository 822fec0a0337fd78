//! A Revision served by the fiberd instances its Home lists (cluster mode).
//!
//! Each request goes to the instance with the fewest requests in flight for
//! the fibers it may run (`maxFibers` in the Home's status: its share of
//! `max-scale`; ties taken in turn), through an [`HttpBackend`] per instance, carrying the
//! `Knative-Serving-Namespace` and `Knative-Serving-Revision` headers fiberd
//! routes on. What happens when an instance cannot serve:
//!
//! - **refused** (no connection: [`InvokeError::Unavailable`], nothing was
//!   sent): the request is retried on another instance; when every instance
//!   refused, it waits for the instance list to change, or retries them after a
//!   short backoff, until its deadline;
//! - **refused to run it** (the answer carries [`REFUSED_HEADER`]: no fiber
//!   slot free on that instance, its queue full, no fiber startable): no guest
//!   code ran, so the request goes to another instance, its body sent again
//!   from a copy when it was at most [`RESEND_LIMIT`] bytes; only when every
//!   instance refused (or the body cannot be sent again) does the client get
//!   the refusal, `503` with `Retry-After`. A Revision's `max-scale` is split
//!   over the instances, so this is what lets any request use the room any
//!   instance has;
//! - **failed after sending** (the instance died or reset mid-request): `502`
//!   at once, never retried — the request may have had effects;
//! - **no loaded instance**: the request waits in a bounded queue for one to
//!   appear (the activator's role); a full queue answers `503` with
//!   `Retry-After`, the deadline `504`.
//!
//! The instance list is replaced by [`FiberdBackend::set_instances`] as the
//! Home's status changes; instances whose address and protocol are unchanged
//! keep their connection pools and in-flight counts.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;

use crate::InvokeError;
use crate::body::Body;
use arc_swap::ArcSwap;
use http::{HeaderName, HeaderValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::backend::{Backend, BackendStats, BoxFuture};
use crate::http_backend::{HttpBackend, HttpLimits, InFlight, Outgoing};
use crate::metrics::{RouterMetrics, revision_labels};
use crate::server::{NAMESPACE_HEADER, REFUSED_HEADER, REVISION_HEADER};

/// Request bodies of at most this many bytes are copied as they are sent, so a
/// request an instance refused can go to another.
pub const RESEND_LIMIT: usize = 64 * 1024;
/// The bound assumed for an instance that reports none (an older fiberd): fiberd's default.
const UNREPORTED_MAX_FIBERS: u32 = 64;

/// First wait before retrying instances that all refused; doubles up to [`RETRY_MAX`].
const RETRY_MIN: Duration = Duration::from_millis(50);
/// Longest wait between retries of instances that all refused.
const RETRY_MAX: Duration = Duration::from_secs(1);

/// One fiberd instance holding the Revision's fibers, as its Home's status lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Instance {
    /// The instance's name (its grant Pod's name).
    pub name: String,
    /// Where it serves.
    pub address: SocketAddr,
    /// Fibers of this Revision warm on it.
    pub warm_fibers: u32,
    /// Most fibers of this Revision it runs at once; 0 when it does not say.
    pub max_fibers: u32,
}

/// Settings of a [`FiberdBackend`].
#[derive(Clone, Debug)]
pub struct FiberdConfig {
    /// Largest request body forwarded, in bytes (fiberd applies the template's own limit too).
    pub max_request_body: u64,
    /// Limits and pool settings of each instance's connections.
    pub limits: HttpLimits,
    /// Most requests waiting for an instance; more are answered `503`.
    pub queue_capacity: usize,
}

impl Default for FiberdConfig {
    fn default() -> Self {
        FiberdConfig { max_request_body: 8 * 1024 * 1024, limits: HttpLimits::default(), queue_capacity: 640 }
    }
}

struct Upstream {
    name: String,
    backend: HttpBackend,
    warm_fibers: AtomicU32,
    max_fibers: AtomicU32,
}

impl Upstream {
    /// Requests in flight per fiber it may run, as a fraction `(in_flight, max_fibers)`.
    fn load(&self) -> (u64, u64) {
        let max = match self.max_fibers.load(Ordering::Acquire) {
            0 => UNREPORTED_MAX_FIBERS,
            n => n,
        };
        (self.backend.in_flight() as u64, u64::from(max))
    }
}

/// `a`'s load is below `b`'s (fractions compared without division).
fn lighter((a_in, a_max): (u64, u64), (b_in, b_max): (u64, u64)) -> bool {
    a_in * b_max < b_in * a_max
}

/// Forwards one Revision's requests to the fiberd instances holding its fibers.
pub struct FiberdBackend {
    namespace: String,
    revision: String,
    config: FiberdConfig,
    upstreams: ArcSwap<Vec<Arc<Upstream>>>,
    /// Bumped on every change of the instance list (and on close): waiting requests look again.
    changed: watch::Sender<u64>,
    closed: AtomicBool,
    next: AtomicUsize,
    queued: AtomicUsize,
    connect_failures: Counter,
    refusals: Counter,
    instances_gauge: Gauge,
}

impl FiberdBackend {
    /// A backend for Revision `namespace/revision` with no instance yet; its
    /// metrics go to `metrics`.
    pub fn new(namespace: &str, revision: &str, config: FiberdConfig, metrics: &RouterMetrics) -> Arc<Self> {
        let labels = revision_labels(namespace, revision);
        Arc::new(FiberdBackend {
            namespace: namespace.to_string(),
            revision: revision.to_string(),
            config,
            upstreams: ArcSwap::from_pointee(Vec::new()),
            changed: watch::Sender::new(0),
            closed: AtomicBool::new(false),
            next: AtomicUsize::new(0),
            queued: AtomicUsize::new(0),
            connect_failures: metrics.upstream_connect_failures.get_or_create_owned(&labels),
            refusals: metrics.upstream_refusals.get_or_create_owned(&labels),
            instances_gauge: metrics.instances.get_or_create_owned(&labels),
        })
    }

    /// Replaces the instances serving the Revision; `http2` makes requests go
    /// out as h2c. Requests waiting for an instance look again.
    pub fn set_instances(&self, instances: &[Instance], http2: bool) {
        let current = self.upstreams.load();
        let mut next = Vec::with_capacity(instances.len());
        for instance in instances {
            if next.iter().any(|u: &Arc<Upstream>| u.backend.upstream() == instance.address) {
                continue;
            }
            let kept = current.iter().find(|u| u.backend.upstream() == instance.address && u.backend.is_h2c() == http2);
            let upstream = match kept {
                Some(u) => {
                    u.warm_fibers.store(instance.warm_fibers, Ordering::Release);
                    u.max_fibers.store(instance.max_fibers, Ordering::Release);
                    Arc::clone(u)
                }
                None => {
                    let (addr, max, limits) = (instance.address, self.config.max_request_body, self.config.limits.clone());
                    let backend = HttpBackend::speaking(addr, max, limits, http2);
                    Arc::new(Upstream {
                        name: instance.name.clone(),
                        backend,
                        warm_fibers: AtomicU32::new(instance.warm_fibers),
                        max_fibers: AtomicU32::new(instance.max_fibers),
                    })
                }
            };
            next.push(upstream);
        }
        let unchanged = next.len() == current.len() && next.iter().zip(current.iter()).all(|(a, b)| Arc::ptr_eq(a, b));
        self.instances_gauge.set(next.len() as i64);
        if !unchanged {
            self.upstreams.store(Arc::new(next));
            self.changed.send_modify(|v| *v += 1);
        }
    }

    /// The addresses requests may go to now.
    pub fn instances(&self) -> Vec<SocketAddr> {
        self.upstreams.load().iter().map(|u| u.backend.upstream()).collect()
    }

    /// Stops serving: the Revision is gone. Waiting requests and later ones
    /// are answered `503` at once.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.upstreams.store(Arc::new(Vec::new()));
        self.instances_gauge.set(0);
        self.changed.send_modify(|v| *v += 1);
    }

    /// The instance not in `tried` with the fewest requests in flight per fiber it
    /// may run, taking ties in turn.
    fn pick(&self, tried: &[SocketAddr]) -> Option<Arc<Upstream>> {
        let upstreams = self.upstreams.load();
        let n = upstreams.len();
        if n == 0 {
            return None;
        }
        let start = self.next.fetch_add(1, Ordering::Relaxed) % n;
        let mut best: Option<(&Arc<Upstream>, (u64, u64))> = None;
        for u in (0..n).map(|i| &upstreams[(start + i) % n]).filter(|u| !tried.contains(&u.backend.upstream())) {
            let load = u.load();
            if best.is_none_or(|(_, b)| lighter(load, b)) {
                best = Some((u, load));
            }
        }
        best.map(|(u, _)| Arc::clone(u))
    }

    /// A place in the wait queue, or `Overloaded` when it is full.
    fn enter_queue(&self) -> Result<InFlight<'_>, InvokeError> {
        let capacity = self.config.queue_capacity;
        self.queued
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |q| (q < capacity).then_some(q + 1))
            .map_err(|_| InvokeError::Overloaded { capacity })?;
        Ok(InFlight::entered(&self.queued))
    }

    fn gone(&self) -> InvokeError {
        InvokeError::Unavailable(format!("revision {}/{} is no longer published: its Home was deleted", self.namespace, self.revision))
    }

    async fn forward(&self, req: http::Request<Body>, deadline: Instant) -> Result<http::Response<Body>, InvokeError> {
        let mut prepared = Outgoing::new(req, self.config.max_request_body)?.replayable(RESEND_LIMIT);
        for (name, value) in [(NAMESPACE_HEADER, &self.namespace), (REVISION_HEADER, &self.revision)] {
            let value = HeaderValue::from_str(value).map_err(|_| InvokeError::FiberFailed(format!("{value:?} is no header value")))?;
            prepared.set_header(HeaderName::from_static(name), value);
        }
        let mut tried: Vec<SocketAddr> = Vec::new();
        let mut refusal: Option<http::Response<Body>> = None;
        let mut waiting = None;
        let mut backoff = RETRY_MIN;
        loop {
            // Subscribe before looking, so a change between the look and the wait is not missed.
            let mut changed = self.changed.subscribe();
            if self.closed.load(Ordering::Acquire) {
                return Err(self.gone());
            }
            if let Some(upstream) = self.pick(&tried) {
                drop(waiting.take());
                match upstream.backend.send(&prepared, deadline).await {
                    Err(InvokeError::Unavailable(why)) => {
                        self.connect_failures.inc();
                        tracing::debug!(revision = %self.revision, instance = %upstream.name, %why, "instance refused; trying another");
                        tried.push(upstream.backend.upstream());
                        continue;
                    }
                    Ok(resp) if resp.headers().contains_key(REFUSED_HEADER) => {
                        self.refusals.inc();
                        let outcome = resp.headers().get(REFUSED_HEADER).and_then(|v| v.to_str().ok()).unwrap_or_default();
                        tracing::debug!(revision = %self.revision, instance = %upstream.name, outcome, "instance ran no fiber for it; trying another");
                        if !prepared.can_resend() {
                            return Ok(resp);
                        }
                        tried.push(upstream.backend.upstream());
                        refusal = Some(resp);
                        continue;
                    }
                    other => return other,
                }
            }
            // Every instance was tried and one refused to run it: its answer is the Revision's.
            if let Some(resp) = refusal {
                return Ok(resp);
            }
            if waiting.is_none() {
                waiting = Some(self.enter_queue()?);
            }
            // Instances that all refused are tried again after a backoff; an empty list waits for a change.
            let retry = !tried.is_empty();
            tokio::select! {
                _ = changed.changed() => tried.clear(),
                () = tokio::time::sleep(backoff), if retry => {
                    tried.clear();
                    backoff = (backoff * 2).min(RETRY_MAX);
                }
                () = tokio::time::sleep_until(deadline) => return Err(InvokeError::QueueTimeout),
            }
        }
    }
}

impl Backend for FiberdBackend {
    fn invoke(&self, req: http::Request<Body>, deadline: Instant) -> BoxFuture<'_, Result<http::Response<Body>, InvokeError>> {
        Box::pin(self.forward(req, deadline))
    }

    fn max_request_body(&self) -> u64 {
        self.config.max_request_body
    }

    /// Requests in flight to the instances, requests waiting for one, and warm
    /// fibers as the instances last reported them; `desired` is fiberd's
    /// business and reads 0.
    fn stats(&self) -> BackendStats {
        let upstreams = self.upstreams.load();
        BackendStats {
            in_flight: upstreams.iter().map(|u| u.backend.in_flight()).sum(),
            queued: self.queued.load(Ordering::Acquire),
            fibers: upstreams.iter().map(|u| u.warm_fibers.load(Ordering::Acquire) as usize).sum(),
            desired: 0,
        }
    }

    /// No instance holds a warm fiber (or none is loaded).
    fn is_cold(&self) -> bool {
        self.upstreams.load().iter().all(|u| u.warm_fibers.load(Ordering::Acquire) == 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn instance(name: &str, port: u16) -> Instance {
        Instance { name: name.into(), address: SocketAddr::from(([127, 0, 0, 1], port)), warm_fibers: 1, max_fibers: 0 }
    }

    #[test]
    fn unchanged_instances_keep_their_connections_and_a_new_protocol_replaces_them() {
        let backend = FiberdBackend::new("ns", "rev", FiberdConfig::default(), &RouterMetrics::default());
        backend.set_instances(&[instance("a", 1), instance("b", 2), instance("dup", 2)], false);
        assert_eq!(backend.instances().len(), 2, "one upstream per address");
        let before = backend.upstreams.load_full();
        let version = *backend.changed.borrow();
        backend.set_instances(&[instance("a", 1), instance("b", 2)], false);
        assert!(Arc::ptr_eq(&before, &backend.upstreams.load_full()), "nothing changed, nothing replaced");
        assert_eq!(*backend.changed.borrow(), version, "waiters are not woken for nothing");
        backend.set_instances(&[instance("b", 2)], false);
        assert!(Arc::ptr_eq(&before[1], &backend.upstreams.load()[0]), "b kept its pool");
        backend.set_instances(&[instance("b", 2)], true);
        assert!(backend.upstreams.load()[0].backend.is_h2c(), "h2c needs new connections");
    }

    #[test]
    fn picks_spread_over_idle_instances_and_skip_tried_ones() {
        let backend = FiberdBackend::new("ns", "rev", FiberdConfig::default(), &RouterMetrics::default());
        backend.set_instances(&[instance("a", 1), instance("b", 2), instance("c", 3)], false);
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..3 {
            seen.insert(backend.pick(&[]).map(|u| u.name.clone()));
        }
        assert_eq!(seen.len(), 3, "ties are taken in turn: {seen:?}");
        let tried = [SocketAddr::from(([127, 0, 0, 1], 1)), SocketAddr::from(([127, 0, 0, 1], 3))];
        for _ in 0..3 {
            assert_eq!(backend.pick(&tried).map(|u| u.name.clone()).as_deref(), Some("b"));
        }
        backend.close();
        assert!(backend.pick(&[]).is_none());
    }

    #[test]
    fn an_instance_takes_requests_in_proportion_to_the_fibers_it_may_run() {
        let backend = FiberdBackend::new("ns", "rev", FiberdConfig::default(), &RouterMetrics::default());
        let with_max = |name: &str, port, max_fibers| Instance { max_fibers, ..instance(name, port) };
        // max-scale 3 over two instances: shares 2 and 1.
        backend.set_instances(&[with_max("two", 1, 2), with_max("one", 2, 1)], false);
        let upstreams = backend.upstreams.load_full();
        // Each request is held as it is picked: three fill both shares, two where two may run.
        let mut held = Vec::new();
        let mut sent = Vec::new();
        for _ in 0..3 {
            let name = backend.pick(&[]).expect("an instance").name.clone();
            held.push(upstreams.iter().find(|u| u.name == name).expect("listed").backend.hold());
            sent.push(name);
        }
        sent.sort();
        assert_eq!(sent, ["one", "two", "two"]);
        drop(held);
        assert!(lighter((1, 2), (1, 1)) && !lighter((1, 1), (1, 2)), "1 busy of 2 is lighter than 1 of 1");
        assert!(!lighter((2, 4), (1, 2)), "equal loads are no lighter (ties go in turn)");
        let unreported = Upstream {
            name: "old".into(),
            backend: HttpBackend::new(SocketAddr::from(([127, 0, 0, 1], 9)), 1, HttpLimits::default()),
            warm_fibers: AtomicU32::new(0),
            max_fibers: AtomicU32::new(0),
        };
        assert_eq!(
            unreported.load(),
            (0, u64::from(UNREPORTED_MAX_FIBERS)),
            "an instance that reports no bound counts as fiberd's default"
        );
    }
}
