//! The environment's certificates: a CA, the API server's serving certificate,
//! an admin client certificate and the service-account signing key, as PEM files.

use std::fs;
use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose};

/// Paths of the PEM files [`write()`] creates.
pub struct Pki {
    /// The CA certificate clients trust and the API server checks client certificates against.
    pub ca_cert: PathBuf,
    /// The API server's serving certificate (`127.0.0.1`, `localhost` and the names given).
    pub server_cert: PathBuf,
    /// Its key.
    pub server_key: PathBuf,
    /// The admin's client certificate (`O=system:masters`).
    pub admin_cert: PathBuf,
    /// Its key.
    pub admin_key: PathBuf,
    /// The key the API server signs service-account tokens with.
    pub sa_key: PathBuf,
    /// Its public half, for verifying those tokens.
    pub sa_pub: PathBuf,
    /// The CA, for issuing further client certificates ([`Pki::issue_client`]).
    issuer: Issuer<'static, KeyPair>,
}

/// The admin user's name in the client certificate (`CN`).
pub const ADMIN_USER: &str = "lampyr-admin";

/// Generates fresh keys and certificates (ECDSA P-256) into `dir`; the API server's
/// certificate also names `server_names` (its node address, its Service's names and IP).
pub fn write(dir: &Path, server_names: &[String]) -> Result<Pki, String> {
    fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let path = |name: &str| dir.join(name);
    let failed = |what: &str, e: rcgen::Error| format!("generating the {what}: {e}");

    let ca_key = KeyPair::generate().map_err(|e| failed("CA key", e))?;
    let mut ca = CertificateParams::default();
    ca.distinguished_name.push(DnType::CommonName, "lampyr-testenv-ca");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
    let ca_cert = ca.self_signed(&ca_key).map_err(|e| failed("CA certificate", e))?;
    let issuer = Issuer::new(ca, ca_key);

    let server_key = KeyPair::generate().map_err(|e| failed("server key", e))?;
    let mut names = vec!["localhost".to_string(), "127.0.0.1".to_string()];
    names.extend(server_names.iter().cloned());
    let mut server = CertificateParams::new(names).map_err(|e| failed("server certificate", e))?;
    server.distinguished_name.push(DnType::CommonName, "kube-apiserver");
    server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let server_cert = server.signed_by(&server_key, &issuer).map_err(|e| failed("server certificate", e))?;

    let (admin_cert, admin_key) = client_certificate(&issuer, Some("system:masters"), ADMIN_USER)?;
    let sa_key = KeyPair::generate().map_err(|e| failed("service-account key", e))?;

    let pki = Pki {
        ca_cert: path("ca.crt"),
        server_cert: path("apiserver.crt"),
        server_key: path("apiserver.key"),
        admin_cert: path("admin.crt"),
        admin_key: path("admin.key"),
        sa_key: path("sa.key"),
        sa_pub: path("sa.pub"),
        issuer,
    };
    for (file, pem) in [
        (&pki.ca_cert, ca_cert.pem()),
        (&pki.server_cert, server_cert.pem()),
        (&pki.server_key, server_key.serialize_pem()),
        (&pki.admin_cert, admin_cert),
        (&pki.admin_key, admin_key),
        (&pki.sa_key, sa_key.serialize_pem()),
        (&pki.sa_pub, sa_key.public_key_pem()),
    ] {
        fs::write(file, pem).map_err(|e| format!("writing {}: {e}", file.display()))?;
    }
    Ok(pki)
}

/// A client certificate and key (PEM) for user `common_name`, in group `organization` if any.
fn client_certificate(issuer: &Issuer<'_, KeyPair>, organization: Option<&str>, common_name: &str) -> Result<(String, String), String> {
    let failed = |e: rcgen::Error| format!("generating the client certificate of {common_name}: {e}");
    let key = KeyPair::generate().map_err(failed)?;
    let mut params = CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    if let Some(organization) = organization {
        params.distinguished_name.push(DnType::OrganizationName, organization);
    }
    params.distinguished_name.push(DnType::CommonName, common_name);
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let cert = params.signed_by(&key, issuer).map_err(failed)?;
    Ok((cert.pem(), key.serialize_pem()))
}

impl Pki {
    /// Issues a client certificate for user `common_name`, in group `organization` if any
    /// (a kubelet: `system:node:NAME` in `system:nodes`), written as `<file_stem>.crt` and
    /// `<file_stem>.key` beside the CA; returns their paths.
    pub fn issue_client(&self, file_stem: &str, organization: Option<&str>, common_name: &str) -> Result<(PathBuf, PathBuf), String> {
        let (cert, key) = client_certificate(&self.issuer, organization, common_name)?;
        let dir = self.ca_cert.parent().unwrap_or(Path::new("."));
        let (cert_path, key_path) = (dir.join(format!("{file_stem}.crt")), dir.join(format!("{file_stem}.key")));
        for (path, pem) in [(&cert_path, cert), (&key_path, key)] {
            fs::write(path, pem).map_err(|e| format!("writing {}: {e}", path.display()))?;
        }
        Ok((cert_path, key_path))
    }
}
