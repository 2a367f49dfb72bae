//! End to end under injected faults (issue 11): the three real binaries as
//! processes against kube-sim (`::sim`) or the real control plane through
//! the fault proxy (`::real`), under the chart's Role, and backend-sim,
//! each test a reproduction of one defect, checked from the cluster's and
//! the backend's own records.

#[macro_use]
mod common;

use common::{ClusterKind, TestStack, run, states};
use serde_json::{Value, json};
use std::time::Duration;
use tcab_devstack::wait_for;

const DRIVER_IMAGE: &str = "tcab/driver:dev";

/// The live driver Jobs of a backend job, by name, with their claim tags.
async fn live_jobs_of(t: &TestStack, id: &str) -> anyhow::Result<Vec<(String, String)>> {
    let jobs = t
        .stack
        .cluster
        .jobs(Some(&format!("tcab.dev/job-id={id}")))
        .await?;
    Ok(jobs
        .iter()
        .filter(|j| !finished(j))
        .map(|j| {
            (
                j["metadata"]["name"].as_str().unwrap_or("").to_owned(),
                j["metadata"]["labels"]["tcab.dev/claim"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned(),
            )
        })
        .collect())
}

fn finished(job: &Value) -> bool {
    job["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| (c["type"] == "Complete" || c["type"] == "Failed") && c["status"] == "True")
    })
}

/// Issue 11 item 2, the race that remains: with a 10 s lease and the gate
/// at most 5 s old, a claim already in flight when the backend stalls for
/// longer than the lease minus the gate age is applied late, and the
/// requeue it does first returns two dispatched runs whose Jobs are alive
/// but whose pods have not started (their image cannot be pulled yet): the
/// late claim takes the first (its answer lost to the caller's timeout), the
/// next claim the second. Since issue 18 the admitter deletes the second
/// run's stale Job before that claim's Job, so it never has two live Jobs;
/// the first run's stale driver is stopped at its first report (the backend
/// refuses the token: 401), exits, its Job ends, no death is reported for
/// it, and both runs finish through newer claims.
async fn a_claim_applied_late_requeues_an_unstarted_run_and_its_stale_driver_is_stopped(
    kind: ClusterKind,
) {
    let mut t = TestStack::start(kind, |o| {
        o.lease_seconds = 10;
        // Image pull back-offs (10 s doubling, in sim time) pass quickly.
        o.cluster_speed = 20.0;
    })
    .await;
    // The order of each admission is read from the vault's calls too.
    let recorder = t
        .stack
        .record_vault_calls()
        .await
        .expect("the vault recorder");
    let admin = t.admin();
    admin
        .set_unpullable(DRIVER_IMAGE, true)
        .await
        .expect("unpullable");
    let ids = t
        .stack
        .backend
        .enqueue_batch(vec![
            run("first", json!({"duration_ms": 4000})),
            run("second", json!({"duration_ms": 4000})),
        ])
        .await
        .expect("enqueue");
    let (x1, x2) = (ids[0].clone(), ids[1].clone());

    // Both runs dispatched, their Jobs alive, their pods unable to start,
    // their leases renewed.
    wait_for(
        "two Jobs whose pods cannot pull their image",
        Duration::from_secs(30),
        || async {
            let pods = t
                .stack
                .cluster
                .pods(
                    &t.ns(),
                    Some("app.kubernetes.io/managed-by=tcab-dispatcher"),
                )
                .await?;
            let waiting = pods
                .iter()
                .filter(|p| {
                    let reason = &p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"];
                    reason == "ErrImagePull" || reason == "ImagePullBackOff"
                })
                .count();
            Ok((waiting == 2).then_some(()))
        },
    )
    .await
    .unwrap_or_else(|e| t.fail(e));
    let stale: Vec<(String, String)> = {
        let mut v = live_jobs_of(&t, &x1).await.expect("jobs");
        v.extend(live_jobs_of(&t, &x2).await.expect("jobs"));
        v
    };
    assert_eq!(stale.len(), 2, "{stale:?}");
    wait_for("leases renewed", Duration::from_secs(10), || async {
        Ok(t.leases_renewed(8).await?.then_some(()))
    })
    .await
    .unwrap_or_else(|e| t.fail(e));
    for id in [&x1, &x2] {
        assert_eq!(
            t.stack.backend.job(id).await.expect("job")["state"],
            "dispatched"
        );
    }

    // The backend stalls claims for 13 s (longer than the lease); once a
    // claim (sent while the gate was open) is held, renewals fail too.
    let backend = &t.stack.backend;
    backend
        .add_fault(&["/jobs/next"], "stall", 13.0)
        .await
        .expect("stall claims");
    wait_for(
        "a claim held by the stall",
        Duration::from_secs(10),
        || async {
            let faults = backend.faults().await?;
            Ok(faults["held"]
                .as_array()
                .is_some_and(|h| h.iter().any(|p| p == "/jobs/next"))
                .then_some(()))
        },
    )
    .await
    .unwrap_or_else(|e| t.fail(e));
    backend
        .add_fault(&["/jobs/leases"], "error", 14.0)
        .await
        .expect("fail renewals");

    // The late claim requeued both lapsed runs and took the first; the
    // second is claimed again once renewals succeed. Before that claim's Job,
    // the admitter deletes the second run's stale Job (issue 18): one live
    // Job at a time, and the stale driver never starts.
    let (stale_job_2, stale_claim_2) = stale
        .iter()
        .find(|(name, _)| name.contains(x2.as_str()))
        .cloned()
        .expect("the second run's first Job");
    let needle = format!("job_id={x2}");
    let new_job_2 = wait_for(
        "the second run's stale Job deleted before its new claim's Job",
        Duration::from_secs(40),
        || async {
            let deleted = !common::lines_with(
                &t.stack.log(tcab_devstack::Container::Admitter),
                &["deleted a stale Job", &needle, &stale_job_2],
            )
            .is_empty();
            let live: Vec<(String, String)> = live_jobs_of(&t, &x2)
                .await?
                .into_iter()
                .filter(|(_, claim)| *claim != stale_claim_2)
                .collect();
            Ok((deleted && live.len() == 1).then(|| live[0].0.clone()))
        },
    )
    .await
    .unwrap_or_else(|e| t.fail(e));
    admin
        .set_unpullable(DRIVER_IMAGE, false)
        .await
        .expect("pullable");

    // Both runs finish, through claims other than their first, with no
    // retry and no death or lost report.
    let mut t = t;
    let (runs, _) = t
        .drained(Duration::from_secs(90), common::RunBy::Processes)
        .await;
    assert_eq!(runs.len(), 2, "no retry: {}", states(&runs));
    assert!(
        runs.iter().all(|j| j["state"] == "succeeded"),
        "{}",
        states(&runs)
    );
    let record = t.stack.backend.history().await.expect("history");
    let verdict = t.verdict().await;
    let context = format!(
        "verdict: {verdict:#?}\nrefused: {:#?}{}",
        record.refused,
        t.logs()
    );
    // By the API server's own record, the stale Job's delete was answered
    // before the new claim's create arrived; and every claim's token was in
    // the vault before its Job was created.
    t.assert_deleted_before_created(&stale_job_2, &new_job_2)
        .await;
    let checked = t.assert_tokens_put_before_creates(&recorder).await;
    assert!(checked >= 4, "both runs' Jobs of both claims: {checked}");
    assert!(verdict.violations.is_empty(), "{context}");
    assert!(
        verdict.reports.is_empty(),
        "no death or lost report: {context}"
    );
    // No run had two live Jobs: the second run's stale Job was deleted
    // before its new claim's Job, its driver never having run.
    assert!(verdict.races.is_empty(), "{context}");
    assert!(
        verdict
            .requeues
            .iter()
            .any(|r| r.job_id == x2 && r.stale_claim == stale_claim_2 && !r.stale_driver_ran),
        "the second run got its new Job after its stale one was deleted: {context}"
    );
    // The first run's stale Job had ended before its new claim got a Job.
    let (_, stale_claim_1) = stale
        .iter()
        .find(|(name, _)| name.contains(x1.as_str()))
        .cloned()
        .expect("the first run's first Job");
    assert!(
        verdict
            .requeues
            .iter()
            .any(|r| r.job_id == x1 && r.stale_claim == stale_claim_1 && r.stale_driver_ran),
        "the first run got its new Job after its stale one ended: {context}"
    );
    // The first run's stale claim was refused and its Job ended Failed; the
    // second run's stale Job is gone; each run finished through another
    // claim.
    let jobs = t.stack.cluster.jobs(None).await.expect("jobs");
    for (name, claim) in &stale {
        let first = name.contains(x1.as_str());
        let id = if first { &x1 } else { &x2 };
        let job = jobs.iter().find(|j| j["metadata"]["name"] == name.as_str());
        if first {
            assert!(
                record
                    .refused
                    .iter()
                    .any(|r| r.job_id == *id && r.claim == *claim),
                "the stale claim {claim} of {id} was refused at its first report: {context}"
            );
            let job = job.expect("the stale Job is kept (TTL)");
            assert!(
                job["status"]["conditions"].as_array().is_some_and(|cs| cs
                    .iter()
                    .any(|c| c["type"] == "Failed" && c["status"] == "True")),
                "the stale Job {name} ended Failed: {job}"
            );
        } else {
            assert!(job.is_none(), "the stale Job {name} was deleted: {job:?}");
        }
        let done = record
            .entries
            .iter()
            .find(|e| e.job_id == *id && e.state == "succeeded")
            .expect("finished");
        assert!(
            done.claim.as_deref().is_some_and(|c| c != claim),
            "{id} finished through a newer claim: {done:?}"
        );
    }
    t.stack.check_alive().unwrap_or_else(|e| t.fail(e));
}

/// The driven runs' backend state, by id.
async fn state_of(t: &TestStack, id: &str) -> String {
    t.stack.backend.job(id).await.expect("job")["state"]
        .as_str()
        .unwrap_or("")
        .to_owned()
}

/// Issue 11 item 1: 500s on Job list and watch only, for the dispatcher's
/// token, while creates still work, for longer than the 30 s after which
/// the old cache counted itself current again. Meanwhile the backend's
/// clock passes more than a lease and two more runs wait in the queue; the
/// orphan sweep runs every second with a 1 s grace. Nothing is claimed or
/// created while the views are not current; the leases of the running
/// drivers are renewed from the last known view; nobody is reported lost;
/// no sandbox of a live Job is deleted; afterwards every run gets exactly
/// one Job and succeeds.
async fn a_job_list_and_watch_outage_starts_no_second_driver_reports_nothing_and_reaps_nothing(
    kind: ClusterKind,
) {
    const OUTAGE_S: f64 = 33.0;
    let mut t = TestStack::start(kind, |o| {
        o.orphan_grace_seconds = 1;
        o.extra_env.push((
            "TCAB_DISPATCHER_ORPHAN_SWEEP_INTERVAL_SECONDS".into(),
            "1".into(),
        ));
    })
    .await;
    let backend = t.stack.backend.clone();
    let running = backend
        .enqueue_batch(vec![
            run("long-a", json!({"duration_ms": 45_000, "log_lines": 1})),
            run("long-b", json!({"duration_ms": 45_000, "log_lines": 1})),
        ])
        .await
        .expect("enqueue");
    wait_for(
        "both drivers running with their sandboxes",
        Duration::from_secs(30),
        || async {
            for id in &running {
                if state_of(&t, id).await != "running" {
                    return Ok(None);
                }
            }
            Ok((t.sandboxes().await.len() == 2).then_some(()))
        },
    )
    .await
    .unwrap_or_else(|e| t.fail(e));

    let admin = t.admin();
    let outage_from = jiff::Timestamp::now();
    let rule = admin
        .add_fault(
            &tcab_kube_sim::FaultRule::new(tcab_kube_sim::ApiFaultMode::Error500)
                .verbs(["list", "watch"])
                .resources(["jobs"])
                .token(t.dispatcher_token())
                .for_seconds(OUTAGE_S)
                .closing_open_watches(),
        )
        .await
        .expect("the outage");
    let outage_to = outage_from + jiff::SignedDuration::from_secs_f64(OUTAGE_S);
    // The rule closes the open watches as it is added; the admitter learns
    // of it when its watch ends and its list fails. Work offered before that
    // could be claimed on the view it still had (a race a loaded machine
    // met), so wait until its run lane holds for a view that is not current.
    wait_for(
        "the admitter's run lane holding for a view that is not current",
        Duration::from_secs(20),
        || async {
            let s = t.stack.scrape(tcab_devstack::Container::Admitter).await?;
            let held = s.value(
                "tcab_dispatcher_lane_hold",
                &[("lane", "run"), ("reason", "view_not_current")],
            );
            Ok((held == Some(1.0)).then_some(()))
        },
    )
    .await
    .unwrap_or_else(|e| t.fail(e));
    let queued = backend
        .enqueue_batch(vec![
            run("short-c", json!({"duration_ms": 1000, "log_lines": 1})),
            run("short-d", json!({"duration_ms": 1000, "log_lines": 1})),
        ])
        .await
        .expect("enqueue");

    // More than a lease of backend time passes during the outage, in steps
    // the lease-keeper renews within (from its last known view).
    for _ in 0..12 {
        backend.advance_clock(11).await.expect("advance");
        wait_for(
            "the running drivers' leases renewed at the new time",
            Duration::from_secs(10),
            || async { Ok(t.leases_renewed(100).await?.then_some(())) },
        )
        .await
        .unwrap_or_else(|e| t.fail(e));
        // Pacing of the outage itself, not a wait for a result.
        tokio::time::sleep(Duration::from_millis(2200)).await;
    }
    let outage = admin
        .faults()
        .await
        .expect("fault list")
        .into_iter()
        .find(|f| f.id == rule)
        .expect("the outage rule");
    assert!(
        outage.live,
        "132 s of backend time passed while the outage lasted (machine too slow?): {outage:?}"
    );
    assert!(
        admin.fault_affected(rule).await.expect("counters") >= 3,
        "the three containers' lists and watches met the outage"
    );
    for id in &queued {
        assert_eq!(
            state_of(&t, id).await,
            "queued",
            "nothing is claimed while the admitter's view is not current"
        );
    }

    let (runs, _) = t
        .drained(Duration::from_secs(90), common::RunBy::Processes)
        .await;
    assert_eq!(runs.len(), 4, "no retry: {}", states(&runs));
    assert!(
        runs.iter().all(|j| j["state"] == "succeeded"),
        "{}",
        states(&runs)
    );
    let verdict = t.verdict().await;
    let context = format!("{verdict:#?}{}", t.logs());
    assert!(verdict.violations.is_empty(), "{context}");
    assert!(
        verdict.reports.is_empty(),
        "nobody reported lost or dead: {context}"
    );
    assert!(verdict.races.is_empty(), "{context}");
    assert_eq!(verdict.jobs, 4, "one Job per run: {context}");
    let cluster = t.audit().await;
    let created_during: Vec<&str> = cluster
        .iter()
        .filter(|e| {
            e.kind == "Job" && e.event == "ADDED" && e.at >= outage_from && e.at < outage_to
        })
        .map(|e| e.name.as_str())
        .collect();
    assert!(
        created_during.is_empty(),
        "no Job created during the outage: {created_during:?}"
    );
    let sandbox_deletes_by_dispatcher = cluster
        .iter()
        .filter(|e| {
            e.kind == "Pod"
                && e.actor == tcab_kube_sim::audit::Actor::Rbac
                && e.labels
                    .get("app.kubernetes.io/managed-by")
                    .map(String::as_str)
                    == Some("tcab-driver")
        })
        .count();
    assert_eq!(
        sandbox_deletes_by_dispatcher, 0,
        "the drivers deleted their own sandboxes; the reaper deleted none"
    );
    t.stack.check_alive().unwrap_or_else(|e| t.fail(e));
}

/// The name of a run's driver pod.
async fn driver_pod(t: &TestStack, id: &str) -> String {
    let selector = format!("tcab.dev/job-id={id},app.kubernetes.io/managed-by=tcab-dispatcher");
    let pods = t
        .stack
        .cluster
        .pods(&t.ns(), Some(&selector))
        .await
        .expect("pods");
    pods[0]["metadata"]["name"]
        .as_str()
        .expect("a driver pod")
        .to_owned()
}

/// Issue 11 item 3: hung Kubernetes calls (each answered only when the
/// client gives up, after `TCAB_DISPATCHER_KUBE_TIMEOUT_SECONDS`) stall
/// neither the other lane nor the renewals. The run lane's Job create hangs
/// (the Job is created, its answer never comes); a death makes the
/// lease-keeper read the dead driver's pod and log, which hang too. Within
/// the timeout, a publish is admitted and finishes, and the leases are
/// renewed at a new backend time. Afterwards the hung create is settled
/// (one Job for the run) and the death is reported.
async fn hung_kubernetes_calls_stall_neither_the_other_lane_nor_the_renewals(kind: ClusterKind) {
    const KUBE_TIMEOUT_S: i64 = 20;
    let t = TestStack::start(kind, |o| {
        o.extra_env.push((
            "TCAB_DISPATCHER_KUBE_TIMEOUT_SECONDS".into(),
            KUBE_TIMEOUT_S.to_string(),
        ));
    })
    .await;
    let backend = t.stack.backend.clone();
    let admin = t.admin();
    let ids = backend
        .enqueue_batch(vec![
            run(
                "keeps-running",
                json!({"duration_ms": 30_000, "log_lines": 1}),
            ),
            run("dies", json!({"hang": true, "log_lines": 2})),
        ])
        .await
        .expect("enqueue");
    let (steady, dies) = (ids[0].clone(), ids[1].clone());
    wait_for("both drivers running", Duration::from_secs(30), || async {
        Ok(
            (state_of(&t, &steady).await == "running" && state_of(&t, &dies).await == "running")
                .then_some(()),
        )
    })
    .await
    .unwrap_or_else(|e| t.fail(e));

    use tcab_kube_sim::{ApiFaultMode, FaultRule};
    let hung_create = admin
        .add_fault(
            &FaultRule::new(ApiFaultMode::Hang)
                .verbs(["create"])
                .resources(["jobs"])
                .token(t.dispatcher_token())
                .times(1)
                .after_applying(),
        )
        .await
        .expect("hang a create");
    let hung_reads = admin
        .add_fault(
            &FaultRule::new(ApiFaultMode::Hang)
                .verbs(["get", "list"])
                .resources(["pods", "pods/log"])
                .token(t.dispatcher_token())
                .for_seconds(KUBE_TIMEOUT_S as f64),
        )
        .await
        .expect("hang pod reads");

    // The run lane's create hangs: sent after `hang_from`, it cannot end
    // (the client gives up) before `hang_until`.
    let hang_from = jiff::Timestamp::now();
    let hang_until = hang_from + jiff::SignedDuration::from_secs(KUBE_TIMEOUT_S);
    let late = backend
        .enqueue_run(run(
            "created-late",
            json!({"duration_ms": 1000, "log_lines": 1}),
        ))
        .await
        .expect("enqueue");
    wait_for(
        "the run's create hanging",
        Duration::from_secs(20),
        || async { Ok((admin.fault_affected(hung_create).await? == 1).then_some(())) },
    )
    .await
    .unwrap_or_else(|e| t.fail(e));

    // A death: the lease-keeper's reads of the dead pod hang.
    admin
        .oom_kill(&t.ns(), &driver_pod(&t, &dies).await)
        .await
        .expect("oom kill");
    wait_for(
        "the lease-keeper's pod read hanging",
        Duration::from_secs(10),
        || async { Ok((admin.fault_affected(hung_reads).await? >= 1).then_some(())) },
    )
    .await
    .unwrap_or_else(|e| t.fail(e));

    // The publish lane admits and finishes a publish meanwhile.
    let publish = backend
        .enqueue_publish(json!({"release": "r1", "sim": {"duration_ms": 200}}))
        .await
        .expect("enqueue publish");
    wait_for("the publish done", Duration::from_secs(15), || async {
        Ok((backend.publish_job(&publish).await?["state"] == "succeeded").then_some(()))
    })
    .await
    .unwrap_or_else(|e| t.fail(e));
    // Renewals go on at a new backend time.
    backend.advance_clock(30).await.expect("advance");
    wait_for(
        "leases renewed at the new time",
        Duration::from_secs(10),
        || async { Ok(t.leases_renewed(100).await?.then_some(())) },
    )
    .await
    .unwrap_or_else(|e| t.fail(e));
    let now = jiff::Timestamp::now();
    let hung = admin.counters().await.expect("counters").hung_requests;
    assert!(
        now < hang_until && hung >= 1,
        "the publish and the renewals came while the create still hung ({hung} hanging, {:.1}s after it was sent at the earliest)",
        now.duration_since(hang_from).as_secs_f64()
    );

    // Afterwards: the hung create is settled (its Job exists) and the run
    // finishes; the death is reported with its cause.
    wait_for("the late run done", Duration::from_secs(60), || async {
        Ok((state_of(&t, &late).await == "succeeded").then_some(()))
    })
    .await
    .unwrap_or_else(|e| t.fail(e));
    let dead = wait_for("the death reported", Duration::from_secs(60), || async {
        let j = backend.job(&dies).await?;
        Ok((j["state"] == "failed").then_some(j))
    })
    .await
    .unwrap_or_else(|e| t.fail(e));
    assert!(
        dead["detail"].as_str().unwrap_or("").contains("OOMKilled"),
        "{dead}"
    );
    let verdict = t.verdict().await;
    let context = format!("{verdict:#?}{}", t.logs());
    assert!(verdict.violations.is_empty(), "{context}");
    assert!(verdict.races.is_empty(), "{context}");
    let jobs = t.jobs_by_id().await;
    assert_eq!(jobs[&late].len(), 1, "one Job for the late run: {jobs:?}");
    let mut t = t;
    t.stack.check_alive().unwrap_or_else(|e| t.fail(e));
}

on_both_clusters!(
    a_claim_applied_late_requeues_an_unstarted_run_and_its_stale_driver_is_stopped,
    a_job_list_and_watch_outage_starts_no_second_driver_reports_nothing_and_reaps_nothing,
    hung_kubernetes_calls_stall_neither_the_other_lane_nor_the_renewals,
);
