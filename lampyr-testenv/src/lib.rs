//! Test support shared by Lampyr's crates: example guests built once per
//! process, and real components started on loopback: an OCI registry, and a
//! Kubernetes API server with upstream Knative composed as Lampyr runs it; and
//! a real single-node cluster (containerd, kubelet, kube-proxy, CoreDNS) in a
//! network namespace of its own.
//!
//! Everything here fails loudly, naming the setup step, when a prerequisite
//! (`/dev/kvm`, the guest target, `docker-registry`) is missing: a test that
//! needs one never passes by skipping.

pub mod artifacts;
pub mod bins;
pub mod cluster;
pub mod conformance;
pub mod containerd;
pub mod crate_graph;
pub mod eventing;
pub mod guests;
pub mod installed;
pub mod knative_services;
pub mod ly;
pub mod ly_run;
pub mod node;
pub mod registry;
pub mod runtime_images;
mod shared;
pub mod stack;
pub mod tls;

pub use artifacts::{Artifact, conformance_artifact, example_artifact, plain_form, push_artifact, push_sealed, test_guest_artifact};
pub use bins::workspace_binary;
pub use cluster::{Cluster, Placement, Process};
pub use guests::{conformance_guest_elf, example_elf, repo_root, require_kvm, test_guest_elf};
pub use installed::InstalledLampyr;
pub use knative_services::{PATIENCE, Serving, knative_service};
pub use ly_run::LyRun;
pub use node::Node;
pub use registry::TestRegistry;
pub use stack::LampyrStack;

/// A reqwest client builder for tests, made after rustls has its provider (reqwest reads
/// the process default and has none of its own in this build: see
/// `lampyr_artifact::registry::use_build_tls_provider`).
pub fn http_client() -> reqwest::ClientBuilder {
    lampyr_artifact::registry::use_build_tls_provider();
    reqwest::Client::builder()
}
