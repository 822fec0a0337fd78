//! A real `ly run` process on a loopback port, for tests and benchmarks: started with
//! `--listen 127.0.0.1:0`, ready once it prints its `ready:` line, killed on drop.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a `ly run` may take to print its ready line (it may build a guest crate first).
pub const READY_PATIENCE: Duration = Duration::from_secs(300);

/// A running `ly run`, killed on drop.
pub struct LyRun {
    child: Child,
    /// `http://127.0.0.1:PORT`, from its ready line.
    pub base: String,
}

impl Drop for LyRun {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl LyRun {
    /// Starts `command` (a `ly` with its environment set) as `ly run ARGS --listen 127.0.0.1:0`
    /// in `dir` and waits for its ready line; panics with what happened when there is none.
    pub fn start(mut command: Command, dir: &Path, args: &[&str]) -> LyRun {
        crate::require_kvm();
        let child = command
            .current_dir(dir)
            .arg("run")
            .args(args)
            .args(["--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("ly starts");
        let mut run = LyRun { child, base: String::new() };
        let stdout = run.child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let deadline = Instant::now() + READY_PATIENCE;
        loop {
            let line = rx.recv_timeout(deadline.saturating_duration_since(Instant::now()));
            let line = line.unwrap_or_else(|_| panic!("ly run {args:?} printed no ready line (it exited or took over {READY_PATIENCE:?})"));
            if let Some(rest) = line.strip_prefix("ready: ") {
                run.base = rest.split_whitespace().find(|w| w.starts_with("http://")).expect("URL on the ready line").to_string();
                return run;
            }
        }
    }

    /// A client that sends requests for `host` to this `ly run`, and the base URL to use with it.
    pub fn client(&self, host: &str) -> (reqwest::Client, String) {
        let addr: std::net::SocketAddr = self.base.trim_start_matches("http://").parse().expect("address");
        let c = crate::http_client().resolve(host, addr).timeout(Duration::from_secs(60)).build().expect("client");
        (c, format!("http://{host}:{}", addr.port()))
    }
}
