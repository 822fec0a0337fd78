//! Generates the Workspace bootstrap manifests `ly scaffold workspace` writes:
//! upstream Knative Serving from the Knative modules `knative/go.mod` pins
//! (found in Go's module cache, downloaded when missing) filtered to Lampyr's
//! composition, Lampyr's own from `config/`, and Knative Eventing unchanged
//! (see `lampyr-manifests`).
//! They are embedded in the binary, so `ly` needs no Go at run time.
//!
//! Also embeds what `ly new` writes: the guest SDK's sources (`lampyr-abi`, with its
//! workspace-inherited manifest fields filled in, and `lampyr-guest`) and the example
//! guests its templates are (`examples/`), with the examples' lock file and profiles.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn main() {
    let crate_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let repo = crate_dir.parent().map(Path::to_path_buf).unwrap_or_else(|| crate_dir.join(".."));
    let knative = repo.join("knative");
    let config = repo.join("config");
    println!("cargo::rerun-if-changed={}", knative.join("go.mod").display());
    println!("cargo::rerun-if-changed={}", knative.join("go.sum").display());
    println!("cargo::rerun-if-changed={}", config.display());
    for var in ["GOFLAGS", "GOMODCACHE", "GOPATH", "GOPROXY"] {
        println!("cargo::rerun-if-env-changed={var}");
    }

    let modules = lampyr_manifests::KnativeModules::locate(&knative).unwrap_or_else(|e| fail(&e));
    let files = lampyr_manifests::bundle(&modules, &config, env!("CARGO_PKG_VERSION")).unwrap_or_else(|e| fail(&e));
    let release = lampyr_manifests::knative::release(&modules.serving).unwrap_or_else(|e| fail(&e));

    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap_or_default());
    let k8s = out.join("k8s");
    std::fs::create_dir_all(&k8s).unwrap_or_else(|e| fail(&format!("creating {}: {e}", k8s.display())));
    let mut table = String::from("/// `(file name, what it installs, content)` of every generated manifest, in apply order.\n");
    table.push_str("pub const FILES: &[(&str, &str, &str)] = &[\n");
    for file in &files {
        let path = k8s.join(file.name);
        write(&path, &file.text);
        let _ = writeln!(table, "    ({:?}, {:?}, include_str!({:?})),", file.name, file.about, path.display().to_string());
    }
    table.push_str("];\n");
    let _ = writeln!(table, "/// The serving module and version the Knative manifests come from.");
    let _ = writeln!(table, "pub const KNATIVE_SERVING: &str = {:?};", format!("{} {}", modules.serving.path, modules.serving.version));
    let _ = writeln!(table, "/// The networking module and version.");
    let _ = writeln!(
        table,
        "pub const KNATIVE_NETWORKING: &str = {:?};",
        format!("{} {}", modules.networking.path, modules.networking.version)
    );
    let _ = writeln!(table, "/// The Knative release (images and version labels).");
    let _ = writeln!(table, "pub const KNATIVE_RELEASE: &str = {release:?};");
    let eventing = lampyr_manifests::knative::release(&modules.eventing).unwrap_or_else(|e| fail(&e));
    let _ = writeln!(table, "/// The eventing module and version, and its Knative release.");
    let _ = writeln!(
        table,
        "pub const KNATIVE_EVENTING: &str = {:?};",
        format!("{} {} (Knative {eventing})", modules.eventing.path, modules.eventing.version)
    );
    write(&out.join("bundle.rs"), &table);
    embed_guest_sources(&repo, &out);
}

/// The examples `ly new` offers as templates.
const TEMPLATES: [&str; 3] = ["hello", "json-api", "echo"];

/// Writes `guest_sources.rs`: the SDK's files and the templates, as `include_str!`s.
fn embed_guest_sources(repo: &Path, out: &Path) {
    let mut table = String::from("/// `(path under the SDK directory, content)` of every file of the guest SDK.\n");
    table.push_str("pub const SDK_FILES: &[(&str, &str)] = &[\n");
    for krate in ["lampyr-abi", "lampyr-guest"] {
        let dir = repo.join(krate);
        println!("cargo::rerun-if-changed={}", dir.display());
        let manifest = standalone_manifest(&dir.join("Cargo.toml"), &repo.join("Cargo.toml"));
        let normalized = out.join(format!("{krate}.Cargo.toml"));
        write(&normalized, &manifest);
        let mut files = vec![(format!("{krate}/Cargo.toml"), normalized), (format!("{krate}/README.md"), dir.join("README.md"))];
        let src = dir.join("src");
        let mut sources = rust_sources(&src);
        sources.sort();
        for source in sources {
            let name = source.strip_prefix(&src).map(|p| p.to_string_lossy().into_owned()).unwrap_or_default();
            files.push((format!("{krate}/src/{name}"), source));
        }
        for (name, path) in files {
            let _ = writeln!(table, "    ({name:?}, include_str!({:?})),", path.display().to_string());
        }
    }
    table.push_str("];\n");
    let examples = repo.join("examples");
    let _ = writeln!(table, "/// `(name, src/main.rs, Cargo.toml, service.yaml)` of every `ly new` template: the examples.");
    table.push_str("pub const TEMPLATES: &[(&str, &str, &str, &str)] = &[\n");
    for name in TEMPLATES {
        let dir = examples.join(name);
        println!("cargo::rerun-if-changed={}", dir.display());
        let [main, manifest, service] =
            [dir.join("src/main.rs"), dir.join("Cargo.toml"), dir.join("service.yaml")].map(|p| p.display().to_string());
        let _ = writeln!(table, "    ({name:?}, include_str!({main:?}), include_str!({manifest:?}), include_str!({service:?})),");
    }
    table.push_str("];\n");
    for (constant, file, about) in [
        ("EXAMPLES_MANIFEST", "Cargo.toml", "The examples workspace's manifest (its profiles are a guest's)."),
        ("EXAMPLES_LOCK", "Cargo.lock", "The examples' lock file: the versions a new guest crate starts from."),
    ] {
        let path = examples.join(file);
        println!("cargo::rerun-if-changed={}", path.display());
        let _ = writeln!(table, "/// {about}\npub const {constant}: &str = include_str!({:?});", path.display().to_string());
    }
    write(&out.join("guest_sources.rs"), &table);
}

/// The `.rs` files under `dir`, in its subdirectories too (a module's own `tests.rs`).
fn rust_sources(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for path in read_dir(dir) {
        if path.is_dir() {
            found.extend(rust_sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
    found
}

fn read_dir(dir: &Path) -> Vec<PathBuf> {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| fail(&format!("reading {}: {e}", dir.display())));
    entries.filter_map(|e| e.ok().map(|e| e.path())).collect()
}

/// `member`'s manifest with each `key.workspace = true` replaced by the workspace's
/// `[workspace.package]` value and its `[lints]` table (the workspace's) dropped: a crate
/// that builds outside this repository.
fn standalone_manifest(member: &Path, workspace: &Path) -> String {
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_else(|e| fail(&format!("reading {}: {e}", p.display())));
    let (member_text, workspace_text) = (read(member), read(workspace));
    let inherited: Vec<(&str, &str)> = section(&workspace_text, "[workspace.package]")
        .filter_map(|line| line.split_once('=').map(|(k, v)| (k.trim(), v.trim())))
        .collect();
    let mut out = String::new();
    let mut in_lints = false;
    for line in member_text.lines() {
        if line.starts_with('[') {
            in_lints = line.trim() == "[lints]";
        }
        if in_lints {
            continue;
        }
        match line.strip_suffix(".workspace = true") {
            Some(key) => match inherited.iter().find(|(k, _)| *k == key) {
                Some((_, value)) => {
                    let _ = writeln!(out, "{key} = {value}");
                }
                None => fail(&format!("{}: {key} is inherited but the workspace does not set it", member.display())),
            },
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out.trim_end().to_string() + "\n"
}

/// The lines of TOML table `header` in `text` (up to the next table).
fn section<'a>(text: &'a str, header: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    text.lines().skip_while(move |l| l.trim() != header).skip(1).take_while(|l| !l.starts_with('['))
}

fn write(path: &Path, text: &str) {
    // Unchanged content keeps its timestamp, so nothing downstream rebuilds.
    if std::fs::read_to_string(path).is_ok_and(|old| old == text) {
        return;
    }
    std::fs::write(path, text).unwrap_or_else(|e| fail(&format!("writing {}: {e}", path.display())));
}

fn fail(error: &dyn std::fmt::Display) -> ! {
    eprintln!(
        "error: ly embeds the Workspace bootstrap manifests, generated from the Knative modules knative/go.mod pins, \
         and could not generate them: {error}\n\
         To fix: install Go, then run `go -C knative mod download` from the repository root (it needs the Go module proxy), and build again."
    );
    std::process::exit(1);
}
