//! The daemon: one watch of Homes, one supervisor task per Home of this
//! instance's grants, and the routing table they publish to.
//!
//! The watch hands each supervisor the latest state of its Home through a
//! one-slot `watch` channel (never a queue): a supervisor that is busy
//! loading sees only the newest spec when it looks again. Each supervisor
//! loads on a blocking thread under a shared limit of concurrent loads, so a
//! Home whose registry hangs holds one load slot until its timeout, and the
//! others keep loading and serving.
//!
//! A new generation that changes only what the pool is not built from (the
//! scaling policy, timeouts, `containerConcurrency`) is applied to the loaded
//! pool at once, keeping its warm fibers; anything else loads the Home again.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use lampyr_api::policy::FiberPolicy;
use lampyr_api::{Home, HomeInstance};
use lampyr_artifact::evict::Lease;
use lampyr_fiber::LocalBackend;
use lampyr_router::{Backend, RevisionEntry, RouteTable, Router};
use tokio::sync::{Semaphore, oneshot, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::config::FiberdConfig;
use crate::error::LoadError;
use crate::load::{Loader, key_of, needs_new_pool};
use crate::share::InstanceShare;
use crate::status::StatusWriter;

/// Longest `message` written to a status entry, in bytes.
const MAX_MESSAGE: usize = 2048;

/// `(namespace, name)` of a Home.
type HomeKey = (String, String);

/// What the daemon shares with every supervisor.
pub(crate) struct Shared {
    pub(crate) config: FiberdConfig,
    pub(crate) address: String,
    pub(crate) loader: Arc<Loader>,
    pub(crate) status: StatusWriter,
    pub(crate) table: Table,
    pub(crate) loads: Arc<Semaphore>,
    /// This instance's share of its grant, changed by [`crate::grant::follow`]; each change
    /// has every supervisor apply its Home's policy again.
    pub(crate) share: Arc<watch::Sender<Option<InstanceShare>>>,
}

/// A loaded Home as the router serves it.
struct Served {
    namespace: String,
    revision: String,
    policy: FiberPolicy,
    backend: Arc<LocalBackend>,
}

/// The Revisions this instance serves, published to the router whole on every change.
pub(crate) struct Table {
    router: Arc<Router>,
    served: Mutex<BTreeMap<HomeKey, Served>>,
}

impl Table {
    pub(crate) fn new(router: Arc<Router>) -> Self {
        Table { router, served: Mutex::new(BTreeMap::new()) }
    }

    fn insert(&self, key: HomeKey, served: Served) {
        self.update(|all| {
            all.insert(key, served);
        });
    }

    fn remove(&self, key: &HomeKey) {
        self.update(|all| {
            all.remove(key);
        });
    }

    /// Changes the served set and swaps in the table built from it; the lock
    /// keeps two changes from publishing out of order.
    fn update(&self, change: impl FnOnce(&mut BTreeMap<HomeKey, Served>)) {
        let mut served = self.served.lock().unwrap_or_else(|p| p.into_inner());
        change(&mut served);
        let mut table = RouteTable::default();
        for s in served.values() {
            let backend: Arc<dyn Backend> = Arc::clone(&s.backend) as Arc<dyn Backend>;
            table.insert_revision(RevisionEntry::new(&s.namespace, &s.revision, s.policy.clone(), backend));
        }
        self.router.set_table(table);
    }
}

/// What the watch tells a supervisor.
#[derive(Clone)]
enum Command {
    /// Serve this state of the Home.
    Serve(Arc<Home>),
    /// The Home is gone or no longer this instance's: stop serving it, and
    /// remove the status entry when the Home still exists.
    Release {
        /// Whether to remove the status entry.
        remove_entry: bool,
    },
    /// fiberd is stopping: remove the status entry, keep serving until the drain ends.
    Shutdown,
}

/// Which Homes the API server sends: those of the one grant served, by the
/// CRD's selectable field `spec.grantName`, so each Home's writes reach only
/// its own grant's instances; every Home when several grants are served (a
/// field selector matches one value), filtered here instead.
fn home_selector(grants: &[String]) -> watcher::Config {
    match grants {
        [grant] => watcher::Config::default().fields(&format!("spec.grantName={grant}")),
        _ => watcher::Config::default(),
    }
}

/// Watches Homes until `stop` fires, then has every supervisor remove its
/// status entry (within the shutdown timeout) and returns.
pub(crate) async fn watch_homes(shared: Arc<Shared>, api: Api<Home>, mut stop: oneshot::Receiver<()>) {
    let mut homes = Homes { shared: Arc::clone(&shared), handles: HashMap::new(), tasks: JoinSet::new(), listed: HashSet::new() };
    let stream = watcher(api, home_selector(&shared.config.grants)).default_backoff();
    let mut stream = std::pin::pin!(stream);
    loop {
        tokio::select! {
            _ = &mut stop => break,
            event = stream.next() => match event {
                Some(Ok(event)) => homes.on_event(event),
                Some(Err(e)) => tracing::warn!(error = %e, "watching Homes failed; retrying"),
                None => break,
            },
        }
        while let Some(done) = homes.tasks.try_join_next() {
            if let Err(e) = done {
                tracing::error!(error = %e, "a Home supervisor ended abnormally");
            }
        }
    }
    homes.shutdown().await;
}

/// The supervisors of the Homes this instance serves.
struct Homes {
    shared: Arc<Shared>,
    handles: HashMap<HomeKey, watch::Sender<Command>>,
    tasks: JoinSet<()>,
    /// Homes seen since the watch (re)started listing.
    listed: HashSet<HomeKey>,
}

impl Homes {
    fn on_event(&mut self, event: watcher::Event<Home>) {
        match event {
            watcher::Event::Init => self.listed.clear(),
            watcher::Event::InitApply(home) => {
                self.listed.insert(key(&home));
                self.upsert(home);
            }
            watcher::Event::InitDone => {
                // Deleted or moved to another grant while the watch was down.
                let gone: Vec<HomeKey> = self.handles.keys().filter(|k| !self.listed.contains(*k)).cloned().collect();
                for k in gone {
                    self.release(&k, true);
                }
            }
            watcher::Event::Apply(home) => self.upsert(home),
            // A field-selected watch also says Delete for a Home that moved to
            // another grant, which still exists: remove the entry either way
            // (a no-op for a Home that is gone).
            watcher::Event::Delete(home) => self.release(&key(&home), true),
        }
    }

    fn upsert(&mut self, home: Home) {
        let key = key(&home);
        if !self.shared.config.grants.contains(&home.spec.grant_name) {
            // Moved to another grant: no longer served here.
            self.release(&key, true);
            return;
        }
        let home = Arc::new(home);
        if let Some(tx) = self.handles.get(&key) {
            // Status writes (ours included) come back as events: only a new spec counts.
            tx.send_if_modified(|current| match current {
                Command::Serve(old) if same_spec(old, &home) => false,
                _ => {
                    *current = Command::Serve(Arc::clone(&home));
                    true
                }
            });
            return;
        }
        tracing::info!(home = %key_of(&home), grant = %home.spec.grant_name, "serving Home");
        let (tx, rx) = watch::channel(Command::Serve(home));
        self.tasks.spawn(Supervisor::new(Arc::clone(&self.shared), key.clone(), rx).run());
        self.handles.insert(key, tx);
    }

    fn release(&mut self, key: &HomeKey, remove_entry: bool) {
        if let Some(tx) = self.handles.remove(key) {
            tracing::info!(home = %format!("{}/{}", key.0, key.1), "releasing Home");
            tx.send_replace(Command::Release { remove_entry });
        }
    }

    async fn shutdown(mut self) {
        for (_, tx) in self.handles.drain() {
            tx.send_replace(Command::Shutdown);
        }
        let timeout = self.shared.config.shutdown_timeout;
        let all_done = async { while self.tasks.join_next().await.is_some() {} };
        if tokio::time::timeout(timeout, all_done).await.is_err() {
            tracing::warn!(?timeout, "some status entries were not removed before the shutdown timeout");
        }
    }
}

fn key(home: &Home) -> HomeKey {
    (home.metadata.namespace.clone().unwrap_or_default(), home.metadata.name.clone().unwrap_or_default())
}

/// The same object at the same generation: nothing to reload.
fn same_spec(a: &Home, b: &Home) -> bool {
    a.metadata.uid == b.metadata.uid && a.metadata.generation == b.metadata.generation && a.spec == b.spec
}

/// `(uid, generation)`: which spec a load was for.
fn version(home: &Home) -> (Option<String>, i64) {
    (home.metadata.uid.clone(), home.metadata.generation.unwrap_or(0))
}

/// How a load attempt ended.
enum Attempt {
    /// It finished, well or not.
    Finished,
    /// A new command arrived first; the load's result will be ignored.
    Interrupted,
}

/// Keeps one Home loaded and its status entry current.
struct Supervisor {
    shared: Arc<Shared>,
    key: HomeKey,
    rx: watch::Receiver<Command>,
    /// This instance's share of its grant: a change is applied like a new policy.
    share: watch::Receiver<Option<InstanceShare>>,
    /// The spec the last finished load (or policy update) was for.
    attempted: Option<(Option<String>, i64)>,
    /// What is served: the Home as last loaded or updated, and its pool.
    loaded: Option<Loaded>,
    /// The entry this instance should have; `written` is the last one applied.
    desired: Option<HomeInstance>,
    written: Option<HomeInstance>,
    last_write: Option<Instant>,
    retry_at: Option<Instant>,
    backoff: Duration,
    /// The spec whose loads are failing, if any: its retries back off.
    failing: Option<(Option<String>, i64)>,
}

/// A Home being served and its pool.
struct Loaded {
    home: Arc<Home>,
    backend: Arc<LocalBackend>,
    /// Keeps the artifact in the cache while the Home is loaded.
    _lease: Lease,
}

impl Supervisor {
    fn new(shared: Arc<Shared>, key: HomeKey, rx: watch::Receiver<Command>) -> Self {
        let backoff = shared.config.retry_min;
        let share = shared.share.subscribe();
        Supervisor {
            shared,
            key,
            rx,
            share,
            attempted: None,
            loaded: None,
            desired: None,
            written: None,
            last_write: None,
            retry_at: None,
            backoff,
            failing: None,
        }
    }

    async fn run(mut self) {
        let mut tick = tokio::time::interval(self.shared.config.status_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let command = self.rx.borrow_and_update().clone();
            match command {
                Command::Serve(home) => {
                    if self.attempted != Some(version(&home))
                        && !self.update_policy(&home).await
                        && matches!(self.load(home).await, Attempt::Interrupted)
                    {
                        continue;
                    }
                }
                Command::Release { remove_entry } => return self.release(remove_entry).await,
                Command::Shutdown => return self.remove_entry().await,
            }
            let retry_at = self.retry_at;
            tokio::select! {
                changed = self.rx.changed() => if changed.is_err() {
                    return self.release(false).await;
                },
                _ = tick.tick() => self.refresh().await,
                // The grant's instance count changed: apply this instance's new share.
                Ok(()) = self.share.changed() => self.attempted = None,
                () = sleep_until(retry_at) => {
                    self.retry_at = None;
                    self.attempted = None;
                }
            }
        }
    }

    /// Serves `home` with the pool already loaded when only its policy's
    /// scaling, timeouts or concurrency changed; false when it needs a load.
    async fn update_policy(&mut self, home: &Arc<Home>) -> bool {
        let Some(loaded) = &mut self.loaded else { return false };
        if loaded.home.metadata.uid != home.metadata.uid || needs_new_pool(&loaded.home.spec, &home.spec) {
            return false;
        }
        // A share this instance no longer holds is a load (which reports it), not an update.
        let Ok(scaling) = self.shared.loader.scaling(&home.spec.policy.scaling, &key_of(home)) else { return false };
        let generation = home.metadata.generation.unwrap_or(0);
        tracing::info!(home = %key_of(home), generation, "policy changed; applied to the loaded pool");
        if let Some(account) = loaded.backend.pool().capacity() {
            account.set_reserved(scaling.min_scale);
        }
        loaded.backend.update_policy(scaling);
        loaded.home = Arc::clone(home);
        let backend = Arc::clone(&loaded.backend);
        self.publish(home, &backend);
        if let Some(entry) = &mut self.desired {
            entry.observed_generation = generation;
        }
        self.attempted = Some(version(home));
        self.write().await;
        true
    }

    /// Routes the Revision of `home` to `backend`, with `home`'s policy.
    fn publish(&self, home: &Home, backend: &Arc<LocalBackend>) {
        let served = Served {
            namespace: self.key.0.clone(),
            revision: home.spec.revision_name.clone(),
            policy: home.spec.policy.clone(),
            backend: Arc::clone(backend),
        };
        self.shared.table.insert(self.key.clone(), served);
    }

    /// Loads `home` on a blocking thread (pulls hash and write files; templates
    /// load synchronously) and installs or reports the result.
    async fn load(&mut self, home: Arc<Home>) -> Attempt {
        let permit = tokio::select! {
            permit = Arc::clone(&self.shared.loads).acquire_owned() => match permit {
                Ok(p) => p,
                Err(_) => return Attempt::Interrupted,
            },
            _ = self.rx.changed() => return Attempt::Interrupted,
        };
        tracing::info!(home = %key_of(&home), generation = home.metadata.generation, "loading");
        let handle = tokio::runtime::Handle::current();
        let loader = Arc::clone(&self.shared.loader);
        let limit = self.shared.config.load_timeout;
        let job_home = Arc::clone(&home);
        let job = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            handle.block_on(
                async move { tokio::time::timeout(limit, loader.load(&job_home)).await.unwrap_or(Err(LoadError::Timeout(limit))) },
            )
        });
        let result = tokio::select! {
            joined = job => joined.unwrap_or_else(|e| Err(LoadError::Task(e.to_string()))),
            _ = self.rx.changed() => return Attempt::Interrupted,
        };
        let generation = home.metadata.generation.unwrap_or(0);
        let mut entry = HomeInstance {
            name: self.shared.config.name.clone(),
            address: self.shared.address.clone(),
            observed_generation: generation,
            ..HomeInstance::default()
        };
        match result {
            Ok((backend, lease)) => {
                tracing::info!(home = %key_of(&home), generation, "loaded");
                self.publish(&home, &backend);
                entry.loaded = true;
                record_usage(&mut entry, &backend);
                self.loaded = Some(Loaded { home: Arc::clone(&home), backend, _lease: lease });
                self.backoff = self.shared.config.retry_min;
                self.retry_at = None;
                self.failing = None;
            }
            Err(e) => {
                if self.failing != Some(version(&home)) {
                    // A new spec starts its retries afresh.
                    self.backoff = self.shared.config.retry_min;
                    self.failing = Some(version(&home));
                }
                tracing::warn!(home = %key_of(&home), generation, error = %e, retry_in = ?self.backoff, "not loaded");
                self.shared.table.remove(&self.key);
                self.loaded = None;
                entry.message = Some(truncate(e.to_string()));
                self.retry_at = Some(Instant::now() + self.backoff);
                self.backoff = (self.backoff * 2).min(self.shared.config.retry_max);
            }
        }
        self.attempted = Some(version(&home));
        self.desired = Some(entry);
        self.write().await;
        Attempt::Finished
    }

    /// Follows the warm fiber count; writes when the entry changed, at most once per interval.
    async fn refresh(&mut self) {
        if let (Some(loaded), Some(desired)) = (&self.loaded, &mut self.desired) {
            record_usage(desired, &loaded.backend);
        }
        let due = self.last_write.is_none_or(|t| t.elapsed() >= self.shared.config.status_interval);
        if self.desired != self.written && due {
            self.write().await;
        }
    }

    async fn write(&mut self) {
        let Some(desired) = self.desired.clone() else { return };
        self.last_write = Some(Instant::now());
        match self.shared.status.apply(&self.key.0, &self.key.1, &desired).await {
            Ok(()) => self.written = Some(desired),
            // Retried by the next refresh.
            Err(e) => tracing::warn!(home = %format!("{}/{}", self.key.0, self.key.1), error = %e, "writing status failed"),
        }
    }

    async fn release(mut self, remove_entry: bool) {
        self.shared.table.remove(&self.key);
        self.loaded = None;
        if remove_entry {
            self.remove_entry().await;
        }
    }

    async fn remove_entry(&mut self) {
        if let Err(e) = self.shared.status.remove(&self.key.0, &self.key.1).await {
            tracing::warn!(home = %format!("{}/{}", self.key.0, self.key.1), error = %e, "removing the status entry failed");
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Writes the backend's warm fibers, their bound, reserved slots and the memory they hold
/// into `entry`, topping the reservation up first.
fn record_usage(entry: &mut HomeInstance, backend: &LocalBackend) {
    let fibers = backend.stats().fibers;
    entry.warm_fibers = i32::try_from(fibers).unwrap_or(i32::MAX);
    entry.max_fibers = i32::try_from(backend.pool().max_fibers()).unwrap_or(i32::MAX);
    if let Some(account) = backend.pool().capacity() {
        // A Home loaded while the instance was full takes its min-scale as room appears.
        entry.reserved_slots = i32::try_from(account.top_up()).unwrap_or(i32::MAX);
        let memory = u64::from(account.live().max(account.reserved())).saturating_mul(account.fiber_memory());
        entry.memory_bytes = i64::try_from(memory).unwrap_or(i64::MAX);
    }
}

/// `text` cut to [`MAX_MESSAGE`] bytes at a character boundary.
fn truncate(mut text: String) -> String {
    if text.len() > MAX_MESSAGE {
        let mut end = MAX_MESSAGE - 3;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str("...");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_messages_are_cut_at_a_character_boundary() {
        assert_eq!(truncate("short".into()), "short");
        let long = "é".repeat(MAX_MESSAGE);
        let cut = truncate(long);
        assert!(cut.len() <= MAX_MESSAGE && cut.ends_with("..."), "{}", cut.len());
    }
}
