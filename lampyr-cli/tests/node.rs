//! Lampyr on a real Kubernetes node, as an operator installs it
//! (`lampyr_testenv::Node`: containerd, runc, the CNI bridge, kubelet, kube-proxy,
//! kube-scheduler and CoreDNS in a network namespace of the test's own).
//!
//! The runtime images are built from this checkout (`scripts/runtime-images`) and
//! pushed to the node's registry, which the node's containerd uses as the mirror of
//! the registries they are named under; `ly cluster install` installs Lampyr and
//! upstream Knative from a scaffolded Workspace and a `platform.yaml` naming them;
//! every Pod is a real container the kubelet runs from those images; every request
//! comes from the host through fiber-router's NodePort on the node's address, and
//! crosses kube-proxy, a Pod IP and cluster DNS.
//!
//! One test: the steps share the node and each depends on the last.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use lampyr_testenv::eventing::{job_sink_events, post_to_service, send_to_broker};
use lampyr_testenv::node::{NodeIngress, install_lampyr_with};
use lampyr_testenv::runtime_images::RuntimeImages;
use lampyr_testenv::{Node, Serving, repo_root};
use serde::Deserialize as _;
use serde_json::{Value, json};
use support::{
    Ly, apply, assert_even_split, assert_real_containers, path, pods, public_edge_refuses_what_is_internal, scale_to_zero_after,
    second_revision_split_and_tagged, serves_a_domain_mapping_over_https, stderr, text,
};

/// fiber-router's NodePort (the reference's default `ingress.httpNodePort`).
const NODE_PORT: u16 = 30080;
/// fiber-router's HTTPS NodePort (the reference's default `ingress.httpsNodePort`).
const HTTPS_NODE_PORT: u16 = 30443;
/// The domain the installation serves Services under.
const DOMAIN: &str = "apps.example.org";

/// GETs `host/` through the NodePort `count` times; returns how often each body came back.
async fn answers(serving: &NodeIngress<'_>, host: &str, count: usize) -> BTreeMap<String, usize> {
    let mut seen = BTreeMap::new();
    for _ in 0..count {
        let (status, body) = serving.get(host, "/").await.unwrap_or_else(|e| panic!("{e}\n{}", serving.lampyr_logs()));
        assert_eq!(status, 200, "{host}: {body}\n{}", serving.lampyr_logs());
        *seen.entry(body).or_insert(0) += 1;
    }
    seen
}

/// The fiberd container of the grant Pod serving `revision` in `namespace`: (Pod, container ID, restarts).
fn grant_fiberd(ly: &Ly<'_>, namespace: &str, revision: &str) -> (String, String, i64) {
    let out = ly.kubectl(&["get", "homes.fiber.lampyr.dev", revision, "-n", namespace, "-o", "jsonpath={.spec.grantName}"]);
    let grant = text(&out);
    assert!(!grant.is_empty(), "Home {revision} names no grant: {}", stderr(&out));
    let pod = pods(ly, namespace)
        .into_iter()
        .find(|p| p["metadata"]["labels"][lampyr_api::keys::GRANT_LABEL] == grant.as_str())
        .unwrap_or_else(|| panic!("no grant Pod of {grant}"));
    let status = pod["status"]["containerStatuses"]
        .as_array()
        .and_then(|s| s.iter().find(|c| c["name"] == "fiberd").cloned())
        .unwrap_or_else(|| panic!("grant Pod of {grant} has no fiberd status:\n{pod:#}"));
    let name = pod["metadata"]["name"].as_str().unwrap_or_default().to_string();
    (name, status["containerID"].as_str().unwrap_or_default().to_string(), status["restartCount"].as_i64().unwrap_or(0))
}

/// Waits until Revision `default/revision` is scaled to zero (`Active=False`).
async fn scaled_to_zero(ly: &Ly<'_>, serving: &NodeIngress<'_>, revision: &str) {
    serving
        .poll(&format!("{revision} scaled to zero (Active=False)"), Duration::from_secs(1), async || {
            let condition = "jsonpath={.status.conditions[?(@.type==\"Active\")].status}";
            let out = ly.kubectl(&["get", "revisions.serving.knative.dev", revision, "-n", "default", "-o", condition]);
            (text(&out) == "False").then_some(())
        })
        .await;
}

/// Waits until JobSink `default/sink` holds an event matching `wanted`; returns it.
async fn received(ly: &Ly<'_>, serving: &NodeIngress<'_>, sink: &str, what: &str, wanted: impl Fn(&Value) -> bool) -> Value {
    serving
        .poll(&format!("JobSink {sink} receiving {what}"), Duration::from_secs(1), async || {
            let events = job_sink_events(ly.cluster, "default", sink).unwrap_or_else(|e| panic!("{e}"));
            events.into_iter().find(|e| wanted(e))
        })
        .await
}

/// A structured-mode CloudEvent of `ty` from `source` with JSON `data`.
fn event(id: &str, source: &str, ty: &str, data: Value) -> Value {
    json!({ "specversion": "1.0", "id": id, "source": source, "type": ty, "datacontenttype": "application/json", "data": data })
}

/// Knative Eventing, installed by `ly cluster install --eventing`, delivering to `examples/events`
/// in fibers: a PingSource's tick through the default Broker wakes the Service from zero and
/// its reply event comes back through the Broker to a JobSink; a Trigger filter passes only
/// the events it names; an event the subscriber refuses (400) goes to the dead-letter sink.
/// JobSinks (upstream's sink that keeps each event in a Secret) are where the test reads them.
async fn delivers_events_to_fibers(ly: &Ly<'_>, serving: &NodeIngress<'_>, images: &RuntimeImages) {
    let deployed = ly.deploy(&[path(&repo_root().join("examples/events")), "--timeout", "300"]);
    assert!(deployed.status.success(), "deploying events failed:\n{}\n{}", stderr(&deployed), serving.lampyr_logs());
    // A JobSink runs a Job per event; this one's Job only prints a usage and exits.
    let job_sink = |name: &str| {
        json!({
            "apiVersion": "sinks.knative.dev/v1alpha1", "kind": "JobSink",
            "metadata": { "name": name, "namespace": "default" },
            "spec": { "job": { "spec": { "completions": 1, "parallelism": 1, "template": { "spec": {
                "restartPolicy": "Never",
                "containers": [{ "name": "ack", "image": images.get("fiber-router").reference, "args": ["--help"] }],
            } } } } },
        })
    };
    let sink = |name: &str| json!({ "apiVersion": "sinks.knative.dev/v1alpha1", "kind": "JobSink", "name": name });
    // The objects users apply (examples/events/eventing.yaml), the PingSource held back until
    // events is at zero, the greet Trigger narrowed to one source and given a dead-letter sink
    // before it is applied; then JobSinks and a Trigger sending the greetings to one.
    let example = std::fs::read_to_string(repo_root().join("examples/events/eventing.yaml")).expect("read eventing.yaml");
    let mut objects: Vec<Value> = serde_yaml::Deserializer::from_str(&example).map(|d| Value::deserialize(d).expect("YAML")).collect();
    let greet = objects.iter_mut().find(|o| o["metadata"]["name"] == "events-greet").expect("eventing.yaml has Trigger events-greet");
    assert_eq!(greet["spec"]["filter"]["attributes"], json!({ "type": "dev.lampyr.greet" }), "{greet:#}");
    greet["spec"]["filter"]["attributes"]["source"] = json!("/node-test/friends");
    greet["spec"]["delivery"] =
        json!({ "deadLetterSink": { "ref": sink("dead-letters") }, "retry": 1, "backoffPolicy": "linear", "backoffDelay": "PT0.2S" });
    let (pings, rest): (Vec<Value>, Vec<Value>) = objects.into_iter().partition(|o| o["kind"] == "PingSource");
    apply(ly, &[job_sink("replies"), job_sink("dead-letters")]);
    apply(ly, &rest);
    apply(
        ly,
        &[json!({
            "apiVersion": "eventing.knative.dev/v1", "kind": "Trigger",
            "metadata": { "name": "greetings", "namespace": "default" },
            "spec": { "broker": "default", "filter": { "attributes": { "type": "dev.lampyr.greeting" } }, "subscriber": { "ref": sink("replies") } },
        })],
    );
    serving
        .poll("the Broker, its Triggers and the JobSinks Ready", Duration::from_secs(1), async || {
            let ready = "jsonpath={range .items[*]}{.status.conditions[?(@.type==\"Ready\")].status}{\" \"}{end}";
            let out = ly.kubectl(&[
                "get",
                "brokers.eventing.knative.dev,triggers.eventing.knative.dev,jobsinks.sinks.knative.dev",
                "-n",
                "default",
                "-o",
                ready,
            ]);
            let states: Vec<String> = text(&out).split_whitespace().map(str::to_string).collect();
            (states.len() == 6 && states.iter().all(|s| s == "True")).then_some(())
        })
        .await;

    // The PingSource's tick, through the Broker, wakes events from zero; its reply comes back.
    scaled_to_zero(ly, serving, "events-00001").await;
    assert_eq!(pings.len(), 1, "eventing.yaml has one PingSource");
    apply(ly, &pings);
    let greeting = received(ly, serving, "replies", "a PingSource tick's greeting", |e| e["subject"] == "Ping").await;
    assert_eq!(greeting["type"], "dev.lampyr.greeting", "{greeting:#}");
    assert_eq!(greeting["data"], json!({ "greeting": "Hello Ping!" }), "{greeting:#}");
    let out = ly.kubectl(&["delete", "pingsources.sources.knative.dev/greeter", "-n", "default"]);
    assert!(out.status.success(), "{}", stderr(&out));

    // The filter: only the friends' greet events reach events; a refused one is dead-lettered.
    let friends = "/node-test/friends";
    for sent in [
        event("stranger-1", "/node-test/strangers", "dev.lampyr.greet", json!({ "name": "Stranger" })),
        event("friend-1", friends, "dev.lampyr.greet", json!({ "name": "Ada" })),
        event("friend-2", friends, "dev.lampyr.greet", json!({ "who": "nobody" })),
    ] {
        send_to_broker(ly.cluster, "default", "default", &sent).await.unwrap_or_else(|e| panic!("{e}\n{}", serving.lampyr_logs()));
    }
    let ada = received(ly, serving, "replies", "Ada's greeting", |e| e["subject"] == "Ada").await;
    assert_eq!((ada["id"].as_str(), &ada["data"]), (Some("friend-1-greeting"), &json!({ "greeting": "Hello Ada!" })), "{ada:#}");
    let dead = received(ly, serving, "dead-letters", "the refused event", |e| e["id"] == "friend-2").await;
    assert_eq!(dead["data"], json!({ "who": "nobody" }), "the dead letter is the event as sent: {dead:#}");
    assert_eq!(dead["knativeerrorcode"], "400", "the dead letter says the subscriber answered 400: {dead:#}");
    let replies = job_sink_events(ly.cluster, "default", "replies").unwrap_or_else(|e| panic!("{e}"));
    assert!(!replies.iter().any(|e| e["subject"] == "Stranger"), "the filter let the stranger's event through: {replies:#?}");

    event_grid_reaches_fibers(ly, serving).await;
}

/// An Event Grid custom topic's resource ID: the `topic` of its events, their CloudEvents `source`.
const EVENT_GRID_TOPIC: &str =
    "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/lampyr/providers/Microsoft.EventGrid/topics/greetings";

/// An AzureEventGridSource sending to the default Broker: Event Grid's subscription validation
/// handshake is answered, and a batch of three Event Grid schema events (as Event Grid POSTs
/// them to eventgrid-adapter, here through the API server's service proxy) reaches events in
/// fibers through the Broker; its three greetings come back to the replies JobSink.
async fn event_grid_reaches_fibers(ly: &Ly<'_>, serving: &NodeIngress<'_>) {
    let broker = json!({ "apiVersion": "eventing.knative.dev/v1", "kind": "Broker", "name": "default" });
    apply(
        ly,
        &[
            json!({
                "apiVersion": "sources.lampyr.dev/v1alpha1", "kind": "AzureEventGridSource",
                "metadata": { "name": "greetings", "namespace": "default" },
                "spec": { "sink": { "ref": broker } },
            }),
            json!({
                "apiVersion": "eventing.knative.dev/v1", "kind": "Trigger",
                "metadata": { "name": "event-grid-greet", "namespace": "default" },
                "spec": {
                    "broker": "default",
                    "filter": { "attributes": { "type": "dev.lampyr.greet", "source": EVENT_GRID_TOPIC } },
                    "subscriber": { "ref": { "apiVersion": "serving.knative.dev/v1", "kind": "Service", "name": "events" } },
                },
            }),
        ],
    );
    serving
        .poll("AzureEventGridSource greetings and its Trigger Ready", Duration::from_secs(1), async || {
            let ready = "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}";
            let source = ly.kubectl(&["get", "azureeventgridsources.sources.lampyr.dev/greetings", "-n", "default", "-o", ready]);
            let trigger = ly.kubectl(&["get", "triggers.eventing.knative.dev/event-grid-greet", "-n", "default", "-o", ready]);
            (text(&source) == "True" && text(&trigger) == "True").then_some(())
        })
        .await;
    let sink =
        ly.kubectl(&["get", "azureeventgridsources.sources.lampyr.dev/greetings", "-n", "default", "-o", "jsonpath={.status.sinkUri}"]);
    assert_eq!(text(&sink), "http://broker-ingress.knative-eventing.svc.cluster.local/default/default", "the Broker's address");

    let adapter = |event_type: &'static str, body: Value| async move {
        let headers = [("content-type", "application/json"), ("aeg-event-type", event_type)];
        post_to_service(ly.cluster, "lampyr-system", "eventgrid-adapter:http", "default/greetings", &headers, &body)
            .await
            .unwrap_or_else(|e| panic!("{e}\n{}", serving.lampyr_logs()))
    };
    let validation = json!([{
        "id": "0f5b1a3c-7d2e-4c1b-9a8f-6e5d4c3b2a10", "topic": EVENT_GRID_TOPIC, "subject": "",
        "data": { "validationCode": "node-test-validation-code", "validationUrl": "https://rp-westus3.eventgrid.azure.net/eventsubscriptions/greetings/validate?id=1&token=t" },
        "eventType": "Microsoft.EventGrid.SubscriptionValidationEvent", "eventTime": "2026-12-06T10:00:00Z",
        "metadataVersion": "1", "dataVersion": "1",
    }]);
    let answer: Value = serde_json::from_str(&adapter("SubscriptionValidation", validation).await).expect("JSON");
    assert_eq!(answer, json!({ "validationResponse": "node-test-validation-code" }));

    let names = ["Grace", "Linus", "Barbara"];
    let batch: Vec<Value> = names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            json!({
                "id": format!("event-grid-{i}"), "topic": EVENT_GRID_TOPIC, "subject": format!("people/{name}"),
                "eventType": "dev.lampyr.greet", "eventTime": "2026-12-06T10:00:01Z",
                "data": { "name": name }, "dataVersion": "1.0", "metadataVersion": "1",
            })
        })
        .collect();
    adapter("Notification", Value::Array(batch)).await;
    for (i, name) in names.iter().enumerate() {
        let greeting = received(ly, serving, "replies", &format!("{name}'s greeting"), |e| e["subject"] == *name).await;
        assert_eq!(greeting["id"], format!("event-grid-{i}-greeting"), "{greeting:#}");
        assert_eq!(greeting["data"], json!({ "greeting": format!("Hello {name}!") }), "{greeting:#}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn lampyr_installs_serves_scales_recovers_and_uninstalls_on_a_real_node() {
    let node = Node::shared();
    let serving = NodeIngress { node, port: NODE_PORT };

    // 1-2. The runtime images, built from this checkout, pushed to the node's registry, which
    //    the node's containerd uses as the mirror of the registries they are named under (the
    //    kubelet pulls each one: by tag, and the grant Pods' by digest); a Workspace and a
    //    platform.yaml naming them and fiber-router's own ingress class (its public edge is what
    //    this test checks; node_gateway.rs installs the default Gateway API layer);
    //    `ly cluster install` (`lampyr_testenv::node::install_lampyr_with`).
    let images = RuntimeImages::locate().unwrap_or_else(|e| panic!("{e}"));
    let ly = support::ly(node.cluster());
    let registry = node.registry().host();
    let install = install_lampyr_with(node, &ly, &images, DOMAIN, &[support::FIBER_ROUTER_INGRESS], &["--eventing"])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(install.status.success(), "install failed:\n{}", stderr(&install));
    let policy = ly.kubectl(&["get", "grantpolicy/lampyr", "-o", "jsonpath={.spec.allowedRepositories}"]);
    assert!(text(&policy).contains("ghcr.io/hyperlight-dev/lampyr/fiberd"), "the GrantPolicy admits the built images: {}", text(&policy));

    // 3. Health: everything passes but cert-manager, from components that really run
    //    (Knative Eventing's too: install had --eventing).
    ly.healthy_but_cert_manager(&serving).await;
    assert_real_containers(&ly, &images, &["lampyr-system", "knative-serving", "knative-eventing"]);

    // Scale to zero after 6 s without traffic, through Knative's own configuration.
    scale_to_zero_after(&ly, "6s");

    // 4. Deploy hello; the host reaches it through the NodePort with its Host.
    let hello = repo_root().join("examples/hello");
    let deployed = ly.deploy(&[path(&hello), "--timeout", "300"]);
    assert!(deployed.status.success(), "deploy failed:\n{}\n{}", stderr(&deployed), serving.lampyr_logs());
    let host = format!("hello.default.{DOMAIN}");
    assert_eq!(text(&deployed).trim(), format!("default/hello: http://{host} (revision hello-00001)"));
    assert_eq!(serving.answer(&host, "/").await, "Hello Lampyr!\n");
    assert_real_containers(&ly, &images, &["default"]);

    // 5. A second Revision, a 50/50 split and a tag host, all through the NodePort.
    let artifact = second_revision_split_and_tagged(&ly, &serving, DOMAIN, "Node").await;
    assert!(artifact.starts_with(&format!("{registry}/lampyr/snapshots@sha256:")), "pushed to the node's registry: {artifact}");
    assert_even_split(&answers(&serving, &host, 60).await, ["Hello Lampyr!\n", "Hello Node!\n"]);

    // 5b. The public edge: from outside, cluster-local hosts, Revisions picked by Knative's
    //     headers and the router's metrics are refused; a DomainMapping with a TLS Secret
    //     answers over HTTPS on the HTTPS NodePort, its chain verified against the test's CA.
    public_edge_refuses_what_is_internal(&serving).await;
    serves_a_domain_mapping_over_https(&ly, &serving, HTTPS_NODE_PORT, &format!("secure.{DOMAIN}")).await;

    // 6. Scale to zero, then a cold request is answered.
    let revisions = ["hello-00001", "hello-00002"];
    serving
        .poll("both Revisions scaled to zero (Active=False)", Duration::from_secs(1), async || {
            revisions
                .iter()
                .all(|r| {
                    let out = ly.kubectl(&[
                        "get",
                        "revisions.serving.knative.dev",
                        r,
                        "-n",
                        "default",
                        "-o",
                        "jsonpath={.status.conditions[?(@.type==\"Active\")].status}",
                    ]);
                    text(&out) == "False"
                })
                .then_some(())
        })
        .await;
    assert_eq!(serving.answer(&format!("candidate-hello.default.{DOMAIN}"), "/").await, "Hello Node!\n");

    // 6b. Knative Eventing delivering to a fiber Service at zero (`delivers_events_to_fibers`).
    delivers_events_to_fibers(&ly, &serving, &images).await;

    // 7. Kill the fiberd container of a grant Pod: the kubelet restarts it; requests recover
    //    and the Service's status converges.
    let (pod, container, restarts) = grant_fiberd(&ly, "default", "hello-00002");
    node.kill_container(&container).unwrap_or_else(|e| panic!("{e}"));
    serving
        .poll(&format!("the kubelet restarting fiberd in {pod}"), Duration::from_secs(1), async || {
            let (_, now, count) = grant_fiberd(&ly, "default", "hello-00002");
            (count > restarts && now != container).then_some(())
        })
        .await;
    assert_eq!(serving.answer(&format!("candidate-hello.default.{DOMAIN}"), "/").await, "Hello Node!\n");
    serving
        .poll("the Service Ready again", Duration::from_secs(1), async || {
            let out = ly.kubectl(&[
                "get",
                "services.serving.knative.dev/hello",
                "-n",
                "default",
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
            ]);
            (text(&out) == "True").then_some(())
        })
        .await;

    // 8. Uninstall leaves no Lampyr object, Pod or image-pull Secret behind.
    let uninstalled = ly.cluster(&["uninstall", "--non-interactive"]);
    assert!(uninstalled.status.success(), "uninstall failed:\n{}", stderr(&uninstalled));
    serving
        .poll("every Pod but CoreDNS gone", Duration::from_secs(1), async || {
            let left: Vec<String> = pods(&ly, "")
                .iter()
                .filter(|p| p["metadata"]["namespace"] != "kube-system")
                .map(|p| format!("{}/{}", p["metadata"]["namespace"], p["metadata"]["name"]))
                .collect();
            left.is_empty().then_some(())
        })
        .await;
    let labelled = ly.kubectl(&[
        "get",
        "all,configmaps,secrets,serviceaccounts,roles,rolebindings",
        "--all-namespaces",
        "-l",
        "app.kubernetes.io/part-of=lampyr",
        "-o",
        "name",
    ]);
    assert_eq!(text(&labelled), "", "objects labelled part-of=lampyr remain");
    let cluster_scoped = ly.kubectl(&[
        "get",
        "clusterroles,clusterrolebindings,crds,grantpolicies.fiber.lampyr.dev,namespaces",
        "-l",
        "app.kubernetes.io/part-of=lampyr",
        "-o",
        "name",
        "--ignore-not-found",
    ]);
    assert_eq!(text(&cluster_scoped), "", "cluster objects of Lampyr remain");
    for (resource, namespace) in [
        ("customresourcedefinition/brokers.eventing.knative.dev", None),
        ("customresourcedefinition/jobsinks.sinks.knative.dev", None),
        ("customresourcedefinition/azureeventgridsources.sources.lampyr.dev", None),
        ("namespace/knative-eventing", None),
        ("validatingwebhookconfiguration/validation.webhook.eventing.knative.dev", None),
    ] {
        assert!(!ly.exists(resource, namespace), "uninstall removes Knative Eventing's {resource}");
    }
    let pull_secrets =
        ly.kubectl(&["get", "secrets", "--all-namespaces", "--field-selector", "type=kubernetes.io/dockerconfigjson", "-o", "name"]);
    assert_eq!(text(&pull_secrets), "", "image-pull Secrets remain");
}
