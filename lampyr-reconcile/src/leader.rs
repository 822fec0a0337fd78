//! Leader election on a `coordination.k8s.io/v1` Lease, with client-go's
//! semantics (`k8s.io/client-go/tools/leaderelection`), so Lampyr's controllers
//! behave like every other Kubernetes controller under the same Lease rules:
//!
//! - **Acquire**: a candidate takes the Lease when it does not exist, names no
//!   holder, or its record has not changed for `leaseDurationSeconds` *as
//!   observed by this candidate's own clock* (never by comparing `renewTime`
//!   across machines, so clock skew between nodes cannot shorten a lease).
//!   Every write is a create or a replace at the observed `resourceVersion`, so
//!   two candidates can never both win: the loser gets a conflict.
//! - **Renew**: the holder rewrites `renewTime` every `retry_period`. When it has
//!   not managed to renew for `renew_deadline` (< lease duration), or it sees
//!   another holder, it **steps down**: [`LeaderElector::hold`] returns and
//!   [`LeaderElector::run`] cancels the work before any other candidate can
//!   consider the Lease expired.
//! - **Release**: on a clean shutdown the holder clears `holderIdentity` (and
//!   sets a 1 s duration, as client-go's `ReleaseOnCancel` does), so a successor
//!   takes over at once instead of after the lease duration.
//!
//! Why not a crate: `kube-leader-election` needs kube 4; `kube-lease-manager`
//! works with kube 5 but hides renewal failures from its caller, so a leader
//! cut off from the API server would keep working past the Lease's expiry.
//!
//! Generic: it knows nothing about what the leader does.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, PostParams};
use tokio::sync::watch;
use tokio::time::Instant;

/// How a candidate competes for a Lease. [`LeaseConfig::new`] gives client-go's
/// defaults: 15 s lease, 10 s renew deadline, 2 s retry period.
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// This candidate's identity, unique among candidates (e.g. Pod name plus a random suffix).
    pub identity: String,
    /// How long others wait, after last seeing the record change, before taking the Lease.
    pub lease_duration: Duration,
    /// How long the holder keeps trying to renew before it steps down. Must be
    /// shorter than `lease_duration`.
    pub renew_deadline: Duration,
    /// How often candidates try to acquire, and the holder renews.
    pub retry_period: Duration,
}

impl LeaseConfig {
    /// A configuration with client-go's default timings.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>, identity: impl Into<String>) -> Self {
        LeaseConfig {
            namespace: namespace.into(),
            name: name.into(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    fn validate(&self) -> Result<(), LeaderError> {
        let bad = |why: &str| Err(LeaderError::Config(why.to_string()));
        if self.identity.is_empty() {
            return bad("identity must not be empty");
        }
        if self.renew_deadline >= self.lease_duration {
            return bad("renew_deadline must be shorter than lease_duration");
        }
        if self.retry_period.is_zero() || self.retry_period >= self.renew_deadline {
            return bad("retry_period must be positive and shorter than renew_deadline");
        }
        if self.lease_duration.as_secs() < 1 || self.lease_duration.as_secs() > i32::MAX as u64 {
            return bad("lease_duration must be at least one second");
        }
        Ok(())
    }
}

/// Why leader election ended.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    /// The configuration cannot work; the message says which rule it breaks.
    #[error("leader election misconfigured: {0}")]
    Config(String),
    /// Leadership was lost while the work ran; the work was cancelled. The
    /// process should stop (or start over as a candidate): another instance
    /// may be leading now.
    #[error("lost the lease {namespace}/{name}: {reason}")]
    Lost {
        /// Lease namespace.
        namespace: String,
        /// Lease name.
        name: String,
        /// Why: not renewed within the deadline, or another holder seen.
        reason: String,
    },
}

/// What this candidate last saw of the Lease, and when (by its own clock).
#[derive(Debug, Clone)]
struct Observed {
    spec: LeaseSpec,
    resource_version: Option<String>,
    at: Instant,
}

/// One candidate for one Lease.
pub struct LeaderElector {
    api: Api<Lease>,
    config: LeaseConfig,
    observed: Option<Observed>,
    leading: watch::Sender<bool>,
}

/// The outcome of one acquire-or-renew attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// This candidate holds the Lease (acquired or renewed).
    Holding,
    /// Another candidate holds a Lease that has not expired.
    HeldBy(String),
    /// Another candidate wrote the Lease first (a conflict); try again later.
    Conflict,
}

impl LeaderElector {
    /// A candidate for the Lease `config` names. Fails on a configuration that
    /// cannot work (see [`LeaseConfig`]).
    pub fn new(client: Client, config: LeaseConfig) -> Result<Self, LeaderError> {
        config.validate()?;
        let api = Api::namespaced(client, &config.namespace);
        Ok(LeaderElector { api, config, observed: None, leading: watch::channel(false).0 })
    }

    /// The configuration.
    pub fn config(&self) -> &LeaseConfig {
        &self.config
    }

    /// Follows whether this candidate leads (for readiness and metrics).
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.leading.subscribe()
    }

    /// Whether this candidate believes it leads now.
    pub fn is_leader(&self) -> bool {
        *self.leading.borrow()
    }

    /// One acquire-or-renew attempt against the API server.
    pub async fn try_acquire_or_renew(&mut self) -> Result<Attempt, kube::Error> {
        let now = MicroTime(Timestamp::now());
        let lease = match self.api.get_opt(&self.config.name).await? {
            Some(lease) => lease,
            None => {
                let spec = LeaseSpec {
                    holder_identity: Some(self.config.identity.clone()),
                    lease_duration_seconds: Some(self.config.lease_duration.as_secs() as i32),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                };
                let lease =
                    Lease { metadata: ObjectMeta { name: Some(self.config.name.clone()), ..ObjectMeta::default() }, spec: Some(spec) };
                return match self.api.create(&PostParams::default(), &lease).await {
                    Ok(created) => Ok(self.record_write(created)),
                    Err(kube::Error::Api(status)) if status.code == 409 => Ok(Attempt::Conflict),
                    Err(err) => Err(err),
                };
            }
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let resource_version = lease.metadata.resource_version.clone();
        // The record's age is measured from when *we* first saw it as it is.
        let changed = match &self.observed {
            Some(seen) => seen.spec != spec || seen.resource_version != resource_version,
            None => true,
        };
        if changed {
            self.observed = Some(Observed { spec: spec.clone(), resource_version, at: Instant::now() });
        }
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let we_hold = holder.as_deref() == Some(self.config.identity.as_str());
        if let Some(other) = holder.as_ref().filter(|_| !we_hold) {
            let duration = Duration::from_secs(spec.lease_duration_seconds.unwrap_or(0).max(0) as u64);
            let seen_at = self.observed.as_ref().map_or_else(Instant::now, |o| o.at);
            if seen_at + duration > Instant::now() {
                self.set_leading(false);
                return Ok(Attempt::HeldBy(other.clone()));
            }
        }
        let mut next = spec.clone();
        next.holder_identity = Some(self.config.identity.clone());
        next.lease_duration_seconds = Some(self.config.lease_duration.as_secs() as i32);
        next.renew_time = Some(now.clone());
        if !we_hold {
            next.acquire_time = Some(now);
            next.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        let mut updated = lease;
        updated.spec = Some(next);
        // Replace carries the observed resourceVersion: a concurrent writer makes this a 409.
        match self.api.replace(&self.config.name, &PostParams::default(), &updated).await {
            Ok(written) => Ok(self.record_write(written)),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(Attempt::Conflict),
            Err(err) => Err(err),
        }
    }

    fn record_write(&mut self, written: Lease) -> Attempt {
        self.observed = Some(Observed {
            spec: written.spec.unwrap_or_default(),
            resource_version: written.metadata.resource_version,
            at: Instant::now(),
        });
        self.set_leading(true);
        Attempt::Holding
    }

    fn set_leading(&self, leading: bool) {
        self.leading.send_if_modified(|now| std::mem::replace(now, leading) != leading);
    }

    /// Waits until this candidate holds the Lease, trying every `retry_period`
    /// (API errors are logged and retried).
    pub async fn acquire(&mut self) {
        let mut last_holder = None;
        loop {
            match self.bounded_attempt(self.config.renew_deadline).await {
                Ok(Attempt::Holding) => {
                    tracing::info!(lease = %self.config.name, identity = %self.config.identity, "acquired the lease");
                    return;
                }
                Ok(Attempt::HeldBy(holder)) => {
                    if last_holder.as_ref() != Some(&holder) {
                        tracing::info!(lease = %self.config.name, %holder, "the lease is held by another candidate");
                        last_holder = Some(holder);
                    }
                }
                Ok(Attempt::Conflict) => tracing::debug!(lease = %self.config.name, "lost a race for the lease"),
                Err(err) => tracing::warn!(lease = %self.config.name, %err, "could not read or write the lease"),
            }
            tokio::time::sleep(self.config.retry_period).await;
        }
    }

    async fn bounded_attempt(&mut self, limit: Duration) -> Result<Attempt, String> {
        match tokio::time::timeout(limit, self.try_acquire_or_renew()).await {
            Ok(Ok(attempt)) => Ok(attempt),
            Ok(Err(err)) => Err(err.to_string()),
            Err(_) => Err(format!("no answer from the API server within {limit:?}")),
        }
    }

    /// Renews the held Lease every `retry_period` and returns (with the reason)
    /// when leadership is lost: no successful renewal for `renew_deadline`, or
    /// another holder seen. Never returns while leadership is kept.
    pub async fn hold(&mut self) -> LeaderError {
        let mut last_renewal = Instant::now();
        loop {
            tokio::time::sleep(self.config.retry_period).await;
            let deadline = last_renewal + self.config.renew_deadline;
            let remaining = deadline.saturating_duration_since(Instant::now());
            let why = if remaining.is_zero() {
                Some("the renew deadline passed".to_string())
            } else {
                match self.bounded_attempt(remaining).await {
                    Ok(Attempt::Holding) => {
                        last_renewal = Instant::now();
                        None
                    }
                    Ok(Attempt::HeldBy(other)) => Some(format!("{other} holds it now")),
                    Ok(Attempt::Conflict) => {
                        tracing::debug!(lease = %self.config.name, "conflict renewing the lease; retrying");
                        None
                    }
                    Err(err) => {
                        tracing::warn!(lease = %self.config.name, %err, "could not renew the lease; retrying");
                        None
                    }
                }
            };
            let why = why.or_else(|| {
                (Instant::now() >= last_renewal + self.config.renew_deadline)
                    .then(|| format!("not renewed within the renew deadline ({:?})", self.config.renew_deadline))
            });
            if let Some(reason) = why {
                self.set_leading(false);
                tracing::error!(lease = %self.config.name, identity = %self.config.identity, %reason, "stepping down");
                return LeaderError::Lost { namespace: self.config.namespace.clone(), name: self.config.name.clone(), reason };
            }
        }
    }

    /// Gives the Lease up if this candidate holds it, so a successor need not
    /// wait for it to expire. Does nothing when another candidate holds it.
    pub async fn release(&mut self) -> Result<(), kube::Error> {
        self.set_leading(false);
        let Some(mut lease) = self.api.get_opt(&self.config.name).await? else { return Ok(()) };
        let mut spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        lease.spec = Some(spec);
        match self.api.replace(&self.config.name, &PostParams::default(), &lease).await {
            Ok(_) => {
                tracing::info!(lease = %self.config.name, identity = %self.config.identity, "released the lease");
                Ok(())
            }
            // Someone else wrote it meanwhile: it is not ours to clear any more.
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
            Err(err) => Err(err),
        }
    }

    /// Waits for the Lease, then runs `work` while holding it. When `work`
    /// ends the Lease is released and its output returned; when leadership is
    /// lost first, `work` is dropped (cancelled) and [`LeaderError::Lost`]
    /// returned. `work` is not polled before the Lease is held.
    pub async fn run<T>(mut self, work: impl Future<Output = T>) -> Result<T, LeaderError> {
        self.acquire().await;
        tokio::pin!(work);
        tokio::select! {
            out = &mut work => {
                if let Err(err) = self.release().await {
                    tracing::warn!(lease = %self.config.name, %err, "could not release the lease; it expires by itself");
                }
                Ok(out)
            }
            lost = self.hold() => Err(lost),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn refuses_timings_that_cannot_work() {
        let mut c = LeaseConfig::new("ns", "lease", "me");
        assert!(c.validate().is_ok());
        c.renew_deadline = c.lease_duration;
        assert!(c.validate().unwrap_err().to_string().contains("renew_deadline"));
        let mut c = LeaseConfig::new("ns", "lease", "me");
        c.retry_period = c.renew_deadline;
        assert!(c.validate().unwrap_err().to_string().contains("retry_period"));
        let c = LeaseConfig::new("ns", "lease", "");
        assert!(c.validate().unwrap_err().to_string().contains("identity"));
    }
}
