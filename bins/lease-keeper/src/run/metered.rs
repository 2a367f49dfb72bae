//! The two loops as the supervisor runs them: each pass recorded into the
//! lease-keeper's metrics at the loop's edge.

use super::renewals::Renewer;
use super::reports::Reporter;
use crate::metrics::KeeperMetrics;
use std::sync::Arc;
use tcab_shared::tick::{Tick, TickOutcome};

/// The renewal loop, recording each round.
pub(super) struct MeteredRenewer {
    renewer: Renewer,
    metrics: Arc<KeeperMetrics>,
    publishing: bool,
}

impl MeteredRenewer {
    /// `renewer`, recording into `metrics`; `publishing` says whether the
    /// publish lane is renewed.
    pub(super) fn new(renewer: Renewer, metrics: Arc<KeeperMetrics>, publishing: bool) -> Self {
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
pub(super) struct MeteredReporter {
    reporter: Reporter,
    metrics: Arc<KeeperMetrics>,
}

impl MeteredReporter {
    /// `reporter`, recording into `metrics`.
    pub(super) fn new(reporter: Reporter, metrics: Arc<KeeperMetrics>) -> Self {
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
