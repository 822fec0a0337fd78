//! `lampyr-controller`: the Fiber Revision reconciler. Wires flags, tracing,
//! the admin server and leader election to `lampyr_reconcile::revision::run`;
//! see `docs/lampyr-controller.md`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};
use lampyr_api::duration::parse_go_duration;
use lampyr_reconcile::admin::{AdminServer, Health};
use lampyr_reconcile::leader::{LeaderElector, LeaseConfig};
use lampyr_reconcile::revision::{self, Context, ControllerConfig, Metrics};
use prometheus_client::registry::Registry;
use tokio::sync::watch;

/// Flags of lampyr-controller.
#[derive(Parser, Debug)]
#[command(name = "lampyr-controller", version, about = "Reconciles Knative Revisions into Lampyr Homes, CapacityGrants and Services")]
struct Args {
    /// Kubeconfig file; default: $KUBECONFIG, ~/.kube/config, or the in-cluster service account.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// DNS name of the fiber-router Service that every Revision's ExternalName Service points at.
    #[arg(long, default_value = "fiber-router.lampyr-system.svc.cluster.local")]
    router_service: String,
    /// fiberd image of grant Pods, pinned by digest (registry/repository@sha256:…).
    #[arg(long)]
    grant_image: String,
    /// Helper image of grant Pods, pinned by digest.
    #[arg(long)]
    helper_image: String,
    /// Grant Pods per CapacityGrant.
    #[arg(long, default_value_t = 1)]
    grant_instances: i32,
    /// Fiber slots of a grant whose Revision sets no max-scale.
    #[arg(long, default_value_t = 10)]
    default_fiber_slots: u32,
    /// A registry (host:port) to pull artifacts from over plain HTTP; repeatable.
    #[arg(long = "plain-http-registry")]
    plain_http_registries: Vec<String>,
    /// Content cache for pulled artifacts.
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// Reconcile Revisions of this namespace only (default: all namespaces).
    #[arg(long)]
    namespace: Option<String>,
    /// Revisions reconciled at once.
    #[arg(long, default_value_t = 8)]
    concurrency: u16,
    /// Reconcile every Revision at least this often (Go duration).
    #[arg(long, default_value = "5m", value_parser = duration)]
    resync: Duration,
    /// How long a new Revision may take to have its template loaded before it
    /// is `ProgressDeadlineExceeded` (Go duration; a Revision's
    /// `serving.knative.dev/progress-deadline` annotation overrides it).
    #[arg(long, default_value = "10m", value_parser = duration)]
    progress_deadline: Duration,
    /// Address of the admin server (/metrics, /healthz, /readyz).
    #[arg(long, default_value = "0.0.0.0:9090")]
    metrics_addr: SocketAddr,
    /// Compete for a Lease and reconcile only while holding it (one active replica).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    leader_elect: bool,
    /// Namespace of the leader-election Lease.
    #[arg(long, default_value = "lampyr-system")]
    lease_namespace: String,
    /// Name of the leader-election Lease.
    #[arg(long, default_value = "lampyr-controller")]
    lease_name: String,
    /// This replica's identity in the Lease (default: $POD_NAME, else host name and pid).
    #[arg(long)]
    identity: Option<String>,
    /// How long a Lease holder's claim lasts without renewal (Go duration).
    #[arg(long, default_value = "15s", value_parser = duration)]
    lease_duration: Duration,
    /// How long the holder keeps trying to renew before it stops reconciling (Go duration).
    #[arg(long, default_value = "10s", value_parser = duration)]
    renew_deadline: Duration,
    /// How often candidates try the Lease and the holder renews it (Go duration).
    #[arg(long, default_value = "2s", value_parser = duration)]
    retry_period: Duration,
}

fn duration(text: &str) -> Result<Duration, String> {
    parse_go_duration(text)
        .map_err(|e| e.to_string())?
        .non_negative()
        .ok_or_else(|| format!("{text:?} must not be negative"))
}

#[tokio::main]
async fn main() -> ExitCode {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    match run(Args::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(%error, "lampyr-controller stopped");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), String> {
    let client = client(args.kubeconfig.as_ref()).await?;
    let mut config = ControllerConfig::new(&args.router_service, &args.grant_image, &args.helper_image);
    config.grant.instances = args.grant_instances;
    config.grant.default_fiber_slots = args.default_fiber_slots;
    config.plain_http_registries = args.plain_http_registries.clone();
    if let Some(dir) = &args.cache_dir {
        config.cache_dir = dir.clone();
    }
    config.namespace = args.namespace.clone();
    config.concurrency = args.concurrency;
    config.resync = args.resync;
    config.progress_deadline = args.progress_deadline;

    let metrics = Metrics::default();
    let mut registry = Registry::default();
    metrics.register(&mut registry);
    let context = Arc::new(Context::new(client.clone(), config, metrics.clone()).map_err(|e| e.to_string())?);

    let (stop, stopping) = watch::channel(false);
    tokio::spawn(async move {
        shutdown_signal().await;
        tracing::info!("shutting down");
        let _ = stop.send(true);
    });
    let stopped = move || {
        let mut stopping = stopping.clone();
        async move {
            let _ = stopping.wait_for(|s| *s).await;
        }
    };

    let health = Health::default();
    let api = health.check("api");
    let admin = AdminServer::bind(args.metrics_addr, registry, health)
        .await
        .map_err(|e| format!("cannot serve /metrics on {}: {e}", args.metrics_addr))?;
    tracing::info!(addr = %admin.local_addr().map_err(|e| e.to_string())?, "admin server: /metrics /healthz /readyz");
    tokio::spawn(admin.serve(stopped()));
    revision::check_crds(&client).await.map_err(|e| e.to_string())?;
    api.set_ready();

    let work = revision::run(context, stopped());
    if !args.leader_elect {
        metrics.leader.set(1);
        return work.await.map_err(|e| e.to_string());
    }
    let identity = args.identity.clone().unwrap_or_else(default_identity);
    let lease = LeaseConfig {
        lease_duration: args.lease_duration,
        renew_deadline: args.renew_deadline,
        retry_period: args.retry_period,
        ..LeaseConfig::new(&args.lease_namespace, &args.lease_name, &identity)
    };
    let elector = LeaderElector::new(client, lease).map_err(|e| e.to_string())?;
    let mut leading = elector.subscribe();
    let gauge = metrics.leader.clone();
    tokio::spawn(async move {
        while leading.changed().await.is_ok() {
            gauge.set(i64::from(*leading.borrow()));
        }
    });
    let leading = elector.subscribe();
    tracing::info!(identity, lease = %format!("{}/{}", args.lease_namespace, args.lease_name), "waiting for the lease");
    // A standby stops at once on a signal; a leader finishes its reconciles and releases the lease.
    let standby_exit = async move {
        stopped().await;
        if *leading.borrow() {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        result = elector.run(work) => match result {
            Ok(done) => done.map_err(|e| e.to_string()),
            Err(lost) => Err(lost.to_string()),
        },
        () = standby_exit => Ok(()),
    }
}

async fn client(kubeconfig: Option<&PathBuf>) -> Result<Client, String> {
    // Two rustls providers are linked in (kube's ring, oci-client's aws-lc-rs):
    // choose one for the process before any TLS.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = match kubeconfig {
        Some(path) => {
            let file = Kubeconfig::read_from(path).map_err(|e| format!("{}: {e}", path.display()))?;
            kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
                .await
                .map_err(|e| format!("{}: {e}", path.display()))?
        }
        None => kube::Config::infer().await.map_err(|e| format!("no Kubernetes configuration: {e}"))?,
    };
    Client::try_from(config).map_err(|e| e.to_string())
}

fn default_identity() -> String {
    let base = std::env::var("POD_NAME").unwrap_or_else(|_| {
        std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string()).unwrap_or_default()
    });
    format!("{base}-{}", std::process::id())
}

async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
}
