//! A Revision served by fiber pools in this process (`ly run`, fiberd),
//! scaled by a [`Scaler`] ticking in the background.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use lampyr_router::{Backend, BackendStats, Body, InvokeError, Scaler, ScalerConfig};

use crate::FiberPool;
use crate::runtime::Answer;
use tokio::time::Instant;

use lampyr_router::backend::BoxFuture;

/// A Revision's local fibers and their scaler.
pub struct LocalBackend {
    pool: FiberPool,
    scaler: Mutex<Scaler>,
    arrivals: AtomicU64,
}

impl LocalBackend {
    /// Serves from `pool`, starts `initial-scale` fibers and the scaling loop
    /// (which ends when the backend is dropped). Fibers the pool's capacity has no
    /// room for are not an error: the pool serves with those it could start, and
    /// requests that find no fiber and no room are answered 503.
    pub async fn start(
        pool: FiberPool,
        scaling: lampyr_api::policy::ScalingPolicy,
        config: ScalerConfig,
    ) -> Result<Arc<Self>, InvokeError> {
        let tick = config.tick;
        let scaler = Scaler::new(scaling, config, std::time::Instant::now());
        match pool.set_desired(scaler.initial() as usize).await {
            Ok(()) => {}
            Err(InvokeError::NoCapacity(why)) => tracing::warn!(%why, "starting with fewer fibers than initial-scale"),
            Err(e) => return Err(e),
        }
        let backend = Arc::new(LocalBackend { pool, scaler: Mutex::new(scaler), arrivals: AtomicU64::new(0) });
        tokio::spawn(scale_loop(Arc::downgrade(&backend), tick));
        Ok(backend)
    }

    /// The pool behind this backend.
    pub fn pool(&self) -> &FiberPool {
        &self.pool
    }

    /// Applies a changed scaling policy from the next decision on, with the
    /// same pool and warm fibers (see [`Scaler::update_policy`]).
    pub fn update_policy(&self, scaling: lampyr_api::policy::ScalingPolicy) {
        match self.scaler.lock() {
            Ok(mut scaler) => scaler.update_policy(scaling, std::time::Instant::now()),
            Err(_) => tracing::warn!("the scaler is poisoned; the scaling policy was not updated"),
        }
    }

    /// Wakes a Revision at zero: starts `activation-scale` fibers in the background.
    fn activate(&self) {
        let n = match self.scaler.lock() {
            Ok(mut s) => s.activate(std::time::Instant::now()),
            Err(_) => 1,
        };
        let pool = self.pool.clone();
        tokio::spawn(async move { resize(&pool, n as usize, "no room to wake the revision", "waking the revision failed").await });
    }

    /// One scaling step: sample, decide, resize.
    async fn tick(&self) {
        let stats = self.pool.stats();
        let now = std::time::Instant::now();
        let decision = {
            let Ok(mut scaler) = self.scaler.lock() else { return };
            scaler.record(now, (stats.in_flight + stats.queued) as f64, self.arrivals.swap(0, Ordering::AcqRel));
            scaler.decide(now, stats.live as u32)
        };
        let changed = decision.desired as usize != stats.desired || (decision.desired as usize) < stats.live;
        if changed {
            resize(&self.pool, decision.desired as usize, "no room to scale up", "resizing the revision failed").await;
        }
    }
}

/// Sets `pool`'s warm size to `n`. No room on the instance is expected while it is full
/// (the next tick tries again) and logged at debug as `no_room`; other failures warn as `failed`.
async fn resize(pool: &FiberPool, n: usize, no_room: &str, failed: &str) {
    match pool.set_desired(n).await {
        Ok(()) => {}
        Err(InvokeError::NoCapacity(why)) => tracing::debug!(%why, "{no_room}"),
        Err(e) => tracing::warn!(error = %e, "{failed}"),
    }
}

async fn scale_loop(backend: Weak<LocalBackend>, tick: std::time::Duration) {
    let mut interval = tokio::time::interval_at(tokio::time::Instant::now() + tick, tick);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        let Some(backend) = backend.upgrade() else { return };
        backend.tick().await;
    }
}

impl Backend for LocalBackend {
    /// Gathers the request into the guest's frame (the only place it is
    /// converted), serves it on a fiber, and answers the guest's response.
    fn invoke(&self, req: http::Request<Body>, deadline: Instant) -> BoxFuture<'_, Result<http::Response<Body>, InvokeError>> {
        self.arrivals.fetch_add(1, Ordering::AcqRel);
        if self.pool.stats().live == 0 {
            self.activate();
        }
        Box::pin(async move {
            let req = lampyr_router::guest::guest_request(req, self.max_request_body(), deadline).await?;
            match self.pool.invoke_streaming(req, deadline).await?.0 {
                Answer::Whole(resp) => lampyr_router::guest::http_response(resp),
                Answer::Streamed { head, body } => {
                    let head = lampyr_router::guest::http_response(head)?;
                    Ok(head.map(|_| lampyr_router::body::boxed(body.stream)))
                }
            }
        })
    }

    fn max_request_body(&self) -> u64 {
        self.pool.template().metadata().max_request_body
    }

    fn is_cold(&self) -> bool {
        self.pool.stats().live == 0
    }

    fn stats(&self) -> BackendStats {
        let s = self.pool.stats();
        BackendStats { in_flight: s.in_flight, queued: s.queued, fibers: s.live, desired: s.desired }
    }
}
