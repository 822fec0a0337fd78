//! fiberd's errors: why it cannot start, and why one Home is not loaded
//! (the text of the latter is what its status entry's `message` says).

use std::path::PathBuf;
use std::time::Duration;

use lampyr_artifact::registry::RegistryError;
use lampyr_artifact::seal::SealError;
use lampyr_fiber::runtime::RevisionPoolError;
use lampyr_router::InvokeError;

use crate::config::{FleetKeySource, SecretKeyRef};

/// Why fiberd cannot run at all.
#[derive(Debug, thiserror::Error)]
pub enum FiberdError {
    /// The configuration is unusable.
    #[error("{0}")]
    Config(String),
    /// The listener's address cannot be read.
    #[error("reading the listener's address: {0}")]
    Listener(#[source] std::io::Error),
    /// The registry client cannot be built.
    #[error(transparent)]
    Registry(#[from] RegistryError),
}

/// Why the fleet key could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FleetKeyError {
    /// The Secret or file does not exist.
    #[error("{from} does not exist (`ly deploy` creates the fleet key Secret; grant Pods mount it)")]
    Missing {
        /// Where the key was looked for.
        from: FleetKeySource,
    },
    /// The Secret has no such data key.
    #[error("{secret} has no such key")]
    NoKey {
        /// Where the key was looked for.
        secret: SecretKeyRef,
    },
    /// The key is not text.
    #[error("{from} is not UTF-8 text")]
    NotText {
        /// Where the key was looked for.
        from: FleetKeySource,
    },
    /// The key does not parse.
    #[error("{from}: {source}")]
    Invalid {
        /// Where the key was looked for.
        from: FleetKeySource,
        /// The parser's complaint.
        source: SealError,
    },
    /// The API server did not answer.
    #[error("reading {secret}: {source}")]
    Api {
        /// Where the key was looked for.
        secret: SecretKeyRef,
        /// The client's error.
        source: Box<kube::Error>,
    },
    /// The file could not be read.
    #[error("reading {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// Why a Home is not loaded. Its text becomes the status entry's `message`.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A reference in the Home's spec is not a digest-pinned registry reference.
    #[error("{field} {reference:?} is not a registry reference pinned by digest: {reason}")]
    BadReference {
        /// `spec.artifact` or `spec.sealedTemplate`.
        field: &'static str,
        /// The reference.
        reference: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The artifact or sealed template could not be pulled or does not verify.
    #[error("pulling {reference}: {source}")]
    Pull {
        /// What was pulled.
        reference: String,
        /// Why it failed.
        source: Box<RegistryError>,
    },
    /// The Home's pull Secrets or ServiceAccount cannot be read or used (retried with backoff).
    #[error("registry credentials: {0}")]
    PullCredentials(#[source] lampyr_process::pull_secrets::PullCredentialsError),
    /// An environment reference (ConfigMap or Secret) cannot be resolved (retried with backoff).
    #[error("environment: {0}")]
    Env(String),
    /// The artifact cache failed (leasing the artifact).
    #[error("artifact cache: {0}")]
    Cache(#[from] lampyr_artifact::cache::CacheError),
    /// The fleet key is unusable.
    #[error("fleet key: {0}")]
    FleetKey(#[from] FleetKeyError),
    /// The sealed template seals another artifact than the Home pins.
    #[error("sealed template {template} seals artifact {sealed}, but spec.artifact pins {artifact}")]
    TemplateMismatch {
        /// The sealed template reference.
        template: String,
        /// The artifact it seals.
        sealed: String,
        /// The artifact the Home pins.
        artifact: String,
    },
    /// The sealed template's repository is not one grant Pods may pull from.
    #[error(
        "sealed template {template} is not in the installation's zygoteRegistries ({allowed}); \
         deploy with `ly deploy`, which pushes to the installation's template repository, or add its repository to the GrantPolicy"
    )]
    TemplateNotAllowed {
        /// The sealed template reference.
        template: String,
        /// The admitted repositories.
        allowed: String,
    },
    /// The sealed template does not open or its artifact does not verify.
    #[error("opening sealed template {template}: {source}")]
    Unseal {
        /// The sealed template reference.
        template: String,
        /// Why.
        source: Box<SealError>,
    },
    /// The verified artifact could not become a pool (memory, snapshot, environment).
    #[error("loading artifact {artifact} into fibers: {source}")]
    Pool {
        /// The artifact digest.
        artifact: String,
        /// Why.
        source: Box<RevisionPoolError>,
    },
    /// The template failed its readiness probe (retried with backoff).
    #[error(transparent)]
    NotReady(#[from] lampyr_fiber::runtime::NotReady),
    /// The first fibers (`initial-scale`) could not be started.
    #[error("starting the first fibers: {0}")]
    Start(#[source] InvokeError),
    /// This instance holds no share of the Home's `max-scale`.
    #[error(transparent)]
    NoShare(#[from] crate::share::NoShare),
    /// The load took longer than allowed.
    #[error("loading did not finish within {0:?} (is the registry slow or unreachable?)")]
    Timeout(Duration),
    /// The load's task ended without an answer.
    #[error("the load stopped without an answer: {0}")]
    Task(String),
}
