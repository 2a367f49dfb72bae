//! A claimed job's Job is the only live one of its job id (a stale Job of an
//! older claim is deleted first), a claim that cannot become a Job ends once
//! (reported failed with its own token), and a cap of 0 pauses a lane: ticks
//! against the mock backend, the fake lease-keeper and the fake Jobs API.

use crate::support::backend::token_for;
use crate::support::*;
use kube::runtime::watcher::Event;
use serde_json::json;
use tcab_admitter::AdmissionResult;
use tcab_admitter::{Decision, HoldReason};
use tcab_admitter::{LaneOutcome, MAX_REQUEST_BYTES, PoisonReason, PoisonReport};
use tcab_shared::{Lane, names};

fn name_for(lane: Lane, id: &str) -> String {
    names::job_name(lane, id, &names::claim_tag(&token_for(id)))
}

/// Seeds a live Job of `id` under an older claim, on the API and in the cache.
fn seed_stale(
    rig: &Rig,
    cache: &tcab_shared::job_cache::OwnedJobs,
    lane: Lane,
    id: &str,
) -> String {
    let name = rig.kube.seed(lane, id, "01dc1a1m", MANAGED_BY);
    let job = rig.kube.lock().jobs[&name].clone();
    cache.apply(Event::Apply(serde_json::from_value(job).unwrap()));
    name
}

#[tokio::test(start_paused = true)]
async fn a_live_job_of_the_claimed_id_under_an_older_claim_is_deleted_before_the_new_one() {
    let rig = Rig::start().await;
    let (mut admitter, cache) = rig.admitter(&rig.config(&[]));
    let stale = seed_stale(&rig, &cache, Lane::Run, "run-0");
    // Another job's live Job is no business of this claim.
    let other = rig.kube.seed(Lane::Run, "run-9", "01dc1a1m", MANAGED_BY);
    rig.backend.queue(Lane::Run, 1);

    let report = admitter.tick().await;
    assert!(
        matches!(&report.run, Some(LaneOutcome::Admitted { job_id, .. }) if job_id == "run-0"),
        "{:?}",
        report.run
    );
    assert_eq!(rig.kube.lock().deleted_jobs, std::slice::from_ref(&stale));
    let mut live = rig.kube.live(Lane::Run);
    live.sort();
    let mut want = vec![name_for(Lane::Run, "run-0"), other];
    want.sort();
    assert_eq!(live, want, "one live Job for run-0");
    // The stale Job carries an Event saying why it went.
    let [event] = events_about(&rig, &stale, 1)
        .await
        .try_into()
        .expect("one Event");
    assert_eq!(event["reason"], "DeletedStale");
    assert_eq!(event["type"], "Normal");
    assert_eq!(event["reportingController"], "tcab.dev/admitter");
    let note = event["note"].as_str().unwrap_or_default();
    assert!(
        note.contains("job run-0 under the older claim 01dc1a1m deleted"),
        "{note}"
    );
}

/// The Events recorded about the Job `name`, once there are at least `n`.
async fn events_about(rig: &Rig, name: &str, n: usize) -> Vec<serde_json::Value> {
    tcab_testkit::wait::until(
        &format!("{n} Events about {name}"),
        std::time::Duration::from_secs(10),
        || async move {
            let about: Vec<serde_json::Value> = rig
                .kube
                .recorded_events()
                .into_iter()
                .filter(|e| e["regarding"]["name"] == name)
                .collect();
            (about.len() >= n).then_some(about)
        },
    )
    .await
}

#[tokio::test(start_paused = true)]
async fn a_stale_job_that_cannot_be_deleted_does_not_stop_the_admission() {
    let rig = Rig::start().await;
    let (mut admitter, cache) = rig.admitter(&rig.config(&[]));
    let stale = seed_stale(&rig, &cache, Lane::Publish, "pub-0");
    rig.kube.lock().delete_fault = Some((500, "InternalError".into(), "etcd is sad".into()));
    rig.backend.queue(Lane::Publish, 1);

    let report = admitter.tick().await;
    assert!(matches!(
        &report.publish,
        Some(LaneOutcome::Admitted { .. })
    ));
    assert_eq!(report.result(Lane::Publish), AdmissionResult::Created);
    assert!(rig.kube.live(Lane::Publish).contains(&stale), "still there");
    assert!(
        rig.kube
            .live(Lane::Publish)
            .contains(&name_for(Lane::Publish, "pub-0"))
    );

    // A stale Job already gone (404) is as good as deleted.
    rig.kube.lock().delete_fault = None;
    let gone = rig.kube.seed(Lane::Run, "run-0", "01dc1a1m", MANAGED_BY);
    let job = rig.kube.lock().jobs.remove(&gone).unwrap();
    cache.apply(Event::Apply(serde_json::from_value(job).unwrap()));
    rig.backend.queue(Lane::Run, 1);
    // Past the rest after the first tick's empty claim.
    tokio::time::advance(std::time::Duration::from_secs(1)).await;
    let report = admitter.tick().await;
    assert!(
        matches!(&report.run, Some(LaneOutcome::Admitted { .. })),
        "{:?}",
        report.run
    );
    assert!(rig.kube.lock().deleted_jobs.contains(&gone));
}

#[tokio::test(start_paused = true)]
async fn a_claim_missing_a_field_is_reported_failed_once_with_its_own_token() {
    let rig = Rig::start().await;
    let (mut admitter, _cache) = rig.admitter(&rig.config(&[]));
    rig.backend.queue(Lane::Run, 2);
    rig.backend
        .add_run_row("run-0", "dispatched", &token_for("run-0"));
    rig.backend
        .poison_claims(Lane::Run, Some(json!({"launch_request": null})));

    let report = admitter.tick().await;
    match &report.run {
        Some(LaneOutcome::Poisoned {
            job_id,
            reason: PoisonReason::Malformed,
            detail,
            report: PoisonReport::Reported,
            ..
        }) => {
            assert_eq!(job_id.as_deref(), Some("run-0"));
            assert!(detail.contains("launch_request"), "{detail}");
        }
        other => panic!("expected a reported poisoned claim, got {other:?}"),
    }
    assert_eq!(report.result(Lane::Run), AdmissionResult::Error);
    let reports = rig.backend.lock().status_reports.clone();
    assert_eq!(reports.len(), 1, "reported once");
    let (id, token, body) = &reports[0];
    assert_eq!(
        (id.as_str(), token.as_str()),
        ("run-0", token_for("run-0").as_str())
    );
    assert_eq!(body["state"], "failed");
    assert_eq!(
        body["failure_kind"], "agent",
        "not retried: the same request would fail again"
    );
    assert!(body["detail"].as_str().unwrap().contains("launch_request"));
    assert_eq!(rig.backend.row_state("run-0"), "failed");
    assert_eq!(rig.kube.creates(Lane::Run), 0, "no Job");
    assert!(rig.gate.puts().is_empty(), "no token in the vault");

    // The lane goes on: the next claim, whole, becomes a Job.
    rig.backend.poison_claims(Lane::Run, None);
    let report = admitter.tick().await;
    assert!(matches!(&report.run, Some(LaneOutcome::Admitted { job_id, .. }) if job_id == "run-1"));
    assert_eq!(rig.backend.lock().status_reports.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_publish_request_too_large_for_a_job_is_a_failed_result() {
    let rig = Rig::start().await;
    let (mut admitter, _cache) = rig.admitter(&rig.config(&[]));
    rig.backend.queue(Lane::Publish, 1);
    rig.backend.add_publish_row("pub-0", &token_for("pub-0"));
    let big = "x".repeat(MAX_REQUEST_BYTES);
    rig.backend
        .poison_claims(Lane::Publish, Some(json!({"request": {"blob": big}})));

    let report = admitter.tick().await;
    assert!(
        matches!(
            &report.publish,
            Some(LaneOutcome::Poisoned {
                reason: PoisonReason::TooLarge,
                report: PoisonReport::Reported,
                ..
            })
        ),
        "{:?}",
        report.publish
    );
    let results = rig.backend.lock().publish_results.clone();
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].1, token_for("pub-0"));
    assert_eq!(results[0].2["outcome"], "failed");
    assert!(results[0].2["detail"].as_str().unwrap().contains("bytes"));
    assert_eq!(rig.backend.row_state("pub-0"), "failed");
    assert_eq!(rig.kube.creates(Lane::Publish), 0);
}

#[tokio::test(start_paused = true)]
async fn a_poisoned_claim_without_a_usable_token_is_only_logged_by_its_shape() {
    let rig = Rig::start().await;
    let (mut admitter, _cache) = rig.admitter(&rig.config(&[]));
    rig.backend.queue(Lane::Run, 1);
    rig.backend
        .poison_claims(Lane::Run, Some(json!({"token": 42})));

    let report = admitter.tick().await;
    match &report.run {
        Some(LaneOutcome::Poisoned {
            job_id,
            report: PoisonReport::Impossible { shape },
            ..
        }) => {
            assert_eq!(job_id.as_deref(), Some("run-0"));
            assert!(shape.contains("token: number"), "{shape}");
        }
        other => panic!("expected an unreportable poisoned claim, got {other:?}"),
    }
    assert!(rig.backend.lock().status_reports.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_job_the_api_server_refuses_with_422_is_reported_failed_and_its_token_forgotten() {
    let rig = Rig::start().await;
    let (mut admitter, _cache) = rig.admitter(&rig.config(&[]));
    rig.backend.queue(Lane::Run, 1);
    rig.backend
        .add_run_row("run-0", "dispatched", &token_for("run-0"));
    rig.kube.refuse(
        Lane::Run,
        Some((
            422,
            "Invalid",
            "Job.batch \"x\" is invalid: metadata.labels: Invalid value",
        )),
    );

    let report = admitter.tick().await;
    match &report.run {
        Some(LaneOutcome::Poisoned {
            reason: PoisonReason::Invalid,
            detail,
            report: PoisonReport::Reported,
            ..
        }) => assert!(detail.contains("422 Invalid"), "{detail}"),
        other => panic!("expected a reported 422, got {other:?}"),
    }
    assert_eq!(rig.backend.row_state("run-0"), "failed");
    let claim = names::claim_tag(&token_for("run-0"));
    assert_eq!(rig.gate.forgets(), [("run-0".to_owned(), claim)]);
    // Reported once: nothing more on the next tick (the queue is empty).
    admitter.tick().await;
    assert_eq!(rig.backend.lock().status_reports.len(), 1);
    // The Job it would have had carries the failure, with the refusal.
    let name = name_for(Lane::Run, "run-0");
    let events = events_about(&rig, &name, 1).await;
    let [event] = events.as_slice() else {
        panic!("one Event about {name}: {events:?}")
    };
    assert_eq!(event["reason"], "FailedFast");
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["action"], "ReportFailed");
    let note = event["note"].as_str().unwrap_or_default();
    assert!(
        note.contains("job run-0 failed fast (invalid)") && note.contains("422 Invalid"),
        "{note}"
    );
    assert!(!note.contains(&token_for("run-0")), "no token: {note}");
}

#[tokio::test(start_paused = true)]
async fn a_cap_of_zero_pauses_its_lane_only() {
    let rig = Rig::start().await;
    rig.backend.queue(Lane::Run, 2);
    rig.backend.queue(Lane::Publish, 2);
    let (mut admitter, _cache) =
        rig.admitter(&rig.config(&[("TCAB_DISPATCHER_MAX_INFLIGHT", "0")]));
    for _ in 0..3 {
        let report = admitter.tick().await;
        assert_eq!(report.plan.run, Decision::Hold(HoldReason::Paused));
        assert_eq!(report.result(Lane::Run), AdmissionResult::Paused);
    }
    assert_eq!(rig.backend.requests(Lane::Run), 0, "no claim");
    assert_eq!(rig.backend.claimed(Lane::Publish), ["pub-0", "pub-1"]);
}
