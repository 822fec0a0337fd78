//! Knative Serving `serving.knative.dev/v1` types as Lampyr reads them.
//!
//! One definition serves local mode (`ly` reading YAML files) and the cluster
//! (controllers reading the API server):
//!
//! - [`serving`]: `Service`, `Configuration`, `Revision` and the Revision
//!   template. The template's pod spec and container keep every field they do
//!   not model in an `other` map, so the fiber translation can name each one.
//! - [`manifest`]: multi-document YAML parsing with errors that carry the
//!   source name, document number, line, column and field path.
//! - [`keys`]: label and annotation keys.
//! - [`names`]: Knative's child-name and Revision-name rules.
//! - [`quantity`] and [`duration`]: Kubernetes quantities and Go durations, the
//!   two value syntaxes the template's fields and annotations use.
//! - [`conditions`]: Knative conditions and condition sets with upstream
//!   semantics (`Ready` from its dependents, severity, ordering,
//!   `lastTransitionTime`, `IsReady()`), and the Revision condition set.
//! - [`status`]: the Revision status, wire-compatible with upstream.
//! - [`fiber`]: Lampyr's own CRDs, `CapacityGrant` and `Home`
//!   (`fiber.lampyr.dev/v1alpha1`), and their generated CRD YAML.

pub mod conditions;
pub mod duration;
pub mod fiber;
pub mod keys;
pub mod manifest;
pub mod names;
pub mod quantity;
pub mod serving;
pub mod status;

pub use conditions::{Condition, ConditionSet, ConditionSeverity, ConditionStatus, KnativeStatus};
pub use fiber::{
    CapacityGrant, CapacityGrantSpec, CapacityGrantStatus, Home, HomeSpec, HomeStatus,
};
pub use manifest::{
    Location, Manifest, ManifestError, ManifestErrorKind, ManifestObject, OtherObject,
    parse_manifests,
};
pub use names::{child_name, revision_name};
pub use serving::{
    Configuration, ConfigurationSpec, Container, HttpGetAction, PodSecurityContext, Probe,
    Revision, RevisionSpec, RevisionTemplateSpec, SecurityContext, Service, ServiceSpec,
    TcpSocketAction, TrafficTarget,
};
pub use status::{ContainerStatus, RevisionStatus};

/// Re-exported Kubernetes types used in this crate's public fields.
pub mod k8s {
    pub use k8s_openapi::api::core::v1::{
        Capabilities, ContainerPort, EnvVar, HTTPHeader, LocalObjectReference,
        ResourceRequirements, SeccompProfile,
    };
    pub use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    pub use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
}
