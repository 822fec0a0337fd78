//! A new user's first service: `ly new` → first 200 from `ly run`, beside the baseline
//! `ly run examples/hello` (a crate whose guest build and snapshot are already there),
//! in the same run, on a warm machine (toolchain, target and crates downloaded). Each
//! `ly new` sample is a fresh crate in a fresh directory: what the user waits for.
//!
//! Two cases: a new crate once `ly` has built any guest on the machine (the SDK's compiled
//! dependencies are in the cache's shared build directory, so only the crate compiles),
//! and the very first guest crate on the machine (a fresh cache: the dependencies compile).
//!
//! Run: `cargo bench -p lampyr-benches --bench first_service`

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use lampyr_benches::{Samples, Table, fmt_duration, times_baseline};
use lampyr_testenv::{LyRun, repo_root, workspace_binary};

const SAMPLES: usize = 3;

fn main() {
    lampyr_testenv::require_kvm();
    let ly = workspace_binary("lampyr-cli", "ly");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    let command = |cache: &Path| {
        let mut command = Command::new(&ly);
        command.env("LAMPYR_CACHE_DIR", cache);
        command
    };
    let first_200 = |cache: &Path, dir: &Path, args: &[&str], host: &str| {
        let run = LyRun::start(command(cache), dir, args);
        let (client, url) = run.client(host);
        runtime.block_on(async {
            loop {
                match client.get(format!("{url}/")).send().await {
                    Ok(response) if response.status().as_u16() == 200 => return,
                    _ => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            }
        });
    };
    let mut n = 0;
    let mut new_service = |cache: &Path| {
        n += 1;
        let parent = tempfile::tempdir().expect("a temp dir");
        let name = format!("first{n}");
        let created = command(cache).arg("new").arg(parent.path().join(&name)).output().expect("ly new runs");
        assert!(created.status.success(), "ly new: {}", String::from_utf8_lossy(&created.stderr));
        first_200(cache, parent.path(), &[&name], &format!("{name}.default.localhost"));
    };

    let cache = tempfile::tempdir().expect("a cache dir");
    let hello = repo_root().join("examples/hello");
    let hello = hello.to_str().expect("a UTF-8 path");
    let baseline = Samples::measure(SAMPLES, 1, || first_200(cache.path(), &repo_root(), &[hello], "hello.default.localhost"));
    let next = Samples::measure(SAMPLES, 0, || new_service(cache.path()));
    let first_ever = Samples::measure(1, 0, || new_service(tempfile::tempdir().expect("a cache dir").path()));
    let build_only = Samples::measure(1, 0, || {
        let parent = tempfile::tempdir().expect("a temp dir");
        let created = command(cache.path()).arg("new").arg(parent.path().join("built")).output().expect("ly new runs");
        assert!(created.status.success());
        let started = Instant::now();
        let built = command(cache.path())
            .args(["snapshot", "build"])
            .arg(parent.path().join("built"))
            .arg("-o")
            .arg(parent.path().join("out"))
            .output();
        assert!(built.expect("ly runs").status.success());
        eprintln!("(ly snapshot build of a new crate: {})", fmt_duration(started.elapsed()));
    });

    let mut table = Table::default();
    let base = baseline.median();
    table.row("ly run examples/hello → first 200 (baseline, built before)", fmt_duration(base), "", "1.0× baseline".into());
    for (what, samples) in [("a guest built before on this machine", &next), ("first guest crate on this machine", &first_ever)] {
        table.row(
            &format!("ly new → first 200, {what} (median)"),
            fmt_duration(samples.median()),
            "≤ 30 s",
            times_baseline(samples.median(), base),
        );
        table.row(
            &format!("ly new → first 200, {what} (slowest)"),
            fmt_duration(samples.percentile(100.0)),
            "≤ 30 s",
            times_baseline(samples.percentile(100.0), base),
        );
    }
    table.row(
        "ly new + ly snapshot build, a guest built before (one)",
        fmt_duration(build_only.median()),
        "",
        times_baseline(build_only.median(), base),
    );
    println!("{}", table.render());
}
