//! Leader election against a real kube-apiserver: one holder at a time,
//! hand-over on release and on expiry, and stepping down when another
//! candidate has taken the Lease.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, Patch, PatchParams};
use lampyr_reconcile::leader::{Attempt, LeaderElector, LeaderError, LeaseConfig};
use lampyr_testenv::Cluster;
use serde_json::json;

fn fast(namespace: &str, identity: &str) -> LeaseConfig {
    LeaseConfig {
        lease_duration: Duration::from_secs(3),
        renew_deadline: Duration::from_secs(2),
        retry_period: Duration::from_millis(300),
        ..LeaseConfig::new(namespace, "test-lease", identity)
    }
}

async fn holder(api: &Api<Lease>) -> Option<String> {
    api.get("test-lease").await.expect("the lease").spec.and_then(|s| s.holder_identity)
}

#[tokio::test]
async fn one_holder_at_a_time_and_hand_over_on_release() {
    let cluster = Cluster::shared();
    let ns = cluster.namespace("leader-release").await;
    let client = cluster.client().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);

    let mut a = LeaderElector::new(client.clone(), fast(&ns, "a")).expect("config");
    let mut b = LeaderElector::new(client.clone(), fast(&ns, "b")).expect("config");
    assert_eq!(a.try_acquire_or_renew().await.expect("api"), Attempt::Holding);
    assert!(a.is_leader());
    assert_eq!(b.try_acquire_or_renew().await.expect("api"), Attempt::HeldBy("a".into()));
    assert!(!b.is_leader());
    // Renewing keeps the acquisition time and the transition count.
    let first = leases.get("test-lease").await.expect("lease").spec.expect("spec");
    assert_eq!(a.try_acquire_or_renew().await.expect("api"), Attempt::Holding);
    let renewed = leases.get("test-lease").await.expect("lease").spec.expect("spec");
    assert_eq!(renewed.acquire_time, first.acquire_time);
    assert_eq!(renewed.lease_transitions, Some(0));
    assert_ne!(renewed.renew_time, first.renew_time);

    // `run` holds the lease while the work runs, and releases it after.
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let b_task = tokio::spawn(async move {
        let started = tokio::time::Instant::now();
        b.acquire().await;
        started.elapsed()
    });
    let a_run = tokio::spawn(a.run(async move {
        let _ = stopped.await;
        "done"
    }));
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(holder(&leases).await.as_deref(), Some("a"), "a keeps renewing past the lease duration");
    assert!(!b_task.is_finished(), "b waits while a renews");
    stop.send(()).expect("a runs");
    assert_eq!(a_run.await.expect("join").expect("a kept the lease"), "done");
    let waited = tokio::time::timeout(Duration::from_secs(5), b_task).await.expect("b acquires after release");
    assert!(waited.expect("join") >= Duration::from_secs(4));
    assert_eq!(holder(&leases).await.as_deref(), Some("b"));
    let spec = leases.get("test-lease").await.expect("lease").spec.expect("spec");
    assert_eq!(spec.lease_transitions, Some(1));
}

#[tokio::test]
async fn a_lease_that_is_not_renewed_expires() {
    let cluster = Cluster::shared();
    let ns = cluster.namespace("leader-expiry").await;
    let client = cluster.client().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);

    let mut a = LeaderElector::new(client.clone(), fast(&ns, "a")).expect("config");
    assert_eq!(a.try_acquire_or_renew().await.expect("api"), Attempt::Holding);
    drop(a); // a dies without releasing
    let mut b = LeaderElector::new(client.clone(), fast(&ns, "b")).expect("config");
    let started = tokio::time::Instant::now();
    tokio::time::timeout(Duration::from_secs(10), b.acquire()).await.expect("b acquires the expired lease");
    let waited = started.elapsed();
    // b measures expiry from its own first sight of the record: at least one lease duration.
    assert!(waited >= Duration::from_secs(3), "took over after {waited:?}, before the lease duration");
    assert_eq!(holder(&leases).await.as_deref(), Some("b"));
}

#[tokio::test]
async fn the_holder_steps_down_when_another_takes_the_lease() {
    let cluster = Cluster::shared();
    let ns = cluster.namespace("leader-lost").await;
    let client = cluster.client().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);

    let a = LeaderElector::new(client.clone(), fast(&ns, "a")).expect("config");
    let leading = a.subscribe();
    let work_cancelled = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let flag = work_cancelled.clone();
    let run = tokio::spawn(a.run(async move {
        std::future::pending::<()>().await;
        flag.store(false, std::sync::atomic::Ordering::SeqCst);
    }));
    tokio::time::timeout(Duration::from_secs(5), async {
        let mut leading = leading.clone();
        leading.wait_for(|l| *l).await.expect("elector alive");
    })
    .await
    .expect("a leads");

    // An operator (or a buggy candidate) overwrites the holder.
    leases
        .patch("test-lease", &PatchParams::default(), &Patch::Merge(json!({ "spec": { "holderIdentity": "intruder" } })))
        .await
        .expect("patch");
    let result = tokio::time::timeout(Duration::from_secs(5), run).await.expect("a steps down").expect("join");
    match result {
        Err(LeaderError::Lost { reason, .. }) => assert!(reason.contains("intruder"), "{reason}"),
        other => panic!("expected Lost, got {other:?}"),
    }
    assert!(work_cancelled.load(std::sync::atomic::Ordering::SeqCst));
    assert!(!*leading.borrow());
    assert_eq!(holder(&leases).await.as_deref(), Some("intruder"), "a stepping down does not clear another's hold");
}
