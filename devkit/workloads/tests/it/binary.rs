//! The built `tcab-workload` binary as a child process, with exactly the
//! environment given (and a ServiceAccount and podinfo directory of the
//! test's, empty unless a test fills them).

use crate::support::FakeApi;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;
use tcab_testkit::backend::MockBackend;
use tcab_testkit::wait::within;
use tempfile::TempDir;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

const BIN: &str = env!("CARGO_BIN_EXE_tcab-workload");
/// How long a test waits for anything the binary does.
const LIMIT: Duration = Duration::from_secs(30);
const USAGE: &str = "usage: tcab-workload driver|publisher|plain|pause";

/// The test's own ServiceAccount and podinfo directories.
struct Dirs {
    serviceaccount: TempDir,
    podinfo: TempDir,
}

impl Dirs {
    fn new() -> Dirs {
        Dirs {
            serviceaccount: tempfile::tempdir().unwrap(),
            podinfo: tempfile::tempdir().unwrap(),
        }
    }

    fn env(&self) -> Vec<(String, String)> {
        let path = |d: &TempDir| d.path().to_str().unwrap().to_string();
        vec![
            ("TCAB_SERVICEACCOUNT_DIR".into(), path(&self.serviceaccount)),
            ("TCAB_PODINFO_DIR".into(), path(&self.podinfo)),
        ]
    }
}

/// A running `tcab-workload`, its stdout read line by line.
struct Running {
    child: Child,
    stdout: Lines<BufReader<ChildStdout>>,
    _dirs: Dirs,
}

fn start(args: &[&str], env: &[(&str, &str)], dirs: Dirs) -> Running {
    let mut child = Command::new(BIN)
        .args(args)
        .env_clear()
        .envs(dirs.env())
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("tcab-workload starts");
    let stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    Running {
        child,
        stdout,
        _dirs: dirs,
    }
}

impl Running {
    fn pid(&self) -> Pid {
        Pid::from_raw(self.child.id().expect("still running") as i32)
    }

    /// The next line on stdout (`None` at its end).
    async fn line(&mut self) -> Option<String> {
        within("a line on stdout", LIMIT, self.stdout.next_line())
            .await
            .unwrap()
    }

    /// Reads stdout until a line equal to `want`; returns the lines before it.
    async fn until_line(&mut self, want: &str) -> Vec<String> {
        let mut before = Vec::new();
        loop {
            match self.line().await {
                Some(line) if line == want => return before,
                Some(line) => before.push(line),
                None => panic!("stdout ended without {want:?}; it had {before:?}"),
            }
        }
    }

    fn signal(&self, signal: Signal) {
        kill(self.pid(), signal).expect("signal the child");
    }

    fn still_running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// Waits for the exit; its status, the rest of stdout and all of stderr.
    async fn exit(mut self) -> (ExitStatus, Vec<String>, String) {
        let status = within("tcab-workload exits", LIMIT, self.child.wait())
            .await
            .unwrap();
        let mut rest = Vec::new();
        while let Some(line) = self.line().await {
            rest.push(line);
        }
        let mut stderr = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            e.read_to_string(&mut stderr).await.unwrap();
        }
        (status, rest, stderr)
    }
}

/// Runs to the end: exit status, stdout lines, stderr.
async fn run(args: &[&str], env: &[(&str, &str)], dirs: Dirs) -> (ExitStatus, Vec<String>, String) {
    start(args, env, dirs).exit().await
}

#[tokio::test]
async fn plain_writes_its_lines_and_exits_with_its_code() {
    let env = [
        ("TCAB_LOG_LINES", "3"),
        ("TCAB_RUN_SECONDS", "0"),
        ("TCAB_EXIT_CODE", "7"),
    ];
    let (status, stdout, stderr) = run(&["plain"], &env, Dirs::new()).await;
    assert_eq!(status.code(), Some(7), "stderr: {stderr}");
    assert_eq!(stdout, ["line 1", "line 2", "line 3"]);
    assert_eq!(stderr, "");
}

#[tokio::test]
async fn plain_reads_the_downward_api_annotations_when_the_env_does_not_say() {
    let dirs = Dirs::new();
    std::fs::write(
        dirs.podinfo.path().join("annotations"),
        "kube-sim.tcab.dev/exit-code=\"5\"\n\
         kube-sim.tcab.dev/log-lines=\"2\"\n\
         kube-sim.tcab.dev/run-seconds=\"0\"\n\
         kubernetes.io/config.seen=\"2025-01-01T00:00:00Z\"",
    )
    .unwrap();
    let (status, stdout, _) = run(&["plain"], &[("TCAB_EXIT_CODE", "6")], dirs).await;
    assert_eq!(status.code(), Some(6));
    assert_eq!(stdout, ["line 1", "line 2"]);
}

#[tokio::test]
async fn plain_without_a_run_time_runs_until_sigterm_and_exits_143() {
    let mut plain = start(&["plain"], &[("TCAB_LOG_LINES", "1")], Dirs::new());
    assert_eq!(plain.line().await.as_deref(), Some("line 1"));
    assert!(plain.still_running());
    plain.signal(Signal::SIGTERM);
    let (status, rest, stderr) = plain.exit().await;
    assert_eq!(status.code(), Some(143), "stderr: {stderr}");
    assert!(rest.is_empty(), "{rest:?}");
}

/// The process's resident memory, from /proc.
fn resident_kib(pid: Pid) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("a VmRSS line")
}

#[tokio::test]
async fn plain_allocates_its_memory_before_its_lines_and_holds_it() {
    let env = [("TCAB_ALLOCATE_MIB", "64"), ("TCAB_LOG_LINES", "1")];
    let mut plain = start(&["plain"], &env, Dirs::new());
    assert_eq!(plain.line().await.as_deref(), Some("line 1"));
    let rss = resident_kib(plain.pid());
    assert!(
        rss >= 64 * 1024,
        "resident {rss} KiB after allocating 64 MiB"
    );
    plain.signal(Signal::SIGTERM);
    assert_eq!(plain.exit().await.0.code(), Some(143));
}

#[tokio::test]
async fn a_wrong_command_line_exits_2_with_the_usage_on_stderr() {
    for args in [&[][..], &["bogus"], &["plain", "extra"]] {
        let (status, stdout, stderr) = run(args, &[], Dirs::new()).await;
        assert_eq!(status.code(), Some(2), "{args:?}");
        assert!(stdout.is_empty(), "{args:?}: {stdout:?}");
        assert!(stderr.trim_end().ends_with(USAGE), "{args:?}: {stderr}");
    }
}

#[tokio::test]
async fn driver_and_publisher_without_their_env_exit_2_with_the_fatal_line() {
    let (status, stdout, _) = run(&["driver"], &[], Dirs::new()).await;
    assert_eq!(status.code(), Some(2));
    assert_eq!(
        stdout,
        ["fatal: TCAB_BACKEND_URL, TCAB_JOB_ID and TCAB_JOB_TOKEN are required"]
    );
    let (status, stdout, _) = run(&["publisher"], &[], Dirs::new()).await;
    assert_eq!(status.code(), Some(2));
    assert_eq!(
        stdout,
        ["fatal: TCAB_BACKEND_URL, TCAB_PUBLISH_JOB_ID and TCAB_JOB_TOKEN are required"]
    );
}

#[tokio::test]
async fn a_driver_reports_its_run_and_removes_its_sandbox_through_the_api() {
    let backend = MockBackend::start().await;
    backend.add_run_row("run-1", "dispatched", "job-token");
    let api = FakeApi::start().await;
    let dirs = Dirs::new();
    std::fs::write(dirs.serviceaccount.path().join("token"), "sa-token").unwrap();
    std::fs::write(dirs.serviceaccount.path().join("namespace"), "work").unwrap();
    let env = [
        ("TCAB_BACKEND_URL", backend.url.as_str()),
        ("TCAB_JOB_ID", "run-1"),
        ("TCAB_JOB_TOKEN", "job-token"),
        (
            "TCAB_LAUNCH_REQUEST",
            r#"{"sim": {"duration_ms": 40, "record": false, "log_lines": 0}}"#,
        ),
        ("TCAB_KUBERNETES_URL", api.url.as_str()),
    ];
    let (status, stdout, stderr) = run(&["driver"], &env, dirs).await;
    assert_eq!(
        status.code(),
        Some(0),
        "stdout: {stdout:?}, stderr: {stderr}"
    );
    assert_eq!(
        stdout,
        [
            "fake driver for job run-1 starting",
            "state starting",
            "created sandbox pod work/tcab-sandbox-x1",
            "state running",
            "state validating",
            "state storing",
            "deleted sandbox pod work/tcab-sandbox-x1",
            "reported succeeded; exiting",
        ]
    );
    assert_eq!(backend.row_state("run-1"), "succeeded");
    let seen: Vec<_> = api
        .seen()
        .into_iter()
        .map(|s| (s.method.to_string(), s.path, s.authorization))
        .collect();
    let bearer = "Bearer sa-token".to_string();
    assert_eq!(
        seen,
        [
            (
                "POST".into(),
                "/api/v1/namespaces/work/pods".into(),
                bearer.clone()
            ),
            (
                "DELETE".into(),
                "/api/v1/namespaces/work/pods/tcab-sandbox-x1".into(),
                bearer
            ),
        ]
    );
}

#[tokio::test]
async fn a_driver_that_ignores_sigterm_lives_on_until_sigkill() {
    let backend = MockBackend::start().await;
    backend.add_run_row("run-1", "dispatched", "job-token");
    let env = [
        ("TCAB_BACKEND_URL", backend.url.as_str()),
        ("TCAB_JOB_ID", "run-1"),
        ("TCAB_JOB_TOKEN", "job-token"),
        (
            "TCAB_LAUNCH_REQUEST",
            r#"{"sim": {"hang": true, "ignore_sigterm": true, "sandbox": false, "log_lines": 0}}"#,
        ),
    ];
    let mut driver = start(&["driver"], &env, Dirs::new());
    driver.until_line("hanging").await;
    driver.signal(Signal::SIGTERM);
    assert_eq!(
        driver.line().await.as_deref(),
        Some("received SIGTERM; ignoring it")
    );
    assert!(driver.still_running());
    driver.signal(Signal::SIGKILL);
    let (status, rest, _) = driver.exit().await;
    assert_eq!(status.signal(), Some(9), "{status:?}");
    assert!(rest.is_empty(), "{rest:?}");
    assert_eq!(backend.row_state("run-1"), "running");
}
