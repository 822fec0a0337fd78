//! The AzureEventGridSource lifecycle: each source's sink resolved to a URL (its `uri`, or
//! its reference's `status.address.url`), kept in the [`Sinks`] table the adapter serves
//! from, and reported in the source's status (`SinkProvided`, `Ready`, `sinkUri`).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::StreamExt as _;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt as _};
use lampyr_api::eventgrid::{self, AzureEventGridSource, SourceStatus};
use serde_json::json;

/// How often a resolved sink is resolved again (its address may change).
const RESOLVE_AGAIN: Duration = Duration::from_secs(60);
/// How soon a source whose sink could not be resolved, or whose status could not be written, is tried again.
const RETRY: Duration = Duration::from_secs(5);

/// Where one source's events go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The sink URL.
    pub sink: String,
    /// Extension attributes set on every event (`spec.ceOverrides.extensions`).
    pub extensions: BTreeMap<String, String>,
}

/// A source's `(namespace, name)`.
type SourceKey = (String, String);

/// Every source the adapter serves, by `(namespace, name)`: a resolved target, or why not.
#[derive(Clone, Debug, Default)]
pub struct Sinks(Arc<RwLock<HashMap<SourceKey, Result<Target, String>>>>);

impl Sinks {
    /// The target of source `namespace/name`: `None` when no such source exists.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Result<Target, String>> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).get(&(namespace.to_string(), name.to_string())).cloned()
    }

    /// Sets (or, with `None`, removes) source `namespace/name`'s target.
    pub fn set(&self, namespace: &str, name: &str, target: Option<Result<Target, String>>) {
        let mut table = self.0.write().unwrap_or_else(|p| p.into_inner());
        let key = (namespace.to_string(), name.to_string());
        match target {
            Some(target) => table.insert(key, target),
            None => table.remove(&key),
        };
    }

    /// Keeps only the sources named in `live`.
    fn retain(&self, live: &[SourceKey]) {
        self.0.write().unwrap_or_else(|p| p.into_inner()).retain(|key, _| live.contains(key));
    }
}

/// Why a source could not be reconciled (it is retried).
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// Writing its status failed.
    #[error("writing the status of AzureEventGridSource {namespace}/{name}: {source}")]
    Status {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The API server's error.
        source: kube::Error,
    },
}

/// Resolves `source`'s sink: `Ok(url)`, or `Err((reason, message))` for its status.
pub async fn resolve_sink(client: &Client, source: &AzureEventGridSource) -> Result<String, (&'static str, String)> {
    let namespace = source.namespace().unwrap_or_default();
    let sink = &source.spec.sink;
    let Some(reference) = &sink.reference else {
        return match sink.uri.as_deref() {
            Some(uri) if uri.starts_with("http://") || uri.starts_with("https://") => Ok(uri.to_string()),
            Some(uri) => Err((eventgrid::REASON_SINK_INVALID, format!("spec.sink.uri {uri:?} is not an absolute http(s) URL"))),
            None => Err((eventgrid::REASON_SINK_INVALID, "spec.sink has neither ref nor uri".to_string())),
        };
    };
    let (group, version) = match reference.api_version.rsplit_once('/') {
        Some((group, version)) => (group, version),
        None => ("", reference.api_version.as_str()),
    };
    if version.is_empty() || reference.kind.is_empty() || reference.name.is_empty() {
        return Err((eventgrid::REASON_SINK_INVALID, "spec.sink.ref needs apiVersion, kind and name".to_string()));
    }
    let ref_namespace = if reference.namespace.is_empty() { namespace } else { reference.namespace.clone() };
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, &reference.kind));
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ref_namespace, &resource);
    let described = format!("{} {ref_namespace}/{}", reference.kind, reference.name);
    let object = match api.get_opt(&reference.name).await {
        Ok(Some(object)) => object,
        Ok(None) => return Err((eventgrid::REASON_SINK_NOT_FOUND, format!("the sink {described} does not exist"))),
        Err(e) => return Err((eventgrid::REASON_SINK_NOT_FOUND, format!("reading the sink {described}: {e}"))),
    };
    let url = object.data.pointer("/status/address/url").and_then(|u| u.as_str()).filter(|u| !u.is_empty());
    let url = url.ok_or_else(|| (eventgrid::REASON_SINK_NOT_FOUND, format!("the sink {described} has no status.address.url yet")))?;
    Ok(match sink.uri.as_deref() {
        Some(path) if !path.is_empty() => format!("{}/{}", url.trim_end_matches('/'), path.trim_start_matches('/')),
        _ => url.to_string(),
    })
}

/// The status a source gets for its resolved sink: a pure function of the outcome.
pub fn status_for(generation: i64, previous: Option<&SourceStatus>, resolved: &Result<String, (&'static str, String)>) -> SourceStatus {
    let mut status = previous.cloned().unwrap_or_default();
    status.observed_generation = generation;
    let mut manager = eventgrid::CONDITION_SET.manage(&mut status.conditions);
    manager.initialize_conditions();
    match resolved {
        Ok(_) => manager.mark_true(eventgrid::SINK_PROVIDED),
        Err((reason, message)) => manager.mark_false(eventgrid::SINK_PROVIDED, reason, message),
    }
    status.sink_uri = resolved.as_ref().ok().cloned();
    status
}

/// Reconciles one source: resolves its sink, records it in `sinks`, writes its status when it changed.
async fn reconcile(source: Arc<AzureEventGridSource>, context: Arc<(Client, Sinks)>) -> Result<Action, SourceError> {
    let (client, sinks) = (&context.0, &context.1);
    let (namespace, name) = (source.namespace().unwrap_or_default(), source.name_any());
    let resolved = resolve_sink(client, &source).await;
    let extensions = source.spec.ce_overrides.as_ref().map(|o| o.extensions.clone()).unwrap_or_default();
    let target = resolved.clone().map(|sink| Target { sink, extensions }).map_err(|(_, message)| message);
    sinks.set(&namespace, &name, Some(target));
    let status = status_for(source.metadata.generation.unwrap_or_default(), source.status.as_ref(), &resolved);
    if source.status.as_ref() != Some(&status) {
        let api: Api<AzureEventGridSource> = Api::namespaced(client.clone(), &namespace);
        let patch = Patch::Merge(json!({ "status": status }));
        api.patch_status(&name, &PatchParams::default(), &patch).await.map_err(|source| SourceError::Status {
            namespace: namespace.clone(),
            name: name.clone(),
            source,
        })?;
    }
    Ok(Action::requeue(if resolved.is_ok() { RESOLVE_AGAIN } else { RETRY }))
}

fn error_policy(_: Arc<AzureEventGridSource>, error: &SourceError, _: Arc<(Client, Sinks)>) -> Action {
    tracing::warn!(%error, "reconciling an AzureEventGridSource failed; retrying");
    Action::requeue(RETRY)
}

/// Runs the source controller until the process ends: every AzureEventGridSource in the
/// cluster, its target kept in `sinks` (a deleted source's removed).
pub async fn run(client: Client, sinks: Sinks) {
    let api: Api<AzureEventGridSource> = Api::all(client.clone());
    let controller = Controller::new(api, watcher::Config::default());
    let store = controller.store();
    let pruner = {
        let (sinks, store) = (sinks.clone(), store.clone());
        async move {
            loop {
                tokio::time::sleep(RETRY).await;
                let live: Vec<(String, String)> = store.state().iter().map(|s| (s.namespace().unwrap_or_default(), s.name_any())).collect();
                sinks.retain(&live);
            }
        }
    };
    let context = Arc::new((client, sinks));
    let reconciling = controller.run(reconcile, error_policy, context).for_each(|result| async move {
        if let Err(error) = result {
            tracing::debug!(%error, "source controller");
        }
    });
    tokio::join!(reconciling, pruner);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_follows_the_sink_and_keeps_unchanged_conditions() {
        let ok: Result<String, (&'static str, String)> =
            Ok("http://broker-ingress.knative-eventing.svc.cluster.local/default/default".into());
        let ready = status_for(3, None, &ok);
        assert_eq!(ready.observed_generation, 3);
        assert_eq!(ready.sink_uri.as_deref(), Some("http://broker-ingress.knative-eventing.svc.cluster.local/default/default"));
        let conditions: Vec<(&str, &str)> = ready.conditions.iter().map(|c| (c.type_.as_str(), c.status.as_str())).collect();
        assert_eq!(conditions, [("Ready", "True"), ("SinkProvided", "True")]);
        assert_eq!(status_for(3, Some(&ready), &ok), ready, "the same outcome writes nothing new");

        let missing = Err((eventgrid::REASON_SINK_NOT_FOUND, "the sink Broker default/default does not exist".to_string()));
        let failed = status_for(4, Some(&ready), &missing);
        let top = failed.conditions.iter().find(|c| c.type_ == "Ready").expect("Ready");
        assert_eq!((top.status.as_str(), top.reason.as_str()), ("False", "NotFound"));
        assert_eq!(top.message, "the sink Broker default/default does not exist");
        assert_eq!(failed.sink_uri, None);
    }

    #[test]
    fn the_table_finds_sets_and_forgets_sources() {
        let sinks = Sinks::default();
        assert_eq!(sinks.get("default", "blobs"), None);
        let target = Target { sink: "http://x".into(), extensions: BTreeMap::new() };
        sinks.set("default", "blobs", Some(Ok(target.clone())));
        sinks.set("default", "broken", Some(Err("no sink".into())));
        assert_eq!(sinks.get("default", "blobs"), Some(Ok(target)));
        sinks.retain(&[("default".to_string(), "broken".to_string())]);
        assert_eq!(sinks.get("default", "blobs"), None);
        assert_eq!(sinks.get("default", "broken"), Some(Err("no sink".into())));
    }
}
