//! Placement of Revisions' Homes on shared CapacityGrants, against the real
//! cluster environment (etcd, kube-apiserver, kube-controller-manager, upstream
//! Knative) with simulated grant controller and fiberd status: a Revision the
//! grant has no room for is `Unschedulable` with a message naming the grant and
//! what is short, and is placed as soon as room appears; a Revision may name an
//! operator's grant; the shared grant grows and shrinks with its load within
//! its bounds; Revisions of the previous version move off their per-Revision
//! grants.

mod support;

use std::time::Duration;

use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use lampyr_api::conditions::{CONDITION_READY, revision};
use lampyr_api::{CapacityGrant, Home, KnativeStatus, Revision, Service, keys};
use lampyr_reconcile::revision::FIELD_MANAGER;
use lampyr_reconcile::revision::status::REASON_UNSCHEDULABLE;
use lampyr_testenv::{Cluster, TestRegistry};
use serde_json::json;
use support::*;

/// `service` with `annotations` added to its Revision template.
fn annotated(mut service: Service, annotations: &[(&str, &str)]) -> Service {
    let map = service.spec.template.metadata.annotations.get_or_insert_default();
    for (k, v) in annotations {
        map.insert((*k).to_string(), (*v).to_string());
    }
    service
}

fn ready_condition(rev: &Revision) -> Option<&lampyr_api::Condition> {
    rev.status.as_ref().and_then(|s| s.get_condition(CONDITION_READY))
}

/// Waits for Revision `name` to be `Unschedulable`; returns the message.
async fn unschedulable(revisions: &Api<Revision>, name: &str) -> String {
    let rev = wait_for(revisions, name, "Unschedulable", |r| {
        r.status.as_ref().and_then(|s| s.get_condition(revision::RESOURCES_AVAILABLE)).is_some_and(|c| c.reason == REASON_UNSCHEDULABLE)
    })
    .await;
    let available = rev.status.as_ref().and_then(|s| s.get_condition(revision::RESOURCES_AVAILABLE)).expect("condition");
    assert!(available.is_false(), "{available:?}");
    assert!(ready_condition(&rev).is_some_and(|c| c.is_false()), "Ready follows: {:?}", rev.status);
    available.message.clone()
}

/// Stands in for the grant controller and fiberd: `grant` Ready, and its instance `<grant>-0` serving Home `name`.
async fn serve(client: &Client, ns: &str, grant: &str, name: &str) {
    grant_ready(client, ns, grant).await;
    fiberd_reports(client, ns, name, &format!("{grant}-0"), true, 0, None).await;
}

/// One test's namespace, its APIs and a registry holding the hello artifact.
struct Setup {
    client: Client,
    ns: String,
    revisions: Api<Revision>,
    homes: Api<Home>,
    grants: Api<CapacityGrant>,
    _registry: TestRegistry,
    registry_host: String,
    artifact: String,
}

async fn setup(prefix: &str) -> Setup {
    let cluster = Cluster::shared();
    install_crds(cluster).await;
    let ns = cluster.namespace(prefix).await;
    let client = cluster.client().await;
    let registry = TestRegistry::start();
    let artifact = push_hello(&registry, "lampyr/hello").await;
    Setup {
        revisions: Api::namespaced(client.clone(), &ns),
        homes: Api::namespaced(client.clone(), &ns),
        grants: Api::namespaced(client.clone(), &ns),
        registry_host: registry.host(),
        _registry: registry,
        artifact,
        client,
        ns,
    }
}

async fn ready(revisions: &Api<Revision>, name: &str) -> Revision {
    wait_for(revisions, name, "Ready", |r| ready_condition(r).is_some_and(|c| c.is_true())).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_revision_waits_for_room_on_a_full_grant_and_is_placed_when_room_appears() {
    let Setup { client, ns, revisions, homes, grants, registry_host, artifact, _registry } = setup("cap-full").await;
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let mut config = config(&ns, &[registry_host]);
    config.grant.slots_per_instance = 4;
    let controller = Controller::start(client.clone(), config).await;

    // 3 of the shared grant's 4 slots reserved, then 2 more asked for.
    let svc = annotated(knative_service("big", &ns, Some(&artifact), json!({})), &[("autoscaling.knative.dev/min-scale", "3")]);
    create_service(&client, &ns, &svc).await;
    wait_for(&homes, "big-00001", "big placed", |h| h.spec.grant_name == keys::SHARED_GRANT_NAME).await;
    serve(&client, &ns, keys::SHARED_GRANT_NAME, "big-00001").await;
    ready(&revisions, "big-00001").await;
    let svc = annotated(knative_service("more", &ns, Some(&artifact), json!({})), &[("autoscaling.knative.dev/min-scale", "2")]);
    create_service(&client, &ns, &svc).await;
    let message = unschedulable(&revisions, "more-00001").await;
    eprintln!("unschedulable: {message}");
    for part in [keys::SHARED_GRANT_NAME, "needs 2 fiber slots", "1 slots"] {
        assert!(message.contains(part), "the message names {part:?}: {message}");
    }
    assert!(homes.get_opt("more-00001").await.expect("get").is_none(), "no Home until it is placed");

    // Room appears when the big Service goes: the waiting Revision is placed without a resync.
    services.delete("big", &DeleteParams::foreground()).await.expect("delete big");
    wait_gone(&homes, "big-00001").await;
    let placed = tokio::time::Instant::now();
    wait_for(&homes, "more-00001", "more placed", |h| h.spec.grant_name == keys::SHARED_GRANT_NAME).await;
    let woken_after = placed.elapsed();
    assert!(woken_after < Duration::from_secs(25), "woken by the Home's deletion, not the 30 s recheck: {woken_after:?}");
    serve(&client, &ns, keys::SHARED_GRANT_NAME, "more-00001").await;
    ready(&revisions, "more-00001").await;
    let grant = grants.get(keys::SHARED_GRANT_NAME).await.expect("grant");
    assert_eq!(grant.spec.fiber_slots, 4, "the shared grant was not resized by the Revisions");
    controller.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_shared_grant_grows_with_its_load_within_its_bounds_and_shrinks_when_it_falls() {
    let Setup { client, ns, revisions, homes, grants, registry_host, artifact, _registry } = setup("cap-grow").await;
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let mut config = config(&ns, &[registry_host]);
    config.grant.slots_per_instance = 4;
    config.grant.max_instances = 2;
    let controller = Controller::start(client.clone(), config).await;
    let with_min = |name: &str, min: &str| {
        annotated(knative_service(name, &ns, Some(&artifact), json!({})), &[("autoscaling.knative.dev/min-scale", min)])
    };
    let sized = async |instances: i32, why: &str| {
        wait_for(&grants, keys::SHARED_GRANT_NAME, why, |g| g.spec.instances == instances && g.spec.fiber_slots == 4 * instances).await
    };

    // 3 of one instance's 4 slots: 75%, one instance.
    create_service(&client, &ns, &with_min("big", "3")).await;
    wait_for(&homes, "big-00001", "big placed", |h| h.spec.grant_name == keys::SHARED_GRANT_NAME).await;
    serve(&client, &ns, keys::SHARED_GRANT_NAME, "big-00001").await;
    sized(1, "one instance for 3 slots").await;

    // 2 more: 5 slots are 125% of one instance, 62% of two: the grant grows, and the Revision is placed.
    create_service(&client, &ns, &with_min("more", "2")).await;
    sized(2, "grown to two instances for 5 slots").await;
    wait_for(&homes, "more-00001", "more placed", |h| h.spec.grant_name == keys::SHARED_GRANT_NAME).await;

    // 4 more would need a third instance, beyond the bound of 2: Unschedulable until room appears.
    create_service(&client, &ns, &with_min("third", "4")).await;
    let message = unschedulable(&revisions, "third-00001").await;
    assert!(message.contains(keys::SHARED_GRANT_NAME) && message.contains("needs 4 fiber slots"), "{message}");
    services.delete("big", &DeleteParams::foreground()).await.expect("delete big");
    wait_for(&homes, "third-00001", "third placed in the room big left", |h| h.spec.grant_name == keys::SHARED_GRANT_NAME).await;
    sized(2, "still two instances for 6 slots").await;

    // The load falls to 2 slots, 50% of one instance: the grant shrinks back.
    services.delete("third", &DeleteParams::foreground()).await.expect("delete third");
    sized(1, "shrunk to one instance for 2 slots").await;
    controller.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_revision_may_name_an_operators_grant_which_is_never_changed() {
    let Setup { client, ns, revisions, homes, grants, registry_host, artifact, _registry } = setup("cap-named").await;
    let controller = Controller::start(client.clone(), config(&ns, &[registry_host])).await;

    let svc = annotated(knative_service("team", &ns, Some(&artifact), json!({})), &[(keys::CAPACITY_GRANT_ANNOTATION, "team-a")]);
    create_service(&client, &ns, &svc).await;
    let message = unschedulable(&revisions, "team-00001").await;
    assert!(message.contains("\"team-a\"") && message.contains("does not exist"), "{message}");

    let theirs: CapacityGrant = serde_json::from_value(json!({
        "apiVersion": "fiber.lampyr.dev/v1alpha1", "kind": "CapacityGrant",
        "metadata": { "name": "team-a", "namespace": ns },
        "spec": { "fiberSlots": 7, "memoryBytes": 1_i64 << 30, "instances": 1, "grantImage": grant_image(), "helperImage": helper_image() }
    }))
    .expect("grant");
    grants.create(&PostParams::default(), &theirs).await.expect("the operator's grant");
    wait_for(&homes, "team-00001", "placed on team-a", |h| h.spec.grant_name == "team-a").await;
    serve(&client, &ns, "team-a", "team-00001").await;
    ready(&revisions, "team-00001").await;
    let grant = grants.get("team-a").await.expect("grant");
    assert_eq!(grant.spec.fiber_slots, 7, "left as the operator wrote it");
    let managers: Vec<String> = grant.metadata.managed_fields.iter().flatten().filter_map(|m| m.manager.clone()).collect();
    assert!(!managers.contains(&FIELD_MANAGER.to_string()), "lampyr-controller never wrote it: {managers:?}");
    assert!(grants.get_opt(keys::SHARED_GRANT_NAME).await.expect("get").is_none(), "no shared grant when none is used");
    controller.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn revisions_on_per_revision_grants_move_to_the_shared_grant() {
    let Setup { client, ns, revisions, homes, grants, registry_host, artifact, _registry } = setup("cap-upgrade").await;

    // What the previous version left: a Revision with a Home on its own grant, served by that grant's Pod.
    create_service(&client, &ns, &knative_service("old", &ns, Some(&artifact), json!({}))).await;
    let rev = wait_for(&revisions, "old-00001", "Revision", |_| true).await;
    let uid = rev.metadata.uid.clone().expect("uid");
    let owned = json!({
        "name": "old-00001", "namespace": ns,
        "labels": { "app.kubernetes.io/managed-by": FIELD_MANAGER, keys::REVISION_LABEL: "old-00001" },
        "ownerReferences": [{ "apiVersion": "serving.knative.dev/v1", "kind": "Revision", "name": "old-00001", "uid": uid,
                              "controller": true, "blockOwnerDeletion": true }],
    });
    let apply = PatchParams::apply(FIELD_MANAGER).force();
    let old_grant = json!({ "apiVersion": "fiber.lampyr.dev/v1alpha1", "kind": "CapacityGrant", "metadata": owned,
        "spec": { "fiberSlots": 10, "memoryBytes": 1_i64 << 30, "instances": 1, "grantImage": grant_image(), "helperImage": helper_image() } });
    grants.patch("old-00001", &apply, &Patch::Apply(&old_grant)).await.expect("old grant");
    let old_home = json!({ "apiVersion": "fiber.lampyr.dev/v1alpha1", "kind": "Home", "metadata": owned,
        "spec": { "revisionName": "old-00001", "artifact": artifact, "grantName": "old-00001" } });
    homes.patch("old-00001", &apply, &Patch::Apply(&old_home)).await.expect("old Home");
    serve(&client, &ns, "old-00001", "old-00001").await;

    // The new controller moves the Home to the shared grant, and deletes the old grant
    // only once an instance of the shared one serves it.
    let controller = Controller::start(client.clone(), config(&ns, &[registry_host])).await;
    wait_for(&homes, "old-00001", "moved", |h| h.spec.grant_name == keys::SHARED_GRANT_NAME).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(grants.get_opt("old-00001").await.expect("get").is_some(), "kept while nothing on the shared grant serves the Home");
    serve(&client, &ns, keys::SHARED_GRANT_NAME, "old-00001").await;
    wait_gone(&grants, "old-00001").await;
    ready(&revisions, "old-00001").await;
    assert!(grants.get_opt(keys::SHARED_GRANT_NAME).await.expect("get").is_some());
    controller.stop().await;
}
