//! Lampyr's fiber runtime, the one crate that links Hyperlight: building snapshot
//! artifacts (booting a guest and taking its snapshot), pools of Hyperlight fibers
//! that serve HTTP requests, and [`LocalBackend`], a Revision served by them in
//! this process. Artifacts are read, verified and moved by `lampyr-artifact`.

pub mod build;
pub mod guest_build;
pub mod local;
pub mod metrics;
pub mod runtime;

pub use build::BuildOptions;
pub use local::LocalBackend;
pub use runtime::{FiberPool, PoolConfig, Template};
