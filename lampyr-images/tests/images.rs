//! Lampyr's runtime images, built from this checkout's binaries: reproducible,
//! importable into a real containerd under their names, runnable there, and
//! pushable to a real registry byte for byte.
//!
//! Needs root, Debian's containerd and runc (`scripts/setup`), the workspace's
//! binaries (built on demand) and the Go binaries of `scripts/cluster-bins`.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use lampyr_images::catalog::{self, Component, Inputs, Origin};
use lampyr_images::delivery::{Delivery, deliver, prepare};
use lampyr_images::{ImageFile, ImageSpec, Source, build, read_layout, write_archive};
use lampyr_testenv::cluster::upstream::Binaries;
use lampyr_testenv::containerd::{Containerd, ContainerdOptions, RunOptions};
use lampyr_testenv::{TestRegistry, repo_root, workspace_binary};

/// Every image of the catalog: each test covers each of them.
const TESTED: [&str; 24] = [
    "fiberd",
    "fiberd-helper",
    "fiber-router",
    "lampyr-controller",
    "fiberd-k8s-controller",
    "knative-controller",
    "knative-webhook",
    "eventgrid-adapter",
    "eventing-controller",
    "eventing-webhook",
    "eventing-mt-broker-controller",
    "eventing-broker-ingress",
    "eventing-broker-filter",
    "eventing-imc-controller",
    "eventing-imc-dispatcher",
    "eventing-pingsource-adapter",
    "eventing-job-sink",
    "net-gateway-api-controller",
    "net-gateway-api-webhook",
    "contour",
    "envoy",
    "cert-manager-controller",
    "cert-manager-webhook",
    "cert-manager-cainjector",
];

fn tested() -> Vec<&'static Component> {
    TESTED.iter().map(|name| catalog::component(name).expect("in the catalog")).collect()
}

/// Where the tested images' binaries are: the workspace's (built on demand, in
/// this test's profile) and the Go ones.
fn inputs() -> Inputs {
    let mut cargo_bins = None;
    for component in tested() {
        if let Origin::Cargo { package, bin } = component.origin {
            cargo_bins = workspace_binary(package, bin).parent().map(Path::to_path_buf);
        }
    }
    let go = Binaries::locate().unwrap_or_else(|e| panic!("the Go binaries are needed: {e}"));
    Inputs {
        cargo_bins: cargo_bins.expect("a Rust image is tested"),
        go_bins: go.dir,
        knative_module: repo_root().join("knative"),
        ca_bundle: PathBuf::from("/etc/ssl/certs/ca-certificates.crt"),
    }
}

fn specs() -> Vec<(&'static Component, ImageSpec)> {
    prepare(&tested(), &inputs()).unwrap_or_else(|e| panic!("{e}"))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime")
}

#[test]
fn every_catalog_image_is_tested() {
    let mut covered: Vec<&str> = TESTED.to_vec();
    covered.sort_unstable();
    let mut names = catalog::names();
    names.sort_unstable();
    assert_eq!(covered, names);
}

#[test]
fn upstream_images_are_named_as_the_workspace_manifests_name_them() {
    let webhook = catalog::component("knative-webhook").expect("listed");
    let reference = webhook.reference(&repo_root().join("knative")).unwrap_or_else(|e| panic!("{e}"));
    let modules = lampyr_manifests::KnativeModules::locate(&repo_root().join("knative")).expect("modules");
    let release = lampyr_manifests::knative::release(&modules.serving).expect("release");
    assert_eq!(reference, format!("gcr.io/knative-releases/knative.dev/serving/cmd/webhook:v{release}"));
    let release = lampyr_manifests::knative::release(&modules.eventing).expect("release");
    for (name, command) in [("eventing-broker-ingress", "broker/ingress"), ("eventing-pingsource-adapter", "mtping")] {
        let reference = catalog::component(name).expect("listed").reference(&repo_root().join("knative")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(reference, format!("gcr.io/knative-releases/knative.dev/eventing/cmd/{command}:v{release}"), "{name}");
    }
    let release = lampyr_manifests::knative::release(&modules.net_gateway_api).expect("release");
    let reference =
        |name: &str| catalog::component(name).expect("listed").reference(&repo_root().join("knative")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(reference("net-gateway-api-webhook"), format!("gcr.io/knative-releases/knative.dev/net-gateway-api/cmd/webhook:v{release}"));
    assert_eq!(reference("contour"), format!("ghcr.io/projectcontour/contour:{}", modules.contour.version));
    for name in ["cert-manager-controller", "cert-manager-webhook", "cert-manager-cainjector"] {
        assert_eq!(reference(name), format!("quay.io/jetstack/{name}:v1.14.4"), "named as cert-manager's release manifest names it");
    }
}

#[test]
fn two_builds_of_every_image_are_identical_and_a_changed_file_changes_the_digest() {
    let dir = tempfile::tempdir().expect("tempdir");
    let epoch = 1_700_000_000;
    for (component, spec) in specs() {
        let first = build(&spec, &dir.path().join(format!("{}-1", component.name)), epoch).expect("first build");
        let second = build(&spec, &dir.path().join(format!("{}-2", component.name)), epoch).expect("second build");
        assert_eq!(first.manifest_digest, second.manifest_digest, "{}", component.name);
        assert_eq!((&first.layer_digest, &first.config_digest), (&second.layer_digest, &second.config_digest));
        let archives: Vec<Vec<u8>> = [&first.layout, &second.layout]
            .iter()
            .map(|layout| {
                let archive = layout.with_extension("tar");
                write_archive(layout, &archive).expect("archive");
                std::fs::read(&archive).expect("read archive")
            })
            .collect();
        assert!(archives[0] == archives[1], "{}: the two archives differ", component.name);

        let mut changed = spec.clone();
        changed.files.push(ImageFile { path: "/etc/lampyr-test".into(), source: Source::Bytes(b"x".to_vec()), mode: 0o644 });
        let other = build(&changed, &dir.path().join(format!("{}-3", component.name)), epoch).expect("changed build");
        assert_ne!(first.manifest_digest, other.manifest_digest, "{}", component.name);
        assert_ne!(first.diff_id, other.diff_id, "{}", component.name);
    }
}

#[test]
fn a_changed_binary_changes_the_digest() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_, spec) = specs().into_iter().find(|(c, _)| c.name == "fiber-router").expect("fiber-router");
    let copy = dir.path().join("fiber-router");
    std::fs::copy(&spec.binaries[0].source, &copy).expect("copy the binary");
    let mut changed = spec.clone();
    changed.binaries[0].source = copy.clone();
    let same = build(&changed, &dir.path().join("same"), 0).expect("build");
    let original = build(&spec, &dir.path().join("original"), 0).expect("build");
    assert_eq!(same.manifest_digest, original.manifest_digest, "the binary's path on the host does not matter");
    // One letter of its help text (in .rodata): bytes outside every section
    // (appended ones) would be dropped by `objcopy --strip-debug` and change nothing.
    let mut bytes = std::fs::read(&copy).expect("read");
    let text = b"routes Knative traffic";
    let at = bytes.windows(text.len()).position(|w| w == text).expect("fiber-router's about text");
    bytes[at] = b'R';
    std::fs::write(&copy, bytes).expect("change a letter");
    let different = build(&changed, &dir.path().join("different"), 0).expect("build");
    assert_ne!(different.manifest_digest, original.manifest_digest);
}

#[test]
fn every_image_imports_into_containerd_under_its_name_and_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let containerd = Containerd::start(ContainerdOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    let delivery = Delivery {
        out_dir: dir.path().to_path_buf(),
        created: 0,
        registry: None,
        containerd: Some((containerd.address(), lampyr_testenv::containerd::NAMESPACE.to_string())),
    };
    let mut failures = Vec::new();
    for (component, spec) in specs() {
        let delivered = runtime().block_on(deliver(component, &spec, &delivery)).unwrap_or_else(|e| panic!("{e}"));
        let imported = delivered.imported.clone().expect("imported");
        assert_eq!((imported.name.as_str(), imported.digest.as_str()), (spec.reference.as_str(), delivered.digest.as_str()));

        let binary = component.install_path();
        let (args, env) = component.usage;
        let command: Vec<&str> = std::iter::once(binary.as_str()).chain(args.iter().copied()).collect();
        let options = RunOptions { env: env.iter().map(|e| e.to_string()).collect(), read_only: true };
        let output = run_printing(&containerd, &spec.reference, &command, &options);
        let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        // Envoy says `USAGE:`, the rest `Usage`.
        let usage = text.to_lowercase().contains("usage") && text.contains(component.origin.file_name());
        if !output.status.success() || !usage {
            failures.push(format!(
                "{} ({}): `{}` exited {} with:\n{text}\ncontainerd's log:\n{}",
                component.name,
                spec.reference,
                command.join(" "),
                output.status,
                containerd.log_tail(10)
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Runs `command` in `image`; a run that succeeded but printed nothing is run again (up to
/// three runs): `ctr run` now and then loses a short-lived container's output (a race between
/// the process's exit and its output's copy, seen on a loaded machine), while a command that
/// truly prints nothing prints nothing every time, and the caller's check still fails it.
fn run_printing(containerd: &Containerd, image: &str, command: &[&str], options: &RunOptions) -> std::process::Output {
    let mut runs = 0;
    loop {
        let output = containerd.run_with(image, command, options).unwrap_or_else(|e| panic!("{e}"));
        runs += 1;
        let silent = output.status.success() && output.stdout.is_empty() && output.stderr.is_empty();
        if !silent || runs == 3 {
            return output;
        }
        eprintln!("{image}: `{}` succeeded with no output; running it again", command.join(" "));
    }
}

#[test]
fn a_pushed_image_is_in_the_registry_byte_for_byte() {
    let dir = tempfile::tempdir().expect("tempdir");
    let registry = TestRegistry::start();
    let (component, spec) = specs().into_iter().find(|(c, _)| c.name == "fiber-router").expect("fiber-router");
    let delivery =
        Delivery { out_dir: dir.path().to_path_buf(), created: 0, registry: Some(format!("http://{}", registry.host())), containerd: None };
    let delivered = runtime().block_on(deliver(component, &spec, &delivery)).unwrap_or_else(|e| panic!("{e}"));
    let target = format!("{}/hyperlight-dev/lampyr/fiber-router:preview", registry.host());
    assert_eq!(delivered.pushed.as_deref(), Some(target.as_str()));
    assert_eq!(delivered.pinned(), format!("{target}@{}", delivered.digest));

    let local = read_layout(&delivered.layout).expect("layout");
    let client = lampyr_artifact::registry::oci_client(oci_client::client::ClientConfig {
        protocol: oci_client::client::ClientProtocol::Http,
        ..Default::default()
    })
    .expect("an OCI client");
    let reference = oci_client::Reference::from_str(&target).expect("reference");
    let (bytes, digest) = runtime()
        .block_on(client.pull_manifest_raw(
            &reference,
            &oci_client::secrets::RegistryAuth::Anonymous,
            &["application/vnd.oci.image.manifest.v1+json"],
        ))
        .unwrap_or_else(|e| panic!("pulling {target}: {e}\n{}", registry.log()));
    assert_eq!(digest, delivered.digest);
    assert!(bytes.as_ref() == local.manifest_bytes.as_slice(), "the registry holds other manifest bytes");
    for blob in [local.manifest.config().digest().to_string(), local.manifest.layers()[0].digest().to_string()] {
        assert!(registry.blob_data_path(&blob).is_file(), "blob {blob} is not in the registry");
    }
    // A second push sends only the manifest again and gives the same digest.
    let again = runtime().block_on(lampyr_images::push(&delivered.layout, &target, true)).expect("push again");
    assert_eq!(again, format!("{}/hyperlight-dev/lampyr/fiber-router@{}", registry.host(), delivered.digest));
}
