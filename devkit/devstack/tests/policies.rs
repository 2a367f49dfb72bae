//! The cluster's own policies as inputs, end to end (issue 36): on a real
//! cluster a Job is not a pod. Each scenario sets a policy up in the
//! stack's namespace as an operator would, through the real interfaces
//! (`tcab_devstack::policy`), enqueues work, and checks that each refused
//! Job ends within the start grace with the API server's own words in its
//! report (a run's death report, a publish's lost report), that its Job
//! is gone, and, where the policy can be lifted or met, that the work
//! queued after it drains.
//!
//! PodSecurity, LimitRange, ResourceQuota and ValidatingAdmissionPolicy are
//! enforced by the real API server only (a real-only test prints one SKIP
//! line without the control plane); kube-sim refuses a missing
//! ServiceAccount as upstream does, and preempts on its admin call, so
//! those two run on both clusters.
//!
//! A Job can also have no pod with nothing refused: a Job controller that
//! is down (its controller-manager paused, real only) makes no pod and
//! records no Event. Such a Job waits past the start grace, counted and
//! logged, and is not failed; it runs once the controller is back.
//!
//! The dispatcher quotes each refusal in its logs ("pods ... is
//! forbidden: ..."); the stack's RBAC check tells those from a 403 of its
//! own (the authorizer's words, or `reason=forbidden`), and the refusal
//! scenarios check besides that the API server's audit log shows no 403
//! for the dispatcher ([`only_the_policy_refused`]).

#[macro_use]
mod common;

use common::{ClusterKind, TestStack, run, states, terminal};
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use tcab_devstack::policy::{self, ENFORCE_RESTRICTED};
use tcab_devstack::{Container, StackOptions, wait_for};

/// TCAB_DISPATCHER_START_GRACE_SECONDS of the refusal scenarios.
const START_GRACE: Duration = Duration::from_secs(6);
/// How long past the start grace a refused Job may take to end: the
/// lease-keeper's next tick, its read of the Job's Events, the report and
/// the delete.
const MARGIN: Duration = Duration::from_secs(40);
/// Bound on the waits for work that runs (catches hangs only).
const LIMIT: Duration = Duration::from_secs(90);

/// The security-context settings that, set to `{}`, give the Jobs' pods
/// none.
const SECURITY_CONTEXTS: [&str; 4] = [
    "TCAB_DISPATCHER_DRIVER_POD_SECURITY_CONTEXT",
    "TCAB_DISPATCHER_DRIVER_SECURITY_CONTEXT",
    "TCAB_DISPATCHER_PUBLISHER_POD_SECURITY_CONTEXT",
    "TCAB_DISPATCHER_PUBLISHER_SECURITY_CONTEXT",
];

/// One test, `real`, of `async fn $name()`: a SKIP line without the
/// control plane (a failure with `TCAB_REAL_CLUSTER_REQUIRED=1`).
macro_rules! on_the_real_cluster {
    ($($name:ident),+ $(,)?) => {
        $(
            mod $name {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn real() {
                    if tcab_real_cluster::built_or_skip().is_none() {
                        return;
                    }
                    super::$name().await;
                }
            }
        )+
    };
}

fn set_env(o: &mut StackOptions, name: &str, value: &str) {
    o.extra_env.retain(|(k, _)| k != name);
    o.extra_env.push((name.to_owned(), value.to_owned()));
}

/// The refusal scenarios' stack: a short start grace.
async fn stack(kind: ClusterKind, tune: impl FnOnce(&mut StackOptions)) -> TestStack {
    TestStack::start(kind, |o| {
        set_env(
            o,
            "TCAB_DISPATCHER_START_GRACE_SECONDS",
            &START_GRACE.as_secs().to_string(),
        );
        tune(o);
    })
    .await
}

/// A run that finishes quickly and makes no sandbox (a policy of the
/// namespace would judge the sandbox too).
fn quick(case: &str) -> Value {
    run(case, json!({"duration_ms": 300, "sandbox": false}))
}

fn publish(release: &str) -> Value {
    json!({"release": release, "sim": {"duration_ms": 300}})
}

/// Waits until the admitter is ready: its start-up checks are behind it, so
/// a policy set now meets the Jobs, not the checks.
async fn admitter_ready(t: &TestStack) {
    wait_for("the admitter ready", LIMIT, || async {
        let (code, _) = t.stack.endpoint(Container::Admitter, "/readyz").await?;
        Ok((code == 200).then_some(()))
    })
    .await
    .unwrap_or_else(|e| t.fail(e));
}

/// What a scenario enqueued.
struct Enqueued {
    runs: Vec<String>,
    publishes: Vec<String>,
}

async fn enqueue(t: &TestStack, runs: usize, publishes: usize, tag: &str) -> Enqueued {
    let mut e = Enqueued {
        runs: Vec::new(),
        publishes: Vec::new(),
    };
    for i in 0..runs {
        let id = t
            .stack
            .backend
            .enqueue_run(quick(&format!("{tag}-{i}")))
            .await
            .expect("enqueue a run");
        e.runs.push(id);
    }
    for i in 0..publishes {
        let id = t
            .stack
            .backend
            .enqueue_publish(publish(&format!("{tag}-{i}")))
            .await
            .expect("enqueue a publish");
        e.publishes.push(id);
    }
    e
}

/// The first line of a report's detail names a refusal, and the detail
/// quotes each of `words`.
fn assert_refusal(t: &TestStack, what: &str, job: &Value, words: &[&str]) {
    let detail = job["detail"].as_str().unwrap_or_default();
    let summary = detail.lines().next().unwrap_or_default();
    if !summary.contains("refused") {
        t.fail(format!(
            "{what}: the report's summary does not say refused:\n{detail}"
        ));
    }
    for w in words {
        if !detail.contains(w) {
            t.fail(format!("{what}: the report lacks {w:?}:\n{detail}"));
        }
    }
}

/// How long a job took from its claim (`dispatched`, just before its Job
/// was made) to its end, by the backend's history.
fn claim_to_end(job: &Value) -> Option<Duration> {
    let history = job["history"].as_array()?;
    let at = |e: &Value| e["at"].as_str()?.parse::<jiff::Timestamp>().ok();
    let end = history.iter().rev().find(|e| terminal(&e["state"]))?;
    let claimed = history.iter().rev().find(|e| e["state"] == "dispatched")?;
    let took = at(end)?.duration_since(at(claimed)?);
    Duration::try_from(took).ok()
}

/// Each of `e`'s runs and publishes ends `failed` with a report quoting
/// `words`, between the start grace and the margin past it from its claim,
/// and its Job is gone; returns the longest claim-to-end. The Job is made
/// after the claim, so it may not end sooner than the grace after it, less
/// the second a Job's `creationTimestamp` (whole seconds) can make it look
/// older.
async fn refused_within_the_grace(t: &TestStack, e: &Enqueued, words: &[&str]) -> Duration {
    let bound = START_GRACE + MARGIN;
    let mut ended = Vec::new();
    for id in &e.runs {
        let job = t
            .run_until(id, "the run failed", bound + LIMIT, |j| {
                terminal(&j["state"])
            })
            .await;
        if job["state"] != "failed" || job["lost"] != false {
            t.fail(format!("run {id}: not a death report: {job}"));
        }
        assert_refusal(t, &format!("run {id}"), &job, words);
        ended.push((id, job));
    }
    for id in &e.publishes {
        let job = t
            .publish_until(id, "the publish failed", bound + LIMIT, |j| {
                terminal(&j["state"])
            })
            .await;
        if job["state"] != "failed" {
            t.fail(format!("publish {id}: not failed: {job}"));
        }
        assert_refusal(t, &format!("publish {id}"), &job, words);
        ended.push((id, job));
    }
    let mut longest = Duration::ZERO;
    for (id, job) in &ended {
        let took = claim_to_end(job)
            .unwrap_or_else(|| t.fail(format!("job {id}: no claim and end in {job}")));
        if took + Duration::from_secs(1) < START_GRACE || took > bound {
            t.fail(format!(
                "job {id} ended {took:?} after its claim, not between the start grace \
                 ({START_GRACE:?}, less a second) and {bound:?}"
            ));
        }
        longest = longest.max(took);
        jobs_gone(t, id).await;
    }
    for id in &e.runs {
        refusal_events(t, id, words[0], true).await;
    }
    for id in &e.publishes {
        refusal_events(t, id, words[0], false).await;
    }
    longest
}

/// The Events a refused Job leaves, found after it is gone: deleted with
/// the refusal (`word` quoted), and for a run reported dead with it, both
/// on the same Job.
async fn refusal_events(t: &TestStack, id: &str, word: &str, run: bool) {
    let deleted = t
        .job_event(id, "DeletedRefused", "lease-keeper", LIMIT)
        .await;
    let note = deleted["message"].as_str().unwrap_or_default();
    if deleted["type"] != "Warning" || !note.contains("refused its pod") || !note.contains(word) {
        t.fail(format!(
            "job {id}: DeletedRefused without the refusal {word:?}: {deleted}"
        ));
    }
    if run {
        let dead = t.job_event(id, "ReportedDead", "lease-keeper", LIMIT).await;
        let note = dead["message"].as_str().unwrap_or_default();
        if !note.contains(word) || dead["involvedObject"] != deleted["involvedObject"] {
            t.fail(format!(
                "run {id}: ReportedDead without the refusal on its Job: {dead}"
            ));
        }
    }
}

/// Waits until no Job of backend job `id` is left that is not being
/// deleted.
async fn jobs_gone(t: &TestStack, id: &str) {
    wait_for(
        "the refused Job deleted",
        Duration::from_secs(30),
        || async {
            let left = t
                .jobs_of(id)
                .await
                .iter()
                .any(|j| j["metadata"]["deletionTimestamp"].is_null());
            Ok((!left).then_some(()))
        },
    )
    .await
    .unwrap_or_else(|e| t.fail(format!("job {id}: {e}")));
}

/// Each of `e`'s runs and publishes succeeds.
async fn drains(t: &TestStack, e: &Enqueued) {
    for id in &e.runs {
        let job = t
            .run_until(id, "the run finished", LIMIT, |j| terminal(&j["state"]))
            .await;
        if job["state"] != "succeeded" {
            t.fail(format!("run {id} did not succeed: {job}"));
        }
    }
    for id in &e.publishes {
        let job = t
            .publish_until(id, "the publish finished", LIMIT, |j| terminal(&j["state"]))
            .await;
        if job["state"] != "succeeded" {
            t.fail(format!("publish {id} did not succeed: {job}"));
        }
    }
}

/// Waits until every run and publish the backend holds is terminal (the
/// automatic retries of refused runs included: each refused one is retried
/// and the retries run once the policy is lifted), then checks each failed
/// one was refused by the policy (`words`), and that the dispatcher met no
/// refusal of its own ([`only_the_policy_refused`]).
async fn all_settled(t: &mut TestStack, words: &[&str]) {
    let (runs, pubs) = t.drained(LIMIT * 2, common::RunBy::Processes).await;
    for job in runs.iter().chain(&pubs) {
        if job["state"] == "failed" {
            assert_refusal(t, "a failed job", job, words);
        } else if job["state"] != "succeeded" {
            t.fail(format!(
                "every job succeeds or is refused: {job}; runs {}",
                states(&runs)
            ));
        }
    }
    only_the_policy_refused(t, words);
}

/// Every line of the containers' logs that reads as a refusal quotes the
/// policy's words (the dispatcher reporting it; a log may escape the
/// quotes), and the API server refused the dispatcher nothing.
fn only_the_policy_refused(t: &TestStack, words: &[&str]) {
    let unexplained: Vec<String> = t
        .stack
        .forbidden()
        .into_iter()
        .filter(|l| {
            let plain = l.replace('\\', "");
            !words.iter().any(|w| plain.contains(w))
        })
        .collect();
    if !unexplained.is_empty() {
        t.fail(format!(
            "refusals other than the policy's:\n{}",
            unexplained.join("\n")
        ));
    }
}

/// The stack's namespace enforces PodSecurity `restricted`. With the
/// security-context settings at `{}`, the pods of run and publish Jobs are
/// refused (PodSecurity judges a Job only with a warning; the Job
/// controller's pod creates are what enforce meets); each ends within the
/// start grace with the PodSecurity message. The admitter restarted with
/// the settings' defaults, which meet `restricted`: the work drains.
async fn pod_security_restricted_refuses_jobs_without_security_contexts_then_the_defaults_drain() {
    let mut t = stack(ClusterKind::Real, |o| {
        for var in SECURITY_CONTEXTS {
            set_env(o, var, "{}");
        }
    })
    .await;
    admitter_ready(&t).await;
    let api = t.stack.cluster.clone();
    let ns = t.ns();
    let started = Instant::now();
    policy::label_namespace(&api, &ns, &ENFORCE_RESTRICTED)
        .await
        .unwrap_or_else(|e| t.fail(e));
    let words = [r#"violates PodSecurity "restricted:latest""#];
    policy::refused(
        &api,
        &ns,
        &policy::probe_pod(json!({}), Value::Null),
        words[0],
    )
    .await
    .unwrap_or_else(|e| t.fail(e));
    let e = enqueue(&t, 2, 1, "unconfined").await;
    let took = refused_within_the_grace(
        &t,
        &e,
        &[words[0], "runAsNonRoot != true", "seccompProfile"],
    )
    .await;
    eprintln!("pod security: refused work ended {took:?} after its claim (the longest)");

    t.stack.stop_container(Container::Admitter).await;
    t.stack
        .options
        .extra_env
        .retain(|(k, _)| !SECURITY_CONTEXTS.contains(&k.as_str()));
    t.stack
        .start_container(Container::Admitter)
        .await
        .unwrap_or_else(|e| t.fail(e));
    let e = enqueue(&t, 2, 1, "restricted").await;
    drains(&t, &e).await;
    all_settled(&mut t, &words).await;
    eprintln!("pod security: {:?} in all", started.elapsed());
}

/// A LimitRange whose Container maximum (100m CPU) is below the driver's
/// CPU limit (2) and the publisher's (1): the LimitRanger refuses their
/// pods, in its words. The LimitRange deleted, later work drains.
async fn a_limit_range_below_the_request_refuses_the_pods_until_it_goes() {
    let mut t = stack(ClusterKind::Real, |_| {}).await;
    admitter_ready(&t).await;
    let api = t.stack.cluster.clone();
    let ns = t.ns();
    let started = Instant::now();
    policy::create_limit_range(
        &api,
        &ns,
        "tcab-small",
        json!([{"type": "Container", "max": {"cpu": "100m"}}]),
    )
    .await
    .unwrap_or_else(|e| t.fail(e));
    let words = ["maximum cpu usage per Container is 100m, but limit is"];
    let heavy = policy::probe_pod(json!({}), json!({"limits": {"cpu": "2"}}));
    policy::refused(&api, &ns, &heavy, words[0])
        .await
        .unwrap_or_else(|e| t.fail(e));
    let e = enqueue(&t, 2, 1, "limited").await;
    let took = refused_within_the_grace(&t, &e, &words).await;
    // Each lane's own limit, as the LimitRanger read it.
    let driver = t.stack.backend.job(&e.runs[0]).await.expect("the run");
    assert_refusal(&t, "the run", &driver, &["but limit is 2"]);
    let publisher = t
        .stack
        .backend
        .publish_job(&e.publishes[0])
        .await
        .expect("the publish");
    assert_refusal(&t, "the publish", &publisher, &["but limit is 1"]);
    eprintln!("limit range: refused work ended {took:?} after its claim (the longest)");

    policy::delete(
        &api,
        &format!("/api/v1/namespaces/{ns}/limitranges/tcab-small"),
        json!({}),
    )
    .await
    .unwrap_or_else(|e| t.fail(e));
    policy::admitted(&api, &ns, &heavy)
        .await
        .unwrap_or_else(|e| t.fail(e));
    let e = enqueue(&t, 2, 1, "unlimited").await;
    drains(&t, &e).await;
    all_settled(&mut t, &words).await;
    eprintln!("limit range: {:?} in all", started.elapsed());
}

/// A ResourceQuota of one pod, held by a pod already running: the quota
/// admission refuses the Jobs' pods ("exceeded quota"; the resource quota
/// controller keeps the usage). The holder deleted, the quota is freed and
/// later runs drain, one at a time as the quota allows.
async fn an_exhausted_resource_quota_refuses_the_pods_until_it_is_freed() {
    let mut t = stack(ClusterKind::Real, |o| {
        o.max_inflight = 1;
        o.max_publish_inflight = 1;
    })
    .await;
    admitter_ready(&t).await;
    let api = t.stack.cluster.clone();
    let ns = t.ns();
    let started = Instant::now();
    policy::create_resource_quota(&api, &ns, "tcab-quota", json!({"pods": "1"}))
        .await
        .unwrap_or_else(|e| t.fail(e));
    policy::create_pod(
        &api,
        &ns,
        &policy::bare_pod("quota-holder", json!({"app": "quota-holder"})),
    )
    .await
    .unwrap_or_else(|e| t.fail(e));
    let words = ["exceeded quota: tcab-quota, requested: pods=1, used: pods=1, limited: pods=1"];
    policy::refused(
        &api,
        &ns,
        &policy::probe_pod(json!({}), Value::Null),
        words[0],
    )
    .await
    .unwrap_or_else(|e| t.fail(e));
    let e = enqueue(&t, 1, 1, "over-quota").await;
    let took = refused_within_the_grace(&t, &e, &words).await;
    eprintln!("resource quota: refused work ended {took:?} after its claim (the longest)");

    policy::delete(
        &api,
        &format!("/api/v1/namespaces/{ns}/pods/quota-holder"),
        json!({"gracePeriodSeconds": 0}),
    )
    .await
    .unwrap_or_else(|e| t.fail(e));
    wait_for("the quota freed", LIMIT, || async {
        let status = policy::quota_status(&api, &ns, "tcab-quota").await?;
        Ok((status["used"]["pods"] == "0").then_some(()))
    })
    .await
    .unwrap_or_else(|e| t.fail(e));
    let e = enqueue(&t, 2, 0, "within-quota").await;
    drains(&t, &e).await;
    all_settled(&mut t, &words).await;
    eprintln!("resource quota: {:?} in all", started.elapsed());
}

/// A ValidatingAdmissionPolicy (built in: CEL, no webhook) bound to the
/// namespace that denies driver pods: the runs end with the policy's
/// denial; the publish, whose pod it lets through, succeeds. The binding
/// and policy deleted, later runs drain.
async fn a_validating_admission_policy_denying_driver_pods_fails_the_runs_alone() {
    let mut t = stack(ClusterKind::Real, |_| {}).await;
    admitter_ready(&t).await;
    let api = t.stack.cluster.clone();
    let ns = t.ns();
    let started = Instant::now();
    let message = "driver pods are not allowed in this namespace";
    let vap = policy::deny_pods(
        &api,
        &ns,
        &format!("tcab-no-drivers-{}", policy::suffix()),
        "!has(object.metadata.labels) || !('tcab.dev/job-kind' in object.metadata.labels) \
         || object.metadata.labels['tcab.dev/job-kind'] != 'run'",
        message,
    )
    .await
    .unwrap_or_else(|e| t.fail(e));
    let denial = format!("{} {message}", vap.denial());
    let driver = policy::probe_pod(json!({"tcab.dev/job-kind": "run"}), Value::Null);
    policy::refused(&api, &ns, &driver, &denial)
        .await
        .unwrap_or_else(|e| t.fail(e));
    let e = enqueue(&t, 2, 0, "denied").await;
    let p = enqueue(&t, 0, 1, "allowed").await;
    let took = refused_within_the_grace(&t, &e, &[&denial]).await;
    drains(&t, &p).await;
    eprintln!("admission policy: refused runs ended {took:?} after their claim (the longest)");

    policy::remove_vap(&api, &vap)
        .await
        .unwrap_or_else(|e| t.fail(e));
    policy::admitted(&api, &ns, &driver)
        .await
        .unwrap_or_else(|e| t.fail(e));
    let e = enqueue(&t, 2, 0, "allowed-again").await;
    drains(&t, &e).await;
    all_settled(&mut t, &[&denial]).await;
    eprintln!("admission policy: {:?} in all", started.elapsed());
}

/// TCAB_DRIVER_SERVICE_ACCOUNT names a ServiceAccount that does not exist:
/// the ServiceAccount admission plugin refuses the driver pods; each run
/// ends within the start grace with the plugin's words. The account
/// created, later runs drain.
async fn a_missing_service_account_refuses_the_driver_pods_until_it_exists(kind: ClusterKind) {
    let missing = "tcab-missing";
    let mut t = stack(kind, |o| set_env(o, "TCAB_DRIVER_SERVICE_ACCOUNT", missing)).await;
    let ns = t.ns();
    let started = Instant::now();
    let words = format!(
        "error looking up service account {ns}/{missing}: serviceaccount \"{missing}\" not found"
    );
    let e = enqueue(&t, 2, 0, "unaccounted").await;
    let took = refused_within_the_grace(&t, &e, &[&words]).await;
    eprintln!("service account: refused runs ended {took:?} after their claim (the longest)");

    let api = t.stack.cluster.clone();
    policy::create_service_account(&api, &ns, missing)
        .await
        .unwrap_or_else(|e| t.fail(e));
    let e = enqueue(&t, 2, 0, "accounted").await;
    drains(&t, &e).await;
    all_settled(&mut t, &[&words]).await;
    eprintln!("service account ({kind}): {:?} in all", started.elapsed());
}

/// A driver that ignores SIGTERM (so the report that lands is the
/// dispatcher's), with its log tail and a sandbox.
fn stubborn(case: &str) -> Value {
    run(
        case,
        json!({"hang": true, "ignore_sigterm": true, "log_lines": 3}),
    )
}

/// A higher-priority pod preempts a driver. On the real control plane the
/// scheduler does it (`ClusterAdmin::preempt`: a pod that fits the node only
/// without the victim); the victim shares its node with another driver of
/// the same priority and requests, which the scheduler leaves alone. The
/// victim's run is reported preempted, with the log tail read at the first
/// sign (the pod is gone by the time its Job fails), its sandbox reaped;
/// the others run on, and nothing of the preemption is left behind.
async fn a_driver_preempted_by_a_higher_priority_pod_is_reported_preempted(kind: ClusterKind) {
    let t = TestStack::start(kind, |o| o.driver_grace_seconds = 2).await;
    let mut ids = Vec::new();
    for i in 0..3 {
        let id = t
            .stack
            .backend
            .enqueue_run(stubborn(&format!("priority-{i}")))
            .await
            .expect("enqueue");
        ids.push(id);
    }
    let mut pods = Vec::new();
    for id in &ids {
        pods.push(t.running_driver(id, LIMIT).await);
    }
    // Three drivers on two nodes: two share one.
    let node = |p: &Value| {
        p["spec"]["nodeName"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    let (victim, neighbour) = (0..3)
        .flat_map(|i| (0..3).map(move |j| (i, j)))
        .find(|&(i, j)| i != j && node(&pods[i]) == node(&pods[j]))
        .unwrap_or_else(|| t.fail("three drivers on three nodes"));
    let name = pods[victim]["metadata"]["name"]
        .as_str()
        .unwrap_or_default();

    let started = Instant::now();
    t.admin()
        .preempt(&t.ns(), name)
        .await
        .unwrap_or_else(|e| t.fail(format!("preempting {name}: {e}")));
    eprintln!(
        "preemption ({kind}): the scheduler took {:?}",
        started.elapsed()
    );
    let job = t
        .run_until(&ids[victim], "the death report", LIMIT, |j| {
            j["state"] != "running"
        })
        .await;
    if job["state"] != "failed" || job["failure_kind"] != "infrastructure" || job["lost"] != false {
        t.fail(format!("not a death report: {job}"));
    }
    let detail = job["detail"].as_str().unwrap_or_default();
    for part in [
        "pod preempted (DisruptionTarget: PreemptionByScheduler",
        "--- last log lines ---",
        "hanging",
    ] {
        if !detail.contains(part) {
            t.fail(format!("the report lacks {part:?}:\n{detail}"));
        }
    }
    t.sandboxes_reaped(&ids[victim], LIMIT).await;
    for (i, id) in ids.iter().enumerate() {
        if i == victim {
            continue;
        }
        let job = t.stack.backend.job(id).await.expect("the run");
        assert_eq!(job["state"], "running", "run {i} runs on: {job}");
        let own = t.own_pods(id).await;
        assert!(
            own.len() == 1 && own[0]["status"]["phase"] == "Running",
            "run {i}'s driver{} runs on: {own:?}",
            if i == neighbour {
                " (the victim's neighbour)"
            } else {
                ""
            }
        );
    }
    if kind.is_real() {
        let left = t
            .stack
            .cluster
            .pods(&t.ns(), Some("app.kubernetes.io/name=tcab-preemptor"))
            .await
            .expect("list pods");
        assert!(left.is_empty(), "the preemptor is removed: {left:?}");
        let classes = t
            .stack
            .cluster
            .get(&format!(
                "/apis/scheduling.k8s.io/v1/priorityclasses?labelSelector={}%3D{}",
                policy::RIG_NAMESPACE_LABEL,
                t.ns()
            ))
            .await
            .expect("list PriorityClasses");
        assert_eq!(classes["items"], json!([]), "its PriorityClass is removed");
    }
    assert_eq!(
        t.stack
            .log(Container::LeaseKeeper)
            .matches("reported dead")
            .count(),
        1,
        "one death reported:\n{}",
        t.logs()
    );
}

/// The admitter's start-up check with the namespace already enforcing
/// PodSecurity `restricted`: the dry run of a Job built from settings that
/// do not meet it comes back with PodSecurity's warning, and the admitter
/// says so, naming the namespace's label and the settings, before its
/// first claim. With the defaults, which meet `restricted`, it says
/// nothing of the kind.
async fn a_namespace_enforcing_restricted_is_named_at_start_before_the_first_claim() {
    let mut t = stack(ClusterKind::Real, |o| {
        for var in SECURITY_CONTEXTS {
            set_env(o, var, "{}");
        }
    })
    .await;
    admitter_ready(&t).await;
    t.stack.stop_container(Container::Admitter).await;
    let api = t.stack.cluster.clone();
    let ns = t.ns();
    policy::label_namespace(&api, &ns, &ENFORCE_RESTRICTED)
        .await
        .unwrap_or_else(|e| t.fail(e));
    let e = enqueue(&t, 1, 1, "at-start").await;
    let from = t.stack.log(Container::Admitter).len();
    t.stack
        .start_container(Container::Admitter)
        .await
        .unwrap_or_else(|e| t.fail(format!("the admitter restarts: {e}")));
    // Its first admission comes after the check.
    let id = &e.runs[0];
    t.run_until(id, "the run claimed", LIMIT, |j| j["state"] != "queued")
        .await;
    wait_for("the first admission logged", LIMIT, || async {
        let log = t.stack.log(Container::Admitter);
        Ok(log[from..].contains(" admitted").then_some(()))
    })
    .await
    .unwrap_or_else(|e| t.fail(e));
    let log = t.stack.log(Container::Admitter)[from..].to_owned();
    let first_claim = log
        .find(" admitted")
        .unwrap_or_else(|| t.fail("no admission in the admitter's log"));
    for (lane, settings) in [
        ("driver", SECURITY_CONTEXTS[..2].to_vec()),
        ("publisher", SECURITY_CONTEXTS[2..].to_vec()),
    ] {
        let wanted = format!("the {lane} pods violate PodSecurity \"restricted:latest\"");
        let Some(at) = log.find(&wanted) else {
            t.fail(format!("no start-up warning of the {lane} pods:\n{log}"));
        };
        if at > first_claim {
            t.fail(format!(
                "the {lane} warning came after the first claim:\n{log}"
            ));
        }
        let start = log[..at].rfind('\n').map_or(0, |n| n + 1);
        let line = log[start..].lines().next().unwrap_or_default();
        for part in [
            "start-up check",
            &format!("namespace {ns}"),
            "pod-security.kubernetes.io/enforce",
            settings[0],
            settings[1],
        ] {
            if !line.contains(part) {
                t.fail(format!("the {lane} warning lacks {part:?}: {line}"));
            }
        }
    }

    // With the defaults, which meet restricted, no such warning.
    t.stack.stop_container(Container::Admitter).await;
    t.stack
        .options
        .extra_env
        .retain(|(k, _)| !SECURITY_CONTEXTS.contains(&k.as_str()));
    let from = t.stack.log(Container::Admitter).len();
    t.stack
        .start_container(Container::Admitter)
        .await
        .unwrap_or_else(|e| t.fail(format!("the admitter restarts: {e}")));
    admitter_ready(&t).await;
    let log = t.stack.log(Container::Admitter)[from..].to_owned();
    if log.contains("violate PodSecurity") {
        t.fail(format!("a warning with the defaults:\n{log}"));
    }
    if !log.contains("start-up check: the API server accepts") {
        t.fail(format!("no start-up check after the restart:\n{log}"));
    }
}

/// The start grace of the Job-controller-down scenario: reads every 3 s.
const SHORT_GRACE: Duration = Duration::from_secs(3);

/// The words of the lease-keeper's warning about Jobs that wait without a
/// pod and without a refusal (bins/lease-keeper/src/run/refusals.rs).
const NO_REFUSAL: &str = "no refusal to create one is recorded";

/// The Job controller is down (the controller-manager paused): the run's
/// Job gets no pod and no `FailedCreate` Event. Past the start grace the
/// lease-keeper reads the Events, finds no refusal of the Job, and does not
/// fail it: `tcab_dispatcher_jobs_without_pod{lane="run"}` counts it, and
/// each read logs the warning naming it as the oldest; the run stays
/// `dispatched` and its Job stays. The controller-manager resumed, the Job
/// gets its pod, the gauge goes back to 0 and the run succeeds. kube-sim
/// cannot resume a Job it left podless (`SIM_UNSUPPORTED`), and its own
/// wait is the lease-keeper's kube-sim test
/// (`a_driver_job_without_a_pod_and_without_a_refusal_waits_past_the_grace`).
async fn a_job_without_a_pod_while_the_job_controller_is_down_waits_and_runs_once_it_is_back() {
    let t = TestStack::start(ClusterKind::Real, |o| {
        set_env(
            o,
            "TCAB_DISPATCHER_START_GRACE_SECONDS",
            &SHORT_GRACE.as_secs().to_string(),
        );
    })
    .await;
    admitter_ready(&t).await;
    let started = Instant::now();
    let pause = t
        .admin()
        .pause_controller_manager()
        .await
        .unwrap_or_else(|e| t.fail(e));
    let e = enqueue(&t, 1, 0, "controller-down").await;
    let id = &e.runs[0];
    // The admitter makes the Job: the API server alone does that.
    let job = wait_for("the run's Job", LIMIT, || async {
        let jobs = t.jobs_of(id).await;
        Ok(jobs
            .first()
            .and_then(|j| j["metadata"]["name"].as_str())
            .map(str::to_owned))
    })
    .await
    .unwrap_or_else(|e| t.fail(e));

    // Two reads past the grace, each finding no refusal: counted, and
    // logged naming the Job; a run failed meanwhile fails the test at once.
    let lines = wait_for(
        "the Job counted and logged as waiting, twice",
        LIMIT,
        || async {
            let run = t.stack.backend.job(id).await?;
            if run["state"] != "dispatched" {
                t.fail(format!(
                    "the run left dispatched while its Job waited: {run}"
                ));
            }
            let scrape = t.stack.scrape(Container::LeaseKeeper).await?;
            let waiting = scrape.value("tcab_dispatcher_jobs_without_pod", &[("lane", "run")]);
            let log = t.stack.log(Container::LeaseKeeper);
            let lines: Vec<String> = common::lines_with(&log, &[NO_REFUSAL, &job])
                .into_iter()
                .map(str::to_owned)
                .collect();
            Ok((waiting == Some(1.0) && lines.len() >= 2).then_some(lines))
        },
    )
    .await
    .unwrap_or_else(|e| t.fail(e));
    let waited_s = |line: &str| -> u64 {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix("waited_s="))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| t.fail(format!("no waited_s in {line}")))
    };
    if waited_s(&lines[0]) < SHORT_GRACE.as_secs() || !lines[0].contains("WARN") {
        t.fail(format!("not a warning past the grace: {}", lines[0]));
    }
    let run = t.stack.backend.job(id).await.expect("the run");
    if run["state"] != "dispatched" {
        t.fail(format!("the run is not dispatched: {run}"));
    }
    let jobs = t.jobs_of(id).await;
    if jobs.len() != 1 || !jobs[0]["metadata"]["deletionTimestamp"].is_null() {
        t.fail(format!("the Job is not left alone: {jobs:?}"));
    }
    if !t.own_pods(id).await.is_empty() {
        t.fail("a pod while the Job controller is down");
    }
    eprintln!(
        "job controller down: {:?} from the pause to the second warning: {}",
        started.elapsed(),
        lines[1]
    );

    let took = pause.resume().await.unwrap_or_else(|e| t.fail(e));
    let resumed = Instant::now();
    wait_for("the Job counts its pod", LIMIT, || async {
        let scrape = t.stack.scrape(Container::LeaseKeeper).await?;
        let waiting = scrape.value("tcab_dispatcher_jobs_without_pod", &[("lane", "run")]);
        Ok((waiting == Some(0.0)).then_some(()))
    })
    .await
    .unwrap_or_else(|e| t.fail(e));
    let pods = t.own_pods(id).await;
    if pods.len() != 1
        || pods[0]["metadata"]["labels"]["batch.kubernetes.io/job-name"] != job.as_str()
    {
        t.fail(format!("not one pod of Job {job}: {pods:?}"));
    }
    drains(&t, &e).await;
    eprintln!(
        "job controller down: resumed in {took:?}, the run succeeded {:?} after",
        resumed.elapsed()
    );
}

on_the_real_cluster!(
    a_job_without_a_pod_while_the_job_controller_is_down_waits_and_runs_once_it_is_back,
    a_namespace_enforcing_restricted_is_named_at_start_before_the_first_claim,
    pod_security_restricted_refuses_jobs_without_security_contexts_then_the_defaults_drain,
    a_limit_range_below_the_request_refuses_the_pods_until_it_goes,
    an_exhausted_resource_quota_refuses_the_pods_until_it_is_freed,
    a_validating_admission_policy_denying_driver_pods_fails_the_runs_alone,
);

on_both_clusters!(
    a_missing_service_account_refuses_the_driver_pods_until_it_exists,
    a_driver_preempted_by_a_higher_priority_pod_is_reported_preempted,
);
