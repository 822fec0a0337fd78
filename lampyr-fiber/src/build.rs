//! `ly snapshot build`: boot a guest ELF, run its init, take the snapshot and
//! write the Lampyr artifact (snapshot + guest ELF) into an OCI image layout.

use std::path::{Path, PathBuf};

use hyperlight_common::flatbuffer_wrappers::guest_error::ErrorCode;
use hyperlight_host::sandbox::snapshot::OciTag;
use hyperlight_host::{HyperlightError, Sandbox, SandboxBuilder};
use lampyr_abi::{ABI_VERSION, ABI_VERSION_FUNCTION, HANDLE_FUNCTION, INIT_FUNCTION};

use lampyr_artifact::layout::sha256_digest;
use lampyr_artifact::pack::write_artifact;
use lampyr_artifact::structure::Form;
use lampyr_artifact::{
    ArtifactError, FiberMetadata, MAX_ELF_BYTES, METADATA_NAMESPACE, PlatformFit, SNAPSHOT_TAG, VerifiedArtifact, verify_layout,
};

const PAGE: u64 = 4096;
const FRAME_HEADROOM: u64 = 64 * 1024;

/// Sizes fixed into the snapshot (Hyperlight takes them from the snapshot when restoring).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuildOptions {
    /// Largest request and response body, in bytes (default 1 MiB).
    pub max_body: u64,
    /// Guest heap; by default large enough for a request and a response of `max_body`.
    pub heap_size: Option<u64>,
}

impl Default for BuildOptions {
    fn default() -> Self {
        BuildOptions { max_body: 1024 * 1024, heap_size: None }
    }
}

/// Buffer, heap and scratch sizes derived from [`BuildOptions`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SandboxSizes {
    /// Host↔guest buffer size in each direction.
    pub buffer: u64,
    /// Pages in each buffer pool (two buffers, one kept spare by Hyperlight).
    pub pool_pages: u64,
    /// Guest heap.
    pub heap: u64,
    /// Guest scratch region.
    pub scratch: u64,
}

impl BuildOptions {
    /// The sandbox sizes these options call for.
    pub fn sizes(&self) -> SandboxSizes {
        let buffer = round_up(self.max_body + FRAME_HEADROOM, PAGE);
        let pool_pages = 2 * buffer / PAGE;
        // The guest's buddy allocator hands out power-of-two blocks of at most half the
        // heap; a request frame, its decoded body, the response and its frame must fit.
        let heap = self.heap_size.unwrap_or_else(|| (4 * buffer.next_power_of_two()).max(2 * 1024 * 1024));
        let scratch = round_up(heap + 2 * pool_pages * PAGE + 2 * 1024 * 1024, 64 * 1024);
        SandboxSizes { buffer, pool_pages, heap, scratch }
    }
}

fn round_up(n: u64, to: u64) -> u64 {
    n.div_ceil(to) * to
}

/// The result of [`build_artifact`].
#[derive(Clone, Debug)]
pub struct BuiltArtifact {
    /// The layout directory written.
    pub layout: PathBuf,
    /// Digest of the artifact index: what `lampyr.dev/snapshot-artifact` pins.
    pub digest: String,
    /// Digest of Hyperlight's snapshot manifest inside it.
    pub snapshot_manifest: String,
    /// Lampyr metadata recorded in the snapshot.
    pub metadata: FiberMetadata,
}

/// `builder` with Lampyr's sizes and host functions. Building from a snapshot
/// takes the sizes from the snapshot; giving the same ones keeps Hyperlight
/// from warning about overridden settings.
pub fn lampyr_builder(builder: SandboxBuilder, s: &SandboxSizes) -> SandboxBuilder {
    builder
        .heap_size(s.heap)
        .scratch_size(s.scratch as usize)
        .h2g_buffer_size(s.buffer as usize)
        .g2h_buffer_size(s.buffer as usize)
        .h2g_pool_pages(s.pool_pages as usize)
        .g2h_pool_pages(s.pool_pages as usize)
        .host_print(crate::runtime::host::guest_print)
        .host_function(crate::runtime::host::SLEEP_FUNCTION, crate::runtime::host::guest_sleep)
        .host_function(crate::runtime::host::LOG_FUNCTION, crate::runtime::host::guest_log)
        .host_function(lampyr_abi::STREAM_HEAD_FUNCTION, crate::runtime::stream::guest_stream_head)
        .host_function(lampyr_abi::STREAM_WRITE_FUNCTION, crate::runtime::stream::guest_stream_write)
}

/// Boots `elf` in a sandbox sized by `opts`, checks it speaks Lampyr's ABI,
/// runs its `init`, and returns the evolved sandbox.
pub fn boot_guest(elf: &[u8], opts: &BuildOptions) -> Result<Sandbox, ArtifactError> {
    let mut sandbox = lampyr_builder(SandboxBuilder::from_bytes(elf.to_vec()), &opts.sizes())
        .build()
        .map_err(|e| ArtifactError::hyperlight("booting the guest ELF", e))?;
    let not_lampyr = |reason: String| ArtifactError::NotALampyrGuest { expected: ABI_VERSION, reason };
    match sandbox.call::<u32>(ABI_VERSION_FUNCTION, ()) {
        Ok(v) if v == u32::from(ABI_VERSION) => {}
        Ok(v) => return Err(not_lampyr(format!("it reports ABI version {v}"))),
        Err(HyperlightError::GuestError(ErrorCode::GuestFunctionNotFound, _)) => {
            return Err(not_lampyr(format!("it exports no {ABI_VERSION_FUNCTION} function")));
        }
        Err(e) => return Err(ArtifactError::hyperlight("asking the guest for its ABI version", e)),
    }
    sandbox.call::<u32>(INIT_FUNCTION, ()).map_err(|e| ArtifactError::hyperlight("running the guest's init", e))?;
    Ok(sandbox)
}

/// Builds the artifact for the guest ELF at `elf` into the layout at `out`.
pub fn build_artifact(elf: &Path, out: &Path, opts: &BuildOptions) -> Result<BuiltArtifact, ArtifactError> {
    let elf_bytes = read_elf(elf)?;
    let mut sandbox = boot_guest(&elf_bytes, opts)?;
    let s = opts.sizes();
    let metadata = FiberMetadata {
        abi_version: u32::from(ABI_VERSION),
        handler: HANDLE_FUNCTION.to_string(),
        max_request_body: opts.max_body,
        max_response_body: opts.max_body,
        heap_size: s.heap,
        scratch_size: s.scratch,
        guest_elf_digest: sha256_digest(&elf_bytes),
    };
    let snapshot = sandbox
        .snapshot()
        .and_then(|snap| snap.with_metadata(METADATA_NAMESPACE, &metadata))
        .map_err(|e| ArtifactError::hyperlight("taking the snapshot", e))?;
    if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| ArtifactError::io(parent, e))?;
    }
    let tag = OciTag::new(SNAPSHOT_TAG).map_err(|e| ArtifactError::hyperlight("naming the snapshot", e))?;
    let snapshot_manifest = snapshot
        .save(out, &tag)
        .map_err(|e| ArtifactError::hyperlight(format!("saving the snapshot to {}", out.display()), e))?
        .to_string();
    let digest = write_artifact(out, &snapshot_manifest, &elf_bytes, Form::Packed)?;
    Ok(BuiltArtifact { layout: out.to_path_buf(), digest, snapshot_manifest, metadata })
}

/// The artifact in `out` when it was built from exactly this `elf` with these
/// options for this host (its metadata records the ELF's digest and the sizes);
/// `None` when there is none, it differs, or it does not verify. Snapshots are
/// not byte-for-byte reproducible, so reusing one keeps an unchanged guest's
/// artifact digest, and everything pinned to it, stable.
pub fn reusable_artifact(elf: &Path, out: &Path, opts: &BuildOptions) -> Option<VerifiedArtifact> {
    let existing = verify_layout(out, None).ok()?;
    let elf_digest = sha256_digest(&read_elf(elf).ok()?);
    let s = opts.sizes();
    let m = &existing.metadata;
    let same = m.abi_version == u32::from(ABI_VERSION)
        && m.guest_elf_digest == elf_digest
        && (m.max_request_body, m.max_response_body) == (opts.max_body, opts.max_body)
        && (m.heap_size, m.scratch_size) == (s.heap, s.scratch)
        && existing.fit == PlatformFit::Fits;
    same.then_some(existing)
}

fn read_elf(path: &Path) -> Result<Vec<u8>, ArtifactError> {
    let len = std::fs::metadata(path).map_err(|e| ArtifactError::io(path, e))?.len();
    if len > MAX_ELF_BYTES {
        return Err(ArtifactError::TooLarge { what: path.display().to_string(), size: len, max: MAX_ELF_BYTES });
    }
    std::fs::read(path).map_err(|e| ArtifactError::io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_sizes_hold_a_mebibyte_each_way() {
        let s = BuildOptions::default().sizes();
        assert!(s.buffer >= 1024 * 1024 + FRAME_HEADROOM);
        assert_eq!(s.buffer % PAGE, 0);
        assert_eq!(s.pool_pages, 2 * s.buffer / PAGE);
        // Half the heap must hold one buffer-sized allocation, rounded to a power of two.
        assert!(s.heap / 2 >= s.buffer.next_power_of_two());
        assert!(s.scratch >= s.heap + 2 * s.pool_pages * PAGE);
    }

    #[test]
    fn explicit_heap_is_kept() {
        let opts = BuildOptions { max_body: 1024, heap_size: Some(3 << 20) };
        assert_eq!(opts.sizes().heap, 3 << 20);
    }
}
