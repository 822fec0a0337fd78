//! What every Lampyr controller binary shares: its flags for the API server,
//! the admin server and leader election, and the run loop that ties them to a
//! controller's work and to SIGTERM. Binaries stay thin `main`s over this;
//! process setup (logging, runtime, client, signals) is `lampyr_process`'s.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use kube::Client;
use lampyr_api::duration::parse_go_duration;
use lampyr_process::{ClientError, default_identity, kube_client, shutdown_signal};
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

/// Parses a Go duration flag (`90s`, `5m`, `1h30m`) that must not be negative.
pub fn go_duration(text: &str) -> Result<Duration, String> {
    parse_go_duration(text)
        .map_err(|e| e.to_string())?
        .non_negative()
        .ok_or_else(|| format!("{text:?} must not be negative"))
}

/// Parses a Kubernetes quantity flag of bytes (`2Gi`, `512Mi`), rounded up to whole bytes.
pub fn byte_quantity(text: &str) -> Result<u64, String> {
    lampyr_api::quantity::parse_quantity(text).map(|q| q.ceil()).map_err(|e| format!("{text:?}: {e}"))
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
}

/// Runs `work` as controller `component`: serves the admin endpoints, holds
/// the Lease [`CommonArgs::lease_config`] names while working when leader
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
    let client = args.client().await?;
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
    // A standby replica is ready too (as lampyr-controller's): readiness gated on the lease
    // would keep a Deployment's new Pod unready while the old one holds the lease, and a
    // rolling update would never finish.
    let elector = LeaderElector::new(client, args.lease_config(component))?;
    let mut leading = elector.subscribe();
    let component_name = component.to_string();
    tokio::spawn(async move {
        while leading.changed().await.is_ok() {
            let leader = *leading.borrow();
            tracing::info!(component = %component_name, leader, "leadership changed");
        }
    });
    elector.run(working).await?;
    Ok(())
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
