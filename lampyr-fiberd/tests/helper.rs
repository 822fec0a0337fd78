//! The `fiberd-helper` binary as a grant Pod's init container runs it: against
//! this machine's real `/dev/kvm` it passes; against a path that is not a KVM
//! device, a missing device, or an unusable cache it exits 1 and writes one line
//! saying why to its termination-message file.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use lampyr_artifact::seal::FleetKey;
use lampyr_testenv::require_kvm;

/// The binary cargo built for these tests.
fn helper() -> Command {
    Command::new(env!("CARGO_BIN_EXE_fiberd-helper"))
}

/// A grant Pod's volumes in a temporary directory: a cache, a fleet-key mount, a termination log.
struct Pod {
    dir: tempfile::TempDir,
}

impl Pod {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("cache")).expect("cache dir");
        std::fs::create_dir(dir.path().join("fleet-key")).expect("fleet-key dir");
        Pod { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Runs the helper with the grant Pod's arguments for these volumes, plus `extra`.
    fn run(&self, kvm_device: &Path, extra: &[String]) -> Output {
        helper()
            .arg(format!("--kvm-device={}", kvm_device.display()))
            .arg(format!("--cache-dir={}", self.path("cache").display()))
            .arg(format!("--fleet-key-file={}", self.path("fleet-key/key").display()))
            .arg(format!("--termination-log={}", self.path("termination-log").display()))
            .args(extra)
            .output()
            .expect("run fiberd-helper")
    }

    /// The termination message, without its newline; empty when none was written.
    fn termination_message(&self) -> String {
        let text = std::fs::read_to_string(self.path("termination-log")).unwrap_or_default();
        assert!(text.is_empty() || text.ends_with('\n') && text.lines().count() == 1, "one line: {text:?}");
        text.trim_end().to_string()
    }
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn this_machines_kvm_can_run_fibers() {
    require_kvm();
    let pod = Pod::new();
    let output = pod.run(Path::new("/dev/kvm"), &[]);
    assert_eq!(output.status.code(), Some(0), "the helper passes on /dev/kvm: {}", stderr(&output));
    assert_eq!(pod.termination_message(), "", "nothing to report");
    assert!(stderr(&output).contains("this node can run fibers"), "{}", stderr(&output));
    assert_eq!(std::fs::read_dir(pod.path("cache")).expect("cache").count(), 0, "the cache probe is removed");

    // A mounted fleet key is read and checked too.
    std::fs::write(pod.path("fleet-key/key"), FleetKey::generate().to_secret_string()).expect("key");
    let output = pod.run(Path::new("/dev/kvm"), &[]);
    assert_eq!(output.status.code(), Some(0), "a valid key passes: {}", stderr(&output));
}

#[test]
fn a_device_that_is_not_kvm_fails_saying_so() {
    let pod = Pod::new();
    let output = pod.run(Path::new("/dev/null"), &[]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert_eq!(
        pod.termination_message(),
        "/dev/null: not a KVM device: KVM_GET_API_VERSION failed (Inappropriate ioctl for device (os error 25)); \
         fibers need the node's KVM device, /dev/kvm"
    );
    assert!(stderr(&output).contains("this grant Pod cannot run fibers"), "logged too: {}", stderr(&output));
}

#[test]
fn a_missing_device_or_a_file_fails_with_what_to_do() {
    let pod = Pod::new();
    let missing = pod.path("kvm");
    let output = pod.run(&missing, &[]);
    assert_eq!(output.status.code(), Some(1));
    let message = pod.termination_message();
    assert!(
        message.starts_with(&format!("{}: does not exist in the container: the grant Pod must run privileged", missing.display())),
        "{message}"
    );

    std::fs::write(&missing, "not a device").expect("file");
    let plugin = ["--kvm-device-plugin=devices.kubevirt.io/kvm".to_string()];
    let output = pod.run(&missing, &plugin);
    assert_eq!(output.status.code(), Some(1));
    let message = pod.termination_message();
    assert!(
        message.contains(": not a character device (it is a regular file): the device plugin resource devices.kubevirt.io/kvm"),
        "{message}"
    );
}

#[test]
fn an_unusable_cache_or_a_damaged_fleet_key_fails() {
    require_kvm();
    let pod = Pod::new();
    std::fs::remove_dir(pod.path("cache")).expect("remove the cache dir");
    let output = pod.run(Path::new("/dev/kvm"), &[]);
    assert_eq!(output.status.code(), Some(1));
    let cache = pod.path("cache");
    assert_eq!(
        pod.termination_message(),
        format!(
            "cache directory {}: does not exist: fiberd keeps pulled artifacts there (the grant Pod's `cache` emptyDir volume)",
            cache.display()
        )
    );

    std::fs::create_dir(&cache).expect("cache dir");
    std::fs::write(pod.path("fleet-key/key"), "AGE-SECRET-KEY-NOPE").expect("key");
    let output = pod.run(Path::new("/dev/kvm"), &[]);
    assert_eq!(output.status.code(), Some(1));
    let message = pod.termination_message();
    assert!(message.starts_with(&format!("fleet key: file {}: ", pod.path("fleet-key/key").display())), "{message}");
}

#[test]
fn a_bad_flag_is_a_usage_error() {
    let output = helper().arg("--no-such-flag").output().expect("run fiberd-helper");
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
}
