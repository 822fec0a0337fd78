//! The node's network namespace and the one veth link into it from the test's
//! namespace: the only way the host reaches the node, and the node nothing else.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::Command;

/// Where `ip netns` keeps its namespaces.
const NETNS_DIR: &str = "/run/netns";
/// Host-side links are `<prefix><index>`.
const HOST_LINK_PREFIX: &str = "lyn";
/// How many nodes may exist on one machine at once (each takes a /30 of 198.18.0.0/24).
const MAX_NODES: u8 = 63;

/// A network namespace with a veth pair: `198.18.0.(4i+1)` on the host's side,
/// `198.18.0.(4i+2)` (the node's address) as `eth0` inside. Deleted on drop.
pub struct NodeNetwork {
    name: String,
    host_link: String,
    /// The host's end of the link.
    pub host_address: Ipv4Addr,
    /// The node's address (its `eth0`).
    pub node_address: Ipv4Addr,
}

impl NodeNetwork {
    /// Creates namespace `name` and links it to the host through the first free /30;
    /// `service_cidr` is routed on the link (see [`NodeNetwork::configure`]).
    pub fn create(name: &str, service_cidr: &str) -> Result<NodeNetwork, String> {
        ip(&["netns", "add", name])?;
        let mut network = NodeNetwork {
            name: name.to_string(),
            host_link: String::new(),
            host_address: Ipv4Addr::UNSPECIFIED,
            node_address: Ipv4Addr::UNSPECIFIED,
        };
        let mut last = String::new();
        for index in 0..MAX_NODES {
            let host_link = format!("{HOST_LINK_PREFIX}{index}");
            // Creating the link claims the index: another node holding it makes this fail.
            match ip(&["link", "add", &host_link, "type", "veth", "peer", "name", "eth0", "netns", name]) {
                Ok(()) => {
                    network.host_link = host_link;
                    network.host_address = Ipv4Addr::new(198, 18, 0, 4 * index + 1);
                    network.node_address = Ipv4Addr::new(198, 18, 0, 4 * index + 2);
                    network.configure(service_cidr)?;
                    return Ok(network);
                }
                Err(why) => last = why,
            }
        }
        Err(format!("no free link for a node among {HOST_LINK_PREFIX}0..{HOST_LINK_PREFIX}{MAX_NODES} (last: {last})"))
    }

    /// Addresses, links up, and one route: the Service range on the link, from the node's
    /// address. The node's own processes (the API server calling a webhook's ClusterIP) need a
    /// route before kube-proxy's rules can rewrite the destination; with no default route,
    /// a ClusterIP would be unreachable. A Service address no rule rewrites goes nowhere (the
    /// host neither answers for it nor forwards), so nothing leaves the machine.
    fn configure(&self, service_cidr: &str) -> Result<(), String> {
        let host = format!("{}/30", self.host_address);
        let node = format!("{}/30", self.node_address);
        ip(&["addr", "add", &host, "dev", &self.host_link])?;
        ip(&["link", "set", &self.host_link, "up"])?;
        ip(&["-n", &self.name, "addr", "add", &node, "dev", "eth0"])?;
        ip(&["-n", &self.name, "link", "set", "eth0", "up"])?;
        ip(&["-n", &self.name, "link", "set", "lo", "up"])?;
        let source = self.node_address.to_string();
        ip(&["-n", &self.name, "route", "add", service_cidr, "dev", "eth0", "src", &source])?;
        // Service traffic is DNATed to Pods behind the node's bridge, and bridged
        // traffic between Pods passes through iptables, as on any Kubernetes node.
        for setting in ["net.ipv4.ip_forward=1", "net.bridge.bridge-nf-call-iptables=1", "net.ipv4.conf.all.route_localnet=1"] {
            run(Command::new("nsenter").arg(format!("--net={}", self.path().display())).args(["sysctl", "-q", "-w", setting]))?;
        }
        Ok(())
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The namespace's file, as `nsenter --net=` takes it.
    pub fn path(&self) -> PathBuf {
        PathBuf::from(NETNS_DIR).join(&self.name)
    }
}

impl Drop for NodeNetwork {
    fn drop(&mut self) {
        // Deleting the namespace deletes its end of the veth pair, and with it the host's.
        let _ = ip(&["netns", "delete", &self.name]);
    }
}

/// The namespaces named `<prefix>…` that `ip netns` lists.
pub fn namespaces_named(prefix: &str) -> Vec<String> {
    std::fs::read_dir(NETNS_DIR)
        .map(|entries| {
            entries.flatten().filter_map(|e| e.file_name().to_str().map(String::from)).filter(|name| name.starts_with(prefix)).collect()
        })
        .unwrap_or_default()
}

/// Deletes namespace `name` (and every link inside it).
pub fn delete(name: &str) {
    let _ = ip(&["netns", "delete", name]);
}

fn ip(args: &[&str]) -> Result<(), String> {
    run(Command::new("ip").args(args))
}

fn run(command: &mut Command) -> Result<(), String> {
    let out = command.output().map_err(|e| format!("running {command:?}: {e} (iproute2 and util-linux are needed)"))?;
    if out.status.success() { Ok(()) } else { Err(format!("{command:?} failed: {}", String::from_utf8_lossy(&out.stderr).trim())) }
}
