//! The test environment has no kubelet: this stands in for one for grant Pods,
//! running each Pod's fiberd container as a local process.
//!
//! For every Pod labelled `fiber.lampyr.dev/grant` it starts the given fiberd
//! binary with the container's own arguments (`$(POD_NAME)` and `$(POD_IP)`
//! expanded, the listen and advertise addresses moved to a free loopback
//! port) plus the test's extra arguments, and, once fiberd answers
//! `/healthz`, reports the Pod Running and Ready with IP `127.0.0.1`, as a
//! kubelet would. A process that dies is started again on the same port after
//! [`RESTART_DELAY`] (a kubelet restarting the container, with a short back-off).
//! A Pod that is deleted has its process killed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use lampyr_api::keys::GRANT_LABEL;

use super::process::Process;

/// How long a dead fiberd stays down before it is started again (a kubelet's
/// first back-off is 10 s; tests need less).
pub const RESTART_DELAY: Duration = Duration::from_secs(1);

/// Runs grant Pods as local fiberd processes until dropped.
pub struct PodRunner {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    running: Arc<Mutex<BTreeMap<String, Running>>>,
}

/// A Pod's process and where it listens.
struct Running {
    process: Process,
    port: u16,
    /// The Pod, to start its process again after a crash.
    pod: Pod,
    /// When the process was first seen dead, while it waits for its restart.
    died: Option<Instant>,
    /// How many times the process was started again.
    restarts: u32,
}

impl PodRunner {
    /// Starts watching grant Pods (all namespaces), as the user of `kubeconfig`,
    /// and running them with `fiberd` plus `extra_args`; logs go under `log_dir`.
    ///
    /// Runs on its own thread and runtime, so it outlives the test that started it.
    pub fn start(kubeconfig: &Path, fiberd: PathBuf, extra_args: Vec<String>, log_dir: &Path) -> Self {
        let running = Arc::new(Mutex::new(BTreeMap::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (kubeconfig, log_dir) = (kubeconfig.to_path_buf(), log_dir.to_path_buf());
        let (state, stopping) = (running.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("lampyr-testenv-pod-runner".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
                runtime.block_on(async move {
                    let client = match super::client_for(&kubeconfig).await {
                        Ok(client) => client,
                        Err(e) => return eprintln!("pod runner: {e}"),
                    };
                    while !stopping.load(Ordering::Relaxed) {
                        if let Err(e) = sync_once(&client, &fiberd, &extra_args, &log_dir, &state).await {
                            eprintln!("pod runner: {e}");
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
        running.iter().map(|(pod, r)| (pod.clone(), r.port)).collect()
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
        running.get_mut(pod).map(|r| r.process.kill()).is_some()
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

async fn sync_once(
    client: &Client,
    fiberd: &Path,
    extra_args: &[String],
    log_dir: &Path,
    running: &Mutex<BTreeMap<String, Running>>,
) -> Result<(), String> {
    let pods: Api<Pod> = Api::all(client.clone());
    let listed = pods.list(&ListParams::default().labels(GRANT_LABEL)).await.map_err(|e| format!("listing grant Pods: {e}"))?;
    let live: BTreeMap<String, &Pod> = listed
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| (format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any()), p))
        .collect();
    let to_start: Vec<(String, Pod)> = {
        let mut state = running.lock().unwrap_or_else(|p| p.into_inner());
        state.retain(|key, _| live.contains_key(key));
        restart_dead(&mut state, fiberd, extra_args, log_dir);
        live.iter().filter(|(key, _)| !state.contains_key(*key)).map(|(k, p)| (k.clone(), (*p).clone())).collect()
    };
    for (key, pod) in to_start {
        let port = super::free_port()?;
        let process = spawn_fiberd(fiberd, &key, &pod, port, extra_args, log_dir)?;
        let entry = Running { process, port, pod: pod.clone(), died: None, restarts: 0 };
        running.lock().unwrap_or_else(|p| p.into_inner()).insert(key.clone(), entry);
        wait_healthy(port).await;
        report_ready(client, &pod).await?;
    }
    Ok(())
}

/// Starts the processes that have been dead for [`RESTART_DELAY`] again.
fn restart_dead(state: &mut BTreeMap<String, Running>, fiberd: &Path, extra_args: &[String], log_dir: &Path) {
    for (key, running) in state.iter_mut() {
        if running.process.check_running().is_ok() {
            continue;
        }
        let died = *running.died.get_or_insert_with(Instant::now);
        if died.elapsed() < RESTART_DELAY {
            continue;
        }
        match spawn_fiberd(fiberd, key, &running.pod, running.port, extra_args, log_dir) {
            Ok(process) => {
                running.process = process;
                running.died = None;
                running.restarts += 1;
            }
            Err(e) => eprintln!("pod runner: restarting {key}: {e}"),
        }
    }
}

/// Starts Pod `key`'s fiberd on `port`, logging to its file under `log_dir`.
fn spawn_fiberd(fiberd: &Path, key: &str, pod: &Pod, port: u16, extra_args: &[String], log_dir: &Path) -> Result<Process, String> {
    let command = fiberd_command(fiberd, pod, port, extra_args)?;
    Process::spawn("fiberd", command, &log_dir.join(format!("fiberd-{}.log", key.replace('/', "_"))))
}

/// The fiberd container's command line, rewritten for a loopback process.
fn fiberd_command(fiberd: &Path, pod: &Pod, port: u16, extra_args: &[String]) -> Result<Command, String> {
    let container = pod
        .spec
        .as_ref()
        .and_then(|s| s.containers.iter().find(|c| c.name == "fiberd"))
        .ok_or_else(|| format!("Pod {} has no fiberd container", pod.name_any()))?;
    let mut command = Command::new(fiberd);
    for arg in container.args.iter().flatten() {
        let arg = arg.replace("$(POD_NAME)", &pod.name_any()).replace("$(POD_IP)", "127.0.0.1");
        // Addresses and the in-Pod fleet-key mount are the Pod's; the test supplies its own.
        let dropped = ["--listen=", "--advertise=", "--fleet-key-file="];
        if !dropped.iter().any(|prefix| arg.starts_with(prefix)) {
            command.arg(arg);
        }
    }
    command.arg(format!("--listen=127.0.0.1:{port}")).arg(format!("--advertise=127.0.0.1:{port}")).args(extra_args);
    Ok(command)
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
