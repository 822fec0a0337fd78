//! `examples/embed.rs` against the real API server: Lampyr's Revision controller,
//! embedded beside a controller of the host's own, brings a Revision to Ready (with a
//! simulated fiberd, as `tests/revision.rs`), the host's controller does its own work,
//! both record metrics in the host's registry, and the host's shutdown stops both.

mod support;

#[path = "../examples/embed.rs"]
mod embed;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use lampyr_api::conditions::CONDITION_READY;
use lampyr_api::{KnativeStatus, Revision, keys};
use lampyr_testenv::{Cluster, TestRegistry};
use prometheus_client::registry::Registry;
use serde_json::json;
use support::*;

#[tokio::test(flavor = "multi_thread")]
async fn an_embedded_reconciler_runs_a_revision_to_ready_beside_the_hosts_controller() {
    let cluster = Cluster::shared();
    install_crds(cluster).await;
    let ns = cluster.namespace("embed").await;
    let client = cluster.client().await;
    let registry = TestRegistry::start();
    let artifact = push_hello(&registry, "lampyr/hello").await;

    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let host = {
        let (client, ns, config) = (client.clone(), ns.clone(), config(&ns, &[registry.host()]));
        tokio::spawn(async move {
            let mut metrics = Registry::default();
            let shutdown = async move {
                let _ = stopped.await;
            };
            let result = embed::run(client, config, Some(ns), &mut metrics, shutdown).await;
            (result, metrics)
        })
    };

    // The host's controller greets a labelled ConfigMap.
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("hi".into());
    cm.metadata.labels = Some(BTreeMap::from([(embed::GREET_LABEL.to_string(), "yes".to_string())]));
    config_maps.create(&PostParams::default(), &cm).await.expect("a ConfigMap to greet");
    wait_for(&config_maps, "hi", "greeted by the host", |cm| {
        cm.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(embed::GREETED_ANNOTATION))
    })
    .await;

    // Lampyr's controller, in the same process, runs a Revision to Ready.
    create_service(&client, &ns, &knative_service("hello", &ns, Some(&artifact), json!({}))).await;
    let homes: Api<lampyr_api::Home> = Api::namespaced(client.clone(), &ns);
    wait_for(&homes, "hello-00001", "Home created", |_| true).await;
    grant_ready(&client, &ns, keys::SHARED_GRANT_NAME).await;
    fiberd_reports(&client, &ns, "hello-00001", "grant-0", true, 0, None).await;
    let revisions: Api<Revision> = Api::namespaced(client.clone(), &ns);
    wait_for(&revisions, "hello-00001", "Ready", |r| {
        r.status.as_ref().and_then(|s| s.get_condition(CONDITION_READY)).is_some_and(|c| c.is_true())
    })
    .await;

    // The host's shutdown stops both controllers; the metrics are in the host's registry.
    stop.send(()).expect("the host is running");
    let (result, metrics) = tokio::time::timeout(Duration::from_secs(60), host)
        .await
        .expect("both controllers stop on the host's signal")
        .expect("the host task");
    result.expect("the embedded controller stopped cleanly");
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &metrics).expect("metrics encode");
    assert!(text.contains("host_greetings_total 1"), "the host's own metric:\n{text}");
    assert!(text.contains("lampyr_controller_reconciles_total"), "Lampyr's metrics in the host's registry:\n{text}");
}
