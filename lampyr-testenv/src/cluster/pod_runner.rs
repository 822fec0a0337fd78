//! The test environment has no kubelet: this stands in for one, running Pods'
//! containers as local processes, each Pod's as its [`PodProgram`] says.
//!
//! For every Pod a program selects it gives the Pod a free loopback port,
//! writes the Pod's Secret volumes to a directory of its own (as a kubelet
//! mounts them; mount paths in arguments point there), makes a kubeconfig for
//! the Pod's service account when the program asks for it, starts the process
//! with the container's environment (`value`s and the Pod's name, namespace
//! and IP `127.0.0.1`), and, once it answers `/healthz`, reports the Pod
//! Running and Ready, as a kubelet would. A process that dies is started again
//! on the same port after [`RESTART_DELAY`] (a kubelet restarting the
//! container, with a short back-off). A Pod that is deleted has its process killed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Container, Pod, Secret};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use lampyr_api::keys::GRANT_LABEL;

use super::Cluster;
use super::process::Process;

/// How long a dead process stays down before it is started again (a kubelet's
/// first back-off is 10 s; tests need less).
pub const RESTART_DELAY: Duration = Duration::from_secs(1);

/// Builds a Pod's command line from the Pod and what the runner prepared for it.
pub type CommandFor = dyn Fn(&Pod, &PodSandbox) -> Result<Command, String> + Send + Sync;

/// Which Pods the runner runs, and how.
pub struct PodProgram {
    /// Label selector of the Pods.
    pub selector: String,
    /// Name of the processes, for logs.
    pub name: &'static str,
    /// Run as the Pod's service account (a kubeconfig with its token) rather than the admin.
    pub as_service_account: bool,
    /// The process, or `None` when the environment already runs the component and the
    /// Pod is only reported Ready.
    pub command: Option<Box<CommandFor>>,
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
    /// Each Secret volume's mount path and the directory its files were written to.
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
}

impl PodProgram {
    /// Grant Pods (`fiber.lampyr.dev/grant`) run as `fiberd` with the container's
    /// arguments, listen and advertise addresses on the Pod's port, plus `extra_args`.
    /// With `as_installed`, fiberd runs as the Pod's service account and reads the fleet key
    /// from the mounted Secret; otherwise the test's arguments give it credentials
    /// (the fleet key then comes from the Secret in `default`).
    pub fn grant_fiberd(fiberd: PathBuf, extra_args: Vec<String>, as_installed: bool) -> Self {
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
        PodProgram { selector: GRANT_LABEL.to_string(), name: "fiberd", as_service_account: as_installed, command: Some(Box::new(command)) }
    }
}

/// The Pod's container `name`.
pub fn container<'a>(pod: &'a Pod, name: &str) -> Result<&'a Container, String> {
    pod.spec
        .as_ref()
        .and_then(|s| s.containers.iter().find(|c| c.name == name))
        .ok_or_else(|| format!("Pod {} has no {name} container", pod.name_any()))
}

/// Runs Pods as local processes until dropped.
pub struct PodRunner {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    running: Arc<Mutex<BTreeMap<String, Running>>>,
}

/// A Pod's process and where it listens.
struct Running {
    /// `None` for an adopted Pod.
    process: Option<Process>,
    program: usize,
    sandbox: PodSandbox,
    /// The Pod, to start its process again after a crash.
    pod: Pod,
    /// When the process was first seen dead, while it waits for its restart.
    died: Option<Instant>,
    /// How many times the process was started again.
    restarts: u32,
}

/// Everything one sync needs.
struct Runner {
    cluster: &'static Cluster,
    client: Client,
    programs: Vec<PodProgram>,
    running: Arc<Mutex<BTreeMap<String, Running>>>,
}

impl PodRunner {
    /// Starts running the Pods `programs` select (all namespaces), as the stand-in kubelet of `cluster`;
    /// logs go to its data directory.
    ///
    /// Runs on its own thread and runtime, so it outlives the test that started it.
    pub fn start(cluster: &'static Cluster, programs: Vec<PodProgram>) -> Self {
        let running = Arc::new(Mutex::new(BTreeMap::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (state, stopping) = (running.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("lampyr-testenv-pod-runner".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
                runtime.block_on(async move {
                    let client = match super::client_for(cluster.kubeconfig()).await {
                        Ok(client) => client,
                        Err(e) => return eprintln!("pod runner: {e}"),
                    };
                    let runner = Runner { cluster, client, programs, running: state };
                    while !stopping.load(Ordering::Relaxed) {
                        for index in 0..runner.programs.len() {
                            if let Err(e) = runner.sync_once(index).await {
                                eprintln!("pod runner: {e}");
                            }
                        }
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                });
            })
            .expect("start the pod runner thread");
        PodRunner { stop, thread: Some(thread), running }
    }

    /// `namespace/name -> port` of every Pod running now.
    pub fn ports(&self) -> BTreeMap<String, u16> {
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        running.iter().filter(|(_, r)| r.process.is_some()).map(|(pod, r)| (pod.clone(), r.sandbox.port)).collect()
    }

    /// How many times the process of Pod `namespace/name` was started again.
    pub fn restarts(&self, pod: &str) -> Option<u32> {
        self.running.lock().unwrap_or_else(|p| p.into_inner()).get(pod).map(|r| r.restarts)
    }

    /// Kills the process of Pod `namespace/name` as a crash would; it is
    /// started again after [`RESTART_DELAY`] on the same port (its Pod status
    /// is left as it was, as in the seconds before a kubelet notices).
    pub fn kill(&self, pod: &str) -> bool {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        running.get_mut(pod).and_then(|r| r.process.as_mut()).map(Process::kill).is_some()
    }
}

impl Drop for PodRunner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        // Processes are killed as their `Process` values drop.
        self.running.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }
}

impl Runner {
    /// Brings the processes of program `index` in line with the Pods it selects.
    async fn sync_once(&self, index: usize) -> Result<(), String> {
        let program = &self.programs[index];
        let pods: Api<Pod> = Api::all(self.client.clone());
        let listed = pods
            .list(&ListParams::default().labels(&program.selector))
            .await
            .map_err(|e| format!("listing Pods {}: {e}", program.selector))?;
        let live: BTreeMap<String, &Pod> = listed
            .items
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .map(|p| (format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any()), p))
            .collect();
        let to_start: Vec<(String, Pod)> = {
            let mut state = self.running.lock().unwrap_or_else(|p| p.into_inner());
            state.retain(|key, r| r.program != index || live.contains_key(key));
            self.restart_dead(&mut state, index);
            live.iter().filter(|(key, _)| !state.contains_key(*key)).map(|(k, p)| (k.clone(), (*p).clone())).collect()
        };
        for (key, pod) in to_start {
            let sandbox = self.sandbox(&key, &pod, program.as_service_account).await?;
            let process = match &program.command {
                Some(command) => Some(spawn(program, &key, &pod, &sandbox, command, self.cluster.data_dir())?),
                None => None,
            };
            let healthy = process.is_some();
            let port = sandbox.port;
            let entry = Running { process, program: index, sandbox, pod: pod.clone(), died: None, restarts: 0 };
            self.running.lock().unwrap_or_else(|p| p.into_inner()).insert(key.clone(), entry);
            if healthy {
                wait_healthy(port).await;
            }
            report_ready(&self.client, &pod).await?;
        }
        Ok(())
    }

    /// Starts the processes of program `index` that have been dead for [`RESTART_DELAY`] again.
    fn restart_dead(&self, state: &mut BTreeMap<String, Running>, index: usize) {
        let program = &self.programs[index];
        let Some(command) = &program.command else { return };
        for (key, running) in state.iter_mut().filter(|(_, r)| r.program == index) {
            if running.process.as_mut().is_none_or(|p| p.check_running().is_ok()) {
                continue;
            }
            let died = *running.died.get_or_insert_with(Instant::now);
            if died.elapsed() < RESTART_DELAY {
                continue;
            }
            match spawn(program, key, &running.pod, &running.sandbox, command, self.cluster.data_dir()) {
                Ok(process) => {
                    running.process = Some(process);
                    running.died = None;
                    running.restarts += 1;
                }
                Err(e) => eprintln!("pod runner: restarting {key}: {e}"),
            }
        }
    }

    /// A port, the environment, the Secret volumes and the credentials of Pod `key`.
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
        for container in &spec.containers {
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
        let mounts = self.write_secret_volumes(pod, &namespace, &dir).await?;
        Ok(PodSandbox { port: super::free_port()?, kubeconfig, env, mounts, dir })
    }

    /// Writes each Secret volume of `pod` under `dir` (an optional Secret that is missing is
    /// skipped, as a kubelet does); returns each mount path with its directory.
    async fn write_secret_volumes(&self, pod: &Pod, namespace: &str, dir: &Path) -> Result<Vec<(String, PathBuf)>, String> {
        let spec = pod.spec.as_ref().ok_or("a Pod without a spec")?;
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let mut mounts = Vec::new();
        for volume in spec.volumes.iter().flatten() {
            let Some(source) = &volume.secret else { continue };
            let name = source.secret_name.clone().unwrap_or_default();
            let found = secrets.get_opt(&name).await.map_err(|e| format!("reading Secret {namespace}/{name}: {e}"))?;
            let Some(secret) = found else { continue };
            let volume_dir = dir.join("volumes").join(&volume.name);
            std::fs::create_dir_all(&volume_dir).map_err(|e| format!("creating {}: {e}", volume_dir.display()))?;
            for (file, bytes) in secret.data.unwrap_or_default() {
                std::fs::write(volume_dir.join(&file), &bytes.0).map_err(|e| format!("writing {file}: {e}"))?;
            }
            for container in &spec.containers {
                for mount in container.volume_mounts.iter().flatten().filter(|m| m.name == volume.name) {
                    mounts.push((mount.mount_path.clone(), volume_dir.clone()));
                }
            }
        }
        Ok(mounts)
    }
}

/// Starts Pod `key`'s process, logging to its file in the data directory.
fn spawn(program: &PodProgram, key: &str, pod: &Pod, sandbox: &PodSandbox, command: &CommandFor, log_dir: &Path) -> Result<Process, String> {
    let mut command = command(pod, sandbox)?;
    command.envs(&sandbox.env);
    Process::spawn(program.name, command, &log_dir.join(format!("{}-{}.log", program.name, key.replace('/', "_"))))
}

async fn wait_healthy(port: u16) {
    for _ in 0..300 {
        if let Ok(mut stream) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let request = "GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
            let mut head = [0u8; 12];
            if stream.write_all(request.as_bytes()).await.is_ok()
                && stream.read_exact(&mut head).await.is_ok()
                && &head[9..12] == b"200"
            {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Reports the Pod Running and Ready, as a kubelet does once its probes pass.
async fn report_ready(client: &Client, pod: &Pod) -> Result<(), String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace().unwrap_or_default());
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let status = json!({ "status": {
        "phase": "Running", "podIP": "127.0.0.1", "podIPs": [{ "ip": "127.0.0.1" }], "hostIP": "127.0.0.1",
        "conditions": [
            { "type": "Ready", "status": "True", "lastTransitionTime": now },
            { "type": "ContainersReady", "status": "True", "lastTransitionTime": now },
        ],
    } });
    pods.patch_status(&pod.name_any(), &PatchParams::default(), &Patch::Merge(&status))
        .await
        .map_err(|e| format!("reporting Pod {} ready: {e}", pod.name_any()))?;
    Ok(())
}
