//! `eventgrid-adapter`: serves every AzureEventGridSource in the cluster, receiving Azure
//! Event Grid deliveries at `/<namespace>/<name>` and sending their events to each source's
//! sink, and keeps the sources' status (see `lampyr_eventgrid`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use lampyr_eventgrid::server::Adapter;
use lampyr_eventgrid::sources::{self, Sinks};
use lampyr_process::{kube_client, run_main, shutdown_signal};

/// Receives Azure Event Grid deliveries for the cluster's AzureEventGridSources and sends
/// their events on to each source's sink as CloudEvents.
#[derive(Debug, Parser)]
#[command(name = "eventgrid-adapter", version)]
struct Args {
    /// Address Event Grid's deliveries arrive on.
    #[arg(long, default_value = "0.0.0.0:8080")]
    listen: SocketAddr,
    /// kubeconfig file (default: in-cluster, else $KUBECONFIG).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    run_main("eventgrid-adapter", async move {
        let client = kube_client(args.kubeconfig.as_deref()).await.map_err(|e| e.to_string())?;
        let sinks = Sinks::default();
        let adapter = Adapter::bind(args.listen, sinks.clone()).await.map_err(|e| format!("listening on {}: {e}", args.listen))?;
        tracing::info!(listen = %args.listen, "serving AzureEventGridSources");
        tokio::select! {
            () = adapter.serve(shutdown_signal()) => {},
            () = sources::run(client, sinks) => {},
        }
        Ok::<(), String>(())
    })
}
