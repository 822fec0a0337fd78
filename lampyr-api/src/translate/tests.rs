use std::collections::BTreeMap;
use std::time::Duration;

use super::*;
use crate::autoscaler::AutoscalerConfig;
use crate::policy::{EnvSourceKind, ScaleMetric, ScalingPolicy, TimeoutPolicy};
use serde_json::{Value, json};

const ANN: &str = "spec.template.metadata.annotations";
const C0: &str = "spec.template.spec.containers[0]";

fn template(value: Value) -> RevisionTemplateSpec {
    serde_json::from_value(value).unwrap_or_else(|e| panic!("test template: {e}"))
}

/// A template with one plain container and the given annotations.
fn annotated(annotations: &[(&str, &str)]) -> RevisionTemplateSpec {
    let map: BTreeMap<String, String> =
        annotations.iter().map(|(k, v)| (format!("autoscaling.knative.dev/{k}"), (*v).to_owned())).collect();
    template(json!({
        "metadata": {"annotations": map},
        "spec": {"containers": [{"image": "x"}]},
    }))
}

/// A template with one container holding `container` fields.
fn with_container(container: Value) -> RevisionTemplateSpec {
    template(json!({"spec": {"containers": [container]}}))
}

fn ok(t: &RevisionTemplateSpec) -> FiberPolicy {
    translate(t).unwrap_or_else(|e| panic!("{e}"))
}

fn err(t: &RevisionTemplateSpec) -> UnsupportedFields {
    match translate(t) {
        Ok(p) => panic!("expected an error, got {p:?}"),
        Err(e) => e,
    }
}

fn default_scaling() -> ScalingPolicy {
    ScalingPolicy::default()
}

#[test]
fn defaults() {
    let policy = ok(&with_container(json!({"image": "x"})));
    assert_eq!(
        policy,
        FiberPolicy {
            container_concurrency: 0,
            scaling: default_scaling(),
            timeouts: TimeoutPolicy { request: Duration::from_secs(300), response_start: Duration::from_secs(300), idle: None },
            memory_bytes: None,
            env: Vec::new(),
            env_refs: Vec::new(),
            args: Vec::new(),
            http2: false,
            port: None,
            readiness: None,
        }
    );
}

#[test]
fn every_annotation_and_alias() {
    type Set = fn(&mut ScalingPolicy);
    let table: &[(&str, &str, Set)] = &[
        ("class", "kpa.autoscaling.knative.dev", |_| {}),
        ("metric", "concurrency", |_| {}),
        ("metric", "rps", |p| {
            p.metric = ScaleMetric::Rps;
            p.target = 200.0;
        }),
        ("min-scale", "2", |p| p.min_scale = 2),
        ("minScale", "2", |p| p.min_scale = 2),
        ("max-scale", "7", |p| p.max_scale = 7),
        ("maxScale", "7", |p| p.max_scale = 7),
        ("initial-scale", "3", |p| p.initial_scale = 3),
        ("initialScale", "3", |p| p.initial_scale = 3),
        ("activation-scale", "4", |p| p.activation_scale = 4),
        ("target", "25.5", |p| p.target = 25.5),
        ("target-utilization-percentage", "85", |p| p.target_utilization_percent = 85.0),
        ("targetUtilizationPercentage", "85", |p| p.target_utilization_percent = 85.0),
        ("target-burst-capacity", "-1", |_| {}),
        ("targetBurstCapacity", "0", |_| {}),
        ("window", "2m", |p| p.stable_window = Duration::from_secs(120)),
        ("window", "6s", |p| p.stable_window = Duration::from_secs(6)),
        ("window", "1h", |p| p.stable_window = Duration::from_secs(3600)),
        ("scale-down-delay", "1m30s", |p| p.scale_down_delay = Duration::from_secs(90)),
        ("scaleDownDelay", "0s", |_| {}),
        ("scale-to-zero-pod-retention-period", "1m5s", |p| p.scale_to_zero_retention = Duration::from_secs(65)),
        ("scaleToZeroPodRetentionPeriod", "1.5s", |p| p.scale_to_zero_retention = Duration::from_millis(1500)),
        ("panic-window-percentage", "20", |p| p.panic_window_percent = 20.0),
        ("panicWindowPercentage", "1", |p| p.panic_window_percent = 1.0),
        ("panic-threshold-percentage", "150", |p| p.panic_threshold_percent = 150.0),
        ("panicThresholdPercentage", "1000", |p| p.panic_threshold_percent = 1000.0),
    ];
    for (key, value, set) in table {
        let mut want = default_scaling();
        set(&mut want);
        let got = translate(&annotated(&[(key, value)])).unwrap_or_else(|e| panic!("{key}={value}: {e}")).scaling;
        assert_eq!(got, want, "{key}={value}");
    }
    // Unrelated annotations are not ours to judge.
    let t = template(json!({
        "metadata": {"annotations": {"example.com/owner": "me", "serving.knative.dev/creator": "x"}},
        "spec": {"containers": [{"image": "x"}]},
    }));
    assert_eq!(ok(&t).scaling, default_scaling());
}

#[test]
fn min_max_and_activation_together() {
    let p = ok(&annotated(&[("min-scale", "2"), ("max-scale", "10"), ("activation-scale", "3")]));
    assert_eq!((p.scaling.min_scale, p.scaling.max_scale), (2, 10));
    assert_eq!(p.scaling.activation_scale, 3);
    // max-scale 0 means unbounded, so any min-scale fits.
    let p = ok(&annotated(&[("min-scale", "5"), ("max-scale", "0")]));
    assert_eq!((p.scaling.min_scale, p.scaling.max_scale), (5, 0));
}

#[test]
fn invalid_annotations_name_their_path() {
    // (annotations, key with the problem, kind, part of the reason)
    type Case<'a> = (&'a [(&'a str, &'a str)], &'a str, ProblemKind, &'a str);
    let table: &[Case] = &[
        (&[("min-scale", "-1")], "min-scale", ProblemKind::Invalid, "out of bounds"),
        (&[("min-scale", "two")], "min-scale", ProblemKind::Invalid, "not an integer"),
        (&[("minScale", "1.5")], "minScale", ProblemKind::Invalid, "not an integer"),
        (&[("maxScale", "99999999999")], "maxScale", ProblemKind::Invalid, "out of bounds"),
        (&[("min-scale", "3"), ("max-scale", "2")], "max-scale", ProblemKind::Invalid, "max-scale=2 is less than min-scale=3"),
        (&[("initial-scale", "0")], "initial-scale", ProblemKind::Invalid, "allow-zero-initial-scale"),
        (&[("initialScale", "-2")], "initialScale", ProblemKind::Invalid, "greater than 0"),
        (&[("initial-scale", "x")], "initial-scale", ProblemKind::Invalid, "not an integer"),
        (&[("activation-scale", "1")], "activation-scale", ProblemKind::Invalid, "greater than 1"),
        (
            &[("activation-scale", "5"), ("max-scale", "3")],
            "activation-scale",
            ProblemKind::Invalid,
            "max-scale=3 is less than activation-scale=5",
        ),
        (
            &[("activation-scale", "2"), ("min-scale", "3")],
            "activation-scale",
            ProblemKind::Invalid,
            "min-scale=3 is greater than activation-scale=2",
        ),
        (&[("target", "0")], "target", ProblemKind::Invalid, "at least 0.01"),
        (&[("target", "lots")], "target", ProblemKind::Invalid, "not a number"),
        (&[("target", "NaN")], "target", ProblemKind::Invalid, "not a number"),
        (&[("target", "inf")], "target", ProblemKind::Invalid, "not a number"),
        (&[("target-utilization-percentage", "101")], "target-utilization-percentage", ProblemKind::Invalid, "between 1 and 100"),
        (&[("targetUtilizationPercentage", "0.5")], "targetUtilizationPercentage", ProblemKind::Invalid, "between 1 and 100"),
        (&[("target-burst-capacity", "-2")], "target-burst-capacity", ProblemKind::Invalid, "-1"),
        (&[("metric", "cpu")], "metric", ProblemKind::Invalid, "use concurrency or rps"),
        (&[("window", "5s")], "window", ProblemKind::Invalid, "between 6s and 3600s"),
        (&[("window", "61m")], "window", ProblemKind::Invalid, "between 6s and 3600s"),
        (&[("window", "-10s")], "window", ProblemKind::Invalid, "between 6s and 3600s"),
        (&[("window", "6.5s")], "window", ProblemKind::Invalid, "whole seconds"),
        (&[("window", "60")], "window", ProblemKind::Invalid, "missing unit"),
        (&[("window", "1d")], "window", ProblemKind::Invalid, "unknown unit"),
        (&[("scale-down-delay", "2h")], "scale-down-delay", ProblemKind::Invalid, "between 0s and 3600s"),
        (&[("scaleDownDelay", "-1s")], "scaleDownDelay", ProblemKind::Invalid, "between 0s and 3600s"),
        (&[("scale-down-delay", "1500ms")], "scale-down-delay", ProblemKind::Invalid, "whole seconds"),
        (
            &[("scale-to-zero-pod-retention-period", "1h1s")],
            "scale-to-zero-pod-retention-period",
            ProblemKind::Invalid,
            "between 0s and 3600s",
        ),
        (&[("scaleToZeroPodRetentionPeriod", "soon")], "scaleToZeroPodRetentionPeriod", ProblemKind::Invalid, "invalid duration"),
        (&[("panic-window-percentage", "0.5")], "panic-window-percentage", ProblemKind::Invalid, "between 1 and 100"),
        (&[("panicWindowPercentage", "101")], "panicWindowPercentage", ProblemKind::Invalid, "between 1 and 100"),
        (&[("panic-threshold-percentage", "100")], "panic-threshold-percentage", ProblemKind::Invalid, "between 110 and 1000"),
        (&[("panicThresholdPercentage", "1001")], "panicThresholdPercentage", ProblemKind::Invalid, "between 110 and 1000"),
        (&[("class", "hpa.autoscaling.knative.dev")], "class", ProblemKind::Unsupported, "CPU or memory"),
        (&[("class", "xyz.autoscaling.knative.dev")], "class", ProblemKind::Invalid, "unknown autoscaler class"),
        (&[("class", "example.com/scaler")], "class", ProblemKind::Unsupported, "cannot scale fibers"),
        (&[("minscale", "1")], "minscale", ProblemKind::Unsupported, "not an autoscaling setting"),
        (
            &[("metric-aggregation-algorithm", "linear")],
            "metric-aggregation-algorithm",
            ProblemKind::Unsupported,
            "not an autoscaling setting",
        ),
        (&[("min-scale", "1"), ("minScale", "1")], "minScale", ProblemKind::Invalid, "set together with autoscaling.knative.dev/min-scale"),
    ];
    for (annotations, key, kind, reason) in table {
        let e = err(&annotated(annotations));
        let path = format!("{ANN}[\"autoscaling.knative.dev/{key}\"]");
        assert_eq!(e.paths(), [path.as_str()], "{annotations:?}: {e}");
        assert_eq!(e.problems[0].kind, *kind, "{annotations:?}");
        assert!(e.problems[0].reason.contains(reason), "{annotations:?}: {:?} should mention {reason:?}", e.problems[0].reason);
    }
}

#[test]
fn hpa_class_does_not_also_complain_about_its_metric() {
    let e = err(&annotated(&[("class", "hpa.autoscaling.knative.dev"), ("metric", "cpu")]));
    assert_eq!(e.paths().len(), 1, "{e}");
}

#[test]
fn target_follows_container_concurrency_like_upstream() {
    let cc = |cc: i64, annotations: &[(&str, &str)]| {
        let mut t = annotated(annotations);
        t.spec.container_concurrency = Some(cc);
        ok(&t)
    };
    assert_eq!(cc(0, &[]).scaling.target, 100.0);
    assert_eq!(cc(10, &[]).scaling.target, 10.0);
    assert_eq!(cc(10, &[("target", "50")]).scaling.target, 10.0);
    assert_eq!(cc(10, &[("target", "5")]).scaling.target, 5.0);
    assert_eq!(cc(0, &[("target", "50")]).scaling.target, 50.0);
    // rps ignores containerConcurrency.
    assert_eq!(cc(10, &[("metric", "rps")]).scaling.target, 200.0);
    assert_eq!(cc(1, &[]).container_concurrency, 1);
}

/// A `config-autoscaler` from `pairs` (valid).
fn cluster(pairs: &[(&str, &str)]) -> AutoscalerConfig {
    let data = pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    AutoscalerConfig::from_data(&data).unwrap_or_else(|e| panic!("{e}"))
}

fn with(t: &RevisionTemplateSpec, config: &AutoscalerConfig, rules: Rules) -> ScalingPolicy {
    translate_with(t, config, rules).unwrap_or_else(|e| panic!("{e}")).scaling
}

#[test]
fn the_clusters_settings_are_the_defaults_annotations_override() {
    let config = cluster(&[
        ("container-concurrency-target-default", "10"),
        ("container-concurrency-target-percentage", "80"),
        ("requests-per-second-target-default", "50"),
        ("stable-window", "2m"),
        ("panic-window-percentage", "20"),
        ("panic-threshold-percentage", "300"),
        ("scale-down-delay", "30s"),
        ("scale-to-zero-pod-retention-period", "10s"),
        ("min-scale", "1"),
        ("max-scale", "5"),
        ("initial-scale", "2"),
    ]);
    let from_cluster = ScalingPolicy {
        min_scale: 1,
        max_scale: 5,
        initial_scale: 2,
        target: 10.0,
        target_utilization_percent: 80.0,
        stable_window: Duration::from_secs(120),
        panic_window_percent: 20.0,
        panic_threshold_percent: 300.0,
        scale_down_delay: Duration::from_secs(30),
        scale_to_zero_retention: Duration::from_secs(10),
        ..default_scaling()
    };
    type Set = fn(&mut ScalingPolicy);
    type Case<'a> = (&'a [(&'a str, &'a str)], i64, Set);
    // (annotations, containerConcurrency, what changes from the cluster's values)
    let table: &[Case] = &[
        (&[], 0, |_| {}),
        // containerConcurrency is the target when set, as upstream.
        (&[], 4, |p| p.target = 4.0),
        (&[("target", "3")], 0, |p| p.target = 3.0),
        (&[("target-utilization-percentage", "50")], 0, |p| p.target_utilization_percent = 50.0),
        // rps: the cluster's rps default, at upstream's fixed 70 % (not the concurrency percentage).
        (&[("metric", "rps")], 0, |p| {
            p.metric = ScaleMetric::Rps;
            p.target = 50.0;
            p.target_utilization_percent = 70.0;
        }),
        (&[("window", "6s")], 0, |p| p.stable_window = Duration::from_secs(6)),
        (&[("panic-window-percentage", "5")], 0, |p| p.panic_window_percent = 5.0),
        (&[("panic-threshold-percentage", "150")], 0, |p| p.panic_threshold_percent = 150.0),
        (&[("scale-down-delay", "0s")], 0, |p| p.scale_down_delay = Duration::ZERO),
        (&[("scale-to-zero-pod-retention-period", "0s")], 0, |p| p.scale_to_zero_retention = Duration::ZERO),
        (&[("min-scale", "0"), ("max-scale", "0")], 0, |p| (p.min_scale, p.max_scale) = (0, 0)),
        (&[("initial-scale", "7")], 0, |p| p.initial_scale = 7),
        // A bound from an annotation wins over a cluster default it conflicts with.
        (&[("max-scale", "0")], 0, |p| p.max_scale = 0),
        (&[("min-scale", "9")], 0, |p| (p.min_scale, p.max_scale) = (9, 9)),
    ];
    for rules in [Rules::Admission, Rules::Admitted] {
        for (annotations, cc, set) in table {
            let mut t = annotated(annotations);
            t.spec.container_concurrency = Some(*cc);
            let mut want = from_cluster.clone();
            set(&mut want);
            assert_eq!(with(&t, &config, rules), want, "{annotations:?} cc={cc} {rules:?}");
        }
    }
    // The cluster's min-scale above a Revision's max-scale: the annotation wins.
    let config = cluster(&[("min-scale", "4")]);
    let p = with(&annotated(&[("max-scale", "2")]), &config, Rules::Admission);
    assert_eq!((p.min_scale, p.max_scale), (2, 2));
    // Translation never sets the cluster part: lampyr-controller adds it to the Home.
    assert_eq!(from_cluster.cluster, None);
}

#[test]
fn the_default_cluster_settings_give_upstreams_defaults() {
    let t = annotated(&[]);
    assert_eq!(with(&t, &AutoscalerConfig::default(), Rules::Admission), default_scaling());
    assert_eq!(with(&t, &AutoscalerConfig::default(), Rules::Admitted), default_scaling());
}

#[test]
fn rules_that_depend_on_the_cluster_refuse_at_admission_and_resolve_once_admitted() {
    let limited = cluster(&[("max-scale-limit", "10"), ("max-scale", "5")]);
    let zero_ok = cluster(&[("allow-zero-initial-scale", "true")]);
    let strict = AutoscalerConfig::default();
    // (annotations, cluster, reason at admission, the policy once admitted)
    type Case<'a> = (&'a [(&'a str, &'a str)], &'a AutoscalerConfig, Option<&'a str>, (u32, u32));
    let table: &[Case] = &[
        (&[("max-scale", "11")], &limited, Some("between 1 and 10 (config-autoscaler's max-scale-limit)"), (11, 1)),
        (&[("max-scale", "0")], &limited, Some("max-scale=0 (unbounded) is not allowed"), (0, 1)),
        (&[("max-scale", "10")], &limited, None, (10, 1)),
        (&[], &limited, None, (5, 1)),
        (&[("initial-scale", "0")], &strict, Some("allow-zero-initial-scale is false"), (0, 1)),
        (&[("initial-scale", "0")], &zero_ok, None, (0, 0)),
    ];
    for (annotations, config, refused, (max, initial)) in table {
        let t = annotated(annotations);
        match (translate_with(&t, config, Rules::Admission), refused) {
            (Ok(_), None) => {}
            (Err(e), Some(reason)) => {
                assert_eq!(e.problems.len(), 1, "{annotations:?}: {e}");
                assert!(e.problems[0].reason.contains(reason), "{annotations:?}: {e}");
                assert_eq!(e.problems[0].kind, ProblemKind::Invalid);
            }
            (got, _) => panic!("{annotations:?}: at admission {got:?}, expected refusal {refused:?}"),
        }
        let p = with(&t, config, Rules::Admitted);
        assert_eq!((p.max_scale, p.initial_scale), (*max, *initial), "{annotations:?} once admitted");
    }
}

#[test]
fn spec_timeouts_and_concurrency() {
    let spec = |fields: Value| {
        let mut v = json!({"containers": [{"image": "x"}]});
        if let (Some(obj), Some(extra)) = (v.as_object_mut(), fields.as_object()) {
            obj.extend(extra.clone());
        }
        template(json!({ "spec": v }))
    };
    let p = ok(&spec(json!({
        "timeoutSeconds": 100,
        "responseStartTimeoutSeconds": 50,
        "idleTimeoutSeconds": 30,
        "containerConcurrency": 1000,
    })));
    assert_eq!(
        p.timeouts,
        TimeoutPolicy { request: Duration::from_secs(100), response_start: Duration::from_secs(50), idle: Some(Duration::from_secs(30)) }
    );
    assert_eq!(p.request_deadline(), Duration::from_secs(50));
    assert_eq!(p.container_concurrency, 1000);
    // responseStart defaults to the request timeout; 0 means "not set".
    let p = ok(&spec(json!({"timeoutSeconds": 600, "idleTimeoutSeconds": 0})));
    assert_eq!(p.timeouts.response_start, Duration::from_secs(600));
    assert_eq!(p.timeouts.idle, None);

    let e = err(&spec(json!({
        "timeoutSeconds": 601,
        "containerConcurrency": 1001,
        "idleTimeoutSeconds": -1,
    })));
    assert_eq!(
        e.paths(),
        ["spec.template.spec.containerConcurrency", "spec.template.spec.timeoutSeconds", "spec.template.spec.idleTimeoutSeconds",]
    );
    let e = err(&spec(json!({"timeoutSeconds": 100, "responseStartTimeoutSeconds": 101})));
    assert_eq!(e.paths(), ["spec.template.spec.responseStartTimeoutSeconds"]);
    assert!(e.problems[0].reason.contains("timeoutSeconds (100)"), "{e}");
    // Without timeoutSeconds the default (300) bounds it.
    let e = err(&spec(json!({"responseStartTimeoutSeconds": 301})));
    assert_eq!(e.paths(), ["spec.template.spec.responseStartTimeoutSeconds"]);
}

#[test]
fn memory_quantities() {
    let table: &[(Value, Option<u64>)] = &[
        (json!({"limits": {"memory": "128Mi"}}), Some(128 << 20)),
        (json!({"requests": {"memory": "1G"}}), Some(1_000_000_000)),
        (json!({"limits": {"memory": "256M"}, "requests": {"memory": "128Mi"}}), Some(256_000_000)),
        (json!({"limits": {"memory": "1Gi"}, "requests": {"memory": "1Gi"}}), Some(1 << 30)),
        (json!({"limits": {"memory": "1048576"}}), Some(1_048_576)),
        (json!({"limits": {"memory": 1048576}}), Some(1_048_576)),
        (json!({"limits": {"memory": "1.5Gi"}}), Some(3 << 29)),
        (json!({"limits": {"memory": "64e6"}}), Some(64_000_000)),
        (json!({"limits": {"cpu": "1"}, "requests": {"cpu": "250m"}}), None),
        (json!({}), None),
    ];
    for (resources, want) in table {
        let p = ok(&with_container(json!({"image": "x", "resources": resources})));
        assert_eq!(p.memory_bytes, *want, "{resources}");
    }
    let res = format!("{C0}.resources");
    let bad: &[(Value, String, &str)] = &[
        (json!({"limits": {"memory": "12XB"}}), format!("{res}.limits.memory"), "invalid quantity"),
        (json!({"requests": {"memory": "-1Mi"}}), format!("{res}.requests.memory"), "negative"),
        (json!({"limits": {"memory": "0"}}), format!("{res}.limits.memory"), "greater than 0"),
        (json!({"limits": {"cpu": "one"}}), format!("{res}.limits.cpu"), "invalid quantity"),
        (json!({"limits": {"memory": "128Mi"}, "requests": {"memory": "256Mi"}}), format!("{res}.requests.memory"), "more than the limit"),
    ];
    for (resources, path, reason) in bad {
        let e = err(&with_container(json!({"image": "x", "resources": resources})));
        assert_eq!(e.paths(), [path.as_str()], "{resources}");
        assert!(e.problems[0].reason.contains(reason), "{e}");
    }
}

#[test]
fn ports() {
    let port = |ports: Value| with_container(json!({"image": "x", "ports": ports}));
    let p = ok(&port(json!([{"name": "h2c", "containerPort": 8080}])));
    assert_eq!((p.http2, p.port), (true, Some(8080)));
    let p = ok(&port(json!([{"name": "http1", "containerPort": 9000, "protocol": "TCP"}])));
    assert_eq!((p.http2, p.port), (false, Some(9000)));
    let p = ok(&port(json!([{"containerPort": 8080}])));
    assert_eq!((p.http2, p.port), (false, Some(8080)));
    let p = ok(&port(json!([{"name": "h2c"}])));
    assert_eq!((p.http2, p.port), (true, None));
    let p = ok(&port(json!([])));
    assert_eq!((p.http2, p.port), (false, None));

    let e = err(&port(json!([
        {"name": "grpc", "containerPort": 70000, "hostPort": 80, "hostIP": "1.2.3.4", "protocol": "UDP"},
        {"containerPort": 9090},
    ])));
    let p0 = format!("{C0}.ports[0]");
    assert_eq!(
        e.paths(),
        [
            format!("{C0}.ports[1]"),
            format!("{p0}.name"),
            format!("{p0}.containerPort"),
            format!("{p0}.hostPort"),
            format!("{p0}.hostIP"),
            format!("{p0}.protocol"),
        ]
    );
}

#[test]
fn command_then_args_are_the_guests_arguments() {
    let p = ok(&with_container(json!({"image": "x", "command": ["/ko-app/runtime", "abra"], "args": ["cadabra", "do"]})));
    assert_eq!(p.args, ["/ko-app/runtime", "abra", "cadabra", "do"]);
    assert_eq!(ok(&with_container(json!({"image": "x", "args": ["--serve"]}))).args, ["--serve"]);
    assert!(ok(&with_container(json!({"image": "x"}))).args.is_empty());
}

#[test]
fn env_literals_and_value_from() {
    let p = ok(&with_container(json!({"image": "x", "env": [
        {"name": "B", "value": "2"},
        {"name": "A", "value": "1"},
        {"name": "EMPTY"},
    ]})));
    assert_eq!(p.env, [("B".to_owned(), "2".to_owned()), ("A".to_owned(), "1".to_owned()), ("EMPTY".to_owned(), String::new()),]);
    // ConfigMap and Secret references travel as references, in declaration order.
    let p = ok(&with_container(json!({"image": "x",
        "envFrom": [{"prefix": "CFG_", "configMapRef": {"name": "cfg"}}, {"secretRef": {"name": "sec", "optional": true}}],
        "env": [
            {"name": "A", "value": "1"},
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
            {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "mode", "optional": true}}},
        ]
    })));
    assert_eq!(p.env, [("A".to_owned(), "1".to_owned())]);
    let refs: Vec<_> = p
        .env_refs
        .iter()
        .map(|r| {
            (r.source.kind, r.source.name.as_str(), r.source.optional, r.key.as_deref(), r.variable.as_deref(), r.index, r.prefix.as_str())
        })
        .collect();
    assert_eq!(
        refs,
        [
            (EnvSourceKind::ConfigMap, "cfg", false, None, None, 0, "CFG_"),
            (EnvSourceKind::Secret, "sec", true, None, None, 0, ""),
            (EnvSourceKind::Secret, "s", false, Some("k"), Some("TOKEN"), 1, ""),
            (EnvSourceKind::ConfigMap, "c", true, Some("mode"), Some("MODE"), 2, ""),
        ]
    );
    let e = err(&with_container(json!({"image": "x", "env": [
        {"name": "A", "value": "1"},
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "", "value": "x"},
    ], "envFrom": [{"prefix": "X"}]})));
    assert_eq!(e.paths(), [format!("{C0}.envFrom[0]"), format!("{C0}.env[1].valueFrom"), format!("{C0}.env[2].name")]);
    assert_eq!(e.problems[1].kind, ProblemKind::Unsupported);
    assert!(e.problems[1].reason.contains("only configMapKeyRef and secretKeyRef"), "{e}");
}

#[test]
fn every_unsupported_field_is_listed_in_one_error() {
    let t = template(json!({
        "metadata": {"annotations": {"autoscaling.knative.dev/class": "hpa.autoscaling.knative.dev"}},
        "spec": {
            "volumes": [{"name": "data", "emptyDir": {}}],
            "initContainers": [{"name": "init", "image": "busybox"}],
            "nodeSelector": {"disk": "ssd"},
            "tolerations": [{"key": "k", "operator": "Exists"}],
            "hostNetwork": true,
            "runtimeClassName": "gvisor",
            "enableServiceLinks": true,
            "securityContext": {"runAsUser": 1000, "fsGroup": 2000},
            "containers": [
                {
                    "image": "x",
                    "command": ["/app"],
                    "args": ["--serve"],
                    "workingDir": "/srv",
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                    "envFrom": [{"configMapRef": {"name": "cfg"}}],
                    "lifecycle": {"preStop": {"exec": {"command": ["sleep", "1"]}}},
                    "tty": true,
                    "env": [{"name": "K", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                    "ports": [{"containerPort": 8080}, {"containerPort": 8081}],
                    "resources": {"limits": {"nvidia.com/gpu": "1", "ephemeral-storage": "1Gi"}},
                    "readinessProbe": {"exec": {"command": ["true"]}},
                    "livenessProbe": {"exec": {"command": ["true"]}},
                    "startupProbe": {"grpc": {"port": 9000}},
                    "securityContext": {
                        "privileged": true,
                        "runAsUser": 0,
                        "capabilities": {"add": ["NET_ADMIN"], "drop": ["ALL"]},
                        "seccompProfile": {"type": "Unconfined"},
                        "readOnlyRootFilesystem": false,
                        "allowPrivilegeEscalation": true,
                        "runAsNonRoot": false,
                    },
                },
                {"name": "sidecar", "image": "envoy"},
            ],
        },
    }));
    let e = err(&t);
    let spec = "spec.template.spec";
    let mut want: Vec<String> = [
        format!("{ANN}[\"autoscaling.knative.dev/class\"]"),
        format!("{spec}.volumes"),
        format!("{spec}.initContainers"),
        format!("{spec}.nodeSelector"),
        format!("{spec}.tolerations"),
        format!("{spec}.hostNetwork"),
        format!("{spec}.runtimeClassName"),
        format!("{spec}.enableServiceLinks"),
        format!("{spec}.securityContext.runAsUser"),
        format!("{spec}.securityContext.fsGroup"),
        format!("{spec}.containers[1]"),
        format!("{C0}.workingDir"),
        format!("{C0}.volumeMounts"),
        format!("{C0}.lifecycle"),
        format!("{C0}.tty"),
        format!("{C0}.env[0].valueFrom"),
        format!("{C0}.ports[1]"),
        format!("{C0}.resources.limits[\"nvidia.com/gpu\"]"),
        format!("{C0}.resources.limits.ephemeral-storage"),
        format!("{C0}.readinessProbe.exec"),
        format!("{C0}.livenessProbe.exec"),
        format!("{C0}.startupProbe.grpc"),
        format!("{C0}.securityContext.privileged"),
        format!("{C0}.securityContext.runAsUser"),
        format!("{C0}.securityContext.capabilities.add"),
        format!("{C0}.securityContext.seccompProfile.type"),
        format!("{C0}.securityContext.readOnlyRootFilesystem"),
        format!("{C0}.securityContext.allowPrivilegeEscalation"),
        format!("{C0}.securityContext.runAsNonRoot"),
    ]
    .into();
    let mut got: Vec<String> = e.paths().into_iter().map(str::to_owned).collect();
    want.sort();
    got.sort();
    assert_eq!(got, want, "{e}");
    assert!(e.problems.iter().all(|p| p.kind == ProblemKind::Unsupported), "{e}");

    let shown = e.to_string();
    let mut lines = shown.lines();
    assert_eq!(lines.next(), Some(format!("the Revision template cannot run as fibers ({} problems):", want.len()).as_str()));
    assert_eq!(lines.count(), want.len());
    assert!(shown.contains(&format!("\n  - {spec}.volumes: unsupported: a fiber has no filesystem to mount volumes into")), "{shown}");
}

#[test]
fn containers_must_be_exactly_one() {
    let e = err(&template(json!({"spec": {}})));
    assert_eq!(e.paths(), ["spec.template.spec.containers"]);
    assert_eq!(e.problems[0].kind, ProblemKind::Invalid);
}

#[test]
fn supported_subset_is_accepted() {
    // What the upstream webhook and a restricted security profile add,
    // plus the fields Lampyr accepts and ignores.
    let t = template(json!({
        "metadata": {"name": "hello-00001", "labels": {"app": "hello"}},
        "spec": {
            "serviceAccountName": "hello",
            "imagePullSecrets": [{"name": "regcred"}],
            "enableServiceLinks": false,
            "automountServiceAccountToken": false,
            "timeoutSeconds": 300,
            "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
            "volumes": [],
            "containers": [{
                "name": "user-container",
                "image": "ghcr.io/example/hello@sha256:0123",
                "imagePullPolicy": "IfNotPresent",
                "command": [],
                "stdin": false,
                "resources": {},
                "readinessProbe": {"tcpSocket": {"port": 0}, "successThreshold": 1},
                "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http1"}, "periodSeconds": 5},
                "startupProbe": {"httpGet": {"path": "/ready"}, "failureThreshold": 30},
                "securityContext": {
                    "runAsNonRoot": true,
                    "allowPrivilegeEscalation": false,
                    "readOnlyRootFilesystem": true,
                    "privileged": false,
                    "capabilities": {"drop": ["ALL"], "add": []},
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
            }],
        },
    }));
    let p = ok(&t);
    assert_eq!(p.timeouts.request, Duration::from_secs(300));
    // A readiness probe may name no handler (Knative fills in tcpSocket).
    ok(&with_container(json!({"image": "x", "readinessProbe": {"periodSeconds": 1}})));
}

#[test]
fn probe_handlers() {
    let probe = |field: &str, p: Value| with_container(json!({"image": "x", field: p}));
    let e = err(&probe("readinessProbe", json!({"httpGet": {"path": "/"}, "tcpSocket": {}})));
    assert_eq!(e.paths(), [format!("{C0}.readinessProbe")]);
    assert!(e.problems[0].reason.contains("exactly one handler"), "{e}");
    let e = err(&probe("livenessProbe", json!({"periodSeconds": 3})));
    assert_eq!(e.paths(), [format!("{C0}.livenessProbe")]);
    // An exec handler is reported once, not also as a missing handler.
    let e = err(&probe("startupProbe", json!({"exec": {"command": ["true"]}})));
    assert_eq!(e.paths(), [format!("{C0}.startupProbe.exec")]);
}

#[test]
fn an_http_readiness_probe_is_kept_for_fibers_to_run_and_tcp_needs_nothing() {
    let probe = |p: Value| ok(&with_container(json!({"image": "x", "readinessProbe": p}))).readiness;
    let check = probe(json!({
        "httpGet": {"path": "healthz?full=1", "httpHeaders": [{"name": "X-Probe", "value": "yes"}]},
        "timeoutSeconds": 4, "failureThreshold": 5, "periodSeconds": 0,
    }))
    .expect("an httpGet probe is run");
    assert_eq!(check.path, "/healthz?full=1");
    assert_eq!((check.headers[0].name.as_str(), check.headers[0].value.as_str()), ("X-Probe", "yes"));
    assert_eq!((check.timeout, check.failure_threshold), (Duration::from_secs(4), 5));
    let defaults = probe(json!({"httpGet": {}})).expect("run");
    assert_eq!((defaults.path.as_str(), defaults.timeout, defaults.failure_threshold), ("/", Duration::from_secs(1), 3));
    assert_eq!(probe(json!({"tcpSocket": {}})), None);
    assert_eq!(probe(json!({"periodSeconds": 1})), None);
}

#[test]
fn revision_paths_start_at_the_revision() {
    let revision: Revision = serde_json::from_value(json!({
        "metadata": {"name": "hello-00001", "annotations": {"autoscaling.knative.dev/window": "1s"}},
        "spec": {"containers": [{"image": "x", "workingDir": "/x"}]},
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    let e = match translate_revision(&revision) {
        Ok(p) => panic!("expected an error, got {p:?}"),
        Err(e) => e,
    };
    assert_eq!(e.paths(), ["metadata.annotations[\"autoscaling.knative.dev/window\"]", "spec.containers[0].workingDir",]);
}

#[test]
fn from_yaml_manifest() {
    let text = r#"
apiVersion: serving.knative.dev/v1
kind: Service
metadata:
  name: hello
spec:
  template:
    metadata:
      annotations:
        autoscaling.knative.dev/minScale: "1"
        autoscaling.knative.dev/max-scale: "20"
        autoscaling.knative.dev/window: 90s
        lampyr.dev/snapshot-artifact: registry.example/hello@sha256:00
    spec:
      containerConcurrency: 1
      timeoutSeconds: 30
      containers:
        - image: ghcr.io/example/hello
          env:
            - name: TARGET
              value: fibers
          ports:
            - name: h2c
              containerPort: 8080
          resources:
            limits:
              memory: 64Mi
              cpu: "1"
"#;
    let manifests = crate::parse_manifests(text, "hello.yaml").unwrap_or_else(|e| panic!("{e}"));
    let crate::ManifestObject::Service(svc) = &manifests[0].object else {
        panic!("expected a Service");
    };
    let p = ok(&svc.spec.template);
    assert_eq!(p.container_concurrency, 1);
    assert_eq!((p.scaling.min_scale, p.scaling.max_scale), (1, 20));
    assert_eq!(p.scaling.stable_window, Duration::from_secs(90));
    assert_eq!(p.scaling.target, 1.0);
    assert_eq!(p.timeouts.request, Duration::from_secs(30));
    assert_eq!(p.memory_bytes, Some(64 << 20));
    assert_eq!(p.env, [("TARGET".to_owned(), "fibers".to_owned())]);
    assert_eq!((p.http2, p.port), (true, Some(8080)));
}
