//! The Service condition set and its reasons
//! (`knative.dev/serving/pkg/apis/serving/v1/service_lifecycle.go`).

use super::{ConditionSet, go_quote};
pub use super::{REASON_NOT_OWNED, resource_not_owned_message};

/// The Service's Configuration is Ready.
pub const CONFIGURATIONS_READY: &str = "ConfigurationsReady";
/// The Service's Route is Ready.
pub const ROUTES_READY: &str = "RoutesReady";
/// `Ready` = `ConfigurationsReady` ∧ `RoutesReady`.
pub const CONDITION_SET: ConditionSet = ConditionSet::living(&[CONFIGURATIONS_READY, ROUTES_READY]);

/// Unknown: the child has not yet observed the Service's latest spec.
pub const REASON_OUT_OF_DATE: &str = "OutOfDate";
/// Message of [`REASON_OUT_OF_DATE`] on `ConfigurationsReady`.
pub const MESSAGE_CONFIGURATION_OUT_OF_DATE: &str = "The Configuration is still working to reflect the latest desired specification.";
/// Message of [`REASON_OUT_OF_DATE`] on `RoutesReady`.
pub const MESSAGE_ROUTE_OUT_OF_DATE: &str = "The Route is still working to reflect the latest desired specification.";
/// Unknown `RoutesReady`: the Route does not yet send traffic to the latest Revision.
pub const REASON_TRAFFIC_NOT_MIGRATED: &str = "TrafficNotMigrated";
/// Message of [`REASON_TRAFFIC_NOT_MIGRATED`].
pub const MESSAGE_TRAFFIC_NOT_MIGRATED: &str = "Traffic is not yet migrated to the latest revision.";
/// False `RoutesReady`: the template's Revision name belongs to another Revision.
pub const REASON_REVISION_NAME_TAKEN: &str = "RevisionNameTaken";

/// Message of [`REASON_REVISION_NAME_TAKEN`].
pub fn revision_name_taken_message(name: &str) -> String {
    format!("The revision name {} is taken by a conflicting Revision, so traffic will not be migrated", go_quote(name))
}
