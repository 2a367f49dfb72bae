//! The lease-keeper's test doubles: the kit's mock backend and fake
//! Kubernetes API with its typed helpers, the Job and pod objects it reads,
//! and its configuration.
#![allow(dead_code)]

use serde_json::{Value, json};
use std::time::Duration;
use tcab_lease_keeper::LeaseKeeperConfig;
use tcab_shared::Secret;
use tcab_shared::backend::client::RetryPolicy;
use tcab_shared::backend::{BackendClient, JobState};
use tcab_shared::config::{BackendConfig, CommonConfig, LogFormat};

pub use tcab_testkit::backend::SERVICE_TOKEN;
pub const NS: &str = "ns";

/// The wall clock of the tests: a minute after the Jobs of [`job_json`]
/// were created, so none of them is past the start grace by age.
pub fn test_clock() -> tcab_shared::WallClock {
    tcab_shared::WallClock::fixed("2026-11-29T17:00:00Z".parse().expect("a timestamp"))
}

// ---------------------------------------------------------------- backend

/// The kit's mock backend, with the lease-keeper's typed helpers; the rest
/// (its state, clock and routes) is the kit's.
#[derive(Clone)]
pub struct MockBackend(pub tcab_testkit::backend::MockBackend);

impl std::ops::Deref for MockBackend {
    type Target = tcab_testkit::backend::MockBackend;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

/// A state as the mock holds it (its wire spelling), typed.
pub fn job_state(wire: &str) -> JobState {
    serde_json::from_value(Value::from(wire)).expect("a job state")
}

impl MockBackend {
    pub async fn start() -> Self {
        MockBackend(tcab_testkit::backend::MockBackend::start().await)
    }

    pub fn client(&self) -> BackendClient {
        BackendClient::new(
            &self.url,
            Secret::new(SERVICE_TOKEN),
            Duration::from_secs(5),
        )
        .unwrap()
        .with_retry_policy(RetryPolicy {
            max_retries: 0,
            max_wait: Duration::ZERO,
            default_wait: Duration::ZERO,
        })
    }

    /// A run claimed now, in `state`, with the claim's lease.
    pub fn add_run(&self, id: &str, state: JobState, token: &str) {
        self.0.add_run_row(id, state.as_str(), token);
    }

    pub fn add_publish(&self, id: &str, token: &str) {
        self.0.add_publish_row(id, token);
    }

    pub fn state_of(&self, id: &str) -> JobState {
        job_state(&self.0.row_state(id))
    }
}

// ---------------------------------------------------------------- kube

/// The kit's fake Kubernetes API (Jobs, pods and their logs, a first list
/// that can be held), with the lease-keeper's client.
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
        FakeKube(
            tcab_testkit::fake_kube::FakeKube::start(|job| {
                job["metadata"]["labels"]["tcab.dev/job-kind"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            })
            .await,
        )
    }

    pub fn client(&self) -> kube::Client {
        let mut config = kube::Config::new(self.url.parse().unwrap());
        config.default_namespace = NS.into();
        tcab_shared::kube_api::client_from(config).unwrap()
    }
}

// ---------------------------------------------------------------- objects

pub fn job_json(name: &str, id: &str, claim: &str, kind: &str, status: Value) -> Value {
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": NS, "resourceVersion": "1",
            "creationTimestamp": "2026-11-29T16:59:00Z",
            "labels": {"app.kubernetes.io/managed-by": "tcab-dispatcher", "tcab.dev/job-id": id,
                       "tcab.dev/claim": claim, "tcab.dev/job-kind": kind}},
        "spec": {"template": {"spec": {"containers": [{"name": "driver", "image": "driver"}], "restartPolicy": "Never"}}},
        "status": status,
    })
}

pub fn live_status() -> Value {
    json!({"active": 1})
}

/// A Job bound to fail whose pod still terminates (Kubernetes 1.31+).
pub fn failure_target_status() -> Value {
    json!({"failed": 1, "terminating": 1, "conditions": [
        {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}]})
}

pub fn failed_status(failed: i32) -> Value {
    json!({"failed": failed, "conditions": [
        {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded"},
        {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}]})
}

pub fn complete_status() -> Value {
    json!({"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]})
}

pub fn pod_json(job_name: &str, status: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("{job_name}-abcde"), "namespace": NS,
            "creationTimestamp": "2026-11-29T16:59:01Z",
            "labels": {"job-name": job_name}},
        "spec": {"containers": [{"name": "driver", "image": "driver"}], "restartPolicy": "Never"},
        "status": status,
    })
}

pub fn oom_pod_status() -> Value {
    json!({"phase": "Failed", "containerStatuses": [{"name": "driver", "image": "driver", "imageID": "", "ready": false,
        "restartCount": 0, "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]})
}

pub fn evicted_pod_status() -> Value {
    json!({"phase": "Failed",
        "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI", "message": "Eviction API: evicting"}],
        "containerStatuses": [{"name": "driver", "image": "driver", "imageID": "", "ready": false,
        "restartCount": 0, "state": {"terminated": {"exitCode": 143, "reason": "Error"}}}]})
}

// ---------------------------------------------------------------- config

pub fn config(publishing: bool, poll: Duration) -> LeaseKeeperConfig {
    LeaseKeeperConfig {
        common: CommonConfig {
            namespace: Some(NS.into()),
            managed_by: "tcab-dispatcher".into(),
            poll_interval: poll,
            log_format: LogFormat::Text,
            vault_addr: "127.0.0.1:0".parse().unwrap(),
            kube_timeout: Duration::from_secs(5),
            watch_timeout: Duration::from_secs(60),
            metrics_addr: None,
        },
        backend: BackendConfig {
            url: String::new(),
            service_token: Secret::new(SERVICE_TOKEN),
            timeout: Duration::from_secs(5),
        },
        publishing,
        vault_allow_non_loopback: false,
        lease_length: Duration::from_secs(120),
        log_tail_lines: 3,
        start_grace: Duration::from_secs(300),
        unschedulable_grace: Duration::from_secs(1800),
        terminating_margin: Duration::from_secs(60),
    }
}
