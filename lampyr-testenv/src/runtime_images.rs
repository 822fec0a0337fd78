//! Lampyr's runtime images as `scripts/runtime-images` builds them from this
//! checkout (release binaries, reproducible OCI archives), for tests and
//! benchmarks that run Lampyr on a real node.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::guests::repo_root;

/// Environment variable naming a directory `scripts/runtime-images --out DIR` wrote
/// (`scripts/test` builds the images once, before the tests).
pub const IMAGES_ENV: &str = "LAMPYR_RUNTIME_IMAGES";

/// One image: its name in the catalog, reference, digest and archive.
#[derive(Clone, Debug)]
pub struct RuntimeImage {
    /// The catalog's short name (`fiberd`, `fiber-router`, …).
    pub name: String,
    /// The tagged reference, e.g. `ghcr.io/hyperlight-dev/lampyr/fiberd:preview`.
    pub reference: String,
    /// The manifest digest.
    pub digest: String,
    /// The config blob's digest: the image ID a kubelet reports for an image it did not pull.
    pub config_digest: String,
    /// The OCI layout directory.
    pub layout: PathBuf,
    /// The OCI archive (`ctr images import` takes it).
    pub archive: PathBuf,
}

impl RuntimeImage {
    /// The reference without its tag.
    pub fn repository(&self) -> String {
        lampyr_api::fiber::repository_of(&self.reference).to_string()
    }
}

/// Every image of the catalog, built.
#[derive(Clone, Debug)]
pub struct RuntimeImages {
    /// In the catalog's order.
    pub images: Vec<RuntimeImage>,
}

impl RuntimeImages {
    /// The images in `$LAMPYR_RUNTIME_IMAGES`, or else those `scripts/runtime-images`
    /// builds now into its default directory (release builds: minutes the first time,
    /// progress on stderr; seconds once built).
    pub fn locate() -> Result<RuntimeImages, String> {
        let dir = match std::env::var_os(IMAGES_ENV) {
            Some(dir) => PathBuf::from(dir),
            None => build_default()?,
        };
        Self::read(&dir)
    }

    /// The layouts and archives `scripts/runtime-images --out DIR` wrote to `dir`, one per catalog image.
    pub fn read(dir: &Path) -> Result<RuntimeImages, String> {
        let mut images = Vec::new();
        for name in lampyr_images::catalog::names() {
            let archive = dir.join(format!("{name}.tar"));
            if !archive.is_file() {
                return Err(format!("{} is missing: run scripts/runtime-images --out {}", archive.display(), dir.display()));
            }
            let layout = dir.join(name);
            let image = lampyr_images::read_layout(&layout).map_err(|e| format!("reading {}: {e}", layout.display()))?;
            images.push(RuntimeImage {
                name: name.to_string(),
                reference: image.name,
                digest: image.manifest_digest,
                config_digest: image.manifest.config().digest().to_string(),
                layout,
                archive,
            });
        }
        Ok(RuntimeImages { images })
    }

    /// The image named `name` in the catalog; panics naming the choices when there is none.
    pub fn get(&self, name: &str) -> &RuntimeImage {
        self.images.iter().find(|i| i.name == name).unwrap_or_else(|| {
            let names: Vec<&str> = self.images.iter().map(|i| i.name.as_str()).collect();
            panic!("no runtime image {name} (built: {names:?})")
        })
    }

    /// `REPOSITORY@DIGEST` of image `name`, as `grantImage` and `helperImage` take it.
    pub fn pinned(&self, name: &str) -> String {
        let image = self.get(name);
        format!("{}@{}", image.repository(), image.digest)
    }
}

impl RuntimeImages {
    /// Pushes every image to `registry` (`http://HOST:PORT` for plain HTTP), keeping each
    /// repository's path (`ghcr.io/a/b:t` → `HOST:PORT/a/b:t`), as a registry mirror serves it.
    pub async fn push(&self, registry: &str) -> Result<(), String> {
        for image in &self.images {
            let (target, plain_http) = lampyr_images::mirror_reference(registry, &image.reference).map_err(|e| e.to_string())?;
            let pushed =
                lampyr_images::push(&image.layout, &target, plain_http).await.map_err(|e| format!("pushing {}: {e}", image.reference))?;
            if !pushed.ends_with(&image.digest) {
                return Err(format!("{} was pushed as {pushed}, not with its digest {}", image.reference, image.digest));
            }
        }
        Ok(())
    }

    /// The registries the images are named under (`ghcr.io`, `gcr.io`): what a node mirrors.
    pub fn registries(&self) -> Vec<String> {
        let mut registries: Vec<String> =
            self.images.iter().filter_map(|i| i.reference.split_once('/').map(|(host, _)| host.to_string())).collect();
        registries.sort();
        registries.dedup();
        registries
    }
}

/// Runs `scripts/runtime-images --out DIR` into the default directory; returns DIR.
fn build_default() -> Result<PathBuf, String> {
    let dir = lampyr_images::delivery::default_out_dir()
        .ok_or("no cache directory (set XDG_CACHE_HOME or HOME), or set LAMPYR_RUNTIME_IMAGES")?;
    let script = repo_root().join("scripts/runtime-images");
    let status = Command::new(&script)
        .arg("--out")
        .arg(&dir)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .status()
        .map_err(|e| format!("running {}: {e}", script.display()))?;
    if !status.success() {
        return Err(format!("{} failed ({status}); its progress is above", script.display()));
    }
    Ok(dir)
}
