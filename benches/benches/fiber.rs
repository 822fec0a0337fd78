//! Host-side fiber figures (template load, fiber from snapshot, restore,
//! dispatch overhead, density, creation rate), each beside the baseline of
//! booting the guest from its ELF, measured in the same run.
//! Guest execution is emulated on these machines and reported on its own line.
//!
//! Run: `cargo bench -p lampyr-benches --bench fiber`

use std::sync::Arc;
use std::time::{Duration, Instant};

use lampyr_abi::{Env, Request};
use lampyr_artifact::verify_layout;
use lampyr_benches::{Samples, Table, fmt_duration, private_memory_bytes, speedup};
use lampyr_fiber::build::boot_guest;
use lampyr_fiber::build::{BuildOptions, build_artifact};
use lampyr_fiber::metrics::RuntimeMetrics;
use lampyr_fiber::{FiberPool, PoolConfig, Template};

const DENSITY_FIBERS: usize = 1000;

fn main() {
    lampyr_testenv::require_kvm();
    let elf_path = lampyr_testenv::example_elf("hello");
    let elf = std::fs::read(&elf_path).expect("read hello ELF");
    let dir = tempfile::tempdir().expect("tempdir");
    let layout = dir.path().join("hello");
    let built = build_artifact(&elf_path, &layout, &BuildOptions::default()).expect("build artifact");
    let artifact = verify_layout(&layout, Some(&built.digest)).expect("verify");

    let opts = BuildOptions::default();
    let boot = Samples::measure(10, 1, || drop(boot_guest(&elf, &opts).expect("boot")));
    let baseline = boot.median();

    let load = Samples::measure(50, 3, || drop(Template::load(&artifact, &Env::default()).expect("load")));
    let template = Template::load(&artifact, &Env::default()).expect("load");
    let snapshot = Arc::clone(template.snapshot());
    let new_fiber = Samples::measure(200, 10, || drop(template.new_sandbox().expect("fiber")));
    let restore = {
        let mut sb = template.new_sandbox().expect("fiber");
        Samples::measure(200, 10, || sb.restore(Arc::clone(&snapshot)).expect("restore"))
    };
    let rate = creation_rate(&template, Duration::from_secs(2));
    let (per_fiber, fibers_per_gib) = density(&artifact);
    let (host, guest) = dispatch(&artifact);
    let floor = handoff_floor(guest.median());

    let mut t = Table::default();
    t.row("boot from ELF (baseline: new + evolve + init)", fmt_duration(baseline), "-", "1×".into());
    t.row("template load from disk (median)", fmt_duration(load.median()), "-", speedup(baseline, load.median()));
    t.row("fiber from loaded snapshot (median)", fmt_duration(new_fiber.median()), "≤ 1 ms", speedup(baseline, new_fiber.median()));
    t.row("fiber from loaded snapshot (p99)", fmt_duration(new_fiber.percentile(99.0)), "-", speedup(baseline, new_fiber.percentile(99.0)));
    t.row("restore to snapshot (median)", fmt_duration(restore.median()), "-", speedup(baseline, restore.median()));
    t.row(
        "host dispatch overhead per request (median)",
        fmt_duration(host.median()),
        "≤ 100 µs (with restore)",
        speedup(baseline, host.median()),
    );
    t.row("host dispatch overhead per request (p99)", fmt_duration(host.percentile(99.0)), "-", "-".into());
    t.row(
        "baseline: thread hand-off floor (spawn_blocking + oneshot around a busy wait of the guest's median)",
        fmt_duration(floor.median()),
        "-",
        "-".into(),
    );
    t.row("restore + dispatch (median sum)", fmt_duration(restore.median() + host.median()), "≤ 100 µs", "-".into());
    t.row("guest call, emulated KVM (median; not host overhead)", fmt_duration(guest.median()), "-", "-".into());
    t.row(
        "fibers created+dropped per second, one core",
        format!("{rate:.0}/s"),
        "≥ 500/s",
        format!("{:.0}× boot rate", rate * baseline.as_secs_f64()),
    );
    t.row("private memory per idle warm fiber", format!("{:.1} KiB", per_fiber / 1024.0), "-", "-".into());
    t.row("idle warm fibers per GiB", format!("{fibers_per_gib:.0}"), "≥ 5,000", "-".into());
    println!("\nLampyr fiber benchmark (hello example; {} memory layer)\n", fmt_bytes(artifact.sizes.memory));
    print!("{}", t.render());
    println!("\nSamples: boot 10, load 50, fiber 200, restore 200, dispatch 200; density over {DENSITY_FIBERS} fibers.");
}

fn fmt_bytes(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1024.0 * 1024.0))
}

fn creation_rate(template: &Template, window: Duration) -> f64 {
    let started = Instant::now();
    let mut n = 0u64;
    while started.elapsed() < window {
        drop(template.new_sandbox().expect("fiber"));
        n += 1;
    }
    n as f64 / started.elapsed().as_secs_f64()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio")
}

/// Private memory per idle fiber: the growth of private RSS over `DENSITY_FIBERS` warm fibers.
fn density(artifact: &lampyr_artifact::VerifiedArtifact) -> (f64, f64) {
    let rt = runtime();
    let template = Template::load(artifact, &Env::default()).expect("load");
    let config = PoolConfig { revision: "density".into(), max_fibers: DENSITY_FIBERS, queue_capacity: 1, capacity: None };
    let pool = FiberPool::new(template, config, RuntimeMetrics::default());
    rt.block_on(pool.set_desired(1)).expect("one fiber");
    let before = private_memory_bytes();
    rt.block_on(pool.set_desired(DENSITY_FIBERS)).expect("warm fibers");
    let per_fiber = (private_memory_bytes().saturating_sub(before)) as f64 / (DENSITY_FIBERS - 1) as f64;
    (per_fiber, (1u64 << 30) as f64 / per_fiber.max(1.0))
}

/// What the pool's two thread hand-offs cost on this machine with nothing else
/// around them: a blocking task that busy-waits as long as a guest call.
fn handoff_floor(busy: Duration) -> Samples {
    let rt = runtime();
    let mut v = Vec::new();
    rt.block_on(async {
        for _ in 0..100 {
            let started = Instant::now();
            let (tx, rx) = tokio::sync::oneshot::channel();
            tokio::task::spawn_blocking(move || {
                let t = Instant::now();
                while t.elapsed() < busy {
                    std::hint::spin_loop();
                }
                let _ = tx.send(t.elapsed());
            });
            let spent = rx.await.expect("hand-off");
            v.push(started.elapsed().saturating_sub(spent));
        }
    });
    Samples(v)
}

/// Host overhead and guest time of requests through a warm pool.
fn dispatch(artifact: &lampyr_artifact::VerifiedArtifact) -> (Samples, Samples) {
    let rt = runtime();
    let template = Template::load(artifact, &Env::default()).expect("load");
    let config = PoolConfig { revision: "dispatch".into(), max_fibers: 1, queue_capacity: 1, capacity: None };
    let pool = FiberPool::new(template, config, RuntimeMetrics::default());
    let (mut host, mut guest) = (Vec::new(), Vec::new());
    rt.block_on(async {
        for i in 0..210 {
            let req = Request { method: "GET".into(), uri: "/".into(), ..Request::default() };
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            let (_, t) = pool.invoke_timed(req, deadline).await.expect("request");
            if i >= 10 {
                host.push(t.host);
                guest.push(t.guest);
            }
        }
    });
    (Samples(host), Samples(guest))
}
