//! Keeping a [`Cache`] within a size limit: leases on what loaded Revisions and running
//! `ly run`s use, usage, and least-recently-used eviction of everything else.
//!
//! A lease is a shared `flock` on a file under `leases/` (for an artifact's layout) or
//! beside a `run/` build; its modification time is when the entry was last used. Pulls
//! hold a shared lock on the cache's `.lock` while they write; pruning takes it
//! exclusively (and gives up when a pull is running) and takes each entry's lease file
//! exclusively before removing the entry, so nothing leased or half-pulled is removed.
//! A child forked while a lease or pull is live holds a copy of its lock until it execs; a
//! prune in that moment keeps the entry (or reports the cache busy): it errs on keeping.

use std::collections::HashSet;
use std::fs::{self, File, TryLockError};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::cache::{Cache, CacheError};
use crate::layout::digest_hex;

/// Default limit of an artifact cache, in bytes (`ly`'s, and fiberd's when its grant gives none).
pub const DEFAULT_MAX_BYTES: u64 = 10 << 30;

/// A held claim on one cache entry: while it lives, pruning never removes the entry.
#[derive(Debug)]
pub struct Lease {
    _file: File,
}

/// A shared lock on the whole cache, held while a pull or unseal writes into it.
#[derive(Debug)]
pub struct WriteGuard {
    _file: File,
}

/// What a cache holds.
#[derive(Clone, Debug, Default)]
pub struct Usage {
    /// Bytes on disk (hard-linked files counted once).
    pub bytes: u64,
    /// Its entries, least recently used first.
    pub entries: Vec<Entry>,
}

/// One evictable entry of a cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// What it is.
    pub kind: EntryKind,
    /// An artifact digest, or the build directory's name.
    pub name: String,
    /// Bytes removing it would free.
    pub bytes: u64,
    /// When it was last leased or written.
    pub last_used: SystemTime,
    /// Whether a lease holds it now.
    pub in_use: bool,
}

/// The kinds of cache entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
    /// A pulled (or opened) artifact's layout and the blobs only it uses.
    Artifact,
    /// A blob no layout uses (a sealed template, or one left by an interrupted pull).
    Blob,
    /// A snapshot `ly run` built for a guest crate, or the compiled outputs guest builds share.
    Build,
}

/// What a prune did.
#[derive(Clone, Debug, Default)]
pub struct Pruned {
    /// Bytes before.
    pub before: u64,
    /// Bytes after.
    pub after: u64,
    /// Entries removed, oldest first.
    pub removed: Vec<Entry>,
    /// Entries kept because a lease holds them.
    pub in_use: usize,
    /// Set when the prune did not run because another process was writing to the cache.
    pub busy: bool,
}

impl Cache {
    /// Leases artifact `digest`'s layout (before it is pulled) until the lease is dropped.
    pub fn lease(&self, digest: &str) -> Result<Lease, CacheError> {
        lease_file(&self.artifact_lease(digest)?)
    }

    /// Leases the `ly run` build directory `dir` (under this cache's `run/`).
    pub fn lease_build(&self, dir: &Path) -> Result<Lease, CacheError> {
        let mut name = dir.file_name().unwrap_or_default().to_os_string();
        name.push(".lease");
        lease_file(&dir.with_file_name(name))
    }

    /// Holds off pruning while the caller writes blobs and layouts.
    pub fn write_guard(&self) -> Result<WriteGuard, CacheError> {
        let file = open_lock(&self.root().join(".lock"))?;
        file.lock_shared().map_err(|e| io_error(&self.root().join(".lock"), e))?;
        Ok(WriteGuard { _file: file })
    }

    /// What the cache holds, least recently used first.
    pub fn usage(&self) -> Result<Usage, CacheError> {
        let mut entries = self.artifact_entries()?;
        entries.extend(self.orphan_blobs()?);
        entries.extend(self.builds()?);
        entries.sort_by_key(|e| e.last_used);
        Ok(Usage { bytes: disk_bytes(self.root())?, entries })
    }

    /// Removes least-recently-used entries no lease holds until the cache holds at most
    /// `max_bytes`; does nothing (and says so) while another process writes to it.
    pub fn prune(&self, max_bytes: u64) -> Result<Pruned, CacheError> {
        let lock_path = self.root().join(".lock");
        if !self.root().is_dir() {
            return Ok(Pruned::default());
        }
        let guard = open_lock(&lock_path)?;
        match guard.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => return Ok(Pruned { busy: true, ..Pruned::default() }),
            Err(TryLockError::Error(e)) => return Err(io_error(&lock_path, e)),
        }
        let usage = self.usage()?;
        let mut pruned = Pruned { before: usage.bytes, after: usage.bytes, ..Pruned::default() };
        for entry in usage.entries {
            if pruned.after <= max_bytes {
                break;
            }
            if entry.in_use {
                pruned.in_use += 1;
                continue;
            }
            if self.remove(&entry)? {
                pruned.after = pruned.after.saturating_sub(entry.bytes);
                pruned.removed.push(entry);
            } else {
                pruned.in_use += 1;
            }
        }
        pruned.after = disk_bytes(self.root())?;
        Ok(pruned)
    }

    /// Removes `entry` unless it was leased meanwhile; whether it was removed.
    fn remove(&self, entry: &Entry) -> Result<bool, CacheError> {
        let lease_path = self.lease_path(entry)?;
        let lease = match &lease_path {
            Some(path) => match take_exclusive(path)? {
                Some(file) => Some(file),
                None => return Ok(false),
            },
            None => None,
        };
        match entry.kind {
            EntryKind::Artifact => {
                let layout = self.layout_path(&entry.name)?;
                let blobs = layout_blobs(&layout)?;
                remove_dir(&layout)?;
                for blob in blobs {
                    let path = self.blob_path(&blob)?;
                    if fs::metadata(&path).is_ok_and(|m| m.nlink() == 1) {
                        remove_file(&path)?;
                    }
                }
            }
            EntryKind::Blob => remove_file(&self.blob_path(&entry.name)?)?,
            EntryKind::Build => remove_dir(&self.root().join("run").join(&entry.name))?,
        }
        if let Some(path) = lease_path {
            remove_file(&path)?;
        }
        drop(lease);
        Ok(true)
    }

    fn lease_path(&self, entry: &Entry) -> Result<Option<PathBuf>, CacheError> {
        Ok(match entry.kind {
            EntryKind::Artifact => Some(self.artifact_lease(&entry.name)?),
            EntryKind::Build => Some(self.build_lease(&entry.name)),
            EntryKind::Blob => None,
        })
    }

    fn artifact_lease(&self, digest: &str) -> Result<PathBuf, CacheError> {
        Ok(self.root().join("leases").join(digest_hex(digest).map_err(CacheError::from)?))
    }

    fn build_lease(&self, name: &str) -> PathBuf {
        self.root().join("run").join(format!("{name}.lease"))
    }

    /// Every layout: the bytes only it holds, when it was last used, whether it is leased.
    fn artifact_entries(&self) -> Result<Vec<Entry>, CacheError> {
        let mut entries = Vec::new();
        for (name, path) in subdirs(&self.root().join("layouts"))? {
            let digest = format!("sha256:{name}");
            let Ok(lease) = self.artifact_lease(&digest) else { continue };
            let mut bytes = 0;
            for blob in layout_blobs(&path)? {
                let meta = fs::metadata(self.blob_path(&blob)?).map_err(|e| io_error(&path, e))?;
                // Linked from the store and this layout only: removing the layout frees it.
                if meta.nlink() <= 2 {
                    bytes += meta.len();
                }
            }
            let last_used = latest_mtime(&[&path, &lease]);
            entries.push(Entry { kind: EntryKind::Artifact, name: digest, bytes, last_used, in_use: is_leased(&lease)? });
        }
        Ok(entries)
    }

    /// Store blobs no layout links.
    fn orphan_blobs(&self) -> Result<Vec<Entry>, CacheError> {
        let dir = self.root().join("blobs").join("sha256");
        let mut entries = Vec::new();
        for item in read_dir(&dir)? {
            let Some(meta) = still_there(&item.path(), item.metadata())? else { continue };
            if meta.is_file() && meta.nlink() == 1 {
                let name = format!("sha256:{}", item.file_name().to_string_lossy());
                let last_used = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                entries.push(Entry { kind: EntryKind::Blob, name, bytes: meta.len(), last_used, in_use: false });
            }
        }
        Ok(entries)
    }

    /// `ly run`'s builds (directories under `run/` not being built).
    fn builds(&self) -> Result<Vec<Entry>, CacheError> {
        let mut entries = Vec::new();
        for (name, path) in subdirs(&self.root().join("run"))? {
            let lease = self.build_lease(&name);
            let (bytes, last_used) = (disk_bytes(&path)?, latest_mtime(&[&path, &lease]));
            entries.push(Entry { kind: EntryKind::Build, name, bytes, last_used, in_use: is_leased(&lease)? });
        }
        Ok(entries)
    }
}

fn lease_file(path: &Path) -> Result<Lease, CacheError> {
    loop {
        let file = open_lock(path)?;
        file.lock_shared().map_err(|e| io_error(path, e))?;
        // A prune may have removed the file while this waited for the lock: lease anew.
        let same = fs::metadata(path).is_ok_and(|m| file.metadata().is_ok_and(|f| (f.dev(), f.ino()) == (m.dev(), m.ino())));
        if same {
            // Its modification time is when the entry was last used.
            file.set_modified(SystemTime::now()).map_err(|e| io_error(path, e))?;
            return Ok(Lease { _file: file });
        }
    }
}

fn open_lock(path: &Path) -> Result<File, CacheError> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(|e| io_error(dir, e))?;
    }
    fs::OpenOptions::new().create(true).truncate(false).write(true).open(path).map_err(|e| io_error(path, e))
}

/// The lease file locked exclusively, or `None` when a lease holds it.
fn take_exclusive(path: &Path) -> Result<Option<File>, CacheError> {
    let file = open_lock(path)?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(TryLockError::WouldBlock) => Ok(None),
        Err(TryLockError::Error(e)) => Err(io_error(path, e)),
    }
}

fn is_leased(path: &Path) -> Result<bool, CacheError> {
    if !path.exists() {
        return Ok(false);
    }
    let file = File::open(path).map_err(|e| io_error(path, e))?;
    match file.try_lock() {
        Ok(()) => Ok(false),
        Err(TryLockError::WouldBlock) => Ok(true),
        Err(TryLockError::Error(e)) => Err(io_error(path, e)),
    }
}

/// The blob digests a layout directory holds.
fn layout_blobs(layout: &Path) -> Result<Vec<String>, CacheError> {
    let dir = layout.join("blobs").join("sha256");
    Ok(read_dir(&dir)?.into_iter().map(|e| format!("sha256:{}", e.file_name().to_string_lossy())).collect())
}

/// Subdirectories of `dir` (hidden ones, being built, are skipped), by name.
fn subdirs(dir: &Path) -> Result<Vec<(String, PathBuf)>, CacheError> {
    Ok(read_dir(dir)?
        .into_iter()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
        .filter(|(name, _)| !name.starts_with('.'))
        .collect())
}

fn read_dir(dir: &Path) -> Result<Vec<fs::DirEntry>, CacheError> {
    match fs::read_dir(dir) {
        Ok(entries) => entries.collect::<io::Result<Vec<_>>>().map_err(|e| io_error(dir, e)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(io_error(dir, e)),
    }
}

/// Bytes of the files under `dir`, each inode once.
fn disk_bytes(dir: &Path) -> Result<u64, CacheError> {
    fn walk(dir: &Path, seen: &mut HashSet<(u64, u64)>, total: &mut u64) -> Result<(), CacheError> {
        for entry in read_dir(dir)? {
            // Another process may rename or remove what it is building meanwhile.
            let Some(meta) = still_there(&entry.path(), fs::symlink_metadata(entry.path()))? else { continue };
            if meta.is_dir() {
                walk(&entry.path(), seen, total)?;
            } else if meta.is_file() && seen.insert((meta.dev(), meta.ino())) {
                *total += meta.len();
            }
        }
        Ok(())
    }
    let (mut seen, mut total) = (HashSet::new(), 0);
    walk(dir, &mut seen, &mut total)?;
    Ok(total)
}

/// `metadata` of `path`, or `None` when the file went away since it was listed.
fn still_there(path: &Path, metadata: io::Result<fs::Metadata>) -> Result<Option<fs::Metadata>, CacheError> {
    match metadata {
        Ok(meta) => Ok(Some(meta)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_error(path, e)),
    }
}

fn latest_mtime(paths: &[&Path]) -> SystemTime {
    paths.iter().filter_map(|p| fs::metadata(p).and_then(|m| m.modified()).ok()).max().unwrap_or(SystemTime::UNIX_EPOCH)
}

fn remove_dir(path: &Path) -> Result<(), CacheError> {
    match fs::remove_dir_all(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(io_error(path, e)),
        _ => Ok(()),
    }
}

fn remove_file(path: &Path) -> Result<(), CacheError> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(io_error(path, e)),
        _ => Ok(()),
    }
}

fn io_error(path: &Path, source: io::Error) -> CacheError {
    CacheError::Io { path: path.to_path_buf(), source }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn an_entry_removed_between_listing_and_stat_is_skipped_not_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let gone = dir.path().join(".building-x");
        fs::create_dir(&gone).unwrap();
        fs::write(dir.path().join("kept"), b"four").unwrap();
        let listed = read_dir(dir.path()).unwrap();
        fs::remove_dir(&gone).unwrap();
        let mut present = Vec::new();
        for entry in listed {
            if let Some(meta) = still_there(&entry.path(), fs::symlink_metadata(entry.path())).unwrap() {
                present.push((entry.file_name(), meta.len()));
            }
        }
        assert_eq!(present, vec![("kept".into(), 4)]);
        assert_eq!(disk_bytes(dir.path()).unwrap(), 4);
    }
}
