//! Prometheus metrics of fiber-router, labelled by namespace, Revision and
//! status code (bounded sets). Listed in `docs/metrics.md`.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

type Labels = Vec<(String, String)>;

fn latency() -> Histogram {
    // 50 µs … ~105 s.
    Histogram::new(exponential_buckets(5e-5, 2.0, 22))
}

/// Every router metric family.
#[derive(Clone)]
pub struct RouterMetrics {
    /// Requests by namespace, Revision and status code.
    pub requests: Family<Labels, Counter>,
    /// Time to the response head, by namespace, Revision and status code.
    pub duration: Family<Labels, Histogram, fn() -> Histogram>,
    /// Requests that found their Revision at zero fibers.
    pub cold_starts: Family<Labels, Counter>,
    /// Time to the response of requests that found their Revision at zero.
    pub cold_start_seconds: Family<Labels, Histogram, fn() -> Histogram>,
    /// Fibers the scaler wants.
    pub fibers_desired: Family<Labels, Gauge>,
    /// Fibers alive.
    pub fibers_actual: Family<Labels, Gauge>,
    /// Requests waiting for a fiber.
    pub queue_depth: Family<Labels, Gauge>,
    /// Requests that matched no Service or Revision.
    pub unrouted: Counter,
    /// Connections to fiberd instances that failed, so the request went to another instance.
    pub upstream_connect_failures: Family<Labels, Counter>,
    /// Requests a fiberd instance refused to run (no slot, queue full), so they went to another instance.
    pub upstream_refusals: Family<Labels, Counter>,
    /// Loaded fiberd instances a Revision's requests may go to.
    pub instances: Family<Labels, Gauge>,
    /// KIngresses of the router's class programmed into its routes.
    pub ingresses: Gauge,
    /// Upgraded connections (WebSockets) joined through the router and still open.
    pub upgraded_connections: Gauge,
}

impl Default for RouterMetrics {
    fn default() -> Self {
        RouterMetrics {
            requests: Family::default(),
            duration: Family::new_with_constructor(latency as fn() -> Histogram),
            cold_starts: Family::default(),
            cold_start_seconds: Family::new_with_constructor(latency as fn() -> Histogram),
            fibers_desired: Family::default(),
            fibers_actual: Family::default(),
            queue_depth: Family::default(),
            unrouted: Counter::default(),
            upstream_connect_failures: Family::default(),
            upstream_refusals: Family::default(),
            instances: Family::default(),
            ingresses: Gauge::default(),
            upgraded_connections: Gauge::default(),
        }
    }
}

impl RouterMetrics {
    /// Registers every family under the `lampyr_router` prefix.
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("lampyr_router");
        r.register("requests", "Requests by namespace, revision and status code", self.requests.clone());
        r.register("request_duration_seconds", "Time to the response head, by status code", self.duration.clone());
        r.register("cold_starts", "Requests that found their revision at zero fibers", self.cold_starts.clone());
        r.register("cold_start_duration_seconds", "Time to the response of cold-start requests", self.cold_start_seconds.clone());
        r.register("fibers_desired", "Fibers the scaler wants", self.fibers_desired.clone());
        r.register("fibers_actual", "Fibers alive", self.fibers_actual.clone());
        r.register("queue_depth", "Requests waiting for a fiber", self.queue_depth.clone());
        r.register("unrouted", "Requests that matched no service or revision", self.unrouted.clone());
        r.register(
            "upstream_connect_failures",
            "Connections to fiberd instances that failed, the request going to another instance",
            self.upstream_connect_failures.clone(),
        );
        r.register(
            "upstream_refusals",
            "Requests a fiberd instance refused to run (no fiber slot free, its queue full), each then offered to another instance",
            self.upstream_refusals.clone(),
        );
        r.register("instances", "Loaded fiberd instances serving a revision", self.instances.clone());
        r.register("ingresses", "KIngresses of the router's class programmed into its routes", self.ingresses.clone());
        r.register(
            "upgraded_connections",
            "Upgraded connections (WebSockets) joined through the router and open",
            self.upgraded_connections.clone(),
        );
    }
}

/// One Revision's handles, so a request never builds label sets or searches families.
pub struct RevisionMetrics {
    namespace: String,
    revision: String,
    codes: std::sync::Mutex<Vec<(u16, Counter, Histogram)>>,
    /// Cold-start requests.
    pub cold_starts: Counter,
    /// Time to the response of cold-start requests.
    pub cold_start_seconds: Histogram,
}

impl RevisionMetrics {
    /// Looks up the handles of `namespace/revision` in `m`.
    pub fn new(m: &RouterMetrics, namespace: &str, revision: &str) -> Self {
        let labels = revision_labels(namespace, revision);
        RevisionMetrics {
            namespace: namespace.to_string(),
            revision: revision.to_string(),
            codes: std::sync::Mutex::new(Vec::new()),
            cold_starts: m.cold_starts.get_or_create_owned(&labels),
            cold_start_seconds: m.cold_start_seconds.get_or_create_owned(&labels),
        }
    }

    /// Counts one answer with status `code` that took `seconds` to its head.
    pub fn observe(&self, m: &RouterMetrics, code: u16, seconds: f64) {
        let Ok(mut codes) = self.codes.lock() else { return };
        if let Some((_, count, duration)) = codes.iter().find(|(k, _, _)| *k == code) {
            count.inc();
            duration.observe(seconds);
            return;
        }
        let labels = code_labels(&self.namespace, &self.revision, code);
        let (count, duration) = (m.requests.get_or_create_owned(&labels), m.duration.get_or_create_owned(&labels));
        count.inc();
        duration.observe(seconds);
        codes.push((code, count, duration));
    }
}

/// `namespace` and `revision` labels.
pub fn revision_labels(namespace: &str, revision: &str) -> Labels {
    vec![("namespace".into(), namespace.into()), ("revision".into(), revision.into())]
}

/// `namespace`, `revision` and `code` labels; see [`code_label`].
pub fn code_labels(namespace: &str, revision: &str, code: u16) -> Labels {
    vec![("namespace".into(), namespace.into()), ("revision".into(), revision.into()), ("code".into(), code_label(code))]
}

/// The `code` label of status `code`, from a bounded set: a status with a
/// registered reason phrase (and 499) by number, any other by class (`"2xx"`),
/// so a guest inventing statuses cannot grow the label set past about 70 values.
pub fn code_label(code: u16) -> String {
    let known = code == 499 || http::StatusCode::from_u16(code).ok().and_then(|s| s.canonical_reason()).is_some();
    if known { code.to_string() } else { format!("{}xx", (code / 100).min(9)) }
}

/// Renders `registry` in the Prometheus/OpenMetrics text format.
pub fn render(registry: &Registry) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, registry);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_codes_label_by_number_when_registered_and_by_class_otherwise() {
        assert_eq!(code_label(200), "200");
        assert_eq!(code_label(431), "431");
        assert_eq!(code_label(499), "499");
        assert_eq!(code_label(299), "2xx");
        assert_eq!(code_label(999), "9xx");
        let distinct: std::collections::BTreeSet<String> = (100..1000).map(code_label).collect();
        assert!(distinct.len() < 80, "{} label values", distinct.len());
    }
}
