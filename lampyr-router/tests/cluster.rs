//! fiber-router in cluster mode against the real cluster environment
//! (`lampyr_testenv::Cluster`: kube-apiserver, upstream Knative webhook and
//! Lampyr's Knative controller): Homes publish Revisions whose instances are
//! real HTTP servers started here (standing in for fiberd); KIngresses of the
//! fiber class, written by hand or by the upstream Route reconciler, become
//! host routes with upstream status.
//!
//! Every test works in a namespace of its own; every router watches all of
//! them and reports the same load balancer, so routers never disagree on a
//! KIngress's status.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use lampyr_api::conditions::KnativeStatus;
use lampyr_api::keys::FIBER_INGRESS_CLASS;
use lampyr_api::networking::Ingress;
use lampyr_api::networking::IngressVisibility;
use lampyr_api::policy::{FiberPolicy, TimeoutPolicy};
use lampyr_api::{Home, HomeSpec, Revision, Route, Service};
use lampyr_router::kingress;
use lampyr_router::route::{self, RouteOptions, ServiceTraffic, TrafficRoute};
use lampyr_router::{ClusterConfig, ClusterRoutes, Exposure, RouteTable, Router, RouterConfig};
use lampyr_testenv::{Cluster, Process, repo_root, workspace_binary};
use prometheus_client::registry::Registry;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};

/// The router Service every test's router reports as its load balancer.
const SERVICE_DNS: &str = "fiber-router.lampyr-test.svc.cluster.local";
/// The longest anything here may take to converge before the test fails.
const CONVERGE: Duration = Duration::from_secs(60);
/// A digest-pinned artifact reference (never pulled: nothing here runs fiberd).
const ARTIFACT: &str = "localhost:5000/lampyr/hello@sha256:0000000000000000000000000000000000000000000000000000000000000001";

// ---------------------------------------------------------------- upstreams

/// An HTTP/1.1 and h2c server standing in for a fiberd instance. It answers
/// `<name> ns=<Knative-Serving-Namespace> rev=<…-Revision> tag=<…-Tag> host=<Host> version=<HTTP version> proto=<X-Forwarded-Proto>`,
/// and never answers `/hang`.
struct Upstream {
    addr: SocketAddr,
    hits: Arc<AtomicUsize>,
    hanging: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl Upstream {
    async fn start(name: &'static str) -> Upstream {
        Self::start_at(name, std::net::Ipv4Addr::LOCALHOST.into()).await
    }

    /// Like [`Upstream::start`], listening on `ip`.
    async fn start_at(name: &'static str, ip: std::net::IpAddr) -> Upstream {
        let listener = TcpListener::bind((ip, 0)).await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (hits, hanging) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (h, g) = (Arc::clone(&hits), Arc::clone(&hanging));
        let task = tokio::spawn(async move {
            // Connections live in this set: aborting the task closes every one of them.
            let mut connections = JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else { return };
                while connections.try_join_next().is_some() {}
                let (h, g) = (Arc::clone(&h), Arc::clone(&g));
                connections.spawn(async move {
                    let service = hyper::service::service_fn(move |req| answer(name, req, Arc::clone(&h), Arc::clone(&g)));
                    let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                    let _ = builder.serve_connection(TokioIo::new(stream), service).await;
                });
            }
        });
        Upstream { addr, hits, hanging, task }
    }

    /// Dies: its port closes and its connections are cut.
    fn kill(&self) {
        self.task.abort();
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn answer(
    name: &'static str,
    req: hyper::Request<Incoming>,
    hits: Arc<AtomicUsize>,
    hanging: Arc<AtomicUsize>,
) -> Result<hyper::Response<Full<Bytes>>, Infallible> {
    hits.fetch_add(1, Ordering::AcqRel);
    if req.uri().path() == "/hang" {
        hanging.fetch_add(1, Ordering::AcqRel);
        std::future::pending::<()>().await;
    }
    let header = |k: &str| req.headers().get(k).and_then(|v| v.to_str().ok()).unwrap_or("-").to_string();
    let host = req.uri().authority().map(|a| a.to_string()).unwrap_or_else(|| header("host"));
    let body = format!(
        "{name} ns={} rev={} tag={} host={host} version={:?} proto={}\n",
        header("knative-serving-namespace"),
        header("knative-serving-revision"),
        header("knative-serving-tag"),
        req.version(),
        header("x-forwarded-proto"),
    );
    Ok(hyper::Response::new(Full::new(Bytes::from(body))))
}

/// An upstream's answer, split into its name and `key=value` fields.
#[derive(Debug)]
struct Answer {
    status: u16,
    name: String,
    fields: Vec<(String, String)>,
    text: String,
}

impl Answer {
    fn field(&self, key: &str) -> &str {
        self.fields.iter().find(|(k, _)| k == key).map_or("", |(_, v)| v.as_str())
    }
}

/// This machine's address on its default route: an endpoint address the API server
/// accepts (it refuses loopback ones).
fn non_loopback_ip() -> std::net::IpAddr {
    // Connecting a UDP socket sends nothing; it only picks the route and its source address.
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").expect("a UDP socket");
    socket
        .connect("203.0.113.1:9")
        .and_then(|()| socket.local_addr())
        .map(|a| a.ip())
        .unwrap_or_else(|e| panic!("this test needs a non-loopback IPv4 address (a default route) for an endpoint: {e}"))
}

/// A loopback address nothing listens on.
async fn refused_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0").await.expect("bind").local_addr().expect("addr")
}

// ---------------------------------------------------------------- cluster helpers

/// The shared environment with Lampyr's CRDs installed, and an admin client.
async fn cluster() -> (&'static Cluster, Client) {
    let cluster = Cluster::shared();
    cluster.apply_files(&[repo_root().join("config/crd/lampyr.yaml")]).await.expect("Lampyr CRDs install");
    (cluster, cluster.client().await)
}

fn policy(timeout: Duration, http2: bool) -> FiberPolicy {
    FiberPolicy { timeouts: TimeoutPolicy::uniform(timeout), http2, ..FiberPolicy::default() }
}

/// Creates Home `name` (publishing Revision `name`) with `policy`, then reports `instances`.
async fn create_home(client: &Client, ns: &str, name: &str, policy: FiberPolicy, instances: &[(&str, SocketAddr, bool)]) {
    let mut home = Home::new(
        name,
        HomeSpec {
            revision_name: name.to_string(),
            artifact: ARTIFACT.to_string(),
            sealed_template: None,
            grant_name: "grant".to_string(),
            fiber_memory_bytes: 0,
            policy,
            image_pull_secrets: Vec::new(),
            service_account_name: None,
        },
    );
    home.metadata.namespace = Some(ns.to_string());
    Api::<Home>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &home)
        .await
        .unwrap_or_else(|e| panic!("creating Home {ns}/{name}: {e}"));
    set_instances(client, ns, name, instances).await;
}

/// Replaces Home `name`'s reported instances (`(name, address, loaded)`), as fiberd instances would.
async fn set_instances(client: &Client, ns: &str, name: &str, instances: &[(&str, SocketAddr, bool)]) {
    let instances: Vec<_> = instances
        .iter()
        .map(|(n, addr, loaded)| json!({ "name": n, "address": addr.to_string(), "loaded": loaded, "warmFibers": 1 }))
        .collect();
    let patch = json!({ "status": { "instances": instances } });
    Api::<Home>::namespaced(client.clone(), ns)
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("reporting instances of Home {ns}/{name}: {e}"));
}

/// Polls `check` until it returns `Ok`, failing with its last `Err` after [`CONVERGE`].
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let deadline = Instant::now() + CONVERGE;
    loop {
        match check().await {
            Ok(()) => return,
            Err(last) => assert!(Instant::now() < deadline, "{what}: not reached within {CONVERGE:?}; last: {last}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Marks Revision `name` Ready at its generation, playing the Revision reconciler.
async fn mark_revision_ready(revisions: &Api<Revision>, name: &str) {
    let generation = revisions.get(name).await.expect("Revision").metadata.generation.unwrap_or(1);
    let now = "2026-01-01T00:00:00Z";
    let ready = |t: &str| json!({ "type": t, "status": "True", "lastTransitionTime": now });
    let status = json!({ "status": {
        "observedGeneration": generation,
        "conditions": [ready("ContainerHealthy"), ready("Ready"), ready("ResourcesAvailable")],
    }});
    revisions.patch_status(name, &PatchParams::default(), &Patch::Merge(&status)).await.expect("Revision status");
}

// ---------------------------------------------------------------- routers

/// An in-process router in cluster mode, with an internal, an admin, a public and an HTTPS
/// listener. Every test router serves HTTPS, so none reports a KIngress with `spec.tls`
/// as not programmed while another programs it.
struct TestRouter {
    router: Arc<Router>,
    _routes: ClusterRoutes,
    internal: SocketAddr,
    admin: SocketAddr,
    public: SocketAddr,
    https: SocketAddr,
}

async fn start_router(client: Client, mut config: ClusterConfig) -> TestRouter {
    config.tls = true;
    let router = Router::new(RouterConfig::default(), Registry::default());
    let routes = ClusterRoutes::start(Arc::clone(&router), client, config);
    tokio::time::timeout(CONVERGE, routes.synced()).await.expect("the router lists Homes, KIngresses and Secrets");
    let mut addrs = Vec::new();
    for exposure in [Exposure::Internal, Exposure::Admin, Exposure::Public] {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        addrs.push(listener.local_addr().expect("addr"));
        tokio::spawn(Arc::clone(&router).serve_exposed(listener, exposure, std::future::pending()));
    }
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let https = listener.local_addr().expect("addr");
    let tls = lampyr_router::tls::server_config(Arc::clone(&router)).expect("TLS settings");
    tokio::spawn(Arc::clone(&router).serve_tls(listener, tls, std::future::pending()));
    TestRouter { router, _routes: routes, internal: addrs[0], admin: addrs[1], public: addrs[2], https }
}

fn http() -> reqwest::Client {
    lampyr_testenv::http_client().timeout(Duration::from_secs(120)).build().expect("client")
}

async fn read(resp: reqwest::Response) -> Answer {
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("body");
    let mut words = text.split_whitespace();
    let name = if status == 200 { words.next().unwrap_or_default().to_string() } else { String::new() };
    let fields = words.filter_map(|w| w.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect();
    Answer { status, name, fields, text }
}

/// GET `path` of Revision `ns/rev` through `addr`, routed by Knative's headers.
async fn by_headers(c: &reqwest::Client, addr: SocketAddr, ns: &str, rev: &str, path: &str) -> Answer {
    let resp = c
        .get(format!("http://{addr}{path}"))
        .header("knative-serving-namespace", ns)
        .header("knative-serving-revision", rev)
        .send()
        .await
        .expect("response");
    read(resp).await
}

/// GET `path` with Host `host` through `addr`.
async fn by_host(c: &reqwest::Client, addr: SocketAddr, host: &str, path: &str) -> Answer {
    read(c.get(format!("http://{addr}{path}")).header("host", host).send().await.expect("response")).await
}

/// The value of the metric sample `name{namespace="ns",revision="rev"…}` in `text`.
fn sample(text: &str, name: &str, ns: &str, revision: &str) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{namespace=\"{ns}\",revision=\"{revision}\"")))
        .find_map(|l| l.rsplit(' ').next()?.parse().ok())
}

// ---------------------------------------------------------------- Homes

#[tokio::test(flavor = "multi_thread")]
async fn home_instances_serve_their_revision_and_a_refusing_instance_is_routed_around() {
    let (cluster, client) = cluster().await;
    let ns = cluster.namespace("router-homes").await;
    let (a, b, unloaded) = (Upstream::start("a").await, Upstream::start("b").await, Upstream::start("unloaded").await);
    let refused = refused_addr().await;
    let instances = [("a", a.addr, true), ("b", b.addr, true), ("gone", refused, true), ("unloaded", unloaded.addr, false)];
    create_home(&client, &ns, "hello-00001", policy(Duration::from_secs(60), false), &instances).await;
    let router = start_router(client.clone(), ClusterConfig::new(SERVICE_DNS)).await;
    let c = http();

    eventually("Revision hello-00001 is routed", || async {
        let ans = by_headers(&c, router.internal, &ns, "hello-00001", "/").await;
        (ans.status == 200).then_some(()).ok_or(ans.text)
    })
    .await;
    let mut seen = std::collections::BTreeMap::new();
    for i in 0..60 {
        let ans = by_headers(&c, router.internal, &ns, "hello-00001", &format!("/n/{i}")).await;
        assert_eq!(ans.status, 200, "request {i} failed although two instances serve: {}", ans.text);
        assert_eq!((ans.field("ns"), ans.field("rev")), (ns.as_str(), "hello-00001"), "the headers reach the instance");
        *seen.entry(ans.name.clone()).or_insert(0) += 1;
    }
    assert_eq!(seen.keys().map(String::as_str).collect::<Vec<_>>(), ["a", "b"], "both loaded instances serve: {seen:?}");
    assert_eq!(unloaded.hits.load(Ordering::Acquire), 0, "an instance that has not loaded the template gets nothing");

    let metrics = c.get(format!("http://{}/metrics", router.admin)).send().await.expect("metrics").text().await.expect("metrics text");
    let failures = sample(&metrics, "lampyr_router_upstream_connect_failures_total", &ns, "hello-00001").unwrap_or(0.0);
    assert!(failures >= 1.0, "the refusing instance was tried and routed around:\n{metrics}");
    for (listener, addr) in [("internal", router.internal), ("public", router.public)] {
        let resp = c.get(format!("http://{addr}/metrics")).send().await.expect("response");
        assert_eq!(resp.status().as_u16(), 404, "/metrics is served on the admin listener only, not the {listener} one");
    }
    let ans = by_headers(&c, router.admin, &ns, "hello-00001", "/").await;
    assert_eq!(ans.status, 404, "the admin listener routes nothing: {}", ans.text);
    assert_eq!(sample(&metrics, "lampyr_router_instances", &ns, "hello-00001"), Some(3.0), "three loaded instances");

    let ans = by_headers(&c, router.internal, &ns, "hello-99999", "/").await;
    assert_eq!(ans.status, 404, "a Revision no Home publishes: {}", ans.text);
    let ans = by_headers(&c, router.public, &ns, "hello-00001", "/").await;
    assert_eq!(ans.status, 404, "the public listener does not route by Knative's headers: {}", ans.text);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_request_to_an_instance_that_dies_fails_with_502_and_later_ones_wait_for_a_live_instance() {
    let (cluster, client) = cluster().await;
    let ns = cluster.namespace("router-dies").await;
    let doomed = Upstream::start("doomed").await;
    create_home(&client, &ns, "hello-00001", policy(Duration::from_secs(120), false), &[("doomed", doomed.addr, true)]).await;
    let router = start_router(client.clone(), ClusterConfig::new(SERVICE_DNS)).await;
    let c = http();
    eventually("Revision hello-00001 is routed", || async {
        let ans = by_headers(&c, router.internal, &ns, "hello-00001", "/").await;
        (ans.status == 200).then_some(()).ok_or(ans.text)
    })
    .await;

    let in_flight = tokio::spawn({
        let (c, addr, ns) = (c.clone(), router.internal, ns.clone());
        async move { by_headers(&c, addr, &ns, "hello-00001", "/hang").await }
    });
    let hanging = Arc::clone(&doomed.hanging);
    eventually("the instance holds the request", || {
        let hanging = Arc::clone(&hanging);
        async move { (hanging.load(Ordering::Acquire) == 1).then_some(()).ok_or_else(|| "not yet".to_string()) }
    })
    .await;
    doomed.kill();
    let ans = in_flight.await.expect("request task");
    // The deadline is 120 s: a 502 (not a 504) means the failure surfaced when the instance died.
    assert_eq!(ans.status, 502, "{}", ans.text);

    // The Home still lists the dead instance: new requests are refused by it and wait
    // (retrying) until a live instance is reported.
    let waiting = tokio::spawn({
        let (c, addr, ns) = (c.clone(), router.internal, ns.clone());
        async move { by_headers(&c, addr, &ns, "hello-00001", "/after").await }
    });
    let table_router = Arc::clone(&router.router);
    let ns2 = ns.clone();
    eventually("the request waits for an instance", || {
        let (r, ns) = (Arc::clone(&table_router), ns2.clone());
        async move {
            let queued = r.table().revision(&ns, "hello-00001").map(|e| e.backend.stats().queued).unwrap_or(0);
            (queued == 1).then_some(()).ok_or(format!("queued {queued}"))
        }
    })
    .await;
    let fresh = Upstream::start("fresh").await;
    set_instances(&client, &ns, "hello-00001", &[("doomed", doomed.addr, true), ("fresh", fresh.addr, true)]).await;
    let ans = waiting.await.expect("request task");
    assert_eq!((ans.status, ans.name.as_str()), (200, "fresh"), "{}", ans.text);
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_loaded_instance_requests_queue_503_when_full_and_504_at_the_deadline() {
    let (cluster, client) = cluster().await;
    let ns = cluster.namespace("router-queue").await;
    let unloaded = Upstream::start("unloaded").await;
    create_home(&client, &ns, "wait-00001", policy(Duration::from_secs(120), false), &[("u", unloaded.addr, false)]).await;
    create_home(&client, &ns, "late-00001", policy(Duration::from_secs(1), false), &[]).await;
    let mut config = ClusterConfig::new(SERVICE_DNS);
    config.backend.queue_capacity = 1;
    config.fixed_queue_capacity = true;
    let router = start_router(client.clone(), config).await;
    let c = http();

    let first = tokio::spawn({
        let (c, addr, ns) = (c.clone(), router.internal, ns.clone());
        async move { by_headers(&c, addr, &ns, "wait-00001", "/first").await }
    });
    let r = Arc::clone(&router.router);
    let ns2 = ns.clone();
    eventually("the first request waits", || {
        let (r, ns) = (Arc::clone(&r), ns2.clone());
        async move {
            let queued = r.table().revision(&ns, "wait-00001").map(|e| e.backend.stats().queued).unwrap_or(0);
            (queued == 1).then_some(()).ok_or(format!("queued {queued}"))
        }
    })
    .await;
    let resp = c
        .get(format!("http://{}/second", router.internal))
        .header("knative-serving-namespace", &ns)
        .header("knative-serving-revision", "wait-00001")
        .send()
        .await
        .expect("response");
    assert_eq!(resp.headers().get("retry-after").map(|v| v.as_bytes()), Some(b"1".as_slice()));
    assert_eq!(read(resp).await.status, 503, "the queue holds one request");

    set_instances(&client, &ns, "wait-00001", &[("u", unloaded.addr, true)]).await;
    let ans = first.await.expect("request task");
    assert_eq!((ans.status, ans.name.as_str(), ans.field("rev")), (200, "unloaded", "wait-00001"), "{}", ans.text);

    let ans = by_headers(&c, router.internal, &ns, "late-00001", "/").await;
    assert_eq!(ans.status, 504, "no instance before the 1 s deadline: {}", ans.text);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_home_takes_its_revision_away() {
    let (cluster, client) = cluster().await;
    let ns = cluster.namespace("router-delete").await;
    let up = Upstream::start("up").await;
    create_home(&client, &ns, "bye-00001", policy(Duration::from_secs(60), false), &[("up", up.addr, true)]).await;
    let router = start_router(client.clone(), ClusterConfig::new(SERVICE_DNS)).await;
    let c = http();
    eventually("Revision bye-00001 is routed", || async {
        let ans = by_headers(&c, router.internal, &ns, "bye-00001", "/").await;
        (ans.status == 200).then_some(()).ok_or(ans.text)
    })
    .await;
    Api::<Home>::namespaced(client.clone(), &ns).delete("bye-00001", &DeleteParams::default()).await.expect("delete Home");
    eventually("Revision bye-00001 is gone", || async {
        let ans = by_headers(&c, router.internal, &ns, "bye-00001", "/").await;
        (ans.status == 404).then_some(()).ok_or(format!("{} {}", ans.status, ans.text))
    })
    .await;
    let metrics = router.router.render_metrics();
    assert_eq!(sample(&metrics, "lampyr_router_instances", &ns, "bye-00001"), Some(0.0), "{metrics}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_revision_whose_policy_says_http2_is_reached_over_h2c() {
    let (cluster, client) = cluster().await;
    let ns = cluster.namespace("router-h2c").await;
    let up = Upstream::start("h2").await;
    create_home(&client, &ns, "grpc-00001", policy(Duration::from_secs(60), true), &[("h2", up.addr, true)]).await;
    let router = start_router(client.clone(), ClusterConfig::new(SERVICE_DNS)).await;
    let c = http();
    eventually("Revision grpc-00001 is routed", || async {
        let ans = by_headers(&c, router.internal, &ns, "grpc-00001", "/").await;
        (ans.status == 200).then_some(()).ok_or(ans.text)
    })
    .await;
    let ans = by_headers(&c, router.internal, &ns, "grpc-00001", "/").await;
    assert_eq!(ans.field("version"), "HTTP/2.0", "{}", ans.text);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_fiber_router_binary_converges_after_a_restart() {
    let (cluster, client) = cluster().await;
    let ns = cluster.namespace("router-restart").await;
    let (one, two) = (Upstream::start("one").await, Upstream::start("two").await);
    create_home(&client, &ns, "one-00001", policy(Duration::from_secs(60), false), &[("one", one.addr, true)]).await;
    let binary = workspace_binary("lampyr-router", "fiber-router");
    let logs = tempfile::tempdir().expect("tempdir");
    let c = http();

    let start = |run: u32| {
        let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
        let mut command = std::process::Command::new(&binary);
        command
            .arg("--kubeconfig")
            .arg(cluster.kubeconfig())
            .arg(format!("--listen=127.0.0.1:{port}"))
            .args(["--listen-admin=127.0.0.1:0", "--listen-tls=127.0.0.1:0"])
            .arg(format!("--service-dns={SERVICE_DNS}"))
            .env("RUST_LOG", "info");
        let log = logs.path().join(format!("fiber-router-{run}.log"));
        let process = Process::spawn("fiber-router", command, &log).expect("fiber-router starts");
        (process, SocketAddr::from(([127, 0, 0, 1], port)))
    };
    // The binary listens once it has listed the cluster: its first answer already reflects it.
    let (mut first, addr) = start(1);
    wait_listening(&mut first, &c, addr).await;
    let ans = by_headers(&c, addr, &ns, "one-00001", "/").await;
    assert_eq!((ans.status, ans.name.as_str()), (200, "one"), "{}", ans.text);
    first.kill();

    // While no router runs: one Home goes, another comes.
    Api::<Home>::namespaced(client.clone(), &ns).delete("one-00001", &DeleteParams::default()).await.expect("delete Home");
    create_home(&client, &ns, "two-00001", policy(Duration::from_secs(60), false), &[("two", two.addr, true)]).await;
    let homes = Api::<Home>::namespaced(client.clone(), &ns);
    eventually("Home one-00001 is gone", || async {
        match homes.get_opt("one-00001").await {
            Ok(None) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;

    let (mut second, addr) = start(2);
    wait_listening(&mut second, &c, addr).await;
    let ans = by_headers(&c, addr, &ns, "two-00001", "/").await;
    assert_eq!((ans.status, ans.name.as_str()), (200, "two"), "the new Home is served at once: {}", ans.text);
    let ans = by_headers(&c, addr, &ns, "one-00001", "/").await;
    assert_eq!(ans.status, 404, "the deleted Home is not: {}", ans.text);
    second.kill();
}

/// Waits until the router process answers `/healthz` at `addr`, failing with its log if it dies.
async fn wait_listening(process: &mut Process, c: &reqwest::Client, addr: SocketAddr) {
    let deadline = Instant::now() + CONVERGE;
    loop {
        if let Ok(resp) = c.get(format!("http://{addr}/healthz")).send().await
            && resp.status().as_u16() == 200
        {
            return;
        }
        if let Err(why) = process.check_running() {
            panic!("fiber-router died: {why}");
        }
        assert!(Instant::now() < deadline, "fiber-router did not listen within {CONVERGE:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ---------------------------------------------------------------- KIngress

/// A split as the upstream Route reconciler writes it.
fn split(ns: &str, revision: &str, percent: i64) -> serde_json::Value {
    json!({
        "serviceNamespace": ns, "serviceName": revision, "servicePort": 80, "percent": percent,
        "appendHeaders": { "Knative-Serving-Revision": revision, "Knative-Serving-Namespace": ns },
    })
}

/// A KIngress `hello` of the fiber class as the upstream Route reconciler would
/// write it for two Revisions at `a`/`b` percent and a tag `blue` on hello-b.
fn kingress(ns: &str, a: i64, b: i64) -> Ingress {
    let splits = || {
        let mut s = Vec::new();
        if a > 0 {
            s.push(split(ns, "hello-a", a));
        }
        if b > 0 {
            s.push(split(ns, "hello-b", b));
        }
        s
    };
    serde_json::from_value(json!({
        "apiVersion": "networking.internal.knative.dev/v1alpha1",
        "kind": "Ingress",
        "metadata": {
            "name": "hello", "namespace": ns,
            "annotations": { "networking.knative.dev/ingress.class": FIBER_INGRESS_CLASS },
        },
        "spec": {
            "httpOption": "Enabled",
            "rules": [
                { "hosts": [format!("hello.{ns}"), format!("hello.{ns}.svc"), format!("hello.{ns}.svc.cluster.local")],
                  "visibility": "ClusterLocal",
                  "http": { "paths": [{ "splits": splits() }] } },
                { "hosts": [format!("hello.{ns}.example.com")], "visibility": "ExternalIP",
                  "http": { "paths": [{ "splits": splits() }] } },
                { "hosts": [format!("blue-hello.{ns}.svc.cluster.local")], "visibility": "ClusterLocal",
                  "http": { "paths": [{ "appendHeaders": { "Knative-Serving-Tag": "blue" }, "splits": [split(ns, "hello-b", 100)] }] } },
                { "hosts": [format!("blue-hello.{ns}.example.com")], "visibility": "ExternalIP",
                  "http": { "paths": [{ "appendHeaders": { "Knative-Serving-Tag": "blue" }, "splits": [split(ns, "hello-b", 100)] }] } },
            ],
        },
    }))
    .expect("a KIngress")
}

/// Waits until KIngress `name` is Ready for its current generation with the router's load balancers.
async fn wait_ingress_ready(client: &Client, ns: &str, name: &str) -> Ingress {
    let api = Api::<Ingress>::namespaced(client.clone(), ns);
    let deadline = Instant::now() + CONVERGE;
    loop {
        let found = api.get_opt(name).await.unwrap_or_else(|e| panic!("reading KIngress {ns}/{name}: {e}"));
        let ready = found.as_ref().and_then(|i| i.status.as_ref().map(|s| (i, s))).is_some_and(|(ingress, s)| {
            let lb = |l: &Option<lampyr_api::networking::LoadBalancerStatus>| {
                l.as_ref().is_some_and(|l| l.ingress.iter().any(|i| i.domain_internal == SERVICE_DNS))
            };
            s.is_ready(ingress.metadata.generation) && lb(&s.public_load_balancer) && lb(&s.private_load_balancer)
        });
        if ready && let Some(ingress) = found {
            return ingress;
        }
        assert!(Instant::now() < deadline, "KIngress {ns}/{name} is not Ready within {CONVERGE:?}: {found:#?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kingress_of_the_fiber_class_splits_tags_and_keeps_cluster_local_hosts_inside() {
    let (cluster, client) = cluster().await;
    let ns = cluster.namespace("router-kingress").await;
    let (a, b) = (Upstream::start("a").await, Upstream::start("b").await);
    create_home(&client, &ns, "hello-a", policy(Duration::from_secs(60), false), &[("a", a.addr, true)]).await;
    create_home(&client, &ns, "hello-b", policy(Duration::from_secs(60), false), &[("b", b.addr, true)]).await;
    let router = start_router(client.clone(), ClusterConfig::new(SERVICE_DNS)).await;
    let ingresses = Api::<Ingress>::namespaced(client.clone(), &ns);
    ingresses.create(&PostParams::default(), &kingress(&ns, 50, 50)).await.expect("create KIngress");
    let ingress = wait_ingress_ready(&client, &ns, "hello").await;
    assert_eq!(ingress.status.as_ref().map(|s| s.observed_generation), ingress.metadata.generation);
    let c = http();
    let public_host = format!("hello.{ns}.example.com");
    eventually("the public host is routed", || async {
        let ans = by_host(&c, router.public, &public_host, "/").await;
        (ans.status == 200).then_some(()).ok_or(ans.text)
    })
    .await;

    let (mut to_a, mut to_b) = (0, 0);
    for _ in 0..400 {
        let ans = by_host(&c, router.public, &public_host, "/").await;
        assert_eq!(ans.status, 200, "{}", ans.text);
        let expected_rev = match ans.name.as_str() {
            "a" => {
                to_a += 1;
                "hello-a"
            }
            "b" => {
                to_b += 1;
                "hello-b"
            }
            other => panic!("answered by {other:?}"),
        };
        assert_eq!((ans.field("rev"), ans.field("ns")), (expected_rev, ns.as_str()), "the split's headers are appended");
        assert_eq!(ans.field("host"), public_host, "the Host is kept");
    }
    // 400 draws at p = 0.5: sd 10; 160..=240 is 4 sd either side.
    assert!((160..=240).contains(&to_a), "50/50 split measured {to_a}/{to_b}");

    for (addr, host) in
        [(router.public, format!("blue-hello.{ns}.example.com")), (router.internal, format!("blue-hello.{ns}.svc.cluster.local"))]
    {
        for _ in 0..10 {
            let ans = by_host(&c, addr, &host, "/").await;
            assert_eq!((ans.status, ans.name.as_str(), ans.field("tag")), (200, "b", "blue"), "tag host {host}: {}", ans.text);
        }
    }
    let local = format!("hello.{ns}.svc.cluster.local:80");
    assert_eq!(by_host(&c, router.internal, &local, "/").await.status, 200, "cluster-local hosts are served inside");
    let ans = by_host(&c, router.public, &local, "/").await;
    assert_eq!(ans.status, 404, "cluster-local hosts are not served on the public listener: {}", ans.text);
    let probe = c
        .get(format!("http://{}/healthz", router.public))
        .header("host", &public_host)
        .header("k-network-probe", "probe")
        .header("k-network-hash", "h1")
        .send()
        .await
        .expect("probe");
    assert_eq!(
        (probe.status().as_u16(), probe.headers().get("k-network-hash").map(|v| v.as_bytes().to_vec())),
        (200, Some(b"h1".to_vec()))
    );

    // A new generation: all traffic to hello-a.
    let mut current = ingresses.get("hello").await.expect("read KIngress");
    current.spec = kingress(&ns, 100, 0).spec;
    ingresses.replace("hello", &PostParams::default(), &current).await.expect("update KIngress");
    let updated = wait_ingress_ready(&client, &ns, "hello").await;
    assert!(updated.metadata.generation > ingress.metadata.generation);
    for _ in 0..20 {
        let ans = by_host(&c, router.public, &public_host, "/").await;
        assert_eq!((ans.status, ans.name.as_str()), (200, "a"), "{}", ans.text);
    }

    ingresses.delete("hello", &DeleteParams::default()).await.expect("delete KIngress");
    eventually("the hosts are gone", || async {
        let ans = by_host(&c, router.public, &public_host, "/").await;
        (ans.status == 404).then_some(()).ok_or(format!("{} {}", ans.status, ans.text))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_split_to_an_ordinary_service_is_ready_only_once_the_service_exists_with_a_ready_endpoint() {
    let (cluster, client) = cluster().await;
    let ns = cluster.namespace("router-service").await;
    let ip = non_loopback_ip();
    let up = Upstream::start_at("plain", ip).await;
    let router = start_router(client.clone(), ClusterConfig::new(SERVICE_DNS)).await;
    let c = http();
    // What another replica writing the status asks this one.
    let host = format!("plain.{ns}.example.com");
    let probe = || {
        c.get(format!("http://{}/", router.internal))
            .header("host", &host)
            .header("k-network-probe", "probe")
            .header("k-network-hash", lampyr_router::peers::OVERRIDE)
            .send()
    };
    let ingresses = Api::<Ingress>::namespaced(client.clone(), &ns);
    let not_ready = || async {
        // The status would be written right after the table: give it the time it would take.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let status = ingresses.get("plain").await.expect("read KIngress").status;
        assert!(status.as_ref().is_none_or(|s| !s.is_ready(Some(1))), "Ready with nothing to answer: {status:#?}");
        let early = probe().await.expect("probe");
        assert_eq!(early.status(), 503, "a replica that cannot route the split yet does not claim the host");
        assert_eq!(early.headers().get("k-network-hash"), None);
    };

    // The KIngress first: the Service it names is not there yet (or not in this replica's view).
    let ingress: Ingress = serde_json::from_value(json!({
        "apiVersion": "networking.internal.knative.dev/v1alpha1",
        "kind": "Ingress",
        "metadata": {"name": "plain", "namespace": ns, "annotations": {"networking.knative.dev/ingress.class": FIBER_INGRESS_CLASS}},
        "spec": {"rules": [{"hosts": [host], "visibility": "ExternalIP", "http": {"paths": [{"splits": [
            {"serviceNamespace": ns, "serviceName": "plain", "servicePort": 80, "percent": 100},
        ]}]}}]},
    }))
    .expect("a KIngress");
    ingresses.create(&PostParams::default(), &ingress).await.expect("create KIngress");
    eventually("the host is programmed, though its split names no Service yet", || async {
        let answer = probe().await.map_err(|e| e.to_string())?;
        (answer.status() == 503).then_some(()).ok_or(format!("probe answered {}", answer.status()))
    })
    .await;
    not_ready().await;

    // A Service without a selector: its endpoints are the EndpointSlice below. Its cluster IP
    // leads nowhere here (no kube-proxy), so only routing to the endpoints can answer.
    let service: k8s_openapi::api::core::v1::Service = serde_json::from_value(json!({
        "metadata": {"name": "plain", "namespace": ns},
        "spec": {"ports": [{"name": "http", "port": 80, "targetPort": up.addr.port()}]},
    }))
    .expect("a Service");
    Api::namespaced(client.clone(), &ns).create(&PostParams::default(), &service).await.expect("create Service");
    let slice = |ready: bool| -> k8s_openapi::api::discovery::v1::EndpointSlice {
        serde_json::from_value(json!({
            "metadata": {"name": "plain-1", "namespace": ns, "labels": {"kubernetes.io/service-name": "plain"}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": up.addr.port(), "protocol": "TCP"}],
            "endpoints": [{"addresses": [ip.to_string()], "conditions": {"ready": ready}}],
        }))
        .expect("an EndpointSlice")
    };
    let slices = Api::<k8s_openapi::api::discovery::v1::EndpointSlice>::namespaced(client.clone(), &ns);
    slices.create(&PostParams::default(), &slice(false)).await.expect("create EndpointSlice");
    eventually("the host is routed to the Service, which has no ready endpoint", || async {
        let ans = by_host(&c, router.public, &host, "/").await;
        (ans.status == 503 && ans.text.contains("no ready endpoints")).then_some(()).ok_or(format!("{} {}", ans.status, ans.text))
    })
    .await;
    not_ready().await;

    slices
        .replace("plain-1", &PostParams::default(), &{
            let mut ready = slice(true);
            ready.metadata.resource_version = slices.get("plain-1").await.expect("read slice").metadata.resource_version;
            ready
        })
        .await
        .expect("the endpoint becomes ready");
    let ready = wait_ingress_ready(&client, &ns, "plain").await;
    for _ in 0..10 {
        let ans = by_host(&c, router.public, &host, "/").await;
        assert_eq!((ans.status, ans.name.as_str()), (200, "plain"), "{}", ans.text);
    }
    let late = probe().await.expect("probe");
    assert_eq!(late.status(), 200, "once it has a ready endpoint, the replica claims the host");
    let answered = late.headers().get("k-network-hash").and_then(|h| h.to_str().ok()).map(str::to_string);
    assert_eq!(answered, Some(lampyr_router::kingress::hash(&ready)), "answered with the KIngress's hash");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kingress_of_another_class_is_left_alone() {
    let (cluster, client) = cluster().await;
    let ns = cluster.namespace("router-other-class").await;
    // The marker's split is routable (a KIngress naming nothing routable is never Ready).
    let b = Upstream::start("b").await;
    create_home(&client, &ns, "hello-b", policy(Duration::from_secs(60), false), &[("b", b.addr, true)]).await;
    let router = start_router(client.clone(), ClusterConfig::new(SERVICE_DNS)).await;
    let mut other = kingress(&ns, 50, 50);
    other.metadata.name = Some("kourier".into());
    other.metadata.annotations =
        Some([("networking.knative.dev/ingress.class".to_string(), "kourier.ingress.networking.knative.dev".to_string())].into());
    let api = Api::<Ingress>::namespaced(client.clone(), &ns);
    api.create(&PostParams::default(), &other).await.expect("create KIngress");
    // A KIngress of ours created after it is programmed: by then the other one has been seen too.
    let mut ours = kingress(&ns, 50, 50);
    ours.spec.rules.retain(|r| r.hosts.iter().all(|h| !h.starts_with("hello.")));
    ours.metadata.name = Some("marker".into());
    api.create(&PostParams::default(), &ours).await.expect("create KIngress");
    wait_ingress_ready(&client, &ns, "marker").await;
    let other = api.get("kourier").await.expect("read KIngress");
    assert_eq!(other.status, None, "no status is written on another class's KIngress");
    let ans = by_host(&http(), router.public, &format!("hello.{ns}.example.com"), "/").await;
    assert_eq!(ans.status, 404, "its hosts are not routed: {}", ans.text);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_knative_service_of_the_fiber_ingress_class_is_routed_end_to_end() {
    let (cluster, client) = cluster().await;
    let ns = cluster.namespace("router-ksvc").await;
    let up = Upstream::start("fiberd").await;
    let router = start_router(client.clone(), ClusterConfig::new(SERVICE_DNS)).await;
    let service: Service = serde_json::from_value(json!({
        "apiVersion": "serving.knative.dev/v1",
        "kind": "Service",
        "metadata": { "name": "hello", "namespace": ns,
                      "annotations": { "networking.knative.dev/ingress.class": FIBER_INGRESS_CLASS } },
        "spec": { "template": { "spec": { "containers": [{ "image": ARTIFACT }] } } },
    }))
    .expect("a Service");
    Api::<Service>::namespaced(client.clone(), &ns).create(&PostParams::default(), &service).await.expect("create Service");

    // Play the Revision reconciler: publish a Home and mark the Revision Ready.
    let revisions = Api::<Revision>::namespaced(client.clone(), &ns);
    eventually("the Revision is stamped", || async {
        let revision = revisions.get_opt("hello-00001").await.map_err(|e| e.to_string())?;
        revision.is_some().then_some(()).ok_or_else(|| "not yet".to_string())
    })
    .await;
    create_home(&client, &ns, "hello-00001", policy(Duration::from_secs(60), false), &[("fiberd", up.addr, true)]).await;
    mark_revision_ready(&revisions, "hello-00001").await;

    let ingress = wait_ingress_ready(&client, &ns, "hello").await;
    let annotations = ingress.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(annotations.get("networking.knative.dev/ingress.class").map(String::as_str), Some(FIBER_INGRESS_CLASS));
    let routes = Api::<Route>::namespaced(client.clone(), &ns);
    eventually("the Route is Ready", || async {
        let route = routes.get("hello").await.map_err(|e| e.to_string())?;
        let status = route.status.clone().unwrap_or_default();
        status.is_ready(route.metadata.generation).then_some(()).ok_or_else(|| format!("{status:#?}"))
    })
    .await;
    let url = routes.get("hello").await.expect("Route").status.and_then(|s| s.url).unwrap_or_default();
    let host = url.trim_start_matches("http://").trim_start_matches("https://").to_string();
    assert!(!host.is_empty(), "the Route has a URL");
    let c = http();
    let ans = by_host(&c, router.internal, &host, "/from-the-route").await;
    assert_eq!((ans.status, ans.name.as_str()), (200, "fiberd"), "{host}: {}", ans.text);
    assert_eq!((ans.field("ns"), ans.field("rev")), (ns.as_str(), "hello-00001"));
    // The environment's domain is upstream's default, svc.cluster.local: such a Route is
    // cluster-local, so upstream writes no ExternalIP rule and the public listener refuses it.
    let ans = by_host(&c, router.public, &host, "/from-the-route").await;
    assert_eq!(ans.status, 404, "{}", ans.text);
}

// ---------------------------------------------------------------- one routing implementation

/// Where a request for `host` with `headers` goes: the host's visibility, and
/// the matched path's splits as `(revision, percent, headers set)`.
type Reach = (IngressVisibility, Vec<(String, u32, Vec<(String, String)>)>);

fn reach(table: &RouteTable, host: &str, headers: &http::HeaderMap) -> Option<Reach> {
    let route = table.host(host)?;
    let path = route.route("/", headers)?;
    let splits = path
        .splits
        .iter()
        .map(|s| {
            let mut set: Vec<(String, String)> = path
                .append_headers
                .iter()
                .chain(&s.append_headers)
                .map(|(n, v)| (n.as_str().to_string(), v.to_str().unwrap_or_default().to_string()))
                .collect();
            set.sort();
            (s.service.clone(), s.percent, set)
        })
        .collect();
    Some((route.visibility, splits))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_service_with_tags_reaches_the_same_revisions_through_upstreams_route_and_through_ly_runs() {
    let (cluster, client) = cluster().await;
    let ns = cluster.namespace("router-same").await;
    let services = Api::<Service>::namespaced(client.clone(), &ns);
    let revisions = Api::<Revision>::namespaced(client.clone(), &ns);
    let v1: Service = serde_json::from_value(json!({
        "apiVersion": "serving.knative.dev/v1",
        "kind": "Service",
        "metadata": { "name": "shop", "namespace": ns,
                      "annotations": { "networking.knative.dev/ingress.class": FIBER_INGRESS_CLASS } },
        "spec": { "template": { "spec": { "containers": [{ "image": ARTIFACT, "env": [{ "name": "TARGET", "value": "one" }] }] } } },
    }))
    .expect("a Service");
    services.create(&PostParams::default(), &v1).await.expect("create Service");
    let stamped = |name: &'static str| {
        let revisions = revisions.clone();
        async move {
            eventually(&format!("Revision {name} is stamped"), || async {
                revisions.get_opt(name).await.map_err(|e| e.to_string())?.map(|_| ()).ok_or_else(|| "not yet".to_string())
            })
            .await;
        }
    };
    stamped("shop-00001").await;
    mark_revision_ready(&revisions, "shop-00001").await;
    let traffic = json!([
        { "revisionName": "shop-00001", "percent": 80, "tag": "current" },
        { "latestRevision": true, "percent": 20, "tag": "candidate" },
        { "latestRevision": true, "percent": 0, "tag": "latest" },
    ]);
    let v2 = json!({ "spec": {
        "template": { "spec": { "containers": [{ "image": ARTIFACT, "env": [{ "name": "TARGET", "value": "two" }] }] } },
        "traffic": traffic,
    }});
    services.patch("shop", &PatchParams::default(), &Patch::Merge(&v2)).await.expect("update Service");
    stamped("shop-00002").await;
    mark_revision_ready(&revisions, "shop-00002").await;

    let ingresses = Api::<Ingress>::namespaced(client.clone(), &ns);
    let programmed = |found: &Ingress| {
        let hosts: Vec<&String> = found.spec.rules.iter().flat_map(|r| &r.hosts).collect();
        let tagged = ["current", "candidate", "latest"].iter().all(|t| hosts.iter().any(|h| h.starts_with(&format!("{t}-shop."))));
        tagged && found.spec.rules.iter().flat_map(|r| r.http.iter().flat_map(|h| &h.paths)).any(|p| p.splits.len() == 2)
    };
    eventually("upstream's Route programs the tagged traffic", || async {
        let found = ingresses.get_opt("shop").await.map_err(|e| e.to_string())?.ok_or("no KIngress yet")?;
        programmed(&found).then_some(()).ok_or_else(|| format!("{:#?}", found.spec))
    })
    .await;
    // Nothing changes the Service after this: the KIngress is final.
    let cluster_ingress = ingresses.get("shop").await.expect("the KIngress");
    assert!(programmed(&cluster_ingress));

    let mut from_cluster = RouteTable::default();
    for (host, route) in kingress::routes(&cluster_ingress).expect("a valid KIngress") {
        from_cluster.insert_host(&host, route);
    }
    // What `ly run` resolves from the same Service: tags as written, `latestRevision` as the newest Revision.
    let target = |tag: &str, revision: &str, percent| TrafficRoute { tag: Some(tag.into()), revision: revision.into(), percent };
    let local_traffic = ServiceTraffic {
        namespace: ns.clone(),
        name: "shop".into(),
        targets: vec![target("current", "shop-00001", 80), target("candidate", "shop-00002", 20), target("latest", "shop-00002", 0)],
        cluster_local: false,
    };
    // The environment's config-domain is upstream's default.
    let options = RouteOptions { domain: "svc.cluster.local".into(), ..RouteOptions::default() };
    let mut from_ly_run = RouteTable::default();
    route::program(&mut from_ly_run, &local_traffic, &options).expect("a new host");

    let hosts = |t: &RouteTable| t.hosts().map(|(h, _)| h.to_string()).collect::<std::collections::BTreeSet<_>>();
    assert_eq!(hosts(&from_ly_run), hosts(&from_cluster), "the same hosts");
    let mut tagged = http::HeaderMap::new();
    tagged.insert("knative-serving-tag", http::HeaderValue::from_static("candidate"));
    for host in hosts(&from_cluster) {
        for headers in [http::HeaderMap::new(), tagged.clone()] {
            let cluster_reach = reach(&from_cluster, &host, &headers);
            assert!(cluster_reach.is_some(), "{host} reaches a Revision in the cluster");
            assert_eq!(reach(&from_ly_run, &host, &headers), cluster_reach, "{host} with {headers:?}");
        }
    }
    let reached = reach(&from_ly_run, &format!("candidate-shop.{ns}.svc.cluster.local"), &http::HeaderMap::new());
    assert_eq!(
        reached.map(|(_, splits)| splits.into_iter().map(|(rev, p, _)| (rev, p)).collect::<Vec<_>>()),
        Some(vec![("shop-00002".to_string(), 100)])
    );
}

// ---------------------------------------------------------------- TLS

/// KIngress `secure`: `host` (ExternalIP) to hello-a, over TLS with Secret `secret`,
/// plain HTTP redirected to HTTPS, as upstream writes it for a DomainMapping with TLS.
fn tls_kingress(ns: &str, host: &str, secret: &str) -> Ingress {
    serde_json::from_value(json!({
        "apiVersion": "networking.internal.knative.dev/v1alpha1",
        "kind": "Ingress",
        "metadata": {
            "name": "secure", "namespace": ns,
            "annotations": { "networking.knative.dev/ingress.class": FIBER_INGRESS_CLASS },
        },
        "spec": {
            "httpOption": "Redirected",
            "tls": [{ "hosts": [host], "secretName": secret, "secretNamespace": ns }],
            "rules": [{ "hosts": [host], "visibility": "ExternalIP", "http": { "paths": [{ "splits": [split(ns, "hello-a", 100)] }] } }],
        },
    }))
    .expect("a KIngress")
}

/// Waits until KIngress `name` says `NetworkConfigured` False for `reason`; returns its message.
async fn wait_not_configured(client: &Client, ns: &str, name: &str, reason: &str) -> String {
    let api = Api::<Ingress>::namespaced(client.clone(), ns);
    let deadline = Instant::now() + CONVERGE;
    loop {
        let found = api.get(name).await.unwrap_or_else(|e| panic!("reading KIngress {ns}/{name}: {e}"));
        let condition = found.status.as_ref().and_then(|s| {
            lampyr_api::conditions::get_condition(&s.conditions, lampyr_api::conditions::ingress::NETWORK_CONFIGURED).cloned()
        });
        if let Some(c) = condition.filter(|c| c.reason == reason && c.is_false()) {
            assert!(!found.status.as_ref().is_some_and(|s| s.is_ready(found.metadata.generation)), "not Ready: {found:#?}");
            return c.message;
        }
        assert!(Instant::now() < deadline, "KIngress {ns}/{name} does not say {reason} within {CONVERGE:?}: {:#?}", found.status);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn https_serves_spec_tls_by_sni_redirects_plain_http_and_follows_its_secret() {
    use k8s_openapi::api::core::v1::Secret;
    use lampyr_testenv::tls::{TestCa, https_get};

    let (cluster, client) = cluster().await;
    let ns = cluster.namespace("router-tls").await;
    let a = Upstream::start("a").await;
    create_home(&client, &ns, "hello-a", policy(Duration::from_secs(60), false), &[("a", a.addr, true)]).await;
    let router = start_router(client.clone(), ClusterConfig::new(SERVICE_DNS)).await;
    let c = http();
    let ca = TestCa::new("router-tls-test-ca").expect("CA");
    let host = format!("secure.{ns}.example.com");
    let ingresses = Api::<Ingress>::namespaced(client.clone(), &ns);
    let secrets = Api::<Secret>::namespaced(client.clone(), &ns);

    // Its Secret missing: not programmed, and the status names the Secret.
    ingresses.create(&PostParams::default(), &tls_kingress(&ns, &host, "secure-tls")).await.expect("create KIngress");
    let message = wait_not_configured(&client, &ns, "secure", kingress::REASON_TLS_SECRET_MISSING).await;
    assert!(message.contains(&format!("Secret {ns}/secure-tls does not exist")), "{message}");
    assert_eq!(by_host(&c, router.public, &host, "/").await.status, 404, "nothing of it is routed");

    // The Secret appears: Ready; HTTPS answers with the certificate, verified against the CA.
    let first = ca.issue(&[&host]).expect("certificate");
    let secret: Secret = serde_json::from_value(first.secret(&ns, "secure-tls")).expect("a Secret");
    secrets.create(&PostParams::default(), &secret).await.expect("create Secret");
    wait_ingress_ready(&client, &ns, "secure").await;
    let ans = https_get(router.https, &host, "/over-tls", ca.pem()).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(ans.status == 200 && ans.body.starts_with("a "), "{ans:?}");
    assert!(ans.body.contains("rev=hello-a") && ans.body.contains("proto=https"), "routed, and told it came over HTTPS: {}", ans.body);
    assert_eq!(ans.peer_certificate, first.der, "the Secret's certificate is presented");

    // Plain HTTP to it is redirected to the same target over HTTPS, and never served.
    let no_redirects = lampyr_testenv::http_client().redirect(reqwest::redirect::Policy::none()).build().expect("client");
    let resp = no_redirects.get(format!("http://{}/a/b?c=d", router.public)).header("host", &host).send().await.expect("response");
    let location = resp.headers().get("location").and_then(|l| l.to_str().ok()).unwrap_or_default().to_string();
    assert_eq!((resp.status().as_u16(), location.as_str()), (301, format!("https://{host}/a/b?c=d").as_str()));
    assert_eq!(a.hits.load(Ordering::Acquire), 1, "only the HTTPS request reached the Revision");

    // A name no KIngress covers gets no certificate: the handshake fails.
    let other = https_get(router.https, "other.example.com", "/", ca.pem()).await;
    assert!(other.is_err(), "a host without a certificate is refused: {other:?}");
    // The public listener's rules only: a cluster-local host is not served over HTTPS either.
    let internal = https_get(router.https, &format!("hello-a.{ns}.svc.cluster.local"), "/", ca.pem()).await;
    assert!(internal.is_err(), "{internal:?}");

    // The certificate rotates: the next handshake presents the new one, with no restart.
    let second = ca.issue(&[&host]).expect("certificate");
    let rotate = json!({ "stringData": { "tls.crt": second.cert_pem, "tls.key": second.key_pem } });
    secrets.patch("secure-tls", &PatchParams::default(), &Patch::Merge(&rotate)).await.expect("rotate the Secret");
    eventually("the rotated certificate is served", || async {
        let ans = https_get(router.https, &host, "/", ca.pem()).await?;
        (ans.peer_certificate == second.der && ans.status == 200).then_some(()).ok_or_else(|| format!("{} {}", ans.status, ans.body))
    })
    .await;

    // A key that does not belong to the certificate: not programmed, and the status says why.
    let unrelated = ca.issue(&["unrelated.example.com"]).expect("certificate");
    let broken = json!({ "stringData": { "tls.key": unrelated.key_pem } });
    secrets.patch("secure-tls", &PatchParams::default(), &Patch::Merge(&broken)).await.expect("break the Secret");
    let message = wait_not_configured(&client, &ns, "secure", kingress::REASON_TLS_SECRET_INVALID).await;
    assert!(message.contains(&format!("Secret {ns}/secure-tls")) && message.contains("tls.key"), "{message}");
    eventually("the broken KIngress's host is no longer served", || async {
        let refused = https_get(router.https, &host, "/", ca.pem()).await.is_err();
        refused.then_some(()).ok_or_else(|| "still answered over HTTPS".to_string())
    })
    .await;
}
