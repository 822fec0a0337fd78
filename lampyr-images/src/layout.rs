//! OCI image layouts: [`build`] writes one image (one gzip layer) as a layout
//! directory, [`read_layout`] reads it back, [`write_archive`] tars it.
//!
//! A layout holds `oci-layout`, `index.json` naming the one manifest (by tag and
//! full reference) and `blobs/sha256/`. Every JSON document is canonical (sorted
//! keys, compact), so the same spec, binaries and creation time give the same
//! bytes: the same digests.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use chrono::{DateTime, SecondsFormat};
use oci_spec::image::{
    Arch, ConfigBuilder, Descriptor, DescriptorBuilder, Digest, ImageConfigurationBuilder, ImageIndex, ImageIndexBuilder, ImageManifest,
    ImageManifestBuilder, MediaType, OciLayoutBuilder, Os, PlatformBuilder, RootFsBuilder,
};

use crate::blob::{canonical_json, sha256_digest};
use crate::layer::{LayerDigests, Tree, write_layer, write_tar};
use crate::spec::{ImageSpec, Source, tag_of};
use crate::{ANNOTATION_IMAGE_NAME, ANNOTATION_REF_NAME, Error, rootfs};

/// What [`build`] wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuiltImage {
    /// The image's reference (tagged).
    pub reference: String,
    /// The layout directory.
    pub layout: PathBuf,
    /// The manifest's digest: the image's identity (`REFERENCE@DIGEST`).
    pub manifest_digest: String,
    /// The config blob's digest.
    pub config_digest: String,
    /// The layer blob's digest.
    pub layer_digest: String,
    /// The layer's uncompressed digest (the config's `diff_id`).
    pub diff_id: String,
    /// Bytes of the compressed layer.
    pub layer_size: u64,
}

/// An image as index.json names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayoutImage {
    /// Full reference (`io.containerd.image.name`).
    pub name: String,
    /// Tag (`org.opencontainers.image.ref.name`).
    pub tag: String,
    /// The manifest's digest.
    pub manifest_digest: String,
    /// The manifest's bytes as stored (and pushed).
    pub manifest_bytes: Vec<u8>,
    /// The manifest.
    pub manifest: ImageManifest,
}

/// Builds `spec` into the OCI layout directory `layout` (replaced if it exists),
/// with creation time and every file's mtime `created` (seconds since the epoch,
/// e.g. `SOURCE_DATE_EPOCH`).
pub fn build(spec: &ImageSpec, layout: &Path, created: u64) -> Result<BuiltImage, Error> {
    let tag = spec.tag()?.to_string();
    let scratch = tempfile::tempdir().map_err(Error::write(std::env::temp_dir()))?;
    let tree = rootfs::tree(spec, scratch.path())?;
    let parent = layout.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(Error::write(parent))?;
    let staging = tempfile::Builder::new().prefix(".layout-").tempdir_in(parent).map_err(Error::write(parent))?;
    let blobs = staging.path().join("blobs/sha256");
    std::fs::create_dir_all(&blobs).map_err(Error::write(&blobs))?;
    tracing::info!(image = %spec.reference, "writing the layer");
    let layer = write_layer_blob(&tree, created, &blobs)?;
    let document = |what: &'static str| {
        let image = spec.reference.clone();
        move |e: &dyn std::fmt::Display| Error::Document { image, what, reason: e.to_string() }
    };
    let config = config_json(spec, created, &layer).map_err(|e| document("config")(&e))?;
    let config_digest = write_blob(&blobs, &config)?;
    let manifest = ImageManifestBuilder::default()
        .schema_version(2u32)
        .media_type(MediaType::ImageManifest)
        .config(Descriptor::new(MediaType::ImageConfig, config.len() as u64, parse_digest(&config_digest)?))
        .layers(vec![Descriptor::new(MediaType::ImageLayerGzip, layer.size, parse_digest(&layer.digest)?)])
        .build()
        .map_err(|e| document("manifest")(&e))?;
    let manifest = canonical_json(&manifest).map_err(|e| document("manifest")(&e))?;
    let manifest_digest = write_blob(&blobs, &manifest)?;
    let index = index_json(&spec.reference, &tag, &manifest_digest, manifest.len() as u64).map_err(|e| document("index")(&e))?;
    write_file(&staging.path().join("index.json"), &index)?;
    let oci_layout = OciLayoutBuilder::default().image_layout_version("1.0.0").build().map_err(|e| document("oci-layout")(&e))?;
    write_file(&staging.path().join("oci-layout"), &canonical_json(&oci_layout).map_err(|e| document("oci-layout")(&e))?)?;
    replace_dir(staging.keep(), layout)?;
    Ok(BuiltImage {
        reference: spec.reference.clone(),
        layout: layout.to_path_buf(),
        manifest_digest,
        config_digest,
        layer_digest: layer.digest,
        diff_id: layer.diff_id,
        layer_size: layer.size,
    })
}

/// The config: platform linux/amd64, `created`, user, env, entrypoint, the layer's diff_id.
fn config_json(spec: &ImageSpec, created: u64, layer: &LayerDigests) -> Result<Vec<u8>, String> {
    let seconds = i64::try_from(created).map_err(|e| e.to_string())?;
    let time = DateTime::from_timestamp(seconds, 0).ok_or_else(|| format!("{created} is not a representable time"))?;
    let config = ConfigBuilder::default()
        .user(spec.user.config_value())
        .env(spec.env.clone())
        .entrypoint(spec.entrypoint.clone())
        .working_dir("/")
        .build()
        .map_err(|e| e.to_string())?;
    let rootfs = RootFsBuilder::default().typ("layers").diff_ids(vec![layer.diff_id.clone()]).build().map_err(|e| e.to_string())?;
    let image = ImageConfigurationBuilder::default()
        .created(time.to_rfc3339_opts(SecondsFormat::Secs, true))
        .architecture(Arch::Amd64)
        .os(Os::Linux)
        .config(config)
        .rootfs(rootfs)
        .build()
        .map_err(|e| e.to_string())?;
    canonical_json(&image).map_err(|e| e.to_string())
}

/// index.json: the manifest, for linux/amd64, named by tag and by full reference.
fn index_json(reference: &str, tag: &str, digest: &str, size: u64) -> Result<Vec<u8>, String> {
    let platform = PlatformBuilder::default().architecture(Arch::Amd64).os(Os::Linux).build().map_err(|e| e.to_string())?;
    let annotations = [(ANNOTATION_REF_NAME, tag), (ANNOTATION_IMAGE_NAME, reference)]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect::<std::collections::HashMap<_, _>>();
    let descriptor = DescriptorBuilder::default()
        .media_type(MediaType::ImageManifest)
        .digest(Digest::from_str(digest).map_err(|e| e.to_string())?)
        .size(size)
        .platform(platform)
        .annotations(annotations)
        .build()
        .map_err(|e| e.to_string())?;
    let index = ImageIndexBuilder::default()
        .schema_version(2u32)
        .media_type(MediaType::ImageIndex)
        .manifests(vec![descriptor])
        .build()
        .map_err(|e| e.to_string())?;
    canonical_json(&index).map_err(|e| e.to_string())
}

fn write_layer_blob(tree: &Tree, created: u64, blobs: &Path) -> Result<LayerDigests, Error> {
    let temp = blobs.join("layer.tmp");
    let file = std::fs::File::create(&temp).map_err(Error::write(&temp))?;
    let (file, layer) = write_layer(tree, created, std::io::BufWriter::new(file), &temp)?;
    file.into_inner().map_err(|e| Error::Write { path: temp.clone(), source: e.into_error() })?;
    let path = blobs.join(hex_of(&layer.digest));
    std::fs::rename(&temp, &path).map_err(Error::write(&path))?;
    Ok(layer)
}

/// Stores `bytes` under its digest in `blobs` and returns the digest.
fn write_blob(blobs: &Path, bytes: &[u8]) -> Result<String, Error> {
    let digest = sha256_digest(bytes);
    write_file(&blobs.join(hex_of(&digest)), bytes)?;
    Ok(digest)
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    std::fs::write(path, bytes).map_err(Error::write(path))
}

fn hex_of(digest: &str) -> &str {
    digest.strip_prefix("sha256:").unwrap_or(digest)
}

fn parse_digest(digest: &str) -> Result<Digest, Error> {
    Digest::from_str(digest).map_err(|e| Error::Layout { path: PathBuf::from(digest), reason: e.to_string() })
}

/// Moves the finished `staging` directory to `layout`, replacing an older one.
fn replace_dir(staging: PathBuf, layout: &Path) -> Result<(), Error> {
    if layout.exists() {
        std::fs::remove_dir_all(layout).map_err(Error::write(layout))?;
    }
    std::fs::rename(&staging, layout).map_err(Error::write(layout))
}

/// The blob `digest` of `layout`, read and checked against its digest.
pub(crate) fn read_blob(layout: &Path, digest: &str) -> Result<Vec<u8>, Error> {
    let hex = hex_of(digest);
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()) {
        return Err(Error::Layout { path: layout.to_path_buf(), reason: format!("{digest} is not a sha256 digest") });
    }
    let path = layout.join("blobs/sha256").join(hex);
    let bytes = std::fs::read(&path).map_err(Error::read(&path))?;
    if sha256_digest(&bytes) != digest {
        let reason = format!("blob {} does not hash to its name", path.display());
        return Err(Error::Layout { path: layout.to_path_buf(), reason });
    }
    Ok(bytes)
}

/// The one image named in index.json bytes: (full reference, tag, manifest digest).
fn indexed_image(path: &Path, index: &[u8]) -> Result<(String, String, String), Error> {
    let bad = |reason: String| Error::Layout { path: path.to_path_buf(), reason };
    let index: ImageIndex = serde_json::from_slice(index).map_err(|e| bad(format!("index.json: {e}")))?;
    let [manifest] = index.manifests().as_slice() else {
        return Err(bad(format!("index.json lists {} manifests, not 1", index.manifests().len())));
    };
    let annotation = |key: &str| manifest.annotations().as_ref().and_then(|a| a.get(key)).cloned();
    let name = annotation(ANNOTATION_IMAGE_NAME).ok_or_else(|| bad(format!("index.json has no {ANNOTATION_IMAGE_NAME}")))?;
    let tag = annotation(ANNOTATION_REF_NAME).ok_or_else(|| bad(format!("index.json has no {ANNOTATION_REF_NAME}")))?;
    if tag_of(&name) != Some(tag.as_str()) {
        return Err(bad(format!("index.json names {name} but tags it {tag}")));
    }
    Ok((name, tag, manifest.digest().to_string()))
}

/// Reads the image a layout [`build`] wrote: its name, tag and manifest (digest checked).
pub fn read_layout(layout: &Path) -> Result<LayoutImage, Error> {
    let index_path = layout.join("index.json");
    let index = std::fs::read(&index_path).map_err(Error::read(&index_path))?;
    let (name, tag, manifest_digest) = indexed_image(layout, &index)?;
    let manifest_bytes = read_blob(layout, &manifest_digest)?;
    let manifest: ImageManifest = serde_json::from_slice(&manifest_bytes)
        .map_err(|e| Error::Layout { path: layout.to_path_buf(), reason: format!("manifest {manifest_digest}: {e}") })?;
    Ok(LayoutImage { name, tag, manifest_digest, manifest_bytes, manifest })
}

/// Writes `layout` as a tar archive `file` (entries sorted, uid/gid 0, mtime 0,
/// modes 0644/0755): the same layout gives the same bytes.
pub fn write_archive(layout: &Path, file: &Path) -> Result<(), Error> {
    read_layout(layout)?;
    let mut tree = Tree::default();
    let invalid = |reason: String| Error::Layout { path: layout.to_path_buf(), reason };
    for name in ["oci-layout", "index.json"] {
        tree.add_file(name, Source::Host(layout.join(name)), 0o644).map_err(invalid)?;
    }
    let blobs = layout.join("blobs/sha256");
    for entry in std::fs::read_dir(&blobs).map_err(Error::read(&blobs))? {
        let entry = entry.map_err(Error::read(&blobs))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        tree.add_file(&format!("blobs/sha256/{name}"), Source::Host(entry.path()), 0o644).map_err(invalid)?;
    }
    let temp = file.with_extension("tar.tmp");
    let out = std::fs::File::create(&temp).map_err(Error::write(&temp))?;
    let out = write_tar(&tree, 0, std::io::BufWriter::new(out), &temp)?;
    out.into_inner().map_err(|e| Error::Write { path: temp.clone(), source: e.into_error() })?;
    std::fs::rename(&temp, file).map_err(Error::write(file))
}

/// The image an archive from [`write_archive`] names: (full reference, manifest digest).
pub fn read_archive_image(archive: &Path) -> Result<(String, String), Error> {
    let file = std::fs::File::open(archive).map_err(Error::read(archive))?;
    let mut tar = tar::Archive::new(std::io::BufReader::new(file));
    for entry in tar.entries().map_err(Error::read(archive))? {
        let mut entry = entry.map_err(Error::read(archive))?;
        if entry.path().map_err(Error::read(archive))?.as_os_str() == "index.json" {
            let mut index = Vec::new();
            std::io::Read::read_to_end(&mut entry, &mut index).map_err(Error::read(archive))?;
            let (name, _, digest) = indexed_image(archive, &index)?;
            return Ok((name, digest));
        }
    }
    Err(Error::Layout { path: archive.to_path_buf(), reason: "the archive holds no index.json".into() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{Directory, ImageFile, User};

    fn spec(motd: &str) -> ImageSpec {
        ImageSpec {
            reference: "example.com/lampyr/test:preview".into(),
            entrypoint: vec!["/usr/local/bin/app".into(), "--serve".into()],
            user: User::NonRoot,
            env: vec!["PATH=/usr/local/bin".into(), "KO_DATA_PATH=/var/run/ko".into()],
            binaries: vec![],
            files: vec![
                ImageFile { path: "/usr/local/bin/app".into(), source: Source::Bytes(b"#!app".to_vec()), mode: 0o755 },
                ImageFile { path: "/etc/motd".into(), source: Source::Bytes(motd.as_bytes().to_vec()), mode: 0o644 },
            ],
            directories: vec![Directory { path: "/var/run/ko".into(), mode: 0o755 }],
            ca_bundle: None,
        }
    }

    fn json(layout: &Path, digest: &str) -> serde_json::Value {
        serde_json::from_slice(&read_blob(layout, digest).expect("blob")).expect("json")
    }

    #[test]
    fn the_same_inputs_give_the_same_digests_and_a_changed_file_another() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = build(&spec("hello"), &dir.path().join("a"), 0).expect("build");
        let second = build(&spec("hello"), &dir.path().join("b"), 0).expect("build");
        assert_eq!(first.manifest_digest, second.manifest_digest);
        assert_eq!(first.layer_digest, second.layer_digest);
        let changed = build(&spec("hello!"), &dir.path().join("c"), 0).expect("build");
        assert_ne!(first.manifest_digest, changed.manifest_digest);
        assert_ne!(first.diff_id, changed.diff_id);
        let later = build(&spec("hello"), &dir.path().join("d"), 1_700_000_000).expect("build");
        assert_ne!(first.manifest_digest, later.manifest_digest, "the creation time is part of the image");
        let archive = |name: &str, layout: &str| {
            let path = dir.path().join(name);
            write_archive(&dir.path().join(layout), &path).expect("archive");
            std::fs::read(path).expect("read archive")
        };
        assert_eq!(archive("a.tar", "a"), archive("b.tar", "b"), "equal layouts give equal archives");
    }

    #[test]
    fn the_config_carries_time_user_env_and_entrypoint() {
        let dir = tempfile::tempdir().expect("tempdir");
        let built = build(&spec("hello"), &dir.path().join("img"), 1_700_000_000).expect("build");
        let config = json(&built.layout, &built.config_digest);
        assert_eq!(config["created"], "2023-11-14T22:13:20Z");
        assert_eq!((config["architecture"].as_str(), config["os"].as_str()), (Some("amd64"), Some("linux")));
        assert_eq!(config["config"]["User"], "65532:65532");
        assert_eq!(config["config"]["Entrypoint"], serde_json::json!(["/usr/local/bin/app", "--serve"]));
        assert_eq!(config["config"]["Env"][1], "KO_DATA_PATH=/var/run/ko");
        assert_eq!(config["rootfs"]["diff_ids"], serde_json::json!([built.diff_id]));
        let manifest = json(&built.layout, &built.manifest_digest);
        assert_eq!(manifest["layers"][0]["mediaType"], "application/vnd.oci.image.layer.v1.tar+gzip");
        assert_eq!(manifest["layers"][0]["digest"], built.layer_digest.as_str());
    }

    #[test]
    fn index_json_names_the_image_by_tag_and_full_reference() {
        let dir = tempfile::tempdir().expect("tempdir");
        let built = build(&spec("hello"), &dir.path().join("img"), 0).expect("build");
        let index: serde_json::Value =
            serde_json::from_slice(&std::fs::read(built.layout.join("index.json")).expect("index")).expect("json");
        let annotations = &index["manifests"][0]["annotations"];
        assert_eq!(annotations[ANNOTATION_REF_NAME], "preview");
        assert_eq!(annotations[ANNOTATION_IMAGE_NAME], "example.com/lampyr/test:preview");
        let read = read_layout(&built.layout).expect("read back");
        assert_eq!((read.name.as_str(), read.tag.as_str()), ("example.com/lampyr/test:preview", "preview"));
        assert_eq!(read.manifest_digest, built.manifest_digest);
        let archive = dir.path().join("img.tar");
        write_archive(&built.layout, &archive).expect("archive");
        let named = read_archive_image(&archive).expect("archive index");
        assert_eq!(named, ("example.com/lampyr/test:preview".to_string(), built.manifest_digest));
        let layout_file = std::fs::read_to_string(built.layout.join("oci-layout")).expect("oci-layout");
        assert_eq!(layout_file, r#"{"imageLayoutVersion":"1.0.0"}"#);
    }

    #[test]
    fn a_damaged_blob_is_refused_when_read_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let built = build(&spec("hello"), &dir.path().join("img"), 0).expect("build");
        let path = built.layout.join("blobs/sha256").join(hex_of(&built.manifest_digest));
        std::fs::write(&path, b"{}").expect("damage");
        let error = read_layout(&built.layout).expect_err("damaged").to_string();
        assert!(error.contains("does not hash to its name"), "{error}");
    }
}
