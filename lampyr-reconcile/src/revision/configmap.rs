//! Watching one settings ConfigMap (`config-autoscaler`, the image map): its
//! observations as a stream, the changes of what it sets, and Event notes that fit.

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;

/// Each observation of the ConfigMap `namespace/name`: `Some` when it exists, `None`
/// when it does not (after a list that did not find it, or a deletion). Errors are
/// logged naming `what` and the RBAC it needs, and the watch retries with backoff.
pub fn observations(
    client: Client,
    namespace: &str,
    name: &str,
    what: &'static str,
) -> impl Stream<Item = Option<ConfigMap>> + Send + 'static {
    let api: Api<ConfigMap> = Api::namespaced(client, namespace);
    let selector = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let object = format!("{namespace}/{name}");
    let mut listed = false;
    watcher(api, selector).default_backoff().filter_map(move |event| {
        let seen = match event {
            Ok(watcher::Event::Init) => {
                listed = false;
                None
            }
            Ok(watcher::Event::InitApply(cm) | watcher::Event::Apply(cm)) => {
                listed = true;
                Some(Some(cm))
            }
            Ok(watcher::Event::InitDone) if !listed => Some(None),
            Ok(watcher::Event::InitDone) => None,
            Ok(watcher::Event::Delete(_)) => Some(None),
            Err(e) => {
                tracing::warn!(
                    configmap = %object, error = %e,
                    "cannot read {what}; retrying (lampyr-controller needs get, list and watch on this ConfigMap: \
                     see config/lampyr-controller.yaml)"
                );
                None
            }
        };
        std::future::ready(seen)
    })
}

/// Yields once per later change of the value `current` holds.
pub fn changes<T: Send + Sync + 'static>(current: &watch::Sender<T>) -> impl Stream<Item = ()> + Send + 'static {
    let mut rx = current.subscribe();
    rx.mark_unchanged();
    futures::stream::unfold(rx, |mut rx| async move { rx.changed().await.ok().map(|()| ((), rx)) })
}

/// `note` cut to the 1 kB an Event allows (on a character boundary, marked with `...`).
pub fn fit_note(mut note: String) -> String {
    if note.len() > 1000 {
        let mut end = 997;
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        note.truncate(end);
        note.push_str("...");
    }
    note
}
