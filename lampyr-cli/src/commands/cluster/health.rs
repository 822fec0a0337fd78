//! `ly cluster health`: one pass/fail line per component, exit code 1 when any fails.

use lampyr_api::keys::{FLEET_KEY_SECRET_KEY, FLEET_KEY_SECRET_NAME, FLEET_KEY_SECRET_NAMESPACE};
use lampyr_artifact::reference::Repository;
use lampyr_artifact::registry::RegistryClient;
use serde_json::Value;

use super::kubectl::{Kubectl, KubectlError};
use super::plan::{GRANT_POLICY, INSTALLATION, ObjectRef, PUBLIC_SERVICE, SYSTEM_NAMESPACE};
use super::{ClusterError, read_plan};
use crate::commands::fleet_key::{StoredKey, stored};
use crate::ui::{Color, Ui};

/// What to do when cert-manager is missing.
pub const CERT_MANAGER_ADVICE: &str = "run `ly cluster install` with certManager.install: true (the default) to install the \
     Workspace's k8s/cert-manager.yaml, or install cert-manager yourself (ly never upgrades one that is there)";

/// What is wrong when cert-manager's csi-driver is missing, and what to do.
pub const CSI_DRIVER_MISSING: &str = "cert-manager's csi-driver is not installed (no CSIDriver csi.cert-manager.io); ly does \
     not install it (docs/cert-manager.md says why): install it yourself if Pods mount certificates through it \
     (https://cert-manager.io/docs/usage/csi-driver/installation/); Lampyr does not need it";

/// One health check's outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    /// The component.
    pub component: &'static str,
    /// Whether it passed.
    pub ok: bool,
    /// What was found.
    pub detail: String,
}

impl Check {
    fn new(component: &'static str, result: Result<String, String>) -> Self {
        match result {
            Ok(detail) => Check { component, ok: true, detail },
            Err(detail) => Check { component, ok: false, detail },
        }
    }
}

/// Runs every check, prints the table, and fails when any check failed.
pub fn run(kubectl: &Kubectl, ui: &mut Ui) -> Result<(), ClusterError> {
    ui.step("checking Lampyr's components");
    let checks = checks(kubectl);
    for check in &checks {
        let mark = if check.ok { ui.paint(Color::Green, "PASS") } else { ui.paint(Color::Red, "FAIL") };
        ui.line(format!("{mark}  {:<20} {}", check.component, check.detail));
    }
    let failed = checks.iter().filter(|c| !c.ok).count();
    if failed == 0 { Ok(()) } else { Err(ClusterError::Unhealthy { failed, total: checks.len() }) }
}

/// Every check, in order; when the API server is unreachable the rest fail with that reason.
pub fn checks(kubectl: &Kubectl) -> Vec<Check> {
    let api = kubectl.run(&["get", "--raw", "/readyz"], None).map(|_| "reachable, /readyz ok".to_string());
    let api = Check::new("api-server", api.map_err(|e| e.to_string()));
    if !api.ok {
        let unreachable = "not checked: the API server is unreachable (check --context/--kubeconfig)".to_string();
        let rest = [
            "installation",
            "crds",
            "webhook",
            "controllers",
            "router",
            "networking",
            "eventing",
            "cert-manager",
            "fleet-key",
            "template-repository",
        ];
        return std::iter::once(api).chain(rest.map(|c| Check::new(c, Err(unreachable.clone())))).collect();
    }
    let plan = read_plan(kubectl).map_err(|e| e.to_string());
    let installed = match &plan {
        Ok(Some(plan)) => Ok(format!("Secret {SYSTEM_NAMESPACE}/{INSTALLATION}: {} objects", plan.len())),
        Ok(None) => Err("no installation record: run `ly cluster install`".to_string()),
        Err(e) => Err(e.clone()),
    };
    let plan = plan.ok().flatten().unwrap_or_default();
    vec![
        api,
        Check::new("installation", installed),
        Check::new("crds", crds(kubectl, &plan)),
        Check::new("webhook", webhook(kubectl)),
        Check::new("controllers", controllers(kubectl)),
        Check::new("router", router(kubectl)),
        Check::new("networking", networking(kubectl)),
        Check::new("eventing", eventing(kubectl, &plan)),
        Check::new("cert-manager", cert_manager(kubectl)),
        Check::new("fleet-key", fleet_key(kubectl)),
        Check::new("template-repository", template_repository(kubectl)),
    ]
}

fn text(e: KubectlError) -> String {
    e.to_string()
}

/// Every CRD the installation applied exists and is established.
fn crds(kubectl: &Kubectl, plan: &[ObjectRef]) -> Result<String, String> {
    let wanted: Vec<&str> = plan.iter().filter(|o| o.kind == "CustomResourceDefinition").map(|o| o.name.as_str()).collect();
    if wanted.is_empty() {
        return Err("no CRDs recorded: run `ly cluster install`".into());
    }
    let list = kubectl.get_json("customresourcedefinitions", None).map_err(text)?.unwrap_or_default();
    let established = |name: &str| {
        list["items"].as_array().into_iter().flatten().any(|crd| crd["metadata"]["name"] == name && condition(crd, "Established"))
    };
    let missing: Vec<&str> = wanted.iter().copied().filter(|n| !established(n)).collect();
    if missing.is_empty() { Ok(format!("{} established", wanted.len())) } else { Err(format!("not established: {}", missing.join(", "))) }
}

/// Whether `object` has condition `kind` with status True.
fn condition(object: &Value, kind: &str) -> bool {
    object["status"]["conditions"].as_array().into_iter().flatten().any(|c| c["type"] == kind && c["status"] == "True")
}

/// The Knative webhook admits (and defaults) a Service: a server-side dry run in `default`.
fn webhook(kubectl: &Kubectl) -> Result<String, String> {
    let service = serde_json::json!({
        "apiVersion": "serving.knative.dev/v1", "kind": "Service",
        "metadata": { "name": "ly-health-check", "namespace": "default" },
        "spec": { "template": { "spec": { "containers": [{ "image": "registry.example.com/health@sha256:0000000000000000000000000000000000000000000000000000000000000000" }] } } },
    });
    let out = kubectl
        .run(&["create", "--dry-run=server", "-o", "json", "-f", "-"], Some(&service.to_string()))
        .map_err(|e| format!("a dry-run Knative Service was not admitted: {e}"))?;
    let defaulted: Value = serde_json::from_str(&out).unwrap_or_default();
    match defaulted.pointer("/spec/template/spec/containerConcurrency") {
        Some(_) => Ok("admits and defaults a Knative Service (dry run)".into()),
        None => Err("a dry-run Knative Service was not defaulted: is the webhook registered?".into()),
    }
}

/// A Deployment's availability: `Ok("name: a/b available")` or why not.
fn deployment(kubectl: &Kubectl, namespace: &str, name: &str) -> Result<String, String> {
    let found = kubectl.get_json(&format!("deployment/{name}"), Some(namespace)).map_err(text)?;
    let deployment = found.ok_or_else(|| format!("{namespace}/{name}: missing"))?;
    let want = deployment["spec"]["replicas"].as_u64().unwrap_or(1);
    let available = deployment["status"]["availableReplicas"].as_u64().unwrap_or(0);
    let summary = format!("{namespace}/{name} {available}/{want} available");
    if condition(&deployment, "Available") && available >= want { Ok(summary) } else { Err(summary) }
}

/// Results of several checks as one: all must pass.
fn all(results: Vec<Result<String, String>>) -> Result<String, String> {
    let ok = results.iter().all(Result::is_ok);
    let joined = results.into_iter().map(|r| r.unwrap_or_else(|e| e)).collect::<Vec<_>>().join("; ");
    if ok { Ok(joined) } else { Err(joined) }
}

/// Lampyr's Knative controller, lampyr-controller and fiberd-k8s-controller are available.
fn controllers(kubectl: &Kubectl) -> Result<String, String> {
    all(vec![
        deployment(kubectl, "knative-serving", "lampyr-knative-controller"),
        deployment(kubectl, SYSTEM_NAMESPACE, "lampyr-controller"),
        deployment(kubectl, SYSTEM_NAMESPACE, "fiberd-k8s-controller"),
    ])
}

/// fiber-router is available and its internal and public Services exist.
fn router(kubectl: &Kubectl) -> Result<String, String> {
    let service = |name: &str| -> Result<String, String> {
        let found = kubectl.get_json(&format!("service/{name}"), Some(SYSTEM_NAMESPACE)).map_err(text)?;
        found
            .map(|s| format!("Service {SYSTEM_NAMESPACE}/{name} ({})", s["spec"]["type"].as_str().unwrap_or("ClusterIP")))
            .ok_or_else(|| format!("Service {SYSTEM_NAMESPACE}/{name}: missing"))
    };
    all(vec![deployment(kubectl, SYSTEM_NAMESPACE, "fiber-router"), service("fiber-router"), service(PUBLIC_SERVICE)])
}

/// The KIngress layer `config-network` names: fiber-router's own class needs nothing more; the
/// Gateway API layer needs its controllers, both Gateways programmed, and the Contour and Envoy
/// the provisioner runs for each (`contour-GATEWAY`, `envoy-GATEWAY`) available.
fn networking(kubectl: &Kubectl) -> Result<String, String> {
    let config = kubectl.get_json("configmap/config-network", Some("knative-serving")).map_err(text)?;
    let class = config.as_ref().and_then(|c| c["data"]["ingress-class"].as_str().map(str::to_string)).unwrap_or_default();
    if class != lampyr_manifests::gateway::CLASS {
        return Ok(format!("ingress-class {class}: fiber-router's own or one ly does not install (not checked)"));
    }
    let gateway = |namespace: &str, name: &str| -> Result<String, String> {
        let found = kubectl.get_json(&format!("gateways.gateway.networking.k8s.io/{name}"), Some(namespace)).map_err(text)?;
        let gateway = found.ok_or_else(|| format!("Gateway {namespace}/{name}: missing"))?;
        let summary = format!("Gateway {namespace}/{name}");
        if condition(&gateway, "Programmed") { Ok(format!("{summary} programmed")) } else { Err(format!("{summary} not programmed")) }
    };
    use lampyr_manifests::gateway::{EXTERNAL_GATEWAY, EXTERNAL_NAMESPACE, INTERNAL_GATEWAY, INTERNAL_NAMESPACE, PROVISIONER_NAMESPACE};
    let mut results = vec![
        deployment(kubectl, "knative-serving", "net-gateway-api-controller"),
        deployment(kubectl, "knative-serving", "net-gateway-api-webhook"),
        deployment(kubectl, PROVISIONER_NAMESPACE, "contour-gateway-provisioner"),
    ];
    for (namespace, name) in [(EXTERNAL_NAMESPACE, EXTERNAL_GATEWAY), (INTERNAL_NAMESPACE, INTERNAL_GATEWAY)] {
        results.push(gateway(namespace, name));
        results.push(deployment(kubectl, namespace, &format!("contour-{name}")));
        results.push(deployment(kubectl, namespace, &format!("envoy-{name}")));
    }
    all(results)
}

/// The Deployment of Lampyr's AzureEventGridSource adapter (installed with Eventing).
const EVENTGRID_ADAPTER: &str = "eventgrid-adapter";

/// Knative Eventing, when the installation applied it: each of its Deployments (and the
/// eventgrid-adapter's) available, and
/// its webhook admitting and defaulting a Broker (a server-side dry run in `default`).
fn eventing(kubectl: &Kubectl, plan: &[ObjectRef]) -> Result<String, String> {
    let namespace = lampyr_manifests::eventing::NAMESPACE;
    let of_eventing = |o: &&ObjectRef| match o.namespace.as_deref() {
        Some(ns) if ns == namespace => true,
        Some(SYSTEM_NAMESPACE) => o.name == EVENTGRID_ADAPTER,
        _ => false,
    };
    let deployments: Vec<&ObjectRef> = plan.iter().filter(|o| o.kind == "Deployment").filter(of_eventing).collect();
    if deployments.is_empty() {
        return Ok("not installed (`ly cluster install --eventing` installs it)".into());
    }
    let mut results: Vec<Result<String, String>> =
        deployments.iter().map(|d| deployment(kubectl, d.namespace.as_deref().unwrap_or_default(), &d.name)).collect();
    let broker = serde_json::json!({
        "apiVersion": "eventing.knative.dev/v1", "kind": "Broker",
        "metadata": { "name": "ly-health-check", "namespace": "default" },
    });
    let admitted = kubectl
        .run(&["create", "--dry-run=server", "-o", "json", "-f", "-"], Some(&broker.to_string()))
        .map_err(|e| format!("a dry-run Broker was not admitted: {e}"))
        .and_then(|out| {
            let defaulted: Value = serde_json::from_str(&out).unwrap_or_default();
            match defaulted.pointer("/metadata/annotations/eventing.knative.dev~1broker.class").and_then(Value::as_str) {
                Some(class) => Ok(format!("admits and defaults a Broker (class {class}, dry run)")),
                None => Err("a dry-run Broker was not defaulted: is the Eventing webhook registered?".into()),
            }
        });
    results.push(admitted);
    all(results)
}

/// cert-manager: its CRD, its Deployments available when it runs in namespace `cert-manager`
/// (as the Workspace's manifest installs it), and the csi-driver's CSIDriver.
fn cert_manager(kubectl: &Kubectl) -> Result<String, String> {
    use lampyr_manifests::cert_manager::{CERTIFICATES_CRD, DEPLOYMENTS, NAMESPACE};
    if !cert_manager_installed(kubectl).map_err(text)? {
        return Err(format!("cert-manager is not installed (no {CERTIFICATES_CRD} CRD): {CERT_MANAGER_ADVICE}"));
    }
    let mut results = Vec::new();
    if kubectl.get_json(&format!("deployment/{}", DEPLOYMENTS[0].0), Some(NAMESPACE)).map_err(text)?.is_some() {
        results.extend(DEPLOYMENTS.iter().map(|(name, _)| deployment(kubectl, NAMESPACE, name)));
    } else {
        results.push(Ok(format!("{CERTIFICATES_CRD} present (cert-manager runs outside namespace {NAMESPACE}: not checked)")));
    }
    results.push(if csi_driver_installed(kubectl).map_err(text)? {
        Ok("CSIDriver csi.cert-manager.io present".into())
    } else {
        Err(CSI_DRIVER_MISSING.into())
    });
    all(results)
}

/// Whether the cluster has cert-manager (its Certificate CRD).
pub fn cert_manager_installed(kubectl: &Kubectl) -> Result<bool, KubectlError> {
    let crd = format!("customresourcedefinition/{}", lampyr_manifests::cert_manager::CERTIFICATES_CRD);
    Ok(kubectl.get_json(&crd, None)?.is_some())
}

/// Whether the cluster has cert-manager's csi-driver (its CSIDriver).
pub fn csi_driver_installed(kubectl: &Kubectl) -> Result<bool, KubectlError> {
    Ok(kubectl.get_json("csidriver/csi.cert-manager.io", None)?.is_some())
}

/// The fleet key Secret: absent until the first `ly deploy` (fine), or a valid key.
fn fleet_key(kubectl: &Kubectl) -> Result<String, String> {
    let secret = format!("Secret {FLEET_KEY_SECRET_NAMESPACE}/{FLEET_KEY_SECRET_NAME}");
    match stored(kubectl).map_err(text)? {
        StoredKey::Absent => Ok(format!("{secret} not created yet: the first `ly deploy` creates it")),
        StoredKey::NoKey => {
            Err(format!("{secret} has no data key \"{FLEET_KEY_SECRET_KEY}\"; delete it (templates sealed to it will not open)"))
        }
        StoredKey::Invalid(why) => Err(format!("{secret} does not hold a fleet key: {why}")),
        StoredKey::Key(key) => Ok(format!("{secret}: public key {}", key.public())),
    }
}

/// The recorded template repository, reachable from this host where ly pushes to it, and the
/// installation's GrantPolicy admitting it for grant Pods.
fn template_repository(kubectl: &Kubectl) -> Result<String, String> {
    let config = kubectl.get_json(&format!("configmap/{INSTALLATION}"), Some(SYSTEM_NAMESPACE)).map_err(text)?;
    let recorded = |key: &str| config.as_ref().and_then(|c| c["data"][key].as_str().map(str::to_string)).filter(|v| !v.is_empty());
    let (Some(pull), Some(push)) = (recorded("templateRepository"), recorded("templatePush")) else {
        return Err("no template repository recorded: run `ly cluster install`".into());
    };
    let policy = kubectl.get_json(&format!("grantpolicy.v1alpha1.fiber.lampyr.dev/{GRANT_POLICY}"), None).map_err(text)?;
    let policy = policy.ok_or(format!("GrantPolicy {GRANT_POLICY} is missing: run `ly cluster install`"))?;
    let zygote: Vec<&str> = policy["spec"]["zygoteRegistries"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    let admitted = Repository::parse(&pull).is_ok_and(|p| zygote.iter().filter_map(|z| Repository::parse(z).ok()).any(|z| z.contains(&p)));
    if !admitted {
        return Err(format!(
            "GrantPolicy {GRANT_POLICY}'s zygoteRegistries ({}) do not admit {pull}: run `ly cluster install`",
            zygote.join(", ")
        ));
    }
    let repository = Repository::parse(&push).map_err(|e| format!("recorded push repository {push}: {e}"))?;
    let probe = async { RegistryClient::for_repository(&repository)?.probe(&repository).await };
    let reached = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?.block_on(probe);
    reached.map_err(|e| format!("{push} does not answer from this host ({e}); ly deploy pushes templates there"))?;
    Ok(format!("pushed to {push} (answers), pulled by grant Pods from {pull} (anonymous pulls not probed)"))
}
