//! The Job watch that feeds the view: how it is run ([`WatchSettings`]),
//! what a failed watch counts as in the metrics, and the loop that lists
//! afresh after every error.

use super::tracker::track_pods;
use super::{JobSummary, OwnedJobs, Summarize, WatchedJob};
use crate::kube_api::Verb;
use crate::metrics::labels::ErrorReason;
use crate::names;
use crate::retry::{Backoff, JITTER_PERCENT, random_sample};
use futures::StreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use std::time::Duration;
use tokio::sync::mpsc;

/// How the watch of owned Jobs is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchSettings {
    /// Server-side timeout of each watch call; a watch that delivers nothing
    /// (not even a bookmark) for this long plus a small margin is reconnected.
    pub timeout: Duration,
    /// First back-off after a watch error before the view is listed again.
    pub min_backoff: Duration,
    /// Longest back-off between relist attempts.
    pub max_backoff: Duration,
    /// How often a pod standing for its gone Job is read, to see it finish.
    pub pod_poll: Duration,
    /// Bound of each pod read.
    pub call_timeout: Duration,
}

impl WatchSettings {
    /// The settings every binary watches with: its watch and API timeouts,
    /// and its poll interval for the pods that outlive their Jobs.
    pub fn of(common: &crate::config::CommonConfig) -> Self {
        WatchSettings {
            timeout: common.watch_timeout,
            pod_poll: common.poll_interval,
            call_timeout: common.kube_timeout,
            ..WatchSettings::default()
        }
    }
}

impl Default for WatchSettings {
    fn default() -> Self {
        WatchSettings {
            timeout: Duration::from_secs(60),
            min_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
            pod_poll: Duration::from_secs(5),
            call_timeout: Duration::from_secs(15),
        }
    }
}

/// The verb of a failed watch, for the API-errors metric: the list that
/// (re)starts the view, or the watch itself.
pub fn watch_error_verb(error: &watcher::Error) -> Verb {
    match error {
        watcher::Error::InitialListFailed(_) => Verb::List,
        watcher::Error::WatchStartFailed(_)
        | watcher::Error::WatchError(_)
        | watcher::Error::WatchFailed(_)
        | watcher::Error::NoResourceVersion => Verb::Watch,
    }
}

/// Why a watch failed, for the API-errors metric: from the error's type
/// and status code.
pub fn watch_error_reason(error: &watcher::Error) -> ErrorReason {
    match error {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => crate::kube_api::kube_reason(e),
        watcher::Error::WatchError(status) => ErrorReason::of_status(status.code),
        watcher::Error::NoResourceVersion => ErrorReason::Decode,
    }
}

impl OwnedJobs {
    /// Starts watching the Jobs labelled `managed-by=<managed_by>` in
    /// `namespace`, and tracking the pods that outlive theirs (see
    /// [`super::pods`]). The returned task runs until it is aborted: a watch error
    /// marks the view not current and starts a fresh list after a back-off.
    /// The caller watches the task.
    pub fn watch(
        client: Client,
        namespace: &str,
        managed_by: &str,
        settings: WatchSettings,
    ) -> (Self, tokio::task::JoinHandle<()>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let cache = OwnedJobs::with_checks(Some(tx));
        let selector = names::selector(names::MANAGED_BY, managed_by);
        let jobs = watch_jobs(
            Api::namespaced(client.clone(), namespace),
            selector.clone(),
            settings,
            cache.clone(),
        );
        let pods = track_pods(
            Api::namespaced(client, namespace),
            selector,
            settings,
            cache.clone(),
            rx,
        );
        let task = tokio::spawn(async move {
            futures::join!(jobs, pods);
        });
        (cache, task)
    }
}

/// The event with each Job replaced by its summary.
pub(super) fn summarised<J: Summarize>(event: Event<J>) -> Event<JobSummary> {
    match event {
        Event::Init => Event::Init,
        Event::InitApply(job) => Event::InitApply(job.summary()),
        Event::InitDone => Event::InitDone,
        Event::Apply(job) => Event::Apply(job.summary()),
        Event::Delete(job) => Event::Delete(job.summary()),
    }
}

/// Watches the owned Jobs forever, feeding `cache`: after an error the view
/// is marked not current and, after a back-off, the Jobs are listed afresh.
async fn watch_jobs(
    api: Api<WatchedJob>,
    selector: String,
    settings: WatchSettings,
    cache: OwnedJobs,
) {
    // Lists are paged (250 Jobs a page) so a relist of 10,000 Jobs never
    // holds them all in memory at once.
    let timeout = u32::try_from(settings.timeout.as_secs().max(1)).unwrap_or(u32::MAX);
    let config = watcher::Config::default()
        .labels(&selector)
        .page_size(250)
        .timeout(timeout);
    let backoff =
        Backoff::doubling(settings.min_backoff, settings.max_backoff).with_jitter(JITTER_PERCENT);
    let mut failures: u32 = 0;
    loop {
        let mut stream = watcher::watcher(api.clone(), config.clone()).boxed();
        let (verb, reason, error) = loop {
            match stream.next().await {
                Some(Ok(event)) => {
                    if matches!(event, Event::InitDone) {
                        failures = 0;
                    }
                    cache.apply_summary(summarised(event));
                }
                Some(Err(error)) => {
                    break (
                        watch_error_verb(&error),
                        watch_error_reason(&error),
                        crate::error_chain(&error),
                    );
                }
                None => {
                    break (
                        Verb::Watch,
                        ErrorReason::Other,
                        "the watch stream ended".to_owned(),
                    );
                }
            }
        };
        crate::metrics::common().kube_api_error(verb, reason);
        let was_current = cache.is_current();
        cache.mark_failed(&error);
        failures = failures.saturating_add(1);
        let wait = backoff.wait(failures, random_sample());
        // The first failure of a current view is told by `mark_failed`; each
        // attempt after it (and each at start, before any list completed)
        // gets one line of its own, so an API server that cannot be reached
        // says so once per back-off step.
        if !was_current {
            let what = match verb {
                Verb::List => "cannot list the owned Jobs",
                _ => "cannot watch the owned Jobs",
            };
            tracing::warn!(
                selector = %selector,
                attempt = failures,
                reason = reason.as_str(),
                %error,
                retry_in_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                "{what} from the Kubernetes API; listing them again after a back-off (nothing that depends on the Job view is done meanwhile)"
            );
        }
        tokio::time::sleep(wait).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_list_and_a_failed_watch_are_told_apart() {
        let status = || kube::core::Status::failure("gone", "Expired").with_code(410);
        let api = || kube::Error::Api(status().boxed());
        assert_eq!(
            watch_error_verb(&watcher::Error::InitialListFailed(api())),
            Verb::List
        );
        for error in [
            watcher::Error::WatchStartFailed(api()),
            watcher::Error::WatchError(status().boxed()),
            watcher::Error::WatchFailed(api()),
            watcher::Error::NoResourceVersion,
        ] {
            assert_eq!(watch_error_verb(&error), Verb::Watch, "{error}");
        }
    }
}
