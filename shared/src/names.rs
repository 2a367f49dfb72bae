//! Names on the cluster: label keys, the claim tag and Job names. See
//! docs/operations.md for what each label means to an operator; the lanes
//! themselves are in [`crate::lane`].

use crate::lane::Lane;
use sha2::{Digest, Sha256};

/// Selects every object this dispatcher owns: `app.kubernetes.io/managed-by`.
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// Maps a Job (and the driver's sandboxes) back to its backend job.
pub const JOB_ID: &str = "tcab.dev/job-id";
/// Names the admission lane of a Job: `run` or `publish`.
pub const JOB_KIND: &str = "tcab.dev/job-kind";
/// The claim tag of the claim a Job was created for.
pub const CLAIM: &str = "tcab.dev/claim";
/// What a Job runs, as annotations on every Job and its pod template (free
/// text), and also as labels when the value is a valid label value, so
/// `kubectl get jobs -L tcab.dev/harness,tcab.dev/model` can show them.
/// A driver Job's claim: its harness, model, and case or game jam.
pub const HARNESS: &str = "tcab.dev/harness";
/// See [`HARNESS`].
pub const MODEL: &str = "tcab.dev/model";
/// See [`HARNESS`].
pub const CASE: &str = "tcab.dev/case";
/// See [`HARNESS`].
pub const JAM: &str = "tcab.dev/jam";
/// A publisher Job's publish request: the `release` and `suite` it names.
pub const RELEASE: &str = "tcab.dev/release";
/// See [`RELEASE`].
pub const SUITE: &str = "tcab.dev/suite";
/// Set by the Job controller on a Job's pods.
pub const JOB_NAME: &str = "job-name";
/// Tells the cluster autoscaler not to scale a node down under the pod.
pub const SAFE_TO_EVICT: &str = "cluster-autoscaler.kubernetes.io/safe-to-evict";

/// Name of the driver Job's one container (death causes look it up by name).
pub const DRIVER_CONTAINER: &str = "driver";
/// Name of the publisher Job's one container.
pub const PUBLISHER_CONTAINER: &str = "publisher";

/// Prefix of every driver Job's name.
pub const DRIVER_PREFIX: &str = "tcab-driver-";
/// Prefix of every publisher Job's name; also the fallback lane rule.
pub const PUBLISHER_PREFIX: &str = "tcab-publisher-";

/// Length, in hex characters, of a claim tag.
pub const CLAIM_TAG_LEN: usize = 8;
/// Longest object name or label value Kubernetes accepts here.
pub const MAX_NAME_LEN: usize = 63;

/// The claim tag of a per-job token: the first eight hex digits of its
/// SHA-256. Stable for a token, different for each claim (each claim gets a
/// fresh token), and safe to show: it does not reveal the token.
pub fn claim_tag(token: &str) -> String {
    let digest = Sha256::digest(token.as_bytes());
    let mut tag = hex::encode(digest);
    tag.truncate(CLAIM_TAG_LEN);
    tag
}

/// The Job name for one claim of one backend job: `<prefix><id>-<claim tag>`,
/// a DNS-1123 label of at most 63 characters. The id is lowercased and any
/// character outside `[a-z0-9-]` becomes `-`; an id too long to fit is cut
/// and followed by a hash of the whole id, so two long ids never share a name.
pub fn job_name(lane: Lane, job_id: &str, claim: &str) -> String {
    let prefix = lane.name_prefix();
    let mut id: String = job_id
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9') => c,
            _ => '-',
        })
        .collect();
    let room = MAX_NAME_LEN - prefix.len() - 1 - claim.len();
    let changed = id != job_id;
    if id.len() > room || (changed && id.len() + 9 <= room) {
        // Keep the name unique to the original id even when it was altered.
        let hash = hex::encode(Sha256::digest(job_id.as_bytes()));
        let keep = room.saturating_sub(9).min(id.len());
        id.truncate(keep);
        id = format!("{}-{}", id.trim_end_matches('-'), &hash[..8]);
    }
    let id = id.trim_matches('-');
    let name = format!("{prefix}{id}-{claim}");
    debug_assert!(name.len() <= MAX_NAME_LEN);
    name
}

/// What one claim is called on the cluster: its claim tag (the
/// `tcab.dev/claim` label, and the vault key beside the job id) and its
/// Job's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimNames {
    /// The claim tag of the claim's per-job token ([`claim_tag`]).
    pub claim: String,
    /// The name of the claim's Job ([`job_name`]).
    pub job_name: String,
}

/// The claim tag and Job name of the claim of `job_id` in `lane` whose
/// per-job token is `token`: every place that names a fresh claim (the
/// admission, the driver and publisher Jobs) derives both here.
pub fn claim_names(lane: Lane, job_id: &str, token: &str) -> ClaimNames {
    let claim = claim_tag(token);
    let job_name = job_name(lane, job_id, &claim);
    ClaimNames { claim, job_name }
}

/// Whether `value` is a valid label value (at most 63 characters of
/// `[A-Za-z0-9-_.]`, starting and ending alphanumeric, or empty).
pub fn is_label_value(value: &str) -> bool {
    if value.is_empty() {
        return true;
    }
    let bytes = value.as_bytes();
    value.len() <= MAX_NAME_LEN
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// A label selector string `key=value`.
pub fn selector(key: &str, value: &str) -> String {
    format!("{key}={value}")
}

/// Environment variable names of a Job's pod (docs/job-contract.md): what
/// the driver and the publisher read.
pub mod job_env {
    /// The backend URL (driver and publisher).
    pub const BACKEND_URL: &str = "TCAB_BACKEND_URL";
    /// Where the driver uploads the run tree.
    pub const ARTIFACTS_URL: &str = "TCAB_DRIVER_ARTIFACTS_URL";
    /// Where the driver uploads the bundle.
    pub const REPOS_URL: &str = "TCAB_DRIVER_REPOS_URL";
    /// The backend run id.
    pub const JOB_ID: &str = "TCAB_JOB_ID";
    /// The per-job token of this claim (driver and publisher).
    pub const JOB_TOKEN: &str = "TCAB_JOB_TOKEN";
    /// The claim's launch request as JSON.
    pub const LAUNCH_REQUEST: &str = "TCAB_LAUNCH_REQUEST";
    /// How long the run may take before the driver stops it.
    pub const FINISH_DEADLINE: &str = "TCAB_DRIVER_FINISH_DEADLINE_SECONDS";
    /// How long the driver keeps trying to land its terminal report.
    pub const REPORT_DEADLINE: &str = "TCAB_DRIVER_REPORT_DEADLINE_SECONDS";
    /// Always `kubernetes` here.
    pub const RUNTIME: &str = "TCAB_DRIVER_RUNTIME";
    /// The managed-by value the driver puts on its sandbox pods.
    pub const DRIVER_MANAGED_BY: &str = "TCAB_DRIVER_MANAGED_BY";
    /// The driver pod's own IP, from the downward API.
    pub const POD_IP: &str = "TCAB_DRIVER_POD_IP";
    /// The backend publish job id.
    pub const PUBLISH_JOB_ID: &str = "TCAB_PUBLISH_JOB_ID";
    /// The claim's publish request as JSON.
    pub const PUBLISH_REQUEST: &str = "TCAB_PUBLISH_REQUEST";
    /// Prefixes of the admitter's own variables passed through to the driver.
    pub const PASSTHROUGH_PREFIXES: [&str; 2] = ["TCAB_K8S_", "TCAB_CONTAINER_"];

    /// Every name above.
    pub const ALL: [&str; 13] = [
        BACKEND_URL,
        ARTIFACTS_URL,
        REPOS_URL,
        JOB_ID,
        JOB_TOKEN,
        LAUNCH_REQUEST,
        FINISH_DEADLINE,
        REPORT_DEADLINE,
        RUNTIME,
        DRIVER_MANAGED_BY,
        POD_IP,
        PUBLISH_JOB_ID,
        PUBLISH_REQUEST,
    ];
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_claims_names_are_its_tokens_tag_and_the_job_name_built_on_it() {
        for lane in Lane::ALL {
            let names = claim_names(lane, "run-42", "tok-1");
            assert_eq!(names.claim, claim_tag("tok-1"));
            assert_eq!(names.job_name, job_name(lane, "run-42", &names.claim));
            assert!(names.job_name.starts_with(lane.name_prefix()));
        }
        assert_ne!(
            claim_names(Lane::Run, "run-42", "tok-1"),
            claim_names(Lane::Run, "run-42", "tok-2"),
            "each claim (fresh token) gets its own tag and Job"
        );
    }

    fn is_dns1123_label(s: &str) -> bool {
        !s.is_empty()
            && s.len() <= 63
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !s.starts_with('-')
            && !s.ends_with('-')
    }

    #[test]
    fn claim_tag_is_stable_short_and_distinct() {
        assert_eq!(claim_tag("abc"), claim_tag("abc"));
        assert_eq!(claim_tag("abc").len(), CLAIM_TAG_LEN);
        assert_ne!(claim_tag("abc"), claim_tag("abd"));
        assert_eq!(claim_tag("abc"), "ba7816bf");
    }

    #[test]
    fn simple_ids_read_plainly() {
        let name = job_name(
            Lane::Run,
            "0d6f2c1e-5b7a-4a57-9d0e-2b3f4c5d6e7f",
            "ba7816bf",
        );
        assert_eq!(
            name,
            "tcab-driver-0d6f2c1e-5b7a-4a57-9d0e-2b3f4c5d6e7f-ba7816bf"
        );
        let name = job_name(Lane::Publish, "pub-42", "00ff00ff");
        assert_eq!(name, "tcab-publisher-pub-42-00ff00ff");
    }

    #[test]
    fn altered_and_long_ids_stay_unique() {
        let a = job_name(Lane::Run, "Job_1", "aaaaaaaa");
        let b = job_name(Lane::Run, "job-1", "aaaaaaaa");
        assert_ne!(a, b);
        let long_a = "x".repeat(80) + "a";
        let long_b = "x".repeat(80) + "b";
        let (na, nb) = (
            job_name(Lane::Publish, &long_a, "aaaaaaaa"),
            job_name(Lane::Publish, &long_b, "aaaaaaaa"),
        );
        assert_ne!(na, nb);
        assert!(is_dns1123_label(&na), "{na}");
    }

    #[test]
    fn label_values() {
        assert!(is_label_value("abc-1.2_3"));
        assert!(!is_label_value("-abc"));
        assert!(!is_label_value(&"a".repeat(64)));
        assert!(!is_label_value("a b"));
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, rng_seed: proptest::test_runner::RngSeed::Fixed(7), ..ProptestConfig::default() })]
        #[test]
        fn names_are_always_valid_and_stable(id in "[ -~]{1,120}", token in "[a-z0-9]{1,40}") {
            let claim = claim_tag(&token);
            for lane in Lane::ALL {
                let n = job_name(lane, &id, &claim);
                prop_assert!(is_dns1123_label(&n), "{}", n);
                prop_assert!(n.starts_with(lane.name_prefix()));
                prop_assert!(n.ends_with(&claim));
                prop_assert_eq!(&n, &job_name(lane, &id, &claim));
            }
        }
    }
}
