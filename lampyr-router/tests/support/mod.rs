//! What the router's test binaries share: a router serving a table on a
//! loopback port, a table holding one Service, and upstreams counting their connections.
// Each test binary compiles this module and uses part of it.
#![allow(dead_code)]

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;

use lampyr_api::policy::FiberPolicy;
use lampyr_router::route::{self, RouteOptions, ServiceTraffic};
use lampyr_router::{Backend, RevisionEntry, RouteTable, Router, RouterConfig};
use prometheus_client::registry::Registry;
use tokio::net::{TcpListener, TcpStream};

/// Serves `table` from a new router on a loopback port, until the test's runtime ends.
pub async fn serve(table: RouteTable) -> (Arc<Router>, SocketAddr) {
    serve_with(RouterConfig::default(), table).await
}

/// Like [`serve`], with the router's `config`.
pub async fn serve_with(config: RouterConfig, table: RouteTable) -> (Arc<Router>, SocketAddr) {
    let router = Router::new(config, Registry::default());
    router.set_table(table);
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(Arc::clone(&router).serve(listener, std::future::pending()));
    (router, addr)
}

/// Adds Revision `default/<revision>` (served by `backend` under `policy`) to `table`,
/// and Service `default/<service>` sending it all traffic, routed as `ly run` routes it.
pub fn add_sole_revision(table: &mut RouteTable, service: &str, revision: &str, policy: FiberPolicy, backend: Arc<dyn Backend>) {
    table.insert_revision(RevisionEntry::new("default", revision, policy, backend));
    route::program(table, &ServiceTraffic::single("default", service, revision), &RouteOptions::default()).expect("a new host");
}

/// Connections an upstream accepted, and how many are still open.
#[derive(Default)]
pub struct Tally {
    pub accepted: AtomicUsize,
    pub open: AtomicUsize,
}

/// Accepts connections on a loopback port until the test's runtime ends, handing each to
/// `serve` with its index (0 for the first), and counting them.
pub async fn accepting<F, S>(serve: F) -> (SocketAddr, Arc<Tally>)
where
    F: Fn(TcpStream, usize) -> S + Send + 'static,
    S: Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let tally = Arc::new(Tally::default());
    let counted = Arc::clone(&tally);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            let index = counted.accepted.fetch_add(1, Ordering::AcqRel);
            counted.open.fetch_add(1, Ordering::AcqRel);
            let (served, counted) = (serve(stream, index), Arc::clone(&counted));
            tokio::spawn(async move {
                served.await;
                counted.open.fetch_sub(1, Ordering::AcqRel);
            });
        }
    });
    (addr, tally)
}

/// An HTTP/1.1 upstream on a loopback port answering every request with `answer` (upgrades
/// allowed), until the test's runtime ends.
pub async fn http1_upstream<F, A>(answer: F) -> SocketAddr
where
    F: Fn(hyper::Request<Incoming>) -> A + Clone + Send + Sync + 'static,
    A: Future<Output = Result<hyper::Response<Full<Bytes>>, Infallible>> + Send + 'static,
{
    counted_http1_upstream(answer).await.0
}

/// [`http1_upstream`], counting its connections.
pub async fn counted_http1_upstream<F, A>(answer: F) -> (SocketAddr, Arc<Tally>)
where
    F: Fn(hyper::Request<Incoming>) -> A + Clone + Send + Sync + 'static,
    A: Future<Output = Result<hyper::Response<Full<Bytes>>, Infallible>> + Send + 'static,
{
    accepting(move |stream, _| {
        let service = hyper::service::service_fn(answer.clone());
        async move {
            let conn = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service);
            let _ = conn.with_upgrades().await;
        }
    })
    .await
}
