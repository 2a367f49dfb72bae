//! The reaper's configuration read from an environment holding only the
//! required variables: every field equals the documented default of the
//! variable it comes from, and no variable the reaper reads is left out.

use tcab_reaper::ReaperConfig;
use tcab_shared::config::{Binary, BinaryConfig, DefaultsCheck, vars};

#[test]
fn every_documented_default_is_the_parsed_default() {
    // The orphan sweep is on by default, and it needs the backend.
    let c = ReaperConfig::from_vars([
        (
            vars::BACKEND_URL.name.into(),
            "http://backend.tcab:8080".into(),
        ),
        (vars::BACKEND_SERVICE_TOKEN.name.into(), "token".into()),
    ])
    .expect("the backend is enough");
    let backend = c.backend.as_ref().expect("the sweep's backend");
    DefaultsCheck::new(Binary::Reaper)
        // required while the sweep is on: no default to compare
        .skip(&vars::BACKEND_URL)
        .skip(&vars::BACKEND_SERVICE_TOKEN)
        // read by the logging setup, not by the configuration
        .skip(&vars::RUST_LOG)
        .value(&vars::POLL_INTERVAL_SECONDS, &c.common.poll_interval)
        .value(&vars::MANAGED_BY, &c.common.managed_by)
        .optional(&vars::POD_NAMESPACE, &c.common.namespace)
        .value(&vars::LOG_FORMAT, &c.common.log_format)
        .optional(&vars::METRICS_ADDR, &c.common.metrics_addr)
        .value(&vars::BACKEND_TIMEOUT_SECONDS, &backend.timeout)
        .value(&vars::KUBE_TIMEOUT_SECONDS, &c.common.kube_timeout)
        .value(&vars::WATCH_TIMEOUT_SECONDS, &c.common.watch_timeout)
        .value(&vars::DRIVER_MANAGED_BY, &c.driver_managed_by)
        .value(&vars::TERMINATING_MARGIN_SECONDS, &c.terminating_margin)
        .optional(&vars::K8S_NAMESPACE, &c.sandbox_namespace)
        .value(&vars::ORPHAN_SWEEP, &c.orphan_sweep)
        .value(
            &vars::ORPHAN_SWEEP_INTERVAL_SECONDS,
            &c.orphan_sweep_interval,
        )
        .value(&vars::ORPHAN_GRACE_SECONDS, &c.orphan_grace)
        .finish();
}
