//! This instance's entries in `Home.status.instances`, written by server-side
//! apply on the status subresource with field manager `fiberd/<name>`: the
//! list is a map keyed by `name`, so each instance owns exactly its entry,
//! and applying a status without it removes it.

use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use lampyr_api::fiber::FIBER_API_VERSION;
use lampyr_api::{Home, HomeInstance};
use serde_json::json;

/// Writes and removes this instance's entries.
pub(crate) struct StatusWriter {
    client: Client,
    manager: String,
}

impl StatusWriter {
    pub(crate) fn new(client: Client, manager: String) -> Self {
        StatusWriter { client, manager }
    }

    /// Applies `entry` as this instance's entry of Home `namespace/name`.
    pub(crate) async fn apply(&self, namespace: &str, name: &str, entry: &HomeInstance) -> Result<(), kube::Error> {
        let patch = json!({
            "apiVersion": FIBER_API_VERSION,
            "kind": "Home",
            "metadata": {"name": name},
            "status": {"instances": [entry]},
        });
        self.patch(namespace, name, &patch).await
    }

    /// Removes this instance's entry of Home `namespace/name`; a Home that is gone has none.
    pub(crate) async fn remove(&self, namespace: &str, name: &str) -> Result<(), kube::Error> {
        let patch = json!({"apiVersion": FIBER_API_VERSION, "kind": "Home", "metadata": {"name": name}, "status": {}});
        match self.patch(namespace, name, &patch).await {
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            other => other,
        }
    }

    async fn patch(&self, namespace: &str, name: &str, patch: &serde_json::Value) -> Result<(), kube::Error> {
        let api: Api<Home> = Api::namespaced(self.client.clone(), namespace);
        // Forced: the entry is this instance's alone, whoever wrote it last.
        let params = PatchParams::apply(&self.manager).force();
        api.patch_status(name, &params, &Patch::Apply(patch)).await.map(|_| ())
    }
}
