//! The reaper's status document (`/status`, docs/operations.md): its last
//! tick, the reaps due, the last orphan sweep and what it learned, the job
//! ids whose reap backs off (and until when), the last sandbox reaped and the
//! last error with its job id.
//!
//! Folded from each tick's [`TickReport`] by the pure [`ReaperStatus::after`]
//! and rendered by the pure [`ReaperStatus::render`]; [`StatusCell`] holds
//! it for the server. No decision reads it, and nothing in it carries a
//! token.

use crate::memory::Attempt;
use crate::report::{DeleteOutcome, SweepOutcome, TickReport};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use tcab_shared::WallClock;
use tcab_shared::metrics::StatusSource;
use tcab_shared::metrics::status::{At, remaining, words};
use tokio::time::Instant;

/// The last thing that went wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LastError {
    /// The job id of the sandbox it concerned, when one.
    pub(crate) job_id: Option<String>,
    /// What failed: `delete`, `list`, `sweep`, ...
    pub(crate) step: String,
    /// The error in words, bounded.
    pub(crate) message: String,
    /// When.
    pub(crate) at: At,
}

/// What the document says of the reaper.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ReaperStatus {
    /// The last tick.
    pub(crate) last_tick: Option<At>,
    /// Why the Job view was not trusted at the last tick, when it was not.
    pub(crate) view_not_current: Option<String>,
    /// Job ids with a dead driver whose sandboxes were due at the last tick.
    pub(crate) reaps_due: usize,
    /// The last orphan sweep, what it came to, and when.
    pub(crate) last_sweep: Option<(SweepOutcome, At)>,
    /// Job ids whose reap backs off: until when, after how many failures.
    pub(crate) backing_off: BTreeMap<String, (Instant, u32)>,
    /// The last sandbox reaped (pod, job id) and when.
    pub(crate) last_reaped: Option<(String, String, At)>,
    /// The last error.
    pub(crate) last_error: Option<LastError>,
}

impl ReaperStatus {
    /// The status after one tick's `report`, made `at` (pure).
    pub(crate) fn after(mut self, report: &TickReport, at: At) -> Self {
        self.last_tick = Some(at);
        self.view_not_current = report.view_not_current.clone();
        self.reaps_due = report.due.reap.len();
        if report.sweep != SweepOutcome::NotDue {
            self.last_sweep = Some((report.sweep.clone(), at));
        }
        if let SweepOutcome::BackendFailed(why) = &report.sweep {
            self.last_error = Some(LastError {
                job_id: None,
                step: "sweep".into(),
                message: words(why),
                at,
            });
        }
        for failure in &report.api_errors {
            self.last_error = Some(LastError {
                job_id: None,
                step: format!("{} {}", failure.verb, failure.resource),
                message: words(&failure.message),
                at,
            });
        }
        for delete in &report.deletes {
            match &delete.outcome {
                outcome if outcome.attempt() == Attempt::Done => {
                    self.last_reaped = Some((delete.pod.clone(), delete.job_id.clone(), at));
                }
                DeleteOutcome::Failed { message, .. } => {
                    self.last_error = Some(LastError {
                        job_id: Some(delete.job_id.clone()),
                        step: "delete pods".into(),
                        message: words(&format!("{}: {message}", delete.pod)),
                        at,
                    });
                }
                _ => {}
            }
        }
        for id in &report.completed {
            self.backing_off.remove(id);
        }
        for (id, wait) in &report.backed_off {
            self.backing_off
                .insert(id.clone(), (wait.until, wait.failures));
        }
        // Ids no longer due have nothing left to back off from.
        if report.view_not_current.is_none() {
            self.backing_off
                .retain(|id, _| report.due.reap.contains(id));
        }
        self
    }

    /// The reaper's own fields, seen from `now` (pure).
    pub(crate) fn render(&self, now: At) -> Value {
        let last_sweep = self.last_sweep.as_ref().map(|(outcome, at)| {
            let (driven, error) = match outcome {
                SweepOutcome::Driven(n) => (Some(*n), None),
                SweepOutcome::BackendFailed(why) => (None, Some(words(why))),
                SweepOutcome::NotDue => (None, None),
            };
            at.render_with(now, json!({ "backend_drives": driven, "error": error }))
        });
        let backing_off: Vec<Value> = self
            .backing_off
            .iter()
            .map(|(id, (until, failures))| {
                json!({
                    "job_id": id,
                    "failures": failures,
                    "remaining_seconds": remaining(Some(*until), now).unwrap_or(0.0),
                })
            })
            .collect();
        let last_reaped = self
            .last_reaped
            .as_ref()
            .map(|(pod, job_id, at)| at.render_with(now, json!({ "pod": pod, "job_id": job_id })));
        let last_error = self.last_error.as_ref().map(|e| {
            e.at.render_with(
                now,
                json!({ "job_id": e.job_id, "step": e.step, "message": e.message }),
            )
        });
        json!({
            "last_tick": self.last_tick.map(|t| t.render(now)),
            "view_not_current": self.view_not_current.as_deref().map(words),
            "reaps_due": self.reaps_due,
            "last_sweep": last_sweep,
            "backing_off": backing_off,
            "last_reaped": last_reaped,
            "last_error": last_error,
        })
    }
}

/// The reaper's status, recorded from its loop and rendered for the server.
pub(crate) struct StatusCell {
    status: Mutex<ReaperStatus>,
    clock: WallClock,
}

impl std::fmt::Debug for StatusCell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatusCell").finish_non_exhaustive()
    }
}

impl StatusCell {
    /// Nothing recorded yet; moments read on `clock`.
    pub(crate) fn new(clock: WallClock) -> Self {
        StatusCell {
            status: Mutex::new(ReaperStatus::default()),
            clock,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ReaperStatus> {
        self.status.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records one tick.
    pub(crate) fn record(&self, report: &TickReport) {
        let at = At::now(&self.clock);
        let mut status = self.lock();
        *status = std::mem::take(&mut *status).after(report, at);
    }

    /// The source the server renders `/status` from.
    pub(crate) fn source(self: &Arc<Self>) -> StatusSource {
        let cell = Arc::clone(self);
        StatusSource::new(tcab_shared::config::Binary::Reaper.name(), move || {
            let now = At::now(&cell.clock);
            cell.lock().render(now)
        })
        .with_clock(self.clock.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::Due;
    use crate::plan::DeleteReason;
    use crate::report::DeleteRecord;
    use std::time::Duration;
    use tcab_shared::retry::KeyWait;

    fn at(instant: Instant, secs: i64) -> At {
        let base: jiff::Timestamp = "2026-12-07T11:00:00Z".parse().unwrap();
        At {
            instant,
            wall: base + jiff::SignedDuration::from_secs(secs),
        }
    }

    fn delete(pod: &str, job_id: &str, outcome: DeleteOutcome) -> DeleteRecord {
        DeleteRecord {
            pod: format!("sandboxes/{pod}"),
            job_id: job_id.into(),
            reason: DeleteReason::DriverJobFailed {
                job: format!("tcab-driver-{job_id}-abc"),
            },
            outcome,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_reap_backs_off_with_its_job_id_and_the_sweep_is_kept() {
        let t0 = Instant::now();
        let tick = TickReport {
            due: Due {
                reap: ["a".to_owned(), "b".to_owned()].into(),
                sweep: true,
            },
            completed: ["a".to_owned()].into(),
            backed_off: [(
                "b".to_owned(),
                KeyWait {
                    failures: 1,
                    until: t0 + Duration::from_secs(5),
                },
            )]
            .into(),
            sweep: SweepOutcome::Driven(3),
            deletes: vec![
                delete("sb-a", "a", DeleteOutcome::Deleted),
                delete(
                    "sb-b",
                    "b",
                    DeleteOutcome::Failed {
                        code: Some(403),
                        message: "pods \"sb-b\" is forbidden".into(),
                    },
                ),
            ],
            ..TickReport::default()
        };
        let status = ReaperStatus::default().after(&tick, at(t0, 0));
        tokio::time::advance(Duration::from_secs(2)).await;
        let quiet = TickReport {
            due: Due {
                reap: ["b".to_owned()].into(),
                sweep: false,
            },
            ..TickReport::default()
        };
        let now = at(Instant::now(), 2);
        let doc = status.after(&quiet, now).render(now);
        assert_eq!(doc["reaps_due"], 1);
        assert_eq!(doc["last_sweep"]["backend_drives"], 3);
        assert_eq!(doc["last_sweep"]["seconds_ago"], 2.0);
        assert_eq!(doc["last_reaped"]["pod"], "sandboxes/sb-a");
        assert_eq!(doc["last_reaped"]["job_id"], "a");
        assert_eq!(doc["backing_off"][0]["job_id"], "b");
        assert_eq!(doc["backing_off"][0]["remaining_seconds"], 3.0);
        let error = &doc["last_error"];
        assert_eq!(error["job_id"], "b");
        assert_eq!(error["step"], "delete pods");
        assert!(
            error["message"]
                .as_str()
                .is_some_and(|m| m.contains("forbidden")),
            "{error}"
        );
        // Its reap done, the id no longer backs off.
        let done = TickReport {
            completed: ["b".to_owned()].into(),
            ..TickReport::default()
        };
        let doc = ReaperStatus::default()
            .after(&tick, at(t0, 0))
            .after(&done, now)
            .render(now);
        assert_eq!(doc["backing_off"], json!([]));
    }

    #[test]
    fn a_view_not_trusted_says_why() {
        let report = TickReport {
            view_not_current: Some("the Job watch failed: 503".into()),
            ..TickReport::default()
        };
        let now = at(Instant::now(), 0);
        let doc = ReaperStatus::default().after(&report, now).render(now);
        assert_eq!(doc["view_not_current"], "the Job watch failed: 503");
        assert!(doc["last_sweep"].is_null());
        assert!(doc["last_error"].is_null());
    }
}
