//! The SQLite store: schema, opening, and reading rows. Times are stored as
//! integer milliseconds since the Unix epoch; `queue_seq` is an
//! AUTOINCREMENT key, so it is monotonic and never reused.

use crate::audit::{AuditEntry, Caller};
use crate::clock::ts_from_ms;
use crate::model::{FailureKind, PublishState, RunState};
use crate::rules::LostMark;
use jiff::Timestamp;
use rusqlite::{Connection, OptionalExtension, Row, Transaction, params};
use serde::Serialize;
use std::path::Path;
use std::time::Duration;

const SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS runs (
    queue_seq            INTEGER PRIMARY KEY AUTOINCREMENT,
    id                   TEXT NOT NULL UNIQUE,
    harness              TEXT NOT NULL,
    model                TEXT NOT NULL,
    case_name            TEXT,
    jam                  TEXT,
    launch_request       TEXT NOT NULL,
    state                TEXT NOT NULL,
    attempt              INTEGER NOT NULL,
    token_hash           TEXT,
    lease_expires_at     INTEGER,
    enqueued_at          INTEGER NOT NULL,
    failure_kind         TEXT,
    detail               TEXT,
    record               TEXT,
    record_state         TEXT,
    finished_from_record INTEGER NOT NULL DEFAULT 0,
    lost                 INTEGER NOT NULL DEFAULT 0,
    retry_of             TEXT,
    retry_id             TEXT
);
CREATE INDEX IF NOT EXISTS runs_by_state ON runs(state, queue_seq);
CREATE TABLE IF NOT EXISTS publishes (
    queue_seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    id               TEXT NOT NULL UNIQUE,
    request          TEXT NOT NULL,
    state            TEXT NOT NULL,
    attempt          INTEGER NOT NULL,
    token_hash       TEXT,
    lease_expires_at INTEGER,
    enqueued_at      INTEGER NOT NULL,
    dispatched_at    INTEGER,
    detail           TEXT,
    retry_of         TEXT,
    retry_id         TEXT
);
CREATE INDEX IF NOT EXISTS publishes_by_state ON publishes(state, queue_seq);
CREATE TABLE IF NOT EXISTS history (
    seq    INTEGER PRIMARY KEY AUTOINCREMENT,
    lane   TEXT NOT NULL,
    job_id TEXT NOT NULL,
    state  TEXT NOT NULL,
    at     INTEGER NOT NULL,
    detail TEXT,
    wall_at INTEGER,
    call   TEXT,
    caller TEXT,
    claim  TEXT
);
CREATE INDEX IF NOT EXISTS history_by_job ON history(lane, job_id, seq);
CREATE TABLE IF NOT EXISTS harnesses (
    name         TEXT PRIMARY KEY,
    max_parallel INTEGER NOT NULL
);
"#;

/// Opens (creating when absent) the database at `path`, or an in-memory one.
pub(crate) fn open(path: Option<&Path>) -> rusqlite::Result<Connection> {
    let conn = match path {
        Some(p) => Connection::open(p)?,
        None => Connection::open_in_memory()?,
    };
    conn.busy_timeout(Duration::from_secs(5))?;
    let _mode: String = conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.execute_batch(SCHEMA)?;
    add_audit_columns(&conn)?;
    Ok(conn)
}

/// The audit columns of `history` (see [`crate::audit`]), added to a
/// database made before they existed.
const AUDIT_COLUMNS: [&str; 4] = ["wall_at INTEGER", "call TEXT", "caller TEXT", "claim TEXT"];

fn add_audit_columns(conn: &Connection) -> rusqlite::Result<()> {
    let mut stmt = conn.prepare("PRAGMA table_info(history)")?;
    let have: Vec<String> = stmt
        .query_map([], |r| r.get::<_, String>(1))?
        .collect::<rusqlite::Result<_>>()?;
    for column in AUDIT_COLUMNS {
        let name = column.split(' ').next().unwrap_or(column);
        if !have.iter().any(|h| h == name) {
            conn.execute_batch(&format!("ALTER TABLE history ADD COLUMN {column}"))?;
        }
    }
    Ok(())
}

/// Which queue a history entry belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lane {
    Run,
    Publish,
}

impl Lane {
    fn as_str(self) -> &'static str {
        match self {
            Lane::Run => "run",
            Lane::Publish => "publish",
        }
    }
}

/// One state change of a job.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct HistoryEntry {
    pub state: String,
    pub at: Timestamp,
    pub detail: Option<String>,
}

/// Appends a state change to a job's history.
pub(crate) fn push_history(
    tx: &Transaction<'_>,
    lane: Lane,
    job_id: &str,
    state: &str,
    at_ms: i64,
    detail: Option<&str>,
) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO history (lane, job_id, state, at, detail) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![lane.as_str(), job_id, state, at_ms, detail],
    )?;
    Ok(())
}

/// A job's history, oldest first.
pub(crate) fn history(
    tx: &Transaction<'_>,
    lane: Lane,
    job_id: &str,
) -> rusqlite::Result<Vec<HistoryEntry>> {
    let mut stmt = tx.prepare_cached(
        "SELECT state, at, detail FROM history WHERE lane = ?1 AND job_id = ?2 ORDER BY seq",
    )?;
    let rows = stmt.query_map(params![lane.as_str(), job_id], |r| {
        Ok(HistoryEntry {
            state: r.get(0)?,
            at: ts_from_ms(r.get(1)?),
            detail: r.get(2)?,
        })
    })?;
    rows.collect()
}

/// The last history position (0 when empty).
pub(crate) fn last_history_seq(tx: &Transaction<'_>) -> rusqlite::Result<i64> {
    tx.query_row("SELECT COALESCE(MAX(seq), 0) FROM history", [], |r| {
        r.get(0)
    })
}

/// Stamps the history entries after `after` with the request that made
/// them: its wall time, call and caller, and the claim tag of each job's
/// token as it is now (a waiting job has none).
pub(crate) fn stamp_history(
    tx: &Transaction<'_>,
    after: i64,
    wall_ms: i64,
    caller: Option<&Caller>,
) -> rusqlite::Result<()> {
    tx.execute(
        "UPDATE history SET wall_at = ?1, call = ?2, caller = ?3 WHERE seq > ?4",
        params![
            wall_ms,
            caller.map(|c| c.call.as_str()),
            caller.and_then(|c| c.agent.as_deref()),
            after
        ],
    )?;
    for (lane, table) in [(Lane::Run, "runs"), (Lane::Publish, "publishes")] {
        tx.execute(
            &format!(
                "UPDATE history SET claim = (SELECT substr(t.token_hash, 1, 8) FROM {table} t \
                 WHERE t.id = history.job_id) \
                 WHERE seq > ?1 AND lane = ?2 AND state NOT IN ('queued', 'pending')"
            ),
            params![after, lane.as_str()],
        )?;
    }
    Ok(())
}

/// Every history entry after `after`, oldest first, at most `limit`.
pub(crate) fn audit_history(
    tx: &Transaction<'_>,
    after: i64,
    limit: i64,
) -> rusqlite::Result<Vec<AuditEntry>> {
    let mut stmt = tx.prepare_cached(
        "SELECT seq, lane, job_id, state, at, detail, wall_at, call, caller, claim \
         FROM history WHERE seq > ?1 ORDER BY seq LIMIT ?2",
    )?;
    let rows = stmt.query_map(params![after, limit], |r| {
        Ok(AuditEntry {
            seq: r.get(0)?,
            lane: r.get(1)?,
            job_id: r.get(2)?,
            state: r.get(3)?,
            at: ts_from_ms(r.get(4)?),
            detail: r.get(5)?,
            wall_at: r.get::<_, Option<i64>>(6)?.map(ts_from_ms),
            call: r.get(7)?,
            caller: r.get(8)?,
            claim: r.get(9)?,
        })
    })?;
    rows.collect()
}

fn bad_column(idx: usize, what: &str, value: &str) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(
        idx,
        rusqlite::types::Type::Text,
        format!("unknown {what} {value:?} in the database").into(),
    )
}

/// A run's row.
#[derive(Debug, Clone)]
pub(crate) struct RunRow {
    pub queue_seq: i64,
    pub id: String,
    pub harness: String,
    pub model: String,
    pub case: Option<String>,
    pub jam: Option<String>,
    pub launch_request: serde_json::Value,
    pub state: RunState,
    pub attempt: i64,
    pub token_hash: Option<String>,
    pub lease_expires_at: Option<i64>,
    pub enqueued_at: i64,
    pub failure_kind: Option<FailureKind>,
    pub detail: Option<String>,
    pub record: Option<serde_json::Value>,
    pub record_state: Option<RunState>,
    pub finished_from_record: bool,
    pub lost: LostMark,
    pub retry_of: Option<String>,
    pub retry_id: Option<String>,
}

/// The column list that [`RunRow::from_row`] reads, in order.
pub(crate) const RUN_COLUMNS: &str = "queue_seq, id, harness, model, case_name, jam, launch_request, \
     state, attempt, token_hash, lease_expires_at, enqueued_at, failure_kind, detail, record, \
     record_state, finished_from_record, lost, retry_of, retry_id";

fn json_column(r: &Row<'_>, idx: usize) -> rusqlite::Result<Option<serde_json::Value>> {
    let text: Option<String> = r.get(idx)?;
    text.map(|t| {
        serde_json::from_str(&t).map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(idx, rusqlite::types::Type::Text, e.into())
        })
    })
    .transpose()
}

fn run_state_column(r: &Row<'_>, idx: usize) -> rusqlite::Result<Option<RunState>> {
    let text: Option<String> = r.get(idx)?;
    text.map(|t| RunState::parse(&t).ok_or_else(|| bad_column(idx, "run state", &t)))
        .transpose()
}

impl RunRow {
    fn from_row(r: &Row<'_>) -> rusqlite::Result<Self> {
        let failure_kind: Option<String> = r.get(12)?;
        Ok(RunRow {
            queue_seq: r.get(0)?,
            id: r.get(1)?,
            harness: r.get(2)?,
            model: r.get(3)?,
            case: r.get(4)?,
            jam: r.get(5)?,
            launch_request: json_column(r, 6)?.unwrap_or(serde_json::Value::Null),
            state: run_state_column(r, 7)?.ok_or_else(|| bad_column(7, "run state", "NULL"))?,
            attempt: r.get(8)?,
            token_hash: r.get(9)?,
            lease_expires_at: r.get(10)?,
            enqueued_at: r.get(11)?,
            failure_kind: failure_kind
                .map(|k| FailureKind::parse(&k).ok_or_else(|| bad_column(12, "failure kind", &k)))
                .transpose()?,
            detail: r.get(13)?,
            record: json_column(r, 14)?,
            record_state: run_state_column(r, 15)?,
            finished_from_record: r.get(16)?,
            lost: LostMark::from_i64(r.get(17)?),
            retry_of: r.get(18)?,
            retry_id: r.get(19)?,
        })
    }
}

/// Loads one run.
pub(crate) fn load_run(tx: &Transaction<'_>, id: &str) -> rusqlite::Result<Option<RunRow>> {
    tx.query_row(
        &format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = ?1"),
        [id],
        RunRow::from_row,
    )
    .optional()
}

/// Loads the runs matching a SQL condition (with its parameters), in queue order.
pub(crate) fn select_runs(
    tx: &Transaction<'_>,
    condition: &str,
    args: impl rusqlite::Params,
) -> rusqlite::Result<Vec<RunRow>> {
    let mut stmt = tx.prepare(&format!(
        "SELECT {RUN_COLUMNS} FROM runs WHERE {condition} ORDER BY queue_seq"
    ))?;
    let rows = stmt.query_map(args, RunRow::from_row)?;
    rows.collect()
}

/// The first run (lowest `queue_seq`) matching a SQL condition.
pub(crate) fn first_run(
    tx: &Transaction<'_>,
    condition: &str,
    args: impl rusqlite::Params,
) -> rusqlite::Result<Option<RunRow>> {
    tx.query_row(
        &format!("SELECT {RUN_COLUMNS} FROM runs WHERE {condition} ORDER BY queue_seq LIMIT 1"),
        args,
        RunRow::from_row,
    )
    .optional()
}

/// A publish's row.
#[derive(Debug, Clone)]
pub(crate) struct PublishRow {
    pub queue_seq: i64,
    pub id: String,
    pub request: serde_json::Value,
    pub state: PublishState,
    pub attempt: i64,
    pub token_hash: Option<String>,
    pub lease_expires_at: Option<i64>,
    pub enqueued_at: i64,
    pub dispatched_at: Option<i64>,
    pub detail: Option<String>,
    pub retry_of: Option<String>,
    pub retry_id: Option<String>,
}

/// The column list that [`PublishRow::from_row`] reads, in order.
pub(crate) const PUBLISH_COLUMNS: &str = "queue_seq, id, request, state, attempt, token_hash, \
     lease_expires_at, enqueued_at, dispatched_at, detail, retry_of, retry_id";

impl PublishRow {
    fn from_row(r: &Row<'_>) -> rusqlite::Result<Self> {
        let state: String = r.get(3)?;
        Ok(PublishRow {
            queue_seq: r.get(0)?,
            id: r.get(1)?,
            request: json_column(r, 2)?.unwrap_or(serde_json::Value::Null),
            state: PublishState::parse(&state)
                .ok_or_else(|| bad_column(3, "publish state", &state))?,
            attempt: r.get(4)?,
            token_hash: r.get(5)?,
            lease_expires_at: r.get(6)?,
            enqueued_at: r.get(7)?,
            dispatched_at: r.get(8)?,
            detail: r.get(9)?,
            retry_of: r.get(10)?,
            retry_id: r.get(11)?,
        })
    }
}

/// Loads one publish.
pub(crate) fn load_publish(tx: &Transaction<'_>, id: &str) -> rusqlite::Result<Option<PublishRow>> {
    tx.query_row(
        &format!("SELECT {PUBLISH_COLUMNS} FROM publishes WHERE id = ?1"),
        [id],
        PublishRow::from_row,
    )
    .optional()
}

/// The first publish (lowest `queue_seq`) matching a SQL condition.
pub(crate) fn first_publish(
    tx: &Transaction<'_>,
    condition: &str,
    args: impl rusqlite::Params,
) -> rusqlite::Result<Option<PublishRow>> {
    tx.query_row(
        &format!(
            "SELECT {PUBLISH_COLUMNS} FROM publishes WHERE {condition} ORDER BY queue_seq LIMIT 1"
        ),
        args,
        PublishRow::from_row,
    )
    .optional()
}

/// Loads the publishes matching a SQL condition, in queue order.
pub(crate) fn select_publishes(
    tx: &Transaction<'_>,
    condition: &str,
    args: impl rusqlite::Params,
) -> rusqlite::Result<Vec<PublishRow>> {
    let mut stmt = tx.prepare(&format!(
        "SELECT {PUBLISH_COLUMNS} FROM publishes WHERE {condition} ORDER BY queue_seq"
    ))?;
    let rows = stmt.query_map(args, PublishRow::from_row)?;
    rows.collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_opens_twice_on_one_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sim.db");
        {
            let mut c = open(Some(&path)).unwrap();
            let tx = c.transaction().unwrap();
            push_history(&tx, Lane::Run, "a", "queued", 1_000, None).unwrap();
            tx.commit().unwrap();
        }
        let mut c = open(Some(&path)).unwrap();
        let tx = c.transaction().unwrap();
        let h = history(&tx, Lane::Run, "a").unwrap();
        assert_eq!(h.len(), 1);
        assert_eq!(h[0].at.as_millisecond(), 1_000);
        assert!(history(&tx, Lane::Publish, "a").unwrap().is_empty());
    }

    #[test]
    fn a_database_made_before_the_audit_columns_gets_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        {
            let c = Connection::open(&path).unwrap();
            c.execute_batch(
                "CREATE TABLE history (seq INTEGER PRIMARY KEY AUTOINCREMENT, lane TEXT NOT NULL, \
                 job_id TEXT NOT NULL, state TEXT NOT NULL, at INTEGER NOT NULL, detail TEXT); \
                 INSERT INTO history (lane, job_id, state, at) VALUES ('run', 'a', 'queued', 5);",
            )
            .unwrap();
        }
        let mut c = open(Some(&path)).unwrap();
        let tx = c.transaction().unwrap();
        let before = last_history_seq(&tx).unwrap();
        assert_eq!(before, 1);
        push_history(&tx, Lane::Run, "a", "dispatched", 9, None).unwrap();
        let caller = Caller::new("POST", "/jobs/next", Some("tcab-dispatcher/1"));
        stamp_history(&tx, before, 77, Some(&caller)).unwrap();
        let all = audit_history(&tx, 0, 10).unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].wall_at, None, "the old entry is left unstamped");
        assert_eq!(all[1].wall_at.map(|t| t.as_millisecond()), Some(77));
        assert_eq!(all[1].call.as_deref(), Some("POST /jobs/next"));
        assert_eq!(all[1].caller.as_deref(), Some("tcab-dispatcher/1"));
        assert_eq!(all[1].claim, None, "no such run row, so no token");
        assert_eq!(audit_history(&tx, 1, 10).unwrap().len(), 1);
    }
}
