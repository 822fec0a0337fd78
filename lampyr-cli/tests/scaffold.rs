//! `ly scaffold workspace DIR`, through the real binary: the files, their
//! documents and modes, what the filter left out, and how an existing
//! Workspace is treated.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde::Deserialize as _;
use serde_json::Value;

/// The Workspace's files, in the order `ly` lists them.
const FILES: [&str; 19] = [
    "k8s/cert-manager.yaml",
    "k8s/knative-serving-crds.yaml",
    "k8s/knative-serving-core.yaml",
    "k8s/lampyr-crds.yaml",
    "k8s/lampyr-knative-controller.yaml",
    "k8s/lampyr-controller.yaml",
    "k8s/fiber-router.yaml",
    "k8s/knative-eventing-crds.yaml",
    "k8s/knative-eventing-core.yaml",
    "k8s/knative-eventing-in-memory-channel.yaml",
    "k8s/knative-eventing-mt-channel-broker.yaml",
    "k8s/lampyr-eventgrid-crds.yaml",
    "k8s/lampyr-eventgrid.yaml",
    "k8s/gateway-api-crds.yaml",
    "k8s/contour-gateway-provisioner.yaml",
    "k8s/net-gateway-api.yaml",
    "k8s/contour-gateways.yaml",
    "k8s/platform.yaml",
    "k8s/README.md",
];

fn ly(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ly")).args(args).output().expect("ly runs")
}

fn scaffold(dir: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["scaffold", "workspace", dir.to_str().expect("utf-8")];
    args.extend(extra);
    ly(&args)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Every document of a manifest file, parsed by the YAML library on its own.
fn documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).expect("readable");
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap_or_else(|e| panic!("{}: not YAML: {e}", path.display())))
        .filter(|v| !v.is_null())
        .collect()
}

fn id(object: &Value) -> String {
    let s = |p: &str| object.pointer(p).and_then(Value::as_str).unwrap_or_default().to_string();
    match object.pointer("/metadata/namespace").and_then(Value::as_str) {
        Some(ns) => format!("{} {ns}/{}", s("/kind"), s("/metadata/name")),
        None => format!("{} {}", s("/kind"), s("/metadata/name")),
    }
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).expect("exists").permissions().mode() & 0o777
}

#[test]
fn scaffolding_writes_every_file_and_every_document_is_a_kubernetes_object() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("new/workspace");
    let out = scaffold(&dir, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let listed: Vec<PathBuf> = String::from_utf8_lossy(&out.stdout).lines().map(PathBuf::from).collect();
    assert_eq!(listed, FILES.map(|f| dir.join(f)), "prints every path written");
    assert!(stderr(&out).contains("==> writing k8s/knative-serving-core.yaml"), "shows progress: {}", stderr(&out));

    let mut entries: Vec<String> =
        std::fs::read_dir(dir.join("k8s")).expect("k8s/").map(|e| e.expect("entry").file_name().to_string_lossy().into_owned()).collect();
    entries.sort();
    let mut expected: Vec<String> = FILES.iter().map(|f| f.trim_start_matches("k8s/").to_string()).collect();
    expected.sort();
    assert_eq!(entries, expected, "nothing else (no temporary files) is left in k8s/");

    // Customer source, no secrets: never executable, never writable by others.
    for directory in [dir.clone(), dir.join("k8s")] {
        assert_eq!(mode(&directory) & !0o755, 0, "{} is {:o}", directory.display(), mode(&directory));
        assert_eq!(mode(&directory) & 0o700, 0o700);
    }
    for file in FILES {
        let path = dir.join(file);
        assert_eq!(mode(&path) & !0o644, 0, "{file} is {:o}", mode(&path));
        assert_eq!(mode(&path) & 0o600, 0o600, "{file} is the owner's to edit");
    }

    for file in FILES.iter().filter(|f| f.ends_with(".yaml") && !f.ends_with("platform.yaml")) {
        let path = dir.join(file);
        let text = std::fs::read_to_string(&path).expect("readable");
        let header: Vec<&str> = text.lines().take_while(|l| l.starts_with('#')).collect();
        assert!(header[0].starts_with(&format!("# {file}: ")), "{file}: {:?}", header[0]);
        let source = header.iter().find(|l| l.starts_with("# Source: ")).unwrap_or_else(|| panic!("{file}: no Source line"));
        let names_version = if file.ends_with("/cert-manager.yaml") {
            source.contains("knative.dev/serving v0.42.2 (Knative 1.15.2), third_party/cert-manager-latest/cert-manager.yaml")
        } else if file.contains("knative-serving") {
            source.contains("knative.dev/serving v0.42.2 (Knative 1.15.2)")
        } else if file.contains("knative-eventing") {
            source.contains("knative.dev/eventing v0.42.3 (Knative 1.15.3)")
        } else if lampyr_manifests::gateway_files().iter().any(|(f, _)| file.ends_with(f)) {
            source.contains("knative.dev/net-gateway-api v0.42.0 and github.com/projectcontour/contour v1.29.1")
        } else {
            source.contains(&format!("Lampyr {}, config/", env!("CARGO_PKG_VERSION")))
        };
        assert!(names_version, "{file}: {source}");
        let objects = documents(&path);
        assert!(!objects.is_empty(), "{file} has no objects");
        for object in &objects {
            for pointer in ["/apiVersion", "/kind", "/metadata/name"] {
                let value = object.pointer(pointer).and_then(Value::as_str).unwrap_or_default();
                assert!(!value.is_empty(), "{file}: an object without {pointer}: {object}");
            }
        }
    }

    let settings = documents(&dir.join("k8s/platform.yaml"));
    assert_eq!(
        settings,
        [serde_json::json!({
            "fiberdImage": "ghcr.io/hyperlight-dev/lampyr/fiberd:preview",
            "routerImage": "ghcr.io/hyperlight-dev/lampyr/fiber-router:preview",
            "domain": "services.example.com",
            "ingress": { "httpNodePort": 30080, "httpsNodePort": 30443 },
            "certManager": { "install": true },
        })]
    );
    let readme = std::fs::read_to_string(dir.join("k8s/README.md")).expect("README");
    for file in FILES.iter().filter(|f| !f.ends_with("README.md")) {
        assert!(readme.contains(&format!("`{}`", file.trim_start_matches("k8s/"))), "README explains {file}");
    }
    assert!(readme.contains("- Kourier. Its Go module (knative.dev/net-kourier) could not be fetched"), "README says Kourier is missing");
}

#[test]
fn the_core_is_upstream_without_the_stock_controller_activator_and_autoscaler() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = scaffold(tmp.path(), &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let core: Vec<String> = documents(&tmp.path().join("k8s/knative-serving-core.yaml")).iter().map(id).collect();
    for gone in [
        "Deployment knative-serving/controller",
        "Service knative-serving/controller",
        "Deployment knative-serving/activator",
        "Service knative-serving/activator-service",
        "HorizontalPodAutoscaler knative-serving/activator",
        "PodDisruptionBudget knative-serving/activator-pdb",
        "ServiceAccount knative-serving/activator",
        "Deployment knative-serving/autoscaler",
        "Service knative-serving/autoscaler",
        "Image knative-serving/queue-proxy",
    ] {
        assert!(!core.contains(&gone.to_string()), "{gone} is installed");
    }
    for kept in [
        "Deployment knative-serving/webhook",
        "Service knative-serving/webhook",
        "ServiceAccount knative-serving/controller",
        "ClusterRoleBinding knative-serving-controller-admin",
        "ConfigMap knative-serving/config-network",
        "ConfigMap knative-serving/config-domain",
        "Secret knative-serving/webhook-certs",
        "Certificate knative-serving/routing-serving-certs",
        "ValidatingWebhookConfiguration config.webhook.serving.knative.dev",
    ] {
        assert!(core.contains(&kept.to_string()), "{kept} is missing");
    }

    // What was embedded at build time is what the pinned modules give now.
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let modules = lampyr_manifests::KnativeModules::locate(&repo.join("knative")).unwrap_or_else(|e| panic!("{e}"));
    let filtered = lampyr_manifests::knative::core(&modules).expect("core");
    let now: Vec<String> = filtered.kept.iter().map(lampyr_manifests::Document::id).collect();
    assert_eq!(core, now, "rebuild ly: its embedded manifests are stale");
}

#[test]
fn an_existing_workspace_is_never_overwritten_without_force() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    // A customer's repository, scaffolded into: their files stay untouched.
    std::fs::write(dir.join("README.md"), "mine\n").expect("write");
    let first = scaffold(dir, &[]);
    assert!(first.status.success(), "{}", stderr(&first));
    assert_eq!(std::fs::read_to_string(dir.join("README.md")).expect("read"), "mine\n");

    let platform = dir.join("k8s/platform.yaml");
    std::fs::write(&platform, "domain: edited.example.com\n").expect("edit");
    std::fs::write(dir.join("k8s/kourier.yaml"), "# the customer's own\n").expect("write");
    let again = scaffold(dir, &[]);
    assert_eq!(again.status.code(), Some(1), "refused");
    let message = stderr(&again);
    assert!(message.contains("already has k8s/cert-manager.yaml, k8s/knative-serving-crds.yaml"), "{message}");
    assert!(message.contains("pass --force"), "says what to do: {message}");
    assert!(again.stdout.is_empty(), "wrote nothing");
    assert_eq!(std::fs::read_to_string(&platform).expect("read"), "domain: edited.example.com\n", "edit kept");

    // One existing file is enough to refuse, before anything is written.
    let partial = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(partial.path().join("k8s")).expect("mkdir");
    std::fs::write(partial.path().join("k8s/fiber-router.yaml"), "# mine\n").expect("write");
    let refused = scaffold(partial.path(), &[]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(stderr(&refused).contains("already has k8s/fiber-router.yaml:"), "{}", stderr(&refused));
    assert_eq!(std::fs::read_dir(partial.path().join("k8s")).expect("k8s/").count(), 1, "nothing written");

    let forced = scaffold(dir, &["--force"]);
    assert!(forced.status.success(), "{}", stderr(&forced));
    assert!(stderr(&forced).contains("==> overwriting k8s/platform.yaml"), "{}", stderr(&forced));
    assert!(std::fs::read_to_string(&platform).expect("read").contains("domain: services.example.com"));
    assert_eq!(std::fs::read_to_string(dir.join("k8s/kourier.yaml")).expect("read"), "# the customer's own\n");
    assert_eq!(std::fs::read_to_string(dir.join("README.md")).expect("read"), "mine\n");
}

#[test]
fn a_file_where_the_workspace_would_be_is_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("file");
    std::fs::write(&file, "x").expect("write");
    let out = scaffold(&file, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("is not a directory; choose another Workspace directory"), "{}", stderr(&out));

    std::fs::write(tmp.path().join("k8s"), "x").expect("write");
    let out = scaffold(tmp.path(), &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("k8s exists and is not a directory"), "{}", stderr(&out));
}
