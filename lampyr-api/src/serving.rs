//! `serving.knative.dev/v1` Service, Configuration, Revision and Route.
//!
//! The four are Kubernetes objects ([`kube::Resource`], `JsonSchema`, `serde`)
//! wire-compatible with upstream Knative Serving: `metadata`, `spec` and an
//! optional `status` ([`crate::status`]), with `apiVersion` and `kind` written
//! when serializing (the shape a kube `CustomResource` derive generates).
//!
//! Every upstream field is modelled, so reading and writing an object loses
//! nothing. The Revision template's pod spec is the one place that keeps
//! fields it does not model: [`RevisionSpec`] (Knative inlines the pod spec
//! there) and [`Container`], together with the probe and security-context
//! types, hold every other field in their `other` map, so the fiber
//! translation can list each one instead of silently dropping it.

use std::collections::BTreeMap;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{
    Capabilities, ContainerPort, EnvFromSource, EnvVar, HTTPHeader, LocalObjectReference, ResourceRequirements, SeccompProfile,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::object::kube_object;
use crate::status::{ConfigurationStatus, RevisionStatus, RouteStatus, ServiceStatus};
use crate::traffic::TrafficTarget;

/// Fields kept verbatim because the enclosing type does not model them.
pub type OtherFields = BTreeMap<String, serde_json::Value>;

/// A Knative Service: a Configuration and a Route under one name.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct Service {
    /// Standard object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The desired state.
    #[serde(default)]
    pub spec: ServiceSpec,
    /// What the Service reconciler observed.
    #[serde(default)]
    pub status: Option<ServiceStatus>,
}

/// `Service.spec`: Knative inlines a ConfigurationSpec and a RouteSpec.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceSpec {
    /// The template Revisions are stamped from.
    #[serde(default)]
    pub template: RevisionTemplateSpec,
    /// How traffic is split between Revisions; Knative's default when empty is
    /// 100 % to the latest ready Revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic: Option<Vec<TrafficTarget>>,
}

/// A Knative Configuration: the stream of Revisions of one template.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct Configuration {
    /// Standard object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The desired state.
    #[serde(default)]
    pub spec: ConfigurationSpec,
    /// What the Configuration reconciler observed.
    #[serde(default)]
    pub status: Option<ConfigurationStatus>,
}

/// `Configuration.spec`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigurationSpec {
    /// The template Revisions are stamped from.
    #[serde(default)]
    pub template: RevisionTemplateSpec,
}

/// A Knative Revision: an immutable snapshot of a Configuration's template.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct Revision {
    /// Standard object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The Revision's spec (pod spec plus Knative's serving fields).
    #[serde(default)]
    pub spec: RevisionSpec,
    /// What the Revision reconciler observed.
    #[serde(default)]
    pub status: Option<RevisionStatus>,
}

/// `spec.template`: metadata and spec of the Revisions to stamp.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RevisionTemplateSpec {
    /// Labels and annotations (autoscaling annotations live here) and an
    /// optional user-chosen Revision name.
    #[serde(default, skip_serializing_if = "is_default")]
    pub metadata: ObjectMeta,
    /// The Revision spec.
    #[serde(default)]
    pub spec: RevisionSpec,
}

/// `RevisionSpec`: Knative's serving fields plus the inlined pod spec.
///
/// Pod-spec fields not modelled here land in [`RevisionSpec::other`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RevisionSpec {
    /// Most requests one replica serves at once (0 = unlimited).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_concurrency: Option<i64>,
    /// Longest a request may take, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<i64>,
    /// Longest until the response starts, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_start_timeout_seconds: Option<i64>,
    /// Longest a request may stay idle (no bytes either way), in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout_seconds: Option<i64>,
    /// The containers (Lampyr supports exactly one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub containers: Vec<Container>,
    /// Kubernetes service account of the pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    /// Secrets for pulling the container image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_secrets: Option<Vec<LocalObjectReference>>,
    /// Whether Kubernetes service environment variables are injected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_service_links: Option<bool>,
    /// Whether a service account token is mounted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub automount_service_account_token: Option<bool>,
    /// Pod-level security settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<PodSecurityContext>,
    /// Every other pod-spec field, verbatim (`volumes`, `nodeSelector`, …).
    #[serde(flatten)]
    pub other: OtherFields,
}

/// A container of the Revision template.
///
/// Container fields not modelled here land in [`Container::other`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Container {
    /// Container name (Knative defaults it to `user-container`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Container image (required by Knative; fibers run the snapshot artifact).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Image pull policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<String>,
    /// Environment variables.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<Vec<EnvVar>>,
    /// The entrypoint (for a fiber: the first arguments its guest is given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// Arguments (given to the guest after `command`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Vec<String>>,
    /// Environment variables from every key of ConfigMaps and Secrets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_from: Option<Vec<EnvFromSource>>,
    /// Ports (Knative allows at most one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ports: Option<Vec<ContainerPort>>,
    /// Resource requests and limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Readiness probe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readiness_probe: Option<Probe>,
    /// Liveness probe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub liveness_probe: Option<Probe>,
    /// Startup probe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_probe: Option<Probe>,
    /// Container security settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<SecurityContext>,
    /// Every other container field, verbatim (`command`, `volumeMounts`, …).
    #[serde(flatten)]
    pub other: OtherFields,
}

/// A probe; handlers other than `httpGet` and `tcpSocket` land in `other`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Probe {
    /// HTTP GET handler.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_get: Option<HttpGetAction>,
    /// TCP connect handler.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_socket: Option<TcpSocketAction>,
    /// Seconds before the first probe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial_delay_seconds: Option<i32>,
    /// Seconds between probes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period_seconds: Option<i32>,
    /// Seconds before a probe times out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<i32>,
    /// Successes in a row that count as success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success_threshold: Option<i32>,
    /// Failures in a row that count as failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_threshold: Option<i32>,
    /// Grace period after a failed liveness probe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period_seconds: Option<i64>,
    /// Every other probe field (`exec`, `grpc`, …), verbatim.
    #[serde(flatten)]
    pub other: OtherFields,
}

/// `httpGet` probe handler; Knative lets `port` be omitted.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HttpGetAction {
    /// Path to request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Port, by number or name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<IntOrString>,
    /// Host header / address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// `HTTP` or `HTTPS`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheme: Option<String>,
    /// Extra request headers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_headers: Option<Vec<HTTPHeader>>,
    /// Every other field, verbatim.
    #[serde(flatten)]
    pub other: OtherFields,
}

/// `tcpSocket` probe handler; Knative lets `port` be omitted.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TcpSocketAction {
    /// Port, by number or name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<IntOrString>,
    /// Address to connect to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Every other field, verbatim.
    #[serde(flatten)]
    pub other: OtherFields,
}

/// Container `securityContext`; settings not modelled land in `other`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecurityContext {
    /// Require a non-root user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as_non_root: Option<bool>,
    /// Allow gaining privileges (setuid, file capabilities).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_privilege_escalation: Option<bool>,
    /// Mount the root filesystem read-only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only_root_filesystem: Option<bool>,
    /// Run privileged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub privileged: Option<bool>,
    /// Linux capabilities to add or drop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Capabilities>,
    /// Seccomp profile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seccomp_profile: Option<SeccompProfile>,
    /// Every other setting (`runAsUser`, `seLinuxOptions`, …), verbatim.
    #[serde(flatten)]
    pub other: OtherFields,
}

/// Pod-level `securityContext`; settings not modelled land in `other`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodSecurityContext {
    /// Require a non-root user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as_non_root: Option<bool>,
    /// Seccomp profile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seccomp_profile: Option<SeccompProfile>,
    /// Every other setting (`runAsUser`, `fsGroup`, `sysctls`, …), verbatim.
    #[serde(flatten)]
    pub other: OtherFields,
}

/// A Knative Route: named, weighted traffic to Revisions.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct Route {
    /// Standard object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The desired state.
    #[serde(default)]
    pub spec: RouteSpec,
    /// What the Route reconciler observed.
    #[serde(default)]
    pub status: Option<RouteStatus>,
}

/// `Route.spec`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RouteSpec {
    /// How traffic is split between Revisions and Configurations.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub traffic: Vec<TrafficTarget>,
}

fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

kube_object!(Service, group "serving.knative.dev", version "v1", plural "services",
    scope NamespaceResourceScope, spec ServiceSpec, status ServiceStatus);
kube_object!(Configuration, group "serving.knative.dev", version "v1", plural "configurations",
    scope NamespaceResourceScope, spec ConfigurationSpec, status ConfigurationStatus);
kube_object!(Revision, group "serving.knative.dev", version "v1", plural "revisions",
    scope NamespaceResourceScope, spec RevisionSpec, status RevisionStatus);
kube_object!(Route, group "serving.knative.dev", version "v1", plural "routes",
    scope NamespaceResourceScope, spec RouteSpec, status RouteStatus);
