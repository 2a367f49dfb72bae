//! Listing the sandbox pods a tick needs: the pods of the due reaps' job
//! ids, and on a sweep tick the pods carrying the driver's managed-by value.

use super::Reaper;
use crate::memory::Due;
use crate::plan::{self, PodSummary};
use crate::report::ApiFailure;
use kube::api::ListParams;
use std::collections::BTreeMap;
use tcab_shared::error_chain;
use tcab_shared::kube_api::{KubeCall, call};
use tcab_shared::names;

impl Reaper {
    /// The sandbox pods a tick needs, each LIST bounded: for a due reap the
    /// pods carrying one of the due job ids whatever their managed-by value
    /// ([`plan::reap_selector`]: the plan tells sandboxes, the driver's own
    /// pod and sandboxes of another managed-by apart), for a due sweep the
    /// pods carrying the driver's managed-by value. `None` (logged,
    /// recorded) when a LIST fails.
    pub(super) async fn list_sandboxes(
        &self,
        due: &Due,
        errors: &mut Vec<ApiFailure>,
    ) -> Option<Vec<PodSummary>> {
        let mut selectors = vec![];
        if !due.reap.is_empty() {
            selectors.push(plan::reap_selector(&due.reap));
        }
        if due.sweep {
            selectors.push(names::selector(
                names::MANAGED_BY,
                &self.settings.driver_managed_by,
            ));
        }
        let mut pods: BTreeMap<String, PodSummary> = BTreeMap::new();
        for selector in selectors {
            match call(
                KubeCall::ListPods,
                self.kube_timeout,
                self.pods.list(&ListParams::default().labels(&selector)),
            )
            .await
            {
                Ok(list) => {
                    for pod in &list.items {
                        let pod = PodSummary::from_pod(pod, &self.sandbox_namespace);
                        pods.insert(pod.key(), pod);
                    }
                }
                Err(error) => {
                    let code = error.code();
                    tracing::warn!(
                        namespace = %self.sandbox_namespace,
                        %selector,
                        code,
                        error = %error_chain(&error),
                        "cannot list sandbox pods; retrying next tick{}",
                        rbac_hint(code)
                    );
                    errors.push(ApiFailure::new("list", "pods", &error));
                    return None;
                }
            }
        }
        Some(pods.into_values().collect())
    }
}

/// A hint for an operator reading a 403.
pub(super) fn rbac_hint(code: Option<u16>) -> &'static str {
    if code == Some(403) {
        " (RBAC: the dispatcher's Role must grant pods list and delete in this namespace)"
    } else {
        ""
    }
}
