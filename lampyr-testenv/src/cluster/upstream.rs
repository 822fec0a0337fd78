//! Where the environment's pieces come from: the binaries `scripts/cluster-bins`
//! builds from pinned Go modules, and the pinned Knative modules, whose `config/`
//! manifests `lampyr-manifests` reads and filters (as `ly scaffold workspace` does).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::guests::repo_root;

pub use lampyr_manifests::KnativeModules;

/// Environment variable naming a directory that already holds the binaries.
pub const BINS_ENV: &str = "LAMPYR_CLUSTER_BINS";

/// The binaries and their upstream versions.
pub struct Binaries {
    /// Directory holding every binary of [`BINARIES`].
    pub dir: PathBuf,
    /// `name -> version` from the directory's `VERSIONS` file.
    pub versions: BTreeMap<String, String>,
}

/// What `scripts/cluster-bins` builds.
pub const BINARIES: [&str; 11] = [
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kubectl",
    "knative-webhook",
    "lampyr-knative-controller",
    "kube-scheduler",
    "kubelet",
    "kube-proxy",
    "coredns",
    "pause",
];

impl Binaries {
    /// The binaries named by `$LAMPYR_CLUSTER_BINS`, or else those `scripts/cluster-bins`
    /// reports (it builds what is missing: about 15 minutes the first time, progress on stderr).
    pub fn locate() -> Result<Self, String> {
        let dir = match std::env::var_os(BINS_ENV) {
            Some(dir) => PathBuf::from(dir),
            None => run_cluster_bins()?,
        };
        let versions_file = dir.join("VERSIONS");
        let text = std::fs::read_to_string(&versions_file)
            .map_err(|e| format!("reading {}: {e} (run scripts/cluster-bins to build the cluster binaries)", versions_file.display()))?;
        let versions =
            text.lines().filter_map(|line| line.split_once(' ')).map(|(name, version)| (name.to_string(), version.to_string())).collect();
        let binaries = Binaries { dir, versions };
        for name in BINARIES {
            let path = binaries.path(name);
            if !path.is_file() {
                return Err(format!("{} is missing: run scripts/cluster-bins", path.display()));
            }
        }
        Ok(binaries)
    }

    /// The upstream version of binary `name` (its cache version without the fingerprint).
    pub fn upstream_version(&self, name: &str) -> Option<&str> {
        let version = self.versions.get(name)?;
        Some(version.rsplit_once('-').map_or(version.as_str(), |(upstream, _)| upstream))
    }

    /// The path of binary `name`.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

fn run_cluster_bins() -> Result<PathBuf, String> {
    let script = repo_root().join("scripts/cluster-bins");
    let output = Command::new(&script).stderr(Stdio::inherit()).output().map_err(|e| format!("running {}: {e}", script.display()))?;
    if !output.status.success() {
        return Err(format!("{} failed ({}); its progress is above", script.display(), output.status));
    }
    let dir = String::from_utf8_lossy(&output.stdout).trim().to_string();
    if dir.is_empty() {
        return Err(format!("{} printed no directory", script.display()));
    }
    Ok(PathBuf::from(dir))
}
