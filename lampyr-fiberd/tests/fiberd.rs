//! fiberd against the real cluster environment, a real registry and real
//! fibers under /dev/kvm, run in-process: loading, serving, reloading and
//! releasing Homes, refusing what does not verify, does not open or fails its
//! readiness probe, and scaling to zero and back, all observed through Home status and requests.

mod support;

use std::time::Duration;

use kube::api::{DeleteParams, Patch, PatchParams};
use lampyr_api::policy::{ClusterScaling, FiberPolicy, ReadinessCheck};
use lampyr_artifact::seal::FleetKey;
use lampyr_testenv::artifacts::conformance_artifact;
use lampyr_testenv::{TestRegistry, push_artifact, push_sealed};
use serde_json::json;
use support::{Daemon, Env, entry, hello_artifact, hello_policy, http, wait_entry, wait_until};

const BODY: u64 = 1024 * 1024;
const OTHER_BODY: u64 = 512 * 1024;

fn loaded(e: Option<&lampyr_api::HomeInstance>) -> bool {
    e.is_some_and(|e| e.loaded)
}

/// Whether the entry reports Home generation `generation` loaded.
fn loaded_at(generation: i64) -> impl Fn(Option<&lampyr_api::HomeInstance>) -> bool {
    move |e| e.is_some_and(|e| e.loaded && e.observed_generation == generation)
}

fn failed(e: Option<&lampyr_api::HomeInstance>) -> bool {
    e.is_some_and(|e| !e.loaded && e.message.is_some())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_home_is_loaded_served_and_reloaded_on_a_new_generation() {
    let env = Env::new("fiberd-serve").await;
    let registry = TestRegistry::start();
    let artifact = push_artifact(&registry, "lampyr/hello", &hello_artifact(BODY)).await;
    let fiberd = Daemon::start(&env, "grant-a-0", &["grant-a"], &registry).await;
    let homes = env.homes();

    // A Home of another grant, created first: by the time the next one is
    // loaded, fiberd has seen (and passed over) it.
    env.create_home("other-00001", "grant-b", &artifact, None, hello_policy()).await;
    env.create_home("hello-00001", "grant-a", &artifact, None, hello_policy()).await;
    let e = wait_entry(&homes, "hello-00001", "grant-a-0", "loaded", loaded).await.expect("entry");
    assert_eq!(e.address, fiberd.addr.to_string(), "reports the address it serves on");
    assert_eq!(e.observed_generation, 1);
    assert_eq!(e.message, None);
    assert!(e.warm_fibers >= 1, "initial-scale 1 starts a fiber: {e:?}");
    assert_eq!(fiberd.get(&env.ns, "hello-00001").await, (200, "Hello Lampyr!\n".to_string()));

    assert_eq!(entry(&homes, "other-00001", "grant-a-0").await, None, "another grant's Home gets no entry");
    let (status, body) = fiberd.get(&env.ns, "other-00001").await;
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("not served here"), "{body}");
    assert_eq!(fiberd.get("elsewhere", "hello-00001").await.0, 404, "the namespace is part of the route");

    let health = http().get(format!("http://{}/healthz", fiberd.addr)).send().await.expect("healthz");
    assert_eq!(health.status().as_u16(), 200);
    let metrics = http().get(format!("http://{}/metrics", fiberd.addr)).send().await.expect("metrics");
    let metrics = metrics.text().await.expect("metrics text");
    assert!(metrics.contains(r#"lampyr_fiber_requests_total{revision="hello-00001",outcome="ok"} 1"#), "{metrics}");

    // A new generation is loaded and replaces the old one.
    let patch = json!({"spec": {"policy": {"env": [{"name": "TARGET", "value": "Fibers"}]}}});
    homes.patch("hello-00001", &PatchParams::default(), &Patch::Merge(&patch)).await.expect("patch");
    let e = wait_entry(&homes, "hello-00001", "grant-a-0", "generation 2 loaded", loaded_at(2)).await.expect("entry");
    assert_eq!(e.message, None);
    assert_eq!(fiberd.get(&env.ns, "hello-00001").await, (200, "Hello Fibers!\n".to_string()));
    fiberd.stop().await;
}

/// `lampyr_fiber_starts_total` of `revision` on `fiberd`: fibers started from its template.
async fn fibers_started(fiberd: &Daemon, revision: &str) -> String {
    let metrics = http().get(format!("http://{}/metrics", fiberd.addr)).send().await.expect("metrics");
    let text = metrics.text().await.expect("metrics text");
    let prefix = format!("lampyr_fiber_starts_total{{revision=\"{revision}\"}} ");
    text.lines().find_map(|l| l.strip_prefix(&prefix)).unwrap_or("none").to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_changed_policy_applies_to_the_loaded_pool_with_its_warm_fibers() {
    let env = Env::new("fiberd-policy").await;
    let registry = TestRegistry::start();
    let artifact = push_artifact(&registry, "lampyr/hello", &hello_artifact(BODY)).await;
    let fiberd = Daemon::start(&env, "grant-a-0", &["grant-a"], &registry).await;
    let homes = env.homes();
    // The cluster's settings, as lampyr-controller writes them: scale to zero off.
    let mut policy = hello_policy();
    policy.scaling.cluster = Some(ClusterScaling {
        enable_scale_to_zero: false,
        scale_to_zero_grace_period: Duration::from_millis(600),
        max_scale_up_rate: 1000.0,
        max_scale_down_rate: 2.0,
    });
    env.create_home("policy-00001", "grant-a", &artifact, None, policy).await;
    let at = |generation: i64, warm: i32| {
        move |e: Option<&lampyr_api::HomeInstance>| {
            e.is_some_and(|e| e.loaded && e.observed_generation == generation && e.warm_fibers == warm)
        }
    };
    wait_entry(&homes, "policy-00001", "grant-a-0", "loaded with one warm fiber", at(1, 1)).await;
    // Counted before any request: a request may itself start a fiber.
    assert_eq!(fibers_started(&fiberd, "policy-00001").await, "1");

    // min-scale 2: applied to the same pool, which starts one more fiber. A
    // new pool would have started two (and the first fiber would be gone).
    let patch = json!({"spec": {"policy": {"scaling": {"minScale": 2}}}});
    homes.patch("policy-00001", &PatchParams::default(), &Patch::Merge(&patch)).await.expect("patch");
    wait_entry(&homes, "policy-00001", "grant-a-0", "generation 2 with two warm fibers", at(2, 2)).await;
    assert_eq!(fibers_started(&fiberd, "policy-00001").await, "2", "one more fiber, not a new pool");
    assert_eq!(fiberd.get(&env.ns, "policy-00001").await, (200, "Hello Lampyr!\n".to_string()));
    let started = fibers_started(&fiberd, "policy-00001").await;

    // The cluster turns scale to zero on: the idle Revision drops to zero,
    // which it never did while it was off.
    let patch = json!({"spec": {"policy": {"scaling": {"minScale": 0, "cluster": {"enableScaleToZero": true}}}}});
    homes.patch("policy-00001", &PatchParams::default(), &Patch::Merge(&patch)).await.expect("patch");
    wait_entry(&homes, "policy-00001", "grant-a-0", "generation 3 scaled to zero", at(3, 0)).await;
    assert_eq!(fibers_started(&fiberd, "policy-00001").await, started, "still the first pool");
    fiberd.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn released_homes_lose_their_route_and_entry_and_shutdown_removes_the_rest() {
    let env = Env::new("fiberd-release").await;
    let registry = TestRegistry::start();
    let artifact = push_artifact(&registry, "lampyr/hello", &hello_artifact(BODY)).await;
    let fiberd = Daemon::start(&env, "grant-a-0", &["grant-a"], &registry).await;
    let homes = env.homes();
    for name in ["moved-00001", "deleted-00001", "kept-00001"] {
        env.create_home(name, "grant-a", &artifact, None, hello_policy()).await;
    }
    for name in ["moved-00001", "deleted-00001", "kept-00001"] {
        wait_entry(&homes, name, "grant-a-0", "loaded", loaded).await;
        assert_eq!(fiberd.get(&env.ns, name).await.0, 200, "{name} serves");
    }

    // Moved to another grant: the Home stays, this instance's entry and route go.
    let patch = json!({"spec": {"grantName": "grant-b"}});
    homes.patch("moved-00001", &PatchParams::default(), &Patch::Merge(&patch)).await.expect("patch");
    wait_entry(&homes, "moved-00001", "grant-a-0", "entry removed", |e| e.is_none()).await;
    assert!(homes.get_opt("moved-00001").await.expect("get").is_some(), "the Home itself stays");
    assert_eq!(fiberd.get(&env.ns, "moved-00001").await.0, 404);

    // Deleted: its pool is dropped and its Revision no longer served.
    homes.delete("deleted-00001", &DeleteParams::default()).await.expect("delete");
    wait_until("the deleted Home's Revision answers 404", || async { fiberd.get(&env.ns, "deleted-00001").await.0 == 404 }).await;
    assert!(homes.get_opt("deleted-00001").await.expect("get").is_none(), "Home and entry are gone");
    assert_eq!(fiberd.get(&env.ns, "kept-00001").await.0, 200, "the others keep serving");

    // Shutting down removes the entries it still has.
    fiberd.stop().await;
    assert_eq!(entry(&homes, "kept-00001", "grant-a-0").await, None, "no entry after shutdown");
    assert!(homes.get_opt("kept-00001").await.expect("get").is_some());
}

#[tokio::test(flavor = "multi_thread")]
async fn homes_that_do_not_pull_or_verify_say_why_and_never_block_the_others() {
    let env = Env::new("fiberd-bad").await;
    let registry = TestRegistry::start();
    let good = push_artifact(&registry, "lampyr/hello", &hello_artifact(BODY)).await;
    let other = hello_artifact(OTHER_BODY);
    let tampered = push_artifact(&registry, "lampyr/tampered", &other).await;
    // Its memory layer is its own (the guest ELF is shared with the good artifact); the
    // registry's copy of its compressed form is altered.
    let structure = lampyr_artifact::verify::layout_structure(&other.layout, Some(&other.digest)).expect("structure");
    let memory = structure.memory.transport().digest().to_string();
    let good_memory = lampyr_artifact::verify::layout_structure(&hello_artifact(BODY).layout, None).expect("structure");
    assert_ne!(good_memory.memory.transport().digest().to_string(), memory, "the good artifact's memory layer differs");
    let stored = registry.blob_data_path(&memory);
    let original = std::fs::read(&stored).expect("registry blob");
    let mut bytes = original.clone();
    bytes[10] ^= 0x01;
    std::fs::write(&stored, &bytes).expect("tamper");
    let missing = format!("{}/lampyr/hello@sha256:{}", registry.host(), "0".repeat(64));

    let fiberd = Daemon::start(&env, "grant-a-0", &["grant-a"], &registry).await;
    let homes = env.homes();
    env.create_home("missing-00001", "grant-a", &missing, None, hello_policy()).await;
    env.create_home("tampered-00001", "grant-a", &tampered, None, hello_policy()).await;
    env.create_home("good-00001", "grant-a", &good, None, hello_policy()).await;

    wait_entry(&homes, "good-00001", "grant-a-0", "loaded", loaded).await;
    assert_eq!(fiberd.get(&env.ns, "good-00001").await, (200, "Hello Lampyr!\n".to_string()));

    let e = wait_entry(&homes, "missing-00001", "grant-a-0", "failed", failed).await.expect("entry");
    let message = e.message.expect("message");
    eprintln!("missing: {message}");
    assert!(message.contains(&"0".repeat(64)) && message.contains("is not in"), "{message}");
    assert_eq!((e.address, e.observed_generation, e.warm_fibers), (fiberd.addr.to_string(), 1, 0));

    let e = wait_entry(&homes, "tampered-00001", "grant-a-0", "failed", failed).await.expect("entry");
    let message = e.message.expect("message");
    eprintln!("tampered: {message}");
    assert!(message.contains("digest mismatch for snapshot memory layer") && message.contains(&memory), "{message}");
    for name in ["missing-00001", "tampered-00001"] {
        assert_eq!(fiberd.get(&env.ns, name).await.0, 404, "{name} is not served");
    }
    let metrics = http().get(format!("http://{}/metrics", fiberd.addr)).send().await.expect("metrics");
    let metrics = metrics.text().await.expect("metrics text");
    assert!(!metrics.contains(r#"revision="tampered-00001""#), "no fiber ever ran the tampered artifact:\n{metrics}");
    assert_eq!(fiberd.get(&env.ns, "good-00001").await.0, 200, "the good Home still serves");

    // Once the registry holds the right bytes again, a retry loads it.
    std::fs::write(&stored, &original).expect("restore");
    let e = wait_entry(&homes, "tampered-00001", "grant-a-0", "loaded after repair", loaded).await.expect("entry");
    assert_eq!(e.message, None, "the message goes with the failure");
    assert_eq!(fiberd.get(&env.ns, "tampered-00001").await, (200, "Hello Lampyr!\n".to_string()));
    fiberd.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sealed_templates_open_with_the_fleet_key_and_never_with_another() {
    let env = Env::new("fiberd-sealed").await;
    let registry = TestRegistry::start();
    let key = FleetKey::generate();
    env.put_fleet_key(&key).await;
    let hello = hello_artifact(BODY);
    let other = hello_artifact(OTHER_BODY);
    // Only the sealed templates are in the registry: the artifacts themselves are not.
    let pin = |artifact: &lampyr_testenv::Artifact| format!("{}/lampyr/hello@{}", registry.host(), artifact.digest);
    let template = push_sealed(&registry, "lampyr/templates", &hello, &key).await;
    let foreign = push_sealed(&registry, "lampyr/templates", &other, &FleetKey::generate()).await;

    let fiberd = Daemon::start(&env, "grant-a-0", &["grant-a"], &registry).await;
    let homes = env.homes();
    env.create_home("foreign-00001", "grant-a", &pin(&other), Some(&foreign), hello_policy()).await;
    env.create_home("mismatch-00001", "grant-a", &pin(&other), Some(&template), hello_policy()).await;
    env.create_home("sealed-00001", "grant-a", &pin(&hello), Some(&template), hello_policy()).await;

    wait_entry(&homes, "sealed-00001", "grant-a-0", "loaded", loaded).await;
    assert_eq!(fiberd.get(&env.ns, "sealed-00001").await, (200, "Hello Lampyr!\n".to_string()));

    let e = wait_entry(&homes, "foreign-00001", "grant-a-0", "failed", failed).await.expect("entry");
    let message = e.message.expect("message");
    eprintln!("foreign: {message}");
    assert!(message.contains("does not open") && message.contains(&foreign), "{message}");

    let e = wait_entry(&homes, "mismatch-00001", "grant-a-0", "failed", failed).await.expect("entry");
    let message = e.message.expect("message");
    eprintln!("mismatch: {message}");
    assert!(message.contains(&format!("seals artifact {}", hello.digest)) && message.contains(&other.digest), "{message}");
    for name in ["foreign-00001", "mismatch-00001"] {
        assert_eq!(fiberd.get(&env.ns, name).await.0, 404, "{name} is not served");
    }
    fiberd.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_fleet_key_is_named() {
    let env = Env::new("fiberd-nokey").await;
    let registry = TestRegistry::start();
    let hello = hello_artifact(BODY);
    let template = push_sealed(&registry, "lampyr/templates", &hello, &FleetKey::generate()).await;
    let fiberd = Daemon::start(&env, "grant-a-0", &["grant-a"], &registry).await;
    let homes = env.homes();
    let pin = format!("{}/lampyr/hello@{}", registry.host(), hello.digest);
    env.create_home("sealed-00001", "grant-a", &pin, Some(&template), hello_policy()).await;
    let e = wait_entry(&homes, "sealed-00001", "grant-a-0", "failed", failed).await.expect("entry");
    let message = e.message.expect("message");
    eprintln!("no key: {message}");
    assert!(message.contains(&format!("Secret {}/seal-key", env.ns)) && message.contains("does not exist"), "{message}");
    fiberd.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_home_scales_to_zero_and_back() {
    let env = Env::new("fiberd-zero").await;
    let registry = TestRegistry::start();
    let artifact = push_artifact(&registry, "lampyr/hello", &hello_artifact(BODY)).await;
    let fiberd = Daemon::start(&env, "grant-a-0", &["grant-a"], &registry).await;
    let homes = env.homes();
    env.create_home("zero-00001", "grant-a", &artifact, None, hello_policy()).await;
    let warm = |n: i32| move |e: Option<&lampyr_api::HomeInstance>| e.is_some_and(|e| e.loaded && e.warm_fibers == n);

    wait_entry(&homes, "zero-00001", "grant-a-0", "one warm fiber", warm(1)).await;
    wait_entry(&homes, "zero-00001", "grant-a-0", "scaled to zero", warm(0)).await;
    assert_eq!(fiberd.get(&env.ns, "zero-00001").await, (200, "Hello Lampyr!\n".to_string()), "woken from zero");
    wait_entry(&homes, "zero-00001", "grant-a-0", "a warm fiber again", warm(1)).await;
    // The wake-up's fiber is kept for one stable window (6 s), then dropped again.
    tokio::time::timeout(Duration::from_secs(60), wait_entry(&homes, "zero-00001", "grant-a-0", "back to zero", warm(0)))
        .await
        .expect("back to zero within a minute");
    fiberd.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_template_failing_its_readiness_probe_is_not_served_and_says_why() {
    let env = Env::new("fiberd-ready").await;
    let registry = TestRegistry::start();
    let artifact = push_artifact(&registry, "conformance/readiness", &conformance_artifact("readiness", BODY)).await;
    let fiberd = Daemon::start(&env, "grant-a-0", &["grant-a"], &registry).await;
    let homes = env.homes();
    let probed = |path: &str| FiberPolicy {
        readiness: Some(ReadinessCheck { path: path.into(), headers: Vec::new(), timeout: Duration::from_secs(30), failure_threshold: 3 }),
        ..hello_policy()
    };
    // The guest answers its readiness path, and 500 on `/query` without `probe=ok`.
    env.create_home("unready-00001", "grant-a", &artifact, None, probed("/query")).await;
    env.create_home("ready-00001", "grant-a", &artifact, None, probed("/healthz/readiness")).await;

    wait_entry(&homes, "ready-00001", "grant-a-0", "loaded", loaded).await;
    assert_eq!(fiberd.get(&env.ns, "ready-00001").await, (200, "Hello World! How about some tasty noodles?".to_string()));
    let e = wait_entry(&homes, "unready-00001", "grant-a-0", "failed", failed).await.expect("entry");
    let message = e.message.expect("message");
    eprintln!("unready: {message}");
    assert!(message.contains("readiness probe GET /query answered 500 (no query)"), "{message}");
    assert_eq!(fiberd.get(&env.ns, "unready-00001").await.0, 404, "a Revision failing its probe is not served");

    // A probe the guest passes loads the next generation.
    let patch = json!({"spec": {"policy": {"readiness": {"path": "/query?probe=ok", "timeout": "30s", "failureThreshold": 3}}}});
    homes.patch("unready-00001", &PatchParams::default(), &Patch::Merge(&patch)).await.expect("patch");
    let e = wait_entry(&homes, "unready-00001", "grant-a-0", "generation 2 loaded", loaded_at(2)).await.expect("entry");
    assert_eq!(e.message, None);
    assert_eq!(fiberd.get(&env.ns, "unready-00001").await.0, 200);
    fiberd.stop().await;
}
