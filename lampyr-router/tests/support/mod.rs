//! What the router's test binaries share: a router serving a table on a
//! loopback port, and a table holding one Service.
// Each test binary compiles this module and uses part of it.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;

use lampyr_api::policy::FiberPolicy;
use lampyr_router::route::{self, RouteOptions, ServiceTraffic};
use lampyr_router::{Backend, RevisionEntry, RouteTable, Router, RouterConfig};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

/// Serves `table` from a new router on a loopback port, until the test's runtime ends.
pub async fn serve(table: RouteTable) -> (Arc<Router>, SocketAddr) {
    let router = Router::new(RouterConfig::default(), Registry::default());
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
