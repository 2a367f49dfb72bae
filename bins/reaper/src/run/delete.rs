//! Reaping: the plan's deletes carried out job id by job id, each id after a
//! confirming read of its owned Jobs, each delete only while the view is
//! still current.

use super::Reaper;
use super::list::rbac_hint;
use super::tick::still_current;
use crate::memory::Attempt;
use crate::plan::{self, DeleteReason, PodDelete, ReapPlan};
use crate::report::{ApiFailure, DeleteOutcome, DeleteRecord, SkipReason, TickReport};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, ListParams, Preconditions};
use std::collections::{BTreeMap, BTreeSet};
use tcab_shared::error_chain;
use tcab_shared::job_cache::{JobSummary, ViewState};
use tcab_shared::kube_api::{KubeCall, call};
use tcab_shared::names;
use tokio::sync::watch;

impl Reaper {
    /// Carries out the plan's deletes, job id by job id: each id only while
    /// the view is still current and unchanged, and after a confirming read;
    /// each delete of it only while the view still is. Returns how each
    /// planned delete went, for the memory.
    pub(super) async fn carry_out(
        &self,
        plan: &ReapPlan,
        view: &watch::Receiver<ViewState>,
        dead: &BTreeSet<String>,
        report: &mut TickReport,
    ) -> Vec<(String, Attempt)> {
        let mut by_id: BTreeMap<&str, Vec<&PodDelete>> = BTreeMap::new();
        for delete in &plan.delete {
            by_id.entry(&delete.job_id).or_default().push(delete);
        }
        let mut attempts = Vec::new();
        for (job_id, deletes) in by_id {
            let mut gate = if still_current(view) {
                self.confirm(job_id, &deletes[0].reason, dead, &mut report.api_errors)
                    .await
                    .err()
            } else {
                Some(SkipReason::ViewNotCurrent)
            };
            for delete in deletes {
                if gate.is_none() && !still_current(view) {
                    gate = Some(SkipReason::ViewNotCurrent);
                }
                let outcome = match &gate {
                    Some(skip) => DeleteOutcome::Skipped(skip.clone()),
                    None => self.delete(delete, &mut report.api_errors).await,
                };
                if outcome == DeleteOutcome::Deleted {
                    self.leave_event(delete);
                }
                attempts.push((job_id.to_owned(), outcome.attempt()));
                report.deletes.push(DeleteRecord {
                    pod: delete.pod.key(),
                    job_id: job_id.to_owned(),
                    reason: delete.reason.clone(),
                    outcome,
                });
            }
            if gate == Some(SkipReason::ViewNotCurrent) {
                tracing::info!(
                    job_id,
                    "the Job view stopped being current after the plan; its deletes wait for a later tick"
                );
            }
        }
        attempts
    }

    /// Sends the Event of a sandbox deleted, on its driver Job (with the
    /// Job's uid from the view, when it has the Job).
    fn leave_event(&self, delete: &PodDelete) {
        let Some(mut notice) = plan::events::reaped(&self.job_namespace, delete, None) else {
            return;
        };
        notice.regarding.uid = self
            .jobs
            .with_job_id(&delete.job_id)
            .iter()
            .find(|j| j.name() == notice.regarding.name)
            .map(|j| j.uid.as_str().to_owned())
            .filter(|u| !u.is_empty());
        self.events.send(notice);
    }

    /// One bounded read of the owned Jobs carrying `job_id`; the deletes of
    /// that id go ahead only if [`plan::confirm`] agrees with it.
    pub(super) async fn confirm(
        &self,
        job_id: &str,
        reason: &DeleteReason,
        dead: &BTreeSet<String>,
        errors: &mut Vec<ApiFailure>,
    ) -> Result<(), SkipReason> {
        let selector = format!(
            "{},{}",
            names::selector(names::MANAGED_BY, &self.settings.dispatcher_managed_by),
            names::selector(names::JOB_ID, job_id)
        );
        let read = call(
            KubeCall::ListJobs,
            self.kube_timeout,
            self.job_api.list(&ListParams::default().labels(&selector)),
        )
        .await;
        let fresh: Vec<JobSummary> = match read {
            Ok(list) => list.items.iter().map(JobSummary::from_job).collect(),
            Err(error) => {
                let code = error.code();
                tracing::warn!(
                    job_id,
                    code,
                    error = %error_chain(&error),
                    "cannot confirm that no Job of this job id is live; its sandboxes are kept and its reap backs off before it is tried again"
                );
                errors.push(ApiFailure::new("list", "jobs", &error));
                return Err(SkipReason::ConfirmReadFailed);
            }
        };
        plan::confirm(job_id, reason, &fresh, dead).map_err(|keep| {
            tracing::info!(
                job_id,
                reason = %keep,
                "a fresh read of its Jobs holds the reap; its sandboxes are kept"
            );
            SkipReason::Held(keep)
        })
    }

    pub(super) async fn delete(
        &self,
        delete: &PodDelete,
        errors: &mut Vec<ApiFailure>,
    ) -> DeleteOutcome {
        let pod = &delete.pod;
        let params = DeleteParams {
            preconditions: pod.uid.clone().map(|uid| Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        let pods: Api<Pod> = if pod.namespace == self.sandbox_namespace {
            self.pods.clone()
        } else {
            Api::namespaced(self.pods.clone().into_client(), &pod.namespace)
        };
        match call(
            KubeCall::DeletePod,
            self.kube_timeout,
            pods.delete(&pod.name, &params),
        )
        .await
        {
            Ok(_) => {
                tracing::info!(
                    job_id = %delete.job_id,
                    pod = %pod.key(),
                    kind = delete.reason.kind().as_str(),
                    reason = %delete.reason,
                    "reaped sandbox pod"
                );
                DeleteOutcome::Deleted
            }
            Err(error) if error.is_not_found() => {
                tracing::debug!(job_id = %delete.job_id, pod = %pod.key(), "sandbox pod already gone");
                DeleteOutcome::AlreadyGone
            }
            Err(error) if error.is_conflict() => {
                tracing::info!(job_id = %delete.job_id, pod = %pod.key(), "sandbox pod changed before its delete; a later tick decides");
                DeleteOutcome::Changed
            }
            Err(error) => {
                let code = error.code();
                let message = error_chain(&error);
                tracing::warn!(
                    namespace = %pod.namespace,
                    job_id = %delete.job_id,
                    pod = %pod.name,
                    code,
                    error = %message,
                    "cannot delete sandbox pod; the reap of its job id backs off before it is tried again{}",
                    rbac_hint(code)
                );
                errors.push(ApiFailure::new("delete", "pods", &error));
                DeleteOutcome::Failed { code, message }
            }
        }
    }
}
