//! The lease-keeper's decisions, pure functions over plain data:
//!
//! - [`renew`]: which leases each lane's renewal call carries;
//! - [`failures`]: what to read, judge and report about failing Jobs;
//! - [`deaths`]: which claim's death is reported, once each;
//! - [`lost`]: which driven jobs are lost (lapsed lease, no live Job);
//! - [`tokens`]: which held per-job tokens to keep.

pub mod deaths;
pub mod failures;
pub mod lost;
pub mod renew;
pub mod tokens;
