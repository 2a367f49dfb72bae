//! Death causes, table-driven over Job and Pod objects shaped as a real
//! cluster writes them (the test kit's fixtures/death/).

use super::{
    DeathCause, LOG_SEPARATOR, LOG_SEPARATOR_CUT, LogTail, MAX_DETAIL_BYTES, StartFailureKind,
    death_cause, death_detail, job_for_cause, start_failure,
};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use tcab_shared::Lane;
use tcab_shared::job_cache::JobSummary;

fn fixture<T: serde::de::DeserializeOwned>(file: &str) -> T {
    tcab_testkit::fixtures::death(file)
}

fn s(v: &str) -> String {
    v.to_owned()
}

struct Case {
    name: &'static str,
    job: &'static str,
    pod: Option<&'static str>,
    cause: DeathCause,
    summary: &'static str,
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "evicted pod: DisruptionTarget wins over the SIGTERM exit 143",
            job: "job-driver-failed.json",
            pod: Some("pod-evicted-sigterm.json"),
            cause: DeathCause::Disrupted {
                reason: s("EvictionByEvictionAPI"),
                message: s("Eviction API: evicting"),
                pod_reason: None,
            },
            summary: "pod evicted (DisruptionTarget: EvictionByEvictionAPI: Eviction API: evicting)",
        },
        Case {
            name: "preempted by the scheduler",
            job: "job-driver-failed.json",
            pod: Some("pod-preempted.json"),
            cause: DeathCause::Disrupted {
                reason: s("PreemptionByScheduler"),
                message: s("default-scheduler: preempting to accommodate a higher priority pod"),
                pod_reason: None,
            },
            summary: "pod preempted (DisruptionTarget: PreemptionByScheduler: default-scheduler: preempting to accommodate a higher priority pod)",
        },
        Case {
            name: "deleted by the taint manager",
            job: "job-driver-failed.json",
            pod: Some("pod-taint-manager.json"),
            cause: DeathCause::Disrupted {
                reason: s("DeletionByTaintManager"),
                message: s("Taint manager: deleting due to NoExecute taint"),
                pod_reason: None,
            },
            summary: "pod deleted by the taint manager (a NoExecute taint on its node: not ready, unreachable, or tainted by an operator) (DisruptionTarget: DeletionByTaintManager: Taint manager: deleting due to NoExecute taint)",
        },
        Case {
            name: "node shutdown: DisruptionTarget wins over the pod's own reason",
            job: "job-driver-failed.json",
            pod: Some("pod-kubelet-shutdown.json"),
            cause: DeathCause::Disrupted {
                reason: s("TerminationByKubelet"),
                message: s("Pod was terminated in response to imminent node shutdown."),
                pod_reason: None,
            },
            summary: "pod terminated by the kubelet (DisruptionTarget: TerminationByKubelet: Pod was terminated in response to imminent node shutdown.)",
        },
        Case {
            name: "a DisruptionTarget condition with status False is no disruption",
            job: "job-driver-failed.json",
            pod: Some("pod-disruption-false.json"),
            cause: DeathCause::ContainerExited {
                container: s("driver"),
                exit_code: 1,
                reason: Some(s("Error")),
                message: None,
            },
            summary: "container driver exited with code 1 (Error)",
        },
        Case {
            name: "kubelet eviction without a DisruptionTarget: the pod's reason wins",
            job: "job-driver-failed.json",
            pod: Some("pod-kubelet-evicted.json"),
            cause: DeathCause::PodFailed {
                reason: s("Evicted"),
                message: s(
                    "The node was low on resource: memory. Threshold quantity: 100Mi, available: 62Mi. Container driver was using 3912Mi, request is 512Mi, has larger consumption of memory.",
                ),
            },
            summary: "pod failed (Evicted: The node was low on resource: memory. Threshold quantity: 100Mi, available: 62Mi. Container driver was using 3912Mi, request is 512Mi, has larger consumption of memory.)",
        },
        Case {
            name: "OOMKilled 137",
            job: "job-driver-failed.json",
            pod: Some("pod-oomkilled.json"),
            cause: DeathCause::OomKilled {
                container: s("driver"),
                exit_code: 137,
            },
            summary: "container driver OOMKilled (exit code 137)",
        },
        Case {
            name: "exit 1 Error",
            job: "job-driver-failed.json",
            pod: Some("pod-exit-1.json"),
            cause: DeathCause::ContainerExited {
                container: s("driver"),
                exit_code: 1,
                reason: Some(s("Error")),
                message: None,
            },
            summary: "container driver exited with code 1 (Error)",
        },
        Case {
            name: "killed by a signal",
            job: "job-driver-failed.json",
            pod: Some("pod-signal.json"),
            cause: DeathCause::ContainerExited {
                container: s("driver"),
                exit_code: 139,
                reason: Some(s("Error")),
                message: None,
            },
            summary: "container driver killed by SIGSEGV (exit code 139) (Error)",
        },
        Case {
            name: "lastState terminated when the current state is not",
            job: "job-driver-failed.json",
            pod: Some("pod-last-state.json"),
            cause: DeathCause::ContainerExited {
                container: s("driver"),
                exit_code: 2,
                reason: Some(s("Error")),
                message: Some(s("upload failed: connection reset\nretrying gave up")),
            },
            summary: "container driver exited with code 2 (Error: upload failed: connection reset retrying gave up)",
        },
        Case {
            name: "the publisher container is picked, not the first (a sidecar)",
            job: "job-publisher-failed.json",
            pod: Some("pod-publisher-sidecar.json"),
            cause: DeathCause::ContainerExited {
                container: s("publisher"),
                exit_code: 2,
                reason: Some(s("Error")),
                message: Some(s("release tag already exists")),
            },
            summary: "container publisher exited with code 2 (Error: release tag already exists)",
        },
        Case {
            name: "a container stuck pulling its image never ran",
            job: "job-driver-deadline.json",
            pod: Some("pod-image-pull.json"),
            cause: DeathCause::ContainerWaiting {
                container: s("driver"),
                reason: s("ImagePullBackOff"),
                message: s("Back-off pulling image \"ghcr.io/tcab/driver:3f9c2e1\""),
            },
            summary: "container driver never ran (waiting: ImagePullBackOff: Back-off pulling image \"ghcr.io/tcab/driver:3f9c2e1\")",
        },
        Case {
            name: "a routinely waiting container defers to the Job's DeadlineExceeded",
            job: "job-driver-deadline.json",
            pod: Some("pod-container-creating.json"),
            cause: DeathCause::JobCondition {
                kind: s("Failed"),
                reason: s("DeadlineExceeded"),
                message: s("Job was active longer than specified deadline"),
            },
            summary: "Job DeadlineExceeded: Job was active longer than specified deadline",
        },
        Case {
            name: "no container status: the Job's DeadlineExceeded",
            job: "job-driver-deadline.json",
            pod: Some("pod-no-container-status.json"),
            cause: DeathCause::JobCondition {
                kind: s("Failed"),
                reason: s("DeadlineExceeded"),
                message: s("Job was active longer than specified deadline"),
            },
            summary: "Job DeadlineExceeded: Job was active longer than specified deadline",
        },
        Case {
            name: "no container status and only the generic condition",
            job: "job-driver-failed.json",
            pod: Some("pod-no-container-status.json"),
            cause: DeathCause::JobCondition {
                kind: s("Failed"),
                reason: s("BackoffLimitExceeded"),
                message: s("Job has reached the specified backoff limit"),
            },
            summary: "Job BackoffLimitExceeded: Job has reached the specified backoff limit",
        },
        Case {
            name: "no container status, no condition: unknown",
            job: "job-driver-never-started.json",
            pod: Some("pod-no-container-status.json"),
            cause: DeathCause::Unknown,
            summary: "Job failed, cause unknown",
        },
        Case {
            name: "DeadlineExceeded Job with no pod",
            job: "job-driver-deadline.json",
            pod: None,
            cause: DeathCause::JobCondition {
                kind: s("Failed"),
                reason: s("DeadlineExceeded"),
                message: s("Job was active longer than specified deadline"),
            },
            summary: "Job DeadlineExceeded: Job was active longer than specified deadline",
        },
        Case {
            name: "pod ran and was deleted (status.failed = 1, no pod)",
            job: "job-driver-failed.json",
            pod: None,
            cause: DeathCause::PodDeleted { failed: 1 },
            summary: "pod ran and was deleted",
        },
        Case {
            name: "never started a pod (status.failed absent, no pod)",
            job: "job-driver-never-started.json",
            pod: None,
            cause: DeathCause::NeverStartedPod,
            summary: "Job never started a pod",
        },
    ]
}

#[test]
fn every_fixture_case_yields_its_cause_and_summary() {
    let mut failures = Vec::new();
    for case in cases() {
        let job: Job = fixture(case.job);
        let pod: Option<Pod> = case.pod.map(fixture);
        let cause = death_cause(&job, pod.as_ref());
        let summary = cause.summary();
        if cause != case.cause || summary != case.summary {
            failures.push(format!(
                "{}:\n  got      {cause:?}\n  want     {:?}\n  summary  {summary}\n  expected {}",
                case.name, case.cause, case.summary
            ));
        }
        assert!(
            !summary.contains('\n'),
            "{}: summary is one line",
            case.name
        );
        assert_eq!(
            format!("{cause}"),
            summary,
            "{}: Display is the summary",
            case.name
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn status_failed_zero_is_never_started() {
    let mut job: Job = fixture("job-driver-never-started.json");
    job.status.as_mut().unwrap().failed = Some(0);
    assert_eq!(death_cause(&job, None), DeathCause::NeverStartedPod);
}

#[test]
fn a_job_without_status_never_started() {
    let mut job: Job = fixture("job-driver-failed.json");
    job.status = None;
    assert_eq!(death_cause(&job, None), DeathCause::NeverStartedPod);
}

/// Wording follows the kubelet: 137 without OOMKilled is a SIGKILL (a grace
/// period that ran out), never an OOM kill; no `signal` field is read.
#[test]
fn exit_codes_129_to_192_read_as_the_signal_and_only_oomkilled_is_an_oom() {
    let killed = DeathCause::ContainerExited {
        container: s("driver"),
        exit_code: 137,
        reason: Some(s("Error")),
        message: None,
    };
    assert_eq!(
        killed.summary(),
        "container driver killed by SIGKILL (exit code 137) (Error)"
    );
    assert_eq!(killed.kind().as_str(), "killed");
    let term = DeathCause::ContainerExited {
        container: s("driver"),
        exit_code: 143,
        reason: Some(s("Error")),
        message: None,
    };
    assert_eq!(
        term.summary(),
        "container driver killed by SIGTERM (exit code 143) (Error)"
    );
    let realtime = DeathCause::ContainerExited {
        container: s("driver"),
        exit_code: 162,
        reason: None,
        message: None,
    };
    assert_eq!(
        realtime.summary(),
        "container driver killed by signal 34 (exit code 162)"
    );
    assert_eq!(realtime.kind().as_str(), "killed");
    // Linux's signals end at 64: above 192 an exit code is only that, such
    // as containerd's 255 for a task it never saw end (a node rebooted).
    for (code, reason, summary) in [
        (200, None, "container driver exited with code 200"),
        (
            255,
            Some(s("Unknown")),
            "container driver exited with code 255 (Unknown)",
        ),
    ] {
        let odd = DeathCause::ContainerExited {
            container: s("driver"),
            exit_code: code,
            reason,
            message: None,
        };
        assert_eq!(odd.summary(), summary);
        assert_eq!(odd.kind().as_str(), "exit_code", "{code}");
    }
    let oom = DeathCause::OomKilled {
        container: s("driver"),
        exit_code: 137,
    };
    assert_eq!(oom.kind().as_str(), "oom_killed");
    // The kubelet never sets `signal`: a pod that says 9 there still reads by its code.
    let job: Job = fixture("job-driver-failed.json");
    let mut pod: Pod = fixture("pod-exit-1.json");
    let t = pod
        .status
        .as_mut()
        .unwrap()
        .container_statuses
        .as_mut()
        .unwrap()[0]
        .state
        .as_mut()
        .unwrap()
        .terminated
        .as_mut()
        .unwrap();
    t.exit_code = 137;
    t.signal = Some(9);
    assert_eq!(death_cause(&job, Some(&pod)), killed);
}

#[test]
fn a_pod_without_status_falls_back_to_the_job() {
    let job: Job = fixture("job-driver-deadline.json");
    let mut pod: Pod = fixture("pod-exit-1.json");
    pod.status = None;
    assert!(matches!(
        death_cause(&job, Some(&pod)),
        DeathCause::JobCondition { ref reason, .. } if reason == "DeadlineExceeded"
    ));
}

#[test]
fn long_messages_stay_one_bounded_line() {
    let cause = DeathCause::Disrupted {
        reason: s("EvictionByEvictionAPI"),
        message: "line\n".repeat(2000),
        pod_reason: None,
    };
    let summary = cause.summary();
    assert!(!summary.contains('\n'));
    assert!(summary.len() < 1200, "{}", summary.len());
}

#[test]
fn a_missing_log_is_named_never_silently_left_out() {
    let cause = DeathCause::OomKilled {
        container: s("driver"),
        exit_code: 137,
    };
    assert_eq!(
        death_detail(
            &cause,
            &LogTail::Unreadable(s("dial tcp 10.0.0.7:10250: i/o timeout"))
        ),
        format!(
            "{}\nlogs unreadable: dial tcp 10.0.0.7:10250: i/o timeout",
            cause.summary()
        )
    );
    assert_eq!(
        death_detail(&cause, &LogTail::Read(s("  \n"))),
        format!("{}\nlog: empty", cause.summary())
    );
}

#[test]
fn detail_appends_the_log_tail() {
    let cause = DeathCause::PodDeleted { failed: 1 };
    let detail = death_detail(&cause, &LogTail::Read(s("starting\nrunning\nboom\n")));
    assert_eq!(
        detail,
        format!("pod ran and was deleted{LOG_SEPARATOR}starting\nrunning\nboom")
    );
}

#[test]
fn a_long_log_keeps_its_end_within_the_bound() {
    let cause = DeathCause::NeverStartedPod;
    // Multi-byte characters everywhere, so a byte cut would split one.
    let log: String = (0..4000).map(|i| format!("zeile {i} größe ü\n")).collect();
    assert!(log.len() > MAX_DETAIL_BYTES);
    let detail = death_detail(&cause, &LogTail::Read(log.clone()));
    assert!(detail.len() <= MAX_DETAIL_BYTES, "{}", detail.len());
    assert!(detail.starts_with(&format!("Job never started a pod{LOG_SEPARATOR_CUT}")));
    assert!(detail.ends_with("zeile 3999 größe ü"), "keeps the end");
    assert!(!detail.contains("zeile 0 "), "drops the start");
    // The kept part starts on a whole line.
    let kept = &detail[detail.find(LOG_SEPARATOR_CUT).unwrap() + LOG_SEPARATOR_CUT.len()..];
    assert!(kept.starts_with("zeile "), "{}", &kept[..20]);
}

#[test]
fn a_single_huge_line_is_cut_on_a_char_boundary() {
    let cause = DeathCause::NeverStartedPod;
    let log = "é".repeat(MAX_DETAIL_BYTES);
    let detail = death_detail(&cause, &LogTail::Read(log.clone()));
    assert!(detail.len() <= MAX_DETAIL_BYTES);
    assert!(detail.ends_with('é'));
    assert!(detail.len() > MAX_DETAIL_BYTES - 64, "fills the room");
}

#[test]
fn a_kubelet_eviction_reads_as_such_with_the_pods_reason() {
    let job: Job = fixture("job-driver-failed.json");
    let mut pod: Pod = fixture("pod-kubelet-evicted.json");
    let status = pod.status.as_mut().unwrap();
    status.conditions.get_or_insert_with(Vec::new).push(
        serde_json::from_value(
            serde_json::json!({"type": "DisruptionTarget", "status": "True",
            "reason": "TerminationByKubelet", "message": "The node was low on resource: memory."}),
        )
        .unwrap(),
    );
    let cause = death_cause(&job, Some(&pod));
    assert_eq!(cause.kind().as_str(), "kubelet_evicted");
    let summary = cause.summary();
    assert!(
        summary.starts_with(
            "pod evicted by the kubelet (node pressure) (DisruptionTarget: TerminationByKubelet"
        ) && summary.contains("(Evicted: The node was low on resource: memory."),
        "{summary}"
    );
    // The kubelet writes the same message on the pod and the condition: the
    // pod's reason alone still tells the eviction from a node shutdown.
    let status = pod.status.as_mut().unwrap();
    let message = status.message.clone();
    for c in status.conditions.iter_mut().flatten() {
        if c.type_ == "DisruptionTarget" {
            c.message = message.clone();
        }
    }
    let summary = death_cause(&job, Some(&pod)).summary();
    assert!(
        summary.starts_with("pod evicted by the kubelet (node pressure) (DisruptionTarget: TerminationByKubelet: The node was low on resource: memory.")
            && summary.ends_with(" (Evicted)"),
        "{summary}"
    );
}

#[test]
fn a_pod_deleted_while_it_ran_says_so() {
    let job: Job = fixture("job-driver-failed.json");
    let mut pod: Pod = fixture("pod-exit-1.json");
    let status = pod.status.as_mut().unwrap();
    status.phase = Some(s("Running"));
    status.container_statuses.as_mut().unwrap()[0].state = Some(
        serde_json::from_value(
            serde_json::json!({"running": {"startedAt": "2026-11-29T16:02:20Z"}}),
        )
        .unwrap(),
    );
    assert!(matches!(
        death_cause(&job, Some(&pod)),
        DeathCause::JobCondition { .. }
    ));
    pod.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        "2026-11-29T16:05:00Z".parse().unwrap(),
    ));
    assert_eq!(
        death_cause(&job, Some(&pod)),
        DeathCause::PodDeleted { failed: 1 }
    );
}

/// On 1.31+ a passed deadline sets FailureTarget `DeadlineExceeded` and
/// deletes the pod, which is gone when the Job turns Failed: the evidence is
/// the pod as it was at the first sign, running with a deletionTimestamp
/// (or ended by the signal of its deletion). The Job's condition says why.
#[test]
fn a_pod_its_job_deleted_at_the_deadline_reads_as_the_deadline() {
    let job: Job = fixture("job-driver-deadline.json");
    let mut pod: Pod = fixture("pod-exit-1.json");
    pod.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        "2026-11-29T16:05:00Z".parse().unwrap(),
    ));
    let deadline = DeathCause::JobCondition {
        kind: s("Failed"),
        reason: s("DeadlineExceeded"),
        message: s("Job was active longer than specified deadline"),
    };
    let set_state = |pod: &mut Pod, state: serde_json::Value| {
        let status = pod.status.as_mut().unwrap();
        status.phase = Some(s("Running"));
        status.container_statuses.as_mut().unwrap()[0].state =
            Some(serde_json::from_value(state).unwrap());
    };
    set_state(
        &mut pod,
        serde_json::json!({"running": {"startedAt": "2026-11-29T16:02:20Z"}}),
    );
    assert_eq!(death_cause(&job, Some(&pod)), deadline, "captured running");
    for code in [137, 143] {
        set_state(
            &mut pod,
            serde_json::json!({"terminated": {"exitCode": code, "reason": "Error"}}),
        );
        assert_eq!(death_cause(&job, Some(&pod)), deadline, "ended by {code}");
    }
    // What a pod shows for itself still wins: an OOM kill, an exit of its
    // own, a disruption.
    set_state(
        &mut pod,
        serde_json::json!({"terminated": {"exitCode": 137, "reason": "OOMKilled"}}),
    );
    assert!(matches!(
        death_cause(&job, Some(&pod)),
        DeathCause::OomKilled { .. }
    ));
    set_state(
        &mut pod,
        serde_json::json!({"terminated": {"exitCode": 1, "reason": "Error"}}),
    );
    assert!(matches!(
        death_cause(&job, Some(&pod)),
        DeathCause::ContainerExited { exit_code: 1, .. }
    ));
    let evicted: Pod = fixture("pod-evicted-sigterm.json");
    assert!(matches!(
        death_cause(&job, Some(&evicted)),
        DeathCause::Disrupted { .. }
    ));
    // With only the generic condition, a deleted pod says it was deleted.
    let failed: Job = fixture("job-driver-failed.json");
    set_state(
        &mut pod,
        serde_json::json!({"running": {"startedAt": "2026-11-29T16:02:20Z"}}),
    );
    assert_eq!(
        death_cause(&failed, Some(&pod)),
        DeathCause::PodDeleted { failed: 1 }
    );
}

#[test]
fn a_pod_that_cannot_start_names_the_fix() {
    let pod: Pod = fixture("pod-image-pull.json");
    let failure = start_failure(Lane::Run, &pod).expect("image pull never resolves");
    assert_eq!(failure.kind, StartFailureKind::ImagePull);
    assert_eq!(
        failure.summary(),
        "image pull failed for ghcr.io/tcab/driver:3f9c2e1: ImagePullBackOff: Back-off pulling image \"ghcr.io/tcab/driver:3f9c2e1\""
    );
    let cause = DeathCause::NeverStarted(failure);
    assert_eq!(cause.kind().as_str(), "image_pull");
    assert!(
        cause
            .summary()
            .starts_with("pod never started: image pull failed for")
    );
    let creating: Pod = fixture("pod-container-creating.json");
    assert_eq!(start_failure(Lane::Run, &creating), None, "a routine wait");
    let mut config_error: Pod = fixture("pod-image-pull.json");
    let waiting = config_error
        .status
        .as_mut()
        .unwrap()
        .container_statuses
        .as_mut()
        .unwrap()[0]
        .state
        .as_mut()
        .unwrap()
        .waiting
        .as_mut()
        .unwrap();
    waiting.reason = Some(s("CreateContainerConfigError"));
    waiting.message = Some(s("secret \"harness-keys\" not found"));
    let failure = start_failure(Lane::Run, &config_error).unwrap();
    assert_eq!(failure.kind, StartFailureKind::ConfigError);
    assert!(
        failure
            .summary()
            .contains("secret \"harness-keys\" not found")
    );
    assert_eq!(
        DeathCause::NeverStarted(failure).kind().as_str(),
        "config_error"
    );
}

#[test]
fn a_summary_rebuilds_the_job_the_cause_reads() {
    let job: Job = fixture("job-driver-failed.json");
    let summary = JobSummary::from_job(&job);
    let rebuilt = job_for_cause(&summary);
    let pod: Pod = fixture("pod-oomkilled.json");
    for pod in [None, Some(&pod)] {
        assert_eq!(death_cause(&rebuilt, pod), death_cause(&job, pod));
    }
}
