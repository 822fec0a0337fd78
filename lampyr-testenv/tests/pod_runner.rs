//! The stand-in kubelet reports only what happened: a program that never answers
//! its readiness probe leaves its Pod Running and not Ready, saying why; a failing
//! init container keeps the program from starting and its termination message is
//! the Pod's status; an init container that succeeds runs before the program.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::api::{Api, PostParams};
use lampyr_testenv::cluster::{InitProgram, PodProgram, PodRunner, PodSandbox, init_container};
use lampyr_testenv::{Cluster, require_kvm, workspace_binary};
use serde_json::{Value, json};

/// The label selecting this test's Pods.
const LABEL: &str = "lampyr-testenv.test/pod-runner";
/// The longest the runner may take to act on a Pod.
const PATIENCE: Duration = Duration::from_secs(60);

/// Runs the Pods labelled `LABEL=test`: the `helper` init container as
/// `fiberd-helper` with its arguments, then `sleep`, which never answers a probe.
fn runner(cluster: &'static Cluster, test: &str) -> PodRunner {
    let helper = workspace_binary("lampyr-fiberd", "fiberd-helper");
    let check = move |pod: &Pod, sandbox: &PodSandbox| {
        let container = init_container(pod, "helper")?;
        let mut command = std::process::Command::new(&helper);
        command.args(container.args.iter().flatten().map(|a| sandbox.localize(a)));
        Ok(command)
    };
    let silent = |_: &Pod, _: &PodSandbox| {
        let mut command = std::process::Command::new("sleep");
        command.arg("3600");
        Ok(command)
    };
    let program = PodProgram {
        selector: format!("{LABEL}={test}"),
        name: "silent",
        as_service_account: false,
        init: vec![InitProgram { container: "helper", name: "test-helper", command: Box::new(check) }],
        command: Box::new(silent),
        probe_path: None,
    };
    PodRunner::start(cluster, vec![program])
}

/// A Pod of test `test`: `helper` (checking `kvm_device`) when given, then `main`.
fn pod(name: &str, test: &str, kvm_device: Option<&str>) -> Pod {
    let init = kvm_device.map(|device| {
        json!([{ "name": "helper", "image": "example.com/helper", "terminationMessagePolicy": "FallbackToLogsOnError",
                 "args": [format!("--kvm-device={device}"), "--cache-dir=/var/cache/lampyr", "--termination-log=/dev/termination-log"],
                 "volumeMounts": [{ "name": "cache", "mountPath": "/var/cache/lampyr" }] }])
    });
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": name, "labels": { LABEL: test } },
        "spec": {
            "serviceAccountName": "runner-test",
            "initContainers": init.unwrap_or(json!([])),
            "containers": [{ "name": "main", "image": "example.com/main",
                             "readinessProbe": { "httpGet": { "path": "/ready", "port": 8080 } },
                             "volumeMounts": [{ "name": "cache", "mountPath": "/var/cache/lampyr" }] }],
            "volumes": [{ "name": "cache", "emptyDir": {} }],
        },
    }))
    .expect("a Pod")
}

/// Creates the Pod in `namespace` and waits until its status satisfies `accept`.
async fn create_and_wait(cluster: &Cluster, namespace: &str, pod: Pod, what: &str, accept: impl Fn(&Value) -> bool) -> Value {
    let client = cluster.client().await;
    let pods: Api<Pod> = Api::namespaced(client, namespace);
    let name = pod.metadata.name.clone().unwrap_or_default();
    pods.create(&PostParams::default(), &pod).await.unwrap_or_else(|e| panic!("creating Pod {name}: {e}"));
    let deadline = Instant::now() + PATIENCE;
    loop {
        let found = pods.get(&name).await.unwrap_or_else(|e| panic!("reading Pod {name}: {e}"));
        let status = serde_json::to_value(&found.status).expect("status");
        if accept(&status) {
            return status;
        }
        assert!(Instant::now() < deadline, "Pod {name}: {what} did not happen within {PATIENCE:?}; its status: {status:#}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The status of condition `kind` (`True`/`False`) and its message.
fn condition(status: &Value, kind: &str) -> (String, String) {
    let found = status["conditions"].as_array().into_iter().flatten().find(|c| c["type"] == kind);
    let text = |field: &str| found.and_then(|c| c[field].as_str()).unwrap_or_default().to_string();
    (text("status"), text("message"))
}

async fn namespace_with_account(cluster: &Cluster, prefix: &str) -> String {
    let namespace = cluster.namespace(prefix).await;
    let account: ServiceAccount = serde_json::from_value(json!({ "metadata": { "name": "runner-test" } })).expect("account");
    Api::<ServiceAccount>::namespaced(cluster.client().await, &namespace)
        .create(&PostParams::default(), &account)
        .await
        .expect("create the service account");
    namespace
}

#[tokio::test(flavor = "multi_thread")]
async fn a_program_that_never_answers_is_never_ready() {
    let cluster = Cluster::shared();
    let runner = runner(cluster, "silent");
    let namespace = namespace_with_account(cluster, "runner-silent").await;
    let key = format!("{namespace}/silent");
    let status = create_and_wait(cluster, &namespace, pod("silent", "silent", None), "a failed probe reported", |s| {
        condition(s, "Ready").1.contains("readiness probe GET /ready")
    })
    .await;
    assert_eq!(status["phase"], "Running", "the program runs: {status:#}");
    assert_eq!(condition(&status, "Ready").0, "False");
    assert!(runner.ports().contains_key(&key), "its process runs: {:?}", runner.ports());

    // However many probes fail, it stays not Ready.
    let deadline = Instant::now() + PATIENCE;
    while runner.failed_probes(&key).unwrap_or(0) < 10 {
        assert!(Instant::now() < deadline, "the runner stopped probing: {:?}", runner.failed_probes(&key));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let pods: Api<Pod> = Api::namespaced(cluster.client().await, &namespace);
    let status = serde_json::to_value(&pods.get("silent").await.expect("pod").status).expect("status");
    let (ready, message) = condition(&status, "Ready");
    assert_eq!(ready, "False", "{status:#}");
    assert!(message.starts_with("containers with unready status: [main]: readiness probe GET /ready on 127.0.0.1:"), "{message}");
    assert_eq!(status["containerStatuses"][0]["ready"], false);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_init_container_keeps_the_program_from_starting() {
    let cluster = Cluster::shared();
    let runner = runner(cluster, "init-fails");
    let namespace = namespace_with_account(cluster, "runner-init-fails").await;
    let status =
        create_and_wait(cluster, &namespace, pod("no-kvm", "init-fails", Some("/dev/null")), "the helper's failure reported", |s| {
            s["initContainerStatuses"][0]["state"]["terminated"]["exitCode"] == 1
        })
        .await;
    assert_eq!(
        status["initContainerStatuses"][0]["state"]["terminated"]["message"],
        "/dev/null: not a KVM device: KVM_GET_API_VERSION failed (Inappropriate ioctl for device (os error 25)); \
         fibers need the node's KVM device, /dev/kvm"
    );
    assert_eq!(status["phase"], "Pending");
    assert_eq!(condition(&status, "Initialized").0, "False");
    let (ready, message) = condition(&status, "Ready");
    assert_eq!(ready, "False");
    assert!(message.contains("init container helper failed: /dev/null: not a KVM device"), "{message}");
    assert_eq!(status["containerStatuses"][0]["state"]["waiting"]["reason"], "PodInitializing");
    assert!(!runner.ports().contains_key(&format!("{namespace}/no-kvm")), "the program never started");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_init_container_that_passes_runs_before_the_program() {
    require_kvm();
    let cluster = Cluster::shared();
    let runner = runner(cluster, "init-passes");
    let namespace = namespace_with_account(cluster, "runner-init-passes").await;
    let status =
        create_and_wait(cluster, &namespace, pod("kvm", "init-passes", Some("/dev/kvm")), "the program started after the helper", |s| {
            s["phase"] == "Running"
        })
        .await;
    assert_eq!(status["initContainerStatuses"][0]["state"]["terminated"]["exitCode"], 0, "{status:#}");
    assert_eq!(condition(&status, "Initialized").0, "True");
    assert!(status["containerStatuses"][0]["state"]["running"].is_object(), "{status:#}");
    assert!(runner.ports().contains_key(&format!("{namespace}/kvm")));
    assert_eq!(condition(&status, "Ready").0, "False", "sleep never answers its probe");
}
