//! Pushing a layout's image to a registry byte for byte (blobs with
//! `push_blob`, the manifest's stored bytes with `push_manifest_raw`: the
//! typed `push` re-serialises the manifest and would change its digest), and
//! where an image goes under another registry.

use std::str::FromStr;

use http::HeaderValue;
use oci_client::Reference;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::OciDistributionError;

use crate::Error;
use crate::layout::{read_blob, read_layout};

const MT_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

/// Pushes the image of `layout` to `reference` (`registry/path:tag`), over
/// plain HTTP when `plain_http`, anonymously; blobs the repository holds are
/// not sent again. Returns `registry/path@sha256:…`.
pub async fn push(layout: &std::path::Path, reference: &str, plain_http: bool) -> Result<String, Error> {
    let image = read_layout(layout)?;
    let invalid = |reason: &str| Error::Spec { image: reference.to_string(), reason: reason.to_string() };
    let target = Reference::from_str(reference).map_err(|e| invalid(&format!("not a valid reference: {e}")))?;
    if target.tag().is_none() || target.digest().is_some() {
        return Err(invalid("push to a tag (registry/path:tag), not a digest"));
    }
    let registry = target.registry().to_string();
    let protocol = if plain_http { ClientProtocol::HttpsExcept(vec![registry.clone()]) } else { ClientProtocol::Https };
    let config = ClientConfig { protocol, use_monolithic_push: true, ..ClientConfig::default() };
    let fail =
        |action: String| move |e: OciDistributionError| Error::Registry { reference: reference.to_string(), action, source: Box::new(e) };
    let client = lampyr_artifact::registry::oci_client(config).map_err(fail("creating the client".into()))?;
    let repository = target.repository().to_string();
    for blob in std::iter::once(image.manifest.config()).chain(image.manifest.layers()) {
        let digest = blob.digest().to_string();
        let at = Reference::with_digest(registry.clone(), repository.clone(), digest.clone());
        if client.blob_exists(&at, &digest).await.map_err(fail(format!("checking for blob {digest}")))? {
            continue;
        }
        let bytes = read_blob(layout, &digest)?;
        tracing::info!(%digest, bytes = bytes.len(), "pushing blob to {registry}/{repository}");
        client.push_blob(&at, bytes, &digest).await.map_err(fail(format!("pushing blob {digest}")))?;
    }
    let content_type = HeaderValue::from_static(MT_MANIFEST);
    client
        .push_manifest_raw(&target, image.manifest_bytes, content_type)
        .await
        .map_err(fail(format!("pushing manifest {}", image.manifest_digest)))?;
    Ok(format!("{registry}/{repository}@{}", image.manifest_digest))
}

/// Where `reference` goes under `registry` (`http://host:port[/prefix]` for
/// plain HTTP, `host[:port][/prefix]` or `https://…` for TLS): its registry
/// host is replaced and its path kept, as a registry mirror serves it
/// (`ghcr.io/hyperlight-dev/lampyr/fiberd:preview` under `http://127.0.0.1:5000`
/// is `127.0.0.1:5000/hyperlight-dev/lampyr/fiberd:preview`). Returns the
/// reference and whether the registry speaks plain HTTP.
pub fn mirror_reference(registry: &str, reference: &str) -> Result<(String, bool), Error> {
    let (plain_http, host) = match registry.split_once("://") {
        Some(("http", rest)) => (true, rest),
        Some(("https", rest)) => (false, rest),
        _ if registry.contains("://") => {
            return Err(Error::Spec {
                image: reference.into(),
                reason: format!("registry {registry:?}: only http:// and https:// are known"),
            });
        }
        _ => (false, registry),
    };
    let host = host.trim_end_matches('/');
    let path = reference.split_once('/').map(|(_, path)| path).filter(|p| !p.is_empty() && !host.is_empty());
    let path = path.ok_or_else(|| Error::Spec {
        image: reference.into(),
        reason: format!("cannot place it under registry {registry:?} (expected REGISTRY/PATH:TAG and a registry host)"),
    })?;
    Ok((format!("{host}/{path}"), plain_http))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mirror_keeps_the_repository_path() {
        let fiberd = "ghcr.io/hyperlight-dev/lampyr/fiberd:preview";
        assert_eq!(
            mirror_reference("http://127.0.0.1:5000", fiberd).expect("maps"),
            ("127.0.0.1:5000/hyperlight-dev/lampyr/fiberd:preview".to_string(), true)
        );
        let webhook = "gcr.io/knative-releases/knative.dev/serving/cmd/webhook:v1.15.2";
        assert_eq!(
            mirror_reference("registry.example.com/mirror/", webhook).expect("maps"),
            ("registry.example.com/mirror/knative-releases/knative.dev/serving/cmd/webhook:v1.15.2".to_string(), false)
        );
        assert!(!mirror_reference("https://r.example:443", fiberd).expect("maps").1);
    }

    #[test]
    fn unusable_registries_are_refused() {
        for (registry, reference) in [("ftp://x", "ghcr.io/a/b:c"), ("http://", "ghcr.io/a/b:c"), ("r.example", "b:c")] {
            let error = mirror_reference(registry, reference).expect_err(registry).to_string();
            assert!(error.contains(reference), "{error}");
        }
    }
}
