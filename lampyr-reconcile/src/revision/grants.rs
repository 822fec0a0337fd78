//! What placement observes and who it wakes: watched stores of Homes and
//! CapacityGrants, one placement at a time per namespace, the Revisions
//! waiting for room, and the reconciles a change of either store triggers.
//!
//! Every Home event wakes the Revision controlling the Home (the reconciler reads
//! its Home from this store, with no Home watch of its own). A Revision whose
//! Home cannot be placed is remembered as waiting; any Home or grant event in its
//! namespace (a Home deleted, a grant enlarged) wakes it.
//! A grant whose readiness changes wakes every Revision placed on it, so their
//! `GrantReady` follows; its `allocatedSlots` churn wakes nobody, but a namespace's
//! shared grant is sized again on each (see `ensure_shared_grant`).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use futures::channel::mpsc;
use futures::{SinkExt, Stream, StreamExt};
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use lampyr_api::conditions::KnativeStatus;
use lampyr_api::{CapacityGrant, Home, Revision, keys};

use super::children::controlling_revision;
use super::own_writes::newer;
use super::placement::Demand;

/// Most wake-ups waiting to be picked up: beyond it, wake-ups of waiting Revisions are
/// dropped (their recheck catches up) and a Home's own wake-up waits for room.
const WAKE_CAPACITY: usize = 1024;

/// The stores placement reads and the Revisions waiting for room.
pub struct Grants {
    homes: Store<Home>,
    grants: Store<CapacityGrant>,
    writers: Mutex<Option<(Writer<Home>, Writer<CapacityGrant>)>>,
    waiting: Mutex<HashMap<String, BTreeSet<String>>>,
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl Default for Grants {
    fn default() -> Self {
        let (homes, home_writer) = reflector::store();
        let (grants, grant_writer) = reflector::store();
        Grants { homes, grants, writers: Mutex::new(Some((home_writer, grant_writer))), waiting: Mutex::default(), locks: Mutex::default() }
    }
}

impl Grants {
    /// The grant `namespace/name` as last observed.
    pub fn grant(&self, namespace: &str, name: &str) -> Option<Arc<CapacityGrant>> {
        self.grants.get(&ObjectRef::new(name).within(namespace))
    }

    /// Home `namespace/name` as last observed.
    pub fn home(&self, namespace: &str, name: &str) -> Option<Arc<Home>> {
        self.homes.get(&ObjectRef::new(name).within(namespace))
    }

    /// What the Homes placed on grant `namespace/grant` reserve, but Home `except`'s.
    pub fn placed(&self, namespace: &str, grant: &str, except: &str) -> Vec<Demand> {
        self.homes_on(namespace, grant).filter(|h| h.name_any() != except).map(|h| Demand::of_home(&h)).collect()
    }

    /// The Homes placed on grant `namespace/grant`, as last observed.
    fn homes_on(&self, namespace: &str, grant: &str) -> impl Iterator<Item = Arc<Home>> {
        let (namespace, grant) = (namespace.to_string(), grant.to_string());
        self.homes.state().into_iter().filter(move |h| h.namespace().as_deref() == Some(namespace.as_str()) && h.spec.grant_name == grant)
    }

    /// Whether both stores have listed once (before that, a placement could overcommit).
    pub async fn wait_until_ready(&self) {
        let _ = self.homes.wait_until_ready().await;
        let _ = self.grants.wait_until_ready().await;
    }

    /// Placements in `namespace` happen one at a time under this lock.
    pub fn lock(&self, namespace: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(locks.entry(namespace.to_string()).or_default())
    }

    /// Waits until the Home store shows `home` at least as new as `applied`, so the next
    /// placement in its namespace counts it. Gives up after two seconds (the watch lags).
    pub async fn await_home(&self, applied: &Home) {
        let key = ObjectRef::from_obj(applied);
        let version = applied.resource_version();
        for _ in 0..400 {
            if self
                .homes
                .get(&key)
                .is_some_and(|h| h.resource_version() == version || newer(h.resource_version().as_deref(), version.as_deref()))
            {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        tracing::warn!(home = %key, "the Home watch has not shown the placement within 2 s");
    }

    /// Remembers that Revision `namespace/name` waits for room (or no longer does).
    pub fn set_waiting(&self, namespace: &str, name: &str, waiting: bool) {
        let mut all = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        if waiting {
            all.entry(namespace.to_string()).or_default().insert(name.to_string());
        } else if let Some(set) = all.get_mut(namespace) {
            set.remove(name);
        }
    }

    fn waiting_in(&self, namespace: &str) -> Vec<ObjectRef<Revision>> {
        let all = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        all.get(namespace).into_iter().flatten().map(|name| ObjectRef::new(name).within(namespace)).collect()
    }

    fn placed_on(&self, namespace: &str, grant: &str) -> Vec<ObjectRef<Revision>> {
        self.homes_on(namespace, grant).map(|h| ObjectRef::new(&h.spec.revision_name).within(namespace)).collect()
    }

    /// Starts watching Homes and grants (of `namespace`, or all) into the stores; returns
    /// the Revisions to reconcile as they change, and the namespaces whose shared grant's
    /// allocation changed (to be sized again). Only the first call watches.
    pub fn watch(
        self: &Arc<Self>,
        client: &Client,
        namespace: Option<&str>,
    ) -> (impl Stream<Item = ObjectRef<Revision>> + Send + use<>, impl Stream<Item = String> + Send + use<>) {
        let (wake, woken) = mpsc::channel(WAKE_CAPACITY);
        let (resize, to_resize) = mpsc::channel(WAKE_CAPACITY);
        let writers = self.writers.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some((home_writer, grant_writer)) = writers {
            let (homes, grants): (Api<Home>, Api<CapacityGrant>) = match namespace {
                Some(ns) => (Api::namespaced(client.clone(), ns), Api::namespaced(client.clone(), ns)),
                None => (Api::all(client.clone()), Api::all(client.clone())),
            };
            let home_events = reflector::reflector(home_writer, watcher(homes, watcher::Config::default()).default_backoff());
            let grant_events = reflector::reflector(grant_writer, watcher(grants, watcher::Config::default()).default_backoff());
            tokio::spawn(wake_on_homes(Arc::clone(self), home_events, wake.clone(), resize.clone()));
            tokio::spawn(wake_on_grants(Arc::clone(self), grant_events, wake, resize));
        }
        (woken, to_resize)
    }
}

/// Any Home event wakes the Home's Revision and the Revisions waiting in its namespace;
/// a Home deleted from a shared grant has that grant sized again.
async fn wake_on_homes(
    grants: Arc<Grants>,
    events: impl Stream<Item = Result<watcher::Event<Home>, watcher::Error>>,
    mut wake: mpsc::Sender<ObjectRef<Revision>>,
    mut resize: mpsc::Sender<String>,
) {
    let mut events = std::pin::pin!(events);
    while let Some(event) = events.next().await {
        let (home, listing) = match event {
            Ok(watcher::Event::Delete(h)) => {
                // What it reserved is free: the namespace's shared grant may shrink.
                if h.spec.grant_name == keys::SHARED_GRANT_NAME {
                    let _ = resize.try_send(h.namespace().unwrap_or_default());
                }
                (h, false)
            }
            Ok(watcher::Event::Apply(h)) => (h, false),
            Ok(watcher::Event::InitApply(h)) => (h, true),
            Ok(_) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "watching Homes failed; retrying");
                continue;
            }
        };
        // Its own Revision always (waiting for room in the channel), those waiting when room may have appeared.
        if let Some(owner) = controlling_revision(&home.metadata)
            && wake.send(owner).await.is_err()
        {
            return; // the controller stopped
        }
        if !listing {
            for revision in grants.waiting_in(&home.namespace().unwrap_or_default()) {
                let _ = wake.try_send(revision);
            }
        }
    }
}

/// A grant event wakes the Revisions waiting in its namespace, and, when its readiness
/// changed, every Revision placed on it.
async fn wake_on_grants(
    grants: Arc<Grants>,
    events: impl Stream<Item = Result<watcher::Event<CapacityGrant>, watcher::Error>>,
    mut wake: mpsc::Sender<ObjectRef<Revision>>,
    mut resize: mpsc::Sender<String>,
) {
    let mut readiness: HashMap<(String, String), (i64, Option<String>)> = HashMap::new();
    let mut events = std::pin::pin!(events);
    while let Some(event) = events.next().await {
        let (grant, deleted) = match event {
            Ok(watcher::Event::Apply(g) | watcher::Event::InitApply(g)) => (g, false),
            Ok(watcher::Event::Delete(g)) => (g, true),
            Ok(_) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "watching CapacityGrants failed; retrying");
                continue;
            }
        };
        let namespace = grant.namespace().unwrap_or_default();
        let key = (namespace.clone(), grant.name_any());
        let ready = grant
            .status
            .as_ref()
            .map(|s| {
                (s.observed_generation, s.get_condition(lampyr_api::conditions::CONDITION_READY).map(|c| c.status.as_str().to_string()))
            })
            .unwrap_or_default();
        let changed = if deleted { readiness.remove(&key).is_some() } else { readiness.insert(key.clone(), ready.clone()) != Some(ready) };
        let mut woken = grants.waiting_in(&namespace);
        if changed {
            woken.extend(grants.placed_on(&namespace, &key.1));
        }
        for revision in woken {
            let _ = wake.try_send(revision);
        }
        // A shared grant's allocation may call for more or fewer instances; a full channel
        // drops the request (the next allocation change, or any placement, sizes it).
        if !deleted && key.1 == keys::SHARED_GRANT_NAME && super::children::managed_by_us(&grant) {
            let _ = resize.try_send(namespace);
        }
    }
}
