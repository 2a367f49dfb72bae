//! The lease-keeper's own metrics (docs/metrics.md): renewals by lane and
//! result, death reports by cause, lost reports by lane (recorded from each
//! loop's report at the loop's edge, by `run/metered.rs`),
//! and the age of each lane's last successful renewal (read from the
//! [`Gate`] at each scrape). The decisions never read them.

use crate::gate::Gate;
use crate::report::{RenewalReport, ReportTick};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;
use tcab_shared::Lane;
use tcab_shared::metrics::labels::{
    CallResult, Cause, ErrorReason, LabelValue, LoopName, ReportKind,
};
use tcab_shared::metrics::{Labels, zero};
use tokio::time::Instant;

/// The `loop` label of the renewal loop.
pub(crate) const RENEW_LOOP: &str = LoopName::Renew.as_str();
/// The `loop` label of the report loop.
pub(crate) const REPORT_LOOP: &str = LoopName::Report.as_str();

/// Buckets of death-to-report, in seconds: the first sign of a failing Job
/// to its death report landing. A report follows the pod's termination
/// (its grace, 120 s for drivers), a node that is lost adds the margin, a
/// pod that never starts its grace (5 to 30 minutes).
pub(crate) const DEATH_TO_REPORT_BUCKETS: [f64; 13] = [
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0,
];

/// Each lane's renewal round and its `result` (`ok` when every call of it
/// succeeded, `failed` at the first failed call). The publish lane makes no
/// call while publishing is off.
pub(crate) fn renewal_results(report: &RenewalReport, publishing: bool) -> Vec<(Lane, CallResult)> {
    let result = |renewed: &Option<_>| {
        if renewed.is_some() {
            CallResult::Ok
        } else {
            CallResult::Failed
        }
    };
    let mut out = vec![(Lane::Run, result(&report.runs))];
    if publishing {
        out.push((Lane::Publish, result(&report.publishes)));
    }
    out
}

/// The reports a lane can fail: a death report (runs only), a lost report.
fn reports() -> impl Iterator<Item = (ReportKind, Lane)> {
    [
        (ReportKind::Death, Lane::Run),
        (ReportKind::Lost, Lane::Run),
        (ReportKind::Lost, Lane::Publish),
    ]
    .into_iter()
}

/// The lease-keeper's metric families.
#[derive(Debug)]
pub(crate) struct KeeperMetrics {
    renewals: Family<Labels<2>, Counter>,
    deaths: Family<Labels<1>, Counter>,
    without_pod: Family<Labels<1>, Gauge>,
    lost: Family<Labels<1>, Counter>,
    report_failures: Family<Labels<3>, Counter>,
    renewal_age: Family<Labels<1>, Gauge<f64, AtomicU64>>,
    death_to_report: Histogram,
}

impl Default for KeeperMetrics {
    fn default() -> Self {
        Self::new()
    }
}

fn lane(lane: Lane) -> Labels<1> {
    [("lane", lane.label_value())]
}

impl KeeperMetrics {
    /// The families, each counter series the lease-keeper can emit at 0.
    pub(crate) fn new() -> Self {
        let metrics = KeeperMetrics {
            renewals: Family::default(),
            deaths: Family::default(),
            without_pod: Family::default(),
            lost: Family::default(),
            report_failures: Family::default(),
            renewal_age: Family::default(),
            death_to_report: Histogram::new(DEATH_TO_REPORT_BUCKETS),
        };
        zero(
            &metrics.renewals,
            Lane::ALL.iter().flat_map(|l| {
                CallResult::ALL
                    .iter()
                    .map(move |r| [("lane", l.label_value()), ("result", r.as_str())])
            }),
        );
        zero(
            &metrics.deaths,
            Cause::ALL.iter().map(|c| [("cause", c.as_str())]),
        );
        zero(&metrics.lost, Lane::ALL.iter().map(|l| lane(*l)));
        for l in Lane::ALL {
            metrics.without_pod.get_or_create(&lane(l)).set(0);
        }
        zero(
            &metrics.report_failures,
            reports().flat_map(|(report, l)| {
                ErrorReason::BACKEND.iter().map(move |reason| {
                    [
                        ("report", report.as_str()),
                        ("lane", l.label_value()),
                        ("reason", reason.as_str()),
                    ]
                })
            }),
        );
        metrics
    }

    /// Registers the families (shared, not copied).
    pub(crate) fn register(&self, registry: &mut Registry) {
        registry.register(
            "tcab_dispatcher_last_renewal_age_seconds",
            "Seconds since the lane's last successful lease renewal round",
            self.renewal_age.clone(),
        );
        registry.register(
            "tcab_dispatcher_lease_renewals",
            "Lease renewal rounds (one backend call per lane) by result",
            self.renewals.clone(),
        );
        registry.register(
            "tcab_dispatcher_death_reports",
            "Death reports the backend accepted, by cause",
            self.deaths.clone(),
        );
        registry.register(
            "tcab_dispatcher_jobs_without_pod",
            "Live Jobs that have counted no pod for longer than the start grace and are not judged refused: they wait",
            self.without_pod.clone(),
        );
        registry.register(
            "tcab_dispatcher_lost_reports",
            "Lost reports the backend accepted, by lane",
            self.lost.clone(),
        );
        registry.register(
            "tcab_dispatcher_report_failures",
            "Death and lost reports that failed (the job backs off alone), by report, lane and reason",
            self.report_failures.clone(),
        );
        registry.register(
            "tcab_dispatcher_death_to_report_seconds",
            "From a failing Job's first sign of failure to its death report landing",
            self.death_to_report.clone(),
        );
    }

    /// Records one renewal round.
    pub(crate) fn record_renewals(&self, report: &RenewalReport, publishing: bool) {
        for (l, result) in renewal_results(report, publishing) {
            self.renewals
                .get_or_create(&[("lane", l.label_value()), ("result", result.as_str())])
                .inc();
        }
    }

    /// Records the reports one report tick made.
    pub(crate) fn record_reports(&self, tick: &ReportTick) {
        for (report, kind) in &tick.failed_reports {
            self.report_failures
                .get_or_create(&[
                    ("report", report.as_str()),
                    ("lane", report.lane().label_value()),
                    ("reason", kind.reason().as_str()),
                ])
                .inc();
        }
        for (_, cause) in &tick.reported_dead {
            self.deaths
                .get_or_create(&[("cause", cause.as_str())])
                .inc();
        }
        if tick.view_current {
            for (l, waiting) in tick.podless.iter() {
                self.without_pod
                    .get_or_create(&lane(l))
                    .set(i64::try_from(*waiting).unwrap_or(i64::MAX));
            }
        }
        for delay in &tick.death_delays {
            self.death_to_report.observe(delay.as_secs_f64());
        }
        for (l, reported) in [
            (Lane::Run, &tick.lost_runs),
            (Lane::Publish, &tick.lost_publishes),
        ] {
            if !reported.is_empty() {
                self.lost
                    .get_or_create(&lane(l))
                    .inc_by(u64::try_from(reported.len()).unwrap_or(u64::MAX));
            }
        }
    }

    /// Sets each lane's renewal age from the gate at `now`; a lane never
    /// renewed has no age (no series).
    pub(crate) fn refresh_ages(&self, gate: &Gate, now: Instant) {
        for (l, age) in gate.ages(now).iter() {
            match age {
                Some(age) => {
                    self.renewal_age
                        .get_or_create(&lane(l))
                        .set(age.as_secs_f64());
                }
                None => {
                    self.renewal_age.remove(&lane(l));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cause::{DeathCause, StartFailure, StartFailureKind};
    use std::time::Duration;
    use tcab_shared::job_cache::OwnedJobs;
    use tcab_shared::lane::PerLane;
    use tcab_shared::metrics::{Common, Exporter};

    fn ids(names: &[&str]) -> Option<usize> {
        Some(names.len())
    }

    #[test]
    fn each_renewal_call_counts_by_lane_and_result() {
        let both = RenewalReport {
            runs: ids(&["a"]),
            publishes: None,
        };
        assert_eq!(
            renewal_results(&both, true),
            [
                (Lane::Run, CallResult::Ok),
                (Lane::Publish, CallResult::Failed)
            ]
        );
        assert_eq!(
            renewal_results(&both, false),
            [(Lane::Run, CallResult::Ok)],
            "no publish call while publishing is off"
        );
        let empty = RenewalReport {
            runs: ids(&[]),
            publishes: None,
        };
        assert_eq!(
            renewal_results(&empty, false),
            [(Lane::Run, CallResult::Ok)],
            "a round with nothing to renew still succeeds"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn reports_and_ages_encode_under_the_documented_names() {
        let metrics = KeeperMetrics::new();
        let mut exporter = Exporter::new(&Common::new());
        metrics.register(exporter.registry_mut());
        metrics.record_renewals(
            &RenewalReport {
                runs: ids(&["a"]),
                publishes: None,
            },
            true,
        );
        metrics.record_reports(&ReportTick {
            reported_dead: vec![
                ("a".into(), Cause::OomKilled),
                ("b".into(), Cause::OomKilled),
            ],
            view_current: true,
            podless: PerLane::from_fn(|l| if l == Lane::Run { 3 } else { 0 }),
            death_delays: vec![Duration::from_millis(1700)],
            failed_reports: vec![(
                crate::report::Report::Lost(Lane::Publish),
                tcab_shared::backend::BackendErrorKind::Transport,
            )],
            lost_runs: vec!["c".into()],
            lost_publishes: vec!["d".into(), "e".into()],
            ..ReportTick::default()
        });
        let gate = Gate::new(true, OwnedJobs::listed([]));
        gate.succeeded(Lane::Run, Instant::now());
        tokio::time::advance(Duration::from_millis(2500)).await;
        metrics.refresh_ages(&gate, Instant::now());
        let text = exporter.encode();
        for line in [
            "# TYPE tcab_dispatcher_lease_renewals_total counter",
            r#"tcab_dispatcher_lease_renewals_total{lane="run",result="ok"} 1"#,
            r#"tcab_dispatcher_lease_renewals_total{lane="publish",result="failed"} 1"#,
            r#"tcab_dispatcher_death_reports_total{cause="oom_killed"} 2"#,
            "# TYPE tcab_dispatcher_jobs_without_pod gauge",
            r#"tcab_dispatcher_jobs_without_pod{lane="run"} 3"#,
            r#"tcab_dispatcher_jobs_without_pod{lane="publish"} 0"#,
            r#"tcab_dispatcher_lost_reports_total{lane="run"} 1"#,
            r#"tcab_dispatcher_lost_reports_total{lane="publish"} 2"#,
            "# TYPE tcab_dispatcher_last_renewal_age_seconds gauge",
            r#"tcab_dispatcher_last_renewal_age_seconds{lane="run"} 2.5"#,
            r#"tcab_dispatcher_report_failures_total{report="lost",lane="publish",reason="connect"} 1"#,
            "tcab_dispatcher_death_to_report_seconds_count 1",
            r#"tcab_dispatcher_death_to_report_seconds_bucket{le="2.5"} 1"#,
            // Created at 0 from the start.
            r#"tcab_dispatcher_death_reports_total{cause="evicted"} 0"#,
            r#"tcab_dispatcher_death_reports_total{cause="unknown"} 0"#,
            r#"tcab_dispatcher_lease_renewals_total{lane="run",result="failed"} 0"#,
            r#"tcab_dispatcher_report_failures_total{report="death",lane="run",reason="timeout"} 0"#,
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in:\n{text}"
            );
        }
        assert!(
            !text.contains(r#"last_renewal_age_seconds{lane="publish"}"#),
            "a lane never renewed has no age:\n{text}"
        );
    }

    #[test]
    fn every_death_cause_has_its_declared_kind() {
        let disrupted = |reason: &str| DeathCause::Disrupted {
            reason: reason.into(),
            message: String::new(),
            pod_reason: None,
        };
        let pod_failed = |reason: &str| DeathCause::PodFailed {
            reason: reason.into(),
            message: String::new(),
        };
        let waiting = |reason: &str| DeathCause::ContainerWaiting {
            container: "driver".into(),
            reason: reason.into(),
            message: String::new(),
        };
        let exited = |exit_code| DeathCause::ContainerExited {
            container: "driver".into(),
            exit_code,
            reason: None,
            message: None,
        };
        let condition = |reason: &str| DeathCause::JobCondition {
            kind: "Failed".into(),
            reason: reason.into(),
            message: String::new(),
        };
        let never = |kind| {
            DeathCause::NeverStarted(StartFailure {
                kind,
                image: None,
                reason: String::new(),
                message: String::new(),
            })
        };
        let cases = [
            (disrupted("EvictionByEvictionAPI"), "evicted"),
            (disrupted("PreemptionByScheduler"), "preempted"),
            (disrupted("DeletionByTaintManager"), "taint_deleted"),
            (disrupted("TerminationByKubelet"), "kubelet_evicted"),
            (disrupted("DeletionByPodGC"), "node_lost"),
            (disrupted("SomethingNew"), "unknown"),
            (pod_failed("Evicted"), "kubelet_evicted"),
            (pod_failed("Shutdown"), "kubelet_evicted"),
            (pod_failed("Terminated"), "kubelet_evicted"),
            (pod_failed("OutOfcpu"), "kubelet_evicted"),
            (pod_failed("NodeLost"), "node_lost"),
            (pod_failed("Other"), "unknown"),
            (
                DeathCause::OomKilled {
                    container: "driver".into(),
                    exit_code: 137,
                },
                "oom_killed",
            ),
            (exited(143), "killed"),
            (exited(2), "exit_code"),
            (waiting("ImagePullBackOff"), "image_pull"),
            (waiting("ErrImagePull"), "image_pull"),
            (waiting("InvalidImageName"), "image_pull"),
            (waiting("CreateContainerConfigError"), "config_error"),
            (waiting("RunContainerError"), "config_error"),
            (waiting("Whatever"), "never_started"),
            (condition("DeadlineExceeded"), "deadline_exceeded"),
            (condition("BackoffLimitExceeded"), "unknown"),
            (DeathCause::NeverStartedPod, "never_started"),
            (DeathCause::PodDeleted { failed: 1 }, "pod_deleted"),
            (
                DeathCause::Deleted {
                    job: "tcab-driver-a-1".into(),
                    evidence: None,
                },
                "job_deleted",
            ),
            (DeathCause::Unknown, "unknown"),
            (never(StartFailureKind::ImagePull), "image_pull"),
            (never(StartFailureKind::InvalidImage), "image_pull"),
            (never(StartFailureKind::ConfigError), "config_error"),
            (never(StartFailureKind::CreateError), "config_error"),
            (never(StartFailureKind::Unschedulable), "unschedulable"),
            (never(StartFailureKind::Refused), "refused"),
            (
                DeathCause::Stuck {
                    node: None,
                    waited: Duration::from_secs(90),
                    evidence: Box::new(DeathCause::Unknown),
                },
                "node_lost",
            ),
        ];
        let mut seen = std::collections::BTreeSet::new();
        for (cause, want) in cases {
            assert_eq!(cause.kind().as_str(), want, "{cause:?}");
            seen.insert(cause.kind());
        }
        // Every declared kind (docs/metrics.md's table) is one a cause has.
        assert_eq!(seen.len(), Cause::ALL.len(), "{seen:?}");
    }
}
