//! The lease-keeper's cluster reads and its one write: a Job's pods and
//! their log tail (the evidence of a death), the owned Jobs of one
//! backend job (to confirm a view that does not show any), the Job
//! controller's refusals to create pods (`FailedCreate` Events), and
//! deleting a Job whose pod can never start. Every call is bounded by the
//! API timeout.

use crate::cause::LogTail;
use crate::plan::refusals::Refusal;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{DeleteParams, ListParams, LogParams, PropagationPolicy};
use kube::{Api, Client, ResourceExt};
use std::time::Duration;
use tcab_shared::Lane;
use tcab_shared::error_chain;
use tcab_shared::job_cache::JobSummary;
use tcab_shared::kube_api::{CallError, KubeCall, call};
use tcab_shared::names;

/// Reads (and deletes) owned Jobs and their pods in one namespace.
#[derive(Clone)]
pub struct Inspector {
    jobs: Api<Job>,
    pods: Api<Pod>,
    events: Api<Event>,
    managed_by: String,
    tail_lines: i64,
    timeout: Duration,
}

impl Inspector {
    /// An inspector of `namespace`, reading at most `tail_lines` log lines,
    /// each call bounded by `timeout`.
    pub fn new(
        client: Client,
        namespace: &str,
        managed_by: &str,
        tail_lines: i64,
        timeout: Duration,
    ) -> Self {
        Inspector {
            jobs: Api::namespaced(client.clone(), namespace),
            pods: Api::namespaced(client.clone(), namespace),
            events: Api::namespaced(client, namespace),
            managed_by: managed_by.to_owned(),
            tail_lines,
            timeout,
        }
    }

    /// The newest pod of `job_name`, if it has one.
    pub async fn newest_pod(&self, job_name: &str) -> Result<Option<Pod>, CallError> {
        let params = ListParams::default().labels(&names::selector(names::JOB_NAME, job_name));
        let pods = call(KubeCall::ListPods, self.timeout, self.pods.list(&params)).await?;
        Ok(newest(pods.items))
    }

    /// The last lines of the pod's main container, or why they cannot be read.
    pub async fn log_tail(&self, pod: &Pod, lane: Lane) -> LogTail {
        let wanted = lane.container();
        let containers = pod
            .spec
            .as_ref()
            .map(|s| s.containers.as_slice())
            .unwrap_or_default();
        let container = containers
            .iter()
            .find(|c| c.name == wanted)
            .or_else(|| containers.first())
            .map(|c| c.name.clone());
        let params = LogParams {
            container,
            tail_lines: Some(self.tail_lines),
            ..LogParams::default()
        };
        let name = pod.name_any();
        match call(
            KubeCall::GetPodLog,
            self.timeout,
            self.pods.logs(&name, &params),
        )
        .await
        {
            Ok(text) => LogTail::Read(text),
            // The pod, or the Node whose kubelet serves its log.
            Err(error) if error.is_not_found() => LogTail::Gone(format!(
                "pod {name} or its node was gone before its log could be read ({})",
                log_error(&error)
            )),
            Err(error) => LogTail::Unreadable(log_error(&error)),
        }
    }

    /// The names of the live owned Jobs of one backend job, read from the
    /// API (not the view): the check before a job is reported lost because
    /// the view shows no Job for it.
    pub async fn live_jobs_of(&self, job_id: &str) -> Result<Vec<String>, CallError> {
        let selector = format!(
            "{},{}",
            names::selector(names::MANAGED_BY, &self.managed_by),
            names::selector(names::JOB_ID, job_id)
        );
        let list = call(
            KubeCall::ListJobs,
            self.timeout,
            self.jobs.list(&ListParams::default().labels(&selector)),
        )
        .await?;
        let mut live: Vec<String> = list
            .items
            .iter()
            .map(JobSummary::from_job)
            .filter(JobSummary::is_live)
            .map(|j| j.name().into())
            .collect();
        live.sort();
        Ok(live)
    }

    /// The Job controller's refusals to create a pod in the namespace: its
    /// `FailedCreate` Warning Events about Jobs, one list selected on the
    /// server by reason and kind (whatever Jobs they are about: the caller
    /// matches them to its own by uid).
    pub(crate) async fn refusals(&self) -> Result<Vec<Refusal>, CallError> {
        let params = ListParams::default()
            .fields("involvedObject.kind=Job,reason=FailedCreate,type=Warning");
        let list = call(
            KubeCall::ListEvents,
            self.timeout,
            self.events.list(&params),
        )
        .await?;
        Ok(list.items.iter().filter_map(Refusal::of_event).collect())
    }

    /// Deletes a Job and its pods (propagation Background). A Job already
    /// gone is not an error.
    pub async fn delete_job(&self, name: &str) -> Result<(), CallError> {
        let params = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Background),
            ..DeleteParams::default()
        };
        match call(
            KubeCall::DeleteJob,
            self.timeout,
            self.jobs.delete(name, &params),
        )
        .await
        {
            Ok(_) => Ok(()),
            Err(error) if error.is_not_found() => Ok(()),
            Err(error) => Err(error),
        }
    }
}

/// Why a log read failed, for a person: the API server's message and its
/// HTTP status (the kubelet's own error is inside the message), or the
/// client's error chain.
fn log_error(error: &CallError) -> String {
    match error {
        CallError::Kube(kube::Error::Api(status)) if !status.message.trim().is_empty() => {
            format!("{} (HTTP {})", status.message.trim(), status.code)
        }
        other => error_chain(other),
    }
}

/// The most recently created pod (ties: the greatest name), if any.
pub fn newest(mut pods: Vec<Pod>) -> Option<Pod> {
    pods.sort_by(|a, b| {
        let at = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
        at(a)
            .cmp(&at(b))
            .then_with(|| a.name_any().cmp(&b.name_any()))
    });
    pods.pop()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, created: &str) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": name, "creationTimestamp": created}}))
            .unwrap()
    }

    #[test]
    fn a_failed_log_read_reads_as_the_api_servers_message() {
        let status = kube::core::Status::failure(
            "Get \"https://10.0.0.10:10250/containerLogs/ns/p/driver\": dial tcp 10.0.0.10:10250: connect: no route to host",
            "InternalError",
        )
        .with_code(500)
        .boxed();
        assert_eq!(
            log_error(&CallError::Kube(kube::Error::Api(status))),
            "Get \"https://10.0.0.10:10250/containerLogs/ns/p/driver\": dial tcp 10.0.0.10:10250: connect: no route to host (HTTP 500)"
        );
        let timeout = CallError::TimedOut(Duration::from_secs(15));
        assert_eq!(log_error(&timeout), timeout.to_string());
    }

    #[test]
    fn the_newest_pod_is_read() {
        let pods = vec![
            pod("b", "2026-11-29T17:00:00Z"),
            pod("c", "2026-11-29T17:05:00Z"),
            pod("a", "2026-11-29T17:05:00Z"),
        ];
        assert_eq!(newest(pods).unwrap().name_any(), "c");
        assert!(newest(Vec::new()).is_none());
    }
}
