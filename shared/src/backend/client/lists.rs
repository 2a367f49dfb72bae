//! The active lists (`GET /jobs/active`, `GET /publish-jobs/active`), read
//! an entry at a time from the body: an entry that cannot be read is
//! skipped and named, never the whole answer.

use super::{BackendClient, counted, is_job_id};
use crate::backend::error::{BackendError, Call};
use crate::backend::types::{
    ActivePublish, ActivePublishes, ActiveRun, ActiveRuns, JobId, SkippedEntry,
};
use crate::lane::{Lane, LaneSpec};
use serde_json::value::RawValue;

/// A lane's active list: the lane whose list it is, its entries' type and
/// the field they come in. One list call serves every lane through it.
trait ActiveList: Sized {
    const LANE: Lane;
    /// The answer's field that holds the entries.
    const FIELD: &'static str;
    type Entry: for<'de> serde::Deserialize<'de> + WithId;
    /// The entries, as raw JSON borrowed from the body.
    fn field<'a>(raw: &RawList<'a>) -> Option<&'a RawValue>;
    fn new(now: jiff::Timestamp, entries: Vec<Self::Entry>, skipped: Vec<SkippedEntry>) -> Self;
}

impl ActiveList for ActiveRuns {
    const LANE: Lane = Lane::Run;
    const FIELD: &'static str = "jobs";
    type Entry = ActiveRun;
    fn field<'a>(raw: &RawList<'a>) -> Option<&'a RawValue> {
        raw.jobs
    }
    fn new(now: jiff::Timestamp, jobs: Vec<ActiveRun>, skipped: Vec<SkippedEntry>) -> Self {
        ActiveRuns { now, jobs, skipped }
    }
}

impl ActiveList for ActivePublishes {
    const LANE: Lane = Lane::Publish;
    const FIELD: &'static str = "publish_jobs";
    type Entry = ActivePublish;
    fn field<'a>(raw: &RawList<'a>) -> Option<&'a RawValue> {
        raw.publish_jobs
    }
    fn new(
        now: jiff::Timestamp,
        publish_jobs: Vec<ActivePublish>,
        skipped: Vec<SkippedEntry>,
    ) -> Self {
        ActivePublishes {
            now,
            publish_jobs,
            skipped,
        }
    }
}

impl BackendClient {
    /// `GET /jobs/active`: the runs the backend believes are driven. An
    /// entry that cannot be read (an unknown state, an invalid id) is left
    /// out and named in `skipped`, so the rest are judged.
    pub async fn active_runs(&self) -> Result<ActiveRuns, BackendError> {
        self.active().await
    }

    /// `GET /publish-jobs/active`: the publishes the backend believes are
    /// driven, read as [`BackendClient::active_runs`] reads runs.
    pub async fn active_publishes(&self) -> Result<ActivePublishes, BackendError> {
        self.active().await
    }

    /// The active list of `L`'s lane.
    async fn active<L: ActiveList>(&self) -> Result<L, BackendError> {
        counted(
            async {
                let spec: &LaneSpec = L::LANE.spec();
                let call: Call = spec.active_call;
                let answer = self.get(call, spec.active_path.into(), None).await?;
                let raw: RawList = self.parse(call, None, &answer)?;
                let (entries, skipped) = entries::<L::Entry>(L::field(&raw), L::FIELD);
                Ok(L::new(raw.now, entries, skipped))
            }
            .await,
        )
    }
}

/// A list answer read loosely: the backend's `now` and each list's entries
/// as raw JSON borrowed from the body, so one entry that does not fit is
/// skipped, not the whole answer, and a list of 10,000 entries is never
/// held as a tree of values (one entry at a time is read into its type).
#[derive(Debug, serde::Deserialize)]
pub(super) struct RawList<'a> {
    pub(super) now: jiff::Timestamp,
    #[serde(borrow, default)]
    pub(super) leases: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(super) jobs: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(super) publish_jobs: Option<&'a RawValue>,
}

/// Calls `each` with every entry of a list field, in order, as raw JSON
/// borrowed from the body (none when absent or not a list), without
/// collecting them first.
pub(super) fn each_entry<'de>(list: Option<&'de RawValue>, each: impl FnMut(usize, &'de RawValue)) {
    struct Each<F>(F);
    impl<'de, F: FnMut(usize, &'de RawValue)> serde::de::Visitor<'de> for Each<F> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a list")
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
            let mut index = 0;
            while let Some(item) = seq.next_element::<&'de RawValue>()? {
                (self.0)(index, item);
                index += 1;
            }
            Ok(())
        }
    }
    if let Some(raw) = list {
        let mut de = serde_json::Deserializer::from_str(raw.get());
        // Not a list: no entry (the body as a whole was read already).
        let _ = serde::Deserializer::deserialize_seq(&mut de, Each(each));
    }
}

/// An entry type with an id checked as a job id.
pub(super) trait WithId {
    fn id(&self) -> &str;
}

impl WithId for ActiveRun {
    fn id(&self) -> &str {
        &self.id
    }
}

impl WithId for ActivePublish {
    fn id(&self) -> &str {
        &self.id
    }
}

/// The entries of list `field` (none when absent or not a list) read as
/// `T`, and the ones skipped with why. Read straight from the body into a
/// vector sized by a first pass that only counts them: no vector of raw
/// entries, no second copy (at 100,000 entries those were 2 and 5 MB
/// beside the body).
fn entries<'de, T: serde::Deserialize<'de> + WithId>(
    list: Option<&'de RawValue>,
    field: &str,
) -> (Vec<T>, Vec<SkippedEntry>) {
    let mut count = 0;
    each_entry(list, |_, _| count += 1);
    let mut read = Vec::with_capacity(count);
    let mut skipped = Vec::new();
    each_entry(list, |index, item| match entry(index, item, field) {
        Ok(entry) => read.push(entry),
        Err(skip) => skipped.push(skip),
    });
    (read, skipped)
}

/// Entry `index` of list `field` read as `T` (with a valid job id), or
/// why it is skipped.
pub(super) fn entry<'de, T: serde::Deserialize<'de> + WithId>(
    index: usize,
    item: &'de RawValue,
    field: &str,
) -> Result<T, SkippedEntry> {
    let mut de = serde_json::Deserializer::from_str(item.get());
    match serde_path_to_error::deserialize::<_, T>(&mut de) {
        Ok(entry) if is_job_id(entry.id()) => Ok(entry),
        Ok(_) => Err(SkippedEntry {
            index,
            id: None,
            why: format!("{field}[{index}].id: not a valid job id"),
        }),
        Err(error) => Err(SkippedEntry {
            index,
            id: readable_id(item),
            why: format!("{field}[{index}].{}: {}", error.path(), error.inner()),
        }),
    }
}

/// The id of an entry that could not be read as a whole, when it has a
/// valid one (only for naming the skipped entry).
fn readable_id(item: &RawValue) -> Option<JobId> {
    serde_json::from_str::<serde_json::Value>(item.get())
        .ok()?
        .get("id")
        .and_then(serde_json::Value::as_str)
        .filter(|id| is_job_id(id))
        .map(str::to_owned)
}
