//! `ly new PATH`: a standalone guest crate for a new service, made from one of the
//! examples, with its `service.yaml`, host-side tests and the settings to build for fibers.
//!
//! The examples and the guest SDK were embedded when `ly` was built (`build.rs`), so a
//! crate can be created anywhere, with no checkout: its SDK is then a copy written into
//! the crate (`vendor/`), the one that speaks this `ly`'s ABI.

use std::path::{Path, PathBuf};

use lampyr_fiber::guest_build::{GUEST_RUSTFLAGS, GUEST_TARGET};

use crate::args::NewArgs;
use crate::ui::Ui;

/// What `build.rs` embedded: the SDK's files, the templates, the examples' manifest and lock.
mod embedded {
    include!(concat!(env!("OUT_DIR"), "/guest_sources.rs"));
}

/// The example a new service starts from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Template {
    /// One handler answering a greeting from its configuration (`examples/hello`).
    Hello,
    /// Routes, JSON bodies with serde, errors and logging (`examples/json-api`).
    JsonApi,
    /// The request echoed back: method, path, headers and body (`examples/echo`).
    Echo,
}

impl Template {
    /// The example directory it is made from.
    pub fn example(self) -> &'static str {
        match self {
            Template::Hello => "hello",
            Template::JsonApi => "json-api",
            Template::Echo => "echo",
        }
    }
}

/// Where a new crate's guest SDK comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sdk {
    /// A `lampyr-guest` crate on this machine (a checkout's, or `--sdk PATH`).
    Path(PathBuf),
    /// The copy `ly` carries, written into the crate's `vendor/`.
    Vendored,
}

/// Why a crate could not be created.
#[derive(Debug, thiserror::Error)]
pub enum NewError {
    /// The name cannot be a Knative Service name (nor so a crate name).
    #[error(
        "{name:?} cannot name a service: {why} (a Knative Service name: lower-case letters, digits and '-', \
         starting with a letter and not ending with '-', at most 63 characters)"
    )]
    BadName {
        /// The name given.
        name: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The directory exists and holds something.
    #[error("{} exists and is not empty: choose a new directory (ly new never overwrites)", .0.display())]
    Exists(PathBuf),
    /// `--sdk PATH` names no `lampyr-guest` crate.
    #[error("--sdk {}: no lampyr-guest crate there (give the directory holding its Cargo.toml, or auto, or vendored)", .0.display())]
    NoSdk(PathBuf),
    /// The file system refused.
    #[error("writing {}: {source}", path.display())]
    Io {
        /// What was being written.
        path: PathBuf,
        /// Why it failed.
        source: std::io::Error,
    },
}

/// A crate `ly new` created.
#[derive(Clone, Debug)]
pub struct Created {
    /// Its directory.
    pub dir: PathBuf,
    /// The Service and crate name.
    pub name: String,
    /// Where its SDK comes from.
    pub sdk: Sdk,
    /// The files written, relative to `dir`.
    pub files: Vec<String>,
}

/// `ly new`: creates the crate, then says what was written and what to do next.
pub fn run(args: &NewArgs, ui: &mut Ui) -> Result<Created, NewError> {
    let sdk = choose_sdk(&args.sdk)?;
    let created = create(&args.path, args.template, sdk)?;
    let shown = args.path.display();
    let from = match &created.sdk {
        Sdk::Path(path) => format!("the guest SDK at {}", path.display()),
        Sdk::Vendored => "the guest SDK copied into vendor/".to_string(),
    };
    ui.step(format!("created {shown}: service {} from the {} template, with {from}", created.name, args.template.example()));
    for file in created.files.iter().filter(|f| !f.starts_with("vendor/")) {
        ui.note(format!("  {file}"));
    }
    ui.note(format!("next:\n  ly run {shown}                 serve it at http://{}.default.localhost:8080", created.name));
    ui.note(format!("  cargo test --manifest-path {shown}/Cargo.toml   test its handler on the host, no VM"));
    ui.note(format!("  ly call {shown} GET /              one request answered by a real fiber"));
    Ok(created)
}

/// What `--sdk` asks for: `auto`, `vendored`, or a path to a `lampyr-guest` crate.
pub fn choose_sdk(flag: &str) -> Result<Sdk, NewError> {
    match flag {
        "vendored" => Ok(Sdk::Vendored),
        "auto" => Ok(checkout_sdk().map_or(Sdk::Vendored, Sdk::Path)),
        path => {
            let dir = PathBuf::from(path);
            let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap_or_default();
            if !manifest.lines().any(|l| l.trim() == r#"name = "lampyr-guest""#) {
                return Err(NewError::NoSdk(dir));
            }
            Ok(Sdk::Path(dir.canonicalize().unwrap_or(dir)))
        }
    }
}

/// The `lampyr-guest` of the checkout this `ly` was built from, if it is still there.
fn checkout_sdk() -> Option<PathBuf> {
    let sdk = Path::new(env!("CARGO_MANIFEST_DIR")).parent()?.join("lampyr-guest");
    sdk.join("Cargo.toml").is_file().then(|| sdk.canonicalize().unwrap_or(sdk))
}

/// Creates the crate at `path` from `template` with its SDK from `sdk`.
pub fn create(path: &Path, template: Template, sdk: Sdk) -> Result<Created, NewError> {
    let name = service_name(path)?;
    if std::fs::read_dir(path).is_ok_and(|mut entries| entries.next().is_some()) || path.is_file() {
        return Err(NewError::Exists(path.to_path_buf()));
    }
    let files = crate_files(&name, template, &sdk);
    for (file, contents) in &files {
        let target = path.join(file);
        let io = |source| NewError::Io { path: target.clone(), source };
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(io)?;
        }
        std::fs::write(&target, contents).map_err(io)?;
    }
    Ok(Created { dir: path.to_path_buf(), name, sdk, files: files.into_iter().map(|(f, _)| f).collect() })
}

/// The Service name `path`'s last component gives, checked.
pub fn service_name(path: &Path) -> Result<String, NewError> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let bad = |why| Err(NewError::BadName { name: name.clone(), why });
    if name.is_empty() {
        return bad("the path has no last component");
    }
    if name.len() > 63 {
        return bad("it is longer than 63 characters");
    }
    if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        return bad("it does not start with a lower-case letter");
    }
    if name.ends_with('-') {
        return bad("it ends with '-'");
    }
    if !name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-') {
        return bad("it holds a character other than a-z, 0-9 and '-'");
    }
    Ok(name)
}

/// Every file of the new crate, `(path relative to it, contents)`.
pub fn crate_files(name: &str, template: Template, sdk: &Sdk) -> Vec<(String, String)> {
    let example = template.example();
    let (_, main, manifest, service) = embedded::TEMPLATES.iter().find(|(t, ..)| *t == example).copied().unwrap_or(("", "", "", ""));
    let main = main.replace(&format!("`ly run examples/{example}`"), "`ly run .`");
    let mut files = vec![
        ("Cargo.toml".to_string(), cargo_manifest(name, manifest, sdk)),
        ("Cargo.lock".to_string(), embedded::EXAMPLES_LOCK.to_string()),
        ("src/main.rs".to_string(), main),
        ("service.yaml".to_string(), service_manifest(name, example, service)),
        (".cargo/config.toml".to_string(), cargo_config()),
        ("rust-toolchain.toml".to_string(), TOOLCHAIN.to_string()),
        (".gitignore".to_string(), "/target\n".to_string()),
        ("README.md".to_string(), readme(name)),
    ];
    if *sdk == Sdk::Vendored {
        files.extend(embedded::SDK_FILES.iter().map(|(path, text)| (format!("vendor/{path}"), text.to_string())));
    }
    files
}

/// The crate's manifest: the example's dependencies, its SDK, the examples' guest profiles,
/// and a workspace of its own so it builds wherever it is put.
fn cargo_manifest(name: &str, example_manifest: &str, sdk: &Sdk) -> String {
    let sdk_path = match sdk {
        Sdk::Path(path) => path.display().to_string(),
        Sdk::Vendored => "vendor/lampyr-guest".to_string(),
    };
    let quoted = serde_json::to_string(&sdk_path).unwrap_or_default();
    let mut text = format!(
        "[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2024\"\npublish = false\n\n[dependencies]\n\
         # The guest SDK (ly new --sdk chose where it comes from).\nlampyr-guest = {{ path = {quoted} }}\n"
    );
    for line in toml_table(example_manifest, "[dependencies]").filter(|l| !l.starts_with("lampyr-guest")) {
        text.push_str(line);
        text.push('\n');
    }
    let profiles = embedded::EXAMPLES_MANIFEST.find("[profile.").map_or("", |at| &embedded::EXAMPLES_MANIFEST[at..]);
    text.push('\n');
    text.push_str(profiles.trim_end());
    text.push_str("\n\n# A workspace of its own: the crate builds wherever it is, even inside another workspace.\n[workspace]\n");
    if *sdk == Sdk::Vendored {
        text.push_str("exclude = [\"vendor\"]\n");
    }
    text
}

/// The non-empty lines of TOML table `header` in `text`, up to the next table.
fn toml_table<'a>(text: &'a str, header: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    text.lines().skip_while(move |l| l.trim() != header).skip(1).take_while(|l| !l.starts_with('[')).filter(|l| !l.trim().is_empty())
}

/// The example's `service.yaml` renamed to `name`.
fn service_manifest(name: &str, example: &str, text: &str) -> String {
    text.replace(&format!("`ly run examples/{example}`"), &format!("`ly run {name}`"))
        .replace(&format!("name: {example}\n"), &format!("name: {name}\n"))
        .replace(&format!("http://{example}."), &format!("http://{name}."))
        .replace(
            &format!("ghcr.io/hyperlight-dev/lampyr/examples/{example}:latest"),
            &format!("{name} # ly deploy sets it to the snapshot it pushes"),
        )
}

/// `.cargo/config.toml`: the flags a fiber guest needs, for a plain `cargo build --target`.
fn cargo_config() -> String {
    let flags: Vec<String> = GUEST_RUSTFLAGS.split_whitespace().map(|f| format!("{f:?}")).collect();
    format!(
        "# How to build this crate for a fiber: `cargo build --release --target {GUEST_TARGET}`\n\
         # (ly run and ly snapshot build pass the same settings). Host builds, such as\n\
         # `cargo test`, are not affected.\n[target.{GUEST_TARGET}]\nrustflags = [{}]\n",
        flags.join(", ")
    )
}

/// `rust-toolchain.toml`: rustup adds the fiber target on first use.
const TOOLCHAIN: &str = "# rustup adds the target fibers run (a bare-metal x86_64, soft-float) on first use.\n\
[toolchain]\nchannel = \"stable\"\ntargets = [\"x86_64-unknown-none\"]\n";

fn readme(name: &str) -> String {
    format!(
        "# {name}\n\nA Lampyr service: a Knative Service whose Revisions run as Hyperlight fibers.\n\n\
         - `ly run .` builds the guest, snapshots it and serves it at http://{name}.default.localhost:8080\n  \
         (`--watch` rebuilds on every change).\n\
         - `cargo test` runs the handler's tests on the host, no VM; `cargo run -- GET /` answers one request.\n\
         - `ly call . GET /` answers one request from a real fiber (built and snapshotted as `ly run` does).\n\
         - `ly deploy service.yaml --repository REGISTRY/{name}` pushes its snapshot and applies `service.yaml`\n  \
         to the cluster Lampyr is installed on.\n\n\
         The handler is `src/main.rs`; `service.yaml` is a plain Knative Service (scaling, env, timeouts).\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_must_be_knative_service_names() {
        assert_eq!(service_name(Path::new("/tmp/shop-2")).ok().as_deref(), Some("shop-2"));
        for bad in ["Shop", "2shop", "shop-", "shop_cart", "", &"a".repeat(64)] {
            assert!(matches!(service_name(Path::new(bad)), Err(NewError::BadName { .. })), "{bad:?} is refused");
        }
    }

    #[test]
    fn every_template_renames_its_service_and_keeps_its_dependencies() {
        for template in [Template::Hello, Template::JsonApi, Template::Echo] {
            let files = crate_files("shop", template, &Sdk::Path(PathBuf::from("/sdk/lampyr-guest")));
            let file = |name: &str| files.iter().find(|(f, _)| f == name).map(|(_, t)| t.clone()).unwrap_or_default();
            let docs = lampyr_api::parse_manifests(&file("service.yaml"), "service.yaml").expect("the service parses");
            assert_eq!(docs.first().and_then(|d| d.name()), Some("shop"), "{template:?}");
            assert!(!file("service.yaml").contains("examples/"), "{template:?}: {}", file("service.yaml"));
            let manifest = file("Cargo.toml");
            assert!(manifest.contains("name = \"shop\"") && manifest.contains(r#"lampyr-guest = { path = "/sdk/lampyr-guest" }"#));
            assert!(manifest.contains("[profile.release]") && manifest.contains("[workspace]"), "{manifest}");
            assert!(file("src/main.rs").contains("lampyr_guest::entry!"), "{template:?}");
            assert!(files.iter().all(|(f, _)| !f.starts_with("vendor/")), "a path SDK is not copied");
        }
        let json = crate_files("shop", Template::JsonApi, &Sdk::Vendored);
        let manifest = &json.iter().find(|(f, _)| f == "Cargo.toml").expect("a manifest").1;
        assert!(manifest.contains("serde = {"), "the example's own dependencies: {manifest}");
        assert!(manifest.contains(r#"path = "vendor/lampyr-guest""#) && manifest.contains(r#"exclude = ["vendor"]"#));
    }

    #[test]
    fn the_vendored_sdk_is_standalone() {
        let files = crate_files("shop", Template::Hello, &Sdk::Vendored);
        let abi = &files.iter().find(|(f, _)| f == "vendor/lampyr-abi/Cargo.toml").expect("lampyr-abi's manifest").1;
        assert!(!abi.contains(".workspace") && !abi.contains("[lints]"), "{abi}");
        assert!(abi.contains("version = \"0.1.0\"") && abi.contains("license = \"Apache-2.0\""), "{abi}");
        for file in ["vendor/lampyr-guest/src/lib.rs", "vendor/lampyr-guest/src/router.rs", "vendor/lampyr-abi/src/decode.rs"] {
            assert!(files.iter().any(|(f, _)| f == file), "{file} is vendored");
        }
    }

    #[test]
    fn a_directory_with_files_is_never_overwritten() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("shop");
        std::fs::create_dir(&path).expect("shop/");
        std::fs::write(path.join("keep.txt"), "mine").expect("a file");
        assert!(matches!(create(&path, Template::Hello, Sdk::Vendored), Err(NewError::Exists(_))));
        assert_eq!(std::fs::read_to_string(path.join("keep.txt")).ok().as_deref(), Some("mine"));
    }
}
