//! The workspace's test kit, used only as a dev-dependency: the one mock
//! backend every binary's tests talk to ([`backend`]), the one fake
//! Kubernetes API ([`fake_kube`]), waiting on an
//! observable condition with a deadline ([`wait`]), running a built binary
//! and reading what it did ([`cli`]), building an environment ([`mod@env`]),
//! serving a mock HTTP API on a free loopback port ([`http`]), the
//! Kubernetes API's bodies ([`kube`]), the JSON fixtures ([`fixtures`]) and
//! a log sink ([`logs`]).
//!
//! It depends on no tcab crate, so tcab-shared can use it too.

pub mod backend;
pub mod cli;
pub mod env;
pub mod fake_kube;
pub mod fixtures;
pub mod http;
pub mod kube;
pub mod logs;
pub mod wait;
