//! Knative Eventing as a test drives it from outside the cluster: events sent to a Broker's
//! ingress through the API server's service proxy (the only way in from the host that needs
//! no NodePort), and the events a JobSink received, read back from the Secrets it keeps.

use base64::Engine as _;
use base64::prelude::BASE64_STANDARD;
use serde_json::Value;

use crate::cluster::Cluster;

/// The multi-tenant Broker's ingress Service and its HTTP port's name.
const BROKER_INGRESS: (&str, &str) = ("broker-ingress", "http");
/// The label a JobSink puts on the Secret holding each event it received.
pub const JOB_SINK_NAME_LABEL: &str = "sinks.knative.dev/job-sink-name";

/// Sends `event` (a CloudEvent in JSON: structured mode) to Broker `namespace/broker`'s
/// ingress, through the API server's proxy to Service `knative-eventing/broker-ingress`.
/// Errors with the API server's or the ingress's answer when it is not accepted.
pub async fn send_to_broker(cluster: &Cluster, namespace: &str, broker: &str, event: &Value) -> Result<(), String> {
    let (service, port) = BROKER_INGRESS;
    let headers = [("content-type", "application/cloudevents+json")];
    post_to_service(cluster, "knative-eventing", &format!("{service}:{port}"), &format!("{namespace}/{broker}"), &headers, event)
        .await
        .map(|_| ())
}

/// POSTs `body` with `headers` to `path` of Service `namespace/service_port` (`name:port-name`)
/// through the API server's service proxy; returns the answer's body, or an error naming the
/// request when the answer is not a 2xx.
pub async fn post_to_service(
    cluster: &Cluster,
    namespace: &str,
    service_port: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &Value,
) -> Result<String, String> {
    let uri = format!("/api/v1/namespaces/{namespace}/services/{service_port}/proxy/{path}");
    let mut request = http::Request::post(&uri);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(body.to_string().into_bytes()).map_err(|e| e.to_string())?;
    let client = cluster.client().await;
    client.request_text(request).await.map_err(|e| format!("POST {uri} ({body}): {e}"))
}

/// The events JobSink `namespace/sink` received so far: each Secret it made holds one, as JSON.
pub fn job_sink_events(cluster: &Cluster, namespace: &str, sink: &str) -> Result<Vec<Value>, String> {
    let selector = format!("{JOB_SINK_NAME_LABEL}={sink}");
    let out = cluster
        .kubectl()
        .args(["get", "secrets", "-n", namespace, "-l", &selector, "-o", "json"])
        .output()
        .map_err(|e| format!("kubectl: {e}"))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let list: Value = serde_json::from_slice(&out.stdout).map_err(|e| format!("kubectl's JSON: {e}"))?;
    let mut events = Vec::new();
    for secret in list["items"].as_array().into_iter().flatten() {
        let name = secret["metadata"]["name"].as_str().unwrap_or_default();
        let encoded = secret["data"]["event"].as_str().ok_or_else(|| format!("Secret {namespace}/{name} holds no event"))?;
        let bytes = BASE64_STANDARD.decode(encoded).map_err(|e| format!("Secret {namespace}/{name}: {e}"))?;
        events.push(serde_json::from_slice(&bytes).map_err(|e| format!("Secret {namespace}/{name}'s event: {e}"))?);
    }
    Ok(events)
}
