//! The admitter's configuration read from an environment holding only the
//! required variables: every field equals the documented default of the
//! variable it comes from, and no variable the admitter reads is left out.

use tcab_admitter::AdmitterConfig;
use tcab_shared::config::{Binary, BinaryConfig, DefaultsCheck, vars};

#[test]
fn every_documented_default_is_the_parsed_default() {
    let c = AdmitterConfig::from_vars([
        (
            vars::BACKEND_URL.name.into(),
            "http://backend.tcab:8080".into(),
        ),
        (vars::BACKEND_SERVICE_TOKEN.name.into(), "token".into()),
        (vars::DRIVER_IMAGE.name.into(), "driver:1".into()),
    ])
    .expect("the required variables are enough");
    let j = &c.jobs;
    DefaultsCheck::new(Binary::Admitter)
        // required: no default to compare
        .skip(&vars::BACKEND_URL)
        .skip(&vars::BACKEND_SERVICE_TOKEN)
        .skip(&vars::DRIVER_IMAGE)
        // derived from TCAB_BACKEND_URL when unset (shared/tests/config.rs)
        .skip(&vars::DRIVER_ARTIFACTS_URL)
        .skip(&vars::DRIVER_REPOS_URL)
        // read by the logging setup, not by the configuration
        .skip(&vars::RUST_LOG)
        .optional(&vars::PUBLISHER_IMAGE, &j.publisher_image)
        .value(&vars::MAX_INFLIGHT, &c.max_inflight)
        .value(&vars::MAX_PUBLISH_INFLIGHT, &c.max_publish_inflight)
        .value(&vars::POLL_INTERVAL_SECONDS, &c.common.poll_interval)
        .value(&vars::MANAGED_BY, &c.common.managed_by)
        .value(&vars::MANAGED_BY, &j.managed_by)
        .optional(&vars::POD_NAMESPACE, &c.common.namespace)
        .value(&vars::LOG_FORMAT, &c.common.log_format)
        .value(&vars::VAULT_ADDR, &c.common.vault_addr)
        .optional(&vars::METRICS_ADDR, &c.common.metrics_addr)
        .value(&vars::BACKEND_TIMEOUT_SECONDS, &c.backend.timeout)
        .value(&vars::KUBE_TIMEOUT_SECONDS, &c.common.kube_timeout)
        .value(&vars::WATCH_TIMEOUT_SECONDS, &c.common.watch_timeout)
        .value(&vars::GATE_MAX_AGE_SECONDS, &c.gate_max_age)
        .value(
            &vars::DRIVER_TERMINATION_GRACE_SECONDS,
            &j.termination_grace_seconds,
        )
        .value(&vars::DRIVER_CPU_REQUEST, &j.cpu_request)
        .value(&vars::DRIVER_MEMORY_REQUEST, &j.memory_request)
        .optional(&vars::DRIVER_CPU_LIMIT, &j.cpu_limit)
        .optional(&vars::DRIVER_MEMORY_LIMIT, &j.memory_limit)
        .value(&vars::JOB_TTL_SECONDS, &j.ttl_seconds_after_finished)
        .value(
            &vars::DRIVER_ACTIVE_DEADLINE_SECONDS,
            &j.driver_active_deadline_seconds,
        )
        .value(
            &vars::PUBLISHER_ACTIVE_DEADLINE_SECONDS,
            &j.publisher_active_deadline_seconds,
        )
        .value(
            &vars::DRIVER_FINISH_DEADLINE_SECONDS,
            &j.finish_deadline_seconds,
        )
        .value(
            &vars::DRIVER_REPORT_DEADLINE_SECONDS,
            &j.report_deadline_seconds,
        )
        .value(&vars::DRIVER_MANAGED_BY, &j.driver_managed_by)
        .optional(
            &vars::DRIVER_SECRETS,
            &Some(j.driver_secrets.clone()).filter(|s| !s.is_empty()),
        )
        .optional(&vars::DRIVER_SUBSCRIPTION_SECRET, &j.subscription_secret)
        .value(&vars::DRIVER_SUBSCRIPTION_DIR, &j.subscription_dir)
        .value(&vars::DRIVER_FS_GROUP, &j.fs_group)
        .optional(&vars::DRIVER_SERVICE_ACCOUNT, &j.driver_service_account)
        .value(&vars::LEASE_SECONDS, &c.lease_length)
        // validated, then passed to the drivers through the passthrough
        .optional(
            &vars::K8S_NAMESPACE,
            &j.passthrough_env
                .iter()
                .find(|(k, _)| k == vars::K8S_NAMESPACE.name)
                .map(|(_, v)| v.clone()),
        )
        .finish();
}
