//! Metrics of the Fiber Revision reconciler, labelled by bounded names only
//! (never by Revision or error text). Listed in `docs/lampyr-controller.md`.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

type Labels = Vec<(&'static str, &'static str)>;

/// Every metric of the reconciler; register once with [`Metrics::register`].
#[derive(Clone)]
pub struct Metrics {
    /// Reconciles, by `result` (`success` or the error's label).
    pub reconciles: Family<Labels, Counter>,
    /// Reconcile duration.
    pub reconcile_seconds: Histogram,
    /// Artifact pulls, by `outcome` (`verified` or the problem's label).
    pub artifact_pulls: Family<Labels, Counter>,
    /// Artifact resolutions that failed, by `problem` (cached successes are not counted).
    pub artifact_failures: Family<Labels, Counter>,
    /// Status writes, by `object` (`revision` or `home`).
    pub status_writes: Family<Labels, Counter>,
    /// Child objects applied, by `kind` (`Home`, `CapacityGrant`, `Service`).
    pub child_applies: Family<Labels, Counter>,
    /// Homes placed on a grant, by grant kind (`shared` or `named`).
    pub placements: Family<Labels, Counter>,
    /// 1 while this process leads (or runs without leader election), else 0.
    pub leader: Gauge,
    /// 1 while the autoscaler settings in effect are `config-autoscaler`'s
    /// (upstream's defaults when it does not exist), 0 while it is invalid or unread.
    pub autoscaler_config_valid: Gauge,
    /// Entries of the image map in effect.
    pub image_map_entries: Gauge,
    /// Entries of the image map left out as invalid.
    pub image_map_invalid_entries: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            reconciles: Family::default(),
            // 1 ms … ~65 s.
            reconcile_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 17)),
            artifact_pulls: Family::default(),
            artifact_failures: Family::default(),
            status_writes: Family::default(),
            child_applies: Family::default(),
            placements: Family::default(),
            leader: Gauge::default(),
            autoscaler_config_valid: Gauge::default(),
            image_map_entries: Gauge::default(),
            image_map_invalid_entries: Gauge::default(),
        }
    }
}

impl Metrics {
    /// Registers every metric under the `lampyr_controller` prefix.
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("lampyr_controller");
        r.register("reconciles", "Revision reconciles, by result", self.reconciles.clone());
        r.register("reconcile_seconds", "Time per Revision reconcile", self.reconcile_seconds.clone());
        r.register("artifact_pulls", "Snapshot artifact pulls, by outcome", self.artifact_pulls.clone());
        r.register("artifact_failures", "Snapshot artifacts that could not be used, by problem", self.artifact_failures.clone());
        r.register("status_writes", "Status writes, by object", self.status_writes.clone());
        r.register("child_applies", "Server-side applies of owned objects, by kind", self.child_applies.clone());
        r.register("placements", "Homes placed on a CapacityGrant, by grant kind", self.placements.clone());
        r.register("leader", "1 while this process reconciles (holds the lease)", self.leader.clone());
        r.register(
            "autoscaler_config_valid",
            "1 while config-autoscaler's settings are in effect, 0 while it is invalid (the last valid ones are) or unread",
            self.autoscaler_config_valid.clone(),
        );
        r.register(
            "image_map_entries",
            "Entries of the image map (lampyr-system/image-artifacts) in effect",
            self.image_map_entries.clone(),
        );
        r.register(
            "image_map_invalid_entries",
            "Entries of the image map left out because they are invalid",
            self.image_map_invalid_entries.clone(),
        );
    }

    pub(crate) fn count(family: &Family<Labels, Counter>, key: &'static str, value: &'static str) {
        family.get_or_create(&vec![(key, value)]).inc();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::collections::BTreeSet;

    use super::*;

    /// Every registered metric is in `docs/lampyr-controller.md`'s table, and every one there is registered.
    #[test]
    fn the_documented_metrics_are_the_registered_ones() {
        let mut registry = Registry::default();
        let metrics = Metrics::default();
        metrics.register(&mut registry);
        // Families appear in the text format once they have a series.
        Metrics::count(&metrics.reconciles, "result", "success");
        Metrics::count(&metrics.artifact_pulls, "outcome", "verified");
        Metrics::count(&metrics.artifact_failures, "problem", "missing");
        Metrics::count(&metrics.status_writes, "object", "revision");
        Metrics::count(&metrics.child_applies, "kind", "Home");
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        let registered: BTreeSet<String> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .map(|l| {
                let mut parts = l.split_whitespace();
                let name = parts.next().unwrap_or_default();
                match parts.next() {
                    Some("counter") => format!("{name}_total"),
                    _ => name.to_string(),
                }
            })
            .collect();
        let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/lampyr-controller.md")).unwrap();
        let documented: BTreeSet<String> = doc
            .lines()
            .filter_map(|l| l.strip_prefix("| `"))
            .filter_map(|l| l.split('`').next())
            .filter(|name| name.starts_with("lampyr_controller_"))
            .map(str::to_string)
            .collect();
        assert_eq!(registered, documented);
    }
}
