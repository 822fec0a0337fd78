//! Host-side cost of what `ly deploy` adds to a plain artifact push, and what
//! fiberd adds to a plain pull: sealing the template to the fleet key and
//! pushing it, pulling it and opening it, each beside its baseline (verifying
//! the layout; pushing and pulling the artifact itself) in the same run,
//! against a real registry (Debian's docker-registry) on a loopback port.
//!
//! Run: `cargo bench -p lampyr-benches --bench deploy`

use lampyr_artifact::cache::Cache;
use lampyr_artifact::reference::Repository;
use lampyr_artifact::registry::RegistryClient;
use lampyr_artifact::seal::{FleetKey, open_artifact, seal_artifact};
use lampyr_artifact::verify_layout;
use lampyr_benches::{Samples, Table, fmt_duration, times_baseline};
use lampyr_testenv::TestRegistry;

const SAMPLES: usize = 10;

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
}

/// The bytes an artifact's blobs take.
fn artifact_bytes(artifact: &lampyr_artifact::VerifiedArtifact) -> u64 {
    let s = &artifact.sizes;
    s.memory + s.transport + s.config + s.elf
}
