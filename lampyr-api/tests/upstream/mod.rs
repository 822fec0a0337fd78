//! Reading the pinned upstream Knative modules at test time: where they are,
//! the example objects they ship, and their CRD schemas.
//!
//! Nothing upstream is copied into this repository: the modules are found
//! with `go list -m` from `knative/go.mod` (the pinned versions), in Go's
//! module cache. A missing `go` or module fails the test with the command
//! that fixes it; nothing is skipped.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The Go modules the Knative types follow.
pub const SERVING: &str = "knative.dev/serving";
/// The Go module of the networking types.
pub const NETWORKING: &str = "knative.dev/networking";

/// The `apiVersion`s whose objects the tests look for.
pub const API_VERSIONS: &[&str] = &["serving.knative.dev/v1", "serving.knative.dev/v1beta1", "networking.internal.knative.dev/v1alpha1"];

/// The directory of `module` at the version `knative/go.mod` pins.
pub fn module_dir(module: &str) -> PathBuf {
    let knative = Path::new(env!("CARGO_MANIFEST_DIR")).join("../knative");
    let fix = format!("run `go -C knative mod download {module}` (needs Go and the module proxy)");
    let out = Command::new("go")
        .arg("-C")
        .arg(&knative)
        .args(["list", "-m", "-f", "{{.Dir}}", module])
        // Never reach the network from a test: the module must be in the cache.
        .env("GOPROXY", "off")
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "the wire-compatibility tests read upstream objects from the pinned Go module \
                 {module}, found with `go list -m`, but `go` could not be run ({e}); install Go, then {fix}"
            )
        });
    let dir = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if !out.status.success() || dir.is_empty() || !Path::new(&dir).is_dir() {
        panic!(
            "the pinned Go module {module} is not in Go's module cache (`go list -m` said {:?}, {:?}); {fix}",
            dir,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    PathBuf::from(dir)
}

/// What the upstream Go types write: the lines `tests/upstream/wiregen`
/// prints, as `(Go type or kind, case, value)`.
///
/// The generator is built in a copy of `knative/go.mod` and `go.sum` under
/// cargo's per-target temporary directory, so it uses the pinned versions;
/// Go's build cache makes later runs take about a second.
pub fn go_written() -> Vec<(String, String, Value)> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let knative = manifest.join("../knative");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("wiregen");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let go_mod = read(&knative.join("go.mod")).replacen("module lampyr.dev/knative", "module lampyr.dev/wiregen", 1);
    for (name, text) in
        [("go.mod", go_mod), ("go.sum", read(&knative.join("go.sum"))), ("main.go", read(&manifest.join("tests/upstream/wiregen/main.go")))]
    {
        std::fs::write(dir.join(name), text).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let out = Command::new("go")
        .arg("-C")
        .arg(&dir)
        .args(["run", "."])
        // The pinned modules come from the cache; -mod=mod lets go record the
        // generator's direct imports in the copied go.mod.
        .env("GOPROXY", "off")
        .env("GOFLAGS", "-mod=mod")
        .env("GOWORK", "off")
        .output()
        .unwrap_or_else(|e| panic!("`go run` of tests/upstream/wiregen could not start ({e}); install Go"));
    assert!(
        out.status.success(),
        "tests/upstream/wiregen failed; run `go -C knative mod download` if a module is missing:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).expect("wiregen prints JSON lines");
            let s = |k: &str| v[k].as_str().unwrap_or_default().to_owned();
            (s("type"), s("case"), v["value"].take())
        })
        .collect()
}

/// `value` without `null` members (Go writes `null` for a zero time in a
/// struct and for nil lists without `omitempty`; the API server prunes them)
/// and, with `empty_lists`, without `[]` members either (Go's decoder and the
/// API server read both as an empty list).
pub fn without_empty(value: &Value, empty_lists: bool) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .filter(|(_, v)| !(empty_lists && v.as_array().is_some_and(Vec::is_empty)))
                .map(|(k, v)| (k.clone(), without_empty(v, empty_lists)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(|v| without_empty(v, empty_lists)).collect()),
        other => other.clone(),
    }
}

/// One object found in an upstream file.
pub struct Example {
    /// `module/relative/path.yaml#document`.
    pub source: String,
    /// The object.
    pub value: Value,
}

impl Example {
    /// `apiVersion` and `kind`.
    pub fn type_meta(&self) -> (&str, &str) {
        let s = |k: &str| self.value[k].as_str().unwrap_or_default();
        (s("apiVersion"), s("kind"))
    }
}

/// Every object with one of [`API_VERSIONS`] in the YAML and JSON files under `dir`.
///
/// A file that mentions one of those API versions but does not parse fails
/// the test, so no example is skipped unnoticed.
pub fn examples(module: &str, dir: &Path) -> Vec<Example> {
    let mut files = Vec::new();
    walk(dir, &mut files);
    files.sort();
    let mut found = Vec::new();
    for path in files {
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        if !API_VERSIONS.iter().any(|v| text.contains(v)) {
            continue;
        }
        let rel = path.strip_prefix(dir).unwrap_or(&path).display().to_string();
        let docs: Vec<Value> = if rel.ends_with(".json") {
            vec![serde_json::from_str(&text).unwrap_or_else(|e| panic!("{module}/{rel} is not JSON: {e}"))]
        } else {
            serde_yaml::Deserializer::from_str(&text)
                .map(|d| serde::Deserialize::deserialize(d).unwrap_or_else(|e| panic!("{module}/{rel} is not YAML: {e}")))
                .collect()
        };
        for (i, value) in docs.into_iter().enumerate() {
            let api_version = value["apiVersion"].as_str().unwrap_or_default();
            if API_VERSIONS.contains(&api_version) {
                found.push(Example { source: format!("{module}/{rel}#{}", i + 1), value });
            }
        }
    }
    found
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            walk(&path, out);
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml" || e == "json") {
            out.push(path);
        }
    }
}

/// Where `a` and `b` differ, one line per JSON path (empty when equal).
pub fn diff(a: &Value, b: &Value) -> String {
    let mut out = String::new();
    diff_at(a, b, "", &mut out);
    out
}

fn diff_at(a: &Value, b: &Value, path: &str, out: &mut String) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for (k, v) in x {
                match y.get(k) {
                    Some(w) => diff_at(v, w, &format!("{path}.{k}"), out),
                    None => _ = writeln!(out, "  {path}.{k}: lost ({v})"),
                }
            }
            for (k, w) in y.iter().filter(|(k, _)| !x.contains_key(*k)) {
                _ = writeln!(out, "  {path}.{k}: added ({w})");
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (v, w)) in x.iter().zip(y).enumerate() {
                diff_at(v, w, &format!("{path}[{i}]"), out);
            }
        }
        _ if a != b => _ = writeln!(out, "  {path}: {a} became {b}"),
        _ => {}
    }
}

/// The `openAPIV3Schema` of every CRD version in upstream's CRD files, by
/// `(apiVersion, kind)`, with the CRD's plural and scope.
pub struct Crds(BTreeMap<(String, String), Crd>);

/// One served version of an upstream CRD.
pub struct Crd {
    /// `spec.names.plural`.
    pub plural: String,
    /// `Namespaced` or `Cluster`.
    pub scope: String,
    /// The version's `openAPIV3Schema`.
    pub schema: Value,
}

impl Crds {
    /// Reads serving's `config/core/300-resources` and networking's `config`.
    pub fn load(serving: &Path, networking: &Path) -> Self {
        let mut crds = BTreeMap::new();
        for dir in [serving.join("config/core/300-resources"), networking.join("config")] {
            let mut files = Vec::new();
            walk(&dir, &mut files);
            for file in files {
                let text = std::fs::read_to_string(&file).unwrap_or_default();
                for doc in serde_yaml::Deserializer::from_str(&text) {
                    let Ok(crd) = <Value as serde::Deserialize>::deserialize(doc) else {
                        continue;
                    };
                    if crd["kind"] != "CustomResourceDefinition" {
                        continue;
                    }
                    let spec = &crd["spec"];
                    let group = spec["group"].as_str().unwrap_or_default();
                    let kind = spec["names"]["kind"].as_str().unwrap_or_default();
                    for v in spec["versions"].as_array().into_iter().flatten() {
                        let version = v["name"].as_str().unwrap_or_default();
                        crds.insert(
                            (format!("{group}/{version}"), kind.to_owned()),
                            Crd {
                                plural: spec["names"]["plural"].as_str().unwrap_or_default().into(),
                                scope: spec["scope"].as_str().unwrap_or_default().into(),
                                schema: v["schema"]["openAPIV3Schema"].clone(),
                            },
                        );
                    }
                }
            }
        }
        Crds(crds)
    }

    /// The CRD for `(apiVersion, kind)`; panics naming it when upstream has none.
    pub fn get(&self, api_version: &str, kind: &str) -> &Crd {
        self.0.get(&(api_version.to_owned(), kind.to_owned())).unwrap_or_else(|| panic!("upstream has no CRD for {api_version} {kind}"))
    }
}

/// What the API server would reject or prune in `value` under `schema`: fields
/// the schema does not declare, wrong JSON types and missing required fields.
///
/// The root `metadata` is the API server's own and is not checked.
pub fn schema_violations(schema: &Value, value: &Value) -> Vec<String> {
    let mut out = Vec::new();
    check(schema, value, "", &mut out);
    out
}

fn check(schema: &Value, value: &Value, path: &str, out: &mut Vec<String>) {
    if schema["x-kubernetes-preserve-unknown-fields"] == true {
        return;
    }
    let type_ok = match schema["type"].as_str() {
        _ if schema["x-kubernetes-int-or-string"] == true => value.is_string() || value.is_i64() || value.is_u64(),
        Some("object") => value.is_object(),
        Some("array") => value.is_array(),
        Some("string") => value.is_string(),
        Some("integer") => value.is_i64() || value.is_u64(),
        Some("number") => value.is_number(),
        Some("boolean") => value.is_boolean(),
        _ => true,
    };
    if !type_ok {
        out.push(format!("{path}: {value} is not of type {}", schema["type"]));
        return;
    }
    match value {
        Value::Object(map) => {
            for req in schema["required"].as_array().into_iter().flatten() {
                if let Some(r) = req.as_str().filter(|r| !map.contains_key(*r)) {
                    out.push(format!("{path}.{r}: required but missing"));
                }
            }
            for (k, v) in map {
                let p = format!("{path}.{k}");
                if path.is_empty() && k == "metadata" {
                    continue;
                }
                if let Some(s) = schema["properties"].get(k) {
                    check(s, v, &p, out);
                } else if schema["additionalProperties"].is_object() {
                    check(&schema["additionalProperties"], v, &p, out);
                } else if schema["additionalProperties"] != true {
                    out.push(format!("{p}: not in the schema (the API server would prune it)"));
                }
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                check(&schema["items"], v, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// The field paths a schema declares under `root` (`.a.b`, `.list[].c`,
/// `.map{}.d`), following `properties`, `items`, `additionalProperties` and
/// the branches of `anyOf` / `oneOf` / `allOf` (for `Option` fields). A node
/// that keeps unknown fields (`x-kubernetes-preserve-unknown-fields`) adds
/// `path.*`.
pub fn field_paths(schema: &Value, root: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut node = schema;
    for part in root.split('.').filter(|p| !p.is_empty()) {
        node = &node["properties"][part];
    }
    collect(node, "", &mut out);
    out.sort();
    out.dedup();
    out
}

fn collect(schema: &Value, path: &str, out: &mut Vec<String>) {
    if schema["x-kubernetes-preserve-unknown-fields"] == true {
        out.push(format!("{path}.*"));
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        for branch in schema[key].as_array().into_iter().flatten() {
            collect(branch, path, out);
        }
    }
    if let Some(props) = schema["properties"].as_object() {
        for (k, s) in props {
            let p = format!("{path}.{k}");
            out.push(p.clone());
            collect(s, &p, out);
        }
    }
    if schema["items"].is_object() {
        collect(&schema["items"], &format!("{path}[]"), out);
    }
    if schema["additionalProperties"].is_object() {
        collect(&schema["additionalProperties"], &format!("{path}{{}}"), out);
    }
}

/// Whether `paths` (from [`field_paths`]) declare `path`, itself or under a
/// node that keeps unknown fields.
pub fn declares(paths: &[String], path: &str) -> bool {
    paths.iter().any(|p| match p.strip_suffix(".*") {
        Some(node) => path.strip_prefix(node).is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[', '{'])),
        None => p == path,
    })
}

/// The label and annotation keys upstream's Go files define, as
/// `<Group> + "/name"` expressions over their `*GroupName` constants or as
/// whole string literals.
pub fn defined_keys(files: &[PathBuf]) -> std::collections::BTreeSet<String> {
    let group = regex::Regex::new(r#"(\w*GroupName)\s*=\s*"([^"]+)""#).expect("regex");
    let joined = regex::Regex::new(r#"(\w*GroupName)\s*\+\s*"(/[^"]+)""#).expect("regex");
    let literal = regex::Regex::new(r#""([a-z.]+\.knative\.dev/[^"]+)""#).expect("regex");
    let mut keys = std::collections::BTreeSet::new();
    for file in files {
        let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let groups: BTreeMap<&str, &str> =
            group.captures_iter(&text).filter_map(|c| Some((c.get(1)?.as_str(), c.get(2)?.as_str()))).collect();
        for c in joined.captures_iter(&text) {
            let name = &c[1];
            let prefix = groups.get(name).unwrap_or_else(|| panic!("{}: no value for {name}", file.display()));
            keys.insert(format!("{prefix}{}", &c[2]));
        }
        keys.extend(literal.captures_iter(&text).map(|c| c[1].to_owned()));
    }
    keys
}
