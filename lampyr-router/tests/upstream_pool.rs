//! HttpBackend's upstream connections over real sockets: a connection is reused once its
//! answer is read, closed when its answer is abandoned or it idles past the timeout, at most
//! the idle limit stay open, and one the upstream closed while idle is replaced, not failed.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use lampyr_router::{Backend, HttpBackend, HttpLimits};
use tokio::net::TcpListener;
use tokio::time::Instant;

/// Answers larger than the router buffers (64 KiB), so they stream.
const STREAMED: usize = 256 * 1024;

/// Connections an upstream accepted, and how many are still open.
#[derive(Default)]
struct Tally {
    accepted: AtomicUsize,
    open: AtomicUsize,
}

/// An HTTP/1.1 upstream: `/big` answers [`STREAMED`] bytes, `/slow` waits 300 ms, anything
/// else answers `ok`; with `close_idle_after`, it closes a connection idle that long.
async fn upstream(close_idle_after: Option<Duration>) -> (SocketAddr, Arc<Tally>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let tally = Arc::new(Tally::default());
    let counted = Arc::clone(&tally);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            counted.accepted.fetch_add(1, Ordering::AcqRel);
            counted.open.fetch_add(1, Ordering::AcqRel);
            let counted = Arc::clone(&counted);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(|req: hyper::Request<Incoming>| async move {
                    let body = match req.uri().path() {
                        "/big" => Bytes::from(vec![b'x'; STREAMED]),
                        "/slow" => {
                            tokio::time::sleep(Duration::from_millis(300)).await;
                            Bytes::from_static(b"ok")
                        }
                        _ => Bytes::from_static(b"ok"),
                    };
                    Ok::<_, Infallible>(hyper::Response::new(Full::new(body)))
                });
                let mut builder = hyper::server::conn::http1::Builder::new();
                if let Some(idle) = close_idle_after {
                    builder.timer(hyper_util::rt::TokioTimer::new()).header_read_timeout(idle);
                }
                let _ = builder.serve_connection(TokioIo::new(stream), service).await;
                counted.open.fetch_sub(1, Ordering::AcqRel);
            });
        }
    });
    (addr, tally)
}

fn backend(addr: SocketAddr, limits: HttpLimits) -> HttpBackend {
    HttpBackend::new(addr, 1024, limits)
}

/// GET `path` through `backend`; the answer's body, read to the end.
async fn get(backend: &HttpBackend, path: &str) -> Bytes {
    let req = http::Request::builder().uri(path).header("host", "up").body(lampyr_router::body::empty()).expect("request");
    let resp = backend.invoke(req, Instant::now() + Duration::from_secs(10)).await.expect("answered");
    resp.into_body().collect().await.expect("body").to_bytes()
}

async fn eventually(what: &str, done: impl Fn() -> bool) {
    let until = Instant::now() + Duration::from_secs(5);
    while !done() {
        assert!(Instant::now() < until, "not within 5 s: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_streamed_answer_read_to_the_end_frees_its_connection_for_the_next_request() {
    let (addr, tally) = upstream(None).await;
    let backend = backend(addr, HttpLimits::default());
    for _ in 0..5 {
        assert_eq!(get(&backend, "/big").await.len(), STREAMED);
        assert_eq!(get(&backend, "/").await, "ok");
    }
    assert_eq!(tally.accepted.load(Ordering::Acquire), 1, "one connection served every request in turn");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_abandoned_answer_closes_its_connection_and_the_next_request_gets_a_new_one() {
    let (addr, tally) = upstream(None).await;
    let backend = backend(addr, HttpLimits::default());
    let req = http::Request::builder().uri("/big").header("host", "up").body(lampyr_router::body::empty()).expect("request");
    let resp = backend.invoke(req, Instant::now() + Duration::from_secs(10)).await.expect("answered");
    drop(resp);
    eventually("the abandoned answer's connection is closed", || tally.open.load(Ordering::Acquire) == 0).await;
    assert_eq!(get(&backend, "/").await, "ok");
    assert_eq!(tally.accepted.load(Ordering::Acquire), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn idle_connections_close_after_the_idle_timeout_and_at_most_the_idle_limit_stay() {
    let (addr, tally) = upstream(None).await;
    let limits = HttpLimits { pool_idle_timeout: Duration::from_millis(400), pool_max_idle: 2, ..HttpLimits::default() };
    let backend = Arc::new(backend(addr, limits));
    let concurrent: Vec<_> = (0..4)
        .map(|_| {
            let backend = Arc::clone(&backend);
            tokio::spawn(async move { get(&backend, "/slow").await })
        })
        .collect();
    for request in concurrent {
        assert_eq!(request.await.expect("request task"), "ok");
    }
    assert_eq!(tally.accepted.load(Ordering::Acquire), 4, "four requests at once need four connections");
    eventually("all but the idle limit are closed", || tally.open.load(Ordering::Acquire) == 2).await;
    eventually("idle connections are closed after the idle timeout", || tally.open.load(Ordering::Acquire) == 0).await;
    assert_eq!(get(&backend, "/").await, "ok", "a request after the pool emptied connects again");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_connection_the_upstream_closed_while_idle_is_replaced_not_failed() {
    let (addr, tally) = upstream(Some(Duration::from_millis(100))).await;
    let backend = backend(addr, HttpLimits::default());
    for round in 1..=3 {
        assert_eq!(get(&backend, "/").await, "ok");
        eventually("the upstream closes the idle connection", || tally.open.load(Ordering::Acquire) == 0).await;
        assert_eq!(tally.accepted.load(Ordering::Acquire), round);
    }
}
