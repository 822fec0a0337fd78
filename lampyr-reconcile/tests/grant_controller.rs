//! The grant controller (`fiberd-k8s-controller`) against a real API server,
//! running as the service account its own manifest defines, so the manifest's
//! RBAC is what it is allowed.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Pod, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use lampyr_api::conditions::{CONDITION_READY, ConditionStatus, KnativeStatus};
use lampyr_api::{CapacityGrant, GrantPolicy, Home};
use lampyr_reconcile::grant::pods::GRANT_LABEL;
use lampyr_reconcile::grant::status::REASON_IMAGE_NOT_ALLOWED;
use lampyr_testenv::{Cluster, Process, repo_root, workspace_binary};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(30);
const DIGEST: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";

/// The shared environment with Lampyr's CRDs and the grant controller running.
async fn environment() -> &'static Cluster {
    static CONTROLLER: OnceLock<Process> = OnceLock::new();
    let cluster = Cluster::shared();
    let root = repo_root();
    cluster
        .apply_files(&[root.join("config/crd/lampyr.yaml"), root.join("config/fiberd-k8s-controller.yaml")])
        .await
        .unwrap_or_else(|e| panic!("installing the CRDs and the controller's manifest: {e}"));
    let kubeconfig = cluster.service_account_kubeconfig("lampyr-system", "fiberd-k8s-controller").await.unwrap_or_else(|e| panic!("{e}"));
    CONTROLLER.get_or_init(|| {
        let binary = workspace_binary("lampyr-reconcile", "fiberd-k8s-controller");
        let mut command = std::process::Command::new(binary);
        command
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .args(["--metrics-addr=127.0.0.1:0", "--lease-namespace=lampyr-system"]);
        Process::spawn("fiberd-k8s-controller", command, &cluster.data_dir().join("fiberd-k8s-controller.log"))
            .unwrap_or_else(|e| panic!("{e}"))
    });
    cluster
}

fn controller_log() -> String {
    lampyr_testenv::cluster::log_tail(&Cluster::shared().data_dir().join("fiberd-k8s-controller.log"), 30)
}

async fn poll<T>(what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if let Some(found) = check().await {
            return found;
        }
        assert!(Instant::now() < deadline, "{what} within {TIMEOUT:?}; controller log:\n{}", controller_log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn image(repository: &str) -> String {
    format!("{repository}@{DIGEST}")
}

async fn allow(client: &Client, name: &str, repositories: &[&str]) {
    let policy: GrantPolicy = serde_json::from_value(json!({
        "apiVersion": "fiber.lampyr.dev/v1alpha1", "kind": "GrantPolicy",
        "metadata": { "name": name }, "spec": { "allowedRepositories": repositories },
    }))
    .expect("a GrantPolicy");
    Api::<GrantPolicy>::all(client.clone()).create(&PostParams::default(), &policy).await.expect("create policy");
}

async fn grant(client: &Client, ns: &str, name: &str, instances: i32, repository: &str) {
    let grant: CapacityGrant = serde_json::from_value(json!({
        "apiVersion": "fiber.lampyr.dev/v1alpha1", "kind": "CapacityGrant",
        "metadata": { "name": name, "namespace": ns },
        "spec": { "fiberSlots": 8, "memoryBytes": 268_435_456, "instances": instances,
                  "grantImage": image(&format!("{repository}/fiberd")), "helperImage": image(&format!("{repository}/helper")) },
    }))
    .expect("a CapacityGrant");
    Api::<CapacityGrant>::namespaced(client.clone(), ns).create(&PostParams::default(), &grant).await.expect("create grant");
}

async fn pod_names(pods: &Api<Pod>, grant: &str) -> Vec<String> {
    let listed = pods.list(&ListParams::default().labels(&format!("{GRANT_LABEL}={grant}"))).await.expect("list pods");
    let mut names: Vec<String> = listed.items.iter().filter(|p| p.metadata.deletion_timestamp.is_none()).map(|p| p.name_any()).collect();
    names.sort();
    names
}

/// What a kubelet reports once a Pod's containers are up and its probe passes.
async fn mark_ready(pods: &Api<Pod>, name: &str) {
    let status = json!({ "status": { "phase": "Running", "conditions": [
        { "type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z" }] } });
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status)).await.expect("pod status");
}

#[tokio::test]
async fn an_allowed_grant_gets_a_pod_per_instance_and_is_ready_when_they_are() {
    let cluster = environment().await;
    let client = cluster.client().await;
    let ns = cluster.namespace("grant").await;
    allow(&client, "grant-test-allowed", &["registry.example.com/allowed/fiberd", "registry.example.com/allowed/helper"]).await;
    grant(&client, &ns, "hello-00001", 2, "registry.example.com/allowed").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);

    let names = poll("two grant Pods", async || {
        let names = pod_names(&pods, "hello-00001").await;
        (names.len() == 2).then_some(names)
    })
    .await;
    assert_eq!(names, ["hello-00001-0", "hello-00001-1"]);
    let pod = pods.get("hello-00001-0").await.expect("pod");
    let spec = pod.spec.expect("spec");
    assert_eq!(spec.containers[0].image.as_deref(), Some(image("registry.example.com/allowed/fiberd").as_str()));
    assert_eq!(spec.service_account_name.as_deref(), Some("lampyr-fiberd"));
    assert!(Api::<ServiceAccount>::namespaced(client.clone(), &ns).get_opt("lampyr-fiberd").await.expect("get").is_some());
    assert!(Api::<RoleBinding>::namespaced(client.clone(), &ns).get_opt("lampyr-fiberd").await.expect("get").is_some());

    let grants: Api<CapacityGrant> = Api::namespaced(client.clone(), &ns);
    let not_ready = grants.get("hello-00001").await.expect("grant").status.expect("status written");
    assert_eq!(not_ready.ready_instances, 0);
    assert!(!not_ready.is_ready(Some(1)));

    for name in &names {
        mark_ready(&pods, name).await;
    }
    poll("grant Ready with 2 ready instances", async || {
        let status = grants.get("hello-00001").await.ok()?.status?;
        (status.ready_instances == 2 && status.is_ready(Some(1))).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_grant_outside_every_policy_gets_no_pod_and_says_why() {
    let cluster = environment().await;
    let client = cluster.client().await;
    let ns = cluster.namespace("denied").await;
    grant(&client, &ns, "hello-00001", 1, "registry.example.com/denied").await;
    let grants: Api<CapacityGrant> = Api::namespaced(client.clone(), &ns);
    let ready = poll("the refusal in the grant's status", async || {
        let status = grants.get("hello-00001").await.ok()?.status?;
        status.get_condition(CONDITION_READY).cloned()
    })
    .await;
    assert_eq!((ready.status, ready.reason.as_str()), (ConditionStatus::False, REASON_IMAGE_NOT_ALLOWED));
    assert!(ready.message.contains("spec.grantImage") && ready.message.contains("registry.example.com/denied/fiberd"), "{}", ready.message);
    let pods: Api<Pod> = Api::namespaced(client, &ns);
    assert!(pod_names(&pods, "hello-00001").await.is_empty());
}

#[tokio::test]
async fn scaling_down_and_withdrawing_the_policy_delete_pods() {
    let cluster = environment().await;
    let client = cluster.client().await;
    let ns = cluster.namespace("shrink").await;
    allow(&client, "grant-test-shrink", &["registry.example.com/shrink/fiberd", "registry.example.com/shrink/helper"]).await;
    grant(&client, &ns, "g", 2, "registry.example.com/shrink").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    poll("two Pods", async || (pod_names(&pods, "g").await.len() == 2).then_some(())).await;

    let grants: Api<CapacityGrant> = Api::namespaced(client.clone(), &ns);
    grants.patch("g", &PatchParams::default(), &Patch::Merge(&json!({ "spec": { "instances": 1 } }))).await.expect("scale");
    poll("one Pod left", async || (pod_names(&pods, "g").await == ["g-0"]).then_some(())).await;

    Api::<GrantPolicy>::all(client.clone()).delete("grant-test-shrink", &DeleteParams::default()).await.expect("delete");
    poll("no Pod once the policy is gone", async || pod_names(&pods, "g").await.is_empty().then_some(())).await;
    poll("the grant reports the refusal", async || {
        let status = grants.get("g").await.ok()?.status?;
        let ready = status.get_condition(CONDITION_READY)?;
        (ready.reason == REASON_IMAGE_NOT_ALLOWED).then_some(())
    })
    .await;
}

#[tokio::test]
async fn the_fleet_key_is_copied_next_to_grant_pods() {
    let cluster = environment().await;
    let client = cluster.client().await;
    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": { "name": "lampyr-fiberd-seal-key", "namespace": "default" },
        "stringData": { "key": "AGE-SECRET-KEY-TEST" },
    }))
    .expect("a Secret");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    let apply = PatchParams::apply("grant-controller-test").force();
    secrets.patch("lampyr-fiberd-seal-key", &apply, &Patch::Apply(&secret)).await.expect("fleet key");
    let ns = cluster.namespace("key").await;
    allow(&client, "grant-test-key", &["registry.example.com/key/fiberd", "registry.example.com/key/helper"]).await;
    grant(&client, &ns, "g", 1, "registry.example.com/key").await;
    let copies: Api<Secret> = Api::namespaced(client, &ns);
    let copy = poll("the key copied", async || copies.get_opt("lampyr-fiberd-seal-key").await.ok().flatten()).await;
    let original = secrets.get("lampyr-fiberd-seal-key").await.expect("original");
    assert_eq!(copy.data, original.data);
}

/// How many times the controller's log says it wrote `what` in namespace `ns`.
fn writes_logged(ns: &str, what: &str) -> usize {
    let log = std::fs::read_to_string(Cluster::shared().data_dir().join("fiberd-k8s-controller.log")).unwrap_or_default();
    log.lines().filter(|line| line.contains(what) && line.contains(ns)).count()
}

#[tokio::test]
async fn grant_pods_identity_is_written_once_per_namespace_not_per_grant() {
    let cluster = environment().await;
    let client = cluster.client().await;
    let ns = cluster.namespace("identity").await;
    allow(&client, "grant-test-identity", &["registry.example.com/identity/fiberd", "registry.example.com/identity/helper"]).await;
    grant(&client, &ns, "first", 1, "registry.example.com/identity").await;
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), &ns);
    poll("the service account and its binding", async || {
        let account = accounts.get_opt("lampyr-fiberd").await.ok()??;
        let binding = bindings.get_opt("lampyr-fiberd").await.ok()??;
        Some((account, binding))
    })
    .await;
    // Give the controller's watches a moment to see what it wrote.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let written = (writes_logged(&ns, "wrote grant Pods' service account"), writes_logged(&ns, "wrote grant Pods' role binding"));
    assert!(written.0 >= 1 && written.1 >= 1, "the controller logs its writes: {written:?}\n{}", controller_log());

    // Four more grants, and every Pod's change, reconcile the namespace again and again.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let names: Vec<String> = (1..=4).map(|i| format!("more-{i}")).collect();
    for name in &names {
        grant(&client, &ns, name, 1, "registry.example.com/identity").await;
    }
    for name in names.iter().map(String::as_str).chain(["first"]) {
        let pod = poll("the grant's Pod", async || pod_names(&pods, name).await.pop()).await;
        mark_ready(&pods, &pod).await;
    }
    let grants: Api<CapacityGrant> = Api::namespaced(client.clone(), &ns);
    for name in names.iter().map(String::as_str).chain(["first"]) {
        poll("the grant Ready", async || grants.get(name).await.ok()?.status?.is_ready(Some(1)).then_some(())).await;
    }
    let after = (writes_logged(&ns, "wrote grant Pods' service account"), writes_logged(&ns, "wrote grant Pods' role binding"));
    assert_eq!(after, written, "no further identity writes for more grants in the namespace\n{}", controller_log());

    // Deleted behind the controller's back: written again on the next reconcile.
    accounts.delete("lampyr-fiberd", &DeleteParams::default()).await.expect("delete the account");
    tokio::time::sleep(Duration::from_millis(500)).await;
    grant(&client, &ns, "last", 1, "registry.example.com/identity").await;
    poll("the service account again", async || accounts.get_opt("lampyr-fiberd").await.ok()?).await;
}

#[tokio::test]
async fn a_grant_reports_the_homes_placed_on_it_and_what_they_hold() {
    let cluster = environment().await;
    let client = cluster.client().await;
    let ns = cluster.namespace("grant-alloc").await;
    allow(&client, "grant-test-alloc", &["registry.example.com/alloc/fiberd", "registry.example.com/alloc/helper"]).await;
    grant(&client, &ns, "shared", 2, "registry.example.com/alloc").await;
    let homes: Api<Home> = Api::namespaced(client.clone(), &ns);
    let grants: Api<CapacityGrant> = Api::namespaced(client.clone(), &ns);
    let artifact = format!("registry.example.com/alloc/app@{DIGEST}");
    for (name, grant) in [("a-00001", "shared"), ("b-00001", "shared"), ("elsewhere-00001", "other")] {
        let home: Home = serde_json::from_value(json!({
            "apiVersion": "fiber.lampyr.dev/v1alpha1", "kind": "Home",
            "metadata": { "name": name, "namespace": ns },
            "spec": { "revisionName": name, "artifact": artifact, "grantName": grant },
        }))
        .expect("a Home");
        homes.create(&PostParams::default(), &home).await.expect("create Home");
    }
    // What two fiberd instances report: a holds 2 reserved slots on each instance and
    // runs 3 fibers on one; b holds nothing (scaled to zero, min-scale 0).
    let entries = json!([
        { "name": "shared-0", "address": "10.0.0.1:8012", "loaded": true, "reservedSlots": 2, "warmFibers": 3, "memoryBytes": 300 },
        { "name": "shared-1", "address": "10.0.0.2:8012", "loaded": true, "reservedSlots": 2, "warmFibers": 0, "memoryBytes": 200 },
    ]);
    for (entry, manager) in entries.as_array().expect("entries").iter().zip(["fiberd/shared-0", "fiberd/shared-1"]) {
        let body = json!({ "apiVersion": "fiber.lampyr.dev/v1alpha1", "kind": "Home", "metadata": { "name": "a-00001" },
                           "status": { "instances": [entry] } });
        homes.patch_status("a-00001", &PatchParams::apply(manager), &Patch::Apply(&body)).await.expect("entry");
    }
    let status = poll("the grant's allocation", async || {
        let status = grants.get("shared").await.ok()?.status?;
        (status.allocated_slots == 5).then_some(status)
    })
    .await;
    assert_eq!((status.homes, status.allocated_memory_bytes), (2, 500), "{status:?}");

    // Deleting a Home frees what it held.
    homes.delete("a-00001", &DeleteParams::default()).await.expect("delete");
    poll("the allocation freed", async || {
        let status = grants.get("shared").await.ok()?.status?;
        (status.allocated_slots == 0 && status.homes == 1).then_some(())
    })
    .await;
}
