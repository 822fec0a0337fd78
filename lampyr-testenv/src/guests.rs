//! Example and test guests, built with `lampyr_fiber::guest_build` once per process.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use lampyr_fiber::guest_build::GuestBuild;

/// The repository root (this crate lives one level below it).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf).unwrap_or_default()
}

/// Panics with the fix when `/dev/kvm` is not usable: runtime tests must not pass silently.
pub fn require_kvm() {
    let usable = std::fs::OpenOptions::new().read(true).write(true).open("/dev/kvm").is_ok();
    assert!(usable, "/dev/kvm is missing or not accessible: runtime tests need real Hyperlight sandboxes under KVM");
}

fn build_cached(key: String, build: GuestBuild) -> PathBuf {
    static BUILT: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let mut built = BUILT.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    if let Some(path) = built.get(&key) {
        return path.clone();
    }
    let path = build
        .run(&mut |_| {})
        .unwrap_or_else(|e| panic!("building guest {key} failed (run scripts/setup for the x86_64-unknown-none target): {e}"));
    built.insert(key, path.clone());
    path
}

/// The ELF of example `name` (`hello`, `echo`, `json-api`), built on first use.
pub fn example_elf(name: &str) -> PathBuf {
    build_cached(name.to_string(), GuestBuild::new(repo_root().join("examples").join(name)).locked())
}

/// The ELF of test guest `name` (`panic`, `spin`, `heap`, `counter`), built on first use.
pub fn test_guest_elf(name: &str) -> PathBuf {
    build_cached(format!("testing/{name}"), GuestBuild::new(repo_root().join("examples/testing")).bin(name).locked())
}

/// The ELF of conformance guest `name` (`examples/conformance`: `helloworld`, `runtime`, …), built on first use.
pub fn conformance_guest_elf(name: &str) -> PathBuf {
    build_cached(format!("conformance/{name}"), GuestBuild::new(repo_root().join("examples/conformance")).bin(name).locked())
}
