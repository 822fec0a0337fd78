//! Restarts of lampyr-controller and fiber-router mid-rollout, end to end.
//! Its own test binary, so its own stack: killing the shared router would fail
//! other tests' requests in flight.

use std::time::Duration;

use kube::Api;
use kube::api::{Patch, PatchParams};
use lampyr_api::Service;
use lampyr_testenv::{LampyrStack, Serving, knative_service, require_kvm};
use serde_json::json;

const POLL: Duration = Duration::from_millis(200);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarts_of_the_controller_and_the_router_converge() {
    require_kvm();
    let stack = LampyrStack::shared();
    let ns = stack.cluster.namespace("e2e-restart").await;
    let artifact = stack.push_example("hello").await;
    let services: Api<Service> = Api::namespaced(stack.cluster.client().await, &ns);
    stack.kubectl_apply(&knative_service(&ns, "restart", &artifact, "before", None));
    // The controller dies mid-rollout and comes back.
    stack.restart_controller().expect("restart lampyr-controller");
    let host = stack.ready_host(&services, "restart").await;
    assert_eq!(stack.answer(&host, "/").await, "Hello before!\n");

    let change = json!({ "spec": { "template": { "spec": { "containers": [
        { "image": artifact, "env": [{ "name": "TARGET", "value": "after" }] }] } } } });
    services.patch("restart", &PatchParams::default(), &Patch::Merge(&change)).await.expect("update");
    stack.restart_controller().expect("restart lampyr-controller");
    stack.restart_router().expect("restart fiber-router");
    stack.ready_host(&services, "restart").await;
    stack
        .poll("the router serving revision 2 after its restart", POLL, async || {
            (stack.get(&host, "/").await.ok()? == (200, "Hello after!\n".into())).then_some(())
        })
        .await;

    // Exactly one Home and one grant per Revision, whatever the restarts did.
    let client = stack.cluster.client().await;
    let homes: Api<lampyr_api::Home> = Api::namespaced(client.clone(), &ns);
    let names: Vec<String> =
        homes.list(&Default::default()).await.expect("homes").items.into_iter().filter_map(|h| h.metadata.name).collect();
    assert_eq!(names, ["restart-00001", "restart-00002"]);
}
