//! `ly run` end to end: the real binary serving real fibers on a real socket.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use lampyr_testenv::{LyRun, repo_root, require_kvm};

fn ly() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ly"));
    cmd.env("LAMPYR_CACHE_DIR", std::env::temp_dir().join("lampyr-cli-tests-cache"));
    cmd
}

/// Starts `ly run ARGS` (see [`LyRun`]).
fn start(args: &[&str]) -> LyRun {
    start_in(&std::env::current_dir().expect("a working directory"), args)
}

/// [`start`] with `dir` as the working directory.
fn start_in(dir: &Path, args: &[&str]) -> LyRun {
    LyRun::start(ly(), dir, args)
}

fn client(run: &LyRun, host: &str) -> (reqwest::Client, String) {
    run.client(host)
}

async fn get(c: &reqwest::Client, url: &str) -> (u16, String) {
    let r = c.get(url).send().await.expect("response");
    (r.status().as_u16(), r.text().await.expect("body"))
}

#[tokio::test(flavor = "multi_thread")]
async fn serves_the_hello_example() {
    let run = start(&[repo_root().join("examples/hello").to_str().expect("utf-8")]);
    let (c, url) = client(&run, "hello.default.localhost");
    assert_eq!(get(&c, &format!("{url}/")).await, (200, "Hello Lampyr!\n".to_string()));
    let (c, url) = client(&run, "other.default.localhost");
    assert_eq!(get(&c, &format!("{url}/")).await.0, 404);
}

#[tokio::test(flavor = "multi_thread")]
async fn serves_a_manifest_named_from_inside_its_guest_crate() {
    // `ly run service.yaml` in the crate's directory: the manifest's directory is `.`, not the empty path.
    let run = start_in(&repo_root().join("examples/hello"), &["service.yaml"]);
    let (c, url) = client(&run, "hello.default.localhost");
    assert_eq!(get(&c, &format!("{url}/")).await, (200, "Hello Lampyr!\n".to_string()));
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write manifest");
    path
}

fn hello_artifact(dir: &Path) -> String {
    let out = dir.join("hello-layout");
    let built = ly()
        .args(["snapshot", "build", repo_root().join("examples/hello").to_str().expect("utf-8"), "--output"])
        .arg(&out)
        .output()
        .expect("ly snapshot build");
    assert!(built.status.success(), "{}", String::from_utf8_lossy(&built.stderr));
    format!("{}@{}", out.display(), String::from_utf8_lossy(&built.stdout).trim())
}

fn manifest(name: &str, revision: &str, artifact: &str, target: &str, traffic: &str) -> String {
    format!(
        "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: {name}\nspec:\n  template:\n    metadata:\n      name: {revision}\n      annotations:\n        lampyr.dev/snapshot-artifact: \"{artifact}\"\n    spec:\n      containers:\n        - image: example.com/app\n          env:\n            - name: TARGET\n              value: {target}\n{traffic}"
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn traffic_splits_between_two_loaded_revisions_and_every_tag_has_its_host() {
    require_kvm();
    let dir = tempfile::tempdir().expect("tempdir");
    let artifact = hello_artifact(dir.path());
    let v1 = write(dir.path(), "v1.yaml", &manifest("split", "split-v1", &artifact, "one", ""));
    let traffic = "  traffic:\n    - revisionName: split-v1\n      percent: 90\n      tag: current\n    - latestRevision: true\n      percent: 10\n      tag: candidate\n    - latestRevision: true\n      percent: 0\n      tag: latest\n";
    let v2 = write(dir.path(), "v2.yaml", &manifest("split", "split-v2", &artifact, "two", traffic));
    let run = start(&[v1.to_str().expect("utf-8"), v2.to_str().expect("utf-8")]);
    let (c, url) = client(&run, "split.default.localhost");
    let mut two = 0;
    for _ in 0..300 {
        let (status, body) = get(&c, &format!("{url}/")).await;
        assert_eq!(status, 200);
        two += usize::from(body == "Hello two!\n");
    }
    // p = 0.1 over 300 draws: mean 30, sd 5.2; 9..=55 is beyond 4 sd.
    assert!((9..=55).contains(&two), "10% share measured {two}/300");
    for (host, answer) in [
        ("current-split.default.localhost", "Hello one!\n"),
        ("candidate-split.default.localhost", "Hello two!\n"),
        ("latest-split.default.localhost", "Hello two!\n"),
        ("candidate-split.default.svc.cluster.local", "Hello two!\n"),
    ] {
        let (c, url) = client(&run, host);
        for _ in 0..5 {
            assert_eq!(get(&c, &format!("{url}/")).await, (200, answer.to_string()), "{host}");
        }
    }
    let (c, url) = client(&run, "other-split.default.localhost");
    assert_eq!(get(&c, &format!("{url}/")).await.0, 404, "an unknown tag has no host");
}

#[tokio::test(flavor = "multi_thread")]
async fn watch_swaps_in_a_changed_manifest_without_dropping_requests() {
    require_kvm();
    let dir = tempfile::tempdir().expect("tempdir");
    let artifact = hello_artifact(dir.path());
    let path = write(dir.path(), "svc.yaml", &manifest("watched", "watched-00001", &artifact, "before", ""));
    let run = start(&[path.to_str().expect("utf-8"), "--watch"]);
    let (c, url) = client(&run, "watched.default.localhost");
    assert_eq!(get(&c, &format!("{url}/")).await.1, "Hello before!\n");
    std::thread::sleep(Duration::from_millis(1100)); // a newer mtime than the first load
    write(dir.path(), "svc.yaml", &manifest("watched", "watched-00001", &artifact, "after", ""));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, body) = get(&c, &format!("{url}/")).await;
        assert_eq!(status, 200, "no request fails during the swap: {body}");
        if body == "Hello after!\n" {
            break;
        }
        assert_eq!(body, "Hello before!\n");
        assert!(Instant::now() < deadline, "the change was never swapped in");
    }
}

fn run_fails(manifest_text: &str) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write(dir.path(), "service.yaml", manifest_text);
    let out = ly().args(["run", path.to_str().expect("utf-8"), "--listen", "127.0.0.1:0"]).output().expect("ly runs");
    assert!(!out.status.success(), "ly run must refuse this manifest");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn malformed_yaml_names_the_line() {
    let err = run_fails("apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: bad: worse\nspec: {}\n");
    assert!(err.contains("service.yaml:4:"), "names the file and line: {err}");
}

#[test]
fn an_unsupported_podspec_names_every_field() {
    let text = "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: bad\nspec:\n  template:\n    spec:\n      volumes:\n        - name: data\n      containers:\n        - image: example.com/app\n          workingDir: /srv\n";
    let err = run_fails(text);
    assert!(err.contains("spec.template.spec.volumes"), "{err}");
    assert!(err.contains("spec.template.spec.containers[0].workingDir"), "{err}");
}

#[test]
fn a_revision_failing_its_readiness_probe_is_not_served_and_the_probe_is_named() {
    require_kvm();
    let guest = lampyr_testenv::artifacts::conformance_artifact("readiness", 1 << 20);
    let probe = |path: &str| {
        format!(
            "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: probed\nspec:\n  template:\n    metadata:\n      annotations:\n        lampyr.dev/snapshot-artifact: \"{}@{}\"\n    spec:\n      containers:\n        - image: example.com/readiness\n          readinessProbe:\n            httpGet:\n              path: {path}\n",
            guest.layout.display(),
            guest.digest
        )
    };
    // The guest answers 500 on /query without probe=ok.
    let err = run_fails(&probe("/query"));
    assert!(err.contains("readiness probe GET /query answered 500 (no query)"), "{err}");

    let dir = tempfile::tempdir().expect("tempdir");
    let path = write(dir.path(), "service.yaml", &probe("/healthz/readiness"));
    let run = start(&[path.to_str().expect("utf-8")]);
    assert!(run.base.starts_with("http://"), "a probe the guest passes serves: {}", run.base);
}
