//! A real Kubernetes control plane with upstream Knative Serving composed as
//! Lampyr composes it, on loopback ports with a temporary data directory.
//!
//! [`Cluster::shared`] starts, once per test process:
//! - `etcd` and `kube-apiserver` (RBAC, client certificates, service-account tokens);
//! - `kube-controller-manager` with the garbage collector (owner references),
//!   the namespace controller, ClusterRole aggregation, and the Deployment and
//!   ReplicaSet controllers (their Pods run only where a [`PodRunner`] runs them);
//! - upstream Knative Serving's CRDs, namespace, RBAC, configuration and webhook
//!   registrations from the pinned modules' `config/`, filtered by
//!   `lampyr-manifests` exactly as `ly scaffold workspace` writes them (no stock
//!   controller, activator or autoscaler), workload objects left out;
//! - the upstream webhook, registered with the API server (it mints its own
//!   certificate and fills in the `caBundle`) and reached through an
//!   ExternalName Service naming `localhost`;
//! - Lampyr's Knative controller (`knative/cmd/controller`).
//!
//! The webhook and the controller run as the `knative-serving/controller`
//! service account, so upstream's RBAC is what they are allowed.
//! Every process is killed when the environment is dropped or the test process
//! exits, however it exits (see [`process::Process`]); the data directory is removed.

mod install;
pub mod pki;
mod pod_runner;
mod process;
pub use pod_runner::{InitProgram, PodProgram, PodRunner, PodSandbox, container, init_container};
pub use process::{Process, log_tail};
pub mod upstream;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::Client;
use kube::api::{Api, DynamicObject, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::{ApiResource, GroupVersionKind, ObjectMeta};

pub use install::SYSTEM_NAMESPACE;
use upstream::{Binaries, KnativeModules};

/// Longest the whole start may take once the binaries are built.
const START_TIMEOUT: Duration = Duration::from_secs(90);
/// Lampyr's Knative controller's component name (its leases start with it).
const CONTROLLER_COMPONENT: &str = "lampyr-knative-controller";
/// Reconcilers the composed controller runs; each holds a lease when started.
const RECONCILERS: [&str; 7] = ["configuration", "labeler", "route", "service", "gc", "nscert", "domainmapping"];

/// Where the control plane runs and what it serves.
#[derive(Clone, Debug)]
pub struct Placement {
    /// The address the API server binds and advertises.
    pub address: IpAddr,
    /// The network namespace every component runs in (`/run/netns/NAME`); `None`: the test's own.
    pub netns: Option<PathBuf>,
    /// `--service-cluster-ip-range`.
    pub service_cidr: String,
    /// The first address of the Service range: the `kubernetes` Service's ClusterIP.
    pub api_service_ip: IpAddr,
    /// Whether a real node joins: the API server authorizes kubelets (`Node,RBAC`,
    /// NodeRestriction), publishes its own endpoints, and kube-controller-manager runs the
    /// controllers Pods need (service accounts, `kube-root-ca.crt`, EndpointSlices).
    pub node: bool,
}

impl Placement {
    /// On loopback in the test's own network namespace, with no node (the Knative environment).
    pub fn loopback() -> Self {
        Placement {
            address: IpAddr::from([127, 0, 0, 1]),
            netns: None,
            service_cidr: "198.19.255.0/24".into(),
            api_service_ip: IpAddr::from([198, 19, 255, 1]),
            node: false,
        }
    }

    /// `command` run inside the placement's network namespace (with `nsenter`, which
    /// enters only the network namespace: mounts stay shared with the test), or as is.
    pub fn command(&self, command: Command) -> Command {
        let Some(netns) = &self.netns else { return command };
        let mut wrapped = Command::new("nsenter");
        wrapped.arg(format!("--net={}", netns.display())).arg("--").arg(command.get_program()).args(command.get_args());
        for (key, value) in command.get_envs() {
            match value {
                Some(value) => wrapped.env(key, value),
                None => wrapped.env_remove(key),
            };
        }
        if let Some(dir) = command.get_current_dir() {
            wrapped.current_dir(dir);
        }
        wrapped
    }

    /// A port for a component: `default` inside a namespace of the environment's own (every
    /// port is free there), else a loopback port that was free a moment ago.
    fn port(&self, default: u16) -> Result<u16, String> {
        if self.netns.is_some() { Ok(default) } else { free_port() }
    }
}

/// A running environment. See the module documentation.
pub struct Cluster {
    dir: PathBuf,
    placement: Placement,
    pki: pki::Pki,
    kubeconfig: PathBuf,
    kubectl: PathBuf,
    processes: Mutex<Vec<Process>>,
    versions: BTreeMap<String, String>,
    start_time: Duration,
    namespaces: AtomicU32,
    stopped: AtomicBool,
}

impl Cluster {
    /// The environment shared by every test of this test binary, started on first use.
    ///
    /// Panics with the reason (and the failing component's log) when it cannot start.
    pub fn shared() -> &'static Cluster {
        static SHARED: OnceLock<Result<Cluster, String>> = OnceLock::new();
        extern "C" fn teardown() {
            Cluster::shared().shutdown();
        }
        crate::shared::shared_or_panic(&SHARED, "cluster test environment", Cluster::start, teardown)
    }

    /// Starts a new environment; everything stops when it is dropped.
    ///
    /// Runs on its own thread, so it may be called from inside an async runtime.
    pub fn start() -> Result<Cluster, String> {
        start_on_own_thread(Placement::loopback(), true)
    }

    /// Starts a bare control plane (etcd, kube-apiserver, kube-controller-manager; no
    /// Knative) placed as `placement` says; everything stops when it is dropped.
    pub fn start_bare(placement: Placement) -> Result<Cluster, String> {
        start_on_own_thread(placement, false)
    }

    /// Where the control plane runs.
    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    /// The environment's certificates (CA, API server, admin) and the CA to issue more.
    pub fn pki(&self) -> &pki::Pki {
        &self.pki
    }

    /// A client acting as the cluster admin (`system:masters`), bound to the caller's runtime.
    pub async fn client(&self) -> Client {
        client_for(&self.kubeconfig).await.unwrap_or_else(|e| panic!("{e}"))
    }

    /// The admin kubeconfig file (`kubectl --kubeconfig` works with it).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// `kubectl` (built at the API server's version) pointed at this environment.
    pub fn kubectl(&self) -> Command {
        let mut command = Command::new(&self.kubectl);
        command.env("KUBECONFIG", &self.kubeconfig).arg("--kubeconfig").arg(&self.kubeconfig);
        command
    }

    /// Creates a fresh namespace `<prefix>-<n>` for one test and returns its name.
    pub async fn namespace(&self, prefix: &str) -> String {
        let name = format!("{prefix}-{}", self.namespaces.fetch_add(1, Ordering::Relaxed));
        let namespace = Namespace { metadata: ObjectMeta { name: Some(name.clone()), ..Default::default() }, ..Default::default() };
        Api::<Namespace>::all(self.client().await)
            .create(&PostParams::default(), &namespace)
            .await
            .unwrap_or_else(|e| panic!("creating namespace {name}: {e}"));
        name
    }

    /// Server-side applies every document of the YAML `files` (as `kubectl apply
    /// --server-side` would) and waits until the CRDs among them are established.
    pub async fn apply_files(&self, files: &[PathBuf]) -> Result<(), String> {
        let client = self.client().await;
        let documents = install::read_documents(files)?;
        install::apply(&client, &documents).await?;
        let crds: Vec<install::Document> =
            documents.into_iter().filter(|d| d.object.get("kind").and_then(|k| k.as_str()) == Some("CustomResourceDefinition")).collect();
        install::wait_established(&client, &crds, Duration::from_secs(30)).await
    }

    /// A kubeconfig acting as service account `namespace/name` (a day-long token
    /// from the TokenRequest API), to run a component under its manifest's RBAC.
    pub async fn service_account_kubeconfig(&self, namespace: &str, name: &str) -> Result<PathBuf, String> {
        let token = service_account_token(&self.client().await, namespace, name).await?;
        let path = self.dir.join(format!("{namespace}-{name}.kubeconfig"));
        write_kubeconfig(&path, &self.server_url()?, &self.pki.ca_cert, &format!("    token: {token}\n"))?;
        Ok(path)
    }

    /// The API server's URL, from the admin kubeconfig.
    fn server_url(&self) -> Result<String, String> {
        let admin = Kubeconfig::read_from(&self.kubeconfig).map_err(|e| e.to_string())?;
        admin
            .clusters
            .first()
            .and_then(|c| c.cluster.as_ref())
            .and_then(|c| c.server.clone())
            .ok_or_else(|| "the admin kubeconfig names no server".to_string())
    }

    /// Process ids of the running components, oldest first.
    pub fn pids(&self) -> Vec<u32> {
        self.processes.lock().unwrap_or_else(|p| p.into_inner()).iter().map(Process::pid).collect()
    }

    /// The environment's data directory (certificates, etcd data, logs, kubeconfigs).
    pub fn data_dir(&self) -> &Path {
        &self.dir
    }

    /// `name -> version` of every upstream component running.
    pub fn versions(&self) -> &BTreeMap<String, String> {
        &self.versions
    }

    /// How long the start took, from the first process to the controller's leases.
    pub fn start_time(&self) -> Duration {
        self.start_time
    }

    /// The end of a component's log (`etcd`, `kube-apiserver`, `kube-controller-manager`,
    /// `knative-webhook`, `lampyr-knative-controller`), for failure messages.
    pub fn log_tail(&self, component: &str, lines: usize) -> String {
        process::log_tail(&self.dir.join(format!("{component}.log")), lines)
    }

    /// `Err` naming the first component that has exited, with its log.
    pub fn check_running(&self) -> Result<(), String> {
        let mut processes = self.processes.lock().unwrap_or_else(|p| p.into_inner());
        processes.iter_mut().try_for_each(Process::check_running)
    }

    /// Kills every component, newest first, and removes the data directory. Idempotent.
    pub fn shutdown(&self) {
        if self.stopped.swap(true, Ordering::SeqCst) {
            return;
        }
        let mut processes = self.processes.lock().unwrap_or_else(|p| p.into_inner());
        while let Some(mut process) = processes.pop() {
            process.kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Boots an environment from a thread of its own (callers may be inside an async runtime).
fn start_on_own_thread(placement: Placement, knative: bool) -> Result<Cluster, String> {
    block_on_own_thread("lampyr-testenv-start", move || boot(placement, knative))
}

/// Runs the future `start` makes to completion on a new thread with a runtime of its own, so
/// an environment can be started from inside another runtime; its result, or why it has none.
pub(crate) fn block_on_own_thread<T, F>(name: &str, start: impl FnOnce() -> F + Send + 'static) -> Result<T, String>
where
    T: Send + 'static,
    F: std::future::Future<Output = Result<T, String>>,
{
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let runtime =
                tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| format!("building a runtime: {e}"))?;
            runtime.block_on(start())
        })
        .map_err(|e| format!("starting the {name} thread: {e}"))?
        .join()
        .map_err(|_| format!("the {name} thread panicked"))?
}

/// Builds an admin-or-service-account client from a kubeconfig file.
pub(crate) async fn client_for(kubeconfig: &Path) -> Result<Client, String> {
    let file = Kubeconfig::read_from(kubeconfig).map_err(|e| format!("reading {}: {e}", kubeconfig.display()))?;
    let config = kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
        .await
        .map_err(|e| format!("loading {}: {e}", kubeconfig.display()))?;
    Client::try_from(config).map_err(|e| format!("building a client: {e}"))
}

/// Prefix of every environment's data directory under the system temp directory.
const DATA_DIR_PREFIX: &str = "lampyr-cluster-";
/// File in a data directory holding the pid of the test process that owns it.
const OWNER_FILE: &str = "owner.pid";

/// Removes the data directories of environments whose test process is gone
/// (killed before it could clean up; its components died with it).
pub fn remove_stale_data_dirs() {
    for path in stale_data_dirs(DATA_DIR_PREFIX) {
        let _ = std::fs::remove_dir_all(&path);
    }
}

/// Data directories `<temp dir>/<prefix>…` (made by [`owned_data_dir`]) whose
/// owning test process is gone.
pub(crate) fn stale_data_dirs(prefix: &str) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else { return Vec::new() };
    let mut stale = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let ours = path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(prefix));
        let owner = std::fs::read_to_string(path.join(OWNER_FILE)).ok();
        let alive = owner.is_some_and(|pid| Path::new("/proc").join(pid.trim()).exists());
        if ours && !alive && path.join(OWNER_FILE).exists() {
            stale.push(path);
        }
    }
    stale
}

/// A new data directory `<temp dir>/<prefix>…` recording this process as its
/// owner, so a later run can tell it is stale once this process is gone.
pub(crate) fn owned_data_dir(prefix: &str) -> Result<PathBuf, String> {
    let dir = tempfile::Builder::new().prefix(prefix).tempdir().map_err(|e| format!("creating the data directory: {e}"))?.keep();
    std::fs::write(dir.join(OWNER_FILE), std::process::id().to_string())
        .map_err(|e| format!("writing {}: {e}", dir.join(OWNER_FILE).display()))?;
    Ok(dir)
}

/// A loopback port that is free now and that the kernel hands to no one else: it lies below
/// the kernel's ephemeral range (`net.ipv4.ip_local_port_range`), which every `bind(:0)` and
/// outgoing connection draws from, so a component restarting on its port finds it still free
/// (drawn from that range, a restarting router's port once went to another component's admin
/// server in between). Never given twice by this process, nor while this process lives to
/// another test process: each port given is claimed by an exclusive `flock` on
/// `<temp dir>/lampyr-test-ports/<port>`, held until the process exits (a port checked free by
/// two processes at once went to both, and the second component's bind failed). The scan
/// starts at a random port, and a port someone holds or claims is skipped.
pub fn free_port() -> Result<u16, String> {
    static GIVEN: std::sync::Mutex<Vec<(u16, std::fs::File)>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|p| p.into_inner());
    let claims = std::env::temp_dir().join("lampyr-test-ports");
    std::fs::create_dir_all(&claims).map_err(|e| format!("creating {}: {e}", claims.display()))?;
    let below = ephemeral_range_start();
    let span = below.checked_sub(FIRST_TEST_PORT).filter(|span| *span >= 1024).ok_or_else(|| {
        format!("the kernel's ephemeral ports start at {below}, leaving too few below for tests (want {FIRST_TEST_PORT} and up free)")
    })?;
    let start = random_u64() % u64::from(span);
    for offset in 0..u64::from(span) {
        let port = FIRST_TEST_PORT + ((start + offset) % u64::from(span)) as u16;
        if given.iter().any(|(p, _)| *p == port) || TcpListener::bind(("127.0.0.1", port)).is_err() {
            continue;
        }
        if let Some(claim) = claim_port(&claims, port) {
            given.push((port, claim));
            return Ok(port);
        }
    }
    Err(format!("no free loopback port between {FIRST_TEST_PORT} and {below}"))
}

/// `port`'s claim file under `claims`, locked for this process; `None` when another process
/// holds it (or it cannot be opened).
fn claim_port(claims: &Path, port: u16) -> Option<std::fs::File> {
    let file = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(claims.join(port.to_string())).ok()?;
    file.try_lock().ok()?;
    Some(file)
}

/// The lowest port [`free_port`] gives out.
const FIRST_TEST_PORT: u16 = 10_000;

/// The first port of the kernel's ephemeral range (Linux's default when it cannot be read).
fn ephemeral_range_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// A random number, from the standard library's per-process hash seed.
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new().build_hasher().finish()
}

/// Set (to anything; the cluster bench takes a directory for its profile), the API server
/// serves `/debug/pprof` to the admin.
pub const APISERVER_PROFILING: &str = "LAMPYR_APISERVER_PROFILING";

/// A kubeconfig for `server` with the given `user:` stanza.
pub(crate) fn write_kubeconfig(path: &Path, server: &str, ca: &Path, user: &str) -> Result<(), String> {
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: lampyr-testenv\n  cluster:\n    server: {server}\n    certificate-authority: {ca}\ncontexts:\n- name: lampyr-testenv\n  context:\n    cluster: lampyr-testenv\n    user: user\ncurrent-context: lampyr-testenv\nusers:\n- name: user\n  user:\n{user}",
        ca = ca.display(),
    );
    std::fs::write(path, text).map_err(|e| format!("writing {}: {e}", path.display()))
}

/// Starts everything in order (Knative only when `knative`); on error, what started is
/// killed as the partial `Cluster` drops.
async fn boot(placement: Placement, knative: bool) -> Result<Cluster, String> {
    let began = Instant::now();
    let binaries = Binaries::locate()?;
    remove_stale_data_dirs();
    let dir = owned_data_dir(DATA_DIR_PREFIX)?;
    let pki = pki::write(&dir.join("pki"), &api_server_names(&placement))?;
    let mut cluster = Cluster {
        placement,
        pki,
        kubeconfig: dir.join("kubeconfig"),
        kubectl: binaries.path("kubectl"),
        dir,
        processes: Mutex::new(Vec::new()),
        versions: binaries.versions.clone(),
        start_time: Duration::ZERO,
        namespaces: AtomicU32::new(0),
        stopped: AtomicBool::new(false),
    };
    let deadline = Instant::now() + START_TIMEOUT;
    let admin = start_control_plane(&cluster, &binaries, deadline).await?;
    if knative {
        let modules = KnativeModules::locate(&crate::guests::repo_root().join("knative")).map_err(|e| e.to_string())?;
        let webhook_port = install_knative(&cluster, &admin, &modules).await?;
        start_knative(&cluster, &binaries, webhook_port).await?;
        wait_for_webhook(&cluster, &admin, deadline).await?;
        wait_for_controller(&cluster, &admin, deadline).await?;
    }
    cluster.start_time = began.elapsed();
    Ok(cluster)
}

impl Cluster {
    /// Starts `command` as component `name` (in the placement's network namespace), logging
    /// to `<data dir>/<name>.log`; it is killed with the environment.
    pub fn spawn(&self, name: &'static str, command: Command) -> Result<(), String> {
        let process = Process::spawn(name, self.placement.command(command), &self.dir.join(format!("{name}.log")))?;
        self.processes.lock().unwrap_or_else(|p| p.into_inner()).push(process);
        Ok(())
    }

    /// Sleeps a poll interval, failing when a component died or time ran out.
    pub(crate) async fn poll(&self, deadline: Instant, waiting_for: &str) -> Result<(), String> {
        self.check_running()?;
        if Instant::now() > deadline {
            return Err(format!("timed out after {START_TIMEOUT:?} waiting for {waiting_for}"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        Ok(())
    }
}

/// etcd, kube-apiserver (until `/readyz`), kube-controller-manager; returns an admin client.
async fn start_control_plane(cluster: &Cluster, bins: &Binaries, deadline: Instant) -> Result<Client, String> {
    let dir = &cluster.dir;
    let placement = &cluster.placement;
    let address = placement.address;
    let pki = &cluster.pki;
    let (etcd_port, peer_port, api_port) = (placement.port(2379)?, placement.port(2380)?, placement.port(6443)?);
    let etcd_url = format!("http://127.0.0.1:{etcd_port}");
    let peer_url = format!("http://127.0.0.1:{peer_port}");
    let mut etcd = Command::new(bins.path("etcd"));
    etcd.arg("--name=lampyr-testenv")
        .arg(format!("--data-dir={}", dir.join("etcd").display()))
        .arg(format!("--listen-client-urls={etcd_url}"))
        .arg(format!("--advertise-client-urls={etcd_url}"))
        .arg(format!("--listen-peer-urls={peer_url}"))
        .arg(format!("--initial-advertise-peer-urls={peer_url}"))
        .arg(format!("--initial-cluster=lampyr-testenv={peer_url}"))
        .args(["--unsafe-no-fsync", "--log-level=warn"]);
    cluster.spawn("etcd", etcd)?;

    let mut apiserver = Command::new(bins.path("kube-apiserver"));
    apiserver
        .arg(format!("--etcd-servers={etcd_url}"))
        .arg(format!("--bind-address={address}"))
        .arg(format!("--advertise-address={address}"))
        .arg(format!("--secure-port={api_port}"))
        .arg(format!("--tls-cert-file={}", pki.server_cert.display()))
        .arg(format!("--tls-private-key-file={}", pki.server_key.display()))
        .arg(format!("--client-ca-file={}", pki.ca_cert.display()))
        .arg(format!("--service-cluster-ip-range={}", placement.service_cidr))
        .arg("--service-account-issuer=https://kubernetes.default.svc")
        .arg(format!("--service-account-key-file={}", pki.sa_pub.display()))
        .arg(format!("--service-account-signing-key-file={}", pki.sa_key.display()))
        .arg(format!("--cert-dir={}", dir.join("apiserver-certs").display()))
        // As kubeadm and kind configure it: grant Pods may need a privileged container for /dev/kvm.
        .arg("--allow-privileged=true")
        // Off, as CIS hardening asks; the cluster bench turns it on to profile a burst.
        .arg(format!("--profiling={}", std::env::var_os(APISERVER_PROFILING).is_some()));
    if placement.node {
        // As kubeadm: kubelets are authorized as nodes, and reached (logs, exec) with the admin's certificate.
        apiserver
            .args(["--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction"])
            .arg(format!("--kubelet-client-certificate={}", pki.admin_cert.display()))
            .arg(format!("--kubelet-client-key={}", pki.admin_key.display()))
            .arg("--kubelet-preferred-address-types=InternalIP");
    } else {
        // The default endpoint reconciler refuses a loopback advertise address.
        apiserver.args(["--authorization-mode=RBAC", "--endpoint-reconciler-type=none"]);
    }
    cluster.spawn("kube-apiserver", apiserver)?;

    let admin_user = format!("    client-certificate: {}\n    client-key: {}\n", pki.admin_cert.display(), pki.admin_key.display());
    write_kubeconfig(&cluster.kubeconfig, &format!("https://{}", SocketAddr::new(address, api_port)), &pki.ca_cert, &admin_user)?;
    let admin = client_for(&cluster.kubeconfig).await?;
    loop {
        let request = http::Request::get("/readyz").body(Vec::new()).map_err(|e| e.to_string())?;
        if admin.request_text(request).await.is_ok_and(|body| body.trim() == "ok") {
            break;
        }
        cluster.poll(deadline, "kube-apiserver's /readyz").await?;
    }

    let mut controllers = vec![
        "garbage-collector-controller",
        "namespace-controller",
        "clusterrole-aggregation-controller",
        "deployment-controller",
        "replicaset-controller",
    ];
    let mut manager = Command::new(bins.path("kube-controller-manager"));
    manager.arg(format!("--kubeconfig={}", cluster.kubeconfig.display())).args([
        "--bind-address=127.0.0.1",
        "--secure-port=0",
        "--leader-elect=false",
    ]);
    if placement.node {
        // What Pods on a node need: a `default` service account in every namespace, the
        // `kube-root-ca.crt` ConfigMap their token volumes project, the Endpoint(Slice)s
        // kube-proxy and the API server route Services with, and the node lifecycle
        // controller, which lifts a new node's `not-ready` taint once it reports Ready.
        controllers.extend([
            "node-lifecycle-controller",
            "serviceaccount-controller",
            "root-ca-certificate-publisher-controller",
            "endpoints-controller",
            "endpointslice-controller",
        ]);
        manager.arg(format!("--root-ca-file={}", pki.ca_cert.display()));
    }
    manager.arg(format!("--controllers={}", controllers.join(",")));
    cluster.spawn("kube-controller-manager", manager)?;
    Ok(admin)
}

/// The names the API server's certificate carries beyond loopback: its address, and for
/// Pods, its Service's ClusterIP and DNS names.
fn api_server_names(placement: &Placement) -> Vec<String> {
    let mut names = vec![placement.address.to_string(), placement.api_service_ip.to_string()];
    names.extend(["kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"].map(String::from));
    names
}

/// Applies the CRDs, then the system manifests with the webhook routed to a
/// fresh loopback port, which it returns.
async fn install_knative(cluster: &Cluster, admin: &Client, modules: &KnativeModules) -> Result<u16, String> {
    let crds = install::knative_crds(modules)?;
    install::apply(admin, &crds).await?;
    install::wait_established(admin, &crds, Duration::from_secs(30)).await?;
    let mut system = install::knative_system(modules)?;
    let webhook_port = free_port()?;
    install::route_webhooks_to(&mut system, webhook_port);
    system.push(install::webhook_service(webhook_port));
    install::apply(admin, &system).await?;
    cluster.check_running()?;
    Ok(webhook_port)
}

/// Starts the webhook and the controller as the `controller` service account.
async fn start_knative(cluster: &Cluster, bins: &Binaries, webhook_port: u16) -> Result<(), String> {
    let kubeconfig = cluster.service_account_kubeconfig(SYSTEM_NAMESPACE, "controller").await?;
    let knative = |binary: &str, pod: &str| -> Result<Command, String> {
        let mut command = Command::new(bins.path(binary));
        command
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .env("SYSTEM_NAMESPACE", SYSTEM_NAMESPACE)
            .env("POD_NAME", pod)
            .env("CONFIG_LOGGING_NAME", "config-logging")
            .env("CONFIG_OBSERVABILITY_NAME", "config-observability")
            .env("METRICS_DOMAIN", "knative.dev/internal/serving")
            .env("METRICS_PROMETHEUS_PORT", free_port()?.to_string())
            .env("PROFILING_PORT", free_port()?.to_string());
        Ok(command)
    };
    let mut webhook = knative("knative-webhook", "webhook-testenv")?;
    webhook.env("WEBHOOK_NAME", "webhook").env("WEBHOOK_PORT", webhook_port.to_string());
    cluster.spawn("knative-webhook", webhook)?;
    let mut controller = knative(CONTROLLER_COMPONENT, "controller-testenv")?;
    // Upstream's probes always bind :8080; several environments may share this host.
    controller.arg("--health-probes=false");
    cluster.spawn(CONTROLLER_COMPONENT, controller)
}

/// A token for `namespace/name` from the TokenRequest API, valid for a day.
async fn service_account_token(admin: &Client, namespace: &str, name: &str) -> Result<String, String> {
    let request =
        TokenRequest { spec: Some(TokenRequestSpec { expiration_seconds: Some(86_400), ..Default::default() }), ..Default::default() };
    let response = Api::<ServiceAccount>::namespaced(admin.clone(), namespace)
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .map_err(|e| format!("requesting a token for service account {namespace}/{name}: {e}"))?;
    response.status.and_then(|s| s.token).ok_or_else(|| format!("the token request for {namespace}/{name} returned no token"))
}

/// Waits until a dry-run Knative Service is admitted and defaulted by the webhook.
async fn wait_for_webhook(cluster: &Cluster, admin: &Client, deadline: Instant) -> Result<(), String> {
    let gvk = GroupVersionKind::gvk("serving.knative.dev", "v1", "Service");
    let api: Api<DynamicObject> = Api::namespaced_with(admin.clone(), "default", &ApiResource::from_gvk(&gvk));
    let probe: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "serving.knative.dev/v1",
        "kind": "Service",
        "metadata": { "name": "lampyr-testenv-probe", "namespace": "default" },
        "spec": { "template": { "spec": { "containers": [{ "image": "example.com/probe" }] } } },
    }))
    .map_err(|e| e.to_string())?;
    let dry_run = PostParams { dry_run: true, ..Default::default() };
    loop {
        let last = match api.create(&dry_run, &probe).await {
            Ok(created) if created.data.pointer("/spec/template/spec/containers/0/name").is_some() => return Ok(()),
            Ok(_) => "a Service was admitted without the webhook's defaults".to_string(),
            Err(e) => e.to_string(),
        };
        cluster
            .poll(deadline, "the webhook to default a Service")
            .await
            .map_err(|e| format!("{e} (last answer: {last}); webhook log:\n{}", cluster.log_tail("knative-webhook", 20)))?;
    }
}

/// Waits until the controller holds a lease for each composed reconciler.
async fn wait_for_controller(cluster: &Cluster, admin: &Client, deadline: Instant) -> Result<(), String> {
    let leases: Api<Lease> = Api::namespaced(admin.clone(), SYSTEM_NAMESPACE);
    loop {
        let held: Vec<String> = leases
            .list(&Default::default())
            .await
            .map_err(|e| format!("listing leases: {e}"))?
            .items
            .into_iter()
            .filter(|l| l.spec.as_ref().is_some_and(|s| s.holder_identity.is_some()))
            .filter_map(|l| l.metadata.name)
            .filter(|name| name.starts_with(CONTROLLER_COMPONENT))
            .collect();
        let missing: Vec<&str> =
            RECONCILERS.iter().copied().filter(|r| !held.iter().any(|name| name.contains(&format!(".{r}.")))).collect();
        if missing.is_empty() {
            return Ok(());
        }
        cluster
            .poll(deadline, &format!("the controller's leases for {missing:?} (held: {held:?})"))
            .await
            .map_err(|e| format!("{e}; controller log:\n{}", cluster.log_tail(CONTROLLER_COMPONENT, 20)))?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_claimed_by_one_holder_is_refused_to_another_until_released() {
        let claims = tempfile::tempdir().expect("tempdir");
        let first = claim_port(claims.path(), 12_345).expect("the first claim");
        // A second open file description stands for another process: flock locks are per description.
        assert!(claim_port(claims.path(), 12_345).is_none(), "a port claimed elsewhere is claimed again");
        assert!(claim_port(claims.path(), 12_346).is_some(), "another port is free to claim");
        drop(first);
        assert!(claim_port(claims.path(), 12_345).is_some(), "a released port can be claimed");
    }

    #[test]
    fn ports_given_are_claimed_for_the_process() {
        let port = free_port().expect("a free port");
        let claims = std::env::temp_dir().join("lampyr-test-ports");
        assert!(claim_port(&claims, port).is_none(), "port {port} was given without a claim another process would see");
    }
}
