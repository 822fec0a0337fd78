//! Snapshot artifacts of the example guests, built once per test process and
//! pushed to a [`TestRegistry`], plainly or sealed to a fleet key.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use lampyr_artifact::reference::Repository;
use lampyr_artifact::registry::RegistryClient;
use lampyr_artifact::seal::{FleetKey, seal_artifact};
use lampyr_artifact::structure::Form;
use lampyr_fiber::build::{BuildOptions, build_artifact};

use crate::guests::{conformance_guest_elf, example_elf, test_guest_elf};
use crate::registry::TestRegistry;

/// Prefix of each test process's artifact directory; the pid follows.
const DIR_PREFIX: &str = "lampyr-testenv-artifacts-";

/// Removes the artifact directories of test processes that have exited.
fn remove_stale_artifact_dirs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix(DIR_PREFIX)) else { continue };
        if !std::path::Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// A built artifact: its OCI layout directory and its index digest.
#[derive(Clone, Debug)]
pub struct Artifact {
    /// The OCI image layout holding it.
    pub layout: PathBuf,
    /// Its index digest (`sha256:…`), the pin.
    pub digest: String,
}

/// The artifact of example `name` (`examples/<name>`) with bodies of up to
/// `max_body` bytes, built once per process (a second call returns the same one).
pub fn example_artifact(name: &str, max_body: u64) -> Artifact {
    cached_artifact(name, max_body, || example_elf(name))
}

/// The artifact of test guest `name` (`examples/testing`: `spin`, `panic`, …),
/// built once per process like [`example_artifact`].
pub fn test_guest_artifact(name: &str, max_body: u64) -> Artifact {
    cached_artifact(&format!("testing-{name}"), max_body, || test_guest_elf(name))
}

/// The artifact of conformance guest `name` (`examples/conformance`), built once per
/// process like [`example_artifact`].
pub fn conformance_artifact(name: &str, max_body: u64) -> Artifact {
    cached_artifact(&format!("conformance-{name}"), max_body, || conformance_guest_elf(name))
}

/// The artifact `key` of the guest `elf` returns, built on first use.
fn cached_artifact(key: &str, max_body: u64, elf: impl FnOnce() -> PathBuf) -> Artifact {
    static BUILT: OnceLock<Mutex<HashMap<(String, u64), Artifact>>> = OnceLock::new();
    let mut built = BUILT
        .get_or_init(|| {
            remove_stale_artifact_dirs();
            Mutex::default()
        })
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    built
        .entry((key.to_string(), max_body))
        .or_insert_with(|| {
            let root = std::env::temp_dir().join(format!("{DIR_PREFIX}{}", std::process::id()));
            let layout = root.join(format!("{key}-{max_body}"));
            let _ = std::fs::remove_dir_all(&layout);
            let opts = BuildOptions { max_body, heap_size: None };
            let artifact = build_artifact(&elf(), &layout, &opts).unwrap_or_else(|e| panic!("building {key}'s artifact: {e}"));
            Artifact { layout, digest: artifact.digest }
        })
        .clone()
}

/// `artifact` in the form artifacts had before compressed transport (Hyperlight's
/// manifest listed itself, every layer uncompressed), written from the same snapshot
/// into a copy of its layout at `out`.
pub fn plain_form(artifact: &Artifact, out: &Path) -> Artifact {
    copy_dir(&artifact.layout, out);
    let verified = lampyr_artifact::verify_layout(&artifact.layout, Some(&artifact.digest)).expect("the artifact verifies");
    let elf = std::fs::read(&verified.guest_elf).expect("the guest ELF reads");
    let digest = lampyr_artifact::pack::write_artifact(out, &verified.snapshot_manifest, &elf, Form::Plain).expect("the plain form writes");
    Artifact { layout: out.to_path_buf(), digest }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read dir").flatten() {
        let dest = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &dest);
        } else {
            std::fs::copy(entry.path(), &dest).expect("copy");
        }
    }
}

/// Pushes `artifact` to `registry` at repository `path`; returns its digest-pinned
/// reference (`127.0.0.1:PORT/path@sha256:…`).
pub async fn push_artifact(registry: &TestRegistry, path: &str, artifact: &Artifact) -> String {
    let repo = Repository::parse(&format!("{}/{path}", registry.host())).expect("a repository");
    let client = RegistryClient::new([registry.host()]).expect("a registry client");
    client
        .push(&artifact.layout, &artifact.digest, &repo, None)
        .await
        .unwrap_or_else(|e| panic!("pushing {} to {}: {e}", artifact.digest, repo))
        .to_string()
}

/// Seals `artifact` to `key` and pushes the template (not the artifact) to
/// `registry` at `path`; returns the template's digest-pinned reference.
pub async fn push_sealed(registry: &TestRegistry, path: &str, artifact: &Artifact, key: &FleetKey) -> String {
    let dir = tempfile::tempdir().expect("a temp dir");
    let sealed = seal_artifact(&artifact.layout, &artifact.digest, &key.public(), &dir.path().join("template.age"))
        .unwrap_or_else(|e| panic!("sealing {}: {e}", artifact.digest));
    let repo = Repository::parse(&format!("{}/{path}", registry.host())).expect("a repository");
    let client = RegistryClient::new([registry.host()]).expect("a registry client");
    client.push_template(&sealed, &repo, None).await.unwrap_or_else(|e| panic!("pushing the template: {e}")).to_string()
}
