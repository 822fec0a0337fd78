//! cert-manager's release manifest as the pinned Knative Serving module carries it
//! (`third_party/cert-manager-latest/cert-manager.yaml`, upstream's release file): what
//! `ly cluster install` applies, unchanged, to a cluster without cert-manager.

use crate::document::Document;
use crate::knative::{read_module_file, release};
use crate::{Error, KnativeModules};

/// The Workspace file (`k8s/NAME`).
pub const FILE: &str = "cert-manager.yaml";
/// What it installs, one line.
pub const ABOUT: &str = "cert-manager (CRDs, controller, webhook, cainjector), applied only to a cluster without it";
/// The manifest, relative to the Knative Serving module.
pub const SOURCE: &str = "third_party/cert-manager-latest/cert-manager.yaml";
/// cert-manager's namespace.
pub const NAMESPACE: &str = "cert-manager";
/// The CRD whose presence means "the cluster has cert-manager" (then it is left alone).
pub const CERTIFICATES_CRD: &str = "certificates.cert-manager.io";
/// Its Deployments, each with one container of the same name as its binary's image
/// (`quay.io/jetstack/cert-manager-<component>`): `(deployment, container)`.
pub const DEPLOYMENTS: [(&str, &str); 3] = [
    ("cert-manager", "cert-manager-controller"),
    ("cert-manager-webhook", "cert-manager-webhook"),
    ("cert-manager-cainjector", "cert-manager-cainjector"),
];

/// The manifest's documents, unchanged; checked to install cert-manager's CRDs and Deployments.
pub fn documents(modules: &KnativeModules) -> Result<Vec<Document>, Error> {
    let documents = read_module_file(&modules.serving, SOURCE, &release(&modules.serving)?)?;
    let missing = |kind: &str, name: &str| !documents.iter().any(|d| d.kind() == kind && d.name() == name);
    if missing("CustomResourceDefinition", CERTIFICATES_CRD) {
        return Err(Error::Inconsistent(format!("{}: {SOURCE} has no CRD {CERTIFICATES_CRD}", modules.serving.path)));
    }
    if let Some((deployment, _)) = DEPLOYMENTS.iter().find(|(deployment, _)| missing("Deployment", deployment)) {
        return Err(Error::Inconsistent(format!("{}: {SOURCE} has no Deployment {NAMESPACE}/{deployment}", modules.serving.path)));
    }
    Ok(documents)
}

/// The cert-manager version the manifest installs (its controller Deployment's
/// `app.kubernetes.io/version` label), e.g. `v1.14.4`.
pub fn version(documents: &[Document]) -> Result<String, Error> {
    documents
        .iter()
        .find(|d| d.kind() == "Deployment" && d.name() == DEPLOYMENTS[0].0)
        .and_then(|d| d.label("app.kubernetes.io/version"))
        .map(str::to_string)
        .ok_or_else(|| Error::Inconsistent(format!("{SOURCE}: the {} Deployment has no app.kubernetes.io/version label", DEPLOYMENTS[0].0)))
}
