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

/// Environment variable holding such certificate authorities themselves (PEM text), as the
/// installation gives them to lampyr-controller and grant Pods; [`CA_FILE_ENV`] wins.
pub const CA_PEM_ENV: &str = "LAMPYR_REGISTRY_CA_PEM";

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
    /// A pull Secret does not hold a Docker config.
    #[error("pull Secret {secret} cannot be used: {detail}")]
    PullSecret {
        /// The Secret, `namespace/name`.
        secret: String,
        /// What is wrong with it.
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

/// How a Kubernetes pull Secret holds its Docker config.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PullSecretFormat {
    /// `kubernetes.io/dockerconfigjson`: a `config.json` document under `.dockerconfigjson`.
    ConfigJson,
    /// `kubernetes.io/dockercfg`: the older `~/.dockercfg`, just the `auths` map, under `.dockercfg`.
    Dockercfg,
}

/// One pull Secret's content, for [`Credentials::from_pull_secrets`].
#[derive(Clone, Copy, Debug)]
pub struct PullSecret<'a> {
    /// The Secret, `namespace/name`, for messages.
    pub name: &'a str,
    /// How it holds its config.
    pub format: PullSecretFormat,
    /// The config's bytes.
    pub data: &'a [u8],
}

impl Credentials {
    /// The credentials of a workload's pull Secrets taken together: for each registry, the
    /// first Secret that names it (the order a kubelet tries a Pod's). Anonymous when there
    /// are none.
    pub fn from_pull_secrets(secrets: &[PullSecret<'_>]) -> Result<Credentials, CredentialError> {
        if secrets.is_empty() {
            return Ok(Credentials::Anonymous);
        }
        let mut auths = serde_json::Map::new();
        for secret in secrets {
            let unusable = |detail: String| CredentialError::PullSecret { secret: secret.name.to_string(), detail };
            let document: serde_json::Value =
                serde_json::from_slice(secret.data).map_err(|e| unusable(format!("it is not a Docker config (JSON): {e}")))?;
            let entries = match secret.format {
                PullSecretFormat::ConfigJson => document.get("auths").cloned().unwrap_or_else(|| serde_json::json!({})),
                PullSecretFormat::Dockercfg => document,
            };
            let serde_json::Value::Object(entries) = entries else {
                return Err(unusable("its registries (`auths`) are not a JSON object".into()));
            };
            for (registry, entry) in entries {
                auths.entry(registry).or_insert(entry);
            }
        }
        let merged = serde_json::to_vec(&serde_json::json!({ "auths": auths })).unwrap_or_default();
        Ok(Credentials::ConfigJson(Arc::new(merged)))
    }
}

/// The certificate authorities (PEM) in `path`, checked to hold at least one certificate.
pub fn read_ca_file(path: &Path) -> Result<Vec<u8>, CredentialError> {
    let failed = |detail: String| CredentialError::CaFile { path: path.to_path_buf(), detail };
    let pem = std::fs::read(path).map_err(|e| failed(e.to_string()))?;
    check_pem(pem).map_err(failed)
}

/// The certificate authorities [`CA_FILE_ENV`] names, else those [`CA_PEM_ENV`] holds, if either is set.
pub fn ca_from_environment() -> Result<Option<Vec<u8>>, CredentialError> {
    if let Some(path) = std::env::var_os(CA_FILE_ENV).filter(|v| !v.is_empty()) {
        return read_ca_file(Path::new(&path)).map(Some);
    }
    match std::env::var(CA_PEM_ENV).ok().filter(|v| !v.trim().is_empty()) {
        Some(pem) => check_pem(pem.into_bytes())
            .map(Some)
            .map_err(|detail| CredentialError::CaFile { path: PathBuf::from(format!("${CA_PEM_ENV}")), detail }),
        None => Ok(None),
    }
}

/// `pem` if it holds at least one PEM certificate.
fn check_pem(pem: Vec<u8>) -> Result<Vec<u8>, String> {
    if String::from_utf8_lossy(&pem).contains("-----BEGIN CERTIFICATE-----") { Ok(pem) } else { Err("it holds no PEM certificate".into()) }
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
    fn pull_secrets_combine_and_the_first_naming_a_registry_wins() {
        // "alice:s3cret", "bob:other"
        let first = br#"{"auths": {"a.example": {"auth": "YWxpY2U6czNjcmV0"}}}"#;
        let legacy = br#"{"a.example": {"auth": "Ym9iOm90aGVy"}, "b.example": {"auth": "Ym9iOm90aGVy"}}"#;
        let secrets = [
            PullSecret { name: "ns/first", format: PullSecretFormat::ConfigJson, data: first },
            PullSecret { name: "ns/legacy", format: PullSecretFormat::Dockercfg, data: legacy },
        ];
        let creds = Credentials::from_pull_secrets(&secrets).expect("usable");
        let user = |registry: &str| match creds.for_registry(registry).expect("resolves") {
            RegistryAuth::Basic(user, _) => user,
            other => panic!("expected basic credentials for {registry}, got {other:?}"),
        };
        assert_eq!(user("a.example"), "alice", "the first Secret naming a registry wins");
        assert_eq!(user("b.example"), "bob", "a later Secret adds registries");
        assert!(matches!(creds.for_registry("c.example"), Ok(RegistryAuth::Anonymous)));
        assert!(matches!(Credentials::from_pull_secrets(&[]), Ok(Credentials::Anonymous)));
    }

    #[test]
    fn a_pull_secret_that_is_not_a_docker_config_is_named() {
        let bad = [PullSecret { name: "ns/regcred", format: PullSecretFormat::ConfigJson, data: b"user=alice" }];
        let message = Credentials::from_pull_secrets(&bad).expect_err("not JSON").to_string();
        assert!(message.contains("ns/regcred") && message.contains("Docker config"), "{message}");
        let list = [PullSecret { name: "ns/list", format: PullSecretFormat::Dockercfg, data: b"[1]" }];
        assert!(Credentials::from_pull_secrets(&list).expect_err("not a map").to_string().contains("ns/list"));
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
