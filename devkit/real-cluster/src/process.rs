//! The components as child processes: each in its own process group (so a
//! Ctrl-C at a terminal reaches only us, and a stop reaches whatever a
//! component forked), its stdout and stderr in one log file, stopped by PID.
//!
//! A child must not outlive us even when we are killed (a test binary
//! SIGKILLed on a timeout, say): where util-linux's `setpriv` exists, each
//! component runs under `setpriv --pdeathsig KILL`, which execs it (same PID)
//! with the parent-death signal set. Linux sends that signal when the
//! *thread* that forked the child ends, so every child is forked by one
//! thread of ours that lives as long as the process (see [`spawner`]).

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc;
use std::time::Duration;

/// How often a stop looks whether the process has exited.
const EXIT_POLL: Duration = Duration::from_millis(20);

/// One running (or exited) component.
#[derive(Debug)]
pub(crate) struct Component {
    pub name: &'static str,
    child: Child,
    status: Option<ExitStatus>,
}

/// How a stop went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stopped {
    /// It had exited before the stop.
    Already(ExitStatus),
    /// It exited within the grace after SIGTERM.
    Terminated(ExitStatus),
    /// It needed SIGKILL.
    Killed,
}

impl Component {
    /// Starts `program` with `args`, output appended to `log`.
    pub fn spawn(
        name: &'static str,
        program: &Path,
        args: &[String],
        log: &Path,
    ) -> io::Result<Component> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)?;
        let mut cmd = match setpriv() {
            Some(setpriv) => {
                let mut cmd = Command::new(setpriv);
                cmd.args(["--pdeathsig", "KILL", "--"]).arg(program);
                cmd
            }
            None => Command::new(program),
        };
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .process_group(0);
        let child = spawner::spawn(cmd)?;
        Ok(Component {
            name,
            child,
            status: None,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The exit status, once it has exited (reaping it).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().ok().flatten();
        }
        self.status
    }

    fn signal_group(&self, signal: Signal) {
        // ESRCH: gone already.
        let _ = self.signal(signal);
    }

    /// Sends `signal` to its process group (the group is the child's PID:
    /// `process_group(0)`).
    pub fn signal(&self, signal: Signal) -> io::Result<()> {
        killpg(Pid::from_raw(self.pid() as i32), signal).map_err(io::Error::from)
    }

    /// SIGTERM to its process group, then SIGCONT (a stopped process acts on
    /// its SIGTERM only once continued, as systemd knows); SIGKILL after
    /// `grace`. Waits for the exit.
    pub async fn stop(&mut self, grace: Duration) -> Stopped {
        if let Some(status) = self.exited() {
            // Whatever it forked still goes.
            self.signal_group(Signal::SIGKILL);
            return Stopped::Already(status);
        }
        self.signal_group(Signal::SIGTERM);
        self.signal_group(Signal::SIGCONT);
        let deadline = tokio::time::Instant::now() + grace;
        while tokio::time::Instant::now() < deadline {
            if let Some(status) = self.exited() {
                self.signal_group(Signal::SIGKILL);
                return Stopped::Terminated(status);
            }
            tokio::time::sleep(EXIT_POLL).await;
        }
        self.kill_now();
        Stopped::Killed
    }

    /// SIGKILL to its process group, and reaps it (blocking briefly: a killed
    /// process exits at once). For Drop and for failed starts.
    pub fn kill_now(&mut self) {
        self.signal_group(Signal::SIGKILL);
        if self.status.is_none() {
            self.status = self.child.wait().ok();
        }
    }
}

impl Drop for Component {
    fn drop(&mut self) {
        if self.status.is_none() {
            self.kill_now();
        }
    }
}

/// `Ok` when every thread of process `pid` is stopped by a signal (state
/// `T` in `/proc/<pid>/task/*/stat`), else the states seen.
pub(crate) fn all_threads_stopped(pid: u32) -> Result<(), String> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map_err(|e| format!("/proc/{pid}/task: {e}"))?;
    let mut running = Vec::new();
    let mut count = 0;
    for task in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue; // a thread that just ended
        };
        count += 1;
        let state = stat.rsplit(')').next().unwrap_or("").trim_start();
        let state = state.chars().next().unwrap_or('?');
        if state != 'T' {
            running.push(format!("{}: {state}", task.file_name().to_string_lossy()));
        }
    }
    if count > 0 && running.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} of {count} threads not stopped ({})",
            running.len(),
            running.join(", ")
        ))
    }
}

/// The last `n` lines of a file (at most its last 256 KiB are read); a note
/// when it cannot be read.
pub(crate) fn tail(path: &Path, n: usize) -> String {
    const MAX: u64 = 256 * 1024;
    let read = || -> io::Result<String> {
        let mut file = std::fs::File::open(path)?;
        let len = file.metadata()?.len();
        file.seek(SeekFrom::Start(len.saturating_sub(MAX)))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    };
    match read() {
        Ok(text) => {
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(n)..].join("\n")
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

/// `setpriv` when it is installed and knows `--pdeathsig` (util-linux 2.33+).
fn setpriv() -> Option<&'static Path> {
    static FOUND: OnceLock<Option<PathBuf>> = OnceLock::new();
    FOUND
        .get_or_init(|| {
            let path = ["/usr/bin/setpriv", "/bin/setpriv", "/usr/local/bin/setpriv"]
                .into_iter()
                .map(PathBuf::from)
                .find(|p| p.is_file())?;
            let help = Command::new(&path).arg("--help").output().ok()?;
            String::from_utf8_lossy(&help.stdout)
                .contains("--pdeathsig")
                .then_some(path)
        })
        .as_deref()
}

/// Whether children die with this process (the parent-death signal is set).
pub fn children_die_with_us() -> bool {
    setpriv().is_some()
}

/// The one thread that forks every component: it lives until the process
/// exits, so the parent-death signal fires exactly then.
mod spawner {
    use super::*;

    type Reply = mpsc::Sender<io::Result<Child>>;

    pub fn spawn(cmd: Command) -> io::Result<Child> {
        static REQUESTS: OnceLock<mpsc::Sender<(Command, Reply)>> = OnceLock::new();
        let requests = REQUESTS.get_or_init(|| {
            let (tx, rx) = mpsc::channel::<(Command, Reply)>();
            std::thread::Builder::new()
                .name("control-plane-spawner".into())
                .spawn(move || {
                    // The sender lives in a static, so this loop ends only
                    // with the process.
                    for (mut cmd, reply) in rx {
                        let _ = reply.send(cmd.spawn());
                    }
                })
                .map(|_| ())
                .unwrap_or_else(|e| eprintln!("control plane: no spawner thread: {e}"));
            tx
        });
        let (reply, answer) = mpsc::channel();
        let gone = || io::Error::other("the control plane's spawner thread is gone");
        requests.send((cmd, reply)).map_err(|_| gone())?;
        answer.recv().map_err(|_| gone())?
    }
}
