//! The calls about one job: its state (`GET /jobs/{id}`), a lost report,
//! and a death report sent with the job's own token.

use super::{Answer, BackendClient, Request, counted, to_body, valid_input_id};
use crate::backend::error::{BackendError, Call};
use crate::backend::types::{
    FailureKind, JobState, JobView, LostOutcome, LostReport, PublishOutcome, PublishResult,
    StatusAck, StatusReport,
};
use crate::lane::{Lane, LaneSpec};
use crate::secret::Secret;
use reqwest::Method;

impl BackendClient {
    /// `GET /jobs/{id}`: one run's state.
    pub async fn get_job(&self, id: &str) -> Result<JobView, BackendError> {
        counted(
            async {
                const CALL: Call = "GET /jobs/{id}";
                valid_input_id(CALL, id)?;
                let answer = self.get(CALL, format!("/jobs/{id}"), Some(id)).await?;
                let view: JobView = self.parse(CALL, Some(id), &answer)?;
                self.check_same_job(CALL, id, &answer, "id", &view.id)?;
                Ok(view)
            }
            .await,
        )
    }

    /// `POST /jobs/{id}/lost`: reports a run whose driver is gone.
    pub async fn report_lost(&self, id: &str, detail: &str) -> Result<LostOutcome, BackendError> {
        self.report_lost_in(Lane::Run, id, detail).await
    }

    /// `POST /publish-jobs/{id}/lost`: reports a publish whose publisher is gone.
    pub async fn report_publish_lost(
        &self,
        id: &str,
        detail: &str,
    ) -> Result<LostOutcome, BackendError> {
        self.report_lost_in(Lane::Publish, id, detail).await
    }

    /// `POST {jobs}/{id}/lost` of `lane` (`/jobs/{id}/lost`,
    /// `/publish-jobs/{id}/lost`): reports a job whose Job is gone.
    pub async fn report_lost_in(
        &self,
        lane: Lane,
        id: &str,
        detail: &str,
    ) -> Result<LostOutcome, BackendError> {
        counted(self.lost(lane.spec(), id, detail).await)
    }

    async fn lost(
        &self,
        spec: &LaneSpec,
        id: &str,
        detail: &str,
    ) -> Result<LostOutcome, BackendError> {
        let call = spec.lost_call;
        valid_input_id(call, id)?;
        let path = format!("{}/{id}/lost", spec.jobs_path);
        let body = to_body(&LostReport {
            detail: detail.to_owned(),
        });
        let answer = self.post(call, path, Some(id), Some(body)).await?;
        let outcome: LostOutcome = self.parse(call, Some(id), &answer)?;
        self.check_same_job(call, id, &answer, "id", &outcome.id)?;
        if let Some(retry_id) = &outcome.retry_id {
            self.check_id(call, Some(id), &answer, "retry_id", retry_id)?;
        }
        Ok(outcome)
    }

    /// `POST /jobs/{id}/status` with the per-job `token`: the death report of
    /// a driver that failed before reporting (`failed`, `infrastructure`,
    /// `detail`). 401 means the token is no longer accepted, 409 that the job
    /// is already terminal.
    pub async fn report_death(
        &self,
        id: &str,
        token: &Secret,
        detail: &str,
    ) -> Result<StatusAck, BackendError> {
        self.report_failed_run(id, token, FailureKind::Infrastructure, detail)
            .await
    }

    /// `POST /jobs/{id}/status` with the per-job `token`: the run failed, as
    /// `kind` says: `Infrastructure` (a dead driver: the backend retries it)
    /// or `Agent` (the job's own failure, e.g. a claim whose request can
    /// never become a Job: not retried, so a bad request does not come back
    /// forever).
    pub async fn report_failed_run(
        &self,
        id: &str,
        token: &Secret,
        kind: FailureKind,
        detail: &str,
    ) -> Result<StatusAck, BackendError> {
        counted(
            async {
                const CALL: Call = "POST /jobs/{id}/status";
                let report = StatusReport {
                    state: JobState::Failed,
                    detail: Some(detail.to_owned()),
                    failure_kind: Some(kind),
                };
                let path = format!("/jobs/{id}/status");
                let answer = self.post_as_job(CALL, path, id, &report, token).await?;
                let ack: StatusAck = self.parse_scrubbing(CALL, Some(id), &answer, Some(token))?;
                self.check_same_job(CALL, id, &answer, "id", &ack.id)?;
                Ok(ack)
            }
            .await,
        )
    }

    /// `POST /publish-jobs/{id}/result` with the per-job `token`: a failed
    /// result (`outcome: failed`, `detail`), which the dispatcher sends for
    /// a claimed publish that cannot become a Job. 401 means the token is no
    /// longer accepted, 409 that the publish is no longer dispatched.
    pub async fn report_publish_failed(
        &self,
        id: &str,
        token: &Secret,
        detail: &str,
    ) -> Result<(), BackendError> {
        counted(
            async {
                const CALL: Call = "POST /publish-jobs/{id}/result";
                let result = PublishResult {
                    outcome: PublishOutcome::Failed,
                    detail: Some(detail.to_owned()),
                };
                let path = format!("/publish-jobs/{id}/result");
                self.post_as_job(CALL, path, id, &result, token).await?;
                Ok(())
            }
            .await,
        )
    }

    /// A POST of `body` about job `id` (checked first) with the job's own
    /// token, not the service token.
    async fn post_as_job<B: serde::Serialize>(
        &self,
        call: Call,
        path: String,
        id: &str,
        body: &B,
        token: &Secret,
    ) -> Result<Answer, BackendError> {
        valid_input_id(call, id)?;
        let body = to_body(body);
        self.send(Request {
            call,
            method: Method::POST,
            path,
            job_id: Some(id),
            body: Some(body),
            job_token: Some(token),
        })
        .await
    }
}
