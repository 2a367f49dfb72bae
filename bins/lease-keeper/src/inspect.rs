//! Reads what the cluster shows about a finished Job: the full Job, its pod
//! (by the `job-name` label) and the tail of that pod's log, turned into the
//! shared death cause and detail.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, LogParams};
use kube::{Api, Client, ResourceExt};
use tcab_shared::Lane;
use tcab_shared::death::{death_cause, death_detail};
use tcab_shared::job_builder::{DRIVER_CONTAINER, PUBLISHER_CONTAINER};
use tcab_shared::labels;

/// What a dead Job shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeathEvidence {
    /// One line: the death cause (e.g. "container driver OOMKilled (exit code 137)").
    pub summary: String,
    /// The summary and the pod's log tail, bounded: the report's detail.
    pub detail: String,
}

/// A cluster read failed; the caller retries on a later tick.
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    /// Reading the Job failed.
    #[error("cannot read Job {job_name}")]
    GetJob {
        /// The Job.
        job_name: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// Listing the Job's pods failed.
    #[error("cannot list the pods of Job {job_name}")]
    ListPods {
        /// The Job.
        job_name: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
}

/// How long a death report waits for a dead pod's log before going without it.
pub const LOG_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Reads dead Jobs in one namespace.
#[derive(Clone)]
pub struct Inspector {
    jobs: Api<Job>,
    pods: Api<Pod>,
    tail_lines: i64,
}

impl Inspector {
    /// An inspector of `namespace`, reading at most `tail_lines` log lines.
    pub fn new(client: Client, namespace: &str, tail_lines: i64) -> Self {
        Inspector {
            jobs: Api::namespaced(client.clone(), namespace),
            pods: Api::namespaced(client, namespace),
            tail_lines,
        }
    }

    /// The death cause and detail of `job_name`. A Job already deleted is
    /// evidence too ("failed, and its Job was deleted"); a missing log is
    /// left out of the detail.
    pub async fn evidence(
        &self,
        job_name: &str,
        lane: Lane,
    ) -> Result<DeathEvidence, InspectError> {
        let job = self
            .jobs
            .get_opt(job_name)
            .await
            .map_err(|source| InspectError::GetJob {
                job_name: job_name.to_owned(),
                source,
            })?;
        let Some(job) = job else {
            let summary =
                format!("Job {job_name} failed and was deleted before its pod could be read");
            return Ok(DeathEvidence {
                detail: summary.clone(),
                summary,
            });
        };
        let params = ListParams::default().labels(&labels::selector(labels::JOB_NAME, job_name));
        let pods = self
            .pods
            .list(&params)
            .await
            .map_err(|source| InspectError::ListPods {
                job_name: job_name.to_owned(),
                source,
            })?;
        let pod = newest(pods.items);
        let cause = death_cause(&job, pod.as_ref());
        let tail = match &pod {
            Some(pod) => self.log_tail(pod, lane).await,
            None => None,
        };
        Ok(DeathEvidence {
            summary: cause.summary(),
            detail: death_detail(&cause, tail.as_deref()),
        })
    }

    /// The last lines of the pod's main container, if they can be read.
    async fn log_tail(&self, pod: &Pod, lane: Lane) -> Option<String> {
        let wanted = match lane {
            Lane::Run => DRIVER_CONTAINER,
            Lane::Publish => PUBLISHER_CONTAINER,
        };
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
        // Logs are read through the pod's kubelet; a dead node's kubelet may
        // not answer for minutes, and renewals must not wait on it.
        let read = tokio::time::timeout(LOG_READ_TIMEOUT, self.pods.logs(&name, &params)).await;
        let Ok(read) = read else {
            tracing::debug!(pod = %name, timeout_s = LOG_READ_TIMEOUT.as_secs(), "pod log read timed out; reporting without it");
            return None;
        };
        match read {
            Ok(text) => Some(text),
            Err(error) => {
                tracing::debug!(pod = %name, %error, "pod log unavailable; reporting without it");
                None
            }
        }
    }
}

/// The most recently created pod (ties: the greatest name), if any.
fn newest(mut pods: Vec<Pod>) -> Option<Pod> {
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
