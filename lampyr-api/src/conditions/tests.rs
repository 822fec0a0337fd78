use std::cell::Cell;

use super::*;

const A: &str = "Alpha";
const B: &str = "Bravo";
const INFO: &str = "Informational";
const SET: ConditionSet = ConditionSet::living(&[A, B]);

/// A clock that moves one second each time it is read.
struct Ticking(Cell<i64>);

impl Ticking {
    fn new() -> Self {
        Ticking(Cell::new(1_700_000_000))
    }
}

impl Clock for Ticking {
    fn now(&self) -> Time {
        let s = self.0.get();
        self.0.set(s + 1);
        Time(Timestamp::from_second(s).expect("valid"))
    }
}

fn at(s: i64) -> Time {
    Time(Timestamp::from_second(s).expect("valid"))
}

fn get<'a>(c: &'a [Condition], t: &str) -> &'a Condition {
    get_condition(c, t).unwrap_or_else(|| panic!("no {t} condition in {c:?}"))
}

fn types(c: &[Condition]) -> Vec<&str> {
    c.iter().map(|c| c.type_.as_str()).collect()
}

#[test]
fn condition_wire_format_omits_empty_fields() {
    let c = Condition { type_: "Ready".into(), status: ConditionStatus::True, last_transition_time: Some(at(0)), ..Default::default() };
    assert_eq!(
        serde_json::to_string(&c).expect("serialize"),
        r#"{"type":"Ready","status":"True","lastTransitionTime":"1970-01-01T00:00:00Z"}"#
    );
    let c = Condition {
        type_: "Active".into(),
        status: ConditionStatus::False,
        severity: ConditionSeverity::Info,
        last_transition_time: None,
        reason: "NoTraffic".into(),
        message: "The target is not receiving traffic.".into(),
    };
    assert_eq!(
        serde_json::to_string(&c).expect("serialize"),
        r#"{"type":"Active","status":"False","severity":"Info","reason":"NoTraffic","message":"The target is not receiving traffic."}"#
    );
}

#[test]
fn condition_reads_upstream_json() {
    let c: Condition = serde_json::from_str(
        r#"{"type":"Ready","status":"Unknown","severity":"","lastTransitionTime":"2024-07-16T08:22:20Z","reason":"Deploying"}"#,
    )
    .expect("parse");
    assert_eq!(c.severity, ConditionSeverity::Error);
    assert!(c.is_unknown());
    assert_eq!(c.reason, "Deploying");
    assert_eq!(c.last_transition_time.as_ref().map(|t| t.0.as_second()), Some(1_721_118_140));
    let c: Condition = serde_json::from_str(r#"{"type":"X","status":"True","severity":"Error","lastTransitionTime":null}"#).expect("parse");
    assert_eq!(c.severity, ConditionSeverity::Error);
    assert_eq!(c.last_transition_time, None);
    let c: Condition = serde_json::from_str(r#"{"type":"X","status":"False","severity":"Warning"}"#).expect("parse");
    assert_eq!(c.severity, ConditionSeverity::Warning);
}

#[test]
fn initialize_sets_happy_and_dependents_unknown() {
    let mut c = Vec::new();
    SET.manage_with_clock(&mut c, at(10)).initialize_conditions();
    assert_eq!(types(&c), [A, B, "Ready"]);
    for cond in &c {
        assert!(cond.is_unknown());
        assert_eq!(cond.severity, ConditionSeverity::Error);
        assert_eq!(cond.reason, "");
        assert_eq!(cond.last_transition_time, Some(at(10)));
    }
}

#[test]
fn initialize_keeps_set_conditions_and_follows_a_true_happy_condition() {
    let mut c =
        vec![Condition { type_: "Ready".into(), status: ConditionStatus::True, last_transition_time: Some(at(1)), ..Default::default() }];
    SET.manage_with_clock(&mut c, at(10)).initialize_conditions();
    assert!(get(&c, A).is_true());
    assert!(get(&c, B).is_true());
    assert_eq!(get(&c, "Ready").last_transition_time, Some(at(1)));

    // Initializing again changes nothing.
    let before = c.clone();
    SET.manage_with_clock(&mut c, at(20)).initialize_conditions();
    assert_eq!(c, before);
}

#[test]
fn ready_is_true_only_when_all_dependents_are_true() {
    let mut c = Vec::new();
    let mut m = SET.manage_with_clock(&mut c, Ticking::new());
    m.initialize_conditions();
    m.mark_true(A);
    assert!(m.top_level_condition().is_some_and(Condition::is_unknown));
    assert!(!m.is_happy());
    m.mark_true(B);
    assert!(m.is_happy());
    let ready = m.top_level_condition().expect("ready");
    assert_eq!((ready.reason.as_str(), ready.message.as_str()), ("", ""));
}

#[test]
fn a_dependent_never_set_keeps_ready_unknown() {
    let mut c = Vec::new();
    let mut m = SET.manage_with_clock(&mut c, Ticking::new());
    m.mark_true(A);
    let ready = m.top_level_condition().expect("ready");
    assert!(ready.is_unknown());
    assert_eq!(ready.reason, "");
    assert!(m.get_condition(B).is_none());
}

#[test]
fn mark_false_on_a_dependent_makes_ready_false_with_its_reason() {
    let mut c = Vec::new();
    let mut m = SET.manage_with_clock(&mut c, Ticking::new());
    m.initialize_conditions();
    m.mark_false(B, "Broken", "b is broken");
    let ready = m.top_level_condition().expect("ready");
    assert!(ready.is_false());
    assert_eq!((ready.reason.as_str(), ready.message.as_str()), ("Broken", "b is broken"));
}

#[test]
fn false_beats_unknown() {
    let mut c = Vec::new();
    let mut m = SET.manage_with_clock(&mut c, Ticking::new());
    m.initialize_conditions();
    m.mark_false(A, "AFailed", "");
    // B becomes Unknown later than A became False: Ready stays False from A.
    m.mark_unknown(B, "BPending", "");
    let ready = m.top_level_condition().expect("ready");
    assert!(ready.is_false());
    assert_eq!(ready.reason, "AFailed");
    // Marking B True recomputes from the dependents: A is still the unhappy one.
    m.mark_true(B);
    let ready = m.top_level_condition().expect("ready");
    assert!(ready.is_false());
    assert_eq!(ready.reason, "AFailed");
}

#[test]
fn among_false_dependents_the_latest_transition_wins() {
    let mut c = Vec::new();
    let mut m = SET.manage_with_clock(&mut c, Ticking::new());
    m.mark_false(A, "AFailed", "");
    m.mark_false(B, "BFailed", "");
    // Recomputation (mark_true on an informational condition) picks the
    // latest False, B, not the first in type order.
    m.mark_true(INFO);
    assert_eq!(m.top_level_condition().expect("ready").reason, "BFailed");

    // Same for Unknowns.
    let mut c = Vec::new();
    let mut m = SET.manage_with_clock(&mut c, Ticking::new());
    m.mark_unknown(A, "AWaiting", "");
    m.mark_unknown(B, "BWaiting", "");
    m.mark_true(INFO);
    assert_eq!(m.top_level_condition().expect("ready").reason, "BWaiting");
}

#[test]
fn equal_transition_times_fall_back_to_type_order() {
    let mut c = Vec::new();
    let mut m = SET.manage_with_clock(&mut c, at(5));
    m.mark_false(A, "AFailed", "");
    m.mark_false(B, "BFailed", "");
    assert_eq!(m.top_level_condition().expect("ready").reason, "BFailed");
    m.mark_true(INFO);
    assert_eq!(m.top_level_condition().expect("ready").reason, "AFailed");
}

#[test]
fn mark_unknown_on_a_dependent_makes_ready_unknown() {
    let mut c = Vec::new();
    let mut m = SET.manage_with_clock(&mut c, Ticking::new());
    m.mark_true(A);
    m.mark_true(B);
    assert!(m.is_happy());
    m.mark_unknown(A, "Deploying", "rolling");
    let ready = m.top_level_condition().expect("ready");
    assert!(ready.is_unknown());
    assert_eq!((ready.reason.as_str(), ready.message.as_str()), ("Deploying", "rolling"));
}

#[test]
fn mark_unknown_with_a_false_dependent_keeps_ready_false() {
    let mut c = Vec::new();
    let mut m = SET.manage_with_clock(&mut c, Ticking::new());
    m.mark_false(A, "AFailed", "");
    m.mark_unknown(B, "BPending", "");
    let ready = m.top_level_condition().expect("ready");
    assert!(ready.is_false());
    assert_eq!(ready.reason, "AFailed");
}

#[test]
fn recovering_dependent_recomputes_ready() {
    let mut c = Vec::new();
    let mut m = SET.manage_with_clock(&mut c, Ticking::new());
    m.mark_true(B);
    m.mark_false(A, "AFailed", "");
    assert!(!m.is_happy());
    m.mark_true(A);
    assert!(m.is_happy());
    assert_eq!(m.top_level_condition().expect("ready").reason, "");
}

#[test]
fn informational_conditions_get_severity_info_and_never_decide_ready() {
    let mut c = Vec::new();
    let mut m = SET.manage_with_clock(&mut c, Ticking::new());
    m.mark_true(A);
    m.mark_true(B);
    m.mark_false(INFO, "NoTraffic", "idle");
    assert!(m.is_happy());
    m.mark_unknown(INFO, "Queued", "");
    assert!(m.is_happy());
    let info = m.get_condition(INFO).expect("info");
    assert_eq!(info.severity, ConditionSeverity::Info);
    assert!(m.get_condition(A).is_some_and(|c| c.severity.is_error()));
    assert!(m.top_level_condition().is_some_and(|c| c.severity.is_error()));

    // An Unknown informational condition does not make a not-yet-ready Ready anything else.
    let mut c = Vec::new();
    let mut m = SET.manage_with_clock(&mut c, Ticking::new());
    m.initialize_conditions();
    m.mark_unknown(INFO, "Queued", "");
    let ready = m.top_level_condition().expect("ready");
    assert!(ready.is_unknown());
    assert_eq!(ready.reason, "");
}

#[test]
fn conditions_are_sorted_by_type() {
    let mut c = Vec::new();
    let mut m = SET.manage_with_clock(&mut c, Ticking::new());
    m.mark_true(INFO);
    m.mark_true(B);
    m.mark_true("Aardvark");
    m.mark_true(A);
    assert_eq!(types(&c), ["Aardvark", A, B, INFO, "Ready"]);
}

#[test]
fn transition_time_moves_only_when_the_condition_changes() {
    let mut c = Vec::new();
    SET.manage_with_clock(&mut c, at(100)).mark_false(A, "AFailed", "m");
    assert_eq!(get(&c, A).last_transition_time, Some(at(100)));
    assert_eq!(get(&c, "Ready").last_transition_time, Some(at(100)));

    // Same status, reason and message: time kept, for A and for Ready.
    SET.manage_with_clock(&mut c, at(200)).mark_false(A, "AFailed", "m");
    assert_eq!(get(&c, A).last_transition_time, Some(at(100)));
    assert_eq!(get(&c, "Ready").last_transition_time, Some(at(100)));

    // Marking another condition leaves A's time alone.
    SET.manage_with_clock(&mut c, at(300)).mark_unknown(B, "BPending", "");
    assert_eq!(get(&c, A).last_transition_time, Some(at(100)));
    assert_eq!(get(&c, B).last_transition_time, Some(at(300)));
    assert_eq!(get(&c, "Ready").last_transition_time, Some(at(100)));

    // A new status is a transition.
    SET.manage_with_clock(&mut c, at(400)).mark_true(A);
    assert_eq!(get(&c, A).last_transition_time, Some(at(400)));
    // Ready went from False/AFailed to Unknown/BPending.
    assert_eq!(get(&c, "Ready").last_transition_time, Some(at(400)));
    assert_eq!(get(&c, "Ready").reason, "BPending");

    // Upstream: a new reason or message with the same status is a transition too.
    SET.manage_with_clock(&mut c, at(500)).mark_unknown(B, "BStillPending", "");
    assert_eq!(get(&c, B).last_transition_time, Some(at(500)));
}

#[test]
fn set_condition_ignores_the_callers_time() {
    let mut c = Vec::new();
    let mut m = SET.manage_with_clock(&mut c, at(7));
    m.set_condition(Condition {
        type_: INFO.into(),
        status: ConditionStatus::True,
        last_transition_time: Some(at(1)),
        ..Default::default()
    });
    assert_eq!(m.get_condition(INFO).and_then(|c| c.last_transition_time.clone()), Some(at(7)));
}

#[test]
fn mark_true_with_reason_keeps_the_reason_on_the_dependent_only() {
    let mut c = Vec::new();
    let mut m = SET.manage_with_clock(&mut c, Ticking::new());
    m.mark_true(B);
    m.mark_true_with_reason(A, "Fine", "all good");
    assert_eq!(m.get_condition(A).expect("a").reason, "Fine");
    let ready = m.top_level_condition().expect("ready");
    assert!(ready.is_true());
    assert_eq!(ready.reason, "");
}

#[test]
fn marking_the_happy_condition_directly() {
    let mut c = Vec::new();
    let mut m = SET.manage_with_clock(&mut c, Ticking::new());
    m.mark_true(A);
    m.mark_true(B);
    m.mark_false("Ready", "Manual", "");
    assert!(m.top_level_condition().is_some_and(Condition::is_false));
    // mark_true on Ready with an unhappy dependent copies the dependent.
    m.mark_unknown(A, "Again", "");
    m.mark_true("Ready");
    let ready = m.top_level_condition().expect("ready");
    assert!(ready.is_unknown());
    assert_eq!(ready.reason, "Again");
}

#[test]
fn clear_condition_only_clears_non_terminal_conditions() {
    let mut c = Vec::new();
    let mut m = SET.manage_with_clock(&mut c, Ticking::new());
    m.initialize_conditions();
    m.mark_true(INFO);
    assert_eq!(m.clear_condition(A), Err(ClearTerminalConditionError(A.to_owned())));
    assert!(m.clear_condition("Ready").is_err());
    assert_eq!(m.clear_condition(INFO), Ok(()));
    assert_eq!(m.clear_condition("Absent"), Ok(()));
    assert_eq!(types(m.conditions()), [A, B, "Ready"]);
}

#[test]
fn a_set_without_dependents_leaves_ready_to_the_caller() {
    const ALONE: ConditionSet = ConditionSet::living(&[]);
    let mut c = Vec::new();
    let mut m = ALONE.manage_with_clock(&mut c, Ticking::new());
    m.initialize_conditions();
    assert_eq!(types(m.conditions()), ["Ready"]);
    m.mark_true(INFO);
    assert!(m.is_happy());
}

#[test]
fn duplicate_dependents_and_the_happy_type_are_ignored() {
    const DUP: ConditionSet = ConditionSet::living(&[A, "Ready", A, B]);
    assert_eq!(DUP.dependents().collect::<Vec<_>>(), [A, B]);
    assert!(!DUP.is_dependent("Ready"));
    assert!(DUP.is_terminal("Ready"));
    let mut c = Vec::new();
    let mut m = DUP.manage_with_clock(&mut c, Ticking::new());
    m.initialize_conditions();
    m.mark_true(A);
    m.mark_true(B);
    assert!(m.is_happy());
}

#[test]
fn batch_sets_use_succeeded() {
    const JOB: ConditionSet = ConditionSet::batch(&[A]);
    let mut c = Vec::new();
    let mut m = JOB.manage_with_clock(&mut c, Ticking::new());
    m.mark_true(A);
    assert_eq!(m.top_level_condition().map(|c| c.type_.as_str()), Some(CONDITION_SUCCEEDED));
    assert!(m.is_happy());
}

#[test]
fn is_ready_needs_ready_true_and_the_current_generation() {
    let mut c = Vec::new();
    let mut m = SET.manage_with_clock(&mut c, Ticking::new());
    m.mark_true(A);
    m.mark_true(B);
    assert!(is_ready(&c, 3, Some(3)));
    assert!(!is_ready(&c, 2, Some(3)));
    assert!(is_ready(&c, 0, None));
    assert!(!is_failed(&c, 3, Some(3)));
    SET.manage_with_clock(&mut c, at(9)).mark_false(A, "X", "");
    assert!(!is_ready(&c, 3, Some(3)));
    assert!(is_failed(&c, 3, Some(3)));
    assert!(!is_failed(&c, 2, Some(3)));
    assert!(!is_ready(&[], 0, None));
}

#[test]
fn revision_set_is_resources_available_and_container_healthy() {
    use revision::*;
    assert_eq!(CONDITION_SET.dependents().collect::<Vec<_>>(), [RESOURCES_AVAILABLE, CONTAINER_HEALTHY]);
    assert_eq!(CONDITION_SET.severity(ACTIVE), ConditionSeverity::Info);
    assert_eq!(exit_code_reason(137), "ExitCode137");
    assert_eq!(resource_not_owned_message("Service", "hello-00001"), r#"There is an existing Service "hello-00001" that we do not own."#);
    assert_eq!(
        container_missing_message("registry.local/hello@sha256:00", "not found"),
        r#"Unable to fetch image "registry.local/hello@sha256:00": not found"#
    );
    assert_eq!(container_exiting_message("boom"), "Container failed with: boom");
}

/// `set` has exactly `dependents`; `Ready` is True only once every
/// dependent is, follows any dependent that turns False, and keeps its
/// `lastTransitionTime` when a condition is marked again unchanged. A set
/// without dependents leaves `Ready` to the reconciler.
fn check_living_set(set: ConditionSet, dependents: &[&str]) {
    assert_eq!(set.dependents().collect::<Vec<_>>(), dependents);
    assert_eq!(set.happy(), CONDITION_READY);
    let mut c = Vec::new();
    let mut m = set.manage_with_clock(&mut c, Ticking::new());
    m.initialize_conditions();
    for d in dependents {
        assert!(!m.is_happy(), "Ready before {d} is True");
        m.mark_true(d);
    }
    if dependents.is_empty() {
        assert!(!m.is_happy());
        m.mark_true(CONDITION_READY);
    }
    assert!(m.is_happy(), "{:?}", m.conditions());
    for d in dependents.iter().copied().chain([CONDITION_READY]) {
        let since = m.top_level_condition().expect("ready").clone();
        m.mark_true(d);
        assert_eq!(m.top_level_condition(), Some(&since), "re-marking {d}");
        m.mark_false(d, "Broken", d);
        let ready = m.top_level_condition().expect("ready");
        assert!(ready.is_false() && ready.reason == "Broken" && ready.message == d);
        m.mark_true(d);
        assert!(m.is_happy(), "after {d} recovers");
    }
}

#[test]
fn every_resource_set_has_upstreams_dependents() {
    check_living_set(revision::CONDITION_SET, &[revision::RESOURCES_AVAILABLE, revision::CONTAINER_HEALTHY]);
    check_living_set(service::CONDITION_SET, &[service::CONFIGURATIONS_READY, service::ROUTES_READY]);
    check_living_set(configuration::CONDITION_SET, &[]);
    check_living_set(route::CONDITION_SET, &[route::ALL_TRAFFIC_ASSIGNED, route::INGRESS_READY, route::CERTIFICATE_PROVISIONED]);
    check_living_set(
        domain_mapping::CONDITION_SET,
        &[
            domain_mapping::DOMAIN_CLAIMED,
            domain_mapping::REFERENCE_RESOLVED,
            domain_mapping::INGRESS_READY,
            domain_mapping::CERTIFICATE_PROVISIONED,
        ],
    );
    check_living_set(ingress::CONDITION_SET, &[ingress::NETWORK_CONFIGURED, ingress::LOAD_BALANCER_READY]);
    check_living_set(certificate::CONDITION_SET, &[]);
}

#[test]
fn propagate_copies_a_childs_ready() {
    let mut c = Vec::new();
    let mut m = service::CONDITION_SET.manage_with_clock(&mut c, Ticking::new());
    m.mark_true(service::ROUTES_READY);
    let child = |status, reason: &str| Condition {
        type_: CONDITION_READY.into(),
        status,
        reason: reason.into(),
        message: format!("{reason}!"),
        ..Default::default()
    };
    m.propagate(service::CONFIGURATIONS_READY, &child(ConditionStatus::Unknown, "Deploying"));
    let got = m.get_condition(service::CONFIGURATIONS_READY).expect("set");
    assert!(got.is_unknown() && got.reason == "Deploying" && got.message == "Deploying!");
    m.propagate(service::CONFIGURATIONS_READY, &child(ConditionStatus::False, "RevisionFailed"));
    assert_eq!(m.top_level_condition().map(|c| c.reason.as_str()), Some("RevisionFailed"));
    m.propagate(service::CONFIGURATIONS_READY, &child(ConditionStatus::True, "Ignored"));
    assert_eq!(m.get_condition(service::CONFIGURATIONS_READY).map(|c| c.reason.as_str()), Some(""));
    assert!(m.is_happy());
}

#[test]
fn messages_read_like_upstreams() {
    assert_eq!(route::revision_failed_message("hello-00001"), r#"Revision "hello-00001" failed to become ready."#);
    assert_eq!(route::missing_target_reason("Configuration"), "ConfigurationMissing");
    assert_eq!(route::missing_target_message("Configuration", "hello"), r#"Configuration "hello" referenced in traffic not found."#);
    assert_eq!(
        resource_not_owned_message("placeholder Service", "hello"),
        r#"There is an existing placeholder Service "hello" that we do not own."#
    );
    assert_eq!(configuration::latest_created_failed_message("hello-00002", "boom"), r#"Revision "hello-00002" failed with message: boom."#);
    assert_eq!(
        service::revision_name_taken_message("hello-v1"),
        r#"The revision name "hello-v1" is taken by a conflicting Revision, so traffic will not be migrated"#
    );
}

#[test]
fn a_state_passed_through_within_one_computation_is_no_transition() {
    // Stored: A and B Unknown, Ready Unknown with B's (empty) reason, all at 100.
    let mut stored = Vec::new();
    let mut m = SET.manage_with_clock(&mut stored, at(100));
    m.mark_unknown(A, "Deploying", "waiting");
    m.mark_unknown(B, "Deploying", "");
    // The same marks a second later: Ready passes through A's message and back.
    let mut computed = stored.clone();
    let mut m = SET.manage_with_clock(&mut computed, at(200));
    m.mark_unknown(A, "Deploying", "waiting");
    m.mark_unknown(B, "Deploying", "");
    assert_eq!(get(&computed, "Ready").last_transition_time, Some(at(200)), "the manager alone moves Ready's time");
    keep_transition_times(&stored, &mut computed);
    assert_eq!(computed, stored, "nothing changed, so nothing to write");

    // A real change keeps its new time; the unchanged conditions keep theirs.
    let mut m = SET.manage_with_clock(&mut computed, at(300));
    m.mark_true(A);
    keep_transition_times(&stored, &mut computed);
    assert_eq!(get(&computed, A).last_transition_time, Some(at(300)));
    assert_eq!(get(&computed, B).last_transition_time, Some(at(100)));
}
