//! A real OCI registry (Debian's `docker-registry`, distribution 2.8) on a
//! loopback port with its own storage, for tests that move artifacts.

use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::cluster::{Placement, Process};

const BINARY: &str = "/usr/bin/docker-registry";
const READY_TIMEOUT: Duration = Duration::from_secs(15);
const START_ATTEMPTS: usize = 3;

/// A new registry's directory (storage, configuration, log): removed on drop, or at exit
/// when the registry is held by a `static`.
fn registry_dir() -> tempfile::TempDir {
    let dir = tempfile::Builder::new().prefix("lampyr-registry-").tempdir().expect("registry temp dir");
    crate::shared::remove_at_exit(dir.path().to_path_buf());
    dir
}

/// A running `docker-registry` serving plain HTTP on `127.0.0.1:PORT` (or on a node's
/// address, [`TestRegistry::start_in`]; or HTTPS behind a login, [`TestRegistry::start_secured`]); killed on drop, and by the kernel when the test
/// process ends (a registry in a `static` is never dropped; its directory is removed at exit).
pub struct TestRegistry {
    child: Process,
    addr: SocketAddr,
    dir: tempfile::TempDir,
}

impl TestRegistry {
    /// Starts a registry on a free loopback port and waits until `GET /v2/` answers 200.
    ///
    /// Panics, with the fix or the registry's log, when it cannot be started.
    pub fn start() -> Self {
        assert!(Path::new(BINARY).is_file(), "docker-registry not found: run scripts/setup (installs Debian's docker-registry)");
        let mut last_log = String::new();
        for _ in 0..START_ATTEMPTS {
            let dir = registry_dir();
            let addr = free_loopback_addr();
            let child = spawn(dir.path(), addr, None);
            let mut registry = TestRegistry { child, addr, dir };
            match registry.wait_ready() {
                Ok(()) => return registry,
                // Another process may have taken the port between probe and bind: retry.
                Err(log) if log.contains("address already in use") => last_log = log,
                Err(log) => panic!("docker-registry on {addr} did not become ready:\n{log}"),
            }
        }
        panic!("docker-registry could not bind a free loopback port after {START_ATTEMPTS} attempts:\n{last_log}")
    }

    /// Starts a registry on a free loopback port that serves HTTPS with `certificate` (issued
    /// for `127.0.0.1`) and lets in only `user` with `password` (htpasswd, bcrypt), and waits
    /// until it accepts connections.
    ///
    /// Panics, with the registry's log, when it cannot be started.
    pub fn start_secured(certificate: &crate::tls::ServingCertificate, user: &str, password: &str) -> Self {
        assert!(Path::new(BINARY).is_file(), "docker-registry not found: run scripts/setup (installs Debian's docker-registry)");
        let dir = registry_dir();
        let hash = bcrypt::hash_with_result(password, 5).expect("a bcrypt hash").format_for_version(bcrypt::Version::TwoY);
        let (htpasswd, cert, key) = (dir.path().join("htpasswd"), dir.path().join("tls.crt"), dir.path().join("tls.key"));
        fs::write(&htpasswd, format!("{user}:{hash}\n")).expect("write htpasswd");
        fs::write(&cert, &certificate.cert_pem).expect("write certificate");
        fs::write(&key, &certificate.key_pem).expect("write key");
        let secured = format!(
            "  tls:\n    certificate: {}\n    key: {}\nauth:\n  htpasswd:\n    realm: lampyr-test\n    path: {}\n",
            cert.display(),
            key.display(),
            htpasswd.display()
        );
        let addr = free_loopback_addr();
        let child = spawn_with(dir.path(), addr, None, &secured);
        let mut registry = TestRegistry { child, addr, dir };
        let deadline = Instant::now() + READY_TIMEOUT;
        while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            if let Err(log) = registry.child.check_running() {
                panic!("docker-registry on {addr} exited:\n{log}");
            }
            assert!(Instant::now() < deadline, "docker-registry on {addr} did not listen within {READY_TIMEOUT:?}:\n{}", registry.log());
            std::thread::sleep(Duration::from_millis(50));
        }
        registry
    }

    /// [`TestRegistry::start_secured`] with a certificate for `127.0.0.1` from a CA of its
    /// own; returns the registry and that CA's certificate (PEM).
    pub fn start_private(user: &str, password: &str) -> (Self, String) {
        let ca = crate::tls::TestCa::new("lampyr private registry CA").expect("a CA");
        let certificate = ca.issue(&["127.0.0.1"]).expect("a serving certificate");
        (TestRegistry::start_secured(&certificate, user, password), ca.pem().to_string())
    }

    /// Starts a registry on `port` of `placement`'s address, inside its network namespace
    /// (reached alike from the test and from the node's Pods), and waits until it answers.
    ///
    /// Panics with the registry's log when it cannot be started.
    pub fn start_in(placement: &Placement, port: u16) -> Self {
        assert!(Path::new(BINARY).is_file(), "docker-registry not found: run scripts/setup (installs Debian's docker-registry)");
        let dir = registry_dir();
        let addr = SocketAddr::new(placement.address, port);
        let child = spawn(dir.path(), addr, Some(placement));
        let mut registry = TestRegistry { child, addr, dir };
        if let Err(log) = registry.wait_ready() {
            panic!("docker-registry on {addr} did not become ready:\n{log}");
        }
        registry
    }

    /// Listening address, e.g. `127.0.0.1:41234`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `host:port` as it appears in references, e.g. `127.0.0.1:41234`.
    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    /// The registry's storage root (`storage.filesystem.rootdirectory`).
    pub fn storage_dir(&self) -> PathBuf {
        self.dir.path().join("storage")
    }

    /// Where the registry keeps the bytes of blob `digest` (`sha256:<hex>`).
    pub fn blob_data_path(&self, digest: &str) -> PathBuf {
        let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
        let prefix = hex.get(..2).unwrap_or(hex);
        self.storage_dir().join("docker/registry/v2/blobs/sha256").join(prefix).join(hex).join("data")
    }

    /// The registry's log so far (it logs every request to stderr).
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + READY_TIMEOUT;
        while Instant::now() < deadline {
            self.child.check_running()?;
            if probe_v2(self.addr) == Some(200) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(format!("GET /v2/ did not answer 200 within {READY_TIMEOUT:?}; its log:\n{}", self.log()))
    }
}

fn free_loopback_addr() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    listener.local_addr().expect("local address")
}

fn spawn(dir: &Path, addr: SocketAddr, placement: Option<&Placement>) -> Process {
    spawn_with(dir, addr, placement, "")
}

/// Starts the registry with `more` appended to its configuration (after `http.addr`).
fn spawn_with(dir: &Path, addr: SocketAddr, placement: Option<&Placement>, more: &str) -> Process {
    let storage = dir.join("storage");
    fs::create_dir_all(&storage).expect("registry storage dir");
    let config = dir.join("config.yml");
    let yaml = format!(
        "version: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {addr}\n{more}",
        storage.display()
    );
    fs::write(&config, yaml).expect("write registry config");
    let mut command = Command::new(BINARY);
    command.arg("serve").arg(&config);
    let command = match placement {
        Some(placement) => placement.command(command),
        None => command,
    };
    // The registry logs every request: a file never fills up and blocks it as a pipe would.
    Process::spawn("docker-registry", command, &dir.join("registry.log")).unwrap_or_else(|e| panic!("{e}"))
}

/// Status code of `GET /v2/`, or `None` when nothing answers yet.
fn probe_v2(addr: SocketAddr) -> Option<u16> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(200)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    let request = format!("GET /v2/ HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).ok()?;
    // "HTTP/1.1 200"
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}

/// A Docker config (`~/.docker/config.json`, or a `kubernetes.io/dockerconfigjson` Secret's
/// `.dockerconfigjson`) logging `user` in to `registry` with `password`.
pub fn docker_config(registry: &str, user: &str, password: &str) -> Vec<u8> {
    let config = serde_json::json!({ "auths": { registry: { "username": user, "password": password } } });
    serde_json::to_vec(&config).expect("a JSON document")
}
