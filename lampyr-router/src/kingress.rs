//! KIngress (`networking.internal.knative.dev/v1alpha1` Ingress) as routes,
//! with upstream semantics as Kourier implements them:
//!
//! - a rule's hosts are matched exactly (any port, any case); `ClusterLocal`
//!   rules are served on internal listeners only, `ExternalIP` rules on every
//!   listener;
//! - paths are tried in order; a path matches when the request's path starts
//!   with `path` (`/` when empty) and every `headers` entry matches (its
//!   `exact` value, or mere presence when that is empty); a path without
//!   splits is left out;
//! - a split is chosen by `percent`; its `serviceName` is the Revision's
//!   per-Revision Service, named like the Revision, so it names the Revision
//!   served from its Home;
//! - the path's `appendHeaders`, then the split's, are set on the request
//!   (replacing what the client sent); `rewriteHost` replaces the Host;
//! - `httpOption: Redirected` answers `ExternalIP` rules with a `301` to HTTPS.
//!
//! TLS (`spec.tls`) is terminated on the router's HTTPS listener with the named
//! Secrets' certificates ([`crate::cluster`], [`crate::tls`]); plain HTTP to a
//! `Redirected` rule is sent there.

use std::collections::BTreeMap;
use std::sync::Arc;

use http::{HeaderName, HeaderValue};
use lampyr_api::conditions::{KnativeStatus, ingress as ingress_conditions};
use lampyr_api::keys::{INGRESS_CLASS_KEYS, lookup};
use lampyr_api::networking::{HttpOption, Ingress, IngressStatus, IngressVisibility, LoadBalancerIngressStatus};

use crate::table::{HostRoute, PathRoute, SplitRoute};

/// `NetworkConfigured` False: the spec cannot be turned into routes.
pub const REASON_INVALID_SPEC: &str = "InvalidIngressSpec";
/// `NetworkConfigured` False: a host is already served by another KIngress.
pub const REASON_HOST_CONFLICT: &str = "HostConflict";
/// `NetworkConfigured` False: `spec.tls` names a Secret that does not exist.
pub const REASON_TLS_SECRET_MISSING: &str = "TLSSecretMissing";
/// `NetworkConfigured` False: `spec.tls` names a Secret whose certificate cannot be served.
pub const REASON_TLS_SECRET_INVALID: &str = "TLSSecretInvalid";
/// `NetworkConfigured` False: `spec.tls` is set, and the router serves no HTTPS.
pub const REASON_TLS_NOT_SERVED: &str = "TLSNotServed";

/// The ingress class `ingress` asks for (`networking.knative.dev/ingress.class`
/// or its older spelling), if any.
pub fn ingress_class(ingress: &Ingress) -> Option<&str> {
    let annotations = ingress.metadata.annotations.as_ref()?;
    lookup(annotations, INGRESS_CLASS_KEYS).map(|(_, class)| class)
}

/// Why a KIngress is not (fully) programmed: the `NetworkConfigured` False reason and message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotConfigured {
    /// One-word reason.
    pub reason: &'static str,
    /// What is wrong, for the user.
    pub message: String,
}

/// The KIngress's hash as Knative computes it (`ingress.ComputeHash`): hex SHA-256 of its
/// spec as JSON, then its namespace and name. A router answers network probes with it.
pub fn hash(ingress: &Ingress) -> String {
    use sha2::Digest;
    let mut digest = sha2::Sha256::new();
    digest.update(serde_json::to_vec(&ingress.spec).unwrap_or_default());
    digest.update(ingress.metadata.namespace.as_deref().unwrap_or_default());
    digest.update(ingress.metadata.name.as_deref().unwrap_or_default());
    hex::encode(digest.finalize())
}

/// The host a network probe for `ingress` names: its first.
pub fn probe_host(ingress: &Ingress) -> Option<&str> {
    ingress.spec.rules.iter().flat_map(|r| &r.hosts).next().map(String::as_str)
}

/// `namespace/name` of `ingress`: how its routes name it ([`HostRoute::ingress`]).
pub fn ingress_key(ingress: &Ingress) -> String {
    format!("{}/{}", ingress.metadata.namespace.as_deref().unwrap_or_default(), ingress.metadata.name.as_deref().unwrap_or_default())
}

/// The routes of `ingress`: `(host, route)` pairs, every host of a rule
/// sharing its route, each host once. A host named by several rules takes the
/// first rule's paths, and is public if any of those rules is `ExternalIP`
/// (upstream names `<route>.<ns>.svc.cluster.local` in both rules when that is
/// the Route's domain). A spec that cannot be routed (an invalid header name
/// or value) yields no route at all, never half of them.
pub fn routes(ingress: &Ingress) -> Result<Vec<(String, Arc<HostRoute>)>, NotConfigured> {
    let name = ingress_key(ingress);
    let invalid = |message: String| NotConfigured { reason: REASON_INVALID_SPEC, message };
    let spec_hash = hash(ingress);
    let mut out = Vec::new();
    for (i, rule) in ingress.spec.rules.iter().enumerate() {
        let visibility = rule.visibility.unwrap_or(IngressVisibility::ExternalIp);
        let mut paths = Vec::new();
        for (j, path) in rule.http.iter().flat_map(|h| &h.paths).enumerate() {
            let at = |what: &str| format!("spec.rules[{i}].http.paths[{j}].{what}");
            if path.splits.is_empty() {
                continue;
            }
            let headers = path
                .headers
                .iter()
                .map(|(h, m)| {
                    let name = HeaderName::from_bytes(h.as_bytes())
                        .map_err(|_| invalid(format!("{}: invalid header name {h:?}", at("headers"))))?;
                    let exact = (!m.exact.is_empty())
                        .then(|| HeaderValue::from_str(&m.exact))
                        .transpose()
                        .map_err(|_| invalid(format!("{}: invalid value of header {h:?}", at("headers"))))?;
                    Ok((name, exact))
                })
                .collect::<Result<Vec<_>, _>>()?;
            let splits = path
                .splits
                .iter()
                .enumerate()
                .map(|(k, split)| {
                    Ok(SplitRoute {
                        namespace: split.service_namespace.clone(),
                        service: split.service_name.clone(),
                        port: split.service_port.clone(),
                        percent: u32::try_from(split.percent.clamp(0, 100)).unwrap_or(0),
                        append_headers: header_list(&split.append_headers, &at(&format!("splits[{k}].appendHeaders"))).map_err(invalid)?,
                    })
                })
                .collect::<Result<Vec<_>, NotConfigured>>()?;
            let rewrite_host = (!path.rewrite_host.is_empty())
                .then(|| HeaderValue::from_str(&path.rewrite_host))
                .transpose()
                .map_err(|_| invalid(format!("{}: invalid host {:?}", at("rewriteHost"), path.rewrite_host)))?;
            paths.push(PathRoute {
                prefix: if path.path.is_empty() { "/".to_string() } else { path.path.clone() },
                headers,
                append_headers: header_list(&path.append_headers, &at("appendHeaders")).map_err(invalid)?,
                rewrite_host,
                splits,
            });
        }
        if paths.is_empty() {
            continue;
        }
        let route = Arc::new(HostRoute {
            ingress: name.clone(),
            hash: spec_hash.clone(),
            visibility,
            redirect_to_https: ingress.spec.http_option == Some(HttpOption::Redirected) && visibility == IngressVisibility::ExternalIp,
            paths,
        });
        for host in &rule.hosts {
            let host = host.to_ascii_lowercase();
            match out.iter_mut().find(|(h, _)| *h == host) {
                None => out.push((host, Arc::clone(&route))),
                Some((_, first)) if first.visibility == IngressVisibility::ClusterLocal && visibility == IngressVisibility::ExternalIp => {
                    *first = Arc::new(HostRoute { visibility, redirect_to_https: route.redirect_to_https, ..HostRoute::clone(first) });
                }
                Some(_) => {}
            }
        }
    }
    Ok(out)
}

fn header_list(map: &BTreeMap<String, String>, at: &str) -> Result<Vec<(HeaderName, HeaderValue)>, String> {
    map.iter()
        .map(|(name, value)| {
            let n = HeaderName::from_bytes(name.as_bytes()).map_err(|_| format!("{at}: invalid header name {name:?}"))?;
            let v = HeaderValue::from_str(value).map_err(|_| format!("{at}: invalid value of header {name:?}"))?;
            Ok((n, v))
        })
        .collect()
}

/// The router's Services, as KIngress status reports them.
#[derive(Clone, Copy, Debug)]
pub struct LoadBalancers<'a> {
    /// The internal Service's DNS name: the private load balancer, which the Route
    /// reconciler points its placeholder Services at.
    pub private: &'a str,
    /// The public Service's DNS name: the public load balancer, which clients outside
    /// the cluster (and Knative's conformance suites) reach.
    pub public: &'a str,
}

/// The status `ingress` should have once the router has programmed it (or
/// failed to, with `outcome`): `observedGeneration` is the current generation;
/// on success `NetworkConfigured` and `LoadBalancerReady` are True (so `Ready`
/// is), with the load balancers at `balancers`. Conditions that do not change
/// keep their `lastTransitionTime`, so an unchanged status compares equal to
/// the one written before.
pub fn desired_status(ingress: &Ingress, outcome: Result<(), &NotConfigured>, balancers: LoadBalancers<'_>) -> IngressStatus {
    let mut status = ingress.status.clone().unwrap_or_default();
    status.initialize_conditions();
    match outcome {
        Ok(()) => {
            status.manage().mark_true(ingress_conditions::NETWORK_CONFIGURED);
            let lb = |dns: &str| vec![LoadBalancerIngressStatus { domain_internal: dns.to_string(), ..Default::default() }];
            status.mark_load_balancer_ready(lb(balancers.public), lb(balancers.private));
        }
        Err(why) => status.manage().mark_false(ingress_conditions::NETWORK_CONFIGURED, why.reason, &why.message),
    }
    status.observed_generation = ingress.metadata.generation.unwrap_or(0);
    status
}

#[cfg(test)]
mod tests {
    use lampyr_api::conditions::{CONDITION_READY, ConditionStatus};
    use serde_json::json;

    use super::*;

    /// A KIngress as the upstream Route reconciler writes it for a Service
    /// `hello` with two Revisions at 50/50 and a tag `blue`.
    fn upstream_like() -> Ingress {
        let split = |rev: &str, percent: i64| {
            json!({
                "serviceNamespace": "ns", "serviceName": rev, "servicePort": 80, "percent": percent,
                "appendHeaders": { "Knative-Serving-Revision": rev, "Knative-Serving-Namespace": "ns" },
            })
        };
        serde_json::from_value(json!({
            "apiVersion": "networking.internal.knative.dev/v1alpha1",
            "kind": "Ingress",
            "metadata": {
                "name": "hello", "namespace": "ns", "generation": 3,
                "annotations": { "networking.knative.dev/ingress.class": "fiber.ingress.networking.knative.dev" },
            },
            "spec": {
                "httpOption": "Redirected",
                "rules": [
                    { "hosts": ["hello.ns", "hello.ns.svc", "hello.ns.svc.cluster.local"], "visibility": "ClusterLocal",
                      "http": { "paths": [{ "splits": [split("hello-00001", 50), split("hello-00002", 50)] }] } },
                    { "hosts": ["hello.ns.example.com"], "visibility": "ExternalIP",
                      "http": { "paths": [{ "splits": [split("hello-00001", 50), split("hello-00002", 50)] }] } },
                    { "hosts": ["blue-hello.ns.example.com"],
                      "http": { "paths": [{ "path": "/v1", "appendHeaders": { "Knative-Serving-Tag": "blue" },
                                            "splits": [split("hello-00002", 100)] },
                                          { "path": "/empty", "splits": [] }] } },
                ],
            },
        }))
        .expect("a KIngress")
    }

    #[test]
    fn the_hash_is_knatives() {
        // ingress.ComputeHash of the same object, run from the pinned knative.dev/networking.
        let ingress: Ingress = serde_json::from_str(INGRESS).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(hash(&ingress), "e8c00b4604413ca0955c775c30c0629be1e75527889c995d5ac6644d2d367c67");
        assert_eq!(probe_host(&ingress), Some("hello.default"));
    }

    const INGRESS: &str = r#"{"apiVersion":"networking.internal.knative.dev/v1alpha1","kind":"Ingress","metadata":{"name":"hello","namespace":"default"}, "spec":{"httpOption":"Enabled","rules":[{"hosts":["hello.default","hello.default.svc.cluster.local"],"visibility":"ClusterLocal", "http":{"paths":[{"splits":[{"serviceNamespace":"default","serviceName":"hello-00001","servicePort":80,"percent":100, "appendHeaders":{"Knative-Serving-Namespace":"default","Knative-Serving-Revision":"hello-00001"}}]}]}}, {"hosts":["hello.default.example.com"],"visibility":"ExternalIP","http":{"paths":[{"path":"/foo","headers":{"Knative-Serving-Tag":{"exact":"x"}},"rewriteHost":"a.b","splits":[{"serviceNamespace":"default","serviceName":"hello-00001","servicePort":80,"percent":100}]}]}}]}}"#;

    #[test]
    fn upstream_rules_become_host_routes() {
        let ingress = upstream_like();
        assert_eq!(ingress_class(&ingress), Some(lampyr_api::keys::FIBER_INGRESS_CLASS));
        let routes = routes(&ingress).expect("routable");
        let hosts: Vec<&str> = routes.iter().map(|(h, _)| h.as_str()).collect();
        assert_eq!(hosts, ["hello.ns", "hello.ns.svc", "hello.ns.svc.cluster.local", "hello.ns.example.com", "blue-hello.ns.example.com"]);
        let local = &routes[0].1;
        assert_eq!((local.visibility, local.redirect_to_https), (IngressVisibility::ClusterLocal, false));
        assert_eq!(local.ingress, "ns/hello");
        let path = &local.paths[0];
        assert_eq!(path.prefix, "/");
        assert_eq!(
            path.splits.iter().map(|s| (s.service.as_str(), s.percent)).collect::<Vec<_>>(),
            [("hello-00001", 50), ("hello-00002", 50)]
        );
        let appended: Vec<(&str, &[u8])> = path.splits[1].append_headers.iter().map(|(n, v)| (n.as_str(), v.as_bytes())).collect();
        assert_eq!(appended, [("knative-serving-namespace", b"ns".as_slice()), ("knative-serving-revision", b"hello-00002".as_slice())]);
        let public = &routes[3].1;
        assert!(public.redirect_to_https, "httpOption Redirected applies to ExternalIP rules");
        let tag = &routes[4].1;
        assert_eq!(tag.visibility, IngressVisibility::ExternalIp, "visibility defaults to ExternalIP");
        assert_eq!(tag.paths.len(), 1, "a path without splits is left out");
        assert_eq!((tag.paths[0].prefix.as_str(), tag.paths[0].append_headers.len()), ("/v1", 1));
    }

    #[test]
    fn a_host_in_a_local_and_a_public_rule_is_public_with_the_first_rules_paths() {
        let mut ingress = upstream_like();
        ingress.spec.rules[1].hosts.push("hello.ns.svc.cluster.local".into());
        ingress.spec.rules[1].http.as_mut().expect("http").paths[0].path = "/public".into();
        let routes = routes(&ingress).expect("routable");
        let found: Vec<_> = routes.iter().filter(|(h, _)| h == "hello.ns.svc.cluster.local").collect();
        assert_eq!(found.len(), 1, "each host once");
        assert_eq!(found[0].1.visibility, IngressVisibility::ExternalIp);
        assert_eq!(found[0].1.paths[0].prefix, "/", "the first rule's paths");
        let local = routes.iter().find(|(h, _)| h == "hello.ns").expect("hello.ns");
        assert_eq!(local.1.visibility, IngressVisibility::ClusterLocal, "the other hosts of the local rule stay local");
    }

    #[test]
    fn an_invalid_spec_routes_nothing_and_says_where() {
        let mut ingress = upstream_like();
        let paths = &mut ingress.spec.rules[1].http.as_mut().expect("http").paths;
        paths[0].append_headers.insert("bad header".into(), "x".into());
        let err = routes(&ingress).expect_err("invalid");
        assert_eq!(err.reason, REASON_INVALID_SPEC);
        assert!(err.message.contains("spec.rules[1].http.paths[0].appendHeaders"), "{}", err.message);
    }

    #[test]
    fn status_is_ready_with_both_load_balancers_and_stable_when_rewritten() {
        let mut ingress = upstream_like();
        let balancers =
            LoadBalancers { private: "fiber-router.lampyr.svc.cluster.local", public: "fiber-router-public.lampyr.svc.cluster.local" };
        let status = desired_status(&ingress, Ok(()), balancers);
        assert!(status.is_ready(Some(3)), "{status:#?}");
        assert_eq!(status.observed_generation, 3);
        for (lb, dns) in [(&status.public_load_balancer, balancers.public), (&status.private_load_balancer, balancers.private)] {
            let lb = lb.as_ref().expect("load balancer");
            assert_eq!(lb.ingress[0].domain_internal, dns);
        }
        ingress.status = Some(status.clone());
        assert_eq!(desired_status(&ingress, Ok(()), balancers), status, "nothing to write again");

        let why = NotConfigured { reason: REASON_HOST_CONFLICT, message: "taken".into() };
        let failed = desired_status(&ingress, Err(&why), balancers);
        let ready = failed.get_condition(CONDITION_READY).expect("Ready");
        assert_eq!((ready.status, ready.reason.as_str()), (ConditionStatus::False, REASON_HOST_CONFLICT));
    }
}
