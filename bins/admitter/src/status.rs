//! The admitter's status document (`/status`, docs/operations.md): for
//! each lane, what it is doing (admitting, or held and why, in words), in
//! flight against its cap, its back-off, its gate as last read, its last
//! admission and its last error with the job id.
//!
//! Folded from each tick's [`LaneReport`] by the pure [`LaneStatus::after`]
//! and rendered by the pure [`LaneStatus::render`]; [`AdmitterStatus`] holds
//! both lanes for the server. Like the metrics, it is recorded at the loop's
//! edge and no decision reads it. Nothing in it carries a token: the
//! reports hold none, and the words of an error are bounded
//! ([`words`]).

use crate::admit::LaneOutcome;
use crate::lane::LaneReport;
use crate::metrics::admission_error;
use crate::plan::HoldReason;
use crate::settings::AdmitterSettings;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use tcab_proto::gate::GateVerdict;
use tcab_shared::lane::PerLane;
use tcab_shared::metrics::StatusSource;
use tcab_shared::metrics::status::{At, remaining, words};
use tcab_shared::{WallClock, error_chain};
use tokio::time::Instant;

/// The last thing that went wrong in a lane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LastError {
    /// The backend job it concerned, when one was claimed.
    pub(crate) job_id: Option<String>,
    /// The step: `claim`, `create`, `poisoned`, `stale_delete`.
    pub(crate) step: &'static str,
    /// Why, in one word (an error reason label value where there is one).
    pub(crate) reason: String,
    /// The error in words, bounded.
    pub(crate) message: String,
    /// When.
    pub(crate) at: At,
}

/// What the document says of one lane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LaneStatus {
    /// Whether the lane is configured.
    pub(crate) enabled: bool,
    /// The lane's last tick; `None` before its first.
    pub(crate) last_tick: Option<At>,
    /// What held the lane at its last tick; `None` while it admits (or
    /// before its first tick).
    pub(crate) hold: Option<HoldReason>,
    /// In flight at the last tick.
    pub(crate) in_flight: u32,
    /// The lane's cap.
    pub(crate) cap: u32,
    /// Whether the admitter's Job view was current at the last tick.
    pub(crate) view_current: bool,
    /// The lane backs off until then.
    pub(crate) backoff_until: Option<Instant>,
    /// The gate as last read, and when.
    pub(crate) gate: Option<(GateVerdict, At)>,
    /// What the lane's last claim came to (`created`, `empty_queue`,
    /// `error`: the admissions counter's outcome), and when.
    pub(crate) last_claim: Option<(&'static str, At)>,
    /// The job id of the last Job known to exist for a claim, and when.
    pub(crate) last_admitted: Option<(String, At)>,
    /// The last error.
    pub(crate) last_error: Option<LastError>,
}

impl LaneStatus {
    /// A lane that has not ticked: `enabled` with `cap`, or off (held
    /// `disabled`, with a cap of 0).
    pub(crate) fn new(enabled: bool, cap: u32) -> Self {
        LaneStatus {
            enabled,
            last_tick: None,
            hold: (!enabled).then_some(HoldReason::Disabled),
            in_flight: 0,
            cap: if enabled { cap } else { 0 },
            view_current: false,
            backoff_until: None,
            gate: None,
            last_claim: None,
            last_admitted: None,
            last_error: None,
        }
    }

    /// The status after one tick's `report`, made `at` (pure).
    pub(crate) fn after(mut self, report: &LaneReport, at: At) -> Self {
        self.last_tick = Some(at);
        self.hold = match &report.decision {
            crate::plan::Decision::Admit { .. } => None,
            crate::plan::Decision::Hold(reason) => Some(reason.clone()),
        };
        self.in_flight = report.in_flight;
        self.cap = report.cap;
        self.view_current = report.view_current;
        self.backoff_until = report.backoff_until;
        if let Some(gate) = &report.gate {
            self.gate = Some((gate.clone(), at));
        }
        if report.outcome.is_some() {
            self.last_claim = Some((report.result().as_str(), at));
        }
        for outcome in report.outcome.iter().chain(&report.resettled) {
            if outcome.created().is_some()
                && let Some(job_id) = job_id_of(outcome)
            {
                self.last_admitted = Some((job_id.to_owned(), at));
            }
            if let Some(error) = error_of(outcome, at) {
                self.last_error = Some(error);
            }
        }
        for deletion in &report.stale {
            if let Err(message) = &deletion.result {
                self.last_error = Some(LastError {
                    job_id: Some(deletion.job_id.clone()),
                    step: "stale_delete",
                    reason: "failed".into(),
                    message: words(&format!("{}: {message}", deletion.stale.name)),
                    at,
                });
            }
        }
        self
    }

    /// The lane's part of the document, seen from `now` (pure).
    pub(crate) fn render(&self, now: At) -> Value {
        let state = match (&self.hold, self.last_tick) {
            (Some(_), _) => "held",
            (None, Some(_)) => "admitting",
            (None, None) => "starting",
        };
        let backoff = remaining(self.backoff_until, now);
        let gate = self.gate.as_ref().map(|(verdict, read)| {
            let (reason, detail) = match verdict {
                GateVerdict::Open => (None, None),
                GateVerdict::Closed(closed) => (
                    Some(crate::metrics::gate_label(closed.reason).as_str()),
                    Some(words(&closed.to_string())),
                ),
            };
            json!({
                "open": verdict.is_open(),
                "reason": reason,
                "detail": detail,
                "read": read.render(now),
            })
        });
        let last_claim = self
            .last_claim
            .map(|(outcome, at)| at.render_with(now, json!({ "outcome": outcome })));
        let last_admitted = self
            .last_admitted
            .as_ref()
            .map(|(job_id, at)| at.render_with(now, json!({ "job_id": job_id })));
        let last_error = self.last_error.as_ref().map(|e| {
            e.at.render_with(
                now,
                json!({
                    "job_id": e.job_id,
                    "step": e.step,
                    "reason": e.reason,
                    "message": e.message,
                }),
            )
        });
        json!({
            "enabled": self.enabled,
            "state": state,
            "hold_reason": self.hold.as_ref().map(|h| h.kind().as_str()),
            "detail": self.hold.as_ref().map(|h| words(&h.to_string())),
            "in_flight": self.in_flight,
            "cap": self.cap,
            "view_current": self.view_current,
            "backoff_remaining_seconds": backoff,
            "gate": gate,
            "last_tick": self.last_tick.map(|t| t.render(now)),
            "last_claim": last_claim,
            "last_admitted": last_admitted,
            "last_error": last_error,
        })
    }
}

/// The job id of an outcome that has one.
fn job_id_of(outcome: &LaneOutcome) -> Option<&str> {
    match outcome {
        LaneOutcome::Admitted { job_id, .. }
        | LaneOutcome::AlreadyExists { job_id, .. }
        | LaneOutcome::CreateFailed { job_id, .. }
        | LaneOutcome::Unsettled { job_id, .. } => Some(job_id),
        LaneOutcome::Poisoned { job_id, .. } => job_id.as_deref(),
        LaneOutcome::Empty | LaneOutcome::ClaimFailed(_) => None,
    }
}

/// The error an outcome is, if it is one.
fn error_of(outcome: &LaneOutcome, at: At) -> Option<LastError> {
    let (step, reason, message) = match outcome {
        LaneOutcome::ClaimFailed(error) => (
            "claim",
            error.kind().reason().as_str().to_owned(),
            error_chain(error),
        ),
        LaneOutcome::CreateFailed { reason, .. } => (
            "create",
            admission_error(outcome)
                .map_or("request", |(_, r)| r.as_str())
                .to_owned(),
            error_chain(reason),
        ),
        LaneOutcome::Poisoned { reason, detail, .. } => {
            ("poisoned", reason.as_str().to_owned(), detail.clone())
        }
        LaneOutcome::Unsettled { error, .. } => ("create", "unsettled".to_owned(), error.clone()),
        LaneOutcome::Admitted { .. } | LaneOutcome::AlreadyExists { .. } | LaneOutcome::Empty => {
            return None;
        }
    };
    Some(LastError {
        job_id: job_id_of(outcome).map(str::to_owned),
        step,
        reason,
        message: words(&message),
        at,
    })
}

/// Both lanes' status, recorded from the lanes' loops and rendered for the
/// server.
pub(crate) struct AdmitterStatus {
    lanes: Mutex<PerLane<LaneStatus>>,
    clock: WallClock,
}

impl std::fmt::Debug for AdmitterStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdmitterStatus").finish_non_exhaustive()
    }
}

impl AdmitterStatus {
    /// Each lane as configured, before its first tick; moments read on `clock`.
    pub(crate) fn new(settings: &AdmitterSettings, clock: WallClock) -> Self {
        AdmitterStatus {
            lanes: Mutex::new(PerLane::from_fn(|lane| {
                LaneStatus::new(settings.enabled(lane), settings.cap(lane))
            })),
            clock,
        }
    }

    fn now(&self) -> At {
        At::now(&self.clock)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PerLane<LaneStatus>> {
        self.lanes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records one tick of a lane.
    pub(crate) fn record(&self, report: &LaneReport) {
        let at = self.now();
        let mut lanes = self.lock();
        let lane = &mut lanes[report.lane];
        *lane = lane.clone().after(report, at);
    }

    /// The admitter's own fields: `lanes`, each lane's part by its name.
    pub(crate) fn render(&self) -> Value {
        let now = self.now();
        let lanes = self.lock();
        let mut out = serde_json::Map::new();
        for (lane, status) in lanes.iter() {
            out.insert(lane.label_value().to_owned(), status.render(now));
        }
        json!({ "lanes": out })
    }

    /// The source the server renders `/status` from.
    pub(crate) fn source(self: &Arc<Self>) -> StatusSource {
        let status = Arc::clone(self);
        StatusSource::new(tcab_shared::config::Binary::Admitter.name(), move || {
            status.render()
        })
        .with_clock(self.clock.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admit::{CreateFailure, StaleDeletion};
    use crate::plan::{Decision, StaleJob};
    use std::time::Duration;
    use tcab_proto::gate::GateReason;
    use tcab_shared::Lane;

    fn at(instant: Instant, secs: i64) -> At {
        let base: jiff::Timestamp = "2026-12-07T11:00:00Z".parse().unwrap();
        At {
            instant,
            wall: base + jiff::SignedDuration::from_secs(secs),
        }
    }

    fn report(decision: Decision) -> LaneReport {
        LaneReport {
            lane: Lane::Run,
            decision,
            outcome: None,
            resettled: vec![],
            in_flight: 4,
            stale: vec![],
            cap: 4,
            view_current: true,
            claimed: None,
            claim_to_job: vec![],
            gate: Some(GateVerdict::Open),
            backoff_until: None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_lane_says_so_with_its_gate_and_its_last_admission() {
        let t0 = Instant::now();
        let mut admitted = report(Decision::Admit { in_flight: 3 });
        admitted.outcome = Some(LaneOutcome::Admitted {
            job_id: "job-7".into(),
            job_name: "tcab-driver-job-7-abc".into(),
            settled: None,
        });
        let status = LaneStatus::new(true, 4).after(&admitted, at(t0, 0));
        let doc = status.render(at(t0, 0));
        assert_eq!(doc["state"], "admitting");
        assert_eq!(doc["last_claim"]["outcome"], "created");

        tokio::time::advance(Duration::from_secs(5)).await;
        let t1 = Instant::now();
        let mut full = report(Decision::Hold(HoldReason::LaneFull {
            in_flight: 4,
            cap: 4,
        }));
        full.gate = Some(GateVerdict::closed(
            GateReason::RenewalFailing,
            "the latest run lease renewal failed: 500",
        ));
        let status = status.after(&full, at(t1, 5));
        let doc = status.render(at(t1, 5));
        assert_eq!(doc["state"], "held");
        assert_eq!(doc["hold_reason"], "lane_full");
        assert_eq!(doc["detail"], "lane full (4/4)");
        assert_eq!(
            (doc["in_flight"].clone(), doc["cap"].clone()),
            (json!(4), json!(4))
        );
        assert_eq!(doc["gate"]["open"], false);
        assert_eq!(doc["gate"]["reason"], "renewal_failing");
        assert_eq!(
            doc["gate"]["detail"],
            "the latest run lease renewal failed: 500"
        );
        assert_eq!(doc["gate"]["read"]["at"], "2026-12-07T11:00:05Z");
        assert_eq!(doc["last_admitted"]["job_id"], "job-7");
        assert_eq!(doc["last_admitted"]["seconds_ago"], 5.0);
        assert_eq!(doc["last_admitted"]["at"], "2026-12-07T11:00:00Z");
        assert_eq!(
            doc["last_claim"]["seconds_ago"], 5.0,
            "a held tick claims nothing"
        );
        assert!(doc["last_error"].is_null());
        assert!(doc["backoff_remaining_seconds"].is_null());
    }

    #[tokio::test(start_paused = true)]
    async fn the_last_error_keeps_its_job_id_and_the_back_off_counts_down() {
        let t0 = Instant::now();
        let mut failed = report(Decision::Admit { in_flight: 0 });
        failed.outcome = Some(LaneOutcome::CreateFailed {
            job_id: "job-9".into(),
            job_name: "tcab-driver-job-9-abc".into(),
            reason: CreateFailure::Api {
                code: 403,
                reason: "Forbidden".into(),
                message: "jobs.batch is forbidden".into(),
            },
        });
        failed.stale = vec![StaleDeletion {
            job_id: "job-9".into(),
            stale: StaleJob {
                name: "tcab-driver-job-9-old".into(),
                claim: None,
                pod: None,
            },
            result: Ok(()),
        }];
        let status = LaneStatus::new(true, 4).after(&failed, at(t0, 0));
        let until = t0 + Duration::from_secs(8);
        let mut backing_off = report(Decision::Hold(HoldReason::BackingOff { until }));
        backing_off.backoff_until = Some(until);
        tokio::time::advance(Duration::from_secs(2)).await;
        let now = at(Instant::now(), 2);
        let doc = status.after(&backing_off, now).render(now);
        assert_eq!(doc["hold_reason"], "backing_off");
        assert_eq!(doc["last_claim"]["outcome"], "error");
        assert_eq!(doc["backoff_remaining_seconds"], 6.0);
        let error = &doc["last_error"];
        assert_eq!(error["job_id"], "job-9");
        assert_eq!(error["step"], "create");
        assert_eq!(error["reason"], "forbidden");
        assert!(
            error["message"]
                .as_str()
                .is_some_and(|m| m.contains("403") && m.contains("forbidden")),
            "{error}"
        );
        assert_eq!(error["seconds_ago"], 2.0);
        // Kept while later ticks hold for other reasons.
        let doc = LaneStatus::new(true, 4)
            .after(&failed, at(t0, 0))
            .after(&report(Decision::Hold(HoldReason::Resting { until })), now)
            .render(now);
        assert_eq!(doc["last_error"]["job_id"], "job-9");
        assert_eq!(doc["hold_reason"], "resting");
    }

    #[test]
    fn a_lane_that_is_off_is_held_disabled_and_one_not_ticked_is_starting() {
        let now = at(Instant::now(), 0);
        let off = LaneStatus::new(false, 8).render(now);
        assert_eq!(off["state"], "held");
        assert_eq!(off["hold_reason"], "disabled");
        assert_eq!(off["cap"], 0);
        assert!(off["gate"].is_null());
        let fresh = LaneStatus::new(true, 8).render(now);
        assert_eq!(fresh["state"], "starting");
        assert!(fresh["hold_reason"].is_null());
        assert_eq!(fresh["cap"], 8);
    }
}
