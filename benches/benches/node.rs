//! Lampyr on a real Kubernetes node (`lampyr_testenv::Node`: containerd, runc,
//! kubelet, kube-proxy, CoreDNS), installed by `ly cluster install` from the
//! runtime images `scripts/runtime-images` builds, each figure beside a baseline
//! measured in the same run on the same node:
//!
//! 1. `kubectl apply` of a Knative Service (a copy of the deployed `hello`, pinned to
//!    its artifact and sealed template) until the Service is Ready at its generation.
//!    Baseline: `kubectl apply` of a plain Deployment of a runnable HTTP server image
//!    (Debian's static busybox `httpd`, about 1 MB, with a readiness probe every second)
//!    until it is available: the least a Pod-per-Revision platform pays for a new Revision.
//! 2. Grant Pod start → Ready: from the moment a poll (every 50 ms) first sees the grant
//!    Pod a new Revision asked for to the moment it sees it Ready (its `fiberd-helper`
//!    init container, then fiberd answering `/healthz`). Baseline: the same for the
//!    baseline Deployment's Pod.
//! 3. A cold request through fiber-router's NodePort (the Revision scaled to zero:
//!    `config-autoscaler`'s `scale-to-zero-grace-period` is 2 s here) against warm ones
//!    (the next requests), each timed from the host: NodePort, kube-proxy, fiber-router's
//!    Pod, fiberd's Pod, a fiber. Guest code runs under this machine's emulated KVM
//!    (about 1000× slower than hardware), so the warm figure is dominated by it; the
//!    cold − warm difference is the host-side cost of waking a Revision.
//!
//! Run (root, `/dev/kvm`, what `scripts/setup` installs):
//!
//! ```sh
//! . scripts/env.sh
//! export LAMPYR_CLUSTER_BINS="$(scripts/cluster-bins)"
//! export LAMPYR_RUNTIME_IMAGES=~/.cache/lampyr/images; scripts/runtime-images --out "$LAMPYR_RUNTIME_IMAGES"
//! cargo bench -p lampyr-benches --bench node
//! ```
//!
//! `LAMPYR_BENCH_NODE_SERVICES` (default 5) sets the Services and Deployments of
//! sections 1-2, `LAMPYR_BENCH_COLD` (default 5) the cold requests of section 3.
//! Progress goes to stderr; the table to stdout.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use lampyr_api::Service;
use lampyr_api::conditions::KnativeStatus;
use lampyr_benches::{Samples, Table, fmt_duration, times_baseline, wait_for};
use lampyr_testenv::ly::FIBER_ROUTER_INGRESS;
use lampyr_testenv::ly::{Ly, path, stderr, text};
use lampyr_testenv::node::{NodeIngress, install_lampyr_with};
use lampyr_testenv::runtime_images::RuntimeImages;
use lampyr_testenv::{Node, Serving, repo_root, workspace_binary};
use serde_json::{Value, json};

/// fiber-router's NodePort.
const NODE_PORT: u16 = 30080;
/// The domain Services are served under.
const DOMAIN: &str = "bench.example.org";
/// How often object state is polled.
const POLL: Duration = Duration::from_millis(50);
/// Longest any one step may take.
const PATIENCE: Duration = Duration::from_secs(300);
/// Warm requests after each cold one.
const WARM_PER_COLD: usize = 10;

fn main() {
    lampyr_testenv::require_kvm();
    let services = env_count("LAMPYR_BENCH_NODE_SERVICES", 5);
    let colds = env_count("LAMPYR_BENCH_COLD", 5);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let table = runtime.block_on(async {
        let node = Node::start().unwrap_or_else(|e| panic!("{e}"));
        eprintln!("node: started in {}", fmt_duration(node.start_time()));
        let ly = Ly::new(workspace_binary("lampyr-cli", "ly"), node.cluster());
        let serving = NodeIngress { node: &node, port: NODE_PORT };
        let hello = install_and_deploy(&node, &ly, &serving).await;
        let mut table = Table::default();
        apply_to_ready(&node, &ly, &hello, services, &mut table).await;
        cold_and_warm(&ly, &serving, colds, &mut table).await;
        table
    });
    print!("{}", table.render());
}

fn env_count(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Imports the runtime images, installs Lampyr, shortens the scale-to-zero grace period,
/// deploys `hello`; returns its live Service (to copy).
async fn install_and_deploy(node: &Node, ly: &Ly<'_>, serving: &NodeIngress<'_>) -> Value {
    let images = RuntimeImages::locate().unwrap_or_else(|e| panic!("{e}"));
    let install = install_lampyr_with(node, ly, &images, DOMAIN, &[FIBER_ROUTER_INGRESS], &[]).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(install.status.success(), "install failed:\n{}", stderr(&install));
    ly.healthy_but_cert_manager(serving).await;
    let patch = json!({ "data": { "scale-to-zero-grace-period": "2s" } }).to_string();
    let out = ly.kubectl(&["patch", "configmap/config-autoscaler", "-n", "knative-serving", "--type=merge", "-p", &patch]);
    assert!(out.status.success(), "{}", stderr(&out));
    let deployed = ly.deploy(&[path(&repo_root().join("examples/hello")), "--timeout", "300"]);
    assert!(deployed.status.success(), "deploy failed:\n{}", stderr(&deployed));
    eprintln!("installed and deployed hello");
    let out = ly.kubectl(&["get", "services.serving.knative.dev/hello", "-n", "default", "-o", "json"]);
    serde_json::from_slice(&out.stdout).expect("the hello Service as JSON")
}

/// `kubectl apply -f` of `manifest`, through a file.
fn kubectl_apply(ly: &Ly<'_>, manifest: &Value) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("manifest.json");
    std::fs::write(&file, manifest.to_string()).expect("write");
    let out = ly.kubectl(&["apply", "-f", path(&file)]);
    assert!(out.status.success(), "kubectl apply: {}", stderr(&out));
}

/// When a poll first saw each Pod of `namespace`, and first saw it Ready.
type PodTimes = Arc<Mutex<BTreeMap<String, (Instant, Option<Instant>)>>>;

/// Polls the Pods of `namespace` every [`POLL`] until `stop` is set, recording [`PodTimes`].
fn watch_pods(api: Api<Pod>, times: PodTimes, stop: Arc<std::sync::atomic::AtomicBool>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            if let Ok(pods) = api.list(&ListParams::default()).await {
                let now = Instant::now();
                let mut times = times.lock().unwrap_or_else(|p| p.into_inner());
                for pod in pods.items {
                    let name = pod.metadata.name.clone().unwrap_or_default();
                    let ready =
                        pod.status.and_then(|s| s.conditions).into_iter().flatten().any(|c| c.type_ == "Ready" && c.status == "True");
                    let entry = times.entry(name).or_insert((now, None));
                    if ready && entry.1.is_none() {
                        entry.1 = Some(now);
                    }
                }
            }
            tokio::time::sleep(POLL).await;
        }
    })
}

/// Sections 1 and 2: Services and baseline Deployments, one after another.
async fn apply_to_ready(node: &Node, ly: &Ly<'_>, hello: &Value, n: usize, table: &mut Table) {
    let client = node.cluster().client().await;
    let namespace = node.cluster().namespace("bench").await;
    let services: Api<Service> = Api::namespaced(client.clone(), &namespace);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &namespace);
    let times: PodTimes = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = watch_pods(Api::namespaced(client.clone(), &namespace), times.clone(), stop.clone());
    let busybox = node.system_images().busybox.clone();

    let (mut ready, mut available) = (Vec::new(), Vec::new());
    for i in 0..n {
        let mut service = json!({ "apiVersion": "serving.knative.dev/v1", "kind": "Service",
            "metadata": { "name": format!("svc-{i}"), "namespace": namespace }, "spec": { "template": hello["spec"]["template"].clone() } });
        service["spec"]["template"]["spec"]["containers"][0]["env"] = json!([{ "name": "TARGET", "value": format!("svc-{i}") }]);
        let started = Instant::now();
        kubectl_apply(ly, &service);
        wait_for(&format!("Service svc-{i} Ready"), POLL, PATIENCE, async || {
            let s = services.get(&format!("svc-{i}")).await.ok()?;
            s.status.as_ref().is_some_and(|st| st.is_ready(s.metadata.generation)).then_some(())
        })
        .await;
        ready.push(started.elapsed());
        eprintln!("Service svc-{i}: Ready after {}", fmt_duration(started.elapsed()));

        let deployment = json!({ "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": { "name": format!("pods-{i}"), "namespace": namespace },
            "spec": { "selector": { "matchLabels": { "app": format!("pods-{i}") } }, "template": {
                "metadata": { "labels": { "app": format!("pods-{i}") } },
                "spec": { "containers": [{ "name": "httpd", "image": busybox, "imagePullPolicy": "Never",
                    "args": ["httpd", "-f", "-p", "8080", "-h", "/tmp"],
                    "readinessProbe": { "tcpSocket": { "port": 8080 }, "periodSeconds": 1 } }] } } } });
        let started = Instant::now();
        kubectl_apply(ly, &deployment);
        wait_for(&format!("Deployment pods-{i} available"), POLL, PATIENCE, async || {
            let d = deployments.get(&format!("pods-{i}")).await.ok()?;
            (d.status?.available_replicas? >= 1).then_some(())
        })
        .await;
        available.push(started.elapsed());
        eprintln!("Deployment pods-{i}: available after {}", fmt_duration(started.elapsed()));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = watcher.await;
    let (ready, available) = (Samples(ready), Samples(available));
    table.row(
        &format!("kubectl apply → Service Ready on the node (median of {n})"),
        fmt_duration(ready.median()),
        "-",
        times_baseline(ready.median(), available.median()),
    );
    table.row(
        "   baseline: kubectl apply → plain Deployment available (busybox httpd)",
        fmt_duration(available.median()),
        "-",
        "1×".into(),
    );

    let times = times.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let started = |prefix: &str| {
        Samples(
            times
                .iter()
                .filter(|(name, _)| name.starts_with(prefix))
                .filter_map(|(_, (seen, ready))| Some(ready.as_ref()?.duration_since(*seen)))
                .collect(),
        )
    };
    // Grant Pods are named after their grant (`<revision>-<instance>`); baseline Pods after their Deployment.
    let (grant, plain) = (started("svc-"), started("pods-"));
    table.row(
        &format!("grant Pod seen → Ready (median of {})", grant.0.len()),
        fmt_duration(grant.median()),
        "-",
        times_baseline(grant.median(), plain.median()),
    );
    table.row(
        &format!("   baseline: plain Pod seen → Ready (median of {})", plain.0.len()),
        fmt_duration(plain.median()),
        "-",
        "1×".into(),
    );
}

/// Section 3: cold requests (Revision at zero) against warm ones, through the NodePort.
async fn cold_and_warm(ly: &Ly<'_>, serving: &NodeIngress<'_>, n: usize, table: &mut Table) {
    let host = format!("hello.default.{DOMAIN}");
    let (mut cold, mut warm) = (Vec::new(), Vec::new());
    for round in 0..n {
        wait_for("hello-00001 scaled to zero (Active=False)", POLL, PATIENCE, async || {
            let out = ly.kubectl(&[
                "get",
                "revisions.serving.knative.dev/hello-00001",
                "-n",
                "default",
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Active\")].status}",
            ]);
            (text(&out) == "False").then_some(())
        })
        .await;
        let started = Instant::now();
        let (status, body) = serving.get(&host, "/").await.unwrap_or_else(|e| panic!("{e}"));
        let took = started.elapsed();
        assert_eq!((status, body.as_str()), (200, "Hello Lampyr!\n"), "cold request {round}");
        cold.push(took);
        for _ in 0..WARM_PER_COLD {
            let started = Instant::now();
            let (status, _) = serving.get(&host, "/").await.unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(status, 200);
            warm.push(started.elapsed());
        }
        eprintln!("round {round}: cold {}", fmt_duration(took));
    }
    let (cold, warm) = (Samples(cold), Samples(warm));
    table.row(
        &format!("cold request through the NodePort (median of {n})"),
        fmt_duration(cold.median()),
        "-",
        times_baseline(cold.median(), warm.median()),
    );
    table.row(&format!("   baseline: warm request (median of {})", warm.0.len()), fmt_duration(warm.median()), "-", "1×".into());
    table.row(
        "   cold − warm: waking the Revision (host side + one fiber start)",
        fmt_duration(cold.median().saturating_sub(warm.median())),
        "-",
        "-".into(),
    );
}
