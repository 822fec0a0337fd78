//! `ly deploy` refuses bad manifests from what is on disk alone, before it
//! reaches for a cluster (here there is none: the kubeconfig does not exist).

use std::process::Command;

fn deploy(manifest: &str) -> (bool, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("service.yaml");
    std::fs::write(&file, manifest).expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_ly"))
        .arg("deploy")
        .arg(&file)
        .args(["--namespace", "apps", "--kubeconfig"])
        .arg(dir.path().join("no-such-kubeconfig"))
        .env("LY_KUBECTL", "kubectl-is-not-needed-for-this")
        .output()
        .expect("ly runs");
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn bad_manifests_are_refused_before_any_cluster_is_reached() {
    let cases = [
        ("apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata: {name: a\n", "service.yaml"),
        (
            "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata: {name: a, namespace: other}\nspec: {template: {spec: {containers: [{image: x}]}}}\n",
            "is in namespace other, but --namespace says apps",
        ),
        ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n", "no serving.knative.dev/v1 Service in it"),
    ];
    for (manifest, message) in cases {
        let (ok, stderr) = deploy(manifest);
        assert!(!ok, "{manifest:?} must be refused");
        assert!(stderr.contains(message), "{manifest:?}: expected {message:?} in:\n{stderr}");
        assert!(!stderr.contains("kubectl") && !stderr.contains("cluster"), "no cluster was reached for {manifest:?}:\n{stderr}");
    }
}
