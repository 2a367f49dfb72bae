//! A cached Job's name and its two claim labels (`tcab.dev/job-id` and
//! `tcab.dev/claim`), packed into the name.
//!
//! Every Job this dispatcher makes is named `<prefix><job id>-<claim tag>`
//! (`names::job_name`), so both labels are already spelled out inside its
//! name. Kept as three in-place strings they took 128 bytes of every cached
//! Job; kept as the name and where each label sits in it, 72. A label that
//! does not occur in the name (a Job made by hand, a job id the name rule
//! had to alter, a test's plain data) is kept whole instead, behind one
//! pointer: any value is kept exactly as it was, only the common one costs
//! less.

use crate::inline_str::NameStr;
use std::fmt;

/// A Job's name, its job id label and its claim label, each read as a
/// `&str`. Built once ([`JobNames::new`]) and never changed in place, so the
/// places of the labels cannot go stale.
#[derive(Clone, PartialEq, Eq)]
pub struct JobNames(Repr);

#[derive(Clone, PartialEq, Eq)]
enum Repr {
    /// The name, and where in it each label present is.
    Packed {
        name: NameStr,
        job_id: Option<Span>,
        claim: Option<Span>,
    },
    /// A label is not part of the name (or sits beyond what a one-byte
    /// place reaches): all three kept whole.
    Loose(Box<Loose>),
}

#[derive(Clone, PartialEq, Eq)]
struct Loose {
    name: Box<str>,
    job_id: Option<Box<str>>,
    claim: Option<Box<str>>,
}

/// Bytes `start..start + len` of the name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    start: u8,
    len: u8,
}

impl Span {
    /// Where `label` sits in `name` when found at byte `at`, if a one-byte
    /// place can say it.
    fn at(at: Option<usize>, label: &str) -> Option<Span> {
        Some(Span {
            start: u8::try_from(at?).ok()?,
            len: u8::try_from(label.len()).ok()?,
        })
    }

    fn of(self, name: &str) -> &str {
        let start = usize::from(self.start);
        // Found in this very name at a character boundary: always in range.
        name.get(start..start + usize::from(self.len))
            .unwrap_or_default()
    }
}

impl JobNames {
    /// The names of a Job called `name` labelled with `job_id` and `claim`
    /// (`None`: the label is absent; an empty or malformed value is kept as
    /// it is).
    pub fn new(name: &str, job_id: Option<&str>, claim: Option<&str>) -> Self {
        // `Some(None)`: absent; `None`: present but not placeable in the name.
        let place = |label: Option<&str>, found: fn(&str, &str) -> Option<usize>| match label {
            None => Some(None),
            Some(label) => Span::at(found(name, label), label).map(Some),
        };
        // The job id comes first in a name of ours and the claim tag last.
        let job_id_at = place(job_id, |name, id| name.find(id));
        let claim_at = place(claim, |name, tag| name.rfind(tag));
        match (job_id_at, claim_at) {
            (Some(job_id), Some(claim)) => JobNames(Repr::Packed {
                name: name.into(),
                job_id,
                claim,
            }),
            _ => JobNames(Repr::Loose(Box::new(Loose {
                name: name.into(),
                job_id: job_id.map(Into::into),
                claim: claim.map(Into::into),
            }))),
        }
    }

    /// The Job's name.
    pub fn name(&self) -> &str {
        match &self.0 {
            Repr::Packed { name, .. } => name,
            Repr::Loose(loose) => &loose.name,
        }
    }

    /// The `tcab.dev/job-id` label as it is, if present.
    pub fn job_id(&self) -> Option<&str> {
        match &self.0 {
            Repr::Packed { name, job_id, .. } => job_id.map(|s| s.of(name)),
            Repr::Loose(loose) => loose.job_id.as_deref(),
        }
    }

    /// The `tcab.dev/claim` label as it is, if present.
    pub fn claim(&self) -> Option<&str> {
        match &self.0 {
            Repr::Packed { name, claim, .. } => claim.map(|s| s.of(name)),
            Repr::Loose(loose) => loose.claim.as_deref(),
        }
    }

    /// Whether the labels are kept as places in the name (no heap block).
    #[cfg(test)]
    pub(crate) fn is_packed(&self) -> bool {
        matches!(&self.0, Repr::Packed { name, .. } if matches!(name, NameStr::Inline { .. }))
    }
}

impl Default for JobNames {
    fn default() -> Self {
        JobNames::new("", None, None)
    }
}

impl fmt::Debug for JobNames {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobNames")
            .field("name", &self.name())
            .field("job_id", &self.job_id())
            .field("claim", &self.claim())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lane::Lane;

    const ID: &str = "0b6f7c8e-2a51-4d1c-9a0e-3f1b2c4d5e6f";

    #[test]
    fn names_of_ours_pack_into_the_name() {
        for lane in [Lane::Run, Lane::Publish] {
            let name = crate::names::job_name(lane, ID, "abcdefgh");
            let names = JobNames::new(&name, Some(ID), Some("abcdefgh"));
            assert!(names.is_packed(), "{names:?}");
            assert_eq!(names.name(), name);
            assert_eq!(names.job_id(), Some(ID));
            assert_eq!(names.claim(), Some("abcdefgh"));
        }
        assert!(size_of::<JobNames>() <= 72, "{}", size_of::<JobNames>());
    }

    #[test]
    fn any_other_labels_are_kept_exactly() {
        let cases: [(&str, Option<&str>, Option<&str>); 7] = [
            ("", None, None),
            ("j1", None, None),
            ("j1", Some(""), Some("")),
            ("hand-made", Some("run-1"), Some("c1")),
            ("tcab-driver-run-1-c1", Some("RUN_1"), Some("c1")),
            ("tcab-driver-x-c1", Some("x"), None),
            ("aa", Some("a"), Some("a")),
        ];
        for (name, job_id, claim) in cases {
            let names = JobNames::new(name, job_id, claim);
            assert_eq!(
                (names.name(), names.job_id(), names.claim()),
                (name, job_id, claim)
            );
            assert_eq!(names, JobNames::new(name, job_id, claim));
        }
        assert!(!JobNames::new("hand-made", Some("run-1"), None).is_packed());
        assert!(JobNames::new("aa", Some("a"), Some("a")).is_packed());
    }

    #[test]
    fn labels_beyond_a_one_byte_place_are_kept_whole() {
        let name = format!("{}-{ID}", "x".repeat(300));
        let names = JobNames::new(&name, Some(ID), Some("x"));
        assert!(!names.is_packed());
        assert_eq!(names.job_id(), Some(ID));
        assert_eq!(names.claim(), Some("x"));
        assert_eq!(names.name(), name);
    }
}
