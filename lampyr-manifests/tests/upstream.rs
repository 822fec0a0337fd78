//! The filter and the bundle against the real pinned Knative modules (found,
//! or downloaded, with `go` from `knative/go.mod`).

use std::path::{Path, PathBuf};

use lampyr_manifests::{Document, KnativeModules, bundle, cert_manager, eventing, gateway, knative};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn modules() -> KnativeModules {
    KnativeModules::locate(&repo().join("knative")).unwrap_or_else(|e| panic!("{e}"))
}

fn ids(documents: &[Document]) -> Vec<String> {
    documents.iter().map(Document::id).collect()
}

#[test]
fn the_filter_removes_exactly_the_stock_controller_activator_and_autoscaler() {
    let modules = modules();
    let core = knative::core(&modules).expect("core manifests");
    let removed: Vec<(String, String)> = core.removed.iter().map(|r| (r.document.id(), r.reason.to_string())).collect();
    let expected = [
        ("Role knative-serving/knative-serving-activator", "only removed bindings grant it"),
        ("ClusterRole knative-serving-activator-cluster", "only removed bindings grant it"),
        ("ServiceAccount knative-serving/activator", "only removed workloads run as it"),
        ("RoleBinding knative-serving/knative-serving-activator", "binds only removed service accounts"),
        ("ClusterRoleBinding knative-serving-activator-cluster", "binds only removed service accounts"),
        ("Image knative-serving/queue-proxy", "workload of the stock queue-proxy"),
        ("HorizontalPodAutoscaler knative-serving/activator", "workload of the stock activator"),
        ("PodDisruptionBudget knative-serving/activator-pdb", "workload of the stock activator"),
        ("Deployment knative-serving/activator", "workload of the stock activator"),
        ("Service knative-serving/activator-service", "workload of the stock activator"),
        ("Deployment knative-serving/autoscaler", "workload of the stock autoscaler"),
        ("Service knative-serving/autoscaler", "workload of the stock autoscaler"),
        ("Deployment knative-serving/controller", "workload of the stock controller"),
        ("Service knative-serving/controller", "workload of the stock controller"),
    ];
    let expected: Vec<(String, String)> = expected.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
    assert_eq!(removed, expected);

    let kept = ids(&core.kept);
    for must in [
        "Namespace knative-serving",
        "ServiceAccount knative-serving/controller",
        "ClusterRole knative-serving-admin",
        "ClusterRoleBinding knative-serving-controller-admin",
        "ClusterRoleBinding knative-serving-controller-addressable-resolver",
        "ClusterRole knative-serving-core",
        "ClusterRole knative-serving-namespaced-admin",
        "ClusterRole knative-serving-podspecable-binding",
        "Certificate knative-serving/routing-serving-certs",
        "ConfigMap knative-serving/config-autoscaler",
        "ConfigMap knative-serving/config-defaults",
        "ConfigMap knative-serving/config-deployment",
        "ConfigMap knative-serving/config-domain",
        "ConfigMap knative-serving/config-features",
        "ConfigMap knative-serving/config-gc",
        "ConfigMap knative-serving/config-network",
        "Deployment knative-serving/webhook",
        "Service knative-serving/webhook",
        "HorizontalPodAutoscaler knative-serving/webhook",
        "PodDisruptionBudget knative-serving/webhook-pdb",
        "Secret knative-serving/webhook-certs",
        "MutatingWebhookConfiguration webhook.serving.knative.dev",
        "ValidatingWebhookConfiguration validation.webhook.serving.knative.dev",
        "ValidatingWebhookConfiguration config.webhook.serving.knative.dev",
    ] {
        assert!(kept.contains(&must.to_string()), "{must} must be kept; kept: {kept:#?}");
    }
    // Nothing of the removed components survives, under any kind.
    for document in &core.kept {
        let component = document.label("app.kubernetes.io/component").unwrap_or_default();
        if matches!(component, "activator" | "autoscaler" | "controller" | "queue-proxy") {
            assert!(
                matches!(document.kind(), "ConfigMap" | "ServiceAccount" | "ClusterRoleBinding"),
                "{} of the {component} is kept",
                document.id()
            );
        }
        assert!(!document.name().contains("activator"), "{} kept", document.id());
    }
}

#[test]
fn images_are_the_knative_release_and_no_devel_label_remains() {
    let modules = modules();
    assert_eq!(modules.serving.version, "v0.42.2", "knative/go.mod's pin; update the expectations with it");
    let release = knative::release(&modules.serving).expect("release");
    assert_eq!(release, "1.15.2");
    let core = knative::core(&modules).expect("core manifests");
    let webhook = core.kept.iter().find(|d| d.id() == "Deployment knative-serving/webhook").expect("webhook");
    assert_eq!(
        webhook.object.pointer("/spec/template/spec/containers/0/image").and_then(|v| v.as_str()),
        Some("gcr.io/knative-releases/knative.dev/serving/cmd/webhook:v1.15.2")
    );
    let crds = knative::crds(&modules).expect("CRDs");
    for document in core.kept.iter().chain(&crds) {
        assert!(!document.text.contains("ko://"), "{} keeps a ko:// reference", document.id());
        let version = document.label("app.kubernetes.io/version");
        assert!(version.is_none() || version == Some("1.15.2"), "{}: version label {version:?}", document.id());
    }
}

#[test]
fn the_crds_are_servings_and_networkings() {
    let crds = knative::crds(&modules()).expect("CRDs");
    let mut names: Vec<&str> = crds.iter().map(Document::name).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "certificates.networking.internal.knative.dev",
            "clusterdomainclaims.networking.internal.knative.dev",
            "configurations.serving.knative.dev",
            "domainmappings.serving.knative.dev",
            "ingresses.networking.internal.knative.dev",
            "metrics.autoscaling.internal.knative.dev",
            "podautoscalers.autoscaling.internal.knative.dev",
            "revisions.serving.knative.dev",
            "routes.serving.knative.dev",
            "serverlessservices.networking.internal.knative.dev",
            "services.serving.knative.dev",
        ]
    );
}

#[test]
fn the_bundle_names_its_sources_and_parses_back() {
    let modules = modules();
    let files = bundle(&modules, &repo().join("config"), "9.9.9").expect("bundle");
    let names: Vec<&str> = files.iter().map(|f| f.name).collect();
    assert_eq!(
        names,
        [
            "cert-manager.yaml",
            "knative-serving-crds.yaml",
            "knative-serving-core.yaml",
            "lampyr-crds.yaml",
            "lampyr-knative-controller.yaml",
            "lampyr-controller.yaml",
            "fiber-router.yaml",
            "knative-eventing-crds.yaml",
            "knative-eventing-core.yaml",
            "knative-eventing-in-memory-channel.yaml",
            "knative-eventing-mt-channel-broker.yaml",
            "lampyr-eventgrid-crds.yaml",
            "lampyr-eventgrid.yaml",
            "gateway-api-crds.yaml",
            "contour-gateway-provisioner.yaml",
            "net-gateway-api.yaml",
            "contour-gateways.yaml",
        ]
    );
    for file in &files {
        assert!(file.text.starts_with(&format!("# k8s/{}: ", file.name)), "{}", file.name);
        let header: String = file.text.lines().take_while(|l| l.starts_with('#')).collect::<Vec<_>>().join("\n");
        let source = if file.name == cert_manager::FILE {
            format!("knative.dev/serving {} (Knative 1.15.2), {}, unchanged", modules.serving.version, cert_manager::SOURCE)
        } else if file.name.starts_with("knative-eventing-") {
            format!("knative.dev/eventing {} (Knative 1.15.3)", modules.eventing.version)
        } else if file.name.starts_with("knative-") {
            format!("knative.dev/serving {} (Knative 1.15.2)", modules.serving.version)
        } else if gateway::PARTS.iter().any(|p| p.file == file.name) {
            format!(
                "knative.dev/net-gateway-api {} and github.com/projectcontour/contour {}",
                modules.net_gateway_api.version, modules.contour.version
            )
        } else {
            "Lampyr 9.9.9, config/".to_string()
        };
        assert!(header.contains(&source), "{}'s header does not name {source}:\n{header}", file.name);
        let documents = lampyr_manifests::parse(&file.text, file.name).expect("parses back");
        assert!(!documents.is_empty(), "{} is empty", file.name);
    }
    let core = &files.iter().find(|f| f.name == "knative-serving-core.yaml").expect("listed").text;
    assert!(core.contains("#   Deployment knative-serving/activator: workload of the stock activator"), "{core}");
    assert!(core.contains("# Source: knative.dev/serving@v0.42.2/config/core/deployments/webhook.yaml"));
    // Upstream's licence headers travel with their documents.
    assert!(core.contains("Licensed under the Apache License, Version 2.0"));
}

#[test]
fn the_eventing_substrate_is_upstreams_release_split_unchanged() {
    let modules = modules();
    let part = |file: &str| {
        let part = eventing::PARTS.iter().find(|p| p.file == file).expect("listed");
        eventing::documents(&modules, part).unwrap_or_else(|e| panic!("{e}"))
    };
    let crds = part("knative-eventing-crds.yaml");
    assert!(crds.iter().all(|d| d.kind() == "CustomResourceDefinition"));
    let crd_names = ids(&crds);
    for crd in [
        "brokers.eventing.knative.dev",
        "triggers.eventing.knative.dev",
        "pingsources.sources.knative.dev",
        "subscriptions.messaging.knative.dev",
    ] {
        assert!(crd_names.contains(&format!("CustomResourceDefinition {crd}")), "no {crd}: {crd_names:?}");
    }
    let workloads = |documents: &[Document]| -> Vec<(String, String)> {
        documents
            .iter()
            .filter(|d| d.kind() == "Deployment")
            .flat_map(|d| {
                let containers = d.object.pointer("/spec/template/spec/containers").and_then(|c| c.as_array()).cloned().unwrap_or_default();
                containers.into_iter().map(move |c| (d.id(), c["image"].as_str().unwrap_or_default().to_string()))
            })
            .collect()
    };
    let release = |cmd: &str| format!("gcr.io/knative-releases/knative.dev/eventing/cmd/{cmd}:v1.15.3");
    let deployment = |name: &str| format!("Deployment knative-eventing/{name}");
    let expected = [
        (
            "knative-eventing-core.yaml",
            vec![
                (deployment("eventing-controller"), release("controller")),
                (deployment("job-sink"), release("jobsink")),
                (deployment("pingsource-mt-adapter"), release("mtping")),
                (deployment("eventing-webhook"), release("webhook")),
            ],
        ),
        (
            "knative-eventing-in-memory-channel.yaml",
            vec![
                (deployment("imc-controller"), release("in_memory/channel_controller")),
                (deployment("imc-dispatcher"), release("in_memory/channel_dispatcher")),
            ],
        ),
        (
            "knative-eventing-mt-channel-broker.yaml",
            vec![
                (deployment("mt-broker-filter"), release("broker/filter")),
                (deployment("mt-broker-ingress"), release("broker/ingress")),
                (deployment("mt-broker-controller"), release("mtchannel_broker")),
            ],
        ),
    ];
    for (file, want) in expected {
        let documents = part(file);
        assert_eq!(workloads(&documents), want, "{file}");
        assert!(documents.iter().all(|d| d.kind() != "CustomResourceDefinition" || file.contains("in-memory")), "{file} holds CRDs");
        assert!(!documents.iter().any(|d| d.text.contains("ko://")), "{file} keeps a ko:// reference");
    }
    let core = part("knative-eventing-core.yaml");
    let controller = core.iter().find(|d| d.id() == deployment("eventing-controller")).expect("controller");
    assert!(controller.text.contains(&release("apiserver_receive_adapter")), "the ApiServerSource adapter image is resolved too");
}

#[test]
fn the_gateway_layer_is_upstreams_contour_setup_with_lampyrs_edits_named() {
    let modules = modules();
    let part = |file: &str| {
        let part = gateway::PARTS.iter().find(|p| p.file == file).expect("listed");
        gateway::documents(&modules, part).unwrap_or_else(|e| panic!("{e}"))
    };
    let find = |documents: &[Document], id: &str| documents.iter().find(|d| d.id() == id).cloned().unwrap_or_else(|| panic!("no {id}"));
    let crds = part("gateway-api-crds.yaml");
    assert!(crds.iter().all(|d| d.kind() == "CustomResourceDefinition"));
    assert!(ids(&crds).contains(&"CustomResourceDefinition httproutes.gateway.networking.k8s.io".to_string()));

    let contour = part("contour-gateway-provisioner.yaml");
    assert!(ids(&contour).contains(&"CustomResourceDefinition contourdeployments.projectcontour.io".to_string()));
    let provisioner = find(&contour, "Deployment projectcontour/contour-gateway-provisioner");
    let container = &provisioner.object["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], "ghcr.io/projectcontour/contour:v1.29.1");
    assert!(container["args"].as_array().expect("args").contains(&serde_json::json!("--envoy-image=docker.io/envoyproxy/envoy:v1.36.2")));
    assert!(provisioner.origin.contains("edited by Lampyr"), "{}", provisioner.origin);

    let ngw = part("net-gateway-api.yaml");
    let image = |id: &str| find(&ngw, id).object["spec"]["template"]["spec"]["containers"][0]["image"].as_str().map(str::to_string);
    let release = |cmd: &str| Some(format!("gcr.io/knative-releases/knative.dev/net-gateway-api/cmd/{cmd}:v1.15.0"));
    assert_eq!(image("Deployment knative-serving/net-gateway-api-controller"), release("controller"));
    assert_eq!(image("Deployment knative-serving/net-gateway-api-webhook"), release("webhook"));
    assert!(!ngw.iter().any(|d| d.text.contains("ko://")), "a ko:// reference is left");
    let config = find(&ngw, "ConfigMap knative-serving/config-gateway");
    assert!(config.object["data"]["external-gateways"].as_str().is_some_and(|g| g.contains("contour-external/knative-external")));
    assert_eq!(
        ngw.iter().filter(|d| d.name() == "config-gateway").count(),
        1,
        "upstream's example config-gateway is replaced, not doubled"
    );

    let gateways = part("contour-gateways.yaml");
    let external = find(&gateways, "Gateway contour-external/knative-external");
    assert!(!external.origin.contains("edited"), "upstream's Gateway is applied as it is");
    let ports: Vec<u64> =
        external.object["spec"]["listeners"].as_array().expect("listeners").iter().filter_map(|l| l["port"].as_u64()).collect();
    assert_eq!(ports, [80, 443]);
    for namespace in ["contour-external", "contour-internal"] {
        let deployment = find(&gateways, &format!("ContourDeployment {namespace}/{namespace}"));
        assert_eq!(deployment.object["spec"]["envoy"]["networkPublishing"]["type"], "ClusterIPService", "{namespace}");
        assert_eq!(deployment.object["spec"]["envoy"]["deployment"]["replicas"], 1, "{namespace}");
        assert_eq!(deployment.object["spec"]["runtimeSettings"]["enableExternalNameService"], true, "Revisions' Services are ExternalName");
    }
    let node_ports = find(&gateways, "Service contour-external/envoy-knative-external-nodeports");
    assert_eq!(node_ports.object["spec"]["type"], "NodePort");
}

#[test]
fn cert_managers_manifest_is_the_release_the_binaries_are_built_from() {
    let modules = modules();
    let documents = cert_manager::documents(&modules).unwrap_or_else(|e| panic!("{e}"));
    let version = cert_manager::version(&documents).unwrap_or_else(|e| panic!("{e}"));
    let go_mod = std::fs::read_to_string(repo().join("knative/cert-manager/go.mod")).expect("knative/cert-manager/go.mod");
    assert!(
        go_mod.lines().any(|l| l.split_whitespace().collect::<Vec<_>>() == ["github.com/cert-manager/cert-manager", version.as_str()]),
        "knative/cert-manager/go.mod must pin github.com/cert-manager/cert-manager {version}, the manifest's release"
    );
    let crds: Vec<&str> = documents.iter().filter(|d| d.kind() == "CustomResourceDefinition").map(|d| d.name()).collect();
    assert!(crds.contains(&cert_manager::CERTIFICATES_CRD), "{crds:?}");
    for (deployment, container) in cert_manager::DEPLOYMENTS {
        let found = documents.iter().find(|d| d.kind() == "Deployment" && d.name() == deployment).expect("listed");
        let image = found.object.pointer("/spec/template/spec/containers/0/image").and_then(|i| i.as_str()).unwrap_or_default();
        assert_eq!(found.object.pointer("/spec/template/spec/containers/0/name").and_then(|n| n.as_str()), Some(container));
        assert_eq!(image, format!("quay.io/jetstack/{container}:{version}"), "{deployment} runs upstream's image");
    }
}
