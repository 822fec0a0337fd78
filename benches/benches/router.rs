//! fiber-router as a reverse proxy beside nginx, both in front of the same
//! plain HTTP backend and driven by the same `wrk` run settings, with the
//! backend alone as the floor; then the host-side cost of a cold start
//! (a Revision at zero woken by a request) against the same request warm.
//!
//! Run: `cargo bench -p lampyr-benches --bench router`
//! (needs `wrk` and `nginx` from `scripts/setup`, and `/dev/kvm` for the cold-start section).
//! `LAMPYR_BENCH_SECONDS` changes the measured seconds per target (default 10).

use std::convert::Infallible;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use lampyr_abi::{Env, Request};
use lampyr_api::policy::{FiberPolicy, ScalingPolicy, TimeoutPolicy};
use lampyr_artifact::verify_layout;
use lampyr_benches::{Samples, Table, fmt_duration};
use lampyr_fiber::build::{BuildOptions, build_artifact};
use lampyr_fiber::metrics::RuntimeMetrics;
use lampyr_fiber::runtime::spare;
use lampyr_fiber::{FiberPool, LocalBackend, PoolConfig, Template};
use lampyr_router::metrics::RouterMetrics;
use lampyr_router::route::{self, RouteOptions, ServiceTraffic};
use lampyr_router::{
    Backend, Exposure, FiberdBackend, FiberdConfig, HttpBackend, HttpLimits, Instance, Listen, RevisionEntry, RouteTable, Router,
    RouterConfig, ScalerConfig, Workers,
};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::runtime::Runtime;

/// fiber-router's own allocator (its binary's), so its figures are the binary's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Host every request carries; the router maps it to Service `bench` in `default`.
const HOST: &str = "bench.default.localhost";
/// Event-loop threads of each server (backend, fiber-router, nginx workers): one each.
const WORKERS: usize = 1;
const WRK_THREADS: usize = 2;
/// Open connections of each wrk run; every target is measured at each.
const WRK_CONNECTIONS: [usize; 2] = [32, 256];
const WARMUP_SECONDS: u64 = 2;
const COLD_ITERATIONS: usize = 50;
/// Cold/warm pairs of pool calls (host time only, cheap): SPECIFICATION.md asks for 1,000.
const HOST_PAIRS: usize = 1000;
/// Warm requests on each of the local and the cluster path.
const PATH_REQUESTS: usize = 300;
const COLD_WARMUP: usize = 3;

fn main() {
    let wrk = require_tool("wrk", &["/usr/bin/wrk"]);
    let nginx_bin = require_tool("nginx", &["/usr/sbin/nginx"]);
    let seconds = std::env::var("LAMPYR_BENCH_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(10u64);

    let backend_rt = runtime("backend", WORKERS);
    let backend = backend_rt.block_on(serve_hello());
    // fiber-router as its binary serves (serving threads), and on a tokio multi-thread runtime
    // as it served before (the baseline of that change).
    let workers = Workers::start(&routing_to(backend), &[Listen::plain(loopback(), Exposure::All)], WORKERS, "bench-router")
        .expect("serving threads");
    let router = workers.local_addrs()[0];
    let multi_rt = runtime("router-mt", WORKERS);
    let router_multi = multi_rt.block_on(serve_here(routing_to(backend)));
    let nginx = Nginx::start(&nginx_bin, backend);

    // Each target's CPU: the backend's threads alone, nginx's processes, the router's threads.
    let targets = [
        ("direct (backend alone)", backend, CpuOwner::Threads("bench-backend")),
        (nginx.version.as_str(), nginx.addr, CpuOwner::ProcessTree(nginx.child.id())),
        ("fiber-router", router, CpuOwner::Threads("bench-router")),
        ("fiber-router, multi-thread runtime", router_multi, CpuOwner::Threads("bench-router-mt")),
    ];
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut errors = false;
    for connections in WRK_CONNECTIONS {
        let mut results = Vec::new();
        for (name, addr, owner) in &targets {
            run_wrk(&wrk, *addr, WARMUP_SECONDS, connections);
            let before = owner.seconds();
            let mut result = run_wrk(&wrk, *addr, seconds, connections);
            result.cpu_per_request = Duration::from_secs_f64((owner.seconds() - before).max(0.0) / result.requests.max(1) as f64);
            results.push((format!("{name}, {connections} conns"), result));
        }
        errors |= results.iter().any(|(_, r)| r.errors > 0);
        let [direct, nginx, router, router_multi] = [&results[0].1, &results[1].1, &results[2].1, &results[3].1];
        rows.extend(results.iter().map(|(name, r)| {
            let cpu = fmt_duration(r.cpu_per_request);
            vec![name.clone(), fmt_duration(r.p50), fmt_duration(r.p99), format!("{:.0}", r.rps), cpu, r.errors.to_string()]
        }));
        rows.push(ratio_row(&format!("fiber-router ÷ nginx, {connections} conns"), router, nginx));
        rows.push(ratio_row(&format!("fiber-router ÷ direct, {connections} conns"), router, direct));
        rows.push(ratio_row(&format!("serving thread ÷ multi-thread runtime, {connections} conns"), router, router_multi));
        rows.push(ratio_row(&format!("nginx ÷ direct, {connections} conns"), nginx, direct));
    }
    drop(nginx);
    multi_rt.shutdown_background();
    drop(workers);
    backend_rt.shutdown_background();

    println!("\nLampyr fiber-router vs nginx as a reverse proxy to one plain HTTP/1.1 backend\n");
    print!("{}", render(&["target", "p50", "p99", "req/s", "CPU per request", "errors"], &rows));
    println!(
        "\nwrk -t{WRK_THREADS} -c{{{}}} -d{seconds}s --latency -H 'Host: {HOST}' against each target in turn \
         (after a {WARMUP_SECONDS} s unmeasured warm-up);\nbackend: hyper HTTP/1.1 answering 200 \"hello\\n\" on {WORKERS} tokio \
         worker thread; fiber-router: {WORKERS} serving thread (a current-thread runtime on its own SO_REUSEPORT socket, as the \
         binary serves), HttpBackend with a keep-alive pool, bodies streamed;\nthe multi-thread row: the same router on a tokio \
         multi-thread runtime of {WORKERS} worker (how fiberd and `ly run` serve, and fiber-router did);\nnginx: \
         worker_processes {WORKERS} (plus its master), proxy_http_version 1.1 with an upstream keepalive pool of 64, access log off.\n\
         CPU per request: user + system time of the target's own threads or processes (the backend's for direct, \
         not the backend's for the proxies) during the measured run, ÷ requests served.\n\
         Ratios: latency and CPU ÷ is slower-by (lower is better), req/s ÷ is throughput share (higher is better).\n\
         Client, proxy and backend share the machine's {} cores: these are relative figures, not capacity.\n\
         SPECIFICATION.md target: fiber-router no slower than nginx at p50 and p99 (fiber-router ÷ nginx ≤ 1.00× on both).",
        WRK_CONNECTIONS.map(|c| c.to_string()).join(","),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    if errors {
        println!("WARNING: some runs had socket errors or non-2xx answers (the errors column).");
    }

    cold_start();
    cluster_path();
}

// ---------- Plain HTTP backend and the router in front of it ----------

fn runtime(name: &str, workers: usize) -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name(format!("bench-{name}"))
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// A hyper HTTP/1.1 server answering every request with `200 "hello\n"`.
async fn serve_hello() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind backend");
    let addr = listener.local_addr().expect("backend addr");
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(|_req| async {
                    Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from_static(b"hello\n"))))
                });
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
            });
        }
    });
    addr
}

/// A Revision policy with 30 s timeouts and the given initial scale.
fn policy(initial_scale: u32) -> FiberPolicy {
    FiberPolicy {
        scaling: ScalingPolicy { max_scale: 4, initial_scale, ..ScalingPolicy::default() },
        timeouts: TimeoutPolicy::uniform(Duration::from_secs(30)),
        ..FiberPolicy::default()
    }
}

/// A router routing Service `bench` to `backend`.
fn router_for(policy: FiberPolicy, backend: Arc<dyn Backend>) -> Arc<Router> {
    let mut table = RouteTable::default();
    table.insert_revision(RevisionEntry::new("default", "bench-00001", policy, backend));
    route::program(&mut table, &ServiceTraffic::single("default", "bench", "bench-00001"), &RouteOptions::default()).expect("a new host");
    let router = Router::new(RouterConfig::default(), Registry::default());
    router.set_table(table);
    router
}

/// Starts a router serving Service `bench` from `backend` on a loopback port, on this runtime.
async fn start_router(policy: FiberPolicy, backend: Arc<dyn Backend>) -> SocketAddr {
    serve_here(router_for(policy, backend)).await
}

/// Serves `router` on a loopback port, on this runtime.
async fn serve_here(router: Arc<Router>) -> SocketAddr {
    let listener = TcpListener::bind(loopback()).await.expect("bind router");
    let addr = listener.local_addr().expect("router addr");
    tokio::spawn(router.serve(listener, std::future::pending()));
    addr
}

/// A router forwarding Service `bench` to the plain HTTP server at `backend`.
fn routing_to(backend: SocketAddr) -> Arc<Router> {
    router_for(policy(1), Arc::new(HttpBackend::new(backend, 1024 * 1024, HttpLimits::default())))
}

/// Any free loopback port.
fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

// ---------- nginx ----------

/// nginx running a generated config from a temporary prefix; stopped on drop.
struct Nginx {
    bin: PathBuf,
    dir: tempfile::TempDir,
    child: Child,
    addr: SocketAddr,
    version: String,
}

impl Nginx {
    fn start(bin: &Path, backend: SocketAddr) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        // Workers drop root privileges to `nobody`; they must reach the temp paths.
        set_mode(dir.path(), 0o755);
        let addr = free_port();
        let p = dir.path().display();
        let conf = format!(
            "daemon off;
master_process on;
worker_processes {WORKERS};
pid {p}/nginx.pid;
error_log {p}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {p}/client_body;
    proxy_temp_path {p}/proxy;
    fastcgi_temp_path {p}/fastcgi;
    uwsgi_temp_path {p}/uwsgi;
    scgi_temp_path {p}/scgi;
    keepalive_requests 1000000;
    upstream backend {{
        server {backend};
        keepalive 64;
        keepalive_requests 1000000;
    }}
    server {{
        listen {addr};
        location / {{
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
            proxy_set_header Host $host;
        }}
    }}
}}
"
        );
        let conf_path = dir.path().join("nginx.conf");
        std::fs::write(&conf_path, conf).expect("write nginx.conf");
        let version = Command::new(bin).arg("-v").output().expect("nginx -v");
        let version = String::from_utf8_lossy(&version.stderr).trim().trim_start_matches("nginx version: ").to_string();
        let child = Command::new(bin)
            .args(["-p".as_ref(), dir.path().as_os_str(), "-c".as_ref(), conf_path.as_os_str(), "-e".as_ref()])
            .arg(dir.path().join("error.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nginx");
        let mut nginx = Nginx { bin: bin.to_path_buf(), dir, child, addr, version };
        nginx.wait_ready();
        nginx
    }

    fn wait_ready(&mut self) {
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("nginx exited with {status} before serving:\n{}", self.error_log());
            }
            if TcpStream::connect(self.addr).is_ok() {
                return;
            }
            assert!(Instant::now() < until, "nginx did not listen on {} within 10 s:\n{}", self.addr, self.error_log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // `-s stop` signals the master through the pid file; the master stops its workers.
        let _ = Command::new(&self.bin)
            .args(["-p".as_ref(), self.dir.path().as_os_str(), "-c".as_ref(), self.dir.path().join("nginx.conf").as_os_str()])
            .args(["-s", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// A loopback port free now and outside the kernel's ephemeral range.
fn free_port() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], lampyr_testenv::cluster::free_port().expect("a free loopback port")))
}

/// The path of `name`, or a loud failure naming `scripts/setup`.
fn require_tool(name: &str, fallbacks: &[&str]) -> PathBuf {
    let on_path =
        std::env::var_os("PATH").into_iter().flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>()).map(|dir| dir.join(name));
    let fallbacks = fallbacks.iter().map(PathBuf::from);
    on_path.chain(fallbacks).find(|p| p.is_file()).unwrap_or_else(|| {
        panic!("`{name}` is not installed: run scripts/setup (it installs Debian's wrk and nginx-light) before this benchmark")
    })
}

// ---------- wrk ----------

/// What one wrk run measured.
struct WrkResult {
    p50: Duration,
    p99: Duration,
    rps: f64,
    /// Requests completed in the run.
    requests: u64,
    /// The target's CPU time per request (set by the caller, which knows the target).
    cpu_per_request: Duration,
    /// Socket errors plus non-2xx/3xx answers.
    errors: u64,
}

fn run_wrk(wrk: &Path, addr: SocketAddr, seconds: u64, connections: usize) -> WrkResult {
    let out = Command::new(wrk)
        .args(["-t", &WRK_THREADS.to_string(), "-c", &connections.to_string(), "-d", &format!("{seconds}s"), "--latency"])
        .args(["-H", &format!("Host: {HOST}")])
        .arg(format!("http://{addr}/"))
        .output()
        .expect("run wrk");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "wrk failed ({}):\n{text}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    parse_wrk(&text).unwrap_or_else(|| panic!("could not parse wrk's output:\n{text}"))
}

fn parse_wrk(text: &str) -> Option<WrkResult> {
    let mut p50 = None;
    let mut p99 = None;
    let mut rps = None;
    let mut requests = None;
    let mut errors = 0;
    for line in text.lines().map(str::trim) {
        let mut words = line.split_whitespace();
        let Some(first) = words.next() else { continue };
        match first {
            "50%" => p50 = parse_wrk_time(words.next()?),
            "99%" => p99 = parse_wrk_time(words.next()?),
            "Requests/sec:" => rps = words.next()?.parse().ok(),
            // "123456 requests in 10.00s, 10.59MB read"
            count if line.contains(" requests in ") => requests = count.parse().ok(),
            "Non-2xx" => errors += line.rsplit(' ').next()?.parse::<u64>().ok()?,
            // "Socket errors: connect 0, read 0, write 0, timeout 0"
            "Socket" => {
                errors += line.split([' ', ',']).filter_map(|w| w.parse::<u64>().ok()).sum::<u64>();
            }
            _ => {}
        }
    }
    Some(WrkResult { p50: p50?, p99: p99?, rps: rps?, requests: requests?, cpu_per_request: Duration::ZERO, errors })
}

/// wrk's times: `812.00us`, `1.20ms`, `2.01s`, `1.50m`.
fn parse_wrk_time(s: &str) -> Option<Duration> {
    let split = s.find(|c: char| c.is_ascii_alphabetic())?;
    let (n, unit) = s.split_at(split);
    let n: f64 = n.parse().ok()?;
    let secs = match unit {
        "us" => n / 1e6,
        "ms" => n / 1e3,
        "s" => n,
        "m" => n * 60.0,
        _ => return None,
    };
    Some(Duration::from_secs_f64(secs))
}

fn ratio_row(what: &str, a: &WrkResult, b: &WrkResult) -> Vec<String> {
    let ratio = |x: f64, y: f64| format!("{:.2}×", x / y.max(1e-12));
    vec![
        what.to_string(),
        ratio(a.p50.as_secs_f64(), b.p50.as_secs_f64()),
        ratio(a.p99.as_secs_f64(), b.p99.as_secs_f64()),
        ratio(a.rps, b.rps),
        ratio(a.cpu_per_request.as_secs_f64(), b.cpu_per_request.as_secs_f64()),
        "-".into(),
    ]
}

/// Whose CPU time a target's requests cost.
enum CpuOwner {
    /// This process's threads of that name (a tokio runtime's workers and blocking threads).
    Threads(&'static str),
    /// A process and its children (nginx's master and workers).
    ProcessTree(u32),
}

impl CpuOwner {
    /// User + system CPU seconds used so far.
    fn seconds(&self) -> f64 {
        let ticks: u64 = match self {
            CpuOwner::Threads(name) => std::fs::read_dir("/proc/self/task")
                .into_iter()
                .flatten()
                .flatten()
                .filter(|task| std::fs::read_to_string(task.path().join("comm")).is_ok_and(|comm| comm.trim() == *name))
                .map(|task| stat_ticks(&task.path().join("stat")))
                .sum(),
            CpuOwner::ProcessTree(pid) => {
                let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
                std::iter::once(*pid)
                    .chain(children.split_whitespace().filter_map(|c| c.parse().ok()))
                    .map(|p| stat_ticks(Path::new(&format!("/proc/{p}/stat"))))
                    .sum()
            }
        };
        ticks as f64 / clock_ticks_per_second()
    }
}

/// `utime + stime` of a `/proc/…/stat` file, in clock ticks (0 when it cannot be read).
fn stat_ticks(path: &Path) -> u64 {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    // The fields after the command name (in parentheses, maybe with spaces) start at the
    // third, `state`: utime and stime, the 14th and 15th, are the 12th and 13th of them.
    let fields: Vec<&str> = text.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().collect()).unwrap_or_default();
    fields.get(11..13).map_or(0, |times| times.iter().filter_map(|t| t.parse::<u64>().ok()).sum())
}

/// `getconf CLK_TCK` (the unit of `/proc`'s CPU times), 100 when it cannot be asked.
fn clock_ticks_per_second() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        let out = Command::new("getconf").arg("CLK_TCK").output().ok();
        out.and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok()).unwrap_or(100.0)
    })
}

/// An aligned table of any width (the shared [`Table`] has fixed columns).
fn render(header: &[&str], rows: &[Vec<String>]) -> String {
    let header: Vec<String> = header.iter().map(|h| h.to_string()).collect();
    let all: Vec<&Vec<String>> = std::iter::once(&header).chain(rows).collect();
    let widths: Vec<usize> = (0..header.len()).map(|c| all.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for (i, r) in all.iter().enumerate() {
        let cells: Vec<String> = r.iter().zip(&widths).map(|(cell, w)| format!("{cell}{}", " ".repeat(w - cell.chars().count()))).collect();
        out.push_str(&format!("| {} |\n", cells.join(" | ")));
        if i == 0 {
            let rules: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
            out.push_str(&format!("|-{}-|\n", rules.join("-|-")));
        }
    }
    out
}

// ---------- Cold start ----------

/// Time to first byte of a request woken from zero fibers, and of the same request warm.
fn cold_start() {
    let (_dir, pool) = hello_pool();
    let rt = runtime("cold", 2);
    let policy = policy(0);
    // The scaler never ticks during the run: only activation and this harness resize the pool.
    let scaler = ScalerConfig { tick: Duration::from_secs(3600), ..ScalerConfig::default() };
    let backend = rt.block_on(LocalBackend::start(pool, policy.scaling.clone(), scaler)).expect("local backend");
    let addr = rt.block_on(start_router(policy, Arc::clone(&backend) as Arc<dyn Backend>));

    let (mut cold, mut warm, mut overhead) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..COLD_WARMUP + COLD_ITERATIONS {
        wait_until("the pool is idle", || backend.pool().stats().in_flight == 0);
        rt.block_on(backend.pool().set_desired(0)).expect("scale to zero");
        assert_eq!(backend.pool().stats().live, 0, "the revision is at zero before the cold request");
        let c = ttfb(addr);
        wait_until("the woken fiber is idle", || {
            let s = backend.pool().stats();
            s.in_flight == 0 && s.idle >= 1
        });
        let w = ttfb(addr);
        if i >= COLD_WARMUP {
            cold.push(c);
            warm.push(w);
            overhead.push(c.saturating_sub(w));
        }
    }
    // Baseline in the same run: the same pairs with no spare sandboxes, so each wake builds its VM.
    spare::set_target(0);
    let (built_cold, built_warm) = pool_host_times(&rt, &backend);
    spare::set_target(spare::DEFAULT_TARGET);
    let (cold_host, warm_host) = pool_host_times(&rt, &backend);
    rt.shutdown_background();
    let built_overhead = Samples(built_cold.0.iter().zip(&built_warm.0).map(|(c, w)| c.saturating_sub(*w)).collect());
    let (cold, warm, overhead) = (Samples(cold), Samples(warm), Samples(overhead));
    let host_overhead = Samples(cold_host.0.iter().zip(&warm_host.0).map(|(c, w)| c.saturating_sub(*w)).collect());

    let mut t = Table::default();
    let vs = |d: Duration| format!("{:.1}× warm p50", d.as_secs_f64() / warm.median().as_secs_f64().max(1e-12));
    t.row("cold TTFB, woken from zero (p50)", fmt_duration(cold.median()), "-", vs(cold.median()));
    t.row("cold TTFB, woken from zero (p99)", fmt_duration(cold.percentile(99.0)), "-", vs(cold.percentile(99.0)));
    t.row("warm TTFB, same request (p50)", fmt_duration(warm.median()), "-", "1×".into());
    t.row("warm TTFB, same request (p99)", fmt_duration(warm.percentile(99.0)), "-", vs(warm.percentile(99.0)));
    t.row("cold − warm, per pair (p50): host cold-start overhead", fmt_duration(overhead.median()), "-", "-".into());
    t.row("cold − warm, per pair (p99)", fmt_duration(overhead.percentile(99.0)), "≤ 2 ms (SPECIFICATION.md)", "-".into());
    t.row("pool host time, cold call (p50)", fmt_duration(cold_host.median()), "-", "-".into());
    t.row("pool host time, cold call (p99)", fmt_duration(cold_host.percentile(99.0)), "-", "-".into());
    t.row("pool host time, warm call (p50)", fmt_duration(warm_host.median()), "-", "-".into());
    t.row(
        "pool host time, cold − warm per pair (p50)",
        fmt_duration(host_overhead.median()),
        "-",
        format!("{:.2}× no spares", host_overhead.median().as_secs_f64() / built_overhead.median().as_secs_f64().max(1e-12)),
    );
    let vs_built = |with: Duration, without: Duration| format!("{:.2}× no spares", with.as_secs_f64() / without.as_secs_f64().max(1e-12));
    t.row(
        "pool host time, cold − warm per pair (p99)",
        fmt_duration(host_overhead.percentile(99.0)),
        "≤ 2 ms (SPECIFICATION.md)",
        vs_built(host_overhead.percentile(99.0), built_overhead.percentile(99.0)),
    );
    t.row("… no spare sandboxes: cold call (p50)", fmt_duration(built_cold.median()), "-", "-".into());
    t.row("… no spare sandboxes: cold − warm per pair (p50)", fmt_duration(built_overhead.median()), "-", "-".into());
    t.row("… no spare sandboxes: cold − warm per pair (p99)", fmt_duration(built_overhead.percentile(99.0)), "-", "-".into());
    println!("\nCold start through fiber-router + LocalBackend (hello example, initial-scale 0)\n");
    print!("{}", t.render());
    println!(
        "\n{COLD_ITERATIONS} pairs after {COLD_WARMUP} unmeasured: the pool is forced to zero, one request is sent (cold), \
         then the same request again (warm).\nTTFB runs from writing the request on an open connection to its first \
         response byte. The guest call is emulated on these machines\nand present in both, so cold − warm is the host-side \
         wake-up (fiber from snapshot, activation) on the request's path.\nThe emulated guest call varies by milliseconds \
         between calls, so the TTFB difference is noisy; the \"pool host time\" rows call\nthe same pool directly \
         (FiberPool::invoke_timed: no router, no activation task), cold then warm, with the guest's own time taken out, \
         {HOST_PAIRS} pairs;\nthe cold call takes one of the process's spare sandboxes (lampyr_fiber::runtime::spare) and restores it \
         to the template; the \"no spare sandboxes\" rows, the baseline, run the same pairs first with spares off (each wake builds its VM)."
    );
}

/// A pool of the hello example's fibers (at most 4), and the directory holding its artifact.
fn hello_pool() -> (tempfile::TempDir, FiberPool) {
    lampyr_testenv::require_kvm();
    let elf = lampyr_testenv::example_elf("hello");
    let dir = tempfile::tempdir().expect("tempdir");
    let layout = dir.path().join("hello");
    let built = build_artifact(&elf, &layout, &BuildOptions::default()).expect("build artifact");
    let artifact = verify_layout(&layout, Some(&built.digest)).expect("verify");
    let template = Template::load(&artifact, &Env::default()).expect("load");
    let pool = FiberPool::new(
        template,
        PoolConfig { revision: "bench-00001".into(), max_fibers: 4, queue_capacity: 16, capacity: None },
        RuntimeMetrics::default(),
    );
    (dir, pool)
}

/// Warm requests on the local path (router → fibers in its process, as `ly run`) against
/// the cluster path (router → FiberdBackend → a second router with the fibers, as fiberd
/// serves them, over loopback), interleaved so both see the same noise.
fn cluster_path() {
    let rt = runtime("paths", 2);
    let scaler = ScalerConfig { tick: Duration::from_secs(3600), ..ScalerConfig::default() };
    let start = |pool: FiberPool| rt.block_on(LocalBackend::start(pool, policy(1).scaling, scaler.clone())).expect("local backend");
    let (_local_dir, local_pool) = hello_pool();
    let local = rt.block_on(start_router(policy(1), start(local_pool) as Arc<dyn Backend>));
    let (_fiberd_dir, fiberd_pool) = hello_pool();
    let fiberd = rt.block_on(start_router(policy(1), start(fiberd_pool) as Arc<dyn Backend>));
    let forward = FiberdBackend::new("default", "bench-00001", FiberdConfig::default(), &RouterMetrics::default());
    forward.set_instances(&[Instance { name: "fiberd".into(), address: fiberd, warm_fibers: 1, max_fibers: 0 }], false);
    let cluster = rt.block_on(start_router(policy(1), forward as Arc<dyn Backend>));
    let (mut on_local, mut on_cluster) = (Vec::new(), Vec::new());
    for i in 0..COLD_WARMUP + PATH_REQUESTS {
        let (l, c) = (ttfb(local), ttfb(cluster));
        if i >= COLD_WARMUP {
            on_local.push(l);
            on_cluster.push(c);
        }
    }
    rt.shutdown_background();
    let (on_local, on_cluster) = (Samples(on_local), Samples(on_cluster));
    let mut t = Table::default();
    let vs = |c: Duration, l: Duration| format!("{:.2}× local", c.as_secs_f64() / l.as_secs_f64().max(1e-12));
    t.row("local path TTFB (p50)", fmt_duration(on_local.median()), "-", "1×".into());
    t.row("local path TTFB (p99)", fmt_duration(on_local.percentile(99.0)), "-", "1×".into());
    t.row("cluster path TTFB (p50)", fmt_duration(on_cluster.median()), "-", vs(on_cluster.median(), on_local.median()));
    t.row(
        "cluster path TTFB (p99)",
        fmt_duration(on_cluster.percentile(99.0)),
        "-",
        vs(on_cluster.percentile(99.0), on_local.percentile(99.0)),
    );
    let hop = on_cluster.median().saturating_sub(on_local.median());
    t.row("the router → fiberd hop (p50 difference)", fmt_duration(hop), "-", "-".into());
    println!("\nThe cluster path against the local path (hello example, one warm fiber each)\n");
    print!("{}", t.render());
    println!(
        "\n{PATH_REQUESTS} requests on each path after {COLD_WARMUP} unmeasured, alternating, each on a new connection \
         (TTFB as in the cold-start table).\nLocal: fiber-router with a LocalBackend. Cluster: fiber-router with a FiberdBackend \
         forwarding over a pooled loopback connection to a second router\nwith a LocalBackend, the code fiberd serves with \
         (its Home watching aside). Both include the emulated guest call."
    );
}

/// Host-side time (the call's wall time minus the guest's) of a call into the pool at zero, then warm.
fn pool_host_times(rt: &Runtime, backend: &LocalBackend) -> (Samples, Samples) {
    let pool = backend.pool();
    let call = || {
        let req = Request { method: "GET".into(), uri: "/".into(), ..Request::default() };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        rt.block_on(pool.invoke_timed(req, deadline)).expect("call").1.host
    };
    let (mut cold, mut warm) = (Vec::new(), Vec::new());
    for i in 0..COLD_WARMUP + HOST_PAIRS {
        wait_until("the pool is idle", || pool.stats().in_flight == 0);
        rt.block_on(pool.set_desired(0)).expect("scale to zero");
        assert_eq!(pool.stats().live, 0, "the pool is at zero before the cold call");
        let c = call();
        wait_until("the fiber is idle", || {
            let s = pool.stats();
            s.in_flight == 0 && s.idle >= 1
        });
        let w = call();
        if i >= COLD_WARMUP {
            cold.push(c);
            warm.push(w);
        }
    }
    (Samples(cold), Samples(warm))
}

fn wait_until(what: &str, mut ready: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(10);
    while !ready() {
        assert!(Instant::now() < until, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Connects, then times from writing one `GET /` to reading the first response byte;
/// reads the rest and checks for `200 Hello World!`.
fn ttfb(addr: SocketAddr) -> Duration {
    let mut s = TcpStream::connect(addr).expect("connect to the router");
    s.set_nodelay(true).expect("nodelay");
    let req = format!("GET / HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n");
    let started = Instant::now();
    s.write_all(req.as_bytes()).expect("send request");
    let mut first = [0u8; 1];
    s.read_exact(&mut first).expect("first response byte");
    let elapsed = started.elapsed();
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).expect("response");
    let text = String::from_utf8_lossy(&rest);
    assert!(first[0] == b'H' && text.starts_with("TTP/1.1 200") && text.ends_with("Hello World!\n"), "unexpected answer: {text}");
    elapsed
}
