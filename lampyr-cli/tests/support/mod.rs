//! `ly` (this package's binary) against a test environment's cluster: see
//! `lampyr_testenv::ly`.

#![allow(dead_code)] // each test binary uses its part

use std::time::Duration;

pub use lampyr_testenv::ly::*;
use lampyr_testenv::node::NodeIngress;
use lampyr_testenv::runtime_images::RuntimeImages;
use lampyr_testenv::{Cluster, Serving};
use serde_json::{Value, json};

/// This package's `ly` against `cluster`, with a scaffolded Workspace.
pub fn ly(cluster: &Cluster) -> Ly<'_> {
    Ly::new(env!("CARGO_BIN_EXE_ly"), cluster)
}

/// Every Pod of `namespace` (all namespaces when empty) as JSON objects.
pub fn pods(ly: &Ly<'_>, namespace: &str) -> Vec<Value> {
    let mut args = vec!["get", "pods", "-o", "json"];
    match namespace {
        "" => args.push("--all-namespaces"),
        ns => args.extend(["-n", ns]),
    }
    let out = ly.kubectl(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    let list: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    list["items"].as_array().cloned().unwrap_or_default()
}

/// Asserts that every container (init containers too) of every Pod in `namespaces` ran in the
/// node's containerd from an image this checkout built: the image ID the kubelet reports is
/// the built image's manifest or config digest.
pub fn assert_real_containers(ly: &Ly<'_>, images: &RuntimeImages, namespaces: &[&str]) {
    for namespace in namespaces {
        for pod in pods(ly, namespace) {
            let name = pod["metadata"]["name"].as_str().unwrap_or_default().to_string();
            let statuses = pod["status"]["containerStatuses"].as_array().cloned().unwrap_or_default();
            assert!(!statuses.is_empty(), "Pod {namespace}/{name} has no running container:\n{pod:#}");
            let init = pod["status"]["initContainerStatuses"].as_array().cloned().unwrap_or_default();
            for status in statuses.into_iter().chain(init) {
                let id = status["containerID"].as_str().unwrap_or_default();
                assert!(id.starts_with("containerd://"), "{namespace}/{name}: not a containerd container: {status:#}");
                let image = status["image"].as_str().unwrap_or_default();
                let image_id = status["imageID"].as_str().unwrap_or_default();
                // A kubelet names an image by the reference it pulled, or by its config digest
                // when it pulled a digest; the image ID is `repository@manifest-digest` or the config digest.
                let built = images
                    .images
                    .iter()
                    .find(|i| {
                        lampyr_api::fiber::repository_of(image) == i.repository()
                            || image == i.config_digest
                            || image_id.ends_with(&i.digest)
                    })
                    .unwrap_or_else(|| panic!("{namespace}/{name} runs {image} ({image_id}), not a built image"));
                assert!(
                    image_id.ends_with(&built.config_digest) || image_id.ends_with(&built.digest),
                    "{namespace}/{name}: image ID {image_id} is not the built {} ({})",
                    built.digest,
                    built.config_digest
                );
            }
        }
    }
}

/// Through the HTTP NodePort: a cluster-local host, a Revision chosen by headers and `/metrics`
/// are each answered 404.
pub async fn public_edge_refuses_what_is_internal(serving: &NodeIngress<'_>) {
    let client = lampyr_testenv::http_client().timeout(Duration::from_secs(30)).build().expect("client");
    let base = serving.node.node_port_url(serving.port);
    let local = client.get(format!("{base}/")).header("host", "hello.default.svc.cluster.local").send().await.expect("response");
    assert_eq!(local.status().as_u16(), 404, "a cluster-local host from outside: {:?}", local.text().await);
    let picked = client
        .get(format!("{base}/"))
        .header("knative-serving-namespace", "default")
        .header("knative-serving-revision", "hello-00001")
        .send()
        .await
        .expect("response");
    assert_eq!(picked.status().as_u16(), 404, "a Revision picked by headers from outside: {:?}", picked.text().await);
    let metrics = client.get(format!("{base}/metrics")).send().await.expect("response");
    assert_eq!(metrics.status().as_u16(), 404, "fiber-router's metrics from outside");
}

/// Maps `domain` to Service hello with a TLS Secret the test's CA issued; GETs it through
/// HTTPS NodePort `https_port`, trusting only that CA.
pub async fn serves_a_domain_mapping_over_https(ly: &Ly<'_>, serving: &NodeIngress<'_>, https_port: u16, domain: &str) {
    let ca = lampyr_testenv::tls::TestCa::new("node-test-ca").unwrap_or_else(|e| panic!("{e}"));
    let certificate = ca.issue(&[domain]).unwrap_or_else(|e| panic!("{e}"));
    let objects = [
        certificate.secret("default", "secure-tls"),
        json!({
            "apiVersion": "networking.internal.knative.dev/v1alpha1", "kind": "ClusterDomainClaim",
            "metadata": { "name": domain }, "spec": { "namespace": "default" },
        }),
        json!({
            "apiVersion": "serving.knative.dev/v1beta1", "kind": "DomainMapping",
            "metadata": { "name": domain, "namespace": "default" },
            "spec": {
                "ref": { "apiVersion": "serving.knative.dev/v1", "kind": "Service", "name": "hello" },
                "tls": { "secretName": "secure-tls" },
            },
        }),
    ];
    apply(ly, &objects);
    let https = std::net::SocketAddr::from((serving.node.address(), https_port));
    let body = serving
        .poll(&format!("{domain} over HTTPS"), Duration::from_secs(1), async || {
            let ans = lampyr_testenv::tls::https_get(https, domain, "/", ca.pem()).await.ok()?;
            assert_eq!(ans.peer_certificate, certificate.der, "the Secret's certificate is presented");
            (ans.status == 200).then_some(ans.body)
        })
        .await;
    assert!(body.starts_with("Hello "), "hello answers over HTTPS: {body:?}");
    let out = ly.kubectl(&["get", "domainmappings.serving.knative.dev", domain, "-n", "default", "-o", "jsonpath={.status.url}"]);
    assert_eq!(text(&out), format!("https://{domain}"), "the DomainMapping's URL is HTTPS: {}", stderr(&out));
}

/// Sets Knative's `scale-to-zero-grace-period` (config-autoscaler) to `period`.
pub fn scale_to_zero_after(ly: &Ly<'_>, period: &str) {
    let patch = json!({ "data": { "scale-to-zero-grace-period": period } }).to_string();
    let out = ly.kubectl(&["patch", "configmap/config-autoscaler", "-n", "knative-serving", "--type=merge", "-p", &patch]);
    assert!(out.status.success(), "{}", stderr(&out));
}

/// Applies `objects` with kubectl, in order.
pub fn apply(ly: &Ly<'_>, objects: &[Value]) {
    for object in objects {
        try_apply(ly, object).unwrap_or_else(|e| panic!("applying {object}: {e}"));
    }
}

/// Waits until `ly cluster health` finds cert-manager's three Deployments available (the
/// Workspace's cert-manager, installed because the node had none), failing only for the
/// csi-driver ly does not install.
pub async fn cert_manager_runs(ly: &Ly<'_>, serving: &NodeIngress<'_>) {
    serving
        .poll("cert-manager's Deployments available", Duration::from_secs(2), async || {
            let health = text(&ly.cluster(&["health"]));
            let line = health.lines().find(|l| l.contains("cert-manager"))?.to_string();
            let running = lampyr_manifests::cert_manager::DEPLOYMENTS
                .iter()
                .all(|(name, _)| line.contains(&format!("cert-manager/{name} 1/1 available")));
            running.then_some(line)
        })
        .await;
}

/// External-domain TLS issued by cert-manager: a CA ClusterIssuer signing with a CA of the
/// test's own, Knative's `config-certmanager` naming it and `config-network`'s
/// `external-domain-tls` on (Lampyr's Knative controller restarted to start upstream's
/// certificate reconciler, as upstream's is); then `host` answers over HTTPS NodePort
/// `https_port` with a certificate only cert-manager can have issued (the test issued none for
/// it), the chain verified against that CA, and the Route's URL is `https://host`.
pub async fn serves_external_domain_tls_from_cert_manager(ly: &Ly<'_>, serving: &NodeIngress<'_>, https_port: u16, host: &str) {
    cert_manager_runs(ly, serving).await;
    let ca = lampyr_testenv::tls::TestCa::new("cert-manager-test-ca").unwrap_or_else(|e| panic!("{e}"));
    apply(ly, &[ca.signing_secret(lampyr_manifests::cert_manager::NAMESPACE, "lampyr-test-ca")]);
    let issuer = json!({
        "apiVersion": "cert-manager.io/v1", "kind": "ClusterIssuer",
        "metadata": { "name": "lampyr-test-ca" }, "spec": { "ca": { "secretName": "lampyr-test-ca" } },
    });
    // cert-manager's webhook admits the issuer once cainjector gave it its CA bundle.
    serving.poll("cert-manager's webhook admitting a ClusterIssuer", Duration::from_secs(2), async || try_apply(ly, &issuer).ok()).await;
    let ready = "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}";
    serving
        .poll("ClusterIssuer lampyr-test-ca Ready", Duration::from_secs(1), async || {
            (text(&ly.kubectl(&["get", "clusterissuer/lampyr-test-ca", "-o", ready])) == "True").then_some(())
        })
        .await;
    let issuer_ref = json!({ "data": { "issuerRef": "kind: ClusterIssuer\nname: lampyr-test-ca\n" } }).to_string();
    let tls = json!({ "data": { "external-domain-tls": "Enabled" } }).to_string();
    for (config, patch) in [("configmap/config-certmanager", &issuer_ref), ("configmap/config-network", &tls)] {
        let out = ly.kubectl(&["patch", config, "-n", "knative-serving", "--type=merge", "-p", patch]);
        assert!(out.status.success(), "{config}: {}", stderr(&out));
    }
    let controller = "deployment/lampyr-knative-controller";
    for args in [vec!["rollout", "restart", controller], vec!["rollout", "status", controller, "--timeout=180s"]] {
        let out = ly.kubectl(&[args.as_slice(), &["-n", "knative-serving"]].concat());
        assert!(out.status.success(), "kubectl {args:?}: {}", stderr(&out));
    }
    let https = std::net::SocketAddr::from((serving.node.address(), https_port));
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    let body = loop {
        let last = match lampyr_testenv::tls::https_get(https, host, "/", ca.pem()).await {
            Ok(answer) if answer.status == 200 => break answer.body,
            Ok(answer) => format!("HTTP {}: {}", answer.status, answer.body),
            Err(e) => e,
        };
        if std::time::Instant::now() > deadline {
            let state =
                ["ingresses.networking.internal.knative.dev", "certificates.networking.internal.knative.dev", "routes.serving.knative.dev"]
                    .map(|kind| text(&ly.kubectl(&["get", kind, "-n", "default", "-o", "yaml"])));
            let gateway = text(&ly.kubectl(&["get", "gateways.gateway.networking.k8s.io", "-A", "-o", "yaml"]));
            panic!("{host} over HTTPS with cert-manager's certificate within 180 s; last: {last}\n{}\n{gateway}", state.join("\n"));
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    };
    assert!(body.starts_with("Hello "), "hello answers over HTTPS: {body:?}");
    let all_ready = "jsonpath={.items[*].status.conditions[?(@.type==\"Ready\")].status}";
    let certificates = ly.kubectl(&["get", "certificates.cert-manager.io", "-n", "default", "-o", all_ready]);
    assert!(text(&certificates).contains("True"), "cert-manager holds a Ready Certificate for the Route: {}", stderr(&certificates));
    let name = host.split('.').next().unwrap_or_default();
    let url = ly.kubectl(&["get", "routes.serving.knative.dev", name, "-n", "default", "-o", "jsonpath={.status.url}"]);
    assert_eq!(text(&url), format!("https://{host}"), "the Route's URL is HTTPS: {}", stderr(&url));
}

/// `kubectl apply` of `object`; kubectl's error when it is refused.
pub fn try_apply(ly: &Ly<'_>, object: &Value) -> Result<(), String> {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("object.json");
    std::fs::write(&file, object.to_string()).expect("write");
    let out = ly.kubectl(&["apply", "-f", path(&file)]);
    if out.status.success() { Ok(()) } else { Err(stderr(&out)) }
}

/// examples/hello's `service.yaml` greeting `target`, its artifact pinned to `artifact`
/// (a Service deployed from a copy has no guest crate beside it).
pub fn pinned_service(artifact: &str, target: &str) -> String {
    let service = std::fs::read_to_string(lampyr_testenv::repo_root().join("examples/hello/service.yaml")).expect("read service.yaml");
    assert!(service.contains("value: Lampyr"), "examples/hello/service.yaml sets TARGET=Lampyr");
    let pinned = service.replace("value: Lampyr", &format!("value: {target}")).replace(
        "        autoscaling.knative.dev/min-scale: \"0\"\n",
        &format!("        autoscaling.knative.dev/min-scale: \"0\"\n        lampyr.dev/snapshot-artifact: {artifact}\n"),
    );
    assert!(pinned.contains("lampyr.dev/snapshot-artifact"), "examples/hello/service.yaml sets min-scale 0");
    pinned
}

/// A second Revision of the deployed hello greeting `target` (pinned to the artifact the
/// first deploy pushed), then hello split 50/50 between `hello-00001` (tag `current`) and
/// `hello-00002` (tag `candidate`), each tag host answering its Revision. Returns the artifact.
pub async fn second_revision_split_and_tagged(ly: &Ly<'_>, serving: &NodeIngress<'_>, domain: &str, target: &str) -> String {
    let annotation = "jsonpath={.spec.template.metadata.annotations.lampyr\\.dev/snapshot-artifact}";
    let artifact = text(&ly.kubectl(&["get", "services.serving.knative.dev/hello", "-n", "default", "-o", annotation]));
    assert!(artifact.contains("@sha256:"), "the first deploy pinned the artifact: {artifact}");
    let dir = tempfile::tempdir().expect("tempdir");
    let second = dir.path().join("service.yaml");
    std::fs::write(&second, pinned_service(&artifact, target)).expect("write");
    let redeployed = ly.deploy(&[path(&second), "--timeout", "300"]);
    assert!(redeployed.status.success(), "second deploy failed:\n{}", stderr(&redeployed));
    let traffic = json!({ "spec": { "traffic": [
        { "revisionName": "hello-00001", "percent": 50, "tag": "current" },
        { "revisionName": "hello-00002", "percent": 50, "tag": "candidate" },
    ] } });
    let out = ly.kubectl(&["patch", "services.serving.knative.dev/hello", "-n", "default", "--type=merge", "-p", &traffic.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(serving.answer(&format!("candidate-hello.default.{domain}"), "/").await, format!("Hello {target}!\n"));
    assert_eq!(serving.answer(&format!("current-hello.default.{domain}"), "/").await, "Hello Lampyr!\n");
    artifact
}

/// `seen` (answer → count) is a 50/50 split of `bodies`: both answered, each 20–80% of the requests.
pub fn assert_even_split(seen: &std::collections::BTreeMap<String, usize>, bodies: [&str; 2]) {
    let mut want = bodies.to_vec();
    want.sort();
    assert_eq!(seen.keys().map(String::as_str).collect::<Vec<_>>(), want, "both Revisions answer the split: {seen:?}");
    let total: usize = seen.values().sum();
    for (body, count) in seen {
        assert!(*count * 5 >= total && *count * 5 <= total * 4, "{body:?} answered {count} of {total} requests of a 50/50 split: {seen:?}");
    }
}
