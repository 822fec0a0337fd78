//! One environment per test process: started on first use, torn down when the process exits.

use std::sync::OnceLock;

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
