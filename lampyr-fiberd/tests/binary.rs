//! The `fiberd` binary as a grant Pod runs it: its flags, a fleet key mounted
//! as a file, serving against the real cluster environment, and SIGTERM
//! removing its status entries before it exits.

mod support;

use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use lampyr_artifact::seal::FleetKey;
use lampyr_testenv::{TestRegistry, push_artifact, push_sealed, workspace_binary};
use support::{Env, entry, hello_artifact, hello_policy, request, wait_entry};

/// A child process killed if the test ends before it exits.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Running {
    fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.0.try_wait().expect("try_wait") {
                return status;
            }
            assert!(Instant::now() < deadline, "fiberd did not exit within {within:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_binary_serves_until_sigterm_then_removes_its_entries() {
    let env = Env::new("fiberd-bin").await;
    let registry = TestRegistry::start();
    let hello = hello_artifact(1024 * 1024);
    let artifact = push_artifact(&registry, "lampyr/hello", &hello).await;
    let key = FleetKey::generate();
    let template = push_sealed(&registry, "lampyr/templates", &hello, &key).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let key_file = dir.path().join("key");
    std::fs::write(&key_file, key.to_secret_string()).expect("key file");
    let log = std::fs::File::create(dir.path().join("fiberd.log")).expect("log");
    let port = lampyr_testenv::cluster::free_port().expect("a free port");
    let address = format!("127.0.0.1:{port}");

    let fiberd = workspace_binary("lampyr-fiberd", "fiberd");
    let mut child = Running(
        Command::new(&fiberd)
            .arg("--kubeconfig")
            .arg(env.cluster.kubeconfig())
            .args(["--name", "grant-a-0", "--grant", "grant-a", "--namespace", &env.ns, "--listen", &address])
            .args(["--plain-http-registry", &registry.host(), "--scale-tick", "0.1", "--status-interval", "0.2"])
            .arg("--cache-dir")
            .arg(dir.path().join("cache"))
            .arg("--fleet-key-file")
            .arg(&key_file)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("fiberd starts"),
    );

    let homes = env.homes();
    env.create_home("plain-00001", "grant-a", &artifact, None, hello_policy()).await;
    env.create_home("sealed-00001", "grant-a", &artifact, Some(&template), hello_policy()).await;
    for name in ["plain-00001", "sealed-00001"] {
        let e = wait_entry(&homes, name, "grant-a-0", "loaded", |e| e.is_some_and(|e| e.loaded)).await.expect("entry");
        assert_eq!(e.address, address, "advertises its listen address");
        let addr = address.parse().expect("socket address");
        assert_eq!(request(addr, &env.ns, name).await, (200, "Hello Lampyr!\n".to_string()), "{name}");
    }

    let kill = Command::new("kill").args(["-TERM", &child.0.id().to_string()]).status().expect("kill runs");
    assert!(kill.success());
    let status = child.wait_exit(Duration::from_secs(60));
    let log = std::fs::read_to_string(dir.path().join("fiberd.log")).unwrap_or_default();
    assert!(status.success(), "fiberd exits cleanly on SIGTERM ({status}); its log:\n{log}");
    for name in ["plain-00001", "sealed-00001"] {
        assert_eq!(entry(&homes, name, "grant-a-0").await, None, "{name}: the entry is removed at shutdown; log:\n{log}");
    }
    assert!(log.contains("fiberd starting") && log.contains("loaded"), "logs through tracing:\n{log}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wildcard_listen_address_needs_an_advertised_one() {
    let env = Env::new("fiberd-flags").await;
    let output = Command::new(workspace_binary("lampyr-fiberd", "fiberd"))
        .arg("--kubeconfig")
        .arg(env.cluster.kubeconfig())
        .args(["--name", "grant-a-0", "--grant", "grant-a", "--listen", "0.0.0.0:0", "--cache-dir", "/tmp/unused"])
        .output()
        .expect("fiberd runs");
    let said = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert_eq!(output.status.code(), Some(1), "{said}");
    assert!(said.contains("--advertise"), "names the flag to give: {said}");

    let output = Command::new(workspace_binary("lampyr-fiberd", "fiberd")).args(["--name", "x"]).output().expect("runs");
    assert_eq!(output.status.code(), Some(2), "clap refuses a missing --grant");
    assert!(String::from_utf8_lossy(&output.stderr).contains("--grant"));
}
