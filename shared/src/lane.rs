//! The two admission lanes, runs and publishes, and how a Job is told to be
//! in one or the other.
//!
//! What differs between lanes as constants (label value, container name, Job
//! name prefix, backend paths) is one [`LaneSpec`] per lane, in one table
//! ([`Lane::spec`]); per-lane state is a [`PerLane`]. A new lane is a new
//! variant, a new row of that table and a new entry in [`Lane::ALL`].

mod per_lane;

pub use per_lane::PerLane;

use crate::backend::error::Call;
use crate::metrics::labels::LoopName;
use crate::names::{
    DRIVER_CONTAINER, DRIVER_PREFIX, JOB_KIND, PUBLISHER_CONTAINER, PUBLISHER_PREFIX,
};
use std::collections::BTreeMap;
use std::fmt;

/// An admission lane. Each has its own backend queue, in-flight count and cap.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Lane {
    /// Runs, executed by driver Jobs.
    #[default]
    Run,
    /// Publishes, executed by publisher Jobs.
    Publish,
}

/// The constants of one lane: how its Jobs are named and labelled, and the
/// backend calls that serve it.
#[derive(Debug, PartialEq, Eq)]
pub struct LaneSpec {
    /// The value of the `tcab.dev/job-kind` label (and of the `lane`
    /// metric label).
    pub label_value: &'static str,
    /// What the lane is, for the metrics documentation.
    pub meaning: &'static str,
    /// The `loop` metric label of the admitter's loop of this lane.
    pub admit_loop: LoopName,
    /// What a Job of this lane is called in messages: `driver`, `publisher`.
    pub worker: &'static str,
    /// The name of the container that does this lane's work.
    pub container: &'static str,
    /// What the worker hands the backend when it ends: `report`, `result`.
    pub final_word: &'static str,
    /// What a claimed job of this lane carries for its Job to do:
    /// `launch request`, `publish request`.
    pub request: &'static str,
    /// The prefix of this lane's Job names.
    pub name_prefix: &'static str,
    /// The backend call that claims the next job of this lane, and its path.
    pub claim_call: Call,
    pub claim_path: &'static str,
    /// The key of the claimed job in a claim's answer.
    pub claim_key: &'static str,
    /// The backend call that renews this lane's leases, and its path.
    pub leases_call: Call,
    pub leases_path: &'static str,
    /// The backend call that lists this lane's driven jobs, and its path.
    pub active_call: Call,
    pub active_path: &'static str,
    /// The backend call that reports a job of this lane lost; its path is
    /// `{jobs_path}/{id}/lost`.
    pub lost_call: Call,
    /// The backend's collection of this lane's jobs: `/jobs`, `/publish-jobs`.
    pub jobs_path: &'static str,
}

const RUN: LaneSpec = LaneSpec {
    label_value: "run",
    meaning: "runs, executed by driver Jobs",
    admit_loop: LoopName::AdmitRun,
    worker: "driver",
    container: DRIVER_CONTAINER,
    final_word: "report",
    request: "launch request",
    name_prefix: DRIVER_PREFIX,
    claim_call: "POST /jobs/next",
    claim_path: "/jobs/next",
    claim_key: "job",
    leases_call: "POST /jobs/leases",
    leases_path: "/jobs/leases",
    active_call: "GET /jobs/active",
    active_path: "/jobs/active",
    lost_call: "POST /jobs/{id}/lost",
    jobs_path: "/jobs",
};

const PUBLISH: LaneSpec = LaneSpec {
    label_value: "publish",
    meaning: "publishes, executed by publisher Jobs",
    admit_loop: LoopName::AdmitPublish,
    worker: "publisher",
    container: PUBLISHER_CONTAINER,
    final_word: "result",
    request: "publish request",
    name_prefix: PUBLISHER_PREFIX,
    claim_call: "POST /publish-jobs/next",
    claim_path: "/publish-jobs/next",
    claim_key: "publish_job",
    leases_call: "POST /publish-jobs/leases",
    leases_path: "/publish-jobs/leases",
    active_call: "GET /publish-jobs/active",
    active_path: "/publish-jobs/active",
    lost_call: "POST /publish-jobs/{id}/lost",
    jobs_path: "/publish-jobs",
};

impl Lane {
    /// Both lanes, in a fixed order (the order of [`PerLane`]'s slots).
    pub const ALL: [Lane; 2] = [Lane::Run, Lane::Publish];

    /// This lane's constants: the one table of what differs between lanes.
    pub const fn spec(self) -> &'static LaneSpec {
        match self {
            Lane::Run => &RUN,
            Lane::Publish => &PUBLISH,
        }
    }

    /// The value of the `tcab.dev/job-kind` label.
    pub fn label_value(self) -> &'static str {
        self.spec().label_value
    }

    /// The prefix of this lane's Job names.
    pub fn name_prefix(self) -> &'static str {
        self.spec().name_prefix
    }

    /// What a Job of this lane is called in messages: `driver`, `publisher`.
    pub fn worker(self) -> &'static str {
        self.spec().worker
    }

    /// The name of the container that does this lane's work.
    pub fn container(self) -> &'static str {
        self.spec().container
    }

    /// Classifies a Job by its `tcab.dev/job-kind` label, else by its name:
    /// a Job without the label (or with a value no lane has) is of the lane
    /// whose name prefix its name starts with (`tcab-publisher-`: a
    /// publish), and a run otherwise.
    pub fn classify(labels: &BTreeMap<String, String>, name: &str) -> Lane {
        let labelled = labels.get(JOB_KIND).and_then(|value| {
            Lane::ALL
                .into_iter()
                .find(|lane| lane.label_value() == value)
        });
        labelled
            .or_else(|| {
                Lane::ALL
                    .into_iter()
                    .find(|lane| name.starts_with(lane.name_prefix()))
            })
            .unwrap_or(Lane::Run)
    }
}

impl fmt::Display for Lane {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label_value())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lane_classification() {
        let mut labels = BTreeMap::new();
        assert_eq!(Lane::classify(&labels, "tcab-publisher-x-1"), Lane::Publish);
        assert_eq!(Lane::classify(&labels, "tcab-driver-x-1"), Lane::Run);
        assert_eq!(Lane::classify(&labels, "anything"), Lane::Run);
        labels.insert(JOB_KIND.into(), "run".into());
        assert_eq!(Lane::classify(&labels, "tcab-publisher-x-1"), Lane::Run);
        labels.insert(JOB_KIND.into(), "publish".into());
        assert_eq!(Lane::classify(&labels, "tcab-driver-x-1"), Lane::Publish);
        labels.insert(JOB_KIND.into(), "odd".into());
        assert_eq!(Lane::classify(&labels, "tcab-publisher-x-1"), Lane::Publish);
        assert_eq!(Lane::classify(&labels, "tcab-driver-x-1"), Lane::Run);
    }

    #[test]
    fn the_table_keeps_the_constants_each_lane_had() {
        assert_eq!(Lane::Run.label_value(), "run");
        assert_eq!(Lane::Publish.label_value(), "publish");
        assert_eq!(Lane::Run.worker(), "driver");
        assert_eq!(Lane::Publish.worker(), "publisher");
        assert_eq!(Lane::Run.container(), "driver");
        assert_eq!(Lane::Publish.container(), "publisher");
        assert_eq!(Lane::Run.name_prefix(), "tcab-driver-");
        assert_eq!(Lane::Publish.name_prefix(), "tcab-publisher-");
        for lane in Lane::ALL {
            let spec = lane.spec();
            assert_eq!(spec.claim_path, format!("{}/next", spec.jobs_path));
            assert_eq!(spec.leases_path, format!("{}/leases", spec.jobs_path));
            assert_eq!(spec.active_path, format!("{}/active", spec.jobs_path));
            assert_eq!(spec.claim_call, format!("POST {}", spec.claim_path));
            assert_eq!(spec.leases_call, format!("POST {}", spec.leases_path));
            assert_eq!(spec.active_call, format!("GET {}", spec.active_path));
            assert_eq!(
                spec.lost_call,
                format!("POST {}/{{id}}/lost", spec.jobs_path)
            );
        }
    }
}
