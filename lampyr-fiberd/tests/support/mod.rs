//! What fiberd's tests share: the real cluster environment with Lampyr's CRDs,
//! a namespace per test, fiberd started in-process, and polling helpers.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use lampyr_api::policy::{FiberPolicy, ScalingPolicy};
use lampyr_api::{Home, HomeInstance, HomeSpec};
use lampyr_artifact::seal::FleetKey;
use lampyr_fiberd::{FiberdConfig, FiberdError, FleetKeySource, SecretKeyRef};
use lampyr_router::ScalerConfig;
use lampyr_testenv::{Artifact, Cluster, TestRegistry, example_artifact, repo_root, require_kvm};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// How long anything fiberd does may take before a test gives up.
pub const PATIENCE: Duration = Duration::from_secs(120);
/// The data key of the tests' fleet key Secrets.
pub const SEAL_SECRET: &str = "seal-key";

/// One test's slice of the shared cluster: its own namespace.
pub struct Env {
    pub cluster: &'static Cluster,
    pub client: Client,
    pub ns: String,
}

impl Env {
    pub async fn new(prefix: &str) -> Env {
        require_kvm();
        let cluster = Cluster::shared();
        cluster.apply_files(&[repo_root().join("config/crd/lampyr.yaml")]).await.expect("Lampyr CRDs install");
        let ns = cluster.namespace(prefix).await;
        Env { cluster, client: cluster.client().await, ns }
    }

    pub fn homes(&self) -> Api<Home> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// Creates Home `name` of `grant` pinning `artifact` (and `sealed`, if any).
    pub async fn create_home(&self, name: &str, grant: &str, artifact: &str, sealed: Option<&str>, policy: FiberPolicy) -> Home {
        self.create_home_with(name, grant, artifact, sealed, policy, |_| {}).await
    }

    /// [`Env::create_home`] with the spec changed by `change` first.
    pub async fn create_home_with(
        &self,
        name: &str,
        grant: &str,
        artifact: &str,
        sealed: Option<&str>,
        policy: FiberPolicy,
        change: impl FnOnce(&mut HomeSpec),
    ) -> Home {
        let mut home = Home {
            metadata: ObjectMeta { name: Some(name.into()), namespace: Some(self.ns.clone()), ..ObjectMeta::default() },
            spec: HomeSpec {
                revision_name: name.into(),
                artifact: artifact.into(),
                sealed_template: sealed.map(String::from),
                grant_name: grant.into(),
                fiber_memory_bytes: 0,
                policy,
                image_pull_secrets: Vec::new(),
                service_account_name: None,
            },
            status: None,
        };
        change(&mut home.spec);
        self.homes().create(&PostParams::default(), &home).await.unwrap_or_else(|e| panic!("creating Home {name}: {e}"))
    }

    /// Stores `key` as the fleet key in this namespace's Secret [`SEAL_SECRET`].
    pub async fn put_fleet_key(&self, key: &FleetKey) {
        let secret = Secret {
            metadata: ObjectMeta { name: Some(SEAL_SECRET.into()), ..ObjectMeta::default() },
            data: Some([("key".to_string(), ByteString(key.to_secret_string().into_bytes()))].into()),
            ..Secret::default()
        };
        Api::<Secret>::namespaced(self.client.clone(), &self.ns)
            .create(&PostParams::default(), &secret)
            .await
            .expect("creating the fleet key Secret");
    }

    /// fiberd's settings for this test: its namespace only, fast scaling and status.
    pub fn config(&self, name: &str, grants: &[&str], registry: &TestRegistry, cache: &Path) -> FiberdConfig {
        let mut config = FiberdConfig::new(name, grants.iter().map(|g| g.to_string()).collect(), cache);
        config.namespace = Some(self.ns.clone());
        config.plain_http_registries = vec![registry.host()];
        let secret = SecretKeyRef::parse(&format!("{}/{SEAL_SECRET}", self.ns)).expect("secret ref");
        config.fleet_key = FleetKeySource::Secret(secret);
        config.scaler = ScalerConfig {
            tick: Duration::from_millis(100),
            scale_to_zero_grace_period: Duration::from_millis(600),
            ..ScalerConfig::default()
        };
        config.status_interval = Duration::from_millis(200);
        config.retry_min = Duration::from_millis(500);
        config.retry_max = Duration::from_secs(2);
        config.drain_timeout = Duration::from_secs(5);
        // No router watches these instances: nothing to wait for once entries are removed.
        config.deregistration_delay = Duration::ZERO;
        config
    }
}

/// The policy of the hello example: `TARGET=Lampyr`, a 6 s stable window.
pub fn hello_policy() -> FiberPolicy {
    FiberPolicy {
        scaling: ScalingPolicy { stable_window: Duration::from_secs(6), ..ScalingPolicy::default() },
        env: vec![("TARGET".into(), "Lampyr".into())],
        ..FiberPolicy::default()
    }
}

/// The hello example's artifact with bodies of up to `max_body` bytes (a
/// different size is a different artifact), built once per process.
pub fn hello_artifact(max_body: u64) -> Artifact {
    example_artifact("hello", max_body)
}

/// fiberd running in this process on a loopback port.
pub struct Daemon {
    pub addr: SocketAddr,
    pub name: String,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), FiberdError>>>,
    _cache: tempfile::TempDir,
}

impl Daemon {
    pub async fn start(env: &Env, name: &str, grants: &[&str], registry: &TestRegistry) -> Daemon {
        Daemon::start_with(env, name, grants, registry, |_| {}).await
    }

    /// [`Daemon::start`] with the test's settings changed by `change`.
    pub async fn start_with(
        env: &Env,
        name: &str,
        grants: &[&str],
        registry: &TestRegistry,
        change: impl FnOnce(&mut FiberdConfig),
    ) -> Daemon {
        let cache = tempfile::tempdir().expect("cache dir");
        let mut config = env.config(name, grants, registry, cache.path());
        change(&mut config);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let (stop, stopped) = oneshot::channel::<()>();
        let client = env.client.clone();
        let task = tokio::spawn(lampyr_fiberd::run(config, client, listener, async move {
            let _ = stopped.await;
        }));
        Daemon { addr, name: name.into(), stop: Some(stop), task: Some(task), _cache: cache }
    }

    /// Stops fiberd as SIGTERM would and waits until it has finished.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let result = tokio::time::timeout(PATIENCE, task).await.expect("fiberd stops in time").expect("fiberd task");
            result.expect("fiberd ran without error");
        }
    }

    /// `GET /` for Revision `ns/revision`, as fiber-router forwards it: (status, body).
    pub async fn get(&self, ns: &str, revision: &str) -> (u16, String) {
        request(self.addr, ns, revision).await
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// `GET /` on `addr` with the Knative-Serving-* headers: (status, body).
pub async fn request(addr: SocketAddr, ns: &str, revision: &str) -> (u16, String) {
    let resp = http()
        .get(format!("http://{addr}/"))
        .header("Knative-Serving-Namespace", ns)
        .header("Knative-Serving-Revision", revision)
        .send()
        .await
        .unwrap_or_else(|e| panic!("request to {addr}: {e}"));
    let status = resp.status().as_u16();
    (status, resp.text().await.unwrap_or_default())
}

pub fn http() -> reqwest::Client {
    lampyr_testenv::http_client().timeout(Duration::from_secs(60)).build().expect("http client")
}

/// The entry of `instance` in Home `name`'s status, if any; `None` also when the Home is gone.
pub async fn entry(homes: &Api<Home>, name: &str, instance: &str) -> Option<HomeInstance> {
    let home = homes.get_opt(name).await.expect("reading the Home")?;
    home.status?.instances.into_iter().find(|i| i.name == instance)
}

/// Polls Home `name` until `instance`'s entry satisfies `done`; returns it.
pub async fn wait_entry(
    homes: &Api<Home>,
    name: &str,
    instance: &str,
    what: &str,
    done: impl Fn(Option<&HomeInstance>) -> bool,
) -> Option<HomeInstance> {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let found = entry(homes, name, instance).await;
        if done(found.as_ref()) {
            return found;
        }
        assert!(tokio::time::Instant::now() < deadline, "Home {name}: {what} did not happen within {PATIENCE:?}; entry: {found:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Polls `check` until it returns true.
pub async fn wait_until<F: std::future::Future<Output = bool>>(what: &str, mut check: impl FnMut() -> F) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !check().await {
        assert!(tokio::time::Instant::now() < deadline, "{what} did not happen within {PATIENCE:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
