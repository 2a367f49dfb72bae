//! # tcab-api-faults: Kubernetes API faults, shared by kube-sim and the fault proxy
//!
//! The dispatcher's chaos tests inject API faults by rule: a mode (500s,
//! 503s, 429s as API Priority and Fairness sends them, latency, hung
//! requests, silent watches), a scope (verbs, resources, the bearer token)
//! and a bound (a count of requests, seconds of real time). kube-sim
//! applies the rules inside its simulated API server; `tcab-api-proxy`
//! applies the same rules in front of a real kube-apiserver. Both take
//! everything here, so a rule means one thing on both clusters:
//!
//! - [`rules`]: the rule types (their JSON is the admin API's) and the pure
//!   [`rules::decide`];
//! - [`request`]: a request's verb and resource read from its method, path
//!   and query as the API server reads them;
//! - [`book`]: the live rule list with its bookkeeping, the open watches,
//!   request counters;
//! - [`answers`]: the 500, 503 and 429 answers, and a hung request;
//! - [`net`]: the listener whose connections can all be cut and whose port
//!   can be closed for a while (an API-server restart);
//! - [`admin`]: the restart call's bodies.

pub mod admin;
pub mod answers;
pub mod book;
pub mod net;
pub mod request;
pub mod rules;

pub use book::{FaultBook, FaultStatus, Hit, WatchScope};
pub use request::RequestInfo;
pub use rules::{ApiFault, ApiFaultMode, FaultAction, FaultRule, RequestAttrs, RuleState, Stage};
