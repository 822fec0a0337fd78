//! Lampyr end to end in the cluster test environment: Knative Services applied
//! with kubectl are reconciled by upstream Knative and Lampyr's controllers,
//! served by fiberd (standing in for grant Pods) through fiber-router's own
//! KIngress class. Real API server, real registry, real fibers under /dev/kvm.
//! A grant shrinking by an instance drains it without a failed request.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Api;
use kube::api::{Patch, PatchParams};
use lampyr_api::conditions::{CONDITION_READY, ConditionStatus, KnativeStatus, revision};
use lampyr_api::{CapacityGrant, Home, Revision, Service, keys};
use lampyr_testenv::{LampyrStack, Serving, knative_service, require_kvm};
use serde_json::json;

fn stack() -> &'static LampyrStack {
    require_kvm();
    LampyrStack::shared()
}

/// How often a test polls for a state it waits for.
const POLL: Duration = Duration::from_millis(200);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_knative_service_applied_with_kubectl_is_served_from_fibers() {
    let stack = stack();
    let ns = stack.cluster.namespace("e2e-hello").await;
    let artifact = stack.push_example("hello").await;
    stack.kubectl_apply(&knative_service(&ns, "hello", &artifact, "Lampyr", None));

    let services: Api<Service> = Api::namespaced(stack.cluster.client().await, &ns);
    let host = stack.ready_host(&services, "hello").await;
    assert_eq!(host, format!("hello.{ns}.svc.cluster.local"));
    assert_eq!(stack.answer(&host, "/").await, "Hello Lampyr!\n");

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
    stack.kubectl_apply(&knative_service(&ns, "split", &artifact, "one", None));
    let host = stack.ready_host(&services, "split").await;
    assert_eq!(stack.answer(&host, "/").await, "Hello one!\n");

    // A new template makes revision 2, which latestRevision follows.
    stack.kubectl_apply(&knative_service(&ns, "split", &artifact, "two", None));
    stack.ready_host(&services, "split").await;
    stack
        .poll("traffic on revision 2", POLL, async || (stack.get(&host, "/").await.ok()? == (200, "Hello two!\n".into())).then_some(()))
        .await;

    // Half and half, each revision also reachable at its tag's host.
    let traffic = json!([
        { "revisionName": "split-00001", "percent": 50, "tag": "first" },
        { "revisionName": "split-00002", "percent": 50, "tag": "second" },
    ]);
    stack.kubectl_apply(&knative_service(&ns, "split", &artifact, "two", Some(traffic)));
    stack.ready_host(&services, "split").await;
    let tag_host = |tag: &str| format!("{tag}-split.{ns}.svc.cluster.local");
    assert_eq!(stack.answer(&tag_host("first"), "/").await, "Hello one!\n");
    assert_eq!(stack.answer(&tag_host("second"), "/").await, "Hello two!\n");

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
    // The operator's way to a shorter grace period (upstream's default is 30s):
    // Knative's config-autoscaler, which lampyr-controller carries to fiberd.
    let grace = json!({ "data": { "scale-to-zero-grace-period": "5s" } });
    Api::<ConfigMap>::namespaced(stack.cluster.client().await, "knative-serving")
        .patch("config-autoscaler", &PatchParams::default(), &Patch::Merge(&grace))
        .await
        .expect("shorten the grace period in config-autoscaler");
    let ns = stack.cluster.namespace("e2e-zero").await;
    let artifact = stack.push_example("hello").await;
    stack.kubectl_apply(&knative_service(&ns, "zero", &artifact, "zero", None));
    let services: Api<Service> = Api::namespaced(stack.cluster.client().await, &ns);
    let host = stack.ready_host(&services, "zero").await;
    assert_eq!(stack.answer(&host, "/").await, "Hello zero!\n");

    let revisions: Api<Revision> = Api::namespaced(stack.cluster.client().await, &ns);
    let active = |wanted: ConditionStatus| {
        let revisions = revisions.clone();
        async move || {
            let status = revisions.get("zero-00001").await.ok()?.status?;
            let active = status.get_condition(revision::ACTIVE)?.clone();
            (active.status == wanted).then_some(active)
        }
    };
    let idle = stack.poll("Active=False after the grace period", POLL, active(ConditionStatus::False)).await;
    assert_eq!(idle.reason, revision::REASON_NO_TRAFFIC);
    assert_eq!(stack.answer(&host, "/").await, "Hello zero!\n", "the next request wakes it");
    stack.poll("Active=True again", POLL, active(ConditionStatus::True)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_services_fail_with_a_clear_message_and_others_keep_serving() {
    let stack = stack();
    let ns = stack.cluster.namespace("e2e-bad").await;
    let artifact = stack.push_example("hello").await;
    let services: Api<Service> = Api::namespaced(stack.cluster.client().await, &ns);
    stack.kubectl_apply(&knative_service(&ns, "good", &artifact, "good", None));
    let good = stack.ready_host(&services, "good").await;

    let (repo, _) = artifact.split_once('@').expect("pinned");
    let wrong = format!("{repo}@sha256:{}", "e".repeat(64));
    let unpinned = format!("{repo}:latest");
    for (name, reference) in [("unpinned", unpinned.as_str()), ("wrong-digest", wrong.as_str())] {
        stack.kubectl_apply(&knative_service(&ns, name, reference, name, None));
    }
    let mut unsupported = knative_service(&ns, "unsupported", &artifact, "x", None);
    unsupported["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] = json!([{ "name": "data", "mountPath": "/data" }]);
    unsupported["spec"]["template"]["spec"]["volumes"] = json!([{ "name": "data", "emptyDir": {} }]);
    stack.kubectl_apply(&unsupported);

    let revisions: Api<Revision> = Api::namespaced(stack.cluster.client().await, &ns);
    for (name, expected) in [("unpinned", "digest"), ("wrong-digest", "sha256:eeee"), ("unsupported", "volumes")] {
        let message = stack
            .poll(&format!("{name}: Ready=False"), POLL, async || {
                let status = revisions.get(&format!("{name}-00001")).await.ok()?.status?;
                let ready = status.get_condition(CONDITION_READY)?;
                (ready.status == ConditionStatus::False).then(|| ready.message.clone())
            })
            .await;
        assert!(message.contains(expected), "{name}: {message:?} does not name {expected:?}");
    }
    assert_eq!(stack.answer(&good, "/").await, "Hello good!\n", "the good Service keeps serving");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_domain_mapping_answers_on_its_domain() {
    let stack = stack();
    let ns = stack.cluster.namespace("e2e-domain").await;
    let artifact = stack.push_example("hello").await;
    let services: Api<Service> = Api::namespaced(stack.cluster.client().await, &ns);
    stack.kubectl_apply(&knative_service(&ns, "mapped", &artifact, "mapped", None));
    stack.ready_host(&services, "mapped").await;

    // The domain is claimed for the namespace, as an operator does when
    // claims are not created automatically (upstream's default).
    let domain = format!("{ns}.apps.example.com");
    stack.kubectl_apply(&json!({
        "apiVersion": "networking.internal.knative.dev/v1alpha1", "kind": "ClusterDomainClaim",
        "metadata": { "name": domain }, "spec": { "namespace": ns },
    }));
    stack.kubectl_apply(&json!({
        "apiVersion": "serving.knative.dev/v1beta1", "kind": "DomainMapping",
        "metadata": { "name": domain, "namespace": ns },
        "spec": { "ref": { "apiVersion": "serving.knative.dev/v1", "kind": "Service", "name": "mapped" } },
    }));
    let mappings: Api<lampyr_api::DomainMapping> = Api::namespaced(stack.cluster.client().await, &ns);
    let url = stack
        .poll("DomainMapping Ready", POLL, async || {
            let mapping = mappings.get(&domain).await.ok()?;
            let status = mapping.status?;
            status.is_ready(mapping.metadata.generation).then_some(status.url)
        })
        .await;
    assert_eq!(url.as_deref(), Some(format!("http://{domain}").as_str()));
    assert_eq!(stack.answer(&domain, "/").await, "Hello mapped!\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_fiberd_fails_in_flight_requests_fast_and_serving_recovers() {
    let stack = stack();
    let ns = stack.cluster.namespace("e2e-crash").await;
    let artifact = stack.push_test_guest("spin").await;
    let services: Api<Service> = Api::namespaced(stack.cluster.client().await, &ns);
    let mut spin = knative_service(&ns, "spin", &artifact, "spin", None);
    let timeout_seconds = 100;
    spin["spec"]["template"]["spec"]["timeoutSeconds"] = json!(timeout_seconds);
    stack.kubectl_apply(&spin);
    let host = stack.ready_host(&services, "spin").await;
    assert_eq!(stack.answer(&host, "/").await, "not looping\n");

    let pods: Vec<String> = stack.pods.ports().into_keys().filter(|pod| pod.starts_with(&format!("{ns}/"))).collect();
    assert!(!pods.is_empty(), "the Revision's grant Pods run fiberd: {:?}", stack.pods.ports());

    // A request the guest never finishes is in flight when fiberd dies.
    let in_flight = tokio::spawn({
        let host = host.clone();
        async move {
            let sent = Instant::now();
            (stack.get(&host, "/loop").await, sent.elapsed())
        }
    });
    stack
        .poll("the looping request executing in a fiber", POLL, async || {
            let mut executing = 0;
            for pod in &pods {
                executing += stack.fibers_in_flight(pod).await;
            }
            (executing > 0).then_some(())
        })
        .await;
    assert!(!in_flight.is_finished(), "the looping request is still running before the crash");
    for pod in &pods {
        assert!(stack.pods.kill(pod), "kill {pod}");
    }
    let (outcome, took) = in_flight.await.expect("the request task");
    let (status, body) = outcome.expect("the router answers a request whose fiberd died");
    assert_eq!(status, 502, "an in-flight request to a dead fiberd fails with 502: {body}");
    assert!(
        took < Duration::from_secs(timeout_seconds),
        "it failed when fiberd died, not at the Revision's {timeout_seconds} s timeout ({took:?})"
    );

    // New requests are served again once the grant Pod's fiberd is back.
    assert_eq!(stack.answer(&host, "/").await, "not looping\n");
    for pod in &pods {
        assert!(stack.pods.restarts(pod).unwrap_or(0) >= 1, "{pod} was started again");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_shrinks_without_restarting_the_instance_that_stays_or_failing_a_request() {
    let stack = stack();
    let ns = stack.cluster.namespace("e2e-drain").await;
    let artifact = stack.push_example("hello").await;
    let client = stack.cluster.client().await;
    let (services, homes) = (Api::<Service>::namespaced(client.clone(), &ns), Api::<Home>::namespaced(client.clone(), &ns));
    let (grants, pods) = (Api::<CapacityGrant>::namespaced(client.clone(), &ns), Api::<Pod>::namespaced(client, &ns));

    // An operator's grant of two instances, 4 slots and 1 GiB each; a Revision keeping 2 fibers warm on it.
    let grant = |instances: i64| {
        json!({
            "apiVersion": "fiber.lampyr.dev/v1alpha1", "kind": "CapacityGrant",
            "metadata": { "name": "pair", "namespace": ns },
            "spec": { "fiberSlots": 4 * instances, "memoryBytes": instances << 30, "instances": instances,
                      "grantImage": lampyr_testenv::stack::GRANT_IMAGE, "helperImage": lampyr_testenv::stack::HELPER_IMAGE },
        })
    };
    let apply = PatchParams::apply("e2e-operator");
    grants.patch("pair", &apply, &Patch::Apply(grant(2))).await.expect("the operator's grant");
    let mut service = knative_service(&ns, "pair", &artifact, "pair", None);
    service["spec"]["template"]["metadata"]["annotations"][keys::CAPACITY_GRANT_ANNOTATION] = json!("pair");
    service["spec"]["template"]["metadata"]["annotations"]["autoscaling.knative.dev/min-scale"] = json!("2");
    stack.kubectl_apply(&service);
    let host = stack.ready_host(&services, "pair").await;
    let logs =
        || ["pair-0", "pair-1"].map(|pod| format!("--- {pod}:\n{}", stack.cluster.log_tail(&format!("fiberd-{ns}_{pod}"), 25))).join("\n");
    let warm_on = async |instances: &[&str]| {
        let warm = stack.poll("the Home's instances", POLL, async || {
            let home = homes.get("pair-00001").await.ok()?;
            let entries = home.status?.instances;
            let mut names: Vec<&str> = entries.iter().filter(|e| e.loaded && e.warm_fibers > 0).map(|e| e.name.as_str()).collect();
            names.sort_unstable();
            (names == instances && entries.len() == instances.len()).then_some(())
        });
        let reached = tokio::time::timeout(Duration::from_secs(90), warm).await;
        assert!(reached.is_ok(), "pair-00001 not warm on exactly {instances:?} within 90 s; the grant Pods' logs:\n{}", logs());
    };
    warm_on(&["pair-0", "pair-1"]).await;
    let staying = pods.get("pair-0").await.expect("instance 0").metadata.uid;

    // Requests keep flowing through fiber-router while the grant goes down to one instance.
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..2)
        .map(|_| {
            let (stop, host) = (Arc::clone(&stop), host.clone());
            tokio::spawn(async move {
                let mut answers = BTreeMap::<String, u32>::new();
                while !stop.load(Ordering::Relaxed) {
                    let answer = match stack.get(&host, "/").await {
                        Ok((200, body)) if body == "Hello pair!\n" => "200".to_string(),
                        Ok((status, body)) => format!("{status} {body}"),
                        Err(e) => format!("error: {e}"),
                    };
                    *answers.entry(answer).or_default() += 1;
                }
                answers
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    grants.patch("pair", &apply, &Patch::Apply(grant(1))).await.expect("shrinking the grant");
    stack.poll("instance 1's Pod gone", POLL, async || pods.get_opt("pair-1").await.ok()?.is_none().then_some(())).await;
    warm_on(&["pair-0"]).await;
    let last_seen = std::sync::Mutex::new(None);
    let whole = stack.poll("instance 0 holding the whole min-scale", POLL, async || {
        let entries = homes.get("pair-00001").await.ok()?.status?.instances;
        let entry = entries.into_iter().find(|e| e.name == "pair-0")?;
        // Both slots of min-scale reserved; the requests still flowing may keep more than 2 warm.
        let held = entry.warm_fibers >= 2 && entry.reserved_slots == 2;
        *last_seen.lock().expect("last seen") = Some(entry);
        held.then_some(())
    });
    let held = tokio::time::timeout(Duration::from_secs(60), whole).await;
    let last = last_seen.lock().expect("last seen").take();
    assert!(held.is_ok(), "instance 0 never took the whole min-scale (its entry last seen: {last:?}); the grant Pods' logs:\n{}", logs());
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);

    let mut answers = BTreeMap::<String, u32>::new();
    for client in clients {
        for (answer, count) in client.await.expect("a client task") {
            *answers.entry(answer).or_default() += count;
        }
    }
    eprintln!("answers while draining: {answers:?}");
    assert_eq!(
        answers.keys().collect::<Vec<_>>(),
        ["200"],
        "every request answered while instance 1 drained: {answers:?}; fiber-router's log:\n{}\n{}",
        stack.log_tail("fiber-router", 60),
        logs()
    );
    assert!(answers["200"] >= 20, "requests flowed throughout: {answers:?}");
    assert_eq!(pods.get("pair-0").await.expect("instance 0").metadata.uid, staying, "the instance that stays was not restarted");
}

/// Every status a watch showed for the Revisions and Homes of a namespace, in order,
/// each differing from the one before it (a write that changed nothing is no event).
struct StatusWrites {
    seen: Arc<std::sync::Mutex<Vec<StatusSeen>>>,
    watches: Vec<tokio::task::JoinHandle<()>>,
}

/// One status as a watch showed it.
struct StatusSeen {
    /// `Revision/name` or `Home/name`.
    object: String,
    /// The field managers that wrote the status last.
    writer: String,
    status: serde_json::Value,
    /// Whether it differs from the one before only in `lastTransitionTime`s.
    times_only: bool,
}

impl StatusWrites {
    /// Watches namespace `ns`; returns once both watches have listed it.
    async fn watch(client: kube::Client, ns: &str) -> Self {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (revisions_listed, homes_listed) = (tokio::sync::oneshot::channel(), tokio::sync::oneshot::channel());
        let watches = vec![
            tokio::spawn(record::<Revision>(Api::namespaced(client.clone(), ns), "Revision", seen.clone(), revisions_listed.0)),
            tokio::spawn(record::<Home>(Api::namespaced(client, ns), "Home", seen.clone(), homes_listed.0)),
        ];
        let _ = tokio::join!(revisions_listed.1, homes_listed.1);
        StatusWrites { seen, watches }
    }

    /// How many statuses each object of `kind` whose name starts with `prefix` went through.
    fn per_object(&self, kind: &str, prefix: &str) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for seen in self.seen.lock().expect("lock").iter().filter(|s| s.object.starts_with(&format!("{kind}/{prefix}"))) {
            *counts.entry(seen.object.clone()).or_default() += 1;
        }
        counts
    }

    /// The statuses that changed nothing but transition times.
    fn times_only(&self) -> Vec<String> {
        self.seen.lock().expect("lock").iter().filter(|s| s.times_only).map(|s| s.object.clone()).collect()
    }

    /// Every status seen, one per line.
    fn listing(&self) -> String {
        let seen = self.seen.lock().expect("lock");
        seen.iter().map(|s| format!("  {} by {}: {}\n", s.object, s.writer, s.status)).collect()
    }
}

impl Drop for StatusWrites {
    fn drop(&mut self) {
        self.watches.iter().for_each(tokio::task::JoinHandle::abort);
    }
}

/// Records each status of `api`'s objects that differs from the one before it.
async fn record<K>(api: Api<K>, kind: &'static str, seen: Arc<std::sync::Mutex<Vec<StatusSeen>>>, listed: tokio::sync::oneshot::Sender<()>)
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + serde::Serialize + Send + 'static,
{
    use futures::StreamExt;
    use kube::runtime::watcher::{self, Event};
    let mut last: BTreeMap<String, serde_json::Value> = BTreeMap::new();
    let mut listed = Some(listed);
    let mut events = std::pin::pin!(watcher::watcher(api, watcher::Config::default()));
    while let Some(event) = events.next().await {
        let object = match event {
            Ok(Event::Apply(object) | Event::InitApply(object)) => object,
            Ok(Event::InitDone) => {
                listed.take().map(|l| l.send(()));
                continue;
            }
            _ => continue,
        };
        let status = serde_json::to_value(&object).expect("serializable").get("status").cloned().unwrap_or_default();
        let name = object.meta().name.clone().unwrap_or_default();
        let before = last.get(&name);
        if status.is_null() || before == Some(&status) {
            continue;
        }
        let times_only = before.is_some_and(|b| without_transition_times(b) == without_transition_times(&status));
        last.insert(name.clone(), status.clone());
        let writer = status_writer(object.meta());
        seen.lock().expect("lock").push(StatusSeen { object: format!("{kind}/{name}"), writer, status, times_only });
    }
}

/// `status` with its conditions' `lastTransitionTime`s removed.
fn without_transition_times(status: &serde_json::Value) -> serde_json::Value {
    let mut status = status.clone();
    for condition in status.get_mut("conditions").and_then(|c| c.as_array_mut()).into_iter().flatten() {
        condition.as_object_mut().map(|c| c.remove("lastTransitionTime"));
    }
    status
}

/// The field managers that wrote the status subresource last (times are in whole seconds).
fn status_writer(meta: &kube::api::ObjectMeta) -> String {
    let entries: Vec<_> = meta.managed_fields.iter().flatten().filter(|m| m.subresource.as_deref() == Some("status")).collect();
    let latest = entries.iter().filter_map(|m| m.time.as_ref()).max();
    let writers: Vec<_> = entries.iter().filter(|m| m.time.as_ref() == latest).filter_map(|m| m.manager.clone()).collect();
    writers.join("|")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_services_writes_each_status_once_per_state() {
    let stack = stack();
    let ns = stack.cluster.namespace("e2e-writes").await;
    let artifact = stack.push_example("hello").await;
    let client = stack.cluster.client().await;
    // One Service first: the namespace's shared grant then exists and is Ready, and the
    // burst's Revisions go through the states every later Revision does.
    stack.kubectl_apply(&knative_service(&ns, "first", &artifact, "first", None));
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    stack.ready_host(&services, "first").await;
    let writes = StatusWrites::watch(client.clone(), &ns).await;
    let burst = 20;
    let items: Vec<_> = (0..burst).map(|i| knative_service(&ns, &format!("b{i:02}"), &artifact, "b", None)).collect();
    stack.kubectl_apply(&json!({ "apiVersion": "v1", "kind": "List", "items": items }));
    let revisions: Api<Revision> = Api::namespaced(client, &ns);
    stack
        .poll("every Revision of the burst Ready and Active", POLL, async || {
            let list = revisions.list(&Default::default()).await.ok()?;
            let done = list.items.iter().filter(|r| {
                r.status
                    .as_ref()
                    .is_some_and(|s| s.is_ready(r.metadata.generation) && s.get_condition(revision::ACTIVE).is_some_and(|c| c.is_true()))
            });
            (done.count() == burst + 1).then_some(())
        })
        .await;
    // Anything still to come (a late fiberd report, a second reconcile) lands in this time.
    tokio::time::sleep(Duration::from_secs(3)).await;

    let listing = writes.listing();
    assert_eq!(writes.times_only(), Vec::<String>::new(), "statuses rewritten with nothing but new transition times:\n{listing}");
    let revisions = writes.per_object("Revision", "b");
    assert_eq!(revisions.len(), burst, "{listing}");
    // Deploying (no fiberd has reported), then Ready and Active.
    let more: Vec<_> = revisions.iter().filter(|(_, n)| **n > 2).collect();
    assert!(more.is_empty(), "Revisions with more statuses than Deploying and Ready: {more:?}\n{listing}");
    // fiberd's entry, lampyr-controller's Ready, and fiberd's warm fiber in a second entry;
    // lampyr-controller's `NoInstances` before them when fiberd takes over 5 s to report.
    let homes = writes.per_object("Home", "b");
    let more: Vec<_> = homes.iter().filter(|(_, n)| **n > 4).collect();
    assert!(homes.len() == burst && more.is_empty(), "Homes with more statuses than their states: {more:?}\n{listing}");
}
