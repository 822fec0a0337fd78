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
    metadata: FiberMetadata,
    sizes: SandboxSizes,
    digest: String,
}

impl Template {
    /// Loads `artifact` and applies `env`. A snapshot taken on another platform
    /// is not restored: the carried guest ELF is booted and snapshotted here.
    pub fn load(artifact: &VerifiedArtifact, env: &Env) -> Result<Self, ArtifactError> {
        let base = match &artifact.fit {
            PlatformFit::Fits => load_snapshot(artifact)?,
            PlatformFit::Mismatch { field, host, snapshot } => {
                tracing::warn!(
                    artifact = %artifact.digest, field = *field, host = %host, snapshot = %snapshot,
                    "snapshot was taken on another platform; booting the carried guest ELF and re-snapshotting locally"
                );
                reboot_from_elf(artifact)?
            }
        };
        let sizes = build_options(&artifact.metadata).sizes();
        let snapshot = if env.vars.is_empty() && env.args.is_empty() { base } else { apply_env(base, env, &sizes)? };
        Ok(Template { snapshot, metadata: artifact.metadata.clone(), sizes, digest: artifact.digest.clone() })
    }

    /// The snapshot fibers are built from and restored to.
    pub fn snapshot(&self) -> &Arc<Snapshot> {
        &self.snapshot
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
}

/// A sandbox from `snapshot` with Lampyr's host functions.
fn sandbox_from(snapshot: &Arc<Snapshot>, sizes: &SandboxSizes) -> Result<Sandbox, hyperlight_host::HyperlightError> {
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

fn reboot_from_elf(artifact: &VerifiedArtifact) -> Result<Arc<Snapshot>, ArtifactError> {
    let elf = std::fs::read(&artifact.guest_elf).map_err(|e| ArtifactError::io(&artifact.guest_elf, e))?;
    let mut sandbox = boot_guest(&elf, &build_options(&artifact.metadata))?;
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
