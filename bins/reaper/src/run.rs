//! The reaper's I/O: the tick (one pod LIST, the plan, the deletes) and the
//! loop that runs it until shutdown.
//!
//! Nothing here is remembered between ticks. A failed LIST or delete is
//! logged with the namespace and simply planned again on the next tick; it
//! never stops the reaper.

use crate::plan::{self, PodDelete, PodSummary, ReapPlan, SweepSettings};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams, Preconditions};
use kube::{Api, Client};
use std::sync::Arc;
use tcab_shared::cluster::OwnedJobs;
use tcab_shared::config::ReaperConfig;
use tcab_shared::labels;
use tcab_shared::tick::{Shutdown, TickOutcome, run_loop_with_wake};

/// The time source; tests pass a fixed or stepped clock.
pub type Clock = Arc<dyn Fn() -> Timestamp + Send + Sync>;

/// What [`run`] needs from outside.
#[derive(Clone)]
pub struct Deps {
    /// The Kubernetes client.
    pub client: Client,
    /// The clock the orphan sweep measures ages with.
    pub clock: Clock,
}

impl Deps {
    /// A client with the system clock.
    pub fn new(client: Client) -> Self {
        Deps {
            client,
            clock: Arc::new(Timestamp::now),
        }
    }
}

/// Why the reaper stopped other than by shutdown.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The owned-Job watch task ended; without it the cache goes stale.
    #[error("the watch of owned Jobs in namespace {namespace} stopped")]
    WatchEnded {
        /// The namespace watched.
        namespace: String,
    },
}

/// How one pod delete went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeleteOutcome {
    /// The API accepted the delete.
    Deleted,
    /// 404: the pod was already gone, which is what we wanted.
    AlreadyGone,
    /// 409: the pod changed (another pod now has the name); next tick decides.
    Changed,
    /// Any other failure (403, 5xx, transport); retried next tick.
    Failed {
        /// The HTTP code, when the API answered.
        code: Option<u16>,
        /// What went wrong.
        message: String,
    },
}

/// What one tick did, for tests and logs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TickReport {
    /// The Job view may be stale (its watch erred): nothing was listed or planned.
    pub view_stale: bool,
    /// The pod LIST failed (logged); nothing was planned.
    pub list_failed: bool,
    /// Pods the LIST returned.
    pub listed: usize,
    /// The plan, when the LIST succeeded.
    pub plan: ReapPlan,
    /// Each planned delete (`namespace/name`) and how it went, in plan order.
    pub deletes: Vec<(String, DeleteOutcome)>,
}

/// One reaper: the pod API of the sandbox namespace, the owned-Job cache and
/// the settings. [`Reaper::tick`] is one reconcile.
pub struct Reaper {
    pods: Api<Pod>,
    namespace: String,
    jobs: OwnedJobs,
    settings: SweepSettings,
    clock: Clock,
}

impl Reaper {
    /// A reaper of the pods in `namespace`, deciding against `jobs` (which
    /// must have had its first full list before [`Reaper::tick`] is called).
    pub fn new(
        client: Client,
        namespace: &str,
        jobs: OwnedJobs,
        settings: SweepSettings,
        clock: Clock,
    ) -> Self {
        Reaper {
            pods: Api::namespaced(client, namespace),
            namespace: namespace.to_owned(),
            jobs,
            settings,
            clock,
        }
    }

    /// One tick: LIST the driver-managed pods of the sandbox namespace,
    /// plan against the cached Jobs, delete what the plan says.
    pub async fn tick(&self) -> TickReport {
        let mut report = TickReport::default();
        // A stale view could miss a newer live Job: its sandbox would look
        // orphaned or reapable. Reap only from a view the watch keeps current.
        if !self.jobs.is_current(std::time::Instant::now()) {
            tracing::warn!("Job watch degraded: reaping paused until it delivers again");
            report.view_stale = true;
            return report;
        }
        let selector = labels::selector(labels::MANAGED_BY, &self.settings.driver_managed_by);
        // The pods are listed before the Jobs are read, so a sandbox of a
        // newer claim is never judged against a Job snapshot older than it.
        let listed = match self
            .pods
            .list(&ListParams::default().labels(&selector))
            .await
        {
            Ok(list) => list,
            Err(error) => {
                let code = api_code(&error);
                tracing::warn!(
                    namespace = %self.namespace,
                    code,
                    %error,
                    "cannot list sandbox pods; retrying next tick{}",
                    rbac_hint(code)
                );
                report.list_failed = true;
                return report;
            }
        };
        let pods: Vec<PodSummary> = listed
            .items
            .iter()
            .map(|pod| PodSummary::from_pod(pod, &self.namespace))
            .collect();
        report.listed = pods.len();
        let jobs = self.jobs.snapshot();
        let plan = plan::plan(&jobs, &pods, (self.clock)(), &self.settings);

        for kept in &plan.keep {
            tracing::debug!(
                pod = %kept.pod.key(),
                job_id = kept.pod.job_id.as_deref().unwrap_or(""),
                reason = %kept.reason,
                "sandbox pod kept"
            );
        }
        if plan.delete.is_empty() {
            tracing::debug!(
                namespace = %self.namespace,
                listed = report.listed,
                jobs = jobs.len(),
                "no sandbox pod to reap"
            );
        }
        for delete in &plan.delete {
            let outcome = self.delete(delete).await;
            report.deletes.push((delete.pod.key(), outcome));
        }
        report.plan = plan;
        report
    }

    async fn delete(&self, delete: &PodDelete) -> DeleteOutcome {
        let pod = &delete.pod;
        let params = DeleteParams {
            preconditions: pod.uid.clone().map(|uid| Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        let pods: Api<Pod> = if pod.namespace == self.namespace {
            self.pods.clone()
        } else {
            Api::namespaced(self.pods.clone().into_client(), &pod.namespace)
        };
        match pods.delete(&pod.name, &params).await {
            Ok(_) => {
                tracing::info!(
                    job_id = %delete.job_id,
                    pod = %pod.key(),
                    reason = %delete.reason,
                    "reaped sandbox pod"
                );
                DeleteOutcome::Deleted
            }
            Err(error) => match api_code(&error) {
                Some(404) => {
                    tracing::debug!(job_id = %delete.job_id, pod = %pod.key(), "sandbox pod already gone");
                    DeleteOutcome::AlreadyGone
                }
                Some(409) => {
                    tracing::info!(job_id = %delete.job_id, pod = %pod.key(), "sandbox pod changed before its delete; next tick decides");
                    DeleteOutcome::Changed
                }
                code => {
                    tracing::warn!(
                        namespace = %pod.namespace,
                        job_id = %delete.job_id,
                        pod = %pod.name,
                        code,
                        %error,
                        "cannot delete sandbox pod; retrying next tick{}",
                        rbac_hint(code)
                    );
                    DeleteOutcome::Failed {
                        code,
                        message: error.to_string(),
                    }
                }
            },
        }
    }
}

/// The HTTP code of an API error, if the API answered.
fn api_code(error: &kube::Error) -> Option<u16> {
    match error {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

/// A hint for an operator reading a 403.
fn rbac_hint(code: Option<u16>) -> &'static str {
    if code == Some(403) {
        " (RBAC: the dispatcher's Role must grant pods list and delete in this namespace)"
    } else {
        ""
    }
}

/// The plan's settings from the configuration.
pub fn sweep_settings(config: &ReaperConfig) -> SweepSettings {
    SweepSettings {
        driver_managed_by: config.driver_managed_by.clone(),
        dispatcher_managed_by: config.common.managed_by.clone(),
        orphan_sweep: config.orphan_sweep,
        orphan_grace: config.orphan_grace,
    }
}

/// Runs the reaper until `shutdown`: watches the owned Jobs in the
/// dispatcher's namespace, waits for their first full list (never sweeping
/// against a cache that has not listed yet), then ticks every poll interval.
/// Returns an error only when the Job watch itself stops.
pub async fn run(config: ReaperConfig, deps: Deps, shutdown: Shutdown) -> anyhow::Result<()> {
    let own_namespace = config
        .common
        .namespace
        .clone()
        .unwrap_or_else(|| deps.client.default_namespace().to_owned());
    let sandbox_namespace = config
        .sandbox_namespace
        .clone()
        .unwrap_or_else(|| own_namespace.clone());
    let settings = sweep_settings(&config);
    if settings.driver_managed_by == settings.dispatcher_managed_by {
        tracing::warn!(
            managed_by = %settings.driver_managed_by,
            "the driver and the dispatcher share one managed-by value; only pods owned by no Job are reaped"
        );
    }
    tracing::info!(
        namespace = %own_namespace,
        sandbox_namespace = %sandbox_namespace,
        driver_managed_by = %settings.driver_managed_by,
        orphan_sweep = settings.orphan_sweep,
        orphan_grace_seconds = settings.orphan_grace.as_secs(),
        "reaper starting"
    );

    let (jobs, mut watch_task) = OwnedJobs::watch(
        deps.client.clone(),
        &own_namespace,
        &config.common.managed_by,
    );
    let watch_ended = || RunError::WatchEnded {
        namespace: own_namespace.clone(),
    };

    tokio::select! {
        _ = jobs.wait_ready() => {}
        _ = shutdown.wait() => {
            watch_task.abort();
            return Ok(());
        }
        _ = &mut watch_task => return Err(watch_ended().into()),
    }
    tracing::info!(jobs = jobs.len(), "owned Jobs listed; reaping");

    // A driver Job that fails leaves a sandbox to reap now, not at the next poll.
    let wake = jobs.finishes();
    let reaper = Reaper::new(deps.client, &sandbox_namespace, jobs, settings, deps.clock);
    // A tick cut short by shutdown is harmless: reaping is idempotent and
    // the next start plans again from the cluster.
    let tick_shutdown = shutdown.clone();
    let ticks = run_loop_with_wake(config.common.poll_interval, shutdown, wake, || async {
        tokio::select! {
            _ = reaper.tick() => {}
            _ = tick_shutdown.wait() => {}
        }
        TickOutcome::Idle
    });
    tokio::select! {
        ticks = ticks => {
            watch_task.abort();
            tracing::info!(ticks, "reaper stopped");
            Ok(())
        }
        _ = &mut watch_task => Err(watch_ended().into()),
    }
}
