//! Sandboxes made ahead of need: a fiber started from zero takes a spare and restores it
//! to its Revision's template (one restore), instead of building a new VM on the request's
//! path; the spare is replaced in the background.
//!
//! A spare is built from the snapshot of the template that last needed one, with its
//! sizes, and no guest code ever runs in it before it is restored: Hyperlight's restore
//! replaces the whole guest state (snapshot memory, zeroed scratch, vCPU), as it does after
//! every request. Only a spare of the same sizes as the template is used. Spares belong to
//! the process (one set for every pool in it), not to a Revision: a Revision at zero holds
//! none. [`set_target`] sets how many are kept (default [`DEFAULT_TARGET`]; 0 turns them off).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use hyperlight_host::Sandbox;
use hyperlight_host::sandbox::snapshot::Snapshot;

use crate::build::SandboxSizes;

/// Spares kept by default: enough for two Revisions woken at once without a VM built on
/// either's path.
pub const DEFAULT_TARGET: usize = 2;

/// The process's spares.
struct Spares {
    /// Ready spares with the sizes they were built with.
    ready: Mutex<Vec<(SandboxSizes, Sandbox)>>,
    /// How many to keep.
    target: AtomicUsize,
    /// Set while a refill runs (one at a time).
    refilling: AtomicBool,
    /// Spares restored to a template so far.
    used: AtomicU64,
}

fn spares() -> &'static Spares {
    static SPARES: OnceLock<Spares> = OnceLock::new();
    SPARES.get_or_init(|| Spares {
        ready: Mutex::new(Vec::new()),
        target: AtomicUsize::new(DEFAULT_TARGET),
        refilling: AtomicBool::new(false),
        used: AtomicU64::new(0),
    })
}

/// Keeps `n` spares from now on (0: none; spares beyond `n` are dropped at once).
pub fn set_target(n: usize) {
    let spares = spares();
    spares.target.store(n, Ordering::Release);
    if let Ok(mut ready) = spares.ready.lock() {
        ready.truncate(n);
    }
}

/// Spares ready now.
pub fn ready() -> usize {
    spares().ready.lock().map_or(0, |ready| ready.len())
}

/// Spares restored to a template (fibers started from a spare) since the process started.
pub fn used() -> u64 {
    spares().used.load(Ordering::Acquire)
}

/// A spare of `sizes` restored to `snapshot`, or `None` when none is ready (the oldest spare
/// of other sizes, if any, is dropped to make room) or the restore failed (the spare is
/// dropped). Either way a refill from `snapshot` is started when fewer than the target are ready.
pub(crate) fn take(snapshot: &Arc<Snapshot>, sizes: &SandboxSizes) -> Option<Sandbox> {
    let spares = spares();
    let taken = spares.ready.lock().ok().and_then(|mut ready| match ready.iter().position(|(s, _)| s == sizes) {
        Some(at) => Some(ready.swap_remove(at).1),
        None => {
            // None of these sizes: the oldest spare makes room for one of them.
            if !ready.is_empty() {
                drop(ready.remove(0));
            }
            None
        }
    });
    let restored = taken.and_then(|mut sandbox| match sandbox.restore(Arc::clone(snapshot)) {
        Ok(()) if sandbox.status().is_ready() => {
            spares.used.fetch_add(1, Ordering::AcqRel);
            Some(sandbox)
        }
        Ok(()) => None,
        Err(error) => {
            tracing::warn!(%error, "restoring a spare sandbox to a template failed; building a new one");
            None
        }
    });
    // After the restore, so the refill's build does not compete with it for a core.
    refill(snapshot, sizes);
    restored
}

/// Builds spares from `snapshot` until the target is reached, on a thread off the caller's
/// path, unless a refill already runs.
fn refill(snapshot: &Arc<Snapshot>, sizes: &SandboxSizes) {
    let spares = spares();
    if !spares.short() || spares.refilling.swap(true, Ordering::AcqRel) {
        return;
    }
    // Clears `refilling` however the refill ends: finished, failed, or never run.
    let running = Refilling(spares);
    let (snapshot, sizes) = (Arc::clone(snapshot), *sizes);
    let fill = move || {
        let _running = running;
        while spares.short() {
            match super::template::sandbox_from(&snapshot, &sizes) {
                Ok(sandbox) => spares.keep(sizes, sandbox),
                Err(error) => {
                    tracing::warn!(%error, "building a spare sandbox failed");
                    return;
                }
            }
        }
    };
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => drop(handle.spawn_blocking(fill)),
        Err(_) => drop(std::thread::Builder::new().name("lampyr-spares".into()).spawn(fill)),
    }
}

impl Spares {
    /// Keeps `sandbox` as a spare if the target (read under the lock [`set_target`] truncates
    /// under) still wants one; else drops it.
    fn keep(&self, sizes: SandboxSizes, sandbox: Sandbox) {
        if let Ok(mut ready) = self.ready.lock()
            && ready.len() < self.target.load(Ordering::Acquire)
        {
            ready.push((sizes, sandbox));
        }
    }

    /// Whether fewer spares are ready than the target.
    fn short(&self) -> bool {
        self.ready.lock().map_or(0, |ready| ready.len()) < self.target.load(Ordering::Acquire)
    }
}

/// A refill in progress; dropping it lets the next one start.
struct Refilling(&'static Spares);

impl Drop for Refilling {
    fn drop(&mut self) {
        self.0.refilling.store(false, Ordering::Release);
    }
}
