//! `serving.knative.dev/v1beta1` DomainMapping: a custom domain served by an
//! addressable object (usually a Knative Service), wire-compatible with upstream.

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::conditions::{KnativeStatus, domain_mapping};
use crate::duck::{Addressable, KReference};
use crate::networking::IngressStatus;
use crate::object::kube_object;
use crate::status::propagate_or_not_configured;

/// A DomainMapping: its name is the domain, its `spec.ref` the target.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct DomainMapping {
    /// Standard object metadata; the name is the mapped domain.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The desired state.
    #[serde(default)]
    pub spec: DomainMappingSpec,
    /// What the DomainMapping reconciler observed.
    #[serde(default)]
    pub status: Option<DomainMappingStatus>,
}

/// `DomainMapping.spec`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DomainMappingSpec {
    /// The addressable object the domain maps to, in the mapping's namespace.
    #[serde(rename = "ref", default)]
    pub ref_: KReference,
    /// A TLS secret the user provides for the domain (no certificate is requested then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<SecretTls>,
}

/// `DomainMapping.spec.tls`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretTls {
    /// The TLS secret, in the mapping's namespace.
    #[serde(default)]
    pub secret_name: String,
}

crate::knative_status! {
    /// `DomainMapping.status`.
    pub struct DomainMappingStatus {
        conditions: domain_mapping::CONDITION_SET, "`Ready`, `DomainClaimed`, `ReferenceResolved`, `IngressReady`, `CertificateProvisioned`, sorted by type.";
        /// The URL the domain is served at.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub url: Option<String>,
        /// Where the mapping can be reached.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub address: Option<Addressable>,
    }
}

impl DomainMappingStatus {
    /// `IngressReady` follows the KIngress's `Ready`; a KIngress without one
    /// makes it Unknown `IngressNotConfigured`.
    pub fn propagate_ingress_status(&mut self, ingress: &IngressStatus) {
        propagate_or_not_configured(&mut self.manage(), domain_mapping::INGRESS_READY, ingress);
    }
}

kube_object!(DomainMapping, group "serving.knative.dev", version "v1beta1",
    plural "domainmappings", scope NamespaceResourceScope,
    spec DomainMappingSpec, status DomainMappingStatus);
