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

use anyhow::{Context, bail};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::Scope;
use serde::Deserialize;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Stdio;
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
    let manifests = sort_by_kind(rendered, &INSTALL_ORDER);
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
    let manifests = sort_by_kind(rendered, &INSTALL_ORDER);
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
    fn the_orders_hold_the_same_kinds() {
        let mut a = INSTALL_ORDER.to_vec();
        let mut b = UNINSTALL_ORDER.to_vec();
        a.sort();
        b.sort();
        assert_eq!(a, b);
    }
}
