//! The images the Workspace's upstream manifests name (Knative Serving's core, Eventing's,
//! the Gateway API layer's, cert-manager's), read once from the pinned modules.

use std::collections::BTreeMap;
use std::path::Path;

use lampyr_manifests::{Document, KnativeModules};

use crate::Error;

/// Every Deployment container's image in the upstream manifests a Workspace installs,
/// by `(namespace, deployment, container)`.
#[derive(Clone, Debug, Default)]
pub struct UpstreamImages {
    images: BTreeMap<(String, String, String), String>,
}

impl UpstreamImages {
    /// Locates the modules `knative_module` pins (the repository's `knative/`) and reads their
    /// manifests once (`ko://` references resolved to the releases' images by `lampyr-manifests`).
    pub fn read(knative_module: &Path) -> Result<Self, Error> {
        let modules = KnativeModules::locate(knative_module)?;
        let mut documents = lampyr_manifests::knative::core(&modules)?.kept;
        documents.extend(lampyr_manifests::eventing::all(&modules)?);
        documents.extend(lampyr_manifests::gateway::all(&modules)?);
        documents.extend(lampyr_manifests::cert_manager::documents(&modules)?);
        Ok(Self::of(&documents))
    }

    /// The images `documents`' Deployments name.
    pub fn of(documents: &[Document]) -> Self {
        let mut images = BTreeMap::new();
        for deployment in documents.iter().filter(|d| d.kind() == "Deployment") {
            let namespace = deployment.namespace().unwrap_or("default").to_string();
            let containers = deployment.object.pointer("/spec/template/spec/containers").and_then(|c| c.as_array());
            for container in containers.into_iter().flatten() {
                if let (Some(name), Some(image)) = (container["name"].as_str(), container["image"].as_str()) {
                    images.insert((namespace.clone(), deployment.name().to_string(), name.to_string()), image.to_string());
                }
            }
        }
        UpstreamImages { images }
    }

    /// The image of container `container` of Deployment `namespace/deployment`.
    pub fn get(&self, namespace: &str, deployment: &str, container: &str) -> Result<String, Error> {
        let key = (namespace.to_string(), deployment.to_string(), container.to_string());
        self.images.get(&key).cloned().ok_or_else(|| {
            Error::Manifests(lampyr_manifests::Error::Inconsistent(format!(
                "the Knative Serving core, Eventing, Gateway API layer and cert-manager manifests have no Deployment \
                 {namespace}/{deployment} with a container {container} naming an image"
            )))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_are_found_by_namespace_deployment_and_container_and_a_missing_one_is_named() {
        let text = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: webhook\n  namespace: knative-serving\n\
                    spec:\n  template:\n    spec:\n      containers:\n      - name: webhook\n        image: r.example/w:1\n";
        let documents = lampyr_manifests::parse(text, "test").expect("parses");
        let images = UpstreamImages::of(&documents);
        assert_eq!(images.get("knative-serving", "webhook", "webhook").expect("found"), "r.example/w:1");
        let missing = images.get("knative-serving", "webhook", "sidecar").expect_err("no such container").to_string();
        assert!(missing.contains("knative-serving/webhook with a container sidecar"), "{missing}");
    }
}
