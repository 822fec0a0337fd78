//! Interrupting a guest call at its deadline or when its caller goes away.
//!
//! Hyperlight has no call timeout, and a `kill()` that lands before the call
//! starts is lost, so the watchdog keeps killing every few milliseconds until
//! the call reports that it has returned.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use hyperlight_host::hypervisor::InterruptHandle;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;

const KILL_RETRY: Duration = Duration::from_millis(2);

/// Why a call was interrupted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KillReason {
    /// Not interrupted.
    None = 0,
    /// The request deadline passed.
    Deadline = 1,
    /// The caller stopped waiting (client disconnected).
    CallerGone = 2,
}

/// Shared state between a running call and its watchdog.
#[derive(Default)]
pub struct CallState {
    handle: OnceLock<Arc<dyn InterruptHandle>>,
    returned: AtomicBool,
    reason: Arc<AtomicU8>,
    /// A later deadline than the one armed, once the call's response head went out.
    extended: Mutex<Option<Instant>>,
}

/// Whether a call was interrupted, readable from the thread running it (a host
/// function the guest called, such as `LampyrSleep`).
#[derive(Clone, Debug)]
pub struct Interruption(Arc<AtomicU8>);

impl Interruption {
    /// Whether the call was interrupted (deadline passed or caller gone).
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Acquire) != KillReason::None as u8
    }
}

impl From<Arc<AtomicU8>> for Interruption {
    fn from(reason: Arc<AtomicU8>) -> Self {
        Interruption(reason)
    }
}

impl CallState {
    /// Names the fiber about to run the call (a fiber may still be starting when armed).
    pub fn set_fiber(&self, handle: Arc<dyn InterruptHandle>) {
        let _ = self.handle.set(handle);
    }

    /// Marks the guest call as returned; the watchdog stops killing.
    pub fn mark_returned(&self) {
        self.returned.store(true, Ordering::Release);
    }

    /// The call's interruption flag, for the thread running it.
    pub fn interruption(&self) -> Interruption {
        Interruption(Arc::clone(&self.reason))
    }

    /// Moves the call's deadline to `to` (never earlier than the one armed): its
    /// response head went out, and the request deadline bounds only that.
    pub fn extend_deadline(&self, to: Instant) {
        if let Ok(mut extended) = self.extended.lock() {
            *extended = Some(extended.map_or(to, |e| e.max(to)));
        }
    }

    fn extended_deadline(&self) -> Option<Instant> {
        self.extended.lock().ok().and_then(|e| *e)
    }

    /// Why the call was interrupted, if it was.
    pub fn reason(&self) -> KillReason {
        match self.reason.load(Ordering::Acquire) {
            1 => KillReason::Deadline,
            2 => KillReason::CallerGone,
            _ => KillReason::None,
        }
    }
}

/// Arms a watchdog for one call; dropping the guard without [`WatchdogGuard::disarm`]
/// kills the call at once (the caller is gone).
pub struct WatchdogGuard {
    caller_gone: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl WatchdogGuard {
    /// Starts watching the call behind `state` until `deadline`.
    pub fn arm(state: Arc<CallState>, deadline: Instant) -> Self {
        let (tx, rx) = oneshot::channel();
        let task = tokio::spawn(async move {
            let (mut deadline, mut rx, mut caller_waiting) = (deadline, rx, true);
            let reason = loop {
                tokio::select! {
                    () = tokio::time::sleep_until(deadline) => match state.extended_deadline() {
                        Some(later) if later > deadline => deadline = later,
                        _ => break KillReason::Deadline,
                    },
                    gone = &mut rx, if caller_waiting => match gone {
                        Ok(()) => break KillReason::CallerGone,
                        // Disarmed: the task is being aborted.
                        Err(_) => caller_waiting = false,
                    },
                }
            };
            state.reason.store(reason as u8, Ordering::Release);
            // `kill` blocks for about half a millisecond: keep it off the async workers.
            let _ = tokio::task::spawn_blocking(move || {
                while !state.returned.load(Ordering::Acquire) {
                    if let Some(handle) = state.handle.get() {
                        handle.kill();
                    }
                    std::thread::sleep(KILL_RETRY);
                }
            })
            .await;
        });
        WatchdogGuard { caller_gone: Some(tx), task }
    }

    /// The call finished and its result was received: stop watching.
    pub fn disarm(mut self) {
        self.caller_gone = None;
        self.task.abort();
    }
}

impl Drop for WatchdogGuard {
    fn drop(&mut self) {
        if let Some(tx) = self.caller_gone.take() {
            let _ = tx.send(());
        }
    }
}
