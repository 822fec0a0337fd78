//! Lampyr's own CRDs (`config/crd/lampyr.yaml`, generated from `lampyr-api`)
//! in a real kube-apiserver: they install, their schemas refuse bad specs,
//! their status subresources hold status apart from spec, and kubectl prints
//! their columns.

use kube::api::{Api, Patch, PatchParams, PostParams};
use lampyr_api::policy::FiberPolicy;
use lampyr_api::{CapacityGrant, Home};
use lampyr_testenv::{Cluster, repo_root};
use serde_json::json;

const ARTIFACT: &str = "registry.example.com/hello@sha256:1111111111111111111111111111111111111111111111111111111111111111";

async fn install(cluster: &Cluster) {
    cluster.apply_files(&[repo_root().join("config/crd/lampyr.yaml")]).await.unwrap_or_else(|e| panic!("installing Lampyr's CRDs: {e}"));
}

fn home(name: &str, spec: serde_json::Value) -> Home {
    serde_json::from_value(json!({
        "apiVersion": "fiber.lampyr.dev/v1alpha1", "kind": "Home",
        "metadata": { "name": name }, "spec": spec,
    }))
    .expect("a Home")
}

fn home_spec() -> serde_json::Value {
    let mut policy = serde_json::to_value(FiberPolicy::default()).expect("policy");
    policy["scaling"]["minScale"] = json!(1);
    policy["scaling"]["maxScale"] = json!(4);
    json!({ "revisionName": "hello-00001", "artifact": ARTIFACT, "grantName": "default", "policy": policy })
}

#[tokio::test]
async fn home_status_lives_in_its_subresource() {
    let cluster = Cluster::shared();
    install(cluster).await;
    let ns = cluster.namespace("home").await;
    let homes: Api<Home> = Api::namespaced(cluster.client().await, &ns);

    let created = homes.create(&PostParams::default(), &home("hello-00001", home_spec())).await.expect("create");
    assert_eq!(created.metadata.generation, Some(1));
    assert_eq!(created.spec.policy.timeouts.request.as_secs(), 300);
    assert!(created.status.is_none());

    // Status written through /status is kept, and does not bump the generation.
    let status = json!({ "status": { "observedGeneration": 1, "warmFibers": 3,
        "instances": [{ "name": "grant-0", "address": "10.0.0.7:8012", "warmFibers": 3 }],
        "conditions": [{ "type": "Ready", "status": "True", "lastTransitionTime": "2026-11-30T00:00:00Z" }] } });
    let patched = homes.patch_status("hello-00001", &PatchParams::default(), &Patch::Merge(&status)).await.expect("patch status");
    let kept = patched.status.clone().expect("status kept");
    assert_eq!((kept.warm_fibers, kept.instances.len(), kept.observed_generation), (3, 1, 1));
    assert_eq!(patched.metadata.generation, Some(1));

    // A spec change through /status is ignored; through the object it bumps the generation.
    let sneak = json!({ "spec": { "grantName": "other" } });
    let ignored = homes.patch_status("hello-00001", &PatchParams::default(), &Patch::Merge(&sneak)).await.expect("patch");
    assert_eq!(ignored.spec.grant_name, "default");
    let mut replaced = ignored.clone();
    replaced.spec.policy.scaling.max_scale = 8;
    replaced.status.as_mut().expect("status").warm_fibers = 0;
    let after = homes.replace("hello-00001", &PostParams::default(), &replaced).await.expect("replace");
    assert_eq!((after.spec.policy.scaling.max_scale, after.metadata.generation), (8, Some(2)));
    assert_eq!(after.status, patched.status, "a write to the object leaves status alone");
}

#[tokio::test]
async fn the_schemas_refuse_bad_specs_with_their_messages() {
    let cluster = Cluster::shared();
    install(cluster).await;
    let ns = cluster.namespace("schema").await;
    let client = cluster.client().await;
    let homes: Api<Home> = Api::namespaced(client.clone(), &ns);
    let mut unpinned = home_spec();
    unpinned["artifact"] = json!("registry.example.com/hello:latest");
    let mut inverted = home_spec();
    inverted["policy"]["scaling"]["minScale"] = json!(5);
    let cases = [
        ("an artifact not pinned by digest", unpinned, "spec.artifact"),
        ("minScale above maxScale", inverted, "minScale must not exceed maxScale"),
    ];
    for (i, (what, spec, message)) in cases.into_iter().enumerate() {
        let refused = homes.create(&PostParams::default(), &home(&format!("bad-{i}"), spec)).await;
        let Err(kube::Error::Api(status)) = refused else { panic!("{what}: expected a refusal, got {refused:?}") };
        assert_eq!(status.code, 422, "{what}: {status:?}");
        assert!(status.message.contains(message), "{what}: {message:?} not in {:?}", status.message);
    }

    let grants: Api<CapacityGrant> = Api::namespaced(client, &ns);
    let grant: CapacityGrant = serde_json::from_value(json!({
        "apiVersion": "fiber.lampyr.dev/v1alpha1", "kind": "CapacityGrant",
        "metadata": { "name": "default" },
        "spec": { "fiberSlots": 0, "memoryBytes": 1024, "grantImage": ARTIFACT, "helperImage": ARTIFACT },
    }))
    .expect("a CapacityGrant");
    let refused = grants.create(&PostParams::default(), &grant).await;
    let Err(kube::Error::Api(status)) = refused else { panic!("zero fiber slots: expected a refusal, got {refused:?}") };
    assert!(status.message.contains("spec.fiberSlots"), "{}", status.message);
}

#[tokio::test]
async fn capacity_grants_work_through_kubectl_with_their_columns() {
    let cluster = Cluster::shared();
    install(cluster).await;
    let ns = cluster.namespace("grant").await;
    let dir = tempfile::tempdir().expect("temp dir");
    let manifest = dir.path().join("grant.yaml");
    let grant = json!({
        "apiVersion": "fiber.lampyr.dev/v1alpha1", "kind": "CapacityGrant",
        "metadata": { "name": "default", "namespace": ns },
        "spec": { "fiberSlots": 64, "memoryBytes": 1_073_741_824u64, "instances": 2,
                  "grantImage": ARTIFACT, "helperImage": ARTIFACT },
    });
    std::fs::write(&manifest, serde_json::to_string(&grant).expect("json")).expect("write");
    let applied = cluster.kubectl().args(["apply", "-f"]).arg(&manifest).output().expect("kubectl apply");
    assert!(applied.status.success(), "{}", String::from_utf8_lossy(&applied.stderr));

    let grants: Api<CapacityGrant> = Api::namespaced(cluster.client().await, &ns);
    let status = json!({ "status": { "observedGeneration": 1, "readyInstances": 2, "allocatedSlots": 10, "homes": 3 } });
    grants.patch_status("default", &PatchParams::default(), &Patch::Merge(&status)).await.expect("patch status");

    // The short name and the printer columns, as an operator sees them.
    let listed = cluster.kubectl().args(["get", "cgrant", "-n", &ns]).output().expect("kubectl get");
    let text = String::from_utf8_lossy(&listed.stdout);
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap_or_default().split_whitespace().collect();
    assert_eq!(header[..6], ["NAME", "SLOTS", "ALLOCATED", "HOMES", "INSTANCES", "READY"], "{text}");
    let row: Vec<&str> = lines.next().unwrap_or_default().split_whitespace().collect();
    assert_eq!(row[..6], ["default", "64", "10", "3", "2", "2"], "{text}");
}
