//! `ly cluster install | health | uninstall` against a real API server
//! (`lampyr_testenv::Cluster`: kube-apiserver, etcd, kube-controller-manager,
//! upstream Knative's CRDs and webhook, no kubelet), running the `ly` binary
//! with the environment's kubeconfig and context.
//!
//! One test: the steps share the cluster and each depends on the last
//! (refusals change nothing, install, health, reinstall changes nothing, uninstall).

mod support;

use std::collections::BTreeMap;
use std::ops::Deref;
use std::process::Stdio;

use lampyr_testenv::Cluster;
use serde_json::Value;
use support::{DIGEST, FIBER_ROUTER_INGRESS, Ly, health_table, path, stderr, text};

struct Env(Ly<'static>);

impl Deref for Env {
    type Target = Ly<'static>;
    fn deref(&self) -> &Ly<'static> {
        &self.0
    }
}

impl Env {
    fn new() -> Self {
        Env(support::ly(Cluster::shared()))
    }

    fn ly(&self, args: &[&str]) -> std::process::Output {
        self.0.cluster(args)
    }

    /// The Lampyr objects a refused install must not have created.
    fn assert_nothing_installed(&self, after: &str) {
        for (resource, namespace) in [
            ("namespace/lampyr-system", None),
            ("customresourcedefinition/grantpolicies.fiber.lampyr.dev", None),
            ("customresourcedefinition/capacitygrants.fiber.lampyr.dev", None),
            ("deployment/webhook", Some("knative-serving")),
            ("customresourcedefinition/certificates.cert-manager.io", None),
            ("namespace/cert-manager", None),
        ] {
            assert!(!self.exists(resource, namespace), "{after}: {resource} exists");
        }
        let network = self.kubectl(&["get", "configmap/config-network", "-n", "knative-serving", "-o", "jsonpath={.data.ingress-class}"]);
        assert_eq!(text(&network), "", "{after}: config-network was changed");
    }

    /// [`Env::resource_versions`] once the cluster's own controllers have settled them (the
    /// ClusterRole aggregation controller fills aggregated roles a moment after an install
    /// adds roles they select): the same twice, a second apart, within a minute.
    fn settled_resource_versions(&self) -> BTreeMap<String, String> {
        let mut last = self.resource_versions();
        for _ in 0..60 {
            std::thread::sleep(std::time::Duration::from_secs(1));
            let now = self.resource_versions();
            if now == last {
                return now;
            }
            last = now;
        }
        panic!("the installed objects' resourceVersions kept changing for a minute: {last:?}");
    }

    /// Every object of the retained plan, with its resourceVersion.
    fn resource_versions(&self) -> BTreeMap<String, String> {
        let template = "--template={{index .data \"plan\" | base64decode}}";
        let out = self.kubectl(&["get", "secret/lampyr-installation", "-n", "lampyr-system", "-o", "go-template", template]);
        let plan: Vec<Value> = serde_json::from_str(&text(&out)).expect("the plan is JSON");
        assert!(plan.len() > 20, "the plan lists the installed objects: {plan:?}");
        let stubs: Vec<String> = plan
            .iter()
            .map(|o| {
                let mut metadata = serde_json::json!({ "name": o["name"] });
                if let Some(ns) = o.get("namespace") {
                    metadata["namespace"] = ns.clone();
                }
                serde_json::json!({ "apiVersion": o["apiVersion"], "kind": o["kind"], "metadata": metadata }).to_string()
            })
            .collect();
        let mut child = self
            .cluster
            .kubectl()
            .args(["get", "-f", "-", "-o", "json"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl");
        use std::io::Write as _;
        child.stdin.take().expect("stdin").write_all(stubs.join("\n---\n").as_bytes()).expect("write");
        let out = child.wait_with_output().expect("kubectl");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let list: Value = serde_json::from_slice(&out.stdout).expect("json");
        let items = list["items"].as_array().expect("a List");
        assert_eq!(items.len(), plan.len(), "every planned object exists");
        items
            .iter()
            .map(|o| {
                let id = format!("{}/{}/{}", o["kind"], o["metadata"]["namespace"].as_str().unwrap_or(""), o["metadata"]["name"]);
                (id, o["metadata"]["resourceVersion"].as_str().unwrap_or_default().to_string())
            })
            .collect()
    }
}

fn refused(env: &Env, args: &[&str], message: &str) {
    let out = env.ly(args);
    assert!(!out.status.success(), "{args:?} must be refused:\n{}", stderr(&out));
    assert!(stderr(&out).contains(message), "{args:?}: expected {message:?} in:\n{}", stderr(&out));
    env.assert_nothing_installed(&format!("{args:?}"));
}

#[tokio::test(flavor = "multi_thread")]
async fn install_health_reinstall_uninstall_on_an_existing_context() {
    let env = Env::new();
    env.assert_nothing_installed("before anything");
    // Templates go to a real registry, so health can check it answers.
    let registry = lampyr_testenv::TestRegistry::start();
    let templates = format!("http://{}/lampyr/fiberd-templates", registry.host());
    // The API-server tier runs no Contour or Envoy: fiber-router's own class is pinned.
    let good = env.settings("platform.yaml", &[("zygoteRegistries", &format!("[{templates}]")), FIBER_ROUTER_INGRESS]);
    let approve = "--approve-provider-manifests";

    // Every refusal says what is wrong before anything is changed.
    let unpinned = env.settings("unpinned.yaml", &[("grantImage", "registry.example.com/lampyr/fiberd:preview")]);
    refused(
        &env,
        &["install", approve, "--provider-config", path(&unpinned)],
        "grantImage \"registry.example.com/lampyr/fiberd:preview\" is not pinned",
    );
    let bad_zygote = env.settings("zygote.yaml", &[("zygoteRegistries", "[Registry/Templates]")]);
    refused(
        &env,
        &["install", approve, "--provider-config", path(&bad_zygote)],
        "zygoteRegistries entry \"Registry/Templates\" is not a repository",
    );
    let no_zygote = env.settings("no-zygote.yaml", &[("zygoteRegistries", "[]")]);
    refused(&env, &["install", approve, "--provider-config", path(&no_zygote)], "set zygoteRegistries");
    let missing = env.settings("missing.yaml", &[("controllerManifest", "nowhere/controller.yaml")]);
    refused(&env, &["install", approve, "--provider-config", path(&missing)], "controllerManifest");
    refused(&env, &["install", approve, "--provider-config", path(&missing)], "nowhere/controller.yaml does not exist");
    refused(&env, &["install", "--provider-config", path(&good)], "stdin is not a terminal");
    // A Workspace scaffolded before Eventing was carried has no Eventing files: --eventing says which.
    let core = env.workspace.path().join("k8s/knative-eventing-core.yaml");
    let aside = env.workspace.path().join("eventing-core.yaml");
    std::fs::rename(&core, &aside).expect("move aside");
    refused(&env, &["install", approve, "--eventing", "--provider-config", path(&good)], "k8s/knative-eventing-core.yaml");
    std::fs::rename(&aside, &core).expect("move back");
    refused(&env, &["uninstall", approve, "--delete-cluster"], "no recorded provider");
    refused(&env, &["install", approve, "--provider", "azure", "--provider-config", path(&good)], "providers are not supported");
    let mirrors = "{\"localhost:5001\": {registry: \"reg-a:5000\", plainHttp: true}, \"localhost:5002\": {registry: \"reg-b:5000\", plainHttp: true}}";
    let several = env.settings(
        "several.yaml",
        &[("registryMirrors", mirrors), ("zygoteRegistries", "[http://reg-a:5000/lampyr, http://reg-b:5000/lampyr]")],
    );
    refused(&env, &["install", approve, "--provider-config", path(&several)], "admits several local registry mirrors");
    let no_mirror = env.settings("no-mirror.yaml", &[("registryMirrors", mirrors)]);
    std::fs::write(
        &no_mirror,
        std::fs::read_to_string(&no_mirror)
            .expect("read")
            .replace("zygoteRegistries: [registry.example.com/lampyr/fiberd-templates]\n", ""),
    )
    .expect("write");
    refused(&env, &["install", approve, "--provider-config", path(&no_mirror)], "2 local registry mirrors");

    // Before install, health fails and says what to do.
    let before = env.ly(&["health"]);
    assert_eq!(before.status.code(), Some(1), "{}", stderr(&before));
    assert!(text(&before).contains("run `ly cluster install`"), "{}", text(&before));

    // Install.
    let installed = env.ly(&["install", approve, "--provider-config", path(&good)]);
    assert!(installed.status.success(), "install failed:\n{}", stderr(&installed));
    let log = stderr(&installed);
    for expected in [
        "==> applying Lampyr CRDs",
        "==> applying fiberd-k8s-controller",
        "+ GrantPolicy lampyr",
        // The cluster has no cert-manager: the Workspace's is applied first; no csi-driver.
        "cert-manager is missing: installing it from k8s/cert-manager.yaml",
        "==> applying cert-manager (CRDs, controller, webhook, cainjector)",
        "+ CustomResourceDefinition certificates.cert-manager.io",
        "cert-manager's csi-driver is not installed",
    ] {
        assert!(log.contains(expected), "{expected:?} missing from:\n{log}");
    }
    let policy = env.kubectl(&["get", "grantpolicy/lampyr", "-o", "jsonpath={.spec.allowedRepositories}"]);
    assert_eq!(text(&policy), r#"["registry.example.com/lampyr/fiberd","registry.example.com/lampyr/fiberd-helper"]"#);
    let zygote = env.kubectl(&["get", "grantpolicy/lampyr", "-o", "jsonpath={.spec.zygoteRegistries}"]);
    assert_eq!(text(&zygote), format!(r#"["{templates}"]"#), "grant Pods pull templates only from there");
    let controller = env.kubectl(&[
        "get",
        "deployment/lampyr-controller",
        "-n",
        "lampyr-system",
        "-o",
        "jsonpath={.spec.template.spec.containers[0].args}",
    ]);
    assert!(text(&controller).contains(&format!("--plain-http-registry={}", registry.host())), "{}", text(&controller));
    let network = env.kubectl(&["get", "configmap/config-network", "-n", "knative-serving", "-o", "jsonpath={.data.ingress-class}"]);
    assert_eq!(text(&network), "fiber.ingress.networking.knative.dev");
    let domain = env.kubectl(&["get", "configmap/config-domain", "-n", "knative-serving", "-o", "json"]);
    assert!(text(&domain).contains("\"apps.example.org\": \"\""), "{}", text(&domain));
    let args = env.kubectl(&[
        "get",
        "deployment/lampyr-controller",
        "-n",
        "lampyr-system",
        "-o",
        "jsonpath={.spec.template.spec.containers[0].args}",
    ]);
    assert!(text(&args).contains(&format!("--grant-image=registry.example.com/lampyr/fiberd@{DIGEST}")), "{}", text(&args));
    let node_ports = |service: &str| {
        let ports = env.kubectl(&["get", service, "-n", "lampyr-system", "-o", "jsonpath={.spec.type} {.spec.ports[*].nodePort}"]);
        text(&ports).trim().to_string()
    };
    assert_eq!(node_ports("service/fiber-router-public"), "NodePort 30080 30443", "the public edge: HTTP and HTTPS NodePorts");
    assert_eq!(node_ports("service/fiber-router"), "ClusterIP", "the internal listener stays inside the cluster");
    let provider = env.kubectl(&["get", "configmap/lampyr-installation", "-n", "lampyr-system", "-o", "jsonpath={.data.provider}"]);
    assert_eq!(text(&provider), "", "no provider is recorded");

    // Health: what can pass without a kubelet passes; Deployments are honestly not available.
    let health = env.ly(&["health"]);
    let table = health_table(&health);
    assert_eq!(health.status.code(), Some(1), "{}", text(&health));
    for passes in ["api-server", "installation", "crds", "webhook", "networking", "eventing", "fleet-key", "template-repository"] {
        assert_eq!(table.get(passes), Some(&true), "{passes} passes:\n{}", text(&health));
    }
    assert!(text(&health).contains("not installed (`ly cluster install --eventing` installs it)"), "{}", text(&health));
    assert!(text(&health).contains("ingress-class fiber.ingress.networking.knative.dev: fiber-router's own"), "{}", text(&health));
    for fails in ["controllers", "router", "cert-manager"] {
        assert_eq!(table.get(fails), Some(&false), "{fails} fails:\n{}", text(&health));
    }
    assert!(text(&health).contains("lampyr-system/fiber-router 0/2 available"), "{}", text(&health));
    assert!(text(&health).contains("cert-manager/cert-manager-webhook 0/1 available"), "{}", text(&health));
    assert!(stderr(&health).contains("3 of 11 health checks failed"), "{}", stderr(&health));

    // Reinstall changes nothing.
    let versions = env.settled_resource_versions();
    let again = env.ly(&["install", "--non-interactive", "--provider-config", path(&good)]);
    assert!(again.status.success(), "reinstall failed:\n{}", stderr(&again));
    assert!(stderr(&again).contains("cert-manager is installed: left as it is (ly never upgrades it)"), "{}", stderr(&again));
    assert!(!stderr(&again).contains("==> applying cert-manager"), "a reinstall never applies cert-manager: {}", stderr(&again));
    assert_eq!(env.resource_versions(), versions, "a reinstall changes no object");

    // --eventing adds Knative Eventing's objects; without a kubelet its Deployments are
    // honestly not available. A reinstall without the flag leaves it installed.
    let eventing = env.ly(&["install", "--non-interactive", "--eventing", "--provider-config", path(&good)]);
    assert!(eventing.status.success(), "install --eventing failed:\n{}", stderr(&eventing));
    assert!(stderr(&eventing).contains("==> applying Knative Eventing's CRDs"), "{}", stderr(&eventing));
    for (resource, namespace) in [
        ("customresourcedefinition/brokers.eventing.knative.dev", None),
        ("customresourcedefinition/inmemorychannels.messaging.knative.dev", None),
        ("deployment/eventing-webhook", Some("knative-eventing")),
        ("deployment/mt-broker-ingress", Some("knative-eventing")),
        ("deployment/imc-dispatcher", Some("knative-eventing")),
        ("customresourcedefinition/azureeventgridsources.sources.lampyr.dev", None),
        ("deployment/eventgrid-adapter", Some("lampyr-system")),
    ] {
        assert!(env.exists(resource, namespace), "{resource} is installed");
    }
    let versions = env.settled_resource_versions();
    let again = env.ly(&["install", "--non-interactive", "--eventing", "--provider-config", path(&good)]);
    assert!(again.status.success(), "reinstall --eventing failed:\n{}", stderr(&again));
    assert_eq!(env.resource_versions(), versions, "a reinstall with --eventing changes no object");
    let without = env.ly(&["install", "--non-interactive", "--provider-config", path(&good)]);
    assert!(without.status.success(), "reinstall failed:\n{}", stderr(&without));
    let health = env.ly(&["health"]);
    assert_eq!(health_table(&health).get("eventing"), Some(&false), "{}", text(&health));
    assert!(text(&health).contains("knative-eventing/eventing-controller 0/1 available"), "{}", text(&health));
    let broker = r#"{"apiVersion": "eventing.knative.dev/v1", "kind": "Broker", "metadata": {"name": "default", "namespace": "default"}}"#;
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("broker.json"), broker).expect("write");
    let made = env.kubectl(&["apply", "-f", path(&dir.path().join("broker.json"))]);
    assert!(made.status.success(), "{}", stderr(&made));

    // A fleet key made by a deploy is checked, and removed by uninstall.
    let key = lampyr_artifact::seal::FleetKey::generate().to_secret_string();
    let made =
        env.kubectl(&["create", "secret", "generic", "lampyr-fiberd-seal-key", "-n", "default", &format!("--from-literal=key={key}")]);
    assert!(made.status.success(), "{}", stderr(&made));
    let health = env.ly(&["health"]);
    assert_eq!(health_table(&health).get("fleet-key"), Some(&true), "{}", text(&health));
    assert!(text(&health).contains("public key age1"), "{}", text(&health));

    // A template registry that stops answering fails its check.
    drop(registry);
    let health = env.ly(&["health"]);
    assert_eq!(health_table(&health).get("template-repository"), Some(&false), "{}", text(&health));
    assert!(text(&health).contains("does not answer from this host"), "{}", text(&health));

    // Uninstall: no Lampyr object, no fleet key; what existed before (Knative) stays.
    let uninstalled = env.ly(&["uninstall", approve]);
    assert!(uninstalled.status.success(), "uninstall failed:\n{}", stderr(&uninstalled));
    assert!(!env.exists("secret/lampyr-fiberd-seal-key", Some("default")), "the fleet key is deleted");
    assert!(!env.exists("clusterrole/fiberd-k8s-controller", None));
    assert!(!env.exists("clusterrole/fiber-router", None));
    env.assert_nothing_installed("after uninstall");
    assert!(env.exists("customresourcedefinition/services.serving.knative.dev", None), "pre-existing Knative stays");
    assert!(!env.exists("customresourcedefinition/brokers.eventing.knative.dev", None), "Eventing is removed");
    assert!(!env.exists("namespace/knative-eventing", None), "Eventing's namespace is removed");
    assert!(!env.exists("customresourcedefinition/azureeventgridsources.sources.lampyr.dev", None), "the event source CRD is removed");
    assert!(env.exists("namespace/knative-serving", None));

    // Uninstall again: nothing left to do, still succeeds.
    let again = env.ly(&["uninstall", "--non-interactive"]);
    assert!(again.status.success(), "{}", stderr(&again));
    assert!(stderr(&again).contains("no Lampyr installation record"), "{}", stderr(&again));
}
