//! Knative Serving's manifests, read from the pinned modules' `config/` as a
//! Knative release would publish them.
//!
//! The modules hold the manifests in `ko` form: images are `ko://IMPORT/PATH`
//! and the version label is `devel`. A release resolves them to its images;
//! here `ko://IMPORT/PATH` becomes `gcr.io/knative-releases/IMPORT/PATH:vX.Y.Z`
//! (the release's tag, [`RELEASE_REGISTRY`]) and `app.kubernetes.io/version:
//! devel` the release, e.g. `"1.15.2"`.

use std::path::{Path, PathBuf};

use crate::document::{Document, parse};
use crate::filter::{Filtered, filter};
use crate::{Error, KnativeModules, Module};

/// Where Knative's release images are published.
pub const RELEASE_REGISTRY: &str = "gcr.io/knative-releases";

/// The networking CRDs, in `knative.dev/networking`'s `config/` (the serving
/// repository links them into its `config/core/300-resources`; module zips drop links).
pub const NETWORKING_CRDS: [&str; 4] = ["ingress.yaml", "certificate.yaml", "domain-claim.yaml", "serverlessservice.yaml"];

/// Serving's CRDs, relative to its module.
pub const SERVING_CRDS_DIR: &str = "config/core/300-resources";

/// Serving's core manifests (namespace, RBAC, configuration, workloads, webhook), relative to its module.
pub const SERVING_CORE_DIR: &str = "config/core";

/// `config-network`, relative to the networking module.
pub const CONFIG_NETWORK: &str = "config/config-network.yaml";

/// The ServiceAccount Lampyr's Knative controller runs as: upstream's
/// controller account, which upstream's RBAC grants what the reconcilers need.
pub const LAMPYR_KNATIVE_CONTROLLER_ACCOUNT: (&str, &str) = ("knative-serving", "controller");

/// The Knative release a `knative.dev/serving` (or `knative.dev/eventing`) version
/// belongs to: module `v0.N.P` is Knative `1.(N-27).P` (`v0.42.2` is `1.15.2`).
pub fn release(module: &Module) -> Result<String, Error> {
    let invalid = || Error::Version { module: module.path.clone(), version: module.version.clone() };
    let rest = module.version.strip_prefix("v0.").ok_or_else(invalid)?;
    let (minor, patch) = rest.split_once('.').ok_or_else(invalid)?;
    let minor: u32 = minor.parse().map_err(|_| invalid())?;
    let patch: u32 = patch.parse().map_err(|_| invalid())?;
    let minor = minor.checked_sub(27).ok_or_else(invalid)?;
    Ok(format!("1.{minor}.{patch}"))
}

/// Resolves `ko://` image references and the `devel` version label to `release`'s.
pub fn resolve_release(text: &str, release: &str) -> String {
    let text = text.replace("app.kubernetes.io/version: devel", &format!("app.kubernetes.io/version: \"{release}\""));
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(at) = rest.find("ko://") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "ko://".len()..];
        let end = after.find(|c: char| c.is_whitespace() || c == '"' || c == '\'').unwrap_or(after.len());
        out.push_str(&format!("{RELEASE_REGISTRY}/{}:v{release}", &after[..end]));
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// Serving's and networking's CRDs.
pub fn crds(modules: &KnativeModules) -> Result<Vec<Document>, Error> {
    let release = release(&modules.serving)?;
    let mut documents = Vec::new();
    for file in yaml_files(&modules.serving.dir, SERVING_CRDS_DIR)? {
        documents.extend(read_module_file(&modules.serving, &file, &release)?);
    }
    for name in NETWORKING_CRDS {
        documents.extend(read_module_file(&modules.networking, &format!("config/{name}"), &release)?);
    }
    if let Some(other) = documents.iter().find(|d| d.kind() != "CustomResourceDefinition") {
        return Err(Error::Inconsistent(format!("{}: expected only CRDs, found {}", other.origin, other.id())));
    }
    Ok(documents)
}

/// Serving's core manifests, unfiltered: every file under `config/core` but the
/// CRDs, in path order, with `config-network` before the webhook registrations.
pub fn core_documents(modules: &KnativeModules) -> Result<Vec<Document>, Error> {
    let release = release(&modules.serving)?;
    let mut documents = Vec::new();
    let mut network_done = false;
    for file in yaml_files(&modules.serving.dir, SERVING_CORE_DIR)? {
        if file.starts_with(&format!("{SERVING_CRDS_DIR}/")) {
            continue;
        }
        if !network_done && file.starts_with(&format!("{SERVING_CORE_DIR}/webhooks/")) {
            documents.extend(read_module_file(&modules.networking, CONFIG_NETWORK, &release)?);
            network_done = true;
        }
        documents.extend(read_module_file(&modules.serving, &file, &release)?);
    }
    if !network_done {
        documents.extend(read_module_file(&modules.networking, CONFIG_NETWORK, &release)?);
    }
    Ok(documents)
}

/// Serving's core manifests with the stock controller, activator and
/// autoscaler removed ([`crate::filter`]).
pub fn core(modules: &KnativeModules) -> Result<Filtered, Error> {
    Ok(filter(core_documents(modules)?, &[LAMPYR_KNATIVE_CONTROLLER_ACCOUNT]))
}

pub(crate) fn read_module_file(module: &Module, relative: &str, release: &str) -> Result<Vec<Document>, Error> {
    let path = module.dir.join(relative);
    let text = std::fs::read_to_string(&path).map_err(|source| Error::Read { path: path.clone(), source })?;
    parse(&resolve_release(&text, release), &format!("{}@{}/{relative}", module.path, module.version))
}

/// The `.yaml` files under `dir` (relative to `root`), recursively, sorted, as `/`-joined relative paths.
pub(crate) fn yaml_files(root: &Path, dir: &str) -> Result<Vec<String>, Error> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) -> Result<(), Error> {
        let entries = std::fs::read_dir(root.join(dir)).map_err(|source| Error::Read { path: root.join(dir), source })?;
        for entry in entries {
            let entry = entry.map_err(|source| Error::Read { path: root.join(dir), source })?;
            let relative: PathBuf = dir.join(entry.file_name());
            let path = root.join(&relative);
            if path.is_dir() {
                walk(root, &relative, out)?;
            } else if path.extension().is_some_and(|e| e == "yaml") {
                let parts: Vec<String> = relative.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
                out.push(parts.join("/"));
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(root, Path::new(dir), &mut out)?;
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn serving(version: &str) -> Module {
        Module { path: "knative.dev/serving".into(), version: version.into(), dir: PathBuf::new() }
    }

    #[test]
    fn module_versions_map_to_knative_releases() {
        assert_eq!(release(&serving("v0.42.2")).expect("maps"), "1.15.2");
        assert_eq!(release(&serving("v0.27.0")).expect("maps"), "1.0.0");
        for bad in ["v0.26.1", "v1.0.0", "v0.42.2-rc.1", "v0.0.0-20240716082220-4355f0c73608"] {
            let err = release(&serving(bad)).expect_err(bad);
            assert!(err.to_string().contains("pin a released knative.dev/serving"), "{err}");
        }
    }

    #[test]
    fn ko_references_and_devel_labels_become_the_release() {
        let text = "    app.kubernetes.io/version: devel\n        image: ko://knative.dev/serving/cmd/webhook\n  queue-sidecar-image: \"ko://knative.dev/serving/cmd/queue\"\n  other: ko://x";
        assert_eq!(
            resolve_release(text, "1.15.2"),
            "    app.kubernetes.io/version: \"1.15.2\"\n        image: gcr.io/knative-releases/knative.dev/serving/cmd/webhook:v1.15.2\n  queue-sidecar-image: \"gcr.io/knative-releases/knative.dev/serving/cmd/queue:v1.15.2\"\n  other: gcr.io/knative-releases/x:v1.15.2"
        );
    }
}
