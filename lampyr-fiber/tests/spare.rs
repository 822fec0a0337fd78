//! Spare sandboxes under /dev/kvm: a Revision waking from zero takes a spare built from
//! another Revision's template and answers exactly as a fiber built from its own would,
//! request after request; with spares off, it builds its own. One test: spares belong to
//! the process, so the steps must not interleave with another test's.

use std::path::PathBuf;
use std::time::Duration;

use lampyr_abi::{Env, Request};
use lampyr_artifact::{VerifiedArtifact, verify_layout};
use lampyr_fiber::build::{BuildOptions, build_artifact};
use lampyr_fiber::metrics::RuntimeMetrics;
use lampyr_fiber::runtime::spare;
use lampyr_fiber::{FiberPool, PoolConfig, Template};
use lampyr_testenv::{example_elf, require_kvm, test_guest_elf};
use tokio::time::Instant;

fn build(elf: PathBuf, dir: &tempfile::TempDir, name: &str) -> VerifiedArtifact {
    let layout = dir.path().join(name);
    let built = build_artifact(&elf, &layout, &BuildOptions::default()).expect("artifact builds");
    verify_layout(&layout, Some(&built.digest)).expect("artifact verifies")
}

fn pool(artifact: &VerifiedArtifact, env: Env, revision: &str) -> FiberPool {
    let template = Template::load(artifact, &env).expect("template loads");
    let config = PoolConfig { revision: revision.into(), max_fibers: 1, queue_capacity: 4, capacity: None };
    FiberPool::new(template, config, RuntimeMetrics::default())
}

async fn answer(pool: &FiberPool) -> String {
    let req = Request { method: "GET".into(), uri: "/".into(), ..Request::default() };
    let resp = pool.invoke(req, Instant::now() + Duration::from_secs(30)).await.expect("answers");
    assert_eq!(resp.status, 200);
    String::from_utf8_lossy(&resp.body).into_owned()
}

async fn wait_for(what: &str, cond: impl Fn() -> bool) {
    let until = std::time::Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(std::time::Instant::now() < until, "{what}: not within 30 s");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_revision_waking_from_zero_takes_a_spare_made_from_another_and_answers_as_itself() {
    require_kvm();
    let dir = tempfile::tempdir().expect("tempdir");
    let hello = build(example_elf("hello"), &dir, "hello");
    let counter = build(test_guest_elf("counter"), &dir, "counter");
    spare::set_target(1);

    // hello's wake finds no spare (none made yet) and starts a refill from hello's template.
    let env = Env { vars: vec![("TARGET".into(), "spare".into())], ..Env::default() };
    let greeter = pool(&hello, env, "hello-00001");
    assert_eq!(answer(&greeter).await, "Hello spare!\n");
    wait_for("a spare made from hello's template", || spare::ready() == 1).await;

    // counter wakes from the spare hello's template made, and is counter through and through.
    let used = spare::used();
    let counting = pool(&counter, Env::default(), "counter-00001");
    // One fiber (the pool's limit), so requests 2 and 3 run in the spare after its restores.
    for request in 1..=3 {
        assert_eq!(answer(&counting).await, "1\n", "request {request}: counter's state, restored from counter's snapshot");
    }
    assert_eq!(spare::used(), used + 1, "counter's first fiber came from the spare");
    let mut registry = prometheus_client::registry::Registry::default();
    RuntimeMetrics::default().register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("metrics encode");
    assert!(text.contains(&format!("lampyr_fiber_spare_starts_total {}", spare::used())), "{text}");
    assert!(text.contains("lampyr_fiber_spares "), "{text}");
    assert_eq!(answer(&greeter).await, "Hello spare!\n", "hello is unchanged beside it");

    // Off: a wake builds its own fiber and the spares are gone.
    spare::set_target(0);
    assert_eq!(spare::ready(), 0);
    let used = spare::used();
    counting.set_desired(0).await.expect("counter back to zero");
    assert_eq!(answer(&counting).await, "1\n");
    assert_eq!(spare::used(), used, "no spare with spares off");
}
