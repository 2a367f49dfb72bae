//! The lease-keeper's configuration read from an environment holding only
//! the required variables: every field equals the documented default of the
//! variable it comes from, and no variable the lease-keeper reads is left out.

use tcab_lease_keeper::LeaseKeeperConfig;
use tcab_shared::config::{Binary, BinaryConfig, DefaultsCheck, vars};

#[test]
fn every_documented_default_is_the_parsed_default() {
    let c = LeaseKeeperConfig::from_vars([
        (
            vars::BACKEND_URL.name.into(),
            "http://backend.tcab:8080".into(),
        ),
        (vars::BACKEND_SERVICE_TOKEN.name.into(), "token".into()),
    ])
    .expect("the required variables are enough");
    DefaultsCheck::new(Binary::LeaseKeeper)
        // required: no default to compare
        .skip(&vars::BACKEND_URL)
        .skip(&vars::BACKEND_SERVICE_TOKEN)
        // read by the logging setup, not by the configuration
        .skip(&vars::RUST_LOG)
        // only whether it is set matters here
        .optional(&vars::PUBLISHER_IMAGE, &c.publishing.then(String::new))
        .value(&vars::POLL_INTERVAL_SECONDS, &c.common.poll_interval)
        .value(&vars::MANAGED_BY, &c.common.managed_by)
        .optional(&vars::POD_NAMESPACE, &c.common.namespace)
        .value(&vars::LOG_FORMAT, &c.common.log_format)
        .value(&vars::VAULT_ADDR, &c.common.vault_addr)
        .optional(&vars::METRICS_ADDR, &c.common.metrics_addr)
        .value(&vars::BACKEND_TIMEOUT_SECONDS, &c.backend.timeout)
        .value(&vars::KUBE_TIMEOUT_SECONDS, &c.common.kube_timeout)
        .value(&vars::WATCH_TIMEOUT_SECONDS, &c.common.watch_timeout)
        .value(&vars::LEASE_SECONDS, &c.lease_length)
        .value(&vars::START_GRACE_SECONDS, &c.start_grace)
        .value(&vars::UNSCHEDULABLE_GRACE_SECONDS, &c.unschedulable_grace)
        .value(&vars::TERMINATING_MARGIN_SECONDS, &c.terminating_margin)
        .value(&vars::LOG_TAIL_LINES, &c.log_tail_lines)
        .value(&vars::VAULT_ALLOW_NON_LOOPBACK, &c.vault_allow_non_loopback)
        .finish();
}
