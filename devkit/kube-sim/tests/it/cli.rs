//! The binary: first stdout line, kubeconfig written, bad flags exit 2.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

#[test]
fn binary_prints_its_url_and_writes_a_kubeconfig() {
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kube/config");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tcab-kube-sim"))
        .args(["--listen", "127.0.0.1:0", "--kubeconfig-out"])
        .arg(&kc)
        .args(["--namespace", "dev"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("first line: {line:?}"));
    let port: u16 = url
        .strip_prefix("http://127.0.0.1:")
        .unwrap()
        .parse()
        .unwrap();
    assert!(port > 0);
    let text = std::fs::read_to_string(&kc).unwrap();
    let v: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
    assert_eq!(v["clusters"][0]["cluster"]["server"].as_str(), Some(url));
    assert_eq!(
        v["contexts"][0]["context"]["namespace"].as_str(),
        Some("dev")
    );
    assert!(v["users"][0]["user"]["token"].as_str().is_some());
}

#[test]
fn bad_flags_exit_2() {
    let out = Command::new(env!("CARGO_BIN_EXE_tcab-kube-sim"))
        .args(["--listen", "nope", "--kubeconfig-out", "x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--listen"));
    let out = Command::new(env!("CARGO_BIN_EXE_tcab-kube-sim"))
        .args(["--rbac-token", "t", "--kubeconfig-out", "x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}
