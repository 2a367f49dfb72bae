//! The lease-keeper's status document (`/status`, docs/operations.md): per
//! lane, the renewals the admission gate is judged on (the last success and
//! its age, the failing call's words, failed rounds in a row); and the
//! report loop's state (Jobs without a pod, reports waiting to land or
//! backing off, the last failed report with its job id).
//!
//! Folded from each loop's report by the pure [`RenewalStatus::after`] and
//! [`ReportsStatus::after`], rendered by pure functions beside the gate's
//! record ([`Gate`]); [`KeeperStatus`] holds them for the server. No decision
//! reads it, and nothing in it carries a token.

use crate::gate::{Gate, LaneRenewals};
use crate::report::{FailedReport, ReportTick};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use tcab_shared::lane::PerLane;
use tcab_shared::metrics::StatusSource;
use tcab_shared::metrics::status::{At, words};
use tcab_shared::{Lane, WallClock};

/// What the document says of one lane's renewal rounds, beyond the gate's
/// record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RenewalStatus {
    /// When the last round ended.
    pub(crate) last_round: Option<At>,
    /// Leases the last successful round renewed.
    pub(crate) renewed: Option<usize>,
    /// Rounds in a row that failed (0 after one that succeeded).
    pub(crate) failed_rounds: u32,
}

impl RenewalStatus {
    /// After a round that renewed `renewed` leases (`None`: it failed), at
    /// `at` (pure).
    pub(crate) fn after(self, renewed: Option<usize>, at: At) -> Self {
        RenewalStatus {
            last_round: Some(at),
            renewed: renewed.or(self.renewed),
            failed_rounds: match renewed {
                Some(_) => 0,
                None => self.failed_rounds.saturating_add(1),
            },
        }
    }

    /// The lane's part of `renewals`, with the gate's record of it, seen
    /// from `now` (pure).
    pub(crate) fn render(&self, gate: &LaneRenewals, now: At) -> Value {
        let last_success = gate.last_success.map(|instant| {
            let ago = now.instant.saturating_duration_since(instant);
            let at = jiff::SignedDuration::try_from(ago)
                .ok()
                .and_then(|d| now.wall.checked_sub(d).ok())
                .unwrap_or(now.wall);
            At { instant, wall: at }.render(now)
        });
        json!({
            "enabled": gate.enabled,
            "healthy": gate.healthy(),
            "last_success": last_success,
            "failing": gate.failing.as_deref().map(words),
            "failed_rounds_in_a_row": self.failed_rounds,
            "last_round": self.last_round.map(|t| t.render(now)),
            "renewed_last": self.renewed,
        })
    }
}

/// How many reports wait, read from the report loop after its tick.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Pending {
    /// Reports that failed and wait out their job's back-off.
    pub(crate) backing_off: usize,
    /// Death reports explained and not landed yet.
    pub(crate) deaths: usize,
    /// Lost reports explained and not landed yet.
    pub(crate) lost: usize,
}

/// What the document says of the report loop.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ReportsStatus {
    /// The loop's last tick.
    pub(crate) last_tick: Option<At>,
    /// Whether that tick judged anything (its view was current).
    pub(crate) view_current: bool,
    /// Live Jobs without a pod past the start grace, per lane, as last counted.
    pub(crate) without_pod: PerLane<usize>,
    /// Reports waiting.
    pub(crate) pending: Pending,
    /// Whether the last tick ran out of its budget.
    pub(crate) deferred: bool,
    /// The last report that failed, and when.
    pub(crate) last_error: Option<(FailedReport, At)>,
}

impl ReportsStatus {
    /// After one report tick and what waits after it, at `at` (pure).
    pub(crate) fn after(mut self, tick: &ReportTick, pending: Pending, at: At) -> Self {
        self.last_tick = Some(at);
        self.view_current = tick.view_current;
        if tick.view_current {
            self.without_pod = tick.podless;
        }
        self.pending = pending;
        self.deferred = tick.deferred;
        if let Some(failure) = &tick.last_failure {
            self.last_error = Some((failure.clone(), at));
        }
        self
    }

    /// The `reports` part, seen from `now` (pure).
    pub(crate) fn render(&self, now: At) -> Value {
        let mut without_pod = serde_json::Map::new();
        for (lane, n) in self.without_pod.iter() {
            without_pod.insert(lane.label_value().to_owned(), json!(n));
        }
        let last_error = self.last_error.as_ref().map(|(f, at)| {
            at.render_with(
                now,
                json!({
                    "job_id": f.job_id,
                    "report": f.report.as_str(),
                    "lane": f.report.lane().label_value(),
                    "reason": f.kind.reason().as_str(),
                    "message": words(&f.message),
                }),
            )
        });
        json!({
            "last_tick": self.last_tick.map(|t| t.render(now)),
            "view_current": self.view_current,
            "jobs_without_pod": without_pod,
            "backing_off": self.pending.backing_off,
            "deaths_pending": self.pending.deaths,
            "lost_pending": self.pending.lost,
            "deferred": self.deferred,
            "last_error": last_error,
        })
    }
}

#[derive(Debug, Default)]
struct Inner {
    renewals: PerLane<RenewalStatus>,
    reports: ReportsStatus,
}

/// The lease-keeper's status, recorded from its loops and rendered for the
/// server with the gate's record.
pub(crate) struct KeeperStatus {
    inner: Mutex<Inner>,
    gate: Gate,
    clock: WallClock,
}

impl std::fmt::Debug for KeeperStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeeperStatus").finish_non_exhaustive()
    }
}

impl KeeperStatus {
    /// Nothing recorded yet, beside `gate`; moments read on `clock`.
    pub(crate) fn new(gate: Gate, clock: WallClock) -> Self {
        KeeperStatus {
            inner: Mutex::new(Inner::default()),
            gate,
            clock,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records one renewal round of `lane`: `renewed` leases, `None` when it
    /// failed.
    pub(crate) fn record_round(&self, lane: Lane, renewed: Option<usize>) {
        let at = At::now(&self.clock);
        let mut inner = self.lock();
        let status = &mut inner.renewals[lane];
        *status = status.clone().after(renewed, at);
    }

    /// Records one report tick and what waits after it.
    pub(crate) fn record_reports(&self, tick: &ReportTick, pending: Pending) {
        let at = At::now(&self.clock);
        let mut inner = self.lock();
        inner.reports = std::mem::take(&mut inner.reports).after(tick, pending, at);
    }

    /// The lease-keeper's own fields: `renewals` by lane, `reports`.
    pub(crate) fn render(&self) -> Value {
        let now = At::now(&self.clock);
        let inner = self.lock();
        let mut renewals = serde_json::Map::new();
        for (lane, status) in inner.renewals.iter() {
            let gate = self.gate.lane(lane);
            renewals.insert(lane.label_value().to_owned(), status.render(&gate, now));
        }
        json!({
            "renewals": renewals,
            "reports": inner.reports.render(now),
        })
    }

    /// The source the server renders `/status` from.
    pub(crate) fn source(self: &Arc<Self>) -> StatusSource {
        let status = Arc::clone(self);
        StatusSource::new(tcab_shared::config::Binary::LeaseKeeper.name(), move || {
            status.render()
        })
        .with_clock(self.clock.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Report;
    use std::time::Duration;
    use tcab_shared::backend::BackendErrorKind;
    use tcab_shared::job_cache::OwnedJobs;
    use tokio::time::Instant;

    fn at(instant: Instant, secs: i64) -> At {
        let base: jiff::Timestamp = "2026-12-07T11:00:00Z".parse().unwrap();
        At {
            instant,
            wall: base + jiff::SignedDuration::from_secs(secs),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn failing_renewals_show_with_their_words_and_count() {
        let gate = Gate::new(true, OwnedJobs::listed([]));
        let t0 = Instant::now();
        gate.succeeded(Lane::Run, t0);
        let ok = RenewalStatus::default().after(Some(3), at(t0, 0));
        tokio::time::advance(Duration::from_secs(4)).await;
        gate.failed(Lane::Run, "POST /jobs/leases answered 500".into());
        let t1 = Instant::now();
        let failed = ok.after(None, at(t1, 4)).after(None, at(t1, 4));
        let doc = failed.render(&gate.lane(Lane::Run), at(t1, 4));
        assert_eq!(doc["enabled"], true);
        assert_eq!(doc["healthy"], false);
        assert_eq!(doc["failing"], "POST /jobs/leases answered 500");
        assert_eq!(doc["failed_rounds_in_a_row"], 2);
        assert_eq!(doc["renewed_last"], 3);
        assert_eq!(doc["last_success"]["seconds_ago"], 4.0);
        assert_eq!(doc["last_success"]["at"], "2026-12-07T11:00:00Z");
        // A round that succeeds resets the count.
        let back = failed.after(Some(0), at(t1, 4));
        assert_eq!(back.failed_rounds, 0);
        assert_eq!(back.renewed, Some(0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_report_keeps_its_job_id_until_another_fails() {
        let t0 = Instant::now();
        let tick = ReportTick {
            view_current: true,
            podless: PerLane::from_fn(|l| usize::from(l == Lane::Run)),
            last_failure: Some(FailedReport {
                report: Report::Lost(Lane::Publish),
                job_id: "pub-3".into(),
                kind: BackendErrorKind::Transport,
                message: "connection refused".into(),
            }),
            ..ReportTick::default()
        };
        let pending = Pending {
            backing_off: 1,
            deaths: 2,
            lost: 0,
        };
        let status = ReportsStatus::default().after(&tick, pending, at(t0, 0));
        tokio::time::advance(Duration::from_secs(3)).await;
        let quiet = ReportTick {
            view_current: false,
            ..ReportTick::default()
        };
        let now = at(Instant::now(), 3);
        let doc = status.after(&quiet, pending, now).render(now);
        assert_eq!(doc["view_current"], false);
        assert_eq!(
            doc["jobs_without_pod"]["run"], 1,
            "kept from the last current tick"
        );
        assert_eq!(doc["backing_off"], 1);
        assert_eq!(doc["deaths_pending"], 2);
        let error = &doc["last_error"];
        assert_eq!(error["job_id"], "pub-3");
        assert_eq!(error["report"], "lost");
        assert_eq!(error["lane"], "publish");
        assert_eq!(error["reason"], "connect");
        assert_eq!(error["seconds_ago"], 3.0);
    }
}
