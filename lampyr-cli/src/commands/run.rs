//! `ly run`: serve Knative Service manifests from fibers on this machine,
//! router and runtime in one process.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use lampyr_api::{Service, revision_name};
use lampyr_fiber::LocalBackend;
use lampyr_fiber::metrics::RuntimeMetrics;
use lampyr_fiber::runtime::{RevisionPoolError, check_ready, revision_pool};
use lampyr_router::route::{self, RouteOptions, ServiceTraffic, TrafficRoute};
use lampyr_router::{RevisionEntry, RouteTable, Router, RouterConfig, ScalerConfig};
use prometheus_client::registry::Registry;

use super::CliError;
use super::source::{Source, artifact_for, read_manifest, source_of};
use crate::ui::Ui;

/// What `ly run` was asked to serve and how.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Service manifests or example directories (guest crate + `service.yaml`).
    pub paths: Vec<PathBuf>,
    /// Address to serve on.
    pub listen: SocketAddr,
    /// Domain of `<service>.<namespace>.<domain>` URLs.
    pub domain: String,
    /// Rebuild and swap when a guest or manifest changes.
    pub watch: bool,
    /// Cluster-wide autoscaler settings.
    pub scaler: ScalerConfig,
}

fn read_services(manifest: &Path, ui: &Mutex<Ui>) -> Result<Vec<Service>, CliError> {
    let contents = read_manifest(manifest)?;
    with_ui(ui, |ui| {
        for other in &contents.others {
            ui.step(format!("{}: ignoring {other}: ly run serves Services", manifest.display()));
        }
    });
    Ok(contents.services.into_iter().map(|d| d.service).collect())
}

/// A Service as served: its traffic and its Revisions with their artifacts' digests.
pub(super) struct Served {
    /// Its routes.
    pub(super) traffic: ServiceTraffic,
    /// `(revision, artifact digest)`, oldest first.
    pub(super) digests: Vec<(String, String)>,
}

/// Runs `ly run` until Ctrl-C (or SIGTERM), then drains.
pub fn run(opts: RunOptions, ui: Ui) -> Result<(), CliError> {
    let sources = opts.paths.iter().map(|p| source_of(p)).collect::<Result<Vec<_>, _>>()?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(CliError::Runtime)?;
    rt.block_on(serve(opts, sources, ui))
}

async fn serve(opts: RunOptions, sources: Vec<Source>, ui: Ui) -> Result<(), CliError> {
    let ui = Arc::new(Mutex::new(ui));
    let mut registry = Registry::default();
    let metrics = RuntimeMetrics::default();
    metrics.register(&mut registry);
    let options = RouteOptions { domain: opts.domain.clone(), ..RouteOptions::default() };
    let (table, served) = load_all(&sources, &metrics, &opts.scaler, &options, &ui).await?;
    let router = Router::new(RouterConfig::default(), registry);
    router.set_table(table);
    let listener =
        tokio::net::TcpListener::bind(opts.listen).await.map_err(|e| CliError::Usage(format!("cannot listen on {}: {e}", opts.listen)))?;
    let addr = listener.local_addr().map_err(|e| CliError::Usage(format!("listener address: {e}")))?;
    announce(&served, addr, &opts.domain, &ui);
    if opts.watch {
        tokio::spawn(watch(sources, Arc::clone(&router), metrics, opts.scaler.clone(), options, Arc::clone(&ui)));
    }
    router.serve(listener, shutdown_signal()).await;
    with_ui(&ui, |ui| ui.step("stopped"));
    Ok(())
}

fn with_ui(ui: &Mutex<Ui>, f: impl FnOnce(&mut Ui)) {
    if let Ok(mut ui) = ui.lock() {
        f(&mut ui);
    }
}

fn announce(served: &[Served], addr: SocketAddr, domain: &str, ui: &Mutex<Ui>) {
    with_ui(ui, |ui| {
        for s in served {
            let t = &s.traffic;
            let (ns, port) = (&t.namespace, addr.port());
            ui.line(format!("{ns}/{}: http://{}.{ns}.{domain}:{port}", t.name, t.name));
            for (rev, digest) in &s.digests {
                let percent: u32 = t.targets.iter().filter(|target| target.revision == *rev).map(|target| target.percent).sum();
                ui.line(format!("  revision {rev} ({percent}%): {digest}"));
            }
            for target in &t.targets {
                if let Some(tag) = &target.tag {
                    ui.line(format!("  tag {tag} → {}: http://{tag}-{}.{ns}.{domain}:{port}", target.revision, t.name));
                }
            }
        }
        ui.line(format!("ready: serving {} service(s) on http://{addr} (Ctrl-C to stop)", served.len()));
    });
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => return std::future::pending().await,
        };
        tokio::select! { _ = ctrl_c => {}, _ = term.recv() => {} }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

/// Builds the whole routing table from every source: each Service's Revisions, then
/// its hosts as Knative's Route would program them.
pub(super) async fn load_all(
    sources: &[Source],
    metrics: &RuntimeMetrics,
    scaler: &ScalerConfig,
    options: &RouteOptions,
    ui: &Mutex<Ui>,
) -> Result<(RouteTable, Vec<Served>), CliError> {
    let mut table = RouteTable::default();
    let mut served: Vec<Served> = Vec::new();
    for source in sources {
        for service in read_services(&source.manifest, ui)? {
            let ns = service.metadata.namespace.clone().unwrap_or_else(|| "default".into());
            let name = service
                .metadata
                .name
                .clone()
                .ok_or_else(|| CliError::Usage(format!("{}: a Service without metadata.name", source.manifest.display())))?;
            let existing = served.iter().position(|s| s.traffic.namespace == ns && s.traffic.name == name);
            let generation = existing.map_or(0, |i| served[i].digests.len()) + 1;
            let revision = service.spec.template.metadata.name.clone().unwrap_or_else(|| revision_name(&name, generation as i64));
            let (entry, digest) = load_revision(source, &service, &ns, &revision, metrics, scaler, ui).await?;
            table.insert_revision(entry);
            let prior: Vec<(String, String)> = existing.map(|i| served.remove(i).digests).unwrap_or_default();
            let mut digests = prior;
            digests.push((revision.clone(), digest));
            let targets = traffic_of(&service, &digests, &source.manifest)?;
            let cluster_local = ServiceTraffic::is_cluster_local(service.metadata.labels.as_ref());
            served.push(Served { traffic: ServiceTraffic { namespace: ns, name, targets, cluster_local }, digests });
        }
    }
    for s in &served {
        route::program(&mut table, &s.traffic, options).map_err(CliError::Usage)?;
    }
    Ok((table, served))
}

/// `spec.traffic` resolved to Revisions; by default 100 % to the latest.
fn traffic_of(service: &Service, revisions: &[(String, String)], manifest: &Path) -> Result<Vec<TrafficRoute>, CliError> {
    let latest = revisions.last().map(|(r, _)| r.clone()).unwrap_or_default();
    let Some(targets) = service.spec.traffic.as_ref().filter(|t| !t.is_empty()) else {
        return Ok(vec![TrafficRoute { tag: None, revision: latest, percent: 100 }]);
    };
    let mut traffic = Vec::new();
    for (i, t) in targets.iter().enumerate() {
        let rev = match (&t.revision_name, t.latest_revision) {
            (Some(name), _) => name.clone(),
            (None, Some(true) | None) => latest.clone(),
            (None, Some(false)) => {
                return Err(CliError::Usage(format!("{}: spec.traffic[{i}] names no revision", manifest.display())));
            }
        };
        if !revisions.iter().any(|(r, _)| *r == rev) {
            return Err(CliError::Usage(format!(
                "{}: spec.traffic[{i}].revisionName {rev:?} is not loaded (load its manifest first on the command line)",
                manifest.display()
            )));
        }
        let percent = u32::try_from(t.percent.unwrap_or(0)).unwrap_or(0);
        traffic.push(TrafficRoute { tag: t.tag.clone().filter(|tag| !tag.is_empty()), revision: rev, percent });
    }
    let total: u32 = traffic.iter().map(|t| t.percent).sum();
    if total != 100 {
        return Err(CliError::Usage(format!("{}: spec.traffic percentages sum to {total}, not 100", manifest.display())));
    }
    Ok(traffic)
}

async fn load_revision(
    source: &Source,
    service: &Service,
    namespace: &str,
    revision: &str,
    metrics: &RuntimeMetrics,
    scaler: &ScalerConfig,
    ui: &Mutex<Ui>,
) -> Result<(RevisionEntry, String), CliError> {
    let name = service.metadata.name.as_deref().unwrap_or_default();
    let policy = lampyr_api::translate::translate(&service.spec.template)
        .map_err(|e| CliError::Usage(format!("{}: {e}", source.manifest.display())))?
        .with_runtime_contract(revision, name, name);
    if let Some(reference) = policy.env_refs.first() {
        return Err(CliError::Usage(format!(
            "{}: the environment reads {:?} {:?}: ConfigMaps and Secrets are read in a cluster (fiberd resolves them when it \
             loads the Revision); `ly run` has none, so give the variables literal values to run locally",
            source.manifest.display(),
            reference.source.kind,
            reference.source.name
        )));
    }
    let artifact = {
        let mut ui = ui.lock().map_err(|_| CliError::Usage("terminal lock poisoned".into()))?;
        artifact_for(source, service, &policy, &mut ui)?
    };
    let pool = revision_pool(&artifact, &policy, revision, scaler.max_fibers, None, metrics.clone()).map_err(|e| match e {
        RevisionPoolError::Template(e) => CliError::Artifact(e),
        e @ RevisionPoolError::MemoryBelowHeap { .. } => CliError::Usage(format!("{}: {e}", source.manifest.display())),
    })?;
    if let Some(check) = &policy.readiness {
        with_ui(ui, |ui| ui.step(format!("probing {revision}: GET {}", check.path)));
        check_ready(&pool, check).await.map_err(|e| CliError::Usage(format!("{}: revision {revision}: {e}", source.manifest.display())))?;
    }
    let backend = LocalBackend::start(pool, policy.scaling.clone(), scaler.clone())
        .await
        .map_err(|e| CliError::Usage(format!("revision {revision}: {e}")))?;
    let entry = RevisionEntry::new(namespace, revision, policy, backend);
    Ok((entry, artifact.digest))
}

/// Polls the sources' files and swaps in a rebuilt table when one changes.
async fn watch(
    sources: Vec<Source>,
    router: Arc<Router>,
    metrics: RuntimeMetrics,
    scaler: ScalerConfig,
    options: RouteOptions,
    ui: Arc<Mutex<Ui>>,
) {
    let mut last = newest_change(&sources);
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = newest_change(&sources);
        if now <= last {
            continue;
        }
        last = now;
        with_ui(&ui, |ui| ui.step("change detected: rebuilding"));
        match load_all(&sources, &metrics, &scaler, &options, &ui).await {
            Ok((table, _)) => {
                router.set_table(table);
                with_ui(&ui, |ui| ui.step("swapped in the new revisions (requests in flight finish on the old ones)"));
            }
            Err(e) => with_ui(&ui, |ui| {
                ui.error(&e);
                ui.step("still serving the previous build");
            }),
        }
    }
}

/// The latest modification time among the manifests and guest sources.
fn newest_change(sources: &[Source]) -> SystemTime {
    let mut newest = SystemTime::UNIX_EPOCH;
    let mut visit = |p: &Path| {
        if let Ok(m) = std::fs::metadata(p).and_then(|m| m.modified()) {
            newest = newest.max(m);
        }
    };
    for s in sources {
        visit(&s.manifest);
        if let Some(g) = &s.guest {
            visit(&g.join("Cargo.toml"));
            walk(&g.join("src"), &mut visit);
        }
    }
    newest
}

fn walk(dir: &Path, visit: &mut impl FnMut(&Path)) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() { walk(&p, visit) } else { visit(&p) }
    }
}
