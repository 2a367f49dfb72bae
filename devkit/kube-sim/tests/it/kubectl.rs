//! Drives the real kubectl against the sim: get -l, -o json, -o yaml, logs,
//! delete and get --watch. Skips (passing) when kubectl is not on PATH.

use crate::common::*;
use serde_json::{Value, json};
use std::process::{Command, Stdio};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};

/// How long each step of the `get --watch` conversation may take.
const WATCH_STEP: Duration = Duration::from_secs(30);

pub fn kubectl_on_path() -> bool {
    Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

#[tokio::test]
async fn kubectl_works_against_the_sim() {
    if !kubectl_on_path() {
        println!("SKIP kubectl_works_against_the_sim: kubectl is not on PATH");
        return;
    }
    let s = sim().await;
    let c = client();
    post(
        &c,
        &jobs_url(&s),
        &plain_job("kc-run", json!({"lane": "run"}), 300.0),
    )
    .await;
    post(
        &c,
        &jobs_url(&s),
        &plain_job("kc-pub", json!({"lane": "publish"}), 300.0),
    )
    .await;
    let pod = eventually("pod runs", SECS, || async {
        let (_, l) = get(
            &c,
            &format!("{}?labelSelector=job-name%3Dkc-run", pods_url(&s)),
        )
        .await;
        l["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["status"]["phase"] == "Running")
            .cloned()
    })
    .await;
    let pod_name = pod["metadata"]["name"].as_str().unwrap().to_string();
    s.sim()
        .store
        .append_log(NS, &pod_name, "main", "first line");
    s.sim()
        .store
        .append_log(NS, &pod_name, "main", "second line");
    let home_dir = tempfile::tempdir().unwrap();
    let home = home_dir.path().to_path_buf();
    let kc = s.kubeconfig_path().to_path_buf();
    let run = move |args: &[&str]| {
        let out = Command::new("kubectl")
            .env("HOME", &home)
            .env_remove("KUBECONFIG")
            .arg("--kubeconfig")
            .arg(&kc)
            .args(args)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}{text}",
            String::from_utf8_lossy(&out.stderr)
        );
        text
    };
    let run2 = run.clone();
    let table = tokio::task::spawn_blocking(move || run2(&["get", "jobs", "-l", "lane=run"]))
        .await
        .unwrap();
    let mut lines = table.lines();
    let header = lines.next().unwrap();
    assert!(
        header.starts_with("NAME") && header.contains("STATUS") && header.contains("COMPLETIONS"),
        "{table}"
    );
    let rows: Vec<&str> = lines.collect();
    assert_eq!(rows.len(), 1, "{table}");
    assert!(
        rows[0].starts_with("kc-run") && rows[0].contains("Running"),
        "{table}"
    );

    let r = run.clone();
    let json_out = tokio::task::spawn_blocking(move || r(&["get", "jobs", "-o", "json"]))
        .await
        .unwrap();
    let v: Value = serde_json::from_str(&json_out).unwrap();
    assert_eq!(v["items"].as_array().unwrap().len(), 2);
    let r = run.clone();
    let yaml_out = tokio::task::spawn_blocking(move || r(&["get", "job", "kc-pub", "-o", "yaml"]))
        .await
        .unwrap();
    let y: serde_json::Value = serde_saphyr::from_str(&yaml_out).unwrap();
    assert_eq!(y["metadata"]["labels"]["lane"].as_str(), Some("publish"));
    let r = run.clone();
    let pods_table =
        tokio::task::spawn_blocking(move || r(&["get", "pods", "-l", "job-name=kc-run"]))
            .await
            .unwrap();
    assert!(
        pods_table.contains(&pod_name) && pods_table.contains("Running"),
        "{pods_table}"
    );

    let (r, p) = (run.clone(), pod_name.clone());
    let logs = tokio::task::spawn_blocking(move || r(&["logs", &p, "--tail=1"]))
        .await
        .unwrap();
    assert_eq!(logs, "second line\n");

    // get --watch sees the deletion the delete below causes. kubectl lists
    // first and watches from the list's resourceVersion, so once kc-run is
    // printed a deletion cannot be missed.
    let home_w = tempfile::tempdir().unwrap();
    let mut watcher = tokio::process::Command::new("kubectl")
        .env("HOME", home_w.path())
        .env_remove("KUBECONFIG")
        .arg("--kubeconfig")
        .arg(s.kubeconfig_path())
        .args([
            "get",
            "jobs",
            "--watch",
            "--output-watch-events",
            "--request-timeout=0",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut out = BufReader::new(watcher.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    let mut read_until = async |what: &str, hit: &dyn Fn(&str) -> bool| {
        let step = async {
            while let Some(line) = out.next_line().await.unwrap() {
                let found = hit(&line);
                seen.push(line);
                if found {
                    return;
                }
            }
            panic!("kubectl get --watch ended before {what}: {seen:?}");
        };
        if tokio::time::timeout(WATCH_STEP, step).await.is_err() {
            panic!("no {what} from kubectl get --watch within {WATCH_STEP:?}");
        }
    };
    read_until("kc-run listed", &|l| l.contains("kc-run")).await;
    let r = run.clone();
    let deleted = tokio::task::spawn_blocking(move || r(&["delete", "job", "kc-run"]))
        .await
        .unwrap();
    assert!(
        deleted.contains("kc-run") && deleted.contains("deleted"),
        "{deleted}"
    );
    read_until("DELETED kc-run", &|l| {
        l.contains("DELETED") && l.contains("kc-run")
    })
    .await;
    watcher.kill().await.unwrap();
    assert!(
        seen.iter()
            .any(|l| l.contains("ADDED") && l.contains("kc-pub")),
        "{seen:?}"
    );
    eventually(
        "the job's pod is deleted too (kubectl sends Background)",
        SECS,
        || async {
            (get(&c, &format!("{}/{pod_name}", pods_url(&s))).await.0 == 404).then_some(())
        },
    )
    .await;
}

/// kubectl's `create secret generic`, `create serviceaccount`, `get nodes`,
/// `get events` and `describe pod` (with the pod's Events) against the sim.
#[tokio::test]
async fn kubectl_creates_secrets_and_accounts_and_describes_pending_pods() {
    if !kubectl_on_path() {
        println!(
            "SKIP kubectl_creates_secrets_and_accounts_and_describes_pending_pods: kubectl is not on PATH"
        );
        return;
    }
    let s = sim().await;
    let home_dir = tempfile::tempdir().unwrap();
    let home = home_dir.path().to_path_buf();
    let kc = s.kubeconfig_path().to_path_buf();
    let run = move |args: Vec<String>| {
        let out = Command::new("kubectl")
            .env("HOME", &home)
            .env_remove("KUBECONFIG")
            .arg("--kubeconfig")
            .arg(&kc)
            .args(&args)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}{text}",
            String::from_utf8_lossy(&out.stderr)
        );
        text
    };
    let kubectl = |args: &[&str]| {
        let r = run.clone();
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        tokio::task::spawn_blocking(move || r(args))
    };
    let out = kubectl(&[
        "create",
        "secret",
        "generic",
        "harness",
        "--from-literal=API_KEY=x",
    ])
    .await
    .unwrap();
    assert!(out.contains("secret/harness created"), "{out}");
    let out = kubectl(&["create", "serviceaccount", "runner"])
        .await
        .unwrap();
    assert!(out.contains("serviceaccount/runner created"), "{out}");
    let out = kubectl(&["get", "secrets"]).await.unwrap();
    assert!(
        out.starts_with("NAME") && out.contains("harness") && out.contains("Opaque"),
        "{out}"
    );
    let out = kubectl(&["get", "sa"]).await.unwrap();
    assert!(out.contains("default") && out.contains("runner"), "{out}");
    let out = kubectl(&["get", "nodes"]).await.unwrap();
    let header = out.lines().next().unwrap();
    assert!(
        header.contains("STATUS") && header.contains("VERSION"),
        "{out}"
    );
    assert!(
        out.lines()
            .filter(|l| l.starts_with("sim-node-") && l.contains(" Ready "))
            .count()
            == 2,
        "{out}"
    );

    // A pod whose env names a Secret that does not exist.
    let mut j = plain_job("cfg", json!({}), 300.0);
    j["spec"]["template"]["spec"]["containers"][0]["envFrom"] =
        json!([{"secretRef": {"name": "missing"}}]);
    let c = client();
    assert_eq!(post(&c, &jobs_url(&s), &j).await.0, 201);
    let pod = eventually("the pod waits", SECS, || async {
        let (_, l) = get(
            &c,
            &format!("{}?labelSelector=job-name%3Dcfg", pods_url(&s)),
        )
        .await;
        l["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| {
                p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"]
                    == "CreateContainerConfigError"
            })
            .cloned()
    })
    .await;
    let name = pod["metadata"]["name"].as_str().unwrap().to_string();
    let out = kubectl(&["get", "pods", "-l", "job-name=cfg"])
        .await
        .unwrap();
    assert!(out.contains("CreateContainerConfigError"), "{out}");
    let out = kubectl(&["describe", "pod", &name]).await.unwrap();
    assert!(out.contains("Events:"), "{out}");
    for want in [
        "Scheduled",
        "Successfully assigned",
        "Error: secret \"missing\" not found",
        "CreateContainerConfigError",
        "node.kubernetes.io/unreachable:NoExecute op=Exists for 300s",
    ] {
        assert!(out.contains(want), "describe lacks {want:?}:\n{out}");
    }
    let out = kubectl(&["get", "events"]).await.unwrap();
    assert!(
        out.contains("SuccessfulCreate") && out.contains("job/cfg"),
        "{out}"
    );
}

/// Runs kubectl with its own HOME against a kubeconfig: (success, stdout,
/// stderr).
fn kubectl(kc: &std::path::Path, home: &std::path::Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new("kubectl")
        .env("HOME", home)
        .env_remove("KUBECONFIG")
        .arg("--kubeconfig")
        .arg(kc)
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

const JOB_YAML: &str = "apiVersion: batch/v1
kind: Job
metadata:
  name: NAME
spec:
  backoffLimit: 0EXTRA
  template:
    metadata:
      annotations:
        kube-sim.tcab.dev/run-seconds: \"300\"
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: IMAGE
        resources:
          requests: {cpu: 1.5}
";

#[tokio::test]
async fn kubectl_server_dry_run_and_field_validation() {
    if !kubectl_on_path() {
        println!("SKIP kubectl_server_dry_run_and_field_validation: kubectl is not on PATH");
        return;
    }
    let s = sim().await;
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().to_path_buf();
    let kc = s.kubeconfig_path().to_path_buf();
    let write = |file: &str, name: &str, extra: &str, image: &str| {
        let p = home.join(file);
        let text = JOB_YAML
            .replace("NAME", name)
            .replace("EXTRA", extra)
            .replace("IMAGE", image);
        std::fs::write(&p, text).unwrap();
        p.to_string_lossy().to_string()
    };
    let ok = write("ok.yaml", "kd", "", "busybox:1");
    let unknown = write("unknown.yaml", "kw", "\n  foo: 1", "busybox:1");
    let (k, h) = (kc.clone(), home.clone());
    let run = move |args: Vec<String>| {
        let (k, h) = (k.clone(), h.clone());
        async move {
            tokio::task::spawn_blocking(move || {
                let a: Vec<&str> = args.iter().map(String::as_str).collect();
                kubectl(&k, &h, &a)
            })
            .await
            .unwrap()
        }
    };
    let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();

    // --dry-run=server: the server's answer is printed, nothing is stored
    let (success, out, err) = run(args(&[
        "create",
        "-f",
        &ok,
        "--dry-run=server",
        "-o",
        "yaml",
    ]))
    .await;
    assert!(success, "{err}");
    let y: serde_json::Value = serde_saphyr::from_str(&out).unwrap();
    assert!(
        y["metadata"]["uid"].as_str().is_some_and(|u| !u.is_empty()),
        "{out}"
    );
    assert_eq!(
        y["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"].as_str(),
        Some("1500m"),
        "{out}"
    );
    let (success, _, err) = run(args(&["get", "job", "kd"])).await;
    assert!(!success && err.contains("NotFound"), "{err}");

    // kubectl sends fieldValidation=Strict by default: the server refuses
    let (success, _, err) = run(args(&["create", "-f", &unknown])).await;
    assert!(!success, "{err}");
    assert!(
        err.contains("Job in version \"v1\" cannot be handled as a Job: strict decoding error: unknown field \"spec.foo\""),
        "{err}"
    );
    // with --validate=warn the field is dropped and the warning printed
    let (success, _, err) = run(args(&["apply", "-f", &unknown, "--validate=warn"])).await;
    assert!(success, "{err}");
    assert!(err.contains("Warning: unknown field \"spec.foo\""), "{err}");
    let (success, out, err) = run(args(&["get", "job", "kw", "-o", "json"])).await;
    assert!(success, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v["spec"].get("foo").is_none(), "{out}");

    // apply again (a strategic merge patch) and the template stays immutable
    let (success, out, err) = run(args(&["apply", "-f", &ok])).await;
    assert!(success && out.contains("created"), "{out}{err}");
    let (success, out, err) = run(args(&["apply", "-f", &ok])).await;
    assert!(success, "{out}{err}");
    let changed = write("changed.yaml", "kd", "", "busybox:2");
    let (success, _, err) = run(args(&["apply", "-f", &changed])).await;
    assert!(!success, "{err}");
    assert!(
        err.contains("spec.template: Invalid value") && err.contains("field is immutable"),
        "{err}"
    );

    // an invalid object is refused with upstream's words
    let invalid = write(
        "invalid.yaml",
        "kv",
        "\n  ttlSecondsAfterFinished: -1",
        "busybox:1",
    );
    let (success, _, err) = run(args(&["create", "-f", &invalid])).await;
    assert!(!success, "{err}");
    assert!(
        err.contains("The Job \"kv\" is invalid: spec.ttlSecondsAfterFinished: Invalid value: -1: must be greater than or equal to 0"),
        "{err}"
    );
    println!("ran kubectl_server_dry_run_and_field_validation against the sim");
}
