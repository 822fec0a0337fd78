//! What grant Pods need in their namespace besides the Pods themselves: the
//! fiberd service account, its binding to [`FIBERD_CLUSTER_ROLE`] and a copy of
//! the fleet key. Written once per namespace: each is compared with what the
//! controller's watches last saw and applied only when missing or different.

use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use lampyr_api::keys::FLEET_KEY_SECRET_NAMESPACE;
use serde_json::{Value, json};

use super::controller::{FIELD_MANAGER, GrantError, api_error};
use super::pods::PodSettings;
use crate::revision::children::MANAGED_BY_LABEL;

/// The ClusterRole fiberd runs under, bound in each namespace that has grant Pods
/// (defined by the grant controller's manifest).
pub const FIBERD_CLUSTER_ROLE: &str = "lampyr-fiberd";

/// The controller's view of every namespace's grant-Pod identity: watches of the
/// service accounts, RoleBindings and fleet-key Secrets named as the settings
/// name them (a field selector each, so nothing else is cached).
#[derive(Clone)]
pub struct IdentityStores {
    accounts: Store<ServiceAccount>,
    bindings: Store<RoleBinding>,
    secrets: Store<Secret>,
}

impl IdentityStores {
    /// Starts the three watches on `client`'s runtime; they stop when the
    /// returned handles are aborted or the runtime ends.
    pub fn watch(client: &Client, settings: &PodSettings) -> (IdentityStores, Vec<tokio::task::JoinHandle<()>>) {
        let (accounts, a) = watch_named::<ServiceAccount>(client, &settings.service_account);
        let (bindings, b) = watch_named::<RoleBinding>(client, &settings.service_account);
        let (secrets, s) = watch_named::<Secret>(client, &settings.fleet_key_secret);
        (IdentityStores { accounts, bindings, secrets }, vec![a, b, s])
    }

    /// Waits until each watch has listed once (so an absent object is known absent).
    pub async fn wait_until_ready(&self) {
        let _ = self.accounts.wait_until_ready().await;
        let _ = self.bindings.wait_until_ready().await;
        let _ = self.secrets.wait_until_ready().await;
    }
}

fn watch_named<K>(client: &Client, name: &str) -> (Store<K>, tokio::task::JoinHandle<()>)
where
    K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
{
    use futures::StreamExt;
    let (store, writer) = reflector::store();
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let kind = K::kind(&()).to_string();
    let stream = reflector::reflector(writer, watcher(Api::<K>::all(client.clone()), config)).default_backoff();
    let task = tokio::spawn(async move {
        stream
            .for_each(|event| {
                if let Err(error) = event {
                    tracing::warn!(%kind, %error, "watching grant Pods' identity objects");
                }
                std::future::ready(())
            })
            .await;
    });
    (store, task)
}

/// Makes sure `namespace` has the service account, its RoleBinding and the fleet
/// key copy grant Pods use, writing only what the watches show missing or different.
pub async fn ensure_identity(client: &Client, stores: &IdentityStores, namespace: &str, settings: &PodSettings) -> Result<(), GrantError> {
    let apply = PatchParams::apply(FIELD_MANAGER).force();
    let name = &settings.service_account;
    if !account_current(stores.accounts.get(&ObjectRef::new(name).within(namespace)).as_deref()) {
        Api::<ServiceAccount>::namespaced(client.clone(), namespace)
            .patch(name, &apply, &Patch::Apply(&service_account(namespace, name)))
            .await
            .map_err(api_error(format!("creating service account {namespace}/{name}")))?;
        tracing::info!(%namespace, account = %name, "wrote grant Pods' service account");
    }
    let binding = role_binding(namespace, name);
    if !binding_current(stores.bindings.get(&ObjectRef::new(name).within(namespace)).as_deref(), &binding) {
        Api::<RoleBinding>::namespaced(client.clone(), namespace)
            .patch(name, &apply, &Patch::Apply(&binding))
            .await
            .map_err(api_error(format!("binding {FIBERD_CLUSTER_ROLE} to {namespace}/{name}")))?;
        tracing::info!(%namespace, binding = %name, "wrote grant Pods' role binding");
    }
    if namespace != FLEET_KEY_SECRET_NAMESPACE {
        let key = &settings.fleet_key_secret;
        let source = stores.secrets.get(&ObjectRef::new(key).within(FLEET_KEY_SECRET_NAMESPACE));
        if let Some(copy) =
            key_copy_needed(source.as_deref(), stores.secrets.get(&ObjectRef::new(key).within(namespace)).as_deref(), namespace)
        {
            Api::<Secret>::namespaced(client.clone(), namespace)
                .patch(key, &apply, &Patch::Apply(&copy))
                .await
                .map_err(api_error(format!("copying the fleet key into {namespace}")))?;
            tracing::info!(%namespace, secret = %key, "copied the fleet key");
        }
    }
    Ok(())
}

fn labels() -> Value {
    json!({ MANAGED_BY_LABEL: FIELD_MANAGER })
}

fn service_account(namespace: &str, name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": { "name": name, "namespace": namespace, "labels": labels() },
    })
}

fn role_binding(namespace: &str, name: &str) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": { "name": name, "namespace": namespace, "labels": labels() },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": FIBERD_CLUSTER_ROLE },
        "subjects": [{ "kind": "ServiceAccount", "name": name, "namespace": namespace }],
    })
}

/// Whether `meta` carries this controller's managed-by label.
fn labelled_ours(meta: &kube::api::ObjectMeta) -> bool {
    meta.labels.as_ref().and_then(|l| l.get(MANAGED_BY_LABEL)).map(String::as_str) == Some(FIELD_MANAGER)
}

/// Whether the observed service account is there and carries this controller's label.
fn account_current(observed: Option<&ServiceAccount>) -> bool {
    observed.is_some_and(|a| labelled_ours(&a.metadata))
}

/// Whether the observed RoleBinding grants what `desired` grants (role and subjects) with our label.
fn binding_current(observed: Option<&RoleBinding>, desired: &Value) -> bool {
    let Some(observed) = observed else { return false };
    let Ok(observed_json) = serde_json::to_value(observed) else { return false };
    labelled_ours(&observed.metadata) && observed_json["roleRef"] == desired["roleRef"] && observed_json["subjects"] == desired["subjects"]
}

/// The fleet key copy to apply in `namespace`: none when there is no key to copy
/// or the copy already holds the key's data.
fn key_copy_needed(source: Option<&Secret>, copy: Option<&Secret>, namespace: &str) -> Option<Value> {
    let source = source?;
    if copy.is_some_and(|c| c.data == source.data) {
        return None;
    }
    Some(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": { "name": source.metadata.name, "namespace": namespace, "labels": labels() },
        "type": "Opaque",
        "data": source.data,
    }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use k8s_openapi::ByteString;
    use std::collections::BTreeMap;

    fn from<T: serde::de::DeserializeOwned>(value: Value) -> T {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn an_account_is_current_only_when_present_and_ours() {
        assert!(!account_current(None));
        assert!(account_current(Some(&from(service_account("ns", "lampyr-fiberd")))));
        let foreign: ServiceAccount = from(json!({"metadata": {"name": "lampyr-fiberd", "namespace": "ns"}}));
        assert!(!account_current(Some(&foreign)), "an account someone else made is labelled by our apply");
    }

    #[test]
    fn a_binding_is_current_only_when_it_grants_the_fiberd_role_to_the_account() {
        let desired = role_binding("ns", "lampyr-fiberd");
        assert!(!binding_current(None, &desired));
        assert!(binding_current(Some(&from(desired.clone())), &desired));
        let mut other_role = desired.clone();
        other_role["roleRef"]["name"] = json!("edit");
        assert!(!binding_current(Some(&from(other_role)), &desired));
        let mut other_subject = desired.clone();
        other_subject["subjects"][0]["namespace"] = json!("elsewhere");
        assert!(!binding_current(Some(&from(other_subject)), &desired));
    }

    #[test]
    fn the_key_is_copied_when_missing_or_changed_and_not_otherwise() {
        let secret = |ns: &str, value: &[u8]| Secret {
            metadata: kube::api::ObjectMeta { name: Some("k".into()), namespace: Some(ns.into()), ..Default::default() },
            data: Some(BTreeMap::from([("key".to_string(), ByteString(value.to_vec()))])),
            ..Default::default()
        };
        assert_eq!(key_copy_needed(None, None, "ns"), None, "no key yet: nothing to copy");
        let source = secret("default", b"one");
        let copy = key_copy_needed(Some(&source), None, "ns").unwrap();
        assert_eq!(copy["metadata"]["namespace"], "ns");
        assert_eq!(copy["data"]["key"], json!("b25l"), "the key's data, base64 as the API takes it");
        assert_eq!(key_copy_needed(Some(&source), Some(&secret("ns", b"one")), "ns"), None);
        assert!(key_copy_needed(Some(&source), Some(&secret("ns", b"old")), "ns").is_some(), "a rotated key is copied again");
    }
}
