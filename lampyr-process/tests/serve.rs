//! The shared accept loop over real TCP on loopback: a connection whose head never finishes is
//! closed at the header timeout, an oversized head answered `431`, connections past the limit wait for one to end, and
//! shutdown lets a request in flight finish before the loop returns.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response};
use lampyr_process::serve::{ServeLimits, serve_http};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Longest any step here may take before the test fails (never a measured figure).
const PATIENCE: Duration = Duration::from_secs(20);

/// Serves "ok" (after `delay`) within `limits` until the returned sender is used or dropped.
async fn server(limits: ServeLimits, delay: Duration) -> (SocketAddr, oneshot::Sender<()>, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
    let addr = listener.local_addr().expect("local address");
    let (stop, stopped) = oneshot::channel::<()>();
    let handle = move |_req: Request<hyper::body::Incoming>| async move {
        tokio::time::sleep(delay).await;
        Response::new(Full::new(Bytes::from_static(b"ok\n")))
    };
    let task = tokio::spawn(async move {
        serve_http("test", listener, &limits, 1024, async move { drop(stopped.await) }, handle).await;
    });
    (addr, stop, task)
}

fn limits(max_connections: usize, header_timeout: Duration) -> ServeLimits {
    ServeLimits { max_connections, header_timeout, drain_timeout: PATIENCE }
}

/// Sends `request` on a new connection and returns the stream.
async fn send(addr: SocketAddr, request: &[u8]) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream.write_all(request).await.expect("write request");
    stream
}

/// Reads one answer's head (up to its blank line) and the rest of what is buffered, within `wait`.
async fn read_answer(stream: &mut TcpStream, wait: Duration) -> Option<String> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let read = async {
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    };
    tokio::time::timeout(wait, read).await.ok()?;
    Some(String::from_utf8_lossy(&got).into_owned())
}

const GET: &[u8] = b"GET / HTTP/1.1\r\nHost: test\r\n\r\n";

#[tokio::test]
async fn a_head_that_never_finishes_is_closed_at_the_header_timeout_and_others_are_still_served() {
    let (addr, _stop, _task) = server(limits(8, Duration::from_millis(300)), Duration::ZERO).await;
    let mut stalled = send(addr, b"GET / HTTP/1.1\r\nHost: test\r\n").await;
    let mut sent = Vec::new();
    let closed = tokio::time::timeout(PATIENCE, stalled.read_to_end(&mut sent)).await;
    assert!(matches!(closed, Ok(Ok(_))), "the connection with an unfinished head is closed: {closed:?}");
    assert!(sent.is_empty(), "nothing is answered to an unfinished head: {:?}", String::from_utf8_lossy(&sent));

    let mut next = send(addr, GET).await;
    let answer = read_answer(&mut next, PATIENCE).await.expect("an answer");
    assert!(answer.starts_with("HTTP/1.1 200"), "a complete request after it answered {answer:?}");
}

#[tokio::test]
async fn a_head_far_over_the_limit_is_answered_431() {
    let (addr, _stop, _task) = server(limits(8, PATIENCE), Duration::ZERO).await;
    let mut request = b"GET / HTTP/1.1\r\nHost: test\r\nX-Big: ".to_vec();
    request.extend(std::iter::repeat_n(b'a', 64 * 1024));
    request.extend_from_slice(b"\r\n\r\n");
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    // The server may answer and close before the whole head is written.
    let _ = stream.write_all(&request).await;
    let answer = read_answer(&mut stream, PATIENCE).await.expect("an answer to the oversized head");
    assert!(answer.starts_with("HTTP/1.1 431"), "a 64 KiB header answered {answer:?}");
}

#[tokio::test]
async fn connections_past_the_limit_wait_until_one_ends() {
    let (addr, _stop, _task) = server(limits(2, PATIENCE), Duration::ZERO).await;
    // Two kept-alive connections, answered once each, hold the limit.
    let mut first = send(addr, GET).await;
    let mut second = send(addr, GET).await;
    for held in [&mut first, &mut second] {
        let answer = read_answer(held, PATIENCE).await.expect("an answer");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");
    }
    let mut third = send(addr, GET).await;
    assert_eq!(read_answer(&mut third, Duration::from_millis(500)).await, None, "a third connection was served past the limit of two");
    drop(first);
    let answer = read_answer(&mut third, PATIENCE).await.expect("the third connection served once the first closed");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");
}

#[tokio::test]
async fn shutdown_lets_a_request_in_flight_finish_then_stops_accepting() {
    let (addr, stop, task) = server(limits(8, PATIENCE), Duration::from_millis(500)).await;
    let mut in_flight = send(addr, GET).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    stop.send(()).expect("the server is running");
    let answer = read_answer(&mut in_flight, PATIENCE).await.expect("the request in flight answered");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");
    tokio::time::timeout(PATIENCE, task).await.expect("the loop returns once drained").expect("the loop did not panic");
    assert!(TcpStream::connect(addr).await.is_err(), "the listener still accepts after shutdown");
}
