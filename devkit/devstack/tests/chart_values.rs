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
//! managed-by values and a loopback `dispatcher.vaultAddr` (two releases;
//! here it is on every address, with the flag that allows it), the sandbox
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
use std::time::{Duration, Instant};
use tcab_devstack::stack::SERVICE_TOKEN;
use tcab_devstack::{Container, wait_for};
use tcab_kube_sim::audit::Actor;
use tcab_kube_sim::{ApiFaultMode, FaultRule};
use tcab_node_agent::procs::API_SERVER_ANNOTATION;

const LIMIT: Duration = Duration::from_secs(60);
const PUBLISHER_IMAGE: &str = "tcab/publisher:dev";

/// The Secret holding the backend's service token (`existingSecret`).
const TOKEN_SECRET: &str = "chart-values-backend";
const TOKEN_KEY: &str = "service-token";
/// The Secret loaded into the driver's env (`driver.secrets`).
const DRIVER_SECRET: &str = "chart-values-harness";
/// `driver.terminationGraceSeconds`.
const DRIVER_GRACE_S: u64 = 7;
/// `dispatcher.kubeTimeoutSeconds` (the binary's default: 15).
const KUBE_TIMEOUT_S: u64 = 3;
/// The proxy's delay of one call kind: past the chart's timeout, within
/// the default.
const KUBE_DELAY_S: u64 = 8;
/// `dispatcher.unschedulableGraceSeconds` (the binary's default: 1800).
const UNSCHEDULABLE_GRACE_S: u64 = 2;
/// `dispatcher.terminatingMarginSeconds` (the binary's default: 60).
const MARGIN_S: u64 = 1;

/// The values, each off the binary's default (and off the stack's).
fn changed(t: &TestStack) -> Value {
    let mut v = values(
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
                "unschedulableGraceSeconds": UNSCHEDULABLE_GRACE_S,
                "kubeTimeoutSeconds": KUBE_TIMEOUT_S,
                "terminatingMarginSeconds": MARGIN_S,
                "vaultAllowNonLoopback": true,
            },
            "driver": {
                "terminationGraceSeconds": DRIVER_GRACE_S,
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
                "podSecurityContext": {"runAsNonRoot": true, "runAsUser": 4321,
                    "seccompProfile": {"type": "RuntimeDefault"}},
                "securityContext": {"allowPrivilegeEscalation": false,
                    "capabilities": {"drop": ["ALL"]}, "readOnlyRootFilesystem": true},
            },
            "publisher": {
                "activeDeadlineSeconds": 765,
                "cpuRequest": "150m", "memoryRequest": "200Mi",
                "cpuLimit": "900m", "memoryLimit": "800Mi",
                // Off: the publisher's pod gets no pod-level context.
                "podSecurityContext": {},
                "securityContext": {"runAsUser": 1234, "allowPrivilegeEscalation": false},
            },
            "extraEnv": [{"name": "CHART_VALUES_PROBE", "value": t.ns()}],
            // The pod's calls through the stack's fault proxy (see
            // `check_kube_timeout`).
            "podAnnotations": {API_SERVER_ANNOTATION: proxy_url(t)},
        }),
    );
    // The stack's free vault port, on every address (allowed above).
    let vault = &mut v["dispatcher"]["vaultAddr"];
    let port = vault
        .as_str()
        .and_then(|a| a.rsplit_once(':'))
        .map(|(_, p)| p.to_owned());
    *vault = format!("0.0.0.0:{}", port.expect("the stack's vault port")).into();
    v
}

/// The stack's fault proxy (HTTPS, the API server's certificate).
fn proxy_url(t: &TestStack) -> String {
    let real = t.stack.real.as_ref().expect("a real cluster");
    real.proxy.url().to_owned()
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
    assert_eq!(
        pod["securityContext"],
        json!({"fsGroup": 2345, "runAsNonRoot": true, "runAsUser": 4321,
            "seccompProfile": {"type": "RuntimeDefault"}}),
        "driver.podSecurityContext, with driver.fsGroup"
    );
    assert_eq!(
        c["securityContext"],
        json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": true}),
        "driver.securityContext"
    );
    assert_eq!(
        pod["serviceAccountName"],
        tcab_devstack::real::DRIVER_SA,
        "driver.serviceAccount"
    );
}

/// `publisher.*`: the publisher Job's deadline, resources and security
/// contexts.
fn check_publisher_job(job: &Value) {
    let spec = &job["spec"];
    let pod = &spec["template"]["spec"];
    let c = &pod["containers"][0];
    // (The API server defaults an absent pod security context to `{}`.)
    let context = &pod["securityContext"];
    assert!(
        context.is_null() || *context == json!({}),
        "publisher.podSecurityContext {{}}: none at all: {context}"
    );
    assert_eq!(
        c["securityContext"],
        json!({"runAsUser": 1234, "allowPrivilegeEscalation": false}),
        "publisher.securityContext"
    );
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

/// Cordons (or uncordons) every node of the rig, as the admin.
async fn cordon(t: &TestStack, on: bool) {
    for node in tcab_devstack::real::NODES {
        t.stack
            .cluster
            .patch(
                &format!("/api/v1/nodes/{node}"),
                "application/merge-patch+json",
                json!({"spec": {"unschedulable": if on { json!(true) } else { Value::Null }}}),
            )
            .await
            .unwrap_or_else(|e| t.fail(format!("cordoning {node} ({on}): {e}")));
    }
}

/// The death report's detail of a run that failed, once it has.
async fn death_report(t: &TestStack, id: &str, limit: Duration) -> String {
    let job = t
        .run_until(id, "the death report", limit, |j| j["state"] == "failed")
        .await;
    job["detail"].as_str().unwrap_or_default().to_owned()
}

/// `dispatcher.unschedulableGraceSeconds` (2 s): with every node cordoned,
/// a run's driver pod is unschedulable, and within seconds the lease-keeper
/// judges it never to start: its death reported with the scheduler's
/// reason, its Job deleted by the chart's ServiceAccount. The default
/// would wait 30 minutes, and `startGraceSeconds` (1 s) does not apply to
/// an unschedulable pod. The nodes are uncordoned after.
async fn check_unschedulable_grace(t: &TestStack) {
    cordon(t, true).await;
    let enqueued = Instant::now();
    let id = t
        .stack
        .backend
        .enqueue_run(run("unschedulable", json!({"hang": true})))
        .await
        .expect("enqueue");
    let detail = death_report(t, &id, LIMIT).await;
    let took = enqueued.elapsed();
    wait_for("the unschedulable run's Job deleted", LIMIT, || async {
        let deleted = Audit::of_release(t).timeline.iter().any(|e| {
            e.kind == "Job"
                && (e.event == "DELETED" || e.deleting)
                && e.actor == Actor::Rbac
                && e.labels.get("tcab.dev/job-id") == Some(&id)
        });
        Ok(deleted.then_some(()))
    })
    .await
    .unwrap_or_else(|e| t.fail(e));
    cordon(t, false).await;
    for part in [
        "pod never started: pod unschedulable",
        "node(s) were unschedulable",
    ] {
        assert!(detail.contains(part), "{part:?} in {detail}");
    }
    assert!(
        took >= Duration::from_secs(UNSCHEDULABLE_GRACE_S),
        "reported {took:?} after it was enqueued, within the grace: {detail}"
    );
    eprintln!("unschedulable run reported dead {took:?} after it was enqueued");
}

/// `dispatcher.terminatingMarginSeconds` (1 s): a run whose driver pod is
/// deleted with a ten-minute grace while the driver ignores SIGTERM has a
/// Job that shows failure and cannot finish failing; the lease-keeper
/// judges it dead after the pod template's grace (7 s) plus the margin,
/// with the pod still terminating (the default margin would wait 67 s).
/// The pod is force-deleted after.
async fn check_terminating_margin(t: &TestStack) {
    let stubborn = json!({"hang": true, "ignore_sigterm": true, "log_lines": 3});
    let id = t
        .stack
        .backend
        .enqueue_run(run("stuck", stubborn))
        .await
        .expect("enqueue");
    let pod = name_of(&t.running_driver(&id, LIMIT).await);
    let deleted = Instant::now();
    t.admin()
        .delete_pod(&t.ns(), &pod, Some(600))
        .await
        .expect("delete the driver pod with a long grace");
    let limit = Duration::from_secs(DRIVER_GRACE_S + 30);
    let detail = death_report(t, &id, limit).await;
    let took = deleted.elapsed();
    let still_terminating = t
        .own_pods(&id)
        .await
        .iter()
        .any(|p| name_of(p) == pod && !p["metadata"]["deletionTimestamp"].is_null());
    t.admin()
        .delete_pod(&t.ns(), &pod, Some(0))
        .await
        .expect("force-delete the stuck pod");
    assert!(
        still_terminating,
        "judged while its pod terminates: {detail}"
    );
    assert!(detail.contains("judged dead"), "{detail}");
    let waited: u64 = detail
        .split("could not finish terminating for ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no wait in {detail}"));
    assert!(
        waited >= DRIVER_GRACE_S + MARGIN_S,
        "judged after {waited} s, before grace {DRIVER_GRACE_S} s + margin {MARGIN_S} s"
    );
    eprintln!("stuck run judged dead after {waited} s, reported {took:?} after the delete");
}

/// `dispatcher.vaultAddr` on every address (0.0.0.0) with
/// `dispatcher.vaultAllowNonLoopback`: the lease-keeper started and serves
/// the vault there (a listening socket on 0.0.0.0 at that port, and its
/// log says so), and the admitter, reaching it there, admitted the runs
/// the checks above ran. Without the flag the binary refuses the address
/// at start (`tcab-lease-keeper`'s config and `grpc::check_addr`, unit
/// tested).
async fn check_vault_non_loopback(t: &TestStack, pod: &str, vault_addr: &str) {
    let port: u16 = vault_addr
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .expect("a port");
    assert!(vault_addr.starts_with("0.0.0.0:"), "{vault_addr}");
    let line = log_line(t, pod, "lease-keeper", "serving the token vault").await;
    assert!(line.contains(vault_addr), "{line}");
    // /proc/net/tcp: local address 00000000:<port, hex>, state 0A (LISTEN).
    let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    let local = format!("00000000:{port:04X}");
    let listening = table.lines().skip(1).any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.get(1) == Some(&local.as_str()) && f.get(3) == Some(&"0A")
    });
    assert!(listening, "a listener on {local}:\n{table}");
}

/// The token the node agent handed the chart's pod: the `tokenFile` of
/// the kubeconfig in the reaper process's `KUBECONFIG`.
fn pod_token(t: &TestStack) -> String {
    let wanted = format!("CHART_VALUES_PROBE={}", t.ns());
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let dir = entry.path();
        let Ok(environ) = std::fs::read(dir.join("environ")) else {
            continue;
        };
        let vars: Vec<&[u8]> = environ.split(|b| *b == 0).collect();
        if !vars.contains(&wanted.as_bytes()) {
            continue;
        }
        let Some(path) = vars.iter().find_map(|v| v.strip_prefix(b"KUBECONFIG=")) else {
            continue;
        };
        let kubeconfig = std::fs::read_to_string(String::from_utf8_lossy(path).as_ref())
            .unwrap_or_else(|e| t.fail(format!("the pod's kubeconfig: {e}")));
        let kubeconfig: Value = serde_json::from_str(&kubeconfig).expect("a JSON kubeconfig");
        assert_eq!(
            kubeconfig["clusters"][0]["cluster"]["server"],
            proxy_url(t),
            "the pod's kubeconfig names the proxy"
        );
        let token_file = kubeconfig["users"][0]["user"]["tokenFile"]
            .as_str()
            .expect("a tokenFile");
        return std::fs::read_to_string(token_file).expect("the pod's token");
    }
    t.fail("no process of the chart's pod")
}

/// The count and sum of the Kubernetes calls that timed out, over the
/// three containers.
async fn kube_timeouts(t: &TestStack) -> (f64, f64) {
    let mut total = (0.0, 0.0);
    for c in Container::ALL {
        let scrape = t.stack.scrape(c).await.expect("scrape");
        let with = [("outcome", "timeout")];
        total.0 += scrape.sum("tcab_dispatcher_kube_request_duration_seconds_count", &with);
        total.1 += scrape.sum("tcab_dispatcher_kube_request_duration_seconds_sum", &with);
    }
    total
}

/// `dispatcher.kubeTimeoutSeconds` (3 s): the pod's calls reach the API
/// server through the stack's fault proxy (the node agent's kubeconfig
/// names it, by the pod annotation `podAnnotations` sets), and a list of
/// pods the proxy holds 8 s for the pod's token is given up after 3 s:
/// the containers' metrics count timed-out calls, each about 3 s long
/// (the default, 15 s, would have waited the 8 s out).
async fn check_kube_timeout(t: &TestStack) {
    let token = pod_token(t);
    let (count, sum) = kube_timeouts(t).await;
    let fault = t
        .admin()
        .add_fault(
            &FaultRule::new(ApiFaultMode::Delay)
                .verbs(["list"])
                .resources(["pods"])
                .token(token)
                .delay(Duration::from_secs(KUBE_DELAY_S))
                .times(1),
        )
        .await
        .expect("delay a list of pods");
    let (count, sum) = wait_for("a timed-out call", LIMIT, || async {
        let (c, s) = kube_timeouts(t).await;
        Ok((c > count).then_some((c - count, s - sum)))
    })
    .await
    .unwrap_or_else(|e| t.fail(e));
    t.admin().remove_fault(fault).await.ok();
    let each = sum / count;
    assert!(
        (KUBE_TIMEOUT_S as f64..KUBE_DELAY_S as f64).contains(&each),
        "{count} call(s) timed out after {each:.2} s each"
    );
    eprintln!("{count} call(s) timed out after {each:.2} s each");
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
    let values = changed(&t);
    let (release, pod) = install_ready(&t, &client, &values).await;
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
    let new_checks = started.elapsed();
    check_unschedulable_grace(&t).await;
    check_terminating_margin(&t).await;
    let vault_addr = values["dispatcher"]["vaultAddr"]
        .as_str()
        .unwrap_or_default();
    check_vault_non_loopback(&t, &pod_name, vault_addr).await;
    check_kube_timeout(&t).await;
    eprintln!(
        "{:>5.1}s  the grace, margin, vault and timeout checks took {:.1}s",
        started.elapsed().as_secs_f64(),
        (started.elapsed() - new_checks).as_secs_f64()
    );
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
