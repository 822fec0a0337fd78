//! A private registry: Debian's `docker-registry` serving HTTPS with a certificate of the
//! test's own CA and letting in one htpasswd user. Pushes and pulls go through with the
//! user's credentials (a Docker config's `auths`) and the CA; a wrong password, no
//! credentials, or no CA are refused with a clear error, and nothing lands.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use lampyr_artifact::cache::Cache;
use lampyr_artifact::credentials::Credentials;
use lampyr_artifact::reference::Repository;
use lampyr_artifact::registry::{RegistryAccess, RegistryClient, RegistryError};
use lampyr_fiber::build::{BuildOptions, build_artifact};
use lampyr_testenv::{TestRegistry, example_elf, require_kvm};

const USER: &str = "lampyr";
const PASSWORD: &str = "s3cret-Pa55";

/// The hello artifact, built once per test process: (layout, digest).
fn hello() -> &'static (PathBuf, String) {
    static BUILT: OnceLock<(PathBuf, String)> = OnceLock::new();
    BUILT.get_or_init(|| {
        require_kvm();
        let layout = Path::new(env!("CARGO_TARGET_TMPDIR")).join("private-registry-hello");
        let _ = std::fs::remove_dir_all(&layout);
        let built = build_artifact(&example_elf("hello"), &layout, &BuildOptions::default()).expect("hello builds");
        (layout, built.digest)
    })
}

/// A Docker config logging `user` in to `registry` with `password`.
fn docker_config(registry: &str, user: &str, password: &str) -> Credentials {
    Credentials::ConfigJson(Arc::new(lampyr_testenv::registry::docker_config(registry, user, password)))
}

fn client(credentials: Credentials, ca: Option<&str>) -> RegistryClient {
    let access = RegistryAccess { credentials, ca_pem: ca.map(|pem| pem.as_bytes().to_vec()) };
    RegistryClient::with_access(std::iter::empty::<String>(), access).expect("a client")
}

#[tokio::test(flavor = "multi_thread")]
async fn the_users_credentials_and_ca_push_and_pull_and_anything_less_is_refused_clearly() {
    let (layout, digest) = hello();
    let (registry, ca) = TestRegistry::start_private(USER, PASSWORD);
    let repo = Repository::parse(&format!("{}/team/hello", registry.host())).expect("an HTTPS repository");

    let wrong = client(docker_config(&registry.host(), USER, "not-the-password"), Some(&ca));
    let err = wrong.push(layout, digest, &repo, Some("v1")).await.expect_err("a wrong password is refused");
    assert!(matches!(err, RegistryError::Unauthorized { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains(&registry.host()) && message.contains("docker login"), "says where and what to do: {message}");
    let anonymous = client(Credentials::Anonymous, Some(&ca));
    let err = anonymous.push(layout, digest, &repo, None).await.expect_err("no credentials are refused");
    assert!(matches!(err, RegistryError::Unauthorized { .. }), "{err:?}");
    let untrusting = client(docker_config(&registry.host(), USER, PASSWORD), None);
    let err = untrusting.push(layout, digest, &repo, None).await.expect_err("a certificate of an unknown CA is refused");
    assert!(format!("{err}").to_lowercase().contains("certificate"), "names the certificate: {err}");
    assert!(!registry.storage_dir().join("docker/registry/v2/repositories/team").exists(), "nothing refused was stored");

    let allowed = client(docker_config(&registry.host(), USER, PASSWORD), Some(&ca));
    allowed.push(layout, digest, &repo, Some("v1")).await.expect("the user's credentials push");
    let cache_dir = tempfile::tempdir().expect("tempdir");
    let cache = Cache::new(cache_dir.path());
    let pulled = allowed.pull_verified(&repo, digest, &cache).await.expect("and pull");
    assert_eq!(&pulled.digest, digest);
    let err = wrong.pull(&repo, digest, &Cache::new(tempfile::tempdir().expect("tempdir").path())).await.expect_err("refused");
    assert!(matches!(err, RegistryError::Unauthorized { .. }), "a wrong password cannot pull either: {err:?}");
}
