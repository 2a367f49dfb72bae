//! The lease renewal call (`POST {jobs}/leases` of a lane): what was
//! renewed comes back as positions in the ask, so no id is copied.

use super::lists::{RawList, WithId, each_entry, entry};
use super::{BackendClient, counted, to_body, valid_input_id};
use crate::backend::error::BackendError;
use crate::backend::types::{RenewedLeases, SkippedEntry};
use crate::lane::{Lane, LaneSpec};
use reqwest::StatusCode;
impl BackendClient {
    /// `POST {jobs}/leases` of `lane` (`/jobs/leases`,
    /// `/publish-jobs/leases`): renews the leases of `ids`; the answer leaves
    /// out the ids that are not driven. What was renewed comes back as
    /// positions in `ids`, so no id is copied (a round renews every live Job).
    pub async fn renew_leases<S: AsRef<str> + Sync>(
        &self,
        lane: Lane,
        ids: &[S],
    ) -> Result<RenewedLeases, BackendError> {
        counted(self.renew(lane.spec(), ids).await)
    }

    async fn renew<S: AsRef<str> + Sync>(
        &self,
        spec: &LaneSpec,
        ids: &[S],
    ) -> Result<RenewedLeases, BackendError> {
        let (call, path) = (spec.leases_call, spec.leases_path);
        let job_ids: Vec<&str> = ids.iter().map(AsRef::as_ref).collect();
        for id in &job_ids {
            valid_input_id(call, id)?;
        }
        let body = to_body(&LeaseBody { job_ids: &job_ids });
        let answer = self.post(call, path.into(), None, Some(body)).await?;
        // Only the contract's 200 body is a renewal. A 204, another 2xx or a
        // body without `now` and `leases` renewed nothing we can trust, and a
        // renewal taken for a success when it was not lets a lease lapse
        // under a live Job.
        if answer.status != StatusCode::OK {
            return Err(BackendError::malformed(
                call,
                None,
                answer.status.as_u16(),
                format!(
                    "expected 200 with the renewed leases, got {}",
                    answer.status
                ),
            ));
        }
        // One odd entry must not fail the whole renewal (and close the
        // gate): it is skipped, counted as not renewed, and named.
        let raw: RawList = self.parse(call, None, &answer)?;
        // Each lease is read and matched in turn: no list of parsed leases
        // is held beside the body.
        let ask = Ask::new(&job_ids);
        let mut renewed = Vec::with_capacity(job_ids.len());
        let mut skipped = Vec::new();
        each_entry(raw.leases, |index, item| {
            let lease: LeaseEntry = match entry(index, item, "leases") {
                Ok(lease) => lease,
                Err(skip) => return skipped.push(skip),
            };
            match ask.position(&lease.id) {
                Some(position) => renewed.push(position),
                None => skipped.push(SkippedEntry {
                    index,
                    why: format!("leases[{index}].id: {:?} was not asked for", lease.id),
                    id: Some(lease.id.into_owned()),
                }),
            }
        });
        Ok(RenewedLeases {
            now: raw.now,
            renewed,
            skipped,
        })
    }
}

/// The body of a lease renewal, borrowing the ids (the wire form of
/// [`LeaseRequest`](crate::backend::types::LeaseRequest)).
#[derive(serde::Serialize)]
struct LeaseBody<'a> {
    job_ids: &'a [&'a str],
}

/// The ids of a renewal's ask, looked up by value: the planner sends them
/// sorted, so a lookup is a binary search of the ask itself; an unsorted
/// ask is indexed once. 10,000 answered leases are never 10,000 scans.
enum Ask<'a> {
    Sorted(&'a [&'a str]),
    Indexed(Vec<(&'a str, usize)>),
}

impl<'a> Ask<'a> {
    fn new(ids: &'a [&'a str]) -> Self {
        if ids.is_sorted() {
            return Ask::Sorted(ids);
        }
        let mut index: Vec<(&str, usize)> = ids.iter().copied().zip(0..).collect();
        index.sort_unstable();
        Ask::Indexed(index)
    }

    /// The position in the ask of `id`, if it was asked for.
    fn position(&self, id: &str) -> Option<usize> {
        match self {
            Ask::Sorted(ids) => ids.binary_search(&id).ok(),
            Ask::Indexed(index) => index
                .binary_search_by(|(asked, _)| (*asked).cmp(id))
                .ok()
                .map(|at| index[at].1),
        }
    }
}

/// One entry of a renewal answer, its id borrowed from the body. The
/// expiry is read only to check the entry is a lease.
#[derive(serde::Deserialize)]
struct LeaseEntry<'a> {
    #[serde(borrow)]
    id: std::borrow::Cow<'a, str>,
    #[allow(dead_code)]
    lease_expires_at: jiff::Timestamp,
}

impl WithId for LeaseEntry<'_> {
    fn id(&self) -> &str {
        &self.id
    }
}
