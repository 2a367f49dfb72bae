//! One control plane shared by every test of a test binary, each test
//! isolated in its own namespace.
//!
//! Under cargo-nextest every test is a process of its own, so a static
//! cannot share it. Instead the first test process starts a small owner
//! process (`tcab-control-plane --serve-shared DIR`, this crate's binary),
//! which runs the control plane and writes `access.json` in a directory named
//! after the test binary, the nextest run and the settings. Every test
//! process holds a shared lock on `users` while it lives; the owner stops the
//! control plane once no process has held it for the idle grace
//! (`TCAB_CONTROL_PLANE_IDLE_EXIT`, default 15 s), or when a component dies.
//! `lock` serialises attaching against that decision. The owner's components
//! die with it (parent-death signal); the owner is in its own process group,
//! so a test killed with its group does not take it along.
//!
//! Without the owner binary (not built) it falls back to one control plane
//! per process, kept in a static and killed with the process.

use crate::{Access, ControlPlane, Settings, StartError};
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::OnceCell;
use tokio::time::Instant;

/// The environment variable naming the owner binary (`tcab-control-plane`);
/// by default it is looked for beside the test binary's directory, where
/// `cargo build` puts it.
pub const DAEMON_ENV: &str = "TCAB_CONTROL_PLANE_DAEMON";
/// The environment variable with the owner's idle grace, in seconds.
pub const IDLE_EXIT_ENV: &str = "TCAB_CONTROL_PLANE_IDLE_EXIT";
const DEFAULT_IDLE_EXIT: Duration = Duration::from_secs(15);

/// The shared control plane could not be had.
#[derive(Debug, thiserror::Error)]
pub enum SharedError {
    #[error(transparent)]
    Start(#[from] StartError),
    #[error("the shared control plane's owner process failed; its log ({}):\n{log}", path.display())]
    Owner { path: PathBuf, log: String },
    #[error("timed out after {0:?} waiting for the shared control plane")]
    Timeout(Duration),
    #[error("{what} ({})", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// What the owner writes once the control plane is ready.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Published {
    owner_pid: u32,
    access: Access,
}

/// A handle on a shared control plane: while any handle (in any process)
/// lives, the owner keeps it running. Derefs to its [`Access`].
pub struct SharedControlPlane {
    access: Access,
    /// Our shared lock on `users` (or, in-process, the control plane itself).
    _keep: Keep,
}

impl std::fmt::Debug for SharedControlPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedControlPlane")
            .field("api_url", &self.access.api_url)
            .finish()
    }
}

impl std::ops::Deref for SharedControlPlane {
    type Target = Access;
    fn deref(&self) -> &Access {
        &self.access
    }
}

impl SharedControlPlane {
    /// Attaches to the control plane for these settings in this test binary
    /// and nextest run, starting its owner when there is none. [`shared_with`]
    /// keeps one such handle per process; call this directly for a second
    /// shared instance with other settings (e.g. `watch_cache: false` for the
    /// probes that need it), kept in a static of your own.
    pub async fn attach(settings: Settings) -> Result<SharedControlPlane, SharedError> {
        attach(settings).await
    }

    /// How to reach it (also through `Deref`).
    pub fn access(&self) -> &Access {
        &self.access
    }
}

#[allow(dead_code)] // Held for their Drop.
enum Keep {
    Users(File),
    InProcess(Box<ControlPlane>),
}

static SHARED: OnceCell<Result<SharedControlPlane, Arc<SharedError>>> = OnceCell::const_new();

/// The test binary's control plane with default settings; see [`shared_with`].
pub async fn shared() -> Result<&'static Access, Arc<SharedError>> {
    shared_with(Settings::default).await
}

/// The control plane shared by this test binary's tests (in this nextest
/// run), started on first use with `settings()`. Give every test of a
/// binary the same settings: they name the instance, so different ones get
/// different control planes. A failed start is not tried again in this
/// process. The settings' `work_dir` is ignored.
pub async fn shared_with(
    settings: impl FnOnce() -> Settings,
) -> Result<&'static Access, Arc<SharedError>> {
    let held = SHARED
        .get_or_init(|| async { attach(settings()).await.map_err(Arc::new) })
        .await;
    match held {
        Ok(held) => Ok(held.access()),
        Err(e) => Err(e.clone()),
    }
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> SharedError {
    let path = path.to_owned();
    move |source| SharedError::Io { what, path, source }
}

/// The owner binary: `$TCAB_CONTROL_PLANE_DAEMON`, else `tcab-control-plane`
/// in the directory above the test binary's (`target/<profile>/deps/..`).
fn owner_binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(DAEMON_ENV).filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    [
        dir.join("tcab-control-plane"),
        dir.parent()?.join("tcab-control-plane"),
    ]
    .into_iter()
    .find(|p| p.is_file())
}

/// The directory naming this instance: the test binary, the nextest run (or
/// this process) and the settings.
fn instance_dir(settings: &Settings) -> PathBuf {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    std::env::current_exe().ok().hash(&mut h);
    match std::env::var("NEXTEST_RUN_ID") {
        Ok(run) => run.hash(&mut h),
        Err(_) => std::process::id().hash(&mut h),
    }
    serde_json::to_string(settings)
        .unwrap_or_default()
        .hash(&mut h);
    shared_root().join(format!("{:016x}", h.finish()))
}

fn shared_root() -> PathBuf {
    std::env::temp_dir().join("tcab-control-plane-shared")
}

async fn attach(mut settings: Settings) -> Result<SharedControlPlane, SharedError> {
    settings.work_dir = None;
    let Some(owner) = owner_binary() else {
        eprintln!(
            "control plane: no tcab-control-plane binary beside the test binary (cargo build -p tcab-real-cluster, or set {DAEMON_ENV}); one control plane for this process"
        );
        return in_process(settings).await;
    };
    let dir = instance_dir(&settings);
    sweep_instances(&shared_root());
    std::fs::create_dir_all(&dir).map_err(io("creating the shared dir", &dir))?;
    let limit = settings.ready_timeout + 4 * settings.stop_grace;
    let lock_path = dir.join("lock");
    let lock = File::create(&lock_path).map_err(io("opening the lock", &lock_path))?;
    let deadline = Instant::now() + limit;
    // Exclusive while we look and, if need be, start the owner.
    while !try_lock(&lock, false).map_err(io("locking", &lock_path))? {
        if Instant::now() >= deadline {
            return Err(SharedError::Timeout(limit));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let result = attach_locked(&dir, &owner, &settings, deadline, limit).await;
    let _ = lock.unlock();
    result
}

/// `try_lock` (exclusive) or `try_lock_shared`: `Ok(false)` when held elsewhere.
fn try_lock(file: &File, shared: bool) -> std::io::Result<bool> {
    let r = if shared {
        file.try_lock_shared()
    } else {
        file.try_lock()
    };
    match r {
        Ok(()) => Ok(true),
        Err(std::fs::TryLockError::WouldBlock) => Ok(false),
        Err(std::fs::TryLockError::Error(e)) => Err(e),
    }
}

fn alive(pid: u32) -> bool {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), None).is_ok()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
}

async fn attach_locked(
    dir: &Path,
    owner: &Path,
    settings: &Settings,
    deadline: Instant,
    limit: Duration,
) -> Result<SharedControlPlane, SharedError> {
    let published_path = dir.join("access.json");
    let users_path = dir.join("users");
    let read_published = || -> Option<Published> {
        serde_json::from_slice(&std::fs::read(&published_path).ok()?).ok()
    };
    let log_path = dir.join("owner.log");
    if dir.join("failed").exists() {
        // An owner of this run failed to start it: the same answer, at once.
        return Err(SharedError::Owner {
            log: std::fs::read_to_string(&log_path).unwrap_or_default(),
            path: log_path,
        });
    }
    let published = match read_published().filter(|p| alive(p.owner_pid)) {
        Some(p) => p,
        None => {
            // None there, or its owner died: start one afresh.
            let _ = std::fs::remove_file(&published_path);
            let _ = std::fs::remove_dir_all(dir.join("work"));
            let settings_path = dir.join("settings.json");
            let json = serde_json::to_vec_pretty(settings).unwrap_or_default();
            std::fs::write(&settings_path, json).map_err(io("writing", &settings_path))?;
            let log = File::create(&log_path).map_err(io("creating", &log_path))?;
            let log2 = log.try_clone().map_err(io("opening", &log_path))?;
            let mut child = {
                use std::os::unix::process::CommandExt;
                std::process::Command::new(owner)
                    .arg("--serve-shared")
                    .arg(dir)
                    .stdin(std::process::Stdio::null())
                    .stdout(log)
                    .stderr(log2)
                    .process_group(0)
                    .spawn()
                    .map_err(io("starting the owner", owner))?
            };
            loop {
                if let Some(p) = read_published() {
                    // Reaped by whoever outlives it; we do not wait for it.
                    drop(child);
                    break p;
                }
                if child.try_wait().ok().flatten().is_some() {
                    return Err(SharedError::Owner {
                        log: std::fs::read_to_string(&log_path).unwrap_or_default(),
                        path: log_path,
                    });
                }
                if Instant::now() >= deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(SharedError::Timeout(limit));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    let users = File::create(&users_path).map_err(io("opening", &users_path))?;
    // Shared locks never wait on each other; the owner takes `users`
    // exclusively only while holding `lock`, which we hold.
    if !try_lock(&users, true).map_err(io("locking", &users_path))? {
        users.lock_shared().map_err(io("locking", &users_path))?;
    }
    Ok(SharedControlPlane {
        access: published.access,
        _keep: Keep::Users(users),
    })
}

async fn in_process(settings: Settings) -> Result<SharedControlPlane, SharedError> {
    let root = shared_root().join("in-process");
    sweep(&root);
    let settings = Settings {
        work_dir: Some(root.join(std::process::id().to_string())),
        ..settings
    };
    let cp = ControlPlane::start(settings).await?;
    Ok(SharedControlPlane {
        access: cp.access().clone(),
        _keep: Keep::InProcess(Box::new(cp)),
    })
}

/// Removes the instance dirs of owners long gone (nothing published, nobody
/// holding `lock`, untouched for an hour): a few small files each.
fn sweep_instances(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    let hour = Duration::from_secs(3600);
    for entry in entries.flatten() {
        let dir = entry.path();
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| t.elapsed().is_ok_and(|age| age > hour));
        if !old || dir.join("access.json").exists() || entry.file_name() == "in-process" {
            continue;
        }
        let free = File::open(dir.join("lock")).is_ok_and(|f| try_lock(&f, false).unwrap_or(false));
        if free {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}

/// Removes the work dirs under `root` whose process is gone.
fn sweep(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let pid = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok());
        if pid.is_some_and(|pid| !alive(pid)) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// The owner process (`tcab-control-plane --serve-shared DIR`): starts the
/// control plane with `DIR/settings.json`, publishes `DIR/access.json`, and
/// stops once no test process has held `DIR/users` for the idle grace.
/// Returns the process's exit code.
pub async fn serve_shared(dir: &Path) -> i32 {
    match serve(dir).await {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("{}", crate::error_chain(&*e));
            1
        }
    }
}

async fn serve(dir: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let idle_exit = std::env::var(IDLE_EXIT_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .map(Duration::from_secs_f64)
        .unwrap_or(DEFAULT_IDLE_EXIT);
    let settings: Settings = serde_json::from_slice(&std::fs::read(dir.join("settings.json"))?)?;
    let settings = Settings {
        work_dir: Some(dir.join("work")),
        ..settings
    };
    let lock = File::create(dir.join("lock"))?;
    let users = File::create(dir.join("users"))?;
    let mut cp = match ControlPlane::start(settings).await {
        Ok(cp) => cp,
        Err(e) => {
            // Later test processes of this run get this answer without a start.
            let _ = std::fs::write(dir.join("failed"), crate::error_chain(&e));
            // The logs stay; etcd's data (64 MB of WAL) tells nothing.
            let _ = std::fs::remove_dir_all(dir.join("work/etcd"));
            return Err(e.into());
        }
    };
    eprintln!(
        "control plane up at {} (pid {}); stops {idle_exit:?} after its last user",
        cp.api_url,
        std::process::id()
    );
    // Restarts of the API server and pauses of the controller-manager are
    // asked for here (Access::restart_apiserver, Access::pause_controller_manager).
    let control_path = dir.join("control.sock");
    let _ = std::fs::remove_file(&control_path);
    let control = tokio::net::UnixListener::bind(&control_path)?;
    let mut access = cp.access().clone();
    access.control_socket = Some(control_path);
    let published = Published {
        owner_pid: std::process::id(),
        access,
    };
    let tmp = dir.join("access.json.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(&published)?)?;
    std::fs::rename(&tmp, dir.join("access.json"))?;

    let mut idle_since: Option<Instant> = None;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let why = loop {
        tokio::select! {
            _ = term.recv() => break "SIGTERM".to_owned(),
            conn = control.accept() => {
                if let Ok((stream, _)) = conn {
                    serve_control(&mut cp, stream).await;
                }
            }
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
        if let Some((name, status)) = cp.exited() {
            let _ = std::fs::remove_file(dir.join("access.json"));
            break format!("{name} exited ({status})");
        }
        if !try_lock(&lock, false)? {
            continue; // someone is attaching
        }
        let unused = try_lock(&users, false)?;
        if unused {
            let _ = users.unlock();
            let since = *idle_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= idle_exit {
                // Still holding `lock`: nobody attaches while we go.
                let _ = std::fs::remove_file(dir.join("access.json"));
                break format!("no user for {idle_exit:?}");
            }
        } else {
            idle_since = None;
        }
        let _ = lock.unlock();
    };
    eprintln!("stopping: {why}");
    let report = cp.stop().await;
    for (name, how) in &report.0 {
        eprintln!("  {name}: {how}");
    }
    let _ = std::fs::remove_dir_all(dir.join("work"));
    let _ = lock.unlock();
    Ok(())
}

/// The owner's control socket's requests, each one line with its word:
/// restart the API server ([`crate::Access::restart_apiserver`]), pause and
/// resume the controller-manager ([`crate::Access::pause_controller_manager`]).
pub(crate) const RESTART_APISERVER: &str = "restart-apiserver";
pub(crate) const PAUSE_CONTROLLER_MANAGER: &str = "pause-controller-manager";
pub(crate) const RESUME_CONTROLLER_MANAGER: &str = "resume-controller-manager";

/// Answers one connection to the control socket: reads a request line,
/// carries it out, answers `ok <milliseconds it took>` or `error <why>`.
async fn serve_control(cp: &mut ControlPlane, stream: tokio::net::UnixStream) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    let read = tokio::time::timeout(Duration::from_secs(5), reader.read_line(&mut line)).await;
    let outcome: Result<Duration, String> = match (read, line.trim()) {
        (Ok(Ok(_)), RESTART_APISERVER) => {
            eprintln!("restarting the API server, as asked");
            cp.restart_apiserver()
                .await
                .map_err(|e| crate::error_chain(&e))
        }
        (Ok(Ok(_)), PAUSE_CONTROLLER_MANAGER) => {
            eprintln!("pausing kube-controller-manager, as asked");
            cp.pause_controller_manager()
                .await
                .map_err(|e| crate::error_chain(&e))
        }
        (Ok(Ok(_)), RESUME_CONTROLLER_MANAGER) => {
            eprintln!("resuming kube-controller-manager, as asked");
            cp.resume_controller_manager()
                .await
                .map_err(|e| crate::error_chain(&e))
        }
        (Ok(Ok(_)), other) => Err(format!("unknown request {other:?}")),
        (Ok(Err(e)), _) => Err(format!("reading the request: {e}")),
        (Err(_), _) => Err("no request within 5 s".to_owned()),
    };
    let answer = match outcome {
        Ok(took) => {
            eprintln!("done in {took:?}");
            format!("ok {}\n", took.as_millis())
        }
        Err(why) => {
            let why = why.replace('\n', " | ");
            eprintln!("failed: {why}");
            format!("error {why}\n")
        }
    };
    let _ = reader.get_mut().write_all(answer.as_bytes()).await;
}

/// Sends one request line to the owner's control socket at `path` and
/// reads its answer: how long the request took, or why it failed.
pub(crate) async fn ask_owner(
    path: &Path,
    request: &str,
) -> std::io::Result<Result<Duration, String>> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let mut stream = tokio::net::UnixStream::connect(path).await?;
    stream.write_all(format!("{request}\n").as_bytes()).await?;
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).await?;
    Ok(parse_answer(&line))
}

/// Reads the owner's answer line.
pub(crate) fn parse_answer(line: &str) -> Result<Duration, String> {
    let line = line.trim();
    if let Some(ms) = line.strip_prefix("ok ")
        && let Ok(ms) = ms.parse::<u64>()
    {
        return Ok(Duration::from_millis(ms));
    }
    let why = line.strip_prefix("error ").unwrap_or(line);
    Err(if why.is_empty() {
        "the owner closed the connection without an answer (it may have died)".to_owned()
    } else {
        why.to_owned()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_owners_answers_are_read() {
        assert_eq!(parse_answer("ok 3250\n"), Ok(Duration::from_millis(3250)));
        assert_eq!(
            parse_answer("error kube-apiserver exited (1)\n"),
            Err("kube-apiserver exited (1)".to_owned())
        );
        let e = parse_answer("").unwrap_err();
        assert!(e.contains("without an answer"), "{e}");
    }
}
