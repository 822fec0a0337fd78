//! A Revision's fiber pool: at most `max_fibers` fibers, each serving one
//! request at a time, a bounded queue in front, warm size set from outside.
//! With a [`CapacityAccount`], every fiber also takes a slot of its instance's
//! shared capacity; a request that finds none free, and no fiber of its own
//! pool about to come back from its restore, is refused (503).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use lampyr_abi::{Request, Response, encode_request};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};
use tokio::time::Instant;

use super::capacity::{CapacityAccount, CapacityExhausted};
use super::fiber::{CallOutcome, Disposition, Fiber};
use super::stream::{ResponseStream, StreamEnd, StreamHead, StreamSink};
use super::template::Template;
use super::watchdog::{CallState, KillReason, WatchdogGuard};
use crate::metrics::{PoolMetrics, RuntimeMetrics};
use lampyr_router::InvokeError;

/// Longest a call waits for one of its pool's fibers to finish restoring when the
/// instance has no capacity to start another (a restore takes milliseconds).
const RECYCLE_WAIT: Duration = Duration::from_secs(2);

/// Bounds of one pool.
#[derive(Clone, Debug)]
pub struct PoolConfig {
    /// Revision name, used in metric labels and logs.
    pub revision: String,
    /// Most fibers alive at once (so most requests executing at once).
    pub max_fibers: usize,
    /// Most requests waiting for a fiber; more are refused with 503.
    pub queue_capacity: usize,
    /// The pool's share of its instance's fiber slots and memory; unbounded when `None`.
    pub capacity: Option<Arc<CapacityAccount>>,
}

/// Why no fiber could be started.
enum StartError {
    /// The instance's capacity is taken.
    Capacity(CapacityExhausted),
    /// The sandbox could not be created.
    Sandbox(hyperlight_host::HyperlightError),
}

impl From<StartError> for InvokeError {
    fn from(e: StartError) -> Self {
        match e {
            StartError::Capacity(e) => InvokeError::NoCapacity(e.to_string()),
            StartError::Sandbox(e) => InvokeError::Unavailable(format!("could not start a fiber: {e}")),
        }
    }
}

/// Counts describing a pool right now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Requests executing in fibers.
    pub in_flight: usize,
    /// Requests waiting for a fiber.
    pub queued: usize,
    /// Fibers alive, idle or busy.
    pub live: usize,
    /// Fibers idle and warm.
    pub idle: usize,
    /// Warm size last asked for.
    pub desired: usize,
}

/// Where one request's time went once it had a fiber slot (queueing excluded).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallTimings {
    /// Executing guest code.
    pub guest: Duration,
    /// Host work around the call: fiber checkout, watchdog, hand-offs, decoding.
    pub host: Duration,
}

/// A guest's answer to one request.
pub enum Answer {
    /// The guest returned its response whole.
    Whole(Response),
    /// The guest sent its head while its handler still ran; the body streams.
    Streamed {
        /// Status and headers (its body is empty: the bytes are in `body`).
        head: Response,
        /// The bytes the guest writes, then what its handler returns.
        body: StreamedBody,
    },
}

/// The body of a streamed answer, with the call's timings once it ended.
pub struct StreamedBody {
    /// The bytes, as an HTTP body.
    pub stream: ResponseStream,
    timings: Arc<OnceLock<CallTimings>>,
}

/// The fibers of one Revision. Cheap to clone.
#[derive(Clone)]
pub struct FiberPool {
    inner: Arc<PoolInner>,
}

struct PoolInner {
    template: Template,
    config: PoolConfig,
    idle: Mutex<Vec<Fiber>>,
    /// Signalled when a fiber comes back from its restore (to `idle`, or discarded) and
    /// when a resize has started one.
    returned: Condvar,
    /// Fibers that answered and are being restored; counted under `idle`'s lock.
    recycling: AtomicUsize,
    /// Fibers a resize is starting for `idle`; counted under `idle`'s lock.
    starting: AtomicUsize,
    slots: Arc<Semaphore>,
    queued: AtomicUsize,
    in_flight: AtomicUsize,
    live: AtomicUsize,
    desired: AtomicUsize,
    metrics: PoolMetrics,
}

/// Keeps the queued count and gauge right however the wait ends.
struct QueuedGuard<'a>(&'a PoolInner);

impl Drop for QueuedGuard<'_> {
    fn drop(&mut self) {
        self.0.queued.fetch_sub(1, Ordering::AcqRel);
        self.0.gauge_update();
    }
}

impl FiberPool {
    /// A pool of fibers restored from `template`; starts with no fibers.
    pub fn new(template: Template, config: PoolConfig, metrics: RuntimeMetrics) -> Self {
        let slots = Arc::new(Semaphore::new(config.max_fibers));
        let metrics = metrics.for_revision(&config.revision);
        FiberPool {
            inner: Arc::new(PoolInner {
                template,
                config,
                idle: Mutex::new(Vec::new()),
                returned: Condvar::new(),
                recycling: AtomicUsize::new(0),
                starting: AtomicUsize::new(0),
                slots,
                queued: AtomicUsize::new(0),
                in_flight: AtomicUsize::new(0),
                live: AtomicUsize::new(0),
                desired: AtomicUsize::new(0),
                metrics,
            }),
        }
    }

    /// The pool's share of its instance's capacity, if it has one.
    pub fn capacity(&self) -> Option<&Arc<CapacityAccount>> {
        self.inner.config.capacity.as_ref()
    }

    /// Most fibers the pool runs at once.
    pub fn max_fibers(&self) -> usize {
        self.inner.config.max_fibers
    }

    /// The template fibers come from.
    pub fn template(&self) -> &Template {
        &self.inner.template
    }

    /// Current counts.
    pub fn stats(&self) -> PoolStats {
        let i = &self.inner;
        PoolStats {
            in_flight: i.in_flight.load(Ordering::Acquire),
            queued: i.queued.load(Ordering::Acquire),
            live: i.live.load(Ordering::Acquire),
            idle: i.idle_len(),
            desired: i.desired.load(Ordering::Acquire),
        }
    }

    /// Serves `req` on a fiber, waiting for one until `deadline` at most, and returns
    /// the whole answer (a streamed one gathered). Dropping the returned future
    /// interrupts the guest (the caller is gone).
    pub async fn invoke(&self, req: Request, deadline: Instant) -> Result<Response, InvokeError> {
        self.invoke_timed(req, deadline).await.map(|(resp, _)| resp)
    }

    /// [`FiberPool::invoke`], also returning where the time went.
    pub async fn invoke_timed(&self, req: Request, deadline: Instant) -> Result<(Response, CallTimings), InvokeError> {
        match self.invoke_streaming(req, deadline).await? {
            (Answer::Whole(resp), timings) => Ok((resp, timings)),
            (Answer::Streamed { mut head, body }, _) => {
                let timings = Arc::clone(&body.timings);
                let bytes = body.stream.collect().await.map_err(|e| InvokeError::FiberFailed(e.to_string()))?;
                head.body = bytes.to_bytes().to_vec();
                Ok((head, timings.get().copied().unwrap_or_default()))
            }
        }
    }

    /// Serves `req` on a fiber, returning its answer as soon as there is one: whole when
    /// the guest returned it, or its head while the guest still streams the body. The
    /// timings are the call's when whole, the head's when streamed.
    pub async fn invoke_streaming(&self, req: Request, deadline: Instant) -> Result<(Answer, CallTimings), InvokeError> {
        let i = &self.inner;
        let max = i.template.metadata().max_request_body;
        if req.body.len() as u64 > max {
            return Err(i.refuse(InvokeError::RequestTooLarge { size: req.body.len() as u64, max }));
        }
        let frame = encode_request(&req);
        drop(req);
        let permit = i.acquire_slot(deadline).await.map_err(|e| i.refuse(e))?;
        let dispatched = Instant::now();
        let state = Arc::new(CallState::default());
        let watchdog = WatchdogGuard::arm(Arc::clone(&state), deadline);
        let (done_tx, done_rx) = oneshot::channel();
        let (head_tx, head_rx) = oneshot::channel();
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || inner.run_call(frame, &state, permit, head_tx, done_tx));
        let mut done_rx = done_rx;
        // Whichever comes first: the whole answer, or a streamed head.
        let result = tokio::select! {
            biased;
            done = &mut done_rx => done,
            head = head_rx => match head {
                Ok(StreamHead { head, chunks }) => {
                    let timings = Arc::new(OnceLock::new());
                    let end = Arc::clone(&self.inner).stream_end(done_rx, watchdog, dispatched, Arc::clone(&timings));
                    let head_timings = CallTimings { guest: Duration::ZERO, host: dispatched.elapsed() };
                    let body = StreamedBody { stream: ResponseStream::new(chunks, end), timings };
                    return Ok((Answer::Streamed { head, body }, head_timings));
                }
                // No head: the call ended, and its answer is on its way.
                Err(_) => done_rx.await,
            },
        };
        watchdog.disarm();
        let (outcome, guest_time) = result.map_err(|_| thread_ended())?;
        let timings = CallTimings { guest: guest_time, host: dispatched.elapsed().saturating_sub(guest_time) };
        i.record(&outcome, timings);
        outcome_to_result(outcome).map(|resp| (Answer::Whole(resp), timings))
    }

    /// Sets the warm size: creates fibers up to `n` (at most `max_fibers`)
    /// and drops idle fibers beyond it. `0` scales the pool to zero.
    pub async fn set_desired(&self, n: usize) -> Result<(), InvokeError> {
        let i = Arc::clone(&self.inner);
        let n = n.min(i.config.max_fibers);
        i.desired.store(n, Ordering::Release);
        tokio::task::spawn_blocking(move || i.resize(n))
            .await
            .map_err(|e| InvokeError::FiberFailed(format!("resizing the pool failed: {e}")))?
    }
}

impl PoolInner {
    /// How a streamed call ends: once its guest returned, the last bytes (or why the
    /// body fails), the call recorded, the watchdog disarmed.
    async fn stream_end(
        self: Arc<Self>,
        done: oneshot::Receiver<(CallOutcome, Duration)>,
        watchdog: WatchdogGuard,
        dispatched: Instant,
        timings: Arc<OnceLock<CallTimings>>,
    ) -> StreamEnd {
        let result = done.await;
        watchdog.disarm();
        let (outcome, guest_time) = result.map_err(|_| thread_ended())?;
        let call = CallTimings { guest: guest_time, host: dispatched.elapsed().saturating_sub(guest_time) };
        self.record(&outcome, call);
        let _ = timings.set(call);
        outcome_to_result(outcome).map(|resp| Bytes::from(resp.body))
    }

    fn idle_len(&self) -> usize {
        self.idle.lock().map(|v| v.len()).unwrap_or(0)
    }

    fn gauge_update(&self) {
        let m = &self.metrics;
        m.queued.set(self.queued.load(Ordering::Acquire) as i64);
        m.in_flight.set(self.in_flight.load(Ordering::Acquire) as i64);
        m.fibers.set(self.live.load(Ordering::Acquire) as i64);
    }

    /// Counts a request refused before it reached a fiber.
    fn refuse(&self, err: InvokeError) -> InvokeError {
        self.metrics.request(err.outcome());
        err
    }

    async fn acquire_slot(&self, deadline: Instant) -> Result<OwnedSemaphorePermit, InvokeError> {
        if let Ok(permit) = Arc::clone(&self.slots).try_acquire_owned() {
            return Ok(permit);
        }
        let capacity = self.config.queue_capacity;
        if self.queued.fetch_update(Ordering::AcqRel, Ordering::Acquire, |q| (q < capacity).then_some(q + 1)).is_err() {
            return Err(InvokeError::Overloaded { capacity });
        }
        let _queued = QueuedGuard(self);
        self.gauge_update();
        match tokio::time::timeout_at(deadline, Arc::clone(&self.slots).acquire_owned()).await {
            Ok(Ok(permit)) => Ok(permit),
            Ok(Err(_)) => Err(InvokeError::FiberFailed("the pool is shutting down".into())),
            Err(_) => Err(InvokeError::QueueTimeout),
        }
    }

    /// Runs on a blocking thread: takes a fiber, calls it (its streamed head, if any, to
    /// `head`), answers, then recycles it.
    fn run_call(
        &self,
        frame: Vec<u8>,
        state: &Arc<CallState>,
        permit: OwnedSemaphorePermit,
        head: oneshot::Sender<StreamHead>,
        answer: oneshot::Sender<(CallOutcome, Duration)>,
    ) {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.gauge_update();
        let mut fiber = match self.take_fiber() {
            Ok(f) => f,
            Err(e) => {
                state.mark_returned();
                let outcome = match e {
                    StartError::Capacity(e) => CallOutcome::NoCapacity(e.to_string()),
                    StartError::Sandbox(e) => CallOutcome::Failed(format!("could not start a fiber: {e}")),
                };
                let _ = answer.send((outcome, Duration::ZERO));
                // No fiber was created, so none is returned or dropped.
                self.in_flight.fetch_sub(1, Ordering::AcqRel);
                self.gauge_update();
                drop(permit);
                return;
            }
        };
        state.set_fiber(fiber.interrupt_handle());
        let sink = StreamSink::new(head, Arc::clone(state), self.template.response_limits());
        let ((outcome, guest_time), sink) = match state.reason() {
            KillReason::None => sink.around(|| fiber.call(frame, &self.template, state)),
            KillReason::Deadline => ((CallOutcome::TimedOut, Duration::ZERO), sink),
            KillReason::CallerGone => ((CallOutcome::Abandoned, Duration::ZERO), sink),
        };
        state.mark_returned();
        let outcome = streamed_outcome(outcome, &sink, self.template.response_limits().max_body);
        let malformed = matches!(outcome, CallOutcome::BadResponse(_));
        // Counted before the answer goes, so a request sent on that answer finds it.
        self.recycling.fetch_add(1, Ordering::AcqRel);
        // Answer first: the restore is off the response's path. The answer goes before the
        // sink closes, so a caller waiting for either wakes once.
        let _ = answer.send((outcome, guest_time));
        // Closes a streamed body's chunks; its reader then takes the answer.
        drop(sink);
        let kept = match fiber.recycle(&self.template, malformed) {
            Disposition::Reuse => {
                self.metrics.restores.inc();
                Some(fiber)
            }
            Disposition::Discard => {
                self.metrics.discards.inc();
                drop(fiber);
                None
            }
        };
        self.finish_call(kept, permit);
    }

    /// Returns a restored fiber (if kept; `None` means it was discarded) to the idle list,
    /// wakes a call waiting for it, then frees the slot.
    fn finish_call(&self, fiber: Option<Fiber>, permit: OwnedSemaphorePermit) {
        match fiber {
            Some(f) => self.push_idle(f),
            None => self.drop_fiber(None),
        }
        {
            // Under the lock, so a waiter sees the fiber and the count change together.
            let _idle = self.idle.lock();
            self.recycling.fetch_sub(1, Ordering::AcqRel);
        }
        self.returned.notify_all();
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.gauge_update();
        drop(permit);
    }

    /// An idle fiber (or the first a resize is starting), else a new one within capacity,
    /// else (capacity taken) one of this pool's own coming back from its restore: its slot
    /// is about to be free, so the call waits for it rather than being refused.
    fn take_fiber(&self) -> Result<Fiber, StartError> {
        if let Some(fiber) = self.idle_or_reserve() {
            return Ok(fiber);
        }
        match self.start_reserved() {
            // Also when none is being restored any more: one may have come back to `idle`
            // since it was looked at above, still holding the capacity.
            Err(StartError::Capacity(_)) => match self.wait_returned() {
                Some(fiber) => Ok(fiber),
                // None came back, or one was discarded instead of kept (its capacity released).
                None => self.start_fiber(),
            },
            other => other,
        }
    }

    /// An idle fiber, waiting (at most [`RECYCLE_WAIT`]) for the first of those a resize is
    /// starting while it starts some; else a place in `live` for the fiber the call starts
    /// itself, reserved under the lock a resize counts `live` under. So a request waking a
    /// pool at zero and the activation resizing it start one fiber between them, whichever
    /// comes first. `None` when it reserved.
    fn idle_or_reserve(&self) -> Option<Fiber> {
        let until = std::time::Instant::now() + RECYCLE_WAIT;
        let Ok(mut idle) = self.idle.lock() else { return self.reserve() };
        loop {
            if let Some(fiber) = idle.pop() {
                return Some(fiber);
            }
            let left = until.checked_duration_since(std::time::Instant::now());
            let Some(left) = left.filter(|_| self.starting.load(Ordering::Acquire) > 0) else { return self.reserve() };
            idle = match self.returned.wait_timeout(idle, left) {
                Ok((idle, _)) => idle,
                Err(_) => return self.reserve(),
            };
        }
    }

    fn reserve(&self) -> Option<Fiber> {
        self.live.fetch_add(1, Ordering::AcqRel);
        None
    }

    /// Reserves a place in `live` for a fiber a resize starts, if fewer than `n` are alive.
    fn reserve_below(&self, n: usize) -> bool {
        let Ok(_idle) = self.idle.lock() else { return false };
        if self.live.load(Ordering::Acquire) >= n {
            return false;
        }
        self.live.fetch_add(1, Ordering::AcqRel);
        self.starting.fetch_add(1, Ordering::AcqRel);
        true
    }

    /// Blocks this call's thread until a restored fiber is idle (taking it) or none is
    /// being restored any more, for at most [`RECYCLE_WAIT`].
    fn wait_returned(&self) -> Option<Fiber> {
        let until = std::time::Instant::now() + RECYCLE_WAIT;
        let mut idle = self.idle.lock().ok()?;
        loop {
            if let Some(fiber) = idle.pop() {
                return Some(fiber);
            }
            if self.recycling.load(Ordering::Acquire) == 0 {
                return None;
            }
            let left = until.checked_duration_since(std::time::Instant::now())?;
            idle = self.returned.wait_timeout(idle, left).ok()?.0;
        }
    }

    /// Starts a fiber within the pool's capacity account, if it has one.
    fn start_fiber(&self) -> Result<Fiber, StartError> {
        self.live.fetch_add(1, Ordering::AcqRel);
        self.start_reserved()
    }

    /// Starts a fiber whose place in `live` is reserved (given back if it cannot start).
    fn start_reserved(&self) -> Result<Fiber, StartError> {
        let unreserve = || {
            self.live.fetch_sub(1, Ordering::AcqRel);
        };
        if let Some(account) = &self.config.capacity {
            account.admit().map_err(StartError::Capacity).inspect_err(|_| unreserve())?;
        }
        // The pool's only fiber: the Revision is waking from zero, and a request waits for it.
        let waking = self.live.load(Ordering::Acquire) == 1;
        let started = if waking { Fiber::waking(&self.template) } else { Fiber::new(&self.template) };
        match started {
            Ok(fiber) => {
                self.metrics.fiber_starts.inc();
                Ok(fiber)
            }
            Err(e) => {
                if let Some(account) = &self.config.capacity {
                    account.release();
                }
                unreserve();
                Err(StartError::Sandbox(e))
            }
        }
    }

    fn push_idle(&self, fiber: Fiber) {
        match self.idle.lock() {
            Ok(mut idle) => idle.push(fiber),
            Err(_) => self.drop_fiber(Some(fiber)),
        }
    }

    fn drop_fiber(&self, fiber: Option<Fiber>) {
        drop(fiber);
        self.live.fetch_sub(1, Ordering::AcqRel);
        if let Some(account) = &self.config.capacity {
            account.release();
        }
    }

    /// Creates or drops idle fibers until `n` are alive (busy ones are never dropped).
    fn resize(&self, n: usize) -> Result<(), InvokeError> {
        while self.reserve_below(n) {
            let started = self.start_reserved().map(|fiber| self.push_idle(fiber));
            {
                // Under the lock, so a call waiting for the fiber sees it and the count change together.
                let _idle = self.idle.lock();
                self.starting.fetch_sub(1, Ordering::AcqRel);
            }
            self.returned.notify_all();
            started?;
        }
        loop {
            if self.live.load(Ordering::Acquire) <= n {
                break;
            }
            let Some(fiber) = self.idle.lock().ok().and_then(|mut v| v.pop()) else { break };
            self.drop_fiber(Some(fiber));
        }
        self.gauge_update();
        Ok(())
    }

    fn record(&self, outcome: &CallOutcome, timings: CallTimings) {
        let m = &self.metrics;
        let name = match outcome {
            CallOutcome::Answered(_) => "ok",
            CallOutcome::BadResponse(_) => "bad_response",
            CallOutcome::TimedOut => {
                m.timeouts.inc();
                "timeout"
            }
            CallOutcome::Abandoned => "abandoned",
            CallOutcome::Crashed(_) => {
                m.crashes.inc();
                "crash"
            }
            CallOutcome::Failed(_) => "error",
            CallOutcome::NoCapacity(_) => "no_capacity",
        };
        m.request(name);
        m.guest_seconds.observe(timings.guest.as_secs_f64());
        m.host_overhead_seconds.observe(timings.host.as_secs_f64());
    }
}

/// The outcome of a call whose body was streamed: its last bytes must keep the whole
/// body within `max_body`, and a stream that went over fails the call.
fn streamed_outcome(outcome: CallOutcome, sink: &StreamSink, max_body: usize) -> CallOutcome {
    if !sink.streamed() {
        return outcome;
    }
    if let Some(why) = sink.failure() {
        return CallOutcome::Failed(why.to_string());
    }
    match outcome {
        CallOutcome::Answered(resp) if sink.written().saturating_add(resp.body.len() as u64) > max_body as u64 => {
            CallOutcome::Failed(format!("the streamed response body exceeds the limit of {max_body} bytes"))
        }
        other => other,
    }
}

fn thread_ended() -> InvokeError {
    InvokeError::FiberFailed("the fiber thread ended without an answer".into())
}

fn outcome_to_result(outcome: CallOutcome) -> Result<Response, InvokeError> {
    match outcome {
        CallOutcome::Answered(resp) => Ok(resp),
        CallOutcome::BadResponse(e) => Err(InvokeError::BadResponse(e)),
        CallOutcome::TimedOut => Err(InvokeError::Timeout),
        CallOutcome::Abandoned => Err(InvokeError::Abandoned),
        CallOutcome::Crashed(msg) => Err(InvokeError::Crashed(msg)),
        CallOutcome::Failed(msg) => Err(InvokeError::FiberFailed(msg)),
        CallOutcome::NoCapacity(msg) => Err(InvokeError::NoCapacity(msg)),
    }
}
