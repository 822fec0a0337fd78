//! What `ly run` and `ly deploy` read: a Service manifest, the guest crate
//! beside it, and the snapshot artifact of its template (referenced, or built now).

use std::path::{Path, PathBuf};

use lampyr_api::keys::SNAPSHOT_ARTIFACT;
use lampyr_api::policy::FiberPolicy;
use lampyr_api::{ManifestObject, Service, parse_manifests};
use lampyr_artifact::VerifiedArtifact;
use lampyr_fiber::build::{BuildOptions, build_artifact, reusable_artifact};
use serde::Deserialize as _;

use super::CliError;
use super::snapshot::{resolve, resolve_guest};
use crate::ui::Ui;

/// One manifest and the guest crate that goes with it, if any.
#[derive(Clone, Debug)]
pub struct Source {
    /// The Service manifest.
    pub manifest: PathBuf,
    /// The guest crate directory beside it, if there is one.
    pub guest: Option<PathBuf>,
}

/// One Service document of a manifest.
#[derive(Clone, Debug)]
pub struct ServiceDocument {
    /// Number of the YAML document in the stream, from 1.
    pub document: usize,
    /// The Service, parsed.
    pub service: Service,
    /// The document as written, every field kept (what `ly deploy` applies).
    pub raw: serde_json::Value,
}

/// The documents of a manifest: its Services, and a description of every other document.
#[derive(Clone, Debug, Default)]
pub struct ManifestContents {
    /// The `serving.knative.dev/v1` Services.
    pub services: Vec<ServiceDocument>,
    /// `"<kind> <name> (document N)"` for every other document.
    pub others: Vec<String>,
}

/// Where a PATH's manifest and guest crate are: a Service YAML, or a directory
/// holding `service.yaml` (and perhaps a guest crate).
pub fn source_of(path: &Path) -> Result<Source, CliError> {
    let (manifest, dir) =
        if path.is_dir() { (path.join("service.yaml"), path.to_path_buf()) } else { (path.to_path_buf(), directory_of(path)) };
    if !manifest.is_file() {
        return Err(CliError::Usage(format!(
            "{}: no such manifest (give a Service YAML or a directory with service.yaml)",
            manifest.display()
        )));
    }
    let guest = dir.join("Cargo.toml").is_file().then_some(dir);
    Ok(Source { manifest, guest })
}

/// The directory holding the file `path`: `.` for a bare file name (whose parent is the empty path).
fn directory_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Reads and parses every document of `manifest`; refuses a manifest without a Service.
pub fn read_manifest(manifest: &Path) -> Result<ManifestContents, CliError> {
    let bytes = std::fs::read(manifest).map_err(|e| CliError::Usage(format!("{}: {e}", manifest.display())))?;
    let text = String::from_utf8(bytes).map_err(|e| {
        let what = if e.as_bytes().starts_with(b"\x7fELF") { "a program (ELF)" } else { "not text" };
        CliError::Usage(format!(
            "{} is not a Service YAML: it is {what}. Give a Service YAML, or a directory with service.yaml (and the guest crate \
             beside it); to serve a built guest, pin its snapshot with the lampyr.dev/snapshot-artifact annotation",
            manifest.display()
        ))
    })?;
    let docs = parse_manifests(&text, &manifest.display().to_string())?;
    let raw = raw_documents(&text, manifest)?;
    let mut contents = ManifestContents::default();
    for doc in docs {
        match doc.object {
            ManifestObject::Service(service) => {
                let raw = raw.get(doc.document - 1).cloned().unwrap_or_default();
                contents.services.push(ServiceDocument { document: doc.document, service: *service, raw });
            }
            ManifestObject::Configuration(_) | ManifestObject::Other(_) => {
                let name = doc.name().unwrap_or("(unnamed)");
                contents.others.push(format!("{} {name} (document {})", doc.kind(), doc.document));
            }
        }
    }
    if contents.services.is_empty() {
        return Err(CliError::Usage(format!("{}: no serving.knative.dev/v1 Service in it", manifest.display())));
    }
    Ok(contents)
}

/// Every document of a YAML stream as JSON, in stream order (empty documents are `null`).
fn raw_documents(text: &str, manifest: &Path) -> Result<Vec<serde_json::Value>, CliError> {
    serde_yaml::Deserializer::from_str(text)
        .enumerate()
        .map(|(index, doc)| {
            let value = serde_yaml::Value::deserialize(doc).and_then(serde_yaml::from_value::<serde_json::Value>);
            value.map_err(|e| CliError::Usage(format!("{} (document {}): {e}", manifest.display(), index + 1)))
        })
        .collect()
}

/// The artifact of `service`'s template: the annotation's reference (a layout
/// path relative to the manifest, or a registry reference pulled by digest),
/// or the guest crate beside the manifest, built and snapshotted now.
pub fn artifact_for(source: &Source, service: &Service, policy: &FiberPolicy, ui: &mut Ui) -> Result<VerifiedArtifact, CliError> {
    let annotations = service.spec.template.metadata.annotations.as_ref();
    if let Some(reference) = annotations.and_then(|a| a.get(SNAPSHOT_ARTIFACT)) {
        let base = source.manifest.parent().unwrap_or(Path::new("."));
        return resolve(&relative_layout(reference, base), ui);
    }
    let Some(guest) = &source.guest else {
        return Err(CliError::Usage(format!(
            "{}: the template has no {SNAPSHOT_ARTIFACT} annotation and no guest crate sits beside the manifest",
            source.manifest.display()
        )));
    };
    let elf = resolve_guest(guest, None, ui)?;
    let out = build_dir(guest)?;
    let cache = lampyr_artifact::cache::Cache::new(lampyr_artifact::cache::Cache::default_location()?);
    hold_lease(out.display().to_string(), cache.lease_build(&out)?);
    let opts = BuildOptions { heap_size: policy.memory_bytes, ..BuildOptions::default() };
    let artifact = match reusable_artifact(&elf, &out, &opts) {
        Some(unchanged) => {
            ui.step(format!("guest unchanged: reusing its snapshot {}", unchanged.digest));
            unchanged
        }
        None => ui.timed(format!("snapshotting {}", elf.display()), || build_into_place(&elf, &out, &opts))?,
    };
    super::cache::prune_to_limit(&cache, ui)?;
    Ok(artifact)
}

/// Keeps `lease` on the cache entry `entry` until this process exits: what `ly run` serves
/// stays in the cache. One lease per entry: a rebuild under `ly run --watch` replaces the
/// entry's lease rather than opening another file.
pub fn hold_lease(entry: impl Into<String>, lease: lampyr_artifact::evict::Lease) {
    type Held = std::collections::HashMap<String, lampyr_artifact::evict::Lease>;
    static HELD: std::sync::Mutex<Option<Held>> = std::sync::Mutex::new(None);
    let mut held = HELD.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    held.get_or_insert_with(Held::new).insert(entry.into(), lease);
}

/// Builds the artifact in a staging directory beside `out`, then moves it into place,
/// so a `ly run` of the same crate running at the same time never reads a half-written
/// layout: when another run has put an artifact of the same inputs there first, that is used.
fn build_into_place(elf: &Path, out: &Path, opts: &BuildOptions) -> Result<VerifiedArtifact, CliError> {
    let io = |what: &str, path: &Path, e: std::io::Error| CliError::Usage(format!("{what} {}: {e}", path.display()));
    let parent = out.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(|e| io("creating", parent, e))?;
    let staging = tempfile::Builder::new().prefix(".building-").tempdir_in(parent).map_err(|e| io("staging in", parent, e))?;
    let layout = staging.path().join("layout");
    let built = build_artifact(elf, &layout, opts)?;
    for _ in 0..3 {
        if let Some(theirs) = reusable_artifact(elf, out, opts) {
            return Ok(theirs);
        }
        if out.exists() {
            std::fs::remove_dir_all(out).map_err(|e| io("removing the old snapshot", out, e))?;
        }
        if std::fs::rename(&layout, out).is_ok() {
            return Ok(lampyr_artifact::verify_layout(out, Some(&built.digest))?);
        }
    }
    Err(CliError::Usage(format!("could not put the snapshot in {}: other builds keep replacing it", out.display())))
}

/// Whether `reference` (an annotation's value) names a registry artifact rather than a layout.
pub fn is_registry_reference(reference: &str) -> bool {
    matches!(lampyr_artifact::ArtifactRef::parse(reference), Ok(lampyr_artifact::ArtifactRef::Registry { .. }))
}

/// A layout reference relative to the manifest's directory, as written in the annotation.
fn relative_layout(reference: &str, base: &Path) -> String {
    let (path, pin) = reference.split_once('@').map_or((reference, None), |(p, d)| (p, Some(d)));
    if path.starts_with("./") || path.starts_with("../") {
        let joined = base.join(path).display().to_string();
        return pin.map_or(joined.clone(), |d| format!("{joined}@{d}"));
    }
    reference.to_string()
}

/// Where the artifact built for a guest crate is kept.
fn build_dir(guest: &Path) -> Result<PathBuf, CliError> {
    let root = lampyr_artifact::cache::Cache::default_location()?;
    let canonical = guest.canonicalize().unwrap_or_else(|_| guest.to_path_buf());
    let key = lampyr_artifact::layout::sha256_digest(canonical.display().to_string().as_bytes());
    Ok(root.join("run").join(&key["sha256:".len().."sha256:".len() + 16]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holding_an_entrys_lease_again_replaces_it_instead_of_opening_more_files() {
        let open_files = || std::fs::read_dir("/proc/self/fd").map(|d| d.count()).expect("/proc/self/fd");
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = lampyr_artifact::cache::Cache::new(dir.path());
        let build = dir.path().join("run").join("hello");
        hold_lease("rebuilt", cache.lease_build(&build).expect("a lease"));
        let before = open_files();
        for _ in 0..20 {
            hold_lease("rebuilt", cache.lease_build(&build).expect("a lease"));
        }
        // Other tests of this process may open files meanwhile; 20 leases held would be 20 more.
        assert!(open_files() < before + 10, "each rebuild's lease replaced the last: {before} then {}", open_files());
    }

    #[test]
    fn a_bare_file_name_is_in_the_current_directory() {
        assert_eq!(directory_of(Path::new("service.yaml")), PathBuf::from("."));
        assert_eq!(directory_of(Path::new("examples/hello/service.yaml")), PathBuf::from("examples/hello"));
        assert_eq!(directory_of(Path::new("/service.yaml")), PathBuf::from("/"));
    }
}
