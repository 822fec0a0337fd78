//! The Fiber Revision reconciler (`lampyr-controller`): for every Knative
//! Revision it verifies the snapshot artifact, translates the template into a
//! fiber policy, places the Revision's `Home` on a `CapacityGrant` with room
//! (the namespace's shared grant, created on first use, or the one the
//! Revision names), creates and owns the Home and the ExternalName `Service`,
//! keeps the Home's status (conditions, warm fibers) and reports upstream's
//! Revision status. See `docs/lampyr-controller.md` and `docs/capacity.md`.
//!
//! A reconcile is a function of what it observes (the Revision, its children,
//! the artifact, the cluster's `config-autoscaler`) followed by idempotent
//! writes: server-side applies with field manager [`FIELD_MANAGER`], and status
//! writes only when the status changed. A change of `config-autoscaler` or of
//! the image map (`lampyr-system/image-artifacts`, [`images`]) reconciles every
//! Revision again.

pub mod artifact;
pub mod autoscaler;
pub mod children;
mod configmap;
pub mod grants;
pub mod images;
pub mod metrics;
pub mod own_writes;
pub mod owned;
pub mod placement;
pub mod plan;
pub mod status;

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use lampyr_api::conditions::KnativeStatus;
use lampyr_api::{CapacityGrant, Home, HomeStatus, Revision, RevisionStatus, keys};
use lampyr_artifact::registry::RegistryError;
use serde::Serialize;

pub use artifact::{ArtifactProblem, ArtifactResolver, ResolvedArtifact};
pub use autoscaler::AutoscalerSettings;
pub use children::{FIELD_MANAGER, GrantSizing, Ownership};
pub use images::{ImageMap, ImageMapSettings};
pub use metrics::Metrics;

/// What the controller needs to know that no Revision says.
#[derive(Clone, Debug)]
pub struct ControllerConfig {
    /// DNS name of the fiber-router Service every Revision's Service points at
    /// (e.g. `fiber-router.lampyr-system.svc.cluster.local`).
    pub router_service: String,
    /// The size and images of each namespace's shared grant.
    pub grant: GrantSizing,
    /// Registries (`host:port`) reached over plain HTTP.
    pub plain_http_registries: Vec<String>,
    /// PEM certificate authorities registries may be signed by, besides the system's.
    pub registry_ca: Option<Vec<u8>>,
    /// The content cache artifacts are pulled into.
    pub cache_dir: PathBuf,
    /// Bytes each repository's cache may hold: verified artifacts past it are evicted,
    /// least recently used first (their metadata stays in memory).
    pub cache_max_bytes: u64,
    /// Reconcile Revisions of this namespace only (all namespaces when `None`).
    pub namespace: Option<String>,
    /// Revisions reconciled at once.
    pub concurrency: u16,
    /// Reconcile every Revision at least this often (a fallback: every input is watched).
    pub resync: Duration,
    /// First retry delay after a failed reconcile; doubles up to `retry_max`.
    pub retry_base: Duration,
    /// Longest retry delay.
    pub retry_max: Duration,
    /// How long a new Revision may take to have its template loaded before it
    /// fails with `ProgressDeadlineExceeded` (upstream's `config-deployment`
    /// `progress-deadline`); a Revision's `serving.knative.dev/progress-deadline`
    /// annotation overrides it.
    pub progress_deadline: Duration,
    /// The ConfigMap holding the cluster's autoscaler settings, `(namespace, name)`.
    pub autoscaler_config: (String, String),
    /// The ConfigMap mapping container images to snapshot artifacts, `(namespace, name)`.
    pub image_map: (String, String),
}

impl ControllerConfig {
    /// The image map's ConfigMap as `namespace/name`.
    pub fn image_map_name(&self) -> String {
        format!("{}/{}", self.image_map.0, self.image_map.1)
    }

    /// A configuration with the defaults for everything but the router and the images.
    pub fn new(router_service: impl Into<String>, grant_image: impl Into<String>, helper_image: impl Into<String>) -> Self {
        ControllerConfig {
            router_service: router_service.into(),
            grant: GrantSizing {
                slots_per_instance: 100,
                memory_per_instance: 2 << 30,
                instances: 1,
                max_instances: 1,
                grant_image: grant_image.into(),
                helper_image: helper_image.into(),
            },
            plain_http_registries: Vec::new(),
            registry_ca: None,
            cache_dir: std::env::temp_dir().join("lampyr-controller-cache"),
            cache_max_bytes: 2 << 30,
            namespace: None,
            concurrency: 8,
            resync: Duration::from_secs(300),
            retry_base: Duration::from_secs(1),
            retry_max: Duration::from_secs(300),
            progress_deadline: Duration::from_secs(600),
            autoscaler_config: (
                lampyr_api::autoscaler::CONFIG_MAP_NAMESPACE.to_string(),
                lampyr_api::autoscaler::CONFIG_MAP_NAME.to_string(),
            ),
            image_map: (images::CONFIG_MAP_NAMESPACE.to_string(), images::CONFIG_MAP_NAME.to_string()),
        }
    }

    /// Refuses a configuration that would create objects the API server or the
    /// grant controller reject: images not pinned by digest, no router, no instances.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |what: String| Err(Error::Config(what));
        for (flag, image) in [("grant image", &self.grant.grant_image), ("helper image", &self.grant.helper_image)] {
            if let Err(e) = artifact::parse_pinned(image) {
                return bad(format!("the {flag} {image:?} must be pinned by digest (registry/repository@sha256:…): {e}"));
            }
            if image.starts_with("http://") || image.starts_with("https://") {
                return bad(format!("the {flag} {image:?} must be a plain image reference, without a scheme"));
            }
        }
        let router = &self.router_service;
        let dns_ok = !router.is_empty()
            && router.len() <= 253
            && router
                .split('.')
                .all(|l| !l.is_empty() && l.len() <= 63 && l.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'));
        if !dns_ok {
            return bad(format!("the router service {router:?} is not a DNS name (e.g. fiber-router.lampyr-system.svc.cluster.local)"));
        }
        if self.grant.instances < 1 || self.grant.slots_per_instance < 1 || self.grant.memory_per_instance < 1 {
            return bad("the shared grant's instances, fiber slots and memory per instance must be at least 1".into());
        }
        if self.grant.max_instances < self.grant.instances {
            return bad(format!(
                "the shared grant's most instances ({}) must be at least its instances ({})",
                self.grant.max_instances, self.grant.instances
            ));
        }
        if self.concurrency == 0 {
            return bad("concurrency must be at least 1".into());
        }
        Ok(())
    }
}

/// Why a reconcile failed (the status says why to the user; this says why to the operator).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API server refused or failed a request (retried with backoff).
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// The artifact could not be resolved for a reason that may pass (status
    /// written; retried with backoff).
    #[error("snapshot artifact: {0}")]
    Artifact(ArtifactProblem),
    /// The registry client could not be created.
    #[error("registry client: {0}")]
    Registry(#[from] RegistryError),
    /// An object could not be serialised (a bug).
    #[error("serialising {what}: {source}")]
    Serialize {
        /// What.
        what: &'static str,
        /// Why.
        source: serde_json::Error,
    },
    /// The controller's configuration cannot work; the message says what to change.
    #[error("configuration: {0}")]
    Config(String),
    /// Lampyr's CRDs are not installed.
    #[error("{0} (install them: kubectl apply --server-side -f config/crd/lampyr.yaml)")]
    CrdsMissing(String),
}

impl Error {
    /// A bounded label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(_) => "kube",
            Error::Artifact(p) => p.metric_label(),
            Error::Registry(_) => "registry_client",
            Error::Serialize { .. } => "serialize",
            Error::Config(_) => "config",
            Error::CrdsMissing(_) => "crds_missing",
        }
    }
}

/// Everything a reconcile uses.
pub struct Context {
    client: Client,
    config: ControllerConfig,
    artifacts: ArtifactResolver,
    metrics: Metrics,
    failures: Mutex<HashMap<String, u32>>,
    autoscaler: Arc<AutoscalerSettings>,
    images: Arc<ImageMapSettings>,
    grants: Arc<grants::Grants>,
    /// Our status writes (and Home applies) the watches have not shown yet.
    own_writes: own_writes::OwnWrites,
    /// The Revisions' ExternalName Services, as last observed.
    services: owned::Owned<Service>,
    /// Whether [`watch_settings`] runs for this context.
    watching_settings: AtomicBool,
}

impl Context {
    /// A context for `config` (validated). It changes nothing process-wide: the
    /// registry client uses rustls with the provider the build links (`ring` only, as
    /// kube's); a host that links a second provider installs its default first
    /// (`docs/embedding.md`).
    pub fn new(client: Client, config: ControllerConfig, metrics: Metrics) -> Result<Self, Error> {
        config.validate()?;
        let artifacts = ArtifactResolver::new(&config.cache_dir, &config.plain_http_registries)?
            .with_cache_limit(config.cache_max_bytes)
            .with_registry_ca(config.registry_ca.clone())?;
        Ok(Context {
            client,
            config,
            artifacts,
            metrics,
            failures: Mutex::new(HashMap::new()),
            autoscaler: Arc::default(),
            images: Arc::default(),
            grants: Arc::default(),
            own_writes: own_writes::OwnWrites::default(),
            services: owned::Owned::default(),
            watching_settings: AtomicBool::new(false),
        })
    }

    /// The metrics this context records.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The cluster's autoscaler settings in effect.
    pub fn autoscaler(&self) -> &AutoscalerSettings {
        &self.autoscaler
    }

    /// The image map in effect.
    pub fn images(&self) -> &ImageMapSettings {
        &self.images
    }

    /// Completes once `config-autoscaler` and the image map were read.
    pub async fn settings_synced(&self) {
        self.autoscaler.synced().await;
        self.images.synced().await;
    }

    fn failures(&self) -> std::sync::MutexGuard<'_, HashMap<String, u32>> {
        self.failures.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Checks that Lampyr's CRDs are served, so a missing install fails at start with the fix.
pub async fn check_crds(client: &Client) -> Result<(), Error> {
    let lp = ListParams::default().limit(1);
    for result in [
        Api::<Home>::all(client.clone()).list_metadata(&lp).await.map(drop),
        Api::<CapacityGrant>::all(client.clone()).list_metadata(&lp).await.map(drop),
    ] {
        match result {
            Ok(()) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {
                return Err(Error::CrdsMissing("the fiber.lampyr.dev CRDs (Home, CapacityGrant) are not installed".into()));
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Watches the cluster's `config-autoscaler` and the image map for `context` until
/// the process ends (see [`autoscaler`] and [`images`]). [`run`] starts it unless it
/// runs already, so a binary may start it first, for every replica, leader or not.
pub async fn watch_settings(context: Arc<Context>) {
    if context.watching_settings.swap(true, Ordering::AcqRel) {
        return;
    }
    let (namespace, name) = context.config.autoscaler_config.clone();
    let autoscaler = autoscaler::watch(context.client.clone(), namespace, name, Arc::clone(&context.autoscaler), context.metrics.clone());
    let (namespace, name) = context.config.image_map.clone();
    let images = images::watch(context.client.clone(), namespace, name, Arc::clone(&context.images), context.metrics.clone());
    futures::join!(autoscaler, images);
}

/// Runs the reconciler until `shutdown` completes (then finishes the reconciles
/// in flight and returns). Reconciles start once `config-autoscaler` and the image
/// map were read, so a restart never writes other settings than the cluster's.
pub async fn run(context: Arc<Context>, shutdown: impl Future<Output = ()> + Send + Sync + 'static) -> Result<(), Error> {
    check_crds(&context.client).await?;
    let watching = (!context.watching_settings.load(Ordering::Acquire)).then(|| tokio::spawn(watch_settings(Arc::clone(&context))));
    let (namespace, name) = &context.config.autoscaler_config;
    let (map_namespace, map_name) = &context.config.image_map;
    tracing::info!(
        autoscaler = %format!("{namespace}/{name}"), images = %format!("{map_namespace}/{map_name}"),
        "waiting for the cluster's autoscaler settings and image map"
    );
    context.settings_synced().await;
    let client = context.client.clone();
    let config = &context.config;
    let (revisions, services) = match &config.namespace {
        Some(ns) => (Api::<Revision>::namespaced(client.clone(), ns), Api::<Service>::namespaced(client.clone(), ns)),
        None => (Api::all(client.clone()), Api::all(client.clone())),
    };
    let ours = watcher::Config::default().labels(&format!("{}={FIELD_MANAGER}", children::MANAGED_BY_LABEL));
    // Homes and grants are watched once, by the placement stores, Services by theirs;
    // each wakes the Revisions a change concerns, and reconciles read them there.
    let (woken, to_resize) = context.grants.watch(&client, config.namespace.as_deref());
    let services_woken = context.services.watch(services, ours);
    tracing::info!("waiting for the Home, CapacityGrant and Service watches to list");
    context.grants.wait_until_ready().await;
    context.services.wait_until_ready().await;
    tracing::info!(namespace = ?config.namespace, router = %config.router_service, "lampyr-controller: reconciling Revisions");
    let sizing = tokio::spawn(size_shared_grants(Arc::clone(&context), to_resize));
    Controller::new(revisions, watcher::Config::default())
        .reconcile_all_on(futures::stream::select(context.autoscaler.changes(), context.images.changes()))
        .reconcile_on(woken)
        .reconcile_on(services_woken)
        .with_config(controller::Config::default().concurrency(config.concurrency))
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, context.clone())
        .for_each(|result| async move {
            match result {
                Ok((object, _)) => tracing::debug!(revision = %object, "reconciled"),
                Err(controller::Error::ReconcilerFailed(err, object)) => {
                    tracing::warn!(revision = %object, error = %err, "reconcile failed; retrying with backoff");
                }
                Err(err) => tracing::warn!(error = %err, "controller"),
            }
        })
        .await;
    sizing.abort();
    if let Some(watching) = watching {
        watching.abort();
    }
    tracing::info!("lampyr-controller: stopped");
    Ok(())
}

fn key(rev: &Revision) -> String {
    ObjectRef::from_obj(rev).to_string()
}

/// The key of the Home of Revision `namespace/name` (they share the name).
fn home_key(namespace: &str, name: &str) -> String {
    ObjectRef::<Home>::new(name).within(namespace).to_string()
}

/// Reconciles one Revision (see the module documentation).
pub async fn reconcile(rev: Arc<Revision>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = std::time::Instant::now();
    let result = reconcile_revision(&rev, &ctx).await;
    ctx.metrics.reconcile_seconds.observe(started.elapsed().as_secs_f64());
    let label = match &result {
        Ok(_) => "success",
        Err(e) => e.metric_label(),
    };
    Metrics::count(&ctx.metrics.reconciles, "result", label);
    if result.is_ok() {
        ctx.failures().remove(&key(&rev));
    }
    result
}

/// Requeues a failed Revision with exponential backoff (per Revision, reset by a success).
pub fn error_policy(rev: Arc<Revision>, err: &Error, ctx: Arc<Context>) -> Action {
    let attempts = {
        let mut failures = ctx.failures();
        let n = failures.entry(key(&rev)).or_insert(0);
        *n = n.saturating_add(1);
        *n
    };
    let delay = backoff(ctx.config.retry_base, ctx.config.retry_max, attempts);
    tracing::info!(revision = %key(&rev), error = %err, attempts, ?delay, "will retry");
    Action::requeue(delay)
}

/// `base × 2^(attempt-1)`, at most `max`.
pub fn backoff(base: Duration, max: Duration, attempt: u32) -> Duration {
    let factor = 2u32.saturating_pow(attempt.saturating_sub(1).min(20));
    base.saturating_mul(factor).min(max)
}

async fn reconcile_revision(rev: &Revision, ctx: &Context) -> Result<Action, Error> {
    let ns = rev.namespace().unwrap_or_default();
    let name = rev.name_any();
    // The own-writes keys of the Revision and of its Home (they share the name).
    let (rev_key, home_key) = (key(rev), home_key(&ns, &name));
    if rev.metadata.deletion_timestamp.is_some() {
        // The garbage collector removes the children with it.
        ctx.own_writes.forget(&rev_key);
        ctx.own_writes.forget(&home_key);
        return Ok(Action::await_change());
    }
    // Read before the watch delivered our last status write: that event reconciles it again.
    if ctx.own_writes.is_stale(&rev_key, rev.metadata.resource_version.as_deref()) {
        tracing::debug!(revision = %rev_key, "the watch has not shown our last write yet");
        return Ok(Action::requeue(STALE_RECHECK));
    }
    let uid = rev.metadata.uid.clone().unwrap_or_default();
    let homes: Api<Home> = Api::namespaced(ctx.client.clone(), &ns);
    let services: Api<Service> = Api::namespaced(ctx.client.clone(), &ns);

    // Observe. The artifact (the annotation's, else the image map's entry for the
    // container image), pulled by digest and verified (once per process).
    let annotation = rev.annotations().get(keys::SNAPSHOT_ARTIFACT).map(String::as_str);
    let image = rev.spec.containers.first().and_then(|c| c.image.clone()).unwrap_or_default();
    let image_map = ctx.images.current();
    let mapped = annotation.is_none().then(|| image_map.lookup(&image)).flatten();
    let reference = annotation.or(mapped.map(|entry| entry.artifact.as_str()));
    let resolved = match reference {
        None => Err(ArtifactProblem::Missing { image: image.clone(), map: ctx.config.image_map_name() }),
        Some(value) => {
            let secrets = children::pull_secret_names(rev);
            let service_account = rev.spec.service_account_name.as_deref().filter(|n| !n.is_empty());
            let puller = artifact::Puller { client: &ctx.client, namespace: &ns, secrets: &secrets, service_account };
            ctx.artifacts.resolve(value, &puller).await
        }
    };
    match &resolved {
        Ok((artifact, pulled)) => {
            tracing::debug!(revision = %rev_key, reference = %artifact.reference, pulled, "artifact verified");
            if *pulled {
                Metrics::count(&ctx.metrics.artifact_pulls, "outcome", "verified");
            }
        }
        Err(problem) => Metrics::count(&ctx.metrics.artifact_failures, "problem", problem.metric_label()),
    }
    // The children as last observed: a Home an earlier write of ours has not reached yet
    // is applied again, which changes nothing. The Service store holds only Services we
    // manage; one it lacks is created once the plan deploys (below).
    let mut home = ctx.grants.home(&ns, &name).map(Arc::unwrap_or_clone);
    if home.as_ref().is_some_and(|h| ctx.own_writes.is_stale(&home_key, h.metadata.resource_version.as_deref())) {
        tracing::debug!(revision = %rev_key, "the Home watch has not shown our last write yet");
        return Ok(Action::requeue(STALE_RECHECK));
    }
    let service = ctx.services.get(&ns, &name).map(Arc::unwrap_or_clone);
    // Declared before `observed`, which borrows it once it is set.
    let created: Service;
    // A grant named like the Revision and controlled by it: an older version's per-Revision grant.
    let legacy = ctx.grants.grant(&ns, &name).filter(|g| children::ownership(Some(g.as_ref()), &uid) == Ownership::Ours);
    let autoscaler = ctx.autoscaler.current();
    let mut observed = plan::Observed {
        revision: rev,
        now: Time(Timestamp::now()),
        reference,
        mapped: mapped.map(|entry| images::audit(entry, &image, &ctx.config.image_map_name())),
        resolved: resolved.map(|(artifact, _)| artifact),
        autoscaler: &autoscaler,
        home: home.as_ref(),
        service: service.as_ref(),
        router_service: &ctx.config.router_service,
    };
    let now = observed.now.clone();

    // Plan, then apply: never touching a child this Revision does not control. A Service
    // the store lacks is created first (or, when one is there, read), and the plan made
    // again with it: a same-named Service someone else made stops the Revision before its
    // Home is applied.
    let mut plan = plan::plan(&observed);
    if let (None, plan::Children::Deploy(desired)) = (&observed.service, &plan.children) {
        created = create_or_read(&services, &name, &desired.service, ctx).await?;
        observed.service = Some(&created);
        plan = plan::plan(&observed);
    }
    if let (true, Some(problem)) = (plan.kept, &plan.retry) {
        tracing::warn!(revision = %rev_key, %problem, "cannot re-verify the artifact; keeping the Revision's state");
    }
    let propagates_home = plan.propagates_home();
    let plan::Plan { mut status, retry, policy, children, .. } = plan;
    let not_owned = matches!(children, plan::Children::NotOurs);
    let mut waiting = false;
    if let plan::Children::Deploy(desired) = children {
        if desired.grant == keys::SHARED_GRANT_NAME {
            ensure_shared_grant(ctx, &ns, (!desired.placed).then_some(desired.demand)).await?;
        }
        if desired.placed {
            if !desired.home_current {
                let applied = apply(&homes, &name, &desired.home, ctx, "Home").await?;
                ctx.own_writes.record(home_key.clone(), applied.metadata.resource_version.as_deref());
                home = Some(applied);
            }
        } else {
            match place_home(ctx, &homes, &desired.home, desired.demand).await? {
                Ok(applied) => home = Some(applied),
                // Still on an older version's grant: it keeps serving from there meanwhile.
                Err(unplaceable) if home.is_some() => {
                    tracing::warn!(revision = %rev_key, %unplaceable, "cannot move off the per-Revision grant yet");
                    waiting = true;
                }
                Err(unplaceable) => {
                    tracing::info!(revision = %rev_key, %unplaceable, "waiting for room");
                    status::resources_failed(&mut status, status::REASON_UNSCHEDULABLE, &unplaceable.to_string(), &now);
                    waiting = true;
                }
            }
        }
        if !desired.service_current {
            apply(&services, &name, &desired.service, ctx, "Service").await?;
        }
    }
    ctx.grants.set_waiting(&ns, &name, waiting);

    // 5 + 6. The Home's status from its grant and instances; the Revision's from the Home.
    // A new Home's first status waits a moment for fiberd's report, which replaces it.
    let mut first_status_held = None;
    if !not_owned && let Some(home) = home.as_ref() {
        let grant = ctx.grants.grant(&ns, &home.spec.grant_name);
        let computed = status::home_status(home, grant.as_deref(), &now);
        first_status_held = status::first_status_held(home, &computed, &now);
        if first_status_held.is_none() && status::home_status_changed(home.status.as_ref(), &computed) {
            let written = write_home_status(&homes, home, &computed).await?;
            ctx.own_writes.record(home_key.clone(), written.metadata.resource_version.as_deref());
            Metrics::count(&ctx.metrics.status_writes, "object", "home");
        }
        if let (Some(policy), true) = (&policy, propagates_home) {
            status::propagate_home(&mut status, &computed, policy, &now);
        }
        // Moved off an older version's per-Revision grant: once it serves from the new one,
        // the old grant (and its Pods) go.
        if let Some(old) = legacy.filter(|_| home.spec.grant_name != name && computed.is_ready(home.metadata.generation)) {
            delete_legacy_grant(ctx, &ns, &old).await?;
        }
    }

    let deadline = progress_deadline(rev, ctx.config.progress_deadline);
    let deadline_in = time_left(rev, deadline, &now);
    if deadline_in.is_some_and(|left| left.is_zero()) {
        status::progress_deadline_exceeded(&mut status, deadline, &now);
    }

    if let Some(stored) = rev.status.as_ref() {
        lampyr_api::conditions::keep_transition_times(&stored.conditions, &mut status.conditions);
    }
    if rev.status.as_ref() != Some(&status) {
        let written = write_revision_status(ctx, &ns, &name, rev.status.as_ref(), &status).await?;
        ctx.own_writes.record(rev_key.clone(), written.metadata.resource_version.as_deref());
        let before = rev.status.as_ref().and_then(|s| s.annotations.get(keys::IMAGE_MAPPED));
        if let Some(mapping) = status.annotations.get(keys::IMAGE_MAPPED).filter(|now| Some(*now) != before) {
            images::publish_mapped(&ctx.client, rev, mapping).await;
        }
        Metrics::count(&ctx.metrics.status_writes, "object", "revision");
    }
    // A held Home status is written then if fiberd's report (which wakes it sooner) does not come.
    let resync = first_status_held.map_or(ctx.config.resync, |left| left.min(ctx.config.resync));
    match retry {
        Some(problem) => Err(Error::Artifact(problem)),
        // Woken when a Home or grant of the namespace changes; this is the fallback.
        None if waiting => Ok(Action::requeue(WAITING_RECHECK.min(resync))),
        // Look again when the deadline passes if nothing else happens by then.
        None if !status::initialized(&status) => match deadline_in.filter(|left| !left.is_zero()) {
            Some(left) => Ok(Action::requeue(left.min(resync))),
            None => Ok(Action::requeue(resync)),
        },
        None => Ok(Action::requeue(resync)),
    }
}

/// Sizes each namespace's shared grant again as its allocation changes (what fiberd
/// reports: fibers warming beyond the reservations) until the stream ends.
async fn size_shared_grants(ctx: Arc<Context>, namespaces: impl Stream<Item = String>) {
    let mut namespaces = std::pin::pin!(namespaces);
    while let Some(namespace) = namespaces.next().await {
        if let Err(e) = ensure_shared_grant(&ctx, &namespace, None).await {
            tracing::warn!(namespace, error = %e, "sizing the shared grant failed; the next change tries again");
        }
    }
}

/// When a Revision read before the watch showed our last write looks again if that
/// write's own event has not woken it by then.
const STALE_RECHECK: Duration = Duration::from_secs(1);

/// How often a Revision waiting for room looks again when nothing wakes it.
const WAITING_RECHECK: Duration = Duration::from_secs(30);

/// Creates the namespace's shared grant, or brings it to the controller's sizing and
/// images, with as many instances as its load needs (its placed Homes, plus `placing`, a
/// Home about to be placed on it, and what fiberd reports) within the controller's bounds;
/// a grant of that name the controller did not create is the operator's, and is used as it is.
async fn ensure_shared_grant(ctx: &Context, namespace: &str, placing: Option<placement::Demand>) -> Result<(), Error> {
    let current = ctx.grants.grant(namespace, keys::SHARED_GRANT_NAME);
    let sizing = &ctx.config.grant;
    let mut placed = ctx.grants.placed(namespace, keys::SHARED_GRANT_NAME, "");
    placed.extend(placing);
    let load = placement::Load::of(&placed, current.as_deref());
    let per_instance = placement::Load { slots: u64::from(sizing.slots_per_instance), memory: sizing.memory_per_instance };
    let now = current.as_ref().map_or(sizing.instances, |g| g.spec.instances);
    let instances = placement::shared_instances(load, per_instance, now, sizing.instances, sizing.max_instances);
    if instances != now && current.as_deref().is_some_and(children::managed_by_us) {
        tracing::info!(namespace, from = now, to = instances, ?load, "resizing the shared grant");
    }
    let desired = children::shared_grant(namespace, sizing, instances);
    let up_to_date = current.as_ref().is_some_and(|g| !children::managed_by_us(g) || g.spec == desired.spec);
    if !up_to_date {
        let grants: Api<CapacityGrant> = Api::namespaced(ctx.client.clone(), namespace);
        apply(&grants, keys::SHARED_GRANT_NAME, &desired, ctx, "CapacityGrant").await?;
    }
    Ok(())
}

/// Places `desired` on its grant when the grant has room: one placement at a time per
/// namespace, each counted by the next (the Home store shows it before the lock is let go).
async fn place_home(
    ctx: &Context,
    homes: &Api<Home>,
    desired: &Home,
    demand: placement::Demand,
) -> Result<Result<Home, placement::Unplaceable>, Error> {
    let ns = desired.namespace().unwrap_or_default();
    let name = desired.name_any();
    let grant_name = &desired.spec.grant_name;
    let lock = ctx.grants.lock(&ns);
    let _placing = lock.lock().await;
    let grant = match ctx.grants.grant(&ns, grant_name) {
        Some(grant) => grant,
        // Just applied and not yet watched: read it once.
        None => match Api::<CapacityGrant>::namespaced(ctx.client.clone(), &ns).get_opt(grant_name).await? {
            Some(grant) => Arc::new(grant),
            None => return Ok(Err(placement::Unplaceable::NoGrant { grant: grant_name.clone() })),
        },
    };
    let room = placement::Room::of_grant(&grant);
    if let Err(unplaceable) = placement::place(demand, &room, &ctx.grants.placed(&ns, grant_name, &name)) {
        return Ok(Err(unplaceable));
    }
    let applied = apply(homes, &name, desired, ctx, "Home").await?;
    Metrics::count(&ctx.metrics.placements, "grant", if grant_name == keys::SHARED_GRANT_NAME { "shared" } else { "named" });
    ctx.grants.await_home(&applied).await;
    Ok(Ok(applied))
}

/// Deletes an older version's per-Revision grant the Revision's Home has moved off.
async fn delete_legacy_grant(ctx: &Context, namespace: &str, grant: &CapacityGrant) -> Result<(), Error> {
    let grants: Api<CapacityGrant> = Api::namespaced(ctx.client.clone(), namespace);
    let name = grant.name_any();
    let precondition = kube::api::Preconditions { uid: grant.metadata.uid.clone(), resource_version: None };
    match grants.delete(&name, &kube::api::DeleteParams { preconditions: Some(precondition), ..Default::default() }).await {
        Ok(_) => tracing::info!(grant = %format!("{namespace}/{name}"), "deleted the per-Revision grant its Home moved off"),
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    Ok(())
}

/// The Revision's progress deadline: its annotation, else the controller's default.
fn progress_deadline(rev: &Revision, default: Duration) -> Duration {
    rev.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(keys::PROGRESS_DEADLINE_ANNOTATION))
        .and_then(|text| lampyr_api::duration::parse_go_duration(text).ok())
        .and_then(|d| d.non_negative())
        .unwrap_or(default)
}

/// Time left until `deadline` after the Revision's creation (zero once it has
/// passed); `None` when it has no creation time.
fn time_left(rev: &Revision, deadline: Duration, now: &Time) -> Option<Duration> {
    Some(deadline.saturating_sub(status::age(&rev.metadata, now)?))
}

async fn apply<K>(api: &Api<K>, name: &str, desired: &K, ctx: &Context, kind: &'static str) -> Result<K, Error>
where
    K: Resource + Clone + Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let applied = api.patch(name, &params, &Patch::Apply(desired)).await?;
    Metrics::count(&ctx.metrics.child_applies, "kind", kind);
    tracing::info!(kind, name, "applied");
    Ok(applied)
}

/// Creates the Revision's Service, or reads the one of its name already there (ours the
/// store has not shown yet, or someone else's): one request where reading first took two.
async fn create_or_read(api: &Api<Service>, name: &str, desired: &Service, ctx: &Context) -> Result<Service, Error> {
    let params = PostParams { field_manager: Some(FIELD_MANAGER.to_string()), ..PostParams::default() };
    match api.create(&params, desired).await {
        Ok(created) => {
            Metrics::count(&ctx.metrics.child_applies, "kind", "Service");
            tracing::info!(kind = "Service", name, "created");
            Ok(created)
        }
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(api.get(name).await?),
        Err(e) => Err(e.into()),
    }
}

async fn write_home_status(homes: &Api<Home>, home: &Home, computed: &HomeStatus) -> Result<Home, Error> {
    // Only the fields this controller owns: each fiberd owns its `instances` entry.
    let owned = HomeStatus { instances: Vec::new(), ..computed.clone() };
    let body = serde_json::json!({
        "apiVersion": lampyr_api::fiber::FIBER_API_VERSION,
        "kind": "Home",
        "metadata": { "name": home.name_any() },
        "status": owned,
    });
    Ok(homes.patch_status(&home.name_any(), &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&body)).await?)
}

async fn write_revision_status(
    ctx: &Context,
    ns: &str,
    name: &str,
    stored: Option<&RevisionStatus>,
    status: &RevisionStatus,
) -> Result<Revision, Error> {
    let mut value = serde_json::to_value(status).map_err(|source| Error::Serialize { what: "Revision status", source })?;
    // A merge patch keeps what it does not mention: clear fields that were dropped.
    if let (Some(stored), Some(map)) = (stored, value.as_object_mut()) {
        let old = serde_json::to_value(stored).map_err(|source| Error::Serialize { what: "Revision status", source })?;
        for key in old.as_object().into_iter().flat_map(|o| o.keys()) {
            map.entry(key.clone()).or_insert(serde_json::Value::Null);
        }
    }
    let revisions: Api<Revision> = Api::namespaced(ctx.client.clone(), ns);
    Ok(revisions.patch_status(name, &PatchParams::default(), &Patch::Merge(serde_json::json!({ "status": value }))).await?)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn backoff_doubles_up_to_the_limit() {
        let (b, m) = (Duration::from_secs(1), Duration::from_secs(300));
        let delays: Vec<u64> = (1..=10).map(|n| backoff(b, m, n).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300]);
        assert_eq!(backoff(b, m, u32::MAX), m);
    }

    #[test]
    fn configuration_must_pin_images_and_name_a_router() {
        let good = ControllerConfig::new(
            "fiber-router.lampyr-system.svc.cluster.local",
            format!("ghcr.io/lampyr/fiberd@{D}"),
            format!("ghcr.io/lampyr/helper@{D}"),
        );
        assert!(good.validate().is_ok());
        let mut c = good.clone();
        c.grant.grant_image = "ghcr.io/lampyr/fiberd:latest".into();
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains("grant image") && err.contains("pinned by digest"), "{err}");
        let mut c = good.clone();
        c.grant.helper_image = format!("http://localhost:5000/helper@{D}");
        assert!(c.validate().unwrap_err().to_string().contains("without a scheme"));
        let mut c = good;
        c.router_service = "Fiber Router".into();
        assert!(c.validate().unwrap_err().to_string().contains("DNS name"));
    }
}
