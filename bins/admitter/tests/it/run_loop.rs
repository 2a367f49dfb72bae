//! Loop tests: `run()` as the binary runs it, watching the fake Jobs API,
//! claiming from the mock backend, asking the fake lease-keeper's gate.

use crate::support::backend::token_for;
use crate::support::fake_kube::CreateFault;
use crate::support::*;
use std::time::Duration;
use tcab_admitter::AdmitterConfig;
use tcab_admitter::{Deps, run};
use tcab_shared::runtime::CancellationToken;
use tcab_shared::{Lane, names};
use tokio::task::JoinHandle;

fn start(rig: &Rig, config: AdmitterConfig) -> (CancellationToken, JoinHandle<anyhow::Result<()>>) {
    let deps = Deps {
        kube: rig.kube.client(),
        namespace: fake_kube::NAMESPACE.into(),
        backend: backend_client(&rig.backend.url),
    };
    let shutdown = CancellationToken::new();
    let trigger = shutdown.clone();
    (trigger, tokio::spawn(run(config, deps, shutdown)))
}

async fn stop(trigger: CancellationToken, handle: JoinHandle<anyhow::Result<()>>) {
    trigger.cancel();
    within("run() returns after shutdown", handle)
        .await
        .expect("task")
        .expect("run() is Ok");
}

#[tokio::test]
async fn both_lanes_drain_and_never_exceed_their_caps() {
    let rig = Rig::start().await;
    rig.backend.queue(Lane::Run, 12);
    rig.backend.queue(Lane::Publish, 6);
    let config = rig.config(&[
        ("TCAB_DISPATCHER_MAX_INFLIGHT", "3"),
        ("TCAB_DISPATCHER_MAX_PUBLISH_INFLIGHT", "2"),
    ]);
    let (trigger, handle) = start(&rig, config);
    // Finish one Job of a lane only once that lane is full (or its queue is
    // empty), so the admitter keeps pressing against each cap.
    let caps = [(Lane::Run, 3, 12), (Lane::Publish, 2, 6)];
    within("both queues drain", async {
        loop {
            let mut done = true;
            for (lane, cap, total) in caps {
                let live = rig.kube.live(lane);
                let drained = rig.backend.queued(lane) == 0;
                if rig.kube.creates(lane) < total {
                    done = false;
                }
                if live.len() >= cap || (drained && !live.is_empty()) {
                    rig.kube.finish(&live[0]);
                }
            }
            if done {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await;
    assert_eq!(rig.kube.max_live(Lane::Run), 3);
    assert_eq!(rig.kube.max_live(Lane::Publish), 2);
    assert_eq!(rig.backend.claimed(Lane::Run).len(), 12);
    assert_eq!(rig.backend.claimed(Lane::Publish).len(), 6);
    // One Job per claim: every job id exactly once.
    let mut ids: Vec<String> = rig
        .kube
        .jobs(Lane::Run)
        .iter()
        .map(|j| {
            j["metadata"]["labels"][names::JOB_ID]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 12);
    stop(trigger, handle).await;
}

#[tokio::test]
async fn publishes_are_admitted_while_a_run_claim_hangs() {
    let rig = Rig::start().await;
    rig.backend.hold_runs();
    rig.backend.queue(Lane::Run, 5);
    rig.backend.queue(Lane::Publish, 3);
    let (trigger, handle) = start(&rig, rig.config(&[]));
    eventually("the run claim in flight", || {
        rig.backend.requests(Lane::Run) >= 1
    })
    .await;
    // Every publish goes through while that one run claim stays unanswered
    // (with both lanes in one tick, one publish would wait for it).
    eventually("three publish Jobs", || {
        rig.kube.creates(Lane::Publish) == 3
    })
    .await;
    assert_eq!(rig.backend.requests(Lane::Run), 1, "one claim, held");
    assert!(rig.backend.claimed(Lane::Run).is_empty());
    assert_eq!(rig.kube.create_requests(Lane::Run), 0);
    rig.backend.release_runs();
    eventually("runs admitted once released", || {
        rig.kube.creates(Lane::Run) >= 1
    })
    .await;
    stop(trigger, handle).await;
}

#[tokio::test]
async fn publishes_are_admitted_while_a_run_create_hangs() {
    let rig = Rig::start().await;
    rig.kube.fault_creates(Lane::Run, Some(CreateFault::Hold));
    rig.backend.queue(Lane::Run, 5);
    rig.backend.queue(Lane::Publish, 3);
    let (trigger, handle) = start(&rig, rig.config(&[]));
    eventually("the run create in flight", || {
        rig.kube.create_requests(Lane::Run) >= 1
    })
    .await;
    eventually("three publish Jobs", || {
        rig.kube.creates(Lane::Publish) == 3
    })
    .await;
    assert_eq!(rig.kube.create_requests(Lane::Run), 1, "one create, held");
    assert_eq!(rig.kube.creates(Lane::Run), 0);
    assert_eq!(rig.backend.claimed(Lane::Run), ["run-0"]);
    rig.kube.release_creates();
    eventually("the held run Job created, and the next", || {
        rig.kube.creates(Lane::Run) >= 2
    })
    .await;
    stop(trigger, handle).await;
}

#[tokio::test]
async fn a_restarted_admitter_counts_the_jobs_already_there() {
    let rig = Rig::start().await;
    // Two live driver Jobs left by a previous admitter fill the run lane.
    let old = [
        rig.kube.seed(Lane::Run, "old-0", "aaaaaaaa", MANAGED_BY),
        rig.kube.seed(Lane::Run, "old-1", "bbbbbbbb", MANAGED_BY),
    ];
    rig.backend.queue(Lane::Run, 3);
    rig.backend.queue(Lane::Publish, 1);
    let config = rig.config(&[("TCAB_DISPATCHER_MAX_INFLIGHT", "2")]);
    let (trigger, handle) = start(&rig, config);
    // The publish proves the loop is past the cache's first list and ticking.
    eventually("the publish Job exists", || {
        rig.kube.creates(Lane::Publish) == 1
    })
    .await;
    assert_eq!(
        rig.backend.requests(Lane::Run),
        0,
        "the run lane is full from the start"
    );

    rig.kube.finish(&old[0]);
    eventually("a run admitted into the freed slot", || {
        rig.kube.creates(Lane::Run) == 1
    })
    .await;
    assert_eq!(rig.kube.live(Lane::Run).len(), 2);
    assert_eq!(rig.kube.max_live(Lane::Run), 2);
    assert_eq!(rig.backend.claimed(Lane::Run), ["run-0"]);
    stop(trigger, handle).await;
    assert_eq!(rig.kube.max_live(Lane::Run), 2);
}

#[tokio::test]
async fn shutdown_finishes_the_admission_in_progress() {
    let rig = Rig::start().await;
    rig.backend.hold_runs();
    rig.backend.queue(Lane::Run, 3);
    let (trigger, handle) = start(&rig, rig.config(&[("TCAB_PUBLISHER_IMAGE", "")]));
    eventually("a run claim in flight", || {
        rig.backend.requests(Lane::Run) == 1
    })
    .await;
    trigger.cancel();
    // The claim is answered only after shutdown was requested; its Job is still created.
    rig.backend.release_runs();
    within("run() returns", handle)
        .await
        .expect("task")
        .expect("run() is Ok");
    assert_eq!(rig.backend.claimed(Lane::Run), ["run-0"]);
    let expected = names::job_name(Lane::Run, "run-0", &names::claim_tag(&token_for("run-0")));
    assert_eq!(rig.kube.live(Lane::Run), [expected]);
    assert_eq!(
        rig.backend.requests(Lane::Run),
        1,
        "no new claim after shutdown"
    );
}

#[tokio::test]
async fn shutdown_during_a_slow_create_lets_it_finish() {
    let rig = Rig::start().await;
    // The API answers the create (and stores its Job) only after a second.
    rig.kube
        .fault_creates(Lane::Run, Some(CreateFault::Delay(Duration::from_secs(1))));
    rig.backend.queue(Lane::Run, 3);
    let (trigger, handle) = start(&rig, rig.config(&[("TCAB_PUBLISHER_IMAGE", "")]));
    eventually("a run create in flight", || {
        rig.kube.create_requests(Lane::Run) == 1
    })
    .await;
    trigger.cancel();
    within("run() returns", handle)
        .await
        .expect("task")
        .expect("run() is Ok");
    // run() returned only once the create was answered: the Job is there.
    let expected = names::job_name(Lane::Run, "run-0", &names::claim_tag(&token_for("run-0")));
    assert_eq!(rig.kube.live(Lane::Run), [expected]);
    assert_eq!(rig.kube.create_requests(Lane::Run), 1);
    assert_eq!(
        rig.backend.requests(Lane::Run),
        1,
        "no new claim after shutdown"
    );
}

#[tokio::test]
async fn no_claim_while_the_gate_is_closed() {
    let rig = Rig::start().await;
    rig.gate.set_both(tcab_proto::gate::GateVerdict::closed(
        tcab_proto::gate::GateReason::NeverRenewed,
        "no lease renewal has succeeded yet",
    ));
    rig.backend.queue(Lane::Run, 2);
    rig.backend.queue(Lane::Publish, 2);
    let (trigger, handle) = start(&rig, rig.config(&[]));
    eventually("the gate asked on several ticks", || {
        rig.gate.gate_calls() >= 3
    })
    .await;
    assert_eq!(
        rig.backend.requests(Lane::Run) + rig.backend.requests(Lane::Publish),
        0
    );
    rig.gate.set_both(tcab_proto::gate::GateVerdict::Open);
    eventually("admissions resume", || {
        rig.kube.creates(Lane::Run) >= 1 && rig.kube.creates(Lane::Publish) >= 1
    })
    .await;
    stop(trigger, handle).await;
}

/// Before its first claim the admitter dry-runs a Job of each lane: a Job
/// the API server refuses (422) ends `run()` with the refusal naming the
/// settings, and nothing is claimed.
#[tokio::test]
async fn a_job_the_api_server_refuses_at_the_dry_run_stops_the_start() {
    let rig = Rig::start().await;
    rig.backend.queue(Lane::Run, 1);
    rig.kube.lock().dry_run_fault = Some((
        422,
        "Invalid".into(),
        "Job.batch \"tcab-driver-tcab-dry-run-x\" is invalid: spec.template.spec.serviceAccountName: Invalid value: \"a..b\"".into(),
    ));
    let config = rig.config(&[("TCAB_DRIVER_SERVICE_ACCOUNT", "a..b")]);
    let (_trigger, handle) = start(&rig, config);
    let error = within("run() ends", handle)
        .await
        .expect("task")
        .expect_err("refused");
    let refused = error
        .downcast_ref::<tcab_admitter::Refused>()
        .expect("a refusal");
    assert_eq!((refused.lane, refused.code), (Lane::Run, 422));
    assert_eq!(refused.settings, ["TCAB_DRIVER_SERVICE_ACCOUNT"]);
    assert_eq!(rig.backend.requests(Lane::Run), 0, "nothing claimed");
    assert_eq!(rig.kube.lock().dry_runs.len(), 1);
}

/// A dry run without a telling answer (a 503) is tried again with the back-off
/// and never stops the start; both lanes' Jobs are checked, then admitted.
#[tokio::test]
async fn an_unclear_dry_run_is_tried_again_and_admissions_follow() {
    let rig = Rig::start().await;
    rig.backend.queue(Lane::Run, 1);
    rig.backend.queue(Lane::Publish, 1);
    rig.kube.lock().dry_run_fault = Some((503, "ServiceUnavailable".into(), "try later".into()));
    let (trigger, handle) = start(&rig, rig.config(&[]));
    eventually("a dry run was tried", || {
        !rig.kube.lock().dry_runs.is_empty()
    })
    .await;
    assert_eq!(
        rig.backend.requests(Lane::Run),
        0,
        "no claim before the check passed"
    );
    rig.kube.lock().dry_run_fault = None;
    eventually("both lanes admit", || {
        rig.kube.creates(Lane::Run) == 1 && rig.kube.creates(Lane::Publish) == 1
    })
    .await;
    let dry = rig.kube.lock().dry_runs.clone();
    assert!(
        dry.iter()
            .any(|n| n.starts_with("tcab-driver-tcab-dry-run-")),
        "{dry:?}"
    );
    assert!(
        dry.iter()
            .any(|n| n.starts_with("tcab-publisher-tcab-dry-run-")),
        "{dry:?}"
    );
    stop(trigger, handle).await;
}
