//! Knative Eventing's manifests, read from the pinned `knative.dev/eventing`
//! module's `config/` and resolved to its release as [`crate::knative`] resolves
//! Serving's: the substrate `ly cluster install --eventing` installs, unchanged
//! (nothing is filtered out; Lampyr runs no Eventing component of its own).

use crate::document::Document;
use crate::knative::{read_module_file, release, yaml_files};
use crate::{Error, KnativeModules};

/// Eventing's namespace.
pub const NAMESPACE: &str = "knative-eventing";

/// The API groups of Eventing's CRDs.
pub const GROUPS: [&str; 5] =
    ["eventing.knative.dev", "messaging.knative.dev", "sources.knative.dev", "flows.knative.dev", "sinks.knative.dev"];

/// Whether CRD `name` (`plural.group`) is one of Eventing's.
pub fn is_eventing_crd(name: &str) -> bool {
    name.split_once('.').is_some_and(|(_, group)| GROUPS.contains(&group))
}

/// Directory of Eventing's core CRDs, relative to its module.
pub const CRDS_DIR: &str = "config/core/resources";

/// One file of the substrate: one of the files a Knative Eventing release publishes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Part {
    /// The Workspace file it becomes (`k8s/NAME`).
    pub file: &'static str,
    /// What it installs, one line.
    pub about: &'static str,
    /// Its directory, relative to the module.
    pub dir: &'static str,
    /// A subdirectory of `dir` another part holds, skipped here.
    pub except: Option<&'static str>,
}

/// The substrate's files, in apply order: as upstream's release splits them
/// (`eventing-crds`, `eventing-core`, `in-memory-channel`, `mt-channel-broker`).
pub const PARTS: [Part; 4] = [
    Part {
        file: "knative-eventing-crds.yaml",
        about: "Knative Eventing's CRDs (eventing, messaging, flows, sources and sinks.knative.dev)",
        dir: CRDS_DIR,
        except: None,
    },
    Part {
        file: "knative-eventing-core.yaml",
        about: "Knative Eventing's namespace, RBAC, configuration, controller, webhook, PingSource adapter and job sink",
        dir: "config/core",
        except: Some(CRDS_DIR),
    },
    Part {
        file: "knative-eventing-in-memory-channel.yaml",
        about: "Knative Eventing's in-memory channel (its CRD, controller and dispatcher): the default Broker's channel",
        dir: "config/channels/in-memory-channel",
        except: None,
    },
    Part {
        file: "knative-eventing-mt-channel-broker.yaml",
        about: "Knative Eventing's multi-tenant channel-based Broker (its controller, ingress and filter)",
        dir: "config/brokers/mt-channel-broker",
        except: None,
    },
];

/// The documents of `part`, in path order, `ko://` images resolved to the Eventing
/// release's; the CRD part holds only CRDs.
pub fn documents(modules: &KnativeModules, part: &Part) -> Result<Vec<Document>, Error> {
    let module = &modules.eventing;
    let release = release(module)?;
    let mut documents = Vec::new();
    for file in yaml_files(&module.dir, part.dir)? {
        if part.except.is_some_and(|except| file.starts_with(&format!("{except}/"))) {
            continue;
        }
        documents.extend(read_module_file(module, &file, &release)?);
    }
    if part.dir == CRDS_DIR
        && let Some(other) = documents.iter().find(|d| d.kind() != "CustomResourceDefinition")
    {
        return Err(Error::Inconsistent(format!("{}: expected only CRDs, found {}", other.origin, other.id())));
    }
    if let Some(crd) = documents.iter().find(|d| d.kind() == "CustomResourceDefinition" && !is_eventing_crd(d.name())) {
        return Err(Error::Inconsistent(format!("{}: CRD {} is in none of Eventing's groups {GROUPS:?}", crd.origin, crd.name())));
    }
    if documents.is_empty() {
        return Err(Error::Inconsistent(format!("{}@{}: no manifests under {}", module.path, module.version, part.dir)));
    }
    Ok(documents)
}

/// Every document of every part, in apply order.
pub fn all(modules: &KnativeModules) -> Result<Vec<Document>, Error> {
    let mut documents = Vec::new();
    for part in &PARTS {
        documents.extend(self::documents(modules, part)?);
    }
    Ok(documents)
}
