//! Artifact references: a digest-pinned registry reference
//! (`[http://]registry/repo@sha256:…`) or a local OCI layout (`PATH[@sha256:…]`).

use std::fmt;
use std::path::{Path, PathBuf};

use super::ArtifactError;
use super::layout::digest_hex;

/// A registry repository: `registry[:port]/path`, optionally over plain HTTP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Repository {
    /// Registry host and optional port, e.g. `127.0.0.1:5000`.
    pub registry: String,
    /// Repository path inside the registry, e.g. `lampyr/hello`.
    pub path: String,
    /// True when the reference was spelled with `http://`.
    pub plain_http: bool,
}

/// Where an artifact is and which one it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ArtifactRef {
    /// An artifact in a registry, pinned by the digest of its index.
    Registry {
        /// Repository holding it.
        repository: Repository,
        /// `sha256:…` of the artifact index.
        digest: String,
    },
    /// An artifact in an OCI image layout on disk.
    Layout {
        /// Layout directory.
        path: PathBuf,
        /// Pinned digest; without one the layout's `lampyr` tag is used.
        digest: Option<String>,
    },
}

impl Repository {
    /// Parses `[http://|https://]registry/path`; the path is lowercase and untagged.
    pub fn parse(text: &str) -> Result<Self, ArtifactError> {
        let bad = |reason: &str| ArtifactError::BadReference { reference: text.to_string(), reason: reason.to_string() };
        let (rest, plain_http) = match text.strip_prefix("http://") {
            Some(rest) => (rest, true),
            None => (text.strip_prefix("https://").unwrap_or(text), false),
        };
        let (registry, path) = rest.split_once('/').ok_or_else(|| bad("expected registry/repository"))?;
        if registry.is_empty() || !(registry.contains('.') || registry.contains(':') || registry == "localhost") {
            return Err(bad("the registry must be localhost or contain a dot or a port"));
        }
        let valid = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-/".contains(c);
        if path.is_empty() || !path.chars().all(valid) || path.starts_with('/') || path.ends_with('/') {
            return Err(bad("the repository path must be lowercase [a-z0-9._-/] without a tag or digest"));
        }
        Ok(Repository { registry: registry.to_string(), path: path.to_string(), plain_http })
    }

    /// `registry/path`, without a scheme: how references in Kubernetes objects spell it
    /// (plain HTTP is each component's configuration there, not part of the name).
    pub fn without_scheme(&self) -> String {
        format!("{}/{}", self.registry, self.path)
    }

    /// Whether `other` is this repository or below it in the same registry
    /// (`r.example.com/t` contains `r.example.com/t/fiberd`, not `r.example.com/tx`);
    /// the scheme is how a registry is reached, not which one it is, and is not compared.
    pub fn contains(&self, other: &Repository) -> bool {
        self.registry == other.registry
            && (other.path == self.path || other.path.strip_prefix(&self.path).is_some_and(|rest| rest.starts_with('/')))
    }
}

/// The registries of the plain-HTTP repositories among `repositories`, each once, in order.
pub fn plain_http_registries<'a>(repositories: impl IntoIterator<Item = &'a Repository>) -> Vec<String> {
    let mut registries: Vec<String> = Vec::new();
    for repository in repositories.into_iter().filter(|r| r.plain_http) {
        if !registries.contains(&repository.registry) {
            registries.push(repository.registry.clone());
        }
    }
    registries
}

impl fmt::Display for Repository {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.plain_http { "http://" } else { "" };
        write!(f, "{scheme}{}/{}", self.registry, self.path)
    }
}

impl ArtifactRef {
    /// Parses a reference. An existing directory (optionally `@sha256:…`) is a
    /// layout; anything else must be a digest-pinned registry reference.
    pub fn parse(text: &str) -> Result<Self, ArtifactError> {
        let (base, digest) = match text.rsplit_once('@') {
            Some((base, digest)) => (base, Some(digest)),
            None => (text, None),
        };
        if let Some(d) = digest {
            digest_hex(d)?;
        }
        let looks_local = base.starts_with('/') || base.starts_with("./") || base.starts_with("../");
        if looks_local || Path::new(base).is_dir() {
            return Ok(ArtifactRef::Layout { path: PathBuf::from(base), digest: digest.map(String::from) });
        }
        let digest = digest.ok_or_else(|| ArtifactError::BadReference {
            reference: text.to_string(),
            reason: "a registry reference must be pinned by digest (repo@sha256:…), or name an existing layout directory".to_string(),
        })?;
        if base.rsplit('/').next().is_some_and(|last| last.contains(':')) && !base.contains("://") {
            return Err(ArtifactError::BadReference {
                reference: text.to_string(),
                reason: "give a digest, not a tag and a digest".to_string(),
            });
        }
        Ok(ArtifactRef::Registry { repository: Repository::parse(base)?, digest: digest.to_string() })
    }

    /// The pinned digest, if the reference has one.
    pub fn digest(&self) -> Option<&str> {
        match self {
            ArtifactRef::Registry { digest, .. } => Some(digest),
            ArtifactRef::Layout { digest, .. } => digest.as_deref(),
        }
    }
}

impl fmt::Display for ArtifactRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArtifactRef::Registry { repository, digest } => write!(f, "{repository}@{digest}"),
            ArtifactRef::Layout { path, digest: Some(d) } => write!(f, "{}@{d}", path.display()),
            ArtifactRef::Layout { path, digest: None } => write!(f, "{}", path.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn registry_references_must_be_pinned() {
        let r = ArtifactRef::parse(&format!("127.0.0.1:5000/lampyr/hello@{D}")).expect("parses");
        assert_eq!(
            r,
            ArtifactRef::Registry {
                repository: Repository { registry: "127.0.0.1:5000".into(), path: "lampyr/hello".into(), plain_http: false },
                digest: D.into()
            }
        );
        assert!(ArtifactRef::parse("ghcr.io/team/app:latest").is_err());
        assert!(ArtifactRef::parse("ghcr.io/team/app@sha256:abc").is_err());
        assert!(ArtifactRef::parse(&format!("ghcr.io/team/App@{D}")).is_err());
        assert!(ArtifactRef::parse(&format!("ghcr.io/team/app:v1@{D}")).is_err());
        assert!(ArtifactRef::parse(&format!("nodot/app@{D}")).is_err());
    }

    #[test]
    fn plain_http_is_spelled_with_a_scheme() {
        let r = ArtifactRef::parse(&format!("http://localhost:5002/t@{D}")).expect("parses");
        let ArtifactRef::Registry { repository, .. } = &r else { panic!("registry ref expected") };
        assert!(repository.plain_http);
        assert_eq!(r.to_string(), format!("http://localhost:5002/t@{D}"));
    }

    #[test]
    fn paths_are_layouts() {
        let r = ArtifactRef::parse(&format!("./out@{D}")).expect("parses");
        assert_eq!(r, ArtifactRef::Layout { path: "./out".into(), digest: Some(D.into()) });
        let dir = tempfile::tempdir().expect("tempdir");
        let r = ArtifactRef::parse(dir.path().to_str().expect("utf-8")).expect("parses");
        assert_eq!(r.digest(), None);
    }
}
