//! Garbage collection of old Revisions per `config-gc`, end to end: upstream's
//! GC reconciler deletes a Revision no Route references, and everything Lampyr
//! made for it (its Home, the ExternalName Service) goes with it through owner
//! references, while the namespace's shared grant and its Pod stay. Its own test binary, so its own
//! cluster: the GC settings here would collect other tests' Revisions.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use lampyr_api::{CapacityGrant, Home, Revision, Service};
use lampyr_testenv::cluster::SYSTEM_NAMESPACE;
use lampyr_testenv::{LampyrStack, Serving, knative_service, require_kvm};
use serde_json::json;

const POLL: Duration = Duration::from_millis(200);

/// Names of the `K`s in `namespace`.
async fn names<K>(api: &Api<K>) -> Vec<String>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let listed = api.list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default();
    let mut names: Vec<String> = listed.iter().filter_map(|o| o.meta().name.clone()).collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revision_no_route_references_is_collected_with_everything_lampyr_made_for_it() {
    require_kvm();
    let stack = LampyrStack::shared();
    let client = stack.cluster.client().await;
    // Collect every non-active Revision at once (upstream's documented example).
    let gc = json!({ "data": {
        "min-non-active-revisions": "0", "max-non-active-revisions": "0",
        "retain-since-create-time": "disabled", "retain-since-last-active-time": "disabled",
    } });
    Api::<ConfigMap>::namespaced(client.clone(), SYSTEM_NAMESPACE)
        .patch("config-gc", &PatchParams::default(), &Patch::Merge(&gc))
        .await
        .expect("configure config-gc");

    let ns = stack.cluster.namespace("e2e-gc").await;
    let artifact = stack.push_example("hello").await;
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    stack.kubectl_apply(&knative_service(&ns, "old", &artifact, "one", None));
    let host = stack.ready_host(&services, "old").await;
    assert_eq!(stack.answer(&host, "/").await, "Hello one!\n");
    let homes: Api<Home> = Api::namespaced(client.clone(), &ns);
    assert_eq!(names(&homes).await, ["old-00001"]);

    stack.kubectl_apply(&knative_service(&ns, "old", &artifact, "two", None));
    stack.ready_host(&services, "old").await;
    let revisions: Api<Revision> = Api::namespaced(client.clone(), &ns);
    stack.poll("old-00001 collected", POLL, async || (names(&revisions).await == ["old-00002"]).then_some(())).await;

    let grants: Api<CapacityGrant> = Api::namespaced(client.clone(), &ns);
    let externals: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    stack
        .poll("old-00001's Home and Service collected; the shared grant and its Pod stay", POLL, async || {
            let pods = names(&pods).await;
            let gone = names(&homes).await == ["old-00002"]
                && names(&grants).await == [lampyr_api::keys::SHARED_GRANT_NAME]
                && !names(&externals).await.contains(&"old-00001".to_string())
                && pods == [format!("{}-0", lampyr_api::keys::SHARED_GRANT_NAME)];
            gone.then_some(())
        })
        .await;
    assert_eq!(stack.answer(&host, "/").await, "Hello two!\n", "the Service serves its latest revision");

    // A Revision annotated no-gc stays, as upstream documents, while the
    // unannotated one after it is collected.
    let mut keep = knative_service(&ns, "kept", &artifact, "one", None);
    keep["spec"]["template"]["metadata"]["annotations"]["serving.knative.dev/no-gc"] = json!("true");
    stack.kubectl_apply(&keep);
    stack.ready_host(&services, "kept").await;
    for target in ["two", "three"] {
        stack.kubectl_apply(&knative_service(&ns, "kept", &artifact, target, None));
        stack.ready_host(&services, "kept").await;
    }
    stack
        .poll("kept-00002 collected, kept-00001 kept", POLL, async || {
            let kept: Vec<String> = names(&revisions).await.into_iter().filter(|n| n.starts_with("kept-")).collect();
            (kept == ["kept-00001", "kept-00003"]).then_some(())
        })
        .await;
}
