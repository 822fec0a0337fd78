//! HttpBackend's upstream connections over real sockets: a connection is reused once its
//! answer is read, closed when its answer is abandoned or it idles past the timeout, at most
//! the idle limit stay open, one the upstream closed while idle is replaced, not failed, and
//! an idempotent request a long-idle connection dropped unanswered is sent again.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use lampyr_router::{Backend, HttpBackend, HttpLimits};
use tokio::time::Instant;

mod support;
use support::Tally;

/// Answers larger than the router buffers (64 KiB), so they stream.
const STREAMED: usize = 256 * 1024;

/// An HTTP/1.1 upstream: `/big` answers [`STREAMED`] bytes, `/slow` waits 300 ms, anything
/// else answers `ok`; with `close_idle_after`, it closes a connection idle that long.
async fn upstream(close_idle_after: Option<Duration>) -> (SocketAddr, Arc<Tally>) {
    support::accepting(move |stream, _| async move {
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
    })
    .await
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

/// A raw HTTP/1.1 upstream whose first connection answers one request, then closes as the
/// next request on it arrives, unanswered (as a server closing an idle connection does when a
/// request crosses the close); every later connection answers `ok` to each request.
async fn closing_on_second_request() -> (SocketAddr, Arc<Tally>) {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
    support::accepting(|stream, index| async move {
        let mut stream = BufReader::new(stream);
        for answered in 0.. {
            // The head, then a body of its Content-Length.
            let mut length = 0;
            loop {
                let mut line = String::new();
                if stream.read_line(&mut line).await.unwrap_or(0) == 0 {
                    return;
                }
                if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = value.trim().parse().unwrap_or(0);
                }
                if line == "\r\n" {
                    break;
                }
            }
            let mut body = vec![0; length];
            let _ = stream.read_exact(&mut body).await;
            if index == 0 && answered == 1 {
                return;
            }
            let _ = stream.get_mut().write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").await;
        }
    })
    .await
}

async fn send(backend: &HttpBackend, method: &str) -> Result<Bytes, lampyr_router::InvokeError> {
    let req = http::Request::builder().method(method).uri("/").header("host", "up").body(lampyr_router::body::empty()).expect("request");
    let resp = backend.invoke(req, Instant::now() + Duration::from_secs(10)).await?;
    Ok(resp.into_body().collect().await.expect("body").to_bytes())
}

/// Longer than a connection must idle before an unanswered close counts as the upstream's idle close.
const IDLE_A_WHILE: Duration = Duration::from_millis(1100);

#[tokio::test(flavor = "multi_thread")]
async fn an_idempotent_request_a_long_idle_connection_dropped_unanswered_is_sent_again_on_a_new_one() {
    let (addr, tally) = closing_on_second_request().await;
    let backend = backend(addr, HttpLimits::default());
    assert_eq!(send(&backend, "GET").await.expect("first request"), "ok");
    tokio::time::sleep(IDLE_A_WHILE).await;
    assert_eq!(send(&backend, "GET").await.expect("sent again on a new connection"), "ok");
    assert_eq!(tally.accepted.load(Ordering::Acquire), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_post_a_long_idle_connection_dropped_unanswered_is_a_502_not_sent_twice() {
    let (addr, tally) = closing_on_second_request().await;
    let backend = backend(addr, HttpLimits::default());
    assert_eq!(send(&backend, "POST").await.expect("first request"), "ok");
    tokio::time::sleep(IDLE_A_WHILE).await;
    let failed = send(&backend, "POST").await;
    assert!(matches!(&failed, Err(e) if e.http_status() == 502), "{failed:?}");
    assert_eq!(tally.accepted.load(Ordering::Acquire), 1, "a POST may have had effects: never sent again");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_get_a_connection_used_moments_ago_dropped_unanswered_is_a_502() {
    let (addr, tally) = closing_on_second_request().await;
    let backend = backend(addr, HttpLimits::default());
    assert_eq!(send(&backend, "GET").await.expect("first request"), "ok");
    let failed = send(&backend, "GET").await;
    assert!(matches!(&failed, Err(e) if e.http_status() == 502), "an upstream failing with the request in it: {failed:?}");
    assert_eq!(tally.accepted.load(Ordering::Acquire), 1, "not sent again");
}
