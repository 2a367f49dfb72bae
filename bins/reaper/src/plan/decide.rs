//! The decision for one pod: delete it (and why) or keep it (and why).

use super::{DeleteReason, Driven, IdVerdict, KeepReason, PodSummary, Snapshot, SweepSettings};
use jiff::SignedDuration;
use std::collections::BTreeMap;
use tcab_shared::backend::client::is_job_id;

pub(super) fn decide(
    pod: &PodSummary,
    verdicts: &BTreeMap<String, IdVerdict>,
    snapshot: &Snapshot<'_>,
    grace: SignedDuration,
    settings: &SweepSettings,
) -> Result<(String, DeleteReason), KeepReason> {
    if pod.managed_by.as_deref() != Some(settings.driver_managed_by.as_str()) {
        let dispatchers =
            pod.managed_by.as_deref() == Some(settings.dispatcher_managed_by.as_str());
        let dead_drivers_id = pod
            .job_id
            .as_deref()
            .is_some_and(|id| matches!(verdicts.get(id), Some(IdVerdict::Reap { .. })));
        if dead_drivers_id && !pod.job_owned && !dispatchers {
            return Err(KeepReason::ManagedByMismatch {
                managed_by: pod.managed_by.clone(),
            });
        }
        return Err(KeepReason::NotDriverManaged);
    }
    if pod.job_owned || pod.managed_by.as_deref() == Some(settings.dispatcher_managed_by.as_str()) {
        return Err(KeepReason::JobPod);
    }
    let Some(job_id) = pod.job_id.as_deref().filter(|id| is_job_id(id)) else {
        return Err(KeepReason::NoJobId);
    };
    if pod.terminating {
        return Err(KeepReason::Terminating);
    }
    let succeeded = match verdicts.get(job_id) {
        Some(IdVerdict::Reap { reason, .. }) => return Ok((job_id.to_owned(), reason.clone())),
        Some(IdVerdict::Hold(KeepReason::DriverSucceeded { job })) => Some(job),
        Some(IdVerdict::Hold(reason)) => return Err(reason.clone()),
        None => None,
    };
    // The orphan sweep's gates, for an orphan and a leftover alike.
    let held = || match succeeded {
        Some(job) => KeepReason::DriverSucceeded { job: job.clone() },
        None => KeepReason::SweepDisabled,
    };
    if !settings.orphan_sweep {
        return Err(held());
    }
    match snapshot.driven {
        Driven::NotAsked if succeeded.is_some() => return Err(held()),
        Driven::NotAsked => return Err(KeepReason::SweepNotDue),
        Driven::Unknown => return Err(KeepReason::DrivenUnknown),
        Driven::Known(ids) if ids.contains(job_id) => {
            return Err(KeepReason::DrivenByBackend);
        }
        Driven::Known(_) => {}
    }
    let Some(created) = pod.created_at else {
        return Err(KeepReason::AgeUnknown);
    };
    let age = snapshot.now.duration_since(created);
    if age < grace {
        return Err(KeepReason::TooYoung { age });
    }
    let reason = match succeeded {
        Some(job) => DeleteReason::Leftover {
            job: job.clone(),
            age,
        },
        None => DeleteReason::Orphan { age },
    };
    Ok((job_id.to_owned(), reason))
}
