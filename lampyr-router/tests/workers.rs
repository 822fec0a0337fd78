//! Serving threads over real sockets: every thread accepts on the shared port, each keeps
//! its own upstream connections, every listener serves what its exposure says, and stopping
//! drains a request in flight.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use lampyr_api::policy::{FiberPolicy, TimeoutPolicy};
use lampyr_router::{Exposure, HttpBackend, HttpLimits, Listen, RouteTable, Router, RouterConfig, Workers};
use prometheus_client::registry::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

mod support;

const HOST: &str = "up.default.localhost";

/// An upstream answering `ok` (`/slow`: after 500 ms), counting the connections it accepts.
async fn counting_upstream() -> (SocketAddr, Arc<support::Tally>) {
    support::counted_http1_upstream(|req: hyper::Request<Incoming>| async move {
        if req.uri().path() == "/slow" {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from_static(b"ok\n"))))
    })
    .await
}

/// A router sending Service `up` to `upstream`.
fn router_to(upstream: SocketAddr) -> Arc<Router> {
    let mut table = RouteTable::default();
    let policy = FiberPolicy { timeouts: TimeoutPolicy::uniform(Duration::from_secs(10)), ..FiberPolicy::default() };
    let backend = Arc::new(HttpBackend::new(upstream, 1024, HttpLimits::default()));
    support::add_sole_revision(&mut table, "up", "up-00001", policy, backend);
    let router = Router::new(RouterConfig::default(), Registry::default());
    router.set_table(table);
    router
}

/// One request on a new connection; the status line and body.
async fn get_once(addr: SocketAddr, host: &str, path: &str) -> (String, String) {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.expect("read");
    let status = answer.lines().next().unwrap_or_default().to_owned();
    let body = answer.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    (status, body)
}

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// Two serving threads on one loopback port (every request to Service `up` goes to `upstream`).
fn two_threads_serving(upstream: SocketAddr) -> Workers {
    Workers::start(&router_to(upstream), &[Listen::plain(loopback(), Exposure::All)], 2, "test-serving").expect("starts")
}

#[tokio::test(flavor = "multi_thread")]
async fn two_threads_both_serve_and_each_keeps_its_own_upstream_connection() {
    let (upstream, connections) = counting_upstream().await;
    let workers = two_threads_serving(upstream);
    let addr = workers.local_addrs()[0];
    // 64 client connections, one after another: the kernel spreads them over both threads'
    // sockets, and each thread reuses its own pooled upstream connection. One shared pool, or
    // one thread serving all, would need a single upstream connection.
    for _ in 0..64 {
        let (status, body) = get_once(addr, HOST, "/").await;
        assert_eq!((status.as_str(), body.as_str()), ("HTTP/1.1 200 OK", "ok\n"));
        // Lets the answered exchange's connection return to its pool before the next request.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(connections.accepted.load(Ordering::Acquire), 2, "upstream connections: one per serving thread");
    workers.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn each_listener_serves_what_its_exposure_says() {
    let (upstream, _) = counting_upstream().await;
    let listens = [Listen::plain(loopback(), Exposure::Internal), Listen::plain(loopback(), Exposure::Admin)];
    let workers = Workers::start(&router_to(upstream), &listens, 2, "test-serving").expect("starts");
    let [internal, admin] = [workers.local_addrs()[0], workers.local_addrs()[1]];
    assert_ne!(internal, admin);
    assert_eq!(get_once(internal, HOST, "/").await.0, "HTTP/1.1 200 OK");
    assert_eq!(get_once(admin, "localhost", "/healthz").await.0, "HTTP/1.1 200 OK");
    assert!(get_once(admin, "localhost", "/metrics").await.1.contains("lampyr_router_"), "admin listener serves /metrics");
    assert_eq!(get_once(admin, HOST, "/").await.0, "HTTP/1.1 404 Not Found", "admin listener routes nothing");
    assert_eq!(get_once(internal, "localhost", "/metrics").await.0, "HTTP/1.1 404 Not Found", "no /metrics on an internal listener");
    workers.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn stopping_finishes_a_request_in_flight_then_refuses_connections() {
    let (upstream, _) = counting_upstream().await;
    let workers = two_threads_serving(upstream);
    let addr = workers.local_addrs()[0];
    let slow = tokio::spawn(get_once(addr, HOST, "/slow"));
    tokio::time::sleep(Duration::from_millis(150)).await;
    workers.stop().await;
    let (status, body) = slow.await.expect("request task");
    assert_eq!((status.as_str(), body.as_str()), ("HTTP/1.1 200 OK", "ok\n"), "the request in flight finished");
    let refused = TcpStream::connect(addr).await;
    assert!(refused.is_err(), "no thread accepts after stop: {refused:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_port_in_use_is_a_clear_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr");
    let Err(error) = Workers::start(&router_to(addr), &[Listen::plain(addr, Exposure::All)], 2, "test-serving") else {
        panic!("a port another socket holds without SO_REUSEPORT was bound");
    };
    assert!(error.to_string().contains(&format!("cannot listen on {addr}")), "{error}");
}

#[tokio::test(flavor = "multi_thread")]
async fn dropping_the_workers_stops_them_too() {
    let (upstream, _) = counting_upstream().await;
    let workers = two_threads_serving(upstream);
    let addr = workers.local_addrs()[0];
    assert_eq!(get_once(addr, HOST, "/").await.0, "HTTP/1.1 200 OK");
    drop(workers);
    let until = tokio::time::Instant::now() + Duration::from_secs(5);
    while TcpStream::connect(addr).await.is_ok() {
        assert!(tokio::time::Instant::now() < until, "still accepting 5 s after the workers were dropped");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
