//! The lease-keeper's own metrics (docs/metrics.md): renewals by lane and
//! result, death reports by cause, lost reports by lane (recorded from each
//! loop's report at the loop's edge: [`MeteredRenewer`], [`MeteredReporter`]),
//! and the age of each lane's last successful renewal (read from the
//! [`Gate`] at each scrape). The decisions never read them.

use crate::gate::Gate;
use crate::run::renewals::{RenewalReport, Renewer};
use crate::run::reports::{ReportTick, Reporter};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use tcab_shared::Lane;
use tcab_shared::metrics::Labels;
use tcab_shared::tick::{Tick, TickOutcome};
use tokio::time::Instant;

/// The `loop` label of the renewal loop.
pub const RENEW_LOOP: &str = "renew";
/// The `loop` label of the report loop.
pub const REPORT_LOOP: &str = "report";

/// Each renewal call of a round and its `result` (`ok`, `failed`). The
/// publish lane makes no call while publishing is off.
pub fn renewal_results(report: &RenewalReport, publishing: bool) -> Vec<(Lane, &'static str)> {
    let result = |renewed: &Option<_>| if renewed.is_some() { "ok" } else { "failed" };
    let mut out = vec![(Lane::Run, result(&report.runs))];
    if publishing {
        out.push((Lane::Publish, result(&report.publishes)));
    }
    out
}

/// The lease-keeper's metric families.
#[derive(Debug, Default)]
pub struct KeeperMetrics {
    renewals: Family<Labels<2>, Counter>,
    deaths: Family<Labels<1>, Counter>,
    lost: Family<Labels<1>, Counter>,
    report_failures: Family<Labels<3>, Counter>,
    renewal_age: Family<Labels<1>, Gauge<f64, AtomicU64>>,
}

fn lane(lane: Lane) -> Labels<1> {
    [("lane", lane.label_value())]
}

impl KeeperMetrics {
    /// Empty families.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers the families (shared, not copied).
    pub fn register(&self, registry: &mut Registry) {
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
            "tcab_dispatcher_lost_reports",
            "Lost reports the backend accepted, by lane",
            self.lost.clone(),
        );
        registry.register(
            "tcab_dispatcher_report_failures",
            "Death and lost reports that failed (the job backs off alone), by report, lane and reason",
            self.report_failures.clone(),
        );
    }

    /// Records one renewal round.
    pub fn record_renewals(&self, report: &RenewalReport, publishing: bool) {
        for (l, result) in renewal_results(report, publishing) {
            self.renewals
                .get_or_create(&[("lane", l.label_value()), ("result", result)])
                .inc();
        }
    }

    /// Records the reports one report tick made.
    pub fn record_reports(&self, tick: &ReportTick) {
        for (report, reason) in &tick.failed_reports {
            self.report_failures
                .get_or_create(&[
                    ("report", report.as_str()),
                    ("lane", report.lane().label_value()),
                    ("reason", reason.as_str()),
                ])
                .inc();
        }
        for (_, cause) in &tick.reported_dead {
            self.deaths.get_or_create(&[("cause", cause)]).inc();
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
    pub fn refresh_ages(&self, gate: &Gate, now: Instant) {
        for (l, age) in gate.ages(now) {
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

/// The renewal loop, recording each round.
pub struct MeteredRenewer {
    renewer: Renewer,
    metrics: Arc<KeeperMetrics>,
    publishing: bool,
}

impl MeteredRenewer {
    /// `renewer`, recording into `metrics`; `publishing` says whether the
    /// publish lane is renewed.
    pub fn new(renewer: Renewer, metrics: Arc<KeeperMetrics>, publishing: bool) -> Self {
        MeteredRenewer {
            renewer,
            metrics,
            publishing,
        }
    }
}

impl Tick for MeteredRenewer {
    async fn tick(&mut self) -> TickOutcome {
        let report = self.renewer.round().await;
        self.metrics.record_renewals(&report, self.publishing);
        TickOutcome::Idle
    }
}

/// The report loop, recording each tick's reports.
pub struct MeteredReporter {
    reporter: Reporter,
    metrics: Arc<KeeperMetrics>,
}

impl MeteredReporter {
    /// `reporter`, recording into `metrics`.
    pub fn new(reporter: Reporter, metrics: Arc<KeeperMetrics>) -> Self {
        MeteredReporter { reporter, metrics }
    }
}

impl Tick for MeteredReporter {
    async fn tick(&mut self) -> TickOutcome {
        let tick = self.reporter.tick_at(None).await;
        self.metrics.record_reports(&tick);
        TickOutcome::Idle
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cause::{DeathCause, StartFailure, StartFailureKind};
    use std::time::Duration;
    use tcab_shared::job_cache::OwnedJobs;
    use tcab_shared::metrics::{Common, Exporter};

    fn ids(names: &[&str]) -> Option<Vec<String>> {
        Some(names.iter().map(|s| (*s).to_owned()).collect())
    }

    #[test]
    fn each_renewal_call_counts_by_lane_and_result() {
        let both = RenewalReport {
            runs: ids(&["a"]),
            publishes: None,
        };
        assert_eq!(
            renewal_results(&both, true),
            [(Lane::Run, "ok"), (Lane::Publish, "failed")]
        );
        assert_eq!(
            renewal_results(&both, false),
            [(Lane::Run, "ok")],
            "no publish call while publishing is off"
        );
        let empty = RenewalReport {
            runs: ids(&[]),
            publishes: None,
        };
        assert_eq!(
            renewal_results(&empty, false),
            [(Lane::Run, "ok")],
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
            reported_dead: vec![("a".into(), "oom_killed"), ("b".into(), "oom_killed")],
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
            r#"tcab_dispatcher_lost_reports_total{lane="run"} 1"#,
            r#"tcab_dispatcher_lost_reports_total{lane="publish"} 2"#,
            "# TYPE tcab_dispatcher_last_renewal_age_seconds gauge",
            r#"tcab_dispatcher_last_renewal_age_seconds{lane="run"} 2.5"#,
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

    /// The `cause` values docs/metrics.md lists.
    fn documented_causes() -> Vec<String> {
        let doc = include_str!("../../../docs/metrics.md");
        let table = doc
            .split("### Death causes")
            .nth(1)
            .expect("the death causes section");
        table
            .lines()
            .filter_map(|l| l.strip_prefix("| `"))
            .filter_map(|l| l.split('`').next())
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn every_death_cause_is_a_documented_label_value() {
        let documented = documented_causes();
        assert!(documented.len() >= 10, "{documented:?}");
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
            (DeathCause::Unknown, "unknown"),
            (never(StartFailureKind::ImagePull), "image_pull"),
            (never(StartFailureKind::InvalidImage), "image_pull"),
            (never(StartFailureKind::ConfigError), "config_error"),
            (never(StartFailureKind::CreateError), "config_error"),
            (never(StartFailureKind::Unschedulable), "unschedulable"),
            (
                DeathCause::Stuck {
                    node: None,
                    waited: Duration::from_secs(90),
                    evidence: Box::new(DeathCause::Unknown),
                },
                "node_lost",
            ),
        ];
        for (cause, want) in cases {
            assert_eq!(cause.kind(), want, "{cause:?}");
            assert!(
                documented.iter().any(|d| d == want),
                "{want} is not in docs/metrics.md's causes {documented:?}"
            );
        }
    }
}
