//! The crate family's shape, checked on every run: the library crates another
//! program embeds link no hypervisor, and `docs/crates.md` shows the graph as it is.

use std::path::Path;
use std::process::Command;

use lampyr_testenv::crate_graph::{CrateGraph, Metadata};

/// Crates that must not reach Hyperlight or KVM: what a controller, a router or a
/// tool embeds without running fibers.
const WITHOUT_HYPERVISOR: [&str; 8] = [
    "lampyr-abi",
    "lampyr-api",
    "lampyr-artifact",
    "lampyr-process",
    "lampyr-manifests",
    "lampyr-router",
    "lampyr-reconcile",
    "lampyr-eventgrid",
];

fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace holds lampyr-testenv")
}

fn graph() -> CrateGraph {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let manifest = workspace().join("Cargo.toml");
    let out = Command::new(&cargo)
        .args(["metadata", "--format-version", "1", "--locked", "--offline", "--manifest-path"])
        .arg(&manifest)
        .output()
        .unwrap_or_else(|e| panic!("running {cargo} metadata: {e}"));
    assert!(out.status.success(), "cargo metadata failed: {}", String::from_utf8_lossy(&out.stderr));
    let metadata: Metadata = serde_json::from_slice(&out.stdout).expect("cargo metadata's JSON");
    CrateGraph::new(&metadata)
}

#[test]
fn embeddable_crates_link_no_hypervisor() {
    let graph = graph();
    let members: Vec<&str> = graph.members().collect();
    for krate in WITHOUT_HYPERVISOR {
        assert!(members.contains(&krate), "{krate} is not a workspace member: {members:?}");
        let found = graph.hypervisor_of(krate);
        assert!(found.is_empty(), "{krate} reaches {found:?}; only the crates that run fibers may (see docs/crates.md)");
    }
    assert_eq!(graph.hypervisor_of("lampyr-fiber"), ["hyperlight-host", "kvm-ioctls"], "the check sees Hyperlight where it is");
}

#[test]
fn one_tls_provider_so_nothing_installs_a_process_default() {
    let graph = graph();
    for krate in graph.members() {
        let reached = graph.reaches(krate);
        assert!(
            !reached.contains("aws-lc-rs"),
            "{krate} links aws-lc-rs beside ring: rustls would refuse to choose a provider (enable only rustls' ring feature)"
        );
    }
}

#[test]
fn the_crate_graph_document_is_current() {
    let path = workspace().join("docs/crates.md");
    let rendered = graph().render();
    if std::env::var_os("LAMPYR_WRITE_DOCS").is_some() {
        std::fs::write(&path, &rendered).expect("writing docs/crates.md");
    }
    let written = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(written == rendered, "docs/crates.md is stale: run LAMPYR_WRITE_DOCS=1 cargo test -p lampyr-testenv --test crate_graph");
}
