//! The backend's operations, each one run inside a single SQLite
//! transaction: gather facts, ask [`crate::rules`], write the outcome.

use crate::clock::ts_from_ms;
use crate::db::{
    Lane, PublishRow, RunRow, first_publish, first_run, history, load_publish, load_run,
    push_history, select_publishes, select_runs,
};
use crate::model::{DRIVEN_SQL, FailureKind, PublishOutcome, PublishState, RunState};
use crate::rules::{
    self, DrivenRun, Finish, LostDecision, LostMark, ReportDecision, RunFacts, WaitingRun,
};
use crate::wire::*;
use rand::RngCore;
use rusqlite::{Transaction, params};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// Why an operation was refused. A refused operation changes nothing (its
/// transaction is rolled back).
#[derive(Debug, thiserror::Error)]
pub enum OpError {
    /// Missing, wrong or superseded token. Carries no detail on purpose.
    #[error("unauthorized")]
    Unauthorized,
    /// No such job (service calls only; per-job calls answer Unauthorized).
    #[error("{0}")]
    NotFound(String),
    /// The call does not fit the job's state.
    #[error("{0}")]
    Conflict(String),
    /// The request's fields are invalid.
    #[error("{0}")]
    BadRequest(String),
    /// The database failed.
    #[error("database error: {0}")]
    Db(#[from] rusqlite::Error),
    /// Something else inside the sim failed.
    #[error("internal error: {0}")]
    Internal(String),
}

/// What every operation knows about the moment and the configuration.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ctx {
    /// The backend's clock, in ms since the epoch.
    pub now_ms: i64,
    /// The lease a claim or renewal sets, in ms.
    pub lease_ms: i64,
    /// How long a publish may stay dispatched without a result, in ms.
    pub backstop_ms: i64,
}

impl Ctx {
    fn now(&self) -> jiff::Timestamp {
        ts_from_ms(self.now_ms)
    }

    fn lease_until(&self) -> i64 {
        self.now_ms.saturating_add(self.lease_ms)
    }
}

/// SHA-256 of a token, hex: the only form a token is stored in.
pub(crate) fn hash_token(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// A fresh random per-job token (52 characters) and its hash.
fn mint_token(prefix: &str) -> (String, String) {
    let mut bytes = [0u8; 24];
    rand::rng().fill_bytes(&mut bytes);
    let token = format!("{prefix}{}", hex::encode(bytes));
    let hash = hash_token(&token);
    (token, hash)
}

/// A new job id: a UUID v4, which is a valid Kubernetes label value.
fn new_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

fn not_found(kind: &str, id: &str) -> OpError {
    OpError::NotFound(format!("no {kind} with id {id:?}"))
}

// ---------------------------------------------------------------- runs ----

/// Checks an enqueue request's fields.
pub(crate) fn validate_run(run: &EnqueueRun) -> Result<(), OpError> {
    if run.harness.trim().is_empty() {
        return Err(OpError::BadRequest("harness must not be empty".into()));
    }
    if run.model.trim().is_empty() {
        return Err(OpError::BadRequest("model must not be empty".into()));
    }
    if run.jam.as_deref().is_some_and(|j| j.trim().is_empty()) {
        return Err(OpError::BadRequest(
            "jam must be null or a non-empty string".into(),
        ));
    }
    if !run.launch_request.is_object() {
        return Err(OpError::BadRequest(
            "launch_request must be a JSON object".into(),
        ));
    }
    Ok(())
}

/// Inserts a run at the back of the queue.
fn insert_run(
    tx: &Transaction<'_>,
    run: &EnqueueRun,
    attempt: i64,
    retry_of: Option<&str>,
    enqueued_at: i64,
) -> Result<Enqueued, OpError> {
    let id = new_id();
    tx.execute(
        "INSERT INTO runs (id, harness, model, case_name, jam, launch_request, state, attempt, \
         enqueued_at, retry_of) VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'queued', ?7, ?8, ?9)",
        params![
            id,
            run.harness,
            run.model,
            run.case,
            run.jam,
            run.launch_request.to_string(),
            attempt,
            enqueued_at,
            retry_of
        ],
    )?;
    let queue_seq = tx.last_insert_rowid();
    let detail = retry_of.map(|r| format!("automatic retry of {r}"));
    push_history(tx, Lane::Run, &id, "queued", enqueued_at, detail.as_deref())?;
    Ok(Enqueued { id, queue_seq })
}

/// `POST /jobs`.
pub(crate) fn enqueue_run(
    tx: &Transaction<'_>,
    ctx: &Ctx,
    run: &EnqueueRun,
) -> Result<Enqueued, OpError> {
    validate_run(run)?;
    insert_run(tx, run, 1, None, ctx.now_ms)
}

/// `POST /jobs/batch`: all or nothing, one shared timestamp, listed order.
pub(crate) fn enqueue_batch(
    tx: &Transaction<'_>,
    ctx: &Ctx,
    batch: &EnqueueBatch,
) -> Result<BatchEnqueued, OpError> {
    for (i, run) in batch.runs.iter().enumerate() {
        validate_run(run).map_err(|e| match e {
            OpError::BadRequest(m) => OpError::BadRequest(format!("runs[{i}]: {m}")),
            other => other,
        })?;
    }
    let mut ids = Vec::with_capacity(batch.runs.len());
    for run in &batch.runs {
        ids.push(insert_run(tx, run, 1, None, ctx.now_ms)?.id);
    }
    Ok(BatchEnqueued { ids })
}

/// `PUT /harnesses/{name}`.
pub(crate) fn set_harness(
    tx: &Transaction<'_>,
    name: &str,
    limit: &HarnessLimit,
) -> Result<HarnessView, OpError> {
    if name.trim().is_empty() {
        return Err(OpError::BadRequest("harness name must not be empty".into()));
    }
    tx.execute(
        "INSERT INTO harnesses (name, max_parallel) VALUES (?1, ?2) \
         ON CONFLICT(name) DO UPDATE SET max_parallel = excluded.max_parallel",
        params![name, limit.max_parallel],
    )?;
    Ok(HarnessView {
        name: name.to_string(),
        max_parallel: limit.max_parallel,
    })
}

/// Re-decides which waiting runs are held back (pending) and records every
/// change in their history. Runs after every operation, so a run's state
/// always reflects the rules.
pub(crate) fn refresh_holds(tx: &Transaction<'_>, ctx: &Ctx) -> Result<(), OpError> {
    let waiting = select_runs(tx, "state IN ('queued','pending')", [])?;
    if waiting.is_empty() {
        return Ok(());
    }
    let driven = select_runs(tx, &format!("state IN {DRIVEN_SQL}"), [])?;
    let limits: BTreeMap<String, u32> = {
        let mut stmt = tx.prepare_cached("SELECT name, max_parallel FROM harnesses")?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
        rows.collect::<rusqlite::Result<_>>()?
    };
    let states: BTreeMap<&str, RunState> =
        waiting.iter().map(|r| (r.id.as_str(), r.state)).collect();
    let plan = rules::plan_holds(
        &waiting
            .iter()
            .map(|r| WaitingRun {
                id: r.id.clone(),
                queue_seq: r.queue_seq,
                harness: r.harness.clone(),
                model: r.model.clone(),
                jam: r.jam.clone(),
            })
            .collect::<Vec<_>>(),
        &driven
            .iter()
            .map(|r| DrivenRun {
                harness: r.harness.clone(),
                model: r.model.clone(),
                jam: r.jam.clone(),
            })
            .collect::<Vec<_>>(),
        &limits,
    );
    for decision in plan {
        let target = decision.state();
        if states.get(decision.id.as_str()) == Some(&target) {
            continue;
        }
        tx.execute(
            "UPDATE runs SET state = ?1 WHERE id = ?2",
            params![target.as_str(), decision.id],
        )?;
        let detail = match &decision.hold {
            Some(reason) => format!("held back: {reason}"),
            None => "released: no rule holds it back".to_string(),
        };
        push_history(
            tx,
            Lane::Run,
            &decision.id,
            target.as_str(),
            ctx.now_ms,
            Some(&detail),
        )?;
    }
    Ok(())
}

/// Returns every dispatched run whose lease has lapsed to the queue at its
/// original position; its token is dropped (a fresh one comes with the next
/// claim) and no attempt is counted.
fn requeue_lapsed(tx: &Transaction<'_>, ctx: &Ctx) -> Result<(), OpError> {
    let lapsed = select_runs(
        tx,
        "state = 'dispatched' AND lease_expires_at <= ?1",
        [ctx.now_ms],
    )?;
    for run in lapsed {
        tx.execute(
            "UPDATE runs SET state = 'queued', token_hash = NULL, lease_expires_at = NULL \
             WHERE id = ?1",
            [&run.id],
        )?;
        let detail = format!(
            "lease lapsed at {} while dispatched: returned to the queue at queue_seq {}",
            ts_from_ms(run.lease_expires_at.unwrap_or(ctx.now_ms)),
            run.queue_seq
        );
        push_history(tx, Lane::Run, &run.id, "queued", ctx.now_ms, Some(&detail))?;
    }
    Ok(())
}

/// `POST /jobs/next`.
pub(crate) fn claim_run(tx: &Transaction<'_>, ctx: &Ctx) -> Result<Option<RunClaim>, OpError> {
    requeue_lapsed(tx, ctx)?;
    refresh_holds(tx, ctx)?;
    let Some(run) = first_run(tx, "state = 'queued'", [])? else {
        return Ok(None);
    };
    let (token, hash) = mint_token("tok_run_");
    let lease = ctx.lease_until();
    tx.execute(
        "UPDATE runs SET state = 'dispatched', token_hash = ?1, lease_expires_at = ?2 \
         WHERE id = ?3",
        params![hash, lease, run.id],
    )?;
    push_history(tx, Lane::Run, &run.id, "dispatched", ctx.now_ms, None)?;
    Ok(Some(RunClaim {
        job: ClaimedRun {
            id: run.id,
            token,
            queue_seq: run.queue_seq,
            harness: run.harness,
            model: run.model,
            case: run.case,
            jam: run.jam,
            attempt: run.attempt,
            launch_request: run.launch_request,
            lease_expires_at: ts_from_ms(lease),
            enqueued_at: ts_from_ms(run.enqueued_at),
        },
    }))
}

/// Unique ids, first occurrence kept.
fn unique(ids: &[String]) -> Vec<&String> {
    let mut seen = std::collections::BTreeSet::new();
    ids.iter().filter(|id| seen.insert(id.as_str())).collect()
}

/// `POST /admin/driven`: inserts the runs as `running` and the publishes as
/// `dispatched`, each with a current lease and a token nobody holds, as if
/// claimed long ago (no history is written: nothing reads it for these).
/// An id that exists already is a bad request, and nothing is inserted.
pub(crate) fn seed_driven(
    tx: &Transaction<'_>,
    ctx: &Ctx,
    req: &SeedDriven,
) -> Result<SeedDriven, OpError> {
    let lease = ctx.lease_until();
    let exists = |e: rusqlite::Error| match e {
        rusqlite::Error::SqliteFailure(f, _)
            if f.code == rusqlite::ErrorCode::ConstraintViolation =>
        {
            OpError::BadRequest("an id to seed exists already".into())
        }
        other => OpError::from(other),
    };
    let mut runs = tx.prepare_cached(
        "INSERT INTO runs (id, harness, model, launch_request, state, attempt, token_hash, \
         lease_expires_at, enqueued_at) VALUES (?1, 'seeded', 'seeded', '{}', 'running', 1, \
         'seeded', ?2, ?3)",
    )?;
    for id in &req.runs {
        runs.execute(params![id, lease, ctx.now_ms])
            .map_err(exists)?;
    }
    let mut publishes = tx.prepare_cached(
        "INSERT INTO publishes (id, request, state, attempt, token_hash, lease_expires_at, \
         enqueued_at, dispatched_at) VALUES (?1, '{}', 'dispatched', 1, 'seeded', ?2, ?3, ?3)",
    )?;
    for id in &req.publish_jobs {
        publishes
            .execute(params![id, lease, ctx.now_ms])
            .map_err(exists)?;
    }
    Ok(req.clone())
}

/// `POST /jobs/leases`: renews every listed run that is driven.
pub(crate) fn renew_run_leases(
    tx: &Transaction<'_>,
    ctx: &Ctx,
    req: &LeaseRequest,
) -> Result<LeaseRenewal, OpError> {
    let until = ctx.lease_until();
    let mut leases = Vec::new();
    for id in unique(&req.job_ids) {
        let changed = tx.execute(
            &format!(
                "UPDATE runs SET lease_expires_at = ?1 WHERE id = ?2 AND state IN {DRIVEN_SQL}"
            ),
            params![until, id],
        )?;
        if changed == 1 {
            leases.push(Lease {
                id: id.clone(),
                lease_expires_at: ts_from_ms(until),
            });
        }
    }
    Ok(LeaseRenewal {
        now: ctx.now(),
        leases,
    })
}

/// `GET /jobs/active`.
pub(crate) fn active_runs(tx: &Transaction<'_>, ctx: &Ctx) -> Result<ActiveRuns, OpError> {
    let jobs = select_runs(tx, &format!("state IN {DRIVEN_SQL}"), [])?
        .into_iter()
        .map(|r| ActiveRun {
            id: r.id,
            state: r.state,
            lease_expires_at: r.lease_expires_at.map(ts_from_ms),
        })
        .collect();
    Ok(ActiveRuns {
        now: ctx.now(),
        jobs,
    })
}

fn run_view(tx: &Transaction<'_>, r: RunRow) -> Result<RunView, OpError> {
    let history = history(tx, Lane::Run, &r.id)?;
    Ok(RunView {
        history,
        id: r.id,
        state: r.state,
        attempt: r.attempt,
        queue_seq: r.queue_seq,
        harness: r.harness,
        model: r.model,
        case: r.case,
        jam: r.jam,
        lease_expires_at: r.lease_expires_at.map(ts_from_ms),
        launch_request: r.launch_request,
        enqueued_at: ts_from_ms(r.enqueued_at),
        failure_kind: r.failure_kind,
        detail: r.detail,
        has_record: r.record.is_some(),
        record_state_reached: r.record_state,
        finished_from_record: r.finished_from_record,
        lost: r.lost == LostMark::Lost,
        lost_superseded: r.lost == LostMark::Superseded,
        retry_of: r.retry_of,
        retry_id: r.retry_id,
    })
}

/// `GET /jobs/{id}`.
pub(crate) fn get_run(tx: &Transaction<'_>, id: &str) -> Result<RunView, OpError> {
    let row = load_run(tx, id)?.ok_or_else(|| not_found("job", id))?;
    run_view(tx, row)
}

/// `GET /jobs?state=...` (all runs without a filter), in queue order.
pub(crate) fn list_runs(tx: &Transaction<'_>, state: Option<RunState>) -> Result<RunList, OpError> {
    let rows = match state {
        Some(s) => select_runs(tx, "state = ?1", [s.as_str()])?,
        None => select_runs(tx, "1 = 1", [])?,
    };
    let jobs = rows
        .into_iter()
        .map(|r| run_view(tx, r))
        .collect::<Result<_, _>>()?;
    Ok(RunList { jobs })
}

/// Loads a run for a per-job call: unknown id and wrong token look the same.
fn authorize_run(tx: &Transaction<'_>, id: &str, token_hash: &str) -> Result<RunRow, OpError> {
    match load_run(tx, id)? {
        Some(row) if row.token_hash.as_deref() == Some(token_hash) => Ok(row),
        _ => Err(OpError::Unauthorized),
    }
}

fn facts(row: &RunRow) -> RunFacts {
    RunFacts {
        state: row.state,
        lost: row.lost,
        has_record: row.record.is_some(),
    }
}

/// Enqueues the automatic retry of `row`: a fresh job at the back of the
/// queue, attempt + 1.
fn enqueue_retry(tx: &Transaction<'_>, ctx: &Ctx, row: &RunRow) -> Result<String, OpError> {
    let run = EnqueueRun {
        harness: row.harness.clone(),
        model: row.model.clone(),
        case: row.case.clone(),
        jam: row.jam.clone(),
        launch_request: row.launch_request.clone(),
    };
    Ok(insert_run(tx, &run, row.attempt + 1, Some(&row.id), ctx.now_ms)?.id)
}

/// Writes a finished run. `retry` is the retry id to keep on the row.
#[allow(clippy::too_many_arguments)]
fn write_finish(
    tx: &Transaction<'_>,
    ctx: &Ctx,
    id: &str,
    state: RunState,
    kind: Option<FailureKind>,
    detail: Option<&str>,
    from_record: bool,
    lost: LostMark,
    retry: Option<&str>,
) -> Result<(), OpError> {
    tx.execute(
        "UPDATE runs SET state = ?1, failure_kind = ?2, detail = ?3, finished_from_record = ?4, \
         lost = ?5, retry_id = ?6, lease_expires_at = NULL WHERE id = ?7",
        params![
            state.as_str(),
            kind.map(FailureKind::as_str),
            detail,
            from_record,
            lost.to_i64(),
            retry,
            id
        ],
    )?;
    push_history(tx, Lane::Run, id, state.as_str(), ctx.now_ms, detail)?;
    Ok(())
}

/// Finishes a driven run as `finish` says; answers the final state and the
/// retry id (when one was enqueued).
fn apply_finish(
    tx: &Transaction<'_>,
    ctx: &Ctx,
    row: &RunRow,
    finish: Finish,
    detail: Option<&str>,
    lost: LostMark,
) -> Result<(RunState, Option<String>), OpError> {
    match finish {
        Finish::Succeeded => {
            write_finish(
                tx,
                ctx,
                &row.id,
                RunState::Succeeded,
                None,
                detail,
                false,
                lost,
                None,
            )?;
            Ok((RunState::Succeeded, None))
        }
        Finish::FailedAgent => {
            write_finish(
                tx,
                ctx,
                &row.id,
                RunState::Failed,
                Some(FailureKind::Agent),
                detail,
                false,
                lost,
                None,
            )?;
            Ok((RunState::Failed, None))
        }
        Finish::FromRecord => {
            let reached = row.record_state.unwrap_or(RunState::Storing);
            let (state, kind) = rules::record_outcome(reached);
            let text = match detail {
                Some(d) => format!("finished from the held record (run reached {reached}): {d}"),
                None => format!("finished from the held record (run reached {reached})"),
            };
            write_finish(tx, ctx, &row.id, state, kind, Some(&text), true, lost, None)?;
            Ok((state, None))
        }
        Finish::FailedInfrastructure => {
            let retry = enqueue_retry(tx, ctx, row)?;
            write_finish(
                tx,
                ctx,
                &row.id,
                RunState::Failed,
                Some(FailureKind::Infrastructure),
                detail,
                false,
                lost,
                Some(&retry),
            )?;
            Ok((RunState::Failed, Some(retry)))
        }
    }
}

/// A late terminal report on a run a lost report finished: the run takes the
/// reported outcome, and the lost report's retry is withdrawn (cancelled)
/// while still waiting, unless the new outcome itself calls for a retry.
fn apply_supersede(
    tx: &Transaction<'_>,
    ctx: &Ctx,
    row: &RunRow,
    finish: Finish,
    detail: Option<&str>,
) -> Result<RunState, OpError> {
    let note = match detail {
        Some(d) => format!("late terminal report superseded the lost outcome: {d}"),
        None => "late terminal report superseded the lost outcome".to_string(),
    };
    if finish == Finish::FailedInfrastructure && row.retry_id.is_some() {
        write_finish(
            tx,
            ctx,
            &row.id,
            RunState::Failed,
            Some(FailureKind::Infrastructure),
            Some(&note),
            false,
            LostMark::Superseded,
            row.retry_id.as_deref(),
        )?;
        return Ok(RunState::Failed);
    }
    let (state, new_retry) = apply_finish(tx, ctx, row, finish, Some(&note), LostMark::Superseded)?;
    if let Some(old) = &row.retry_id {
        withdraw_retry(tx, ctx, old, &row.id)?;
        if new_retry.is_none() {
            // Keep pointing at the withdrawn retry so the console shows it.
            tx.execute(
                "UPDATE runs SET retry_id = ?1 WHERE id = ?2",
                params![old, row.id],
            )?;
        }
    }
    Ok(state)
}

/// Cancels a retry that has not been claimed yet.
fn withdraw_retry(
    tx: &Transaction<'_>,
    ctx: &Ctx,
    retry_id: &str,
    original: &str,
) -> Result<(), OpError> {
    let changed = tx.execute(
        "UPDATE runs SET state = 'cancelled' WHERE id = ?1 AND state IN ('queued','pending')",
        [retry_id],
    )?;
    if changed == 1 {
        let detail =
            format!("withdrawn: a late terminal report of {original} superseded its lost outcome");
        push_history(
            tx,
            Lane::Run,
            retry_id,
            "cancelled",
            ctx.now_ms,
            Some(&detail),
        )?;
    }
    Ok(())
}

/// `POST /jobs/{id}/status` (per-job token).
pub(crate) fn report_status(
    tx: &Transaction<'_>,
    ctx: &Ctx,
    id: &str,
    token_hash: &str,
    report: &StatusReport,
) -> Result<StatusAck, OpError> {
    let row = authorize_run(tx, id, token_hash)?;
    let decision =
        rules::decide_report(&facts(&row), report.state, report.failure_kind).map_err(|r| {
            if r.is_bad_request() {
                OpError::BadRequest(r.to_string())
            } else {
                OpError::Conflict(r.to_string())
            }
        })?;
    let detail = report.detail.as_deref();
    let state = match decision {
        ReportDecision::Repeat => row.state,
        ReportDecision::Advance(to) => {
            tx.execute(
                "UPDATE runs SET state = ?1 WHERE id = ?2",
                params![to.as_str(), row.id],
            )?;
            push_history(tx, Lane::Run, &row.id, to.as_str(), ctx.now_ms, detail)?;
            to
        }
        ReportDecision::Finish(finish) => {
            apply_finish(tx, ctx, &row, finish, detail, LostMark::None)?.0
        }
        ReportDecision::Supersede(finish) => apply_supersede(tx, ctx, &row, finish, detail)?,
    };
    Ok(StatusAck {
        id: row.id,
        state: state.as_str().to_string(),
    })
}

/// `POST /jobs/{id}/record` (per-job token): holds the driver's record.
pub(crate) fn hold_record(
    tx: &Transaction<'_>,
    id: &str,
    token_hash: &str,
    report: &RecordReport,
) -> Result<StatusAck, OpError> {
    let row = authorize_run(tx, id, token_hash)?;
    if !rules::is_recordable(report.state_reached) {
        return Err(OpError::BadRequest(format!(
            "state_reached {} is not a state a run reaches; use starting, running, validating, \
             storing, succeeded or failed",
            report.state_reached
        )));
    }
    if report.record.is_null() {
        return Err(OpError::BadRequest("record must not be null".into()));
    }
    if !row.state.is_driven() {
        return Err(OpError::Conflict(format!(
            "job is {}, not driven: no record is taken",
            row.state
        )));
    }
    tx.execute(
        "UPDATE runs SET record = ?1, record_state = ?2 WHERE id = ?3",
        params![
            report.record.to_string(),
            report.state_reached.as_str(),
            row.id
        ],
    )?;
    Ok(StatusAck {
        id: row.id,
        state: row.state.as_str().to_string(),
    })
}

/// `POST /jobs/{id}/lost` (service token).
pub(crate) fn report_lost(
    tx: &Transaction<'_>,
    ctx: &Ctx,
    id: &str,
    report: &LostReport,
) -> Result<LostOutcome, OpError> {
    let row = load_run(tx, id)?.ok_or_else(|| not_found("job", id))?;
    match rules::decide_lost(&facts(&row)) {
        LostDecision::Ignore => Ok(LostOutcome {
            id: row.id,
            ignored: true,
            state: row.state.as_str().to_string(),
            retry_id: None,
        }),
        LostDecision::Finish(finish) => {
            let detail = format!("reported lost: {}", report.detail);
            let (state, retry_id) =
                apply_finish(tx, ctx, &row, finish, Some(&detail), LostMark::Lost)?;
            Ok(LostOutcome {
                id: row.id,
                ignored: false,
                state: state.as_str().to_string(),
                retry_id,
            })
        }
    }
}

// ----------------------------------------------------------- publishes ----

fn insert_publish(
    tx: &Transaction<'_>,
    ctx: &Ctx,
    request: &serde_json::Value,
    attempt: i64,
    retry_of: Option<&str>,
) -> Result<PublishEnqueued, OpError> {
    let id = new_id();
    tx.execute(
        "INSERT INTO publishes (id, request, state, attempt, enqueued_at, retry_of) \
         VALUES (?1, ?2, 'queued', ?3, ?4, ?5)",
        params![id, request.to_string(), attempt, ctx.now_ms, retry_of],
    )?;
    let queue_seq = tx.last_insert_rowid();
    let detail = retry_of.map(|r| format!("automatic retry of {r}"));
    push_history(
        tx,
        Lane::Publish,
        &id,
        "queued",
        ctx.now_ms,
        detail.as_deref(),
    )?;
    Ok(PublishEnqueued { id, queue_seq })
}

/// `POST /publish-jobs`.
pub(crate) fn enqueue_publish(
    tx: &Transaction<'_>,
    ctx: &Ctx,
    req: &EnqueuePublish,
) -> Result<PublishEnqueued, OpError> {
    if !req.request.is_object() {
        return Err(OpError::BadRequest("request must be a JSON object".into()));
    }
    insert_publish(tx, ctx, &req.request, 1, None)
}

/// The publish backstop: a publish dispatched for `backstop_ms` with no
/// result is recorded failed. Runs at the start of every operation.
pub(crate) fn publish_backstop(tx: &Transaction<'_>, ctx: &Ctx) -> Result<(), OpError> {
    let cutoff = ctx.now_ms.saturating_sub(ctx.backstop_ms);
    let stale = select_publishes(tx, "state = 'dispatched' AND dispatched_at <= ?1", [cutoff])?;
    for p in stale {
        let detail = format!(
            "publish backstop: dispatched since {} with no result",
            ts_from_ms(p.dispatched_at.unwrap_or(cutoff))
        );
        tx.execute(
            "UPDATE publishes SET state = 'failed', detail = ?1, lease_expires_at = NULL \
             WHERE id = ?2",
            params![detail, p.id],
        )?;
        push_history(
            tx,
            Lane::Publish,
            &p.id,
            "failed",
            ctx.now_ms,
            Some(&detail),
        )?;
    }
    Ok(())
}

/// `POST /publish-jobs/next`.
pub(crate) fn claim_publish(
    tx: &Transaction<'_>,
    ctx: &Ctx,
) -> Result<Option<PublishClaim>, OpError> {
    let Some(p) = first_publish(tx, "state = 'queued'", [])? else {
        return Ok(None);
    };
    let (token, hash) = mint_token("tok_pub_");
    let lease = ctx.lease_until();
    tx.execute(
        "UPDATE publishes SET state = 'dispatched', token_hash = ?1, lease_expires_at = ?2, \
         dispatched_at = ?3 WHERE id = ?4",
        params![hash, lease, ctx.now_ms, p.id],
    )?;
    push_history(tx, Lane::Publish, &p.id, "dispatched", ctx.now_ms, None)?;
    Ok(Some(PublishClaim {
        publish_job: ClaimedPublish {
            id: p.id,
            token,
            request: p.request,
            lease_expires_at: ts_from_ms(lease),
            enqueued_at: ts_from_ms(p.enqueued_at),
        },
    }))
}

/// `POST /publish-jobs/leases`.
pub(crate) fn renew_publish_leases(
    tx: &Transaction<'_>,
    ctx: &Ctx,
    req: &LeaseRequest,
) -> Result<LeaseRenewal, OpError> {
    let until = ctx.lease_until();
    let mut leases = Vec::new();
    for id in unique(&req.job_ids) {
        let changed = tx.execute(
            "UPDATE publishes SET lease_expires_at = ?1 WHERE id = ?2 AND state = 'dispatched'",
            params![until, id],
        )?;
        if changed == 1 {
            leases.push(Lease {
                id: id.clone(),
                lease_expires_at: ts_from_ms(until),
            });
        }
    }
    Ok(LeaseRenewal {
        now: ctx.now(),
        leases,
    })
}

/// `GET /publish-jobs/active`.
pub(crate) fn active_publishes(
    tx: &Transaction<'_>,
    ctx: &Ctx,
) -> Result<ActivePublishes, OpError> {
    let publish_jobs = select_publishes(tx, "state = 'dispatched'", [])?
        .into_iter()
        .map(|p| ActivePublish {
            id: p.id,
            state: p.state,
            lease_expires_at: p.lease_expires_at.map(ts_from_ms),
        })
        .collect();
    Ok(ActivePublishes {
        now: ctx.now(),
        publish_jobs,
    })
}

fn publish_view(tx: &Transaction<'_>, p: PublishRow) -> Result<PublishView, OpError> {
    let history = history(tx, Lane::Publish, &p.id)?;
    Ok(PublishView {
        history,
        id: p.id,
        state: p.state,
        attempt: p.attempt,
        queue_seq: p.queue_seq,
        request: p.request,
        lease_expires_at: p.lease_expires_at.map(ts_from_ms),
        enqueued_at: ts_from_ms(p.enqueued_at),
        dispatched_at: p.dispatched_at.map(ts_from_ms),
        detail: p.detail,
        retry_of: p.retry_of,
        retry_id: p.retry_id,
    })
}

/// `GET /publish-jobs/{id}`.
pub(crate) fn get_publish(tx: &Transaction<'_>, id: &str) -> Result<PublishView, OpError> {
    let row = load_publish(tx, id)?.ok_or_else(|| not_found("publish job", id))?;
    publish_view(tx, row)
}

/// `GET /publish-jobs?state=...`.
pub(crate) fn list_publishes(
    tx: &Transaction<'_>,
    state: Option<PublishState>,
) -> Result<PublishList, OpError> {
    let rows = match state {
        Some(s) => select_publishes(tx, "state = ?1", [s.as_str()])?,
        None => select_publishes(tx, "1 = 1", [])?,
    };
    let publish_jobs = rows
        .into_iter()
        .map(|p| publish_view(tx, p))
        .collect::<Result<_, _>>()?;
    Ok(PublishList { publish_jobs })
}

/// `POST /publish-jobs/{id}/result` (per-job token).
pub(crate) fn publish_result(
    tx: &Transaction<'_>,
    ctx: &Ctx,
    id: &str,
    token_hash: &str,
    result: &PublishResult,
) -> Result<StatusAck, OpError> {
    let row = match load_publish(tx, id)? {
        Some(row) if row.token_hash.as_deref() == Some(token_hash) => row,
        _ => return Err(OpError::Unauthorized),
    };
    if row.state != PublishState::Dispatched {
        return Err(OpError::Conflict(format!(
            "publish job is already {}",
            row.state
        )));
    }
    let state = match result.outcome {
        PublishOutcome::Succeeded => PublishState::Succeeded,
        PublishOutcome::Failed => PublishState::Failed,
    };
    tx.execute(
        "UPDATE publishes SET state = ?1, detail = ?2, lease_expires_at = NULL WHERE id = ?3",
        params![state.as_str(), result.detail, row.id],
    )?;
    push_history(
        tx,
        Lane::Publish,
        &row.id,
        state.as_str(),
        ctx.now_ms,
        result.detail.as_deref(),
    )?;
    Ok(StatusAck {
        id: row.id,
        state: state.as_str().to_string(),
    })
}

/// `POST /publish-jobs/{id}/lost`: a dispatched publish is recorded failed
/// and retried; any other is ignored.
pub(crate) fn report_publish_lost(
    tx: &Transaction<'_>,
    ctx: &Ctx,
    id: &str,
    report: &LostReport,
) -> Result<LostOutcome, OpError> {
    let row = load_publish(tx, id)?.ok_or_else(|| not_found("publish job", id))?;
    if row.state != PublishState::Dispatched {
        return Ok(LostOutcome {
            id: row.id,
            ignored: true,
            state: row.state.as_str().to_string(),
            retry_id: None,
        });
    }
    let retry = insert_publish(tx, ctx, &row.request, row.attempt + 1, Some(&row.id))?.id;
    let detail = format!("reported lost: {}", report.detail);
    tx.execute(
        "UPDATE publishes SET state = 'failed', detail = ?1, retry_id = ?2, \
         lease_expires_at = NULL WHERE id = ?3",
        params![detail, retry, row.id],
    )?;
    push_history(
        tx,
        Lane::Publish,
        &row.id,
        "failed",
        ctx.now_ms,
        Some(&detail),
    )?;
    Ok(LostOutcome {
        id: row.id,
        ignored: false,
        state: "failed".into(),
        retry_id: Some(retry),
    })
}

/// Checks a per-job token on a run without doing anything else (used to
/// answer 401 rather than 400 to a malformed body with a wrong token).
pub(crate) fn check_run_token(
    tx: &Transaction<'_>,
    id: &str,
    token_hash: &str,
) -> Result<(), OpError> {
    authorize_run(tx, id, token_hash).map(|_| ())
}

/// The same for a publish.
pub(crate) fn check_publish_token(
    tx: &Transaction<'_>,
    id: &str,
    token_hash: &str,
) -> Result<(), OpError> {
    match load_publish(tx, id)? {
        Some(row) if row.token_hash.as_deref() == Some(token_hash) => Ok(()),
        _ => Err(OpError::Unauthorized),
    }
}
