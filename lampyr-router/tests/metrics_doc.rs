//! docs/metrics.md lists exactly the metrics the router and runtime register.

use std::collections::BTreeSet;

use lampyr_fiber::metrics::RuntimeMetrics;
use lampyr_router::metrics::RouterMetrics;
use lampyr_router::metrics::render;
use prometheus_client::registry::Registry;

fn registered() -> BTreeSet<String> {
    let mut registry = Registry::default();
    let router = RouterMetrics::default();
    router.register(&mut registry);
    let labels = vec![("namespace".to_string(), "n".to_string()), ("revision".to_string(), "r".to_string())];
    router.requests.get_or_create(&labels).inc();
    router.duration.get_or_create(&labels).observe(0.1);
    router.cold_starts.get_or_create(&labels).inc();
    router.cold_start_seconds.get_or_create(&labels).observe(0.1);
    router.fibers_desired.get_or_create(&labels).set(1);
    router.fibers_actual.get_or_create(&labels).set(1);
    router.queue_depth.get_or_create(&labels).set(1);
    router.upstream_connect_failures.get_or_create(&labels).inc();
    router.upstream_refusals.get_or_create(&labels).inc();
    router.instances.get_or_create(&labels).set(1);
    let runtime = RuntimeMetrics::default();
    runtime.register(&mut registry);
    // Families with a sample show up for sure; give each one.
    let _ = runtime.for_revision("r");
    render(&registry)
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| {
            let mut parts = l.split_whitespace();
            let name = parts.next().unwrap_or_default();
            match parts.next() {
                Some("counter") => format!("{name}_total"),
                _ => name.to_string(),
            }
        })
        .collect()
}

fn documented() -> BTreeSet<String> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/metrics.md")).expect("docs/metrics.md");
    doc.lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .filter(|name| name.starts_with("lampyr_"))
        .map(str::to_string)
        .collect()
}

#[test]
fn every_metric_is_documented_and_every_documented_metric_exists() {
    let (registered, documented) = (registered(), documented());
    let undocumented: Vec<_> = registered.difference(&documented).collect();
    let missing: Vec<_> = documented.difference(&registered).collect();
    assert!(undocumented.is_empty(), "registered but not in docs/metrics.md: {undocumented:?}");
    assert!(missing.is_empty(), "in docs/metrics.md but not registered: {missing:?}");
    assert!(registered.len() >= 22, "{registered:?}");
}
