//! `ly run`: serve Knative Service manifests from fibers on this machine,
//! router and runtime in one process.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use lampyr_api::keys::SNAPSHOT_ARTIFACT;
use lampyr_api::{ManifestObject, Service, parse_manifests, revision_name};
use lampyr_fiber::artifact::{BuildOptions, VerifiedArtifact, build_artifact};
use lampyr_fiber::metrics::RuntimeMetrics;
use lampyr_fiber::policy::FiberPolicy;
use lampyr_fiber::runtime::{RevisionPoolError, revision_pool};
use lampyr_router::{LocalBackend, RevisionEntry, RouteTable, Router, RouterConfig, ScalerConfig, ServiceRoute};
use prometheus_client::registry::Registry;

use super::CliError;
use super::snapshot::{resolve, resolve_guest};
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

/// One manifest and the guest crate that goes with it, if any.
#[derive(Clone, Debug)]
struct Source {
    manifest: PathBuf,
    guest: Option<PathBuf>,
}

/// A Service as served: its URL and Revisions.
struct Served {
    route: ServiceRoute,
    digests: Vec<(String, String)>,
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
    let (table, served) = load_all(&sources, &metrics, &opts.scaler, &ui).await?;
    let router = Router::new(RouterConfig { domain: opts.domain.clone(), ..RouterConfig::default() }, registry);
    router.set_table(table);
    let listener = tokio::net::TcpListener::bind(opts.listen)
        .await
        .map_err(|e| CliError::Usage(format!("cannot listen on {}: {e}", opts.listen)))?;
    let addr = listener.local_addr().map_err(|e| CliError::Usage(format!("listener address: {e}")))?;
    announce(&served, addr, &opts.domain, &ui);
    if opts.watch {
        tokio::spawn(watch(sources, Arc::clone(&router), metrics, opts.scaler.clone(), Arc::clone(&ui)));
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
            let r = &s.route;
            ui.line(format!("{}/{}: http://{}.{}.{}:{}", r.namespace, r.name, r.name, r.namespace, domain, addr.port()));
            for (rev, digest) in &s.digests {
                let percent = r.traffic.iter().find(|(n, _)| n == rev).map_or(0, |(_, p)| *p);
                ui.line(format!("  revision {rev} ({percent}%): {digest}"));
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

/// Where a PATH's manifest and guest crate are.
fn source_of(path: &Path) -> Result<Source, CliError> {
    let (manifest, dir) = if path.is_dir() {
        (path.join("service.yaml"), path.to_path_buf())
    } else {
        (path.to_path_buf(), path.parent().map(Path::to_path_buf).unwrap_or_default())
    };
    if !manifest.is_file() {
        return Err(CliError::Usage(format!("{}: no such manifest (give a Service YAML or a directory with service.yaml)", manifest.display())));
    }
    let guest = dir.join("Cargo.toml").is_file().then_some(dir);
    Ok(Source { manifest, guest })
}

/// Builds the whole routing table from every source.
async fn load_all(
    sources: &[Source],
    metrics: &RuntimeMetrics,
    scaler: &ScalerConfig,
    ui: &Mutex<Ui>,
) -> Result<(RouteTable, Vec<Served>), CliError> {
    let mut table = RouteTable::default();
    let mut served: Vec<Served> = Vec::new();
    for source in sources {
        for service in read_services(&source.manifest, ui)? {
            let ns = service.metadata.namespace.clone().unwrap_or_else(|| "default".into());
            let name = service.metadata.name.clone().ok_or_else(|| {
                CliError::Usage(format!("{}: a Service without metadata.name", source.manifest.display()))
            })?;
            let existing = served.iter().position(|s| s.route.namespace == ns && s.route.name == name);
            let generation = existing.map_or(0, |i| served[i].digests.len()) + 1;
            let revision = service.spec.template.metadata.name.clone().unwrap_or_else(|| revision_name(&name, generation as i64));
            let (entry, digest) = load_revision(source, &service, &ns, &revision, metrics, scaler, ui).await?;
            table.insert_revision(entry);
            let prior: Vec<(String, String)> = existing.map(|i| served.remove(i).digests).unwrap_or_default();
            let mut digests = prior;
            digests.push((revision.clone(), digest));
            let traffic = traffic_of(&service, &digests, &source.manifest)?;
            let route = ServiceRoute { namespace: ns, name, traffic };
            table.insert_service(route.clone());
            served.push(Served { route, digests });
        }
    }
    Ok((table, served))
}

fn read_services(manifest: &Path, ui: &Mutex<Ui>) -> Result<Vec<Service>, CliError> {
    let text = std::fs::read_to_string(manifest).map_err(|e| CliError::Usage(format!("{}: {e}", manifest.display())))?;
    let docs = parse_manifests(&text, &manifest.display().to_string())?;
    let mut services = Vec::new();
    for doc in docs {
        match doc.object {
            ManifestObject::Service(s) => services.push(*s),
            ManifestObject::Configuration(_) | ManifestObject::Other(_) => with_ui(ui, |ui| {
                let name = doc.name().unwrap_or("(unnamed)");
                ui.step(format!("{}: ignoring {} {name} (document {}): ly run serves Services", manifest.display(), doc.kind(), doc.document));
            }),
        }
    }
    if services.is_empty() {
        return Err(CliError::Usage(format!("{}: no serving.knative.dev/v1 Service in it", manifest.display())));
    }
    Ok(services)
}

/// `spec.traffic` as `(revision, percent)`; by default 100 % to the latest.
fn traffic_of(service: &Service, revisions: &[(String, String)], manifest: &Path) -> Result<Vec<(String, u32)>, CliError> {
    let latest = revisions.last().map(|(r, _)| r.clone()).unwrap_or_default();
    let Some(targets) = service.spec.traffic.as_ref().filter(|t| !t.is_empty()) else {
        return Ok(vec![(latest, 100)]);
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
        traffic.push((rev, percent));
    }
    let total: u32 = traffic.iter().map(|(_, p)| p).sum();
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
    let policy = lampyr_fiber::translate::translate(&service.spec.template)
        .map_err(|e| CliError::Usage(format!("{}: {e}", source.manifest.display())))?;
    let artifact = artifact_for(source, service, &policy, ui)?;
    let pool = revision_pool(&artifact, &policy, revision, scaler.max_fibers, metrics.clone()).map_err(|e| match e {
        RevisionPoolError::Template(e) => CliError::Artifact(e),
        e @ RevisionPoolError::MemoryBelowHeap { .. } => CliError::Usage(format!("{}: {e}", source.manifest.display())),
    })?;
    let backend = LocalBackend::start(pool, policy.scaling.clone(), scaler.clone())
        .await
        .map_err(|e| CliError::Usage(format!("revision {revision}: {e}")))?;
    let entry = RevisionEntry::new(namespace, revision, policy, backend);
    Ok((entry, artifact.digest))
}

/// The Revision's artifact: the annotation's reference, or the guest crate beside the manifest, built now.
fn artifact_for(source: &Source, service: &Service, policy: &FiberPolicy, ui: &Mutex<Ui>) -> Result<VerifiedArtifact, CliError> {
    let annotations = service.spec.template.metadata.annotations.as_ref();
    if let Some(reference) = annotations.and_then(|a| a.get(SNAPSHOT_ARTIFACT)) {
        let base = source.manifest.parent().unwrap_or(Path::new("."));
        let reference = relative_layout(reference, base);
        let mut ui = ui.lock().map_err(|_| CliError::Usage("terminal lock poisoned".into()))?;
        return resolve(&reference, &mut ui);
    }
    let Some(guest) = &source.guest else {
        return Err(CliError::Usage(format!(
            "{}: the template has no {SNAPSHOT_ARTIFACT} annotation and no guest crate sits beside the manifest",
            source.manifest.display()
        )));
    };
    let mut ui = ui.lock().map_err(|_| CliError::Usage("terminal lock poisoned".into()))?;
    let elf = resolve_guest(guest, None, &mut ui)?;
    let out = build_dir(guest)?;
    ui.step(format!("snapshotting {}", elf.display()));
    let opts = BuildOptions { heap_size: policy.memory_bytes, ..BuildOptions::default() };
    let built = build_artifact(&elf, &out, &opts)?;
    Ok(lampyr_fiber::artifact::verify_layout(&out, Some(&built.digest))?)
}

/// A layout reference relative to the manifest's directory, as written in the annotation.
fn relative_layout(reference: &str, base: &Path) -> String {
    let (path, pin) = reference.split_once('@').map_or((reference, None), |(p, d)| (p, Some(d)));
    if path.starts_with("./") || path.starts_with("../") {
        let joined = base.join(path).display().to_string();
        return pin.map_or(joined.clone(), |d| format!("{joined}@{d}"));
    }
    reference.to_string()
}

/// Where `ly run` keeps the artifact it builds for a guest crate.
fn build_dir(guest: &Path) -> Result<PathBuf, CliError> {
    let root = lampyr_fiber::cache::Cache::default_location()?;
    let canonical = guest.canonicalize().unwrap_or_else(|_| guest.to_path_buf());
    let key = lampyr_fiber::artifact::layout::sha256_digest(canonical.display().to_string().as_bytes());
    Ok(root.join("run").join(&key["sha256:".len().."sha256:".len() + 16]))
}

/// Polls the sources' files and swaps in a rebuilt table when one changes.
async fn watch(sources: Vec<Source>, router: Arc<Router>, metrics: RuntimeMetrics, scaler: ScalerConfig, ui: Arc<Mutex<Ui>>) {
    let mut last = newest_change(&sources);
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = newest_change(&sources);
        if now <= last {
            continue;
        }
        last = now;
        with_ui(&ui, |ui| ui.step("change detected: rebuilding"));
        match load_all(&sources, &metrics, &scaler, &ui).await {
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
