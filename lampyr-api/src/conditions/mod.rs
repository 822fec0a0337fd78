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

pub mod certificate;
pub mod configuration;
pub mod domain_mapping;
pub mod ingress;
pub mod revision;
pub mod route;
pub mod service;
#[cfg(test)]
mod tests;

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

/// Gives each of `computed` that is in the same state as its type in `stored` the stored
/// `lastTransitionTime`: a state a computation passed through and left (the happy
/// condition following each dependent marked in turn) is no transition.
pub fn keep_transition_times(stored: &[Condition], computed: &mut [Condition]) {
    for condition in computed {
        if let Some(old) = get_condition(stored, &condition.type_).filter(|old| old.same_state(condition)) {
            condition.last_transition_time.clone_from(&old.last_transition_time);
        }
    }
}

/// The condition of type `type_` in `conditions`, if set.
pub fn get_condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Upstream `IsReady()`: `Ready` is `True` and the status reflects the current
/// generation. A missing `generation` or `observedGeneration` counts as 0, as
/// in Go.
pub fn is_ready(conditions: &[Condition], observed_generation: i64, generation: Option<i64>) -> bool {
    observed_generation == generation.unwrap_or(0) && get_condition(conditions, CONDITION_READY).is_some_and(Condition::is_true)
}

/// Upstream `IsFailed()`: `Ready` is `False` and the status reflects the
/// current generation.
pub fn is_failed(conditions: &[Condition], observed_generation: i64, generation: Option<i64>) -> bool {
    observed_generation == generation.unwrap_or(0) && get_condition(conditions, CONDITION_READY).is_some_and(Condition::is_false)
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

/// Declares a Knative status struct: the `duckv1.Status` fields every Knative status
/// has (`observedGeneration`, `conditions` following condition set `$set`, documented by
/// `$conditions`, and `annotations`) with their serde rules, then the struct's own
/// fields, and its [`KnativeStatus`] implementation. The one home of those fields.
#[macro_export]
macro_rules! knative_status {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            conditions: $set:expr, $conditions:literal;
            $( $(#[$field_meta:meta])* $field_vis:vis $field:ident : $ty:ty ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
        #[serde(rename_all = "camelCase")]
        $vis struct $name {
            /// The `metadata.generation` last processed by its reconciler (0 = none).
            #[serde(default, skip_serializing_if = "crate::duck::is_zero")]
            pub observed_generation: i64,
            #[doc = $conditions]
            #[serde(default, skip_serializing_if = "Vec::is_empty")]
            pub conditions: Vec<$crate::conditions::Condition>,
            /// Extra status state its reconciler conveys (`duckv1.Status.annotations`).
            #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
            pub annotations: std::collections::BTreeMap<String, String>,
            $( $(#[$field_meta])* $field_vis $field: $ty, )*
        }

        $crate::impl_knative_status!($name, $set);
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
        self.dependents.iter().enumerate().filter(|&(i, d)| *d != self.happy && !self.dependents[..i].contains(d)).map(|(_, d)| *d)
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
        if self.is_terminal(type_) { ConditionSeverity::Error } else { ConditionSeverity::Info }
    }

    /// A manager over `conditions` that stamps transitions with the system clock.
    pub fn manage<'a>(&self, conditions: &'a mut Vec<Condition>) -> ConditionManager<'a, SystemClock> {
        self.manage_with_clock(conditions, SystemClock)
    }

    /// A manager over `conditions` that stamps transitions with `clock`.
    pub fn manage_with_clock<'a, C: Clock>(&self, conditions: &'a mut Vec<Condition>, clock: C) -> ConditionManager<'a, C> {
        ConditionManager { set: *self, conditions, clock }
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
        f.debug_struct("ConditionManager").field("set", &self.set).field("conditions", &self.conditions).finish_non_exhaustive()
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

        let any_dependent_false = self.set.dependents().any(|d| self.get_condition(d).is_some_and(Condition::is_false));
        if any_dependent_false {
            if !self.top_level_condition().is_some_and(Condition::is_false) {
                self.mark_false(self.set.happy, reason, message);
            }
            return;
        }
        if self.set.is_dependent(type_) {
            self.set_condition(self.condition(self.set.happy, ConditionStatus::Unknown, reason, message));
        }
    }

    /// Marks `type_` `False`; if it is a dependent, the happy condition becomes
    /// `False` with the same reason and message.
    pub fn mark_false(&mut self, type_: &str, reason: &str, message: &str) {
        self.set_condition(self.condition(type_, ConditionStatus::False, reason, message));
        if self.set.is_dependent(type_) {
            self.set_condition(self.condition(self.set.happy, ConditionStatus::False, reason, message));
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
                self.set_condition(self.condition(self.set.happy, ConditionStatus::Unknown, "", ""));
                ConditionStatus::Unknown
            }
        };
        let status = if happy_status == ConditionStatus::True { ConditionStatus::True } else { ConditionStatus::Unknown };
        let set = self.set;
        for d in set.dependents() {
            if self.get_condition(d).is_none() {
                self.set_condition(self.condition(d, status, "", ""));
            }
        }
    }

    fn condition(&self, type_: &str, status: ConditionStatus, reason: &str, message: &str) -> Condition {
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
        let mut candidates: Vec<&Condition> =
            self.conditions.iter().filter(|c| c.severity.is_error() && c.type_ != self.set.happy).collect();
        candidates.sort_by_key(|c| Reverse(c.last_transition_time.as_ref()));

        let found = candidates.iter().find(|c| c.is_false()).or_else(|| candidates.iter().find(|c| c.is_unknown()));
        if let Some(c) = found {
            return Some((c.status, c.reason.clone(), c.message.clone()));
        }
        let missing = self.set.dependents().any(|d| !candidates.iter().any(|c| c.type_ == d));
        missing.then(|| (ConditionStatus::Unknown, String::new(), String::new()))
    }
}

/// The reason upstream gives when an object it would create or update exists
/// but is owned by another object (any resource's condition).
pub const REASON_NOT_OWNED: &str = "NotOwned";

/// Upstream's "not owned" message, the message of [`REASON_NOT_OWNED`]:
/// `kind` is e.g. `Configuration`, `Service` or `placeholder Service`.
pub fn resource_not_owned_message(kind: &str, name: &str) -> String {
    format!("There is an existing {kind} {} that we do not own.", go_quote(name))
}

/// Go's `%q` for the strings that appear in messages: JSON string quoting
/// matches it for printable text.
fn go_quote(s: &str) -> String {
    serde_json::Value::String(s.to_owned()).to_string()
}
