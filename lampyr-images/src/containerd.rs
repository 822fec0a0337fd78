//! Importing an image archive into containerd with its own client, `ctr`, and
//! checking containerd then lists the image under its name with its digest.

use std::path::Path;
use std::process::Command;

use crate::Error;
use crate::layout::read_archive_image;

/// An image containerd holds after [`import_containerd`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImportedImage {
    /// Its name (the archive's `io.containerd.image.name`).
    pub name: String,
    /// Its manifest digest.
    pub digest: String,
}

/// Runs `ctr --address ADDRESS -n NAMESPACE images import ARCHIVE` (unpacking
/// into the default snapshotter) and checks `ctr images ls` then lists the
/// archive's image under its name with the archive's manifest digest.
pub fn import_containerd(archive: &Path, address: &Path, namespace: &str) -> Result<ImportedImage, Error> {
    let (name, expected) = read_archive_image(archive)?;
    let mut import = ctr(address, namespace);
    import.args(["images", "import"]).arg(archive);
    run(import)?;
    let mut list = ctr(address, namespace);
    list.args(["images", "ls"]);
    let listing = run(list)?;
    let found = listed_digest(&listing, &name);
    if found.as_deref() != Some(expected.as_str()) {
        let found = found.map_or_else(|| "does not list it".to_string(), |d| format!("lists it with digest {d}"));
        let reason =
            format!("containerd at {} (namespace {namespace}) {found} under {name}, expected digest {expected}", address.display());
        return Err(Error::NotImported { archive: archive.to_path_buf(), reason });
    }
    Ok(ImportedImage { name, digest: expected })
}

/// `ctr` talking to `address`, in `namespace`.
fn ctr(address: &Path, namespace: &str) -> Command {
    let mut command = Command::new("ctr");
    command.arg("--address").arg(address).args(["--namespace", namespace]);
    command
}

/// Runs `command`; its stdout, or why it failed.
fn run(mut command: Command) -> Result<String, Error> {
    let output = command.output().map_err(|source| Error::Spawn {
        program: "ctr".into(),
        source,
        hint: "install Debian's containerd (scripts/setup)",
    })?;
    if !output.status.success() {
        return Err(Error::CommandFailed {
            command: format!("{command:?}"),
            status: output.status.to_string(),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The digest `ctr images ls` shows for `name` (columns: REF TYPE DIGEST …).
fn listed_digest(listing: &str, name: &str) -> Option<String> {
    listing.lines().skip(1).find_map(|line| {
        let mut columns = line.split_whitespace();
        (columns.next() == Some(name)).then(|| columns.nth(1).map(str::to_string)).flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listing_gives_the_named_image_digest() {
        let listing = "REF                                          TYPE                                       DIGEST                                                                  SIZE    PLATFORMS   LABELS
ghcr.io/hyperlight-dev/lampyr/fiberd:preview application/vnd.oci.image.manifest.v1+json sha256:1111111111111111111111111111111111111111111111111111111111111111 9.5 MiB linux/amd64 -
ghcr.io/hyperlight-dev/lampyr/fiberd-helper:preview application/vnd.oci.image.manifest.v1+json sha256:2222222222222222222222222222222222222222222222222222222222222222 9.5 MiB linux/amd64 -
";
        let digest = listed_digest(listing, "ghcr.io/hyperlight-dev/lampyr/fiberd:preview");
        assert_eq!(digest.as_deref(), Some("sha256:1111111111111111111111111111111111111111111111111111111111111111"));
        assert_eq!(listed_digest(listing, "ghcr.io/hyperlight-dev/lampyr/fiber-router:preview"), None);
    }
}
