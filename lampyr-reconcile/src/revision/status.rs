//! Status as pure functions of what was observed: the Home's conditions from
//! its grant and its fiberd instances, and the Revision's conditions from the
//! artifact, the translation and the Home. `lastTransitionTime` comes from the
//! clock given and changes only when a condition changes (the condition
//! manager's rule, kept across a whole computation by `keep_transition_times`), so
//! recomputing an unchanged state writes nothing.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use lampyr_api::conditions::{CONDITION_READY, Condition, KnativeStatus, keep_transition_times, revision};
use lampyr_api::fiber::home;
use lampyr_api::policy::FiberPolicy;
use lampyr_api::{CapacityGrant, ContainerStatus, Home, HomeStatus, RevisionStatus};

/// `GrantReady` Unknown: the grant controller has not reported on the grant's current generation.
pub const REASON_GRANT_PENDING: &str = "GrantPending";
/// `GrantReady` Unknown: the grant does not exist (yet).
pub const REASON_GRANT_MISSING: &str = "GrantMissing";
/// `TemplateLoaded` Unknown: no fiberd instance has reported on the Home.
pub const REASON_NO_INSTANCES: &str = "NoInstances";
/// `TemplateLoaded` Unknown: instances have reported, none has loaded the current generation.
pub const REASON_LOADING: &str = "Loading";
/// `TemplateLoaded` False (and the Revision's `ResourcesAvailable` False): every
/// instance at the current generation failed to load the template.
pub const REASON_TEMPLATE_LOAD_FAILED: &str = "TemplateLoadFailed";
/// `ContainerHealthy` False: the artifact is intact but not a usable Lampyr artifact.
pub const REASON_INVALID_ARTIFACT: &str = "InvalidArtifact";
/// `ResourcesAvailable` False: the template uses fields a fiber cannot honour.
pub const REASON_UNSUPPORTED_FIELDS: &str = "UnsupportedFields";
/// `ResourcesAvailable` False: no grant has room for the Revision's Home (upstream's
/// reason for Pods the scheduler cannot place); it is placed as soon as room appears.
pub const REASON_UNSCHEDULABLE: &str = "Unschedulable";

/// The Home's status as `lampyr-controller` owns it: conditions, `warmFibers`,
/// `observedGeneration`. `instances` are copied from `home` for the
/// computation; the caller does not write them back (each fiberd owns its entry).
pub fn home_status(home: &Home, grant: Option<&CapacityGrant>, now: &Time) -> HomeStatus {
    let generation = home.metadata.generation.unwrap_or(0);
    let mut status = home.status.clone().unwrap_or_default();
    status.observed_generation = generation;
    status.warm_fibers = status.instances.iter().map(|i| i.warm_fibers.max(0)).sum();
    let warm = status.warm_fibers;
    let grant_name = &home.spec.grant_name;
    let template = template_loaded(&status, generation);
    let mut m = status.manage_with_clock(now);
    m.initialize_conditions();
    match grant_ready(grant) {
        GrantState::Missing => {
            m.mark_unknown(home::GRANT_READY, REASON_GRANT_MISSING, &format!("CapacityGrant {grant_name:?} does not exist yet"))
        }
        GrantState::Pending => m.mark_unknown(
            home::GRANT_READY,
            REASON_GRANT_PENDING,
            &format!("waiting for the grant controller to report on CapacityGrant {grant_name:?}"),
        ),
        GrantState::Ready(c) => {
            let message = if c.message.is_empty() { String::new() } else { format!("CapacityGrant {grant_name:?}: {}", c.message) };
            let reason = if c.reason.is_empty() && !c.is_true() { REASON_GRANT_PENDING.to_string() } else { c.reason.clone() };
            match c.status {
                lampyr_api::ConditionStatus::True => m.mark_true(home::GRANT_READY),
                lampyr_api::ConditionStatus::False => m.mark_false(home::GRANT_READY, &reason, &message),
                lampyr_api::ConditionStatus::Unknown => m.mark_unknown(home::GRANT_READY, &reason, &message),
            }
        }
    }
    match template {
        Template::Loaded => m.mark_true(home::TEMPLATE_LOADED),
        Template::Failed(message) => m.mark_false(home::TEMPLATE_LOADED, REASON_TEMPLATE_LOAD_FAILED, &message),
        Template::NoInstances => {
            m.mark_unknown(home::TEMPLATE_LOADED, REASON_NO_INSTANCES, "no fiberd instance has reported on this Home yet")
        }
        Template::Loading(n) => m.mark_unknown(
            home::TEMPLATE_LOADED,
            REASON_LOADING,
            &format!("{n} fiberd instance(s) are loading generation {generation} of the template"),
        ),
    }
    if warm > 0 {
        m.mark_true(home::ACTIVE);
    } else {
        m.mark_false(home::ACTIVE, revision::REASON_NO_TRAFFIC, revision::MESSAGE_NO_TRAFFIC);
    }
    if let Some(stored) = home.status.as_ref() {
        keep_transition_times(&stored.conditions, &mut status.conditions);
    }
    status
}

enum GrantState<'a> {
    Missing,
    Pending,
    Ready(&'a Condition),
}

fn grant_ready(grant: Option<&CapacityGrant>) -> GrantState<'_> {
    let Some(grant) = grant else { return GrantState::Missing };
    let Some(status) = grant.status.as_ref() else { return GrantState::Pending };
    if status.observed_generation < grant.metadata.generation.unwrap_or(0) {
        return GrantState::Pending;
    }
    match status.get_condition(CONDITION_READY) {
        Some(ready) => GrantState::Ready(ready),
        None => GrantState::Pending,
    }
}

enum Template {
    Loaded,
    Failed(String),
    NoInstances,
    Loading(usize),
}

fn template_loaded(status: &HomeStatus, generation: i64) -> Template {
    if status.instances.is_empty() {
        return Template::NoInstances;
    }
    let current: Vec<_> = status.instances.iter().filter(|i| i.observed_generation == generation).collect();
    if current.iter().any(|i| i.loaded) {
        return Template::Loaded;
    }
    let failed: Vec<String> =
        current.iter().filter_map(|i| i.message.as_ref().filter(|m| !m.is_empty()).map(|m| format!("{}: {m}", i.name))).collect();
    if !current.is_empty() && failed.len() == status.instances.len() {
        return Template::Failed(failed.join("; "));
    }
    Template::Loading(status.instances.len())
}

/// How long after a Home's creation lampyr-controller holds back its first status while
/// the grant is ready and fiberd has not reported yet ([`first_status_held`]).
pub const FIRST_REPORT_GRACE: Duration = Duration::from_secs(5);

/// How much longer a new Home's first status is held back, if it is: nothing has been
/// written yet, its grant is ready and no fiberd instance has reported, within
/// [`FIRST_REPORT_GRACE`] of its creation. That status (`TemplateLoaded` Unknown,
/// `NoInstances`) is what fiberd's report replaces a moment later; a Home still
/// unreported after the grace gets it, with the reason.
pub fn first_status_held(home: &Home, computed: &HomeStatus, now: &Time) -> Option<Duration> {
    let written = home.status.as_ref().is_some_and(|s| !s.conditions.is_empty());
    let grant_ready = computed.get_condition(home::GRANT_READY).is_some_and(Condition::is_true);
    if written || !grant_ready || !computed.instances.is_empty() {
        return None;
    }
    FIRST_REPORT_GRACE.checked_sub(age(&home.metadata, now)?).filter(|left| !left.is_zero())
}

/// Time since the object's creation, by `now` (zero when its clock is ahead).
pub fn age(meta: &ObjectMeta, now: &Time) -> Option<Duration> {
    let created = meta.creation_timestamp.as_ref()?.0;
    Some(Duration::try_from(now.0.duration_since(created)).unwrap_or(Duration::ZERO))
}

/// Whether the Home's owned status differs from what is stored (instances are not ours).
pub fn home_status_changed(stored: Option<&HomeStatus>, computed: &HomeStatus) -> bool {
    match stored {
        None => true,
        Some(s) => {
            s.conditions != computed.conditions
                || s.warm_fibers != computed.warm_fibers
                || s.observed_generation != computed.observed_generation
        }
    }
}

/// The Revision status at the start of a reconcile: the stored one with unset
/// conditions initialised and `observedGeneration` set (upstream sets it after
/// every reconcile, even a failed one).
pub fn begin(stored: Option<&RevisionStatus>, generation: i64, now: &Time) -> RevisionStatus {
    let mut status = stored.cloned().unwrap_or_default();
    status.manage_with_clock(now).initialize_conditions();
    status.observed_generation = generation;
    status
}

/// The artifact could not be resolved: `ContainerHealthy` False with `reason`,
/// and `ResourcesAvailable` Unknown `ResolvingDigests` unless already decided.
pub fn artifact_failed(status: &mut RevisionStatus, reason: &str, message: &str, now: &Time) {
    let mut m = status.manage_with_clock(now);
    m.mark_false(revision::CONTAINER_HEALTHY, reason, message);
    if !m.get_condition(revision::RESOURCES_AVAILABLE).is_some_and(|c| c.is_true() || c.is_false()) {
        m.mark_unknown(revision::RESOURCES_AVAILABLE, revision::REASON_RESOLVING_DIGESTS, "");
    }
}

/// The artifact is verified: `containerStatuses` names it by digest.
pub fn artifact_resolved(status: &mut RevisionStatus, container: &str, image_digest: &str) {
    status.container_statuses = vec![ContainerStatus { name: container.to_string(), image_digest: image_digest.to_string() }];
}

/// Records (or, with `None`, clears) which image map entry named the Revision's artifact.
pub fn image_mapped(status: &mut RevisionStatus, mapping: Option<String>) {
    match mapping {
        Some(text) => status.annotations.insert(lampyr_api::keys::IMAGE_MAPPED.to_string(), text),
        None => status.annotations.remove(lampyr_api::keys::IMAGE_MAPPED),
    };
}

/// `ResourcesAvailable` False with `reason` (translation refused, or a child not owned).
pub fn resources_failed(status: &mut RevisionStatus, reason: &str, message: &str, now: &Time) {
    status.manage_with_clock(now).mark_false(revision::RESOURCES_AVAILABLE, reason, message);
}

/// Whether the Revision has been initialised: its template was loaded at least
/// once (upstream's "scale target initialized": from then on scaling to zero
/// or instance churn does not make it un-Ready, only failures do).
pub fn initialized(status: &RevisionStatus) -> bool {
    let is_true = |t| status.get_condition(t).is_some_and(Condition::is_true);
    is_true(revision::RESOURCES_AVAILABLE) && is_true(revision::CONTAINER_HEALTHY)
}

/// The Revision was never initialised within its progress deadline:
/// `ResourcesAvailable` False `ProgressDeadlineExceeded` (upstream's reason and
/// message) with what it was still waiting for, unless something already
/// failed it. A later load still makes it Ready ([`propagate_home`]).
pub fn progress_deadline_exceeded(status: &mut RevisionStatus, deadline: std::time::Duration, now: &Time) {
    if initialized(status) {
        return;
    }
    let resources = status.get_condition(revision::RESOURCES_AVAILABLE).cloned().unwrap_or_default();
    if resources.is_false() {
        return;
    }
    let waiting = if resources.message.is_empty() { String::new() } else { format!(" (waiting for: {})", resources.message) };
    let message = format!(
        "{}: no fiberd loaded the template within the progress deadline of {}s{waiting}",
        revision::MESSAGE_INITIAL_SCALE_NEVER_ACHIEVED,
        deadline.as_secs()
    );
    status.manage_with_clock(now).mark_false(revision::RESOURCES_AVAILABLE, revision::REASON_PROGRESS_DEADLINE_EXCEEDED, &message);
}

/// Propagates the Home's status into the Revision's: `ResourcesAvailable` and
/// `ContainerHealthy` True once the Home is Ready (grant Ready ∧ template
/// loaded by ≥1 fiberd instance); False when the grant or every instance
/// failed; otherwise Unknown `Deploying` until initialised. `Active` follows
/// warm fibers; `actualReplicas` = warm fibers.
pub fn propagate_home(status: &mut RevisionStatus, home: &HomeStatus, policy: &FiberPolicy, now: &Time) {
    let was_initialized = initialized(status);
    let grant = home.get_condition(home::GRANT_READY).cloned().unwrap_or_default();
    let template = home.get_condition(home::TEMPLATE_LOADED).cloned().unwrap_or_default();
    let warm = home.warm_fibers.max(0);
    let mut m = status.manage_with_clock(now);
    if grant.is_false() {
        m.mark_false(revision::RESOURCES_AVAILABLE, &grant.reason, &grant.message);
    } else if template.is_false() {
        m.mark_false(revision::RESOURCES_AVAILABLE, REASON_TEMPLATE_LOAD_FAILED, &template.message);
    } else if grant.is_true() && template.is_true() {
        m.mark_true(revision::RESOURCES_AVAILABLE);
        m.mark_true(revision::CONTAINER_HEALTHY);
    } else if !was_initialized {
        let waiting = if grant.is_true() { &template } else { &grant };
        m.mark_unknown(revision::RESOURCES_AVAILABLE, revision::REASON_DEPLOYING, &waiting.message);
        m.mark_unknown(revision::CONTAINER_HEALTHY, revision::REASON_DEPLOYING, "");
    }
    let loaded_once = was_initialized || (grant.is_true() && template.is_true());
    if !loaded_once {
        m.mark_unknown(revision::ACTIVE, revision::REASON_DEPLOYING, "");
    } else if warm > 0 {
        m.mark_true(revision::ACTIVE);
    } else {
        m.mark_false(revision::ACTIVE, revision::REASON_NO_TRAFFIC, revision::MESSAGE_NO_TRAFFIC);
    }
    let s = &policy.scaling;
    let floor = if loaded_once { s.min_scale } else { s.min_scale.max(s.initial_scale) };
    let mut desired = i64::from(floor).max(i64::from(warm));
    if s.max_scale > 0 {
        desired = desired.min(i64::from(s.max_scale));
    }
    status.actual_replicas = Some(warm);
    status.desired_replicas = Some(i32::try_from(desired).unwrap_or(i32::MAX));
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use k8s_openapi::jiff::Timestamp;
    use lampyr_api::{HomeInstance, RevisionTemplateSpec};
    use serde_json::json;

    fn at(secs: i64) -> Time {
        Time(Timestamp::from_second(1_700_000_000 + secs).unwrap())
    }

    fn home_with(instances: Vec<HomeInstance>) -> Home {
        let mut home: Home = serde_json::from_value(json!({
            "apiVersion": "fiber.lampyr.dev/v1alpha1", "kind": "Home",
            "metadata": {"name": "r", "namespace": "ns", "generation": 2},
            "spec": {"revisionName": "r", "artifact": "a", "grantName": "r"}
        }))
        .unwrap();
        home.status = Some(HomeStatus { instances, ..HomeStatus::default() });
        home
    }

    fn grant(ready: Option<&str>) -> CapacityGrant {
        let conditions = ready.map_or(json!([]), |s| json!([{"type": "Ready", "status": s, "reason": if s == "True" {""} else {"ImageNotAllowed"}, "message": if s == "True" {""} else {"no GrantPolicy allows it"}}]));
        serde_json::from_value(json!({
            "apiVersion": "fiber.lampyr.dev/v1alpha1", "kind": "CapacityGrant",
            "metadata": {"name": "r", "namespace": "ns", "generation": 1},
            "spec": {"fiberSlots": 1, "memoryBytes": 1, "grantImage": "g", "helperImage": "h"},
            "status": {"observedGeneration": 1, "conditions": conditions}
        }))
        .unwrap()
    }

    fn instance(name: &str, generation: i64, loaded: bool, warm: i32, message: Option<&str>) -> HomeInstance {
        HomeInstance {
            name: name.into(),
            address: "127.0.0.1:1".into(),
            warm_fibers: warm,
            observed_generation: generation,
            loaded,
            message: message.map(Into::into),
            ..HomeInstance::default()
        }
    }

    fn cond<'a>(s: &'a HomeStatus, t: &str) -> &'a Condition {
        s.get_condition(t).unwrap()
    }

    #[test]
    fn home_is_ready_when_the_grant_is_and_an_instance_loaded_the_current_generation() {
        let g = grant(Some("True"));
        let s = home_status(&home_with(vec![]), Some(&g), &at(0));
        assert_eq!(cond(&s, home::TEMPLATE_LOADED).reason, REASON_NO_INSTANCES);
        assert!(cond(&s, CONDITION_READY).is_unknown());

        let s = home_status(&home_with(vec![instance("a", 1, true, 1, None)]), Some(&g), &at(0));
        assert_eq!(cond(&s, home::TEMPLATE_LOADED).reason, REASON_LOADING, "loaded an older generation only");

        let h = home_with(vec![instance("a", 2, false, 0, None), instance("b", 2, true, 3, None)]);
        let s = home_status(&h, Some(&g), &at(0));
        assert!(cond(&s, CONDITION_READY).is_true());
        assert_eq!(s.warm_fibers, 3);
        assert_eq!(s.observed_generation, 2);
        assert!(cond(&s, home::ACTIVE).is_true());
        assert!(s.is_ready(Some(2)));

        let s = home_status(&h, None, &at(0));
        assert_eq!(cond(&s, home::GRANT_READY).reason, REASON_GRANT_MISSING);
        let s = home_status(&h, Some(&grant(None)), &at(0));
        assert_eq!(cond(&s, home::GRANT_READY).reason, REASON_GRANT_PENDING);
        let s = home_status(&h, Some(&grant(Some("False"))), &at(0));
        let gr = cond(&s, home::GRANT_READY);
        assert!(gr.is_false() && gr.reason == "ImageNotAllowed" && gr.message.contains("no GrantPolicy"), "{gr:?}");
    }

    #[test]
    fn template_fails_only_when_every_instance_reports_a_failure() {
        let g = grant(Some("True"));
        let h = home_with(vec![instance("a", 2, false, 0, Some("digest mismatch")), instance("b", 2, false, 0, None)]);
        assert!(cond(&home_status(&h, Some(&g), &at(0)), home::TEMPLATE_LOADED).is_unknown());
        let h = home_with(vec![instance("a", 2, false, 0, Some("digest mismatch")), instance("b", 2, false, 0, Some("unseal failed"))]);
        let s = home_status(&h, Some(&g), &at(0));
        let t = cond(&s, home::TEMPLATE_LOADED);
        assert!(t.is_false());
        assert_eq!(t.message, "a: digest mismatch; b: unseal failed");
    }

    #[test]
    fn transition_times_change_only_with_the_state() {
        let g = grant(Some("True"));
        let mut h = home_with(vec![instance("a", 2, true, 0, None)]);
        let first = home_status(&h, Some(&g), &at(0));
        h.status.as_mut().unwrap().conditions = first.conditions.clone();
        h.status.as_mut().unwrap().warm_fibers = first.warm_fibers;
        h.status.as_mut().unwrap().observed_generation = first.observed_generation;
        let again = home_status(&h, Some(&g), &at(60));
        assert_eq!(again.conditions, first.conditions);
        assert!(!home_status_changed(h.status.as_ref(), &again));
        h.status.as_mut().unwrap().instances[0].warm_fibers = 2;
        let warm = home_status(&h, Some(&g), &at(60));
        assert!(home_status_changed(h.status.as_ref(), &warm));
        assert_eq!(cond(&warm, home::ACTIVE).last_transition_time, Some(at(60)));
        assert_eq!(cond(&warm, home::GRANT_READY).last_transition_time, Some(at(0)));
    }

    #[test]
    fn a_new_homes_first_status_waits_for_fibers_report_within_the_grace() {
        let g = grant(Some("True"));
        let mut h = home_with(vec![]);
        h.metadata.creation_timestamp = Some(at(0));
        let computed = home_status(&h, Some(&g), &at(1));
        assert_eq!(first_status_held(&h, &computed, &at(1)), Some(FIRST_REPORT_GRACE - Duration::from_secs(1)));
        assert_eq!(first_status_held(&h, &computed, &at(5)), None, "still unreported after the grace");

        let missing = home_status(&h, None, &at(1));
        assert_eq!(first_status_held(&h, &missing, &at(1)), None, "a missing grant is said at once");
        let pending = home_status(&h, Some(&grant(None)), &at(1));
        assert_eq!(first_status_held(&h, &pending, &at(1)), None, "so is a grant not reported on");

        let mut reported = home_with(vec![instance("a", 2, false, 0, None)]);
        reported.metadata.creation_timestamp = Some(at(0));
        let computed = home_status(&reported, Some(&g), &at(1));
        assert_eq!(first_status_held(&reported, &computed, &at(1)), None, "fiberd's report is written over at once");

        h.status.as_mut().unwrap().conditions = home_status(&h, Some(&g), &at(0)).conditions;
        let computed = home_status(&h, Some(&g), &at(1));
        assert_eq!(first_status_held(&h, &computed, &at(1)), None, "only the first status is held");
    }

    fn policy() -> FiberPolicy {
        let t: RevisionTemplateSpec = serde_json::from_value(json!({"spec": {"containers": [{"image": "x"}]}})).unwrap();
        lampyr_api::translate::translate(&t).unwrap()
    }

    fn rev_cond<'a>(s: &'a RevisionStatus, t: &str) -> &'a Condition {
        s.get_condition(t).unwrap()
    }

    #[test]
    fn revision_follows_its_home() {
        let g = grant(Some("True"));
        let mut status = begin(None, 1, &at(0));
        assert!(rev_cond(&status, CONDITION_READY).is_unknown());
        let deploying = home_status(&home_with(vec![]), Some(&g), &at(0));
        propagate_home(&mut status, &deploying, &policy(), &at(0));
        assert_eq!(rev_cond(&status, revision::RESOURCES_AVAILABLE).reason, revision::REASON_DEPLOYING);
        assert_eq!(rev_cond(&status, revision::ACTIVE).reason, revision::REASON_DEPLOYING);
        assert_eq!(status.desired_replicas, Some(1), "initial scale before the first load");

        let loaded = home_status(&home_with(vec![instance("a", 2, true, 0, None)]), Some(&g), &at(1));
        propagate_home(&mut status, &loaded, &policy(), &at(1));
        assert!(status.is_ready(Some(1)));
        let active = rev_cond(&status, revision::ACTIVE);
        assert_eq!((active.is_false(), active.reason.as_str()), (true, revision::REASON_NO_TRAFFIC));
        assert_eq!((status.actual_replicas, status.desired_replicas), (Some(0), Some(0)));

        // Instances going away (scale to zero, restarts) keep an initialised Revision Ready.
        let gone = home_status(&home_with(vec![]), Some(&g), &at(2));
        propagate_home(&mut status, &gone, &policy(), &at(2));
        assert!(status.is_ready(Some(1)));

        // A grant failure does not.
        let refused = home_status(&home_with(vec![]), Some(&grant(Some("False"))), &at(3));
        propagate_home(&mut status, &refused, &policy(), &at(3));
        let ready = rev_cond(&status, CONDITION_READY);
        assert!(ready.is_false() && ready.reason == "ImageNotAllowed", "{ready:?}");
    }

    #[test]
    fn a_revision_still_deploying_a_minute_later_has_nothing_new_to_write() {
        let g = grant(Some("True"));
        let deploying = home_status(&home_with(vec![]), Some(&g), &at(0));
        let mut first = begin(None, 1, &at(0));
        propagate_home(&mut first, &deploying, &policy(), &at(0));
        // The same observation later: Ready passes through ResourcesAvailable's message
        // and back to ContainerHealthy's on the way, which alone is no transition.
        let mut again = begin(Some(&first), 1, &at(60));
        propagate_home(&mut again, &deploying, &policy(), &at(60));
        keep_transition_times(&first.conditions, &mut again.conditions);
        assert_eq!(again, first);
    }

    #[test]
    fn artifact_failures_fail_container_healthy() {
        let mut status = begin(None, 1, &at(0));
        artifact_failed(&mut status, revision::REASON_CONTAINER_MISSING, "Unable to fetch image \"x\": gone", &at(0));
        let ready = rev_cond(&status, CONDITION_READY);
        assert!(ready.is_false());
        assert_eq!(ready.reason, revision::REASON_CONTAINER_MISSING);
        assert_eq!(rev_cond(&status, revision::RESOURCES_AVAILABLE).reason, revision::REASON_RESOLVING_DIGESTS);
        assert_eq!(status.observed_generation, 1);
    }

    #[test]
    fn a_revision_never_initialised_exceeds_its_progress_deadline_and_recovers_on_load() {
        let mut status = begin(None, 1, &at(0));
        let waiting = home_status(&home_with(vec![]), Some(&grant(Some("True"))), &at(0));
        propagate_home(&mut status, &waiting, &policy(), &at(0));
        progress_deadline_exceeded(&mut status, std::time::Duration::from_secs(600), &at(600));
        let resources = rev_cond(&status, revision::RESOURCES_AVAILABLE);
        assert_eq!((resources.is_false(), resources.reason.as_str()), (true, revision::REASON_PROGRESS_DEADLINE_EXCEEDED));
        assert!(resources.message.starts_with(revision::MESSAGE_INITIAL_SCALE_NEVER_ACHIEVED), "{}", resources.message);
        assert!(resources.message.contains("600s"), "{}", resources.message);
        assert!(status.get_condition(CONDITION_READY).is_some_and(Condition::is_false), "Ready follows");

        // An earlier failure keeps its own reason.
        let mut failed = begin(None, 1, &at(0));
        resources_failed(&mut failed, REASON_UNSUPPORTED_FIELDS, "volumes", &at(0));
        progress_deadline_exceeded(&mut failed, std::time::Duration::from_secs(1), &at(5));
        assert_eq!(rev_cond(&failed, revision::RESOURCES_AVAILABLE).reason, REASON_UNSUPPORTED_FIELDS);

        // A fiberd that loads the template later makes it Ready after all.
        let loaded = home_status(&home_with(vec![instance("a", 2, true, 1, None)]), Some(&grant(Some("True"))), &at(700));
        propagate_home(&mut status, &loaded, &policy(), &at(700));
        assert!(initialized(&status));
        assert!(status.get_condition(CONDITION_READY).is_some_and(Condition::is_true));
    }
}
