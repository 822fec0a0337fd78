//! The real node (`lampyr_testenv::Node`) is a working Kubernetes node: Pods run as
//! containers, Services route through kube-proxy, cluster DNS answers, a NodePort is
//! reached from the test process, a privileged Pod sees `/dev/kvm`; and stopping it
//! leaves no process, cgroup, mount, directory or namespace behind.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use lampyr_testenv::Node;
use serde_json::{Value, json};

/// Longest a Pod or a request may take on a loaded 2-core machine.
const PATIENCE: Duration = Duration::from_secs(120);

fn kubectl(node: &Node, args: &[&str]) -> (bool, String) {
    let out = node.cluster().kubectl().args(args).output().expect("run kubectl");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

fn apply(node: &Node, manifest: &Value) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("manifest.json");
    std::fs::write(&file, manifest.to_string()).expect("write");
    let (ok, text) = kubectl(node, &["apply", "-f", file.to_str().expect("utf-8")]);
    assert!(ok, "kubectl apply: {text}");
}

/// Polls `check` every 500 ms until it returns `Some`; panics naming `what` with the kubelet's log.
fn poll<T>(node: &Node, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(found) = check() {
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "{what} within {PATIENCE:?}\n{}\nkubelet:\n{}",
            kubectl(node, &["get", "pods", "-A", "-o", "wide"]).1,
            node.log_tail("kubelet", 30)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// A Pod running busybox with `args`, never restarted.
fn job_pod(name: &str, image: &str, args: &[&str]) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": name, "namespace": "default" },
        "spec": { "restartPolicy": "Never", "containers": [{
            "name": "main", "image": image, "imagePullPolicy": "Never", "args": args,
        }] },
    })
}

/// Waits until Pod `name` has finished; returns whether it succeeded, and its log.
fn finished(node: &Node, name: &str) -> (bool, String) {
    let phase = poll(node, &format!("Pod {name} finishing"), || {
        let (_, phase) = kubectl(node, &["get", "pod", name, "-n", "default", "-o", "jsonpath={.status.phase}"]);
        (phase == "Succeeded" || phase == "Failed").then_some(phase)
    });
    (phase == "Succeeded", kubectl(node, &["logs", name, "-n", "default"]).1)
}

/// The body of `GET url` (`http://HOST:PORT/PATH`) from the test process, when it answers 200.
fn get(url: &str) -> Option<String> {
    let rest = url.strip_prefix("http://")?;
    let (authority, path) = rest.split_once('/').map_or((rest, "/".to_string()), |(a, p)| (a, format!("/{p}")));
    let mut stream = TcpStream::connect_timeout(&authority.parse().ok()?, Duration::from_secs(2)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {authority}\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?;
    (status == "200").then(|| body.to_string())
}

#[test]
fn a_real_node_runs_pods_routes_services_answers_dns_and_leaves_nothing_behind() {
    let node = Node::start().unwrap_or_else(|e| panic!("{e}"));
    let busybox = node.system_images().busybox.clone();

    // The node is registered, Ready, and labelled for grant Pods.
    let (_, labels) = kubectl(&node, &["get", "node", "lampyr-node", "-o", "jsonpath={.metadata.labels}"]);
    assert!(labels.contains(r#""lampyr.dev/kvm":"true""#), "{labels}");

    // A web server Pod behind a NodePort Service, reached from the test process.
    apply(
        &node,
        &json!({ "apiVersion": "v1", "kind": "List", "items": [
        { "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "www", "namespace": "default" },
          "data": { "index.html": "hello from a pod\n" } },
        { "apiVersion": "apps/v1", "kind": "Deployment", "metadata": { "name": "web", "namespace": "default" },
          "spec": { "selector": { "matchLabels": { "app": "web" } }, "template": {
            "metadata": { "labels": { "app": "web" } },
            "spec": { "containers": [{ "name": "httpd", "image": busybox, "imagePullPolicy": "Never",
                "args": ["httpd", "-f", "-p", "8080", "-h", "/www"],
                "ports": [{ "containerPort": 8080 }],
                "readinessProbe": { "httpGet": { "path": "/", "port": 8080 }, "periodSeconds": 1 },
                "volumeMounts": [{ "name": "www", "mountPath": "/www" }] }],
              "volumes": [{ "name": "www", "configMap": { "name": "www" } }] } } } },
        { "apiVersion": "v1", "kind": "Service", "metadata": { "name": "web", "namespace": "default" },
          "spec": { "type": "NodePort", "selector": { "app": "web" },
                    "ports": [{ "port": 80, "targetPort": 8080, "nodePort": 30081 }] } },
    ] }),
    );
    let url = format!("{}/index.html", node.node_port_url(30081));
    let body = poll(&node, "the NodePort answering", || get(&url));
    assert_eq!(body, "hello from a pod\n");

    // From a Pod: cluster DNS resolves the Service, and its ClusterIP routes to the web Pod.
    apply(
        &node,
        &job_pod("client", &busybox, &["sh", "-c", "nslookup web.default.svc.cluster.local && wget -q -O - http://web/index.html"]),
    );
    let (ok, log) = finished(&node, "client");
    assert!(ok, "the client Pod failed:\n{log}");
    assert!(log.contains("hello from a pod"), "{log}");
    assert!(log.contains("198.19."), "the Service resolves to a ClusterIP of 198.19.0.0/16:\n{log}");
    // Names outside the cluster are not resolved: no query leaves the node.
    apply(&node, &job_pod("outside", &busybox, &["nslookup", "example.com"]));
    let (ok, log) = finished(&node, "outside");
    assert!(!ok, "example.com must not resolve:\n{log}");

    // A privileged Pod gets the machine's /dev/kvm as a character device.
    let mut kvm = job_pod("kvm", &busybox, &["sh", "-c", "test -c /dev/kvm && echo kvm is a character device"]);
    kvm["spec"]["containers"][0]["securityContext"] = json!({ "privileged": true });
    kvm["spec"]["containers"][0]["volumeMounts"] = json!([{ "name": "kvm", "mountPath": "/dev/kvm" }]);
    kvm["spec"]["volumes"] = json!([{ "name": "kvm", "hostPath": { "path": "/dev/kvm", "type": "CharDevice" } }]);
    kvm["spec"]["nodeSelector"] = json!({ "lampyr.dev/kvm": "true" });
    apply(&node, &kvm);
    let (ok, log) = finished(&node, "kvm");
    assert!(ok && log.contains("kvm is a character device"), "{log}");

    // Stopping the node leaves nothing behind.
    let containerd_dir = node.containerd_socket().parent().expect("containerd's directory").to_path_buf();
    let dir = node.data_dir().to_path_buf();
    let id = dir.file_name().and_then(|n| n.to_str()).expect("id").to_string();
    node.shutdown();
    assert!(!dir.exists(), "{} remains", dir.display());
    assert!(!containerd_dir.exists(), "{} remains", containerd_dir.display());
    assert!(!Path::new("/run/netns").join(&id).exists(), "network namespace {id} remains");
    for hierarchy in ["pids", "memory", "freezer", "unified"] {
        let cgroup = Path::new("/sys/fs/cgroup").join(hierarchy).join(&id);
        assert!(!cgroup.exists(), "{} remains", cgroup.display());
    }
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    assert!(!mounts.contains(&id), "mounts of {id} remain");
    for name in [id.as_str(), containerd_dir.to_str().expect("utf-8")] {
        let processes = std::process::Command::new("pgrep").args(["-f", name]).output().expect("pgrep");
        assert!(processes.stdout.is_empty(), "processes of {name} remain: {}", String::from_utf8_lossy(&processes.stdout));
    }
}
