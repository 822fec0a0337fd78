//! The fiber policy of one Revision: what Lampyr does with the Knative
//! scaling, timeout, resource and environment fields of its template.
//!
//! A Knative replica is one fiber. A fiber serves one request at a time, so a
//! Revision's in-flight limit is its fiber count; `containerConcurrency` only
//! ever lowers the per-fiber limit, and a fiber's limit is already 1.
//! See `docs/scaling.md`.
//!
//! The policy is also a wire type: the Fiber Revision reconciler publishes it
//! in each `Home`'s spec, where fiberd and fiber-router read it. On the wire,
//! durations are Go duration strings (`60s`, `1m30s`) and the environment is a
//! list of `{name, value}`. The defaults below are upstream's `config-autoscaler`
//! defaults; [`crate::autoscaler`] reads a cluster's own.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// config-autoscaler `container-concurrency-target-default`.
pub const DEFAULT_CONCURRENCY_TARGET: f64 = 100.0;
/// config-autoscaler `requests-per-second-target-default`.
pub const DEFAULT_RPS_TARGET: f64 = 200.0;
/// config-autoscaler `container-concurrency-target-percentage`.
pub const DEFAULT_TARGET_UTILIZATION: f64 = 70.0;
/// config-autoscaler `stable-window`.
pub const DEFAULT_STABLE_WINDOW: Duration = Duration::from_secs(60);
/// config-autoscaler `panic-window-percentage`.
pub const DEFAULT_PANIC_WINDOW_PERCENT: f64 = 10.0;
/// config-autoscaler `panic-threshold-percentage`.
pub const DEFAULT_PANIC_THRESHOLD_PERCENT: f64 = 200.0;
/// config-autoscaler `initial-scale`.
pub const DEFAULT_INITIAL_SCALE: u32 = 1;
/// Knative's `revision-timeout-seconds` default, as a duration.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// The autoscaling metric (`autoscaling.knative.dev/metric`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ScaleMetric {
    /// In-flight requests per replica (Knative's default).
    Concurrency,
    /// Requests per second per replica.
    Rps,
}

/// Scaling bounds and targets, with Knative's defaults applied.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScalingPolicy {
    /// `min-scale`: fibers kept warm even without traffic (default 0).
    pub min_scale: u32,
    /// `max-scale`: most fibers (0 = unbounded, capped by the runtime's limit).
    pub max_scale: u32,
    /// `initial-scale`: fibers started when the Revision loads (default 1).
    pub initial_scale: u32,
    /// `activation-scale`: fibers started when waking from zero (default 1).
    pub activation_scale: u32,
    /// `metric`.
    pub metric: ScaleMetric,
    /// `target`: desired metric value per replica (concurrency default 100, rps default 200).
    pub target: f64,
    /// `target-utilization-percentage` (default 70).
    pub target_utilization_percent: f64,
    /// `window`: the stable window (default 60 s, 6 s – 1 h).
    #[serde(with = "go_duration")]
    #[schemars(with = "String")]
    pub stable_window: Duration,
    /// `panic-window-percentage` of the stable window (default 10).
    pub panic_window_percent: f64,
    /// `panic-threshold-percentage` (default 200).
    pub panic_threshold_percent: f64,
    /// `scale-down-delay` (default 0, at most 1 h).
    #[serde(with = "go_duration")]
    #[schemars(with = "String")]
    pub scale_down_delay: Duration,
    /// `scale-to-zero-pod-retention-period` (default 0).
    #[serde(with = "go_duration")]
    #[schemars(with = "String")]
    pub scale_to_zero_retention: Duration,
    /// The cluster's settings that no Revision overrides (`config-autoscaler`),
    /// as lampyr-controller read them; absent from a Home written by an older
    /// controller, when fiberd uses its own flags instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterScaling>,
}

/// The `config-autoscaler` settings a Revision cannot override, which its scaler applies.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterScaling {
    /// `enable-scale-to-zero`: whether a Revision with `min-scale` 0 may drop its last fiber.
    pub enable_scale_to_zero: bool,
    /// `scale-to-zero-grace-period`: idle time before the last fiber may stop.
    #[serde(with = "go_duration")]
    #[schemars(with = "String")]
    pub scale_to_zero_grace_period: Duration,
    /// `max-scale-up-rate`: at most this many times the fibers alive per decision.
    pub max_scale_up_rate: f64,
    /// `max-scale-down-rate`: at least the fibers alive divided by this per decision.
    pub max_scale_down_rate: f64,
}

/// Request timeouts (`spec.template.spec.*Seconds`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TimeoutPolicy {
    /// `timeoutSeconds` (default 300, at most 600).
    #[serde(with = "go_duration")]
    #[schemars(with = "String")]
    pub request: Duration,
    /// `responseStartTimeoutSeconds`; defaults to `request`.
    #[serde(with = "go_duration")]
    #[schemars(with = "String")]
    pub response_start: Duration,
    /// `idleTimeoutSeconds` (0 = none).
    #[serde(default, with = "optional_go_duration", skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub idle: Option<Duration>,
}

/// Everything Lampyr needs to run one Revision's fibers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FiberPolicy {
    /// `containerConcurrency` (0 = unlimited, at most 1000).
    pub container_concurrency: u32,
    /// Scaling.
    pub scaling: ScalingPolicy,
    /// Timeouts.
    pub timeouts: TimeoutPolicy,
    /// Memory requested or limited for the container, in bytes, if any; must fit the artifact's heap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
    /// The container's environment (`env` with literal values), in order.
    #[serde(default, with = "env_list", skip_serializing_if = "Vec::is_empty")]
    #[schemars(with = "Vec<EnvEntry>")]
    pub env: Vec<(String, String)>,
    /// Environment taken from ConfigMaps and Secrets of the Revision's namespace (`envFrom`,
    /// `env[].valueFrom`): references only, resolved by fiberd when it loads the Revision
    /// ([`FiberPolicy::resolve_env`]), so no value is ever written into a Home.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env_refs: Vec<EnvRef>,
    /// The guest's arguments: the container's `command`, then its `args` (a fiber has no
    /// image entrypoint to put before `args` alone).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// The first container port is named `h2c`: serve the Revision over HTTP/2 cleartext.
    #[serde(default)]
    pub http2: bool,
    /// The first container port's number, if declared (informational for fibers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// The container's `readinessProbe`, when it has an `httpGet` handler: the request a
    /// new template must answer with a 2xx or 3xx before its Revision serves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readiness: Option<ReadinessCheck>,
}

/// An `httpGet` readiness probe, as a fiber runs it: one request to a fresh fiber.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReadinessCheck {
    /// The path (and query) requested; `/` when the probe gives none.
    pub path: String,
    /// `httpHeaders`, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<EnvEntry>,
    /// `timeoutSeconds` (default 1): how long one attempt may take.
    #[serde(with = "go_duration")]
    #[schemars(with = "String")]
    pub timeout: Duration,
    /// `failureThreshold` (default 3): attempts that may time out before the probe fails.
    pub failure_threshold: u32,
}

/// One environment variable on the wire.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct EnvEntry {
    /// The variable's name.
    pub name: String,
    /// Its literal value.
    pub value: String,
}

/// A ConfigMap or Secret in the Revision's namespace that environment values come from.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EnvSource {
    /// `ConfigMap` or `Secret`.
    pub kind: EnvSourceKind,
    /// The object's name.
    pub name: String,
    /// A missing object (or key) is skipped instead of failing the load.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub optional: bool,
}

/// What kind of object an [`EnvSource`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
pub enum EnvSourceKind {
    /// A ConfigMap (`data`, then `binaryData` as UTF-8).
    ConfigMap,
    /// A Secret (`data`, decoded, as UTF-8).
    Secret,
}

/// One environment reference: a whole source (`envFrom`) or one key of it (`env[].valueFrom`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EnvRef {
    /// The object read.
    pub source: EnvSource,
    /// `env[].valueFrom`: the key read; absent for `envFrom` (every key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// `env[].valueFrom`: the variable set; absent for `envFrom`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variable: Option<String>,
    /// `env[].valueFrom`: the entry's index in the container's `env` (the literal entries
    /// keep their order around it).
    #[serde(default)]
    pub index: u32,
    /// `envFrom[].prefix`: put before each key.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub prefix: String,
}

/// An environment reference that cannot be resolved.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EnvRefError<E> {
    /// The object does not exist and the reference is not optional.
    #[error("{kind:?} {name:?} does not exist (referenced by the container's env; mark it optional to start without it)")]
    Missing {
        /// ConfigMap or Secret.
        kind: EnvSourceKind,
        /// Its name.
        name: String,
    },
    /// The object exists but lacks the key, and the reference is not optional.
    #[error("{kind:?} {name:?} has no key {key:?} (env {variable})")]
    MissingKey {
        /// ConfigMap or Secret.
        kind: EnvSourceKind,
        /// Its name.
        name: String,
        /// The key.
        key: String,
        /// The variable that wanted it.
        variable: String,
    },
    /// Reading the object failed.
    #[error("reading {kind:?} {name:?}: {error}")]
    Read {
        /// ConfigMap or Secret.
        kind: EnvSourceKind,
        /// Its name.
        name: String,
        /// What went wrong.
        error: E,
    },
}

/// Whether `name` may be an environment variable name (Kubernetes' rule for `envFrom` keys).
fn is_env_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || "-._".contains(c))
}

/// The port a container listens on when it declares none (Knative's runtime contract).
pub const DEFAULT_PORT: u16 = 8080;

impl FiberPolicy {
    /// The environment with [`FiberPolicy::env_refs`] resolved, as a kubelet resolves a
    /// container's: every `envFrom` source in order (keys that are not variable names are
    /// skipped), then `env` in order, literal and referenced entries interleaved as declared;
    /// later duplicates win at lookup. `read` returns an object's data, `None` when it does not
    /// exist (an optional reference to it is then skipped). Pure; fiberd supplies `read`.
    pub fn resolve_env<E>(
        &self,
        mut read: impl FnMut(&EnvSource) -> Result<Option<std::collections::BTreeMap<String, String>>, E>,
    ) -> Result<Vec<(String, String)>, EnvRefError<E>> {
        let mut fetch =
            |source: &EnvSource| read(source).map_err(|error| EnvRefError::Read { kind: source.kind, name: source.name.clone(), error });
        let mut out = Vec::new();
        for r in self.env_refs.iter().filter(|r| r.key.is_none()) {
            match fetch(&r.source)? {
                Some(data) => out.extend(
                    data.into_iter()
                        .filter(|(k, _)| is_env_name(&format!("{}{k}", r.prefix)))
                        .map(|(k, v)| (format!("{}{k}", r.prefix), v)),
                ),
                None if r.source.optional => {}
                None => return Err(EnvRefError::Missing { kind: r.source.kind, name: r.source.name.clone() }),
            }
        }
        let mut keyed: Vec<&EnvRef> = self.env_refs.iter().filter(|r| r.key.is_some()).collect();
        keyed.sort_by_key(|r| r.index);
        let mut keyed = keyed.into_iter().peekable();
        let mut literals = self.env.iter().peekable();
        let mut index = 0u32;
        loop {
            let next_keyed = keyed.peek().is_some_and(|r| r.index <= index);
            if next_keyed || (literals.peek().is_none() && keyed.peek().is_some()) {
                let Some(r) = keyed.next() else { break };
                let (variable, key) = (r.variable.clone().unwrap_or_default(), r.key.clone().unwrap_or_default());
                match fetch(&r.source)? {
                    Some(data) => match data.get(&key) {
                        Some(value) => out.push((variable, value.clone())),
                        None if r.source.optional => {}
                        None => return Err(EnvRefError::MissingKey { kind: r.source.kind, name: r.source.name.clone(), key, variable }),
                    },
                    None if r.source.optional => {}
                    None => return Err(EnvRefError::Missing { kind: r.source.kind, name: r.source.name.clone() }),
                }
            } else if let Some(literal) = literals.next() {
                out.push(literal.clone());
            } else {
                break;
            }
            index += 1;
        }
        Ok(out)
    }

    /// Adds Knative's runtime contract variables after the container's own (upstream's
    /// webhook reserves their names): `PORT` (the declared port, else 8080), `K_REVISION`,
    /// `K_CONFIGURATION` and `K_SERVICE` (empty for a Revision no Service owns).
    pub fn with_runtime_contract(mut self, revision: &str, configuration: &str, service: &str) -> Self {
        let port = self.port.filter(|p| *p != 0).unwrap_or(DEFAULT_PORT);
        for (name, value) in [
            ("PORT", port.to_string()),
            ("K_REVISION", revision.into()),
            ("K_CONFIGURATION", configuration.into()),
            ("K_SERVICE", service.into()),
        ] {
            self.env.retain(|(n, _)| n != name);
            self.env.push((name.to_string(), value));
        }
        self
    }

    /// Deadline for a request: the earlier of the request and response-start timeouts
    /// (a fiber's response starts when the guest returns it whole).
    pub fn request_deadline(&self) -> Duration {
        self.timeouts.request.min(self.timeouts.response_start)
    }

    /// Guest memory one fiber takes, in bytes: the snapshot's memory, or the container's
    /// memory request/limit when larger (never 0).
    pub fn fiber_memory(&self, snapshot_memory: u64) -> u64 {
        self.memory_bytes.unwrap_or(0).max(snapshot_memory).max(1)
    }
}

impl Default for ScalingPolicy {
    /// Knative's defaults: scale 0..unbounded, concurrency target 100 at 70 %,
    /// 60 s stable window, 10 % panic window, 200 % panic threshold.
    fn default() -> Self {
        ScalingPolicy {
            min_scale: 0,
            max_scale: 0,
            initial_scale: DEFAULT_INITIAL_SCALE,
            activation_scale: 1,
            metric: ScaleMetric::Concurrency,
            target: DEFAULT_CONCURRENCY_TARGET,
            target_utilization_percent: DEFAULT_TARGET_UTILIZATION,
            stable_window: DEFAULT_STABLE_WINDOW,
            panic_window_percent: DEFAULT_PANIC_WINDOW_PERCENT,
            panic_threshold_percent: DEFAULT_PANIC_THRESHOLD_PERCENT,
            scale_down_delay: Duration::ZERO,
            scale_to_zero_retention: Duration::ZERO,
            cluster: None,
        }
    }
}

impl Default for TimeoutPolicy {
    /// 300 s for the whole request and its start, no idle timeout.
    fn default() -> Self {
        TimeoutPolicy { request: DEFAULT_TIMEOUT, response_start: DEFAULT_TIMEOUT, idle: None }
    }
}

impl Default for FiberPolicy {
    /// What a template with no scaling, timeout, resource or env fields gets.
    fn default() -> Self {
        FiberPolicy {
            container_concurrency: 0,
            scaling: ScalingPolicy::default(),
            timeouts: TimeoutPolicy::default(),
            memory_bytes: None,
            env: Vec::new(),
            env_refs: Vec::new(),
            args: Vec::new(),
            http2: false,
            port: None,
            readiness: None,
        }
    }
}

impl TimeoutPolicy {
    /// The same `timeout` for the request and its response start, no idle timeout.
    pub fn uniform(timeout: Duration) -> Self {
        TimeoutPolicy { request: timeout, response_start: timeout, idle: None }
    }
}

/// Formats a duration as Go does for whole units Lampyr writes (`60s`, `1500ms`, `7ns`).
pub fn format_go_duration(duration: Duration) -> String {
    if duration.subsec_nanos() == 0 {
        format!("{}s", duration.as_secs())
    } else if duration.subsec_nanos().is_multiple_of(1_000_000) {
        format!("{}ms", duration.as_millis())
    } else {
        format!("{}ns", duration.as_nanos())
    }
}

fn parse_non_negative<E: serde::de::Error>(text: &str) -> Result<Duration, E> {
    crate::duration::parse_go_duration(text)
        .map_err(E::custom)?
        .non_negative()
        .ok_or_else(|| E::custom(format!("duration {text:?} is negative")))
}

/// `Duration` as a Go duration string.
mod go_duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&super::format_go_duration(*duration))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        super::parse_non_negative(&String::deserialize(deserializer)?)
    }
}

/// `Option<Duration>` as an optional Go duration string.
mod optional_go_duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(duration: &Option<Duration>, serializer: S) -> Result<S::Ok, S::Error> {
        match duration {
            Some(d) => super::go_duration::serialize(d, serializer),
            None => serializer.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Duration>, D::Error> {
        Option::<String>::deserialize(deserializer)?.map(|t| super::parse_non_negative(&t)).transpose()
    }
}

/// The environment as a list of `{name, value}`.
mod env_list {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::EnvEntry;

    pub fn serialize<S: Serializer>(env: &[(String, String)], serializer: S) -> Result<S::Ok, S::Error> {
        let entries: Vec<EnvEntry> = env.iter().map(|(name, value)| EnvEntry { name: name.clone(), value: value.clone() }).collect();
        entries.serialize(serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<(String, String)>, D::Error> {
        Ok(Vec::<EnvEntry>::deserialize(deserializer)?.into_iter().map(|e| (e.name, e.value)).collect())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn source(kind: EnvSourceKind, name: &str, optional: bool) -> EnvSource {
        EnvSource { kind, name: name.into(), optional }
    }

    #[test]
    fn references_resolve_in_kubelet_order_and_missing_ones_say_what_is_missing() {
        let mut policy = FiberPolicy { env: vec![("A".into(), "1".into()), ("C".into(), "3".into())], ..FiberPolicy::default() };
        policy.env_refs = vec![
            EnvRef { source: source(EnvSourceKind::ConfigMap, "cfg", false), key: None, variable: None, index: 0, prefix: "P_".into() },
            EnvRef {
                source: source(EnvSourceKind::Secret, "sec", false),
                key: Some("k".into()),
                variable: Some("B".into()),
                index: 1,
                prefix: String::new(),
            },
            EnvRef {
                source: source(EnvSourceKind::Secret, "gone", true),
                key: Some("k".into()),
                variable: Some("D".into()),
                index: 3,
                prefix: String::new(),
            },
        ];
        let objects: BTreeMap<(EnvSourceKind, String), BTreeMap<String, String>> = [
            (
                (EnvSourceKind::ConfigMap, "cfg".to_string()),
                [("x".to_string(), "cx".to_string()), ("1bad".to_string(), "no".to_string())].into(),
            ),
            ((EnvSourceKind::Secret, "sec".to_string()), [("k".to_string(), "secret".to_string())].into()),
        ]
        .into();
        let read = |s: &EnvSource| Ok::<_, String>(objects.get(&(s.kind, s.name.clone())).cloned());
        let env = policy.resolve_env(read).unwrap_or_default();
        let names: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(names, [("P_1bad", "no"), ("P_x", "cx"), ("A", "1"), ("B", "secret"), ("C", "3")]);

        policy.env_refs[1].source.name = "absent".into();
        let err = policy.resolve_env(read).expect_err("an unresolvable reference");
        assert_eq!(
            err.to_string(),
            "Secret \"absent\" does not exist (referenced by the container's env; mark it optional to start without it)"
        );
        policy.env_refs[1].source.name = "sec".into();
        policy.env_refs[1].key = Some("other".into());
        assert!(policy.resolve_env(read).expect_err("a missing key").to_string().contains("has no key \"other\" (env B)"));
        let failing = |_: &EnvSource| Err::<Option<BTreeMap<String, String>>, _>("forbidden".to_string());
        assert!(matches!(policy.resolve_env(failing), Err(EnvRefError::Read { error, .. }) if error == "forbidden"));
    }

    #[test]
    fn a_policy_round_trips_through_its_wire_form() {
        let mut policy = FiberPolicy::default();
        policy.scaling.stable_window = Duration::from_millis(6_500);
        policy.scaling.metric = ScaleMetric::Rps;
        policy.timeouts.idle = Some(Duration::from_secs(30));
        policy.env = vec![("GREETING".into(), "hi".into()), ("A".into(), "".into())];
        policy.memory_bytes = Some(64 << 20);
        policy.scaling.cluster = Some(ClusterScaling {
            enable_scale_to_zero: false,
            scale_to_zero_grace_period: Duration::from_millis(2500),
            max_scale_up_rate: 10.0,
            max_scale_down_rate: 2.0,
        });
        let wire = serde_json::to_value(&policy).expect("serializes");
        assert_eq!(wire["scaling"]["stableWindow"], "6500ms");
        assert_eq!(wire["scaling"]["metric"], "rps");
        assert_eq!(wire["timeouts"]["request"], "300s");
        assert_eq!(wire["env"][0], serde_json::json!({"name": "GREETING", "value": "hi"}));
        assert_eq!(wire["scaling"]["cluster"]["scaleToZeroGracePeriod"], "2500ms");
        assert_eq!(wire["scaling"]["cluster"]["enableScaleToZero"], false);
        let back: FiberPolicy = serde_json::from_value(wire).expect("deserializes");
        assert_eq!(back, policy);
    }

    #[test]
    fn a_policy_without_cluster_settings_is_read_as_an_older_controller_wrote_it() {
        let mut wire = serde_json::to_value(FiberPolicy::default()).expect("serializes");
        assert!(wire["scaling"].get("cluster").is_none(), "none written: {wire}");
        wire["scaling"].as_object_mut().expect("object").remove("cluster");
        let back: FiberPolicy = serde_json::from_value(wire).expect("deserializes");
        assert_eq!(back.scaling.cluster, None);
    }

    #[test]
    fn a_negative_duration_is_refused() {
        let mut wire = serde_json::to_value(FiberPolicy::default()).expect("serializes");
        wire["timeouts"]["request"] = "-1s".into();
        let err = serde_json::from_value::<FiberPolicy>(wire).expect_err("negative");
        assert!(err.to_string().contains("negative"), "{err}");
    }
}
