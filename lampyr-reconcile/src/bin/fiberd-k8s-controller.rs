//! `fiberd-k8s-controller`: the grant controller. Turns CapacityGrants into
//! grant Pods running fiberd; see `lampyr_reconcile::grant`.

use std::process::ExitCode;

use clap::Parser;
use lampyr_process::run_main;
use lampyr_reconcile::grant::{KvmAccess, PodSettings, run_grant_controller};
use lampyr_reconcile::runner::{CommonArgs, run_controller};
use prometheus_client::registry::Registry;

const COMPONENT: &str = "fiberd-k8s-controller";

/// Flags of the grant controller.
#[derive(Parser, Debug)]
#[command(name = "fiberd-k8s-controller", version, about = "Runs CapacityGrants as grant Pods running fiberd")]
struct Args {
    #[command(flatten)]
    common: CommonArgs,
    /// Service account grant Pods run as.
    #[arg(long, default_value = "lampyr-fiberd")]
    service_account: String,
    /// Port fiberd listens on in grant Pods.
    #[arg(long, default_value_t = 8012)]
    fiberd_port: u16,
    /// Get /dev/kvm from this device plugin resource (e.g. devices.kubevirt.io/kvm)
    /// instead of a hostPath mount into a privileged container.
    #[arg(long)]
    kvm_device_plugin: Option<String>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let settings = PodSettings {
        service_account: args.service_account,
        fiberd_port: args.fiberd_port,
        kvm: args.kvm_device_plugin.map_or(KvmAccess::HostPath, KvmAccess::DevicePlugin),
        ..PodSettings::default()
    };
    let run = run_controller(COMPONENT, &args.common, Registry::default(), None, |client, _health, stopping| async move {
        Ok::<_, std::convert::Infallible>(async move {
            run_grant_controller(client, settings, stopping.stopped()).await;
            Ok(())
        })
    });
    run_main(COMPONENT, run)
}
