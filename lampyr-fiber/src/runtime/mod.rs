//! Fibers serving requests: templates, fibers, pools, spare sandboxes, readiness, watchdogs.

pub mod capacity;
pub mod fiber;
pub mod host;
pub mod pool;
pub mod readiness;
pub mod revision;
pub mod spare;
pub mod stream;
pub mod template;
pub mod watchdog;

pub use capacity::{Capacity, CapacityAccount, CapacityExhausted, CapacityUsage};
pub use pool::{Answer, CallTimings, FiberPool, PoolConfig, PoolStats, StreamedBody};
pub use readiness::{NotReady, check_ready};
pub use revision::{RevisionPoolError, revision_pool};
pub use template::Template;
