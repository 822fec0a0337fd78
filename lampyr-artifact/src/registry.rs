//! Registry transport: pushing an artifact from a layout to an OCI registry and
//! pulling one by digest into the local [`Cache`], byte for byte.
//!
//! Bytes are never re-serialised: blobs go up with `push_blob` and every
//! manifest and the artifact index with `push_manifest_raw`, so digests hold.
//! Pulls check every digest and refuse a declared size over Lampyr's limits
//! before downloading it; a blob reaches the cache only once its digest checks.

use std::collections::HashSet;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use http::HeaderValue;
use oci_client::Reference;
use oci_client::client::{CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::errors::{DigestError, OciDistributionError, OciErrorCode};
use oci_client::secrets::RegistryAuth;
use oci_spec::image::{Descriptor, ImageManifest};
use sha2::Digest as _;

use crate::cache::{Cache, CacheError, PendingBlob};
use crate::credentials::{CredentialError, Credentials};
use crate::layout::{self, MAX_JSON_BYTES, digest_hex, sha256_digest};
use crate::pack::{Unpacker, check_unpacked};
use crate::readers::{ProvenReaders, Reader};
use crate::reference::Repository;
use crate::seal::{ARTIFACT_ANNOTATION, MAX_SEALED_BYTES, MT_SEALED_LAYER, MT_TEMPLATE, SealedTemplate};
use crate::session::{GetError, Sessions};
use crate::structure::{DataLayer, MT_INDEX, MT_MANIFEST, Structure, embedded, index_entries, listed_blobs};
use crate::verify::verify_fresh_layout;
use crate::{ArtifactError, ArtifactRef, MT_EMPTY, VerifiedArtifact, verify_layout};
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
    /// The registry refused the client's credentials (or its lack of them).
    #[error(
        "{registry} refused {action}: {detail} (its credentials are missing or wrong: \
         `docker login {registry}` for ly; in a cluster, a pull Secret in the Revision's \
         imagePullSecrets or its ServiceAccount's; nothing was changed there)"
    )]
    Unauthorized {
        /// The registry.
        registry: String,
        /// What was being done.
        action: String,
        /// The registry's answer.
        detail: String,
    },
    /// The registry credentials or CAs configured cannot be used.
    #[error("{0}")]
    Credentials(#[source] CredentialError),
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
    /// A compressed layer did not decompress to the layer the artifact pins.
    #[error("{repository}: {source}")]
    Unpacked {
        /// The repository.
        repository: String,
        /// What was wrong with it.
        source: Box<ArtifactError>,
    },
    /// A download broke off.
    #[error("{repository}: {action} broke off: {detail} (nothing of it was kept; pull again)")]
    Interrupted {
        /// The repository.
        repository: String,
        /// What was being done, with the digest.
        action: String,
        /// The transport error and its causes, on one line.
        detail: String,
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
    sessions: Arc<Sessions>,
    plain_http: Vec<String>,
    /// The extra certificate authorities it trusts, for [`RegistryClient::with_credentials`].
    ca_pem: Option<Vec<u8>>,
    credentials: Credentials,
    /// Credentials already read, by registry (a credential helper runs once per registry).
    resolved: Arc<std::sync::Mutex<std::collections::HashMap<String, RegistryAuth>>>,
}

/// Who a [`RegistryClient`] is to registries, and which extra CAs it trusts.
#[derive(Clone, Debug, Default)]
pub struct RegistryAccess {
    /// Where credentials come from (anonymous by default).
    pub credentials: Credentials,
    /// PEM certificate authorities trusted besides the system's.
    pub ca_pem: Option<Vec<u8>>,
}

impl RegistryAccess {
    /// What a user's own tools use: their Docker config's credentials (`docker login`), and
    /// the CAs in [`crate::credentials::CA_FILE_ENV`] when it is set.
    pub fn from_environment() -> Result<Self, RegistryError> {
        let ca_pem = crate::credentials::ca_from_environment().map_err(RegistryError::Credentials)?;
        Ok(RegistryAccess { credentials: Credentials::DockerConfig, ca_pem })
    }
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
        Self::with_access(plain_http, RegistryAccess::default())
    }

    /// [`RegistryClient::new`], authenticating and verifying certificates as `access` says.
    pub fn with_access(plain_http: impl IntoIterator<Item = impl Into<String>>, access: RegistryAccess) -> Result<Self, RegistryError> {
        let plain_http: Vec<String> = plain_http.into_iter().map(Into::into).collect();
        let extra_root_certificates = access
            .ca_pem
            .iter()
            .map(|pem| oci_client::client::Certificate { encoding: CertificateEncoding::Pem, data: pem.clone() })
            .collect();
        let config = ClientConfig {
            protocol: ClientProtocol::HttpsExcept(plain_http.clone()),
            use_monolithic_push: true,
            platform_resolver: None,
            connect_timeout: Some(CONNECT_TIMEOUT),
            read_timeout: Some(READ_TIMEOUT),
            extra_root_certificates,
            ..ClientConfig::default()
        };
        let client = oci_client(config).map_err(|e| RegistryError::Client(Box::new(e)))?;
        let sessions = Sessions::new(plain_http.clone(), CONNECT_TIMEOUT, READ_TIMEOUT, access.ca_pem.as_deref())
            .map_err(|e| RegistryError::Client(Box::new(OciDistributionError::RequestError(e))))?;
        let (credentials, ca_pem) = (access.credentials, access.ca_pem);
        Ok(RegistryClient { client, sessions: Arc::new(sessions), plain_http, ca_pem, credentials, resolved: Arc::default() })
    }

    /// A client for the same registries and CAs presenting `credentials`: this one when they
    /// are [`Credentials::Anonymous`] and so is it, else a new one (clients never share tokens).
    pub fn with_credentials(&self, credentials: Credentials) -> Result<Self, RegistryError> {
        if matches!((&credentials, &self.credentials), (Credentials::Anonymous, Credentials::Anonymous)) {
            return Ok(self.clone());
        }
        Self::with_access(self.plain_http.clone(), RegistryAccess { credentials, ca_pem: self.ca_pem.clone() })
    }

    /// A client for `repo` as its user reaches it: plain HTTP to its registry only when it was
    /// spelled with `http://`, with the user's registry credentials and CAs
    /// ([`RegistryAccess::from_environment`]).
    pub fn for_repository(repo: &Repository) -> Result<Self, RegistryError> {
        Self::with_access(repo.plain_http.then(|| repo.registry.clone()), RegistryAccess::from_environment()?)
    }

    /// The credentials for `registry`, read once.
    fn auth_for(&self, registry: &str) -> Result<RegistryAuth, RegistryError> {
        let mut resolved = self.resolved.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(auth) = resolved.get(registry) {
            return Ok(auth.clone());
        }
        let auth = self.credentials.for_registry(registry).map_err(RegistryError::Credentials)?;
        resolved.insert(registry.to_string(), auth.clone());
        Ok(auth)
    }

    /// Checks `repo` may be reached, and gives the client its registry's credentials (once
    /// per registry; anonymous ones are never stored, so open registries are asked `/v2/` once).
    async fn prepare(&self, repo: &Repository) -> Result<RegistryAuth, RegistryError> {
        self.check_scheme(repo)?;
        let auth = self.auth_for(&repo.registry)?;
        if !matches!(auth, RegistryAuth::Anonymous) {
            self.client.store_auth_if_needed(&repo.registry, &auth).await;
        }
        Ok(auth)
    }

    /// Verifies the artifact `artifact_digest` in `layout`, then pushes what travels
    /// (configs, Hyperlight's manifest, each layer in its transport form: compressed
    /// where the artifact packs it), both manifests and its index (by digest, and under
    /// `tag` if given) to `repo`, byte for byte, skipping blobs the repository has.
    pub async fn push(
        &self,
        layout: &Path,
        artifact_digest: &str,
        repo: &Repository,
        tag: Option<&str>,
    ) -> Result<ArtifactRef, RegistryError> {
        self.prepare(repo).await?;
        if let Some(tag) = tag {
            check_tag(tag)?;
        }
        let local = |e| verify_error(artifact_digest, layout, e, PUSH_HINT);
        verify_layout(layout, Some(artifact_digest)).map_err(local)?;
        let index_bytes = read_local_json(layout, artifact_digest, "artifact index").map_err(local)?;
        let read = |d: &Descriptor, what: &str| read_local_json(layout, d.digest().as_ref(), what);
        let artifact = Structure::read(artifact_digest, &index_bytes, read).map_err(local)?;
        let mut uploads: Vec<(&str, Descriptor)> = artifact.json_blobs().into_iter().map(|(what, d)| (what, d.clone())).collect();
        uploads.extend(artifact.layers().iter().map(|l| (l.what, l.transport().clone())));
        futures::stream::iter(uploads)
            .map(|(what, desc)| async move { self.push_blob(repo, layout, artifact_digest, what, &desc).await })
            .buffer_unordered(PARALLEL_BLOBS)
            .try_collect::<Vec<()>>()
            .await?;
        for desc in [&artifact.snapshot, &artifact.guest] {
            let digest = desc.digest().to_string();
            let bytes = read_local_json(layout, &digest, "manifest").map_err(local)?;
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
    ///
    /// The index comes first, then both manifests together, then every blob the cache
    /// lacks, [`PARALLEL_BLOBS`] at a time: each streamed to disk through its digest
    /// (and, for a compressed layer, decompressed on the way into the form Hyperlight
    /// loads, checked against the digest and size the pinned manifest records for it).
    pub async fn pull_verified(&self, repo: &Repository, digest: &str, cache: &Cache) -> Result<VerifiedArtifact, RegistryError> {
        self.prepare(repo).await?;
        digest_hex(digest).map_err(input_error)?;
        let _writing = cache.write_guard()?;
        let index_op = Op { repo, verb: "pulling", what: "artifact index", digest };
        let index_bytes = self.fetch_json(&index_op, None, MT_INDEX, cache).await?;
        let (snapshot, guest) = index_entries(&index_bytes).map_err(|e| index_op.artifact_error(e))?;
        let (snapshot_bytes, guest_bytes) = futures::try_join!(
            self.fetch_manifest(repo, &snapshot, "snapshot manifest", cache),
            self.fetch_manifest(repo, &guest, "guest manifest", cache),
        )?;
        let transfers = listed_blobs(&snapshot_bytes, &guest_bytes).map_err(|e| index_op.artifact_error(e))?;
        // Every transfer runs to its end, even after one fails, so none is left writing
        // into the cache once the pull returns.
        let fetched: Vec<Result<Option<String>, RegistryError>> = futures::stream::iter(transfers)
            .map(|layer| async move { self.fetch_blob(repo, &layer, cache).await })
            .buffer_unordered(PARALLEL_BLOBS)
            .collect()
            .await;
        let hashed: HashSet<String> = fetched.into_iter().collect::<Result<Vec<_>, _>>()?.into_iter().flatten().collect();
        // Materialising reads the whole structure from the cache: there the carried manifest
        // must list what the packed one described, or the artifact is refused as such.
        let layout = cache.materialise(digest).map_err(|e| match e {
            CacheError::Artifact(e) => index_op.artifact_error(*e),
            e => RegistryError::from(e),
        })?;
        verify_fresh_layout(&layout, Some(digest), &hashed).map_err(|e| verify_error(digest, &layout, e, PULL_HINT))
    }

    /// Who this client is to `registry`: the reader its credentials make it.
    pub fn reader(&self, registry: &str) -> Result<Reader, RegistryError> {
        Ok(Reader::of(&self.auth_for(registry)?))
    }

    /// Asks `repo` for artifact `digest`'s index with this client's credentials, to show
    /// they may read it before a copy another reader cached is used.
    pub async fn check_readable(&self, repo: &Repository, digest: &str) -> Result<(), RegistryError> {
        let auth = self.prepare(repo).await?;
        digest_hex(digest).map_err(input_error)?;
        let op = Op { repo, verb: "checking access to", what: "artifact index", digest };
        let bytes = match self.sessions.manifest(&self.client, &auth, repo, digest, MT_INDEX, MAX_JSON_BYTES).await {
            Ok(bytes) => bytes,
            Err(GetError::Client(e)) => return Err(op.fail(e)),
            Err(GetError::Oversized(size)) => return Err(op.too_large(size, MAX_JSON_BYTES)),
        };
        op.check_received(&bytes, MAX_JSON_BYTES)
    }

    /// Makes sure the registry gives artifact `digest` of `repo` to this client's reader:
    /// asks it ([`RegistryClient::check_readable`]) unless `readers` records that it did, or
    /// that it gave it to anyone, and records the answer.
    pub async fn ensure_readable(&self, repo: &Repository, digest: &str, readers: &ProvenReaders) -> Result<(), RegistryError> {
        let reader = self.reader(&repo.registry)?;
        if !readers.may_read(repo, digest, &reader) {
            self.check_readable(repo, digest).await?;
            readers.record(repo, digest, reader);
        }
        Ok(())
    }

    /// [`RegistryClient::pull_verified`] for a cache that readers with other credentials
    /// share: a cached copy is used only once the registry gave this client's reader the
    /// artifact (now, or earlier in this process as `readers` records), or gave it to anyone.
    pub async fn pull_verified_as_reader(
        &self,
        repo: &Repository,
        digest: &str,
        cache: &Cache,
        readers: &ProvenReaders,
    ) -> Result<VerifiedArtifact, RegistryError> {
        digest_hex(digest).map_err(input_error)?;
        if cache.blob_path(digest)?.is_file() {
            self.ensure_readable(repo, digest, readers).await?;
        }
        let verified = self.pull_verified(repo, digest, cache).await?;
        readers.record(repo, digest, self.reader(&repo.registry)?);
        Ok(verified)
    }

    /// Pushes the sealed template `sealed` to `repo` as an OCI manifest
    /// (`artifactType` [`MT_TEMPLATE`], one [`MT_SEALED_LAYER`] layer, annotated
    /// with the artifact it seals), by digest and under `tag` if given.
    /// Returns the reference pinned by the manifest's digest.
    pub async fn push_template(&self, sealed: &SealedTemplate, repo: &Repository, tag: Option<&str>) -> Result<ArtifactRef, RegistryError> {
        self.prepare(repo).await?;
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
        self.prepare(repo).await?;
        self.has_blob(repo, "probe blob", &sha256_digest(EMPTY_JSON)).await.map(|_| ())
    }

    /// Pulls the sealed template `digest` from `repo` into `cache`: its manifest
    /// is checked (type, one sealed layer within [`MAX_SEALED_BYTES`], the
    /// artifact annotation) and its layer stored once its digest checks.
    /// Opening it is [`crate::seal::open_artifact`]'s job.
    pub async fn pull_template(&self, repo: &Repository, digest: &str, cache: &Cache) -> Result<PulledTemplate, RegistryError> {
        self.prepare(repo).await?;
        digest_hex(digest).map_err(input_error)?;
        let _writing = cache.write_guard()?;
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
        let sealed = DataLayer { what: "sealed template layer", native: layer.clone(), packed: None, max: MAX_SEALED_BYTES };
        Op { repo, verb: "pulling", what: sealed.what, digest: layer.digest().as_ref() }.check_declared(layer.size(), MAX_SEALED_BYTES)?;
        self.fetch_blob(repo, &sealed, cache).await?;
        Ok(PulledTemplate { sealed: cache.blob_path(layer.digest().as_ref())?, artifact })
    }

    fn check_scheme(&self, repo: &Repository) -> Result<(), RegistryError> {
        if repo.plain_http && !self.plain_http.contains(&repo.registry) {
            return Err(RegistryError::PlainHttpNotAllowed { registry: repo.registry.clone(), allowed: self.plain_http.clone() });
        }
        Ok(())
    }

    /// Pushes blob `blob` (`what`) of artifact `artifact` from `layout` unless the repository already has it.
    async fn push_blob(
        &self,
        repo: &Repository,
        layout: &Path,
        artifact: &str,
        what: &str,
        blob: &Descriptor,
    ) -> Result<(), RegistryError> {
        let digest: &str = blob.digest().as_ref();
        if self.has_blob(repo, what, digest).await? {
            return Ok(());
        }
        let local = |e| verify_error(artifact, layout, e, PUSH_HINT);
        let path = layout::blob_path(layout, digest).map_err(local)?;
        let bytes = tokio::fs::read(&path).await.map_err(|e| local(ArtifactError::io(&path, e)))?;
        self.put_blob(repo, what, digest, bytes).await
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
        self.put_blob(repo, what, digest, bytes).await
    }

    /// Pushes `bytes` as blob `digest`.
    async fn put_blob(&self, repo: &Repository, what: &str, digest: &str, bytes: Vec<u8>) -> Result<(), RegistryError> {
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

    /// Fetches the manifest `desc` names (from the cache if there), checked against it.
    async fn fetch_manifest(
        &self,
        repo: &Repository,
        desc: &Descriptor,
        what: &'static str,
        cache: &Cache,
    ) -> Result<Vec<u8>, RegistryError> {
        let digest = desc.digest().to_string();
        let op = Op { repo, verb: "pulling", what, digest: &digest };
        op.check_declared(desc.size(), MAX_JSON_BYTES)?;
        self.fetch_json(&op, Some(desc.size()), MT_MANIFEST, cache).await
    }

    /// Returns JSON document `op.digest` from the cache, or fetches, checks and caches it.
    async fn fetch_json(&self, op: &Op<'_>, size: Option<u64>, media_type: &str, cache: &Cache) -> Result<Vec<u8>, RegistryError> {
        let bytes = if cache.blob_path(op.digest)?.is_file() {
            cache.read_json(op.digest, op.what)?
        } else {
            let auth = self.auth_for(&op.repo.registry)?;
            let bytes = match self.sessions.manifest(&self.client, &auth, op.repo, op.digest, media_type, MAX_JSON_BYTES).await {
                Ok(bytes) => bytes,
                Err(GetError::Client(e)) => return Err(op.fail(e)),
                Err(GetError::Oversized(size)) => return Err(op.too_large(size, MAX_JSON_BYTES)),
            };
            op.check_received(&bytes, MAX_JSON_BYTES)?;
            cache.insert(op.digest, &bytes)?;
            bytes.to_vec()
        };
        if let Some(size) = size.filter(|s| *s != bytes.len() as u64) {
            return Err(op.size_mismatch(size, bytes.len() as u64));
        }
        Ok(bytes)
    }

    /// Stores `layer` in the cache unless it is there, as Hyperlight loads it: from the
    /// copy its descriptor embeds, else streamed from the registry; a compressed layer is
    /// decompressed on the way. It lands only if complete and correct.
    /// Returns the digest it stored, `None` when the cache had it.
    async fn fetch_blob(&self, repo: &Repository, layer: &DataLayer, cache: &Cache) -> Result<Option<String>, RegistryError> {
        if cache.contains(layer.native.digest().as_ref(), layer.native.size())? {
            return Ok(None);
        }
        let transport = layer.transport().digest().to_string();
        let op = Op { repo, verb: "pulling", what: layer.what, digest: &transport };
        let copy = embedded(layer.what, layer.transport()).map_err(|e| op.artifact_error(e))?;
        let sink = BlobSink::new(layer, cache)?;
        let writing = match copy {
            // A small blob travels in its descriptor: no request.
            Some(bytes) => tokio::task::spawn_blocking(move || sink.store(&bytes)),
            None => self.download(&op, sink).await?,
        };
        let written = writing.await.map_err(|e| cache_io(cache, io::Error::other(e)))?;
        written.map_err(|e| e.into_registry(&op))?;
        Ok(Some(layer.native.digest().to_string()))
    }

    /// Streams the blob `op` names into `sink`, which takes it on a blocking thread;
    /// returns that thread's handle once the download has ended.
    async fn download(&self, op: &Op<'_>, sink: BlobSink) -> Result<tokio::task::JoinHandle<Result<(), SinkError>>, RegistryError> {
        let sized = self.client.pull_blob_stream(&reference(op.repo, op.digest), op.digest).await.map_err(|e| op.fail(e))?;
        let size = sink.layer.transport().size();
        if let Some(length) = sized.content_length.filter(|l| *l != size) {
            return Err(op.size_mismatch(size, length));
        }
        let (chunks, received) = tokio::sync::mpsc::channel(SINK_CHUNKS);
        let writing = tokio::task::spawn_blocking(move || sink.run(received));
        let mut stream = sized.stream;
        while let Some(chunk) = stream.next().await {
            let failed = chunk.is_err();
            // The sink stops taking chunks when it refuses the blob; its answer says why.
            if chunks.send(chunk).await.is_err() || failed {
                break;
            }
        }
        Ok(writing)
    }
}

/// How many blobs of one artifact are fetched or pushed at once.
pub const PARALLEL_BLOBS: usize = 4;
/// Chunks in flight between a download and the thread writing it.
const SINK_CHUNKS: usize = 8;

/// Where one download goes, on a blocking thread: hashed as it arrives, decompressed
/// when the layer travels packed, and written into a pending blob of the cache.
struct BlobSink {
    layer: DataLayer,
    hasher: sha2::Sha256,
    received: u64,
    output: SinkOutput,
}

enum SinkOutput {
    Plain(PendingBlob),
    Packed(Box<Unpacker<PendingBlob>>),
    /// The decompressed form was refused (its output discarded); the rest is still
    /// hashed, so altered transport bytes are reported as such first.
    Refused(ArtifactError),
}

/// Why a download did not land.
enum SinkError {
    Size { expected: u64, actual: u64 },
    Digest { actual: String },
    Unpacked(ArtifactError),
    Transport(io::Error),
    Cache(CacheError),
}

impl BlobSink {
    fn new(layer: &DataLayer, cache: &Cache) -> Result<Self, RegistryError> {
        let pending = cache.begin(layer.native.digest().as_ref(), layer.native.size())?;
        let output = match layer.packed {
            Some(_) => SinkOutput::Packed(Box::new(Unpacker::new(layer, pending).map_err(input_error)?)),
            None => SinkOutput::Plain(pending),
        };
        Ok(BlobSink { layer: layer.clone(), hasher: sha2::Sha256::new(), received: 0, output })
    }

    fn run(mut self, mut chunks: tokio::sync::mpsc::Receiver<Result<Bytes, io::Error>>) -> Result<(), SinkError> {
        while let Some(chunk) = chunks.blocking_recv() {
            match chunk {
                Ok(chunk) => self.take(&chunk)?,
                // oci-client ends a stream whose digest differs with an error: say which.
                Err(_) if self.received == self.layer.transport().size() && self.digest() != self.layer.transport().digest().as_ref() => {
                    return Err(SinkError::Digest { actual: self.digest() });
                }
                Err(e) => return Err(SinkError::Transport(e)),
            }
        }
        self.finish()
    }

    /// Takes the whole blob at once.
    fn store(mut self, bytes: &[u8]) -> Result<(), SinkError> {
        self.take(bytes)?;
        self.finish()
    }

    /// Hashes and writes (or decompresses) the next bytes of the blob.
    fn take(&mut self, chunk: &[u8]) -> Result<(), SinkError> {
        let expected = self.layer.transport().size();
        if self.received + chunk.len() as u64 > expected {
            return Err(SinkError::Size { expected, actual: self.received + chunk.len() as u64 });
        }
        self.received += chunk.len() as u64;
        self.hasher.update(chunk);
        let refused = match &mut self.output {
            SinkOutput::Plain(pending) => pending.write_all(chunk).map_err(SinkError::Cache).err(),
            SinkOutput::Packed(unpacker) => unpacker.write(chunk).err().map(SinkError::Unpacked),
            SinkOutput::Refused(_) => None,
        };
        match refused {
            Some(SinkError::Unpacked(e)) => self.output = SinkOutput::Refused(e),
            Some(e) => return Err(e),
            None => {}
        }
        Ok(())
    }

    /// Checks the whole blob arrived as its descriptors declare and stores it.
    fn finish(self) -> Result<(), SinkError> {
        let expected = self.layer.transport().size();
        if self.received != expected {
            return Err(SinkError::Size { expected, actual: self.received });
        }
        let actual = self.digest();
        if actual != self.layer.transport().digest().as_ref() {
            return Err(SinkError::Digest { actual });
        }
        let pending = match self.output {
            SinkOutput::Plain(pending) => pending,
            SinkOutput::Packed(unpacker) => {
                let pending = unpacker.finish().map_err(SinkError::Unpacked)?;
                let (len, digest) = pending.hashed();
                check_unpacked(&self.layer, len, &digest).map_err(SinkError::Unpacked)?;
                pending
            }
            SinkOutput::Refused(e) => return Err(SinkError::Unpacked(e)),
        };
        pending.commit().map(drop).map_err(SinkError::Cache)
    }

    fn digest(&self) -> String {
        format!("sha256:{}", hex::encode(self.hasher.clone().finalize()))
    }
}

impl SinkError {
    fn into_registry(self, op: &Op<'_>) -> RegistryError {
        match self {
            SinkError::Size { expected, actual } => op.size_mismatch(expected, actual),
            SinkError::Digest { actual } => RegistryError::DigestMismatch {
                what: op.what.to_string(),
                repository: op.repo.to_string(),
                expected: op.digest.to_string(),
                actual,
            },
            SinkError::Unpacked(source) => RegistryError::Unpacked { repository: op.repo.to_string(), source: Box::new(source) },
            SinkError::Transport(e) => RegistryError::Interrupted {
                repository: op.repo.to_string(),
                action: format!("{} {} {}", op.verb, op.what, op.digest),
                detail: error_chain(&e),
            },
            SinkError::Cache(e) => RegistryError::Cache(e),
        }
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
            ref e if is_unauthorized(e) => {
                RegistryError::Unauthorized { registry: self.repo.registry.clone(), action, detail: e.to_string() }
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

    /// An artifact's documents, fetched, do not describe a Lampyr artifact (or declare too much).
    fn artifact_error(&self, e: ArtifactError) -> RegistryError {
        match e {
            ArtifactError::Declared { what, digest, size, max } => {
                RegistryError::TooLarge { what, repository: self.repo.to_string(), digest, size, max }
            }
            e => self.not_artifact(e.to_string()),
        }
    }

    fn check_declared(&self, size: u64, max: u64) -> Result<(), RegistryError> {
        if size > max {
            return Err(self.too_large(size, max));
        }
        Ok(())
    }

    fn too_large(&self, size: u64, max: u64) -> RegistryError {
        RegistryError::TooLarge {
            what: self.what.to_string(),
            repository: self.repo.to_string(),
            digest: self.digest.to_string(),
            size,
            max,
        }
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

/// Whether `e` is the registry refusing the request's credentials (401, 403, or a failed token exchange).
fn is_unauthorized(e: &OciDistributionError) -> bool {
    match e {
        OciDistributionError::AuthenticationFailure(_) | OciDistributionError::UnauthorizedError { .. } => true,
        OciDistributionError::ServerError { code, .. } => matches!(code, 401 | 403),
        OciDistributionError::RequestError(r) => r.status().is_some_and(|s| matches!(s.as_u16(), 401 | 403)),
        OciDistributionError::RegistryError { envelope, .. } => {
            envelope.errors.iter().any(|e| matches!(e.code, OciErrorCode::Unauthorized | OciErrorCode::Denied))
        }
        _ => false,
    }
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
