//! Every label value the metrics can carry, declared once.
//!
//! Each label's values are an enum here (or an enum of the crate it belongs
//! to, given its values here: [`Lane`], [`Verb`], [`Binary`]) implementing
//! [`LabelValue`]: its values in a fixed order ([`LabelValue::ALL`]), the text
//! each becomes and what it means. The binaries record through these enums
//! and create every counter series they can emit at 0 from them (so
//! `increase()` sees the first event), and docs/metrics.md's label table and
//! death-cause table are rendered from them ([`label_table`],
//! [`cause_table`]); a test keeps the document equal to this code:
//!
//! ```text
//! UPDATE_GENERATED=1 cargo test -p tcab-shared --test it metrics_docs
//! ```

use crate::config::Binary;
use crate::kube_api::Verb;
use crate::lane::Lane;
use std::fmt::Write as _;

/// The values one label takes.
pub trait LabelValue: Copy + Eq + std::fmt::Debug + 'static {
    /// The label's name.
    const LABEL: &'static str;
    /// Every value, in the documented order.
    const ALL: &'static [Self];
    /// The value as the label carries it.
    fn as_str(self) -> &'static str;
    /// What the value means, for the documentation.
    fn meaning(self) -> &'static str;
}

/// Declares a label's values as an enum implementing [`LabelValue`].
macro_rules! label_values {
    (
        $(#[$meta:meta])*
        pub enum $name:ident: $label:literal {
            $($(#[$vmeta:meta])* $variant:ident => $text:literal, $meaning:literal;)+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl LabelValue for $name {
            const LABEL: &'static str = $label;
            const ALL: &'static [Self] = &[$($name::$variant),+];
            fn as_str(self) -> &'static str {
                $name::as_str(self)
            }
            fn meaning(self) -> &'static str {
                match self {
                    $($name::$variant => $meaning,)+
                }
            }
        }

        impl $name {
            /// The value as the label carries it.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(LabelValue::as_str(*self))
            }
        }
    };
}

impl LabelValue for Lane {
    const LABEL: &'static str = "lane";
    const ALL: &'static [Self] = &Lane::ALL;
    fn as_str(self) -> &'static str {
        self.label_value()
    }
    fn meaning(self) -> &'static str {
        self.spec().meaning
    }
}

impl LabelValue for Verb {
    const LABEL: &'static str = "verb";
    const ALL: &'static [Self] = &[
        Verb::Create,
        Verb::Get,
        Verb::List,
        Verb::Watch,
        Verb::Delete,
    ];
    fn as_str(self) -> &'static str {
        Verb::as_str(self)
    }
    fn meaning(self) -> &'static str {
        match self {
            Verb::Create => {
                "a create (the admitter's Jobs, its dry run at start, and every container's Events)"
            }
            Verb::Get => "a read of one object (a pod's log read too)",
            Verb::List => "a list (the Job watch's (re)list too)",
            Verb::Watch => "the Job watch",
            Verb::Delete => "a delete",
        }
    }
}

impl LabelValue for Binary {
    const LABEL: &'static str = "binary";
    const ALL: &'static [Self] = &[Binary::Admitter, Binary::LeaseKeeper, Binary::Reaper];
    fn as_str(self) -> &'static str {
        self.name()
    }
    fn meaning(self) -> &'static str {
        match self {
            Binary::Admitter => "the admitter container",
            Binary::LeaseKeeper => "the lease-keeper container",
            Binary::Reaper => "the reaper container",
        }
    }
}

label_values! {
    /// What an admission attempt of a lane came to
    /// (`tcab_dispatcher_admissions_total`).
    pub enum AdmissionOutcome: "outcome" {
        Created => "created", "a claim became a Job";
        EmptyQueue => "empty_queue", "the backend had nothing to claim";
        GateClosed => "gate_closed", "the admission gate kept the lane from claiming";
        LaneFull => "lane_full", "in flight at the cap";
        Paused => "paused", "a cap of 0";
        Error => "error", "the claim or the create failed (its reason in `admission_errors_total`), or the claim was poisoned (`poisoned_claims_total`)";
    }
}

label_values! {
    /// What holds a lane from claiming, as its last tick decided
    /// (`tcab_dispatcher_lane_hold`): one value per kind of the admitter's
    /// hold reason, and `none` while the lane claims.
    pub enum LaneHold: "reason" {
        None => "none", "not held: the lane's last tick claimed";
        Disabled => "disabled", "the lane is off (the publish lane without a publisher image)";
        Paused => "paused", "its cap is 0";
        ViewNotCurrent => "view_not_current", "the admitter's Job view is not current, so the lane's count is unknown";
        BackingOff => "backing_off", "its claims or creates failed, and it waits out its back-off";
        Resting => "resting", "its last claim found the queue empty, and it claims again a poll interval later";
        LaneFull => "lane_full", "in flight at the cap";
        GateClosed => "gate_closed", "the admission gate is closed (why in `gate_closed_reason`)";
    }
}

label_values! {
    /// Why a lane's admission gate is closed, as the admitter last read it
    /// (`tcab_dispatcher_gate_closed_reason`): the lease-keeper's reason, or
    /// the admitter's own when it could not ask or read the answer.
    pub enum GateClosedReason: "reason" {
        ViewNotCurrent => "view_not_current", "the lease-keeper's Job view is not current, so new Jobs would go unrenewed";
        LaneNotRenewed => "lane_not_renewed", "the lease-keeper does not renew the lane (publishing is off in the lease-keeper)";
        RenewalFailing => "renewal_failing", "the lane's latest lease renewal call failed";
        NeverRenewed => "never_renewed", "no lease renewal of the lane has succeeded since the lease-keeper started";
        RenewalStale => "renewal_stale", "the lane's last successful renewal is older than `TCAB_DISPATCHER_GATE_MAX_AGE_SECONDS`";
        KeeperUnreachable => "keeper_unreachable", "the admitter could not ask: the lease-keeper did not answer";
        UnreadableAnswer => "unreadable_answer", "the lease-keeper's answer held no verdict this admitter can read";
    }
}

label_values! {
    /// How a Job ended (`tcab_dispatcher_job_duration_seconds`).
    pub enum JobOutcome: "outcome" {
        Succeeded => "succeeded", "its `Complete` condition turned true";
        Failed => "failed", "its `Failed` condition turned true";
    }
}

label_values! {
    /// Whether a call of a round succeeded (`lease_renewals_total`,
    /// `stale_job_deletes_total`).
    pub enum CallResult: "result" {
        Ok => "ok", "it succeeded (a stale Job already gone counts)";
        Failed => "failed", "it failed (its reason in the error counters)";
    }
}

label_values! {
    /// What reporting a poisoned claim failed came to
    /// (`poisoned_claims_total`).
    pub enum PoisonResult: "result" {
        Ok => "ok", "reported failed";
        Failed => "failed", "the report failed, and the claim lapses";
        None => "none", "the answer had no usable id and token to report with";
    }
}

label_values! {
    /// Why a claim cannot become a Job for a reason of its own
    /// (`poisoned_claims_total`).
    pub enum PoisonReason: "reason" {
        /// The claim's answer breaks the contract (a missing or mistyped
        /// field, an invalid id, an unusable token).
        Malformed => "malformed", "the claim's answer breaks the contract";
        /// Its request is over the 120 KiB one environment variable can carry.
        TooLarge => "too_large", "its request is over 120 KiB";
        /// The API server refused its Job with 422 after the dry run at start
        /// passed: the job's own data is invalid in a Job.
        Invalid => "invalid", "the API server refused its Job with 422";
    }
}

label_values! {
    /// Why a sandbox pod was deleted (`sandboxes_reaped_total`).
    pub enum ReapReason: "reason" {
        DriverFailed => "driver_failed", "a sandbox of a failed (or judged dead) driver Job";
        Orphan => "orphan", "a sandbox whose job id matches no owned Job (or only driver Jobs that succeeded) and the backend does not drive, past the grace";
    }
}

label_values! {
    /// Which report failed (`report_failures_total`).
    pub enum ReportKind: "report" {
        Death => "death", "a death report, or the read of the job before it";
        Lost => "lost", "a lost report";
    }
}

label_values! {
    /// The step of an admission that failed (`admission_errors_total`).
    pub enum AdmissionStep: "step" {
        Claim => "claim", "the claim call to the backend";
        Create => "create", "creating the claim's Job (the create, its settle, or building it)";
    }
}

label_values! {
    /// Why a call failed, from the typed error of the backend client
    /// ([`crate::backend::BackendErrorKind`]) or of a Kubernetes call
    /// ([`crate::kube_api::CallError`]); never parsed from text.
    pub enum ErrorReason: "reason" {
        Timeout => "timeout", "no complete answer within the call's timeout";
        Connect => "connect", "no answer: the connection failed or broke (refused, reset, DNS, TLS)";
        Unauthorized => "unauthorized", "401 (the backend: 401 or 403), a token refused";
        Forbidden => "forbidden", "403 from the API server: the Role lacks the permission";
        NotFound => "not_found", "404";
        Conflict => "conflict", "409 (already exists, a precondition, a state that does not fit)";
        Invalid => "invalid", "422 from the API server: the object is invalid";
        Throttled => "throttled", "429 from the API server";
        Unavailable => "unavailable", "503 from the API server, or 429 or 503 from the backend after its retry";
        Http4xx => "http_4xx", "any other 4xx";
        Http5xx => "http_5xx", "any other 5xx";
        Decode => "decode", "an answer that could not be read or breaks the contract";
        Request => "request", "the request could not be made (an invalid id or token, a client setup error)";
        Other => "other", "anything else the Kubernetes client reports (credentials, configuration)";
    }
}

impl ErrorReason {
    /// The reasons a Kubernetes call can fail with.
    pub const KUBE: &'static [ErrorReason] = &[
        ErrorReason::Timeout,
        ErrorReason::Connect,
        ErrorReason::Unauthorized,
        ErrorReason::Forbidden,
        ErrorReason::NotFound,
        ErrorReason::Conflict,
        ErrorReason::Invalid,
        ErrorReason::Throttled,
        ErrorReason::Unavailable,
        ErrorReason::Http4xx,
        ErrorReason::Http5xx,
        ErrorReason::Decode,
        ErrorReason::Request,
        ErrorReason::Other,
    ];

    /// The reasons a backend call can fail with (one for each
    /// [`crate::backend::BackendErrorKind`]).
    pub const BACKEND: &'static [ErrorReason] = &[
        ErrorReason::Timeout,
        ErrorReason::Connect,
        ErrorReason::Unauthorized,
        ErrorReason::NotFound,
        ErrorReason::Conflict,
        ErrorReason::Unavailable,
        ErrorReason::Http4xx,
        ErrorReason::Http5xx,
        ErrorReason::Decode,
        ErrorReason::Request,
    ];

    /// The reason of an HTTP error status.
    pub fn of_status(code: u16) -> ErrorReason {
        match code {
            401 => ErrorReason::Unauthorized,
            403 => ErrorReason::Forbidden,
            404 => ErrorReason::NotFound,
            409 => ErrorReason::Conflict,
            422 => ErrorReason::Invalid,
            429 => ErrorReason::Throttled,
            503 => ErrorReason::Unavailable,
            400..=499 => ErrorReason::Http4xx,
            500..=599 => ErrorReason::Http5xx,
            _ => ErrorReason::Other,
        }
    }
}

label_values! {
    /// A backend call (`call` on the backend metrics).
    pub enum BackendCall: "call" {
        ClaimRun => "claim_run", "`POST /jobs/next` (admitter)";
        ClaimPublish => "claim_publish", "`POST /publish-jobs/next` (admitter)";
        RenewRunLeases => "renew_run_leases", "`POST /jobs/leases` (lease-keeper)";
        RenewPublishLeases => "renew_publish_leases", "`POST /publish-jobs/leases` (lease-keeper)";
        ActiveRuns => "active_runs", "`GET /jobs/active` (lease-keeper, and the reaper's orphan sweep)";
        ActivePublishes => "active_publishes", "`GET /publish-jobs/active` (lease-keeper)";
        GetJob => "get_job", "`GET /jobs/{id}` (lease-keeper, before a death report)";
        ReportDeath => "report_death", "`POST /jobs/{id}/status`: a death report (lease-keeper), a poisoned run's failed report (admitter)";
        ReportLost => "report_lost", "`POST /jobs/{id}/lost` (lease-keeper)";
        ReportPublishLost => "report_publish_lost", "`POST /publish-jobs/{id}/lost` (lease-keeper)";
        ReportPublishFailed => "report_publish_failed", "`POST /publish-jobs/{id}/result`: a poisoned publish's failed result (admitter)";
    }
}

impl BackendCall {
    /// The binaries that make this call.
    pub fn made_by(self) -> &'static [Binary] {
        use Binary::{Admitter, LeaseKeeper, Reaper};
        match self {
            BackendCall::ClaimRun
            | BackendCall::ClaimPublish
            | BackendCall::ReportPublishFailed => &[Admitter],
            BackendCall::ReportDeath => &[Admitter, LeaseKeeper],
            BackendCall::ActiveRuns => &[LeaseKeeper, Reaper],
            BackendCall::RenewRunLeases
            | BackendCall::RenewPublishLeases
            | BackendCall::ActivePublishes
            | BackendCall::GetJob
            | BackendCall::ReportLost
            | BackendCall::ReportPublishLost => &[LeaseKeeper],
        }
    }

    /// The calls `binary` makes.
    pub fn of(binary: Binary) -> impl Iterator<Item = BackendCall> {
        BackendCall::ALL
            .iter()
            .copied()
            .filter(move |c| c.made_by().contains(&binary))
    }
}

label_values! {
    /// A Kubernetes call (`call` on `kube_request_duration_seconds`).
    pub enum KubeCall: "call" {
        CreateJob => "create_job", "create a Job (the admitter's Jobs, its dry run at start)";
        GetJob => "get_job", "read a Job by name";
        ListJobs => "list_jobs", "list Jobs by label (a fresh read before a reap or a judgement)";
        DeleteJob => "delete_job", "delete a Job (a stale claim's, one whose pod never starts or is refused, a publisher judged dead)";
        GetPod => "get_pod", "read a pod by name";
        ListPods => "list_pods", "list pods by label (a dead Job's, the sandboxes, the pods that outlive their Job)";
        DeletePod => "delete_pod", "delete a pod (a sandbox, a stale claim's pod)";
        GetPodLog => "get_pod_log", "read a dead pod's log tail";
        ListEvents => "list_events", "list the Job controller's `FailedCreate` Events (the lease-keeper, when a Job has had no pod for longer than the start grace)";
        CreateEvent => "create_event", "create an `events.k8s.io/v1` Event on a Job the container acted on (best effort: one bounded try, off the loops)";
    }
}

impl KubeCall {
    /// The verb of the call.
    pub fn verb(self) -> Verb {
        match self {
            KubeCall::CreateJob | KubeCall::CreateEvent => Verb::Create,
            KubeCall::GetJob | KubeCall::GetPod | KubeCall::GetPodLog => Verb::Get,
            KubeCall::ListJobs | KubeCall::ListPods | KubeCall::ListEvents => Verb::List,
            KubeCall::DeleteJob | KubeCall::DeletePod => Verb::Delete,
        }
    }
}

label_values! {
    /// A loop (`tick_duration_seconds`).
    pub enum LoopName: "loop" {
        AdmitRun => "admit_run", "the admitter's run lane";
        AdmitPublish => "admit_publish", "the admitter's publish lane";
        Renew => "renew", "the lease-keeper's renewals";
        Report => "report", "the lease-keeper's deaths and lost runs and publishes";
        Reap => "reap", "the reaper";
    }
}

label_values! {
    /// The kind of a dead driver's cause, as the lease-keeper reported it
    /// (`death_reports_total`; read from the pod and the Job).
    pub enum Cause: "cause" {
        OomKilled => "oom_killed", "the driver container was OOM-killed";
        Killed => "killed", "the container ended on a signal (SIGKILL, SIGTERM, ...) other than an OOM kill";
        ExitCode => "exit_code", "the container exited with a non-zero code of its own";
        Evicted => "evicted", "`DisruptionTarget` reason `EvictionByEvictionAPI` (e.g. a node drain)";
        Preempted => "preempted", "`DisruptionTarget` reason `PreemptionByScheduler`";
        TaintDeleted => "taint_deleted", "`DisruptionTarget` reason `DeletionByTaintManager` (a `NoExecute` taint)";
        KubeletEvicted => "kubelet_evicted", "the kubelet ended the pod: `DisruptionTarget` reason `TerminationByKubelet`, or a pod failed with reason `Evicted`, `Shutdown`, `Terminated`, `OutOf*`";
        NodeLost => "node_lost", "the node went away: `DisruptionTarget` reason `DeletionByPodGC`, a pod failed with reason `NodeLost`, or a Job that could not finish failing";
        PodDeleted => "pod_deleted", "the pod ran and was deleted out from under the run";
        JobDeleted => "job_deleted", "the Job was deleted by someone other than the dispatcher while its pod ran (by hand, with or without `--cascade=orphan`)";
        NeverStarted => "never_started", "the Job never started a pod";
        ImagePull => "image_pull", "the container never ran: `ErrImagePull`, `ImagePullBackOff`, `InvalidImageName`";
        ConfigError => "config_error", "the container never ran: `CreateContainerConfigError`, `CreateContainerError`, `RunContainerError`";
        Unschedulable => "unschedulable", "the pod was never scheduled (`PodScheduled` false, reason `Unschedulable`)";
        Refused => "refused", "the API server refused to create the Job's pod (the Job controller's `FailedCreate` Event: PodSecurity, a quota, a LimitRange, an admission policy or webhook, a missing ServiceAccount)";
        DeadlineExceeded => "deadline_exceeded", "the Job's `activeDeadlineSeconds` ran out";
        Unknown => "unknown", "anything else, or nothing says why";
    }
}

/// One row of the label table: a label, the metrics it is on, its values.
#[derive(Debug, Clone)]
pub struct LabelRow {
    /// The label's name.
    pub label: &'static str,
    /// The metrics it is on (with this value set).
    pub on: &'static str,
    /// Its values and what each means; empty when [`LabelRow::text`] says it.
    pub values: Vec<(&'static str, &'static str)>,
    /// Words for a label whose values are not a fixed set.
    pub text: &'static str,
}

fn row<L: LabelValue>(on: &'static str) -> LabelRow {
    LabelRow {
        label: L::LABEL,
        on,
        values: L::ALL.iter().map(|v| (v.as_str(), v.meaning())).collect(),
        text: "",
    }
}

fn reasons(on: &'static str, which: &[ErrorReason]) -> LabelRow {
    LabelRow {
        label: ErrorReason::LABEL,
        on,
        values: which.iter().map(|v| (v.as_str(), v.meaning())).collect(),
        text: "",
    }
}

/// Every label and its values, in the order docs/metrics.md lists them.
pub fn label_rows() -> Vec<LabelRow> {
    vec![
        row::<Lane>("every metric of a lane"),
        row::<AdmissionOutcome>("`admissions_total`"),
        row::<JobOutcome>("`job_duration_seconds`"),
        row::<LaneHold>("`lane_hold`"),
        row::<GateClosedReason>("`gate_closed_reason`"),
        LabelRow {
            label: "outcome",
            on: "`backend_request_duration_seconds`, `kube_request_duration_seconds`",
            values: vec![],
            text: "`ok`, or the failure's `reason` (below)",
        },
        row::<CallResult>("`lease_renewals_total`, `stale_job_deletes_total`"),
        row::<PoisonResult>("`poisoned_claims_total`"),
        reasons(
            "`backend_errors_total`, `report_failures_total`, `admission_errors_total` (`step=\"claim\"`): a backend call's",
            ErrorReason::BACKEND,
        ),
        reasons(
            "`kube_api_errors_total`, `admission_errors_total` (`step=\"create\"`): a Kubernetes call's",
            ErrorReason::KUBE,
        ),
        row::<PoisonReason>("`poisoned_claims_total`"),
        row::<ReapReason>("`sandboxes_reaped_total`"),
        row::<AdmissionStep>("`admission_errors_total`"),
        row::<ReportKind>("`report_failures_total`"),
        row::<BackendCall>("`backend_request_duration_seconds`, `backend_errors_total`"),
        LabelRow {
            label: "status",
            on: "`backend_request_duration_seconds`",
            values: vec![],
            text: "the HTTP status code of the answer (`200`, `204`, `409`, `503`, ...), or `timeout` or `connect` when no answer came",
        },
        row::<KubeCall>("`kube_request_duration_seconds`"),
        row::<Verb>("`kube_api_errors_total`"),
        row::<LoopName>("`tick_duration_seconds`"),
        LabelRow {
            label: "cause",
            on: "`death_reports_total`",
            values: vec![],
            text: "see [Death causes](#death-causes)",
        },
        row::<Binary>("`build_info`"),
        LabelRow {
            label: "contract",
            on: "`build_info`",
            values: vec![(
                crate::backend::CONTRACT_VERSION,
                "the version of the backend contract the binary speaks (docs/backend-contract.md)",
            )],
            text: "",
        },
    ]
}

/// docs/metrics.md's label table, rendered from [`label_rows`].
pub fn label_table() -> String {
    let mut out = String::from("| label | on | values |\n|---|---|---|\n");
    for row in label_rows() {
        let values = if row.values.is_empty() {
            row.text.to_owned()
        } else {
            row.values
                .iter()
                .map(|(v, m)| format!("`{v}`: {m}"))
                .collect::<Vec<_>>()
                .join("; ")
        };
        // Writing into a String cannot fail.
        let _ = writeln!(out, "| `{}` | {} | {} |", row.label, row.on, values);
    }
    out
}

/// docs/metrics.md's death-cause table, rendered from [`Cause`].
pub fn cause_table() -> String {
    let mut out = String::from("| cause | when |\n|---|---|\n");
    for cause in Cause::ALL {
        let _ = writeln!(out, "| `{}` | {} |", cause.as_str(), cause.meaning());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn distinct<L: LabelValue>() {
        let texts: BTreeSet<&str> = L::ALL.iter().map(|v| v.as_str()).collect();
        assert_eq!(texts.len(), L::ALL.len(), "{} repeats a value", L::LABEL);
        for v in L::ALL {
            let t = v.as_str();
            assert!(
                !t.is_empty()
                    && t.bytes().all(|b| b.is_ascii_lowercase()
                        || b.is_ascii_digit()
                        || b == b'_'
                        || b == b'-'),
                "{}: {t:?}",
                L::LABEL
            );
            assert!(!v.meaning().is_empty(), "{}: {t} has no meaning", L::LABEL);
            // "; " separates the values in docs/metrics.md's table.
            assert!(
                !v.meaning().contains("; "),
                "{}: {t}: {:?}",
                L::LABEL,
                v.meaning()
            );
        }
    }

    #[test]
    fn every_label_has_distinct_plain_values_with_a_meaning() {
        distinct::<Lane>();
        distinct::<Verb>();
        distinct::<Binary>();
        distinct::<AdmissionOutcome>();
        distinct::<LaneHold>();
        distinct::<GateClosedReason>();
        distinct::<JobOutcome>();
        distinct::<CallResult>();
        distinct::<PoisonResult>();
        distinct::<PoisonReason>();
        distinct::<ReapReason>();
        distinct::<ReportKind>();
        distinct::<AdmissionStep>();
        distinct::<ErrorReason>();
        distinct::<BackendCall>();
        distinct::<KubeCall>();
        distinct::<LoopName>();
        distinct::<Cause>();
    }

    #[test]
    fn the_reason_subsets_are_reasons_and_every_call_has_a_maker() {
        for r in ErrorReason::KUBE.iter().chain(ErrorReason::BACKEND) {
            assert!(ErrorReason::ALL.contains(r));
        }
        for call in BackendCall::ALL {
            assert!(!call.made_by().is_empty(), "{call}");
        }
        let admitter: Vec<_> = BackendCall::of(Binary::Admitter).collect();
        assert_eq!(
            admitter,
            [
                BackendCall::ClaimRun,
                BackendCall::ClaimPublish,
                BackendCall::ReportDeath,
                BackendCall::ReportPublishFailed
            ]
        );
        assert_eq!(
            BackendCall::of(Binary::Reaper).collect::<Vec<_>>(),
            [BackendCall::ActiveRuns]
        );
    }

    #[test]
    fn statuses_map_to_their_reason() {
        let cases = [
            (401, "unauthorized"),
            (403, "forbidden"),
            (404, "not_found"),
            (409, "conflict"),
            (410, "http_4xx"),
            (422, "invalid"),
            (429, "throttled"),
            (500, "http_5xx"),
            (503, "unavailable"),
            (504, "http_5xx"),
            (302, "other"),
        ];
        for (code, want) in cases {
            assert_eq!(ErrorReason::of_status(code).as_str(), want, "{code}");
        }
    }
}
