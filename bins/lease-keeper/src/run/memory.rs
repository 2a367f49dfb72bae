//! What the report loop remembers between ticks, and when it forgets:
//! each tick it notes the entries that left the view while live, keeps a
//! [`JobMemory`](crate::plan::failures::JobMemory) only of the Jobs that
//! need one, re-keys a memory whose summary the cache replaced, and prunes
//! tokens, back-offs and notes whose job has no entry left.

use super::reports::Reporter;
use crate::plan::failures::{EvidenceState, Memories, remember_jobs};
use crate::report::Report;
use crate::tokens::TokenKey;
use std::collections::BTreeSet;
use std::sync::Arc;
use tcab_shared::job_cache::{JobSummary, Snapshot};
use tokio::time::Instant;

/// A note kept about a job after its Job is gone, for its lost report.
#[derive(Debug, Clone)]
pub(super) struct LostNote {
    pub(super) detail: String,
    pub(super) at: Instant,
}

/// An entry that left the view while live, kept until its death is settled.
#[derive(Debug, Clone)]
pub(super) struct Vanished {
    pub(super) last: Arc<JobSummary>,
    pub(super) at: Instant,
}

/// Whether the report loop keeps a
/// [`JobMemory`](crate::plan::failures::JobMemory) of a Job: every Job but
/// one running well (live with a ready pod, no sign of failure, not
/// deleted) and one with no pod yet (live, no pod counted at all, no sign
/// of failure, not deleted). Its memory's first sighting serves only the
/// start check of a Job whose pod is not ready, which reads that pod (a Job
/// with none is the refusal check's, which needs no memory: its grace runs
/// from the Job's creation, `super::refusals`), so the start grace runs from the
/// first tick its Job counts a pod (`status.active`, `failed` or
/// `terminating` above 0); its evidence serves only a Job that shows failure
/// or vanished. So at scale, where most Jobs run, most keep none; a Job
/// that stops running well, or gets its first pod, is remembered from then.
fn needs_memory(job: &JobSummary) -> bool {
    let calm = job.is_live() && !job.shows_failure() && !job.gone && !job.deleting;
    let running_well = calm && job.ready_pods > 0;
    let no_pod_yet =
        calm && job.active_pods == 0 && job.failed_pods == 0 && job.terminating_pods == 0;
    !running_well && !no_pod_yet
}

/// A hash map keeps its table when entries leave: once the memories are
/// mostly gone (a burst of pending Jobs started running), the room goes too.
fn shed_room(memory: &mut Memories) {
    if memory.capacity() > 4 * memory.len().max(64) {
        memory.shrink_to_fit();
    }
}

impl Reporter {
    /// Remembers new entries, notes the ones that left the view while live,
    /// forgets the rest, and prunes tokens, back-offs and notes.
    ///
    /// Names are looked up in the snapshot by binary search (it is sorted
    /// by name) and nothing of it is copied: with many cached Jobs a copy
    /// or an index per tick is most of the lease-keeper's memory.
    pub(super) fn remember(&mut self, snapshot: &Snapshot, now: Instant) {
        let present = |name: &str| snapshot.binary_search_by(|j| j.name().cmp(name)).is_ok();
        for last in self.last_seen.iter() {
            if present(last.name()) || !last.is_live() {
                continue;
            }
            tracing::info!(job = %last.name(), job_id = last.job_id().unwrap_or(""), pod = last.orphan_pod().unwrap_or(""), "a live Job left the view (deleted, and no pod of it runs on): its pod is read and its death judged");
            self.vanished.insert(
                last.name().to_string(),
                Vanished {
                    last: Arc::clone(last),
                    at: now,
                },
            );
        }
        let keep_vanished = self.lease_length * 2;
        self.vanished.retain(|name, v| {
            !present(name) && now.saturating_duration_since(v.at) < keep_vanished
        });
        self.last_seen = Arc::clone(snapshot);

        let known = |name: &str| present(name) || self.vanished.contains_key(name);
        // A Job running well needs no memory (see `needs_memory`); one
        // with evidence read keeps it while it has an entry. A kept memory
        // whose key is an older summary than the view's is noted, to be
        // re-keyed below: the walk over the memories finds them, so no
        // lookup is made for every cached Job.
        let mut rekey = Vec::new();
        self.memory.retain(|key, mem| {
            let name = key.name();
            let at = snapshot.binary_search_by(|j| j.name().cmp(name)).ok();
            let running_well = at.is_some_and(|i| !needs_memory(&snapshot[i]));
            let keep = known(name) && (mem.evidence != EvidenceState::Missing || !running_well);
            if let Some(i) = at.filter(|&i| keep && !Arc::ptr_eq(&key.0, &snapshot[i])) {
                rekey.push(i);
            }
            keep
        });
        shed_room(&mut self.memory);
        self.evidence.retain(|name, _| known(name));
        self.never_started.retain(|name, _| present(name));
        self.judged_dead
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|name| present(name));
        let jobs = rekey
            .iter()
            .map(|&i| (&snapshot[i], false))
            .chain(
                snapshot
                    .iter()
                    .filter(|job| needs_memory(job))
                    .map(|job| (job, true)),
            )
            .chain(self.vanished.values().map(|v| (&v.last, true)));
        remember_jobs(&mut self.memory, jobs, now);
        self.failing.observe(snapshot, now);
        // A Job that vanished keeps its token until its death is settled.
        let entries = self.entries(snapshot);
        for (key, reason) in self.store.prune(&entries, now, self.lease_length) {
            tracing::debug!(job_id = %key.job_id, claim = %key.claim, reason = reason.as_str(), "token dropped");
        }
        // Which remembered claims and ids still have an entry: the few
        // remembered ones are looked up in one scan of the entries, so no
        // index of every entry is built each tick (at 100,000 Jobs such
        // sets were megabytes a tick).
        let (claimed, listed) = {
            let claims: BTreeSet<(&str, &str)> = self
                .handled_deaths
                .iter()
                .chain(self.prepared.keys())
                .map(|k| (k.job_id.as_str(), k.claim.as_str()))
                .collect();
            let ids: BTreeSet<&str> = self
                .backoffs
                .keys()
                .filter(|(report, _)| *report == Report::Death)
                .map(|(_, id)| id.as_str())
                .chain(self.lost_notes.keys().map(String::as_str))
                .collect();
            let (mut claimed, mut listed) = (BTreeSet::new(), BTreeSet::new());
            if !claims.is_empty() || !ids.is_empty() {
                for job in entries.iter() {
                    let Some(id) = job.job_id() else {
                        continue;
                    };
                    if ids.contains(id) {
                        listed.insert(id);
                    }
                    if let Some(claim) = job.claim()
                        && claims.contains(&(id, claim))
                    {
                        claimed.insert((id, claim));
                    }
                }
            }
            (claimed, listed)
        };
        let claimed = |key: &TokenKey| claimed.contains(&(key.job_id.as_str(), key.claim.as_str()));
        self.handled_deaths.retain(|key| claimed(key));
        self.prepared.retain(|key, _| claimed(key));
        self.backoffs
            .retain(|(report, id)| *report != Report::Death || listed.contains(id.as_str()));
        // A job ended here is lost at once; after two leases its lease has
        // lapsed in any case.
        let keep = self.lease_length * 2;
        self.ended_publishes
            .retain(|_, at| now.saturating_duration_since(*at) < keep);
        // A note lasts while its job has an entry, and two leases after.
        self.lost_notes.retain(|id, note| {
            listed.contains(id.as_str()) || now.saturating_duration_since(note.at) < keep
        });
        for (id, note) in self.lost_notes.iter_mut() {
            if listed.contains(id.as_str()) {
                note.at = now;
            }
        }
    }

    pub(super) fn note(&mut self, job_id: &str, detail: &str, now: Instant) {
        self.lost_notes.insert(
            job_id.to_owned(),
            LostNote {
                detail: detail.to_owned(),
                at: now,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::failures::{JobMemory, MemoryKey};
    use tcab_shared::job_cache::JobPhase;

    #[test]
    fn the_memories_give_their_room_back_once_mostly_gone() {
        let number = |name: &str| name[1..].parse::<usize>().unwrap_or(usize::MAX);
        let mut map: Memories = (0..10_000)
            .map(|i| {
                let memory = JobMemory {
                    first_seen: Instant::now(),
                    evidence: EvidenceState::Missing,
                    last_start_check: None,
                };
                let job = JobSummary::named(&format!("j{i}"), None, None);
                (MemoryKey(Arc::new(job)), memory)
            })
            .collect();
        let full = map.capacity();
        map.retain(|key, _| number(key.name()) < 5_000);
        shed_room(&mut map);
        // (Removed entries leave tombstones, which `capacity` counts out.)
        assert!(map.capacity() > full / 2, "half left: the room is kept");
        map.retain(|key, _| number(key.name()) < 100);
        shed_room(&mut map);
        assert!(map.capacity() < full / 10, "{} of {full}", map.capacity());
        assert_eq!(map.len(), 100);
    }

    #[test]
    fn a_job_without_a_pod_yet_is_remembered_from_its_first_pod_or_sign() {
        let waiting = JobSummary::named("w", None, None);
        assert!(!needs_memory(&waiting), "no pod: nothing to check yet");
        for remembered in [
            JobSummary {
                active_pods: 1,
                ..waiting.clone()
            },
            JobSummary {
                failed_pods: 1,
                ..waiting.clone()
            },
            JobSummary {
                terminating_pods: 1,
                ..waiting.clone()
            },
            JobSummary {
                deleting: true,
                ..waiting.clone()
            },
            JobSummary {
                gone: true,
                ..waiting.clone()
            },
            JobSummary {
                phase: JobPhase::Failed,
                ..waiting.clone()
            },
        ] {
            assert!(needs_memory(&remembered), "{remembered:?}");
        }
    }

    #[test]
    fn only_a_job_running_well_is_not_remembered() {
        let running = JobSummary {
            names: tcab_shared::job_cache::JobNames::new("d", None, None),
            active_pods: 1,
            ready_pods: 1,
            ..JobSummary::default()
        };
        assert!(!needs_memory(&running));
        for not_well in [
            JobSummary {
                ready_pods: 0,
                ..running.clone()
            },
            JobSummary {
                failed_pods: 1,
                ..running.clone()
            },
            JobSummary {
                terminating_pods: 1,
                ..running.clone()
            },
            JobSummary {
                deleting: true,
                ..running.clone()
            },
            JobSummary {
                gone: true,
                ..running.clone()
            },
            JobSummary {
                phase: JobPhase::Failed,
                ..running.clone()
            },
        ] {
            assert!(needs_memory(&not_well), "{not_well:?}");
        }
    }
}
