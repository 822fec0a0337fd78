//! Lampyr's bootstrap manifests, in one place for everything that installs
//! Knative the way Lampyr composes it.
//!
//! - [`KnativeModules`] finds the Knative Go modules `knative/go.mod` pins, in
//!   Go's module cache (downloading them when they are missing).
//! - [`eventing`] reads Knative Eventing's the same way, for `ly cluster install --eventing`.
//! - [`gateway`] reads the Gateway API networking layer's (net-gateway-api, Contour).
//! - [`cert_manager`] reads cert-manager's release manifest (Serving's `third_party/`).
//! - [`knative`] reads their `config/` manifests, resolves `ko://` image
//!   references to the Knative release images, and [`filter`] removes the stock
//!   controller, activator and autoscaler (Lampyr runs its own controllers).
//! - [`bundle`] renders the files of a Workspace's `k8s/` directory: those
//!   manifests plus Lampyr's own from the repository's `config/`.
//!
//! `ly`'s build script embeds the bundle (so `ly scaffold workspace` needs no
//! Go at run time); `lampyr-testenv` installs the same filtered manifests into
//! its test cluster. Nothing upstream is copied into the repository.

mod bundle;
pub mod cert_manager;
mod document;
pub mod eventing;
pub mod filter;
pub mod gateway;
pub mod knative;
mod modules;

pub use bundle::{BundleFile, bundle, cert_manager_files, eventing_files, gateway_files};
pub use document::{Document, parse, read};
pub use filter::{Filtered, Removed, is_workload};
pub use knative::LAMPYR_KNATIVE_CONTROLLER_ACCOUNT;
pub use modules::{KnativeModules, Module};

use std::path::PathBuf;

/// Why the manifests could not be produced; each message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `go` is not installed or not on `PATH`.
    #[error(
        "could not run `go {args}` ({source}); install Go and put it on PATH: the pinned Knative modules are read from Go's module cache"
    )]
    GoMissing {
        /// The arguments.
        args: String,
        /// Why it could not start.
        source: std::io::Error,
    },
    /// `go` ran and failed.
    #[error(
        "`go {args}` in {} failed: {stderr}\n(the pinned Knative modules come from the Go module proxy: check the network and GOPROXY, then run `go -C {} mod download`)",
        dir.display(),
        dir.display()
    )]
    GoFailed {
        /// The arguments.
        args: String,
        /// Where it ran.
        dir: PathBuf,
        /// What it said.
        stderr: String,
    },
    /// A pinned module is still not in the module cache after downloading it.
    #[error("module {module} is not in Go's module cache; run `go -C {} mod download {module}`", dir.display())]
    ModuleMissing {
        /// The module path.
        module: String,
        /// The Go module that pins it.
        dir: PathBuf,
    },
    /// A manifest file could not be read.
    #[error("reading {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A manifest is not valid YAML.
    #[error("{origin}: not valid YAML: {error}")]
    Yaml {
        /// The file it came from.
        origin: String,
        /// The parser's message.
        error: serde_yaml::Error,
    },
    /// A document is not a Kubernetes object.
    #[error("{origin}: document {index} is not a Kubernetes object: {what}")]
    NotAnObject {
        /// The file it came from.
        origin: String,
        /// Its position in the file, from 1.
        index: usize,
        /// What is missing.
        what: String,
    },
    /// The serving (or eventing) module's version does not map to a Knative release.
    #[error(
        "cannot tell the Knative release of {module} {version} (expected v0.N.P with N >= 27, Knative 1.(N-27).P); pin a released {module} in knative/go.mod"
    )]
    Version {
        /// The module path.
        module: String,
        /// Its pinned version.
        version: String,
    },
    /// The manifests are not what Lampyr's composition needs.
    #[error("{0}")]
    Inconsistent(String),
}
