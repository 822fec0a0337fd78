//! What `ly cluster install` applies: the Workspace's manifests with the platform
//! settings put in, fiberd-k8s-controller, the GrantPolicy and the installation
//! record, in apply order; and the plan retained for reinstall and uninstall.

use std::path::{Path, PathBuf};

use base64::prelude::{BASE64_STANDARD, Engine as _};
use lampyr_artifact::reference::{self, Repository};
use lampyr_manifests::gateway;
use serde_json::{Value, json};

use super::settings::{Checked, ControllerManifest};

/// Lampyr's namespace, holding the installation record.
pub const SYSTEM_NAMESPACE: &str = "lampyr-system";
/// Name of the installation's Secret (plan, settings) and ConfigMap (provider identity).
pub const INSTALLATION: &str = "lampyr-installation";
/// Name of the GrantPolicy the installation owns.
pub const GRANT_POLICY: &str = "lampyr";
/// The Workspace manifests install applies, in order, with what each installs.
pub const WORKSPACE_MANIFESTS: [(&str, &str); 6] = [
    ("knative-serving-crds.yaml", "Knative Serving CRDs"),
    ("lampyr-crds.yaml", "Lampyr CRDs"),
    ("knative-serving-core.yaml", "Knative Serving core"),
    ("lampyr-knative-controller.yaml", "Lampyr's Knative controller"),
    ("lampyr-controller.yaml", "lampyr-controller"),
    ("fiber-router.yaml", "fiber-router"),
];

/// Why the plan could not be made. Nothing has been changed yet.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// A Workspace manifest does not parse (or is missing).
    #[error("{0}; fix the Workspace's k8s/ file, or re-create it with `ly scaffold workspace DIR --force`")]
    Manifest(#[from] lampyr_manifests::Error),
    /// The controller manifest could not be downloaded.
    #[error("downloading controllerManifest {url}: {why}; check the URL, or name a local file")]
    Download {
        /// The URL.
        url: String,
        /// Why.
        why: String,
    },
}

/// One object of the plan: what it is, and whether this installation created it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    /// `apiVersion`.
    pub api_version: String,
    /// `kind`.
    pub kind: String,
    /// Namespace, for a namespaced object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
    /// Whether it did not exist before the installation (only such objects are uninstalled).
    #[serde(default)]
    pub created: bool,
}

impl ObjectRef {
    /// The reference to `object` (`created` false).
    pub fn of(object: &Value) -> Self {
        let text = |p: &str| object.pointer(p).and_then(Value::as_str).unwrap_or_default().to_string();
        let namespace = Some(text("/metadata/namespace")).filter(|n| !n.is_empty());
        ObjectRef { api_version: text("/apiVersion"), kind: text("/kind"), namespace, name: text("/metadata/name"), created: false }
    }

    /// Same object (the version may differ).
    pub fn same(&self, other: &ObjectRef) -> bool {
        let group = |v: &str| v.rsplit_once('/').map(|(g, _)| g.to_string()).unwrap_or_default();
        group(&self.api_version) == group(&other.api_version)
            && self.kind == other.kind
            && self.namespace == other.namespace
            && self.name == other.name
    }

    /// `Kind.version.group/name`, as kubectl takes it.
    pub fn resource(&self) -> String {
        match self.api_version.rsplit_once('/') {
            Some((group, version)) => format!("{}.{version}.{group}/{}", self.kind.to_lowercase(), self.name),
            None => format!("{}/{}", self.kind.to_lowercase(), self.name),
        }
    }

    /// `Kind namespace/name`, for people.
    pub fn display(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{} {ns}/{}", self.kind, self.name),
            None => format!("{} {}", self.kind, self.name),
        }
    }

    /// The minimal object naming it (for `kubectl get/delete -f`).
    pub fn stub(&self) -> Value {
        let mut metadata = json!({ "name": self.name });
        if let Some(ns) = &self.namespace {
            metadata["namespace"] = json!(ns);
        }
        json!({ "apiVersion": self.api_version, "kind": self.kind, "metadata": metadata })
    }
}

/// A group of objects applied together, with progress.
#[derive(Clone, Debug)]
pub struct Step {
    /// What it installs.
    pub title: String,
    /// The objects, in order.
    pub objects: Vec<Value>,
}

impl Step {
    /// Whether the step holds CRDs (install waits for them to be established).
    pub fn crds(&self) -> Vec<String> {
        self.objects.iter().filter(|o| o["kind"] == "CustomResourceDefinition").map(|o| ObjectRef::of(o).name).collect()
    }
}

/// Drops every object a previous step applies already (the first spelling wins): applied
/// twice by one field manager, the second spelling would remove what only the first sets.
pub fn dedupe(steps: &mut [Step]) {
    let mut seen: Vec<ObjectRef> = Vec::new();
    for step in steps {
        step.objects.retain(|object| {
            let id = ObjectRef::of(object);
            let first = !seen.iter().any(|s| s.same(&id));
            seen.push(id);
            first
        });
    }
}

/// The Knative webhook reconciles the `rules` of its webhook configurations at run time; once
/// such a configuration exists, ly leaves them to it (re-applying the manifest's placeholder rules
/// would fight the webhook, and a reinstall would change the object every time).
pub fn leave_webhook_rules(object: &mut Value, live: &[ObjectRef]) {
    let id = ObjectRef::of(object);
    if !id.kind.ends_with("WebhookConfiguration") || !live.iter().any(|l| l.same(&id)) {
        return;
    }
    for webhook in object.get_mut("webhooks").and_then(Value::as_array_mut).into_iter().flatten() {
        let namespace = webhook.pointer("/clientConfig/service/namespace").and_then(Value::as_str);
        if matches!(namespace, Some("knative-serving" | lampyr_manifests::eventing::NAMESPACE))
            && let Some(fields) = webhook.as_object_mut()
        {
            fields.remove("rules");
        }
    }
}

/// Kubernetes fills the `rules` of a ClusterRole with an `aggregationRule` from the roles it
/// selects; ly leaves them to it (applying the manifest's empty `rules` would strip the role's
/// permissions until the controller fills them again, and change it on every reinstall).
pub fn leave_aggregated_rules(object: &mut Value) {
    if object["kind"] == "ClusterRole"
        && object.get("aggregationRule").is_some()
        && let Some(fields) = object.as_object_mut()
    {
        fields.remove("rules");
    }
}

/// Every step of an install, in order (the installation record is added by the caller):
/// with `cert_manager`, the Workspace's cert-manager first; the Gateway API layer's Workspace
/// files after Lampyr's when the ingress class is [`lampyr_manifests::gateway::CLASS`]; with
/// `eventing`, Knative Eventing's after those.
pub fn steps(workspace: &Path, checked: &Checked, cert_manager: bool, eventing: bool) -> Result<Vec<Step>, PlanError> {
    let mut files: Vec<(&str, &str)> = Vec::new();
    if cert_manager {
        files.extend(lampyr_manifests::cert_manager_files());
    }
    files.extend(WORKSPACE_MANIFESTS);
    if uses_gateway_layer(checked) {
        files.extend(lampyr_manifests::gateway_files());
    }
    if eventing {
        files.extend(lampyr_manifests::eventing_files());
    }
    let mut steps = Vec::new();
    for (file, title) in files {
        let path = workspace.join("k8s").join(file);
        let mut objects: Vec<Value> = lampyr_manifests::read(&path, &format!("k8s/{file}"))?.into_iter().map(|d| d.object).collect();
        objects.iter_mut().for_each(|o| {
            settle(o, checked);
            leave_aggregated_rules(o);
        });
        steps.push(Step { title: format!("{title} (k8s/{file})"), objects });
    }
    let (origin, text) = controller_manifest(&checked.controller)?;
    let objects = lampyr_manifests::parse(&text, &origin)?.into_iter().map(|d| d.object).collect();
    steps.push(Step { title: format!("fiberd-k8s-controller ({origin})"), objects });
    steps.push(Step {
        title: "GrantPolicy".into(),
        objects: vec![grant_policy(&checked.allowed_repositories, &checked.templates.zygote_registries, checked.registry_ca.as_deref())],
    });
    Ok(steps)
}

/// The controller manifest's origin and text (a file, or downloaded with curl).
fn controller_manifest(source: &ControllerManifest) -> Result<(String, String), PlanError> {
    match source {
        ControllerManifest::File(path) => {
            let text =
                std::fs::read_to_string(path).map_err(|source| lampyr_manifests::Error::Read { path: PathBuf::from(path), source })?;
            Ok((path.display().to_string(), text))
        }
        ControllerManifest::Url(url) => {
            let download = |why: String| PlanError::Download { url: url.clone(), why };
            let out = std::process::Command::new("curl")
                .args(["--fail", "--silent", "--show-error", "--location", "--proto", "=https", url])
                .output()
                .map_err(|e| download(format!("could not run curl: {e}")))?;
            if !out.status.success() {
                return Err(download(String::from_utf8_lossy(&out.stderr).trim().to_string()));
            }
            Ok((url.clone(), String::from_utf8_lossy(&out.stdout).into_owned()))
        }
    }
}

/// fiber-router's public Service: the only one reachable from outside the cluster
/// (with fiber-router's own KIngress class; behind the Gateway API layer it stays inside).
pub const PUBLIC_SERVICE: &str = "fiber-router-public";

/// Whether the installation puts the Gateway API layer (Envoy) in front of fiber-router.
pub fn uses_gateway_layer(checked: &Checked) -> bool {
    checked.settings.ingress.class == lampyr_manifests::gateway::CLASS
}

/// Puts the platform settings into the objects that carry them.
fn settle(object: &mut Value, checked: &Checked) {
    let settings = &checked.settings;
    let id = ObjectRef::of(object);
    match (id.kind.as_str(), id.namespace.as_deref(), id.name.as_str()) {
        ("ConfigMap", Some("knative-serving"), "config-network") => {
            object["data"]["ingress-class"] = json!(settings.ingress.class);
        }
        ("ConfigMap", Some("knative-serving"), "config-domain") => {
            object["data"][settings.domain.as_str()] = json!("");
        }
        ("Deployment", Some(SYSTEM_NAMESPACE), "fiber-router") => set_image(object, &settings.router_image),
        ("Deployment", Some(SYSTEM_NAMESPACE), "lampyr-controller") => {
            set_arg(object, "--grant-image", settings.grant_image.as_deref().unwrap_or_default());
            set_arg(object, "--helper-image", settings.helper_image.as_deref().unwrap_or_default());
            let plain_http = plain_http_registries(&checked.templates.zygote_registries);
            set_repeated_arg(object, "--plain-http-registry", &plain_http);
            for (flag, value) in settings.shared_grant.iter().flat_map(|g| g.controller_args()) {
                set_repeated_arg(object, flag, &[value]);
            }
            if let Some(pem) = &checked.registry_ca {
                set_env(object, lampyr_artifact::credentials::CA_PEM_ENV, pem);
            }
        }
        ("Service", Some(gateway::EXTERNAL_NAMESPACE), gateway::NODE_PORT_SERVICE) => set_node_ports(object, checked),
        // Envoy's Service holds the NodePorts; fiber-router is reached only through it.
        ("Service", Some(SYSTEM_NAMESPACE), PUBLIC_SERVICE) if uses_gateway_layer(checked) => {
            object["spec"]["type"] = json!("ClusterIP");
            for port in object.pointer_mut("/spec/ports").and_then(Value::as_array_mut).into_iter().flatten() {
                port.as_object_mut().map(|p| p.remove("nodePort"));
            }
        }
        ("Service", Some(SYSTEM_NAMESPACE), PUBLIC_SERVICE) => set_node_ports(object, checked),
        _ => {}
    }
}

/// Makes a public Service a NodePort Service: its port 80 on `ingress.httpNodePort`, 443 on `ingress.httpsNodePort`.
fn set_node_ports(object: &mut Value, checked: &Checked) {
    let ingress = &checked.settings.ingress;
    object["spec"]["type"] = json!("NodePort");
    for port in object.pointer_mut("/spec/ports").and_then(Value::as_array_mut).into_iter().flatten() {
        match port["port"].as_u64() {
            Some(80) => port["nodePort"] = json!(ingress.http_node_port),
            Some(443) => port["nodePort"] = json!(ingress.https_node_port),
            _ => {}
        }
    }
}

fn containers(object: &mut Value) -> impl Iterator<Item = &mut Value> {
    object.pointer_mut("/spec/template/spec/containers").and_then(Value::as_array_mut).into_iter().flatten()
}

fn set_image(object: &mut Value, image: &str) {
    containers(object).for_each(|c| c["image"] = json!(image));
}

/// Sets environment variable `name` to `value` in every container (replacing it if set).
fn set_env(object: &mut Value, name: &str, value: &str) {
    for container in containers(object) {
        let mut env: Vec<Value> = container["env"].as_array().into_iter().flatten().filter(|e| e["name"] != name).cloned().collect();
        env.push(json!({ "name": name, "value": value }));
        container["env"] = json!(env);
    }
}

/// Replaces `FLAG=…` in every container's args.
fn set_arg(object: &mut Value, flag: &str, value: &str) {
    let prefix = format!("{flag}=");
    for container in containers(object) {
        for arg in container.get_mut("args").and_then(Value::as_array_mut).into_iter().flatten() {
            if arg.as_str().is_some_and(|a| a.starts_with(&prefix)) {
                *arg = json!(format!("{prefix}{value}"));
            }
        }
    }
}

/// Replaces every `FLAG=…` in every container's args with one `FLAG=value` per value.
fn set_repeated_arg(object: &mut Value, flag: &str, values: &[String]) {
    let prefix = format!("{flag}=");
    for container in containers(object) {
        let args = &mut container["args"];
        let mut kept: Vec<Value> =
            args.as_array().into_iter().flatten().filter(|a| !a.as_str().is_some_and(|a| a.starts_with(&prefix))).cloned().collect();
        kept.extend(values.iter().map(|v| json!(format!("{prefix}{v}"))));
        *args = json!(kept);
    }
}

/// The registries of the `http://` repositories among `repositories` (spelled as the GrantPolicy takes them), each once.
fn plain_http_registries(repositories: &[String]) -> Vec<String> {
    let parsed: Vec<Repository> = repositories.iter().filter_map(|r| Repository::parse(r).ok()).collect();
    reference::plain_http_registries(&parsed)
}

/// The installation's GrantPolicy: the grant and helper images' repositories, the
/// repositories grant Pods may pull templates from, and the registry CAs they trust.
pub fn grant_policy(repositories: &[String], zygote_registries: &[String], registry_ca: Option<&str>) -> Value {
    let mut policy = json!({
        "apiVersion": "fiber.lampyr.dev/v1alpha1",
        "kind": "GrantPolicy",
        "metadata": { "name": GRANT_POLICY, "labels": { "app.kubernetes.io/part-of": "lampyr" } },
        "spec": { "allowedRepositories": repositories, "zygoteRegistries": zygote_registries },
    });
    if let Some(pem) = registry_ca {
        policy["spec"]["registryCA"] = json!(pem);
    }
    policy
}

/// The installation record: Lampyr's namespace, the ConfigMap (provider identity: none)
/// and the Secret retaining the plan and the settings.
pub fn record(plan: &[ObjectRef], checked: &Checked) -> Vec<Value> {
    let labels = json!({ "app.kubernetes.io/part-of": "lampyr", "app.kubernetes.io/managed-by": "ly" });
    let plan = serde_json::to_string_pretty(plan).unwrap_or_default();
    let settings = serde_json::to_string_pretty(&checked.settings).unwrap_or_default();
    vec![
        json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": SYSTEM_NAMESPACE, "labels": labels } }),
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": { "name": INSTALLATION, "namespace": SYSTEM_NAMESPACE, "labels": labels },
            "data": { "provider": "", "templateRepository": checked.templates.pull, "templatePush": checked.templates.push },
        }),
        json!({
            "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": { "name": INSTALLATION, "namespace": SYSTEM_NAMESPACE, "labels": labels },
            "data": { "plan": BASE64_STANDARD.encode(plan), "settings": BASE64_STANDARD.encode(settings) },
        }),
    ]
}

/// A YAML stream of `objects` (each as JSON, which is YAML).
pub fn stream(objects: &[Value]) -> String {
    objects.iter().map(|o| o.to_string()).collect::<Vec<_>>().join("\n---\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_http_template_registries_are_the_controllers_plain_http_registries() {
        let repositories = [
            "http://kind-registry:5000/lampyr/fiberd-templates".to_string(),
            "r.example.com/t".into(),
            "http://kind-registry:5000/other".into(),
        ];
        let registries = plain_http_registries(&repositories);
        assert_eq!(registries, ["kind-registry:5000"]);
        let mut deployment = json!({ "spec": { "template": { "spec": { "containers": [
            { "args": ["--grant-image=x", "--plain-http-registry=old:5000"] },
        ] } } } });
        set_repeated_arg(&mut deployment, "--plain-http-registry", &registries);
        assert_eq!(
            deployment.pointer("/spec/template/spec/containers/0/args"),
            Some(&json!(["--grant-image=x", "--plain-http-registry=kind-registry:5000"]))
        );
    }

    #[test]
    fn a_registry_ca_reaches_the_grant_policy_and_lampyr_controllers_environment() {
        let pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
        let policy = grant_policy(&["r.example.com/a".into()], &[], Some(pem));
        assert_eq!(policy["spec"]["registryCA"], pem);
        assert!(grant_policy(&["r.example.com/a".into()], &[], None)["spec"].get("registryCA").is_none());
        let mut deployment = json!({ "spec": { "template": { "spec": { "containers": [
            { "env": [{ "name": "RUST_LOG", "value": "info" }, { "name": "LAMPYR_REGISTRY_CA_PEM", "value": "old" }] },
        ] } } } });
        set_env(&mut deployment, lampyr_artifact::credentials::CA_PEM_ENV, pem);
        assert_eq!(
            deployment.pointer("/spec/template/spec/containers/0/env"),
            Some(&json!([{ "name": "RUST_LOG", "value": "info" }, { "name": "LAMPYR_REGISTRY_CA_PEM", "value": pem }])),
            "set once, replacing what was there"
        );
    }

    #[test]
    fn object_refs_name_kubectl_resources() {
        let policy = ObjectRef::of(&grant_policy(&["r.example.com/a".into()], &[], None));
        assert_eq!(policy.resource(), "grantpolicy.v1alpha1.fiber.lampyr.dev/lampyr");
        let cm = ObjectRef::of(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "n"}}));
        assert_eq!((cm.resource().as_str(), cm.display().as_str()), ("configmap/c", "ConfigMap n/c"));
    }

    #[test]
    fn an_object_declared_twice_is_applied_once_as_first_spelled() {
        let ns = |label: &str| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n", "labels": {label: "x"}}});
        let mut steps = vec![
            Step { title: "a".into(), objects: vec![ns("first")] },
            Step { title: "b".into(), objects: vec![ns("second"), grant_policy(&["r.example.com/a".into()], &[], None)] },
        ];
        dedupe(&mut steps);
        assert_eq!(steps[0].objects, [ns("first")]);
        assert_eq!(steps[1].objects.len(), 1);
        assert_eq!(steps[1].objects[0]["kind"], "GrantPolicy");
    }

    #[test]
    fn knative_webhook_rules_are_left_to_the_webhook_once_it_exists() {
        let config = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "webhook.serving.knative.dev"},
            "webhooks": [{"name": "w", "rules": [], "clientConfig": {"service": {"name": "webhook", "namespace": "knative-serving"}}}]});
        let mut fresh = config.clone();
        leave_webhook_rules(&mut fresh, &[]);
        assert_eq!(fresh, config, "a new configuration is created as spelled");
        let mut existing = config.clone();
        leave_webhook_rules(&mut existing, &[ObjectRef::of(&config)]);
        assert!(existing["webhooks"][0].get("rules").is_none());
        assert!(existing["webhooks"][0].get("clientConfig").is_some());
        let mut eventing = config.clone();
        eventing["webhooks"][0]["clientConfig"]["service"]["namespace"] = json!("knative-eventing");
        leave_webhook_rules(&mut eventing, &[ObjectRef::of(&config)]);
        assert!(eventing["webhooks"][0].get("rules").is_none(), "Eventing's webhooks own their rules too");
        let mut other = config.clone();
        other["webhooks"][0]["clientConfig"]["service"]["namespace"] = json!("cert-manager");
        leave_webhook_rules(&mut other, &[ObjectRef::of(&config)]);
        assert!(other["webhooks"][0].get("rules").is_some(), "another webhook's rules are applied as written");
    }

    #[test]
    fn aggregated_cluster_roles_rules_are_left_to_kubernetes() {
        let aggregated = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "addressable-resolver"},
            "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"duck.knative.dev/addressable": "true"}}]}, "rules": []});
        let mut applied = aggregated.clone();
        leave_aggregated_rules(&mut applied);
        assert!(applied.get("rules").is_none() && applied.get("aggregationRule").is_some());
        let plain = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "x"}, "rules": [{"verbs": ["get"]}]});
        let mut applied = plain.clone();
        leave_aggregated_rules(&mut applied);
        assert_eq!(applied, plain, "a role without an aggregation rule is applied as written");
    }

    #[test]
    fn args_and_images_are_replaced() {
        let mut deployment = json!({"spec": {"template": {"spec": {"containers": [
            {"image": "old", "args": ["--grant-image=old", "--other=1"]}]}}}});
        set_arg(&mut deployment, "--grant-image", "new");
        set_image(&mut deployment, "img");
        assert_eq!(deployment.pointer("/spec/template/spec/containers/0/args").expect("args"), &json!(["--grant-image=new", "--other=1"]));
        assert_eq!(deployment.pointer("/spec/template/spec/containers/0/image").expect("image"), "img");
    }
}
