//! Lampyr installed on the node as an operator installs it, and reached as a client
//! outside the cluster reaches it: through fiber-router's NodePort on the node's address.

use std::net::SocketAddr;
use std::process::{Command, Output};

use super::Node;
use crate::cluster::Cluster;
use crate::knative_services::Serving;
use crate::ly::{Ly, path};
use crate::runtime_images::RuntimeImages;

/// The Pods whose logs a failure message shows: Lampyr's components, grant Pods, Knative
/// Eventing's and the Gateway API layer's (when installed).
const LOGGED_PODS: [&str; 7] = [
    "app.kubernetes.io/part-of=lampyr",
    "app.kubernetes.io/name=fiberd",
    "app.kubernetes.io/name=knative-eventing",
    "app=net-gateway-api-controller",
    "app=net-gateway-api-webhook",
    "control-plane=contour-gateway-provisioner",
    "app.kubernetes.io/managed-by=contour-gateway-provisioner",
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
        let kubectl = |args: &[&str]| {
            let mut command = self.node.cluster().kubectl();
            command.args(args);
            output(command)
        };
        let mut logs = String::new();
        for selector in LOGGED_PODS {
            let pods = kubectl(&[
                "get",
                "pods",
                "--all-namespaces",
                "-l",
                selector,
                "-o",
                "jsonpath={range .items[*]}{.metadata.namespace} {.metadata.name}{\"\\n\"}{end}",
            ]);
            for (namespace, pod) in pods.lines().filter_map(|l| l.split_once(' ')) {
                let log = kubectl(&["logs", "-n", namespace, pod, "--all-containers", "--prefix", "--tail=15"]);
                logs.push_str(&format!("--- {namespace}/{pod}\n{log}\n"));
            }
        }
        let pods = kubectl(&["get", "pods", "--all-namespaces", "-o", "wide"]);
        logs.push_str(&format!("--- Pods\n{pods}\n--- kubelet\n{}\n", self.node.log_tail("kubelet", 15)));
        logs
    }
}

fn output(mut command: Command) -> String {
    match command.output() {
        Ok(out) => format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
        Err(e) => format!("(running {command:?}: {e})"),
    }
}

/// Lampyr installed on `node` as an operator installs it: the runtime `images` pushed to the
/// node's registry, which the node's containerd mirrors for the registries they are named
/// under (the kubelet pulls each, by tag, and the grant Pods' by digest); a `platform.yaml`
/// naming them (`grantImage` and `helperImage` pinned by digest), templates in the node's
/// registry, Services under `domain`; then `ly cluster install` with `extra_args` (e.g.
/// `--eventing`). Returns install's output.
pub async fn install_lampyr(node: &Node, ly: &Ly<'_>, images: &RuntimeImages, domain: &str, extra_args: &[&str]) -> Result<Output, String> {
    install_lampyr_with(node, ly, images, domain, &[], extra_args).await
}

/// [`install_lampyr`] with more `platform.yaml` keys (`key`, inline YAML value), e.g.
/// [`crate::ly::FIBER_ROUTER_INGRESS`].
pub async fn install_lampyr_with(
    node: &Node,
    ly: &Ly<'_>,
    images: &RuntimeImages,
    domain: &str,
    settings: &[(&str, &str)],
    extra_args: &[&str],
) -> Result<Output, String> {
    images.push(&format!("http://{}", node.registry().host())).await?;
    for registry in images.registries() {
        node.mirror(&registry)?;
    }
    let templates = format!("[http://{}/lampyr/fiberd-templates]", node.registry().host());
    let (grant, helper) = (images.pinned("fiberd"), images.pinned("fiberd-helper"));
    let mut keys: Vec<(&str, &str)> =
        vec![("grantImage", &grant), ("helperImage", &helper), ("zygoteRegistries", &templates), ("domain", domain)];
    keys.extend(settings);
    let settings = ly.settings("platform.yaml", &keys);
    let mut args = vec!["install", "--non-interactive", "--provider-config", path(&settings)];
    args.extend(extra_args);
    Ok(ly.cluster(&args))
}
