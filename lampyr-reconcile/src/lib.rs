//! Lampyr's controllers, as libraries under thin binaries:
//! the Fiber Revision reconciler (`lampyr-controller`) and the grant
//! controller (`fiberd-k8s-controller`). See `docs/cluster.md`.

pub mod admin;
pub mod grant;
pub mod leader;
pub mod runner;
