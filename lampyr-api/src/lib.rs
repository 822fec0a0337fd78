//! Knative Serving and Knative networking types as Lampyr reads and writes them.
//!
//! One definition serves local mode (`ly` reading YAML files) and the cluster
//! (controllers reading and writing the API server). The Knative objects are
//! Kubernetes resources (`kube::Resource`, `JsonSchema`, `serde`),
//! wire-compatible with upstream Knative Serving v0.42 (Knative 1.15): reading
//! an upstream object and writing it back loses no field, and empty fields are
//! left out as Go's `omitempty` leaves them out.
//!
//! - [`serving`]: `serving.knative.dev/v1` `Service`, `Configuration`,
//!   `Revision`, `Route` and the Revision template. The template's pod spec and
//!   container keep every field they do not model in an `other` map, so the
//!   fiber translation can name each one.
//! - [`status`]: their statuses, with upstream's lifecycle helpers.
//! - [`domain_mapping`]: `serving.knative.dev/v1beta1` `DomainMapping`.
//! - [`networking`]: `networking.internal.knative.dev/v1alpha1` `Ingress`
//!   (KIngress), `Certificate` and `ClusterDomainClaim`.
//! - [`duck`]: the duck types they share (`Addressable`, `KReference`).
//! - [`conditions`]: Knative conditions and condition sets with upstream
//!   semantics (`Ready` from its dependents, severity, ordering,
//!   `lastTransitionTime`, `IsReady()`), and each resource's condition set
//!   and reasons.
//! - [`manifest`]: multi-document YAML parsing with errors that carry the
//!   source name, document number, line, column and field path.
//! - [`keys`]: API groups, label and annotation keys.
//! - [`names`]: Knative's child-name and Revision-name rules.
//! - [`quantity`] and [`duration`]: Kubernetes quantities and Go durations, the
//!   two value syntaxes the template's fields and annotations use.
//! - [`policy`]: the fiber policy translated from a Revision, which a `Home`
//!   carries to fiberd and fiber-router.
//! - [`autoscaler`]: Knative's cluster-wide autoscaler settings
//!   (`knative-serving/config-autoscaler`), parsed and validated as upstream does.
//! - [`fiber`]: Lampyr's own CRDs, `CapacityGrant`, `Home` and `GrantPolicy`
//!   (`fiber.lampyr.dev/v1alpha1`), and their generated CRD YAML.
//! - [`eventgrid`]: the `AzureEventGridSource` event source (`sources.lampyr.dev/v1alpha1`)
//!   and its generated CRD YAML.

pub mod autoscaler;
pub mod conditions;
pub mod domain_mapping;
pub mod duck;
pub mod duration;
pub mod eventgrid;
pub mod fiber;
pub mod keys;
pub mod manifest;
pub mod names;
pub mod networking;
mod object;
pub mod policy;
pub mod quantity;
pub mod serving;
pub mod status;
pub mod traffic;
pub mod translate;

pub use conditions::{Condition, ConditionSet, ConditionSeverity, ConditionStatus, KnativeStatus};
pub use domain_mapping::{DomainMapping, DomainMappingSpec, DomainMappingStatus};
pub use duck::{Addressable, KReference};
pub use fiber::{
    CapacityGrant, CapacityGrantSpec, CapacityGrantStatus, GrantPolicy, GrantPolicySpec, Home, HomeInstance, HomeSpec, HomeStatus,
};
pub use manifest::{Location, Manifest, ManifestError, ManifestErrorKind, ManifestObject, OtherObject, parse_manifests};
pub use names::{child_name, revision_name};
pub use serving::{
    Configuration, ConfigurationSpec, Container, HttpGetAction, PodSecurityContext, Probe, Revision, RevisionSpec, RevisionTemplateSpec,
    Route, RouteSpec, SecurityContext, Service, ServiceSpec, TcpSocketAction,
};
pub use status::{ConfigurationStatus, ContainerStatus, RevisionStatus, RouteStatus, ServiceStatus};
pub use traffic::TrafficTarget;

/// Re-exported Kubernetes types used in this crate's public fields.
pub mod k8s {
    pub use k8s_openapi::api::core::v1::{
        Capabilities, ContainerPort, EnvFromSource, EnvVar, HTTPHeader, LocalObjectReference, ResourceRequirements, SeccompProfile,
    };
    pub use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    pub use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
}
