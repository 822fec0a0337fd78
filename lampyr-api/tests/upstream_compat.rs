//! Compatibility with upstream Knative, checked against the pinned upstream
//! modules at test time (see `upstream/mod.rs`):
//!
//! - every example object upstream ships as YAML or JSON round-trips through
//!   its Lampyr type without losing or changing a field;
//! - hand-built objects with every status field (and every spec field outside
//!   the pod spec) set round-trip too;
//! - everything Lampyr serializes is accepted by upstream's CRD schemas, and
//!   the field names of Lampyr's types are upstream's, no more and no fewer;
//! - what upstream's Go types write (a generator built against the pinned
//!   modules at test time) reads back unchanged: zero values of every spec and
//!   status type, and fuzzed objects of every kind with every field set;
//! - every Knative label or annotation key in `keys.rs` is one upstream defines.

mod upstream;

use std::collections::BTreeMap;

use kube::Resource;
use lampyr_api::domain_mapping::SecretTls;
use lampyr_api::networking::{
    Certificate, CertificateSpec, CertificateStatus, ClusterDomainClaim, ClusterDomainClaimSpec, HeaderMatch, Http01Challenge,
    HttpIngressPath, HttpIngressRuleValue, Ingress, IngressBackendSplit, IngressRule, IngressSpec, IngressStatus, IngressTls,
    LoadBalancerIngressStatus, LoadBalancerStatus,
};
use lampyr_api::{
    Addressable, Configuration, ConfigurationStatus, ContainerStatus, DomainMapping, DomainMappingSpec, DomainMappingStatus, KReference,
    Revision, RevisionStatus, Route, RouteSpec, RouteStatus, Service, ServiceStatus, TrafficTarget,
};
use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// How a subtree of a type's fields compares with upstream's CRD schema.
#[derive(Clone, Copy)]
enum Fields {
    /// Exactly upstream's field names.
    Same,
    /// A subset of upstream's (the pod spec: fields not modelled are kept in `other`).
    Subset,
}

/// One Knative kind Lampyr models.
struct Kind {
    api_version: &'static str,
    kind: &'static str,
    plural: String,
    namespaced: bool,
    round_trip: fn(&str, &Value) -> Value,
    schema: fn() -> Value,
    fields: &'static [(&'static str, Fields)],
}

fn kind<K>(fields: &'static [(&'static str, Fields)]) -> Kind
where
    K: Resource<DynamicType = ()> + Serialize + DeserializeOwned + JsonSchema,
{
    Kind {
        api_version: leak(K::api_version(&())),
        kind: leak(K::kind(&())),
        plural: K::plural(&()).into_owned(),
        namespaced: std::any::type_name::<K::Scope>().ends_with("NamespaceResourceScope"),
        round_trip: round_trip::<K>,
        schema: || {
            SchemaSettings::draft2020_12().with(|s| s.inline_subschemas = true).into_generator().into_root_schema_for::<K>().to_value()
        },
        fields,
    }
}

fn leak(s: std::borrow::Cow<'_, str>) -> &'static str {
    Box::leak(s.into_owned().into_boxed_str())
}

fn kinds() -> Vec<Kind> {
    use Fields::{Same, Subset};
    vec![
        kind::<Service>(&[("status", Same), ("spec.traffic", Same), ("spec.template.spec", Subset)]),
        kind::<Configuration>(&[("status", Same), ("spec.template.spec", Subset)]),
        kind::<Revision>(&[("status", Same), ("spec", Subset)]),
        kind::<Route>(&[("status", Same), ("spec", Same)]),
        kind::<DomainMapping>(&[("status", Same), ("spec", Same)]),
        kind::<Ingress>(&[("status", Same), ("spec", Same)]),
        kind::<Certificate>(&[("status", Same), ("spec", Same)]),
        kind::<ClusterDomainClaim>(&[("spec", Same)]),
    ]
}

fn kind_for(kinds: &[Kind], api_version: &str, kind: &str) -> Option<usize> {
    kinds.iter().position(|k| k.api_version == api_version && k.kind == kind)
}

/// Reads `value` as `K`, writes it back, and fails naming every field that
/// was lost, added or changed.
fn round_trip<K: Serialize + DeserializeOwned>(source: &str, value: &Value) -> Value {
    let typed: K =
        serde_path_to_error::deserialize(value.clone()).unwrap_or_else(|e| panic!("{source}: not a {}: {e}", std::any::type_name::<K>()));
    let back = serde_json::to_value(&typed).expect("serializes");
    let diff = upstream::diff(value, &back);
    assert!(diff.is_empty(), "{source} does not round-trip through {}:\n{diff}", std::any::type_name::<K>());
    back
}

struct Upstream {
    kinds: Vec<Kind>,
    crds: upstream::Crds,
    serving: std::path::PathBuf,
    networking: std::path::PathBuf,
}

fn upstream() -> Upstream {
    let serving = upstream::module_dir(upstream::SERVING);
    let networking = upstream::module_dir(upstream::NETWORKING);
    Upstream { kinds: kinds(), crds: upstream::Crds::load(&serving, &networking), serving, networking }
}

impl Upstream {
    /// Round-trips `value` through its kind's type and checks the result
    /// against upstream's CRD schema.
    fn check(&self, source: &str, value: &Value) -> Value {
        let (api_version, kind) = (value["apiVersion"].as_str().unwrap_or_default(), value["kind"].as_str().unwrap_or_default());
        let i = kind_for(&self.kinds, api_version, kind).unwrap_or_else(|| panic!("{source}: no Lampyr type for {api_version} {kind}"));
        let back = (self.kinds[i].round_trip)(source, value);
        let crd = self.crds.get(api_version, kind);
        let violations = upstream::schema_violations(&crd.schema, &back);
        assert!(
            violations.is_empty(),
            "{source}: upstream's CRD schema does not accept what Lampyr writes:\n  {}",
            violations.join("\n  ")
        );
        back
    }
}

#[test]
fn upstream_examples_round_trip() {
    let up = upstream();
    let mut examples = upstream::examples(upstream::SERVING, &up.serving);
    examples.extend(upstream::examples(upstream::NETWORKING, &up.networking));

    let mut counts = BTreeMap::<String, usize>::new();
    for ex in &examples {
        let (api_version, kind) = ex.type_meta();
        if kind_for(&up.kinds, api_version, kind).is_none() {
            // A kind Lampyr does not model (none at the pinned versions).
            eprintln!("{}: {api_version} {kind} not modelled, not checked", ex.source);
            continue;
        }
        up.check(&ex.source, &ex.value);
        *counts.entry(format!("{api_version} {kind}")).or_default() += 1;
    }
    // The pinned modules ship exactly these; a different count means the pins
    // changed or the scan broke, and the list below should be re-read.
    let expected = BTreeMap::from([
        ("networking.internal.knative.dev/v1alpha1 Certificate".to_owned(), 1),
        ("serving.knative.dev/v1 Configuration".to_owned(), 1),
        ("serving.knative.dev/v1 Route".to_owned(), 1),
        ("serving.knative.dev/v1 Service".to_owned(), 34),
    ]);
    assert_eq!(counts, expected, "upstream example objects checked, by kind");
}

/// A condition with every field set.
fn condition(type_: &str, status: &str, reason: &str) -> Value {
    json!({
        "type": type_,
        "status": status,
        "lastTransitionTime": "2024-07-16T08:22:20Z",
        "reason": reason,
        "message": format!("{type_} is {status}: {reason}"),
    })
}

/// `Ready` True and each dependent True, plus an informational condition.
fn ready(dependents: &[&str]) -> Value {
    let mut c: Vec<Value> = dependents.iter().map(|d| condition(d, "True", "Fine")).collect();
    let mut info = condition("Informational", "False", "NoTraffic");
    info["severity"] = json!("Info");
    c.push(info);
    c.push(json!({"type": "Ready", "status": "True", "lastTransitionTime": "2024-07-16T08:22:20Z"}));
    c.sort_by_key(|c| c["type"].as_str().unwrap_or_default().to_owned());
    Value::Array(c)
}

fn address() -> Value {
    json!({
        "name": "https",
        "url": "https://hello.default.svc.cluster.local",
        "CACerts": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
        "audience": "hello"
    })
}

fn traffic() -> Value {
    json!([
        {"tag": "current", "revisionName": "hello-00002", "configurationName": "hello",
         "latestRevision": false, "percent": 90, "url": "http://current-hello.default.example.com"},
        {"tag": "latest", "revisionName": "hello-00003", "latestRevision": true, "percent": 10,
         "url": "http://latest-hello.default.example.com"}
    ])
}

fn metadata(name: &str) -> Value {
    json!({"name": name, "namespace": "default", "generation": 3, "uid": "9d5f1c3e-0000-4000-8000-000000000001"})
}

fn template() -> Value {
    json!({
        "metadata": {"name": "hello-00003", "annotations": {"autoscaling.knative.dev/min-scale": "1"}},
        "spec": {
            "containerConcurrency": 10, "timeoutSeconds": 300,
            "responseStartTimeoutSeconds": 60, "idleTimeoutSeconds": 120,
            "containers": [{"image": "registry.local/hello@sha256:00", "ports": [{"name": "h2c", "containerPort": 8080}]}]
        }
    })
}

/// One object of every kind with every status field, and every spec field
/// outside the pod spec, set.
fn hand_built() -> Vec<Value> {
    let annotations = json!({"lampyr.dev/note": "set"});
    vec![
        json!({
            "apiVersion": "serving.knative.dev/v1", "kind": "Service", "metadata": metadata("hello"),
            "spec": {"template": template(), "traffic": traffic()},
            "status": {
                "observedGeneration": 3, "conditions": ready(&["ConfigurationsReady", "RoutesReady"]),
                "annotations": annotations,
                "latestReadyRevisionName": "hello-00003", "latestCreatedRevisionName": "hello-00003",
                "url": "http://hello.default.example.com", "address": address(), "traffic": traffic()
            }
        }),
        json!({
            "apiVersion": "serving.knative.dev/v1", "kind": "Configuration", "metadata": metadata("hello"),
            "spec": {"template": template()},
            "status": {
                "observedGeneration": 3, "conditions": ready(&[]), "annotations": annotations,
                "latestReadyRevisionName": "hello-00002", "latestCreatedRevisionName": "hello-00003"
            }
        }),
        json!({
            "apiVersion": "serving.knative.dev/v1", "kind": "Revision", "metadata": metadata("hello-00003"),
            "spec": template()["spec"],
            "status": {
                "observedGeneration": 1,
                "conditions": ready(&["ContainerHealthy", "ResourcesAvailable"]),
                "annotations": annotations,
                "logUrl": "http://logs.example/hello-00003",
                "containerStatuses": [{"name": "user-container", "imageDigest": "registry.local/hello@sha256:00"}],
                "initContainerStatuses": [{"name": "init", "imageDigest": "registry.local/init@sha256:01"}],
                "actualReplicas": 2, "desiredReplicas": 3
            }
        }),
        json!({
            "apiVersion": "serving.knative.dev/v1", "kind": "Route", "metadata": metadata("hello"),
            "spec": {"traffic": traffic()},
            "status": {
                "observedGeneration": 3,
                "conditions": ready(&["AllTrafficAssigned", "CertificateProvisioned", "IngressReady"]),
                "annotations": annotations,
                "url": "http://hello.default.example.com", "address": address(), "traffic": traffic()
            }
        }),
        json!({
            "apiVersion": "serving.knative.dev/v1beta1", "kind": "DomainMapping",
            "metadata": metadata("hello.example.org"),
            "spec": {
                "ref": {"kind": "Service", "namespace": "default", "name": "hello",
                        "apiVersion": "serving.knative.dev/v1", "group": "serving.knative.dev",
                        "address": "https"},
                "tls": {"secretName": "hello-example-org-tls"}
            },
            "status": {
                "observedGeneration": 3,
                "conditions": ready(&["CertificateProvisioned", "DomainClaimed", "IngressReady", "ReferenceResolved"]),
                "annotations": annotations,
                "url": "https://hello.example.org", "address": address()
            }
        }),
        json!({
            "apiVersion": "networking.internal.knative.dev/v1alpha1", "kind": "Ingress",
            "metadata": metadata("hello"),
            "spec": {
                "tls": [{"hosts": ["hello.default.example.com"], "secretName": "route-tls", "secretNamespace": "default"}],
                "rules": [{
                    "hosts": ["hello.default", "hello.default.svc", "hello.default.svc.cluster.local"],
                    "visibility": "ClusterLocal",
                    "http": {"paths": [{
                        "path": "/", "rewriteHost": "hello.default.svc.cluster.local",
                        "headers": {"Knative-Serving-Tag": {"exact": "current"}},
                        "splits": [{
                            "serviceNamespace": "default", "serviceName": "hello-00002", "servicePort": 80,
                            "percent": 90,
                            "appendHeaders": {"Knative-Serving-Revision": "hello-00002", "Knative-Serving-Namespace": "default"}
                        }, {
                            "serviceNamespace": "default", "serviceName": "hello-00003", "servicePort": "http2",
                            "percent": 10
                        }],
                        "appendHeaders": {"K-Route": "hello"}
                    }]}
                }],
                "httpOption": "Redirected"
            },
            "status": {
                "observedGeneration": 3,
                "conditions": ready(&["LoadBalancerReady", "NetworkConfigured"]),
                "annotations": annotations,
                "publicLoadBalancer": {"ingress": [{"ip": "10.0.0.9", "domain": "lb.example.com",
                    "domainInternal": "kourier.kourier-system.svc.cluster.local", "meshOnly": true}]},
                "privateLoadBalancer": {"ingress": [{"ip": "10.0.0.10", "domain": "lb-internal.example.com",
                    "domainInternal": "kourier-internal.kourier-system.svc.cluster.local", "meshOnly": true}]}
            }
        }),
        json!({
            "apiVersion": "networking.internal.knative.dev/v1alpha1", "kind": "Certificate",
            "metadata": metadata("route-tls"),
            "spec": {"dnsNames": ["hello.default.example.com"], "domain": "example.com", "secretName": "route-tls"},
            "status": {
                "observedGeneration": 3, "conditions": ready(&[]), "annotations": annotations,
                "notAfter": "2025-07-16T08:22:20Z",
                "http01Challenges": [{"url": "http://hello.default.example.com/.well-known/acme-challenge/abc",
                    "serviceName": "cm-acme-http-solver", "serviceNamespace": "default", "servicePort": 8089}]
            }
        }),
        json!({
            "apiVersion": "networking.internal.knative.dev/v1alpha1", "kind": "ClusterDomainClaim",
            "metadata": {"name": "hello.example.org"}, "spec": {"namespace": "default"}
        }),
    ]
}

/// Whether `value` has something at `path` (`field_paths` notation).
fn has_path(value: &Value, path: &str) -> bool {
    let Some(rest) = path.strip_prefix('.') else {
        return match path.chars().next() {
            None => true,
            Some('[') => value.as_array().into_iter().flatten().any(|v| has_path(v, &path[2..])),
            Some('{') => value.as_object().into_iter().flat_map(|m| m.values()).any(|v| has_path(v, &path[2..])),
            Some(_) => false,
        };
    };
    let end = rest.find(['.', '[', '{']).unwrap_or(rest.len());
    value.get(&rest[..end]).is_some_and(|v| has_path(v, &rest[end..]))
}

fn subtree<'a>(value: &'a Value, root: &str) -> &'a Value {
    root.split('.').fold(value, |v, k| &v[k])
}

#[test]
fn hand_built_objects_with_every_field_round_trip_and_match_upstream_schemas() {
    let up = upstream();
    let objects = hand_built();
    assert_eq!(objects.len(), up.kinds.len(), "one hand-built object per kind");
    for (object, kind) in objects.iter().zip(&up.kinds) {
        let source = format!("hand-built {}", kind.kind);
        assert_eq!(object["kind"], kind.kind, "{source}");
        let back = up.check(&source, object);
        // Every field the type declares in its fully modelled subtrees is set.
        let schema = (kind.schema)();
        for (root, how) in kind.fields {
            if matches!(how, Fields::Subset) {
                continue;
            }
            let missing: Vec<String> =
                upstream::field_paths(&schema, root).into_iter().filter(|p| !has_path(subtree(&back, root), p)).collect();
            assert!(missing.is_empty(), "{source}: {root} leaves {missing:?} unset");
        }
    }
}

/// Pod-spec fields Kubernetes has and Lampyr's types (through k8s-openapi, or
/// to report them) model, that Knative's CRD schema leaves out: Knative's
/// webhook refuses them, or they are newer than Knative 1.15's Kubernetes.
const KUBERNETES_FIELDS_KNATIVE_PRUNES: &[&str] = &[
    ".ports[].hostIP",
    ".ports[].hostPort",
    ".securityContext.privileged",
    "Probe.terminationGracePeriodSeconds",
    ".env[].valueFrom.fileKeyRef",
    ".env[].valueFrom.fileKeyRef.key",
    ".env[].valueFrom.fileKeyRef.optional",
    ".env[].valueFrom.fileKeyRef.path",
    ".env[].valueFrom.fileKeyRef.volumeName",
    ".resources.claims[].request",
];

#[test]
fn field_names_plural_and_scope_are_upstreams() {
    let up = upstream();
    for kind in &up.kinds {
        let crd = up.crds.get(kind.api_version, kind.kind);
        assert_eq!(kind.plural, crd.plural, "{} plural", kind.kind);
        assert_eq!(kind.namespaced, crd.scope == "Namespaced", "{} scope is {}", kind.kind, crd.scope);
        let ours = (kind.schema)();
        for (root, how) in kind.fields {
            let theirs = upstream::field_paths(&crd.schema, root);
            let mine = upstream::field_paths(&ours, root);
            assert!(!mine.is_empty() && !theirs.is_empty(), "{} {root}: no fields found", kind.kind);
            let extra: Vec<_> = mine
                .iter()
                .filter(|p| !upstream::declares(&theirs, p))
                .filter(|p| !KUBERNETES_FIELDS_KNATIVE_PRUNES.iter().any(|k| p.ends_with(k)))
                .collect();
            assert!(extra.is_empty(), "{} {root}: fields upstream does not have: {extra:?}", kind.kind);
            if matches!(how, Fields::Same) {
                let missing: Vec<_> = theirs.iter().filter(|p| !mine.contains(p)).collect();
                assert!(missing.is_empty(), "{} {root}: upstream fields Lampyr lacks: {missing:?}", kind.kind);
            }
        }
    }
}

/// Lampyr's zero value of each type, by the upstream Go type's name.
macro_rules! zeros {
    ($($go:literal => $ty:ty),* $(,)?) => {
        BTreeMap::from([$(
            ($go, serde_json::to_value(<$ty>::default()).expect("serializes")),
        )*])
    };
}

/// What upstream's Go types write (built and run at test time, see
/// `upstream/wiregen`): zero values match Lampyr's, and fuzzed objects of
/// every kind, every field set, round-trip and fit upstream's CRD schemas.
#[test]
fn what_upstreams_go_types_write_round_trips() {
    let up = upstream();
    let zeros = zeros! {
        "ServiceStatus" => ServiceStatus,
        "ConfigurationStatus" => ConfigurationStatus,
        "RevisionStatus" => RevisionStatus,
        "RouteStatus" => RouteStatus,
        "RouteSpec" => RouteSpec,
        "TrafficTarget" => TrafficTarget,
        "ContainerStatus" => ContainerStatus,
        "DomainMappingSpec" => DomainMappingSpec,
        "DomainMappingStatus" => DomainMappingStatus,
        "SecretTLS" => SecretTls,
        "Addressable" => Addressable,
        "KReference" => KReference,
        "IngressSpec" => IngressSpec,
        "IngressTLS" => IngressTls,
        "IngressRule" => IngressRule,
        "HTTPIngressRuleValue" => HttpIngressRuleValue,
        "HTTPIngressPath" => HttpIngressPath,
        "IngressBackendSplit" => IngressBackendSplit,
        "HeaderMatch" => HeaderMatch,
        "IngressStatus" => IngressStatus,
        "LoadBalancerStatus" => LoadBalancerStatus,
        "LoadBalancerIngressStatus" => LoadBalancerIngressStatus,
        "CertificateSpec" => CertificateSpec,
        "CertificateStatus" => CertificateStatus,
        "HTTP01Challenge" => Http01Challenge,
        "ClusterDomainClaimSpec" => ClusterDomainClaimSpec,
    };
    let mut zeros_seen = Vec::new();
    let mut fuzzed = BTreeMap::<String, usize>::new();
    for (ty, case, value) in upstream::go_written() {
        if case == "zero" {
            let ours = zeros.get(ty.as_str()).unwrap_or_else(|| panic!("no Lampyr type for Go's {ty}"));
            let (ours, go) = (upstream::without_empty(ours, true), upstream::without_empty(&value, true));
            assert_eq!(ours, go, "{ty}: Lampyr's zero value is written unlike Go's");
            zeros_seen.push(ty);
        } else {
            up.check(&format!("Go-written {ty} ({case})"), &upstream::without_empty(&value, false));
            *fuzzed.entry(ty).or_default() += 1;
        }
    }
    zeros_seen.sort();
    assert_eq!(zeros_seen, zeros.keys().copied().collect::<Vec<_>>(), "zero values checked");
    let kinds: BTreeMap<String, usize> = up.kinds.iter().map(|k| (k.kind.to_owned(), 20)).collect();
    assert_eq!(fuzzed, kinds, "fuzzed objects checked, by kind");
}

/// Go's `omitempty` drops an empty string even where Lampyr keeps the field
/// as an `Option` (spec fields, to tell unset from set).
#[test]
fn set_but_empty_strings_are_left_out_like_go() {
    let t = TrafficTarget { tag: Some(String::new()), revision_name: Some(String::new()), percent: Some(0), ..Default::default() };
    assert_eq!(serde_json::to_value(t).expect("serializes"), json!({"percent": 0}));
}

#[test]
fn knative_keys_are_upstreams() {
    let serving = upstream::module_dir(upstream::SERVING);
    let networking = upstream::module_dir(upstream::NETWORKING);
    let theirs = upstream::defined_keys(&[
        serving.join("pkg/apis/serving/register.go"),
        serving.join("pkg/apis/autoscaling/register.go"),
        networking.join("pkg/apis/networking/register.go"),
    ]);
    let literal = regex::Regex::new(r#""((?:serving|autoscaling|networking|networking\.internal)\.knative\.dev/[^"]+)""#).expect("regex");
    let api_version = regex::Regex::new(r"^[a-z.]+/v[0-9]+((alpha|beta)[0-9]+)?$").expect("regex");
    let ours: Vec<&str> = literal
        .captures_iter(include_str!("../src/keys.rs"))
        .filter_map(|c| c.get(1).map(|m| m.as_str()))
        .filter(|k| !api_version.is_match(k))
        .collect();
    assert!(ours.len() > 40, "keys.rs literals found: {ours:?}");
    let unknown: Vec<_> = ours.iter().filter(|k| !theirs.contains(**k)).collect();
    assert!(unknown.is_empty(), "keys.rs keys upstream does not define: {unknown:?}");
}
