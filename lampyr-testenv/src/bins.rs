//! The workspace's own binaries (`lampyr-controller`, `fiberd`, `fiber-router`, …),
//! built on demand for tests that run them as processes.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Mutex;

use crate::guests::repo_root;

/// Builds `bin` of workspace package `package` (a no-op when up to date) and
/// returns its path. Panics with cargo's output when the build fails.
///
/// Runs `cargo build` with the test's own target directory and profile, so a
/// binary `cargo test --workspace` has just built is reused as it is.
pub fn workspace_binary(package: &str, bin: &str) -> PathBuf {
    static BUILD: Mutex<()> = Mutex::new(());
    let _one_at_a_time = BUILD.lock().unwrap_or_else(|p| p.into_inner());
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(cargo)
        .current_dir(repo_root())
        .args(["build", "--quiet", "-p", package, "--bin", bin])
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running cargo build for {bin}: {e}"));
    assert!(
        output.status.success(),
        "cargo build -p {package} --bin {bin} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let path = target_dir().join(bin);
    assert!(path.is_file(), "cargo built {bin} but {} does not exist", path.display());
    path
}

/// `target/<profile>/`: the directory holding this test binary's `deps/`.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let deps = exe.parent().expect("the test binary's directory");
    deps.parent().expect("the profile directory").to_path_buf()
}
