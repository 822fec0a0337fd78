//! Lampyr installed on the node, reached as a client outside the cluster reaches
//! it: through fiber-router's NodePort on the node's address.

use std::net::SocketAddr;
use std::process::Command;

use super::Node;
use crate::cluster::Cluster;
use crate::knative_services::Serving;

/// The Pods whose logs a failure message shows: Lampyr's components and grant Pods.
const LOGGED_PODS: [(&str, &str); 3] = [
    ("lampyr-system", "app.kubernetes.io/part-of=lampyr"),
    ("knative-serving", "app.kubernetes.io/part-of=lampyr"),
    ("", "app.kubernetes.io/name=fiberd"),
];

/// Lampyr as `ly cluster install` left it on a [`Node`], served through NodePort `port`.
pub struct NodeIngress<'a> {
    /// The node.
    pub node: &'a Node,
    /// fiber-router's HTTP NodePort (the installation's `ingress.httpNodePort`).
    pub port: u16,
}

impl Serving for NodeIngress<'_> {
    fn cluster(&self) -> &Cluster {
        self.node.cluster()
    }

    fn router_addr(&self) -> Option<SocketAddr> {
        Some(SocketAddr::from((self.node.address(), self.port)))
    }

    fn lampyr_logs(&self) -> String {
        let mut logs = String::new();
        for (namespace, selector) in LOGGED_PODS {
            let mut kubectl = self.node.cluster().kubectl();
            kubectl.args(["logs", "--all-containers", "--prefix", "--tail=15", "-l", selector]);
            match namespace {
                "" => kubectl.arg("--all-namespaces"),
                ns => kubectl.args(["-n", ns]),
            };
            logs.push_str(&format!("--- logs of {selector} Pods {namespace}\n{}\n", output(kubectl)));
        }
        let mut pods = self.node.cluster().kubectl();
        pods.args(["get", "pods", "--all-namespaces", "-o", "wide"]);
        logs.push_str(&format!("--- Pods\n{}\n--- kubelet\n{}\n", output(pods), self.node.log_tail("kubelet", 15)));
        logs
    }
}

fn output(mut command: Command) -> String {
    match command.output() {
        Ok(out) => format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
        Err(e) => format!("(running {command:?}: {e})"),
    }
}
