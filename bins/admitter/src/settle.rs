//! Settling a Job create: finding out, at once, whether the Job of a claim
//! exists when the create's answer did not say.
//!
//! The Job's name is deterministic per claim, so creating it again is safe
//! (a 409 means it exists) and reading it by name tells whether it exists.
//! A create answered with a timeout, a transport error, a 5xx or a 429 is
//! settled within the admission: read the Job; if it is there it was
//! created, if not, create it again. Only when the reads fail too does the
//! answer stay unknown; the lane then holds the slot and settles again on
//! its following ticks.
//!
//! A claim older than half the lease is never created: its lease may have
//! lapsed, the backend then requeues the job, and a late create would give
//! one backend job a second Job. Such a claim is given up once a read shows
//! no Job.
//!
//! [`next_step`] is the decision, a pure function of what is known, the calls
//! made and the claim's age; [`settle`] carries it out against the Jobs API.

use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, PostParams};
use std::time::Duration;
use tcab_shared::error_chain;
use tcab_shared::kube_api::{CallError, KubeCall, call};
use tcab_shared::metrics::labels::ErrorReason;
use tokio::time::Instant;

/// The two calls a settle makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Call {
    /// Create the Job.
    Create,
    /// Read the Job by name.
    Read,
}

/// What is known about a claim's Job while it is not known to exist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Known {
    /// No create was sent for the claim yet, so no Job exists.
    NotCreated,
    /// A read found no Job of that name.
    Absent,
    /// The last call got no answer that tells.
    Unknown {
        /// Which call it was.
        after: Call,
        /// Its error.
        why: String,
    },
}

/// How one settle is bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SettleLimits {
    /// Calls (creates and reads) one settle may make.
    pub max_calls: u32,
    /// A claim older than this may have lapsed (half the lease): no create is
    /// sent for it any more.
    pub claim_max_age: Duration,
    /// Pause before the first create sent again; doubled for each further one
    /// (at most [`MAX_PAUSE`]).
    pub pause: Duration,
}

/// The longest pause between two creates of one settle.
pub(crate) const MAX_PAUSE: Duration = Duration::from_secs(2);

/// Why a claim is given up with no Job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GiveUp {
    /// The claim is older than half the lease: it is not created any more.
    Lapsed,
    /// Every create allowed failed, and the last read shows no Job.
    Exhausted,
}

/// The next step of a settle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Send the create (again).
    Create,
    /// Read the Job by name.
    Read,
    /// No Job exists and none will be created: give the claim up.
    GiveUp(GiveUp),
    /// Out of calls with the answer still unknown: hold the slot and settle
    /// again on a later tick.
    Hold,
}

/// Decides the next step from what is known, the calls made so far in this
/// settle and the claim's age.
///
/// - Known absent (or never created): create, while the claim is young and
///   calls are left; else give the claim up.
/// - Unknown after a create: read.
/// - Unknown after a read: create again while the claim is young (a 409
///   then tells); an old claim is not created, so it holds until a later
///   tick reads again.
pub(crate) fn next_step(
    known: &Known,
    calls: u32,
    claim_age: Duration,
    limits: &SettleLimits,
) -> Step {
    let young = claim_age <= limits.claim_max_age;
    let calls_left = calls < limits.max_calls;
    match known {
        Known::NotCreated | Known::Absent if !young => Step::GiveUp(GiveUp::Lapsed),
        Known::NotCreated | Known::Absent if !calls_left => Step::GiveUp(GiveUp::Exhausted),
        Known::NotCreated | Known::Absent => Step::Create,
        Known::Unknown { .. } if !calls_left => Step::Hold,
        Known::Unknown {
            after: Call::Create,
            ..
        } => Step::Read,
        Known::Unknown {
            after: Call::Read, ..
        } if young => Step::Create,
        Known::Unknown {
            after: Call::Read, ..
        } => Step::Hold,
    }
}

/// What a create answered, as a settle reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CreateAnswer {
    /// 201: created.
    Created,
    /// 409: the Job exists.
    AlreadyExists,
    /// Refused for good: a 4xx other than 409 and 429.
    Refused {
        /// HTTP status code.
        code: u16,
        /// The Status reason (`Forbidden`, `Invalid`, ...).
        reason: String,
        /// The Status message.
        message: String,
    },
    /// No answer that tells: a timeout, a transport error, a 5xx or a 429.
    Unclear(String),
}

/// What a read by name answered, as a settle reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ReadAnswer {
    /// The Job is there.
    Found,
    /// 404: no Job of that name.
    NotFound,
    /// Any other failure: it does not tell.
    Unclear(String),
}

/// Reads a create's result.
pub(crate) fn create_answer<T>(result: Result<T, CallError>) -> CreateAnswer {
    match result {
        Ok(_) => CreateAnswer::Created,
        Err(error) if error.is_conflict() => CreateAnswer::AlreadyExists,
        Err(error) if error.is_ambiguous() => CreateAnswer::Unclear(error_chain(&error)),
        Err(CallError::Kube(kube::Error::Api(status))) => CreateAnswer::Refused {
            code: status.code,
            reason: status.reason.clone(),
            message: status.message.clone(),
        },
        Err(error) => CreateAnswer::Unclear(error_chain(&error)),
    }
}

/// Reads a read's result.
pub(crate) fn read_answer<T>(result: Result<T, CallError>) -> ReadAnswer {
    match result {
        Ok(_) => ReadAnswer::Found,
        Err(error) if error.is_not_found() => ReadAnswer::NotFound,
        Err(error) => ReadAnswer::Unclear(error_chain(&error)),
    }
}

/// How the Job was found to exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Confirmation {
    /// A create was answered 201.
    Created,
    /// A create was answered 409.
    AlreadyExists,
    /// A read found it.
    Found,
}

/// How a settle ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum End {
    /// The Job exists.
    Exists(Confirmation),
    /// The create was refused for good; no Job exists.
    Refused {
        /// HTTP status code.
        code: u16,
        /// The Status reason.
        reason: String,
        /// The Status message.
        message: String,
    },
    /// No Job exists and none will be created for the claim.
    GaveUp(GiveUp),
    /// Still unknown after every call allowed; the last error.
    Unknown(String),
}

/// The end of a settle and what it took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Settlement {
    /// How it ended.
    pub end: End,
    /// Calls made.
    pub calls: u32,
    /// The first answer that did not tell, if any.
    pub first_unclear: Option<String>,
    /// Why that answer did not tell (for the admission errors metric).
    pub first_unclear_reason: Option<ErrorReason>,
    /// The claim's age when it ended.
    pub claim_age: Duration,
}

/// The I/O edges a settle uses.
#[derive(Clone, Copy)]
pub(crate) struct SettleEdges<'a> {
    /// The Jobs API of the admitter's namespace.
    pub jobs: &'a Api<Job>,
    /// Bound of each call.
    pub kube_timeout: Duration,
    /// The settle's bounds.
    pub limits: SettleLimits,
}

impl std::fmt::Debug for SettleEdges<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SettleEdges")
            .field("kube_timeout", &self.kube_timeout)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// Settles the Job `job` (named `name`) of a claim made at `claimed_at`,
/// starting from `known`. Every call is bounded by the kube timeout.
pub(crate) async fn settle(
    edges: SettleEdges<'_>,
    job: &Job,
    name: &str,
    claimed_at: Instant,
    known: Known,
) -> Settlement {
    let mut known = known;
    let mut calls = 0u32;
    let mut creates = 0u32;
    let mut first_unclear: Option<String> = None;
    let mut first_reason: Option<ErrorReason> = None;
    loop {
        let claim_age = claimed_at.elapsed();
        let done = |end: End, calls: u32, first_unclear: Option<String>| Settlement {
            end,
            calls,
            first_unclear,
            first_unclear_reason: first_reason,
            claim_age,
        };
        match next_step(&known, calls, claim_age, &edges.limits) {
            Step::GiveUp(why) => return done(End::GaveUp(why), calls, first_unclear),
            Step::Hold => {
                let why = match known {
                    Known::Unknown { why, .. } => why,
                    _ => "no answer".to_owned(),
                };
                return done(End::Unknown(why), calls, first_unclear);
            }
            Step::Create => {
                if creates > 0 {
                    let pause = edges
                        .limits
                        .pause
                        .saturating_mul(1 << (creates - 1).min(16))
                        .min(MAX_PAUSE);
                    tokio::time::sleep(pause).await;
                    // The pause aged the claim: decide again before creating.
                    let claim_age = claimed_at.elapsed();
                    if next_step(&known, calls, claim_age, &edges.limits) != Step::Create {
                        continue;
                    }
                }
                calls += 1;
                creates += 1;
                let result = call(
                    KubeCall::CreateJob,
                    edges.kube_timeout,
                    edges.jobs.create(&PostParams::default(), job),
                )
                .await;
                let reason = result.as_ref().err().map(CallError::reason);
                match create_answer(result) {
                    CreateAnswer::Created => {
                        return done(End::Exists(Confirmation::Created), calls, first_unclear);
                    }
                    CreateAnswer::AlreadyExists => {
                        return done(
                            End::Exists(Confirmation::AlreadyExists),
                            calls,
                            first_unclear,
                        );
                    }
                    CreateAnswer::Refused {
                        code,
                        reason,
                        message,
                    } => {
                        return done(
                            End::Refused {
                                code,
                                reason,
                                message,
                            },
                            calls,
                            first_unclear,
                        );
                    }
                    CreateAnswer::Unclear(why) => {
                        first_unclear.get_or_insert_with(|| why.clone());
                        first_reason = first_reason.or(reason);
                        known = Known::Unknown {
                            after: Call::Create,
                            why,
                        };
                    }
                }
            }
            Step::Read => {
                calls += 1;
                let result = call(KubeCall::GetJob, edges.kube_timeout, edges.jobs.get(name)).await;
                let reason = result.as_ref().err().map(CallError::reason);
                match read_answer(result) {
                    ReadAnswer::Found => {
                        return done(End::Exists(Confirmation::Found), calls, first_unclear);
                    }
                    ReadAnswer::NotFound => known = Known::Absent,
                    ReadAnswer::Unclear(why) => {
                        first_unclear.get_or_insert_with(|| why.clone());
                        first_reason = first_reason.or(reason);
                        known = Known::Unknown {
                            after: Call::Read,
                            why,
                        };
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: SettleLimits = SettleLimits {
        max_calls: 8,
        claim_max_age: Duration::from_secs(60),
        pause: Duration::from_millis(100),
    };
    const YOUNG: Duration = Duration::from_secs(1);
    const OLD: Duration = Duration::from_secs(61);

    fn unknown(after: Call) -> Known {
        Known::Unknown {
            after,
            why: "500".into(),
        }
    }

    #[test]
    fn a_young_claim_is_created_read_after_an_unclear_answer_and_created_again_when_absent() {
        assert_eq!(
            next_step(&Known::NotCreated, 0, YOUNG, &LIMITS),
            Step::Create
        );
        assert_eq!(
            next_step(&unknown(Call::Create), 1, YOUNG, &LIMITS),
            Step::Read
        );
        assert_eq!(next_step(&Known::Absent, 2, YOUNG, &LIMITS), Step::Create);
        // A read that failed too: create again, a 409 will tell.
        assert_eq!(
            next_step(&unknown(Call::Read), 2, YOUNG, &LIMITS),
            Step::Create
        );
        // The edge of the age is still young.
        assert_eq!(
            next_step(&Known::Absent, 2, LIMITS.claim_max_age, &LIMITS),
            Step::Create
        );
    }

    #[test]
    fn a_claim_past_half_the_lease_is_never_created() {
        assert_eq!(
            next_step(&Known::NotCreated, 0, OLD, &LIMITS),
            Step::GiveUp(GiveUp::Lapsed)
        );
        assert_eq!(
            next_step(&Known::Absent, 3, OLD, &LIMITS),
            Step::GiveUp(GiveUp::Lapsed)
        );
        // Unknown after a create: read whether it landed; never create again.
        assert_eq!(
            next_step(&unknown(Call::Create), 1, OLD, &LIMITS),
            Step::Read
        );
        assert_eq!(next_step(&unknown(Call::Read), 2, OLD, &LIMITS), Step::Hold);
    }

    #[test]
    fn out_of_calls_gives_up_when_absent_and_holds_when_unknown() {
        let max = LIMITS.max_calls;
        assert_eq!(
            next_step(&Known::Absent, max, YOUNG, &LIMITS),
            Step::GiveUp(GiveUp::Exhausted)
        );
        assert_eq!(
            next_step(&unknown(Call::Create), max, YOUNG, &LIMITS),
            Step::Hold
        );
        assert_eq!(
            next_step(&unknown(Call::Read), max, YOUNG, &LIMITS),
            Step::Hold
        );
    }

    /// Three 500s on create, each followed by a 404 on the read, end in a
    /// created Job within the default limits (the kube-sim test's scenario).
    #[test]
    fn three_unclear_creates_fit_in_one_settle() {
        let mut known = Known::NotCreated;
        let mut calls = 0;
        let mut creates_failed = 0;
        let end = loop {
            match next_step(&known, calls, YOUNG, &LIMITS) {
                Step::Create if creates_failed < 3 => {
                    calls += 1;
                    creates_failed += 1;
                    known = unknown(Call::Create);
                }
                Step::Create => break Some(calls + 1),
                Step::Read => {
                    calls += 1;
                    known = Known::Absent;
                }
                Step::GiveUp(_) | Step::Hold => break None,
            }
        };
        assert_eq!(
            end,
            Some(7),
            "create, read three times, then the create that lands"
        );
    }

    fn api_error(code: u16, reason: &str) -> CallError {
        CallError::Kube(kube::Error::Api(
            kube::core::Status::failure("boom", reason)
                .with_code(code)
                .boxed(),
        ))
    }

    #[test]
    fn answers_are_read_by_code() {
        assert_eq!(create_answer(Ok(())), CreateAnswer::Created);
        assert_eq!(
            create_answer::<()>(Err(api_error(409, "AlreadyExists"))),
            CreateAnswer::AlreadyExists
        );
        assert_eq!(
            create_answer::<()>(Err(api_error(403, "Forbidden"))),
            CreateAnswer::Refused {
                code: 403,
                reason: "Forbidden".into(),
                message: "boom".into()
            }
        );
        for code in [429, 500, 503, 504] {
            assert!(matches!(
                create_answer::<()>(Err(api_error(code, "x"))),
                CreateAnswer::Unclear(_)
            ));
        }
        let timeout = create_answer::<()>(Err(CallError::TimedOut(Duration::from_secs(15))));
        assert!(matches!(timeout, CreateAnswer::Unclear(why) if why.contains("15 s")));
        assert_eq!(read_answer(Ok(())), ReadAnswer::Found);
        assert_eq!(
            read_answer::<()>(Err(api_error(404, "NotFound"))),
            ReadAnswer::NotFound
        );
        assert!(matches!(
            read_answer::<()>(Err(api_error(403, "Forbidden"))),
            ReadAnswer::Unclear(_)
        ));
    }
}
