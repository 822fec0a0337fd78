//! Sealing fiberd templates to a cluster's fleet key with age (X25519 +
//! ChaCha20-Poly1305): a template opens only with the matching private key,
//! and any change to the sealed bytes is detected.

use std::str::FromStr;

use age::secrecy::ExposeSecret;

/// Why a template could not be sealed or opened.
#[derive(Debug, thiserror::Error)]
pub enum SealError {
    /// A key string does not parse.
    #[error("{what} is not a valid age key: {reason}")]
    BadKey {
        /// Which key.
        what: &'static str,
        /// The parser's complaint.
        reason: String,
    },
    /// Encryption failed.
    #[error("sealing failed: {0}")]
    Seal(String),
    /// Opening failed: wrong key, or the sealed bytes were altered.
    #[error("template does not open: {0} (sealed to another fleet key, or altered in transit)")]
    Open(String),
}

/// The private half of a fleet key (`AGE-SECRET-KEY-1…`).
pub struct FleetKey(age::x25519::Identity);

/// The public half of a fleet key (`age1…`).
#[derive(Clone, Debug)]
pub struct FleetPublicKey(age::x25519::Recipient);

impl FleetKey {
    /// A new random fleet key.
    pub fn generate() -> Self {
        FleetKey(age::x25519::Identity::generate())
    }

    /// Parses `AGE-SECRET-KEY-1…`.
    pub fn parse(text: &str) -> Result<Self, SealError> {
        age::x25519::Identity::from_str(text.trim())
            .map(FleetKey)
            .map_err(|e| SealError::BadKey { what: "fleet private key", reason: e.to_string() })
    }

    /// The secret key text, for storing in the fleet key Secret.
    pub fn to_secret_string(&self) -> String {
        self.0.to_string().expose_secret().to_string()
    }

    /// The public half.
    pub fn public(&self) -> FleetPublicKey {
        FleetPublicKey(self.0.to_public())
    }
}

impl FleetPublicKey {
    /// Parses `age1…`.
    pub fn parse(text: &str) -> Result<Self, SealError> {
        age::x25519::Recipient::from_str(text.trim())
            .map(FleetPublicKey)
            .map_err(|e| SealError::BadKey { what: "fleet public key", reason: e.to_string() })
    }
}

impl std::fmt::Display for FleetPublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Seals `plaintext` to `recipient`.
pub fn seal(plaintext: &[u8], recipient: &FleetPublicKey) -> Result<Vec<u8>, SealError> {
    age::encrypt(&recipient.0, plaintext).map_err(|e| SealError::Seal(e.to_string()))
}

/// Opens bytes sealed with [`seal`] using the fleet's private key.
pub fn open(sealed: &[u8], key: &FleetKey) -> Result<Vec<u8>, SealError> {
    age::decrypt(&key.0, sealed).map_err(|e| SealError::Open(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_template_opens_only_with_its_key() {
        let key = FleetKey::generate();
        let sealed = seal(b"template bytes", &key.public()).expect("seals");
        assert_eq!(open(&sealed, &key).expect("opens"), b"template bytes");
        let other = FleetKey::generate();
        assert!(matches!(open(&sealed, &other), Err(SealError::Open(_))));
    }

    #[test]
    fn tampering_is_detected() {
        let key = FleetKey::generate();
        let mut sealed = seal(&[7u8; 4096], &key.public()).expect("seals");
        let last = sealed.len() - 10;
        sealed[last] ^= 1;
        assert!(matches!(open(&sealed, &key), Err(SealError::Open(_))));
    }

    #[test]
    fn keys_round_trip_through_text() {
        let key = FleetKey::generate();
        let again = FleetKey::parse(&key.to_secret_string()).expect("parses");
        assert_eq!(again.public().to_string(), key.public().to_string());
        assert!(FleetPublicKey::parse(&key.public().to_string()).is_ok());
        assert!(FleetKey::parse("not a key").is_err());
    }
}
