//! `runtime-images`: builds Lampyr's runtime images from built binaries
//! (`lampyr_images::delivery`); `scripts/runtime-images` builds the binaries
//! and runs it. Prints one `REFERENCE@sha256:…` line per image on stdout.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use lampyr_images::catalog::{self, Component, Inputs, Origin};
use lampyr_images::delivery::{Delivery, default_out_dir, deliver, prepare};
use lampyr_process::run_main;

/// Flags of `runtime-images`.
#[derive(Parser, Debug)]
#[command(name = "runtime-images", version, about = "Builds Lampyr's runtime images (reproducible OCI images)")]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Builds the images' layouts and archives; optionally pushes and imports them.
    Build(BuildArgs),
    /// Prints `PACKAGE BIN` for each selected image built by cargo (what to build first).
    CargoBins {
        /// Only these images (default: all).
        #[arg(long = "image")]
        images: Vec<String>,
    },
    /// Prints the images' names.
    List,
}

#[derive(clap::Args, Debug)]
struct BuildArgs {
    /// Only these images (default: all); see `runtime-images list`.
    #[arg(long = "image")]
    images: Vec<String>,
    /// Cargo's output directory holding the Rust binaries (e.g. $CARGO_TARGET_DIR/release).
    #[arg(long)]
    cargo_bins: PathBuf,
    /// The directory `scripts/cluster-bins` prints (the Go binaries).
    #[arg(long)]
    go_bins: PathBuf,
    /// The Go module pinning Knative, whose manifests name the upstream webhook's image.
    #[arg(long, default_value = "knative")]
    knative_module: PathBuf,
    /// CA bundle for images that pull from registries over TLS.
    #[arg(long, default_value = "/etc/ssl/certs/ca-certificates.crt")]
    ca_bundle: PathBuf,
    /// Output directory (default: $XDG_CACHE_HOME/lampyr/images or ~/.cache/lampyr/images).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Creation time and every file's mtime, in seconds since the epoch.
    #[arg(long, env = "SOURCE_DATE_EPOCH", default_value_t = 0)]
    source_date_epoch: u64,
    /// Push to this registry, keeping each repository's path: `http://HOST:PORT` for plain HTTP.
    #[arg(long = "push")]
    registry: Option<String>,
    /// Import into the containerd listening on this socket.
    #[arg(long = "import-containerd")]
    containerd: Option<PathBuf>,
    /// The containerd namespace to import into.
    #[arg(long, default_value = "k8s.io")]
    namespace: String,
}

fn main() -> ExitCode {
    let args = Args::parse();
    run_main("runtime-images", run(args.command))
}

async fn run(command: Command) -> Result<(), lampyr_images::Error> {
    match command {
        Command::List => {
            catalog::names().iter().for_each(|name| println!("{name}"));
            Ok(())
        }
        Command::CargoBins { images } => {
            for component in select(&images)? {
                if let Origin::Cargo { package, bin } = component.origin {
                    println!("{package} {bin}");
                }
            }
            Ok(())
        }
        Command::Build(args) => build(args).await,
    }
}

async fn build(args: BuildArgs) -> Result<(), lampyr_images::Error> {
    let inputs =
        Inputs { cargo_bins: args.cargo_bins, go_bins: args.go_bins, knative_module: args.knative_module, ca_bundle: args.ca_bundle };
    let out_dir = args.out.or_else(default_out_dir).ok_or_else(|| lampyr_images::Error::Spec {
        image: "(all)".into(),
        reason: "neither XDG_CACHE_HOME nor HOME is set: give --out".into(),
    })?;
    let delivery = Delivery {
        out_dir,
        created: args.source_date_epoch,
        registry: args.registry,
        containerd: args.containerd.map(|address| (address, args.namespace)),
    };
    for (component, spec) in prepare(&select(&args.images)?, &inputs)? {
        let delivered = deliver(component, &spec, &delivery).await?;
        tracing::info!(archive = %delivered.archive.display(), layer_bytes = delivered.layer_size, "{} done", delivered.name);
        println!("{}", delivered.pinned());
    }
    Ok(())
}

/// The components named (all when none is).
fn select(names: &[String]) -> Result<Vec<&'static Component>, lampyr_images::Error> {
    if names.is_empty() {
        return Ok(catalog::COMPONENTS.iter().collect());
    }
    names.iter().map(|name| catalog::component(name)).collect()
}
