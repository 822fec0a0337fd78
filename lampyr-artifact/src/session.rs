//! A client's standing with each registry: `/v2/` asked once per registry (not before
//! every request, as oci-client does once any credentials are stored for it), a pull
//! token (anonymous, or for the client's credentials) fetched once per repository where
//! the registry asks for one, basic credentials sent where it asks for those, and
//! manifest GETs bounded while they download.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::StreamExt;
use oci_client::Reference;
use oci_client::RegistryOperation;
use oci_client::errors::OciDistributionError;
use oci_client::secrets::RegistryAuth;

use crate::reference::Repository;

/// How long an anonymous pull token is reused (registries issue them for at least 60 s).
const TOKEN_REUSE: Duration = Duration::from_secs(50);
/// Bytes of an error body kept for the message.
const ERROR_BODY_BYTES: usize = 1024;

/// What a registry's `/v2/` answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Access {
    /// No challenge: requests go unauthenticated.
    Open,
    /// A `WWW-Authenticate` challenge: requests carry a token.
    Token,
}

/// Why a manifest GET gave no document.
#[derive(Debug)]
pub(crate) enum GetError {
    /// The registry did not answer, refused, or has no such manifest.
    Client(OciDistributionError),
    /// The document is larger than allowed (at least this many bytes); it was not read further.
    Oversized(u64),
}

impl From<reqwest::Error> for GetError {
    fn from(e: reqwest::Error) -> Self {
        GetError::Client(OciDistributionError::RequestError(e))
    }
}

/// Registry sessions of one client.
pub(crate) struct Sessions {
    http: reqwest::Client,
    plain_http: Vec<String>,
    access: Mutex<HashMap<String, Access>>,
    tokens: Mutex<HashMap<String, (Instant, String)>>,
}

impl Sessions {
    /// Sessions over HTTPS except to the registries in `plain_http`.
    pub(crate) fn new(plain_http: Vec<String>, connect: Duration, read: Duration, ca_pem: Option<&[u8]>) -> Result<Self, reqwest::Error> {
        let mut builder = reqwest::Client::builder().connect_timeout(connect).read_timeout(read);
        if let Some(pem) = ca_pem {
            builder = builder.tls_certs_merge(reqwest::Certificate::from_pem_bundle(pem)?);
        }
        let http = builder.build()?;
        Ok(Sessions { http, plain_http, access: Mutex::default(), tokens: Mutex::default() })
    }

    /// GETs manifest `digest` of `repo` accepting `media_type`, reading at most `max` bytes.
    pub(crate) async fn manifest(
        &self,
        client: &oci_client::Client,
        auth: &RegistryAuth,
        repo: &Repository,
        digest: &str,
        media_type: &str,
        max: u64,
    ) -> Result<Vec<u8>, GetError> {
        let url = format!("{}/v2/{}/manifests/{digest}", self.base(&repo.registry), repo.path);
        let mut request = self.http.get(&url).header(reqwest::header::ACCEPT, media_type);
        match self.token(client, auth, repo, digest).await? {
            Some(token) => request = request.bearer_auth(token),
            // A registry that asks for basic authentication gets the credentials themselves.
            None if self.access(&repo.registry).await? == Access::Token => {
                if let RegistryAuth::Basic(user, password) = auth {
                    request = request.basic_auth(user, Some(password));
                }
            }
            None => {}
        }
        let response = request.send().await?;
        let status = response.status();
        if !status.is_success() {
            let body = response.bytes().await.unwrap_or_default();
            let message = String::from_utf8_lossy(&body[..body.len().min(ERROR_BODY_BYTES)]).into_owned();
            return Err(GetError::Client(OciDistributionError::ServerError { code: status.as_u16(), url, message }));
        }
        if let Some(length) = response.content_length().filter(|l| *l > max) {
            return Err(GetError::Oversized(length));
        }
        let mut body = Vec::new();
        let mut stream = response.bytes_stream();
        while let Some(chunk) = stream.next().await {
            body.extend_from_slice(&chunk?);
            if body.len() as u64 > max {
                return Err(GetError::Oversized(body.len() as u64));
            }
        }
        Ok(body)
    }

    /// The bearer token for pulling from `repo` as `auth`, when its registry asks for one.
    async fn token(
        &self,
        client: &oci_client::Client,
        auth: &RegistryAuth,
        repo: &Repository,
        digest: &str,
    ) -> Result<Option<String>, GetError> {
        if self.access(&repo.registry).await? == Access::Open {
            return Ok(None);
        }
        let key = format!("{}/{}", repo.registry, repo.path);
        if let Some((_, token)) = lock(&self.tokens).get(&key).filter(|(at, _)| at.elapsed() < TOKEN_REUSE) {
            return Ok(Some(token.clone()));
        }
        let reference = Reference::with_digest(repo.registry.clone(), repo.path.clone(), digest.to_string());
        // Stores the credentials in oci-client too, whose blob requests then carry its own
        // cached token for this repository (none for a registry that asks for basic auth).
        let token = client.auth(&reference, auth, RegistryOperation::Pull).await.map_err(GetError::Client)?;
        if let Some(token) = &token {
            lock(&self.tokens).insert(key, (Instant::now(), token.clone()));
        }
        Ok(token)
    }

    /// Whether `registry` challenges requests, asking its `/v2/` the first time only.
    async fn access(&self, registry: &str) -> Result<Access, GetError> {
        if let Some(access) = lock(&self.access).get(registry) {
            return Ok(*access);
        }
        let response = self.http.get(format!("{}/v2/", self.base(registry))).send().await?;
        let access = if response.headers().contains_key(reqwest::header::WWW_AUTHENTICATE) { Access::Token } else { Access::Open };
        lock(&self.access).insert(registry.to_string(), access);
        Ok(access)
    }

    fn base(&self, registry: &str) -> String {
        let scheme = if self.plain_http.iter().any(|r| r == registry) { "http" } else { "https" };
        format!("{scheme}://{registry}")
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
