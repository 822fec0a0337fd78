//! Sealing fiberd templates to a cluster's fleet key with age (X25519 +
//! ChaCha20-Poly1305): a template opens only with the matching private key,
//! and any change to the sealed bytes is detected.
//!
//! A sealed template is one artifact's blobs in one age stream
//! ([`seal_artifact`]); [`open_artifact`] streams them back into the local
//! cache, each checked against its digest, and verifies the artifact like any
//! other. In a registry it is an OCI manifest with one sealed layer (see
//! `docs/artifacts.md` and [`crate::registry::RegistryClient::push_template`]).

use std::fs;
use std::io::{self, BufRead, BufReader, BufWriter, Read, Write};
use std::iter;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use age::secrecy::ExposeSecret;

use crate::MAX_ELF_BYTES;
use crate::cache::{Cache, CacheError};
use crate::layout::{MAX_JSON_BYTES, blob_path, digest_hex, hash_reader, read_blob};
use crate::pack::ZSTD_LEVEL;
use crate::structure::Structure;
use crate::verify::{MAX_MEMORY_BYTES, MAX_TRANSPORT_BYTES};
use crate::{ArtifactError, VerifiedArtifact, verify_layout};

/// `artifactType` of a sealed template's OCI manifest.
pub const MT_TEMPLATE: &str = "application/vnd.lampyr.fiber.template.v1";
/// Media type of a sealed template's one layer: an artifact's blobs, sealed with age.
pub const MT_SEALED_LAYER: &str = "application/vnd.lampyr.fiber.template.v1.age";
/// Annotation of a sealed template's manifest: the digest of the artifact index it seals.
pub const ARTIFACT_ANNOTATION: &str = "dev.lampyr.fiber.artifact";
/// Largest sealed layer accepted: every blob of an artifact at its limit, plus age's overhead.
pub const MAX_SEALED_BYTES: u64 = {
    let blobs = MAX_MEMORY_BYTES + MAX_TRANSPORT_BYTES + MAX_ELF_BYTES + 6 * MAX_JSON_BYTES;
    blobs + blobs / 1024 + 64 * 1024
};
/// First line of a sealed template's plaintext, followed by the artifact digest.
const BUNDLE_MAGIC: &str = "lampyr-sealed-artifact-v1";
/// Blobs of one artifact: index, two manifests, two configs, Hyperlight's manifest, three layers.
const MAX_BUNDLE_BLOBS: usize = 9;
/// Most bytes the blobs of one bundle declare in all (and the most a compressed bundle
/// decompresses to): every blob at its limit.
const MAX_BUNDLE_BYTES: u64 = MAX_MEMORY_BYTES + MAX_TRANSPORT_BYTES + MAX_ELF_BYTES + 6 * MAX_JSON_BYTES + 4096;
/// The first bytes of a zstd frame.
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];
/// Longest header line of the plaintext.
const MAX_LINE: u64 = 256;

/// Why a template could not be sealed or opened.
#[derive(Debug, thiserror::Error)]
pub enum SealError {
    /// A key string does not parse.
    #[error("{what} is not a valid age key: {reason}")]
    BadKey {
        /// Which key.
        what: &'static str,
        /// The parser's complaint.
        reason: String,
    },
    /// Encryption failed.
    #[error("sealing failed: {0}")]
    Seal(String),
    /// Opening failed: wrong key, or the sealed bytes were altered.
    #[error("template does not open: {0} (sealed to another fleet key, or altered in transit)")]
    Open(String),
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// The template opened but its content is not a sealed artifact.
    #[error("the opened template is malformed: {0} (it was not sealed by Lampyr)")]
    Malformed(String),
    /// The template seals another artifact than the one asked for.
    #[error("the template seals artifact {found}, not {expected}")]
    WrongArtifact {
        /// The artifact asked for.
        expected: String,
        /// The artifact sealed.
        found: String,
    },
    /// The artifact does not verify (before sealing, or once opened).
    #[error("artifact {digest}: {source}")]
    Artifact {
        /// The artifact index digest.
        digest: String,
        /// What is wrong with it.
        source: Box<ArtifactError>,
    },
    /// The local cache failed while storing the opened blobs.
    #[error(transparent)]
    Cache(#[from] CacheError),
}

/// A sealed template written by [`seal_artifact`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SealedTemplate {
    /// The sealed file.
    pub path: PathBuf,
    /// `sha256:` digest of the sealed file (its layer digest in a registry).
    pub digest: String,
    /// Size of the sealed file, in bytes.
    pub size: u64,
    /// Digest of the artifact index it seals.
    pub artifact: String,
}

/// The private half of a fleet key (`AGE-SECRET-KEY-1…`).
pub struct FleetKey(age::x25519::Identity);

/// The public half of a fleet key (`age1…`).
#[derive(Clone, Debug)]
pub struct FleetPublicKey(age::x25519::Recipient);

impl FleetKey {
    /// A new random fleet key.
    pub fn generate() -> Self {
        FleetKey(age::x25519::Identity::generate())
    }

    /// Parses `AGE-SECRET-KEY-1…`.
    pub fn parse(text: &str) -> Result<Self, SealError> {
        age::x25519::Identity::from_str(text.trim())
            .map(FleetKey)
            .map_err(|e| SealError::BadKey { what: "fleet private key", reason: e.to_string() })
    }

    /// The secret key text, for storing in the fleet key Secret.
    pub fn to_secret_string(&self) -> String {
        self.0.to_string().expose_secret().to_string()
    }

    /// The public half.
    pub fn public(&self) -> FleetPublicKey {
        FleetPublicKey(self.0.to_public())
    }
}

impl FleetPublicKey {
    /// Parses `age1…`.
    pub fn parse(text: &str) -> Result<Self, SealError> {
        age::x25519::Recipient::from_str(text.trim())
            .map(FleetPublicKey)
            .map_err(|e| SealError::BadKey { what: "fleet public key", reason: e.to_string() })
    }
}

impl std::fmt::Display for FleetPublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Seals `plaintext` to `recipient`.
pub fn seal(plaintext: &[u8], recipient: &FleetPublicKey) -> Result<Vec<u8>, SealError> {
    age::encrypt(&recipient.0, plaintext).map_err(|e| SealError::Seal(e.to_string()))
}

/// Opens bytes sealed with [`seal`] using the fleet's private key.
pub fn open(sealed: &[u8], key: &FleetKey) -> Result<Vec<u8>, SealError> {
    age::decrypt(&key.0, sealed).map_err(|e| SealError::Open(e.to_string()))
}

/// Verifies artifact `digest` in `layout`, then seals every one of its blobs
/// to `recipient` into the file `out`.
pub fn seal_artifact(layout: &Path, digest: &str, recipient: &FleetPublicKey, out: &Path) -> Result<SealedTemplate, SealError> {
    let artifact = |source| SealError::Artifact { digest: digest.to_string(), source: Box::new(source) };
    verify_layout(layout, Some(digest)).map_err(artifact)?;
    let blobs = artifact_blobs(layout, digest).map_err(artifact)?;
    let io_err = |source| SealError::Io { path: out.to_path_buf(), source };
    let file = fs::File::create(out).map_err(io_err)?;
    let encryptor =
        age::Encryptor::with_recipients(iter::once(&recipient.0 as &dyn age::Recipient)).map_err(|e| SealError::Seal(e.to_string()))?;
    let sealed = encryptor.wrap_output(BufWriter::new(file)).map_err(io_err)?;
    // Compressed before it is sealed: the snapshot's zero pages would otherwise travel as they are.
    let mut writer = zstd::stream::write::Encoder::new(sealed, ZSTD_LEVEL).map_err(io_err)?;
    writeln!(writer, "{BUNDLE_MAGIC} {digest}").map_err(io_err)?;
    for blob in &blobs {
        let path = blob_path(layout, blob).map_err(artifact)?;
        let mut source = fs::File::open(&path).map_err(|e| SealError::Io { path: path.clone(), source: e })?;
        let size = source.metadata().map_err(|e| SealError::Io { path: path.clone(), source: e })?.len();
        writeln!(writer, "{blob} {size}").map_err(io_err)?;
        let copied = io::copy(&mut (&mut source).take(size), &mut writer).map_err(io_err)?;
        if copied != size {
            return Err(SealError::Io { path, source: io::Error::other("the blob changed while it was sealed") });
        }
    }
    writer.finish().and_then(|sealed| sealed.finish()).and_then(|mut w| w.flush()).map_err(io_err)?;
    let mut sealed = fs::File::open(out).map_err(io_err)?;
    let (size, sealed_digest) = hash_reader(&mut sealed).map_err(io_err)?;
    Ok(SealedTemplate { path: out.to_path_buf(), digest: sealed_digest, size, artifact: digest.to_string() })
}

/// Opens the sealed template at `sealed` with `key`, stores the artifact's
/// blobs in `cache` (each checked against its digest), and verifies artifact
/// `digest`, which the template must seal.
///
/// Blocks while it decrypts and hashes: call it off the serving path.
pub fn open_artifact(sealed: &Path, key: &FleetKey, digest: &str, cache: &Cache) -> Result<VerifiedArtifact, SealError> {
    let _writing = cache.write_guard()?;
    let file = fs::File::open(sealed).map_err(|source| SealError::Io { path: sealed.to_path_buf(), source })?;
    let decryptor = age::Decryptor::new_buffered(BufReader::new(file)).map_err(|e| SealError::Open(e.to_string()))?;
    let stream = decryptor.decrypt(iter::once(&key.0 as &dyn age::Identity)).map_err(|e| SealError::Open(e.to_string()))?;
    let mut opened = BufReader::new(stream);
    let compressed = opened.fill_buf().map_err(|e| SealError::Open(e.to_string()))?.starts_with(&ZSTD_MAGIC);
    // Templates sealed before compressed transport hold the bundle as it is.
    let mut reader: Box<dyn BufRead> = if compressed {
        let decoder = zstd::stream::read::Decoder::with_buffer(opened).map_err(|e| SealError::Open(e.to_string()))?;
        Box::new(BufReader::new(decoder.take(MAX_BUNDLE_BYTES)))
    } else {
        Box::new(opened)
    };
    let header = read_line(&mut reader)?.ok_or_else(|| SealError::Malformed("it is empty".into()))?;
    let found = header
        .strip_prefix(BUNDLE_MAGIC)
        .and_then(|rest| rest.strip_prefix(' '))
        .ok_or_else(|| SealError::Malformed(format!("it starts with {header:?}, not {BUNDLE_MAGIC:?}")))?;
    if found != digest {
        return Err(SealError::WrongArtifact { expected: digest.to_string(), found: found.to_string() });
    }
    let (mut count, mut total) = (0, 0u64);
    while let Some(line) = read_line(&mut reader)? {
        count += 1;
        if count > MAX_BUNDLE_BLOBS {
            return Err(SealError::Malformed(format!("it holds more than {MAX_BUNDLE_BLOBS} blobs")));
        }
        let (blob, size) = parse_entry(&line)?;
        total += size;
        if total > MAX_BUNDLE_BYTES {
            return Err(SealError::Malformed(format!("its blobs declare more than {MAX_BUNDLE_BYTES} bytes in all")));
        }
        store_blob(&mut reader, blob, size, cache)?;
    }
    let layout = cache.materialise(digest)?;
    verify_layout(&layout, Some(digest)).map_err(|source| SealError::Artifact { digest: digest.to_string(), source: Box::new(source) })
}

/// Every blob of artifact `digest` in `layout` a node keeps (documents and layers as
/// loaded; the sealed stream is compressed as a whole).
fn artifact_blobs(layout: &Path, digest: &str) -> Result<Vec<String>, ArtifactError> {
    let read = |desc: &oci_spec::image::Descriptor, what: &str| read_blob(layout, desc, what, MAX_JSON_BYTES);
    let index_path = blob_path(layout, digest)?;
    let index_bytes = fs::read(&index_path).map_err(|e| ArtifactError::io(&index_path, e))?;
    Ok(Structure::read(digest, &index_bytes, read)?.native_blobs())
}

/// One `\n`-terminated header line of the plaintext, `None` at its end.
fn read_line(reader: &mut impl BufRead) -> Result<Option<String>, SealError> {
    let mut line = Vec::new();
    reader.take(MAX_LINE).read_until(b'\n', &mut line).map_err(|e| SealError::Open(e.to_string()))?;
    if line.is_empty() {
        return Ok(None);
    }
    if line.pop() != Some(b'\n') {
        return Err(SealError::Malformed(format!("a header line is longer than {MAX_LINE} bytes or unterminated")));
    }
    String::from_utf8(line).map(Some).map_err(|_| SealError::Malformed("a header line is not UTF-8".into()))
}

/// `<digest> <size>`, the size within the largest blob Lampyr accepts.
fn parse_entry(line: &str) -> Result<(&str, u64), SealError> {
    let bad = || SealError::Malformed(format!("{line:?} is not `<digest> <size>`"));
    let (blob, size) = line.split_once(' ').ok_or_else(bad)?;
    digest_hex(blob).map_err(|_| bad())?;
    let size: u64 = size.parse().map_err(|_| bad())?;
    if size > MAX_MEMORY_BYTES {
        return Err(SealError::Malformed(format!("blob {blob} declares {size} bytes, over the limit of {MAX_MEMORY_BYTES}")));
    }
    Ok((blob, size))
}

/// Moves the next `size` bytes of the plaintext into the cache as blob `digest`.
fn store_blob(reader: &mut impl Read, digest: &str, size: u64, cache: &Cache) -> Result<(), SealError> {
    let mut body = reader.take(size);
    if cache.contains(digest, size)? {
        let skipped = io::copy(&mut body, &mut io::sink()).map_err(|e| SealError::Open(e.to_string()))?;
        return check_complete(digest, size, skipped);
    }
    let mut pending = cache.begin(digest, size)?;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = body.read(&mut buf).map_err(|e| SealError::Open(e.to_string()))?;
        if n == 0 {
            break;
        }
        pending.write_all(&buf[..n])?;
    }
    check_complete(digest, size, pending.written())?;
    pending.commit()?;
    Ok(())
}

fn check_complete(digest: &str, size: u64, read: u64) -> Result<(), SealError> {
    if read == size { Ok(()) } else { Err(SealError::Malformed(format!("blob {digest} ends after {read} of its {size} bytes"))) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_template_opens_only_with_its_key() {
        let key = FleetKey::generate();
        let sealed = seal(b"template bytes", &key.public()).expect("seals");
        assert_eq!(open(&sealed, &key).expect("opens"), b"template bytes");
        let other = FleetKey::generate();
        assert!(matches!(open(&sealed, &other), Err(SealError::Open(_))));
    }

    #[test]
    fn tampering_is_detected() {
        let key = FleetKey::generate();
        let mut sealed = seal(&[7u8; 4096], &key.public()).expect("seals");
        let last = sealed.len() - 10;
        sealed[last] ^= 1;
        assert!(matches!(open(&sealed, &key), Err(SealError::Open(_))));
    }

    #[test]
    fn keys_round_trip_through_text() {
        let key = FleetKey::generate();
        let again = FleetKey::parse(&key.to_secret_string()).expect("parses");
        assert_eq!(again.public().to_string(), key.public().to_string());
        assert!(FleetPublicKey::parse(&key.public().to_string()).is_ok());
        assert!(FleetKey::parse("not a key").is_err());
    }
}
