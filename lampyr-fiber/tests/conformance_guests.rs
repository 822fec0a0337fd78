//! The fiber stand-ins for Knative's conformance test images (`examples/conformance`) answer
//! as upstream's images do, byte for byte where the suites compare, under /dev/kvm; and the
//! host functions they use: `LampyrSleep` waits and ends at the request deadline, and a guest
//! whose `start` panics does not load (upstream's `failing`); readiness probes run against a template;
//! a memory limit above the artifact's heap becomes the heap.

use std::time::Duration;

use lampyr_abi::{Env, Header, Request, Response};
use lampyr_api::policy::{FiberPolicy, ReadinessCheck};
use lampyr_artifact::verify_layout;
use lampyr_fiber::build::{BuildOptions, build_artifact};
use lampyr_fiber::metrics::RuntimeMetrics;
use lampyr_fiber::runtime::{NotReady, check_ready, revision_pool};
use lampyr_fiber::{FiberPool, PoolConfig, Template};
use lampyr_router::InvokeError;
use lampyr_testenv::conformance_guest_elf;
use lampyr_testenv::require_kvm;
use tokio::time::Instant;

/// A pool of guest `name` with `env` (a temporary artifact); the error when it does not load.
fn pool(name: &str, env: &[(&str, &str)]) -> Result<(tempfile::TempDir, FiberPool), String> {
    pool_with_args(name, env, &[])
}

/// [`pool`] with the Revision's arguments.
fn pool_with_args(name: &str, env: &[(&str, &str)], args: &[&str]) -> Result<(tempfile::TempDir, FiberPool), String> {
    require_kvm();
    let dir = tempfile::tempdir().expect("tempdir");
    let layout = dir.path().join("artifact");
    let built = build_artifact(&conformance_guest_elf(name), &layout, &BuildOptions::default()).expect("artifact builds");
    let artifact = verify_layout(&layout, Some(&built.digest)).expect("artifact verifies");
    let env = Env {
        vars: env.iter().map(|(k, v)| ((*k).to_string(), (*v).to_string())).collect(),
        args: args.iter().map(|a| (*a).to_string()).collect(),
    };
    let template = Template::load(&artifact, &env).map_err(|e| e.to_string())?;
    let config = PoolConfig { revision: format!("{name}-00001"), max_fibers: 2, queue_capacity: 8, capacity: None };
    Ok((dir, FiberPool::new(template, config, RuntimeMetrics::default())))
}

fn get(uri: &str, headers: &[(&str, &str)]) -> Request {
    let headers = headers.iter().map(|(n, v)| Header { name: (*n).into(), value: v.as_bytes().to_vec() }).collect();
    Request { method: "GET".into(), uri: uri.into(), headers, ..Request::default() }
}

async fn answer(pool: &FiberPool, req: Request) -> Response {
    pool.invoke(req, Instant::now() + Duration::from_secs(60)).await.expect("answers")
}

fn body(resp: &Response) -> &str {
    std::str::from_utf8(&resp.body).expect("UTF-8")
}

#[tokio::test(flavor = "multi_thread")]
async fn fixed_bodies_match_upstreams_images_byte_for_byte() {
    for (name, expected) in [
        ("helloworld", "Hello World! How about some tasty noodles?\n"),
        ("pizzaplanetv1", "What a spaceport!"),
        ("pizzaplanetv2", "Re-energize yourself with a slice of pepperoni!"),
    ] {
        let (_dir, pool) = pool(name, &[]).expect("loads");
        for uri in ["/", "/any/path?x=1"] {
            let resp = answer(&pool, get(uri, &[])).await;
            assert_eq!((resp.status, body(&resp)), (200, expected), "{name} {uri}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_timeout_guest_sleeps_and_the_deadline_bounds_its_first_byte() {
    let (_dir, pool) = pool("timeout", &[("PORT", "8080")]).expect("loads");
    let started = std::time::Instant::now();
    let resp = answer(&pool, get("/?initialTimeout=200&timeout=300", &[])).await;
    assert_eq!((resp.status, body(&resp)), (200, "Slept for 300 milliseconds"));
    assert!(started.elapsed() >= Duration::from_millis(500), "it waited both: {:?}", started.elapsed());

    // A sleep before the head past the deadline ends there, and the call is interrupted: no 60 s wait.
    let started = std::time::Instant::now();
    let late = get("/?initialTimeout=60000", &[]);
    let err = pool.invoke(late, Instant::now() + Duration::from_millis(300)).await.expect_err("times out");
    assert!(matches!(err, InvokeError::Timeout), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(20), "interrupted at the deadline, not after the sleep: {:?}", started.elapsed());
    // The head goes out at once, so the deadline (a time to first byte) is met and the body may come later.
    let resp = pool.invoke(get("/?timeout=1000", &[]), Instant::now() + Duration::from_millis(300)).await.expect("streamed");
    assert_eq!((resp.status, body(&resp)), (200, "Slept for 1000 milliseconds"));
    let resp = answer(&pool, get("/", &[])).await;
    assert_eq!(body(&resp), "Slept for 0 milliseconds", "the fiber serves again");
}

#[tokio::test(flavor = "multi_thread")]
async fn autoscale_parses_like_upstream_and_answers_each_part() {
    let (_dir, pool) = pool("autoscale", &[]).expect("loads");
    let resp = answer(&pool, get("/", &[])).await;
    assert_eq!((resp.status, body(&resp)), (200, ""));
    let resp = answer(&pool, get("/?sleep=20&prime=100&bloat=1", &[])).await;
    assert_eq!(resp.status, 200);
    let text = body(&resp);
    assert!(text.starts_with("Slept for 2") && text.contains("ms.\n"), "{text}");
    assert!(text.contains("The largest prime less than 100 is 97.\n") && text.ends_with("Allocated 1 Mb of memory.\n"), "{text}");
    for (query, message) in [
        ("sleep=abc", "time: invalid duration \"abc\"\n"),
        ("sleep=-1", "Negative query params are not supported\n"),
        ("prime=0", "Non-positive query params are not supported\n"),
        ("bloat=-2", "Non-positive durations are not supported\n"),
    ] {
        let resp = answer(&pool, get(&format!("/?{query}"), &[])).await;
        assert_eq!((resp.status, body(&resp)), (400, message), "{query}");
    }
    // More than the heap holds aborts the guest: the host answers 502 and keeps serving.
    let err = pool.invoke(get("/?bloat=500", &[]), Instant::now() + Duration::from_secs(60)).await.expect_err("too much");
    assert_eq!(err.http_status(), 502, "{err:?}");
    assert_eq!(answer(&pool, get("/", &[])).await.status, 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn singlethreaded_answers_one_at_a_time() {
    let (_dir, pool) = pool("singlethreaded", &[]).expect("loads");
    let resp = answer(&pool, get("/", &[])).await;
    assert_eq!((resp.status, body(&resp)), (200, "One at a time"));
}

#[tokio::test(flavor = "multi_thread")]
async fn failing_does_not_load_and_says_why() {
    let err = pool("failing", &[("PORT", "8080")]).err().expect("a guest whose start panics does not load");
    assert!(err.contains("Crashed..."), "the panic's message reaches the load error: {err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn runtime_reports_the_request_and_environment_as_go_would() {
    let (_dir, pool) = pool("runtime", &[("PORT", "8080"), ("K_SERVICE", "svc"), ("QUOTE", "a\"b")]).expect("loads");
    let headers = [("host", "svc.ns.example"), ("x-b3-spanid", "0123456789abcdef"), ("accept", "*/*"), ("accept", "text/plain")];
    let resp = answer(&pool, get("/p?q=1", &headers)).await;
    assert_eq!(resp.status, 200);
    let info: serde_json::Value = serde_json::from_slice(&resp.body).expect("JSON");
    assert_eq!(info["request"]["uri"], "/p?q=1");
    assert_eq!(info["request"]["host"], "svc.ns.example");
    assert_eq!(info["request"]["method"], "GET");
    assert_eq!(info["request"]["headers"]["X-B3-Spanid"], serde_json::json!(["0123456789abcdef"]), "Go's canonical key");
    assert_eq!(info["request"]["headers"]["Accept"], serde_json::json!(["*/*", "text/plain"]), "repeated fields kept");
    assert!(info["request"]["headers"].get("Host").is_none(), "the host is request.host, as in Go");
    assert_eq!(info["host"]["envs"]["K_SERVICE"], "svc");
    assert_eq!(info["host"]["envs"]["QUOTE"], "a\"b");
    assert_eq!(info["host"]["stdin"]["error"], "a fiber has no standard input", "what a fiber lacks is said, not invented");
    assert!(info["host"].get("user").is_none() && info["request"].get("protoMajor").is_none(), "no version given, none reported");
    assert_eq!(info["host"]["args"], serde_json::json!([]), "no command or args");
    let resp = answer(&pool, Request { version: lampyr_abi::HttpVersion::Http2, ..get("/", &[]) }).await;
    let info: serde_json::Value = serde_json::from_slice(&resp.body).expect("JSON");
    assert_eq!((info["request"]["protoMajor"].as_u64(), info["request"]["protoMinor"].as_u64()), (Some(2), Some(0)), "{info}");

    // The container's command then args are the guest's arguments.
    let (_dir, pool) = pool_with_args("runtime", &[], &["/ko-app/runtime", "abra", "cadabra", "do"]).expect("loads");
    let info: serde_json::Value = serde_json::from_slice(&answer(&pool, get("/", &[])).await.body).expect("JSON");
    assert_eq!(info["host"]["args"], serde_json::json!(["/ko-app/runtime", "abra", "cadabra", "do"]));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_memory_limit_is_the_heap_even_above_the_artifacts() {
    require_kvm();
    let dir = tempfile::tempdir().expect("tempdir");
    let layout = dir.path().join("artifact");
    let built = build_artifact(&conformance_guest_elf("autoscale"), &layout, &BuildOptions::default()).expect("artifact builds");
    let artifact = verify_layout(&layout, Some(&built.digest)).expect("artifact verifies");
    let built_heap = artifact.metadata.heap_size;
    assert!(built_heap < 32 << 20, "the default heap is small: {built_heap}");
    let deadline = || Instant::now() + Duration::from_secs(120);
    let bloat = |mb: u64| get(&format!("/?bloat={mb}"), &[]);

    // The artifact's own heap cannot hold 32 MiB: the guest aborts.
    let config = |name: &str| PoolConfig { revision: name.into(), max_fibers: 1, queue_capacity: 4, capacity: None };
    let small = FiberPool::new(Template::load(&artifact, &Env::default()).expect("loads"), config("small"), RuntimeMetrics::default());
    let err = small.invoke(bloat(32), deadline()).await.expect_err("32 MiB is over the built heap");
    assert!(matches!(err, InvokeError::Crashed(_)), "{err:?}");

    // A Revision limited to 64 MiB gets 64 MiB of heap: 32 MiB fits, 100 MiB does not.
    let policy = FiberPolicy { memory_bytes: Some(64 << 20), ..FiberPolicy::default() };
    let pool = revision_pool(&artifact, &policy, "limited-00001", 1, None, RuntimeMetrics::default()).expect("pool");
    let resp = answer(&pool, bloat(32)).await;
    assert_eq!((resp.status, body(&resp)), (200, "Allocated 32 Mb of memory.\n"));
    let err = pool.invoke(bloat(100), deadline()).await.expect_err("100 MiB is over the limit");
    assert!(matches!(err, InvokeError::Crashed(_)), "{err:?}");
    let resp = answer(&pool, bloat(32)).await;
    assert_eq!(resp.status, 200, "the fiber recovers from the abort");

    // Below the artifact's heap stays refused: a fiber cannot be given less than it was built with.
    let below = FiberPolicy { memory_bytes: Some(built_heap / 2), ..FiberPolicy::default() };
    let err = revision_pool(&artifact, &below, "below-00001", 1, None, RuntimeMetrics::default()).err().expect("refused");
    assert!(err.to_string().contains("below the artifact's fiber heap"), "{err}");
}

fn probe(path: &str, timeout: Duration, failure_threshold: u32) -> ReadinessCheck {
    ReadinessCheck { path: path.into(), headers: Vec::new(), timeout, failure_threshold }
}

#[tokio::test(flavor = "multi_thread")]
async fn readiness_waits_out_its_delay_at_start_and_its_probe_decides_readiness() {
    const HELLO: &str = "Hello World! How about some tasty noodles?";
    let started = std::time::Instant::now();
    let (_dir, ready) = pool("readiness", &[("READY_DELAY", "1s"), ("LISTEN_DELAY", "500ms")]).expect("loads");
    assert!(started.elapsed() >= Duration::from_millis(1500), "not ready before both delays: {:?}", started.elapsed());
    let no_query = format!("{HELLO}no query\n");
    for (uri, status, expected) in [
        ("/healthz/readiness", 200, HELLO),
        ("/any", 200, HELLO),
        ("/start-failing", 200, "will now fail readiness"),
        ("/query?probe=ok", 200, no_query.as_str()),
        ("/query", 500, "no query\n"),
    ] {
        let resp = answer(&ready, get(uri, &[])).await;
        assert_eq!((resp.status, body(&resp)), (status, expected), "{uri}");
    }

    let wait = Duration::from_secs(60);
    check_ready(&ready, &probe("/healthz/readiness", wait, 1)).await.expect("its readiness path passes");
    let err = check_ready(&ready, &probe("/query", wait, 3)).await.expect_err("a 500 fails at once");
    assert!(matches!(err, NotReady::Answered { status: 500, .. }), "{err:?}");
    assert!(err.to_string().contains("GET /query answered 500 (no query)"), "{err}");

    // A guest that does not answer in time fails after failureThreshold attempts.
    let (_dir, slow) = pool("timeout", &[]).expect("loads");
    let err = check_ready(&slow, &probe("/?initialTimeout=30000", Duration::from_millis(300), 2)).await.expect_err("times out");
    assert!(matches!(err, NotReady::NoAnswer { attempts: 2, last: InvokeError::Timeout, .. }), "{err:?}");
    // A streamed answer is judged by its head: in time here, though its body would take 30 s.
    check_ready(&slow, &probe("/?timeout=30000", Duration::from_millis(300), 1)).await.expect("its head is a 200 in time");
}
