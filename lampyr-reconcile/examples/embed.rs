//! Lampyr's Revision reconciler embedded in another process, beside a controller of
//! the host's own: the host builds the client, owns the metrics registry and the
//! shutdown signal, and Lampyr changes nothing process-wide (`docs/embedding.md`).
//!
//! ```text
//! cargo run -p lampyr-reconcile --example embed -- GRANT_IMAGE HELPER_IMAGE [NAMESPACE]
//! ```
//!
//! The host's own controller here marks every ConfigMap labelled `embed.example/greet`
//! with the annotation `embed.example/greeted`; `tests/embed.rs` runs [`run`] against a
//! real API server.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use lampyr_reconcile::revision::{self, Context, ControllerConfig, Metrics};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use tokio::sync::watch;

/// The label that asks the host's controller for a greeting.
pub const GREET_LABEL: &str = "embed.example/greet";
/// The annotation the host's controller writes.
pub const GREETED_ANNOTATION: &str = "embed.example/greeted";

/// Why the host stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// Lampyr's Revision controller could not start or stopped with an error.
    #[error("Lampyr's Revision controller: {0}")]
    Lampyr(#[from] revision::Error),
}

/// Runs Lampyr's Revision controller (configured by `config`) and the host's greeting
/// controller on `client`, in `namespace` (all namespaces when `None`), until `shutdown`
/// completes. Both record their metrics in `registry`.
pub async fn run(
    client: Client,
    config: ControllerConfig,
    namespace: Option<String>,
    registry: &mut Registry,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), HostError> {
    let lampyr_metrics = Metrics::default();
    lampyr_metrics.register(registry);
    let greetings = Counter::<u64>::default();
    registry.register("host_greetings", "ConfigMaps greeted by the host's controller", greetings.clone());

    // One shutdown signal for both controllers.
    let (stop, stopping) = watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop.send(true);
    });
    let stopped = move || {
        let mut stopping = stopping.clone();
        async move {
            let _ = stopping.wait_for(|stop| *stop).await;
        }
    };

    let context = Arc::new(Context::new(client.clone(), config, lampyr_metrics)?);
    let lampyr = revision::run(context, stopped());
    let host = greeter(client, namespace, greetings, stopped());
    let (lampyr, ()) = tokio::join!(lampyr, host);
    lampyr.map_err(HostError::from)
}

/// The host's own controller: greets labelled ConfigMaps, until `shutdown`.
async fn greeter(
    client: Client,
    namespace: Option<String>,
    greetings: Counter<u64>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let config_maps: Api<ConfigMap> = match &namespace {
        Some(ns) => Api::namespaced(client, ns),
        None => Api::all(client),
    };
    let watched = watcher::Config::default().labels(GREET_LABEL);
    Controller::new(config_maps.clone(), watched)
        .graceful_shutdown_on(shutdown)
        .run(greet, error_policy, Arc::new((config_maps, greetings)))
        .for_each(|_| async {})
        .await;
}

async fn greet(cm: Arc<ConfigMap>, host: Arc<(Api<ConfigMap>, Counter<u64>)>) -> Result<Action, kube::Error> {
    let (api, greetings) = &*host;
    if !cm.annotations().contains_key(GREETED_ANNOTATION) {
        let patch = serde_json::json!({ "metadata": { "annotations": { GREETED_ANNOTATION: "hello from the host" } } });
        let api = match cm.namespace() {
            Some(ns) => Api::namespaced(api.clone().into_client(), &ns),
            None => api.clone(),
        };
        api.patch(&cm.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await?;
        greetings.inc();
    }
    Ok(Action::await_change())
}

fn error_policy(_: Arc<ConfigMap>, error: &kube::Error, _: Arc<(Api<ConfigMap>, Counter<u64>)>) -> Action {
    tracing::warn!(%error, "greeting failed; retrying");
    Action::requeue(Duration::from_secs(5))
}

#[allow(dead_code)] // Not called when tests/embed.rs includes this file.
#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt::init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [grant_image, helper_image, rest @ ..] = args.as_slice() else {
        return Err("usage: embed GRANT_IMAGE HELPER_IMAGE [NAMESPACE]".into());
    };
    let client = Client::try_default().await?;
    let mut config = ControllerConfig::new("fiber-router.lampyr-system.svc.cluster.local", grant_image, helper_image);
    config.namespace = rest.first().cloned();
    let mut registry = Registry::default();
    let namespace = config.namespace.clone();
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    run(client, config, namespace, &mut registry, shutdown).await?;
    Ok(())
}
