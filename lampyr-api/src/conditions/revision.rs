//! The Revision condition set and the reasons upstream reports
//! (`knative.dev/serving/pkg/apis/serving/v1/revision_lifecycle.go`, and the
//! PodAutoscaler reasons the Revision copies into `Active`).

use super::{ConditionSet, go_quote};
pub use super::{REASON_NOT_OWNED, resource_not_owned_message};

/// The Revision's resources (for Lampyr: grant capacity, Home, fibers) are available.
pub const RESOURCES_AVAILABLE: &str = "ResourcesAvailable";
/// The Revision's container (for Lampyr: the guest) is healthy.
pub const CONTAINER_HEALTHY: &str = "ContainerHealthy";
/// The Revision is receiving traffic / has replicas; informational, not part of `Ready`
/// (a Revision scaled to zero is still Ready).
pub const ACTIVE: &str = "Active";

/// `Ready` = `ResourcesAvailable` ∧ `ContainerHealthy`; `Active` is informational.
pub const CONDITION_SET: ConditionSet = ConditionSet::living(&[RESOURCES_AVAILABLE, CONTAINER_HEALTHY]);

/// Unknown `ResourcesAvailable` / `ContainerHealthy` / `Active` while the Revision deploys.
pub const REASON_DEPLOYING: &str = "Deploying";
/// Unknown while image digests (for Lampyr: the snapshot artifact) are being resolved.
pub const REASON_RESOLVING_DIGESTS: &str = "ResolvingDigests";
/// False `ResourcesAvailable`: initial scale was never achieved within the progress deadline.
pub const REASON_PROGRESS_DEADLINE_EXCEEDED: &str = "ProgressDeadlineExceeded";
/// Message upstream pairs with [`REASON_PROGRESS_DEADLINE_EXCEEDED`].
pub const MESSAGE_INITIAL_SCALE_NEVER_ACHIEVED: &str = "Initial scale was never achieved";
/// False `ContainerHealthy`: the image (for Lampyr: the artifact) could not be fetched.
pub const REASON_CONTAINER_MISSING: &str = "ContainerMissing";
/// `Active` False: the Revision is scaled to zero and receives no traffic.
pub const REASON_NO_TRAFFIC: &str = "NoTraffic";
/// Message upstream pairs with [`REASON_NO_TRAFFIC`].
pub const MESSAGE_NO_TRAFFIC: &str = "The target is not receiving traffic.";
/// `Active` False: activation failed within the progress deadline.
pub const REASON_TIMED_OUT: &str = "TimedOut";
/// Message upstream pairs with [`REASON_TIMED_OUT`].
pub const MESSAGE_TIMED_OUT: &str = "The target could not be activated.";
/// `Active` Unknown: requests are buffered while replicas are provisioned.
pub const REASON_QUEUED: &str = "Queued";
/// Message upstream pairs with [`REASON_QUEUED`].
pub const MESSAGE_QUEUED: &str = "Requests to the target are being buffered as resources are provisioned.";

/// Upstream `ExitCodeReason`: `ExitCode<N>`, the `ContainerHealthy` False reason
/// when the container (guest) exits.
pub fn exit_code_reason(exit_code: i32) -> String {
    format!("ExitCode{exit_code}")
}

/// Upstream `RevisionContainerExitingMessage`.
pub fn container_exiting_message(message: &str) -> String {
    format!("Container failed with: {message}")
}

/// Upstream `RevisionContainerMissingMessage` (Go's `%q` quoting of `image`).
pub fn container_missing_message(image: &str, message: &str) -> String {
    format!("Unable to fetch image {}: {message}", go_quote(image))
}
