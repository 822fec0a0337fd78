//! What every Lampyr controller binary shares: its flags for the API server,
//! the admin server and leader election, and the run loop that ties them to a
//! controller's work and to SIGTERM. Binaries stay thin `main`s over this.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;

use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};
use prometheus_client::registry::Registry;

use crate::admin::{AdminServer, Health};
use crate::leader::{LeaderElector, LeaderError, LeaseConfig};

/// Flags shared by the controller binaries.
#[derive(clap::Args, Debug, Clone)]
pub struct CommonArgs {
    /// Kubeconfig file; default: $KUBECONFIG, ~/.kube/config, or the in-cluster service account.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Address of the admin server (/metrics, /healthz, /readyz).
    #[arg(long, default_value = "0.0.0.0:9090")]
    pub metrics_addr: SocketAddr,
    /// Compete for a Lease and work only while holding it (one active replica).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// Namespace of the leader-election Lease.
    #[arg(long, default_value = "lampyr-system")]
    pub lease_namespace: String,
    /// This replica's identity in the Lease (default: $POD_NAME, else the host name plus pid).
    #[arg(long)]
    pub identity: Option<String>,
}

/// Why a controller process stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// No usable API server configuration.
    #[error("cannot reach the API server: {0}")]
    Config(String),
    /// The admin server could not bind.
    #[error("cannot serve /metrics on {addr}: {source}")]
    Admin {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// Leadership was lost or misconfigured; the process exits so its
    /// replacement starts over as a candidate.
    #[error(transparent)]
    Leader(#[from] LeaderError),
}

/// Logs to stderr through `tracing`, filtered by `RUST_LOG` (default `info`).
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
}

/// A client from `--kubeconfig`, or the default configuration.
pub async fn client(kubeconfig: Option<&PathBuf>) -> Result<Client, RunError> {
    // Two rustls providers are linked in (kube's ring, oci-client's aws-lc-rs):
    // choose one for the process before any TLS.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = match kubeconfig {
        Some(path) => {
            let file = Kubeconfig::read_from(path).map_err(|e| RunError::Config(format!("{}: {e}", path.display())))?;
            kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
                .await
                .map_err(|e| RunError::Config(format!("{}: {e}", path.display())))?
        }
        None => kube::Config::infer().await.map_err(|e| RunError::Config(e.to_string()))?,
    };
    Client::try_from(config).map_err(|e| RunError::Config(e.to_string()))
}

/// Runs `work` as controller `component`: serves the admin endpoints, holds
/// the Lease `<lease-namespace>/<component>` while working when leader
/// election is on, and stops cleanly on SIGTERM or Ctrl-C.
pub async fn run_controller<Work, Fut>(
    component: &str,
    args: &CommonArgs,
    registry: Registry,
    work: Work,
) -> Result<(), RunError>
where
    Work: FnOnce(Client, Health) -> Fut,
    Fut: Future<Output = ()>,
{
    let client = client(args.kubeconfig.as_ref()).await?;
    let health = Health::default();
    let admin = AdminServer::bind(args.metrics_addr, registry, health.clone())
        .await
        .map_err(|source| RunError::Admin { addr: args.metrics_addr, source })?;
    tokio::spawn(admin.serve(shutdown_signal()));
    let work = work(client.clone(), health.clone());
    let working = async move {
        tokio::select! {
            () = work => {}
            () = shutdown_signal() => tracing::info!(component, "shutting down"),
        }
    };
    if !args.leader_elect {
        working.await;
        return Ok(());
    }
    let identity = args.identity.clone().unwrap_or_else(default_identity);
    let leader = health.check("leader");
    leader.set_not_ready("waiting for the lease");
    let elector = LeaderElector::new(client, LeaseConfig::new(&args.lease_namespace, component, identity))?;
    let mut leading = elector.subscribe();
    tokio::spawn(async move {
        while leading.changed().await.is_ok() {
            if *leading.borrow() {
                leader.set_ready();
            } else {
                leader.set_not_ready("not the leader");
            }
        }
    });
    elector.run(working).await?;
    Ok(())
}

fn default_identity() -> String {
    if let Ok(pod) = std::env::var("POD_NAME") {
        return pod;
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    format!("{}-{}", host.trim(), std::process::id())
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
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
