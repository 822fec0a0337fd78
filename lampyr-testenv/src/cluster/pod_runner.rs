//! The test environment has no kubelet: this stands in for one, running Pods'
//! containers as local processes, each Pod's as its [`PodProgram`] says, and
//! reporting only what happened.
//!
//! For every Pod a program selects it:
//! - gives the Pod a free loopback port, writes its Secret volumes and makes its
//!   emptyDir volumes in a directory of its own (mount paths in arguments point
//!   there; a missing optional Secret is an empty volume, as a kubelet mounts it),
//!   makes a kubeconfig for the Pod's service account when the program asks, and
//!   resolves the containers' environment (`value`s, the Pod's name, namespace and
//!   IP `127.0.0.1`);
//! - runs the Pod's init containers in order, each to completion, before the
//!   program, each as the program's [`InitProgram`] for it says: one that fails is
//!   reported terminated with its termination message (the file at its
//!   `terminationMessagePath`, else, with `FallbackToLogsOnError`, the end of its
//!   log) and run again after [`INIT_RETRY_DELAY`]; the program never starts
//!   before every init container succeeded;
//! - starts the program (the Pod's first container) and probes its readiness on
//!   the Pod's port, at the path the container's `readinessProbe` names (or the
//!   program's [`PodProgram::probe_path`], else `/healthz`): the Pod is Ready only
//!   once the probe answered `200`. A program that never answers leaves the Pod
//!   Running and not Ready, its `Ready` condition saying why; a Ready Pod whose
//!   probe fails [`FAILURE_THRESHOLD`] times in a row is not Ready again;
//! - when the program exits, reports the Pod not Ready at once and starts the
//!   program again on the same port after [`RESTART_DELAY`]; a deleted Pod's
//!   program is stopped as a kubelet stops it: SIGTERM, then SIGKILL after the
//!   Pod's `terminationGracePeriodSeconds` (30 s unless it says), on a thread of
//!   its own, so it may drain while the others keep being synced.
//!
//! Status (phase, conditions, init and container statuses) is written as a
//! kubelet writes it, only when it changes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Container, Pod, Secret};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use lampyr_api::keys::GRANT_LABEL;

use super::Cluster;
use super::process::{Process, log_tail};

/// How long a dead process stays down before it is started again (a kubelet's
/// first back-off is 10 s; tests need less).
pub const RESTART_DELAY: Duration = Duration::from_secs(1);
/// How long a failed init container waits before it runs again (a kubelet backs off from 10 s).
pub const INIT_RETRY_DELAY: Duration = Duration::from_secs(5);
/// Time between two readiness probes of a Ready Pod (a kubelet's default period is 10 s);
/// a Pod that is not Ready yet is probed at every sync.
pub const PROBE_PERIOD: Duration = Duration::from_secs(1);
/// Failed probes in a row that make a Ready Pod not Ready (a kubelet's default).
pub const FAILURE_THRESHOLD: u32 = 3;
/// How long one probe waits for an answer (a kubelet's default `timeoutSeconds`).
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// Time between two syncs of the Pods with their processes.
const SYNC_PERIOD: Duration = Duration::from_millis(200);
/// Kubernetes' default `terminationMessagePath`.
const DEFAULT_TERMINATION_PATH: &str = "/dev/termination-log";

/// Builds a container's command line from the Pod and what the runner prepared for it.
pub type CommandFor = dyn Fn(&Pod, &PodSandbox) -> Result<Command, String> + Send + Sync;

/// Which Pods the runner runs, and how.
pub struct PodProgram {
    /// Label selector of the Pods.
    pub selector: String,
    /// Name of the processes, for logs.
    pub name: &'static str,
    /// Run as the Pod's service account (a kubeconfig with its token) rather than the admin.
    pub as_service_account: bool,
    /// The programs of the Pods' init containers. A Pod with an init container no
    /// entry names never starts (its status says so).
    pub init: Vec<InitProgram>,
    /// The program of the Pod's first container.
    pub command: Box<CommandFor>,
    /// The readiness probe's path when the program cannot serve the one its manifest
    /// names here; `None`: the manifest's, else `/healthz`.
    pub probe_path: Option<String>,
}

/// The program of one init container.
pub struct InitProgram {
    /// The init container's name.
    pub container: &'static str,
    /// Name of its processes, for logs.
    pub name: &'static str,
    /// Its command line.
    pub command: Box<CommandFor>,
}

/// What the runner prepared for one Pod.
#[derive(Clone, Debug)]
pub struct PodSandbox {
    /// The Pod's loopback port.
    pub port: u16,
    /// The kubeconfig it runs with: its service account's, or the admin's.
    pub kubeconfig: PathBuf,
    /// The container environment, resolved.
    pub env: BTreeMap<String, String>,
    /// Each volume mount's path (and each container's termination-message path) with
    /// the file or directory standing for it.
    pub mounts: Vec<(String, PathBuf)>,
    /// A directory of the Pod's own, for caches.
    pub dir: PathBuf,
}

impl PodSandbox {
    /// `arg` with `$(VAR)` expanded from the environment and mount paths pointing at their directories.
    pub fn localize(&self, arg: &str) -> String {
        let mut arg = arg.to_string();
        for (name, value) in &self.env {
            arg = arg.replace(&format!("$({name})"), value);
        }
        for (mount, dir) in &self.mounts {
            arg = arg.replace(mount.as_str(), &dir.display().to_string());
        }
        arg
    }

    /// The file standing for `container`'s termination-message path.
    pub fn termination_file(&self, container: &str) -> PathBuf {
        self.dir.join(format!("{container}.termination-log"))
    }

    /// This sandbox as `container` sees it: its termination-message path is its own file.
    fn for_container(&self, container: &Container) -> PodSandbox {
        let path = container.termination_message_path.clone().unwrap_or_else(|| DEFAULT_TERMINATION_PATH.to_string());
        let mut sandbox = self.clone();
        sandbox.mounts.insert(0, (path, self.termination_file(&container.name)));
        sandbox
    }
}

impl PodProgram {
    /// Grant Pods (`fiber.lampyr.dev/grant`): their `helper` init container runs as
    /// `fiberd-helper` with its arguments as written (the node's real `/dev/kvm`, the
    /// volumes as the runner made them), then the `fiberd` container as `fiberd` with its
    /// arguments, listen and advertise addresses on the Pod's port, plus `extra_args`.
    /// With `as_installed`, fiberd runs as the Pod's service account and reads the fleet key
    /// from the mounted Secret; otherwise the test's arguments give it credentials
    /// (the fleet key then comes from the Secret in `default`).
    pub fn grant_fiberd(fiberd: PathBuf, extra_args: Vec<String>, as_installed: bool) -> Self {
        let helper = crate::bins::workspace_binary("lampyr-fiberd", "fiberd-helper");
        let check = move |pod: &Pod, sandbox: &PodSandbox| {
            let container = init_container(pod, "helper")?;
            let mut command = Command::new(&helper);
            command.args(container.args.iter().flatten().map(|a| sandbox.localize(a)));
            Ok(command)
        };
        let command = move |pod: &Pod, sandbox: &PodSandbox| {
            let container = container(pod, "fiberd")?;
            let mut command = Command::new(&fiberd);
            let mut dropped = vec!["--listen=", "--advertise="];
            if !as_installed {
                dropped.push("--fleet-key-file=");
            }
            for arg in container.args.iter().flatten().filter(|a| !dropped.iter().any(|d| a.starts_with(d))) {
                command.arg(sandbox.localize(arg));
            }
            let port = sandbox.port;
            command.arg(format!("--listen=127.0.0.1:{port}")).arg(format!("--advertise=127.0.0.1:{port}")).args(&extra_args);
            if as_installed {
                command.arg(format!("--kubeconfig={}", sandbox.kubeconfig.display()));
            }
            Ok(command)
        };
        PodProgram {
            selector: GRANT_LABEL.to_string(),
            name: "fiberd",
            as_service_account: as_installed,
            init: vec![InitProgram { container: "helper", name: "fiberd-helper", command: Box::new(check) }],
            command: Box::new(command),
            probe_path: None,
        }
    }
}

/// The Pod's container `name`.
pub fn container<'a>(pod: &'a Pod, name: &str) -> Result<&'a Container, String> {
    pod.spec
        .as_ref()
        .and_then(|s| s.containers.iter().find(|c| c.name == name))
        .ok_or_else(|| format!("Pod {} has no {name} container", pod.name_any()))
}

/// The Pod's init container `name`.
pub fn init_container<'a>(pod: &'a Pod, name: &str) -> Result<&'a Container, String> {
    pod.spec
        .as_ref()
        .and_then(|s| s.init_containers.iter().flatten().find(|c| c.name == name))
        .ok_or_else(|| format!("Pod {} has no {name} init container", pod.name_any()))
}

/// Runs Pods as local processes until dropped.
pub struct PodRunner {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    pods: Arc<Mutex<BTreeMap<String, PodState>>>,
}

/// How a container ended.
#[derive(Clone, Debug)]
struct Terminated {
    exit_code: i32,
    message: String,
    started_at: String,
    finished_at: String,
}

/// Where a Pod is in its life.
enum Stage {
    /// Init container number `PodState::init_done` runs.
    Init { process: Process, started_at: String },
    /// Init container number `PodState::init_done` failed; it runs again after [`INIT_RETRY_DELAY`].
    InitFailed { since: Instant },
    /// The program runs.
    Running { process: Process, started_at: String },
    /// The program exited; it starts again after [`RESTART_DELAY`].
    Exited { since: Instant },
    /// The runner cannot run the Pod (no program for an init container, a command that cannot start).
    Refused { why: String },
}

/// One Pod the runner runs.
struct PodState {
    program: usize,
    sandbox: PodSandbox,
    /// The Pod as first seen (its spec does not change).
    pod: Pod,
    stage: Stage,
    /// How many init containers completed, in order.
    init_done: usize,
    /// How many times the current init container was run again.
    init_restarts: u32,
    /// The current init container's last failure (its `lastState` after a new run).
    init_failure: Option<Terminated>,
    /// How many times the program was started again.
    restarts: u32,
    /// The program's last exit.
    last_exit: Option<Terminated>,
    /// Whether the probe passed (and has not failed [`FAILURE_THRESHOLD`] times since).
    ready: bool,
    /// Why the program is not ready, for the `Ready` condition.
    why_not_ready: String,
    failures_in_a_row: u32,
    failed_probes: u32,
    last_probe: Option<Instant>,
    /// Each condition's status and when it took it.
    transitions: BTreeMap<&'static str, (bool, String)>,
    /// The status last written.
    reported: Option<Value>,
}

/// A probe to send: the Pod, its port and path.
struct ProbeRequest {
    key: String,
    port: u16,
    path: String,
}

/// Everything one sync needs.
struct Runner {
    cluster: &'static Cluster,
    client: Client,
    programs: Vec<PodProgram>,
    pods: Arc<Mutex<BTreeMap<String, PodState>>>,
}

fn lock(pods: &Mutex<BTreeMap<String, PodState>>) -> MutexGuard<'_, BTreeMap<String, PodState>> {
    pods.lock().unwrap_or_else(|p| p.into_inner())
}

impl PodRunner {
    /// Starts running the Pods `programs` select (all namespaces), as the stand-in kubelet of `cluster`;
    /// logs go to its data directory.
    ///
    /// Runs on its own thread and runtime, so it outlives the test that started it.
    pub fn start(cluster: &'static Cluster, programs: Vec<PodProgram>) -> Self {
        let pods = Arc::new(Mutex::new(BTreeMap::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (state, stopping) = (pods.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("lampyr-testenv-pod-runner".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
                runtime.block_on(async move {
                    let client = match super::client_for(cluster.kubeconfig()).await {
                        Ok(client) => client,
                        Err(e) => return eprintln!("pod runner: {e}"),
                    };
                    let runner = Runner { cluster, client, programs, pods: state };
                    while !stopping.load(Ordering::Relaxed) {
                        for index in 0..runner.programs.len() {
                            if let Err(e) = runner.sync_once(index).await {
                                eprintln!("pod runner: {e}");
                            }
                        }
                        tokio::time::sleep(SYNC_PERIOD).await;
                    }
                });
            })
            .expect("start the pod runner thread");
        PodRunner { stop, thread: Some(thread), pods }
    }

    /// `namespace/name -> port` of every Pod whose program runs now.
    pub fn ports(&self) -> BTreeMap<String, u16> {
        let pods = lock(&self.pods);
        pods.iter().filter(|(_, p)| matches!(p.stage, Stage::Running { .. })).map(|(key, p)| (key.clone(), p.sandbox.port)).collect()
    }

    /// The process id of Pod `namespace/name`'s program while it runs.
    pub fn pid(&self, pod: &str) -> Option<u32> {
        match lock(&self.pods).get(pod).map(|p| &p.stage) {
            Some(Stage::Running { process, .. }) => Some(process.pid()),
            _ => None,
        }
    }

    /// How many times the program of Pod `namespace/name` was started again.
    pub fn restarts(&self, pod: &str) -> Option<u32> {
        lock(&self.pods).get(pod).map(|p| p.restarts)
    }

    /// How many readiness probes of Pod `namespace/name` failed so far.
    pub fn failed_probes(&self, pod: &str) -> Option<u32> {
        lock(&self.pods).get(pod).map(|p| p.failed_probes)
    }

    /// Kills the program of Pod `namespace/name` as a crash would; the Pod is reported
    /// not Ready, and the program is started again after `RESTART_DELAY` on the same port.
    pub fn kill(&self, pod: &str) -> bool {
        let mut pods = lock(&self.pods);
        match pods.get_mut(pod).map(|p| &mut p.stage) {
            Some(Stage::Running { process, .. }) => {
                process.kill();
                true
            }
            _ => false,
        }
    }
}

impl Drop for PodRunner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        // Processes are killed as their `Process` values drop.
        lock(&self.pods).clear();
    }
}

impl PodState {
    /// Stops the program of a deleted Pod gracefully, on a thread of its own.
    fn terminate(self) {
        let grace = self.pod.spec.as_ref().and_then(|s| s.termination_grace_period_seconds).unwrap_or(30);
        let grace = Duration::from_secs(u64::try_from(grace).unwrap_or(0));
        if let Stage::Running { mut process, .. } = self.stage {
            std::thread::spawn(move || process.terminate(grace));
        }
    }
}

impl Runner {
    /// Brings the processes and statuses of program `index`'s Pods in line with what happened.
    async fn sync_once(&self, index: usize) -> Result<(), String> {
        let program = &self.programs[index];
        let api: Api<Pod> = Api::all(self.client.clone());
        let listed = api
            .list(&ListParams::default().labels(&program.selector))
            .await
            .map_err(|e| format!("listing Pods {}: {e}", program.selector))?;
        let live: BTreeMap<String, &Pod> = listed
            .items
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .map(|p| (format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any()), p))
            .collect();
        let new: Vec<(String, Pod)> = {
            let mut pods = lock(&self.pods);
            let gone: Vec<String> =
                pods.iter().filter(|(key, p)| p.program == index && !live.contains_key(*key)).map(|(k, _)| k.clone()).collect();
            for key in gone {
                if let Some(state) = pods.remove(&key) {
                    state.terminate();
                }
            }
            live.iter().filter(|(key, _)| !pods.contains_key(*key)).map(|(k, p)| (k.clone(), (*p).clone())).collect()
        };
        for (key, pod) in new {
            // A Pod whose sandbox cannot be made yet (its service account is being created) is tried again next sync.
            let sandbox = match self.sandbox(&key, &pod, program.as_service_account).await {
                Ok(sandbox) => sandbox,
                Err(e) => {
                    eprintln!("pod runner: preparing Pod {key}: {e}");
                    continue;
                }
            };
            let mut state = PodState::new(index, sandbox, pod);
            state.start_next(program, &key, self.cluster.data_dir());
            lock(&self.pods).insert(key, state);
        }

        let probes: Vec<ProbeRequest> = {
            let mut pods = lock(&self.pods);
            let mine = pods.iter_mut().filter(|(_, p)| p.program == index);
            mine.filter_map(|(key, state)| state.advance(program, key, self.cluster.data_dir())).collect()
        };
        let mut answers = Vec::with_capacity(probes.len());
        for probe in probes {
            let answer = probe_once(probe.port, &probe.path).await;
            answers.push((probe, answer));
        }
        let changed: Vec<(String, Value)> = {
            let mut pods = lock(&self.pods);
            for (probe, answer) in answers {
                if let Some(state) = pods.get_mut(&probe.key) {
                    state.probed(&probe, answer);
                }
            }
            let mine = pods.iter_mut().filter(|(_, p)| p.program == index);
            mine.filter_map(|(key, state)| {
                let status = state.status();
                (state.reported.as_ref() != Some(&status)).then(|| (key.clone(), status))
            })
            .collect()
        };
        for (key, status) in changed {
            let (namespace, name) = key.split_once('/').unwrap_or_default();
            let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
            match pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&json!({ "status": status }))).await {
                Ok(_) => {
                    if let Some(state) = lock(&self.pods).get_mut(&key) {
                        state.reported = Some(status);
                    }
                }
                // Deleted meanwhile: the next sync forgets it.
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => eprintln!("pod runner: reporting the status of Pod {key}: {e}"),
            }
        }
        Ok(())
    }

    /// A port, the environment, the volumes and the credentials of Pod `key`.
    async fn sandbox(&self, key: &str, pod: &Pod, as_service_account: bool) -> Result<PodSandbox, String> {
        let namespace = pod.namespace().unwrap_or_default();
        let dir = self.cluster.data_dir().join("pods").join(key.replace('/', "_"));
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let spec = pod.spec.as_ref().ok_or_else(|| format!("Pod {key} has no spec"))?;
        let kubeconfig = match (&spec.service_account_name, as_service_account) {
            (Some(account), true) => self.cluster.service_account_kubeconfig(&namespace, account).await?,
            _ => self.cluster.kubeconfig().to_path_buf(),
        };
        let mut env = BTreeMap::from([
            ("POD_NAME".to_string(), pod.name_any()),
            ("POD_NAMESPACE".to_string(), namespace.clone()),
            ("POD_IP".to_string(), "127.0.0.1".to_string()),
        ]);
        for container in all_containers(pod) {
            for var in container.env.iter().flatten() {
                let field = var.value_from.as_ref().and_then(|f| f.field_ref.as_ref()).map(|f| f.field_path.as_str());
                let value = match (var.value.clone(), field) {
                    (Some(value), _) => value,
                    (None, Some("metadata.name")) => pod.name_any(),
                    (None, Some("metadata.namespace")) => namespace.clone(),
                    (None, Some("status.podIP")) => "127.0.0.1".to_string(),
                    _ => continue,
                };
                env.insert(var.name.clone(), value);
            }
        }
        let mounts = self.write_volumes(pod, &namespace, &dir).await?;
        Ok(PodSandbox { port: super::free_port()?, kubeconfig, env, mounts, dir })
    }

    /// Makes each Secret and emptyDir volume of `pod` a directory under `dir`, a Secret's
    /// files written into it (a missing optional Secret is an empty directory, as a kubelet
    /// mounts it); returns each mount path with its directory. Other volumes (hostPath)
    /// are the host's own paths.
    async fn write_volumes(&self, pod: &Pod, namespace: &str, dir: &Path) -> Result<Vec<(String, PathBuf)>, String> {
        let spec = pod.spec.as_ref().ok_or("a Pod without a spec")?;
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let mut mounts = Vec::new();
        for volume in spec.volumes.iter().flatten() {
            let volume_dir = dir.join("volumes").join(&volume.name);
            if let Some(source) = &volume.secret {
                let name = source.secret_name.clone().unwrap_or_default();
                let found = secrets.get_opt(&name).await.map_err(|e| format!("reading Secret {namespace}/{name}: {e}"))?;
                if found.is_none() && source.optional != Some(true) {
                    return Err(format!("Secret {namespace}/{name} of volume {} does not exist", volume.name));
                }
                std::fs::create_dir_all(&volume_dir).map_err(|e| format!("creating {}: {e}", volume_dir.display()))?;
                for (file, bytes) in found.and_then(|s| s.data).unwrap_or_default() {
                    std::fs::write(volume_dir.join(&file), &bytes.0).map_err(|e| format!("writing {file}: {e}"))?;
                }
            } else if volume.empty_dir.is_some() {
                std::fs::create_dir_all(&volume_dir).map_err(|e| format!("creating {}: {e}", volume_dir.display()))?;
            } else {
                continue;
            }
            for container in all_containers(pod) {
                for mount in container.volume_mounts.iter().flatten().filter(|m| m.name == volume.name) {
                    mounts.push((mount.mount_path.clone(), volume_dir.clone()));
                }
            }
        }
        Ok(mounts)
    }
}

/// The Pod's init containers, then its containers.
fn all_containers(pod: &Pod) -> impl Iterator<Item = &Container> {
    let spec = pod.spec.as_ref();
    let init = spec.and_then(|s| s.init_containers.as_ref()).into_iter().flatten();
    init.chain(spec.map(|s| s.containers.as_slice()).unwrap_or_default())
}

impl PodState {
    fn new(program: usize, sandbox: PodSandbox, pod: Pod) -> Self {
        PodState {
            program,
            sandbox,
            pod,
            stage: Stage::Refused { why: "not started yet".into() },
            init_done: 0,
            init_restarts: 0,
            init_failure: None,
            restarts: 0,
            last_exit: None,
            ready: false,
            why_not_ready: "not probed yet".into(),
            failures_in_a_row: 0,
            failed_probes: 0,
            last_probe: None,
            transitions: BTreeMap::new(),
            reported: None,
        }
    }

    fn init_containers(&self) -> &[Container] {
        self.pod.spec.as_ref().and_then(|s| s.init_containers.as_deref()).unwrap_or_default()
    }

    fn main_container(&self) -> Option<&Container> {
        self.pod.spec.as_ref().and_then(|s| s.containers.first())
    }

    /// Starts the next step: the next init container, or the program once every one completed.
    fn start_next(&mut self, program: &PodProgram, key: &str, log_dir: &Path) {
        let Some(init) = self.init_containers().get(self.init_done).cloned() else {
            self.start_program(program, key, log_dir);
            return;
        };
        let Some(init_program) = program.init.iter().find(|i| i.container == init.name) else {
            let why = format!("the stand-in kubelet has no program for init container {}", init.name);
            self.stage = Stage::Refused { why };
            return;
        };
        let sandbox = self.sandbox.for_container(&init);
        let termination = self.sandbox.termination_file(&init.name);
        let log = log_dir.join(format!("{}-{}.log", init_program.name, key.replace('/', "_")));
        let started = std::fs::write(&termination, b"")
            .map_err(|e| format!("creating {}: {e}", termination.display()))
            .and_then(|()| (init_program.command)(&self.pod, &sandbox))
            .and_then(|mut command| {
                command.envs(&sandbox.env);
                Process::spawn(init_program.name, command, &log)
            });
        self.stage = match started {
            Ok(process) => Stage::Init { process, started_at: now() },
            Err(why) => Stage::Refused { why: format!("init container {}: {why}", init.name) },
        };
    }

    /// Starts (or starts again) the program.
    fn start_program(&mut self, program: &PodProgram, key: &str, log_dir: &Path) {
        let Some(container) = self.main_container().cloned() else {
            self.stage = Stage::Refused { why: "the Pod has no container".into() };
            return;
        };
        let sandbox = self.sandbox.for_container(&container);
        let log = log_dir.join(format!("{}-{}.log", program.name, key.replace('/', "_")));
        let started = (program.command)(&self.pod, &sandbox).and_then(|mut command| {
            command.envs(&sandbox.env);
            Process::spawn(program.name, command, &log)
        });
        self.ready = false;
        self.failures_in_a_row = 0;
        self.last_probe = None;
        self.why_not_ready = "the readiness probe has not answered yet".into();
        self.stage = match started {
            Ok(process) => Stage::Running { process, started_at: now() },
            Err(why) => Stage::Refused { why: format!("container {}: {why}", container.name) },
        };
    }

    /// Moves on from what the processes did; returns the probe to send, if one is due.
    fn advance(&mut self, program: &PodProgram, key: &str, log_dir: &Path) -> Option<ProbeRequest> {
        match &mut self.stage {
            Stage::Init { process, started_at } => {
                let status = process.exit_status()?;
                let (started_at, log) = (started_at.clone(), process.log().to_path_buf());
                if status.success() {
                    self.init_done += 1;
                    self.init_restarts = 0;
                    self.init_failure = None;
                    self.start_next(program, key, log_dir);
                } else {
                    let container = self.init_containers()[self.init_done].clone();
                    let message = termination_message(&container, &self.sandbox, &log);
                    self.init_failure = Some(Terminated { exit_code: exit_code(status), message, started_at, finished_at: now() });
                    self.stage = Stage::InitFailed { since: Instant::now() };
                }
                None
            }
            Stage::InitFailed { since } => {
                if since.elapsed() >= INIT_RETRY_DELAY {
                    self.init_restarts += 1;
                    self.start_next(program, key, log_dir);
                }
                None
            }
            Stage::Running { process, started_at } => {
                if let Some(status) = process.exit_status() {
                    let message = log_tail(process.log(), 5);
                    let code = exit_code(status);
                    self.last_exit = Some(Terminated { exit_code: code, message, started_at: started_at.clone(), finished_at: now() });
                    self.ready = false;
                    self.why_not_ready = format!("the container exited ({status}); it starts again");
                    self.stage = Stage::Exited { since: Instant::now() };
                    return None;
                }
                let due = !self.ready || self.last_probe.is_none_or(|at| at.elapsed() >= PROBE_PERIOD);
                due.then(|| ProbeRequest { key: key.to_string(), port: self.sandbox.port, path: self.probe_path(program) })
            }
            Stage::Exited { since } => {
                if since.elapsed() >= RESTART_DELAY {
                    self.restarts += 1;
                    self.start_program(program, key, log_dir);
                }
                None
            }
            Stage::Refused { .. } => None,
        }
    }

    /// The path the readiness probe asks: the program's, else the manifest's, else `/healthz`.
    fn probe_path(&self, program: &PodProgram) -> String {
        let manifest = self.main_container().and_then(|c| c.readiness_probe.as_ref()?.http_get.as_ref()?.path.clone());
        program.probe_path.clone().or(manifest).unwrap_or_else(|| "/healthz".to_string())
    }

    /// Takes a probe's answer.
    fn probed(&mut self, probe: &ProbeRequest, answer: Result<(), String>) {
        if !matches!(self.stage, Stage::Running { .. }) {
            return;
        }
        self.last_probe = Some(Instant::now());
        match answer {
            Ok(()) => {
                self.ready = true;
                self.failures_in_a_row = 0;
            }
            Err(why) => {
                self.failed_probes += 1;
                self.failures_in_a_row += 1;
                if !self.ready || self.failures_in_a_row >= FAILURE_THRESHOLD {
                    self.ready = false;
                    self.why_not_ready = format!("readiness probe GET {} on 127.0.0.1:{}: {why}", probe.path, probe.port);
                }
            }
        }
    }

    /// The Pod's status as a kubelet reports it.
    fn status(&mut self) -> Value {
        let inits: Vec<Container> = self.init_containers().to_vec();
        let initialized = self.init_done >= inits.len();
        let running = matches!(self.stage, Stage::Running { .. });
        let ready = initialized && running && self.ready;
        let main = self.main_container().map(|c| c.name.clone()).unwrap_or_default();
        let why = self.why_not();
        let incomplete = inits.get(self.init_done).map(|c| c.name.clone()).unwrap_or_default();
        let conditions = vec![
            self.condition(
                "Initialized",
                initialized,
                "ContainersNotInitialized",
                &format!("containers with incomplete status: [{incomplete}]"),
            ),
            self.condition("Ready", ready, "ContainersNotReady", &format!("containers with unready status: [{main}]: {why}")),
            self.condition("ContainersReady", ready, "ContainersNotReady", &format!("containers with unready status: [{main}]")),
        ];
        let init_statuses: Vec<Value> = inits.iter().enumerate().map(|(i, c)| self.init_status(i, c)).collect();
        let container_statuses: Vec<Value> = self
            .pod
            .spec
            .as_ref()
            .map(|s| s.containers.iter().enumerate().map(|(i, c)| self.container_status(i, c, initialized)).collect())
            .unwrap_or_default();
        let started = matches!(self.stage, Stage::Running { .. } | Stage::Exited { .. });
        json!({
            "phase": if started { "Running" } else { "Pending" },
            "hostIP": "127.0.0.1", "podIP": "127.0.0.1", "podIPs": [{ "ip": "127.0.0.1" }],
            "conditions": conditions,
            "initContainerStatuses": init_statuses,
            "containerStatuses": container_statuses,
        })
    }

    /// Why the Pod is not ready, in one line.
    fn why_not(&self) -> String {
        match &self.stage {
            Stage::Refused { why } => why.clone(),
            Stage::Init { .. } => format!("init container {} is running", self.init_containers()[self.init_done].name),
            Stage::InitFailed { .. } => {
                let failure = self.init_failure.as_ref().map(|f| f.message.clone()).unwrap_or_default();
                format!("init container {} failed: {failure}", self.init_containers()[self.init_done].name)
            }
            Stage::Running { .. } | Stage::Exited { .. } => self.why_not_ready.clone(),
        }
    }

    /// Condition `kind`, its transition time kept while its status stays.
    fn condition(&mut self, kind: &'static str, status: bool, reason: &str, message: &str) -> Value {
        let entry = self.transitions.entry(kind).or_insert_with(|| (status, now()));
        if entry.0 != status {
            *entry = (status, now());
        }
        let mut condition = json!({ "type": kind, "status": if status { "True" } else { "False" }, "lastTransitionTime": entry.1 });
        if !status {
            condition["reason"] = json!(reason);
            condition["message"] = json!(message);
        }
        condition
    }

    /// Init container number `index`'s status.
    fn init_status(&self, index: usize, container: &Container) -> Value {
        let mut status = json!({ "name": container.name, "image": container.image, "imageID": "", "ready": false, "restartCount": 0 });
        if index < self.init_done {
            status["ready"] = json!(true);
            status["state"] = json!({ "terminated": { "exitCode": 0, "reason": "Completed" } });
            return status;
        }
        if index > self.init_done {
            status["state"] = json!({ "waiting": { "reason": "PodInitializing" } });
            return status;
        }
        status["restartCount"] = json!(self.init_restarts);
        let failure = self.init_failure.as_ref().map(terminated);
        status["state"] = match &self.stage {
            Stage::Init { started_at, .. } => {
                if let Some(last) = failure {
                    status["lastState"] = last;
                }
                json!({ "running": { "startedAt": started_at } })
            }
            Stage::InitFailed { .. } => failure.unwrap_or_else(|| json!({})),
            Stage::Refused { why } => json!({ "waiting": { "reason": "CreateContainerError", "message": why } }),
            _ => json!({ "waiting": { "reason": "PodInitializing" } }),
        };
        status
    }

    /// Container number `index`'s status: the program's for the first, never run for any other.
    fn container_status(&self, index: usize, container: &Container, initialized: bool) -> Value {
        let mut status = json!({ "name": container.name, "image": container.image, "imageID": "", "ready": false, "restartCount": 0 });
        if index > 0 {
            let why = "the stand-in kubelet runs only a Pod's first container";
            status["state"] = json!({ "waiting": { "reason": "CreateContainerError", "message": why } });
            return status;
        }
        if !initialized {
            status["state"] = json!({ "waiting": { "reason": "PodInitializing" } });
            return status;
        }
        status["restartCount"] = json!(self.restarts);
        if let Some(last) = &self.last_exit {
            status["lastState"] = terminated(last);
        }
        status["state"] = match &self.stage {
            Stage::Running { started_at, .. } => {
                status["ready"] = json!(self.ready);
                status["started"] = json!(true);
                json!({ "running": { "startedAt": started_at } })
            }
            Stage::Exited { .. } => self.last_exit.as_ref().map(terminated).unwrap_or_else(|| json!({})),
            Stage::Refused { why } => json!({ "waiting": { "reason": "CreateContainerError", "message": why } }),
            _ => json!({ "waiting": { "reason": "PodInitializing" } }),
        };
        status
    }
}

/// A container state `terminated`.
fn terminated(t: &Terminated) -> Value {
    let reason = if t.exit_code == 0 { "Completed" } else { "Error" };
    json!({ "terminated": {
        "exitCode": t.exit_code, "reason": reason, "message": t.message,
        "startedAt": t.started_at, "finishedAt": t.finished_at,
    } })
}

/// What a container that ended said: its termination-message file, else (with
/// `FallbackToLogsOnError`) the end of its log.
fn termination_message(container: &Container, sandbox: &PodSandbox, log: &Path) -> String {
    let written = std::fs::read_to_string(sandbox.termination_file(&container.name)).unwrap_or_default();
    let written = written.trim();
    if !written.is_empty() {
        return written.to_string();
    }
    if container.termination_message_policy.as_deref() == Some("FallbackToLogsOnError") {
        return log_tail(log, 5);
    }
    String::new()
}

/// The exit code a kubelet reports: the process's, or 128 plus the signal that killed it.
fn exit_code(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt as _;
    status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

fn now() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}

/// One readiness probe: `GET path` on the Pod's port answered `200`, or why not.
async fn probe_once(port: u16, path: &str) -> Result<(), String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let attempt = async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.map_err(|e| e.to_string())?;
        let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.map_err(|e| e.to_string())?;
        let mut head = [0u8; 12];
        stream.read_exact(&mut head).await.map_err(|e| format!("no HTTP answer ({e})"))?;
        match &head[9..12] {
            b"200" => Ok(()),
            status => Err(format!("answered {}", String::from_utf8_lossy(status))),
        }
    };
    match tokio::time::timeout(PROBE_TIMEOUT, attempt).await {
        Ok(answer) => answer,
        Err(_) => Err(format!("no answer within {PROBE_TIMEOUT:?}")),
    }
}
