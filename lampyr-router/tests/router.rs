//! fiber-router over real sockets and real fibers: Host and header routing,
//! traffic splits, activator semantics, limits, probes, metrics, scaling.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use lampyr_abi::Env;
use lampyr_api::policy::{FiberPolicy, ScalingPolicy, TimeoutPolicy};
use lampyr_artifact::{VerifiedArtifact, verify_layout};
use lampyr_fiber::LocalBackend;
use lampyr_fiber::build::{BuildOptions, build_artifact};
use lampyr_fiber::metrics::RuntimeMetrics;
use lampyr_fiber::{FiberPool, PoolConfig, Template};
use lampyr_router::route::{self, RouteOptions, ServiceTraffic, TrafficRoute};
use lampyr_router::{RevisionEntry, RouteTable, Router, RouterConfig, ScalerConfig};
use lampyr_testenv::{example_elf, require_kvm, test_guest_elf};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

mod support;
use support::serve;

fn artifact(elf: std::path::PathBuf, dir: &tempfile::TempDir, name: &str) -> VerifiedArtifact {
    require_kvm();
    let layout = dir.path().join(name);
    let built = build_artifact(&elf, &layout, &BuildOptions { max_body: 64 * 1024, heap_size: None }).expect("builds");
    verify_layout(&layout, Some(&built.digest)).expect("verifies")
}

fn policy(max_scale: u32, timeout: Duration) -> FiberPolicy {
    FiberPolicy {
        scaling: ScalingPolicy { max_scale, stable_window: Duration::from_secs(6), ..ScalingPolicy::default() },
        timeouts: TimeoutPolicy::uniform(timeout),
        ..FiberPolicy::default()
    }
}

fn fast_scaler() -> ScalerConfig {
    ScalerConfig { tick: Duration::from_millis(100), scale_to_zero_grace_period: Duration::from_millis(600), ..ScalerConfig::default() }
}

struct Rev {
    name: &'static str,
    artifact: VerifiedArtifact,
    env: Vec<(&'static str, &'static str)>,
    policy: FiberPolicy,
    queue: usize,
}

async fn entry(rev: Rev, metrics: &RuntimeMetrics) -> (RevisionEntry, Arc<LocalBackend>) {
    let env = Env { vars: rev.env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(), ..Env::default() };
    let template = Template::load(&rev.artifact, &env).expect("template");
    let max = if rev.policy.scaling.max_scale == 0 { 8 } else { rev.policy.scaling.max_scale as usize };
    let pool = FiberPool::new(
        template,
        PoolConfig { revision: rev.name.into(), max_fibers: max, queue_capacity: rev.queue, capacity: None },
        metrics.clone(),
    );
    let backend = LocalBackend::start(pool, rev.policy.scaling.clone(), fast_scaler()).await.expect("backend");
    let entry = RevisionEntry::new("default", rev.name, rev.policy, backend.clone());
    (entry, backend)
}

/// Adds `entry` and a Service `service` that sends it all traffic.
fn add_sole_revision(table: &mut RouteTable, service: &str, entry: RevisionEntry) {
    let traffic = ServiceTraffic::single("default", service, &entry.name);
    table.insert_revision(entry);
    route::program(table, &traffic, &RouteOptions::default()).expect("a new host");
}

/// Polls `cond` until it holds; fails naming `what` after `limit`.
async fn wait_until(what: &str, limit: Duration, cond: impl Fn() -> bool) {
    let until = std::time::Instant::now() + limit;
    while !cond() {
        assert!(std::time::Instant::now() < until, "not reached within {limit:?}: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn client() -> reqwest::Client {
    lampyr_testenv::http_client().timeout(Duration::from_secs(60)).build().expect("client")
}

async fn get(c: &reqwest::Client, addr: SocketAddr, host: &str, path: &str) -> (u16, String) {
    let resp = c.get(format!("http://{addr}{path}")).header("host", host).send().await.expect("response");
    (resp.status().as_u16(), resp.text().await.expect("body"))
}

#[tokio::test(flavor = "multi_thread")]
async fn routes_by_host_and_headers_and_splits_traffic_90_10() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hello = artifact(example_elf("hello"), &dir, "hello");
    let metrics = RuntimeMetrics::default();
    let mut table = RouteTable::default();
    for (name, target) in [("hello-00001", "one"), ("hello-00002", "two")] {
        let rev =
            Rev { name, artifact: hello.clone(), env: vec![("TARGET", target)], policy: policy(4, Duration::from_secs(30)), queue: 64 };
        table.insert_revision(entry(rev, &metrics).await.0);
    }
    let split = |revision: &str, percent| TrafficRoute { tag: None, revision: revision.into(), percent };
    let traffic = ServiceTraffic {
        namespace: "default".into(),
        name: "hello".into(),
        targets: vec![split("hello-00001", 90), split("hello-00002", 10)],
        cluster_local: false,
    };
    route::program(&mut table, &traffic, &RouteOptions::default()).expect("a new host");
    let (_router, addr) = serve(table).await;
    let c = client();

    let (mut one, mut two) = (0, 0);
    for _ in 0..400 {
        let (status, body) = get(&c, addr, "hello.default.localhost:8080", "/").await;
        assert_eq!(status, 200);
        match body.as_str() {
            "Hello one!\n" => one += 1,
            "Hello two!\n" => two += 1,
            other => panic!("unexpected body {other:?}"),
        }
    }
    // 400 draws at p = 0.1: mean 40, sd 6; 16..70 is beyond 4 sd either side.
    assert!((16..=70).contains(&two), "90/10 split measured {one}/{two}");

    let resp = c
        .get(format!("http://{addr}/"))
        .header("knative-serving-namespace", "default")
        .header("knative-serving-revision", "hello-00002")
        .send()
        .await
        .expect("response");
    assert_eq!(resp.text().await.expect("body"), "Hello two!\n", "header routing picks the named revision");

    let (status, body) = get(&c, addr, "nope.default.localhost", "/").await;
    assert_eq!(status, 404, "{body}");
    let (status, _) = get(&c, addr, "localhost", "/healthz").await;
    assert_eq!(status, 200);
    let probe = c
        .get(format!("http://{addr}/healthz"))
        .header("host", "hello.default.localhost")
        .header("k-network-probe", "probe")
        .header("k-network-hash", "abc123")
        .send()
        .await
        .expect("probe");
    assert_eq!(probe.status().as_u16(), 200);
    assert_eq!(probe.headers().get("k-network-hash").map(|v| v.as_bytes()), Some(b"abc123".as_slice()));

    let (_, text) = get(&c, addr, "127.0.0.1", "/metrics").await;
    for name in ["lampyr_router_requests_total", "lampyr_router_request_duration_seconds", "lampyr_router_fibers_actual"] {
        assert!(text.contains(name), "/metrics lacks {name}");
    }
    assert!(text.contains(r#"code="200""#) && text.contains(r#"revision="hello-00002""#));
    let by_code = r#"lampyr_router_request_duration_seconds_count{namespace="default",revision="hello-00002",code="200"}"#;
    assert!(text.contains(by_code), "latency is broken down by status code: {text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn h2c_is_served() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hello = artifact(example_elf("hello"), &dir, "hello");
    let echo = artifact(example_elf("echo"), &dir, "echo");
    let metrics = RuntimeMetrics::default();
    let mut table = RouteTable::default();
    let rev = Rev { name: "hello-00001", artifact: hello, env: vec![], policy: policy(2, Duration::from_secs(30)), queue: 8 };
    add_sole_revision(&mut table, "hello", entry(rev, &metrics).await.0);
    let rev = Rev { name: "echo-00001", artifact: echo, env: vec![], policy: policy(2, Duration::from_secs(30)), queue: 8 };
    add_sole_revision(&mut table, "echo", entry(rev, &metrics).await.0);
    let (_router, addr) = serve(table).await;
    let c = lampyr_testenv::http_client().http2_prior_knowledge().resolve("hello.default.localhost", addr).build().expect("client");
    let resp = c.get(format!("http://hello.default.localhost:{}/", addr.port())).send().await.expect("h2c response");
    assert_eq!(resp.version(), reqwest::Version::HTTP_2);
    assert_eq!(resp.text().await.expect("body"), "Hello World!\n");
    let c = lampyr_testenv::http_client().http2_prior_knowledge().resolve("echo.default.localhost", addr).build().expect("client");
    let resp = c.get(format!("http://echo.default.localhost:{}/h2", addr.port())).send().await.expect("h2c response");
    let body = resp.text().await.expect("body");
    assert!(body.contains(&format!("header: host: echo.default.localhost:{}", addr.port())), "the guest sees :authority as Host: {body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn limits_timeouts_and_a_crashing_revision_do_not_hurt_the_others() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spin = artifact(test_guest_elf("spin"), &dir, "spin");
    let panic = artifact(test_guest_elf("panic"), &dir, "panic");
    let hello = artifact(example_elf("hello"), &dir, "hello");
    let metrics = RuntimeMetrics::default();
    let mut table = RouteTable::default();
    let revs = [
        Rev { name: "spin-00001", artifact: spin, env: vec![], policy: policy(1, Duration::from_secs(2)), queue: 1 },
        Rev { name: "panic-00001", artifact: panic, env: vec![], policy: policy(1, Duration::from_secs(30)), queue: 4 },
        Rev { name: "hello-00001", artifact: hello, env: vec![], policy: policy(2, Duration::from_secs(30)), queue: 4 },
    ];
    let mut spin_backend = None;
    for rev in revs {
        let svc = rev.name.trim_end_matches("-00001").to_string();
        let (e, backend) = entry(rev, &metrics).await;
        if svc == "spin" {
            spin_backend = Some(backend);
        }
        add_sole_revision(&mut table, &svc, e);
    }
    let spin = spin_backend.expect("spin revision");
    let (_router, addr) = serve(table).await;
    let c = client();

    // max-scale 1 and a queue of 1: one request runs, one waits, the third is shed.
    let looping = tokio::spawn({
        let c = c.clone();
        async move { get(&c, addr, "spin.default.localhost", "/loop").await }
    });
    wait_until("the loop request runs", Duration::from_secs(30), || spin.pool().stats().in_flight == 1).await;
    let queued = tokio::spawn({
        let c = c.clone();
        async move { get(&c, addr, "spin.default.localhost", "/").await }
    });
    wait_until("the second request waits", Duration::from_secs(30), || spin.pool().stats().queued == 1).await;
    let shed = c.get(format!("http://{addr}/")).header("host", "spin.default.localhost").send().await.expect("response");
    assert_eq!(shed.status().as_u16(), 503);
    assert_eq!(shed.headers().get("retry-after").map(|v| v.as_bytes()), Some(b"1".as_slice()));

    let (status, _) = get(&c, addr, "panic.default.localhost", "/panic").await;
    assert_eq!(status, 502, "a panicking guest is a 502");
    let (status, body) = get(&c, addr, "hello.default.localhost", "/").await;
    assert_eq!((status, body.as_str()), (200, "Hello World!\n"), "other revisions are unaffected");
    let (status, _) = get(&c, addr, "panic.default.localhost", "/").await;
    assert_eq!(status, 200, "the panicking revision recovers");

    assert_eq!(looping.await.expect("joins").0, 504, "timeoutSeconds → 504");
    let (status, _) = queued.await.expect("joins");
    assert!(status == 200 || status == 504, "the queued request is served or times out at its deadline: {status}");

    let big = c
        .post(format!("http://{addr}/"))
        .header("host", "hello.default.localhost")
        .body(vec![0u8; 64 * 1024 + 1])
        .send()
        .await
        .expect("response");
    assert_eq!(big.status().as_u16(), 413);
}

#[tokio::test(flavor = "multi_thread")]
async fn scales_from_zero_on_the_first_request_and_back_after_the_grace_period() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hello = artifact(example_elf("hello"), &dir, "hello");
    let metrics = RuntimeMetrics::default();
    let mut p = policy(4, Duration::from_secs(30));
    p.scaling.initial_scale = 0;
    let (e, backend) = entry(Rev { name: "hello-00001", artifact: hello, env: vec![], policy: p, queue: 8 }, &metrics).await;
    let mut table = RouteTable::default();
    add_sole_revision(&mut table, "hello", e);
    let (_router, addr) = serve(table).await;
    assert_eq!(backend.pool().stats().live, 0, "initial-scale 0 starts at zero");

    let (status, body) = get(&client(), addr, "hello.default.localhost", "/").await;
    assert_eq!((status, body.as_str()), (200, "Hello World!\n"));
    assert!(backend.pool().stats().live >= 1, "woken by the first request");

    wait_until("back to zero fibers", Duration::from_secs(20), || backend.pool().stats().live == 0).await;
    let (_, text) = get(&client(), addr, "localhost", "/metrics").await;
    assert!(text.contains("lampyr_router_cold_starts_total{namespace=\"default\",revision=\"hello-00001\"} 1"), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_disconnects_frees_its_fiber() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spin = artifact(test_guest_elf("spin"), &dir, "spin");
    let metrics = RuntimeMetrics::default();
    let (e, backend) =
        entry(Rev { name: "spin-00001", artifact: spin, env: vec![], policy: policy(1, Duration::from_secs(300)), queue: 4 }, &metrics)
            .await;
    let mut table = RouteTable::default();
    add_sole_revision(&mut table, "spin", e);
    let (_router, addr) = serve(table).await;

    let c = lampyr_testenv::http_client().timeout(Duration::from_millis(500)).build().expect("client");
    let err = c.get(format!("http://{addr}/loop")).header("host", "spin.default.localhost").send().await.expect_err("client gives up");
    assert!(err.is_timeout());
    let (status, body) = get(&client(), addr, "spin.default.localhost", "/").await;
    assert_eq!((status, body.as_str()), (200, "not looping\n"), "the only fiber was freed");
    // The fiber is restored after its answer is sent; wait for that to finish.
    wait_until("the fiber is idle again", Duration::from_secs(5), || backend.pool().stats().in_flight == 0).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn in_flight_requests_never_exceed_the_fiber_limit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spin = artifact(test_guest_elf("spin"), &dir, "spin");
    let metrics = RuntimeMetrics::default();
    let (e, backend) =
        entry(Rev { name: "spin-00001", artifact: spin, env: vec![], policy: policy(2, Duration::from_secs(2)), queue: 8 }, &metrics).await;
    let mut table = RouteTable::default();
    add_sole_revision(&mut table, "spin", e);
    let (_router, addr) = serve(table).await;
    let c = client();
    let calls: Vec<_> = (0..5)
        .map(|_| {
            let c = c.clone();
            tokio::spawn(async move { get(&c, addr, "spin.default.localhost", "/loop").await.0 })
        })
        .collect();
    let (mut max_in_flight, mut max_queued) = (0, 0);
    let until = std::time::Instant::now() + Duration::from_secs(1);
    while std::time::Instant::now() < until {
        let s = backend.pool().stats();
        max_in_flight = max_in_flight.max(s.in_flight);
        max_queued = max_queued.max(s.queued);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(max_in_flight, 2, "max-scale 2 → at most two requests execute at once");
    assert_eq!(max_queued, 3, "the other three wait in the queue");
    for call in calls {
        assert_eq!(call.await.expect("joins"), 504);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn shutdown_stops_accepting_and_drains_requests_in_flight() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spin = artifact(test_guest_elf("spin"), &dir, "spin");
    let metrics = RuntimeMetrics::default();
    let (e, backend) =
        entry(Rev { name: "spin-00001", artifact: spin, env: vec![], policy: policy(2, Duration::from_secs(2)), queue: 4 }, &metrics).await;
    let mut table = RouteTable::default();
    add_sole_revision(&mut table, "spin", e);
    let router = Router::new(RouterConfig { drain_timeout: Duration::from_secs(10), ..RouterConfig::default() }, Registry::default());
    router.set_table(table);
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(Arc::clone(&router).serve(listener, async move {
        let _ = stopped.await;
    }));
    let in_flight = tokio::spawn(async move { get(&client(), addr, "spin.default.localhost", "/loop").await.0 });
    wait_until("the request started", Duration::from_secs(30), || backend.pool().stats().in_flight > 0).await;
    stop.send(()).expect("signal");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(tokio::net::TcpStream::connect(addr).await.is_err(), "no new connections after shutdown starts");
    assert_eq!(in_flight.await.expect("joins"), 504, "the request in flight got its answer (its deadline), not a reset");
    tokio::time::timeout(Duration::from_secs(10), server).await.expect("drained within the deadline").expect("joins");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_streamed_answer_reaches_the_client_head_first_through_two_routers_past_the_timeout() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stream = artifact(test_guest_elf("stream"), &dir, "stream");
    let metrics = RuntimeMetrics::default();
    let timeout = Duration::from_secs(1);
    let rev = Rev { name: "stream-00001", artifact: stream, env: vec![], policy: policy(1, timeout), queue: 4 };
    let (e, backend) = entry(rev, &metrics).await;
    let mut table = RouteTable::default();
    add_sole_revision(&mut table, "stream", e);
    let (_fibers, fibers_addr) = serve(table).await;
    // In front, as fiber-router is in front of fiberd: the same timeout, over HTTP.
    let upstream = Arc::new(lampyr_router::HttpBackend::new(fibers_addr, 1024, lampyr_router::HttpLimits::default()));
    let mut front_table = RouteTable::default();
    support::add_sole_revision(&mut front_table, "stream", "stream-00001", policy(1, timeout), upstream);
    let (_front, front_addr) = serve(front_table).await;

    for (hop, addr) in [("served where the fibers run", fibers_addr), ("through a router in front", front_addr)] {
        let started = std::time::Instant::now();
        let resp = client().get(format!("http://{addr}/stream?1000")).header("host", "stream.default.localhost").send().await;
        let resp = resp.expect("a response head");
        assert_eq!(backend.pool().stats().in_flight, 1, "{hop}: the head arrived while the guest was still running");
        assert_eq!(resp.status().as_u16(), 200, "{hop}");
        assert_eq!(resp.headers().get("x-streamed").map(|v| v.as_bytes()), Some(&b"yes"[..]), "{hop}");
        assert_eq!(resp.text().await.expect("the whole body"), "head\nmiddle\nend\n", "{hop}");
        assert!(started.elapsed() > timeout, "{hop}: the body outlived the request timeout, a time to first byte");
        wait_until("the fiber is idle again", Duration::from_secs(5), || backend.pool().stats().in_flight == 0).await;
    }
    let late = client().get(format!("http://{front_addr}/late?3000")).header("host", "stream.default.localhost").send().await;
    assert_eq!(late.expect("an answer").status().as_u16(), 504, "no head within the timeout");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_streamed_body_silent_past_idle_timeout_seconds_is_reset_and_its_guest_stopped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stream = artifact(test_guest_elf("stream"), &dir, "stream");
    let metrics = RuntimeMetrics::default();
    let mut idle = policy(1, Duration::from_secs(30));
    idle.timeouts.idle = Some(Duration::from_millis(500));
    let (e, backend) = entry(Rev { name: "stream-00001", artifact: stream, env: vec![], policy: idle, queue: 4 }, &metrics).await;
    let mut table = RouteTable::default();
    add_sole_revision(&mut table, "stream", e);
    let (_router, addr) = serve(table).await;

    let get = |path: &str| client().get(format!("http://{addr}{path}")).header("host", "stream.default.localhost").send();
    let quick = get("/stream?100").await.expect("a head");
    assert_eq!(quick.text().await.expect("gaps of 100 ms pass"), "head\nmiddle\nend\n");
    let silent = get("/stream?60000").await.expect("a head");
    assert_eq!(silent.status().as_u16(), 200);
    silent.text().await.expect_err("the body is reset after 500 ms of silence, not cut short");
    wait_until("the silent guest is stopped", Duration::from_secs(20), || backend.pool().stats().in_flight == 0).await;
}
