//! Shared pieces of Lampyr's benchmark harnesses: timing samples, medians,
//! percentiles, memory readings and the printed table.

use std::time::{Duration, Instant};

pub mod link;

/// Polls `check` every `poll` until it returns `Some`; panics naming `what` after `patience`.
pub async fn wait_for<T>(what: &str, poll: Duration, patience: Duration, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + patience;
    loop {
        if let Some(found) = check().await {
            return found;
        }
        assert!(Instant::now() < deadline, "{what} within {patience:?}");
        tokio::time::sleep(poll).await;
    }
}

/// Timing samples of one measured step.
pub struct Samples(pub Vec<Duration>);

impl Samples {
    /// Runs `f` `n` times (after `warmup` unmeasured runs) and records each duration.
    pub fn measure(n: usize, warmup: usize, mut f: impl FnMut()) -> Self {
        for _ in 0..warmup {
            f();
        }
        Samples(
            (0..n)
                .map(|_| {
                    let t = Instant::now();
                    f();
                    t.elapsed()
                })
                .collect(),
        )
    }

    /// Like [`Samples::measure`], with an untimed `setup` before every call whose value the call takes.
    pub fn measure_with<S>(n: usize, warmup: usize, mut setup: impl FnMut() -> S, mut f: impl FnMut(S)) -> Self {
        for _ in 0..warmup {
            f(setup());
        }
        Samples(
            (0..n)
                .map(|_| {
                    let input = setup();
                    let t = Instant::now();
                    f(input);
                    t.elapsed()
                })
                .collect(),
        )
    }

    /// The `p`-th percentile (0–100), nearest-rank.
    pub fn percentile(&self, p: f64) -> Duration {
        let mut v = self.0.clone();
        v.sort();
        if v.is_empty() {
            return Duration::ZERO;
        }
        let rank = ((p / 100.0) * v.len() as f64).ceil().max(1.0) as usize;
        v[rank.min(v.len()) - 1]
    }

    /// The median.
    pub fn median(&self) -> Duration {
        self.percentile(50.0)
    }
}

/// Private (unshared) resident memory of this process, in bytes, from `/proc/self/smaps_rollup`.
pub fn private_memory_bytes() -> u64 {
    let text = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with("Private_Clean:") || l.starts_with("Private_Dirty:"))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum::<u64>()
        * 1024
}

/// A printed table of rows.
#[derive(Default)]
pub struct Table {
    rows: Vec<[String; 4]>,
}

impl Table {
    /// Adds a row: what, figure, target, comparison with the baseline.
    pub fn row(&mut self, what: &str, figure: String, target: &str, vs_baseline: String) {
        self.rows.push([what.to_string(), figure, target.to_string(), vs_baseline]);
    }

    /// Renders the table with aligned columns.
    pub fn render(&self) -> String {
        let header = ["measurement", "figure", "target", "vs baseline"].map(String::from);
        let all: Vec<&[String; 4]> = std::iter::once(&header).chain(&self.rows).collect();
        // Width in characters, as `format!` pads: `µ`, `×`, `≤` take several bytes.
        let widths: Vec<usize> = (0..4).map(|c| all.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
        let mut out = String::new();
        for (i, r) in all.iter().enumerate() {
            let cells: Vec<String> = (0..4).map(|c| format!("{:<w$}", r[c], w = widths[c])).collect();
            out.push_str(&format!("| {} |\n", cells.join(" | ")));
            if i == 0 {
                let rules: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
                out.push_str(&format!("|-{}-|\n", rules.join("-|-")));
            }
        }
        out
    }
}

/// `d` in the most readable unit.
pub fn fmt_duration(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 1000.0 {
        format!("{us:.1} µs")
    } else if us < 1e6 {
        format!("{:.2} ms", us / 1000.0)
    } else {
        format!("{:.2} s", us / 1e6)
    }
}

/// `d / baseline` as a multiple of the baseline (`12.3× baseline`).
pub fn times_baseline(d: Duration, baseline: Duration) -> String {
    format!("{:.1}× baseline", d.as_secs_f64() / baseline.as_secs_f64().max(1e-12))
}

/// `baseline / d` as a speed-up factor.
pub fn speedup(baseline: Duration, d: Duration) -> String {
    format!("{:.0}× faster", baseline.as_secs_f64() / d.as_secs_f64().max(1e-12))
}
