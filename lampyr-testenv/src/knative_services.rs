//! Knative Services driven through a running Lampyr ([`Serving`]): manifests of the example
//! guests, `kubectl apply`, and waiting for readiness and answers, for the
//! end-to-end tests and the cluster benchmarks.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use kube::Api;
use lampyr_api::Service;
use lampyr_api::conditions::KnativeStatus;
use serde_json::json;

use crate::cluster::Cluster;

/// Longest anything here waits (fiberd restores in a millisecond; builds,
/// pulls and controllers on a loaded 2-core machine take seconds).
pub const PATIENCE: Duration = Duration::from_secs(120);

/// A running Lampyr cluster side, reached through fiber-router: what the
/// end-to-end tests drive Knative Services through.
#[allow(async_fn_in_trait)] // awaited in place by tests, never spawned: no Send bound is needed
pub trait Serving: Sync {
    /// The Kubernetes and Knative side.
    fn cluster(&self) -> &Cluster;

    /// Where a fiber-router listens now (`None` while none runs).
    fn router_addr(&self) -> Option<SocketAddr>;

    /// The tails of Lampyr's own component logs, for failure messages.
    fn lampyr_logs(&self) -> String;

    /// Calls `check` every `interval` until it returns `Some`; panics naming
    /// `what`, with the components' logs, after [`PATIENCE`].
    async fn poll<T>(&self, what: &str, interval: Duration, mut check: impl AsyncFnMut() -> Option<T>) -> T {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(found) = check().await {
                return found;
            }
            assert!(Instant::now() < deadline, "{what} within {PATIENCE:?}\n{}", self.lampyr_logs());
            tokio::time::sleep(interval).await;
        }
    }

    /// `kubectl apply -f` of `manifest` (an object or a List); panics with kubectl's error.
    fn kubectl_apply(&self, manifest: &serde_json::Value) {
        let dir = tempfile::tempdir().expect("a temp dir");
        let file = dir.path().join("manifest.json");
        std::fs::write(&file, manifest.to_string()).expect("write the manifest");
        let output = self.cluster().kubectl().args(["apply", "-f"]).arg(&file).output().expect("run kubectl");
        assert!(output.status.success(), "kubectl apply: {}", String::from_utf8_lossy(&output.stderr));
    }

    /// Waits until Service `name` is Ready at its current generation; returns its URL's host.
    async fn ready_host(&self, services: &Api<Service>, name: &str) -> String {
        let service = self
            .poll(&format!("Service {name} Ready"), Duration::from_millis(50), async || {
                let service = services.get(name).await.ok()?;
                let generation = service.metadata.generation;
                service.status.as_ref().is_some_and(|s| s.is_ready(generation)).then_some(service)
            })
            .await;
        let url = service.status.and_then(|s| s.url).expect("a Ready Service has a URL");
        url.trim_start_matches("http://").trim_start_matches("https://").to_string()
    }

    /// GETs `path` on `host` through fiber-router until it answers 200; returns the body.
    async fn answer(&self, host: &str, path: &str) -> String {
        self.poll(&format!("{host}{path} answering 200"), Duration::from_millis(50), async || match self.get(host, path).await {
            Ok((200, body)) => Some(body),
            _ => None,
        })
        .await
    }

    /// Sends `GET path` with `Host: host` to fiber-router; returns the status and body.
    async fn get(&self, host: &str, path: &str) -> Result<(u16, String), String> {
        let router = self.router_addr().ok_or("no fiber-router is running")?;
        let client = crate::http_client().timeout(Duration::from_secs(30)).build().map_err(|e| e.to_string())?;
        let response = client
            .get(format!("http://{router}{path}"))
            .header("Host", host)
            .send()
            .await
            .map_err(|e| format!("GET {host}{path} through fiber-router: {e}"))?;
        let status = response.status().as_u16();
        Ok((status, response.text().await.map_err(|e| e.to_string())?))
    }
}

/// A Knative Service running `artifact` (a digest-pinned reference) with
/// `TARGET=target`, one request per fiber, and `traffic` when given.
pub fn knative_service(namespace: &str, name: &str, artifact: &str, target: &str, traffic: Option<serde_json::Value>) -> serde_json::Value {
    let mut service = json!({
        "apiVersion": "serving.knative.dev/v1", "kind": "Service",
        "metadata": { "name": name, "namespace": namespace },
        "spec": { "template": {
            "metadata": { "annotations": { lampyr_api::keys::SNAPSHOT_ARTIFACT: artifact } },
            "spec": { "containerConcurrency": 1,
                      "containers": [{ "image": artifact, "env": [{ "name": "TARGET", "value": target }] }] },
        } },
    });
    if let Some(traffic) = traffic {
        service["spec"]["traffic"] = traffic;
    }
    service
}
