//! Cluster mode: the router's table from the API server.
//!
//! [`ClusterRoutes::start`] lists and watches, in every namespace:
//! - **Homes** (`fiber.lampyr.dev/v1alpha1`): each one becomes the Revision
//!   `namespace/<spec.revisionName>`, served by a [`FiberdBackend`] whose
//!   instances are the Home's `status.instances` with `loaded: true` and whose
//!   policy is `spec.policy`. A Home that is gone takes its Revision with it.
//! - **KIngresses** of the router's ingress class: their rules become host
//!   routes ([`crate::kingress`]), and once a KIngress is programmed its status
//!   says so (`observedGeneration`, `NetworkConfigured`, `LoadBalancerReady`,
//!   hence `Ready`; the private load balancer at the internal Service's DNS
//!   name, the public one at the public Service's), written through the
//!   `/status` subresource.
//!
//! - **Services and EndpointSlices**, when KIngresses are watched: a KIngress
//!   split naming no Revision here goes to the Service it names, at its ready
//!   endpoints for the split's port ([`crate::services`], [`ServiceBackend`]), as
//!   upstream's ingresses route to ordinary Services; such a KIngress is reported
//!   Ready only once each of those Services has a ready endpoint.
//!
//! - **TLS Secrets** (`type: kubernetes.io/tls`), when the router serves HTTPS
//!   ([`ClusterConfig::tls`]): each KIngress `spec.tls` entry's Secret gives
//!   the certificate its hosts are served with ([`crate::tls`]). A KIngress
//!   whose Secret is missing or unusable is not programmed at all, and its
//!   status says which Secret and why; it is programmed once the Secret is
//!   fixed. A KIngress asking for TLS from a router without HTTPS is not
//!   programmed either.
//!
//! Every change rebuilds the whole table from the watched state and swaps it
//! in ([`Router::set_table`]); Revisions keep their backends (connection
//! pools, waiting requests) across rebuilds. Because the state is listed
//! first, a restarted router converges to the API server's state without
//! having seen the changes it missed.
//!
//! The router's identity needs `get`, `list` and `watch` on `homes` and
//! `ingresses.networking.internal.knative.dev`, `patch` on
//! `ingresses/status`, `list` and `watch` on `services` and `endpointslices`, and, to serve HTTPS,
//! `list` and `watch` on `secrets`.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use lampyr_api::networking::Ingress;
use lampyr_api::{Home, keys};
use serde::de::DeserializeOwned;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use crate::fiberd_backend::{FiberdBackend, FiberdConfig, Instance};
use crate::kingress::{
    self, NotConfigured, REASON_HOST_CONFLICT, REASON_TLS_NOT_SERVED, REASON_TLS_SECRET_INVALID, REASON_TLS_SECRET_MISSING,
};
use crate::peers::Peers;
use crate::server::Router;
use crate::service_backend::ServiceBackend;
use crate::services::{self, SERVICE_NAME_LABEL, ServiceTarget};
use crate::table::{RevisionEntry, RouteTable};

/// How soon a KIngress waiting for other replicas is probed again.
const PEERS_RECHECK: Duration = Duration::from_millis(200);
/// Longest wait for resolving an instance address that is a DNS name.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(2);

/// Settings of cluster mode.
#[derive(Clone, Debug)]
pub struct ClusterConfig {
    /// The ingress class whose KIngresses the router implements
    /// ([`keys::FIBER_INGRESS_CLASS`] by default); `None`: KIngresses are
    /// neither watched nor programmed.
    pub ingress_class: Option<String>,
    /// DNS name of the router's internal Service, reported as `domainInternal` of
    /// the private load balancer in KIngress status (and of the public one unless
    /// [`ClusterConfig::public_service_dns`] is set).
    pub service_dns: String,
    /// DNS name of the router's public Service, reported as the public load balancer's
    /// `domainInternal`: where a client outside the cluster reaches `ExternalIP` rules.
    pub public_service_dns: Option<String>,
    /// Settings of each Revision's backend. Its `queue_capacity` applies to
    /// every Revision when [`ClusterConfig::fixed_queue_capacity`] is set;
    /// otherwise each Revision's comes from its policy ([`queue_capacity`]).
    pub backend: FiberdConfig,
    /// Use `backend.queue_capacity` for every Revision.
    pub fixed_queue_capacity: bool,
    /// Wait before retrying a status write that failed.
    pub retry: Duration,
    /// The router's own Service: a KIngress is reported Ready only once every ready replica
    /// behind it routes the KIngress's current spec ([`crate::peers`]). `None`: this process
    /// is the only router (tests, a single replica).
    pub peers: Option<Peers>,
    /// The router serves HTTPS: KIngress `spec.tls` Secrets are watched and their
    /// certificates served. Without it, a KIngress asking for TLS is not programmed.
    pub tls: bool,
}

impl ClusterConfig {
    /// Implements [`keys::FIBER_INGRESS_CLASS`], reporting `service_dns`.
    pub fn new(service_dns: impl Into<String>) -> Self {
        ClusterConfig {
            ingress_class: Some(keys::FIBER_INGRESS_CLASS.to_string()),
            service_dns: service_dns.into(),
            public_service_dns: None,
            backend: FiberdConfig::default(),
            fixed_queue_capacity: false,
            retry: Duration::from_secs(5),
            peers: None,
            tls: false,
        }
    }
}

/// How many requests may wait for an instance of a Revision with `policy`:
/// [`queue_for_fibers`] of the fibers it may have (64 when `max-scale` is unbounded).
pub fn queue_capacity(policy: &lampyr_api::policy::FiberPolicy) -> usize {
    let max = if policy.scaling.max_scale == 0 { 64 } else { policy.scaling.max_scale as usize };
    queue_for_fibers(max)
}

/// How many requests may wait for a Revision that may have `fibers` fibers, in
/// `ly run`, fiberd and fiber-router alike: 10 per fiber, between 100 and 10,000.
pub fn queue_for_fibers(fibers: usize) -> usize {
    const PER_FIBER: usize = 10;
    fibers.saturating_mul(PER_FIBER).clamp(100, 10_000)
}

/// The watches and the loop keeping a [`Router`]'s table in step with the
/// cluster; stopped when dropped (the router keeps its last table).
pub struct ClusterRoutes {
    tasks: Vec<JoinHandle<()>>,
    synced: watch::Receiver<bool>,
}

impl ClusterRoutes {
    /// Starts watching with `client` and programming `router`.
    pub fn start(router: Arc<Router>, client: Client, config: ClusterConfig) -> Self {
        let notify = Arc::new(Notify::new());
        let every = watcher::Config::default;
        let (homes, home_task) = watch_all(Api::<Home>::all(client.clone()), every(), Arc::clone(&notify), "Homes");
        let mut tasks = vec![home_task];
        let ingresses = config.ingress_class.as_ref().map(|_| {
            let (store, task) = watch_all(Api::<Ingress>::all(client.clone()), every(), Arc::clone(&notify), "KIngresses");
            tasks.push(task);
            store
        });
        let secrets = (config.ingress_class.is_some() && config.tls).then(|| {
            let tls_only = every().fields(&format!("type={TLS_SECRET_TYPE}"));
            let (store, task) = watch_all(Api::<Secret>::all(client.clone()), tls_only, Arc::clone(&notify), "TLS Secrets");
            tasks.push(task);
            store
        });
        let services = config.ingress_class.as_ref().map(|_| {
            let (store, task) = watch_all(Api::<Service>::all(client.clone()), every(), Arc::clone(&notify), "Services");
            tasks.push(task);
            store
        });
        let endpoint_slices = config.ingress_class.as_ref().map(|_| {
            let (store, task) = watch_all(Api::<EndpointSlice>::all(client.clone()), every(), Arc::clone(&notify), "EndpointSlices");
            tasks.push(task);
            store
        });
        let (synced_tx, synced) = watch::channel(false);
        let reconciler =
            Reconciler { router, client, config, backends: HashMap::new(), service_backends: HashMap::new(), certificates: HashMap::new() };
        let stores = Stores { homes, ingresses, secrets, services, endpoint_slices };
        tasks.push(tokio::spawn(reconciler.run(stores, notify, synced_tx)));
        ClusterRoutes { tasks, synced }
    }

    /// Waits until the router serves the listed state: every watch has listed
    /// once and the table built from it is in place.
    pub async fn synced(&self) {
        let mut synced = self.synced.clone();
        // An error means the loop ended (only when stopped); nothing more will come.
        let _ = synced.wait_for(|s| *s).await;
    }

    /// Whether [`ClusterRoutes::synced`] would return at once.
    pub fn is_synced(&self) -> bool {
        *self.synced.borrow()
    }
}

impl Drop for ClusterRoutes {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// The type of the Secrets `spec.tls` may name.
const TLS_SECRET_TYPE: &str = "kubernetes.io/tls";

/// Lists and watches every `K` that `config` selects, keeping a store and waking `notify` on each change.
fn watch_all<K>(api: Api<K>, config: watcher::Config, notify: Arc<Notify>, what: &'static str) -> (Store<K>, JoinHandle<()>)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store();
    let events = watcher(api, config).default_backoff().map_ok(|event| event.modify(|object| object.managed_fields_mut().clear()));
    let stream = reflector::reflector(writer, events);
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(_) => notify.notify_one(),
                Err(e) => tracing::warn!(error = %e, "watching {what} failed; retrying with backoff"),
            }
        }
    });
    (reader, task)
}

/// What the router watches.
struct Stores {
    homes: Store<Home>,
    ingresses: Option<Store<Ingress>>,
    secrets: Option<Store<Secret>>,
    services: Option<Store<Service>>,
    endpoint_slices: Option<Store<EndpointSlice>>,
}

impl Stores {
    /// Waits until every store has listed once; `false` when a watch ended first.
    async fn listed(&self) -> bool {
        self.homes.wait_until_ready().await.is_ok()
            && listed_if_watched(&self.ingresses).await
            && listed_if_watched(&self.secrets).await
            && listed_if_watched(&self.services).await
            && listed_if_watched(&self.endpoint_slices).await
    }
}

/// Whether `store` has listed once (true when that kind is not watched).
async fn listed_if_watched<K>(store: &Option<Store<K>>) -> bool
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    match store {
        Some(store) => store.wait_until_ready().await.is_ok(),
        None => true,
    }
}

/// A TLS Secret's certificate, parsed at one `resourceVersion` (or why it cannot be served).
type ParsedSecret = (Option<String>, Result<Arc<rustls::sign::CertifiedKey>, String>);

struct Reconciler {
    router: Arc<Router>,
    client: Client,
    config: ClusterConfig,
    backends: HashMap<(String, String), Arc<FiberdBackend>>,
    /// Backends of KIngress splits naming an ordinary Service, by namespace and name.
    service_backends: HashMap<(String, String), (ServiceTarget, Arc<ServiceBackend>)>,
    /// Secrets parsed before, by namespace and name: parsed again only when they change.
    certificates: HashMap<(String, String), ParsedSecret>,
}

impl Reconciler {
    async fn run(mut self, stores: Stores, notify: Arc<Notify>, synced: watch::Sender<bool>) {
        if !stores.listed().await {
            return;
        }
        tracing::info!("Homes, KIngresses, Secrets, Services and EndpointSlices listed; routing");
        loop {
            let settled = self.reconcile(&stores).await;
            synced.send_replace(true);
            let wait = match settled {
                Settled::Yes => None,
                Settled::RetryWrites => Some(self.config.retry),
                Settled::WaitingForPeers => Some(PEERS_RECHECK),
            };
            match wait {
                None => notify.notified().await,
                Some(wait) => tokio::select! {
                    () = notify.notified() => {}
                    () = tokio::time::sleep(wait) => {}
                },
            }
        }
    }

    /// Rebuilds the table from the stores and writes KIngress statuses; says whether
    /// something is left to retry.
    async fn reconcile(&mut self, stores: &Stores) -> Settled {
        let (ingresses, secrets) = (stores.ingresses.as_ref(), stores.secrets.as_ref());
        let mut table = RouteTable::default();
        let mut homes = stores.homes.state();
        homes.sort_by_key(|h| (h.namespace(), h.name_any()));
        let mut live = HashSet::new();
        for home in &homes {
            let Some(namespace) = home.metadata.namespace.clone() else { continue };
            let revision = if home.spec.revision_name.is_empty() { home.name_any() } else { home.spec.revision_name.clone() };
            let key = (namespace.clone(), revision.clone());
            if !live.insert(key.clone()) {
                tracing::warn!(home = %home.name_any(), %namespace, %revision, "another Home already publishes this Revision; ignored");
                continue;
            }
            let policy = &home.spec.policy;
            let backend = self.backends.entry(key).or_insert_with(|| {
                let mut config = self.config.backend.clone();
                if !self.config.fixed_queue_capacity {
                    config.queue_capacity = queue_capacity(policy);
                }
                FiberdBackend::new(&namespace, &revision, config, self.router.metrics())
            });
            backend.set_instances(&loaded_instances(home).await, policy.http2);
            table.insert_revision(RevisionEntry::new(namespace, revision, policy.clone(), Arc::clone(backend) as _));
        }
        self.backends.retain(|key, backend| {
            let keep = live.contains(key);
            if !keep {
                tracing::info!(namespace = %key.0, revision = %key.1, "Home gone; Revision removed");
                backend.close();
            }
            keep
        });

        let mut outcomes = Vec::new();
        if let (Some(store), Some(class)) = (ingresses, self.config.ingress_class.as_deref()) {
            let mut ours: Vec<Arc<Ingress>> = store.state().into_iter().filter(|i| kingress::ingress_class(i) == Some(class)).collect();
            // The oldest KIngress keeps a host another one claims too.
            ours.sort_by_key(|i| (i.metadata.creation_timestamp.clone(), i.namespace(), i.name_any()));
            let mut used = HashSet::new();
            for ingress in ours {
                let outcome = kingress::routes(&ingress).and_then(|routes| {
                    let certificates = self.certificates_of(&ingress, secrets, &mut used)?;
                    program(&mut table, routes, certificates)
                });
                outcomes.push((ingress, outcome));
            }
            self.certificates.retain(|key, _| used.contains(key));
        }
        let waiting = match (&stores.services, &stores.endpoint_slices) {
            (Some(services), Some(slices)) => self.route_services(&mut table, services, slices),
            _ => HashMap::new(),
        };
        // Another replica writing the status probes this one: it must not say it routes the
        // host before it can (its EndpointSlices may lag the other replica's).
        table.withhold_hashes(|ingress| waiting.contains_key(ingress));
        self.router.set_table(table);
        let programmed = outcomes.iter().filter(|(_, o)| o.is_ok()).count();
        self.router.metrics().ingresses.set(programmed as i64);

        let mut settled = Settled::Yes;
        for (ingress, outcome) in outcomes {
            if ingress.metadata.deletion_timestamp.is_some() {
                continue;
            }
            if let Err(why) = &outcome {
                tracing::warn!(namespace = %ingress.namespace().unwrap_or_default(), ingress = %ingress.name_any(), reason = why.reason, message = %why.message, "KIngress not programmed");
            }
            let balancers = kingress::LoadBalancers {
                private: &self.config.service_dns,
                public: self.config.public_service_dns.as_deref().unwrap_or(&self.config.service_dns),
            };
            let desired = kingress::desired_status(&ingress, outcome.as_ref().map(|_| ()), balancers);
            if ingress.status.as_ref() == Some(&desired) {
                continue;
            }
            if outcome.is_ok()
                && let Some(service) = waiting.get(&kingress::ingress_key(&ingress))
            {
                // Not Ready (its last status stays) until the Service it routes to can answer.
                tracing::debug!(ingress = %ingress.name_any(), %service, "not Ready until the Service a split names exists and has ready endpoints");
                settled = Settled::WaitingForPeers;
                continue;
            }
            if let (Ok(()), Some(peers), Some(host)) = (&outcome, &self.config.peers, kingress::probe_host(&ingress))
                && let Err(not_yet) = peers.all_route(&self.client, host, &kingress::hash(&ingress)).await
            {
                match &not_yet {
                    crate::peers::NotYet::Endpoints(_) => {
                        tracing::warn!(ingress = %ingress.name_any(), %not_yet, "cannot tell whether every replica routes it (fiber-router needs list on endpointslices in its namespace)");
                    }
                    crate::peers::NotYet::Behind { .. } => {
                        tracing::debug!(ingress = %ingress.name_any(), %not_yet, "not Ready until every replica routes it")
                    }
                }
                settled = Settled::WaitingForPeers;
                continue;
            }
            let api = Api::<Ingress>::namespaced(self.client.clone(), &ingress.namespace().unwrap_or_default());
            let patch = serde_json::json!({ "status": desired });
            match api.patch_status(&ingress.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await {
                Ok(_) => tracing::debug!(ingress = %ingress.name_any(), "KIngress status written"),
                // Deleted meanwhile: nothing left to report on.
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => {
                    tracing::warn!(ingress = %ingress.name_any(), error = %e, "writing KIngress status failed; will retry");
                    settled = Settled::RetryWrites;
                }
            }
        }
        settled
    }
}

/// What a reconcile left to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Settled {
    /// Nothing: wait for the next change.
    Yes,
    /// A status write failed: retry after `ClusterConfig::retry`.
    RetryWrites,
    /// A KIngress waits for other replicas to route it: probe again soon.
    WaitingForPeers,
}

impl Reconciler {
    /// Gives every KIngress split that names no Revision the backend of the Service it
    /// names ([`crate::services`]): its ready endpoints, from its EndpointSlices, kept
    /// across rebuilds while its port stays the same. Returns the KIngresses (`namespace/name`)
    /// with a split to a Service that is not found or has no ready endpoint yet, and that Service.
    fn route_services(
        &mut self,
        table: &mut RouteTable,
        services: &Store<Service>,
        slices: &Store<EndpointSlice>,
    ) -> HashMap<String, String> {
        let mut wanted: Vec<(String, String, IntOrString, String)> = Vec::new();
        for (_, route) in table.hosts() {
            for split in route.paths.iter().flat_map(|p| &p.splits) {
                if table.revision(&split.namespace, &split.service).is_none() {
                    wanted.push((split.namespace.clone(), split.service.clone(), split.port.clone(), route.ingress.clone()));
                }
            }
        }
        let by_service = if wanted.is_empty() { HashMap::new() } else { slices_by_service(slices) };
        let (mut live, mut waiting) = (HashSet::new(), HashMap::new());
        for (namespace, name, port, ingress) in wanted {
            let key = (namespace.clone(), name.clone());
            if let Some((_, backend)) = self.service_backends.get(&key).filter(|_| live.contains(&key)) {
                // One backend per Service: the first split naming it gave the port.
                if backend.endpoints().is_empty() {
                    waiting.insert(ingress, format!("{namespace}/{name}"));
                }
                continue;
            }
            let Some(service) = services.get(&ObjectRef::new(&name).within(&namespace)) else {
                // Not routable here yet (this replica's watches may trail the one that saw it):
                // not Ready, and no claim to the host when another replica probes.
                tracing::debug!(%namespace, service = %name, "a KIngress split names neither a Revision nor a Service here");
                waiting.insert(ingress, format!("{namespace}/{name} (not found)"));
                continue;
            };
            let target = match services::target(&service, &port) {
                Ok(target) => target,
                Err(why) => {
                    // Debug: a DomainMapping's split names the Route's ExternalName placeholder on every rebuild.
                    tracing::debug!(%namespace, service = %name, %why, "cannot route a KIngress split to this Service");
                    continue;
                }
            };
            let backend = match self.service_backends.get(&key) {
                Some((kept, backend)) if *kept == target => Arc::clone(backend),
                _ => {
                    let (max, limits) = (self.config.backend.max_request_body, self.config.backend.limits.clone());
                    tracing::info!(%namespace, service = %name, port = %target.port_name, h2c = target.h2c, "routing KIngress splits to a Service's endpoints");
                    let built = Arc::new(ServiceBackend::new(format!("{namespace}/{name}"), max, limits, target.h2c));
                    self.service_backends.insert(key.clone(), (target.clone(), Arc::clone(&built)));
                    built
                }
            };
            let slices = by_service.get(&key).map(Vec::as_slice).unwrap_or_default();
            backend.set_endpoints(&services::ready_endpoints(slices.iter().map(Arc::as_ref), &target));
            if backend.endpoints().is_empty() {
                waiting.insert(ingress, format!("{namespace}/{name}"));
            }
            live.insert(key.clone());
            table.insert_revision(RevisionEntry::new(namespace, name, lampyr_api::policy::FiberPolicy::default(), backend));
        }
        self.service_backends.retain(|key, _| live.contains(key));
        waiting
    }

    /// The certificates `ingress`'s `spec.tls` asks for, by host, from the watched
    /// Secrets (parsed once per `resourceVersion`); every Secret it names is added to `used`.
    fn certificates_of(
        &mut self,
        ingress: &Ingress,
        secrets: Option<&Store<Secret>>,
        used: &mut HashSet<(String, String)>,
    ) -> Result<Vec<(String, Arc<rustls::sign::CertifiedKey>)>, NotConfigured> {
        if ingress.spec.tls.is_empty() {
            return Ok(Vec::new());
        }
        let Some(secrets) = secrets else {
            return Err(NotConfigured {
                reason: REASON_TLS_NOT_SERVED,
                message: "spec.tls asks for HTTPS, but this fiber-router serves no HTTPS listener (--listen-tls)".into(),
            });
        };
        let mut out = Vec::new();
        for (i, tls) in ingress.spec.tls.iter().enumerate() {
            let namespace =
                if tls.secret_namespace.is_empty() { ingress.namespace().unwrap_or_default() } else { tls.secret_namespace.clone() };
            let key = (namespace.clone(), tls.secret_name.clone());
            used.insert(key.clone());
            let Some(secret) = secrets.get(&ObjectRef::new(&tls.secret_name).within(&namespace)) else {
                self.certificates.remove(&key);
                return Err(NotConfigured {
                    reason: REASON_TLS_SECRET_MISSING,
                    message: format!(
                        "spec.tls[{i}]: Secret {namespace}/{} does not exist (or is not of type {TLS_SECRET_TYPE})",
                        tls.secret_name
                    ),
                });
            };
            let version = secret.metadata.resource_version.clone();
            let parsed = match self.certificates.get(&key) {
                Some((seen, parsed)) if *seen == version && version.is_some() => parsed.clone(),
                _ => {
                    let parsed = parse_secret(&secret);
                    self.certificates.insert(key, (version, parsed.clone()));
                    parsed
                }
            };
            let certificate = parsed.map_err(|why| NotConfigured {
                reason: REASON_TLS_SECRET_INVALID,
                message: format!("spec.tls[{i}]: Secret {namespace}/{}: {why}", tls.secret_name),
            })?;
            out.extend(tls.hosts.iter().map(|host| (host.clone(), Arc::clone(&certificate))));
        }
        Ok(out)
    }
}

/// The certificate a TLS Secret holds.
fn parse_secret(secret: &Secret) -> Result<Arc<rustls::sign::CertifiedKey>, String> {
    let entry = |name: &'static str| {
        secret.data.as_ref().and_then(|d| d.get(name)).map(|b| b.0.as_slice()).ok_or(crate::tls::CertificateError::MissingEntry(name))
    };
    let parsed = entry(crate::tls::CERTIFICATE_KEY)
        .and_then(|crt| crate::tls::certified_key(crt, entry(crate::tls::PRIVATE_KEY_KEY)?))
        .map_err(|e| e.to_string())?;
    Ok(Arc::new(parsed))
}

/// Adds every host and certificate of one KIngress, or none when another KIngress holds
/// one of its hosts. A host whose certificate another KIngress set keeps that one.
/// The watched EndpointSlices by the namespace and name of the Service they belong to.
fn slices_by_service(slices: &Store<EndpointSlice>) -> HashMap<(String, String), Vec<Arc<EndpointSlice>>> {
    let mut out: HashMap<(String, String), Vec<Arc<EndpointSlice>>> = HashMap::new();
    for slice in slices.state() {
        let (Some(namespace), Some(service)) = (slice.namespace(), slice.labels().get(SERVICE_NAME_LABEL).cloned()) else { continue };
        out.entry((namespace, service)).or_default().push(slice);
    }
    out
}

fn program(
    table: &mut RouteTable,
    routes: Vec<(String, Arc<crate::table::HostRoute>)>,
    certificates: Vec<(String, Arc<rustls::sign::CertifiedKey>)>,
) -> Result<(), NotConfigured> {
    if let Some((host, owner)) = routes.iter().find_map(|(h, _)| table.host(h).map(|r| (h, r.ingress.clone()))) {
        return Err(NotConfigured {
            reason: REASON_HOST_CONFLICT,
            message: format!("host {host:?} is already served by KIngress {owner}"),
        });
    }
    for (host, route) in routes {
        table.insert_host(&host, route);
    }
    for (host, certificate) in certificates {
        if !table.certificates_mut().insert(&host, certificate) {
            tracing::warn!(%host, "another KIngress already set this host's certificate; it keeps it");
        }
    }
    Ok(())
}

/// The Home's instances with `loaded: true`, at addresses resolved now.
async fn loaded_instances(home: &Home) -> Vec<Instance> {
    let mut out = Vec::new();
    for instance in home.status.iter().flat_map(|s| &s.instances).filter(|i| i.loaded) {
        let address = match instance.address.parse::<SocketAddr>() {
            Ok(a) => Some(a),
            Err(_) => tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host(instance.address.as_str()))
                .await
                .ok()
                .and_then(Result::ok)
                .and_then(|mut a| a.next()),
        };
        match address {
            Some(address) => {
                let count = |n: i32| u32::try_from(n).unwrap_or(0);
                out.push(Instance {
                    name: instance.name.clone(),
                    address,
                    warm_fibers: count(instance.warm_fibers),
                    max_fibers: count(instance.max_fibers),
                });
            }
            None => {
                tracing::warn!(home = %home.name_any(), instance = %instance.name, address = %instance.address, "instance address does not resolve; skipped")
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queues_follow_max_scale_within_bounds() {
        let mut policy = lampyr_api::policy::FiberPolicy::default();
        assert_eq!(queue_capacity(&policy), 640, "unbounded counts as 64 fibers");
        policy.scaling.max_scale = 3;
        assert_eq!(queue_capacity(&policy), 100);
        policy.scaling.max_scale = 5000;
        assert_eq!(queue_capacity(&policy), 10_000);
    }
}
