//! Lampyr's whole cluster side, on top of [`Cluster`]: the grant controller,
//! lampyr-controller, fiber-router (implementing the KIngress class the
//! Knative configuration selects) and, through [`PodRunner`], fiberd in place
//! of every grant Pod, plus a real OCI registry holding the artifacts.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::bins::workspace_binary;
use crate::cluster::{Cluster, PodProgram, PodRunner, Process, SYSTEM_NAMESPACE};
use crate::guests::repo_root;
use crate::registry::TestRegistry;

/// The fiber-router's Service name every per-Revision ExternalName Service names.
pub const ROUTER_SERVICE: &str = "fiber-router.lampyr-system.svc.cluster.local";
/// The grant image lampyr-controller writes into grants (never pulled: no kubelet).
pub const GRANT_IMAGE: &str = "registry.example.com/lampyr/fiberd@sha256:1111111111111111111111111111111111111111111111111111111111111111";
/// The helper image lampyr-controller writes into grants.
pub const HELPER_IMAGE: &str =
    "registry.example.com/lampyr/fiberd-helper@sha256:2222222222222222222222222222222222222222222222222222222222222222";

/// The running stack. See the module documentation.
pub struct LampyrStack {
    /// The Kubernetes and Knative side.
    pub cluster: &'static Cluster,
    /// The registry artifacts are pushed to.
    pub registry: TestRegistry,
    /// Where fiber-router listens.
    pub router: SocketAddr,
    controller: Mutex<Option<Process>>,
    router_process: Mutex<Option<Process>>,
    _grant_controller: Process,
    /// Runs grant Pods as local fiberd processes.
    pub pods: PodRunner,
}

impl LampyrStack {
    /// The stack shared by every test of this test binary, started on first use.
    pub fn shared() -> &'static LampyrStack {
        static SHARED: OnceLock<Result<LampyrStack, String>> = OnceLock::new();
        let started = SHARED.get_or_init(|| {
            std::thread::spawn(|| {
                let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
                runtime.block_on(LampyrStack::start())
            })
            .join()
            .unwrap_or_else(|_| Err("starting the Lampyr stack panicked".into()))
        });
        match started {
            Ok(stack) => stack,
            Err(why) => panic!("the Lampyr stack did not start: {why}"),
        }
    }

    async fn start() -> Result<LampyrStack, String> {
        let cluster = Cluster::shared();
        let root = repo_root();
        cluster.apply_files(&[root.join("config/crd/lampyr.yaml"), root.join("config/fiberd-k8s-controller.yaml")]).await?;
        let client = cluster.client().await;
        let policy = json!({
            "apiVersion": "fiber.lampyr.dev/v1alpha1", "kind": "GrantPolicy",
            "metadata": { "name": "lampyr-testenv" },
            "spec": { "allowedRepositories": [repository(GRANT_IMAGE), repository(HELPER_IMAGE)] },
        });
        let apply = PatchParams::apply("lampyr-testenv").force();
        Api::<kube::core::DynamicObject>::all_with(
            client.clone(),
            &kube::core::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk("fiber.lampyr.dev", "v1alpha1", "GrantPolicy")),
        )
        .patch("lampyr-testenv", &apply, &Patch::Apply(&policy))
        .await
        .map_err(|e| format!("creating the GrantPolicy: {e}"))?;
        // Route every Knative Route through fiber-router's own KIngress class.
        let network = json!({ "data": { "ingress-class": lampyr_api::keys::FIBER_INGRESS_CLASS } });
        Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client, SYSTEM_NAMESPACE)
            .patch("config-network", &PatchParams::default(), &Patch::Merge(&network))
            .await
            .map_err(|e| format!("selecting fiber-router's ingress class: {e}"))?;

        let registry = TestRegistry::start();
        let kubeconfig = cluster.kubeconfig().to_path_buf();
        let grant_controller = spawn(cluster, "fiberd-k8s-controller", grant_controller_command(&kubeconfig))?;
        let router = SocketAddr::from(([127, 0, 0, 1], crate::cluster::free_port()?));
        let stack = LampyrStack {
            cluster,
            router,
            controller: Mutex::new(None),
            router_process: Mutex::new(None),
            _grant_controller: grant_controller,
            pods: PodRunner::start(
                cluster,
                vec![PodProgram::grant_fiberd(
                    workspace_binary("lampyr-fiberd", "fiberd"),
                    vec![
                        format!("--kubeconfig={}", kubeconfig.display()),
                        format!("--plain-http-registry={}", registry.host()),
                        // Scale-to-zero settings come from config-autoscaler, through each Home.
                        "--scale-tick=0.5".into(),
                    ],
                    false,
                )],
            ),
            registry,
        };
        stack.restart_controller()?;
        stack.restart_router()?;
        Ok(stack)
    }

    /// Starts lampyr-controller, killing a running one first (a crash and a restart).
    pub fn restart_controller(&self) -> Result<(), String> {
        let mut slot = self.controller.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(mut old) = slot.take() {
            old.kill();
        }
        let mut command = Command::new(workspace_binary("lampyr-reconcile", "lampyr-controller"));
        command
            .arg(format!("--kubeconfig={}", self.cluster.kubeconfig().display()))
            .arg(format!("--router-service={ROUTER_SERVICE}"))
            .arg(format!("--grant-image={GRANT_IMAGE}"))
            .arg(format!("--helper-image={HELPER_IMAGE}"))
            .arg(format!("--plain-http-registry={}", self.registry.host()))
            .args([
                "--metrics-addr=127.0.0.1:0",
                "--leader-elect=true",
                "--lease-duration=3s",
                "--renew-deadline=2s",
                "--retry-period=500ms",
            ]);
        *slot = Some(spawn(self.cluster, "lampyr-controller", command)?);
        Ok(())
    }

    /// Starts fiber-router on [`LampyrStack::router`], killing a running one first.
    pub fn restart_router(&self) -> Result<(), String> {
        let mut slot = self.router_process.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(mut old) = slot.take() {
            old.kill();
        }
        let mut command = Command::new(workspace_binary("lampyr-router", "fiber-router"));
        command
            .arg(format!("--kubeconfig={}", self.cluster.kubeconfig().display()))
            .arg(format!("--listen={}", self.router))
            .arg("--listen-admin=127.0.0.1:0")
            .arg(format!("--service-dns={ROUTER_SERVICE}"));
        *slot = Some(spawn(self.cluster, "fiber-router", command)?);
        Ok(())
    }

    /// The end of a component's log (`lampyr-controller`, `fiber-router`,
    /// `fiberd-k8s-controller`, or any of [`Cluster::log_tail`]'s).
    pub fn log_tail(&self, component: &str, lines: usize) -> String {
        self.cluster.log_tail(component, lines)
    }

    /// Builds example `name` once and pushes it to the registry at `lampyr/<name>`;
    /// returns its digest-pinned reference.
    pub async fn push_example(&self, name: &str) -> String {
        self.push_once(&format!("lampyr/{name}"), || crate::artifacts::example_artifact(name, 64 * 1024)).await
    }

    /// Builds test guest `name` (`spin`, `panic`, …) once and pushes it to the
    /// registry at `lampyr/testing-<name>`; returns its digest-pinned reference.
    pub async fn push_test_guest(&self, name: &str) -> String {
        self.push_once(&format!("lampyr/testing-{name}"), || crate::artifacts::test_guest_artifact(name, 64 * 1024)).await
    }

    /// Pushes the artifact `build` makes to repository `path` once per stack, one push at a
    /// time: tests running at once push the same blobs, and concurrent uploads of one blob
    /// race in the registry (`DIGEST_INVALID`, `MANIFEST_BLOB_UNKNOWN`).
    async fn push_once(&self, path: &str, build: impl FnOnce() -> crate::artifacts::Artifact) -> String {
        static PUSHED: tokio::sync::Mutex<BTreeMap<String, String>> = tokio::sync::Mutex::const_new(BTreeMap::new());
        let mut pushed = PUSHED.lock().await;
        if let Some(reference) = pushed.get(path) {
            return reference.clone();
        }
        let reference = crate::artifacts::push_artifact(&self.registry, path, &build()).await;
        pushed.insert(path.to_string(), reference.clone());
        reference
    }

    /// Requests executing in fibers of the fiberd of grant Pod `namespace/name`,
    /// from its `/metrics` (0 when it does not answer).
    pub async fn fibers_in_flight(&self, pod: &str) -> u64 {
        let Some(port) = self.pods.ports().get(pod).copied() else { return 0 };
        let Ok(response) = reqwest::get(format!("http://127.0.0.1:{port}/metrics")).await else { return 0 };
        let text = response.text().await.unwrap_or_default();
        let executing: f64 = metric_samples(&text, "lampyr_fiber_in_flight").map(|(_, value)| value).sum();
        executing as u64
    }
}

impl crate::Serving for LampyrStack {
    fn cluster(&self) -> &'static Cluster {
        self.cluster
    }

    fn router_addr(&self) -> Option<SocketAddr> {
        Some(self.router)
    }

    fn lampyr_logs(&self) -> String {
        ["lampyr-controller", "fiber-router", "fiberd-k8s-controller"]
            .iter()
            .map(|c| format!("--- {c}:\n{}", self.log_tail(c, 15)))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

fn spawn(cluster: &Cluster, name: &'static str, command: Command) -> Result<Process, String> {
    Process::spawn(name, command, &cluster.data_dir().join(format!("{name}.log")))
}

fn grant_controller_command(kubeconfig: &std::path::Path) -> Command {
    let mut command = Command::new(workspace_binary("lampyr-reconcile", "fiberd-k8s-controller"));
    command.arg(format!("--kubeconfig={}", kubeconfig.display())).args(["--metrics-addr=127.0.0.1:0", "--leader-elect=false"]);
    command
}

/// An image reference's repository (without its digest).
fn repository(image: &str) -> &str {
    image.split_once('@').map_or(image, |(repo, _)| repo)
}

/// The samples of metric `name` in Prometheus text `text`: each line's label
/// part (`{…}`, or empty) and its value.
pub fn metric_samples<'a>(text: &'a str, name: &'a str) -> impl Iterator<Item = (&'a str, f64)> + 'a {
    text.lines().filter_map(move |line| {
        let rest = line.strip_prefix(name)?;
        let (labels, value) = rest.rsplit_once(' ')?;
        if !(labels.is_empty() || labels.starts_with('{')) {
            return None; // another metric whose name starts with `name`
        }
        Some((labels, value.parse().ok()?))
    })
}

/// Paths of files the stack reads, for callers that need them.
pub fn lampyr_crds() -> PathBuf {
    repo_root().join("config/crd/lampyr.yaml")
}

#[cfg(test)]
mod tests {
    use super::metric_samples;

    #[test]
    fn metric_samples_reads_one_metric_with_and_without_labels() {
        let text = "# HELP x_total X\nx_total{a=\"1\"} 2\nx_total 3\nx_total_more 9\ny 4\n";
        let samples: Vec<(&str, f64)> = metric_samples(text, "x_total").collect();
        assert_eq!(samples, [("{a=\"1\"}", 2.0), ("", 3.0)]);
    }
}
