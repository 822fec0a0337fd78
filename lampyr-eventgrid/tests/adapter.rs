//! The adapter over real HTTP on loopback: deliveries POSTed as Event Grid posts them, a
//! sink that records what it receives (or refuses it), and the answers Event Grid acts on.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use lampyr_eventgrid::server::Adapter;
use lampyr_eventgrid::sources::{Sinks, Target};
use serde_json::{Value, json};
use tokio::net::TcpListener;

/// What the sink received: each request's `ce-` headers and content type, and its body.
type Received = Arc<Mutex<Vec<(BTreeMap<String, String>, String)>>>;

/// A sink on loopback answering `status` to every request; returns its URL and what it received.
async fn sink(status: u16) -> (String, Received) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let received: Received = Arc::default();
    let log = received.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            let log = log.clone();
            let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                let log = log.clone();
                async move {
                    let headers: BTreeMap<String, String> = req
                        .headers()
                        .iter()
                        .filter(|(n, _)| n.as_str().starts_with("ce-") || n.as_str() == "content-type")
                        .map(|(n, v)| (n.to_string(), v.to_str().unwrap_or_default().to_string()))
                        .collect();
                    let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                    log.lock().expect("lock").push((headers, String::from_utf8_lossy(&body).into_owned()));
                    let mut response = hyper::Response::new(Full::new(Bytes::new()));
                    *response.status_mut() = hyper::StatusCode::from_u16(status).expect("status");
                    Ok::<_, Infallible>(response)
                }
            });
            tokio::spawn(
                hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .into_owned(),
            );
        }
    });
    (format!("http://{addr}/"), received)
}

/// The adapter on loopback serving `sinks`.
async fn adapter(sinks: Sinks) -> SocketAddr {
    let adapter = Adapter::bind("127.0.0.1:0".parse().expect("addr"), sinks).await.expect("bind");
    let addr = adapter.local_addr().expect("addr");
    tokio::spawn(adapter.serve(std::future::pending()));
    addr
}

fn client() -> hyper_util::client::legacy::Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>> {
    hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build_http()
}

/// POSTs `body` to `path` of the adapter with Event Grid's headers; returns the status and body.
async fn deliver(addr: SocketAddr, path: &str, event_type: &str, body: &Value) -> (u16, String) {
    let request = hyper::Request::post(format!("http://{addr}{path}"))
        .header("content-type", "application/json")
        .header("aeg-event-type", event_type)
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("request");
    let response = client().request(request).await.expect("the adapter answers");
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.expect("body").to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

const TOPIC: &str = "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/lampyr/providers/Microsoft.EventGrid/topics/orders";

fn order(i: usize) -> Value {
    json!({
        "id": format!("order-{i}"), "topic": TOPIC, "subject": format!("orders/{i}"), "eventType": "Contoso.Orders.Created",
        "eventTime": "2026-12-06T10:00:00Z", "data": { "order": i }, "dataVersion": "1.0", "metadataVersion": "1",
    })
}

#[tokio::test]
async fn a_batch_reaches_the_sink_in_order_in_binary_mode() {
    let (url, received) = sink(202).await;
    let sinks = Sinks::default();
    let extensions = BTreeMap::from([("team".to_string(), "orders".to_string())]);
    sinks.set("shop", "orders", Some(Ok(Target { sink: url, extensions })));
    let addr = adapter(sinks).await;

    let validation = json!([{ "id": "v", "topic": TOPIC, "subject": "", "eventType": "Microsoft.EventGrid.SubscriptionValidationEvent",
        "eventTime": "2026-12-06T10:00:00Z", "data": { "validationCode": "code-1" }, "dataVersion": "1", "metadataVersion": "1" }]);
    let (status, body) = deliver(addr, "/shop/orders", "SubscriptionValidation", &validation).await;
    assert_eq!((status, serde_json::from_str::<Value>(&body).expect("JSON")), (200, json!({ "validationResponse": "code-1" })));
    assert!(received.lock().expect("lock").is_empty(), "a handshake sends nothing to the sink");

    let (status, body) = deliver(addr, "/shop/orders", "Notification", &json!([order(1), order(2), order(3)])).await;
    assert_eq!(status, 200, "{body}");
    let received = received.lock().expect("lock").clone();
    let ids: Vec<&str> = received.iter().map(|(h, _)| h.get("ce-id").map(String::as_str).unwrap_or_default()).collect();
    assert_eq!(ids, ["order-1", "order-2", "order-3"]);
    let (headers, body) = &received[0];
    assert_eq!(headers.get("ce-source").map(String::as_str), Some(TOPIC));
    assert_eq!(headers.get("ce-type").map(String::as_str), Some("Contoso.Orders.Created"));
    assert_eq!(headers.get("ce-subject").map(String::as_str), Some("orders/1"));
    assert_eq!(headers.get("ce-team").map(String::as_str), Some("orders"));
    assert_eq!(headers.get("content-type").map(String::as_str), Some("application/json"));
    assert_eq!(body, r#"{"order":1}"#);
}

#[tokio::test]
async fn failures_are_answered_so_event_grid_retries_or_gives_up() {
    let (refusing, received) = sink(500).await;
    let sinks = Sinks::default();
    sinks.set("shop", "refused", Some(Ok(Target { sink: refusing.clone(), extensions: BTreeMap::new() })));
    sinks.set("shop", "unresolved", Some(Err("the sink Broker shop/default does not exist".into())));
    let addr = adapter(sinks).await;

    let (status, body) = deliver(addr, "/shop/refused", "Notification", &json!([order(1), order(2)])).await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains(&format!("sink {refusing} answered 500 to event order-1")), "{body}");
    assert_eq!(received.lock().expect("lock").len(), 1, "the batch stops at the first refusal");

    let (status, body) = deliver(addr, "/shop/unresolved", "Notification", &json!([order(1)])).await;
    assert_eq!((status, body.contains("does not exist")), (503, true), "{body}");
    let (status, body) = deliver(addr, "/shop/missing", "Notification", &json!([order(1)])).await;
    assert_eq!((status, body.trim()), (404, "no AzureEventGridSource shop/missing"));
    let (status, body) = deliver(addr, "/shop/refused", "Notification", &json!({ "not": "a batch" })).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("a JSON array of events"), "{body}");
    let oversized = json!([{ "id": "big", "topic": TOPIC, "eventType": "t", "data": "x".repeat(1024 * 1024) }]);
    let (status, _) = deliver(addr, "/shop/refused", "Notification", &oversized).await;
    assert_eq!(status, 413, "over Event Grid's 1 MB");
}

#[tokio::test]
async fn a_stalled_head_is_closed_and_a_stalled_body_answered_408_while_others_are_served() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let (url, received) = sink(202).await;
    let sinks = Sinks::default();
    sinks.set("shop", "orders", Some(Ok(Target { sink: url, extensions: BTreeMap::new() })));
    let limits = lampyr_process::serve::ServeLimits {
        max_connections: 4,
        header_timeout: std::time::Duration::from_millis(300),
        drain_timeout: std::time::Duration::from_secs(1),
    };
    let adapter = Adapter::bind("127.0.0.1:0".parse().expect("addr"), sinks).await.expect("bind");
    let addr = adapter.local_addr().expect("addr");
    tokio::spawn(adapter.with_limits(limits, std::time::Duration::from_millis(300)).serve(std::future::pending()));
    let patience = std::time::Duration::from_secs(20);

    let mut stalled_head = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stalled_head.write_all(b"POST /shop/orders HTTP/1.1\r\nHost: adapter\r\n").await.expect("write");
    let mut stalled_body = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let head = "POST /shop/orders HTTP/1.1\r\nHost: adapter\r\naeg-event-type: Notification\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n[";
    stalled_body.write_all(head.as_bytes()).await.expect("write");

    let (status, body) = deliver(addr, "/shop/orders", "Notification", &json!([order(1)])).await;
    assert_eq!(status, 200, "a delivery beside the stalled ones: {body}");

    let mut answer = Vec::new();
    let closed = tokio::time::timeout(patience, stalled_head.read_to_end(&mut answer)).await;
    assert!(matches!(closed, Ok(Ok(0))), "the stalled head's connection is closed without an answer: {closed:?}");
    let mut answer = vec![0u8; 4096];
    let read = tokio::time::timeout(patience, stalled_body.read(&mut answer)).await.expect("an answer to the stalled body");
    let answer = String::from_utf8_lossy(&answer[..read.expect("read")]).into_owned();
    assert!(answer.starts_with("HTTP/1.1 408"), "the stalled body answered {answer:?}");
    assert_eq!(received.lock().expect("lock").len(), 1, "only the complete delivery reached the sink");
}
