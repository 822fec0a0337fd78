//! Content-addressed bytes: sha256 digests and canonical JSON (the hashing writer is
//! lampyr-artifact's).

use serde::Serialize;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// `sha256:<hex>` of `bytes`.
pub(crate) fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// `value` as compact JSON with every object's keys sorted, so documents holding
/// maps (annotations, labels) serialise to the same bytes in every process.
pub(crate) fn canonical_json<T: Serialize>(value: &T) -> Result<Vec<u8>, serde_json::Error> {
    fn sorted(value: Value) -> Value {
        match value {
            Value::Object(map) => {
                let mut entries: Vec<(String, Value)> = map.into_iter().collect();
                entries.sort_by(|a, b| a.0.cmp(&b.0));
                Value::Object(entries.into_iter().map(|(k, v)| (k, sorted(v))).collect::<Map<_, _>>())
            }
            Value::Array(items) => Value::Array(items.into_iter().map(sorted).collect()),
            other => other,
        }
    }
    serde_json::to_vec(&sorted(serde_json::to_value(value)?))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::io::Write;

    use lampyr_artifact::pack::HashingWriter;

    use super::*;

    #[test]
    fn digests_are_sha256_of_the_bytes() {
        assert_eq!(sha256_digest(b""), "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        let mut writer = HashingWriter::new(Vec::new());
        writer.write_all(b"hello ").and_then(|()| writer.write_all(b"world")).expect("write");
        let (bytes, digest, size) = writer.finish();
        assert_eq!((digest, size), (sha256_digest(b"hello world"), 11));
        assert_eq!(bytes, b"hello world");
    }

    #[test]
    fn canonical_json_sorts_keys_at_every_level() {
        let map: HashMap<&str, HashMap<&str, u32>> = [("z", [("b", 1), ("a", 2)].into()), ("a", [("y", 3), ("x", 4)].into())].into();
        let bytes = canonical_json(&map).expect("serialises");
        assert_eq!(String::from_utf8(bytes).expect("utf-8"), r#"{"a":{"x":4,"y":3},"z":{"a":2,"b":1}}"#);
    }
}
