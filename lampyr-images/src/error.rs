//! What can go wrong building, moving or importing an image; each message says what to do.

use std::path::PathBuf;

/// Why an image could not be built, pushed or imported.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be read.
    #[error("reading {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file could not be written.
    #[error("writing {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A component's binary has not been built.
    #[error(
        "image {image}: binary {binary} is missing at {} (build it with `{build}`)",
        path.display()
    )]
    MissingBinary {
        /// The image's reference.
        image: String,
        /// The binary's name.
        binary: String,
        /// Where it was looked for.
        path: PathBuf,
        /// The command that builds it.
        build: String,
    },
    /// A helper program could not be started.
    #[error("cannot run {program}: {source} ({hint})")]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        source: std::io::Error,
        /// What to install.
        hint: &'static str,
    },
    /// A helper program ran and failed.
    #[error("`{command}` failed ({status}): {stderr}")]
    CommandFailed {
        /// The command line.
        command: String,
        /// Its exit status.
        status: String,
        /// What it said on stderr.
        stderr: String,
    },
    /// The dynamic loader cannot resolve a library a binary needs.
    #[error(
        "{}: the dynamic loader cannot find {library} on this host (ldd: {line:?}); install the package providing it",
        binary.display()
    )]
    LibraryNotFound {
        /// The binary.
        binary: PathBuf,
        /// The library's name.
        library: String,
        /// ldd's line.
        line: String,
    },
    /// ldd printed a line this crate cannot read.
    #[error("{}: cannot read ldd's line {line:?} (expected `name => /path (0x…)` or `/path (0x…)`)", binary.display())]
    LddOutput {
        /// The binary.
        binary: PathBuf,
        /// The line.
        line: String,
    },
    /// The image description is not usable.
    #[error("image {image}: {reason}")]
    Spec {
        /// The image's reference.
        image: String,
        /// What is wrong.
        reason: String,
    },
    /// An image layout or archive is not one this crate wrote.
    #[error("{}: not a single-image OCI layout written by lampyr-images: {reason}", path.display())]
    Layout {
        /// The layout directory or archive.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// An OCI document could not be built or serialised.
    #[error("building the {what} of image {image}: {reason}")]
    Document {
        /// The image's reference.
        image: String,
        /// Which document.
        what: &'static str,
        /// Why.
        reason: String,
    },
    /// The registry refused or did not answer.
    #[error("pushing {reference}: {action} failed: {source} (is the registry running? for a plain-HTTP registry pass plain HTTP)")]
    Registry {
        /// The reference pushed to.
        reference: String,
        /// What was being done.
        action: String,
        /// The registry client's error.
        source: Box<oci_client::errors::OciDistributionError>,
    },
    /// containerd does not list the imported image as expected.
    #[error("after importing {}: {reason}", archive.display())]
    NotImported {
        /// The archive imported.
        archive: PathBuf,
        /// What containerd lists instead of what was expected.
        reason: String,
    },
    /// The Knative manifests could not be read to name the upstream webhook's image.
    #[error("naming the Knative webhook image from the Workspace manifests: {0}")]
    Manifests(#[from] lampyr_manifests::Error),
}

impl Error {
    /// A [`Error::Read`] for `path`.
    pub(crate) fn read(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::Read { path, source }
    }

    /// A [`Error::Write`] for `path`.
    pub(crate) fn write(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::Write { path, source }
    }
}
