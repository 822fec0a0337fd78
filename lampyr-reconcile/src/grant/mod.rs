//! The grant controller (`fiberd-k8s-controller`): turns each CapacityGrant
//! into grant Pods running fiberd, keeps their count and placement in line
//! with the grant, enforces GrantPolicy, and reports grant status.
//!
//! - [`identity`]: grant Pods' service account, role binding and fleet key, once per namespace.
//! - [`images`]: GrantPolicy enforcement.
//! - [`pods`]: the Pods a grant asks for.
//! - [`status`]: grant status from its Pods.
//! - [`controller`]: the reconcile loop.

pub mod controller;
pub mod identity;
pub mod images;
pub mod pods;
pub mod status;

pub use controller::{GrantContext, GrantError, run_grant_controller};
pub use images::{ImageRefused, check_images};
pub use pods::{KvmAccess, PodSettings, desired_pods};
