//! The workspace's own binaries (`lampyr-controller`, `fiberd`, `fiber-router`, …),
//! built on demand for tests that run them as processes.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use crate::guests::repo_root;

/// Variables cargo sets for a running test that must not reach a nested cargo:
/// build scripts and crates read some of them, so passing them on would make
/// cargo rebuild dependencies the outer build has just compiled.
const KEPT_CARGO_VARS: [&str; 9] = [
    "CARGO_HOME",
    "CARGO_TARGET_DIR",
    "CARGO_INCREMENTAL",
    "CARGO_TERM_COLOR",
    "CARGO_BUILD_",
    "CARGO_NET_",
    "CARGO_HTTP_",
    "CARGO_REGISTRIES_",
    "CARGO_PROFILE_",
];

/// Returns the path of `bin` (of workspace package `package`), building the
/// workspace's binaries first if they are out of date. Panics with cargo's
/// output when the build fails.
///
/// Builds with `cargo test --workspace --no-run`, the feature set and profile
/// `cargo test --workspace` uses, so under the suite it is a no-op and a
/// single-package test run compiles nothing twice. Runs once per process.
pub fn workspace_binary(package: &str, bin: &str) -> PathBuf {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    if let Err(why) = BUILT.get_or_init(build_workspace) {
        panic!("building {bin} of {package}: {why}");
    }
    let path = target_dir().join(bin);
    assert!(path.is_file(), "cargo built the workspace but {} (package {package}) does not exist", path.display());
    path
}

fn build_workspace() -> Result<(), String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command.current_dir(repo_root()).args(["test", "--workspace", "--no-run", "--quiet"]).stdin(Stdio::null());
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        let set_by_cargo_for_tests = name.starts_with("CARGO") && !KEPT_CARGO_VARS.iter().any(|kept| name.starts_with(kept));
        if set_by_cargo_for_tests || name == "OUT_DIR" || name == "LD_LIBRARY_PATH" {
            command.env_remove(&*name);
        }
    }
    let output = command.output().map_err(|e| format!("running cargo: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!("cargo test --workspace --no-run failed:\n{}", String::from_utf8_lossy(&output.stderr)))
    }
}

/// `target/<profile>/`: the directory holding this test binary's `deps/`.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let deps = exe.parent().expect("the test binary's directory");
    deps.parent().expect("the profile directory").to_path_buf()
}
