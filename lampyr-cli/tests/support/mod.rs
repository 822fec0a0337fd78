//! `ly` (this package's binary) against a test environment's cluster: see
//! `lampyr_testenv::ly`.

#![allow(dead_code)] // each test binary uses its part

use lampyr_testenv::Cluster;
pub use lampyr_testenv::ly::*;

/// This package's `ly` against `cluster`, with a scaffolded Workspace.
pub fn ly(cluster: &Cluster) -> Ly<'_> {
    Ly::new(env!("CARGO_BIN_EXE_ly"), cluster)
}
