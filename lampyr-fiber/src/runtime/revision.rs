//! A Revision's pool from its verified artifact and fiber policy: the one
//! place `ly run` and fiberd turn an artifact into fibers.

use std::sync::Arc;

use lampyr_abi::Env;

use super::capacity::CapacityAccount;
use super::pool::{FiberPool, PoolConfig};
use super::template::Template;
use crate::metrics::RuntimeMetrics;
use lampyr_api::policy::FiberPolicy;
use lampyr_artifact::{ArtifactError, VerifiedArtifact};

/// Why a Revision's pool could not be built.
#[derive(Debug, thiserror::Error)]
pub enum RevisionPoolError {
    /// The policy's memory is below the heap the artifact was built with.
    #[error(
        "memory {memory} B is below the artifact's fiber heap of {heap} B \
         (raise the limit, or rebuild with `ly snapshot build --heap-size`)"
    )]
    MemoryBelowHeap {
        /// The policy's memory request or limit, in bytes.
        memory: u64,
        /// The artifact's fiber heap, in bytes.
        heap: u64,
    },
    /// The template could not be loaded (snapshot, reboot, or environment).
    #[error(transparent)]
    Template(#[from] ArtifactError),
}

/// The fiber pool of Revision `revision`: `artifact`'s template with the
/// policy's environment applied, at most `max-scale` fibers (`unbounded_max`
/// when `max-scale` is 0), and a queue of fiber-router's size for them;
/// its fibers take slots of `capacity` when given (fiberd's grant instance).
///
/// The policy's memory is the guest's heap: below the artifact's heap it is
/// refused; above it, the carried guest ELF is booted with a heap of that size.
///
/// Blocks while the template loads (and, for an artifact from another
/// platform, with an environment or a larger heap, while guest code runs):
/// call it off the serving path. The pool starts with no fibers.
pub fn revision_pool(
    artifact: &VerifiedArtifact,
    policy: &FiberPolicy,
    revision: &str,
    unbounded_max: u32,
    capacity: Option<Arc<CapacityAccount>>,
    metrics: RuntimeMetrics,
) -> Result<FiberPool, RevisionPoolError> {
    let heap = artifact.metadata.heap_size;
    if let Some(memory) = policy.memory_bytes.filter(|m| *m < heap) {
        return Err(RevisionPoolError::MemoryBelowHeap { memory, heap });
    }
    // The memory limit is the guest's heap: a larger limit than the snapshot's heap boots it larger.
    let env = Env { vars: policy.env.clone(), args: policy.args.clone() };
    let template = Template::load_with_heap(artifact, &env, policy.memory_bytes.unwrap_or(heap))?;
    if let Some(account) = &capacity {
        account.hold_template(template.resident_bytes());
    }
    let max = if policy.scaling.max_scale == 0 { unbounded_max } else { policy.scaling.max_scale };
    let max_fibers = usize::try_from(max).unwrap_or(usize::MAX).max(1);
    let queue_capacity = lampyr_router::cluster::queue_for_fibers(max_fibers);
    let config = PoolConfig { revision: revision.to_string(), max_fibers, queue_capacity, capacity };
    Ok(FiberPool::new(template, config, metrics))
}
