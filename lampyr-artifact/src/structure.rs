//! What an artifact's index and manifests name, read once for every user (the
//! verifier, the cache, sealing and the registry), in either transport form.
//!
//! ```text
//! plain (v1):  index ─┬─ Hyperlight's snapshot manifest ── config, memory, transport
//!                     └─ guest manifest ── {} , guest ELF
//! packed (v2): index ─┬─ packed snapshot manifest ── config, Hyperlight's manifest (a blob),
//!                     │                               memory+zstd, transport+zstd
//!                     └─ guest manifest ── {} , guest ELF+zstd
//! ```
//!
//! A packed layer's descriptor records the digest and size of the layer it decompresses
//! to ([`UNCOMPRESSED_DIGEST`], [`UNCOMPRESSED_SIZE`]); those must be the layers
//! Hyperlight's own manifest lists, so the pinned index covers both forms.

use oci_spec::image::{Descriptor, ImageIndex, ImageManifest, MediaType};

use crate::layout::{MAX_JSON_BYTES, check_blob, digest_hex, sha256_digest};
use crate::verify::{MAX_MEMORY_BYTES, MAX_TRANSPORT_BYTES};
use crate::{
    ArtifactError, MAX_ELF_BYTES, MT_ARTIFACT, MT_EMPTY, MT_GUEST, MT_GUEST_ELF, MT_HYPERLIGHT_CONFIG, MT_HYPERLIGHT_MEMORY,
    MT_HYPERLIGHT_TRANSPORT,
};

/// OCI image index media type.
pub const MT_INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// OCI image manifest media type.
pub const MT_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// `artifactType` of the packed snapshot manifest (the compressed transport form).
pub const MT_PACKED_SNAPSHOT: &str = "application/vnd.lampyr.snapshot.packed.v1";
/// Media type of the packed manifest's layer holding Hyperlight's own manifest, unchanged.
pub const MT_HYPERLIGHT_MANIFEST_LAYER: &str = "application/vnd.lampyr.hyperlight.manifest.v1+json";
/// Media-type suffix of a zstd-compressed layer.
pub const ZSTD_SUFFIX: &str = "+zstd";
/// Annotation of a compressed layer: the digest of the layer it decompresses to.
pub const UNCOMPRESSED_DIGEST: &str = "dev.lampyr.uncompressed.digest";
/// Annotation of a compressed layer: the size of the layer it decompresses to.
pub const UNCOMPRESSED_SIZE: &str = "dev.lampyr.uncompressed.size";

/// How an artifact's layers travel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    /// Hyperlight's manifest is listed itself and every layer travels as it is loaded
    /// (artifacts pushed before compressed transport).
    Plain,
    /// The snapshot travels in a packed manifest whose large layers may be compressed.
    Packed,
}

/// One data layer of an artifact: the form loaded on the node and the form it travels in.
#[derive(Clone, Debug, PartialEq)]
pub struct DataLayer {
    /// What it is, for messages.
    pub what: &'static str,
    /// As Hyperlight or the guest loader reads it; the cache and layouts keep this form.
    pub native: Descriptor,
    /// Its compressed transport form, when it travels compressed.
    pub packed: Option<Descriptor>,
    /// Largest native size accepted.
    pub max: u64,
}

impl DataLayer {
    /// The descriptor of the bytes a registry holds for this layer.
    pub fn transport(&self) -> &Descriptor {
        self.packed.as_ref().unwrap_or(&self.native)
    }
}

/// Everything an artifact index names, checked for shape and declared sizes.
#[derive(Clone, Debug)]
pub struct Structure {
    /// Digest of the artifact index (the pin).
    pub digest: String,
    /// The transport form.
    pub form: Form,
    /// The index's first entry (Hyperlight's manifest, or the packed one), with the
    /// platform annotations Hyperlight puts on index descriptors.
    pub snapshot: Descriptor,
    /// Hyperlight's own snapshot manifest: `snapshot` itself, or the packed manifest's first layer.
    pub hyperlight_manifest: Descriptor,
    /// The guest manifest.
    pub guest: Descriptor,
    /// Hyperlight's snapshot config.
    pub config: Descriptor,
    /// The guest manifest's empty config.
    pub guest_config: Descriptor,
    /// The snapshot memory layer.
    pub memory: DataLayer,
    /// The snapshot transport layer.
    pub transport: DataLayer,
    /// The guest ELF layer.
    pub elf: DataLayer,
}

/// Largest compressed form accepted for a layer of at most `max` bytes (zstd's worst case).
pub fn packed_limit(max: u64) -> u64 {
    max + max / 128 + 64 * 1024
}

impl Structure {
    /// Reads artifact `digest` from its index bytes, fetching the manifests it names with
    /// `doc(descriptor, what)`, which returns their bytes checked against the descriptor.
    pub fn read<E: From<ArtifactError>>(
        digest: &str,
        index_bytes: &[u8],
        mut doc: impl FnMut(&Descriptor, &'static str) -> Result<Vec<u8>, E>,
    ) -> Result<Structure, E> {
        let (snapshot, guest) = index_entries(index_bytes)?;
        let snapshot_manifest: ImageManifest = parse_json("snapshot manifest", &doc(&snapshot, "snapshot manifest")?)?;
        let (form, hyperlight_manifest, config, memory, transport) = match artifact_type(&snapshot_manifest).as_deref() {
            Some(MT_HYPERLIGHT_CONFIG) => {
                let (config, memory, transport) = hyperlight_layers(&snapshot_manifest, "snapshot manifest")?;
                (Form::Plain, snapshot.clone(), config, memory, transport)
            }
            Some(MT_PACKED_SNAPSHOT) => {
                let packed = packed_layers(&snapshot_manifest)?;
                let carried: ImageManifest = parse_json("Hyperlight manifest", &doc(&packed.manifest, "Hyperlight manifest")?)?;
                let (config, memory, transport) = hyperlight_layers(&carried, "Hyperlight manifest")?;
                same_descriptor("packed snapshot manifest config", &packed.config, &config)?;
                same_descriptor("packed memory layer", &packed.memory.native, &memory.native)?;
                same_descriptor("packed transport layer", &packed.transport.native, &transport.native)?;
                (Form::Packed, packed.manifest, config, packed.memory, packed.transport)
            }
            other => {
                let found = other.unwrap_or("nothing");
                return Err(unexpected(
                    "snapshot manifest artifactType",
                    &format!("{MT_HYPERLIGHT_CONFIG} or {MT_PACKED_SNAPSHOT}"),
                    found,
                )
                .into());
            }
        };
        let (guest_config, elf) = guest_parts(&doc(&guest, "guest manifest")?)?;
        Ok(Structure {
            digest: digest.to_string(),
            form,
            snapshot,
            hyperlight_manifest,
            guest,
            config,
            guest_config,
            memory,
            transport,
            elf,
        })
    }

    /// The three data layers.
    pub fn layers(&self) -> [&DataLayer; 3] {
        [&self.memory, &self.transport, &self.elf]
    }

    /// The JSON blobs a registry serves as blobs (not manifests): the configs, and
    /// Hyperlight's manifest when it is carried in a packed one.
    pub fn json_blobs(&self) -> Vec<(&'static str, &Descriptor)> {
        let mut blobs = vec![("snapshot config", &self.config), ("guest config", &self.guest_config)];
        if self.form == Form::Packed {
            blobs.push(("Hyperlight manifest", &self.hyperlight_manifest));
        }
        blobs
    }

    /// Every blob a node keeps for the artifact: the index, the manifests, the configs
    /// and each layer as loaded (no compressed form), each once.
    pub fn native_blobs(&self) -> Vec<String> {
        let mut blobs = vec![self.digest.clone(), self.snapshot.digest().to_string(), self.guest.digest().to_string()];
        blobs.extend(self.json_blobs().iter().map(|(_, d)| d.digest().to_string()));
        blobs.extend(self.layers().iter().map(|l| l.native.digest().to_string()));
        let mut seen = std::collections::BTreeSet::new();
        blobs.retain(|b| seen.insert(b.clone()));
        blobs
    }
}

/// The index's two manifest descriptors (snapshot, guest), after checking its types.
pub fn index_entries(bytes: &[u8]) -> Result<(Descriptor, Descriptor), ArtifactError> {
    let index: ImageIndex = parse_json("artifact index", bytes)?;
    expect("artifact index mediaType", MT_INDEX, index.media_type().as_ref().map(|m| m.to_string()).as_deref())?;
    expect("artifact index artifactType", MT_ARTIFACT, index.artifact_type().as_ref().map(|m| m.to_string()).as_deref())?;
    let [snapshot, guest] = index.manifests().as_slice() else {
        return Err(unexpected("artifact index manifests", "2 entries", index.manifests().len()));
    };
    for (what, desc) in [("snapshot manifest", snapshot), ("guest manifest", guest)] {
        expect(&format!("{what} descriptor mediaType"), MT_MANIFEST, Some(desc.media_type().as_ref()))?;
        json_size(what, desc)?;
    }
    Ok((snapshot.clone(), guest.clone()))
}

/// Every blob the two manifests list, in the form it travels, read from the manifests
/// alone (a packed artifact's Hyperlight manifest is one of them), with the same shape and
/// size checks as [`Structure::read`], largest native form first: what a pull fetches in
/// one round, before [`Structure::read`] checks the carried manifest agrees with them.
pub fn listed_blobs(snapshot_manifest: &[u8], guest_manifest: &[u8]) -> Result<Vec<DataLayer>, ArtifactError> {
    let json = |what: &'static str, desc: &Descriptor| -> Result<DataLayer, ArtifactError> {
        json_size(what, desc)?;
        Ok(DataLayer { what, native: desc.clone(), packed: None, max: MAX_JSON_BYTES })
    };
    let snapshot: ImageManifest = parse_json("snapshot manifest", snapshot_manifest)?;
    let mut blobs = if artifact_type(&snapshot).as_deref() == Some(MT_PACKED_SNAPSHOT) {
        let packed = packed_layers(&snapshot)?;
        vec![json("snapshot config", &packed.config)?, json("Hyperlight manifest", &packed.manifest)?, packed.memory, packed.transport]
    } else {
        let (config, memory, transport) = hyperlight_layers(&snapshot, "snapshot manifest")?;
        vec![json("snapshot config", &config)?, memory, transport]
    };
    let (guest_config, elf) = guest_parts(guest_manifest)?;
    blobs.push(json("guest config", &guest_config)?);
    blobs.push(elf);
    blobs.sort_by_key(|b| std::cmp::Reverse(b.native.size()));
    Ok(blobs)
}

/// The guest manifest's config and ELF layer, after checking its types and sizes.
fn guest_parts(bytes: &[u8]) -> Result<(Descriptor, DataLayer), ArtifactError> {
    let manifest: ImageManifest = parse_json("guest manifest", bytes)?;
    expect("guest manifest artifactType", MT_GUEST, artifact_type(&manifest).as_deref())?;
    expect("guest manifest config.mediaType", MT_EMPTY, Some(manifest.config().media_type().as_ref()))?;
    json_size("guest config", manifest.config())?;
    let [elf] = manifest.layers().as_slice() else {
        return Err(unexpected("guest manifest layers", "1 entry", manifest.layers().len()));
    };
    Ok((manifest.config().clone(), data_layer(elf, MT_GUEST_ELF, "guest ELF layer", MAX_ELF_BYTES)?))
}

/// The compressed descriptor of `native`: media type with [`ZSTD_SUFFIX`], the native
/// digest and size recorded as annotations.
pub fn packed_descriptor(native: &Descriptor, digest: &str, size: u64) -> Result<Descriptor, ArtifactError> {
    let media_type = format!("{}{ZSTD_SUFFIX}", native.media_type());
    let mut desc = Descriptor::new(MediaType::from(media_type.as_str()), size, parse_digest(digest)?);
    desc.set_annotations(Some(
        [(UNCOMPRESSED_DIGEST.to_string(), native.digest().to_string()), (UNCOMPRESSED_SIZE.to_string(), native.size().to_string())].into(),
    ));
    Ok(desc)
}

/// A descriptor for a blob of `media_type`, `size` bytes and `digest`.
pub fn descriptor(media_type: &str, size: u64, digest: &str) -> Result<Descriptor, ArtifactError> {
    Ok(Descriptor::new(MediaType::from(media_type), size, parse_digest(digest)?))
}

/// The packed snapshot manifest's parts.
struct Packed {
    config: Descriptor,
    manifest: Descriptor,
    memory: DataLayer,
    transport: DataLayer,
}

fn packed_layers(manifest: &ImageManifest) -> Result<Packed, ArtifactError> {
    expect("packed snapshot manifest config.mediaType", MT_HYPERLIGHT_CONFIG, Some(manifest.config().media_type().as_ref()))?;
    let [carried, memory, transport] = manifest.layers().as_slice() else {
        return Err(unexpected("packed snapshot manifest layers", "3 entries", manifest.layers().len()));
    };
    expect("packed snapshot manifest layers[0].mediaType", MT_HYPERLIGHT_MANIFEST_LAYER, Some(carried.media_type().as_ref()))?;
    json_size("Hyperlight manifest", carried)?;
    json_size("snapshot config", manifest.config())?;
    Ok(Packed {
        config: manifest.config().clone(),
        manifest: carried.clone(),
        memory: data_layer(memory, MT_HYPERLIGHT_MEMORY, "snapshot memory layer", MAX_MEMORY_BYTES)?,
        transport: data_layer(transport, MT_HYPERLIGHT_TRANSPORT, "snapshot transport layer", MAX_TRANSPORT_BYTES)?,
    })
}

/// Hyperlight's own manifest: its config and its two layers, uncompressed.
fn hyperlight_layers(manifest: &ImageManifest, what: &str) -> Result<(Descriptor, DataLayer, DataLayer), ArtifactError> {
    expect(&format!("{what} artifactType"), MT_HYPERLIGHT_CONFIG, artifact_type(manifest).as_deref())?;
    json_size("snapshot config", manifest.config())?;
    let found: Vec<String> = manifest.layers().iter().map(|l| l.media_type().to_string()).collect();
    let [memory, transport] = manifest.layers().as_slice() else {
        return Err(unexpected(
            &format!("{what} layers"),
            &format!("{:?}", [MT_HYPERLIGHT_MEMORY, MT_HYPERLIGHT_TRANSPORT]),
            format!("{found:?}"),
        ));
    };
    let plain = |desc: &Descriptor, media_type: &str, what: &'static str, max: u64| -> Result<DataLayer, ArtifactError> {
        expect(&format!("{what} mediaType"), media_type, Some(desc.media_type().as_ref()))?;
        within(what, desc, desc.size(), max)?;
        Ok(DataLayer { what, native: desc.clone(), packed: None, max })
    };
    Ok((
        manifest.config().clone(),
        plain(memory, MT_HYPERLIGHT_MEMORY, "snapshot memory layer", MAX_MEMORY_BYTES)?,
        plain(transport, MT_HYPERLIGHT_TRANSPORT, "snapshot transport layer", MAX_TRANSPORT_BYTES)?,
    ))
}

/// A layer listed as `desc`, either as loaded (`native_type`) or compressed (`native_type+zstd`).
fn data_layer(desc: &Descriptor, native_type: &str, what: &'static str, max: u64) -> Result<DataLayer, ArtifactError> {
    let media_type = desc.media_type().to_string();
    if media_type == native_type {
        within(what, desc, desc.size(), max)?;
        return Ok(DataLayer { what, native: desc.clone(), packed: None, max });
    }
    if media_type.strip_suffix(ZSTD_SUFFIX) != Some(native_type) {
        return Err(unexpected(&format!("{what} mediaType"), &format!("{native_type} or {native_type}{ZSTD_SUFFIX}"), media_type));
    }
    let annotation = |key: &str| desc.annotations().as_ref().and_then(|a| a.get(key)).cloned();
    let missing = |key: &str| unexpected(&format!("{what} annotation {key}"), "the uncompressed layer's digest and size", "nothing");
    let digest = annotation(UNCOMPRESSED_DIGEST).ok_or_else(|| missing(UNCOMPRESSED_DIGEST))?;
    let size: u64 = annotation(UNCOMPRESSED_SIZE).ok_or_else(|| missing(UNCOMPRESSED_SIZE))?.parse().map_err(|_| {
        unexpected(&format!("{what} annotation {UNCOMPRESSED_SIZE}"), "a byte count", annotation(UNCOMPRESSED_SIZE).unwrap_or_default())
    })?;
    within(what, desc, size, max)?;
    within(&format!("{what} (compressed)"), desc, desc.size(), packed_limit(max))?;
    let native = descriptor(native_type, size, &digest)?;
    Ok(DataLayer { what, native, packed: Some(desc.clone()), max })
}

fn same_descriptor(what: &str, packed: &Descriptor, carried: &Descriptor) -> Result<(), ArtifactError> {
    let (a, b) = ((packed.digest().to_string(), packed.size()), (carried.digest().to_string(), carried.size()));
    if a != b {
        return Err(unexpected(
            &format!("{what} (as Hyperlight's manifest lists it)"),
            &format!("{} ({} bytes)", b.0, b.1),
            format!("{} ({} bytes)", a.0, a.1),
        ));
    }
    Ok(())
}

fn artifact_type(manifest: &ImageManifest) -> Option<String> {
    manifest.artifact_type().as_ref().map(|t| t.to_string())
}

fn json_size(what: &str, desc: &Descriptor) -> Result<(), ArtifactError> {
    within(what, desc, desc.size(), MAX_JSON_BYTES)
}

/// Refuses `desc` (of `what`) declaring `size` bytes over `max`.
fn within(what: &str, desc: &Descriptor, size: u64, max: u64) -> Result<(), ArtifactError> {
    if size > max {
        return Err(ArtifactError::Declared { what: what.to_string(), digest: desc.digest().to_string(), size, max });
    }
    embedded(what, desc).map(drop)
}

/// The bytes `desc` (of `what`) embeds in its `data` field, checked against its size and
/// digest; `None` when it embeds nothing. A copy that differs from the blob it names is
/// refused, so an embedded copy and the blob are always the same bytes.
pub fn embedded(what: &str, desc: &Descriptor) -> Result<Option<Vec<u8>>, ArtifactError> {
    use base64::Engine as _;
    let Some(data) = desc.data() else { return Ok(None) };
    let (digest, expected) = (desc.digest().to_string(), desc.size());
    let what = format!("{what} (embedded in its descriptor)");
    // Base64 of `size` bytes takes 4 characters per 3 bytes: refuse more before decoding.
    if data.len() as u64 > expected.div_ceil(3) * 4 {
        return Err(ArtifactError::SizeMismatch { what, digest, expected, actual: data.len() as u64 / 4 * 3 });
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data)
        .map_err(|e| ArtifactError::Malformed { what: what.clone(), reason: format!("data is not base64: {e}") })?;
    check_blob(&what, desc, bytes.len() as u64, &sha256_digest(&bytes))?;
    Ok(Some(bytes))
}

fn parse_digest(digest: &str) -> Result<oci_spec::image::Digest, ArtifactError> {
    digest_hex(digest)?;
    digest.parse().map_err(|_| ArtifactError::BadDigest { digest: digest.to_string() })
}

fn parse_json<T: serde::de::DeserializeOwned>(what: &str, bytes: &[u8]) -> Result<T, ArtifactError> {
    serde_json::from_slice(bytes).map_err(|e| ArtifactError::Malformed { what: what.to_string(), reason: e.to_string() })
}

fn expect(field: &str, expected: &str, actual: Option<&str>) -> Result<(), ArtifactError> {
    match actual {
        Some(a) if a == expected => Ok(()),
        other => Err(unexpected(field, expected, other.unwrap_or("nothing"))),
    }
}

fn unexpected(field: &str, expected: &str, actual: impl ToString) -> ArtifactError {
    ArtifactError::Unexpected { field: field.to_string(), expected: expected.to_string(), actual: actual.to_string() }
}
