//! The host functions a guest may call: Hyperlight's `HostPrint`, replaced so
//! guest output goes to `tracing` (bounded, never to the process's stdout) and
//! can neither block on a full pipe nor panic across the guest boundary;
//! `LampyrSleep`, a wait that ends early when the guest's call is interrupted; and
//! `LampyrLog`, the guest SDK's structured log events, at their level.

use std::cell::RefCell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

use super::watchdog::Interruption;

/// Name of the sleep host function (`lampyr_guest::sleep_ms`).
pub const SLEEP_FUNCTION: &str = "LampyrSleep";
/// Longest single sleep: Knative's largest `timeoutSeconds`.
pub const MAX_SLEEP: Duration = Duration::from_secs(600);
/// How often a sleeping guest's call is checked for an interruption.
const SLEEP_SLICE: Duration = Duration::from_millis(5);

thread_local! {
    /// The interruption flag of the guest call running on this thread, if any.
    static CURRENT_CALL: RefCell<Option<Interruption>> = const { RefCell::new(None) };
}

/// Runs `call` with `interruption` as this thread's current guest call (what `LampyrSleep` watches).
pub fn with_call<T>(interruption: Interruption, call: impl FnOnce() -> T) -> T {
    CURRENT_CALL.with(|c| *c.borrow_mut() = Some(interruption));
    let result = call();
    CURRENT_CALL.with(|c| *c.borrow_mut() = None);
    result
}

/// `LampyrSleep`: waits `ms` milliseconds (at most [`MAX_SLEEP`]) off the vCPU, in slices,
/// returning as soon as the current call is interrupted (deadline or caller gone) so the
/// watchdog's kill lands. Returns the milliseconds waited. The fiber keeps its slot meanwhile,
/// as a sleeping container keeps its concurrency slot.
pub fn guest_sleep(ms: u64) -> u64 {
    let wanted = Duration::from_millis(ms).min(MAX_SLEEP);
    let started = Instant::now();
    loop {
        let waited = started.elapsed();
        let interrupted = CURRENT_CALL.with(|c| c.borrow().as_ref().is_some_and(Interruption::is_set));
        if waited >= wanted || interrupted {
            return u64::try_from(waited.as_millis()).unwrap_or(u64::MAX);
        }
        std::thread::sleep(SLEEP_SLICE.min(wanted - waited));
    }
}

/// Longest guest print line logged; the rest is cut.
pub const MAX_PRINT_BYTES: usize = 4096;

/// `HostPrint`: logs the guest's text at debug level, cut to [`MAX_PRINT_BYTES`].
pub fn guest_print(text: String) -> i32 {
    catch_unwind(AssertUnwindSafe(|| {
        let len = text.len();
        tracing::debug!(target: "lampyr_guest", bytes = len, "{}", cut(&text));
        i32::try_from(len).unwrap_or(i32::MAX)
    }))
    .unwrap_or(0)
}

/// Name of the log host function (`lampyr_guest::info!` and its siblings).
pub const LOG_FUNCTION: &str = "LampyrLog";

/// `LampyrLog`: one guest log event (level 1 error .. 4 debug; anything else is debug),
/// its message and logfmt fields each cut to [`MAX_PRINT_BYTES`], as a `tracing` event
/// with target `lampyr_guest`. Returns 0.
pub fn guest_log(level: u32, message: String, fields: String) -> u32 {
    catch_unwind(AssertUnwindSafe(|| {
        let (message, fields) = (cut(&message), cut(&fields));
        match level {
            1 => tracing::error!(target: "lampyr_guest", fields = %fields, "{message}"),
            2 => tracing::warn!(target: "lampyr_guest", fields = %fields, "{message}"),
            3 => tracing::info!(target: "lampyr_guest", fields = %fields, "{message}"),
            _ => tracing::debug!(target: "lampyr_guest", fields = %fields, "{message}"),
        }
    }))
    .map_or(1, |()| 0)
}

/// `text` cut to at most [`MAX_PRINT_BYTES`], on a character boundary.
fn cut(text: &str) -> &str {
    let mut end = text.len().min(MAX_PRINT_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU8, Ordering};

    use super::*;

    #[test]
    fn a_sleep_waits_and_ends_early_when_its_call_is_interrupted() {
        assert!(guest_sleep(30) >= 30, "no call: the whole wait");
        let flag = Arc::new(AtomicU8::new(0));
        let setter = Arc::clone(&flag);
        let interrupter = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            setter.store(1, Ordering::Release);
        });
        let waited = with_call(Interruption::from(flag), || guest_sleep(60_000));
        interrupter.join().expect("the interrupting thread");
        assert!((50..60_000).contains(&waited), "ended at the interruption: {waited} ms");
        assert!(CURRENT_CALL.with(|c| c.borrow().is_none()), "the call is cleared after it");
    }

    #[test]
    fn long_and_multibyte_prints_are_cut_safely() {
        let text = "é".repeat(super::MAX_PRINT_BYTES);
        assert_eq!(super::guest_print(text.clone()), text.len() as i32);
        assert_eq!(super::guest_log(3, text.clone(), text), 0);
        assert_eq!(super::cut("aé"), "aé");
        assert!(super::cut(&"é".repeat(3000)).len() <= super::MAX_PRINT_BYTES);
    }
}
