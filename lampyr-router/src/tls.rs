//! TLS termination for KIngress `spec.tls`: certificates parsed from Secrets,
//! held by host in the route table, and chosen per connection by SNI.
//!
//! A certificate is looked up by the client's SNI name: the exact host first,
//! then a wildcard one level up (`*.ns.example.com` for `a.ns.example.com`).
//! A client that sends no SNI name, or one no KIngress covers, gets no
//! certificate and the handshake fails: the router never answers with a
//! certificate for some other host. The table is replaced on every change, so
//! a rotated Secret is served from the next handshake on, without a restart.

use std::collections::HashMap;
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use crate::server::Router;

/// The Secret entry holding the PEM certificate chain (leaf first).
pub const CERTIFICATE_KEY: &str = "tls.crt";
/// The Secret entry holding the PEM private key.
pub const PRIVATE_KEY_KEY: &str = "tls.key";

/// Why a Secret's certificate cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum CertificateError {
    /// An entry the Secret must have is absent.
    #[error("it has no {0:?} entry")]
    MissingEntry(&'static str),
    /// `tls.crt` holds no PEM certificate.
    #[error("{CERTIFICATE_KEY:?} holds no PEM certificate")]
    NoCertificate,
    /// `tls.crt` is not valid PEM.
    #[error("{CERTIFICATE_KEY:?} is not a PEM certificate chain: {0}")]
    BadCertificate(String),
    /// `tls.key` is not a PEM private key.
    #[error("{PRIVATE_KEY_KEY:?} is not a PEM private key: {0}")]
    BadKey(String),
    /// The key is of a kind the router cannot sign with, or does not match the certificate.
    #[error("{PRIVATE_KEY_KEY:?} cannot serve {CERTIFICATE_KEY:?}: {0}")]
    Unusable(rustls::Error),
}

/// The crypto provider Lampyr links (`ring`, as kube's client uses).
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The certificate chain and key of a `kubernetes.io/tls` Secret's entries, checked to
/// belong together.
pub fn certified_key(certificate_pem: &[u8], key_pem: &[u8]) -> Result<CertifiedKey, CertificateError> {
    let chain = CertificateDer::pem_slice_iter(certificate_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| CertificateError::BadCertificate(e.to_string()))?;
    if chain.is_empty() {
        return Err(CertificateError::NoCertificate);
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| CertificateError::BadKey(e.to_string()))?;
    CertifiedKey::from_der(chain, key, &provider()).map_err(CertificateError::Unusable)
}

/// Certificates by the host names they are served for.
#[derive(Clone, Default)]
pub struct Certificates {
    by_host: HashMap<String, Arc<CertifiedKey>>,
}

impl Certificates {
    /// Serves `key` for `host` (a DNS name or `*.suffix`, any case) unless a certificate
    /// is set for it already: the first wins, and `false` says this one was not added.
    pub fn insert(&mut self, host: &str, key: Arc<CertifiedKey>) -> bool {
        match self.by_host.entry(host.to_ascii_lowercase()) {
            std::collections::hash_map::Entry::Occupied(_) => false,
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(key);
                true
            }
        }
    }

    /// The certificate for SNI name `server_name`: its own, else its parent's wildcard.
    pub fn lookup(&self, server_name: &str) -> Option<Arc<CertifiedKey>> {
        let name = server_name.trim_end_matches('.').to_ascii_lowercase();
        if let Some(key) = self.by_host.get(&name) {
            return Some(Arc::clone(key));
        }
        let (_, parent) = name.split_once('.')?;
        self.by_host.get(&format!("*.{parent}")).cloned()
    }

    /// How many hosts have a certificate.
    pub fn len(&self) -> usize {
        self.by_host.len()
    }

    /// Whether no host has a certificate.
    pub fn is_empty(&self) -> bool {
        self.by_host.is_empty()
    }
}

/// Picks each connection's certificate from the router's current table.
struct SniResolver {
    router: Arc<Router>,
}

impl std::fmt::Debug for SniResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SniResolver").finish_non_exhaustive()
    }
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let Some(name) = hello.server_name() else {
            tracing::debug!("TLS client sent no server name; no certificate to offer");
            return None;
        };
        let found = self.router.table().certificates().lookup(name);
        if found.is_none() {
            tracing::debug!(server_name = name, "no KIngress has a certificate for this name");
        }
        found
    }
}

/// The TLS settings of `router`'s HTTPS listeners: TLS 1.2 and 1.3, HTTP/2 or HTTP/1.1
/// by ALPN, certificates by SNI from the route table.
pub fn server_config(router: Arc<Router>) -> Result<Arc<rustls::ServerConfig>, rustls::Error> {
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(SniResolver { router }));
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn self_signed(host: &str) -> (String, String) {
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = rcgen::CertificateParams::new(vec![host.to_string()]).expect("params").self_signed(&key).expect("cert");
        (cert.pem(), key.serialize_pem())
    }

    #[test]
    fn a_matching_pair_is_served_and_a_mismatched_or_malformed_one_says_why() {
        let (cert, key) = self_signed("a.example.com");
        let (_, other_key) = self_signed("b.example.com");
        assert!(certified_key(cert.as_bytes(), key.as_bytes()).is_ok());
        let mismatch = certified_key(cert.as_bytes(), other_key.as_bytes()).expect_err("keys differ");
        assert!(matches!(mismatch, CertificateError::Unusable(_)), "{mismatch}");
        assert!(matches!(certified_key(b"", key.as_bytes()), Err(CertificateError::NoCertificate)));
        let garbled = cert.replace("MII", "!!!");
        assert!(matches!(certified_key(garbled.as_bytes(), key.as_bytes()), Err(CertificateError::BadCertificate(_))));
        assert!(matches!(certified_key(cert.as_bytes(), b"not a key"), Err(CertificateError::BadKey(_))));
    }

    #[test]
    fn names_match_exactly_then_by_wildcard_and_the_first_certificate_wins() {
        let (cert, key) = self_signed("x");
        let key = Arc::new(certified_key(cert.as_bytes(), key.as_bytes()).expect("pair"));
        let (cert2, key2) = self_signed("y");
        let second = Arc::new(certified_key(cert2.as_bytes(), key2.as_bytes()).expect("pair"));
        let mut certs = Certificates::default();
        assert!(certs.insert("Hello.NS.example.com", Arc::clone(&key)));
        assert!(!certs.insert("hello.ns.example.com", Arc::clone(&second)), "first wins");
        assert!(certs.insert("*.ns.example.com", Arc::clone(&second)));
        let is = |name: &str, want: &Arc<CertifiedKey>| certs.lookup(name).is_some_and(|k| Arc::ptr_eq(&k, want));
        assert!(is("hello.ns.example.com", &key));
        assert!(is("HELLO.ns.example.com.", &key), "case and a trailing dot do not matter");
        assert!(is("other.ns.example.com", &second), "the wildcard covers one label");
        assert!(certs.lookup("a.b.ns.example.com").is_none(), "a wildcard covers exactly one label");
        assert!(certs.lookup("ns.example.com").is_none());
        assert_eq!(certs.len(), 2);
    }
}
