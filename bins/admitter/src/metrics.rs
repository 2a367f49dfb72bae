//! The admitter's own metrics (docs/metrics.md): each lane's in-flight
//! count and cap, its admissions by outcome, and its admission gate as the
//! lane last read it. They are recorded from each lane's [`LaneReport`] at
//! the loop's edge ([`MeteredLane`]); the decisions never read them.

use crate::admit::LaneOutcome;
use crate::lane::{AdmissionResult, LaneAdmitter, LaneReport};
use crate::plan::{Decision, HoldReason};
use crate::run::AdmitterSettings;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::Arc;
use tcab_shared::Lane;
use tcab_shared::metrics::Labels;
use tcab_shared::tick::{Tick, TickOutcome};

/// The `loop` label of a lane's loop: `admit_run`, `admit_publish`.
pub fn loop_name(lane: Lane) -> &'static str {
    match lane {
        Lane::Run => "admit_run",
        Lane::Publish => "admit_publish",
    }
}

/// The `outcome` a tick's result counts as, if it is an admission attempt:
/// `created`, `empty_queue`, `gate_closed`, `lane_full`, `paused` (a cap of
/// 0, counted each tick like a full lane) or `error`. A lane
/// that holds before it would claim (its view not current, backing off,
/// resting after an empty claim, disabled) made no attempt.
pub fn outcome(result: AdmissionResult) -> Option<&'static str> {
    match result {
        AdmissionResult::Created
        | AdmissionResult::EmptyQueue
        | AdmissionResult::GateClosed
        | AdmissionResult::LaneFull
        | AdmissionResult::Paused
        | AdmissionResult::Error => Some(result.as_str()),
        AdmissionResult::ViewNotCurrent
        | AdmissionResult::BackingOff
        | AdmissionResult::Resting
        | AdmissionResult::Disabled => None,
    }
}

/// The outcome a settle of an earlier unsettled create came to, once it
/// came to one: its Job exists (`created`) or never will (`error`).
fn settled_outcome(settled: &LaneOutcome) -> Option<&'static str> {
    match settled {
        LaneOutcome::Unsettled { .. } => None,
        done if done.created().is_some() => Some(AdmissionResult::Created.as_str()),
        LaneOutcome::Empty => Some(AdmissionResult::EmptyQueue.as_str()),
        _ => Some(AdmissionResult::Error.as_str()),
    }
}

/// Every admission outcome one tick of a lane counts. A claim whose create
/// stays unsettled is counted once, when it settles (`created` when its Job
/// turns out to exist, `error` when it is given up), so each claim counts
/// once and `created` counts every Job the admitter made.
pub fn admissions(report: &LaneReport) -> Vec<&'static str> {
    let mut out = Vec::new();
    if !matches!(report.outcome, Some(LaneOutcome::Unsettled { .. }))
        && let Some(outcome) = outcome(report.result())
    {
        out.push(outcome);
    }
    out.extend(report.resettled.iter().filter_map(settled_outcome));
    out
}

/// The gate as the tick read it: open when the lane admitted, closed when
/// the gate held it, `None` when the lane did not ask (it held earlier).
pub fn gate_reading(report: &LaneReport) -> Option<bool> {
    match &report.decision {
        Decision::Admit { .. } => Some(true),
        Decision::Hold(HoldReason::GateClosed { .. }) => Some(false),
        Decision::Hold(_) => None,
    }
}

/// The admitter's metric families.
#[derive(Debug, Default)]
pub struct AdmitterMetrics {
    in_flight: Family<Labels<1>, Gauge>,
    cap: Family<Labels<1>, Gauge>,
    admissions: Family<Labels<2>, Counter>,
    gate_open: Family<Labels<1>, Gauge>,
    paused: Family<Labels<1>, Gauge>,
    stale_deletes: Family<Labels<2>, Counter>,
    poisoned: Family<Labels<3>, Counter>,
}

fn lane(lane: Lane) -> Labels<1> {
    [("lane", lane.label_value())]
}

impl AdmitterMetrics {
    /// Empty families.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers the families (shared, not copied).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "tcab_dispatcher_lane_in_flight",
            "Live Jobs of the lane as the admitter counted them on its last tick",
            self.in_flight.clone(),
        );
        registry.register(
            "tcab_dispatcher_lane_cap",
            "The lane's cap; the publish lane's is 0 while publishing is off",
            self.cap.clone(),
        );
        registry.register(
            "tcab_dispatcher_admissions",
            "Admission attempts of a lane by what came of them",
            self.admissions.clone(),
        );
        registry.register(
            "tcab_dispatcher_stale_job_deletes",
            "Deletes of a stale Job (a live Job of a freshly claimed job id under an older claim) by result",
            self.stale_deletes.clone(),
        );
        registry.register(
            "tcab_dispatcher_poisoned_claims",
            "Claims that could not become a Job for a reason of their own, by reason and by what reporting them failed came to",
            self.poisoned.clone(),
        );
        registry.register(
            "tcab_dispatcher_lane_paused",
            "1 while the lane is paused by a cap of 0 (it claims nothing), else 0",
            self.paused.clone(),
        );
        registry.register(
            "tcab_dispatcher_gate_open",
            "1 while the admitter reads the lane's admission gate as open, 0 while closed",
            self.gate_open.clone(),
        );
    }

    /// Every lane's cap from the settings (0 for a lane that is off), and
    /// nothing in flight and the gate closed until the lane's first tick.
    pub fn start(&self, settings: &AdmitterSettings) {
        for l in Lane::ALL {
            let cap = if settings.enabled(l) {
                settings.cap(l)
            } else {
                0
            };
            self.cap.get_or_create(&lane(l)).set(i64::from(cap));
            let paused = settings.enabled(l) && cap == 0;
            self.paused.get_or_create(&lane(l)).set(i64::from(paused));
            self.in_flight.get_or_create(&lane(l)).set(0);
            self.gate_open.get_or_create(&lane(l)).set(0);
        }
    }

    /// Records one tick of a lane.
    pub fn record(&self, report: &LaneReport) {
        let l = report.lane;
        self.in_flight
            .get_or_create(&lane(l))
            .set(i64::from(report.in_flight));
        if let Some(open) = gate_reading(report) {
            self.gate_open.get_or_create(&lane(l)).set(i64::from(open));
        }
        for deletion in &report.stale {
            let result = if deletion.result.is_ok() {
                "ok"
            } else {
                "failed"
            };
            self.stale_deletes
                .get_or_create(&[("lane", l.label_value()), ("result", result)])
                .inc();
        }
        let poisoned = report
            .outcome
            .iter()
            .chain(&report.resettled)
            .filter_map(|o| match o {
                LaneOutcome::Poisoned { reason, report, .. } => Some((reason, report)),
                _ => None,
            });
        for (reason, result) in poisoned {
            self.poisoned
                .get_or_create(&[
                    ("lane", l.label_value()),
                    ("reason", reason.as_str()),
                    ("result", result.as_str()),
                ])
                .inc();
        }
        for outcome in admissions(report) {
            self.admissions
                .get_or_create(&[("lane", l.label_value()), ("outcome", outcome)])
                .inc();
        }
    }
}

/// A lane's loop that records the lane's metrics from each tick's report.
#[derive(Debug)]
pub struct MeteredLane {
    lane: LaneAdmitter,
    metrics: Arc<AdmitterMetrics>,
}

impl MeteredLane {
    /// `lane`'s loop, recording into `metrics`.
    pub fn new(lane: LaneAdmitter, metrics: Arc<AdmitterMetrics>) -> Self {
        MeteredLane { lane, metrics }
    }
}

impl Tick for MeteredLane {
    async fn tick(&mut self) -> TickOutcome {
        let report = self.lane.tick_report().await;
        self.metrics.record(&report);
        report.tick_outcome()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admit::CreateFailure;
    use std::time::Duration;
    use tcab_shared::metrics::{Common, Exporter};

    fn report(decision: Decision, outcome: Option<LaneOutcome>) -> LaneReport {
        LaneReport {
            lane: Lane::Run,
            decision,
            outcome,
            resettled: vec![],
            in_flight: 3,
            stale: vec![],
        }
    }

    fn admit() -> Decision {
        Decision::Admit { in_flight: 3 }
    }

    fn admitted(name: &str) -> LaneOutcome {
        LaneOutcome::Admitted {
            job_id: name.into(),
            job_name: format!("tcab-driver-{name}"),
            settled: None,
        }
    }

    fn unsettled(name: &str) -> LaneOutcome {
        LaneOutcome::Unsettled {
            job_id: name.into(),
            job_name: format!("tcab-driver-{name}"),
            error: "500".into(),
        }
    }

    fn hold(reason: HoldReason) -> Decision {
        Decision::Hold(reason)
    }

    #[test]
    fn each_tick_counts_as_the_documented_outcome() {
        let gate_closed = || {
            hold(HoldReason::GateClosed {
                why: "renewal failed".into(),
            })
        };
        let cases = [
            (report(admit(), Some(admitted("a"))), vec!["created"]),
            (
                report(admit(), Some(LaneOutcome::Empty)),
                vec!["empty_queue"],
            ),
            (report(gate_closed(), None), vec!["gate_closed"]),
            (
                report(
                    hold(HoldReason::LaneFull {
                        in_flight: 8,
                        cap: 8,
                    }),
                    None,
                ),
                vec!["lane_full"],
            ),
            (
                report(
                    admit(),
                    Some(LaneOutcome::CreateFailed {
                        job_id: "a".into(),
                        job_name: "tcab-driver-a".into(),
                        reason: CreateFailure::Lapsed {
                            age: Duration::from_secs(90),
                        },
                    }),
                ),
                vec!["error"],
            ),
            // Not attempts: nothing counted.
            (
                report(
                    hold(HoldReason::ViewNotCurrent {
                        why: "listing".into(),
                    }),
                    None,
                ),
                vec![],
            ),
            (
                report(
                    hold(HoldReason::Resting {
                        until: tokio::time::Instant::now(),
                    }),
                    None,
                ),
                vec![],
            ),
            (report(hold(HoldReason::Disabled), None), vec![]),
            (report(hold(HoldReason::Paused), None), vec!["paused"]),
        ];
        for (report, want) in cases {
            assert_eq!(admissions(&report), want, "{report:?}");
        }
    }

    #[test]
    fn an_unsettled_create_counts_once_when_it_settles() {
        let first = report(admit(), Some(unsettled("a")));
        assert_eq!(admissions(&first), Vec::<&str>::new(), "not yet known");
        let mut later = report(hold(HoldReason::Disabled), None);
        later.resettled = vec![unsettled("a")];
        assert_eq!(admissions(&later), Vec::<&str>::new(), "still unknown");
        later.resettled = vec![admitted("a")];
        assert_eq!(admissions(&later), ["created"]);
        // A tick can admit a fresh claim and settle an older one.
        let mut both = report(admit(), Some(admitted("b")));
        both.resettled = vec![LaneOutcome::CreateFailed {
            job_id: "a".into(),
            job_name: "tcab-driver-a".into(),
            reason: CreateFailure::GaveUp {
                calls: 8,
                first: "500".into(),
            },
        }];
        assert_eq!(admissions(&both), ["created", "error"]);
    }

    #[test]
    fn the_gate_is_read_only_when_the_lane_asked() {
        assert_eq!(gate_reading(&report(admit(), None)), Some(true));
        let closed = hold(HoldReason::GateClosed { why: "x".into() });
        assert_eq!(gate_reading(&report(closed, None)), Some(false));
        let full = hold(HoldReason::LaneFull {
            in_flight: 1,
            cap: 1,
        });
        assert_eq!(gate_reading(&report(full, None)), None);
    }

    #[test]
    fn recorded_ticks_encode_under_the_documented_names() {
        let metrics = AdmitterMetrics::new();
        let mut exporter = Exporter::new(&Common::new());
        metrics.register(exporter.registry_mut());
        use crate::config::AdmitterConfig;
        use tcab_shared::config::BinaryConfig;
        let vars = [
            ("TCAB_BACKEND_URL", "http://backend:8080"),
            ("TCAB_BACKEND_SERVICE_TOKEN", "t"),
            ("TCAB_DRIVER_IMAGE", "driver:1"),
            ("TCAB_DISPATCHER_MAX_INFLIGHT", "8"),
        ];
        let config =
            AdmitterConfig::from_vars(vars.map(|(k, v)| (k.to_owned(), v.to_owned()))).unwrap();
        // No publisher image: the publish lane is off, its cap 0.
        let settings = AdmitterSettings::from_config(&config);
        metrics.start(&settings);
        metrics.record(&report(admit(), Some(admitted("a"))));
        metrics.record(&report(admit(), Some(admitted("b"))));
        let mut full = report(
            hold(HoldReason::LaneFull {
                in_flight: 8,
                cap: 8,
            }),
            None,
        );
        full.in_flight = 8;
        metrics.record(&full);
        let mut poisoned = report(
            admit(),
            Some(LaneOutcome::Poisoned {
                job_id: None,
                reason: crate::admit::PoisonReason::Malformed,
                detail: "x".into(),
                report: crate::admit::PoisonReport::Impossible { shape: "{}".into() },
            }),
        );
        poisoned.stale = vec![crate::admit::StaleDeletion {
            job_id: "a".into(),
            stale: crate::plan::StaleJob {
                name: "tcab-driver-a-1".into(),
                claim: None,
                pod: None,
            },
            result: Ok(()),
        }];
        poisoned.in_flight = 8;
        metrics.record(&poisoned);
        let text = exporter.encode();
        for line in [
            "# TYPE tcab_dispatcher_lane_in_flight gauge",
            r#"tcab_dispatcher_lane_in_flight{lane="run"} 8"#,
            r#"tcab_dispatcher_lane_in_flight{lane="publish"} 0"#,
            r#"tcab_dispatcher_lane_cap{lane="run"} 8"#,
            r#"tcab_dispatcher_lane_cap{lane="publish"} 0"#,
            "# TYPE tcab_dispatcher_admissions_total counter",
            r#"tcab_dispatcher_admissions_total{lane="run",outcome="created"} 2"#,
            r#"tcab_dispatcher_admissions_total{lane="run",outcome="lane_full"} 1"#,
            r#"tcab_dispatcher_gate_open{lane="run"} 1"#,
            r#"tcab_dispatcher_gate_open{lane="publish"} 0"#,
            r#"tcab_dispatcher_lane_paused{lane="run"} 0"#,
            r#"tcab_dispatcher_lane_paused{lane="publish"} 0"#,
            r#"tcab_dispatcher_admissions_total{lane="run",outcome="error"} 1"#,
            r#"tcab_dispatcher_stale_job_deletes_total{lane="run",result="ok"} 1"#,
            r#"tcab_dispatcher_poisoned_claims_total{lane="run",reason="malformed",result="none"} 1"#,
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in:\n{text}"
            );
        }
    }
}
