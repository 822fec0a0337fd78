//! fiberd holding a grant instance's share of fiber slots and memory for every
//! Home it serves, against the real cluster environment and real fibers: a
//! Home's `min-scale` is reserved, fibers beyond reservations take what is
//! free, a request that finds no room gets 503 (not a crash, not an
//! overcommitted instance), and deleting a Home or scaling one to zero gives
//! its slots back; a grant's instances split a Revision's `min-scale` and
//! `max-scale` so that together they never exceed them, and fiber-router's
//! forwarding sends a request one instance has no room for to one that has.

mod support;

use kube::api::DeleteParams;
use lampyr_api::HomeInstance;
use lampyr_api::policy::FiberPolicy;
use lampyr_fiberd::InstanceShare;
use lampyr_router::metrics::{RouterMetrics, revision_labels};
use lampyr_router::server::REFUSED_HEADER;
use lampyr_router::{Backend, FiberdBackend, FiberdConfig, Instance};
use lampyr_testenv::{TestRegistry, push_artifact};
use support::{Daemon, Env, hello_artifact, hello_policy, http, wait_entry, wait_until};

const BODY: u64 = 1024 * 1024;
/// Guest memory the instance holds: far more than two hello fibers need, so slots bound first.
const MEMORY: u64 = 1 << 30;

fn with_min_scale(min: u32) -> FiberPolicy {
    let mut policy = hello_policy();
    policy.scaling.min_scale = min;
    policy
}

fn loaded(e: Option<&HomeInstance>) -> bool {
    e.is_some_and(|e| e.loaded)
}

/// Grant `grant`'s instances `<grant>-0`, `<grant>-1`, …, one per entry of `capacity`
/// (the instance's fiber slots and memory; unbounded when `None`).
async fn start_instances(env: &Env, registry: &TestRegistry, grant: &str, capacity: &[Option<(u32, u64)>]) -> Vec<Daemon> {
    let count = u32::try_from(capacity.len()).expect("a few instances");
    let mut daemons = Vec::new();
    for (index, held) in (0..count).zip(capacity) {
        let name = format!("{grant}-{index}");
        let daemon = Daemon::start_with(env, &name, &[grant], registry, |c| {
            c.instance = Some(InstanceShare { index, count });
            c.capacity = *held;
        })
        .await;
        daemons.push(daemon);
    }
    daemons
}

#[tokio::test(flavor = "multi_thread")]
async fn fibers_stay_within_the_instance_slots_and_freed_slots_are_used_again() {
    let env = Env::new("fiberd-capacity").await;
    let registry = TestRegistry::start();
    let artifact = push_artifact(&registry, "lampyr/hello", &hello_artifact(BODY)).await;
    let fiberd = Daemon::start_with(&env, "shared-0", &["shared"], &registry, |c| c.capacity = Some((2, MEMORY))).await;
    let homes = env.homes();

    // Two Homes at min-scale 1 reserve both slots.
    for name in ["a-00001", "b-00001"] {
        env.create_home(name, "shared", &artifact, None, with_min_scale(1)).await;
        let e =
            wait_entry(&homes, name, "shared-0", "loaded with its reserved fiber", |e| loaded(e) && e.is_some_and(|e| e.warm_fibers == 1))
                .await
                .expect("entry");
        assert_eq!(e.reserved_slots, 1, "{name}: min-scale is reserved");
        assert!(e.memory_bytes > 0, "{name}: the memory its fiber holds is reported");
    }

    // A third Home loads (its template is served) but finds no slot: 503, and the instance stays up.
    env.create_home("c-00001", "shared", &artifact, None, with_min_scale(0)).await;
    let e = wait_entry(&homes, "c-00001", "shared-0", "loaded", loaded).await.expect("entry");
    assert_eq!((e.warm_fibers, e.reserved_slots), (0, 0), "no room, no fiber: {e:?}");
    let (status, body) = fiberd.get(&env.ns, "c-00001").await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("no fiber slot free") && body.contains("2 fiber slots"), "{body}");
    assert_eq!(fiberd.get(&env.ns, "a-00001").await.0, 200, "the Homes holding slots keep serving");

    // Deleting a Home gives its slot back: the third one serves.
    homes.delete("b-00001", &DeleteParams::default()).await.expect("delete b");
    wait_until("c-00001 served from the freed slot", || async { fiberd.get(&env.ns, "c-00001").await.0 == 200 }).await;

    // Scaled to zero, the third Home holds nothing: a new Home's reservation gets the slot.
    wait_entry(&homes, "c-00001", "shared-0", "its fiber warm", |e| e.is_some_and(|e| e.warm_fibers == 1)).await;
    wait_entry(&homes, "c-00001", "shared-0", "scaled to zero", |e| e.is_some_and(|e| e.loaded && e.warm_fibers == 0)).await;
    env.create_home("d-00001", "shared", &artifact, None, with_min_scale(1)).await;
    let e = wait_entry(&homes, "d-00001", "shared-0", "loaded with the slot c-00001 gave back", |e| {
        loaded(e) && e.is_some_and(|e| e.reserved_slots == 1 && e.warm_fibers == 1)
    })
    .await
    .expect("entry");
    assert!(e.memory_bytes > 0, "{e:?}");
    assert_eq!(fiberd.get(&env.ns, "c-00001").await.0, 503, "and the instance is full again");
    fiberd.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn two_instances_together_keep_a_revision_within_its_min_and_max_scale() {
    let env = Env::new("fiberd-pair").await;
    let registry = TestRegistry::start();
    let artifact = push_artifact(&registry, "lampyr/hello", &hello_artifact(BODY)).await;
    let daemons = start_instances(&env, &registry, "pair", &[None, None]).await;
    let homes = env.homes();

    // min-scale = max-scale = 3 over two instances: 2 and 1 warm fibers, never 3 each.
    let mut policy = with_min_scale(3);
    policy.scaling.max_scale = 3;
    env.create_home("three-00001", "pair", &artifact, None, policy).await;
    let mut warm = Vec::new();
    for daemon in &daemons {
        let e =
            wait_entry(&homes, "three-00001", &daemon.name, "loaded with its share", |e| loaded(e) && e.is_some_and(|e| e.warm_fibers > 0))
                .await
                .expect("entry");
        warm.push(e.warm_fibers);
    }
    warm.sort_unstable();
    assert_eq!(warm, [1, 2], "the instances split min-scale 3");

    // max-scale 1 over two instances: one serves it, the other says why it does not.
    let mut policy = hello_policy();
    policy.scaling.max_scale = 1;
    env.create_home("one-00001", "pair", &artifact, None, policy).await;
    let mut entries = Vec::new();
    for daemon in &daemons {
        let e = wait_entry(&homes, "one-00001", &daemon.name, "reported", |e| e.is_some_and(|e| e.loaded || e.message.is_some()))
            .await
            .expect("entry");
        entries.push(e);
    }
    let serving: Vec<&HomeInstance> = entries.iter().filter(|e| e.loaded).collect();
    assert_eq!(serving.len(), 1, "{entries:?}");
    let idle = entries.iter().find(|e| !e.loaded).expect("the other instance");
    let message = idle.message.clone().unwrap_or_default();
    assert!(message.contains("max-scale 1") && message.contains("holds none of it"), "{message}");
    for daemon in daemons {
        daemon.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_request_one_instance_has_no_room_for_is_served_by_one_that_has() {
    let env = Env::new("fiberd-room").await;
    let registry = TestRegistry::start();
    let artifact = push_artifact(&registry, "lampyr/hello", &hello_artifact(BODY)).await;
    // Two instances of one grant: the first holds one fiber slot, the second three.
    let daemons = start_instances(&env, &registry, "room", &[Some((1, MEMORY)), Some((3, MEMORY))]).await;
    let homes = env.homes();

    // min-scale 2 split 1 + 1 fills the first instance.
    env.create_home("held-00001", "room", &artifact, None, with_min_scale(2)).await;
    for daemon in &daemons {
        wait_entry(&homes, "held-00001", &daemon.name, "its reserved fiber", |e| {
            loaded(e) && e.is_some_and(|e| e.reserved_slots == 1 && e.warm_fibers == 1)
        })
        .await;
    }
    env.create_home("burst-00001", "room", &artifact, None, with_min_scale(0)).await;
    let mut instances = Vec::new();
    for daemon in &daemons {
        let e = wait_entry(&homes, "burst-00001", &daemon.name, "loaded", loaded).await.expect("entry");
        let max_fibers = u32::try_from(e.max_fibers).expect("a bound");
        instances.push(Instance { name: daemon.name.clone(), address: daemon.addr, warm_fibers: 0, max_fibers });
    }
    let bounds: Vec<u32> = instances.iter().map(|i| i.max_fibers).collect();
    assert_eq!(bounds, [1, 3], "each instance reports the fibers it may run (its slots, max-scale being unbounded)");

    // Asked directly, the full instance refuses and says no fiber ran.
    let resp = http()
        .get(format!("http://{}/", daemons[0].addr))
        .header("Knative-Serving-Namespace", &env.ns)
        .header("Knative-Serving-Revision", "burst-00001")
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status().as_u16(), 503);
    assert_eq!(resp.headers().get(REFUSED_HEADER).and_then(|v| v.to_str().ok()), Some("no_capacity"));

    // Through fiber-router's forwarding every request is answered, a body sent again where refused.
    let metrics = RouterMetrics::default();
    let backend = FiberdBackend::new(&env.ns, "burst-00001", FiberdConfig::default(), &metrics);
    backend.set_instances(&instances, false);
    for i in 0..12 {
        let req = http::Request::post("/").body(lampyr_router::body::full(format!("request {i}"))).expect("request");
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
        let resp = backend.invoke(req, deadline).await.unwrap_or_else(|e| panic!("request {i}: {e}"));
        assert_eq!(resp.status().as_u16(), 200, "request {i}: {:?}", resp.headers());
        assert!(!resp.headers().contains_key(REFUSED_HEADER), "request {i}");
    }
    let refused = metrics.upstream_refusals.get_or_create(&revision_labels(&env.ns, "burst-00001")).get();
    assert!(refused >= 1, "requests were offered to the full instance (ties go in turn) and moved on: {refused}");

    // When no instance has room the refusal is the answer: 503 with Retry-After, at once.
    homes.delete("burst-00001", &DeleteParams::default()).await.expect("delete");
    env.create_home("tight-00001", "room", &artifact, None, with_min_scale(0)).await;
    // min-scale 4 split 2 + 2 takes the second instance's last two slots (the first has none to give).
    env.create_home("filler-00001", "room", &artifact, None, with_min_scale(4)).await;
    wait_entry(&homes, "filler-00001", "room-1", "its reserved fibers", |e| e.is_some_and(|e| e.reserved_slots == 2)).await;
    for daemon in &daemons {
        wait_entry(&homes, "tight-00001", &daemon.name, "loaded", loaded).await;
    }
    let backend = FiberdBackend::new(&env.ns, "tight-00001", FiberdConfig::default(), &metrics);
    backend.set_instances(&instances, false);
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    let resp = backend.invoke(http::Request::new(lampyr_router::body::empty()), deadline).await.expect("an answer");
    assert_eq!(resp.status().as_u16(), 503, "both instances are full");
    assert!(resp.headers().contains_key(http::header::RETRY_AFTER));
    for daemon in daemons {
        daemon.stop().await;
    }
}
