//! Children of one kind as last observed: a reconcile reads its child here instead
//! of a GET, and each change of a child wakes the Revision that controls it
//! (what `Controller::owns` does, with the store kept).

use std::sync::{Arc, Mutex, PoisonError};

use futures::channel::mpsc;
use futures::{SinkExt, Stream, StreamExt};
use kube::Resource;
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use lampyr_api::Revision;
use serde::de::DeserializeOwned;

use super::children::controlling_revision;

/// Wake-ups not yet picked up by the controller; the watch waits while it is full.
const WAKE_CAPACITY: usize = 1024;

/// A store of children of kind `K` and the watch that fills it.
pub struct Owned<K: Resource<DynamicType = ()> + Clone + 'static> {
    store: Store<K>,
    writer: Mutex<Option<Writer<K>>>,
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Default for Owned<K> {
    fn default() -> Self {
        let (store, writer) = reflector::store();
        Owned { store, writer: Mutex::new(Some(writer)) }
    }
}

impl<K> Owned<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    /// Child `namespace/name` as last observed.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<K>> {
        self.store.get(&ObjectRef::new(name).within(namespace))
    }

    /// Whether the watch has listed once (before that, a child it does not show may exist).
    pub async fn wait_until_ready(&self) {
        let _ = self.store.wait_until_ready().await;
    }

    /// Starts watching `api` (filtered by `config`) into the store; returns the
    /// Revisions to reconcile as their children change. Only the first call watches.
    pub fn watch(&self, api: Api<K>, config: watcher::Config) -> impl Stream<Item = ObjectRef<Revision>> + Send + use<K> {
        let (mut wake, woken) = mpsc::channel(WAKE_CAPACITY);
        let writer = self.writer.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(writer) = writer {
            let kind = K::kind(&());
            let events = reflector::reflector(writer, watcher(api, config).default_backoff());
            tokio::spawn(async move {
                let mut events = std::pin::pin!(events);
                while let Some(event) = events.next().await {
                    let child = match event {
                        Ok(watcher::Event::Apply(c) | watcher::Event::InitApply(c) | watcher::Event::Delete(c)) => c,
                        Ok(_) => continue,
                        Err(e) => {
                            tracing::warn!(error = %e, "watching {kind} failed; retrying");
                            continue;
                        }
                    };
                    if let Some(revision) = controlling_revision(child.meta())
                        && wake.send(revision).await.is_err()
                    {
                        return; // the controller stopped
                    }
                }
            });
        }
        woken
    }
}
