//! The KIngress condition set and its reasons
//! (`knative.dev/networking/pkg/apis/networking/v1alpha1/ingress_lifecycle.go`).

use super::ConditionSet;
pub use super::{REASON_NOT_OWNED, resource_not_owned_message};

/// The ingress implementation has programmed the routes.
pub const NETWORK_CONFIGURED: &str = "NetworkConfigured";
/// The load balancers serve the routes.
pub const LOAD_BALANCER_READY: &str = "LoadBalancerReady";
/// `Ready` = `NetworkConfigured` ∧ `LoadBalancerReady`.
pub const CONDITION_SET: ConditionSet = ConditionSet::living(&[NETWORK_CONFIGURED, LOAD_BALANCER_READY]);

/// Unknown `LoadBalancerReady` while the load balancers are not serving yet.
pub const REASON_UNINITIALIZED: &str = "Uninitialized";
/// Message of [`REASON_UNINITIALIZED`].
pub const MESSAGE_LOAD_BALANCER_NOT_READY: &str = "Waiting for load balancer to be ready";
