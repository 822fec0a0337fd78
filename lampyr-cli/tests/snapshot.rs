//! `ly snapshot …` end to end: the real binary, real guests under /dev/kvm,
//! a real registry.

use std::process::{Command, Output};

use lampyr_testenv::{TestRegistry, repo_root, require_kvm};

fn ly(args: &[&str], cache: &std::path::Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ly")).args(args).env("LAMPYR_CACHE_DIR", cache).output().expect("ly runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn build_push_pull_inspect_verify() {
    require_kvm();
    let tmp = tempfile::tempdir().expect("tempdir");
    let cache = tmp.path().join("cache");
    let layout = tmp.path().join("echo");
    let hello = repo_root().join("examples/echo");

    let built = ly(&["snapshot", "build", hello.to_str().expect("utf-8"), "--output", layout.to_str().expect("utf-8")], &cache);
    assert!(built.status.success(), "{}", stderr(&built));
    let digest = stdout(&built);
    assert!(digest.starts_with("sha256:") && digest.len() == 71, "prints the artifact digest: {digest:?}");
    assert!(stderr(&built).contains("==> building guest crate"), "shows progress");

    let verified = ly(&["snapshot", "verify", layout.to_str().expect("utf-8")], &cache);
    assert!(verified.status.success(), "{}", stderr(&verified));
    assert!(stdout(&verified).contains(&digest));

    let registry = TestRegistry::start();
    let repo = format!("http://{}/lampyr/echo", registry.host());
    let pushed = ly(&["snapshot", "push", layout.to_str().expect("utf-8"), &repo], &cache);
    assert!(pushed.status.success(), "{}", stderr(&pushed));
    let reference = stdout(&pushed);
    assert_eq!(reference, format!("{repo}@{digest}"), "prints the digest-pinned reference");

    let inspected = ly(&["snapshot", "inspect", "--json", &reference], &cache);
    assert!(inspected.status.success(), "{}", stderr(&inspected));
    let json: serde_json::Value = serde_json::from_str(&stdout(&inspected)).expect("JSON");
    assert_eq!(json["digest"], digest.as_str());
    assert_eq!(json["metadata"]["abiVersion"], 1);
    assert_eq!(json["fitsHost"], true);
    assert!(json["layout"].as_str().expect("layout").starts_with(cache.to_str().expect("utf-8")), "pulled into the cache");

    // `ly cache` lists the pulled artifact and prunes it under a small limit (no `ly`
    // process uses it any more), leaving the cache empty.
    let shown = ly(&["cache", "show"], &cache);
    assert!(shown.status.success(), "{}", stderr(&shown));
    assert!(
        stdout(&shown).lines().any(|l| l.starts_with("artifact") && l.contains(&digest) && !l.contains("in use")),
        "{}",
        stdout(&shown)
    );
    let pruned = ly(&["cache", "prune", "--max-bytes", "1Ki"], &cache);
    assert!(pruned.status.success(), "{}", stderr(&pruned));
    assert!(stderr(&pruned).contains(&format!("evicted {digest}")), "{}", stderr(&pruned));
    let shown = ly(&["cache", "show"], &cache);
    assert!(!stdout(&shown).contains(&digest), "{}", stdout(&shown));
    let bad = ly(&["cache", "prune", "--max-bytes", "lots"], &cache);
    assert_eq!(bad.status.code(), Some(2), "{}", stderr(&bad));
    assert!(stderr(&bad).contains("is not a size"), "{}", stderr(&bad));

    // The limit applies on its own after a pull: with a limit of 1 KiB, what the pull
    // just brought in is still kept for this `ly` process while it runs, then evictable.
    let limited = Command::new(env!("CARGO_BIN_EXE_ly"))
        .args(["snapshot", "inspect", "--json", &reference])
        .env("LAMPYR_CACHE_DIR", &cache)
        .env("LAMPYR_CACHE_MAX_BYTES", "1Ki")
        .output()
        .expect("ly runs");
    assert!(limited.status.success(), "{}", stderr(&limited));
    let shown = ly(&["cache", "show"], &cache);
    assert!(stdout(&shown).contains(&digest), "the pulled artifact was leased while ly used it:\n{}", stdout(&shown));
}

#[test]
fn bad_references_and_inputs_say_what_is_wrong() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cache = tmp.path().join("cache");
    let unpinned = ly(&["snapshot", "verify", "ghcr.io/team/app:latest"], &cache);
    assert_eq!(unpinned.status.code(), Some(1));
    assert!(stderr(&unpinned).contains("must be pinned by digest"), "{}", stderr(&unpinned));

    let missing = ly(&["snapshot", "build", "/nonexistent/guest", "--output", "/tmp/x"], &cache);
    assert_eq!(missing.status.code(), Some(2));
    assert!(stderr(&missing).contains("neither a guest ELF nor a guest crate directory"), "{}", stderr(&missing));

    let not_layout = ly(&["snapshot", "inspect", tmp.path().to_str().expect("utf-8")], &cache);
    assert_eq!(not_layout.status.code(), Some(1));
    assert!(stderr(&not_layout).contains("oci-layout"), "names the missing file: {}", stderr(&not_layout));
}

#[test]
fn push_and_pull_a_private_registry_with_the_users_docker_login_and_ca() {
    require_kvm();
    let tmp = tempfile::tempdir().expect("tempdir");
    let cache = tmp.path().join("cache");
    let layout = tmp.path().join("echo");
    let echo = repo_root().join("examples/echo");
    let built = ly(&["snapshot", "build", echo.to_str().expect("utf-8"), "--output", layout.to_str().expect("utf-8")], &cache);
    assert!(built.status.success(), "{}", stderr(&built));

    let ca = lampyr_testenv::tls::TestCa::new("private registry CA").expect("a CA");
    let registry = TestRegistry::start_secured(&ca.issue(&["127.0.0.1"]).expect("a certificate"), "dev", "pa55word");
    let ca_file = tmp.path().join("registry-ca.pem");
    std::fs::write(&ca_file, ca.pem()).expect("write CA");
    // What `docker login 127.0.0.1:PORT` writes, in a config directory of the test's own.
    let login = |password: &str| {
        let dir = tmp.path().join(format!("docker-{password}"));
        std::fs::create_dir_all(&dir).expect("docker config dir");
        let auth = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, format!("dev:{password}"));
        let config = serde_json::json!({"auths": {registry.host(): {"auth": auth}}});
        std::fs::write(dir.join("config.json"), config.to_string()).expect("write config.json");
        dir
    };
    let ly_as = |docker_config: &std::path::Path, args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_ly"))
            .args(args)
            .env("LAMPYR_CACHE_DIR", &cache)
            .env("DOCKER_CONFIG", docker_config)
            .env("LAMPYR_REGISTRY_CA", &ca_file)
            .output()
            .expect("ly runs")
    };
    let repo = format!("{}/team/echo", registry.host());
    let refused = ly_as(&login("wrong"), &["snapshot", "push", layout.to_str().expect("utf-8"), &repo]);
    assert!(!refused.status.success(), "a wrong password must fail the push");
    assert!(stderr(&refused).contains("docker login"), "says what to do: {}", stderr(&refused));

    let right = login("pa55word");
    let pushed = ly_as(&right, &["snapshot", "push", layout.to_str().expect("utf-8"), &repo]);
    assert!(pushed.status.success(), "{}", stderr(&pushed));
    let reference = stdout(&pushed);
    let inspected = ly_as(&right, &["snapshot", "inspect", "--json", &reference]);
    assert!(inspected.status.success(), "pulled back with the same login: {}", stderr(&inspected));
}
