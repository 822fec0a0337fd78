//! The pure middle of a Revision reconcile: from what was observed (the Revision,
//! how its artifact resolved, the cluster's autoscaler settings, its Home and
//! Service as they are) to what to write. No I/O: `reconcile_revision` observes,
//! calls [`plan`], and applies.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use lampyr_api::autoscaler::AutoscalerConfig;
use lampyr_api::conditions::revision;
use lampyr_api::policy::FiberPolicy;
use lampyr_api::translate::{Rules, translate_with};
use lampyr_api::{Home, Revision, RevisionStatus, RevisionTemplateSpec, keys};

use super::artifact::{self, ArtifactProblem, ResolvedArtifact};
use super::children::{self, Ownership};
use super::placement::{self, Demand};
use super::status;

/// The container name Knative gives a single unnamed container.
const DEFAULT_CONTAINER_NAME: &str = "user-container";

/// What one reconcile observed.
pub struct Observed<'a> {
    /// The Revision.
    pub revision: &'a Revision,
    /// When the reconcile started.
    pub now: Time,
    /// The artifact reference tried: the annotation's, else the image map's entry.
    pub reference: Option<&'a str>,
    /// The image map's audit line when the map chose the artifact.
    pub mapped: Option<String>,
    /// How the artifact resolved (`Missing` when there was no reference).
    pub resolved: Result<Arc<ResolvedArtifact>, ArtifactProblem>,
    /// The cluster's autoscaler settings.
    pub autoscaler: &'a AutoscalerConfig,
    /// The Revision's Home, as last observed.
    pub home: Option<&'a Home>,
    /// The Revision's Service, as last observed.
    pub service: Option<&'a Service>,
    /// The Service every Revision's ExternalName Service points at.
    pub router_service: &'a str,
}

/// What a reconcile writes, decided from an [`Observed`].
#[derive(Debug)]
pub struct Plan {
    /// The Revision's status before its Home's is propagated.
    pub status: RevisionStatus,
    /// A resolution problem that may pass: the reconcile fails with it, and is retried.
    pub retry: Option<ArtifactProblem>,
    /// The fiber policy, when the template translates.
    pub policy: Option<FiberPolicy>,
    /// Whether the Revision can be deployed as it is.
    pub deployable: bool,
    /// The artifact, verified by an earlier reconcile, could not be verified again for a
    /// reason that may pass: the Revision keeps its state meanwhile.
    pub kept: bool,
    /// What to do with the children.
    pub children: Children,
}

/// What to do with the Revision's Home and Service.
#[derive(Debug)]
pub enum Children {
    /// A child of the Revision's name is someone else's: touch neither.
    NotOurs,
    /// Nothing deployable (the status says why): leave them as they are.
    Keep,
    /// Make them match.
    Deploy(Box<Desired>),
}

/// The children a deployable Revision should have.
#[derive(Debug)]
pub struct Desired {
    /// The Home.
    pub home: Home,
    /// The grant it is placed on.
    pub grant: String,
    /// What it asks of that grant.
    pub demand: Demand,
    /// Whether the Home observed is on that grant already.
    pub placed: bool,
    /// Whether the Home observed already matches (nothing to apply).
    pub home_current: bool,
    /// The ExternalName Service.
    pub service: Service,
    /// Whether the Service observed already matches.
    pub service_current: bool,
}

impl Plan {
    /// Whether the Home's state is carried into the Revision's status.
    pub fn propagates_home(&self) -> bool {
        self.policy.is_some() && (self.deployable || self.retry.is_some())
    }
}

/// Decides what to write for `observed`.
pub fn plan(observed: &Observed<'_>) -> Plan {
    let rev = observed.revision;
    let now = &observed.now;
    let name = rev.name_any();
    let mut status = status::begin(rev.status.as_ref(), rev.metadata.generation.unwrap_or(0), now);
    status::image_mapped(&mut status, observed.mapped.clone());
    let (artifact, retry, kept) = artifact_outcome(observed, &mut status);
    let mut deployable = artifact.is_some();

    // The sealed template, when given, must be a pinned reference too (fiberd pulls it).
    let annotations = rev.metadata.annotations.clone().unwrap_or_default();
    let sealed = match annotations.get(keys::SEALED_TEMPLATE) {
        None => None,
        Some(value) => match artifact::parse_pinned(value) {
            Ok(p) => Some(p.canonical),
            Err(problem) => {
                deployable = false;
                let message = revision::container_missing_message(value, &format!("{}: {problem}", keys::SEALED_TEMPLATE));
                status::artifact_failed(&mut status, revision::REASON_CONTAINER_MISSING, &message, now);
                None
            }
        },
    };

    let policy = policy(rev, observed.autoscaler, &mut status, now);
    deployable &= policy.is_some();

    let uid = rev.metadata.uid.clone().unwrap_or_default();
    let not_owned = [("Home", children::ownership(observed.home, &uid)), ("Service", children::ownership(observed.service, &uid))]
        .into_iter()
        .find(|(_, o)| *o == Ownership::NotOurs);
    let children = match (not_owned, deployable, &artifact, &policy) {
        (Some((kind, _)), ..) => {
            status::resources_failed(&mut status, revision::REASON_NOT_OWNED, &revision::resource_not_owned_message(kind, &name), now);
            Children::NotOurs
        }
        (None, true, Some(artifact), Some(policy)) => Children::Deploy(Box::new(desired(observed, artifact, sealed.as_deref(), policy))),
        _ => Children::Keep,
    };
    Plan { status, retry, policy, deployable, kept, children }
}

/// The artifact's resolution in `status`: the resolved artifact, a problem to retry, and
/// whether the Revision keeps its state through that problem.
fn artifact_outcome(
    observed: &Observed<'_>,
    status: &mut RevisionStatus,
) -> (Option<Arc<ResolvedArtifact>>, Option<ArtifactProblem>, bool) {
    let rev = observed.revision;
    let container = rev.spec.containers.first();
    match &observed.resolved {
        Ok(artifact) => {
            let container_name = container.and_then(|c| c.name.clone()).unwrap_or_else(|| DEFAULT_CONTAINER_NAME.into());
            status::artifact_resolved(status, &container_name, &artifact.reference);
            (Some(Arc::clone(artifact)), None, false)
        }
        Err(problem) => {
            let recorded = observed
                .reference
                .and_then(|v| artifact::parse_pinned(v).ok())
                .is_some_and(|p| status.container_statuses.iter().any(|c| c.image_digest == p.canonical));
            // Verified by an earlier reconcile (maybe of another controller process):
            // keep the Revision as it is; the pull is retried in the background.
            let keep = problem.is_retryable() && recorded && status::initialized(status);
            if !keep {
                let image = container.and_then(|c| c.image.clone()).unwrap_or_default();
                let (reason, message) = match problem {
                    ArtifactProblem::Invalid(m) => (status::REASON_INVALID_ARTIFACT, m.clone()),
                    other => (
                        revision::REASON_CONTAINER_MISSING,
                        revision::container_missing_message(observed.reference.unwrap_or(&image), &other.to_string()),
                    ),
                };
                status::artifact_failed(status, reason, &message, &observed.now);
                status.container_statuses.clear();
            }
            (None, problem.is_retryable().then(|| problem.clone()), keep)
        }
    }
}

/// The fiber policy, by the shared translation, with the cluster's autoscaler settings as
/// defaults and, for fiberd, its cluster-wide part; a template that does not translate
/// fails the Revision's resources.
fn policy(rev: &Revision, autoscaler: &AutoscalerConfig, status: &mut RevisionStatus, now: &Time) -> Option<FiberPolicy> {
    let template = RevisionTemplateSpec { metadata: rev.metadata.clone(), spec: rev.spec.clone() };
    match translate_with(&template, autoscaler, Rules::Admitted) {
        Ok(policy) => {
            let label = |key: &str| rev.labels().get(key).cloned().unwrap_or_default();
            let mut policy = policy.with_runtime_contract(&rev.name_any(), &label(keys::CONFIGURATION_LABEL), &label(keys::SERVICE_LABEL));
            policy.scaling.cluster = Some(autoscaler.cluster_scaling());
            Some(policy)
        }
        Err(unsupported) => {
            status::resources_failed(status, status::REASON_UNSUPPORTED_FIELDS, &unsupported.to_string(), now);
            None
        }
    }
}

/// The Home and Service a deployable Revision should have, and how the observed ones compare.
fn desired(observed: &Observed<'_>, artifact: &ResolvedArtifact, sealed: Option<&str>, policy: &FiberPolicy) -> Desired {
    let rev = observed.revision;
    let demand = children::demand(policy, artifact.fiber_memory_bytes);
    let grant = placement::grant_name(rev);
    let home = children::home(rev, &artifact.reference, sealed, policy, &grant, demand);
    let placed = observed.home.is_some_and(|h| h.spec.grant_name == grant);
    let home_current = observed.home.is_some_and(|h| h.spec == home.spec && children::meta_matches(&h.metadata, &home.metadata));
    let service = children::service(rev, observed.router_service);
    let service_current = observed.service.is_some_and(|s| children::service_matches(s, &service));
    Desired { home, grant, demand, placed, home_current, service, service_current }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::jiff::Timestamp;
    use lampyr_api::conditions::{Condition, KnativeStatus};
    use lampyr_artifact::FiberMetadata;
    use serde_json::json;

    use super::*;

    const DIGEST: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";

    fn revision(container: serde_json::Value) -> Revision {
        serde_json::from_value(json!({
            "apiVersion": "serving.knative.dev/v1", "kind": "Revision",
            "metadata": { "name": "hello-00001", "namespace": "team", "uid": "rev-uid", "generation": 1,
                          "annotations": { keys::SNAPSHOT_ARTIFACT: format!("registry.example/hello@{DIGEST}") } },
            "spec": { "containers": [container] },
        }))
        .expect("a Revision")
    }

    fn artifact() -> Arc<ResolvedArtifact> {
        Arc::new(ResolvedArtifact {
            reference: format!("registry.example/hello@{DIGEST}"),
            digest: DIGEST.into(),
            fiber_memory_bytes: 64 << 20,
            metadata: FiberMetadata {
                abi_version: 1,
                handler: "handle".into(),
                max_request_body: 1 << 20,
                max_response_body: 1 << 20,
                heap_size: 8 << 20,
                scratch_size: 1 << 20,
                guest_elf_digest: DIGEST.into(),
            },
        })
    }

    fn observed<'a>(
        rev: &'a Revision,
        config: &'a AutoscalerConfig,
        resolved: Result<Arc<ResolvedArtifact>, ArtifactProblem>,
    ) -> Observed<'a> {
        Observed {
            revision: rev,
            now: Time(Timestamp::UNIX_EPOCH),
            reference: rev.annotations().get(keys::SNAPSHOT_ARTIFACT).map(String::as_str),
            mapped: None,
            resolved,
            autoscaler: config,
            home: None,
            service: None,
            router_service: "fiber-router.lampyr-system.svc.cluster.local",
        }
    }

    fn condition<'a>(status: &'a RevisionStatus, type_: &str) -> &'a Condition {
        status.get_condition(type_).unwrap_or_else(|| panic!("no {type_} in {status:?}"))
    }

    #[test]
    fn a_new_deployable_revision_gets_a_home_and_a_service_to_apply() {
        let config = AutoscalerConfig::default();
        let rev = revision(json!({ "image": "hello" }));
        let plan = plan(&observed(&rev, &config, Ok(artifact())));
        assert!(plan.deployable && plan.retry.is_none() && !plan.kept);
        assert_eq!(plan.status.container_statuses[0].image_digest, artifact().reference);
        assert_eq!(plan.status.container_statuses[0].name, DEFAULT_CONTAINER_NAME);
        let Children::Deploy(desired) = plan.children else { panic!("deploys: {:?}", plan.children) };
        assert_eq!(desired.home.spec.artifact, artifact().reference);
        assert_eq!(desired.grant, keys::SHARED_GRANT_NAME);
        assert!(!desired.placed && !desired.home_current && !desired.service_current, "nothing observed yet");
    }

    #[test]
    fn a_second_plan_over_the_applied_children_writes_nothing() {
        let config = AutoscalerConfig::default();
        let rev = revision(json!({ "image": "hello" }));
        let Children::Deploy(first) = plan(&observed(&rev, &config, Ok(artifact()))).children else { panic!("deploys") };
        let mut again = observed(&rev, &config, Ok(artifact()));
        again.home = Some(&first.home);
        again.service = Some(&first.service);
        let Children::Deploy(second) = plan(&again).children else { panic!("deploys") };
        assert!(second.placed && second.home_current && second.service_current, "idempotent: {second:?}");
    }

    #[test]
    fn a_child_someone_else_owns_is_left_alone_and_named() {
        let config = AutoscalerConfig::default();
        let rev = revision(json!({ "image": "hello" }));
        let Children::Deploy(ours) = plan(&observed(&rev, &config, Ok(artifact()))).children else { panic!("deploys") };
        let mut foreign = ours.home;
        foreign.metadata.owner_references = None;
        let mut seen = observed(&rev, &config, Ok(artifact()));
        seen.home = Some(&foreign);
        let plan = plan(&seen);
        assert!(matches!(plan.children, Children::NotOurs), "{:?}", plan.children);
        let resources = condition(&plan.status, revision::RESOURCES_AVAILABLE);
        assert_eq!((resources.status.as_str(), resources.reason.as_str()), ("False", revision::REASON_NOT_OWNED));
        assert!(resources.message.contains("Home"), "{}", resources.message);
    }

    #[test]
    fn an_invalid_artifact_fails_without_retry_and_a_passing_problem_is_retried() {
        let config = AutoscalerConfig::default();
        let rev = revision(json!({ "image": "hello" }));
        let invalid = plan(&observed(&rev, &config, Err(ArtifactProblem::Invalid("not a fiber".into()))));
        assert!(!invalid.deployable && invalid.retry.is_none() && matches!(invalid.children, Children::Keep));
        let container = condition(&invalid.status, revision::CONTAINER_HEALTHY);
        assert_eq!(container.reason, status::REASON_INVALID_ARTIFACT, "{container:?}");
        let unreachable = plan(&observed(&rev, &config, Err(ArtifactProblem::Unreachable("registry down".into()))));
        assert!(unreachable.retry.is_some() && !unreachable.kept, "never verified: fails now, retried: {unreachable:?}");
        assert!(unreachable.status.container_statuses.is_empty());
    }

    #[test]
    fn a_verified_revision_keeps_its_state_through_a_registry_outage() {
        let config = AutoscalerConfig::default();
        let mut rev = revision(json!({ "image": "hello" }));
        let Plan { status: ready, .. } = plan(&observed(&rev, &config, Ok(artifact())));
        let mut ready = ready;
        for type_ in [revision::RESOURCES_AVAILABLE, revision::CONTAINER_HEALTHY] {
            ready.manage().mark_true(type_);
        }
        rev.status = Some(ready);
        let plan = plan(&observed(&rev, &config, Err(ArtifactProblem::Unreachable("registry down".into()))));
        assert!(plan.kept && plan.retry.is_some(), "{plan:?}");
        assert_eq!(plan.status.container_statuses.len(), 1, "the verified digest stays recorded");
        assert!(matches!(plan.children, Children::Keep));
    }

    #[test]
    fn a_template_outside_the_subset_fails_its_resources() {
        let config = AutoscalerConfig::default();
        let rev = revision(json!({ "image": "hello", "workingDir": "/srv" }));
        let plan = plan(&observed(&rev, &config, Ok(artifact())));
        assert!(plan.policy.is_none() && !plan.deployable && matches!(plan.children, Children::Keep));
        let resources = condition(&plan.status, revision::RESOURCES_AVAILABLE);
        assert_eq!(resources.reason, status::REASON_UNSUPPORTED_FIELDS);
        assert!(resources.message.contains("workingDir"), "{}", resources.message);
    }
}
