//! Lampyr's fiber runtime: snapshot artifacts (build, verify, seal, move
//! through registries) and pools of Hyperlight fibers that serve HTTP requests.

pub mod artifact;
pub mod cache;
pub mod guest_build;
pub mod metrics;
pub mod policy;
pub mod registry;
pub mod runtime;
pub mod seal;
pub mod translate;

pub use artifact::{ArtifactError, ArtifactRef, BuildOptions, VerifiedArtifact};
pub use runtime::{FiberPool, InvokeError, PoolConfig, Template};
