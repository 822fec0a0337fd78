//! Why each pod, container and security field outside the subset is refused, in
//! words a user can act on.

pub(super) fn pod_field_reason(field: &str) -> &'static str {
    match field {
        "volumes" => "a fiber has no filesystem to mount volumes into",
        "initContainers" => "a fiber resumes one guest from its snapshot; there is no init step",
        "runtimeClassName" => "fibers always run as Hyperlight micro-VMs",
        "nodeSelector"
        | "affinity"
        | "tolerations"
        | "topologySpreadConstraints"
        | "nodeName"
        | "schedulerName"
        | "priorityClassName"
        | "priority"
        | "preemptionPolicy"
        | "schedulingGates" => "fibers are not scheduled as Kubernetes pods, so placement settings have no effect",
        "hostNetwork" | "hostPID" | "hostIPC" | "hostUsers" | "shareProcessNamespace" => {
            "a fiber shares no namespaces with its host or with other fibers"
        }
        "dnsPolicy" | "dnsConfig" | "hostAliases" | "hostname" | "subdomain" | "setHostnameAsFQDN" => {
            "a fiber opens no network connections, so it has no resolver"
        }
        "terminationGracePeriodSeconds" | "activeDeadlineSeconds" | "restartPolicy" => "the fiber runtime manages the lifecycle of fibers",
        "resources" | "overhead" | "resourceClaims" => "fiber resources come from the container's cpu and memory only",
        _ => "not part of the pod-spec subset fibers support",
    }
}

pub(super) fn container_field_reason(field: &str) -> &'static str {
    match field {
        "workingDir" | "volumeMounts" | "volumeDevices" => "a fiber has no filesystem",
        "lifecycle" => "a fiber has no process to run hooks in",
        "stdin" | "stdinOnce" | "tty" => "a fiber has no terminal or standard input",
        "terminationMessagePath" | "terminationMessagePolicy" => "a fiber does not exit with a termination message",
        "resizePolicy" | "restartPolicy" | "restartPolicyRules" => "the fiber runtime manages restarts and resources",
        _ => "not part of the container subset fibers support",
    }
}

pub(super) fn security_field_reason(field: &str) -> &'static str {
    match field {
        "runAsUser" | "runAsGroup" | "supplementalGroups" | "supplementalGroupsPolicy" | "fsGroup" | "fsGroupChangePolicy" => {
            "a fiber has no user or group ids"
        }
        "seLinuxOptions" | "seLinuxChangePolicy" | "appArmorProfile" | "windowsOptions" => {
            "host security modules do not apply inside a fiber"
        }
        "procMount" | "sysctls" => "a fiber has no /proc and no kernel parameters",
        _ => "not a security setting that holds for a fiber",
    }
}
