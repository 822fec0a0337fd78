//! Artifact verification: every digest, size and media type, the Hyperlight
//! format version, Lampyr's metadata, and whether the snapshot fits this host.

use std::path::{Path, PathBuf};

use oci_spec::image::{Descriptor, ImageIndex, ImageManifest};
use serde::Deserialize;

use super::layout::{MAX_JSON_BYTES, blob_path, read_blob, read_index, verify_blob_file};
use super::platform::Platform;
use super::{
    ARTIFACT_TAG, ArtifactError, FiberMetadata, HYPERLIGHT_SNAPSHOT_ABI, HYPERLIGHT_VERSION, MAX_ELF_BYTES, METADATA_NAMESPACE,
    MT_ARTIFACT, MT_EMPTY, MT_GUEST, MT_GUEST_ELF, MT_HYPERLIGHT_CONFIG, MT_HYPERLIGHT_MEMORY, MT_HYPERLIGHT_TRANSPORT,
};

/// Largest snapshot memory layer accepted.
pub const MAX_MEMORY_BYTES: u64 = 1024 * 1024 * 1024;
/// Largest transport layer accepted.
pub const MAX_TRANSPORT_BYTES: u64 = 16 * 1024 * 1024;
const MT_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const MT_INDEX: &str = "application/vnd.oci.image.index.v1+json";

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

/// Verifies the artifact `pin` (or the layout's `lampyr` tag) in the layout at `layout`.
pub fn verify_layout(layout: &Path, pin: Option<&str>) -> Result<VerifiedArtifact, ArtifactError> {
    let index = read_index(layout)?;
    let desc = select_artifact(&index, layout, pin)?;
    let digest = desc.digest().to_string();
    let artifact: ImageIndex = parse_json("artifact index", &read_blob(layout, desc, "artifact index", MAX_JSON_BYTES)?)?;
    expect("artifact index mediaType", MT_INDEX, artifact.media_type().as_ref().map(|m| m.to_string()))?;
    expect("artifact index artifactType", MT_ARTIFACT, artifact.artifact_type().as_ref().map(|m| m.to_string()))?;
    let [snap_desc, guest_desc] = artifact.manifests().as_slice() else {
        return Err(unexpected("artifact index manifests", "2 entries", artifact.manifests().len()));
    };

    let snap = read_manifest(layout, snap_desc, "snapshot manifest", MT_HYPERLIGHT_CONFIG)?;
    expect_layers(&snap, "snapshot manifest", &[MT_HYPERLIGHT_MEMORY, MT_HYPERLIGHT_TRANSPORT])?;
    let config_bytes = read_blob(layout, snap.config(), "snapshot config", MAX_JSON_BYTES)?;
    let (platform, metadata) = parse_snapshot_config(&config_bytes)?;
    let (memory, transport) = (&snap.layers()[0], &snap.layers()[1]);
    verify_blob_file(layout, memory, "snapshot memory layer", MAX_MEMORY_BYTES)?;
    verify_blob_file(layout, transport, "snapshot transport layer", MAX_TRANSPORT_BYTES)?;

    let guest = read_manifest(layout, guest_desc, "guest manifest", MT_GUEST)?;
    expect_layers(&guest, "guest manifest", &[MT_GUEST_ELF])?;
    expect("guest manifest config.mediaType", MT_EMPTY, Some(guest.config().media_type().to_string()))?;
    let elf = &guest.layers()[0];
    verify_blob_file(layout, elf, "guest ELF layer", MAX_ELF_BYTES)?;
    expect("metadata guestElfDigest", elf.digest().as_ref(), Some(metadata.guest_elf_digest.clone()))?;

    let fit = match Platform::host().mismatch(&platform) {
        None => PlatformFit::Fits,
        Some((field, host, snapshot)) => PlatformFit::Mismatch { field, host, snapshot },
    };
    Ok(VerifiedArtifact {
        layout: layout.to_path_buf(),
        digest,
        snapshot_manifest: snap_desc.digest().to_string(),
        guest_elf: blob_path(layout, elf.digest().as_ref())?,
        metadata,
        platform,
        fit,
        sizes: BlobSizes { memory: memory.size(), transport: transport.size(), config: snap.config().size(), elf: elf.size() },
    })
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

fn read_manifest(layout: &Path, desc: &Descriptor, what: &str, artifact_type: &str) -> Result<ImageManifest, ArtifactError> {
    expect(&format!("{what} descriptor mediaType"), MT_MANIFEST, Some(desc.media_type().to_string()))?;
    let manifest: ImageManifest = parse_json(what, &read_blob(layout, desc, what, MAX_JSON_BYTES)?)?;
    expect(&format!("{what} artifactType"), artifact_type, manifest.artifact_type().as_ref().map(|m| m.to_string()))?;
    Ok(manifest)
}

fn expect_layers(manifest: &ImageManifest, what: &str, media_types: &[&str]) -> Result<(), ArtifactError> {
    let found: Vec<String> = manifest.layers().iter().map(|l| l.media_type().to_string()).collect();
    if found != media_types {
        return Err(unexpected(&format!("{what} layers"), &format!("{media_types:?}"), format!("{found:?}")));
    }
    Ok(())
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
