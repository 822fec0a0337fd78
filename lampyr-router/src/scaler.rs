//! The scaling decider of one Revision: Knative's KPA decision logic adapted
//! to fibers, as a synchronous state machine driven by the caller's clock.
//!
//! The router feeds one observation per sampling interval through
//! [`Scaler::record`] (including idle intervals, with zeros) and asks for a
//! decision every [`ScalerConfig::tick`] through [`Scaler::decide`]. Nothing
//! here sleeps, spawns or reads the clock: every method takes `now`, which
//! keeps the behaviour deterministic and testable.
//!
//! How a decision is made:
//!
//! 1. Observations land in fixed-size time buckets (a ring, so memory does not
//!    grow with the number of samples). The stable window and the shorter
//!    panic window each average the observations they contain, weighted by
//!    the length of each observation's interval.
//! 2. The averaged metric (in-flight requests or requests per second) divided
//!    by the per-fiber target gives the fibers wanted by each window, limited
//!    by the scale-up and scale-down rates relative to the fibers alive.
//! 3. Panic mode starts when the panic window wants at least
//!    `panic-threshold-percentage` of the fibers alive, lasts until a full
//!    stable window has passed without that condition, and never scales down.
//! 4. `scale-down-delay` holds the highest decision of the last delay period.
//! 5. `min-scale`/`max-scale` bound the result, and it reaches zero only after
//!    the Revision has been idle for the scale-to-zero grace period or the
//!    Revision's retention period, whichever is longer (upstream's rule).
//!
//! The cluster-wide settings (`config-autoscaler`'s grace period, rates and
//! `enable-scale-to-zero`) come from the policy's `cluster` part when it has
//! one (lampyr-controller writes it), else from the [`ScalerConfig`] the
//! caller gives. [`Scaler::update_policy`] applies a changed policy without
//! losing what was observed.

use std::time::{Duration, Instant};

use lampyr_api::policy::{ClusterScaling, ScaleMetric, ScalingPolicy};

/// Most buckets a time window keeps; coarser buckets are used beyond that.
const MAX_BUCKETS: u64 = 720;

/// Preferred bucket width of the load windows.
const PREFERRED_GRANULARITY: Duration = Duration::from_secs(1);

/// Smallest per-fiber target, so that a degenerate policy cannot divide by zero.
const MIN_TARGET: f64 = 0.01;

/// Tolerance when rounding fiber counts up, so that `1.4 / 0.7` is 2 fibers and not 3.
const CEIL_EPSILON: f64 = 1e-9;

/// The scaler's own settings (`ly run`'s and fiberd's flags). Those that are
/// `config-autoscaler` settings apply only to a policy without a `cluster` part.
#[derive(Clone, Debug, PartialEq)]
pub struct ScalerConfig {
    /// How often [`Scaler::decide`] is called (default 2 s).
    pub tick: Duration,
    /// `scale-to-zero-grace-period`: idle time before the last fiber may stop (default 30 s).
    pub scale_to_zero_grace_period: Duration,
    /// `enable-scale-to-zero` (default true).
    pub enable_scale_to_zero: bool,
    /// `max-scale-up-rate`: at most this many times the fibers alive per decision (default 1000).
    pub max_scale_up_rate: f64,
    /// `max-scale-down-rate`: at least the fibers alive divided by this per decision (default 2).
    pub max_scale_down_rate: f64,
    /// Most fibers of one Revision when its `max-scale` is 0 (unbounded).
    pub max_fibers: u32,
}

impl Default for ScalerConfig {
    fn default() -> Self {
        Self {
            tick: Duration::from_secs(2),
            scale_to_zero_grace_period: Duration::from_secs(30),
            enable_scale_to_zero: true,
            max_scale_up_rate: 1000.0,
            max_scale_down_rate: 2.0,
            max_fibers: 64,
        }
    }
}

impl ScalerConfig {
    /// These settings with a policy's cluster part, when it has one, in place
    /// of the `config-autoscaler` ones.
    pub fn with_cluster(&self, cluster: Option<&ClusterScaling>) -> ScalerConfig {
        match cluster {
            None => self.clone(),
            Some(c) => ScalerConfig {
                scale_to_zero_grace_period: c.scale_to_zero_grace_period,
                enable_scale_to_zero: c.enable_scale_to_zero,
                max_scale_up_rate: c.max_scale_up_rate,
                max_scale_down_rate: c.max_scale_down_rate,
                ..self.clone()
            },
        }
    }
}

/// The outcome of one [`Scaler::decide`] call.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Decision {
    /// Fibers the Revision should have now, bounds and scale-to-zero rules applied.
    pub desired: u32,
    /// Whether the decider is in panic mode.
    pub panicking: bool,
    /// Average in-flight requests over the stable window.
    pub stable_concurrency: f64,
    /// Average in-flight requests over the panic window.
    pub panic_concurrency: f64,
    /// Average requests per second over the stable window.
    pub stable_rps: f64,
    /// Average requests per second over the panic window.
    pub panic_rps: f64,
}

/// Sums of the observations whose interval ended inside one bucket.
#[derive(Clone, Copy, Debug, Default)]
struct LoadBucket {
    /// Bucket number (time since the window's base divided by its granularity).
    index: u64,
    /// Whether the slot holds data for `index`.
    used: bool,
    /// Seconds of observation.
    seconds: f64,
    /// In-flight requests integrated over time (request-seconds).
    request_seconds: f64,
    /// Requests that arrived.
    arrivals: f64,
}

/// Aggregates of a load window.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct LoadAverage {
    concurrency: f64,
    rps: f64,
}

/// A ring of time buckets holding the observations of the last stable window.
#[derive(Debug)]
struct LoadWindow {
    base: Instant,
    granularity: Duration,
    buckets: Vec<LoadBucket>,
}

impl LoadWindow {
    fn new(base: Instant, granularity: Duration, len: u64) -> Self {
        let len = usize::try_from(len.max(1)).unwrap_or(usize::MAX);
        Self { base, granularity, buckets: vec![LoadBucket::default(); len] }
    }

    fn index(&self, t: Instant) -> u64 {
        bucket_index(self.base, self.granularity, t)
    }

    /// The same observations in buckets of another width and number: each old
    /// bucket lands in the new bucket holding its start.
    fn rebucketed(&self, granularity: Duration, len: u64) -> LoadWindow {
        let mut window = LoadWindow::new(self.base, granularity, len);
        let mut used: Vec<&LoadBucket> = self.buckets.iter().filter(|b| b.used).collect();
        used.sort_by_key(|b| b.index);
        for b in used {
            let offset = self.granularity.as_nanos().saturating_mul(u128::from(b.index));
            let start = u64::try_from(offset).ok().and_then(|n| self.base.checked_add(Duration::from_nanos(n)));
            if let Some(start) = start {
                window.add(start, b.seconds, b.request_seconds, b.arrivals);
            }
        }
        window
    }

    fn add(&mut self, t: Instant, seconds: f64, request_seconds: f64, arrivals: f64) {
        let k = self.index(t);
        let len = self.buckets.len() as u64;
        let Some(slot) = self.buckets.get_mut(slot_of(k, len)) else {
            return;
        };
        if slot.used && slot.index > k {
            // A newer bucket already reuses this slot: the observation is outside every window.
            return;
        }
        if !slot.used || slot.index != k {
            *slot = LoadBucket { index: k, used: true, ..LoadBucket::default() };
        }
        slot.seconds += seconds;
        slot.request_seconds += request_seconds;
        slot.arrivals += arrivals;
    }

    /// Averages over the `n` most recent buckets ending with the one holding `now`.
    fn average(&self, now: Instant, n: u64) -> LoadAverage {
        let current = self.index(now);
        let (mut seconds, mut request_seconds, mut arrivals) = (0.0, 0.0, 0.0);
        for b in self.buckets.iter().filter(|b| b.used && b.index <= current && current - b.index < n) {
            seconds += b.seconds;
            request_seconds += b.request_seconds;
            arrivals += b.arrivals;
        }
        if seconds <= 0.0 {
            return LoadAverage::default();
        }
        LoadAverage { concurrency: request_seconds / seconds, rps: arrivals / seconds }
    }
}

/// A ring of time buckets holding the highest decision made in each.
#[derive(Debug)]
struct MaxWindow {
    base: Instant,
    granularity: Duration,
    /// `(bucket index, highest value)`.
    buckets: Vec<Option<(u64, u32)>>,
}

impl MaxWindow {
    fn new(base: Instant, span: Duration, tick: Duration) -> Self {
        let granularity = tick.max(div_duration(span, MAX_BUCKETS)).max(Duration::from_nanos(1));
        let len = usize::try_from(ceil_div(span, granularity).max(1)).unwrap_or(usize::MAX);
        Self { base, granularity, buckets: vec![None; len] }
    }

    /// Records `value` at `now` and returns the highest value of the window ending at `now`.
    fn record(&mut self, now: Instant, value: u32) -> u32 {
        let k = bucket_index(self.base, self.granularity, now);
        let len = self.buckets.len() as u64;
        if let Some(slot) = self.buckets.get_mut(slot_of(k, len)) {
            *slot = match *slot {
                Some((i, v)) if i == k => Some((k, v.max(value))),
                Some((i, _)) if i > k => *slot,
                _ => Some((k, value)),
            };
        }
        self.buckets.iter().flatten().filter(|(i, _)| *i <= k && k - *i < len).map(|(_, v)| *v).fold(value, u32::max)
    }
}

/// The windows of a policy, in time and in buckets.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Windows {
    /// Stable window (at least one tick).
    stable: Duration,
    /// Panic window (at least one tick, at most the stable window).
    panic: Duration,
    /// Bucket width.
    granularity: Duration,
    /// Buckets in the stable and panic windows.
    stable_buckets: u64,
    panic_buckets: u64,
}

impl Windows {
    fn of(policy: &ScalingPolicy, tick: Duration) -> Self {
        let stable = policy.stable_window.max(tick);
        let panic_fraction = finite_or(policy.panic_window_percent, 10.0) / 100.0;
        let panic = stable.mul_f64(panic_fraction.clamp(0.0, 1.0)).clamp(tick, stable);
        // One-second buckets when possible, finer when the panic window is shorter,
        // coarser when the stable window would need too many.
        let granularity = PREFERRED_GRANULARITY.min(panic).max(div_duration(stable, MAX_BUCKETS)).max(Duration::from_nanos(1));
        let stable_buckets = ceil_div(stable, granularity).max(1);
        let panic_buckets = round_div(panic, granularity).clamp(1, stable_buckets);
        Windows { stable, panic, granularity, stable_buckets, panic_buckets }
    }
}

/// The scaling decider of one Revision.
#[derive(Debug)]
pub struct Scaler {
    policy: ScalingPolicy,
    /// The caller's settings, before the policy's cluster part.
    base: ScalerConfig,
    /// The settings in effect: `base` with the policy's cluster part.
    config: ScalerConfig,
    windows: Windows,
    load: LoadWindow,
    delay: Option<MaxWindow>,
    /// End of the last observation's interval (creation time before any).
    last_sample: Instant,
    /// Whether an observation covering a non-empty interval was recorded.
    has_data: bool,
    /// Last time a request was in flight, arrived or activated the Revision (creation time before any).
    last_activity: Instant,
    /// Last time the panic condition held, while in panic mode.
    panic_since: Option<Instant>,
    /// Highest decision made in the current panic.
    max_panic: u32,
    /// Last activation from zero and the fibers it asked for.
    activation: Option<(Instant, u32)>,
}

impl Scaler {
    /// A decider for a Revision loaded at `now`, with `base` for what the
    /// policy's cluster part does not say.
    pub fn new(policy: ScalingPolicy, base: ScalerConfig, now: Instant) -> Self {
        let tick = tick_of(&base);
        let windows = Windows::of(&policy, tick);
        let delay = (!policy.scale_down_delay.is_zero()).then(|| MaxWindow::new(now, policy.scale_down_delay, tick));
        Self {
            load: LoadWindow::new(now, windows.granularity, windows.stable_buckets),
            config: base.with_cluster(policy.cluster.as_ref()),
            base,
            policy,
            windows,
            delay,
            last_sample: now,
            has_data: false,
            last_activity: now,
            panic_since: None,
            max_panic: 0,
            activation: None,
        }
    }

    /// The Revision's scaling policy.
    pub fn policy(&self) -> &ScalingPolicy {
        &self.policy
    }

    /// The settings in effect: the policy's cluster part over the caller's.
    pub fn config(&self) -> &ScalerConfig {
        &self.config
    }

    /// The stable and panic windows in effect (after the one-tick minimums).
    pub fn windows(&self) -> (Duration, Duration) {
        (self.windows.stable, self.windows.panic)
    }

    /// Applies a changed policy from `now` on, keeping what was observed: the
    /// load (moved into the new windows' buckets), the last activity, panic
    /// mode and a wake-up in progress. A changed `scale-down-delay` starts
    /// holding decisions afresh.
    pub fn update_policy(&mut self, policy: ScalingPolicy, now: Instant) {
        if policy == self.policy {
            return;
        }
        let tick = tick_of(&self.base);
        let windows = Windows::of(&policy, tick);
        if (windows.granularity, windows.stable_buckets) != (self.windows.granularity, self.windows.stable_buckets) {
            self.load = self.load.rebucketed(windows.granularity, windows.stable_buckets);
        }
        if policy.scale_down_delay != self.policy.scale_down_delay {
            self.delay = (!policy.scale_down_delay.is_zero()).then(|| MaxWindow::new(now, policy.scale_down_delay, tick));
        }
        self.config = self.base.with_cluster(policy.cluster.as_ref());
        self.windows = windows;
        self.policy = policy;
    }

    /// One observation: average in-flight requests (executing + queued) over the
    /// sampling interval ending at `now`, and requests that arrived in it.
    ///
    /// The interval is taken to start at the previous observation (or at
    /// [`Scaler::new`] for the first), so call this every sampling interval,
    /// idle ones included. An interval longer than the stable window counts
    /// for its last stable window only, with its arrivals prorated.
    pub fn record(&mut self, now: Instant, concurrency: f64, arrivals: u64) {
        let interval = now.saturating_duration_since(self.last_sample);
        self.last_sample = self.last_sample.max(now);
        let concurrency = if concurrency.is_finite() && concurrency > 0.0 { concurrency } else { 0.0 };
        if concurrency > 0.0 || arrivals > 0 {
            self.last_activity = self.last_activity.max(now);
        }
        let mut arrivals = arrivals as f64;
        let mut seconds = interval.as_secs_f64();
        let window = self.windows.stable.as_secs_f64();
        if seconds > window {
            arrivals *= window / seconds;
            seconds = window;
        }
        if seconds > 0.0 {
            self.has_data = true;
        }
        self.load.add(now, seconds, concurrency * seconds, arrivals);
    }

    /// The decision at `now` given the fibers alive now; call every `config.tick`.
    pub fn decide(&mut self, now: Instant, current: u32) -> Decision {
        let stable = self.load.average(now, self.windows.stable_buckets);
        let panic = self.load.average(now, self.windows.panic_buckets);
        let mut decision = Decision {
            desired: 0,
            panicking: false,
            stable_concurrency: stable.concurrency,
            panic_concurrency: panic.concurrency,
            stable_rps: stable.rps,
            panic_rps: panic.rps,
        };
        let activation_floor = self.activation_floor(now);

        if !self.has_data {
            // Nothing observed yet: hold what is running (or being started), never scale to zero.
            decision.desired = self.bounded(current.max(self.initial()).max(activation_floor));
            return decision;
        }

        let (observed_stable, observed_panic) = match self.policy.metric {
            ScaleMetric::Concurrency => (stable.concurrency, panic.concurrency),
            ScaleMetric::Rps => (stable.rps, panic.rps),
        };
        let target = self.per_fiber_target();
        let want_stable = ceil_tolerant(observed_stable / target);
        let want_panic = ceil_tolerant(observed_panic / target);

        let alive = f64::from(current);
        let ready = alive.max(1.0);
        let up_limit = (ready * finite_or(self.config.max_scale_up_rate, 1000.0).max(1.0)).ceil();
        let down_rate = finite_or(self.config.max_scale_down_rate, 2.0);
        let down_limit = if down_rate > 0.0 { (alive / down_rate).floor() } else { alive };
        let limit = |want: f64| to_u32(want.max(down_limit).min(up_limit));
        let mut desired_stable = limit(want_stable);
        let mut desired_panic = limit(want_panic);

        // Any traffic at all wants at least activation-scale fibers.
        let activation_scale = self.policy.activation_scale;
        if activation_scale > 1 {
            if want_stable > 0.0 {
                desired_stable = desired_stable.max(activation_scale);
            }
            if want_panic > 0.0 {
                desired_panic = desired_panic.max(activation_scale);
            }
        }

        let threshold = finite_or(self.policy.panic_threshold_percent, 200.0) / 100.0;
        let over_threshold = want_panic > 0.0 && want_panic / ready >= threshold;
        if over_threshold {
            self.panic_since = Some(now);
        } else if let Some(since) = self.panic_since
            && now.saturating_duration_since(since) > self.windows.stable
        {
            self.panic_since = None;
            self.max_panic = 0;
        }

        let mut desired = desired_stable;
        if self.panic_since.is_some() {
            decision.panicking = true;
            self.max_panic = self.max_panic.max(desired_stable.max(desired_panic));
            desired = self.max_panic;
        }
        desired = desired.max(activation_floor);

        if let Some(delay) = self.delay.as_mut() {
            desired = delay.record(now, desired);
        }

        desired = self.bounded(desired);
        if desired == 0 && !self.may_scale_to_zero(now) {
            desired = if !self.config.enable_scale_to_zero || current > 0 { 1 } else { 0 };
        }
        decision.desired = desired;
        decision
    }

    /// A request arrived while the Revision had no fiber: returns how many fibers
    /// to start (activation-scale, at least 1, within bounds) and records the activation.
    ///
    /// The activation keeps at least that many fibers wanted for a stable window,
    /// as the activator's first report does in Knative.
    pub fn activate(&mut self, now: Instant) -> u32 {
        let fibers = self.bounded(self.policy.activation_scale.max(1)).max(1);
        self.last_activity = self.last_activity.max(now);
        self.activation = Some((now, fibers));
        fibers
    }

    /// Fibers to start when the Revision loads (initial-scale within bounds; 0 stays 0
    /// unless min-scale says otherwise).
    pub fn initial(&self) -> u32 {
        self.bounded(self.policy.initial_scale)
    }

    /// Most fibers: `max-scale`, or the runtime's cap when it is 0.
    pub fn max_fibers(&self) -> u32 {
        if self.policy.max_scale > 0 { self.policy.max_scale } else { self.config.max_fibers.max(1) }
    }

    /// Requests in flight (concurrency) or per second (rps) one fiber should carry.
    pub fn per_fiber_target(&self) -> f64 {
        let utilization = finite_or(self.policy.target_utilization_percent, 70.0).clamp(0.0, 100.0) / 100.0;
        let target = finite_or(self.policy.target, 0.0);
        let per_fiber = match self.policy.metric {
            // A fiber serves one request at a time: it can never carry more than 1 in flight.
            ScaleMetric::Concurrency => target.min(1.0) * utilization,
            ScaleMetric::Rps => target * utilization,
        };
        per_fiber.max(MIN_TARGET)
    }

    fn bounded(&self, n: u32) -> u32 {
        n.max(self.policy.min_scale).min(self.max_fibers())
    }

    fn activation_floor(&self, now: Instant) -> u32 {
        match self.activation {
            Some((at, fibers)) if now.saturating_duration_since(at) < self.windows.stable => fibers,
            _ => 0,
        }
    }

    fn may_scale_to_zero(&self, now: Instant) -> bool {
        // Upstream waits for the longer of the two (`lastPodMaxTimeout`).
        let idle_needed = self.config.scale_to_zero_grace_period.max(self.policy.scale_to_zero_retention);
        self.config.enable_scale_to_zero && self.policy.min_scale == 0 && now.saturating_duration_since(self.last_activity) >= idle_needed
    }

    #[cfg(test)]
    fn buffered_buckets(&self) -> usize {
        self.load.buckets.len() + self.delay.as_ref().map_or(0, |d| d.buckets.len())
    }
}

/// The decision interval, at least a millisecond.
fn tick_of(config: &ScalerConfig) -> Duration {
    config.tick.max(Duration::from_millis(1))
}

fn bucket_index(base: Instant, granularity: Duration, t: Instant) -> u64 {
    let nanos = granularity.as_nanos().max(1);
    u64::try_from(t.saturating_duration_since(base).as_nanos() / nanos).unwrap_or(u64::MAX)
}

fn slot_of(index: u64, len: u64) -> usize {
    usize::try_from(index % len.max(1)).unwrap_or(0)
}

fn div_duration(d: Duration, n: u64) -> Duration {
    Duration::from_nanos(u64::try_from(d.as_nanos() / u128::from(n.max(1))).unwrap_or(u64::MAX))
}

fn ceil_div(a: Duration, b: Duration) -> u64 {
    let b = b.as_nanos().max(1);
    u64::try_from(a.as_nanos().div_ceil(b)).unwrap_or(u64::MAX)
}

fn round_div(a: Duration, b: Duration) -> u64 {
    let b = b.as_nanos().max(1);
    u64::try_from((a.as_nanos() + b / 2) / b).unwrap_or(u64::MAX)
}

fn ceil_tolerant(x: f64) -> f64 {
    if x.is_finite() { (x - CEIL_EPSILON * x.abs().max(1.0)).ceil().max(0.0) } else { 0.0 }
}

fn finite_or(x: f64, fallback: f64) -> f64 {
    if x.is_finite() { x } else { fallback }
}

fn to_u32(x: f64) -> u32 {
    // Saturating float-to-int conversion (NaN becomes 0).
    x as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    const TICK: Duration = Duration::from_secs(2);

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn policy() -> ScalingPolicy {
        ScalingPolicy::default()
    }

    /// `config-autoscaler`'s defaults, as a policy's cluster part.
    fn default_cluster() -> ClusterScaling {
        lampyr_api::autoscaler::AutoscalerConfig::default().cluster_scaling()
    }

    /// Drives a scaler in ticks, applying each decision as the next tick's fiber count.
    struct Sim {
        scaler: Scaler,
        base: Instant,
        t: Duration,
        current: u32,
    }

    impl Sim {
        fn new(policy: ScalingPolicy, config: ScalerConfig, current: u32) -> Self {
            let base = Instant::now();
            Self { scaler: Scaler::new(policy, config, base), base, t: Duration::ZERO, current }
        }

        fn now(&self) -> Instant {
            self.base + self.t
        }

        /// One tick with the given load; the decision becomes the fiber count.
        fn tick(&mut self, concurrency: f64, arrivals: u64) -> Decision {
            self.t += TICK;
            let now = self.now();
            self.scaler.record(now, concurrency, arrivals);
            let d = self.scaler.decide(now, self.current);
            self.current = d.desired;
            d
        }

        fn run(&mut self, ticks: u32, concurrency: f64, arrivals: u64) -> Decision {
            let mut last = None;
            for _ in 0..ticks {
                last = Some(self.tick(concurrency, arrivals));
            }
            last.unwrap_or_else(|| self.scaler.decide(self.now(), self.current))
        }
    }

    #[test]
    fn steady_load_gives_expected_fibers() {
        // 3.5 requests in flight / 0.7 per fiber = 5 fibers.
        let mut sim = Sim::new(policy(), ScalerConfig::default(), 5);
        let d = sim.run(60, 3.5, 10);
        assert_eq!(d.desired, 5);
        assert!(!d.panicking);
        assert!((d.stable_concurrency - 3.5).abs() < 1e-9);
        assert!((d.panic_concurrency - 3.5).abs() < 1e-9);
        assert!((d.stable_rps - 5.0).abs() < 1e-9);
    }

    #[test]
    fn concurrency_target_is_capped_at_one_request_per_fiber() {
        let s = Scaler::new(policy(), ScalerConfig::default(), Instant::now());
        assert!((s.per_fiber_target() - 0.7).abs() < 1e-12);
        let mut p = policy();
        p.target = 0.5;
        p.target_utilization_percent = 100.0;
        let s = Scaler::new(p, ScalerConfig::default(), Instant::now());
        assert!((s.per_fiber_target() - 0.5).abs() < 1e-12);
    }

    #[test]
    fn rounding_tolerates_float_error() {
        // 2.1 / 0.7 is 3.0000000000000004 in floating point: still 3 fibers.
        let mut sim = Sim::new(policy(), ScalerConfig::default(), 3);
        assert_eq!(sim.run(40, 2.1, 0).desired, 3);
    }

    #[test]
    fn burst_panics_and_never_scales_down_while_panicking() {
        let mut sim = Sim::new(policy(), ScalerConfig::default(), 1);
        let d = sim.run(30, 0.7, 2);
        assert_eq!(d.desired, 1);
        assert!(!d.panicking);

        // A burst of 14 in flight for 4 s: the 6 s panic window sees it at once.
        let d = sim.tick(14.0, 40);
        assert!(d.panicking);
        assert!(d.desired >= 8, "panic scale-up, got {}", d.desired);
        let burst_end = sim.t;
        let mut peak = d.desired;
        let d = sim.tick(14.0, 40);
        assert!(d.panicking);
        assert!(d.desired >= peak);
        peak = d.desired;
        let last_over = burst_end; // the condition can only hold while the burst is in the panic window

        // Back to the old load: no scale-down while panicking.
        let mut exited_at = None;
        for _ in 0..60 {
            let d = sim.tick(0.7, 2);
            if d.panicking {
                assert!(d.desired >= peak, "scaled down from {peak} to {} in panic", d.desired);
                peak = d.desired;
            } else {
                exited_at = Some(sim.t);
                assert!(d.desired < peak, "scales down after panic");
                break;
            }
        }
        let exited_at = exited_at.unwrap_or_default();
        // Panic lasts a full stable window after the condition last held.
        assert!(exited_at > last_over + secs(60), "left panic at {exited_at:?}");
        assert!(exited_at <= last_over + secs(60) + TICK * 4, "left panic at {exited_at:?}");
        // Eventually back to one fiber (scale-down rate halves per tick).
        assert_eq!(sim.run(30, 0.7, 2).desired, 1);
    }

    #[test]
    fn panic_needs_threshold() {
        // 1.5x the fibers alive is below the 200% threshold: stable scaling only.
        let mut sim = Sim::new(policy(), ScalerConfig::default(), 10);
        sim.run(30, 7.0, 10);
        let d = sim.tick(10.5, 10); // panic window wants 15 of 10 alive
        assert!(!d.panicking);
    }

    #[test]
    fn scale_down_delay_holds_the_max() {
        let mut p = policy();
        p.stable_window = secs(6);
        p.scale_down_delay = secs(20);
        p.min_scale = 1;
        let mut sim = Sim::new(p.clone(), ScalerConfig::default(), 5);
        assert_eq!(sim.run(10, 3.5, 0).desired, 5);
        let drop_at = sim.t;
        // Load drops to one fiber's worth; the stable window forgets the old load after 6 s
        // but the decision stays at 5 until 20 s after the last decision for 5.
        let mut last_five = drop_at;
        loop {
            let d = sim.tick(0.7, 0);
            if d.desired == 5 {
                last_five = sim.t;
            } else {
                break;
            }
            assert!(sim.t < drop_at + secs(60), "never scaled down");
        }
        // The last decision for 5 was at drop_at; it is held while less than 20 s old.
        assert_eq!(last_five - drop_at, secs(18), "held for {:?}", last_five - drop_at);
        assert_eq!(sim.run(20, 0.7, 0).desired, 1);

        // Without the delay the same drop is followed at once (rate-limited).
        p.scale_down_delay = Duration::ZERO;
        let mut sim = Sim::new(p, ScalerConfig::default(), 5);
        sim.run(10, 3.5, 0);
        let mut ticks = 0;
        while sim.tick(0.7, 0).desired == 5 {
            ticks += 1;
            assert!(ticks < 10);
        }
        assert!(ticks <= 3);
    }

    #[test]
    fn min_and_max_bounds() {
        let mut p = policy();
        p.min_scale = 2;
        p.max_scale = 3;
        let mut sim = Sim::new(p.clone(), ScalerConfig::default(), 2);
        assert_eq!(sim.run(60, 0.0, 0).desired, 2, "min-scale holds without traffic");
        assert_eq!(sim.run(60, 100.0, 1000).desired, 3, "max-scale caps");

        p.min_scale = 0;
        p.max_scale = 0;
        let config = ScalerConfig { max_fibers: 7, ..ScalerConfig::default() };
        let mut sim = Sim::new(p, config, 1);
        assert_eq!(sim.run(60, 100.0, 1000).desired, 7, "runtime cap when max-scale is 0");
    }

    #[test]
    fn initial_scale_within_bounds() {
        let base = Instant::now();
        let mut p = policy();
        assert_eq!(Scaler::new(p.clone(), ScalerConfig::default(), base).initial(), 1);
        p.initial_scale = 0;
        assert_eq!(Scaler::new(p.clone(), ScalerConfig::default(), base).initial(), 0);
        p.min_scale = 2;
        assert_eq!(Scaler::new(p.clone(), ScalerConfig::default(), base).initial(), 2);
        p.initial_scale = 10;
        p.max_scale = 4;
        assert_eq!(Scaler::new(p, ScalerConfig::default(), base).initial(), 4);
    }

    #[test]
    fn rps_metric() {
        let mut p = policy();
        p.metric = ScaleMetric::Rps;
        p.target = 200.0;
        // 700 requests per 2 s tick = 350 rps; 350 / 140 per fiber = 2.5 -> 3 fibers.
        let mut sim = Sim::new(p.clone(), ScalerConfig::default(), 3);
        let d = sim.run(60, 0.5, 700);
        assert!((d.stable_rps - 350.0).abs() < 1e-9);
        assert_eq!(d.desired, 3);

        // Concurrency is not what drives rps scaling (a fiber's target is not capped at 1 here).
        let mut sim = Sim::new(p, ScalerConfig::default(), 1);
        assert_eq!(sim.run(60, 5.0, 100).desired, 1);
    }

    #[test]
    fn scale_to_zero_only_after_grace_and_retention() {
        // Upstream waits for the longer of the grace period and the retention period.
        for (retention, zero_after) in [(secs(10), secs(30)), (secs(40), secs(40))] {
            let mut p = policy();
            p.stable_window = secs(6);
            p.scale_to_zero_retention = retention;
            let mut sim = Sim::new(p, ScalerConfig::default(), 1);
            sim.run(10, 0.7, 2);
            let last_traffic = sim.t;
            while sim.tick(0.0, 0).desired == 1 {
                assert!(sim.t < last_traffic + secs(100), "never scaled to zero");
            }
            assert_eq!(sim.t - last_traffic, zero_after, "retention {retention:?}");
        }

        let mut p = policy();
        p.stable_window = secs(6);
        p.scale_to_zero_retention = secs(40);
        let mut sim = Sim::new(p.clone(), ScalerConfig::default(), 1);
        sim.run(10, 0.7, 2);
        let last_traffic = sim.t;
        loop {
            let d = sim.tick(0.0, 0);
            if sim.t < last_traffic + secs(40) {
                assert_eq!(d.desired, 1, "scaled to zero {:?} after traffic", sim.t - last_traffic);
            } else {
                assert_eq!(d.desired, 0, "still up {:?} after traffic", sim.t - last_traffic);
                break;
            }
        }
        // At zero it stays at zero.
        assert_eq!(sim.run(10, 0.0, 0).desired, 0);

        // Never before the grace period from load, even without any traffic.
        p.scale_to_zero_retention = Duration::ZERO;
        let mut sim = Sim::new(p.clone(), ScalerConfig::default(), 1);
        for _ in 0..14 {
            assert_eq!(sim.tick(0.0, 0).desired, 1);
        }
        assert_eq!(sim.tick(0.0, 0).desired, 0, "at 30 s");

        // Not at all when the cluster disables it, or min-scale is set.
        let config = ScalerConfig { enable_scale_to_zero: false, ..ScalerConfig::default() };
        let mut sim = Sim::new(p.clone(), config.clone(), 1);
        assert_eq!(sim.run(100, 0.0, 0).desired, 1);
        let mut sim = Sim::new(p.clone(), config, 0);
        assert_eq!(sim.run(1, 0.0, 0).desired, 1, "scale-to-zero disabled starts a fiber");
        p.min_scale = 1;
        let mut sim = Sim::new(p, ScalerConfig::default(), 1);
        assert_eq!(sim.run(100, 0.0, 0).desired, 1);
    }

    #[test]
    fn the_policys_cluster_part_replaces_the_callers_settings() {
        let cluster = ClusterScaling {
            enable_scale_to_zero: false,
            scale_to_zero_grace_period: secs(5),
            max_scale_up_rate: 2.0,
            max_scale_down_rate: 4.0,
        };
        let base = ScalerConfig { tick: secs(1), max_fibers: 9, ..ScalerConfig::default() };
        let with = base.with_cluster(Some(&cluster));
        assert_eq!(
            with,
            ScalerConfig {
                tick: secs(1),
                scale_to_zero_grace_period: secs(5),
                enable_scale_to_zero: false,
                max_scale_up_rate: 2.0,
                max_scale_down_rate: 4.0,
                max_fibers: 9,
            }
        );
        assert_eq!(base.with_cluster(None), base, "a Home from an older controller: the caller's settings");
        let mut p = policy();
        p.cluster = Some(cluster);
        assert_eq!(Scaler::new(p, base, Instant::now()).config(), &with);

        // The grace period comes from the policy: 5 s here, not the caller's 30 s.
        let mut p = policy();
        p.stable_window = secs(6);
        p.cluster = Some(ClusterScaling { scale_to_zero_grace_period: secs(6), ..default_cluster() });
        let mut sim = Sim::new(p, ScalerConfig::default(), 1);
        sim.run(5, 0.7, 2);
        let last_traffic = sim.t;
        while sim.tick(0.0, 0).desired == 1 {
            assert!(sim.t < last_traffic + secs(60), "never scaled to zero");
        }
        assert_eq!(sim.t - last_traffic, secs(6));
    }

    #[test]
    fn a_changed_policy_applies_at_once_and_keeps_what_was_observed() {
        let mut p = policy();
        p.stable_window = secs(6);
        let mut sim = Sim::new(p.clone(), ScalerConfig::default(), 1);
        sim.run(10, 0.7, 2);
        let last_traffic = sim.t;
        sim.run(3, 0.0, 0);
        // The cluster disables scale to zero: the idle Revision keeps its fiber.
        let mut held = p.clone();
        held.cluster = Some(ClusterScaling { enable_scale_to_zero: false, ..default_cluster() });
        sim.scaler.update_policy(held, sim.now());
        assert!(!sim.scaler.config().enable_scale_to_zero);
        assert_eq!(sim.run(40, 0.0, 0).desired, 1, "never to zero while disabled");
        // A shorter grace period: idle time counts from the last traffic, before the change.
        let mut short = p.clone();
        short.cluster = Some(ClusterScaling { scale_to_zero_grace_period: secs(2), ..default_cluster() });
        sim.scaler.update_policy(short, sim.now());
        assert!(sim.t - last_traffic > secs(30));
        assert_eq!(sim.tick(0.0, 0).desired, 0, "at once: idle for long enough already");

        // A new stable window keeps the load observed so far.
        let mut sim = Sim::new(p.clone(), ScalerConfig::default(), 5);
        sim.run(10, 3.5, 10);
        let mut longer = p.clone();
        longer.stable_window = secs(60);
        sim.scaler.update_policy(longer, sim.now());
        assert_eq!(sim.scaler.windows(), (secs(60), secs(6)));
        let d = sim.scaler.decide(sim.now(), 5);
        assert!((d.stable_concurrency - 3.5).abs() < 1e-9, "{d:?}");
        assert_eq!(d.desired, 5);
        // A higher min-scale applies at the next decision.
        let mut floor = p;
        floor.stable_window = secs(60);
        floor.min_scale = 8;
        sim.scaler.update_policy(floor, sim.now());
        assert_eq!(sim.tick(3.5, 10).desired, 8);
    }

    #[test]
    fn arrivals_alone_count_as_activity() {
        // Short requests: average concurrency rounds to nothing, but arrivals keep it warm.
        let mut p = policy();
        p.stable_window = secs(6);
        let mut sim = Sim::new(p, ScalerConfig::default(), 1);
        assert_eq!(sim.run(50, 0.0, 1).desired, 1);
    }

    #[test]
    fn no_samples_keeps_current() {
        let base = Instant::now();
        let mut s = Scaler::new(policy(), ScalerConfig::default(), base);
        assert_eq!(s.decide(base + secs(2), 4).desired, 4);
        assert_eq!(s.decide(base + secs(600), 3).desired, 3);
        assert_eq!(s.decide(base + secs(600), 0).desired, 1, "initial scale being started");
        let mut p = policy();
        p.initial_scale = 0;
        let mut s = Scaler::new(p, ScalerConfig::default(), base);
        assert_eq!(s.decide(base + secs(2), 0).desired, 0);
        // A zero-length interval is not data.
        s.record(base, 0.0, 0);
        assert_eq!(s.decide(base + secs(2), 2).desired, 2);
    }

    #[test]
    fn activation_returns_activation_scale() {
        let base = Instant::now();
        let mut p = policy();
        p.stable_window = secs(6);
        p.activation_scale = 3;
        let mut s = Scaler::new(p.clone(), ScalerConfig::default(), base);
        // Idle long enough to be at zero.
        for i in 1..=30 {
            s.record(base + secs(2 * i), 0.0, 0);
            s.decide(base + secs(2 * i), 0);
        }
        assert_eq!(s.decide(base + secs(60), 0).desired, 0);
        let t = base + secs(61);
        assert_eq!(s.activate(t), 3);
        // The fibers are not up yet: the next decision keeps them coming.
        assert_eq!(s.decide(base + secs(62), 0).desired, 3);
        // Requests keep at least activation-scale fibers.
        s.record(base + secs(62), 0.2, 1);
        assert_eq!(s.decide(base + secs(62), 3).desired, 3);

        let mut bounded = p.clone();
        bounded.max_scale = 2;
        assert_eq!(Scaler::new(bounded, ScalerConfig::default(), base).activate(t), 2);
        let mut zero = p.clone();
        zero.activation_scale = 0;
        assert_eq!(Scaler::new(zero, ScalerConfig::default(), base).activate(t), 1);
        let mut min = p;
        min.activation_scale = 1;
        min.min_scale = 2;
        assert_eq!(Scaler::new(min, ScalerConfig::default(), base).activate(t), 2);
    }

    #[test]
    fn activation_resets_idle_time() {
        let base = Instant::now();
        let mut p = policy();
        p.stable_window = secs(6);
        let mut s = Scaler::new(p, ScalerConfig::default(), base);
        for i in 1..=20 {
            s.record(base + secs(2 * i), 0.0, 0);
        }
        assert_eq!(s.activate(base + secs(40)), 1);
        for i in 21..=30 {
            s.record(base + secs(2 * i), 0.0, 0);
            assert_eq!(s.decide(base + secs(2 * i), 1).desired, 1, "at {} s", 2 * i);
        }
        s.record(base + secs(70), 0.0, 0);
        assert_eq!(s.decide(base + secs(70), 1).desired, 0);
    }

    #[test]
    fn scale_up_rate_limit() {
        let config = ScalerConfig { max_scale_up_rate: 2.0, ..ScalerConfig::default() };
        let mut sim = Sim::new(policy(), config, 2);
        sim.run(30, 1.4, 0);
        // 14 in flight wants 20 fibers; at most double per decision.
        assert_eq!(sim.tick(14.0, 0).desired, 4);
        assert_eq!(sim.tick(14.0, 0).desired, 8);
        assert_eq!(sim.tick(14.0, 0).desired, 16);
        assert_eq!(sim.tick(14.0, 0).desired, 20);
    }

    #[test]
    fn scale_up_rate_allows_one_more_fiber() {
        // A rate close to 1 still grows by at least one fiber.
        let config = ScalerConfig { max_scale_up_rate: 1.1, ..ScalerConfig::default() };
        let mut sim = Sim::new(policy(), config, 2);
        sim.run(30, 1.4, 0);
        assert_eq!(sim.tick(2.1, 0).desired, 3);
    }

    #[test]
    fn scale_down_rate_limit() {
        let mut p = policy();
        p.stable_window = secs(6);
        let mut sim = Sim::new(p, ScalerConfig::default(), 10);
        sim.run(10, 7.0, 0);
        assert_eq!(sim.current, 10);
        // Load vanishes: halve per decision at most (then hold 1 until the grace period).
        let seen: Vec<u32> = (0..6).map(|_| sim.tick(0.0, 0).desired).collect();
        for pair in seen.windows(2) {
            assert!(pair[1] >= pair[0] / 2, "{seen:?}");
        }
        assert!(seen[0] >= 5, "{seen:?}");
        assert_eq!(seen.last().copied(), Some(1), "{seen:?}");
    }

    #[test]
    fn memory_stays_bounded() {
        let mut p = policy();
        p.stable_window = Duration::from_secs(3600);
        p.scale_down_delay = Duration::from_secs(3600);
        let mut sim = Sim::new(p, ScalerConfig::default(), 1);
        let before = sim.scaler.buffered_buckets();
        assert!(before <= 2 * (MAX_BUCKETS as usize + 1), "{before}");
        // 100 000 observations at 10 per second, deciding every tick.
        let base = sim.now();
        for i in 1..=100_000u64 {
            let now = base + Duration::from_millis(100 * i);
            sim.scaler.record(now, (i % 7) as f64, i % 3);
            if i % 20 == 0 {
                sim.scaler.decide(now, 3);
            }
        }
        assert_eq!(sim.scaler.buffered_buckets(), before);

        // Default windows: one-second buckets over the minute.
        let s = Scaler::new(policy(), ScalerConfig::default(), Instant::now());
        assert_eq!(s.buffered_buckets(), 60);
    }

    #[test]
    fn old_samples_leave_the_window() {
        let base = Instant::now();
        let mut s = Scaler::new(policy(), ScalerConfig::default(), base);
        s.record(base + secs(2), 7.0, 0);
        for i in 2..=30 {
            s.record(base + secs(2 * i), 0.0, 0);
        }
        let d = s.decide(base + secs(60), 10);
        assert!(d.stable_concurrency > 0.0);
        s.record(base + secs(62), 0.0, 0);
        let d = s.decide(base + secs(62), 10);
        assert_eq!(d.stable_concurrency, 0.0);
    }

    #[test]
    fn long_gap_counts_for_one_window() {
        let base = Instant::now();
        let mut p = policy();
        p.metric = ScaleMetric::Rps;
        let mut s = Scaler::new(p, ScalerConfig::default(), base);
        // 600 s since the previous observation, 6000 arrivals: 10 rps, over the last 60 s.
        s.record(base + secs(600), 1.0, 6000);
        let d = s.decide(base + secs(600), 1);
        assert!((d.stable_rps - 10.0).abs() < 1e-9);
        assert!((d.stable_concurrency - 1.0).abs() < 1e-9);
    }

    #[test]
    fn windows_respect_minimums() {
        let mut p = policy();
        p.stable_window = secs(6);
        p.panic_window_percent = 1.0;
        let s = Scaler::new(p, ScalerConfig::default(), Instant::now());
        assert_eq!(s.windows(), (secs(6), TICK));
        let s = Scaler::new(policy(), ScalerConfig::default(), Instant::now());
        assert_eq!(s.windows(), (secs(60), secs(6)));
    }
}
