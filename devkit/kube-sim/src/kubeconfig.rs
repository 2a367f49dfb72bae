//! Writing a kubeconfig that points kubectl and kube-rs at the sim.

use std::path::Path;

/// The kubeconfig text for a server URL, namespace and bearer token.
pub fn render(server: &str, namespace: &str, token: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: kube-sim\n  cluster:\n    server: {server}\n\
contexts:\n- name: kube-sim\n  context:\n    cluster: kube-sim\n    user: kube-sim-user\n    namespace: {namespace}\n\
current-context: kube-sim\nusers:\n- name: kube-sim-user\n  user:\n    token: {token}\npreferences: {{}}\n"
    )
}

/// Writes the kubeconfig to `path` (creating parent directories).
pub fn write(path: &Path, server: &str, namespace: &str, token: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, render(server, namespace, token))
}

#[cfg(test)]
mod tests {
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
    }
}
