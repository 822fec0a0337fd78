//! Which credentials have been shown to read which artifacts. A cache shared by
//! workloads with different registry credentials (fiberd's, lampyr-controller's) must
//! not hand one of them an artifact only another may read: a cached copy is used by
//! a reader only once the registry accepted that reader for it, or accepted anyone.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, PoisonError};

use oci_client::secrets::RegistryAuth;
use sha2::{Digest as _, Sha256};

use crate::reference::Repository;

/// Who reads from a registry, as far as access to cached artifacts goes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Reader {
    /// No credentials: what the registry gives such a reader, it gives anyone.
    Anyone,
    /// The holder of one set of credentials, known by their SHA-256 (never kept in the clear).
    Holder([u8; 32]),
}

impl Reader {
    /// The reader presenting `auth`.
    pub fn of(auth: &RegistryAuth) -> Reader {
        let mut hash = Sha256::new();
        match auth {
            RegistryAuth::Anonymous => return Reader::Anyone,
            RegistryAuth::Basic(user, password) => {
                hash.update(b"basic\0");
                hash.update(user.as_bytes());
                hash.update(b"\0");
                hash.update(password.as_bytes());
            }
            RegistryAuth::Bearer(token) => {
                hash.update(b"bearer\0");
                hash.update(token.as_bytes());
            }
        }
        Reader::Holder(hash.finalize().into())
    }
}

/// The readers a registry accepted, by artifact (repository and digest): kept for
/// the life of the process (content under a digest never changes; access can, so a new
/// process asks again).
#[derive(Debug, Default)]
pub struct ProvenReaders {
    proven: Mutex<HashMap<String, HashSet<Reader>>>,
}

impl ProvenReaders {
    /// Whether `reader` may use a cached copy of artifact `digest` of `repo` without asking the registry.
    pub fn may_read(&self, repo: &Repository, digest: &str, reader: &Reader) -> bool {
        let proven = self.proven.lock().unwrap_or_else(PoisonError::into_inner);
        proven.get(&key(repo, digest)).is_some_and(|readers| readers.contains(&Reader::Anyone) || readers.contains(reader))
    }

    /// Whether the registry gave artifact `digest` of `repo` to a reader without credentials.
    pub fn is_public(&self, repo: &Repository, digest: &str) -> bool {
        self.may_read(repo, digest, &Reader::Anyone)
    }

    /// Records that the registry gave artifact `digest` of `repo` to `reader`.
    pub fn record(&self, repo: &Repository, digest: &str, reader: Reader) {
        let mut proven = self.proven.lock().unwrap_or_else(PoisonError::into_inner);
        proven.entry(key(repo, digest)).or_default().insert(reader);
    }
}

/// An artifact as registries grant access to it: by registry and repository.
fn key(repo: &Repository, digest: &str) -> String {
    format!("{}/{}@{digest}", repo.registry, repo.path)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "sha256:11";

    fn repo(path: &str) -> Repository {
        Repository::parse(&format!("registry.example:5000/{path}")).expect("a repository")
    }

    #[test]
    fn a_copy_one_holder_was_given_is_not_anothers_until_the_registry_says_so() {
        let readers = ProvenReaders::default();
        let alice = Reader::of(&RegistryAuth::Basic("alice".into(), "s3cret".into()));
        let bob = Reader::of(&RegistryAuth::Basic("bob".into(), "s3cret".into()));
        assert_ne!(alice, bob, "different users are different readers");
        assert_ne!(alice, Reader::of(&RegistryAuth::Basic("alice".into(), "other".into())), "so are different passwords");
        assert!(!readers.may_read(&repo("team/hello"), DIGEST, &alice), "nothing is proven at first");
        readers.record(&repo("team/hello"), DIGEST, alice.clone());
        assert!(readers.may_read(&repo("team/hello"), DIGEST, &alice));
        assert!(!readers.may_read(&repo("team/hello"), DIGEST, &bob), "alice's access is not bob's");
        assert!(!readers.may_read(&repo("team/hello"), DIGEST, &Reader::Anyone), "nor anyone's");
        assert!(!readers.is_public(&repo("team/hello"), DIGEST));
        assert!(!readers.may_read(&repo("team/other"), DIGEST, &alice), "access is per artifact and repository");
    }

    #[test]
    fn what_anyone_was_given_every_reader_may_use() {
        let readers = ProvenReaders::default();
        readers.record(&repo("team/hello"), DIGEST, Reader::of(&RegistryAuth::Anonymous));
        assert!(readers.is_public(&repo("team/hello"), DIGEST));
        assert!(readers.may_read(&repo("team/hello"), DIGEST, &Reader::of(&RegistryAuth::Bearer("t".into()))));
    }
}
