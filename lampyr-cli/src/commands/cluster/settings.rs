//! Platform settings: the Workspace's `k8s/platform.yaml`, overridden key by key
//! by `--provider-config`, and their checks (nothing is changed before they pass).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_yaml::{Mapping, Value};

use crate::commands::scaffold::{
    DEFAULT_DOMAIN, DEFAULT_FIBERD_IMAGE, DEFAULT_HTTP_NODE_PORT, DEFAULT_HTTPS_NODE_PORT, DEFAULT_ROUTER_IMAGE, PLATFORM_FILE,
};
use crate::template_repository::{self, RegistryMirror, TemplateRepository, TemplateRepositoryError};

/// The ingress class a fresh installation gives `config-network`: the upstream Envoy-based
/// networking layer (net-gateway-api on Contour) in front of fiber-router, the decision record's
/// "first networking implementation" where Kourier cannot be built; fiber-router's own class,
/// [`lampyr_api::keys::FIBER_INGRESS_CLASS`], is the lighter option chosen in the settings.
pub const DEFAULT_INGRESS_CLASS: &str = lampyr_manifests::gateway::CLASS;

/// The platform settings, as `k8s/platform.yaml` and `--provider-config` spell them.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PlatformSettings {
    /// The fiberd image (recorded; grant Pods run `grantImage`).
    #[serde(default = "default_fiberd_image")]
    pub fiberd_image: String,
    /// fiber-router's image.
    #[serde(default = "default_router_image")]
    pub router_image: String,
    /// Services are served at `<service>.<namespace>.<domain>`.
    #[serde(default = "default_domain")]
    pub domain: String,
    /// Ingress class and NodePorts.
    #[serde(default)]
    pub ingress: Ingress,
    /// Repositories grant Pods pull templates from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zygote_registries: Option<Vec<String>>,
    /// Registry mirrors: the key the host pushes to → the registry the cluster reaches.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub registry_mirrors: BTreeMap<String, RegistryMirror>,
    /// fiberd-k8s-controller's manifest: a file (relative to the settings file naming it) or an https:// URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller_manifest: Option<String>,
    /// The image grant Pods run, pinned by digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grant_image: Option<String>,
    /// The grant Pods' helper image, pinned by digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub helper_image: Option<String>,
    /// The size of each namespace's shared CapacityGrant; lampyr-controller's defaults when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_grant: Option<SharedGrant>,
    /// A PEM file (relative to the settings file naming it) of certificate authorities
    /// lampyr-controller and grant Pods trust for registries besides the system's.
    #[serde(default, rename = "registryCA", skip_serializing_if = "Option::is_none")]
    pub registry_ca: Option<String>,
    /// Whether install puts cert-manager on a cluster without it.
    #[serde(default)]
    pub cert_manager: CertManager,
}

/// `certManager:` settings.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CertManager {
    /// Install the Workspace's `cert-manager.yaml` when the cluster has no cert-manager
    /// (one already there is never changed); `false` leaves a missing one missing (and warned about).
    #[serde(default = "yes")]
    pub install: bool,
}

impl Default for CertManager {
    fn default() -> Self {
        CertManager { install: true }
    }
}

fn yes() -> bool {
    true
}

/// `sharedGrant:` settings: what each grant Pod of a namespace's shared grant holds, and how many run.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SharedGrant {
    /// Fiber slots per grant Pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fiber_slots: Option<u32>,
    /// Guest memory per grant Pod, a Kubernetes quantity (`2Gi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
    /// Grant Pods per shared grant (at least, with `maxInstances`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instances: Option<u32>,
    /// Grant Pods a shared grant may grow to while its Revisions fill more than 80% of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_instances: Option<u32>,
}

impl SharedGrant {
    /// lampyr-controller's flags for these settings, `(flag, value)`.
    pub fn controller_args(&self) -> Vec<(&'static str, String)> {
        let mut args = Vec::new();
        if let Some(slots) = self.fiber_slots {
            args.push(("--grant-fiber-slots", slots.to_string()));
        }
        if let Some(memory) = &self.memory {
            args.push(("--grant-memory", memory.clone()));
        }
        if let Some(instances) = self.instances {
            args.push(("--grant-instances", instances.to_string()));
        }
        if let Some(most) = self.max_instances {
            args.push(("--grant-max-instances", most.to_string()));
        }
        args
    }

    fn check(&self) -> Result<(), SettingsError> {
        let invalid = |key: &'static str, why: String| Err(SettingsError::Invalid { key, why });
        if self.fiber_slots == Some(0) {
            return invalid("sharedGrant.fiberSlots", "must be at least 1".into());
        }
        if self.instances == Some(0) {
            return invalid("sharedGrant.instances", "must be at least 1".into());
        }
        if let Some(most) = self.max_instances.filter(|most| *most < self.instances.unwrap_or(1)) {
            return invalid("sharedGrant.maxInstances", format!("{most} is fewer than instances ({})", self.instances.unwrap_or(1)));
        }
        if let Some(memory) = &self.memory {
            match lampyr_api::quantity::parse_quantity(memory) {
                Ok(q) if !q.is_zero() => {}
                Ok(_) => return invalid("sharedGrant.memory", "must be more than 0 (e.g. 2Gi)".into()),
                Err(e) => return invalid("sharedGrant.memory", format!("{memory:?} is not a quantity: {e} (e.g. 2Gi)")),
            }
        }
        Ok(())
    }
}

/// `ingress:` settings.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Ingress {
    /// `config-network`'s `ingress-class`.
    #[serde(default = "default_ingress_class")]
    pub class: String,
    /// NodePort of fiber-router's public HTTP port.
    #[serde(default = "default_http_node_port")]
    pub http_node_port: u16,
    /// NodePort of fiber-router's public HTTPS port.
    #[serde(default = "default_https_node_port")]
    pub https_node_port: u16,
}

impl Default for Ingress {
    fn default() -> Self {
        Ingress { class: default_ingress_class(), http_node_port: DEFAULT_HTTP_NODE_PORT, https_node_port: DEFAULT_HTTPS_NODE_PORT }
    }
}

fn default_fiberd_image() -> String {
    DEFAULT_FIBERD_IMAGE.to_string()
}
fn default_router_image() -> String {
    DEFAULT_ROUTER_IMAGE.to_string()
}
fn default_domain() -> String {
    DEFAULT_DOMAIN.to_string()
}
fn default_ingress_class() -> String {
    DEFAULT_INGRESS_CLASS.to_string()
}
fn default_http_node_port() -> u16 {
    DEFAULT_HTTP_NODE_PORT
}
fn default_https_node_port() -> u16 {
    DEFAULT_HTTPS_NODE_PORT
}

/// Where fiberd-k8s-controller's manifest comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ControllerManifest {
    /// A local file (resolved, exists).
    File(PathBuf),
    /// An `https://` URL, downloaded at install time.
    Url(String),
}

/// Settings that passed every check, with what was derived from them.
#[derive(Clone, Debug)]
pub struct Checked {
    /// The settings as given (and recorded), `zygoteRegistries` as chosen.
    pub settings: PlatformSettings,
    /// fiberd-k8s-controller's manifest.
    pub controller: ControllerManifest,
    /// The repositories of `grantImage` and `helperImage`, for the GrantPolicy.
    pub allowed_repositories: Vec<String>,
    /// Where templates go.
    pub templates: TemplateRepository,
    /// The content of `registryCA`'s file (PEM), checked to hold a certificate.
    pub registry_ca: Option<String>,
}

/// Why the settings cannot be used. Nothing has been changed yet.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// The Workspace has no `k8s/platform.yaml`.
    #[error(
        "{} has no {PLATFORM_FILE}: run `ly scaffold workspace DIR` and run ly from DIR, or pass --workspace DIR",
        .0.display()
    )]
    NoWorkspace(PathBuf),
    /// A settings file could not be read.
    #[error("reading {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A settings file is not JSON/YAML of the expected shape.
    #[error("{}: {source}; fix the file (keys are listed in docs/ly-cluster.md)", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// Why.
        source: serde_yaml::Error,
    },
    /// A required setting is missing.
    #[error("{key} is not set: {what}")]
    Missing {
        /// The key.
        key: &'static str,
        /// What to set it to.
        what: &'static str,
    },
    /// An image is not pinned by digest in a fully qualified repository.
    #[error("{key} {image:?} is not pinned: {why}; write registry/repository@sha256:<64 hex digits>, e.g. ghcr.io/team/fiberd@sha256:…")]
    Unpinned {
        /// The key.
        key: &'static str,
        /// The image.
        image: String,
        /// What is wrong.
        why: &'static str,
    },
    /// A setting has a value that cannot work.
    #[error("{key}: {why}")]
    Invalid {
        /// The key.
        key: &'static str,
        /// What is wrong and what to write.
        why: String,
    },
    /// `controllerManifest` names a file that does not exist.
    #[error("controllerManifest {} does not exist (resolved against {}); fix the path or give an https:// URL", path.display(), base.display())]
    ControllerManifestMissing {
        /// The resolved path.
        path: PathBuf,
        /// The directory it was resolved against.
        base: PathBuf,
    },
    /// `controllerManifest` is a URL that is not https.
    #[error("controllerManifest {0:?} is a URL but not https://; name a local file or an https:// URL")]
    ControllerManifestUrl(String),
    /// The template repository rules refuse the settings.
    #[error(transparent)]
    TemplateRepository(#[from] TemplateRepositoryError),
}

/// Reads `WORKSPACE/k8s/platform.yaml` and `provider_config` over it, and checks them.
pub fn load(workspace: &Path, provider_config: Option<&Path>) -> Result<Checked, SettingsError> {
    let platform = workspace.join(PLATFORM_FILE);
    if !platform.is_file() {
        return Err(SettingsError::NoWorkspace(workspace.to_path_buf()));
    }
    let mut merged = read_mapping(&platform)?;
    let mut manifest_base = platform.parent().map(Path::to_path_buf).unwrap_or_default();
    if let Some(file) = provider_config {
        let overrides = read_mapping(file)?;
        if overrides.contains_key("controllerManifest") {
            manifest_base = file.parent().map(Path::to_path_buf).unwrap_or_default();
        }
        merged.extend(overrides);
    }
    let source = provider_config.unwrap_or(&platform);
    let settings: PlatformSettings = serde_yaml::from_value(Value::Mapping(merged))
        .map_err(|source_err| SettingsError::Parse { path: source.to_path_buf(), source: source_err })?;
    check(settings, &manifest_base)
}

/// Parses one JSON or YAML settings file into its top-level mapping (empty file: empty mapping).
fn read_mapping(path: &Path) -> Result<Mapping, SettingsError> {
    let text = std::fs::read_to_string(path).map_err(|source| SettingsError::Read { path: path.to_path_buf(), source })?;
    let value: Value = serde_yaml::from_str(&text).map_err(|source| SettingsError::Parse { path: path.to_path_buf(), source })?;
    match value {
        Value::Null => Ok(Mapping::new()),
        Value::Mapping(mapping) => Ok(mapping),
        _ => Err(SettingsError::Parse {
            path: path.to_path_buf(),
            source: serde::de::Error::custom("the settings must be a mapping of keys to values"),
        }),
    }
}

/// Checks `settings` (a relative `controllerManifest` resolved against `base`) before any change.
pub fn check(mut settings: PlatformSettings, base: &Path) -> Result<Checked, SettingsError> {
    let controller = controller_manifest(settings.controller_manifest.as_deref(), base)?;
    let grant = pinned_repository("grantImage", settings.grant_image.as_deref())?;
    let helper = pinned_repository("helperImage", settings.helper_image.as_deref())?;
    if let Some(shared) = &settings.shared_grant {
        shared.check()?;
    }
    let templates = template_repository::choose(settings.zygote_registries.as_deref(), &settings.registry_mirrors)?;
    settings.zygote_registries = Some(templates.zygote_registries.clone());
    let mut allowed_repositories = vec![grant];
    if !allowed_repositories.contains(&helper) {
        allowed_repositories.push(helper);
    }
    let registry_ca = match settings.registry_ca.as_deref() {
        Some(file) => Some(read_registry_ca(&base.join(file))?),
        None => None,
    };
    Ok(Checked { settings, controller, allowed_repositories, templates, registry_ca })
}

/// The certificate authorities in `path` (`registryCA`), as text.
fn read_registry_ca(path: &Path) -> Result<String, SettingsError> {
    let pem = lampyr_artifact::credentials::read_ca_file(path).map_err(|e| SettingsError::Invalid {
        key: "registryCA",
        why: format!("{e} (name a PEM file of CA certificates, relative to the settings file)"),
    })?;
    String::from_utf8(pem).map_err(|_| SettingsError::Invalid { key: "registryCA", why: format!("{} is not PEM text", path.display()) })
}

/// Resolves `controllerManifest`: an https:// URL, or a file that must exist.
fn controller_manifest(value: Option<&str>, base: &Path) -> Result<ControllerManifest, SettingsError> {
    let value = value.ok_or(SettingsError::Missing {
        key: "controllerManifest",
        what: "set it in --provider-config to fiberd-k8s-controller's manifest (a file next to that file, or an https:// URL)",
    })?;
    if value.starts_with("https://") {
        return Ok(ControllerManifest::Url(value.to_string()));
    }
    if value.contains("://") {
        return Err(SettingsError::ControllerManifestUrl(value.to_string()));
    }
    let path = base.join(value);
    if !path.is_file() {
        return Err(SettingsError::ControllerManifestMissing { path, base: base.to_path_buf() });
    }
    Ok(ControllerManifest::File(path))
}

/// The repository of an image pinned by sha256 digest in a fully qualified repository.
pub fn pinned_repository(key: &'static str, image: Option<&str>) -> Result<String, SettingsError> {
    let image = image.ok_or(SettingsError::Missing {
        key,
        what: "set it in --provider-config to an image pinned by digest (registry/repository@sha256:…)",
    })?;
    let unpinned = |why| SettingsError::Unpinned { key, image: image.to_string(), why };
    let (name, digest) = image.split_once('@').ok_or_else(|| unpinned("it has no @sha256: digest"))?;
    let hex = digest.strip_prefix("sha256:").ok_or_else(|| unpinned("its digest is not sha256"))?;
    if hex.len() != 64 || !hex.chars().all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)) {
        return Err(unpinned("its digest is not 64 lowercase hex digits"));
    }
    let (registry, path) = name.split_once('/').ok_or_else(|| unpinned("it names no registry"))?;
    if registry != "localhost" && !registry.contains(['.', ':']) {
        return Err(unpinned("its first component is not a registry (localhost, or a host with a dot or a port)"));
    }
    let repository_path = match path.rsplit_once('/') {
        Some((dir, last)) => format!("{dir}/{}", last.split(':').next().unwrap_or(last)),
        None => path.split(':').next().unwrap_or(path).to_string(),
    };
    let component_ok = |c: &str| !c.is_empty() && c.chars().all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || "._-".contains(ch));
    if !repository_path.split('/').all(component_ok) {
        return Err(unpinned("its repository path is not lowercase letters, digits and . _ - between slashes"));
    }
    Ok(format!("{registry}/{repository_path}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn parse(yaml: &str) -> Result<PlatformSettings, serde_yaml::Error> {
        serde_yaml::from_str(yaml)
    }

    fn valid(dir: &Path) -> PlatformSettings {
        std::fs::write(dir.join("controller.yaml"), "").expect("write");
        parse(&format!(
            "controllerManifest: controller.yaml\ngrantImage: ghcr.io/team/fiberd@{DIGEST}\n\
             helperImage: ghcr.io/team/helper:v1@{DIGEST}\nzygoteRegistries: [https://registry.example.com/t]\n"
        ))
        .expect("parses")
    }

    #[test]
    fn defaults_are_the_documented_ones() {
        let settings = parse("{}").expect("empty settings parse");
        assert_eq!(settings.fiberd_image, DEFAULT_FIBERD_IMAGE);
        assert_eq!(settings.router_image, DEFAULT_ROUTER_IMAGE);
        assert_eq!(settings.domain, "services.example.com");
        assert_eq!((settings.ingress.http_node_port, settings.ingress.https_node_port), (30080, 30443));
        assert_eq!(settings.ingress.class, "gateway-api.ingress.networking.knative.dev", "the upstream layer is the default");
        assert!(settings.cert_manager.install, "cert-manager is installed where missing by default");
        assert!(!parse("{certManager: {install: false}}").expect("parses").cert_manager.install);
    }

    #[test]
    fn the_scaffolded_platform_file_parses_and_json_does_too() {
        let settings = parse(&crate::commands::scaffold::platform_settings()).expect("platform.yaml parses");
        assert_eq!(settings, parse("{}").expect("defaults"));
        let json = parse(r#"{"domain": "x.example.org", "ingress": {"httpsNodePort": 31443}}"#).expect("JSON parses");
        assert_eq!((json.domain.as_str(), json.ingress.https_node_port), ("x.example.org", 31443));
    }

    #[test]
    fn unknown_keys_are_refused() {
        let err = parse("domian: x.example.org\n").expect_err("a typo is refused");
        assert!(err.to_string().contains("unknown field `domian`"), "{err}");
    }

    #[test]
    fn valid_settings_pass_and_give_the_policy_repositories() {
        let dir = tempfile::tempdir().expect("tempdir");
        let checked = check(valid(dir.path()), dir.path()).expect("valid");
        assert_eq!(checked.allowed_repositories, ["ghcr.io/team/fiberd", "ghcr.io/team/helper"]);
        assert_eq!(checked.controller, ControllerManifest::File(dir.path().join("controller.yaml")));
        assert_eq!(checked.templates.pull, "registry.example.com/t");
        assert_eq!(checked.settings.zygote_registries, Some(vec!["registry.example.com/t".to_string()]));
    }

    #[test]
    fn a_registry_ca_is_read_next_to_the_settings_and_must_hold_a_certificate() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
        std::fs::write(dir.path().join("ca.pem"), pem).expect("write");
        let mut settings = valid(dir.path());
        settings.registry_ca = Some("ca.pem".into());
        assert_eq!(check(settings.clone(), dir.path()).expect("valid").registry_ca.as_deref(), Some(pem));
        settings.registry_ca = Some("absent.pem".into());
        let err = check(settings.clone(), dir.path()).expect_err("no such file").to_string();
        assert!(err.starts_with("registryCA:") && err.contains("absent.pem"), "{err}");
        std::fs::write(dir.path().join("key.pem"), "-----BEGIN PRIVATE KEY-----\n").expect("write");
        settings.registry_ca = Some("key.pem".into());
        assert!(check(settings, dir.path()).expect_err("no certificate").to_string().contains("no PEM certificate"));
        let parsed = parse("registryCA: ca.pem\n").expect("the key is spelled registryCA");
        assert_eq!(parsed.registry_ca.as_deref(), Some("ca.pem"));
    }

    #[test]
    fn the_shared_grant_size_becomes_lampyr_controllers_flags_and_bad_values_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut settings = valid(dir.path());
        settings.shared_grant = Some(
            parse("sharedGrant: {fiberSlots: 400, memory: 8Gi, instances: 2, maxInstances: 5}\n")
                .expect("parses")
                .shared_grant
                .expect("set"),
        );
        let checked = check(settings.clone(), dir.path()).expect("valid");
        let args = checked.settings.shared_grant.expect("kept").controller_args();
        assert_eq!(
            args,
            [
                ("--grant-fiber-slots", "400".to_string()),
                ("--grant-memory", "8Gi".into()),
                ("--grant-instances", "2".into()),
                ("--grant-max-instances", "5".into())
            ]
        );
        for (bad, key) in [
            (SharedGrant { fiber_slots: Some(0), ..Default::default() }, "sharedGrant.fiberSlots"),
            (SharedGrant { memory: Some("lots".into()), ..Default::default() }, "sharedGrant.memory"),
            (SharedGrant { memory: Some("0".into()), ..Default::default() }, "sharedGrant.memory"),
            (SharedGrant { instances: Some(0), ..Default::default() }, "sharedGrant.instances"),
            (SharedGrant { instances: Some(3), max_instances: Some(2), ..Default::default() }, "sharedGrant.maxInstances"),
        ] {
            settings.shared_grant = Some(bad);
            let err = check(settings.clone(), dir.path()).expect_err(key).to_string();
            assert!(err.starts_with(key), "{err}");
        }
        assert!(parse("sharedGrant: {slots: 4}\n").is_err(), "a misspelt key is refused");
    }

    #[test]
    fn images_must_be_pinned_and_fully_qualified() {
        let cases = [
            ("ghcr.io/team/fiberd:preview", "no @sha256"),
            ("ghcr.io/team/fiberd@sha512:00", "not sha256"),
            ("ghcr.io/team/fiberd@sha256:abc", "64 lowercase hex"),
            (&format!("team/fiberd@{DIGEST}") as &str, "not a registry"),
            (&format!("fiberd@{DIGEST}") as &str, "no registry"),
            (&format!("ghcr.io/Team/fiberd@{DIGEST}") as &str, "lowercase"),
        ];
        for (image, why) in cases {
            let err = pinned_repository("grantImage", Some(image)).expect_err(image);
            assert!(err.to_string().contains(why), "{image}: {err}");
        }
        assert_eq!(pinned_repository("grantImage", Some(&format!("localhost:5000/f:v1@{DIGEST}"))).expect("pinned"), "localhost:5000/f");
        let missing = pinned_repository("helperImage", None).expect_err("missing");
        assert!(missing.to_string().starts_with("helperImage is not set"), "{missing}");
    }

    #[test]
    fn controller_manifest_is_a_file_next_to_its_settings_or_an_https_url() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut settings = valid(dir.path());
        settings.controller_manifest = Some("missing.yaml".into());
        let err = check(settings.clone(), dir.path()).expect_err("missing file");
        assert!(matches!(err, SettingsError::ControllerManifestMissing { .. }), "{err}");
        settings.controller_manifest = Some("http://example.com/c.yaml".into());
        assert!(matches!(check(settings.clone(), dir.path()), Err(SettingsError::ControllerManifestUrl(_))));
        settings.controller_manifest = Some("https://example.com/c.yaml".into());
        let checked = check(settings, dir.path()).expect("https is fine");
        assert_eq!(checked.controller, ControllerManifest::Url("https://example.com/c.yaml".into()));
    }

    #[test]
    fn bad_zygote_entries_are_refused_through_the_template_rules() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut settings = valid(dir.path());
        settings.zygote_registries = Some(vec!["registry.example.com/t:latest".into()]);
        let err = check(settings.clone(), dir.path()).expect_err("a tag is refused");
        assert!(err.to_string().contains("has a tag"), "{err}");
        settings.zygote_registries = None;
        let err = check(settings, dir.path()).expect_err("no repository at all");
        assert!(err.to_string().contains("set zygoteRegistries"), "{err}");
    }

    #[test]
    fn provider_config_overrides_the_workspace_and_anchors_controller_manifest() {
        let workspace = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(workspace.path().join("k8s")).expect("k8s");
        std::fs::write(workspace.path().join(PLATFORM_FILE), "domain: a.example.com\ncontrollerManifest: nope.yaml\n").expect("write");
        let config_dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(config_dir.path().join("c.yaml"), "").expect("write");
        let config = config_dir.path().join("platform.json");
        std::fs::write(
            &config,
            format!(
                r#"{{"domain": "b.example.com", "controllerManifest": "c.yaml", "grantImage": "r.example.com/g@{DIGEST}",
                    "helperImage": "r.example.com/h@{DIGEST}", "zygoteRegistries": ["r.example.com/t"]}}"#
            ),
        )
        .expect("write");
        let checked = load(workspace.path(), Some(&config)).expect("loads");
        assert_eq!(checked.settings.domain, "b.example.com");
        assert_eq!(checked.controller, ControllerManifest::File(config_dir.path().join("c.yaml")));
        let none = load(config_dir.path(), None).expect_err("not a Workspace");
        assert!(matches!(none, SettingsError::NoWorkspace(_)), "{none}");
    }
}
