//! Lampyr's snapshot artifacts without a hypervisor: reading and verifying them,
//! their references, the local cache, sealing for a fleet and moving them through
//! OCI registries. Building one (booting a guest and taking its snapshot) is
//! `lampyr-fiber`'s, the only crate that links Hyperlight.
//!
//! An artifact is an OCI image index (the digest Lampyr pins) naming two
//! manifests: Hyperlight's own snapshot manifest, unchanged, and a guest
//! manifest whose one layer is the guest ELF. See `docs/artifacts.md`.

pub mod cache;
pub mod credentials;
pub mod evict;
pub mod layout;
pub mod pack;
pub mod platform;
pub mod readers;
pub mod reference;
pub mod registry;
pub mod seal;
mod session;
pub mod structure;
pub mod verify;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use platform::Platform;
pub use reference::ArtifactRef;
pub use verify::{PlatformFit, VerifiedArtifact, verify_layout};

/// Largest guest ELF accepted.
pub const MAX_ELF_BYTES: u64 = 64 * 1024 * 1024;
/// `artifactType` of the index that is a Lampyr artifact.
pub const MT_ARTIFACT: &str = "application/vnd.lampyr.fiber.artifact.v1";
/// `artifactType` of the manifest carrying the guest ELF.
pub const MT_GUEST: &str = "application/vnd.lampyr.guest.v1";
/// Media type of the guest ELF layer.
pub const MT_GUEST_ELF: &str = "application/vnd.lampyr.guest.elf.v1";
/// Media type of the OCI empty config blob (`{}`).
pub const MT_EMPTY: &str = "application/vnd.oci.empty.v1+json";
/// Hyperlight's snapshot config media type this build reads (`Snapshot::save`'s `artifactType`).
pub const MT_HYPERLIGHT_CONFIG: &str = "application/vnd.hyperlight.snapshot.config.v3+json";
/// Hyperlight's memory layer media type.
pub const MT_HYPERLIGHT_MEMORY: &str = "application/vnd.hyperlight.snapshot.memory.v1";
/// Hyperlight's transport layer media type.
pub const MT_HYPERLIGHT_TRANSPORT: &str = "application/vnd.hyperlight.snapshot.transport.v1";
/// The Hyperlight release whose snapshot format Lampyr reads and writes.
pub const HYPERLIGHT_VERSION: &str = "0.18.0";
/// Hyperlight 0.18's memory-blob ABI version, recorded in every snapshot config.
pub const HYPERLIGHT_SNAPSHOT_ABI: u64 = 6;
/// Namespace of Lampyr's metadata inside the Hyperlight snapshot config.
pub const METADATA_NAMESPACE: &str = "dev.lampyr.fiber.v1";
/// `org.opencontainers.image.ref.name` of the artifact index in a layout.
pub const ARTIFACT_TAG: &str = "lampyr";
/// Tag of Hyperlight's snapshot manifest in a layout.
pub const SNAPSHOT_TAG: &str = "snapshot";

/// Lampyr's own metadata, stored in the snapshot config under [`METADATA_NAMESPACE`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FiberMetadata {
    /// Guest ABI version (`lampyr_abi::ABI_VERSION` of the guest SDK).
    pub abi_version: u32,
    /// Guest function serving requests.
    pub handler: String,
    /// Largest request body the fibers accept, in bytes.
    pub max_request_body: u64,
    /// Largest response body the fibers can return, in bytes.
    pub max_response_body: u64,
    /// Guest heap size, in bytes.
    pub heap_size: u64,
    /// Guest scratch size, in bytes.
    pub scratch_size: u64,
    /// Digest of the guest ELF layer.
    pub guest_elf_digest: String,
}

/// What went wrong building, reading or verifying an artifact.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    /// A file or directory could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A digest is not `sha256:` followed by 64 lowercase hex digits.
    #[error("{digest:?} is not a sha256 digest (expected sha256:<64 lowercase hex digits>)")]
    BadDigest {
        /// The offending text.
        digest: String,
    },
    /// A reference could not be parsed.
    #[error("{reference:?} is not an artifact reference: {reason}")]
    BadReference {
        /// The offending text.
        reference: String,
        /// Why.
        reason: String,
    },
    /// A blob's content does not hash to its digest.
    #[error("{what}: content digest is {actual}, expected {expected} (the blob was altered or corrupted)")]
    DigestMismatch {
        /// Which blob.
        what: String,
        /// Digest the descriptor or pin names.
        expected: String,
        /// Digest of the bytes found.
        actual: String,
    },
    /// A blob's size differs from its descriptor.
    #[error("{what} {digest}: size is {actual} bytes, descriptor says {expected} (truncated or padded)")]
    SizeMismatch {
        /// Which blob.
        what: String,
        /// Its digest.
        digest: String,
        /// Size in the descriptor.
        expected: u64,
        /// Size found.
        actual: u64,
    },
    /// A blob or document is larger than Lampyr accepts.
    #[error("{what}: {size} bytes exceeds the limit of {max} bytes")]
    TooLarge {
        /// Which blob.
        what: String,
        /// Its size.
        size: u64,
        /// The limit.
        max: u64,
    },
    /// A descriptor declares more bytes than Lampyr accepts for what it names.
    #[error("{what} {digest} declares {size} bytes, over the limit of {max}")]
    Declared {
        /// Which document or blob.
        what: String,
        /// Its digest.
        digest: String,
        /// The size declared.
        size: u64,
        /// The limit.
        max: u64,
    },
    /// Decompressing a layer gave other bytes than the layer it declares.
    #[error(
        "{what}: the compressed layer {packed} decompresses to {actual}, not to the {expected} the artifact pins \
         (the compressed form was altered or built wrongly; nothing of it was kept)"
    )]
    Decompressed {
        /// Which layer.
        what: String,
        /// Digest of the compressed blob.
        packed: String,
        /// What it must decompress to (digest, or size in bytes).
        expected: String,
        /// What it decompressed to.
        actual: String,
    },
    /// A field holds a value other than the one required.
    #[error("{field}: expected {expected}, found {actual}")]
    Unexpected {
        /// Which field, as a path.
        field: String,
        /// What Lampyr requires.
        expected: String,
        /// What the artifact has.
        actual: String,
    },
    /// A document does not parse.
    #[error("{what} is malformed: {reason}")]
    Malformed {
        /// Which document.
        what: String,
        /// The parser's complaint.
        reason: String,
    },
    /// Nothing in the layout matches the reference.
    #[error("no artifact {reference} in {layout}")]
    NotFound {
        /// What was looked for.
        reference: String,
        /// Where.
        layout: PathBuf,
    },
    /// Hyperlight refused an operation (while building an artifact or loading its template).
    #[error("hyperlight: {context}: {source}")]
    Hyperlight {
        /// What Lampyr was doing.
        context: String,
        /// Hyperlight's error (boxed: this crate does not link Hyperlight).
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The guest does not implement Lampyr's ABI.
    #[error("guest does not speak Lampyr ABI {expected}: {reason} (build it with the lampyr-guest SDK)")]
    NotALampyrGuest {
        /// ABI version this host speaks.
        expected: u16,
        /// What the guest did instead.
        reason: String,
    },
}

impl ArtifactError {
    /// An I/O error at `path`.
    pub fn io(path: &Path, source: std::io::Error) -> Self {
        ArtifactError::Io { path: path.to_path_buf(), source }
    }

    /// A Hyperlight error while doing `context`.
    pub fn hyperlight(context: impl Into<String>, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        ArtifactError::Hyperlight { context: context.into(), source: Box::new(source) }
    }
}
