//! What one fiberd instance is and how it behaves.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use lampyr_api::keys::{FLEET_KEY_SECRET_KEY, FLEET_KEY_SECRET_NAME, FLEET_KEY_SECRET_NAMESPACE};
use lampyr_artifact::reference::Repository;
use lampyr_router::ScalerConfig;

use crate::share::InstanceShare;

/// A key of a Secret: where fiberd reads the fleet key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecretKeyRef {
    /// The Secret's namespace.
    pub namespace: String,
    /// The Secret's name.
    pub name: String,
    /// The key in its `data`.
    pub key: String,
}

impl SecretKeyRef {
    /// `default/lampyr-fiberd-seal-key`, data key `key`: where `ly deploy` writes the fleet key.
    pub fn fleet_key() -> Self {
        SecretKeyRef {
            namespace: FLEET_KEY_SECRET_NAMESPACE.to_string(),
            name: FLEET_KEY_SECRET_NAME.to_string(),
            key: FLEET_KEY_SECRET_KEY.to_string(),
        }
    }

    /// Parses `NAMESPACE/NAME`, with the fleet key's data key.
    pub fn parse(text: &str) -> Option<Self> {
        let (namespace, name) = text.split_once('/')?;
        let valid = |s: &str| !s.is_empty() && !s.contains('/');
        (valid(namespace) && valid(name)).then(|| SecretKeyRef {
            namespace: namespace.to_string(),
            name: name.to_string(),
            key: FLEET_KEY_SECRET_KEY.to_string(),
        })
    }
}

impl fmt::Display for SecretKeyRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret {}/{} (data key {:?})", self.namespace, self.name, self.key)
    }
}

/// Where fiberd reads the fleet key that opens sealed templates. It is read
/// again for every sealed load, so a rotated key is picked up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FleetKeySource {
    /// A Secret, read through the API server.
    Secret(SecretKeyRef),
    /// A file: the Secret's key mounted into the grant Pod.
    File(PathBuf),
}

impl fmt::Display for FleetKeySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FleetKeySource::Secret(secret) => secret.fmt(f),
            FleetKeySource::File(path) => write!(f, "file {}", path.display()),
        }
    }
}

/// Settings of one fiberd instance.
#[derive(Clone, Debug)]
pub struct FiberdConfig {
    /// Instance name: its grant Pod's name; its entry in `Home.status.instances`
    /// and its field manager `fiberd/<name>`.
    pub name: String,
    /// The CapacityGrants served: every Home whose `spec.grantName` is one of them.
    pub grants: Vec<String>,
    /// Only Homes of this namespace; all namespaces when `None`.
    pub namespace: Option<String>,
    /// `host:port` written to Home status; the listener's address when `None`
    /// (which must then not be a wildcard address).
    pub advertise: Option<String>,
    /// Registries (`host[:port]`) reached over plain HTTP; every other over HTTPS.
    pub plain_http_registries: Vec<String>,
    /// PEM certificate authorities registries may be signed by, besides the system's.
    pub registry_ca: Option<Vec<u8>>,
    /// Repositories sealed templates may be pulled from (the GrantPolicies' `zygoteRegistries`):
    /// a template is admitted when one is its repository or above it. Empty: any repository.
    pub template_repositories: Vec<Repository>,
    /// The content-addressed artifact cache.
    pub cache_dir: PathBuf,
    /// Bytes the cache may hold: after each load, least-recently-used artifacts no loaded
    /// Home uses are evicted down to it.
    pub cache_max_bytes: u64,
    /// Where the fleet key that opens sealed templates is.
    pub fleet_key: FleetKeySource,
    /// The scaler of every Revision's pool (as `ly run`'s); its `config-autoscaler`
    /// settings apply only to Homes whose policy carries none.
    pub scaler: ScalerConfig,
    /// Fiber slots and guest memory (bytes) this instance holds for its grant (its share
    /// of the grant's `fiberSlots` and `memoryBytes`), shared by every Home it serves;
    /// unbounded when `None` (only each Home's `max-scale` bounds its fibers).
    pub capacity: Option<(u32, u64)>,
    /// Which of its grant's instances this is: each applies its share of a Home's
    /// `min-scale`, `max-scale` and `initial-scale`; the whole policy when `None`. A
    /// `count` of 0 is learnt from the grant (see [`crate::run`]) before any Home loads.
    pub instance: Option<InstanceShare>,
    /// Least time between two status writes for one Home (warm fiber updates).
    pub status_interval: Duration,
    /// Homes loading at once; more wait their turn.
    pub max_concurrent_loads: usize,
    /// Sandboxes kept ready for Revisions waking from zero, shared by every Home
    /// ([`lampyr_fiber::runtime::spare`]; 0: none).
    pub spare_sandboxes: usize,
    /// Longest one load (pull, unseal, verify, template) may take.
    pub load_timeout: Duration,
    /// First wait before loading a Home again after it failed; doubles up to `retry_max`.
    pub retry_min: Duration,
    /// Longest wait between attempts to load a failing Home.
    pub retry_max: Duration,
    /// How long status entries may take to be removed at shutdown.
    pub shutdown_timeout: Duration,
    /// How long fiberd keeps accepting requests at shutdown after its status entries are
    /// removed: routers that have not yet seen the removal still reach it meanwhile.
    pub deregistration_delay: Duration,
    /// How long requests in flight may finish at shutdown.
    pub drain_timeout: Duration,
}

impl FiberdConfig {
    /// Instance `name` serving `grants`, caching artifacts in `cache_dir`, with defaults
    /// for the rest: all namespaces, the listener's address, HTTPS registries, the
    /// fleet key from [`SecretKeyRef::fleet_key`], a 10 GiB cache, `ly run`'s scaler, no capacity bound, status at most
    /// once a second per Home, 2 spare sandboxes, 2 loads at once of at most 5 minutes each, retries
    /// after 2 s doubling to 5 minutes, 10 s to clear status, 2 s more accepting, 30 s to drain.
    pub fn new(name: impl Into<String>, grants: Vec<String>, cache_dir: impl Into<PathBuf>) -> Self {
        FiberdConfig {
            name: name.into(),
            grants,
            namespace: None,
            advertise: None,
            plain_http_registries: Vec::new(),
            registry_ca: None,
            template_repositories: Vec::new(),
            cache_dir: cache_dir.into(),
            cache_max_bytes: lampyr_artifact::evict::DEFAULT_MAX_BYTES,
            fleet_key: FleetKeySource::Secret(SecretKeyRef::fleet_key()),
            scaler: ScalerConfig::default(),
            capacity: None,
            instance: None,
            status_interval: Duration::from_secs(1),
            max_concurrent_loads: 2,
            spare_sandboxes: lampyr_fiber::runtime::spare::DEFAULT_TARGET,
            load_timeout: Duration::from_secs(300),
            retry_min: Duration::from_secs(2),
            retry_max: Duration::from_secs(300),
            shutdown_timeout: Duration::from_secs(10),
            deregistration_delay: Duration::from_secs(2),
            drain_timeout: Duration::from_secs(30),
        }
    }

    /// The field manager of this instance's status entries.
    pub fn field_manager(&self) -> String {
        format!("fiberd/{}", self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_refs_parse_namespace_and_name() {
        let r = SecretKeyRef::parse("ns/key").expect("parses");
        assert_eq!((r.namespace.as_str(), r.name.as_str(), r.key.as_str()), ("ns", "key", "key"));
        for bad in ["", "ns", "/name", "ns/", "a/b/c"] {
            assert!(SecretKeyRef::parse(bad).is_none(), "{bad}");
        }
        assert_eq!(SecretKeyRef::fleet_key().to_string(), r#"Secret default/lampyr-fiberd-seal-key (data key "key")"#);
    }

    #[test]
    fn field_manager_names_the_instance() {
        assert_eq!(FiberdConfig::new("grant-0", vec!["g".into()], "/tmp/c").field_manager(), "fiberd/grant-0");
    }
}
