//! `fiber-router`: the cluster's router. Routes to the Revisions the Homes
//! publish and implements KIngresses of its ingress class; see
//! `docs/fiber-router.md`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use lampyr_process::{kube_client, shutdown_signal};
use lampyr_router::peers::Peers;
use lampyr_router::{ClusterConfig, ClusterRoutes, Exposure, FiberdConfig, HttpLimits, Router, RouterConfig};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

/// mimalloc: a request's many small allocations (hyper's futures, headers, bodies) took about
/// a fifth of fiber-router's CPU under glibc's allocator (`benches/benches/router.rs`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// fiber-router in cluster mode.
#[derive(Parser, Debug)]
#[command(name = "fiber-router", version, about)]
struct Args {
    /// Internal listener, for the cluster's own traffic: every KIngress rule, and
    /// Revisions picked by the Knative-Serving-* headers.
    #[arg(long, default_value = "0.0.0.0:8080")]
    listen: SocketAddr,
    /// Public plain-HTTP listener: only ExternalIP KIngress rules.
    #[arg(long)]
    listen_public: Option<SocketAddr>,
    /// Public HTTPS listener: ExternalIP KIngress rules over TLS, certificates from their
    /// spec.tls Secrets by SNI. Without it, a KIngress asking for TLS is not programmed.
    #[arg(long)]
    listen_tls: Option<SocketAddr>,
    /// Admin listener: /healthz and /metrics only. Keep it out of every Service.
    #[arg(long, default_value = "0.0.0.0:9090")]
    listen_admin: SocketAddr,
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
    /// DNS name of this router's public Service (e.g. fiber-router-public.lampyr.svc.cluster.local),
    /// reported as the KIngress public load balancer's domainInternal; --service-dns when unset.
    #[arg(long)]
    public_service_dns: Option<String>,
    /// Largest request body forwarded, in bytes.
    #[arg(long, default_value_t = 8 * 1024 * 1024)]
    max_request_body: u64,
    /// Requests that may wait for an instance of one Revision; by default from its policy
    /// (10 per fiber of max-scale, 100 to 10,000).
    #[arg(long)]
    queue_capacity: Option<usize>,
    /// How long requests in flight may finish after SIGTERM, in seconds.
    #[arg(long, default_value = "30", value_parser = lampyr_process::flags::seconds)]
    drain_seconds: Duration,
    /// Longest an upgraded connection (a WebSocket) stays open with no byte either way, in
    /// seconds; then the router closes both sides.
    #[arg(long, default_value = "300", value_parser = lampyr_process::flags::positive_seconds)]
    upgraded_idle_seconds: Duration,
    /// This router's own Service, NAMESPACE/NAME/PORT-NAME (e.g. lampyr-system/fiber-router/http):
    /// a KIngress is reported Ready only once every ready replica behind it routes its spec.
    /// Unset: this process is the only router.
    #[arg(long, value_parser = peers)]
    peers: Option<Peers>,
}

/// Parses `NAMESPACE/NAME/PORT-NAME`.
fn peers(text: &str) -> Result<Peers, String> {
    match text.split('/').collect::<Vec<_>>()[..] {
        [namespace, service, port_name] if !namespace.is_empty() && !service.is_empty() && !port_name.is_empty() => {
            Ok(Peers { namespace: namespace.into(), service: service.into(), port_name: port_name.into() })
        }
        _ => Err(format!("{text:?} is not NAMESPACE/NAME/PORT-NAME")),
    }
}

fn main() -> ExitCode {
    lampyr_process::run_main("fiber-router", run(Args::parse()))
}

async fn run(args: Args) -> Result<(), String> {
    let client = kube_client(args.kubeconfig.as_deref()).await.map_err(|e| e.to_string())?;
    let registry = Registry::default();
    let router = Router::new(RouterConfig { drain_timeout: args.drain_seconds, ..RouterConfig::default() }, registry);
    let mut config = ClusterConfig::new(args.service_dns);
    config.ingress_class = Some(args.ingress_class).filter(|c| !c.is_empty());
    config.backend = FiberdConfig {
        max_request_body: args.max_request_body,
        limits: HttpLimits {
            upgraded_idle_timeout: args.upgraded_idle_seconds,
            upgraded: router.metrics().upgraded_connections.clone(),
            ..HttpLimits::default()
        },
        queue_capacity: args.queue_capacity.unwrap_or(FiberdConfig::default().queue_capacity),
    };
    config.fixed_queue_capacity = args.queue_capacity.is_some();
    config.peers = args.peers;
    config.tls = args.listen_tls.is_some();
    config.public_service_dns = args.public_service_dns;
    let routes = ClusterRoutes::start(std::sync::Arc::clone(&router), client, config);
    tracing::info!("listing Homes and KIngresses");
    routes.synced().await;

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let mut servers = Vec::new();
    let mut listeners = vec![(args.listen, Some(Exposure::Internal)), (args.listen_admin, Some(Exposure::Admin))];
    listeners.extend(args.listen_public.map(|a| (a, Some(Exposure::Public))));
    // None: the HTTPS listener (public).
    listeners.extend(args.listen_tls.map(|a| (a, None)));
    for (addr, exposure) in listeners {
        let listener = TcpListener::bind(addr).await.map_err(|e| format!("cannot listen on {addr}: {e}"))?;
        let local = listener.local_addr().map_err(|e| format!("reading the address of {addr}: {e}"))?;
        tracing::info!(address = %local, exposure = ?exposure.unwrap_or(Exposure::Public), tls = exposure.is_none(), "serving");
        let router = std::sync::Arc::clone(&router);
        let stopped = stopped(stop_rx.clone());
        servers.push(match exposure {
            Some(exposure) => tokio::spawn(router.serve_exposed(listener, exposure, stopped)),
            None => {
                let tls = lampyr_router::tls::server_config(std::sync::Arc::clone(&router)).map_err(|e| format!("setting up TLS: {e}"))?;
                tokio::spawn(router.serve_tls(listener, tls, stopped))
            }
        });
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
