//! `AzureEventGridSource` (`sources.lampyr.dev/v1alpha1`): a Knative event source that
//! receives Azure Event Grid push deliveries and sends each event on to a sink as a
//! CloudEvent; its status is a Knative source's (`SinkProvided`, `Ready`, `sinkUri`).

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{CustomResource, CustomResourceExt as _};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::conditions::{Condition, ConditionSet};
use crate::duck::KReference;

/// The API group of Lampyr's event sources.
pub const GROUP: &str = "sources.lampyr.dev";

/// The sink is resolved to a URL (from `spec.sink.uri`, or its reference's `status.address.url`).
pub const SINK_PROVIDED: &str = "SinkProvided";
/// `Ready` = `SinkProvided`.
pub const CONDITION_SET: ConditionSet = ConditionSet::living(&[SINK_PROVIDED]);
/// The sink reference names nothing that exists, or nothing with an address yet.
pub const REASON_SINK_NOT_FOUND: &str = "NotFound";
/// Neither `spec.sink.ref` nor `spec.sink.uri` is usable.
pub const REASON_SINK_INVALID: &str = "Invalid";

/// An Azure Event Grid subscription's endpoint in the cluster: Event Grid delivers to the
/// adapter at `/<namespace>/<name>`, the adapter answers its validation handshakes and sends
/// every event on to the sink.
// The `printcolumn(...)` entries repeat keys such as `type_`, which the lint mistakes for duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "sources.lampyr.dev",
    version = "v1alpha1",
    kind = "AzureEventGridSource",
    namespaced,
    status = "SourceStatus",
    category = "sources",
    category = "all",
    derive = "PartialEq",
    doc = "AzureEventGridSource receives Azure Event Grid push deliveries (Event Grid schema or CloudEvents schema, single or batched, with the subscription validation handshakes) at the eventgrid-adapter's /<namespace>/<name> and sends each event to its sink as a CloudEvent. Creating the Event Grid subscription is the Azure provider's.",
    printcolumn(name = "Sink", type_ = "string", json_path = ".status.sinkUri"),
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Reason", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].reason"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct AzureEventGridSourceSpec {
    /// Where the events go: a reference to an addressable object (a Broker, a Knative Service), or a URI.
    pub sink: Destination,
    /// CloudEvent extension attributes set on every event sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ce_overrides: Option<CloudEventOverrides>,
}

/// A Knative destination (`duckv1.Destination`): a reference, a URI, or a reference and a path.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Destination {
    /// An addressable object; its `status.address.url` is the destination.
    #[serde(rename = "ref", default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<KReference>,
    /// An absolute URI, or with `ref` a path relative to the reference's URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
}

/// Attributes a source sets on every event it sends (`duckv1.CloudEventOverrides`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CloudEventOverrides {
    /// Extension attributes, by name (lowercase letters and digits).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extensions: BTreeMap<String, String>,
}

/// A Knative source's status (`duckv1.SourceStatus`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SourceStatus {
    /// The generation these conditions describe.
    #[serde(default, skip_serializing_if = "crate::duck::is_zero")]
    pub observed_generation: i64,
    /// `SinkProvided` and `Ready`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The resolved sink.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sink_uri: Option<String>,
}

/// The CRD of [`AzureEventGridSource`].
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![AzureEventGridSource::crd()]
}

/// [`crds`] as multi-document YAML: the content of `config/crd/eventgrid.yaml`.
pub fn crd_yaml() -> Result<String, serde_yaml::Error> {
    let mut out = String::new();
    for crd in crds() {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(&crd)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_source_reads_and_writes_knatives_field_names() {
        let source: AzureEventGridSource = serde_json::from_value(json!({
            "apiVersion": "sources.lampyr.dev/v1alpha1", "kind": "AzureEventGridSource",
            "metadata": { "name": "blobs", "namespace": "default" },
            "spec": {
                "sink": { "ref": { "apiVersion": "eventing.knative.dev/v1", "kind": "Broker", "name": "default" } },
                "ceOverrides": { "extensions": { "team": "images" } },
            },
            "status": { "observedGeneration": 2, "sinkUri": "http://broker-ingress/default/default" },
        }))
        .expect("parses");
        let reference = source.spec.sink.reference.as_ref().expect("a ref");
        assert_eq!((reference.kind.as_str(), reference.name.as_str()), ("Broker", "default"));
        let back = serde_json::to_value(&source).expect("serializes");
        assert_eq!(back["spec"]["sink"]["ref"]["apiVersion"], "eventing.knative.dev/v1");
        assert_eq!(back["spec"]["ceOverrides"]["extensions"]["team"], "images");
        assert_eq!(back["status"]["sinkUri"], "http://broker-ingress/default/default");
    }

    #[test]
    fn the_crd_is_namespaced_with_a_status_subresource() {
        let crd = AzureEventGridSource::crd();
        assert_eq!(crd.metadata.name.as_deref(), Some("azureeventgridsources.sources.lampyr.dev"));
        assert_eq!(crd.spec.scope, "Namespaced");
        assert!(crd.spec.versions[0].subresources.as_ref().and_then(|s| s.status.as_ref()).is_some());
    }
}
