//! A Revision's template: the verified artifact's snapshot with the
//! Revision's environment applied, from which every fiber is restored.

use std::sync::Arc;

use hyperlight_host::sandbox::snapshot::{OciDigest, Snapshot};
use hyperlight_host::{Sandbox, SandboxBuilder};
use lampyr_abi::{CONFIGURE_FUNCTION, Env, Limits, encode_env};

use crate::build::{BuildOptions, SandboxSizes, boot_guest, lampyr_builder};
use lampyr_artifact::{ArtifactError, FiberMetadata, PlatformFit, VerifiedArtifact};

/// The snapshot fibers of one Revision are restored from, and its limits.
pub struct Template {
    snapshot: Arc<Snapshot>,
    /// Whether the snapshot was made in this process (booted or configured here) rather
    /// than mapped from the artifact's layout.
    made_here: bool,
    metadata: FiberMetadata,
    sizes: SandboxSizes,
    digest: String,
}

impl Template {
    /// Loads `artifact` and applies `env`. A snapshot taken on another platform
    /// is not restored: the carried guest ELF is booted and snapshotted here.
    pub fn load(artifact: &VerifiedArtifact, env: &Env) -> Result<Self, ArtifactError> {
        Self::load_with_heap(artifact, env, artifact.metadata.heap_size)
    }

    /// [`Template::load`] with a guest heap of `heap` bytes: when that is larger than
    /// the snapshot's, the carried guest ELF is booted with it and snapshotted here
    /// (a Revision whose memory limit is above its artifact's heap gets the limit).
    pub fn load_with_heap(artifact: &VerifiedArtifact, env: &Env, heap: u64) -> Result<Self, ArtifactError> {
        let mut metadata = artifact.metadata.clone();
        let from_layout = matches!(artifact.fit, PlatformFit::Fits) && heap <= metadata.heap_size;
        let base = match &artifact.fit {
            _ if from_layout => load_snapshot(artifact)?,
            PlatformFit::Fits => {
                tracing::info!(artifact = %artifact.digest, heap, snapshot_heap = metadata.heap_size,
                    "the memory limit is above the snapshot's heap; booting the carried guest ELF with a heap of the limit");
                metadata.heap_size = heap;
                reboot_from_elf(artifact, &metadata)?
            }
            PlatformFit::Mismatch { field, host, snapshot } => {
                tracing::warn!(
                    artifact = %artifact.digest, field = *field, host = %host, snapshot = %snapshot,
                    "snapshot was taken on another platform; booting the carried guest ELF and re-snapshotting locally"
                );
                metadata.heap_size = metadata.heap_size.max(heap);
                reboot_from_elf(artifact, &metadata)?
            }
        };
        let sizes = build_options(&metadata).sizes();
        let configured = !(env.vars.is_empty() && env.args.is_empty());
        let snapshot = if configured { apply_env(base, env, &sizes)? } else { base };
        let made_here = !from_layout || configured;
        Ok(Template { snapshot, made_here, metadata, sizes, digest: artifact.digest.clone() })
    }

    /// The snapshot fibers are built from and restored to.
    pub fn snapshot(&self) -> &Arc<Snapshot> {
        &self.snapshot
    }

    /// Bytes of process memory the snapshot itself holds: about its guest memory when it
    /// was booted or configured here, none when it maps the artifact's files.
    pub fn resident_bytes(&self) -> u64 {
        if self.made_here { self.sizes.scratch } else { 0 }
    }

    /// Lampyr metadata of the artifact.
    pub fn metadata(&self) -> &FiberMetadata {
        &self.metadata
    }

    /// Digest of the artifact this template comes from.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// Frame limits for this template's responses.
    pub fn response_limits(&self) -> Limits {
        Limits::for_body(usize::try_from(self.metadata.max_response_body).unwrap_or(usize::MAX))
    }

    /// A new sandbox from the template; no guest code runs.
    pub fn new_sandbox(&self) -> Result<Sandbox, hyperlight_host::HyperlightError> {
        sandbox_from(&self.snapshot, &self.sizes)
    }

    /// A sandbox of the template for a Revision waking from zero: a spare restored to it
    /// ([`super::spare`]) when one of its sizes is ready, else a new one.
    pub fn waking_sandbox(&self) -> Result<Sandbox, hyperlight_host::HyperlightError> {
        match super::spare::take(&self.snapshot, &self.sizes) {
            Some(sandbox) => Ok(sandbox),
            None => self.new_sandbox(),
        }
    }
}

/// A sandbox from `snapshot` with Lampyr's host functions.
pub(super) fn sandbox_from(snapshot: &Arc<Snapshot>, sizes: &SandboxSizes) -> Result<Sandbox, hyperlight_host::HyperlightError> {
    lampyr_builder(SandboxBuilder::from_snapshot(Arc::clone(snapshot)), sizes).build()
}

/// The build options an artifact's metadata records.
fn build_options(m: &FiberMetadata) -> BuildOptions {
    BuildOptions { max_body: m.max_request_body, heap_size: Some(m.heap_size) }
}

fn load_snapshot(artifact: &VerifiedArtifact) -> Result<Arc<Snapshot>, ArtifactError> {
    let digest = OciDigest::try_from(artifact.snapshot_manifest.as_str())
        .map_err(|e| ArtifactError::hyperlight("parsing the snapshot manifest digest", e))?;
    // The verifier has already hashed every blob; `load` maps them without hashing again.
    Snapshot::load(&artifact.layout, digest)
        .map(Arc::new)
        .map_err(|e| ArtifactError::hyperlight(format!("loading snapshot {}", artifact.snapshot_manifest), e))
}

/// Boots `artifact`'s carried guest ELF with the sizes `metadata` records and snapshots it.
fn reboot_from_elf(artifact: &VerifiedArtifact, metadata: &FiberMetadata) -> Result<Arc<Snapshot>, ArtifactError> {
    let elf = std::fs::read(&artifact.guest_elf).map_err(|e| ArtifactError::io(&artifact.guest_elf, e))?;
    let mut sandbox = boot_guest(&elf, &build_options(metadata))?;
    sandbox.snapshot().map_err(|e| ArtifactError::hyperlight("snapshotting the rebooted guest", e))
}

fn apply_env(base: Arc<Snapshot>, env: &Env, sizes: &SandboxSizes) -> Result<Arc<Snapshot>, ArtifactError> {
    let mut sandbox =
        sandbox_from(&base, sizes).map_err(|e| ArtifactError::hyperlight("creating a sandbox to apply the environment", e))?;
    let refusal: String =
        sandbox.call(CONFIGURE_FUNCTION, encode_env(env)).map_err(|e| ArtifactError::hyperlight("applying the Revision environment", e))?;
    if !refusal.is_empty() {
        return Err(ArtifactError::NotALampyrGuest { expected: lampyr_abi::ABI_VERSION, reason: refusal });
    }
    sandbox.snapshot().map_err(|e| ArtifactError::hyperlight("snapshotting the configured guest", e))
}
