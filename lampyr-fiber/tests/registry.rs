//! Moving artifacts through a real registry (Debian's `docker-registry`):
//! byte-exact push and pull by digest into the cache, and refusal of missing,
//! tampered and oversized content with messages naming what is wrong.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use http::HeaderValue;
use hyperlight_host::sandbox::snapshot::{OciTag, Snapshot};
use lampyr_artifact::ArtifactRef;
use lampyr_artifact::cache::Cache;
use lampyr_artifact::layout::{blob_path, sha256_digest};
use lampyr_artifact::reference::Repository;
use lampyr_artifact::registry::{RegistryClient, RegistryError};
use lampyr_artifact::verify_layout;
use lampyr_fiber::build::{BuildOptions, build_artifact};
use lampyr_testenv::{TestRegistry, example_elf, require_kvm};
use oci_client::Reference;
use oci_client::secrets::RegistryAuth;

const MT_INDEX: &str = "application/vnd.oci.image.index.v1+json";
const MT_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

/// The hello artifact, built once per test process: (layout, digest).
fn hello() -> &'static (PathBuf, String) {
    static BUILT: OnceLock<(PathBuf, String)> = OnceLock::new();
    BUILT.get_or_init(|| {
        require_kvm();
        let layout = Path::new(env!("CARGO_TARGET_TMPDIR")).join("registry-hello");
        let _ = fs::remove_dir_all(&layout);
        let built = build_artifact(&example_elf("hello"), &layout, &BuildOptions::default()).expect("hello builds");
        (layout, built.digest)
    })
}

fn repo(registry: &TestRegistry, path: &str) -> Repository {
    Repository::parse(&format!("http://{}/{path}", registry.host())).expect("repository parses")
}

fn client(registry: &TestRegistry) -> RegistryClient {
    RegistryClient::new([registry.host()]).expect("client")
}

/// Every blob digest of the artifact `digest` in `layout` (index, manifests, configs, layers).
fn artifact_blobs(layout: &Path, digest: &str) -> BTreeSet<String> {
    let read = |d: &str| -> serde_json::Value {
        serde_json::from_slice(&fs::read(blob_path(layout, d).expect("path")).expect("read blob")).expect("json")
    };
    let mut blobs = BTreeSet::from([digest.to_string()]);
    for m in read(digest)["manifests"].as_array().expect("manifests") {
        let md = m["digest"].as_str().expect("digest");
        blobs.insert(md.to_string());
        let manifest = read(md);
        blobs.insert(manifest["config"]["digest"].as_str().expect("config").to_string());
        for l in manifest["layers"].as_array().expect("layers") {
            blobs.insert(l["digest"].as_str().expect("layer").to_string());
        }
    }
    blobs
}

/// Files in the cache's blob store; each must hash to its name (nothing half-written).
fn store_contents(cache: &Cache) -> BTreeSet<String> {
    let dir = cache.root().join("blobs/sha256");
    let Ok(entries) = fs::read_dir(&dir) else { return BTreeSet::new() };
    let mut found = BTreeSet::new();
    for entry in entries {
        let entry = entry.expect("entry");
        let digest = format!("sha256:{}", entry.file_name().to_string_lossy());
        assert_eq!(sha256_digest(&fs::read(entry.path()).expect("read")), digest, "store blob hashes to its name");
        found.insert(digest);
    }
    found
}

fn tmp_is_empty(cache: &Cache) -> bool {
    fs::read_dir(cache.root().join("tmp")).map_or(true, |mut d| d.next().is_none())
}

fn count_files(dir: &Path) -> usize {
    fs::read_dir(dir)
        .map(|entries| entries.flatten().map(|e| if e.path().is_dir() { count_files(&e.path()) } else { 1 }).sum())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread")]
async fn push_then_pull_round_trips_byte_for_byte() {
    let (layout, digest) = hello();
    let registry = TestRegistry::start();
    let repo = repo(&registry, "lampyr/hello");
    let client = client(&registry);

    let pushed = client.push(layout, digest, &repo, Some("v1")).await.expect("push");
    assert_eq!(pushed, ArtifactRef::Registry { repository: repo.clone(), digest: digest.clone() });
    assert_eq!(pushed.to_string(), format!("http://{}/lampyr/hello@{digest}", registry.host()));

    let cache_dir = tempfile::tempdir().expect("tempdir");
    let cache = Cache::new(cache_dir.path());
    let pulled = client.pull(&repo, digest, &cache).await.expect("pull");
    assert_eq!(pulled, cache.layout_path(digest).expect("layout path"));
    let v = verify_layout(&pulled, Some(digest)).expect("pulled layout verifies");
    assert_eq!(&v.digest, digest);
    assert_eq!(verify_layout(&pulled, None).expect("verifies by the lampyr tag").digest, *digest);

    let blobs = artifact_blobs(layout, digest);
    assert_eq!(blobs.len(), 8, "index, 2 manifests, 2 configs, 3 layers");
    assert_eq!(store_contents(&cache), blobs);
    for d in &blobs {
        let ours = fs::read(blob_path(layout, d).expect("path")).expect("local blob");
        let theirs = blob_path(&pulled, d).expect("path");
        assert_eq!(fs::read(&theirs).expect("pulled blob"), ours, "{d} is byte-identical");
        let store = cache.blob_path(d).expect("path");
        assert_eq!(inode(&theirs), inode(&store), "{d} is a hard link into the store");
    }
    assert!(tmp_is_empty(&cache));
    // Hyperlight itself loads the pulled snapshot by its layout tag, checking every digest.
    let tag = OciTag::new("snapshot").expect("tag");
    Snapshot::checked_load(&pulled, tag).expect("hyperlight loads the pulled layout");

    // The tag names the same index bytes.
    let oci = lampyr_artifact::registry::oci_client(oci_client::client::ClientConfig {
        protocol: oci_client::client::ClientProtocol::Http,
        ..Default::default()
    })
    .expect("an OCI client");
    let tagged = Reference::with_tag(registry.host(), "lampyr/hello".into(), "v1".into());
    let (_, tag_digest) = oci.pull_manifest_raw(&tagged, &RegistryAuth::Anonymous, &[MT_INDEX]).await.expect("by tag");
    assert_eq!(&tag_digest, digest);

    // A second pull is served from the cache, even with the registry gone.
    drop(registry);
    assert_eq!(client.pull(&repo, digest, &cache).await.expect("cached pull"), pulled);
}

fn inode(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    fs::metadata(path).expect("metadata").ino()
}

#[tokio::test(flavor = "multi_thread")]
async fn repush_is_idempotent() {
    let (layout, digest) = hello();
    let registry = TestRegistry::start();
    let repo = repo(&registry, "lampyr/hello");
    let client = client(&registry);

    let first = client.push(layout, digest, &repo, Some("v1")).await.expect("first push");
    let blobs_dir = registry.storage_dir().join("docker/registry/v2/blobs");
    let files = count_files(&blobs_dir);
    let second = client.push(layout, digest, &repo, Some("v1")).await.expect("second push");
    assert_eq!(first, second);
    assert_eq!(count_files(&blobs_dir), files, "no new blobs stored");
    let uploads = registry.log().matches("PUT /v2/lampyr/hello/blobs/uploads/").count();
    assert_eq!(uploads, 5, "each of the 5 config and layer blobs uploaded once:\n{}", registry.log());

    // An artifact the layout does not hold, or a malformed tag, is refused before any upload.
    let wrong = format!("sha256:{}", "1".repeat(64));
    let err = client.push(layout, &wrong, &repo, None).await.expect_err("not in the layout");
    eprintln!("not in the layout: {err}");
    assert!(matches!(err, RegistryError::Verify { .. }), "{err:?}");
    let err = client.push(layout, digest, &repo, Some("v1:latest")).await.expect_err("bad tag");
    assert!(matches!(err, RegistryError::BadTag { .. }), "{err:?}");
    assert_eq!(registry.log().matches("PUT /v2/lampyr/hello/blobs/uploads/").count(), 5);
}

#[tokio::test(flavor = "multi_thread")]
async fn missing_digest_and_unreachable_registry_are_clear_errors() {
    let registry = TestRegistry::start();
    let repo = repo(&registry, "lampyr/hello");
    let client = client(&registry);
    let cache_dir = tempfile::tempdir().expect("tempdir");
    let cache = Cache::new(cache_dir.path());

    let absent = format!("sha256:{}", "0".repeat(64));
    let err = client.pull(&repo, &absent, &cache).await.expect_err("absent digest");
    eprintln!("absent digest: {err}");
    assert!(matches!(err, RegistryError::NotFound { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains(&absent) && msg.contains("lampyr/hello"), "{msg}");
    assert!(store_contents(&cache).is_empty());

    let err = client.pull(&repo, "sha256:abc", &cache).await.expect_err("malformed digest");
    eprintln!("malformed digest: {err}");
    assert!(err.to_string().contains("sha256:abc"), "{err}");

    // Nothing listens on a port just released.
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let dead = Repository::parse(&format!("http://127.0.0.1:{port}/lampyr/hello")).expect("parses");
    let err = RegistryClient::for_repository(&dead).expect("client").pull(&dead, &absent, &cache).await.expect_err("dead");
    eprintln!("dead: {err}");
    assert!(matches!(err, RegistryError::Unreachable { .. }), "{err:?}");
    assert!(err.to_string().contains("is the registry running?"), "{err}");

    // http:// to a registry the client keeps on HTTPS is refused before any request.
    let strict = RegistryClient::new(std::iter::empty::<String>()).expect("client");
    let err = strict.pull(&repo, &absent, &cache).await.expect_err("plain http refused");
    eprintln!("plain http refused: {err}");
    assert!(matches!(err, RegistryError::PlainHttpNotAllowed { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn tampered_blob_in_the_registry_fails_the_pull_and_caches_nothing_of_it() {
    let (layout, digest) = hello();
    let registry = TestRegistry::start();
    let repo = repo(&registry, "lampyr/hello");
    let client = client(&registry);
    client.push(layout, digest, &repo, None).await.expect("push");

    let v = verify_layout(layout, Some(digest)).expect("verifies");
    let elf = format!("sha256:{}", v.guest_elf.file_name().expect("name").to_string_lossy());
    let data = registry.blob_data_path(&elf);
    let mut bytes = fs::read(&data).expect("registry blob");
    bytes[100] ^= 0xff;
    fs::write(&data, &bytes).expect("tamper");

    let cache_dir = tempfile::tempdir().expect("tempdir");
    let cache = Cache::new(cache_dir.path());
    let err = client.pull(&repo, digest, &cache).await.expect_err("tampered");
    eprintln!("tampered: {err}");
    assert!(
        matches!(&err, RegistryError::DigestMismatch { what, expected, .. } if what == "guest ELF layer" && *expected == elf),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains("digest mismatch") && msg.contains(&elf), "{msg}");

    let stored = store_contents(&cache);
    assert!(!stored.contains(&elf), "the tampered blob never reaches the store");
    assert!(tmp_is_empty(&cache), "no partial download left behind");
    assert!(!cache.layout_path(digest).expect("path").exists(), "no layout for a failed pull");
}

/// Hand-made artifacts pushed with raw bytes: every blob is the same 5-byte blob,
/// with whatever sizes the descriptors claim (the registry checks only existence).
struct FakeArtifacts {
    oci: oci_client::Client,
    registry: String,
    repo: String,
    blob: String,
}

/// Sizes the descriptors of a fake artifact declare.
struct Claims {
    memory: u64,
    elf: u64,
    snapshot_manifest: Option<u64>,
}

impl FakeArtifacts {
    async fn new(registry: &TestRegistry, repo: &str) -> Self {
        let oci = lampyr_artifact::registry::oci_client(oci_client::client::ClientConfig {
            protocol: oci_client::client::ClientProtocol::Http,
            ..Default::default()
        })
        .expect("an OCI client");
        let blob = sha256_digest(b"small");
        let fake = FakeArtifacts { oci, registry: registry.host(), repo: repo.to_string(), blob };
        fake.oci.push_blob(&fake.at(&fake.blob), b"small".to_vec(), &fake.blob).await.expect("push blob");
        fake
    }

    fn at(&self, digest: &str) -> Reference {
        Reference::with_digest(self.registry.clone(), self.repo.clone(), digest.to_string())
    }

    async fn put(&self, doc: serde_json::Value, media_type: &'static str) -> (String, usize) {
        let bytes = serde_json::to_vec(&doc).expect("json");
        let (digest, len) = (sha256_digest(&bytes), bytes.len());
        let content_type = HeaderValue::from_static(media_type);
        self.oci.push_manifest_raw(&self.at(&digest), bytes, content_type).await.expect("push manifest");
        (digest, len)
    }

    /// Pushes an artifact whose descriptors declare `claims` and returns its digest.
    async fn push(&self, claims: Claims) -> String {
        let desc = |mt: &str, size: u64| serde_json::json!({"mediaType": mt, "digest": self.blob, "size": size});
        let (snapshot, snapshot_len) = self
            .put(
                serde_json::json!({
                    "schemaVersion": 2, "mediaType": MT_MANIFEST,
                    "artifactType": "application/vnd.hyperlight.snapshot.config.v3+json",
                    "config": desc("application/vnd.hyperlight.snapshot.config.v3+json", 5),
                    "layers": [desc("application/vnd.hyperlight.snapshot.memory.v1", claims.memory),
                               desc("application/vnd.hyperlight.snapshot.transport.v1", 5)],
                }),
                MT_MANIFEST,
            )
            .await;
        let (guest, guest_len) = self
            .put(
                serde_json::json!({
                    "schemaVersion": 2, "mediaType": MT_MANIFEST, "artifactType": "application/vnd.lampyr.guest.v1",
                    "config": desc("application/vnd.oci.empty.v1+json", 5),
                    "layers": [desc("application/vnd.lampyr.guest.elf.v1", claims.elf)],
                }),
                MT_MANIFEST,
            )
            .await;
        let snapshot_size = claims.snapshot_manifest.unwrap_or(snapshot_len as u64);
        let index = serde_json::json!({
            "schemaVersion": 2, "mediaType": MT_INDEX, "artifactType": "application/vnd.lampyr.fiber.artifact.v1",
            "manifests": [
                {"mediaType": MT_MANIFEST, "digest": snapshot, "size": snapshot_size},
                {"mediaType": MT_MANIFEST, "digest": guest, "size": guest_len},
            ],
        });
        self.put(index, MT_INDEX).await.0
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn declared_sizes_over_the_limits_are_refused_before_download() {
    let registry = TestRegistry::start();
    let repo = repo(&registry, "lampyr/big");
    let fake = FakeArtifacts::new(&registry, "lampyr/big").await;
    let client = client(&registry);
    let cache_dir = tempfile::tempdir().expect("tempdir");
    let cache = Cache::new(cache_dir.path());

    // A memory layer claiming 1 GiB + 1 byte is refused before any blob is fetched.
    let huge_layer = fake.push(Claims { memory: (1 << 30) + 1, elf: 5, snapshot_manifest: None }).await;
    let err = client.pull(&repo, &huge_layer, &cache).await.expect_err("oversized layer");
    eprintln!("oversized layer: {err}");
    assert!(
        matches!(&err, RegistryError::TooLarge { what, size, .. } if what == "snapshot memory layer" && *size == (1 << 30) + 1),
        "{err:?}"
    );
    assert!(err.to_string().contains("refusing to download"), "{err}");
    assert!(!registry.log().contains("GET /v2/lampyr/big/blobs/"), "no blob was requested");
    assert!(!store_contents(&cache).contains(&fake.blob));

    // A snapshot manifest claiming 2 MiB (over the JSON limit) is refused before it is fetched.
    let huge_manifest = fake.push(Claims { memory: 5, elf: 5, snapshot_manifest: Some(2 << 20) }).await;
    let err = client.pull(&repo, &huge_manifest, &cache).await.expect_err("oversized manifest");
    eprintln!("oversized manifest: {err}");
    assert!(matches!(&err, RegistryError::TooLarge { what, .. } if what == "snapshot manifest"), "{err:?}");

    // A layer declared smaller than it is: the download stops one byte past the claim.
    let short_claim = fake.push(Claims { memory: 5, elf: 3, snapshot_manifest: None }).await;
    let err = client.pull(&repo, &short_claim, &cache).await.expect_err("more bytes than declared");
    eprintln!("more bytes than declared: {err}");
    assert!(matches!(&err, RegistryError::SizeMismatch { what, expected: 3, actual: 4, .. } if what == "guest ELF layer"), "{err:?}");
    assert!(tmp_is_empty(&cache), "no partial download left behind");
}
