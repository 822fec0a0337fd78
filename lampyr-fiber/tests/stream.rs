//! Responses a guest streams (`lampyr_guest::stream`), under /dev/kvm: the head before
//! the handler returns and past the request deadline, the body in order, failures
//! after the head as a failed body (never a short one taken as whole), the body limit,
//! a client that goes away, and the fiber serving again after each.

use std::time::Duration;

use http_body_util::BodyExt;
use lampyr_abi::{Env, Request};
use lampyr_artifact::verify_layout;
use lampyr_fiber::build::{BuildOptions, build_artifact};
use lampyr_fiber::metrics::RuntimeMetrics;
use lampyr_fiber::runtime::Answer;
use lampyr_fiber::{FiberPool, PoolConfig, Template};
use lampyr_testenv::{require_kvm, test_guest_elf};
use tokio::time::Instant;

struct Served {
    _dir: tempfile::TempDir,
    pool: FiberPool,
}

fn stream_guest(opts: BuildOptions) -> Served {
    require_kvm();
    let dir = tempfile::tempdir().expect("tempdir");
    let layout = dir.path().join("artifact");
    let built = build_artifact(&test_guest_elf("stream"), &layout, &opts).expect("artifact builds");
    let artifact = verify_layout(&layout, Some(&built.digest)).expect("artifact verifies");
    let template = Template::load(&artifact, &Env::default()).expect("template loads");
    let config = PoolConfig { revision: "stream-00001".into(), max_fibers: 1, queue_capacity: 4, capacity: None };
    Served { _dir: dir, pool: FiberPool::new(template, config, RuntimeMetrics::default()) }
}

fn get(uri: &str) -> Request {
    Request { method: "GET".into(), uri: uri.into(), ..Request::default() }
}

fn in_secs(s: u64) -> Instant {
    Instant::now() + Duration::from_secs(s)
}

/// The streamed answer to `uri`; fails the test if the guest answered whole.
async fn streamed(pool: &FiberPool, uri: &str, deadline: Instant) -> (lampyr_abi::Response, lampyr_fiber::runtime::StreamedBody) {
    match pool.invoke_streaming(get(uri), deadline).await.expect("an answer").0 {
        Answer::Streamed { head, body } => (head, body),
        Answer::Whole(resp) => panic!("{uri} answered whole ({}), not streamed", resp.status),
    }
}

async fn still_serves(pool: &FiberPool) {
    let resp = pool.invoke(get("/"), in_secs(30)).await.expect("the pool serves again");
    assert_eq!(String::from_utf8_lossy(&resp.body), "not streaming\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_head_arrives_while_the_guest_runs_and_the_body_outlives_the_request_deadline() {
    let served = stream_guest(BuildOptions::default());
    let pool = &served.pool;
    let deadline = Instant::now() + Duration::from_millis(1500);
    let (head, body) = streamed(pool, "/stream?1000", deadline).await;
    assert_eq!(pool.stats().in_flight, 1, "the head came while the guest was still running");
    assert_eq!(head.status, 200, "the head's status, not the 500 the handler returns last");
    assert!(head.headers.iter().any(|h| h.name == "x-streamed" && h.value == b"yes"), "{:?}", head.headers);
    assert!(head.body.is_empty(), "the head's body travels as the first bytes");
    let bytes = body.stream.collect().await.expect("the body ends well").to_bytes();
    assert!(Instant::now() > deadline, "the guest ran past the request deadline (a time to first byte) and was not killed");
    assert_eq!(&bytes[..], b"head\nmiddle\nend\n");
    still_serves(pool).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_guest_that_has_not_sent_its_head_by_the_deadline_is_a_504() {
    let served = stream_guest(BuildOptions::default());
    let deadline = Instant::now() + Duration::from_millis(300);
    let err = served.pool.invoke_streaming(get("/late?5000"), deadline).await.map(|_| ()).expect_err("no head in time");
    assert_eq!(err.http_status(), 504, "{err}");
    still_serves(&served.pool).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_guest_that_crashes_after_its_head_fails_the_body_and_its_fiber_recovers() {
    let served = stream_guest(BuildOptions::default());
    let (head, body) = streamed(&served.pool, "/panic", in_secs(30)).await;
    assert_eq!(head.status, 200);
    let err = body.stream.collect().await.expect_err("the body fails instead of ending short");
    assert!(err.to_string().contains("crashed"), "{err}");
    still_serves(&served.pool).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_streamed_body_over_the_limit_is_refused_to_the_guest_and_fails_the_response() {
    let served = stream_guest(BuildOptions { max_body: 64 * 1024, heap_size: None });
    let (_, body) = streamed(&served.pool, "/big?65536", in_secs(30)).await;
    assert_eq!(body.stream.collect().await.expect("at the limit").to_bytes().len(), 64 * 1024);
    let (_, body) = streamed(&served.pool, "/big?65537", in_secs(30)).await;
    let err = body.stream.collect().await.expect_err("over the limit");
    assert!(err.to_string().contains("exceeds the limit of 65536 bytes"), "{err}");
    still_serves(&served.pool).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn dropping_a_streamed_body_interrupts_the_guest() {
    let served = stream_guest(BuildOptions::default());
    let pool = &served.pool;
    let (_, body) = streamed(pool, "/stream?600000", in_secs(30)).await;
    assert_eq!(pool.stats().in_flight, 1);
    drop(body); // the client went away
    let until = std::time::Instant::now() + Duration::from_secs(30);
    while pool.stats().in_flight > 0 {
        assert!(std::time::Instant::now() < until, "the guest kept its fiber after its client left");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    still_serves(pool).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn out_of_order_stream_calls_are_refused_to_the_guest() {
    let served = stream_guest(BuildOptions::default());
    let (head, body) = streamed(&served.pool, "/twice", in_secs(30)).await;
    assert_eq!(head.status, 200, "the first head is the answer's");
    let bytes = body.stream.collect().await.expect("body").to_bytes();
    assert_eq!(String::from_utf8_lossy(&bytes), "write before head false, first head true, second head false\n");
    let gathered = served.pool.invoke(get("/stream?0"), in_secs(30)).await.expect("gathered whole");
    assert_eq!((gathered.status, &gathered.body[..]), (200, &b"head\nmiddle\nend\n"[..]), "invoke gathers a streamed answer");
}
