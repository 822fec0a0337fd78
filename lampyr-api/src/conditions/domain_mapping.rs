//! The DomainMapping condition set and its reasons
//! (`knative.dev/serving/pkg/apis/serving/v1beta1/domainmapping_lifecycle.go`).

use super::ConditionSet;
pub use super::route::{
    MESSAGE_EXTERNAL_DOMAIN_TLS_NOT_ENABLED, MESSAGE_INGRESS_NOT_CONFIGURED, REASON_CERTIFICATE_NOT_OWNED, REASON_CERTIFICATE_NOT_READY,
    REASON_CERTIFICATE_PROVISION_FAILED, REASON_HTTP_DOWNGRADE, REASON_INGRESS_NOT_CONFIGURED, REASON_TLS_NOT_ENABLED,
    certificate_not_owned_message, http_downgrade_message,
};

/// The mapping holds the ClusterDomainClaim for its domain.
pub const DOMAIN_CLAIMED: &str = "DomainClaimed";
/// `spec.ref` resolves to an addressable target.
pub const REFERENCE_RESOLVED: &str = "ReferenceResolved";
/// The mapping's KIngress is Ready.
pub const INGRESS_READY: &str = "IngressReady";
/// The mapping's certificate is ready, or TLS is not needed.
pub const CERTIFICATE_PROVISIONED: &str = "CertificateProvisioned";
/// `Ready` = `DomainClaimed` ∧ `ReferenceResolved` ∧ `IngressReady` ∧ `CertificateProvisioned`.
pub const CONDITION_SET: ConditionSet = ConditionSet::living(&[DOMAIN_CLAIMED, REFERENCE_RESOLVED, INGRESS_READY, CERTIFICATE_PROVISIONED]);

/// False `DomainClaimed`: another DomainMapping holds the domain.
pub const REASON_DOMAIN_ALREADY_CLAIMED: &str = "DomainAlreadyClaimed";
/// Message of [`REASON_DOMAIN_ALREADY_CLAIMED`].
pub const MESSAGE_DOMAIN_ALREADY_CLAIMED: &str = "The domain name is already in use by another DomainMapping";
/// False `DomainClaimed`: the claim could not be created or read.
pub const REASON_DOMAIN_CLAIM_FAILED: &str = "DomainClaimFailed";
/// False `ReferenceResolved`: `spec.ref` does not resolve.
pub const REASON_RESOLVE_FAILED: &str = "ResolveFailed";
/// True `CertificateProvisioned`: `spec.tls` names the user's own secret.
pub const REASON_CERTIFICATE_EXTERNALLY_PROVIDED: &str = "CertificateExternallyProvided";
/// Message of [`REASON_CERTIFICATE_EXTERNALLY_PROVIDED`].
pub const MESSAGE_TLS_CERTIFICATE_PROVIDED_EXTERNALLY: &str = "TLS certificate was provided externally";

/// Message of [`REASON_CERTIFICATE_NOT_READY`] on a DomainMapping.
pub fn certificate_not_ready_message(name: &str) -> String {
    format!("Certificate {name} is not ready.")
}

/// Message of [`REASON_CERTIFICATE_PROVISION_FAILED`] on a DomainMapping.
pub fn certificate_provision_failed_message(name: &str) -> String {
    format!("Certificate {name} failed to be provisioned.")
}
