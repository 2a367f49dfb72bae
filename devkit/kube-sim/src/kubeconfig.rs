//! Writing a kubeconfig that points kubectl and kube-rs at the sim.
//!
//! The document is kube-rs's typed [`Kubeconfig`], serialized with the YAML
//! crate kube-rs reads it back with, so the file is valid by construction.

use kube::config::{
    AuthInfo, Cluster, Context, Kubeconfig, NamedAuthInfo, NamedCluster, NamedContext, Preferences,
};
use std::path::Path;

/// The names inside a kubeconfig: its cluster, its user and its context
/// (the context takes the cluster's name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Names<'a> {
    /// The cluster's and the context's name.
    pub cluster: &'a str,
    /// The user's name.
    pub user: &'a str,
}

/// The names of the kubeconfig the sim writes at start.
pub const SIM: Names<'static> = Names {
    cluster: "kube-sim",
    user: "kube-sim-user",
};

/// A kubeconfig with one cluster (`server`), one user (bearer `token`) and
/// one context joining them in `namespace`, which is the current context.
pub fn build(names: Names<'_>, server: &str, namespace: &str, token: &str) -> Kubeconfig {
    Kubeconfig {
        api_version: Some("v1".into()),
        kind: Some("Config".into()),
        clusters: vec![NamedCluster {
            name: names.cluster.into(),
            cluster: Some(Cluster {
                server: Some(server.into()),
                ..Cluster::default()
            }),
            ..NamedCluster::default()
        }],
        auth_infos: vec![NamedAuthInfo {
            name: names.user.into(),
            auth_info: Some(AuthInfo {
                token: Some(token.to_owned().into()),
                ..AuthInfo::default()
            }),
            ..NamedAuthInfo::default()
        }],
        contexts: vec![NamedContext {
            name: names.cluster.into(),
            context: Some(Context {
                cluster: names.cluster.into(),
                user: Some(names.user.into()),
                namespace: Some(namespace.into()),
                ..Context::default()
            }),
            ..NamedContext::default()
        }],
        current_context: Some(names.cluster.into()),
        preferences: Some(Preferences::default()),
        ..Kubeconfig::default()
    }
}

/// The sim's kubeconfig as YAML text, for a server URL, namespace and bearer token.
pub fn render(server: &str, namespace: &str, token: &str) -> String {
    to_yaml(&build(SIM, server, namespace, token))
}

/// A kubeconfig as YAML text.
pub fn to_yaml(config: &Kubeconfig) -> String {
    // Plain strings, maps and lists: serializing them cannot fail.
    serde_saphyr::to_string(config).expect("a kubeconfig serializes to YAML")
}

/// Writes `config` to `path` (creating parent directories).
pub fn write_config(path: &Path, config: &Kubeconfig) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, to_yaml(config))
}

/// Writes the sim's kubeconfig to `path` (creating parent directories).
pub fn write(path: &Path, server: &str, namespace: &str, token: &str) -> std::io::Result<()> {
    write_config(path, &build(SIM, server, namespace, token))
}

#[cfg(test)]
mod tests {
    use kube::config::Kubeconfig;

    #[test]
    fn is_yaml_with_the_fields() {
        let text = super::render("http://127.0.0.1:1", "ns", "tok");
        let v: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
        assert_eq!(
            v["clusters"][0]["cluster"]["server"].as_str(),
            Some("http://127.0.0.1:1")
        );
        assert_eq!(
            v["contexts"][0]["context"]["namespace"].as_str(),
            Some("ns")
        );
        assert_eq!(v["users"][0]["user"]["token"].as_str(), Some("tok"));
        assert_eq!(v["current-context"].as_str(), Some("kube-sim"));
        assert_eq!(
            (v["apiVersion"].as_str(), v["kind"].as_str()),
            (Some("v1"), Some("Config"))
        );
    }

    #[test]
    fn kube_rs_reads_it_back() {
        let names = super::Names {
            cluster: "sim",
            user: "dispatcher",
        };
        let text = super::to_yaml(&super::build(names, "http://127.0.0.1:1", "ns", "tok"));
        let back = Kubeconfig::from_yaml(&text).unwrap();
        assert_eq!(back.current_context.as_deref(), Some("sim"));
        let ctx = back.contexts[0].context.as_ref().unwrap();
        assert_eq!(
            (ctx.cluster.as_str(), ctx.user.as_deref()),
            ("sim", Some("dispatcher"))
        );
        assert_eq!(back.auth_infos[0].name, "dispatcher");
    }
}
