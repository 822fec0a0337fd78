//! The description of one image: reference, entrypoint, user, env and contents.

use std::path::{Component, Path, PathBuf};

use crate::Error;

/// The user and group id of the unprivileged user (`nonroot`, as distroless images name it).
pub const NONROOT: u32 = 65532;

/// Who the image's process runs as; always numeric, so `runAsNonRoot` can check it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum User {
    /// uid 0, gid 0.
    Root,
    /// uid and gid [`NONROOT`].
    NonRoot,
}

impl User {
    /// The image config's `User` value (`uid:gid`).
    pub fn config_value(self) -> String {
        match self {
            User::Root => "0:0".to_string(),
            User::NonRoot => format!("{NONROOT}:{NONROOT}"),
        }
    }
}

/// A binary of the image: copied with debug info stripped, its ELF
/// interpreter and shared libraries added where the loader looks for them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binary {
    /// The built binary on this host.
    pub source: PathBuf,
    /// Its absolute path in the image, e.g. `/usr/local/bin/fiberd`.
    pub path: String,
}

/// Where a file's bytes come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A file on this host, read (symlinks followed) when the image is built.
    Host(PathBuf),
    /// These bytes.
    Bytes(Vec<u8>),
}

/// A plain file of the image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageFile {
    /// Its absolute path in the image.
    pub path: String,
    /// Its contents.
    pub source: Source,
    /// Its permission bits, e.g. `0o644`.
    pub mode: u32,
}

/// An (empty) directory of the image with its own mode; parents of every entry are added as 0755.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Directory {
    /// Its absolute path in the image.
    pub path: String,
    /// Its permission bits, e.g. `0o1777`.
    pub mode: u32,
}

/// One image: everything [`crate::build`] needs besides the creation time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageSpec {
    /// Full reference with a tag, e.g. `ghcr.io/hyperlight-dev/lampyr/fiberd:preview`.
    pub reference: String,
    /// The process to run (absolute path first).
    pub entrypoint: Vec<String>,
    /// Who runs it.
    pub user: User,
    /// Environment, `NAME=value` each.
    pub env: Vec<String>,
    /// Binaries (with their loader and libraries).
    pub binaries: Vec<Binary>,
    /// Other files.
    pub files: Vec<ImageFile>,
    /// Directories with a mode of their own.
    pub directories: Vec<Directory>,
    /// A PEM CA bundle to add as `/etc/ssl/certs/ca-certificates.crt`, for TLS to registries.
    pub ca_bundle: Option<PathBuf>,
}

impl ImageSpec {
    /// The tag of [`ImageSpec::reference`] (after the last `:` of its last path segment).
    pub fn tag(&self) -> Result<&str, Error> {
        tag_of(&self.reference).ok_or_else(|| self.invalid("the reference has no tag (expected REGISTRY/PATH:TAG)"))
    }

    /// Checks what [`crate::build`] relies on: a tagged reference, absolute
    /// normal paths, an entrypoint, `NAME=value` env entries, modes of 12 bits.
    pub fn validate(&self) -> Result<(), Error> {
        self.tag()?;
        if self.reference.contains('@') {
            return Err(self.invalid("the reference must name a tag, not a digest"));
        }
        match self.entrypoint.first() {
            Some(first) if first.starts_with('/') => {}
            _ => return Err(self.invalid("the entrypoint must start with an absolute path")),
        }
        if let Some(bad) = self.env.iter().find(|e| e.split_once('=').is_none_or(|(name, _)| name.is_empty())) {
            return Err(self.invalid(&format!("env entry {bad:?} is not NAME=value")));
        }
        let paths = self.binaries.iter().map(|b| b.path.as_str());
        let paths = paths.chain(self.files.iter().map(|f| f.path.as_str()));
        for path in paths.chain(self.directories.iter().map(|d| d.path.as_str())) {
            relative_path(path).ok_or_else(|| self.invalid(&format!("{path:?} is not an absolute path without `.`/`..`")))?;
        }
        let modes = self.files.iter().map(|f| (f.path.as_str(), f.mode));
        if let Some((path, mode)) = modes.chain(self.directories.iter().map(|d| (d.path.as_str(), d.mode))).find(|(_, m)| *m > 0o7777) {
            return Err(self.invalid(&format!("{path}: mode {mode:o} has more than 12 bits")));
        }
        Ok(())
    }

    pub(crate) fn invalid(&self, reason: &str) -> Error {
        Error::Spec { image: self.reference.clone(), reason: reason.to_string() }
    }
}

/// The tag of `reference`, if it has one.
pub(crate) fn tag_of(reference: &str) -> Option<&str> {
    let name = reference.split('@').next().unwrap_or(reference);
    let last = name.rsplit('/').next().unwrap_or(name);
    last.rsplit_once(':').map(|(_, tag)| tag).filter(|t| !t.is_empty())
}

/// `/a/b` as the layer's `a/b`; `None` unless absolute and made of normal components.
pub(crate) fn relative_path(path: &str) -> Option<String> {
    let path = Path::new(path);
    if !path.is_absolute() {
        return None;
    }
    let mut parts = Vec::new();
    for component in path.components() {
        match component {
            Component::RootDir => {}
            Component::Normal(part) => parts.push(part.to_str()?),
            _ => return None,
        }
    }
    (!parts.is_empty()).then(|| parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ImageSpec {
        ImageSpec {
            reference: "ghcr.io/hyperlight-dev/lampyr/fiberd:preview".into(),
            entrypoint: vec!["/usr/local/bin/fiberd".into()],
            user: User::Root,
            env: vec!["PATH=/usr/local/bin".into()],
            binaries: vec![],
            files: vec![],
            directories: vec![Directory { path: "/tmp".into(), mode: 0o1777 }],
            ca_bundle: None,
        }
    }

    #[test]
    fn tags_come_from_the_last_path_segment() {
        assert_eq!(tag_of("ghcr.io/a/b:preview"), Some("preview"));
        assert_eq!(tag_of("127.0.0.1:5000/a/b:v1.15.2"), Some("v1.15.2"));
        assert_eq!(tag_of("127.0.0.1:5000/a/b"), None);
        assert_eq!(tag_of("gcr.io/knative-releases/knative.dev/serving/cmd/webhook:v1.15.2"), Some("v1.15.2"));
    }

    #[test]
    fn users_are_numeric() {
        assert_eq!(User::Root.config_value(), "0:0");
        assert_eq!(User::NonRoot.config_value(), "65532:65532");
    }

    #[test]
    fn a_valid_spec_passes_and_each_mistake_is_named() {
        spec().validate().expect("valid");
        type Change = fn(&mut ImageSpec);
        let cases: [(Change, &str); 6] = [
            (|s| s.reference = "ghcr.io/a/fiberd".into(), "has no tag"),
            (|s| s.entrypoint = vec!["fiberd".into()], "absolute path"),
            (|s| s.env = vec!["=x".into()], "NAME=value"),
            (|s| s.directories[0].path = "/a/../b".into(), "without `.`/`..`"),
            (|s| s.directories[0].path = "tmp".into(), "without `.`/`..`"),
            (|s| s.directories[0].mode = 0o17777, "more than 12 bits"),
        ];
        for (change, expected) in cases {
            let mut bad = spec();
            change(&mut bad);
            let error = bad.validate().expect_err(expected).to_string();
            assert!(error.contains(expected) && error.contains("fiberd"), "{error}");
        }
    }

    #[test]
    fn image_paths_become_layer_paths() {
        assert_eq!(relative_path("/etc/passwd").as_deref(), Some("etc/passwd"));
        assert_eq!(relative_path("/usr//local/bin/").as_deref(), Some("usr/local/bin"));
        assert_eq!(relative_path("/"), None);
        assert_eq!(relative_path("./x"), None);
    }
}
