//! A container's environment as the kubelet builds it
//! (pkg/kubelet/kubelet_pods.go `makeEnvironmentVariables`): `envFrom`
//! first (ConfigMaps and Secrets, with their prefix), then `env` in order,
//! each overriding what came before: literal values with `$(VAR)`
//! references expanded (third_party/forked/golang/expansion), `fieldRef`
//! (the downward API, `podFieldSelectorRuntimeValue`), `resourceFieldRef`
//! of the container's own requests and limits, `configMapKeyRef` and
//! `secretKeyRef`. A missing non-optional source is an error whose message
//! the kubelet puts in `CreateContainerConfigError` (`secret "x" not found`,
//! as its secret manager words a NotFound, or `couldn't find key k in
//! Secret ns/x`). Service links (`KUBERNETES_SERVICE_HOST`, ...) are not
//! added.

use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;

/// The data of a Secret or ConfigMap, decoded.
pub type Data = BTreeMap<String, String>;

/// Where the kubelet reads the objects an env refers to (the API, through
/// the node's identity).
pub trait Sources: Sync {
    /// A Secret's data (`None`: it does not exist); `Err` for any other
    /// failure, with its message.
    fn secret(
        &self,
        ns: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<Data>, String>> + Send;
    /// A ConfigMap's data (`None`: it does not exist).
    fn config_map(
        &self,
        ns: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<Data>, String>> + Send;
}

/// Facts about the running pod the downward API needs.
#[derive(Debug, Clone)]
pub struct Facts {
    /// The pod's IP.
    pub pod_ip: String,
    /// The node's IP.
    pub host_ip: String,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Secret,
    ConfigMap,
}

impl Kind {
    fn word(self) -> &'static str {
        match self {
            Kind::Secret => "secret",
            Kind::ConfigMap => "configmap",
        }
    }
    fn title(self) -> &'static str {
        match self {
            Kind::Secret => "Secret",
            Kind::ConfigMap => "ConfigMap",
        }
    }
}

struct Cache<'a, S> {
    sources: &'a S,
    ns: &'a str,
    seen: HashMap<(Kind, String), Option<Data>>,
}

impl<S: Sources> Cache<'_, S> {
    async fn get(&mut self, kind: Kind, name: &str) -> Result<Option<&Data>, String> {
        let key = (kind, name.to_string());
        if !self.seen.contains_key(&key) {
            let got = match kind {
                Kind::Secret => self.sources.secret(self.ns, name).await?,
                Kind::ConfigMap => self.sources.config_map(self.ns, name).await?,
            };
            self.seen.insert(key.clone(), got);
        }
        Ok(self.seen.get(&key).and_then(Option::as_ref))
    }
}

fn not_found(kind: Kind, name: &str) -> String {
    format!("{} \"{name}\" not found", kind.word())
}

/// Expands `$(NAME)` from `vars`; `$$` is a literal `$`; a reference to an
/// unknown name stays as written (expansion.Expand).
pub fn expand(input: &str, vars: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let b = input.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'$' && i + 1 < b.len() {
            match b[i + 1] {
                b'$' => {
                    out.push('$');
                    i += 2;
                    continue;
                }
                b'(' => {
                    if let Some(end) = input[i + 2..].find(')') {
                        let name = &input[i + 2..i + 2 + end];
                        match vars.get(name) {
                            Some(v) => out.push_str(v),
                            None => out.push_str(&input[i..i + 3 + end]),
                        }
                        i += 3 + end;
                        continue;
                    }
                }
                _ => {}
            }
        }
        let ch = input[i..].chars().next().unwrap_or('\0');
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

/// `metadata.labels['key']` and `metadata.annotations['key']`.
fn subscript<'a>(path: &'a str, prefix: &str) -> Option<&'a str> {
    path.strip_prefix(prefix)?
        .strip_prefix("['")?
        .strip_suffix("']")
}

fn field_value(pod: &Value, path: &str, facts: &Facts) -> Result<String, String> {
    let s = |v: &Value| v.as_str().unwrap_or("").to_string();
    let map_text = |m: &Value| {
        let mut lines: Vec<String> = m
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| format!("{k}=\"{}\"", v.as_str().unwrap_or("")))
            .collect();
        lines.sort();
        lines.join("\n")
    };
    Ok(match path {
        "metadata.name" => s(&pod["metadata"]["name"]),
        "metadata.namespace" => s(&pod["metadata"]["namespace"]),
        "metadata.uid" => s(&pod["metadata"]["uid"]),
        "metadata.labels" => map_text(&pod["metadata"]["labels"]),
        "metadata.annotations" => map_text(&pod["metadata"]["annotations"]),
        "spec.nodeName" => s(&pod["spec"]["nodeName"]),
        "spec.serviceAccountName" => s(&pod["spec"]["serviceAccountName"]),
        "status.hostIP" | "status.hostIPs" => facts.host_ip.clone(),
        "status.podIP" | "status.podIPs" => facts.pod_ip.clone(),
        _ => {
            if let Some(k) = subscript(path, "metadata.labels") {
                s(&pod["metadata"]["labels"][k])
            } else if let Some(k) = subscript(path, "metadata.annotations") {
                s(&pod["metadata"]["annotations"][k])
            } else {
                return Err(format!("unsupported fieldPath: {path}"));
            }
        }
    })
}

/// `resourceFieldRef` of the container's own resources, in the divisor's
/// units (1 by default; cpu rounds up to whole units, as
/// `ExtractContainerResourceValue` does). Only plain quantities are read.
fn resource_value(container: &Value, r: &Value) -> Result<String, String> {
    let resource = r["resource"].as_str().unwrap_or("");
    let (section, name) = match resource.split_once('.') {
        Some((s, n)) => (s, n),
        None => return Err(format!("unsupported container resource : {resource}")),
    };
    let q = container["resources"][section][name]
        .as_str()
        .unwrap_or("0");
    let value = parse_quantity(q).ok_or_else(|| format!("invalid quantity {q:?}"))?;
    let divisor = r["divisor"]
        .as_str()
        .and_then(parse_quantity)
        .filter(|d| *d > 0.0)
        .unwrap_or(1.0);
    Ok(format!("{}", (value / divisor).ceil() as i64))
}

pub(crate) fn parse_quantity(q: &str) -> Option<f64> {
    let units: [(&str, f64); 13] = [
        ("Ki", 1024.0),
        ("Mi", 1024f64.powi(2)),
        ("Gi", 1024f64.powi(3)),
        ("Ti", 1024f64.powi(4)),
        ("Pi", 1024f64.powi(5)),
        ("Ei", 1024f64.powi(6)),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
        ("E", 1e18),
    ];
    for (suffix, mult) in units {
        if let Some(n) = q.strip_suffix(suffix) {
            return n.parse::<f64>().ok().map(|v| v * mult);
        }
    }
    q.parse().ok()
}

/// The environment of `container` in `pod`, in the order the kubelet
/// builds it (a later source overrides an earlier one).
pub async fn resolve<S: Sources>(
    pod: &Value,
    container: &Value,
    facts: &Facts,
    sources: &S,
) -> Result<BTreeMap<String, String>, String> {
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or("");
    let mut cache = Cache {
        sources,
        ns,
        seen: HashMap::new(),
    };
    let mut env = BTreeMap::new();
    for from in container["envFrom"].as_array().into_iter().flatten() {
        let (kind, r) = if from["configMapRef"].is_object() {
            (Kind::ConfigMap, &from["configMapRef"])
        } else if from["secretRef"].is_object() {
            (Kind::Secret, &from["secretRef"])
        } else {
            continue;
        };
        let name = r["name"].as_str().unwrap_or("");
        let optional = r["optional"] == true;
        let prefix = from["prefix"].as_str().unwrap_or("");
        match cache.get(kind, name).await? {
            Some(data) => {
                for (k, v) in data {
                    env.insert(format!("{prefix}{k}"), v.clone());
                }
            }
            None if optional => {}
            None => return Err(not_found(kind, name)),
        }
    }
    for e in container["env"].as_array().into_iter().flatten() {
        let Some(name) = e["name"].as_str() else {
            continue;
        };
        let literal = e["value"].as_str().unwrap_or("");
        let from = &e["valueFrom"];
        let value = if !literal.is_empty() || !from.is_object() {
            expand(literal, &env)
        } else if let Some(path) = from["fieldRef"]["fieldPath"].as_str() {
            field_value(pod, path, facts)?
        } else if from["resourceFieldRef"].is_object() {
            resource_value(container, &from["resourceFieldRef"])?
        } else {
            let (kind, r) = if from["configMapKeyRef"].is_object() {
                (Kind::ConfigMap, &from["configMapKeyRef"])
            } else if from["secretKeyRef"].is_object() {
                (Kind::Secret, &from["secretKeyRef"])
            } else {
                continue;
            };
            let source = r["name"].as_str().unwrap_or("");
            let key = r["key"].as_str().unwrap_or("");
            let optional = r["optional"] == true;
            match cache.get(kind, source).await? {
                Some(data) => match data.get(key) {
                    Some(v) => v.clone(),
                    None if optional => continue,
                    None => {
                        return Err(format!(
                            "couldn't find key {key} in {} {ns}/{source}",
                            kind.title()
                        ));
                    }
                },
                None if optional => continue,
                None => return Err(not_found(kind, source)),
            }
        };
        env.insert(name.to_string(), value);
    }
    Ok(env)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    struct Fixed;

    impl Sources for Fixed {
        async fn secret(&self, _ns: &str, name: &str) -> Result<Option<Data>, String> {
            Ok((name == "s").then(|| {
                BTreeMap::from([
                    ("KEY".to_string(), "hush".to_string()),
                    ("A".into(), "from-secret".into()),
                ])
            }))
        }
        async fn config_map(&self, _ns: &str, name: &str) -> Result<Option<Data>, String> {
            Ok((name == "cm").then(|| BTreeMap::from([("mode".to_string(), "fast".to_string())])))
        }
    }

    fn facts() -> Facts {
        Facts {
            pod_ip: "10.244.0.9".into(),
            host_ip: "127.0.0.1".into(),
        }
    }

    fn pod() -> Value {
        json!({"metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": {"app": "x"}},
            "spec": {"nodeName": "n1", "serviceAccountName": "default"}})
    }

    fn block<F: Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn sources_in_kubelet_order() {
        let c = json!({"name": "c",
        "resources": {"limits": {"memory": "64Mi"}},
        "envFrom": [{"secretRef": {"name": "s"}, "prefix": "S_"}, {"configMapRef": {"name": "cm"}}],
        "env": [
            {"name": "A", "value": "literal"},
            {"name": "B", "value": "$(A)-$(mode)-$(NOPE)-$$(A)"},
            {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
            {"name": "K", "valueFrom": {"secretKeyRef": {"name": "s", "key": "KEY"}}},
            {"name": "M", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "mode"}}},
            {"name": "O", "valueFrom": {"secretKeyRef": {"name": "gone", "key": "x", "optional": true}}},
            {"name": "EMPTY", "value": ""}
        ]});
        let env = block(resolve(&pod(), &c, &facts(), &Fixed)).unwrap();
        assert_eq!(env["S_KEY"], "hush");
        assert_eq!(env["mode"], "fast");
        assert_eq!(env["A"], "literal");
        assert_eq!(env["B"], "literal-fast-$(NOPE)-$(A)");
        assert_eq!(
            (env["NAME"].as_str(), env["NS"].as_str(), env["IP"].as_str()),
            ("p", "ns", "10.244.0.9")
        );
        assert_eq!(env["APP"], "x");
        assert_eq!(env["MEM"], "64");
        assert_eq!((env["K"].as_str(), env["M"].as_str()), ("hush", "fast"));
        assert!(!env.contains_key("O"));
        assert_eq!(env["EMPTY"], "");
    }

    #[test]
    fn missing_sources_are_the_kubelets_errors() {
        let c = json!({"name": "c", "envFrom": [{"secretRef": {"name": "gone"}}]});
        assert_eq!(
            block(resolve(&pod(), &c, &facts(), &Fixed)).unwrap_err(),
            "secret \"gone\" not found"
        );
        let c = json!({"name": "c", "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "s", "key": "nokey"}}}]});
        assert_eq!(
            block(resolve(&pod(), &c, &facts(), &Fixed)).unwrap_err(),
            "couldn't find key nokey in Secret ns/s"
        );
        let c = json!({"name": "c", "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "gone", "key": "k"}}}]});
        assert_eq!(
            block(resolve(&pod(), &c, &facts(), &Fixed)).unwrap_err(),
            "configmap \"gone\" not found"
        );
        let c =
            json!({"name": "c", "envFrom": [{"secretRef": {"name": "gone", "optional": true}}]});
        assert!(
            block(resolve(&pod(), &c, &facts(), &Fixed))
                .unwrap()
                .is_empty()
        );
    }
}
