//! A CapacityGrant's status from its Pods and the Homes placed on it: ready
//! instances, `InstancesReady`, and the slots and memory allocated.

use k8s_openapi::api::core::v1::Pod;
use lampyr_api::conditions::KnativeStatus;
use lampyr_api::fiber::capacity_grant::INSTANCES_READY;
use lampyr_api::{CapacityGrant, CapacityGrantStatus, Home};

use super::images::ImageRefused;

/// Reason: a grant image is outside every GrantPolicy.
pub const REASON_IMAGE_NOT_ALLOWED: &str = "ImageNotAllowed";
/// Reason: fewer grant Pods are ready than the grant asks for.
pub const REASON_INSTANCES_NOT_READY: &str = "InstancesNotReady";

/// Whether a Pod reports the `Ready` condition.
pub fn pod_is_ready(pod: &Pod) -> bool {
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions.is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Why a Pod is not ready, from what its kubelet reports: an init container that
/// failed (its termination message: `fiberd-helper` says what the node lacks), a
/// container waiting for a reason other than starting (an image that cannot be
/// pulled), or else the `Ready` condition's message.
pub fn pod_not_ready_reason(pod: &Pod) -> Option<String> {
    let status = pod.status.as_ref()?;
    for init in status.init_container_statuses.iter().flatten() {
        let current = init.state.as_ref().and_then(|s| s.terminated.as_ref());
        let terminated = current.or_else(|| init.last_state.as_ref().and_then(|s| s.terminated.as_ref()));
        if let Some(failed) = terminated.filter(|t| t.exit_code != 0) {
            let message = failed.message.as_deref().map(str::trim).filter(|m| !m.is_empty());
            let said = message.or(failed.reason.as_deref()).unwrap_or("no message");
            return Some(format!("init container {} failed (exit code {}): {said}", init.name, failed.exit_code));
        }
    }
    let containers = status.init_container_statuses.iter().flatten().chain(status.container_statuses.iter().flatten());
    for container in containers {
        let Some(waiting) = container.state.as_ref().and_then(|s| s.waiting.as_ref()) else { continue };
        let reason = waiting.reason.as_deref().unwrap_or_default();
        if !reason.is_empty() && reason != "ContainerCreating" && reason != "PodInitializing" {
            let message = waiting.message.as_deref().map(|m| format!(": {m}")).unwrap_or_default();
            return Some(format!("container {} is waiting: {reason}{message}", container.name));
        }
    }
    let ready = status.conditions.iter().flatten().find(|c| c.type_ == "Ready" && c.status != "True")?;
    ready.message.clone().filter(|m| !m.is_empty())
}

/// `"; <pod>: <why>"` for the first of `pods` (by name) that is not ready and says why, else nothing.
fn first_not_ready_reason(pods: &[Pod]) -> String {
    let mut not_ready: Vec<&Pod> = pods.iter().filter(|p| !pod_is_ready(p)).collect();
    not_ready.sort_by_key(|p| p.metadata.name.clone());
    not_ready
        .into_iter()
        .find_map(|p| pod_not_ready_reason(p).map(|why| format!("; {}: {why}", p.metadata.name.as_deref().unwrap_or_default())))
        .unwrap_or_default()
}

/// The status `grant` should have, given its current Pods (only those the
/// controller wants) and whether its images were refused. Conditions keep
/// their `lastTransitionTime` unless they change.
pub fn grant_status(grant: &CapacityGrant, pods: &[Pod], refused: Option<&ImageRefused>) -> CapacityGrantStatus {
    let mut status = grant.status.clone().unwrap_or_default();
    status.observed_generation = grant.metadata.generation.unwrap_or(0);
    let wanted = grant.spec.instances.max(0);
    let ready = pods.iter().filter(|p| pod_is_ready(p)).count();
    status.ready_instances = i32::try_from(ready).unwrap_or(i32::MAX).min(wanted);
    let ready_instances = status.ready_instances;
    let mut conditions = status.manage();
    match refused {
        Some(refused) => conditions.mark_false(INSTANCES_READY, REASON_IMAGE_NOT_ALLOWED, &refused.to_string()),
        None if ready_instances >= wanted => conditions.mark_true(INSTANCES_READY),
        None => conditions.mark_unknown(
            INSTANCES_READY,
            REASON_INSTANCES_NOT_READY,
            &format!("{ready_instances} of {wanted} grant Pods are ready{}", first_not_ready_reason(pods)),
        ),
    }
    status
}

/// Writes what `homes` (those placed on the grant) hold into `status`: the Homes, and
/// per instance the larger of a Home's reserved slots and its warm fibers, and the
/// memory fiberd reports for them.
pub fn allocation<'a>(status: &mut CapacityGrantStatus, homes: impl IntoIterator<Item = &'a Home>) {
    let (mut count, mut slots, mut memory) = (0i32, 0i32, 0i64);
    for home in homes {
        count = count.saturating_add(1);
        for instance in home.status.iter().flat_map(|s| &s.instances) {
            slots = slots.saturating_add(instance.reserved_slots.max(instance.warm_fibers).max(0));
            memory = memory.saturating_add(instance.memory_bytes.max(0));
        }
    }
    status.homes = count;
    status.allocated_slots = slots;
    status.allocated_memory_bytes = memory;
}

/// Whether `a` and `b` differ at most in what [`allocation`] writes.
pub fn same_but_allocation(a: &CapacityGrantStatus, b: &CapacityGrantStatus) -> bool {
    let without = |s: &CapacityGrantStatus| CapacityGrantStatus { homes: 0, allocated_slots: 0, allocated_memory_bytes: 0, ..s.clone() };
    without(a) == without(b)
}

#[cfg(test)]
mod tests {
    use lampyr_api::CapacityGrantSpec;
    use lampyr_api::conditions::{CONDITION_READY, ConditionStatus};
    use serde_json::json;

    use super::*;

    fn grant(instances: i32) -> CapacityGrant {
        let mut grant = CapacityGrant::new(
            "g",
            CapacityGrantSpec {
                fiber_slots: 1,
                memory_bytes: 1,
                instances,
                placement: None,
                grant_image: String::new(),
                helper_image: String::new(),
            },
        );
        grant.metadata.generation = Some(3);
        grant
    }

    fn pod(ready: bool) -> Pod {
        let status = if ready { "True" } else { "False" };
        serde_json::from_value(json!({ "status": { "conditions": [{ "type": "Ready", "status": status }] } })).expect("pod")
    }

    fn ready_condition(status: &CapacityGrantStatus) -> (ConditionStatus, String) {
        let ready = status.get_condition(CONDITION_READY).expect("Ready");
        (ready.status, ready.reason.clone())
    }

    #[test]
    fn ready_when_every_instance_is_ready() {
        let status = grant_status(&grant(2), &[pod(true), pod(true)], None);
        assert_eq!((status.ready_instances, status.observed_generation), (2, 3));
        assert!(status.is_ready(Some(3)));

        let status = grant_status(&grant(2), &[pod(true), pod(false)], None);
        assert_eq!(status.ready_instances, 1);
        assert_eq!(ready_condition(&status), (ConditionStatus::Unknown, REASON_INSTANCES_NOT_READY.into()));
    }

    #[test]
    fn a_refused_image_fails_the_grant_with_the_reason() {
        let refused =
            ImageRefused { field: "spec.grantImage", image: "x".into(), repository: "x".into(), allowed: "no GrantPolicy exists".into() };
        let status = grant_status(&grant(1), &[], Some(&refused));
        assert_eq!(ready_condition(&status), (ConditionStatus::False, REASON_IMAGE_NOT_ALLOWED.into()));
        let message = &status.get_condition(INSTANCES_READY).expect("InstancesReady").message;
        assert!(message.contains("spec.grantImage x"), "{message}");
    }

    #[test]
    fn a_failed_helper_says_why_the_grant_is_not_ready() {
        let failed = json!({ "terminated": { "exitCode": 1, "reason": "Error",
            "message": "/dev/kvm: permission denied opening it read-write: the grant Pod must run privileged\n" } });
        let mut crashing: Pod = serde_json::from_value(json!({
            "metadata": { "name": "g-1" },
            "status": { "initContainerStatuses": [{ "name": "helper", "image": "h", "imageID": "", "ready": false,
                "restartCount": 2, "state": { "waiting": { "reason": "CrashLoopBackOff" } }, "lastState": failed }] },
        }))
        .expect("pod");
        let status = grant_status(&grant(2), &[pod(true), crashing.clone()], None);
        let message = &status.get_condition(INSTANCES_READY).expect("InstancesReady").message;
        assert_eq!(
            message,
            "1 of 2 grant Pods are ready; g-1: init container helper failed (exit code 1): /dev/kvm: permission denied \
             opening it read-write: the grant Pod must run privileged"
        );

        // The helper passed; an image that cannot be pulled is the reason now.
        crashing.status = serde_json::from_value(json!({
            "initContainerStatuses": [{ "name": "helper", "image": "h", "imageID": "", "ready": true, "restartCount": 2,
                "state": { "terminated": { "exitCode": 0 } }, "lastState": failed }],
            "containerStatuses": [{ "name": "fiberd", "image": "f", "imageID": "", "ready": false, "restartCount": 0,
                "state": { "waiting": { "reason": "ImagePullBackOff", "message": "Back-off pulling image \"f\"" } } }],
        }))
        .expect("status");
        assert_eq!(
            pod_not_ready_reason(&crashing).as_deref(),
            Some("container fiberd is waiting: ImagePullBackOff: Back-off pulling image \"f\"")
        );
        assert_eq!(pod_not_ready_reason(&pod(false)), None, "nothing said, nothing added");
    }

    #[test]
    fn an_unchanged_condition_keeps_its_transition_time() {
        let mut g = grant(1);
        let first = grant_status(&g, &[pod(true)], None);
        g.status = Some(first.clone());
        let again = grant_status(&g, &[pod(true)], None);
        assert_eq!(first.conditions, again.conditions);
    }

    #[test]
    fn allocation_alone_is_told_apart_from_a_readiness_change() {
        let g = grant(1);
        let ready = grant_status(&g, &[pod(true)], None);
        let mut busier = ready.clone();
        busier.homes = 7;
        busier.allocated_slots = 12;
        busier.allocated_memory_bytes = 1 << 30;
        assert!(same_but_allocation(&ready, &busier), "only the allocation differs");
        let not_ready = grant_status(&g, &[pod(false)], None);
        assert!(!same_but_allocation(&ready, &not_ready), "a readiness change is written at once");
    }
}
