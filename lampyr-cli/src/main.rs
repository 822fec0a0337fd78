//! The `ly` binary: parses arguments, runs the command, maps errors to exit codes.

use std::process::ExitCode;

use clap::Parser;
use lampyr_cli::{Cli, Ui, run};

/// mimalloc: a request's many small allocations (hyper's futures, headers, bodies) took about
/// a fifth of fiber-router's CPU under glibc's allocator (`benches/benches/router.rs`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("LY_LOG")
                // A service's own log events (the guest SDK's `info!` and siblings) are shown.
                .unwrap_or_else(|_| {
                    tracing_subscriber::EnvFilter::new(if cli.verbose { "info,lampyr_guest=debug" } else { "warn,lampyr_guest=info" })
                }),
        )
        .with_writer(std::io::stderr)
        .init();
    match run(cli, Ui::terminal()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            Ui::terminal().error(&e);
            ExitCode::from(e.exit_code())
        }
    }
}
