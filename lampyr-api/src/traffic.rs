//! One Knative traffic target: the `spec.traffic` entry of a Route or Service, and its
//! resolved form in their `status.traffic`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One entry of `spec.traffic` (and of `status.traffic`, where targets are
/// resolved to Revisions). Empty strings are left out, as Go's `omitempty` does.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TrafficTarget {
    /// Gives this target its own `<tag>-<route>` URL.
    #[serde(default, skip_serializing_if = "is_none_or_empty")]
    pub tag: Option<String>,
    /// A fixed Revision.
    #[serde(default, skip_serializing_if = "is_none_or_empty")]
    pub revision_name: Option<String>,
    /// The Configuration whose latest ready Revision this follows.
    #[serde(default, skip_serializing_if = "is_none_or_empty")]
    pub configuration_name: Option<String>,
    /// Follow the latest ready Revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_revision: Option<bool>,
    /// Share of traffic, 0–100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percent: Option<i64>,
    /// The URL of a tagged target (status only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

fn is_none_or_empty(value: &Option<String>) -> bool {
    value.as_deref().is_none_or(str::is_empty)
}
