//! The reaper's own metrics (docs/metrics.md): sandbox pods deleted, by why,
//! and dead drivers' job ids with sandboxes of another managed-by value,
//! recorded from each tick's report at the loop's edge. Its Kubernetes API
//! errors are counted where every call is made (`kube_api::call`).

use crate::report::TickReport;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use tcab_shared::metrics::labels::{LabelValue, LoopName, ReapReason};
use tcab_shared::metrics::{Labels, zero};

/// The `loop` label of the reaper's loop.
pub(crate) const REAP_LOOP: &str = LoopName::Reap.as_str();

/// The reaper's metric families.
#[derive(Debug)]
pub(crate) struct ReaperMetrics {
    reaped: Family<Labels<1>, Counter>,
    mismatches: Counter,
}

impl Default for ReaperMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl ReaperMetrics {
    /// The families, each reason's count at 0.
    pub(crate) fn new() -> Self {
        let metrics = ReaperMetrics {
            reaped: Family::default(),
            mismatches: Counter::default(),
        };
        zero(
            &metrics.reaped,
            ReapReason::ALL.iter().map(|r| [("reason", r.as_str())]),
        );
        metrics
    }

    /// Registers the families (shared, not copied).
    pub(crate) fn register(&self, registry: &mut Registry) {
        registry.register(
            "tcab_dispatcher_sandboxes_reaped",
            "Sandbox pods deleted, by why",
            self.reaped.clone(),
        );
        registry.register(
            "tcab_dispatcher_sandbox_mismatches",
            "Job ids of dead drivers whose sandbox pods carry another managed-by value than the driver's (left alone), each counted once",
            self.mismatches.clone(),
        );
    }

    /// Records one tick: each sandbox it deleted (one already gone counts:
    /// the reap is done) under its reason.
    pub(crate) fn record(&self, report: &TickReport) {
        self.mismatches
            .inc_by(u64::try_from(report.mismatches.len()).unwrap_or(u64::MAX));
        for kind in report.reaped() {
            self.reaped
                .get_or_create(&[("reason", kind.as_str())])
                .inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::DeleteReason;
    use crate::report::{DeleteOutcome, DeleteRecord, SkipReason};
    use tcab_shared::metrics::{Common, Exporter};

    fn record(reason: DeleteReason, outcome: DeleteOutcome) -> DeleteRecord {
        DeleteRecord {
            pod: "tcab/sandbox".into(),
            job_id: "a".into(),
            reason,
            outcome,
        }
    }

    #[test]
    fn deleted_sandboxes_count_by_reason() {
        let metrics = ReaperMetrics::new();
        let mut exporter = Exporter::new(&Common::new());
        metrics.register(exporter.registry_mut());
        let failed = || DeleteReason::DriverJobFailed {
            job: "tcab-driver-a-1".into(),
        };
        let report = TickReport {
            deletes: vec![
                record(failed(), DeleteOutcome::Deleted),
                record(failed(), DeleteOutcome::AlreadyGone),
                record(failed(), DeleteOutcome::Changed),
                record(
                    failed(),
                    DeleteOutcome::Failed {
                        code: Some(403),
                        message: "forbidden".into(),
                    },
                ),
                record(failed(), DeleteOutcome::Skipped(SkipReason::ViewNotCurrent)),
                record(
                    DeleteReason::Orphan {
                        age: jiff::SignedDuration::from_secs(700),
                    },
                    DeleteOutcome::Deleted,
                ),
            ],
            ..TickReport::default()
        };
        metrics.record(&report);
        let text = exporter.encode();
        assert!(
            text.lines()
                .any(|l| l == r#"tcab_dispatcher_sandboxes_reaped_total{reason="driver_failed"} 2"#),
            "{text}"
        );
        assert!(
            text.lines()
                .any(|l| l == r#"tcab_dispatcher_sandboxes_reaped_total{reason="orphan"} 1"#),
            "{text}"
        );
        assert!(text.contains("# TYPE tcab_dispatcher_sandboxes_reaped_total counter"));
        assert!(
            text.lines()
                .any(|l| l == "tcab_dispatcher_sandbox_mismatches_total 0"),
            "{text}"
        );
    }
}
