//! The Helm chart installed as `helm install` installs it, without a helm
//! binary: rendered by Helm's own engine (the pinned helm-python-sdk of the
//! chart checks, `charts/render_chart.py`, in `.venv-chart`), then each
//! manifest created in Helm's install order (its kind sort order, stable
//! over the templates' path order), namespaced objects without a
//! namespace in the release's. The objects carry the labels the chart
//! renders for the release (`app.kubernetes.io/instance`,
//! `app.kubernetes.io/managed-by: Helm`, `helm.sh/chart`); Helm's release
//! record (the `sh.helm.release.v1.*` Secret) is not written, so `helm
//! list` does not see the release. [`uninstall`] deletes the same
//! manifests in Helm's uninstall order with background propagation, as
//! `helm uninstall` does; what the chart did not render (the dispatcher's
//! Jobs) stays. [`upgrade`] applies a new rendering server-side and deletes
//! what it no longer has.
//!
//! Helm's engine renders a chart's hooks (manifests annotated
//! `helm.sh/hook`, such as the `helm test` pod of `templates/tests/`) with
//! the rest; Helm keeps them out of the release's manifests and runs them
//! only at their event. So do [`install`] and [`upgrade`]: a hook is kept in
//! [`Release::hooks`] and never applied, and [`test()`] runs the `test` hooks
//! as `helm test` does (each Pod created, waited for until it succeeds or
//! fails, its log read, then deleted as its `helm.sh/hook-delete-policy`
//! says).

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, DynamicObject, LogParams, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::Scope;
use serde::Deserialize;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

/// Helm's install order by kind (pkg/release/v1/util/kind_sorter.go);
/// other kinds come after these, by kind name.
pub const INSTALL_ORDER: [&str; 38] = [
    "PriorityClass",
    "Namespace",
    "NetworkPolicy",
    "ResourceQuota",
    "LimitRange",
    "PodSecurityPolicy",
    "PodDisruptionBudget",
    "ServiceAccount",
    "Secret",
    "SecretList",
    "ConfigMap",
    "StorageClass",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleList",
    "ClusterRoleBinding",
    "ClusterRoleBindingList",
    "Role",
    "RoleList",
    "RoleBinding",
    "RoleBindingList",
    "Service",
    "DaemonSet",
    "Pod",
    "ReplicationController",
    "ReplicaSet",
    "Deployment",
    "HorizontalPodAutoscaler",
    "StatefulSet",
    "Job",
    "CronJob",
    "IngressClass",
    "Ingress",
    "APIService",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
];

/// Helm's uninstall order by kind.
pub const UNINSTALL_ORDER: [&str; 38] = [
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
    "APIService",
    "Ingress",
    "IngressClass",
    "Service",
    "CronJob",
    "Job",
    "StatefulSet",
    "HorizontalPodAutoscaler",
    "Deployment",
    "ReplicaSet",
    "ReplicationController",
    "Pod",
    "DaemonSet",
    "RoleBindingList",
    "RoleBinding",
    "RoleList",
    "Role",
    "ClusterRoleBindingList",
    "ClusterRoleBinding",
    "ClusterRoleList",
    "ClusterRole",
    "CustomResourceDefinition",
    "PersistentVolumeClaim",
    "PersistentVolume",
    "StorageClass",
    "ConfigMap",
    "SecretList",
    "Secret",
    "ServiceAccount",
    "PodDisruptionBudget",
    "PodSecurityPolicy",
    "LimitRange",
    "ResourceQuota",
    "NetworkPolicy",
    "Namespace",
    "PriorityClass",
];

/// One rendered manifest.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Manifest {
    /// The template it came from (`tcab-dispatcher/templates/role.yaml`).
    pub source: String,
    /// The object.
    pub object: Value,
}

impl Manifest {
    /// Its kind.
    pub fn kind(&self) -> &str {
        self.object["kind"].as_str().unwrap_or("")
    }
    /// Its name.
    pub fn name(&self) -> &str {
        self.object["metadata"]["name"].as_str().unwrap_or("")
    }
    /// The events of a hook (`helm.sh/hook: test` gives `["test"]`); empty
    /// for a manifest of the release itself.
    pub fn hook_events(&self) -> Vec<&str> {
        annotation_list(&self.object, "helm.sh/hook")
    }
    /// A hook's `helm.sh/hook-delete-policy`, Helm's default
    /// (`before-hook-creation`) when it gives none.
    pub fn hook_delete_policies(&self) -> Vec<&str> {
        let given = annotation_list(&self.object, "helm.sh/hook-delete-policy");
        if given.is_empty() {
            vec!["before-hook-creation"]
        } else {
            given
        }
    }
}

/// The comma-separated values of an annotation, trimmed.
fn annotation_list<'a>(object: &'a Value, key: &str) -> Vec<&'a str> {
    object["metadata"]["annotations"][key]
        .as_str()
        .map(|v| {
            v.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .collect()
        })
        .unwrap_or_default()
}

/// The rendered manifests split as Helm splits them: the release's, and its
/// hooks.
pub fn split_hooks(manifests: Vec<Manifest>) -> (Vec<Manifest>, Vec<Manifest>) {
    manifests
        .into_iter()
        .partition(|m| m.hook_events().is_empty())
}

/// `manifests` sorted by kind in `order` as Helm sorts them: stable, kinds
/// not in the list after those in it, by kind name.
pub fn sort_by_kind(mut manifests: Vec<Manifest>, order: &[&str]) -> Vec<Manifest> {
    manifests.sort_by(|a, b| {
        let rank = |m: &Manifest| order.iter().position(|k| *k == m.kind());
        match (rank(a), rank(b)) {
            (Some(x), Some(y)) => x.cmp(&y),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => a.kind().cmp(b.kind()),
        }
    });
    manifests
}

/// The chart's directory in the workspace.
pub fn chart_dir() -> PathBuf {
    tcab_real_cluster::workspace_root().join("charts/tcab-dispatcher")
}

/// The Python of `.venv-chart` with the pinned packages of
/// `charts/requirements.txt`. `scripts/test` makes it before any test runs;
/// a test run another way makes it here when missing, under an exclusive
/// lock on `.venv-chart.lock`, so the chart, role and chart-values test
/// binaries running side by side on a fresh clone never make it twice
/// (`python3 -m venv` fails with "File exists" when they race).
pub fn chart_python() -> anyhow::Result<PathBuf> {
    let root = tcab_real_cluster::workspace_root();
    let venv = root.join(".venv-chart");
    let python = venv.join("bin/python");
    let ready = || {
        std::process::Command::new(&python)
            .args(["-c", "import helm_python, yaml"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if ready() {
        return Ok(python);
    }
    let lock_path = root.join(".venv-chart.lock");
    let lock = std::fs::File::create(&lock_path)
        .with_context(|| format!("creating {}", lock_path.display()))?;
    // Blocks while another test process makes the venv; released on drop.
    lock.lock()
        .with_context(|| format!("locking {}", lock_path.display()))?;
    if ready() {
        return Ok(python);
    }
    // A venv left half-made (a process killed while making it) is made again.
    if venv.exists() {
        std::fs::remove_dir_all(&venv)
            .with_context(|| format!("removing the half-made {}", venv.display()))?;
    }
    let run = |cmd: &mut std::process::Command, what: &str| -> anyhow::Result<()> {
        let status = cmd.status().with_context(|| what.to_owned())?;
        if !status.success() {
            bail!("{what} failed ({status})");
        }
        Ok(())
    };
    run(
        std::process::Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv),
        "python3 -m venv .venv-chart",
    )?;
    run(
        std::process::Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "-r",
            ])
            .arg(root.join("charts/requirements.txt")),
        "pip install -r charts/requirements.txt",
    )?;
    Ok(python)
}

/// Renders the chart in `chart` for a release, as `helm install` renders it.
pub async fn render(
    chart: &Path,
    release: &str,
    namespace: &str,
    values: &Value,
) -> anyhow::Result<Vec<Manifest>> {
    let python = chart_python()?;
    let script = tcab_real_cluster::workspace_root().join("charts/render_chart.py");
    let request = serde_json::json!({
        "chart": chart, "release": release, "namespace": namespace, "values": values,
    });
    let mut child = tokio::process::Command::new(&python)
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("running {}", script.display()))?;
    let mut stdin = child.stdin.take().context("the renderer's stdin")?;
    stdin.write_all(request.to_string().as_bytes()).await?;
    drop(stdin);
    let out = child.wait_with_output().await?;
    if !out.status.success() {
        bail!(
            "helm refused to render the chart: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    serde_json::from_slice(&out.stdout).context("reading the rendered manifests")
}

/// An installed release: what was created, in install order.
#[derive(Debug, Clone)]
pub struct Release {
    /// The release name.
    pub name: String,
    /// Its namespace.
    pub namespace: String,
    /// Its manifests, in the order they were created.
    pub manifests: Vec<Manifest>,
    /// Its hooks, rendered and not applied (the `helm test` pod).
    pub hooks: Vec<Manifest>,
}

async fn api_for(
    client: &kube::Client,
    object: &Value,
    release_ns: &str,
) -> anyhow::Result<Api<DynamicObject>> {
    let api_version = object["apiVersion"].as_str().unwrap_or("");
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, object["kind"].as_str().unwrap_or(""));
    let (resource, caps) = kube::discovery::pinned_kind(client, &gvk)
        .await
        .with_context(|| format!("the API server does not serve {api_version} {}", gvk.kind))?;
    Ok(match caps.scope {
        Scope::Namespaced => {
            let ns = object["metadata"]["namespace"]
                .as_str()
                .unwrap_or(release_ns);
            Api::namespaced_with(client.clone(), ns, &resource)
        }
        Scope::Cluster => Api::all_with(client.clone(), &resource),
    })
}

/// Renders the chart for `release` in `namespace` with `values` and
/// creates its manifests in Helm's install order (a create that fails
/// stops the install, as `helm install` stops).
pub async fn install(
    client: &kube::Client,
    release: &str,
    namespace: &str,
    values: &Value,
) -> anyhow::Result<Release> {
    let rendered = render(&chart_dir(), release, namespace, values).await?;
    let (manifests, hooks) = split_hooks(rendered);
    let manifests = sort_by_kind(manifests, &INSTALL_ORDER);
    let params = PostParams {
        field_manager: Some("helm".into()),
        ..PostParams::default()
    };
    for m in &manifests {
        let api = api_for(client, &m.object, namespace).await?;
        let object: DynamicObject =
            serde_json::from_value(m.object.clone()).context("a rendered manifest")?;
        api.create(&params, &object)
            .await
            .with_context(|| format!("creating {} {} ({})", m.kind(), m.name(), m.source))?;
    }
    Ok(Release {
        name: release.to_owned(),
        namespace: namespace.to_owned(),
        manifests,
        hooks,
    })
}

fn same(a: &Manifest, b: &Manifest) -> bool {
    a.object["apiVersion"] == b.object["apiVersion"]
        && a.kind() == b.kind()
        && a.name() == b.name()
        && a.object["metadata"]["namespace"] == b.object["metadata"]["namespace"]
}

/// `helm upgrade` of `release` to `values`: renders again, applies every
/// manifest of the new rendering in install order (server-side apply,
/// field manager `helm`, conflicts forced: what the new rendering says
/// wins), then deletes, in uninstall order, what the old rendering had and
/// the new one has not.
pub async fn upgrade(
    client: &kube::Client,
    release: &Release,
    values: &Value,
) -> anyhow::Result<Release> {
    let rendered = render(&chart_dir(), &release.name, &release.namespace, values).await?;
    let (manifests, hooks) = split_hooks(rendered);
    let manifests = sort_by_kind(manifests, &INSTALL_ORDER);
    let params = PatchParams::apply("helm").force();
    for m in &manifests {
        let api = api_for(client, &m.object, &release.namespace).await?;
        api.patch(m.name(), &params, &Patch::Apply(&m.object))
            .await
            .with_context(|| format!("applying {} {} ({})", m.kind(), m.name(), m.source))?;
    }
    let dropped: Vec<Manifest> = release
        .manifests
        .iter()
        .filter(|old| !manifests.iter().any(|new| same(new, old)))
        .cloned()
        .collect();
    let upgraded = Release {
        manifests,
        hooks,
        ..release.clone()
    };
    uninstall(
        client,
        &Release {
            manifests: dropped,
            ..release.clone()
        },
    )
    .await?;
    Ok(upgraded)
}

/// Whether the object of `manifest` exists.
pub async fn exists(
    client: &kube::Client,
    release: &Release,
    manifest: &Manifest,
) -> anyhow::Result<bool> {
    let api = api_for(client, &manifest.object, &release.namespace).await?;
    Ok(api.get_opt(manifest.name()).await?.is_some())
}

/// Deletes the release's manifests in Helm's uninstall order (background
/// propagation; one already gone is fine).
pub async fn uninstall(client: &kube::Client, release: &Release) -> anyhow::Result<()> {
    let manifests = sort_by_kind(release.manifests.clone(), &UNINSTALL_ORDER);
    for m in &manifests {
        let api = api_for(client, &m.object, &release.namespace).await?;
        match api.delete(m.name(), &DeleteParams::background()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => {
                return Err(e).with_context(|| format!("deleting {} {}", m.kind(), m.name()));
            }
        }
    }
    Ok(())
}

/// How one `test` hook ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestRun {
    /// The hook pod's name.
    pub name: String,
    /// Its final phase: `Succeeded` or `Failed`.
    pub phase: String,
    /// Its log (every container's, in order), read before any delete.
    pub log: String,
}

impl TestRun {
    /// Whether the test passed.
    pub fn passed(&self) -> bool {
        self.phase == "Succeeded"
    }
}

/// `helm test` of `release`: each `test` hook (Helm runs only Pods' to an
/// end, and the chart has no other) deleted first when its policy says
/// `before-hook-creation`, created, waited for until its phase is
/// `Succeeded` or `Failed` (at most `limit`), its log read, then deleted
/// when its policy says `hook-succeeded` or `hook-failed` and it did. One
/// run per hook, in the order rendered; a hook that does not end within
/// `limit` is an error.
pub async fn test(
    client: &kube::Client,
    release: &Release,
    limit: Duration,
) -> anyhow::Result<Vec<TestRun>> {
    let mut runs = vec![];
    for hook in release
        .hooks
        .iter()
        .filter(|m| m.hook_events().contains(&"test"))
    {
        if hook.kind() != "Pod" {
            bail!(
                "test hook {} {}: only Pods are run here",
                hook.kind(),
                hook.name()
            );
        }
        let name = hook.name();
        let namespace = hook.object["metadata"]["namespace"]
            .as_str()
            .unwrap_or(&release.namespace);
        let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
        let policies = hook.hook_delete_policies();
        if policies.contains(&"before-hook-creation") {
            delete_and_wait(&pods, name, limit).await?;
        }
        let pod: Pod =
            serde_json::from_value(hook.object.clone()).context("a rendered test pod")?;
        pods.create(&PostParams::default(), &pod)
            .await
            .with_context(|| format!("creating test pod {name}"))?;
        let phase = crate::wait_for(
            &format!("test pod {name} to succeed or fail"),
            limit,
            || async {
                let pod = pods.get(name).await?;
                let phase = pod.status.and_then(|s| s.phase).unwrap_or_default();
                Ok(matches!(phase.as_str(), "Succeeded" | "Failed").then_some(phase))
            },
        )
        .await?;
        let mut log = String::new();
        for container in pod.spec.iter().flat_map(|s| &s.containers) {
            let params = LogParams {
                container: Some(container.name.clone()),
                ..LogParams::default()
            };
            log.push_str(
                &pods
                    .logs(name, &params)
                    .await
                    .with_context(|| format!("reading the log of test pod {name}"))?,
            );
        }
        let run = TestRun {
            name: name.to_owned(),
            phase,
            log,
        };
        let delete = if run.passed() {
            "hook-succeeded"
        } else {
            "hook-failed"
        };
        if policies.contains(&delete) {
            delete_and_wait(&pods, name, limit).await?;
        }
        runs.push(run);
    }
    Ok(runs)
}

/// Deletes pod `name` if it is there and waits until it is gone.
async fn delete_and_wait(pods: &Api<Pod>, name: &str, limit: Duration) -> anyhow::Result<()> {
    match pods.delete(name, &DeleteParams::background()).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("deleting test pod {name}")),
    }
    crate::wait_for(&format!("test pod {name} gone"), limit, || async {
        Ok(pods.get_opt(name).await?.is_none().then_some(()))
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn m(kind: &str, name: &str) -> Manifest {
        Manifest {
            source: format!("t/{name}.yaml"),
            object: json!({"kind": kind, "metadata": {"name": name}}),
        }
    }

    #[test]
    fn kinds_are_sorted_as_helm_sorts_them() {
        let rendered = vec![
            m("Deployment", "d"),
            m("PodMonitor", "pm"),
            m("Role", "r"),
            m("RoleBinding", "rb"),
            m("ConfigMap", "dash"),
            m("Secret", "s"),
            m("ServiceAccount", "sa"),
            m("Role", "r2"),
        ];
        let names = |ms: Vec<Manifest>| ms.iter().map(|m| m.name().to_owned()).collect::<Vec<_>>();
        assert_eq!(
            names(sort_by_kind(rendered.clone(), &INSTALL_ORDER)),
            ["sa", "s", "dash", "r", "r2", "rb", "d", "pm"]
        );
        assert_eq!(
            names(sort_by_kind(rendered, &UNINSTALL_ORDER)),
            ["d", "rb", "r", "r2", "dash", "s", "sa", "pm"]
        );
    }

    #[test]
    fn hooks_are_kept_apart_with_their_delete_policies() {
        let hook = |annotations: Value| Manifest {
            source: "t/tests/check.yaml".into(),
            object: json!({"kind": "Pod", "metadata": {"name": "check", "annotations": annotations}}),
        };
        let test = hook(json!({"helm.sh/hook": "test",
            "helm.sh/hook-delete-policy": "before-hook-creation, hook-succeeded"}));
        assert_eq!(test.hook_events(), ["test"]);
        assert_eq!(
            test.hook_delete_policies(),
            ["before-hook-creation", "hook-succeeded"]
        );
        let bare = hook(json!({"helm.sh/hook": "pre-install,pre-upgrade"}));
        assert_eq!(bare.hook_events(), ["pre-install", "pre-upgrade"]);
        assert_eq!(bare.hook_delete_policies(), ["before-hook-creation"]);
        let (release, hooks) = split_hooks(vec![m("Deployment", "d"), test, m("Role", "r"), bare]);
        let names = |ms: &[Manifest]| ms.iter().map(|m| m.name().to_owned()).collect::<Vec<_>>();
        assert_eq!(names(&release), ["d", "r"]);
        assert_eq!(names(&hooks), ["check", "check"]);
    }

    #[test]
    fn the_orders_hold_the_same_kinds() {
        let mut a = INSTALL_ORDER.to_vec();
        let mut b = UNINSTALL_ORDER.to_vec();
        a.sort();
        b.sort();
        assert_eq!(a, b);
    }
}
