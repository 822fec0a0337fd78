//! Every replica routes a KIngress before any says it is Ready: before a replica writes a
//! KIngress `Ready`, it probes each ready endpoint of the router's own Service (Knative's
//! network probe, as Kourier probes its gateways: `K-Network-Probe: probe`,
//! `K-Network-Hash: override`, the KIngress's host) and accepts only when every replica
//! answers with the KIngress's hash, i.e. has programmed this very spec. Without it, a
//! request that kube-proxy sends to a replica still behind gets 404 after the Route
//! reported Ready.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Empty;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Client;
use kube::api::{Api, ListParams};

/// The Knative probe headers (`K-Network-Probe`, `K-Network-Hash`).
pub const PROBE_HEADER: &str = "k-network-probe";
/// See [`PROBE_HEADER`].
pub const HASH_HEADER: &str = "k-network-hash";
/// The hash value asking a router for the hash of the KIngress it has programmed for the host.
pub const OVERRIDE: &str = "override";
/// How long one replica may take to answer a probe.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// The router's own Service, whose endpoints are its replicas.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peers {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub service: String,
    /// The name of its port that reaches the internal listener (`http`).
    pub port_name: String,
}

/// Why the replicas are not all known to route a KIngress yet.
#[derive(Debug, thiserror::Error)]
pub enum NotYet {
    /// The endpoints could not be listed.
    #[error("listing the router's endpoints: {0}")]
    Endpoints(#[from] kube::Error),
    /// A replica did not answer, or answered with another hash.
    #[error("replica {replica} {what}")]
    Behind {
        /// The replica's address.
        replica: SocketAddr,
        /// What it answered.
        what: String,
    },
}

impl Peers {
    /// The ready replicas' internal listeners.
    pub async fn replicas(&self, client: &Client) -> Result<Vec<SocketAddr>, kube::Error> {
        let api: Api<EndpointSlice> = Api::namespaced(client.clone(), &self.namespace);
        let selector = format!("kubernetes.io/service-name={}", self.service);
        let slices = api.list(&ListParams::default().labels(&selector)).await?;
        let mut out = Vec::new();
        for slice in &slices.items {
            let port = slice.ports.iter().flatten().find(|p| p.name.as_deref() == Some(self.port_name.as_str())).and_then(|p| p.port);
            let Some(port) = port.and_then(|p| u16::try_from(p).ok()) else { continue };
            for endpoint in slice.endpoints.iter().flatten() {
                if endpoint.conditions.as_ref().and_then(|c| c.ready) == Some(false) {
                    continue;
                }
                out.extend(endpoint.addresses.iter().filter_map(|a| a.parse::<IpAddr>().ok()).map(|ip| SocketAddr::new(ip, port)));
            }
        }
        out.sort();
        out.dedup();
        Ok(out)
    }

    /// `Ok` once every ready replica answers a probe for `host` with `hash`.
    pub async fn all_route(&self, client: &Client, host: &str, hash: &str) -> Result<(), NotYet> {
        let http: HttpClient<HttpConnector, Empty<Bytes>> = HttpClient::builder(TokioExecutor::new()).build_http();
        for replica in self.replicas(client).await? {
            let behind = |what: String| NotYet::Behind { replica, what };
            let request = http::Request::get(format!("http://{replica}/"))
                .header(http::header::HOST, host)
                .header(PROBE_HEADER, "probe")
                .header(HASH_HEADER, OVERRIDE)
                .body(Empty::new())
                .map_err(|e| behind(format!("cannot be probed: {e}")))?;
            let answer = tokio::time::timeout(PROBE_TIMEOUT, http.request(request))
                .await
                .map_err(|_| behind(format!("did not answer within {PROBE_TIMEOUT:?}")))?
                .map_err(|e| behind(format!("did not answer: {e}")))?;
            let got = answer.headers().get(HASH_HEADER).and_then(|v| v.to_str().ok()).unwrap_or_default();
            if !answer.status().is_success() || got != hash {
                return Err(behind(format!("answered {} with hash {got:?}, not this spec's {hash}", answer.status())));
            }
        }
        Ok(())
    }
}
