//! What a reap lists, and what the LIST showed: the selector of a reap's
//! LIST, whether it showed every sandbox of an id, and the ids whose
//! sandboxes carry another managed-by value.

use super::{KeepReason, ReapPlan};
use std::collections::{BTreeMap, BTreeSet};
use tcab_shared::names;

/// The most job ids one reap LIST names in its selector; more are listed
/// by the label's presence, which keeps the request line short.
pub(crate) const MAX_SELECTED_IDS: usize = 100;

/// The label selector of a reap's LIST: the job-id label alone, for the ids
/// whose sandboxes are due (`tcab.dev/job-id in (a,b)`), so the sandboxes of
/// another managed-by value show up too and can be told apart (see
/// [`KeepReason::ManagedByMismatch`]); the label's presence for more than
/// [`MAX_SELECTED_IDS`] ids.
pub(crate) fn reap_selector(ids: &BTreeSet<String>) -> String {
    if ids.is_empty() || ids.len() > MAX_SELECTED_IDS {
        return names::JOB_ID.to_owned();
    }
    let joined: Vec<&str> = ids.iter().map(String::as_str).collect();
    format!("{} in ({})", names::JOB_ID, joined.join(","))
}

/// Whether the pods listed for `due_reap` (and, with `sweep`, the sweep's
/// LIST) show every sandbox of `job_id`: the sweep lists every pod of the
/// driver's managed-by value and the label's presence every pod with a job
/// id, but a reap's `in` selector only the ids it names. A Job that failed
/// after the ids were chosen is judged by the plan but was not listed: its
/// reap is not complete until a LIST names it.
pub(crate) fn listed_all_of(due_reap: &BTreeSet<String>, sweep: bool, job_id: &str) -> bool {
    sweep || due_reap.len() > MAX_SELECTED_IDS || due_reap.contains(job_id)
}

/// The job ids whose due sandboxes include pods of another managed-by value
/// (kept by the plan), each with those pods' `namespace/name`, sorted.
pub(crate) fn mismatches(plan: &ReapPlan) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for kept in &plan.keep {
        if let (KeepReason::ManagedByMismatch { .. }, Some(id)) = (&kept.reason, &kept.pod.job_id) {
            out.entry(id.clone()).or_default().push(kept.pod.key());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_ids_a_list_named_are_known_to_have_no_sandbox_left() {
        let due: BTreeSet<String> = ["a".to_owned()].into();
        assert!(listed_all_of(&due, false, "a"));
        assert!(
            !listed_all_of(&due, false, "b"),
            "failed after the LIST was chosen"
        );
        assert!(
            listed_all_of(&due, true, "b"),
            "the sweep listed every sandbox"
        );
        let many: BTreeSet<String> = (0..=MAX_SELECTED_IDS).map(|i| format!("j{i}")).collect();
        assert!(
            listed_all_of(&many, false, "b"),
            "listed by the label's presence"
        );
    }

    #[test]
    fn a_reap_lists_by_the_job_ids_due_and_by_presence_past_the_bound() {
        let ids = |n: usize| (0..n).map(|i| format!("j{i}")).collect::<BTreeSet<_>>();
        assert_eq!(reap_selector(&ids(2)), "tcab.dev/job-id in (j0,j1)");
        assert_eq!(reap_selector(&ids(MAX_SELECTED_IDS + 1)), "tcab.dev/job-id");
    }
}
