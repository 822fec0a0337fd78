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
//! - pod level: `serviceAccountName` and `imagePullSecrets` (the credentials the
//!   artifact is pulled with; no effect on a fiber), `enableServiceLinks: false`, `automountServiceAccountToken:
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

mod annotations;
mod pod;
mod reasons;
#[cfg(test)]
mod tests;

use std::fmt;
use std::time::Duration;

use crate::k8s::ObjectMeta;
use crate::policy::EnvRef;
use crate::serving::OtherFields;
use crate::{Revision, RevisionSpec, RevisionTemplateSpec};

use crate::autoscaler::AutoscalerConfig;

use crate::policy::{FiberPolicy, TimeoutPolicy};

/// Knative's `revision-timeout-seconds` default.
pub const DEFAULT_TIMEOUT_SECONDS: i64 = 300;
/// Knative's `max-revision-timeout-seconds` default.
pub const MAX_TIMEOUT_SECONDS: i64 = 600;
/// Knative's `container-concurrency-max-limit` default.
pub const MAX_CONTAINER_CONCURRENCY: i64 = 1000;

/// Upstream's utilization of an `rps` target (`config-autoscaler` has no key for it).
pub(super) const RPS_TARGET_UTILIZATION: f64 = 70.0;

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
        write!(f, "the Revision template cannot run as fibers ({n} problem{}):", if n == 1 { "" } else { "s" })?;
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
pub fn translate_with(template: &RevisionTemplateSpec, config: &AutoscalerConfig, rules: Rules) -> Result<FiberPolicy, UnsupportedFields> {
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
    let mut cx = Checker { problems: Vec::new(), config, rules };
    let container_concurrency = cx.container_concurrency(spec, prefix);
    let scaling = cx.scaling(metadata, container_concurrency, prefix);
    let timeouts = cx.timeouts(spec, prefix);
    let container = cx.pod_spec(spec, prefix);
    if !cx.problems.is_empty() {
        return Err(UnsupportedFields { problems: cx.problems });
    }
    let (memory_bytes, (env, env_refs), http2, port) = container;
    let args = spec.containers.first().map(|c| c.command.iter().chain(&c.args).flatten().cloned().collect()).unwrap_or_default();
    let readiness = spec.containers.first().and_then(|c| c.readiness_probe.as_ref()).and_then(pod::readiness_check);
    Ok(FiberPolicy { container_concurrency, scaling, timeouts, memory_bytes, env, env_refs, args, http2, port, readiness })
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
pub(super) fn key_path(base: &str, key: &str) -> String {
    let plain = key.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if plain { format!("{base}.{key}") } else { format!("{base}[{key:?}]") }
}

/// Null, `false`, `""`, `[]` and `{}` ask for nothing, so they are accepted anywhere.
pub(super) fn is_empty_value(value: &serde_json::Value) -> bool {
    match value {
        serde_json::Value::Null => true,
        serde_json::Value::Bool(b) => !b,
        serde_json::Value::String(s) => s.is_empty(),
        serde_json::Value::Array(a) => a.is_empty(),
        serde_json::Value::Object(o) => o.is_empty(),
        serde_json::Value::Number(_) => false,
    }
}

impl Checker<'_> {
    fn invalid(&mut self, path: impl Into<String>, reason: impl Into<String>) {
        self.problems.push(FieldProblem { path: path.into(), kind: ProblemKind::Invalid, reason: reason.into() });
    }

    fn unsupported(&mut self, path: impl Into<String>, reason: impl Into<String>) {
        self.problems.push(FieldProblem { path: path.into(), kind: ProblemKind::Unsupported, reason: reason.into() });
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
                    format!("{cc} is out of bounds: must be between 0 and {MAX_CONTAINER_CONCURRENCY}"),
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
                    self.invalid(format!("{prefix}spec.{field}"), format!("{v} is out of bounds: must be between 0 and {max}"));
                    None
                }
            }
        };
        let request = seconds("timeoutSeconds", spec.timeout_seconds, MAX_TIMEOUT_SECONDS).unwrap_or(DEFAULT_TIMEOUT_SECONDS as u64);
        let response_start = seconds("responseStartTimeoutSeconds", spec.response_start_timeout_seconds, MAX_TIMEOUT_SECONDS);
        let idle = seconds("idleTimeoutSeconds", spec.idle_timeout_seconds, MAX_TIMEOUT_SECONDS);
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
}
