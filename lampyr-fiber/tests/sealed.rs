//! Sealed fiberd templates through a real registry: sealed to a fleet key,
//! pushed as one OCI manifest, pulled by digest, opened into the cache and
//! verified; a wrong key, a tampered layer and a mismatched artifact are refused.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use lampyr_artifact::ArtifactRef;
use lampyr_artifact::cache::Cache;
use lampyr_artifact::reference::Repository;
use lampyr_artifact::registry::{RegistryClient, RegistryError};
use lampyr_artifact::seal::{FleetKey, SealError, open_artifact, seal_artifact};
use lampyr_fiber::build::{BuildOptions, build_artifact};
use lampyr_testenv::{TestRegistry, example_elf, require_kvm};

/// The hello artifact, built once per test process: (layout, digest).
fn hello() -> &'static (PathBuf, String) {
    static BUILT: OnceLock<(PathBuf, String)> = OnceLock::new();
    BUILT.get_or_init(|| {
        require_kvm();
        let layout = Path::new(env!("CARGO_TARGET_TMPDIR")).join("sealed-hello");
        let _ = fs::remove_dir_all(&layout);
        let built = build_artifact(&example_elf("hello"), &layout, &BuildOptions::default()).expect("hello builds");
        (layout, built.digest)
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn sealed_template_round_trips_and_opens_only_with_its_key() {
    let (layout, digest) = hello();
    let tmp = tempfile::tempdir().expect("tempdir");
    let key = FleetKey::generate();
    let sealed = seal_artifact(layout, digest, &key.public(), &tmp.path().join("hello.age")).expect("seals");
    assert_eq!(&sealed.artifact, digest);
    let plain = fs::read(layout.join("blobs/sha256").join(&digest["sha256:".len()..])).expect("index blob");
    let sealed_bytes = fs::read(&sealed.path).expect("sealed file");
    assert!(!sealed_bytes.windows(plain.len()).any(|w| w == plain), "the artifact index is not in the clear");

    let registry = TestRegistry::start();
    let repo = Repository::parse(&format!("{}/lampyr/templates", registry.host())).expect("repo");
    let client = RegistryClient::new([registry.host()]).expect("client");
    let pushed = client.push_template(&sealed, &repo, Some("hello")).await.expect("push");
    let ArtifactRef::Registry { digest: template, .. } = &pushed else { panic!("registry reference expected") };

    let cache_dir = tempfile::tempdir().expect("tempdir");
    let cache = Cache::new(cache_dir.path());
    let pulled = client.pull_template(&repo, template, &cache).await.expect("pull");
    assert_eq!(&pulled.artifact, digest, "the manifest names the sealed artifact");

    let wrong = FleetKey::generate();
    let err = open_artifact(&pulled.sealed, &wrong, digest, &cache).expect_err("another key");
    eprintln!("wrong key: {err}");
    assert!(matches!(err, SealError::Open(_)), "{err:?}");
    assert!(!cache.layout_path(digest).expect("path").exists(), "nothing opened");

    let other = format!("sha256:{}", "1".repeat(64));
    let err = open_artifact(&pulled.sealed, &key, &other, &cache).expect_err("another artifact");
    assert!(matches!(&err, SealError::WrongArtifact { found, .. } if found == digest), "{err:?}");

    let opened = open_artifact(&pulled.sealed, &key, digest, &cache).expect("opens");
    assert_eq!(&opened.digest, digest);
    assert!(opened.layout.starts_with(cache.root()), "opened into the cache");

    // A tampered sealed layer in the registry never reaches the cache.
    let fresh_dir = tempfile::tempdir().expect("tempdir");
    let fresh = Cache::new(fresh_dir.path());
    let data = registry.blob_data_path(&sealed.digest);
    let mut bytes = fs::read(&data).expect("registry blob");
    let at = bytes.len() / 2;
    bytes[at] ^= 0xff;
    fs::write(&data, &bytes).expect("tamper");
    let err = client.pull_template(&repo, template, &fresh).await.expect_err("tampered");
    eprintln!("tampered: {err}");
    assert!(matches!(err, RegistryError::DigestMismatch { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_artifact_is_not_a_template() {
    let (layout, digest) = hello();
    let registry = TestRegistry::start();
    let repo = Repository::parse(&format!("{}/lampyr/hello", registry.host())).expect("repo");
    let client = RegistryClient::new([registry.host()]).expect("client");
    client.push(layout, digest, &repo, None).await.expect("push");
    let cache_dir = tempfile::tempdir().expect("tempdir");
    let err = client.pull_template(&repo, digest, &Cache::new(cache_dir.path())).await.expect_err("an index");
    eprintln!("not a template: {err}");
    assert!(matches!(err, RegistryError::NotFound { .. } | RegistryError::NotAnArtifact { .. }), "{err:?}");
}
