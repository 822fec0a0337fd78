//! fiber-router in front of an `HttpBackend` over real sockets: round trips,
//! header pass-through, connection reuse, HTTP/1.1 upgrades (WebSocket) joined through,
//! and how upstream failures surface (refused → 503 after a few tries, reset → 502,
//! slow → 504, oversized answer → 502).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use lampyr_api::policy::{FiberPolicy, ScalingPolicy, TimeoutPolicy};
use lampyr_router::InvokeError;
use lampyr_router::{Backend, HttpBackend, HttpLimits, RouteTable};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

mod support;

const HOST: &str = "up.default.localhost";

/// Answers `/slow` after 5 s, `/big` with 64 KiB, anything else with
/// `METHOD PATH?QUERY\n` + the body, echoing the header names it saw in `x-seen`.
async fn upstream() -> (SocketAddr, Arc<support::Tally>) {
    support::counted_http1_upstream(echo).await
}

async fn echo(req: hyper::Request<Incoming>) -> Result<hyper::Response<Full<Bytes>>, Infallible> {
    let (parts, body) = req.into_parts();
    let target = parts.uri.path_and_query().map_or("/", |pq| pq.as_str()).to_string();
    let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let out = match target.as_str() {
        "/slow" => {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Bytes::from_static(b"late\n")
        }
        "/big" => Bytes::from(vec![b'x'; 64 * 1024]),
        _ => Bytes::from([format!("{} {target}\n", parts.method).as_bytes(), &body].concat()),
    };
    let seen: Vec<&str> = parts.headers.keys().map(|k| k.as_str()).collect();
    let mut resp = hyper::Response::new(Full::new(out));
    resp.headers_mut().insert("x-seen", seen.join(",").parse().expect("header value"));
    if let Some(host) = parts.headers.get("host") {
        resp.headers_mut().insert("x-seen-host", host.clone());
    }
    resp.headers_mut().insert("x-upstream", "yes".parse().expect("header value"));
    Ok(resp)
}

/// Accepts connections, reads the request's first bytes, then drops the socket.
async fn resetting_upstream() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else { return };
            let mut buf = [0u8; 16];
            let _ = stream.read(&mut buf).await;
            drop(stream);
        }
    });
    addr
}

/// An address nothing listens on.
async fn refused_addr() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    listener.local_addr().expect("addr")
}

fn policy(timeout: Duration) -> FiberPolicy {
    FiberPolicy {
        scaling: ScalingPolicy { max_scale: 1, stable_window: Duration::from_secs(6), ..ScalingPolicy::default() },
        timeouts: TimeoutPolicy::uniform(timeout),
        ..FiberPolicy::default()
    }
}

fn limits() -> HttpLimits {
    HttpLimits { max_response_body: 16 * 1024, ..HttpLimits::default() }
}

/// A router serving `up.default.localhost` from `backend`.
async fn router(backend: Arc<HttpBackend>, timeout: Duration) -> SocketAddr {
    let mut table = RouteTable::default();
    support::add_sole_revision(&mut table, "up", "up-00001", policy(timeout), backend);
    support::serve(table).await.1
}

fn client() -> reqwest::Client {
    lampyr_testenv::http_client().timeout(Duration::from_secs(30)).build().expect("client")
}

fn get(c: &reqwest::Client, addr: SocketAddr, path: &str) -> reqwest::RequestBuilder {
    c.get(format!("http://{addr}{path}")).header("host", HOST)
}

#[tokio::test(flavor = "multi_thread")]
async fn requests_round_trip_through_the_router_with_their_headers() {
    let (up, connections) = upstream().await;
    let backend = Arc::new(HttpBackend::new(up, 1024, limits()));
    let addr = router(Arc::clone(&backend), Duration::from_secs(30)).await;
    let c = client();

    let resp = c
        .post(format!("http://{addr}/echo/a?x=1&y=2"))
        .header("host", HOST)
        .header("x-custom", "abc")
        .header("connection", "keep-alive, x-private")
        .header("x-private", "hop")
        .header("keep-alive", "timeout=5")
        .body("ping")
        .send()
        .await
        .expect("response");
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(resp.headers().get("x-upstream").map(|v| v.as_bytes()), Some(b"yes".as_slice()), "response headers pass");
    assert_eq!(resp.headers().get("x-seen-host").map(|v| v.as_bytes()), Some(HOST.as_bytes()), "Host is preserved");
    let seen = resp.headers().get("x-seen").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    let seen: Vec<&str> = seen.split(',').collect();
    assert!(seen.contains(&"x-custom"), "end-to-end headers pass: {seen:?}");
    for hop in ["connection", "keep-alive", "x-private"] {
        assert!(!seen.contains(&hop), "hop-by-hop {hop} was forwarded: {seen:?}");
    }
    assert_eq!(resp.text().await.expect("body"), "POST /echo/a?x=1&y=2\nping");

    for i in 0..20 {
        let resp = c.put(format!("http://{addr}/n/{i}")).header("host", HOST).body(vec![b'z'; i]).send().await.expect("response");
        assert_eq!(resp.text().await.expect("body"), format!("PUT /n/{i}\n{}", "z".repeat(i)));
    }
    assert_eq!(connections.accepted.load(Ordering::Acquire), 1, "sequential requests reuse one pooled upstream connection");
    assert_eq!(backend.stats().in_flight, 0);

    let big = c.post(format!("http://{addr}/")).header("host", HOST).body(vec![0u8; 1025]).send().await.expect("response");
    assert_eq!(big.status().as_u16(), 413, "the backend's request body limit holds");
}

/// A request with no body, as a backend receives it.
fn request(method: &str, uri: &str) -> http::Request<lampyr_router::Body> {
    http::Request::builder().method(method).uri(uri).body(lampyr_router::body::empty()).expect("request")
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_upstream_is_503_and_retryable_a_reset_one_is_502() {
    let c = client();
    let refused = Arc::new(HttpBackend::new(refused_addr().await, 1024, limits()));
    let addr = router(Arc::clone(&refused), Duration::from_secs(30)).await;
    let resp = get(&c, addr, "/").send().await.expect("response");
    assert_eq!(resp.status().as_u16(), 503);
    assert_eq!(resp.headers().get("retry-after").map(|v| v.as_bytes()), Some(b"1".as_slice()));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let err = refused.invoke(request("GET", "/"), deadline).await.map(|_| ());
    assert!(matches!(&err, Err(e @ InvokeError::Unavailable(_)) if e.retryable()), "refused: {err:?}");

    let reset = Arc::new(HttpBackend::new(resetting_upstream().await, 1024, limits()));
    let addr = router(Arc::clone(&reset), Duration::from_secs(30)).await;
    let resp = get(&c, addr, "/").send().await.expect("response");
    assert_eq!(resp.status().as_u16(), 502);
    let err = reset.invoke(request("POST", "/"), deadline).await.map(|_| ());
    assert!(matches!(&err, Err(e @ InvokeError::FiberFailed(_)) if !e.retryable()), "reset after sending: {err:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slow_upstream_is_504_at_the_deadline_and_an_oversized_answer_is_502() {
    let (up, _) = upstream().await;
    let backend = Arc::new(HttpBackend::new(up, 1024, limits()));
    let addr = router(Arc::clone(&backend), Duration::from_millis(300)).await;
    let c = client();

    let started = std::time::Instant::now();
    let resp = get(&c, addr, "/slow").send().await.expect("response");
    assert_eq!(resp.status().as_u16(), 504);
    assert!(started.elapsed() < Duration::from_secs(3), "answered at the deadline, not when the upstream did");
    assert_eq!(backend.stats().in_flight, 0, "the timed-out request is no longer counted");

    let resp = get(&c, addr, "/big").send().await.expect("response");
    assert_eq!(resp.status().as_u16(), 502, "a 64 KiB answer is above the 16 KiB limit");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let head = backend.invoke(request("HEAD", "/big"), deadline).await;
    let head = head.expect("a HEAD answer's Content-Length is not held against the body limit");
    assert_eq!(head.status(), 200);
    assert_eq!(head.into_body().collect().await.expect("no body").to_bytes().len(), 0);
    let resp = get(&c, addr, "/after").send().await.expect("response");
    assert_eq!(resp.text().await.expect("body"), "GET /after\n", "the backend still serves after both failures");
}

/// Switches `Upgrade: shout` requests to a protocol that answers every read upper-cased;
/// anything else is answered `200 no upgrade here`.
async fn upgrading_upstream() -> SocketAddr {
    support::http1_upstream(shout).await
}

async fn shout(mut req: hyper::Request<Incoming>) -> Result<hyper::Response<Full<Bytes>>, Infallible> {
    if req.headers().get("upgrade").is_none_or(|p| p != "shout") {
        return Ok(hyper::Response::new(Full::new(Bytes::from_static(b"no upgrade here\n"))));
    }
    let connection = req.headers().get("connection").cloned();
    let upgraded = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        let Ok(upgraded) = upgraded.await else { return };
        let mut io = TokioIo::new(upgraded);
        let mut buf = [0u8; 1024];
        while let Ok(n @ 1..) = io.read(&mut buf).await {
            if io.write_all(&buf[..n].to_ascii_uppercase()).await.is_err() {
                return;
            }
        }
    });
    let mut resp = hyper::Response::new(Full::new(Bytes::new()));
    *resp.status_mut() = hyper::StatusCode::SWITCHING_PROTOCOLS;
    resp.headers_mut().insert("upgrade", "shout".parse().expect("header value"));
    resp.headers_mut().insert("connection", "upgrade".parse().expect("header value"));
    if let Some(connection) = connection {
        resp.headers_mut().insert("x-seen-connection", connection);
    }
    Ok(resp)
}

/// Sends `head` on a new connection to `addr` and reads the response head.
async fn raw_request(addr: SocketAddr, head: &str) -> (tokio::net::TcpStream, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream.write_all(head.as_bytes()).await.expect("write the request");
    let mut seen = Vec::new();
    while !seen.ends_with(b"\r\n\r\n") {
        let byte = stream.read_u8().await.expect("a response head");
        seen.push(byte);
    }
    (stream, String::from_utf8_lossy(&seen).to_ascii_lowercase())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_upgrade_the_upstream_accepts_joins_both_connections_past_the_request_deadline() {
    let backend = Arc::new(HttpBackend::new(upgrading_upstream().await, 1024, limits()));
    let addr = router(backend, Duration::from_millis(300)).await;
    let ask =
        |protocol: &str| format!("GET /chat HTTP/1.1\r\nHost: {HOST}\r\nConnection: keep-alive, Upgrade\r\nUpgrade: {protocol}\r\n\r\n");

    let (mut stream, head) = raw_request(addr, &ask("shout")).await;
    assert!(head.starts_with("http/1.1 101 "), "the upstream's 101 reaches the client:\n{head}");
    assert!(head.contains("\r\nupgrade: shout\r\n") && head.contains("\r\nconnection: upgrade\r\n"), "{head}");
    assert!(head.contains("\r\nx-seen-connection: upgrade\r\n"), "the upstream was asked to upgrade, nothing else: {head}");
    for word in ["hello", "fireflies"] {
        // Past the 300 ms request deadline: an upgraded connection is not a request.
        tokio::time::sleep(Duration::from_millis(400)).await;
        stream.write_all(word.as_bytes()).await.expect("write");
        let mut echoed = vec![0u8; word.len()];
        stream.read_exact(&mut echoed).await.expect("the upstream's answer through the router");
        assert_eq!(echoed, word.to_ascii_uppercase().as_bytes());
    }
    drop(stream);

    let (_, head) = raw_request(addr, &ask("other")).await;
    assert!(head.starts_with("http/1.1 200 "), "an upgrade the upstream declines is an ordinary answer:\n{head}");
    let c = client();
    let resp = get(&c, addr, "/plain").send().await.expect("response");
    assert_eq!(resp.text().await.expect("body"), "no upgrade here\n", "requests without an upgrade still pass");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_upgraded_connection_stays_open_while_it_talks_and_closes_once_idle_past_its_limit() {
    let idle = Duration::from_millis(800);
    let open = prometheus_client::metrics::gauge::Gauge::<i64>::default();
    let limits = HttpLimits { upgraded_idle_timeout: idle, upgraded: open.clone(), ..limits() };
    let backend = Arc::new(HttpBackend::new(upgrading_upstream().await, 1024, limits));
    let addr = router(backend, Duration::from_secs(5)).await;
    let ask = format!("GET /chat HTTP/1.1\r\nHost: {HOST}\r\nConnection: Upgrade\r\nUpgrade: shout\r\n\r\n");
    let (mut stream, head) = raw_request(addr, &ask).await;
    assert!(head.starts_with("http/1.1 101 "), "{head}");
    // Four exchanges 400 ms apart: 1.6 s open in all, never 800 ms without a byte.
    // The router sees the last byte after the last write starts: its idle clock starts no
    // earlier than this one.
    let mut silent = std::time::Instant::now();
    for word in ["one", "two", "three", "four"] {
        tokio::time::sleep(Duration::from_millis(400)).await;
        silent = std::time::Instant::now();
        stream.write_all(word.as_bytes()).await.expect("still open while it talks");
        let mut echoed = vec![0u8; word.len()];
        stream.read_exact(&mut echoed).await.expect("the answer");
        assert_eq!(echoed, word.to_ascii_uppercase().as_bytes());
    }
    assert_eq!(open.get(), 1, "the open tunnel is counted");
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut rest)).await;
    assert!(matches!(read, Ok(Ok(0))), "the router closed the idle connection: {read:?}");
    assert!(silent.elapsed() >= idle, "not before the idle limit: {:?}", silent.elapsed());
    wait_until(|| open.get() == 0).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_upgraded_connection_keeps_its_place_under_the_connection_limit_until_it_closes() {
    let backend = Arc::new(HttpBackend::new(upgrading_upstream().await, 1024, limits()));
    let mut table = RouteTable::default();
    support::add_sole_revision(&mut table, "up", "up-00001", policy(Duration::from_secs(5)), backend);
    let config = lampyr_router::RouterConfig { max_connections: 1, ..Default::default() };
    let addr = support::serve_with(config, table).await.1;
    let ask = format!("GET /chat HTTP/1.1\r\nHost: {HOST}\r\nConnection: Upgrade\r\nUpgrade: shout\r\n\r\n");
    let (mut tunnel, head) = raw_request(addr, &ask).await;
    assert!(head.starts_with("http/1.1 101 "), "{head}");
    tunnel.write_all(b"hi").await.expect("write");
    let mut echoed = [0u8; 2];
    tunnel.read_exact(&mut echoed).await.expect("the tunnel answers");

    // The only place is the tunnel's: another connection waits in the backlog.
    let c = client();
    let waiting = tokio::spawn({
        let request = get(&c, addr, "/plain");
        async move { request.send().await.map(|r| r.status().as_u16()) }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiting.is_finished(), "a second connection was served while the tunnel held the only place");
    drop(tunnel);
    let status = waiting.await.expect("the request task").expect("answered once the tunnel closed");
    assert_eq!(status, 200);
}

/// Polls `done` every 10 ms for up to 5 s.
async fn wait_until(done: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "the condition did not hold within 5 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_upstream_that_starts_listening_between_tries_answers_the_request() {
    let port = refused_addr().await;
    let backend = Arc::new(HttpBackend::new(port, 1024, limits()));
    let opened = tokio::spawn(async move {
        // After the fourth try (refused at about 1.05 s) and before the fifth (about 4.25 s):
        // a Pod reported Ready (it has no readiness probe) before its server listens.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let listener = TcpListener::bind(port).await.expect("the port is free again");
        let (stream, _) = listener.accept().await.expect("the request's connection");
        let service = hyper::service::service_fn(echo);
        let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
    });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(8);
    let resp = backend.invoke(request("POST", "/late"), deadline).await.expect("answered once the upstream listens");
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.into_body().collect().await.expect("body").to_bytes(), "POST /late\n");
    opened.abort();

    let never = HttpBackend::new(refused_addr().await, 1024, HttpLimits { connect_attempts: 3, ..limits() });
    let started = std::time::Instant::now();
    let err = never.invoke(request("GET", "/"), deadline).await.map(|_| ());
    assert!(matches!(&err, Err(InvokeError::Unavailable(_))), "still refused after three tries: {err:?}");
    assert!(started.elapsed() >= Duration::from_millis(250), "it paused 50 ms and 200 ms between the tries");
}
