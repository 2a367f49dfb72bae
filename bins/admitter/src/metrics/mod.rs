//! The admitter's own metrics (docs/metrics.md): each lane's in-flight
//! count and cap, whether those figures are stale, how long the lane has
//! been saturated, what holds it, its admissions by outcome and its
//! admission errors by reason, its admission gate (and why it is closed) as
//! the lane last read it, how long jobs waited
//! in the backend's queue and how long a claim took to become a Job, and
//! each Job's start and run time as the Job watch shows them. They are
//! recorded from each lane's [`LaneReport`] at the loop's edge
//! ([`MeteredLane`]), from the Job view's milestones and, for the values that
//! are read rather than counted (ages), at each scrape; the decisions never
//! read them. Every counter series a lane can emit is created at 0 at start.
//!
//! What a tick's report counts as (its outcome, its error, the gate it
//! read, the lane's saturation, the queue wait) is read in `readings`,
//! pure; this module holds the families and records into them.

mod readings;

pub(crate) use readings::{
    Saturation, admission_error, admissions, gate_closed_reason, gate_label, gate_reading,
    queue_wait,
};

use crate::admit::LaneOutcome;
use crate::lane::{LaneAdmitter, LaneReport};
use crate::settings::AdmitterSettings;
use crate::status::AdmitterStatus;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tcab_shared::job_cache::{Milestone, OwnedJobs};
use tcab_shared::lane::PerLane;
use tcab_shared::metrics::labels::{
    AdmissionOutcome, AdmissionStep, CallResult, ErrorReason, GateClosedReason, JobOutcome,
    LabelValue, LaneHold, PoisonReason, PoisonResult,
};
use tcab_shared::metrics::{HistogramFamily, Labels, histogram_family_with, zero};
use tcab_shared::tick::{Tick, TickOutcome};
use tcab_shared::{Lane, WallClock};
use tokio::time::Instant;

/// Buckets of the queue wait (enqueue to claim), in seconds: a second to
/// eight hours, since a deliberately ordered sweep can hold work for hours.
pub(crate) const QUEUE_WAIT_BUCKETS: [f64; 14] = [
    1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0, 14400.0,
    28800.0,
];

/// Buckets of claim-to-Job, in seconds: the admitter's own work (a claim, a
/// vault `Put`, a create and its settle), milliseconds normally, up to a
/// settle that takes most of half a lease.
pub(crate) const CLAIM_TO_JOB_BUCKETS: [f64; 12] = [
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// Buckets of Job-created-to-running, in seconds: a cached image starts in
/// seconds, a pull or a scale-up takes minutes, the unschedulable grace is
/// half an hour.
pub(crate) const JOB_START_BUCKETS: [f64; 12] = [
    1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0,
];

/// Buckets of a Job's run time (created to finished), in seconds: a publish
/// in minutes, a run up to the driver's six-hour deadline.
pub(crate) const JOB_DURATION_BUCKETS: [f64; 13] = [
    10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0, 14400.0, 21600.0,
    43200.0,
];

fn queue_wait_histogram() -> Histogram {
    Histogram::new(QUEUE_WAIT_BUCKETS)
}
fn claim_to_job_histogram() -> Histogram {
    Histogram::new(CLAIM_TO_JOB_BUCKETS)
}
fn job_start_histogram() -> Histogram {
    Histogram::new(JOB_START_BUCKETS)
}
fn job_duration_histogram() -> Histogram {
    Histogram::new(JOB_DURATION_BUCKETS)
}

/// The `loop` label of a lane's loop: `admit_run`, `admit_publish`.
pub(crate) fn loop_name(lane: Lane) -> &'static str {
    lane.spec().admit_loop.as_str()
}

/// What the scrape reads afresh: the Job view and the wall clock.
struct Reads {
    jobs: OwnedJobs,
    clock: WallClock,
}

/// The admitter's metric families.
pub(crate) struct AdmitterMetrics {
    in_flight: Family<Labels<1>, Gauge>,
    cap: Family<Labels<1>, Gauge>,
    stale: Family<Labels<1>, Gauge>,
    saturated: Family<Labels<1>, Gauge<f64, AtomicU64>>,
    oldest_age: Family<Labels<1>, Gauge<f64, AtomicU64>>,
    deadline: Family<Labels<1>, Gauge>,
    gate_max_age: Gauge<f64, AtomicU64>,
    admissions: Family<Labels<2>, Counter>,
    admission_errors: Family<Labels<3>, Counter>,
    gate_open: Family<Labels<1>, Gauge>,
    gate_closed_reason: Family<Labels<2>, Gauge>,
    hold: Family<Labels<2>, Gauge>,
    paused: Family<Labels<1>, Gauge>,
    stale_deletes: Family<Labels<2>, Counter>,
    poisoned: Family<Labels<3>, Counter>,
    queue_wait: HistogramFamily<Labels<1>>,
    claim_to_job: HistogramFamily<Labels<1>>,
    job_start: HistogramFamily<Labels<1>>,
    job_duration: HistogramFamily<Labels<2>>,
    /// Each lane's saturation.
    saturation: Mutex<PerLane<Saturation>>,
    /// The lease the backend grants (the claim's time on its clock).
    lease: Mutex<Duration>,
    reads: OnceLock<Reads>,
}

impl std::fmt::Debug for AdmitterMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdmitterMetrics").finish_non_exhaustive()
    }
}

fn lane(lane: Lane) -> Labels<1> {
    [("lane", lane.label_value())]
}

impl Default for AdmitterMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl AdmitterMetrics {
    /// Empty families.
    pub(crate) fn new() -> Self {
        AdmitterMetrics {
            in_flight: Family::default(),
            cap: Family::default(),
            stale: Family::default(),
            saturated: Family::default(),
            oldest_age: Family::default(),
            deadline: Family::default(),
            gate_max_age: Gauge::default(),
            admissions: Family::default(),
            admission_errors: Family::default(),
            gate_open: Family::default(),
            gate_closed_reason: Family::default(),
            hold: Family::default(),
            paused: Family::default(),
            stale_deletes: Family::default(),
            poisoned: Family::default(),
            queue_wait: histogram_family_with(queue_wait_histogram),
            claim_to_job: histogram_family_with(claim_to_job_histogram),
            job_start: histogram_family_with(job_start_histogram),
            job_duration: histogram_family_with(job_duration_histogram),
            saturation: Mutex::new(PerLane::default()),
            lease: Mutex::new(Duration::ZERO),
            reads: OnceLock::new(),
        }
    }

    /// Registers the families (shared, not copied).
    pub(crate) fn register(&self, registry: &mut Registry) {
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
            "tcab_dispatcher_lane_stale",
            "1 while the lane's figures are stale: the admitter's Job view is not current, so its in-flight count is the last one it could trust",
            self.stale.clone(),
        );
        registry.register(
            "tcab_dispatcher_lane_saturated_seconds",
            "Seconds the lane has been saturated (at its cap while its last claim found work); 0 while it is not",
            self.saturated.clone(),
        );
        registry.register(
            "tcab_dispatcher_lane_oldest_job_age_seconds",
            "Age of the lane's oldest live Job (0 with none)",
            self.oldest_age.clone(),
        );
        registry.register(
            "tcab_dispatcher_lane_deadline_seconds",
            "activeDeadlineSeconds of the lane's Jobs",
            self.deadline.clone(),
        );
        registry.register(
            "tcab_dispatcher_gate_max_age_seconds",
            "The oldest a successful renewal may be for the gate to stay open (TCAB_DISPATCHER_GATE_MAX_AGE_SECONDS)",
            self.gate_max_age.clone(),
        );
        registry.register(
            "tcab_dispatcher_admissions",
            "Admission attempts of a lane by what came of them",
            self.admissions.clone(),
        );
        registry.register(
            "tcab_dispatcher_admission_errors",
            "Admissions that failed, by the step that failed and why",
            self.admission_errors.clone(),
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
            "1 while the lane's last reading of its admission gate was open, 0 while closed (read every tick; no series before the first reading)",
            self.gate_open.clone(),
        );
        registry.register(
            "tcab_dispatcher_gate_closed_reason",
            "1 for the reason the lane's admission gate is closed at its last reading, 0 for the others (all 0 while open)",
            self.gate_closed_reason.clone(),
        );
        registry.register(
            "tcab_dispatcher_lane_hold",
            "1 for what holds the lane from claiming at its last tick (none while it claims), 0 for the others",
            self.hold.clone(),
        );
        registry.register(
            "tcab_dispatcher_queue_wait_seconds",
            "How long a claimed job waited in the backend's queue: from its enqueue to its claim, on the backend's clock",
            self.queue_wait.clone(),
        );
        registry.register(
            "tcab_dispatcher_claim_to_job_seconds",
            "From sending a claim to its Job known to exist",
            self.claim_to_job.clone(),
        );
        registry.register(
            "tcab_dispatcher_job_start_seconds",
            "From a Job's creation to its pod ready (status.ready first above 0), as the Job watch shows it",
            self.job_start.clone(),
        );
        registry.register(
            "tcab_dispatcher_job_duration_seconds",
            "From a Job's creation to its Complete or Failed condition, as the Job watch shows it",
            self.job_duration.clone(),
        );
    }

    /// Every lane's cap and deadline from the settings (a cap of 0 for a
    /// lane that is off), nothing in flight, the figures stale until the
    /// lane's first tick (a lane that is off never ticks: its figures are
    /// not stale), every counter series a lane can emit at 0, and every
    /// hold and gate reason at 0 (a lane that is off: held `disabled`, its
    /// gate 0). An enabled lane's `gate_open` has no series until the lane
    /// first reads its gate: a 0 there before any reading would say the
    /// gate is closed when nobody has asked.
    pub(crate) fn start(&self, settings: &AdmitterSettings) {
        *self.lease.lock().unwrap_or_else(|e| e.into_inner()) = settings.lease_length;
        self.gate_max_age.set(settings.gate_max_age.as_secs_f64());
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
            if !settings.enabled(l) {
                self.gate_open.get_or_create(&lane(l)).set(0);
            }
            let held = (!settings.enabled(l)).then_some(LaneHold::Disabled);
            self.set_hold(l, held);
            self.set_gate_reason(l, None);
            // Stale until the lane's first tick on a current view; a lane
            // that is off has no figures to be stale.
            self.stale
                .get_or_create(&lane(l))
                .set(i64::from(settings.enabled(l)));
            self.saturated.get_or_create(&lane(l)).set(0.0);
            self.oldest_age.get_or_create(&lane(l)).set(0.0);
            let deadline = match l {
                Lane::Run => settings.jobs.driver_active_deadline_seconds,
                Lane::Publish => settings.jobs.publisher_active_deadline_seconds,
            };
            self.deadline.get_or_create(&lane(l)).set(deadline);
        }
        let lanes = Lane::ALL.iter().map(|l| l.label_value());
        for l in Lane::ALL {
            zero(&self.queue_wait, [lane(l)]);
            zero(&self.claim_to_job, [lane(l)]);
            zero(&self.job_start, [lane(l)]);
        }
        zero(
            &self.job_duration,
            lanes.clone().flat_map(|l| {
                JobOutcome::ALL
                    .iter()
                    .map(move |o| [("lane", l), ("outcome", o.as_str())])
            }),
        );
        zero(
            &self.admissions,
            lanes.clone().flat_map(|l| {
                AdmissionOutcome::ALL
                    .iter()
                    .map(move |o| [("lane", l), ("outcome", o.as_str())])
            }),
        );
        zero(
            &self.admission_errors,
            lanes.clone().flat_map(|l| {
                let claim = ErrorReason::BACKEND.iter().map(move |r| {
                    [
                        ("lane", l),
                        ("step", AdmissionStep::Claim.as_str()),
                        ("reason", r.as_str()),
                    ]
                });
                let create = ErrorReason::KUBE.iter().map(move |r| {
                    [
                        ("lane", l),
                        ("step", AdmissionStep::Create.as_str()),
                        ("reason", r.as_str()),
                    ]
                });
                claim.chain(create)
            }),
        );
        zero(
            &self.stale_deletes,
            lanes.clone().flat_map(|l| {
                CallResult::ALL
                    .iter()
                    .map(move |r| [("lane", l), ("result", r.as_str())])
            }),
        );
        zero(
            &self.poisoned,
            lanes.flat_map(|l| {
                PoisonReason::ALL.iter().flat_map(move |reason| {
                    PoisonResult::ALL.iter().map(move |result| {
                        [
                            ("lane", l),
                            ("reason", reason.as_str()),
                            ("result", result.as_str()),
                        ]
                    })
                })
            }),
        );
    }

    /// Reads the Job view and the wall clock at each scrape from now on
    /// (each lane's oldest live Job), and times each Job's start and run
    /// from the view's milestones.
    pub(crate) fn watch(self: &Arc<Self>, jobs: &OwnedJobs, clock: WallClock) {
        let metrics = Arc::clone(self);
        let at = clock.clone();
        jobs.on_milestone(Arc::new(move |milestone| {
            metrics.milestone(&milestone, &at)
        }));
        let _ = self.reads.set(Reads {
            jobs: jobs.clone(),
            clock,
        });
    }

    /// Records one milestone of a Job's life, timed from its creation.
    pub(crate) fn milestone(&self, milestone: &Milestone, clock: &WallClock) {
        let since = |created: jiff::Timestamp| {
            Duration::try_from(clock.now().duration_since(created)).unwrap_or(Duration::ZERO)
        };
        match milestone {
            Milestone::Started {
                lane: l,
                created_at,
            } => self
                .job_start
                .get_or_create(&lane(*l))
                .observe(since(*created_at).as_secs_f64()),
            Milestone::Finished {
                lane: l,
                outcome,
                created_at,
            } => self
                .job_duration
                .get_or_create(&[("lane", l.label_value()), ("outcome", outcome.as_str())])
                .observe(since(*created_at).as_secs_f64()),
        }
    }

    /// Sets what is read rather than counted, at `now`: each lane's
    /// saturated seconds and the age of its oldest live Job.
    pub(crate) fn refresh(&self, now: Instant) {
        let saturation = *self.saturation.lock().unwrap_or_else(|e| e.into_inner());
        for l in Lane::ALL {
            let seconds = saturation[l].since.map_or(0.0, |since| {
                now.saturating_duration_since(since).as_secs_f64()
            });
            self.saturated.get_or_create(&lane(l)).set(seconds);
            if let Some(reads) = self.reads.get() {
                let age = reads.jobs.oldest_live(l).map_or(0.0, |created| {
                    Duration::try_from(reads.clock.now().duration_since(created))
                        .unwrap_or(Duration::ZERO)
                        .as_secs_f64()
                });
                self.oldest_age.get_or_create(&lane(l)).set(age);
            }
        }
    }

    /// Sets the lane's hold gauge: 1 for `held`, 0 for every other value
    /// (all 0 with `None`: the lane has not ticked).
    fn set_hold(&self, l: Lane, held: Option<LaneHold>) {
        for kind in LaneHold::ALL {
            self.hold
                .get_or_create(&[("lane", l.label_value()), ("reason", kind.as_str())])
                .set(i64::from(Some(*kind) == held));
        }
    }

    /// Sets the lane's gate reason gauge: 1 for `closed`, 0 for every other
    /// reason (all 0 with `None`: open, or not read).
    fn set_gate_reason(&self, l: Lane, closed: Option<GateClosedReason>) {
        for reason in GateClosedReason::ALL {
            self.gate_closed_reason
                .get_or_create(&[("lane", l.label_value()), ("reason", reason.as_str())])
                .set(i64::from(Some(*reason) == closed));
        }
    }

    /// Records one tick of a lane.
    pub(crate) fn record(&self, report: &LaneReport) {
        let l = report.lane;
        self.in_flight
            .get_or_create(&lane(l))
            .set(i64::from(report.in_flight));
        self.stale
            .get_or_create(&lane(l))
            .set(i64::from(!report.view_current));
        {
            let mut saturation = self.saturation.lock().unwrap_or_else(|e| e.into_inner());
            let state = &mut saturation[l];
            *state = state.after(report, Instant::now());
        }
        if let Some(open) = gate_reading(report) {
            self.gate_open.get_or_create(&lane(l)).set(i64::from(open));
            self.set_gate_reason(l, gate_closed_reason(report));
        }
        self.set_hold(l, Some(report.decision.hold_kind()));
        for deletion in &report.stale {
            let result = if deletion.result.is_ok() {
                CallResult::Ok
            } else {
                CallResult::Failed
            };
            self.stale_deletes
                .get_or_create(&[("lane", l.label_value()), ("result", result.as_str())])
                .inc();
        }
        let outcomes = report.outcome.iter().chain(&report.resettled);
        for o in outcomes.clone() {
            match o {
                LaneOutcome::Poisoned { reason, report, .. } => {
                    self.poisoned
                        .get_or_create(&[
                            ("lane", l.label_value()),
                            ("reason", reason.as_str()),
                            ("result", report.result().as_str()),
                        ])
                        .inc();
                }
                other => {
                    if let Some((step, reason)) = admission_error(other) {
                        self.admission_errors
                            .get_or_create(&[
                                ("lane", l.label_value()),
                                ("step", step.as_str()),
                                ("reason", reason.as_str()),
                            ])
                            .inc();
                    }
                }
            }
        }
        for outcome in admissions(report) {
            self.admissions
                .get_or_create(&[("lane", l.label_value()), ("outcome", outcome.as_str())])
                .inc();
        }
        let lease = *self.lease.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(waited) = queue_wait(report, lease) {
            self.queue_wait
                .get_or_create(&lane(l))
                .observe(waited.as_secs_f64());
        }
        for took in &report.claim_to_job {
            self.claim_to_job
                .get_or_create(&lane(l))
                .observe(took.as_secs_f64());
        }
    }
}

/// A lane's loop that records the lane's metrics and its part of the
/// status document from each tick's report.
#[derive(Debug)]
pub(crate) struct MeteredLane {
    lane: LaneAdmitter,
    metrics: Arc<AdmitterMetrics>,
    status: Arc<AdmitterStatus>,
}

impl MeteredLane {
    /// `lane`'s loop, recording into `metrics` and `status`.
    pub(crate) fn new(
        lane: LaneAdmitter,
        metrics: Arc<AdmitterMetrics>,
        status: Arc<AdmitterStatus>,
    ) -> Self {
        MeteredLane {
            lane,
            metrics,
            status,
        }
    }
}

impl Tick for MeteredLane {
    async fn tick(&mut self) -> TickOutcome {
        let report = self.lane.tick_report().await;
        self.metrics.record(&report);
        self.status.record(&report);
        report.tick_outcome()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Decision, HoldReason};
    use std::time::Duration;
    use tcab_shared::metrics::{Common, Exporter};

    pub(super) fn report(decision: Decision, outcome: Option<LaneOutcome>) -> LaneReport {
        LaneReport {
            lane: Lane::Run,
            decision,
            outcome,
            resettled: vec![],
            in_flight: 3,
            stale: vec![],
            cap: 8,
            view_current: true,
            claimed: None,
            claim_to_job: vec![],
            gate: Some(tcab_proto::gate::GateVerdict::Open),
            backoff_until: None,
        }
    }

    pub(super) fn admit() -> Decision {
        Decision::Admit { in_flight: 3 }
    }

    pub(super) fn admitted(name: &str) -> LaneOutcome {
        LaneOutcome::Admitted {
            job_id: name.into(),
            job_name: format!("tcab-driver-{name}"),
            settled: None,
        }
    }

    pub(super) fn hold(reason: HoldReason) -> Decision {
        Decision::Hold(reason)
    }

    #[test]
    fn milestones_are_timed_from_the_jobs_creation() {
        let metrics = AdmitterMetrics::new();
        let mut exporter = Exporter::new(&Common::new());
        metrics.register(exporter.registry_mut());
        let created: jiff::Timestamp = "2026-11-29T17:00:00Z".parse().expect("a time");
        let clock = WallClock::fixed(created + jiff::SignedDuration::from_secs(45));
        metrics.milestone(
            &Milestone::Started {
                lane: Lane::Run,
                created_at: created,
            },
            &clock,
        );
        let later = WallClock::fixed(created + jiff::SignedDuration::from_secs(900));
        metrics.milestone(
            &Milestone::Finished {
                lane: Lane::Publish,
                outcome: tcab_shared::metrics::labels::JobOutcome::Failed,
                created_at: created,
            },
            &later,
        );
        let text = exporter.encode();
        for line in [
            r#"tcab_dispatcher_job_start_seconds_bucket{lane="run",le="30"} 0"#,
            r#"tcab_dispatcher_job_start_seconds_bucket{lane="run",le="60"} 1"#,
            r#"tcab_dispatcher_job_start_seconds_sum{lane="run"} 45.0"#,
            r#"tcab_dispatcher_job_duration_seconds_count{lane="publish",outcome="failed"} 1"#,
            r#"tcab_dispatcher_job_duration_seconds_sum{lane="publish",outcome="failed"} 900.0"#,
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in:\n{text}"
            );
        }
    }

    /// Settings from the required variables and `extra`.
    fn settings(extra: &[(&str, &str)]) -> AdmitterSettings {
        use crate::config::AdmitterConfig;
        use tcab_shared::config::BinaryConfig;
        let mut vars = vec![
            ("TCAB_BACKEND_URL", "http://backend:8080"),
            ("TCAB_BACKEND_SERVICE_TOKEN", "t"),
            ("TCAB_DRIVER_IMAGE", "driver:1"),
        ];
        vars.extend_from_slice(extra);
        let config =
            AdmitterConfig::from_vars(vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())))
                .unwrap();
        AdmitterSettings::from_config(&config)
    }

    fn has(text: &str, line: &str) -> bool {
        text.lines().any(|l| l == line)
    }

    /// After a restart with every slot taken by long runs, the gate reads
    /// as it is from the lane's first tick: no series before any reading
    /// (a 0 there would page as a closed gate), then open, and when it
    /// closes, closed with its reason while the lane holds for being full.
    #[test]
    fn a_full_lane_reads_its_gate_from_its_first_tick() {
        let metrics = AdmitterMetrics::new();
        let mut exporter = Exporter::new(&Common::new());
        metrics.register(exporter.registry_mut());
        metrics.start(&settings(&[
            ("TCAB_PUBLISHER_IMAGE", "publisher:1"),
            ("TCAB_DISPATCHER_MAX_INFLIGHT", "2"),
        ]));
        let text = exporter.encode();
        assert!(!text.contains("tcab_dispatcher_gate_open{"), "{text}");
        for lane in ["run", "publish"] {
            for kind in LaneHold::ALL {
                let line = format!(
                    r#"tcab_dispatcher_lane_hold{{lane="{lane}",reason="{}"}} 0"#,
                    kind.as_str()
                );
                assert!(has(&text, &line), "missing {line:?} in:\n{text}");
            }
            for reason in GateClosedReason::ALL {
                let line = format!(
                    r#"tcab_dispatcher_gate_closed_reason{{lane="{lane}",reason="{}"}} 0"#,
                    reason.as_str()
                );
                assert!(has(&text, &line), "missing {line:?} in:\n{text}");
            }
        }

        let mut full = report(
            hold(HoldReason::LaneFull {
                in_flight: 2,
                cap: 2,
            }),
            None,
        );
        metrics.record(&full);
        let text = exporter.encode();
        for line in [
            r#"tcab_dispatcher_gate_open{lane="run"} 1"#,
            r#"tcab_dispatcher_lane_hold{lane="run",reason="lane_full"} 1"#,
            r#"tcab_dispatcher_lane_hold{lane="run",reason="none"} 0"#,
            r#"tcab_dispatcher_gate_closed_reason{lane="run",reason="renewal_failing"} 0"#,
        ] {
            assert!(has(&text, line), "missing {line:?} in:\n{text}");
        }
        assert!(
            !text.contains(r#"tcab_dispatcher_gate_open{lane="publish"}"#),
            "the publish lane has not read its gate yet:\n{text}"
        );

        full.gate = Some(tcab_proto::gate::GateVerdict::closed(
            tcab_proto::gate::GateReason::RenewalFailing,
            "POST /jobs/leases: 500",
        ));
        metrics.record(&full);
        let text = exporter.encode();
        for line in [
            r#"tcab_dispatcher_gate_open{lane="run"} 0"#,
            r#"tcab_dispatcher_gate_closed_reason{lane="run",reason="renewal_failing"} 1"#,
            r#"tcab_dispatcher_gate_closed_reason{lane="run",reason="never_renewed"} 0"#,
            r#"tcab_dispatcher_lane_hold{lane="run",reason="lane_full"} 1"#,
            r#"tcab_dispatcher_lane_hold{lane="run",reason="gate_closed"} 0"#,
        ] {
            assert!(has(&text, line), "missing {line:?} in:\n{text}");
        }
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
        for name in ["a", "b"] {
            let mut created = report(admit(), Some(admitted(name)));
            created.claim_to_job = vec![Duration::from_millis(40)];
            metrics.record(&created);
        }
        let mut full = report(
            hold(HoldReason::LaneFull {
                in_flight: 8,
                cap: 8,
            }),
            None,
        );
        full.in_flight = 8;
        // The gate is read while the lane is full, and closed.
        full.gate = Some(tcab_proto::gate::GateVerdict::closed(
            tcab_proto::gate::GateReason::RenewalFailing,
            "POST /jobs/leases: 500",
        ));
        metrics.record(&full);
        let mut poisoned = report(
            admit(),
            Some(LaneOutcome::Poisoned {
                job_id: None,
                job_name: None,
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
            // The last tick's gate (closed, read while the lane was full),
            // and the publish lane's, which is off: 0, held `disabled`.
            r#"tcab_dispatcher_gate_open{lane="run"} 1"#,
            r#"tcab_dispatcher_gate_open{lane="publish"} 0"#,
            r#"tcab_dispatcher_gate_closed_reason{lane="run",reason="renewal_failing"} 0"#,
            r#"tcab_dispatcher_gate_closed_reason{lane="publish",reason="never_renewed"} 0"#,
            r#"tcab_dispatcher_lane_hold{lane="run",reason="none"} 1"#,
            r#"tcab_dispatcher_lane_hold{lane="run",reason="lane_full"} 0"#,
            r#"tcab_dispatcher_lane_hold{lane="publish",reason="disabled"} 1"#,
            r#"tcab_dispatcher_lane_hold{lane="publish",reason="none"} 0"#,
            r#"tcab_dispatcher_lane_paused{lane="run"} 0"#,
            r#"tcab_dispatcher_lane_paused{lane="publish"} 0"#,
            r#"tcab_dispatcher_admissions_total{lane="run",outcome="error"} 1"#,
            r#"tcab_dispatcher_stale_job_deletes_total{lane="run",result="ok"} 1"#,
            r#"tcab_dispatcher_poisoned_claims_total{lane="run",reason="malformed",result="none"} 1"#,
            // Created at 0 at the start, every value of every label.
            r#"tcab_dispatcher_admissions_total{lane="publish",outcome="created"} 0"#,
            r#"tcab_dispatcher_admissions_total{lane="run",outcome="empty_queue"} 0"#,
            r#"tcab_dispatcher_admission_errors_total{lane="run",step="claim",reason="timeout"} 0"#,
            r#"tcab_dispatcher_admission_errors_total{lane="publish",step="create",reason="forbidden"} 0"#,
            r#"tcab_dispatcher_stale_job_deletes_total{lane="publish",result="failed"} 0"#,
            r#"tcab_dispatcher_poisoned_claims_total{lane="publish",reason="too_large",result="ok"} 0"#,
            r#"tcab_dispatcher_lane_stale{lane="run"} 0"#,
            // The publish lane is off: nothing of it to be stale.
            r#"tcab_dispatcher_lane_stale{lane="publish"} 0"#,
            r#"tcab_dispatcher_lane_deadline_seconds{lane="run"} 21600"#,
            r#"tcab_dispatcher_lane_deadline_seconds{lane="publish"} 2700"#,
            "tcab_dispatcher_gate_max_age_seconds 60.0",
            // The lane histograms are there, empty, from the start.
            r#"tcab_dispatcher_queue_wait_seconds_count{lane="publish"} 0"#,
            r#"tcab_dispatcher_claim_to_job_seconds_count{lane="run"} 2"#,
            r#"tcab_dispatcher_job_start_seconds_count{lane="run"} 0"#,
            r#"tcab_dispatcher_job_duration_seconds_count{lane="publish",outcome="succeeded"} 0"#,
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in:\n{text}"
            );
        }
    }
}
