//! `ly cluster install` and `ly deploy` against a real API server with upstream
//! Knative and a real registry (`lampyr_testenv::InstalledLampyr`), where the
//! environment's stand-in kubelet runs the Pods of the Deployments the install
//! applied (lampyr-controller, fiber-router, fiberd-k8s-controller) and the grant
//! Pods as local processes, each with its manifest's arguments and its service
//! account's RBAC. The registry is the installation's one local mirror.
//!
//! One test: the steps share the cluster and each depends on the last
//! (refusals, deploy, reach, redeploy, uninstall, reinstall with a new key).

mod support;

use std::time::Duration;

use lampyr_testenv::stack::{GRANT_IMAGE, HELPER_IMAGE};
use lampyr_testenv::{InstalledLampyr, Serving, repo_root};
use serde_json::Value;
use support::{Ly, health_table, path, stderr, text};

const FLEET_KEY: &str = "secret/lampyr-fiberd-seal-key";

/// The fleet key Secret's key, if it exists.
fn fleet_key(ly: &Ly<'_>) -> Option<String> {
    let out = ly.kubectl(&["get", FLEET_KEY, "-n", "default", "--ignore-not-found", "-o", "jsonpath={.data.key}"]);
    Some(text(&out)).filter(|k| !k.is_empty())
}

/// Knative Service `name` in `default` as JSON.
fn live_service(ly: &Ly<'_>, name: &str) -> Value {
    let out = ly.kubectl(&["get", &format!("services.serving.knative.dev/{name}"), "-n", "default", "-o", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).expect("JSON")
}

/// `ly deploy ARGS` must fail saying `message`, with no fleet key and no Service made.
fn refused(ly: &Ly<'_>, args: &[&str], message: &str) {
    let out = ly.deploy(args);
    assert!(!out.status.success(), "{args:?} must be refused:\n{}", stderr(&out));
    assert!(stderr(&out).contains(message), "{args:?}: expected {message:?} in:\n{}", stderr(&out));
    assert_eq!(fleet_key(ly), None, "{args:?} created the fleet key");
    assert!(!ly.exists("services.serving.knative.dev/hello", Some("default")), "{args:?} applied a Service");
}

/// Home `name` in `default` as JSON, once it contains `words` (a fiberd's load failure).
async fn home_reporting(stack: &InstalledLampyr, ly: &Ly<'_>, name: &str, words: &str) -> String {
    stack
        .poll(&format!("Home {name} reporting {words:?}"), Duration::from_millis(200), async || {
            let out = ly.kubectl(&["get", &format!("homes.fiber.lampyr.dev/{name}"), "-n", "default", "-o", "json", "--ignore-not-found"]);
            Some(text(&out)).filter(|home| home.contains(words))
        })
        .await
}

fn deploy_hello(ly: &Ly<'_>) -> String {
    let hello = repo_root().join("examples/hello");
    let out = ly.deploy(&[path(&hello), "--timeout", "120"]);
    assert!(out.status.success(), "deploy failed:\n{}", stderr(&out));
    stderr(&out)
}

#[tokio::test(flavor = "multi_thread")]
async fn deploy_reaches_a_sealed_service_and_a_new_install_gets_a_new_key() {
    let stack = InstalledLampyr::shared();
    let ly = support::ly(stack.cluster);
    let registry = stack.registry.host();
    let mirror = format!("{{\"localhost:{}\": {{registry: \"{registry}\", plainHttp: true}}}}", stack.registry.addr().port());
    let settings = ly.settings(
        "platform.yaml",
        &[
            ("grantImage", GRANT_IMAGE),
            ("helperImage", HELPER_IMAGE),
            ("zygoteRegistries", "[]"),
            ("registryMirrors", &mirror),
            support::FIBER_ROUTER_INGRESS,
        ],
    );
    let install = || {
        let out = ly.cluster(&["install", "--non-interactive", "--provider-config", path(&settings)]);
        assert!(out.status.success(), "install failed:\n{}", stderr(&out));
        stderr(&out)
    };
    let hello = repo_root().join("examples/hello");

    // Before an install there is nowhere to push templates to.
    refused(&ly, &[path(&hello)], "run `ly cluster install` first");
    let log = install();
    ly.healthy_but_cert_manager(stack).await;
    assert!(
        log.contains(&format!("templates: pushed to http://localhost:{}/lampyr/fiberd-templates", stack.registry.addr().port())),
        "{log}"
    );

    // Refusals after the install still change nothing.
    refused(&ly, &[path(&hello), "--namespace", "other"], "is in namespace default, but --namespace says other");
    let dir = tempfile::tempdir().expect("tempdir");
    let mixed = dir.path().join("mixed.yaml");
    let service = std::fs::read_to_string(hello.join("service.yaml")).expect("read");
    std::fs::write(&mixed, format!("{service}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: extra\n")).expect("write");
    refused(&ly, &[path(&mixed)], "deploys Knative Services only, and this manifest also holds ConfigMap extra (document 2)");
    let volumes = dir.path().join("volumes.yaml");
    std::fs::write(
        &volumes,
        service.replace("      containerConcurrency: 1\n", "      containerConcurrency: 1\n      volumes: [{name: v, emptyDir: {}}]\n"),
    )
    .expect("write");
    refused(&ly, &[path(&volumes)], "Service hello: ");

    // Deploy: build, push, create the fleet key, seal, push the template, apply, wait, print the URL.
    let deployed = ly.deploy(&[path(&hello), "--timeout", "120"]);
    assert!(deployed.status.success(), "deploy failed:\n{}", stderr(&deployed));
    assert_eq!(text(&deployed).trim(), "default/hello: http://hello.default.apps.example.org (revision hello-00001)");
    let log = stderr(&deployed);
    for step in [
        "building guest crate",
        "pushing artifact",
        "creating the fleet key",
        "sealing the fiberd template",
        "pushing the sealed template",
        "waiting up to 120s",
        "curl -H 'Host: hello.default.apps.example.org' http://NODE:30080/",
    ] {
        assert!(log.contains(step), "{step:?} missing from:\n{log}");
    }
    assert_eq!(stack.answer("hello.default.apps.example.org", "/").await, "Hello Lampyr!\n");

    // The Service pins the artifact (annotation and image) and the sealed template, both as the cluster reaches them.
    let live = live_service(&ly, "hello");
    let template = &live["spec"]["template"];
    let annotations = &template["metadata"]["annotations"];
    let artifact = annotations["lampyr.dev/snapshot-artifact"].as_str().expect("annotation");
    assert!(artifact.starts_with(&format!("{registry}/lampyr/snapshots@sha256:")), "{artifact}");
    assert_eq!(template["spec"]["containers"][0]["image"], artifact);
    let sealed = annotations["lampyr.dev/sealed-template"].as_str().expect("annotation").to_string();
    assert!(sealed.starts_with(&format!("{registry}/lampyr/fiberd-templates@sha256:")), "{sealed}");
    let home = ly.kubectl(&["get", "homes.fiber.lampyr.dev/hello-00001", "-n", "default", "-o", "jsonpath={.spec.sealedTemplate}"]);
    assert_eq!(text(&home), sealed, "fiberd is given the sealed template");
    let first_key = fleet_key(&ly).expect("the first deploy made the fleet key");

    // Bad artifacts and unreachable registries fail before anything is applied.
    let layout = lampyr_testenv::example_artifact("hello", 64 * 1024);
    let named = |name: &str, reference: &str| {
        let file = dir.path().join(format!("{name}.yaml"));
        let text = service.replace("name: hello\n", &format!("name: {name}\n")).replace(
            "        autoscaling.knative.dev/min-scale: \"0\"\n",
            &format!("        autoscaling.knative.dev/min-scale: \"0\"\n        lampyr.dev/snapshot-artifact: {reference}\n"),
        );
        std::fs::write(&file, text).expect("write");
        file
    };
    let zeros = format!("sha256:{}", "0".repeat(64));
    for (name, reference, extra, message) in [
        ("wrong-digest", format!("{registry}/lampyr/snapshots@{zeros}"), None, "is not in"),
        (
            "unreachable",
            format!("{}@{}", layout.layout.display(), layout.digest),
            Some("http://127.0.0.1:1/lampyr/snapshots"),
            "127.0.0.1:1",
        ),
    ] {
        let file = named(name, &reference);
        let mut args = vec![path(&file)];
        if let Some(repository) = extra {
            args.extend(["--repository", repository]);
        }
        let out = ly.deploy(&args);
        assert!(!out.status.success(), "{name} must fail:\n{}", stderr(&out));
        assert!(stderr(&out).contains(message), "{name}: expected {message:?} in:\n{}", stderr(&out));
        assert!(!ly.exists(&format!("services.serving.knative.dev/{name}"), Some("default")), "{name} was not applied");
    }
    let policy = ly.kubectl(&["get", "grantpolicy/lampyr", "-o", "jsonpath={.spec.zygoteRegistries}"]);
    assert_eq!(text(&policy), format!(r#"["http://{registry}/lampyr/fiberd-templates"]"#));

    // Grant Pods pull templates only from the installation's zygoteRegistries.
    let mut elsewhere = live_service(&ly, "hello");
    elsewhere["metadata"] = serde_json::json!({ "name": "hello-elsewhere", "namespace": "default" });
    elsewhere.as_object_mut().expect("object").remove("status");
    let digest = sealed.split_once('@').expect("pinned").1;
    let foreign = format!("{registry}/elsewhere/templates@{digest}");
    elsewhere["spec"]["template"]["metadata"]["annotations"]["lampyr.dev/sealed-template"] = Value::from(foreign.clone());
    stack.kubectl_apply(&elsewhere);
    let home = home_reporting(stack, &ly, "hello-elsewhere-00001", "is not in the installation's zygoteRegistries").await;
    assert!(home.contains(&foreign), "the refusal names the template:\n{home}");

    // Deploying the same manifest again changes nothing: same template, same generation.
    let again = deploy_hello(&ly);
    assert!(again.contains("already sealed to this fleet key"), "{again}");
    let live = live_service(&ly, "hello");
    assert_eq!(live["metadata"]["generation"], 1, "a redeploy of the same manifest is not a new generation");
    assert_eq!(fleet_key(&ly).as_deref(), Some(first_key.as_str()));

    // A manifest pinning a registry artifact is deployed as written, into the --namespace given;
    // the grant controller copies the fleet key next to its grant Pods.
    let apps = stack.cluster.namespace("apps").await;
    let pinned = dir.path().join("pinned.yaml");
    let annotated = service.replace("  namespace: default\n", "").replace(
        "        autoscaling.knative.dev/min-scale: \"0\"\n",
        &format!("        autoscaling.knative.dev/min-scale: \"0\"\n        lampyr.dev/snapshot-artifact: {artifact}\n"),
    );
    std::fs::write(&pinned, annotated).expect("write");
    let out = ly.deploy(&[path(&pinned), "--namespace", &apps]);
    assert!(out.status.success(), "deploy failed:\n{}", stderr(&out));
    assert!(!stderr(&out).contains("pushing artifact"), "a registry artifact is not pushed again:\n{}", stderr(&out));
    assert_eq!(text(&out).trim(), format!("{apps}/hello: http://hello.{apps}.apps.example.org (revision hello-00001)"));
    assert_eq!(stack.answer(&format!("hello.{apps}.apps.example.org"), "/").await, "Hello Lampyr!\n");
    assert!(ly.exists(FLEET_KEY, Some(&apps)), "the fleet key is copied next to the grant Pods");

    let health = ly.cluster(&["health"]);
    let table = health_table(&health);
    for passes in ["fleet-key", "template-repository"] {
        assert_eq!(table.get(passes), Some(&true), "{passes} passes:\n{}", text(&health));
    }

    // Uninstall deletes the Services sealed to the fleet key, and the key.
    let uninstalled = ly.cluster(&["uninstall", "--non-interactive"]);
    assert!(uninstalled.status.success(), "uninstall failed:\n{}", stderr(&uninstalled));
    assert!(stderr(&uninstalled).contains("- Service default/hello"), "{}", stderr(&uninstalled));
    for name in ["hello", "hello-elsewhere"] {
        assert!(!ly.exists(&format!("services.serving.knative.dev/{name}"), Some("default")), "{name} is deleted");
    }
    assert_eq!(fleet_key(&ly), None, "the fleet key is deleted");
    let copies =
        ly.kubectl(&["get", "secrets", "--all-namespaces", "--field-selector", "metadata.name=lampyr-fiberd-seal-key", "-o", "name"]);
    assert_eq!(text(&copies), "", "every copy of the fleet key is deleted");
    assert!(!ly.exists("services.serving.knative.dev/hello", Some(&apps)));
    assert!(!ly.exists("configmap/lampyr-installation", Some("lampyr-system")), "the installation record is deleted");

    // The next install's first deploy makes a new key; the old template no longer opens.
    install();
    ly.healthy_but_cert_manager(stack).await;
    let log = deploy_hello(&ly);
    assert!(log.contains("creating the fleet key"), "{log}");
    let second_key = fleet_key(&ly).expect("a new fleet key");
    assert_ne!(second_key, first_key, "a new installation gets a new fleet key");
    assert_eq!(stack.answer("hello.default.apps.example.org", "/").await, "Hello Lampyr!\n");
    let resealed = live_service(&ly, "hello")["spec"]["template"]["metadata"]["annotations"]["lampyr.dev/sealed-template"].clone();
    assert_ne!(resealed, sealed.as_str(), "the template is sealed again, to the new key");

    let mut old = live.clone();
    old["metadata"] = serde_json::json!({ "name": "hello-old", "namespace": "default" });
    old.as_object_mut().expect("object").remove("status");
    stack.kubectl_apply(&old);
    let message = home_reporting(stack, &ly, "hello-old-00001", "does not open").await;
    assert!(message.contains(&sealed), "the failure names the old template:\n{message}");

    let cleaned = ly.cluster(&["uninstall", "--non-interactive"]);
    assert!(cleaned.status.success(), "{}", stderr(&cleaned));
    assert!(!ly.exists("services.serving.knative.dev/hello-old", Some("default")));
}
