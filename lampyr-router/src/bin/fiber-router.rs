//! `fiber-router`: the cluster's router. Routes to the Revisions the Homes
//! publish and implements KIngresses of its ingress class; see
//! `docs/fiber-router.md`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use kube::config::{KubeConfigOptions, Kubeconfig};
use lampyr_router::{ClusterConfig, ClusterRoutes, Exposure, FiberdConfig, HttpLimits, Router, RouterConfig};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

/// fiber-router in cluster mode.
#[derive(Parser, Debug)]
#[command(name = "fiber-router", version, about)]
struct Args {
    /// Internal listener: every KIngress rule, Revisions by Knative-Serving-* headers, /metrics, /healthz.
    #[arg(long, default_value = "0.0.0.0:8080")]
    listen: SocketAddr,
    /// Optional public listener: only ExternalIP KIngress rules (and /healthz).
    #[arg(long)]
    listen_public: Option<SocketAddr>,
    /// Kubeconfig file; in-cluster configuration (or $KUBECONFIG) when unset.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Ingress class of the KIngresses to implement; empty: implement none.
    #[arg(long, default_value = lampyr_api::keys::FIBER_INGRESS_CLASS)]
    ingress_class: String,
    /// DNS name of this router's Service (e.g. fiber-router.lampyr.svc.cluster.local),
    /// reported as the KIngress load balancers' domainInternal.
    #[arg(long)]
    service_dns: String,
    /// Largest request body forwarded, in bytes.
    #[arg(long, default_value_t = 8 * 1024 * 1024)]
    max_request_body: u64,
    /// Requests that may wait for an instance of one Revision; by default from its policy
    /// (10 per fiber of max-scale, 100 to 10,000).
    #[arg(long)]
    queue_capacity: Option<usize>,
    /// How long requests in flight may finish after SIGTERM, in seconds.
    #[arg(long, default_value_t = 30)]
    drain_seconds: u64,
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the async runtime");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), String> {
    // More than one rustls provider is linked in; kube's is ring.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = client(args.kubeconfig.as_deref()).await?;
    let registry = Registry::default();
    let router = Router::new(RouterConfig { drain_timeout: Duration::from_secs(args.drain_seconds), ..RouterConfig::default() }, registry);
    let mut config = ClusterConfig::new(args.service_dns);
    config.ingress_class = Some(args.ingress_class).filter(|c| !c.is_empty());
    config.backend = FiberdConfig {
        max_request_body: args.max_request_body,
        limits: HttpLimits::default(),
        queue_capacity: args.queue_capacity.unwrap_or(FiberdConfig::default().queue_capacity),
    };
    config.fixed_queue_capacity = args.queue_capacity.is_some();
    let routes = ClusterRoutes::start(std::sync::Arc::clone(&router), client, config);
    tracing::info!("listing Homes and KIngresses");
    routes.synced().await;

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let mut servers = Vec::new();
    let mut listeners = vec![(args.listen, Exposure::Internal)];
    listeners.extend(args.listen_public.map(|a| (a, Exposure::Public)));
    for (addr, exposure) in listeners {
        let listener = TcpListener::bind(addr).await.map_err(|e| format!("cannot listen on {addr}: {e}"))?;
        let local = listener.local_addr().map_err(|e| format!("reading the address of {addr}: {e}"))?;
        tracing::info!(address = %local, ?exposure, "serving");
        servers.push(tokio::spawn(std::sync::Arc::clone(&router).serve_exposed(listener, exposure, stopped(stop_rx.clone()))));
    }
    shutdown_signal().await;
    tracing::info!("shutting down: draining requests in flight");
    stop_tx.send_replace(true);
    for server in servers {
        let _ = server.await;
    }
    drop(routes);
    Ok(())
}

async fn client(kubeconfig: Option<&std::path::Path>) -> Result<kube::Client, String> {
    let config = match kubeconfig {
        Some(path) => {
            let file = Kubeconfig::read_from(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
            kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
                .await
                .map_err(|e| format!("loading {}: {e}", path.display()))?
        }
        None => kube::Config::infer().await.map_err(|e| format!("no Kubernetes configuration (in-cluster or kubeconfig): {e}"))?,
    };
    kube::Client::try_from(config).map_err(|e| format!("building a Kubernetes client: {e}"))
}

async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch SIGTERM; stopping on Ctrl-C only");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
