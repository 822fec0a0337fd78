//! Process setup shared by Lampyr's binaries (`fiberd`, `fiber-router`,
//! `lampyr-controller`, `fiberd-k8s-controller`), so each stays a thin `main`
//! over its library.
//!
//! This crate owns what a Lampyr process does around its work, the same way in
//! every binary:
//!
//! - logging: `tracing` to stderr, filtered by `RUST_LOG` (default `info`),
//!   [`init_tracing`];
//! - the runtime and the exit code: a multi-thread tokio runtime, an error
//!   logged as `<component> stopped` and exit status 1, [`run_main`];
//! - the Kubernetes client: from `--kubeconfig` or the inferred configuration,
//!   [`kube_client`];
//! - flag values read one way in every binary: [`flags`];
//! - shutdown: SIGTERM or Ctrl-C, [`shutdown_signal`];
//! - a replica's identity (in a leader-election Lease), [`default_identity`];
//! - a workload's registry credentials, from its pull Secrets: [`pull_secrets`];
//! - accepting HTTP connections, bounded and with a deadline for request heads: [`serve`].
//!
//! It prints nothing and never exits the process: it logs through `tracing`
//! and hands errors and exit codes back to `main`.

use std::fmt::Display;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use kube::config::{InferConfigError, KubeConfigOptions, Kubeconfig, KubeconfigError};

pub mod flags;
pub mod pull_secrets;
pub mod serve;

/// Why no Kubernetes client could be built; the message names the kubeconfig and what to do.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The kubeconfig file could not be read or is not a kubeconfig.
    #[error("cannot read the kubeconfig {path}: {source} (give --kubeconfig a readable kubeconfig file)")]
    Read {
        /// The file given.
        path: PathBuf,
        /// Why.
        source: KubeconfigError,
    },
    /// The kubeconfig was read but gives no usable configuration.
    #[error("cannot use the kubeconfig {path}: {source} (check its current context, cluster and user)")]
    Load {
        /// The file given.
        path: PathBuf,
        /// Why.
        source: KubeconfigError,
    },
    /// No kubeconfig was given and none could be found.
    #[error("no Kubernetes configuration: {source} (run in a Pod with a service account, set $KUBECONFIG, or give --kubeconfig)")]
    Infer {
        /// Why neither the in-cluster configuration nor a kubeconfig worked.
        source: InferConfigError,
    },
    /// The configuration could not be turned into a client.
    #[error("cannot build a Kubernetes client: {source}")]
    Build {
        /// Why.
        source: kube::Error,
    },
}

/// Logs to stderr through `tracing`, filtered by `RUST_LOG` (default `info`), unless a subscriber is set.
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
}

/// A binary's `main`: [`init_tracing`], then `work` on a multi-thread runtime; an error is logged as `<component> stopped`, exit 1.
pub fn run_main<E: Display>(component: &str, work: impl Future<Output = Result<(), E>>) -> ExitCode {
    init_tracing();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            tracing::error!(%error, "{component} cannot start its async runtime");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(work) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(%error, "{component} stopped");
            ExitCode::FAILURE
        }
    }
}

/// A client from the file `kubeconfig`, else the inferred configuration (`$KUBECONFIG`, `~/.kube/config`, in-cluster).
///
/// TLS is rustls with `ring`, the one provider Lampyr's build links, so nothing
/// process-wide is installed (the crate graph test keeps it the only one).
pub async fn kube_client(kubeconfig: Option<&Path>) -> Result<kube::Client, ClientError> {
    let config = match kubeconfig {
        Some(path) => {
            let file = Kubeconfig::read_from(path).map_err(|source| ClientError::Read { path: path.into(), source })?;
            kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
                .await
                .map_err(|source| ClientError::Load { path: path.into(), source })?
        }
        None => kube::Config::infer().await.map_err(|source| ClientError::Infer { source })?,
    };
    kube::Client::try_from(config).map_err(|source| ClientError::Build { source })
}

/// Resolves on SIGTERM or Ctrl-C (Ctrl-C only, with a warning, when SIGTERM cannot be watched).
pub async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(term) => term,
        Err(error) => {
            tracing::warn!(%error, "cannot watch SIGTERM; stopping on Ctrl-C only");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

/// This replica's identity (in a Lease): `$POD_NAME`, else the host name and the pid (`host-1234`).
pub fn default_identity() -> String {
    let hostname = || std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    identity(std::env::var("POD_NAME").ok(), hostname, std::process::id())
}

fn identity(pod_name: Option<String>, hostname: impl FnOnce() -> String, pid: u32) -> String {
    match pod_name.filter(|name| !name.is_empty()) {
        Some(pod) => pod,
        None => format!("{}-{pid}", hostname().trim()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_is_the_pod_name_else_host_and_pid() {
        assert_eq!(identity(Some("grant-a-0".into()), || unreachable!(), 7), "grant-a-0");
        assert_eq!(identity(None, || "node-1\n".into(), 42), "node-1-42");
        assert_eq!(identity(Some(String::new()), || "node-1".into(), 42), "node-1-42");
        assert!(!default_identity().is_empty());
    }

    #[tokio::test]
    async fn a_missing_kubeconfig_is_named_with_what_to_do() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("missing.kubeconfig");
        let Err(error) = kube_client(Some(&path)).await else { panic!("a client from a missing file") };
        assert!(matches!(error, ClientError::Read { .. }), "{error:?}");
        let message = error.to_string();
        assert!(message.contains(&path.display().to_string()) && message.contains("--kubeconfig"), "{message}");
    }

    #[tokio::test]
    async fn a_kubeconfig_without_a_context_is_named_with_what_to_check() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("empty.kubeconfig");
        std::fs::write(&path, "apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n").expect("write");
        let Err(error) = kube_client(Some(&path)).await else { panic!("a client without a current context") };
        assert!(matches!(error, ClientError::Load { .. }), "{error:?}");
        let message = error.to_string();
        assert!(message.contains(&path.display().to_string()) && message.contains("current context"), "{message}");
    }

    #[test]
    fn run_main_maps_the_outcome_to_the_exit_code() {
        assert_eq!(run_main("test", async { Ok::<(), String>(()) }), ExitCode::SUCCESS);
        assert_eq!(run_main("test", async { Err("broken".to_string()) }), ExitCode::FAILURE);
    }
}
