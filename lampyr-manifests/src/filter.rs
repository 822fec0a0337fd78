//! What of upstream Knative Serving's core manifests Lampyr installs.
//!
//! Lampyr runs its own Knative controller (upstream's reconcilers minus the
//! Pod-based ones) and lampyr-controller, and fiber-router does the activator's
//! job, so the stock controller, activator and autoscaler and everything that
//! exists only for them are removed. The rules, applied to the whole set:
//!
//! 1. a **workload object** ([`is_workload`]: Deployments and other Pod
//!    controllers, Pods, Services, HorizontalPodAutoscalers,
//!    PodDisruptionBudgets, image caches) whose `app.kubernetes.io/component`
//!    label is one of [`REMOVED_COMPONENTS`] is removed;
//! 2. a **ServiceAccount** that a removed workload runs as, and no kept
//!    workload (nor one of the extra accounts the caller names) runs as, is removed;
//! 3. a **RoleBinding or ClusterRoleBinding** whose subjects are all removed
//!    ServiceAccounts is removed;
//! 4. a **Role or ClusterRole** that removed bindings name and no kept binding
//!    names is removed.
//!
//! Everything else is kept: CRDs, the namespace, ConfigMaps (including
//! `config-autoscaler`, whose settings Lampyr's scaler follows), Secrets,
//! certificates, webhook registrations, the webhook's own workload, and all
//! other RBAC.

use std::collections::BTreeSet;
use std::fmt;

use serde_json::Value;

use crate::document::{Document, group_of, str_at};

/// The `app.kubernetes.io/component` values of the stock Pod-based path:
/// the controller, the activator, the autoscaler, and the queue-proxy sidecar
/// the stock Revision reconciler injects (its only object is an image cache).
pub const REMOVED_COMPONENTS: [&str; 4] = ["controller", "activator", "autoscaler", "queue-proxy"];

/// The label naming an upstream object's component.
pub const COMPONENT_LABEL: &str = "app.kubernetes.io/component";

/// `(API group, kind)` of the objects that make up a running component.
const WORKLOAD_KINDS: [(&str, &str); 13] = [
    ("apps", "Deployment"),
    ("apps", "StatefulSet"),
    ("apps", "DaemonSet"),
    ("apps", "ReplicaSet"),
    ("", "Pod"),
    ("", "ReplicationController"),
    ("", "Service"),
    ("batch", "Job"),
    ("batch", "CronJob"),
    ("autoscaling", "HorizontalPodAutoscaler"),
    ("policy", "PodDisruptionBudget"),
    // Pre-pulls a workload's image on every node (knative.dev/caching).
    ("caching.internal.knative.dev", "Image"),
    ("networking.k8s.io", "NetworkPolicy"),
];

/// Whether `object` is part of a running component (see `WORKLOAD_KINDS`):
/// the objects a test environment without a kubelet leaves out too.
pub fn is_workload(object: &Value) -> bool {
    let group = group_of(str_at(object, "/apiVersion"));
    let kind = str_at(object, "/kind");
    WORKLOAD_KINDS.contains(&(group, kind))
}

/// Why a document was removed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reason {
    /// Rule 1: a workload object of this component.
    Workload(String),
    /// Rule 2: only removed workloads run as this ServiceAccount.
    ServiceAccount,
    /// Rule 3: binds only removed ServiceAccounts.
    Binding,
    /// Rule 4: only removed bindings name this role.
    Role,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Workload(component) => write!(f, "workload of the stock {component}"),
            Reason::ServiceAccount => f.write_str("only removed workloads run as it"),
            Reason::Binding => f.write_str("binds only removed service accounts"),
            Reason::Role => f.write_str("only removed bindings grant it"),
        }
    }
}

/// A removed document and why.
#[derive(Clone, Debug)]
pub struct Removed {
    /// The document.
    pub document: Document,
    /// The rule that removed it.
    pub reason: Reason,
}

/// The result of [`filter`]: kept documents in their original order, and the removed ones.
#[derive(Clone, Debug)]
pub struct Filtered {
    /// What Lampyr installs.
    pub kept: Vec<Document>,
    /// What it leaves out.
    pub removed: Vec<Removed>,
}

/// Applies the module's rules to `documents`. `accounts_in_use` are
/// `(namespace, name)` ServiceAccounts that workloads outside `documents` run as
/// (Lampyr's Knative controller runs as upstream's `knative-serving/controller`).
pub fn filter(documents: Vec<Document>, accounts_in_use: &[(&str, &str)]) -> Filtered {
    let workload_reason: Vec<Option<String>> = documents
        .iter()
        .map(|d| {
            let component = d.label(COMPONENT_LABEL).filter(|c| REMOVED_COMPONENTS.contains(c));
            component.filter(|_| is_workload(&d.object)).map(str::to_string)
        })
        .collect();

    // Rule 2: accounts of removed workloads that no kept workload needs.
    let mut kept_accounts: BTreeSet<(String, String)> = accounts_in_use.iter().map(|(ns, n)| (ns.to_string(), n.to_string())).collect();
    let mut removed_workload_accounts = BTreeSet::new();
    for (document, reason) in documents.iter().zip(&workload_reason) {
        if let Some(account) = service_account(document) {
            if reason.is_some() {
                removed_workload_accounts.insert(account);
            } else {
                kept_accounts.insert(account);
            }
        }
    }
    let removed_accounts: BTreeSet<(String, String)> = removed_workload_accounts.difference(&kept_accounts).cloned().collect();
    let is_removed_account = |d: &Document| {
        d.kind() == "ServiceAccount"
            && d.group().is_empty()
            && removed_accounts.contains(&(d.namespace().unwrap_or("default").to_string(), d.name().to_string()))
    };

    // Rule 3: bindings of removed accounts only.
    let is_removed_binding = |d: &Document| {
        let subjects = d.object.get("subjects").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        is_binding(d)
            && !subjects.is_empty()
            && subjects.iter().all(|s| {
                str_at(s, "/kind") == "ServiceAccount"
                    && removed_accounts.contains(&(str_at(s, "/namespace").to_string(), str_at(s, "/name").to_string()))
            })
    };

    // Rule 4: roles only removed bindings name.
    let mut named_by_removed = BTreeSet::new();
    let mut named_by_kept = BTreeSet::new();
    for document in documents.iter().filter(|d| is_binding(d)) {
        let role = role_ref(document);
        if is_removed_binding(document) {
            named_by_removed.insert(role);
        } else {
            named_by_kept.insert(role);
        }
    }
    let is_removed_role = |d: &Document| {
        let role = (d.kind().to_string(), d.namespace().unwrap_or_default().to_string(), d.name().to_string());
        is_role(d) && named_by_removed.contains(&role) && !named_by_kept.contains(&role)
    };

    let mut kept = Vec::new();
    let mut removed = Vec::new();
    for (document, workload) in documents.into_iter().zip(workload_reason) {
        let reason = match workload {
            Some(component) => Some(Reason::Workload(component)),
            None if is_removed_account(&document) => Some(Reason::ServiceAccount),
            None if is_removed_binding(&document) => Some(Reason::Binding),
            None if is_removed_role(&document) => Some(Reason::Role),
            None => None,
        };
        match reason {
            Some(reason) => removed.push(Removed { document, reason }),
            None => kept.push(document),
        }
    }
    Filtered { kept, removed }
}

/// `(namespace, name)` of the ServiceAccount a workload's Pods run as.
pub(crate) fn service_account(document: &Document) -> Option<(String, String)> {
    let pod_spec = match (document.group(), document.kind()) {
        ("", "Pod") => "/spec",
        ("batch", "CronJob") => "/spec/jobTemplate/spec/template/spec",
        ("apps", "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet") | ("batch", "Job") | ("", "ReplicationController") => {
            "/spec/template/spec"
        }
        _ => return None,
    };
    let spec = document.object.pointer(pod_spec)?;
    let name = spec.get("serviceAccountName").and_then(Value::as_str).unwrap_or("default");
    Some((document.namespace().unwrap_or("default").to_string(), name.to_string()))
}

fn is_binding(d: &Document) -> bool {
    d.group() == "rbac.authorization.k8s.io" && matches!(d.kind(), "RoleBinding" | "ClusterRoleBinding")
}

fn is_role(d: &Document) -> bool {
    d.group() == "rbac.authorization.k8s.io" && matches!(d.kind(), "Role" | "ClusterRole")
}

/// `(kind, namespace, name)` of the role a binding grants (a Role is in the binding's namespace).
fn role_ref(binding: &Document) -> (String, String, String) {
    let kind = str_at(&binding.object, "/roleRef/kind").to_string();
    let namespace = if kind == "Role" { binding.namespace().unwrap_or_default().to_string() } else { String::new() };
    (kind, namespace, str_at(&binding.object, "/roleRef/name").to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::document::parse;

    fn ids(documents: &[Document]) -> Vec<String> {
        documents.iter().map(Document::id).collect()
    }

    const SET: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: activator, namespace: ks, labels: {app.kubernetes.io/component: activator}}
spec: {template: {spec: {serviceAccountName: activator}}}
---
apiVersion: v1
kind: Service
metadata: {name: activator-service, namespace: ks, labels: {app.kubernetes.io/component: activator}}
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: activator, namespace: ks, labels: {app.kubernetes.io/component: activator}}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: activator-pdb, namespace: ks, labels: {app.kubernetes.io/component: activator}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: controller, namespace: ks, labels: {app.kubernetes.io/component: controller}}
spec: {template: {spec: {serviceAccountName: controller}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: autoscaler, namespace: ks, labels: {app.kubernetes.io/component: autoscaler}}
spec: {template: {spec: {serviceAccountName: controller}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: webhook, namespace: ks, labels: {app.kubernetes.io/component: webhook}}
spec: {template: {spec: {serviceAccountName: controller}}}
---
apiVersion: v1
kind: Service
metadata: {name: webhook, namespace: ks, labels: {app.kubernetes.io/component: webhook}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: controller, namespace: ks, labels: {app.kubernetes.io/component: controller}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: activator, namespace: ks, labels: {app.kubernetes.io/component: activator}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: activator, namespace: ks}
subjects: [{kind: ServiceAccount, name: activator, namespace: ks}]
roleRef: {kind: Role, name: activator, apiGroup: rbac.authorization.k8s.io}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: activator, namespace: ks}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: shared}
subjects: [{kind: ServiceAccount, name: activator, namespace: ks}, {kind: ServiceAccount, name: controller, namespace: ks}]
roleRef: {kind: ClusterRole, name: shared, apiGroup: rbac.authorization.k8s.io}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: shared}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: config-autoscaler, namespace: ks, labels: {app.kubernetes.io/component: autoscaler}}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: config-deployment, namespace: ks, labels: {app.kubernetes.io/component: controller}}
---
apiVersion: caching.internal.knative.dev/v1alpha1
kind: Image
metadata: {name: queue-proxy, namespace: ks, labels: {app.kubernetes.io/component: queue-proxy}}
---
apiVersion: serving.knative.dev/v1
kind: Service
metadata: {name: a-knative-service, namespace: ks, labels: {app.kubernetes.io/component: controller}}
"#;

    #[test]
    fn removes_the_stock_components_workloads_and_what_only_they_use() {
        let filtered = filter(parse(SET, "set.yaml").expect("parses"), &[]);
        let removed: Vec<(String, Reason)> = filtered.removed.iter().map(|r| (r.document.id(), r.reason.clone())).collect();
        let workload = |c: &str| Reason::Workload(c.to_string());
        assert_eq!(
            removed,
            vec![
                ("Deployment ks/activator".into(), workload("activator")),
                ("Service ks/activator-service".into(), workload("activator")),
                ("HorizontalPodAutoscaler ks/activator".into(), workload("activator")),
                ("PodDisruptionBudget ks/activator-pdb".into(), workload("activator")),
                ("Deployment ks/controller".into(), workload("controller")),
                ("Deployment ks/autoscaler".into(), workload("autoscaler")),
                ("ServiceAccount ks/activator".into(), Reason::ServiceAccount),
                ("RoleBinding ks/activator".into(), Reason::Binding),
                ("Role ks/activator".into(), Reason::Role),
                ("Image ks/queue-proxy".into(), workload("queue-proxy")),
            ]
        );
        assert_eq!(
            ids(&filtered.kept),
            [
                "Deployment ks/webhook",
                "Service ks/webhook",
                // The webhook runs as it.
                "ServiceAccount ks/controller",
                // One of its subjects is kept.
                "ClusterRoleBinding shared",
                "ClusterRole shared",
                // Configuration is kept whatever its component.
                "ConfigMap ks/config-autoscaler",
                "ConfigMap ks/config-deployment",
                // Not a workload kind: a Knative Service is not a core Service.
                "Service ks/a-knative-service",
            ]
        );
    }

    #[test]
    fn an_account_used_elsewhere_is_kept_with_its_bindings() {
        let text = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: controller, namespace: ks, labels: {app.kubernetes.io/component: controller}}
spec: {template: {spec: {serviceAccountName: controller}}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: controller, namespace: ks}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: admin}
subjects: [{kind: ServiceAccount, name: controller, namespace: ks}]
roleRef: {kind: ClusterRole, name: admin, apiGroup: rbac.authorization.k8s.io}
"#;
        let alone = filter(parse(text, "t.yaml").expect("parses"), &[]);
        assert_eq!(ids(&alone.kept), Vec::<String>::new(), "nothing else runs as the account: all of it goes");
        let used = filter(parse(text, "t.yaml").expect("parses"), &[("ks", "controller")]);
        assert_eq!(ids(&used.kept), ["ServiceAccount ks/controller", "ClusterRoleBinding admin"]);
    }

    #[test]
    fn workload_kinds() {
        let object = |api: &str, kind: &str| serde_json::json!({"apiVersion": api, "kind": kind});
        assert!(is_workload(&object("apps/v1", "Deployment")));
        assert!(is_workload(&object("v1", "Service")));
        assert!(is_workload(&object("policy/v1", "PodDisruptionBudget")));
        assert!(!is_workload(&object("serving.knative.dev/v1", "Service")));
        assert!(!is_workload(&object("v1", "ConfigMap")));
        assert!(!is_workload(&object("v1", "ServiceAccount")));
    }
}
