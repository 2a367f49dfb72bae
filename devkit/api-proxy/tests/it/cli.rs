//! The `tcab-api-proxy` binary: its first line, its kubeconfig, its flags.

use crate::common::*;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, ListParams};
use tcab_kube_sim::{ApiFaultMode, FaultRule};
use tokio::io::AsyncBufReadExt;

const BIN: &str = env!("CARGO_BIN_EXE_tcab-api-proxy");

#[tokio::test]
async fn the_binary_prints_its_address_writes_a_kubeconfig_and_takes_rules() {
    let r = rig().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("sub/kubeconfig");
    let mut child = tokio::process::Command::new(BIN)
        .args(["--upstream", r.sim.url(), "--namespace", NS])
        .arg("--kubeconfig-out")
        .arg(&kubeconfig)
        .args([
            "--token",
            DISPATCHER,
            "--identity",
            &format!("dispatcher={DISPATCHER}"),
        ])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(SECS, lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let url = first.strip_prefix("listening on ").unwrap().to_string();
    assert!(url.starts_with("http://127.0.0.1:"), "{first}");
    let kc = kube::config::Kubeconfig::read_from(&kubeconfig).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    let jobs: Api<Job> = Api::default_namespaced(kube::Client::try_from(cfg).unwrap());
    jobs.list(&ListParams::default()).await.unwrap();
    let admin = tcab_kube_sim::AdminClient::new(&url);
    admin
        .add_fault(
            &FaultRule::new(ApiFaultMode::Error500)
                .token(DISPATCHER)
                .times(1),
        )
        .await
        .unwrap();
    let err = jobs.list(&ListParams::default()).await.unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 500),
        "{err:?}"
    );
    let counters: serde_json::Value = client()
        .get(format!("{url}/admin/counters"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        counters["requests_by_identity"]["dispatcher"]["list jobs"],
        2
    );
    child.kill().await.unwrap();
}

#[tokio::test]
async fn a_wrong_flag_or_a_bad_upstream_stops_it() {
    let run = |args: &'static [&'static str]| tokio::process::Command::new(BIN).args(args).output();
    let out = run(&["--upstream", "http://127.0.0.1:1", "--nope"])
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--nope"));
    let out = run(&["--upstream", "https://127.0.0.1:1"]).await.unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("give the CA PEM"),
        "{out:?}"
    );
    let out = run(&[
        "--upstream",
        "http://127.0.0.1:1",
        "--kubeconfig-out",
        "/tmp/x",
    ])
    .await
    .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "--token is required with it: {out:?}"
    );
}
