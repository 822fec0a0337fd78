//! Command-line grammar of `ly`.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// Lampyr: Knative services on Hyperlight fibers.
#[derive(Debug, Parser)]
#[command(name = "ly", version, about)]
pub struct Cli {
    /// Log more (also: LY_LOG=debug).
    #[arg(long, global = true)]
    pub verbose: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Top-level commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve Knative Services from fibers on this machine (no cluster).
    Run {
        /// Service manifests, or directories holding a guest crate and `service.yaml`.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Address to serve on.
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: std::net::SocketAddr,
        /// Domain of the service URLs: `<service>.<namespace>.<domain>`.
        #[arg(long, default_value = "localhost")]
        domain: String,
        /// Rebuild and swap in new revisions when a guest or manifest changes.
        #[arg(long)]
        watch: bool,
        /// How long a revision stays warm without traffic before scaling to zero
        /// (config-autoscaler's scale-to-zero-grace-period), in seconds.
        #[arg(long, default_value = "30", value_parser = lampyr_process::flags::seconds)]
        scale_to_zero_grace: std::time::Duration,
        /// Scaler tick, in seconds (config-autoscaler's tick-interval).
        #[arg(long, default_value = "2", value_parser = lampyr_process::flags::positive_seconds)]
        scale_tick: std::time::Duration,
    },
    /// Answer one request from a real fiber, served as `ly run` serves it, then exit: the
    /// body on stdout (`-i` adds the status and headers); exit status 1 for a 5xx answer.
    Call(CallArgs),
    /// Build, move and check snapshot artifacts.
    #[command(subcommand)]
    Snapshot(SnapshotCommand),
    /// Create a guest crate for a new service: its handler, `service.yaml`, host-side tests
    /// and the build settings for fibers (then `ly run NAME` serves it).
    New(NewArgs),
    /// Create customer-owned sources to edit.
    #[command(subcommand)]
    Scaffold(ScaffoldCommand),
    /// Install, check, or remove Lampyr on an existing Kubernetes context.
    #[command(subcommand)]
    Cluster(ClusterCommand),
    /// Deploy Knative Services to the installation: push the artifact, seal and push the
    /// fiberd template, apply the Service and wait until it is Ready.
    Deploy(DeployArgs),
    /// Show or prune the local artifact cache (pulled artifacts and `ly run`'s builds).
    #[command(subcommand)]
    Cache(CacheCommand),
}

/// `ly cache …`
#[derive(Debug, Subcommand)]
pub enum CacheCommand {
    /// List what the cache holds, most recently used first, and its size against the limit.
    Show,
    /// Evict least-recently-used entries nothing is using down to the limit.
    Prune {
        /// Size to prune to (a quantity: 10Gi, 500Mi, 0); default $LAMPYR_CACHE_MAX_BYTES, else 10Gi.
        #[arg(long)]
        max_bytes: Option<String>,
    },
}

/// `ly deploy …`
#[derive(Clone, Debug, clap::Args)]
pub struct DeployArgs {
    /// Service manifests, or directories holding a guest crate and `service.yaml`.
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// Context and kubeconfig.
    #[command(flatten)]
    pub target: ContextOptions,
    /// Namespace of Services whose manifest names none (default: the context's, else `default`).
    #[arg(long, short)]
    pub namespace: Option<String>,
    /// Repository to push built artifacts to, as the host reaches it (`http://…` for plain HTTP;
    /// a `registryMirrors` key is written as its in-cluster registry). Default: `lampyr/snapshots`
    /// beside the installation's template repository.
    #[arg(long)]
    pub repository: Option<String>,
    /// Keep the container image as written (default: set it to the artifact, like the annotation).
    #[arg(long)]
    pub keep_image: bool,
    /// Seconds to wait for each Service to become Ready (0: apply and return).
    #[arg(long, default_value_t = 300)]
    pub timeout: u64,
}

/// `ly cluster …`
#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Install (or reinstall) Lampyr from the Workspace's k8s/ and the platform settings.
    Install {
        /// Context, Workspace and settings.
        #[command(flatten)]
        options: ClusterOptions,
        /// Install the shared Knative Eventing substrate (the Workspace's k8s/knative-eventing-*.yaml).
        #[arg(long)]
        eventing: bool,
        /// External provider identity (not yet supported: omit it to use an existing context).
        #[arg(long)]
        provider: Option<String>,
    },
    /// Check each component; exit code 1 when any check fails.
    Health {
        /// Context, Workspace and settings.
        #[command(flatten)]
        options: ClusterOptions,
    },
    /// Remove Lampyr (what install created) and the fleet key; the cluster is kept.
    Uninstall {
        /// Context, Workspace and settings.
        #[command(flatten)]
        options: ClusterOptions,
        /// Ask the provider to delete the cluster (refused without a recorded provider).
        #[arg(long)]
        delete_cluster: bool,
        /// External provider identity (not yet supported).
        #[arg(long)]
        provider: Option<String>,
    },
}

/// Which cluster: a kubeconfig and a context, credentials used unchanged.
#[derive(Clone, Debug, clap::Args)]
pub struct ContextOptions {
    /// Exact Kubernetes context (default: the kubeconfig's current context).
    #[arg(long)]
    pub context: Option<String>,
    /// Kubeconfig file (default: KUBECONFIG, else ~/.kube/config); its credentials are used unchanged.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
}

/// Options every `ly cluster` command takes.
#[derive(Clone, Debug, clap::Args)]
pub struct ClusterOptions {
    /// Context and kubeconfig.
    #[command(flatten)]
    pub target: ContextOptions,
    /// Workspace root holding k8s/ (default: the current directory).
    #[arg(long)]
    pub workspace: Option<PathBuf>,
    /// JSON/YAML platform settings overriding the Workspace's k8s/platform.yaml.
    #[arg(long)]
    pub provider_config: Option<PathBuf>,
    /// Apply (or delete) without prompting.
    #[arg(long)]
    pub approve_provider_manifests: bool,
    /// Never prompt (implies approval of the shown plan).
    #[arg(long)]
    pub non_interactive: bool,
}

/// `ly call …`
#[derive(Debug, clap::Args)]
pub struct CallArgs {
    /// A Service manifest, or a directory holding a guest crate and `service.yaml`.
    pub path: PathBuf,
    /// `[METHOD] TARGET [BODY]`, as `cargo run --` takes them on the host: method GET by
    /// default, a target such as `/hello/moth?x=1`, and an optional request body.
    #[arg(required = true, num_args = 1..=3, value_names = ["METHOD", "TARGET"])]
    pub request: Vec<String>,
    /// A request header, `Name: value` (repeatable).
    #[arg(short = 'H', long = "header")]
    pub headers: Vec<String>,
    /// The Host to ask for; default the manifest's first Service, `<name>.<namespace>.localhost`.
    #[arg(long)]
    pub host: Option<String>,
    /// Print the status line and the response headers before the body.
    #[arg(short, long)]
    pub include: bool,
}

/// `ly new …`
#[derive(Debug, clap::Args)]
pub struct NewArgs {
    /// Directory to create; its last component is the Service and crate name
    /// (lower-case letters, digits and `-`, starting with a letter, at most 63).
    pub path: PathBuf,
    /// What the service starts as.
    #[arg(long, value_enum, default_value = "hello")]
    pub template: crate::commands::new::Template,
    /// Where the guest SDK comes from: `auto` (the checkout ly was built from, when it is
    /// still there, else `vendored`), `vendored` (a copy of the SDK ly carries, written into
    /// the crate's `vendor/`), or a path to a `lampyr-guest` crate.
    #[arg(long, default_value = "auto")]
    pub sdk: String,
}

/// `ly scaffold …`
#[derive(Debug, Subcommand)]
pub enum ScaffoldCommand {
    /// Create a Workspace: `k8s/` with the bootstrap manifests and platform settings the `ly cluster` commands read.
    Workspace {
        /// Workspace root; created when missing. Other files in it are left alone.
        dir: PathBuf,
        /// Overwrite the Workspace files ly writes when they exist already (edits to them are lost).
        #[arg(long)]
        force: bool,
    },
}

/// `ly snapshot …`
#[derive(Debug, Subcommand)]
pub enum SnapshotCommand {
    /// Boot a guest, run its init, and save the snapshot artifact as an OCI layout.
    Build {
        /// A guest ELF, or a guest crate directory (built for x86_64-unknown-none first).
        guest: PathBuf,
        /// Layout directory to write.
        #[arg(long, short)]
        output: PathBuf,
        /// Largest request/response body in bytes (fixes buffer and heap sizes).
        #[arg(long, default_value_t = 1024 * 1024)]
        max_body: u64,
        /// Guest heap in bytes (default: enough for two bodies of --max-body).
        #[arg(long)]
        heap_size: Option<u64>,
        /// Binary to build when the crate has several.
        #[arg(long)]
        bin: Option<String>,
    },
    /// Push a layout's artifact to a registry; prints the digest-pinned reference.
    Push {
        /// Layout directory written by `ly snapshot build` (optionally `DIR@sha256:…`).
        layout: String,
        /// Target repository, `registry/path` (`http://registry/path` for plain HTTP).
        repository: String,
        /// Also tag the artifact (the pin stays the digest).
        #[arg(long)]
        tag: Option<String>,
    },
    /// Pull an artifact by digest into the local cache, verify it, print its layout.
    Pull {
        /// `registry/repo@sha256:…` (`http://…` for plain HTTP).
        reference: String,
    },
    /// Show an artifact's digest, platform, metadata and blobs.
    Inspect {
        /// `registry/repo@sha256:…` or a layout directory (optionally `DIR@sha256:…`).
        reference: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Verify an artifact: digests, sizes, media types, format version, platform.
    Verify {
        /// `registry/repo@sha256:…` or a layout directory (optionally `DIR@sha256:…`).
        reference: String,
    },
}
