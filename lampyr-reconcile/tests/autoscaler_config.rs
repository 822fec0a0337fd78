//! Knative's `config-autoscaler` governs running Revisions end to end: a
//! change reaches the Home of a Revision that is already serving, and fiberd's
//! behaviour, without a new Revision and without reloading the template; an
//! invalid change is refused with an Event and the last valid settings stay.
//! Its own test binary, so its own cluster: it changes cluster-wide settings.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use lampyr_api::policy::ClusterScaling;
use lampyr_api::{Configuration, Home, HomeInstance, Revision, Service};
use lampyr_testenv::stack::metric_samples;
use lampyr_testenv::{LampyrStack, Serving, knative_service, require_kvm};
use serde_json::json;

const POLL: Duration = Duration::from_millis(200);
const REVISION: &str = "tuned-00001";

/// Merges `patch` into `knative-serving/config-autoscaler`.
async fn configure(configmaps: &Api<ConfigMap>, patch: serde_json::Value) {
    configmaps
        .patch("config-autoscaler", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("patching config-autoscaler with {patch}: {e}"));
}

/// The Revision's Home once `check` holds for its cluster settings and the
/// fiberd instance serving it reports its current generation loaded.
async fn home_applied(
    stack: &LampyrStack,
    homes: &Api<Home>,
    what: &str,
    check: impl Fn(&ClusterScaling, &HomeInstance) -> bool,
) -> (Home, HomeInstance) {
    stack
        .poll(what, POLL, async || {
            let home = homes.get(REVISION).await.ok()?;
            let cluster = home.spec.policy.scaling.cluster.clone()?;
            let generation = home.metadata.generation?;
            let instance = home.status.as_ref()?.instances.first()?.clone();
            let current = instance.loaded && instance.observed_generation == generation;
            (current && check(&cluster, &instance)).then_some((home, instance))
        })
        .await
}

/// Fibers started from the Revision's template by fiberd instance `pod`, from its `/metrics`.
async fn fibers_started(stack: &LampyrStack, pod: &str) -> f64 {
    let port = stack.pods.ports().get(pod).copied().unwrap_or_else(|| panic!("no port for grant Pod {pod}"));
    let text = reqwest::get(format!("http://127.0.0.1:{port}/metrics"))
        .await
        .and_then(|r| r.error_for_status())
        .unwrap_or_else(|e| panic!("fiberd {pod} /metrics: {e}"))
        .text()
        .await
        .expect("a metrics body");
    let label = format!("revision=\"{REVISION}\"");
    metric_samples(&text, "lampyr_fiber_starts_total").filter(|(labels, _)| labels.contains(&label)).map(|(_, v)| v).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_autoscaler_governs_a_running_revision() {
    require_kvm();
    let stack = LampyrStack::shared();
    let client = stack.cluster.client().await;
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "knative-serving");
    // The cluster keeps idle Revisions warm.
    configure(&configmaps, json!({ "data": { "enable-scale-to-zero": "false" } })).await;

    let ns = stack.cluster.namespace("cfg-autoscaler").await;
    let artifact = stack.push_example("hello").await;
    stack.kubectl_apply(&knative_service(&ns, "tuned", &artifact, "tuned", None));
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let host = stack.ready_host(&services, "tuned").await;
    assert_eq!(stack.answer(&host, "/").await, "Hello tuned!\n");

    let homes: Api<Home> = Api::namespaced(client.clone(), &ns);
    let (before, instance) = home_applied(stack, &homes, "fiberd serving the Revision warm, scale to zero off", |c, i| {
        !c.enable_scale_to_zero && i.warm_fibers >= 1
    })
    .await;
    assert_eq!(before.spec.policy.scaling.cluster.as_ref().map(|c| c.scale_to_zero_grace_period), Some(Duration::from_secs(30)));
    let pod = format!("{ns}/{}", instance.name);
    let started = fibers_started(stack, &pod).await;
    assert!(started >= 1.0, "the template's first fiber was started: {started}");
    let configurations: Api<Configuration> = Api::namespaced(client.clone(), &ns);
    let configuration_generation = configurations.get("tuned").await.expect("configuration").metadata.generation;

    // The operator turns scale to zero on, with a one-second grace period.
    configure(&configmaps, json!({ "data": { "enable-scale-to-zero": "true", "scale-to-zero-grace-period": "1s" } })).await;
    let (after, _) = home_applied(stack, &homes, "the new settings applied by fiberd", |c, _| {
        c.enable_scale_to_zero && c.scale_to_zero_grace_period == Duration::from_secs(1)
    })
    .await;
    assert!(after.metadata.generation > before.metadata.generation, "the Home's spec changed");
    assert_eq!(after.metadata.uid, before.metadata.uid, "the same Home");
    assert_eq!(
        (after.spec.artifact.as_str(), &after.spec.policy.env, after.spec.policy.scaling.min_scale),
        (before.spec.artifact.as_str(), &before.spec.policy.env, before.spec.policy.scaling.min_scale),
        "only the cluster's settings changed"
    );
    // Applied to the loaded pool: no new pool, so no fiber started from the template again.
    assert_eq!(fibers_started(stack, &pod).await, started, "the template was not loaded again");
    // No new Revision: the same one, the Configuration untouched.
    let revisions: Api<Revision> = Api::namespaced(client.clone(), &ns);
    let names: Vec<String> =
        revisions.list(&ListParams::default()).await.expect("revisions").items.into_iter().filter_map(|r| r.metadata.name).collect();
    assert_eq!(names, [REVISION]);
    assert_eq!(configurations.get("tuned").await.expect("configuration").metadata.generation, configuration_generation);
    // fiberd now behaves as configured: the idle Revision drops its last fiber
    // (which it never did while scale to zero was off).
    home_applied(stack, &homes, "scaled to zero", |_, i| i.warm_fibers == 0).await;
    assert_eq!(stack.answer(&host, "/").await, "Hello tuned!\n", "and wakes on the next request");

    // An invalid change (the upstream webhook validates only labelled
    // ConfigMaps: the label goes first) is refused: an Event on the ConfigMap,
    // and the last valid settings stay in every Home.
    configure(&configmaps, json!({ "metadata": { "labels": { "app.kubernetes.io/name": null } } })).await;
    configure(&configmaps, json!({ "data": { "max-scale-up-rate": "fast" } })).await;
    let events: Api<Event> = Api::namespaced(client.clone(), "knative-serving");
    let event = stack
        .poll("an Event on the invalid config-autoscaler", POLL, async || {
            let list = events.list(&ListParams::default()).await.ok()?;
            list.items.into_iter().find(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("config-autoscaler")
                    && e.reason.as_deref() == Some("InvalidConfiguration")
            })
        })
        .await;
    let note = event.note.unwrap_or_default();
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert!(note.contains("max-scale-up-rate: \"fast\" is not a number"), "{note}");
    assert!(note.contains("keeps the last valid autoscaler settings"), "{note}");
    let kept = homes.get(REVISION).await.expect("home");
    assert_eq!(kept.spec.policy.scaling.cluster, after.spec.policy.scaling.cluster, "the last valid settings");
    assert!(kept.metadata.generation >= after.metadata.generation);

    // Fixed: its settings apply again.
    configure(
        &configmaps,
        json!({ "data": { "max-scale-up-rate": "10" }, "metadata": { "labels": { "app.kubernetes.io/name": "knative-serving" } } }),
    )
    .await;
    home_applied(stack, &homes, "the fixed settings applied", |c, _| c.max_scale_up_rate == 10.0).await;
}
