//! Fibers serving requests under /dev/kvm: isolation, timeouts, crashes,
//! malformed output, limits, back-pressure and scaling hooks.

use std::path::PathBuf;
use std::time::Duration;

use lampyr_abi::{Env, Request};
use lampyr_artifact::{VerifiedArtifact, verify_layout};
use lampyr_fiber::build::{BuildOptions, build_artifact};
use lampyr_fiber::metrics::RuntimeMetrics;
use lampyr_fiber::runtime::Capacity;
use lampyr_fiber::{FiberPool, PoolConfig, Template};
use lampyr_router::InvokeError;
use lampyr_testenv::{example_elf, require_kvm, test_guest_elf};
use tokio::time::Instant;

struct Built {
    _dir: tempfile::TempDir,
    artifact: VerifiedArtifact,
}

fn build(elf: PathBuf, opts: BuildOptions) -> Built {
    require_kvm();
    let dir = tempfile::tempdir().expect("tempdir");
    let layout = dir.path().join("artifact");
    let built = build_artifact(&elf, &layout, &opts).expect("artifact builds");
    let artifact = verify_layout(&layout, Some(&built.digest)).expect("artifact verifies");
    Built { _dir: dir, artifact }
}

fn pool(built: &Built, env: Env, max_fibers: usize, queue_capacity: usize) -> FiberPool {
    let template = Template::load(&built.artifact, &env).expect("template loads");
    let config = PoolConfig { revision: "test-00001".into(), max_fibers, queue_capacity, capacity: None };
    FiberPool::new(template, config, RuntimeMetrics::default())
}

fn get(path: &str) -> Request {
    Request { method: "GET".into(), uri: path.into(), ..Request::default() }
}

fn in_secs(s: u64) -> Instant {
    Instant::now() + Duration::from_secs(s)
}

fn body(resp: &lampyr_abi::Response) -> String {
    String::from_utf8_lossy(&resp.body).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn hello_answers_with_the_revision_environment() {
    let built = build(example_elf("hello"), BuildOptions::default());
    let env = Env { vars: vec![("TARGET".into(), "Lampyr".into())], ..Env::default() };
    let pool = pool(&built, env, 2, 4);
    let resp = pool.invoke(get("/"), in_secs(30)).await.expect("answers");
    assert_eq!(resp.status, 200);
    assert_eq!(body(&resp), "Hello Lampyr!\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_events_example_answers_a_cloudevent_with_a_reply_event_in_a_fiber() {
    let built = build(example_elf("events"), BuildOptions::default());
    let pool = pool(&built, Env::default(), 2, 4);
    let header = |name: &str, value: &str| lampyr_abi::Header { name: name.into(), value: value.as_bytes().to_vec() };
    let delivery = |ty: &str| Request {
        method: "POST".into(),
        uri: "/".into(),
        headers: vec![
            header("ce-specversion", "1.0"),
            header("ce-id", "ping-7"),
            header("ce-source", "/apis/v1/namespaces/default/pingsources/every-minute"),
            header("ce-type", ty),
            header("content-type", "application/json"),
        ],
        body: br#"{"name": "Fiber"}"#.to_vec(),
        ..Request::default()
    };
    let reply = pool.invoke(delivery("dev.lampyr.greet"), in_secs(30)).await.expect("answers");
    let reply_header = |name: &str| reply.headers.iter().find(|h| h.name == name).map(|h| String::from_utf8_lossy(&h.value).into_owned());
    assert_eq!(reply.status, 200, "{}", body(&reply));
    assert_eq!(reply_header("ce-type").as_deref(), Some("dev.lampyr.greeting"));
    assert_eq!(reply_header("ce-id").as_deref(), Some("ping-7-greeting"));
    assert_eq!(body(&reply), r#"{"greeting":"Hello Fiber!"}"#);
    let tick = pool.invoke(delivery("dev.knative.sources.ping"), in_secs(30)).await.expect("answers");
    assert_eq!((tick.status, body(&tick).as_str()), (200, r#"{"greeting":"Hello Fiber!"}"#), "a PingSource tick is greeted too");
    let ack = pool.invoke(delivery("dev.example.other"), in_secs(30)).await.expect("answers");
    assert_eq!((ack.status, ack.body.len()), (202, 0), "acknowledged without a reply");
    let not_an_event =
        pool.invoke(Request { method: "POST".into(), uri: "/".into(), ..Request::default() }, in_secs(30)).await.expect("answers");
    assert_eq!(not_an_event.status, 400);
    assert!(body(&not_an_event).contains("not a CloudEvent"), "{}", body(&not_an_event));
}

#[tokio::test(flavor = "multi_thread")]
async fn no_state_leaks_between_requests() {
    let built = build(test_guest_elf("counter"), BuildOptions::default());
    let pool = pool(&built, Env::default(), 1, 4);
    for _ in 0..5 {
        let resp = pool.invoke(get("/"), in_secs(30)).await.expect("answers");
        assert_eq!(body(&resp), "1\n", "the guest's counter must restart from the snapshot every request");
    }
    assert_eq!(pool.stats().live, 1, "one fiber served every request");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_looping_guest_times_out_and_its_fiber_recovers() {
    let built = build(test_guest_elf("spin"), BuildOptions::default());
    let pool = pool(&built, Env::default(), 1, 4);
    let started = std::time::Instant::now();
    let err = pool.invoke(get("/loop"), Instant::now() + Duration::from_millis(500)).await.expect_err("times out");
    assert!(matches!(err, InvokeError::Timeout), "{err}");
    assert_eq!(err.http_status(), 504);
    assert!(started.elapsed() < Duration::from_secs(20), "the kill landed: {:?}", started.elapsed());
    let resp = pool.invoke(get("/"), in_secs(30)).await.expect("the same fiber answers again");
    assert_eq!(body(&resp), "not looping\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn panicking_and_heap_exhausting_guests_give_502_and_recover() {
    for (guest, path, healthy) in [("panic", "/panic", "still alive\n"), ("heap", "/exhaust", "heap fine\n")] {
        let built = build(test_guest_elf(guest), BuildOptions::default());
        let pool = pool(&built, Env::default(), 1, 4);
        let err = pool.invoke(get(path), in_secs(60)).await.expect_err("guest fails");
        assert_eq!(err.http_status(), 502, "{guest}: {err}");
        let resp = pool.invoke(get("/"), in_secs(30)).await.expect("recovers");
        assert_eq!(body(&resp), healthy, "{guest}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn malformed_guest_output_is_a_502_and_the_fiber_is_discarded() {
    let built = build(test_guest_elf("counter"), BuildOptions::default());
    let pool = pool(&built, Env::default(), 1, 4);
    let err = pool.invoke(get("/hostile"), in_secs(30)).await.expect_err("refused");
    assert!(matches!(err, InvokeError::BadResponse(_)), "{err}");
    assert_eq!(err.http_status(), 502);
    let resp = pool.invoke(get("/"), in_secs(30)).await.expect("a new fiber answers");
    assert_eq!(body(&resp), "1\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn bodies_up_to_the_limit_pass_and_larger_ones_are_413() {
    let built = build(test_guest_elf("counter"), BuildOptions { max_body: 64 * 1024, heap_size: None });
    let pool = pool(&built, Env::default(), 1, 4);
    let resp = pool.invoke(get(&format!("/big?{}", 64 * 1024)), in_secs(60)).await.expect("64 KiB response");
    assert_eq!(resp.body.len(), 64 * 1024);
    let mut req = get("/");
    req.body = vec![b'a'; 64 * 1024];
    pool.invoke(req, in_secs(60)).await.expect("64 KiB request");
    let mut req = get("/");
    req.body = vec![b'a'; 64 * 1024 + 1];
    let err = pool.invoke(req, in_secs(60)).await.expect_err("too large");
    assert_eq!(err.http_status(), 413, "{err}");
    let err = pool.invoke(get(&format!("/big?{}", 64 * 1024 + 1)), in_secs(60)).await.expect_err("response too large");
    assert_eq!(err.http_status(), 502, "{err}");
    assert_eq!(body(&pool.invoke(get("/"), in_secs(30)).await.expect("still serving")), "1\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_mebibyte_each_way_by_default() {
    let built = build(example_elf("echo"), BuildOptions::default());
    let pool = pool(&built, Env::default(), 1, 4);
    let mut req = get("/upload");
    req.method = "POST".into();
    req.body = vec![b'z'; 1000 * 1024];
    let resp = pool.invoke(req, in_secs(120)).await.expect("1000 KiB echoed");
    assert!(resp.body.ends_with(&vec![b'z'; 1000 * 1024]));
    let mut req = get("/upload");
    req.body = vec![b'z'; 1024 * 1024 + 1];
    assert_eq!(pool.invoke(req, in_secs(60)).await.expect_err("over 1 MiB").http_status(), 413);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_queue_sheds_load_with_503() {
    let built = build(test_guest_elf("spin"), BuildOptions::default());
    let pool = pool(&built, Env::default(), 1, 1);
    let busy = {
        let pool = pool.clone();
        tokio::spawn(async move { pool.invoke(get("/loop"), Instant::now() + Duration::from_secs(3)).await })
    };
    wait_for(|| pool.stats().in_flight == 1).await;
    let queued = {
        let pool = pool.clone();
        tokio::spawn(async move { pool.invoke(get("/"), Instant::now() + Duration::from_secs(20)).await })
    };
    wait_for(|| pool.stats().queued == 1).await;
    let err = pool.invoke(get("/"), in_secs(10)).await.expect_err("queue is full");
    assert!(matches!(err, InvokeError::Overloaded { capacity: 1 }), "{err}");
    assert_eq!(err.http_status(), 503);
    assert!(matches!(busy.await.expect("joins"), Err(InvokeError::Timeout)));
    assert_eq!(body(&queued.await.expect("joins").expect("queued request served")), "not looping\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_request_sent_while_the_only_fiber_restores_waits_for_it_instead_of_a_503() {
    let built = build(example_elf("hello"), BuildOptions::default());
    let template = Template::load(&built.artifact, &Env::default()).expect("template loads");
    // The instance has room for one fiber; the pool may run four, so every request after
    // the first arrives while that one fiber is still being restored from its answer.
    let capacity = Capacity::new(1, 1 << 30);
    let account = std::sync::Arc::new(capacity.account(0, 1));
    let config = PoolConfig { revision: "one-slot-00001".into(), max_fibers: 4, queue_capacity: 4, capacity: Some(account) };
    let pool = FiberPool::new(template, config, RuntimeMetrics::default());
    for i in 0..20 {
        let resp = pool.invoke(get("/"), in_secs(30)).await.unwrap_or_else(|e| panic!("request {i}: {e}"));
        assert_eq!(resp.status, 200, "request {i}");
    }
    assert_eq!(pool.stats().live, 1, "one fiber served them all");
    assert_eq!(capacity.usage().burst_slots, 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_abandoned_request_frees_its_fiber() {
    let built = build(test_guest_elf("spin"), BuildOptions::default());
    let pool = pool(&built, Env::default(), 1, 4);
    let call = {
        let pool = pool.clone();
        tokio::spawn(async move { pool.invoke(get("/loop"), in_secs(600)).await })
    };
    wait_for(|| pool.stats().in_flight == 1).await;
    call.abort(); // the client disconnected
    let resp = pool.invoke(get("/"), in_secs(30)).await.expect("the fiber was freed");
    assert_eq!(body(&resp), "not looping\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn warm_size_grows_and_shrinks_to_zero() {
    let built = build(example_elf("hello"), BuildOptions::default());
    let pool = pool(&built, Env::default(), 3, 4);
    pool.set_desired(5).await.expect("grows");
    assert_eq!((pool.stats().live, pool.stats().idle, pool.stats().desired), (3, 3, 3), "capped at max_fibers");
    pool.invoke(get("/"), in_secs(30)).await.expect("answers from a warm fiber");
    // The fiber is restored after its answer; busy fibers are never dropped.
    wait_for(|| pool.stats().in_flight == 0).await;
    pool.set_desired(0).await.expect("shrinks");
    assert_eq!(pool.stats().live, 0);
    pool.invoke(get("/"), in_secs(30)).await.expect("cold start from zero");
    assert_eq!(pool.stats().live, 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_request_at_zero_and_the_resize_waking_the_pool_start_one_fiber_between_them() {
    let built = build(example_elf("hello"), BuildOptions::default());
    let metrics = RuntimeMetrics::default();
    let template = Template::load(&built.artifact, &Env::default()).expect("template loads");
    let config = PoolConfig { revision: "wake-00001".into(), max_fibers: 4, queue_capacity: 4, capacity: None };
    let pool = FiberPool::new(template, config, metrics.clone());
    let starts = || metrics.fiber_starts.get_or_create(&lampyr_fiber::metrics::revision_labels("wake-00001")).get();
    for round in 1..=5 {
        // As a request reaching a Revision at zero meets the activation that wakes it.
        let (answered, resized) = tokio::join!(pool.invoke(get("/"), in_secs(30)), pool.set_desired(1));
        answered.expect("the request is answered");
        resized.expect("the pool is resized");
        assert_eq!(starts(), round, "round {round}: one fiber started for the request and the resize together");
        wait_for(|| pool.stats().in_flight == 0).await;
        pool.set_desired(0).await.expect("back to zero");
        assert_eq!(pool.stats().live, 0);
    }
}

async fn wait_for(cond: impl Fn() -> bool) {
    let until = std::time::Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(std::time::Instant::now() < until, "condition not reached in 30 s");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Rewrites the artifact as if its snapshot had been taken on a CPU of another vendor.
fn repin_as_foreign(artifact: &VerifiedArtifact) -> String {
    use lampyr_artifact::layout::{blob_path, read_index, write_blob, write_index};
    let layout = &artifact.layout;
    let read_json = |digest: &str| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(blob_path(layout, digest).expect("path")).expect("read")).expect("json")
    };
    let foreign = if artifact.platform.cpu_vendor == "AuthenticAMD" { "GenuineIntel" } else { "AuthenticAMD" };
    let mut index = read_json(&artifact.digest);
    let mut manifest = read_json(&artifact.snapshot_manifest);
    let mut config = read_json(manifest["config"]["digest"].as_str().expect("config digest"));
    config["cpu_vendor"] = foreign.into();
    let config_bytes = serde_json::to_vec(&config).expect("json");
    manifest["config"]["digest"] = write_blob(layout, &config_bytes).expect("write").into();
    manifest["config"]["size"] = config_bytes.len().into();
    let manifest_bytes = serde_json::to_vec(&manifest).expect("json");
    index["manifests"][0]["digest"] = write_blob(layout, &manifest_bytes).expect("write").into();
    index["manifests"][0]["size"] = manifest_bytes.len().into();
    index["manifests"][0]["annotations"]["dev.hyperlight.snapshot.cpu.vendor"] = foreign.into();
    let index_bytes = serde_json::to_vec(&index).expect("json");
    let digest = write_blob(layout, &index_bytes).expect("write");
    let mut top = read_index(layout).expect("index.json");
    let desc = serde_json::json!({"mediaType": "application/vnd.oci.image.index.v1+json", "digest": digest, "size": index_bytes.len()});
    let mut manifests = top.manifests().clone();
    manifests.push(serde_json::from_value(desc).expect("descriptor"));
    top.set_manifests(manifests);
    write_index(layout, &top).expect("write index.json");
    digest
}

#[tokio::test(flavor = "multi_thread")]
async fn a_snapshot_from_another_platform_boots_the_carried_elf() {
    let built = build(example_elf("hello"), BuildOptions::default());
    let digest = repin_as_foreign(&built.artifact);
    let foreign = verify_layout(&built.artifact.layout, Some(&digest)).expect("a foreign snapshot still verifies");
    assert!(matches!(&foreign.fit, lampyr_artifact::PlatformFit::Mismatch { field: "cpu_vendor", .. }), "{:?}", foreign.fit);
    let template = Template::load(&foreign, &Env::default()).expect("falls back to the ELF");
    let pool = FiberPool::new(
        template,
        PoolConfig { revision: "x".into(), max_fibers: 1, queue_capacity: 1, capacity: None },
        RuntimeMetrics::default(),
    );
    let resp = pool.invoke(get("/"), in_secs(30)).await.expect("answers");
    assert_eq!(body(&resp), "Hello World!\n");
}
