//! Knative's own conformance suites, unchanged, against Lampyr installed on a real node
//! (`lampyr_testenv::Node`, as `tests/node.rs` installs it): the Serving API suite
//! (`knative.dev/serving/test/conformance/api/v1`), the runtime suite (`…/runtime`) and
//! the KIngress suite (`knative.dev/networking/test/conformance/ingress`), built from the
//! pinned modules by `scripts/cluster-bins` with `-tags=e2e`, all three at once.
//!
//! The Serving suites' test images are the fiber guests of `examples/conformance`, pushed
//! to the node's registry and named for the suites through the image map
//! (`docs/images.md`); requests enter through fiber-router's NodePort
//! (`GATEWAY_OVERRIDE=fiber-router`, `--ingressendpoint` = the node's address). The KIngress
//! suite runs against fiber-router's own ingress class with its backends as real Pods: the
//! networking test images, built from the pinned module and imported into the node.
//!
//! The results, joined with `docs/conformance-reasons.yaml`, must be exactly the table in
//! `docs/conformance.md`: a test that stops passing, passes without its reason being
//! removed, or fails without a reason fails this test. `LAMPYR_CONFORMANCE_WRITE=1`
//! rewrites the table instead (`scripts/conformance --write`).

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use lampyr_testenv::artifacts::{conformance_artifact, push_artifact};
use lampyr_testenv::conformance::{self, Reasons, SuiteResults};
use lampyr_testenv::node::install_lampyr_with;
use lampyr_testenv::runtime_images::RuntimeImages;
use lampyr_testenv::{Node, repo_root};
use serde_json::json;
use support::{Ly, stderr, text};

/// The guests standing in for upstream's test images, by the image name the suites use.
const GUESTS: [&str; 9] =
    ["helloworld", "pizzaplanetv1", "pizzaplanetv2", "failing", "timeout", "autoscale", "singlethreaded", "runtime", "readiness"];
/// The domain the installation serves Services under.
const DOMAIN: &str = "conformance.example";
/// Largest request body the guests accept (the default of `ly snapshot build`).
const MAX_BODY: u64 = 1 << 20;

/// The KIngress suite's backend images (`knative.dev/networking/test/test_images`).
const NETWORKING_IMAGES: [&str; 6] = ["runtime", "httpproxy", "timeout", "wsserver", "grpc-ping", "retry"];
/// KIngress sub-tests skipped through the suite's own `--skip-tests`, each explained in
/// `docs/conformance-reasons.yaml` (none now: `dispatch/rule`, skipped while fiber-router could
/// not reach Service backends because a failed request of its aborts the suite binary, runs).
const KINGRESS_SKIPPED: &[&str] = &[];
/// The KIngress suite's sub-tests (its `run.go`: 22 stable, 2 beta, 1 alpha), which its totals count.
const KINGRESS_SUBTESTS: [&str; 25] = [
    "basics",
    "basics/http2",
    "grpc",
    "grpc/split",
    "headers/pre-split",
    "headers/post-split",
    "headers/probe",
    "hosts/multiple",
    "dispatch/path",
    "dispatch/percentage",
    "dispatch/path_and_percentage",
    "dispatch/rule",
    "retry",
    "timeout",
    "tls",
    "update",
    "visibility",
    "visibility/split",
    "visibility/path",
    "ingressclass",
    "websocket",
    "websocket/split",
    "host-rewrite",
    "headers/tags",
    "httpoption",
];
/// Where the KIngress suite's images are named (imported into the node, never pulled).
const NETWORKING_REPO: &str = "lampyr.local/knative-networking-test";

/// One upstream suite: its binary in the cluster binaries, its name in the reasons file,
/// and its own flags.
struct Suite {
    binary: &'static str,
    name: &'static str,
    title: &'static str,
    ingress: bool,
}

const SUITES: [Suite; 3] = [
    Suite {
        binary: "conformance-serving-api",
        name: "serving-api",
        title: "Serving API (`knative.dev/serving/test/conformance/api/v1`)",
        ingress: false,
    },
    Suite {
        binary: "conformance-serving-runtime",
        name: "serving-runtime",
        title: "Serving runtime (`knative.dev/serving/test/conformance/runtime`)",
        ingress: false,
    },
    Suite {
        binary: "conformance-ingress",
        name: "kingress",
        title: "KIngress (`knative.dev/networking/test/conformance/ingress`, class `fiber.ingress.networking.knative.dev`)",
        ingress: true,
    },
];

/// The directory of the cluster binaries (`scripts/cluster-bins`), where the suites are.
fn cluster_bins() -> PathBuf {
    let dir = std::env::var_os("LAMPYR_CLUSTER_BINS")
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("LAMPYR_CLUSTER_BINS is not set: run scripts/test or scripts/conformance (they build the suites)"));
    for binary in SUITES.iter().map(|s| s.binary.to_string()).chain(NETWORKING_IMAGES.iter().map(|i| format!("knative-test-image-{i}"))) {
        assert!(dir.join(&binary).is_file(), "{binary} is missing from {}: run scripts/cluster-bins", dir.display());
    }
    dir
}

/// Pushes every guest to the node's registry as `conformance/<name>` and maps the image
/// the suites name (`<registry>/conformance/<name>`) to it.
async fn publish_guests(node: &Node, ly: &Ly<'_>) -> String {
    let registry = node.registry();
    let mut data = serde_json::Map::new();
    for name in GUESTS {
        let artifact = conformance_artifact(name, MAX_BODY);
        let reference = push_artifact(registry, &format!("conformance/{name}"), &artifact).await;
        let image = format!("{}/conformance/{name}", registry.host());
        data.insert(name.to_string(), json!(format!("image: {image}\nartifact: {reference}\n")));
    }
    let map = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": { "name": "image-artifacts", "namespace": "lampyr-system" },
        "data": data,
    });
    apply_json(ly, &map);
    format!("{}/conformance", registry.host())
}

fn apply_json(ly: &Ly<'_>, object: &serde_json::Value) {
    let file = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(file.path(), object.to_string()).expect("write");
    let out = ly.kubectl(&["apply", "-f", support::path(file.path())]);
    assert!(out.status.success(), "kubectl apply: {}", stderr(&out));
}

/// The networking test images, built from the cluster binaries and imported into the node
/// as `NETWORKING_REPO/<name>:latest` (what the suite's `ImagePath` names).
fn import_networking_images(node: &Node, bins: &Path, dir: &Path) {
    for name in NETWORKING_IMAGES {
        let image_dir = dir.join(name);
        std::fs::create_dir_all(&image_dir).expect("image directory");
        let reference = format!("{NETWORKING_REPO}/{name}:latest");
        let source = bins.join(format!("knative-test-image-{name}"));
        let archive = lampyr_testenv::node::binary_image_archive(&reference, &source, &format!("/ko-app/{name}"), &image_dir)
            .unwrap_or_else(|e| panic!("{e}"));
        node.import(&archive).unwrap_or_else(|e| panic!("importing {reference}: {e}"));
    }
}

/// The namespaces, ConfigMap and Secret the suites expect, from the pinned module's `test/config`.
fn apply_test_resources(ly: &Ly<'_>) {
    let modules = lampyr_manifests::KnativeModules::locate(&repo_root().join("knative")).unwrap_or_else(|e| panic!("{e}"));
    for file in ["cluster-resources.yaml", "test-resources.yaml"] {
        let path = modules.serving.dir.join("test/config").join(file);
        let out = ly.kubectl(&["apply", "-f", support::path(&path)]);
        assert!(out.status.success(), "applying {}: {}", path.display(), stderr(&out));
    }
}

/// Runs `suite` to completion; returns its verbose output.
fn run_suite(bins: &Path, suite: &Suite, node: &Node, docker_repo: &str, log: &Path) -> std::thread::JoinHandle<String> {
    let mut command = Command::new(bins.join(suite.binary));
    command
        .args(["-test.v", "-test.timeout=45m", "-test.parallel=32"])
        .arg(format!("-kubeconfig={}", node.cluster().kubeconfig().display()))
        .arg(format!("-ingressendpoint={}", node.address()))
        .arg("-enable-beta");
    if suite.ingress {
        command
            .arg(format!("-dockerrepo={NETWORKING_REPO}"))
            .arg(format!("-ingressClass={}", lampyr_api::keys::FIBER_INGRESS_CLASS))
            .arg("-enable-alpha");
        if !KINGRESS_SKIPPED.is_empty() {
            command.arg(format!("-skip-tests={}", KINGRESS_SKIPPED.join(",")));
        }
    } else {
        command.arg(format!("-dockerrepo={docker_repo}")).arg("-disable-logstream");
    }
    command
        .env("GATEWAY_OVERRIDE", "fiber-router-public")
        .env("GATEWAY_NAMESPACE_OVERRIDE", "lampyr-system")
        .env("SYSTEM_NAMESPACE", "knative-serving")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(log).expect("suite log"))
        .stderr(Stdio::inherit());
    let log = log.to_path_buf();
    let name = suite.binary;
    std::thread::spawn(move || {
        let started = Instant::now();
        let status = command.status().unwrap_or_else(|e| panic!("running {name}: {e}"));
        eprintln!("{name}: {status} after {:.0?}", started.elapsed());
        std::fs::read_to_string(&log).unwrap_or_default()
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn knatives_conformance_suites_give_the_documented_results() {
    let bins = cluster_bins();
    let node = Node::shared();
    let images = RuntimeImages::locate().unwrap_or_else(|e| panic!("{e}"));
    let ly = support::ly(node.cluster());
    let install =
        install_lampyr_with(node, &ly, &images, DOMAIN, &[support::FIBER_ROUTER_INGRESS], &[]).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(install.status.success(), "install failed:\n{}", stderr(&install));
    let docker_repo = publish_guests(node, &ly).await;
    apply_test_resources(&ly);
    let port =
        ly.kubectl(&["get", "service/fiber-router-public", "-n", "lampyr-system", "-o", "jsonpath={.spec.ports[?(@.port==80)].nodePort}"]);
    assert_eq!(text(&port), "30080", "fiber-router-public's port 80 is the suites' ingress NodePort: {}", stderr(&port));

    let logs = Path::new(env!("CARGO_TARGET_TMPDIR")).join("conformance");
    std::fs::create_dir_all(&logs).expect("log directory");
    import_networking_images(node, &bins, &logs.join("images"));
    let started = Instant::now();
    let runs: Vec<_> = SUITES.iter().map(|s| run_suite(&bins, s, node, &docker_repo, &logs.join(format!("{}.log", s.name)))).collect();
    let outputs: Vec<String> = runs.into_iter().map(|r| r.join().expect("suite thread")).collect();
    eprintln!("suites ran in {:.0?}; logs in {}", started.elapsed(), logs.display());
    record_lampyr_system(&ly, &logs.join("lampyr-system.txt"));

    check_against_docs(&outputs, &logs);
}

/// Writes Lampyr's own Pods (readiness, restarts, why the last container ended), the
/// namespace's events, fiber-router's logs (each split Service's endpoint changes) and the
/// suites' own Pods and events to `path`: what a failed request in the suites' logs is read
/// beside (a probe that failed, a router that restarted, a backend that turned unready).
fn record_lampyr_system(ly: &Ly<'_>, path: &Path) {
    let columns = "custom-columns=POD:.metadata.name,READY:.status.containerStatuses[*].ready,\
                   RESTARTS:.status.containerStatuses[*].restartCount,LAST-ENDED:.status.containerStatuses[*].lastState.terminated.reason";
    let commands: [&[&str]; 6] = [
        &["get", "pods", "-n", "lampyr-system", "-o", columns],
        &["get", "events", "-n", "lampyr-system", "--sort-by=.lastTimestamp"],
        &["logs", "-n", "lampyr-system", "-l", "app.kubernetes.io/name=fiber-router", "--prefix", "--tail=-1"],
        &["get", "pods", "-n", SUITES_NAMESPACE, "-o", columns],
        &["get", "events", "-n", SUITES_NAMESPACE, "--sort-by=.lastTimestamp"],
        &["get", "endpointslices", "-n", SUITES_NAMESPACE],
    ];
    let record: String = commands
        .iter()
        .map(|args| {
            let out = ly.kubectl(args);
            format!("$ kubectl {}\n{}{}\n", args.join(" "), text(&out), stderr(&out))
        })
        .collect();
    std::fs::write(path, record).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}

/// The namespace the suites create their Services and Pods in.
const SUITES_NAMESPACE: &str = "serving-tests";

/// Joins the suites' `outputs` with `docs/conformance-reasons.yaml` and checks (or, with
/// `LAMPYR_CONFORMANCE_WRITE`, rewrites) the table in `docs/conformance.md`.
fn check_against_docs(outputs: &[String], logs: &Path) {
    let reasons_path = repo_root().join("docs/conformance-reasons.yaml");
    let reasons: Reasons = serde_yaml::from_str(&std::fs::read_to_string(&reasons_path).expect("reasons file"))
        .unwrap_or_else(|e| panic!("{}: {e}", reasons_path.display()));
    let mut generated = String::new();
    let mut problems = Vec::new();
    for (suite, output) in SUITES.iter().zip(outputs) {
        let units = suite.ingress.then(|| KINGRESS_SUBTESTS.iter().map(|t| format!("TestIngressConformance/{t}")).collect());
        let results =
            SuiteResults { name: suite.name.into(), title: suite.title.into(), results: conformance::parse_verbose(output), units };
        assert!(!results.results.is_empty(), "{} reported no test; its log:\n{output}", suite.binary);
        problems.extend(conformance::disagreements(&results, &reasons));
        generated.push_str(&conformance::render(&results, &reasons));
        generated.push('\n');
    }
    let doc_path = repo_root().join("docs/conformance.md");
    let doc = std::fs::read_to_string(&doc_path).expect("docs/conformance.md");
    let current = conformance::splice(&doc, &generated).expect("docs/conformance.md has the generated marks");
    let write = std::env::var_os("LAMPYR_CONFORMANCE_WRITE").is_some();
    if write {
        std::fs::write(&doc_path, &current).expect("write docs/conformance.md");
        eprintln!("wrote {}", doc_path.display());
    }
    assert!(
        problems.is_empty(),
        "results and docs/conformance-reasons.yaml disagree (logs in {}):\n{}",
        logs.display(),
        problems.join("\n")
    );
    assert!(
        write || current == doc,
        "docs/conformance.md is not current (scripts/conformance --write rewrites it; logs in {}):\n{generated}",
        logs.display()
    );
}

/// The table from the last run's logs, without running the suites again (after editing
/// reasons): `scripts/conformance --rerender`. Fails when the logs are missing.
#[test]
#[ignore = "reads the logs of the last run; scripts/conformance --rerender runs it"]
fn the_last_runs_logs_give_the_documented_results() {
    let logs = Path::new(env!("CARGO_TARGET_TMPDIR")).join("conformance");
    let outputs: Vec<String> = SUITES
        .iter()
        .map(|s| {
            let log = logs.join(format!("{}.log", s.name));
            std::fs::read_to_string(&log).unwrap_or_else(|e| panic!("{}: {e} (run scripts/conformance first)", log.display()))
        })
        .collect();
    check_against_docs(&outputs, &logs);
}
