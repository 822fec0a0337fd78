//! Knative's Route semantics for Services served without a cluster (`ly run`):
//! a Service's resolved traffic becomes the KIngress upstream's Route
//! reconciler writes for it, and that KIngress is programmed like any other
//! ([`crate::kingress::routes`]). Local and cluster routing share one matcher
//! and one splitter.
//!
//! What upstream does, and so what this does:
//! - one rule per traffic name (the default target `""`, then each tag, sorted)
//!   and visibility: `ClusterLocal` always, `ExternalIP` unless the Service is
//!   labelled `networking.knative.dev/visibility: cluster-local` or the domain
//!   is the cluster's own (`svc.cluster.local`);
//! - hosts: `<name>.<namespace>.<domain>` in public, and in the cluster
//!   `<name>.<namespace>`, `<name>.<namespace>.svc` and
//!   `<name>.<namespace>.svc.<cluster domain>`, where `<name>` is the Service's
//!   or `<tag>-<service>` (upstream's default domain and tag templates);
//! - the default rule splits by the targets' percentages (targets naming the
//!   same Revision merged, zero-percent targets left out); a tag's rule sends
//!   everything to its Revision;
//! - each split appends `Knative-Serving-Revision` and `Knative-Serving-Namespace`;
//! - with tag-header routing (`tag-header-based-routing` in `config-features`)
//!   the default rule first routes `Knative-Serving-Tag: <tag>` to the tag's
//!   Revision and marks its own requests `Knative-Serving-Default-Route: true`,
//!   and a tag's rule sets `Knative-Serving-Tag`.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use lampyr_api::networking::{
    HeaderMatch, HttpIngressPath, HttpIngressRuleValue, HttpOption, Ingress, IngressBackendSplit, IngressRule, IngressSpec,
    IngressVisibility,
};

use crate::server::{NAMESPACE_HEADER, REVISION_HEADER};
use crate::table::RouteTable;

/// Header a request names a tag with (tag-header routing).
pub const TAG_HEADER: &str = "knative-serving-tag";
/// Header marking requests routed by the default target (tag-header routing).
pub const DEFAULT_ROUTE_HEADER: &str = "knative-serving-default-route";
/// The label (on a Service, copied to its Route) that keeps every host in the cluster.
pub const VISIBILITY_LABEL: &str = "networking.knative.dev/visibility";

/// One resolved traffic target: a Revision, its share, and its tag if any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrafficRoute {
    /// Gives the target its own `<tag>-<service>` hosts.
    pub tag: Option<String>,
    /// The Revision.
    pub revision: String,
    /// Share of the Service's requests, 0–100.
    pub percent: u32,
}

/// A Service's traffic as its Route resolves it (every target named by Revision).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceTraffic {
    /// Namespace.
    pub namespace: String,
    /// Service (and Route) name.
    pub name: String,
    /// Targets in `spec.traffic` order.
    pub targets: Vec<TrafficRoute>,
    /// Labelled `networking.knative.dev/visibility: cluster-local`: no public hosts.
    pub cluster_local: bool,
}

impl ServiceTraffic {
    /// All of `namespace/name`'s traffic to `revision`, untagged, public.
    pub fn single(namespace: &str, name: &str, revision: &str) -> Self {
        ServiceTraffic {
            namespace: namespace.into(),
            name: name.into(),
            targets: vec![TrafficRoute { tag: None, revision: revision.into(), percent: 100 }],
            cluster_local: false,
        }
    }

    /// Whether `labels` (a Service's or Route's) keep it inside the cluster.
    pub fn is_cluster_local(labels: Option<&BTreeMap<String, String>>) -> bool {
        labels.and_then(|l| l.get(VISIBILITY_LABEL)).is_some_and(|v| v == "cluster-local")
    }
}

/// The settings upstream reads from `config-domain`, `config-network` and `config-features`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteOptions {
    /// Domain of public hosts (`config-domain`).
    pub domain: String,
    /// The cluster's DNS domain.
    pub cluster_domain: String,
    /// `tag-header-based-routing: enabled` (off by default, as upstream).
    pub tag_header_routing: bool,
}

impl Default for RouteOptions {
    fn default() -> Self {
        RouteOptions { domain: "localhost".into(), cluster_domain: "cluster.local".into(), tag_header_routing: false }
    }
}

/// The KIngress upstream's Route reconciler writes for `traffic`.
pub fn ingress(traffic: &ServiceTraffic, options: &RouteOptions) -> Ingress {
    let mut names: Vec<&str> = traffic.targets.iter().filter_map(|t| t.tag.as_deref()).filter(|t| !t.is_empty()).collect();
    names.sort_unstable();
    names.dedup();
    let ns = traffic.namespace.as_str();
    // A domain inside the cluster's (upstream's default, `svc.cluster.local`) makes every host cluster-local.
    let cluster_local = traffic.cluster_local || options.domain == format!("svc.{}", options.cluster_domain);
    let mut rules = Vec::new();
    for name in std::iter::once("").chain(names.iter().copied()) {
        let mut visibilities = vec![IngressVisibility::ClusterLocal];
        if !cluster_local {
            visibilities.push(IngressVisibility::ExternalIp);
        }
        for visibility in visibilities {
            let mut base = base_path(ns, &targets_of(traffic, name));
            let mut paths = Vec::new();
            if options.tag_header_routing {
                if name.is_empty() {
                    base.append_headers.insert(DEFAULT_ROUTE_HEADER.into(), "true".into());
                    for tag in &names {
                        let mut by_header = base_path(ns, &targets_of(traffic, tag));
                        by_header.headers.insert(TAG_HEADER.into(), HeaderMatch { exact: (*tag).into() });
                        paths.push(by_header);
                    }
                } else {
                    base.append_headers.insert(TAG_HEADER.into(), name.into());
                }
            }
            paths.push(base);
            rules.push(IngressRule {
                hosts: hosts(traffic, name, visibility, options),
                visibility: Some(visibility),
                http: Some(HttpIngressRuleValue { paths }),
            });
        }
    }
    Ingress {
        metadata: ObjectMeta { name: Some(traffic.name.clone()), namespace: Some(traffic.namespace.clone()), ..ObjectMeta::default() },
        spec: IngressSpec { rules, tls: vec![], http_option: Some(HttpOption::Enabled) },
        status: None,
    }
}

/// Programs `traffic`'s hosts into `table`, as fiber-router programs a KIngress.
/// A host another Service already routes is an error naming both.
pub fn program(table: &mut RouteTable, traffic: &ServiceTraffic, options: &RouteOptions) -> Result<(), String> {
    let ingress = ingress(traffic, options);
    let routes = crate::kingress::routes(&ingress).map_err(|e| e.message)?;
    for (host, route) in routes {
        if !table.insert_host(&host, route) {
            let owner = table.host(&host).map_or_else(String::new, |r| r.ingress.clone());
            return Err(format!("host {host} of service {}/{} is already routed to {owner}", traffic.namespace, traffic.name));
        }
    }
    Ok(())
}

/// The targets of traffic name `name`: every target for the default (`""`),
/// else the tagged one at 100 %; targets of one Revision merged.
fn targets_of(traffic: &ServiceTraffic, name: &str) -> Vec<(String, u32)> {
    let mut merged: Vec<(String, u32)> = Vec::new();
    for t in traffic.targets.iter().filter(|t| name.is_empty() || t.tag.as_deref() == Some(name)) {
        match merged.iter_mut().find(|(rev, _)| *rev == t.revision) {
            Some((_, percent)) => *percent += t.percent,
            None => merged.push((t.revision.clone(), t.percent)),
        }
    }
    if let [(_, percent)] = merged.as_mut_slice() {
        *percent = 100;
    }
    merged
}

fn base_path(namespace: &str, targets: &[(String, u32)]) -> HttpIngressPath {
    let splits = targets
        .iter()
        .filter(|(_, percent)| *percent > 0)
        .map(|(revision, percent)| IngressBackendSplit {
            service_namespace: namespace.into(),
            service_name: revision.clone(),
            service_port: IntOrString::Int(80),
            percent: i64::from(*percent),
            append_headers: BTreeMap::from([
                (header_case(REVISION_HEADER), revision.clone()),
                (header_case(NAMESPACE_HEADER), namespace.to_string()),
            ]),
        })
        .collect();
    HttpIngressPath { splits, ..HttpIngressPath::default() }
}

/// `knative-serving-revision` → `Knative-Serving-Revision`, as upstream spells them.
fn header_case(name: &str) -> String {
    name.split('-').map(|w| w[..1].to_ascii_uppercase() + &w[1..]).collect::<Vec<_>>().join("-")
}

fn hosts(traffic: &ServiceTraffic, name: &str, visibility: IngressVisibility, options: &RouteOptions) -> Vec<String> {
    let host = if name.is_empty() { traffic.name.clone() } else { format!("{name}-{}", traffic.name) };
    let ns = &traffic.namespace;
    let mut hosts = match visibility {
        IngressVisibility::ExternalIp => vec![format!("{host}.{ns}.{}", options.domain)],
        IngressVisibility::ClusterLocal => {
            vec![format!("{host}.{ns}"), format!("{host}.{ns}.svc"), format!("{host}.{ns}.svc.{}", options.cluster_domain)]
        }
    };
    hosts.sort();
    hosts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shop() -> ServiceTraffic {
        let t = |tag: Option<&str>, revision: &str, percent| TrafficRoute { tag: tag.map(Into::into), revision: revision.into(), percent };
        ServiceTraffic {
            namespace: "default".into(),
            name: "shop".into(),
            targets: vec![t(Some("current"), "shop-1", 80), t(Some("candidate"), "shop-2", 20), t(Some("latest"), "shop-2", 0)],
            cluster_local: false,
        }
    }

    fn splits(ingress: &Ingress, host: &str) -> Vec<(String, i64)> {
        let rule = ingress.spec.rules.iter().find(|r| r.hosts.iter().any(|h| h == host)).expect("a rule for the host");
        let path = rule.http.as_ref().and_then(|h| h.paths.last()).expect("a path");
        path.splits.iter().map(|s| (s.service_name.clone(), s.percent)).collect()
    }

    #[test]
    fn tags_get_hosts_of_their_own_and_all_their_traffic() {
        let ingress = ingress(&shop(), &RouteOptions::default());
        assert_eq!(splits(&ingress, "shop.default.localhost"), [("shop-1".into(), 80), ("shop-2".into(), 20)]);
        assert_eq!(splits(&ingress, "candidate-shop.default.localhost"), [("shop-2".into(), 100)]);
        assert_eq!(splits(&ingress, "latest-shop.default.localhost"), [("shop-2".into(), 100)], "a zero-percent tag is still reachable");
        assert_eq!(splits(&ingress, "current-shop.default.svc.cluster.local"), [("shop-1".into(), 100)]);
        assert_eq!(splits(&ingress, "shop.default"), [("shop-1".into(), 80), ("shop-2".into(), 20)]);
        assert_eq!(ingress.spec.rules.len(), 8, "default and three tags, each cluster-local and public");
    }

    #[test]
    fn cluster_local_services_have_no_public_hosts() {
        let ingress = ingress(&ServiceTraffic { cluster_local: true, ..shop() }, &RouteOptions::default());
        assert!(ingress.spec.rules.iter().all(|r| r.visibility == Some(IngressVisibility::ClusterLocal)));
        assert!(!ingress.spec.rules.iter().flat_map(|r| &r.hosts).any(|h| h.ends_with(".localhost")));
    }

    #[test]
    fn tag_header_routing_adds_a_path_per_tag_before_the_default_one() {
        let options = RouteOptions { tag_header_routing: true, ..RouteOptions::default() };
        let ingress = ingress(&shop(), &options);
        let rule = ingress.spec.rules.iter().find(|r| r.hosts == ["shop.default.localhost"]).expect("the public default rule");
        let paths = &rule.http.as_ref().expect("http").paths;
        let tags: Vec<&str> = paths.iter().filter_map(|p| p.headers.get(TAG_HEADER)).map(|m| m.exact.as_str()).collect();
        assert_eq!(tags, ["candidate", "current", "latest"]);
        assert_eq!(paths.last().and_then(|p| p.append_headers.get(DEFAULT_ROUTE_HEADER)).map(String::as_str), Some("true"));
    }

    #[test]
    fn the_same_revision_named_twice_is_one_split() {
        let mut traffic = shop();
        traffic.targets.push(TrafficRoute { tag: None, revision: "shop-1".into(), percent: 0 });
        traffic.targets[0].percent = 50;
        traffic.targets.push(TrafficRoute { tag: None, revision: "shop-1".into(), percent: 30 });
        assert_eq!(
            splits(&ingress(&traffic, &RouteOptions::default()), "shop.default.localhost"),
            [("shop-1".into(), 80), ("shop-2".into(), 20)]
        );
    }
}
