//! The public edge's TLS cost: a request through fiber-router's HTTPS listener
//! beside the same request through its plain public listener, both routing
//! one `ExternalIP` host to the same plain HTTP backend; on a new connection
//! each time (TCP connect, TLS handshake, request), and on one kept-alive
//! connection (the request alone).
//!
//! Run: `cargo bench -p lampyr-benches --bench edge`.
//! The certificate is an ECDSA P-256 leaf from a test CA; the client verifies it.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper_util::rt::TokioIo;
use lampyr_api::networking::IngressVisibility;
use lampyr_api::policy::FiberPolicy;
use lampyr_benches::{Samples, Table, fmt_duration, times_baseline};
use lampyr_router::{HostRoute, HttpBackend, HttpLimits, PathRoute, RevisionEntry, RouteTable, Router, RouterConfig, SplitRoute};
use lampyr_testenv::tls::{ServingCertificate, TestCa};
use prometheus_client::registry::Registry;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;
use tokio_rustls::TlsConnector;

/// The host every request names (SNI and Host).
const HOST: &str = "bench.default.example.com";
/// Requests each on a new connection, per listener.
const NEW_CONNECTIONS: usize = 1000;
/// Requests on one kept-alive connection, per listener.
const KEPT_ALIVE: usize = 5000;
const WARMUP: usize = 50;

fn main() {
    let backend_rt = runtime("backend");
    let backend = backend_rt.block_on(serve_hello());
    let ca = TestCa::new("lampyr-edge-bench").unwrap_or_else(|e| panic!("{e}"));
    let certificate = ca.issue(&[HOST]).unwrap_or_else(|e| panic!("{e}"));
    let router_rt = runtime("router");
    let (plain, https) = router_rt.block_on(start_router(backend, &certificate));
    let client = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("client runtime");
    let tls = client_tls(ca.pem());

    let new_plain = Samples::measure(NEW_CONNECTIONS, WARMUP, || client.block_on(request_on_new_connection(plain, None)));
    let new_tls = Samples::measure(NEW_CONNECTIONS, WARMUP, || client.block_on(request_on_new_connection(https, Some(&tls))));
    let kept_plain = client.block_on(kept_alive(plain, None));
    let kept_tls = client.block_on(kept_alive(https, Some(&tls)));

    let mut table = Table::default();
    for (what, tls, plain) in [("new connection + GET", &new_tls, &new_plain), ("kept-alive GET", &kept_tls, &kept_plain)] {
        for (p, label) in [(50.0, "p50"), (99.0, "p99")] {
            let (t, b) = (tls.percentile(p), plain.percentile(p));
            table.row(&format!("{what}, plain HTTP {label}"), fmt_duration(b), "baseline", "1.0× baseline".into());
            table.row(&format!("{what}, HTTPS {label}"), fmt_duration(t), "—", times_baseline(t, b));
        }
    }
    println!(
        "fiber-router public listeners, HTTPS vs plain HTTP ({NEW_CONNECTIONS} new connections, {KEPT_ALIVE} kept-alive requests each):"
    );
    println!("{}", table.render());
}

fn runtime(name: &str) -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name(format!("bench-{name}"))
        .enable_all()
        .build()
        .expect("runtime")
}

/// A hyper HTTP/1.1 server answering every request with `200 "hello\n"`.
async fn serve_hello() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind backend");
    let addr = listener.local_addr().expect("backend addr");
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(|_req| async {
                    Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from_static(b"hello\n"))))
                });
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
            });
        }
    });
    addr
}

/// A router whose table sends [`HOST`] (ExternalIP, with `certificate`) to `backend`;
/// returns its public plain-HTTP and HTTPS listeners.
async fn start_router(backend: SocketAddr, certificate: &ServingCertificate) -> (SocketAddr, SocketAddr) {
    let mut table = RouteTable::default();
    let http = Arc::new(HttpBackend::new(backend, 1024 * 1024, HttpLimits::default()));
    table.insert_revision(RevisionEntry::new("default", "bench-00001", FiberPolicy::default(), http));
    let split = SplitRoute {
        namespace: "default".into(),
        service: "bench-00001".into(),
        port: k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(80),
        percent: 100,
        append_headers: vec![],
    };
    let path = PathRoute { prefix: "/".into(), headers: vec![], append_headers: vec![], rewrite_host: None, splits: vec![split] };
    let route = HostRoute {
        ingress: "default/bench".into(),
        visibility: IngressVisibility::ExternalIp,
        redirect_to_https: false,
        hash: String::new(),
        paths: vec![path],
    };
    table.insert_host(HOST, Arc::new(route));
    let key = lampyr_router::tls::certified_key(certificate.cert_pem.as_bytes(), certificate.key_pem.as_bytes()).expect("certificate");
    table.certificates_mut().insert(HOST, Arc::new(key));
    let router = Router::new(RouterConfig::default(), Registry::default());
    router.set_table(table);
    let (plain, https) = (TcpListener::bind("127.0.0.1:0").await.expect("bind"), TcpListener::bind("127.0.0.1:0").await.expect("bind"));
    let addrs = (plain.local_addr().expect("addr"), https.local_addr().expect("addr"));
    let tls = lampyr_router::tls::server_config(Arc::clone(&router)).expect("TLS settings");
    tokio::spawn(Arc::clone(&router).serve_exposed(plain, lampyr_router::Exposure::Public, std::future::pending()));
    tokio::spawn(router.serve_tls(https, tls, std::future::pending()));
    addrs
}

/// A client trusting only the CA in `ca_pem`, speaking HTTP/1.1.
fn client_tls(ca_pem: &str) -> TlsConnector {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.expect("the CA certificate")).expect("a root");
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    TlsConnector::from(Arc::new(config))
}

/// Connects (and shakes hands, with `tls`), then sends one `GET /` and reads the answer.
async fn request_on_new_connection(addr: SocketAddr, tls: Option<&TlsConnector>) {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    tcp.set_nodelay(true).expect("nodelay");
    match tls {
        None => get(&mut handshake(tcp).await).await,
        Some(connector) => {
            let name = rustls::pki_types::ServerName::try_from(HOST).expect("a DNS name");
            let stream = connector.connect(name, tcp).await.expect("TLS handshake");
            get(&mut handshake(stream).await).await
        }
    }
}

/// Times [`KEPT_ALIVE`] requests on one connection (after [`WARMUP`] unmeasured ones).
async fn kept_alive(addr: SocketAddr, tls: Option<&TlsConnector>) -> Samples {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    tcp.set_nodelay(true).expect("nodelay");
    let mut sender = match tls {
        None => handshake(tcp).await,
        Some(connector) => {
            let name = rustls::pki_types::ServerName::try_from(HOST).expect("a DNS name");
            handshake(connector.connect(name, tcp).await.expect("TLS handshake")).await
        }
    };
    for _ in 0..WARMUP {
        get(&mut sender).await;
    }
    let mut samples = Vec::with_capacity(KEPT_ALIVE);
    for _ in 0..KEPT_ALIVE {
        let started = Instant::now();
        get(&mut sender).await;
        samples.push(started.elapsed());
    }
    Samples(samples)
}

type Sender = hyper::client::conn::http1::SendRequest<Empty<Bytes>>;

async fn handshake<IO: AsyncRead + AsyncWrite + Unpin + Send + 'static>(io: IO) -> Sender {
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await.expect("HTTP handshake");
    tokio::spawn(connection);
    sender
}

async fn get(sender: &mut Sender) {
    let request = hyper::Request::get("/").header("host", HOST).body(Empty::new()).expect("a request");
    let response =
        tokio::time::timeout(Duration::from_secs(10), sender.send_request(request)).await.expect("an answer in time").expect("an answer");
    assert_eq!(response.status(), 200, "the backend answers through the router");
    let body = response.into_body().collect().await.expect("the body").to_bytes();
    assert_eq!(&body[..], b"hello\n");
}
