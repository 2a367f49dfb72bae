//! What the admitter reads from its configuration ([`AdmitterSettings`]):
//! the lanes' caps, the gate's bound, the settle's limits. Each lane, the
//! metrics and the loop read it; it depends on none of them.

use crate::config::AdmitterConfig;
use crate::job_builder::JobSettings;
use crate::settle::SettleLimits;
use std::time::Duration;
use tcab_shared::Lane;

/// Calls (creates and reads) one settle of a create may make: enough for
/// three unclear creates, each read back, and a fourth create.
pub(crate) const SETTLE_CALLS: u32 = 8;

/// Pause before the first create sent again in a settle (doubled after).
pub(crate) const SETTLE_PAUSE: Duration = Duration::from_millis(100);

/// What the admitter reads from its configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct AdmitterSettings {
    /// The run lane's cap.
    pub max_inflight: u32,
    /// The publish lane's cap.
    pub max_publish_inflight: u32,
    /// How old the lease-keeper's last successful renewal of a lane may be.
    pub gate_max_age: Duration,
    /// The poll interval; also how long a lane waits after a failed or an
    /// empty claim before it claims again.
    pub poll_interval: Duration,
    /// Bound of each Kubernetes call (create, read).
    pub kube_timeout: Duration,
    /// The lease the backend grants a claim: no Job is created for a claim
    /// older than half of it, and nothing unseen is counted longer than it.
    pub lease_length: Duration,
    /// Calls one settle may make (`SETTLE_CALLS`).
    pub settle_calls: u32,
    /// Pause before a create is sent again (`SETTLE_PAUSE`).
    pub settle_pause: Duration,
    /// What the Job builders read (the publisher image opens the publish lane).
    pub jobs: JobSettings,
}

impl AdmitterSettings {
    /// The settings of a loaded configuration.
    pub fn from_config(config: &AdmitterConfig) -> Self {
        AdmitterSettings {
            max_inflight: config.max_inflight,
            max_publish_inflight: config.max_publish_inflight,
            gate_max_age: config.gate_max_age,
            poll_interval: config.common.poll_interval,
            kube_timeout: config.common.kube_timeout,
            lease_length: config.lease_length,
            settle_calls: SETTLE_CALLS,
            settle_pause: SETTLE_PAUSE,
            jobs: config.jobs.clone(),
        }
    }

    /// The cap of a lane.
    pub fn cap(&self, lane: Lane) -> u32 {
        match lane {
            Lane::Run => self.max_inflight,
            Lane::Publish => self.max_publish_inflight,
        }
    }

    /// Whether a lane is configured (publish: a publisher image is set).
    pub fn enabled(&self, lane: Lane) -> bool {
        match lane {
            Lane::Run => true,
            Lane::Publish => self.jobs.publisher_image.is_some(),
        }
    }

    /// The bounds of one settle: no create for a claim older than half the lease.
    pub fn settle_limits(&self) -> SettleLimits {
        SettleLimits {
            max_calls: self.settle_calls,
            claim_max_age: self.lease_length / 2,
            pause: self.settle_pause,
        }
    }

    /// How long a Job known to exist (or a creation unsettled) is counted
    /// without the watch showing it: one lease.
    pub fn unseen_ttl(&self) -> Duration {
        self.lease_length
    }
}
