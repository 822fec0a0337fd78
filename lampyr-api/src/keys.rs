//! API groups, and the label and annotation keys Lampyr reads or writes.
//!
//! Autoscaling annotations are listed canonical key first; the camelCase
//! aliases that upstream Knative still accepts are in [`AUTOSCALING_ALIASES`].
//! Other keys upstream reads under more than one name have a `*_KEYS` list,
//! highest priority first, for [`lookup`].

use std::collections::BTreeMap;

/// The API group of Knative Serving.
pub const SERVING_GROUP: &str = "serving.knative.dev";
/// The only `apiVersion` Lampyr reads for Knative Serving objects.
pub const SERVING_API_VERSION: &str = "serving.knative.dev/v1";

/// The API group of Knative's networking objects (KIngress, Certificate,
/// ClusterDomainClaim).
pub const NETWORKING_GROUP: &str = "networking.internal.knative.dev";
/// The API group of Knative's public networking labels and annotations.
pub const NETWORKING_PUBLIC_GROUP: &str = "networking.knative.dev";

/// Annotation naming the snapshot artifact (OCI reference) a Revision runs as fibers.
pub const SNAPSHOT_ARTIFACT: &str = "lampyr.dev/snapshot-artifact";
/// Revision status annotation (`status.annotations`): the image map entry that gave a
/// Revision without a snapshot-artifact annotation its artifact (image → artifact, entry).
pub const IMAGE_MAPPED: &str = "lampyr.dev/image-mapped";
/// Annotation naming the Revision's fiberd template sealed to the cluster's fleet key
/// (an OCI reference pinned by digest); copied to `Home.spec.sealedTemplate`.
pub const SEALED_TEMPLATE: &str = "lampyr.dev/sealed-template";
/// Annotation on a Revision template: the fingerprint of the fleet key its sealed template
/// is sealed to (`ly deploy` writes it, and reseals when the cluster's key changes).
pub const FLEET_KEY_FINGERPRINT: &str = "lampyr.dev/fleet-key";
/// Annotation on a Revision template: the CapacityGrant (in the Revision's namespace) its
/// Home is placed on, instead of the namespace's shared grant.
pub const CAPACITY_GRANT_ANNOTATION: &str = "lampyr.dev/capacity-grant";
/// The CapacityGrant lampyr-controller creates in a namespace on first use and places every
/// Revision of it on that names no grant of its own.
pub const SHARED_GRANT_NAME: &str = "lampyr-fibers";

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
/// The value of [`VISIBILITY_LABEL`] that keeps a Service or Route inside the cluster.
pub const VISIBILITY_CLUSTER_LOCAL: &str = "cluster-local";
/// Label on a KIngress: the namespace of the Route it belongs to.
pub const ROUTE_NAMESPACE_LABEL: &str = "serving.knative.dev/routeNamespace";
/// Label on a KIngress: the UID of the DomainMapping it belongs to.
pub const DOMAIN_MAPPING_UID_LABEL: &str = "serving.knative.dev/domainMappingUID";
/// Label on a KIngress: the namespace of the DomainMapping it belongs to.
pub const DOMAIN_MAPPING_NAMESPACE_LABEL: &str = "serving.knative.dev/domainMappingNamespace";
/// Annotation on a Route or Service: how long a new Revision takes to get all
/// its traffic (Go duration; immediate when unset).
pub const ROLLOUT_DURATION_ANNOTATION: &str = "serving.knative.dev/rollout-duration";
/// [`ROLLOUT_DURATION_ANNOTATION`] and its older camelCase name, in upstream's priority.
pub const ROLLOUT_DURATION_KEYS: &[&str] = &[ROLLOUT_DURATION_ANNOTATION, "serving.knative.dev/rolloutDuration"];
/// Annotation on a Revision template: its progress deadline (Go duration).
pub const PROGRESS_DEADLINE_ANNOTATION: &str = "serving.knative.dev/progress-deadline";

/// Label on grant Pods: the CapacityGrant they run.
pub const GRANT_LABEL: &str = "fiber.lampyr.dev/grant";

/// Annotation: the ingress class that implements an object's KIngresses.
pub const INGRESS_CLASS_ANNOTATION: &str = "networking.knative.dev/ingress.class";
/// [`INGRESS_CLASS_ANNOTATION`] and its alternative name, in upstream's priority.
pub const INGRESS_CLASS_KEYS: &[&str] = &[INGRESS_CLASS_ANNOTATION, "networking.knative.dev/ingress-class"];
/// Kourier's ingress class.
pub const KOURIER_INGRESS_CLASS: &str = "kourier.ingress.networking.knative.dev";
/// fiber-router's ingress class: KIngresses fiber-router implements itself.
pub const FIBER_INGRESS_CLASS: &str = "fiber.ingress.networking.knative.dev";
/// Annotation: the certificate class that implements an object's Certificates.
pub const CERTIFICATE_CLASS_ANNOTATION: &str = "networking.knative.dev/certificate.class";
/// [`CERTIFICATE_CLASS_ANNOTATION`] and its alternative name, in upstream's priority.
pub const CERTIFICATE_CLASS_KEYS: &[&str] = &[CERTIFICATE_CLASS_ANNOTATION, "networking.knative.dev/certificate-class"];
/// Label on a Certificate: what it is for (e.g. `system-internal`).
pub const CERTIFICATE_TYPE_LABEL: &str = "networking.knative.dev/certificate-type";
/// Label on a Certificate: the domain of a wildcard certificate.
pub const WILDCARD_CERT_DOMAIN_LABEL: &str = "networking.knative.dev/wildcardDomain";
/// Annotation on a Service, Route or DomainMapping: `Enabled` or `Redirected`
/// plain HTTP.
pub const HTTP_PROTOCOL_ANNOTATION: &str = "networking.knative.dev/http-protocol";
/// The HTTP-protocol annotation's names, in upstream's priority.
pub const HTTP_PROTOCOL_KEYS: &[&str] = &["networking.knative.dev/httpOption", HTTP_PROTOCOL_ANNOTATION];
/// Annotation `"true"`: no certificate for the object's external domains.
pub const DISABLE_EXTERNAL_DOMAIN_TLS_ANNOTATION: &str = "networking.knative.dev/disable-external-domain-tls";
/// The disable-external-domain-TLS annotation's names, in upstream's priority.
pub const DISABLE_EXTERNAL_DOMAIN_TLS_KEYS: &[&str] =
    &["networking.knative.dev/disableAutoTLS", "networking.knative.dev/disable-auto-tls", DISABLE_EXTERNAL_DOMAIN_TLS_ANNOTATION];
/// Label on a KIngress's children: the KIngress they belong to.
pub const INGRESS_LABEL: &str = "networking.internal.knative.dev/ingress";
/// Label on a Certificate's children: the UID of the Certificate.
pub const CERTIFICATE_UID_LABEL: &str = "networking.internal.knative.dev/certificate-uid";
/// Annotation on a KIngress: the state of a gradual rollout (JSON).
pub const ROLLOUT_ANNOTATION: &str = "networking.internal.knative.dev/rollout";

/// Namespace of the Secret holding the cluster's fleet key, whose private half opens sealed templates.
pub const FLEET_KEY_SECRET_NAMESPACE: &str = "default";
/// Name of the Secret holding the cluster's fleet key (written by `ly deploy`, read by fiberd).
pub const FLEET_KEY_SECRET_NAME: &str = "lampyr-fiberd-seal-key";
/// Data key of the fleet key Secret: the fleet's private key, `AGE-SECRET-KEY-1…`.
pub const FLEET_KEY_SECRET_KEY: &str = "key";

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
pub const TARGET_UTILIZATION_PERCENTAGE: &str = "autoscaling.knative.dev/target-utilization-percentage";
/// Requests the activator absorbs before replicas are added.
pub const TARGET_BURST_CAPACITY: &str = "autoscaling.knative.dev/target-burst-capacity";
/// Stable window (Go duration, 6s–1h).
pub const WINDOW: &str = "autoscaling.knative.dev/window";
/// Delay before a scale-down decision applies (Go duration, 0–1h).
pub const SCALE_DOWN_DELAY: &str = "autoscaling.knative.dev/scale-down-delay";
/// How long the last replica stays after a scale-to-zero decision.
pub const SCALE_TO_ZERO_POD_RETENTION_PERIOD: &str = "autoscaling.knative.dev/scale-to-zero-pod-retention-period";
/// Panic window as a percentage of the stable window.
pub const PANIC_WINDOW_PERCENTAGE: &str = "autoscaling.knative.dev/panic-window-percentage";
/// Panic threshold as a percentage of the target.
pub const PANIC_THRESHOLD_PERCENTAGE: &str = "autoscaling.knative.dev/panic-threshold-percentage";

/// Legacy camelCase aliases of autoscaling keys: `(canonical, alias)`.
pub const AUTOSCALING_ALIASES: &[(&str, &str)] = &[
    (MIN_SCALE, "autoscaling.knative.dev/minScale"),
    (MAX_SCALE, "autoscaling.knative.dev/maxScale"),
    (INITIAL_SCALE, "autoscaling.knative.dev/initialScale"),
    (TARGET_UTILIZATION_PERCENTAGE, "autoscaling.knative.dev/targetUtilizationPercentage"),
    (TARGET_BURST_CAPACITY, "autoscaling.knative.dev/targetBurstCapacity"),
    (SCALE_DOWN_DELAY, "autoscaling.knative.dev/scaleDownDelay"),
    (SCALE_TO_ZERO_POD_RETENTION_PERIOD, "autoscaling.knative.dev/scaleToZeroPodRetentionPeriod"),
    (PANIC_WINDOW_PERCENTAGE, "autoscaling.knative.dev/panicWindowPercentage"),
    (PANIC_THRESHOLD_PERCENTAGE, "autoscaling.knative.dev/panicThresholdPercentage"),
];

/// The camelCase alias of a canonical autoscaling key, if it has one.
pub fn autoscaling_alias(canonical: &str) -> Option<&'static str> {
    AUTOSCALING_ALIASES.iter().find(|(c, _)| *c == canonical).map(|(_, a)| *a)
}

/// The value of the first of `keys` present in `map`, with that key
/// (upstream `kmap.KeyPriority.Get`): `keys` is one of the `*_KEYS` lists.
pub fn lookup<'a>(map: &'a BTreeMap<String, String>, keys: &[&'static str]) -> Option<(&'static str, &'a str)> {
    keys.iter().find_map(|k| map.get(*k).map(|v| (*k, v.as_str())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_follows_upstream_priority() {
        let map = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
        };
        let both = map(&[("networking.knative.dev/ingress-class", "alt"), (INGRESS_CLASS_ANNOTATION, KOURIER_INGRESS_CLASS)]);
        assert_eq!(lookup(&both, INGRESS_CLASS_KEYS), Some((INGRESS_CLASS_ANNOTATION, KOURIER_INGRESS_CLASS)));
        let old = map(&[("serving.knative.dev/rolloutDuration", "60s")]);
        assert_eq!(lookup(&old, ROLLOUT_DURATION_KEYS), Some(("serving.knative.dev/rolloutDuration", "60s")));
        assert_eq!(lookup(&old, CERTIFICATE_CLASS_KEYS), None);
        let tls = map(&[(DISABLE_EXTERNAL_DOMAIN_TLS_ANNOTATION, "true"), ("networking.knative.dev/disable-auto-tls", "false")]);
        assert_eq!(lookup(&tls, DISABLE_EXTERNAL_DOMAIN_TLS_KEYS).map(|(_, v)| v), Some("false"));
    }
}
