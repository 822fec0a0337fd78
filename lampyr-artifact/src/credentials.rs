//! Who a registry client is to each registry, and which certificate authorities it
//! trusts: credentials as docker and podman keep them (`config.json` `auths`, or a
//! credential helper it names), or the content of a `kubernetes.io/dockerconfigjson`
//! Secret; anonymous wherever none is configured.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use docker_credential::{CredentialRetrievalError, DockerCredential};
use oci_client::secrets::RegistryAuth;

/// Environment variable naming a PEM file of certificate authorities registries may be
/// signed by, besides the system's (for a registry with its own CA).
pub const CA_FILE_ENV: &str = "LAMPYR_REGISTRY_CA";

/// Why no credentials or CAs could be read.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// Credentials for a registry are configured but cannot be used.
    #[error("the credentials configured for registry {registry} cannot be used: {detail} (fix them with `docker login {registry}`)")]
    Unusable {
        /// The registry.
        registry: String,
        /// What is wrong with them.
        detail: String,
    },
    /// The CA file cannot be read or holds no certificate.
    #[error("cannot use {} as registry certificate authorities ({CA_FILE_ENV}): {detail}", path.display())]
    CaFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        detail: String,
    },
}

/// Where a client's registry credentials come from.
#[derive(Clone, Debug, Default)]
pub enum Credentials {
    /// None: every registry is reached anonymously.
    #[default]
    Anonymous,
    /// The user's Docker config: `$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`
    /// (a missing file means anonymous), credential helpers included.
    DockerConfig,
    /// A Docker config document's bytes (a `.dockerconfigjson` Secret's content).
    ConfigJson(Arc<Vec<u8>>),
}

impl Credentials {
    /// The credentials for `registry` (`host[:port]`): anonymous when none are configured for it.
    pub fn for_registry(&self, registry: &str) -> Result<RegistryAuth, CredentialError> {
        let found = match self {
            Credentials::Anonymous => return Ok(RegistryAuth::Anonymous),
            Credentials::DockerConfig => docker_credential::get_credential(registry),
            Credentials::ConfigJson(bytes) => docker_credential::get_credential_from_reader(bytes.as_slice(), registry),
        };
        let unusable = |detail: String| CredentialError::Unusable { registry: registry.to_string(), detail };
        match found {
            Ok(DockerCredential::UsernamePassword(user, password)) => Ok(RegistryAuth::Basic(user, password)),
            Ok(DockerCredential::IdentityToken(_)) => {
                Err(unusable("an identity token (OAuth refresh token) is not supported yet; log in with a username and password".into()))
            }
            Err(
                CredentialRetrievalError::NoCredentialConfigured
                | CredentialRetrievalError::ConfigNotFound
                | CredentialRetrievalError::ConfigReadError,
            ) if !matches!(self, Credentials::ConfigJson(_)) => Ok(RegistryAuth::Anonymous),
            Err(CredentialRetrievalError::NoCredentialConfigured) => Ok(RegistryAuth::Anonymous),
            Err(e) => Err(unusable(e.to_string())),
        }
    }
}

/// The certificate authorities (PEM) in `path`, checked to hold at least one certificate.
pub fn read_ca_file(path: &Path) -> Result<Vec<u8>, CredentialError> {
    let failed = |detail: String| CredentialError::CaFile { path: path.to_path_buf(), detail };
    let pem = std::fs::read(path).map_err(|e| failed(e.to_string()))?;
    if !String::from_utf8_lossy(&pem).contains("-----BEGIN CERTIFICATE-----") {
        return Err(failed("it holds no PEM certificate".into()));
    }
    Ok(pem)
}

/// The certificate authorities [`CA_FILE_ENV`] names, if it is set.
pub fn ca_from_environment() -> Result<Option<Vec<u8>>, CredentialError> {
    match std::env::var_os(CA_FILE_ENV).filter(|v| !v.is_empty()) {
        Some(path) => read_ca_file(Path::new(&path)).map(Some),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(json: &str) -> Credentials {
        Credentials::ConfigJson(Arc::new(json.as_bytes().to_vec()))
    }

    #[test]
    fn auths_give_basic_credentials_per_registry_and_others_are_anonymous() {
        // "alice:s3cret"
        let creds = config(r#"{"auths": {"registry.example:5000": {"auth": "YWxpY2U6czNjcmV0"}}}"#);
        match creds.for_registry("registry.example:5000").expect("configured") {
            RegistryAuth::Basic(user, password) => assert_eq!((user.as_str(), password.as_str()), ("alice", "s3cret")),
            other => panic!("expected basic credentials, got {other:?}"),
        }
        assert!(matches!(creds.for_registry("other.example").expect("not configured"), RegistryAuth::Anonymous));
        assert!(matches!(Credentials::Anonymous.for_registry("registry.example:5000"), Ok(RegistryAuth::Anonymous)));
    }

    #[test]
    fn broken_credentials_say_which_registry_and_what_to_do() {
        let creds = config(r#"{"auths": {"registry.example": {"auth": "%%%"}}}"#);
        let err = creds.for_registry("registry.example").expect_err("undecodable");
        let message = err.to_string();
        assert!(message.contains("registry.example") && message.contains("docker login"), "{message}");
        let token = config(r#"{"auths": {"registry.example": {"identitytoken": "t"}}}"#);
        assert!(token.for_registry("registry.example").expect_err("unsupported").to_string().contains("identity token"));
    }

    #[test]
    fn a_ca_file_must_hold_a_certificate() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("ca.pem");
        std::fs::write(&path, "not a certificate").expect("write");
        assert!(read_ca_file(&path).expect_err("no PEM").to_string().contains("no PEM certificate"));
        assert!(read_ca_file(&dir.path().join("absent.pem")).is_err());
    }
}
