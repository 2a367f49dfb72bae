//! A real preemption of a chosen pod on the real control plane: only the
//! scheduler preempts, so a pod of a higher priority is made that cannot
//! be placed while the victim is on its node and can once it is gone.
//!
//! - A PriorityClass above the victim's priority (labelled for the stack,
//!   so its stop deletes it if this does not).
//! - The preemptor, pinned to the victim's node by node affinity
//!   (`metadata.name`), requesting what the node has allocatable minus what
//!   the pods the scheduler counts there request, plus the victim's own
//!   requests: it fits only with the victim gone.
//! - A required pod anti-affinity to the victim's labels on the node. The
//!   scheduler removes every lower-priority pod of the node and then takes
//!   back ("reprieves") as many as still let the preemptor fit, the most
//!   important first: among equal priorities the one that started first
//!   (pkg/scheduler/framework/plugins/defaultpreemption,
//!   `SelectVictimsOnNode`; `util.MoreImportantPod`). Sized on resources
//!   alone, a bystander with the same requests that started after the
//!   victim would be the one taken; the anti-affinity leaves the victim the
//!   only pod whose return keeps the preemptor out.
//!
//! The scheduler then sets the victim's `DisruptionTarget`
//! (`PreemptionByScheduler`), deletes it with its grace period, records a
//! `Preempted` Event, and binds the preemptor once the victim is gone.
//! [`preempt`] waits for that binding, checks that the victim was the only
//! pod preempted for it, and removes the preemptor and the PriorityClass.

use crate::console::Cluster;
use crate::policy::{RIG_NAMESPACE_LABEL, delete, suffix};
use crate::stack::wait_for;
use anyhow::{Context, bail};
use serde_json::{Value, json};
use std::time::Duration;
use tcab_kube_sim::quantity;

/// How long the scheduler may take to preempt and bind.
const LIMIT: Duration = Duration::from_secs(90);

/// CPU (millicores) and memory (bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Resources {
    pub cpu_millis: i128,
    pub memory_bytes: i128,
}

impl Resources {
    fn of(list: &Value) -> Resources {
        let read = |key: &str, milli: bool| {
            list[key]
                .as_str()
                .and_then(|q| quantity::parse(q).ok())
                .map_or(0, |q| if milli { q.milli_value() } else { q.value() })
        };
        Resources {
            cpu_millis: read("cpu", true),
            memory_bytes: read("memory", false),
        }
    }

    fn plus(self, o: Resources) -> Resources {
        Resources {
            cpu_millis: self.cpu_millis + o.cpu_millis,
            memory_bytes: self.memory_bytes + o.memory_bytes,
        }
    }

    fn max(self, o: Resources) -> Resources {
        Resources {
            cpu_millis: self.cpu_millis.max(o.cpu_millis),
            memory_bytes: self.memory_bytes.max(o.memory_bytes),
        }
    }
}

/// What a pod requests as the scheduler's resource fit counts it: its
/// containers' requests, or more when one init container asks more (with
/// the restartable ones, sidecars, that run beside the rest), plus the
/// pod's overhead; a pod-level `resources.requests` stands for the
/// containers' where it names a resource.
pub fn pod_requests(pod: &Value) -> Resources {
    let spec = &pod["spec"];
    let requests = |c: &Value| Resources::of(&c["resources"]["requests"]);
    let mut containers = Resources::default();
    for c in spec["containers"].as_array().into_iter().flatten() {
        containers = containers.plus(requests(c));
    }
    let mut sidecars = Resources::default();
    let mut init_peak = Resources::default();
    for c in spec["initContainers"].as_array().into_iter().flatten() {
        if c["restartPolicy"] == "Always" {
            sidecars = sidecars.plus(requests(c));
            init_peak = init_peak.max(sidecars);
        } else {
            init_peak = init_peak.max(sidecars.plus(requests(c)));
        }
    }
    let mut total = containers.plus(sidecars).max(init_peak);
    let pod_level = &spec["resources"]["requests"];
    if !pod_level["cpu"].is_null() {
        total.cpu_millis = Resources::of(pod_level).cpu_millis;
    }
    if !pod_level["memory"].is_null() {
        total.memory_bytes = Resources::of(pod_level).memory_bytes;
    }
    total.plus(Resources::of(&spec["overhead"]))
}

/// Whether the scheduler counts the pod on its node: its informer leaves
/// out pods that succeeded or failed (pkg/scheduler/scheduler.go), while a
/// terminating one still holds its requests.
fn counted(pod: &Value) -> bool {
    !matches!(
        pod["status"]["phase"].as_str(),
        Some("Succeeded" | "Failed")
    )
}

/// The preemptor's requests: the node's allocatable minus what every other
/// counted pod on it requests. With the victim there it is short by the
/// victim's requests; without it, it fits to the brim.
pub fn preemptor_requests(
    allocatable: &Value,
    pods_on_node: &[Value],
    victim_uid: &str,
) -> Resources {
    let free = pods_on_node
        .iter()
        .filter(|p| counted(p) && p["metadata"]["uid"] != victim_uid)
        .fold(Resources::of(allocatable), |left, p| {
            let r = pod_requests(p);
            Resources {
                cpu_millis: left.cpu_millis - r.cpu_millis,
                memory_bytes: left.memory_bytes - r.memory_bytes,
            }
        });
    Resources {
        cpu_millis: free.cpu_millis.max(0),
        memory_bytes: free.memory_bytes.max(0),
    }
}

/// The preemptor pod of `victim`.
fn preemptor_pod(name: &str, class: &str, node: &str, victim: &Value, r: Resources) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "tcab-preemptor"}},
        "spec": {
            "priorityClassName": class,
            "terminationGracePeriodSeconds": 1,
            "affinity": {
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchFields": [
                        {"key": "metadata.name", "operator": "In", "values": [node]}]}]}},
                "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                    "labelSelector": {"matchLabels": victim["metadata"]["labels"].clone()},
                    "namespaces": [victim["metadata"]["namespace"].clone()],
                    "topologyKey": "kubernetes.io/hostname"}]}},
            "containers": [{"name": "main", "image": "tcab/preemptor:dev",
                "resources": {"requests": {
                    "cpu": format!("{}m", r.cpu_millis),
                    "memory": r.memory_bytes.to_string()}}}]}})
}

fn has_preemption_target(pod: &Value) -> bool {
    pod["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter().any(|c| {
            c["type"] == "DisruptionTarget"
                && c["status"] == "True"
                && c["reason"] == "PreemptionByScheduler"
        })
    })
}

/// Has the scheduler preempt pod `ns`/`name` for a pod of a higher
/// priority (see the module), and removes that pod and its PriorityClass.
pub async fn preempt(api: &Cluster, ns: &str, name: &str) -> anyhow::Result<()> {
    let victim = api
        .get(&format!("/api/v1/namespaces/{ns}/pods/{name}"))
        .await
        .with_context(|| format!("the pod {ns}/{name} to preempt"))?;
    let node = victim["spec"]["nodeName"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    if node.is_empty() {
        bail!("pod {ns}/{name} is not on a node: nothing to preempt it from");
    }
    if victim["metadata"]["labels"]
        .as_object()
        .is_none_or(|l| l.is_empty())
    {
        bail!("pod {ns}/{name} has no labels: the preemptor's anti-affinity cannot single it out");
    }
    let priority = victim["spec"]["priority"].as_i64().unwrap_or(0);
    let id = suffix();
    let class = format!("tcab-preemptor-{id}");
    let preemptor = format!("tcab-preemptor-{id}");
    api.post(
        "/apis/scheduling.k8s.io/v1/priorityclasses",
        json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": class, "labels": {RIG_NAMESPACE_LABEL: ns}},
            "value": (priority + 1000).min(1_000_000_000),
            "preemptionPolicy": "PreemptLowerPriority",
            "description": "the test rig's preemptor of one pod"}),
    )
    .await
    .context("creating the preemptor's PriorityClass")?;
    let result = preempt_with(api, ns, &victim, &node, &class, &preemptor).await;
    let removed = async {
        delete(
            api,
            &format!("/api/v1/namespaces/{ns}/pods/{preemptor}"),
            json!({"gracePeriodSeconds": 0}),
        )
        .await?;
        delete(
            api,
            &format!("/apis/scheduling.k8s.io/v1/priorityclasses/{class}"),
            json!({}),
        )
        .await
    }
    .await;
    result.and(removed.context("removing the preemptor"))
}

async fn preempt_with(
    api: &Cluster,
    ns: &str,
    victim: &Value,
    node: &str,
    class: &str,
    preemptor: &str,
) -> anyhow::Result<()> {
    let victim_uid = victim["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let name = victim["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let n = api.get(&format!("/api/v1/nodes/{node}")).await?;
    let on_node = api
        .get(&format!(
            "/api/v1/pods?fieldSelector=spec.nodeName%3D{node}"
        ))
        .await?;
    let pods = on_node["items"].as_array().cloned().unwrap_or_default();
    let requests = preemptor_requests(&n["status"]["allocatable"], &pods, &victim_uid);
    let pod = preemptor_pod(preemptor, class, node, victim, requests);
    // The Priority admission plugin resolves the class through its informer:
    // a class made a moment ago may not be known yet.
    let created = wait_for("the preemptor created", LIMIT, || async {
        let (code, answer) = api
            .post_answer(&format!("/api/v1/namespaces/{ns}/pods"), pod.clone())
            .await?;
        match code {
            200..300 => Ok(Some(answer)),
            _ => bail!(
                "answered {code} {}",
                answer["message"].as_str().unwrap_or_default()
            ),
        }
    })
    .await?;
    let preemptor_uid = created["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_owned();

    wait_for("the scheduler to preempt the pod", LIMIT, || async {
        let v = api
            .get(&format!("/api/v1/namespaces/{ns}/pods/{name}"))
            .await;
        let preempted = match v {
            Ok(p) if p["metadata"]["uid"] == victim_uid.as_str() => has_preemption_target(&p),
            // Gone already: the scheduler's Event says whether it preempted it.
            _ => !preempted_for(api, &preemptor_uid).await?.is_empty(),
        };
        Ok(preempted.then_some(()))
    })
    .await?;
    wait_for(
        "the preemptor bound to the victim's node",
        LIMIT,
        || async {
            let p = api
                .get(&format!("/api/v1/namespaces/{ns}/pods/{preemptor}"))
                .await?;
            Ok((p["spec"]["nodeName"] == node).then_some(()))
        },
    )
    .await?;
    // Its Events were recorded before the victim's grace began.
    let victims = wait_for("the scheduler's Preempted Event", LIMIT, || async {
        let v = preempted_for(api, &preemptor_uid).await?;
        Ok((!v.is_empty()).then_some(v))
    })
    .await?;
    if victims != [victim_uid.clone()] {
        bail!(
            "the scheduler preempted {victims:?} for {preemptor}, not only {ns}/{name} ({victim_uid})"
        );
    }
    Ok(())
}

/// The uids of the pods the scheduler's `Preempted` Events name for the
/// preemptor with this uid ("Preempted by pod <uid> on node <node>").
async fn preempted_for(api: &Cluster, preemptor_uid: &str) -> anyhow::Result<Vec<String>> {
    let events = api
        .get("/api/v1/events?fieldSelector=reason%3DPreempted")
        .await?;
    let mut uids: Vec<String> = events["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| {
            e["message"]
                .as_str()
                .is_some_and(|m| m.contains(preemptor_uid))
        })
        .filter_map(|e| e["involvedObject"]["uid"].as_str().map(str::to_owned))
        .collect();
    uids.sort();
    uids.dedup();
    Ok(uids)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str, phase: &str, cpu: &str, memory: &str) -> Value {
        json!({"metadata": {"uid": uid}, "status": {"phase": phase},
            "spec": {"containers": [{"resources": {"requests": {"cpu": cpu, "memory": memory}}}]}})
    }

    #[test]
    fn a_pod_requests_its_containers_or_its_largest_init_container() {
        let p = json!({"spec": {
            "containers": [
                {"resources": {"requests": {"cpu": "250m", "memory": "1Gi"}}},
                {"resources": {"requests": {"cpu": "100m"}}}],
            "initContainers": [{"resources": {"requests": {"cpu": "2", "memory": "64Mi"}}}],
            "overhead": {"memory": "10Mi"}}});
        assert_eq!(
            pod_requests(&p),
            Resources {
                cpu_millis: 2000,
                memory_bytes: (1 << 30) + (10 << 20)
            }
        );
        let level = json!({"spec": {"resources": {"requests": {"cpu": "3"}},
            "containers": [{"resources": {"requests": {"cpu": "1", "memory": "1Mi"}}}]}});
        assert_eq!(
            pod_requests(&level),
            Resources {
                cpu_millis: 3000,
                memory_bytes: 1 << 20
            }
        );
    }

    #[test]
    fn the_preemptor_fits_only_without_the_victim() {
        let alloc = json!({"cpu": "8", "memory": "32Gi", "pods": "110"});
        let pods = [
            pod("victim", "Running", "250m", "1Gi"),
            pod("bystander", "Running", "250m", "1Gi"),
            pod("terminating", "Running", "500m", "0"),
            pod("done", "Succeeded", "4", "16Gi"),
        ];
        let r = preemptor_requests(&alloc, &pods, "victim");
        assert_eq!(
            r,
            Resources {
                cpu_millis: 8000 - 250 - 500,
                memory_bytes: (32 << 30) - (1 << 30)
            }
        );
        // With the victim counted the node is short by its requests.
        let used: i128 = 250 + 250 + 500;
        assert!(used + r.cpu_millis > 8000 && used - 250 + r.cpu_millis == 8000);
        assert!(!counted(&pods[3]));
    }

    #[test]
    fn the_preemptor_is_pinned_and_keeps_away_from_the_victim_alone() {
        let victim = json!({"metadata": {"namespace": "t", "labels": {"job-name": "j"}}});
        let p = preemptor_pod(
            "pre",
            "cls",
            "node-1",
            &victim,
            Resources {
                cpu_millis: 1500,
                memory_bytes: 2048,
            },
        );
        let spec = &p["spec"];
        assert_eq!(spec["priorityClassName"], "cls");
        let term = &spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"][0]["matchFields"][0];
        assert_eq!(term["key"], "metadata.name");
        assert_eq!(term["values"], json!(["node-1"]));
        let anti = &spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            [0];
        assert_eq!(
            anti["labelSelector"]["matchLabels"],
            json!({"job-name": "j"})
        );
        assert_eq!(anti["namespaces"], json!(["t"]));
        assert_eq!(
            spec["containers"][0]["resources"]["requests"],
            json!({"cpu": "1500m", "memory": "2048"})
        );
    }

    #[test]
    fn only_a_preemption_condition_counts() {
        let mut p = json!({"status": {"conditions": [{"type": "DisruptionTarget",
            "status": "True", "reason": "EvictionByEvictionAPI"}]}});
        assert!(!has_preemption_target(&p));
        p["status"]["conditions"][0]["reason"] = json!("PreemptionByScheduler");
        assert!(has_preemption_target(&p));
    }
}
