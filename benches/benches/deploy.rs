//! Host-side cost of what `ly deploy` adds to a plain artifact push, and what
//! fiberd adds to a plain pull: sealing the template to the fleet key and
//! pushing it, pulling it and opening it, each beside its baseline (verifying
//! the layout; pushing and pulling the artifact itself) in the same run,
//! against a real registry (Debian's docker-registry) on a loopback port.
//! Then compressed transport against the uncompressed form of the same snapshot:
//! bytes pushed and pulled (beside the artifact's gzip size) and a cold pull, verify and
//! template load on a fresh cache, over loopback and over a link paced to 1 Gbit/s
//! (`lampyr_benches::link`) in front of the same registry.
//!
//! Run: `cargo bench -p lampyr-benches --bench deploy`

use lampyr_artifact::cache::Cache;
use lampyr_artifact::reference::Repository;
use lampyr_artifact::registry::RegistryClient;
use lampyr_artifact::seal::{FleetKey, open_artifact, seal_artifact};
use lampyr_artifact::verify_layout;
use lampyr_benches::link::PacedLink;
use lampyr_benches::{Samples, Table, fmt_duration, times_baseline};
use lampyr_testenv::TestRegistry;

const SAMPLES: usize = 10;
/// Cold pulls per form and path: a pull of the packed form is a few tens of milliseconds,
/// so more samples steady the medians the target is judged on.
const PULL_SAMPLES: usize = 30;
/// A node's link to its registry in the paced runs: 1 Gbit/s.
const LINK_BYTES_PER_SEC: u64 = 125_000_000;

fn main() {
    lampyr_testenv::require_kvm();
    let artifact = lampyr_testenv::example_artifact("hello", 1024 * 1024);
    let registry = TestRegistry::start();
    let client = RegistryClient::new([registry.host()]).expect("a registry client");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let key = FleetKey::generate();
    let repo = |name: String| Repository::parse(&format!("{}/bench/{name}", registry.host())).expect("a repository");

    let verify = Samples::measure(SAMPLES, 1, || drop(verify_layout(&artifact.layout, Some(&artifact.digest)).expect("verify")));
    let sealed_path = dir.path().join("template.age");
    let seal = Samples::measure(SAMPLES, 1, || {
        drop(seal_artifact(&artifact.layout, &artifact.digest, &key.public(), &sealed_path).expect("seal"));
    });
    let sealed = seal_artifact(&artifact.layout, &artifact.digest, &key.public(), &sealed_path).expect("seal");

    // Every push goes to a new repository, so every blob is uploaded.
    let mut n = 0;
    let mut fresh = || {
        n += 1;
        repo(format!("r{n}"))
    };
    let push = Samples::measure(SAMPLES, 1, || {
        runtime.block_on(client.push(&artifact.layout, &artifact.digest, &fresh(), None)).expect("push");
    });
    let push_template = Samples::measure(SAMPLES, 1, || {
        runtime.block_on(client.push_template(&sealed, &fresh(), None)).expect("push template");
    });

    // Every pull goes to a new cache, so every blob is fetched.
    let plain_repo = fresh();
    runtime.block_on(client.push(&artifact.layout, &artifact.digest, &plain_repo, None)).expect("push");
    let template_repo = fresh();
    let pinned = runtime.block_on(client.push_template(&sealed, &template_repo, None)).expect("push template");
    let template_digest = pinned.digest().expect("pinned").to_string();
    let mut caches = 0;
    let mut new_cache = || {
        caches += 1;
        Cache::new(dir.path().join(format!("cache-{caches}")))
    };
    let pull = Samples::measure(SAMPLES, 1, || {
        runtime.block_on(client.pull_verified(&plain_repo, &artifact.digest, &new_cache())).expect("pull");
    });
    let pull_open = Samples::measure(SAMPLES, 1, || {
        let cache = new_cache();
        let pulled = runtime.block_on(client.pull_template(&template_repo, &template_digest, &cache)).expect("pull template");
        drop(open_artifact(&pulled.sealed, &key, &artifact.digest, &cache).expect("open"));
    });

    let mut t = Table::default();
    t.row("verify the layout (baseline: what every push does first)", fmt_duration(verify.median()), "-", "1×".into());
    t.row("seal the template to the fleet key", fmt_duration(seal.median()), "-", times_baseline(seal.median(), verify.median()));
    t.row("push the artifact (baseline)", fmt_duration(push.median()), "-", "1×".into());
    t.row("push the sealed template", fmt_duration(push_template.median()), "-", times_baseline(push_template.median(), push.median()));
    t.row(
        "ly deploy's additions: seal + push template",
        fmt_duration(seal.median() + push_template.median()),
        "-",
        times_baseline(seal.median() + push_template.median(), push.median()),
    );
    t.row("pull and verify the artifact (baseline: fiberd without a template)", fmt_duration(pull.median()), "-", "1×".into());
    t.row(
        "pull the template, open and verify it (fiberd)",
        fmt_duration(pull_open.median()),
        "-",
        times_baseline(pull_open.median(), pull.median()),
    );
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    println!(
        "\nLampyr deploy benchmark (hello example: {:.1} MiB artifact, {:.1} MiB sealed template; medians of {SAMPLES})\n",
        mib(artifact_bytes(&verify_layout(&artifact.layout, Some(&artifact.digest)).expect("verify"))),
        mib(sealed.size)
    );
    print!("{}", t.render());
    transport(&artifact, &client, &runtime, dir.path(), &registry);
}

/// Packed (zstd) against plain transport of the same snapshot: bytes and cold pulls.
fn transport(
    packed: &lampyr_testenv::Artifact,
    client: &RegistryClient,
    runtime: &tokio::runtime::Runtime,
    dir: &std::path::Path,
    registry: &TestRegistry,
) {
    let repo = |name: String| Repository::parse(&format!("{}/bench/{name}", registry.host())).expect("a repository");
    let plain = lampyr_testenv::plain_form(packed, &dir.join("plain"));
    let forms = [("plain (previous version)", &plain), ("packed (zstd)", packed)];
    let mut t = Table::default();
    let gzip = gzip_bytes(&plain);
    t.row("gzip -6 of the plain artifact's blobs (reference)", format!("{gzip} B"), "-", "1×".into());
    for (name, artifact) in &forms {
        let target = if name.starts_with("packed") { "≤ 2× gzip" } else { "-" };
        let (pushed, pulled) = wire_bytes(artifact);
        for (what, bytes) in [("pushed", pushed), ("pulled", pulled)] {
            let ratio = format!("{:.2}× gzip", bytes as f64 / gzip as f64);
            t.row(&format!("bytes {what}, {name}"), format!("{bytes} B"), target, ratio);
        }
    }
    // Cold pulls over loopback, and over a paced 1 Gbit/s link to the same registry
    // (a node's NIC: what a pull off this machine moves at).
    let link = PacedLink::start(registry.addr(), LINK_BYTES_PER_SEC);
    let linked = RegistryClient::new([registry.host(), link.host()]).expect("a registry client");
    for (i, (_, artifact)) in forms.iter().enumerate() {
        runtime.block_on(client.push(&artifact.layout, &artifact.digest, &repo(format!("transport-{i}")), None)).expect("push");
    }
    // What the benchmark wrote so far (registry storage, earlier caches) reaches the disk
    // now, not during the pulls it measures.
    std::process::Command::new("sync").status().expect("sync");
    for (path, client, host) in [("loopback", client, registry.host()), ("1 Gbit/s link", &linked, link.host())] {
        let mut pulls = Vec::new();
        for (i, (name, artifact)) in forms.iter().enumerate() {
            let repository = Repository::parse(&format!("{host}/bench/transport-{i}")).expect("a repository");
            let mut loads = Vec::new();
            // One cache directory, emptied (untimed) before each pull: earlier pulls' files
            // are not left for the kernel to write back during later ones.
            let cold_dir = dir.join(format!("cold-{i}"));
            let fresh_cache = || {
                let _ = std::fs::remove_dir_all(&cold_dir);
                Cache::new(&cold_dir)
            };
            let cold = Samples::measure_with(PULL_SAMPLES, 1, fresh_cache, |cache| {
                let pulled = runtime.block_on(client.pull_verified(&repository, &artifact.digest, &cache)).expect("pull");
                let started = std::time::Instant::now();
                drop(lampyr_fiber::Template::load(&pulled, &lampyr_abi::Env::default()).expect("template loads"));
                loads.push(started.elapsed());
            });
            let load = Samples(loads).median();
            pulls.push((*name, cold.median(), load));
        }
        let (base, base_load) = (pulls[0].1, pulls[0].2);
        for (name, cold, load) in &pulls {
            let target = if name.starts_with("packed") { "≥ 5× faster" } else { "-" };
            let what = format!("cold pull + verify + template load, {path}, {name}");
            t.row(&what, fmt_duration(*cold), target, format!("{:.2}× faster", base.as_secs_f64() / cold.as_secs_f64()));
            let pull = cold.saturating_sub(*load);
            let pull_base = base.saturating_sub(base_load);
            let what = format!("  of which pull + verify (template load {})", fmt_duration(*load));
            t.row(&what, fmt_duration(pull), "-", format!("{:.2}× faster", pull_base.as_secs_f64() / pull.as_secs_f64()));
        }
    }
    println!("\nTransport forms of the same hello snapshot (cold pulls: medians of {PULL_SAMPLES}, a fresh cache each)\n");
    print!("{}", t.render());
}

/// Bytes a push moves (the index, both manifests, and every blob in its transport form)
/// and a pull into an empty cache moves (the same less the blobs the manifests embed).
fn wire_bytes(artifact: &lampyr_testenv::Artifact) -> (u64, u64) {
    let s = lampyr_artifact::verify::layout_structure(&artifact.layout, Some(&artifact.digest)).expect("structure");
    let read = |digest: &str| std::fs::read(lampyr_artifact::layout::blob_path(&artifact.layout, digest).expect("path")).expect("blob");
    let (index, snapshot, guest) = (read(&artifact.digest), read(s.snapshot.digest().as_ref()), read(s.guest.digest().as_ref()));
    let documents = (index.len() + snapshot.len() + guest.len()) as u64;
    let pushed = documents
        + s.json_blobs().iter().map(|(_, d)| d.size()).sum::<u64>()
        + s.layers().iter().map(|l| l.transport().size()).sum::<u64>();
    let listed = lampyr_artifact::structure::listed_blobs(&snapshot, &guest).expect("listed blobs");
    let fetched = listed.iter().filter(|b| b.transport().data().is_none()).map(|b| b.transport().size()).sum::<u64>();
    (pushed, documents + fetched)
}

/// The plain artifact's blobs each compressed with gzip at its default level.
fn gzip_bytes(plain: &lampyr_testenv::Artifact) -> u64 {
    use std::io::Write;
    let s = lampyr_artifact::verify::layout_structure(&plain.layout, Some(&plain.digest)).expect("structure");
    let mut digests = vec![plain.digest.clone(), s.snapshot.digest().to_string(), s.guest.digest().to_string()];
    digests.extend(s.json_blobs().iter().map(|(_, d)| d.digest().to_string()));
    digests.extend(s.layers().iter().map(|l| l.native.digest().to_string()));
    digests
        .iter()
        .map(|d| {
            let bytes = std::fs::read(lampyr_artifact::layout::blob_path(&plain.layout, d).expect("path")).expect("blob");
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            gz.write_all(&bytes).expect("gzip");
            gz.finish().expect("gzip").len() as u64
        })
        .sum()
}

/// The bytes an artifact's blobs take.
fn artifact_bytes(artifact: &lampyr_artifact::VerifiedArtifact) -> u64 {
    let s = &artifact.sizes;
    s.memory + s.transport + s.config + s.elf
}
