//! Deaths as a real cluster (Kubernetes 1.31+) shows them, end to end: the
//! three binaries as processes against kube-sim (`::sim`) or the real
//! control plane (`::real`) and the reference backend.
//!
//! Each death is reported with what the cluster showed at its first sign (a
//! disrupted pod is gone by the time its Job is `Failed`), in the kubelet's
//! words, with the pod's log tail or why there is none; a Job that cannot
//! finish failing (a lost node) is judged dead after its pods' termination
//! grace plus the margin; a pod that can never start is failed fast, its Job
//! deleted. The reaper deletes the dead driver's sandbox, never a live run's.
//!
//! The graces are set small and kube-sim runs faster than real time, so
//! the whole file takes seconds there; every wait is on an observable
//! condition. Each test also runs on the real control plane (`::real`),
//! in real time with the launcher's short node timings.
//! Drivers that must not land their own report ignore SIGTERM (a driver
//! stuck in a call): the report the backend holds is then the dispatcher's.

#[macro_use]
mod common;

use common::{ClusterKind, TestStack, lines_with, run};
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use tcab_devstack::{Container, StackOptions, wait_for};

/// Bound on every wait (catches hangs only): kube-sim's.
const LIMIT: Duration = Duration::from_secs(30);
/// The same on the real control plane, in real time: a lost node takes the
/// launcher's 10 s node-monitor grace plus the 10 s unreachable toleration
/// before the taint manager acts, and pod GC's 20 s period and 40 s
/// quarantine before a deleted Node's pods go.
const REAL_LIMIT: Duration = Duration::from_secs(100);

/// The bound on a wait of this stack's cluster.
fn limit(t: &TestStack) -> Duration {
    t.pick(LIMIT, REAL_LIMIT)
}
/// The driver pods' termination grace, in seconds (the sim's clock for the
/// kubelet, the dispatcher's real clock for its judgement).
const GRACE_S: u32 = 2;
/// TCAB_DISPATCHER_TERMINATING_MARGIN_SECONDS of the lost-node test.
const MARGIN_S: u32 = 1;
/// TCAB_DISPATCHER_START_GRACE_SECONDS and _UNSCHEDULABLE_GRACE_SECONDS.
const START_GRACE_S: u32 = 1;
const DRIVER_IMAGE: &str = "tcab/driver:dev";
const PUBLISHER_IMAGE: &str = "tcab/publisher:dev";

/// Small graces for every test of this file.
fn small_graces(o: &mut StackOptions) {
    o.driver_grace_seconds = GRACE_S;
    for (k, v) in [
        ("TCAB_DISPATCHER_TERMINATING_MARGIN_SECONDS", MARGIN_S),
        ("TCAB_DISPATCHER_START_GRACE_SECONDS", START_GRACE_S),
        ("TCAB_DISPATCHER_UNSCHEDULABLE_GRACE_SECONDS", START_GRACE_S),
    ] {
        set_env(o, k, &v.to_string());
    }
}

fn set_env(o: &mut StackOptions, name: &str, value: &str) {
    o.extra_env.retain(|(k, _)| k != name);
    o.extra_env.push((name.to_owned(), value.to_owned()));
}

/// A driver that never finishes and ignores SIGTERM (it hands nothing over).
fn stubborn() -> Value {
    json!({"hang": true, "ignore_sigterm": true, "log_lines": 3})
}

fn name_of(pod: &Value) -> String {
    pod["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn node_of(pod: &Value) -> String {
    pod["spec"]["nodeName"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn detail(job: &Value) -> &str {
    job["detail"].as_str().unwrap_or_default()
}

fn has_condition(obj: &Value, kind: &str) -> bool {
    obj["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == kind && c["status"] == "True")
    })
}

/// The death report of a run, as the backend holds it: failed as
/// infrastructure (retried), through the death path, not the lost one.
fn assert_reported_dead(t: &TestStack, job: &Value) {
    if job["state"] != "failed" || job["failure_kind"] != "infrastructure" || job["lost"] != false {
        t.fail(format!("not a death report: {job}"));
    }
}

/// The detail names each of `parts`.
fn assert_detail(t: &TestStack, what: &str, job: &Value, parts: &[&str]) {
    let d = detail(job);
    for p in parts {
        if !d.contains(p) {
            t.fail(format!("{what}: the detail lacks {p:?}:\n{d}"));
        }
    }
}

/// Every dispatcher pod of `id` is gone (so a report naming what the pod
/// showed used what was captured at the first sign).
async fn assert_pod_gone(t: &TestStack, id: &str) {
    let left = t.own_pods(id).await;
    if !left.is_empty() {
        t.fail(format!("the driver pod of {id} is still there: {left:?}"));
    }
}

/// The Eviction API, preemption and the kubelet's node-pressure eviction,
/// each on a driver that ignores SIGTERM: reported as such, with the log
/// tail read at the first sign (the evicted and preempted pods are gone
/// when their Jobs turn Failed; the kubelet-evicted one is kept, Failed,
/// `Evicted`, and on the real cluster its container is already removed, so
/// its tail is the kubelet's error). Their sandboxes are reaped; a live
/// run's is not.
async fn evictions_and_preemptions_are_reported_as_such_with_the_log_tail(kind: ClusterKind) {
    let t = TestStack::start(kind, |o| {
        small_graces(o);
        o.cluster_speed = 4.0;
        o.cluster_nodes = 3;
    })
    .await;
    let mut ids = Vec::new();
    for case in ["evicted", "preempted", "kubelet-evicted", "bystander"] {
        let id = t
            .stack
            .backend
            .enqueue_run(run(case, stubborn()))
            .await
            .expect("enqueue");
        ids.push(id);
    }
    let mut pods = Vec::new();
    for id in &ids {
        pods.push(name_of(&t.running_driver(id, limit(&t)).await));
    }
    let admin = t.admin();
    admin.evict(&t.ns(), &pods[0]).await.expect("evict");
    // kube-sim preempts on its call; on the real control plane the
    // scheduler preempts the pod for one of a higher priority that fits its
    // node only without it (`ClusterAdmin::preempt`). A cluster that could
    // not would leave its run a second bystander.
    let preempted = t
        .supported("preempt", admin.preempt(&t.ns(), &pods[1]).await)
        .is_some();
    admin
        .kubelet_evict(&t.ns(), &pods[2], "memory")
        .await
        .expect("kubelet evict");

    let started = Instant::now();
    let expected: [(&str, &[&str]); 3] = [
        (
            "evicted",
            &["pod evicted (DisruptionTarget: EvictionByEvictionAPI"],
        ),
        (
            "preempted",
            &["pod preempted (DisruptionTarget: PreemptionByScheduler"],
        ),
        (
            "kubelet-evicted",
            &[
                "pod evicted by the kubelet (node pressure) (DisruptionTarget: TerminationByKubelet: The node was low on resource: memory.",
                "(Evicted)",
            ],
        ),
    ];
    for (i, (what, parts)) in expected.iter().enumerate() {
        if i == 1 && !preempted {
            continue;
        }
        let job = t
            .run_until(&ids[i], "the death report", limit(&t), |j| {
                j["state"] != "running"
            })
            .await;
        eprintln!(
            "{what}: reported {:?} after the disruption",
            started.elapsed()
        );
        assert_reported_dead(&t, &job);
        assert_detail(&t, what, &job, parts);
        if *what == "kubelet-evicted" && kind == ClusterKind::Real {
            // A real kubelet removes an evicted pod's dead container, and
            // its log file, as it sees it exit, which is also when it
            // writes the pod Failed: the log then answers 200 with the
            // kubelet's error as its text, and that is what the report
            // carries (the node agent removes it as the kubelet does;
            // kube-sim keeps the log).
            assert_detail(
                &t,
                what,
                &job,
                &[
                    "--- last log lines ---",
                    "unable to retrieve container logs for containerd://",
                ],
            );
            continue;
        }
        assert_detail(
            &t,
            what,
            &job,
            &["--- last log lines ---", "running: step 3/3", "hanging"],
        );
    }
    // Evicted and preempted pods went after their termination; the report
    // names what their pods showed at the first sign.
    assert_pod_gone(&t, &ids[0]).await;
    if preempted {
        assert_pod_gone(&t, &ids[1]).await;
    }
    // The kubelet keeps its evicted pod, Failed with reason Evicted.
    let kept = t.own_pods(&ids[2]).await;
    if kept.len() != 1
        || kept[0]["status"]["phase"] != "Failed"
        || kept[0]["status"]["reason"] != "Evicted"
    {
        t.fail(format!(
            "the kubelet-evicted pod is kept Failed/Evicted: {kept:?}"
        ));
    }

    for (i, id) in ids[..3].iter().enumerate() {
        if i != 1 || preempted {
            t.sandboxes_reaped(id, limit(&t)).await;
        }
    }
    let bystander = &ids[3];
    let job = t.stack.backend.job(bystander).await.expect("bystander");
    assert_eq!(job["state"], "running", "the bystander runs on: {job}");
    assert_eq!(
        t.sandboxes_of(bystander).await.len(),
        1,
        "its sandbox is kept"
    );
    assert!(
        !t.reaped_any_of(bystander),
        "a live run's sandbox was reaped:\n{}",
        t.logs()
    );
    assert_eq!(
        t.stack
            .log(Container::LeaseKeeper)
            .matches("reported dead")
            .count(),
        if preempted { 3 } else { 2 },
        "each death reported once:\n{}",
        t.logs()
    );
}

/// An evicted driver that handles SIGTERM but whose own failed report
/// cannot land (the backend errs on every status report for a while): it
/// exits within moments of the SIGTERM and its pod goes, yet the
/// dispatcher's report, landing once the backend answers again, names the
/// eviction and carries the log tail read at the first sign.
async fn an_evicted_driver_whose_handover_fails_is_reported_as_evicted(kind: ClusterKind) {
    let t = TestStack::start(kind, |o| {
        small_graces(o);
        o.cluster_speed = 4.0;
    })
    .await;
    let id = t
        .stack
        .backend
        .enqueue_run(run("handover-fails", json!({"hang": true, "log_lines": 3})))
        .await
        .expect("enqueue");
    let pod = name_of(&t.running_driver(&id, limit(&t)).await);
    t.stack
        .backend
        .add_fault(&["/jobs/*/status"], "error", 2.0)
        .await
        .expect("fault");
    t.admin().evict(&t.ns(), &pod).await.expect("evict");
    let job = t
        .run_until(&id, "the death report", limit(&t), |j| {
            j["state"] != "running"
        })
        .await;
    assert_reported_dead(&t, &job);
    assert_detail(
        &t,
        "evicted, handover failed",
        &job,
        &[
            "pod evicted (DisruptionTarget: EvictionByEvictionAPI",
            "--- last log lines ---",
            "running: step 3/3",
            "hanging",
        ],
    );
    assert_pod_gone(&t, &id).await;
}

/// A NoExecute taint on a live node (patched onto the Node as `kubectl
/// taint` does): the taint manager deletes the driver at once; it is
/// reported as a taint-manager deletion with the log tail its still-running
/// kubelet served at the first sign, and its sandbox is reaped.
async fn a_noexecute_taint_on_a_live_node_is_reported_with_the_log_tail(kind: ClusterKind) {
    let t = TestStack::start(kind, |o| {
        small_graces(o);
        o.cluster_speed = 4.0;
    })
    .await;
    let id = t
        .stack
        .backend
        .enqueue_run(run("tainted", stubborn()))
        .await
        .expect("enqueue");
    let pod = t.running_driver(&id, limit(&t)).await;
    let node = node_of(&pod);
    let sandbox_node = node_of(&t.sandboxes_of(&id).await[0]);
    // kubectl taint nodes <node> example.com/maintenance=now:NoExecute
    t.stack
        .cluster
        .patch(
            &format!("/api/v1/nodes/{node}"),
            "application/strategic-merge-patch+json",
            json!({"spec": {"taints": [
                {"key": "example.com/maintenance", "value": "now", "effect": "NoExecute"}
            ]}}),
        )
        .await
        .expect("taint the node");
    let job = t
        .run_until(&id, "the death report", limit(&t), |j| {
            j["state"] != "running"
        })
        .await;
    assert_reported_dead(&t, &job);
    assert_detail(
        &t,
        "taint",
        &job,
        &[
            "pod deleted by the taint manager",
            "DisruptionTarget: DeletionByTaintManager",
            "--- last log lines ---",
            "running: step 3/3",
        ],
    );
    assert_pod_gone(&t, &id).await;
    if sandbox_node != node {
        t.sandboxes_reaped(&id, limit(&t)).await;
    } else {
        // On the tainted node the taint manager deletes it too.
        wait_for("the sandbox gone", limit(&t), || async {
            Ok(t.sandboxes_of(&id)
                .await
                .iter()
                .all(|p| !p["metadata"]["deletionTimestamp"].is_null())
                .then_some(()))
        })
        .await
        .unwrap_or_else(|e| t.fail(e));
    }
}

/// A hung driver that outlives its Job's activeDeadlineSeconds: the Job
/// gets FailureTarget `DeadlineExceeded` and its pod is deleted; the driver
/// ignores SIGTERM and is SIGKILLed at the end of its grace. The report
/// names the deadline (why the pod was deleted), with the log tail.
async fn a_driver_past_its_deadline_is_reported_as_such(kind: ClusterKind) {
    let t = TestStack::start(kind, |o| {
        small_graces(o);
        o.cluster_speed = 4.0;
        set_env(o, "TCAB_DISPATCHER_DRIVER_ACTIVE_DEADLINE_SECONDS", "8");
    })
    .await;
    let id = t
        .stack
        .backend
        .enqueue_run(run("deadline", stubborn()))
        .await
        .expect("enqueue");
    t.running_driver(&id, limit(&t)).await;
    let job = t
        .run_until(&id, "the death report", limit(&t), |j| {
            j["state"] != "running"
        })
        .await;
    assert_reported_dead(&t, &job);
    assert_detail(
        &t,
        "deadline",
        &job,
        &[
            "Job DeadlineExceeded: Job was active longer than specified deadline",
            "--- last log lines ---",
            "running: step 3/3",
        ],
    );
    assert_pod_gone(&t, &id).await;
    t.sandboxes_reaped(&id, limit(&t)).await;
}

/// The driver's machine crashes (its Node object stays): after the node
/// monitor's grace and the 300 s toleration (sim time) the taint manager
/// marks the pod for deletion, the Job shows FailureTarget, and with no
/// kubelet left the pod never finishes terminating, so the Job never turns
/// Failed. The dispatcher judges it dead after the pod's termination grace
/// plus the margin: it stops renewing the lease, reports the death naming
/// the lost node (its log unreadable, and said so), and the reaper deletes
/// the sandbox. A run on another node is left alone.
async fn a_lost_node_is_judged_dead_after_grace_and_margin(kind: ClusterKind) {
    let t = TestStack::start(kind, |o| {
        small_graces(o);
        o.cluster_speed = 100.0;
        o.cluster_nodes = 3;
        o.rust_log = "info,tcab_lease_keeper=debug".into();
    })
    .await;
    let id = t
        .stack
        .backend
        .enqueue_run(run("lost-node", json!({"hang": true, "log_lines": 3})))
        .await
        .expect("enqueue");
    let pod = t.running_driver(&id, limit(&t)).await;
    let node = node_of(&pod);
    let bystander = t
        .stack
        .backend
        .enqueue_run(run("bystander", json!({"hang": true})))
        .await
        .expect("enqueue");
    let other = t.running_driver(&bystander, limit(&t)).await;
    if node_of(&other) == node {
        t.fail("the bystander's driver shares the lost node; the scheduler spreads them");
    }
    let crashed_at = Instant::now();
    t.admin().crash_node(&node).await.expect("crash");

    // The taint manager's deletion: the first sign.
    let name = name_of(&pod);
    wait_for("the taint manager's deletion", limit(&t), || async {
        let pods = t.own_pods(&id).await;
        Ok(pods
            .iter()
            .any(|p| {
                name_of(p) == name
                    && !p["metadata"]["deletionTimestamp"].is_null()
                    && has_condition(p, "DisruptionTarget")
            })
            .then_some(()))
    })
    .await
    .unwrap_or_else(|e| t.fail(e));
    let first_sign = Instant::now();
    eprintln!(
        "taint manager deleted the pod {:?} after the crash",
        crashed_at.elapsed()
    );

    let job = t
        .run_until(&id, "the death report", limit(&t), |j| {
            j["state"] != "running"
        })
        .await;
    eprintln!(
        "reported {:?} after the first sign was seen",
        first_sign.elapsed()
    );
    assert_reported_dead(&t, &job);
    assert_detail(
        &t,
        "lost node",
        &job,
        &[
            &format!("node {node} lost: the pod could not finish terminating for "),
            "judged dead",
            "DeletionByTaintManager",
            "logs unreadable: ",
        ],
    );
    // Judged on the dispatcher's own clock, no earlier than grace + margin.
    let waited: u64 = detail(&job)
        .split("could not finish terminating for ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| t.fail(format!("no wait in {}", detail(&job))));
    assert!(
        waited >= u64::from(GRACE_S + MARGIN_S),
        "judged after {waited} s, before grace {GRACE_S} s + margin {MARGIN_S} s"
    );
    // The Job still cannot finish failing: FailureTarget, never Failed; its
    // pod still terminating on the dead node.
    let jobs = t.jobs_of(&id).await;
    assert_eq!(jobs.len(), 1);
    assert!(
        has_condition(&jobs[0], "FailureTarget") && !has_condition(&jobs[0], "Failed"),
        "{}",
        jobs[0]["status"]
    );
    assert_eq!(
        t.own_pods(&id).await.len(),
        1,
        "the pod is stuck terminating"
    );
    // Judged once, and its lease no longer renewed from then on.
    let keeper = t.stack.log(Container::LeaseKeeper);
    let judged = lines_with(&keeper, &["judged dead", "could not finish failing"]);
    assert_eq!(judged.len(), 1, "judged once:\n{keeper}");
    let job_name = jobs[0]["metadata"]["name"].as_str().unwrap_or_default();
    wait_for("the renewals to leave its lease out", limit(&t), || async {
        let keeper = t.stack.log(Container::LeaseKeeper);
        let left_out = lines_with(&keeper, &["lease not renewed: judged dead", job_name]);
        Ok((!left_out.is_empty()).then_some(()))
    })
    .await
    .unwrap_or_else(|e| t.fail(e));

    t.sandboxes_reaped(&id, limit(&t)).await;
    let b = t.stack.backend.job(&bystander).await.expect("bystander");
    assert_eq!(b["state"], "running", "{b}");
    assert!(!t.reaped_any_of(&bystander), "{}", t.logs());
    assert_eq!(t.sandboxes_of(&bystander).await.len(), 1);
}

/// The driver's machine crashes and, once the taint manager has marked its
/// pod (the first sign, captured while the pod is still there), the
/// operator deletes the Node: pod GC force-deletes the pod, the Job turns
/// Failed, and the death is reported from what was captured, naming the
/// disruption and why the log could not be read. The sandbox is reaped.
async fn a_lost_node_whose_node_is_deleted_is_reported_from_the_first_sign(kind: ClusterKind) {
    let t = TestStack::start(kind, |o| {
        small_graces(o);
        // Not judged stuck meanwhile: the Job turns Failed first (on the
        // real cluster pod GC takes its 20 s period and 40 s quarantine).
        let margin = common::pick(kind, "60", "300");
        set_env(o, "TCAB_DISPATCHER_TERMINATING_MARGIN_SECONDS", margin);
        o.cluster_speed = 100.0;
        o.rust_log = "info,tcab_lease_keeper=debug".into();
    })
    .await;
    let id = t
        .stack
        .backend
        .enqueue_run(run("node-deleted", json!({"hang": true, "log_lines": 3})))
        .await
        .expect("enqueue");
    let pod = t.running_driver(&id, limit(&t)).await;
    let node = node_of(&pod);
    let job_name = t.jobs_of(&id).await[0]["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let crashed_at = Instant::now();
    t.admin().crash_node(&node).await.expect("crash");
    wait_for("the first sign captured", limit(&t), || async {
        let log = t.stack.log(Container::LeaseKeeper);
        let captured = lines_with(&log, &["evidence captured", &job_name]);
        Ok((!captured.is_empty()).then_some(()))
    })
    .await
    .unwrap_or_else(|e| t.fail(e));
    let pods = t.own_pods(&id).await;
    assert!(
        !pods.is_empty()
            && pods
                .iter()
                .all(|p| !p["metadata"]["deletionTimestamp"].is_null()),
        "captured at the taint manager's deletion: {pods:?}"
    );
    eprintln!(
        "{kind}: first sign captured {:?} after the crash",
        crashed_at.elapsed()
    );
    // A sandbox on the lost node goes with it (pod GC), before the reaper
    // has a dead Job to reap it for.
    let sandbox_on_lost_node = t.sandboxes_of(&id).await.iter().any(|p| node_of(p) == node);
    let deleted_at = Instant::now();
    t.admin().delete_node(&node).await.expect("delete the node");

    let job = t
        .run_until(&id, "the death report", limit(&t), |j| {
            j["state"] != "running"
        })
        .await;
    eprintln!(
        "{kind}: reported {:?} after the Node was deleted",
        deleted_at.elapsed()
    );
    assert_reported_dead(&t, &job);
    let d = detail(&job);
    assert!(
        d.contains("DisruptionTarget: DeletionByTaintManager")
            || d.contains("DisruptionTarget: DeletionByPodGC"),
        "names the node's loss: {d}"
    );
    assert_detail(&t, "node deleted", &job, &["logs unreadable: "]);
    assert!(!d.contains("judged dead"), "the Job turned Failed: {d}");
    let jobs = t.jobs_of(&id).await;
    assert!(has_condition(&jobs[0], "Failed"), "{}", jobs[0]["status"]);
    assert_pod_gone(&t, &id).await;
    if sandbox_on_lost_node {
        wait_for("the sandbox gone with its node", limit(&t), || async {
            Ok(t.sandboxes_of(&id).await.is_empty().then_some(()))
        })
        .await
        .unwrap_or_else(|e| t.fail(e));
    } else {
        t.sandboxes_reaped(&id, limit(&t)).await;
    }
}

/// What a never-starting run must show: its death reported with `parts`
/// in the detail after the grace, its Job deleted, no sandbox ever made.
async fn assert_never_started(t: &TestStack, id: &str, enqueued: Instant, parts: &[&str]) {
    let job = t
        .run_until(id, "the death report", limit(t), |j| j["state"] == "failed")
        .await;
    eprintln!(
        "{id}: failed {:?} after it was enqueued",
        enqueued.elapsed()
    );
    assert_reported_dead(t, &job);
    assert_detail(t, "never started", &job, parts);
    assert_detail(
        t,
        "never started",
        &job,
        &["logs unreadable: the container never started"],
    );
    wait_for("its Job deleted", limit(t), || async {
        Ok(t.jobs_of(id).await.is_empty().then_some(()))
    })
    .await
    .unwrap_or_else(|e| t.fail(e));
    let keeper = t.stack.log(Container::LeaseKeeper);
    let judged = lines_with(&keeper, &["judged dead: the pod can never start", id]);
    let waited = judged
        .first()
        .and_then(|l| l.split("waited_s=").nth(1))
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or_else(|| t.fail(format!("no judgement logged:\n{keeper}")));
    assert!(
        waited >= u64::from(START_GRACE_S),
        "judged after {waited} s, within the grace"
    );
    // Logged once the delete was answered, which may come after the Job is
    // seen gone.
    wait_for("the Job's deletion logged", limit(t), || async {
        let keeper = t.stack.log(Container::LeaseKeeper);
        let deleted = lines_with(&keeper, &["deleted a Job whose pod can never start", id]);
        Ok((!deleted.is_empty()).then_some(()))
    })
    .await
    .unwrap_or_else(|e| t.fail(e));
    assert!(t.sandboxes_of(id).await.is_empty());
    // The deleted Job's Events outlive it: reported dead, then deleted
    // because its pod can never start, each naming the cause.
    let cause = parts[0].trim_start_matches("pod never started: ");
    for reason in ["ReportedDead", "DeletedNeverStarted"] {
        let event = t.job_event(id, reason, "lease-keeper", limit(t)).await;
        let note = event["message"].as_str().unwrap_or_default();
        if event["type"] != "Warning" || !note.contains(cause) {
            t.fail(format!("{reason} without {cause:?}: {event}"));
        }
    }
}

/// The driver and publisher images cannot be pulled (ErrImagePull, then
/// ImagePullBackOff): after the start grace the run is reported dead naming
/// the image, and the publish (whose Job is deleted the same way) is
/// reported lost once its lease lapses, naming the cause.
async fn an_image_that_cannot_be_pulled_fails_fast(kind: ClusterKind) {
    let t = TestStack::start(kind, |o| {
        small_graces(o);
        o.cluster_speed = 4.0;
    })
    .await;
    for image in [DRIVER_IMAGE, PUBLISHER_IMAGE] {
        t.admin()
            .set_unpullable(image, true)
            .await
            .expect("unpullable");
    }
    let enqueued = Instant::now();
    let id = t
        .stack
        .backend
        .enqueue_run(run("bad-image", json!({"hang": true})))
        .await
        .expect("enqueue");
    let publish = t
        .stack
        .backend
        .enqueue_publish(json!({"release": "r1", "sim": {"hang": true}}))
        .await
        .expect("enqueue publish");
    let pull_failed = format!("pod never started: image pull failed for {DRIVER_IMAGE}: ");
    // kube-sim at 4x shows ImagePullBackOff within the 1 s start grace; the
    // real node agent (1 s first back-off) may still show the first
    // ErrImagePull when the grace is up: either is the cause.
    let parts: &[&str] = match kind {
        ClusterKind::Sim => &[&pull_failed, "ImagePullBackOff"],
        ClusterKind::Real => &[&pull_failed],
    };
    assert_never_started(&t, &id, enqueued, parts).await;
    // The publisher's Job is deleted too; its lease then lapses (one lease
    // length of backend time) and it is reported lost with the cause.
    wait_for("the publisher Job deleted", limit(&t), || async {
        Ok(t.jobs_of(&publish).await.is_empty().then_some(()))
    })
    .await
    .unwrap_or_else(|e| t.fail(e));
    t.stack.backend.advance_clock(125).await.expect("advance");
    let p = t
        .publish_until(&publish, "the lost report", limit(&t), |p| {
            p["state"] != "dispatched"
        })
        .await;
    assert_eq!(p["state"], "failed", "{p}");
    let d = detail(&p);
    assert!(
        d.contains("publisher Job")
            && d.contains("never started")
            && d.contains(&format!("image pull failed for {PUBLISHER_IMAGE}")),
        "{d}"
    );
}

/// The driver's env names a Secret that does not exist
/// (CreateContainerConfigError): failed fast, naming the Secret.
async fn a_missing_secret_fails_fast(kind: ClusterKind) {
    let t = TestStack::start(kind, |o| {
        small_graces(o);
        o.cluster_speed = 4.0;
        set_env(o, "TCAB_DRIVER_SECRETS", "no-such-secret");
    })
    .await;
    let enqueued = Instant::now();
    let id = t
        .stack
        .backend
        .enqueue_run(run("no-secret", json!({"hang": true})))
        .await
        .expect("enqueue");
    assert_never_started(
        &t,
        &id,
        enqueued,
        &[
            "container configuration error",
            "CreateContainerConfigError: secret \"no-such-secret\" not found",
        ],
    )
    .await;
}

/// The driver asks for more memory than any node has (Unschedulable):
/// failed fast after the unschedulable grace, naming the resource.
async fn an_unschedulable_request_fails_fast(kind: ClusterKind) {
    let t = TestStack::start(kind, |o| {
        small_graces(o);
        set_env(o, "TCAB_DISPATCHER_DRIVER_MEMORY_REQUEST", "64Gi");
    })
    .await;
    let enqueued = Instant::now();
    let id = t
        .stack
        .backend
        .enqueue_run(run("too-big", json!({"hang": true})))
        .await
        .expect("enqueue");
    assert_never_started(
        &t,
        &id,
        enqueued,
        &[
            "pod never started: pod unschedulable",
            "Insufficient memory",
        ],
    )
    .await;
}

/// An OOM kill and a plain SIGKILL (the runtime stops a driver that ignores
/// SIGTERM; SIGKILL when its grace runs out), each worded as the kubelet
/// records it (only `OOMKilled` is an OOM kill; exit code 137 otherwise
/// reads as SIGKILL), with the log tail; both sandboxes reaped.
async fn an_oom_kill_and_a_sigkill_are_worded_as_the_kubelet_does(kind: ClusterKind) {
    let t = TestStack::start(kind, |o| {
        small_graces(o);
        o.cluster_speed = 4.0;
    })
    .await;
    let oom = t
        .stack
        .backend
        .enqueue_run(run("oom", json!({"hang": true, "log_lines": 3})))
        .await
        .expect("enqueue");
    let killed = t
        .stack
        .backend
        .enqueue_run(run("sigkill", stubborn()))
        .await
        .expect("enqueue");
    let oom_pod = name_of(&t.running_driver(&oom, limit(&t)).await);
    let killed_pod = name_of(&t.running_driver(&killed, limit(&t)).await);
    let struck = Instant::now();
    t.admin().oom_kill(&t.ns(), &oom_pod).await.expect("oom");
    t.admin()
        .kill(&t.ns(), &killed_pod, f64::from(GRACE_S))
        .await
        .expect("kill");

    let job = t
        .run_until(&oom, "the OOM death", limit(&t), |j| {
            j["state"] != "running"
        })
        .await;
    eprintln!("{kind}: OOM kill reported {:?} after it", struck.elapsed());
    assert_reported_dead(&t, &job);
    assert_detail(
        &t,
        "oom",
        &job,
        &[
            "container driver OOMKilled (exit code 137)",
            "--- last log lines ---",
            "running: step 3/3",
        ],
    );
    assert!(!detail(&job).contains("SIGKILL"), "{}", detail(&job));

    let job = t
        .run_until(&killed, "the SIGKILL death", limit(&t), |j| {
            j["state"] != "running"
        })
        .await;
    eprintln!(
        "{kind}: SIGKILL after a {GRACE_S} s grace reported {:?} after the kill",
        struck.elapsed()
    );
    assert_reported_dead(&t, &job);
    assert_detail(
        &t,
        "sigkill",
        &job,
        &[
            "container driver killed by SIGKILL (exit code 137) (Error)",
            "--- last log lines ---",
            "received SIGTERM; ignoring it",
        ],
    );
    assert!(!detail(&job).contains("OOM"), "{}", detail(&job));
    for id in [&oom, &killed] {
        t.sandboxes_reaped(id, limit(&t)).await;
    }
    // The OOM-killed driver's Job tells both: reported dead with its cause
    // (never the log tail), and its sandbox reaped.
    let dead = t
        .job_event(&oom, "ReportedDead", "lease-keeper", limit(&t))
        .await;
    let note = dead["message"].as_str().unwrap_or_default();
    if dead["type"] != "Warning"
        || !note.contains("container driver OOMKilled (exit code 137)")
        || note.contains("running: step")
    {
        t.fail(format!("ReportedDead: {dead}"));
    }
    let reaped = t
        .job_event(&oom, "SandboxReaped", "reaper", limit(&t))
        .await;
    let note = reaped["message"].as_str().unwrap_or_default();
    if reaped["type"] != "Normal"
        || !note.contains("driver Job")
        || reaped["involvedObject"] != dead["involvedObject"]
    {
        t.fail(format!("SandboxReaped: {reaped}"));
    }
}

/// Starts a publish whose publisher hangs, OOM-kills its pod (no result
/// lands, the pod is kept, the Job turns Failed); returns the publish id.
async fn a_publisher_oom_killed(t: &TestStack) -> String {
    let id = t
        .stack
        .backend
        .enqueue_publish(json!({"release": "r1", "sim": {"hang": true}}))
        .await
        .expect("enqueue publish");
    let pod = wait_for("the publisher running", limit(t), || async {
        Ok(t.own_pods(&id)
            .await
            .into_iter()
            .find(|p| p["status"]["phase"] == "Running"))
    })
    .await
    .unwrap_or_else(|e| t.fail(e));
    t.admin()
        .oom_kill(&t.ns(), &name_of(&pod))
        .await
        .expect("oom");
    wait_for("the publisher Job Failed", limit(t), || async {
        Ok(t.jobs_of(&id)
            .await
            .iter()
            .any(|j| has_condition(j, "Failed"))
            .then_some(()))
    })
    .await
    .unwrap_or_else(|e| t.fail(e));
    id
}

/// A publisher that died without its result landing is reported lost once
/// its lease lapses, and the detail names the dead pod's reason.
async fn a_lost_publish_names_the_publisher_pods_reason(kind: ClusterKind) {
    let t = TestStack::start(kind, small_graces).await;
    let id = a_publisher_oom_killed(&t).await;
    let before = t.stack.backend.publish_job(&id).await.expect("publish");
    assert_eq!(before["state"], "dispatched", "not before its lease lapses");
    t.stack.backend.advance_clock(125).await.expect("advance");
    let p = t
        .publish_until(&id, "the lost report", limit(&t), |p| {
            p["state"] != "dispatched"
        })
        .await;
    assert_eq!(p["state"], "failed", "{p}");
    let d = detail(&p);
    assert!(
        d.contains("publisher Job") && d.contains("container publisher OOMKilled (exit code 137)"),
        "{d}"
    );
}

/// While the publish renewals fail, no publish is judged, even one whose
/// lease has lapsed and whose publisher is dead; once a renewal succeeds
/// again, it is reported lost.
async fn no_publish_is_judged_on_a_tick_whose_publish_renewal_failed(kind: ClusterKind) {
    let t = TestStack::start(kind, |o| {
        small_graces(o);
        o.rust_log = "info,tcab_lease_keeper=debug".into();
    })
    .await;
    let id = a_publisher_oom_killed(&t).await;
    let unhealthy = "the lane's renewals are not healthy; lost jobs not judged";
    let unhealthy_ticks = |t: &TestStack| {
        lines_with(
            &t.stack.log(Container::LeaseKeeper),
            &[unhealthy, "lane=publish"],
        )
        .len()
    };
    t.stack
        .backend
        .add_fault(&["/publish-jobs/leases"], "error", 4.0)
        .await
        .expect("fault");
    let failed_renewals = |t: &TestStack| {
        lines_with(
            &t.stack.log(Container::LeaseKeeper),
            &["lease renewal failed", "lane=publish"],
        )
        .len()
    };
    wait_for("a failed publish renewal", limit(&t), || async {
        Ok((failed_renewals(&t) > 0).then_some(()))
    })
    .await
    .unwrap_or_else(|e| t.fail(e));
    t.stack.backend.advance_clock(125).await.expect("advance");
    let seen = unhealthy_ticks(&t);
    wait_for("ticks that skip the publish lane", limit(&t), || async {
        Ok((unhealthy_ticks(&t) >= seen + 3).then_some(()))
    })
    .await
    .unwrap_or_else(|e| t.fail(e));
    let p = t.stack.backend.publish_job(&id).await.expect("publish");
    let active = t.stack.backend.active_publishes().await.expect("active");
    assert_eq!(
        p["state"],
        "dispatched",
        "judged while its renewals failed (lease lapsed: {active}):\n{}",
        t.logs()
    );
    let p = t
        .publish_until(&id, "the lost report", limit(&t), |p| {
            p["state"] != "dispatched"
        })
        .await;
    assert_eq!(p["state"], "failed", "{p}");
    assert!(detail(&p).contains("OOMKilled"), "{}", detail(&p));
}

/// The name of the live Job of run `id`.
async fn job_name_of(t: &TestStack, id: &str) -> String {
    let jobs = t.jobs_of(id).await;
    match jobs.as_slice() {
        [job] => name_of(job),
        other => t.fail(format!("expected one Job of {id}, found {}", other.len())),
    }
}

/// A Job deleted with `--cascade=orphan` while its driver runs: the pod
/// outlives it and is still the live run. It holds its lane's slot (a cap of
/// one admits nothing else meanwhile), its lease is renewed (a backend clock
/// past the lease reports nothing lost), its sandbox is not swept, and when
/// it ends its own report stands; then the next run is admitted.
async fn a_job_deleted_with_cascade_orphan_is_still_a_live_run(kind: ClusterKind) {
    let t = TestStack::start(kind, |o| {
        small_graces(o);
        o.max_inflight = 1;
        o.orphan_grace_seconds = 1;
        set_env(o, "TCAB_DISPATCHER_ORPHAN_SWEEP_INTERVAL_SECONDS", "1");
    })
    .await;
    let id = t
        .stack
        .backend
        .enqueue_run(run(
            "orphaned",
            json!({"duration_ms": 8000, "log_lines": 2}),
        ))
        .await
        .expect("enqueue");
    let next = t
        .stack
        .backend
        .enqueue_run(run("next", json!({"duration_ms": 200})))
        .await
        .expect("enqueue");
    let pod = name_of(&t.running_driver(&id, limit(&t)).await);
    let job = job_name_of(&t, &id).await;
    t.stack
        .cluster
        .delete_job(&job, "Orphan")
        .await
        .expect("kubectl delete job --cascade=orphan");
    wait_for("the Job gone, its pod running", limit(&t), || async {
        let gone = t.jobs_of(&id).await.is_empty();
        let running = t
            .own_pods(&id)
            .await
            .iter()
            .any(|p| name_of(p) == pod && p["status"]["phase"] == "Running");
        Ok((gone && running).then_some(()))
    })
    .await
    .unwrap_or_else(|e| t.fail(e));
    let reaper_log_before = t.stack.log(Container::Reaper).len();

    // Every lease lapses at the backend's clock: only a renewal saves it.
    t.stack.backend.advance_clock(130).await.expect("clock");
    // Renewed by its pod: the lease reaches past the jump.
    wait_for(
        "the orphan's lease renewed past the jump",
        limit(&t),
        || async {
            let active = t.stack.backend.active_runs().await?;
            let now: jiff::Timestamp = active["now"].as_str().unwrap_or_default().parse()?;
            let lease = active["jobs"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|j| j["id"] == id.as_str())
                .and_then(|j| j["lease_expires_at"].as_str())
                .and_then(|l| l.parse::<jiff::Timestamp>().ok());
            Ok(lease.filter(|l| *l > now).map(drop))
        },
    )
    .await
    .unwrap_or_else(|e| t.fail(e));
    assert_eq!(
        t.stack.backend.job(&next).await.expect("job")["state"],
        "queued",
        "the orphan holds the only slot"
    );
    assert!(
        !t.sandboxes_of(&id).await.is_empty(),
        "its sandbox is not swept"
    );

    // The driver finishes on its own: its report stands, nothing is lost.
    let done = t
        .run_until(&id, "the orphan's own report", limit(&t), |j| {
            j["state"] != "running" && j["state"] != "validating" && j["state"] != "storing"
        })
        .await;
    if done["state"] != "succeeded" || done["lost"] != false {
        t.fail(format!(
            "the orphaned run did not finish on its own: {done}"
        ));
    }
    t.run_until(&next, "the next run admitted and done", limit(&t), |j| {
        j["state"] == "succeeded"
    })
    .await;
    let swept = t.stack.log(Container::Reaper)[reaper_log_before..]
        .lines()
        .filter(|l| l.contains(&format!("job_id={id}")) && l.contains("reaped"))
        .count();
    assert_eq!(
        swept,
        0,
        "the live orphan's sandbox was swept:\n{}",
        t.logs()
    );
}

/// A Job deleted with `--cascade=orphan` whose driver pod, running on
/// without it, then fails (OOM-killed, so the driver cannot report): the
/// lease-keeper reports the death with what the pod showed and its log
/// tail, naming the Job that was deleted, through the death path (not the
/// lost one, so before any lease lapses). Its sandbox is reaped.
async fn a_pod_orphaned_by_cascade_orphan_that_fails_is_reported_with_its_evidence(
    kind: ClusterKind,
) {
    let t = TestStack::start(kind, |o| {
        small_graces(o);
        // The sandbox of a run whose Job is gone is the orphan sweep's.
        o.orphan_grace_seconds = 1;
        set_env(o, "TCAB_DISPATCHER_ORPHAN_SWEEP_INTERVAL_SECONDS", "1");
    })
    .await;
    let id = t
        .stack
        .backend
        .enqueue_run(run("orphaned", json!({"hang": true, "log_lines": 3})))
        .await
        .expect("enqueue");
    let pod = name_of(&t.running_driver(&id, limit(&t)).await);
    let job = job_name_of(&t, &id).await;
    t.stack
        .cluster
        .delete_job(&job, "Orphan")
        .await
        .expect("kubectl delete job --cascade=orphan");
    wait_for("the Job gone, its pod running", limit(&t), || async {
        let gone = t.jobs_of(&id).await.is_empty();
        let running = t
            .own_pods(&id)
            .await
            .iter()
            .any(|p| name_of(p) == pod && p["status"]["phase"] == "Running");
        Ok((gone && running).then_some(()))
    })
    .await
    .unwrap_or_else(|e| t.fail(e));

    let struck = Instant::now();
    t.admin().oom_kill(&t.ns(), &pod).await.expect("oom");
    let reported = t
        .run_until(&id, "the orphan's death report", limit(&t), |j| {
            j["state"] != "running"
        })
        .await;
    eprintln!(
        "{kind}: the orphaned pod's OOM kill reported {:?} after it",
        struck.elapsed()
    );
    assert_reported_dead(&t, &reported);
    assert_detail(
        &t,
        "orphaned, then OOM-killed",
        &reported,
        &[
            &format!("Job {job} was deleted by someone other than the dispatcher"),
            "container driver OOMKilled (exit code 137)",
            "--- last log lines ---",
            "running: step 3/3",
        ],
    );
    let history = t.stack.backend.history().await.expect("history");
    let by_keeper = history.entries.iter().any(|e| {
        e.job_id == id
            && e.state == "failed"
            && e.caller
                .as_deref()
                .is_some_and(|c| c.starts_with("tcab-lease-keeper/"))
            && e.call.as_deref() == Some(format!("POST /jobs/{id}/status").as_str())
    });
    if !by_keeper {
        t.fail(format!(
            "not the lease-keeper's death report: {:#?}",
            history
                .entries
                .iter()
                .filter(|e| e.job_id == id)
                .collect::<Vec<_>>()
        ));
    }
    t.sandboxes_reaped(&id, limit(&t)).await;
}

/// A Job deleted by hand (normal propagation) while its driver runs: the
/// pod's log tail is read at once, while it terminates, and once it is
/// gone the run is reported dead as deleted by someone other than the
/// dispatcher, with that tail. Its orphaned sandbox goes with the sweep.
async fn a_job_deleted_by_hand_is_reported_with_its_evidence(kind: ClusterKind) {
    let t = TestStack::start(kind, |o| {
        small_graces(o);
        o.cluster_speed = 4.0;
        // The sandbox of a run whose Job is gone is the orphan sweep's.
        o.orphan_grace_seconds = 1;
        set_env(o, "TCAB_DISPATCHER_ORPHAN_SWEEP_INTERVAL_SECONDS", "1");
    })
    .await;
    let id = t
        .stack
        .backend
        .enqueue_run(run("deleted", stubborn()))
        .await
        .expect("enqueue");
    t.running_driver(&id, limit(&t)).await;
    let job = job_name_of(&t, &id).await;
    t.stack
        .cluster
        .delete_job(&job, "Background")
        .await
        .expect("kubectl delete job");
    let reported = t
        .run_until(&id, "the death report", limit(&t), |j| {
            j["state"] != "running"
        })
        .await;
    assert_reported_dead(&t, &reported);
    assert_detail(
        &t,
        "deleted by hand",
        &reported,
        &[
            &format!("Job {job} was deleted by someone other than the dispatcher"),
            "--- last log lines ---",
            "hanging",
        ],
    );
    assert_pod_gone(&t, &id).await;
    t.sandboxes_reaped(&id, limit(&t)).await;
}

on_both_clusters!(
    evictions_and_preemptions_are_reported_as_such_with_the_log_tail,
    an_evicted_driver_whose_handover_fails_is_reported_as_evicted,
    a_noexecute_taint_on_a_live_node_is_reported_with_the_log_tail,
    a_driver_past_its_deadline_is_reported_as_such,
    a_lost_node_is_judged_dead_after_grace_and_margin,
    a_lost_node_whose_node_is_deleted_is_reported_from_the_first_sign,
    an_image_that_cannot_be_pulled_fails_fast,
    a_missing_secret_fails_fast,
    an_unschedulable_request_fails_fast,
    an_oom_kill_and_a_sigkill_are_worded_as_the_kubelet_does,
    a_lost_publish_names_the_publisher_pods_reason,
    no_publish_is_judged_on_a_tick_whose_publish_renewal_failed,
    a_job_deleted_with_cascade_orphan_is_still_a_live_run,
    a_pod_orphaned_by_cascade_orphan_that_fails_is_reported_with_its_evidence,
    a_job_deleted_by_hand_is_reported_with_its_evidence,
);
