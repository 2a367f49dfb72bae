//! The claim calls (`POST /jobs/next`, `POST /publish-jobs/next`): a job,
//! nothing claimable (204), or a claim that can never become a Job, read
//! as far as it can be (a poisoned claim).

use super::exchange::bearer;
use super::{Answer, BackendClient, counted, is_job_id, shape};
use crate::backend::error::{BackendError, Call};
use crate::backend::types::{
    ClaimAnswer, ClaimedPublish, ClaimedRun, JobId, PoisonedClaim, PublishClaim, RunClaim,
};
use crate::lane::{Lane, LaneSpec};
use crate::secret::Secret;
use reqwest::StatusCode;
use reqwest::header::HeaderValue;

/// A job a lane's claim answers with: the lane whose claim it is, the
/// wrapper the answer carries it in, and how to open that wrapper. One
/// claim call serves every lane through it.
trait ClaimedJob: Sized {
    const LANE: Lane;
    type Wire: serde::de::DeserializeOwned;
    /// The job's id, its token, and the job.
    fn open(wire: Self::Wire) -> (JobId, Secret, Self);
}

impl ClaimedJob for ClaimedRun {
    const LANE: Lane = Lane::Run;
    type Wire = RunClaim;
    fn open(claim: RunClaim) -> (JobId, Secret, ClaimedRun) {
        let run = claim.job;
        (run.id.clone(), run.token.clone(), run)
    }
}

impl ClaimedJob for ClaimedPublish {
    const LANE: Lane = Lane::Publish;
    type Wire = PublishClaim;
    fn open(claim: PublishClaim) -> (JobId, Secret, ClaimedPublish) {
        let publish = claim.publish_job;
        (publish.id.clone(), publish.token.clone(), publish)
    }
}

impl BackendClient {
    /// `POST /jobs/next`: claims the next claimable run; `None` on 204. An
    /// answer that breaks the contract is a [`BackendErrorKind::Malformed`]
    /// error (the admitter reads it with [`BackendClient::claim_run_answer`]).
    ///
    /// [`BackendErrorKind::Malformed`]: crate::backend::BackendErrorKind::Malformed
    pub async fn claim_run(&self) -> Result<Option<ClaimedRun>, BackendError> {
        self.claim_job().await
    }

    /// `POST /publish-jobs/next`, as [`BackendClient::claim_run`] does.
    pub async fn claim_publish(&self) -> Result<Option<ClaimedPublish>, BackendError> {
        self.claim_job().await
    }

    /// `POST /jobs/next`: claims the next claimable run; `None` on 204. A
    /// 200 whose body breaks the contract is [`ClaimAnswer::Poisoned`] (the
    /// backend committed the claim), not an error.
    pub async fn claim_run_answer(&self) -> Result<Option<ClaimAnswer<ClaimedRun>>, BackendError> {
        self.claim_answer().await
    }

    /// `POST /publish-jobs/next`: claims the next queued publish; `None` on
    /// 204; a 200 that breaks the contract is [`ClaimAnswer::Poisoned`].
    pub async fn claim_publish_answer(
        &self,
    ) -> Result<Option<ClaimAnswer<ClaimedPublish>>, BackendError> {
        self.claim_answer().await
    }

    /// The claim of `J`'s lane; an answer that breaks the contract is an
    /// error (counted as one).
    async fn claim_job<J: ClaimedJob>(&self) -> Result<Option<J>, BackendError> {
        let read = self.claim_read::<J>().await;
        counted(read.and_then(|read| read.transpose().map_err(|(error, _)| error)))
    }

    /// The claim of `J`'s lane: the job, or what could be read of a
    /// poisoned one (not an error: the backend committed the claim).
    async fn claim_answer<J: ClaimedJob>(&self) -> Result<Option<ClaimAnswer<J>>, BackendError> {
        counted(self.claim_read::<J>().await.map(|read| read.map(answered)))
    }

    /// Sends the claim of `J`'s lane and reads its answer; `None` on 204.
    async fn claim_read<J: ClaimedJob>(&self) -> Result<Option<ClaimRead<J>>, BackendError> {
        let Some((spec, answer)) = self.claim(J::LANE).await? else {
            return Ok(None);
        };
        let read = self.read_claim(spec.claim_call, spec.claim_key, &answer, J::open);
        Ok(Some(read))
    }

    /// Reads a claim's answer: the job when it fits the contract, else the
    /// malformed-answer error and what could be read of the answer
    /// (`<key>.id` and `<key>.token` when valid) beside why the rest is
    /// unusable.
    fn read_claim<W: serde::de::DeserializeOwned, T>(
        &self,
        call: Call,
        key: &str,
        answer: &Answer,
        open: impl FnOnce(W) -> (JobId, Secret, T),
    ) -> Result<T, (BackendError, PoisonedClaim)> {
        let checked = self.parse::<W>(call, None, answer).and_then(|wrapper| {
            let (id, token, job) = open(wrapper);
            self.check_id(call, None, answer, &format!("{key}.id"), &id)?;
            self.check_token(call, Some(&id), answer, &format!("{key}.token"), &token)?;
            Ok(job)
        });
        let error = match checked {
            Ok(job) => return Ok(job),
            Err(error) => error,
        };
        let value: Option<serde_json::Value> = serde_json::from_slice(&answer.body).ok();
        let field = |name: &str| {
            value
                .as_ref()
                .and_then(|v| v.get(key))
                .and_then(|job| job.get(name))
                .and_then(serde_json::Value::as_str)
        };
        let id = field("id").filter(|id| is_job_id(id)).map(str::to_owned);
        let token = field("token")
            .map(Secret::new)
            .filter(|t| !t.is_empty() && HeaderValue::from_str(&bearer(t)).is_ok());
        let reason = self.scrub(error.detail(), token.as_ref());
        let poisoned = PoisonedClaim {
            status: answer.status.as_u16(),
            id,
            token,
            reason,
            shape: value.as_ref().map_or_else(|| "not JSON".to_owned(), shape),
        };
        Err((error, poisoned))
    }

    /// Sends `lane`'s claim; `None` when the backend answers 204 (nothing
    /// claimable), else the answer beside the lane's constants to read it by.
    async fn claim(&self, lane: Lane) -> Result<Option<(&'static LaneSpec, Answer)>, BackendError> {
        let spec = lane.spec();
        let answer = self
            .post(spec.claim_call, spec.claim_path.into(), None, None)
            .await?;
        Ok((answer.status != StatusCode::NO_CONTENT).then_some((spec, answer)))
    }
}

/// A claim's answer read: the job, or the error beside what could be read
/// of a poisoned one.
type ClaimRead<J> = Result<J, (BackendError, PoisonedClaim)>;

/// The answer as the admitter takes it: the job, or what could be read of a
/// poisoned one.
fn answered<T>(read: ClaimRead<T>) -> ClaimAnswer<T> {
    match read {
        Ok(job) => ClaimAnswer::Job(job),
        Err((_, poisoned)) => ClaimAnswer::Poisoned(poisoned),
    }
}
