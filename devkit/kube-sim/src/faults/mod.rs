//! Fault switches (API errors and delays, Jobs that never get a pod) and the
//! request counters.

use crate::status::ApiError;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// What an injected API fault does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApiFaultMode {
    /// Answer 500 InternalError.
    Error500,
    /// Answer 429 TooManyRequests with Retry-After.
    Throttle,
    /// Answer normally after a delay.
    Delay,
}

/// Make the next `count` API calls misbehave.
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

/// What an API call must do because of an injected fault.
#[derive(Debug, Clone, PartialEq)]
pub enum FaultAction {
    /// Answer this error.
    Fail(ApiError),
    /// Wait, then answer normally.
    Delay(Duration),
}

/// Fault switches and counters.
#[derive(Debug, Default)]
pub struct Faults {
    api: Mutex<Vec<ApiFault>>,
    never_pod_names: Mutex<BTreeSet<String>>,
    never_pod_next: Mutex<u32>,
    requests: Mutex<BTreeMap<String, u64>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Faults {
    /// Queues an API fault.
    pub fn add_api_fault(&self, fault: ApiFault) {
        lock(&self.api).push(fault);
    }

    /// Clears every pending fault.
    pub fn clear(&self) {
        lock(&self.api).clear();
        lock(&self.never_pod_names).clear();
        *lock(&self.never_pod_next) = 0;
    }

    /// Consumes one matching API fault for a call, if any.
    pub fn take_api_fault(&self, verb: &str, resource: &str) -> Option<FaultAction> {
        let mut faults = lock(&self.api);
        let idx = faults.iter().position(|f| {
            f.count > 0
                && f.resource.as_deref().is_none_or(|r| r == resource)
                && f.verb.as_deref().is_none_or(|v| v == verb)
        })?;
        let f = &mut faults[idx];
        f.count -= 1;
        let action = match f.mode {
            ApiFaultMode::Error500 => {
                FaultAction::Fail(ApiError::internal("injected fault: internal error"))
            }
            ApiFaultMode::Throttle => FaultAction::Fail(ApiError::too_many_requests(
                f.retry_after_seconds.unwrap_or(1),
            )),
            ApiFaultMode::Delay => {
                FaultAction::Delay(Duration::from_millis(f.delay_ms.unwrap_or(200)))
            }
        };
        if f.count == 0 {
            faults.remove(idx);
        }
        Some(action)
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

    /// Counts one request (`"<verb> <resource>"`).
    pub fn count_request(&self, verb: &str, resource: &str) {
        *lock(&self.requests)
            .entry(format!("{verb} {resource}"))
            .or_default() += 1;
    }

    /// Requests so far by `"<verb> <resource>"`.
    pub fn requests(&self) -> BTreeMap<String, u64> {
        lock(&self.requests).clone()
    }

    /// Zeroes the request counters.
    pub fn reset_requests(&self) {
        lock(&self.requests).clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_faults_apply_count_times_and_filter() {
        let f = Faults::default();
        f.add_api_fault(ApiFault {
            mode: ApiFaultMode::Throttle,
            count: 2,
            retry_after_seconds: Some(3),
            delay_ms: None,
            resource: Some("jobs".into()),
            verb: None,
        });
        assert_eq!(f.take_api_fault("list", "pods"), None);
        match f.take_api_fault("list", "jobs") {
            Some(FaultAction::Fail(e)) => assert_eq!((e.code, e.retry_after), (429, Some(3))),
            other => panic!("{other:?}"),
        }
        assert!(f.take_api_fault("create", "jobs").is_some());
        assert_eq!(f.take_api_fault("create", "jobs"), None);
    }

    #[test]
    fn never_pod_next_is_consumed() {
        let f = Faults::default();
        f.never_pod_next(1);
        f.never_pod_named("x");
        assert!(f.take_never_pod("a"));
        assert!(!f.take_never_pod("b"));
        assert!(f.take_never_pod("x"));
    }
}
