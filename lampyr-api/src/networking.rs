//! `networking.internal.knative.dev/v1alpha1`: the objects Knative Serving
//! hands to its networking layer, wire-compatible with upstream
//! `knative.dev/networking`.
//!
//! - [`Ingress`] (the "KIngress"): hosts, paths and weighted splits to
//!   backend Services, implemented by the ingress class the
//!   `networking.knative.dev/ingress.class` annotation names.
//! - [`Certificate`]: a TLS certificate for DNS names, implemented by the
//!   certificate class (`networking.knative.dev/certificate.class`).
//! - [`ClusterDomainClaim`]: cluster-wide ownership of a domain by a
//!   namespace, for DomainMappings.
//!
//! Go `omitempty` strings, lists and maps are left out when empty; fields
//! without `omitempty` (`paths`, `splits`, `dnsNames`, `secretName`, …) are
//! always written.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::{ClusterResourceScope, NamespaceResourceScope};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::conditions::{KnativeStatus, certificate, ingress};
use crate::duck::is_zero;
use crate::object::kube_object;

/// A KIngress: how requests for a Route's (or DomainMapping's) hosts reach
/// Revisions.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct Ingress {
    /// Standard object metadata; named like the Route.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The desired routing.
    #[serde(default)]
    pub spec: IngressSpec,
    /// What the ingress implementation observed.
    #[serde(default)]
    pub status: Option<IngressStatus>,
}

/// `Ingress.spec`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IngressSpec {
    /// TLS settings per set of hosts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tls: Vec<IngressTls>,
    /// Routing rules, one per visibility and set of hosts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<IngressRule>,
    /// Whether plain HTTP is served or redirected to HTTPS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_option: Option<HttpOption>,
}

/// `spec.httpOption`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum HttpOption {
    /// Plain HTTP is served.
    Enabled,
    /// Plain HTTP requests are redirected to HTTPS.
    Redirected,
}

/// `spec.rules[].visibility`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum IngressVisibility {
    /// Reachable from outside the cluster.
    #[serde(rename = "ExternalIP")]
    ExternalIp,
    /// Reachable from inside the cluster only.
    ClusterLocal,
}

/// `spec.tls[]`: the certificate secret for some hosts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IngressTls {
    /// Hosts the certificate covers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
    /// The secret holding the certificate and key.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub secret_name: String,
    /// The namespace of that secret.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub secret_namespace: String,
}

/// `spec.rules[]`: hosts of one visibility and how their requests are routed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IngressRule {
    /// Hosts this rule matches.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
    /// Where the hosts are reachable from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub visibility: Option<IngressVisibility>,
    /// HTTP routing for the hosts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpIngressRuleValue>,
}

/// `spec.rules[].http`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HttpIngressRuleValue {
    /// Paths, each with its backends.
    #[serde(default)]
    pub paths: Vec<HttpIngressPath>,
}

/// `spec.rules[].http.paths[]`: requests matching a path and headers, and the
/// weighted backends they go to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HttpIngressPath {
    /// Path prefix to match (all paths when empty).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub path: String,
    /// Host header to send upstream instead of the request's.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub rewrite_host: String,
    /// Request headers that must match, by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, HeaderMatch>,
    /// Weighted backends.
    #[serde(default)]
    pub splits: Vec<IngressBackendSplit>,
    /// Headers added to every request on this path.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub append_headers: BTreeMap<String, String>,
}

/// `splits[]`: a backend Service and its share of the path's requests.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IngressBackendSplit {
    /// Namespace of the backend Service.
    #[serde(default)]
    pub service_namespace: String,
    /// Name of the backend Service (for a Revision: the Revision's name).
    #[serde(default)]
    pub service_name: String,
    /// Port of the backend Service, by number or name.
    #[serde(default)]
    pub service_port: IntOrString,
    /// Share of requests, 0–100 (left out when 0).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub percent: i64,
    /// Headers added to requests sent to this backend
    /// (`Knative-Serving-Revision`, `Knative-Serving-Namespace`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub append_headers: BTreeMap<String, String>,
}

/// `paths[].headers[name]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HeaderMatch {
    /// The exact value the header must have.
    #[serde(default)]
    pub exact: String,
}

crate::knative_status! {
    /// `Ingress.status`.
    pub struct IngressStatus {
        conditions: ingress::CONDITION_SET, "`Ready`, `NetworkConfigured`, `LoadBalancerReady`, sorted by type.";
        /// Where `ExternalIP` rules are served.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub public_load_balancer: Option<LoadBalancerStatus>,
        /// Where `ClusterLocal` rules are served.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub private_load_balancer: Option<LoadBalancerStatus>,
    }
}

impl IngressStatus {
    /// Records both load balancers and marks `LoadBalancerReady` True.
    pub fn mark_load_balancer_ready(&mut self, public: Vec<LoadBalancerIngressStatus>, private: Vec<LoadBalancerIngressStatus>) {
        self.public_load_balancer = Some(LoadBalancerStatus { ingress: public });
        self.private_load_balancer = Some(LoadBalancerStatus { ingress: private });
        self.manage().mark_true(ingress::LOAD_BALANCER_READY);
    }
}

/// A load balancer's entry points.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LoadBalancerStatus {
    /// The entry points.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ingress: Vec<LoadBalancerIngressStatus>,
}

/// One entry point of a load balancer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LoadBalancerIngressStatus {
    /// IP address.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub ip: String,
    /// DNS name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub domain: String,
    /// DNS name inside the cluster (`svc.ns.svc.cluster.local`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub domain_internal: String,
    /// Reachable only through the service mesh.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub mesh_only: bool,
}

/// A Knative Certificate: a TLS certificate for some DNS names, stored in a secret.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct Certificate {
    /// Standard object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The desired certificate.
    #[serde(default)]
    pub spec: CertificateSpec,
    /// What the certificate implementation observed.
    #[serde(default)]
    pub status: Option<CertificateStatus>,
}

/// `Certificate.spec`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CertificateSpec {
    /// DNS names the certificate covers.
    #[serde(default)]
    pub dns_names: Vec<String>,
    /// The domain of those names (for wildcard certificates).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub domain: String,
    /// The secret the certificate and key are written to.
    #[serde(default)]
    pub secret_name: String,
}

crate::knative_status! {
    /// `Certificate.status`.
    pub struct CertificateStatus {
        conditions: certificate::CONDITION_SET, "`Ready` only.";
        /// When the certificate expires.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub not_after: Option<Time>,
        /// HTTP-01 challenges the ingress must answer while the certificate is issued.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub http01_challenges: Vec<Http01Challenge>,
    }
}

/// `status.http01Challenges[]`: where a challenge URL must be routed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Http01Challenge {
    /// The challenge URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The Service answering the challenge.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub service_name: String,
    /// Its namespace.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub service_namespace: String,
    /// Its port (always written: Go's `omitempty` keeps a struct).
    #[serde(default)]
    pub service_port: IntOrString,
}

/// A ClusterDomainClaim: the namespace allowed to map a domain (cluster-scoped,
/// named by the domain).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct ClusterDomainClaim {
    /// Standard object metadata; the name is the claimed domain.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Who holds the claim.
    #[serde(default)]
    pub spec: ClusterDomainClaimSpec,
}

/// `ClusterDomainClaim.spec`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterDomainClaimSpec {
    /// The namespace whose DomainMappings may use the domain.
    #[serde(default)]
    pub namespace: String,
}

kube_object!(Ingress, group "networking.internal.knative.dev", version "v1alpha1",
    plural "ingresses", scope NamespaceResourceScope, spec IngressSpec, status IngressStatus);
kube_object!(Certificate, group "networking.internal.knative.dev", version "v1alpha1",
    plural "certificates", scope NamespaceResourceScope,
    spec CertificateSpec, status CertificateStatus);
kube_object!(ClusterDomainClaim, group "networking.internal.knative.dev", version "v1alpha1",
    plural "clusterdomainclaims", scope ClusterResourceScope, spec ClusterDomainClaimSpec);
