//! One live Job per backend job: the stale Jobs of a fresh claim's job id
//! (see [`crate::plan::stale_jobs`]) are deleted before its Job counts.

use super::{AdmitDeps, StaleDeletion};
use crate::plan::StaleJob;
use kube::api::DeleteParams;
use tcab_shared::error_chain;
use tcab_shared::kube_api::{KubeCall, call};

/// Deletes each stale Job (background propagation, bounded; a 404 means it
/// is gone already, which is as good).
pub(super) async fn delete_stale(
    deps: AdmitDeps<'_>,
    job_id: &str,
    stale: Vec<StaleJob>,
) -> Vec<StaleDeletion> {
    let mut done = Vec::with_capacity(stale.len());
    for job in stale {
        let answer = match &job.pod {
            // The Job is gone already; the pod that outlived it runs on.
            Some(pod) => call(
                KubeCall::DeletePod,
                deps.kube_timeout,
                deps.pods.delete(pod, &DeleteParams::default()),
            )
            .await
            .map(drop),
            None => call(
                KubeCall::DeleteJob,
                deps.kube_timeout,
                deps.jobs.delete(&job.name, &DeleteParams::background()),
            )
            .await
            .map(drop),
        };
        let result = match answer {
            Ok(()) => Ok(()),
            Err(error) if error.is_not_found() => Ok(()),
            Err(error) => Err(error_chain(&error)),
        };
        done.push(StaleDeletion {
            job_id: job_id.to_owned(),
            stale: job,
            result,
        });
    }
    done
}
