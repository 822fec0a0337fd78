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
use lampyr_router::{ClusterConfig, ClusterRoutes, Exposure, FiberdConfig, HttpLimits, Listen, Router, RouterConfig, Workers};
use prometheus_client::registry::Registry;

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
    /// Threads serving requests, each with its own socket of every listener and its own
    /// upstream connections; by default one per CPU the process may use.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    serving_threads: Option<u16>,
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

    let mut listens = vec![Listen::plain(args.listen, Exposure::Internal), Listen::plain(args.listen_admin, Exposure::Admin)];
    listens.extend(args.listen_public.map(|a| Listen::plain(a, Exposure::Public)));
    if let Some(addr) = args.listen_tls {
        let tls = lampyr_router::tls::server_config(std::sync::Arc::clone(&router)).map_err(|e| format!("setting up TLS: {e}"))?;
        listens.push(Listen { addr, exposure: Exposure::Public, tls: Some(tls) });
    }
    let threads = args.serving_threads.map(usize::from).unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from));
    let workers = Workers::start(&router, &listens, threads, "serving").map_err(|e| e.to_string())?;
    for (listen, address) in listens.iter().zip(workers.local_addrs()) {
        tracing::info!(%address, exposure = ?listen.exposure, tls = listen.tls.is_some(), threads, "serving");
    }
    shutdown_signal().await;
    tracing::info!("shutting down: draining requests in flight");
    workers.stop().await;
    drop(routes);
    Ok(())
}
