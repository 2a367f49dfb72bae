//! The kit's mock backend, with the admitter's lanes: two claim queues,
//! per-lane failure modes, and a hold that keeps run claims waiting until
//! released (tcab_testkit::backend).

use tcab_shared::Lane;
use tcab_testkit::backend::Claims;

pub use tcab_testkit::backend::{SERVICE_TOKEN, token_for};

fn claims(lane: Lane) -> Claims {
    match lane {
        Lane::Run => Claims::Run,
        Lane::Publish => Claims::Publish,
    }
}

#[derive(Clone)]
pub struct MockBackend(pub tcab_testkit::backend::MockBackend);

impl std::ops::Deref for MockBackend {
    type Target = tcab_testkit::backend::MockBackend;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl MockBackend {
    pub async fn start() -> Self {
        MockBackend(tcab_testkit::backend::MockBackend::start().await)
    }

    pub fn queue(&self, lane: Lane, n: usize) {
        self.0.queue(claims(lane), n);
    }

    pub fn fail_claims(&self, lane: Lane, status: Option<u16>) {
        self.0.fail_claims(claims(lane), status);
    }

    /// Claim requests received in a lane.
    pub fn requests(&self, lane: Lane) -> u32 {
        self.0.requests(claims(lane))
    }

    /// Jobs handed out in a lane, in order.
    pub fn claimed(&self, lane: Lane) -> Vec<String> {
        self.0.claimed(claims(lane))
    }

    pub fn queued(&self, lane: Lane) -> usize {
        self.0.queued(claims(lane))
    }

    /// Merges `patch` into every job the lane hands out from now on.
    pub fn poison_claims(&self, lane: Lane, patch: Option<serde_json::Value>) {
        self.0.poison_claims(claims(lane), patch);
    }
}
