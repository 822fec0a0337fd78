//! Where a pool runs its guest calls, under /dev/kvm: on a blocking thread, never the runtime
//! thread that made the call, on either runtime flavour; so the runtime's other tasks keep
//! running while a guest runs. The guest's thread is seen through its log event (`LampyrLog`
//! runs on the thread that runs the guest).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::thread::ThreadId;
use std::time::Duration;

use lampyr_abi::{Env, Request};
use lampyr_artifact::verify_layout;
use lampyr_fiber::build::{BuildOptions, build_artifact};
use lampyr_fiber::metrics::RuntimeMetrics;
use lampyr_fiber::{FiberPool, PoolConfig, Template};
use lampyr_router::InvokeError;
use lampyr_testenv::{require_kvm, test_guest_elf};
use tokio::runtime::Runtime;
use tokio::time::Instant;
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};

/// The guest log events seen by this test binary: their fields, and the thread each was written on.
static GUEST_LOGS: Mutex<Vec<(String, ThreadId)>> = Mutex::new(Vec::new());

/// Records `lampyr_guest` events in [`GUEST_LOGS`].
struct GuestLogRecorder;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for GuestLogRecorder {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if event.metadata().target() != "lampyr_guest" {
            return;
        }
        let mut fields = FieldText(String::new());
        event.record(&mut fields);
        GUEST_LOGS.lock().expect("the log record").push((fields.0, std::thread::current().id()));
    }
}

struct FieldText(String);

impl Visit for FieldText {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!("{}={value:?} ", field.name()));
    }
}

fn record_guest_logs() {
    static INSTALLED: Once = Once::new();
    INSTALLED.call_once(|| {
        let subscriber = tracing_subscriber::registry().with(GuestLogRecorder);
        tracing::subscriber::set_global_default(subscriber).expect("the only global subscriber");
    });
}

/// The threads the guest's log events carrying `marker` were written on.
fn threads_that_logged(marker: &str) -> Vec<ThreadId> {
    let needle = format!("marker={marker}");
    let logs = GUEST_LOGS.lock().expect("the log record");
    logs.iter().filter(|(fields, _)| fields.contains(&needle)).map(|(_, thread)| *thread).collect()
}

/// A pool of one test guest's fibers (the artifact's directory kept with it).
fn pool_of(guest: &str) -> (tempfile::TempDir, FiberPool) {
    require_kvm();
    let dir = tempfile::tempdir().expect("tempdir");
    let layout = dir.path().join("artifact");
    let built = build_artifact(&test_guest_elf(guest), &layout, &BuildOptions::default()).expect("artifact builds");
    let artifact = verify_layout(&layout, Some(&built.digest)).expect("artifact verifies");
    let template = Template::load(&artifact, &Env::default()).expect("template loads");
    let config = PoolConfig { revision: format!("{guest}-00001"), max_fibers: 2, queue_capacity: 4, capacity: None };
    (dir, FiberPool::new(template, config, RuntimeMetrics::default()))
}

fn multi_thread(workers: usize) -> Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(workers).enable_all().build().expect("a runtime")
}

fn current_thread() -> Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime")
}

fn get(uri: &str) -> Request {
    Request { method: "GET".into(), uri: uri.into(), ..Request::default() }
}

/// Makes `uri`'s request from a task of `rt` (as a server's connection task does); returns
/// the thread the task ran on when it called the pool, and the answer's status.
fn call_from_a_task(rt: &Runtime, pool: &FiberPool, uri: &str) -> (ThreadId, u16) {
    let (pool, req) = (pool.clone(), get(uri));
    let task = rt.spawn(async move {
        let caller = std::thread::current().id();
        let resp = pool.invoke(req, Instant::now() + Duration::from_secs(30)).await.expect("the guest answers");
        (caller, resp.status)
    });
    rt.block_on(task).expect("the calling task")
}

#[test]
fn the_guest_runs_on_a_blocking_thread_not_the_calling_runtime_thread() {
    record_guest_logs();
    let (_dir, pool) = pool_of("counter");
    for (flavour, rt) in [("current-thread", current_thread()), ("multi-thread", multi_thread(1))] {
        rt.block_on(pool.set_desired(1)).expect("a warm fiber");
        let marker = format!("handed-off-{flavour}");
        let (caller, status) = call_from_a_task(&rt, &pool, &format!("/log?{marker}"));
        assert_eq!(status, 200);
        let threads = threads_that_logged(&marker);
        assert_eq!(threads.len(), 1, "{flavour}: one log event: {threads:?}");
        assert_ne!(threads[0], caller, "{flavour}: the runtime thread that called is not blocked by the guest");
    }
}

/// Runs a guest that never returns until its 1 s deadline, from a task of `rt`, while a
/// second task ticks every 20 ms; returns the ticks seen while the guest was running.
fn ticks_while_a_guest_spins(rt: &Runtime) -> usize {
    let (_dir, pool) = pool_of("spin");
    let ticks_in_call = Arc::new(AtomicUsize::new(0));
    let ticker = {
        let (pool, ticks) = (pool.clone(), Arc::clone(&ticks_in_call));
        rt.spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(20)).await;
                if pool.stats().in_flight == 1 {
                    ticks.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };
    let call = rt.spawn(async move { pool.invoke(get("/loop"), Instant::now() + Duration::from_secs(1)).await });
    let outcome = rt.block_on(call).expect("the calling task");
    assert!(matches!(outcome, Err(InvokeError::Timeout)), "the spinning guest is stopped at its deadline: {:?}", outcome.err());
    ticker.abort();
    ticks_in_call.load(Ordering::Relaxed)
}

#[test]
fn the_runtime_keeps_running_its_other_tasks_while_a_guest_runs() {
    let one_worker = ticks_while_a_guest_spins(&multi_thread(1));
    assert!(one_worker >= 2, "a one-worker runtime ticked {one_worker} times during a 1 s guest call");
    let handed_off = ticks_while_a_guest_spins(&current_thread());
    assert!(handed_off >= 2, "a current-thread runtime ticked {handed_off} times during a 1 s guest call");
}
