//! The kit's fake Kubernetes API (tcab_testkit::fake_kube), with the
//! admitter's lanes: a Job's kind is its lane, as the admitter classifies it.
//! Faults per lane on create: an error status, a hold until released, a
//! delay, or storing the Job and never answering; reads can be made to fail.
//! It records the highest number of non-terminal Jobs per lane ever present
//! at once.

use serde_json::{Value, json};
use std::collections::BTreeMap;
use tcab_shared::{Lane, names};
use tcab_testkit::fake_kube::is_live;

pub use tcab_testkit::fake_kube::CreateFault;

pub const NAMESPACE: &str = "ns";

fn lane_of(job: &Value) -> Lane {
    let labels: BTreeMap<String, String> =
        serde_json::from_value(job["metadata"]["labels"].clone()).unwrap_or_default();
    let name = job["metadata"]["name"].as_str().unwrap_or_default();
    Lane::classify(&labels, name)
}

fn kind_of(job: &Value) -> String {
    lane_of(job).label_value().to_owned()
}

#[derive(Clone)]
pub struct FakeKube(pub tcab_testkit::fake_kube::FakeKube);

impl std::ops::Deref for FakeKube {
    type Target = tcab_testkit::fake_kube::FakeKube;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl FakeKube {
    pub async fn start() -> Self {
        FakeKube(tcab_testkit::fake_kube::FakeKube::start(kind_of).await)
    }

    pub fn client(&self) -> kube::Client {
        let mut config = kube::Config::new(self.url.parse().unwrap());
        config.default_namespace = NAMESPACE.into();
        tcab_shared::kube_api::client_from(config).unwrap()
    }

    /// Puts a Job there as another admitter would have (labelled, live).
    pub fn seed(&self, lane: Lane, id: &str, claim: &str, managed_by: &str) -> String {
        let name = names::job_name(lane, id, claim);
        let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {
            "name": name, "namespace": NAMESPACE, "uid": format!("uid-{name}"),
            "creationTimestamp": "2026-11-29T17:00:00Z",
            "labels": {names::MANAGED_BY: managed_by, names::JOB_ID: id,
                       names::JOB_KIND: lane.label_value(), names::CLAIM: claim}},
            "spec": {"template": {"spec": {"containers": []}}}, "status": {}});
        self.put_job(job);
        name
    }

    /// Makes every create of `lane` answer this error status.
    pub fn refuse(&self, lane: Lane, refusal: Option<(u16, &str, &str)>) {
        self.fault_creates(
            lane,
            refusal.map(|(code, reason, message)| {
                CreateFault::Refuse(code, reason.into(), message.into())
            }),
        );
    }

    /// Makes every create of `lane` misbehave this way (`None`: answer normally).
    pub fn fault_creates(&self, lane: Lane, fault: Option<CreateFault>) {
        self.0.fault_creates(lane.label_value(), fault);
    }

    /// Makes every read by name answer this error status (`None`: answer normally).
    pub fn fail_reads(&self, failure: Option<(u16, &str, &str)>) {
        self.lock().read_fault =
            failure.map(|(code, reason, message)| (code, reason.into(), message.into()));
    }

    /// Names of the live Jobs of a lane.
    pub fn live(&self, lane: Lane) -> Vec<String> {
        self.jobs(lane)
            .iter()
            .filter(|j| is_live(j))
            .map(|j| j["metadata"]["name"].as_str().unwrap().to_owned())
            .collect()
    }

    /// Every Job of a lane.
    pub fn jobs(&self, lane: Lane) -> Vec<Value> {
        self.jobs_of(lane.label_value())
    }

    /// Create requests received in a lane (answered or not).
    pub fn create_requests(&self, lane: Lane) -> u32 {
        self.lock().create_requests_of(lane.label_value())
    }

    /// Reads by name received.
    pub fn reads(&self) -> u32 {
        self.lock().reads
    }

    /// Create requests answered 201 in a lane.
    pub fn creates(&self, lane: Lane) -> u32 {
        self.lock().creates_of(lane.label_value())
    }

    /// The most non-terminal Jobs of a lane ever present at once.
    pub fn max_live(&self, lane: Lane) -> usize {
        self.lock().max_live_of(lane.label_value())
    }
}

/// The Jobs API of the fake's namespace.
pub fn jobs_api(kube: &FakeKube) -> kube::Api<k8s_openapi::api::batch::v1::Job> {
    kube::Api::namespaced(kube.client(), NAMESPACE)
}
