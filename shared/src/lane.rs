//! The two admission lanes, runs and publishes, and how a Job is told to be
//! in one or the other.

use crate::names::{DRIVER_PREFIX, JOB_KIND, PUBLISHER_PREFIX};
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

impl Lane {
    /// Both lanes, in a fixed order.
    pub const ALL: [Lane; 2] = [Lane::Run, Lane::Publish];

    /// The value of the `tcab.dev/job-kind` label.
    pub fn label_value(self) -> &'static str {
        match self {
            Lane::Run => "run",
            Lane::Publish => "publish",
        }
    }

    /// The prefix of this lane's Job names.
    pub fn name_prefix(self) -> &'static str {
        match self {
            Lane::Run => DRIVER_PREFIX,
            Lane::Publish => PUBLISHER_PREFIX,
        }
    }

    /// Classifies a Job by its `tcab.dev/job-kind` label, else by its name:
    /// a Job without the label is a publish when its name starts with
    /// `tcab-publisher-`, and a run otherwise.
    pub fn classify(labels: &BTreeMap<String, String>, name: &str) -> Lane {
        match labels.get(JOB_KIND).map(String::as_str) {
            Some("run") => Lane::Run,
            Some("publish") => Lane::Publish,
            _ if name.starts_with(PUBLISHER_PREFIX) => Lane::Publish,
            _ => Lane::Run,
        }
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
    }
}
