//! Lampyr's controllers, as libraries under thin binaries:
//! the Fiber Revision reconciler (`lampyr-controller`) and the grant
//! controller (`fiberd-k8s-controller`). See `docs/cluster.md`.
//!
//! - [`revision`]: the Fiber Revision reconciler.
//! - [`grant`]: the grant controller.
//! - [`admin`]: the `/metrics`, `/healthz` and `/readyz` server.
//! - [`leader`]: leader election on a Lease.
//! - [`listed`]: whether watches have listed, for many waiters.
//! - [`runner`]: what the controller binaries share.

pub mod admin;
pub mod grant;
pub mod leader;
pub mod listed;
pub mod revision;
pub mod runner;
