//! The resource versions this controller's own writes produced, per object, until its
//! watches show them: a reconcile that reads an object older than our last write of it
//! (the watch has not delivered that write yet) would compute the same state again with
//! new transition times and write it twice; it waits for the watch event instead.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

/// Our last write of each object the stores have not shown yet, by `Kind/namespace/name`.
#[derive(Default)]
pub struct OwnWrites {
    versions: Mutex<HashMap<String, u64>>,
}

impl OwnWrites {
    /// Remembers that our write of `key` produced resource version `version`.
    pub fn record(&self, key: String, version: Option<&str>) {
        if let Some(version) = version.and_then(number) {
            let mut versions = self.versions.lock().unwrap_or_else(PoisonError::into_inner);
            let last = versions.entry(key).or_insert(version);
            *last = (*last).max(version);
        }
    }

    /// Whether `seen` (a store's resource version of `key`) predates our last write of it.
    /// Once a store shows that write or a later one, the record is forgotten.
    pub fn is_stale(&self, key: &str, seen: Option<&str>) -> bool {
        let mut versions = self.versions.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(&written) = versions.get(key) else { return false };
        match seen.and_then(number) {
            Some(seen) if seen < written => true,
            // Caught up, or a version we cannot order: never hold a reconcile back on it.
            _ => {
                versions.remove(key);
                false
            }
        }
    }

    /// Forgets `key` (its object is being deleted).
    pub fn forget(&self, key: &str) {
        self.versions.lock().unwrap_or_else(PoisonError::into_inner).remove(key);
    }
}

/// Whether resource version `a` is newer than `b` (both numeric, as etcd's are; else no).
pub fn newer(a: Option<&str>, b: Option<&str>) -> bool {
    matches!((a.and_then(number), b.and_then(number)), (Some(a), Some(b)) if a > b)
}

/// A resource version as the number etcd gives it (Kubernetes calls them opaque; an API
/// server that hands out others is never ordered, and nothing is held back for it).
fn number(version: &str) -> Option<u64> {
    version.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_older_version_than_our_write_is_stale_until_the_store_catches_up() {
        let writes = OwnWrites::default();
        assert!(!writes.is_stale("Revision/ns/a", Some("5")), "nothing written yet");
        writes.record("Revision/ns/a".into(), Some("10"));
        assert!(writes.is_stale("Revision/ns/a", Some("9")));
        assert!(!writes.is_stale("Revision/ns/b", Some("9")), "another object");
        assert!(!writes.is_stale("Revision/ns/a", Some("10")), "the store shows our write");
        assert!(!writes.is_stale("Revision/ns/a", Some("9")), "forgotten once shown");
    }

    #[test]
    fn versions_that_are_not_numbers_never_hold_a_reconcile_back() {
        let writes = OwnWrites::default();
        writes.record("Home/ns/a".into(), Some("10"));
        assert!(!writes.is_stale("Home/ns/a", Some("opaque")));
        writes.record("Home/ns/a".into(), Some("opaque"));
        assert!(!writes.is_stale("Home/ns/a", Some("3")), "an unordered write records nothing");
        assert!(!writes.is_stale("Home/ns/a", None));
    }

    #[test]
    fn the_latest_write_counts_and_a_deleted_object_is_forgotten() {
        let writes = OwnWrites::default();
        writes.record("Home/ns/a".into(), Some("12"));
        writes.record("Home/ns/a".into(), Some("11"));
        assert!(writes.is_stale("Home/ns/a", Some("11")));
        writes.forget("Home/ns/a");
        assert!(!writes.is_stale("Home/ns/a", Some("11")));
        assert!(newer(Some("12"), Some("11")) && !newer(Some("11"), Some("11")) && !newer(Some("x"), Some("1")));
    }
}
