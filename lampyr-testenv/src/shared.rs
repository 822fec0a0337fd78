//! One environment per test process: started on first use, torn down when the process exits.

use std::path::PathBuf;
use std::sync::{Mutex, Once, OnceLock};

/// The environment in `cell`, started by `start` on first use; `teardown` is
/// registered to run at a normal exit once it has started. Panics naming `what`
/// with the reason when it did not start.
pub(crate) fn shared_or_panic<T>(
    cell: &'static OnceLock<Result<T, String>>,
    what: &str,
    start: impl FnOnce() -> Result<T, String>,
    teardown: extern "C" fn(),
) -> &'static T {
    let shared = cell.get_or_init(|| {
        let started = start();
        if started.is_ok() {
            at_exit(teardown);
        }
        started
    });
    match shared {
        Ok(environment) => environment,
        Err(why) => panic!("the {what} did not start: {why}"),
    }
}

/// Runs `teardown` when the test process exits normally (the next start cleans
/// up after a process that was killed).
fn at_exit(teardown: extern "C" fn()) {
    // SAFETY: `teardown` is a plain `extern "C"` function with no arguments, as
    // atexit(3) requires; it is registered once per environment, after that
    // environment started, and runs during exit.
    #[allow(unsafe_code)]
    unsafe {
        libc::atexit(teardown);
    }
}

/// Directories [`remove_at_exit`] removes.
static REMOVED_AT_EXIT: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Removes `dir` when the test process exits normally: the directory of something a
/// `static` environment holds, which is never dropped (a registry's storage, hundreds of
/// megabytes once the runtime images are pushed). Harmless for one removed before.
pub(crate) fn remove_at_exit(dir: PathBuf) {
    extern "C" fn remove_all() {
        let dirs = std::mem::take(&mut *REMOVED_AT_EXIT.lock().unwrap_or_else(|p| p.into_inner()));
        for dir in dirs {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
    static REGISTERED: Once = Once::new();
    REGISTERED.call_once(|| at_exit(remove_all));
    REMOVED_AT_EXIT.lock().unwrap_or_else(|p| p.into_inner()).push(dir);
}
