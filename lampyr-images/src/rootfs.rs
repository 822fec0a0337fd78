//! An image's file tree: the minimal base every image gets (users, groups,
//! name service order, `/tmp`), the binaries stripped of debug info with their
//! loader and libraries, the CA bundle, and the spec's own files and directories.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::layer::Tree;
use crate::spec::{ImageSpec, Source, relative_path};
use crate::{Error, elf};

/// `/etc/passwd`: root and nonroot (65532), no login shells (there is no shell).
pub const PASSWD: &str = "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n";
/// `/etc/group`: root and nonroot (65532).
pub const GROUP: &str = "root:x:0:\nnonroot:x:65532:\n";
/// `/etc/nsswitch.conf`: `/etc/hosts` before DNS (glibc's default without the
/// file is DNS first), so a Pod's `hostAliases` work.
pub const NSSWITCH: &str = "passwd: files\ngroup: files\nhosts: files dns\n";
/// Where TLS clients (rustls-native-certs, Go's crypto/x509) look for CA certificates.
pub const CA_BUNDLE_PATH: &str = "/etc/ssl/certs/ca-certificates.crt";

/// The tree of `spec`; stripped binaries are written to `scratch`, which must
/// outlive the tree (it refers to them).
pub(crate) fn tree(spec: &ImageSpec, scratch: &Path) -> Result<Tree, Error> {
    spec.validate()?;
    let conflict = |reason: String| spec.invalid(&reason);
    let mut tree = Tree::default();
    for (path, text) in [("etc/passwd", PASSWD), ("etc/group", GROUP), ("etc/nsswitch.conf", NSSWITCH)] {
        tree.add_file(path, Source::Bytes(text.as_bytes().to_vec()), 0o644).map_err(conflict)?;
    }
    tree.add_directory("tmp", 0o1777).map_err(conflict)?;
    for (index, binary) in spec.binaries.iter().enumerate() {
        let stripped = strip_debug(&binary.source, &scratch.join(format!("{index}.bin")))?;
        tree.add_file(&layer_path(spec, &binary.path)?, Source::Host(stripped), 0o755).map_err(conflict)?;
        for needed in elf::needed_files(&binary.source)? {
            let path = layer_path(spec, &needed.to_string_lossy())?;
            tree.add_file(&path, Source::Host(needed), 0o755).map_err(conflict)?;
        }
    }
    if let Some(bundle) = &spec.ca_bundle {
        tree.add_file(&layer_path(spec, CA_BUNDLE_PATH)?, Source::Host(bundle.clone()), 0o644).map_err(conflict)?;
    }
    for file in &spec.files {
        tree.add_file(&layer_path(spec, &file.path)?, file.source.clone(), file.mode).map_err(conflict)?;
    }
    for directory in &spec.directories {
        tree.add_directory(&layer_path(spec, &directory.path)?, directory.mode).map_err(conflict)?;
    }
    Ok(tree)
}

fn layer_path(spec: &ImageSpec, path: &str) -> Result<String, Error> {
    relative_path(path).ok_or_else(|| spec.invalid(&format!("{path:?} is not an absolute path without `.`/`..`")))
}

/// `objcopy --strip-debug source out`: the binary without DWARF (smaller, and
/// free of the build's paths), symbols kept for backtraces.
fn strip_debug(source: &Path, out: &Path) -> Result<PathBuf, Error> {
    std::fs::metadata(source).map_err(Error::read(source))?;
    let output = Command::new("objcopy").arg("--strip-debug").arg(source).arg(out).output().map_err(|source| Error::Spawn {
        program: "objcopy".into(),
        source,
        hint: "install Debian's binutils",
    })?;
    if !output.status.success() {
        return Err(Error::CommandFailed {
            command: format!("objcopy --strip-debug {} {}", source.display(), out.display()),
            status: output.status.to_string(),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        });
    }
    Ok(out.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer::Kind;
    use crate::spec::{Binary, Directory, User};

    fn spec(binary: &Path) -> ImageSpec {
        ImageSpec {
            reference: "example.com/test/ls:1".into(),
            entrypoint: vec!["/usr/local/bin/ls".into()],
            user: User::NonRoot,
            env: vec![],
            binaries: vec![Binary { source: binary.to_path_buf(), path: "/usr/local/bin/ls".into() }],
            files: vec![],
            directories: vec![Directory { path: "/var/run/ko".into(), mode: 0o755 }],
            ca_bundle: None,
        }
    }

    #[test]
    fn the_base_users_name_root_and_nonroot_numerically() {
        assert!(PASSWD.lines().any(|l| l.starts_with("nonroot:x:65532:65532:")));
        assert!(PASSWD.lines().any(|l| l.starts_with("root:x:0:0:")));
        assert!(GROUP.lines().any(|l| l == "nonroot:x:65532:"));
    }

    #[test]
    fn a_dynamic_binary_brings_its_loader_and_libraries_at_their_paths() {
        let scratch = tempfile::tempdir().expect("tempdir");
        let tree = tree(&spec(Path::new("/bin/ls")), scratch.path()).expect("tree");
        let paths: Vec<&str> = tree.entries().map(|(p, _)| p.as_str()).collect();
        for expected in ["etc/passwd", "etc/group", "etc/nsswitch.conf", "tmp", "usr/local/bin/ls", "var/run/ko"] {
            assert!(paths.contains(&expected), "{expected} in {paths:?}");
        }
        for needed in elf::needed_files(Path::new("/bin/ls")).expect("ldd") {
            let path = needed.to_string_lossy();
            assert!(paths.contains(&&path[1..]), "{path} in {paths:?}");
        }
        let (_, tmp) = tree.entries().find(|(p, _)| *p == "tmp").expect("tmp");
        assert_eq!((tmp.kind.clone(), tmp.mode), (Kind::Directory, 0o1777));
    }

    #[test]
    fn a_missing_binary_is_an_error_naming_it() {
        let scratch = tempfile::tempdir().expect("tempdir");
        let error = tree(&spec(Path::new("/nonexistent/fiberd")), scratch.path()).expect_err("missing").to_string();
        assert!(error.contains("/nonexistent/fiberd"), "{error}");
    }
}
