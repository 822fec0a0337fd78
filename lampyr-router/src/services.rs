//! KIngress splits that name an ordinary Kubernetes Service, not a Lampyr
//! Revision: which of the Service's ports they use, how (h2c or HTTP/1.1), and
//! where its ready endpoints for that port are (from its EndpointSlices).

use std::net::{IpAddr, SocketAddr};

use k8s_openapi::api::core::v1::{Service, ServicePort};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// Where a split to a Service goes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ServiceTarget {
    /// The Service's cluster IP and the split's port.
    pub address: SocketAddr,
    /// The port speaks HTTP/2 cleartext (`appProtocol: kubernetes.io/h2c`, or named `http2` or `h2c`).
    pub h2c: bool,
    /// The port's name (empty when unnamed): its EndpointSlice ports carry the same.
    pub port_name: String,
}

/// The label an EndpointSlice carries naming its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// The addresses (endpoint address, and the slice port named like the Service's) of
/// the endpoints in `slices` that are ready for `target`'s port, in a stable order.
/// An endpoint whose readiness is unknown counts as ready, as the API advises.
pub fn ready_endpoints<'a>(slices: impl IntoIterator<Item = &'a EndpointSlice>, target: &ServiceTarget) -> Vec<SocketAddr> {
    let mut out = Vec::new();
    for slice in slices {
        let port = slice.ports.iter().flatten().find(|p| p.name.as_deref().unwrap_or("") == target.port_name);
        let Some(number) = port.and_then(|p| p.port).and_then(|n| u16::try_from(n).ok()) else { continue };
        for endpoint in slice.endpoints.iter().flatten() {
            if endpoint.conditions.as_ref().and_then(|c| c.ready) == Some(false) {
                continue;
            }
            if let Some(ip) = endpoint.addresses.first().and_then(|a| a.parse::<IpAddr>().ok()) {
                out.push(SocketAddr::new(ip, number));
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// Where a split naming `port` (a number or a port name) of `service` goes, or why it cannot go there.
pub fn target(service: &Service, port: &IntOrString) -> Result<ServiceTarget, String> {
    let spec = service.spec.as_ref().ok_or("the Service has no spec")?;
    if spec.type_.as_deref() == Some("ExternalName") {
        return Err("an ExternalName Service is not routed to yet".into());
    }
    let ip = match spec.cluster_ip.as_deref() {
        None | Some("") => return Err("the Service has no cluster IP yet".into()),
        Some("None") => return Err("a headless Service (clusterIP: None) is not routed to".into()),
        Some(ip) => ip.parse::<IpAddr>().map_err(|e| format!("its cluster IP {ip:?}: {e}"))?,
    };
    let ports = spec.ports.as_deref().unwrap_or_default();
    let found = match port {
        IntOrString::Int(n) => ports.iter().find(|p| p.port == *n),
        IntOrString::String(name) => ports.iter().find(|p| p.name.as_deref() == Some(name.as_str())),
    };
    let found = found.ok_or_else(|| format!("the Service has no port {}", describe(port)))?;
    let number = u16::try_from(found.port).map_err(|_| format!("port {} is out of range", found.port))?;
    let port_name = found.name.clone().unwrap_or_default();
    Ok(ServiceTarget { address: SocketAddr::new(ip, number), h2c: speaks_h2c(found), port_name })
}

fn speaks_h2c(port: &ServicePort) -> bool {
    port.app_protocol.as_deref() == Some("kubernetes.io/h2c") || matches!(port.name.as_deref(), Some("http2" | "h2c"))
}

fn describe(port: &IntOrString) -> String {
    match port {
        IntOrString::Int(n) => n.to_string(),
        IntOrString::String(name) => format!("named {name:?}"),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn service(spec: serde_json::Value) -> Service {
        serde_json::from_value(json!({"metadata": {"name": "s", "namespace": "n"}, "spec": spec})).expect("a Service")
    }

    #[test]
    fn a_split_goes_to_the_cluster_ip_at_the_named_or_numbered_port() {
        let s = service(json!({"clusterIP": "10.96.0.7", "ports": [
            {"name": "http", "port": 80, "targetPort": 8080},
            {"name": "grpc", "port": 81, "appProtocol": "kubernetes.io/h2c"},
            {"name": "http2", "port": 82},
        ]}));
        let at = |port: IntOrString| target(&s, &port);
        let http = ServiceTarget { address: "10.96.0.7:80".parse().unwrap(), h2c: false, port_name: "http".into() };
        assert_eq!(at(IntOrString::Int(80)), Ok(http));
        assert_eq!(at(IntOrString::String("grpc".into())).map(|t| (t.address.port(), t.h2c)), Ok((81, true)));
        assert_eq!(at(IntOrString::Int(82)).map(|t| t.h2c), Ok(true), "a port named http2 speaks h2c");
        assert_eq!(at(IntOrString::Int(8080)), Err("the Service has no port 8080".into()), "the target port is not the Service's");
        assert_eq!(at(IntOrString::String("web".into())), Err("the Service has no port named \"web\"".into()));
    }

    #[test]
    fn ready_endpoints_are_those_not_unready_at_the_slice_port_named_like_the_services() {
        let slice = |ports: serde_json::Value, endpoints: serde_json::Value| -> EndpointSlice {
            serde_json::from_value(json!({"metadata": {"name": "s-x"}, "addressType": "IPv4", "ports": ports, "endpoints": endpoints}))
                .expect("a slice")
        };
        let endpoints = json!([
            {"addresses": ["10.1.0.2"], "conditions": {"ready": true}},
            {"addresses": ["10.1.0.3"], "conditions": {"ready": false}},
            {"addresses": ["10.1.0.4"]},
        ]);
        let slices = [
            slice(json!([{"name": "http", "port": 8080}, {"name": "metrics", "port": 9090}]), endpoints.clone()),
            slice(json!([{"name": "http", "port": 8080}]), json!([{"addresses": ["10.1.0.2"]}, {"addresses": ["10.1.0.9"]}])),
        ];
        let target = |name: &str| ServiceTarget { address: "10.96.0.7:80".parse().unwrap(), h2c: false, port_name: name.into() };
        let ready = ready_endpoints(&slices, &target("http"));
        let expected: Vec<SocketAddr> = ["10.1.0.2:8080", "10.1.0.4:8080", "10.1.0.9:8080"].iter().map(|a| a.parse().unwrap()).collect();
        assert_eq!(ready, expected, "unready left out, unknown counted ready, duplicates once, the target port");
        assert!(ready_endpoints(&slices, &target("grpc")).is_empty(), "no slice port of that name");
        let unnamed = [slice(json!([{"port": 8080}]), endpoints)];
        assert_eq!(ready_endpoints(&unnamed, &target("")).len(), 2, "an unnamed Service port matches an unnamed slice port");
    }

    #[test]
    fn services_without_a_cluster_ip_say_why() {
        let port = IntOrString::Int(80);
        let headless = service(json!({"clusterIP": "None", "ports": [{"port": 80}]}));
        assert!(target(&headless, &port).unwrap_err().contains("headless"));
        let external = service(json!({"type": "ExternalName", "externalName": "example.com"}));
        assert!(target(&external, &port).unwrap_err().contains("ExternalName"));
        let pending = service(json!({"ports": [{"port": 80}]}));
        assert!(target(&pending, &port).unwrap_err().contains("no cluster IP"));
    }
}
