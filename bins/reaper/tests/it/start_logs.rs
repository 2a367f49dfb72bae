//! What a start says in its own log, read from the real binary's stderr
//! (JSON lines): an API server it cannot reach is named once per back-off
//! step in the dispatcher's own words (no context-free line of the
//! Kubernetes client's), and a misspelt `TCAB_*` variable is warned about,
//! naming the variable meant.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const BINARY: &str = env!("CARGO_BIN_EXE_tcab-reaper");

/// A kubeconfig for `server` in a fresh file of its own.
fn kubeconfig(server: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!(
        "tcab-reaper-start-logs-{}-{}.kubeconfig",
        std::process::id(),
        Instant::now().elapsed().as_nanos()
    ));
    let text = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: k\n  cluster:\n    server: {server}\ncontexts:\n- name: c\n  context:\n    cluster: k\n    user: u\n    namespace: tcab\nusers:\n- name: u\n  user:\n    token: not-a-real-token\n"
    );
    std::fs::write(&path, text).expect("kubeconfig written");
    path
}

/// Kills the child when the test ends, however it ends.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn an_unreachable_api_server_and_a_misspelt_variable_are_told_in_its_own_words() {
    let server = format!("http://{}", tcab_testkit::http::closed_addr());
    let config = kubeconfig(&server);
    let mut child = Killed(
        Command::new(BINARY)
            .env_clear()
            .envs([
                ("KUBECONFIG", config.to_str().expect("a UTF-8 path")),
                ("POD_NAMESPACE", "tcab"),
                ("TCAB_DISPATCHER_ORPHAN_SWEEP", "false"),
                ("TCAB_DISPATCHER_LOG_FORMAT", "json"),
                ("TCAB_DISPATCHER_POLL_INTERVAL_SECOND", "1"),
                ("RUST_LOG", "info"),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the reaper starts"),
    );
    let stderr = child.0.stderr.take().expect("its stderr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // Read its lines until the third failed list (back-offs of 0.5 and 1 s).
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut lines: Vec<serde_json::Value> = Vec::new();
    let failed = |lines: &[serde_json::Value]| -> Vec<serde_json::Value> {
        lines
            .iter()
            .filter(|l| {
                l["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("cannot list the owned Jobs"))
            })
            .cloned()
            .collect()
    };
    while failed(&lines).len() < 3 {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => lines.push(
                serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}")),
            ),
            Err(_) => panic!("no third failed list within 30 s: {lines:#?}"),
        }
    }
    drop(child);
    let _ = std::fs::remove_file(&config);

    let using = lines
        .iter()
        .find(|l| l["message"] == "using the Kubernetes API")
        .unwrap_or_else(|| panic!("no line names the API server: {lines:#?}"));
    assert!(
        using["api_server"]
            .as_str()
            .is_some_and(|s| s.starts_with(&server)),
        "{using}"
    );
    for (n, line) in failed(&lines).iter().enumerate() {
        assert_eq!(line["level"], "WARN", "{line}");
        assert_eq!(line["attempt"], n + 1, "one line per back-off step: {line}");
        assert_eq!(line["reason"], "connect", "{line}");
        assert!(
            line["selector"]
                .as_str()
                .is_some_and(|s| s.contains("app.kubernetes.io/managed-by=tcab-dispatcher")),
            "{line}"
        );
        assert!(
            line["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{line}"
        );
    }
    assert!(
        lines.iter().all(|l| !l["target"]
            .as_str()
            .unwrap_or_default()
            .starts_with("kube_client")),
        "the Kubernetes client logged on its own: {lines:#?}"
    );
    let misspelt = lines
        .iter()
        .find(|l| l["variable"] == "TCAB_DISPATCHER_POLL_INTERVAL_SECOND")
        .unwrap_or_else(|| panic!("no warning of the misspelt variable: {lines:#?}"));
    assert_eq!(misspelt["level"], "WARN");
    assert_eq!(misspelt["closest"], "TCAB_DISPATCHER_POLL_INTERVAL_SECONDS");
}
