//! The pod-spec subset a fiber runs: one container, its environment, port,
//! memory, probes and the security settings that already hold for a fiber.

use crate::k8s::{Capabilities, EnvFromSource, EnvVar, ResourceRequirements, SeccompProfile};
use std::time::Duration;

use crate::policy::{EnvEntry, EnvRef, EnvSource, EnvSourceKind, ReadinessCheck};
use crate::quantity::parse_quantity;
use crate::{Container, PodSecurityContext, Probe, RevisionSpec, SecurityContext};

use super::reasons::{container_field_reason, pod_field_reason, security_field_reason};
use super::{Checker, ContainerPart, is_empty_value, key_path};

impl Checker<'_> {
    pub(super) fn pod_spec(&mut self, spec: &RevisionSpec, prefix: &str) -> ContainerPart {
        let base = format!("{prefix}spec");
        self.others(&base, &spec.other, pod_field_reason);
        if spec.enable_service_links == Some(true) {
            self.unsupported(format!("{base}.enableServiceLinks"), "Kubernetes service environment variables are not given to fibers");
        }
        if spec.automount_service_account_token == Some(true) {
            self.unsupported(format!("{base}.automountServiceAccountToken"), "no service account token is mounted into a fiber");
        }
        if let Some(sc) = &spec.security_context {
            self.pod_security_context(&format!("{base}.securityContext"), sc);
        }
        // serviceAccountName and imagePullSecrets are accepted: they give the
        // artifact's pulls their credentials (the Home carries them); a fiber
        // itself calls no Kubernetes API.

        let containers = format!("{base}.containers");
        for i in 1..spec.containers.len() {
            self.unsupported(format!("{containers}[{i}]"), "a Revision runs as fibers of one container; sidecars are not supported");
        }
        match spec.containers.first() {
            None => {
                self.invalid(containers, "exactly one container is required");
                (None, (Vec::new(), Vec::new()), false, None)
            }
            Some(c) => self.container(&format!("{containers}[0]"), c),
        }
    }

    fn container(&mut self, base: &str, c: &Container) -> ContainerPart {
        self.others(base, &c.other, container_field_reason);
        let env = self.env(base, c.env.as_deref().unwrap_or_default(), c.env_from.as_deref().unwrap_or_default());
        let (http2, port) = self.ports(base, c);
        let memory = match &c.resources {
            Some(r) => self.resources(&format!("{base}.resources"), r),
            None => None,
        };
        for (field, probe, required) in [
            ("readinessProbe", &c.readiness_probe, false),
            ("livenessProbe", &c.liveness_probe, true),
            ("startupProbe", &c.startup_probe, true),
        ] {
            if let Some(p) = probe {
                self.probe(&format!("{base}.{field}"), p, required);
            }
        }
        if let Some(sc) = &c.security_context {
            self.security_context(&format!("{base}.securityContext"), sc);
        }
        (memory, env, http2, port)
    }

    /// Literal entries, and references to ConfigMaps and Secrets (resolved by fiberd).
    fn env(&mut self, base: &str, env: &[EnvVar], env_from: &[EnvFromSource]) -> (Vec<(String, String)>, Vec<EnvRef>) {
        let mut out = Vec::with_capacity(env.len());
        let mut refs = Vec::new();
        for (i, from) in env_from.iter().enumerate() {
            let path = format!("{base}.envFrom[{i}]");
            let source = match (&from.config_map_ref, &from.secret_ref) {
                (Some(c), None) => {
                    EnvSource { kind: EnvSourceKind::ConfigMap, name: c.name.clone(), optional: c.optional.unwrap_or(false) }
                }
                (None, Some(s)) => EnvSource { kind: EnvSourceKind::Secret, name: s.name.clone(), optional: s.optional.unwrap_or(false) },
                _ => {
                    self.invalid(path, "exactly one of configMapRef and secretRef is required");
                    continue;
                }
            };
            refs.push(EnvRef { source, key: None, variable: None, index: 0, prefix: from.prefix.clone().unwrap_or_default() });
        }
        for (i, var) in env.iter().enumerate() {
            let path = format!("{base}.env[{i}]");
            if var.name.is_empty() {
                self.invalid(format!("{path}.name"), "must not be empty");
            }
            let Some(from) = &var.value_from else {
                out.push((var.name.clone(), var.value.clone().unwrap_or_default()));
                continue;
            };
            let (source, key) = match (&from.config_map_key_ref, &from.secret_key_ref, &from.field_ref, &from.resource_field_ref) {
                (Some(c), None, None, None) => (
                    EnvSource { kind: EnvSourceKind::ConfigMap, name: c.name.clone(), optional: c.optional.unwrap_or(false) },
                    c.key.clone(),
                ),
                (None, Some(s), None, None) => {
                    (EnvSource { kind: EnvSourceKind::Secret, name: s.name.clone(), optional: s.optional.unwrap_or(false) }, s.key.clone())
                }
                _ => {
                    self.unsupported(
                        format!("{path}.valueFrom"),
                        "only configMapKeyRef and secretKeyRef are resolved for fibers; field and resource \
                         references describe a Pod, which a fiber is not",
                    );
                    continue;
                }
            };
            let at = u32::try_from(i).unwrap_or(u32::MAX);
            refs.push(EnvRef { source, key: Some(key), variable: Some(var.name.clone()), index: at, prefix: String::new() });
        }
        (out, refs)
    }

    fn ports(&mut self, base: &str, c: &Container) -> (bool, Option<u16>) {
        let ports = c.ports.as_deref().unwrap_or_default();
        for i in 1..ports.len() {
            self.unsupported(format!("{base}.ports[{i}]"), "a Revision serves exactly one port");
        }
        let Some(p) = ports.first() else {
            return (false, None);
        };
        let path = format!("{base}.ports[0]");
        let http2 = match p.name.as_deref() {
            None | Some("") | Some("http1") => false,
            Some("h2c") => true,
            Some(other) => {
                self.invalid(format!("{path}.name"), format!("{other:?} is not a port name Knative accepts: use h2c or http1"));
                false
            }
        };
        let port = match p.container_port {
            0 => None,
            n @ 1..=65535 => Some(n as u16),
            n => {
                self.invalid(format!("{path}.containerPort"), format!("{n} is out of bounds: must be between 0 and 65535"));
                None
            }
        };
        if p.host_port.is_some_and(|h| h != 0) {
            self.unsupported(format!("{path}.hostPort"), "a fiber is reached through Lampyr's router, never a host port");
        }
        if p.host_ip.as_deref().is_some_and(|h| !h.is_empty()) {
            self.unsupported(format!("{path}.hostIP"), "a fiber is reached through Lampyr's router, never a host address");
        }
        if let Some(proto) = p.protocol.as_deref()
            && !proto.is_empty()
            && proto != "TCP"
        {
            self.unsupported(format!("{path}.protocol"), format!("{proto} is not served: fibers serve HTTP over TCP"));
        }
        (http2, port)
    }

    fn resources(&mut self, base: &str, r: &ResourceRequirements) -> Option<u64> {
        if r.claims.as_ref().is_some_and(|c| !c.is_empty()) {
            self.unsupported(format!("{base}.claims"), "dynamic resource claims cannot be attached to a fiber");
        }
        let mut memory = [None, None];
        for (slot, (field, map)) in [("limits", &r.limits), ("requests", &r.requests)].into_iter().enumerate() {
            let Some(map) = map else { continue };
            let map_path = format!("{base}.{field}");
            for (name, quantity) in map {
                let path = key_path(&map_path, name);
                match name.as_str() {
                    "memory" => match parse_quantity(&quantity.0) {
                        Ok(q) if q.is_zero() => self.invalid(path, "memory must be greater than 0"),
                        Ok(q) => memory[slot] = Some(q.ceil()),
                        Err(e) => self.invalid(path, e.to_string()),
                    },
                    // Validated only: a fiber always has exactly one vCPU.
                    "cpu" => {
                        if let Err(e) = parse_quantity(&quantity.0) {
                            self.invalid(path, e.to_string());
                        }
                    }
                    "ephemeral-storage" => self.unsupported(path, "a fiber has no filesystem to store data on"),
                    other => self.unsupported(path, format!("a fiber has one vCPU and memory only; {other} cannot be given to it")),
                }
            }
        }
        let [limit, request] = memory;
        if let (Some(l), Some(q)) = (limit, request)
            && q > l
        {
            self.invalid(format!("{base}.requests.memory"), format!("{q} bytes is more than the limit ({l} bytes)"));
        }
        limit.or(request)
    }

    fn probe(&mut self, base: &str, p: &Probe, needs_handler: bool) {
        let mut handlers = usize::from(p.http_get.is_some()) + usize::from(p.tcp_socket.is_some());
        for (field, value) in &p.other {
            if is_empty_value(value) {
                continue;
            }
            let path = key_path(base, field);
            match field.as_str() {
                "exec" => {
                    handlers += 1;
                    self.unsupported(path, "exec probes run a command, and a fiber runs no processes")
                }
                "grpc" => {
                    handlers += 1;
                    self.unsupported(path, "gRPC probes are not supported; use httpGet or tcpSocket")
                }
                _ => self.unsupported(path, "not a probe field fibers support"),
            }
        }
        if handlers > 1 {
            self.invalid(base, "a probe takes exactly one handler");
        } else if handlers == 0 && needs_handler {
            self.invalid(base, "needs an httpGet or tcpSocket handler");
        }
        if let Some(h) = &p.http_get {
            self.others(&format!("{base}.httpGet"), &h.other, |_| "not an httpGet field");
        }
        if let Some(t) = &p.tcp_socket {
            self.others(&format!("{base}.tcpSocket"), &t.other, |_| "not a tcpSocket field");
        }
    }

    fn run_as_non_root(&mut self, base: &str, v: Option<bool>) {
        if v == Some(false) {
            self.unsupported(format!("{base}.runAsNonRoot"), "only true holds for a fiber: it runs no root user");
        }
    }

    fn seccomp(&mut self, base: &str, profile: Option<&SeccompProfile>) {
        let Some(profile) = profile else { return };
        let path = format!("{base}.seccompProfile");
        if profile.type_ != "RuntimeDefault" {
            self.unsupported(
                format!("{path}.type"),
                format!("{:?}: only RuntimeDefault holds for a fiber (it makes no host system calls)", profile.type_),
            );
        }
        if profile.localhost_profile.as_deref().is_some_and(|p| !p.is_empty()) {
            self.unsupported(format!("{path}.localhostProfile"), "host seccomp profiles do not apply inside a fiber");
        }
    }

    fn security_context(&mut self, base: &str, sc: &SecurityContext) {
        self.others(base, &sc.other, security_field_reason);
        self.run_as_non_root(base, sc.run_as_non_root);
        if sc.allow_privilege_escalation == Some(true) {
            self.unsupported(format!("{base}.allowPrivilegeEscalation"), "only false holds for a fiber: it has no privileges to gain");
        }
        if sc.read_only_root_filesystem == Some(false) {
            self.unsupported(format!("{base}.readOnlyRootFilesystem"), "only true holds for a fiber: it has no filesystem to write");
        }
        if sc.privileged == Some(true) {
            self.unsupported(format!("{base}.privileged"), "a fiber cannot run privileged: it has no access to the host");
        }
        if let Some(Capabilities { add: Some(add), .. }) = &sc.capabilities
            && !add.is_empty()
        {
            self.unsupported(format!("{base}.capabilities.add"), "a fiber has no Linux capabilities to add; dropping them is accepted");
        }
        self.seccomp(base, sc.seccomp_profile.as_ref());
    }

    fn pod_security_context(&mut self, base: &str, sc: &PodSecurityContext) {
        self.others(base, &sc.other, security_field_reason);
        self.run_as_non_root(base, sc.run_as_non_root);
        self.seccomp(base, sc.seccomp_profile.as_ref());
    }
}

/// What a fiber runs of a (validated) readiness probe: its `httpGet` request. A
/// `tcpSocket` probe needs nothing more than a loaded template, so it gives none.
pub(super) fn readiness_check(probe: &Probe) -> Option<ReadinessCheck> {
    let get = probe.http_get.as_ref()?;
    let path = get.path.clone().filter(|p| !p.is_empty()).unwrap_or_else(|| "/".to_string());
    let path = if path.starts_with('/') { path } else { format!("/{path}") };
    let headers = get.http_headers.iter().flatten().map(|h| EnvEntry { name: h.name.clone(), value: h.value.clone() }).collect();
    let seconds = |v: Option<i32>, default: u32| v.and_then(|n| u32::try_from(n).ok()).filter(|n| *n > 0).unwrap_or(default);
    Some(ReadinessCheck {
        path,
        headers,
        timeout: Duration::from_secs(u64::from(seconds(probe.timeout_seconds, 1))),
        failure_threshold: seconds(probe.failure_threshold, 3),
    })
}
