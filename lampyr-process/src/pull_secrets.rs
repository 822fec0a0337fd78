//! The registry credentials a workload pulls with, read as a kubelet reads a Pod's: its
//! pull Secrets, then its ServiceAccount's, in its namespace. lampyr-controller and fiberd
//! both read them this way.

use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use kube::{Api, Client};
use lampyr_artifact::credentials::{CredentialError, Credentials, PullSecret, PullSecretFormat};

/// The ServiceAccount a workload runs as when it names none.
pub const DEFAULT_SERVICE_ACCOUNT: &str = "default";

/// Why a workload's pull credentials could not be read.
#[derive(Debug, thiserror::Error)]
pub enum PullCredentialsError {
    /// The API server would not give an object (RBAC, or it is unreachable).
    #[error("cannot read {kind} {namespace}/{name} for its registry credentials: {source}")]
    Read {
        /// `Secret` or `ServiceAccount`.
        kind: &'static str,
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The API error.
        source: Box<kube::Error>,
    },
    /// A pull Secret holds no Docker config.
    #[error(
        "pull Secret {namespace}/{name} holds neither .dockerconfigjson nor .dockercfg \
         (make it with `kubectl create secret docker-registry`)"
    )]
    NoDockerConfig {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// A pull Secret's Docker config cannot be used.
    #[error(transparent)]
    Unusable(#[from] CredentialError),
}

/// The credentials for pull Secrets `names`, then the imagePullSecrets of ServiceAccount
/// `service_account` (`default` when `None`), all in `namespace`. As a kubelet does, a
/// Secret or ServiceAccount that does not exist is passed over with a warning.
pub async fn pull_credentials(
    client: &Client,
    namespace: &str,
    names: &[String],
    service_account: Option<&str>,
) -> Result<Credentials, PullCredentialsError> {
    let account = service_account.unwrap_or(DEFAULT_SERVICE_ACCOUNT);
    let mut all: Vec<String> = names.to_vec();
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    match accounts.get_opt(account).await {
        Ok(Some(found)) => all.extend(found.image_pull_secrets.into_iter().flatten().map(|r| r.name)),
        Ok(None) => tracing::warn!(%namespace, service_account = %account, "no such ServiceAccount; pulling without its imagePullSecrets"),
        Err(e) => return Err(read_failed("ServiceAccount", namespace, account, e)),
    }
    let mut seen = std::collections::HashSet::new();
    all.retain(|name| !name.is_empty() && seen.insert(name.clone()));
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let mut configs = Vec::new();
    for name in &all {
        match secrets.get_opt(name).await {
            Ok(Some(secret)) => configs.push((format!("{namespace}/{name}"), docker_config(&secret, namespace, name)?)),
            Ok(None) => tracing::warn!(%namespace, secret = %name, "no such pull Secret; passed over"),
            Err(e) => return Err(read_failed("Secret", namespace, name, e)),
        }
    }
    let pull: Vec<PullSecret<'_>> = configs.iter().map(|(name, (format, data))| PullSecret { name, format: *format, data }).collect();
    Ok(Credentials::from_pull_secrets(&pull)?)
}

/// The Docker config a pull Secret holds, and in which form.
fn docker_config(secret: &Secret, namespace: &str, name: &str) -> Result<(PullSecretFormat, Vec<u8>), PullCredentialsError> {
    let data = secret.data.as_ref();
    let found = [(".dockerconfigjson", PullSecretFormat::ConfigJson), (".dockercfg", PullSecretFormat::Dockercfg)]
        .into_iter()
        .find_map(|(key, format)| data.and_then(|d| d.get(key)).map(|bytes| (format, bytes.0.clone())));
    found.ok_or_else(|| PullCredentialsError::NoDockerConfig { namespace: namespace.to_string(), name: name.to_string() })
}

fn read_failed(kind: &'static str, namespace: &str, name: &str, source: kube::Error) -> PullCredentialsError {
    PullCredentialsError::Read { kind, namespace: namespace.to_string(), name: name.to_string(), source: Box::new(source) }
}
