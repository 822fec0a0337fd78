//! The node's cgroup, `/<name>` in every mounted hierarchy: containerd, its shims
//! and (as the kubelet's cgroup root) every container live under it, so stopping
//! the node kills exactly what it started, even what outlived a killed test.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Where this machine mounts its cgroup hierarchies.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";
/// Longest the processes of a cgroup may take to die after SIGKILL.
const KILL_TIMEOUT: Duration = Duration::from_secs(20);

/// `/<name>` in every cgroup hierarchy. Its processes are killed and the cgroups
/// removed by [`NodeCgroup::remove`] (and on drop).
pub struct NodeCgroup {
    name: String,
}

impl NodeCgroup {
    /// Creates `/<name>` in every hierarchy (a cpuset one with its parent's CPUs and memory nodes).
    pub fn create(name: &str) -> Result<NodeCgroup, String> {
        let cgroup = NodeCgroup { name: name.to_string() };
        cgroup.make("")?;
        Ok(cgroup)
    }

    /// The kubelet's `cgroupRoot`.
    pub fn path(&self) -> String {
        format!("/{}", self.name)
    }

    /// Moves process `pid` into `/<name>/<child>` in every hierarchy (its children
    /// started afterwards are born there).
    pub fn adopt(&self, child: &str, pid: u32) -> Result<(), String> {
        self.make(child)?;
        for dir in self.dirs(child) {
            let procs = dir.join("cgroup.procs");
            fs::write(&procs, pid.to_string()).map_err(|e| format!("moving {pid} into {}: {e}", procs.display()))?;
        }
        Ok(())
    }

    fn make(&self, child: &str) -> Result<(), String> {
        for dir in self.dirs(child) {
            fs::create_dir_all(&dir).map_err(|e| format!("creating cgroup {}: {e}", dir.display()))?;
            if dir.starts_with(Path::new(CGROUP_ROOT).join("cpuset")) {
                inherit_cpuset(&dir)?;
            }
        }
        Ok(())
    }

    /// `/<name>/<child>` in each hierarchy.
    fn dirs(&self, child: &str) -> Vec<PathBuf> {
        hierarchies().into_iter().map(|h| h.join(&self.name).join(child)).collect()
    }

    /// Kills every process under `/<name>` (frozen first, so none can fork away) and
    /// removes the cgroups, innermost first.
    pub fn remove(&self) -> Result<(), String> {
        remove(&self.name)
    }
}

impl Drop for NodeCgroup {
    fn drop(&mut self) {
        let _ = self.remove();
    }
}

/// Kills every process of cgroup `/<name>` and removes it from every hierarchy.
pub fn remove(name: &str) -> Result<(), String> {
    let roots: Vec<PathBuf> = hierarchies().into_iter().map(|h| h.join(name)).filter(|d| d.is_dir()).collect();
    let freezer = roots.iter().find(|d| d.starts_with(Path::new(CGROUP_ROOT).join("freezer")));
    if let Some(freezer) = freezer {
        let _ = fs::write(freezer.join("freezer.state"), "FROZEN");
    }
    let deadline = Instant::now() + KILL_TIMEOUT;
    loop {
        let pids: Vec<i32> = roots.iter().flat_map(|r| pids_under(r)).collect();
        for pid in &pids {
            send_kill(*pid);
        }
        if let Some(freezer) = freezer {
            let _ = fs::write(freezer.join("freezer.state"), "THAWED");
        }
        if pids.is_empty() {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("processes {pids:?} of cgroup /{name} did not die within {KILL_TIMEOUT:?}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut failed = Vec::new();
    for root in &roots {
        for dir in subdirectories_innermost_first(root) {
            if let Err(e) = fs::remove_dir(&dir) {
                failed.push(format!("{}: {e}", dir.display()));
            }
        }
    }
    if failed.is_empty() { Ok(()) } else { Err(format!("removing cgroups: {}", failed.join("; "))) }
}

/// The names of the cgroups directly under the root of the first hierarchy that start with `prefix`.
pub fn cgroups_named(prefix: &str) -> Vec<String> {
    let mut names: Vec<String> = hierarchies()
        .iter()
        .flat_map(|h| fs::read_dir(h).into_iter().flatten().flatten())
        .filter(|e| e.path().is_dir())
        .filter_map(|e| e.file_name().to_str().map(String::from))
        .filter(|n| n.starts_with(prefix))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The mount points of every cgroup (v1) and cgroup2 hierarchy, from /proc/self/mountinfo.
fn hierarchies() -> Vec<PathBuf> {
    let text = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let (before, after) = line.split_once(" - ")?;
            let fstype = after.split_whitespace().next()?;
            let mount_point = before.split_whitespace().nth(4)?;
            (fstype == "cgroup" || fstype == "cgroup2").then(|| PathBuf::from(mount_point))
        })
        .filter(|p| p.starts_with(CGROUP_ROOT))
        .collect()
}

/// Gives a new cpuset cgroup its parent's CPUs and memory nodes (v1 starts them empty).
fn inherit_cpuset(dir: &Path) -> Result<(), String> {
    let parent = dir.parent().ok_or_else(|| format!("{} has no parent", dir.display()))?;
    for file in ["cpuset.cpus", "cpuset.mems"] {
        let current = fs::read_to_string(dir.join(file)).unwrap_or_default();
        if current.trim().is_empty() {
            let value = fs::read_to_string(parent.join(file)).map_err(|e| format!("reading {}: {e}", parent.join(file).display()))?;
            fs::write(dir.join(file), value.trim()).map_err(|e| format!("writing {}: {e}", dir.join(file).display()))?;
        }
    }
    Ok(())
}

/// Every pid in `cgroup.procs` of `dir` and its descendants.
fn pids_under(dir: &Path) -> Vec<i32> {
    let mut pids = Vec::new();
    for d in std::iter::once(dir.to_path_buf()).chain(subdirectories_innermost_first(dir)) {
        let text = fs::read_to_string(d.join("cgroup.procs")).unwrap_or_default();
        pids.extend(text.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
    }
    pids.sort_unstable();
    pids.dedup();
    pids
}

/// `dir` and every directory below it, deepest first.
fn subdirectories_innermost_first(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).into_iter().flatten().flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(entry.path());
            }
        }
        found.push(d);
    }
    found.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    found
}

#[allow(unsafe_code)]
fn send_kill(pid: i32) {
    // SAFETY: kill(2) takes plain integers and touches no memory of ours; a pid that
    // has exited meanwhile makes it fail with ESRCH, which is ignored.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
}
