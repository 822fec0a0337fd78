//! The cluster environment leaves nothing behind: not when dropped, and not
//! when the test process is killed outright (SIGKILL runs no destructor).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use lampyr_testenv::Cluster;
use lampyr_testenv::cluster::remove_stale_data_dirs;

/// Set in the child process this test starts and then kills.
const CHILD_ENV: &str = "LAMPYR_TESTENV_TEARDOWN_CHILD";

fn alive(pid: u32) -> bool {
    // A killed child stays a zombie only until its parent reaps it; the
    // components' parent is the killed test process, so they are reaped by init.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| !stat.rsplit(')').next().unwrap_or_default().trim_start().starts_with('Z'))
}

fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "{what} within {timeout:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn dropping_an_environment_stops_every_process_and_removes_its_data() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return; // the child runs only the test below
    }
    let cluster = Cluster::start().unwrap_or_else(|e| panic!("{e}"));
    let pids = cluster.pids();
    let dir = cluster.data_dir().to_path_buf();
    assert_eq!(pids.len(), 5, "etcd, apiserver, controller-manager, webhook, controller");
    assert!(pids.iter().all(|&pid| alive(pid)));
    drop(cluster);
    for pid in pids {
        assert!(!alive(pid), "process {pid} outlived its environment");
    }
    assert!(!dir.exists(), "{} outlived its environment", dir.display());
}

#[test]
fn killing_the_test_process_kills_every_component() {
    if std::env::var_os(CHILD_ENV).is_some() {
        // The child: start an environment, report it, then wait to be killed.
        let cluster = Cluster::start().unwrap_or_else(|e| panic!("{e}"));
        let pids: Vec<String> = cluster.pids().iter().map(u32::to_string).collect();
        println!("ENV {} {}", cluster.data_dir().display(), pids.join(" "));
        std::thread::sleep(Duration::from_secs(120));
        return;
    }
    let mut child = Command::new(std::env::current_exe().expect("test binary path"))
        .args(["--exact", "killing_the_test_process_kills_every_component", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "1")
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the child test process");
    let stdout = child.stdout.take().expect("child stdout");
    let line = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        // libtest prints "test NAME ... " before the test's own output, on the same line.
        .find_map(|line| line.split_once("ENV ").map(|(_, report)| report.to_string()))
        .unwrap_or_else(|| panic!("the child exited without starting an environment ({:?})", child.wait()));
    let mut fields = line.split_whitespace();
    let dir = PathBuf::from(fields.next().expect("data dir"));
    let pids: Vec<u32> = fields.map(|p| p.parse().expect("pid")).collect();
    assert_eq!(pids.len(), 5);

    child.kill().expect("SIGKILL the child");
    child.wait().expect("reap the child");
    for &pid in &pids {
        wait_until(&format!("component {pid} dies with its test process"), Duration::from_secs(10), || !alive(pid));
    }
    assert!(dir.exists(), "nothing ran to remove {}; the next start removes it", dir.display());
    remove_stale_data_dirs();
    assert!(!Path::new(&dir).exists(), "{} was not removed as stale", dir.display());
}
