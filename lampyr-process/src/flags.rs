//! Parsers of the flag values Lampyr's binaries share (clap `value_parser`s), so each
//! kind of value is read one way everywhere: Go durations (`90s`, `1h30m`) where
//! Knative's configuration uses them, decimal seconds for Lampyr's own `--*-seconds`
//! style flags, Kubernetes byte quantities (`2Gi`), and PEM files of certificate authorities.

use std::time::Duration;

use lampyr_api::duration::parse_go_duration;

/// A Go duration (`90s`, `5m`, `1h30m`) that is not negative.
pub fn go_duration(text: &str) -> Result<Duration, String> {
    parse_go_duration(text).map_err(|e| e.to_string())?.non_negative().ok_or_else(|| format!("{text:?} must not be negative"))
}

/// A non-negative number of seconds, decimals allowed (`30`, `0.5`, `0`).
pub fn seconds(text: &str) -> Result<Duration, String> {
    let value: f64 = text.trim().parse().map_err(|_| format!("{text:?} is not a number of seconds"))?;
    Duration::try_from_secs_f64(value).map_err(|_| format!("{text:?} must be a non-negative, finite number of seconds"))
}

/// A positive number of seconds, decimals allowed (`2`, `0.1`).
pub fn positive_seconds(text: &str) -> Result<Duration, String> {
    let value = seconds(text)?;
    if value.is_zero() {
        return Err(format!("{text:?} must be more than 0 seconds"));
    }
    Ok(value)
}

/// A Kubernetes quantity of bytes (`2Gi`, `512Mi`), rounded up to whole bytes.
pub fn byte_quantity(text: &str) -> Result<u64, String> {
    lampyr_api::quantity::parse_quantity(text).map(|q| q.ceil()).map_err(|e| format!("{text:?}: {e}"))
}

/// Certificate authorities from a PEM file, as [`pem_certificates`] read them.
#[derive(Clone, Debug)]
pub struct PemCertificates(pub Vec<u8>);

/// A PEM file of certificate authorities (`--registry-ca`), checked to hold a certificate.
pub fn pem_certificates(path: &str) -> Result<PemCertificates, String> {
    lampyr_artifact::credentials::read_ca_file(std::path::Path::new(path)).map(PemCertificates).map_err(|e| e.to_string())
}

/// The registry CAs a binary trusts: `flag`'s file, else [`lampyr_artifact::credentials::CA_FILE_ENV`]'s.
pub fn registry_ca(flag: Option<&PemCertificates>) -> Result<Option<Vec<u8>>, String> {
    match flag {
        Some(pem) => Ok(Some(pem.0.clone())),
        None => lampyr_artifact::credentials::ca_from_environment().map_err(|e| e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_of_value_parses_and_refuses_clearly() {
        assert_eq!(go_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert!(go_duration("-5s").expect_err("negative").contains("must not be negative"));
        assert!(go_duration("5").is_err(), "a Go duration needs its unit");
        assert_eq!(seconds("0.5"), Ok(Duration::from_millis(500)));
        assert_eq!(seconds("0"), Ok(Duration::ZERO));
        for bad in ["-1", "NaN", "inf", "ten", ""] {
            assert!(seconds(bad).is_err(), "{bad:?}");
        }
        assert!(positive_seconds("0").expect_err("zero").contains("more than 0"));
        assert_eq!(positive_seconds("2"), Ok(Duration::from_secs(2)));
        assert_eq!(byte_quantity("2Gi"), Ok(2 << 30));
        assert!(byte_quantity("lots").is_err());
    }
}
