//! fiber-router streams bodies both ways and answers limits at the edge, over
//! real sockets with an `HttpBackend`: a response's first bytes reach the
//! client while the upstream is still writing; a request's first bytes reach
//! the upstream while the client is still sending; oversized heads are `431`,
//! oversized streamed bodies `413`, a body still arriving at the deadline `408`, a head still
//! arriving at the header timeout closes its connection.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::SinkExt;
use futures::channel::mpsc;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use lampyr_api::policy::{FiberPolicy, TimeoutPolicy};
use lampyr_router::{HttpBackend, HttpLimits, RouteTable, RouterConfig};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

mod support;
use tokio::sync::Notify;

const HOST: &str = "up.default.localhost";
type Chunks = mpsc::Sender<Result<Frame<Bytes>, Infallible>>;
type Streamed = StreamBody<mpsc::Receiver<Result<Frame<Bytes>, Infallible>>>;

/// `/drip`: answers `first`, waits for `go`, then `second`.
/// `/head-first`: reads the request body's first chunk, answers at once
/// (`x-first` holds that chunk) and echoes the rest of the body as it arrives.
/// Anything else: the whole request body, echoed after it has all arrived.
async fn upstream(go: Arc<Notify>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            let go = Arc::clone(&go);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| answer(req, Arc::clone(&go)));
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
            });
        }
    });
    addr
}

async fn answer(req: hyper::Request<Incoming>, go: Arc<Notify>) -> Result<hyper::Response<Streamed>, Infallible> {
    let (mut tx, rx) = mpsc::channel(4);
    let mut resp = hyper::Response::new(StreamBody::new(rx));
    match req.uri().path() {
        "/drip" => {
            tokio::spawn(async move {
                let _ = tx.send(Ok(Frame::data(Bytes::from_static(b"first")))).await;
                go.notified().await;
                let _ = tx.send(Ok(Frame::data(Bytes::from_static(b"second")))).await;
            });
        }
        "/head-first" => {
            let mut body = req.into_body();
            let first = next_data(&mut body).await.unwrap_or_default();
            resp.headers_mut().insert("x-first", first.to_vec().try_into().expect("header value"));
            tokio::spawn(async move {
                while let Some(data) = next_data(&mut body).await {
                    let _ = tx.send(Ok(Frame::data(data))).await;
                }
            });
        }
        _ => {
            let whole = req.into_body().collect().await.map(|c| c.to_bytes()).unwrap_or_default();
            tokio::spawn(async move {
                let _ = tx.send(Ok(Frame::data(whole))).await;
            });
        }
    }
    Ok(resp)
}

async fn next_data(body: &mut Incoming) -> Option<Bytes> {
    loop {
        match body.frame().await? {
            Ok(frame) => match frame.into_data() {
                Ok(data) if !data.is_empty() => return Some(data),
                _ => continue,
            },
            Err(_) => return None,
        }
    }
}

/// A router serving `up.default.localhost` from an `HttpBackend` for `up`
/// (request bodies up to `max_body` bytes, requests taking `timeout` at most).
async fn router(up: SocketAddr, max_body: u64, timeout: Duration) -> SocketAddr {
    let backend = Arc::new(HttpBackend::new(up, max_body, HttpLimits::default()));
    let policy = FiberPolicy { timeouts: TimeoutPolicy::uniform(timeout), ..FiberPolicy::default() };
    let mut table = RouteTable::default();
    support::add_sole_revision(&mut table, "up", "up-00001", policy, backend);
    support::serve(table).await.1
}

/// An HTTP/1.1 connection to `addr` whose request bodies the test writes chunk by chunk.
async fn connect(addr: SocketAddr) -> hyper::client::conn::http1::SendRequest<Streamed> {
    let stream = TcpStream::connect(addr).await.expect("connect");
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.expect("handshake");
    tokio::spawn(conn);
    sender
}

fn request(method: &str, path: &str) -> (hyper::Request<Streamed>, Chunks) {
    let (tx, rx) = mpsc::channel(4);
    let req = hyper::Request::builder().method(method).uri(path).header("host", HOST).body(StreamBody::new(rx)).expect("request");
    (req, tx)
}

fn chunk(bytes: &'static [u8]) -> Result<Frame<Bytes>, Infallible> {
    Ok(Frame::data(Bytes::from_static(bytes)))
}

/// Waits for `what`, failing after 20 s: a buffering router never delivers it.
async fn within<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), f).await.unwrap_or_else(|_| panic!("{what} did not arrive: the router buffers"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_response_streams_to_the_client_before_the_upstream_has_finished_it() {
    let go = Arc::new(Notify::new());
    let addr = router(upstream(Arc::clone(&go)).await, 1024, Duration::from_secs(60)).await;
    let mut sender = connect(addr).await;
    let (req, tx) = request("GET", "/drip");
    drop(tx);
    let resp = within("the response head", sender.send_request(req)).await.expect("response");
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let first = within("the first chunk", body.frame()).await.expect("a frame").expect("data");
    assert_eq!(first.into_data().expect("data"), "first");
    go.notify_one();
    let rest = within("the rest", body.collect()).await.expect("the rest").to_bytes();
    assert_eq!(rest, "second");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_request_body_streams_to_the_upstream_before_the_client_has_sent_it_all() {
    let addr = router(upstream(Arc::new(Notify::new())).await, 1024, Duration::from_secs(60)).await;
    let mut sender = connect(addr).await;
    let (req, mut tx) = request("POST", "/head-first");
    let pending = tokio::spawn(sender.send_request(req));
    tx.send(chunk(b"abc")).await.expect("first chunk");
    let resp = within("the response head", pending).await.expect("task").expect("response");
    assert_eq!(resp.headers().get("x-first").map(|v| v.as_bytes()), Some(b"abc".as_slice()), "the upstream saw the first chunk");
    tx.send(chunk(b"def")).await.expect("second chunk");
    drop(tx);
    assert_eq!(within("the echo", resp.into_body().collect()).await.expect("body").to_bytes(), "def");
}

#[tokio::test(flavor = "multi_thread")]
async fn limits_are_answered_at_the_edge_431_413_408() {
    let addr = router(upstream(Arc::new(Notify::new())).await, 1024, Duration::from_millis(500)).await;
    let c = lampyr_testenv::http_client().timeout(Duration::from_secs(30)).build().expect("client");
    let url = format!("http://{addr}/");
    for size in [100 * 1024, 300 * 1024] {
        let resp = c.get(&url).header("host", HOST).header("x-big", "v".repeat(size)).send().await.expect("response");
        assert_eq!(resp.status().as_u16(), 431, "a {size}-byte header");
    }
    let resp = c.get(&url).header("host", HOST).header("x-fine", "v".repeat(32 * 1024)).send().await.expect("response");
    assert_eq!(resp.status().as_u16(), 200, "a 32 KiB header is within the limit");

    // Chunked, so the length is only known once the limit has been passed.
    let mut sender = connect(addr).await;
    let (req, mut tx) = request("POST", "/");
    let pending = tokio::spawn(sender.send_request(req));
    for _ in 0..3 {
        tx.send(Ok(Frame::data(Bytes::from(vec![b'x'; 512])))).await.expect("chunk");
    }
    drop(tx);
    let resp = within("the answer", pending).await.expect("task").expect("response");
    assert_eq!(resp.status(), 413, "1536 streamed bytes over a 1024-byte limit");

    // A body that stops arriving: the deadline passes while the router still reads it.
    let mut sender = connect(addr).await;
    let (req, mut tx) = request("POST", "/");
    let pending = tokio::spawn(sender.send_request(req));
    tx.send(chunk(b"part")).await.expect("chunk");
    let resp = within("the answer", pending).await.expect("task").expect("response");
    assert_eq!(resp.status(), 408, "the client was still sending at the deadline");
    drop(tx);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_head_that_stops_arriving_is_closed_at_the_header_timeout_and_the_next_is_served() {
    let up = upstream(Arc::new(Notify::new())).await;
    let backend = Arc::new(HttpBackend::new(up, 1024, HttpLimits::default()));
    let mut table = RouteTable::default();
    support::add_sole_revision(&mut table, "up", "up-00001", FiberPolicy::default(), backend);
    let config = RouterConfig { header_timeout: Duration::from_millis(300), ..RouterConfig::default() };
    let addr = support::serve_with(config, table).await.1;

    let mut stalled = TcpStream::connect(addr).await.expect("connect");
    stalled.write_all(format!("GET / HTTP/1.1\r\nHost: {HOST}\r\n").as_bytes()).await.expect("write");
    let mut answer = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(20), stalled.read_to_end(&mut answer)).await;
    assert!(matches!(closed, Ok(Ok(0))), "a head unfinished past the header timeout closes its connection unanswered: {closed:?}");

    let c = lampyr_testenv::http_client().timeout(Duration::from_secs(30)).build().expect("client");
    let resp = c.get(format!("http://{addr}/")).header("host", HOST).send().await.expect("response");
    assert_eq!(resp.status().as_u16(), 200, "a request after the stalled one");
}
