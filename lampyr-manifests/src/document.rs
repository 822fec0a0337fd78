//! Multi-document YAML, kept as text (comments and all) beside its parsed object.

use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use crate::Error;

/// One Kubernetes object of a manifest file: its text as written and its value.
#[derive(Clone, Debug)]
pub struct Document {
    /// Where it came from, e.g. `knative.dev/serving@v0.42.2/config/core/100-namespace.yaml`.
    pub origin: String,
    /// The document's text, without the `---` separator, comments kept.
    pub text: String,
    /// The parsed object (it has `apiVersion`, `kind` and `metadata.name`).
    pub object: Value,
}

impl Document {
    /// `apiVersion`.
    pub fn api_version(&self) -> &str {
        str_at(&self.object, "/apiVersion")
    }

    /// The API group (`""` for the core group).
    pub fn group(&self) -> &str {
        group_of(self.api_version())
    }

    /// `kind`.
    pub fn kind(&self) -> &str {
        str_at(&self.object, "/kind")
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        str_at(&self.object, "/metadata/name")
    }

    /// `metadata.namespace`, if set.
    pub fn namespace(&self) -> Option<&str> {
        self.object.pointer("/metadata/namespace").and_then(Value::as_str)
    }

    /// The value of label `key`, if set.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.object.get("metadata")?.get("labels")?.get(key)?.as_str()
    }

    /// `Kind namespace/name` (or `Kind name`), for messages and listings.
    pub fn id(&self) -> String {
        match self.namespace() {
            Some(ns) => format!("{} {ns}/{}", self.kind(), self.name()),
            None => format!("{} {}", self.kind(), self.name()),
        }
    }
}

/// The API group of an `apiVersion` (`""` for `v1`).
pub(crate) fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map(|(group, _)| group).unwrap_or("")
}

pub(crate) fn str_at<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value.pointer(pointer).and_then(Value::as_str).unwrap_or_default()
}

/// Reads and parses a manifest file; `origin` names it in documents and errors.
pub fn read(path: &Path, origin: &str) -> Result<Vec<Document>, Error> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Read { path: path.to_path_buf(), source })?;
    parse(&text, origin)
}

/// Splits `text` at its `---` lines and parses each document.
///
/// Comment-only text before a document (a licence header) is kept with the
/// document that follows it; comments after the last document stay with it.
/// Every document must be a Kubernetes object with `apiVersion`, `kind` and
/// `metadata.name`.
pub fn parse(text: &str, origin: &str) -> Result<Vec<Document>, Error> {
    let mut chunks: Vec<String> = vec![String::new()];
    for line in text.split_inclusive('\n') {
        if is_separator(line) {
            chunks.push(String::new());
        } else if let Some(last) = chunks.last_mut() {
            last.push_str(line);
        }
    }
    let mut documents: Vec<Document> = Vec::new();
    let mut pending = String::new();
    for chunk in chunks {
        if is_blank(&chunk) {
            pending.push_str(&chunk);
            continue;
        }
        let object: Value = serde_yaml::from_str(&chunk).map_err(|error| Error::Yaml { origin: origin.to_string(), error })?;
        let index = documents.len() + 1;
        check_object(&object).map_err(|what| Error::NotAnObject { origin: origin.to_string(), index, what })?;
        let text = format!("{}{}", std::mem::take(&mut pending), chunk);
        documents.push(Document { origin: origin.to_string(), text, object });
    }
    if let Some(last) = documents.last_mut() {
        last.text.push_str(&pending);
    }
    for document in &mut documents {
        let trimmed = document.text.trim_matches('\n').len();
        let start = document.text.len() - document.text.trim_start_matches('\n').len();
        document.text = format!("{}\n", &document.text[start..start + trimmed]);
    }
    // The same text through the YAML parser's own document splitting: a
    // separator this splitter missed (or invented) would show as a difference.
    let whole = serde_yaml::Deserializer::from_str(text)
        .map(Value::deserialize)
        .collect::<Result<Vec<Value>, _>>()
        .map_err(|error| Error::Yaml { origin: origin.to_string(), error })?;
    let whole: Vec<Value> = whole.into_iter().filter(|v| !v.is_null()).collect();
    if whole.len() != documents.len() || whole.iter().zip(&documents).any(|(a, b)| *a != b.object) {
        return Err(Error::Inconsistent(format!(
            "{origin}: its documents could not be split at `---` lines (the YAML parser finds {}, the splitter {})",
            whole.len(),
            documents.len()
        )));
    }
    Ok(documents)
}

/// A `---` document separator line (optionally with trailing spaces or a comment).
fn is_separator(line: &str) -> bool {
    let Some(rest) = line.strip_prefix("---") else { return false };
    let rest = rest.trim_end_matches(['\n', '\r']);
    rest.is_empty() || rest.starts_with([' ', '\t']) && (rest.trim().is_empty() || rest.trim().starts_with('#'))
}

/// Only blank lines and comments.
fn is_blank(chunk: &str) -> bool {
    chunk.lines().all(|l| {
        let l = l.trim();
        l.is_empty() || l.starts_with('#')
    })
}

fn check_object(object: &Value) -> Result<(), String> {
    if !object.is_object() {
        return Err("not a mapping".to_string());
    }
    for (pointer, field) in [("/apiVersion", "apiVersion"), ("/kind", "kind"), ("/metadata/name", "metadata.name")] {
        if str_at(object, pointer).is_empty() {
            return Err(format!("no {field}"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_stay_with_their_documents_and_objects_parse() {
        let text = "# licence\n# more\n\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n---\n# about b\napiVersion: v1\nkind: Secret\nmetadata:\n  name: b\n  namespace: x\n--- # trailing\n---\n# end\n";
        let docs = parse(text, "t.yaml").expect("parses");
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0].text, "# licence\n# more\n\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n");
        assert_eq!(docs[1].text, "# about b\napiVersion: v1\nkind: Secret\nmetadata:\n  name: b\n  namespace: x\n# end\n");
        assert_eq!(docs[1].id(), "Secret x/b");
        assert_eq!(docs[0].group(), "");
    }

    #[test]
    fn a_document_without_a_name_is_refused_with_its_position() {
        let err = parse("apiVersion: v1\nkind: A\nmetadata:\n  name: a\n---\napiVersion: v1\nkind: B\n", "f.yaml").expect_err("refused");
        assert_eq!(err.to_string(), "f.yaml: document 2 is not a Kubernetes object: no metadata.name");
    }

    #[test]
    fn block_scalars_holding_dashes_are_not_separators() {
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  x: |\n    ---\n    y\n";
        let docs = parse(text, "t.yaml").expect("parses");
        assert_eq!(docs.len(), 1);
        assert_eq!(docs[0].object.pointer("/data/x").and_then(Value::as_str), Some("---\ny\n"));
    }

    #[test]
    fn api_groups() {
        assert_eq!(group_of("apps/v1"), "apps");
        assert_eq!(group_of("v1"), "");
        assert_eq!(group_of("caching.internal.knative.dev/v1alpha1"), "caching.internal.knative.dev");
    }
}
