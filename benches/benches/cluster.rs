//! Lampyr's control plane end to end in the cluster test environment
//! ([`LampyrStack`]: real kube-apiserver and etcd, upstream Knative webhook and
//! composed controller, lampyr-controller, the grant controller, fiber-router,
//! fiberd processes standing in for grant Pods, a real OCI registry), each
//! figure beside a baseline measured in the same run:
//!
//! 1. `kubectl apply` of a Knative Service (the `hello` example) until a watch
//!    sees the Service Ready at its generation, one after another. Baseline:
//!    `kubectl apply` of a ConfigMap until a GET reads it back, the floor any
//!    object pays here (kubectl's start and discovery, TLS, admission, etcd).
//! 2. Reconcile throughput: Services created at once through the API (server-side
//!    apply, [`CREATE_CONCURRENCY`] requests in flight) until a watch has seen every
//!    one Ready. Baseline: as many ConfigMaps created the same way until the
//!    watch has seen them all (the API server's and this client's own rate).
//!    The watch events the API server sent during the Services' burst are
//!    reported too, with the share of them that were Homes.
//! 3. A traffic change (`spec.traffic` patched from 100% on one Revision to 100%
//!    on the other, both kept warm with `min-scale: 1`) until fiber-router
//!    answers from the new Revision (timed to the sending of the first such
//!    request, so the request's own time is not counted). Baseline: the same
//!    patch until a watch sees the Service Ready at its new generation, the
//!    control plane's part (fiber-router swaps its table before it reports the
//!    KIngress Ready, so it should come first); the ratio is router
//!    propagation over control-plane time.
//!
//! 4. A new Revision of an existing Service (its template's `TARGET` changed by a
//!    patch through the API) until a watch sees the Service Ready at its new
//!    generation, with the grant Pods started meanwhile counted (the Revision is
//!    placed on the namespace's shared grant, whose Pod already runs). Baseline:
//!    the same kind of patch of a ConfigMap through the API until a GET reads it back.
//!
//! 5. Density: [`LAMPYR_BENCH_DENSITY`] Services (min-scale 0, as created) in one
//!    namespace, created at once, until all are Ready; then the grant Pods holding
//!    them, the API objects per Revision in the namespace, and the resident memory of
//!    the shared grant's fiberd, when holding one Revision and all of them, and again
//!    once every Revision is back at zero warm fibers. Baseline: as many ConfigMaps
//!    created the same way until a watch has seen them all.
//!
//! Each section has a namespace of its own, deleted (and its fiberd processes
//! gone) before the next starts.
//!
//! Run (the environment's binaries are cached by `scripts/cluster-bins`):
//!
//! ```sh
//! . scripts/env.sh
//! export LAMPYR_CLUSTER_BINS="$(scripts/cluster-bins)"
//! cargo bench -p lampyr-benches --bench cluster
//! ```
//!
//! The stack's own binaries (lampyr-controller, fiber-router, fiberd, …) are
//! built optimized on first use, beside this one in `target/release`
//! (`lampyr_testenv::workspace_binary`). Needs `/dev/kvm` (fails loudly
//! without it) and what `scripts/setup` installs.
//! `LAMPYR_BENCH_SERVICES` (default 20) sets the Services of section 1,
//! `LAMPYR_BENCH_BURST` (default 200) those of section 2, and
//! `LAMPYR_BENCH_TRAFFIC` (default 10) the traffic changes of section 3, and
//! `LAMPYR_BENCH_REVISIONS` (default 20) the new Revisions of section 4, and
//! `LAMPYR_BENCH_DENSITY` (default 1000) the Services of section 5; a count of 0 skips its
//! section. `LAMPYR_APISERVER_PROFILING=DIR` starts the API server with `--profiling` and
//! writes its CPU profile over the first 30 s of section 2 to `DIR/kube-apiserver.pprof`.
//! Progress is logged to stderr (`RUST_LOG`, default `cluster=info`); the table goes to stdout.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::path::Path;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, WatchEvent, WatchParams};
use kube::{Resource, ResourceExt};
use lampyr_api::Service;
use lampyr_api::conditions::KnativeStatus;
use lampyr_benches::{Samples, Table, fmt_duration, times_baseline};
use lampyr_testenv::{LampyrStack, Serving, knative_service};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// How often a single object's state is polled (a GET each time).
const POLL: Duration = Duration::from_millis(20);
/// Creation requests in flight at once in section 2.
const CREATE_CONCURRENCY: usize = 32;
/// Longest a watch waits (section 2, creation to the last Service Ready, is the longest).
const WATCH_PATIENCE: Duration = Duration::from_secs(20 * 60);
/// Longest a namespace may take to go away before the next section starts anyway.
const DELETE_PATIENCE: Duration = Duration::from_secs(5 * 60);
/// Field manager of the objects section 2 creates.
const MANAGER: &str = "lampyr-bench";

fn main() {
    lampyr_testenv::require_kvm();
    // The harness's own progress; the components log to their own files.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "cluster=info".into());
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    let services = env_count("LAMPYR_BENCH_SERVICES", 20);
    let burst = env_count("LAMPYR_BENCH_BURST", 200);
    let changes = env_count("LAMPYR_BENCH_TRAFFIC", 10);
    let revisions = env_count("LAMPYR_BENCH_REVISIONS", 20);
    let density = env_count("LAMPYR_BENCH_DENSITY", 1000);

    let started = Instant::now();
    let stack = LampyrStack::shared();
    tracing::info!(took = ?started.elapsed(), "the Lampyr stack is up");
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("a runtime");
    let table = runtime.block_on(async {
        let artifact = stack.push_example("hello").await;
        let mut table = Table::default();
        apply_to_ready(stack, &artifact, services, &mut table).await;
        reconcile_burst(stack, &artifact, burst, &mut table).await;
        traffic_changes(stack, &artifact, changes, &mut table).await;
        new_revisions(stack, &artifact, revisions, &mut table).await;
        held_at_zero(stack, &artifact, density, &mut table).await;
        table
    });
    println!("\nLampyr control plane in the cluster test environment, each figure beside its baseline\n");
    print!("{}", table.render());
    println!(
        "\n1: {services} Services applied one after another (after one unmeasured), each after a ConfigMap; time from \
         starting `kubectl apply`\n   to a watch seeing the Service Ready at its generation (then to fiber-router's first \
         200 for it), or to a GET reading the ConfigMap back.\n\
         2: {burst} objects created by server-side apply, {CREATE_CONCURRENCY} requests in flight; time from the first \
         request to a watch seeing the last one Ready (ConfigMaps: seen at all);\n   watch events: the API server's \
         apiserver_watch_events_total over the Services' burst.\n\
         3: {changes} changes (after one unmeasured) of spec.traffic between 100% on one Revision and 100% on the other, \
         both at min-scale 1;\n   time from the patch to sending the first request fiber-router answered from the new \
         Revision (one every {POLL:?} plus the request's own time),\n   and to a watch seeing the Service Ready at the \
         new generation.\n\
         4: {revisions} new Revisions of one Service (after one unmeasured), each a merge patch of its template's TARGET; \
         time from the patch to a watch seeing\n   the Service Ready at its generation; baseline: a merge patch of a ConfigMap \
         until a GET reads the new value back.\n\
         5: {density} Services created at once like 2 (min-scale 0; initial-scale 1, so each starts with a fiber if a slot is free),\n   \
         API objects: everything in the namespace per Revision; fiberd's resident memory from /proc after one Service Ready, after all, and once\n   \
         no Revision holds a warm fiber.\n\
         Ratios compare like with like: a median with the baseline's median, a p90 with its p90.\n\
         Everything (API server, etcd, Knative, Lampyr's controllers, fiber-router, one fiberd per namespace's shared grant, this client) \
         shares the machine's {} cores.",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
}

/// `name` from the environment as a count, or `default`.
fn env_count(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(value) => value.parse().unwrap_or_else(|_| panic!("{name}={value:?} is not a count")),
        Err(_) => default,
    }
}

// ---------- 1. kubectl apply → Ready ----------

/// Section 1: Services applied one after another, each beside a ConfigMap.
async fn apply_to_ready(stack: &LampyrStack, artifact: &str, n: usize, table: &mut Table) {
    if n == 0 {
        return; // section skipped
    }
    let ns = stack.cluster.namespace("bench-apply").await;
    let client = stack.cluster.client().await;
    let (services, maps) = (Api::<Service>::namespaced(client.clone(), &ns), Api::<ConfigMap>::namespaced(client, &ns));
    let (mut ready, mut answered, mut seen) = (Vec::new(), Vec::new(), Vec::new());
    // Round 0 is unmeasured: kubectl's discovery cache, the controller's first pull of the artifact.
    for i in 0..=n {
        let map = apply_config_map(stack, &maps, &ns, &format!("map-{i}")).await;
        let (service, answer) = apply_service(stack, &services, &ns, artifact, &format!("hello-{i}")).await;
        tracing::info!(round = i, ?service, ?answer, config_map = ?map, "kubectl apply → Ready");
        if i > 0 {
            ready.push(service);
            answered.push(answer);
            seen.push(map);
        }
    }
    delete_namespace(stack, &ns).await;

    let (ready, answered, seen) = (Samples(ready), Samples(answered), Samples(seen));
    let floor = seen.median();
    table.row(
        &format!("1. kubectl apply → Service Ready (median of {n})"),
        fmt_duration(ready.median()),
        "≤ 2 s (median)",
        times_baseline(ready.median(), floor),
    );
    table.row("   … p90 / max", spread(&ready), "-", times_baseline(ready.percentile(90.0), seen.percentile(90.0)));
    table.row(
        "   … to its first 200 through fiber-router (median)",
        fmt_duration(answered.median()),
        "-",
        times_baseline(answered.median(), floor),
    );
    table.row(&format!("   baseline: kubectl apply → ConfigMap read back (median of {n})"), fmt_duration(floor), "-", "1×".into());
    table.row("   baseline p90 / max", spread(&seen), "-", "-".into());
}

/// `p90 / max` of `samples`.
fn spread(samples: &Samples) -> String {
    format!("{} / {}", fmt_duration(samples.percentile(90.0)), fmt_duration(samples.percentile(100.0)))
}

/// `kubectl apply` of ConfigMap `name` until a GET reads it back.
async fn apply_config_map(stack: &LampyrStack, maps: &Api<ConfigMap>, ns: &str, name: &str) -> Duration {
    let started = Instant::now();
    stack.kubectl_apply(&config_map(ns, name));
    stack.poll(&format!("ConfigMap {name}"), POLL, async || maps.get_opt(name).await.ok().flatten()).await;
    started.elapsed()
}

/// `kubectl apply` of Service `name` until a watch sees it Ready, and until
/// fiber-router answers for it.
async fn apply_service(stack: &LampyrStack, services: &Api<Service>, ns: &str, artifact: &str, name: &str) -> (Duration, Duration) {
    let started = Instant::now();
    stack.kubectl_apply(&knative_service(ns, name, artifact, name, None));
    let ready = watch_until(services, 1, started, &|s: &Service| s.name_any() == name && service_ready(s)).await;
    let host = stack.ready_host(services, name).await;
    let body = stack.answer(&host, "/").await;
    assert_eq!(body, format!("Hello {name}!\n"), "{name} answers from its own Revision");
    (ready, started.elapsed())
}

/// Upstream's `IsReady`: `Ready` True at the Service's current generation.
fn service_ready(service: &Service) -> bool {
    service.status.as_ref().is_some_and(|s| s.is_ready(service.metadata.generation))
}

fn config_map(ns: &str, name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": { "name": name, "namespace": ns },
        "data": { "TARGET": name },
    })
}

// ---------- 2. Reconcile throughput ----------

/// Section 2: `n` Services created at once until all are Ready, beside `n` ConfigMaps.
async fn reconcile_burst(stack: &LampyrStack, artifact: &str, n: usize, table: &mut Table) {
    if n == 0 {
        return; // section skipped
    }
    let ns = stack.cluster.namespace("bench-burst").await;
    let client = stack.cluster.client().await;
    let (services, maps) = (Api::<Service>::namespaced(client.clone(), &ns), Api::<ConfigMap>::namespaced(client.clone(), &ns));
    let names: Vec<String> = (0..n).map(|i| format!("burst-{i}")).collect();

    let map_docs = names.iter().map(|name| config_map(&ns, name)).collect();
    // Not `kube-root-ca.crt`, which every namespace has.
    let maps = timed_burst(&maps, map_docs, |m: &ConfigMap| m.name_any().starts_with("burst-")).await;
    tracing::info!(created = ?maps.created, seen = ?maps.done, "{n} ConfigMaps");
    let service_docs = names.iter().map(|name| knative_service(&ns, name, artifact, name, None)).collect();
    let before = ApiActivity::read(&client).await;
    let profile = std::env::var_os(lampyr_testenv::cluster::APISERVER_PROFILING).map(|dir| profile_api_server(stack, Path::new(&dir)));
    let ready = timed_burst(&services, service_docs, service_ready).await;
    if let Some(profile) = profile {
        profile.join().expect("the profiling thread");
    }
    let api = ApiActivity::read(&client).await.since(&before);
    tracing::info!(
        created = ?ready.created, ready = ?ready.done,
        watch_events = ApiActivity::summary(&api.watch_events, 8),
        requests = ApiActivity::summary(&api.requests, 12),
        request_seconds = ApiActivity::summary(&api.request_seconds, 12),
        "{n} Services"
    );
    tracing::info!(reasons = %event_reasons(&client, &ns).await, "events in {ns}");
    delete_namespace(stack, &ns).await;

    let rate = |d: Duration| n as f64 / d.as_secs_f64().max(1e-9);
    table.row(
        &format!("2. {n} Services created at once → all Ready"),
        format!("{} ({:.1} Services/s)", fmt_duration(ready.done), rate(ready.done)),
        "-",
        times_baseline(ready.done, maps.done),
    );
    table.row("   … all created (API calls answered)", fmt_duration(ready.created), "-", times_baseline(ready.created, maps.created));
    table.row(
        &format!("   baseline: {n} ConfigMaps the same way → all seen"),
        format!("{} ({:.0} objects/s)", fmt_duration(maps.done), rate(maps.done)),
        "-",
        "1×".into(),
    );
    table.row("   … watch events the API server sent meanwhile", ApiActivity::summary(&api.watch_events, 3), "-", "-".into());
    table.row("   … requests the API server answered meanwhile", ApiActivity::summary(&api.requests, 3), "-", "-".into());
}

/// Seconds of the API server's CPU profile taken from the start of section 2's burst.
const PROFILE_SECONDS: u32 = 30;

/// Writes the API server's CPU profile over the next [`PROFILE_SECONDS`] to
/// `dir/kube-apiserver.pprof` (read it with `go tool pprof -top`), on a thread of its own.
fn profile_api_server(stack: &LampyrStack, dir: &Path) -> std::thread::JoinHandle<()> {
    let mut kubectl = stack.cluster.kubectl();
    kubectl.args(["get", "--raw", &format!("/debug/pprof/profile?seconds={PROFILE_SECONDS}")]);
    let path = dir.join("kube-apiserver.pprof");
    std::thread::spawn(move || {
        let out = kubectl.output().unwrap_or_else(|e| panic!("running kubectl for the API server's profile: {e}"));
        assert!(out.status.success(), "the API server's profile: {}", String::from_utf8_lossy(&out.stderr));
        std::fs::write(&path, out.stdout).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        tracing::info!(path = %path.display(), "the API server's CPU profile over {PROFILE_SECONDS} s of the burst");
    })
}

/// What the API server has done since it started, from its `/metrics`: watch
/// events sent per resource, requests answered and seconds spent per verb and resource.
#[derive(Clone, Default)]
struct ApiActivity {
    watch_events: BTreeMap<String, f64>,
    requests: BTreeMap<String, f64>,
    request_seconds: BTreeMap<String, f64>,
}

impl ApiActivity {
    /// Reads the API server's `/metrics`.
    async fn read(client: &kube::Client) -> ApiActivity {
        let request = http::Request::get("/metrics").body(Vec::new()).expect("a GET request");
        let text = client.request_text(request).await.unwrap_or_else(|e| panic!("reading the API server's metrics: {e}"));
        let mut activity = ApiActivity::default();
        for (labels, count) in lampyr_testenv::stack::metric_samples(&text, "apiserver_watch_events_total") {
            *activity.watch_events.entry(label(labels, "resource")).or_default() += count;
        }
        for (labels, count) in lampyr_testenv::stack::metric_samples(&text, "apiserver_request_total") {
            *activity.requests.entry(verb_resource(labels)).or_default() += count;
        }
        for (labels, seconds) in lampyr_testenv::stack::metric_samples(&text, "apiserver_request_duration_seconds_sum") {
            // A watch's duration is how long it stayed open, not work done.
            if !labels.contains(r#"verb="WATCH""#) {
                *activity.request_seconds.entry(verb_resource(labels)).or_default() += seconds;
            }
        }
        activity
    }

    /// What happened between `earlier` and `self`.
    fn since(&self, earlier: &ApiActivity) -> ApiActivity {
        let minus = |now: &BTreeMap<String, f64>, then: &BTreeMap<String, f64>| {
            now.iter().map(|(k, v)| (k.clone(), v - then.get(k).copied().unwrap_or(0.0))).filter(|(_, v)| *v > 0.0).collect()
        };
        ApiActivity {
            watch_events: minus(&self.watch_events, &earlier.watch_events),
            requests: minus(&self.requests, &earlier.requests),
            request_seconds: minus(&self.request_seconds, &earlier.request_seconds),
        }
    }

    /// `total (top: key n, …)` of `counts`, the `top` largest named.
    fn summary(counts: &BTreeMap<String, f64>, top: usize) -> String {
        let total: f64 = counts.values().sum();
        let mut largest: Vec<(&String, &f64)> = counts.iter().collect();
        largest.sort_by(|a, b| b.1.total_cmp(a.1));
        let named: Vec<String> = largest.iter().take(top).map(|(k, v)| format!("{k} {v:.0}")).collect();
        format!("{total:.0} ({})", named.join(", "))
    }
}

/// The value of label `name` in a metric's `{…}` labels, or `""`.
fn label(labels: &str, name: &str) -> String {
    let key = format!("{name}=\"");
    labels.find(&key).and_then(|at| labels[at + key.len()..].split('"').next()).unwrap_or_default().to_string()
}

/// `VERB resource` of a request metric's labels (`WATCH homes`, `PATCH homes/status`).
fn verb_resource(labels: &str) -> String {
    let subresource = label(labels, "subresource");
    let resource = if subresource.is_empty() { label(labels, "resource") } else { format!("{}/{subresource}", label(labels, "resource")) };
    format!("{} {resource}", label(labels, "verb"))
}

/// `reason (kind) count, …` of the Events in namespace `ns`, most frequent first.
async fn event_reasons(client: &kube::Client, ns: &str) -> String {
    let events = Api::<k8s_openapi::api::core::v1::Event>::namespaced(client.clone(), ns);
    let listed = events.list(&ListParams::default()).await.unwrap_or_else(|e| panic!("listing Events: {e}"));
    let mut counts: BTreeMap<String, f64> = BTreeMap::new();
    for event in listed.items {
        let key = format!("{} ({})", event.reason.unwrap_or_default(), event.involved_object.kind.unwrap_or_default());
        *counts.entry(key).or_default() += f64::from(event.count.unwrap_or(1));
    }
    ApiActivity::summary(&counts, 12)
}

/// When a burst's creations were all answered, and when the watch saw the last one done.
struct Burst {
    created: Duration,
    done: Duration,
}

/// Creates `docs` through `api` concurrently while watching until `done` holds for each.
async fn timed_burst<K>(api: &Api<K>, docs: Vec<Value>, done: impl Fn(&K) -> bool) -> Burst
where
    K: Resource + Clone + DeserializeOwned + Debug + 'static,
{
    let started = Instant::now();
    let count = docs.len();
    let create = async {
        futures::stream::iter(docs)
            .map(|doc| async move {
                let name = doc["metadata"]["name"].as_str().unwrap_or_default().to_string();
                let apply = PatchParams::apply(MANAGER);
                api.patch(&name, &apply, &Patch::Apply(&doc)).await.unwrap_or_else(|e| panic!("creating {name}: {e}"));
            })
            .buffer_unordered(CREATE_CONCURRENCY)
            .collect::<()>()
            .await;
        started.elapsed()
    };
    let (created, done) = tokio::join!(create, watch_until(api, count, started, &done));
    Burst { created, done }
}

/// Waits until `done` has held for `count` objects of `api` (listing, then
/// watching from the list; listing again whenever the watch ends); returns the
/// time since `started`.
async fn watch_until<K>(api: &Api<K>, count: usize, started: Instant, done: &impl Fn(&K) -> bool) -> Duration
where
    K: Resource + Clone + DeserializeOwned + Debug + 'static,
{
    let deadline = tokio::time::Instant::now() + WATCH_PATIENCE;
    let mut seen = BTreeSet::new();
    let mut note = |object: &K| {
        if done(object) {
            seen.insert(object.name_any());
        }
        seen.len() >= count
    };
    loop {
        let list = api.list(&ListParams::default()).await.unwrap_or_else(|e| panic!("listing: {e}"));
        // `note` answers for everything seen so far, so its last answer is the list's.
        let mut all = false;
        for object in &list.items {
            all = note(object);
        }
        if all {
            return started.elapsed();
        }
        let version = list.metadata.resource_version.unwrap_or_default();
        let mut events =
            api.watch(&WatchParams::default().timeout(240), &version).await.unwrap_or_else(|e| panic!("watching: {e}")).boxed();
        loop {
            let next = tokio::time::timeout_at(deadline, events.try_next()).await;
            match next.unwrap_or_else(|_| panic!("fewer than {count} done within {WATCH_PATIENCE:?}")) {
                Ok(Some(WatchEvent::Added(o) | WatchEvent::Modified(o))) if note(&o) => return started.elapsed(),
                Ok(Some(WatchEvent::Error(_)) | None) | Err(_) => break,
                Ok(Some(_)) => {}
            }
        }
    }
}

// ---------- 3. Traffic changes ----------

/// Section 3: `n` traffic changes between two warm Revisions, router against control plane.
async fn traffic_changes(stack: &LampyrStack, artifact: &str, n: usize, table: &mut Table) {
    if n == 0 {
        return; // section skipped
    }
    let ns = stack.cluster.namespace("bench-traffic").await;
    let services = Api::<Service>::namespaced(stack.cluster.client().await, &ns);
    let name = "split";
    stack.kubectl_apply(&warm_service(&ns, name, artifact, "one"));
    stack.ready_host(&services, name).await;
    stack.kubectl_apply(&warm_service(&ns, name, artifact, "two"));
    let host = stack.ready_host(&services, name).await;
    // Revision 2 (latest) answering first, so the first change is a real one.
    stack
        .poll("revision 2 answering", POLL, async || (stack.get(&host, "/").await.ok()? == (200, "Hello two!\n".into())).then_some(()))
        .await;

    let targets = [(format!("{name}-00001"), "Hello one!\n"), (format!("{name}-00002"), "Hello two!\n")];
    let (mut served, mut ready) = (Vec::new(), Vec::new());
    // Change 0 (latest → pinned) is unmeasured.
    for i in 0..=n {
        let (revision, body) = &targets[i % 2];
        let (router, control) = change_traffic(stack, &services, name, &host, revision, body).await;
        tracing::info!(change = i, ?router, ?control, "traffic → 100% {revision}");
        if i > 0 {
            served.push(router);
            ready.push(control);
        }
    }
    delete_namespace(stack, &ns).await;

    let (served, ready) = (Samples(served), Samples(ready));
    table.row(
        &format!("3. traffic change → fiber-router serves it (median of {n})"),
        fmt_duration(served.median()),
        "-",
        times_baseline(served.median(), ready.median()),
    );
    table.row("   … p90 / max", spread(&served), "-", times_baseline(served.percentile(90.0), ready.percentile(90.0)));
    table.row(
        &format!("   baseline: same patch → Service Ready at its generation (median of {n})"),
        fmt_duration(ready.median()),
        "-",
        "1×".into(),
    );
    table.row("   baseline p90 / max", spread(&ready), "-", "-".into());
}

/// The `hello` Service with `TARGET=target`, its Revisions kept at one warm fiber at least.
fn warm_service(ns: &str, name: &str, artifact: &str, target: &str) -> Value {
    let mut service = knative_service(ns, name, artifact, target, None);
    service["spec"]["template"]["metadata"]["annotations"]["autoscaling.knative.dev/min-scale"] = json!("1");
    service
}

/// Patches all traffic of Service `name` to `revision`; returns how long until
/// fiber-router answered `body` on `host`, and until the Service was Ready.
async fn change_traffic(
    stack: &LampyrStack,
    services: &Api<Service>,
    name: &str,
    host: &str,
    revision: &str,
    body: &str,
) -> (Duration, Duration) {
    let patch = json!({ "spec": { "traffic": [{ "revisionName": revision, "percent": 100 }] } });
    let started = Instant::now();
    services.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap_or_else(|e| panic!("patching traffic: {e}"));
    // The switch happened before the first request answered from `revision` was sent.
    let served = async {
        let what = format!("fiber-router answering from {revision}");
        let sent = stack
            .poll(&what, POLL, async || {
                let sent = Instant::now();
                (stack.get(host, "/").await.ok()? == (200, body.to_string())).then_some(sent)
            })
            .await;
        sent - started
    };
    tokio::join!(served, watch_until(services, 1, started, &service_ready))
}

// ---------- 4. New Revisions ----------

/// Section 4: `n` new Revisions of one Service, beside `n` ConfigMap patches; grant Pods counted.
async fn new_revisions(stack: &LampyrStack, artifact: &str, n: usize, table: &mut Table) {
    if n == 0 {
        return; // section skipped
    }
    let ns = stack.cluster.namespace("bench-revision").await;
    let client = stack.cluster.client().await;
    let (services, maps) = (Api::<Service>::namespaced(client.clone(), &ns), Api::<ConfigMap>::namespaced(client, &ns));
    let name = "rev";
    stack.kubectl_apply(&knative_service(&ns, name, artifact, "v0", None));
    stack.ready_host(&services, name).await;
    stack.kubectl_apply(&config_map(&ns, name));
    let grant_pods = || stack.pods.ports().keys().filter(|pod| pod.starts_with(&format!("{ns}/"))).count();
    let pods_before = grant_pods();
    let (mut ready, mut floor) = (Vec::new(), Vec::new());
    // Revision 2 is unmeasured.
    for i in 1..=n + 1 {
        let target = format!("v{i}");
        let patch = json!({ "spec": { "template": { "spec": { "containers": [{ "image": artifact, "env": [{ "name": "TARGET", "value": target }] }] } } } });
        let started = Instant::now();
        services.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap_or_else(|e| panic!("patching {name}: {e}"));
        let took = watch_until(&services, 1, started, &service_ready).await;
        let map_took = patch_config_map(stack, &maps, name, &target).await;
        tracing::info!(revision = i + 1, ?took, ?map_took, "new Revision Ready");
        if i > 1 {
            ready.push(took);
            floor.push(map_took);
        }
    }
    let pods_started = grant_pods().saturating_sub(pods_before);
    let pods_total = grant_pods();
    delete_namespace(stack, &ns).await;

    let (ready, floor) = (Samples(ready), Samples(floor));
    table.row(
        &format!("4. new Revision of a Service → Ready (median of {n})"),
        fmt_duration(ready.median()),
        "-",
        times_baseline(ready.median(), floor.median()),
    );
    table.row("   … p90 / max", spread(&ready), "-", times_baseline(ready.percentile(90.0), floor.percentile(90.0)));
    table.row("   grant Pods started during them / in the namespace", format!("{pods_started} / {pods_total}"), "-", "-".into());
    table.row(&format!("   baseline: ConfigMap patch → read back (median of {n})"), fmt_duration(floor.median()), "-", "1×".into());
}

/// A merge patch of ConfigMap `name`'s TARGET through the API until a GET reads `value` back.
async fn patch_config_map(stack: &LampyrStack, maps: &Api<ConfigMap>, name: &str, value: &str) -> Duration {
    let started = Instant::now();
    let patch = json!({ "data": { "TARGET": value } });
    maps.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap_or_else(|e| panic!("patching ConfigMap {name}: {e}"));
    stack
        .poll(&format!("ConfigMap {name} = {value}"), POLL, async || {
            let map = maps.get_opt(name).await.ok().flatten()?;
            (map.data?.get("TARGET")? == value).then_some(())
        })
        .await;
    started.elapsed()
}

// ---------- 5. Density ----------

/// Longest section 5 waits for every Revision to be back at zero warm fibers.
const IDLE_PATIENCE: Duration = Duration::from_secs(10 * 60);

/// Section 5: `n` Services at min-scale 0 in one namespace: the grant Pods, API objects
/// and fiberd memory they take.
async fn held_at_zero(stack: &LampyrStack, artifact: &str, n: usize, table: &mut Table) {
    if n == 0 {
        return; // section skipped
    }
    let ns = stack.cluster.namespace("bench-density").await;
    let client = stack.cluster.client().await;
    let (services, maps) = (Api::<Service>::namespaced(client.clone(), &ns), Api::<ConfigMap>::namespaced(client.clone(), &ns));
    // The first one starts the shared grant's Pod; its fiberd's memory then is the floor.
    stack.kubectl_apply(&knative_service(&ns, "dense-0", artifact, "dense-0", None));
    stack.ready_host(&services, "dense-0").await;
    let fiberd = format!("{ns}/{}-0", lampyr_api::keys::SHARED_GRANT_NAME);
    let one = resident_bytes(stack, &fiberd);

    let names: Vec<String> = (1..n).map(|i| format!("dense-{i}")).collect();
    let map_docs = names.iter().map(|name| config_map(&ns, name)).collect();
    let maps = timed_burst(&maps, map_docs, |m: &ConfigMap| m.name_any().starts_with("dense-")).await;
    let service_docs = names.iter().map(|name| knative_service(&ns, name, artifact, name, None)).collect();
    let ready = timed_burst(&services, service_docs, service_ready).await;
    let all = resident_bytes(stack, &fiberd);
    let grant_pods = stack.pods.ports().keys().filter(|pod| pod.starts_with(&format!("{ns}/"))).count();
    let objects = namespace_objects(&client, &ns).await;
    tracing::info!(ready = ?ready.done, grant_pods, ?objects, "{n} Services at min-scale 0");
    let idle_after = all_idle(&client, &ns).await;
    let idle = resident_bytes(stack, &fiberd);
    tracing::info!(?idle_after, idle_mib = idle as f64 / MIB, "every Revision at zero warm fibers");
    delete_namespace(stack, &ns).await;

    let per_revision: f64 = objects.iter().map(|(_, count)| *count as f64).sum::<f64>() / n as f64;
    let named: Vec<String> = objects.iter().filter(|(_, c)| *c > 0).map(|(kind, c)| format!("{kind} {c}")).collect();
    table.row(
        &format!("5. {n} Services at min-scale 0, created at once → all Ready"),
        format!("{} ({:.1} Services/s)", fmt_duration(ready.done), (n - 1) as f64 / ready.done.as_secs_f64().max(1e-9)),
        "-",
        times_baseline(ready.done, maps.done),
    );
    table.row(
        "   … grant Pods holding them",
        format!("{grant_pods} (1 per {:.0} Revisions)", n as f64 / grant_pods.max(1) as f64),
        "-",
        "-".into(),
    );
    table.row("   … API objects per Revision in the namespace", format!("{per_revision:.1} ({})", named.join(", ")), "-", "-".into());
    table.row(
        "   … fiberd resident memory: 1 Revision / all / all idle",
        format!("{:.0} / {:.0} / {:.0} MiB", one as f64 / MIB, all as f64 / MIB, idle as f64 / MIB),
        "-",
        "-".into(),
    );
    table.row(
        "   … fiberd memory per idle Revision",
        format!("{:.0} KiB", idle.saturating_sub(one) as f64 / 1024.0 / (n - 1).max(1) as f64),
        "-",
        "-".into(),
    );
    table.row(&format!("   baseline: {} ConfigMaps the same way → all seen", n - 1), fmt_duration(maps.done), "-", "1×".into());
}

const MIB: f64 = 1024.0 * 1024.0;

/// The resident memory (VmRSS) of Pod `pod`'s program, from `/proc`.
fn resident_bytes(stack: &LampyrStack, pod: &str) -> u64 {
    let pid = stack.pods.pid(pod).unwrap_or_else(|| panic!("grant Pod {pod} is not running"));
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_else(|e| panic!("reading /proc/{pid}/status: {e}"));
    let kib = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no VmRSS in /proc/{pid}/status"));
    kib * 1024
}

/// How many objects of each kind the Revisions of namespace `ns` made (not the
/// baseline's ConfigMaps, nor the namespace's own).
async fn namespace_objects(client: &kube::Client, ns: &str) -> Vec<(&'static str, usize)> {
    let kinds = [
        ("serving.knative.dev", "v1", "Service", "services", "Service"),
        ("serving.knative.dev", "v1", "Configuration", "configurations", "Configuration"),
        ("serving.knative.dev", "v1", "Route", "routes", "Route"),
        ("serving.knative.dev", "v1", "Revision", "revisions", "Revision"),
        ("networking.internal.knative.dev", "v1alpha1", "Ingress", "ingresses", "Ingress"),
        ("fiber.lampyr.dev", "v1alpha1", "Home", "homes", "Home"),
        ("fiber.lampyr.dev", "v1alpha1", "CapacityGrant", "capacitygrants", "CapacityGrant"),
        ("", "v1", "Service", "services", "core Service"),
        ("", "v1", "Pod", "pods", "Pod"),
    ];
    let mut counts = Vec::new();
    for (group, version, kind, plural, label) in kinds {
        let resource = kube::core::ApiResource::from_gvk_with_plural(&kube::core::GroupVersionKind::gvk(group, version, kind), plural);
        let api: Api<kube::core::DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource);
        let listed = api.list_metadata(&ListParams::default()).await.unwrap_or_else(|e| panic!("listing {plural}: {e}"));
        counts.push((label, listed.items.len()));
    }
    counts
}

/// Waits until no Home in `ns` reports a warm fiber; returns how long that took.
async fn all_idle(client: &kube::Client, ns: &str) -> Duration {
    let homes = Api::<lampyr_api::Home>::namespaced(client.clone(), ns);
    let started = Instant::now();
    loop {
        let list = homes.list(&ListParams::default()).await.unwrap_or_else(|e| panic!("listing Homes: {e}"));
        let warm: i64 = list.items.iter().flat_map(|h| h.status.iter().flat_map(|s| &s.instances)).map(|i| i64::from(i.warm_fibers)).sum();
        if warm == 0 {
            return started.elapsed();
        }
        assert!(started.elapsed() < IDLE_PATIENCE, "{warm} fibers still warm after {IDLE_PATIENCE:?}");
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

// ---------- Clean-up ----------

/// Deletes namespace `ns` and waits until it and its fiberd processes are gone
/// (at most [`DELETE_PATIENCE`]: a slow clean-up is logged, not fatal).
async fn delete_namespace(stack: &LampyrStack, ns: &str) {
    let namespaces = Api::<Namespace>::all(stack.cluster.client().await);
    namespaces.delete(ns, &DeleteParams::default()).await.unwrap_or_else(|e| panic!("deleting namespace {ns}: {e}"));
    let started = Instant::now();
    let prefix = format!("{ns}/");
    loop {
        let exists = namespaces.get_opt(ns).await.map_or(true, |n| n.is_some());
        let pods = stack.pods.ports().keys().filter(|pod| pod.starts_with(&prefix)).count();
        if !exists && pods == 0 {
            tracing::info!(took = ?started.elapsed(), "namespace {ns} deleted");
            return;
        }
        if started.elapsed() > DELETE_PATIENCE {
            tracing::warn!(exists, pods, "namespace {ns} still not gone after {DELETE_PATIENCE:?}; going on");
            return;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
