//! Lampyr's runtime images: reproducible OCI images of every component, built
//! from a checkout's binaries (`docs/runtime-images.md`).
//!
//! - [`ImageSpec`] describes one image: its reference, entrypoint, user, env,
//!   the binaries and files it holds; [`build`] writes it as an OCI image layout
//!   with one gzip layer, byte for byte the same for the same inputs.
//! - [`catalog`] lists Lampyr's images (fiberd, fiber-router, the controllers,
//!   Lampyr's Knative controller and the upstream images: Knative's webhook,
//!   Eventing, the Gateway API layer) and makes their specs from the built
//!   binaries; [`UpstreamImages`] names the upstream ones as their manifests do.
//! - [`write_archive`] tars a layout (what `ctr images import` and
//!   `skopeo copy oci-archive:` read), [`push`] sends it to a registry by digest,
//!   [`import_containerd`] loads it into containerd with `ctr`; [`delivery`]
//!   does all of it for the catalog's images.
//!
//! Nothing here prints: progress goes through `tracing`, failures are [`Error`]s.

mod blob;
pub mod catalog;
mod containerd;
pub mod delivery;
mod elf;
mod error;
mod layer;
mod layout;
mod push;
pub mod rootfs;
mod spec;
mod upstream;

pub use containerd::{ImportedImage, import_containerd};
pub use error::Error;
pub use layout::{BuiltImage, LayoutImage, build, read_archive_image, read_layout, write_archive};
pub use push::{mirror_reference, push};
pub use spec::{Binary, Directory, ImageFile, ImageSpec, NONROOT, Source, User};
pub use upstream::UpstreamImages;

/// Annotation on index.json naming the image's tag (the OCI image layout's own).
pub const ANNOTATION_REF_NAME: &str = "org.opencontainers.image.ref.name";
/// Annotation on index.json naming the full reference (containerd's import names the image by it).
pub const ANNOTATION_IMAGE_NAME: &str = "io.containerd.image.name";
