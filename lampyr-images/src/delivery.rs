//! From built binaries to images where they are needed: each selected
//! component's layout and archive, then optionally a registry and containerd.

use std::path::{Path, PathBuf};

use crate::Error;
use crate::catalog::{Component, Inputs, Naming};
use crate::containerd::{ImportedImage, import_containerd};
use crate::layout::{build, write_archive};
use crate::push::{mirror_reference, push};
use crate::spec::ImageSpec;
use crate::upstream::UpstreamImages;

/// Where images go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// Directory for `<name>/` (the OCI layout) and `<name>.tar` (its archive).
    pub out_dir: PathBuf,
    /// Creation time and mtime of every file (`SOURCE_DATE_EPOCH`).
    pub created: u64,
    /// Push to this registry (see [`mirror_reference`]), if set.
    pub registry: Option<String>,
    /// Import into containerd at this socket, in this namespace, if set.
    pub containerd: Option<(PathBuf, String)>,
}

/// One image, delivered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivered {
    /// The component's short name.
    pub name: &'static str,
    /// Its reference (tagged).
    pub reference: String,
    /// Its manifest digest.
    pub digest: String,
    /// The OCI layout directory.
    pub layout: PathBuf,
    /// The archive.
    pub archive: PathBuf,
    /// Bytes of its (compressed) layer.
    pub layer_size: u64,
    /// The tagged reference it was pushed to, if pushed.
    pub pushed: Option<String>,
    /// What containerd holds, if imported.
    pub imported: Option<ImportedImage>,
}

impl Delivered {
    /// `REFERENCE@sha256:…`: where the image was pushed, else its own name.
    pub fn pinned(&self) -> String {
        format!("{}@{}", self.pushed.as_deref().unwrap_or(&self.reference), self.digest)
    }
}

/// The specs of `components`, all checked before anything is built: a missing
/// binary fails here, naming the package and the build command.
pub fn prepare(components: &[&'static Component], inputs: &Inputs) -> Result<Vec<(&'static Component, ImageSpec)>, Error> {
    // The upstream manifests are read once, and only when an image is named by them.
    let upstream = if components.iter().any(|c| matches!(c.naming, Naming::KnativeManifest { .. })) {
        UpstreamImages::read(&inputs.knative_module)?
    } else {
        UpstreamImages::default()
    };
    components
        .iter()
        .map(|component| {
            let reference = component.reference_in(&upstream)?;
            Ok((*component, component.spec(inputs, &reference)?))
        })
        .collect()
}

/// Builds `spec` (of `component`) into `delivery.out_dir`, archives it, and
/// pushes and imports it as `delivery` asks.
pub async fn deliver(component: &'static Component, spec: &ImageSpec, delivery: &Delivery) -> Result<Delivered, Error> {
    let layout = delivery.out_dir.join(component.name);
    tracing::info!(image = %spec.reference, layout = %layout.display(), "building");
    let built = build(spec, &layout, delivery.created)?;
    let archive = delivery.out_dir.join(format!("{}.tar", component.name));
    write_archive(&layout, &archive)?;
    let mut delivered = Delivered {
        name: component.name,
        reference: spec.reference.clone(),
        digest: built.manifest_digest,
        layout,
        archive,
        layer_size: built.layer_size,
        pushed: None,
        imported: None,
    };
    if let Some(registry) = &delivery.registry {
        let (target, plain_http) = mirror_reference(registry, &spec.reference)?;
        tracing::info!(image = %spec.reference, %target, "pushing");
        push(&delivered.layout, &target, plain_http).await?;
        delivered.pushed = Some(target);
    }
    if let Some((address, namespace)) = &delivery.containerd {
        tracing::info!(image = %spec.reference, address = %address.display(), %namespace, "importing into containerd");
        delivered.imported = Some(import_containerd(&delivered.archive, address, namespace)?);
    }
    Ok(delivered)
}

/// The default output directory: `$XDG_CACHE_HOME/lampyr/images`, else `~/.cache/lampyr/images`.
pub fn default_out_dir() -> Option<PathBuf> {
    let xdg = std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()).map(PathBuf::from);
    let home = std::env::var_os("HOME").filter(|v| !v.is_empty()).map(|h| Path::new(&h).join(".cache"));
    xdg.or(home).map(|cache| cache.join("lampyr/images"))
}
