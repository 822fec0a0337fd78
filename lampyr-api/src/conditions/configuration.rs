//! The Configuration condition set and its reasons
//! (`knative.dev/serving/pkg/apis/serving/v1/configuration_lifecycle.go`).

use super::{ConditionSet, go_quote};

/// `Ready` alone: the Configuration reconciler sets it directly.
pub const CONDITION_SET: ConditionSet = ConditionSet::living(&[]);

/// False `Ready`: the latest Revision failed, or could not be created.
pub const REASON_REVISION_FAILED: &str = "RevisionFailed";
/// False `Ready`: the latest ready Revision was deleted.
pub const REASON_REVISION_DELETED: &str = "RevisionDeleted";

/// Message of [`REASON_REVISION_FAILED`] when the latest created Revision failed.
pub fn latest_created_failed_message(name: &str, message: &str) -> String {
    format!("Revision {} failed with message: {message}.", go_quote(name))
}

/// Message of [`REASON_REVISION_FAILED`] when creating the Revision failed.
pub fn revision_creation_failed_message(message: &str) -> String {
    format!("Revision creation failed with message: {message}.")
}

/// Message of [`REASON_REVISION_DELETED`].
pub fn latest_ready_deleted_message(name: &str) -> String {
    format!("Revision {} was deleted.", go_quote(name))
}
