//! Reading the Job view: a tick decides only from a snapshot taken while the
//! view was current, and checks before each step that it still is.

use tcab_shared::job_cache::{self, OwnedJobs, ViewState};
use tokio::sync::watch;

/// A snapshot of the owned Jobs taken while the view was current the whole
/// time, and a receiver that notices any later transition of the view.
pub(super) fn current_view(
    jobs: &OwnedJobs,
) -> Result<(job_cache::Snapshot, watch::Receiver<ViewState>), String> {
    let mut view = jobs.view_changes();
    match view.borrow_and_update().clone() {
        ViewState::Current => {}
        ViewState::Listing => return Err("the owned Jobs are not listed yet".into()),
        ViewState::Failed(error) => return Err(format!("the Job watch failed: {error}")),
    }
    let snapshot = jobs.snapshot();
    if !still_current(&view) {
        return Err("the Job view changed while it was read".into());
    }
    Ok((snapshot, view))
}

/// Whether the view is current and has not changed state since it was read.
pub(super) fn still_current(view: &watch::Receiver<ViewState>) -> bool {
    !view.has_changed().unwrap_or(true) && view.borrow().is_current()
}
