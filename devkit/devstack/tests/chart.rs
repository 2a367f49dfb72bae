//! The dispatcher installed from its Helm chart on the real control plane:
//! rendered by Helm's engine and created in Helm's order
//! (`tcab_devstack::chart`), its pod run by our kubelet as the locally built
//! binaries (`tcab_node_agent::procs`) with the pod's env, its
//! ServiceAccount's bound token and the chart's probes. Real cluster only
//! (one SKIP line without the control plane's binaries).

#[macro_use]
#[allow(unused_macros)]
mod common;

use common::chart::{
    Audit, RELEASE, admin_client, condition, container, dispatcher_pods, enqueue_runs, fullname,
    install_ready, name_of, ready_pod, values,
};
use common::{ClusterKind, RunBy, TestStack, run, states};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use std::time::Duration;
use tcab_devstack::chart;
use tcab_devstack::console::Backend;
use tcab_devstack::stack::{SERVICE_TOKEN, free_port};
use tcab_devstack::wait_for;
use tcab_kube_sim::audit::Actor;

/// Install, then a drain of 40 runs and 10 publishes through the chart's
/// dispatcher: every job succeeds with one Job each, neither lane above its
/// cap by the API server's audit log, nothing forbidden to the chart's
/// ServiceAccount, the pod Ready with no restart and its logs served
/// through the API. Then uninstall: the chart's objects go (the pod with
/// its Deployment), the dispatcher's Jobs stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn installed_from_the_chart_it_drains_within_the_caps_and_uninstalls() {
    if tcab_real_cluster::built_or_skip().is_none() {
        return;
    }
    let mut t = TestStack::start(ClusterKind::Real, |o| o.start_containers = false).await;
    let ns = t.ns();
    let client = admin_client(&t).await;
    let (release, pod) = install_ready(&t, &client, &values(&t, json!({}))).await;
    let kinds: Vec<&str> = release.manifests.iter().map(|m| m.kind()).collect();
    assert_eq!(
        kinds,
        [
            "ServiceAccount",
            "Secret",
            "Role",
            "RoleBinding",
            "Deployment"
        ],
        "Helm's install order"
    );
    let pod_name = name_of(&pod);

    let quick = json!({"duration_ms": 150, "log_lines": 1});
    enqueue_runs(&t.stack.backend, "case", 40, quick).await;
    for i in 0..10 {
        t.stack
            .backend
            .enqueue_publish(json!({"release": format!("r{i}"), "sim": {"duration_ms": 150}}))
            .await
            .expect("enqueue publish");
    }
    let (runs, pubs) = t.drained(Duration::from_secs(300), RunBy::Chart).await;
    assert!(
        runs.iter().chain(&pubs).all(|j| j["state"] == "succeeded"),
        "runs: {}; publishes: {}",
        states(&runs),
        states(&pubs)
    );
    assert_eq!(runs.len() + pubs.len(), 50, "no retries were needed");
    let jobs = t.jobs_by_id().await;
    assert!(
        jobs.values().all(|names| names.len() == 1),
        "one Job per backend job: {jobs:?}"
    );

    // The cluster's own record: the audit log of the namespace.
    let audit = Audit::of_release(&t);
    let created = audit
        .timeline
        .iter()
        .filter(|e| e.kind == "Job" && e.event == "ADDED" && e.actor == Actor::Rbac)
        .count();
    assert_eq!(created, 50, "the chart's ServiceAccount created every Job");
    let max = tcab_devstack::timeline::max_live_jobs(&audit.timeline);
    let lane = |l: &str| max.get(l).copied().unwrap_or(0);
    assert!(
        lane("run") <= 8 && lane("publish") <= 8,
        "caps exceeded: {max:?}"
    );
    assert_eq!(lane("run"), 8, "the run lane fills up to its cap: {max:?}");
    audit.assert_nothing_forbidden();

    // The pod ran all along: no restart, still Ready, logs through the API.
    let pods = dispatcher_pods(&t).await;
    let now = pods
        .iter()
        .find(|p| p["metadata"]["name"] == pod_name.as_str())
        .expect("the same pod");
    assert!(condition(now, "Ready"), "{}", now["status"]);
    for c in now["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
    {
        assert_eq!(c["restartCount"], 0, "{c}");
        assert_eq!(c["ready"], true, "{c}");
    }
    let logs = t
        .stack
        .cluster
        .get_text(&format!(
            "/api/v1/namespaces/{ns}/pods/{pod_name}/log?container=admitter"
        ))
        .await
        .expect("the admitter's log through the API server");
    assert!(logs.contains("tcab-admitter"), "{logs}");

    // Uninstall with three long runs in flight: what the chart made goes
    // (the pod with its Deployment), the dispatcher's Jobs stay, and so do
    // the running drivers' pods, still running.
    let long = json!({"duration_ms": 90_000, "log_lines": 1});
    let long_ids = enqueue_runs(&t.stack.backend, "long", 3, long).await;
    let selector = "tcab.dev/job-kind=run";
    let running = |pods: &[Value]| {
        pods.iter()
            .filter(|p| {
                p["status"]["phase"] == "Running"
                    && long_ids
                        .iter()
                        .any(|id| p["metadata"]["labels"]["tcab.dev/job-id"] == id.as_str())
            })
            .map(name_of)
            .collect::<Vec<_>>()
    };
    let drivers = wait_for(
        "three long drivers running",
        Duration::from_secs(90),
        || async {
            let pods = t.stack.cluster.pods(&ns, Some(selector)).await?;
            let names = running(&pods);
            Ok((names.len() == 3).then_some(names))
        },
    )
    .await
    .unwrap_or_else(|e| t.fail(e));
    chart::uninstall(&client, &release)
        .await
        .expect("uninstall");
    wait_for(
        "the dispatcher's pod gone",
        Duration::from_secs(90),
        || async { Ok(dispatcher_pods(&t).await.is_empty().then_some(())) },
    )
    .await
    .unwrap_or_else(|e| t.fail(e));
    for m in &release.manifests {
        let exists = chart::exists(&client, &release, m).await.expect("GET");
        assert!(!exists, "{} {} is still there", m.kind(), m.name());
    }
    let left = t.jobs_by_id().await;
    assert_eq!(left.len(), 53, "the dispatcher's Jobs stay: {left:?}");
    let pods = t
        .stack
        .cluster
        .pods(&ns, Some(selector))
        .await
        .expect("pods");
    let mut still = running(&pods);
    still.sort();
    let mut drivers = drivers;
    drivers.sort();
    assert_eq!(still, drivers, "the running drivers keep running");
}

/// `helm test` (issue 37 item 4): the install leaves the chart's test hook
/// out; run as `helm test` runs it (`chart::test`), its pod, which our
/// kubelet runs as the local `tcab-admitter check` with the admitter's
/// environment, the token from the chart's Secret and the chart's
/// ServiceAccount, reads the backend with the token and dry-runs both Jobs
/// through the real API server: it passes, and the passed pod is deleted.
/// With a token the backend does not hold put in that Secret (a wrong
/// rotation), the hook fails with the line naming the refused token,
/// without showing it, and its pod stays for `kubectl logs`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_test_passes_on_a_good_install_and_names_a_refused_token() {
    if tcab_real_cluster::built_or_skip().is_none() {
        return;
    }
    const WRONG_TOKEN: &str = "rotated-wrong-7Hd2-never-printed";
    let t = TestStack::start(ClusterKind::Real, |o| o.start_containers = false).await;
    let ns = t.ns();
    let client = admin_client(&t).await;
    let (release, _pod) = install_ready(&t, &client, &values(&t, json!({}))).await;
    let check_pod = format!("{}-check", fullname(RELEASE));
    let hooks: Vec<(&str, &str)> = release.hooks.iter().map(|m| (m.kind(), m.name())).collect();
    assert_eq!(hooks, [("Pod", check_pod.as_str())], "the test hook");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let hook_pod = async || pods.get_opt(&check_pod).await.expect("GET the hook's pod");
    assert!(
        hook_pod().await.is_none(),
        "the install does not run the hook"
    );

    let helm_test = async || {
        let runs = chart::test(&client, &release, Duration::from_secs(120))
            .await
            .unwrap_or_else(|e| t.fail(format!("helm test: {e:#}")));
        assert_eq!(runs.len(), 1, "one test hook");
        runs.into_iter().next().expect("its run")
    };
    let has = |log: &str, start: &str| log.lines().any(|l| l.starts_with(start));
    let run = helm_test().await;
    assert!(run.passed(), "the check failed:\n{}", run.log);
    for line in [
        "ok      backend: ",
        "ok      backend-publish: ",
        "ok      driver-job: ",
        "ok      publisher-job: ",
        "ok      jobs: ",
        "ok      pods: ",
    ] {
        assert!(has(&run.log, line), "{line}:\n{}", run.log);
    }
    let contract = format!(
        "backend contract {}",
        tcab_shared::backend::CONTRACT_VERSION
    );
    assert!(run.log.contains(&contract), "{}", run.log);
    assert!(
        !run.log.contains(SERVICE_TOKEN),
        "the token leaked:\n{}",
        run.log
    );
    assert!(hook_pod().await.is_none(), "a passed hook's pod is deleted");

    // The chart's Secret now holds a token the backend does not.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    secrets
        .patch(
            &format!("{}-backend-token", fullname(RELEASE)),
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"token": WRONG_TOKEN}})),
        )
        .await
        .expect("the Secret patched");
    let run = helm_test().await;
    assert!(!run.passed(), "a refused token passed:\n{}", run.log);
    let url = t.stack.backend.url().trim_end_matches('/');
    let refused = format!(
        "failed  backend: {url} refuses the service token (HTTP 401): TCAB_BACKEND_SERVICE_TOKEN is not a token the backend accepts; give the container the backend's service token"
    );
    assert!(
        run.log.lines().any(|l| l == refused),
        "{refused}:\n{}",
        run.log
    );
    assert!(has(&run.log, "ok      driver-job: "), "{}", run.log);
    assert!(
        !run.log.contains(WRONG_TOKEN),
        "the token leaked:\n{}",
        run.log
    );
    let kept = hook_pod().await.expect("a failed hook's pod stays");
    let phase = kept.status.and_then(|s| s.phase);
    assert_eq!(phase.as_deref(), Some("Failed"));
    let logs = t
        .stack
        .cluster
        .get_text(&format!("/api/v1/namespaces/{ns}/pods/{check_pod}/log"))
        .await
        .expect("the failed hook's log through the API server");
    assert!(logs.contains(&refused), "{logs}");
}

/// A wedged container (its process frozen, so its endpoints stop
/// answering) is found by the chart's liveness probe (here tightened
/// through the chart's values) and restarted: SIGTERM, SIGKILL after the
/// pod's grace (exit 137), `restartCount` 1 and `lastState` in the status,
/// the pod Ready again; the other containers untouched, and a drain after
/// it finishes: the system recovered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wedged_container_is_restarted_by_its_liveness_probe() {
    if tcab_real_cluster::built_or_skip().is_none() {
        return;
    }
    let mut t = TestStack::start(ClusterKind::Real, |o| o.start_containers = false).await;
    let ns = t.ns();
    let client = admin_client(&t).await;
    let probe = json!({"initialDelaySeconds": 2, "periodSeconds": 1, "timeoutSeconds": 1,
        "failureThreshold": 4});
    let tight = json!({"terminationGracePeriodSeconds": 3, "metrics": {"livenessProbe": probe}});
    let (_release, pod) = install_ready(&t, &client, &values(&t, tight)).await;
    let pod_name = name_of(&pod);
    let real = t.stack.real.as_ref().expect("a real cluster");
    let agent =
        tcab_node_agent::AdminClient::new(real.agent_url.as_deref().expect("the node agent"));
    agent
        .freeze(&ns, &pod_name, "lease-keeper")
        .await
        .expect("freeze the lease-keeper");
    let restarted = wait_for(
        "the lease-keeper restarted and the pod Ready again",
        Duration::from_secs(90),
        || async {
            let pods = dispatcher_pods(&t).await;
            Ok(pods.into_iter().find(|p| {
                p["metadata"]["name"] == pod_name.as_str()
                    && container(p, "lease-keeper")["restartCount"] == 1
                    && condition(p, "Ready")
            }))
        },
    )
    .await
    .unwrap_or_else(|e| t.fail(e));
    let lk = container(&restarted, "lease-keeper");
    let last = &lk["lastState"]["terminated"];
    assert_eq!(
        (last["exitCode"].as_i64(), last["reason"].as_str()),
        (Some(137), Some("Error")),
        "SIGKILLed after the grace, as it ignored SIGTERM: {lk}"
    );
    assert!(lk["state"]["running"].is_object(), "{lk}");
    for other in ["admitter", "reaper"] {
        assert_eq!(container(&restarted, other)["restartCount"], 0, "{other}");
    }
    let logs = t
        .stack
        .cluster
        .get_text(&format!(
            "/api/v1/namespaces/{ns}/pods/{pod_name}/log?container=lease-keeper"
        ))
        .await
        .expect("the lease-keeper's log");
    assert!(logs.contains("liveness probe failed"), "{logs}");

    let quick = json!({"duration_ms": 150, "log_lines": 1});
    enqueue_runs(&t.stack.backend, "after", 10, quick).await;
    let (runs, _) = t.drained(Duration::from_secs(180), RunBy::Chart).await;
    assert!(
        runs.iter().all(|j| j["state"] == "succeeded"),
        "runs: {}",
        states(&runs)
    );
}

/// `helm upgrade` changing the run lane's cap (4 to 6) with runs in
/// flight, under a 20 s lease and runs of 25 s, so every run outlives the
/// lease it was claimed with: the changed env rolls the pod (Recreate: the
/// old one is gone before the new one runs), the new admitter fills the
/// lane to its new cap and never above it, every run succeeds with exactly
/// one Job and no retry (nothing lost, nothing duplicated: a lease left to
/// lapse would have requeued its job), and the new lease-keeper renews the
/// leases of the Jobs the old pod created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_with_runs_in_flight_loses_and_duplicates_nothing() {
    if tcab_real_cluster::built_or_skip().is_none() {
        return;
    }
    let mut t = TestStack::start(ClusterKind::Real, |o| {
        o.start_containers = false;
        o.lease_seconds = 20;
    })
    .await;
    let client = admin_client(&t).await;
    let before = values(&t, json!({"dispatcher": {"maxInflight": 4}}));
    let mut after = before.clone();
    after["dispatcher"]["maxInflight"] = json!(6);
    let (release, old_pod) = install_ready(&t, &client, &before).await;
    let old_name = name_of(&old_pod);

    let long = json!({"duration_ms": 25_000, "log_lines": 1});
    enqueue_runs(&t.stack.backend, "up", 10, long).await;
    let live = |jobs: &[Value]| jobs.iter().filter(|j| !common::job_finished(j)).count();
    wait_for("four runs in flight", Duration::from_secs(60), || async {
        let jobs = t.stack.cluster.jobs(None).await?;
        Ok((live(&jobs) == 4).then_some(()))
    })
    .await
    .unwrap_or_else(|e| t.fail(e));

    let upgraded = chart::upgrade(&client, &release, &after)
        .await
        .unwrap_or_else(|e| t.fail(format!("upgrading: {e:#}")));
    assert_eq!(upgraded.manifests.len(), release.manifests.len());
    wait_for("the old pod gone", Duration::from_secs(90), || async {
        let pods = dispatcher_pods(&t).await;
        Ok((!pods
            .iter()
            .any(|p| p["metadata"]["name"] == old_name.as_str()))
        .then_some(()))
    })
    .await
    .unwrap_or_else(|e| t.fail(e));
    // Its processes had stopped before the pod left the API: no renewal
    // from the old pod reaches past this instant plus the lease.
    let old_gone = tokio::time::Instant::now();
    let new_pod = wait_for("the rolled pod Ready", Duration::from_secs(120), || async {
        let pods = dispatcher_pods(&t).await;
        Ok(pods.into_iter().find(|p| condition(p, "Ready")))
    })
    .await
    .unwrap_or_else(|e| t.fail(e));
    assert_ne!(new_pod["metadata"]["name"], old_name.as_str());
    let env = new_pod["spec"]["containers"][0]["env"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        env.iter()
            .any(|e| e["name"] == "TCAB_DISPATCHER_MAX_INFLIGHT" && e["value"] == "6"),
        "the new pod has the new cap: {env:?}"
    );
    // Once 4 s have passed since the old pod left, a lease reaching 17 s
    // past the backend's now (of a 20 s lease) can only come from a renewal
    // by the new pod; the runs the old pod claimed are still in flight.
    wait_for(
        "leases renewed by the new pod",
        Duration::from_secs(30),
        || async {
            let late = old_gone.elapsed() >= Duration::from_secs(4);
            Ok((late && t.leases_renewed(17).await?).then_some(()))
        },
    )
    .await
    .unwrap_or_else(|e| t.fail(e));
    let in_flight = live(&t.stack.cluster.jobs(None).await.expect("jobs"));
    assert!(in_flight > 0, "runs were in flight across the gap");

    let (runs, _) = t.drained(Duration::from_secs(240), RunBy::Chart).await;
    assert!(
        runs.iter().all(|j| j["state"] == "succeeded"),
        "runs: {}",
        states(&runs)
    );
    assert_eq!(runs.len(), 10, "no retries were needed");
    let jobs = t.jobs_by_id().await;
    assert_eq!(jobs.len(), 10, "{jobs:?}");
    assert!(
        jobs.values().all(|names| names.len() == 1),
        "one Job per backend job: {jobs:?}"
    );
    let audit = Audit::of_release(&t);
    let max = tcab_devstack::timeline::max_live_jobs(&audit.timeline);
    assert_eq!(
        max.get("run").copied(),
        Some(6),
        "the lane filled to its new cap, never above: {max:?}"
    );
    audit.assert_nothing_forbidden();
}

/// `tcab-devstack --cluster real --install chart`: the dev stack installs
/// the chart instead of starting the binaries itself, drains its demo
/// (one scripted agent failure, five successes) and exits 0; its status
/// line reads the chart's pod's metrics (the lanes at their caps of 8).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_devstack_command_runs_the_dispatcher_from_the_chart() {
    if tcab_real_cluster::built_or_skip().is_none() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_tcab-devstack"))
        .args(["--cluster", "real", "--install", "chart", "--runs", "6"])
        .args(["--publishes", "2", "--exit-when-drained", "--dir"])
        .arg(dir.path().join("stack"))
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(240), out)
        .await
        .expect("the demo drains in time")
        .expect("runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "exit {:?}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("installing the chart"), "{stdout}");
    assert!(stdout.contains("dev stack up"), "{stdout}");
    assert!(
        stdout.contains("failed 1, succeeded 5"),
        "one scripted agent failure, five successes:\n{stdout}"
    );
    assert!(
        stdout.contains("/8 (gate open)"),
        "the status line reads the chart's pod's metrics:\n{stdout}"
    );
}

/// `--install chart` on kube-sim is refused before anything starts.
#[test]
fn the_chart_needs_the_real_cluster() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tcab-devstack"))
        .args(["--cluster", "sim", "--install", "chart"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--install chart needs --cluster real"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The sandbox namespace variant: with `sandbox.namespace` another
/// namespace, the chart grants the dispatcher's ServiceAccount a Role
/// there; a driver OOM-killed with its sandbox running there is reported
/// dead (its cause and log tail read through the API) and the reaper
/// deletes its sandbox in the other namespace, with no 403.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_sandboxes_in_another_namespace_a_dead_drivers_sandbox_is_reaped_there() {
    if tcab_real_cluster::built_or_skip().is_none() {
        return;
    }
    let t = TestStack::start(ClusterKind::Real, |o| {
        o.start_containers = false;
        o.sandbox_namespace = "sandboxes".into();
    })
    .await;
    let ns = t.ns();
    let sandbox_ns = t.stack.options.sandbox_namespace.clone();
    assert_ne!(ns, sandbox_ns);
    let client = admin_client(&t).await;
    let (release, _) = install_ready(&t, &client, &values(&t, json!({}))).await;
    let roles: Vec<(String, String)> = release
        .manifests
        .iter()
        .filter(|m| m.kind().starts_with("Role"))
        .map(|m| {
            let ns = m.object["metadata"]["namespace"].as_str().unwrap_or("");
            (m.kind().to_owned(), ns.to_owned())
        })
        .collect();
    assert!(
        roles.contains(&("Role".into(), sandbox_ns.clone()))
            && roles.contains(&("RoleBinding".into(), sandbox_ns.clone())),
        "a Role and its binding in the sandbox namespace: {roles:?}"
    );

    let id = t
        .stack
        .backend
        .enqueue_run(run("oom", json!({"hang": true, "log_lines": 2})))
        .await
        .expect("enqueue");
    let limit = Duration::from_secs(60);
    let driver = name_of(&t.running_driver(&id, limit).await);
    assert!(
        t.sandboxes()
            .await
            .iter()
            .all(|p| p["metadata"]["namespace"] == sandbox_ns.as_str()),
        "the sandboxes run in the sandbox namespace"
    );
    t.admin().oom_kill(&ns, &driver).await.expect("oom kill");
    let job = t
        .run_until(&id, "the death report", limit, |j| j["state"] == "failed")
        .await;
    let detail = job["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("OOMKilled"), "detail: {detail}");
    assert!(detail.contains("last log lines"), "detail: {detail}");
    wait_for("the orphaned sandbox reaped", limit, || async {
        Ok(t.sandboxes()
            .await
            .iter()
            .all(|p| p["metadata"]["labels"]["tcab.dev/job-id"] != id.as_str())
            .then_some(()))
    })
    .await
    .unwrap_or_else(|e| t.fail(e));
    let user = common::chart::service_account_user(&ns, RELEASE);
    let audit = Audit::read(&t, &[ns.as_str(), sandbox_ns.as_str()], &user);
    // A graceful delete: the dispatcher's DELETE marks the pod (the node
    // then removes it).
    let reaped = audit.timeline.iter().any(|e| {
        e.kind == "Pod"
            && (e.event == "DELETED" || e.deleting)
            && e.namespace == sandbox_ns
            && e.actor == Actor::Rbac
    });
    assert!(reaped, "the chart's ServiceAccount deleted the sandbox");
    audit.assert_nothing_forbidden();
}

/// Two releases in one namespace, each with its own backend, its own
/// managed-by value and its drivers' own: both drain their runs; release
/// a's driver OOM-killed is reported dead to a's backend and a reaps its
/// sandbox, while b's running driver and its sandbox are left alone; by
/// the audit log neither release's ServiceAccount ever wrote an object
/// labelled as the other's, and neither met a 403.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_releases_in_one_namespace_never_touch_each_others_jobs_or_sandboxes() {
    use tcab_devstack::process::{Proc, Spec};
    if tcab_real_cluster::built_or_skip().is_none() {
        return;
    }
    let t = TestStack::start(ClusterKind::Real, |o| o.start_containers = false).await;
    let ns = t.ns();
    let bins = tcab_devstack::binaries::bin_dir().expect("bin dir");
    let (mut backend_b_proc, url_b) = Proc::start(
        Spec {
            name: "backend-sim-b".into(),
            program: tcab_devstack::binaries::path(&bins, "tcab-backend-sim"),
            args: ["--listen", "127.0.0.1:0", "--service-token", SERVICE_TOKEN]
                .map(String::from)
                .into_iter()
                .chain([
                    "--db".to_owned(),
                    t.dir.path().join("backend-b.db").display().to_string(),
                ])
                .collect(),
            env: vec![("RUST_LOG".into(), "info".into())],
            log: t.dir.path().join("backend-sim-b.log"),
        },
        true,
    )
    .await
    .expect("a second backend");
    let backend_b = Backend::new(&url_b.expect("its URL"), SERVICE_TOKEN);
    let client = admin_client(&t).await;

    let port = || free_port().expect("a free port");
    let a = values(
        &t,
        json!({"dispatcher": {"managedBy": "tcab-a", "maxInflight": 3},
            "driver": {"managedBy": "tcab-driver-a"}}),
    );
    let b = values(
        &t,
        json!({"backend": {"url": backend_b.url()},
            "dispatcher": {"managedBy": "tcab-b", "maxInflight": 3,
                "vaultAddr": format!("127.0.0.1:{}", port())},
            "driver": {"managedBy": "tcab-driver-b"},
            "metrics": {"admitterPort": port(), "leaseKeeperPort": port(), "reaperPort": port()}}),
    );
    let release_a = chart::install(&client, "a", &ns, &a)
        .await
        .expect("install a");
    let release_b = chart::install(&client, "b", &ns, &b)
        .await
        .expect("install b");
    for release in ["a", "b"] {
        ready_pod(&t, release).await;
    }
    assert_eq!(release_a.manifests.len(), release_b.manifests.len());

    let hang = |who: &str| {
        run(
            &format!("hang-{who}"),
            json!({"hang": true, "log_lines": 2}),
        )
    };
    let hang_a = t
        .stack
        .backend
        .enqueue_run(hang("a"))
        .await
        .expect("enqueue");
    let hang_b = backend_b.enqueue_run(hang("b")).await.expect("enqueue");
    let quick = json!({"duration_ms": 1000, "log_lines": 1});
    enqueue_runs(&t.stack.backend, "a", 8, quick.clone()).await;
    enqueue_runs(&backend_b, "b", 8, quick).await;

    let sandboxes = |managed_by: &'static str, id: String| {
        let cluster = t.stack.cluster.clone();
        let ns = ns.clone();
        async move {
            let selector =
                format!("app.kubernetes.io/managed-by={managed_by},tcab.dev/job-id={id}");
            cluster.pods(&ns, Some(&selector)).await.unwrap_or_default()
        }
    };
    let driver_of = |id: &str, managed_by: &str| {
        format!("tcab.dev/job-id={id},app.kubernetes.io/managed-by={managed_by}")
    };
    let limit = Duration::from_secs(90);
    let mut hang_drivers = Vec::new();
    for (id, mb, driver_mb) in [
        (&hang_a, "tcab-a", "tcab-driver-a"),
        (&hang_b, "tcab-b", "tcab-driver-b"),
    ] {
        let name = wait_for(
            "a hanging driver running with its sandbox",
            limit,
            || async {
                let pods = t.stack.cluster.pods(&ns, Some(&driver_of(id, mb))).await?;
                let running = pods.iter().find(|p| p["status"]["phase"] == "Running");
                let has_sandbox = !sandboxes(driver_mb, id.clone()).await.is_empty();
                Ok(running.filter(|_| has_sandbox).map(name_of))
            },
        )
        .await
        .unwrap_or_else(|e| t.fail(e));
        hang_drivers.push(name);
    }
    t.run_until(&hang_a, "a's hanging driver reports running", limit, |j| {
        j["state"] == "running"
    })
    .await;
    t.admin()
        .oom_kill(&ns, &hang_drivers[0])
        .await
        .expect("oom kill a's driver");
    let job = t
        .run_until(&hang_a, "a's death report", limit, |j| {
            j["state"] == "failed"
        })
        .await;
    assert!(
        job["detail"].as_str().unwrap_or("").contains("OOMKilled"),
        "{job}"
    );
    wait_for("a's orphaned sandbox reaped", limit, || async {
        Ok(sandboxes("tcab-driver-a", hang_a.clone())
            .await
            .is_empty()
            .then_some(()))
    })
    .await
    .unwrap_or_else(|e| t.fail(e));

    // The hanging runs (and the retry of a's, an infrastructure failure)
    // are left out.
    for (backend, who) in [(&t.stack.backend, "a"), (&backend_b, "b")] {
        let runs = wait_for(&format!("{who}'s quick runs done"), limit, || async {
            let runs: Vec<Value> = backend
                .jobs()
                .await?
                .into_iter()
                .filter(|j| !j["case"].as_str().unwrap_or("").starts_with("hang"))
                .collect();
            Ok(runs
                .iter()
                .all(|j| common::terminal(&j["state"]))
                .then_some(runs))
        })
        .await
        .unwrap_or_else(|e| t.fail(e));
        assert_eq!(runs.len(), 8, "{who}: no retries");
        assert!(
            runs.iter().all(|j| j["state"] == "succeeded"),
            "{who}: {}",
            states(&runs)
        );
    }
    // b's hanging driver still runs, its sandbox untouched, its job alive.
    assert_eq!(
        backend_b.job(&hang_b).await.expect("job")["state"],
        "running"
    );
    assert_eq!(sandboxes("tcab-driver-b", hang_b.clone()).await.len(), 1);
    let pods = t
        .stack
        .cluster
        .pods(&ns, Some(&driver_of(&hang_b, "tcab-b")))
        .await
        .expect("pods");
    assert!(
        pods.iter()
            .any(|p| p["metadata"]["name"] == hang_drivers[1].as_str()
                && p["status"]["phase"] == "Running"),
        "b's driver still runs"
    );

    for (me, other) in [
        ("a", ["tcab-b", "tcab-driver-b"]),
        ("b", ["tcab-a", "tcab-driver-a"]),
    ] {
        let user = common::chart::service_account_user(&ns, me);
        let audit = Audit::read(&t, &[ns.as_str()], &user);
        let mine = audit
            .timeline
            .iter()
            .filter(|e| e.actor == Actor::Rbac)
            .count();
        assert!(mine > 0, "{me} wrote its own objects");
        let trespass: Vec<String> = audit
            .timeline
            .iter()
            .filter(|e| e.actor == Actor::Rbac)
            .filter(|e| {
                other.contains(
                    &e.labels
                        .get("app.kubernetes.io/managed-by")
                        .map(String::as_str)
                        .unwrap_or(""),
                )
            })
            .map(|e| format!("{} {} {}", e.event, e.kind, e.name))
            .collect();
        assert!(
            trespass.is_empty(),
            "{me} touched the other's: {trespass:?}"
        );
        audit.assert_nothing_forbidden();
    }
    backend_b_proc.stop(Duration::from_secs(5)).await;
}
