//! Following the one grant this instance serves: its instance count, and so this
//! instance's share of every Home's scaling bounds, as the grant's spec changes, so
//! adding or removing instances never restarts the instances that stay (their
//! per-instance slots and memory, which size the Pod, are unchanged).
//!
//! An instance whose index the grant no longer has is being retired: it keeps
//! its share and serves until its Pod is deleted (the grant controller deletes
//! it; fiberd then removes its status entries, so fiber-router stops sending it
//! requests, and drains those in flight).

use std::time::Duration;

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use lampyr_api::CapacityGrant;
use tokio::sync::{oneshot, watch};

use crate::share::InstanceShare;

/// Longest fiberd waits for the grant's first listing before loading Homes with `--instances`.
pub(crate) const FIRST_LISTING: Duration = Duration::from_secs(10);

/// Keeps `share` at what grant `name` (watched through `api`) gives instance `index`;
/// `listed` fires once the first listing was applied (or showed no such grant:
/// `--instances` stays).
pub(crate) async fn follow(
    api: Api<CapacityGrant>,
    name: String,
    index: u32,
    share: &watch::Sender<Option<InstanceShare>>,
    listed: oneshot::Sender<()>,
) {
    let mut listed = Some(listed);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = std::pin::pin!(watcher(api, config).default_backoff());
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Apply(grant) | watcher::Event::InitApply(grant)) => take_share(&grant, index, share),
            Ok(watcher::Event::InitDone) => {
                if let Some(listed) = listed.take() {
                    let _ = listed.send(());
                }
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(grant = %name, error = %e, "watching the grant failed; retrying"),
        }
    }
}

/// Takes instance `index`'s share of `grant`, unless the grant no longer has the instance.
fn take_share(grant: &CapacityGrant, index: u32, share: &watch::Sender<Option<InstanceShare>>) {
    let count = u32::try_from(grant.spec.instances.max(1)).unwrap_or(1);
    if index >= count {
        tracing::warn!(index, instances = count, "this instance is being retired from its grant; serving its share until its Pod goes");
        return;
    }
    let mine = InstanceShare { index, count };
    if share.send_if_modified(|current| current.replace(mine) != Some(mine)) {
        tracing::info!(index, instances = count, "the grant's instance count changed; every Home takes its new share");
    }
}
