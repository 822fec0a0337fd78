//! Translation of a Knative Revision template into a [`FiberPolicy`].
//!
//! [`translate`] reads the template's autoscaling annotations and the supported
//! subset of its pod spec, applies Knative's defaults and validation rules, and
//! returns either the policy or an [`UnsupportedFields`] error that lists every
//! problem, each with its field path. `docs/knative-subset.md` describes the
//! subset; in short:
//!
//! - exactly one container, with `name`, `image`, `imagePullPolicy` (accepted,
//!   not used: a fiber runs the snapshot artifact), literal `env`, at most one
//!   port (`h2c` selects HTTP/2 cleartext), cpu and memory resources, probes with
//!   `httpGet` or `tcpSocket` handlers (accepted, not run: a fiber is ready as
//!   soon as it is restored from its snapshot), and the `securityContext`
//!   settings that already hold for a fiber;
//! - pod level: `serviceAccountName` and `imagePullSecrets` (accepted, no effect
//!   on a fiber), `enableServiceLinks: false`, `automountServiceAccountToken:
//!   false` and a `securityContext` with `runAsNonRoot: true` and the
//!   `RuntimeDefault` seccomp profile;
//! - everything else set to a non-empty value is refused.
//!
//! CPU requests and limits are validated and otherwise ignored: a fiber always
//! has exactly one vCPU.
//!
//! What the annotations leave unset comes from a cluster's `config-autoscaler`
//! ([`translate_with`]; lampyr-controller passes the cluster's), or from
//! upstream's defaults ([`translate`]; `ly run` and `ly deploy`).

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use lampyr_api::duration::parse_go_duration;
use lampyr_api::k8s::{Capabilities, EnvFromSource, EnvVar, ObjectMeta, ResourceRequirements, SeccompProfile};
use lampyr_api::policy::{EnvRef, EnvSource, EnvSourceKind};
use lampyr_api::keys;
use lampyr_api::quantity::parse_quantity;
use lampyr_api::serving::OtherFields;
use lampyr_api::{
    Container, PodSecurityContext, Probe, Revision, RevisionSpec, RevisionTemplateSpec,
    SecurityContext,
};

use lampyr_api::autoscaler::{AutoscalerConfig, PANIC_WINDOW_PERCENTAGE_RANGE, TARGET_MIN, WINDOW_MAX, WINDOW_MIN};

use crate::policy::{FiberPolicy, ScaleMetric, ScalingPolicy, TimeoutPolicy};

/// Knative's `revision-timeout-seconds` default.
pub const DEFAULT_TIMEOUT_SECONDS: i64 = 300;
/// Knative's `max-revision-timeout-seconds` default.
pub const MAX_TIMEOUT_SECONDS: i64 = 600;
/// Knative's `container-concurrency-max-limit` default.
pub const MAX_CONTAINER_CONCURRENCY: i64 = 1000;

/// Upstream's utilization of an `rps` target (`config-autoscaler` has no key for it).
const RPS_TARGET_UTILIZATION: f64 = 70.0;

/// How the rules that depend on `config-autoscaler` (`max-scale-limit`,
/// `allow-zero-initial-scale`) apply to the annotations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rules {
    /// As upstream's webhook admits a template: an annotation breaking them is invalid.
    Admission,
    /// As upstream's autoscaler runs a Revision already admitted (perhaps under
    /// other settings): `initial-scale: 0` without `allow-zero-initial-scale`
    /// gets the cluster's `initial-scale`, a `max-scale` beyond `max-scale-limit`
    /// is kept. A Revision is never failed for a change of the cluster's settings.
    Admitted,
}

/// Whether a field is wrong for Knative itself or only outside the fiber subset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProblemKind {
    /// The value breaks Knative's own rules (upstream would refuse it too).
    Invalid,
    /// Valid Knative, but a fiber cannot honour it.
    Unsupported,
}

/// One field of the template that stops it from running as fibers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldProblem {
    /// Field path, e.g. `spec.template.spec.containers[0].command`.
    pub path: String,
    /// Invalid or unsupported.
    pub kind: ProblemKind,
    /// Why, in a sentence fragment.
    pub reason: String,
}

impl fmt::Display for FieldProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            ProblemKind::Invalid => "invalid",
            ProblemKind::Unsupported => "unsupported",
        };
        write!(f, "{}: {kind}: {}", self.path, self.reason)
    }
}

/// Every problem found in a Revision template, in field order.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct UnsupportedFields {
    /// The problems, at least one.
    pub problems: Vec<FieldProblem>,
}

impl UnsupportedFields {
    /// The paths of all problems, in order.
    pub fn paths(&self) -> Vec<&str> {
        self.problems.iter().map(|p| p.path.as_str()).collect()
    }
}

impl fmt::Display for UnsupportedFields {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.problems.len();
        write!(
            f,
            "the Revision template cannot run as fibers ({n} problem{}):",
            if n == 1 { "" } else { "s" }
        )?;
        for problem in &self.problems {
            write!(f, "\n  - {problem}")?;
        }
        Ok(())
    }
}

/// Translate a Service's or Configuration's `spec.template` into a fiber policy,
/// with upstream's default `config-autoscaler`, as upstream's webhook admits it.
///
/// Paths in the error start with `spec.template`.
pub fn translate(template: &RevisionTemplateSpec) -> Result<FiberPolicy, UnsupportedFields> {
    translate_with(template, &AutoscalerConfig::default(), Rules::Admission)
}

/// Translate a template with a cluster's `config-autoscaler` settings as the
/// defaults of what its annotations leave unset, under `rules`.
///
/// Paths in the error start with `spec.template`.
pub fn translate_with(
    template: &RevisionTemplateSpec,
    config: &AutoscalerConfig,
    rules: Rules,
) -> Result<FiberPolicy, UnsupportedFields> {
    translate_parts(&template.metadata, &template.spec, "spec.template.", config, rules)
}

/// Translate a Revision (its metadata and spec) into a fiber policy, with
/// upstream's default `config-autoscaler`, as upstream's webhook admits it.
///
/// Paths in the error start with `metadata` or `spec`.
pub fn translate_revision(revision: &Revision) -> Result<FiberPolicy, UnsupportedFields> {
    translate_parts(&revision.metadata, &revision.spec, "", &AutoscalerConfig::default(), Rules::Admission)
}

fn translate_parts(
    metadata: &ObjectMeta,
    spec: &RevisionSpec,
    prefix: &str,
    config: &AutoscalerConfig,
    rules: Rules,
) -> Result<FiberPolicy, UnsupportedFields> {
    let mut cx = Checker {
        problems: Vec::new(),
        config,
        rules,
    };
    let container_concurrency = cx.container_concurrency(spec, prefix);
    let scaling = cx.scaling(metadata, container_concurrency, prefix);
    let timeouts = cx.timeouts(spec, prefix);
    let container = cx.pod_spec(spec, prefix);
    if !cx.problems.is_empty() {
        return Err(UnsupportedFields {
            problems: cx.problems,
        });
    }
    let (memory_bytes, (env, env_refs), http2, port) = container;
    let args = spec.containers.first().map(|c| c.command.iter().chain(&c.args).flatten().cloned().collect()).unwrap_or_default();
    Ok(FiberPolicy {
        container_concurrency,
        scaling,
        timeouts,
        memory_bytes,
        env,
        env_refs,
        args,
        http2,
        port,
    })
}

/// What the single container contributes to the policy.
type ContainerPart = (Option<u64>, (Vec<(String, String)>, Vec<EnvRef>), bool, Option<u16>);

struct Checker<'c> {
    problems: Vec<FieldProblem>,
    /// The cluster's autoscaler settings: defaults, and the limits of [`Rules`].
    config: &'c AutoscalerConfig,
    rules: Rules,
}

/// `base.key`, or `base["key"]` when the key is not a plain identifier.
fn key_path(base: &str, key: &str) -> String {
    let plain = key.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if plain {
        format!("{base}.{key}")
    } else {
        format!("{base}[{key:?}]")
    }
}

/// Null, `false`, `""`, `[]` and `{}` ask for nothing, so they are accepted anywhere.
fn is_empty_value(value: &serde_json::Value) -> bool {
    match value {
        serde_json::Value::Null => true,
        serde_json::Value::Bool(b) => !b,
        serde_json::Value::String(s) => s.is_empty(),
        serde_json::Value::Array(a) => a.is_empty(),
        serde_json::Value::Object(o) => o.is_empty(),
        serde_json::Value::Number(_) => false,
    }
}

fn pod_field_reason(field: &str) -> &'static str {
    match field {
        "volumes" => "a fiber has no filesystem to mount volumes into",
        "initContainers" => "a fiber resumes one guest from its snapshot; there is no init step",
        "runtimeClassName" => "fibers always run as Hyperlight micro-VMs",
        "nodeSelector"
        | "affinity"
        | "tolerations"
        | "topologySpreadConstraints"
        | "nodeName"
        | "schedulerName"
        | "priorityClassName"
        | "priority"
        | "preemptionPolicy"
        | "schedulingGates" => {
            "fibers are not scheduled as Kubernetes pods, so placement settings have no effect"
        }
        "hostNetwork" | "hostPID" | "hostIPC" | "hostUsers" | "shareProcessNamespace" => {
            "a fiber shares no namespaces with its host or with other fibers"
        }
        "dnsPolicy" | "dnsConfig" | "hostAliases" | "hostname" | "subdomain"
        | "setHostnameAsFQDN" => "a fiber opens no network connections, so it has no resolver",
        "terminationGracePeriodSeconds" | "activeDeadlineSeconds" | "restartPolicy" => {
            "the fiber runtime manages the lifecycle of fibers"
        }
        "resources" | "overhead" | "resourceClaims" => {
            "fiber resources come from the container's cpu and memory only"
        }
        _ => "not part of the pod-spec subset fibers support",
    }
}

fn container_field_reason(field: &str) -> &'static str {
    match field {
        "workingDir" | "volumeMounts" | "volumeDevices" => "a fiber has no filesystem",
        "lifecycle" => "a fiber has no process to run hooks in",
        "stdin" | "stdinOnce" | "tty" => "a fiber has no terminal or standard input",
        "terminationMessagePath" | "terminationMessagePolicy" => {
            "a fiber does not exit with a termination message"
        }
        "resizePolicy" | "restartPolicy" | "restartPolicyRules" => {
            "the fiber runtime manages restarts and resources"
        }
        _ => "not part of the container subset fibers support",
    }
}

fn security_field_reason(field: &str) -> &'static str {
    match field {
        "runAsUser"
        | "runAsGroup"
        | "supplementalGroups"
        | "supplementalGroupsPolicy"
        | "fsGroup"
        | "fsGroupChangePolicy" => "a fiber has no user or group ids",
        "seLinuxOptions" | "seLinuxChangePolicy" | "appArmorProfile" | "windowsOptions" => {
            "host security modules do not apply inside a fiber"
        }
        "procMount" | "sysctls" => "a fiber has no /proc and no kernel parameters",
        _ => "not a security setting that holds for a fiber",
    }
}

impl Checker<'_> {
    fn invalid(&mut self, path: impl Into<String>, reason: impl Into<String>) {
        self.problems.push(FieldProblem {
            path: path.into(),
            kind: ProblemKind::Invalid,
            reason: reason.into(),
        });
    }

    fn unsupported(&mut self, path: impl Into<String>, reason: impl Into<String>) {
        self.problems.push(FieldProblem {
            path: path.into(),
            kind: ProblemKind::Unsupported,
            reason: reason.into(),
        });
    }

    /// Reports every non-empty unmodelled field.
    fn others(&mut self, base: &str, other: &OtherFields, reason: fn(&str) -> &'static str) {
        for (field, value) in other {
            if !is_empty_value(value) {
                self.unsupported(key_path(base, field), reason(field));
            }
        }
    }

    fn container_concurrency(&mut self, spec: &RevisionSpec, prefix: &str) -> u32 {
        match spec.container_concurrency {
            None => 0,
            Some(cc) if (0..=MAX_CONTAINER_CONCURRENCY).contains(&cc) => cc as u32,
            Some(cc) => {
                self.invalid(
                    format!("{prefix}spec.containerConcurrency"),
                    format!(
                        "{cc} is out of bounds: must be between 0 and {MAX_CONTAINER_CONCURRENCY}"
                    ),
                );
                0
            }
        }
    }

    fn timeouts(&mut self, spec: &RevisionSpec, prefix: &str) -> TimeoutPolicy {
        let mut seconds = |field: &str, value: Option<i64>, max: i64| -> Option<u64> {
            match value {
                None | Some(0) => None,
                Some(v) if (1..=max).contains(&v) => Some(v as u64),
                Some(v) => {
                    self.invalid(
                        format!("{prefix}spec.{field}"),
                        format!("{v} is out of bounds: must be between 0 and {max}"),
                    );
                    None
                }
            }
        };
        let request = seconds("timeoutSeconds", spec.timeout_seconds, MAX_TIMEOUT_SECONDS)
            .unwrap_or(DEFAULT_TIMEOUT_SECONDS as u64);
        let response_start = seconds(
            "responseStartTimeoutSeconds",
            spec.response_start_timeout_seconds,
            MAX_TIMEOUT_SECONDS,
        );
        let idle = seconds(
            "idleTimeoutSeconds",
            spec.idle_timeout_seconds,
            MAX_TIMEOUT_SECONDS,
        );
        if let Some(rs) = response_start
            && rs > request
        {
            self.invalid(
                format!("{prefix}spec.responseStartTimeoutSeconds"),
                format!("{rs} must not be greater than timeoutSeconds ({request})"),
            );
        }
        TimeoutPolicy {
            request: Duration::from_secs(request),
            response_start: Duration::from_secs(response_start.unwrap_or(request)),
            idle: idle.map(Duration::from_secs),
        }
    }

    fn scaling(
        &mut self,
        metadata: &ObjectMeta,
        container_concurrency: u32,
        prefix: &str,
    ) -> ScalingPolicy {
        let empty = BTreeMap::new();
        let annotations = metadata.annotations.as_ref().unwrap_or(&empty);
        let mut a = Annotations {
            map: annotations,
            base: format!("{prefix}metadata.annotations"),
            cx: self,
        };
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
                a.cx.unsupported(
                    path.clone(),
                    format!(
                        "autoscaler class {c:?} cannot scale fibers; only {} can",
                        keys::CLASS_KPA
                    ),
                );
                false
            }
        };

        let metric = match a.get(keys::METRIC) {
            Some((_, "concurrency")) | None => ScaleMetric::Concurrency,
            Some((_, "rps")) => ScaleMetric::Rps,
            Some((path, m)) => {
                if kpa {
                    a.cx.invalid(
                        path,
                        format!("{m:?} is not a metric: use concurrency or rps"),
                    );
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
            a.cx.invalid(
                path,
                format!("max-scale={max} is less than min-scale={min}"),
            );
        }
        let limit = config.max_scale_limit;
        if rules == Rules::Admission
            && limit > 0
            && let (Some(annotated), Some((path, _))) = (max_annotation, a.get(keys::MAX_SCALE))
        {
            if annotated == 0 {
                a.cx.invalid(
                    path,
                    format!(
                        "max-scale=0 (unbounded) is not allowed: config-autoscaler's max-scale-limit is {limit}"
                    ),
                );
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
                        a.cx.invalid(
                            path,
                            "0 is not allowed: config-autoscaler's allow-zero-initial-scale is false",
                        );
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
                    a.cx.invalid(
                        path,
                        format!("min-scale={min} is greater than activation-scale={n}"),
                    );
                    1
                }
                Ok(n) if max != 0 && i64::from(max) < i64::from(n) => {
                    a.cx.invalid(
                        path,
                        format!("max-scale={max} is less than activation-scale={n}"),
                    );
                    1
                }
                Ok(n) if n < 2 => {
                    a.cx.invalid(
                        path,
                        format!("activation-scale={n} must be greater than 1 (1 is the default)"),
                    );
                    1
                }
                Ok(n) => n as u32,
            },
        };

        let target_annotation = a.float(keys::TARGET, |v| {
            (v >= TARGET_MIN)
                .then_some(())
                .ok_or(format!("target {v} should be at least {TARGET_MIN}"))
        });
        let utilization_annotation = a.float(keys::TARGET_UTILIZATION_PERCENTAGE, |v| {
            in_range(v, 1.0, 100.0)
        });
        // Validated like upstream; a fiber pool has no activator buffer to size.
        let _ = a.float(keys::TARGET_BURST_CAPACITY, |v| {
            (v >= 0.0 || v == -1.0)
                .then_some(())
                .ok_or("must be -1 (unlimited) or at least 0".to_owned())
        });
        let (panic_low, panic_high) = PANIC_WINDOW_PERCENTAGE_RANGE;
        let panic_window_percent = a
            .float(keys::PANIC_WINDOW_PERCENTAGE, |v| in_range(v, panic_low, panic_high))
            .unwrap_or(config.panic_window_percentage);
        let panic_threshold_percent = a
            .float(keys::PANIC_THRESHOLD_PERCENTAGE, |v| {
                in_range(v, 110.0, 1000.0)
            })
            .unwrap_or(config.panic_threshold_percentage);

        let stable_window = a
            .duration(keys::WINDOW, WINDOW_MIN, true)
            .unwrap_or(config.stable_window);
        let scale_down_delay = a
            .duration(keys::SCALE_DOWN_DELAY, Duration::ZERO, true)
            .unwrap_or(config.scale_down_delay);
        let scale_to_zero_retention = a
            .duration(
                keys::SCALE_TO_ZERO_POD_RETENTION_PERIOD,
                Duration::ZERO,
                false,
            )
            .unwrap_or(config.scale_to_zero_pod_retention_period);

        // Upstream's ResolveMetricTarget, before target utilization applies.
        let cc = f64::from(container_concurrency);
        let (target, utilization) = match metric {
            ScaleMetric::Rps => (
                target_annotation.unwrap_or(config.requests_per_second_target_default),
                RPS_TARGET_UTILIZATION,
            ),
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

    fn pod_spec(&mut self, spec: &RevisionSpec, prefix: &str) -> ContainerPart {
        let base = format!("{prefix}spec");
        self.others(&base, &spec.other, pod_field_reason);
        if spec.enable_service_links == Some(true) {
            self.unsupported(
                format!("{base}.enableServiceLinks"),
                "Kubernetes service environment variables are not given to fibers",
            );
        }
        if spec.automount_service_account_token == Some(true) {
            self.unsupported(
                format!("{base}.automountServiceAccountToken"),
                "no service account token is mounted into a fiber",
            );
        }
        if let Some(sc) = &spec.security_context {
            self.pod_security_context(&format!("{base}.securityContext"), sc);
        }
        // serviceAccountName and imagePullSecrets are accepted and have no
        // effect: a fiber calls no Kubernetes API and pulls no image.

        let containers = format!("{base}.containers");
        for i in 1..spec.containers.len() {
            self.unsupported(
                format!("{containers}[{i}]"),
                "a Revision runs as fibers of one container; sidecars are not supported",
            );
        }
        match spec.containers.first() {
            None => {
                self.invalid(containers, "exactly one container is required");
                (None, (Vec::new(), Vec::new()), false, None)
            }
            Some(c) => self.container(&format!("{containers}[0]"), c),
        }
    }

    fn container(&mut self, base: &str, c: &Container) -> ContainerPart {
        self.others(base, &c.other, container_field_reason);
        let env = self.env(base, c.env.as_deref().unwrap_or_default(), c.env_from.as_deref().unwrap_or_default());
        let (http2, port) = self.ports(base, c);
        let memory = match &c.resources {
            Some(r) => self.resources(&format!("{base}.resources"), r),
            None => None,
        };
        for (field, probe, required) in [
            ("readinessProbe", &c.readiness_probe, false),
            ("livenessProbe", &c.liveness_probe, true),
            ("startupProbe", &c.startup_probe, true),
        ] {
            if let Some(p) = probe {
                self.probe(&format!("{base}.{field}"), p, required);
            }
        }
        if let Some(sc) = &c.security_context {
            self.security_context(&format!("{base}.securityContext"), sc);
        }
        (memory, env, http2, port)
    }

    /// Literal entries, and references to ConfigMaps and Secrets (resolved by fiberd).
    fn env(&mut self, base: &str, env: &[EnvVar], env_from: &[EnvFromSource]) -> (Vec<(String, String)>, Vec<EnvRef>) {
        let mut out = Vec::with_capacity(env.len());
        let mut refs = Vec::new();
        for (i, from) in env_from.iter().enumerate() {
            let path = format!("{base}.envFrom[{i}]");
            let source = match (&from.config_map_ref, &from.secret_ref) {
                (Some(c), None) => EnvSource { kind: EnvSourceKind::ConfigMap, name: c.name.clone(), optional: c.optional.unwrap_or(false) },
                (None, Some(s)) => EnvSource { kind: EnvSourceKind::Secret, name: s.name.clone(), optional: s.optional.unwrap_or(false) },
                _ => {
                    self.invalid(path, "exactly one of configMapRef and secretRef is required");
                    continue;
                }
            };
            refs.push(EnvRef { source, key: None, variable: None, index: 0, prefix: from.prefix.clone().unwrap_or_default() });
        }
        for (i, var) in env.iter().enumerate() {
            let path = format!("{base}.env[{i}]");
            if var.name.is_empty() {
                self.invalid(format!("{path}.name"), "must not be empty");
            }
            let Some(from) = &var.value_from else {
                out.push((var.name.clone(), var.value.clone().unwrap_or_default()));
                continue;
            };
            let (source, key) = match (&from.config_map_key_ref, &from.secret_key_ref, &from.field_ref, &from.resource_field_ref) {
                (Some(c), None, None, None) => {
                    (EnvSource { kind: EnvSourceKind::ConfigMap, name: c.name.clone(), optional: c.optional.unwrap_or(false) }, c.key.clone())
                }
                (None, Some(s), None, None) => {
                    (EnvSource { kind: EnvSourceKind::Secret, name: s.name.clone(), optional: s.optional.unwrap_or(false) }, s.key.clone())
                }
                _ => {
                    self.unsupported(
                        format!("{path}.valueFrom"),
                        "only configMapKeyRef and secretKeyRef are resolved for fibers; field and resource \
                         references describe a Pod, which a fiber is not",
                    );
                    continue;
                }
            };
            let at = u32::try_from(i).unwrap_or(u32::MAX);
            refs.push(EnvRef { source, key: Some(key), variable: Some(var.name.clone()), index: at, prefix: String::new() });
        }
        (out, refs)
    }

    fn ports(&mut self, base: &str, c: &Container) -> (bool, Option<u16>) {
        let ports = c.ports.as_deref().unwrap_or_default();
        for i in 1..ports.len() {
            self.unsupported(
                format!("{base}.ports[{i}]"),
                "a Revision serves exactly one port",
            );
        }
        let Some(p) = ports.first() else {
            return (false, None);
        };
        let path = format!("{base}.ports[0]");
        let http2 = match p.name.as_deref() {
            None | Some("") | Some("http1") => false,
            Some("h2c") => true,
            Some(other) => {
                self.invalid(
                    format!("{path}.name"),
                    format!("{other:?} is not a port name Knative accepts: use h2c or http1"),
                );
                false
            }
        };
        let port = match p.container_port {
            0 => None,
            n @ 1..=65535 => Some(n as u16),
            n => {
                self.invalid(
                    format!("{path}.containerPort"),
                    format!("{n} is out of bounds: must be between 0 and 65535"),
                );
                None
            }
        };
        if p.host_port.is_some_and(|h| h != 0) {
            self.unsupported(
                format!("{path}.hostPort"),
                "a fiber is reached through Lampyr's router, never a host port",
            );
        }
        if p.host_ip.as_deref().is_some_and(|h| !h.is_empty()) {
            self.unsupported(
                format!("{path}.hostIP"),
                "a fiber is reached through Lampyr's router, never a host address",
            );
        }
        if let Some(proto) = p.protocol.as_deref()
            && !proto.is_empty()
            && proto != "TCP"
        {
            self.unsupported(
                format!("{path}.protocol"),
                format!("{proto} is not served: fibers serve HTTP over TCP"),
            );
        }
        (http2, port)
    }

    fn resources(&mut self, base: &str, r: &ResourceRequirements) -> Option<u64> {
        if r.claims.as_ref().is_some_and(|c| !c.is_empty()) {
            self.unsupported(
                format!("{base}.claims"),
                "dynamic resource claims cannot be attached to a fiber",
            );
        }
        let mut memory = [None, None];
        for (slot, (field, map)) in [("limits", &r.limits), ("requests", &r.requests)]
            .into_iter()
            .enumerate()
        {
            let Some(map) = map else { continue };
            let map_path = format!("{base}.{field}");
            for (name, quantity) in map {
                let path = key_path(&map_path, name);
                match name.as_str() {
                    "memory" => match parse_quantity(&quantity.0) {
                        Ok(q) if q.is_zero() => self.invalid(path, "memory must be greater than 0"),
                        Ok(q) => memory[slot] = Some(q.ceil()),
                        Err(e) => self.invalid(path, e.to_string()),
                    },
                    // Validated only: a fiber always has exactly one vCPU.
                    "cpu" => {
                        if let Err(e) = parse_quantity(&quantity.0) {
                            self.invalid(path, e.to_string());
                        }
                    }
                    "ephemeral-storage" => {
                        self.unsupported(path, "a fiber has no filesystem to store data on")
                    }
                    other => self.unsupported(
                        path,
                        format!(
                            "a fiber has one vCPU and memory only; {other} cannot be given to it"
                        ),
                    ),
                }
            }
        }
        let [limit, request] = memory;
        if let (Some(l), Some(q)) = (limit, request)
            && q > l
        {
            self.invalid(
                format!("{base}.requests.memory"),
                format!("{q} bytes is more than the limit ({l} bytes)"),
            );
        }
        limit.or(request)
    }

    fn probe(&mut self, base: &str, p: &Probe, needs_handler: bool) {
        let mut handlers = usize::from(p.http_get.is_some()) + usize::from(p.tcp_socket.is_some());
        for (field, value) in &p.other {
            if is_empty_value(value) {
                continue;
            }
            let path = key_path(base, field);
            match field.as_str() {
                "exec" => {
                    handlers += 1;
                    self.unsupported(
                        path,
                        "exec probes run a command, and a fiber runs no processes",
                    )
                }
                "grpc" => {
                    handlers += 1;
                    self.unsupported(
                        path,
                        "gRPC probes are not supported; use httpGet or tcpSocket",
                    )
                }
                _ => self.unsupported(path, "not a probe field fibers support"),
            }
        }
        if handlers > 1 {
            self.invalid(base, "a probe takes exactly one handler");
        } else if handlers == 0 && needs_handler {
            self.invalid(base, "needs an httpGet or tcpSocket handler");
        }
        if let Some(h) = &p.http_get {
            self.others(
                &format!("{base}.httpGet"),
                &h.other,
                |_| "not an httpGet field",
            );
        }
        if let Some(t) = &p.tcp_socket {
            self.others(
                &format!("{base}.tcpSocket"),
                &t.other,
                |_| "not a tcpSocket field",
            );
        }
    }

    fn run_as_non_root(&mut self, base: &str, v: Option<bool>) {
        if v == Some(false) {
            self.unsupported(
                format!("{base}.runAsNonRoot"),
                "only true holds for a fiber: it runs no root user",
            );
        }
    }

    fn seccomp(&mut self, base: &str, profile: Option<&SeccompProfile>) {
        let Some(profile) = profile else { return };
        let path = format!("{base}.seccompProfile");
        if profile.type_ != "RuntimeDefault" {
            self.unsupported(
                format!("{path}.type"),
                format!(
                    "{:?}: only RuntimeDefault holds for a fiber (it makes no host system calls)",
                    profile.type_
                ),
            );
        }
        if profile
            .localhost_profile
            .as_deref()
            .is_some_and(|p| !p.is_empty())
        {
            self.unsupported(
                format!("{path}.localhostProfile"),
                "host seccomp profiles do not apply inside a fiber",
            );
        }
    }

    fn security_context(&mut self, base: &str, sc: &SecurityContext) {
        self.others(base, &sc.other, security_field_reason);
        self.run_as_non_root(base, sc.run_as_non_root);
        if sc.allow_privilege_escalation == Some(true) {
            self.unsupported(
                format!("{base}.allowPrivilegeEscalation"),
                "only false holds for a fiber: it has no privileges to gain",
            );
        }
        if sc.read_only_root_filesystem == Some(false) {
            self.unsupported(
                format!("{base}.readOnlyRootFilesystem"),
                "only true holds for a fiber: it has no filesystem to write",
            );
        }
        if sc.privileged == Some(true) {
            self.unsupported(
                format!("{base}.privileged"),
                "a fiber cannot run privileged: it has no access to the host",
            );
        }
        if let Some(Capabilities { add: Some(add), .. }) = &sc.capabilities
            && !add.is_empty()
        {
            self.unsupported(
                format!("{base}.capabilities.add"),
                "a fiber has no Linux capabilities to add; dropping them is accepted",
            );
        }
        self.seccomp(base, sc.seccomp_profile.as_ref());
    }

    fn pod_security_context(&mut self, base: &str, sc: &PodSecurityContext) {
        self.others(base, &sc.other, security_field_reason);
        self.run_as_non_root(base, sc.run_as_non_root);
        self.seccomp(base, sc.seccomp_profile.as_ref());
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
    if (min..=max).contains(&v) {
        Ok(())
    } else {
        Err(format!(
            "{v} is out of bounds: must be between {min} and {max}"
        ))
    }
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
            let known = AUTOSCALING_KEYS.contains(&key.as_str())
                || keys::AUTOSCALING_ALIASES.iter().any(|(_, a)| a == key);
            if !known {
                let path = self.path(key);
                self.cx
                    .unsupported(path, "not an autoscaling setting fibers support");
            }
        }
        for (canonical, alias) in keys::AUTOSCALING_ALIASES {
            if self.map.contains_key(*canonical) && self.map.contains_key(*alias) {
                let path = self.path(alias);
                self.cx.invalid(
                    path,
                    format!("set together with {canonical}; keep only one"),
                );
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
                self.cx.invalid(
                    path,
                    format!("{v} is out of bounds: must be between 0 and {}", i32::MAX),
                );
                None
            }
            Err(_) => {
                let digits = v.strip_prefix(['+', '-']).unwrap_or(v);
                if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
                    self.cx.invalid(
                        path,
                        format!("{v} is out of bounds: must be between 0 and {}", i32::MAX),
                    );
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
        let bounds = || {
            format!(
                "{v} is out of bounds: must be between {}s and {}s",
                min.as_secs(),
                WINDOW_MAX.as_secs()
            )
        };
        let Some(d) = parsed.non_negative() else {
            self.cx.invalid(path, bounds());
            return None;
        };
        if d < min || d > WINDOW_MAX {
            self.cx.invalid(path, bounds());
            return None;
        }
        if whole_seconds && d.subsec_nanos() != 0 {
            self.cx
                .invalid(path, format!("{v} must be given in whole seconds"));
            return None;
        }
        Some(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    const ANN: &str = "spec.template.metadata.annotations";
    const C0: &str = "spec.template.spec.containers[0]";

    fn template(value: Value) -> RevisionTemplateSpec {
        serde_json::from_value(value).unwrap_or_else(|e| panic!("test template: {e}"))
    }

    /// A template with one plain container and the given annotations.
    fn annotated(annotations: &[(&str, &str)]) -> RevisionTemplateSpec {
        let map: BTreeMap<String, String> = annotations
            .iter()
            .map(|(k, v)| (format!("autoscaling.knative.dev/{k}"), (*v).to_owned()))
            .collect();
        template(json!({
            "metadata": {"annotations": map},
            "spec": {"containers": [{"image": "x"}]},
        }))
    }

    /// A template with one container holding `container` fields.
    fn with_container(container: Value) -> RevisionTemplateSpec {
        template(json!({"spec": {"containers": [container]}}))
    }

    fn ok(t: &RevisionTemplateSpec) -> FiberPolicy {
        translate(t).unwrap_or_else(|e| panic!("{e}"))
    }

    fn err(t: &RevisionTemplateSpec) -> UnsupportedFields {
        match translate(t) {
            Ok(p) => panic!("expected an error, got {p:?}"),
            Err(e) => e,
        }
    }

    fn default_scaling() -> ScalingPolicy {
        ScalingPolicy::default()
    }

    #[test]
    fn defaults() {
        let policy = ok(&with_container(json!({"image": "x"})));
        assert_eq!(
            policy,
            FiberPolicy {
                container_concurrency: 0,
                scaling: default_scaling(),
                timeouts: TimeoutPolicy {
                    request: Duration::from_secs(300),
                    response_start: Duration::from_secs(300),
                    idle: None,
                },
                memory_bytes: None,
                env: Vec::new(),
                env_refs: Vec::new(),
                args: Vec::new(),
                http2: false,
                port: None,
            }
        );
    }

    #[test]
    fn every_annotation_and_alias() {
        type Set = fn(&mut ScalingPolicy);
        let table: &[(&str, &str, Set)] = &[
            ("class", "kpa.autoscaling.knative.dev", |_| {}),
            ("metric", "concurrency", |_| {}),
            ("metric", "rps", |p| {
                p.metric = ScaleMetric::Rps;
                p.target = 200.0;
            }),
            ("min-scale", "2", |p| p.min_scale = 2),
            ("minScale", "2", |p| p.min_scale = 2),
            ("max-scale", "7", |p| p.max_scale = 7),
            ("maxScale", "7", |p| p.max_scale = 7),
            ("initial-scale", "3", |p| p.initial_scale = 3),
            ("initialScale", "3", |p| p.initial_scale = 3),
            ("activation-scale", "4", |p| p.activation_scale = 4),
            ("target", "25.5", |p| p.target = 25.5),
            ("target-utilization-percentage", "85", |p| {
                p.target_utilization_percent = 85.0
            }),
            ("targetUtilizationPercentage", "85", |p| {
                p.target_utilization_percent = 85.0
            }),
            ("target-burst-capacity", "-1", |_| {}),
            ("targetBurstCapacity", "0", |_| {}),
            ("window", "2m", |p| {
                p.stable_window = Duration::from_secs(120)
            }),
            ("window", "6s", |p| p.stable_window = Duration::from_secs(6)),
            ("window", "1h", |p| {
                p.stable_window = Duration::from_secs(3600)
            }),
            ("scale-down-delay", "1m30s", |p| {
                p.scale_down_delay = Duration::from_secs(90)
            }),
            ("scaleDownDelay", "0s", |_| {}),
            ("scale-to-zero-pod-retention-period", "1m5s", |p| {
                p.scale_to_zero_retention = Duration::from_secs(65)
            }),
            ("scaleToZeroPodRetentionPeriod", "1.5s", |p| {
                p.scale_to_zero_retention = Duration::from_millis(1500)
            }),
            ("panic-window-percentage", "20", |p| {
                p.panic_window_percent = 20.0
            }),
            ("panicWindowPercentage", "1", |p| {
                p.panic_window_percent = 1.0
            }),
            ("panic-threshold-percentage", "150", |p| {
                p.panic_threshold_percent = 150.0
            }),
            ("panicThresholdPercentage", "1000", |p| {
                p.panic_threshold_percent = 1000.0
            }),
        ];
        for (key, value, set) in table {
            let mut want = default_scaling();
            set(&mut want);
            let got = translate(&annotated(&[(key, value)]))
                .unwrap_or_else(|e| panic!("{key}={value}: {e}"))
                .scaling;
            assert_eq!(got, want, "{key}={value}");
        }
        // Unrelated annotations are not ours to judge.
        let t = template(json!({
            "metadata": {"annotations": {"example.com/owner": "me", "serving.knative.dev/creator": "x"}},
            "spec": {"containers": [{"image": "x"}]},
        }));
        assert_eq!(ok(&t).scaling, default_scaling());
    }

    #[test]
    fn min_max_and_activation_together() {
        let p = ok(&annotated(&[
            ("min-scale", "2"),
            ("max-scale", "10"),
            ("activation-scale", "3"),
        ]));
        assert_eq!((p.scaling.min_scale, p.scaling.max_scale), (2, 10));
        assert_eq!(p.scaling.activation_scale, 3);
        // max-scale 0 means unbounded, so any min-scale fits.
        let p = ok(&annotated(&[("min-scale", "5"), ("max-scale", "0")]));
        assert_eq!((p.scaling.min_scale, p.scaling.max_scale), (5, 0));
    }

    #[test]
    fn invalid_annotations_name_their_path() {
        // (annotations, key with the problem, kind, part of the reason)
        type Case<'a> = (&'a [(&'a str, &'a str)], &'a str, ProblemKind, &'a str);
        let table: &[Case] = &[
            (
                &[("min-scale", "-1")],
                "min-scale",
                ProblemKind::Invalid,
                "out of bounds",
            ),
            (
                &[("min-scale", "two")],
                "min-scale",
                ProblemKind::Invalid,
                "not an integer",
            ),
            (
                &[("minScale", "1.5")],
                "minScale",
                ProblemKind::Invalid,
                "not an integer",
            ),
            (
                &[("maxScale", "99999999999")],
                "maxScale",
                ProblemKind::Invalid,
                "out of bounds",
            ),
            (
                &[("min-scale", "3"), ("max-scale", "2")],
                "max-scale",
                ProblemKind::Invalid,
                "max-scale=2 is less than min-scale=3",
            ),
            (
                &[("initial-scale", "0")],
                "initial-scale",
                ProblemKind::Invalid,
                "allow-zero-initial-scale",
            ),
            (
                &[("initialScale", "-2")],
                "initialScale",
                ProblemKind::Invalid,
                "greater than 0",
            ),
            (
                &[("initial-scale", "x")],
                "initial-scale",
                ProblemKind::Invalid,
                "not an integer",
            ),
            (
                &[("activation-scale", "1")],
                "activation-scale",
                ProblemKind::Invalid,
                "greater than 1",
            ),
            (
                &[("activation-scale", "5"), ("max-scale", "3")],
                "activation-scale",
                ProblemKind::Invalid,
                "max-scale=3 is less than activation-scale=5",
            ),
            (
                &[("activation-scale", "2"), ("min-scale", "3")],
                "activation-scale",
                ProblemKind::Invalid,
                "min-scale=3 is greater than activation-scale=2",
            ),
            (
                &[("target", "0")],
                "target",
                ProblemKind::Invalid,
                "at least 0.01",
            ),
            (
                &[("target", "lots")],
                "target",
                ProblemKind::Invalid,
                "not a number",
            ),
            (
                &[("target", "NaN")],
                "target",
                ProblemKind::Invalid,
                "not a number",
            ),
            (
                &[("target", "inf")],
                "target",
                ProblemKind::Invalid,
                "not a number",
            ),
            (
                &[("target-utilization-percentage", "101")],
                "target-utilization-percentage",
                ProblemKind::Invalid,
                "between 1 and 100",
            ),
            (
                &[("targetUtilizationPercentage", "0.5")],
                "targetUtilizationPercentage",
                ProblemKind::Invalid,
                "between 1 and 100",
            ),
            (
                &[("target-burst-capacity", "-2")],
                "target-burst-capacity",
                ProblemKind::Invalid,
                "-1",
            ),
            (
                &[("metric", "cpu")],
                "metric",
                ProblemKind::Invalid,
                "use concurrency or rps",
            ),
            (
                &[("window", "5s")],
                "window",
                ProblemKind::Invalid,
                "between 6s and 3600s",
            ),
            (
                &[("window", "61m")],
                "window",
                ProblemKind::Invalid,
                "between 6s and 3600s",
            ),
            (
                &[("window", "-10s")],
                "window",
                ProblemKind::Invalid,
                "between 6s and 3600s",
            ),
            (
                &[("window", "6.5s")],
                "window",
                ProblemKind::Invalid,
                "whole seconds",
            ),
            (
                &[("window", "60")],
                "window",
                ProblemKind::Invalid,
                "missing unit",
            ),
            (
                &[("window", "1d")],
                "window",
                ProblemKind::Invalid,
                "unknown unit",
            ),
            (
                &[("scale-down-delay", "2h")],
                "scale-down-delay",
                ProblemKind::Invalid,
                "between 0s and 3600s",
            ),
            (
                &[("scaleDownDelay", "-1s")],
                "scaleDownDelay",
                ProblemKind::Invalid,
                "between 0s and 3600s",
            ),
            (
                &[("scale-down-delay", "1500ms")],
                "scale-down-delay",
                ProblemKind::Invalid,
                "whole seconds",
            ),
            (
                &[("scale-to-zero-pod-retention-period", "1h1s")],
                "scale-to-zero-pod-retention-period",
                ProblemKind::Invalid,
                "between 0s and 3600s",
            ),
            (
                &[("scaleToZeroPodRetentionPeriod", "soon")],
                "scaleToZeroPodRetentionPeriod",
                ProblemKind::Invalid,
                "invalid duration",
            ),
            (
                &[("panic-window-percentage", "0.5")],
                "panic-window-percentage",
                ProblemKind::Invalid,
                "between 1 and 100",
            ),
            (
                &[("panicWindowPercentage", "101")],
                "panicWindowPercentage",
                ProblemKind::Invalid,
                "between 1 and 100",
            ),
            (
                &[("panic-threshold-percentage", "100")],
                "panic-threshold-percentage",
                ProblemKind::Invalid,
                "between 110 and 1000",
            ),
            (
                &[("panicThresholdPercentage", "1001")],
                "panicThresholdPercentage",
                ProblemKind::Invalid,
                "between 110 and 1000",
            ),
            (
                &[("class", "hpa.autoscaling.knative.dev")],
                "class",
                ProblemKind::Unsupported,
                "CPU or memory",
            ),
            (
                &[("class", "xyz.autoscaling.knative.dev")],
                "class",
                ProblemKind::Invalid,
                "unknown autoscaler class",
            ),
            (
                &[("class", "example.com/scaler")],
                "class",
                ProblemKind::Unsupported,
                "cannot scale fibers",
            ),
            (
                &[("minscale", "1")],
                "minscale",
                ProblemKind::Unsupported,
                "not an autoscaling setting",
            ),
            (
                &[("metric-aggregation-algorithm", "linear")],
                "metric-aggregation-algorithm",
                ProblemKind::Unsupported,
                "not an autoscaling setting",
            ),
            (
                &[("min-scale", "1"), ("minScale", "1")],
                "minScale",
                ProblemKind::Invalid,
                "set together with autoscaling.knative.dev/min-scale",
            ),
        ];
        for (annotations, key, kind, reason) in table {
            let e = err(&annotated(annotations));
            let path = format!("{ANN}[\"autoscaling.knative.dev/{key}\"]");
            assert_eq!(e.paths(), [path.as_str()], "{annotations:?}: {e}");
            assert_eq!(e.problems[0].kind, *kind, "{annotations:?}");
            assert!(
                e.problems[0].reason.contains(reason),
                "{annotations:?}: {:?} should mention {reason:?}",
                e.problems[0].reason
            );
        }
    }

    #[test]
    fn hpa_class_does_not_also_complain_about_its_metric() {
        let e = err(&annotated(&[
            ("class", "hpa.autoscaling.knative.dev"),
            ("metric", "cpu"),
        ]));
        assert_eq!(e.paths().len(), 1, "{e}");
    }

    #[test]
    fn target_follows_container_concurrency_like_upstream() {
        let cc = |cc: i64, annotations: &[(&str, &str)]| {
            let mut t = annotated(annotations);
            t.spec.container_concurrency = Some(cc);
            ok(&t)
        };
        assert_eq!(cc(0, &[]).scaling.target, 100.0);
        assert_eq!(cc(10, &[]).scaling.target, 10.0);
        assert_eq!(cc(10, &[("target", "50")]).scaling.target, 10.0);
        assert_eq!(cc(10, &[("target", "5")]).scaling.target, 5.0);
        assert_eq!(cc(0, &[("target", "50")]).scaling.target, 50.0);
        // rps ignores containerConcurrency.
        assert_eq!(cc(10, &[("metric", "rps")]).scaling.target, 200.0);
        assert_eq!(cc(1, &[]).container_concurrency, 1);
    }

    /// A `config-autoscaler` from `pairs` (valid).
    fn cluster(pairs: &[(&str, &str)]) -> AutoscalerConfig {
        let data = pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        AutoscalerConfig::from_data(&data).unwrap_or_else(|e| panic!("{e}"))
    }

    fn with(t: &RevisionTemplateSpec, config: &AutoscalerConfig, rules: Rules) -> ScalingPolicy {
        translate_with(t, config, rules)
            .unwrap_or_else(|e| panic!("{e}"))
            .scaling
    }

    #[test]
    fn the_clusters_settings_are_the_defaults_annotations_override() {
        let config = cluster(&[
            ("container-concurrency-target-default", "10"),
            ("container-concurrency-target-percentage", "80"),
            ("requests-per-second-target-default", "50"),
            ("stable-window", "2m"),
            ("panic-window-percentage", "20"),
            ("panic-threshold-percentage", "300"),
            ("scale-down-delay", "30s"),
            ("scale-to-zero-pod-retention-period", "10s"),
            ("min-scale", "1"),
            ("max-scale", "5"),
            ("initial-scale", "2"),
        ]);
        let from_cluster = ScalingPolicy {
            min_scale: 1,
            max_scale: 5,
            initial_scale: 2,
            target: 10.0,
            target_utilization_percent: 80.0,
            stable_window: Duration::from_secs(120),
            panic_window_percent: 20.0,
            panic_threshold_percent: 300.0,
            scale_down_delay: Duration::from_secs(30),
            scale_to_zero_retention: Duration::from_secs(10),
            ..default_scaling()
        };
        type Set = fn(&mut ScalingPolicy);
        type Case<'a> = (&'a [(&'a str, &'a str)], i64, Set);
        // (annotations, containerConcurrency, what changes from the cluster's values)
        let table: &[Case] = &[
            (&[], 0, |_| {}),
            // containerConcurrency is the target when set, as upstream.
            (&[], 4, |p| p.target = 4.0),
            (&[("target", "3")], 0, |p| p.target = 3.0),
            (&[("target-utilization-percentage", "50")], 0, |p| p.target_utilization_percent = 50.0),
            // rps: the cluster's rps default, at upstream's fixed 70 % (not the concurrency percentage).
            (&[("metric", "rps")], 0, |p| {
                p.metric = ScaleMetric::Rps;
                p.target = 50.0;
                p.target_utilization_percent = 70.0;
            }),
            (&[("window", "6s")], 0, |p| p.stable_window = Duration::from_secs(6)),
            (&[("panic-window-percentage", "5")], 0, |p| p.panic_window_percent = 5.0),
            (&[("panic-threshold-percentage", "150")], 0, |p| p.panic_threshold_percent = 150.0),
            (&[("scale-down-delay", "0s")], 0, |p| p.scale_down_delay = Duration::ZERO),
            (&[("scale-to-zero-pod-retention-period", "0s")], 0, |p| p.scale_to_zero_retention = Duration::ZERO),
            (&[("min-scale", "0"), ("max-scale", "0")], 0, |p| (p.min_scale, p.max_scale) = (0, 0)),
            (&[("initial-scale", "7")], 0, |p| p.initial_scale = 7),
            // A bound from an annotation wins over a cluster default it conflicts with.
            (&[("max-scale", "0")], 0, |p| p.max_scale = 0),
            (&[("min-scale", "9")], 0, |p| (p.min_scale, p.max_scale) = (9, 9)),
        ];
        for rules in [Rules::Admission, Rules::Admitted] {
            for (annotations, cc, set) in table {
                let mut t = annotated(annotations);
                t.spec.container_concurrency = Some(*cc);
                let mut want = from_cluster.clone();
                set(&mut want);
                assert_eq!(with(&t, &config, rules), want, "{annotations:?} cc={cc} {rules:?}");
            }
        }
        // The cluster's min-scale above a Revision's max-scale: the annotation wins.
        let config = cluster(&[("min-scale", "4")]);
        let p = with(&annotated(&[("max-scale", "2")]), &config, Rules::Admission);
        assert_eq!((p.min_scale, p.max_scale), (2, 2));
        // Translation never sets the cluster part: lampyr-controller adds it to the Home.
        assert_eq!(from_cluster.cluster, None);
    }

    #[test]
    fn the_default_cluster_settings_give_upstreams_defaults() {
        let t = annotated(&[]);
        assert_eq!(with(&t, &AutoscalerConfig::default(), Rules::Admission), default_scaling());
        assert_eq!(with(&t, &AutoscalerConfig::default(), Rules::Admitted), default_scaling());
    }

    #[test]
    fn rules_that_depend_on_the_cluster_refuse_at_admission_and_resolve_once_admitted() {
        let limited = cluster(&[("max-scale-limit", "10"), ("max-scale", "5")]);
        let zero_ok = cluster(&[("allow-zero-initial-scale", "true")]);
        let strict = AutoscalerConfig::default();
        // (annotations, cluster, reason at admission, the policy once admitted)
        type Case<'a> = (&'a [(&'a str, &'a str)], &'a AutoscalerConfig, Option<&'a str>, (u32, u32));
        let table: &[Case] = &[
            (&[("max-scale", "11")], &limited, Some("between 1 and 10 (config-autoscaler's max-scale-limit)"), (11, 1)),
            (&[("max-scale", "0")], &limited, Some("max-scale=0 (unbounded) is not allowed"), (0, 1)),
            (&[("max-scale", "10")], &limited, None, (10, 1)),
            (&[], &limited, None, (5, 1)),
            (&[("initial-scale", "0")], &strict, Some("allow-zero-initial-scale is false"), (0, 1)),
            (&[("initial-scale", "0")], &zero_ok, None, (0, 0)),
        ];
        for (annotations, config, refused, (max, initial)) in table {
            let t = annotated(annotations);
            match (translate_with(&t, config, Rules::Admission), refused) {
                (Ok(_), None) => {}
                (Err(e), Some(reason)) => {
                    assert_eq!(e.problems.len(), 1, "{annotations:?}: {e}");
                    assert!(e.problems[0].reason.contains(reason), "{annotations:?}: {e}");
                    assert_eq!(e.problems[0].kind, ProblemKind::Invalid);
                }
                (got, _) => panic!("{annotations:?}: at admission {got:?}, expected refusal {refused:?}"),
            }
            let p = with(&t, config, Rules::Admitted);
            assert_eq!((p.max_scale, p.initial_scale), (*max, *initial), "{annotations:?} once admitted");
        }
    }

    #[test]
    fn spec_timeouts_and_concurrency() {
        let spec = |fields: Value| {
            let mut v = json!({"containers": [{"image": "x"}]});
            if let (Some(obj), Some(extra)) = (v.as_object_mut(), fields.as_object()) {
                obj.extend(extra.clone());
            }
            template(json!({ "spec": v }))
        };
        let p = ok(&spec(json!({
            "timeoutSeconds": 100,
            "responseStartTimeoutSeconds": 50,
            "idleTimeoutSeconds": 30,
            "containerConcurrency": 1000,
        })));
        assert_eq!(
            p.timeouts,
            TimeoutPolicy {
                request: Duration::from_secs(100),
                response_start: Duration::from_secs(50),
                idle: Some(Duration::from_secs(30)),
            }
        );
        assert_eq!(p.request_deadline(), Duration::from_secs(50));
        assert_eq!(p.container_concurrency, 1000);
        // responseStart defaults to the request timeout; 0 means "not set".
        let p = ok(&spec(
            json!({"timeoutSeconds": 600, "idleTimeoutSeconds": 0}),
        ));
        assert_eq!(p.timeouts.response_start, Duration::from_secs(600));
        assert_eq!(p.timeouts.idle, None);

        let e = err(&spec(json!({
            "timeoutSeconds": 601,
            "containerConcurrency": 1001,
            "idleTimeoutSeconds": -1,
        })));
        assert_eq!(
            e.paths(),
            [
                "spec.template.spec.containerConcurrency",
                "spec.template.spec.timeoutSeconds",
                "spec.template.spec.idleTimeoutSeconds",
            ]
        );
        let e = err(&spec(
            json!({"timeoutSeconds": 100, "responseStartTimeoutSeconds": 101}),
        ));
        assert_eq!(
            e.paths(),
            ["spec.template.spec.responseStartTimeoutSeconds"]
        );
        assert!(e.problems[0].reason.contains("timeoutSeconds (100)"), "{e}");
        // Without timeoutSeconds the default (300) bounds it.
        let e = err(&spec(json!({"responseStartTimeoutSeconds": 301})));
        assert_eq!(
            e.paths(),
            ["spec.template.spec.responseStartTimeoutSeconds"]
        );
    }

    #[test]
    fn memory_quantities() {
        let table: &[(Value, Option<u64>)] = &[
            (json!({"limits": {"memory": "128Mi"}}), Some(128 << 20)),
            (json!({"requests": {"memory": "1G"}}), Some(1_000_000_000)),
            (
                json!({"limits": {"memory": "256M"}, "requests": {"memory": "128Mi"}}),
                Some(256_000_000),
            ),
            (
                json!({"limits": {"memory": "1Gi"}, "requests": {"memory": "1Gi"}}),
                Some(1 << 30),
            ),
            (json!({"limits": {"memory": "1048576"}}), Some(1_048_576)),
            (json!({"limits": {"memory": 1048576}}), Some(1_048_576)),
            (json!({"limits": {"memory": "1.5Gi"}}), Some(3 << 29)),
            (json!({"limits": {"memory": "64e6"}}), Some(64_000_000)),
            (
                json!({"limits": {"cpu": "1"}, "requests": {"cpu": "250m"}}),
                None,
            ),
            (json!({}), None),
        ];
        for (resources, want) in table {
            let p = ok(&with_container(
                json!({"image": "x", "resources": resources}),
            ));
            assert_eq!(p.memory_bytes, *want, "{resources}");
        }
        let res = format!("{C0}.resources");
        let bad: &[(Value, String, &str)] = &[
            (
                json!({"limits": {"memory": "12XB"}}),
                format!("{res}.limits.memory"),
                "invalid quantity",
            ),
            (
                json!({"requests": {"memory": "-1Mi"}}),
                format!("{res}.requests.memory"),
                "negative",
            ),
            (
                json!({"limits": {"memory": "0"}}),
                format!("{res}.limits.memory"),
                "greater than 0",
            ),
            (
                json!({"limits": {"cpu": "one"}}),
                format!("{res}.limits.cpu"),
                "invalid quantity",
            ),
            (
                json!({"limits": {"memory": "128Mi"}, "requests": {"memory": "256Mi"}}),
                format!("{res}.requests.memory"),
                "more than the limit",
            ),
        ];
        for (resources, path, reason) in bad {
            let e = err(&with_container(
                json!({"image": "x", "resources": resources}),
            ));
            assert_eq!(e.paths(), [path.as_str()], "{resources}");
            assert!(e.problems[0].reason.contains(reason), "{e}");
        }
    }

    #[test]
    fn ports() {
        let port = |ports: Value| with_container(json!({"image": "x", "ports": ports}));
        let p = ok(&port(json!([{"name": "h2c", "containerPort": 8080}])));
        assert_eq!((p.http2, p.port), (true, Some(8080)));
        let p = ok(&port(
            json!([{"name": "http1", "containerPort": 9000, "protocol": "TCP"}]),
        ));
        assert_eq!((p.http2, p.port), (false, Some(9000)));
        let p = ok(&port(json!([{"containerPort": 8080}])));
        assert_eq!((p.http2, p.port), (false, Some(8080)));
        let p = ok(&port(json!([{"name": "h2c"}])));
        assert_eq!((p.http2, p.port), (true, None));
        let p = ok(&port(json!([])));
        assert_eq!((p.http2, p.port), (false, None));

        let e = err(&port(json!([
            {"name": "grpc", "containerPort": 70000, "hostPort": 80, "hostIP": "1.2.3.4", "protocol": "UDP"},
            {"containerPort": 9090},
        ])));
        let p0 = format!("{C0}.ports[0]");
        assert_eq!(
            e.paths(),
            [
                format!("{C0}.ports[1]"),
                format!("{p0}.name"),
                format!("{p0}.containerPort"),
                format!("{p0}.hostPort"),
                format!("{p0}.hostIP"),
                format!("{p0}.protocol"),
            ]
        );
    }

    #[test]
    fn command_then_args_are_the_guests_arguments() {
        let p = ok(&with_container(json!({"image": "x", "command": ["/ko-app/runtime", "abra"], "args": ["cadabra", "do"]})));
        assert_eq!(p.args, ["/ko-app/runtime", "abra", "cadabra", "do"]);
        assert_eq!(ok(&with_container(json!({"image": "x", "args": ["--serve"]}))).args, ["--serve"]);
        assert!(ok(&with_container(json!({"image": "x"}))).args.is_empty());
    }

    #[test]
    fn env_literals_and_value_from() {
        let p = ok(&with_container(json!({"image": "x", "env": [
            {"name": "B", "value": "2"},
            {"name": "A", "value": "1"},
            {"name": "EMPTY"},
        ]})));
        assert_eq!(
            p.env,
            [
                ("B".to_owned(), "2".to_owned()),
                ("A".to_owned(), "1".to_owned()),
                ("EMPTY".to_owned(), String::new()),
            ]
        );
        // ConfigMap and Secret references travel as references, in declaration order.
        let p = ok(&with_container(json!({"image": "x",
            "envFrom": [{"prefix": "CFG_", "configMapRef": {"name": "cfg"}}, {"secretRef": {"name": "sec", "optional": true}}],
            "env": [
                {"name": "A", "value": "1"},
                {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
                {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "mode", "optional": true}}},
            ]
        })));
        assert_eq!(p.env, [("A".to_owned(), "1".to_owned())]);
        let refs: Vec<_> = p
            .env_refs
            .iter()
            .map(|r| (r.source.kind, r.source.name.as_str(), r.source.optional, r.key.as_deref(), r.variable.as_deref(), r.index, r.prefix.as_str()))
            .collect();
        assert_eq!(
            refs,
            [
                (EnvSourceKind::ConfigMap, "cfg", false, None, None, 0, "CFG_"),
                (EnvSourceKind::Secret, "sec", true, None, None, 0, ""),
                (EnvSourceKind::Secret, "s", false, Some("k"), Some("TOKEN"), 1, ""),
                (EnvSourceKind::ConfigMap, "c", true, Some("mode"), Some("MODE"), 2, ""),
            ]
        );
        let e = err(&with_container(json!({"image": "x", "env": [
            {"name": "A", "value": "1"},
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "", "value": "x"},
        ], "envFrom": [{"prefix": "X"}]})));
        assert_eq!(e.paths(), [format!("{C0}.envFrom[0]"), format!("{C0}.env[1].valueFrom"), format!("{C0}.env[2].name")]);
        assert_eq!(e.problems[1].kind, ProblemKind::Unsupported);
        assert!(e.problems[1].reason.contains("only configMapKeyRef and secretKeyRef"), "{e}");
    }

    #[test]
    fn every_unsupported_field_is_listed_in_one_error() {
        let t = template(json!({
            "metadata": {"annotations": {"autoscaling.knative.dev/class": "hpa.autoscaling.knative.dev"}},
            "spec": {
                "volumes": [{"name": "data", "emptyDir": {}}],
                "initContainers": [{"name": "init", "image": "busybox"}],
                "nodeSelector": {"disk": "ssd"},
                "tolerations": [{"key": "k", "operator": "Exists"}],
                "hostNetwork": true,
                "runtimeClassName": "gvisor",
                "enableServiceLinks": true,
                "securityContext": {"runAsUser": 1000, "fsGroup": 2000},
                "containers": [
                    {
                        "image": "x",
                        "command": ["/app"],
                        "args": ["--serve"],
                        "workingDir": "/srv",
                        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                        "envFrom": [{"configMapRef": {"name": "cfg"}}],
                        "lifecycle": {"preStop": {"exec": {"command": ["sleep", "1"]}}},
                        "tty": true,
                        "env": [{"name": "K", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                        "ports": [{"containerPort": 8080}, {"containerPort": 8081}],
                        "resources": {"limits": {"nvidia.com/gpu": "1", "ephemeral-storage": "1Gi"}},
                        "readinessProbe": {"exec": {"command": ["true"]}},
                        "livenessProbe": {"exec": {"command": ["true"]}},
                        "startupProbe": {"grpc": {"port": 9000}},
                        "securityContext": {
                            "privileged": true,
                            "runAsUser": 0,
                            "capabilities": {"add": ["NET_ADMIN"], "drop": ["ALL"]},
                            "seccompProfile": {"type": "Unconfined"},
                            "readOnlyRootFilesystem": false,
                            "allowPrivilegeEscalation": true,
                            "runAsNonRoot": false,
                        },
                    },
                    {"name": "sidecar", "image": "envoy"},
                ],
            },
        }));
        let e = err(&t);
        let spec = "spec.template.spec";
        let mut want: Vec<String> = [
            format!("{ANN}[\"autoscaling.knative.dev/class\"]"),
            format!("{spec}.volumes"),
            format!("{spec}.initContainers"),
            format!("{spec}.nodeSelector"),
            format!("{spec}.tolerations"),
            format!("{spec}.hostNetwork"),
            format!("{spec}.runtimeClassName"),
            format!("{spec}.enableServiceLinks"),
            format!("{spec}.securityContext.runAsUser"),
            format!("{spec}.securityContext.fsGroup"),
            format!("{spec}.containers[1]"),
            format!("{C0}.workingDir"),
            format!("{C0}.volumeMounts"),
            format!("{C0}.lifecycle"),
            format!("{C0}.tty"),
            format!("{C0}.env[0].valueFrom"),
            format!("{C0}.ports[1]"),
            format!("{C0}.resources.limits[\"nvidia.com/gpu\"]"),
            format!("{C0}.resources.limits.ephemeral-storage"),
            format!("{C0}.readinessProbe.exec"),
            format!("{C0}.livenessProbe.exec"),
            format!("{C0}.startupProbe.grpc"),
            format!("{C0}.securityContext.privileged"),
            format!("{C0}.securityContext.runAsUser"),
            format!("{C0}.securityContext.capabilities.add"),
            format!("{C0}.securityContext.seccompProfile.type"),
            format!("{C0}.securityContext.readOnlyRootFilesystem"),
            format!("{C0}.securityContext.allowPrivilegeEscalation"),
            format!("{C0}.securityContext.runAsNonRoot"),
        ]
        .into();
        let mut got: Vec<String> = e.paths().into_iter().map(str::to_owned).collect();
        want.sort();
        got.sort();
        assert_eq!(got, want, "{e}");
        assert!(
            e.problems
                .iter()
                .all(|p| p.kind == ProblemKind::Unsupported),
            "{e}"
        );

        let shown = e.to_string();
        let mut lines = shown.lines();
        assert_eq!(
            lines.next(),
            Some(
                format!(
                    "the Revision template cannot run as fibers ({} problems):",
                    want.len()
                )
                .as_str()
            )
        );
        assert_eq!(lines.count(), want.len());
        assert!(
            shown.contains(&format!(
                "\n  - {spec}.volumes: unsupported: a fiber has no filesystem to mount volumes into"
            )),
            "{shown}"
        );
    }

    #[test]
    fn containers_must_be_exactly_one() {
        let e = err(&template(json!({"spec": {}})));
        assert_eq!(e.paths(), ["spec.template.spec.containers"]);
        assert_eq!(e.problems[0].kind, ProblemKind::Invalid);
    }

    #[test]
    fn supported_subset_is_accepted() {
        // What the upstream webhook and a restricted security profile add,
        // plus the fields Lampyr accepts and ignores.
        let t = template(json!({
            "metadata": {"name": "hello-00001", "labels": {"app": "hello"}},
            "spec": {
                "serviceAccountName": "hello",
                "imagePullSecrets": [{"name": "regcred"}],
                "enableServiceLinks": false,
                "automountServiceAccountToken": false,
                "timeoutSeconds": 300,
                "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
                "volumes": [],
                "containers": [{
                    "name": "user-container",
                    "image": "ghcr.io/example/hello@sha256:0123",
                    "imagePullPolicy": "IfNotPresent",
                    "command": [],
                    "stdin": false,
                    "resources": {},
                    "readinessProbe": {"tcpSocket": {"port": 0}, "successThreshold": 1},
                    "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http1"}, "periodSeconds": 5},
                    "startupProbe": {"httpGet": {"path": "/ready"}, "failureThreshold": 30},
                    "securityContext": {
                        "runAsNonRoot": true,
                        "allowPrivilegeEscalation": false,
                        "readOnlyRootFilesystem": true,
                        "privileged": false,
                        "capabilities": {"drop": ["ALL"], "add": []},
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                }],
            },
        }));
        let p = ok(&t);
        assert_eq!(p.timeouts.request, Duration::from_secs(300));
        // A readiness probe may name no handler (Knative fills in tcpSocket).
        ok(&with_container(
            json!({"image": "x", "readinessProbe": {"periodSeconds": 1}}),
        ));
    }

    #[test]
    fn probe_handlers() {
        let probe = |field: &str, p: Value| with_container(json!({"image": "x", field: p}));
        let e = err(&probe(
            "readinessProbe",
            json!({"httpGet": {"path": "/"}, "tcpSocket": {}}),
        ));
        assert_eq!(e.paths(), [format!("{C0}.readinessProbe")]);
        assert!(e.problems[0].reason.contains("exactly one handler"), "{e}");
        let e = err(&probe("livenessProbe", json!({"periodSeconds": 3})));
        assert_eq!(e.paths(), [format!("{C0}.livenessProbe")]);
        // An exec handler is reported once, not also as a missing handler.
        let e = err(&probe(
            "startupProbe",
            json!({"exec": {"command": ["true"]}}),
        ));
        assert_eq!(e.paths(), [format!("{C0}.startupProbe.exec")]);
    }

    #[test]
    fn revision_paths_start_at_the_revision() {
        let revision: Revision = serde_json::from_value(json!({
            "metadata": {"name": "hello-00001", "annotations": {"autoscaling.knative.dev/window": "1s"}},
            "spec": {"containers": [{"image": "x", "workingDir": "/x"}]},
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let e = match translate_revision(&revision) {
            Ok(p) => panic!("expected an error, got {p:?}"),
            Err(e) => e,
        };
        assert_eq!(
            e.paths(),
            [
                "metadata.annotations[\"autoscaling.knative.dev/window\"]",
                "spec.containers[0].workingDir",
            ]
        );
    }

    #[test]
    fn from_yaml_manifest() {
        let text = r#"
apiVersion: serving.knative.dev/v1
kind: Service
metadata:
  name: hello
spec:
  template:
    metadata:
      annotations:
        autoscaling.knative.dev/minScale: "1"
        autoscaling.knative.dev/max-scale: "20"
        autoscaling.knative.dev/window: 90s
        lampyr.dev/snapshot-artifact: registry.example/hello@sha256:00
    spec:
      containerConcurrency: 1
      timeoutSeconds: 30
      containers:
        - image: ghcr.io/example/hello
          env:
            - name: TARGET
              value: fibers
          ports:
            - name: h2c
              containerPort: 8080
          resources:
            limits:
              memory: 64Mi
              cpu: "1"
"#;
        let manifests =
            lampyr_api::parse_manifests(text, "hello.yaml").unwrap_or_else(|e| panic!("{e}"));
        let lampyr_api::ManifestObject::Service(svc) = &manifests[0].object else {
            panic!("expected a Service");
        };
        let p = ok(&svc.spec.template);
        assert_eq!(p.container_concurrency, 1);
        assert_eq!((p.scaling.min_scale, p.scaling.max_scale), (1, 20));
        assert_eq!(p.scaling.stable_window, Duration::from_secs(90));
        assert_eq!(p.scaling.target, 1.0);
        assert_eq!(p.timeouts.request, Duration::from_secs(30));
        assert_eq!(p.memory_bytes, Some(64 << 20));
        assert_eq!(p.env, [("TARGET".to_owned(), "fibers".to_owned())]);
        assert_eq!((p.http2, p.port), (true, Some(8080)));
    }
}
