//! Drives the sim with the official Python `kubernetes` client
//! (tests/python/check_client.py, pinned in tests/python/requirements.txt).
//! The interpreter is `$KUBE_SIM_PYTHON`, else the venv scripts/test makes
//! (`.venv-kube-sim` at the workspace root). Skips (passing, with a `SKIP`
//! line) when there is no such interpreter or it lacks the package.

use crate::common::*;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

/// How long the whole script may take (it waits on a Job to complete).
const SCRIPT_LIMIT: Duration = Duration::from_secs(120);

/// The exit code check_client.py uses for "package not importable".
const NO_PACKAGE: i32 = 3;

fn interpreter() -> PathBuf {
    if let Some(p) = std::env::var_os("KUBE_SIM_PYTHON") {
        return PathBuf::from(p);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.venv-kube-sim/bin/python")
}

#[tokio::test]
async fn python_client_works_against_the_sim() {
    let python = interpreter();
    if !python.exists() {
        println!(
            "SKIP python_client_works_against_the_sim: no interpreter at {} (scripts/test makes the venv)",
            python.display()
        );
        return;
    }
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/check_client.py");
    let s = sim().await;
    let child = tokio::process::Command::new(&python)
        .arg(&script)
        .arg(s.kubeconfig_path())
        .arg(NS)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let out = tokio::time::timeout(SCRIPT_LIMIT, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("check_client.py did not finish within {SCRIPT_LIMIT:?}"))
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.code() == Some(NO_PACKAGE) {
        println!(
            "SKIP python_client_works_against_the_sim: {}",
            stdout.trim()
        );
        return;
    }
    print!("{stdout}");
    assert!(
        out.status.success(),
        "check_client.py failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(stdout.contains("all 4 checks passed"), "{stdout}");
}
