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

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use hyperlight_host::Sandbox;
use hyperlight_host::sandbox::snapshot::Snapshot;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

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
    /// Spares ready, as exported (`lampyr_fiber_spares`).
    ready_gauge: Gauge,
    /// Spares restored to a template so far (`lampyr_fiber_spare_starts_total`).
    used: Counter,
}

fn spares() -> &'static Spares {
    static SPARES: OnceLock<Spares> = OnceLock::new();
    SPARES.get_or_init(|| Spares {
        ready: Mutex::new(Vec::new()),
        target: AtomicUsize::new(DEFAULT_TARGET),
        refilling: AtomicBool::new(false),
        ready_gauge: Gauge::default(),
        used: Counter::default(),
    })
}

/// Keeps `n` spares from now on (0: none; spares beyond `n` are dropped at once).
pub fn set_target(n: usize) {
    let spares = spares();
    spares.target.store(n, Ordering::Release);
    if let Ok(mut ready) = spares.ready.lock() {
        ready.truncate(n);
        spares.count(&ready);
    }
}

/// Registers the spares' metrics (process-wide, no labels) in `registry`, under `lampyr_fiber`.
pub fn register(registry: &mut Registry) {
    let spares = spares();
    let r = registry.sub_registry_with_prefix("lampyr_fiber");
    r.register("spares", "Spare sandboxes ready for Revisions waking from zero", spares.ready_gauge.clone());
    r.register("spare_starts", "Fibers started from a spare sandbox restored to their template", spares.used.clone());
}

/// Spares ready now.
pub fn ready() -> usize {
    spares().ready.lock().map_or(0, |ready| ready.len())
}

/// Spares restored to a template (fibers started from a spare) since the process started.
pub fn used() -> u64 {
    spares().used.get()
}

/// A spare of `sizes` restored to `snapshot`, or `None` when none is ready (the oldest spare
/// of other sizes, if any, is dropped to make room) or the restore failed (the spare is
/// dropped). Either way a refill from `snapshot` is started when fewer than the target are ready.
pub(crate) fn take(snapshot: &Arc<Snapshot>, sizes: &SandboxSizes) -> Option<Sandbox> {
    let spares = spares();
    let taken = spares.ready.lock().ok().and_then(|mut ready| match ready.iter().position(|(s, _)| s == sizes) {
        Some(at) => {
            let spare = ready.swap_remove(at).1;
            spares.count(&ready);
            Some(spare)
        }
        None => {
            // None of these sizes: the oldest spare makes room for one of them.
            if !ready.is_empty() {
                drop(ready.remove(0));
                spares.count(&ready);
            }
            None
        }
    });
    let restored = taken.and_then(|mut sandbox| match sandbox.restore(Arc::clone(snapshot)) {
        Ok(()) if sandbox.status().is_ready() => {
            spares.used.inc();
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
            self.count(&ready);
        }
    }

    /// Sets the exported count of spares to `ready`'s (called under its lock).
    fn count(&self, ready: &[(SandboxSizes, Sandbox)]) {
        self.ready_gauge.set(i64::try_from(ready.len()).unwrap_or(i64::MAX));
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
