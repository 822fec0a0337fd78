//! Where `ly deploy` pushes: the installation's template repository (as its
//! record names it) and the artifact repository, each spelled twice: as the
//! host pushes to it and as the cluster pulls from it.

use std::collections::BTreeMap;

use lampyr_artifact::reference::{Repository, plain_http_registries};

use super::DeployError;
use crate::commands::cluster::kubectl::Kubectl;
use crate::commands::cluster::plan::{INSTALLATION, SYSTEM_NAMESPACE};
use crate::commands::cluster::settings::PlatformSettings;
use crate::commands::cluster::{ClusterError, record_entry};
use crate::template_repository::RegistryMirror;

/// Path of the artifact repository beside the template repository.
pub const ARTIFACTS_PATH: &str = "lampyr/snapshots";

/// One repository as the host pushes to it and as the cluster pulls from it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spelled {
    /// Where the host pushes (`http://…` when plain HTTP).
    pub push: Repository,
    /// How the cluster names it: the reference written into the Service (no scheme).
    pub pull: String,
}

/// Both repositories of a deploy, and how the host reaches what the cluster names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Repositories {
    /// Sealed fiberd templates.
    pub templates: Spelled,
    /// Snapshot artifacts.
    pub artifacts: Spelled,
    /// `registryMirrors`: the registry the cluster reaches → the key the host uses, and whether it is plain HTTP.
    mirrors: Vec<(String, String, bool)>,
    /// Registries the installation reaches over plain HTTP (its `http://` template spellings).
    plain_http: Vec<String>,
}

impl Repositories {
    /// When artifacts go to a plain-HTTP registry the installation does not reach over plain
    /// HTTP (lampyr-controller's `--plain-http-registry` covers only the template registries),
    /// that registry as the cluster names it.
    pub fn artifacts_unreachable_by_plain_http(&self) -> Option<&str> {
        let registry = self.artifacts.pull.split('/').next().unwrap_or_default();
        (self.artifacts.push.plain_http && !self.plain_http.iter().any(|r| r == registry)).then_some(registry)
    }

    /// A registry reference as the cluster spells it (in a Service), as the host reaches it:
    /// a mirror's in-cluster registry becomes the mirror's key, and a plain-HTTP registry gets
    /// `http://`. Anything else (a scheme given, a layout path, another registry) is unchanged.
    pub fn for_host(&self, reference: &str) -> String {
        if reference.contains("://") {
            return reference.to_string();
        }
        let Some((registry, rest)) = reference.split_once('/') else { return reference.to_string() };
        if let Some((_, key, plain)) = self.mirrors.iter().find(|(target, _, _)| target == registry) {
            let scheme = if *plain { "http://" } else { "" };
            return format!("{scheme}{key}/{rest}");
        }
        if self.plain_http.iter().any(|r| r == registry) {
            return format!("http://{reference}");
        }
        reference.to_string()
    }
}

/// Reads the installation record and derives both repositories (`artifacts` overrides the
/// artifact one); also returns the recorded platform settings.
pub fn read(kubectl: &Kubectl, artifacts: Option<&str>) -> Result<(Repositories, PlatformSettings), DeployError> {
    let config = kubectl.get_json(&format!("configmap/{INSTALLATION}"), Some(SYSTEM_NAMESPACE)).map_err(ClusterError::from)?;
    let data = config.as_ref().map(|c| &c["data"]);
    let field = |key: &str| data.and_then(|d| d[key].as_str()).filter(|v| !v.is_empty()).map(str::to_string);
    let (Some(push), Some(pull)) = (field("templatePush"), field("templateRepository")) else {
        return Err(DeployError::NotInstalled);
    };
    let settings = record_entry(kubectl, "settings")?.ok_or(DeployError::NotInstalled)?;
    let settings: PlatformSettings = serde_json::from_str(&settings).map_err(|e| ClusterError::Record(e.to_string()))?;
    Ok((derive(&push, &pull, artifacts, &settings.registry_mirrors)?, settings))
}

/// The repositories from the recorded template spellings, the mirrors, and an artifact override.
pub fn derive(
    template_push: &str,
    template_pull: &str,
    artifacts: Option<&str>,
    mirrors: &BTreeMap<String, RegistryMirror>,
) -> Result<Repositories, DeployError> {
    let (push, pull) = (parse(template_push)?, parse(template_pull)?);
    let plain_http = plain_http_registries([&push, &pull]);
    let artifacts = match artifacts {
        None => {
            let beside = |r: &Repository| Repository { path: ARTIFACTS_PATH.to_string(), ..r.clone() };
            Spelled { push: beside(&push), pull: beside(&pull).without_scheme() }
        }
        Some(given) => {
            let push = parse(given)?;
            let registry = mirrors.get(&push.registry).map_or(&push.registry, |mirror| &mirror.registry);
            let pull = format!("{registry}/{}", push.path);
            Spelled { push, pull }
        }
    };
    let templates = Spelled { pull: pull.without_scheme(), push };
    let mirrors = mirrors.iter().map(|(key, m)| (m.registry.clone(), key.clone(), m.plain_http)).collect();
    Ok(Repositories { templates, artifacts, mirrors, plain_http })
}

fn parse(repository: &str) -> Result<Repository, DeployError> {
    Repository::parse(repository).map_err(|e| DeployError::Repository { repository: repository.to_string(), reason: e.to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mirrors() -> BTreeMap<String, RegistryMirror> {
        BTreeMap::from([("localhost:5002".to_string(), RegistryMirror { registry: "kind-registry:5000".into(), plain_http: true })])
    }

    #[test]
    fn artifacts_default_to_the_template_registry_in_both_spellings() {
        let r =
            derive("http://localhost:5002/lampyr/fiberd-templates", "http://kind-registry:5000/lampyr/fiberd-templates", None, &mirrors())
                .expect("derives");
        assert_eq!(r.templates.push.to_string(), "http://localhost:5002/lampyr/fiberd-templates");
        assert_eq!(r.templates.pull, "kind-registry:5000/lampyr/fiberd-templates");
        assert_eq!(r.artifacts.push.to_string(), "http://localhost:5002/lampyr/snapshots");
        assert_eq!(r.artifacts.pull, "kind-registry:5000/lampyr/snapshots");
    }

    #[test]
    fn references_as_the_cluster_spells_them_are_reached_through_the_host_spelling() {
        let r = derive("http://localhost:5002/t", "http://kind-registry:5000/t", None, &mirrors()).expect("derives");
        let d = format!("sha256:{}", "a".repeat(64));
        assert_eq!(r.for_host(&format!("kind-registry:5000/lampyr/app@{d}")), format!("http://localhost:5002/lampyr/app@{d}"));
        assert_eq!(r.for_host(&format!("registry.example.com/app@{d}")), format!("registry.example.com/app@{d}"));
        assert_eq!(
            r.for_host(&format!("https://kind-registry:5000/app@{d}")),
            format!("https://kind-registry:5000/app@{d}"),
            "a scheme given is kept"
        );
        let direct = derive("http://10.0.0.5:5000/t", "http://10.0.0.5:5000/t", None, &BTreeMap::new()).expect("derives");
        assert_eq!(direct.for_host(&format!("10.0.0.5:5000/app@{d}")), format!("http://10.0.0.5:5000/app@{d}"), "plain HTTP as recorded");
    }

    #[test]
    fn another_plain_http_artifact_registry_is_flagged() {
        let t = "http://localhost:5002/lampyr/fiberd-templates";
        let beside = derive(t, "http://kind-registry:5000/lampyr/fiberd-templates", None, &mirrors()).expect("derives");
        assert_eq!(beside.artifacts_unreachable_by_plain_http(), None, "the template registry is plain HTTP for the cluster");
        let other =
            derive(t, "http://kind-registry:5000/lampyr/fiberd-templates", Some("http://10.0.0.9:5000/apps"), &mirrors()).expect("derives");
        assert_eq!(other.artifacts_unreachable_by_plain_http(), Some("10.0.0.9:5000"));
        let tls =
            derive(t, "http://kind-registry:5000/lampyr/fiberd-templates", Some("registry.example.com/apps"), &mirrors()).expect("derives");
        assert_eq!(tls.artifacts_unreachable_by_plain_http(), None);
    }

    #[test]
    fn a_given_artifact_repository_is_pulled_through_its_mirror_or_as_given() {
        let t = "registry.example.com/t";
        let via_mirror = derive(t, t, Some("http://localhost:5002/team/app"), &mirrors()).expect("derives");
        assert_eq!(via_mirror.artifacts.pull, "kind-registry:5000/team/app");
        let direct = derive(t, t, Some("registry.example.com/team/app"), &mirrors()).expect("derives");
        assert_eq!(
            (direct.artifacts.push.to_string().as_str(), direct.artifacts.pull.as_str()),
            ("registry.example.com/team/app", "registry.example.com/team/app")
        );
        let bad = derive(t, t, Some("Not A Repo"), &mirrors()).expect_err("refused");
        assert!(bad.to_string().contains("Not A Repo"), "{bad}");
    }
}
