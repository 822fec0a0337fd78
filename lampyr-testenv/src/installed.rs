//! Lampyr as `ly cluster install` leaves it, running: [`Cluster`], a real OCI
//! registry, and the environment's stand-in kubelet ([`PodRunner`]) running the
//! Pods of the installed Deployments (Lampyr's Knative controller,
//! lampyr-controller, fiber-router, fiberd-k8s-controller) and the grant Pods
//! (`fiberd-helper`, then fiberd) as local processes. Each runs with its
//! container's arguments and environment from the installed manifests, as its
//! Pod's service account, with its volumes mounted: the manifests' flags and
//! RBAC are what the components get, and a Pod is Ready only once its
//! manifest's readiness probe answered.
//!
//! Nothing runs until something installs the Deployments. The Knative
//! controller's Pod runs `lampyr-knative-controller` from the cluster binaries
//! (`$LAMPYR_CLUSTER_BINS`) beside the one [`Cluster`] started for every test of
//! the binary; the two share the work through Knative's leader election. Upstream's
//! probes bind the fixed port 8080, which environments sharing this host cannot
//! all have, so it runs with `--health-probes=false` and its Pod is Ready once
//! its Prometheus endpoint (`METRICS_PROMETHEUS_PORT`, moved to the Pod's port)
//! answers `/metrics`, which it serves once it has read its configuration.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use k8s_openapi::api::core::v1::{Container, Pod};
use kube::ResourceExt;

use crate::bins::workspace_binary;
use crate::cluster::upstream::Binaries;
use crate::cluster::{Cluster, PodProgram, PodRunner, PodSandbox, free_port};
use crate::registry::TestRegistry;

/// The running environment. See the module documentation.
pub struct InstalledLampyr {
    /// The Kubernetes and Knative side.
    pub cluster: &'static Cluster,
    /// A registry on a loopback port, for artifacts and templates.
    pub registry: TestRegistry,
    /// The stand-in kubelet.
    pub pods: PodRunner,
}

impl InstalledLampyr {
    /// The environment shared by every test of this test binary, started on first use.
    pub fn shared() -> &'static InstalledLampyr {
        static SHARED: OnceLock<InstalledLampyr> = OnceLock::new();
        SHARED.get_or_init(|| {
            let cluster = Cluster::shared();
            let registry = TestRegistry::start();
            // Scale-to-zero settings come from config-autoscaler, through each Home.
            let tuning = vec!["--scale-tick=0.5".to_string()];
            let programs = vec![
                PodProgram::grant_fiberd(workspace_binary("lampyr-fiberd", "fiberd"), tuning, true),
                component("lampyr-controller", workspace_binary("lampyr-reconcile", "lampyr-controller"), "--metrics-addr"),
                component("fiberd-k8s-controller", workspace_binary("lampyr-reconcile", "fiberd-k8s-controller"), "--metrics-addr"),
                component("fiber-router", workspace_binary("lampyr-router", "fiber-router"), "--listen"),
                knative_controller(),
            ];
            InstalledLampyr { cluster, registry, pods: PodRunner::start(cluster, programs) }
        })
    }
}

/// The Pods labelled `app.kubernetes.io/name=<name>` run as `binary` with their first
/// container's arguments, its `address_flag` moved to the Pod's loopback port, any
/// other `--listen-*` address to a free loopback port (replicas share the host), a
/// `--cache-dir` moved to the Pod's own directory, and its service account's kubeconfig.
fn component(name: &'static str, binary: PathBuf, address_flag: &'static str) -> PodProgram {
    let command = move |pod: &Pod, sandbox: &PodSandbox| {
        let container = first_container(pod)?;
        let mut command = Command::new(&binary);
        let address = format!("{address_flag}=");
        for arg in container.args.iter().flatten().filter(|a| !a.starts_with(&address)) {
            let listen_flag = arg.strip_prefix("--listen-").and_then(|rest| rest.split_once('=')).map(|(flag, _)| flag);
            match (arg.strip_prefix("--cache-dir="), listen_flag) {
                (Some(_), _) => command.arg(format!("--cache-dir={}", sandbox.dir.join("cache").display())),
                (None, Some(flag)) => command.arg(format!("--listen-{flag}=127.0.0.1:{}", free_port()?)),
                (None, None) => command.arg(sandbox.localize(arg)),
            };
        }
        command.arg(format!("{address}127.0.0.1:{}", sandbox.port)).arg(format!("--kubeconfig={}", sandbox.kubeconfig.display()));
        Ok(command)
    };
    PodProgram {
        selector: format!("app.kubernetes.io/name={name}"),
        name,
        as_service_account: true,
        init: Vec::new(),
        command: Box::new(command),
        probe_path: None,
    }
}

/// The Pod of Lampyr's Knative controller runs `lampyr-knative-controller` from the
/// cluster binaries as its service account (`knative-serving/controller`), with its
/// environment; Prometheus on the Pod's port, profiling on a free one, no upstream
/// probes (they bind the fixed :8080): its `/metrics` is the readiness probe.
fn knative_controller() -> PodProgram {
    let binary = Binaries::locate().unwrap_or_else(|e| panic!("the cluster binaries: {e}")).path("lampyr-knative-controller");
    let command = move |pod: &Pod, sandbox: &PodSandbox| {
        let container = first_container(pod)?;
        let mut command = Command::new(&binary);
        command
            .args(container.args.iter().flatten().map(|a| sandbox.localize(a)))
            .arg(format!("--kubeconfig={}", sandbox.kubeconfig.display()))
            .arg("--health-probes=false")
            .env("METRICS_PROMETHEUS_HOST", "127.0.0.1")
            .env("METRICS_PROMETHEUS_PORT", sandbox.port.to_string())
            .env("PROFILING_PORT", free_port()?.to_string());
        Ok(command)
    };
    PodProgram {
        selector: "app.kubernetes.io/name=lampyr-knative-controller".into(),
        name: "lampyr-knative-controller",
        as_service_account: true,
        init: Vec::new(),
        command: Box::new(command),
        probe_path: Some("/metrics".into()),
    }
}

impl crate::Serving for InstalledLampyr {
    fn cluster(&self) -> &'static Cluster {
        self.cluster
    }

    /// A running fiber-router Pod's port.
    fn router_addr(&self) -> Option<SocketAddr> {
        let ports = self.pods.ports();
        let router = ports.iter().find(|(pod, _)| pod.starts_with("lampyr-system/fiber-router-"));
        router.map(|(_, port)| SocketAddr::from(([127, 0, 0, 1], *port)))
    }

    fn lampyr_logs(&self) -> String {
        let dir = self.cluster.data_dir();
        let mut logs: Vec<PathBuf> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "log"))
            .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.contains("lampyr-system")))
            .collect();
        logs.sort();
        logs.iter().map(|p| format!("--- {}:\n{}", p.display(), crate::cluster::log_tail(p, 15))).collect::<Vec<_>>().join("\n")
    }
}

/// A Pod's first container (the component's), or why there is none.
fn first_container(pod: &Pod) -> Result<&Container, String> {
    pod.spec.as_ref().and_then(|s| s.containers.first()).ok_or_else(|| format!("Pod {} has no container", pod.name_any()))
}
