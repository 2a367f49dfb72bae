//! A restart on the same database keeps jobs, tokens, leases, history and
//! harness limits: in process, and for the real binary (SIGTERM, exit 0).

use crate::support::*;
use reqwest::StatusCode;
use serde_json::json;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tcab_backend_sim::{ManualClock, SimOptions};

#[tokio::test]
async fn a_restart_keeps_jobs_tokens_leases_and_limits() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sim.db");
    let clock = Arc::new(ManualClock::new(start_time()));
    let options = || {
        let mut o = SimOptions::new(&path, SERVICE);
        o.clock = clock.clone();
        o.enable_test_clock = true;
        o
    };

    let rig = Rig::with(options()).await;
    rig.call(
        reqwest::Method::PUT,
        "/harnesses/h",
        Some(SERVICE),
        Some(json!({"max_parallel": 1})),
    )
    .await;
    let a = rig.enqueue("h", "m", None).await;
    let b = rig.enqueue("h", "m", None).await;
    let other = rig.enqueue("g", "m", None).await;
    let (_, token, _) = rig.claim().await.unwrap();
    rig.report(&a, &token, json!({"state": "running"})).await;
    let p = rig
        .post("/publish-jobs", json!({"request": {"r": 1}}))
        .await
        .body["id"]
        .clone();
    let before_a = rig.job(&a).await;
    let before_b = rig.job(&b).await;
    assert_eq!(before_b["state"], "pending");
    rig.sim.shutdown().await;

    clock.advance(Duration::from_secs(10));
    let rig = Rig::with(options()).await;
    assert_eq!(rig.job(&a).await, before_a, "job, lease and history kept");
    assert_eq!(
        rig.job(&b).await,
        before_b,
        "the harness limit still holds b"
    );
    assert_eq!(
        rig.get("/publish-jobs?state=queued").await.body["publish_jobs"][0]["id"],
        p
    );
    // The per-job token minted before the restart still works.
    assert_eq!(
        rig.report(&a, &token, json!({"state": "validating"}))
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(rig.claim().await.unwrap().0, other);
    // queue_seq keeps growing.
    let c = rig.enqueue("x", "m", None).await;
    assert!(rig.job(&c).await["queue_seq"].as_i64() > rig.job(&other).await["queue_seq"].as_i64());
    rig.report(&a, &token, json!({"state": "succeeded"})).await;
    assert_eq!(rig.claim().await.unwrap().0, b);
}

fn binary() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tcab-backend-sim"))
}

/// Starts the binary; answers the child and its URL (read from the first line).
fn start_binary(db: &std::path::Path) -> (Child, String) {
    let mut child = binary()
        .args(["--listen", "127.0.0.1:0", "--db"])
        .arg(db)
        .args(["--service-token", SERVICE, "--enable-test-clock"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("binary starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim_end()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("first line was {line:?}"))
        .to_string();
    assert!(
        url.starts_with("http://127.0.0.1:") && !url.ends_with(":0"),
        "{url}"
    );
    (child, url)
}

/// Sends SIGTERM to the child we started and waits (bounded) for its exit.
fn stop_binary(mut child: Child) -> std::process::ExitStatus {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "no exit within 10 s of SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test]
async fn the_binary_prints_its_url_keeps_state_and_exits_0_on_sigterm() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("bin.db");
    let http = reqwest::Client::new();

    let (child, url) = start_binary(&db);
    let r = http
        .post(format!("{url}/jobs"))
        .bearer_auth(SERVICE)
        .json(&json!({"harness": "h", "model": "m", "launch_request": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    let id = r.json::<serde_json::Value>().await.unwrap()["id"].clone();
    let status = stop_binary(child);
    assert_eq!(status.code(), Some(0));

    let (child, url) = start_binary(&db);
    let r = http
        .post(format!("{url}/jobs/next"))
        .bearer_auth(SERVICE)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        r.json::<serde_json::Value>().await.unwrap()["job"]["id"],
        id
    );
    assert_eq!(stop_binary(child).code(), Some(0));
}

#[test]
fn bad_flags_exit_2_naming_the_problem() {
    for (args, needle) in [
        (vec!["--db", "x", "--service-token", "t"], "--listen"),
        (
            vec!["--listen", "nowhere", "--db", "x", "--service-token", "t"],
            "--listen",
        ),
        (
            vec![
                "--listen",
                "127.0.0.1:0",
                "--db",
                "x",
                "--service-token",
                "t",
                "--lease-seconds",
                "soon",
            ],
            "--lease-seconds",
        ),
        (vec!["--bogus"], "--bogus"),
    ] {
        let out = binary().args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty());
    }
    let out = binary().arg("--help").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("--publish-backstop-seconds"));
}
