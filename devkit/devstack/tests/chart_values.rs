//! Every chart value that reaches a binary is proven to reach it: the chart
//! is installed once on the real control plane with a value off the
//! binary's default in every family, and each family's effect is observed
//! on the running system by its own check (a `check_*` function below):
//! the Jobs the admitter creates, the requests the API server's audit log
//! records, the containers' logs and metrics, and what the dispatcher does.
//! Real cluster only (one SKIP line without the control plane's binaries).
//!
//! Families exercised by the other chart scenarios are not repeated here:
//! the caps and the lease (`chart.rs`: the drain, the upgrade), the
//! managed-by values and `dispatcher.vaultAddr` (two releases), the sandbox
//! namespace, the liveness and readiness probes and
//! `terminationGracePeriodSeconds` (the wedged container).

#[macro_use]
#[allow(unused_macros)]
mod common;

use common::chart::{
    Audit, admin_client, container, dispatcher_pods, install_ready, name_of, values,
};
use common::{ClusterKind, TestStack, run};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::time::Duration;
use tcab_devstack::stack::SERVICE_TOKEN;
use tcab_devstack::{Container, wait_for};
use tcab_kube_sim::audit::Actor;

const LIMIT: Duration = Duration::from_secs(60);
const PUBLISHER_IMAGE: &str = "tcab/publisher:dev";

/// The Secret holding the backend's service token (`existingSecret`).
const TOKEN_SECRET: &str = "chart-values-backend";
const TOKEN_KEY: &str = "service-token";
/// The Secret loaded into the driver's env (`driver.secrets`).
const DRIVER_SECRET: &str = "chart-values-harness";

/// The values, each off the binary's default (and off the stack's).
fn changed(t: &TestStack) -> Value {
    values(
        t,
        json!({
            "backend": {
                "timeoutSeconds": 1.5,
                "serviceToken": {"value": "", "existingSecret": TOKEN_SECRET,
                    "existingSecretKey": TOKEN_KEY},
            },
            "dispatcher": {
                "maxInflight": 5, "maxPublishInflight": 3,
                "logFormat": "json", "rustLog": "info,tcab_admitter=debug",
                "watchTimeoutSeconds": 17, "gateMaxAgeSeconds": 7,
                "jobTtlSeconds": 1234, "logTailLines": 2, "startGraceSeconds": 1,
                "orphanSweep": true, "orphanGraceSeconds": 1, "orphanSweepIntervalSeconds": 1,
            },
            "driver": {
                "terminationGraceSeconds": 7,
                "cpuRequest": "300m", "memoryRequest": "300Mi",
                "cpuLimit": "1500m", "memoryLimit": "3Gi",
                "activeDeadlineSeconds": 4321,
                "artifactsUrl": "http://artifacts.example/a", "reposUrl": "http://repos.example/r",
                "finishDeadlineSeconds": 1111, "reportDeadlineSeconds": 222,
                "secrets": [DRIVER_SECRET],
                "subscription": {"secret": "chart-values-subscription", "dir": "/var/run/sub"},
                "fsGroup": 2345,
                "passthroughEnv": {"TCAB_CONTAINER_IMAGE_PYTHON": "registry.example/run-python:abc",
                    "TCAB_K8S_SANDBOX_NODE_SELECTOR": "pool=sandbox"},
            },
            "publisher": {
                "activeDeadlineSeconds": 765,
                "cpuRequest": "150m", "memoryRequest": "200Mi",
                "cpuLimit": "900m", "memoryLimit": "800Mi",
            },
            "extraEnv": [{"name": "CHART_VALUES_PROBE", "value": t.ns()}],
        }),
    )
}

/// Creates a Secret in the stack's namespace as the admin.
async fn secret(t: &TestStack, name: &str, data: Value) {
    let body = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name}, "stringData": data});
    t.stack
        .cluster
        .post(&format!("/api/v1/namespaces/{}/secrets", t.ns()), body)
        .await
        .unwrap_or_else(|e| t.fail(format!("creating Secret {name}: {e}")));
}

/// The value of the env var `name` of a container spec.
fn env<'a>(container: &'a Value, name: &str) -> &'a Value {
    container["env"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["name"] == name)
        .map_or(&Value::Null, |e| &e["value"])
}

/// The one Job of a backend job, once it exists.
async fn job_of(t: &TestStack, id: &str) -> Value {
    wait_for("the Job", LIMIT, || async {
        Ok(t.jobs_of(id).await.into_iter().next())
    })
    .await
    .unwrap_or_else(|e| t.fail(e))
}

/// A container's log, read through the API server.
async fn pod_log(t: &TestStack, pod: &str, container: &str) -> String {
    t.stack
        .cluster
        .get_text(&format!(
            "/api/v1/namespaces/{}/pods/{pod}/log?container={container}",
            t.ns()
        ))
        .await
        .unwrap_or_else(|e| t.fail(format!("the {container}'s log: {e}")))
}

/// Waits until the container's log has a line with `needle`; returns it.
async fn log_line(t: &TestStack, pod: &str, container: &str, needle: &str) -> String {
    wait_for(
        &format!("{needle:?} in the {container}'s log"),
        LIMIT,
        || async {
            let log = pod_log(t, pod, container).await;
            Ok(log.lines().find(|l| l.contains(needle)).map(str::to_owned))
        },
    )
    .await
    .unwrap_or_else(|e| t.fail(e))
}

/// `backend.url` and `backend.serviceToken.existingSecret`: the chart made
/// no Secret of its own, and the backend, which answers a claim only with
/// its service token, handed the run out (`state` past `queued`): the token
/// came from the operator's Secret under its key.
fn check_backend_token_from_existing_secret(release: &tcab_devstack::chart::Release, run: &Value) {
    let kinds: Vec<&str> = release.manifests.iter().map(|m| m.kind()).collect();
    assert!(
        !kinds.contains(&"Secret"),
        "no token Secret of the chart's: {kinds:?}"
    );
    assert_ne!(
        run["state"], "queued",
        "claimed with the Secret's token: {run}"
    );
}

/// `driver.*` and `dispatcher.jobTtlSeconds`: the driver Job the admitter
/// built from its environment, field by field.
fn check_driver_job(job: &Value) {
    let spec = &job["spec"];
    let pod = &spec["template"]["spec"];
    let c = &pod["containers"][0];
    assert_eq!(
        spec["ttlSecondsAfterFinished"], 1234,
        "dispatcher.jobTtlSeconds"
    );
    assert_eq!(
        spec["activeDeadlineSeconds"], 4321,
        "driver.activeDeadlineSeconds"
    );
    assert_eq!(
        pod["terminationGracePeriodSeconds"], 7,
        "driver.terminationGraceSeconds"
    );
    assert_eq!(c["image"], "tcab/driver:dev", "driver.image");
    let r = &c["resources"];
    assert_eq!(
        [
            &r["requests"]["cpu"],
            &r["requests"]["memory"],
            &r["limits"]["cpu"],
            &r["limits"]["memory"]
        ],
        ["300m", "300Mi", "1500m", "3Gi"],
        "driver.cpuRequest, memoryRequest, cpuLimit, memoryLimit"
    );
    assert_eq!(
        env(c, "TCAB_DRIVER_ARTIFACTS_URL"),
        "http://artifacts.example/a"
    );
    assert_eq!(env(c, "TCAB_DRIVER_REPOS_URL"), "http://repos.example/r");
    assert_eq!(env(c, "TCAB_DRIVER_FINISH_DEADLINE_SECONDS"), "1111");
    assert_eq!(env(c, "TCAB_DRIVER_REPORT_DEADLINE_SECONDS"), "222");
    assert_eq!(
        env(c, "TCAB_CONTAINER_IMAGE_PYTHON"),
        "registry.example/run-python:abc"
    );
    assert_eq!(env(c, "TCAB_K8S_SANDBOX_NODE_SELECTOR"), "pool=sandbox");
    assert_eq!(
        c["envFrom"],
        json!([{"secretRef": {"name": DRIVER_SECRET}}]),
        "driver.secrets"
    );
    assert_eq!(
        pod["volumes"][0]["secret"]["secretName"],
        "chart-values-subscription"
    );
    assert_eq!(pod["volumes"][0]["secret"]["optional"], true);
    assert_eq!(
        c["volumeMounts"][0]["mountPath"], "/var/run/sub",
        "driver.subscription.dir"
    );
    assert_eq!(pod["securityContext"]["fsGroup"], 2345, "driver.fsGroup");
    assert_eq!(
        pod["serviceAccountName"],
        tcab_devstack::real::DRIVER_SA,
        "driver.serviceAccount"
    );
}

/// `publisher.*`: the publisher Job's deadline and resources.
fn check_publisher_job(job: &Value) {
    let spec = &job["spec"];
    let c = &spec["template"]["spec"]["containers"][0];
    assert_eq!(c["image"], PUBLISHER_IMAGE, "publisher.image");
    assert_eq!(
        spec["activeDeadlineSeconds"], 765,
        "publisher.activeDeadlineSeconds"
    );
    let r = &c["resources"];
    assert_eq!(
        [
            &r["requests"]["cpu"],
            &r["requests"]["memory"],
            &r["limits"]["cpu"],
            &r["limits"]["memory"]
        ],
        ["150m", "200Mi", "900m", "800Mi"],
        "publisher.cpuRequest, memoryRequest, cpuLimit, memoryLimit"
    );
}

/// `dispatcher.logFormat` and `dispatcher.rustLog`: every line of the
/// admitter's log is a JSON object, and the filter lets the admitter's
/// debug lines through (the default filter, info, would not).
async fn check_log_format_and_filter(t: &TestStack, pod: &str) {
    let line = log_line(t, pod, "admitter", "claim empty").await;
    let parsed: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
    assert_eq!(parsed["level"], "DEBUG", "{line}");
    let log = pod_log(t, pod, "admitter").await;
    let not_json: Vec<&str> = log
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter(|l| serde_json::from_str::<Value>(l).map_or(true, |v| !v.is_object()))
        .collect();
    assert!(not_json.is_empty(), "lines that are not JSON: {not_json:?}");
}

/// `dispatcher.watchTimeoutSeconds`: every Job watch of each container asks
/// the API server for that timeout (the audit log's request URIs).
fn check_watch_timeout(audit: &Audit) {
    let mut agents = BTreeSet::new();
    for line in audit.text.lines() {
        let Ok(e) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if e["user"]["username"] != audit.user.as_str()
            || e["verb"] != "watch"
            || e["objectRef"]["resource"] != "jobs"
        {
            continue;
        }
        let uri = e["requestURI"].as_str().unwrap_or_default();
        assert!(uri.contains("timeoutSeconds=17"), "{uri}");
        let agent = e["userAgent"].as_str().unwrap_or_default();
        agents.insert(agent.split('/').next().unwrap_or_default().to_owned());
    }
    assert_eq!(
        agents,
        BTreeSet::from(["tcab-admitter", "tcab-lease-keeper", "tcab-reaper"].map(String::from)),
        "each container's watch"
    );
}

/// `metrics.listenHost` and the three `metrics.*Port` values: each port
/// answers `/metrics` with its own binary's series, and the admitter's
/// carry `dispatcher.gateMaxAgeSeconds` and the two caps.
async fn check_metrics_endpoints(t: &TestStack) {
    for c in Container::ALL {
        let scrape = t
            .stack
            .scrape(c)
            .await
            .unwrap_or_else(|e| t.fail(format!("scraping {}: {e}", c.binary())));
        let info = scrape.value("tcab_dispatcher_build_info", &[("binary", c.binary())]);
        assert_eq!(info, Some(1.0), "{} answers on its port", c.binary());
    }
    let admitter = t.stack.scrape(Container::Admitter).await.expect("scrape");
    assert_eq!(
        admitter.value("tcab_dispatcher_gate_max_age_seconds", &[]),
        Some(7.0),
        "dispatcher.gateMaxAgeSeconds"
    );
    let cap = |lane| admitter.value("tcab_dispatcher_lane_cap", &[("lane", lane)]);
    assert_eq!(
        (cap("run"), cap("publish")),
        (Some(5.0), Some(3.0)),
        "the caps"
    );
}

/// `dispatcher.pollIntervalSeconds` (0.1 s, the stack's; the binary's
/// default is 5 s): the reaper's idle loop ticks at least 20 times within
/// 10 s, where the default would allow 3.
async fn check_poll_interval(t: &TestStack) {
    let ticks = || async {
        t.stack
            .scrape(Container::Reaper)
            .await
            .map(|s| s.sum("tcab_dispatcher_tick_duration_seconds_count", &[]))
    };
    let before = ticks().await.expect("scrape");
    wait_for("20 reaper ticks", Duration::from_secs(10), || async {
        Ok((ticks().await? >= before + 20.0).then_some(()))
    })
    .await
    .unwrap_or_else(|e| t.fail(e));
}

/// `extraEnv`: each of the three containers' processes holds the variable
/// in its environment (as the kernel keeps it).
fn check_extra_env(t: &TestStack) {
    let wanted = format!("CHART_VALUES_PROBE={}", t.ns());
    let mut found = BTreeSet::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let dir = entry.path();
        let Ok(environ) = std::fs::read(dir.join("environ")) else {
            continue;
        };
        if !environ.split(|b| *b == 0).any(|v| v == wanted.as_bytes()) {
            continue;
        }
        let cmdline = std::fs::read(dir.join("cmdline")).unwrap_or_default();
        let argv0 = cmdline.split(|b| *b == 0).next().unwrap_or_default();
        let name = String::from_utf8_lossy(argv0);
        found.insert(name.rsplit('/').next().unwrap_or_default().to_owned());
    }
    assert_eq!(
        found,
        BTreeSet::from(["tcab-admitter", "tcab-lease-keeper", "tcab-reaper"].map(String::from)),
        "the processes with {wanted}"
    );
}

/// `dispatcher.orphanSweep`, `orphanGraceSeconds` and
/// `orphanSweepIntervalSeconds`: a sandbox pod of a job nobody drives is
/// swept within seconds (the defaults would keep it ten minutes).
async fn check_orphan_sweep(t: &TestStack) {
    let ns = t.ns();
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "orphan-sandbox",
            "labels": {"app.kubernetes.io/managed-by": "tcab-driver", "tcab.dev/job-id": "nobodys"}},
        "spec": {"restartPolicy": "Never",
            "containers": [{"name": "sandbox", "image": "tcab-sandbox:sim"}]}});
    t.stack
        .cluster
        .post(&format!("/api/v1/namespaces/{ns}/pods"), pod)
        .await
        .expect("an orphaned sandbox");
    // Deleted by the chart's ServiceAccount, by the audit log.
    wait_for("the orphan swept", LIMIT, || async {
        let swept = Audit::of_release(t).timeline.iter().any(|e| {
            e.kind == "Pod"
                && e.name == "orphan-sandbox"
                && (e.event == "DELETED" || e.deleting)
                && e.actor == Actor::Rbac
        });
        Ok(swept.then_some(()))
    })
    .await
    .unwrap_or_else(|e| t.fail(e));
}

/// `dispatcher.logTailLines`: the death report of an OOM-killed driver
/// that logged more lines quotes exactly two.
async fn check_log_tail_lines(t: &TestStack, id: &str) {
    let driver = t.running_driver(id, LIMIT).await;
    t.admin()
        .oom_kill(&t.ns(), &name_of(&driver))
        .await
        .expect("oom kill");
    let job = t
        .run_until(id, "the death report", LIMIT, |j| j["state"] == "failed")
        .await;
    let detail = job["detail"].as_str().unwrap_or_default();
    let (_, tail) = detail
        .split_once("--- last log lines ---\n")
        .unwrap_or_else(|| panic!("no log tail: {detail}"));
    let lines: Vec<&str> = tail.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(lines.len(), 2, "{detail}");
}

/// `dispatcher.startGraceSeconds`: a publisher whose image cannot be pulled
/// is judged never to start and its Job deleted within seconds (the
/// default grace is five minutes).
async fn check_start_grace(t: &TestStack) {
    t.admin()
        .set_unpullable(PUBLISHER_IMAGE, true)
        .await
        .expect("unpullable");
    let id = t
        .stack
        .backend
        .enqueue_publish(json!({"release": "never", "sim": {"duration_ms": 100}}))
        .await
        .expect("enqueue publish");
    // Created and deleted by the chart's ServiceAccount, by the audit log
    // (the Job may come and go between two reads of the API).
    wait_for(
        "the never-starting publisher's Job deleted",
        LIMIT,
        || async {
            let deleted = Audit::of_release(t).timeline.iter().any(|e| {
                e.kind == "Job"
                    && (e.event == "DELETED" || e.deleting)
                    && e.actor == Actor::Rbac
                    && e.labels.get("tcab.dev/job-id") == Some(&id)
            });
            Ok(deleted.then_some(()))
        },
    )
    .await
    .unwrap_or_else(|e| t.fail(e));
    t.admin()
        .set_unpullable(PUBLISHER_IMAGE, false)
        .await
        .expect("pullable");
}

/// `backend.timeoutSeconds`: a claim the backend holds is given up after
/// 1.5 s, as the admitter's log says (the default waits 10 s).
async fn check_backend_timeout(t: &TestStack, pod: &str) {
    t.stack
        .backend
        .add_fault(&["/jobs/next"], "stall", 5.0)
        .await
        .expect("stall the claims");
    log_line(t, pod, "admitter", "no answer within 1.5 s").await;
}

/// The chart installed once with a value off the default in every family;
/// then each family's check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_chart_value_reaches_its_binary() {
    if tcab_real_cluster::built_or_skip().is_none() {
        return;
    }
    let started = tokio::time::Instant::now();
    let t = TestStack::start(ClusterKind::Real, |o| o.start_containers = false).await;
    secret(&t, TOKEN_SECRET, json!({TOKEN_KEY: SERVICE_TOKEN})).await;
    secret(
        &t,
        DRIVER_SECRET,
        json!({"HARNESS_API_KEY": "not-a-real-key"}),
    )
    .await;
    let client = admin_client(&t).await;
    let (release, pod) = install_ready(&t, &client, &changed(&t)).await;
    let pod_name = name_of(&pod);
    eprintln!("{:>5.1}s  installed", started.elapsed().as_secs_f64());

    let hang = json!({"hang": true, "log_lines": 5});
    let id = t
        .stack
        .backend
        .enqueue_run(run("values", hang))
        .await
        .expect("enqueue");
    let publish = t
        .stack
        .backend
        .enqueue_publish(json!({"release": "r1", "sim": {"duration_ms": 60_000}}))
        .await
        .expect("enqueue publish");
    // Running: the kubelet resolved the driver's envFrom Secret.
    t.running_driver(&id, LIMIT).await;
    let claimed = t.stack.backend.job(&id).await.expect("the run");
    check_backend_token_from_existing_secret(&release, &claimed);
    check_driver_job(&job_of(&t, &id).await);
    check_publisher_job(&job_of(&t, &publish).await);
    check_metrics_endpoints(&t).await;
    check_poll_interval(&t).await;
    check_log_format_and_filter(&t, &pod_name).await;
    check_watch_timeout(&Audit::of_release(&t));
    check_extra_env(&t);
    check_orphan_sweep(&t).await;
    check_log_tail_lines(&t, &id).await;
    check_start_grace(&t).await;
    check_backend_timeout(&t, &pod_name).await;

    // The pod ran all along.
    let pods = dispatcher_pods(&t).await;
    for c in ["admitter", "lease-keeper", "reaper"] {
        let now = pods
            .iter()
            .find(|p| name_of(p) == pod_name)
            .expect("the pod");
        assert_eq!(container(now, c)["restartCount"], 0, "{c}");
    }
    Audit::of_release(&t).assert_nothing_forbidden();
    eprintln!(
        "{:>5.1}s  every family checked",
        started.elapsed().as_secs_f64()
    );
}
