//! Artifact verification: every digest, size and media type, the Hyperlight
//! format version, Lampyr's metadata, and whether the snapshot fits this host.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use oci_spec::image::{Descriptor, ImageIndex};
use serde::Deserialize;

use super::layout::{MAX_JSON_BYTES, blob_path, read_blob, read_index, verify_blob_file};
use super::platform::Platform;
use super::structure::{Structure, packed_limit};
use super::{ARTIFACT_TAG, ArtifactError, FiberMetadata, HYPERLIGHT_SNAPSHOT_ABI, HYPERLIGHT_VERSION, METADATA_NAMESPACE};

/// Largest snapshot memory layer accepted.
pub const MAX_MEMORY_BYTES: u64 = 1024 * 1024 * 1024;
/// Largest transport layer accepted.
pub const MAX_TRANSPORT_BYTES: u64 = 16 * 1024 * 1024;

/// Whether the snapshot can be restored on this host as it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlatformFit {
    /// Same architecture, hypervisor and CPU vendor: restore the snapshot.
    Fits,
    /// Taken elsewhere: boot the carried guest ELF and snapshot locally instead.
    Mismatch {
        /// The first differing field.
        field: &'static str,
        /// This host's value.
        host: String,
        /// The snapshot's value.
        snapshot: String,
    },
}

/// A verified artifact in a local layout.
#[derive(Clone, Debug)]
pub struct VerifiedArtifact {
    /// The layout directory.
    pub layout: PathBuf,
    /// Digest of the artifact index.
    pub digest: String,
    /// Digest of Hyperlight's snapshot manifest.
    pub snapshot_manifest: String,
    /// Path of the guest ELF blob.
    pub guest_elf: PathBuf,
    /// Lampyr's metadata from the snapshot config.
    pub metadata: FiberMetadata,
    /// Where the snapshot was taken.
    pub platform: Platform,
    /// Whether it fits this host.
    pub fit: PlatformFit,
    /// Sizes of the memory, transport, config and ELF blobs, in bytes.
    pub sizes: BlobSizes,
}

/// Sizes of an artifact's blobs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlobSizes {
    /// Snapshot memory layer.
    pub memory: u64,
    /// Snapshot transport layer.
    pub transport: u64,
    /// Snapshot config.
    pub config: u64,
    /// Guest ELF.
    pub elf: u64,
}

/// The fields of Hyperlight's snapshot config Lampyr checks; the rest is Hyperlight's.
#[derive(Deserialize)]
struct HyperlightConfig {
    hyperlight_version: String,
    abi_version: u64,
    arch: String,
    hypervisor: String,
    cpu_vendor: String,
    #[serde(default)]
    metadata: serde_json::Map<String, serde_json::Value>,
}

/// Verifies the artifact `pin` (or the layout's `lampyr` tag) in the layout at `layout`:
/// every document and every layer as loaded is read and checked against its digest; a
/// compressed transport form the layout holds is checked too (a pulled layout keeps
/// only what is loaded).
pub fn verify_layout(layout: &Path, pin: Option<&str>) -> Result<VerifiedArtifact, ArtifactError> {
    verify_fresh_layout(layout, pin, &HashSet::new())
}

/// [`verify_layout`] for a layout whose layers `hashed` (digests) were hashed against
/// their digests on their way into it just now (a pull): those are checked for size only.
pub fn verify_fresh_layout(layout: &Path, pin: Option<&str>, hashed: &HashSet<String>) -> Result<VerifiedArtifact, ArtifactError> {
    let artifact = layout_structure(layout, pin)?;
    let digest = artifact.digest.clone();
    let config_bytes = read_blob(layout, &artifact.config, "snapshot config", MAX_JSON_BYTES)?;
    let (platform, metadata) = parse_snapshot_config(&config_bytes)?;
    for layer in artifact.layers() {
        if hashed.contains(layer.native.digest().as_ref()) {
            check_blob_size(layout, &layer.native, layer.what)?;
        } else {
            verify_blob_file(layout, &layer.native, layer.what, layer.max)?;
        }
        if let Some(packed) = layer.packed.as_ref().filter(|p| blob_path(layout, p.digest().as_ref()).is_ok_and(|p| p.is_file())) {
            verify_blob_file(layout, packed, layer.what, packed_limit(layer.max))?;
        }
    }
    read_blob(layout, &artifact.guest_config, "guest config", MAX_JSON_BYTES)?;
    let elf = &artifact.elf.native;
    expect("metadata guestElfDigest", elf.digest().as_ref(), Some(metadata.guest_elf_digest.clone()))?;

    let fit = match Platform::host().mismatch(&platform) {
        None => PlatformFit::Fits,
        Some((field, host, snapshot)) => PlatformFit::Mismatch { field, host, snapshot },
    };
    Ok(VerifiedArtifact {
        layout: layout.to_path_buf(),
        digest,
        snapshot_manifest: artifact.hyperlight_manifest.digest().to_string(),
        guest_elf: blob_path(layout, elf.digest().as_ref())?,
        metadata,
        platform,
        fit,
        sizes: BlobSizes {
            memory: artifact.memory.native.size(),
            transport: artifact.transport.native.size(),
            config: artifact.config.size(),
            elf: elf.size(),
        },
    })
}

/// What the artifact `pin` (or the layout's `lampyr` tag) in `layout` names, its
/// documents checked against their digests (its layers are not read).
pub fn layout_structure(layout: &Path, pin: Option<&str>) -> Result<Structure, ArtifactError> {
    let index = read_index(layout)?;
    let desc = select_artifact(&index, layout, pin)?;
    let index_bytes = read_blob(layout, desc, "artifact index", MAX_JSON_BYTES)?;
    Structure::read(desc.digest().as_ref(), &index_bytes, |d, what| read_blob(layout, d, what, MAX_JSON_BYTES))
}

/// Checks that blob `desc` of `layout` has the size it declares.
fn check_blob_size(layout: &Path, desc: &Descriptor, what: &str) -> Result<(), ArtifactError> {
    let path = blob_path(layout, desc.digest().as_ref())?;
    let len = std::fs::metadata(&path).map_err(|e| ArtifactError::io(&path, e))?.len();
    if len != desc.size() {
        let (what, digest) = (what.to_string(), desc.digest().to_string());
        return Err(ArtifactError::SizeMismatch { what, digest, expected: desc.size(), actual: len });
    }
    Ok(())
}

/// Checks Hyperlight's snapshot config (format version) and returns where the
/// snapshot was taken and Lampyr's metadata. Total over any input bytes.
pub fn parse_snapshot_config(bytes: &[u8]) -> Result<(Platform, FiberMetadata), ArtifactError> {
    let config: HyperlightConfig = parse_json("snapshot config", bytes)?;
    expect("snapshot config hyperlight_version", HYPERLIGHT_VERSION, Some(config.hyperlight_version.clone()))?;
    expect("snapshot config abi_version", &HYPERLIGHT_SNAPSHOT_ABI.to_string(), Some(config.abi_version.to_string()))?;
    let metadata = lampyr_metadata(&config)?;
    let platform = Platform { arch: config.arch, hypervisor: config.hypervisor, cpu_vendor: config.cpu_vendor };
    Ok((platform, metadata))
}

fn select_artifact<'a>(index: &'a ImageIndex, layout: &Path, pin: Option<&str>) -> Result<&'a Descriptor, ArtifactError> {
    let found = match pin {
        Some(pin) => index.manifests().iter().find(|d| d.digest().to_string() == pin),
        None => index.manifests().iter().find(|d| {
            d.annotations().as_ref().and_then(|a| a.get("org.opencontainers.image.ref.name")).map(String::as_str) == Some(ARTIFACT_TAG)
        }),
    };
    let reference = pin.map_or_else(|| format!("tagged {ARTIFACT_TAG:?}"), str::to_string);
    found.ok_or_else(|| ArtifactError::NotFound { reference, layout: layout.to_path_buf() })
}

fn lampyr_metadata(config: &HyperlightConfig) -> Result<FiberMetadata, ArtifactError> {
    let value = config.metadata.get(METADATA_NAMESPACE).ok_or_else(|| {
        unexpected(
            &format!("snapshot config metadata.{METADATA_NAMESPACE}"),
            "Lampyr metadata",
            "nothing (not built by `ly snapshot build`)",
        )
    })?;
    let metadata: FiberMetadata = serde_json::from_value(value.clone())
        .map_err(|e| ArtifactError::Malformed { what: format!("metadata.{METADATA_NAMESPACE}"), reason: e.to_string() })?;
    expect("metadata abiVersion", &lampyr_abi::ABI_VERSION.to_string(), Some(metadata.abi_version.to_string()))?;
    expect("metadata handler", lampyr_abi::HANDLE_FUNCTION, Some(metadata.handler.clone()))?;
    Ok(metadata)
}

fn parse_json<T: serde::de::DeserializeOwned>(what: &str, bytes: &[u8]) -> Result<T, ArtifactError> {
    serde_json::from_slice(bytes).map_err(|e| ArtifactError::Malformed { what: what.to_string(), reason: e.to_string() })
}

fn expect(field: &str, expected: &str, actual: Option<String>) -> Result<(), ArtifactError> {
    match actual {
        Some(a) if a == expected => Ok(()),
        other => Err(unexpected(field, expected, other.unwrap_or_else(|| "nothing".to_string()))),
    }
}

fn unexpected(field: &str, expected: &str, actual: impl ToString) -> ArtifactError {
    ArtifactError::Unexpected { field: field.to_string(), expected: expected.to_string(), actual: actual.to_string() }
}
