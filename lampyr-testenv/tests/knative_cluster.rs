//! Upstream Knative Serving, composed as Lampyr composes it, against a real
//! kube-apiserver: what the upstream webhook and reconcilers guarantee
//! without a Revision reconciler (that is Lampyr's, in a later crate).
//!
//! Every test shares one environment ([`Cluster::shared`]) and works in a
//! namespace of its own.

use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::{Client, Resource};
use lampyr_api::conditions::{CONDITION_READY, ConditionStatus, route, service};
use lampyr_api::keys;
use lampyr_api::{Configuration, KnativeStatus, Revision, Route, Service};
use lampyr_testenv::Cluster;
use serde::de::DeserializeOwned;
use serde_json::json;

#[allow(dead_code)]
#[path = "../../lampyr-api/tests/upstream/mod.rs"]
mod upstream;

/// The longest a reconciler may take to act on a change.
const RECONCILE_TIMEOUT: Duration = Duration::from_secs(30);
/// A digest-pinned image no kubelet will ever pull (there is none).
const IMAGE: &str = "example.com/hello@sha256:0000000000000000000000000000000000000000000000000000000000000001";

fn hello(name: &str, namespace: &str) -> Service {
    serde_json::from_value(json!({
        "apiVersion": "serving.knative.dev/v1",
        "kind": "Service",
        "metadata": { "name": name, "namespace": namespace },
        "spec": { "template": { "spec": { "containers": [{ "image": IMAGE }] } } },
    }))
    .expect("a Service")
}

/// Polls `name` until `accept` holds, failing after [`RECONCILE_TIMEOUT`] with
/// the last object seen and the controller's log.
async fn wait_for<K>(api: &Api<K>, name: &str, what: &str, accept: impl Fn(&K) -> bool) -> K
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let deadline = Instant::now() + RECONCILE_TIMEOUT;
    loop {
        let found = api.get_opt(name).await.unwrap_or_else(|e| panic!("reading {name}: {e}"));
        if let Some(object) = found.as_ref().filter(|o| accept(o)) {
            return object.clone();
        }
        if Instant::now() > deadline {
            let cluster = Cluster::shared();
            panic!(
                "{name}: {what} did not happen within {RECONCILE_TIMEOUT:?}; last seen: {found:#?}\ncontroller log:\n{}",
                cluster.log_tail("lampyr-knative-controller", 30)
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Polls until `name` is gone.
async fn wait_gone<K>(api: &Api<K>, name: &str)
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let deadline = Instant::now() + RECONCILE_TIMEOUT;
    while let Some(object) = api.get_opt(name).await.unwrap_or_else(|e| panic!("reading {name}: {e}")) {
        assert!(Instant::now() < deadline, "{name} was not deleted within {RECONCILE_TIMEOUT:?}: {object:#?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn label<'a, K: Resource>(object: &'a K, key: &str) -> &'a str {
    object.meta().labels.as_ref().and_then(|l| l.get(key)).map(String::as_str).unwrap_or_default()
}

fn annotation<'a, K: Resource>(object: &'a K, key: &str) -> &'a str {
    object.meta().annotations.as_ref().and_then(|a| a.get(key)).map(String::as_str).unwrap_or_default()
}

fn uid<K: Resource>(object: &K) -> &str {
    object.meta().uid.as_deref().unwrap_or_default()
}

/// The object's controlling owner reference.
fn controller_of<K: Resource>(object: &K) -> OwnerReference {
    let owners = object.meta().owner_references.clone().unwrap_or_default();
    owners.into_iter().find(|o| o.controller == Some(true)).expect("a controlling owner reference")
}

struct Apis {
    services: Api<Service>,
    configurations: Api<Configuration>,
    routes: Api<Route>,
    revisions: Api<Revision>,
}

impl Apis {
    fn new(client: Client, namespace: &str) -> Self {
        Apis {
            services: Api::namespaced(client.clone(), namespace),
            configurations: Api::namespaced(client.clone(), namespace),
            routes: Api::namespaced(client.clone(), namespace),
            revisions: Api::namespaced(client, namespace),
        }
    }
}

#[tokio::test]
async fn a_service_is_defaulted_and_reconciled_into_configuration_route_and_revision() {
    let cluster = Cluster::shared();
    let ns = cluster.namespace("reconcile").await;
    let apis = Apis::new(cluster.client().await, &ns);

    let created = apis.services.create(&PostParams::default(), &hello("hello", &ns)).await.expect("create");
    // The webhook's defaults, as the API server stored them.
    let container = &created.spec.template.spec.containers[0];
    assert_eq!(container.name.as_deref(), Some("user-container"));
    assert_eq!(created.spec.template.spec.timeout_seconds, Some(300));
    assert_eq!(created.spec.template.spec.container_concurrency, Some(0));
    let traffic = created.spec.traffic.as_deref().expect("defaulted traffic");
    assert_eq!((traffic.len(), traffic[0].latest_revision, traffic[0].percent), (1, Some(true), Some(100)));
    assert_eq!(annotation(&created, keys::CREATOR_ANNOTATION), lampyr_testenv::cluster::pki::ADMIN_USER);
    assert_eq!(annotation(&created, keys::LAST_MODIFIER_ANNOTATION), lampyr_testenv::cluster::pki::ADMIN_USER);

    let configuration = wait_for(&apis.configurations, "hello", "Configuration created", |_| true).await;
    assert_eq!(label(&configuration, keys::SERVICE_LABEL), "hello");
    assert_eq!(label(&configuration, keys::SERVICE_UID_LABEL), uid(&created));
    let owner = controller_of(&configuration);
    assert_eq!((owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()), ("Service", "hello", uid(&created)));
    assert_eq!(configuration.spec.template, created.spec.template, "the Configuration carries the Service's template");

    let route = wait_for(&apis.routes, "hello", "Route created", |_| true).await;
    assert_eq!(label(&route, keys::SERVICE_LABEL), "hello");
    assert_eq!(controller_of(&route).uid, uid(&created));
    let route_traffic = &route.spec.traffic[0];
    assert_eq!(route_traffic.configuration_name.as_deref(), Some("hello"));

    let revision = wait_for(&apis.revisions, "hello-00001", "Revision created", |_| true).await;
    assert_eq!(label(&revision, keys::CONFIGURATION_LABEL), "hello");
    assert_eq!(label(&revision, keys::CONFIGURATION_GENERATION_LABEL), "1");
    assert_eq!(label(&revision, keys::CONFIGURATION_UID_LABEL), uid(&configuration));
    assert_eq!(label(&revision, keys::SERVICE_LABEL), "hello");
    assert_eq!(label(&revision, keys::SERVICE_UID_LABEL), uid(&created));
    assert_eq!(annotation(&revision, keys::CREATOR_ANNOTATION), lampyr_testenv::cluster::pki::ADMIN_USER);
    assert_eq!(controller_of(&revision).uid, uid(&configuration));
    assert_eq!(revision.spec, configuration.spec.template.spec, "the Revision is stamped from the template");
    // The labeler marks the Revision the Route names as active.
    let revision = wait_for(&apis.revisions, "hello-00001", "labeled active", |r| {
        label(r, keys::ROUTING_STATE_LABEL) == "active" && annotation(r, keys::ROUTES_ANNOTATION) == "hello"
    })
    .await;
    assert!(!annotation(&revision, keys::ROUTING_STATE_MODIFIED_ANNOTATION).is_empty());

    // Without a Revision reconciler the Revision never becomes ready: every
    // parent reports Ready=Unknown, waiting for it, at the generation it saw.
    let service = wait_for(&apis.services, "hello", "status observed", |s| {
        // The Configuration's and the Route's parts arrive in separate writes.
        s.status.as_ref().is_some_and(|st| st.observed_generation == 1 && !st.latest_created_revision_name.is_empty() && st.url.is_some())
    })
    .await;
    let status = service.status.expect("status");
    assert_eq!(status.latest_created_revision_name, "hello-00001");
    assert_eq!(status.url.as_deref(), Some(format!("http://hello.{ns}.svc.cluster.local").as_str()));
    for condition in [service::CONFIGURATIONS_READY, service::ROUTES_READY, CONDITION_READY] {
        let found = status.get_condition(condition).unwrap_or_else(|| panic!("no {condition} condition"));
        assert_eq!(found.status, ConditionStatus::Unknown, "{condition}: {found:?}");
    }
    assert!(!status.is_ready(service.metadata.generation));

    let route = wait_for(&apis.routes, "hello", "route status", |r| r.status.is_some()).await;
    let route_status = route.status.expect("route status");
    let assigned = route_status.get_condition(route::ALL_TRAFFIC_ASSIGNED).expect("AllTrafficAssigned");
    assert_eq!(assigned.status, ConditionStatus::Unknown);
    assert_eq!(assigned.reason, route::REASON_REVISION_MISSING);
    assert_eq!(assigned.message, route::configuration_not_ready_message("hello"));
}

#[tokio::test]
async fn updating_the_template_stamps_revision_00002() {
    let cluster = Cluster::shared();
    let ns = cluster.namespace("update").await;
    let apis = Apis::new(cluster.client().await, &ns);
    apis.services.create(&PostParams::default(), &hello("hello", &ns)).await.expect("create");
    wait_for(&apis.revisions, "hello-00001", "first Revision", |_| true).await;

    let change = json!({ "spec": { "template": { "spec": { "containers": [
        { "image": IMAGE, "env": [{ "name": "GREETING", "value": "hi" }] }
    ] } } } });
    let updated = apis.services.patch("hello", &PatchParams::default(), &Patch::Merge(&change)).await.expect("update");
    assert_eq!(updated.metadata.generation, Some(2));

    let second = wait_for(&apis.revisions, "hello-00002", "second Revision", |_| true).await;
    assert_eq!(label(&second, keys::CONFIGURATION_GENERATION_LABEL), "2");
    let env = second.spec.containers[0].env.clone().unwrap_or_default();
    assert_eq!((env[0].name.as_str(), env[0].value.as_deref()), ("GREETING", Some("hi")));
    let first = apis.revisions.get("hello-00001").await.expect("the first Revision stays");
    assert_eq!(label(&first, keys::CONFIGURATION_GENERATION_LABEL), "1");
    wait_for(&apis.configurations, "hello", "latest created is 00002", |c| {
        c.status.as_ref().is_some_and(|s| s.latest_created_revision_name == "hello-00002" && s.observed_generation == 2)
    })
    .await;
}

#[tokio::test]
async fn deleting_the_service_deletes_its_children() {
    let cluster = Cluster::shared();
    let ns = cluster.namespace("delete").await;
    let apis = Apis::new(cluster.client().await, &ns);
    apis.services.create(&PostParams::default(), &hello("hello", &ns)).await.expect("create");
    wait_for(&apis.revisions, "hello-00001", "Revision created", |_| true).await;
    wait_for(&apis.routes, "hello", "Route finalizer set", |r| r.metadata.finalizers.is_some()).await;

    apis.services.delete("hello", &DeleteParams::default()).await.expect("delete");
    wait_gone(&apis.services, "hello").await;
    wait_gone(&apis.configurations, "hello").await;
    wait_gone(&apis.routes, "hello").await;
    wait_gone(&apis.revisions, "hello-00001").await;
}

#[tokio::test]
async fn kubectl_apply_creates_and_updates_a_service() {
    let cluster = Cluster::shared();
    let ns = cluster.namespace("kubectl").await;
    let apis = Apis::new(cluster.client().await, &ns);
    let dir = tempfile::tempdir().expect("temp dir");
    let manifest = dir.path().join("hello.yaml");
    let write = |image: &str| {
        let yaml = format!(
            "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: hello\n  namespace: {ns}\n\
             spec:\n  template:\n    spec:\n      containers:\n      - image: {image}\n"
        );
        std::fs::write(&manifest, yaml).expect("write manifest");
    };
    let kubectl_apply = || {
        let output = cluster.kubectl().args(["apply", "-f"]).arg(&manifest).output().expect("run kubectl");
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(output.status.success(), "kubectl apply failed: {stderr}");
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    write(IMAGE);
    assert_eq!(kubectl_apply().trim(), "service.serving.knative.dev/hello created");
    let revision = wait_for(&apis.revisions, "hello-00001", "Revision created", |_| true).await;
    assert_eq!(revision.spec.containers[0].image.as_deref(), Some(IMAGE));

    let second_image = IMAGE.replace("0001", "0002");
    write(&second_image);
    assert_eq!(kubectl_apply().trim(), "service.serving.knative.dev/hello configured");
    let revision = wait_for(&apis.revisions, "hello-00002", "second Revision", |_| true).await;
    assert_eq!(revision.spec.containers[0].image.as_deref(), Some(second_image.as_str()));

    let output =
        cluster.kubectl().args(["get", "ksvc,configuration,route,revision", "-n", &ns, "-o", "name"]).output().expect("kubectl get");
    let listed = String::from_utf8_lossy(&output.stdout);
    for expected in [
        "service.serving.knative.dev/hello",
        "configuration.serving.knative.dev/hello",
        "route.serving.knative.dev/hello",
        "revision.serving.knative.dev/hello-00001",
        "revision.serving.knative.dev/hello-00002",
    ] {
        assert!(listed.lines().any(|l| l == expected), "kubectl get lists no {expected}:\n{listed}");
    }
}

/// Invalid objects, the field each breaks, and upstream's message for it.
fn invalid_services() -> Vec<(&'static str, serde_json::Value, &'static str)> {
    let container = json!({ "image": IMAGE });
    vec![
        (
            "containerConcurrency above the maximum",
            json!({ "template": { "spec": { "containerConcurrency": 5000, "containers": [container] } } }),
            "expected 0 <= 5000 <= 1000: spec.template.spec.containerConcurrency",
        ),
        (
            "timeoutSeconds above max-revision-timeout-seconds",
            json!({ "template": { "spec": { "timeoutSeconds": 6000, "containers": [container] } } }),
            "expected 0 <= 6000 <= 600: spec.template.spec.timeoutSeconds",
        ),
        (
            "traffic that does not sum to 100",
            json!({ "template": { "spec": { "containers": [container] } },
                    "traffic": [{ "latestRevision": true, "percent": 90 }] }),
            "Traffic targets sum to 90, want 100: spec.traffic",
        ),
        (
            "a container without an image",
            json!({ "template": { "spec": { "containers": [{ "name": "user-container" }] } } }),
            "missing field(s): spec.template.spec.containers[0].image",
        ),
    ]
}

#[tokio::test]
async fn invalid_services_are_refused_with_upstreams_message_and_nothing_is_stored() {
    let cluster = Cluster::shared();
    let ns = cluster.namespace("invalid").await;
    let apis = Apis::new(cluster.client().await, &ns);
    for (i, (what, spec, message)) in invalid_services().into_iter().enumerate() {
        let name = format!("invalid-{i}");
        let object: Service = serde_json::from_value(json!({
            "apiVersion": "serving.knative.dev/v1", "kind": "Service",
            "metadata": { "name": name, "namespace": ns }, "spec": spec,
        }))
        .expect("a Service");
        let refused = apis.services.create(&PostParams::default(), &object).await;
        let Err(kube::Error::Api(status)) = refused else {
            panic!("{what}: expected the webhook to refuse it, got {refused:?}");
        };
        assert_eq!(status.code, 400, "{what}: {status:?}");
        assert!(
            status.message.contains("validation.webhook.serving.knative.dev") && status.message.contains(message),
            "{what}: the message does not carry upstream's {message:?}: {}",
            status.message
        );
        assert!(apis.services.get_opt(&name).await.expect("get").is_none(), "{what}: it was stored");
    }

    // kubectl shows the same message to its user.
    let dir = tempfile::tempdir().expect("temp dir");
    let manifest = dir.path().join("bad.yaml");
    let bad = json!({ "apiVersion": "serving.knative.dev/v1", "kind": "Service",
                      "metadata": { "name": "bad", "namespace": ns }, "spec": invalid_services()[0].1 });
    std::fs::write(&manifest, serde_json::to_string(&bad).expect("json")).expect("write");
    let output = cluster.kubectl().args(["apply", "-f"]).arg(&manifest).output().expect("run kubectl");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains(invalid_services()[0].2), "kubectl's error: {stderr}");
}

/// The live objects, read raw and through Lampyr's types, are the same JSON.
#[tokio::test]
async fn live_objects_read_through_lampyrs_types_lose_no_field() {
    let cluster = Cluster::shared();
    let ns = cluster.namespace("wire").await;
    let client = cluster.client().await;
    let apis = Apis::new(client.clone(), &ns);
    apis.services.create(&PostParams::default(), &hello("hello", &ns)).await.expect("create");
    wait_for(&apis.revisions, "hello-00001", "Revision", |_| true).await;
    wait_for(&apis.routes, "hello", "route status", |r| r.status.is_some()).await;
    wait_for(&apis.services, "hello", "service status", |s| s.status.is_some()).await;

    for (kind, name) in [("Service", "hello"), ("Configuration", "hello"), ("Route", "hello"), ("Revision", "hello-00001")] {
        let gvk = GroupVersionKind::gvk(keys::SERVING_GROUP, "v1", kind);
        let raw: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ApiResource::from_gvk(&gvk));
        // The two reads may straddle a status write: read again until both saw one version.
        let (live, typed) = 'read: {
            for _ in 0..20 {
                let live = serde_json::to_value(raw.get(name).await.expect("get raw")).expect("json");
                let typed = match kind {
                    "Service" => serde_json::to_value(apis.services.get(name).await.expect("get")),
                    "Configuration" => serde_json::to_value(apis.configurations.get(name).await.expect("get")),
                    "Route" => serde_json::to_value(apis.routes.get(name).await.expect("get")),
                    _ => serde_json::to_value(apis.revisions.get(name).await.expect("get")),
                }
                .expect("json");
                if live["metadata"]["resourceVersion"] == typed["metadata"]["resourceVersion"] {
                    break 'read (live, typed);
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            panic!("{kind} {name} kept changing between two reads");
        };
        let mut live = upstream::without_empty(&live, false);
        // Go writes an empty template `metadata` as `{creationTimestamp: null}`;
        // Lampyr leaves it out. Both read back as the same empty metadata.
        if let Some(template) = live.pointer_mut("/spec/template").and_then(|t| t.as_object_mut())
            && template.get("metadata").is_some_and(|m| m == &json!({}))
        {
            template.remove("metadata");
        }
        let diff = upstream::diff(&live, &upstream::without_empty(&typed, false));
        assert!(diff.is_empty(), "{kind} {name} read through Lampyr's type differs from the live object:\n{diff}");
    }
}
