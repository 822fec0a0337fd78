//! `ly snapshot build | inspect | verify`.

use std::path::{Path, PathBuf};

use lampyr_artifact::cache::Cache;
use lampyr_artifact::reference::Repository;
use lampyr_artifact::registry::RegistryClient;
use lampyr_artifact::{ArtifactRef, PlatformFit, VerifiedArtifact, verify_layout};
use lampyr_fiber::build::{BuildOptions, build_artifact};
use lampyr_fiber::guest_build::{GuestBuild, is_crate_dir};

use super::CliError;
use crate::args::SnapshotCommand;
use crate::ui::Ui;

/// Runs one `ly snapshot` subcommand.
pub fn run(cmd: SnapshotCommand, ui: &mut Ui) -> Result<(), CliError> {
    match cmd {
        SnapshotCommand::Build { guest, output, max_body, heap_size, bin } => {
            let elf = resolve_guest(&guest, bin, ui)?;
            if is_crate_dir(&guest) {
                // The guest build grew the cache's shared build directory (`ly run` and
                // `ly deploy` prune after snapshotting instead).
                super::cache::prune_to_limit(&Cache::new(Cache::default_location()?), ui)?;
            }
            let opts = BuildOptions { max_body, heap_size };
            let built = ui.timed(format!("booting {} and taking its snapshot", elf.display()), || build_artifact(&elf, &output, &opts))?;
            ui.step(format!("wrote {}", output.display()));
            ui.line(&built.digest);
            Ok(())
        }
        SnapshotCommand::Push { layout, repository, tag } => {
            let ArtifactRef::Layout { path, digest } = ArtifactRef::parse(&layout)? else {
                return Err(CliError::Usage(format!("{layout} is not a layout directory")));
            };
            let artifact = verify_layout(&path, digest.as_deref())?;
            let repo = Repository::parse(&repository)?;
            let client = RegistryClient::for_repository(&repo)?;
            let pushing = format!("pushing {} to {repo}", artifact.digest);
            let pinned = ui.timed(pushing, || block_on(client.push(&path, &artifact.digest, &repo, tag.as_deref())))??;
            ui.line(pinned.to_string());
            Ok(())
        }
        SnapshotCommand::Pull { reference } => {
            let artifact = resolve(&reference, ui)?;
            ui.line(artifact.layout.display().to_string());
            Ok(())
        }
        SnapshotCommand::Inspect { reference, json } => {
            let artifact = resolve(&reference, ui)?;
            if json {
                ui.line(inspect_json(&artifact).to_string());
            } else {
                print_inspect(&artifact, ui);
            }
            Ok(())
        }
        SnapshotCommand::Verify { reference } => {
            let artifact = resolve(&reference, ui)?;
            match &artifact.fit {
                PlatformFit::Fits => ui.line(format!("verified {} (fits this host)", artifact.digest)),
                PlatformFit::Mismatch { field, host, snapshot } => ui.line(format!(
                    "verified {}: snapshot {field} is {snapshot}, this host is {host}; fibers here will boot the carried guest ELF",
                    artifact.digest
                )),
            }
            Ok(())
        }
    }
}

/// The directory under the cache's `run/` where cargo keeps what every guest crate `ly`
/// builds compiles (its `build.build-dir`): the guest SDK's dependencies compile once per
/// machine, not once per crate. Evicted like a snapshot build, never while a `ly` builds.
pub const SHARED_GUEST_BUILD: &str = "cargo-build";

/// A guest ELF path, building the crate first when given a crate directory; intermediate
/// outputs go to the cache's [`SHARED_GUEST_BUILD`], the ELF to the crate's own `target/`.
/// Callers prune the cache to its limit afterwards.
pub fn resolve_guest(guest: &Path, bin: Option<String>, ui: &mut Ui) -> Result<PathBuf, CliError> {
    if !is_crate_dir(guest) {
        if guest.is_file() {
            return Ok(guest.to_path_buf());
        }
        return Err(CliError::Usage(format!("{} is neither a guest ELF nor a guest crate directory", guest.display())));
    }
    let cache = Cache::new(Cache::default_location()?);
    let shared = cache.root().join("run").join(SHARED_GUEST_BUILD);
    let building = cache.lease_build(&shared)?;
    let task = ui.start(format!("building guest crate {}", guest.display()));
    let mut build = GuestBuild::new(guest);
    build.bin = bin;
    build.build_dir = Some(shared);
    let built = build.run(&mut |line| ui.detail(&task, line));
    ui.done(task);
    drop(building);
    Ok(built?)
}

/// Resolves a reference to a verified local layout, pulling registry
/// references by digest into the local cache first.
pub fn resolve(reference: &str, ui: &mut Ui) -> Result<VerifiedArtifact, CliError> {
    match ArtifactRef::parse(reference)? {
        ArtifactRef::Layout { path, digest } => Ok(verify_layout(&path, digest.as_deref())?),
        ArtifactRef::Registry { repository, digest } => {
            let cache = Cache::new(Cache::default_location()?);
            let client = RegistryClient::for_repository(&repository)?;
            super::source::hold_lease(digest.clone(), cache.lease(&digest)?);
            let pulling = format!("pulling {repository}@{digest} into {}", cache.root().display());
            let pulled = ui.timed(pulling, || block_on(client.pull_verified(&repository, &digest, &cache)))??;
            super::cache::prune_to_limit(&cache, ui)?;
            Ok(pulled)
        }
    }
}

/// Runs `fut` to completion on a small runtime of its own.
pub fn block_on<F: std::future::Future>(fut: F) -> Result<F::Output, CliError> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(CliError::Runtime)?;
    Ok(rt.block_on(fut))
}

fn print_inspect(a: &VerifiedArtifact, ui: &mut Ui) {
    let m = &a.metadata;
    ui.line(format!("artifact:          {}", a.digest));
    ui.line(format!("layout:            {}", a.layout.display()));
    ui.line(format!("snapshot manifest: {}", a.snapshot_manifest));
    ui.line(format!("platform:          {}", a.platform));
    let fit = match &a.fit {
        PlatformFit::Fits => "fits this host".to_string(),
        PlatformFit::Mismatch { field, host, .. } => format!("{field} differs from this host ({host}): boots the guest ELF"),
    };
    ui.line(format!("fit:               {fit}"));
    ui.line(format!("abi version:       {}", m.abi_version));
    ui.line(format!("handler:           {}", m.handler));
    ui.line(format!("max body:          {} B request, {} B response", m.max_request_body, m.max_response_body));
    ui.line(format!("heap / scratch:    {} B / {} B", m.heap_size, m.scratch_size));
    ui.line(format!("guest elf:         {} ({} B)", m.guest_elf_digest, a.sizes.elf));
    ui.line(format!("memory layer:      {} B", a.sizes.memory));
    ui.line(format!("transport layer:   {} B", a.sizes.transport));
}

fn inspect_json(a: &VerifiedArtifact) -> serde_json::Value {
    serde_json::json!({
        "digest": a.digest,
        "layout": a.layout,
        "snapshotManifest": a.snapshot_manifest,
        "platform": {"arch": a.platform.arch, "hypervisor": a.platform.hypervisor, "cpuVendor": a.platform.cpu_vendor},
        "fitsHost": a.fit == PlatformFit::Fits,
        "metadata": a.metadata,
        "sizes": {"memory": a.sizes.memory, "transport": a.sizes.transport, "config": a.sizes.config, "elf": a.sizes.elf},
    })
}
