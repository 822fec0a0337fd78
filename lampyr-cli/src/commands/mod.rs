//! Command implementations and the CLI's error type.

pub mod cache;
pub mod call;
pub mod cluster;
pub mod deploy;
pub mod fleet_key;
pub mod new;
pub mod run;
pub mod scaffold;
pub mod snapshot;
pub mod source;

use crate::args::{Cli, Command, ScaffoldCommand};
use crate::ui::Ui;

/// Why a command failed; each variant says what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// An artifact could not be built, read or verified.
    #[error(transparent)]
    Artifact(#[from] lampyr_artifact::ArtifactError),
    /// A guest crate did not build.
    #[error(transparent)]
    GuestBuild(#[from] lampyr_fiber::guest_build::GuestBuildError),
    /// A registry transfer failed.
    #[error(transparent)]
    Registry(#[from] lampyr_artifact::registry::RegistryError),
    /// The local artifact cache is unusable.
    #[error(transparent)]
    Cache(#[from] lampyr_artifact::cache::CacheError),
    /// A manifest does not parse.
    #[error(transparent)]
    Manifest(#[from] lampyr_api::ManifestError),
    /// A guest crate could not be created.
    #[error(transparent)]
    New(#[from] new::NewError),
    /// A Workspace could not be scaffolded.
    #[error(transparent)]
    Scaffold(#[from] scaffold::ScaffoldError),
    /// A `ly cluster` command failed.
    #[error(transparent)]
    Cluster(#[from] cluster::ClusterError),
    /// `ly deploy` failed.
    #[error(transparent)]
    Deploy(#[from] deploy::DeployError),
    /// A template could not be sealed.
    #[error(transparent)]
    Seal(#[from] lampyr_artifact::seal::SealError),
    /// The command line asks for something impossible.
    #[error("{0}")]
    Usage(String),
    /// The async runtime could not start.
    #[error("could not start the async runtime: {0}")]
    Runtime(std::io::Error),
    /// `ly call`: the service answered with a server error (the answer was printed).
    #[error("the service answered {0}")]
    ServerError(u16),
}

impl CliError {
    /// Process exit code: 2 for usage errors, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage(_) => 2,
            _ => 1,
        }
    }
}

/// Runs one parsed command line.
pub fn run(cli: Cli, ui: Ui) -> Result<(), CliError> {
    match cli.command {
        Command::Snapshot(cmd) => {
            let mut ui = ui;
            snapshot::run(cmd, &mut ui)
        }
        Command::Scaffold(ScaffoldCommand::Workspace { dir, force }) => {
            let mut ui = ui;
            scaffold::workspace(&dir, force, &mut ui).map(|_| ())?;
            Ok(())
        }
        Command::New(args) => {
            let mut ui = ui;
            new::run(&args, &mut ui).map(|_| ())?;
            Ok(())
        }
        Command::Cache(cmd) => {
            let mut ui = ui;
            cache::run(cmd, &mut ui)
        }
        Command::Call(args) => call::run(args, ui),
        Command::Cluster(cmd) => {
            let mut ui = ui;
            cluster::run(cmd, &mut ui)?;
            Ok(())
        }
        Command::Deploy(args) => {
            let mut ui = ui;
            deploy::run(args, &mut ui)
        }
        Command::Run { paths, listen, domain, watch, scale_to_zero_grace, scale_tick } => {
            let scaler = lampyr_router::ScalerConfig {
                tick: scale_tick,
                scale_to_zero_grace_period: scale_to_zero_grace,
                ..lampyr_router::ScalerConfig::default()
            };
            run::run(run::RunOptions { paths, listen, domain, watch, scaler }, ui)
        }
    }
}
