//! The environment's certificates: a CA, the API server's serving certificate,
//! an admin client certificate and the service-account signing key, as PEM files.

use std::fs;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// Paths of the PEM files [`write`] creates.
pub struct Pki {
    /// The CA certificate clients trust and the API server checks client certificates against.
    pub ca_cert: PathBuf,
    /// The API server's serving certificate (`127.0.0.1`, `localhost`).
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
}

/// The admin user's name in the client certificate (`CN`).
pub const ADMIN_USER: &str = "lampyr-admin";

/// Generates fresh keys and certificates (ECDSA P-256) into `dir`.
pub fn write(dir: &Path) -> Result<Pki, String> {
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
    let mut server = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
        .map_err(|e| failed("server certificate", e))?;
    server.distinguished_name.push(DnType::CommonName, "kube-apiserver");
    server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let server_cert = server.signed_by(&server_key, &issuer).map_err(|e| failed("server certificate", e))?;

    let admin_key = KeyPair::generate().map_err(|e| failed("admin key", e))?;
    let mut admin = CertificateParams::default();
    admin.distinguished_name = rcgen::DistinguishedName::new();
    admin.distinguished_name.push(DnType::OrganizationName, "system:masters");
    admin.distinguished_name.push(DnType::CommonName, ADMIN_USER);
    admin.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let admin_cert = admin.signed_by(&admin_key, &issuer).map_err(|e| failed("admin certificate", e))?;

    let sa_key = KeyPair::generate().map_err(|e| failed("service-account key", e))?;

    let pki = Pki {
        ca_cert: path("ca.crt"),
        server_cert: path("apiserver.crt"),
        server_key: path("apiserver.key"),
        admin_cert: path("admin.crt"),
        admin_key: path("admin.key"),
        sa_key: path("sa.key"),
        sa_pub: path("sa.pub"),
    };
    for (file, pem) in [
        (&pki.ca_cert, ca_cert.pem()),
        (&pki.server_cert, server_cert.pem()),
        (&pki.server_key, server_key.serialize_pem()),
        (&pki.admin_cert, admin_cert.pem()),
        (&pki.admin_key, admin_key.serialize_pem()),
        (&pki.sa_key, sa_key.serialize_pem()),
        (&pki.sa_pub, sa_key.public_key_pem()),
    ] {
        fs::write(file, pem).map_err(|e| format!("writing {}: {e}", file.display()))?;
    }
    Ok(pki)
}
