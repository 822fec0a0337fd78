//! `ly cluster install | health | uninstall` on an existing kubeconfig context
//! (no provider). See `docs/ly-cluster.md`.

pub mod health;
pub mod kubectl;
pub mod plan;
pub mod settings;

use std::path::PathBuf;

use lampyr_api::keys::{FLEET_KEY_SECRET_NAME, FLEET_KEY_SECRET_NAMESPACE};
use serde_json::Value;

use self::kubectl::{Kubectl, KubectlError};
use self::plan::{INSTALLATION, ObjectRef, PlanError, SYSTEM_NAMESPACE, Step};
use self::settings::SettingsError;
use crate::args::{ClusterCommand, ClusterOptions, ContextOptions};
use crate::ui::{Color, Ui};

/// Why a cluster command failed; each message says what to do next.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The platform settings are refused (nothing was changed).
    #[error(transparent)]
    Settings(#[from] SettingsError),
    /// The plan could not be made (nothing was changed).
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// kubectl failed.
    #[error(transparent)]
    Kubectl(#[from] KubectlError),
    /// The API server could not be reached.
    #[error("cannot reach the cluster's API server: {0}\ncheck --context and --kubeconfig (or KUBECONFIG); nothing was changed")]
    Unreachable(KubectlError),
    /// `--provider` was given.
    #[error("--provider {0}: providers are not supported by this ly yet; omit --provider to use an existing context (nothing was changed)")]
    ProviderUnsupported(String),
    /// `--delete-cluster` without a recorded provider.
    #[error(
        "--delete-cluster: this installation has no recorded provider, so ly cannot delete its cluster; run `ly cluster uninstall` \
         without --delete-cluster (Lampyr is removed, the cluster kept) and delete the cluster with the tool that made it (nothing was changed)"
    )]
    NoProvider,
    /// A prompt was needed but stdin is not a terminal.
    #[error(
        "stdin is not a terminal, so ly cannot ask before {0}; pass --approve-provider-manifests (or --non-interactive) to go ahead without asking (nothing was changed)"
    )]
    CannotPrompt(&'static str),
    /// The user said no.
    #[error("not approved: nothing was changed")]
    NotApproved,
    /// The installation record in the cluster does not parse.
    #[error("the installation record (Secret {SYSTEM_NAMESPACE}/{INSTALLATION}) is unreadable: {0}; delete it to start over")]
    Record(String),
    /// Some health checks failed.
    #[error("{failed} of {total} health checks failed (see the table above)")]
    Unhealthy {
        /// How many failed.
        failed: usize,
        /// How many ran.
        total: usize,
    },
}

/// Runs one `ly cluster` subcommand.
pub fn run(command: ClusterCommand, ui: &mut Ui) -> Result<(), ClusterError> {
    match command {
        ClusterCommand::Install { options, eventing, provider } => {
            refuse_provider(provider)?;
            install(&options, eventing, ui)
        }
        ClusterCommand::Health { options } => health::run(&kubectl(&options), ui),
        ClusterCommand::Uninstall { options, delete_cluster, provider } => {
            refuse_provider(provider)?;
            uninstall(&options, delete_cluster, ui)
        }
    }
}

fn refuse_provider(provider: Option<String>) -> Result<(), ClusterError> {
    provider.map_or(Ok(()), |p| Err(ClusterError::ProviderUnsupported(p)))
}

fn kubectl(options: &ClusterOptions) -> Kubectl {
    Kubectl::new(options.target.kubeconfig.clone(), options.target.context.clone())
}

/// Checks the API server answers; returns the context's name for messages.
pub fn reach(kubectl: &Kubectl, options: &ContextOptions) -> Result<String, ClusterError> {
    kubectl.run(&["get", "--raw", "/readyz"], None).map_err(ClusterError::Unreachable)?;
    match &options.context {
        Some(context) => Ok(context.clone()),
        None => Ok(kubectl.run(&["config", "current-context"], None).unwrap_or_default().trim().to_string()),
    }
}

/// `ly cluster install`: checks everything, shows the plan, asks, applies it step by step;
/// with `eventing`, Knative Eventing too (a reinstall without it leaves an installed one as it is).
fn install(options: &ClusterOptions, eventing: bool, ui: &mut Ui) -> Result<(), ClusterError> {
    let workspace = options.workspace.clone().unwrap_or_else(|| PathBuf::from("."));
    ui.step(format!("reading platform settings from {}", workspace.join(crate::commands::scaffold::PLATFORM_FILE).display()));
    let checked = settings::load(&workspace, options.provider_config.as_deref())?;
    let kubectl = kubectl(options);
    ui.step("checking the cluster");
    let context = reach(&kubectl, &options.target)?;
    let cert_manager = install_cert_manager(&kubectl, &checked, ui)?;
    let mut steps = plan::steps(&workspace, &checked, cert_manager, eventing)?;
    let previous = read_plan(&kubectl)?;
    let placeholder = Step { title: "installation record".into(), objects: plan::record(&[], &checked) };
    steps.insert(0, placeholder);
    plan::dedupe(&mut steps);
    let (plan, live) = plan_objects(&kubectl, &steps, previous.as_deref())?;
    steps.iter_mut().flat_map(|s| s.objects.iter_mut()).for_each(|o| plan::leave_webhook_rules(o, &live));
    steps[0].objects = plan::record(&plan, &checked);
    summarize_apply(ui, &context, &plan, &checked);
    approve(options, ui, "applying these objects")?;
    for step in &steps {
        apply_step(&kubectl, step, ui)?;
    }
    check_cert_manager(&kubectl, ui)?;
    ui.step(format!("installed Lampyr on context {context}; run `ly cluster health` to check it"));
    ui.line(format!("installed {} objects ({} created by this installation)", plan.len(), plan.iter().filter(|o| o.created).count()));
    Ok(())
}

/// Applies one step and waits for its CRDs to be established.
fn apply_step(kubectl: &Kubectl, step: &Step, ui: &mut Ui) -> Result<(), ClusterError> {
    ui.step(format!("applying {} ({} objects)", step.title, step.objects.len()));
    kubectl.apply(&plan::stream(&step.objects))?;
    let crds: Vec<String> = step.crds().iter().map(|name| format!("crd/{name}")).collect();
    if !crds.is_empty() {
        ui.step(format!("waiting for {} CRDs to be established", crds.len()));
        let mut args = vec!["wait", "--for=condition=Established", "--timeout=120s"];
        args.extend(crds.iter().map(String::as_str));
        kubectl.run(&args, None)?;
    }
    Ok(())
}

/// Whether this install applies the Workspace's cert-manager: only to a cluster without it
/// (one there, whoever installed it, is never upgraded), and unless the settings say not to.
fn install_cert_manager(kubectl: &Kubectl, checked: &settings::Checked, ui: &mut Ui) -> Result<bool, ClusterError> {
    let present = health::cert_manager_installed(kubectl)?;
    match (present, checked.settings.cert_manager.install) {
        (true, _) => ui.step("cert-manager is installed: left as it is (ly never upgrades it)"),
        (false, true) => ui.step(format!("cert-manager is missing: installing it from k8s/{}", lampyr_manifests::cert_manager::FILE)),
        (false, false) => ui.step("cert-manager is missing and certManager.install is false: not installing it"),
    }
    Ok(!present && checked.settings.cert_manager.install)
}

/// Warns, after the install, about cert-manager or its csi-driver missing, with what to do.
fn check_cert_manager(kubectl: &Kubectl, ui: &mut Ui) -> Result<(), ClusterError> {
    if !health::cert_manager_installed(kubectl)? {
        ui.warn(format!("cert-manager is not installed: {}", health::CERT_MANAGER_ADVICE));
    }
    if !health::csi_driver_installed(kubectl)? {
        ui.warn(health::CSI_DRIVER_MISSING);
    }
    Ok(())
}

/// The retained plan of a previous install, if any.
pub fn read_plan(kubectl: &Kubectl) -> Result<Option<Vec<ObjectRef>>, ClusterError> {
    let Some(plan) = record_entry(kubectl, "plan")? else { return Ok(None) };
    serde_json::from_str(&plan).map(Some).map_err(|e| ClusterError::Record(e.to_string()))
}

/// Entry `key` of the installation record Secret, decoded (`None`: no record, or no such entry).
pub fn record_entry(kubectl: &Kubectl, key: &str) -> Result<Option<String>, ClusterError> {
    let template = format!("--template={{{{if .data.{key}}}}}{{{{index .data \"{key}\" | base64decode}}}}{{{{end}}}}");
    let secret = format!("secret/{INSTALLATION}");
    let out = match kubectl.run(&["get", &secret, "-n", SYSTEM_NAMESPACE, "--ignore-not-found", "-o", "go-template", &template], None) {
        Ok(out) => out,
        Err(e) if e.unknown_kind() => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    Ok(Some(out).filter(|o| !o.trim().is_empty()))
}

/// Every object of `steps` once, marked `created` when it does not exist yet or a previous
/// install created it, with what a previous install created and this one no longer applies,
/// in the previous plan's order ([`keep_previous_order`]). Also returns the objects that exist now.
fn plan_objects(
    kubectl: &Kubectl,
    steps: &[Step],
    previous: Option<&[ObjectRef]>,
) -> Result<(Vec<ObjectRef>, Vec<ObjectRef>), ClusterError> {
    let previous = previous.unwrap_or_default();
    let mut plan: Vec<ObjectRef> = Vec::new();
    let mut live = Vec::new();
    for step in steps {
        let existing = existing(kubectl, &step.objects)?;
        for object in &step.objects {
            let mut id = ObjectRef::of(object);
            if plan.iter().any(|p| p.same(&id)) {
                continue;
            }
            id.created = !existing.iter().any(|e| e.same(&id)) || previous.iter().any(|p| p.same(&id) && p.created);
            plan.push(id);
        }
        live.extend(existing);
    }
    Ok((keep_previous_order(plan, previous), live))
}

/// `plan` in the previous plan's order: each object where the previous install recorded it
/// (one it created and this install no longer applies, such as a cert-manager found installed
/// now, stays recorded there), then the new ones in `plan`'s order; so a reinstall that changes
/// nothing writes the same record.
fn keep_previous_order(plan: Vec<ObjectRef>, previous: &[ObjectRef]) -> Vec<ObjectRef> {
    let mut ordered: Vec<ObjectRef> =
        previous.iter().filter_map(|p| plan.iter().find(|o| o.same(p)).cloned().or_else(|| p.created.then(|| p.clone()))).collect();
    for object in plan {
        if !ordered.iter().any(|o| o.same(&object)) {
            ordered.push(object);
        }
    }
    ordered
}

/// Which of `objects` exist: one `kubectl get` for all, or one per object when a kind is unknown.
fn existing(kubectl: &Kubectl, objects: &[Value]) -> Result<Vec<ObjectRef>, ClusterError> {
    let stubs: Vec<Value> = objects.iter().map(|o| ObjectRef::of(o).stub()).collect();
    match kubectl.run(&["get", "-f", "-", "-o", "json", "--ignore-not-found"], Some(&plan::stream(&stubs))) {
        Ok(out) => Ok(listed(&out)),
        Err(e) if e.unknown_kind() => {
            let mut found = Vec::new();
            for id in objects.iter().map(ObjectRef::of) {
                if kubectl.get_json(&id.resource(), id.namespace.as_deref())?.is_some() {
                    found.push(id);
                }
            }
            Ok(found)
        }
        Err(e) => Err(e.into()),
    }
}

/// The objects in kubectl's JSON output: one object, or a List (possibly several, concatenated).
fn listed(out: &str) -> Vec<ObjectRef> {
    serde_json::Deserializer::from_str(out)
        .into_iter::<Value>()
        .map_while(Result::ok)
        .flat_map(|value| match value["items"].as_array() {
            Some(items) if value["kind"] == "List" => items.iter().map(ObjectRef::of).collect(),
            _ => vec![ObjectRef::of(&value)],
        })
        .collect()
}

fn summarize_apply(ui: &mut Ui, context: &str, plan: &[ObjectRef], checked: &settings::Checked) {
    let created = plan.iter().filter(|o| o.created).count();
    ui.note(format!(
        "ly will apply {} objects to context {context:?}: {} new ({}), {} existing, whose fields ly takes over ({}):",
        plan.len(),
        created,
        ui.paint(Color::Green, "+"),
        plan.len() - created,
        ui.paint(Color::Yellow, "~"),
    ));
    for object in plan {
        let (color, mark) = if object.created { (Color::Green, "+") } else { (Color::Yellow, "~") };
        ui.note(ui.paint(color, format!("  {mark} {}", object.display())));
    }
    ui.note(format!(
        "templates: pushed to {}, pulled by grant Pods from {}; GrantPolicy allows {}",
        checked.templates.push,
        checked.templates.pull,
        checked.allowed_repositories.join(", ")
    ));
    match ingress_layer(&checked.settings.ingress.class) {
        Ok(layer) => ui.note(layer),
        Err(warning) => ui.warn(warning),
    }
}

/// What implements the KIngress class `class`: one of the layers ly installs, or a warning.
fn ingress_layer(class: &str) -> Result<String, String> {
    let fiber = lampyr_api::keys::FIBER_INGRESS_CLASS;
    let gateway = lampyr_manifests::gateway::CLASS;
    match class {
        c if c == fiber => Ok(format!("ingress: {class}: fiber-router serves the KIngresses itself")),
        c if c == gateway => Ok(format!("ingress: {class}: net-gateway-api, Contour and Envoy in front of fiber-router")),
        _ => Err(format!(
            "ingress.class {class} is neither fiber-router's ({fiber}) nor the Gateway API layer's ({gateway}): ly installs \
             no networking layer for it, and no Route becomes Ready until one that implements it runs"
        )),
    }
}

/// Asks before changing anything, unless approved by flag; refuses when it cannot ask.
fn approve(options: &ClusterOptions, ui: &mut Ui, action: &'static str) -> Result<(), ClusterError> {
    if options.approve_provider_manifests || options.non_interactive {
        return Ok(());
    }
    if !ui.can_prompt() {
        return Err(ClusterError::CannotPrompt(action));
    }
    if ui.confirm(format!("Proceed with {action}?")) { Ok(()) } else { Err(ClusterError::NotApproved) }
}

/// `ly cluster uninstall`: deletes what the installation created, per its retained plan, and the fleet key.
fn uninstall(options: &ClusterOptions, delete_cluster: bool, ui: &mut Ui) -> Result<(), ClusterError> {
    let kubectl = kubectl(options);
    ui.step("checking the cluster");
    let context = reach(&kubectl, &options.target)?;
    if delete_cluster {
        let provider = recorded_provider(&kubectl)?;
        return Err(provider.map_or(ClusterError::NoProvider, ClusterError::ProviderUnsupported));
    }
    let plan = read_plan(&kubectl)?;
    if plan.is_none() {
        ui.warn(format!("context {context:?} has no Lampyr installation record; only the fleet key is removed (if present)"));
    }
    let plan = plan.unwrap_or_default();
    let kept: Vec<ObjectRef> = plan.iter().filter(|o| !o.created).cloned().collect();
    let mut first = sealed_services(&kubectl)?;
    first.extend(finalized_by_knative(&kubectl, &plan)?);
    let batches = deletion_batches(plan, first, fleet_keys(&kubectl)?);
    let total: usize = batches.iter().map(Vec::len).sum();
    ui.note(format!("ly will delete {total} objects from context {context:?} ({}), keeping the cluster:", ui.paint(Color::Red, "-")));
    for object in batches.iter().flatten() {
        ui.note(ui.paint(Color::Red, format!("  - {}", object.display())));
    }
    ui.note(format!(
        "and release ly's fields of {} objects that existed before the installation ({}; fields only ly set are removed):",
        kept.len(),
        ui.paint(Color::Yellow, "~")
    ));
    for object in &kept {
        ui.note(ui.paint(Color::Yellow, format!("  ~ {}", object.display())));
    }
    approve(options, ui, "deleting these objects")?;
    release(&kubectl, &kept, ui)?;
    for batch in &batches {
        delete(&kubectl, batch, ui)?;
    }
    ui.step(format!("removed Lampyr from context {context}; the cluster is kept"));
    ui.line(format!("deleted {total} objects"));
    Ok(())
}

/// Applies an empty configuration to each of `objects` as field manager `ly`, so the fields only
/// ly set (e.g. config-network's ingress-class) are removed and the objects stay.
fn release(kubectl: &Kubectl, objects: &[ObjectRef], ui: &mut Ui) -> Result<(), ClusterError> {
    if objects.is_empty() {
        return Ok(());
    }
    let stubs: Vec<Value> = objects.iter().map(ObjectRef::stub).collect();
    let live = existing(kubectl, &stubs)?;
    // Applying to a missing object would create it: release only those still there.
    let objects: Vec<&ObjectRef> = objects.iter().filter(|o| live.iter().any(|l| l.same(o))).collect();
    ui.step(format!("releasing ly's fields of {} objects that existed before the installation", objects.len()));
    let manager = format!("--field-manager={}", kubectl::FIELD_MANAGER);
    let args = ["apply", "--server-side", manager.as_str(), "-f", "-"];
    let stubs: Vec<Value> = objects.iter().map(|o| o.stub()).collect();
    match kubectl.run(&args, Some(&plan::stream(&stubs))) {
        Err(e) if e.unknown_kind() => {
            for stub in &stubs {
                match kubectl.run(&args, Some(&stub.to_string())) {
                    Err(e) if !e.unknown_kind() && !e.to_string().contains("NotFound") => return Err(e.into()),
                    _ => {}
                }
            }
            Ok(())
        }
        result => result.map(|_| ()).map_err(Into::into),
    }
}

/// The installation's provider, from its ConfigMap (`None`: none recorded, or no installation).
fn recorded_provider(kubectl: &Kubectl) -> Result<Option<String>, ClusterError> {
    let config = kubectl.get_json(&format!("configmap/{INSTALLATION}"), Some(SYSTEM_NAMESPACE))?;
    Ok(config.and_then(|c| c["data"]["provider"].as_str().map(str::to_string)).filter(|p| !p.is_empty()))
}

/// What uninstall deletes, in order: `first` (the Services sealed to the fleet key, and objects
/// the installed controllers must finalize, while they still run), the objects the
/// installation created (newest first), the fleet key and its copies, then CRDs, then the
/// installation record, then namespaces, so a failed uninstall keeps its record and can be retried.
fn deletion_batches(plan: Vec<ObjectRef>, first: Vec<ObjectRef>, fleet_keys: Vec<ObjectRef>) -> Vec<Vec<ObjectRef>> {
    let is_record = |o: &ObjectRef| o.namespace.as_deref() == Some(SYSTEM_NAMESPACE) && o.name == INSTALLATION;
    let created: Vec<ObjectRef> = plan.into_iter().rev().filter(|o| o.created).collect();
    let (namespaces, rest): (Vec<_>, Vec<_>) = created.into_iter().partition(|o| o.kind == "Namespace");
    let (crds, rest): (Vec<_>, Vec<_>) = rest.into_iter().partition(|o| o.kind == "CustomResourceDefinition");
    let (record, objects): (Vec<_>, Vec<_>) = rest.into_iter().partition(is_record);
    vec![first, objects, fleet_keys, crds, record, namespaces].into_iter().filter(|b| !b.is_empty()).collect()
}

/// The Knative Services `ly deploy` sealed to the fleet key: uninstall deletes them with it,
/// since their templates never open again.
fn sealed_services(kubectl: &Kubectl) -> Result<Vec<ObjectRef>, ClusterError> {
    let services = list_all(kubectl, "services.serving.knative.dev", None)?;
    let sealed = |s: &&Value| s["spec"]["template"]["metadata"]["annotations"][lampyr_api::keys::SEALED_TEMPLATE].is_string();
    Ok(services.iter().filter(sealed).map(created).collect())
}

/// Objects whose finalizers the installed Knative controllers remove: every DomainMapping (it
/// releases the domain's ClusterDomainClaim) and every object of an Eventing CRD the
/// installation created (Triggers, then sources, subscriptions, Brokers, channels: what
/// refers to others goes first). Deleted once those controllers are gone, they would never
/// go, and neither would their CRDs.
fn finalized_by_knative(kubectl: &Kubectl, plan: &[ObjectRef]) -> Result<Vec<ObjectRef>, ClusterError> {
    let mut objects: Vec<ObjectRef> = list_all(kubectl, "domainmappings.serving.knative.dev", None)?.iter().map(created).collect();
    let mut crds: Vec<&str> = plan
        .iter()
        .filter(|o| o.created && o.kind == "CustomResourceDefinition" && lampyr_manifests::eventing::is_eventing_crd(&o.name))
        .map(|o| o.name.as_str())
        .collect();
    crds.sort_by_key(|name| eventing_deletion_rank(name));
    for crd in crds {
        objects.extend(list_all(kubectl, crd, None)?.iter().map(created));
    }
    Ok(objects)
}

/// Eventing kinds in the order uninstall deletes their objects: Triggers first (they refer to
/// Brokers), then sources and flows, subscriptions, Brokers, channels last.
fn eventing_deletion_rank(crd: &str) -> u8 {
    match crd.split_once('.').map(|(_, group)| group) {
        _ if crd.starts_with("triggers.") => 0,
        Some("sources.knative.dev" | "flows.knative.dev" | "sinks.knative.dev") => 1,
        _ if crd.starts_with("subscriptions.") => 2,
        _ if crd.starts_with("brokers.") => 3,
        _ => 4,
    }
}

/// The fleet key Secret and the grant controller's copies of it in other namespaces.
fn fleet_keys(kubectl: &Kubectl) -> Result<Vec<ObjectRef>, ClusterError> {
    let selector = format!("metadata.name={FLEET_KEY_SECRET_NAME}");
    let mut keys: Vec<ObjectRef> = list_all(kubectl, "secrets", Some(&selector))?.iter().map(created).collect();
    let default = ObjectRef {
        api_version: "v1".into(),
        kind: "Secret".into(),
        namespace: Some(FLEET_KEY_SECRET_NAMESPACE.into()),
        name: FLEET_KEY_SECRET_NAME.into(),
        created: true,
    };
    if !keys.iter().any(|k| k.same(&default)) {
        keys.insert(0, default); // deleted even if it appears after the listing
    }
    Ok(keys)
}

/// Every object of `resource` in every namespace (none when the kind is unknown).
fn list_all(kubectl: &Kubectl, resource: &str, field_selector: Option<&str>) -> Result<Vec<Value>, ClusterError> {
    let mut args = vec!["get", resource, "--all-namespaces", "-o", "json"];
    if let Some(selector) = field_selector {
        args.extend(["--field-selector", selector]);
    }
    let out = match kubectl.run(&args, None) {
        Ok(out) => out,
        Err(e) if e.unknown_kind() => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    let list: Value = serde_json::from_str(&out).unwrap_or_default();
    Ok(list["items"].as_array().cloned().unwrap_or_default())
}

/// A live object to delete.
fn created(object: &Value) -> ObjectRef {
    ObjectRef { created: true, ..ObjectRef::of(object) }
}

/// Deletes `objects` and waits for them and their dependents to be gone (foreground cascade:
/// a Knative Service's Configuration, Route and Revisions go before it does, so a deploy
/// right after an uninstall finds none left); a kind already gone counts as deleted.
fn delete(kubectl: &Kubectl, objects: &[ObjectRef], ui: &mut Ui) -> Result<(), ClusterError> {
    let first = objects.first().map(ObjectRef::display).unwrap_or_default();
    let plural = if objects.len() == 1 { "" } else { "s" };
    ui.step(format!("deleting {} object{plural} ({first}{})", objects.len(), if objects.len() > 1 { ", …" } else { "" }));
    let stubs: Vec<Value> = objects.iter().map(ObjectRef::stub).collect();
    let args = ["delete", "-f", "-", "--ignore-not-found", "--cascade=foreground", "--wait=true", "--timeout=180s"];
    match kubectl.run(&args, Some(&plan::stream(&stubs))) {
        Ok(_) => Ok(()),
        Err(e) if e.unknown_kind() => {
            for object in objects {
                let resource = object.resource();
                let mut args =
                    vec!["delete", resource.as_str(), "--ignore-not-found", "--cascade=foreground", "--wait=true", "--timeout=180s"];
                if let Some(namespace) = &object.namespace {
                    args.extend(["-n", namespace]);
                }
                match kubectl.run(&args, None) {
                    Err(e) if !e.unknown_kind() => return Err(e.into()),
                    _ => {}
                }
            }
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(kind: &str, namespace: Option<&str>, name: &str, created: bool) -> ObjectRef {
        ObjectRef { api_version: "v1".into(), kind: kind.into(), namespace: namespace.map(Into::into), name: name.into(), created }
    }

    #[test]
    fn a_reinstall_keeps_the_previous_order_and_what_it_created_but_no_longer_applies() {
        let record = object("Secret", Some(SYSTEM_NAMESPACE), INSTALLATION, true);
        let cert_manager = object("Deployment", Some("cert-manager"), "cert-manager", true);
        let router = object("Deployment", Some(SYSTEM_NAMESPACE), "fiber-router", true);
        let found = object("ConfigMap", Some("knative-serving"), "config-network", false);
        let previous = vec![record.clone(), cert_manager.clone(), found.clone(), router.clone()];
        let eventing = object("Deployment", Some("knative-eventing"), "eventing-controller", true);
        // cert-manager is installed now, so this install does not apply it.
        let plan = vec![record.clone(), router.clone(), eventing.clone(), found.clone()];
        let names = |objects: Vec<ObjectRef>| objects.iter().map(ObjectRef::display).collect::<Vec<_>>();
        assert_eq!(names(keep_previous_order(plan, &previous)), names(vec![record.clone(), cert_manager, found, router.clone(), eventing]));
        // What the previous install found and this one no longer applies is forgotten.
        let previous = vec![record.clone(), object("ConfigMap", Some("x"), "gone", false), router.clone()];
        assert_eq!(names(keep_previous_order(vec![record.clone(), router.clone()], &previous)), names(vec![record, router]));
    }

    #[test]
    fn uninstall_deletes_only_what_was_created_and_the_record_last() {
        let plan = vec![
            object("Namespace", None, SYSTEM_NAMESPACE, true),
            object("Secret", Some(SYSTEM_NAMESPACE), INSTALLATION, true),
            object("CustomResourceDefinition", None, "a.example.com", true),
            object("ConfigMap", Some("knative-serving"), "config-network", false),
            object("Deployment", Some(SYSTEM_NAMESPACE), "fiber-router", true),
        ];
        let services = vec![object("Service", Some("apps"), "hello", true)];
        let keys = vec![
            object("Secret", Some("default"), "lampyr-fiberd-seal-key", true),
            object("Secret", Some("apps"), "lampyr-fiberd-seal-key", true),
        ];
        let batches = deletion_batches(plan, services, keys);
        let names: Vec<Vec<String>> = batches.iter().map(|b| b.iter().map(|o| o.display()).collect()).collect();
        assert_eq!(
            names,
            [
                vec!["Service apps/hello".to_string()],
                vec![format!("Deployment {SYSTEM_NAMESPACE}/fiber-router")],
                vec!["Secret default/lampyr-fiberd-seal-key".to_string(), "Secret apps/lampyr-fiberd-seal-key".into()],
                vec!["CustomResourceDefinition a.example.com".to_string()],
                vec![format!("Secret {SYSTEM_NAMESPACE}/{INSTALLATION}")],
                vec![format!("Namespace {SYSTEM_NAMESPACE}")],
            ]
        );
    }

    #[test]
    fn eventing_objects_are_deleted_before_what_they_refer_to() {
        let mut crds = [
            "inmemorychannels.messaging.knative.dev",
            "brokers.eventing.knative.dev",
            "subscriptions.messaging.knative.dev",
            "pingsources.sources.knative.dev",
            "triggers.eventing.knative.dev",
        ];
        crds.sort_by_key(|c| eventing_deletion_rank(c));
        assert_eq!(
            crds,
            [
                "triggers.eventing.knative.dev",
                "pingsources.sources.knative.dev",
                "subscriptions.messaging.knative.dev",
                "brokers.eventing.knative.dev",
                "inmemorychannels.messaging.knative.dev",
            ]
        );
    }

    #[test]
    fn an_ingress_class_ly_installs_no_layer_for_is_warned_about() {
        assert!(ingress_layer(lampyr_api::keys::FIBER_INGRESS_CLASS).is_ok_and(|l| l.contains("fiber-router serves")));
        assert!(ingress_layer(lampyr_manifests::gateway::CLASS).is_ok_and(|l| l.contains("Envoy")));
        let warning = ingress_layer("kourier.ingress.networking.knative.dev").expect_err("not installed by ly");
        assert!(warning.contains("no Route becomes Ready"), "{warning}");
    }

    #[test]
    fn kubectl_output_lists_one_object_or_a_list() {
        let one = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"n"}}"#;
        assert_eq!(listed(one).len(), 1);
        let list = r#"{"kind":"List","items":[{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"x"}},
            {"apiVersion":"v1","kind":"Namespace","metadata":{"name":"y"}}]}"#;
        assert_eq!(listed(list).iter().map(|o| o.name.as_str()).collect::<Vec<_>>(), ["x", "y"]);
        assert!(listed("").is_empty());
    }
}
