//! The grant controller's reconcile loop: CapacityGrants in, grant Pods,
//! fleet-key copies and grant status out. Grant Pods and the Homes placed on
//! grants are read from watched stores, not listed per reconcile.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use lampyr_api::{CapacityGrant, GrantPolicy, Home};
use serde_json::json;

use super::identity::{IdentityStores, ensure_identity};
use super::images::{ImageRefused, check_images, registry_ca, template_repositories};
use super::pods::{GRANT_LABEL, PodSettings, desired_pods, pod_spec_hash};
use super::status::{allocation, grant_status, same_but_allocation};
use crate::listed::Listed;

/// The field manager of everything the grant controller writes.
pub const FIELD_MANAGER: &str = "fiberd-k8s-controller";

/// Why a grant could not be reconciled (retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum GrantError {
    /// The grant has no namespace or name.
    #[error("CapacityGrant without a namespace or name")]
    Unnamed,
    /// An API call failed.
    #[error("{what}: {source}")]
    Api {
        /// What was being done.
        what: String,
        /// The API error.
        source: kube::Error,
    },
}

pub(super) fn api_error(what: impl Into<String>) -> impl FnOnce(kube::Error) -> GrantError {
    let what = what.into();
    move |source| GrantError::Api { what, source }
}

/// What every reconcile shares.
pub struct GrantContext {
    client: Client,
    /// When each grant's status was last written, to pace allocation-only writes.
    written: Mutex<HashMap<(String, String), Instant>>,
    settings: PodSettings,
    policies: Store<GrantPolicy>,
    pods: Store<Pod>,
    homes: Store<Home>,
    /// Whether the GrantPolicy, Pod and Home watches have listed once.
    listed: Listed,
    identity: IdentityStores,
}

/// How long a reconcile waits for the watches to list before it gives up and retries.
const LISTING: Duration = Duration::from_secs(30);

/// When a reconcile that gave up waiting for the watches runs again.
const LISTING_RETRY: Duration = Duration::from_secs(5);

/// Least time between two status writes of one grant that change only its allocation.
const ALLOCATION_INTERVAL: Duration = Duration::from_secs(1);

impl GrantContext {
    fn written(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Instant>> {
        self.written.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Runs the grant controller until `shutdown` resolves.
pub async fn run_grant_controller(
    client: Client,
    settings: PodSettings,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let (policies, writer) = reflector::store();
    let policy_changes = reflector::reflector(writer, watcher(Api::<GrantPolicy>::all(client.clone()), watcher::Config::default()))
        .default_backoff()
        .touched_objects()
        .filter_map(|event| async move { event.ok().map(|_| ()) });
    let (identity, watches) = IdentityStores::watch(&client, &settings);
    // Until each watch has listed once, an object it has not seen may still exist.
    if tokio::time::timeout(Duration::from_secs(30), identity.wait_until_ready()).await.is_err() {
        tracing::warn!("the identity watches have not listed within 30 s; writing what they do not show");
    }
    let (pods, pod_writer) = reflector::store();
    let pod_events =
        reflector::reflector(pod_writer, watcher(Api::<Pod>::all(client.clone()), watcher::Config::default().labels(GRANT_LABEL)))
            .default_backoff()
            .touched_objects();
    let (homes, home_writer) = reflector::store();
    let home_events = reflector::reflector(home_writer, watcher(Api::<Home>::all(client.clone()), watcher::Config::default()))
        .default_backoff()
        .touched_objects();
    let listed = {
        let (policies, pods, homes) = (policies.clone(), pods.clone(), homes.clone());
        Listed::spawn(async move {
            let _ = policies.wait_until_ready().await;
            let _ = pods.wait_until_ready().await;
            let _ = homes.wait_until_ready().await;
        })
    };
    let context =
        Arc::new(GrantContext { client: client.clone(), written: Mutex::default(), settings, policies, pods, homes, listed, identity });
    Controller::new(Api::<CapacityGrant>::all(client), watcher::Config::default())
        .owns_stream(pod_events)
        // A Home's placement and usage count toward its grant's allocation.
        .watches_stream(home_events, |home: Home| {
            let namespace = home.metadata.namespace.clone().unwrap_or_default();
            Some(ObjectRef::new(&home.spec.grant_name).within(&namespace))
        })
        .reconcile_all_on(policy_changes)
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, context)
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::warn!(%error, "grant reconcile failed");
            }
        })
        .await;
    for watch in watches {
        watch.abort();
    }
}

fn error_policy(grant: Arc<CapacityGrant>, error: &GrantError, _: Arc<GrantContext>) -> Action {
    tracing::warn!(grant = %grant.name_any(), %error, "will retry");
    Action::requeue(Duration::from_secs(5))
}

/// Brings one grant's Pods and status in line with its spec and the GrantPolicies.
pub async fn reconcile(grant: Arc<CapacityGrant>, context: Arc<GrantContext>) -> Result<Action, GrantError> {
    let (Some(namespace), Some(name)) = (grant.namespace(), grant.metadata.name.clone()) else {
        return Err(GrantError::Unnamed);
    };
    // The stores fill as the controller polls its triggers: before they have listed, a
    // policy they do not show may allow the grant and a Pod they do not show may exist,
    // so nothing is decided (no Pod deleted as refused or missing) until they have.
    if tokio::time::timeout(LISTING, context.listed.wait()).await.is_err() {
        tracing::warn!(grant = %format!("{namespace}/{name}"), "the GrantPolicy, Pod and Home watches have not listed within {LISTING:?}; will retry");
        return Ok(Action::requeue(LISTING_RETRY));
    }
    let pods: Api<Pod> = Api::namespaced(context.client.clone(), &namespace);
    let existing: Vec<Pod> = context
        .pods
        .state()
        .iter()
        .filter(|p| p.metadata.namespace.as_deref() == Some(namespace.as_str()))
        .filter(|p| p.metadata.labels.as_ref().and_then(|l| l.get(GRANT_LABEL)) == Some(&name))
        .map(|p| (**p).clone())
        .collect();
    let policies: Vec<GrantPolicy> = context.policies.state().iter().map(|p| (**p).clone()).collect();
    let refused = check_images(&grant.spec, &policies).err();
    let settings = PodSettings {
        template_repositories: template_repositories(&policies),
        registry_ca: registry_ca(&policies),
        ..context.settings.clone()
    };
    let desired = if refused.is_some() { Vec::new() } else { desired_pods(&grant, &settings) };

    // Pods no longer wanted, built from an older spec, or failed (evicted: a full cache
    // volume, node pressure) go; missing ones are created, as a ReplicaSet would.
    for pod in &existing {
        let wanted = desired.iter().find(|d| d.metadata.name == pod.metadata.name);
        let stale = wanted.is_none_or(|d| pod_spec_hash(d) != pod_spec_hash(pod)) || pod_failed(pod);
        if stale && pod.metadata.deletion_timestamp.is_none() {
            delete_pod(&pods, &pod.name_any()).await?;
        }
    }
    if !desired.is_empty() {
        ensure_identity(&context.client, &context.identity, &namespace, &context.settings).await?;
    }
    for pod in &desired {
        if !existing.iter().any(|e| e.metadata.name == pod.metadata.name) {
            create_pod(&pods, pod).await?;
        }
    }

    let current: Vec<Pod> = existing
        .into_iter()
        .filter(|p| desired.iter().any(|d| d.metadata.name == p.metadata.name && pod_spec_hash(d) == pod_spec_hash(p)))
        .filter(|p| !pod_failed(p))
        .collect();
    let homes: Vec<Arc<Home>> = context
        .homes
        .state()
        .into_iter()
        .filter(|h| h.metadata.namespace.as_deref() == Some(namespace.as_str()) && h.spec.grant_name == name)
        .collect();
    match write_status(&context, &grant, &current, &homes, refused.as_ref()).await? {
        Some(due) => Ok(Action::requeue(due)),
        None => Ok(Action::requeue(Duration::from_secs(300))),
    }
}

/// Whether the Pod has failed for good (phase `Failed`: evicted, or its node lost it).
fn pod_failed(pod: &Pod) -> bool {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed")
}

async fn create_pod(pods: &Api<Pod>, pod: &Pod) -> Result<(), GrantError> {
    let name = pod.name_any();
    match pods.create(&PostParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() }, pod).await {
        Ok(_) => {
            tracing::info!(pod = %name, "created grant Pod");
            Ok(())
        }
        // Another reconcile (or a restart) created it first: nothing to do.
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(e) => Err(api_error(format!("creating grant Pod {name}"))(e)),
    }
}

async fn delete_pod(pods: &Api<Pod>, name: &str) -> Result<(), GrantError> {
    match pods.delete(name, &DeleteParams::default()).await {
        Ok(_) => {
            tracing::info!(pod = %name, "deleted grant Pod");
            Ok(())
        }
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(e) => Err(api_error(format!("deleting grant Pod {name}"))(e)),
    }
}

/// Writes the grant's status when it changed; a change of allocation alone (Homes
/// placed, fibers warming) at most once per [`ALLOCATION_INTERVAL`], returning when the
/// next such write is due instead (a burst of placements is one write, not one each).
async fn write_status(
    context: &GrantContext,
    grant: &CapacityGrant,
    pods: &[Pod],
    homes: &[Arc<Home>],
    refused: Option<&ImageRefused>,
) -> Result<Option<Duration>, GrantError> {
    let mut status = grant_status(grant, pods, refused);
    allocation(&mut status, homes.iter().map(|h| h.as_ref()));
    if grant.status.as_ref() == Some(&status) {
        return Ok(None);
    }
    let namespace = grant.namespace().unwrap_or_default();
    let name = grant.name_any();
    let key = (namespace.clone(), name.clone());
    if grant.status.as_ref().is_some_and(|stored| same_but_allocation(stored, &status)) {
        let since = context.written().get(&key).map(Instant::elapsed);
        if let Some(wait) = since.and_then(|since| ALLOCATION_INTERVAL.checked_sub(since)) {
            return Ok(Some(wait));
        }
    }
    let grants: Api<CapacityGrant> = Api::namespaced(context.client.clone(), &namespace);
    grants
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&json!({ "status": status })))
        .await
        .map_err(api_error(format!("writing the status of grant {name}")))?;
    context.written().insert(key, Instant::now());
    Ok(None)
}
