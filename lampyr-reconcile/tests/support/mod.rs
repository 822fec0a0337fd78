//! Helpers for the lampyr-controller tests: the hello artifact pushed to a
//! loopback registry, Knative Services carrying the annotation, an in-process
//! controller per test namespace, and stand-ins for the grant controller and
//! fiberd (status written by server-side apply under their own field managers).

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use http::HeaderValue;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, Resource};
use lampyr_api::{CapacityGrant, Home, Service, keys};
use lampyr_artifact::layout::{blob_path, sha256_digest};
use lampyr_artifact::reference::Repository;
use lampyr_artifact::registry::RegistryClient;
use lampyr_fiber::build::{BuildOptions, build_artifact};
use lampyr_reconcile::revision::{self, Context, ControllerConfig, Metrics};
use lampyr_testenv::{Artifact, Cluster, TestRegistry, example_elf, plain_form, repo_root, require_kvm};
use serde::de::DeserializeOwned;
use serde_json::json;

/// The longest the controller may take to act on a change.
pub const TIMEOUT: Duration = Duration::from_secs(30);
pub const DIGEST0: &str = "sha256:0000000000000000000000000000000000000000000000000000000000000001";
pub const MT_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const MT_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

pub fn grant_image() -> String {
    format!("registry.example.com/lampyr/fiberd@{DIGEST0}")
}

pub fn helper_image() -> String {
    format!("registry.example.com/lampyr/fiberd-helper@{DIGEST0}")
}

/// The hello artifact, built once per test process: (layout, digest).
pub fn hello() -> &'static (PathBuf, String) {
    static BUILT: OnceLock<(PathBuf, String)> = OnceLock::new();
    BUILT.get_or_init(|| {
        require_kvm();
        let layout = Path::new(env!("CARGO_TARGET_TMPDIR")).join("reconcile-hello");
        let _ = fs::remove_dir_all(&layout);
        let built = build_artifact(&example_elf("hello"), &layout, &BuildOptions::default()).expect("hello builds");
        (layout, built.digest)
    })
}

/// Pushes the hello artifact to `repo` of `registry`; returns `host/repo@digest`.
pub async fn push_hello(registry: &TestRegistry, repo: &str) -> String {
    let (layout, digest) = hello();
    let repository = Repository::parse(&format!("http://{}/{repo}", registry.host())).expect("repository");
    RegistryClient::new([registry.host()]).expect("client").push(layout, digest, &repository, None).await.expect("push");
    format!("{}/{repo}@{digest}", registry.host())
}

/// Pushes the hello artifact to `repo` of a private `registry` (HTTPS with `ca`, logging in
/// as `user`); returns `host/repo@digest`.
pub async fn push_hello_with_login(registry: &TestRegistry, repo: &str, user: &str, password: &str, ca: &str) -> String {
    let (layout, digest) = hello();
    let repository = Repository::parse(&format!("{}/{repo}", registry.host())).expect("repository");
    let login = lampyr_testenv::registry::docker_config(&registry.host(), user, password);
    let credentials = lampyr_artifact::credentials::Credentials::ConfigJson(Arc::new(login));
    let access = lampyr_artifact::registry::RegistryAccess { credentials, ca_pem: Some(ca.as_bytes().to_vec()) };
    let client = RegistryClient::with_access(std::iter::empty::<String>(), access).expect("client");
    client.push(layout, digest, &repository, None).await.expect("push with a login");
    format!("{}/{repo}@{digest}", registry.host())
}

/// Hello in the plain form (Hyperlight's manifest listed itself), built once per process.
fn hello_plain() -> &'static Artifact {
    static BUILT: OnceLock<Artifact> = OnceLock::new();
    BUILT.get_or_init(|| {
        let (layout, digest) = hello();
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("reconcile-hello-plain");
        let _ = fs::remove_dir_all(&out);
        plain_form(&Artifact { layout: layout.clone(), digest: digest.clone() }, &out)
    })
}

/// Pushes a copy of the hello artifact (in the plain form, whose snapshot manifest is
/// Hyperlight's) whose Lampyr metadata claims ABI version `abi` (re-hashed up the
/// chain, so every digest holds); returns its reference.
pub async fn push_other_abi(registry: &TestRegistry, repo: &str, abi: u32) -> String {
    let Artifact { layout, digest } = hello_plain();
    let read = |d: &str| fs::read(blob_path(layout, d).expect("path")).expect("blob");
    let json = |d: &str| -> serde_json::Value { serde_json::from_slice(&read(d)).expect("json") };
    let oci = oci_client::Client::new(oci_client::client::ClientConfig {
        protocol: oci_client::client::ClientProtocol::Http,
        ..Default::default()
    });
    let at = |d: &str| oci_client::Reference::with_digest(registry.host(), repo.to_string(), d.to_string());
    let push_blob = |bytes: Vec<u8>| {
        let d = sha256_digest(&bytes);
        let oci = &oci;
        let reference = at(&d);
        async move { oci.push_blob(&reference, bytes, &d).await.expect("push blob") }
    };
    let put = |doc: serde_json::Value, mt: &'static str| {
        let bytes = serde_json::to_vec(&doc).expect("json");
        let d = sha256_digest(&bytes);
        let len = bytes.len();
        let oci = &oci;
        let reference = at(&d);
        async move {
            oci.push_manifest_raw(&reference, bytes, HeaderValue::from_static(mt)).await.expect("push manifest");
            (d, len)
        }
    };
    let mut index = json(digest);
    let mut manifests = index["manifests"].as_array().expect("manifests").clone();
    for desc in &mut manifests {
        let mut manifest = json(desc["digest"].as_str().expect("digest"));
        let config_digest = manifest["config"]["digest"].as_str().expect("config").to_string();
        let mut config = read(&config_digest);
        if manifest["artifactType"] == "application/vnd.hyperlight.snapshot.config.v3+json" {
            let mut value: serde_json::Value = serde_json::from_slice(&config).expect("config json");
            value["metadata"]["dev.lampyr.fiber.v1"]["abiVersion"] = json!(abi);
            config = serde_json::to_vec(&value).expect("json");
        }
        manifest["config"]["digest"] = json!(sha256_digest(&config));
        manifest["config"]["size"] = json!(config.len());
        push_blob(config).await;
        for layer in manifest["layers"].as_array().expect("layers") {
            push_blob(read(layer["digest"].as_str().expect("digest"))).await;
        }
        let (d, len) = put(manifest, MT_MANIFEST).await;
        desc["digest"] = json!(d);
        desc["size"] = json!(len);
    }
    index["manifests"] = json!(manifests);
    let (d, _) = put(index, MT_INDEX).await;
    format!("{}/{repo}@{d}", registry.host())
}

/// Installs Lampyr's CRDs (idempotent).
pub async fn install_crds(cluster: &Cluster) {
    cluster.apply_files(&[repo_root().join("config/crd/lampyr.yaml")]).await.expect("Lampyr CRDs");
}

/// The controller configuration the tests use for `namespace`.
pub fn config(namespace: &str, plain_http: &[String]) -> ControllerConfig {
    let mut config = ControllerConfig::new("fiber-router.lampyr-system.svc.cluster.local", grant_image(), helper_image());
    config.namespace = Some(namespace.to_string());
    config.plain_http_registries = plain_http.to_vec();
    config.cache_dir = scratch_dir("controller-cache", namespace);
    config.retry_base = Duration::from_millis(200);
    config.retry_max = Duration::from_secs(2);
    config
}

/// A fresh directory `<target tmp>/<kind>/<namespace>` (kept after the test for
/// inspection; namespaces are numbered per run, so the next run starts it afresh).
pub fn scratch_dir(kind: &str, namespace: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(kind).join(namespace);
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

/// An in-process controller for one namespace, stopped (gracefully) on drop.
pub struct Controller {
    pub context: Arc<Context>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Controller {
    pub async fn start(client: Client, config: ControllerConfig) -> Self {
        let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
        let _ = tracing_subscriber::fmt().with_env_filter(filter).with_test_writer().try_init();
        let context = Arc::new(Context::new(client, config, Metrics::default()).expect("controller context"));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let run = revision::run(context.clone(), async move {
            let _ = stopped.await;
        });
        let task = tokio::spawn(async move { run.await.expect("controller runs") });
        Controller { context, stop: Some(stop), task: Some(task) }
    }

    /// Stops the controller and waits for it.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.expect("controller task");
        }
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// A Knative Service running `artifact` (annotation omitted when `None`), with
/// extra container fields merged in.
pub fn knative_service(name: &str, ns: &str, artifact: Option<&str>, container: serde_json::Value) -> Service {
    let mut annotations = BTreeMap::new();
    if let Some(a) = artifact {
        annotations.insert(keys::SNAPSHOT_ARTIFACT.to_string(), a.to_string());
    }
    let mut c = json!({ "image": format!("registry.example.com/app@{DIGEST0}") });
    if let (Some(c), Some(extra)) = (c.as_object_mut(), container.as_object()) {
        c.extend(extra.clone());
    }
    serde_json::from_value(json!({
        "apiVersion": "serving.knative.dev/v1", "kind": "Service",
        "metadata": { "name": name, "namespace": ns },
        "spec": { "template": {
            "metadata": { "annotations": annotations },
            "spec": { "containers": [c] }
        } }
    }))
    .expect("a Service")
}

pub async fn create_service(client: &Client, ns: &str, service: &Service) {
    Api::<Service>::namespaced(client.clone(), ns).create(&PostParams::default(), service).await.expect("create Service");
}

/// Polls `name` until `accept` holds; fails after [`TIMEOUT`] with the last object seen.
pub async fn wait_for<K>(api: &Api<K>, name: &str, what: &str, accept: impl Fn(&K) -> bool) -> K
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let found = api.get_opt(name).await.unwrap_or_else(|e| panic!("reading {name}: {e}"));
        if let Some(object) = found.as_ref().filter(|o| accept(o)) {
            return object.clone();
        }
        assert!(Instant::now() < deadline, "{name}: {what} did not happen within {TIMEOUT:?}; last seen: {found:#?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls until `name` is gone.
pub async fn wait_gone<K>(api: &Api<K>, name: &str)
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let deadline = Instant::now() + TIMEOUT;
    while let Some(object) = api.get_opt(name).await.unwrap_or_else(|e| panic!("reading {name}: {e}")) {
        assert!(Instant::now() < deadline, "{name} was not deleted within {TIMEOUT:?}: {object:#?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Stands in for the grant controller: the grant reports Ready at its generation.
pub async fn grant_ready(client: &Client, ns: &str, name: &str) {
    let grants: Api<CapacityGrant> = Api::namespaced(client.clone(), ns);
    let grant = grants.get(name).await.expect("grant");
    let body = json!({
        "apiVersion": "fiber.lampyr.dev/v1alpha1", "kind": "CapacityGrant",
        "metadata": { "name": name },
        "status": {
            "observedGeneration": grant.metadata.generation.unwrap_or(1),
            "conditions": [
                { "type": "InstancesReady", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z" },
                { "type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z" }
            ],
            "readyInstances": 1,
            "allocatedSlots": 1
        }
    });
    grants.patch_status(name, &PatchParams::apply("fiberd-k8s-controller"), &Patch::Apply(&body)).await.expect("grant status");
}

/// Stands in for fiberd instance `instance`: its entry in the Home's
/// `status.instances`, written with field manager `fiberd/<instance>`.
pub async fn fiberd_reports(client: &Client, ns: &str, name: &str, instance: &str, loaded: bool, warm: i32, message: Option<&str>) {
    let homes: Api<Home> = Api::namespaced(client.clone(), ns);
    // The Home is placed after its grant exists: wait for it as a fiberd's watch would.
    let home = wait_for(&homes, name, "Home placed", |_| true).await;
    let mut entry = json!({
        "name": instance,
        "address": "127.0.0.1:8012",
        "warmFibers": warm,
        "observedGeneration": home.metadata.generation.unwrap_or(1),
        "loaded": loaded,
    });
    if let Some(m) = message {
        entry["message"] = json!(m);
    }
    let body = json!({
        "apiVersion": "fiber.lampyr.dev/v1alpha1", "kind": "Home",
        "metadata": { "name": name },
        "status": { "instances": [entry] }
    });
    homes.patch_status(name, &PatchParams::apply(&format!("fiberd/{instance}")), &Patch::Apply(&body)).await.expect("home status");
}

/// The condition `type_` of `conditions`, or a panic naming what was there.
pub fn condition<'a>(conditions: &'a [lampyr_api::Condition], type_: &str) -> &'a lampyr_api::Condition {
    conditions.iter().find(|c| c.type_ == type_).unwrap_or_else(|| panic!("no {type_} condition in {conditions:#?}"))
}
