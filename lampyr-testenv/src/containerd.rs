//! A private containerd (Debian's 1.6 with runc) for tests: its own root,
//! state, runc root and socket under a data directory of its own, optionally
//! inside a network namespace and with the CRI plugin configured for a kubelet.
//!
//! Dropping it kills containerd, the shims serving its socket and their
//! containers, unmounts everything under its directory (deepest first) and
//! removes it. A start first does the same for directories whose test process
//! is gone (their containerd died with it, but shims outlive it).

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use sha2::{Digest, Sha256};

use crate::cluster::{Process, log_tail, owned_data_dir, stale_data_dirs};

/// Debian's containerd.
pub const CONTAINERD: &str = "/usr/bin/containerd";
/// The namespace images are imported into and containers run in (the kubelet's).
pub const NAMESPACE: &str = "k8s.io";
/// Where Debian's `containernetworking-plugins` puts the CNI plugins.
pub const CNI_BIN_DIR: &str = "/usr/lib/cni";
/// What a start needs, with the package that brings it.
const REQUIRED: [(&str, &str); 4] = [
    (CONTAINERD, "containerd"),
    ("/usr/bin/ctr", "containerd"),
    ("/usr/bin/containerd-shim-runc-v2", "containerd"),
    ("/usr/sbin/runc", "runc"),
];
/// Prefix of every containerd data directory under the system temp directory.
const DATA_DIR_PREFIX: &str = "lampyr-containerd-";
/// Where containerd 1.6 puts shim sockets, whatever its state directory.
const SHIM_SOCKET_DIR: &str = "/run/containerd/s";
const READY_TIMEOUT: Duration = Duration::from_secs(30);
const KILL_TIMEOUT: Duration = Duration::from_secs(10);

/// The CRI plugin's settings, for a kubelet talking to this containerd.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CriOptions {
    /// The Pod sandbox (pause) image; it must be imported, it cannot be pulled here.
    pub sandbox_image: String,
    /// CNI plugin binaries (default [`CNI_BIN_DIR`]).
    pub cni_bin_dir: PathBuf,
    /// CNI network configurations.
    pub cni_conf_dir: PathBuf,
    /// Registry host configuration directory (`hosts.toml` per registry), if any.
    pub registry_config_path: Option<PathBuf>,
}

impl CriOptions {
    /// Settings with `sandbox_image`, CNI configurations in `cni_conf_dir` and plugins in [`CNI_BIN_DIR`].
    pub fn new(sandbox_image: impl Into<String>, cni_conf_dir: impl Into<PathBuf>) -> Self {
        CriOptions {
            sandbox_image: sandbox_image.into(),
            cni_bin_dir: PathBuf::from(CNI_BIN_DIR),
            cni_conf_dir: cni_conf_dir.into(),
            registry_config_path: None,
        }
    }
}

/// How to start containerd.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerdOptions {
    /// Enable the CRI plugin with these settings (without: the plugin is disabled).
    pub cri: Option<CriOptions>,
    /// Run containerd in this network namespace (`nsenter --net=PATH`).
    pub network_namespace: Option<PathBuf>,
}

/// How to run one container.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunOptions {
    /// Extra environment, `NAME=value` each.
    pub env: Vec<String>,
    /// Mount the image's root filesystem read-only (as `readOnlyRootFilesystem`).
    pub read_only: bool,
}

/// A running private containerd; see the module documentation.
pub struct Containerd {
    dir: PathBuf,
    process: Option<Process>,
    runs: AtomicU32,
    stopped: bool,
}

impl Containerd {
    /// Starts containerd with `options` and waits until it answers `ctr version`.
    pub fn start(options: ContainerdOptions) -> Result<Containerd, String> {
        for (path, package) in REQUIRED {
            if !Path::new(path).is_file() {
                return Err(format!("{path} is missing: run scripts/setup (installs Debian's {package})"));
            }
        }
        for stale in stale_data_dirs(DATA_DIR_PREFIX) {
            let _ = clean_up(&stale);
        }
        let dir = owned_data_dir(DATA_DIR_PREFIX)?;
        let mut containerd = Containerd { dir, process: None, runs: AtomicU32::new(0), stopped: false };
        let config = containerd.dir.join("config.toml");
        std::fs::write(&config, config_toml(&containerd.dir, options.cri.as_ref())?)
            .map_err(|e| format!("writing {}: {e}", config.display()))?;
        let mut command = match &options.network_namespace {
            Some(netns) => {
                let mut nsenter = Command::new("nsenter");
                nsenter.arg(format!("--net={}", netns.display())).arg("--").arg(CONTAINERD);
                nsenter
            }
            None => Command::new(CONTAINERD),
        };
        command.arg("--config").arg(&config);
        containerd.process = Some(Process::spawn("containerd", command, &containerd.log())?);
        containerd.wait_ready()?;
        Ok(containerd)
    }

    /// containerd's socket (`ctr --address`).
    pub fn address(&self) -> PathBuf {
        address_in(&self.dir)
    }

    /// containerd's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(Process::pid)
    }

    /// `Err` with its log's tail when containerd has exited.
    pub fn check_running(&mut self) -> Result<(), String> {
        self.process.as_mut().map_or(Ok(()), Process::check_running)
    }

    /// Its data directory (root, state, runc root, socket, log).
    pub fn data_dir(&self) -> &Path {
        &self.dir
    }

    /// The end of containerd's log, for failure messages.
    pub fn log_tail(&self, lines: usize) -> String {
        log_tail(&self.log(), lines)
    }

    /// `ctr` talking to this containerd in [`NAMESPACE`].
    pub fn ctr(&self) -> Command {
        let mut command = Command::new("ctr");
        command.arg("--address").arg(self.address()).args(["--namespace", NAMESPACE]);
        command
    }

    /// Imports an OCI image archive (`lampyr_images::import_containerd`) and
    /// returns the image's name and digest, checked in containerd's listing.
    pub fn import(&self, archive: &Path) -> Result<lampyr_images::ImportedImage, String> {
        lampyr_images::import_containerd(archive, &self.address(), NAMESPACE)
            .map_err(|e| format!("{e}; containerd's log:\n{}", self.log_tail(20)))
    }

    /// `ctr run --rm IMAGE ID ARGS…` and its output. As with `ctr run`, `args`
    /// replace the image's entrypoint: give the whole command line.
    pub fn run(&self, image: &str, args: &[&str]) -> Result<Output, String> {
        self.run_with(image, args, &RunOptions::default())
    }

    /// [`Containerd::run`] with extra env and a read-only root filesystem if asked.
    pub fn run_with(&self, image: &str, args: &[&str], options: &RunOptions) -> Result<Output, String> {
        let id = format!("lampyr-run-{}", self.runs.fetch_add(1, Ordering::Relaxed));
        let mut command = self.ctr();
        command.args(["run", "--rm", "--runc-root"]).arg(self.dir.join("runc"));
        if options.read_only {
            command.arg("--read-only");
        }
        for env in &options.env {
            command.args(["--env", env]);
        }
        command.arg(image).arg(&id).args(args);
        command.output().map_err(|e| format!("running ctr run: {e} (run scripts/setup: it installs Debian's containerd)"))
    }

    /// Kills containerd, its shims and their containers, unmounts and removes the data directory. Idempotent.
    pub fn stop(&mut self) {
        if std::mem::replace(&mut self.stopped, true) {
            return;
        }
        if let Some(mut process) = self.process.take() {
            process.kill();
        }
        let _ = clean_up(&self.dir);
    }

    fn log(&self) -> PathBuf {
        self.dir.join("containerd.log")
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(process) = self.process.as_mut() {
                process.check_running()?;
            }
            let mut version = self.ctr();
            version.arg("version");
            if version.output().is_ok_and(|o| o.status.success()) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("containerd did not answer within {READY_TIMEOUT:?}; its log:\n{}", self.log_tail(30)));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        self.stop();
    }
}

fn address_in(dir: &Path) -> PathBuf {
    dir.join("containerd.sock")
}

/// containerd's configuration (version 2): everything under `dir`; the CRI
/// plugin disabled, or configured from `cri` (with `restrict_oom_score_adj`:
/// this machine forbids lowering `oom_score_adj`; network namespaces mounted
/// under the state directory).
fn config_toml(dir: &Path, cri: Option<&CriOptions>) -> Result<String, String> {
    let address = address_in(dir);
    let mut config = json!({
        "version": 2,
        "root": dir.join("root"),
        "state": dir.join("state"),
        "grpc": { "address": address },
        "ttrpc": { "address": format!("{}.ttrpc", address.display()) },
        "plugins": { "io.containerd.internal.v1.opt": { "path": dir.join("opt") } },
    });
    match cri {
        None => config["disabled_plugins"] = json!(["io.containerd.grpc.v1.cri"]),
        Some(cri) => {
            let mut registry = json!({});
            if let Some(path) = &cri.registry_config_path {
                registry["config_path"] = json!(path);
            }
            config["plugins"]["io.containerd.grpc.v1.cri"] = json!({
                "sandbox_image": cri.sandbox_image,
                "restrict_oom_score_adj": true,
                "netns_mounts_under_state_dir": true,
                "containerd": {
                    "snapshotter": "overlayfs",
                    "default_runtime_name": "runc",
                    "runtimes": { "runc": {
                        "runtime_type": "io.containerd.runc.v2",
                        "options": { "Root": dir.join("runc") },
                    } },
                },
                "cni": { "bin_dir": cri.cni_bin_dir, "conf_dir": cri.cni_conf_dir },
                "registry": registry,
            });
        }
    }
    let value = toml::Value::try_from(config).map_err(|e| format!("containerd's configuration: {e}"))?;
    toml::to_string(&value).map_err(|e| format!("containerd's configuration: {e}"))
}

/// Kills the shims serving the containerd of `dir` and their containers,
/// unmounts everything under `dir` (deepest first) and removes it.
fn clean_up(dir: &Path) -> Result<(), String> {
    let address = address_in(dir);
    let shims = shims_of(&address);
    let mut doomed = descendants(&shims.iter().map(|s| s.pid).collect::<Vec<_>>());
    doomed.extend(shims.iter().map(|s| s.pid));
    for pid in &doomed {
        kill(*pid);
    }
    wait_gone(&doomed);
    for shim in &shims {
        let _ = std::fs::remove_file(shim_socket(&address, &shim.namespace, &shim.id));
    }
    unmount_under(dir)?;
    std::fs::remove_dir_all(dir).map_err(|e| format!("removing {}: {e}", dir.display()))
}

/// A running shim: its pid and the container it serves.
struct Shim {
    pid: u32,
    namespace: String,
    id: String,
}

/// The shims whose command line names `address` (`-address ADDRESS`).
fn shims_of(address: &Path) -> Vec<Shim> {
    let address = address.to_string_lossy();
    let mut shims = Vec::new();
    for (pid, args) in processes() {
        let is_shim = args.first().is_some_and(|a| a.rsplit('/').next().is_some_and(|n| n.starts_with("containerd-shim")));
        let flag = |name: &str| args.windows(2).find(|w| w[0] == name).map(|w| w[1].clone());
        if is_shim && flag("-address").as_deref() == Some(address.as_ref()) {
            shims.push(Shim { pid, namespace: flag("-namespace").unwrap_or_default(), id: flag("-id").unwrap_or_default() });
        }
    }
    shims
}

/// containerd 1.6's shim socket for a container: `/run/containerd/s/<sha256 of ADDRESS/NS/ID>`.
fn shim_socket(address: &Path, namespace: &str, id: &str) -> PathBuf {
    let path = address.join(namespace).join(id);
    Path::new(SHIM_SOCKET_DIR).join(hex::encode(Sha256::digest(path.to_string_lossy().as_bytes())))
}

/// Every process: pid and command line.
fn processes() -> Vec<(u32, Vec<String>)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let args = cmdline.split(|b| *b == 0).filter(|a| !a.is_empty());
            Some((pid, args.map(|a| String::from_utf8_lossy(a).into_owned()).collect()))
        })
        .collect()
}

/// `(ppid, state)` of `pid` from `/proc/PID/stat` (fields after the command name).
fn parent_and_state(pid: u32) -> Option<(u32, char)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace();
    let state = fields.next()?.chars().next()?;
    Some((fields.next()?.parse().ok()?, state))
}

/// Every descendant of `roots`, children before their parents' parents.
fn descendants(roots: &[u32]) -> Vec<u32> {
    let parents: Vec<(u32, u32)> = processes().into_iter().filter_map(|(pid, _)| Some((pid, parent_and_state(pid)?.0))).collect();
    let mut found = Vec::new();
    let mut frontier = roots.to_vec();
    while let Some(parent) = frontier.pop() {
        for (pid, _) in parents.iter().filter(|(_, ppid)| *ppid == parent) {
            if !found.contains(pid) {
                found.push(*pid);
                frontier.push(*pid);
            }
        }
    }
    found.reverse();
    found
}

#[allow(unsafe_code)]
fn kill(pid: u32) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
}

/// Waits until every pid is gone or a zombie (bounded).
fn wait_gone(pids: &[u32]) {
    let deadline = Instant::now() + KILL_TIMEOUT;
    while Instant::now() < deadline && pids.iter().any(|pid| parent_and_state(*pid).is_some_and(|(_, s)| s != 'Z')) {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Mount points under `dir` from `/proc/self/mountinfo`, deepest first.
fn mounts_under(dir: &Path, mountinfo: &str) -> Vec<PathBuf> {
    let mut mounts: Vec<PathBuf> = mountinfo
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|field| PathBuf::from(unescape_mount_path(field)))
        .filter(|path| path.starts_with(dir))
        .collect();
    mounts.sort_by_key(|path| std::cmp::Reverse(path.components().count()));
    mounts.dedup();
    mounts
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape_mount_path(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|d| u8::from_str_radix(std::str::from_utf8(d).ok()?, 8).ok());
        match (bytes[i], octal) {
            (b'\\', Some(byte)) => {
                out.push(byte);
                i += 4;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Detaches every mount under `dir`, deepest first, until none is left.
pub(crate) fn unmount_under(dir: &Path) -> Result<(), String> {
    for _ in 0..5 {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| format!("reading mountinfo: {e}"))?;
        let mounts = mounts_under(dir, &mountinfo);
        if mounts.is_empty() {
            return Ok(());
        }
        for mount in mounts {
            unmount(&mount);
        }
    }
    Err(format!("mounts under {} remain after unmounting them five times", dir.display()))
}

#[allow(unsafe_code)]
fn unmount(path: &Path) {
    let Ok(target) = CString::new(path.as_os_str().as_encoded_bytes()) else {
        return;
    };
    // SAFETY: `target` is a NUL-terminated string that outlives the call; umount2(2) only reads it.
    unsafe {
        libc::umount2(target.as_ptr(), libc::MNT_DETACH);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mounts_under_the_directory_come_deepest_first_and_unescaped() {
        let mountinfo = "\
22 1 8:1 / / rw - ext4 /dev/vda rw
90 22 0:50 / /tmp/lampyr-containerd-x/state/io.containerd.runtime.v2.task/k8s.io/a/rootfs rw - overlay overlay rw
91 22 0:51 / /tmp/lampyr-containerd-x/state/netns/cni-1 rw - nsfs nsfs rw
92 22 0:52 / /tmp/lampyr-containerd-x/with\\040space rw - tmpfs tmpfs rw
93 22 0:53 / /tmp/lampyr-containerd-xy rw - tmpfs tmpfs rw
";
        let mounts = mounts_under(Path::new("/tmp/lampyr-containerd-x"), mountinfo);
        let expected = [
            "/tmp/lampyr-containerd-x/state/io.containerd.runtime.v2.task/k8s.io/a/rootfs",
            "/tmp/lampyr-containerd-x/state/netns/cni-1",
            "/tmp/lampyr-containerd-x/with space",
        ];
        assert_eq!(mounts, expected.map(PathBuf::from));
    }

    #[test]
    fn the_configuration_keeps_everything_under_the_directory() {
        let dir = Path::new("/tmp/lampyr-containerd-x");
        let plain: toml::Value = toml::from_str(&config_toml(dir, None).expect("toml")).expect("parses");
        assert_eq!(plain["grpc"]["address"].as_str(), Some("/tmp/lampyr-containerd-x/containerd.sock"));
        assert_eq!(plain["root"].as_str(), Some("/tmp/lampyr-containerd-x/root"));
        assert_eq!(plain["disabled_plugins"][0].as_str(), Some("io.containerd.grpc.v1.cri"));
        let mut options = CriOptions::new("registry.k8s.io/pause:3.10", "/tmp/cni");
        options.registry_config_path = Some(PathBuf::from("/tmp/certs.d"));
        let with_cri: toml::Value = toml::from_str(&config_toml(dir, Some(&options)).expect("toml")).expect("parses");
        let cri = &with_cri["plugins"]["io.containerd.grpc.v1.cri"];
        assert_eq!(cri["restrict_oom_score_adj"].as_bool(), Some(true));
        assert_eq!(cri["netns_mounts_under_state_dir"].as_bool(), Some(true));
        assert_eq!(cri["sandbox_image"].as_str(), Some("registry.k8s.io/pause:3.10"));
        assert_eq!(cri["cni"]["bin_dir"].as_str(), Some(CNI_BIN_DIR));
        assert_eq!(cri["registry"]["config_path"].as_str(), Some("/tmp/certs.d"));
        assert!(with_cri.get("disabled_plugins").is_none());
    }

    #[test]
    fn shim_sockets_are_where_containerd_1_6_puts_them() {
        let socket = shim_socket(Path::new("/run/containerd/containerd.sock"), "k8s.io", "abc");
        let expected = hex::encode(Sha256::digest(b"/run/containerd/containerd.sock/k8s.io/abc"));
        assert_eq!(socket, Path::new(SHIM_SOCKET_DIR).join(expected));
    }
}
