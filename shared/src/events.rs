//! Kubernetes Events on the objects the dispatcher acts on, so
//! `kubectl describe job <name>` and `kubectl get events` say what the
//! dispatcher did to a Job and why: reported its driver dead, deleted it,
//! failed its claim fast, reaped its sandbox.
//!
//! What an Event says is decided by the binaries' plans as a [`Notice`]
//! (plain data: the object, a [`Reason`], a note); [`event`] turns a notice
//! into the `events.k8s.io/v1` object, purely. [`EventSender`] is the I/O
//! edge: it hands each notice to one background writer over a bounded
//! queue and never waits, so a slow, failing or hung API server costs the
//! loops nothing. The writer makes one bounded create per Event (no retry),
//! through [`crate::kube_api::call`] (`call="create_event"` in the
//! request-duration histogram, `verb="create"` in the API-error counter),
//! and logs the first failure of a run of failures at warn, the rest at
//! debug. A notice that finds the queue full is dropped, logged the same
//! way.
//!
//! Only `create` is used: an Event is never patched into a series (the
//! kube-rs `Recorder` would patch a repeat, which needs `patch` on events,
//! and keeps its own unbounded cache on the system clock). Each action here
//! happens once per object, so repeats are rare and each is its own Event.
//! An Event keeps the Job's name, namespace and uid in `regarding` and
//! outlives the Job: `kubectl get events --field-selector
//! involvedObject.name=<job>` finds it after the Job is deleted, until the
//! API server's Event TTL (one hour by default) removes it.

use crate::WallClock;
use crate::config::Binary;
use crate::kube_api::{KubeCall, call};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::PostParams;
use std::time::Duration;
use tokio::sync::mpsc;

/// The longest note the API server accepts, in bytes.
pub const NOTE_LIMIT: usize = 1024;
/// The longest `reportingInstance` the API server accepts.
pub const INSTANCE_LIMIT: usize = 128;
/// How many notices may wait for the writer; more are dropped.
pub const QUEUE: usize = 256;
/// The prefix of every `reportingController`: `tcab.dev/<binary>`.
pub const CONTROLLER_DOMAIN: &str = "tcab.dev";

/// Normal or Warning, as `kubectl describe` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Something the dispatcher did as intended.
    Normal,
    /// Something went wrong with the object.
    Warning,
}

impl EventType {
    /// `Normal` or `Warning`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// Why an Event was recorded: its `reason` (UpperCamelCase), and with it
/// its type, its `action` and which container records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reason {
    /// The lease-keeper reported the Job's driver dead to the backend.
    ReportedDead,
    /// The lease-keeper deleted a Job whose pod could never start.
    DeletedNeverStarted,
    /// The lease-keeper deleted a Job whose pod the API server refused.
    DeletedRefused,
    /// The lease-keeper deleted a publisher Job judged dead.
    DeletedJudgedDead,
    /// The admitter reported a claim failed without running it: its Job was
    /// refused, or the claim could not become a Job.
    FailedFast,
    /// The admitter deleted the Job of an older claim of the same backend job.
    DeletedStale,
    /// The reaper deleted a sandbox pod of a failed (or judged dead) driver.
    SandboxReaped,
}

impl Reason {
    /// Every reason, in the order docs/operations.md lists them.
    pub const ALL: [Reason; 7] = [
        Reason::ReportedDead,
        Reason::DeletedNeverStarted,
        Reason::DeletedRefused,
        Reason::DeletedJudgedDead,
        Reason::FailedFast,
        Reason::DeletedStale,
        Reason::SandboxReaped,
    ];

    /// The `reason` field.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::ReportedDead => "ReportedDead",
            Reason::DeletedNeverStarted => "DeletedNeverStarted",
            Reason::DeletedRefused => "DeletedRefused",
            Reason::DeletedJudgedDead => "DeletedJudgedDead",
            Reason::FailedFast => "FailedFast",
            Reason::DeletedStale => "DeletedStale",
            Reason::SandboxReaped => "SandboxReaped",
        }
    }

    /// Warning for a run or publish that ended badly; Normal for clean-up
    /// that went as designed.
    pub fn event_type(self) -> EventType {
        match self {
            Reason::ReportedDead
            | Reason::DeletedNeverStarted
            | Reason::DeletedRefused
            | Reason::DeletedJudgedDead
            | Reason::FailedFast => EventType::Warning,
            Reason::DeletedStale | Reason::SandboxReaped => EventType::Normal,
        }
    }

    /// The `action` field: what the dispatcher did.
    pub fn action(self) -> &'static str {
        match self {
            Reason::ReportedDead => "ReportDeath",
            Reason::FailedFast => "ReportFailed",
            Reason::DeletedNeverStarted
            | Reason::DeletedRefused
            | Reason::DeletedJudgedDead
            | Reason::DeletedStale => "DeleteJob",
            Reason::SandboxReaped => "DeletePod",
        }
    }

    /// The container that records it.
    pub fn recorded_by(self) -> Binary {
        match self {
            Reason::ReportedDead
            | Reason::DeletedNeverStarted
            | Reason::DeletedRefused
            | Reason::DeletedJudgedDead => Binary::LeaseKeeper,
            Reason::FailedFast | Reason::DeletedStale => Binary::Admitter,
            Reason::SandboxReaped => Binary::Reaper,
        }
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The object an Event is about (`regarding`): a Job of the dispatcher, by
/// namespace, name and (when known) uid. `kubectl describe` selects Events
/// by the uid too, so a Job's Events carry it whenever the Job was seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Regarding {
    /// The namespace, where the Event is created too.
    pub namespace: String,
    /// The Job's name.
    pub name: String,
    /// The Job's uid, when the dispatcher saw the Job.
    pub uid: Option<String>,
}

impl Regarding {
    /// A batch/v1 Job.
    pub fn job(namespace: &str, name: &str, uid: Option<&str>) -> Self {
        Regarding {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            uid: uid.filter(|u| !u.is_empty()).map(str::to_owned),
        }
    }

    fn reference(&self) -> ObjectReference {
        ObjectReference {
            api_version: Some("batch/v1".into()),
            kind: Some("Job".into()),
            namespace: Some(self.namespace.clone()),
            name: Some(self.name.clone()),
            uid: self.uid.clone(),
            ..ObjectReference::default()
        }
    }
}

/// One Event to record: what the plan decided, as plain data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    /// The object it is about.
    pub regarding: Regarding,
    /// Why.
    pub reason: Reason,
    /// What happened, in plain words, within [`NOTE_LIMIT`] bytes. Never a
    /// token or a Job spec: the callers build it from causes, job ids and
    /// names only.
    pub note: String,
}

impl Notice {
    /// A notice with its note cut to [`NOTE_LIMIT`] bytes.
    pub fn new(regarding: Regarding, reason: Reason, note: impl Into<String>) -> Self {
        Notice {
            regarding,
            reason,
            note: cut(note.into(), NOTE_LIMIT),
        }
    }
}

/// `text` cut to at most `limit` bytes on a character boundary, ending in
/// `...` when it was cut.
pub fn cut(mut text: String, limit: usize) -> String {
    if text.len() <= limit {
        return text;
    }
    let mut end = limit.saturating_sub(3);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push_str("...");
    text
}

/// Who records the Events: `reportingController` and `reportingInstance`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reporter {
    /// `tcab.dev/admitter`, `tcab.dev/lease-keeper` or `tcab.dev/reaper`.
    pub controller: String,
    /// The pod's name.
    pub instance: String,
}

impl Reporter {
    /// The reporter of `binary` in this process: the instance is the pod's
    /// name, read from `POD_NAME` when set, else from `HOSTNAME` (a pod's
    /// hostname is its name unless its spec sets another), else the
    /// binary's name.
    pub fn of(binary: Binary) -> Self {
        let from_env = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let instance = from_env("POD_NAME")
            .or_else(|| from_env("HOSTNAME"))
            .unwrap_or_else(|| binary.name().to_owned());
        Reporter::new(binary, &instance)
    }

    /// The reporter of `binary` on `instance` (cut to [`INSTANCE_LIMIT`]).
    pub fn new(binary: Binary, instance: &str) -> Self {
        let mut instance = instance.trim().to_owned();
        if instance.len() > INSTANCE_LIMIT {
            let mut end = INSTANCE_LIMIT;
            while !instance.is_char_boundary(end) {
                end -= 1;
            }
            instance.truncate(end);
        }
        Reporter {
            controller: format!("{CONTROLLER_DOMAIN}/{}", binary.short_name()),
            instance,
        }
    }
}

/// The `events.k8s.io/v1` Event for `notice`, recorded at `now` by
/// `reporter`; `seq` tells apart two Events about one object in one
/// nanosecond (the name is the object's name and a hex suffix, as
/// client-go names its Events).
pub fn event(notice: &Notice, reporter: &Reporter, now: Timestamp, seq: u64) -> Event {
    let suffix = now
        .as_nanosecond()
        .unsigned_abs()
        .wrapping_add(u128::from(seq));
    Event {
        metadata: ObjectMeta {
            name: Some(format!("{}.{suffix:x}", notice.regarding.name)),
            namespace: Some(notice.regarding.namespace.clone()),
            ..ObjectMeta::default()
        },
        event_time: Some(MicroTime(now)),
        action: Some(notice.reason.action().into()),
        reason: Some(notice.reason.as_str().into()),
        note: Some(notice.note.clone()),
        type_: Some(notice.reason.event_type().as_str().into()),
        regarding: Some(notice.regarding.reference()),
        reporting_controller: Some(reporter.controller.clone()),
        reporting_instance: Some(reporter.instance.clone()),
        ..Event::default()
    }
}

/// The handle the loops record Events through: [`EventSender::send`] puts
/// a notice on the writer's queue and returns at once. Cloning shares the
/// writer; the writer ends once every handle is dropped.
#[derive(Debug, Clone)]
pub struct EventSender {
    queue: Option<mpsc::Sender<Notice>>,
}

impl EventSender {
    /// A sender that records nothing (tests that do not look at Events).
    pub fn off() -> Self {
        EventSender { queue: None }
    }

    /// Starts the writer: one create at a time, each bounded by `timeout`,
    /// with `kube`'s identity, as `reporter`, stamped on `clock`.
    pub fn start(
        kube: kube::Client,
        reporter: Reporter,
        clock: WallClock,
        timeout: Duration,
    ) -> Self {
        let (queue, notices) = mpsc::channel(QUEUE);
        tokio::spawn(write(notices, kube, reporter, clock, timeout));
        EventSender { queue: Some(queue) }
    }

    /// Queues `notice` for the writer; never waits. A full queue drops it
    /// (the writer is behind a slow or failing API server).
    pub fn send(&self, notice: Notice) {
        let Some(queue) = &self.queue else { return };
        if let Err(mpsc::error::TrySendError::Full(notice)) = queue.try_send(notice) {
            // At debug: a storm of drops must not become a storm of lines.
            tracing::debug!(
                reason = notice.reason.as_str(),
                object = %notice.regarding.name,
                "Event dropped: the queue of Events to create is full"
            );
        }
    }
}

/// Whether a run of failures has been logged at warn already.
#[derive(Debug, Default)]
struct Failing(bool);

/// The writer: creates each queued Event once, bounded; logs the first
/// failure of a run at warn and the rest at debug, and says at info when
/// Events are created again.
async fn write(
    mut notices: mpsc::Receiver<Notice>,
    kube: kube::Client,
    reporter: Reporter,
    clock: WallClock,
    timeout: Duration,
) {
    let mut failing = Failing::default();
    let mut seq: u64 = 0;
    while let Some(notice) = notices.recv().await {
        seq = seq.wrapping_add(1);
        let body = event(&notice, &reporter, clock.now(), seq);
        let api: Api<Event> = Api::namespaced(kube.clone(), &notice.regarding.namespace);
        let created = call(
            KubeCall::CreateEvent,
            timeout,
            api.create(&PostParams::default(), &body),
        )
        .await;
        match created {
            Ok(_) => {
                if std::mem::take(&mut failing.0) {
                    tracing::info!("Events are created again");
                }
                tracing::debug!(reason = notice.reason.as_str(), object = %notice.regarding.name, "Event created");
            }
            // The same name twice: the Event is there.
            Err(error) if error.is_conflict() => {}
            Err(error) => {
                let reason = error.reason().as_str();
                let error = crate::error_chain(&error);
                if std::mem::replace(&mut failing.0, true) {
                    tracing::debug!(reason, %error, event = notice.reason.as_str(), object = %notice.regarding.name, "cannot create an Event");
                } else {
                    tracing::warn!(reason, %error, event = notice.reason.as_str(), object = %notice.regarding.name, "cannot create an Event (best effort, nothing waits on it; later failures are logged at debug until one succeeds; the Role needs create on events.k8s.io events)");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn notice(reason: Reason, note: &str) -> Notice {
        Notice::new(
            Regarding::job("tcab", "tcab-driver-7-abcd1234", Some("u-1")),
            reason,
            note,
        )
    }

    #[test]
    fn an_event_carries_what_the_api_server_requires() {
        let reporter = Reporter::new(Binary::LeaseKeeper, "tcab-dispatcher-5d9f-x2");
        let now = Timestamp::from_second(1_800_000_000).expect("a time");
        let e = event(
            &notice(Reason::ReportedDead, "OOMKilled"),
            &reporter,
            now,
            3,
        );
        assert_eq!(e.reason.as_deref(), Some("ReportedDead"));
        assert_eq!(e.type_.as_deref(), Some("Warning"));
        assert_eq!(e.action.as_deref(), Some("ReportDeath"));
        assert_eq!(e.note.as_deref(), Some("OOMKilled"));
        assert_eq!(
            e.reporting_controller.as_deref(),
            Some("tcab.dev/lease-keeper")
        );
        assert_eq!(
            e.reporting_instance.as_deref(),
            Some("tcab-dispatcher-5d9f-x2")
        );
        assert_eq!(e.event_time, Some(MicroTime(now)));
        assert_eq!(e.metadata.namespace.as_deref(), Some("tcab"));
        let name = e.metadata.name.expect("a name");
        assert!(name.starts_with("tcab-driver-7-abcd1234."), "{name}");
        let regarding = e.regarding.expect("regarding");
        assert_eq!(regarding.kind.as_deref(), Some("Job"));
        assert_eq!(regarding.api_version.as_deref(), Some("batch/v1"));
        assert_eq!(regarding.uid.as_deref(), Some("u-1"));
        // None of the fields the API server wants unset on a create.
        assert!(e.deprecated_count.is_none() && e.deprecated_source.is_none());
        assert!(e.series.is_none());
        let other = event(&notice(Reason::ReportedDead, "x"), &reporter, now, 4);
        assert_ne!(other.metadata.name.as_deref(), Some(name.as_str()));
    }

    #[test]
    fn every_reason_is_upper_camel_case_with_its_type_and_action() {
        for reason in Reason::ALL {
            let text = reason.as_str();
            assert!(text.len() <= 128 && text.chars().all(|c| c.is_ascii_alphanumeric()));
            assert!(text.starts_with(|c: char| c.is_ascii_uppercase()), "{text}");
            assert!(!reason.action().is_empty() && reason.action().len() <= 128);
        }
        assert_eq!(Reason::SandboxReaped.event_type(), EventType::Normal);
        assert_eq!(Reason::DeletedStale.event_type(), EventType::Normal);
        assert_eq!(Reason::FailedFast.event_type(), EventType::Warning);
        assert_eq!(Reason::FailedFast.recorded_by(), Binary::Admitter);
        assert_eq!(Reason::SandboxReaped.recorded_by(), Binary::Reaper);
    }

    #[test]
    fn a_long_note_is_cut_on_a_character_boundary() {
        let long = "é".repeat(1000);
        let n = notice(Reason::FailedFast, &long);
        assert!(n.note.len() <= NOTE_LIMIT, "{}", n.note.len());
        assert!(n.note.ends_with("..."));
        assert_eq!(cut("short".into(), NOTE_LIMIT), "short");
        let r = Reporter::new(Binary::Reaper, &"p".repeat(300));
        assert_eq!(r.instance.len(), INSTANCE_LIMIT);
        assert_eq!(r.controller, "tcab.dev/reaper");
    }

    #[test]
    fn a_job_without_a_uid_is_named_without_one() {
        assert_eq!(Regarding::job("ns", "j", Some("")).uid, None);
    }

    #[tokio::test]
    async fn a_sender_that_is_off_takes_every_notice_without_waiting() {
        let off = EventSender::off();
        for _ in 0..(QUEUE * 2) {
            off.send(notice(Reason::DeletedStale, "x"));
        }
    }
}
