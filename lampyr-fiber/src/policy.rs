//! The fiber policy of one Revision: what Lampyr does with the Knative
//! scaling, timeout, resource and environment fields of its template.
//!
//! A Knative replica is one fiber. A fiber serves one request at a time, so a
//! Revision's in-flight limit is its fiber count; `containerConcurrency` only
//! ever lowers the per-fiber limit, and a fiber's limit is already 1.
//! See `docs/scaling.md`.

use std::time::Duration;

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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScaleMetric {
    /// In-flight requests per replica (Knative's default).
    Concurrency,
    /// Requests per second per replica.
    Rps,
}

/// Scaling bounds and targets, with Knative's defaults applied.
#[derive(Clone, Debug, PartialEq)]
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
    pub stable_window: Duration,
    /// `panic-window-percentage` of the stable window (default 10).
    pub panic_window_percent: f64,
    /// `panic-threshold-percentage` (default 200).
    pub panic_threshold_percent: f64,
    /// `scale-down-delay` (default 0, at most 1 h).
    pub scale_down_delay: Duration,
    /// `scale-to-zero-pod-retention-period` (default 0).
    pub scale_to_zero_retention: Duration,
}

/// Request timeouts (`spec.template.spec.*Seconds`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeoutPolicy {
    /// `timeoutSeconds` (default 300, at most 600).
    pub request: Duration,
    /// `responseStartTimeoutSeconds`; defaults to `request`.
    pub response_start: Duration,
    /// `idleTimeoutSeconds` (0 = none).
    pub idle: Option<Duration>,
}

/// Everything Lampyr needs to run one Revision's fibers.
#[derive(Clone, Debug, PartialEq)]
pub struct FiberPolicy {
    /// `containerConcurrency` (0 = unlimited, at most 1000).
    pub container_concurrency: u32,
    /// Scaling.
    pub scaling: ScalingPolicy,
    /// Timeouts.
    pub timeouts: TimeoutPolicy,
    /// Memory requested or limited for the container, in bytes, if any; must fit the artifact's heap.
    pub memory_bytes: Option<u64>,
    /// The container's environment (`env` with literal values), in order.
    pub env: Vec<(String, String)>,
    /// The first container port is named `h2c`: serve the Revision over HTTP/2 cleartext.
    pub http2: bool,
    /// The first container port's number, if declared (informational for fibers).
    pub port: Option<u16>,
}

impl FiberPolicy {
    /// Deadline for a request: the earlier of the request and response-start timeouts
    /// (a fiber's response starts when the guest returns it whole).
    pub fn request_deadline(&self) -> Duration {
        self.timeouts.request.min(self.timeouts.response_start)
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
            http2: false,
            port: None,
        }
    }
}

impl TimeoutPolicy {
    /// The same `timeout` for the request and its response start, no idle timeout.
    pub fn uniform(timeout: Duration) -> Self {
        TimeoutPolicy { request: timeout, response_start: timeout, idle: None }
    }
}
