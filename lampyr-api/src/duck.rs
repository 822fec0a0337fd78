//! Knative duck types that several resources embed (`knative.dev/pkg/apis/duck/v1`).
//!
//! Go pointers are `Option`s here (present-but-empty survives a round trip);
//! Go `omitempty` strings are `String`s that are left out when empty; fields
//! without `omitempty` are always written.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Where an object can be reached (`duckv1.Addressable`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Addressable {
    /// Name of this address, when an object has several.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// PEM CA certificates to trust when the URL is `https`.
    #[serde(rename = "CACerts", default, skip_serializing_if = "Option::is_none")]
    pub ca_certs: Option<String>,
    /// OIDC audience of this address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audience: Option<String>,
}

/// A reference to a Knative object, possibly in another namespace (`duckv1.KReference`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KReference {
    /// Kind of the referent.
    #[serde(default)]
    pub kind: String,
    /// Namespace of the referent; the referring object's namespace when empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Name of the referent.
    #[serde(default)]
    pub name: String,
    /// API version of the referent.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    /// API group of the referent (resolved to a version by the reconciler).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub group: String,
    /// Name of one of the referent's `status.addresses`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
}

/// `omitempty` for an `int64` field such as `observedGeneration`.
pub(crate) fn is_zero(n: &i64) -> bool {
    *n == 0
}
