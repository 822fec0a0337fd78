//! OCI image layout storage: content-addressed blobs, `index.json`, bounded
//! and digest-checked reads. Shared by the artifact builder, the verifier,
//! the registry transport and the local cache.

use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use oci_spec::image::{Descriptor, ImageIndex};
use sha2::{Digest as _, Sha256};

use super::ArtifactError;

/// Largest JSON document (index, manifest, config) read from a layout or registry.
pub const MAX_JSON_BYTES: u64 = 1024 * 1024;

/// `sha256:<hex>` of `bytes`.
pub fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// The 64 lowercase hex characters of a `sha256:` digest, or an error naming it.
pub fn digest_hex(digest: &str) -> Result<&str, ArtifactError> {
    let hex = digest.strip_prefix("sha256:").ok_or_else(|| ArtifactError::BadDigest { digest: digest.to_string() })?;
    if hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        Ok(hex)
    } else {
        Err(ArtifactError::BadDigest { digest: digest.to_string() })
    }
}

/// Path of the blob `digest` inside the layout at `root`.
pub fn blob_path(root: &Path, digest: &str) -> Result<PathBuf, ArtifactError> {
    Ok(root.join("blobs").join("sha256").join(digest_hex(digest)?))
}

/// Writes `bytes` as a blob of the layout at `root` (atomically; a no-op when
/// present) and returns its digest.
pub fn write_blob(root: &Path, bytes: &[u8]) -> Result<String, ArtifactError> {
    let digest = sha256_digest(bytes);
    let path = blob_path(root, &digest)?;
    if !path.exists() {
        let dir = root.join("blobs").join("sha256");
        fs::create_dir_all(&dir).map_err(|e| ArtifactError::io(&dir, e))?;
        let mut tmp = tempfile::NamedTempFile::new_in(&dir).map_err(|e| ArtifactError::io(&dir, e))?;
        tmp.write_all(bytes).map_err(|e| ArtifactError::io(&path, e))?;
        tmp.persist(&path).map_err(|e| ArtifactError::io(&path, e.error))?;
    }
    Ok(digest)
}

/// Reads a blob of at most `max` bytes and checks its size and digest against `desc`.
pub fn read_blob(root: &Path, desc: &Descriptor, what: &str, max: u64) -> Result<Vec<u8>, ArtifactError> {
    let digest = desc.digest().to_string();
    let path = blob_path(root, &digest)?;
    check_size(what, desc.size(), max)?;
    let file = fs::File::open(&path).map_err(|e| ArtifactError::io(&path, e))?;
    let mut bytes = Vec::new();
    file.take(max + 1).read_to_end(&mut bytes).map_err(|e| ArtifactError::io(&path, e))?;
    check_blob(what, desc, bytes.len() as u64, &sha256_digest(&bytes))?;
    Ok(bytes)
}

/// Streams a blob of at most `max` bytes through sha256 and checks size and digest.
pub fn verify_blob_file(root: &Path, desc: &Descriptor, what: &str, max: u64) -> Result<(), ArtifactError> {
    let digest = desc.digest().to_string();
    let path = blob_path(root, &digest)?;
    check_size(what, desc.size(), max)?;
    let mut file = fs::File::open(&path).map_err(|e| ArtifactError::io(&path, e))?;
    let (len, actual) = hash_reader(&mut file).map_err(|e| ArtifactError::io(&path, e))?;
    check_blob(what, desc, len, &actual)
}

/// Length and `sha256:` digest of everything `reader` yields.
pub fn hash_reader(reader: &mut impl Read) -> io::Result<(u64, String)> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut len = 0u64;
    loop {
        let n = reader.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        len += n as u64;
    }
    Ok((len, format!("sha256:{}", hex::encode(hasher.finalize()))))
}

fn check_size(what: &str, declared: u64, max: u64) -> Result<(), ArtifactError> {
    if declared > max {
        return Err(ArtifactError::TooLarge { what: what.to_string(), size: declared, max });
    }
    Ok(())
}

/// Checks `len` bytes hashing to `actual` are the blob `desc` (of `what`) names.
pub(crate) fn check_blob(what: &str, desc: &Descriptor, len: u64, actual: &str) -> Result<(), ArtifactError> {
    if len != desc.size() {
        return Err(ArtifactError::SizeMismatch {
            what: what.to_string(),
            digest: desc.digest().to_string(),
            expected: desc.size(),
            actual: len,
        });
    }
    if actual != desc.digest().to_string() {
        return Err(ArtifactError::DigestMismatch {
            what: what.to_string(),
            expected: desc.digest().to_string(),
            actual: actual.to_string(),
        });
    }
    Ok(())
}

/// Reads the layout's `index.json` (bounded) after checking its `oci-layout` marker.
pub fn read_index(root: &Path) -> Result<ImageIndex, ArtifactError> {
    let marker = root.join("oci-layout");
    let text = read_small(&marker)?;
    let value: serde_json::Value = serde_json::from_slice(&text)
        .map_err(|e| ArtifactError::Malformed { what: marker.display().to_string(), reason: e.to_string() })?;
    if value.get("imageLayoutVersion").and_then(|v| v.as_str()) != Some("1.0.0") {
        return Err(ArtifactError::Malformed {
            what: marker.display().to_string(),
            reason: "imageLayoutVersion is not \"1.0.0\"".to_string(),
        });
    }
    let path = root.join("index.json");
    let bytes = read_small(&path)?;
    serde_json::from_slice(&bytes).map_err(|e| ArtifactError::Malformed { what: path.display().to_string(), reason: e.to_string() })
}

/// Writes `index` as the layout's `index.json` (atomically) and the `oci-layout` marker.
pub fn write_index(root: &Path, index: &ImageIndex) -> Result<(), ArtifactError> {
    fs::create_dir_all(root).map_err(|e| ArtifactError::io(root, e))?;
    let marker = root.join("oci-layout");
    if !marker.exists() {
        fs::write(&marker, br#"{"imageLayoutVersion":"1.0.0"}"#).map_err(|e| ArtifactError::io(&marker, e))?;
    }
    let bytes =
        serde_json::to_vec_pretty(index).map_err(|e| ArtifactError::Malformed { what: "index.json".to_string(), reason: e.to_string() })?;
    let path = root.join("index.json");
    let mut tmp = tempfile::NamedTempFile::new_in(root).map_err(|e| ArtifactError::io(root, e))?;
    tmp.write_all(&bytes).map_err(|e| ArtifactError::io(&path, e))?;
    tmp.persist(&path).map_err(|e| ArtifactError::io(&path, e.error))?;
    Ok(())
}

fn read_small(path: &Path) -> Result<Vec<u8>, ArtifactError> {
    let file = fs::File::open(path).map_err(|e| ArtifactError::io(path, e))?;
    let mut bytes = Vec::new();
    file.take(MAX_JSON_BYTES + 1).read_to_end(&mut bytes).map_err(|e| ArtifactError::io(path, e))?;
    if bytes.len() as u64 > MAX_JSON_BYTES {
        return Err(ArtifactError::TooLarge { what: path.display().to_string(), size: bytes.len() as u64, max: MAX_JSON_BYTES });
    }
    Ok(bytes)
}
