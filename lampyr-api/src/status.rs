//! `serving.knative.dev/v1` statuses, wire-compatible with upstream.
//!
//! Each status is upstream's: the inlined `duckv1.Status`
//! (`observedGeneration`, `conditions`, `annotations`) plus the resource's own
//! fields. Empty fields are omitted as Go's `omitempty` omits them.
//!
//! - [`RevisionStatus`]: `logUrl`, `containerStatuses`,
//!   `initContainerStatuses`, `actualReplicas`, `desiredReplicas`. There is no
//!   `serviceName`: upstream removed it. Its `mark_*` helpers are upstream's
//!   `revision_lifecycle.go` helpers over [`revision::CONDITION_SET`].
//! - [`ConfigurationStatus`]: the latest created and latest ready Revision.
//! - [`RouteStatus`]: `url`, `address` and the resolved `traffic`.
//! - [`ServiceStatus`]: the Configuration's and the Route's fields together,
//!   copied by [`ServiceStatus::propagate_configuration_status`] and
//!   [`ServiceStatus::propagate_route_status`].
//!
//! Conditions are managed through [`KnativeStatus::manage`] (system clock) or
//! [`KnativeStatus::manage_with_clock`], under each status's condition set.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::conditions::{CONDITION_READY, Clock, ConditionManager, KnativeStatus, configuration, revision, route, service};
use crate::duck::Addressable;
use crate::networking::IngressStatus;
use crate::traffic::TrafficTarget;

crate::knative_status! {
    /// `Revision.status`.
    pub struct RevisionStatus {
        conditions: revision::CONDITION_SET, "`Ready`, `ResourcesAvailable`, `ContainerHealthy`, `Active`, sorted by type.";
        /// The logging URL generated for this Revision.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        pub log_url: String,
        /// Container names and their resolved image digests (for Lampyr: the
        /// snapshot artifact, `repo@sha256:…`).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub container_statuses: Vec<ContainerStatus>,
        /// The same for init containers.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub init_container_statuses: Vec<ContainerStatus>,
        /// Ready replicas (for Lampyr: warm fibers) running this Revision.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub actual_replicas: Option<i32>,
        /// Replicas (fibers) the Revision should have.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub desired_replicas: Option<i32>,
    }
}

/// One entry of `containerStatuses`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStatus {
    /// The container's name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// The image resolved to a digest: `repo@sha256:…`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub image_digest: String,
}

impl RevisionStatus {
    /// `Active` True.
    pub fn mark_active_true(&mut self) {
        self.manage().mark_true(revision::ACTIVE);
    }

    /// `Active` False (e.g. [`revision::REASON_NO_TRAFFIC`]).
    pub fn mark_active_false(&mut self, reason: &str, message: &str) {
        self.manage().mark_false(revision::ACTIVE, reason, message);
    }

    /// `Active` Unknown (e.g. [`revision::REASON_QUEUED`]).
    pub fn mark_active_unknown(&mut self, reason: &str, message: &str) {
        self.manage().mark_unknown(revision::ACTIVE, reason, message);
    }

    /// `ContainerHealthy` True.
    pub fn mark_container_healthy_true(&mut self) {
        self.manage().mark_true(revision::CONTAINER_HEALTHY);
    }

    /// `ContainerHealthy` False (e.g. [`revision::exit_code_reason`]).
    pub fn mark_container_healthy_false(&mut self, reason: &str, message: &str) {
        self.manage().mark_false(revision::CONTAINER_HEALTHY, reason, message);
    }

    /// `ContainerHealthy` Unknown (e.g. [`revision::REASON_DEPLOYING`]).
    pub fn mark_container_healthy_unknown(&mut self, reason: &str, message: &str) {
        self.manage().mark_unknown(revision::CONTAINER_HEALTHY, reason, message);
    }

    /// `ResourcesAvailable` True.
    pub fn mark_resources_available_true(&mut self) {
        self.manage().mark_true(revision::RESOURCES_AVAILABLE);
    }

    /// `ResourcesAvailable` False (e.g. [`revision::REASON_NOT_OWNED`]).
    pub fn mark_resources_available_false(&mut self, reason: &str, message: &str) {
        self.manage().mark_false(revision::RESOURCES_AVAILABLE, reason, message);
    }

    /// `ResourcesAvailable` Unknown (e.g. [`revision::REASON_DEPLOYING`]).
    pub fn mark_resources_available_unknown(&mut self, reason: &str, message: &str) {
        self.manage().mark_unknown(revision::RESOURCES_AVAILABLE, reason, message);
    }
}

crate::knative_status! {
    /// `Configuration.status`.
    pub struct ConfigurationStatus {
        conditions: configuration::CONDITION_SET, "`Ready` only.";
        /// The newest Revision stamped from this Configuration that became Ready.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        pub latest_ready_revision_name: String,
        /// The newest Revision stamped from this Configuration.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        pub latest_created_revision_name: String,
    }
}

impl ConfigurationStatus {
    /// Records the newest Revision; `Ready` becomes Unknown until it is also
    /// the latest ready one.
    pub fn set_latest_created_revision_name(&mut self, name: &str) {
        name.clone_into(&mut self.latest_created_revision_name);
        if self.latest_ready_revision_name != name {
            self.manage().mark_unknown(CONDITION_READY, "", "");
        }
    }

    /// Records the newest ready Revision; `Ready` becomes True once it is
    /// also the latest created one.
    pub fn set_latest_ready_revision_name(&mut self, name: &str) {
        name.clone_into(&mut self.latest_ready_revision_name);
        if self.latest_created_revision_name == name {
            self.manage().mark_true(CONDITION_READY);
        }
    }
}

crate::knative_status! {
    /// `Route.status`.
    pub struct RouteStatus {
        conditions: route::CONDITION_SET, "`Ready`, `AllTrafficAssigned`, `IngressReady`, `CertificateProvisioned`, sorted by type.";
        /// The external URL of the Route.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub url: Option<String>,
        /// The cluster-internal address of the Route.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub address: Option<Addressable>,
        /// The traffic targets resolved to Revisions, with tagged targets' URLs.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub traffic: Vec<TrafficTarget>,
    }
}

impl RouteStatus {
    /// `IngressReady` follows the KIngress's `Ready`; a KIngress without one
    /// makes it Unknown [`route::REASON_INGRESS_NOT_CONFIGURED`].
    pub fn propagate_ingress_status(&mut self, ingress: &IngressStatus) {
        propagate_or_not_configured(&mut self.manage(), route::INGRESS_READY, ingress);
    }
}

crate::knative_status! {
    /// `Service.status`: the Configuration's and the Route's status fields.
    pub struct ServiceStatus {
        conditions: service::CONDITION_SET, "`Ready`, `ConfigurationsReady`, `RoutesReady`, sorted by type.";
        /// The Configuration's latest ready Revision.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        pub latest_ready_revision_name: String,
        /// The Configuration's latest created Revision.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        pub latest_created_revision_name: String,
        /// The Route's external URL.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub url: Option<String>,
        /// The Route's cluster-internal address.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub address: Option<Addressable>,
        /// The Route's resolved traffic targets.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub traffic: Vec<TrafficTarget>,
    }
}

impl ServiceStatus {
    /// Copies the Configuration's Revision names; `ConfigurationsReady`
    /// follows its `Ready` (unchanged while it has none).
    pub fn propagate_configuration_status(&mut self, config: &ConfigurationStatus) {
        self.latest_ready_revision_name.clone_from(&config.latest_ready_revision_name);
        self.latest_created_revision_name.clone_from(&config.latest_created_revision_name);
        if let Some(ready) = config.get_condition(CONDITION_READY) {
            self.manage().propagate(service::CONFIGURATIONS_READY, ready);
        }
    }

    /// Copies the Route's URL, address and traffic; `RoutesReady` follows its
    /// `Ready` (unchanged while it has none).
    pub fn propagate_route_status(&mut self, route: &RouteStatus) {
        self.url.clone_from(&route.url);
        self.address.clone_from(&route.address);
        self.traffic.clone_from(&route.traffic);
        if let Some(ready) = route.get_condition(CONDITION_READY) {
            self.manage().propagate(service::ROUTES_READY, ready);
        }
    }
}

/// Upstream's `PropagateIngressStatus` for Routes and DomainMappings:
/// `type_` follows the KIngress's `Ready`, or is Unknown
/// `IngressNotConfigured` while the KIngress has none.
pub(crate) fn propagate_or_not_configured<C: Clock>(manager: &mut ConditionManager<'_, C>, type_: &str, ingress: &IngressStatus) {
    match ingress.get_condition(CONDITION_READY) {
        Some(ready) => manager.propagate(type_, ready),
        None => manager.mark_unknown(type_, route::REASON_INGRESS_NOT_CONFIGURED, route::MESSAGE_INGRESS_NOT_CONFIGURED),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::conditions::{ConditionSeverity, ConditionStatus, ingress};
    use crate::domain_mapping::DomainMappingStatus;
    use crate::networking::LoadBalancerIngressStatus;

    /// A Revision status as the upstream reconciler writes it.
    fn upstream() -> serde_json::Value {
        json!({
            "observedGeneration": 1,
            "conditions": [
                {"type": "Active", "status": "False", "severity": "Info",
                 "lastTransitionTime": "2024-07-16T08:22:20Z",
                 "reason": "NoTraffic", "message": "The target is not receiving traffic."},
                {"type": "ContainerHealthy", "status": "True",
                 "lastTransitionTime": "2024-07-16T08:21:59Z"},
                {"type": "Ready", "status": "True", "lastTransitionTime": "2024-07-16T08:21:59Z"},
                {"type": "ResourcesAvailable", "status": "True",
                 "lastTransitionTime": "2024-07-16T08:21:59Z"}
            ],
            "logUrl": "http://logs.example/rev",
            "containerStatuses": [
                {"name": "user-container",
                 "imageDigest": "registry.local/hello@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}
            ],
            "actualReplicas": 0,
            "desiredReplicas": 0
        })
    }

    #[test]
    fn round_trips_upstream_status_without_loss() {
        let value = upstream();
        let status: RevisionStatus = serde_json::from_value(value.clone()).expect("parse");
        assert_eq!(status.observed_generation, 1);
        assert_eq!(status.actual_replicas, Some(0));
        assert_eq!(status.conditions.len(), 4);
        assert_eq!(serde_json::to_value(&status).expect("serialize"), value);
        assert!(status.is_ready(Some(1)));
        assert!(!status.is_ready(Some(2)));
    }

    #[test]
    fn empty_status_serializes_to_an_empty_object() {
        assert_eq!(serde_json::to_string(&RevisionStatus::default()).expect("serialize"), "{}");
    }

    #[test]
    fn no_service_name_on_the_wire() {
        let mut status: RevisionStatus = serde_json::from_value(json!({"serviceName": "old", "observedGeneration": 2})).expect("parse");
        status.initialize_conditions();
        let out = serde_json::to_value(&status).expect("serialize");
        assert!(out.get("serviceName").is_none());
        assert_eq!(out["observedGeneration"], 2);
    }

    #[test]
    fn lifecycle_like_upstream() {
        let mut status = RevisionStatus::default();
        status.initialize_conditions();
        status.mark_resources_available_unknown(revision::REASON_DEPLOYING, "");
        status.mark_container_healthy_unknown(revision::REASON_DEPLOYING, "");
        status.mark_active_unknown(revision::REASON_DEPLOYING, "");
        let ready = status.get_condition(CONDITION_READY).expect("ready");
        assert!(ready.is_unknown());
        assert_eq!(ready.reason, revision::REASON_DEPLOYING);
        assert_eq!(status.get_condition(revision::ACTIVE).map(|c| c.severity), Some(ConditionSeverity::Info));

        status.mark_resources_available_true();
        status.mark_container_healthy_true();
        status.mark_active_false(revision::REASON_NO_TRAFFIC, revision::MESSAGE_NO_TRAFFIC);
        status.set_observed_generation(1);
        assert!(status.is_ready(Some(1)), "scaled to zero is still Ready: {status:?}");

        status.mark_container_healthy_false(&revision::exit_code_reason(1), &revision::container_exiting_message("boom"));
        let ready = status.get_condition(CONDITION_READY).expect("ready");
        assert!(ready.is_false());
        assert_eq!(ready.reason, "ExitCode1");
        assert_eq!(ready.message, "Container failed with: boom");
        assert!(status.is_failed(Some(1)));

        status.mark_resources_available_false(revision::REASON_PROGRESS_DEADLINE_EXCEEDED, revision::MESSAGE_INITIAL_SCALE_NEVER_ACHIEVED);
        assert_eq!(status.get_condition(CONDITION_READY).map(|c| c.reason.as_str()), Some(revision::REASON_PROGRESS_DEADLINE_EXCEEDED));
    }

    fn ready_of<S: KnativeStatus>(status: &S) -> (ConditionStatus, &str) {
        let ready = status.get_condition(CONDITION_READY).expect("Ready set");
        (ready.status, ready.reason.as_str())
    }

    #[test]
    fn configuration_is_ready_once_its_latest_created_revision_is() {
        let mut status = ConfigurationStatus::default();
        status.initialize_conditions();
        status.set_latest_created_revision_name("hello-00001");
        assert_eq!(ready_of(&status), (ConditionStatus::Unknown, ""));
        status.set_latest_ready_revision_name("hello-00001");
        assert_eq!(ready_of(&status), (ConditionStatus::True, ""));
        status.set_latest_created_revision_name("hello-00002");
        assert_eq!(ready_of(&status), (ConditionStatus::Unknown, ""));
        assert_eq!(status.latest_ready_revision_name, "hello-00001");
        status.manage().mark_false(
            CONDITION_READY,
            configuration::REASON_REVISION_FAILED,
            &configuration::latest_created_failed_message("hello-00002", "boom"),
        );
        status.set_observed_generation(2);
        assert!(status.is_failed(Some(2)));
    }

    #[test]
    fn service_copies_its_configuration_and_route() {
        let mut config = ConfigurationStatus::default();
        config.set_latest_created_revision_name("hello-00001");
        config.set_latest_ready_revision_name("hello-00001");
        let mut route = RouteStatus {
            url: Some("http://hello.default.example.com".into()),
            address: Some(Addressable { url: Some("http://hello.default.svc.cluster.local".into()), ..Default::default() }),
            traffic: vec![TrafficTarget { revision_name: Some("hello-00001".into()), percent: Some(100), ..Default::default() }],
            ..Default::default()
        };
        let mut service = ServiceStatus::default();
        service.initialize_conditions();
        // A child without Ready leaves the Service's condition alone.
        service.propagate_route_status(&route);
        assert_eq!(service.url, route.url);
        assert!(service.get_condition(service::ROUTES_READY).is_some_and(|c| c.is_unknown() && c.reason.is_empty()));

        route.manage().mark_unknown(route::INGRESS_READY, route::REASON_INGRESS_NOT_CONFIGURED, route::MESSAGE_INGRESS_NOT_CONFIGURED);
        service.propagate_configuration_status(&config);
        service.propagate_route_status(&route);
        assert_eq!(service.latest_ready_revision_name, "hello-00001");
        assert_eq!(service.latest_created_revision_name, "hello-00001");
        assert_eq!(service.traffic, route.traffic);
        assert_eq!(service.address, route.address);
        assert_eq!(ready_of(&service), (ConditionStatus::Unknown, route::REASON_INGRESS_NOT_CONFIGURED));

        for dependent in [route::ALL_TRAFFIC_ASSIGNED, route::INGRESS_READY] {
            assert_ne!(ready_of(&route).0, ConditionStatus::True);
            route.manage().mark_true(dependent);
        }
        route.manage().mark_true_with_reason(
            route::CERTIFICATE_PROVISIONED,
            route::REASON_TLS_NOT_ENABLED,
            route::MESSAGE_EXTERNAL_DOMAIN_TLS_NOT_ENABLED,
        );
        service.propagate_route_status(&route);
        assert_eq!(ready_of(&service), (ConditionStatus::True, ""));
    }

    /// `propagate` makes `type_` of a fresh `S` follow a KIngress's `Ready`.
    fn check_follows_ingress<S: KnativeStatus + Default>(propagate: fn(&mut S, &IngressStatus), type_: &str) {
        let condition = |s: &S| {
            let c = s.get_condition(type_).expect("set");
            (c.status, c.reason.clone())
        };
        let mut status = S::default();
        let mut kingress = IngressStatus::default();
        propagate(&mut status, &kingress);
        assert_eq!(condition(&status), (ConditionStatus::Unknown, route::REASON_INGRESS_NOT_CONFIGURED.into()));

        kingress.initialize_conditions();
        kingress.manage().mark_unknown(
            ingress::LOAD_BALANCER_READY,
            ingress::REASON_UNINITIALIZED,
            ingress::MESSAGE_LOAD_BALANCER_NOT_READY,
        );
        propagate(&mut status, &kingress);
        assert_eq!(condition(&status), (ConditionStatus::Unknown, ingress::REASON_UNINITIALIZED.into()));

        kingress.manage().mark_true(ingress::NETWORK_CONFIGURED);
        let lb = LoadBalancerIngressStatus { domain_internal: "kourier.kourier-system.svc.cluster.local".into(), ..Default::default() };
        kingress.mark_load_balancer_ready(vec![lb.clone()], vec![lb]);
        assert_eq!(ready_of(&kingress), (ConditionStatus::True, ""));
        propagate(&mut status, &kingress);
        assert_eq!(condition(&status), (ConditionStatus::True, String::new()));
    }

    #[test]
    fn routes_and_domain_mappings_follow_their_kingress() {
        check_follows_ingress(RouteStatus::propagate_ingress_status, route::INGRESS_READY);
        check_follows_ingress(DomainMappingStatus::propagate_ingress_status, crate::conditions::domain_mapping::INGRESS_READY);
    }
}
