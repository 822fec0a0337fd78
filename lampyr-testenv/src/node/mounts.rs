//! Mounts the node leaves behind (the kubelet's volumes, containerd's root
//! filesystems and Pod network namespaces), undone before its directory is removed.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Lazily unmounts every mount point at or under `dir`, deepest first.
pub fn unmount_under(dir: &Path) -> Result<(), String> {
    let mut points = mount_points_under(dir);
    points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    let mut failed = Vec::new();
    for point in points {
        let out = Command::new("umount").arg("--lazy").arg(&point).output();
        match out {
            Ok(o) if o.status.success() => {}
            // Already gone with a parent (a lazy unmount detaches the subtree).
            Ok(_) if !mount_points_under(&point).contains(&point) => {}
            Ok(o) => failed.push(format!("{}: {}", point.display(), String::from_utf8_lossy(&o.stderr).trim())),
            Err(e) => failed.push(format!("{}: running umount: {e}", point.display())),
        }
    }
    if failed.is_empty() { Ok(()) } else { Err(format!("unmounting: {}", failed.join("; "))) }
}

/// Mount points at or under `dir`, from /proc/self/mountinfo (octal escapes decoded).
fn mount_points_under(dir: &Path) -> Vec<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut points: Vec<PathBuf> = text
        .lines()
        .filter_map(|line| line.split_whitespace().nth(4))
        .map(|field| PathBuf::from(unescape(field)))
        .filter(|p| p.starts_with(dir))
        .collect();
    points.dedup();
    points
}

/// Decodes mountinfo's `\ooo` escapes (spaces, tabs, newlines and backslashes in paths).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|d| std::str::from_utf8(d).ok()).and_then(|d| u8::from_str_radix(d, 8).ok());
        match (bytes[i], octal) {
            (b'\\', Some(byte)) => {
                out.push(byte);
                i += 4;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes_are_decoded() {
        assert_eq!(unescape(r"/tmp/a\040b\011c\134d"), "/tmp/a b\tc\\d");
        assert_eq!(unescape("/plain/path"), "/plain/path");
        assert_eq!(unescape(r"/odd\04"), r"/odd\04");
    }
}
