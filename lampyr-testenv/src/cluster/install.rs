//! Installs upstream Knative Serving's CRDs, configuration, RBAC and webhook
//! registrations from the pinned modules' `config/` manifests (read and filtered
//! by `lampyr-manifests`, as `ly scaffold workspace` writes them), by server-side apply.

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::{Discovery, Scope};
pub use lampyr_manifests::Document;

use super::upstream::KnativeModules;

/// The namespace upstream Knative Serving runs in.
pub const SYSTEM_NAMESPACE: &str = "knative-serving";
/// The field manager of everything the environment applies.
const FIELD_MANAGER: &str = "lampyr-testenv";

/// Parses every document of `files`, in order (each must be a named Kubernetes object).
pub fn read_documents(files: &[PathBuf]) -> Result<Vec<Document>, String> {
    let mut documents = Vec::new();
    for file in files {
        documents.extend(lampyr_manifests::read(file, &file.display().to_string()).map_err(|e| e.to_string())?);
    }
    Ok(documents)
}

/// Upstream Knative Serving's CRDs, as Lampyr installs them.
pub fn knative_crds(modules: &KnativeModules) -> Result<Vec<Document>, String> {
    lampyr_manifests::knative::crds(modules).map_err(|e| e.to_string())
}

/// Upstream Knative Serving's namespace, RBAC, configuration, certificate and
/// webhook registrations, as Lampyr installs them (`lampyr_manifests::filter`:
/// no stock controller, activator or autoscaler), minus every workload object:
/// here the webhook and the controller run as local processes, not Pods.
pub fn knative_system(modules: &KnativeModules) -> Result<Vec<Document>, String> {
    let core = lampyr_manifests::knative::core(modules).map_err(|e| e.to_string())?;
    Ok(core.kept.into_iter().filter(|d| !lampyr_manifests::is_workload(&d.object)).collect())
}

/// Server-side applies `documents` in order, resolving each kind through discovery.
pub async fn apply(client: &Client, documents: &[Document]) -> Result<(), String> {
    let discovery = Discovery::new(client.clone()).run().await.map_err(|e| format!("API discovery failed: {e}"))?;
    let params = PatchParams::apply(FIELD_MANAGER).force();
    for document in documents {
        let where_ = || document.origin.clone();
        let object: DynamicObject =
            serde_json::from_value(document.object.clone()).map_err(|e| format!("{}: not a Kubernetes object: {e}", where_()))?;
        let types = object.types.as_ref().ok_or_else(|| format!("{}: no apiVersion/kind", where_()))?;
        let gvk = GroupVersionKind::try_from(types).map_err(|e| format!("{}: {e}", where_()))?;
        let (resource, caps) = discovery.resolve_gvk(&gvk).ok_or_else(|| format!("{}: the API server does not serve {gvk:?}", where_()))?;
        let name = object.metadata.name.clone().ok_or_else(|| format!("{}: object without a name", where_()))?;
        let api: Api<DynamicObject> = match (caps.scope, object.metadata.namespace.as_deref()) {
            (Scope::Namespaced, Some(namespace)) => Api::namespaced_with(client.clone(), namespace, &resource),
            (Scope::Namespaced, None) => Api::default_namespaced_with(client.clone(), &resource),
            (Scope::Cluster, _) => Api::all_with(client.clone(), &resource),
        };
        api.patch(&name, &params, &Patch::Apply(&object))
            .await
            .map_err(|e| format!("applying {} {name} from {}: {e}", gvk.kind, where_()))?;
    }
    Ok(())
}

/// Waits until every CRD in `documents` reports `Established=True`.
pub async fn wait_established(client: &Client, documents: &[Document], timeout: Duration) -> Result<(), String> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let deadline = tokio::time::Instant::now() + timeout;
    for name in documents.iter().filter_map(|d| d.object.pointer("/metadata/name").and_then(|n| n.as_str())) {
        loop {
            let crd = api.get(name).await.map_err(|e| format!("reading CRD {name}: {e}"))?;
            let established =
                crd.status.and_then(|s| s.conditions).unwrap_or_default().iter().any(|c| c.type_ == "Established" && c.status == "True");
            if established {
                break;
            }
            if tokio::time::Instant::now() > deadline {
                return Err(format!("CRD {name} was not Established within {timeout:?}"));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

/// Points the webhook registrations at `port` on the ExternalName Service
/// `webhook` (which names `localhost`), where the webhook process listens.
pub fn route_webhooks_to(documents: &mut [Document], port: u16) {
    for document in documents {
        let kind = document.object.get("kind").and_then(|k| k.as_str()).unwrap_or_default();
        if !kind.ends_with("WebhookConfiguration") {
            continue;
        }
        if let Some(webhooks) = document.object.get_mut("webhooks").and_then(|w| w.as_array_mut()) {
            for webhook in webhooks {
                if let Some(service) = webhook.pointer_mut("/clientConfig/service") {
                    service["port"] = serde_json::json!(port);
                }
            }
        }
    }
}

/// The ExternalName Service that stands in for the webhook's Deployment and Service.
pub fn webhook_service(port: u16) -> Document {
    let object = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": { "name": "webhook", "namespace": SYSTEM_NAMESPACE },
        "spec": {
            "type": "ExternalName",
            "externalName": "localhost",
            "ports": [{ "name": "https-webhook", "port": 443, "targetPort": port }],
        },
    });
    Document { origin: "(lampyr-testenv: webhook Service)".to_string(), text: String::new(), object }
}
