//! The workspace's crate graph from `cargo metadata`: which Lampyr crate depends on
//! which (normal dependencies only, as a library user gets them), which of them link
//! a hypervisor, and `docs/crates.md` rendered from it.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;

/// Crates that bring a hypervisor: only the crates that run fibers may reach them.
pub const HYPERVISOR_CRATES: [&str; 2] = ["hyperlight-host", "kvm-ioctls"];

/// The part of `cargo metadata --format-version 1` this module reads.
#[derive(Debug, Deserialize)]
pub struct Metadata {
    packages: Vec<Package>,
    workspace_members: Vec<String>,
    resolve: Resolve,
}

#[derive(Debug, Deserialize)]
struct Package {
    id: String,
    name: String,
    #[serde(default)]
    description: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Resolve {
    nodes: Vec<Node>,
}

#[derive(Debug, Deserialize)]
struct Node {
    id: String,
    deps: Vec<NodeDep>,
}

#[derive(Debug, Deserialize)]
struct NodeDep {
    pkg: String,
    dep_kinds: Vec<DepKind>,
}

#[derive(Debug, Deserialize)]
struct DepKind {
    /// `None` for a normal dependency, `dev` or `build` otherwise.
    kind: Option<String>,
}

/// The normal-dependency graph of every package, by name, and the workspace's crates.
#[derive(Debug)]
pub struct CrateGraph {
    edges: BTreeMap<String, BTreeSet<String>>,
    members: BTreeMap<String, String>,
}

impl CrateGraph {
    /// The graph of `metadata` (several versions of one crate share its name here).
    pub fn new(metadata: &Metadata) -> Self {
        let names: BTreeMap<&str, &Package> = metadata.packages.iter().map(|p| (p.id.as_str(), p)).collect();
        let name = |id: &str| names.get(id).map_or_else(|| id.to_string(), |p| p.name.clone());
        let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for node in &metadata.resolve.nodes {
            let normal = node.deps.iter().filter(|d| d.dep_kinds.iter().any(|k| k.kind.is_none()));
            edges.entry(name(&node.id)).or_default().extend(normal.map(|d| name(&d.pkg)));
        }
        let members = metadata
            .workspace_members
            .iter()
            .filter_map(|id| names.get(id.as_str()))
            .map(|p| (p.name.clone(), p.description.clone().unwrap_or_default()))
            .collect();
        CrateGraph { edges, members }
    }

    /// Every crate `krate` reaches through normal dependencies, itself excluded.
    pub fn reaches(&self, krate: &str) -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![krate.to_string()];
        while let Some(next) = todo.pop() {
            for dep in self.edges.get(&next).into_iter().flatten() {
                if seen.insert(dep.clone()) {
                    todo.push(dep.clone());
                }
            }
        }
        seen
    }

    /// The hypervisor crates `krate` reaches.
    pub fn hypervisor_of(&self, krate: &str) -> Vec<&'static str> {
        let reached = self.reaches(krate);
        HYPERVISOR_CRATES.into_iter().filter(|h| reached.contains(*h)).collect()
    }

    /// The workspace's crates, by name.
    pub fn members(&self) -> impl Iterator<Item = &str> {
        self.members.keys().map(String::as_str)
    }

    /// The workspace crates `krate` depends on directly (normal dependencies).
    pub fn member_deps(&self, krate: &str) -> Vec<&str> {
        self.edges.get(krate).into_iter().flatten().filter(|d| self.members.contains_key(*d)).map(String::as_str).collect()
    }

    /// `docs/crates.md`: a table of the crates and a Mermaid graph of their edges.
    pub fn render(&self) -> String {
        let mut out = String::from(
            "# Lampyr's crates\n\n\
             Generated from `cargo metadata` by `cargo test -p lampyr-testenv --test crate_graph`\n\
             (`LAMPYR_WRITE_DOCS=1` rewrites it); that test fails when this file is stale or when a\n\
             crate that must not reach a hypervisor does. Only normal dependencies count: what a\n\
             user of the crate links.\n\n\
             | crate | owns | depends on | links a hypervisor |\n|---|---|---|---|\n",
        );
        for (name, description) in &self.members {
            let deps = self.member_deps(name).iter().map(|d| format!("`{d}`")).collect::<Vec<_>>().join(", ");
            let hypervisor = self.hypervisor_of(name);
            let links = if hypervisor.is_empty() { "no".to_string() } else { format!("yes ({})", hypervisor.join(", ")) };
            out.push_str(&format!("| `{name}` | {description} | {deps} | {links} |\n"));
        }
        out.push_str("\n```mermaid\ngraph TD\n");
        for name in self.members.keys() {
            for dep in self.member_deps(name) {
                out.push_str(&format!("  {name} --> {dep}\n"));
            }
        }
        out.push_str("```\n");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metadata() -> Metadata {
        let json = serde_json::json!({
            "packages": [
                { "id": "a 1", "name": "a", "description": "the top" },
                { "id": "b 1", "name": "b", "description": null },
                { "id": "h 1", "name": "hyperlight-host" },
                { "id": "t 1", "name": "testing" },
            ],
            "workspace_members": ["a 1", "b 1"],
            "resolve": { "nodes": [
                { "id": "a 1", "deps": [
                    { "pkg": "b 1", "dep_kinds": [{ "kind": null }] },
                    { "pkg": "t 1", "dep_kinds": [{ "kind": "dev" }] },
                ] },
                { "id": "b 1", "deps": [{ "pkg": "h 1", "dep_kinds": [{ "kind": null }, { "kind": "dev" }] }] },
                { "id": "t 1", "deps": [{ "pkg": "h 1", "dep_kinds": [{ "kind": null }] }] },
                { "id": "h 1", "deps": [] },
            ] },
        });
        serde_json::from_value(json).expect("metadata")
    }

    #[test]
    fn only_normal_edges_count_and_reach_is_transitive() {
        let graph = CrateGraph::new(&metadata());
        assert_eq!(graph.reaches("a").into_iter().collect::<Vec<_>>(), ["b", "hyperlight-host"]);
        assert_eq!(graph.hypervisor_of("a"), ["hyperlight-host"], "through b, not through the dev-only testing");
        assert!(graph.hypervisor_of("hyperlight-host").is_empty());
        assert_eq!(graph.member_deps("a"), ["b"]);
    }

    #[test]
    fn the_document_lists_members_and_edges() {
        let doc = CrateGraph::new(&metadata()).render();
        assert!(doc.contains("| `a` | the top | `b` | yes (hyperlight-host) |"), "{doc}");
        assert!(doc.contains("| `b` |  |  | yes (hyperlight-host) |"), "{doc}");
        assert!(doc.contains("  a --> b\n"), "{doc}");
        assert!(!doc.contains("testing"), "{doc}");
    }
}
