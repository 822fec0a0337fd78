//! The Route condition set and its reasons
//! (`knative.dev/serving/pkg/apis/serving/v1/route_lifecycle.go`).

use super::{ConditionSet, go_quote};
pub use super::{REASON_NOT_OWNED, resource_not_owned_message};

/// Every traffic target resolves to a ready Revision.
pub const ALL_TRAFFIC_ASSIGNED: &str = "AllTrafficAssigned";
/// The Route's KIngress is Ready.
pub const INGRESS_READY: &str = "IngressReady";
/// The Route's certificate is ready, or TLS is not needed.
pub const CERTIFICATE_PROVISIONED: &str = "CertificateProvisioned";
/// `Ready` = `AllTrafficAssigned` ∧ `IngressReady` ∧ `CertificateProvisioned`.
pub const CONDITION_SET: ConditionSet = ConditionSet::living(&[ALL_TRAFFIC_ASSIGNED, INGRESS_READY, CERTIFICATE_PROVISIONED]);

/// Unknown `IngressReady`: the KIngress has no `Ready` condition yet.
pub const REASON_INGRESS_NOT_CONFIGURED: &str = "IngressNotConfigured";
/// Message of [`REASON_INGRESS_NOT_CONFIGURED`].
pub const MESSAGE_INGRESS_NOT_CONFIGURED: &str = "Ingress has not yet been reconciled.";
/// Unknown `IngressReady`: traffic is shifting gradually (`rollout-duration`).
pub const REASON_ROLLOUT_IN_PROGRESS: &str = "RolloutInProgress";
/// Message of [`REASON_ROLLOUT_IN_PROGRESS`].
pub const MESSAGE_ROLLOUT_IN_PROGRESS: &str = "A gradual rollout of the latest revision(s) is in progress.";
/// Unknown `AllTrafficAssigned` for an unexpected error while resolving targets.
pub const REASON_UNKNOWN: &str = "Unknown";
/// `AllTrafficAssigned` not True: a target has no ready Revision (yet).
pub const REASON_REVISION_MISSING: &str = "RevisionMissing";
/// False `CertificateProvisioned`: the Certificate failed.
pub const REASON_CERTIFICATE_PROVISION_FAILED: &str = "CertificateProvisionFailed";
/// Unknown `CertificateProvisioned`: the Certificate is not ready yet.
pub const REASON_CERTIFICATE_NOT_READY: &str = "CertificateNotReady";
/// False `CertificateProvisioned`: a Certificate of that name is owned by another object.
pub const REASON_CERTIFICATE_NOT_OWNED: &str = "CertificateNotOwned";
/// True `CertificateProvisioned` without a certificate: TLS is off.
pub const REASON_TLS_NOT_ENABLED: &str = "TLSNotEnabled";
/// Message of [`REASON_TLS_NOT_ENABLED`] when external-domain TLS is off.
pub const MESSAGE_EXTERNAL_DOMAIN_TLS_NOT_ENABLED: &str = "external-domain-tls is not enabled";
/// Message of [`REASON_TLS_NOT_ENABLED`] for a cluster-local Route.
pub const MESSAGE_TLS_NOT_ENABLED_FOR_CLUSTER_LOCAL: &str = "TLS is not enabled for cluster-local";
/// True `CertificateProvisioned`: the certificate is not ready, so HTTP is served instead.
pub const REASON_HTTP_DOWNGRADE: &str = "HTTPDowngrade";

/// Message of [`REASON_REVISION_MISSING`]: the Configuration has no ready Revision yet.
pub fn configuration_not_ready_message(name: &str) -> String {
    format!("Configuration {} is waiting for a Revision to become ready.", go_quote(name))
}

/// Message of [`REASON_REVISION_MISSING`]: the Configuration has no ready Revision.
pub fn configuration_failed_message(name: &str) -> String {
    format!("Configuration {} does not have any ready Revision.", go_quote(name))
}

/// Message of [`REASON_REVISION_MISSING`]: the Revision is not ready yet.
pub fn revision_not_ready_message(name: &str) -> String {
    format!("Revision {} is not yet ready.", go_quote(name))
}

/// Message of [`REASON_REVISION_MISSING`]: the Revision failed.
pub fn revision_failed_message(name: &str) -> String {
    format!("Revision {} failed to become ready.", go_quote(name))
}

/// False `AllTrafficAssigned` reason for a target that does not exist: `<kind>Missing`.
pub fn missing_target_reason(kind: &str) -> String {
    format!("{kind}Missing")
}

/// Message of [`missing_target_reason`].
pub fn missing_target_message(kind: &str, name: &str) -> String {
    format!("{kind} {} referenced in traffic not found.", go_quote(name))
}

/// Message of [`REASON_CERTIFICATE_PROVISION_FAILED`], with the Certificate's `Ready` reason.
pub fn certificate_provision_failed_message(name: &str, reason: &str) -> String {
    format!("Certificate {name} fails to be provisioned: {reason}")
}

/// Message of [`REASON_CERTIFICATE_NOT_READY`], with the Certificate's `Ready` reason.
pub fn certificate_not_ready_message(name: &str, reason: &str) -> String {
    format!("Certificate {name} is not ready: {reason}")
}

/// Message of [`REASON_CERTIFICATE_NOT_OWNED`].
pub fn certificate_not_owned_message(name: &str) -> String {
    format!("There is an existing certificate {name} that we don't own.")
}

/// Message of [`REASON_HTTP_DOWNGRADE`].
pub fn http_downgrade_message(name: &str) -> String {
    format!("Certificate {name} is not ready downgrade HTTP.")
}
