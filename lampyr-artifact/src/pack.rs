//! The compressed transport form: writing an artifact's index and manifests
//! around the snapshot Hyperlight saved (its large layers compressed with zstd
//! beside the loadable ones), and decompressing a layer bounded by the size it
//! declares and checked against the digest it declares.

use std::fs;
use std::io::{self, Write};
use std::path::Path;

use oci_spec::image::Descriptor;
use serde_json::json;
use sha2::{Digest as _, Sha256};

use crate::layout::{self, read_index, write_blob, write_index};
use crate::structure::{
    DataLayer, Form, MT_HYPERLIGHT_MANIFEST_LAYER, MT_INDEX, MT_MANIFEST, MT_PACKED_SNAPSHOT, descriptor, packed_descriptor,
};
use crate::{ARTIFACT_TAG, ArtifactError, MT_ARTIFACT, MT_EMPTY, MT_GUEST, MT_GUEST_ELF, MT_HYPERLIGHT_CONFIG};

/// zstd level for packed layers: snapshot memory is mostly zero pages, which every
/// level shrinks alike; higher levels cost build time for a few bytes.
pub const ZSTD_LEVEL: i32 = 3;

const REF_NAME: &str = "org.opencontainers.image.ref.name";

/// Adds the guest manifest and the artifact index around Hyperlight's snapshot
/// manifest `snapshot_manifest` in the layout `out` (where `Snapshot::save` wrote it),
/// in `form`; the guest ELF `elf` is stored beside. Tags the index `lampyr` and
/// returns its digest. In [`Form::Packed`] the memory layer and the ELF also get a
/// compressed blob each; the layout keeps both forms.
pub fn write_artifact(out: &Path, snapshot_manifest: &str, elf: &[u8], form: Form) -> Result<String, ArtifactError> {
    let empty = write_blob(out, b"{}")?;
    let elf_native = descriptor(MT_GUEST_ELF, elf.len() as u64, &write_blob(out, elf)?)?;
    let mut index = read_index(out)?;
    let snap_desc = index
        .manifests()
        .iter()
        .find(|d| d.digest().to_string() == snapshot_manifest)
        .ok_or_else(|| ArtifactError::NotFound { reference: snapshot_manifest.to_string(), layout: out.to_path_buf() })?
        .clone();
    let empty = descriptor(MT_EMPTY, 2, &empty)?;
    let (empty, elf_layer, snapshot_entry) = match form {
        Form::Plain => {
            (empty, elf_native, json!({"artifactType": MT_HYPERLIGHT_CONFIG, "digest": snapshot_manifest, "size": snap_desc.size()}))
        }
        Form::Packed => {
            let (digest, size) = write_packed_snapshot(out, &snap_desc)?;
            let elf_layer = embed_small(out, compress_layer(out, &elf_native)?, "guest ELF layer")?;
            let entry = json!({"artifactType": MT_PACKED_SNAPSHOT, "digest": digest, "size": size});
            (embed_small(out, empty, "guest config")?, elf_layer, entry)
        }
    };
    let guest_manifest = json!({
        "schemaVersion": 2,
        "mediaType": MT_MANIFEST,
        "artifactType": MT_GUEST,
        "config": empty,
        "layers": [elf_layer],
    });
    let guest_bytes = to_json(&guest_manifest)?;
    let guest_digest = write_blob(out, &guest_bytes)?;
    // Carry Hyperlight's platform annotations (they live only on index descriptors).
    let platform: serde_json::Map<String, serde_json::Value> = snap_desc
        .annotations()
        .iter()
        .flatten()
        .filter(|(k, _)| k.starts_with("dev.hyperlight."))
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect();
    let mut snapshot_entry = snapshot_entry;
    snapshot_entry["mediaType"] = json!(MT_MANIFEST);
    snapshot_entry["annotations"] = json!(platform);
    let artifact = json!({
        "schemaVersion": 2,
        "mediaType": MT_INDEX,
        "artifactType": MT_ARTIFACT,
        "manifests": [
            snapshot_entry,
            {"mediaType": MT_MANIFEST, "artifactType": MT_GUEST, "digest": guest_digest, "size": guest_bytes.len()},
        ],
    });
    let artifact_bytes = to_json(&artifact)?;
    let artifact_digest = write_blob(out, &artifact_bytes)?;
    let tagged =
        json!({"mediaType": MT_INDEX, "digest": artifact_digest, "size": artifact_bytes.len(), "annotations": {REF_NAME: ARTIFACT_TAG}});
    let tagged = serde_json::from_value(tagged)
        .map_err(|e| ArtifactError::Malformed { what: "artifact descriptor".into(), reason: e.to_string() })?;
    let mut manifests: Vec<_> = index
        .manifests()
        .iter()
        .filter(|d| d.annotations().as_ref().and_then(|a| a.get(REF_NAME)).map(String::as_str) != Some(ARTIFACT_TAG))
        .cloned()
        .collect();
    manifests.push(tagged);
    index.set_manifests(manifests);
    write_index(out, &index)?;
    Ok(artifact_digest)
}

/// Writes the packed snapshot manifest for Hyperlight's manifest `hyperlight` (a blob
/// of `out`): its config, that manifest as a blob, and its layers compressed.
fn write_packed_snapshot(out: &Path, hyperlight: &Descriptor) -> Result<(String, usize), ArtifactError> {
    let bytes = layout::read_blob(out, hyperlight, "Hyperlight manifest", layout::MAX_JSON_BYTES)?;
    let manifest: oci_spec::image::ImageManifest = serde_json::from_slice(&bytes)
        .map_err(|e| ArtifactError::Malformed { what: "Hyperlight manifest".into(), reason: e.to_string() })?;
    let carried = descriptor(MT_HYPERLIGHT_MANIFEST_LAYER, hyperlight.size(), hyperlight.digest().as_ref())?;
    let mut layers = vec![serde_json::to_value(embed_small(out, carried, "Hyperlight manifest")?).map_err(json_error)?];
    for layer in manifest.layers() {
        let packed = embed_small(out, compress_layer(out, layer)?, "snapshot layer")?;
        layers.push(serde_json::to_value(packed).map_err(json_error)?);
    }
    let packed = json!({
        "schemaVersion": 2,
        "mediaType": MT_MANIFEST,
        "artifactType": MT_PACKED_SNAPSHOT,
        "config": embed_small(out, manifest.config().clone(), "snapshot config")?,
        "layers": layers,
    });
    let packed_bytes = to_json(&packed)?;
    Ok((write_blob(out, &packed_bytes)?, packed_bytes.len()))
}

/// Blobs of at most this many bytes also travel embedded in their descriptor's `data`
/// field (base64, OCI 1.1): a pull takes them from the manifest instead of asking the
/// registry for each. The blob is pushed too, for clients that do not read `data`.
pub const EMBED_MAX: u64 = 16 * 1024;

/// `desc` (a blob of the layout at `root`) with its bytes embedded when it is small.
fn embed_small(root: &Path, mut desc: Descriptor, what: &str) -> Result<Descriptor, ArtifactError> {
    use base64::Engine as _;
    if desc.size() <= EMBED_MAX {
        let bytes = layout::read_blob(root, &desc, what, EMBED_MAX)?;
        desc.set_data(Some(base64::engine::general_purpose::STANDARD.encode(bytes)));
    }
    Ok(desc)
}

/// Compresses layer `native` of the layout at `root` into a blob beside it and returns
/// its packed descriptor (the same bytes give the same blob, so rebuilding changes nothing).
pub fn compress_layer(root: &Path, native: &Descriptor) -> Result<Descriptor, ArtifactError> {
    let src = layout::blob_path(root, native.digest().as_ref())?;
    let input = fs::File::open(&src).map_err(|e| ArtifactError::io(&src, e))?;
    let dir = root.join("blobs").join("sha256");
    let tmp = tempfile::NamedTempFile::new_in(&dir).map_err(|e| ArtifactError::io(&dir, e))?;
    let mut hashed = HashingWriter::new(tmp);
    let mut encoder = zstd::stream::write::Encoder::new(&mut hashed, ZSTD_LEVEL).map_err(|e| ArtifactError::io(&src, e))?;
    encoder.set_pledged_src_size(Some(native.size())).map_err(|e| ArtifactError::io(&src, e))?;
    io::copy(&mut io::BufReader::new(input), &mut encoder).map_err(|e| ArtifactError::io(&src, e))?;
    encoder.finish().map_err(|e| ArtifactError::io(&src, e))?;
    let (tmp, digest, size) = hashed.finish();
    let dest = layout::blob_path(root, &digest)?;
    if !dest.exists() {
        tmp.persist(&dest).map_err(|e| ArtifactError::io(&dest, e.error))?;
    }
    packed_descriptor(native, &digest, size)
}

/// Decompresses a packed layer written to it into `out`, refusing output past the
/// size the layer declares. Whoever keeps the output checks its digest and size with
/// [`check_unpacked`] (the cache hashes what it stores anyway).
pub struct Unpacker<W: Write> {
    decoder: zstd::stream::write::Decoder<'static, Limited<W>>,
    what: &'static str,
    packed: String,
    native: Descriptor,
}

impl<W: Write> Unpacker<W> {
    /// An unpacker of `layer`'s compressed form into `out`.
    pub fn new(layer: &DataLayer, out: W) -> Result<Self, ArtifactError> {
        let packed = layer.transport().digest().to_string();
        let limited = Limited { inner: out, written: 0, limit: layer.native.size(), over: false };
        let decoder = zstd::stream::write::Decoder::new(limited).map_err(|e| ArtifactError::io(Path::new("zstd decoder"), e))?;
        Ok(Unpacker { decoder, what: layer.what, packed, native: layer.native.clone() })
    }

    /// Feeds compressed bytes.
    pub fn write(&mut self, compressed: &[u8]) -> Result<(), ArtifactError> {
        match self.decoder.write_all(compressed) {
            Ok(()) => Ok(()),
            Err(_) if self.decoder.get_ref().over => Err(self.too_long()),
            Err(e) => Err(self.corrupt(e)),
        }
    }

    /// Ends the stream and returns the writer (its output within the declared size).
    pub fn finish(mut self) -> Result<W, ArtifactError> {
        if let Err(e) = self.decoder.flush() {
            return Err(if self.decoder.get_ref().over { self.too_long() } else { self.corrupt(e) });
        }
        Ok(self.decoder.into_inner().inner)
    }

    fn too_long(&self) -> ArtifactError {
        let size = self.native.size();
        ArtifactError::Decompressed {
            what: self.what.into(),
            packed: self.packed.clone(),
            expected: format!("{size} bytes"),
            actual: format!("more than {size} bytes (refused as a decompression bomb)"),
        }
    }

    fn corrupt(&self, e: io::Error) -> ArtifactError {
        ArtifactError::Decompressed {
            what: self.what.into(),
            packed: self.packed.clone(),
            expected: self.native.digest().to_string(),
            actual: format!("no valid zstd stream ({e})"),
        }
    }
}

/// Checks that `layer`'s compressed form decompressed to `len` bytes hashing to `digest`:
/// the size and digest its descriptor declares.
pub fn check_unpacked(layer: &DataLayer, len: u64, digest: &str) -> Result<(), ArtifactError> {
    let packed = layer.transport().digest().to_string();
    let what = layer.what.to_string();
    if len != layer.native.size() {
        let (expected, actual) = (format!("{} bytes", layer.native.size()), format!("{len} bytes"));
        return Err(ArtifactError::Decompressed { what, packed, expected, actual });
    }
    if digest != layer.native.digest().as_ref() {
        let (expected, actual) = (layer.native.digest().to_string(), digest.to_string());
        return Err(ArtifactError::Decompressed { what, packed, expected, actual });
    }
    Ok(())
}

/// A writer passing bytes on while hashing them.
pub struct HashingWriter<W> {
    inner: W,
    hasher: Sha256,
    len: u64,
}

impl<W> HashingWriter<W> {
    /// Hashes what is written to `inner`.
    pub fn new(inner: W) -> Self {
        HashingWriter { inner, hasher: Sha256::new(), len: 0 }
    }

    /// The writer, the `sha256:` digest of the bytes written and their count.
    pub fn finish(self) -> (W, String, u64) {
        (self.inner, format!("sha256:{}", hex::encode(self.hasher.finalize())), self.len)
    }
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// A writer refusing anything past `limit` bytes.
pub struct Limited<W> {
    inner: W,
    written: u64,
    limit: u64,
    over: bool,
}

impl<W: Write> Write for Limited<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.written + buf.len() as u64 > self.limit {
            self.over = true;
            return Err(io::Error::other("more bytes than declared"));
        }
        let n = self.inner.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// zstd-compresses `bytes` (for sealed templates and tests).
pub fn compress(bytes: &[u8]) -> io::Result<Vec<u8>> {
    zstd::bulk::compress(bytes, ZSTD_LEVEL)
}

fn to_json(value: &serde_json::Value) -> Result<Vec<u8>, ArtifactError> {
    serde_json::to_vec(value).map_err(json_error)
}

fn json_error(e: serde_json::Error) -> ArtifactError {
    ArtifactError::Malformed { what: "generated JSON".into(), reason: e.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::sha256_digest;
    use crate::structure::packed_descriptor;

    fn layer(native: &[u8], packed: &[u8]) -> DataLayer {
        let native_desc = descriptor(crate::MT_GUEST_ELF, native.len() as u64, &sha256_digest(native)).expect("descriptor");
        let packed_desc = packed_descriptor(&native_desc, &sha256_digest(packed), packed.len() as u64).expect("packed");
        DataLayer { what: "guest ELF layer", native: native_desc, packed: Some(packed_desc), max: 1 << 20 }
    }

    fn unpack(layer: &DataLayer, compressed: &[u8]) -> Result<Vec<u8>, ArtifactError> {
        let mut unpacker = Unpacker::new(layer, HashingWriter::new(Vec::new()))?;
        for chunk in compressed.chunks(1000) {
            unpacker.write(chunk)?;
        }
        let (bytes, digest, len) = unpacker.finish()?.finish();
        check_unpacked(layer, len, &digest)?;
        Ok(bytes)
    }

    #[test]
    fn a_packed_layer_unpacks_to_exactly_what_it_declares() {
        let native: Vec<u8> = (0..200_000u32).map(|i| (i % 7) as u8).collect();
        let packed = compress(&native).expect("compress");
        assert!(packed.len() * 10 < native.len(), "compresses: {}", packed.len());
        assert_eq!(unpack(&layer(&native, &packed), &packed).expect("unpacks"), native);
    }

    #[test]
    fn other_content_or_more_than_declared_is_refused() {
        let native = vec![1u8; 10_000];
        let other = compress(&[2u8; 10_000]).expect("compress");
        let err = unpack(&layer(&native, &other), &other).expect_err("other content");
        assert!(matches!(&err, ArtifactError::Decompressed { expected, .. } if *expected == sha256_digest(&native)), "{err}");

        // A bomb: a few hundred bytes that decompress far past the declared size.
        let bomb = compress(&vec![0u8; 64 << 20]).expect("compress");
        assert!(bomb.len() < 64 * 1024, "{}", bomb.len());
        let err = unpack(&layer(&native, &bomb), &bomb).expect_err("bomb");
        assert!(err.to_string().contains("decompression bomb"), "{err}");

        let short = compress(&native[..5000]).expect("compress");
        let err = unpack(&layer(&native, &short), &short).expect_err("short");
        assert!(err.to_string().contains("5000 bytes"), "{err}");

        let garbage = b"not zstd at all".to_vec();
        let err = unpack(&layer(&native, &garbage), &garbage).expect_err("garbage");
        assert!(err.to_string().contains("no valid zstd stream"), "{err}");
    }
}
