//! The cluster's fleet key: read from `default/lampyr-fiberd-seal-key`, or
//! created there by the first deploy after an install.

use lampyr_api::keys::{FLEET_KEY_SECRET_KEY, FLEET_KEY_SECRET_NAME, FLEET_KEY_SECRET_NAMESPACE};
use lampyr_fiber::seal::{FleetKey, FleetPublicKey};
use serde_json::json;

use super::DeployError;
use crate::commands::cluster::ClusterError;
use crate::commands::cluster::kubectl::Kubectl;
use crate::ui::Ui;

/// The fleet key Secret's current key, creating the Secret with a new key when it is absent.
pub fn get_or_create(kubectl: &Kubectl, ui: &mut Ui) -> Result<FleetKey, DeployError> {
    if let Some(key) = read(kubectl)? {
        return Ok(key);
    }
    ui.step(format!("creating the fleet key (Secret {FLEET_KEY_SECRET_NAMESPACE}/{FLEET_KEY_SECRET_NAME})"));
    let key = FleetKey::generate();
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {
            "name": FLEET_KEY_SECRET_NAME, "namespace": FLEET_KEY_SECRET_NAMESPACE,
            "labels": { "app.kubernetes.io/part-of": "lampyr", "app.kubernetes.io/managed-by": "ly" },
        },
        "stringData": { FLEET_KEY_SECRET_KEY: key.to_secret_string() },
    });
    // Through stdin, so the private key never appears on a command line.
    match kubectl.run(&["create", "-f", "-", "-o", "name"], Some(&secret.to_string())) {
        Ok(_) => Ok(key),
        // Another deploy created it first: use theirs.
        Err(e) if e.to_string().contains("AlreadyExists") => read(kubectl)?.ok_or(DeployError::FleetKey(e.to_string())),
        Err(e) => Err(ClusterError::from(e).into()),
    }
}

/// The key in the fleet key Secret, if the Secret exists.
fn read(kubectl: &Kubectl) -> Result<Option<FleetKey>, DeployError> {
    let template = format!("--template={{{{index .data \"{FLEET_KEY_SECRET_KEY}\" | base64decode}}}}");
    let secret = format!("secret/{FLEET_KEY_SECRET_NAME}");
    let args = ["get", secret.as_str(), "-n", FLEET_KEY_SECRET_NAMESPACE, "--ignore-not-found", "-o", "go-template", &template];
    let text = kubectl.run(&args, None).map_err(ClusterError::from)?;
    if text.trim().is_empty() {
        return Ok(None);
    }
    FleetKey::parse(&text).map(Some).map_err(|e| {
        DeployError::FleetKey(format!(
            "Secret {FLEET_KEY_SECRET_NAMESPACE}/{FLEET_KEY_SECRET_NAME} does not hold a fleet key ({e}); \
             delete it and deploy again (templates sealed to it will no longer open)"
        ))
    })
}

/// A short, public name of a fleet key: the first 16 hex digits of the SHA-256 of its public half.
pub fn fingerprint(public: &FleetPublicKey) -> String {
    let digest = lampyr_fiber::artifact::layout::sha256_digest(public.to_string().as_bytes());
    digest["sha256:".len().."sha256:".len() + 16].to_string()
}
