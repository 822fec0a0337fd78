//! The cluster's fleet key Secret (`default/lampyr-fiberd-seal-key`): read by
//! `ly cluster health` and `ly deploy`, created by the first deploy after an install.

use lampyr_api::keys::{FLEET_KEY_SECRET_KEY, FLEET_KEY_SECRET_NAME, FLEET_KEY_SECRET_NAMESPACE};
use lampyr_artifact::seal::{FleetKey, FleetPublicKey};
use serde_json::json;

use base64::prelude::{BASE64_STANDARD, Engine as _};

use super::cluster::kubectl::{Kubectl, KubectlError};
use crate::ui::Ui;

/// Why the fleet key could not be read or created.
#[derive(Debug, thiserror::Error)]
pub enum FleetKeyError {
    /// kubectl failed reading or creating the Secret.
    #[error(transparent)]
    Kubectl(#[from] KubectlError),
    /// The Secret exists but holds no usable key.
    #[error("{0}")]
    Unusable(String),
}

/// The fleet key Secret's current key, creating the Secret with a new key when it is absent.
pub fn get_or_create(kubectl: &Kubectl, ui: &mut Ui) -> Result<FleetKey, FleetKeyError> {
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
        Err(e) if e.to_string().contains("AlreadyExists") => read(kubectl)?.ok_or(FleetKeyError::Unusable(e.to_string())),
        Err(e) => Err(e.into()),
    }
}

/// What the fleet key Secret holds.
pub enum StoredKey {
    /// No Secret: no deploy since the install.
    Absent,
    /// The Secret has no data key `key`.
    NoKey,
    /// The data key holds no fleet key (why).
    Invalid(String),
    /// A fleet key.
    Key(FleetKey),
}

/// Reads the fleet key Secret.
pub fn stored(kubectl: &Kubectl) -> Result<StoredKey, KubectlError> {
    let Some(secret) = kubectl.get_json(&format!("secret/{FLEET_KEY_SECRET_NAME}"), Some(FLEET_KEY_SECRET_NAMESPACE))? else {
        return Ok(StoredKey::Absent);
    };
    let Some(encoded) = secret["data"][FLEET_KEY_SECRET_KEY].as_str() else { return Ok(StoredKey::NoKey) };
    let text = match BASE64_STANDARD.decode(encoded).map(String::from_utf8) {
        Ok(Ok(text)) => text,
        Ok(Err(e)) => return Ok(StoredKey::Invalid(e.to_string())),
        Err(e) => return Ok(StoredKey::Invalid(e.to_string())),
    };
    Ok(FleetKey::parse(&text).map_or_else(|e| StoredKey::Invalid(e.to_string()), StoredKey::Key))
}

/// The key in the fleet key Secret, if the Secret exists.
fn read(kubectl: &Kubectl) -> Result<Option<FleetKey>, FleetKeyError> {
    let why = match stored(kubectl)? {
        StoredKey::Absent => return Ok(None),
        StoredKey::Key(key) => return Ok(Some(key)),
        StoredKey::NoKey => format!("no data key \"{FLEET_KEY_SECRET_KEY}\""),
        StoredKey::Invalid(why) => why,
    };
    Err(FleetKeyError::Unusable(format!(
        "Secret {FLEET_KEY_SECRET_NAMESPACE}/{FLEET_KEY_SECRET_NAME} does not hold a fleet key ({why}); \
         delete it and deploy again (templates sealed to it will no longer open)"
    )))
}

/// A short, public name of a fleet key: the first 16 hex digits of the SHA-256 of its public half.
pub fn fingerprint(public: &FleetPublicKey) -> String {
    let digest = lampyr_artifact::layout::sha256_digest(public.to_string().as_bytes());
    digest["sha256:".len().."sha256:".len() + 16].to_string()
}
