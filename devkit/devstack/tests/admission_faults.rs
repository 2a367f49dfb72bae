//! End to end, issue 18 (the admitter's half): each claim's token in the
//! vault before its Job exists, one live Job per backend job (the stale one
//! deleted before the new one is created) when the backend's clock steps
//! past a lease, a poisoned claim ends once,
//! settings the API server refuses stop the admitter with exit code 2, and a
//! cap of 0 pauses a lane while renewals go on. The three real binaries as
//! processes against kube-sim (`::sim`) or the real control plane (`::real`),
//! under the chart's Role, and backend-sim.

#[macro_use]
mod common;

use common::{ClusterKind, RunBy, TestStack, run};
use serde_json::{Value, json};
use std::time::Duration;
use tcab_devstack::{Container, wait_for};

/// Whether a Job has finished (Complete or Failed).
fn finished(job: &Value) -> bool {
    job["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| (c["type"] == "Complete" || c["type"] == "Failed") && c["status"] == "True")
    })
}

/// The Jobs of a backend job that are live and not being deleted.
async fn live_jobs_of(t: &TestStack, id: &str) -> Vec<String> {
    t.jobs_of(id)
        .await
        .iter()
        .filter(|j| !finished(j) && j["metadata"]["deletionTimestamp"].is_null())
        .map(|j| j["metadata"]["name"].as_str().unwrap_or("").to_owned())
        .collect()
}

/// Waits until the admitter's log has a line with every one of `parts`
/// (its output is copied to the log as it comes, so after it exited too);
/// returns the matching lines.
async fn admitter_lines(t: &TestStack, parts: &[&str]) -> Vec<String> {
    wait_for("the admitter's line", Duration::from_secs(10), || async {
        let log = t.stack.log(Container::Admitter);
        let lines: Vec<String> = common::lines_with(&log, parts)
            .into_iter()
            .map(str::to_owned)
            .collect();
        Ok((!lines.is_empty()).then_some(lines))
    })
    .await
    .unwrap_or_else(|e| t.fail(format!("{e}: {parts:?}")))
}

/// The admitter's value of one metric sample (0 when absent).
async fn admitter_metric(t: &TestStack, name: &str, with: &[(&str, &str)]) -> f64 {
    t.stack
        .scrape(Container::Admitter)
        .await
        .map(|s| s.sum(name, with))
        .unwrap_or(0.0)
}

/// The backend clock steps past the lease while a claimed run's Job has no
/// pod yet (`never_pod_next`: kube-sim never makes one; on the real control
/// plane an admission policy refuses its pods, and the start grace, which
/// would fail such a Job, outlasts the test) and renewals are held by a stalled
/// backend call: the admitter's next claim makes the backend requeue the run
/// and hand it out again. Before the new claim's Job, the admitter deletes
/// the stale one: one live Job for the run, which then finishes once. The
/// order is read from the cluster's, the vault's and the backend's records:
/// the new claim's token was put in the vault and the stale Job's delete
/// answered before the new Job's create reached the API server.
// `faults::a_claim_applied_late_requeues_...` checks the same order on both
// clusters, with a pod that cannot pull its image.
async fn a_backend_clock_step_over_a_job_without_a_pod_leaves_one_live_job(kind: ClusterKind) {
    let mut t = TestStack::start(kind, |o| {
        o.extra_env
            .push(("TCAB_DISPATCHER_START_GRACE_SECONDS".into(), "600".into()));
    })
    .await;
    let recorder = t
        .stack
        .record_vault_calls()
        .await
        .expect("the vault recorder");
    t.admin().never_pod_next(1).await.expect("never-pod");
    let id = t
        .stack
        .backend
        .enqueue_run(run("stepped", json!({"duration_ms": 500})))
        .await
        .expect("enqueue");
    let first = wait_for("the run's first Job", Duration::from_secs(30), || async {
        let live = live_jobs_of(&t, &id).await;
        Ok((live.len() == 1).then(|| live[0].clone()))
    })
    .await
    .unwrap_or_else(|e| t.fail(e));

    // Renewals held (not failed: the gate stays open for its age), then the
    // clock steps past the lease.
    t.stack
        .backend
        .add_fault(&["/jobs/leases"], "stall", 3.0)
        .await
        .expect("stall renewals");
    let lease = t.stack.options.lease_seconds;
    t.stack
        .backend
        .advance_clock(lease + 10)
        .await
        .expect("clock step");

    wait_for("the stale Job deleted", Duration::from_secs(30), || async {
        let deleted = !common::lines_with(
            &t.stack.log(Container::Admitter),
            &["deleted a stale Job", &format!("job_id={id}"), &first],
        )
        .is_empty();
        Ok(deleted.then_some(()))
    })
    .await
    .unwrap_or_else(|e| t.fail(e));
    let live = live_jobs_of(&t, &id).await;
    assert_eq!(live.len(), 1, "one live Job: {live:?}{}", t.logs());
    assert_ne!(live[0], first, "the new claim's Job");
    // The stale Job's Event says why it went, and outlives it.
    let stale = t
        .job_event(&id, "DeletedStale", "admitter", Duration::from_secs(30))
        .await;
    if stale["involvedObject"]["name"] != first.as_str() || stale["type"] != "Normal" {
        t.fail(format!(
            "DeletedStale is not about the stale Job {first}: {stale}"
        ));
    }
    assert!(
        admitter_metric(
            &t,
            "tcab_dispatcher_stale_job_deletes_total",
            &[("result", "ok")]
        )
        .await
            >= 1.0
    );
    t.run_until(&id, "the run succeeded", Duration::from_secs(60), |j| {
        j["state"] == "succeeded"
    })
    .await;
    t.assert_deleted_before_created(&first, &live[0]).await;
    assert_eq!(
        t.assert_tokens_put_before_creates(&recorder).await,
        2,
        "both claims' Jobs checked"
    );
}

/// Each claim's per-job token is in the lease-keeper's vault before its Job
/// exists, so a death seen right after the create finds it. For every Job
/// the dispatcher created, of both lanes: the backend's history shows the
/// claim, then the vault's `Put` of that claim (recorded between the
/// admitter and the lease-keeper) was answered, and only then did the API
/// server receive the Job's create.
async fn each_claims_token_is_in_the_vault_before_its_job_is_created(kind: ClusterKind) {
    let mut t = TestStack::start(kind, |_| {}).await;
    let recorder = t
        .stack
        .record_vault_calls()
        .await
        .expect("the vault recorder");
    let runs = (0..4)
        .map(|i| run(&format!("ordered-{i}"), json!({"duration_ms": 300})))
        .collect();
    t.stack.backend.enqueue_batch(runs).await.expect("enqueue");
    for i in 0..2 {
        t.stack
            .backend
            .enqueue_publish(json!({"release": format!("o{i}"), "sim": {"duration_ms": 200}}))
            .await
            .expect("enqueue publish");
    }
    let (runs, pubs) = t.drained(Duration::from_secs(60), RunBy::Processes).await;
    assert!(
        runs.iter()
            .chain(pubs.iter())
            .all(|j| j["state"] == "succeeded"),
        "{runs:?} {pubs:?}"
    );
    assert_eq!(
        t.assert_tokens_put_before_creates(&recorder).await,
        6,
        "every run's and publish's Job checked"
    );
}

/// A publish claim the backend committed but answered without its request
/// (the body fault merges a null in): the admitter reports it failed once,
/// with its own token, naming the field; it is not handed out again.
async fn a_poisoned_claim_is_reported_failed_once(kind: ClusterKind) {
    let t = TestStack::start(kind, |_| {}).await;
    t.stack
        .backend
        .add_fault_rule(
            json!({"paths": ["/publish-jobs/next"], "mode": "body", "merge": true,
            "body": {"publish_job": {"request": null}}, "seconds": 600}),
        )
        .await
        .expect("body fault");
    let id = t
        .stack
        .backend
        .enqueue_publish(json!({"suite": "main"}))
        .await
        .expect("enqueue");
    let publish = t
        .publish_until(&id, "the publish failed", Duration::from_secs(30), |j| {
            j["state"] == "failed"
        })
        .await;
    let detail = publish["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("request"), "{publish}");
    let history = t.stack.backend.history().await.expect("history");
    let states: Vec<&str> = history
        .entries
        .iter()
        .filter(|e| e.job_id == id)
        .map(|e| e.state.as_str())
        .collect();
    assert_eq!(states, ["queued", "dispatched", "failed"], "ended once");
    assert!(t.jobs_of(&id).await.is_empty(), "no Job was made of it");
    let log = t.stack.log(Container::Admitter);
    assert_eq!(
        common::lines_with(&log, &["poisoned claim", &format!("job_id={id}")]).len(),
        1,
        "logged once{}",
        t.logs()
    );
    assert!(!log.contains("tok_"), "no token in the log");
    // The Job it would have had carries why it failed fast (no token).
    let failed = t
        .job_event(&id, "FailedFast", "admitter", Duration::from_secs(30))
        .await;
    let note = failed["message"].as_str().unwrap_or_default();
    if failed["type"] != "Warning"
        || !note.contains("request")
        || !note.contains("reported it failed")
        || note.contains("tok_")
    {
        t.fail(format!("FailedFast: {failed}"));
    }
}

/// A driver memory limit below its request: the API server would refuse
/// every Job, so the admitter stops at start, exit code 2, one line naming
/// the variable.
async fn a_memory_limit_below_its_request_exits_2_naming_the_variable(kind: ClusterKind) {
    let mut t = TestStack::start(kind, |o| {
        o.extra_env = vec![
            ("TCAB_DISPATCHER_DRIVER_MEMORY_REQUEST".into(), "1Gi".into()),
            ("TCAB_DISPATCHER_DRIVER_MEMORY_LIMIT".into(), "512Mi".into()),
        ];
    })
    .await;
    let code = t
        .stack
        .wait_exit(Container::Admitter, Duration::from_secs(30))
        .await;
    assert_eq!(code, Some(2), "{}", t.logs());
    let lines = admitter_lines(
        &t,
        &[
            "configuration error",
            "TCAB_DISPATCHER_DRIVER_MEMORY_LIMIT",
            "TCAB_DISPATCHER_DRIVER_MEMORY_REQUEST",
        ],
    )
    .await;
    assert_eq!(lines.len(), 1, "{lines:?}");
}

/// A driver service account name that passes the admitter's own check but
/// not the API server's (no DNS subdomain: two dots in a row): the dry run
/// at start is refused with 422, and the admitter exits 2 naming the
/// setting, before any claim.
async fn a_setting_the_api_server_refuses_at_the_dry_run_exits_2_before_any_claim(
    kind: ClusterKind,
) {
    let mut t = TestStack::start(kind, |o| {
        o.extra_env = vec![("TCAB_DRIVER_SERVICE_ACCOUNT".into(), "tcab..driver".into())];
    })
    .await;
    let id = t
        .stack
        .backend
        .enqueue_run(run("never", json!({"duration_ms": 100})))
        .await
        .expect("enqueue");
    let code = t
        .stack
        .wait_exit(Container::Admitter, Duration::from_secs(30))
        .await;
    assert_eq!(code, Some(2), "{}", t.logs());
    let lines = admitter_lines(
        &t,
        &["configuration error", "TCAB_DRIVER_SERVICE_ACCOUNT", "422"],
    )
    .await;
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("serviceAccountName"), "{}", lines[0]);
    let run = t.stack.backend.job(&id).await.expect("the run");
    assert_eq!(run["state"], "queued", "nothing was claimed");
    assert!(t.jobs_of(&id).await.is_empty());
}

/// A cap of 0 pauses the run lane: running runs keep their leases renewed
/// (the lease-keeper reads no cap), nothing new is claimed, and the metrics
/// say the lane is paused.
async fn a_cap_of_zero_admits_nothing_while_renewals_go_on(kind: ClusterKind) {
    let mut t = TestStack::start(kind, |_| {}).await;
    let running = t
        .stack
        .backend
        .enqueue_run(run("long", json!({"hang": true})))
        .await
        .expect("enqueue");
    t.running_driver(&running, Duration::from_secs(30)).await;

    // Paused: the admitter restarted with a run cap of 0.
    t.stack.stop_container(Container::Admitter).await;
    t.stack
        .options
        .extra_env
        .push(("TCAB_DISPATCHER_MAX_INFLIGHT".into(), "0".into()));
    t.stack
        .start_container(Container::Admitter)
        .await
        .expect("admitter restarts");
    let waiting = t
        .stack
        .backend
        .enqueue_run(run("waiting", json!({"duration_ms": 100})))
        .await
        .expect("enqueue");
    // Many paused ticks, counted by the admitter itself.
    wait_for("twenty paused ticks", Duration::from_secs(30), || async {
        let paused = admitter_metric(&t, "tcab_dispatcher_lane_paused", &[("lane", "run")]).await;
        let ticks = admitter_metric(
            &t,
            "tcab_dispatcher_admissions_total",
            &[("lane", "run"), ("outcome", "paused")],
        )
        .await;
        Ok((paused == 1.0 && ticks >= 20.0).then_some(()))
    })
    .await
    .unwrap_or_else(|e| t.fail(e));
    let run_state = t.stack.backend.job(&waiting).await.expect("the run");
    assert_eq!(run_state["state"], "queued", "not claimed while paused");
    assert_eq!(
        common::lines_with(&t.stack.log(Container::Admitter), &["lane paused"]).len(),
        1,
        "said once"
    );

    // Renewals go on: after a clock step the running run's lease is renewed
    // from the backend's new now.
    t.stack.backend.advance_clock(60).await.expect("clock step");
    wait_for(
        "the lease renewed after the step",
        Duration::from_secs(30),
        || async { Ok(t.leases_renewed(100).await?.then_some(())) },
    )
    .await
    .unwrap_or_else(|e| t.fail(e));
    let run_state = t.stack.backend.job(&running).await.expect("the run");
    assert_eq!(run_state["state"], "running");
}

on_both_clusters!(
    a_backend_clock_step_over_a_job_without_a_pod_leaves_one_live_job,
    each_claims_token_is_in_the_vault_before_its_job_is_created,
    a_poisoned_claim_is_reported_failed_once,
    a_memory_limit_below_its_request_exits_2_naming_the_variable,
    a_setting_the_api_server_refuses_at_the_dry_run_exits_2_before_any_claim,
    a_cap_of_zero_admits_nothing_while_renewals_go_on,
);
