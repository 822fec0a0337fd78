//! The node's configuration files: the CNI network's, the kubelet's and
//! kube-proxy's, each a function of the node's paths and addresses
//! (containerd's is [`crate::containerd`]'s).

use std::net::Ipv4Addr;
use std::path::Path;

/// The Pods' network: one node's share of 198.18.128.0/17.
pub const POD_SUBNET: &str = "198.18.128.0/24";
/// Its gateway, the node's bridge.
pub const POD_GATEWAY: &str = "198.18.128.1";
/// Every Pod address the cluster may hand out (kube-proxy's `clusterCIDR`).
pub const CLUSTER_CIDR: &str = "198.18.128.0/17";
/// The Services' range.
pub const SERVICE_CIDR: &str = "198.19.0.0/16";
/// The `kubernetes` Service's ClusterIP (the range's first address).
pub const API_SERVICE_IP: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 1);
/// Cluster DNS (the `kube-dns` Service's ClusterIP).
pub const DNS_SERVICE_IP: &str = "198.19.0.10";

/// The Pods' network: a bridge with the node as gateway, host-local addresses from
/// [`POD_SUBNET`], hairpin on (a Pod reaching itself through a Service), no masquerade
/// (nothing leaves the node), and portmap for hostPorts.
pub fn cni_network(ipam_dir: &Path) -> String {
    serde_json::json!({
        "cniVersion": "1.0.0",
        "name": "lampyr-node",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": true,
                "ipMasq": false,
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{ "subnet": POD_SUBNET, "gateway": POD_GATEWAY }]],
                    "routes": [{ "dst": "0.0.0.0/0" }],
                    "dataDir": ipam_dir,
                },
            },
            { "type": "portmap", "capabilities": { "portMappings": true } },
        ],
    })
    .to_string()
}

/// What the kubelet's configuration depends on.
pub struct Kubelet<'a> {
    /// The node's address.
    pub address: Ipv4Addr,
    /// The CA that signs the API server's clients (the kubelet trusts it for its own API).
    pub client_ca: &'a Path,
    /// The cgroup every Pod goes under.
    pub cgroup_root: &'a str,
    /// containerd's socket.
    pub runtime_socket: &'a Path,
    /// Where container logs go.
    pub pod_logs_dir: &'a Path,
}

/// The kubelet's configuration: cgroup v1 with the cgroupfs driver (this machine's
/// hierarchy is v1, which kubelet ≥ 1.35 refuses without `failCgroupV1: false`), cluster
/// DNS, client-certificate authentication, no host resolver (nothing leaves the node),
/// and eviction thresholds that only a disk about to fill trips (a shared test disk is
/// often fuller than the 10-15 % a kubelet keeps free by default; evicting the imported
/// images would leave Pods nothing to run).
pub fn kubelet(k: &Kubelet<'_>) -> String {
    serde_json::json!({
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": k.address.to_string(),
        "port": 10250,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 10248,
        "authentication": {
            "anonymous": { "enabled": false },
            "webhook": { "enabled": false },
            "x509": { "clientCAFile": k.client_ca },
        },
        "authorization": { "mode": "AlwaysAllow" },
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": k.cgroup_root,
        "failCgroupV1": false,
        "failSwapOn": false,
        "containerRuntimeEndpoint": format!("unix://{}", k.runtime_socket.display()),
        "clusterDNS": [DNS_SERVICE_IP],
        "clusterDomain": "cluster.local",
        "resolvConf": "",
        "podLogsDir": k.pod_logs_dir,
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "256Mi",
            "nodefs.inodesFree": "1%",
            "imagefs.available": "256Mi",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": false,
        "rotateCertificates": false,
        "syncFrequency": "10s",
    })
    .to_string()
}

/// kube-proxy's configuration: iptables mode, NodePorts on the node's address only,
/// conntrack left as the machine has it.
pub fn kube_proxy(kubeconfig: &Path, node_name: &str, address: Ipv4Addr) -> String {
    serde_json::json!({
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": { "kubeconfig": kubeconfig },
        "hostnameOverride": node_name,
        "mode": "iptables",
        "clusterCIDR": CLUSTER_CIDR,
        "nodePortAddresses": [format!("{address}/32")],
        "healthzBindAddress": "127.0.0.1:10256",
        "metricsBindAddress": "127.0.0.1:10249",
        "oomScoreAdj": 0,
        "conntrack": { "maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s" },
    })
    .to_string()
}
