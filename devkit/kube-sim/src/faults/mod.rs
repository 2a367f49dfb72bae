//! Fault switches: API faults by rule, connection cuts and downtime (the
//! shared `tcab-api-faults` crate, which the fault proxy in front of a real
//! API server uses too), and the sim's own: Jobs that never get a pod.
//!
//! The rule decision itself is the pure [`rules::decide`]; the
//! [`FaultBook`] keeps the list, applies the decision's bookkeeping, counts
//! requests and registers open watches.

pub use tcab_api_faults::{answers, net, rules};

pub use net::{ConnTag, FaultListener, NetControl};
pub use rules::{ApiFault, ApiFaultMode, FaultAction, FaultRule, RequestAttrs, RuleState, Stage};
pub use tcab_api_faults::{FaultBook, FaultStatus, Hit, WatchScope};

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard};

/// Fault switches and counters.
#[derive(Debug, Default)]
pub struct Faults {
    /// API fault rules, open watches, request counters.
    pub book: FaultBook,
    never_pod_names: Mutex<BTreeSet<String>>,
    never_pod_next: Mutex<u32>,
    /// Connection cuts and downtime.
    pub net: Arc<NetControl>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Faults {
    /// Ends every rule and never-pod switch (see [`FaultBook::clear`]).
    pub fn clear(&self) {
        self.book.clear();
        lock(&self.never_pod_names).clear();
        *lock(&self.never_pod_next) = 0;
    }

    /// Makes the Job with this name never get a pod.
    pub fn never_pod_named(&self, name: &str) {
        lock(&self.never_pod_names).insert(name.to_string());
    }

    /// Makes the next `n` new Jobs never get a pod.
    pub fn never_pod_next(&self, n: u32) {
        *lock(&self.never_pod_next) += n;
    }

    /// Whether a Job newly seen by the controller gets no pod (consumes a
    /// "next" slot when it applies).
    pub fn take_never_pod(&self, job: &str) -> bool {
        if lock(&self.never_pod_names).contains(job) {
            return true;
        }
        let mut next = lock(&self.never_pod_next);
        if *next > 0 {
            *next -= 1;
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_pod_next_is_consumed() {
        let f = Faults::default();
        f.never_pod_next(1);
        f.never_pod_named("x");
        assert!(f.take_never_pod("a"));
        assert!(!f.take_never_pod("b"));
        assert!(f.take_never_pod("x"));
    }

    #[test]
    fn clear_ends_rules_and_never_pod_switches() {
        let f = Faults::default();
        f.book
            .add_rule(FaultRule::new(ApiFaultMode::Error500).times(1));
        f.never_pod_next(2);
        f.never_pod_named("x");
        f.clear();
        assert!(!f.take_never_pod("x") && !f.take_never_pod("a"));
        let attrs = RequestAttrs {
            verb: "get",
            resource: "pods",
            token: None,
        };
        assert_eq!(f.book.take(&attrs, Stage::Arrival), None);
    }
}
