//! The workspace's own binaries (`lampyr-controller`, `fiberd`, `fiber-router`, …),
//! built on demand for tests that run them as processes.

use std::path::{Path, PathBuf};
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
/// Builds in the profile of the running binary (see `build_args`): under a
/// test (`target/debug`) with `cargo test --workspace --no-run`, the feature set
/// and profile `cargo test --workspace` uses, so under the suite it is a no-op
/// and a single-package test run compiles nothing twice. Runs once per process.
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
    let args = build_args(&target_dir());
    let mut command = Command::new(cargo);
    command.current_dir(repo_root()).args(&args).stdin(Stdio::null());
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
        Err(format!("cargo {} failed:\n{}", args.join(" "), String::from_utf8_lossy(&output.stderr)))
    }
}

/// The nested cargo's arguments for the profile whose output directory is `dir`.
///
/// `target/debug` (the test and dev profiles): the suite's own `cargo test
/// --workspace --no-run`. Any other directory is the profile of a `cargo bench`
/// (`target/release`, the bench profile, which inherits release) or of a custom
/// `--profile` (its directory is its name): only the binaries are built, in that
/// profile, since compiling every test optimized would cost minutes and disk for
/// nothing the caller runs.
fn build_args(dir: &Path) -> Vec<String> {
    let profile = dir.file_name().and_then(|n| n.to_str()).unwrap_or("debug");
    let args: &[&str] = match profile {
        "debug" => &["test", "--workspace", "--no-run"],
        "release" => &["build", "--workspace", "--bins", "--release"],
        custom => &["build", "--workspace", "--bins", "--profile", custom],
    };
    args.iter().copied().chain(["--quiet", "--locked"]).map(String::from).collect()
}

/// `target/<profile>/`: the directory holding this test binary's `deps/`.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let deps = exe.parent().expect("the test binary's directory");
    deps.parent().expect("the profile directory").to_path_buf()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nested_build_matches_the_profile_directory() {
        let args = |dir: &str| build_args(Path::new(dir)).join(" ");
        assert_eq!(args("/t/debug"), "test --workspace --no-run --quiet --locked");
        assert_eq!(args("/t/release"), "build --workspace --bins --release --quiet --locked");
        assert_eq!(args("/t/profiling"), "build --workspace --bins --profile profiling --quiet --locked");
    }
}
