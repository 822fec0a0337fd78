//! `docs/first-service.md`, executed: every ` ```sh ` block of the tutorial runs in order
//! (install, `ly new`, `ly run --watch`, the edit, `cargo test`, snapshot build and push,
//! `ly deploy` to a cluster with Lampyr installed), and every ` ```text ` block is the
//! output its command must print. The conventions are at the end of the page.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use lampyr_testenv::stack::{GRANT_IMAGE, HELPER_IMAGE};
use lampyr_testenv::{InstalledLampyr, LyRun, Serving, repo_root};
use support::{path, stderr};

/// How long a command with an expected output is retried (a `--watch` swap rebuilds the guest).
const CONVERGE: Duration = Duration::from_secs(240);

/// One fenced block of the page.
#[derive(Debug)]
struct Block {
    /// The info string: `sh`, `sh serve`, `sh cluster`, `sh checkout`, `text`, `rust file=PATH`.
    info: String,
    /// Its lines.
    body: String,
}

fn blocks(page: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut open: Option<Block> = None;
    for line in page.lines() {
        match (&mut open, line.strip_prefix("```")) {
            (None, Some(info)) => open = Some(Block { info: info.trim().to_string(), body: String::new() }),
            (Some(_), Some("")) => blocks.extend(open.take()),
            (Some(block), _) => {
                block.body.push_str(line);
                block.body.push('\n');
            }
            (None, None) => {}
        }
    }
    assert!(open.is_none(), "an unclosed code block in docs/first-service.md");
    blocks
}

/// Where the page's commands run and what they see.
struct Reader {
    work: tempfile::TempDir,
    install_root: tempfile::TempDir,
    /// `:8080` on the page is this port (the `serve` block's).
    port: Option<u16>,
    /// Extra environment for `cluster` blocks.
    cluster_env: Vec<(String, String)>,
    /// Text replaced in every command: the page's addresses by the test's.
    replace: Vec<(String, String)>,
}

impl Reader {
    /// Runs `script` with bash (`-euo pipefail`) in `dir`, `ly` from the install root first on PATH.
    fn sh(&self, dir: &Path, script: &str, cluster: bool) -> Output {
        let mut script = script.to_string();
        if let Some(port) = self.port {
            script = script.replace(":8080", &format!(":{port}"));
        }
        for (from, to) in &self.replace {
            script = script.replace(from, to);
        }
        let path = format!("{}:{}", self.install_root.path().join("bin").display(), std::env::var("PATH").unwrap_or_default());
        let mut command = Command::new("bash");
        command.args(["-euo", "pipefail", "-c", &script]).current_dir(dir).env("PATH", path);
        command.env("LAMPYR_CACHE_DIR", self.work.path().join(".lampyr-cache"));
        for (key, _) in std::env::vars_os() {
            let name = key.to_string_lossy();
            let kept = ["CARGO_HOME", "CARGO_TARGET_DIR"].contains(&name.as_ref());
            if (name.starts_with("CARGO") && !kept) || name == "RUSTFLAGS" {
                command.env_remove(&key);
            }
        }
        command.env("CARGO_INSTALL_ROOT", self.install_root.path());
        if cluster {
            command.envs(self.cluster_env.iter().map(|(k, v)| (k, v)));
        }
        command.output().expect("bash runs")
    }

    fn ly(&self) -> PathBuf {
        self.install_root.path().join("bin/ly")
    }
}

fn both(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_first_service_tutorial_runs_as_written() {
    let page = std::fs::read_to_string(repo_root().join("docs/first-service.md")).expect("docs/first-service.md");
    let blocks = blocks(&page);
    let stack = InstalledLampyr::shared();
    let mut reader = Reader {
        work: tempfile::tempdir().expect("a temp dir"),
        install_root: tempfile::tempdir().expect("a temp dir"),
        port: None,
        cluster_env: Vec::new(),
        replace: vec![("localhost:5000".into(), stack.registry.host())],
    };
    assert!(!reader.work.path().starts_with(repo_root()), "the reader works outside the checkout");
    let mut serving: Option<LyRun> = None;
    let mut installed: Option<support::Ly<'static>> = None;
    let mut ran = 0;
    for (i, block) in blocks.iter().enumerate() {
        let expected = blocks.get(i + 1).filter(|b| b.info == "text").map(|b| b.body.trim_end().to_string());
        let mut words = block.info.split_whitespace();
        match (words.next(), words.next()) {
            (Some("sh"), Some("serve")) => {
                let args: Vec<&str> = block.body.split_whitespace().skip_while(|w| *w != "run").skip(1).collect();
                let run = LyRun::start(Command::new(reader.ly()), reader.work.path(), &args);
                let port = run.base.rsplit(':').next().and_then(|p| p.parse().ok()).expect("a port");
                reader.port = Some(port);
                serving = Some(run);
            }
            (Some("sh"), Some("cluster")) if installed.is_none() => {
                installed = Some(install_lampyr(stack, &mut reader).await);
                run_block(&reader, block, expected.as_deref(), true);
            }
            (Some("sh"), where_) => run_block(&reader, block, expected.as_deref(), where_ == Some("cluster")),
            (Some("rust"), Some(file)) => {
                let file = file.strip_prefix("file=").expect("rust file=PATH");
                std::fs::write(reader.work.path().join(file), &block.body).expect("write the page's file");
            }
            _ => continue,
        }
        ran += 1;
    }
    drop(serving);
    assert!(ran >= 10, "the page's blocks ran ({ran}); docs/first-service.md lost its commands?");
}

/// Runs one `sh` block (the `checkout` one in the repository, the rest in the work directory);
/// with an expected output, retries until its stdout is that.
fn run_block(reader: &Reader, block: &Block, expected: Option<&str>, cluster: bool) {
    let checkout = block.info.split_whitespace().nth(1) == Some("checkout");
    let dir = if checkout { repo_root() } else { reader.work.path().to_path_buf() };
    let deadline = Instant::now() + CONVERGE;
    loop {
        let out = reader.sh(&dir, &block.body, cluster);
        let stdout = String::from_utf8_lossy(&out.stdout).trim_end().to_string();
        match expected {
            None => {
                assert!(out.status.success(), "the page's commands failed:\n{}\n{}", block.body, both(&out));
                return;
            }
            Some(expected) if out.status.success() && stdout == expected => return,
            Some(expected) => assert!(
                Instant::now() < deadline,
                "the page's commands did not print what it shows within {CONVERGE:?}:\n{}expected:\n{expected}\nlast:\n{}",
                block.body,
                both(&out)
            ),
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// What the page assumes of the cluster: Lampyr installed (as `ly cluster install` does it
/// in this environment), the kubeconfig pointing at it, the node's address for `NODE:30080`.
async fn install_lampyr(stack: &'static InstalledLampyr, reader: &mut Reader) -> support::Ly<'static> {
    let ly = support::ly(stack.cluster);
    let mirror =
        format!("{{\"localhost:{}\": {{registry: \"{}\", plainHttp: true}}}}", stack.registry.addr().port(), stack.registry.host());
    let settings = ly.settings(
        "platform.yaml",
        &[
            ("grantImage", GRANT_IMAGE),
            ("helperImage", HELPER_IMAGE),
            ("zygoteRegistries", "[]"),
            ("registryMirrors", &mirror),
            support::FIBER_ROUTER_INGRESS,
        ],
    );
    let out = ly.cluster(&["install", "--non-interactive", "--provider-config", path(&settings)]);
    assert!(out.status.success(), "install failed:\n{}", stderr(&out));
    ly.healthy_but_cert_manager(stack).await;
    let router = stack.router_addr().expect("fiber-router runs");
    reader.replace.push(("http://NODE:30080".into(), format!("http://{router}")));
    reader.cluster_env = vec![
        ("KUBECONFIG".into(), stack.cluster.kubeconfig().display().to_string()),
        ("LY_KUBECTL".into(), stack.cluster.kubectl().get_program().to_string_lossy().into_owned()),
    ];
    ly
}
