//! `lampyr-controller`: the Fiber Revision reconciler. Flags, then
//! `lampyr_reconcile::revision::run` under the shared runner (admin server, leader
//! election, shutdown: `runner::run_controller`); see `docs/lampyr-controller.md`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use lampyr_process::flags::{PemCertificates, byte_quantity, go_duration, pem_certificates, registry_ca};
use lampyr_process::run_main;
use lampyr_reconcile::revision::{self, Context, ControllerConfig, Metrics};
use lampyr_reconcile::runner::{CommonArgs, run_controller};
use prometheus_client::registry::Registry;

const COMPONENT: &str = "lampyr-controller";

/// Flags of lampyr-controller.
#[derive(Parser, Debug)]
#[command(name = "lampyr-controller", version, about = "Reconciles Knative Revisions into Lampyr Homes, CapacityGrants and Services")]
struct Args {
    #[command(flatten)]
    common: CommonArgs,
    /// DNS name of the fiber-router Service that every Revision's ExternalName Service points at.
    #[arg(long, default_value = "fiber-router.lampyr-system.svc.cluster.local")]
    router_service: String,
    /// fiberd image of grant Pods, pinned by digest (registry/repository@sha256:…).
    #[arg(long)]
    grant_image: String,
    /// Helper image of grant Pods, pinned by digest.
    #[arg(long)]
    helper_image: String,
    /// Grant Pods of each namespace's shared CapacityGrant, at least.
    #[arg(long, default_value_t = 1)]
    grant_instances: i32,
    /// Grant Pods a shared grant may grow to while its Revisions fill more than 80% of it
    /// (default: --grant-instances, i.e. a fixed size).
    #[arg(long)]
    grant_max_instances: Option<i32>,
    /// Fiber slots each grant Pod of a shared grant holds, shared by the Revisions placed on it.
    #[arg(long, default_value_t = 100)]
    grant_fiber_slots: u32,
    /// Guest memory each grant Pod of a shared grant holds (a Kubernetes quantity, e.g. 2Gi).
    #[arg(long, default_value = "2Gi", value_parser = byte_quantity)]
    grant_memory: u64,
    /// A registry (host:port) to pull artifacts from over plain HTTP; repeatable.
    #[arg(long = "plain-http-registry")]
    plain_http_registries: Vec<String>,
    /// A PEM file of certificate authorities registries may be signed by, besides the
    /// system's (default: $LAMPYR_REGISTRY_CA when set).
    #[arg(long, value_parser = pem_certificates)]
    registry_ca: Option<PemCertificates>,
    /// Content cache for pulled artifacts.
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// Bytes each repository's artifact cache may hold (a quantity); verified artifacts past
    /// it are evicted, least recently used first.
    #[arg(long, default_value = "2Gi", value_parser = byte_quantity)]
    cache_max_bytes: u64,
    /// Reconcile Revisions of this namespace only (default: all namespaces).
    #[arg(long)]
    namespace: Option<String>,
    /// Revisions reconciled at once.
    #[arg(long, default_value_t = 8)]
    concurrency: u16,
    /// Reconcile every Revision at least this often (Go duration).
    #[arg(long, default_value = "5m", value_parser = go_duration)]
    resync: Duration,
    /// How long a new Revision may take to have its template loaded before it
    /// is `ProgressDeadlineExceeded` (Go duration; a Revision's
    /// `serving.knative.dev/progress-deadline` annotation overrides it).
    #[arg(long, default_value = "10m", value_parser = go_duration)]
    progress_deadline: Duration,
    /// The ConfigMap with the cluster's autoscaler settings, NAMESPACE/NAME (upstream's config-autoscaler).
    #[arg(long, default_value = "knative-serving/config-autoscaler", value_parser = namespaced_name)]
    autoscaler_config: (String, String),
    /// The ConfigMap mapping container images to snapshot artifacts, NAMESPACE/NAME (docs/images.md).
    #[arg(long, default_value = "lampyr-system/image-artifacts", value_parser = namespaced_name)]
    image_map: (String, String),
}

/// Parses `NAMESPACE/NAME`.
fn namespaced_name(text: &str) -> Result<(String, String), String> {
    match text.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => Ok((ns.into(), name.into())),
        _ => Err(format!("{text:?} is not NAMESPACE/NAME")),
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let mut config = controller_config(&args);
    config.registry_ca = match registry_ca(args.registry_ca.as_ref()) {
        Ok(pem) => pem,
        Err(e) => {
            eprintln!("{COMPONENT}: {e}");
            return ExitCode::from(2);
        }
    };
    let metrics = Metrics::default();
    let mut registry = Registry::default();
    metrics.register(&mut registry);
    let leader = metrics.leader.clone();
    let run = run_controller(COMPONENT, &args.common, registry, Some(leader), |client, health, stopping| {
        let api = health.check("api");
        let settings_read = health.check("settings");
        settings_read.set_not_ready("config-autoscaler and the image map not read yet");
        async move {
            let context = Arc::new(Context::new(client.clone(), config, metrics)?);
            revision::check_crds(&client).await?;
            api.set_ready();
            // Every replica reads config-autoscaler and the image map, so a standby is ready to lead with them.
            tokio::spawn(revision::watch_settings(Arc::clone(&context)));
            let settings = Arc::clone(&context);
            tokio::spawn(async move {
                settings.settings_synced().await;
                settings_read.set_ready();
            });
            Ok::<_, revision::Error>(revision::run(context, stopping.stopped()))
        }
    });
    run_main(COMPONENT, run)
}

/// The reconciler's configuration from the flags.
fn controller_config(args: &Args) -> ControllerConfig {
    let mut config = ControllerConfig::new(&args.router_service, &args.grant_image, &args.helper_image);
    config.grant.instances = args.grant_instances;
    config.grant.max_instances = args.grant_max_instances.unwrap_or(args.grant_instances);
    config.grant.slots_per_instance = args.grant_fiber_slots;
    config.grant.memory_per_instance = args.grant_memory;
    config.plain_http_registries = args.plain_http_registries.clone();
    if let Some(dir) = &args.cache_dir {
        config.cache_dir = dir.clone();
    }
    config.cache_max_bytes = args.cache_max_bytes;
    config.namespace = args.namespace.clone();
    config.concurrency = args.concurrency;
    config.resync = args.resync;
    config.progress_deadline = args.progress_deadline;
    config.autoscaler_config = args.autoscaler_config.clone();
    config.image_map = args.image_map.clone();
    config
}
