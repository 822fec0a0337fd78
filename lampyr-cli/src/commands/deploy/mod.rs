//! `ly deploy`: each Service's artifact built or taken and pushed, its fiberd
//! template sealed to the cluster's fleet key and pushed to the installation's
//! template repository, the Service applied with both pinned, then waited on
//! until Ready. See `docs/ly-deploy.md`.

pub mod repositories;
pub mod wait;

use std::path::PathBuf;
use std::time::Duration;

use lampyr_api::keys::{FLEET_KEY_FINGERPRINT, SEALED_TEMPLATE, SNAPSHOT_ARTIFACT};
use lampyr_artifact::VerifiedArtifact;
use lampyr_artifact::registry::RegistryClient;
use lampyr_artifact::seal::{FleetKey, seal_artifact};
use serde_json::{Value, json};

use self::repositories::Repositories;
use super::CliError;
use super::cluster::kubectl::{FIELD_MANAGER, Kubectl};
use super::cluster::{ClusterError, reach};
use super::fleet_key;
use super::snapshot::{block_on, resolve};
use super::source::{ServiceDocument, Source, artifact_for, is_registry_reference, read_manifest, source_of};
use crate::args::DeployArgs;
use crate::ui::Ui;

/// Why a deploy failed; each message says what to do next.
#[derive(Debug, thiserror::Error)]
pub enum DeployError {
    /// The context has no Lampyr installation.
    #[error(
        "this context has no Lampyr installation (ConfigMap lampyr-system/lampyr-installation names no template repository); \
         run `ly cluster install` first"
    )]
    NotInstalled,
    /// A manifest holds something other than Services (nothing was deployed).
    #[error(
        "{manifest}: ly deploy deploys Knative Services only, and this manifest also holds {others}; apply those with kubectl (nothing was deployed)"
    )]
    NotAService {
        /// The manifest.
        manifest: String,
        /// The other documents.
        others: String,
    },
    /// `--namespace` and the manifest disagree.
    #[error(
        "{manifest}: Service {name} is in namespace {manifest_namespace}, but --namespace says {flag}; drop one (nothing was deployed)"
    )]
    Namespace {
        /// The manifest.
        manifest: String,
        /// The Service.
        name: String,
        /// `metadata.namespace`.
        manifest_namespace: String,
        /// `--namespace`.
        flag: String,
    },
    /// A Service has no name.
    #[error("{0}: a Service without metadata.name (nothing was deployed)")]
    Unnamed(String),
    /// A template uses something fibers do not support.
    #[error("{manifest}: Service {name}: {reason} (nothing was deployed)")]
    Unsupported {
        /// The manifest.
        manifest: String,
        /// The Service.
        name: String,
        /// What is unsupported.
        reason: String,
    },
    /// A repository does not parse.
    #[error("repository {repository:?}: {reason}")]
    Repository {
        /// As given or recorded.
        repository: String,
        /// Why.
        reason: String,
    },
    /// The fleet key Secret could not be read or created, or is unusable.
    #[error("fleet key: {0}")]
    FleetKey(#[from] super::fleet_key::FleetKeyError),
    /// The Service's latest Revision failed.
    #[error("Service {service} did not become Ready: {why}\nsee `kubectl describe revisions -n <namespace>` for the Revision's conditions")]
    Failed {
        /// `namespace/name`.
        service: String,
        /// Its Ready condition.
        why: String,
    },
    /// The Service was not Ready in time.
    #[error(
        "Service {service} was not Ready after {waited:?} (last: {last}); it stays applied: check it with kubectl, or deploy with a longer --timeout"
    )]
    Timeout {
        /// `namespace/name`.
        service: String,
        /// How long ly waited.
        waited: Duration,
        /// The last status seen.
        last: String,
    },
    /// A local file could not be written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// kubectl's output was not what ly asked for.
    #[error("kubectl apply of Service {service} printed no object ({reason}); check it with kubectl")]
    Applied {
        /// `namespace/name`.
        service: String,
        /// The parse error.
        reason: String,
    },
    /// kubectl or the installation record failed.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
}

/// One Service to deploy, checked before anything is pushed or applied.
struct Planned {
    source: Source,
    document: ServiceDocument,
    namespace: String,
    name: String,
    policy: lampyr_api::policy::FiberPolicy,
}

/// What every Service's deploy shares.
struct Deployer {
    kubectl: Kubectl,
    repositories: Repositories,
    key: FleetKey,
    fingerprint: String,
    keep_image: bool,
    timeout: Duration,
    /// fiber-router's HTTP NodePort, for the hint printed after the URL.
    node_port: u16,
}

/// Runs `ly deploy`.
pub fn run(args: DeployArgs, ui: &mut Ui) -> Result<(), CliError> {
    let kubectl = Kubectl::new(args.target.kubeconfig.clone(), args.target.context.clone());
    // Local checks first: a bad manifest is refused without touching the cluster.
    let namespace = args.namespace.clone().map_or_else(|| context_namespace(&kubectl), Ok)?;
    let planned = plan(&args.paths, &namespace, args.namespace.as_deref())?;
    ui.step("checking the cluster");
    let context = reach(&kubectl, &args.target).map_err(DeployError::from)?;
    let (repositories, settings) = repositories::read(&kubectl, args.repository.as_deref())?;
    if let Some(registry) = repositories.artifacts_unreachable_by_plain_http() {
        ui.warn(format!(
            "artifacts go to plain-HTTP registry {registry}, which lampyr-controller reaches over HTTPS unless its \
             --plain-http-registry flags name it; add --plain-http-registry={registry} to its Deployment, or push beside the templates"
        ));
    }
    let key = fleet_key::get_or_create(&kubectl, ui).map_err(DeployError::from)?;
    let fingerprint = fleet_key::fingerprint(&key.public());
    let timeout = Duration::from_secs(args.timeout);
    let node_port = settings.ingress.http_node_port;
    let deployer = Deployer { kubectl, repositories, key, fingerprint, keep_image: args.keep_image, timeout, node_port };
    ui.step(format!("deploying {} Service(s) to context {context}", planned.len()));
    for service in &planned {
        deployer.deploy(service, ui)?;
    }
    Ok(())
}

/// The template's `lampyr.dev/snapshot-artifact` when it names a registry artifact (used as written).
fn registry_annotation(document: &ServiceDocument) -> Option<&str> {
    let annotations = document.service.spec.template.metadata.annotations.as_ref()?;
    annotations.get(SNAPSHOT_ARTIFACT).map(String::as_str).filter(|r| is_registry_reference(r))
}

/// The namespace of the context (kubectl's default for namespaced objects), else `default`;
/// read from the kubeconfig alone.
fn context_namespace(kubectl: &Kubectl) -> Result<String, CliError> {
    let out = kubectl
        .run(&["config", "view", "--minify", "-o", "jsonpath={..namespace}"], None)
        .map_err(ClusterError::from)
        .map_err(DeployError::from)?;
    Ok(Some(out.trim().to_string()).filter(|n| !n.is_empty()).unwrap_or_else(|| "default".into()))
}

/// Reads every manifest and checks every Service before anything changes.
fn plan(paths: &[PathBuf], default_namespace: &str, flag: Option<&str>) -> Result<Vec<Planned>, CliError> {
    let mut planned = Vec::new();
    for path in paths {
        let source = source_of(path)?;
        let contents = read_manifest(&source.manifest)?;
        let manifest = source.manifest.display().to_string();
        if !contents.others.is_empty() {
            return Err(DeployError::NotAService { manifest, others: contents.others.join(", ") }.into());
        }
        for document in contents.services {
            let metadata = &document.service.metadata;
            let name = metadata.name.clone().ok_or_else(|| DeployError::Unnamed(manifest.clone()))?;
            let namespace = match (&metadata.namespace, flag) {
                (Some(ns), Some(flag)) if ns != flag => {
                    let (manifest_namespace, flag) = (ns.clone(), flag.to_string());
                    return Err(DeployError::Namespace { manifest, name, manifest_namespace, flag }.into());
                }
                (Some(ns), _) => ns.clone(),
                (None, _) => default_namespace.to_string(),
            };
            let policy = lampyr_api::translate::translate(&document.service.spec.template).map_err(|e| DeployError::Unsupported {
                manifest: manifest.clone(),
                name: name.clone(),
                reason: e.to_string(),
            })?;
            planned.push(Planned { source: source.clone(), document, namespace, name, policy });
        }
    }
    Ok(planned)
}

impl Deployer {
    /// Deploys one Service: artifact, sealed template, apply, wait.
    fn deploy(&self, planned: &Planned, ui: &mut Ui) -> Result<(), CliError> {
        let Planned { source, document, namespace, name, policy } = planned;
        ui.step(format!("{namespace}/{name}: resolving its artifact"));
        let given = registry_annotation(document);
        let artifact = match given {
            Some(reference) => resolve(&self.repositories.for_host(reference), ui)?,
            None => artifact_for(source, &document.service, policy, ui)?,
        };
        let reference = match given {
            Some(reference) => reference.to_string(),
            None => self.push_artifact(&artifact, ui)?,
        };
        let live = self
            .kubectl
            .get_json(&format!("services.serving.knative.dev/{name}"), Some(namespace))
            .map_err(ClusterError::from)
            .map_err(DeployError::from)?;
        let sealed = match self.sealed_in(live.as_ref(), &reference) {
            Some(sealed) => {
                ui.step(format!("{namespace}/{name}: its template is already sealed to this fleet key ({sealed})"));
                sealed
            }
            None => self.seal_and_push(&artifact, ui)?,
        };
        let mut object = document.raw.clone();
        self.pin(&mut object, namespace, &reference, &sealed);
        ui.step(format!("{namespace}/{name}: applying the Service"));
        let applied = self.apply(&object)?;
        let generation = applied["metadata"]["generation"].as_i64().unwrap_or(1);
        if self.timeout.is_zero() {
            ui.line(format!("{namespace}/{name}: applied (generation {generation}); not waiting (--timeout 0)"));
            return Ok(());
        }
        ui.step(format!("{namespace}/{name}: waiting up to {}s for Ready", self.timeout.as_secs()));
        let ready = wait::until_ready(&self.kubectl, namespace, name, generation, self.timeout, ui)?;
        ui.line(format!("{namespace}/{name}: {} (revision {})", ready.url, ready.revision));
        let host = ready.url.trim_start_matches("http://").trim_start_matches("https://");
        ui.note(format!("  without DNS for it: curl -H 'Host: {host}' http://NODE:{}/ (fiber-router's NodePort)", self.node_port));
        Ok(())
    }

    /// Pushes a local artifact to the artifact repository; returns its reference as the cluster reaches it.
    fn push_artifact(&self, artifact: &VerifiedArtifact, ui: &mut Ui) -> Result<String, CliError> {
        let target = &self.repositories.artifacts;
        let client = RegistryClient::for_repository(&target.push)?;
        let pushing = format!("pushing artifact {} to {}", artifact.digest, target.push);
        ui.timed(pushing, || block_on(client.push(&artifact.layout, &artifact.digest, &target.push, None)))??;
        Ok(format!("{}@{}", target.pull, artifact.digest))
    }

    /// The live Service's sealed template when it pins the same artifact, sealed to the same key.
    fn sealed_in(&self, live: Option<&Value>, reference: &str) -> Option<String> {
        let annotations = &live?["spec"]["template"]["metadata"]["annotations"];
        let same = annotations[SNAPSHOT_ARTIFACT] == reference && annotations[FLEET_KEY_FINGERPRINT] == self.fingerprint.as_str();
        same.then(|| annotations[SEALED_TEMPLATE].as_str().map(str::to_string)).flatten()
    }

    /// Seals the artifact to the fleet key and pushes it; returns the template's pinned reference.
    fn seal_and_push(&self, artifact: &VerifiedArtifact, ui: &mut Ui) -> Result<String, CliError> {
        let dir = lampyr_artifact::cache::Cache::default_location()?.join("sealed");
        std::fs::create_dir_all(&dir).map_err(|source| DeployError::Io { path: dir.clone(), source })?;
        let out = dir.join(format!("{}.age", artifact.digest.trim_start_matches("sha256:")));
        let sealing = format!("sealing the fiberd template of {} to fleet key {}", artifact.digest, self.fingerprint);
        let sealed = ui.timed(sealing, || seal_artifact(&artifact.layout, &artifact.digest, &self.key.public(), &out))?;
        let target = &self.repositories.templates;
        let client = RegistryClient::for_repository(&target.push)?;
        let pushing = format!("pushing the sealed template ({} bytes) to {}", sealed.size, target.push);
        let pushed = ui.timed(pushing, || block_on(client.push_template(&sealed, &target.push, None)));
        let _ = std::fs::remove_file(&out); // sealed again on the next deploy that needs it
        let pinned = pushed??;
        let digest = pinned.digest().unwrap_or_default().to_string();
        Ok(format!("{}@{digest}", target.pull))
    }

    /// Writes the namespace, the pinned artifact and template, and (unless kept) the image.
    fn pin(&self, object: &mut Value, namespace: &str, reference: &str, sealed: &str) {
        object["metadata"]["namespace"] = json!(namespace);
        let template = &mut object["spec"]["template"];
        let annotations = &mut template["metadata"]["annotations"];
        if !annotations.is_object() {
            *annotations = json!({});
        }
        annotations[SNAPSHOT_ARTIFACT] = json!(reference);
        annotations[SEALED_TEMPLATE] = json!(sealed);
        annotations[FLEET_KEY_FINGERPRINT] = json!(self.fingerprint);
        if self.keep_image {
            return;
        }
        match template["spec"]["containers"].as_array_mut().and_then(|c| c.first_mut()) {
            Some(container) => container["image"] = json!(reference),
            None => template["spec"]["containers"] = json!([{ "image": reference }]),
        }
    }

    /// Server-side applies the Service as field manager `ly`; returns the object as stored.
    fn apply(&self, object: &Value) -> Result<Value, CliError> {
        let manager = format!("--field-manager={FIELD_MANAGER}");
        let args = ["apply", "--server-side", "--force-conflicts", &manager, "-o", "json", "-f", "-"];
        let out = self.kubectl.run(&args, Some(&object.to_string())).map_err(ClusterError::from).map_err(DeployError::from)?;
        serde_json::from_str(&out).map_err(|e| {
            let service =
                format!("{}/{}", object["metadata"]["namespace"].as_str().unwrap_or(""), object["metadata"]["name"].as_str().unwrap_or(""));
            DeployError::Applied { service, reason: e.to_string() }.into()
        })
    }
}
