//! `fiberd`: loads the Homes of its CapacityGrants and serves their fibers to
//! fiber-router. A thin main over `lampyr_fiberd::run`; see `docs/fiberd.md`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use lampyr_artifact::reference::{Repository, plain_http_registries};
use lampyr_fiberd::{FiberdConfig, FleetKeySource, InstanceShare, SecretKeyRef};
use lampyr_process::flags::{PemCertificates, pem_certificates, positive_seconds, registry_ca, seconds};
use lampyr_process::{kube_client, shutdown_signal};
use lampyr_router::ScalerConfig;
use tokio::net::TcpListener;

/// mimalloc: a request's many small allocations (hyper's futures, headers, bodies) took about
/// a fifth of fiber-router's CPU under glibc's allocator (`benches/benches/router.rs`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// fiberd: serves the fibers of the Homes of its CapacityGrants.
#[derive(Parser, Debug)]
#[command(name = "fiberd", version, about)]
struct Args {
    /// Instance name: its grant Pod's name (its entry in Home status, field manager fiberd/NAME).
    #[arg(long)]
    name: String,
    /// A CapacityGrant served: every Home whose spec.grantName it is (repeatable).
    #[arg(long = "grant", required = true)]
    grants: Vec<String>,
    /// Only Homes of this namespace (default: all namespaces).
    #[arg(long)]
    namespace: Option<String>,
    /// Where to serve forwarded requests, /healthz and /metrics.
    #[arg(long, default_value = "0.0.0.0:8080")]
    listen: SocketAddr,
    /// HOST:PORT written to Home status for fiber-router (default: the listen address,
    /// which must then not be a wildcard address).
    #[arg(long)]
    advertise: Option<String>,
    /// A registry (HOST:PORT) reached over plain HTTP (repeatable); others use HTTPS.
    #[arg(long = "plain-http-registry")]
    plain_http_registries: Vec<String>,
    /// A PEM file of certificate authorities registries may be signed by, besides the
    /// system's (default: $LAMPYR_REGISTRY_CA when set).
    #[arg(long, value_parser = pem_certificates)]
    registry_ca: Option<PemCertificates>,
    /// A repository sealed templates may come from (repeatable; `http://` in front for a
    /// plain-HTTP registry); with none, any repository.
    #[arg(long = "template-repository")]
    template_repositories: Vec<String>,
    /// Kubeconfig file; in-cluster configuration (or $KUBECONFIG) when unset.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Artifact cache (default: $LAMPYR_CACHE_DIR, else the user's cache directory).
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// Bytes the artifact cache may hold; least-recently-used artifacts no loaded Home uses
    /// are evicted past it.
    #[arg(long, default_value_t = lampyr_artifact::evict::DEFAULT_MAX_BYTES)]
    cache_max_bytes: u64,
    /// The fleet key's Secret, NAMESPACE/NAME (data key "key"), read through the API server.
    #[arg(long, default_value = "default/lampyr-fiberd-seal-key")]
    seal_key_secret: String,
    /// Read the fleet key from this file instead (the Secret's key mounted into the Pod).
    #[arg(long, conflicts_with = "seal_key_secret")]
    fleet_key_file: Option<PathBuf>,
    /// Fiber slots this instance holds for its grant, shared by every Home it serves (its share
    /// of the grant's fiberSlots); with none, each Home's max-scale is the only bound.
    #[arg(long, requires = "fiber_memory")]
    fiber_slots: Option<u32>,
    /// Guest memory in bytes this instance holds for its grant's fibers (its share of memoryBytes).
    #[arg(long, requires = "fiber_slots")]
    fiber_memory: Option<u64>,
    /// This instance's index among its grant's instances: it applies its share of each
    /// Home's min-scale, max-scale and initial-scale. Serving one --grant in one --namespace
    /// (a grant Pod), it follows the grant's spec.instances as it changes.
    #[arg(long)]
    instance_index: Option<u32>,
    /// The grant's instances (with --instance-index) until the grant is read; needed when
    /// fiberd does not follow one grant. Without it, no Home loads before the grant is read.
    #[arg(long, requires = "instance_index")]
    instances: Option<u32>,
    /// Seconds between scaler decisions.
    #[arg(long, default_value = "2", value_parser = positive_seconds)]
    scale_tick: Duration,
    /// Seconds without traffic before a Revision with min-scale 0 drops its last fiber, for
    /// Homes that carry no config-autoscaler settings (written by an older lampyr-controller).
    #[arg(long, default_value = "30", value_parser = seconds)]
    scale_to_zero_grace: Duration,
    /// Least seconds between two status writes for one Home (warm fiber updates).
    #[arg(long, default_value = "1", value_parser = positive_seconds)]
    status_interval: Duration,
    /// Homes loading at once.
    #[arg(long, default_value_t = 2)]
    max_concurrent_loads: usize,
    /// Sandboxes kept ready for Revisions waking from zero (0: none).
    #[arg(long, default_value_t = lampyr_fiber::runtime::spare::DEFAULT_TARGET)]
    spare_sandboxes: usize,
    /// Seconds requests in flight may finish after SIGTERM.
    #[arg(long, default_value = "30", value_parser = seconds)]
    drain_seconds: Duration,
    /// Seconds fiberd keeps accepting requests after SIGTERM once its status entries are
    /// removed, for routers that have not seen the removal yet.
    #[arg(long, default_value = "2", value_parser = seconds)]
    deregistration_seconds: Duration,
}

fn main() -> ExitCode {
    lampyr_process::run_main("fiberd", run(Args::parse()))
}

async fn run(args: Args) -> Result<(), String> {
    let config = config(&args)?;
    let client = kube_client(args.kubeconfig.as_deref()).await.map_err(|e| e.to_string())?;
    let listener = TcpListener::bind(args.listen).await.map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    lampyr_fiberd::run(config, client, listener, shutdown_signal()).await.map_err(|e| e.to_string())
}

fn config(args: &Args) -> Result<FiberdConfig, String> {
    let cache_dir = match &args.cache_dir {
        Some(dir) => dir.clone(),
        None => lampyr_artifact::cache::Cache::default_location().map_err(|e| format!("{e} (or give --cache-dir)"))?,
    };
    let mut config = FiberdConfig::new(args.name.clone(), args.grants.clone(), cache_dir);
    config.cache_max_bytes = args.cache_max_bytes;
    config.namespace = args.namespace.clone();
    config.advertise = args.advertise.clone();
    config.plain_http_registries = args.plain_http_registries.clone();
    config.registry_ca = registry_ca(args.registry_ca.as_ref())?;
    for text in &args.template_repositories {
        let repository = Repository::parse(text).map_err(|e| format!("--template-repository {text:?}: {e}"))?;
        config.template_repositories.push(repository);
    }
    for registry in plain_http_registries(&config.template_repositories) {
        if !config.plain_http_registries.contains(&registry) {
            config.plain_http_registries.push(registry);
        }
    }
    config.fleet_key = match &args.fleet_key_file {
        Some(path) => FleetKeySource::File(path.clone()),
        None => FleetKeySource::Secret(
            SecretKeyRef::parse(&args.seal_key_secret)
                .ok_or_else(|| format!("--seal-key-secret {:?}: expected NAMESPACE/NAME", args.seal_key_secret))?,
        ),
    };
    config.scaler = ScalerConfig { tick: args.scale_tick, scale_to_zero_grace_period: args.scale_to_zero_grace, ..ScalerConfig::default() };
    config.capacity = args.fiber_slots.zip(args.fiber_memory);
    // A count of 0: not known until the grant is read.
    config.instance = args.instance_index.map(|index| InstanceShare { index, count: args.instances.unwrap_or(0) });
    config.status_interval = args.status_interval;
    config.max_concurrent_loads = args.max_concurrent_loads;
    config.spare_sandboxes = args.spare_sandboxes;
    config.drain_timeout = args.drain_seconds;
    config.deregistration_delay = args.deregistration_seconds;
    Ok(config)
}
