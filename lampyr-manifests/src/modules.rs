//! Where the pinned Knative modules are: `go list -m` in the Go module that pins them.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize;

use crate::Error;

/// The module whose `config/core` holds Knative Serving's manifests.
pub const SERVING: &str = "knative.dev/serving";
/// The module whose `config/` holds the networking CRDs and `config-network`.
pub const NETWORKING: &str = "knative.dev/networking";

/// The module whose `config/` holds Knative Eventing's manifests.
pub const EVENTING: &str = "knative.dev/eventing";

/// Knative's Gateway API networking layer, pinned in `knative/net-gateway-api/go.mod`.
pub const NET_GATEWAY_API: &str = "knative.dev/net-gateway-api";
/// Contour, the Gateway API implementation, pinned in `knative/contour/go.mod`.
pub const CONTOUR: &str = "github.com/projectcontour/contour";

/// The nested Go module (under `knative/`) pinning [`NET_GATEWAY_API`].
pub const NET_GATEWAY_API_DIR: &str = "net-gateway-api";
/// The nested Go module (under `knative/`) pinning [`CONTOUR`].
pub const CONTOUR_DIR: &str = "contour";

/// One Go module in the module cache.
#[derive(Clone, Debug)]
pub struct Module {
    /// Module path, e.g. `knative.dev/serving`.
    pub path: String,
    /// Pinned version, e.g. `v0.42.2`.
    pub version: String,
    /// Its directory in the module cache (read-only).
    pub dir: PathBuf,
}

/// The pinned `knative.dev/serving`, `knative.dev/networking` and `knative.dev/eventing`
/// modules, and the Gateway API layer's (`knative.dev/net-gateway-api`, Contour).
#[derive(Clone, Debug)]
pub struct KnativeModules {
    /// `knative.dev/serving`.
    pub serving: Module,
    /// `knative.dev/networking`.
    pub networking: Module,
    /// `knative.dev/eventing`.
    pub eventing: Module,
    /// `knative.dev/net-gateway-api` (pinned in `knative/net-gateway-api/`).
    pub net_gateway_api: Module,
    /// `github.com/projectcontour/contour` (pinned in `knative/contour/`).
    pub contour: Module,
}

impl KnativeModules {
    /// The modules `go_module_dir`'s `go.mod` pins (the repository's `knative/`), and its
    /// nested modules' (`net-gateway-api/`, `contour/`), running `go mod download`
    /// for any not in the module cache yet.
    pub fn locate(go_module_dir: &Path) -> Result<Self, Error> {
        Ok(KnativeModules {
            serving: locate(go_module_dir, SERVING)?,
            networking: locate(go_module_dir, NETWORKING)?,
            eventing: locate(go_module_dir, EVENTING)?,
            net_gateway_api: locate(&go_module_dir.join(NET_GATEWAY_API_DIR), NET_GATEWAY_API)?,
            contour: locate(&go_module_dir.join(CONTOUR_DIR), CONTOUR)?,
        })
    }
}

/// Module `path` as `dir`'s `go.mod` pins it, downloaded if it is not in the cache.
fn locate(dir: &Path, path: &str) -> Result<Module, Error> {
    if let Some(found) = list(dir, path)? {
        return Ok(found);
    }
    go(dir, &["mod", "download", path])?;
    list(dir, path)?.ok_or_else(|| Error::ModuleMissing { module: path.to_string(), dir: dir.to_path_buf() })
}

/// `go list -m -json PATH`: the module, if its directory is in the cache.
fn list(dir: &Path, path: &str) -> Result<Option<Module>, Error> {
    #[derive(Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Listed {
        path: String,
        version: Option<String>,
        dir: Option<PathBuf>,
    }
    let out = go(dir, &["list", "-m", "-json", path])?;
    let listed: Listed = serde_json::from_str(&out).map_err(|e| Error::GoFailed {
        args: format!("list -m -json {path}"),
        dir: dir.to_path_buf(),
        stderr: format!("unexpected output ({e})"),
    })?;
    let version = listed.version.ok_or_else(|| Error::GoFailed {
        args: format!("list -m -json {path}"),
        dir: dir.to_path_buf(),
        stderr: format!("{path} has no version: is it required in go.mod?"),
    })?;
    Ok(listed.dir.filter(|d| d.is_dir()).map(|dir| Module { path: listed.path, version, dir }))
}

fn go(dir: &Path, args: &[&str]) -> Result<String, Error> {
    let output =
        Command::new("go").arg("-C").arg(dir).args(args).output().map_err(|source| Error::GoMissing { args: args.join(" "), source })?;
    if !output.status.success() {
        return Err(Error::GoFailed {
            args: args.join(" "),
            dir: dir.to_path_buf(),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}
