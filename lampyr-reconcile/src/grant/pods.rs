//! The grant Pods a CapacityGrant asks for: `<grant>-<i>` for each instance,
//! running fiberd from the grant image after the helper image's `fiberd-helper`
//! (an init container that checks the node can run fibers), with `/dev/kvm`, the
//! fleet key and an emptyDir artifact cache.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use kube::Resource;
use lampyr_api::CapacityGrant;
use serde_json::json;
use sha2::{Digest, Sha256};

pub use lampyr_api::keys::GRANT_LABEL;
/// Label on grant Pods: their instance index.
pub const INSTANCE_LABEL: &str = "fiber.lampyr.dev/instance";
/// Annotation on grant Pods: a hash of the spec they were created from.
pub const SPEC_HASH_ANNOTATION: &str = "fiber.lampyr.dev/spec-hash";
/// Where fiberd finds the fleet key in a grant Pod.
pub const FLEET_KEY_MOUNT: &str = "/var/run/lampyr/fleet-key";
/// Where fiberd keeps its artifact cache in a grant Pod (an emptyDir volume).
pub const CACHE_MOUNT: &str = "/var/cache/lampyr";
/// The container running fiberd.
pub const FIBERD_CONTAINER: &str = "fiberd";
/// The init container running `fiberd-helper` from the helper image.
pub const HELPER_CONTAINER: &str = "helper";
/// Where `fiberd-helper` writes why a check failed (Kubernetes' default path, set explicitly).
pub const TERMINATION_LOG: &str = "/dev/termination-log";
/// The least the artifact cache may hold: guest ELFs and small grants' templates.
pub const MIN_CACHE_BYTES: i64 = 1 << 30;

/// How grant Pods get `/dev/kvm`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KvmAccess {
    /// Mount the node's `/dev/kvm` (a hostPath char device) into a privileged container.
    HostPath,
    /// Request one unit of a device plugin's resource (e.g. `devices.kubevirt.io/kvm`).
    DevicePlugin(String),
}

/// What every grant Pod shares, from the grant controller's flags.
#[derive(Clone, Debug)]
pub struct PodSettings {
    /// Service account the Pods run as.
    pub service_account: String,
    /// Port fiberd serves forwarded requests on.
    pub fiberd_port: u16,
    /// Node selector used when the grant's placement names none.
    pub default_node_selector: BTreeMap<String, String>,
    /// How the Pods get `/dev/kvm`.
    pub kvm: KvmAccess,
    /// The Secret, in the grant's namespace, holding the fleet key (mounted optionally).
    pub fleet_key_secret: String,
    /// Repositories fiberd may pull templates from (`--template-repository`), from the
    /// GrantPolicies at reconcile time; empty: unrestricted.
    pub template_repositories: Vec<String>,
    /// Certificate authorities (PEM) fiberd trusts for registries besides the system's, from
    /// the GrantPolicies at reconcile time (in `LAMPYR_REGISTRY_CA_PEM`).
    pub registry_ca: Option<String>,
}

impl Default for PodSettings {
    fn default() -> Self {
        PodSettings {
            service_account: "lampyr-fiberd".into(),
            fiberd_port: 8012,
            default_node_selector: BTreeMap::from([("lampyr.dev/kvm".into(), "true".into())]),
            kvm: KvmAccess::HostPath,
            fleet_key_secret: lampyr_api::keys::FLEET_KEY_SECRET_NAME.into(),
            template_repositories: Vec::new(),
            registry_ca: None,
        }
    }
}

/// The Pods `grant` asks for, in instance order, each with its spec hash annotated.
pub fn desired_pods(grant: &CapacityGrant, settings: &PodSettings) -> Vec<Pod> {
    (0..grant.spec.instances.max(0)).map(|i| grant_pod(grant, i, settings)).collect()
}

/// fiberd's command line in a grant Pod.
fn fiberd_args(grant: &CapacityGrant, index: i32, port: u16, settings: &PodSettings) -> Vec<String> {
    let name = grant.metadata.name.clone().unwrap_or_default();
    let namespace = grant.metadata.namespace.clone().unwrap_or_default();
    let (slots, memory) = grant.spec.instance_share();
    let mut args = vec![
        "--name=$(POD_NAME)".to_string(),
        format!("--grant={name}"),
        format!("--namespace={namespace}"),
        format!("--listen=0.0.0.0:{port}"),
        format!("--advertise=$(POD_IP):{port}"),
        format!("--fleet-key-file={FLEET_KEY_MOUNT}/key"),
        format!("--cache-dir={CACHE_MOUNT}"),
        format!("--cache-max-bytes={}", cache_max_bytes(memory)),
        format!("--fiber-slots={slots}"),
        format!("--fiber-memory={memory}"),
        // The instance count is not an argument: fiberd follows the grant's, so adding or
        // removing instances leaves the others' Pods as they are.
        format!("--instance-index={index}"),
    ];
    args.extend(settings.template_repositories.iter().map(|r| format!("--template-repository={r}")));
    args
}

/// `fiberd-helper`'s command line in a grant Pod: the device, how the Pod gets it, and
/// the volumes fiberd will use.
fn helper_args(settings: &PodSettings) -> Vec<String> {
    let mut args = vec!["--kvm-device=/dev/kvm".to_string()];
    if let KvmAccess::DevicePlugin(resource) = &settings.kvm {
        args.push(format!("--kvm-device-plugin={resource}"));
    }
    args.push(format!("--cache-dir={CACHE_MOUNT}"));
    args.push(format!("--fleet-key-file={FLEET_KEY_MOUNT}/key"));
    args.push(format!("--termination-log={TERMINATION_LOG}"));
    args
}

/// The artifact cache's `sizeLimit` for a grant instance holding `memory_bytes` for fibers.
///
/// Twice the instance's fiber memory (the cache holds each snapshot twice: the sealed
/// template as pulled and the artifact opened from it), at least [`MIN_CACHE_BYTES`] for
/// guest ELFs and small grants. Per instance, not per grant, so adding or removing
/// instances leaves the others' Pods as they are.
pub fn cache_size_limit(memory_bytes: i64) -> i64 {
    memory_bytes.saturating_mul(2).max(MIN_CACHE_BYTES)
}

/// The limit fiberd prunes its cache to: four fifths of the volume's `sizeLimit`, so a
/// pull on top of a full cache does not get the Pod evicted for exceeding it.
pub fn cache_max_bytes(memory_bytes: i64) -> i64 {
    cache_size_limit(memory_bytes) / 5 * 4
}

/// The name of instance `index` of grant `grant`.
pub fn pod_name(grant: &str, index: i32) -> String {
    format!("{grant}-{index}")
}

fn grant_pod(grant: &CapacityGrant, index: i32, settings: &PodSettings) -> Pod {
    let name = grant.metadata.name.clone().unwrap_or_default();
    let namespace = grant.metadata.namespace.clone().unwrap_or_default();
    let placement = grant.spec.placement.clone().unwrap_or_default();
    let node_selector = if placement.node_selector.is_empty() { settings.default_node_selector.clone() } else { placement.node_selector };
    let port = settings.fiberd_port;
    let (_, per_instance_memory) = grant.spec.instance_share();
    let kvm = KvmMount::for_access(&settings.kvm);
    let mut fiberd_limits = kvm.limits.clone();
    fiberd_limits["memory"] = json!(per_instance_memory.to_string());
    let mut volumes = kvm.volumes.clone();
    volumes.push(json!({ "name": "fleet-key", "secret": { "secretName": settings.fleet_key_secret, "optional": true } }));
    volumes.push(json!({ "name": "cache", "emptyDir": { "sizeLimit": cache_size_limit(per_instance_memory).to_string() } }));
    let mut mounts = kvm.mounts.clone();
    mounts.push(json!({ "name": "fleet-key", "mountPath": FLEET_KEY_MOUNT, "readOnly": true }));
    mounts.push(json!({ "name": "cache", "mountPath": CACHE_MOUNT }));
    let mut env = vec![
        json!({ "name": "POD_NAME", "valueFrom": { "fieldRef": { "fieldPath": "metadata.name" } } }),
        json!({ "name": "POD_IP", "valueFrom": { "fieldRef": { "fieldPath": "status.podIP" } } }),
    ];
    if let Some(pem) = &settings.registry_ca {
        env.push(json!({ "name": lampyr_artifact::credentials::CA_PEM_ENV, "value": pem }));
    }
    let labels = json!({
        GRANT_LABEL: name, INSTANCE_LABEL: index.to_string(),
        "app.kubernetes.io/name": "fiberd", "app.kubernetes.io/part-of": "lampyr",
    });
    let spec = json!({
        "serviceAccountName": settings.service_account,
        "nodeSelector": node_selector,
        "tolerations": placement.tolerations,
        "affinity": { "podAntiAffinity": { "preferredDuringSchedulingIgnoredDuringExecution": [{
            "weight": 100,
            "podAffinityTerm": { "topologyKey": "kubernetes.io/hostname",
                                 "labelSelector": { "matchLabels": { GRANT_LABEL: name } } },
        }] } },
        // Runs to completion before fiberd starts; a failure keeps the Pod from starting,
        // and its one-line reason is the container's termination message.
        "initContainers": [{
            "name": HELPER_CONTAINER,
            "image": grant.spec.helper_image,
            "args": helper_args(settings),
            "resources": { "limits": kvm.limits },
            "securityContext": { "privileged": kvm.privileged },
            "terminationMessagePath": TERMINATION_LOG,
            "terminationMessagePolicy": "FallbackToLogsOnError",
            "volumeMounts": mounts.clone(),
        }],
        "containers": [{
            "name": FIBERD_CONTAINER,
            "image": grant.spec.grant_image,
            "args": fiberd_args(grant, index, port, settings),
            "env": env,
            "ports": [{ "name": "fiberd", "containerPort": port }],
            // Probed every second: a grant Pod's readiness gates its Revisions' first fibers.
            "readinessProbe": { "httpGet": { "path": "/healthz", "port": port }, "periodSeconds": 1 },
            "resources": { "limits": fiberd_limits },
            "securityContext": { "privileged": kvm.privileged },
            "volumeMounts": mounts,
        }],
        "volumes": volumes,
    });
    let hash = spec_hash(&spec);
    let owner = grant.controller_owner_ref(&()).map(|o| vec![o]).unwrap_or_default();
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": pod_name(&name, index), "namespace": namespace, "labels": labels,
            "annotations": { SPEC_HASH_ANNOTATION: hash }, "ownerReferences": owner,
        },
        "spec": spec,
    }))
    .expect("a grant Pod built from typed parts is a valid Pod")
}

/// What a container that opens `/dev/kvm` needs, by how the Pod gets it.
struct KvmMount {
    volumes: Vec<serde_json::Value>,
    mounts: Vec<serde_json::Value>,
    limits: serde_json::Value,
    privileged: bool,
}

impl KvmMount {
    fn for_access(access: &KvmAccess) -> Self {
        match access {
            KvmAccess::HostPath => KvmMount {
                volumes: vec![json!({ "name": "kvm", "hostPath": { "path": "/dev/kvm", "type": "CharDevice" } })],
                mounts: vec![json!({ "name": "kvm", "mountPath": "/dev/kvm" })],
                limits: json!({}),
                privileged: true,
            },
            KvmAccess::DevicePlugin(resource) => {
                KvmMount { volumes: Vec::new(), mounts: Vec::new(), limits: json!({ resource.as_str(): "1" }), privileged: false }
            }
        }
    }
}

/// A short, stable hash of a Pod spec, to tell when a Pod must be replaced.
fn spec_hash(spec: &serde_json::Value) -> String {
    let digest = Sha256::digest(spec.to_string().as_bytes());
    hex::encode(&digest[..8])
}

/// The spec hash a Pod was created with.
pub fn pod_spec_hash(pod: &Pod) -> Option<&str> {
    pod.metadata.annotations.as_ref()?.get(SPEC_HASH_ANNOTATION).map(String::as_str)
}

#[cfg(test)]
mod tests {
    use lampyr_api::{CapacityGrantSpec, fiber::Placement};

    use super::*;

    const IMAGE: &str = "ghcr.io/team/fiberd@sha256:1111111111111111111111111111111111111111111111111111111111111111";
    const HELPER: &str = "ghcr.io/team/helper@sha256:2222222222222222222222222222222222222222222222222222222222222222";

    fn grant(instances: i32, placement: Option<Placement>) -> CapacityGrant {
        let mut grant = CapacityGrant::new(
            "hello-00001",
            CapacityGrantSpec {
                fiber_slots: 16,
                memory_bytes: 1 << 30,
                instances,
                placement,
                grant_image: IMAGE.into(),
                helper_image: HELPER.into(),
            },
        );
        grant.metadata.namespace = Some("apps".into());
        grant.metadata.uid = Some("uid-1".into());
        grant
    }

    fn mount_names(container: &k8s_openapi::api::core::v1::Container) -> Vec<(String, String)> {
        container.volume_mounts.iter().flatten().map(|m| (m.name.clone(), m.mount_path.clone())).collect()
    }

    #[test]
    fn one_pod_per_instance_owned_by_the_grant_running_both_images() {
        let pods = desired_pods(&grant(2, None), &PodSettings::default());
        let names: Vec<_> = pods.iter().map(|p| p.metadata.name.clone().unwrap_or_default()).collect();
        assert_eq!(names, ["hello-00001-0", "hello-00001-1"]);
        let pod = &pods[1];
        let owner = &pod.metadata.owner_references.as_ref().expect("owner")[0];
        assert_eq!((owner.kind.as_str(), owner.uid.as_str(), owner.controller), ("CapacityGrant", "uid-1", Some(true)));
        let labels = pod.metadata.labels.as_ref().expect("labels");
        assert_eq!(labels[GRANT_LABEL], "hello-00001");
        assert_eq!(labels[INSTANCE_LABEL], "1");
        let spec = pod.spec.as_ref().expect("spec");
        let images: Vec<_> = spec.containers.iter().map(|c| c.image.clone().unwrap_or_default()).collect();
        assert_eq!(images, [IMAGE], "fiberd is the one container");
        let init: Vec<_> = spec.init_containers.iter().flatten().map(|c| (c.name.as_str(), c.image.clone().unwrap_or_default())).collect();
        assert_eq!(init, [(HELPER_CONTAINER, HELPER.to_string())], "the helper runs first, as an init container");
        let args = spec.containers[0].args.clone().unwrap_or_default();
        assert!(args.contains(&"--grant=hello-00001".to_string()) && args.contains(&"--namespace=apps".to_string()));
        let share: Vec<&str> =
            args.iter().filter(|a| a.starts_with("--fiber-") || a.starts_with("--instance")).map(String::as_str).collect();
        assert_eq!(
            share,
            ["--fiber-slots=8", "--fiber-memory=536870912", "--instance-index=1"],
            "each instance holds its share of 16 slots and 1 GiB, and knows which it is"
        );
        assert!(!args.iter().any(|a| a.starts_with("--template-repository=")), "no policy lists any: unrestricted");
        let memory = &spec.containers[0].resources.as_ref().and_then(|r| r.limits.as_ref()).expect("limits")["memory"];
        assert_eq!(memory.0, (1i64 << 29).to_string(), "memory is spread over the instances");
        assert_eq!(spec.node_selector.as_ref().expect("selector")["lampyr.dev/kvm"], "true");
    }

    #[test]
    fn the_policies_registry_cas_reach_fiberd_in_its_environment() {
        let ca = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n".to_string();
        let settings = PodSettings { registry_ca: Some(ca.clone()), ..Default::default() };
        let pod = &desired_pods(&grant(1, None), &settings)[0];
        let env = pod.spec.as_ref().expect("spec").containers[0].env.clone().unwrap_or_default();
        let given = env.iter().find(|e| e.name == lampyr_artifact::credentials::CA_PEM_ENV).and_then(|e| e.value.clone());
        assert_eq!(given, Some(ca));
        let without = &desired_pods(&grant(1, None), &PodSettings::default())[0];
        let names: Vec<String> = without.spec.as_ref().expect("spec").containers[0].env.iter().flatten().map(|e| e.name.clone()).collect();
        assert_eq!(names, ["POD_NAME", "POD_IP"], "no CA configured: none given");
        assert_ne!(pod_spec_hash(pod), pod_spec_hash(without), "a CA change replaces the Pods");
    }

    #[test]
    fn fiberd_may_pull_templates_only_from_the_policies_repositories() {
        let repositories = vec!["http://registry.local:5000/lampyr/fiberd-templates".to_string(), "r.example.com/t".to_string()];
        let settings = PodSettings { template_repositories: repositories, ..Default::default() };
        let pod = &desired_pods(&grant(1, None), &settings)[0];
        let args = pod.spec.as_ref().expect("spec").containers[0].args.clone().unwrap_or_default();
        let given: Vec<&str> = args.iter().filter_map(|a| a.strip_prefix("--template-repository=")).collect();
        assert_eq!(given, ["http://registry.local:5000/lampyr/fiberd-templates", "r.example.com/t"]);
        let unrestricted = &desired_pods(&grant(1, None), &PodSettings::default())[0];
        assert_ne!(pod_spec_hash(pod), pod_spec_hash(unrestricted), "a policy change replaces the Pods");
    }

    #[test]
    fn the_helper_checks_the_node_with_what_fiberd_gets() {
        let pod = &desired_pods(&grant(1, None), &PodSettings::default())[0];
        let spec = pod.spec.as_ref().expect("spec");
        let helper = &spec.init_containers.as_ref().expect("init containers")[0];
        let fiberd = &spec.containers[0];
        assert_eq!(
            helper.args.clone().unwrap_or_default(),
            [
                "--kvm-device=/dev/kvm",
                "--cache-dir=/var/cache/lampyr",
                "--fleet-key-file=/var/run/lampyr/fleet-key/key",
                "--termination-log=/dev/termination-log"
            ]
        );
        assert_eq!(helper.termination_message_path.as_deref(), Some(TERMINATION_LOG));
        assert_eq!(helper.termination_message_policy.as_deref(), Some("FallbackToLogsOnError"));
        let privileged = |c: &k8s_openapi::api::core::v1::Container| c.security_context.as_ref().and_then(|s| s.privileged);
        assert_eq!((privileged(helper), privileged(fiberd)), (Some(true), Some(true)), "both open the host's /dev/kvm");
        let mounts = mount_names(helper);
        assert_eq!(mounts, mount_names(fiberd), "the helper checks what fiberd mounts");
        assert_eq!(
            mounts,
            [("kvm", "/dev/kvm"), ("fleet-key", FLEET_KEY_MOUNT), ("cache", CACHE_MOUNT)].map(|(n, p)| (n.to_string(), p.to_string()))
        );
    }

    #[test]
    fn fiberd_caches_artifacts_in_an_empty_dir_sized_from_the_instance() {
        let mut big = grant(2, None);
        big.spec.memory_bytes = 4 << 30;
        let pod = &desired_pods(&big, &PodSettings::default())[0];
        let spec = pod.spec.as_ref().expect("spec");
        let args = spec.containers[0].args.clone().unwrap_or_default();
        assert!(args.contains(&"--cache-dir=/var/cache/lampyr".to_string()), "{args:?}");
        let cache = spec.volumes.as_ref().expect("volumes").iter().find(|v| v.name == "cache").expect("cache volume");
        let limit = cache.empty_dir.as_ref().and_then(|e| e.size_limit.as_ref()).expect("sizeLimit");
        let pruned_to = args.iter().find_map(|a| a.strip_prefix("--cache-max-bytes=")).expect("--cache-max-bytes");
        assert!(pruned_to.parse::<i64>().expect("a number") < limit.0.parse::<i64>().expect("sizeLimit in bytes"), "{args:?}");
        assert_eq!(limit.0, (4i64 << 30).to_string(), "twice the instance's 2 GiB");

        assert_eq!(cache_size_limit(10 << 20), MIN_CACHE_BYTES, "a small grant gets the floor");
        assert_eq!(cache_size_limit(3 << 30), 6 << 30);
        assert_eq!(cache_size_limit(i64::MAX), i64::MAX, "no overflow");
    }

    #[test]
    fn adding_an_instance_leaves_the_others_pods_as_they_are() {
        let two = grant(2, None);
        let mut three = two.clone();
        three.spec.instances = 3;
        three.spec.fiber_slots = two.spec.fiber_slots / 2 * 3;
        three.spec.memory_bytes = two.spec.memory_bytes / 2 * 3;
        let (before, after) = (desired_pods(&two, &PodSettings::default()), desired_pods(&three, &PodSettings::default()));
        assert_eq!(after.len(), 3);
        for (old, new) in before.iter().zip(&after) {
            assert_eq!(
                pod_spec_hash(old),
                pod_spec_hash(new),
                "{}: same size per instance, same Pod",
                old.metadata.name.as_deref().unwrap_or_default()
            );
        }
        three.spec.memory_bytes = two.spec.memory_bytes;
        let smaller = desired_pods(&three, &PodSettings::default());
        assert_ne!(pod_spec_hash(&before[0]), pod_spec_hash(&smaller[0]), "a new size per instance is a new Pod");
    }

    #[test]
    fn kvm_comes_from_the_host_or_a_device_plugin() {
        let host = &desired_pods(&grant(1, None), &PodSettings::default())[0];
        let host_spec = host.spec.as_ref().expect("spec");
        let kvm = host_spec.volumes.as_ref().expect("volumes").iter().find(|v| v.name == "kvm").expect("kvm volume");
        assert_eq!(kvm.host_path.as_ref().map(|h| h.path.as_str()), Some("/dev/kvm"));

        let settings = PodSettings { kvm: KvmAccess::DevicePlugin("devices.kubevirt.io/kvm".into()), ..Default::default() };
        let plugin = &desired_pods(&grant(1, None), &settings)[0];
        let spec = plugin.spec.as_ref().expect("spec");
        assert!(spec.volumes.as_ref().expect("volumes").iter().all(|v| v.name != "kvm"));
        let limits = spec.containers[0].resources.as_ref().and_then(|r| r.limits.as_ref()).expect("limits");
        assert_eq!(limits["devices.kubevirt.io/kvm"].0, "1");
        let helper = &spec.init_containers.as_ref().expect("init containers")[0];
        let helper_limits = helper.resources.as_ref().and_then(|r| r.limits.as_ref()).expect("helper limits");
        assert_eq!(helper_limits["devices.kubevirt.io/kvm"].0, "1", "the helper opens the plugin's device too");
        assert!(helper.args.iter().flatten().any(|a| a == "--kvm-device-plugin=devices.kubevirt.io/kvm"));
        for container in [helper, &spec.containers[0]] {
            assert_eq!(container.security_context.as_ref().and_then(|s| s.privileged), Some(false));
            assert!(mount_names(container).iter().all(|(name, _)| name != "kvm"));
        }
    }

    #[test]
    fn placement_overrides_the_default_selector_and_changes_the_hash() {
        let placed = Placement {
            node_selector: BTreeMap::from([("pool".into(), "fibers".into())]),
            tolerations: vec![serde_json::from_value(json!({ "key": "fibers", "operator": "Exists" })).expect("toleration")],
        };
        let default = &desired_pods(&grant(1, None), &PodSettings::default())[0];
        let pod = &desired_pods(&grant(1, Some(placed)), &PodSettings::default())[0];
        let spec = pod.spec.as_ref().expect("spec");
        assert_eq!(spec.node_selector.as_ref().expect("selector"), &BTreeMap::from([("pool".into(), "fibers".into())]));
        assert_eq!(spec.tolerations.as_ref().expect("tolerations").len(), 1);
        assert_ne!(pod_spec_hash(pod), pod_spec_hash(default));
        assert_eq!(pod_spec_hash(default), pod_spec_hash(&desired_pods(&grant(1, None), &PodSettings::default())[0]));
    }
}
