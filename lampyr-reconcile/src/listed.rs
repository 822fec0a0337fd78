//! Whether a controller's watches have listed once, awaitable by any number of
//! reconciles at the same time.
//!
//! kube's `Store::wait_until_ready` keeps one waker: of several futures waiting on
//! it at once (reconciles of different objects), only the last one polled is woken
//! when the store lists, and the others wait for whatever else wakes them.
//! [`Listed`] waits on the stores from one task of its own and hands the answer
//! out through a watch channel, which wakes every waiter.

use std::future::Future;

use tokio::sync::watch;

/// Whether some watches have listed once; cheap to clone, one per reconcile if need be.
#[derive(Clone, Debug)]
pub struct Listed(watch::Receiver<bool>);

impl Listed {
    /// Spawns a task that awaits `listed` (the stores' own readiness, awaited once)
    /// and then marks every [`Listed`] cloned from this one as listed.
    pub fn spawn(listed: impl Future<Output = ()> + Send + 'static) -> Listed {
        let (done, receiver) = watch::channel(false);
        tokio::spawn(async move {
            listed.await;
            let _ = done.send(true);
        });
        Listed(receiver)
    }

    /// Whether the watches have listed.
    pub fn is_listed(&self) -> bool {
        *self.0.borrow()
    }

    /// Waits until the watches have listed; returns at once when the task that
    /// watched for it ended without their listing (the runtime is shutting down).
    pub async fn wait(&self) {
        let mut receiver = self.0.clone();
        let _ = receiver.wait_for(|listed| *listed).await;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;

    use super::*;

    /// How long a waiter may take to be woken before the test calls it lost.
    const LOST: Duration = Duration::from_secs(10);

    #[tokio::test]
    async fn every_concurrent_waiter_is_woken_when_the_store_lists() {
        let (store, mut writer) = reflector::store::<ConfigMap>();
        let listed = Listed::spawn(async move {
            let _ = store.wait_until_ready().await;
        });
        let waiters: Vec<_> = (0..8)
            .map(|_| {
                let listed = listed.clone();
                tokio::spawn(async move { listed.wait().await })
            })
            .collect();
        tokio::task::yield_now().await;
        assert!(!listed.is_listed(), "listed before the store listed");
        writer.apply_watcher_event(&Event::Init);
        writer.apply_watcher_event(&Event::InitDone);
        for waiter in waiters {
            tokio::time::timeout(LOST, waiter).await.expect("a waiter was never woken").expect("waiter task");
        }
        assert!(listed.is_listed());
    }

    #[tokio::test]
    async fn a_waiter_after_listing_returns_at_once() {
        let listed = Listed::spawn(async {});
        listed.wait().await;
        assert!(listed.is_listed());
        listed.clone().wait().await;
    }
}
