//! The routing table: Revisions by namespace and name, Services with their
//! traffic splits, and how a request picks its Revision.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use lampyr_fiber::policy::FiberPolicy;

use crate::backend::Backend;
use crate::metrics::RevisionMetrics;

/// One routable Revision.
pub struct RevisionEntry {
    /// Namespace.
    pub namespace: String,
    /// Revision name.
    pub name: String,
    /// What the Revision runs with.
    pub policy: FiberPolicy,
    /// What serves it.
    pub backend: Arc<dyn Backend>,
    /// Its metric handles, looked up on first use.
    pub(crate) metrics: OnceLock<RevisionMetrics>,
}

impl RevisionEntry {
    /// A Revision `namespace/name` served by `backend` under `policy`.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>, policy: FiberPolicy, backend: Arc<dyn Backend>) -> Self {
        RevisionEntry { namespace: namespace.into(), name: name.into(), policy, backend, metrics: OnceLock::new() }
    }
}

/// A Service's traffic: Revision names with percentages summing to 100.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceRoute {
    /// Namespace.
    pub namespace: String,
    /// Service name.
    pub name: String,
    /// `(revision, percent)` pairs.
    pub traffic: Vec<(String, u32)>,
}

/// Everything the router can route to; replaced whole on every change.
#[derive(Clone, Default)]
pub struct RouteTable {
    revisions: HashMap<(String, String), Arc<RevisionEntry>>,
    services: HashMap<(String, String), ServiceRoute>,
}

impl RouteTable {
    /// Adds or replaces a Revision.
    pub fn insert_revision(&mut self, entry: RevisionEntry) {
        self.revisions.insert((entry.namespace.clone(), entry.name.clone()), Arc::new(entry));
    }

    /// Adds or replaces a Service's traffic.
    pub fn insert_service(&mut self, route: ServiceRoute) {
        self.services.insert((route.namespace.clone(), route.name.clone()), route);
    }

    /// The Revision `namespace/name`.
    pub fn revision(&self, namespace: &str, name: &str) -> Option<&Arc<RevisionEntry>> {
        self.revisions.get(&(namespace.to_string(), name.to_string()))
    }

    /// The Service `namespace/name`.
    pub fn service(&self, namespace: &str, name: &str) -> Option<&ServiceRoute> {
        self.services.get(&(namespace.to_string(), name.to_string()))
    }

    /// Every Revision.
    pub fn revisions(&self) -> impl Iterator<Item = &Arc<RevisionEntry>> {
        self.revisions.values()
    }

    /// Every Service.
    pub fn services(&self) -> impl Iterator<Item = &ServiceRoute> {
        self.services.values()
    }

    /// Picks the Revision of `service` for one request, weighted by traffic percent;
    /// `roll` is uniform in `0..100`.
    pub fn pick(&self, service: &ServiceRoute, roll: u32) -> Option<&Arc<RevisionEntry>> {
        let mut acc = 0;
        for (rev, percent) in &service.traffic {
            acc += percent;
            if roll < acc {
                return self.revision(&service.namespace, rev);
            }
        }
        service.traffic.last().and_then(|(rev, _)| self.revision(&service.namespace, rev))
    }
}

/// Splits `host[:port]` under `domain` into `(service, namespace)`:
/// `hello.default.localhost:8080` → `("hello", "default")`.
pub fn parse_host<'a>(host: &'a str, domain: &str) -> Option<(&'a str, &'a str)> {
    let host = strip_port(host);
    let prefix = host.strip_suffix(domain)?.strip_suffix('.')?;
    let (service, namespace) = prefix.split_once('.')?;
    (!service.is_empty() && !namespace.is_empty() && !namespace.contains('.')).then_some((service, namespace))
}

fn strip_port(host: &str) -> &str {
    if host.starts_with('[') {
        return host.split_once(']').map_or(host, |(h, _)| &host[..h.len() + 1]);
    }
    match host.rsplit_once(':') {
        Some((h, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_name_service_and_namespace() {
        assert_eq!(parse_host("hello.default.localhost:8080", "localhost"), Some(("hello", "default")));
        assert_eq!(parse_host("hello.default.localhost", "localhost"), Some(("hello", "default")));
        assert_eq!(parse_host("a.b.c.example.com", "example.com"), None, "namespaces have no dots");
        assert_eq!(parse_host("api.prod.example.com", "example.com"), Some(("api", "prod")));
        assert_eq!(parse_host("localhost:8080", "localhost"), None);
        assert_eq!(parse_host("hello.default.other", "localhost"), None);
        assert_eq!(parse_host("xlocalhost", "localhost"), None);
    }

    #[test]
    fn traffic_rolls_map_onto_percentages() {
        let table = RouteTable::default();
        let svc = ServiceRoute {
            namespace: "ns".into(),
            name: "s".into(),
            traffic: vec![("a".into(), 90), ("b".into(), 10)],
        };
        // No revisions loaded: nothing to pick, but the walk must not panic.
        assert!(table.pick(&svc, 95).is_none());
    }
}
