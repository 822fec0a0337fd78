//! The images every node has, built on this machine (nothing is pulled): the Pod
//! sandbox (`pause`) and CoreDNS from the pinned binaries, named as upstream publishes
//! them so the kubelet and containerd find them under their usual names, and a tool
//! image for tests' own Pods (Debian's static busybox).

use std::path::{Path, PathBuf};

use lampyr_images::{Binary, ImageSpec, User};

use crate::cluster::upstream::Binaries;

/// Debian's static busybox (package `busybox-static`).
const BUSYBOX: &str = "/bin/busybox";

/// The pause and CoreDNS images of a node: their references and OCI archives.
pub struct SystemImages {
    /// `registry.k8s.io/pause:<tag>`: containerd's `sandbox_image`.
    pub pause: String,
    /// `registry.k8s.io/coredns/coredns:<version>`.
    pub coredns: String,
    /// `localhost/lampyr-testenv/busybox:debian`: Debian's `busybox-static` as the
    /// entrypoint `/bin/busybox` (a shell, `wget`, `nslookup`, `httpd`), for tests' Pods.
    pub busybox: String,
    archives: Vec<PathBuf>,
}

impl SystemImages {
    /// Builds both images into `dir` (layouts and archives).
    pub fn build(binaries: &Binaries, dir: &Path) -> Result<SystemImages, String> {
        let version = |name: &str| {
            binaries.upstream_version(name).map(String::from).ok_or_else(|| format!("the cluster binaries list no version of {name}"))
        };
        let pause = image(
            format!("registry.k8s.io/pause:{}", version("pause")?),
            binaries.path("pause"),
            "/pause",
            // As upstream's: the sandbox holds namespaces and reaps; it needs no privilege.
            User::NonRoot,
        );
        let coredns = image(
            format!("registry.k8s.io/coredns/coredns:{}", version("coredns")?),
            binaries.path("coredns"),
            "/coredns",
            // It binds port 53 (its manifest adds NET_BIND_SERVICE).
            User::Root,
        );
        let busybox = image("localhost/lampyr-testenv/busybox:debian".into(), PathBuf::from(BUSYBOX), "/bin/busybox", User::Root);
        if !Path::new(BUSYBOX).is_file() {
            return Err(format!("{BUSYBOX} is missing: run scripts/setup (installs Debian's busybox-static)"));
        }
        let mut archives = Vec::new();
        for spec in [&pause, &coredns, &busybox] {
            archives.push(archive(spec, dir)?);
        }
        Ok(SystemImages { pause: pause.reference, coredns: coredns.reference, busybox: busybox.reference, archives })
    }

    /// The OCI archives to import into a node's containerd.
    pub fn archives(&self) -> Vec<PathBuf> {
        self.archives.clone()
    }
}

/// Builds an image of the static binary `source` as its entrypoint `path`, run as a
/// non-root user, named `reference`, into `dir`; returns its OCI archive (for [`super::Node::import`]).
pub fn binary_image_archive(reference: &str, source: &Path, path: &str, dir: &Path) -> Result<PathBuf, String> {
    if !source.is_file() {
        return Err(format!("{} is missing: run scripts/cluster-bins", source.display()));
    }
    archive(&image(reference.to_string(), source.to_path_buf(), path, User::NonRoot), dir)
}

/// Builds `spec` into `dir` (a layout named after its entrypoint) and writes its archive.
fn archive(spec: &ImageSpec, dir: &Path) -> Result<PathBuf, String> {
    let name = spec.entrypoint[0].rsplit('/').next().unwrap_or("image");
    let layout = dir.join(name);
    let archive = dir.join(format!("{name}.tar"));
    lampyr_images::build(spec, &layout, 0).map_err(|e| format!("building {}: {e}", spec.reference))?;
    lampyr_images::write_archive(&layout, &archive).map_err(|e| format!("archiving {}: {e}", spec.reference))?;
    Ok(archive)
}

/// An image holding one static binary as its entrypoint.
fn image(reference: String, source: PathBuf, path: &str, user: User) -> ImageSpec {
    ImageSpec {
        reference,
        entrypoint: vec![path.to_string()],
        user,
        env: Vec::new(),
        binaries: vec![Binary { source, path: path.to_string() }],
        files: Vec::new(),
        directories: Vec::new(),
        ca_bundle: None,
    }
}
