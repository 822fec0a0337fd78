//! The upstream networking layer in front of fiber-router on a real node: `ly cluster install`
//! with the default `ingress.class`, `gateway-api.ingress.networking.knative.dev`, installs Knative's
//! net-gateway-api, Contour's gateway provisioner and, through it, a Contour and an Envoy for
//! each Gateway, all from images this checkout built. Every request comes from the host through
//! Envoy's NodePort and travels Knative's Route → KIngress → HTTPRoute → Envoy → the
//! Revision's ExternalName Service → the shared fiber-router → fiberd, as the decision record
//! says.
//!
//! One test: the steps share the node and each depends on the last.

mod support;

use std::time::Duration;

use lampyr_manifests::gateway;
use lampyr_testenv::node::{NodeIngress, install_lampyr};
use lampyr_testenv::runtime_images::RuntimeImages;
use lampyr_testenv::{Node, Serving, repo_root};
use serde_json::{Value, json};
use support::{
    Ly, assert_even_split, assert_real_containers, path, pinned_service, public_edge_refuses_what_is_internal, scale_to_zero_after,
    second_revision_split_and_tagged, serves_a_domain_mapping_over_https, serves_external_domain_tls_from_cert_manager, stderr,
};

/// Envoy's HTTP NodePort (the reference's default `ingress.httpNodePort`).
const NODE_PORT: u16 = 30080;
/// Envoy's HTTPS NodePort (the reference's default `ingress.httpsNodePort`).
const HTTPS_NODE_PORT: u16 = 30443;
/// The domain the installation serves Services under.
const DOMAIN: &str = "apps.example.org";

/// `kubectl get RESOURCE -n NAMESPACE -o json`.
fn get(ly: &Ly<'_>, resource: &str, namespace: &str) -> Value {
    let out = ly.kubectl(&["get", resource, "-n", namespace, "-o", "json"]);
    assert!(out.status.success(), "{resource}: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).expect("JSON")
}

/// The HTTPRoutes net-gateway-api made for Knative Service `service`: (hosts, parent Gateways, backends).
fn http_routes(ly: &Ly<'_>, service: &str) -> Vec<(Vec<String>, Vec<String>, Vec<String>)> {
    let list = get(ly, "httproutes.gateway.networking.k8s.io", "default");
    let strings = |v: &Value, field: &str| -> Vec<String> {
        v.as_array().into_iter().flatten().filter_map(|x| x[field].as_str().map(str::to_string)).collect()
    };
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["metadata"]["labels"]["serving.knative.dev/service"] == service)
        .map(|r| {
            let hosts = r["spec"]["hostnames"].as_array().into_iter().flatten().filter_map(|h| h.as_str().map(str::to_string)).collect();
            let parents = strings(&r["spec"]["parentRefs"], "name");
            let rules = r["spec"]["rules"].as_array().cloned().unwrap_or_default();
            // Each distinct backend once (net-gateway-api writes a rule per path and one for its probes).
            let mut backends: Vec<String> = rules.iter().flat_map(|rule| strings(&rule["backendRefs"], "name")).collect();
            backends.sort();
            backends.dedup();
            (hosts, parents, backends)
        })
        .collect()
}

/// GETs `host/` through Envoy's NodePort; (status, whether Envoy answered it, body).
async fn through_envoy(serving: &NodeIngress<'_>, host: &str) -> (u16, bool, String) {
    let client = lampyr_testenv::http_client().timeout(Duration::from_secs(30)).build().expect("client");
    let url = format!("{}/", serving.node.node_port_url(serving.port));
    let resp = client.get(url).header("host", host).send().await.unwrap_or_else(|e| panic!("{host}: {e}"));
    let status = resp.status().as_u16();
    // Envoy adds the upstream's time to every response it proxied, and names itself on its own answers.
    let envoy = resp.headers().contains_key("x-envoy-upstream-service-time") || resp.headers().get("server").is_some_and(|s| s == "envoy");
    (status, envoy, resp.text().await.unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread")]
async fn envoy_routes_knative_traffic_to_fiber_router_on_a_real_node() {
    let node = Node::shared();
    let serving = NodeIngress { node, port: NODE_PORT };

    // 1. Install with the default settings' KIngress class: the Gateway API layer.
    let images = RuntimeImages::locate().unwrap_or_else(|e| panic!("{e}"));
    let ly = support::ly(node.cluster());
    let install = install_lampyr(node, &ly, &images, DOMAIN, &[]).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(install.status.success(), "install failed:\n{}", stderr(&install));

    // 2. Health passes (networking: both Gateways programmed), from real containers of the built
    //    images, Contour's and Envoy's included; Envoy holds the NodePort, fiber-router stays inside.
    let health = ly.healthy_but_cert_manager(&serving).await;
    assert_eq!(health.get("networking"), Some(&true));
    let namespaces =
        ["lampyr-system", "knative-serving", gateway::PROVISIONER_NAMESPACE, gateway::EXTERNAL_NAMESPACE, gateway::INTERNAL_NAMESPACE];
    assert_real_containers(&ly, &images, &namespaces);
    let config = get(&ly, "configmap/config-network", "knative-serving");
    assert_eq!(config["data"]["ingress-class"], gateway::CLASS);
    let public = get(&ly, "service/fiber-router-public", "lampyr-system");
    assert_eq!(public["spec"]["type"], "ClusterIP", "fiber-router is not exposed: {public:#}");
    let envoy = get(&ly, "services", gateway::EXTERNAL_NAMESPACE);
    let node_ports: Vec<u64> = envoy["items"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|s| s["spec"]["ports"].as_array().cloned().unwrap_or_default())
        .filter_map(|p| p["nodePort"].as_u64())
        .collect();
    assert!(node_ports.contains(&u64::from(NODE_PORT)), "Envoy's Service holds NodePort {NODE_PORT}: {node_ports:?}");

    // Scale to zero after 6 s without traffic, through Knative's own configuration.
    scale_to_zero_after(&ly, "6s");

    // 3. hello through Envoy: the Route's HTTPRoute sends the host to the Revision's
    //    ExternalName Service, which names fiber-router.
    let hello = repo_root().join("examples/hello");
    let deployed = ly.deploy(&[path(&hello), "--timeout", "300"]);
    assert!(deployed.status.success(), "deploy failed:\n{}\n{}", stderr(&deployed), serving.lampyr_logs());
    let host = format!("hello.default.{DOMAIN}");
    assert_eq!(serving.answer(&host, "/").await, "Hello Lampyr!\n");
    let (status, envoy, body) = through_envoy(&serving, &host).await;
    assert_eq!((status, envoy, body.as_str()), (200, true, "Hello Lampyr!\n"), "Envoy proxied the answer");
    let routes = http_routes(&ly, "hello");
    let external =
        routes.iter().find(|(hosts, _, _)| hosts.contains(&host)).unwrap_or_else(|| panic!("no HTTPRoute for {host}: {routes:?}"));
    assert_eq!(external.1, [gateway::EXTERNAL_GATEWAY], "{routes:?}");
    assert_eq!(external.2, ["hello-00001"], "{routes:?}");
    let revision_service = get(&ly, "service/hello-00001", "default");
    assert_eq!(revision_service["spec"]["type"], "ExternalName");
    let target = revision_service["spec"]["externalName"].as_str().unwrap_or_default();
    assert!(target.starts_with("fiber-router.lampyr-system.svc"), "the Revision's Service names fiber-router: {target}");

    // 4. A second Revision, a 50/50 split and a tag host, through Envoy.
    let artifact = second_revision_split_and_tagged(&ly, &serving, DOMAIN, "Envoy").await;
    let mut seen = std::collections::BTreeMap::new();
    for _ in 0..60 {
        let (status, envoy, body) = through_envoy(&serving, &host).await;
        assert_eq!((status, envoy), (200, true), "{host}: {body}\n{}", serving.lampyr_logs());
        *seen.entry(body).or_insert(0) += 1;
    }
    assert_even_split(&seen, ["Hello Lampyr!\n", "Hello Envoy!\n"]);

    // 4b. The public edge: cluster-local hosts, Revisions picked by Knative's headers and
    //     fiber-router's metrics are refused from outside; a DomainMapping with a TLS Secret
    //     answers over HTTPS through Envoy (net-gateway-api adds its listener to the Gateway),
    //     its chain verified against the test's CA.
    public_edge_refuses_what_is_internal(&serving).await;
    serves_a_domain_mapping_over_https(&ly, &serving, HTTPS_NODE_PORT, &format!("secure.{DOMAIN}")).await;

    // 4c. External-domain TLS end to end: Knative's certificate → upstream's certificate
    //     reconciler in Lampyr's Knative controller → cert-manager (installed by ly, the node had
    //     none) → Secret → KIngress → Envoy's HTTPS listener; the client verifies the chain.
    //     hello's tags go first: net-gateway-api v0.42 gives a KIngress one HTTPS listener
    //     however many certificates it holds (a tagged Route has one per host), so only one of
    //     its hosts would answer HTTPS (docs/networking-layer.md, known limits).
    let untagged = json!({ "spec": { "traffic": [{ "latestRevision": true, "percent": 100 }] } });
    let out = ly.kubectl(&["patch", "services.serving.knative.dev/hello", "-n", "default", "--type=merge", "-p", &untagged.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    serves_external_domain_tls_from_cert_manager(&ly, &serving, HTTPS_NODE_PORT, &host).await;
    assert_real_containers(&ly, &images, &[lampyr_manifests::cert_manager::NAMESPACE]);

    // 5. A cluster-local Service: routed on the local Gateway only; from outside its host is 404.
    let dir = tempfile::tempdir().expect("tempdir");
    let private = dir.path().join("private.yaml");
    let labelled = pinned_service(&artifact, "Private").replacen(
        "name: hello\n",
        "name: private\n  labels:\n    networking.knative.dev/visibility: cluster-local\n",
        1,
    );
    std::fs::write(&private, labelled).expect("write");
    let deployed = ly.deploy(&[path(&private), "--timeout", "300"]);
    assert!(deployed.status.success(), "deploying the cluster-local Service failed:\n{}", stderr(&deployed));
    let private_host = format!("private.default.{DOMAIN}");
    let (status, envoy, body) = through_envoy(&serving, &private_host).await;
    assert_eq!((status, envoy), (404, true), "Envoy refuses the cluster-local Service from outside: {body}");
    let routes = http_routes(&ly, "private");
    let local = "private.default.svc.cluster.local".to_string();
    assert!(
        routes.iter().any(|(hosts, parents, backends)| hosts.contains(&local)
            && parents == &[gateway::INTERNAL_GATEWAY]
            && backends == &["private-00001"]),
        "private is routed on the local Gateway: {routes:?}"
    );
    assert!(!routes.iter().any(|(_, parents, _)| parents == &[gateway::EXTERNAL_GATEWAY]), "no public route for private: {routes:?}");

    // 6. Uninstall removes the layer (Gateways, Contour, Envoy and their CRDs) and the
    //    cert-manager it installed.
    let uninstalled = ly.cluster(&["uninstall", "--non-interactive"]);
    assert!(uninstalled.status.success(), "uninstall failed:\n{}", stderr(&uninstalled));
    for resource in [
        "customresourcedefinition/gateways.gateway.networking.k8s.io",
        "customresourcedefinition/contourdeployments.projectcontour.io",
        "namespace/projectcontour",
        "namespace/contour-external",
        "namespace/contour-internal",
        "deployment/net-gateway-api-controller",
        "customresourcedefinition/certificates.cert-manager.io",
        "namespace/cert-manager",
    ] {
        serving
            .poll(&format!("uninstall removing {resource}"), Duration::from_secs(1), async || {
                (!ly.exists(resource, resource.starts_with("deployment/").then_some("knative-serving"))).then_some(())
            })
            .await;
    }
}
