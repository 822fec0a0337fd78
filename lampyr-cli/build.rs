//! Generates the Workspace bootstrap manifests `ly scaffold workspace` writes:
//! upstream Knative Serving from the Knative modules `knative/go.mod` pins
//! (found in Go's module cache, downloaded when missing) filtered to Lampyr's
//! composition, and Lampyr's own from `config/` (see `lampyr-manifests`).
//! They are embedded in the binary, so `ly` needs no Go at run time.

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
    write(&out.join("bundle.rs"), &table);
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
