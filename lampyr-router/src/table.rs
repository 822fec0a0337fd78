//! The routing table: Revisions by namespace and name, hosts programmed from
//! KIngresses (the cluster's, or those [`crate::route`] derives from a
//! Service), the certificates served for them, and how a request picks its
//! Revision.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use http::{HeaderMap, HeaderName, HeaderValue};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use lampyr_api::networking::IngressVisibility;
use lampyr_api::policy::FiberPolicy;

use crate::backend::Backend;
use crate::metrics::RevisionMetrics;
use crate::tls::Certificates;

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

/// How requests for one host are routed: a KIngress rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostRoute {
    /// The KIngress it comes from, `namespace/name` (for messages).
    pub ingress: String,
    /// Which listeners serve the host: `ExternalIP` hosts are served on every
    /// listener, `ClusterLocal` ones only on the internal one.
    pub visibility: IngressVisibility,
    /// Plain HTTP is redirected to HTTPS (`httpOption: Redirected` on an `ExternalIP` rule).
    pub redirect_to_https: bool,
    /// The KIngress's hash ([`crate::kingress::hash`]): what a network probe for the host is
    /// answered; empty while a Service the host routes to has no ready endpoint here.
    pub hash: String,
    /// Paths in order; the first that matches takes the request.
    pub paths: Vec<PathRoute>,
}

impl HostRoute {
    /// The first path matching `path` and `headers`.
    pub fn route(&self, path: &str, headers: &HeaderMap) -> Option<&PathRoute> {
        self.paths.iter().find(|p| p.matches(path, headers))
    }
}

/// One `http.paths[]` entry of a KIngress rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathRoute {
    /// Path prefix (`/` matches everything).
    pub prefix: String,
    /// Headers that must be present, with this exact value when one is given.
    pub headers: Vec<(HeaderName, Option<HeaderValue>)>,
    /// Headers set on every request taking this path.
    pub append_headers: Vec<(HeaderName, HeaderValue)>,
    /// Host the request continues with, when set.
    pub rewrite_host: Option<HeaderValue>,
    /// Weighted backends.
    pub splits: Vec<SplitRoute>,
}

impl PathRoute {
    /// Whether a request for `path` with `headers` takes this path.
    pub fn matches(&self, path: &str, headers: &HeaderMap) -> bool {
        path.starts_with(&self.prefix)
            && self.headers.iter().all(|(name, exact)| match (headers.get(name), exact) {
                (Some(value), Some(exact)) => value == exact,
                (found, None) => found.is_some(),
                (None, Some(_)) => false,
            })
    }

    /// Sum of the splits' percentages.
    pub fn total_percent(&self) -> u32 {
        self.splits.iter().map(|s| s.percent).sum()
    }

    /// The split for one request, weighted by percent; `roll` is uniform in
    /// `0..total_percent()` (any value when that is 0: the first split is taken).
    pub fn pick(&self, roll: u32) -> Option<&SplitRoute> {
        let mut acc = 0;
        for split in &self.splits {
            acc += split.percent;
            if roll < acc {
                return Some(split);
            }
        }
        self.splits.first().filter(|_| acc == 0).or_else(|| self.splits.last())
    }
}

/// One backend of a path: a Revision (its per-Revision Service is named like it) and its share.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitRoute {
    /// Namespace of the backend Service.
    pub namespace: String,
    /// Name of the backend Service: the Revision's name, or an ordinary Service's.
    pub service: String,
    /// The Service port the split names (used when it is no Revision: [`crate::services`]).
    pub port: IntOrString,
    /// Share of the path's requests, 0–100.
    pub percent: u32,
    /// Headers set on requests sent to this backend.
    pub append_headers: Vec<(HeaderName, HeaderValue)>,
}

/// Everything the router can route to; replaced whole on every change.
#[derive(Clone, Default)]
pub struct RouteTable {
    /// By namespace, then name: a request's lookup borrows both.
    revisions: HashMap<String, HashMap<String, Arc<RevisionEntry>>>,
    hosts: HashMap<String, Arc<HostRoute>>,
    certificates: Certificates,
}

impl RouteTable {
    /// Adds or replaces a Revision.
    pub fn insert_revision(&mut self, entry: RevisionEntry) {
        self.revisions.entry(entry.namespace.clone()).or_default().insert(entry.name.clone(), Arc::new(entry));
    }

    /// The Revision `namespace/name`.
    pub fn revision(&self, namespace: &str, name: &str) -> Option<&Arc<RevisionEntry>> {
        self.revisions.get(namespace)?.get(name)
    }

    /// Every Revision.
    pub fn revisions(&self) -> impl Iterator<Item = &Arc<RevisionEntry>> {
        self.revisions.values().flat_map(HashMap::values)
    }

    /// Routes requests for `host` (a DNS name, no port; matched without regard
    /// to case) by `route`, unless the host is routed already: the first
    /// route for a host wins, and `false` says this one was not added.
    pub fn insert_host(&mut self, host: &str, route: Arc<HostRoute>) -> bool {
        match self.hosts.entry(host.to_ascii_lowercase()) {
            std::collections::hash_map::Entry::Occupied(_) => false,
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(route);
                true
            }
        }
    }

    /// The route of `host` (`name[:port]`, any case).
    pub fn host(&self, host: &str) -> Option<&Arc<HostRoute>> {
        if self.hosts.is_empty() {
            return None;
        }
        let host = strip_port(host);
        match self.hosts.get(host) {
            Some(route) => Some(route),
            None if host.bytes().any(|b| b.is_ascii_uppercase()) => self.hosts.get(&host.to_ascii_lowercase()),
            None => None,
        }
    }

    /// The certificates HTTPS listeners serve, by host.
    pub fn certificates(&self) -> &Certificates {
        &self.certificates
    }

    /// The certificates, to add to.
    pub fn certificates_mut(&mut self) -> &mut Certificates {
        &mut self.certificates
    }

    /// Every routed host with its route.
    pub fn hosts(&self) -> impl Iterator<Item = (&str, &Arc<HostRoute>)> {
        self.hosts.iter().map(|(h, r)| (h.as_str(), r))
    }

    /// Clears the hash of every host whose KIngress (`namespace/name`) `waiting` names: it
    /// is programmed, but a Service it routes to is not found or has no ready endpoint here
    /// yet, so a network probe for it is not answered with its hash (see [`HostRoute::hash`]).
    pub fn withhold_hashes(&mut self, waiting: impl Fn(&str) -> bool) {
        for route in self.hosts.values_mut().filter(|r| !r.hash.is_empty() && waiting(&r.ingress)) {
            *route = Arc::new(HostRoute { hash: String::new(), ..HostRoute::clone(route) });
        }
    }
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

    fn split(service: &str, percent: u32) -> SplitRoute {
        SplitRoute { namespace: "ns".into(), service: service.into(), port: IntOrString::Int(80), percent, append_headers: vec![] }
    }

    #[test]
    fn paths_match_prefix_and_headers_and_splits_follow_percentages() {
        let tagged = PathRoute {
            prefix: "/".into(),
            headers: vec![(HeaderName::from_static("knative-serving-tag"), Some(HeaderValue::from_static("blue")))],
            append_headers: vec![],
            rewrite_host: None,
            splits: vec![split("blue", 100)],
        };
        let present =
            PathRoute { headers: vec![(HeaderName::from_static("x-any"), None)], splits: vec![split("any", 0)], ..tagged.clone() };
        let api = PathRoute { prefix: "/api".into(), headers: vec![], splits: vec![split("a", 30), split("b", 70)], ..tagged.clone() };
        let rest = PathRoute { prefix: "/".into(), headers: vec![], splits: vec![split("rest", 100)], ..tagged.clone() };
        let host = HostRoute {
            hash: String::new(),
            ingress: "ns/r".into(),
            visibility: IngressVisibility::ExternalIp,
            redirect_to_https: false,
            paths: vec![tagged, present, api, rest],
        };
        let mut headers = HeaderMap::new();
        let first = |path: &str, headers: &HeaderMap| host.route(path, headers).map(|p| p.splits[0].service.clone());
        assert_eq!(first("/api/x", &headers).as_deref(), Some("a"));
        assert_eq!(first("/other", &headers).as_deref(), Some("rest"));
        headers.insert("knative-serving-tag", HeaderValue::from_static("green"));
        assert_eq!(first("/", &headers).as_deref(), Some("rest"), "a header with another value does not match");
        headers.insert("knative-serving-tag", HeaderValue::from_static("blue"));
        assert_eq!(first("/api", &headers).as_deref(), Some("blue"), "paths are tried in order");
        headers.clear();
        headers.insert("x-any", HeaderValue::from_static(""));
        assert_eq!(first("/", &headers).as_deref(), Some("any"), "no exact value: presence matches");

        let api = &host.paths[2];
        assert_eq!(api.total_percent(), 100);
        assert_eq!(api.pick(29).map(|s| s.service.as_str()), Some("a"));
        assert_eq!(api.pick(30).map(|s| s.service.as_str()), Some("b"));
        assert_eq!(host.paths[1].pick(0).map(|s| s.service.as_str()), Some("any"), "all zero: the first split");
    }

    #[test]
    fn hosts_match_without_port_or_case_and_the_first_route_wins() {
        let route = |ingress: &str| {
            Arc::new(HostRoute {
                ingress: ingress.into(),
                visibility: IngressVisibility::ClusterLocal,
                redirect_to_https: false,
                paths: vec![],
                hash: String::new(),
            })
        };
        let mut table = RouteTable::default();
        assert!(table.insert_host("Hello.NS.svc.cluster.local", route("ns/first")));
        assert!(!table.insert_host("hello.ns.svc.cluster.local", route("ns/second")));
        for host in ["hello.ns.svc.cluster.local", "hello.ns.svc.cluster.local:80", "HELLO.ns.svc.cluster.local:8080"] {
            assert_eq!(table.host(host).map(|r| r.ingress.as_str()), Some("ns/first"), "{host}");
        }
        assert!(table.host("hello.ns").is_none());
    }
}
