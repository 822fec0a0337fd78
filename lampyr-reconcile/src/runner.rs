//! What every Lampyr controller binary shares: its flags for the API server,
//! the admin server and leader election, and the run loop that ties them to a
//! controller's work and to SIGTERM. Binaries stay thin `main`s over this;
//! process setup (logging, runtime, client, signals) is `lampyr_process`'s.

use std::fmt::Display;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use kube::Client;
use lampyr_process::flags::go_duration;
use lampyr_process::{ClientError, default_identity, kube_client, shutdown_signal};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::sync::watch;

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
    /// Name of the leader-election Lease (default: the controller's name).
    #[arg(long)]
    pub lease_name: Option<String>,
    /// This replica's identity in the Lease (default: $POD_NAME, else the host name plus pid).
    #[arg(long)]
    pub identity: Option<String>,
    /// How long a Lease holder's claim lasts without renewal (Go duration).
    #[arg(long, default_value = "15s", value_parser = go_duration)]
    pub lease_duration: Duration,
    /// How long the holder keeps trying to renew before it stops working (Go duration).
    #[arg(long, default_value = "10s", value_parser = go_duration)]
    pub renew_deadline: Duration,
    /// How often candidates try the Lease and the holder renews it (Go duration).
    #[arg(long, default_value = "2s", value_parser = go_duration)]
    pub retry_period: Duration,
}

impl CommonArgs {
    /// A client from `--kubeconfig`, or the inferred configuration.
    pub async fn client(&self) -> Result<Client, ClientError> {
        kube_client(self.kubeconfig.as_deref()).await
    }

    /// The Lease controller `component` competes for: `--lease-name` (default
    /// `component`) in `--lease-namespace`, as `--identity`, with the flags' timings.
    pub fn lease_config(&self, component: &str) -> LeaseConfig {
        let name = self.lease_name.as_deref().unwrap_or(component);
        let identity = self.identity.clone().unwrap_or_else(default_identity);
        LeaseConfig {
            lease_duration: self.lease_duration,
            renew_deadline: self.renew_deadline,
            retry_period: self.retry_period,
            ..LeaseConfig::new(&self.lease_namespace, name, identity)
        }
    }
}

/// Why a controller process stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// No usable API server configuration.
    #[error(transparent)]
    Client(#[from] ClientError),
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
    /// The controller's own preparation or work failed.
    #[error("{0}")]
    Work(String),
}

/// The process is stopping (SIGTERM or Ctrl-C): each [`Stopping::stopped`] completes then.
#[derive(Clone)]
pub struct Stopping(watch::Receiver<bool>);

impl Stopping {
    /// Follows SIGTERM and Ctrl-C from now on.
    fn on_signal() -> Self {
        let (stop, stopping) = watch::channel(false);
        tokio::spawn(async move {
            shutdown_signal().await;
            tracing::info!("shutting down");
            let _ = stop.send(true);
        });
        Stopping(stopping)
    }

    /// Completes once the process is stopping.
    pub fn stopped(&self) -> impl Future<Output = ()> + Send + Sync + use<> {
        let mut stopping = self.0.clone();
        async move {
            let _ = stopping.wait_for(|stop| *stop).await;
        }
    }
}

/// Runs controller `component`: serves the admin endpoints (`registry`, and the
/// readiness checks `prepare` registers), prepares on every replica, then works
/// while holding the Lease [`CommonArgs::lease_config`] names when leader election
/// is on, with `leader` (when given) at 1 while it does.
///
/// `prepare` is called before the admin server starts (register readiness checks
/// in its synchronous part), then awaited; it returns the work, which must finish
/// once [`Stopping::stopped`] completes. On SIGTERM a standby exits at once and a
/// leader lets its work finish, then releases the Lease.
pub async fn run_controller<Prepare, Ready, Work, E>(
    component: &str,
    args: &CommonArgs,
    registry: Registry,
    leader: Option<Gauge>,
    prepare: Prepare,
) -> Result<(), RunError>
where
    Prepare: FnOnce(Client, Health, Stopping) -> Ready,
    Ready: Future<Output = Result<Work, E>>,
    Work: Future<Output = Result<(), E>>,
    E: Display,
{
    let client = args.client().await?;
    let health = Health::default();
    let stopping = Stopping::on_signal();
    let ready = prepare(client.clone(), health.clone(), stopping.clone());
    let admin = AdminServer::bind(args.metrics_addr, registry, health)
        .await
        .map_err(|source| RunError::Admin { addr: args.metrics_addr, source })?;
    if let Ok(addr) = admin.local_addr() {
        tracing::info!(component, %addr, "admin server: /metrics /healthz /readyz");
    }
    tokio::spawn(admin.serve(stopping.stopped()));
    let work = ready.await.map_err(|e| RunError::Work(e.to_string()))?;
    let work = async move { work.await.map_err(|e| RunError::Work(e.to_string())) };
    if !args.leader_elect {
        if let Some(gauge) = &leader {
            gauge.set(1);
        }
        return work.await;
    }
    // A standby replica is ready too: readiness gated on the lease would keep a
    // Deployment's new Pod unready while the old one holds the lease, and a rolling
    // update would never finish.
    let lease = args.lease_config(component);
    tracing::info!(component, identity = %lease.identity, lease = %format!("{}/{}", lease.namespace, lease.name), "waiting for the lease");
    let elector = LeaderElector::new(client, lease)?;
    let mut changes = elector.subscribe();
    let component_name = component.to_string();
    tokio::spawn(async move {
        while changes.changed().await.is_ok() {
            let leading = *changes.borrow();
            tracing::info!(component = %component_name, leader = leading, "leadership changed");
            if let Some(gauge) = &leader {
                gauge.set(i64::from(leading));
            }
        }
    });
    let leading = elector.subscribe();
    let standby_exit = async move {
        stopping.stopped().await;
        if *leading.borrow() {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        result = elector.run(work) => result?,
        () = standby_exit => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        common: CommonArgs,
    }

    #[test]
    fn the_lease_defaults_to_the_component_and_client_go_timings() {
        let flags = Flags::parse_from(["controller", "--identity=replica-a"]);
        let lease = flags.common.lease_config("fiberd-k8s-controller");
        assert_eq!((lease.namespace.as_str(), lease.name.as_str()), ("lampyr-system", "fiberd-k8s-controller"));
        assert_eq!(lease.identity, "replica-a");
        let defaults = LeaseConfig::new("", "", "");
        assert_eq!(
            (lease.lease_duration, lease.renew_deadline, lease.retry_period),
            (defaults.lease_duration, defaults.renew_deadline, defaults.retry_period)
        );
    }

    #[test]
    fn the_lease_flags_set_its_name_and_timings() {
        let flags = Flags::parse_from([
            "controller",
            "--lease-namespace=ops",
            "--lease-name=mine",
            "--lease-duration=3s",
            "--renew-deadline=2s",
            "--retry-period=500ms",
        ]);
        let lease = flags.common.lease_config("fiberd-k8s-controller");
        assert_eq!((lease.namespace.as_str(), lease.name.as_str()), ("ops", "mine"));
        assert_eq!(
            (lease.lease_duration, lease.renew_deadline, lease.retry_period),
            (Duration::from_secs(3), Duration::from_secs(2), Duration::from_millis(500))
        );
        assert!(!lease.identity.is_empty());
        assert!(Flags::try_parse_from(["controller", "--retry-period=-1s"]).is_err());
    }
}
