//! A new user's first service: `ly new` → first 200 from `ly run`, beside the baseline
//! `ly run examples/hello` (a crate whose guest build and snapshot are already there),
//! in the same run, on a warm machine (toolchain, target and crates downloaded). Each
//! `ly new` sample is a fresh crate in a fresh directory, so its guest build is a cold
//! `cargo build` of the crate and the SDK's dependencies: what the user waits for.
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
    let cache = tempfile::tempdir().expect("a cache dir");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    let command = || {
        let mut command = Command::new(&ly);
        command.env("LAMPYR_CACHE_DIR", cache.path());
        command
    };
    let first_200 = |dir: &Path, args: &[&str], host: &str| {
        let run = LyRun::start(command(), dir, args);
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

    let hello = repo_root().join("examples/hello");
    let hello = hello.to_str().expect("a UTF-8 path");
    let baseline = Samples::measure(SAMPLES, 1, || first_200(&repo_root(), &[hello], "hello.default.localhost"));
    let mut n = 0;
    let fresh = Samples::measure(SAMPLES, 0, || {
        n += 1;
        let parent = tempfile::tempdir().expect("a temp dir");
        let name = format!("first{n}");
        let created = command().arg("new").arg(parent.path().join(&name)).output().expect("ly new runs");
        assert!(created.status.success(), "ly new: {}", String::from_utf8_lossy(&created.stderr));
        first_200(parent.path(), &[&name], &format!("{name}.default.localhost"));
    });
    let new_crate_build = Samples::measure(1, 0, || {
        let parent = tempfile::tempdir().expect("a temp dir");
        let created = command().arg("new").arg(parent.path().join("built")).output().expect("ly new runs");
        assert!(created.status.success());
        let started = Instant::now();
        let built =
            command().args(["snapshot", "build"]).arg(parent.path().join("built")).arg("-o").arg(parent.path().join("out")).output();
        assert!(built.expect("ly runs").status.success());
        eprintln!("(ly snapshot build of a new crate: {})", fmt_duration(started.elapsed()));
    });

    let mut table = Table::default();
    let base = baseline.median();
    table.row("ly run examples/hello → first 200 (baseline, built before)", fmt_duration(base), "", "1.0× baseline".into());
    table.row("ly new → first 200 from ly run (median)", fmt_duration(fresh.median()), "≤ 30 s", times_baseline(fresh.median(), base));
    table.row(
        "ly new → first 200 from ly run (slowest)",
        fmt_duration(fresh.percentile(100.0)),
        "≤ 30 s",
        times_baseline(fresh.percentile(100.0), base),
    );
    table.row(
        "ly new + ly snapshot build (one)",
        fmt_duration(new_crate_build.median()),
        "",
        times_baseline(new_crate_build.median(), base),
    );
    println!("{}", table.render());
}
