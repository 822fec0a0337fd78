//! The manifests `ly scaffold workspace` writes, offered to a real API server
//! (`lampyr_testenv::Cluster`: kube-apiserver with upstream Knative's CRDs,
//! webhook and Lampyr's Knative controller): `kubectl apply --dry-run=server`
//! of every file, so the server validates each object against its schema, its
//! admission (the Knative webhook validates the config maps) and RBAC.

use std::path::Path;
use std::process::Command;

use lampyr_testenv::Cluster;

/// `kubectl apply --server-side --dry-run=server -f FILE`; the objects the test
/// environment applied itself are owned by another field manager, hence
/// `--force-conflicts` (nothing is changed: it is a dry run).
fn dry_run_apply(cluster: &Cluster, file: &Path) -> Result<String, String> {
    let out = cluster
        .kubectl()
        .args(["apply", "--server-side", "--force-conflicts", "--dry-run=server", "-f"])
        .arg(file)
        .output()
        .map_err(|e| format!("kubectl: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() { Ok(stdout) } else { Err(format!("{stdout}{}", String::from_utf8_lossy(&out.stderr))) }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_scaffolded_manifests_are_accepted_by_the_api_server() {
    let cluster = Cluster::shared();
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = Command::new(env!("CARGO_BIN_EXE_ly")).args(["scaffold", "workspace"]).arg(tmp.path()).output().expect("ly runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    // A dry run creates no namespace, so Lampyr's and Eventing's must exist for the
    // objects in them to be checked (knative-serving exists: the environment's).
    for namespace in ["lampyr-system", "knative-eventing", "projectcontour"] {
        let created = cluster.kubectl().args(["create", "namespace", namespace]).output().expect("kubectl");
        assert!(
            created.status.success() || String::from_utf8_lossy(&created.stderr).contains("AlreadyExists"),
            "{}",
            String::from_utf8_lossy(&created.stderr)
        );
    }

    let k8s = tmp.path().join("k8s");
    let files = [
        "knative-serving-crds.yaml",
        "knative-serving-core.yaml",
        "lampyr-crds.yaml",
        "lampyr-knative-controller.yaml",
        "lampyr-controller.yaml",
        "fiber-router.yaml",
        "knative-eventing-crds.yaml",
        "knative-eventing-core.yaml",
        "knative-eventing-in-memory-channel.yaml",
        "knative-eventing-mt-channel-broker.yaml",
        "lampyr-eventgrid-crds.yaml",
        "lampyr-eventgrid.yaml",
        // The Gateway API layer but its Gateways (their kinds' CRDs exist only in a dry run
        // here; the node test applies them for real).
        "gateway-api-crds.yaml",
        "contour-gateway-provisioner.yaml",
        "net-gateway-api.yaml",
    ];
    for file in files {
        let applied = dry_run_apply(cluster, &k8s.join(file)).unwrap_or_else(|e| panic!("{file} was refused:\n{e}"));
        let objects = lampyr_manifests::read(&k8s.join(file), file).expect("parses");
        // One "… serverside-applied (server dry run)" line per object.
        let lines = applied.lines().filter(|l| l.ends_with("(server dry run)")).count();
        assert_eq!(lines, objects.len(), "{file}: every object is accepted:\n{applied}");
    }

    // The dry run is not vacuous: admission runs. An edit the Knative webhook
    // refuses is refused with its message.
    let bad = tmp.path().join("bad-config.yaml");
    std::fs::write(
        &bad,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: config-autoscaler\n  namespace: knative-serving\n  labels:\n    \
         app.kubernetes.io/name: knative-serving\n    app.kubernetes.io/component: autoscaler\ndata:\n  max-scale-up-rate: fast\n",
    )
    .expect("write");
    let refused = dry_run_apply(cluster, &bad).expect_err("an invalid config-autoscaler is refused");
    assert!(refused.contains("config.webhook.serving.knative.dev"), "{refused}");
}
