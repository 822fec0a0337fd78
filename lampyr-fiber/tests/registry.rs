//! Moving artifacts through a real registry (Debian's `docker-registry`):
//! byte-exact push and pull by digest into the cache (compressed on the wire,
//! native in the cache, small blobs embedded in their descriptors), artifacts of the
//! previous uncompressed form, concurrent pulls, and refusal of missing, tampered,
//! oversized and bomb content with messages naming what is wrong.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use http::HeaderValue;
use hyperlight_host::sandbox::snapshot::{OciTag, Snapshot};
use lampyr_artifact::ArtifactRef;
use lampyr_artifact::cache::Cache;
use lampyr_artifact::layout::{blob_path, sha256_digest};
use lampyr_artifact::pack::compress;
use lampyr_artifact::reference::Repository;
use lampyr_artifact::registry::{RegistryClient, RegistryError};
use lampyr_artifact::structure::{Form, Structure};
use lampyr_artifact::verify::layout_structure;
use lampyr_artifact::{ArtifactError, verify_layout};
use lampyr_fiber::build::{BuildOptions, build_artifact};
use lampyr_testenv::{Artifact, TestRegistry, example_elf, plain_form, require_kvm};
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

/// What artifact `digest` in `layout` names.
fn structure(layout: &Path, digest: &str) -> Structure {
    layout_structure(layout, Some(digest)).expect("the layout's artifact reads")
}

/// Every blob a node keeps for artifact `digest` in `layout` (each layer as loaded).
fn native_blobs(layout: &Path, digest: &str) -> BTreeSet<String> {
    structure(layout, digest).native_blobs().into_iter().collect()
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

    // The layers travel compressed: the registry holds the packed form, far smaller.
    let artifact = structure(layout, digest);
    assert_eq!(artifact.form, Form::Packed);
    for layer in artifact.layers() {
        let packed = layer.packed.as_ref().expect("each data layer travels compressed");
        let stored = fs::metadata(registry.blob_data_path(packed.digest().as_ref())).expect("registry holds the packed blob").len();
        assert_eq!(stored, packed.size(), "{}", layer.what);
        assert!(!registry.blob_data_path(layer.native.digest().as_ref()).exists(), "{} travels only compressed", layer.what);
    }
    assert!(artifact.memory.transport().size() * 10 < artifact.memory.native.size(), "memory compresses at least 10x");

    // The cache keeps only what is loaded: no compressed blob.
    let blobs = native_blobs(layout, digest);
    assert_eq!(blobs.len(), 9, "index, 2 manifests, 2 configs, Hyperlight's manifest, 3 layers");
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
    assert_eq!(uploads, 6, "each of the 2 configs, Hyperlight's manifest and 3 packed layers uploaded once:\n{}", registry.log());

    // An artifact the layout does not hold, or a malformed tag, is refused before any upload.
    let wrong = format!("sha256:{}", "1".repeat(64));
    let err = client.push(layout, &wrong, &repo, None).await.expect_err("not in the layout");
    eprintln!("not in the layout: {err}");
    assert!(matches!(err, RegistryError::Verify { .. }), "{err:?}");
    let err = client.push(layout, digest, &repo, Some("v1:latest")).await.expect_err("bad tag");
    assert!(matches!(err, RegistryError::BadTag { .. }), "{err:?}");
    assert_eq!(registry.log().matches("PUT /v2/lampyr/hello/blobs/uploads/").count(), 6);
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

    // The ELF travels compressed: alter the blob the registry serves.
    let artifact = structure(layout, digest);
    let elf = artifact.elf.transport().digest().to_string();
    assert_ne!(elf, artifact.elf.native.digest().to_string(), "the ELF travels packed");
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
    assert!(!stored.contains(artifact.elf.native.digest().as_ref()), "nothing of the tampered blob reaches the store");
    assert!(tmp_is_empty(&cache), "no partial download left behind");
    assert!(!cache.layout_path(digest).expect("path").exists(), "no layout for a failed pull");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_embedded_copy_that_differs_from_its_blob_is_refused_before_anything_is_fetched() {
    let (_, digest) = hello();
    let PushedHello { registry, repo, client, fake, artifact } = pushed_hello().await;
    assert!(artifact.guest_config.data().is_some(), "the packed guest manifest embeds its empty config");

    // The guest manifest's config embeds `[]` (base64 "W10=") where its digest names `{}`.
    let mut config = artifact.guest_config.clone();
    config.set_data(Some("W10=".to_string()));
    let altered = push_guest_variant(&fake, &artifact, serde_json::json!(config), serde_json::json!(artifact.elf.transport())).await;

    let cache_dir = tempfile::tempdir().expect("tempdir");
    let cache = Cache::new(cache_dir.path());
    let log_before = registry.log();
    let err = client.pull(&repo, &altered, &cache).await.expect_err("altered embedded copy");
    eprintln!("altered embedded copy: {err}");
    let msg = err.to_string();
    let empty = artifact.guest_config.digest().to_string();
    assert!(msg.contains("guest config (embedded in its descriptor)") && msg.contains(&empty), "{msg}");
    let log = registry.log()[log_before.len()..].to_string();
    assert_eq!(log.matches("/blobs/").count(), 0, "no blob is fetched for a refused artifact:\n{log}");
    let stored = store_contents(&cache);
    assert!(!stored.contains(&empty) && !stored.contains(artifact.elf.native.digest().as_ref()), "{stored:?}");
    assert!(tmp_is_empty(&cache));

    // The genuine artifact pulls into the same cache.
    client.pull_verified(&repo, digest, &cache).await.expect("the genuine artifact pulls");
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

    // A layer declared smaller than it is: refused on the registry's Content-Length, unread.
    let short_claim = fake.push(Claims { memory: 5, elf: 3, snapshot_manifest: None }).await;
    let err = client.pull(&repo, &short_claim, &cache).await.expect_err("more bytes than declared");
    eprintln!("more bytes than declared: {err}");
    assert!(matches!(&err, RegistryError::SizeMismatch { what, expected: 3, actual: 5, .. } if what == "guest ELF layer"), "{err:?}");
    assert!(tmp_is_empty(&cache), "no partial download left behind");
}

/// Hello in the previous version's form: Hyperlight's manifest listed itself and
/// every layer uncompressed, built beside the packed one from the same snapshot.
fn hello_plain() -> &'static (PathBuf, String) {
    static BUILT: OnceLock<(PathBuf, String)> = OnceLock::new();
    BUILT.get_or_init(|| {
        let (layout, digest) = hello();
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("registry-hello-plain");
        let _ = fs::remove_dir_all(&out);
        let plain = plain_form(&Artifact { layout: layout.clone(), digest: digest.clone() }, &out);
        (plain.layout, plain.digest)
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn an_uncompressed_artifact_of_the_previous_version_still_pulls_and_verifies() {
    let (layout, digest) = hello_plain();
    let artifact = structure(layout, digest);
    assert_eq!(artifact.form, Form::Plain);
    assert!(artifact.layers().iter().all(|l| l.packed.is_none()), "no layer is packed");
    let registry = TestRegistry::start();
    let repo = repo(&registry, "lampyr/old");
    let client = client(&registry);
    client.push(layout, digest, &repo, None).await.expect("push");
    let memory = &artifact.memory.native;
    let stored = fs::metadata(registry.blob_data_path(memory.digest().as_ref())).expect("the registry holds the memory layer");
    assert_eq!(stored.len(), memory.size(), "the memory layer travels as it is loaded");

    let cache_dir = tempfile::tempdir().expect("tempdir");
    let cache = Cache::new(cache_dir.path());
    let v = client.pull_verified(&repo, digest, &cache).await.expect("the old form pulls");
    assert_eq!(&v.digest, digest);
    assert_eq!(v.snapshot_manifest, artifact.snapshot.digest().to_string(), "Hyperlight's manifest is the index entry");
    assert_eq!(store_contents(&cache), native_blobs(layout, digest));
    assert_eq!(native_blobs(layout, digest).len(), 8, "index, 2 manifests, 2 configs, 3 layers");
    Snapshot::checked_load(&v.layout, OciTag::new("snapshot").expect("tag")).expect("hyperlight loads the pulled layout");
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_pulls_land_each_blob_once_and_a_pull_pings_at_most_once() {
    let (layout, digest) = hello();
    let registry = TestRegistry::start();
    let repo = repo(&registry, "lampyr/hello");
    let client = client(&registry);
    client.push(layout, digest, &repo, None).await.expect("push");

    // One pull on a fresh cache: every blob it lacks fetched once.
    let log_before = registry.log();
    let first = tempfile::tempdir().expect("tempdir");
    client.pull_verified(&repo, digest, &Cache::new(first.path())).await.expect("pull");
    let log = registry.log()[log_before.len()..].to_string();
    let blob_gets = log.matches("GET /v2/lampyr/hello/blobs/").count();
    assert_eq!(blob_gets, 2, "the memory and ELF layers once each; the small blobs travel embedded in the manifests:\n{log}");
    let pings = log.matches("GET /v2/ ").count();
    assert!(pings <= 1, "{pings} pings of /v2/ for one pull:\n{log}");

    // Six pulls at once: four into one shared cache, two into caches of their own.
    let shared_dir = tempfile::tempdir().expect("tempdir");
    let own: Vec<_> = (0..2).map(|_| tempfile::tempdir().expect("tempdir")).collect();
    let shared = Cache::new(shared_dir.path());
    let caches: Vec<Cache> = (0..4).map(|_| shared.clone()).chain(own.iter().map(|d| Cache::new(d.path()))).collect();
    let pulls = caches.iter().map(|cache| client.pull_verified(&repo, digest, cache));
    for (i, pulled) in futures::future::join_all(pulls).await.into_iter().enumerate() {
        let v = pulled.unwrap_or_else(|e| panic!("concurrent pull {i}: {e}"));
        assert_eq!(&v.digest, digest);
        Snapshot::checked_load(&v.layout, OciTag::new("snapshot").expect("tag")).expect("hyperlight loads it");
    }
    for cache in &caches {
        assert_eq!(store_contents(cache), native_blobs(layout, digest));
        assert!(tmp_is_empty(cache), "no partial download left behind");
    }
}

/// Pushes a variant of the pushed artifact `artifact` whose guest manifest lists a
/// packed ELF layer holding `compressed` (a blob pushed too) but declaring the real
/// ELF's digest and size, and returns the variant's index digest.
async fn push_elf_variant(fake: &FakeArtifacts, artifact: &Structure, compressed: Vec<u8>) -> String {
    let blob = sha256_digest(&compressed);
    let len = compressed.len();
    fake.oci.push_blob(&fake.at(&blob), compressed, &blob).await.expect("push blob");
    let native = &artifact.elf.native;
    let layer = serde_json::json!({
        "mediaType": "application/vnd.lampyr.guest.elf.v1+zstd", "digest": blob, "size": len,
        "annotations": {"dev.lampyr.uncompressed.digest": native.digest().to_string(), "dev.lampyr.uncompressed.size": native.size().to_string()},
    });
    push_guest_variant(fake, artifact, serde_json::json!(artifact.guest_config), layer).await
}

/// Pushes a variant of the pushed artifact `artifact` whose guest manifest has `config` and
/// one layer, `layer`, and returns the variant's index digest.
async fn push_guest_variant(fake: &FakeArtifacts, artifact: &Structure, config: serde_json::Value, layer: serde_json::Value) -> String {
    let (guest, guest_len) = fake
        .put(
            serde_json::json!({
                "schemaVersion": 2, "mediaType": MT_MANIFEST, "artifactType": "application/vnd.lampyr.guest.v1",
                "config": config, "layers": [layer],
            }),
            MT_MANIFEST,
        )
        .await;
    let index = serde_json::json!({
        "schemaVersion": 2, "mediaType": MT_INDEX, "artifactType": "application/vnd.lampyr.fiber.artifact.v1",
        "manifests": [artifact.snapshot, {"mediaType": MT_MANIFEST, "digest": guest, "size": guest_len}],
    });
    fake.put(index, MT_INDEX).await.0
}

/// The hello artifact pushed to `lampyr/hello` of a fresh registry, for tests that push
/// variants of it beside it.
struct PushedHello {
    registry: TestRegistry,
    repo: Repository,
    client: RegistryClient,
    fake: FakeArtifacts,
    artifact: Structure,
}

async fn pushed_hello() -> PushedHello {
    let (layout, digest) = hello();
    let registry = TestRegistry::start();
    let repo = repo(&registry, "lampyr/hello");
    let client = client(&registry);
    client.push(layout, digest, &repo, None).await.expect("push");
    let fake = FakeArtifacts::new(&registry, "lampyr/hello").await;
    PushedHello { artifact: structure(layout, digest), registry, repo, client, fake }
}

#[tokio::test(flavor = "multi_thread")]
async fn packed_layers_decompressing_to_other_content_or_without_bound_are_refused() {
    let (layout, digest) = hello();
    // The registry stays bound: dropping it stops it.
    let PushedHello { registry: _registry, repo, client, fake, artifact } = pushed_hello().await;
    let elf = fs::read(blob_path(layout, artifact.elf.native.digest().as_ref()).expect("path")).expect("ELF");
    let refused = |err: &RegistryError| matches!(err, RegistryError::Unpacked { source, .. } if matches!(**source, ArtifactError::Decompressed { .. }));

    // A compressed blob whose own digest holds but which decompresses to another ELF
    // (one byte changed) than the digest the pinned index records.
    let mut altered = elf.clone();
    altered[100] ^= 0xff;
    let other = push_elf_variant(&fake, &artifact, compress(&altered).expect("compress")).await;
    let cache_dir = tempfile::tempdir().expect("tempdir");
    let cache = Cache::new(cache_dir.path());
    let err = client.pull(&repo, &other, &cache).await.expect_err("other content");
    eprintln!("other content: {err}");
    assert!(refused(&err), "{err:?}");
    assert!(err.to_string().contains(artifact.elf.native.digest().as_ref()), "names the digest it should have: {err}");
    assert!(!store_contents(&cache).contains(artifact.elf.native.digest().as_ref()), "nothing of it is stored");
    assert!(tmp_is_empty(&cache), "no partial output left behind");
    assert!(!cache.layout_path(&other).expect("path").exists());

    // A bomb: a few kilobytes that decompress to 256 MiB, declaring the ELF's size.
    let bomb = compress(&vec![0u8; 256 << 20]).expect("compress");
    assert!(bomb.len() < 64 * 1024, "{}", bomb.len());
    let bombed = push_elf_variant(&fake, &artifact, bomb).await;
    let cache_dir = tempfile::tempdir().expect("tempdir");
    let cache = Cache::new(cache_dir.path());
    let err = client.pull(&repo, &bombed, &cache).await.expect_err("bomb");
    eprintln!("bomb: {err}");
    assert!(refused(&err), "{err:?}");
    assert!(err.to_string().contains("decompression bomb"), "{err}");
    assert!(!store_contents(&cache).contains(artifact.elf.native.digest().as_ref()), "nothing of it is stored");
    assert!(tmp_is_empty(&cache), "nothing past the declared size was written");

    // The genuine artifact still pulls from the same registry into the same cache.
    client.pull_verified(&repo, digest, &cache).await.expect("the genuine artifact pulls");
}

/// Prunes `cache` to one byte, retrying while only a forked child's copy of a lock stops it.
///
/// A child process forked by another test of this binary (a registry starting) holds a copy
/// of every open descriptor, and so of every `flock` (a dropped lease, a finished pull's
/// write guard), until it execs: for that moment the prune rightly keeps the entry as in use
/// or reports the cache busy. Measured: 7 of 252,056 drop-then-check cycles beside 503
/// spawns. Retries those outcomes for at most 10 s; a lease really held still fails the test.
fn prune_to_one_byte(cache: &Cache) -> lampyr_artifact::evict::Pruned {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let pruned = cache.prune(1).expect("prune");
        let held_back = pruned.busy || (pruned.removed.is_empty() && pruned.in_use > 0);
        if !held_back || std::time::Instant::now() > deadline {
            return pruned;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn pruning_under_a_small_limit_keeps_the_artifact_a_loaded_revision_uses() {
    use lampyr_artifact::evict::EntryKind;
    let ((packed_layout, packed), (plain_layout, plain)) = (hello(), hello_plain());
    let registry = TestRegistry::start();
    let repo = repo(&registry, "lampyr/hello");
    let client = client(&registry);
    client.push(packed_layout, packed, &repo, None).await.expect("push");
    client.push(plain_layout, plain, &repo, None).await.expect("push the plain form");
    let cache_dir = tempfile::tempdir().expect("tempdir");
    let cache = Cache::new(cache_dir.path());

    // A Revision loads the packed artifact: leased before its pull, serving fibers.
    let lease = cache.lease(packed).expect("lease");
    let loaded = client.pull_verified(&repo, packed, &cache).await.expect("pull");
    let template = lampyr_fiber::Template::load(&loaded, &lampyr_abi::Env::default()).expect("template loads");
    let config = lampyr_fiber::PoolConfig { revision: "hello-00001".into(), max_fibers: 1, queue_capacity: 4, capacity: None };
    let pool = lampyr_fiber::FiberPool::new(template, config, lampyr_fiber::metrics::RuntimeMetrics::default());
    // Another artifact pulled and no longer used, and an orphan blob.
    client.pull_verified(&repo, plain, &cache).await.expect("pull the other");
    let orphan = cache.insert(&sha256_digest(b"orphan"), b"orphan").expect("insert");

    let usage = cache.usage().expect("usage");
    let in_use: Vec<_> = usage.entries.iter().filter(|e| e.in_use).map(|e| e.name.clone()).collect();
    assert_eq!(in_use, vec![packed.clone()], "{usage:?}");
    assert!(usage.entries.iter().any(|e| e.kind == EntryKind::Blob && e.name == sha256_digest(b"orphan")), "{usage:?}");

    // A limit of one byte: everything unleased goes, the loaded artifact stays whole.
    let pruned = prune_to_one_byte(&cache);
    let removed: BTreeSet<_> = pruned.removed.iter().map(|e| e.name.clone()).collect();
    assert_eq!(removed, BTreeSet::from([plain.clone(), sha256_digest(b"orphan")]), "{pruned:?}");
    assert_eq!(pruned.in_use, 1);
    assert!(pruned.after < pruned.before, "{pruned:?}");
    assert!(!orphan.exists() && !cache.layout_path(plain).expect("path").exists());
    verify_layout(&loaded.layout, Some(packed)).expect("the loaded artifact still verifies");
    let answer = pool.invoke(
        lampyr_abi::Request { method: "GET".into(), uri: "/".into(), ..Default::default() },
        tokio::time::Instant::now() + std::time::Duration::from_secs(60),
    );
    assert_eq!(answer.await.expect("the loaded Revision answers after the prune").status, 200);
    let kept: BTreeSet<_> = native_blobs(packed_layout, packed);
    assert!(kept.is_subset(&store_contents(&cache)), "every blob the loaded artifact uses stays");

    // Unloaded, it goes too; pulling it again works.
    drop(pool);
    drop(lease);
    let pruned = prune_to_one_byte(&cache);
    assert_eq!(pruned.removed.iter().map(|e| e.name.clone()).collect::<Vec<_>>(), vec![packed.clone()], "{pruned:?}");
    assert!(store_contents(&cache).is_empty(), "nothing left in the store");
    client.pull_verified(&repo, packed, &cache).await.expect("pulls again after eviction");
}
