//! Builds guest crates for `x86_64-unknown-none` with the flags Hyperlight needs.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The target every Lampyr guest is built for (soft-float, no SSE).
pub const GUEST_TARGET: &str = "x86_64-unknown-none";
/// Rust flags a guest needs: the `entrypoint` ELF entry Hyperlight jumps to.
pub const GUEST_RUSTFLAGS: &str = "-C link-arg=-eentrypoint --cfg=hyperlight";

/// Why a guest could not be built.
#[derive(Debug, thiserror::Error)]
pub enum GuestBuildError {
    /// The directory has no `Cargo.toml`.
    #[error("{0} has no Cargo.toml: give a guest crate directory or a built guest ELF")]
    NotACrate(PathBuf),
    /// cargo could not be started.
    #[error("could not run cargo: {0} (is the Rust toolchain installed? run scripts/setup)")]
    Spawn(std::io::Error),
    /// cargo failed; its diagnostics follow.
    #[error("cargo build failed for {dir}:\n{diagnostics}")]
    Failed {
        /// The crate directory.
        dir: PathBuf,
        /// What cargo printed.
        diagnostics: String,
    },
    /// The crate or workspace builds several executables and none was chosen.
    #[error("{dir} builds several guests ({}): choose one with --bin", .names.join(", "))]
    Ambiguous {
        /// The crate directory.
        dir: PathBuf,
        /// Executables built.
        names: Vec<String>,
    },
    /// cargo succeeded but produced no matching executable.
    #[error("cargo built no executable{} in {dir}", .bin.as_ref().map(|b| format!(" named {b:?}")).unwrap_or_default())]
    NoExecutable {
        /// The crate directory.
        dir: PathBuf,
        /// The binary asked for.
        bin: Option<String>,
    },
}

/// What to build.
#[derive(Clone, Debug, Default)]
pub struct GuestBuild {
    /// The guest crate directory (holding `Cargo.toml`).
    pub dir: PathBuf,
    /// A specific `[[bin]]`; by default the crate's only executable.
    pub bin: Option<String>,
    /// Build directory; by default cargo's (the guest workspace's `target/`).
    pub target_dir: Option<PathBuf>,
    /// Where cargo keeps intermediate outputs (its `build.build-dir`), apart from the
    /// executables it puts in the target directory: one shared by many guest crates lets
    /// their common dependencies compile once. By default cargo's (the target directory).
    pub build_dir: Option<PathBuf>,
    /// Build exactly the versions the workspace's `Cargo.lock` pins (`--locked`): what
    /// Lampyr's own builds of its examples do; a user's crate may have no lock file yet.
    pub locked: bool,
}

impl GuestBuild {
    /// Builds the crate at `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        GuestBuild { dir: dir.into(), ..GuestBuild::default() }
    }

    /// Builds with `--locked`.
    pub fn locked(mut self) -> Self {
        self.locked = true;
        self
    }

    /// Selects one binary of a crate with several.
    pub fn bin(mut self, bin: impl Into<String>) -> Self {
        self.bin = Some(bin.into());
        self
    }

    /// Runs `cargo build --release` and returns the guest ELF's path.
    /// `progress` receives one line per crate cargo compiles.
    pub fn run(&self, progress: &mut dyn FnMut(&str)) -> Result<PathBuf, GuestBuildError> {
        if !self.dir.join("Cargo.toml").is_file() {
            return Err(GuestBuildError::NotACrate(self.dir.clone()));
        }
        let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
        cmd.current_dir(&self.dir)
            .args(["build", "--release", "--message-format=json-render-diagnostics", "--target", GUEST_TARGET])
            .env("CARGO_TARGET_X86_64_UNKNOWN_NONE_RUSTFLAGS", GUEST_RUSTFLAGS)
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_ENCODED_RUSTFLAGS")
            .env_remove("CARGO_BUILD_TARGET")
            .env_remove("CARGO_TARGET_DIR")
            .env_remove("CARGO_BUILD_BUILD_DIR")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(bin) = &self.bin {
            cmd.args(["--bin", bin]);
        }
        if let Some(dir) = &self.target_dir {
            cmd.arg("--target-dir").arg(dir);
        }
        if let Some(dir) = &self.build_dir {
            cmd.env("CARGO_BUILD_BUILD_DIR", dir);
        }
        if self.locked {
            cmd.arg("--locked");
        }
        let mut child = cmd.spawn().map_err(GuestBuildError::Spawn)?;
        let stderr = child.stderr.take().map(|mut s| {
            std::thread::spawn(move || {
                let mut text = String::new();
                let _ = s.read_to_string(&mut text);
                text
            })
        });
        let mut executables = Vec::new();
        if let Some(stdout) = child.stdout.take() {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                executables.extend(self.read_message(&line, progress));
            }
        }
        let status = child.wait().map_err(GuestBuildError::Spawn)?;
        let diagnostics = stderr.and_then(|h| h.join().ok()).unwrap_or_default();
        if !status.success() {
            return Err(GuestBuildError::Failed { dir: self.dir.clone(), diagnostics });
        }
        match executables.len() {
            0 => Err(GuestBuildError::NoExecutable { dir: self.dir.clone(), bin: self.bin.clone() }),
            1 => Ok(executables.remove(0).1),
            _ => Err(GuestBuildError::Ambiguous { dir: self.dir.clone(), names: executables.into_iter().map(|e| e.0).collect() }),
        }
    }

    /// Reports progress for one cargo JSON message; returns the executable it names.
    fn read_message(&self, line: &str, progress: &mut dyn FnMut(&str)) -> Option<(String, PathBuf)> {
        let msg: serde_json::Value = serde_json::from_str(line).ok()?;
        if msg.get("reason")?.as_str()? != "compiler-artifact" {
            return None;
        }
        let name = msg.pointer("/target/name")?.as_str()?;
        if msg.get("fresh").and_then(|f| f.as_bool()) == Some(false) {
            progress(&format!("compiled {name}"));
        }
        let exe = msg.get("executable")?.as_str()?;
        match &self.bin {
            Some(bin) if bin != name => None,
            _ => Some((name.to_string(), PathBuf::from(exe))),
        }
    }
}

/// True when `path` looks like a guest crate directory rather than an ELF file.
pub fn is_crate_dir(path: &Path) -> bool {
    path.is_dir() && path.join("Cargo.toml").is_file()
}
