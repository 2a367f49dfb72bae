//! Death causes, table-driven over Job and Pod objects shaped as a real
//! cluster writes them (tests/fixtures/death/).

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use tcab_shared::death::{
    DeathCause, LOG_SEPARATOR, LOG_SEPARATOR_CUT, MAX_DETAIL_BYTES, death_cause, death_detail,
};

fn fixture<T: serde::de::DeserializeOwned>(file: &str) -> T {
    let path = format!("{}/tests/fixtures/death/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
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
            },
            summary: "pod disrupted (DisruptionTarget: DeletionByTaintManager: Taint manager: deleting due to NoExecute taint)",
        },
        Case {
            name: "node shutdown: DisruptionTarget wins over the pod's own reason",
            job: "job-driver-failed.json",
            pod: Some("pod-kubelet-shutdown.json"),
            cause: DeathCause::Disrupted {
                reason: s("TerminationByKubelet"),
                message: s("Pod was terminated in response to imminent node shutdown."),
            },
            summary: "pod disrupted (DisruptionTarget: TerminationByKubelet: Pod was terminated in response to imminent node shutdown.)",
        },
        Case {
            name: "a DisruptionTarget condition with status False is no disruption",
            job: "job-driver-failed.json",
            pod: Some("pod-disruption-false.json"),
            cause: DeathCause::ContainerExited {
                container: s("driver"),
                exit_code: 1,
                signal: None,
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
                signal: None,
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
                signal: Some(11),
                reason: Some(s("Error")),
                message: None,
            },
            summary: "container driver killed by signal 11 SIGSEGV, exit code 139 (Error)",
        },
        Case {
            name: "lastState terminated when the current state is not",
            job: "job-driver-failed.json",
            pod: Some("pod-last-state.json"),
            cause: DeathCause::ContainerExited {
                container: s("driver"),
                exit_code: 2,
                signal: None,
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
                signal: None,
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

#[test]
fn exit_code_above_128_names_the_signal() {
    let cause = DeathCause::ContainerExited {
        container: s("driver"),
        exit_code: 143,
        signal: None,
        reason: Some(s("Error")),
        message: None,
    };
    assert_eq!(
        cause.summary(),
        "container driver exited with code 143, 128+SIGTERM (Error)"
    );
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
    };
    let summary = cause.summary();
    assert!(!summary.contains('\n'));
    assert!(summary.len() < 1200, "{}", summary.len());
}

#[test]
fn detail_without_a_log_is_the_summary() {
    let cause = DeathCause::OomKilled {
        container: s("driver"),
        exit_code: 137,
    };
    assert_eq!(death_detail(&cause, None), cause.summary());
    assert_eq!(death_detail(&cause, Some("  \n")), cause.summary());
}

#[test]
fn detail_appends_the_log_tail() {
    let cause = DeathCause::PodDeleted { failed: 1 };
    let detail = death_detail(&cause, Some("starting\nrunning\nboom\n"));
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
    let detail = death_detail(&cause, Some(&log));
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
    let detail = death_detail(&cause, Some(&log));
    assert!(detail.len() <= MAX_DETAIL_BYTES);
    assert!(detail.ends_with('é'));
    assert!(detail.len() > MAX_DETAIL_BYTES - 64, "fills the room");
}
