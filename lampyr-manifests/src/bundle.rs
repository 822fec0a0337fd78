//! The files of a Workspace's `k8s/` directory.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;

use crate::document::{Document, parse, read};
use crate::filter::service_account;
use crate::knative::LAMPYR_KNATIVE_CONTROLLER_ACCOUNT;
use crate::{Error, KnativeModules, cert_manager, eventing, gateway, knative};

/// One file of `k8s/`.
#[derive(Clone, Debug)]
pub struct BundleFile {
    /// File name, e.g. `knative-serving-core.yaml`.
    pub name: &'static str,
    /// What it installs, one line.
    pub about: &'static str,
    /// Its content: a comment header naming the source, then the documents.
    pub text: String,
}

/// Lampyr's own manifests: `(file, about, path under the repository's config/)`.
const LAMPYR_FILES: [(&str, &str, &str); 4] = [
    ("lampyr-crds.yaml", "Lampyr's CRDs: CapacityGrant, Home and GrantPolicy (fiber.lampyr.dev)", "crd/lampyr.yaml"),
    (
        "lampyr-knative-controller.yaml",
        "Lampyr's Knative controller: upstream's Service, Configuration, Route, Labeler, GC, namespace-certificate and DomainMapping reconcilers, unmodified",
        "lampyr-knative-controller.yaml",
    ),
    (
        "lampyr-controller.yaml",
        "lampyr-controller: the Fiber Revision reconciler (Homes, CapacityGrants, per-Revision Services, Revision status)",
        "lampyr-controller.yaml",
    ),
    (
        "fiber-router.yaml",
        "fiber-router: routes every Revision's requests to fiberd, buffers them while it scales from zero, and implements its own KIngress class",
        "fiber-router.yaml",
    ),
];

/// Lampyr's manifests applied with Knative Eventing (`--eventing`), after it: `(file, about, path under config/)`.
const LAMPYR_EVENTING_FILES: [(&str, &str, &str); 2] = [
    ("lampyr-eventgrid-crds.yaml", "Lampyr's event source CRD: AzureEventGridSource (sources.lampyr.dev)", "crd/eventgrid.yaml"),
    (
        "lampyr-eventgrid.yaml",
        "eventgrid-adapter: receives Azure Event Grid deliveries for every AzureEventGridSource and sends their events to its sink",
        "lampyr-eventgrid.yaml",
    ),
];

/// The `k8s/` files `ly cluster install --eventing` applies besides the others, in order,
/// with what each installs: Knative Eventing's ([`eventing::PARTS`]), then Lampyr's event sources.
pub fn eventing_files() -> Vec<(&'static str, &'static str)> {
    let upstream = eventing::PARTS.iter().map(|p| (p.file, p.about));
    upstream.chain(LAMPYR_EVENTING_FILES.iter().map(|&(file, about, _)| (file, about))).collect()
}

/// The `k8s/` files `ly cluster install` applies besides the others when the ingress class is
/// [`gateway::CLASS`], in order, with what each installs ([`gateway::PARTS`]).
pub fn gateway_files() -> Vec<(&'static str, &'static str)> {
    gateway::PARTS.iter().map(|p| (p.file, p.about)).collect()
}

/// The `k8s/` files `ly cluster install` applies first, and only to a cluster without
/// cert-manager ([`cert_manager::CERTIFICATES_CRD`]), with what each installs.
pub fn cert_manager_files() -> Vec<(&'static str, &'static str)> {
    vec![(cert_manager::FILE, cert_manager::ABOUT)]
}

/// The files of `k8s/`, in the order they are applied: cert-manager's
/// ([`cert_manager_files`], only where it is missing), Knative's CRDs and
/// filtered core from `modules`, then Lampyr's from `config_dir` (the
/// repository's `config/`), then Knative Eventing's ([`eventing::PARTS`]) and
/// Lampyr's event sources, applied only with `--eventing` ([`eventing_files`]), then the
/// Gateway API layer's ([`gateway_files`]). `lampyr_version` is named in every header.
///
/// Checks what it produces: every file parses back into the same objects, and
/// every ServiceAccount a workload runs as is defined in some file.
pub fn bundle(modules: &KnativeModules, config_dir: &Path, lampyr_version: &str) -> Result<Vec<BundleFile>, Error> {
    let release = knative::release(&modules.serving)?;
    let serving = format!("{} {} (Knative {release})", modules.serving.path, modules.serving.version);
    let networking = format!("{} {}", modules.networking.path, modules.networking.version);
    let written_by = format!(
        "Written by `ly scaffold workspace` (Lampyr {lampyr_version}). Customer-editable: the\n\
         `ly cluster` commands apply this file as it stands in the Workspace."
    );

    let mut files = Vec::new();
    let crds = knative::crds(modules)?;
    let header = format!(
        "Source: {serving}, {}/*.yaml,\n\
         \x20       and {networking}, config/{{{}}}.\n\
         {written_by}",
        knative::SERVING_CRDS_DIR,
        knative::NETWORKING_CRDS.map(|f| f.trim_end_matches(".yaml")).join(","),
    );
    files.push(render(
        "knative-serving-crds.yaml",
        "Knative Serving's CRDs (serving.knative.dev, autoscaling.internal.knative.dev, networking.internal.knative.dev)",
        &header,
        &crds,
        true,
    ));

    let core = knative::core(modules)?;
    let mut header = format!(
        "Source: {serving}, {}/ (all but the CRDs),\n\
         \x20       and {networking}, {};\n\
         \x20       ko:// images resolved to the Knative {release} release's ({}).\n\
         Removed by Lampyr's filter (see docs/ly-workspace.md):\n",
        knative::SERVING_CORE_DIR,
        knative::CONFIG_NETWORK,
        knative::RELEASE_REGISTRY,
    );
    for removed in &core.removed {
        let _ = writeln!(header, "  {}: {}", removed.document.id(), removed.reason);
    }
    header.push_str(&written_by);
    files.push(render(
        "knative-serving-core.yaml",
        "Knative Serving's namespace, RBAC, configuration, internal certificate and webhook, without the stock controller, activator and autoscaler",
        &header,
        &core.kept,
        true,
    ));

    for (name, about, path) in LAMPYR_FILES {
        let documents = read(&config_dir.join(path), &format!("config/{path}"))?;
        let header = format!("Source: Lampyr {lampyr_version}, config/{path}.\n{written_by}");
        files.push(render(name, about, &header, &documents, false));
    }

    let eventing_release = knative::release(&modules.eventing)?;
    let source = format!("{} {} (Knative {eventing_release})", modules.eventing.path, modules.eventing.version);
    for part in &eventing::PARTS {
        let documents = eventing::documents(modules, part)?;
        let except = part.except.map(|e| format!(" (all but {e}/)")).unwrap_or_default();
        let header = format!(
            "Source: {source}, {}/{except}, unchanged;\n\
             \x20       ko:// images resolved to the Knative {eventing_release} release's ({}).\n\
             Applied by `ly cluster install --eventing` only.\n{written_by}",
            part.dir,
            knative::RELEASE_REGISTRY,
        );
        files.push(render(part.file, part.about, &header, &documents, true));
    }
    for (name, about, path) in LAMPYR_EVENTING_FILES {
        let documents = read(&config_dir.join(path), &format!("config/{path}"))?;
        let header =
            format!("Source: Lampyr {lampyr_version}, config/{path}.\nApplied by `ly cluster install --eventing` only.\n{written_by}");
        files.push(render(name, about, &header, &documents, false));
    }
    for part in &gateway::PARTS {
        let documents = gateway::documents(modules, part)?;
        let header = format!(
            "Source: {} {} and {} {},\n\
             \x20       {}; Lampyr's edits are named in each edited document's source line.\n\
             Applied by `ly cluster install` when the ingress class is {}.\n{written_by}",
            modules.net_gateway_api.path,
            modules.net_gateway_api.version,
            modules.contour.path,
            modules.contour.version,
            part.source,
            gateway::CLASS,
        );
        files.push(render(part.file, part.about, &header, &documents, true));
    }
    let documents = cert_manager::documents(modules)?;
    let header = format!(
        "Source: {serving}, {}, unchanged\n\
         \x20       (cert-manager {}'s release manifest).\n\
         Applied by `ly cluster install` only to a cluster without {}: never upgraded.\n{written_by}",
        cert_manager::SOURCE,
        cert_manager::version(&documents)?,
        cert_manager::CERTIFICATES_CRD,
    );
    files.insert(0, render(cert_manager::FILE, cert_manager::ABOUT, &header, &documents, false));
    check(&files)?;
    Ok(files)
}

/// A header of `#` lines, then each document after a `---`.
fn render(name: &'static str, about: &'static str, header: &str, documents: &[Document], per_document_source: bool) -> BundleFile {
    let mut text = format!("# k8s/{name}: {about}.\n#\n");
    for line in header.lines() {
        let _ = writeln!(text, "# {line}");
    }
    for document in documents {
        text.push_str("---\n");
        if per_document_source {
            let _ = writeln!(text, "# Source: {}", document.origin);
        }
        text.push_str(&document.text);
    }
    BundleFile { name, about, text }
}

fn check(files: &[BundleFile]) -> Result<(), Error> {
    let mut documents = Vec::new();
    for file in files {
        documents.extend(parse(&file.text, &format!("k8s/{}", file.name))?);
    }
    let accounts: BTreeSet<(String, String)> = documents
        .iter()
        .filter(|d| d.kind() == "ServiceAccount" && d.group().is_empty())
        .map(|d| (d.namespace().unwrap_or("default").to_string(), d.name().to_string()))
        .collect();
    let mut needed: Vec<((String, String), String)> = documents.iter().filter_map(|d| service_account(d).map(|a| (a, d.id()))).collect();
    let (namespace, name) = LAMPYR_KNATIVE_CONTROLLER_ACCOUNT;
    needed.push(((namespace.to_string(), name.to_string()), "Lampyr's Knative controller".to_string()));
    for ((namespace, name), user) in needed {
        let builtin = name == "default";
        if !builtin && !accounts.contains(&(namespace.clone(), name.clone())) {
            return Err(Error::Inconsistent(format!(
                "{user} runs as service account {namespace}/{name}, which no k8s/ file defines (did the filter remove it?)"
            )));
        }
    }
    Ok(())
}
