//! Jobs the cluster gives no pod: pure, over the cached Jobs, the wall time
//! and the Job controller's refusals to create pods.
//!
//! On a real cluster a Job is not a pod: admission (PodSecurity, a
//! ResourceQuota, a LimitRange, a ValidatingAdmissionPolicy or webhook, a
//! missing ServiceAccount) can refuse every pod the Job controller makes
//! for it. The Job then shows nothing but a status that counts no pod,
//! while the controller records each refusal as a `FailedCreate` Warning
//! Event on the Job and tries again with back-off. Left alone, such a Job
//! holds its lane's slot and its lease until its deadline (hours).
//!
//! - [`podless`]: the live Jobs that have counted no pod of any kind for
//!   longer than the start grace, counted from their creation.
//! - [`judge_refusals`]: which of them the cluster refuses (a recent
//!   `FailedCreate` Event about that very Job, matched by uid) and which
//!   wait with no refusal to be seen (a Job controller that is down, a Job
//!   suspended by a queueing system): those are never failed by this rule.
//!   A refusal is recent while its last sighting is within
//!   [`REFUSAL_FRESH`]: the Job controller retries a refused create at most
//!   a minute apart, and its Event recorder lets a repeat through at least
//!   every five minutes, so an older one is no longer being repeated (the
//!   Job controller stopped trying: it may be down).
//!
//! A pod that appears within the grace (a quota freed in time) makes its
//! Job count a pod, and the rule no longer applies to it.

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Event;
use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use tcab_shared::job_cache::{JobSummary, summaries};

/// A live Job with no pod past the start grace: borrowed from the view, so
/// a tick that only counts them allocates nothing (a Job controller that is
/// down leaves every Job of a large view here).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Podless<'a> {
    /// The Job.
    pub job: &'a JobSummary,
    /// How long since its creation, on the lease-keeper's clock.
    pub age: Duration,
}

impl Podless<'_> {
    /// The Job's name.
    pub(crate) fn name(&self) -> &str {
        self.job.name()
    }
}

/// How recent a refusal must be to fail a Job: twice the longest the Job
/// controller's Event recorder may go without recording a repeat (its spam
/// filter refills one Event per object every five minutes).
pub(crate) const REFUSAL_FRESH: SignedDuration = SignedDuration::from_mins(10);

/// One `FailedCreate` Event of the Job controller: it could not create a
/// pod for the Job, and the API server's words say why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// The uid of the Job it is about.
    pub job_uid: String,
    /// The Event's message: `Error creating: <the API server's refusal>`.
    pub message: String,
    /// When it was last seen (the newest of its timestamps), if it says.
    pub last_seen: Option<Timestamp>,
}

impl Refusal {
    /// The refusal an Event records, if it is one about a Job.
    pub(crate) fn of_event(event: &Event) -> Option<Refusal> {
        let about = &event.involved_object;
        if about.kind.as_deref() != Some("Job") || event.reason.as_deref() != Some("FailedCreate") {
            return None;
        }
        let micro = |t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime| {
            Timestamp::from_second(t.0.as_second()).ok()
        };
        let plain = |t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time| {
            Timestamp::from_second(t.0.as_second()).ok()
        };
        let last_seen = [
            event
                .series
                .as_ref()
                .and_then(|s| s.last_observed_time.as_ref())
                .and_then(micro),
            event.last_timestamp.as_ref().and_then(plain),
            event.event_time.as_ref().and_then(micro),
            event.first_timestamp.as_ref().and_then(plain),
        ]
        .into_iter()
        .flatten()
        .max();
        Some(Refusal {
            job_uid: about.uid.clone().unwrap_or_default(),
            message: event.message.clone().unwrap_or_default().trim().to_owned(),
            last_seen,
        })
    }
}

/// The live Jobs (in the view's order, sorted by name) that have counted
/// no pod for longer than `grace` since their creation at `now`, leaving
/// out those already judged (`judged`: never started or judged dead, by
/// name). A Job being deleted, gone, or showing any sign of failure is not
/// podless: other rules read it. A creation time in the future (a clock
/// behind the API server's) counts as no age at all.
pub(crate) fn podless<'a, J: Borrow<JobSummary>>(
    jobs: &'a [J],
    judged: &'a BTreeSet<String>,
    now: Timestamp,
    grace: Duration,
) -> impl Iterator<Item = Podless<'a>> + 'a {
    summaries(jobs)
        .filter(|j| {
            j.is_live() && !j.deleting && !j.gone && !j.shows_failure() && j.counts_no_pod()
        })
        .filter_map(move |job| {
            let age = now.duration_since(job.created_at?);
            let age = Duration::try_from(age).unwrap_or(Duration::ZERO);
            (age > grace && !judged.contains(job.name())).then_some(Podless { job, age })
        })
}

/// What the refusals say about the podless Jobs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RefusalPlan<'a> {
    /// Jobs the cluster refuses, each with its newest refusal (by name).
    pub refused: Vec<(Podless<'a>, Refusal)>,
    /// How many have no refusal to be seen: they wait, and are not failed
    /// by this rule.
    pub waiting: usize,
    /// The one of those that has waited longest (ties: the first by name).
    pub oldest_waiting: Option<Podless<'a>>,
}

/// Matches each podless Job to the newest refusal about it, by uid (a Job
/// deleted and made again under the same name is another Job, with other
/// Events), if that refusal is recent at `now` ([`REFUSAL_FRESH`]; one that
/// gives no time counts as recent). A Job with no uid is matched by
/// nothing.
pub(crate) fn judge_refusals<'a>(
    podless: impl IntoIterator<Item = Podless<'a>>,
    refusals: &[Refusal],
    now: Timestamp,
) -> RefusalPlan<'a> {
    let fresh = |r: &Refusal| {
        r.last_seen
            .is_none_or(|seen| now.duration_since(seen) <= REFUSAL_FRESH)
    };
    let mut newest: BTreeMap<&str, &Refusal> = BTreeMap::new();
    for r in refusals
        .iter()
        .filter(|r| !r.job_uid.is_empty() && fresh(r))
    {
        let slot = newest.entry(r.job_uid.as_str()).or_insert(r);
        if (r.last_seen, &r.message) > (slot.last_seen, &slot.message) {
            *slot = r;
        }
    }
    let mut plan = RefusalPlan::default();
    for job in podless {
        let uid: &str = &job.job.uid;
        match newest.get(uid).filter(|_| !uid.is_empty()) {
            Some(refusal) => plan.refused.push((job, (*refusal).clone())),
            None => {
                plan.waiting += 1;
                let older = plan
                    .oldest_waiting
                    .is_none_or(|o| job.age > o.age || (job.age == o.age && job.name() < o.name()));
                if older {
                    plan.oldest_waiting = Some(job);
                }
            }
        }
    }
    plan.refused.sort_by(|a, b| a.0.name().cmp(b.0.name()));
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tcab_shared::Lane;
    use tcab_shared::job_cache::{JobCondition, JobNames, JobPhase};

    const GRACE: Duration = Duration::from_secs(300);

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    /// A live Job created at 12:00 that counts no pod.
    fn job(name: &str, lane: Lane) -> JobSummary {
        JobSummary {
            names: JobNames::new(name, Some(name), Some("c")),
            uid: format!("uid-{name}").into(),
            lane,
            created_at: Some(at("2026-12-07T12:00:00Z")),
            ..JobSummary::default()
        }
    }

    fn found<'a>(
        jobs: &'a [JobSummary],
        judged: &'a BTreeSet<String>,
        now: &str,
    ) -> Vec<Podless<'a>> {
        podless(jobs, judged, at(now), GRACE).collect()
    }

    fn names<'a>(podless: &[Podless<'a>]) -> Vec<&'a str> {
        podless.iter().map(|p| p.job.name()).collect()
    }

    #[test]
    fn a_job_is_podless_once_it_counted_no_pod_for_longer_than_the_grace() {
        let jobs = vec![job("a", Lane::Run), job("b", Lane::Publish)];
        let none = BTreeSet::new();
        assert!(found(&jobs, &none, "2026-12-07T12:05:00Z").is_empty());
        let late = found(&jobs, &none, "2026-12-07T12:05:01Z");
        assert_eq!(names(&late), ["a", "b"]);
        assert_eq!(late[0].age, Duration::from_secs(301));
        assert_eq!(late[1].job.lane, Lane::Publish);
    }

    #[test]
    fn any_pod_counted_or_any_other_state_leaves_a_job_to_other_rules() {
        let late = at("2026-12-07T13:00:00Z");
        let base = job("j", Lane::Run);
        let others = [
            JobSummary {
                active_pods: 1,
                ..base.clone()
            },
            JobSummary {
                ready_pods: 1,
                ..base.clone()
            },
            JobSummary {
                succeeded_pods: 1,
                ..base.clone()
            },
            JobSummary {
                failed_pods: 1,
                ..base.clone()
            },
            JobSummary {
                terminating_pods: 1,
                ..base.clone()
            },
            JobSummary {
                deleting: true,
                ..base.clone()
            },
            JobSummary {
                gone: true,
                ..base.clone()
            },
            JobSummary {
                phase: JobPhase::Succeeded,
                ..base.clone()
            },
            JobSummary {
                phase: JobPhase::Failed,
                ..base.clone()
            },
            JobSummary {
                created_at: None,
                ..base.clone()
            },
        ];
        let none = BTreeSet::new();
        for other in others {
            let jobs = [other.clone()];
            assert_eq!(podless(&jobs, &none, late, GRACE).count(), 0, "{other:?}");
        }
        let mut target = base.clone();
        target.set_rare(|r| {
            r.failure_target = Some(JobCondition {
                reason: "DeadlineExceeded".into(),
                message: String::new(),
            })
        });
        assert_eq!(podless(&[target], &none, late, GRACE).count(), 0);
        let judged = BTreeSet::from(["j".to_owned()]);
        let base = [base];
        assert_eq!(podless(&base, &judged, late, GRACE).count(), 0);
        assert_eq!(podless(&base, &none, late, GRACE).count(), 1);
    }

    #[test]
    fn a_creation_in_the_future_counts_as_no_age() {
        let jobs = vec![job("a", Lane::Run)];
        assert!(found(&jobs, &BTreeSet::new(), "2026-12-07T11:00:00Z").is_empty());
    }

    fn refusal(uid: &str, message: &str, last_seen: &str) -> Refusal {
        Refusal {
            job_uid: uid.into(),
            message: message.into(),
            last_seen: Some(at(last_seen)),
        }
    }

    #[test]
    fn a_podless_job_is_refused_by_the_newest_refusal_about_its_uid_or_waits() {
        let mut c = job("c", Lane::Run);
        c.created_at = Some(at("2026-12-07T11:00:00Z"));
        let jobs = vec![
            job("a", Lane::Run),
            job("b", Lane::Publish),
            c,
            job("d", Lane::Run),
        ];
        let none = BTreeSet::new();
        let podless = found(&jobs, &none, "2026-12-07T13:00:00Z");
        let refusals = vec![
            refusal("uid-a", "Error creating: quota", "2026-12-07T12:00:01Z"),
            refusal(
                "uid-a",
                "Error creating: PodSecurity",
                "2026-12-07T12:10:00Z",
            ),
            refusal(
                "uid-b",
                "Error creating: no ServiceAccount",
                "2026-12-07T12:00:01Z",
            ),
            // About another Job that once had the name "c": another uid.
            refusal("uid-old-c", "Error creating: old", "2026-12-07T11:00:00Z"),
        ];
        let now = at("2026-12-07T12:10:00Z");
        let plan = judge_refusals(podless.clone(), &refusals, now);
        let refused: Vec<(&str, &str)> = plan
            .refused
            .iter()
            .map(|(j, r)| (j.name(), r.message.as_str()))
            .collect();
        assert_eq!(
            refused,
            [
                ("a", "Error creating: PodSecurity"),
                ("b", "Error creating: no ServiceAccount")
            ]
        );
        assert_eq!(plan.waiting, 2);
        assert_eq!(plan.oldest_waiting.map(|p| p.job.name()), Some("c"));
        // The same inputs in another order give the same plan.
        let mut reversed = refusals.clone();
        reversed.reverse();
        let mut backwards = podless.clone();
        backwards.reverse();
        assert_eq!(judge_refusals(backwards, &reversed, now), plan);
    }

    #[test]
    fn a_refusal_no_longer_repeated_does_not_fail_a_job() {
        let jobs = vec![job("a", Lane::Run)];
        let none = BTreeSet::new();
        let podless = found(&jobs, &none, "2026-12-07T13:00:00Z");
        let once = [refusal(
            "uid-a",
            "Error creating: a webhook timed out",
            "2026-12-07T12:00:01Z",
        )];
        // Ten minutes on, it still counts; a second later, it no longer does:
        // the Job controller stopped retrying (it may be down).
        let recent = judge_refusals(podless.clone(), &once, at("2026-12-07T12:10:01Z"));
        assert_eq!(recent.refused.len(), 1);
        let stale = judge_refusals(podless.clone(), &once, at("2026-12-07T12:10:02Z"));
        assert!(stale.refused.is_empty());
        assert_eq!(stale.waiting, 1);
        // One that gives no time counts as recent.
        let timeless = [Refusal {
            last_seen: None,
            ..once[0].clone()
        }];
        let plan = judge_refusals(podless, &timeless, at("2026-12-07T14:00:00Z"));
        assert_eq!(plan.refused.len(), 1);
    }

    #[test]
    fn a_job_or_refusal_without_a_uid_matches_nothing() {
        let mut nameless = job("a", Lane::Run);
        nameless.uid = "".into();
        let jobs = [nameless];
        let none = BTreeSet::new();
        let podless = found(&jobs, &none, "2026-12-07T13:00:00Z");
        let now = at("2026-12-07T12:01:00Z");
        let plan = judge_refusals(
            podless,
            &[refusal("", "Error", "2026-12-07T12:00:00Z")],
            now,
        );
        assert!(plan.refused.is_empty());
        assert_eq!(plan.waiting, 1);
    }

    #[test]
    fn an_event_reads_as_a_refusal_only_when_it_is_a_failed_create_of_a_job() {
        let event = |kind: &str, reason: &str| -> Event {
            serde_json::from_value(json!({
                "metadata": {"name": "e", "namespace": "ns"},
                "involvedObject": {"kind": kind, "name": "tcab-driver-x-c", "uid": "u1"},
                "reason": reason,
                "type": "Warning",
                "message": " Error creating: pods \"tcab-driver-x-c-\" is forbidden: violates PodSecurity \"restricted:latest\" ",
                "firstTimestamp": "2026-12-07T12:00:01Z",
                "lastTimestamp": "2026-12-07T12:04:01Z",
                "count": 7,
            }))
            .unwrap()
        };
        let refusal = Refusal::of_event(&event("Job", "FailedCreate")).unwrap();
        assert_eq!(refusal.job_uid, "u1");
        assert_eq!(
            refusal.message,
            "Error creating: pods \"tcab-driver-x-c-\" is forbidden: violates PodSecurity \"restricted:latest\""
        );
        assert_eq!(refusal.last_seen, Some(at("2026-12-07T12:04:01Z")));
        assert!(Refusal::of_event(&event("Pod", "FailedCreate")).is_none());
        assert!(Refusal::of_event(&event("Job", "SuccessfulCreate")).is_none());
        // An events.k8s.io-style Event: only an eventTime and a series.
        let series: Event = serde_json::from_value(json!({
            "metadata": {"name": "e2", "namespace": "ns"},
            "involvedObject": {"kind": "Job", "name": "j", "uid": "u2"},
            "reason": "FailedCreate",
            "message": "Error creating: quota",
            "eventTime": "2026-12-07T12:00:01.000000Z",
            "series": {"count": 3, "lastObservedTime": "2026-12-07T12:02:00.000000Z"},
        }))
        .unwrap();
        assert_eq!(
            Refusal::of_event(&series).unwrap().last_seen,
            Some(at("2026-12-07T12:02:00Z"))
        );
    }
}
