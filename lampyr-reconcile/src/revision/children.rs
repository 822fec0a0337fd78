//! The objects a Revision owns, built as pure functions of the Revision, its
//! verified artifact, its fiber policy and the controller's configuration:
//! its `Home`, its `CapacityGrant` and its ExternalName `Service`, each named
//! exactly like the Revision and controlled by it (owner reference with
//! `controller: true, blockOwnerDeletion: true`, so the garbage collector
//! deletes them with it).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Resource;
use lampyr_api::keys;
use lampyr_api::policy::FiberPolicy;
use lampyr_api::{CapacityGrant, CapacityGrantSpec, Home, HomeSpec, Revision};

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
            let ours = o
                .meta()
                .owner_references
                .iter()
                .flatten()
                .any(|r| r.controller == Some(true) && r.uid == uid);
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

/// The Revision's Home.
pub fn home(revision: &Revision, artifact: &str, sealed_template: Option<&str>, policy: &FiberPolicy) -> Home {
    let name = revision.metadata.name.clone().unwrap_or_default();
    let mut home = Home::new(
        &name,
        HomeSpec {
            revision_name: name.clone(),
            artifact: artifact.to_string(),
            sealed_template: sealed_template.map(str::to_string),
            grant_name: name.clone(),
            policy: policy.clone(),
        },
    );
    home.metadata = child_meta(revision);
    home
}

/// Grant sizing: what the Revision's policy and the controller's defaults ask for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrantSizing {
    /// Fiber slots when the policy sets no `max-scale`.
    pub default_fiber_slots: u32,
    /// Grant Pods per grant.
    pub instances: i32,
    /// The fiberd image, pinned by digest.
    pub grant_image: String,
    /// The helper image, pinned by digest.
    pub helper_image: String,
}

/// Fiber slots for `policy`: its `max-scale` when bounded, else the default,
/// never fewer than `min-scale` or `initial-scale` ask for.
pub fn fiber_slots(policy: &FiberPolicy, default_slots: u32) -> i32 {
    let s = &policy.scaling;
    let slots = if s.max_scale > 0 { s.max_scale } else { default_slots.max(s.min_scale).max(s.initial_scale) };
    i32::try_from(slots.max(1)).unwrap_or(i32::MAX)
}

/// Guest memory one fiber of this Revision reserves: the snapshot's memory, or
/// the container's memory request/limit when larger.
pub fn fiber_memory(policy: &FiberPolicy, artifact_memory: u64) -> u64 {
    policy.memory_bytes.unwrap_or(0).max(artifact_memory).max(1)
}

/// The Revision's CapacityGrant.
pub fn capacity_grant(revision: &Revision, policy: &FiberPolicy, artifact_memory: u64, sizing: &GrantSizing) -> CapacityGrant {
    let name = revision.metadata.name.clone().unwrap_or_default();
    let slots = fiber_slots(policy, sizing.default_fiber_slots);
    let per_fiber = i64::try_from(fiber_memory(policy, artifact_memory)).unwrap_or(i64::MAX);
    let mut grant = CapacityGrant::new(
        &name,
        CapacityGrantSpec {
            fiber_slots: slots,
            memory_bytes: per_fiber.saturating_mul(i64::from(slots)),
            instances: sizing.instances,
            placement: None,
            grant_image: sizing.grant_image.clone(),
            helper_image: sizing.helper_image.clone(),
        },
    );
    grant.metadata = child_meta(revision);
    grant
}

/// Whether the Revision's first container port is named `h2c` (upstream's rule).
pub fn wants_h2c(revision: &Revision) -> bool {
    revision
        .spec
        .containers
        .first()
        .and_then(|c| c.ports.as_ref())
        .and_then(|p| p.first())
        .and_then(|p| p.name.as_deref())
        == Some("h2c")
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
    let labels_ok = desired
        .labels
        .iter()
        .flatten()
        .all(|(k, v)| existing.labels.as_ref().and_then(|l| l.get(k)) == Some(v));
    let owners_ok = desired
        .owner_references
        .iter()
        .flatten()
        .all(|d| existing.owner_references.iter().flatten().any(|e| e == d));
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
        lampyr_fiber::translate::translate(&t).unwrap()
    }

    #[test]
    fn children_are_named_like_the_revision_labelled_and_controlled_by_it() {
        let rev = revision(json!([]));
        let home = home(&rev, "r.io/a@sha256:00", None, &policy());
        assert_eq!(home.metadata.name.as_deref(), Some("hello-00001"));
        assert_eq!(home.spec.grant_name, "hello-00001");
        let owner = &home.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.kind.as_str(), owner.uid.as_str(), owner.controller, owner.block_owner_deletion), ("Revision", "u-1", Some(true), Some(true)));
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
    fn grant_is_sized_from_the_policy() {
        let mut p = policy();
        let sizing = GrantSizing { default_fiber_slots: 10, instances: 2, grant_image: "g".into(), helper_image: "h".into() };
        let grant = capacity_grant(&revision(json!([])), &p, 1 << 20, &sizing);
        assert_eq!(grant.spec.fiber_slots, 10);
        assert_eq!(grant.spec.memory_bytes, 10 << 20);
        assert_eq!(grant.spec.instances, 2);
        p.scaling.max_scale = 3;
        p.memory_bytes = Some(4 << 20);
        let grant = capacity_grant(&revision(json!([])), &p, 1 << 20, &sizing);
        assert_eq!((grant.spec.fiber_slots, grant.spec.memory_bytes), (3, 12 << 20));
        p.scaling.max_scale = 0;
        p.scaling.min_scale = 25;
        assert_eq!(fiber_slots(&p, 10), 25);
    }
}
