//! KIngress routes in the router over real sockets, without a cluster: paths
//! matched by prefix and headers, appended headers, a rewritten host that
//! continues with its own rule (a DomainMapping), HTTPS redirects, and the
//! answers when nothing matches.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, HeaderValue};
use http_body_util::Full;
use hyper::body::Incoming;
use lampyr_api::networking::IngressVisibility;
use lampyr_api::policy::{FiberPolicy, TimeoutPolicy};
use lampyr_router::{FiberdBackend, FiberdConfig, HostRoute, Instance, PathRoute, RevisionEntry, RouteTable, SplitRoute};

mod support;

/// Answers `<name> host=<Host> rev=<Knative-Serving-Revision> tag=<Knative-Serving-Tag> path=<path>`.
async fn upstream(name: &'static str) -> SocketAddr {
    support::http1_upstream(move |req: hyper::Request<Incoming>| async move {
        let h = |k: &str| req.headers().get(k).and_then(|v| v.to_str().ok()).unwrap_or("-").to_string();
        let body = format!(
            "{name} host={} rev={} tag={} path={}",
            h("host"),
            h("knative-serving-revision"),
            h("knative-serving-tag"),
            req.uri().path()
        );
        Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from(body))))
    })
    .await
}

fn header(name: &'static str, value: &'static str) -> (HeaderName, HeaderValue) {
    (HeaderName::from_static(name), HeaderValue::from_static(value))
}

fn split(service: &str, rev_header: &'static str) -> SplitRoute {
    SplitRoute {
        namespace: "ns".into(),
        service: service.into(),
        port: k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(80),
        percent: 100,
        append_headers: vec![header("knative-serving-revision", rev_header), header("knative-serving-namespace", "ns")],
    }
}

fn path(prefix: &str, splits: Vec<SplitRoute>) -> PathRoute {
    PathRoute { prefix: prefix.into(), headers: vec![], append_headers: vec![], rewrite_host: None, splits }
}

fn host(ingress: &str, visibility: IngressVisibility, paths: Vec<PathRoute>) -> Arc<HostRoute> {
    Arc::new(HostRoute { ingress: ingress.into(), visibility, redirect_to_https: false, paths, hash: String::new() })
}

async fn serve(table: RouteTable) -> SocketAddr {
    support::serve(table).await.1
}

async fn revision(router_metrics: &lampyr_router::metrics::RouterMetrics, name: &'static str) -> RevisionEntry {
    let backend = FiberdBackend::new("ns", name, FiberdConfig::default(), router_metrics);
    backend.set_instances(&[Instance { name: name.into(), address: upstream(name).await, warm_fibers: 1, max_fibers: 1 }], false);
    let policy = FiberPolicy { timeouts: TimeoutPolicy::uniform(Duration::from_secs(30)), ..FiberPolicy::default() };
    RevisionEntry::new("ns", name, policy, backend)
}

#[tokio::test(flavor = "multi_thread")]
async fn kingress_paths_headers_rewrites_and_redirects() {
    let metrics = lampyr_router::metrics::RouterMetrics::default();
    let mut table = RouteTable::default();
    table.insert_revision(revision(&metrics, "hello-1").await);
    table.insert_revision(revision(&metrics, "hello-2").await);

    // The Route's KIngress: a header-matched tag path first, then everything.
    let mut tagged = path("/", vec![split("hello-2", "hello-2")]);
    tagged.headers = vec![(HeaderName::from_static("knative-serving-tag"), Some(HeaderValue::from_static("v2")))];
    tagged.append_headers = vec![header("knative-serving-tag", "v2")];
    let mut api = path("/api", vec![split("hello-2", "hello-2")]);
    api.append_headers = vec![header("knative-serving-tag", "api")];
    let route = host("ns/hello", IngressVisibility::ClusterLocal, vec![tagged, api, path("/", vec![split("hello-1", "hello-1")])]);
    table.insert_host("hello.ns.svc.cluster.local", route);
    // A DomainMapping's KIngress: rewrite the host, split to the Route's placeholder Service.
    let mut mapped = path("/", vec![split("hello", "-")]);
    mapped.splits[0].append_headers.clear();
    mapped.rewrite_host = Some(HeaderValue::from_static("hello.ns.svc.cluster.local"));
    table.insert_host("www.example.org", host("ns/www.example.org", IngressVisibility::ExternalIp, vec![mapped]));
    let mut redirecting = host("ns/secure", IngressVisibility::ExternalIp, vec![path("/", vec![split("hello-1", "hello-1")])]);
    Arc::make_mut(&mut redirecting).redirect_to_https = true;
    table.insert_host("secure.example.org", redirecting);
    table.insert_host(
        "ghost.ns.svc.cluster.local",
        host("ns/ghost", IngressVisibility::ClusterLocal, vec![path("/", vec![split("ghost-1", "ghost-1")])]),
    );
    table.insert_host(
        "narrow.ns.svc.cluster.local",
        host("ns/narrow", IngressVisibility::ClusterLocal, vec![path("/only", vec![split("hello-1", "hello-1")])]),
    );
    let addr = serve(table).await;
    let c = lampyr_testenv::http_client().redirect(reqwest::redirect::Policy::none()).build().expect("client");
    let get = |host: &'static str, path: &'static str, tag: Option<&'static str>| {
        let mut req = c.get(format!("http://{addr}{path}")).header("host", host);
        if let Some(tag) = tag {
            req = req.header("knative-serving-tag", tag);
        }
        async move {
            let resp = req.send().await.expect("response");
            let status = resp.status().as_u16();
            let location = resp.headers().get("location").and_then(|v| v.to_str().ok()).map(str::to_string);
            (status, resp.text().await.expect("body"), location)
        }
    };

    let (status, body, _) = get("hello.ns.svc.cluster.local", "/x", None).await;
    assert_eq!((status, body.as_str()), (200, "hello-1 host=hello.ns.svc.cluster.local rev=hello-1 tag=- path=/x"));
    let (_, body, _) = get("Hello.NS.svc.cluster.local:8080", "/api/v1", None).await;
    assert_eq!(body, "hello-2 host=Hello.NS.svc.cluster.local:8080 rev=hello-2 tag=api path=/api/v1", "prefix /api, path headers");
    let (_, body, _) = get("hello.ns.svc.cluster.local", "/x", Some("v2")).await;
    assert!(body.starts_with("hello-2 ") && body.contains("tag=v2"), "the header-matched path comes first: {body}");
    let (_, body, _) = get("hello.ns.svc.cluster.local", "/x", Some("v3")).await;
    assert!(body.starts_with("hello-1 "), "another tag value does not match: {body}");

    let (status, body, _) = get("www.example.org", "/mapped", None).await;
    assert_eq!(
        (status, body.as_str()),
        (200, "hello-1 host=hello.ns.svc.cluster.local rev=hello-1 tag=- path=/mapped"),
        "the rewritten host continues with its own rule"
    );

    let (status, _, location) = get("secure.example.org:80", "/a?b=c", None).await;
    assert_eq!((status, location.as_deref()), (301, Some("https://secure.example.org/a?b=c")));

    let (status, body, _) = get("ghost.ns.svc.cluster.local", "/", None).await;
    assert_eq!(status, 503, "a split to a Revision no Home publishes: {body}");
    let (status, body, _) = get("narrow.ns.svc.cluster.local", "/elsewhere", None).await;
    assert_eq!(status, 404, "no path matches: {body}");
}
