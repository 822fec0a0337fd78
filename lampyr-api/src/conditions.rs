//! Knative status conditions with upstream semantics.
//!
//! This is the behaviour of `knative.dev/pkg/apis` (`condition_set.go`,
//! `condition_types.go`), re-implemented:
//!
//! - A [`ConditionSet`] names a *happy* condition (`Ready` for living
//!   resources, `Succeeded` for batch ones) and the *dependent* conditions it
//!   summarises. The happy condition and the dependents are *terminal*: their
//!   severity is empty ("Error", omitted on the wire). Every other condition
//!   gets severity `Info` and never decides the happy condition.
//! - After each change the happy condition copies the first unhappy terminal
//!   condition: any `False` beats any `Unknown`, and among equals the one with
//!   the latest `lastTransitionTime` wins. A dependent that was never set keeps
//!   the happy condition `Unknown` (with no reason). When every dependent is
//!   `True`, so is the happy condition.
//! - Conditions are kept sorted by type.
//! - A condition whose status, severity, reason and message are all unchanged
//!   keeps its `lastTransitionTime`; any other change stamps a new one from the
//!   manager's [`Clock`]. (Upstream compares every field but the time, so a new
//!   reason or message is a transition too, not only a new status.)
//! - [`is_ready`]: the happy condition is `True` **and** `observedGeneration`
//!   equals `metadata.generation`.
//!
//! Operations go through a [`ConditionManager`] borrowed from a set over the
//! status's `Vec<Condition>`:
//!
//! ```
//! use lampyr_api::conditions::{CONDITION_READY, revision};
//!
//! let mut conditions = Vec::new();
//! let mut m = revision::CONDITION_SET.manage(&mut conditions);
//! m.initialize_conditions();
//! m.mark_true(revision::RESOURCES_AVAILABLE);
//! m.mark_false(revision::CONTAINER_HEALTHY, "ExitCode1", "Container failed with: boom");
//! let ready = m.get_condition(CONDITION_READY).unwrap();
//! assert!(ready.is_false());
//! assert_eq!(ready.reason, "ExitCode1");
//! ```

use std::cmp::Reverse;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The happy condition of living resources (Services, Revisions, Homes, …).
pub const CONDITION_READY: &str = "Ready";
/// The happy condition of batch resources (run to completion).
pub const CONDITION_SUCCEEDED: &str = "Succeeded";

/// The status of a condition.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ConditionStatus {
    /// The condition holds.
    True,
    /// The condition does not hold.
    False,
    /// Not known (yet).
    #[default]
    Unknown,
}

impl ConditionStatus {
    /// The wire spelling: `True`, `False` or `Unknown`.
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        }
    }
}

impl fmt::Display for ConditionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How to treat a condition that is not `True`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ConditionSeverity {
    /// A failure is an error. Spelled as the empty string, and omitted on the
    /// wire; `"Error"` is accepted when reading.
    #[default]
    #[serde(rename = "", alias = "Error")]
    Error,
    /// A failure is a warning; things may still work.
    Warning,
    /// Purely informational; things still work.
    Info,
}

impl ConditionSeverity {
    /// Whether this is the default severity (omitted on the wire).
    pub fn is_error(&self) -> bool {
        *self == ConditionSeverity::Error
    }
}

/// A Knative condition: one aspect of the resource's state and when it last changed.
///
/// Wire-compatible with `knative.dev/pkg/apis.Condition`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Type of condition, in CamelCase (`Ready`, `ResourcesAvailable`, …).
    #[serde(rename = "type")]
    pub type_: String,
    /// Status of the condition: True, False or Unknown.
    pub status: ConditionStatus,
    /// How to interpret a failure of this condition: empty (Error), Warning or Info.
    #[serde(default, skip_serializing_if = "ConditionSeverity::is_error")]
    pub severity: ConditionSeverity,
    /// Last time the condition changed (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    /// One-word CamelCase reason for the condition's last transition.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Human-readable details about the last transition.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

impl Condition {
    /// Whether the status is `True`.
    pub fn is_true(&self) -> bool {
        self.status == ConditionStatus::True
    }

    /// Whether the status is `False`.
    pub fn is_false(&self) -> bool {
        self.status == ConditionStatus::False
    }

    /// Whether the status is `Unknown`.
    pub fn is_unknown(&self) -> bool {
        self.status == ConditionStatus::Unknown
    }

    /// Equal in everything but `lastTransitionTime` (upstream's `VolatileTime`
    /// equality): the test for whether setting `other` is a transition.
    pub fn same_state(&self, other: &Condition) -> bool {
        self.type_ == other.type_
            && self.status == other.status
            && self.severity == other.severity
            && self.reason == other.reason
            && self.message == other.message
    }
}

/// The condition of type `type_` in `conditions`, if set.
pub fn get_condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Upstream `IsReady()`: `Ready` is `True` and the status reflects the current
/// generation. A missing `generation` or `observedGeneration` counts as 0, as
/// in Go.
pub fn is_ready(
    conditions: &[Condition],
    observed_generation: i64,
    generation: Option<i64>,
) -> bool {
    observed_generation == generation.unwrap_or(0)
        && get_condition(conditions, CONDITION_READY).is_some_and(Condition::is_true)
}

/// Upstream `IsFailed()`: `Ready` is `False` and the status reflects the
/// current generation.
pub fn is_failed(
    conditions: &[Condition],
    observed_generation: i64,
    generation: Option<i64>,
) -> bool {
    observed_generation == generation.unwrap_or(0)
        && get_condition(conditions, CONDITION_READY).is_some_and(Condition::is_false)
}

/// Implements [`KnativeStatus`] for a status struct with `conditions: Vec<Condition>`
/// and `observed_generation: i64` fields, whose conditions follow `$set`.
#[macro_export]
macro_rules! impl_knative_status {
    ($status:ty, $set:expr) => {
        impl $crate::conditions::KnativeStatus for $status {
            const CONDITION_SET: $crate::conditions::ConditionSet = $set;

            fn conditions(&self) -> &[$crate::conditions::Condition] {
                &self.conditions
            }

            fn conditions_mut(&mut self) -> &mut Vec<$crate::conditions::Condition> {
                &mut self.conditions
            }

            fn observed_generation(&self) -> i64 {
                self.observed_generation
            }

            fn set_observed_generation(&mut self, generation: i64) {
                self.observed_generation = generation;
            }
        }
    };
}

/// A status with Knative conditions and an observed generation (the
/// `duckv1.Status` shape), and the condition set its conditions follow.
pub trait KnativeStatus {
    /// The condition set of this status (upstream `GetConditionSet()`).
    const CONDITION_SET: ConditionSet;

    /// The conditions.
    fn conditions(&self) -> &[Condition];
    /// The conditions, for a [`ConditionManager`].
    fn conditions_mut(&mut self) -> &mut Vec<Condition>;
    /// `observedGeneration` (0 when unset).
    fn observed_generation(&self) -> i64;
    /// Sets `observedGeneration` (reconcilers set it to `metadata.generation`
    /// after every reconcile, even a failed one).
    fn set_observed_generation(&mut self, generation: i64);

    /// The condition of type `type_`, if set.
    fn get_condition(&self, type_: &str) -> Option<&Condition> {
        get_condition(self.conditions(), type_)
    }

    /// `Ready` is `True` and `observedGeneration == generation`.
    fn is_ready(&self, generation: Option<i64>) -> bool {
        is_ready(self.conditions(), self.observed_generation(), generation)
    }

    /// `Ready` is `False` and `observedGeneration == generation`.
    fn is_failed(&self, generation: Option<i64>) -> bool {
        is_failed(self.conditions(), self.observed_generation(), generation)
    }

    /// A manager over the conditions under [`Self::CONDITION_SET`] (system clock).
    fn manage(&mut self) -> ConditionManager<'_, SystemClock> {
        self.manage_with_clock(SystemClock)
    }

    /// A manager over the conditions under [`Self::CONDITION_SET`] with `clock`.
    fn manage_with_clock<C: Clock>(&mut self, clock: C) -> ConditionManager<'_, C> {
        Self::CONDITION_SET.manage_with_clock(self.conditions_mut(), clock)
    }

    /// Unset terminal conditions become `Unknown` (upstream `InitializeConditions()`).
    fn initialize_conditions(&mut self) {
        self.manage().initialize_conditions();
    }
}

/// Where a [`ConditionManager`] takes `lastTransitionTime` from.
pub trait Clock {
    /// The current time.
    fn now(&self) -> Time;
}

/// The system clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Time {
        Time(Timestamp::now())
    }
}

/// A fixed time is a clock that never moves (for tests, or one timestamp per reconcile).
impl Clock for Time {
    fn now(&self) -> Time {
        self.clone()
    }
}

impl<C: Clock + ?Sized> Clock for &C {
    fn now(&self) -> Time {
        (**self).now()
    }
}

/// Clearing the happy condition or a dependent was asked for; upstream refuses it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("clearing terminal condition {0:?} is not supported")]
pub struct ClearTerminalConditionError(pub String);

/// A happy condition and the dependent conditions it summarises.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConditionSet {
    happy: &'static str,
    dependents: &'static [&'static str],
}

impl ConditionSet {
    /// A living condition set: `Ready` summarises `dependents`. Duplicates, and
    /// `Ready` itself among the dependents, are ignored.
    pub const fn living(dependents: &'static [&'static str]) -> Self {
        Self::new(CONDITION_READY, dependents)
    }

    /// A batch condition set: `Succeeded` summarises `dependents`.
    pub const fn batch(dependents: &'static [&'static str]) -> Self {
        Self::new(CONDITION_SUCCEEDED, dependents)
    }

    /// A condition set with any happy condition.
    pub const fn new(happy: &'static str, dependents: &'static [&'static str]) -> Self {
        Self { happy, dependents }
    }

    /// The happy (top-level) condition type.
    pub fn happy(&self) -> &'static str {
        self.happy
    }

    /// The dependent condition types, in order, without duplicates or the happy type.
    pub fn dependents(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.dependents
            .iter()
            .enumerate()
            .filter(|&(i, d)| *d != self.happy && !self.dependents[..i].contains(d))
            .map(|(_, d)| *d)
    }

    /// Whether `type_` is a dependent of this set.
    pub fn is_dependent(&self, type_: &str) -> bool {
        type_ != self.happy && self.dependents.contains(&type_)
    }

    /// Whether `type_` is terminal: the happy condition or a dependent.
    pub fn is_terminal(&self, type_: &str) -> bool {
        type_ == self.happy || self.dependents.contains(&type_)
    }

    /// The severity conditions of `type_` get: Error for terminal ones, Info otherwise.
    pub fn severity(&self, type_: &str) -> ConditionSeverity {
        if self.is_terminal(type_) {
            ConditionSeverity::Error
        } else {
            ConditionSeverity::Info
        }
    }

    /// A manager over `conditions` that stamps transitions with the system clock.
    pub fn manage<'a>(
        &self,
        conditions: &'a mut Vec<Condition>,
    ) -> ConditionManager<'a, SystemClock> {
        self.manage_with_clock(conditions, SystemClock)
    }

    /// A manager over `conditions` that stamps transitions with `clock`.
    pub fn manage_with_clock<'a, C: Clock>(
        &self,
        conditions: &'a mut Vec<Condition>,
        clock: C,
    ) -> ConditionManager<'a, C> {
        ConditionManager {
            set: *self,
            conditions,
            clock,
        }
    }
}

/// Higher-order operations on a status's conditions under a [`ConditionSet`].
pub struct ConditionManager<'a, C: Clock = SystemClock> {
    set: ConditionSet,
    conditions: &'a mut Vec<Condition>,
    clock: C,
}

impl<C: Clock> fmt::Debug for ConditionManager<'_, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConditionManager")
            .field("set", &self.set)
            .field("conditions", &self.conditions)
            .finish_non_exhaustive()
    }
}

impl<C: Clock> ConditionManager<'_, C> {
    /// The managed conditions.
    pub fn conditions(&self) -> &[Condition] {
        self.conditions
    }

    /// The condition of type `type_`, if set.
    pub fn get_condition(&self, type_: &str) -> Option<&Condition> {
        get_condition(self.conditions, type_)
    }

    /// The happy condition, if set.
    pub fn top_level_condition(&self) -> Option<&Condition> {
        self.get_condition(self.set.happy)
    }

    /// Whether the happy condition is `True`.
    pub fn is_happy(&self) -> bool {
        self.top_level_condition().is_some_and(Condition::is_true)
    }

    /// Sets or replaces the condition of `cond.type_`.
    ///
    /// If nothing but `lastTransitionTime` would change, nothing changes;
    /// otherwise the condition gets the clock's time as `lastTransitionTime`
    /// (whatever `cond` carried). Conditions stay sorted by type.
    pub fn set_condition(&mut self, mut cond: Condition) {
        match self.conditions.iter().position(|c| c.type_ == cond.type_) {
            Some(i) if self.conditions[i].same_state(&cond) => {}
            Some(i) => {
                cond.last_transition_time = Some(self.clock.now());
                self.conditions[i] = cond;
            }
            None => {
                cond.last_transition_time = Some(self.clock.now());
                self.conditions.push(cond);
            }
        }
        self.conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
    }

    /// Removes a non-terminal condition; terminal ones cannot be cleared.
    pub fn clear_condition(&mut self, type_: &str) -> Result<(), ClearTerminalConditionError> {
        if self.set.is_terminal(type_) {
            return Err(ClearTerminalConditionError(type_.to_owned()));
        }
        self.conditions.retain(|c| c.type_ != type_);
        Ok(())
    }

    /// Marks `type_` `True` (no reason), then recomputes the happy condition.
    pub fn mark_true(&mut self, type_: &str) {
        self.mark_true_with_reason(type_, "", "");
    }

    /// Marks `type_` `True` with a reason, then recomputes the happy condition.
    pub fn mark_true_with_reason(&mut self, type_: &str, reason: &str, message: &str) {
        self.set_condition(self.condition(type_, ConditionStatus::True, reason, message));
        self.recompute_happiness(type_);
    }

    /// Marks `type_` `Unknown`.
    ///
    /// If any dependent is `False`, the happy condition is made `False` (with
    /// this reason and message) unless it already is; otherwise, if `type_` is
    /// a dependent, the happy condition becomes `Unknown` with this reason and
    /// message. A non-dependent condition leaves the happy condition alone.
    pub fn mark_unknown(&mut self, type_: &str, reason: &str, message: &str) {
        self.set_condition(self.condition(type_, ConditionStatus::Unknown, reason, message));

        let any_dependent_false = self
            .set
            .dependents()
            .any(|d| self.get_condition(d).is_some_and(Condition::is_false));
        if any_dependent_false {
            if !self.top_level_condition().is_some_and(Condition::is_false) {
                self.mark_false(self.set.happy, reason, message);
            }
            return;
        }
        if self.set.is_dependent(type_) {
            self.set_condition(self.condition(
                self.set.happy,
                ConditionStatus::Unknown,
                reason,
                message,
            ));
        }
    }

    /// Marks `type_` `False`; if it is a dependent, the happy condition becomes
    /// `False` with the same reason and message.
    pub fn mark_false(&mut self, type_: &str, reason: &str, message: &str) {
        self.set_condition(self.condition(type_, ConditionStatus::False, reason, message));
        if self.set.is_dependent(type_) {
            self.set_condition(self.condition(
                self.set.happy,
                ConditionStatus::False,
                reason,
                message,
            ));
        }
    }

    /// Sets `type_` from a child object's `Ready` condition, as upstream's
    /// `Propagate*Status` helpers do: `True` marks it `True` (no reason),
    /// `False` and `Unknown` copy the child's reason and message.
    pub fn propagate(&mut self, type_: &str, from: &Condition) {
        match from.status {
            ConditionStatus::True => self.mark_true(type_),
            ConditionStatus::False => self.mark_false(type_, &from.reason, &from.message),
            ConditionStatus::Unknown => self.mark_unknown(type_, &from.reason, &from.message),
        }
    }

    /// Sets the happy condition to `Unknown` if it is unset, then every unset
    /// dependent to `Unknown` — or to `True` if the happy condition is `True`
    /// (a happy resource implies happy dependents). Set conditions are kept.
    pub fn initialize_conditions(&mut self) {
        let happy_status = match self.top_level_condition() {
            Some(c) => c.status,
            None => {
                self.set_condition(self.condition(
                    self.set.happy,
                    ConditionStatus::Unknown,
                    "",
                    "",
                ));
                ConditionStatus::Unknown
            }
        };
        let status = if happy_status == ConditionStatus::True {
            ConditionStatus::True
        } else {
            ConditionStatus::Unknown
        };
        let set = self.set;
        for d in set.dependents() {
            if self.get_condition(d).is_none() {
                self.set_condition(self.condition(d, status, "", ""));
            }
        }
    }

    fn condition(
        &self,
        type_: &str,
        status: ConditionStatus,
        reason: &str,
        message: &str,
    ) -> Condition {
        Condition {
            type_: type_.to_owned(),
            status,
            severity: self.set.severity(type_),
            last_transition_time: None,
            reason: reason.to_owned(),
            message: message.to_owned(),
        }
    }

    /// After `changed` was set: the happy condition copies the first unhappy
    /// dependent, or becomes `True` when there is none (unless the happy
    /// condition itself was the one set).
    fn recompute_happiness(&mut self, changed: &str) {
        if let Some((status, reason, message)) = self.find_unhappy_dependent() {
            self.set_condition(self.condition(self.set.happy, status, &reason, &message));
        } else if changed != self.set.happy {
            self.set_condition(self.condition(self.set.happy, ConditionStatus::True, "", ""));
        }
    }

    /// The status, reason and message the happy condition should copy, or
    /// `None` when every dependent is `True`.
    ///
    /// Candidates are the terminal-severity conditions other than the happy
    /// one, latest `lastTransitionTime` first (ties keep type order); a `False`
    /// one beats an `Unknown` one. A dependent missing among them makes the
    /// result `Unknown` with no reason.
    fn find_unhappy_dependent(&self) -> Option<(ConditionStatus, String, String)> {
        // Without dependents the happy condition is the caller's alone.
        self.set.dependents().next()?;
        let mut candidates: Vec<&Condition> = self
            .conditions
            .iter()
            .filter(|c| c.severity.is_error() && c.type_ != self.set.happy)
            .collect();
        candidates.sort_by_key(|c| Reverse(c.last_transition_time.as_ref()));

        let found = candidates
            .iter()
            .find(|c| c.is_false())
            .or_else(|| candidates.iter().find(|c| c.is_unknown()));
        if let Some(c) = found {
            return Some((c.status, c.reason.clone(), c.message.clone()));
        }
        let missing = self
            .set
            .dependents()
            .any(|d| !candidates.iter().any(|c| c.type_ == d));
        missing.then(|| (ConditionStatus::Unknown, String::new(), String::new()))
    }
}

/// The reason upstream gives when an object it would create or update exists
/// but is owned by another object (any resource's condition).
pub const REASON_NOT_OWNED: &str = "NotOwned";

/// Upstream's "not owned" message, the message of [`REASON_NOT_OWNED`]:
/// `kind` is e.g. `Configuration`, `Service` or `placeholder Service`.
pub fn resource_not_owned_message(kind: &str, name: &str) -> String {
    format!(
        "There is an existing {kind} {} that we do not own.",
        go_quote(name)
    )
}

/// Go's `%q` for the strings that appear in messages: JSON string quoting
/// matches it for printable text.
fn go_quote(s: &str) -> String {
    serde_json::Value::String(s.to_owned()).to_string()
}

/// The Revision condition set and the reasons upstream reports
/// (`knative.dev/serving/pkg/apis/serving/v1/revision_lifecycle.go`, and the
/// PodAutoscaler reasons the Revision copies into `Active`).
pub mod revision {
    use super::{ConditionSet, go_quote};
    pub use super::{REASON_NOT_OWNED, resource_not_owned_message};

    /// The Revision's resources (for Lampyr: grant capacity, Home, fibers) are available.
    pub const RESOURCES_AVAILABLE: &str = "ResourcesAvailable";
    /// The Revision's container (for Lampyr: the guest) is healthy.
    pub const CONTAINER_HEALTHY: &str = "ContainerHealthy";
    /// The Revision is receiving traffic / has replicas; informational, not part of `Ready`
    /// (a Revision scaled to zero is still Ready).
    pub const ACTIVE: &str = "Active";

    /// `Ready` = `ResourcesAvailable` ∧ `ContainerHealthy`; `Active` is informational.
    pub const CONDITION_SET: ConditionSet =
        ConditionSet::living(&[RESOURCES_AVAILABLE, CONTAINER_HEALTHY]);

    /// Unknown `ResourcesAvailable` / `ContainerHealthy` / `Active` while the Revision deploys.
    pub const REASON_DEPLOYING: &str = "Deploying";
    /// Unknown while image digests (for Lampyr: the snapshot artifact) are being resolved.
    pub const REASON_RESOLVING_DIGESTS: &str = "ResolvingDigests";
    /// False `ResourcesAvailable`: initial scale was never achieved within the progress deadline.
    pub const REASON_PROGRESS_DEADLINE_EXCEEDED: &str = "ProgressDeadlineExceeded";
    /// Message upstream pairs with [`REASON_PROGRESS_DEADLINE_EXCEEDED`].
    pub const MESSAGE_INITIAL_SCALE_NEVER_ACHIEVED: &str = "Initial scale was never achieved";
    /// False `ContainerHealthy`: the image (for Lampyr: the artifact) could not be fetched.
    pub const REASON_CONTAINER_MISSING: &str = "ContainerMissing";
    /// `Active` False: the Revision is scaled to zero and receives no traffic.
    pub const REASON_NO_TRAFFIC: &str = "NoTraffic";
    /// Message upstream pairs with [`REASON_NO_TRAFFIC`].
    pub const MESSAGE_NO_TRAFFIC: &str = "The target is not receiving traffic.";
    /// `Active` False: activation failed within the progress deadline.
    pub const REASON_TIMED_OUT: &str = "TimedOut";
    /// Message upstream pairs with [`REASON_TIMED_OUT`].
    pub const MESSAGE_TIMED_OUT: &str = "The target could not be activated.";
    /// `Active` Unknown: requests are buffered while replicas are provisioned.
    pub const REASON_QUEUED: &str = "Queued";
    /// Message upstream pairs with [`REASON_QUEUED`].
    pub const MESSAGE_QUEUED: &str =
        "Requests to the target are being buffered as resources are provisioned.";

    /// Upstream `ExitCodeReason`: `ExitCode<N>`, the `ContainerHealthy` False reason
    /// when the container (guest) exits.
    pub fn exit_code_reason(exit_code: i32) -> String {
        format!("ExitCode{exit_code}")
    }

    /// Upstream `RevisionContainerExitingMessage`.
    pub fn container_exiting_message(message: &str) -> String {
        format!("Container failed with: {message}")
    }

    /// Upstream `RevisionContainerMissingMessage` (Go's `%q` quoting of `image`).
    pub fn container_missing_message(image: &str, message: &str) -> String {
        format!("Unable to fetch image {}: {message}", go_quote(image))
    }
}

/// The Service condition set and its reasons
/// (`knative.dev/serving/pkg/apis/serving/v1/service_lifecycle.go`).
pub mod service {
    use super::{ConditionSet, go_quote};
    pub use super::{REASON_NOT_OWNED, resource_not_owned_message};

    /// The Service's Configuration is Ready.
    pub const CONFIGURATIONS_READY: &str = "ConfigurationsReady";
    /// The Service's Route is Ready.
    pub const ROUTES_READY: &str = "RoutesReady";
    /// `Ready` = `ConfigurationsReady` ∧ `RoutesReady`.
    pub const CONDITION_SET: ConditionSet =
        ConditionSet::living(&[CONFIGURATIONS_READY, ROUTES_READY]);

    /// Unknown: the child has not yet observed the Service's latest spec.
    pub const REASON_OUT_OF_DATE: &str = "OutOfDate";
    /// Message of [`REASON_OUT_OF_DATE`] on `ConfigurationsReady`.
    pub const MESSAGE_CONFIGURATION_OUT_OF_DATE: &str =
        "The Configuration is still working to reflect the latest desired specification.";
    /// Message of [`REASON_OUT_OF_DATE`] on `RoutesReady`.
    pub const MESSAGE_ROUTE_OUT_OF_DATE: &str =
        "The Route is still working to reflect the latest desired specification.";
    /// Unknown `RoutesReady`: the Route does not yet send traffic to the latest Revision.
    pub const REASON_TRAFFIC_NOT_MIGRATED: &str = "TrafficNotMigrated";
    /// Message of [`REASON_TRAFFIC_NOT_MIGRATED`].
    pub const MESSAGE_TRAFFIC_NOT_MIGRATED: &str =
        "Traffic is not yet migrated to the latest revision.";
    /// False `RoutesReady`: the template's Revision name belongs to another Revision.
    pub const REASON_REVISION_NAME_TAKEN: &str = "RevisionNameTaken";

    /// Message of [`REASON_REVISION_NAME_TAKEN`].
    pub fn revision_name_taken_message(name: &str) -> String {
        format!(
            "The revision name {} is taken by a conflicting Revision, so traffic will not be migrated",
            go_quote(name)
        )
    }
}

/// The Configuration condition set and its reasons
/// (`knative.dev/serving/pkg/apis/serving/v1/configuration_lifecycle.go`).
pub mod configuration {
    use super::{ConditionSet, go_quote};

    /// `Ready` alone: the Configuration reconciler sets it directly.
    pub const CONDITION_SET: ConditionSet = ConditionSet::living(&[]);

    /// False `Ready`: the latest Revision failed, or could not be created.
    pub const REASON_REVISION_FAILED: &str = "RevisionFailed";
    /// False `Ready`: the latest ready Revision was deleted.
    pub const REASON_REVISION_DELETED: &str = "RevisionDeleted";

    /// Message of [`REASON_REVISION_FAILED`] when the latest created Revision failed.
    pub fn latest_created_failed_message(name: &str, message: &str) -> String {
        format!(
            "Revision {} failed with message: {message}.",
            go_quote(name)
        )
    }

    /// Message of [`REASON_REVISION_FAILED`] when creating the Revision failed.
    pub fn revision_creation_failed_message(message: &str) -> String {
        format!("Revision creation failed with message: {message}.")
    }

    /// Message of [`REASON_REVISION_DELETED`].
    pub fn latest_ready_deleted_message(name: &str) -> String {
        format!("Revision {} was deleted.", go_quote(name))
    }
}

/// The Route condition set and its reasons
/// (`knative.dev/serving/pkg/apis/serving/v1/route_lifecycle.go`).
pub mod route {
    use super::{ConditionSet, go_quote};
    pub use super::{REASON_NOT_OWNED, resource_not_owned_message};

    /// Every traffic target resolves to a ready Revision.
    pub const ALL_TRAFFIC_ASSIGNED: &str = "AllTrafficAssigned";
    /// The Route's KIngress is Ready.
    pub const INGRESS_READY: &str = "IngressReady";
    /// The Route's certificate is ready, or TLS is not needed.
    pub const CERTIFICATE_PROVISIONED: &str = "CertificateProvisioned";
    /// `Ready` = `AllTrafficAssigned` ∧ `IngressReady` ∧ `CertificateProvisioned`.
    pub const CONDITION_SET: ConditionSet =
        ConditionSet::living(&[ALL_TRAFFIC_ASSIGNED, INGRESS_READY, CERTIFICATE_PROVISIONED]);

    /// Unknown `IngressReady`: the KIngress has no `Ready` condition yet.
    pub const REASON_INGRESS_NOT_CONFIGURED: &str = "IngressNotConfigured";
    /// Message of [`REASON_INGRESS_NOT_CONFIGURED`].
    pub const MESSAGE_INGRESS_NOT_CONFIGURED: &str = "Ingress has not yet been reconciled.";
    /// Unknown `IngressReady`: traffic is shifting gradually (`rollout-duration`).
    pub const REASON_ROLLOUT_IN_PROGRESS: &str = "RolloutInProgress";
    /// Message of [`REASON_ROLLOUT_IN_PROGRESS`].
    pub const MESSAGE_ROLLOUT_IN_PROGRESS: &str =
        "A gradual rollout of the latest revision(s) is in progress.";
    /// Unknown `AllTrafficAssigned` for an unexpected error while resolving targets.
    pub const REASON_UNKNOWN: &str = "Unknown";
    /// `AllTrafficAssigned` not True: a target has no ready Revision (yet).
    pub const REASON_REVISION_MISSING: &str = "RevisionMissing";
    /// False `CertificateProvisioned`: the Certificate failed.
    pub const REASON_CERTIFICATE_PROVISION_FAILED: &str = "CertificateProvisionFailed";
    /// Unknown `CertificateProvisioned`: the Certificate is not ready yet.
    pub const REASON_CERTIFICATE_NOT_READY: &str = "CertificateNotReady";
    /// False `CertificateProvisioned`: a Certificate of that name is owned by another object.
    pub const REASON_CERTIFICATE_NOT_OWNED: &str = "CertificateNotOwned";
    /// True `CertificateProvisioned` without a certificate: TLS is off.
    pub const REASON_TLS_NOT_ENABLED: &str = "TLSNotEnabled";
    /// Message of [`REASON_TLS_NOT_ENABLED`] when external-domain TLS is off.
    pub const MESSAGE_EXTERNAL_DOMAIN_TLS_NOT_ENABLED: &str = "external-domain-tls is not enabled";
    /// Message of [`REASON_TLS_NOT_ENABLED`] for a cluster-local Route.
    pub const MESSAGE_TLS_NOT_ENABLED_FOR_CLUSTER_LOCAL: &str =
        "TLS is not enabled for cluster-local";
    /// True `CertificateProvisioned`: the certificate is not ready, so HTTP is served instead.
    pub const REASON_HTTP_DOWNGRADE: &str = "HTTPDowngrade";

    /// Message of [`REASON_REVISION_MISSING`]: the Configuration has no ready Revision yet.
    pub fn configuration_not_ready_message(name: &str) -> String {
        format!(
            "Configuration {} is waiting for a Revision to become ready.",
            go_quote(name)
        )
    }

    /// Message of [`REASON_REVISION_MISSING`]: the Configuration has no ready Revision.
    pub fn configuration_failed_message(name: &str) -> String {
        format!(
            "Configuration {} does not have any ready Revision.",
            go_quote(name)
        )
    }

    /// Message of [`REASON_REVISION_MISSING`]: the Revision is not ready yet.
    pub fn revision_not_ready_message(name: &str) -> String {
        format!("Revision {} is not yet ready.", go_quote(name))
    }

    /// Message of [`REASON_REVISION_MISSING`]: the Revision failed.
    pub fn revision_failed_message(name: &str) -> String {
        format!("Revision {} failed to become ready.", go_quote(name))
    }

    /// False `AllTrafficAssigned` reason for a target that does not exist: `<kind>Missing`.
    pub fn missing_target_reason(kind: &str) -> String {
        format!("{kind}Missing")
    }

    /// Message of [`missing_target_reason`].
    pub fn missing_target_message(kind: &str, name: &str) -> String {
        format!("{kind} {} referenced in traffic not found.", go_quote(name))
    }

    /// Message of [`REASON_CERTIFICATE_PROVISION_FAILED`], with the Certificate's `Ready` reason.
    pub fn certificate_provision_failed_message(name: &str, reason: &str) -> String {
        format!("Certificate {name} fails to be provisioned: {reason}")
    }

    /// Message of [`REASON_CERTIFICATE_NOT_READY`], with the Certificate's `Ready` reason.
    pub fn certificate_not_ready_message(name: &str, reason: &str) -> String {
        format!("Certificate {name} is not ready: {reason}")
    }

    /// Message of [`REASON_CERTIFICATE_NOT_OWNED`].
    pub fn certificate_not_owned_message(name: &str) -> String {
        format!("There is an existing certificate {name} that we don't own.")
    }

    /// Message of [`REASON_HTTP_DOWNGRADE`].
    pub fn http_downgrade_message(name: &str) -> String {
        format!("Certificate {name} is not ready downgrade HTTP.")
    }
}

/// The DomainMapping condition set and its reasons
/// (`knative.dev/serving/pkg/apis/serving/v1beta1/domainmapping_lifecycle.go`).
pub mod domain_mapping {
    use super::ConditionSet;
    pub use super::route::{
        MESSAGE_EXTERNAL_DOMAIN_TLS_NOT_ENABLED, MESSAGE_INGRESS_NOT_CONFIGURED,
        REASON_CERTIFICATE_NOT_OWNED, REASON_CERTIFICATE_NOT_READY,
        REASON_CERTIFICATE_PROVISION_FAILED, REASON_HTTP_DOWNGRADE, REASON_INGRESS_NOT_CONFIGURED,
        REASON_TLS_NOT_ENABLED, certificate_not_owned_message, http_downgrade_message,
    };

    /// The mapping holds the ClusterDomainClaim for its domain.
    pub const DOMAIN_CLAIMED: &str = "DomainClaimed";
    /// `spec.ref` resolves to an addressable target.
    pub const REFERENCE_RESOLVED: &str = "ReferenceResolved";
    /// The mapping's KIngress is Ready.
    pub const INGRESS_READY: &str = "IngressReady";
    /// The mapping's certificate is ready, or TLS is not needed.
    pub const CERTIFICATE_PROVISIONED: &str = "CertificateProvisioned";
    /// `Ready` = `DomainClaimed` ∧ `ReferenceResolved` ∧ `IngressReady` ∧ `CertificateProvisioned`.
    pub const CONDITION_SET: ConditionSet = ConditionSet::living(&[
        DOMAIN_CLAIMED,
        REFERENCE_RESOLVED,
        INGRESS_READY,
        CERTIFICATE_PROVISIONED,
    ]);

    /// False `DomainClaimed`: another DomainMapping holds the domain.
    pub const REASON_DOMAIN_ALREADY_CLAIMED: &str = "DomainAlreadyClaimed";
    /// Message of [`REASON_DOMAIN_ALREADY_CLAIMED`].
    pub const MESSAGE_DOMAIN_ALREADY_CLAIMED: &str =
        "The domain name is already in use by another DomainMapping";
    /// False `DomainClaimed`: the claim could not be created or read.
    pub const REASON_DOMAIN_CLAIM_FAILED: &str = "DomainClaimFailed";
    /// False `ReferenceResolved`: `spec.ref` does not resolve.
    pub const REASON_RESOLVE_FAILED: &str = "ResolveFailed";
    /// True `CertificateProvisioned`: `spec.tls` names the user's own secret.
    pub const REASON_CERTIFICATE_EXTERNALLY_PROVIDED: &str = "CertificateExternallyProvided";
    /// Message of [`REASON_CERTIFICATE_EXTERNALLY_PROVIDED`].
    pub const MESSAGE_TLS_CERTIFICATE_PROVIDED_EXTERNALLY: &str =
        "TLS certificate was provided externally";

    /// Message of [`REASON_CERTIFICATE_NOT_READY`] on a DomainMapping.
    pub fn certificate_not_ready_message(name: &str) -> String {
        format!("Certificate {name} is not ready.")
    }

    /// Message of [`REASON_CERTIFICATE_PROVISION_FAILED`] on a DomainMapping.
    pub fn certificate_provision_failed_message(name: &str) -> String {
        format!("Certificate {name} failed to be provisioned.")
    }
}

/// The KIngress condition set and its reasons
/// (`knative.dev/networking/pkg/apis/networking/v1alpha1/ingress_lifecycle.go`).
pub mod ingress {
    use super::ConditionSet;
    pub use super::{REASON_NOT_OWNED, resource_not_owned_message};

    /// The ingress implementation has programmed the routes.
    pub const NETWORK_CONFIGURED: &str = "NetworkConfigured";
    /// The load balancers serve the routes.
    pub const LOAD_BALANCER_READY: &str = "LoadBalancerReady";
    /// `Ready` = `NetworkConfigured` ∧ `LoadBalancerReady`.
    pub const CONDITION_SET: ConditionSet =
        ConditionSet::living(&[NETWORK_CONFIGURED, LOAD_BALANCER_READY]);

    /// Unknown `LoadBalancerReady` while the load balancers are not serving yet.
    pub const REASON_UNINITIALIZED: &str = "Uninitialized";
    /// Message of [`REASON_UNINITIALIZED`].
    pub const MESSAGE_LOAD_BALANCER_NOT_READY: &str = "Waiting for load balancer to be ready";
}

/// The Certificate condition set
/// (`knative.dev/networking/pkg/apis/networking/v1alpha1/certificate_lifecycle.go`).
pub mod certificate {
    use super::ConditionSet;
    pub use super::{REASON_NOT_OWNED, resource_not_owned_message};

    /// `Ready` alone: the certificate implementation sets it directly.
    pub const CONDITION_SET: ConditionSet = ConditionSet::living(&[]);
}
#[cfg(test)]
mod tests {
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
        let c = Condition {
            type_: "Ready".into(),
            status: ConditionStatus::True,
            last_transition_time: Some(at(0)),
            ..Default::default()
        };
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
        assert_eq!(
            c.last_transition_time.as_ref().map(|t| t.0.as_second()),
            Some(1_721_118_140)
        );
        let c: Condition = serde_json::from_str(
            r#"{"type":"X","status":"True","severity":"Error","lastTransitionTime":null}"#,
        )
        .expect("parse");
        assert_eq!(c.severity, ConditionSeverity::Error);
        assert_eq!(c.last_transition_time, None);
        let c: Condition =
            serde_json::from_str(r#"{"type":"X","status":"False","severity":"Warning"}"#)
                .expect("parse");
        assert_eq!(c.severity, ConditionSeverity::Warning);
    }

    #[test]
    fn initialize_sets_happy_and_dependents_unknown() {
        let mut c = Vec::new();
        SET.manage_with_clock(&mut c, at(10))
            .initialize_conditions();
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
        let mut c = vec![Condition {
            type_: "Ready".into(),
            status: ConditionStatus::True,
            last_transition_time: Some(at(1)),
            ..Default::default()
        }];
        SET.manage_with_clock(&mut c, at(10))
            .initialize_conditions();
        assert!(get(&c, A).is_true());
        assert!(get(&c, B).is_true());
        assert_eq!(get(&c, "Ready").last_transition_time, Some(at(1)));

        // Initializing again changes nothing.
        let before = c.clone();
        SET.manage_with_clock(&mut c, at(20))
            .initialize_conditions();
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
        assert_eq!(
            (ready.reason.as_str(), ready.message.as_str()),
            ("Broken", "b is broken")
        );
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
        assert_eq!(
            (ready.reason.as_str(), ready.message.as_str()),
            ("Deploying", "rolling")
        );
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
        assert!(
            m.top_level_condition()
                .is_some_and(|c| c.severity.is_error())
        );

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
        SET.manage_with_clock(&mut c, at(100))
            .mark_false(A, "AFailed", "m");
        assert_eq!(get(&c, A).last_transition_time, Some(at(100)));
        assert_eq!(get(&c, "Ready").last_transition_time, Some(at(100)));

        // Same status, reason and message: time kept, for A and for Ready.
        SET.manage_with_clock(&mut c, at(200))
            .mark_false(A, "AFailed", "m");
        assert_eq!(get(&c, A).last_transition_time, Some(at(100)));
        assert_eq!(get(&c, "Ready").last_transition_time, Some(at(100)));

        // Marking another condition leaves A's time alone.
        SET.manage_with_clock(&mut c, at(300))
            .mark_unknown(B, "BPending", "");
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
        SET.manage_with_clock(&mut c, at(500))
            .mark_unknown(B, "BStillPending", "");
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
        assert_eq!(
            m.get_condition(INFO)
                .and_then(|c| c.last_transition_time.clone()),
            Some(at(7))
        );
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
        assert_eq!(
            m.clear_condition(A),
            Err(ClearTerminalConditionError(A.to_owned()))
        );
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
        assert_eq!(
            m.top_level_condition().map(|c| c.type_.as_str()),
            Some(CONDITION_SUCCEEDED)
        );
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
        assert_eq!(
            CONDITION_SET.dependents().collect::<Vec<_>>(),
            [RESOURCES_AVAILABLE, CONTAINER_HEALTHY]
        );
        assert_eq!(CONDITION_SET.severity(ACTIVE), ConditionSeverity::Info);
        assert_eq!(exit_code_reason(137), "ExitCode137");
        assert_eq!(
            resource_not_owned_message("Service", "hello-00001"),
            r#"There is an existing Service "hello-00001" that we do not own."#
        );
        assert_eq!(
            container_missing_message("registry.local/hello@sha256:00", "not found"),
            r#"Unable to fetch image "registry.local/hello@sha256:00": not found"#
        );
        assert_eq!(
            container_exiting_message("boom"),
            "Container failed with: boom"
        );
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
        check_living_set(
            revision::CONDITION_SET,
            &[revision::RESOURCES_AVAILABLE, revision::CONTAINER_HEALTHY],
        );
        check_living_set(
            service::CONDITION_SET,
            &[service::CONFIGURATIONS_READY, service::ROUTES_READY],
        );
        check_living_set(configuration::CONDITION_SET, &[]);
        check_living_set(
            route::CONDITION_SET,
            &[
                route::ALL_TRAFFIC_ASSIGNED,
                route::INGRESS_READY,
                route::CERTIFICATE_PROVISIONED,
            ],
        );
        check_living_set(
            domain_mapping::CONDITION_SET,
            &[
                domain_mapping::DOMAIN_CLAIMED,
                domain_mapping::REFERENCE_RESOLVED,
                domain_mapping::INGRESS_READY,
                domain_mapping::CERTIFICATE_PROVISIONED,
            ],
        );
        check_living_set(
            ingress::CONDITION_SET,
            &[ingress::NETWORK_CONFIGURED, ingress::LOAD_BALANCER_READY],
        );
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
        m.propagate(
            service::CONFIGURATIONS_READY,
            &child(ConditionStatus::Unknown, "Deploying"),
        );
        let got = m.get_condition(service::CONFIGURATIONS_READY).expect("set");
        assert!(got.is_unknown() && got.reason == "Deploying" && got.message == "Deploying!");
        m.propagate(
            service::CONFIGURATIONS_READY,
            &child(ConditionStatus::False, "RevisionFailed"),
        );
        assert_eq!(
            m.top_level_condition().map(|c| c.reason.as_str()),
            Some("RevisionFailed")
        );
        m.propagate(
            service::CONFIGURATIONS_READY,
            &child(ConditionStatus::True, "Ignored"),
        );
        assert_eq!(
            m.get_condition(service::CONFIGURATIONS_READY)
                .map(|c| c.reason.as_str()),
            Some("")
        );
        assert!(m.is_happy());
    }

    #[test]
    fn messages_read_like_upstreams() {
        assert_eq!(
            route::revision_failed_message("hello-00001"),
            r#"Revision "hello-00001" failed to become ready."#
        );
        assert_eq!(
            route::missing_target_reason("Configuration"),
            "ConfigurationMissing"
        );
        assert_eq!(
            route::missing_target_message("Configuration", "hello"),
            r#"Configuration "hello" referenced in traffic not found."#
        );
        assert_eq!(
            resource_not_owned_message("placeholder Service", "hello"),
            r#"There is an existing placeholder Service "hello" that we do not own."#
        );
        assert_eq!(
            configuration::latest_created_failed_message("hello-00002", "boom"),
            r#"Revision "hello-00002" failed with message: boom."#
        );
        assert_eq!(
            service::revision_name_taken_message("hello-v1"),
            r#"The revision name "hello-v1" is taken by a conflicting Revision, so traffic will not be migrated"#
        );
    }
}
