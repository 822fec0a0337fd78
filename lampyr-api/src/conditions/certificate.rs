//! The Certificate condition set
//! (`knative.dev/networking/pkg/apis/networking/v1alpha1/certificate_lifecycle.go`).

use super::ConditionSet;
pub use super::{REASON_NOT_OWNED, resource_not_owned_message};

/// `Ready` alone: the certificate implementation sets it directly.
pub const CONDITION_SET: ConditionSet = ConditionSet::living(&[]);
