//! Lampyr end to end in the cluster test environment: Knative Services applied
//! with kubectl are reconciled by upstream Knative and Lampyr's controllers,
//! served by fiberd (standing in for grant Pods) through fiber-router's own
//! KIngress class. Real API server, real registry, real fibers under /dev/kvm.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kube::Api;
use kube::api::{Patch, PatchParams};
use lampyr_api::conditions::{CONDITION_READY, ConditionStatus, KnativeStatus, revision};
use lampyr_api::{Revision, Service};
use lampyr_testenv::{LampyrStack, require_kvm};
use serde_json::json;

/// Longest anything here may take (fiberd restores in a millisecond; builds,
/// pulls and controllers on a loaded 2-core machine take seconds).
const PATIENCE: Duration = Duration::from_secs(120);

fn stack() -> &'static LampyrStack {
    require_kvm();
    LampyrStack::shared()
}

fn logs(stack: &LampyrStack) -> String {
    ["lampyr-controller", "fiber-router", "fiberd-k8s-controller"]
        .iter()
        .map(|c| format!("--- {c}:\n{}", stack.log_tail(c, 15)))
        .collect::<Vec<_>>()
        .join("\n")
}

async fn poll<T>(stack: &LampyrStack, what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(found) = check().await {
            return found;
        }
        assert!(Instant::now() < deadline, "{what} within {PATIENCE:?}\n{}", logs(stack));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `kubectl apply -f` of `manifest` (YAML or JSON); panics with kubectl's error.
fn kubectl_apply(stack: &LampyrStack, manifest: &serde_json::Value) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let file = dir.path().join("service.json");
    std::fs::write(&file, manifest.to_string()).expect("write the manifest");
    let output = stack.cluster.kubectl().args(["apply", "-f"]).arg(&file).output().expect("run kubectl");
    assert!(output.status.success(), "kubectl apply: {}", String::from_utf8_lossy(&output.stderr));
}

fn hello_service(ns: &str, name: &str, artifact: &str, target: &str, traffic: Option<serde_json::Value>) -> serde_json::Value {
    let mut service = json!({
        "apiVersion": "serving.knative.dev/v1", "kind": "Service",
        "metadata": { "name": name, "namespace": ns },
        "spec": { "template": {
            "metadata": { "annotations": { "lampyr.dev/snapshot-artifact": artifact } },
            "spec": { "containerConcurrency": 1,
                      "containers": [{ "image": artifact, "env": [{ "name": "TARGET", "value": target }] }] },
        } },
    });
    if let Some(traffic) = traffic {
        service["spec"]["traffic"] = traffic;
    }
    service
}

/// Waits until Service `name` is Ready at its current generation; returns its URL host.
async fn ready_host(stack: &LampyrStack, services: &Api<Service>, name: &str) -> String {
    let service = poll(stack, &format!("Service {name} Ready"), async || {
        let service = services.get(name).await.ok()?;
        let generation = service.metadata.generation;
        service.status.as_ref().is_some_and(|s| s.is_ready(generation)).then_some(service)
    })
    .await;
    let url = service.status.and_then(|s| s.url).expect("a Ready Service has a URL");
    url.trim_start_matches("http://").trim_start_matches("https://").to_string()
}

/// GETs `/` on `host` through fiber-router until it answers 200; returns the body.
async fn answer(stack: &LampyrStack, host: &str) -> String {
    poll(stack, &format!("{host} answering 200"), async || match stack.get(host, "/").await {
        Ok((200, body)) => Some(body),
        _ => None,
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_knative_service_applied_with_kubectl_is_served_from_fibers() {
    let stack = stack();
    let ns = stack.cluster.namespace("e2e-hello").await;
    let artifact = stack.push_example("hello").await;
    kubectl_apply(stack, &hello_service(&ns, "hello", &artifact, "Lampyr", None));

    let services: Api<Service> = Api::namespaced(stack.cluster.client().await, &ns);
    let host = ready_host(stack, &services, "hello").await;
    assert_eq!(host, format!("hello.{ns}.svc.cluster.local"));
    assert_eq!(answer(stack, &host).await, "Hello Lampyr!\n");

    // The Revision reports what fibers run it, with upstream's fields.
    let revisions: Api<Revision> = Api::namespaced(stack.cluster.client().await, &ns);
    let status = revisions.get("hello-00001").await.expect("revision").status.expect("status");
    let digest = artifact.split_once('@').map(|(_, d)| d).expect("pinned");
    assert!(status.container_statuses[0].image_digest.ends_with(digest), "{:?}", status.container_statuses);
    assert!(status.actual_replicas.unwrap_or(0) >= 1, "a request was just served: {status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_revision_a_50_50_split_and_tags() {
    let stack = stack();
    let ns = stack.cluster.namespace("e2e-split").await;
    let artifact = stack.push_example("hello").await;
    let services: Api<Service> = Api::namespaced(stack.cluster.client().await, &ns);
    kubectl_apply(stack, &hello_service(&ns, "split", &artifact, "one", None));
    let host = ready_host(stack, &services, "split").await;
    assert_eq!(answer(stack, &host).await, "Hello one!\n");

    // A new template makes revision 2, which latestRevision follows.
    kubectl_apply(stack, &hello_service(&ns, "split", &artifact, "two", None));
    ready_host(stack, &services, "split").await;
    poll(stack, "traffic on revision 2", async || (stack.get(&host, "/").await.ok()? == (200, "Hello two!\n".into())).then_some(())).await;

    // Half and half, each revision also reachable at its tag's host.
    let traffic = json!([
        { "revisionName": "split-00001", "percent": 50, "tag": "first" },
        { "revisionName": "split-00002", "percent": 50, "tag": "second" },
    ]);
    kubectl_apply(stack, &hello_service(&ns, "split", &artifact, "two", Some(traffic)));
    ready_host(stack, &services, "split").await;
    let tag_host = |tag: &str| format!("{tag}-split.{ns}.svc.cluster.local");
    assert_eq!(answer(stack, &tag_host("first")).await, "Hello one!\n");
    assert_eq!(answer(stack, &tag_host("second")).await, "Hello two!\n");

    let mut seen: BTreeMap<String, u32> = BTreeMap::new();
    for _ in 0..200 {
        let (status, body) = stack.get(&host, "/").await.expect("a response");
        assert_eq!(status, 200, "{body}");
        *seen.entry(body).or_default() += 1;
    }
    let one = seen.get("Hello one!\n").copied().unwrap_or(0);
    let two = seen.get("Hello two!\n").copied().unwrap_or(0);
    assert_eq!(one + two, 200, "{seen:?}");
    assert!((60..=140).contains(&one), "a 50/50 split over 200 requests gave {seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revision_scales_to_zero_and_back() {
    let stack = stack();
    let ns = stack.cluster.namespace("e2e-zero").await;
    let artifact = stack.push_example("hello").await;
    kubectl_apply(stack, &hello_service(&ns, "zero", &artifact, "zero", None));
    let services: Api<Service> = Api::namespaced(stack.cluster.client().await, &ns);
    let host = ready_host(stack, &services, "zero").await;
    assert_eq!(answer(stack, &host).await, "Hello zero!\n");

    let revisions: Api<Revision> = Api::namespaced(stack.cluster.client().await, &ns);
    let active = |wanted: ConditionStatus| {
        let revisions = revisions.clone();
        async move || {
            let status = revisions.get("zero-00001").await.ok()?.status?;
            let active = status.get_condition(revision::ACTIVE)?.clone();
            (active.status == wanted).then_some(active)
        }
    };
    let idle = poll(stack, "Active=False after the grace period", active(ConditionStatus::False)).await;
    assert_eq!(idle.reason, revision::REASON_NO_TRAFFIC);
    assert_eq!(answer(stack, &host).await, "Hello zero!\n", "the next request wakes it");
    poll(stack, "Active=True again", active(ConditionStatus::True)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_services_fail_with_a_clear_message_and_others_keep_serving() {
    let stack = stack();
    let ns = stack.cluster.namespace("e2e-bad").await;
    let artifact = stack.push_example("hello").await;
    let services: Api<Service> = Api::namespaced(stack.cluster.client().await, &ns);
    kubectl_apply(stack, &hello_service(&ns, "good", &artifact, "good", None));
    let good = ready_host(stack, &services, "good").await;

    let (repo, _) = artifact.split_once('@').expect("pinned");
    let wrong = format!("{repo}@sha256:{}", "e".repeat(64));
    let unpinned = format!("{repo}:latest");
    for (name, reference) in [("unpinned", unpinned.as_str()), ("wrong-digest", wrong.as_str())] {
        kubectl_apply(stack, &hello_service(&ns, name, reference, name, None));
    }
    let mut unsupported = hello_service(&ns, "unsupported", &artifact, "x", None);
    unsupported["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] = json!([{ "name": "data", "mountPath": "/data" }]);
    unsupported["spec"]["template"]["spec"]["volumes"] = json!([{ "name": "data", "emptyDir": {} }]);
    kubectl_apply(stack, &unsupported);

    let revisions: Api<Revision> = Api::namespaced(stack.cluster.client().await, &ns);
    for (name, expected) in [("unpinned", "digest"), ("wrong-digest", "sha256:eeee"), ("unsupported", "volumes")] {
        let message = poll(stack, &format!("{name}: Ready=False"), async || {
            let status = revisions.get(&format!("{name}-00001")).await.ok()?.status?;
            let ready = status.get_condition(CONDITION_READY)?;
            (ready.status == ConditionStatus::False).then(|| ready.message.clone())
        })
        .await;
        assert!(message.contains(expected), "{name}: {message:?} does not name {expected:?}");
    }
    assert_eq!(answer(stack, &good).await, "Hello good!\n", "the good Service keeps serving");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarts_of_the_controller_and_the_router_converge() {
    let stack = stack();
    let ns = stack.cluster.namespace("e2e-restart").await;
    let artifact = stack.push_example("hello").await;
    let services: Api<Service> = Api::namespaced(stack.cluster.client().await, &ns);
    kubectl_apply(stack, &hello_service(&ns, "restart", &artifact, "before", None));
    // The controller dies mid-rollout and comes back.
    stack.restart_controller().expect("restart lampyr-controller");
    let host = ready_host(stack, &services, "restart").await;
    assert_eq!(answer(stack, &host).await, "Hello before!\n");

    let change = json!({ "spec": { "template": { "spec": { "containers": [
        { "image": artifact, "env": [{ "name": "TARGET", "value": "after" }] }] } } } });
    services.patch("restart", &PatchParams::default(), &Patch::Merge(&change)).await.expect("update");
    stack.restart_controller().expect("restart lampyr-controller");
    stack.restart_router().expect("restart fiber-router");
    ready_host(stack, &services, "restart").await;
    poll(stack, "the router serving revision 2 after its restart", async || {
        (stack.get(&host, "/").await.ok()? == (200, "Hello after!\n".into())).then_some(())
    })
    .await;

    // Exactly one Home and one grant per Revision, whatever the restarts did.
    let client = stack.cluster.client().await;
    let homes: Api<lampyr_api::Home> = Api::namespaced(client.clone(), &ns);
    let names: Vec<String> = homes.list(&Default::default()).await.expect("homes").items.into_iter().filter_map(|h| h.metadata.name).collect();
    assert_eq!(names, ["restart-00001", "restart-00002"]);
}
