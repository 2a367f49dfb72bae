//! The cluster's own policies, set up in a stack's namespace as an operator
//! sets them: PodSecurity labels on the namespace, a LimitRange, a
//! ResourceQuota, a ValidatingAdmissionPolicy with its binding, a
//! ServiceAccount. All through the API as the admin ([`Cluster`]), so the
//! same calls serve kube-sim where it models the policy (a ServiceAccount).
//!
//! The admission plugins read these objects through informers (LimitRanger
//! also through a cache of live lookups kept 30 s), so a policy just created
//! or deleted is not yet what the API server enforces. [`refused`] and
//! [`admitted`] wait on what counts: a dry-run pod create by the admin,
//! refused in the policy's own words, or let through.
//!
//! Cluster-scoped objects made for one stack (policies, bindings,
//! PriorityClasses) carry [`RIG_NAMESPACE_LABEL`] with the stack's
//! namespace; [`remove_rig_objects`] deletes them when the stack stops.
//!
//! [`never_pod_next`] and [`never_pod_named`] are the real control plane's
//! `never_pod` (see [`crate::cluster`]): a policy that refuses the pods of
//! chosen Jobs. Unlike kube-sim's switch, that is a refusal the Job
//! controller records (`FailedCreate`), so the dispatcher fails such a Job
//! once its start grace has passed; a test that needs the Job to stay
//! podless keeps the start grace longer than itself.

use crate::console::Cluster;
use crate::stack::wait_for;
use anyhow::{Context, bail};
use serde_json::{Value, json};
use std::time::Duration;

/// The label on the cluster-scoped objects made for one stack: its
/// namespace.
pub const RIG_NAMESPACE_LABEL: &str = "tcab.dev/rig-namespace";

/// The label the Job controller's pods carry with their Job's name.
pub const JOB_NAME_LABEL: &str = "batch.kubernetes.io/job-name";

const VAP_API: &str = "/apis/admissionregistration.k8s.io/v1";

/// How long a policy may take to be enforced, or to stop being (LimitRanger's
/// live-lookup cache keeps a deleted LimitRange 30 s).
pub const IN_FORCE_LIMIT: Duration = Duration::from_secs(60);

/// A random suffix for the names of one stack's cluster-scoped objects.
pub fn suffix() -> String {
    format!("{:06x}", rand::random::<u32>() & 0xff_ffff)
}

/// Adds labels to a namespace (a merge patch: the others stay).
pub async fn label_namespace(
    api: &Cluster,
    ns: &str,
    labels: &[(&str, &str)],
) -> anyhow::Result<()> {
    let labels: serde_json::Map<String, Value> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), json!(v)))
        .collect();
    api.patch(
        &format!("/api/v1/namespaces/{ns}"),
        "application/merge-patch+json",
        json!({"metadata": {"labels": labels}}),
    )
    .await
    .with_context(|| format!("labelling namespace {ns}"))?;
    Ok(())
}

/// The labels that make PodSecurity enforce `restricted` (its latest
/// version) in a namespace.
pub const ENFORCE_RESTRICTED: [(&str, &str); 2] = [
    ("pod-security.kubernetes.io/enforce", "restricted"),
    ("pod-security.kubernetes.io/enforce-version", "latest"),
];

/// Creates a LimitRange of `limits` (its `spec.limits` items).
pub async fn create_limit_range(
    api: &Cluster,
    ns: &str,
    name: &str,
    limits: Value,
) -> anyhow::Result<()> {
    let body = json!({"apiVersion": "v1", "kind": "LimitRange",
        "metadata": {"name": name}, "spec": {"limits": limits}});
    api.post(&format!("/api/v1/namespaces/{ns}/limitranges"), body)
        .await
        .with_context(|| format!("creating LimitRange {ns}/{name}"))?;
    Ok(())
}

/// Creates a ResourceQuota of `hard` and waits until the resource quota
/// controller has taken it up (its status holds every limit and a usage for
/// each): only then does the admission plugin enforce it.
pub async fn create_resource_quota(
    api: &Cluster,
    ns: &str,
    name: &str,
    hard: Value,
) -> anyhow::Result<()> {
    let body = json!({"apiVersion": "v1", "kind": "ResourceQuota",
        "metadata": {"name": name}, "spec": {"hard": hard}});
    api.post(&format!("/api/v1/namespaces/{ns}/resourcequotas"), body)
        .await
        .with_context(|| format!("creating ResourceQuota {ns}/{name}"))?;
    let keys: Vec<String> = hard
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    wait_for(
        "the resource quota controller to take the quota up",
        IN_FORCE_LIMIT,
        || async {
            let status = quota_status(api, ns, name).await?;
            let taken = keys
                .iter()
                .all(|k| !status["hard"][k].is_null() && !status["used"][k].is_null());
            Ok(taken.then_some(()))
        },
    )
    .await
}

/// A ResourceQuota's status (`hard` and `used`).
pub async fn quota_status(api: &Cluster, ns: &str, name: &str) -> anyhow::Result<Value> {
    let quota = api
        .get(&format!("/api/v1/namespaces/{ns}/resourcequotas/{name}"))
        .await?;
    Ok(quota["status"].clone())
}

/// Creates a ServiceAccount.
pub async fn create_service_account(api: &Cluster, ns: &str, name: &str) -> anyhow::Result<()> {
    let body = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}});
    api.post(&format!("/api/v1/namespaces/{ns}/serviceaccounts"), body)
        .await
        .with_context(|| format!("creating ServiceAccount {ns}/{name}"))?;
    Ok(())
}

/// A bare pod that runs until it is deleted (the node agent's plain
/// program), e.g. what holds a quota's last pod.
pub fn bare_pod(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": "tcab/plain:dev"}]}})
}

/// Creates a pod.
pub async fn create_pod(api: &Cluster, ns: &str, pod: &Value) -> anyhow::Result<Value> {
    api.post(&format!("/api/v1/namespaces/{ns}/pods"), pod.clone())
        .await
        .with_context(|| format!("creating a pod in {ns}"))
}

/// DELETEs an object at `path`; one already gone is fine.
pub async fn delete(api: &Cluster, path: &str, body: Value) -> anyhow::Result<()> {
    match api.delete(path, body).await {
        Ok(_) => Ok(()),
        Err(e) if e.to_string().contains("404") => Ok(()),
        Err(e) => Err(e),
    }
}

/// A pod to dry-run: one container, `labels`, and the container's
/// `resources` (`null` for none).
pub fn probe_pod(labels: Value, resources: Value) -> Value {
    let mut container = json!({"name": "probe", "image": "tcab/probe:dev"});
    if !resources.is_null() {
        container["resources"] = resources;
    }
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "tcab-rig-probe-", "labels": labels},
        "spec": {"containers": [container]}})
}

/// Waits until a dry-run create of `pod` in `ns` is refused with a message
/// containing `words`; returns the message. A policy is in force then.
pub async fn refused(api: &Cluster, ns: &str, pod: &Value, words: &str) -> anyhow::Result<String> {
    let path = format!("/api/v1/namespaces/{ns}/pods?dryRun=All");
    wait_for(
        &format!("a pod create refused with {words:?}"),
        IN_FORCE_LIMIT,
        || async {
            let (code, answer) = api.post_answer(&path, pod.clone()).await?;
            let message = answer["message"].as_str().unwrap_or_default().to_owned();
            if code >= 400 && message.contains(words) {
                return Ok(Some(message));
            }
            // An error, so that a timeout names the last answer.
            bail!("answered {code} {message}")
        },
    )
    .await
}

/// Waits until a dry-run create of `pod` in `ns` passes: the policy that
/// refused it is no longer in force.
pub async fn admitted(api: &Cluster, ns: &str, pod: &Value) -> anyhow::Result<()> {
    let path = format!("/api/v1/namespaces/{ns}/pods?dryRun=All");
    wait_for("a pod create let through", IN_FORCE_LIMIT, || async {
        let (code, answer) = api.post_answer(&path, pod.clone()).await?;
        if (200..300).contains(&code) {
            return Ok(Some(()));
        }
        bail!(
            "answered {code} {}",
            answer["message"].as_str().unwrap_or_default()
        )
    })
    .await
}

/// A ValidatingAdmissionPolicy and its binding, both named `name`.
#[derive(Debug, Clone)]
pub struct Vap {
    /// The policy's (and the binding's) name.
    pub name: String,
}

impl Vap {
    /// What the API server says when the policy refuses a request, up to
    /// the policy's message.
    pub fn denial(&self) -> String {
        format!(
            "ValidatingAdmissionPolicy '{0}' with binding '{0}' denied request:",
            self.name
        )
    }
}

/// A policy on pod creates whose one validation is `allow` (a CEL
/// expression over `object`, true to let the pod through), failing with
/// `message`, bound (Deny) to namespace `ns` only.
fn vap_policy(name: &str, ns: &str, allow: &str, message: &str) -> Value {
    json!({"apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "labels": {RIG_NAMESPACE_LABEL: ns}},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE"], "resources": ["pods"]}]},
            "validations": [{"expression": allow, "message": message, "reason": "Forbidden"}]}})
}

fn vap_binding(name: &str, ns: &str) -> Value {
    json!({"apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name, "labels": {RIG_NAMESPACE_LABEL: ns}},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {
                "matchLabels": {"kubernetes.io/metadata.name": ns}}}}})
}

/// Creates a ValidatingAdmissionPolicy on pod creates in `ns` that lets a
/// pod through only when `allow` holds, and its binding. Not yet in force
/// when this returns: wait with [`refused`].
pub async fn deny_pods(
    api: &Cluster,
    ns: &str,
    name: &str,
    allow: &str,
    message: &str,
) -> anyhow::Result<Vap> {
    api.post(
        &format!("{VAP_API}/validatingadmissionpolicies"),
        vap_policy(name, ns, allow, message),
    )
    .await
    .with_context(|| format!("creating ValidatingAdmissionPolicy {name}"))?;
    api.post(
        &format!("{VAP_API}/validatingadmissionpolicybindings"),
        vap_binding(name, ns),
    )
    .await
    .with_context(|| format!("creating ValidatingAdmissionPolicyBinding {name}"))?;
    Ok(Vap {
        name: name.to_owned(),
    })
}

/// Replaces the policy's validation.
async fn set_allow(api: &Cluster, vap: &Vap, allow: &str, message: &str) -> anyhow::Result<()> {
    api.patch(
        &format!("{VAP_API}/validatingadmissionpolicies/{}", vap.name),
        "application/merge-patch+json",
        json!({"spec": {"validations": [
            {"expression": allow, "message": message, "reason": "Forbidden"}]}}),
    )
    .await
    .with_context(|| format!("updating ValidatingAdmissionPolicy {}", vap.name))?;
    Ok(())
}

/// Deletes the binding and the policy (wait with [`admitted`] for the API
/// server to stop enforcing them).
pub async fn remove_vap(api: &Cluster, vap: &Vap) -> anyhow::Result<()> {
    delete(
        api,
        &format!("{VAP_API}/validatingadmissionpolicybindings/{}", vap.name),
        json!({}),
    )
    .await?;
    delete(
        api,
        &format!("{VAP_API}/validatingadmissionpolicies/{}", vap.name),
        json!({}),
    )
    .await
}

/// Deletes the cluster-scoped objects made for the stack of namespace
/// `ns` (policies, their bindings, PriorityClasses).
pub async fn remove_rig_objects(api: &Cluster, ns: &str) -> anyhow::Result<()> {
    let selector = format!("labelSelector={RIG_NAMESPACE_LABEL}%3D{ns}");
    for collection in [
        format!("{VAP_API}/validatingadmissionpolicybindings"),
        format!("{VAP_API}/validatingadmissionpolicies"),
        "/apis/scheduling.k8s.io/v1/priorityclasses".to_owned(),
    ] {
        delete(api, &format!("{collection}?{selector}"), json!({})).await?;
    }
    Ok(())
}

/// A CEL list literal of names (DNS names need no escaping).
fn cel_list(names: &[String]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("'{n}'")).collect();
    format!("[{}]", quoted.join(", "))
}

/// CEL: the pod is a Job's (it carries [`JOB_NAME_LABEL`]).
const JOB_POD: &str =
    "has(object.metadata.labels) && 'batch.kubernetes.io/job-name' in object.metadata.labels";

/// CEL: a Job pod whose Job is one of `names`.
fn job_pod_of(names: &[String]) -> String {
    format!(
        "({JOB_POD} && object.metadata.labels['batch.kubernetes.io/job-name'] in {})",
        cel_list(names)
    )
}

/// The message of the rig's never-pod policy.
pub const NEVER_POD_MESSAGE: &str = "the test rig refuses the pods of this Job (never_pod)";

/// A dry-run pod as the Job controller would make for Job `job`.
fn job_probe(job: &str) -> Value {
    probe_pod(json!({JOB_NAME_LABEL: job}), Value::Null)
}

/// The Job with this name (in `ns`) never gets a pod: a policy refuses its
/// pods, in force when this returns.
pub async fn never_pod_named(api: &Cluster, ns: &str, job: &str) -> anyhow::Result<Vap> {
    let name = format!("tcab-never-pod-{}", suffix());
    let names = [job.to_owned()];
    let vap = deny_pods(
        api,
        ns,
        &name,
        &format!("!{}", job_pod_of(&names)),
        NEVER_POD_MESSAGE,
    )
    .await?;
    refused(api, ns, &job_probe(job), NEVER_POD_MESSAGE).await?;
    Ok(vap)
}

/// The next `n` Jobs created in `ns` never get a pod. A policy refuses
/// the pods of every Job made from now on (in force when this returns);
/// a task watches for the next `n` Jobs, in the order the API server stored
/// them, then narrows the policy to their pods alone. A Job created in that
/// moment beside them has its first pod creates refused too, and gets its
/// pod on the Job controller's retry (1 s back-off, doubling).
pub async fn never_pod_next(api: &Cluster, ns: &str, n: u32) -> anyhow::Result<()> {
    let path = format!("/apis/batch/v1/namespaces/{ns}/jobs");
    let list = api.get(&path).await?;
    let since = list["metadata"]["resourceVersion"]
        .as_str()
        .context("a Job list without a resourceVersion")?
        .to_owned();
    let existing: Vec<String> = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|j| j["metadata"]["name"].as_str().map(str::to_owned))
        .collect();
    let name = format!("tcab-never-pod-{}", suffix());
    let allow = if existing.is_empty() {
        format!("!({JOB_POD})")
    } else {
        format!("!({JOB_POD}) || {}", job_pod_of(&existing))
    };
    let vap = deny_pods(api, ns, &name, &allow, NEVER_POD_MESSAGE).await?;
    let unseen = format!("tcab-rig-unseen-{}", suffix());
    refused(api, ns, &job_probe(&unseen), NEVER_POD_MESSAGE).await?;

    let api = api.clone();
    let ns = ns.to_owned();
    tokio::spawn(async move {
        if let Err(e) = narrow_to_next(&api, &ns, &vap, &path, &since, n as usize).await {
            eprintln!("never_pod_next in {ns}: {e:#}");
        }
    });
    Ok(())
}

/// Waits for the first `n` Jobs created after the list at `since` (the
/// order comes from a watch: two Jobs created within one second share a
/// creation timestamp, and a list sorted by it took the later one), then
/// makes the policy refuse their pods only, and waits until that is in
/// force.
async fn narrow_to_next(
    api: &Cluster,
    ns: &str,
    vap: &Vap,
    jobs: &str,
    since: &str,
    n: usize,
) -> anyhow::Result<()> {
    let taken = api
        .first_added(jobs, since, n, Duration::from_secs(600))
        .await?;
    if taken.is_empty() {
        return remove_vap(api, vap).await;
    }
    set_allow(
        api,
        vap,
        &format!("!{}", job_pod_of(&taken)),
        NEVER_POD_MESSAGE,
    )
    .await?;
    let other = format!("tcab-rig-other-{}", suffix());
    admitted(api, ns, &job_probe(&other)).await?;
    refused(api, ns, &job_probe(&taken[0]), NEVER_POD_MESSAGE).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_never_pod_expressions_name_the_jobs() {
        let names = ["tcab-driver-a-1".to_owned(), "tcab-driver-b-2".to_owned()];
        assert_eq!(cel_list(&names), "['tcab-driver-a-1', 'tcab-driver-b-2']");
        let e = job_pod_of(&names);
        assert!(e.starts_with("(has(object.metadata.labels)"), "{e}");
        assert!(
            e.ends_with(
                "['batch.kubernetes.io/job-name'] in ['tcab-driver-a-1', 'tcab-driver-b-2'])"
            ),
            "{e}"
        );
    }

    #[test]
    fn a_binding_holds_its_policy_to_one_namespace() {
        let b = vap_binding("p", "tcab-1");
        assert_eq!(b["spec"]["policyName"], "p");
        assert_eq!(b["spec"]["validationActions"], json!(["Deny"]));
        assert_eq!(
            b["spec"]["matchResources"]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
            "tcab-1"
        );
        let p = vap_policy("p", "tcab-1", "true", "no");
        assert_eq!(p["metadata"]["labels"][RIG_NAMESPACE_LABEL], "tcab-1");
        assert_eq!(
            p["spec"]["matchConstraints"]["resourceRules"][0]["operations"],
            json!(["CREATE"])
        );
        assert_eq!(
            Vap { name: "p".into() }.denial(),
            "ValidatingAdmissionPolicy 'p' with binding 'p' denied request:"
        );
    }
}
