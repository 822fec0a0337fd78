//! Knative's naming rules for objects derived from a parent.

use md5::{Digest, Md5};

/// The longest name Kubernetes accepts for a DNS-1123 label.
pub const MAX_NAME_LEN: usize = 63;
/// Length of an MD5 digest in hex.
const MD5_HEX_LEN: usize = 32;
/// Room left for the parent's head when its hash is appended.
const HEAD: usize = MAX_NAME_LEN - MD5_HEX_LEN;

/// Knative's `kmeta.ChildName` (knative.dev/pkg, checked against the pinned
/// version): `parent + suffix`, shortened to fit 63 bytes.
///
/// If `parent + suffix` is longer than 63 bytes, the parent is cut to
/// `63 - 32 - len(suffix)` bytes and the MD5 hex of the whole parent is put
/// between the cut parent and the suffix. A suffix of 31 bytes or more leaves
/// no room for that: then the first 31 bytes of the parent, the MD5 hex of
/// `parent + suffix` and as much of the suffix as fits are joined, and trailing
/// non-alphanumeric bytes are removed.
pub fn child_name(parent: &str, suffix: &str) -> String {
    let (p, s) = (parent.as_bytes(), suffix.as_bytes());
    if p.len() + s.len() <= MAX_NAME_LEN {
        return format!("{parent}{suffix}");
    }
    if HEAD <= s.len() {
        let digest = hex::encode(Md5::digest([p, s].concat()));
        let mut out = p[..p.len().min(HEAD)].to_vec();
        out.extend_from_slice(digest.as_bytes());
        let room = MAX_NAME_LEN.saturating_sub(out.len());
        out.extend_from_slice(&s[..room.min(s.len())]);
        while out.last().is_some_and(|b| !b.is_ascii_alphanumeric()) {
            out.pop();
        }
        return String::from_utf8_lossy(&out).into_owned();
    }
    let mut out = p[..HEAD - s.len()].to_vec();
    out.extend_from_slice(hex::encode(Md5::digest(p)).as_bytes());
    out.extend_from_slice(s);
    String::from_utf8_lossy(&out).into_owned()
}

/// The name of a Configuration's Revision for a generation: `hello-00001`.
pub fn revision_name(config_name: &str, generation: i64) -> String {
    child_name(config_name, &format!("-{generation:05}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_are_concatenated() {
        assert_eq!(child_name("hello", "-00001"), "hello-00001");
        assert_eq!(revision_name("hello", 1), "hello-00001");
        assert_eq!(revision_name("hello", 123456), "hello-123456");
        let exact = "a".repeat(57);
        assert_eq!(child_name(&exact, "-00001").len(), 63);
        assert_eq!(child_name(&exact, "-00001"), format!("{exact}-00001"));
    }

    #[test]
    fn long_parent_is_cut_and_hashed() {
        let parent = "a".repeat(58);
        let name = child_name(&parent, "-00001");
        // 63 - 32 - 6 = 25 bytes of the parent, the MD5 of the parent, the suffix.
        let md5 = hex::encode(Md5::digest(parent.as_bytes()));
        assert_eq!(name, format!("{}{md5}-00001", "a".repeat(25)));
        assert_eq!(name.len(), 63);
    }

    #[test]
    fn known_md5_values() {
        // Digests computed independently (Python's hashlib).
        let parent = "a".repeat(64);
        let name = child_name(&parent, "");
        assert_eq!(name, format!("{}014842d480b571495a4a0363793f7367", "a".repeat(31)));
        let parent = "hello-world-service-with-a-rather-long-name-for-testing-purposes";
        assert_eq!(revision_name(parent, 1), "hello-world-service-with-a747a8acef5e8c45daab64e4d11956bb-00001");
    }

    #[test]
    fn long_suffix_hashes_parent_and_suffix() {
        let parent = "p".repeat(40);
        let suffix = format!("-{}", "s".repeat(39));
        let name = child_name(&parent, &suffix);
        let md5 = hex::encode(Md5::digest(format!("{parent}{suffix}").as_bytes()));
        assert_eq!(name, format!("{}{md5}", "p".repeat(31)));
        assert_eq!(name.len(), 63);
        // A short parent with a long suffix keeps part of the suffix, then
        // drops the trailing dash.
        let name = child_name("ab", &format!("{}-x", "s".repeat(60)));
        assert!(name.len() <= 63);
        assert!(name.starts_with("ab"));
        assert!(name.ends_with('s'));
    }

    #[test]
    fn a_cut_suffix_loses_its_trailing_dash() {
        // Digest computed independently (Python's hashlib): the suffix is cut
        // to fit after the hash, right after its dash, which is then dropped.
        let parent = "p".repeat(10);
        let suffix = format!("{}-{}", "s".repeat(20), "t".repeat(33));
        let name = child_name(&parent, &suffix);
        assert_eq!(name, format!("{parent}d25e93088635699b3b41335b51ec0556{}", "s".repeat(20)));
        assert_eq!(name.len(), 62);
    }
}
