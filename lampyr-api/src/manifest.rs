//! Parsing Knative manifests from (multi-document) YAML text.
//!
//! [`parse_manifests`] reads every document of a YAML stream:
//! - empty documents (`---` with nothing, or only comments) are skipped;
//! - `serving.knative.dev/v1` Services and Configurations are parsed into
//!   [`Service`] and [`Configuration`];
//! - any other kind is returned as [`OtherObject`] so the caller can say it
//!   ignored it;
//! - the first error stops parsing and names the source, the line and column,
//!   the field path and the YAML document it is in.

use std::fmt;

use serde::Deserialize;
use serde::de::IgnoredAny;

use crate::keys::{SERVING_API_VERSION, SERVING_GROUP};
use crate::serving::{Configuration, Service};

/// One non-empty document of a manifest stream.
#[derive(Clone, Debug, PartialEq)]
pub struct Manifest {
    /// Number of the YAML document in the stream, starting at 1.
    pub document: usize,
    /// What the document holds.
    pub object: ManifestObject,
}

/// The object a manifest document holds.
#[derive(Clone, Debug, PartialEq)]
pub enum ManifestObject {
    /// A `serving.knative.dev/v1` Service.
    Service(Box<Service>),
    /// A `serving.knative.dev/v1` Configuration.
    Configuration(Box<Configuration>),
    /// Any other kind, not parsed further.
    Other(OtherObject),
}

/// A document of a kind Lampyr does not read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OtherObject {
    /// Its `apiVersion`.
    pub api_version: String,
    /// Its `kind`.
    pub kind: String,
    /// Its `metadata.name`, if any.
    pub name: Option<String>,
}

impl Manifest {
    /// The document's `kind`.
    pub fn kind(&self) -> &str {
        match &self.object {
            ManifestObject::Service(_) => Service::KIND,
            ManifestObject::Configuration(_) => Configuration::KIND,
            ManifestObject::Other(other) => &other.kind,
        }
    }

    /// The document's `metadata.name`, if any.
    pub fn name(&self) -> Option<&str> {
        match &self.object {
            ManifestObject::Service(s) => s.metadata.name.as_deref(),
            ManifestObject::Configuration(c) => c.metadata.name.as_deref(),
            ManifestObject::Other(other) => other.name.as_deref(),
        }
    }
}

/// A line and column in the source text, both starting at 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Location {
    /// Line, from 1.
    pub line: usize,
    /// Column, from 1.
    pub column: usize,
}

/// What was wrong with a manifest document.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ManifestErrorKind {
    /// The text is not well-formed YAML.
    #[error("YAML syntax error: {0}")]
    Syntax(String),
    /// A field has the wrong type or shape, or a required field is missing.
    #[error("{0}")]
    Invalid(String),
    /// A Knative Serving kind in an API version Lampyr does not read.
    #[error("unsupported apiVersion {api_version:?} for kind {kind}: Lampyr reads {SERVING_API_VERSION}")]
    UnsupportedApiVersion {
        /// The `apiVersion` as written.
        api_version: String,
        /// The `kind` (`Service` or `Configuration`).
        kind: &'static str,
    },
}

/// A manifest document could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ManifestError {
    /// The name of the source (usually a file name), as given to [`parse_manifests`].
    pub source_name: String,
    /// Number of the YAML document in the stream, starting at 1.
    pub document: usize,
    /// Where in the source text, when known.
    pub location: Option<Location>,
    /// Field path inside the document (`spec.template.spec.containers[0].env`), when known.
    pub path: Option<String>,
    /// What was wrong.
    pub kind: ManifestErrorKind,
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.source_name)?;
        if let Some(loc) = self.location {
            write!(f, ":{}:{}", loc.line, loc.column)?;
        }
        write!(f, ": ")?;
        if let Some(path) = &self.path {
            write!(f, "{path}: ")?;
        }
        write!(f, "{} (YAML document {})", self.kind, self.document)
    }
}

/// Just enough of a document to decide what it is.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", expecting = "a Kubernetes object (a mapping with apiVersion and kind)")]
struct Header {
    api_version: String,
    kind: String,
    #[serde(default)]
    metadata: Option<HeaderMeta>,
}

#[derive(Deserialize)]
struct HeaderMeta {
    #[serde(default)]
    name: Option<String>,
}

/// Fails on purpose at `apiVersion`, so the error carries its location.
#[derive(Deserialize)]
struct LocateApiVersion {
    #[serde(rename = "apiVersion", deserialize_with = "fail_here")]
    _api_version: (),
}

fn fail_here<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<(), D::Error> {
    // The error must come from inside the value's own `deserialize_*` call:
    // that is where serde_yaml attaches the value's position.
    struct Fail;
    impl serde::de::Visitor<'_> for Fail {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("anything")
        }
        fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<(), E> {
            Err(E::custom("here"))
        }
    }
    deserializer.deserialize_str(Fail)
}

/// Turns a serde_yaml error into a [`ManifestError`] with a clean message.
fn yaml_error(source_name: &str, document: usize, path: Option<String>, err: &serde_yaml::Error, syntax: bool) -> ManifestError {
    let location = err.location().map(|l| Location { line: l.line(), column: l.column() });
    let mut message = err.to_string();
    if let Some(loc) = location {
        let mark = format!(" at line {} column {}", loc.line, loc.column);
        if let Some(at) = message.find(&mark) {
            message.replace_range(at..at + mark.len(), "");
        }
    }
    // serde_yaml prefixes its own copy of the path; keep ours only.
    let path = path.filter(|p| !p.is_empty() && p != ".");
    if let Some(p) = &path
        && let Some(rest) = message.strip_prefix(&format!("{p}: "))
    {
        message = rest.to_owned();
    }
    let kind = if syntax { ManifestErrorKind::Syntax(message) } else { ManifestErrorKind::Invalid(message) };
    ManifestError { source_name: source_name.to_owned(), document, location, path, kind }
}

/// Deserializes document `index` (0-based) of `text` as `T`, tracking the field path.
fn deserialize_document<T: serde::de::DeserializeOwned>(text: &str, index: usize, source_name: &str) -> Result<T, ManifestError> {
    let Some(doc) = serde_yaml::Deserializer::from_str(text).nth(index) else {
        // The first pass counted this document, so it exists.
        return Err(ManifestError {
            source_name: source_name.to_owned(),
            document: index + 1,
            location: None,
            path: None,
            kind: ManifestErrorKind::Invalid("document vanished between passes".into()),
        });
    };
    serde_path_to_error::deserialize(doc).map_err(|e| {
        let path = e.path().to_string();
        yaml_error(source_name, index + 1, Some(path), e.inner(), false)
    })
}

/// Parse every document of a YAML stream; `source_name` names it in errors.
pub fn parse_manifests(text: &str, source_name: &str) -> Result<Vec<Manifest>, ManifestError> {
    // Pass 1: syntax. Stop at the first broken document (serde_yaml would
    // keep yielding it).
    let mut count = 0;
    for (index, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
        if let Err(err) = IgnoredAny::deserialize(doc) {
            return Err(yaml_error(source_name, index + 1, None, &err, true));
        }
        count += 1;
    }

    // Pass 2: what each document is. Pass 3: the Knative ones, typed.
    let mut manifests = Vec::new();
    for index in 0..count {
        let document = index + 1;
        let Some(header) = deserialize_document::<Option<Header>>(text, index, source_name)? else {
            continue;
        };
        let group = header.api_version.split('/').next().unwrap_or_default();
        let knative_kind = match header.kind.as_str() {
            "Service" => Some(Service::KIND),
            "Configuration" => Some(Configuration::KIND),
            _ => None,
        };
        let object = if let Some(kind) = knative_kind.filter(|_| group == SERVING_GROUP) {
            if header.api_version != SERVING_API_VERSION {
                let location = deserialize_document::<LocateApiVersion>(text, index, source_name).err().and_then(|e| e.location);
                return Err(ManifestError {
                    source_name: source_name.to_owned(),
                    document,
                    location,
                    path: Some("apiVersion".into()),
                    kind: ManifestErrorKind::UnsupportedApiVersion { api_version: header.api_version, kind },
                });
            }
            if kind == Service::KIND {
                ManifestObject::Service(Box::new(deserialize_document(text, index, source_name)?))
            } else {
                ManifestObject::Configuration(Box::new(deserialize_document(text, index, source_name)?))
            }
        } else {
            ManifestObject::Other(OtherObject {
                api_version: header.api_version,
                kind: header.kind,
                name: header.metadata.and_then(|m| m.name),
            })
        };
        manifests.push(Manifest { document, object });
    }
    Ok(manifests)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HELLO: &str = "\
apiVersion: serving.knative.dev/v1
kind: Service
metadata:
  name: hello
  namespace: default
  managedFields: [{manager: kubectl}]
spec:
  template:
    metadata:
      annotations:
        autoscaling.knative.dev/min-scale: \"1\"
    spec:
      containerConcurrency: 1
      containers:
        - image: ghcr.io/example/hello
          workingDir: /srv
          env:
            - name: TARGET
              value: world
          ports:
            - name: h2c
              containerPort: 8080
      volumes:
        - name: data
          emptyDir: {}
  traffic:
    - latestRevision: true
      percent: 100
status:
  url: http://hello.default.example.com
";

    fn parse(text: &str) -> Result<Vec<Manifest>, ManifestError> {
        parse_manifests(text, "service.yaml")
    }

    fn service(m: &Manifest) -> &Service {
        match &m.object {
            ManifestObject::Service(s) => s,
            other => panic!("expected a Service, got {other:?}"),
        }
    }

    #[test]
    fn parses_a_service_and_keeps_unmodelled_template_fields() {
        let manifests = parse(HELLO).expect("parses");
        assert_eq!(manifests.len(), 1);
        assert_eq!(manifests[0].document, 1);
        assert_eq!(manifests[0].kind(), "Service");
        assert_eq!(manifests[0].name(), Some("hello"));
        let svc = service(&manifests[0]);
        let spec = &svc.spec.template.spec;
        assert_eq!(spec.container_concurrency, Some(1));
        assert!(spec.other.contains_key("volumes"));
        let c = &spec.containers[0];
        assert_eq!(c.image.as_deref(), Some("ghcr.io/example/hello"));
        assert_eq!(c.other.get("workingDir"), Some(&serde_json::json!("/srv")));
        let env = c.env.as_deref().unwrap_or_default();
        assert_eq!(env[0].name, "TARGET");
        assert_eq!(env[0].value.as_deref(), Some("world"));
        let traffic = svc.spec.traffic.as_deref().unwrap_or_default();
        assert_eq!(traffic[0].percent, Some(100));
        assert_eq!(traffic[0].latest_revision, Some(true));
        let annotations = svc.spec.template.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(annotations["autoscaling.knative.dev/min-scale"], "1");
    }

    #[test]
    fn multi_document_streams_skip_empty_documents_and_report_others() {
        let text = format!(
            "---\n# only a comment\n---\n{HELLO}---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\n---\n\
             apiVersion: serving.knative.dev/v1\nkind: Configuration\nmetadata:\n  name: conf\nspec:\n  template:\n    spec:\n      containers: [{{image: x}}]\n---\n"
        );
        let manifests = parse(&text).expect("parses");
        let kinds: Vec<_> = manifests.iter().map(|m| (m.document, m.kind())).collect();
        assert_eq!(kinds, [(2, "Service"), (3, "ConfigMap"), (4, "Configuration")]);
        assert_eq!(
            manifests[1].object,
            ManifestObject::Other(OtherObject { api_version: "v1".into(), kind: "ConfigMap".into(), name: Some("cfg".into()) })
        );
        assert_eq!(manifests[2].name(), Some("conf"));
        // A Revision or Route is another kind too.
        let route = parse("apiVersion: serving.knative.dev/v1\nkind: Route\nmetadata: {name: r}\n").expect("parses");
        assert_eq!(route[0].kind(), "Route");
        assert!(parse("").expect("empty stream").is_empty());
        assert!(parse("---\n---\n").expect("empty documents").is_empty());
    }

    #[test]
    fn type_errors_name_line_column_path_and_document() {
        let text = HELLO.replace(
            "          env:\n            - name: TARGET\n              value: world\n",
            "          env:\n            name: TARGET\n",
        );
        let text = format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: x}}\n---\n{text}");
        let err = parse(&text).expect_err("env is a map");
        assert_eq!(err.document, 2);
        assert_eq!(err.path.as_deref(), Some("spec.template.spec.containers[0].env"));
        // Line 4 of the stream is `---`; `name: TARGET` is on line 22 of it.
        let line = text.lines().position(|l| l.trim() == "name: TARGET").map(|i| i + 1);
        assert_eq!(err.location.map(|l| l.line), line);
        assert_eq!(err.location.map(|l| l.column), Some(13));
        let shown = err.to_string();
        assert!(
            shown.starts_with(&format!(
                "service.yaml:{}:13: spec.template.spec.containers[0].env: invalid type: map, expected a sequence",
                line.unwrap_or_default()
            )),
            "{shown}"
        );
        assert!(shown.ends_with("(YAML document 2)"), "{shown}");
    }

    #[test]
    fn annotation_values_must_be_strings() {
        let text = HELLO.replace("min-scale: \"1\"", "min-scale: [1]");
        let err = parse(&text).expect_err("annotation is a list");
        assert_eq!(err.path.as_deref(), Some("spec.template.metadata.annotations.autoscaling.knative.dev/min-scale"));
        assert!(matches!(err.kind, ManifestErrorKind::Invalid(_)));
        assert_eq!(err.location.map(|l| l.line), Some(11));
    }

    #[test]
    fn syntax_errors() {
        let text = "apiVersion: v1\nkind: ConfigMap\n---\napiVersion: v1\n  kind: [\n";
        let err = parse(text).expect_err("broken YAML");
        assert_eq!(err.document, 2);
        assert!(matches!(err.kind, ManifestErrorKind::Syntax(_)), "{err:?}");
        assert!(err.location.is_some_and(|l| l.line >= 4), "{err:?}");
        assert!(err.to_string().starts_with("service.yaml:"), "{err}");
    }

    #[test]
    fn documents_without_kind_or_not_objects() {
        let err = parse("apiVersion: v1\nmetadata: {name: x}\n").expect_err("no kind");
        assert_eq!(err.kind, ManifestErrorKind::Invalid("missing field `kind`".into()));
        let err = parse("just a string\n").expect_err("scalar");
        assert!(err.to_string().contains("expected a Kubernetes object (a mapping with apiVersion and kind)"), "{err}");
    }

    #[test]
    fn old_serving_versions_are_refused_with_a_location() {
        let text = "kind: Service\nmetadata: {name: x}\napiVersion: serving.knative.dev/v1alpha1\n";
        let err = parse(text).expect_err("v1alpha1");
        assert_eq!(
            err.kind,
            ManifestErrorKind::UnsupportedApiVersion { api_version: "serving.knative.dev/v1alpha1".into(), kind: "Service" }
        );
        assert_eq!(err.location.map(|l| l.line), Some(3));
        assert_eq!(err.path.as_deref(), Some("apiVersion"));
    }

    #[test]
    fn serializes_with_api_version_and_kind() {
        let manifests = parse(HELLO).expect("parses");
        let json = serde_json::to_value(service(&manifests[0])).expect("serializes");
        assert_eq!(json["apiVersion"], "serving.knative.dev/v1");
        assert_eq!(json["kind"], "Service");
        assert_eq!(json["spec"]["template"]["spec"]["containers"][0]["workingDir"], serde_json::json!("/srv"));
        assert_eq!(json["spec"]["template"]["spec"]["volumes"][0]["name"], "data");
        assert_eq!(json["status"]["url"], "http://hello.default.example.com");
    }
}
