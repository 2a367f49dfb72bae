//! The live list of fault rules with its bookkeeping, the registry of open
//! watches, and the request counters: the state behind the admin endpoints
//! kube-sim and the fault proxy both serve.
//!
//! The decision itself is the pure [`rules::decide`]; [`FaultBook::take`]
//! applies its answer (counts the rule down, books the request).

use crate::rules::{self, ApiFaultMode, FaultAction, FaultRule, RequestAttrs, RuleState, Stage};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;
use tokio::sync::Notify;

/// One rule as `GET /admin/faults` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FaultStatus {
    /// Its id.
    pub id: u64,
    /// The rule (its token left out).
    pub rule: FaultRule,
    /// Whether the rule is scoped to a bearer token.
    pub token_scoped: bool,
    /// Requests (or open watches) it affected so far.
    pub affected: u64,
    /// Requests it may still affect, when count-bound.
    pub remaining: Option<u32>,
    /// Real seconds left in its window, when time-bound.
    pub seconds_left: Option<f64>,
    /// Whether it can still affect a request.
    pub live: bool,
}

/// The fault a request met.
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    /// The rule's id.
    pub id: u64,
    /// What the request must do.
    pub action: FaultAction,
    /// Carry the request out first (see [`FaultRule::applied`]).
    pub applied: bool,
}

/// Which open watches `POST /admin/watches/close` ends.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WatchScope {
    /// Only watches of these resources; empty = all.
    #[serde(default)]
    pub resources: Vec<String>,
    /// Only watches opened with this bearer token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

impl WatchScope {
    fn covers(&self, w: &OpenWatch) -> bool {
        (self.resources.is_empty() || self.resources.contains(&w.resource))
            && self
                .token
                .as_deref()
                .is_none_or(|t| w.token.as_deref() == Some(t))
    }
}

#[derive(Debug)]
struct OpenWatch {
    resource: String,
    token: Option<String>,
    close: Arc<Notify>,
    silenced: bool,
}

/// Fault rules, open watches and counters.
#[derive(Debug, Default)]
pub struct FaultBook {
    rules: Mutex<Vec<RuleState>>,
    last_rule_id: AtomicU64,
    /// Enabled `silence` rules (a fast path for open watches, which ask at
    /// every event).
    silence_rules: AtomicUsize,
    requests: Mutex<BTreeMap<String, u64>>,
    /// The same, per `User-Agent` ("" without one).
    requests_by_agent: Mutex<BTreeMap<String, BTreeMap<String, u64>>>,
    watches: Mutex<HashMap<u64, OpenWatch>>,
    last_watch_id: AtomicU64,
    hung: AtomicU64,
    restarts: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Counts a hung request while it hangs.
pub struct HungGuard<'a>(&'a FaultBook);

impl Drop for HungGuard<'_> {
    fn drop(&mut self) {
        self.0.hung.fetch_sub(1, Ordering::SeqCst);
    }
}

impl FaultBook {
    /// Adds a rule (already checked); returns its id. A rule with
    /// `close_open_watches` ends the open watches in its scope.
    pub fn add_rule(&self, rule: FaultRule) -> u64 {
        let id = self.last_rule_id.fetch_add(1, Ordering::SeqCst) + 1;
        let close = rule.close_open_watches.then(|| WatchScope {
            resources: rule.resources.clone(),
            token: rule.token.clone(),
        });
        let applies_to_watches = rule.verbs.is_empty() || rule.verbs.iter().any(|v| v == "watch");
        {
            let mut rules = lock(&self.rules);
            if rule.mode == ApiFaultMode::Silence {
                self.silence_rules.fetch_add(1, Ordering::SeqCst);
            }
            rules.push(RuleState::new(id, rule, Instant::now()));
        }
        if let Some(scope) = close
            && applies_to_watches
        {
            self.close_watches(&scope);
        }
        id
    }

    fn disable(&self, r: &mut RuleState) {
        if r.enabled && r.rule.mode == ApiFaultMode::Silence {
            self.silence_rules.fetch_sub(1, Ordering::SeqCst);
        }
        r.enabled = false;
    }

    /// Ends one rule now; false when there is no such rule.
    pub fn remove_rule(&self, id: u64) -> bool {
        let mut rules = lock(&self.rules);
        match rules.iter_mut().find(|r| r.id == id) {
            Some(r) => {
                self.disable(r);
                true
            }
            None => false,
        }
    }

    /// Ends every rule. The rules stay listed (with their counts) until the
    /// counters are reset. Requests already hanging and watches already
    /// silenced stay so.
    pub fn clear(&self) {
        for r in lock(&self.rules).iter_mut() {
            self.disable(r);
        }
    }

    /// Decides (and books) the fault a request meets, if any.
    pub fn take(&self, req: &RequestAttrs<'_>, stage: Stage) -> Option<Hit> {
        if stage == Stage::OpenWatch && self.silence_rules.load(Ordering::SeqCst) == 0 {
            return None;
        }
        let mut rules = lock(&self.rules);
        let (i, action) = rules::decide(&rules, req, Instant::now(), stage)?;
        rules::consume(&mut rules[i]);
        Some(Hit {
            id: rules[i].id,
            action,
            applied: rules[i].rule.applied,
        })
    }

    /// Every rule, oldest first.
    pub fn rules(&self) -> Vec<FaultStatus> {
        let now = Instant::now();
        lock(&self.rules)
            .iter()
            .map(|r| FaultStatus {
                id: r.id,
                rule: FaultRule {
                    token: None,
                    ..r.rule.clone()
                },
                token_scoped: r.rule.token.is_some(),
                affected: r.affected,
                remaining: r.remaining,
                seconds_left: r
                    .ends_at()
                    .map(|end| end.saturating_duration_since(now).as_secs_f64()),
                live: r.live(now),
            })
            .collect()
    }

    /// Requests affected, by rule id.
    pub fn affected(&self) -> BTreeMap<String, u64> {
        lock(&self.rules)
            .iter()
            .map(|r| (r.id.to_string(), r.affected))
            .collect()
    }

    /// Registers an open watch; returns its id and what ends it.
    pub fn register_watch(&self, resource: &str, token: Option<&str>) -> (u64, Arc<Notify>) {
        let id = self.last_watch_id.fetch_add(1, Ordering::SeqCst) + 1;
        let close = Arc::new(Notify::new());
        lock(&self.watches).insert(
            id,
            OpenWatch {
                resource: resource.to_string(),
                token: token.map(str::to_string),
                close: close.clone(),
                silenced: false,
            },
        );
        (id, close)
    }

    /// Forgets an open watch (it ended).
    pub fn unregister_watch(&self, id: u64) {
        lock(&self.watches).remove(&id);
    }

    /// Notes that an open watch went silent.
    pub fn mark_silenced(&self, id: u64) {
        if let Some(w) = lock(&self.watches).get_mut(&id) {
            w.silenced = true;
        }
    }

    /// Ends the open watches in scope; returns how many.
    pub fn close_watches(&self, scope: &WatchScope) -> usize {
        let watches = lock(&self.watches);
        let mut n = 0;
        for w in watches.values().filter(|w| scope.covers(w)) {
            w.close.notify_one();
            n += 1;
        }
        n
    }

    /// Open watches now, and how many of them are silent.
    pub fn open_watches(&self) -> (u64, u64) {
        let watches = lock(&self.watches);
        let silent = watches.values().filter(|w| w.silenced).count();
        (watches.len() as u64, silent as u64)
    }

    /// Counts a request that hangs, until the guard drops.
    pub fn hang_started(&self) -> HungGuard<'_> {
        self.hung.fetch_add(1, Ordering::SeqCst);
        HungGuard(self)
    }

    /// Requests hanging now.
    pub fn hung_requests(&self) -> u64 {
        self.hung.load(Ordering::SeqCst)
    }

    /// Counts an API-server restart.
    pub fn count_restart(&self) -> u64 {
        self.restarts.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// API-server restarts so far.
    pub fn restarts(&self) -> u64 {
        self.restarts.load(Ordering::SeqCst)
    }

    /// Counts one request (`"<verb> <resource>"`).
    /// The client's `User-Agent` is `agent`.
    pub fn count_request(&self, verb: &str, resource: &str, agent: Option<&str>) {
        let key = format!("{verb} {resource}");
        *lock(&self.requests).entry(key.clone()).or_default() += 1;
        *lock(&self.requests_by_agent)
            .entry(agent.unwrap_or_default().to_owned())
            .or_default()
            .entry(key)
            .or_default() += 1;
    }

    /// Requests so far per `User-Agent`, by `"<verb> <resource>"`.
    pub fn requests_by_agent(&self) -> BTreeMap<String, BTreeMap<String, u64>> {
        lock(&self.requests_by_agent).clone()
    }

    /// Requests so far by `"<verb> <resource>"`.
    pub fn requests(&self) -> BTreeMap<String, u64> {
        lock(&self.requests).clone()
    }

    /// Zeroes the request counters and forgets the rules that can no
    /// longer apply (with their counts).
    pub fn reset_requests(&self) {
        lock(&self.requests).clear();
        lock(&self.requests_by_agent).clear();
        let now = Instant::now();
        lock(&self.rules).retain(|r| r.live(now));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::ApiFault;

    fn req<'a>(verb: &'a str, resource: &'a str) -> RequestAttrs<'a> {
        RequestAttrs {
            verb,
            resource,
            token: None,
        }
    }

    #[test]
    fn api_faults_apply_count_times_and_filter() {
        let f = FaultBook::default();
        let id = f.add_rule(
            ApiFault {
                mode: ApiFaultMode::Throttle,
                count: 2,
                retry_after_seconds: Some(3),
                delay_ms: None,
                resource: Some("jobs".into()),
                verb: None,
            }
            .into(),
        );
        assert_eq!(f.take(&req("list", "pods"), Stage::Arrival), None);
        let hit = f.take(&req("list", "jobs"), Stage::Arrival).unwrap();
        assert_eq!(
            (hit.id, hit.action, hit.applied),
            (id, FaultAction::Throttle(3), false)
        );
        assert!(f.take(&req("create", "jobs"), Stage::Arrival).is_some());
        assert_eq!(f.take(&req("create", "jobs"), Stage::Arrival), None);
        assert_eq!(f.affected()[&id.to_string()], 2);
        let listed = f.rules();
        assert_eq!((listed[0].remaining, listed[0].live), (Some(0), false));
        // spent rules go with a counter reset
        f.reset_requests();
        assert!(f.rules().is_empty());
    }

    #[test]
    fn clear_and_remove_end_rules_but_keep_their_counts() {
        let f = FaultBook::default();
        let a = f.add_rule(FaultRule::new(ApiFaultMode::Silence).for_seconds(60.0));
        let b = f.add_rule(
            FaultRule::new(ApiFaultMode::Error500)
                .token("secret")
                .for_seconds(60.0),
        );
        let w = req("watch", "jobs");
        let hit = f.take(&w, Stage::OpenWatch).unwrap();
        assert_eq!((hit.id, hit.action), (a, FaultAction::Silence));
        assert!(f.remove_rule(a));
        assert!(!f.remove_rule(99));
        assert_eq!(f.take(&w, Stage::OpenWatch), None);
        let listed = f.rules();
        assert_eq!(listed.len(), 2);
        assert!(listed[1].token_scoped && listed[1].rule.token.is_none());
        f.clear();
        let dispatcher = RequestAttrs {
            token: Some("secret"),
            ..w
        };
        assert_eq!(f.take(&dispatcher, Stage::Arrival), None);
        assert_eq!(f.affected()[&a.to_string()], 1);
        assert_eq!(f.affected()[&b.to_string()], 0);
    }

    #[test]
    fn open_watches_are_closed_by_scope() {
        let f = FaultBook::default();
        let (j, close_j) = f.register_watch("jobs", Some("dispatcher"));
        let (_, close_p) = f.register_watch("pods", None);
        assert_eq!(f.open_watches(), (2, 0));
        f.mark_silenced(j);
        assert_eq!(f.open_watches(), (2, 1));
        let scope = WatchScope {
            resources: vec!["jobs".into()],
            token: Some("other".into()),
        };
        assert_eq!(f.close_watches(&scope), 0);
        // a rule closing open watches in its scope
        f.add_rule(
            FaultRule::new(ApiFaultMode::Error500)
                .verbs(["list", "watch"])
                .resources(["jobs"])
                .times(1)
                .closing_open_watches(),
        );
        let closed = close_j.notified();
        tokio::pin!(closed);
        assert!(ready(closed.as_mut()));
        let untouched = close_p.notified();
        tokio::pin!(untouched);
        assert!(!ready(untouched.as_mut()));
        f.unregister_watch(j);
        assert_eq!(f.open_watches(), (1, 0));
    }

    #[test]
    fn hung_requests_and_restarts_are_counted() {
        let f = FaultBook::default();
        let g = f.hang_started();
        let h = f.hang_started();
        assert_eq!(f.hung_requests(), 2);
        drop(g);
        assert_eq!(f.hung_requests(), 1);
        drop(h);
        assert_eq!(f.hung_requests(), 0);
        assert_eq!(
            (f.count_restart(), f.count_restart(), f.restarts()),
            (1, 2, 2)
        );
        f.count_request("list", "jobs", None);
        f.count_request("list", "jobs", None);
        f.count_request("get", "pods/log", None);
        assert_eq!(
            f.requests(),
            BTreeMap::from([("get pods/log".into(), 1), ("list jobs".into(), 2)])
        );
    }

    /// Polls a future once.
    fn ready<F: std::future::Future>(f: std::pin::Pin<&mut F>) -> bool {
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        f.poll(&mut cx).is_ready()
    }
}
