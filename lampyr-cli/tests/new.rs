//! `ly new` end to end: a crate created in a temporary directory outside the checkout
//! passes its own host-side tests with plain `cargo test`, builds for fibers, and is
//! served by `ly run` (and answers `ly call`) with its template's answers. One test per
//! template; new crates share the SDK's compiled dependencies through the cache.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use lampyr_testenv::LyRun;

fn ly() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ly"));
    cmd.env("LAMPYR_CACHE_DIR", std::env::temp_dir().join("lampyr-cli-tests-cache"));
    cmd
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// `ly new PARENT/NAME --template TEMPLATE --sdk SDK`, checked to succeed.
fn ly_new(parent: &Path, name: &str, template: &str, sdk: &str) -> PathBuf {
    let dir = parent.join(name);
    let out = ly().arg("new").arg(&dir).args(["--template", template, "--sdk", sdk]).output().expect("ly runs");
    assert!(out.status.success(), "ly new failed:\n{}", text(&out));
    assert!(text(&out).contains(&format!("ly run {}", dir.display())), "it says how to serve it:\n{}", text(&out));
    dir
}

/// A plain `cargo` as a user runs it in `dir`: none of this test's cargo settings, and a
/// target directory shared by this suite's new crates (their dependencies build once).
fn user_cargo(dir: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new("cargo");
    for (key, _) in std::env::vars_os() {
        let name = key.to_string_lossy();
        if (name.starts_with("CARGO") && name != "CARGO_HOME") || name == "RUSTFLAGS" {
            cmd.env_remove(key);
        }
    }
    cmd.current_dir(dir).args(args).env("CARGO_TARGET_DIR", std::env::temp_dir().join("lampyr-new-tests-host-target"));
    cmd.output().expect("cargo runs")
}

/// The crate's own tests pass on the host, and `cargo run -- METHOD PATH` answers one request.
fn host_side_works(dir: &Path, request: &[&str], expected: &str) {
    let tests = user_cargo(dir, &["test", "--quiet"]);
    assert!(tests.status.success(), "cargo test in the new crate failed:\n{}", text(&tests));
    assert!(text(&tests).contains("test result: ok"), "its tests ran:\n{}", text(&tests));
    let mut args = vec!["run", "--quiet", "--"];
    args.extend(request);
    let one = user_cargo(dir, &args);
    assert!(one.status.success() && text(&one).contains(expected), "cargo run -- {request:?}:\n{}", text(&one));
}

fn outside_the_checkout() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("a temp dir");
    assert!(!dir.path().starts_with(lampyr_testenv::repo_root()), "{} is outside the checkout", dir.path().display());
    dir
}

async fn fetch(run: &LyRun, host: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    let (client, url) = run.client(host);
    let method = reqwest::Method::from_bytes(method.as_bytes()).expect("a method");
    let response = client.request(method, format!("{url}{path}")).body(body.to_string()).send().await.expect("a response");
    (response.status().as_u16(), response.text().await.expect("a body"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_hello_service_builds_tests_and_serves() {
    let parent = outside_the_checkout();
    let dir = ly_new(parent.path(), "greeter", "hello", "auto");
    host_side_works(&dir, &["GET", "/"], "Hello World!");
    let run = LyRun::start(ly(), parent.path(), &["greeter"]);
    assert_eq!(fetch(&run, "greeter.default.localhost", "GET", "/", "").await, (200, "Hello Lampyr!\n".to_string()));
    drop(run);
    let called = ly().current_dir(&dir).args(["call", ".", "/"]).output().expect("ly runs");
    assert!(called.status.success(), "ly call:\n{}", text(&called));
    assert_eq!(String::from_utf8_lossy(&called.stdout), "Hello Lampyr!\n", "one request to the real fiber, its body on stdout");
    let included = ly().args(["call", "-i"]).arg(&dir).args(["HEAD", "/"]).output().expect("ly runs");
    let head = String::from_utf8_lossy(&included.stdout).to_ascii_lowercase();
    assert!(included.status.success() && head.starts_with("200 ok\n") && head.contains("\ncontent-type: "), "{}", text(&included));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_json_api_service_with_the_vendored_sdk_builds_tests_and_serves() {
    let parent = outside_the_checkout();
    let dir = ly_new(parent.path(), "shop", "json-api", "vendored");
    assert!(dir.join("vendor/lampyr-guest/Cargo.toml").is_file(), "the SDK is in the crate");
    host_side_works(&dir, &["GET", "/items/3"], r#"{"id":3,"name":"wick","priceCents":75}"#);
    let run = LyRun::start(ly(), &dir, &["."]);
    let host = "shop.default.localhost";
    assert_eq!(fetch(&run, host, "GET", "/items/3", "").await, (200, r#"{"id":3,"name":"wick","priceCents":75}"#.to_string()));
    let (status, body) = fetch(&run, host, "POST", "/orders", r#"{"item": 2, "quantity": 3}"#).await;
    assert!(status == 200 && body.ends_with(r#""quantity":3,"totalCents":1350}"#), "{status} {body}");
    let (status, body) = fetch(&run, host, "POST", "/orders", r#"{"item": 2}"#).await;
    assert!(status == 400 && body.contains("missing field `quantity`"), "a bad body is a JSON 400: {status} {body}");
    let (status, _) = fetch(&run, host, "DELETE", "/items", "").await;
    assert_eq!(status, 405);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_echo_service_builds_tests_and_serves() {
    let parent = outside_the_checkout();
    let dir = ly_new(parent.path(), "mirror", "echo", "auto");
    host_side_works(&dir, &["POST", "/x?y=1", "hi"], "method: POST\npath: /x\nquery: y=1\nbody-length: 2\n\nhi");
    let run = LyRun::start(ly(), parent.path(), &[dir.join("service.yaml").to_str().expect("utf-8")]);
    let (status, body) = fetch(&run, "mirror.default.localhost", "PUT", "/a?b=c", "payload").await;
    assert_eq!(status, 200);
    assert!(body.starts_with("method: PUT\npath: /a\nquery: b=c\n") && body.ends_with("body-length: 7\n\npayload"), "{body}");
}

/// What cargo compiled for `ly snapshot build DIR` with the cache at `cache`, from its progress lines.
fn compiled_by_snapshot_build(cache: &Path, dir: &Path) -> Vec<String> {
    let layout = dir.with_extension("layout");
    let out = ly().env("LAMPYR_CACHE_DIR", cache).args(["snapshot", "build"]).arg(dir).arg("--output").arg(&layout).output();
    let out = out.expect("ly runs");
    assert!(out.status.success(), "ly snapshot build {}:\n{}", dir.display(), text(&out));
    text(&out).lines().filter_map(|l| l.strip_prefix("==>   compiled ")).map(str::to_string).collect()
}

#[test]
fn new_crates_share_the_sdks_compiled_dependencies() {
    let parent = outside_the_checkout();
    let cache = parent.path().join("cache");
    let first = ly_new(parent.path(), "first", "hello", "auto");
    let compiled = compiled_by_snapshot_build(&cache, &first);
    for name in ["serde_json", "lampyr_guest", "first"] {
        assert!(compiled.iter().any(|c| c == name), "a cold build compiles {name}: {compiled:?}");
    }
    let second = ly_new(parent.path(), "second", "hello", "auto");
    assert_eq!(compiled_by_snapshot_build(&cache, &second), ["second"], "the next new crate compiles only itself");
    let elf = second.join("target/x86_64-unknown-none/release/second");
    assert!(elf.is_file(), "the guest ELF is in the crate's own target/");
    assert!(!second.join("target/x86_64-unknown-none/release/deps").exists(), "intermediate outputs are in the cache");
    let shown = ly().env("LAMPYR_CACHE_DIR", &cache).args(["cache", "show"]).output().expect("ly runs");
    assert!(text(&shown).lines().any(|l| l.starts_with("build") && l.contains("cargo-build")), "{}", text(&shown));
    let pruned = ly().env("LAMPYR_CACHE_DIR", &cache).args(["cache", "prune", "--max-bytes", "0"]).output().expect("ly runs");
    assert!(pruned.status.success(), "{}", text(&pruned));
    assert!(!cache.join("run/cargo-build").exists(), "pruning evicts the shared build when no ly builds:\n{}", text(&pruned));
}

#[test]
fn a_name_that_cannot_be_a_service_is_refused_and_nothing_is_written() {
    let parent = outside_the_checkout();
    let out = ly().arg("new").arg(parent.path().join("My_Shop")).output().expect("ly runs");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("\"My_Shop\" cannot name a service"), "{}", text(&out));
    assert_eq!(std::fs::read_dir(parent.path()).expect("the parent").count(), 0, "nothing was created");
}

#[test]
fn ly_call_exits_1_for_a_5xx_and_still_prints_the_answer() {
    let panicking = lampyr_testenv::test_guest_artifact("panic", 1024 * 1024);
    let dir = tempfile::tempdir().expect("a temp dir");
    let service = format!(
        "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: crashy\nspec:\n  template:\n    metadata:\n      \
         annotations:\n        lampyr.dev/snapshot-artifact: {}@{}\n    spec:\n      containers:\n        - image: crashy\n",
        panicking.layout.display(),
        panicking.digest
    );
    std::fs::write(dir.path().join("service.yaml"), service).expect("write service.yaml");
    let called = ly().arg("call").arg("-i").arg(dir.path()).arg("/panic").output().expect("ly runs");
    assert_eq!(called.status.code(), Some(1), "a 502 from the fiber fails the command:\n{}", text(&called));
    let out = String::from_utf8_lossy(&called.stdout).to_ascii_lowercase();
    assert!(out.starts_with("502 bad gateway\n") && out.contains("the guest crashed"), "the answer is printed: {}", text(&called));
    let fine = ly().arg("call").arg(dir.path()).arg("/").output().expect("ly runs");
    assert!(fine.status.success(), "{}", text(&fine));
    assert_eq!(String::from_utf8_lossy(&fine.stdout), "still alive\n");
    let elf = ly().arg("call").arg(lampyr_testenv::test_guest_elf("panic")).arg("/").output().expect("ly runs");
    assert_eq!(elf.status.code(), Some(2), "{}", text(&elf));
    assert!(text(&elf).contains("is not a Service YAML"), "a guest ELF given as the manifest is named as such: {}", text(&elf));
}
