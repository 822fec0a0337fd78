//! Knative Eventing delivering to fibers on a real Kubernetes node (`lampyr_testenv::Node`),
//! installed by `ly cluster install --eventing` from the runtime images `scripts/runtime-images`
//! builds: an event sent to the default Broker until the subscriber's reply event is back,
//! for a Service at zero beside the same event to a warm Service, in the same run.
//!
//! Two copies of `examples/events`: `events` (min-scale 0, `scale-to-zero-grace-period` 2 s)
//! and `events-warm` (min-scale 1). Each round waits until `events` is at zero, then sends
//! one `dev.lampyr.greet` event for each (a Trigger filter on `source` picks the Service) to
//! the Broker's ingress through the API server's service proxy, and times, from the host,
//! until the `dev.lampyr.greeting` reply reaches a JobSink through the Broker (seen by a watch
//! on the Secrets the JobSink keeps). Both paths cross the same ingress, channel, filter,
//! reply and sink; the difference is waking the Revision. Guest code runs under this
//! machine's emulated KVM, so the warm figure includes that guest time too.
//!
//! Run (root, `/dev/kvm`, what `scripts/setup` installs):
//!
//! ```sh
//! . scripts/env.sh
//! export LAMPYR_CLUSTER_BINS="$(scripts/cluster-bins)"
//! export LAMPYR_RUNTIME_IMAGES=~/.cache/lampyr/images; scripts/runtime-images --out "$LAMPYR_RUNTIME_IMAGES"
//! cargo bench -p lampyr-benches --bench eventing
//! ```
//!
//! `LAMPYR_BENCH_EVENTS` (default 10) sets the rounds. Progress goes to stderr; the table to stdout.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{WatchEvent, WatchParams};
use lampyr_benches::{Samples, Table, fmt_duration, times_baseline, wait_for};
use lampyr_testenv::eventing::{JOB_SINK_NAME_LABEL, send_to_broker};
use lampyr_testenv::ly::FIBER_ROUTER_INGRESS;
use lampyr_testenv::ly::{Ly, path, stderr, text};
use lampyr_testenv::node::{NodeIngress, install_lampyr_with};
use lampyr_testenv::runtime_images::RuntimeImages;
use lampyr_testenv::{Node, repo_root, workspace_binary};
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// fiber-router's NodePort.
const NODE_PORT: u16 = 30080;
/// The domain Services are served under.
const DOMAIN: &str = "events.example.org";
/// How often object state is polled.
const POLL: Duration = Duration::from_millis(50);
/// Longest any one step may take.
const PATIENCE: Duration = Duration::from_secs(300);
/// The JobSink the replies reach.
const SINK: &str = "replies";

fn main() {
    lampyr_testenv::require_kvm();
    let rounds = std::env::var("LAMPYR_BENCH_EVENTS").ok().and_then(|v| v.parse().ok()).unwrap_or(10);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let table = runtime.block_on(async {
        let node = Node::start().unwrap_or_else(|e| panic!("{e}"));
        eprintln!("node: started in {}", fmt_duration(node.start_time()));
        let ly = Ly::new(workspace_binary("lampyr-cli", "ly"), node.cluster());
        let serving = NodeIngress { node: &node, port: NODE_PORT };
        let images = RuntimeImages::locate().unwrap_or_else(|e| panic!("{e}"));
        set_up(&node, &ly, &serving, &images).await;
        let mut table = Table::default();
        cold_and_warm(&ly, rounds, &mut table).await;
        table
    });
    print!("{}", table.render());
}

/// Installs Lampyr with Eventing, deploys the two Services, and applies the Broker, the
/// Triggers and the JobSink.
async fn set_up(node: &Node, ly: &Ly<'_>, serving: &NodeIngress<'_>, images: &RuntimeImages) {
    let install =
        install_lampyr_with(node, ly, images, DOMAIN, &[FIBER_ROUTER_INGRESS], &["--eventing"]).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(install.status.success(), "install failed:\n{}", stderr(&install));
    ly.healthy_but_cert_manager(serving).await;
    let patch = json!({ "data": { "scale-to-zero-grace-period": "2s" } }).to_string();
    let out = ly.kubectl(&["patch", "configmap/config-autoscaler", "-n", "knative-serving", "--type=merge", "-p", &patch]);
    assert!(out.status.success(), "{}", stderr(&out));
    let example = repo_root().join("examples/events");
    let deployed = ly.deploy(&[path(&example), "--timeout", "300"]);
    assert!(deployed.status.success(), "deploy failed:\n{}", stderr(&deployed));
    // The warm copy runs the artifact the first deploy pushed (pinned, as a second Revision is).
    let annotation = "jsonpath={.spec.template.metadata.annotations.lampyr\\.dev/snapshot-artifact}";
    let live = ly.kubectl(&["get", "services.serving.knative.dev/events", "-n", "default", "-o", annotation]);
    let artifact = text(&live);
    assert!(!artifact.is_empty(), "the deploy pinned events' artifact: {}", stderr(&live));
    let service = std::fs::read_to_string(example.join("service.yaml")).expect("read service.yaml");
    let warm = service.replace("name: events", "name: events-warm").replace(
        "        autoscaling.knative.dev/min-scale: \"0\"\n",
        &format!("        autoscaling.knative.dev/min-scale: \"1\"\n        lampyr.dev/snapshot-artifact: {artifact}\n"),
    );
    assert!(warm.contains("min-scale: \"1\""), "examples/events/service.yaml sets min-scale 0");
    let dir = tempfile::tempdir().expect("tempdir");
    let warm_file = dir.path().join("service.yaml");
    std::fs::write(&warm_file, warm).expect("write");
    let deployed = ly.deploy(&[path(&warm_file), "--timeout", "300"]);
    assert!(deployed.status.success(), "deploy of events-warm failed:\n{}", stderr(&deployed));
    eprintln!("installed with Eventing; deployed events (min-scale 0) and events-warm (min-scale 1)");

    let trigger = |name: &str, source: &str, service: &str| {
        json!({
            "apiVersion": "eventing.knative.dev/v1", "kind": "Trigger",
            "metadata": { "name": name, "namespace": "default" },
            "spec": {
                "broker": "default",
                "filter": { "attributes": { "type": "dev.lampyr.greet", "source": source } },
                "subscriber": { "ref": { "apiVersion": "serving.knative.dev/v1", "kind": "Service", "name": service } },
            },
        })
    };
    let objects = [
        json!({ "apiVersion": "eventing.knative.dev/v1", "kind": "Broker", "metadata": { "name": "default", "namespace": "default" } }),
        json!({
            "apiVersion": "sinks.knative.dev/v1alpha1", "kind": "JobSink",
            "metadata": { "name": SINK, "namespace": "default" },
            "spec": { "job": { "spec": { "template": { "spec": {
                "restartPolicy": "Never",
                "containers": [{ "name": "ack", "image": images.get("fiber-router").reference, "args": ["--help"] }],
            } } } } },
        }),
        trigger("cold", "/bench/cold", "events"),
        trigger("warm", "/bench/warm", "events-warm"),
        json!({
            "apiVersion": "eventing.knative.dev/v1", "kind": "Trigger",
            "metadata": { "name": "greetings", "namespace": "default" },
            "spec": {
                "broker": "default", "filter": { "attributes": { "type": "dev.lampyr.greeting" } },
                "subscriber": { "ref": { "apiVersion": "sinks.knative.dev/v1alpha1", "kind": "JobSink", "name": SINK } },
            },
        }),
    ];
    for object in &objects {
        let file = dir.path().join("object.json");
        std::fs::write(&file, object.to_string()).expect("write");
        let out = ly.kubectl(&["apply", "-f", path(&file)]);
        assert!(out.status.success(), "kubectl apply {object}: {}", stderr(&out));
    }
    wait_for("the Broker, the Triggers and the JobSink Ready", POLL, PATIENCE, async || {
        let ready = "jsonpath={range .items[*]}{.status.conditions[?(@.type==\"Ready\")].status}{\" \"}{end}";
        let kinds = "brokers.eventing.knative.dev,triggers.eventing.knative.dev,jobsinks.sinks.knative.dev";
        let out = ly.kubectl(&["get", kinds, "-n", "default", "-o", ready]);
        let states: Vec<String> = text(&out).split_whitespace().map(str::to_string).collect();
        (states.len() == 5 && states.iter().all(|s| s == "True")).then_some(())
    })
    .await;
}

/// Each round: `events` at zero, then one event to each Service, timed to its reply.
async fn cold_and_warm(ly: &Ly<'_>, rounds: usize, table: &mut Table) {
    let mut replies = watch_replies(ly).await;
    let (mut cold, mut warm) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        wait_for("events-00001 scaled to zero (Active=False)", POLL, PATIENCE, async || {
            let condition = "jsonpath={.status.conditions[?(@.type==\"Active\")].status}";
            let out = ly.kubectl(&["get", "revisions.serving.knative.dev/events-00001", "-n", "default", "-o", condition]);
            (text(&out) == "False").then_some(())
        })
        .await;
        let took = event_to_reply(ly, &mut replies, &format!("cold-{round}"), "/bench/cold").await;
        cold.push(took);
        let warm_took = event_to_reply(ly, &mut replies, &format!("warm-{round}"), "/bench/warm").await;
        warm.push(warm_took);
        eprintln!("round {round}: at zero {}, warm {}", fmt_duration(took), fmt_duration(warm_took));
    }
    let (cold, warm) = (Samples(cold), Samples(warm));
    for (label, p) in [("p50", 50.0), ("p99", 99.0)] {
        let (c, w) = (cold.percentile(p), warm.percentile(p));
        table.row(&format!("event → Service at zero → reply back, {label} of {rounds}"), fmt_duration(c), "-", times_baseline(c, w));
        table.row(&format!("   baseline: the same event to a warm Service, {label}"), fmt_duration(w), "-", "1×".into());
    }
    table.row(
        "   at zero − warm (p50): waking the Revision (host side + one fiber start)",
        fmt_duration(cold.median().saturating_sub(warm.median())),
        "-",
        "-".into(),
    );
}

/// The ids of replies the JobSink kept, each with when the watch saw its Secret appear.
async fn watch_replies(ly: &Ly<'_>) -> mpsc::Receiver<(String, Instant)> {
    let api: Api<Secret> = Api::namespaced(ly.cluster.client().await, "default");
    let params = WatchParams::default().labels(&format!("{JOB_SINK_NAME_LABEL}={SINK}"));
    let (sender, receiver) = mpsc::channel(64);
    let mut stream = api.watch(&params, "0").await.unwrap_or_else(|e| panic!("watching Secrets: {e}")).boxed();
    tokio::spawn(async move {
        while let Some(event) = stream.next().await {
            let Ok(WatchEvent::Added(secret)) = event else { continue };
            let seen = Instant::now();
            let id = secret
                .data
                .and_then(|d| d.get("event").and_then(|e| serde_json::from_slice::<Value>(&e.0).ok()))
                .and_then(|e| e["id"].as_str().map(str::to_string))
                .unwrap_or_default();
            if sender.send((id, seen)).await.is_err() {
                return;
            }
        }
    });
    receiver
}

/// Sends greet event `id` from `source` to the Broker; returns the time until its reply is seen.
async fn event_to_reply(ly: &Ly<'_>, replies: &mut mpsc::Receiver<(String, Instant)>, id: &str, source: &str) -> Duration {
    let event = json!({
        "specversion": "1.0", "id": id, "source": source, "type": "dev.lampyr.greet",
        "datacontenttype": "application/json", "data": { "name": id },
    });
    let started = Instant::now();
    send_to_broker(ly.cluster, "default", "default", &event).await.unwrap_or_else(|e| panic!("{e}"));
    let wanted = format!("{id}-greeting");
    let mut others = BTreeMap::new();
    loop {
        let next = tokio::time::timeout_at((started + PATIENCE).into(), replies.recv()).await;
        match next {
            Ok(Some((seen_id, seen))) if seen_id == wanted => return seen.duration_since(started),
            Ok(Some((other, seen))) => {
                others.insert(other, seen);
            }
            Ok(None) => panic!("the watch on the JobSink's Secrets ended"),
            Err(_) => panic!("no reply {wanted} within {PATIENCE:?} (others seen: {:?})", others.keys().collect::<Vec<_>>()),
        }
    }
}
