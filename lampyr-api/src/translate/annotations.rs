//! Knative's autoscaling annotations of a Revision template, over the cluster's
//! `config-autoscaler`: the fiber scaling policy.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::duration::parse_go_duration;
use crate::k8s::ObjectMeta;
use crate::keys;

use crate::autoscaler::{AutoscalerConfig, PANIC_WINDOW_PERCENTAGE_RANGE, TARGET_MIN, WINDOW_MAX, WINDOW_MIN};

use crate::policy::{ScaleMetric, ScalingPolicy};

use super::{Checker, RPS_TARGET_UTILIZATION, Rules};

impl Checker<'_> {
    pub(super) fn scaling(&mut self, metadata: &ObjectMeta, container_concurrency: u32, prefix: &str) -> ScalingPolicy {
        let empty = BTreeMap::new();
        let annotations = metadata.annotations.as_ref().unwrap_or(&empty);
        let mut a = Annotations { map: annotations, base: format!("{prefix}metadata.annotations"), cx: self };
        a.unknown_keys();

        let class = a.get(keys::CLASS);
        let kpa = match &class {
            None => true,
            Some((_, c)) if *c == keys::CLASS_KPA => true,
            Some((path, c)) if *c == keys::CLASS_HPA => {
                a.cx.unsupported(
                    path.clone(),
                    format!(
                        "{c} scales Kubernetes pods on CPU or memory; fibers are scaled by Lampyr's \
                         autoscaler ({})",
                        keys::CLASS_KPA
                    ),
                );
                false
            }
            Some((path, c)) if c.ends_with("autoscaling.knative.dev") => {
                a.cx.invalid(path.clone(), format!("unknown autoscaler class {c:?}"));
                false
            }
            Some((path, c)) => {
                a.cx.unsupported(path.clone(), format!("autoscaler class {c:?} cannot scale fibers; only {} can", keys::CLASS_KPA));
                false
            }
        };

        let metric = match a.get(keys::METRIC) {
            Some((_, "concurrency")) | None => ScaleMetric::Concurrency,
            Some((_, "rps")) => ScaleMetric::Rps,
            Some((path, m)) => {
                if kpa {
                    a.cx.invalid(path, format!("{m:?} is not a metric: use concurrency or rps"));
                }
                ScaleMetric::Concurrency
            }
        };

        let config = a.cx.config;
        let rules = a.cx.rules;
        let min_annotation = a.int_ge0(keys::MIN_SCALE);
        let max_annotation = a.int_ge0(keys::MAX_SCALE);
        // Upstream checks the annotations among themselves and against max-scale-limit.
        let (min, max) = (min_annotation.unwrap_or(0), max_annotation.unwrap_or(0));
        if max != 0
            && max < min
            && let Some((path, _)) = a.get(keys::MAX_SCALE)
        {
            a.cx.invalid(path, format!("max-scale={max} is less than min-scale={min}"));
        }
        let limit = config.max_scale_limit;
        if rules == Rules::Admission
            && limit > 0
            && let (Some(annotated), Some((path, _))) = (max_annotation, a.get(keys::MAX_SCALE))
        {
            if annotated == 0 {
                a.cx.invalid(path, format!("max-scale=0 (unbounded) is not allowed: config-autoscaler's max-scale-limit is {limit}"));
            } else if annotated > limit {
                a.cx.invalid(
                    path,
                    format!(
                        "{annotated} is out of bounds: must be between 1 and {limit} \
                         (config-autoscaler's max-scale-limit)"
                    ),
                );
            }
        }
        let (min_scale, max_scale) = scale_bounds(min_annotation, max_annotation, config);

        let initial_scale = match a.get(keys::INITIAL_SCALE) {
            None => config.initial_scale,
            Some((path, v)) => match v.parse::<i64>() {
                Ok(0) if config.allow_zero_initial_scale => 0,
                Ok(0) => {
                    if rules == Rules::Admission {
                        a.cx.invalid(path, "0 is not allowed: config-autoscaler's allow-zero-initial-scale is false");
                    }
                    config.initial_scale
                }
                Ok(n) if n > 0 && n <= i64::from(u32::MAX) => n as u32,
                Ok(n) if n < 0 => {
                    a.cx.invalid(path, format!("{n} must be greater than 0"));
                    config.initial_scale
                }
                _ => {
                    a.cx.invalid(path, format!("{v:?} is not an integer"));
                    config.initial_scale
                }
            },
        };

        let activation_scale = match a.get(keys::ACTIVATION_SCALE) {
            None => 1,
            Some((path, v)) => match v.parse::<i32>() {
                Err(_) => {
                    a.cx.invalid(path, format!("{v:?} is not an integer"));
                    1
                }
                Ok(n) if i64::from(min) > i64::from(n) => {
                    a.cx.invalid(path, format!("min-scale={min} is greater than activation-scale={n}"));
                    1
                }
                Ok(n) if max != 0 && i64::from(max) < i64::from(n) => {
                    a.cx.invalid(path, format!("max-scale={max} is less than activation-scale={n}"));
                    1
                }
                Ok(n) if n < 2 => {
                    a.cx.invalid(path, format!("activation-scale={n} must be greater than 1 (1 is the default)"));
                    1
                }
                Ok(n) => n as u32,
            },
        };

        let target_annotation =
            a.float(keys::TARGET, |v| (v >= TARGET_MIN).then_some(()).ok_or(format!("target {v} should be at least {TARGET_MIN}")));
        let utilization_annotation = a.float(keys::TARGET_UTILIZATION_PERCENTAGE, |v| in_range(v, 1.0, 100.0));
        // Validated like upstream; a fiber pool has no activator buffer to size.
        let _ = a.float(keys::TARGET_BURST_CAPACITY, |v| {
            (v >= 0.0 || v == -1.0).then_some(()).ok_or("must be -1 (unlimited) or at least 0".to_owned())
        });
        let (panic_low, panic_high) = PANIC_WINDOW_PERCENTAGE_RANGE;
        let panic_window_percent =
            a.float(keys::PANIC_WINDOW_PERCENTAGE, |v| in_range(v, panic_low, panic_high)).unwrap_or(config.panic_window_percentage);
        let panic_threshold_percent =
            a.float(keys::PANIC_THRESHOLD_PERCENTAGE, |v| in_range(v, 110.0, 1000.0)).unwrap_or(config.panic_threshold_percentage);

        let stable_window = a.duration(keys::WINDOW, WINDOW_MIN, true).unwrap_or(config.stable_window);
        let scale_down_delay = a.duration(keys::SCALE_DOWN_DELAY, Duration::ZERO, true).unwrap_or(config.scale_down_delay);
        let scale_to_zero_retention = a
            .duration(keys::SCALE_TO_ZERO_POD_RETENTION_PERIOD, Duration::ZERO, false)
            .unwrap_or(config.scale_to_zero_pod_retention_period);

        // Upstream's ResolveMetricTarget, before target utilization applies.
        let cc = f64::from(container_concurrency);
        let (target, utilization) = match metric {
            ScaleMetric::Rps => (target_annotation.unwrap_or(config.requests_per_second_target_default), RPS_TARGET_UTILIZATION),
            ScaleMetric::Concurrency => (
                match (target_annotation, cc > 0.0) {
                    (Some(t), true) => t.min(cc),
                    (Some(t), false) => t,
                    (None, true) => cc,
                    (None, false) => config.container_concurrency_target_default,
                },
                config.container_concurrency_target_percentage,
            ),
        };

        ScalingPolicy {
            min_scale,
            max_scale,
            initial_scale,
            activation_scale,
            metric,
            target,
            target_utilization_percent: utilization_annotation.unwrap_or(utilization),
            stable_window,
            panic_window_percent,
            panic_threshold_percent,
            scale_down_delay,
            scale_to_zero_retention,
            cluster: None,
        }
    }
}

/// Upstream's `ScaleBounds`: each bound from its annotation, else from the
/// cluster's default. Where a cluster default and an annotation conflict
/// (`min-scale` above `max-scale`), the Revision's annotation wins: the other
/// bound follows it, so the pair stays ordered.
fn scale_bounds(min: Option<u32>, max: Option<u32>, config: &AutoscalerConfig) -> (u32, u32) {
    let (low, high) = (min.unwrap_or(config.min_scale), max.unwrap_or(config.max_scale));
    if high == 0 || low <= high {
        return (low, high);
    }
    match (min, max) {
        // The cluster's min-scale is above the Revision's max-scale.
        (None, _) => (high, high),
        // The Revision's min-scale is above the cluster's max-scale.
        (_, None) => (low, low),
        // Both annotations: reported invalid already.
        _ => (low, high),
    }
}

fn in_range(v: f64, min: f64, max: f64) -> Result<(), String> {
    if (min..=max).contains(&v) { Ok(()) } else { Err(format!("{v} is out of bounds: must be between {min} and {max}")) }
}

/// The template's annotations, read with Knative's key aliases.
struct Annotations<'a, 'c> {
    map: &'a BTreeMap<String, String>,
    base: String,
    cx: &'a mut Checker<'c>,
}

/// Every autoscaling key Lampyr reads, canonical first.
const AUTOSCALING_KEYS: &[&str] = &[
    keys::CLASS,
    keys::METRIC,
    keys::MIN_SCALE,
    keys::MAX_SCALE,
    keys::INITIAL_SCALE,
    keys::ACTIVATION_SCALE,
    keys::TARGET,
    keys::TARGET_UTILIZATION_PERCENTAGE,
    keys::TARGET_BURST_CAPACITY,
    keys::WINDOW,
    keys::SCALE_DOWN_DELAY,
    keys::SCALE_TO_ZERO_POD_RETENTION_PERIOD,
    keys::PANIC_WINDOW_PERCENTAGE,
    keys::PANIC_THRESHOLD_PERCENTAGE,
];

impl Annotations<'_, '_> {
    fn path(&self, key: &str) -> String {
        format!("{}[{key:?}]", self.base)
    }

    /// Reports autoscaling keys Lampyr does not know, and keys set under
    /// both their canonical name and their alias.
    fn unknown_keys(&mut self) {
        for key in self.map.keys() {
            if !key.starts_with(keys::AUTOSCALING_PREFIX) {
                continue;
            }
            let known = AUTOSCALING_KEYS.contains(&key.as_str()) || keys::AUTOSCALING_ALIASES.iter().any(|(_, a)| a == key);
            if !known {
                let path = self.path(key);
                self.cx.unsupported(path, "not an autoscaling setting fibers support");
            }
        }
        for (canonical, alias) in keys::AUTOSCALING_ALIASES {
            if self.map.contains_key(*canonical) && self.map.contains_key(*alias) {
                let path = self.path(alias);
                self.cx.invalid(path, format!("set together with {canonical}; keep only one"));
            }
        }
    }

    /// `(path, value)` of a key, read from its canonical name or its alias.
    fn get(&self, canonical: &str) -> Option<(String, &str)> {
        std::iter::once(canonical)
            .chain(keys::autoscaling_alias(canonical))
            .find_map(|k| self.map.get(k).map(|v| (self.path(k), v.as_str())))
    }

    /// An integer ≥ 0 (Go `ParseInt(v, 10, 32)`).
    fn int_ge0(&mut self, key: &str) -> Option<u32> {
        let (path, v) = self.get(key)?;
        match v.parse::<i32>() {
            Ok(n) if n >= 0 => Some(n as u32),
            Ok(_) => {
                self.cx.invalid(path, format!("{v} is out of bounds: must be between 0 and {}", i32::MAX));
                None
            }
            Err(_) => {
                let digits = v.strip_prefix(['+', '-']).unwrap_or(v);
                if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
                    self.cx.invalid(path, format!("{v} is out of bounds: must be between 0 and {}", i32::MAX));
                } else {
                    self.cx.invalid(path, format!("{v:?} is not an integer"));
                }
                None
            }
        }
    }

    /// A finite float passing `check`.
    fn float(&mut self, key: &str, check: impl Fn(f64) -> Result<(), String>) -> Option<f64> {
        let (path, v) = self.get(key)?;
        match v.trim().parse::<f64>() {
            Ok(f) if f.is_finite() && v.trim() == v => match check(f) {
                Ok(()) => Some(f),
                Err(reason) => {
                    self.cx.invalid(path, reason);
                    None
                }
            },
            _ => {
                self.cx.invalid(path, format!("{v:?} is not a number"));
                None
            }
        }
    }

    /// A Go duration in `min..=1h`, optionally in whole seconds.
    fn duration(&mut self, key: &str, min: Duration, whole_seconds: bool) -> Option<Duration> {
        let (path, v) = self.get(key)?;
        let parsed = match parse_go_duration(v) {
            Ok(d) => d,
            Err(e) => {
                self.cx.invalid(path, e.to_string());
                return None;
            }
        };
        let bounds = || format!("{v} is out of bounds: must be between {}s and {}s", min.as_secs(), WINDOW_MAX.as_secs());
        let Some(d) = parsed.non_negative() else {
            self.cx.invalid(path, bounds());
            return None;
        };
        if d < min || d > WINDOW_MAX {
            self.cx.invalid(path, bounds());
            return None;
        }
        if whole_seconds && d.subsec_nanos() != 0 {
            self.cx.invalid(path, format!("{v} must be given in whole seconds"));
            return None;
        }
        Some(d)
    }
}
