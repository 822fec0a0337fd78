//! Loading one Home: its sealed template (opened with the fleet key) or its
//! artifact, pulled by digest and verified, then its pool and scaler.
//! An artifact that does not verify never reaches the fiber runtime.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::Api;
use lampyr_api::{Home, HomeSpec};
use lampyr_artifact::cache::Cache;
use lampyr_artifact::evict::Lease;
use lampyr_artifact::readers::ProvenReaders;
use lampyr_artifact::reference::Repository;
use lampyr_artifact::registry::RegistryClient;
use lampyr_artifact::seal::{FleetKey, open_artifact};
use lampyr_artifact::{ArtifactRef, VerifiedArtifact};
use lampyr_fiber::LocalBackend;
use lampyr_fiber::metrics::RuntimeMetrics;
use lampyr_fiber::runtime::{Capacity, check_ready, revision_pool};
use lampyr_process::pull_secrets::pull_credentials;
use lampyr_router::ScalerConfig;

use tokio::sync::watch;

use crate::config::{FleetKeySource, SecretKeyRef};
use crate::error::{FleetKeyError, LoadError};
use crate::share::{InstanceShare, NoShare};

/// Everything a load needs; shared by every Home's supervisor.
pub(crate) struct Loader {
    pub(crate) client: Client,
    /// The anonymous client: sealed templates, and artifacts the registry gives anyone.
    pub(crate) registry: RegistryClient,
    /// Which credentials the registries gave which artifacts, so a cached copy is not
    /// handed to a Home whose credentials may not read it.
    pub(crate) readers: ProvenReaders,
    pub(crate) cache: Cache,
    /// Bytes the cache may hold beyond what loaded Homes lease.
    pub(crate) cache_max_bytes: u64,
    pub(crate) fleet_key: FleetKeySource,
    pub(crate) template_repositories: Vec<Repository>,
    pub(crate) metrics: RuntimeMetrics,
    pub(crate) scaler: ScalerConfig,
    /// The instance's fiber slots and memory, shared by every Home's pool; unbounded when `None`.
    pub(crate) capacity: Option<Arc<Capacity>>,
    /// Which of its grant's instances this is, when the grant has several (it follows the grant).
    pub(crate) share: watch::Receiver<Option<InstanceShare>>,
}

impl Loader {
    /// Loads `home`: pulls and verifies what it pins, builds its pool with its
    /// policy and starts the scaler. Blocks on hashing and template loading:
    /// run it on a blocking thread (see `supervisor`).
    pub(crate) async fn load(&self, home: &Home) -> Result<(Arc<LocalBackend>, Lease), LoadError> {
        let spec = &home.spec;
        let mut policy = spec.policy.clone();
        policy.scaling = self.scaling(&spec.policy.scaling, &key_of(home))?;
        if !policy.env_refs.is_empty() {
            policy.env = self.resolve_env(home).await?;
            policy.env_refs.clear();
        }
        let (repo, digest) = registry_ref("spec.artifact", &spec.artifact)?;
        // Held while the Home is loaded: pruning the cache never removes its artifact.
        let lease = self.cache.lease(&digest)?;
        let artifact = match &spec.sealed_template {
            Some(template) => self.open_sealed(template, &digest).await?,
            None => self.pull_artifact(home, &repo, &digest).await?,
        };
        tracing::info!(home = %key_of(home), artifact = %artifact.digest, "verified; loading the template");
        let fiber_memory = fiber_memory(spec, artifact.sizes.memory);
        let min_scale = policy.scaling.min_scale;
        let account = self.capacity.as_ref().map(|c| Arc::new(c.account(min_scale, fiber_memory)));
        if let Some(account) = account.as_ref().filter(|a| a.reserved() < min_scale) {
            tracing::warn!(
                home = %key_of(home), min_scale, reserved = account.reserved(),
                "this instance has too few free slots for the Home's min-scale; reserved what is free"
            );
        }
        let unbounded = self.capacity.as_ref().map_or(self.scaler.max_fibers, |c| c.slots().min(self.scaler.max_fibers));
        let pool = revision_pool(&artifact, &policy, &spec.revision_name, unbounded, account, self.metrics.clone())
            .map_err(|e| LoadError::Pool { artifact: artifact.digest.clone(), source: Box::new(e) })?;
        if let Some(check) = &policy.readiness {
            check_ready(&pool, check).await?;
        }
        let backend = LocalBackend::start(pool, policy.scaling, self.scaler.clone()).await.map_err(LoadError::Start)?;
        self.prune_cache();
        Ok((backend, lease))
    }

    /// Pulls and verifies the Home's artifact as its pull credentials allow: anonymously once
    /// the registry gave it to anyone, else with its pull Secrets and its ServiceAccount's,
    /// asking the registry before a copy another Home's credentials cached is used.
    async fn pull_artifact(&self, home: &Home, repo: &Repository, digest: &str) -> Result<VerifiedArtifact, LoadError> {
        let client = if self.readers.is_public(repo, digest) { self.registry.clone() } else { self.client_for(home).await? };
        client
            .pull_verified_as_reader(repo, digest, &self.cache, &self.readers)
            .await
            .map_err(|e| LoadError::Pull { reference: home.spec.artifact.clone(), source: Box::new(e) })
    }

    /// A registry client with the Home's pull credentials (the anonymous one when it has none).
    async fn client_for(&self, home: &Home) -> Result<RegistryClient, LoadError> {
        let namespace = home.metadata.namespace.clone().unwrap_or_default();
        let spec = &home.spec;
        let credentials = pull_credentials(&self.client, &namespace, &spec.image_pull_secrets, spec.service_account_name.as_deref())
            .await
            .map_err(LoadError::PullCredentials)?;
        self.registry.with_credentials(credentials).map_err(|e| LoadError::Pull { reference: spec.artifact.clone(), source: Box::new(e) })
    }

    /// Evicts least-recently-used artifacts no loaded Home leases, down to the cache limit.
    fn prune_cache(&self) {
        match self.cache.prune(self.cache_max_bytes) {
            Ok(p) if p.busy => tracing::debug!("cache prune skipped: another load is writing to the cache"),
            Ok(p) if !p.removed.is_empty() => tracing::info!(
                before = p.before,
                after = p.after,
                removed = p.removed.len(),
                in_use = p.in_use,
                limit = self.cache_max_bytes,
                "pruned the artifact cache"
            ),
            Ok(p) if p.after > self.cache_max_bytes => tracing::warn!(
                bytes = p.after,
                limit = self.cache_max_bytes,
                in_use = p.in_use,
                "the artifact cache is over its limit with only artifacts loaded Homes use"
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "pruning the artifact cache failed"),
        }
    }

    /// The Home's environment with its ConfigMap and Secret references read from its
    /// namespace (each object once), as a kubelet resolves a container's.
    async fn resolve_env(&self, home: &Home) -> Result<Vec<(String, String)>, LoadError> {
        let namespace = home.metadata.namespace.clone().unwrap_or_default();
        let policy = &home.spec.policy;
        let mut objects = std::collections::BTreeMap::new();
        for source in policy.env_refs.iter().map(|r| &r.source) {
            if let std::collections::btree_map::Entry::Vacant(e) = objects.entry((source.kind, source.name.clone())) {
                let data = self.read_env_source(&namespace, source).await;
                e.insert(data);
            }
        }
        policy
            .resolve_env(|source| objects.get(&(source.kind, source.name.clone())).cloned().unwrap_or(Ok(None)))
            .map_err(|e| LoadError::Env(format!("in namespace {namespace}: {e}")))
    }

    /// A ConfigMap's or Secret's data as text (`None` when it does not exist).
    async fn read_env_source(
        &self,
        namespace: &str,
        source: &lampyr_api::policy::EnvSource,
    ) -> Result<Option<std::collections::BTreeMap<String, String>>, String> {
        use lampyr_api::policy::EnvSourceKind;
        let text = |bytes: &k8s_openapi::ByteString| String::from_utf8_lossy(&bytes.0).into_owned();
        let forbidden = |e: kube::Error| format!("{e} (fiberd's service account needs get on it: the ClusterRole lampyr-fiberd)");
        match source.kind {
            EnvSourceKind::ConfigMap => {
                let api: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(self.client.clone(), namespace);
                Ok(api.get_opt(&source.name).await.map_err(forbidden)?.map(|cm| {
                    let mut data = cm.data.unwrap_or_default();
                    data.extend(cm.binary_data.unwrap_or_default().iter().map(|(k, v)| (k.clone(), text(v))));
                    data
                }))
            }
            EnvSourceKind::Secret => {
                let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
                Ok(api
                    .get_opt(&source.name)
                    .await
                    .map_err(forbidden)?
                    .map(|secret| secret.data.unwrap_or_default().iter().map(|(k, v)| (k.clone(), text(v))).collect()))
            }
        }
    }

    /// The scaling bounds this instance applies to a Home with `scaling`: its share when
    /// its grant has several instances.
    pub(crate) fn scaling(
        &self,
        scaling: &lampyr_api::policy::ScalingPolicy,
        home: &str,
    ) -> Result<lampyr_api::policy::ScalingPolicy, NoShare> {
        match *self.share.borrow() {
            Some(share) => share.scaling(scaling, home),
            None => Ok(scaling.clone()),
        }
    }

    /// Pulls sealed template `template`, checks it seals artifact `digest`, and opens it.
    async fn open_sealed(&self, template: &str, digest: &str) -> Result<VerifiedArtifact, LoadError> {
        let (repo, template_digest) = registry_ref("spec.sealedTemplate", template)?;
        check_admitted(template, &repo, &self.template_repositories)?;
        let key = self.fleet_key().await?;
        // The sealed blob is unreferenced until it is opened: no prune in between.
        let _writing = self.cache.write_guard()?;
        let pulled = self
            .registry
            .pull_template(&repo, &template_digest, &self.cache)
            .await
            .map_err(|e| LoadError::Pull { reference: template.to_string(), source: Box::new(e) })?;
        if pulled.artifact != digest {
            return Err(LoadError::TemplateMismatch {
                template: template.to_string(),
                sealed: pulled.artifact,
                artifact: digest.to_string(),
            });
        }
        open_artifact(&pulled.sealed, &key, digest, &self.cache)
            .map_err(|e| LoadError::Unseal { template: template.to_string(), source: Box::new(e) })
    }

    /// The fleet key, read now (so a new key is used by the next load).
    async fn fleet_key(&self) -> Result<FleetKey, FleetKeyError> {
        let from = self.fleet_key.clone();
        let text = match &from {
            FleetKeySource::Secret(secret) => self.secret_key(secret).await?,
            FleetKeySource::File(path) => match tokio::fs::read(path).await {
                Ok(bytes) => bytes,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(FleetKeyError::Missing { from }),
                Err(source) => return Err(FleetKeyError::Io { path: path.clone(), source }),
            },
        };
        parse_fleet_key(text, from)
    }

    /// The bytes of the fleet key's Secret key.
    async fn secret_key(&self, secret: &SecretKeyRef) -> Result<Vec<u8>, FleetKeyError> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &secret.namespace);
        let found = match api.get_opt(&secret.name).await {
            Ok(found) => found,
            Err(e) => return Err(FleetKeyError::Api { secret: secret.clone(), source: Box::new(e) }),
        };
        let Some(found) = found else { return Err(FleetKeyError::Missing { from: FleetKeySource::Secret(secret.clone()) }) };
        let Some(bytes) = found.data.and_then(|mut d| d.remove(&secret.key)) else {
            return Err(FleetKeyError::NoKey { secret: secret.clone() });
        };
        Ok(bytes.0)
    }
}

/// The fleet key in `bytes`, read from `from`.
pub(crate) fn parse_fleet_key(bytes: Vec<u8>, from: FleetKeySource) -> Result<FleetKey, FleetKeyError> {
    let Ok(text) = String::from_utf8(bytes) else { return Err(FleetKeyError::NotText { from }) };
    FleetKey::parse(&text).map_err(|source| FleetKeyError::Invalid { from, source })
}

/// Guest memory one fiber of the Home takes: what lampyr-controller placed it with, else
/// the policy's rule for the snapshot's memory.
pub(crate) fn fiber_memory(spec: &HomeSpec, snapshot_memory: u64) -> u64 {
    match u64::try_from(spec.fiber_memory_bytes) {
        Ok(placed) if placed > 0 => placed,
        _ => spec.policy.fiber_memory(snapshot_memory),
    }
}

/// Whether serving `new` in place of the loaded `old` needs a new pool: the
/// Revision, its artifact or template, or what the pool is built from (the
/// environment and its references, the arguments, the memory, `max-scale`) changed. The rest of the policy
/// (scaling, timeouts, concurrency) applies to a loaded pool as it is.
pub(crate) fn needs_new_pool(old: &HomeSpec, new: &HomeSpec) -> bool {
    let (a, b) = (&old.policy, &new.policy);
    old.revision_name != new.revision_name
        || old.artifact != new.artifact
        || old.sealed_template != new.sealed_template
        || old.grant_name != new.grant_name
        || old.fiber_memory_bytes != new.fiber_memory_bytes
        || a.env != b.env
        || a.env_refs != b.env_refs
        || a.args != b.args
        || a.memory_bytes != b.memory_bytes
        || a.scaling.max_scale != b.scaling.max_scale
}

/// The repository and digest of a Home's reference, which must name a registry
/// and be pinned by digest (plain HTTP is the client's choice, not the reference's).
fn registry_ref(field: &'static str, reference: &str) -> Result<(Repository, String), LoadError> {
    let bad = |reason: String| LoadError::BadReference { field, reference: reference.to_string(), reason };
    if reference.contains("://") {
        return Err(bad("a Home's references carry no scheme (fiberd's --plain-http-registry picks plain HTTP)".into()));
    }
    match ArtifactRef::parse(reference) {
        Ok(ArtifactRef::Registry { repository, digest }) => Ok((repository, digest)),
        Ok(ArtifactRef::Layout { .. }) => Err(bad("it names a local directory".into())),
        Err(e) => Err(bad(e.to_string())),
    }
}

/// Refuses a template whose repository none of `allowed` contains (none given: any is admitted).
fn check_admitted(template: &str, repository: &Repository, allowed: &[Repository]) -> Result<(), LoadError> {
    if allowed.is_empty() || allowed.iter().any(|a| a.contains(repository)) {
        return Ok(());
    }
    let allowed = allowed.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
    Err(LoadError::TemplateNotAllowed { template: template.to_string(), allowed })
}

/// `namespace/name` of a Home, for logs.
pub(crate) fn key_of(home: &Home) -> String {
    format!("{}/{}", home.metadata.namespace.as_deref().unwrap_or(""), home.metadata.name.as_deref().unwrap_or(""))
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn templates_come_only_from_the_admitted_repositories() {
        let allowed = [Repository::parse("http://registry.local:5000/lampyr/fiberd-templates").expect("valid")];
        let admitted = |text: &str| {
            let (repo, _) = registry_ref("spec.sealedTemplate", &format!("{text}@{D}")).expect("valid");
            check_admitted(text, &repo, &allowed)
        };
        assert!(admitted("registry.local:5000/lampyr/fiberd-templates").is_ok());
        assert!(admitted("registry.local:5000/lampyr/fiberd-templates/team").is_ok(), "below an entry");
        for refused in
            ["registry.local:5000/lampyr/fiberd-templates-x", "registry.local:5000/lampyr", "other.local:5000/lampyr/fiberd-templates"]
        {
            let err = admitted(refused).expect_err(refused);
            assert!(err.to_string().contains("is not in the installation's zygoteRegistries"), "{err}");
            assert!(err.to_string().contains("http://registry.local:5000/lampyr/fiberd-templates"), "{err}");
        }
        let (repo, _) = registry_ref("spec.sealedTemplate", &format!("anywhere.example.com/t@{D}")).expect("valid");
        assert!(check_admitted("anywhere.example.com/t", &repo, &[]).is_ok(), "no list: unrestricted");
    }

    #[test]
    fn only_what_the_pool_is_built_from_needs_a_new_pool() {
        let old = HomeSpec {
            revision_name: "r".into(),
            artifact: format!("127.0.0.1:5000/lampyr/hello@{D}"),
            sealed_template: None,
            grant_name: "g".into(),
            fiber_memory_bytes: 0,
            policy: lampyr_api::policy::FiberPolicy::default(),
            image_pull_secrets: Vec::new(),
            service_account_name: None,
        };
        type Change = fn(&mut HomeSpec);
        let applied: &[Change] = &[
            |s| s.policy.scaling.min_scale = 2,
            |s| s.policy.scaling.stable_window = std::time::Duration::from_secs(6),
            |s| s.policy.scaling.cluster = Some(lampyr_api::autoscaler::AutoscalerConfig::default().cluster_scaling()),
            |s| s.policy.timeouts.request = std::time::Duration::from_secs(10),
            |s| s.policy.container_concurrency = 1,
            // Who may pull matters only to a load; a loaded template stays.
            |s| s.image_pull_secrets = vec!["regcred".into()],
            |s| s.service_account_name = Some("puller".into()),
        ];
        for change in applied {
            let mut new = old.clone();
            change(&mut new);
            assert!(!needs_new_pool(&old, &new), "{:?}", new.policy);
        }
        let reloaded: &[Change] = &[
            |s| s.artifact = format!("127.0.0.1:5000/lampyr/other@{D}"),
            |s| s.sealed_template = Some(format!("127.0.0.1:5000/t@{D}")),
            |s| s.revision_name = "r2".into(),
            |s| s.policy.env = vec![("A".into(), "1".into())],
            |s| s.policy.args = vec!["--serve".into()],
            |s| {
                s.policy.env_refs = vec![lampyr_api::policy::EnvRef {
                    source: lampyr_api::policy::EnvSource {
                        kind: lampyr_api::policy::EnvSourceKind::Secret,
                        name: "s".into(),
                        optional: false,
                    },
                    key: None,
                    variable: None,
                    index: 0,
                    prefix: String::new(),
                }]
            },
            |s| s.policy.memory_bytes = Some(1 << 30),
            |s| s.policy.scaling.max_scale = 3,
            |s| s.fiber_memory_bytes = 64 << 20,
        ];
        for change in reloaded {
            let mut new = old.clone();
            change(&mut new);
            assert!(needs_new_pool(&old, &new), "{new:?}");
        }
    }

    #[test]
    fn home_references_are_pinned_registry_references_without_a_scheme() {
        let (repo, digest) = registry_ref("spec.artifact", &format!("127.0.0.1:5000/lampyr/hello@{D}")).expect("valid");
        assert_eq!((repo.registry.as_str(), repo.path.as_str(), digest.as_str()), ("127.0.0.1:5000", "lampyr/hello", D));
        assert!(!repo.plain_http);
        for bad in [
            format!("http://127.0.0.1:5000/lampyr/hello@{D}"),
            "127.0.0.1:5000/lampyr/hello:latest".to_string(),
            format!("/var/lib/layout@{D}"),
        ] {
            let err = registry_ref("spec.artifact", &bad).expect_err(&bad);
            assert!(err.to_string().starts_with("spec.artifact "), "{err}");
        }
    }
}
