//! Resolving a Revision's `lampyr.dev/snapshot-artifact`: parse the digest-pinned
//! reference, pull it by digest into the content cache and verify it with
//! lampyr-fiber's checks. A verified reference is remembered for the life of the
//! process (content under a digest never changes), so later reconciles of the
//! same Revision, or of any Revision naming the same artifact, do not pull again.
//! Pulls of one reference are single-flight. Pulls use the Revision's registry
//! credentials (its pull Secrets and its ServiceAccount's), read only while the
//! registry has not given the artifact to anyone; a reference verified with one
//! Revision's credentials is checked with the registry before another's uses it.
//!
//! Each repository gets its own content cache: a digest already pulled from one
//! repository is fetched again, and checked again, from any other repository a
//! Revision names, so a Revision whose registry does not hold (or serves altered
//! bytes for) its artifact fails even when another registry holds the same bytes.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use lampyr_api::keys;
use lampyr_artifact::cache::Cache;
use lampyr_artifact::credentials::Credentials;
use lampyr_artifact::layout::sha256_digest;
use lampyr_artifact::readers::ProvenReaders;
use lampyr_artifact::reference::Repository;
use lampyr_artifact::registry::{RegistryAccess, RegistryClient, RegistryError};
use lampyr_artifact::{ArtifactRef, FiberMetadata, verify_layout};
use lampyr_process::pull_secrets::pull_credentials;

/// An artifact that was pulled by digest and passed every check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedArtifact {
    /// `registry/repository@sha256:…`, without a scheme: `Home.spec.artifact`
    /// and the Revision's `containerStatuses[].imageDigest`.
    pub reference: String,
    /// The artifact index digest.
    pub digest: String,
    /// Guest memory one fiber maps: the size of the snapshot's memory layer.
    pub fiber_memory_bytes: u64,
    /// Lampyr's metadata from the snapshot config.
    pub metadata: FiberMetadata,
}

/// Why an artifact cannot be used. Every message names the reference and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ArtifactProblem {
    /// The Revision has no annotation, and the image map has no entry for its image.
    #[error(
        "the Revision has no {annotation} annotation and the image map {map} has no entry for its image {image:?}: \
         set the annotation in spec.template.metadata.annotations to the digest-pinned snapshot artifact \
         (registry/repository@sha256:…), as `ly deploy` does, or map the image to one (docs/images.md)",
        annotation = keys::SNAPSHOT_ARTIFACT
    )]
    Missing {
        /// The container image.
        image: String,
        /// The image map's ConfigMap, `namespace/name`.
        map: String,
    },
    /// The annotation is not a digest-pinned registry reference, or asks for plain
    /// HTTP to a registry the controller keeps on HTTPS.
    #[error("{annotation} {value:?} cannot be used: {reason}", annotation = keys::SNAPSHOT_ARTIFACT)]
    BadReference {
        /// The annotation's value.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The registry did not answer, or failed the request (retried with backoff).
    #[error("{0}")]
    Unreachable(String),
    /// The registry does not hold the pinned digest (retried with backoff: it may be pushed later).
    #[error("{0}")]
    NotFound(String),
    /// The registry served bytes that do not match their digest or declared size.
    #[error("{0}")]
    Tampered(String),
    /// The content under the digest is intact but is not a usable Lampyr artifact
    /// (format, media types, sizes, Hyperlight or Lampyr ABI version).
    #[error("{0}")]
    Invalid(String),
    /// The controller's own cache or client failed (retried with backoff).
    #[error("{0}")]
    Internal(String),
}

impl ArtifactProblem {
    /// Whether trying again later can succeed without the Revision changing.
    pub fn is_retryable(&self) -> bool {
        match self {
            ArtifactProblem::Unreachable(_) | ArtifactProblem::NotFound(_) | ArtifactProblem::Internal(_) => true,
            // Registry content under a digest can be repaired by its operator.
            ArtifactProblem::Tampered(_) => true,
            ArtifactProblem::Missing { .. } | ArtifactProblem::BadReference { .. } | ArtifactProblem::Invalid(_) => false,
        }
    }

    /// A bounded label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            ArtifactProblem::Missing { .. } => "missing",
            ArtifactProblem::BadReference { .. } => "bad_reference",
            ArtifactProblem::Unreachable(_) => "unreachable",
            ArtifactProblem::NotFound(_) => "not_found",
            ArtifactProblem::Tampered(_) => "tampered",
            ArtifactProblem::Invalid(_) => "invalid",
            ArtifactProblem::Internal(_) => "internal",
        }
    }

    fn from_registry(err: RegistryError) -> Self {
        let text = err.to_string();
        match err {
            // Refused credentials are retried like an unreachable registry: they may be fixed.
            RegistryError::Unreachable { .. }
            | RegistryError::Registry { .. }
            | RegistryError::Interrupted { .. }
            | RegistryError::Unauthorized { .. }
            | RegistryError::Credentials(_) => ArtifactProblem::Unreachable(text),
            RegistryError::NotFound { .. } => ArtifactProblem::NotFound(text),
            RegistryError::DigestMismatch { .. } | RegistryError::SizeMismatch { .. } | RegistryError::Unpacked { .. } => {
                ArtifactProblem::Tampered(text)
            }
            RegistryError::Verify { .. } | RegistryError::TooLarge { .. } | RegistryError::NotAnArtifact { .. } => {
                ArtifactProblem::Invalid(text)
            }
            RegistryError::PlainHttpNotAllowed { .. } | RegistryError::Input(_) | RegistryError::BadTag { .. } => {
                ArtifactProblem::BadReference { value: String::new(), reason: text }
            }
            RegistryError::Client(_) | RegistryError::Cache(_) => ArtifactProblem::Internal(text),
        }
    }
}

/// A digest-pinned registry reference, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PinnedReference {
    /// The parsed reference.
    pub parsed: ArtifactRef,
    /// `registry/repository@sha256:…` without a scheme.
    pub canonical: String,
}

/// Parses `value` as a digest-pinned registry reference (`registry/repo@sha256:…`,
/// optionally spelled with `http://`). Local layout paths and tags are refused.
pub fn parse_pinned(value: &str) -> Result<PinnedReference, ArtifactProblem> {
    let bad = |reason: String| ArtifactProblem::BadReference { value: value.to_string(), reason };
    let value = value.trim();
    if value.is_empty() {
        return Err(bad("it is empty".into()));
    }
    if value.starts_with('/') || value.starts_with('.') {
        return Err(bad("a Revision must name a registry artifact (registry/repository@sha256:…), not a local path".into()));
    }
    match ArtifactRef::parse(value) {
        Ok(parsed @ ArtifactRef::Registry { .. }) => {
            let ArtifactRef::Registry { repository, digest } = &parsed else { unreachable!("matched above") };
            let canonical = format!("{}@{digest}", repository.without_scheme());
            Ok(PinnedReference { parsed, canonical })
        }
        Ok(ArtifactRef::Layout { .. }) => {
            Err(bad("a Revision must name a registry artifact (registry/repository@sha256:…), not a local path".into()))
        }
        Err(err) => Err(bad(err.to_string())),
    }
}

/// Who pulls a Revision's artifact, as a kubelet pulls a Pod's image: in its namespace,
/// with its pull Secrets, then its ServiceAccount's. They are read only when the registry
/// has not given the artifact to anyone already.
pub struct Puller<'a> {
    /// The client reading the Secrets and the ServiceAccount.
    pub client: &'a kube::Client,
    /// The Revision's namespace.
    pub namespace: &'a str,
    /// The Revision's imagePullSecrets, by name.
    pub secrets: &'a [String],
    /// The Revision's serviceAccountName (`default` when `None`).
    pub service_account: Option<&'a str>,
}

/// Pulls and verifies artifacts, remembering verified references and which credentials
/// the registry gave each one (a Revision never uses what only another's credentials may read).
pub struct ArtifactResolver {
    client: RegistryClient,
    plain_http: Vec<String>,
    readers: ProvenReaders,
    cache_dir: PathBuf,
    cache_max_bytes: u64,
    verified: Mutex<HashMap<String, Arc<ResolvedArtifact>>>,
    in_flight: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl ArtifactResolver {
    /// A resolver pulling into the content cache at `cache_dir`, speaking plain
    /// HTTP only to the registries (`host:port`) in `plain_http`.
    pub fn new(cache_dir: impl Into<PathBuf>, plain_http: &[String]) -> Result<Self, RegistryError> {
        Ok(ArtifactResolver {
            client: RegistryClient::new(plain_http.iter().cloned())?,
            plain_http: plain_http.to_vec(),
            readers: ProvenReaders::default(),
            cache_dir: cache_dir.into(),
            cache_max_bytes: lampyr_artifact::evict::DEFAULT_MAX_BYTES,
            verified: Mutex::new(HashMap::new()),
            in_flight: Mutex::new(HashMap::new()),
        })
    }

    /// Bounds each repository's cache to `bytes` (default [`lampyr_artifact::evict::DEFAULT_MAX_BYTES`]).
    pub fn with_cache_limit(mut self, bytes: u64) -> Self {
        self.cache_max_bytes = bytes;
        self
    }

    /// Trusts registries signed by the certificate authorities in `pem` besides the system's.
    pub fn with_registry_ca(mut self, pem: Option<Vec<u8>>) -> Result<Self, RegistryError> {
        let access = RegistryAccess { credentials: Credentials::Anonymous, ca_pem: pem };
        self.client = RegistryClient::with_access(self.plain_http.iter().cloned(), access)?;
        Ok(self)
    }

    /// The verified artifact `value` names, pulled as `puller` may, unless it was verified
    /// before and the registry gave it to anyone or to `puller`'s credentials.
    /// Returns whether a pull happened, for metrics.
    pub async fn resolve(&self, value: &str, puller: &Puller<'_>) -> Result<(Arc<ResolvedArtifact>, bool), ArtifactProblem> {
        let pinned = parse_pinned(value)?;
        let ArtifactRef::Registry { repository, digest } = &pinned.parsed else {
            return Err(ArtifactProblem::Internal(format!("{value:?} is not a registry reference")));
        };
        let found = self.lookup(&pinned.canonical);
        if let Some(found) = found.clone().filter(|_| self.readers.is_public(repository, digest)) {
            return Ok((found, false));
        }
        let client = self.client_for(puller).await?;
        if let Some(found) = found {
            self.check_access(&client, repository, digest).await?;
            return Ok((found, false));
        }
        let gate = {
            let mut in_flight = self.in_flight.lock().unwrap_or_else(PoisonError::into_inner);
            in_flight.entry(pinned.canonical.clone()).or_default().clone()
        };
        let _one_pull = gate.lock().await;
        // Another reconcile may have verified it while this one waited.
        if let Some(found) = self.lookup(&pinned.canonical) {
            self.check_access(&client, repository, digest).await?;
            return Ok((found, false));
        }
        let result = self.pull(value, &pinned, &client).await;
        self.in_flight.lock().unwrap_or_else(PoisonError::into_inner).remove(&pinned.canonical);
        let resolved = Arc::new(result?);
        self.verified.lock().unwrap_or_else(PoisonError::into_inner).insert(pinned.canonical.clone(), resolved.clone());
        Ok((resolved, true))
    }

    /// The content cache of one repository: `<cache_dir>/repositories/<hash of registry/path>`.
    fn cache_for(&self, repository: &Repository) -> Cache {
        let id = sha256_digest(format!("{}/{}", repository.registry, repository.path).as_bytes());
        let hex = id.strip_prefix("sha256:").unwrap_or(&id);
        Cache::new(self.cache_dir.join("repositories").join(&hex[..32]))
    }

    /// A client with `puller`'s credentials (the anonymous one when it has none).
    async fn client_for(&self, puller: &Puller<'_>) -> Result<RegistryClient, ArtifactProblem> {
        let credentials = pull_credentials(puller.client, puller.namespace, puller.secrets, puller.service_account)
            .await
            .map_err(|e| ArtifactProblem::Unreachable(format!("cannot pull with the Revision's registry credentials: {e}")))?;
        self.client.with_credentials(credentials).map_err(ArtifactProblem::from_registry)
    }

    /// Makes sure the registry gives the artifact to `client`'s credentials, asking it
    /// unless it did before.
    async fn check_access(&self, client: &RegistryClient, repository: &Repository, digest: &str) -> Result<(), ArtifactProblem> {
        client.ensure_readable(repository, digest, &self.readers).await.map_err(ArtifactProblem::from_registry)
    }

    fn lookup(&self, canonical: &str) -> Option<Arc<ResolvedArtifact>> {
        self.verified.lock().unwrap_or_else(PoisonError::into_inner).get(canonical).cloned()
    }

    async fn pull(&self, value: &str, pinned: &PinnedReference, client: &RegistryClient) -> Result<ResolvedArtifact, ArtifactProblem> {
        let ArtifactRef::Registry { repository, digest } = &pinned.parsed else {
            return Err(ArtifactProblem::Internal(format!("{value:?} is not a registry reference")));
        };
        let cache = self.cache_for(repository);
        let pulled = client.pull_verified_as_reader(repository, digest, &cache, &self.readers).await;
        let layout = pulled.map(|verified| verified.layout).map_err(|e| match ArtifactProblem::from_registry(e) {
            ArtifactProblem::BadReference { reason, .. } => ArtifactProblem::BadReference { value: value.to_string(), reason },
            other => other,
        })?;
        // `pull` verified the layout; verify again off the async threads for the
        // metadata it does not return (hashing a few hundred KB).
        let (pin, limit) = (digest.clone(), self.cache_max_bytes);
        let verified = tokio::task::spawn_blocking(move || {
            let verified = verify_layout(&layout, Some(&pin));
            // What the controller needs of the artifact is in memory now.
            match cache.prune(limit) {
                Ok(p) if !p.removed.is_empty() => tracing::info!(removed = p.removed.len(), bytes = p.after, "pruned an artifact cache"),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "pruning an artifact cache failed"),
            }
            verified
        })
        .await
        .map_err(|e| ArtifactProblem::Internal(format!("verifying {}: {e}", pinned.canonical)))?
        .map_err(|e| ArtifactProblem::Invalid(format!("artifact {}: {e}", pinned.canonical)))?;
        Ok(ResolvedArtifact {
            reference: pinned.canonical.clone(),
            digest: digest.clone(),
            fiber_memory_bytes: verified.sizes.memory,
            metadata: verified.metadata,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn only_digest_pinned_registry_references_are_accepted() {
        let p = parse_pinned(&format!("127.0.0.1:5000/lampyr/hello@{D}")).unwrap();
        assert_eq!(p.canonical, format!("127.0.0.1:5000/lampyr/hello@{D}"));
        let p = parse_pinned(&format!("http://127.0.0.1:5000/lampyr/hello@{D}")).unwrap();
        assert_eq!(p.canonical, format!("127.0.0.1:5000/lampyr/hello@{D}"), "the scheme is not part of the reference");

        assert!(parse_pinned("  ").unwrap_err().to_string().contains("it is empty"));
        let tag = parse_pinned("ghcr.io/team/app:latest").unwrap_err();
        assert!(tag.to_string().contains("must be pinned by digest"), "{tag}");
        assert!(!tag.is_retryable());
        let local = parse_pinned(&format!("./out@{D}")).unwrap_err();
        assert!(local.to_string().contains("not a local path"), "{local}");
        let short = parse_pinned("ghcr.io/team/app@sha256:abc").unwrap_err();
        assert!(matches!(short, ArtifactProblem::BadReference { .. }), "{short:?}");
    }

    #[test]
    fn problems_say_whether_to_retry() {
        assert!(ArtifactProblem::Unreachable("x".into()).is_retryable());
        assert!(ArtifactProblem::NotFound("x".into()).is_retryable());
        assert!(!ArtifactProblem::Invalid("x".into()).is_retryable());
        let missing = ArtifactProblem::Missing { image: "ko.local/x".into(), map: "lampyr-system/image-artifacts".into() };
        assert!(!missing.is_retryable());
        let text = missing.to_string();
        assert!(
            text.contains(keys::SNAPSHOT_ARTIFACT) && text.contains("\"ko.local/x\"") && text.contains("lampyr-system/image-artifacts"),
            "{text}"
        );
    }
}
