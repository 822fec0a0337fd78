//! The local artifact cache: every blob stored once by digest, and one OCI
//! layout per artifact whose blobs are hard links into that shared store.
//!
//! ```text
//! root/blobs/sha256/<hex>      each blob once, read-only, written by rename after its digest checks
//! root/layouts/<hex>/          one OCI layout per artifact index digest
//! root/tmp/                    partial downloads and layouts under construction
//! ```
//!
//! Blob files are never modified in place (Hyperlight mmaps them): a blob is
//! either absent or complete, and is only ever replaced by a rename.

use std::ffi::OsString;
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use oci_spec::image::ImageIndex;
use serde_json::json;

use sha2::{Digest as _, Sha256};

use crate::layout::{self, MAX_JSON_BYTES, digest_hex, sha256_digest, write_index};
use crate::structure::{MT_INDEX, MT_MANIFEST, Structure};
use crate::{ARTIFACT_TAG, ArtifactError, SNAPSHOT_TAG};

const REF_NAME: &str = "org.opencontainers.image.ref.name";
/// Shortest run of zeros left as a hole in a blob file.
const SPARSE_RUN: usize = 4096;

/// What went wrong reading or writing the cache.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// No cache directory can be derived from the environment.
    #[error("no cache directory: set LAMPYR_CACHE_DIR (neither XDG_CACHE_HOME nor HOME is set)")]
    NoLocation,
    /// A file or directory of the cache could not be read or written.
    #[error("cache {path}: {source} (check the cache directory's permissions and free space)")]
    Io {
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A blob's bytes or the documents naming it are wrong (digest, size, JSON).
    #[error("cache {root}: {source} (remove the cache directory to start afresh)")]
    Content {
        /// The cache root.
        root: PathBuf,
        /// What is wrong.
        source: Box<ArtifactError>,
    },
    /// The documents of a cached artifact do not describe a Lampyr artifact.
    #[error("cached artifact: {0} (remove the cache directory to start afresh)")]
    Artifact(Box<ArtifactError>),
}

impl From<ArtifactError> for CacheError {
    fn from(source: ArtifactError) -> Self {
        CacheError::Artifact(Box::new(source))
    }
}

/// A content-addressed artifact cache rooted at one directory.
#[derive(Clone, Debug)]
pub struct Cache {
    root: PathBuf,
}

/// A blob being written into the cache: a temporary file that becomes the
/// blob only when [`PendingBlob::commit`] finds the expected size and digest.
#[derive(Debug)]
pub struct PendingBlob {
    tmp: tempfile::NamedTempFile,
    hasher: Sha256,
    written: u64,
    digest: String,
    size: u64,
    dest: PathBuf,
    root: PathBuf,
}

impl Cache {
    /// A cache rooted at `root` (created on first write).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Cache { root: root.into() }
    }

    /// `$LAMPYR_CACHE_DIR`, else `$XDG_CACHE_HOME/lampyr/artifacts`, else `~/.cache/lampyr/artifacts`.
    pub fn default_location() -> Result<PathBuf, CacheError> {
        let var = |name: &str| std::env::var_os(name);
        location_from(var("LAMPYR_CACHE_DIR"), var("XDG_CACHE_HOME"), var("HOME")).ok_or(CacheError::NoLocation)
    }

    /// The cache's root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Path of blob `digest` in the shared store (whether or not it is there).
    pub fn blob_path(&self, digest: &str) -> Result<PathBuf, CacheError> {
        layout::blob_path(&self.root, digest).map_err(|e| self.content(e))
    }

    /// Whether blob `digest` is in the store with `size` bytes (its digest was checked when stored).
    pub fn contains(&self, digest: &str, size: u64) -> Result<bool, CacheError> {
        let path = self.blob_path(digest)?;
        match fs::symlink_metadata(&path) {
            Ok(meta) => Ok(meta.is_file() && meta.len() == size),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(io_error(&path, e)),
        }
    }

    /// Stores `bytes` as blob `digest` after checking they hash to it; a no-op when present.
    pub fn insert(&self, digest: &str, bytes: &[u8]) -> Result<PathBuf, CacheError> {
        if self.contains(digest, bytes.len() as u64)? {
            return self.blob_path(digest);
        }
        let mut pending = self.begin(digest, bytes.len() as u64)?;
        pending.write_all(bytes)?;
        pending.commit()
    }

    /// Starts writing blob `digest` of `size` bytes into a temporary file of the cache.
    pub fn begin(&self, digest: &str, size: u64) -> Result<PendingBlob, CacheError> {
        let dest = self.blob_path(digest)?;
        let tmp_dir = self.tmp_dir()?;
        let tmp = tempfile::Builder::new().prefix("blob-").tempfile_in(&tmp_dir).map_err(|e| io_error(&tmp_dir, e))?;
        Ok(PendingBlob { tmp, hasher: Sha256::new(), written: 0, digest: digest.to_string(), size, dest, root: self.root.clone() })
    }

    /// Reads JSON blob `digest` (at most [`MAX_JSON_BYTES`]) and checks its digest again.
    pub fn read_json(&self, digest: &str, what: &str) -> Result<Vec<u8>, CacheError> {
        let path = self.blob_path(digest)?;
        let file = fs::File::open(&path).map_err(|e| io_error(&path, e))?;
        let mut bytes = Vec::new();
        file.take(MAX_JSON_BYTES + 1).read_to_end(&mut bytes).map_err(|e| io_error(&path, e))?;
        if bytes.len() as u64 > MAX_JSON_BYTES {
            let size = bytes.len() as u64;
            return Err(self.content(ArtifactError::TooLarge { what: what.to_string(), size, max: MAX_JSON_BYTES }));
        }
        let actual = sha256_digest(&bytes);
        if actual != digest {
            let (what, expected) = (what.to_string(), digest.to_string());
            return Err(self.content(ArtifactError::DigestMismatch { what, expected, actual }));
        }
        Ok(bytes)
    }

    /// Directory of the layout for artifact `digest` (whether or not it exists).
    pub fn layout_path(&self, digest: &str) -> Result<PathBuf, CacheError> {
        let hex = digest_hex(digest).map_err(|e| self.content(e))?;
        Ok(self.root.join("layouts").join(hex))
    }

    /// Builds (once) the OCI layout for artifact `digest`, whose index, manifests
    /// and blobs must all be in the store, and returns its directory.
    ///
    /// The layout's `index.json` tags the artifact index `lampyr` and Hyperlight's
    /// snapshot manifest `snapshot`; its blobs are hard links into the store
    /// (copies where the filesystem refuses links). It is built under `tmp/`
    /// and renamed into place, so a layout directory is always complete.
    pub fn materialise(&self, digest: &str) -> Result<PathBuf, CacheError> {
        let target = self.layout_path(digest)?;
        if target.join("index.json").is_file() {
            return Ok(target);
        }
        let (index_json, blobs) = self.artifact_contents(digest)?;
        let tmp_dir = self.tmp_dir()?;
        let tmp = tempfile::Builder::new().prefix("layout-").tempdir_in(&tmp_dir).map_err(|e| io_error(&tmp_dir, e))?;
        for blob in &blobs {
            self.link_blob(blob, tmp.path())?;
        }
        write_index(tmp.path(), &index_json).map_err(|e| self.content(e))?;
        let parent = self.root.join("layouts");
        fs::create_dir_all(&parent).map_err(|e| io_error(&parent, e))?;
        match fs::rename(tmp.path(), &target) {
            Ok(()) => {
                let _ = tmp.keep();
                Ok(target)
            }
            // Another process finished the same layout first: theirs is identical.
            Err(_) if target.join("index.json").is_file() => Ok(target),
            Err(e) => Err(io_error(&target, e)),
        }
    }

    /// What artifact `digest` in the store names: its index, manifests and layers.
    pub fn structure(&self, digest: &str) -> Result<Structure, CacheError> {
        let index_bytes = self.read_json(digest, "artifact index")?;
        Structure::read(digest, &index_bytes, |desc, what| self.read_json(desc.digest().as_ref(), what))
    }

    /// The layout `index.json` for artifact `digest` and every blob digest it needs.
    fn artifact_contents(&self, digest: &str) -> Result<(ImageIndex, Vec<String>), CacheError> {
        let artifact = self.structure(digest)?;
        let index_size = self.blob_size(digest)?;
        let mut annotations: serde_json::Map<String, serde_json::Value> =
            artifact.snapshot.annotations().iter().flatten().map(|(k, v)| (k.clone(), json!(v))).collect();
        annotations.insert(REF_NAME.to_string(), json!(SNAPSHOT_TAG));
        let hyperlight = &artifact.hyperlight_manifest;
        let layout_index = json!({
            "schemaVersion": 2,
            "mediaType": MT_INDEX,
            "manifests": [
                {"mediaType": MT_INDEX, "digest": digest, "size": index_size,
                 "annotations": {REF_NAME: ARTIFACT_TAG}},
                {"mediaType": MT_MANIFEST, "digest": hyperlight.digest().to_string(), "size": hyperlight.size(),
                 "annotations": annotations},
            ],
        });
        let layout_index = serde_json::from_value(layout_index)
            .map_err(|e| self.content(ArtifactError::Malformed { what: "layout index.json".into(), reason: e.to_string() }))?;
        Ok((layout_index, artifact.native_blobs()))
    }

    fn blob_size(&self, digest: &str) -> Result<u64, CacheError> {
        let path = self.blob_path(digest)?;
        fs::metadata(&path).map(|m| m.len()).map_err(|e| io_error(&path, e))
    }

    /// Links (or copies) store blob `digest` into the layout at `layout_dir`.
    fn link_blob(&self, digest: &str, layout_dir: &Path) -> Result<(), CacheError> {
        let src = self.blob_path(digest)?;
        let dst = layout::blob_path(layout_dir, digest).map_err(|e| self.content(e))?;
        let dir = layout_dir.join("blobs").join("sha256");
        fs::create_dir_all(&dir).map_err(|e| io_error(&dir, e))?;
        if dst.exists() {
            return Ok(());
        }
        if fs::hard_link(&src, &dst).is_err() {
            fs::copy(&src, &dst).map_err(|e| io_error(&src, e))?;
        }
        Ok(())
    }

    fn tmp_dir(&self) -> Result<PathBuf, CacheError> {
        let dir = self.root.join("tmp");
        fs::create_dir_all(&dir).map_err(|e| io_error(&dir, e))?;
        Ok(dir)
    }

    fn content(&self, source: ArtifactError) -> CacheError {
        CacheError::Content { root: self.root.clone(), source: Box::new(source) }
    }
}

impl PendingBlob {
    /// Appends `bytes` to the blob, hashing them on the way.
    pub fn write_all(&mut self, bytes: &[u8]) -> Result<(), CacheError> {
        self.append(bytes).map_err(|e| io_error(self.tmp.path(), e))
    }

    /// Appends `bytes`, leaving a hole for a run of zeros (snapshot memory is mostly
    /// zero pages: the file stays sparse, and neither the page cache nor `fsync`
    /// writes them); [`PendingBlob::commit`] sets the final length.
    fn append(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        if bytes.len() >= SPARSE_RUN && all_zero(bytes) {
            self.tmp.as_file_mut().seek(SeekFrom::Current(bytes.len() as i64))?;
        } else {
            self.tmp.write_all(bytes)?;
        }
        self.hasher.update(bytes);
        self.written += bytes.len() as u64;
        Ok(())
    }

    /// Bytes written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// The length and `sha256:` digest of what was written so far.
    pub fn hashed(&self) -> (u64, String) {
        (self.written, format!("sha256:{}", hex::encode(self.hasher.clone().finalize())))
    }

    /// The digest the bytes must hash to.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// Checks the size and digest of what was written, makes the file read-only and
    /// renames it into the store. On any error the temporary file is removed.
    pub fn commit(self) -> Result<PathBuf, CacheError> {
        let path = self.tmp.path().to_path_buf();
        let content = |source| CacheError::Content { root: self.root.clone(), source: Box::new(source) };
        if self.written != self.size {
            let (what, digest) = ("downloaded blob".to_string(), self.digest.clone());
            return Err(content(ArtifactError::SizeMismatch { what, digest, expected: self.size, actual: self.written }));
        }
        let (_, actual) = self.hashed();
        if actual != self.digest {
            let (what, expected) = ("downloaded blob".to_string(), self.digest.clone());
            return Err(content(ArtifactError::DigestMismatch { what, expected, actual }));
        }
        if self.dest.is_file() {
            return Ok(self.dest);
        }
        // A trailing run of zeros was skipped, not written.
        self.tmp.as_file().set_len(self.written).map_err(|e| io_error(&path, e))?;
        self.tmp.as_file().sync_all().map_err(|e| io_error(&path, e))?;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o444)).map_err(|e| io_error(&path, e))?;
        let dir = self.dest.parent().unwrap_or(&self.root).to_path_buf();
        fs::create_dir_all(&dir).map_err(|e| io_error(&dir, e))?;
        self.tmp.persist(&self.dest).map_err(|e| io_error(&self.dest, e.error))?;
        Ok(self.dest)
    }
}

impl Write for PendingBlob {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.append(buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.tmp.flush()
    }
}

/// Whether every byte is zero: 64 bytes at a time with no early exit inside a block, so
/// the compiler vectorises it (a byte-by-byte `all` does not, and showed in a pull's profile).
fn all_zero(bytes: &[u8]) -> bool {
    let blocks = bytes.chunks_exact(64);
    let rest = blocks.remainder();
    blocks.into_iter().all(|block| block.iter().fold(0u8, |acc, b| acc | b) == 0) && rest.iter().all(|b| *b == 0)
}

/// The default cache root from the values of `LAMPYR_CACHE_DIR`, `XDG_CACHE_HOME` and `HOME`.
fn location_from(lampyr: Option<OsString>, xdg: Option<OsString>, home: Option<OsString>) -> Option<PathBuf> {
    // Empty values count as unset; XDG requires an absolute path.
    let set = |v: Option<OsString>| v.filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(dir) = set(lampyr) {
        return Some(dir);
    }
    if let Some(dir) = set(xdg).filter(|d| d.is_absolute()) {
        return Some(dir.join("lampyr").join("artifacts"));
    }
    set(home).map(|h| h.join(".cache").join("lampyr").join("artifacts"))
}

fn io_error(path: &Path, source: std::io::Error) -> CacheError {
    CacheError::Io { path: path.to_path_buf(), source }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_location_prefers_lampyr_then_xdg_then_home() {
        let s = |v: &str| Some(OsString::from(v));
        assert_eq!(location_from(s("/c"), s("/x"), s("/h")), Some(PathBuf::from("/c")));
        assert_eq!(location_from(None, s("/x"), s("/h")), Some(PathBuf::from("/x/lampyr/artifacts")));
        assert_eq!(location_from(s(""), s("rel"), s("/h")), Some(PathBuf::from("/h/.cache/lampyr/artifacts")));
        assert_eq!(location_from(None, None, None), None);
    }

    #[test]
    fn insert_refuses_bytes_that_do_not_match_the_digest() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = Cache::new(dir.path());
        let digest = sha256_digest(b"hello");
        let err = cache.insert(&digest, b"hellO").expect_err("wrong bytes");
        assert!(err.to_string().contains(&digest), "{err}");
        assert!(!cache.blob_path(&digest).expect("path").exists());
        assert_eq!(fs::read_dir(dir.path().join("tmp")).expect("tmp").count(), 0, "no temp file left");

        let path = cache.insert(&digest, b"hello").expect("right bytes");
        assert_eq!(fs::read(&path).expect("read"), b"hello");
        assert!(fs::metadata(&path).expect("meta").permissions().readonly());
        assert!(cache.contains(&digest, 5).expect("contains"));
        assert!(!cache.contains(&digest, 6).expect("contains"));
        // A second insert leaves the stored file alone.
        assert_eq!(cache.insert(&digest, b"hello").expect("again"), path);
    }

    #[test]
    fn all_zero_finds_a_single_set_byte_anywhere() {
        assert!(all_zero(&[]));
        for len in [1, 63, 64, 65, 4096, 4099] {
            let mut bytes = vec![0u8; len];
            assert!(all_zero(&bytes), "{len} zeros");
            for at in [0, len / 2, len - 1] {
                bytes[at] = 1;
                assert!(!all_zero(&bytes), "byte {at} of {len} set");
                bytes[at] = 0;
            }
        }
    }
}
