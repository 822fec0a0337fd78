//! Label and annotation keys Lampyr reads or writes.
//!
//! Autoscaling annotations are listed canonical key first; the camelCase
//! aliases that upstream Knative still accepts are in [`AUTOSCALING_ALIASES`].

/// The API group of Knative Serving.
pub const SERVING_GROUP: &str = "serving.knative.dev";
/// The only `apiVersion` Lampyr reads for Knative Serving objects.
pub const SERVING_API_VERSION: &str = "serving.knative.dev/v1";

/// Annotation naming the snapshot artifact (OCI reference) a Revision runs as fibers.
pub const SNAPSHOT_ARTIFACT: &str = "lampyr.dev/snapshot-artifact";

/// Label: the Configuration a Revision belongs to.
pub const CONFIGURATION_LABEL: &str = "serving.knative.dev/configuration";
/// Label: the Configuration generation a Revision was stamped from.
pub const CONFIGURATION_GENERATION_LABEL: &str = "serving.knative.dev/configurationGeneration";
/// Label: the UID of the Configuration a Revision belongs to.
pub const CONFIGURATION_UID_LABEL: &str = "serving.knative.dev/configurationUID";
/// Label: the Service a Configuration, Route or Revision belongs to.
pub const SERVICE_LABEL: &str = "serving.knative.dev/service";
/// Label: the UID of the Service an object belongs to.
pub const SERVICE_UID_LABEL: &str = "serving.knative.dev/serviceUID";
/// Label: the Route an object belongs to.
pub const ROUTE_LABEL: &str = "serving.knative.dev/route";
/// Label: the Revision an object belongs to.
pub const REVISION_LABEL: &str = "serving.knative.dev/revision";
/// Label: the UID of the Revision an object belongs to.
pub const REVISION_UID_LABEL: &str = "serving.knative.dev/revisionUID";
/// Label on a Revision: `pending`, `active` or `reserve`.
pub const ROUTING_STATE_LABEL: &str = "serving.knative.dev/routingState";
/// Annotation: when the routing state last changed (RFC 3339, UTC).
pub const ROUTING_STATE_MODIFIED_ANNOTATION: &str = "serving.knative.dev/routingStateModified";
/// Annotation: the user who created the object.
pub const CREATOR_ANNOTATION: &str = "serving.knative.dev/creator";
/// Annotation: the user who last changed the object's spec.
pub const LAST_MODIFIER_ANNOTATION: &str = "serving.knative.dev/lastModifier";
/// Annotation on a Revision: the Routes that reference it (comma-separated).
pub const ROUTES_ANNOTATION: &str = "serving.knative.dev/routes";
/// Annotation or label `"true"`: never garbage-collect this Revision.
pub const NO_GC_ANNOTATION: &str = "serving.knative.dev/no-gc";
/// Label: the visibility of a Service or Route (`cluster-local`).
pub const VISIBILITY_LABEL: &str = "networking.knative.dev/visibility";

/// Prefix of every autoscaling annotation key.
pub const AUTOSCALING_PREFIX: &str = "autoscaling.knative.dev/";
/// Autoscaler class annotation.
pub const CLASS: &str = "autoscaling.knative.dev/class";
/// Knative's own autoscaler class, the one fibers use.
pub const CLASS_KPA: &str = "kpa.autoscaling.knative.dev";
/// Kubernetes HPA class (unsupported for fibers).
pub const CLASS_HPA: &str = "hpa.autoscaling.knative.dev";
/// Metric annotation (`concurrency` or `rps`).
pub const METRIC: &str = "autoscaling.knative.dev/metric";
/// Metric value: in-flight requests per replica.
pub const METRIC_CONCURRENCY: &str = "concurrency";
/// Metric value: requests per second per replica.
pub const METRIC_RPS: &str = "rps";
/// Lower bound of replicas.
pub const MIN_SCALE: &str = "autoscaling.knative.dev/min-scale";
/// Upper bound of replicas (0 = unbounded).
pub const MAX_SCALE: &str = "autoscaling.knative.dev/max-scale";
/// Replicas started when a Revision is created.
pub const INITIAL_SCALE: &str = "autoscaling.knative.dev/initial-scale";
/// Replicas started when a Revision wakes from zero.
pub const ACTIVATION_SCALE: &str = "autoscaling.knative.dev/activation-scale";
/// Target metric value per replica.
pub const TARGET: &str = "autoscaling.knative.dev/target";
/// Share of the target the autoscaler aims for, in percent.
pub const TARGET_UTILIZATION_PERCENTAGE: &str =
    "autoscaling.knative.dev/target-utilization-percentage";
/// Requests the activator absorbs before replicas are added.
pub const TARGET_BURST_CAPACITY: &str = "autoscaling.knative.dev/target-burst-capacity";
/// Stable window (Go duration, 6s–1h).
pub const WINDOW: &str = "autoscaling.knative.dev/window";
/// Delay before a scale-down decision applies (Go duration, 0–1h).
pub const SCALE_DOWN_DELAY: &str = "autoscaling.knative.dev/scale-down-delay";
/// How long the last replica stays after a scale-to-zero decision.
pub const SCALE_TO_ZERO_POD_RETENTION_PERIOD: &str =
    "autoscaling.knative.dev/scale-to-zero-pod-retention-period";
/// Panic window as a percentage of the stable window.
pub const PANIC_WINDOW_PERCENTAGE: &str = "autoscaling.knative.dev/panic-window-percentage";
/// Panic threshold as a percentage of the target.
pub const PANIC_THRESHOLD_PERCENTAGE: &str = "autoscaling.knative.dev/panic-threshold-percentage";

/// Legacy camelCase aliases of autoscaling keys: `(canonical, alias)`.
pub const AUTOSCALING_ALIASES: &[(&str, &str)] = &[
    (MIN_SCALE, "autoscaling.knative.dev/minScale"),
    (MAX_SCALE, "autoscaling.knative.dev/maxScale"),
    (INITIAL_SCALE, "autoscaling.knative.dev/initialScale"),
    (ACTIVATION_SCALE, "autoscaling.knative.dev/activationScale"),
    (
        TARGET_UTILIZATION_PERCENTAGE,
        "autoscaling.knative.dev/targetUtilizationPercentage",
    ),
    (
        TARGET_BURST_CAPACITY,
        "autoscaling.knative.dev/targetBurstCapacity",
    ),
    (SCALE_DOWN_DELAY, "autoscaling.knative.dev/scaleDownDelay"),
    (
        SCALE_TO_ZERO_POD_RETENTION_PERIOD,
        "autoscaling.knative.dev/scaleToZeroPodRetentionPeriod",
    ),
    (
        PANIC_WINDOW_PERCENTAGE,
        "autoscaling.knative.dev/panicWindowPercentage",
    ),
    (
        PANIC_THRESHOLD_PERCENTAGE,
        "autoscaling.knative.dev/panicThresholdPercentage",
    ),
];

/// The camelCase alias of a canonical autoscaling key, if it has one.
pub fn autoscaling_alias(canonical: &str) -> Option<&'static str> {
    AUTOSCALING_ALIASES
        .iter()
        .find(|(c, _)| *c == canonical)
        .map(|(_, a)| *a)
}
