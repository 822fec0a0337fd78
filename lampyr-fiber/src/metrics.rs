//! Prometheus metrics of the fiber runtime, labelled by Revision and by
//! bounded outcome names (never by error text). Listed in `docs/metrics.md`.

use lampyr_router::OUTCOMES;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

type Labels = Vec<(String, String)>;

/// Every runtime metric family; register once with [`RuntimeMetrics::register`].
#[derive(Clone)]
pub struct RuntimeMetrics {
    /// Requests served by fibers, by Revision and outcome.
    pub requests: Family<Labels, Counter>,
    /// Time spent executing guest code per request.
    pub guest_seconds: Family<Labels, Histogram, fn() -> Histogram>,
    /// Time per request spent in the host around the guest call (queueing excluded).
    pub host_overhead_seconds: Family<Labels, Histogram, fn() -> Histogram>,
    /// Fibers created from a template.
    pub fiber_starts: Family<Labels, Counter>,
    /// Fibers restored to their template after a request.
    pub restores: Family<Labels, Counter>,
    /// Requests interrupted at their deadline.
    pub timeouts: Family<Labels, Counter>,
    /// Guest panics and aborts.
    pub crashes: Family<Labels, Counter>,
    /// Fibers dropped because they could not be restored or misbehaved.
    pub discards: Family<Labels, Counter>,
    /// Requests executing in fibers now.
    pub in_flight: Family<Labels, Gauge>,
    /// Requests waiting for a fiber now.
    pub queued: Family<Labels, Gauge>,
    /// Fibers alive (idle or busy) now.
    pub fibers: Family<Labels, Gauge>,
}

fn latency_histogram() -> Histogram {
    // 10 µs … ~42 s.
    Histogram::new(exponential_buckets(1e-5, 2.0, 23))
}

impl Default for RuntimeMetrics {
    fn default() -> Self {
        RuntimeMetrics {
            requests: Family::default(),
            guest_seconds: Family::new_with_constructor(latency_histogram as fn() -> Histogram),
            host_overhead_seconds: Family::new_with_constructor(latency_histogram as fn() -> Histogram),
            fiber_starts: Family::default(),
            restores: Family::default(),
            timeouts: Family::default(),
            crashes: Family::default(),
            discards: Family::default(),
            in_flight: Family::default(),
            queued: Family::default(),
            fibers: Family::default(),
        }
    }
}

impl RuntimeMetrics {
    /// Registers every family under the `lampyr_fiber` prefix, the process's spare
    /// sandboxes' ([`crate::runtime::spare::register`]) with them.
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("lampyr_fiber");
        r.register("requests", "Requests served by fibers, by revision and outcome", self.requests.clone());
        r.register("guest_seconds", "Guest execution time per request", self.guest_seconds.clone());
        r.register(
            "host_overhead_seconds",
            "Host time per request around the guest call: dispatch, encode, decode, excluding queueing",
            self.host_overhead_seconds.clone(),
        );
        r.register("starts", "Fibers created from a template", self.fiber_starts.clone());
        r.register("restores", "Fibers restored to their template after a request", self.restores.clone());
        r.register("timeouts", "Requests interrupted at their deadline", self.timeouts.clone());
        r.register("crashes", "Guest panics and aborts", self.crashes.clone());
        r.register("discards", "Fibers dropped after a failed restore or malformed output", self.discards.clone());
        r.register("in_flight", "Requests executing in fibers", self.in_flight.clone());
        r.register("queued", "Requests waiting for a fiber", self.queued.clone());
        r.register("fibers", "Fibers alive, idle or busy", self.fibers.clone());
        crate::runtime::spare::register(registry);
    }
}

/// Label set naming one Revision.
pub fn revision_labels(revision: &str) -> Labels {
    vec![("revision".to_string(), revision.to_string())]
}

/// Label set naming one Revision and an outcome.
pub fn outcome_labels(revision: &str, outcome: &'static str) -> Labels {
    vec![("revision".to_string(), revision.to_string()), ("outcome".to_string(), outcome.to_string())]
}

/// One Revision's metric handles, looked up once so requests never search the families.
#[derive(Clone)]
pub struct PoolMetrics {
    requests: Vec<(&'static str, Counter)>,
    /// Guest time per request.
    pub guest_seconds: Histogram,
    /// Host overhead per request.
    pub host_overhead_seconds: Histogram,
    /// Fibers created.
    pub fiber_starts: Counter,
    /// Fibers restored.
    pub restores: Counter,
    /// Requests interrupted at their deadline.
    pub timeouts: Counter,
    /// Guest crashes.
    pub crashes: Counter,
    /// Fibers discarded.
    pub discards: Counter,
    /// Requests executing now.
    pub in_flight: Gauge,
    /// Requests waiting now.
    pub queued: Gauge,
    /// Fibers alive now.
    pub fibers: Gauge,
}

impl PoolMetrics {
    /// Counts one request with `outcome` (one of [`OUTCOMES`]).
    pub fn request(&self, outcome: &str) {
        if let Some((_, c)) = self.requests.iter().find(|(name, _)| *name == outcome) {
            c.inc();
        }
    }
}

impl RuntimeMetrics {
    /// The handles of Revision `revision`.
    pub fn for_revision(&self, revision: &str) -> PoolMetrics {
        let labels = revision_labels(revision);
        PoolMetrics {
            requests: OUTCOMES.iter().map(|o| (*o, self.requests.get_or_create_owned(&outcome_labels(revision, o)))).collect(),
            guest_seconds: self.guest_seconds.get_or_create_owned(&labels),
            host_overhead_seconds: self.host_overhead_seconds.get_or_create_owned(&labels),
            fiber_starts: self.fiber_starts.get_or_create_owned(&labels),
            restores: self.restores.get_or_create_owned(&labels),
            timeouts: self.timeouts.get_or_create_owned(&labels),
            crashes: self.crashes.get_or_create_owned(&labels),
            discards: self.discards.get_or_create_owned(&labels),
            in_flight: self.in_flight.get_or_create_owned(&labels),
            queued: self.queued.get_or_create_owned(&labels),
            fibers: self.fibers.get_or_create_owned(&labels),
        }
    }
}
