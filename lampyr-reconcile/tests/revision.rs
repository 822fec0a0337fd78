//! The Fiber Revision reconciler against the real cluster environment (etcd,
//! kube-apiserver, kube-controller-manager, upstream Knative webhook and
//! controller): Services become Revisions with a Home, a CapacityGrant and an
//! ExternalName Service; status follows a simulated grant controller and
//! fiberd; bad inputs fail with clear messages; deletion cascades.
//!
//! Each test works in its own namespace with its own in-process controller
//! (scoped to that namespace), so tests run in parallel against one environment.

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Service as CoreService;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use lampyr_api::conditions::{CONDITION_READY, configuration, revision, service};
use lampyr_api::fiber::home;
use lampyr_api::{CapacityGrant, Configuration, Home, KnativeStatus, Revision, Service, keys};
use lampyr_artifact::verify::layout_structure;
use lampyr_artifact::verify_layout;
use lampyr_reconcile::revision::FIELD_MANAGER;
use lampyr_reconcile::revision::status::{REASON_INVALID_ARTIFACT, REASON_UNSUPPORTED_FIELDS};
use lampyr_testenv::{Cluster, TestRegistry};
use serde_json::json;
use support::*;

struct Apis {
    revisions: Api<Revision>,
    homes: Api<Home>,
    grants: Api<CapacityGrant>,
    services: Api<CoreService>,
    configurations: Api<Configuration>,
    ksvcs: Api<Service>,
}

impl Apis {
    fn new(client: &Client, ns: &str) -> Self {
        Apis {
            revisions: Api::namespaced(client.clone(), ns),
            homes: Api::namespaced(client.clone(), ns),
            grants: Api::namespaced(client.clone(), ns),
            services: Api::namespaced(client.clone(), ns),
            configurations: Api::namespaced(client.clone(), ns),
            ksvcs: Api::namespaced(client.clone(), ns),
        }
    }
}

fn revision_status(r: &Revision) -> lampyr_api::RevisionStatus {
    r.status.clone().unwrap_or_default()
}

fn ready_is(r: &Revision, status: &str) -> bool {
    r.status.as_ref().and_then(|s| s.get_condition(CONDITION_READY)).is_some_and(|c| c.status.as_str() == status)
        && r.status.as_ref().is_some_and(|s| Some(s.observed_generation) == r.metadata.generation)
}

/// Waits for the Revision to fail, returning its `Ready` condition.
async fn failed(apis: &Apis, name: &str) -> lampyr_api::Condition {
    let rev = wait_for(&apis.revisions, name, "Ready=False", |r| ready_is(r, "False")).await;
    condition(&revision_status(&rev).conditions, CONDITION_READY).clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_service_gets_home_grant_and_service_and_becomes_ready_with_a_simulated_fiberd() {
    let cluster = Cluster::shared();
    install_crds(cluster).await;
    let ns = cluster.namespace("rev-ready").await;
    let client = cluster.client().await;
    let apis = Apis::new(&client, &ns);
    let registry = TestRegistry::start();
    let artifact = push_hello(&registry, "lampyr/hello").await;
    let controller = Controller::start(client.clone(), config(&ns, &[registry.host()])).await;

    let started = Instant::now();
    create_service(&client, &ns, &knative_service("hello", &ns, Some(&artifact), json!({}))).await;
    let rev = wait_for(&apis.revisions, "hello-00001", "artifact resolved", |r| {
        r.status.as_ref().is_some_and(|s| !s.container_statuses.is_empty())
    })
    .await;
    let uid = rev.metadata.uid.clone().expect("uid");
    let status = revision_status(&rev);
    assert_eq!(status.container_statuses[0].name, "user-container");
    assert_eq!(status.container_statuses[0].image_digest, artifact, "the artifact, pinned by digest");
    assert_eq!(status.observed_generation, rev.metadata.generation.unwrap_or(0));

    // Home and Service, named like the Revision and controlled by it; the namespace's
    // shared CapacityGrant, created on first use and owned by no Revision.
    let home = wait_for(&apis.homes, "hello-00001", "Home created", |_| true).await;
    let grant = wait_for(&apis.grants, keys::SHARED_GRANT_NAME, "shared CapacityGrant created", |_| true).await;
    let svc = wait_for(&apis.services, "hello-00001", "Service created", |_| true).await;
    assert!(grant.metadata.owner_references.is_none(), "the shared grant outlives Revisions");
    for (kind, meta) in [("Home", &home.metadata), ("Service", &svc.metadata)] {
        let owners = meta.owner_references.clone().unwrap_or_default();
        assert_eq!(owners.len(), 1, "{kind}: {owners:?}");
        let o = &owners[0];
        assert_eq!(
            (o.kind.as_str(), o.name.as_str(), o.uid.as_str(), o.controller, o.block_owner_deletion),
            ("Revision", "hello-00001", uid.as_str(), Some(true), Some(true)),
            "{kind}"
        );
        let labels = meta.labels.clone().unwrap_or_default();
        assert_eq!(labels.get(keys::REVISION_LABEL).map(String::as_str), Some("hello-00001"), "{kind}");
        assert_eq!(labels.get(keys::SERVICE_LABEL).map(String::as_str), Some("hello"), "{kind}");
    }
    assert_eq!(home.spec.revision_name, "hello-00001");
    assert_eq!(home.spec.artifact, artifact);
    assert_eq!(home.spec.grant_name, keys::SHARED_GRANT_NAME);
    assert_eq!(home.spec.sealed_template, None);
    assert_eq!(home.spec.policy.timeouts.request, Duration::from_secs(300));
    let (layout, digest) = hello();
    let per_fiber = verify_layout(layout, Some(digest)).expect("verifies").sizes.memory;
    assert_eq!(home.spec.fiber_memory_bytes, i64::try_from(per_fiber).expect("size"), "one fiber: the snapshot's memory");
    assert_eq!((grant.spec.fiber_slots, grant.spec.memory_bytes), (100, 2 << 30), "the default sizing: one instance");
    assert_eq!(grant.spec.instances, 1);
    assert_eq!((grant.spec.grant_image.clone(), grant.spec.helper_image.clone()), (grant_image(), helper_image()));
    let spec = svc.spec.clone().expect("spec");
    assert_eq!(spec.type_.as_deref(), Some("ExternalName"));
    assert_eq!(spec.external_name.as_deref(), Some("fiber-router.lampyr-system.svc.cluster.local"));
    let port = &spec.ports.clone().expect("ports")[0];
    assert_eq!((port.name.as_deref(), port.port), (Some("http"), 80));

    // Until the grant is Ready and an instance has loaded the template, the
    // Revision is deploying.
    let rev = wait_for(&apis.revisions, "hello-00001", "deploying", |r| {
        revision_status(r).get_condition(revision::RESOURCES_AVAILABLE).is_some_and(|c| c.reason == revision::REASON_DEPLOYING)
    })
    .await;
    let status = revision_status(&rev);
    assert!(condition(&status.conditions, CONDITION_READY).is_unknown());
    assert_eq!(condition(&status.conditions, revision::ACTIVE).reason, revision::REASON_DEPLOYING);
    grant_ready(&client, &ns, keys::SHARED_GRANT_NAME).await;
    wait_for(&apis.homes, "hello-00001", "GrantReady", |h| {
        h.status.as_ref().and_then(|s| s.get_condition(home::GRANT_READY)).is_some_and(|c| c.is_true())
    })
    .await;
    let rev = apis.revisions.get("hello-00001").await.expect("revision");
    assert!(condition(&revision_status(&rev).conditions, revision::RESOURCES_AVAILABLE).is_unknown(), "no fiberd yet");

    // A fiberd instance loads the template with no warm fibers: Ready, not Active.
    fiberd_reports(&client, &ns, "hello-00001", "grant-0", true, 0, None).await;
    let rev = wait_for(&apis.revisions, "hello-00001", "Ready", |r| ready_is(r, "True")).await;
    let ready_after = started.elapsed();
    let status = revision_status(&rev);
    for c in [revision::RESOURCES_AVAILABLE, revision::CONTAINER_HEALTHY] {
        assert!(condition(&status.conditions, c).is_true(), "{c}");
    }
    let active = condition(&status.conditions, revision::ACTIVE);
    assert_eq!((active.status.as_str(), active.reason.as_str()), ("False", revision::REASON_NO_TRAFFIC));
    assert_eq!((status.actual_replicas, status.desired_replicas), (Some(0), Some(0)));
    let config = wait_for(&apis.configurations, "hello", "latest ready", |c| {
        c.status.as_ref().is_some_and(|s| s.latest_ready_revision_name == "hello-00001")
    })
    .await;
    assert!(config.status.expect("status").is_ready(config.metadata.generation));

    // The Home's status: ours (conditions, warmFibers) beside fiberd's own entry.
    let h =
        wait_for(&apis.homes, "hello-00001", "Home Ready", |h| h.status.as_ref().is_some_and(|s| s.is_ready(h.metadata.generation))).await;
    let hs = h.status.clone().expect("status");
    assert_eq!(hs.instances.len(), 1);
    assert_eq!((hs.instances[0].name.as_str(), hs.instances[0].loaded), ("grant-0", true));
    let managers: Vec<String> = h.metadata.managed_fields.iter().flatten().filter_map(|m| m.manager.clone()).collect();
    assert!(managers.contains(&FIELD_MANAGER.to_string()) && managers.contains(&"fiberd/grant-0".to_string()), "{managers:?}");

    // Warm fibers make it Active; the Home counts them.
    fiberd_reports(&client, &ns, "hello-00001", "grant-0", true, 2, None).await;
    let rev = wait_for(&apis.revisions, "hello-00001", "Active", |r| {
        revision_status(r).get_condition(revision::ACTIVE).is_some_and(|c| c.is_true())
    })
    .await;
    assert_eq!(revision_status(&rev).actual_replicas, Some(2));
    let h = wait_for(&apis.homes, "hello-00001", "warm 2", |h| h.status.as_ref().is_some_and(|s| s.warm_fibers == 2)).await;
    assert!(condition(&h.status.expect("status").conditions, home::ACTIVE).is_true());
    // Back to zero: NoTraffic, still Ready.
    fiberd_reports(&client, &ns, "hello-00001", "grant-0", true, 0, None).await;
    let rev = wait_for(&apis.revisions, "hello-00001", "inactive", |r| {
        revision_status(r).get_condition(revision::ACTIVE).is_some_and(|c| c.is_false())
    })
    .await;
    assert!(ready_is(&rev, "True"));

    // Nothing is re-pulled or re-applied by later reconciles.
    let metrics = controller.context.metrics();
    let pulls = metrics.artifact_pulls.get_or_create(&vec![("outcome", "verified")]).get();
    assert_eq!(pulls, 1, "one pull, then the verified digest is remembered");
    eprintln!("Service created → Revision Ready (simulated grant controller and fiberd acting when polled): {ready_after:?}");

    // Deleting the Service deletes the Revision and, by owner references, its children.
    apis.ksvcs.delete("hello", &DeleteParams::foreground()).await.expect("delete");
    wait_gone(&apis.revisions, "hello-00001").await;
    wait_gone(&apis.homes, "hello-00001").await;
    wait_gone(&apis.services, "hello-00001").await;
    assert!(apis.grants.get_opt(keys::SHARED_GRANT_NAME).await.expect("get").is_some(), "the shared grant stays");
    controller.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn h2c_revisions_get_port_81_and_sealed_templates_reach_the_home() {
    let cluster = Cluster::shared();
    install_crds(cluster).await;
    let ns = cluster.namespace("rev-h2c").await;
    let client = cluster.client().await;
    let apis = Apis::new(&client, &ns);
    let registry = TestRegistry::start();
    let artifact = push_hello(&registry, "lampyr/hello").await;
    let controller = Controller::start(client.clone(), config(&ns, &[registry.host()])).await;
    let container = json!({ "ports": [{ "name": "h2c", "containerPort": 8080 }] });
    let mut service = knative_service("grpc", &ns, Some(&artifact), container);
    // A sealed template is passed on to fiberd (which pulls and opens it), spelled without a scheme.
    let sealed = format!("{}/lampyr/templates@{DIGEST0}", registry.host());
    service.spec.template.metadata.annotations.get_or_insert_default().insert(keys::SEALED_TEMPLATE.into(), format!("http://{sealed}"));
    create_service(&client, &ns, &service).await;
    let svc = wait_for(&apis.services, "grpc-00001", "Service created", |_| true).await;
    let port = &svc.spec.expect("spec").ports.expect("ports")[0];
    assert_eq!((port.name.as_deref(), port.port), (Some("http2"), 81));
    // The Service is created before the Home is applied (docs/lampyr-controller.md): wait for both.
    let home = wait_for(&apis.homes, "grpc-00001", "Home created", |_| true).await;
    assert!(home.spec.policy.http2);
    assert_eq!(home.spec.sealed_template.as_deref(), Some(sealed.as_str()));
    controller.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_inputs_fail_with_clear_messages_and_leave_another_revision_ready() {
    let cluster = Cluster::shared();
    install_crds(cluster).await;
    let ns = cluster.namespace("rev-bad").await;
    let client = cluster.client().await;
    let apis = Apis::new(&client, &ns);
    let registry = TestRegistry::start();
    let tampered_registry = TestRegistry::start();
    let good = push_hello(&registry, "lampyr/hello").await;
    let other_abi = push_other_abi(&registry, "lampyr/other-abi", lampyr_abi::ABI_VERSION as u32 + 1).await;
    let tampered = push_hello(&tampered_registry, "lampyr/hello").await;
    let (layout, digest) = hello();
    // The ELF travels compressed: alter the blob the registry serves.
    let artifact = layout_structure(layout, Some(digest)).expect("the artifact reads");
    let elf_digest = artifact.elf.transport().digest().to_string();
    let data = tampered_registry.blob_data_path(&elf_digest);
    let mut bytes = std::fs::read(&data).expect("registry blob");
    bytes[100] ^= 0xff;
    std::fs::write(&data, &bytes).expect("tamper");
    let host = registry.host();
    let wrong_digest = format!("{host}/lampyr/hello@sha256:{}", "e".repeat(64));
    let unreachable = format!("127.0.0.1:1/lampyr/hello@{digest}");
    let hosts = [registry.host(), tampered_registry.host(), "127.0.0.1:1".to_string()];
    let controller = Controller::start(client.clone(), config(&ns, &hosts)).await;

    create_service(&client, &ns, &knative_service("good", &ns, Some(&good), json!({}))).await;
    let cases: Vec<(&str, Option<String>, serde_json::Value)> = vec![
        ("missing", None, json!({})),
        ("unpinned", Some(format!("{host}/lampyr/hello:latest")), json!({})),
        ("wrong-digest", Some(wrong_digest.clone()), json!({})),
        ("tampered", Some(tampered.clone()), json!({})),
        ("other-abi", Some(other_abi.clone()), json!({})),
        ("unreachable", Some(unreachable.clone()), json!({})),
        ("unsupported", Some(good.clone()), json!({ "workingDir": "/srv", "securityContext": { "runAsUser": 2020 } })),
    ];
    for (name, artifact, container) in &cases {
        create_service(&client, &ns, &knative_service(name, &ns, artifact.as_deref(), container.clone())).await;
    }
    // The good one becomes Ready with a simulated grant controller and fiberd.
    wait_for(&apis.grants, keys::SHARED_GRANT_NAME, "shared grant", |_| true).await;
    grant_ready(&client, &ns, keys::SHARED_GRANT_NAME).await;
    fiberd_reports(&client, &ns, "good-00001", "grant-0", true, 1, None).await;
    wait_for(&apis.revisions, "good-00001", "Ready", |r| ready_is(r, "True")).await;

    let ready = failed(&apis, "missing-00001").await;
    assert_eq!(ready.reason, revision::REASON_CONTAINER_MISSING);
    assert!(ready.message.starts_with("Unable to fetch image \"registry.example.com/app@"), "{}", ready.message);
    assert!(ready.message.contains("no lampyr.dev/snapshot-artifact annotation"), "{}", ready.message);

    let ready = failed(&apis, "unpinned-00001").await;
    assert_eq!(ready.reason, revision::REASON_CONTAINER_MISSING);
    assert!(ready.message.contains("must be pinned by digest"), "{}", ready.message);

    let ready = failed(&apis, "wrong-digest-00001").await;
    assert_eq!(ready.reason, revision::REASON_CONTAINER_MISSING);
    assert!(ready.message.contains(&format!("Unable to fetch image \"{wrong_digest}\"")), "{}", ready.message);
    assert!(ready.message.contains("is not in"), "{}", ready.message);

    let ready = failed(&apis, "tampered-00001").await;
    assert_eq!(ready.reason, revision::REASON_CONTAINER_MISSING);
    assert!(ready.message.contains("digest mismatch") && ready.message.contains(&elf_digest), "{}", ready.message);

    let ready = failed(&apis, "other-abi-00001").await;
    assert_eq!(ready.reason, REASON_INVALID_ARTIFACT);
    assert!(ready.message.contains("metadata abiVersion"), "{}", ready.message);

    let ready = failed(&apis, "unreachable-00001").await;
    assert_eq!(ready.reason, revision::REASON_CONTAINER_MISSING);
    assert!(ready.message.contains("cannot reach 127.0.0.1:1"), "{}", ready.message);

    let ready = failed(&apis, "unsupported-00001").await;
    assert_eq!(ready.reason, REASON_UNSUPPORTED_FIELDS);
    for path in ["spec.template.spec.containers[0].workingDir", "spec.template.spec.containers[0].securityContext.runAsUser"] {
        assert!(ready.message.contains(path), "names {path}: {}", ready.message);
    }

    // None of them got children; the failure reaches the Service's status.
    for (name, ..) in &cases {
        let rev = format!("{name}-00001");
        assert!(apis.homes.get_opt(&rev).await.expect("get").is_none(), "{rev} has no Home");
        assert!(apis.services.get_opt(&rev).await.expect("get").is_none(), "{rev} has no Service");
    }
    // (The Service's Ready may show the Route's failure instead: upstream picks the latest False.)
    let configurations_ready = |s: &Service| s.status.as_ref().and_then(|st| st.get_condition(service::CONFIGURATIONS_READY)).cloned();
    let ksvc = wait_for(&apis.ksvcs, "other-abi", "failure propagated", |s| configurations_ready(s).is_some_and(|c| c.is_false())).await;
    let c = configurations_ready(&ksvc).expect("ConfigurationsReady");
    assert_eq!(c.reason, configuration::REASON_REVISION_FAILED);
    assert!(c.message.contains("metadata abiVersion"), "{c:?}");
    assert!(ksvc.status.as_ref().and_then(|s| s.get_condition(CONDITION_READY)).is_some_and(|c| c.is_false()));

    // Retryable problems are retried with backoff; the good Revision stays Ready.
    let failures = || controller.context.metrics().artifact_failures.get_or_create(&vec![("problem", "unreachable")]).get();
    let before = failures();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(failures() > before, "the unreachable registry is tried again");
    let good = apis.revisions.get("good-00001").await.expect("good");
    assert!(ready_is(&good, "True"), "{:#?}", good.status);
    controller.stop().await;
}

/// `service` with pod-level fields (`imagePullSecrets`, `serviceAccountName`) in its template.
fn with_pod_fields(service: Service, fields: serde_json::Value) -> Service {
    let mut value = serde_json::to_value(service).expect("a Service as JSON");
    if let (Some(pod), Some(extra)) = (value["spec"]["template"]["spec"].as_object_mut(), fields.as_object()) {
        pod.extend(extra.clone());
    }
    serde_json::from_value(value).expect("a Service")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_private_artifact_is_pulled_with_the_revisions_pull_secrets_and_refused_without_them() {
    use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
    use lampyr_testenv::registry::docker_config;
    const USER: &str = "puller";
    const PASSWORD: &str = "pull-Pa55word";
    let cluster = Cluster::shared();
    install_crds(cluster).await;
    let ns = cluster.namespace("rev-private").await;
    let client = cluster.client().await;
    let apis = Apis::new(&client, &ns);
    let (registry, ca) = TestRegistry::start_private(USER, PASSWORD);
    let host = registry.host();
    let artifact = push_hello_with_login(&registry, "team/hello", USER, PASSWORD, &ca).await;
    let config_json = String::from_utf8(docker_config(&host, USER, PASSWORD)).expect("UTF-8");
    let secret: Secret = serde_json::from_value(json!({
        "metadata": { "name": "regcred" }, "type": "kubernetes.io/dockerconfigjson",
        "stringData": { ".dockerconfigjson": config_json },
    }))
    .expect("a Secret");
    Api::<Secret>::namespaced(client.clone(), &ns).create(&Default::default(), &secret).await.expect("creating the pull Secret");
    let account: ServiceAccount =
        serde_json::from_value(json!({ "metadata": { "name": "builder" }, "imagePullSecrets": [{ "name": "regcred" }] }))
            .expect("a ServiceAccount");
    Api::<ServiceAccount>::namespaced(client.clone(), &ns)
        .create(&Default::default(), &account)
        .await
        .expect("creating the ServiceAccount");
    let mut config = config(&ns, &[]);
    config.registry_ca = Some(ca.into_bytes());
    let controller = Controller::start(client.clone(), config).await;

    // The Revision's pull Secret lets the controller pull; its Home names it for fiberd.
    let private = knative_service("private", &ns, Some(&artifact), json!({}));
    create_service(&client, &ns, &with_pod_fields(private, json!({ "imagePullSecrets": [{ "name": "regcred" }] }))).await;
    let home = wait_for(&apis.homes, "private-00001", "Home created", |_| true).await;
    assert_eq!(home.spec.image_pull_secrets, ["regcred"]);
    assert_eq!(home.spec.service_account_name, None);
    grant_ready(&client, &ns, keys::SHARED_GRANT_NAME).await;
    fiberd_reports(&client, &ns, "private-00001", "grant-0", true, 1, None).await;
    wait_for(&apis.revisions, "private-00001", "Ready", |r| ready_is(r, "True")).await;

    // Verified and cached by now, the artifact is still not given to a Revision without them.
    create_service(&client, &ns, &knative_service("anonymous", &ns, Some(&artifact), json!({}))).await;
    let ready = failed(&apis, "anonymous-00001").await;
    assert_eq!(ready.reason, revision::REASON_CONTAINER_MISSING);
    assert!(
        ready.message.contains(&host) && ready.message.contains("imagePullSecrets"),
        "names the registry and the fix: {}",
        ready.message
    );
    assert!(apis.homes.get_opt("anonymous-00001").await.expect("get").is_none(), "a refused Revision gets no Home");

    // A ServiceAccount's imagePullSecrets count, as for a Pod; the Home names the account.
    let account = knative_service("account", &ns, Some(&artifact), json!({}));
    create_service(&client, &ns, &with_pod_fields(account, json!({ "serviceAccountName": "builder" }))).await;
    let home = wait_for(&apis.homes, "account-00001", "Home created", |_| true).await;
    assert_eq!(home.spec.service_account_name.as_deref(), Some("builder"));
    assert!(home.spec.image_pull_secrets.is_empty());
    controller.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_image_map_gives_revisions_without_the_annotation_their_artifact_and_the_annotation_wins() {
    let cluster = Cluster::shared();
    install_crds(cluster).await;
    let ns = cluster.namespace("rev-images").await;
    let client = cluster.client().await;
    let apis = Apis::new(&client, &ns);
    let registry = TestRegistry::start();
    let mapped = push_hello(&registry, "conformance/helloworld").await;
    let annotated = push_hello(&registry, "lampyr/hello").await;
    assert_ne!(mapped, annotated, "two repositories, two references");
    let mut config = config(&ns, &[registry.host()]);
    // The test's own map, in its namespace (the default is lampyr-system/image-artifacts).
    config.image_map = (ns.clone(), "image-artifacts".into());
    let controller = Controller::start(client.clone(), config).await;
    let image = json!({ "image": "ko.local/helloworld:latest" });

    // No map yet: the Revision fails, naming the image and the map to add it to.
    create_service(&client, &ns, &knative_service("unmapped", &ns, None, image.clone())).await;
    let ready = failed(&apis, "unmapped-00001").await;
    assert_eq!(ready.reason, revision::REASON_CONTAINER_MISSING);
    for part in ["\"ko.local/helloworld:latest\"", &format!("image map {ns}/image-artifacts"), "docs/images.md"] {
        assert!(ready.message.contains(part), "names {part}: {}", ready.message);
    }

    // The operator maps the repository (and leaves one broken entry): the waiting Revision
    // takes the artifact without changing, and a new one does too.
    let configmaps: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), &ns);
    let map = json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "image-artifacts" },
        "data": {
            "helloworld": format!("image: ko.local/helloworld\nartifact: {mapped}\n"),
            "broken": "image: ko.local/broken\nartifact: ko.local/broken:latest\n",
        }
    });
    configmaps.create(&Default::default(), &serde_json::from_value(map).expect("ConfigMap")).await.expect("create the map");
    let rev = wait_for(&apis.revisions, "unmapped-00001", "the mapped artifact", |r| {
        revision_status(r).container_statuses.first().is_some_and(|c| c.image_digest == mapped)
    })
    .await;
    let audit = revision_status(&rev).annotations.get(keys::IMAGE_MAPPED).cloned().unwrap_or_default();
    assert!(
        audit.contains(&mapped) && audit.contains("entry \"helloworld\"") && audit.starts_with("ko.local/helloworld:latest"),
        "{audit}"
    );
    let home = wait_for(&apis.homes, "unmapped-00001", "Home", |_| true).await;
    assert_eq!(home.spec.artifact, mapped);
    create_service(&client, &ns, &knative_service("fresh", &ns, None, image.clone())).await;
    wait_for(&apis.homes, "fresh-00001", "Home with the mapped artifact", |h| h.spec.artifact == mapped).await;

    // The annotation, when present, wins over the map; nothing is recorded as mapped.
    create_service(&client, &ns, &knative_service("annotated", &ns, Some(&annotated), image.clone())).await;
    wait_for(&apis.homes, "annotated-00001", "Home with the annotation's artifact", |h| h.spec.artifact == annotated).await;
    let rev = apis.revisions.get("annotated-00001").await.expect("revision");
    assert!(!revision_status(&rev).annotations.contains_key(keys::IMAGE_MAPPED), "{:?}", revision_status(&rev).annotations);

    // It becomes Ready like any other Revision; the mapping is in its Events.
    grant_ready(&client, &ns, keys::SHARED_GRANT_NAME).await;
    fiberd_reports(&client, &ns, "unmapped-00001", "grant-0", true, 1, None).await;
    wait_for(&apis.revisions, "unmapped-00001", "Ready", |r| ready_is(r, "True")).await;
    let events = event_notes(&client, &ns, "ImageMapped").await;
    assert!(events.iter().any(|(object, note)| object == "unmapped-00001" && note.contains(&mapped)), "{events:?}");
    // The broken entry is reported on the ConfigMap, saying what is wrong.
    let warnings = event_notes(&client, &ns, "InvalidImageMapping").await;
    assert!(
        warnings
            .iter()
            .any(|(object, note)| object == "image-artifacts" && note.contains("\"broken\"") && note.contains("pinned by digest")),
        "{warnings:?}"
    );

    // An image the map does not name still fails clearly.
    create_service(&client, &ns, &knative_service("other", &ns, None, json!({ "image": "ko.local/other" }))).await;
    let ready = failed(&apis, "other-00001").await;
    assert!(ready.message.contains("\"ko.local/other\""), "{}", ready.message);
    controller.stop().await;
}

/// `(object name, note)` of the namespace's Events with `reason` (events.k8s.io), waiting for one.
async fn event_notes(client: &Client, ns: &str, reason: &str) -> Vec<(String, String)> {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), ns);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let list = events.list(&ListParams::default()).await.expect("list Events");
        let found: Vec<(String, String)> = list
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .map(|e| (e.regarding.and_then(|r| r.name).unwrap_or_default(), e.note.unwrap_or_default()))
            .collect();
        if !found.is_empty() || Instant::now() > deadline {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_template_every_instance_fails_to_load_makes_the_revision_fail() {
    let cluster = Cluster::shared();
    install_crds(cluster).await;
    let ns = cluster.namespace("rev-load").await;
    let client = cluster.client().await;
    let apis = Apis::new(&client, &ns);
    let registry = TestRegistry::start();
    let artifact = push_hello(&registry, "lampyr/hello").await;
    let controller = Controller::start(client.clone(), config(&ns, &[registry.host()])).await;
    create_service(&client, &ns, &knative_service("hello", &ns, Some(&artifact), json!({}))).await;
    wait_for(&apis.grants, keys::SHARED_GRANT_NAME, "shared grant", |_| true).await;
    grant_ready(&client, &ns, keys::SHARED_GRANT_NAME).await;
    fiberd_reports(&client, &ns, "hello-00001", "grant-0", false, 0, Some("platform mismatch: cpu_vendor")).await;
    let ready = failed(&apis, "hello-00001").await;
    assert_eq!(ready.reason, "TemplateLoadFailed");
    assert_eq!(ready.message, "grant-0: platform mismatch: cpu_vendor");
    controller.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_revision_no_fiberd_loads_within_its_progress_deadline_fails_until_one_does() {
    let cluster = Cluster::shared();
    install_crds(cluster).await;
    let ns = cluster.namespace("rev-deadline").await;
    let client = cluster.client().await;
    let apis = Apis::new(&client, &ns);
    let registry = TestRegistry::start();
    let artifact = push_hello(&registry, "lampyr/hello").await;
    let controller = Controller::start(client.clone(), config(&ns, &[registry.host()])).await;
    let mut service = knative_service("slow", &ns, Some(&artifact), json!({}));
    let annotations = service.spec.template.metadata.annotations.get_or_insert_default();
    annotations.insert(keys::PROGRESS_DEADLINE_ANNOTATION.into(), "3s".into());
    create_service(&client, &ns, &service).await;
    wait_for(&apis.grants, keys::SHARED_GRANT_NAME, "shared grant", |_| true).await;
    grant_ready(&client, &ns, keys::SHARED_GRANT_NAME).await;

    // The grant is Ready but no fiberd ever reports the template loaded.
    let ready = failed(&apis, "slow-00001").await;
    assert_eq!(ready.reason, revision::REASON_PROGRESS_DEADLINE_EXCEEDED);
    assert!(ready.message.contains("progress deadline of 3s"), "{}", ready.message);

    // A fiberd that loads it late still makes it Ready, as upstream recovers.
    fiberd_reports(&client, &ns, "slow-00001", "grant-0", true, 1, None).await;
    wait_for(&apis.revisions, "slow-00001", "Ready=True", |r| ready_is(r, "True")).await;
    controller.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_controller_never_touches_objects_it_does_not_own() {
    let cluster = Cluster::shared();
    install_crds(cluster).await;
    let ns = cluster.namespace("rev-owned").await;
    let client = cluster.client().await;
    let apis = Apis::new(&client, &ns);
    let registry = TestRegistry::start();
    let artifact = push_hello(&registry, "lampyr/hello").await;
    // Someone else's Service already has the Revision's name.
    let theirs: CoreService = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": { "name": "hello-00001", "namespace": ns },
        "spec": { "type": "ExternalName", "externalName": "elsewhere.example.com" }
    }))
    .expect("service");
    apis.services.patch("hello-00001", &PatchParams::apply("someone-else"), &Patch::Apply(&theirs)).await.expect("theirs");
    let controller = Controller::start(client.clone(), config(&ns, &[registry.host()])).await;
    create_service(&client, &ns, &knative_service("hello", &ns, Some(&artifact), json!({}))).await;
    let ready = failed(&apis, "hello-00001").await;
    assert_eq!(ready.reason, revision::REASON_NOT_OWNED);
    assert_eq!(ready.message, "There is an existing Service \"hello-00001\" that we do not own.");
    let svc = apis.services.get("hello-00001").await.expect("theirs");
    assert_eq!(svc.spec.expect("spec").external_name.as_deref(), Some("elsewhere.example.com"), "left alone");
    assert!(apis.homes.get_opt("hello-00001").await.expect("get").is_none());
    controller.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn restarting_the_controller_binary_mid_rollout_converges_without_duplicates() {
    let cluster = Cluster::shared();
    install_crds(cluster).await;
    let ns = cluster.namespace("rev-restart").await;
    let client = cluster.client().await;
    let apis = Apis::new(&client, &ns);
    let registry = TestRegistry::start();
    let artifact = push_hello(&registry, "lampyr/hello").await;
    let binary = lampyr_testenv::workspace_binary("lampyr-reconcile", "lampyr-controller");
    // The controller runs as its manifest's service account: the manifest's RBAC is what it may do.
    cluster.apply_files(&[lampyr_testenv::repo_root().join("config/lampyr-controller.yaml")]).await.expect("manifest");
    let kubeconfig = cluster.service_account_kubeconfig("lampyr-system", "lampyr-controller").await.expect("kubeconfig");
    let lease = format!("lampyr-controller-{ns}");
    let logs = scratch_dir("controller-logs", &ns);
    eprintln!("controller logs: {}", logs.display());
    let admin_port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("port");
        l.local_addr().expect("addr").port()
    };
    let start = |n: u32| {
        let mut command = std::process::Command::new(&binary);
        command
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["--namespace", &ns, "--lease-name", &lease, "--identity", &format!("controller-{n}")])
            .args(["--lease-duration", "3s", "--renew-deadline", "2s", "--retry-period", "500ms"])
            .args(["--grant-image", &grant_image(), "--helper-image", &helper_image()])
            .args(["--plain-http-registry", &registry.host()])
            .arg("--cache-dir")
            .arg(logs.join(format!("cache-{n}")))
            .args(["--metrics-addr", &format!("127.0.0.1:{admin_port}")])
            .env("RUST_LOG", "info,lampyr_reconcile=debug");
        lampyr_testenv::Process::spawn("lampyr-controller", command, &logs.join(format!("controller-{n}.log")))
            .expect("start lampyr-controller")
    };

    let mut first = start(1);
    create_service(&client, &ns, &knative_service("hello", &ns, Some(&artifact), json!({}))).await;
    wait_for(&apis.homes, "hello-00001", "Home created", |_| true).await;
    // Killed mid-rollout: no grace, the lease still held.
    first.kill();
    let change = json!({ "spec": { "template": { "spec": { "containers": [
        { "image": format!("registry.example.com/app@{DIGEST0}"), "env": [{ "name": "GREETING", "value": "hi" }] }
    ] } } } });
    apis.ksvcs.patch("hello", &PatchParams::default(), &Patch::Merge(&change)).await.expect("update");
    wait_for(&apis.revisions, "hello-00002", "second Revision", |_| true).await;

    let mut second = start(2);
    let took_over = Instant::now();
    wait_for(&apis.homes, "hello-00002", "Home of 00002 (after the lease expired)", |_| true).await;
    let takeover = took_over.elapsed();
    for rev in ["hello-00001", "hello-00002"] {
        wait_for(&apis.grants, keys::SHARED_GRANT_NAME, "shared grant", |_| true).await;
        grant_ready(&client, &ns, keys::SHARED_GRANT_NAME).await;
        fiberd_reports(&client, &ns, rev, "grant-0", true, 0, None).await;
        wait_for(&apis.revisions, rev, "Ready", |r| ready_is(r, "True")).await;
    }
    wait_for(&apis.configurations, "hello", "latest ready 00002", |c| {
        c.status.as_ref().is_some_and(|s| s.latest_ready_revision_name == "hello-00002")
    })
    .await;

    // Exactly one of each child per Revision, each with one lampyr-controller apply entry.
    let names = |list: Vec<String>| -> Vec<String> {
        let mut l = list;
        l.sort();
        l
    };
    let lp = ListParams::default();
    let homes = apis.homes.list(&lp).await.expect("homes");
    assert_eq!(names(homes.items.iter().filter_map(|h| h.metadata.name.clone()).collect()), ["hello-00001", "hello-00002"]);
    let grants = apis.grants.list(&lp).await.expect("grants");
    assert_eq!(names(grants.items.iter().filter_map(|g| g.metadata.name.clone()).collect()), [keys::SHARED_GRANT_NAME], "one shared grant");
    let ours = ListParams::default().labels("app.kubernetes.io/managed-by=lampyr-controller");
    let services = apis.services.list(&ours).await.expect("services");
    assert_eq!(names(services.items.iter().filter_map(|s| s.metadata.name.clone()).collect()), ["hello-00001", "hello-00002"]);
    for h in &homes.items {
        let spec_entries = h
            .metadata
            .managed_fields
            .iter()
            .flatten()
            .filter(|m| m.manager.as_deref() == Some(FIELD_MANAGER) && m.subresource.is_none())
            .count();
        assert_eq!(spec_entries, 1, "{:?}", h.metadata.managed_fields);
    }

    // The admin server of the running process.
    let metrics = http_get(admin_port, "/metrics").await;
    assert!(metrics.contains("lampyr_controller_reconciles_total{result=\"success\"}"), "{metrics}");
    assert!(metrics.contains("lampyr_controller_leader 1"), "{metrics}");
    assert!(http_get(admin_port, "/readyz").await.starts_with("HTTP/1.1 200"));
    eprintln!("killed controller → successor reconciling (lease 3s): {takeover:?}");
    second.check_running().expect("still running");
    second.kill();
}

async fn http_get(port: u16, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.expect("connect");
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes()).await.expect("write");
    let mut out = String::new();
    s.read_to_string(&mut out).await.expect("read");
    out
}
