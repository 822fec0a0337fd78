//! Running the `ly` binary against a test environment's cluster: a scaffolded
//! Workspace, `--provider-config` files, kubectl with the same kubeconfig.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::Cluster;
use crate::knative_services::{PATIENCE, Serving};

/// A digest for images that are never pulled (no kubelet runs them).
pub const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// The `platform.yaml` key choosing fiber-router's own ingress class instead of the default
/// Gateway API layer: for the API-server tier, whose stand-in kubelet runs no Contour or Envoy,
/// and for tests of fiber-router's own public edge.
pub const FIBER_ROUTER_INGRESS: (&str, &str) = ("ingress", "{class: fiber.ingress.networking.knative.dev}");

/// `ly` pointed at one cluster, with a Workspace and a directory of settings files.
pub struct Ly<'a> {
    /// The `ly` binary.
    pub binary: PathBuf,
    /// The cluster.
    pub cluster: &'a Cluster,
    /// Its kubeconfig's current context.
    pub context: String,
    /// A scaffolded Workspace.
    pub workspace: tempfile::TempDir,
    /// Where settings files (and fiberd-k8s-controller's manifest) are written.
    pub config_dir: tempfile::TempDir,
}

impl<'a> Ly<'a> {
    /// `binary` (a built `ly`) against `cluster`: scaffolds a Workspace and copies the
    /// repository's fiberd-k8s-controller manifest beside the settings.
    pub fn new(binary: impl Into<PathBuf>, cluster: &'a Cluster) -> Self {
        let binary = binary.into();
        let workspace = tempfile::tempdir().expect("tempdir");
        let out = Command::new(&binary).args(["scaffold", "workspace"]).arg(workspace.path()).output().expect("ly");
        assert!(out.status.success(), "{}", stderr(&out));
        let config_dir = tempfile::tempdir().expect("tempdir");
        let controller = crate::repo_root().join("config/fiberd-k8s-controller.yaml");
        std::fs::copy(controller, config_dir.path().join("fiberd-k8s-controller.yaml")).expect("copy");
        let context = text(&cluster.kubectl().args(["config", "current-context"]).output().expect("kubectl"));
        Ly { binary, cluster, context: context.trim().to_string(), workspace, config_dir }
    }

    /// Writes a `--provider-config` file: valid settings, each key of `overrides` replacing
    /// (or adding) a top-level key with its YAML value; returns its path.
    pub fn settings(&self, name: &str, overrides: &[(&str, &str)]) -> PathBuf {
        let mut keys: BTreeMap<&str, String> = BTreeMap::from([
            ("controllerManifest", "fiberd-k8s-controller.yaml".to_string()),
            ("grantImage", format!("registry.example.com/lampyr/fiberd@{DIGEST}")),
            ("helperImage", format!("registry.example.com/lampyr/fiberd-helper@{DIGEST}")),
            ("zygoteRegistries", "[registry.example.com/lampyr/fiberd-templates]".to_string()),
            ("domain", "apps.example.org".to_string()),
        ]);
        for (key, value) in overrides {
            keys.insert(key, value.to_string());
        }
        let yaml: String = keys.iter().map(|(k, v)| format!("{k}: {v}\n")).collect();
        let path = self.config_dir.path().join(name);
        std::fs::write(&path, yaml).expect("write settings");
        path
    }

    /// Runs `ly cluster ARGS --kubeconfig … --context … --workspace …`, stdin not a terminal.
    pub fn cluster(&self, args: &[&str]) -> Output {
        let mut command = self.command(&["cluster"]);
        command.args(args).arg("--workspace").arg(self.workspace.path());
        self.target(&mut command);
        command.output().expect("ly runs")
    }

    /// Runs `ly deploy ARGS --kubeconfig … --context …`, stdin not a terminal.
    pub fn deploy(&self, args: &[&str]) -> Output {
        let mut command = self.command(&["deploy"]);
        command.args(args);
        self.target(&mut command);
        command.output().expect("ly runs")
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(&self.binary);
        command.args(args).env("LY_KUBECTL", self.cluster.kubectl().get_program()).stdin(Stdio::null());
        command
    }

    fn target(&self, command: &mut Command) {
        command.arg("--kubeconfig").arg(self.cluster.kubeconfig()).args(["--context", &self.context]);
    }

    /// Runs kubectl against the cluster.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        self.cluster.kubectl().args(args).output().expect("kubectl")
    }

    /// Whether `resource` (`kind/name`) exists.
    pub fn exists(&self, resource: &str, namespace: Option<&str>) -> bool {
        let mut args = vec!["get", resource, "--ignore-not-found", "-o", "name"];
        if let Some(ns) = namespace {
            args.extend(["-n", ns]);
        }
        !text(&self.kubectl(&args)).trim().is_empty()
    }
}

/// The checks `ly cluster health` runs, in its table.
pub const HEALTH_CHECKS: usize = 11;

impl Ly<'_> {
    /// Runs `ly cluster health` every 500 ms until every check but cert-manager's passes
    /// (cert-manager and its csi-driver cannot be installed offline: install only detects
    /// them), then checks all [`HEALTH_CHECKS`] ran and cert-manager's honestly failed; returns
    /// the table. Panics after [`PATIENCE`] with the last table and `serving`'s logs.
    pub async fn healthy_but_cert_manager(&self, serving: &impl Serving) -> BTreeMap<String, bool> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let health = self.cluster(&["health"]);
            let table = health_table(&health);
            if !table.is_empty() && table.iter().all(|(check, passed)| *passed || check == "cert-manager") {
                assert_eq!(table.len(), HEALTH_CHECKS, "every check ran:\n{}", text(&health));
                assert_eq!(table.get("cert-manager"), Some(&false), "cert-manager is honestly absent:\n{}", text(&health));
                return table;
            }
            assert!(
                Instant::now() < deadline,
                "ly cluster health passing all but cert-manager within {PATIENCE:?}:\n{}{}\n{}",
                text(&health),
                stderr(&health),
                serving.lampyr_logs()
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// A command's stdout.
pub fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A command's stderr.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `ly cluster health`'s table: component → passed.
pub fn health_table(out: &Output) -> BTreeMap<String, bool> {
    text(out)
        .lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let mark = words.next()?;
            Some((words.next()?.to_string(), mark == "PASS"))
        })
        .collect()
}

/// A path as a command-line argument.
pub fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

#[cfg(test)]
mod tests {
    #[test]
    fn fiber_router_ingress_names_fiber_routers_class() {
        assert_eq!(super::FIBER_ROUTER_INGRESS.1, format!("{{class: {}}}", lampyr_api::keys::FIBER_INGRESS_CLASS));
    }
}
