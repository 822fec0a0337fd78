//! `ly scaffold workspace DIR`: a Workspace's customer-editable `k8s/` directory.
//!
//! The manifests were generated when `ly` was built, from the pinned Knative
//! modules and the repository's `config/` (`build.rs`, `lampyr-manifests`), so
//! scaffolding needs neither Go nor the network.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use crate::ui::Ui;

/// What `build.rs` generated: the bundle and the versions it came from.
mod embedded {
    include!(concat!(env!("OUT_DIR"), "/bundle.rs"));
}

pub use embedded::{KNATIVE_EVENTING, KNATIVE_NETWORKING, KNATIVE_RELEASE, KNATIVE_SERVING};

/// The Workspace directory holding the bootstrap manifests.
pub const K8S_DIR: &str = "k8s";
/// The platform settings file, relative to the Workspace root.
pub const PLATFORM_FILE: &str = "k8s/platform.yaml";
/// The README explaining `k8s/`, relative to the Workspace root.
pub const README_FILE: &str = "k8s/README.md";

/// Default fiberd image (`fiberdImage`).
pub const DEFAULT_FIBERD_IMAGE: &str = "ghcr.io/hyperlight-dev/lampyr/fiberd:preview";
/// Default fiber-router image (`routerImage`).
pub const DEFAULT_ROUTER_IMAGE: &str = "ghcr.io/hyperlight-dev/lampyr/fiber-router:preview";
/// Default domain of Service URLs (`domain`).
pub const DEFAULT_DOMAIN: &str = "services.example.com";
/// Default NodePort of the ingress's HTTP listener (`ingress.httpNodePort`).
pub const DEFAULT_HTTP_NODE_PORT: u16 = 30080;
/// Default NodePort of the ingress's HTTPS listener (`ingress.httpsNodePort`).
pub const DEFAULT_HTTPS_NODE_PORT: u16 = 30443;

/// One file `ly scaffold workspace` writes.
#[derive(Clone, Debug)]
pub struct WorkspaceFile {
    /// Path relative to the Workspace root, `/`-separated.
    pub path: String,
    /// What it is, one line.
    pub about: &'static str,
    /// Its content.
    pub contents: String,
}

/// Why a Workspace could not be scaffolded.
#[derive(Debug, thiserror::Error)]
pub enum ScaffoldError {
    /// Some of the files exist and `--force` was not given.
    #[error(
        "{} already has {}: pass --force to overwrite ly's files (edits to them are lost), or choose another directory",
        dir.display(),
        files.join(", ")
    )]
    Exists {
        /// The Workspace root.
        dir: PathBuf,
        /// The existing files, relative to it.
        files: Vec<String>,
    },
    /// The Workspace root (or its `k8s/`) is a file.
    #[error("{} exists and is not a directory; choose another Workspace directory", .0.display())]
    NotADirectory(PathBuf),
    /// The file system refused.
    #[error("writing {}: {source}", path.display())]
    Io {
        /// What was being written.
        path: PathBuf,
        /// Why it failed.
        source: std::io::Error,
    },
}

/// Every file of a new Workspace, in the order the `ly cluster` commands apply the manifests.
pub fn workspace_files() -> Vec<WorkspaceFile> {
    let mut files: Vec<WorkspaceFile> = embedded::FILES
        .iter()
        .map(|(name, about, text)| WorkspaceFile { path: format!("{K8S_DIR}/{name}"), about, contents: text.to_string() })
        .collect();
    files.push(WorkspaceFile {
        path: PLATFORM_FILE.to_string(),
        about: "platform settings: images, domain and ingress NodePorts (settings, not a Kubernetes manifest)",
        contents: platform_settings(),
    });
    let readme = readme(&files);
    files.push(WorkspaceFile { path: README_FILE.to_string(), about: "what each file is", contents: readme });
    files
}

/// Writes a new Workspace into `dir` (created when missing) and returns the paths written.
///
/// Refuses, before writing anything, when any of its files exists already,
/// unless `force`: the files are the customer's to edit, and are never
/// silently replaced by new defaults. Other files in `dir` are left alone.
pub fn workspace(dir: &Path, force: bool, ui: &mut Ui) -> Result<Vec<PathBuf>, ScaffoldError> {
    let files = workspace_files();
    for directory in [dir.to_path_buf(), dir.join(K8S_DIR)] {
        if directory.exists() && !directory.is_dir() {
            return Err(ScaffoldError::NotADirectory(directory));
        }
    }
    let existing: Vec<String> = files.iter().filter(|f| dir.join(&f.path).exists()).map(|f| f.path.clone()).collect();
    if !existing.is_empty() && !force {
        return Err(ScaffoldError::Exists { dir: dir.to_path_buf(), files: existing });
    }
    ui.step(format!("writing a Workspace into {} ({KNATIVE_SERVING}, Knative {KNATIVE_RELEASE})", dir.display()));
    create_dir(&dir.join(K8S_DIR))?;
    let mut written = Vec::new();
    for file in &files {
        let path = dir.join(&file.path);
        let verb = if existing.contains(&file.path) { "overwriting" } else { "writing" };
        ui.step(format!("{verb} {}", file.path));
        write_file(&path, &file.contents)?;
        ui.line(path.display().to_string());
        written.push(path);
    }
    ui.step(format!(
        "done: edit {PLATFORM_FILE} (images, domain, ingress) and the manifests as needed; the `ly cluster` commands read them from this Workspace"
    ));
    Ok(written)
}

/// Creates `dir` and its parents, `rwxr-xr-x` at most (the umask may narrow it).
fn create_dir(dir: &Path) -> Result<(), ScaffoldError> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)
        .map_err(|source| ScaffoldError::Io { path: dir.to_path_buf(), source })
}

/// Writes `contents` to `path` through a temporary file renamed into place, so
/// an interrupted run never leaves half a manifest; `rw-r--r--` at most.
fn write_file(path: &Path, contents: &str) -> Result<(), ScaffoldError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let io = |source| ScaffoldError::Io { path: path.to_path_buf(), source };
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let temporary = path.with_file_name(format!(".{name}.ly-scaffold.{}", std::process::id()));
    let result = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&temporary)
        .and_then(|mut file| {
            file.write_all(contents.as_bytes())?;
            file.sync_all()
        })
        .and_then(|()| std::fs::rename(&temporary, path));
    if result.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    result.map_err(io)
}

/// `k8s/platform.yaml`: the defaults of a fresh installation, in the keys
/// `--provider-config` takes.
pub fn platform_settings() -> String {
    format!(
        "# k8s/platform.yaml: Lampyr's platform settings for this Workspace.\n\
         #\n\
         # The `ly cluster` commands read these settings; a `--provider-config FILE`\n\
         # (JSON or YAML, the same keys) overrides them. This file is settings, not a\n\
         # Kubernetes manifest. Written by `ly scaffold workspace` (Lampyr {version}).\n\
         # Customer-editable.\n\
         \n\
         # The fiberd image, recorded with the installation. Grant Pods run the\n\
         # settings grantImage (fiberd) and helperImage (fiberd-helper), which\n\
         # `ly cluster install` requires pinned by digest, and controllerManifest\n\
         # (see the `ly cluster` reference).\n\
         fiberdImage: {DEFAULT_FIBERD_IMAGE}\n\
         # The cluster's request router: install sets it in k8s/fiber-router.yaml.\n\
         # Public on GHCR; an offline cluster can preload it before installation.\n\
         routerImage: {DEFAULT_ROUTER_IMAGE}\n\
         # Knative Services are served at <service>.<namespace>.<domain>.\n\
         domain: {DEFAULT_DOMAIN}\n\
         # The public edge's NodePorts (local clusters; a provider maps its host\n\
         # ports to them). The default class, gateway-api.ingress.networking.knative.dev,\n\
         # puts net-gateway-api, Contour and Envoy in front of fiber-router;\n\
         # `class: fiber.ingress.networking.knative.dev` lets fiber-router take the\n\
         # NodePorts itself (one hop shorter, no Envoy).\n\
         ingress:\n\
         \x20 httpNodePort: {DEFAULT_HTTP_NODE_PORT}\n\
         \x20 httpsNodePort: {DEFAULT_HTTPS_NODE_PORT}\n\
         # Repositories grant Pods pull fiberd templates from, anonymously (see the\n\
         # `ly cluster` reference, \"Fiberd templates\"), for example:\n\
         # zygoteRegistries:\n\
         #   - registry.example.com/lampyr/fiberd-templates\n\
         # cert-manager: install applies k8s/cert-manager.yaml to a cluster without it\n\
         # (and never changes one that is there); `install: false` skips it.\n\
         certManager:\n\
         \x20 install: true\n",
        version = env!("CARGO_PKG_VERSION"),
    )
}

/// `k8s/README.md`, listing `files` (the manifests and the settings).
fn readme(files: &[WorkspaceFile]) -> String {
    let mut table = String::new();
    for file in files {
        let name = file.path.trim_start_matches(&format!("{K8S_DIR}/"));
        table.push_str(&format!("| `{name}` | {} |\n", file.about));
    }
    format!(
        "# k8s/: this Workspace's bootstrap manifests\n\
         \n\
         Every `ly cluster` command (install, health, uninstall) reads this directory. `ly scaffold\n\
         workspace` (Lampyr {version}) wrote these files; they are yours to edit and keep under\n\
         version control. ly never rewrites them from new defaults: only `ly scaffold workspace\n\
         --force` overwrites them, losing your edits.\n\
         \n\
         | file | what it is |\n\
         |---|---|\n\
         {table}\
         \n\
         The manifests are applied in the order of this table (`kubectl apply --server-side -f`\n\
         works on each). Each starts with a comment naming\n\
         its source: the Knative ones come from {KNATIVE_SERVING} (Knative {KNATIVE_RELEASE}) and\n\
         {KNATIVE_NETWORKING}, as Knative {KNATIVE_RELEASE}'s release publishes them\n\
         (images `gcr.io/knative-releases/...:v{KNATIVE_RELEASE}`); Lampyr's come from its own repository.\n\
         \n\
         `gateway-api-crds.yaml`, `contour-gateway-provisioner.yaml`, `net-gateway-api.yaml` and\n\
         `contour-gateways.yaml` are applied when `ingress.class` in `platform.yaml` is\n\
         `gateway-api.ingress.networking.knative.dev`, the default: Knative's net-gateway-api on\n\
         Contour and Envoy, in front of fiber-router (Lampyr's edits are named in each document's\n\
         source line). `fiber.ingress.networking.knative.dev` leaves them out.\n\
         \n\
         The `knative-eventing-*.yaml` and `lampyr-eventgrid*.yaml` files are applied only by\n\
         `ly cluster install --eventing`: Knative Eventing from {KNATIVE_EVENTING}, unchanged,\n\
         split as its release splits it (CRDs, core, the in-memory channel, the multi-tenant\n\
         channel-based Broker), then Lampyr's AzureEventGridSource and its adapter.\n\
         \n\
         `knative-serving-core.yaml` is upstream's core without the stock controller, activator and\n\
         autoscaler: Lampyr's Knative controller, lampyr-controller and fiber-router do their work.\n\
         Its header lists every object left out and why (the rules are in Lampyr's\n\
         `docs/ly-workspace.md`). Knative's configuration ConfigMaps (`config-domain`,\n\
         `config-network`, `config-autoscaler`, ...) are in it, with upstream's documented examples.\n\
         \n\
         Not here:\n\
         \n\
         - Kourier. Its Go module (knative.dev/net-kourier) could not be fetched when this ly was\n\
         \x20 built, so `kourier.yaml` is not generated; the Gateway API layer above is the\n\
         \x20 upstream Envoy-based one installed in its place.\n\
         - The grant controller (`fiberd-k8s-controller`): `ly cluster install` applies it, as\n\
         \x20 written, from the `controllerManifest` platform setting.\n\
         - cert-manager's csi-driver: `ly cluster install` does not install it (Lampyr's\n\
         \x20 `docs/cert-manager.md` says why) and warns when it is missing.\n\
         \n\
         `cert-manager.yaml` is cert-manager's release manifest, unchanged, as Knative Serving's\n\
         module carries it: `ly cluster install` applies it first, and only to a cluster without\n\
         cert-manager (`certManager.install: false` in `platform.yaml` skips it); one already\n\
         there, whoever installed it, is never upgraded.\n\
         \n\
         Images: `ly cluster install` sets fiber-router's image from `routerImage` and\n\
         lampyr-controller's `--grant-image`/`--helper-image` from `grantImage`/`helperImage`.\n\
         Every other image ships as written here (Lampyr's `:preview` tags and Knative's release\n\
         images): preload them on the nodes, or edit the files to name others.\n",
        version = env!("CARGO_PKG_VERSION"),
    )
}
