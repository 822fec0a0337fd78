//! Registry transport: pushing an artifact from a layout to an OCI registry and
//! pulling one by digest into the local [`Cache`], byte for byte.
//!
//! Bytes are never re-serialised: blobs go up with `push_blob` and every
//! manifest and the artifact index with `push_manifest_raw`, so digests hold.
//! Pulls check every digest and refuse a declared size over Lampyr's limits
//! before downloading it; a blob reaches the cache only once its digest checks.

use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http::HeaderValue;
use oci_client::Reference;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::{DigestError, OciDistributionError, OciErrorCode};
use oci_client::secrets::RegistryAuth;
use oci_spec::image::{Descriptor, ImageIndex, ImageManifest};

use crate::MAX_ELF_BYTES;
use crate::cache::{Cache, CacheError};
use crate::layout::{self, MAX_JSON_BYTES, digest_hex, sha256_digest};
use crate::reference::Repository;
use crate::seal::{ARTIFACT_ANNOTATION, MAX_SEALED_BYTES, MT_SEALED_LAYER, MT_TEMPLATE, SealedTemplate};
use crate::verify::{MAX_MEMORY_BYTES, MAX_TRANSPORT_BYTES};
use crate::{
    ArtifactError, ArtifactRef, MT_ARTIFACT, MT_EMPTY, MT_GUEST_ELF, MT_HYPERLIGHT_CONFIG, MT_HYPERLIGHT_MEMORY, MT_HYPERLIGHT_TRANSPORT,
    VerifiedArtifact, verify_layout,
};

const MT_INDEX: &str = "application/vnd.oci.image.index.v1+json";
const MT_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// The OCI empty config blob.
const EMPTY_JSON: &[u8] = b"{}";
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const READ_TIMEOUT: Duration = Duration::from_secs(60);
const PUSH_HINT: &str = "nothing more was pushed; check the digest, or rebuild the artifact with `ly snapshot build`";
const PULL_HINT: &str = "the cached copy is damaged: delete the cache directory and pull again";
const UNREACHABLE_HINT: &str = "is the registry running? for a plain-HTTP registry spell the reference with http://";

/// What went wrong moving an artifact to or from a registry.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The HTTP client could not be built.
    #[error("cannot create the registry client: {0}")]
    Client(#[source] Box<OciDistributionError>),
    /// A digest or tag given by the caller is malformed.
    #[error("{0}")]
    Input(#[source] Box<ArtifactError>),
    /// A tag is not a valid OCI tag.
    #[error("{tag:?} is not a valid tag (expected [A-Za-z0-9_][A-Za-z0-9._-]{{0,127}})")]
    BadTag {
        /// The offending tag.
        tag: String,
    },
    /// The reference asks for plain HTTP to a registry this client keeps on HTTPS.
    #[error(
        "{registry} is spelled with http:// but this client allows plain HTTP only to {allowed:?} \
         (create the client with {registry} among its plain-HTTP registries)"
    )]
    PlainHttpNotAllowed {
        /// The registry.
        registry: String,
        /// Registries this client reaches over plain HTTP.
        allowed: Vec<String>,
    },
    /// The artifact does not verify: locally before a push, or in the cache after a pull.
    #[error("artifact {digest} in {}: {source} ({hint})", layout.display())]
    Verify {
        /// The artifact index digest.
        digest: String,
        /// The layout directory.
        layout: PathBuf,
        /// What is wrong with it.
        source: Box<ArtifactError>,
        /// What to do about it.
        hint: &'static str,
    },
    /// The registry did not answer.
    #[error("cannot reach {registry} while {action}: {detail} ({UNREACHABLE_HINT})")]
    Unreachable {
        /// The registry host.
        registry: String,
        /// What was being done, with the digest.
        action: String,
        /// The transport error and its causes, on one line.
        detail: String,
        /// The transport error.
        source: Box<OciDistributionError>,
    },
    /// The registry does not hold a manifest or blob.
    #[error("{what} {digest} is not in {repository} (was the artifact pushed to this repository? check the reference)")]
    NotFound {
        /// Which document or blob.
        what: String,
        /// Its digest.
        digest: String,
        /// The repository asked.
        repository: String,
    },
    /// The registry refused or failed a request.
    #[error("{repository} failed {action}: {source}")]
    Registry {
        /// The repository.
        repository: String,
        /// What was being done, with the digest.
        action: String,
        /// The registry's answer.
        source: Box<OciDistributionError>,
    },
    /// Bytes from the registry do not hash to the digest that names them.
    #[error(
        "digest mismatch for {what} from {repository}: expected {expected}, received bytes hash to {actual} \
         (the registry holds altered or corrupted content; it was not cached)"
    )]
    DigestMismatch {
        /// Which document or blob.
        what: String,
        /// The repository.
        repository: String,
        /// The digest asked for.
        expected: String,
        /// The digest of the bytes received.
        actual: String,
    },
    /// The registry sent a different number of bytes than the descriptor declares.
    #[error(
        "{what} {digest} from {repository}: the registry sent {}, its descriptor says {expected} (it was not cached)",
        sent(*.actual, *.expected)
    )]
    SizeMismatch {
        /// Which document or blob.
        what: String,
        /// The repository.
        repository: String,
        /// Its digest.
        digest: String,
        /// Declared size.
        expected: u64,
        /// Bytes received; a download is stopped one byte past the declared size.
        actual: u64,
    },
    /// A descriptor declares more bytes than Lampyr accepts; nothing was downloaded.
    #[error("{what} {digest} in {repository} declares {size} bytes, over the limit of {max}: refusing to download it")]
    TooLarge {
        /// Which document or blob.
        what: String,
        /// The repository.
        repository: String,
        /// Its digest.
        digest: String,
        /// Declared (or received) size.
        size: u64,
        /// The limit.
        max: u64,
    },
    /// What the registry holds under a digest is not part of a Lampyr artifact.
    #[error("{what} {digest} in {repository} is not part of a Lampyr artifact: {reason}")]
    NotAnArtifact {
        /// Which document or blob.
        what: String,
        /// The repository.
        repository: String,
        /// Its digest.
        digest: String,
        /// What is wrong.
        reason: String,
    },
    /// The local cache failed.
    #[error(transparent)]
    Cache(#[from] CacheError),
}

/// A sealed template pulled into the cache, not yet opened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PulledTemplate {
    /// The sealed layer in the cache's blob store.
    pub sealed: PathBuf,
    /// The artifact index digest its manifest says it seals.
    pub artifact: String,
}

/// A connection to OCI registries, reused for every push and pull.
#[derive(Clone)]
pub struct RegistryClient {
    client: oci_client::Client,
    plain_http: Vec<String>,
}

/// One config or layer blob of an artifact, its size already checked against its kind's limit.
struct Blob {
    what: &'static str,
    digest: String,
    size: u64,
}

/// One request's context, for error messages.
struct Op<'a> {
    repo: &'a Repository,
    verb: &'static str,
    what: &'a str,
    digest: &'a str,
}

/// An OCI distribution client for `config`: every Lampyr client of a registry is made here.
pub fn oci_client(config: ClientConfig) -> Result<oci_client::Client, OciDistributionError> {
    use_build_tls_provider();
    oci_client::Client::try_from(config)
}

/// Makes the one rustls provider Lampyr's build links (`ring`) the process default when
/// none is installed yet, as rustls itself does on first use of `ClientConfig::builder`
/// (kube's client triggers that). reqwest, under oci-client, only reads the default and has
/// no fallback in this build, so every reqwest client is made after this. A default the
/// host process installed stays.
pub fn use_build_tls_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

impl RegistryClient {
    /// A client speaking HTTPS except to the registries (`host[:port]`) in `plain_http`.
    ///
    /// Connecting times out after 10 s and a stalled read after 60 s.
    pub fn new(plain_http: impl IntoIterator<Item = impl Into<String>>) -> Result<Self, RegistryError> {
        let plain_http: Vec<String> = plain_http.into_iter().map(Into::into).collect();
        let config = ClientConfig {
            protocol: ClientProtocol::HttpsExcept(plain_http.clone()),
            use_monolithic_push: true,
            platform_resolver: None,
            connect_timeout: Some(CONNECT_TIMEOUT),
            read_timeout: Some(READ_TIMEOUT),
            ..ClientConfig::default()
        };
        let client = oci_client(config).map_err(|e| RegistryError::Client(Box::new(e)))?;
        Ok(RegistryClient { client, plain_http })
    }

    /// A client for `repo`: plain HTTP to its registry only when it was spelled with `http://`.
    pub fn for_repository(repo: &Repository) -> Result<Self, RegistryError> {
        Self::new(repo.plain_http.then(|| repo.registry.clone()))
    }

    /// Verifies the artifact `artifact_digest` in `layout`, then pushes its blobs,
    /// both manifests and its index (by digest, and under `tag` if given) to `repo`,
    /// byte for byte, skipping blobs the repository already has.
    pub async fn push(
        &self,
        layout: &Path,
        artifact_digest: &str,
        repo: &Repository,
        tag: Option<&str>,
    ) -> Result<ArtifactRef, RegistryError> {
        self.check_scheme(repo)?;
        if let Some(tag) = tag {
            check_tag(tag)?;
        }
        let local = |e| verify_error(artifact_digest, layout, e, PUSH_HINT);
        verify_layout(layout, Some(artifact_digest)).map_err(local)?;
        let index_bytes = read_local_json(layout, artifact_digest, "artifact index").map_err(local)?;
        let index: ImageIndex = parse_local("artifact index", &index_bytes).map_err(local)?;
        for desc in index.manifests() {
            let digest = desc.digest().to_string();
            let bytes = read_local_json(layout, &digest, "manifest").map_err(local)?;
            let manifest: ImageManifest = parse_local("manifest", &bytes).map_err(local)?;
            for blob in std::iter::once(manifest.config()).chain(manifest.layers()) {
                self.push_blob(repo, layout, artifact_digest, blob).await?;
            }
            self.put_manifest(repo, &digest, &digest, bytes, MT_MANIFEST).await?;
        }
        self.put_manifest(repo, artifact_digest, artifact_digest, index_bytes.clone(), MT_INDEX).await?;
        if let Some(tag) = tag {
            self.put_manifest(repo, artifact_digest, tag, index_bytes, MT_INDEX).await?;
        }
        Ok(ArtifactRef::Registry { repository: repo.clone(), digest: artifact_digest.to_string() })
    }

    /// Pulls artifact `digest` from `repo` into `cache` (fetching only what the
    /// cache lacks), builds its layout, verifies it, and returns the layout directory.
    pub async fn pull(&self, repo: &Repository, digest: &str, cache: &Cache) -> Result<PathBuf, RegistryError> {
        Ok(self.pull_verified(repo, digest, cache).await?.layout)
    }

    /// [`RegistryClient::pull`], returning the verified artifact.
    pub async fn pull_verified(&self, repo: &Repository, digest: &str, cache: &Cache) -> Result<VerifiedArtifact, RegistryError> {
        self.check_scheme(repo)?;
        digest_hex(digest).map_err(input_error)?;
        let index_op = Op { repo, verb: "pulling", what: "artifact index", digest };
        let index_bytes = self.fetch_json(&index_op, None, MT_INDEX, cache).await?;
        let index: ImageIndex = index_op.parse(&index_bytes)?;
        index_op.expect("artifactType", MT_ARTIFACT, index.artifact_type().as_ref().map(|t| t.to_string()))?;
        let [snapshot, guest] = index.manifests().as_slice() else {
            return Err(index_op.not_artifact(format!("it lists {} manifests, not 2", index.manifests().len())));
        };
        let mut blobs = self.pull_manifest(repo, snapshot, "snapshot manifest", cache).await?;
        blobs.extend(self.pull_manifest(repo, guest, "guest manifest", cache).await?);
        for blob in &blobs {
            self.fetch_blob(repo, blob, cache).await?;
        }
        let layout = cache.materialise(digest)?;
        verify_layout(&layout, Some(digest)).map_err(|e| verify_error(digest, &layout, e, PULL_HINT))
    }

    /// Pushes the sealed template `sealed` to `repo` as an OCI manifest
    /// (`artifactType` [`MT_TEMPLATE`], one [`MT_SEALED_LAYER`] layer, annotated
    /// with the artifact it seals), by digest and under `tag` if given.
    /// Returns the reference pinned by the manifest's digest.
    pub async fn push_template(&self, sealed: &SealedTemplate, repo: &Repository, tag: Option<&str>) -> Result<ArtifactRef, RegistryError> {
        self.check_scheme(repo)?;
        if let Some(tag) = tag {
            check_tag(tag)?;
        }
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": MT_MANIFEST,
            "artifactType": MT_TEMPLATE,
            "config": {"mediaType": MT_EMPTY, "digest": sha256_digest(EMPTY_JSON), "size": EMPTY_JSON.len()},
            "layers": [{"mediaType": MT_SEALED_LAYER, "digest": sealed.digest, "size": sealed.size}],
            "annotations": {ARTIFACT_ANNOTATION: sealed.artifact},
        });
        let bytes = serde_json::to_vec(&manifest).map_err(|e| {
            let reason = format!("it does not serialise: {e}");
            input_error(ArtifactError::Malformed { what: "sealed template manifest".into(), reason })
        })?;
        let digest = sha256_digest(&bytes);
        self.upload(repo, "template config", &sha256_digest(EMPTY_JSON), EMPTY_JSON.to_vec()).await?;
        let layer = tokio::fs::read(&sealed.path).await.map_err(|e| input_error(ArtifactError::io(&sealed.path, e)))?;
        if sha256_digest(&layer) != sealed.digest {
            return Err(input_error(ArtifactError::DigestMismatch {
                what: format!("sealed template {}", sealed.path.display()),
                expected: sealed.digest.clone(),
                actual: sha256_digest(&layer),
            }));
        }
        self.upload(repo, "sealed template layer", &sealed.digest, layer).await?;
        self.put_manifest(repo, &digest, &digest, bytes.clone(), MT_MANIFEST).await?;
        if let Some(tag) = tag {
            self.put_manifest(repo, &digest, tag, bytes, MT_MANIFEST).await?;
        }
        Ok(ArtifactRef::Registry { repository: repo.clone(), digest })
    }

    /// Checks `repo`'s registry answers (it is asked whether it holds the empty blob; any
    /// answer will do): an unreachable registry, a refused connection or a TLS mismatch fail.
    pub async fn probe(&self, repo: &Repository) -> Result<(), RegistryError> {
        self.check_scheme(repo)?;
        self.has_blob(repo, "probe blob", &sha256_digest(EMPTY_JSON)).await.map(|_| ())
    }

    /// Pulls the sealed template `digest` from `repo` into `cache`: its manifest
    /// is checked (type, one sealed layer within [`MAX_SEALED_BYTES`], the
    /// artifact annotation) and its layer stored once its digest checks.
    /// Opening it is [`crate::seal::open_artifact`]'s job.
    pub async fn pull_template(&self, repo: &Repository, digest: &str, cache: &Cache) -> Result<PulledTemplate, RegistryError> {
        self.check_scheme(repo)?;
        digest_hex(digest).map_err(input_error)?;
        let op = Op { repo, verb: "pulling", what: "sealed template manifest", digest };
        let bytes = self.fetch_json(&op, None, MT_MANIFEST, cache).await?;
        let manifest: ImageManifest = op.parse(&bytes)?;
        op.expect("artifactType", MT_TEMPLATE, manifest.artifact_type().as_ref().map(|t| t.to_string()))?;
        let [layer] = manifest.layers().as_slice() else {
            return Err(op.not_artifact(format!("it lists {} layers, not 1", manifest.layers().len())));
        };
        op.expect("layer mediaType", MT_SEALED_LAYER, Some(layer.media_type().to_string()))?;
        let artifact = manifest
            .annotations()
            .as_ref()
            .and_then(|a| a.get(ARTIFACT_ANNOTATION))
            .filter(|d| digest_hex(d).is_ok())
            .ok_or_else(|| op.not_artifact(format!("annotation {ARTIFACT_ANNOTATION} is missing or not a digest")))?
            .clone();
        let blob = Blob { what: "sealed template layer", digest: layer.digest().to_string(), size: layer.size() };
        Op { repo, verb: "pulling", what: blob.what, digest: &blob.digest }.check_declared(blob.size, MAX_SEALED_BYTES)?;
        self.fetch_blob(repo, &blob, cache).await?;
        Ok(PulledTemplate { sealed: cache.blob_path(&blob.digest)?, artifact })
    }

    fn check_scheme(&self, repo: &Repository) -> Result<(), RegistryError> {
        if repo.plain_http && !self.plain_http.contains(&repo.registry) {
            return Err(RegistryError::PlainHttpNotAllowed { registry: repo.registry.clone(), allowed: self.plain_http.clone() });
        }
        Ok(())
    }

    /// Pushes `blob` of artifact `artifact` from `layout` unless the repository already has it.
    async fn push_blob(&self, repo: &Repository, layout: &Path, artifact: &str, blob: &Descriptor) -> Result<(), RegistryError> {
        let digest: &str = blob.digest().as_ref();
        let what = blob_kind(blob.media_type().as_ref()).map_or("blob", |(what, _)| what);
        if self.has_blob(repo, what, digest).await? {
            return Ok(());
        }
        let local = |e| verify_error(artifact, layout, e, PUSH_HINT);
        let path = layout::blob_path(layout, digest).map_err(local)?;
        let bytes = tokio::fs::read(&path).await.map_err(|e| local(ArtifactError::io(&path, e)))?;
        self.upload(repo, what, digest, bytes).await
    }

    /// Whether `repo` already holds blob `digest`.
    async fn has_blob(&self, repo: &Repository, what: &str, digest: &str) -> Result<bool, RegistryError> {
        let check = Op { repo, verb: "checking for", what, digest };
        self.client.blob_exists(&reference(repo, digest), digest).await.map_err(|e| check.fail(e))
    }

    /// Pushes `bytes` as blob `digest` unless `repo` already holds it.
    async fn upload(&self, repo: &Repository, what: &str, digest: &str, bytes: Vec<u8>) -> Result<(), RegistryError> {
        if self.has_blob(repo, what, digest).await? {
            return Ok(());
        }
        let op = Op { repo, verb: "pushing", what, digest };
        self.client.push_blob(&reference(repo, digest), bytes, digest).await.map_err(|e| op.fail(e))?;
        Ok(())
    }

    /// Puts manifest or index `bytes` (digest `digest`) under `name` (the digest or a tag).
    async fn put_manifest(
        &self,
        repo: &Repository,
        digest: &str,
        name: &str,
        bytes: Vec<u8>,
        media_type: &'static str,
    ) -> Result<(), RegistryError> {
        let what = if media_type == MT_INDEX { "artifact index" } else { "manifest" };
        let reference = if name == digest {
            reference(repo, digest)
        } else {
            Reference::with_tag(repo.registry.clone(), repo.path.clone(), name.to_string())
        };
        let op = Op { repo, verb: "pushing", what, digest };
        let content_type = HeaderValue::from_static(media_type);
        self.client.push_manifest_raw(&reference, bytes, content_type).await.map_err(|e| op.fail(e))?;
        Ok(())
    }

    /// Fetches one image manifest (from the cache if there) and returns the blobs it names.
    async fn pull_manifest(
        &self,
        repo: &Repository,
        desc: &Descriptor,
        what: &'static str,
        cache: &Cache,
    ) -> Result<Vec<Blob>, RegistryError> {
        let digest = desc.digest().to_string();
        let op = Op { repo, verb: "pulling", what, digest: &digest };
        op.expect("descriptor mediaType", MT_MANIFEST, Some(desc.media_type().to_string()))?;
        op.check_declared(desc.size(), MAX_JSON_BYTES)?;
        let bytes = self.fetch_json(&op, Some(desc.size()), MT_MANIFEST, cache).await?;
        let manifest: ImageManifest = op.parse(&bytes)?;
        let mut blobs = Vec::new();
        for blob in std::iter::once(manifest.config()).chain(manifest.layers()) {
            let media_type = blob.media_type().to_string();
            let blob_digest = blob.digest().to_string();
            let Some((what, max)) = blob_kind(&media_type) else {
                return Err(op.not_artifact(format!("it names a blob of unknown media type {media_type:?}")));
            };
            let blob_op = Op { repo, verb: "pulling", what, digest: &blob_digest };
            blob_op.check_declared(blob.size(), max)?;
            blobs.push(Blob { what, digest: blob_digest, size: blob.size() });
        }
        Ok(blobs)
    }

    /// Returns JSON document `op.digest` from the cache, or fetches, checks and caches it.
    async fn fetch_json(&self, op: &Op<'_>, size: Option<u64>, media_type: &str, cache: &Cache) -> Result<Vec<u8>, RegistryError> {
        let bytes = if cache.blob_path(op.digest)?.is_file() {
            cache.read_json(op.digest, op.what)?
        } else {
            let reference = reference(op.repo, op.digest);
            let (bytes, _) =
                self.client.pull_manifest_raw(&reference, &RegistryAuth::Anonymous, &[media_type]).await.map_err(|e| op.fail(e))?;
            op.check_received(&bytes, MAX_JSON_BYTES)?;
            cache.insert(op.digest, &bytes)?;
            bytes.to_vec()
        };
        if let Some(size) = size.filter(|s| *s != bytes.len() as u64) {
            return Err(op.size_mismatch(size, bytes.len() as u64));
        }
        Ok(bytes)
    }

    /// Streams blob `blob` into the cache unless it is there; it lands only if complete and correct.
    async fn fetch_blob(&self, repo: &Repository, blob: &Blob, cache: &Cache) -> Result<(), RegistryError> {
        if cache.contains(&blob.digest, blob.size)? {
            return Ok(());
        }
        let op = Op { repo, verb: "pulling", what: blob.what, digest: &blob.digest };
        let pending = cache.begin(&blob.digest, blob.size)?;
        let file = pending.file().try_clone().map_err(|e| cache_io(cache, e))?;
        let mut out = BoundedFile { file: tokio::fs::File::from_std(file), written: 0, limit: blob.size, overflowed: false };
        let pulled = self.client.pull_blob(&reference(repo, &blob.digest), blob.digest.as_str(), &mut out).await;
        if out.overflowed {
            return Err(op.size_mismatch(blob.size, blob.size + 1));
        }
        pulled.map_err(|e| op.fail(e))?;
        if out.written != blob.size {
            return Err(op.size_mismatch(blob.size, out.written));
        }
        drop(out);
        tokio::task::spawn_blocking(move || pending.commit()).await.map_err(|e| cache_io(cache, io::Error::other(e)))??;
        Ok(())
    }
}

impl Op<'_> {
    /// Classifies a client error: unreachable, not found, digest mismatch, or refused.
    fn fail(&self, e: OciDistributionError) -> RegistryError {
        let action = format!("{} {} {}", self.verb, self.what, self.digest);
        let repository = self.repo.to_string();
        match e {
            OciDistributionError::RequestError(ref r) if r.is_connect() || r.is_timeout() => {
                let detail = error_chain(&e);
                let source = Box::new(e);
                RegistryError::Unreachable { registry: self.repo.registry.clone(), action, detail, source }
            }
            OciDistributionError::DigestError(DigestError::VerificationError { expected, actual }) => {
                RegistryError::DigestMismatch { what: self.what.to_string(), repository, expected, actual }
            }
            ref e if is_not_found(e) => {
                RegistryError::NotFound { what: self.what.to_string(), digest: self.digest.to_string(), repository }
            }
            e => RegistryError::Registry { repository, action, source: Box::new(e) },
        }
    }

    fn check_declared(&self, size: u64, max: u64) -> Result<(), RegistryError> {
        if size > max {
            return Err(RegistryError::TooLarge {
                what: self.what.to_string(),
                repository: self.repo.to_string(),
                digest: self.digest.to_string(),
                size,
                max,
            });
        }
        Ok(())
    }

    /// Checks bytes received for `self.digest`: at most `max` of them, hashing to the digest.
    fn check_received(&self, bytes: &[u8], max: u64) -> Result<(), RegistryError> {
        self.check_declared(bytes.len() as u64, max)?;
        let actual = sha256_digest(bytes);
        if actual != self.digest {
            return Err(RegistryError::DigestMismatch {
                what: self.what.to_string(),
                repository: self.repo.to_string(),
                expected: self.digest.to_string(),
                actual,
            });
        }
        Ok(())
    }

    fn size_mismatch(&self, expected: u64, actual: u64) -> RegistryError {
        RegistryError::SizeMismatch {
            what: self.what.to_string(),
            repository: self.repo.to_string(),
            digest: self.digest.to_string(),
            expected,
            actual,
        }
    }

    fn not_artifact(&self, reason: String) -> RegistryError {
        RegistryError::NotAnArtifact {
            what: self.what.to_string(),
            repository: self.repo.to_string(),
            digest: self.digest.to_string(),
            reason,
        }
    }

    fn expect(&self, field: &str, expected: &str, actual: Option<String>) -> Result<(), RegistryError> {
        match actual {
            Some(a) if a == expected => Ok(()),
            other => Err(self.not_artifact(format!("{field} is {}, expected {expected}", other.unwrap_or("missing".into())))),
        }
    }

    fn parse<T: serde::de::DeserializeOwned>(&self, bytes: &[u8]) -> Result<T, RegistryError> {
        serde_json::from_slice(bytes).map_err(|e| self.not_artifact(format!("it does not parse: {e}")))
    }
}

/// A file that accepts at most `limit` bytes, so a registry cannot send more than declared.
struct BoundedFile {
    file: tokio::fs::File,
    written: u64,
    limit: u64,
    overflowed: bool,
}

impl tokio::io::AsyncWrite for BoundedFile {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.written + buf.len() as u64 > this.limit {
            this.overflowed = true;
            return Poll::Ready(Err(io::Error::other("the registry sent more bytes than the descriptor declares")));
        }
        let poll = Pin::new(&mut this.file).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = poll {
            this.written += n as u64;
        }
        poll
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.file).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.file).poll_shutdown(cx)
    }
}

/// What a blob of `media_type` is called and how large it may be.
fn blob_kind(media_type: &str) -> Option<(&'static str, u64)> {
    match media_type {
        MT_HYPERLIGHT_CONFIG => Some(("snapshot config", MAX_JSON_BYTES)),
        MT_HYPERLIGHT_MEMORY => Some(("snapshot memory layer", MAX_MEMORY_BYTES)),
        MT_HYPERLIGHT_TRANSPORT => Some(("snapshot transport layer", MAX_TRANSPORT_BYTES)),
        MT_EMPTY => Some(("guest config", MAX_JSON_BYTES)),
        MT_GUEST_ELF => Some(("guest ELF layer", MAX_ELF_BYTES)),
        _ => None,
    }
}

/// `error: cause: cause…`, skipping causes whose text the previous one already shows.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let line = c.to_string();
        if !text.contains(&line) {
            text = format!("{text}: {line}");
        }
        cause = c.source();
    }
    text
}

/// How many bytes a registry sent, for [`RegistryError::SizeMismatch`].
fn sent(actual: u64, expected: u64) -> String {
    if actual > expected { format!("more than {expected} bytes") } else { format!("{actual} bytes") }
}

fn is_not_found(e: &OciDistributionError) -> bool {
    const CODES: [OciErrorCode; 4] =
        [OciErrorCode::ManifestUnknown, OciErrorCode::BlobUnknown, OciErrorCode::NameUnknown, OciErrorCode::NotFound];
    match e {
        OciDistributionError::RegistryError { envelope, .. } => envelope.errors.iter().any(|err| CODES.contains(&err.code)),
        OciDistributionError::ServerError { code, .. } => *code == 404,
        OciDistributionError::ImageManifestNotFoundError(_) => true,
        _ => false,
    }
}

/// `[A-Za-z0-9_][A-Za-z0-9._-]{0,127}` (the OCI distribution tag grammar).
fn check_tag(tag: &str) -> Result<(), RegistryError> {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let valid = tag.len() <= 128 && tag.chars().next().is_some_and(word) && tag.chars().all(|c| word(c) || c == '.' || c == '-');
    if valid { Ok(()) } else { Err(RegistryError::BadTag { tag: tag.to_string() }) }
}

fn reference(repo: &Repository, digest: &str) -> Reference {
    Reference::with_digest(repo.registry.clone(), repo.path.clone(), digest.to_string())
}

/// Reads JSON blob `digest` of a layout (bounded) and checks it hashes to its name.
fn read_local_json(layout: &Path, digest: &str, what: &str) -> Result<Vec<u8>, ArtifactError> {
    let path = layout::blob_path(layout, digest)?;
    let bytes = std::fs::read(&path).map_err(|e| ArtifactError::io(&path, e))?;
    if bytes.len() as u64 > MAX_JSON_BYTES {
        return Err(ArtifactError::TooLarge { what: what.to_string(), size: bytes.len() as u64, max: MAX_JSON_BYTES });
    }
    let actual = sha256_digest(&bytes);
    if actual != digest {
        return Err(ArtifactError::DigestMismatch { what: what.to_string(), expected: digest.to_string(), actual });
    }
    Ok(bytes)
}

fn parse_local<T: serde::de::DeserializeOwned>(what: &str, bytes: &[u8]) -> Result<T, ArtifactError> {
    serde_json::from_slice(bytes).map_err(|e| ArtifactError::Malformed { what: what.to_string(), reason: e.to_string() })
}

fn verify_error(digest: &str, layout: &Path, source: ArtifactError, hint: &'static str) -> RegistryError {
    RegistryError::Verify { digest: digest.to_string(), layout: layout.to_path_buf(), source: Box::new(source), hint }
}

fn input_error(source: ArtifactError) -> RegistryError {
    RegistryError::Input(Box::new(source))
}

fn cache_io(cache: &Cache, source: io::Error) -> RegistryError {
    RegistryError::Cache(CacheError::Io { path: cache.root().join("tmp"), source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_follow_the_distribution_grammar() {
        for ok in ["v1", "latest", "_x", "1.2.3-rc.1", &"a".repeat(128)] {
            assert!(check_tag(ok).is_ok(), "{ok}");
        }
        for bad in ["", ".v1", "-v1", "a/b", "a:b", &"a".repeat(129)] {
            assert!(check_tag(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn plain_http_needs_the_client_s_consent() {
        let repo = Repository::parse("http://127.0.0.1:5000/lampyr/hello").expect("parses");
        let https_only = RegistryClient::new(std::iter::empty::<String>()).expect("client");
        let err = https_only.check_scheme(&repo).expect_err("refused");
        assert!(err.to_string().contains("127.0.0.1:5000"), "{err}");
        assert!(RegistryClient::for_repository(&repo).expect("client").check_scheme(&repo).is_ok());
    }
}
