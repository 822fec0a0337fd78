//! The objects a Revision owns, built as pure functions of the Revision, its
//! verified artifact, its fiber policy and the controller's configuration:
//! its `Home` and its ExternalName `Service`, each named exactly like the
//! Revision and controlled by it (owner reference with `controller: true,
//! blockOwnerDeletion: true`, so the garbage collector deletes them with it);
//! and the namespace's shared `CapacityGrant`, which no Revision owns.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Resource;
use kube::runtime::reflector::ObjectRef;
use lampyr_api::keys;
use lampyr_api::policy::FiberPolicy;
use lampyr_api::{CapacityGrant, CapacityGrantSpec, Home, HomeSpec, Revision};

use super::placement::Demand;

/// Field manager of every write this controller makes (server-side apply).
pub const FIELD_MANAGER: &str = "lampyr-controller";
/// Upstream's `ServiceHTTPPort`.
pub const HTTP_PORT: i32 = 80;
/// Upstream's `ServiceHTTP2Port` (first container port named `h2c`).
pub const H2C_PORT: i32 = 81;
/// Upstream's `ServicePortNameHTTP1`.
pub const HTTP_PORT_NAME: &str = "http";
/// Upstream's `ServicePortNameH2C`.
pub const H2C_PORT_NAME: &str = "http2";
/// Label on every object this controller creates.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";

/// Who controls an existing object named like the Revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ownership {
    /// No such object yet.
    Absent,
    /// Controlled by this Revision.
    Ours,
    /// Exists and is not controlled by this Revision: never touched.
    NotOurs,
}

/// Whether `object` (if any) is controlled by the Revision with `uid`.
pub fn ownership<K: Resource>(object: Option<&K>, uid: &str) -> Ownership {
    match object {
        None => Ownership::Absent,
        Some(o) => {
            let ours = o.meta().owner_references.iter().flatten().any(|r| r.controller == Some(true) && r.uid == uid);
            if ours { Ownership::Ours } else { Ownership::NotOurs }
        }
    }
}

/// The controller owner reference to `revision` (it must have a name and uid).
pub fn owner_reference(revision: &Revision) -> OwnerReference {
    OwnerReference {
        api_version: Revision::API_VERSION.to_string(),
        kind: Revision::KIND.to_string(),
        name: revision.metadata.name.clone().unwrap_or_default(),
        uid: revision.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// The Revision controlling `meta`'s object, when one does: whom a child's change wakes.
pub fn controlling_revision(meta: &ObjectMeta) -> Option<ObjectRef<Revision>> {
    let owner = meta.owner_references.iter().flatten().find(|r| r.controller == Some(true) && r.kind == Revision::KIND)?;
    (owner.api_version == Revision::API_VERSION).then(|| ObjectRef::new(&owner.name).within(meta.namespace.as_deref().unwrap_or_default()))
}

/// Labels every child carries: the Revision's labels (but its routing state,
/// which changes with traffic), plus the Revision's name and UID.
pub fn child_labels(revision: &Revision) -> BTreeMap<String, String> {
    let mut labels: BTreeMap<String, String> = revision
        .metadata
        .labels
        .iter()
        .flatten()
        .filter(|(k, _)| k.as_str() != keys::ROUTING_STATE_LABEL)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    labels.insert(keys::REVISION_LABEL.into(), revision.metadata.name.clone().unwrap_or_default());
    labels.insert(keys::REVISION_UID_LABEL.into(), revision.metadata.uid.clone().unwrap_or_default());
    labels.insert(MANAGED_BY_LABEL.into(), FIELD_MANAGER.into());
    labels
}

fn child_meta(revision: &Revision) -> ObjectMeta {
    ObjectMeta {
        name: revision.metadata.name.clone(),
        namespace: revision.metadata.namespace.clone(),
        labels: Some(child_labels(revision)),
        owner_references: Some(vec![owner_reference(revision)]),
        ..ObjectMeta::default()
    }
}

/// The Revision's Home, placed on grant `grant` with `demand` (its fiber memory).
pub fn home(revision: &Revision, artifact: &str, sealed_template: Option<&str>, policy: &FiberPolicy, grant: &str, demand: Demand) -> Home {
    let name = revision.metadata.name.clone().unwrap_or_default();
    let mut home = Home::new(
        &name,
        HomeSpec {
            revision_name: name.clone(),
            artifact: artifact.to_string(),
            sealed_template: sealed_template.map(str::to_string),
            grant_name: grant.to_string(),
            fiber_memory_bytes: i64::try_from(demand.fiber_memory).unwrap_or(i64::MAX),
            policy: policy.clone(),
            image_pull_secrets: pull_secret_names(revision),
            service_account_name: revision.spec.service_account_name.clone().filter(|n| !n.is_empty()),
        },
    );
    home.metadata = child_meta(revision);
    home
}

/// The Revision's imagePullSecrets, by name, in order, unnamed ones left out.
pub fn pull_secret_names(revision: &Revision) -> Vec<String> {
    revision.spec.image_pull_secrets.iter().flatten().map(|r| r.name.clone()).filter(|n| !n.is_empty()).collect()
}

/// The size and images of the shared grant lampyr-controller creates in a namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrantSizing {
    /// Fiber slots each grant Pod holds.
    pub slots_per_instance: u32,
    /// Guest memory each grant Pod holds, in bytes.
    pub memory_per_instance: u64,
    /// Grant Pods of the shared grant, at least (it starts with these).
    pub instances: i32,
    /// Grant Pods the shared grant may grow to as its load rises ([`super::placement::shared_instances`]).
    pub max_instances: i32,
    /// The fiberd image, pinned by digest.
    pub grant_image: String,
    /// The helper image, pinned by digest.
    pub helper_image: String,
}

/// What one fiber of this Revision reserves: its `min-scale`, and the snapshot's
/// memory or the container's memory request/limit when larger.
pub fn demand(policy: &FiberPolicy, artifact_memory: u64) -> Demand {
    Demand { min_scale: policy.scaling.min_scale, fiber_memory: policy.fiber_memory(artifact_memory) }
}

/// The namespace's shared CapacityGrant, [`keys::SHARED_GRANT_NAME`]: labelled as
/// this controller's, owned by no Revision, `instances` grant Pods each sized by `sizing`.
pub fn shared_grant(namespace: &str, sizing: &GrantSizing, instances: i32) -> CapacityGrant {
    let instances = instances.max(1);
    let total = |per: u64| i64::try_from(per).unwrap_or(i64::MAX).saturating_mul(i64::from(instances));
    let mut grant = CapacityGrant::new(
        keys::SHARED_GRANT_NAME,
        CapacityGrantSpec {
            fiber_slots: i32::try_from(total(u64::from(sizing.slots_per_instance))).unwrap_or(i32::MAX),
            memory_bytes: total(sizing.memory_per_instance),
            instances,
            placement: None,
            grant_image: sizing.grant_image.clone(),
            helper_image: sizing.helper_image.clone(),
        },
    );
    grant.metadata.namespace = Some(namespace.to_string());
    grant.metadata.labels = Some(BTreeMap::from([(MANAGED_BY_LABEL.to_string(), FIELD_MANAGER.to_string())]));
    grant
}

/// Whether this controller manages `grant` (it created it as a namespace's shared grant).
pub fn managed_by_us(grant: &CapacityGrant) -> bool {
    grant.metadata.labels.as_ref().and_then(|l| l.get(MANAGED_BY_LABEL)).is_some_and(|v| v == FIELD_MANAGER)
}

/// Whether the Revision's first container port is named `h2c` (upstream's rule).
pub fn wants_h2c(revision: &Revision) -> bool {
    revision.spec.containers.first().and_then(|c| c.ports.as_ref()).and_then(|p| p.first()).and_then(|p| p.name.as_deref()) == Some("h2c")
}

/// The Revision's Service: ExternalName to fiber-router, port 80 `http` (81
/// `http2` when the first container port is named `h2c`), as upstream's Route
/// expects of the Service named like the Revision.
pub fn service(revision: &Revision, router_service: &str) -> Service {
    let (port, name) = if wants_h2c(revision) { (H2C_PORT, H2C_PORT_NAME) } else { (HTTP_PORT, HTTP_PORT_NAME) };
    Service {
        metadata: child_meta(revision),
        spec: Some(ServiceSpec {
            type_: Some("ExternalName".into()),
            external_name: Some(router_service.to_string()),
            ports: Some(vec![ServicePort {
                name: Some(name.into()),
                port,
                protocol: Some("TCP".into()),
                target_port: Some(IntOrString::Int(port)),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// Whether an existing Service already matches the desired one in every field
/// this controller sets (the API server adds defaults of its own).
pub fn service_matches(existing: &Service, desired: &Service) -> bool {
    let (Some(e), Some(d)) = (existing.spec.as_ref(), desired.spec.as_ref()) else { return false };
    let ports = |s: &ServiceSpec| -> Vec<(Option<String>, i32, Option<IntOrString>)> {
        s.ports.iter().flatten().map(|p| (p.name.clone(), p.port, p.target_port.clone())).collect()
    };
    e.type_ == d.type_ && e.external_name == d.external_name && ports(e) == ports(d) && meta_matches(&existing.metadata, &desired.metadata)
}

/// Whether `existing` carries every label and the owner reference of `desired`.
pub fn meta_matches(existing: &ObjectMeta, desired: &ObjectMeta) -> bool {
    let labels_ok = desired.labels.iter().flatten().all(|(k, v)| existing.labels.as_ref().and_then(|l| l.get(k)) == Some(v));
    let owners_ok = desired.owner_references.iter().flatten().all(|d| existing.owner_references.iter().flatten().any(|e| e == d));
    labels_ok && owners_ok
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use lampyr_api::RevisionTemplateSpec;
    use serde_json::json;

    fn revision(ports: serde_json::Value) -> Revision {
        serde_json::from_value(json!({
            "apiVersion": "serving.knative.dev/v1", "kind": "Revision",
            "metadata": {"name": "hello-00001", "namespace": "ns", "uid": "u-1",
                "labels": {"serving.knative.dev/configuration": "hello", "serving.knative.dev/service": "hello",
                           "serving.knative.dev/routingState": "active"}},
            "spec": {"containers": [{"image": "x", "ports": ports}]}
        }))
        .unwrap()
    }

    fn policy() -> FiberPolicy {
        let t: RevisionTemplateSpec = serde_json::from_value(json!({"spec": {"containers": [{"image": "x"}]}})).unwrap();
        lampyr_api::translate::translate(&t).unwrap()
    }

    #[test]
    fn children_are_named_like_the_revision_labelled_and_controlled_by_it() {
        let rev = revision(json!([]));
        let home = home(&rev, "r.io/a@sha256:00", None, &policy(), "lampyr-fibers", demand(&policy(), 1 << 20));
        assert_eq!(home.metadata.name.as_deref(), Some("hello-00001"));
        assert_eq!((home.spec.grant_name.as_str(), home.spec.fiber_memory_bytes), ("lampyr-fibers", 1 << 20));
        let owner = &home.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str(), owner.controller, owner.block_owner_deletion),
            ("Revision", "u-1", Some(true), Some(true))
        );
        let labels = home.metadata.labels.as_ref().unwrap();
        assert_eq!(labels[keys::REVISION_LABEL], "hello-00001");
        assert_eq!(labels[keys::SERVICE_LABEL], "hello");
        assert!(!labels.contains_key(keys::ROUTING_STATE_LABEL), "routing state churns; not copied");
        assert_eq!(ownership(Some(&home), "u-1"), Ownership::Ours);
        assert_eq!(ownership(Some(&home), "u-2"), Ownership::NotOurs);
        assert_eq!(ownership::<Home>(None, "u-1"), Ownership::Absent);
    }

    #[test]
    fn service_is_external_name_on_upstreams_port() {
        let svc = service(&revision(json!([{"containerPort": 8080}])), "fiber-router.lampyr-system.svc.cluster.local");
        let spec = svc.spec.as_ref().unwrap();
        assert_eq!(spec.type_.as_deref(), Some("ExternalName"));
        assert_eq!(spec.external_name.as_deref(), Some("fiber-router.lampyr-system.svc.cluster.local"));
        let port = &spec.ports.as_ref().unwrap()[0];
        assert_eq!((port.name.as_deref(), port.port), (Some("http"), 80));
        let h2c = service(&revision(json!([{"name": "h2c", "containerPort": 8080}])), "r");
        let port = &h2c.spec.as_ref().unwrap().ports.as_ref().unwrap()[0];
        assert_eq!((port.name.as_deref(), port.port), (Some("http2"), 81));
        assert!(service_matches(&svc, &svc));
        assert!(!service_matches(&h2c, &svc));
    }

    #[test]
    fn the_shared_grant_is_sized_per_instance_and_owned_by_no_revision() {
        let sizing = GrantSizing {
            slots_per_instance: 100,
            memory_per_instance: 2 << 30,
            instances: 1,
            max_instances: 3,
            grant_image: "g".into(),
            helper_image: "h".into(),
        };
        let grant = shared_grant("apps", &sizing, 2);
        assert_eq!(grant.metadata.name.as_deref(), Some(keys::SHARED_GRANT_NAME));
        assert_eq!(grant.metadata.namespace.as_deref(), Some("apps"));
        assert_eq!((grant.spec.fiber_slots, grant.spec.memory_bytes, grant.spec.instances), (200, 4 << 30, 2));
        assert!(grant.metadata.owner_references.is_none(), "it outlives every Revision");
        assert!(managed_by_us(&grant));
        let mut p = policy();
        assert_eq!(demand(&p, 1 << 20), Demand { min_scale: 0, fiber_memory: 1 << 20 });
        p.scaling.min_scale = 3;
        p.memory_bytes = Some(4 << 20);
        assert_eq!(demand(&p, 1 << 20), Demand { min_scale: 3, fiber_memory: 4 << 20 }, "the container's memory when larger");
    }

    #[test]
    fn a_child_wakes_the_revision_controlling_it_and_no_other_owner() {
        let rev = revision(json!([]));
        let home = home(&rev, "r.io/a@sha256:00", None, &policy(), "lampyr-fibers", demand(&policy(), 1 << 20));
        let woken = controlling_revision(&home.metadata).unwrap();
        assert_eq!(
            (woken.name.as_str(), woken.namespace.as_deref()),
            (rev.metadata.name.as_deref().unwrap(), rev.metadata.namespace.as_deref())
        );
        let mut orphan = home.metadata.clone();
        orphan.owner_references.as_mut().unwrap()[0].controller = Some(false);
        assert!(controlling_revision(&orphan).is_none(), "an owner that does not control it is not woken");
        orphan.owner_references.as_mut().unwrap()[0].controller = Some(true);
        orphan.owner_references.as_mut().unwrap()[0].kind = "Configuration".into();
        assert!(controlling_revision(&orphan).is_none(), "nor a controller of another kind");
    }
}
