//! Tick-level tests: an admitter driven one tick at a time (both lanes side
//! by side) against the mock backend, the fake lease-keeper and the fake
//! Jobs API, on paused tokio time (it moves only when a test advances it, or
//! when every task waits on a timer).

use crate::support::backend::token_for;
use crate::support::fake_kube::CreateFault;
use crate::support::gate::dead_addr;
use crate::support::*;
use kube::runtime::watcher::Event;
use std::time::Duration;
use tcab_admitter::AdmissionResult;
use tcab_admitter::Confirmation;
use tcab_admitter::{CreateFailure, LaneOutcome, Settled};
use tcab_admitter::{Decision, HoldReason};
use tcab_proto::gate::{GateReason, GateVerdict};
use tcab_proto::vault::Lane as PbLane;
use tcab_shared::tick::TickOutcome;
use tcab_shared::{Lane, names};

fn name_for(lane: Lane, id: &str) -> String {
    names::job_name(lane, id, &names::claim_tag(&token_for(id)))
}

/// The vault key of a claim of the mock backend: (job id, claim tag).
fn key(id: &str) -> (String, String) {
    (id.to_owned(), names::claim_tag(&token_for(id)))
}

fn gate_closed_with(decision: &Decision, reason: GateReason, part: &str) {
    match decision {
        Decision::Hold(HoldReason::GateClosed(closed)) => {
            assert_eq!(closed.reason, reason, "{closed:?}");
            assert!(closed.detail.contains(part), "{closed:?} lacks {part:?}")
        }
        other => panic!("expected a closed gate ({reason:?}: {part}), got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn one_job_per_lane_per_tick_with_tokens_in_the_vault_first() {
    let rig = Rig::start().await;
    rig.backend.queue(Lane::Run, 3);
    rig.backend.queue(Lane::Publish, 3);
    let (mut admitter, _cache) = rig.admitter(&rig.config(&[]));

    let report = admitter.tick().await;
    assert_eq!(report.outcome(), TickOutcome::Busy);
    assert!(matches!(&report.run, Some(LaneOutcome::Admitted { job_id, .. }) if job_id == "run-0"));
    assert!(
        matches!(&report.publish, Some(LaneOutcome::Admitted { job_id, .. }) if job_id == "pub-0")
    );
    assert_eq!(
        (rig.kube.creates(Lane::Run), rig.kube.creates(Lane::Publish)),
        (1, 1)
    );
    assert_eq!(rig.backend.claimed(Lane::Run), ["run-0"]);

    // The Jobs carry the deterministic names, and the vault holds each token under its claim.
    assert_eq!(rig.kube.live(Lane::Run), [name_for(Lane::Run, "run-0")]);
    assert_eq!(
        rig.kube.live(Lane::Publish),
        [name_for(Lane::Publish, "pub-0")]
    );
    let mut puts = rig.gate.puts();
    puts.sort_by(|a, b| a.job_id.cmp(&b.job_id));
    assert_eq!(puts.len(), 2);
    assert_eq!(puts[0].job_id, "pub-0");
    assert_eq!(puts[0].token, token_for("pub-0"));
    assert_eq!(puts[0].claim, names::claim_tag(&token_for("pub-0")));
    assert_eq!(puts[1].job_id, "run-0");

    admitter.tick().await;
    assert_eq!(
        (rig.kube.creates(Lane::Run), rig.kube.creates(Lane::Publish)),
        (2, 2)
    );
}

#[tokio::test(start_paused = true)]
async fn jobs_created_but_not_yet_seen_count_against_the_cap() {
    let rig = Rig::start().await;
    rig.backend.queue(Lane::Run, 5);
    let config = rig.config(&[
        ("TCAB_DISPATCHER_MAX_INFLIGHT", "2"),
        ("TCAB_PUBLISHER_IMAGE", ""),
    ]);
    // The cache is never fed: the two creations are never seen.
    let (mut admitter, _cache) = rig.admitter(&config);
    admitter.tick().await;
    admitter.tick().await;
    let report = admitter.tick().await;
    assert_eq!(
        report.plan.run,
        Decision::Hold(HoldReason::LaneFull {
            in_flight: 2,
            cap: 2
        })
    );
    assert_eq!(report.plan.publish, Decision::Hold(HoldReason::Disabled));
    assert_eq!(report.outcome(), TickOutcome::Idle);
    assert_eq!(rig.backend.requests(Lane::Run), 2);
    assert_eq!(
        rig.backend.requests(Lane::Publish),
        0,
        "publish lane closed without an image"
    );
    assert_eq!(rig.kube.max_live(Lane::Run), 2);
}

#[tokio::test(start_paused = true)]
async fn a_seen_job_is_counted_once_and_a_finished_one_frees_its_slot() {
    let rig = Rig::start().await;
    rig.backend.queue(Lane::Run, 5);
    let config = rig.config(&[("TCAB_DISPATCHER_MAX_INFLIGHT", "2")]);
    let (mut admitter, cache) = rig.admitter(&config);
    admitter.tick().await;
    // The watch shows the created Job: it must not count twice.
    let job = |name: &str, done: bool| {
        let status = if done {
            serde_json::json!({"conditions": [{"type": "Complete", "status": "True"}]})
        } else {
            serde_json::json!({})
        };
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {names::JOB_KIND: "run"}}, "status": status
        }))
        .unwrap()
    };
    let first = name_for(Lane::Run, "run-0");
    cache.apply(Event::Apply(job(&first, false)));
    let report = admitter.tick().await;
    assert_eq!(report.plan.run, Decision::Admit { in_flight: 1 });
    assert_eq!(
        admitter.lane_state(Lane::Run).created_unseen(),
        [name_for(Lane::Run, "run-1")]
    );
    let report = admitter.tick().await;
    assert_eq!(
        report.plan.run,
        Decision::Hold(HoldReason::LaneFull {
            in_flight: 2,
            cap: 2
        })
    );
    cache.apply(Event::Apply(job(&first, true)));
    let report = admitter.tick().await;
    assert_eq!(report.plan.run, Decision::Admit { in_flight: 1 });
    assert_eq!(rig.backend.claimed(Lane::Run), ["run-0", "run-1", "run-2"]);
}

#[tokio::test(start_paused = true)]
async fn a_publish_is_admitted_while_the_run_lane_is_full_and_its_queue_long() {
    let rig = Rig::start().await;
    rig.backend.queue(Lane::Run, 100);
    rig.backend.queue(Lane::Publish, 1);
    let config = rig.config(&[("TCAB_DISPATCHER_MAX_INFLIGHT", "1")]);
    let (mut admitter, cache) = rig.admitter(&config);
    let busy: k8s_openapi::api::batch::v1::Job = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "tcab-driver-old-1", "labels": {names::JOB_KIND: "run"}}
    }))
    .unwrap();
    cache.apply(Event::Apply(busy));
    let report = admitter.tick().await;
    assert_eq!(
        report.plan.run,
        Decision::Hold(HoldReason::LaneFull {
            in_flight: 1,
            cap: 1
        })
    );
    assert!(matches!(report.publish, Some(LaneOutcome::Admitted { .. })));
    assert_eq!(rig.backend.requests(Lane::Run), 0);
}

#[tokio::test(start_paused = true)]
async fn already_exists_is_a_lost_race_and_a_success() {
    let rig = Rig::start().await;
    rig.backend.queue(Lane::Run, 2);
    let existing = rig.kube.seed(
        Lane::Run,
        "run-0",
        &names::claim_tag(&token_for("run-0")),
        MANAGED_BY,
    );
    let (mut admitter, _cache) = rig.admitter(&rig.config(&[]));
    let report = admitter.tick().await;
    match &report.run {
        Some(LaneOutcome::AlreadyExists { job_id, job_name }) => {
            assert_eq!(
                (job_id.as_str(), job_name.as_str()),
                ("run-0", existing.as_str())
            );
        }
        other => panic!("expected a lost race, got {other:?}"),
    }
    assert_eq!(report.outcome(), TickOutcome::Busy);
    let state = admitter.lane_state(Lane::Run);
    assert_eq!((state.failures(), state.backoff_until()), (0, None));
    assert_eq!(state.created_unseen(), [existing]);
    // No back-off: the next tick claims again.
    admitter.tick().await;
    assert_eq!(rig.backend.claimed(Lane::Run), ["run-0", "run-1"]);
}

#[tokio::test(start_paused = true)]
async fn creation_failures_back_off_their_lane_only_and_success_resets() {
    let rig = Rig::start().await;
    rig.backend.queue(Lane::Run, 10);
    rig.backend.queue(Lane::Publish, 10);
    rig.kube
        .refuse(Lane::Run, Some((403, "Forbidden", "exceeded quota: jobs")));
    let (mut admitter, _cache) = rig.admitter(&rig.config(&[]));

    let report = admitter.tick().await;
    match &report.run {
        Some(LaneOutcome::CreateFailed {
            job_id,
            reason:
                CreateFailure::Api {
                    code,
                    reason,
                    message,
                },
            ..
        }) => {
            assert_eq!(
                (job_id.as_str(), *code, reason.as_str()),
                ("run-0", 403, "Forbidden")
            );
            assert!(message.contains("exceeded quota"));
        }
        other => panic!("expected a creation failure, got {other:?}"),
    }
    assert!(matches!(report.publish, Some(LaneOutcome::Admitted { .. })));
    assert_eq!(
        report.outcome(),
        TickOutcome::Busy,
        "the publish lane still admitted"
    );
    assert_eq!(report.result(Lane::Run), AdmissionResult::Error);
    assert_eq!(report.result(Lane::Publish), AdmissionResult::Created);
    // A refusal is definitive: the token is forgotten and no slot is held.
    assert_eq!(rig.gate.forgets(), [key("run-0")]);
    assert!(admitter.lane_state(Lane::Run).unsettled().is_empty());
    assert_eq!(
        rig.kube.create_requests(Lane::Run),
        1,
        "a 403 is not retried"
    );

    // The clock stands still: the run lane holds, the publish lane goes on.
    for _ in 0..3 {
        let report = admitter.tick().await;
        assert!(matches!(
            report.plan.run,
            Decision::Hold(HoldReason::BackingOff { .. })
        ));
        assert!(matches!(report.publish, Some(LaneOutcome::Admitted { .. })));
    }
    assert_eq!(rig.backend.requests(Lane::Run), 1);
    assert_eq!(rig.kube.creates(Lane::Publish), 4);

    // 1 s later it tries again, fails again, and now waits 2 s.
    tokio::time::advance(Duration::from_secs(1)).await;
    admitter.tick().await;
    assert_eq!(rig.backend.requests(Lane::Run), 2);
    assert_eq!(admitter.lane_state(Lane::Run).failures(), 2);
    tokio::time::advance(Duration::from_secs(1)).await;
    let report = admitter.tick().await;
    assert!(matches!(
        report.plan.run,
        Decision::Hold(HoldReason::BackingOff { .. })
    ));
    assert_eq!(rig.backend.requests(Lane::Run), 2);

    // The cluster accepts again: the next attempt succeeds and resets the back-off.
    rig.kube.refuse(Lane::Run, None);
    tokio::time::advance(Duration::from_secs(1)).await;
    let report = admitter.tick().await;
    assert!(matches!(&report.run, Some(LaneOutcome::Admitted { job_id, .. }) if job_id == "run-2"));
    assert_eq!(admitter.lane_state(Lane::Run).failures(), 0);
    admitter.tick().await;
    assert_eq!(rig.backend.requests(Lane::Run), 4);
}

#[tokio::test(start_paused = true)]
async fn a_claim_answered_5xx_holds_only_its_lane_until_the_next_poll() {
    let rig = Rig::start().await;
    rig.backend.queue(Lane::Run, 3);
    rig.backend.queue(Lane::Publish, 3);
    rig.backend.fail_claims(Lane::Run, Some(500));
    let (mut admitter, _cache) = rig.admitter(&rig.config(&[]));
    let report = admitter.tick().await;
    match &report.run {
        Some(LaneOutcome::ClaimFailed(error)) => assert_eq!(error.status(), Some(500)),
        other => panic!("expected a failed claim, got {other:?}"),
    }
    assert!(matches!(report.publish, Some(LaneOutcome::Admitted { .. })));
    // A busy publish lane does not make the run lane hammer the failing backend.
    let report = admitter.tick().await;
    assert!(matches!(
        report.plan.run,
        Decision::Hold(HoldReason::BackingOff { .. })
    ));
    assert!(matches!(report.publish, Some(LaneOutcome::Admitted { .. })));
    assert_eq!(rig.backend.requests(Lane::Run), 1);
    assert_eq!(
        admitter.lane_state(Lane::Run).failures(),
        0,
        "not a creation failure"
    );
    // After a poll interval it claims again and succeeds.
    rig.backend.fail_claims(Lane::Run, None);
    tokio::time::advance(Duration::from_millis(50)).await;
    let report = admitter.tick().await;
    assert!(matches!(&report.run, Some(LaneOutcome::Admitted { job_id, .. }) if job_id == "run-0"));
}

#[tokio::test(start_paused = true)]
async fn an_unreachable_lease_keeper_means_no_claim() {
    let rig = Rig::start().await;
    rig.backend.queue(Lane::Run, 3);
    rig.backend.queue(Lane::Publish, 3);
    let config = rig.config(&[]);
    let mut admitter = rig.admitter_with(&config, ready_cache(), dead_addr().await);
    for _ in 0..3 {
        let report = admitter.tick().await;
        for lane in Lane::ALL {
            match report.plan.lane(lane) {
                Decision::Hold(HoldReason::GateClosed(closed)) => {
                    assert_eq!(closed.reason, GateReason::KeeperUnreachable);
                    assert!(
                        closed.detail.contains("lease-keeper unreachable"),
                        "{closed:?}"
                    )
                }
                other => panic!("expected a closed gate, got {other:?}"),
            }
        }
        assert_eq!(report.outcome(), TickOutcome::Idle);
    }
    assert_eq!(
        rig.backend.requests(Lane::Run) + rig.backend.requests(Lane::Publish),
        0
    );
}

#[tokio::test(start_paused = true)]
async fn a_closed_verdict_holds_only_its_lane_with_the_lease_keepers_reason() {
    let rig = Rig::start().await;
    rig.backend.queue(Lane::Run, 3);
    rig.backend.queue(Lane::Publish, 3);
    let (mut admitter, _cache) = rig.admitter(&rig.config(&[]));
    rig.gate.set_verdict(
        Lane::Run,
        GateVerdict::closed(
            GateReason::RenewalFailing,
            "the latest run lease renewal failed: POST /jobs/leases answered 500",
        ),
    );
    let report = admitter.tick().await;
    gate_closed_with(
        &report.plan.run,
        GateReason::RenewalFailing,
        "latest run lease renewal failed: POST /jobs/leases answered 500",
    );
    assert_eq!(report.result(Lane::Run), AdmissionResult::GateClosed);
    assert!(matches!(report.publish, Some(LaneOutcome::Admitted { .. })));
    assert_eq!(rig.backend.requests(Lane::Run), 0);
}

#[tokio::test(start_paused = true)]
async fn the_lease_keepers_view_not_current_closes_both_lanes() {
    let rig = Rig::start().await;
    rig.backend.queue(Lane::Run, 3);
    rig.backend.queue(Lane::Publish, 3);
    let (mut admitter, _cache) = rig.admitter(&rig.config(&[]));
    rig.gate.set_both(GateVerdict::closed(
        GateReason::ViewNotCurrent,
        "the lease-keeper's Job view is not current: the lease-keeper's Job watch failed: 500 Internal Server Error",
    ));
    let report = admitter.tick().await;
    for lane in Lane::ALL {
        gate_closed_with(
            report.plan.lane(lane),
            GateReason::ViewNotCurrent,
            "Job watch failed: 500",
        );
    }
    assert_eq!(
        rig.backend.requests(Lane::Run) + rig.backend.requests(Lane::Publish),
        0
    );
    rig.gate.set_both(GateVerdict::Open);
    let report = admitter.tick().await;
    assert!(report.plan.run.admits() && report.plan.publish.admits());
}

#[tokio::test(start_paused = true)]
async fn each_lane_asks_with_its_lane_and_the_configured_maximum_age() {
    let rig = Rig::start().await;
    rig.backend.queue(Lane::Run, 3);
    rig.backend.queue(Lane::Publish, 3);
    let config = rig.config(&[]);
    let (mut admitter, _cache) = rig.admitter(&config);
    rig.gate.set_verdict(
        Lane::Publish,
        GateVerdict::closed(
            GateReason::RenewalStale,
            "the last successful publish lease renewal was 61.0s ago (max 60.0s)",
        ),
    );
    let report = admitter.tick().await;
    gate_closed_with(
        &report.plan.publish,
        GateReason::RenewalStale,
        "last successful publish lease renewal was",
    );
    assert!(matches!(report.run, Some(LaneOutcome::Admitted { .. })));
    let max_age_ms = config.gate_max_age.as_millis() as u64;
    let mut asked = rig.gate.asked();
    asked.sort();
    assert_eq!(
        asked,
        [
            (PbLane::Run as i32, max_age_ms),
            (PbLane::Publish as i32, max_age_ms)
        ]
    );
    // No renewal has succeeded yet: closed too.
    rig.gate.set_verdict(Lane::Publish, GateVerdict::Open);
    rig.gate.set_verdict(
        Lane::Run,
        GateVerdict::closed(
            GateReason::NeverRenewed,
            "no run lease renewal has succeeded yet",
        ),
    );
    let report = admitter.tick().await;
    gate_closed_with(
        &report.plan.run,
        GateReason::NeverRenewed,
        "no run lease renewal has succeeded yet",
    );
    assert!(report.plan.publish.admits());
    assert_eq!(rig.backend.requests(Lane::Run), 1);
    assert_eq!(rig.backend.requests(Lane::Publish), 1);
}

#[tokio::test(start_paused = true)]
async fn the_gate_is_asked_before_every_claim_so_a_failed_renewal_stops_the_next_one() {
    let rig = Rig::start().await;
    rig.backend.queue(Lane::Run, 10);
    let (mut admitter, _cache) = rig.admitter(&rig.config(&[("TCAB_PUBLISHER_IMAGE", "")]));
    assert!(admitter.tick().await.plan.run.admits());
    assert_eq!(rig.gate.gate_calls(), 1);
    // The clock stands still: nothing but the gate's answer changes.
    rig.gate.set_verdict(
        Lane::Run,
        GateVerdict::closed(
            GateReason::RenewalFailing,
            "the latest run lease renewal failed",
        ),
    );
    let report = admitter.tick().await;
    gate_closed_with(
        &report.plan.run,
        GateReason::RenewalFailing,
        "latest run lease renewal failed",
    );
    assert_eq!(rig.gate.gate_calls(), 2);
    assert_eq!(
        rig.backend.requests(Lane::Run),
        1,
        "no claim behind a failed renewal"
    );
    rig.gate.set_verdict(Lane::Run, GateVerdict::Open);
    assert!(admitter.tick().await.plan.run.admits());
    assert_eq!(rig.gate.gate_calls(), 3);
}

/// A full lane still reads its gate every tick (so its reading, exported,
/// stays true after a restart with every slot taken), claims nothing, and
/// gives being full as its reason whatever the gate says.
#[tokio::test(start_paused = true)]
async fn a_full_lane_reads_its_gate_and_claims_nothing() {
    let rig = Rig::start().await;
    rig.backend.queue(Lane::Run, 3);
    let config = rig.config(&[
        ("TCAB_DISPATCHER_MAX_INFLIGHT", "1"),
        ("TCAB_PUBLISHER_IMAGE", ""),
    ]);
    let (mut admitter, cache) = rig.admitter(&config);
    let busy: k8s_openapi::api::batch::v1::Job = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "tcab-driver-old-1", "labels": {names::JOB_KIND: "run"}}
    }))
    .unwrap();
    cache.apply(Event::Apply(busy));
    let report = admitter.tick().await;
    assert!(matches!(
        report.plan.run,
        Decision::Hold(HoldReason::LaneFull { .. })
    ));
    assert_eq!(rig.gate.gate_calls(), 1, "the full lane read its gate");
    rig.gate.set_verdict(
        Lane::Run,
        GateVerdict::closed(GateReason::RenewalFailing, "renewals fail"),
    );
    let report = admitter.tick().await;
    assert!(matches!(
        report.plan.run,
        Decision::Hold(HoldReason::LaneFull { .. })
    ));
    assert_eq!(rig.gate.gate_calls(), 2);
    assert_eq!(rig.backend.requests(Lane::Run), 0);
}

#[tokio::test(start_paused = true)]
async fn a_failed_put_is_retried_a_bounded_number_of_times_and_the_job_still_created() {
    let rig = Rig::start().await;
    rig.backend.queue(Lane::Run, 1);
    rig.gate.refuse_puts(true);
    let (mut admitter, _cache) = rig.admitter(&rig.config(&[("TCAB_PUBLISHER_IMAGE", "")]));
    let report = admitter.tick().await;
    assert!(matches!(report.run, Some(LaneOutcome::Admitted { .. })));
    assert_eq!(rig.gate.put_calls(), 3);
    assert_eq!(rig.kube.creates(Lane::Run), 1);
}

#[tokio::test(start_paused = true)]
async fn a_view_not_listed_yet_holds_every_lane() {
    let rig = Rig::start().await;
    rig.backend.queue(Lane::Run, 1);
    let config = rig.config(&[]);
    let mut admitter = rig.admitter_with(
        &config,
        tcab_shared::job_cache::OwnedJobs::new(),
        rig.gate.addr,
    );
    let report = admitter.tick().await;
    for lane in Lane::ALL {
        match report.plan.lane(lane) {
            Decision::Hold(HoldReason::ViewNotCurrent { why }) => {
                assert!(why.contains("not been listed"), "{why}")
            }
            other => panic!("expected a view hold, got {other:?}"),
        }
        assert_eq!(report.result(lane), AdmissionResult::ViewNotCurrent);
    }
    assert_eq!(rig.backend.requests(Lane::Run), 0);
}

#[tokio::test(start_paused = true)]
async fn no_claim_while_the_admitters_own_view_is_not_current() {
    let rig = Rig::start().await;
    rig.backend.queue(Lane::Run, 3);
    rig.backend.queue(Lane::Publish, 3);
    let (mut admitter, cache) = rig.admitter(&rig.config(&[]));
    // The watch failed after a complete list: the view may miss Jobs.
    cache.mark_failed("500 Internal Server Error: injected");
    for _ in 0..2 {
        let report = admitter.tick().await;
        for lane in Lane::ALL {
            match report.plan.lane(lane) {
                Decision::Hold(HoldReason::ViewNotCurrent { why }) => {
                    assert!(why.contains("500 Internal Server Error"), "{why}")
                }
                other => panic!("expected a view hold, got {other:?}"),
            }
        }
    }
    // An event after the error does not make the view current.
    let seen: k8s_openapi::api::batch::v1::Job = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "tcab-driver-other-1", "labels": {names::JOB_KIND: "run"}}
    }))
    .unwrap();
    cache.apply(Event::Apply(seen));
    assert!(!admitter.tick().await.plan.run.admits());
    assert_eq!(
        rig.backend.requests(Lane::Run) + rig.backend.requests(Lane::Publish),
        0
    );
    assert_eq!(
        rig.gate.gate_calls(),
        6,
        "each lane read its gate on each of its three ticks, and claimed nothing"
    );
    // A fresh complete list makes it current again.
    cache.apply(Event::Init);
    cache.apply(Event::InitDone);
    let report = admitter.tick().await;
    assert!(matches!(report.run, Some(LaneOutcome::Admitted { .. })));
    assert!(matches!(report.publish, Some(LaneOutcome::Admitted { .. })));
}

/// Runs only, with a cap of one.
fn one_run_slot(rig: &Rig, extra: &[(&str, &str)]) -> tcab_admitter::AdmitterConfig {
    let mut vars = vec![
        ("TCAB_DISPATCHER_MAX_INFLIGHT", "1"),
        ("TCAB_PUBLISHER_IMAGE", ""),
    ];
    vars.extend_from_slice(extra);
    rig.config(&vars)
}

#[tokio::test(start_paused = true)]
async fn a_create_that_times_out_is_settled_by_a_read() {
    let rig = Rig::start().await;
    rig.backend.queue(Lane::Run, 2);
    // The API stores the Job and never answers the create.
    rig.kube
        .fault_creates(Lane::Run, Some(CreateFault::StoreThenHang));
    let config = one_run_slot(&rig, &[("TCAB_DISPATCHER_KUBE_TIMEOUT_SECONDS", "0.3")]);
    let (mut admitter, _cache) = rig.admitter(&config);
    let report = admitter.tick().await;
    let name = name_for(Lane::Run, "run-0");
    match &report.run {
        Some(LaneOutcome::Admitted {
            job_name,
            settled: Some(Settled { after, by, calls }),
            ..
        }) => {
            assert_eq!(job_name, &name);
            assert!(after.contains("did not answer within"), "{after}");
            assert_eq!((*by, *calls), (Confirmation::Found, 2));
        }
        other => panic!("expected an admission settled by a read, got {other:?}"),
    }
    assert_eq!(report.result(Lane::Run), AdmissionResult::Created);
    assert_eq!(
        (rig.kube.create_requests(Lane::Run), rig.kube.reads()),
        (1, 1)
    );
    assert_eq!(rig.kube.live(Lane::Run), std::slice::from_ref(&name));
    assert!(rig.gate.forgets().is_empty());
    // The Job counts against the cap until the watch shows it.
    assert_eq!(admitter.lane_state(Lane::Run).created_unseen(), [name]);
    let report = admitter.tick().await;
    assert!(matches!(
        report.plan.run,
        Decision::Hold(HoldReason::LaneFull {
            in_flight: 1,
            cap: 1
        })
    ));
}

#[tokio::test(start_paused = true)]
async fn a_create_answered_5xx_every_time_is_given_up_once_a_read_shows_no_job() {
    let rig = Rig::start().await;
    rig.backend.queue(Lane::Run, 5);
    rig.kube
        .refuse(Lane::Run, Some((500, "InternalError", "etcd timeout")));
    let (mut admitter, _cache) = rig.admitter(&one_run_slot(&rig, &[]));
    let report = admitter.tick().await;
    match &report.run {
        Some(LaneOutcome::CreateFailed {
            job_id,
            reason: CreateFailure::GaveUp { calls, first, .. },
            ..
        }) => {
            assert_eq!((job_id.as_str(), *calls), ("run-0", 8));
            assert!(first.contains("etcd timeout"), "{first}");
        }
        other => panic!("expected a given-up create, got {other:?}"),
    }
    // Each unclear create was read back, and sent again while the read showed no Job.
    assert_eq!(
        (rig.kube.create_requests(Lane::Run), rig.kube.reads()),
        (4, 4)
    );
    assert_eq!(rig.gate.forgets(), [key("run-0")]);
    let state = admitter.lane_state(Lane::Run);
    assert!(state.unsettled().is_empty() && state.created_unseen().is_empty());

    // No slot is held: past the back-off, the lane claims and creates again.
    rig.kube.refuse(Lane::Run, None);
    tokio::time::advance(Duration::from_secs(1)).await;
    let report = admitter.tick().await;
    assert_eq!(report.plan.run, Decision::Admit { in_flight: 0 });
    assert!(
        matches!(&report.run, Some(LaneOutcome::Admitted { job_id, settled: None, .. }) if job_id == "run-1")
    );
}

#[tokio::test(start_paused = true)]
async fn an_unclear_create_whose_reads_fail_too_holds_its_slot_until_a_read_tells() {
    let rig = Rig::start().await;
    rig.backend.queue(Lane::Run, 5);
    rig.kube
        .refuse(Lane::Run, Some((500, "InternalError", "etcd timeout")));
    rig.kube
        .fail_reads(Some((500, "InternalError", "apiserver overloaded")));
    let (mut admitter, _cache) = rig.admitter(&one_run_slot(&rig, &[]));
    let name = name_for(Lane::Run, "run-0");
    let report = admitter.tick().await;
    match &report.run {
        Some(LaneOutcome::Unsettled {
            job_name, error, ..
        }) => {
            assert_eq!(job_name, &name);
            assert!(error.contains("apiserver overloaded"), "{error}");
        }
        other => panic!("expected an unsettled create, got {other:?}"),
    }
    assert_eq!(report.result(Lane::Run), AdmissionResult::Error);
    assert_eq!(
        admitter.lane_state(Lane::Run).unsettled(),
        std::slice::from_ref(&name)
    );
    assert!(
        rig.gate.forgets().is_empty(),
        "the Job may exist: its token stays"
    );

    // Still unknown on the next tick: the slot stays held, no second claim.
    tokio::time::advance(Duration::from_secs(1)).await;
    let report = admitter.tick().await;
    assert!(matches!(
        report.resettled.as_slice(),
        [(Lane::Run, LaneOutcome::Unsettled { .. })]
    ));
    assert_eq!(
        report.plan.run,
        Decision::Hold(HoldReason::LaneFull {
            in_flight: 1,
            cap: 1
        })
    );
    assert_eq!(rig.backend.requests(Lane::Run), 1);

    // The API answers again: the next tick reads (no Job), creates it, and
    // counts it as created until the watch shows it.
    rig.kube.refuse(Lane::Run, None);
    rig.kube.fail_reads(None);
    let report = admitter.tick().await;
    match report.resettled.as_slice() {
        [
            (
                Lane::Run,
                LaneOutcome::Admitted {
                    job_name,
                    settled: Some(settled),
                    ..
                },
            ),
        ] => {
            assert_eq!(job_name, &name);
            assert_eq!((settled.by, settled.calls), (Confirmation::Created, 2));
            assert!(settled.after.contains("etcd timeout"), "{}", settled.after);
        }
        other => panic!("expected the create settled, got {other:?}"),
    }
    assert_eq!(rig.kube.live(Lane::Run), std::slice::from_ref(&name));
    let state = admitter.lane_state(Lane::Run);
    assert!(state.unsettled().is_empty());
    assert_eq!(state.created_unseen(), [name]);
    assert!(!report.plan.run.admits(), "the lane is full with the Job");
}

#[tokio::test(start_paused = true)]
async fn a_claim_answered_after_half_the_lease_is_never_created() {
    let rig = Rig::start().await;
    rig.backend.queue(Lane::Run, 1);
    rig.backend.hold_runs();
    let config = one_run_slot(
        &rig,
        &[
            ("TCAB_DISPATCHER_LEASE_SECONDS", "20"),
            ("TCAB_DISPATCHER_GATE_MAX_AGE_SECONDS", "10"),
            // What a 20 s lease allows with the poll interval (the rig's
            // client has its own timeout).
            ("TCAB_DISPATCHER_BACKEND_TIMEOUT_SECONDS", "5"),
        ],
    );
    let (mut admitter, _cache) = rig.admitter(&config);
    // The backend answers the claim only after 11 s (on the admitter's clock).
    let (report, ()) = tokio::join!(admitter.tick(), async {
        eventually("the claim sent", || rig.backend.requests(Lane::Run) == 1).await;
        tokio::time::advance(Duration::from_secs(11)).await;
        rig.backend.release_runs();
    });
    match &report.run {
        Some(LaneOutcome::CreateFailed {
            job_id,
            reason: CreateFailure::Lapsed { age },
            ..
        }) => {
            assert_eq!(job_id, "run-0");
            assert!(*age >= Duration::from_secs(11), "{age:?}");
        }
        other => panic!("expected a lapsed claim, got {other:?}"),
    }
    assert_eq!(rig.kube.create_requests(Lane::Run), 0, "no late create");
    assert_eq!(rig.gate.forgets(), [key("run-0")]);
    assert!(admitter.lane_state(Lane::Run).unsettled().is_empty());
}

#[tokio::test(start_paused = true)]
async fn an_unclear_create_is_not_sent_again_once_the_claim_is_past_half_the_lease() {
    let rig = Rig::start().await;
    rig.backend.queue(Lane::Run, 1);
    rig.kube.fault_creates(
        Lane::Run,
        Some(CreateFault::HoldThenRefuse(
            500,
            "InternalError".into(),
            "etcd timeout".into(),
        )),
    );
    let config = one_run_slot(
        &rig,
        &[
            ("TCAB_DISPATCHER_LEASE_SECONDS", "20"),
            ("TCAB_DISPATCHER_GATE_MAX_AGE_SECONDS", "10"),
            // What a 20 s lease allows with the poll interval (the rig's
            // client has its own timeout).
            ("TCAB_DISPATCHER_BACKEND_TIMEOUT_SECONDS", "5"),
        ],
    );
    let (mut admitter, _cache) = rig.admitter(&config);
    // The create is answered 500 after 11 s; creates succeed from then on,
    // so a create sent again would make the Job.
    let (report, ()) = tokio::join!(admitter.tick(), async {
        eventually("the create sent", || {
            rig.kube.create_requests(Lane::Run) == 1
        })
        .await;
        tokio::time::advance(Duration::from_secs(11)).await;
        rig.kube.release_creates();
    });
    assert!(
        matches!(
            &report.run,
            Some(LaneOutcome::CreateFailed {
                reason: CreateFailure::Lapsed { .. },
                ..
            })
        ),
        "{:?}",
        report.run
    );
    assert_eq!(rig.kube.create_requests(Lane::Run), 1, "no late create");
    assert_eq!(rig.kube.reads(), 1, "read once: no Job");
    assert!(rig.kube.live(Lane::Run).is_empty());
    assert_eq!(rig.gate.forgets(), [key("run-0")]);
}

#[tokio::test(start_paused = true)]
async fn a_create_refused_with_4xx_does_not_hold_a_slot() {
    let rig = Rig::start().await;
    rig.backend.queue(Lane::Run, 5);
    rig.kube
        .refuse(Lane::Run, Some((422, "Invalid", "spec.template: bad")));
    let config = rig.config(&[
        ("TCAB_DISPATCHER_MAX_INFLIGHT", "1"),
        ("TCAB_PUBLISHER_IMAGE", ""),
    ]);
    let (mut admitter, _cache) = rig.admitter(&config);
    admitter.tick().await;
    assert_eq!(rig.gate.forgets(), [key("run-0")]);
    assert_eq!(rig.kube.reads(), 0, "a refusal needs no read");
    rig.kube.refuse(Lane::Run, None);
    tokio::time::advance(Duration::from_secs(5)).await;
    let report = admitter.tick().await;
    assert!(
        matches!(report.run, Some(LaneOutcome::Admitted { .. })),
        "a refused Job surely does not exist: {:?}",
        report.plan.run
    );
}
