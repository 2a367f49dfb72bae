//! Tick-level tests: an admitter driven one tick at a time against the mock
//! backend, the fake lease-keeper and the fake Jobs API, with a held clock.

mod support;

use kube::runtime::watcher::Event;
use std::time::Duration;
use support::backend::token_for;
use support::gate::{dead_addr, renewed};
use support::*;
use tcab_admitter::admit::{CreateFailure, LaneOutcome};
use tcab_admitter::plan::{Decision, HoldReason};
use tcab_shared::tick::TickOutcome;
use tcab_shared::{Lane, labels};

fn name_for(lane: Lane, id: &str) -> String {
    labels::job_name(lane, id, &labels::claim_tag(&token_for(id)))
}

#[tokio::test]
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
    assert_eq!(puts[0].claim, labels::claim_tag(&token_for("pub-0")));
    assert_eq!(puts[1].job_id, "run-0");

    admitter.tick().await;
    assert_eq!(
        (rig.kube.creates(Lane::Run), rig.kube.creates(Lane::Publish)),
        (2, 2)
    );
}

#[tokio::test]
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

#[tokio::test]
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
            "metadata": {"name": name, "labels": {labels::JOB_KIND: "run"}}, "status": status
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

#[tokio::test]
async fn a_publish_is_admitted_while_the_run_lane_is_full_and_its_queue_long() {
    let rig = Rig::start().await;
    rig.backend.queue(Lane::Run, 100);
    rig.backend.queue(Lane::Publish, 1);
    let config = rig.config(&[("TCAB_DISPATCHER_MAX_INFLIGHT", "1")]);
    let (mut admitter, cache) = rig.admitter(&config);
    let busy: k8s_openapi::api::batch::v1::Job = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "tcab-driver-old-1", "labels": {labels::JOB_KIND: "run"}}
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

#[tokio::test]
async fn already_exists_is_a_lost_race_and_a_success() {
    let rig = Rig::start().await;
    rig.backend.queue(Lane::Run, 2);
    let existing = rig.kube.seed(
        Lane::Run,
        "run-0",
        &labels::claim_tag(&token_for("run-0")),
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

#[tokio::test]
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
    rig.clock.advance(Duration::from_secs(1));
    admitter.tick().await;
    assert_eq!(rig.backend.requests(Lane::Run), 2);
    assert_eq!(admitter.lane_state(Lane::Run).failures(), 2);
    rig.clock.advance(Duration::from_secs(1));
    let report = admitter.tick().await;
    assert!(matches!(
        report.plan.run,
        Decision::Hold(HoldReason::BackingOff { .. })
    ));
    assert_eq!(rig.backend.requests(Lane::Run), 2);

    // The cluster accepts again: the next attempt succeeds and resets the back-off.
    rig.kube.refuse(Lane::Run, None);
    rig.clock.advance(Duration::from_secs(1));
    let report = admitter.tick().await;
    assert!(matches!(&report.run, Some(LaneOutcome::Admitted { job_id, .. }) if job_id == "run-2"));
    assert_eq!(admitter.lane_state(Lane::Run).failures(), 0);
    admitter.tick().await;
    assert_eq!(rig.backend.requests(Lane::Run), 4);
}

#[tokio::test]
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
    rig.clock.advance(Duration::from_millis(50));
    let report = admitter.tick().await;
    assert!(matches!(&report.run, Some(LaneOutcome::Admitted { job_id, .. }) if job_id == "run-0"));
}

#[tokio::test]
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
                Decision::Hold(HoldReason::GateClosed { why }) => {
                    assert!(why.contains("lease-keeper unreachable"), "{why}")
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

#[tokio::test]
async fn a_closed_gate_means_no_claim_in_its_lane() {
    let rig = Rig::start().await;
    rig.backend.queue(Lane::Run, 3);
    rig.backend.queue(Lane::Publish, 3);
    let (mut admitter, _cache) = rig.admitter(&rig.config(&[]));

    // Run renewals failing: no run claim; publishes renewed: the lane admits.
    let mut status = renewed();
    status.runs_renewed = false;
    status.detail = "POST /jobs/leases answered 503".into();
    rig.gate.set_status(status);
    let report = admitter.tick().await;
    assert!(
        matches!(&report.plan.run, Decision::Hold(HoldReason::GateClosed { why }) if why.contains("503"))
    );
    assert!(matches!(report.publish, Some(LaneOutcome::Admitted { .. })));

    // No round finished yet, or the last one too old: both lanes hold.
    rig.gate.set_status(tcab_proto::vault::RenewalStatus {
        observed: false,
        ..renewed()
    });
    let report = admitter.tick().await;
    assert!(!report.plan.run.admits() && !report.plan.publish.admits());
    rig.gate.set_status(tcab_proto::vault::RenewalStatus {
        age_ms: 61_000,
        ..renewed()
    });
    let report = admitter.tick().await;
    assert!(
        matches!(&report.plan.publish, Decision::Hold(HoldReason::GateClosed { why }) if why.contains("ago"))
    );
    assert_eq!(rig.backend.requests(Lane::Run), 0);
    assert_eq!(rig.backend.requests(Lane::Publish), 1);

    // Renewed again: both lanes admit.
    rig.gate.set_status(renewed());
    let report = admitter.tick().await;
    assert!(report.plan.run.admits() && report.plan.publish.admits());
}

#[tokio::test]
async fn the_gate_is_not_asked_while_no_lane_could_admit() {
    let rig = Rig::start().await;
    rig.backend.queue(Lane::Run, 3);
    let config = rig.config(&[
        ("TCAB_DISPATCHER_MAX_INFLIGHT", "1"),
        ("TCAB_PUBLISHER_IMAGE", ""),
    ]);
    let (mut admitter, cache) = rig.admitter(&config);
    let busy: k8s_openapi::api::batch::v1::Job = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "tcab-driver-old-1", "labels": {labels::JOB_KIND: "run"}}
    }))
    .unwrap();
    cache.apply(Event::Apply(busy));
    let report = admitter.tick().await;
    assert!(matches!(
        report.plan.run,
        Decision::Hold(HoldReason::LaneFull { .. })
    ));
    assert_eq!(rig.gate.gate_calls(), 0);
    assert_eq!(rig.backend.requests(Lane::Run), 0);
}

#[tokio::test]
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

#[tokio::test]
async fn the_cache_not_ready_holds_every_lane() {
    let rig = Rig::start().await;
    rig.backend.queue(Lane::Run, 1);
    let config = rig.config(&[]);
    let mut admitter = rig.admitter_with(
        &config,
        tcab_shared::cluster::OwnedJobs::new(),
        rig.gate.addr,
    );
    let report = admitter.tick().await;
    assert_eq!(report.plan.run, Decision::Hold(HoldReason::CacheNotReady));
    assert_eq!(
        report.plan.publish,
        Decision::Hold(HoldReason::CacheNotReady)
    );
    assert_eq!(rig.backend.requests(Lane::Run), 0);
}

#[tokio::test]
async fn an_open_gate_answer_is_reused_briefly_and_a_closed_one_never() {
    let rig = Rig::start().await;
    rig.backend.queue(Lane::Run, 10);
    let config = rig.config(&[("TCAB_PUBLISHER_IMAGE", "")]);
    let reuse = tcab_admitter::run::GATE_REUSE;
    let mut admitter = rig.admitter_reusing_gate(&config, ready_cache(), rig.gate.addr, reuse);
    admitter.tick().await;
    assert_eq!(rig.gate.gate_calls(), 1);
    // Within the window the open answer stands, even though renewals now fail.
    rig.gate.set_status(tcab_proto::vault::RenewalStatus {
        runs_renewed: false,
        ..renewed()
    });
    rig.clock.advance(reuse / 2);
    assert!(admitter.tick().await.plan.run.admits());
    assert_eq!(rig.gate.gate_calls(), 1);
    // Past it the gate is asked again, and the closed answer is asked anew each tick.
    rig.clock.advance(reuse);
    assert!(!admitter.tick().await.plan.run.admits());
    assert!(!admitter.tick().await.plan.run.admits());
    assert_eq!(rig.gate.gate_calls(), 3);
    assert_eq!(rig.backend.requests(Lane::Run), 2);
    // An open answer whose age, counted on, passes the max is not reused.
    rig.gate.set_status(tcab_proto::vault::RenewalStatus {
        age_ms: 59_990,
        ..renewed()
    });
    assert!(admitter.tick().await.plan.run.admits());
    rig.clock.advance(std::time::Duration::from_millis(20));
    let report = admitter.tick().await;
    assert_eq!(
        rig.gate.gate_calls(),
        5,
        "re-asked: the reused answer would be too old"
    );
    assert!(
        report.plan.run.admits(),
        "the lease-keeper still says 59.99 s"
    );
}

#[tokio::test]
async fn a_create_answered_5xx_counts_against_the_cap_as_it_may_exist() {
    let rig = Rig::start().await;
    rig.backend.queue(Lane::Run, 5);
    rig.kube
        .refuse(Lane::Run, Some((500, "InternalError", "etcd timeout")));
    let config = rig.config(&[
        ("TCAB_DISPATCHER_MAX_INFLIGHT", "1"),
        ("TCAB_PUBLISHER_IMAGE", ""),
    ]);
    // The cache is never fed, as if the watch lagged behind a Job that was stored.
    let (mut admitter, _cache) = rig.admitter(&config);
    let report = admitter.tick().await;
    assert!(matches!(report.run, Some(LaneOutcome::CreateFailed { .. })));
    rig.kube.refuse(Lane::Run, None);
    // Past the back-off, the lane is full: the failed Job may exist.
    rig.clock.advance(Duration::from_secs(5));
    let report = admitter.tick().await;
    assert_eq!(
        report.plan.run,
        Decision::Hold(HoldReason::LaneFull {
            in_flight: 1,
            cap: 1
        })
    );
    assert_eq!(rig.backend.requests(Lane::Run), 1, "no second claim");
}

#[tokio::test]
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
    rig.kube.refuse(Lane::Run, None);
    rig.clock.advance(Duration::from_secs(5));
    let report = admitter.tick().await;
    assert!(
        matches!(report.run, Some(LaneOutcome::Admitted { .. })),
        "a refused Job surely does not exist: {:?}",
        report.plan.run
    );
}
