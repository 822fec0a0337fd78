//! `fiberd-helper`: the grant Pod's init container. Checks that the node can run
//! fibers (KVM) and that the Pod's volumes are usable before fiberd starts; on a
//! failure it writes the reason, one line, to the termination-message file and
//! exits 1. A thin main over `lampyr_fiberd::preflight`; see `docs/fiberd.md`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use lampyr_fiberd::preflight::{self, KVM_DEVICE, KvmSource, PreflightConfig, TERMINATION_LOG};

/// fiberd-helper: checks a grant Pod's node and volumes before fiberd starts.
#[derive(Parser, Debug)]
#[command(name = "fiberd-helper", version, about)]
struct Args {
    /// The KVM device to check.
    #[arg(long, default_value = KVM_DEVICE)]
    kvm_device: PathBuf,
    /// The device plugin resource the grant Pod gets the KVM device from (default: the
    /// node's /dev/kvm, mounted into a privileged container); only changes the advice.
    #[arg(long)]
    kvm_device_plugin: Option<String>,
    /// fiberd's artifact cache directory: must be a writable directory.
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// The mounted fleet key: absent, or a valid key.
    #[arg(long)]
    fleet_key_file: Option<PathBuf>,
    /// Where to write the reason of a failure (Kubernetes' terminationMessagePath).
    #[arg(long, default_value = TERMINATION_LOG)]
    termination_log: PathBuf,
}

fn main() -> ExitCode {
    lampyr_process::init_tracing();
    let args = Args::parse();
    let config = PreflightConfig {
        kvm_device: args.kvm_device,
        kvm_source: args.kvm_device_plugin.map_or(KvmSource::HostPath, KvmSource::DevicePlugin),
        cache_dir: args.cache_dir,
        fleet_key_file: args.fleet_key_file,
    };
    match preflight::check(&config) {
        Ok(found) => {
            tracing::info!(
                kvm = %config.kvm_device.display(),
                kvm_api_version = found.kvm_api_version,
                cache_dir = ?found.cache_dir,
                fleet_key_present = ?found.fleet_key_present,
                "this node can run fibers"
            );
            ExitCode::SUCCESS
        }
        Err(error) => {
            tracing::error!(%error, "this grant Pod cannot run fibers");
            if let Err(e) = preflight::write_termination_message(&args.termination_log, &error.to_string()) {
                tracing::warn!(path = %args.termination_log.display(), error = %e, "cannot write the termination message");
            }
            ExitCode::FAILURE
        }
    }
}
