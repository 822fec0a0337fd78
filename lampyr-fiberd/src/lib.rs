//! fiberd: the node daemon that loads the Homes of its grants and serves
//! their fibers to fiber-router. See `docs/fiberd.md`; the contract it
//! implements is `docs/cluster.md`.
//!
//! [`run`] watches Homes and, for each whose `spec.grantName` is one of its
//! grants:
//! 1. pulls `spec.sealedTemplate` (and opens it with the fleet key from its
//!    Secret) or else `spec.artifact`, by digest, and verifies it — an
//!    artifact that fails verification is never run;
//! 2. builds the Revision's fiber pool with `spec.policy`, scaled by `ly run`'s
//!    scaler (to zero and back);
//! 3. serves it to requests carrying `Knative-Serving-Namespace` and
//!    `Knative-Serving-Revision` (`404` for a Revision it does not hold);
//! 4. reports its own entry of `status.instances` by server-side apply with
//!    field manager `fiberd/<name>`: `address`, `loaded`, `message`,
//!    `observedGeneration`, `warmFibers`.
//!
//! A new generation is loaded beside the old one, which serves until the new
//! one replaces it; a deleted Home's pool is dropped; at shutdown the entries
//! are removed before requests in flight drain.
//!
//! [`preflight`] is the grant Pod's init step, `fiberd-helper`: it checks the
//! node can run fibers (KVM) and the Pod's volumes are usable before fiberd starts.

mod config;
mod daemon;
mod error;
mod grant;
mod load;
pub mod preflight;
mod share;
mod status;

use std::future::Future;
use std::sync::Arc;

use kube::Client;
use kube::api::Api;
use lampyr_api::Home;
use lampyr_artifact::cache::Cache;
use lampyr_artifact::credentials::Credentials;
use lampyr_artifact::readers::ProvenReaders;
use lampyr_artifact::registry::{RegistryAccess, RegistryClient};
use lampyr_fiber::metrics::RuntimeMetrics;
use lampyr_router::{Router, RouterConfig};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, oneshot, watch};

pub use config::{FiberdConfig, FleetKeySource, SecretKeyRef};
pub use error::{FiberdError, FleetKeyError, LoadError};
pub use share::{InstanceShare, NoShare};

/// Runs fiberd with `config`, reaching the API server with `client` and serving
/// forwarded requests (and `/healthz`, `/metrics`) on `listener`, until
/// `shutdown` resolves. Then it removes its status entries (within
/// [`FiberdConfig::shutdown_timeout`]), keeps accepting for
/// [`FiberdConfig::deregistration_delay`], stops accepting, and lets requests in
/// flight finish (within [`FiberdConfig::drain_timeout`]).
///
/// The client's identity needs `list` and `watch` on `homes`, `patch` on
/// `homes/status`, `get` on the fleet key's Secret (unless the key is read
/// from a file), and `list` and `watch` on `capacitygrants` for an instance
/// that follows its grant (see `followed_grant`).
pub async fn run(
    config: FiberdConfig,
    client: Client,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), FiberdError> {
    check(&config)?;
    let local = listener.local_addr().map_err(FiberdError::Listener)?;
    let address = match &config.advertise {
        Some(address) => address.clone(),
        None if local.ip().is_unspecified() => {
            return Err(FiberdError::Config(format!(
                "listening on {local}, a wildcard address: give the address fiber-router reaches this instance at (--advertise HOST:PORT)"
            )));
        }
        None => local.to_string(),
    };
    let access = RegistryAccess { credentials: Credentials::Anonymous, ca_pem: config.registry_ca.clone() };
    let registry = RegistryClient::with_access(config.plain_http_registries.clone(), access)?;
    let mut metrics_registry = Registry::default();
    let metrics = RuntimeMetrics::default();
    metrics.register(&mut metrics_registry);
    let router = Router::new(RouterConfig { drain_timeout: config.drain_timeout, ..RouterConfig::default() }, metrics_registry);
    let share = Arc::new(watch::Sender::new(config.instance.filter(|i| i.count > 0)));
    if let Some(grant) = followed_grant(&config) {
        follow_grant(&client, &config, grant, &share).await;
    }
    let loader = load::Loader {
        client: client.clone(),
        registry,
        readers: ProvenReaders::default(),
        cache: Cache::new(&config.cache_dir),
        cache_max_bytes: config.cache_max_bytes,
        fleet_key: config.fleet_key.clone(),
        template_repositories: config.template_repositories.clone(),
        metrics,
        scaler: config.scaler.clone(),
        capacity: config.capacity.map(|(slots, memory)| lampyr_fiber::runtime::Capacity::new(slots, memory)),
        share: share.subscribe(),
    };
    let homes: Api<Home> = match &config.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    tracing::info!(
        name = %config.name, grants = ?config.grants, namespace = config.namespace.as_deref().unwrap_or("(all)"),
        listen = %local, advertise = %address, "fiberd starting"
    );
    lampyr_fiber::runtime::spare::set_target(config.spare_sandboxes);
    let shared = Arc::new(daemon::Shared {
        status: status::StatusWriter::new(client, config.field_manager()),
        loads: Arc::new(Semaphore::new(config.max_concurrent_loads)),
        share,
        table: daemon::Table::new(Arc::clone(&router)),
        loader: Arc::new(loader),
        address,
        config,
    });

    let (stop_serving, serving) = watch::channel(false);
    let server = tokio::spawn(Arc::clone(&router).serve(listener, async move {
        let mut serving = serving;
        let _ = serving.wait_for(|stop| *stop).await;
    }));
    let (stop_watching, watching) = oneshot::channel();
    let deregistration = shared.config.deregistration_delay;
    let watch = tokio::spawn(daemon::watch_homes(shared, homes, watching));

    shutdown.await;
    tracing::info!("shutting down: removing status entries, then draining requests in flight");
    let _ = stop_watching.send(());
    if let Err(e) = watch.await {
        tracing::error!(error = %e, "the Home watch ended abnormally");
    }
    tracing::info!(delay = ?deregistration, "status entries removed; accepting requests a little longer, for routers that have not seen it yet");
    tokio::time::sleep(deregistration).await;
    stop_serving.send_replace(true);
    if let Err(e) = server.await {
        tracing::error!(error = %e, "the server ended abnormally");
    }
    Ok(())
}

/// Refuses a configuration fiberd cannot work with, naming the flag to fix.
fn check(config: &FiberdConfig) -> Result<(), FiberdError> {
    if config.name.is_empty() {
        return Err(FiberdError::Config("the instance needs a name (--name, its grant Pod's name)".into()));
    }
    if config.grants.is_empty() || config.grants.iter().any(String::is_empty) {
        return Err(FiberdError::Config("give the CapacityGrants this instance serves (--grant NAME, repeatable)".into()));
    }
    if let Some(advertise) = &config.advertise {
        let port = advertise.rsplit_once(':').and_then(|(host, port)| (!host.is_empty()).then_some(port));
        if port.and_then(|p| p.parse::<u16>().ok()).is_none_or(|p| p == 0) {
            return Err(FiberdError::Config(format!("--advertise {advertise:?}: expected HOST:PORT")));
        }
    }
    if config.capacity.is_some_and(|(slots, memory)| slots == 0 || memory == 0) {
        return Err(FiberdError::Config("the instance's fiber slots and memory must be at least 1 (--fiber-slots, --fiber-memory)".into()));
    }
    if config.instance.is_some_and(|i| i.count > 0 && i.index >= i.count) {
        return Err(FiberdError::Config("--instance-index must be below --instances".into()));
    }
    if config.instance.is_some_and(|i| i.count == 0) && followed_grant(config).is_none() {
        return Err(FiberdError::Config(
            "--instances is needed unless fiberd serves one grant (--grant) of one namespace (--namespace), whose count it follows".into(),
        ));
    }
    if config.max_concurrent_loads == 0 {
        return Err(FiberdError::Config("at least one load must be allowed at once".into()));
    }
    if config.status_interval.is_zero() {
        return Err(FiberdError::Config("the status interval must be positive".into()));
    }
    Ok(())
}

/// The grant an instance follows: with `--instance-index`, one grant and one namespace
/// (a grant Pod), the grant's `spec.instances` sets the instance count, live;
/// `--instances` holds until the grant is read, and where no such grant exists.
fn followed_grant(config: &FiberdConfig) -> Option<&str> {
    match (&config.instance, config.grants.as_slice(), &config.namespace) {
        (Some(_), [grant], Some(_)) => Some(grant),
        _ => None,
    }
}

/// Starts following `grant` and waits until it was read, so no Home loads with a share the
/// grant no longer gives: at most [`grant::FIRST_LISTING`] when `--instances` gave a count
/// meanwhile, else for as long as it takes (the instance serves nothing until then).
async fn follow_grant(client: &Client, config: &FiberdConfig, grant: &str, share: &Arc<watch::Sender<Option<InstanceShare>>>) {
    let (Some(instance), Some(namespace)) = (config.instance, &config.namespace) else { return };
    let api = Api::namespaced(client.clone(), namespace);
    let (listed, first) = oneshot::channel();
    let (follower, name) = (Arc::clone(share), grant.to_string());
    tokio::spawn(async move { grant::follow(api, name, instance.index, &follower, listed).await });
    if tokio::time::timeout(grant::FIRST_LISTING, first).await.is_ok() {
        return;
    }
    if instance.count > 0 {
        tracing::warn!(grant, timeout = ?grant::FIRST_LISTING, "the grant was not read in time; loading Homes with --instances meanwhile");
    } else {
        tracing::warn!(grant, "the grant has not been read; no Home loads until it is (may this Pod list and watch capacitygrants?)");
        let _ = share.subscribe().wait_for(Option::is_some).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unusable_configurations_name_what_to_fix() {
        let ok = FiberdConfig::new("grant-0", vec!["g".into()], "/tmp/cache");
        assert!(check(&ok).is_ok());
        let with = |f: &dyn Fn(&mut FiberdConfig)| {
            let mut c = ok.clone();
            f(&mut c);
            check(&c).expect_err("refused").to_string()
        };
        assert!(with(&|c| c.name.clear()).contains("--name"));
        assert!(with(&|c| c.grants.clear()).contains("--grant"));
        assert!(with(&|c| c.max_concurrent_loads = 0).contains("load"));
        assert!(with(&|c| c.capacity = Some((0, 1 << 20))).contains("--fiber-slots"));
        assert!(with(&|c| c.instance = Some(InstanceShare { index: 2, count: 2 })).contains("--instance-index"));
        for bad in ["10.0.0.7", ":8080", "10.0.0.7:x", "10.0.0.7:0"] {
            assert!(with(&|c| c.advertise = Some(bad.into())).contains("HOST:PORT"), "{bad}");
        }
        for good in ["10.0.0.7:8080", "grant-0.fibers.svc:8080", "[::1]:8080"] {
            let mut c = ok.clone();
            c.advertise = Some(good.into());
            assert!(check(&c).is_ok(), "{good}");
        }
    }
}
