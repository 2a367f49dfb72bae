//! Child processes of the dev stack: started with their own environment, their
//! output kept in a log file each, stopped politely (SIGTERM) or killed (SIGKILL).

use anyhow::{Context, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

/// How to start one process.
#[derive(Debug, Clone)]
pub struct Spec {
    /// A short name, used for its log file.
    pub name: String,
    /// The executable.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Its whole environment (nothing is inherited but PATH and HOME).
    pub env: Vec<(String, String)>,
    /// Where its stdout and stderr go.
    pub log: PathBuf,
}

/// A running (or exited) child process.
pub struct Proc {
    pub spec: Spec,
    child: Child,
}

impl Proc {
    /// Starts the process. When `wait_listening`, waits (up to 20 s) for the
    /// first stdout line `listening on URL` and returns the URL too.
    pub async fn start(spec: Spec, wait_listening: bool) -> anyhow::Result<(Proc, Option<String>)> {
        let mut cmd = Command::new(&spec.program);
        cmd.args(&spec.args)
            .env_clear()
            .envs(
                ["PATH", "HOME"]
                    .iter()
                    .filter_map(|k| std::env::var(k).ok().map(|v| (*k, v))),
            )
            .envs(spec.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting {}", spec.program.display()))?;
        let log = tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&spec.log)
            .await
            .with_context(|| format!("opening {}", spec.log.display()))?;
        let log = std::sync::Arc::new(tokio::sync::Mutex::new(log));
        let stdout = child.stdout.take().context("stdout")?;
        let stderr = child.stderr.take().context("stderr")?;
        let (url_tx, url_rx) = tokio::sync::oneshot::channel::<String>();
        let mut url_tx = Some(url_tx);
        let out_log = log.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(url) = line.strip_prefix("listening on ")
                    && let Some(tx) = url_tx.take()
                {
                    let _ = tx.send(url.trim().to_owned());
                }
                let _ = out_log
                    .lock()
                    .await
                    .write_all(format!("{line}\n").as_bytes())
                    .await;
            }
        });
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let _ = log
                    .lock()
                    .await
                    .write_all(format!("{line}\n").as_bytes())
                    .await;
            }
        });
        let mut proc = Proc { spec, child };
        let url = if wait_listening {
            match tokio::time::timeout(Duration::from_secs(20), url_rx).await {
                Ok(Ok(url)) => Some(url),
                _ => {
                    let status = proc.child.try_wait().ok().flatten();
                    let tail = tail(&proc.spec.log, 20);
                    bail!(
                        "{} did not say `listening on ...` (exit: {status:?}); log:\n{tail}",
                        proc.spec.name
                    )
                }
            }
        } else {
            None
        };
        Ok((proc, url))
    }

    /// The OS process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Whether it is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Sends SIGTERM and waits up to `grace`, then SIGKILL. Returns the exit code if any.
    pub async fn stop(&mut self, grace: Duration) -> Option<i32> {
        if let Some(pid) = self.child.id() {
            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGTERM);
        }
        match tokio::time::timeout(grace, self.child.wait()).await {
            Ok(Ok(status)) => status.code(),
            _ => {
                let _ = self.child.kill().await;
                None
            }
        }
    }

    /// SIGKILL: no cleanup, as a node crash or an OOM kill would.
    pub async fn kill(&mut self) {
        let _ = self.child.kill().await;
    }

    /// Waits for the process to exit by itself, up to `limit`.
    pub async fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        match tokio::time::timeout(limit, self.child.wait()).await {
            Ok(Ok(status)) => status.code(),
            _ => None,
        }
    }
}

/// The last `n` lines of a log file (empty when unreadable).
pub fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
