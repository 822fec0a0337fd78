//! A real single-node Kubernetes cluster for the node tests, in a network
//! namespace of its own: the control plane of [`Cluster`] placed on the node's
//! address, plus containerd and runc (Debian's packages), the CNI bridge,
//! kube-scheduler, kubelet and kube-proxy (built from the pinned module by
//! `scripts/cluster-bins`), CoreDNS as a Pod, and a real OCI registry on the
//! node's address.
//!
//! The host reaches the node only through the veth link into its namespace
//! (`198.18.0.0/30`-sized links); Pods get addresses from 198.18.128.0/24 and
//! Services from 198.19.0.0/16, and the node has no route anywhere else, so no
//! packet leaves the machine. The node is labelled `lampyr.dev/kvm=true`, and
//! privileged Pods may use the machine's `/dev/kvm`.
//!
//! No image is pulled from outside: the pause and CoreDNS images are built from
//! the pinned binaries and imported into containerd; tests import the images
//! they run ([`Node::import`]). Stopping the node kills every process it started
//! (its cgroup holds containerd, the shims and every container), unmounts what
//! the kubelet and containerd mounted, and deletes the namespace; a node whose
//! test process was killed outright is cleaned up by the next start.

mod cgroups;
pub mod config;
mod images;
mod netns;
mod serving;

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Node as NodeObject;
use kube::Api;

use crate::cluster::upstream::Binaries;
use crate::cluster::{Cluster, Placement, Process, write_kubeconfig};
use crate::containerd::{CNI_BIN_DIR, Containerd, ContainerdOptions, CriOptions, unmount_under};
use crate::registry::TestRegistry;
use cgroups::NodeCgroup;
use netns::NodeNetwork;

pub use images::{SystemImages, binary_image_archive};
pub use serving::{NodeIngress, install_lampyr, install_lampyr_with};

/// The node's name (and kubelet's hostname).
pub const NODE_NAME: &str = "lampyr-node";
/// The label grant Pods select nodes by.
pub const KVM_LABEL: &str = "lampyr.dev/kvm=true";
/// The port of the registry on the node's address.
pub const REGISTRY_PORT: u16 = 5000;
/// Longest the node may take from start to CoreDNS answering, once everything is built.
const START_TIMEOUT: Duration = Duration::from_secs(180);
/// Prefix of every node's id: its namespace, cgroup and data directory are named by it.
const ID_PREFIX: &str = "lampyr-node-";
/// A PATH with the system directories the node's programs exec from (iptables, runc, shims).
const SYSTEM_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// A running node. See the module documentation.
pub struct Node {
    dir: PathBuf,
    network: NodeNetwork,
    cgroup: NodeCgroup,
    cluster: Cluster,
    registry: TestRegistry,
    containerd: Mutex<Option<Containerd>>,
    processes: Mutex<Vec<Process>>,
    images: SystemImages,
    start_time: Duration,
    stopped: AtomicBool,
}

impl Node {
    /// The node shared by every test of this test binary, started on first use.
    ///
    /// Panics with the reason (and the failing component's log) when it cannot start.
    pub fn shared() -> &'static Node {
        static SHARED: OnceLock<Result<Node, String>> = OnceLock::new();
        extern "C" fn teardown() {
            Node::shared().shutdown();
        }
        crate::shared::shared_or_panic(&SHARED, "node test environment", Node::start, teardown)
    }

    /// Starts a new node; everything stops when it is dropped.
    ///
    /// Runs on its own thread, so it may be called from inside an async runtime.
    pub fn start() -> Result<Node, String> {
        crate::cluster::block_on_own_thread("lampyr-node-start", boot)
    }

    /// The control plane (kubeconfig, kubectl, clients, namespaces).
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// The node's address: where its NodePorts, API server and registry answer.
    pub fn address(&self) -> Ipv4Addr {
        self.network.node_address
    }

    /// `http://<node>:<port>`, a NodePort's URL as a client outside the cluster sees it.
    pub fn node_port_url(&self, port: u16) -> String {
        format!("http://{}", SocketAddr::from((self.address(), port)))
    }

    /// The registry on the node's address (plain HTTP), reached alike from the host and from Pods.
    pub fn registry(&self) -> &TestRegistry {
        &self.registry
    }

    /// containerd's API socket (for `ctr --address`).
    pub fn containerd_socket(&self) -> PathBuf {
        self.lock_containerd().as_ref().map(Containerd::address).unwrap_or_default()
    }

    /// The node's data directory (kubelet, configuration, logs).
    pub fn data_dir(&self) -> &Path {
        &self.dir
    }

    fn lock_containerd(&self) -> std::sync::MutexGuard<'_, Option<Containerd>> {
        self.containerd.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The images every node has (pause, CoreDNS), as built for this node.
    pub fn system_images(&self) -> &SystemImages {
        &self.images
    }

    /// How long the start took, from creating the namespace to CoreDNS being available.
    pub fn start_time(&self) -> Duration {
        self.start_time
    }

    /// Imports an OCI image archive into the node's containerd (namespace `k8s.io`, where
    /// the kubelet finds images), unpacked for its snapshotter; returns its name and digest.
    pub fn import(&self, archive: &Path) -> Result<lampyr_images::ImportedImage, String> {
        self.lock_containerd().as_ref().ok_or("the node's containerd is stopped")?.import(archive)
    }

    /// Makes the node's containerd pull images of `registry` (e.g. `ghcr.io`) from the node's
    /// own registry, whose repositories keep the paths (`ghcr.io/a/b` → `<node>:5000/a/b`):
    /// a registry mirror, as a kind or k3d provider sets up. Nothing is fetched from
    /// `registry` itself (it cannot be reached); pulls by tag and by digest both resolve.
    pub fn mirror(&self, registry: &str) -> Result<(), String> {
        let dir = self.dir.join("certs.d").join(registry);
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let hosts = format!(
            "server = \"https://{registry}\"\n\n[host.\"http://{}\"]\n  capabilities = [\"pull\", \"resolve\"]\n",
            self.registry.host()
        );
        write(&dir.join("hosts.toml"), &hosts)
    }

    /// Sends SIGKILL to a container's task (`containerd://ID` as Pod status names it, or the ID).
    pub fn kill_container(&self, container_id: &str) -> Result<(), String> {
        let id = container_id.strip_prefix("containerd://").unwrap_or(container_id);
        let mut ctr = self.lock_containerd().as_ref().ok_or("the node's containerd is stopped")?.ctr();
        let out = ctr.args(["tasks", "kill", "--signal", "SIGKILL", id]).output().map_err(|e| format!("running ctr: {e}"))?;
        if out.status.success() { Ok(()) } else { Err(format!("ctr tasks kill {id}: {}", String::from_utf8_lossy(&out.stderr).trim())) }
    }

    /// The end of a node component's log (`containerd`, `kubelet`, `kube-proxy`,
    /// `kube-scheduler`), or of a control-plane component's.
    pub fn log_tail(&self, component: &str, lines: usize) -> String {
        if component == "containerd" {
            return self.lock_containerd().as_ref().map(|c| c.log_tail(lines)).unwrap_or_default();
        }
        let own = self.dir.join(format!("{component}.log"));
        if own.exists() { crate::cluster::log_tail(&own, lines) } else { self.cluster.log_tail(component, lines) }
    }

    /// `Err` naming the first node or control-plane component that has exited, with its log.
    pub fn check_running(&self) -> Result<(), String> {
        let mut processes = self.processes.lock().unwrap_or_else(|p| p.into_inner());
        processes.iter_mut().try_for_each(Process::check_running)?;
        self.lock_containerd().as_mut().map_or(Ok(()), Containerd::check_running)?;
        self.cluster.check_running()
    }

    /// Stops everything: node components, every container (and its shim), the control
    /// plane, the registry; unmounts, removes the data directory and the namespace. Idempotent.
    pub fn shutdown(&self) {
        if self.stopped.swap(true, Ordering::SeqCst) {
            return;
        }
        let mut processes = self.processes.lock().unwrap_or_else(|p| p.into_inner());
        while let Some(mut process) = processes.pop() {
            process.kill();
        }
        if let Some(mut containerd) = self.lock_containerd().take() {
            containerd.stop();
        }
        let _ = self.cgroup.remove();
        let _ = unmount_under(&self.dir);
        self.cluster.shutdown();
        let _ = std::fs::remove_dir_all(&self.dir);
        netns::delete(self.network.name());
    }

    fn spawn(&self, name: &'static str, command: Command) -> Result<u32, String> {
        let mut command = self.cluster.placement().command(command);
        command.env("PATH", SYSTEM_PATH);
        let process = Process::spawn(name, command, &self.dir.join(format!("{name}.log")))?;
        let pid = process.pid();
        self.processes.lock().unwrap_or_else(|p| p.into_inner()).push(process);
        Ok(pid)
    }

    async fn poll(&self, deadline: Instant, waiting_for: &str) -> Result<(), String> {
        self.check_running()?;
        if Instant::now() > deadline {
            return Err(format!("timed out after {START_TIMEOUT:?} waiting for {waiting_for}"));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
        Ok(())
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Cleans up after nodes whose test process is gone: their containers (the cgroup),
/// mounts, data directories and namespaces.
pub fn remove_stale_nodes() {
    let mut ids = netns::namespaces_named(ID_PREFIX);
    ids.extend(cgroups::cgroups_named(ID_PREFIX));
    ids.sort();
    ids.dedup();
    for id in ids {
        let owner = id.strip_prefix(ID_PREFIX).and_then(|rest| rest.split('-').next()).unwrap_or_default();
        if owner.is_empty() || Path::new("/proc").join(owner).exists() {
            continue;
        }
        let _ = cgroups::remove(&id);
        let dir = std::env::temp_dir().join(&id);
        let _ = unmount_under(&dir);
        let _ = std::fs::remove_dir_all(&dir);
        netns::delete(&id);
    }
}

/// Starts everything in order; on error, what started is stopped as the partial `Node` drops.
async fn boot() -> Result<Node, String> {
    let began = Instant::now();
    let deadline = began + START_TIMEOUT;
    require_node_tools()?;
    let binaries = Binaries::locate()?;
    remove_stale_nodes();
    let id = unique_id();
    let dir = std::env::temp_dir().join(&id);
    std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let network = NodeNetwork::create(&id, config::SERVICE_CIDR)?;
    let cgroup = NodeCgroup::create(&id)?;
    let images = SystemImages::build(&binaries, &dir.join("images"))?;
    let placement = Placement {
        address: network.node_address.into(),
        netns: Some(network.path()),
        service_cidr: config::SERVICE_CIDR.into(),
        api_service_ip: config::API_SERVICE_IP.into(),
        node: true,
    };
    let cluster = Cluster::start_bare(placement)?;
    let registry = TestRegistry::start_in(cluster.placement(), REGISTRY_PORT);
    let mut node = Node {
        dir,
        network,
        cgroup,
        cluster,
        registry,
        containerd: Mutex::new(None),
        processes: Mutex::new(Vec::new()),
        images,
        start_time: Duration::ZERO,
        stopped: AtomicBool::new(false),
    };
    start_containerd(&node)?;
    for archive in node.images.archives() {
        node.import(&archive)?;
    }
    start_node_components(&node, &binaries)?;
    wait_for_node_ready(&node, deadline).await?;
    install_coredns(&node, deadline).await?;
    node.start_time = began.elapsed();
    Ok(node)
}

/// `lampyr-node-<pid>-<n>`: unique on the machine, and naming its owner for stale cleanup.
fn unique_id() -> String {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    format!("{ID_PREFIX}{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Fails, naming the fix, when a program the node runs is missing.
fn require_node_tools() -> Result<(), String> {
    let missing: Vec<&str> = ["containerd", "containerd-shim-runc-v2", "runc", "ctr", "iptables", "ip", "nsenter", "umount"]
        .into_iter()
        .filter(|tool| !SYSTEM_PATH.split(':').any(|dir| Path::new(dir).join(tool).is_file()))
        .collect();
    let cni = Path::new(CNI_BIN_DIR);
    let cni_missing = ["bridge", "host-local", "portmap", "loopback"].iter().any(|p| !cni.join(p).is_file());
    if missing.is_empty() && !cni_missing {
        return Ok(());
    }
    Err(format!(
        "the node needs {missing:?}{} : run scripts/setup (Debian's containerd, runc, containernetworking-plugins, iptables)",
        if cni_missing { " and the CNI plugins in /usr/lib/cni" } else { "" }
    ))
}

/// containerd (in the node's namespace and cgroup, with the node's CNI network), once its API answers.
fn start_containerd(node: &Node) -> Result<(), String> {
    let cni_conf = node.dir.join("cni/net.d");
    let ipam = node.dir.join("cni/ipam");
    for d in [&cni_conf, &ipam] {
        std::fs::create_dir_all(d).map_err(|e| format!("creating {}: {e}", d.display()))?;
    }
    write(&cni_conf.join("10-lampyr-node.conflist"), &config::cni_network(&ipam))?;
    let certs = node.dir.join("certs.d");
    std::fs::create_dir_all(&certs).map_err(|e| format!("creating {}: {e}", certs.display()))?;
    let mut cri = CriOptions::new(node.images.pause.clone(), cni_conf);
    cri.registry_config_path = Some(certs);
    let containerd = Containerd::start(ContainerdOptions { cri: Some(cri), network_namespace: Some(node.network.path()) })?;
    // Its shims, and through them every container, are born in the node's cgroup.
    let pid = containerd.pid().ok_or("containerd is not running")?;
    node.cgroup.adopt("runtime", pid)?;
    *node.lock_containerd() = Some(containerd);
    Ok(())
}

/// kube-scheduler, kubelet and kube-proxy, each with a client certificate of its
/// own (the identities upstream's default RBAC binds), in the node's namespace.
fn start_node_components(node: &Node, bins: &Binaries) -> Result<(), String> {
    let dir = &node.dir;
    let cluster = &node.cluster;
    let address = node.address();
    let server = format!("https://{}", SocketAddr::from((address, 6443)));
    let kubeconfig = |stem: &str, organization: Option<&str>, user: &str| -> Result<PathBuf, String> {
        let (cert, key) = cluster.pki().issue_client(stem, organization, user)?;
        let path = dir.join(format!("{stem}.kubeconfig"));
        let stanza = format!("    client-certificate: {}\n    client-key: {}\n", cert.display(), key.display());
        write_kubeconfig(&path, &server, &cluster.pki().ca_cert, &stanza)?;
        Ok(path)
    };

    let mut scheduler = Command::new(bins.path("kube-scheduler"));
    scheduler.arg(format!("--kubeconfig={}", kubeconfig("kube-scheduler", None, "system:kube-scheduler")?.display())).args([
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        "--secure-port=10259",
    ]);
    node.spawn("kube-scheduler", scheduler)?;

    let kubelet_dir = dir.join("kubelet");
    let pod_logs = dir.join("pod-logs");
    for d in [&kubelet_dir, &pod_logs] {
        std::fs::create_dir_all(d).map_err(|e| format!("creating {}: {e}", d.display()))?;
    }
    let cgroup_root = node.cgroup.path();
    let kubelet_config = dir.join("kubelet.yaml");
    write(
        &kubelet_config,
        &config::kubelet(&config::Kubelet {
            address,
            client_ca: &cluster.pki().ca_cert,
            cgroup_root: &cgroup_root,
            runtime_socket: &node.containerd_socket(),
            pod_logs_dir: &pod_logs,
        }),
    )?;
    let node_user = format!("system:node:{NODE_NAME}");
    let mut kubelet = Command::new(bins.path("kubelet"));
    kubelet
        .arg(format!("--config={}", kubelet_config.display()))
        .arg(format!("--kubeconfig={}", kubeconfig("kubelet", Some("system:nodes"), &node_user)?.display()))
        .arg(format!("--root-dir={}", kubelet_dir.display()))
        .arg(format!("--cert-dir={}", dir.join("kubelet-pki").display()))
        .arg(format!("--hostname-override={NODE_NAME}"))
        .arg(format!("--node-ip={address}"))
        .arg(format!("--node-labels={KVM_LABEL}"))
        .arg("--v=1");
    node.spawn("kubelet", kubelet)?;

    let proxy_config = dir.join("kube-proxy.yaml");
    let proxy_kubeconfig = kubeconfig("kube-proxy", None, "system:kube-proxy")?;
    write(&proxy_config, &config::kube_proxy(&proxy_kubeconfig, NODE_NAME, address))?;
    let mut proxy = Command::new(bins.path("kube-proxy"));
    proxy.arg(format!("--config={}", proxy_config.display()));
    node.spawn("kube-proxy", proxy)?;
    Ok(())
}

/// Waits until the Node object reports `Ready`.
async fn wait_for_node_ready(node: &Node, deadline: Instant) -> Result<(), String> {
    let nodes: Api<NodeObject> = Api::all(node.cluster.client().await);
    loop {
        let ready =
            nodes.get_opt(NODE_NAME).await.ok().flatten().is_some_and(|n| {
                n.status.and_then(|s| s.conditions).into_iter().flatten().any(|c| c.type_ == "Ready" && c.status == "True")
            });
        if ready {
            return Ok(());
        }
        node.poll(deadline, "the kubelet's Node to be Ready")
            .await
            .map_err(|e| format!("{e}; kubelet log:\n{}", node.log_tail("kubelet", 30)))?;
    }
}

/// Applies CoreDNS and waits until its Pod is available.
async fn install_coredns(node: &Node, deadline: Instant) -> Result<(), String> {
    let manifest =
        include_str!("coredns.yaml").replace("COREDNS_IMAGE", &node.images.coredns).replace("DNS_SERVICE_IP", config::DNS_SERVICE_IP);
    let path = node.dir.join("coredns.yaml");
    write(&path, &manifest)?;
    node.cluster.apply_files(&[path]).await?;
    let deployments: Api<Deployment> = Api::namespaced(node.cluster.client().await, "kube-system");
    loop {
        let available =
            deployments.get_opt("coredns").await.ok().flatten().and_then(|d| d.status).and_then(|s| s.available_replicas).unwrap_or(0);
        if available >= 1 {
            return Ok(());
        }
        node.poll(deadline, "CoreDNS to be available").await.map_err(|e| format!("{e}; kubelet log:\n{}", node.log_tail("kubelet", 30)))?;
    }
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("writing {}: {e}", path.display()))
}
