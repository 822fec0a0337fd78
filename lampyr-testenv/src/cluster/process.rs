//! Child processes of the cluster environment: started from one long-lived
//! thread so the kernel kills them when the test process dies, logged to files.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A spawn request for the spawner thread, answered with the child or the error.
type SpawnRequest = (Command, mpsc::Sender<std::io::Result<Child>>);

/// A running component (`etcd`, `kube-apiserver`, …) whose output goes to a log file.
pub struct Process {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl Process {
    /// Starts `command` as component `name`, its stdout and stderr appended to `log`.
    ///
    /// The child gets `PR_SET_PDEATHSIG(SIGKILL)`: when the test process exits or
    /// crashes, however it ends, the kernel kills the child, so no component
    /// outlives the tests. The death signal fires when the *thread* that forked
    /// ends, so every child is forked by one spawner thread that never ends.
    pub fn spawn(name: &'static str, mut command: Command, log: &Path) -> Result<Self, String> {
        let file = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .map_err(|e| format!("creating {name}'s log {}: {e}", log.display()))?;
        let err = file.try_clone().map_err(|e| format!("cloning {name}'s log handle: {e}"))?;
        command.stdin(Stdio::null()).stdout(file).stderr(err);
        set_parent_death_signal(&mut command);
        let (reply, answer) = mpsc::channel();
        spawner().send((command, reply)).map_err(|_| "the process spawner thread has stopped".to_string())?;
        let child = answer
            .recv()
            .map_err(|_| "the process spawner thread has stopped".to_string())?
            .map_err(|e| format!("starting {name}: {e}"))?;
        Ok(Process { name, child, log: log.to_path_buf() })
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `Err` with the exit status and the log's tail when the process has exited.
    pub fn check_running(&mut self) -> Result<(), String> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => {
                Err(format!("{} exited ({status}); the end of its log {}:\n{}", self.name, self.log.display(), log_tail(&self.log, 40)))
            }
            Err(e) => Err(format!("checking on {}: {e}", self.name)),
        }
    }

    /// The exit status once the process has exited (it is reaped then); `None` while it runs.
    pub fn exit_status(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// The log file its output goes to.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// Stops the process as a kubelet stops a container: SIGTERM, then SIGKILL when it
    /// has not exited within `grace`; reaps it.
    pub fn terminate(&mut self, grace: Duration) {
        if let Ok(None) = self.child.try_wait() {
            let pid = libc::pid_t::try_from(self.child.id()).unwrap_or(0);
            // SAFETY: kill(2) on our own unreaped child's pid (it cannot have been reused:
            // the child is reaped only by this value), with no memory passed.
            #[allow(unsafe_code)]
            let sent = unsafe { libc::kill(pid, libc::SIGTERM) } == 0;
            let deadline = Instant::now() + grace;
            while sent && Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        self.kill();
    }

    /// Kills the process (the state is throwaway: no graceful shutdown) and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The last `lines` lines of a log file (or why it cannot be read).
pub fn log_tail(path: &Path, lines: usize) -> String {
    match fs::read_to_string(path) {
        Ok(text) => {
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

/// The one thread that forks every component; it lives as long as the process.
fn spawner() -> &'static mpsc::SyncSender<SpawnRequest> {
    static SPAWNER: OnceLock<mpsc::SyncSender<SpawnRequest>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (send, receive) = mpsc::sync_channel::<SpawnRequest>(0);
        std::thread::Builder::new()
            .name("lampyr-testenv-spawner".into())
            .spawn(move || {
                for (mut command, reply) in receive {
                    let _ = reply.send(command.spawn());
                }
            })
            .expect("start the process spawner thread");
        send
    })
}

/// Makes the kernel send SIGKILL to the child when its parent thread ends.
#[allow(unsafe_code)]
fn set_parent_death_signal(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the forked child before exec; it only calls
    // prctl(2) and getppid(2), both async-signal-safe, and touches no memory
    // shared with the parent.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died between fork and prctl: then nobody will signal us.
            if libc::getppid() == 1 {
                return Err(std::io::Error::other("the test process exited during start-up"));
            }
            Ok(())
        });
    }
}
