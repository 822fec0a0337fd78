//! TLS for tests of the public edge: a CA issuing serving certificates, the
//! `kubernetes.io/tls` Secrets holding them, and an HTTPS client that trusts
//! only that CA, so a passing request proves the chain verified.

use std::net::SocketAddr;

use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose};

/// A certificate authority of the test's own.
pub struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
    key_pem: String,
}

/// A serving certificate the CA issued, with its key.
pub struct ServingCertificate {
    /// The certificate (PEM).
    pub cert_pem: String,
    /// Its private key (PEM).
    pub key_pem: String,
    /// The certificate (DER), to compare with what a server presents.
    pub der: Vec<u8>,
}

impl TestCa {
    /// A fresh CA (ECDSA P-256) called `name`.
    pub fn new(name: &str) -> Result<TestCa, String> {
        let failed = |e: rcgen::Error| format!("generating test CA {name}: {e}");
        let key = KeyPair::generate().map_err(failed)?;
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
        let cert = params.self_signed(&key).map_err(failed)?;
        Ok(TestCa { pem: cert.pem(), key_pem: key.serialize_pem(), issuer: Issuer::new(params, key) })
    }

    /// The `kubernetes.io/tls` Secret `namespace/name` holding the CA's own certificate and
    /// key: what a cert-manager CA issuer signs with.
    pub fn signing_secret(&self, namespace: &str, name: &str) -> serde_json::Value {
        ServingCertificate { cert_pem: self.pem.clone(), key_pem: self.key_pem.clone(), der: Vec::new() }.secret(namespace, name)
    }

    /// The CA certificate (PEM) clients trust.
    pub fn pem(&self) -> &str {
        &self.pem
    }

    /// A serving certificate for `hosts` (DNS names, `*.` wildcards allowed).
    pub fn issue(&self, hosts: &[&str]) -> Result<ServingCertificate, String> {
        let failed = |e: rcgen::Error| format!("issuing a certificate for {hosts:?}: {e}");
        let key = KeyPair::generate().map_err(failed)?;
        let mut params = CertificateParams::new(hosts.iter().map(|h| h.to_string()).collect::<Vec<_>>()).map_err(failed)?;
        params.distinguished_name.push(DnType::CommonName, hosts.first().copied().unwrap_or("lampyr-test"));
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params.signed_by(&key, &self.issuer).map_err(failed)?;
        Ok(ServingCertificate { cert_pem: cert.pem(), key_pem: key.serialize_pem(), der: cert.der().to_vec() })
    }
}

impl ServingCertificate {
    /// The `kubernetes.io/tls` Secret `namespace/name` holding it, as JSON to apply.
    pub fn secret(&self, namespace: &str, name: &str) -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": { "name": name, "namespace": namespace },
            "stringData": { "tls.crt": self.cert_pem, "tls.key": self.key_pem },
        })
    }
}

/// An HTTPS answer and the certificate the server presented.
#[derive(Debug)]
pub struct HttpsAnswer {
    /// Status code.
    pub status: u16,
    /// Body, as text.
    pub body: String,
    /// The leaf certificate (DER) the server presented.
    pub peer_certificate: Vec<u8>,
}

/// GETs `https://{host}{path}` from `addr`, sending `host` as SNI and Host, trusting only
/// `ca_pem`: an error when the handshake or the chain's verification fails.
pub async fn https_get(addr: SocketAddr, host: &str, path: &str, ca_pem: &str) -> Result<HttpsAnswer, String> {
    let ca = reqwest::Certificate::from_pem(ca_pem.as_bytes()).map_err(|e| format!("the test CA: {e}"))?;
    let client = crate::http_client()
        .tls_certs_only([ca])
        .tls_info(true)
        .resolve(host, addr)
        .timeout(std::time::Duration::from_secs(60))
        .build()
        .map_err(|e| format!("building an HTTPS client: {e}"))?;
    let url = format!("https://{host}:{}{path}", addr.port());
    let resp = client.get(&url).send().await.map_err(|e| format!("GET {url} at {addr}: {}", with_causes(&e)))?;
    let peer_certificate =
        resp.extensions().get::<reqwest::tls::TlsInfo>().and_then(|i| i.peer_certificate()).map(<[u8]>::to_vec).unwrap_or_default();
    let status = resp.status().as_u16();
    let body = resp.text().await.map_err(|e| format!("reading {url}: {e}"))?;
    Ok(HttpsAnswer { status, body, peer_certificate })
}

/// `error` and every error that caused it, joined by `: ` (reqwest hides TLS failures in its sources).
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}
