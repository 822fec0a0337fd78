//! Lampyr's own resources, group `fiber.lampyr.dev`, version `v1alpha1`.
//!
//! - [`CapacityGrant`] reserves fiber capacity (slots, memory) on nodes; grant
//!   Pods running fiberd realise it and pull templates.
//! - [`Home`] binds one Revision to its snapshot artifact and a grant, carries
//!   the policy fiberd and fiber-router apply, and reports which fiberd
//!   instances hold how many warm fibers.
//!
//! - [`GrantPolicy`] (cluster-scoped) lists the image repositories grant Pods may run.
//!
//! Grants and Homes are namespaced and have a status subresource; all have printer columns, and
//! their CRDs are generated from these types: [`crds`] and [`crd_yaml`], printed
//! by the `crdgen` binary into `config/crd/lampyr.yaml`. Doc comments become the
//! CRD's field descriptions.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Toleration;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResource;
use kube::core::CustomResourceExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::conditions::{Condition, ConditionSet};
use crate::policy::FiberPolicy;

/// The API group of Lampyr's resources.
pub const FIBER_GROUP: &str = "fiber.lampyr.dev";
/// The version of Lampyr's resources.
pub const FIBER_VERSION: &str = "v1alpha1";
/// `apiVersion` of Lampyr's resources.
pub const FIBER_API_VERSION: &str = "fiber.lampyr.dev/v1alpha1";

/// A fully qualified image or artifact reference pinned by digest: a registry
/// that is `localhost` or has a dot or a port, a path, and `@sha256:` with 64
/// lowercase hex digits; no tag.
pub const DIGEST_REFERENCE_PATTERN: &str = r"^(localhost|[^/@:\s]*[.:][^/@\s]*)(/[a-z0-9]+([._-]+[a-z0-9]+)*)+@sha256:[0-9a-f]{64}$";

fn is_zero_i64(n: &i64) -> bool {
    *n == 0
}

fn is_zero_i32(n: &i32) -> bool {
    *n == 0
}

fn default_instances() -> i32 {
    1
}

/// Fiber capacity reserved on nodes: grant Pods running fiberd realise it.
// The `printcolumn(...)` entries repeat keys such as `type_`, which the lint mistakes for duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "fiber.lampyr.dev",
    version = "v1alpha1",
    kind = "CapacityGrant",
    namespaced,
    status = "CapacityGrantStatus",
    shortname = "cgrant",
    category = "lampyr",
    derive = "PartialEq",
    doc = "CapacityGrant reserves fiber capacity (fiber slots and guest memory) on nodes. Grant Pods running fiberd realise it and pull the templates of the Homes placed on it.",
    printcolumn(name = "Slots", type_ = "integer", json_path = ".spec.fiberSlots", description = "Fiber slots reserved"),
    printcolumn(
        name = "Allocated",
        type_ = "integer",
        json_path = ".status.allocatedSlots",
        description = "Fiber slots allocated to Homes"
    ),
    printcolumn(name = "Homes", type_ = "integer", json_path = ".status.homes", description = "Homes placed on this grant"),
    printcolumn(name = "Instances", type_ = "integer", json_path = ".spec.instances", description = "Grant Pods requested"),
    printcolumn(name = "Ready Instances", type_ = "integer", json_path = ".status.readyInstances", description = "Grant Pods ready"),
    printcolumn(name = "Ready", type_ = "string", json_path = r#".status.conditions[?(@.type=="Ready")].status"#),
    printcolumn(name = "Reason", type_ = "string", json_path = r#".status.conditions[?(@.type=="Ready")].reason"#),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct CapacityGrantSpec {
    /// Fiber slots reserved: the most fibers that may run at once under this grant, across all its instances.
    #[schemars(range(min = 1))]
    pub fiber_slots: i32,
    /// Guest memory reserved for those fibers, in bytes, across all instances.
    #[schemars(range(min = 1))]
    pub memory_bytes: i64,
    /// Grant Pods (fiberd instances) over which the slots and memory are spread evenly.
    #[serde(default = "default_instances")]
    #[schemars(range(min = 1))]
    pub instances: i32,
    /// Where grant Pods may run; anywhere schedulable when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<Placement>,
    /// Image of the grant Pods' fiberd container, fully qualified and pinned by sha256 digest (registry/repo@sha256:...).
    #[schemars(regex(pattern = DIGEST_REFERENCE_PATTERN))]
    pub grant_image: String,
    /// Image of the helper container grant Pods run beside fiberd, fully qualified and pinned by sha256 digest.
    #[schemars(regex(pattern = DIGEST_REFERENCE_PATTERN))]
    pub helper_image: String,
}

impl CapacityGrantSpec {
    /// One instance's share of the fiber slots and guest memory: the totals spread evenly
    /// over the instances (rounded down, at least 1 each).
    pub fn instance_share(&self) -> (i32, i64) {
        let instances = self.instances.max(1);
        ((self.fiber_slots / instances).max(1), (self.memory_bytes / i64::from(instances)).max(1))
    }
}

/// Where a grant's Pods may be scheduled.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    /// Node labels a node must carry to run grant Pods (e.g. nodes with /dev/kvm).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Taints grant Pods tolerate (e.g. dedicated fiber nodes).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
}

/// What the grant controller observed: conditions, ready instances and allocated slots.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacityGrantStatus {
    /// The metadata.generation this status reflects.
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    pub observed_generation: i64,
    /// Knative-style conditions: Ready summarises InstancesReady.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Grant Pods running fiberd and accepting fibers.
    #[serde(default)]
    pub ready_instances: i32,
    /// Fiber slots allocated to Homes placed on this grant: for each Home, the larger of the
    /// slots it reserves (its `min-scale`) and the fibers it has warm.
    #[serde(default)]
    pub allocated_slots: i32,
    /// Guest memory those slots hold, in bytes.
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    pub allocated_memory_bytes: i64,
    /// Homes placed on this grant.
    #[serde(default)]
    pub homes: i32,
}

crate::impl_knative_status!(CapacityGrantStatus, capacity_grant::CONDITION_SET);

/// CapacityGrant conditions.
pub mod capacity_grant {
    use super::ConditionSet;

    /// Every requested grant Pod runs fiberd and accepts fibers.
    pub const INSTANCES_READY: &str = "InstancesReady";
    /// `Ready` = `InstancesReady`.
    pub const CONDITION_SET: ConditionSet = ConditionSet::living(&[INSTANCES_READY]);
}

/// One Revision's home: its snapshot artifact, its grant, and its fiber policy.
// The `printcolumn(...)` entries repeat keys such as `type_`, which the lint mistakes for duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "fiber.lampyr.dev",
    version = "v1alpha1",
    kind = "Home",
    namespaced,
    status = "HomeStatus",
    category = "lampyr",
    derive = "PartialEq",
    doc = "Home binds one Knative Revision to its snapshot artifact and a CapacityGrant, carries the fiber policy fiberd and fiber-router apply, and reports which fiberd instances hold how many warm fibers.",
    selectable = ".spec.grantName",
    printcolumn(name = "Revision", type_ = "string", json_path = ".spec.revisionName"),
    printcolumn(name = "Grant", type_ = "string", json_path = ".spec.grantName"),
    printcolumn(name = "Min", type_ = "integer", json_path = ".spec.policy.scaling.minScale", priority = 1),
    printcolumn(name = "Max", type_ = "integer", json_path = ".spec.policy.scaling.maxScale", priority = 1),
    printcolumn(name = "Warm", type_ = "integer", json_path = ".status.warmFibers", description = "Warm fibers across all instances"),
    printcolumn(name = "Ready", type_ = "string", json_path = r#".status.conditions[?(@.type=="Ready")].status"#),
    printcolumn(name = "Reason", type_ = "string", json_path = r#".status.conditions[?(@.type=="Ready")].reason"#),
    printcolumn(name = "Artifact", type_ = "string", json_path = ".spec.artifact", priority = 1),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(self.policy) || !has(self.policy.scaling) || self.policy.scaling.maxScale == 0 || self.policy.scaling.minScale <= self.policy.scaling.maxScale",
    "message": "policy.scaling.minScale must not exceed maxScale unless maxScale is 0 (unbounded)"
}]))]
pub struct HomeSpec {
    /// The Knative Revision, in this Home's namespace, whose fibers this Home holds.
    #[schemars(length(min = 1))]
    pub revision_name: String,
    /// The Revision's snapshot artifact (its lampyr.dev/snapshot-artifact annotation), fully qualified and pinned by sha256 digest.
    #[schemars(regex(pattern = DIGEST_REFERENCE_PATTERN))]
    pub artifact: String,
    /// The artifact's fiberd template sealed to the cluster's fleet key (lampyr.dev/sealed-template), pinned by digest; fiberd prefers it when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = DIGEST_REFERENCE_PATTERN))]
    pub sealed_template: Option<String>,
    /// The CapacityGrant, in this Home's namespace, whose instances run the fibers: where lampyr-controller placed it.
    #[schemars(length(min = 1))]
    pub grant_name: String,
    /// Guest memory one fiber of this Home takes from its grant, in bytes (the snapshot's memory, or the container's memory request or limit when larger); 0 when unknown (fiberd then uses the snapshot's).
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    #[schemars(range(min = 0))]
    pub fiber_memory_bytes: i64,
    /// The fiber policy translated from the Revision (scaling, timeouts, memory, env), which fiberd and fiber-router apply.
    #[serde(default)]
    pub policy: FiberPolicy,
    /// Pull Secrets in this Home's namespace (the Revision's imagePullSecrets) fiberd pulls spec.artifact with, before those of its ServiceAccount.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_pull_secrets: Vec<String>,
    /// The Revision's serviceAccountName, whose imagePullSecrets fiberd pulls spec.artifact with too; `default` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
}

/// What fiberd instances report for this Home: conditions and warm fibers per instance.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HomeStatus {
    /// The metadata.generation this status reflects.
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    pub observed_generation: i64,
    /// Knative-style conditions: Ready summarises GrantReady and TemplateLoaded; Active is informational.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// The fiberd instances holding this Home's fibers; each instance owns its own entry (server-side apply, keyed by name).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub instances: Vec<HomeInstance>,
    /// Warm fibers across all instances.
    #[serde(default)]
    pub warm_fibers: i32,
}

/// One fiberd instance holding a Home's fibers.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HomeInstance {
    /// The fiberd instance (its grant Pod's name).
    pub name: String,
    /// Where fiber-router reaches it: host:port.
    pub address: String,
    /// Fibers of this Home warm on that instance.
    #[serde(default)]
    pub warm_fibers: i32,
    /// The Home generation whose spec the instance has loaded.
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    pub observed_generation: i64,
    /// The instance has pulled, verified and restored the template and serves it.
    #[serde(default)]
    pub loaded: bool,
    /// Why the template is not loaded (pull, verification or unseal failure), when it is not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Fiber slots this instance keeps for the Home whether or not its fibers are warm (its share of `min-scale`).
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub reserved_slots: i32,
    /// Guest memory the Home's fibers hold on this instance, in bytes.
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    pub memory_bytes: i64,
    /// Most fibers of the Home this instance runs at once (its share of `max-scale`, else its own bound); fiber-router spreads requests by it.
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub max_fibers: i32,
}

crate::impl_knative_status!(HomeStatus, home::CONDITION_SET);

/// Home conditions.
pub mod home {
    use super::ConditionSet;

    /// The named CapacityGrant exists and is Ready.
    pub const GRANT_READY: &str = "GrantReady";
    /// The grant's instances have pulled, verified and restored the template.
    pub const TEMPLATE_LOADED: &str = "TemplateLoaded";
    /// Fibers are warm; informational (a Home scaled to zero is still Ready).
    pub const ACTIVE: &str = "Active";
    /// `Ready` = `GrantReady` ∧ `TemplateLoaded`.
    pub const CONDITION_SET: ConditionSet = ConditionSet::living(&[GRANT_READY, TEMPLATE_LOADED]);
}

/// Which image repositories grant Pods may run: the grant controller refuses
/// (and reports on the grant) any grant or helper image outside every policy.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "fiber.lampyr.dev",
    version = "v1alpha1",
    kind = "GrantPolicy",
    category = "lampyr",
    derive = "PartialEq",
    doc = "GrantPolicy lists the image repositories CapacityGrant Pods may run, and the repositories they may pull fiberd templates from. A grant image or helper image whose repository no GrantPolicy allows is refused; with no GrantPolicy at all, every image is refused.",
    printcolumn(name = "Repositories", type_ = "string", json_path = ".spec.allowedRepositories"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct GrantPolicySpec {
    /// Repositories allowed, fully qualified without tag or digest (registry.example.com/team/fiberd); an image matches when its repository is exactly one of them.
    #[schemars(length(min = 1))]
    pub allowed_repositories: Vec<String>,
    /// Repositories grant Pods may pull sealed fiberd templates from (registry/path, http:// in front for a plain-HTTP registry); a template is admitted when one of them is its repository or above it. When no GrantPolicy lists any, templates are not restricted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub zygote_registries: Vec<String>,
    /// PEM certificate authorities grant Pods trust for registries besides the system's (a registry signed by its own CA); fiberd gets them in LAMPYR_REGISTRY_CA_PEM.
    #[serde(default, rename = "registryCA", skip_serializing_if = "Option::is_none")]
    pub registry_ca: Option<String>,
}

/// The CRDs of Lampyr's resources: CapacityGrant, Home, then GrantPolicy.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![CapacityGrant::crd(), Home::crd(), GrantPolicy::crd()]
}

/// [`crds`] as multi-document YAML, each document starting with `---`: the
/// content of `config/crd/lampyr.yaml`.
pub fn crd_yaml() -> Result<String, serde_yaml::Error> {
    let mut out = String::new();
    for crd in crds() {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(&crd)?);
    }
    Ok(out)
}

/// The repository of an image reference, as a GrantPolicy's `allowedRepositories` lists
/// it: the reference without `@digest` and without a `:tag` on its last path segment.
pub fn repository_of(image: &str) -> &str {
    let without_digest = image.split_once('@').map_or(image, |(repo, _)| repo);
    let last_slash = without_digest.rfind('/').map_or(0, |i| i + 1);
    match without_digest[last_slash..].find(':') {
        Some(colon) => &without_digest[..last_slash + colon],
        None => without_digest,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::conditions::KnativeStatus;

    const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn digest_pattern_accepts_pinned_fully_qualified_references_only() {
        let re = regex::Regex::new(DIGEST_REFERENCE_PATTERN).expect("pattern compiles");
        for ok in [
            format!("ghcr.io/team/fiberd@{DIGEST}"),
            format!("localhost/fiberd@{DIGEST}"),
            format!("localhost:5000/lampyr/fiberd-templates@{DIGEST}"),
            format!("registry.local:5000/a/b/c@{DIGEST}"),
        ] {
            assert!(re.is_match(&ok), "{ok}");
        }
        for bad in [
            format!("fiberd@{DIGEST}"),
            format!("team/fiberd@{DIGEST}"),
            "ghcr.io/team/fiberd:latest".to_owned(),
            format!("ghcr.io/team/fiberd:v1@{DIGEST}"),
            "ghcr.io/team/fiberd@sha256:0123".to_owned(),
            format!("ghcr.io/team/Fiberd@{DIGEST}"),
            format!("https://ghcr.io/team/fiberd@{DIGEST}"),
        ] {
            assert!(!re.is_match(&bad), "{bad}");
        }
        let crd = serde_json::to_value(CapacityGrant::crd()).expect("crd");
        let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
        assert_eq!(spec["grantImage"]["pattern"], DIGEST_REFERENCE_PATTERN);
        assert_eq!(spec["helperImage"]["pattern"], DIGEST_REFERENCE_PATTERN);
    }

    #[test]
    fn crds_have_group_version_scope_and_status_subresource() {
        for crd in crds() {
            assert_eq!(crd.spec.group, FIBER_GROUP);
            // GrantPolicy is cluster-wide configuration without status.
            let has_status = crd.spec.names.kind != "GrantPolicy";
            let scope = if has_status { "Namespaced" } else { "Cluster" };
            assert_eq!(crd.spec.scope, scope);
            assert_eq!(crd.spec.versions.len(), 1);
            let v = &crd.spec.versions[0];
            assert_eq!(v.name, FIBER_VERSION);
            assert!(v.served && v.storage);
            let status = v.subresources.as_ref().and_then(|s| s.status.as_ref());
            assert_eq!(status.is_some(), has_status, "{}", crd.spec.names.kind);
            let columns: Vec<&str> = v.additional_printer_columns.iter().flatten().map(|c| c.name.as_str()).collect();
            assert!((columns.contains(&"Ready") || !has_status) && columns.contains(&"Age"), "{columns:?}");
        }
        let names: Vec<String> = crds().into_iter().map(|c| c.metadata.name.unwrap_or_default()).collect();
        assert_eq!(names, ["capacitygrants.fiber.lampyr.dev", "homes.fiber.lampyr.dev", "grantpolicies.fiber.lampyr.dev"]);
    }

    #[test]
    fn home_round_trips_and_defaults() {
        let value = json!({
            "apiVersion": FIBER_API_VERSION,
            "kind": "Home",
            "metadata": {"name": "hello-00001", "namespace": "default", "generation": 2},
            "spec": {
                "revisionName": "hello-00001",
                "artifact": format!("registry.local:5000/lampyr/hello@{DIGEST}"),
                "grantName": "default"
            },
            "status": {
                "observedGeneration": 2,
                "conditions": [
                    {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
                ],
                "instances": [{"name": "grant-0", "address": "10.0.0.7:9090", "warmFibers": 3}],
                "warmFibers": 3
            }
        });
        let home: Home = serde_json::from_value(value).expect("parse");
        assert_eq!(home.spec.policy, FiberPolicy::default());
        let status = home.status.as_ref().expect("status");
        assert!(status.is_ready(home.metadata.generation));
        let back = serde_json::to_value(&home).expect("serialize");
        assert_eq!(back["spec"]["policy"]["timeouts"]["request"], "300s");
        assert_eq!(back["status"]["instances"][0]["warmFibers"], 3);
        assert_eq!(back["apiVersion"], FIBER_API_VERSION);
    }

    #[test]
    fn capacity_grant_round_trips() {
        let value = json!({
            "apiVersion": FIBER_API_VERSION,
            "kind": "CapacityGrant",
            "metadata": {"name": "default", "namespace": "default"},
            "spec": {
                "fiberSlots": 256,
                "memoryBytes": 1_073_741_824_i64,
                "instances": 2,
                "placement": {
                    "nodeSelector": {"lampyr.dev/kvm": "true"},
                    "tolerations": [{"key": "lampyr.dev/fibers", "operator": "Exists", "effect": "NoSchedule"}]
                },
                "grantImage": format!("ghcr.io/team/fiberd@{DIGEST}"),
                "helperImage": format!("ghcr.io/team/fiberd-helper@{DIGEST}")
            }
        });
        let grant: CapacityGrant = serde_json::from_value(value.clone()).expect("parse");
        assert_eq!(grant.spec.instances, 2);
        assert_eq!(serde_json::to_value(&grant).expect("serialize"), value);
    }

    #[test]
    fn condition_sets() {
        assert_eq!(capacity_grant::CONDITION_SET.dependents().collect::<Vec<_>>(), ["InstancesReady"]);
        assert_eq!(home::CONDITION_SET.dependents().collect::<Vec<_>>(), ["GrantReady", "TemplateLoaded"]);
        assert!(!home::CONDITION_SET.is_terminal(home::ACTIVE));
    }

    #[test]
    fn yaml_is_multi_document() {
        let yaml = crd_yaml().expect("yaml");
        assert!(yaml.starts_with("---\n"));
        assert_eq!(yaml.matches("\n---\n").count() + 1, 3);
        assert!(yaml.contains("kind: CustomResourceDefinition"));
    }
}
