//! Reproducible tar streams: a tree of entries sorted by path, every parent
//! directory present, every header fixed (uid/gid 0, one mtime, no names, no
//! xattrs), and the gzip layer around it (no mtime, no file name in its header).

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::path::Path;

use flate2::{Compression, GzBuilder};

use crate::Error;
use crate::spec::Source;
use lampyr_artifact::pack::HashingWriter;

/// What sits at one path of the tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A directory.
    Directory,
    /// A regular file.
    File(Source),
}

/// One entry of the tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    /// Directory or file.
    pub kind: Kind,
    /// Permission bits.
    pub mode: u32,
    /// Whether the mode was asked for (a parent added implicitly is 0755 until then).
    pub explicit: bool,
}

/// A file tree keyed by relative path (`etc/passwd`); iteration is sorted, parents first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Tree {
    entries: BTreeMap<String, Entry>,
}

impl Tree {
    /// Adds a file (and its parents). The same path twice is refused unless the
    /// file is the same (two binaries needing one library).
    pub(crate) fn add_file(&mut self, path: &str, source: Source, mode: u32) -> Result<(), String> {
        self.add_parents(path)?;
        let entry = Entry { kind: Kind::File(source), mode, explicit: true };
        match self.entries.get(path) {
            None => {
                self.entries.insert(path.to_string(), entry);
                Ok(())
            }
            Some(existing) if *existing == entry => Ok(()),
            Some(existing) => Err(format!("/{path} is added twice: as {} and as {}", describe(existing), describe(&entry))),
        }
    }

    /// Adds a directory with `mode` (and its parents).
    pub(crate) fn add_directory(&mut self, path: &str, mode: u32) -> Result<(), String> {
        self.add_parents(path)?;
        let entry = Entry { kind: Kind::Directory, mode, explicit: true };
        match self.entries.get_mut(path) {
            None => {
                self.entries.insert(path.to_string(), entry);
                Ok(())
            }
            Some(existing) if !existing.explicit && existing.kind == Kind::Directory => {
                *existing = entry;
                Ok(())
            }
            Some(existing) if *existing == entry => Ok(()),
            Some(existing) => Err(format!("/{path} is added twice: as {} and as {}", describe(existing), describe(&entry))),
        }
    }

    fn add_parents(&mut self, path: &str) -> Result<(), String> {
        let mut parent = String::new();
        let parts: Vec<&str> = path.split('/').collect();
        for part in &parts[..parts.len().saturating_sub(1)] {
            if !parent.is_empty() {
                parent.push('/');
            }
            parent.push_str(part);
            match self.entries.get(&parent) {
                Some(Entry { kind: Kind::Directory, .. }) => {}
                Some(other) => {
                    return Err(format!("/{parent} is {} but /{path} needs it as a directory", describe(other)));
                }
                None => {
                    let implicit = Entry { kind: Kind::Directory, mode: 0o755, explicit: false };
                    self.entries.insert(parent.clone(), implicit);
                }
            }
        }
        Ok(())
    }

    /// The entries, sorted by path.
    pub(crate) fn entries(&self) -> impl Iterator<Item = (&String, &Entry)> {
        self.entries.iter()
    }
}

fn describe(entry: &Entry) -> String {
    match &entry.kind {
        Kind::Directory => format!("a directory (mode {:o})", entry.mode),
        Kind::File(Source::Host(path)) => format!("{} (mode {:o})", path.display(), entry.mode),
        Kind::File(Source::Bytes(bytes)) => {
            format!("{} given bytes (mode {:o})", bytes.len(), entry.mode)
        }
    }
}

/// Writes `tree` as a tar stream to `out`, every header with uid/gid 0 and `mtime`.
/// `dest` names the destination in errors.
pub(crate) fn write_tar<W: Write>(tree: &Tree, mtime: u64, out: W, dest: &Path) -> Result<W, Error> {
    let mut builder = tar::Builder::new(out);
    for (path, entry) in tree.entries() {
        let mut header = tar::Header::new_gnu();
        header.set_uid(0);
        header.set_gid(0);
        header.set_mtime(mtime);
        header.set_mode(entry.mode);
        match &entry.kind {
            Kind::Directory => {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_size(0);
                builder.append_data(&mut header, path, io::empty()).map_err(Error::write(dest))?;
            }
            Kind::File(source) => {
                header.set_entry_type(tar::EntryType::Regular);
                let (size, reader) = open(source)?;
                header.set_size(size);
                builder.append_data(&mut header, path, reader).map_err(Error::write(dest))?;
            }
        }
    }
    builder.into_inner().map_err(Error::write(dest))
}

fn open(source: &Source) -> Result<(u64, Box<dyn Read + '_>), Error> {
    match source {
        Source::Bytes(bytes) => Ok((bytes.len() as u64, Box::new(bytes.as_slice()))),
        Source::Host(path) => {
            let file = std::fs::File::open(path).map_err(Error::read(path))?;
            let size = file.metadata().map_err(Error::read(path))?.len();
            // Exactly `size` bytes: a file growing meanwhile cannot corrupt the header.
            Ok((size, Box::new(file.take(size))))
        }
    }
}

/// Digests and size of a written layer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LayerDigests {
    /// `sha256:` of the uncompressed tar (the config's `diff_id`).
    pub diff_id: String,
    /// `sha256:` of the gzip stream (the blob's digest).
    pub digest: String,
    /// Size of the gzip stream.
    pub size: u64,
}

/// Writes `tree` as a gzip-compressed tar to `out`; the gzip header has no
/// mtime and no file name, so equal trees give equal bytes.
pub(crate) fn write_layer<W: Write>(tree: &Tree, mtime: u64, out: W, dest: &Path) -> Result<(W, LayerDigests), Error> {
    let gzip = GzBuilder::new().mtime(0).write(HashingWriter::new(out), Compression::default());
    let tar = write_tar(tree, mtime, HashingWriter::new(gzip), dest)?;
    let (gzip, diff_id, _) = tar.finish();
    let compressed = gzip.finish().map_err(Error::write(dest))?;
    let (out, digest, size) = compressed.finish();
    Ok((out, LayerDigests { diff_id, digest, size }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(text: &str) -> Source {
        Source::Bytes(text.as_bytes().to_vec())
    }

    fn sample() -> Tree {
        let mut tree = Tree::default();
        tree.add_file("usr/local/bin/app", bytes("binary"), 0o755).expect("add");
        tree.add_file("etc/passwd", bytes("root:x:0:0::/root:/sbin/nologin\n"), 0o644).expect("add");
        tree.add_directory("tmp", 0o1777).expect("add");
        tree
    }

    fn listing(tar: &[u8]) -> Vec<(String, u32, u64, u64, u64, Vec<u8>)> {
        let mut archive = tar::Archive::new(tar);
        let mut out = Vec::new();
        for entry in archive.entries().expect("entries") {
            let mut entry = entry.expect("entry");
            let header = entry.header().clone();
            let mut data = Vec::new();
            entry.read_to_end(&mut data).expect("read");
            let path = entry.path().expect("path").to_string_lossy().into_owned();
            let (uid, gid, mtime) = (header.uid().expect("uid"), header.gid().expect("gid"), header.mtime().expect("mtime"));
            out.push((path, header.mode().expect("mode"), uid + gid, mtime, header.size().expect("size"), data));
        }
        out
    }

    #[test]
    fn entries_are_sorted_with_every_parent_first() {
        let tar = write_tar(&sample(), 7, Vec::new(), Path::new("test")).expect("tar");
        let paths: Vec<String> = listing(&tar).into_iter().map(|e| e.0.trim_end_matches('/').to_string()).collect();
        assert_eq!(paths, ["etc", "etc/passwd", "tmp", "usr", "usr/local", "usr/local/bin", "usr/local/bin/app"]);
    }

    #[test]
    fn headers_are_fixed_owner_mtime_and_mode() {
        let tar = write_tar(&sample(), 1_700_000_000, Vec::new(), Path::new("test")).expect("tar");
        for (path, mode, ids, mtime, _, _) in listing(&tar) {
            assert_eq!((ids, mtime), (0, 1_700_000_000), "{path}");
            let expected = match path.trim_end_matches('/') {
                "tmp" => 0o1777,
                "etc/passwd" => 0o644,
                _ => 0o755,
            };
            assert_eq!(mode, expected, "{path}");
        }
        // No user or group names, no extended headers (xattrs would be PAX 'x' entries).
        let mut archive = tar::Archive::new(tar.as_slice());
        for entry in archive.entries().expect("entries") {
            let entry = entry.expect("entry");
            assert!(!entry.header().entry_type().is_pax_local_extensions());
            assert_eq!(entry.header().username_bytes().unwrap_or_default(), b"");
        }
    }

    #[test]
    fn the_same_tree_gives_the_same_layer_and_a_changed_file_another() {
        let layer = |tree: &Tree| write_layer(tree, 0, Vec::new(), Path::new("test")).expect("layer");
        let (first, a) = layer(&sample());
        let (second, b) = layer(&sample());
        assert_eq!((first, &a), (second, &b));
        let mut changed = sample();
        changed.entries.insert("etc/passwd".into(), Entry { kind: Kind::File(bytes("other")), mode: 0o644, explicit: true });
        let (_, c) = layer(&changed);
        assert_ne!(a.digest, c.digest);
        assert_ne!(a.diff_id, c.diff_id);
    }

    #[test]
    fn the_gzip_header_has_no_mtime_and_no_name() {
        let (gz, digests) = write_layer(&sample(), 5, Vec::new(), Path::new("test")).expect("layer");
        assert_eq!(&gz[..4], &[0x1f, 0x8b, 8, 0], "deflate, no flags (no FNAME, no FCOMMENT)");
        assert_eq!(&gz[4..8], &[0, 0, 0, 0], "MTIME is zero");
        assert_eq!(digests.size, gz.len() as u64);
        let mut tar = Vec::new();
        flate2::read::GzDecoder::new(gz.as_slice()).read_to_end(&mut tar).expect("gunzip");
        assert_eq!(digests.diff_id, crate::blob::sha256_digest(&tar));
        assert_eq!(digests.digest, crate::blob::sha256_digest(&gz));
    }

    #[test]
    fn conflicting_entries_are_refused_and_equal_ones_merged() {
        let mut tree = sample();
        tree.add_file("etc/passwd", bytes("root:x:0:0::/root:/sbin/nologin\n"), 0o644).expect("same file again");
        let error = tree.add_file("etc/passwd", bytes("other"), 0o644).expect_err("different contents");
        assert!(error.contains("/etc/passwd is added twice"), "{error}");
        let error = tree.add_file("etc/passwd/x", bytes("x"), 0o644).expect_err("file as parent");
        assert!(error.contains("needs it as a directory"), "{error}");
        tree.add_directory("usr/local", 0o700).expect("an implicit parent takes an explicit mode");
        let error = tree.add_directory("tmp", 0o755).expect_err("two explicit modes");
        assert!(error.contains("/tmp is added twice"), "{error}");
    }
}
