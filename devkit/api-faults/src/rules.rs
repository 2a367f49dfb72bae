//! Fault rules and the pure decision of which rule (if any) a request meets.
//!
//! A rule is scoped by verb(s), resource(s) and optionally the bearer token
//! the request presents, and bounded by a count of requests, a window of
//! real seconds from when it was added, or both (whichever ends first).
//! [`decide`] looks at the rule list, the request's attributes and the time,
//! and changes nothing; [`FaultBook`](crate::book::FaultBook) applies its answer.

use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// What an injected API fault does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApiFaultMode {
    /// Answer 500 `InternalError` (a Status, as for a failing etcd).
    Error500,
    /// Answer 429 as the API server's priority-and-fairness (or
    /// max-in-flight) filter rejects a request: `Retry-After` header and a
    /// plain-text body.
    Throttle,
    /// Answer normally after a delay.
    Delay,
    /// Answer 503 `ServiceUnavailable` (a Status, `Retry-After` when
    /// `retry_after_seconds` is given).
    Unavailable,
    /// Accept the request and never answer: the handler ends only when the
    /// client gives up (timeout, disconnect) or the connection is cut by a
    /// restart.
    Hang,
    /// Watches only: the watch opens (200) and sends nothing, no events and
    /// no bookmarks, until its `timeoutSeconds` deadline or until the client
    /// closes it. A watch already open when the rule is active goes silent
    /// at the next event or bookmark it would send. Once silent, a watch
    /// stays silent even after the rule ends; the events it missed stay in
    /// the history for a resume from its last resourceVersion.
    Silence,
}

impl ApiFaultMode {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            ApiFaultMode::Error500 => "error500",
            ApiFaultMode::Throttle => "throttle",
            ApiFaultMode::Delay => "delay",
            ApiFaultMode::Unavailable => "unavailable",
            ApiFaultMode::Hang => "hang",
            ApiFaultMode::Silence => "silence",
        }
    }
}

/// Make the next `count` API calls misbehave (the original count-bound
/// form, kept for existing callers; [`FaultRule`] is the general one and
/// `From<ApiFault>` converts).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiFault {
    /// What to do.
    pub mode: ApiFaultMode,
    /// How many calls it applies to.
    pub count: u32,
    /// Retry-After seconds for `throttle` (default 1).
    #[serde(default)]
    pub retry_after_seconds: Option<u64>,
    /// Delay for `delay`, in milliseconds (default 200).
    #[serde(default)]
    pub delay_ms: Option<u64>,
    /// Only calls on this resource (`jobs`, `pods`, `pods/log`) count.
    #[serde(default)]
    pub resource: Option<String>,
    /// Only calls with this verb (`list`, `create`, ...) count.
    #[serde(default)]
    pub verb: Option<String>,
}

/// The verbs a rule may name (the API server's request verbs).
pub const VERBS: &[&str] = &[
    "get",
    "list",
    "watch",
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
];

/// A fault rule: what to do, to which requests, for how long.
///
/// JSON (`POST /admin/faults/api`): `mode`, then any of `verbs` (list) or
/// `verb` (one), `resources` or `resource`, `token`, `count`, `seconds`,
/// `retry_after_seconds`, `delay_ms`, `close_open_watches`. At least one
/// of `count` and `seconds` is required. Unknown fields are refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RuleWire")]
pub struct FaultRule {
    /// What to do.
    pub mode: ApiFaultMode,
    /// Only these verbs (`list`, `watch`, `create`, ...); empty = every verb.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verbs: Vec<String>,
    /// Only these resources (`jobs`, `pods`, `pods/log`, `jobs/status`:
    /// exact names, a subresource is its own resource); empty = every one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<String>,
    /// Only requests presenting this bearer token (e.g. the dispatcher's,
    /// so a test's own reads stay clean). Never echoed back by the server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// At most this many requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
    /// Only for this many real seconds (not kube-sim's sim time: `--speed`
    /// does not scale it) from when the server receives the rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds: Option<f64>,
    /// `Retry-After` for `throttle` (default 1) and `unavailable` (none by
    /// default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_seconds: Option<u64>,
    /// Delay for `delay`, in milliseconds (default 200).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
    /// When the rule is added, end (cleanly, as the API server ends a watch
    /// it terminates) every open watch in its scope, so clients re-watch
    /// and meet the fault.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub close_open_watches: bool,
    /// `error500`, `unavailable` and `hang` only: the request is carried out
    /// first and only its answer is lost or replaced, as when etcd commits a
    /// write whose reply times out: a create's object exists although the
    /// client saw an error (or nothing).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub applied: bool,
}

/// The accepted JSON of a rule, before normalising and checking.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleWire {
    mode: ApiFaultMode,
    #[serde(default)]
    verb: Option<String>,
    #[serde(default)]
    verbs: Vec<String>,
    #[serde(default)]
    resource: Option<String>,
    #[serde(default)]
    resources: Vec<String>,
    #[serde(default)]
    token: Option<String>,
    #[serde(default)]
    count: Option<u32>,
    #[serde(default)]
    seconds: Option<f64>,
    #[serde(default)]
    retry_after_seconds: Option<u64>,
    #[serde(default)]
    delay_ms: Option<u64>,
    #[serde(default)]
    close_open_watches: bool,
    #[serde(default)]
    applied: bool,
}

impl TryFrom<RuleWire> for FaultRule {
    type Error = String;

    fn try_from(w: RuleWire) -> Result<Self, String> {
        let mut verbs = w.verbs;
        verbs.extend(w.verb);
        let mut resources = w.resources;
        resources.extend(w.resource);
        FaultRule {
            mode: w.mode,
            verbs,
            resources,
            token: w.token,
            count: w.count,
            seconds: w.seconds,
            retry_after_seconds: w.retry_after_seconds,
            delay_ms: w.delay_ms,
            close_open_watches: w.close_open_watches,
            applied: w.applied,
        }
        .checked()
    }
}

impl From<ApiFault> for FaultRule {
    fn from(f: ApiFault) -> Self {
        FaultRule {
            mode: f.mode,
            verbs: f.verb.into_iter().collect(),
            resources: f.resource.into_iter().collect(),
            token: None,
            count: Some(f.count),
            seconds: None,
            retry_after_seconds: f.retry_after_seconds,
            delay_ms: f.delay_ms,
            close_open_watches: false,
            applied: false,
        }
    }
}

impl FaultRule {
    /// A rule of this mode with no scope and no bound yet (add one with
    /// [`FaultRule::times`] or [`FaultRule::for_seconds`]).
    pub fn new(mode: ApiFaultMode) -> Self {
        FaultRule {
            mode,
            verbs: Vec::new(),
            resources: Vec::new(),
            token: None,
            count: None,
            seconds: None,
            retry_after_seconds: None,
            delay_ms: None,
            close_open_watches: false,
            applied: false,
        }
    }
    /// Only these verbs.
    pub fn verbs<S: Into<String>>(mut self, verbs: impl IntoIterator<Item = S>) -> Self {
        self.verbs = verbs.into_iter().map(Into::into).collect();
        self
    }
    /// Only these resources.
    pub fn resources<S: Into<String>>(mut self, resources: impl IntoIterator<Item = S>) -> Self {
        self.resources = resources.into_iter().map(Into::into).collect();
        self
    }
    /// Only requests presenting this bearer token.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }
    /// At most `n` requests.
    pub fn times(mut self, n: u32) -> Self {
        self.count = Some(n);
        self
    }
    /// For `secs` real seconds from when the server receives it.
    pub fn for_seconds(mut self, secs: f64) -> Self {
        self.seconds = Some(secs);
        self
    }
    /// `Retry-After` seconds.
    pub fn retry_after(mut self, secs: u64) -> Self {
        self.retry_after_seconds = Some(secs);
        self
    }
    /// The delay of a `delay` rule.
    pub fn delay(mut self, d: Duration) -> Self {
        self.delay_ms = Some(d.as_millis().try_into().unwrap_or(u64::MAX));
        self
    }
    /// End the open watches in scope when the rule is added.
    pub fn closing_open_watches(mut self) -> Self {
        self.close_open_watches = true;
        self
    }
    /// Carry the request out before the fault strikes (see
    /// [`FaultRule::applied`]).
    pub fn after_applying(mut self) -> Self {
        self.applied = true;
        self
    }

    /// The rule if it is well formed, else why not.
    pub fn checked(self) -> Result<Self, String> {
        if self.count.is_none() && self.seconds.is_none() {
            return Err("a fault needs a bound: give \"count\", \"seconds\" or both".into());
        }
        if let Some(s) = self.seconds
            && !(s.is_finite() && s > 0.0 && s <= 1e9)
        {
            return Err(format!(
                "\"seconds\" must be a positive number of seconds, got {s}"
            ));
        }
        if let Some(v) = self.verbs.iter().find(|v| !VERBS.contains(&v.as_str())) {
            return Err(format!("unknown verb {v:?} (known: {})", VERBS.join(", ")));
        }
        if self.resources.iter().any(|r| r.trim().is_empty()) {
            return Err("a resource name is empty".into());
        }
        if self.applied
            && !matches!(
                self.mode,
                ApiFaultMode::Error500 | ApiFaultMode::Unavailable | ApiFaultMode::Hang
            )
        {
            return Err(format!(
                "\"applied\" goes with error500, unavailable or hang, not {}",
                self.mode.as_str()
            ));
        }
        if self.mode == ApiFaultMode::Silence
            && !self.verbs.is_empty()
            && !self.verbs.iter().any(|v| v == "watch")
        {
            return Err("\"silence\" applies to watches only: include \"watch\" in verbs".into());
        }
        Ok(self)
    }

    /// Whether a request is in the rule's scope (bounds aside).
    pub fn covers(&self, req: &RequestAttrs<'_>) -> bool {
        (self.verbs.is_empty() || self.verbs.iter().any(|v| v == req.verb))
            && (self.resources.is_empty() || self.resources.iter().any(|r| r == req.resource))
            && self.token.as_deref().is_none_or(|t| req.token == Some(t))
            && (self.mode != ApiFaultMode::Silence || req.verb == "watch")
    }
}

/// What a request is, for the fault decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestAttrs<'a> {
    /// Kubernetes verb (`list`, `watch`, `create`, ...).
    pub verb: &'a str,
    /// Resource with subresource (`jobs`, `pods/log`, ...).
    pub resource: &'a str,
    /// The bearer token presented, if any.
    pub token: Option<&'a str>,
}

/// One rule in a server's list, with its bookkeeping.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleState {
    /// Its id (`POST /admin/faults/api` answers it).
    pub id: u64,
    /// The rule.
    pub rule: FaultRule,
    /// When the server received it.
    pub added: Instant,
    /// Requests it may still affect (`None` = no count bound).
    pub remaining: Option<u32>,
    /// False once cleared or removed by the admin.
    pub enabled: bool,
    /// How many requests (or open watches) it affected.
    pub affected: u64,
}

impl RuleState {
    /// A rule received at `added`.
    pub fn new(id: u64, rule: FaultRule, added: Instant) -> Self {
        RuleState {
            id,
            remaining: rule.count,
            rule,
            added,
            enabled: true,
            affected: 0,
        }
    }

    /// When its time window closes, if it has one.
    pub fn ends_at(&self) -> Option<Instant> {
        self.rule
            .seconds
            .map(|s| self.added + Duration::from_secs_f64(s))
    }

    /// Whether it can still affect a request at `now`.
    pub fn live(&self, now: Instant) -> bool {
        self.enabled && self.remaining != Some(0) && self.ends_at().is_none_or(|end| now < end)
    }
}

/// What a request must do because of a fault.
#[derive(Debug, Clone, PartialEq)]
pub enum FaultAction {
    /// Answer 500 InternalError.
    Error500,
    /// Answer 503 ServiceUnavailable, with this `Retry-After` if any.
    Unavailable(Option<u64>),
    /// Answer 429 as priority-and-fairness does, with this `Retry-After`.
    Throttle(u64),
    /// Wait, then answer normally.
    Delay(Duration),
    /// Never answer.
    Hang,
    /// (Watch) open and send nothing.
    Silence,
}

/// When the decision is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// A request arriving.
    Arrival,
    /// An open watch about to send an event or a bookmark: only `silence`
    /// rules apply.
    OpenWatch,
}

/// The first live rule (in the order added) that covers the request at
/// `now`, by index, with what it makes the request do.
pub fn decide(
    rules: &[RuleState],
    req: &RequestAttrs<'_>,
    now: Instant,
    stage: Stage,
) -> Option<(usize, FaultAction)> {
    rules.iter().enumerate().find_map(|(i, r)| {
        if stage == Stage::OpenWatch && r.rule.mode != ApiFaultMode::Silence {
            return None;
        }
        if !(r.live(now) && r.rule.covers(req)) {
            return None;
        }
        let action = match r.rule.mode {
            ApiFaultMode::Error500 => FaultAction::Error500,
            ApiFaultMode::Unavailable => FaultAction::Unavailable(r.rule.retry_after_seconds),
            ApiFaultMode::Throttle => {
                FaultAction::Throttle(r.rule.retry_after_seconds.unwrap_or(1))
            }
            ApiFaultMode::Delay => {
                FaultAction::Delay(Duration::from_millis(r.rule.delay_ms.unwrap_or(200)))
            }
            ApiFaultMode::Hang => FaultAction::Hang,
            ApiFaultMode::Silence => FaultAction::Silence,
        };
        Some((i, action))
    })
}

/// Books one affected request on the rule `decide` chose.
pub fn consume(rule: &mut RuleState) {
    rule.affected += 1;
    if let Some(n) = &mut rule.remaining {
        *n = n.saturating_sub(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req<'a>(verb: &'a str, resource: &'a str, token: Option<&'a str>) -> RequestAttrs<'a> {
        RequestAttrs {
            verb,
            resource,
            token,
        }
    }

    fn state(id: u64, rule: FaultRule, at: Instant) -> RuleState {
        RuleState::new(id, rule.checked().unwrap(), at)
    }

    #[test]
    fn scope_by_verbs_resources_and_token() {
        let t0 = Instant::now();
        let rules = vec![state(
            1,
            FaultRule::new(ApiFaultMode::Error500)
                .verbs(["list", "watch"])
                .resources(["jobs"])
                .token("dispatcher")
                .times(10),
            t0,
        )];
        let hit = |r| decide(&rules, &r, t0, Stage::Arrival);
        assert_eq!(
            hit(req("list", "jobs", Some("dispatcher"))),
            Some((0, FaultAction::Error500))
        );
        assert!(hit(req("watch", "jobs", Some("dispatcher"))).is_some());
        assert_eq!(hit(req("create", "jobs", Some("dispatcher"))), None);
        assert_eq!(hit(req("list", "pods", Some("dispatcher"))), None);
        assert_eq!(hit(req("list", "jobs/status", Some("dispatcher"))), None);
        assert_eq!(hit(req("list", "jobs", Some("admin"))), None);
        assert_eq!(hit(req("list", "jobs", None)), None);
    }

    #[test]
    fn time_window_and_count_bounds() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut rules = vec![
            state(
                1,
                FaultRule::new(ApiFaultMode::Throttle)
                    .retry_after(3)
                    .for_seconds(5.0),
                t0,
            ),
            state(2, FaultRule::new(ApiFaultMode::Error500).times(2), t0),
        ];
        let r = req("get", "pods", None);
        // the window: rule 1 first while it lasts
        assert_eq!(
            decide(&rules, &r, t0 + s(4), Stage::Arrival),
            Some((0, FaultAction::Throttle(3)))
        );
        // past it, the count-bound rule applies twice, then nothing
        for _ in 0..2 {
            let (i, a) = decide(&rules, &r, t0 + s(5), Stage::Arrival).unwrap();
            assert_eq!((i, a), (1, FaultAction::Error500));
            consume(&mut rules[i]);
        }
        assert_eq!(decide(&rules, &r, t0 + s(6), Stage::Arrival), None);
        assert_eq!(rules[1].affected, 2);
        // both bounds: whichever ends first
        let both = state(
            3,
            FaultRule::new(ApiFaultMode::Hang).times(1).for_seconds(1.0),
            t0,
        );
        assert!(both.live(t0));
        assert!(!both.live(t0 + s(1)));
        let mut used = both.clone();
        consume(&mut used);
        assert!(!used.live(t0));
        // a disabled (cleared) rule never applies
        let mut off = both;
        off.enabled = false;
        assert!(!off.live(t0));
    }

    #[test]
    fn silence_only_meets_watches_and_open_watches_only_meet_silence() {
        let t0 = Instant::now();
        let rules = vec![
            state(1, FaultRule::new(ApiFaultMode::Error500).times(5), t0),
            state(2, FaultRule::new(ApiFaultMode::Silence).times(5), t0),
        ];
        let watch = req("watch", "jobs", None);
        assert_eq!(
            decide(&rules, &watch, t0, Stage::Arrival),
            Some((0, FaultAction::Error500))
        );
        assert_eq!(
            decide(&rules, &watch, t0, Stage::OpenWatch),
            Some((1, FaultAction::Silence))
        );
        let rules = vec![state(2, FaultRule::new(ApiFaultMode::Silence).times(5), t0)];
        assert_eq!(
            decide(&rules, &req("list", "jobs", None), t0, Stage::Arrival),
            None
        );
    }

    #[test]
    fn defaults_of_each_mode() {
        let t0 = Instant::now();
        let one = |m| {
            let rules = vec![state(1, FaultRule::new(m).times(1), t0)];
            decide(&rules, &req("watch", "jobs", None), t0, Stage::Arrival).map(|(_, a)| a)
        };
        assert_eq!(one(ApiFaultMode::Throttle), Some(FaultAction::Throttle(1)));
        assert_eq!(
            one(ApiFaultMode::Delay),
            Some(FaultAction::Delay(Duration::from_millis(200)))
        );
        assert_eq!(
            one(ApiFaultMode::Unavailable),
            Some(FaultAction::Unavailable(None))
        );
        assert_eq!(one(ApiFaultMode::Hang), Some(FaultAction::Hang));
        assert_eq!(one(ApiFaultMode::Silence), Some(FaultAction::Silence));
    }

    #[test]
    fn json_accepts_the_old_and_the_new_shape_and_refuses_bad_rules() {
        let old = ApiFault {
            mode: ApiFaultMode::Throttle,
            count: 2,
            retry_after_seconds: Some(3),
            delay_ms: None,
            resource: Some("jobs".into()),
            verb: Some("create".into()),
        };
        let parsed: FaultRule =
            serde_json::from_value(serde_json::to_value(&old).unwrap()).unwrap();
        assert_eq!(parsed, FaultRule::from(old));
        assert_eq!(parsed.verbs, ["create"]);
        let new: FaultRule = serde_json::from_str(
            r#"{"mode":"silence","verbs":["watch"],"resources":["jobs"],"seconds":2.5,"token":"t"}"#,
        )
        .unwrap();
        assert_eq!(new.seconds, Some(2.5));
        assert_eq!(new.token.as_deref(), Some("t"));
        let round: FaultRule = serde_json::from_value(serde_json::to_value(&new).unwrap()).unwrap();
        assert_eq!(round, new);
        for (bad, why) in [
            (r#"{"mode":"error500"}"#, "a bound"),
            (r#"{"mode":"error500","seconds":0}"#, "positive"),
            (
                r#"{"mode":"error500","count":1,"verbs":["lsit"]}"#,
                "unknown verb",
            ),
            (r#"{"mode":"error500","count":1,"secs":3}"#, "unknown field"),
            (
                r#"{"mode":"silence","count":1,"verbs":["list"]}"#,
                "watches only",
            ),
            (r#"{"mode":"explode","count":1}"#, "unknown variant"),
            (
                r#"{"mode":"throttle","count":1,"applied":true}"#,
                "goes with",
            ),
        ] {
            let e = serde_json::from_str::<FaultRule>(bad)
                .unwrap_err()
                .to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }
}
