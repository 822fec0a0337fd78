//! Knative's cluster-wide autoscaler settings, the ConfigMap
//! `knative-serving/config-autoscaler`: its keys, upstream's defaults, and
//! upstream's parsing and validation (knative.dev/serving v0.42
//! `pkg/autoscaler/config`), read from the ConfigMap's `data`.
//!
//! Values parse as upstream's `configmap.Parse` parses them (Go's
//! `strconv.ParseBool`, `ParseInt(v, 10, 32)`, `ParseFloat` and
//! `time.ParseDuration`); keys upstream does not read (`_example`,
//! `tick-interval`, …) are ignored, as upstream ignores them. Unlike upstream,
//! every problem is reported at once, and a number must be finite (upstream
//! lets `NaN` through some checks). `docs/scaling.md` says which settings
//! fibers honour.

use std::collections::BTreeMap;
use std::fmt;
use std::num::IntErrorKind;
use std::time::Duration;

use crate::duration::parse_go_duration;
use crate::policy::{
    ClusterScaling, DEFAULT_CONCURRENCY_TARGET, DEFAULT_INITIAL_SCALE, DEFAULT_PANIC_THRESHOLD_PERCENT, DEFAULT_PANIC_WINDOW_PERCENT,
    DEFAULT_RPS_TARGET, DEFAULT_STABLE_WINDOW, DEFAULT_TARGET_UTILIZATION,
};

/// Namespace of the ConfigMap (upstream's system namespace).
pub const CONFIG_MAP_NAMESPACE: &str = "knative-serving";
/// Name of the ConfigMap.
pub const CONFIG_MAP_NAME: &str = "config-autoscaler";

/// Upstream's smallest target (`autoscaling.TargetMin`).
pub const TARGET_MIN: f64 = 0.01;
/// Upstream's shortest stable window (`autoscaling.WindowMin`).
pub const WINDOW_MIN: Duration = Duration::from_secs(6);
/// Upstream's longest stable window (`autoscaling.WindowMax`).
pub const WINDOW_MAX: Duration = Duration::from_secs(3600);
/// Upstream's `panic-window-percentage` bounds.
pub const PANIC_WINDOW_PERCENTAGE_RANGE: (f64, f64) = (1.0, 100.0);

/// Every key upstream reads.
pub const KEYS: &[&str] = &[
    "pod-autoscaler-class",
    "enable-scale-to-zero",
    "allow-zero-initial-scale",
    "max-scale-up-rate",
    "max-scale-down-rate",
    "container-concurrency-target-percentage",
    "container-concurrency-target-default",
    "requests-per-second-target-default",
    "target-burst-capacity",
    "panic-window-percentage",
    "activator-capacity",
    "panic-threshold-percentage",
    "initial-scale",
    "min-scale",
    "max-scale",
    "max-scale-limit",
    "stable-window",
    "scale-down-delay",
    "scale-to-zero-grace-period",
    "scale-to-zero-pod-retention-period",
];

/// The settings of `config-autoscaler`, validated; [`Default`] is upstream's.
#[derive(Clone, Debug, PartialEq)]
pub struct AutoscalerConfig {
    /// `enable-scale-to-zero` (true).
    pub enable_scale_to_zero: bool,
    /// `container-concurrency-target-percentage` as a percentage (70); upstream
    /// reads a value of at most 1 as a fraction (`0.7` is 70 %).
    pub container_concurrency_target_percentage: f64,
    /// `container-concurrency-target-default` (100): the concurrency target of a
    /// Revision with neither `containerConcurrency` nor a `target` annotation.
    pub container_concurrency_target_default: f64,
    /// `requests-per-second-target-default` (200).
    pub requests_per_second_target_default: f64,
    /// `target-burst-capacity` (211; −1 = unlimited). Validated; fibers do not use it.
    pub target_burst_capacity: f64,
    /// `activator-capacity` (100). Validated; fibers have no activator to size.
    pub activator_capacity: f64,
    /// `allow-zero-initial-scale` (false).
    pub allow_zero_initial_scale: bool,
    /// `initial-scale` (1).
    pub initial_scale: u32,
    /// `min-scale` (0): of Revisions without a `min-scale` annotation.
    pub min_scale: u32,
    /// `max-scale` (0 = unbounded): of Revisions without a `max-scale` annotation.
    pub max_scale: u32,
    /// `max-scale-limit` (0 = none): the largest `max-scale` a Revision may ask for.
    pub max_scale_limit: u32,
    /// `max-scale-up-rate` (1000).
    pub max_scale_up_rate: f64,
    /// `max-scale-down-rate` (2).
    pub max_scale_down_rate: f64,
    /// `stable-window` (60 s).
    pub stable_window: Duration,
    /// `panic-window-percentage` (10).
    pub panic_window_percentage: f64,
    /// `panic-threshold-percentage` (200).
    pub panic_threshold_percentage: f64,
    /// `scale-to-zero-grace-period` (30 s).
    pub scale_to_zero_grace_period: Duration,
    /// `scale-to-zero-pod-retention-period` (0).
    pub scale_to_zero_pod_retention_period: Duration,
    /// `scale-down-delay` (0).
    pub scale_down_delay: Duration,
    /// `pod-autoscaler-class` (`kpa.autoscaling.knative.dev`). Read, not used:
    /// upstream's PodAutoscaler defaults to the KPA whatever it says.
    pub pod_autoscaler_class: String,
}

impl Default for AutoscalerConfig {
    fn default() -> Self {
        AutoscalerConfig {
            enable_scale_to_zero: true,
            container_concurrency_target_percentage: DEFAULT_TARGET_UTILIZATION,
            container_concurrency_target_default: DEFAULT_CONCURRENCY_TARGET,
            requests_per_second_target_default: DEFAULT_RPS_TARGET,
            target_burst_capacity: 211.0,
            activator_capacity: 100.0,
            allow_zero_initial_scale: false,
            initial_scale: DEFAULT_INITIAL_SCALE,
            min_scale: 0,
            max_scale: 0,
            max_scale_limit: 0,
            max_scale_up_rate: 1000.0,
            max_scale_down_rate: 2.0,
            stable_window: DEFAULT_STABLE_WINDOW,
            panic_window_percentage: DEFAULT_PANIC_WINDOW_PERCENT,
            panic_threshold_percentage: DEFAULT_PANIC_THRESHOLD_PERCENT,
            scale_to_zero_grace_period: Duration::from_secs(30),
            scale_to_zero_pod_retention_period: Duration::ZERO,
            scale_down_delay: Duration::ZERO,
            pod_autoscaler_class: crate::keys::CLASS_KPA.to_string(),
        }
    }
}

/// One key of `config-autoscaler` whose value upstream refuses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigProblem {
    /// The key, e.g. `scale-to-zero-grace-period`.
    pub key: &'static str,
    /// Its value as written.
    pub value: String,
    /// What is wrong, naming the accepted range.
    pub reason: String,
}

impl fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {:?} {}", self.key, self.value, self.reason)
    }
}

/// Every problem of an invalid `config-autoscaler`, in key order.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct InvalidConfig {
    /// The problems, at least one.
    pub problems: Vec<ConfigProblem>,
}

impl fmt::Display for InvalidConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{CONFIG_MAP_NAMESPACE}/{CONFIG_MAP_NAME} is invalid: ")?;
        for (i, problem) in self.problems.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            problem.fmt(f)?;
        }
        Ok(())
    }
}

impl AutoscalerConfig {
    /// Reads the ConfigMap's `data` as upstream's `NewConfigFromMap` does:
    /// upstream's default for every key not set, every value parsed and validated.
    pub fn from_data(data: &BTreeMap<String, String>) -> Result<Self, InvalidConfig> {
        let mut reader = Reader { data, problems: Vec::new() };
        let config = reader.read();
        if reader.problems.is_empty() {
            reader.validate(&config);
        }
        if reader.problems.is_empty() { Ok(config) } else { Err(InvalidConfig { problems: reader.problems }) }
    }

    /// The settings with no per-Revision annotation, which a fiber's scaler applies as they are.
    pub fn cluster_scaling(&self) -> ClusterScaling {
        ClusterScaling {
            enable_scale_to_zero: self.enable_scale_to_zero,
            scale_to_zero_grace_period: self.scale_to_zero_grace_period,
            max_scale_up_rate: self.max_scale_up_rate,
            max_scale_down_rate: self.max_scale_down_rate,
        }
    }
}

/// Parses keys one by one, collecting problems.
struct Reader<'a> {
    data: &'a BTreeMap<String, String>,
    problems: Vec<ConfigProblem>,
}

impl Reader<'_> {
    fn read(&mut self) -> AutoscalerConfig {
        let d = AutoscalerConfig::default();
        let percentage = self.float("container-concurrency-target-percentage", d.container_concurrency_target_percentage);
        AutoscalerConfig {
            enable_scale_to_zero: self.boolean("enable-scale-to-zero", d.enable_scale_to_zero),
            // Upstream keeps values in (0, 1] as fractions, for legacy reasons.
            container_concurrency_target_percentage: if percentage > 1.0 { percentage } else { percentage * 100.0 },
            container_concurrency_target_default: self
                .float("container-concurrency-target-default", d.container_concurrency_target_default),
            requests_per_second_target_default: self.float("requests-per-second-target-default", d.requests_per_second_target_default),
            target_burst_capacity: self.float("target-burst-capacity", d.target_burst_capacity),
            activator_capacity: self.float("activator-capacity", d.activator_capacity),
            allow_zero_initial_scale: self.boolean("allow-zero-initial-scale", d.allow_zero_initial_scale),
            initial_scale: self.int("initial-scale", d.initial_scale),
            min_scale: self.int("min-scale", d.min_scale),
            max_scale: self.int("max-scale", d.max_scale),
            max_scale_limit: self.int("max-scale-limit", d.max_scale_limit),
            max_scale_up_rate: self.float("max-scale-up-rate", d.max_scale_up_rate),
            max_scale_down_rate: self.float("max-scale-down-rate", d.max_scale_down_rate),
            stable_window: self.duration("stable-window", d.stable_window),
            panic_window_percentage: self.float("panic-window-percentage", d.panic_window_percentage),
            panic_threshold_percentage: self.float("panic-threshold-percentage", d.panic_threshold_percentage),
            scale_to_zero_grace_period: self.duration("scale-to-zero-grace-period", d.scale_to_zero_grace_period),
            scale_to_zero_pod_retention_period: self.duration("scale-to-zero-pod-retention-period", d.scale_to_zero_pod_retention_period),
            scale_down_delay: self.duration("scale-down-delay", d.scale_down_delay),
            pod_autoscaler_class: self.data.get("pod-autoscaler-class").cloned().unwrap_or(d.pod_autoscaler_class),
        }
    }

    fn problem(&mut self, key: &'static str, reason: impl Into<String>) {
        let value = self.data.get(key).cloned().unwrap_or_default();
        self.problems.push(ConfigProblem { key, value, reason: reason.into() });
    }

    /// Go's `strconv.ParseBool`.
    fn boolean(&mut self, key: &'static str, default: bool) -> bool {
        match self.data.get(key).map(String::as_str) {
            None => default,
            Some("1" | "t" | "T" | "TRUE" | "true" | "True") => true,
            Some("0" | "f" | "F" | "FALSE" | "false" | "False") => false,
            Some(_) => {
                self.problem(key, "is not a boolean: use true or false");
                default
            }
        }
    }

    /// Go's `strconv.ParseInt(v, 10, 32)`; a negative value is refused here
    /// (upstream refuses it in its validation, with the same meaning).
    fn int(&mut self, key: &'static str, default: u32) -> u32 {
        let Some(text) = self.data.get(key) else { return default };
        match text.parse::<i32>() {
            Ok(n) if n >= 0 => n.unsigned_abs(),
            Ok(_) => {
                self.problem(key, "must be at least 0");
                default
            }
            Err(e) if matches!(e.kind(), IntErrorKind::PosOverflow | IntErrorKind::NegOverflow) => {
                self.problem(key, format!("is out of range: must be between 0 and {}", i32::MAX));
                default
            }
            Err(_) => {
                self.problem(key, "is not an integer");
                default
            }
        }
    }

    /// Go's `strconv.ParseFloat(v, 64)`, finite values only.
    fn float(&mut self, key: &'static str, default: f64) -> f64 {
        let Some(text) = self.data.get(key) else { return default };
        match text.parse::<f64>() {
            Ok(v) if v.is_finite() => v,
            Ok(_) => {
                self.problem(key, "is not a finite number");
                default
            }
            Err(_) => {
                self.problem(key, "is not a number");
                default
            }
        }
    }

    /// Go's `time.ParseDuration`; negative durations are refused here (every
    /// duration key of upstream's must be positive or at least 0).
    fn duration(&mut self, key: &'static str, default: Duration) -> Duration {
        let Some(text) = self.data.get(key) else { return default };
        match parse_go_duration(text) {
            Ok(d) => match d.non_negative() {
                Some(d) => d,
                None => {
                    self.problem(key, "must not be negative");
                    default
                }
            },
            Err(e) => {
                self.problem(key, format!("is not a duration ({e})"));
                default
            }
        }
    }

    /// Upstream's `validate`, on values that parsed.
    fn validate(&mut self, c: &AutoscalerConfig) {
        if c.scale_to_zero_grace_period.is_zero() {
            self.problem("scale-to-zero-grace-period", "must be positive (greater than 0s)");
        }
        if c.scale_down_delay.subsec_nanos() != 0 {
            self.problem("scale-down-delay", "must be given in whole seconds");
        }
        if c.target_burst_capacity < 0.0 && c.target_burst_capacity != -1.0 {
            self.problem("target-burst-capacity", "must be -1 (unlimited) or at least 0");
        }
        let percentage = c.container_concurrency_target_percentage;
        if percentage <= 0.0 || percentage > 100.0 {
            self.problem(
                "container-concurrency-target-percentage",
                "is out of range: must be in (0, 100] (a value of at most 1 is read as a fraction)",
            );
        } else if percentage / 100.0 * c.container_concurrency_target_default < TARGET_MIN {
            let target = percentage / 100.0 * c.container_concurrency_target_default;
            self.problem(
                "container-concurrency-target-default",
                format!(
                    "at container-concurrency-target-percentage {percentage} gives a target concurrency of {target}, \
                     less than {TARGET_MIN}"
                ),
            );
        }
        if c.requests_per_second_target_default < TARGET_MIN {
            self.problem("requests-per-second-target-default", format!("must be at least {TARGET_MIN}"));
        }
        if c.activator_capacity < 1.0 {
            self.problem("activator-capacity", "must be at least 1");
        }
        if c.max_scale_up_rate <= 1.0 {
            self.problem("max-scale-up-rate", "must be greater than 1");
        }
        if c.max_scale_down_rate <= 1.0 {
            self.problem("max-scale-down-rate", "must be greater than 1");
        }
        if c.stable_window < WINDOW_MIN || c.stable_window > WINDOW_MAX {
            self.problem("stable-window", "is out of range: must be between 6s and 1h");
        } else if c.stable_window.subsec_nanos() != 0 {
            self.problem("stable-window", "must be given in whole seconds");
        }
        let (low, high) = PANIC_WINDOW_PERCENTAGE_RANGE;
        if c.panic_window_percentage < low || c.panic_window_percentage > high {
            self.problem("panic-window-percentage", format!("is out of range: must be between {low} and {high}"));
        }
        if c.initial_scale == 0 && !c.allow_zero_initial_scale {
            self.problem("initial-scale", "must be at least 1 (0 only with allow-zero-initial-scale: \"true\")");
        }
        self.validate_bounds(c);
    }

    /// `max-scale` within `max-scale-limit`, `min-scale` within `max-scale`.
    fn validate_bounds(&mut self, c: &AutoscalerConfig) {
        if c.max_scale_limit > 0 && (c.max_scale == 0 || c.max_scale > c.max_scale_limit) {
            self.problem(
                "max-scale",
                format!("is out of range: must be between 1 and max-scale-limit ({}) while max-scale-limit is set", c.max_scale_limit),
            );
        }
        if c.max_scale > 0 && c.min_scale > c.max_scale {
            self.problem("min-scale", format!("must not be greater than max-scale ({})", c.max_scale));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ConfigMap data as written in a table.
    type Pairs<'a> = &'a [(&'a str, &'a str)];

    fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_string(), (*v).to_string())).collect()
    }

    fn ok(pairs: &[(&str, &str)]) -> AutoscalerConfig {
        AutoscalerConfig::from_data(&data(pairs)).unwrap_or_else(|e| panic!("{pairs:?}: {e}"))
    }

    /// Upstream's `TestNewConfig` cases that parse, with their expected values.
    #[test]
    fn upstreams_valid_cases() {
        type Set = fn(&mut AutoscalerConfig);
        let table: &[(&str, Pairs, Set)] = &[
            ("default", &[], |_| {}),
            ("the example block and unknown keys are ignored", &[("_example", "# anything"), ("tick-interval", "2s")], |_| {}),
            (
                "overridden",
                &[
                    ("enable-scale-to-zero", "true"),
                    ("max-scale-down-rate", "3.0"),
                    ("max-scale-up-rate", "1.01"),
                    ("container-concurrency-target-percentage", "0.71"),
                    ("container-concurrency-target-default", "10.5"),
                    ("requests-per-second-target-default", "10.11"),
                    ("target-burst-capacity", "12345"),
                    ("scale-down-delay", "15m"),
                    ("stable-window", "5m"),
                    ("tick-interval", "2s"),
                    ("panic-window-percentage", "10"),
                    ("panic-threshold-percentage", "200"),
                    ("pod-autoscaler-class", "some.class"),
                    ("activator-capacity", "905"),
                    ("scale-to-zero-pod-retention-period", "2m3s"),
                ],
                |c| {
                    c.target_burst_capacity = 12345.0;
                    c.container_concurrency_target_default = 10.5;
                    c.container_concurrency_target_percentage = 71.0;
                    c.requests_per_second_target_default = 10.11;
                    c.max_scale_down_rate = 3.0;
                    c.max_scale_up_rate = 1.01;
                    c.scale_down_delay = Duration::from_secs(900);
                    c.stable_window = Duration::from_secs(300);
                    c.activator_capacity = 905.0;
                    c.pod_autoscaler_class = "some.class".into();
                    c.scale_to_zero_pod_retention_period = Duration::from_secs(123);
                },
            ),
            (
                "minimum",
                &[
                    ("max-scale-up-rate", "1.001"),
                    ("container-concurrency-target-percentage", "0.5"),
                    ("container-concurrency-target-default", "10.0"),
                    ("target-burst-capacity", "0"),
                    ("stable-window", "5m"),
                    ("panic-window-percentage", "10"),
                    ("panic-threshold-percentage", "200"),
                    ("activator-capacity", "1"),
                ],
                |c| {
                    c.container_concurrency_target_percentage = 50.0;
                    c.container_concurrency_target_default = 10.0;
                    c.max_scale_up_rate = 1.001;
                    c.target_burst_capacity = 0.0;
                    c.stable_window = Duration::from_secs(300);
                    c.activator_capacity = 1.0;
                },
            ),
            ("percentage as percent", &[("container-concurrency-target-percentage", "55")], |c| {
                c.container_concurrency_target_percentage = 55.0
            }),
            ("1 is a fraction: 100 %", &[("container-concurrency-target-percentage", "1")], |c| {
                c.container_concurrency_target_percentage = 100.0
            }),
            ("-1 burst capacity", &[("target-burst-capacity", "-1")], |c| c.target_burst_capacity = -1.0),
            ("strange casing", &[("enable-scale-to-zero", "TRUE")], |_| {}),
            ("toggles flipped", &[("enable-scale-to-zero", "false"), ("min-scale", "1"), ("max-scale", "2")], |c| {
                c.enable_scale_to_zero = false;
                c.min_scale = 1;
                c.max_scale = 2;
            }),
            (
                "explicit grace period",
                &[("enable-scale-to-zero", "0"), ("scale-to-zero-grace-period", "33s"), ("min-scale", "1"), ("max-scale", "2")],
                |c| {
                    c.enable_scale_to_zero = false;
                    c.scale_to_zero_grace_period = Duration::from_secs(33);
                    c.min_scale = 1;
                    c.max_scale = 2;
                },
            ),
            ("sub-second grace period", &[("scale-to-zero-grace-period", "1500ms")], |c| {
                c.scale_to_zero_grace_period = Duration::from_millis(1500)
            }),
            ("zero initial scale allowed", &[("allow-zero-initial-scale", "true"), ("initial-scale", "0")], |c| {
                c.allow_zero_initial_scale = true;
                c.initial_scale = 0;
            }),
            ("max scale", &[("max-scale", "10")], |c| c.max_scale = 10),
            ("min scale without max", &[("min-scale", "4")], |c| c.min_scale = 4),
            ("max scale within its limit", &[("max-scale", "10"), ("max-scale-limit", "11")], |c| {
                c.max_scale = 10;
                c.max_scale_limit = 11;
            }),
            ("panic threshold is not bounded upstream", &[("panic-threshold-percentage", "50")], |c| c.panic_threshold_percentage = 50.0),
            ("long scale-down delay", &[("scale-down-delay", "2h")], |c| c.scale_down_delay = Duration::from_secs(7200)),
        ];
        for (name, pairs, set) in table {
            let mut want = AutoscalerConfig::default();
            set(&mut want);
            assert_eq!(ok(pairs), want, "{name}");
        }
    }

    /// Upstream's failing cases (and the parse errors), each naming its key and range.
    #[test]
    fn upstreams_invalid_cases_name_the_key_and_the_range() {
        let table: &[(Pairs, &str, &str)] = &[
            (&[("max-scale-up-rate", "not a float")], "max-scale-up-rate", "is not a number"),
            (&[("max-scale-up-rate", "NaN")], "max-scale-up-rate", "finite"),
            (&[("scale-down-delay", "-1m23s")], "scale-down-delay", "must not be negative"),
            (&[("scale-to-zero-pod-retention-period", "-4m11s")], "scale-to-zero-pod-retention-period", "negative"),
            (&[("stable-window", "not a duration")], "stable-window", "is not a duration"),
            (&[("target-burst-capacity", "-11")], "target-burst-capacity", "-1 (unlimited) or at least 0"),
            (&[("container-concurrency-target-percentage", "-42")], "container-concurrency-target-percentage", "(0, 100]"),
            (&[("container-concurrency-target-percentage", "142.4")], "container-concurrency-target-percentage", "(0, 100]"),
            (&[("requests-per-second-target-default", "-5.25")], "requests-per-second-target-default", "at least 0.01"),
            (&[("max-scale-up-rate", "1")], "max-scale-up-rate", "greater than 1"),
            (&[("max-scale-down-rate", "-55")], "max-scale-down-rate", "greater than 1"),
            (&[("max-scale-down-rate", "1")], "max-scale-down-rate", "greater than 1"),
            (&[("stable-window", "1h1s")], "stable-window", "between 6s and 1h"),
            (&[("stable-window", "1s")], "stable-window", "between 6s and 1h"),
            (&[("stable-window", "61984ms")], "stable-window", "whole seconds"),
            (&[("scale-down-delay", "61984ms")], "scale-down-delay", "whole seconds"),
            (&[("activator-capacity", "0.95")], "activator-capacity", "at least 1"),
            (&[("panic-window-percentage", "0.1")], "panic-window-percentage", "between 1 and 100"),
            (&[("stable-window", "12s"), ("panic-window-percentage", "110")], "panic-window-percentage", "between 1 and 100"),
            (
                &[("container-concurrency-target-percentage", "1"), ("container-concurrency-target-default", "0.001")],
                "container-concurrency-target-default",
                "less than 0.01",
            ),
            (&[("stable-window", "12s"), ("scale-to-zero-grace-period", "0s")], "scale-to-zero-grace-period", "positive"),
            (&[("scale-to-zero-grace-period", "-5s")], "scale-to-zero-grace-period", "negative"),
            (&[("allow-zero-initial-scale", "false"), ("initial-scale", "0")], "initial-scale", "allow-zero-initial-scale"),
            (&[("allow-zero-initial-scale", "false"), ("initial-scale", "-1")], "initial-scale", "at least 0"),
            (&[("initial-scale", "invalid")], "initial-scale", "is not an integer"),
            (&[("initial-scale", "1.5")], "initial-scale", "is not an integer"),
            (&[("min-scale", "4294967296")], "min-scale", "out of range"),
            (&[("allow-zero-initial-scale", "invalid")], "allow-zero-initial-scale", "is not a boolean"),
            (&[("enable-scale-to-zero", "yes")], "enable-scale-to-zero", "is not a boolean"),
            (&[("max-scale", "-1")], "max-scale", "at least 0"),
            (&[("max-scale", "10"), ("max-scale-limit", "9")], "max-scale", "max-scale-limit (9)"),
            (&[("max-scale-limit", "-9")], "max-scale-limit", "at least 0"),
            (&[("max-scale", "0"), ("max-scale-limit", "11")], "max-scale", "between 1 and max-scale-limit (11)"),
            (&[("min-scale", "4"), ("max-scale", "3")], "min-scale", "max-scale (3)"),
        ];
        for (pairs, key, reason) in table {
            let err = AutoscalerConfig::from_data(&data(pairs)).expect_err(&format!("{pairs:?} is invalid"));
            assert_eq!(err.problems.len(), 1, "{pairs:?}: {err}");
            let problem = &err.problems[0];
            assert_eq!(problem.key, *key, "{pairs:?}: {err}");
            assert!(problem.reason.contains(reason), "{pairs:?}: {:?} should mention {reason:?}", problem.reason);
            let value = data(pairs).get(*key).cloned().unwrap_or_default();
            assert_eq!(problem.value, value, "the value as written");
            assert!(err.to_string().starts_with("knative-serving/config-autoscaler is invalid: "), "{err}");
            assert!(err.to_string().contains(&format!("{key}: {value:?}")), "{err}");
        }
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let err = AutoscalerConfig::from_data(&data(&[("max-scale-up-rate", "fast"), ("stable-window", "forever")])).expect_err("invalid");
        let keys: Vec<&str> = err.problems.iter().map(|p| p.key).collect();
        assert_eq!(keys, ["max-scale-up-rate", "stable-window"]);
        let err = AutoscalerConfig::from_data(&data(&[("max-scale-up-rate", "1"), ("max-scale-down-rate", "0.5")])).expect_err("invalid");
        assert_eq!(err.problems.len(), 2, "{err}");
    }

    #[test]
    fn cluster_scaling_carries_the_settings_without_annotations() {
        let c = ok(&[
            ("enable-scale-to-zero", "false"),
            ("scale-to-zero-grace-period", "5s"),
            ("max-scale-up-rate", "3"),
            ("max-scale-down-rate", "4"),
        ]);
        assert_eq!(
            c.cluster_scaling(),
            ClusterScaling {
                enable_scale_to_zero: false,
                scale_to_zero_grace_period: Duration::from_secs(5),
                max_scale_up_rate: 3.0,
                max_scale_down_rate: 4.0,
            }
        );
    }
}
