//! The proxy headers the router adds as the first hop in front of a Revision, as
//! Knative's ingress and queue-proxy give a container: `X-Forwarded-For` (the client's
//! address appended), `X-Forwarded-Proto` (the scheme it arrived on, unless a proxy in
//! front said), and `Forwarded` (RFC 7239, built from those when the request has none,
//! else extended by this hop).

use std::net::IpAddr;

use http::HeaderMap;
use http::header::{FORWARDED, HeaderValue};

const X_FORWARDED_FOR: &str = "x-forwarded-for";
const X_FORWARDED_PROTO: &str = "x-forwarded-proto";

/// An address as a `Forwarded` node: IPv6 quoted and bracketed (RFC 7239 §6).
fn node(address: &str) -> String {
    match address.parse::<IpAddr>() {
        Ok(IpAddr::V6(v6)) => format!("\"[{v6}]\""),
        Ok(IpAddr::V4(v4)) => v4.to_string(),
        Err(_) => format!("\"{}\"", address.replace(['"', '\\'], "")),
    }
}

/// This hop's proxy headers for the requests of one client connection, made once: a request
/// that brings none of them gets copies; one that does is extended by [`add`].
#[derive(Debug)]
pub struct Hop {
    peer: IpAddr,
    proto: &'static str,
    /// `X-Forwarded-For`, `X-Forwarded-Proto` and `Forwarded` for a request without them
    /// (each as [`add`] makes it; one it could not make is left out, as `add` leaves it).
    first: Vec<(&'static str, HeaderValue)>,
}

impl Hop {
    /// The headers for requests from `peer` arriving over `proto`.
    pub fn new(peer: IpAddr, proto: &'static str) -> Self {
        let mut fresh = HeaderMap::new();
        add(&mut fresh, peer, proto);
        let first = [X_FORWARDED_FOR, X_FORWARDED_PROTO, FORWARDED.as_str()]
            .into_iter()
            .filter_map(|name| Some((name, fresh.get(name)?.clone())))
            .collect();
        Hop { peer, proto, first }
    }

    /// Adds this hop's headers to `headers`, as [`add`] does.
    pub fn add_to(&self, headers: &mut HeaderMap) {
        if self.first.iter().any(|(name, _)| headers.contains_key(*name)) {
            return add(headers, self.peer, self.proto);
        }
        for (name, value) in &self.first {
            headers.insert(*name, value.clone());
        }
    }
}

/// Adds this hop's proxy headers for a request from `peer` that arrived over `proto`.
pub fn add(headers: &mut HeaderMap, peer: IpAddr, proto: &str) {
    let chain = match headers.get(X_FORWARDED_FOR).and_then(|v| v.to_str().ok()).filter(|v| !v.trim().is_empty()) {
        Some(before) => format!("{before}, {peer}"),
        None => peer.to_string(),
    };
    let proto = match headers.get(X_FORWARDED_PROTO).and_then(|v| v.to_str().ok()).filter(|v| !v.is_empty()) {
        Some(given) => given.to_string(),
        None => proto.to_string(),
    };
    let forwarded = match headers.get(FORWARDED).and_then(|v| v.to_str().ok()).filter(|v| !v.trim().is_empty()) {
        Some(before) => format!("{before}, for={};proto={proto}", node(&peer.to_string())),
        None => chain.split(',').map(|a| format!("for={};proto={proto}", node(a.trim()))).collect::<Vec<_>>().join(", "),
    };
    for (name, value) in [(X_FORWARDED_FOR, chain), (X_FORWARDED_PROTO, proto), (FORWARDED.as_str(), forwarded)] {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(name, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get<'a>(h: &'a HeaderMap, name: &str) -> &'a str {
        h.get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
    }

    #[test]
    fn the_first_hop_sets_all_three() {
        let mut h = HeaderMap::new();
        add(&mut h, "198.18.0.1".parse().unwrap_or(IpAddr::from([0, 0, 0, 0])), "http");
        assert_eq!(get(&h, X_FORWARDED_FOR), "198.18.0.1");
        assert_eq!(get(&h, X_FORWARDED_PROTO), "http");
        assert_eq!(get(&h, "forwarded"), "for=198.18.0.1;proto=http");
    }

    #[test]
    fn a_connections_hop_adds_what_add_adds() {
        let peer: IpAddr = "198.18.0.1".parse().unwrap_or(IpAddr::from([0, 0, 0, 0]));
        let hop = Hop::new(peer, "https");
        let given = [(X_FORWARDED_FOR, "203.0.113.7"), (FORWARDED.as_str(), "for=192.0.2.60;proto=http"), (X_FORWARDED_PROTO, "")];
        let requests = [None, Some(given[0]), Some(given[1]), Some(given[2])];
        for request in requests {
            let mut expected = HeaderMap::new();
            if let Some((name, value)) = request {
                expected.insert(name, HeaderValue::from_static(value));
            }
            let mut actual = expected.clone();
            add(&mut expected, peer, "https");
            hop.add_to(&mut actual);
            assert_eq!(actual, expected, "request bringing {request:?}");
        }
    }

    #[test]
    fn a_proxy_in_front_is_kept_and_extended_and_ipv6_is_quoted() {
        let mut h = HeaderMap::new();
        h.insert(X_FORWARDED_FOR, HeaderValue::from_static("203.0.113.7"));
        h.insert(X_FORWARDED_PROTO, HeaderValue::from_static("https"));
        add(&mut h, "::1".parse().unwrap_or(IpAddr::from([0, 0, 0, 0])), "http");
        assert_eq!(get(&h, X_FORWARDED_FOR), "203.0.113.7, ::1");
        assert_eq!(get(&h, X_FORWARDED_PROTO), "https", "the scheme the client used, as the proxy in front said");
        assert_eq!(get(&h, "forwarded"), "for=203.0.113.7;proto=https, for=\"[::1]\";proto=https");

        let mut h = HeaderMap::new();
        h.insert(FORWARDED, HeaderValue::from_static("for=192.0.2.60;proto=https;by=203.0.113.43"));
        add(&mut h, "198.18.0.1".parse().unwrap_or(IpAddr::from([0, 0, 0, 0])), "http");
        assert_eq!(get(&h, "forwarded"), "for=192.0.2.60;proto=https;by=203.0.113.43, for=198.18.0.1;proto=http");
    }
}
