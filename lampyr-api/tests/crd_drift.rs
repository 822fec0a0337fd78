//! The committed CRD YAML must be what the types generate.

use std::path::Path;

/// Asserts `config/crd/FILE` is `generated`; `regenerate` says how to make it so.
fn assert_committed(file: &str, generated: &str, regenerate: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/crd").join(file);
    let committed = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}; {regenerate}", path.display()));
    if committed != generated {
        let line = committed
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .map_or_else(|| committed.lines().count().min(generated.lines().count()) + 1, |i| i + 1);
        panic!("config/crd/{file} differs from the CRDs the lampyr-api types generate (first difference at line {line}); {regenerate}");
    }
}

#[test]
fn committed_crd_yaml_matches_the_types() {
    let generated = lampyr_api::fiber::crd_yaml().expect("CRDs serialize to YAML");
    assert_committed("lampyr.yaml", &generated, "run `cargo run -p lampyr-api --bin crdgen > config/crd/lampyr.yaml`");
}

#[test]
fn committed_event_source_crd_matches_the_types() {
    let generated = lampyr_api::eventgrid::crd_yaml().expect("CRDs serialize to YAML");
    assert_committed("eventgrid.yaml", &generated, "run `cargo run -p lampyr-api --bin crdgen eventgrid > config/crd/eventgrid.yaml`");
}

#[test]
fn committed_crd_yaml_parses_as_three_crds() {
    let generated = lampyr_api::fiber::crd_yaml().expect("CRDs serialize to YAML");
    let docs: Vec<serde_yaml::Value> =
        serde_yaml::Deserializer::from_str(&generated).map(|d| serde::Deserialize::deserialize(d).expect("valid YAML document")).collect();
    let kinds: Vec<_> = docs.iter().map(|d| d["spec"]["names"]["kind"].as_str().unwrap_or_default().to_owned()).collect();
    assert_eq!(kinds, ["CapacityGrant", "Home", "GrantPolicy"]);
}
