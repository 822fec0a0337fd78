//! Snapshot artifacts built from real guests under /dev/kvm: build, verify,
//! and refuse every kind of damage with a message naming what is wrong.

use std::path::Path;

use lampyr_artifact::ArtifactError;
use lampyr_artifact::layout::{blob_path, read_index};
use lampyr_artifact::{PlatformFit, verify_layout};
use lampyr_fiber::build::{BuildOptions, build_artifact};
use lampyr_testenv::{example_elf, require_kvm};

fn built_hello(dir: &Path) -> String {
    require_kvm();
    build_artifact(&example_elf("hello"), dir, &BuildOptions::default()).expect("hello builds").digest
}

#[test]
fn built_artifact_verifies_and_fits_this_host() {
    let dir = tempfile::tempdir().expect("tempdir");
    let layout = dir.path().join("hello");
    let digest = built_hello(&layout);
    let v = verify_layout(&layout, Some(&digest)).expect("verifies");
    assert_eq!(v.digest, digest);
    assert_eq!(v.fit, PlatformFit::Fits);
    assert_eq!(v.metadata.abi_version, 1);
    assert_eq!(v.metadata.handler, "LampyrHandle");
    assert_eq!(v.metadata.max_request_body, 1024 * 1024);
    assert!(v.guest_elf.is_file());
    // The `lampyr` tag selects the same artifact.
    assert_eq!(verify_layout(&layout, None).expect("verifies by tag").digest, digest);
    eprintln!("sizes: {:?}", v.sizes);
}

#[test]
fn tampered_truncated_and_unpinned_artifacts_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let layout = dir.path().join("hello");
    let digest = built_hello(&layout);
    let v = verify_layout(&layout, Some(&digest)).expect("verifies");

    // A digest the layout does not hold.
    let wrong = format!("sha256:{}", "0".repeat(64));
    let err = verify_layout(&layout, Some(&wrong)).expect_err("unknown digest");
    assert!(matches!(err, ArtifactError::NotFound { .. }), "{err}");

    // A flipped byte in the ELF layer.
    let mut elf = std::fs::read(&v.guest_elf).expect("read elf");
    elf[100] ^= 0xff;
    std::fs::write(&v.guest_elf, &elf).expect("write");
    let err = verify_layout(&layout, Some(&digest)).expect_err("tampered layer");
    assert!(matches!(&err, ArtifactError::DigestMismatch { what, .. } if what == "guest ELF layer"), "{err}");
    elf[100] ^= 0xff;
    std::fs::write(&v.guest_elf, &elf).expect("restore");

    // A truncated memory blob.
    let index = read_index(&layout).expect("index");
    let snap = index.manifests().iter().find(|d| d.digest().to_string() == v.snapshot_manifest).expect("snapshot desc");
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(blob_path(&layout, snap.digest().as_ref()).expect("path")).expect("read")).expect("json");
    let memory = manifest["layers"][0]["digest"].as_str().expect("memory digest");
    let memory_path = blob_path(&layout, memory).expect("path");
    let bytes = std::fs::read(&memory_path).expect("read memory");
    std::fs::write(&memory_path, &bytes[..bytes.len() / 2]).expect("truncate");
    let err = verify_layout(&layout, Some(&digest)).expect_err("truncated blob");
    assert!(matches!(&err, ArtifactError::SizeMismatch { what, .. } if what == "snapshot memory layer"), "{err}");
    assert!(err.to_string().contains("truncated"), "{err}");
}
