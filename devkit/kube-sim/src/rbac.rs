//! RBAC mode: a Role manifest bound to one bearer token. Calls made with
//! that token are checked against the Role's rules; other tokens are not
//! restricted.

use serde::Deserialize;
use std::path::Path;

/// One rule of a Role.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRule {
    /// API groups ("" = core, "*" = all).
    #[serde(default)]
    pub api_groups: Vec<String>,
    /// Resources, with subresources as `pods/log` ("*" = all).
    #[serde(default)]
    pub resources: Vec<String>,
    /// Verbs ("*" = all).
    #[serde(default)]
    pub verbs: Vec<String>,
    /// When not empty, only these object names.
    #[serde(default)]
    pub resource_names: Vec<String>,
    /// Where the rule applies (from the Role's kind and namespace).
    #[serde(skip)]
    pub scope: RuleScope,
}

/// Where a rule applies.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum RuleScope {
    /// A Role without `metadata.namespace`: every namespace (as if created
    /// in whichever namespace is asked about), never cluster-wide calls.
    #[default]
    AnyNamespace,
    /// A Role in this namespace only.
    Namespace(String),
    /// A ClusterRole: every namespace and cluster-wide (all-namespaces) calls.
    Cluster,
}

#[derive(Debug, Deserialize)]
struct RoleDoc {
    #[serde(default)]
    kind: String,
    #[serde(default)]
    metadata: RoleMeta,
    #[serde(default)]
    rules: Vec<PolicyRule>,
}

#[derive(Debug, Default, Deserialize)]
struct RoleMeta {
    #[serde(default)]
    namespace: Option<String>,
}

/// The request attributes RBAC decides on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attributes<'a> {
    /// get, list, watch, create, update, patch, delete, deletecollection.
    pub verb: &'a str,
    /// API group ("" = core).
    pub group: &'a str,
    /// Resource, e.g. `pods`.
    pub resource: &'a str,
    /// Subresource, e.g. `log`.
    pub subresource: Option<&'a str>,
    /// Object name, for named calls.
    pub name: Option<&'a str>,
    /// Namespace ("" for a cluster-wide, all-namespaces call).
    pub namespace: &'a str,
}

/// A Role bound to a token.
#[derive(Debug, Clone)]
pub struct Rbac {
    /// The bearer token the Role applies to.
    pub token: String,
    /// The Role's rules (of every Role document in the manifest).
    pub rules: Vec<PolicyRule>,
}

/// Why a Role manifest could not be used.
#[derive(Debug, thiserror::Error)]
pub enum RbacError {
    /// The file could not be read.
    #[error("reading {path}")]
    Read {
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A document is not valid YAML for a Role.
    #[error("parsing the Role manifest")]
    Parse(#[source] Box<serde_saphyr::Error>),
    /// No `kind: Role` document in the manifest.
    #[error("the manifest holds no Role")]
    NoRole,
}

fn allows(list: &[String], value: &str) -> bool {
    list.iter().any(|x| x == "*" || x == value)
}

impl Rbac {
    /// Parses a manifest (one or more YAML documents); every `kind: Role` (or
    /// `ClusterRole`) document's rules are taken. A Role's rules apply in its
    /// `metadata.namespace` only (in every namespace when it names none); a
    /// ClusterRole's apply everywhere. Other documents are ignored.
    pub fn parse(yaml: &str, token: &str) -> Result<Self, RbacError> {
        let mut rules = Vec::new();
        let mut found = false;
        // Empty and null documents are skipped.
        let docs: Vec<RoleDoc> =
            serde_saphyr::from_multiple(yaml).map_err(|e| RbacError::Parse(Box::new(e)))?;
        for role in docs {
            let scope = match (role.kind.as_str(), role.metadata.namespace) {
                ("ClusterRole", _) => RuleScope::Cluster,
                ("Role", Some(ns)) if !ns.is_empty() => RuleScope::Namespace(ns),
                ("Role", _) => RuleScope::AnyNamespace,
                _ => continue,
            };
            found = true;
            rules.extend(role.rules.into_iter().map(|r| PolicyRule {
                scope: scope.clone(),
                ..r
            }));
        }
        if !found {
            return Err(RbacError::NoRole);
        }
        Ok(Rbac {
            token: token.to_string(),
            rules,
        })
    }

    /// Reads and parses a manifest file.
    pub fn load(path: &Path, token: &str) -> Result<Self, RbacError> {
        let text = std::fs::read_to_string(path).map_err(|source| RbacError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text, token)
    }

    /// Whether the Role grants the call.
    pub fn allows(&self, a: &Attributes<'_>) -> bool {
        let resource = match a.subresource {
            Some(s) => format!("{}/{s}", a.resource),
            None => a.resource.to_string(),
        };
        self.rules.iter().any(|r| {
            let in_scope = match &r.scope {
                RuleScope::Cluster => true,
                RuleScope::AnyNamespace => !a.namespace.is_empty(),
                RuleScope::Namespace(ns) => ns == a.namespace,
            };
            in_scope
                && allows(&r.verbs, a.verb)
                && allows(&r.api_groups, a.group)
                && (allows(&r.resources, &resource)
                    || (a.subresource.is_some()
                        && r.resources
                            .iter()
                            .any(|x| x == &format!("{}/*", a.resource))))
                && (r.resource_names.is_empty()
                    || a.name
                        .is_some_and(|n| r.resource_names.iter().any(|x| x == n)))
        })
    }

    /// The message a real API server gives when refusing.
    pub fn forbidden_message(a: &Attributes<'_>) -> String {
        let qualified = if a.group.is_empty() {
            a.resource.to_string()
        } else {
            format!("{}.{}", a.resource, a.group)
        };
        let what = match a.name {
            Some(n) => format!("{qualified} \"{n}\""),
            None => qualified,
        };
        let res = match a.subresource {
            Some(s) => format!("resource \"{}/{s}\"", a.resource),
            None => format!("resource \"{}\"", a.resource),
        };
        format!(
            "{what} is forbidden: User \"system:serviceaccount:{ns}:tcab-dispatcher\" cannot {verb} {res} in API group \"{g}\" in the namespace \"{ns}\"",
            ns = a.namespace,
            verb = a.verb,
            g = a.group
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROLE: &str = r#"
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: x}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: tcab-dispatcher}
rules:
  - apiGroups: ["batch"]
    resources: ["jobs"]
    verbs: ["create", "get", "list", "watch", "delete"]
  - apiGroups: [""]
    resources: ["pods"]
    verbs: ["get", "list", "delete"]
  - apiGroups: [""]
    resources: ["pods/log"]
    verbs: ["get"]
"#;

    fn a<'x>(
        verb: &'x str,
        group: &'x str,
        resource: &'x str,
        sub: Option<&'x str>,
    ) -> Attributes<'x> {
        Attributes {
            verb,
            group,
            resource,
            subresource: sub,
            name: None,
            namespace: "ns",
        }
    }

    #[test]
    fn roles_are_namespaced() {
        let yaml = "kind: Role\nmetadata: {namespace: tcab}\nrules: [{apiGroups: [''], resources: [pods], verbs: [list]}]\n---\n\
kind: Role\nmetadata: {namespace: sandboxes}\nrules: [{apiGroups: [''], resources: [pods], verbs: [delete]}]\n---\n\
kind: ClusterRole\nrules: [{apiGroups: [batch], resources: ['*'], verbs: [get]}]\n";
        let r = Rbac::parse(yaml, "t").unwrap();
        let at = |verb, group, resource, ns| Attributes {
            verb,
            group,
            resource,
            subresource: None,
            name: None,
            namespace: ns,
        };
        assert!(r.allows(&at("list", "", "pods", "tcab")));
        assert!(!r.allows(&at("list", "", "pods", "sandboxes")));
        assert!(r.allows(&at("delete", "", "pods", "sandboxes")));
        assert!(!r.allows(&at("delete", "", "pods", "tcab")));
        assert!(r.allows(&at("get", "batch", "jobs", "")));
        assert!(r.allows(&at("get", "batch", "jobs", "anywhere")));
    }

    #[test]
    fn grants_exactly_the_rules() {
        let r = Rbac::parse(ROLE, "t").unwrap();
        assert!(r.allows(&a("create", "batch", "jobs", None)));
        assert!(r.allows(&a("get", "", "pods", Some("log"))));
        assert!(r.allows(&a("delete", "", "pods", None)));
        assert!(!r.allows(&a("create", "", "pods", None)));
        assert!(!r.allows(&a("watch", "", "pods", None)));
        assert!(!r.allows(&a("deletecollection", "", "pods", None)));
        assert!(!r.allows(&a("update", "batch", "jobs", None)));
        assert!(!r.allows(&a("get", "batch", "jobs", Some("status"))));
        assert!(!r.allows(&a("create", "", "jobs", None)));
        assert!(Rbac::parse("kind: ServiceAccount\n", "t").is_err());
        let everywhere = Attributes {
            namespace: "",
            ..a("list", "batch", "jobs", None)
        };
        assert!(
            !r.allows(&everywhere),
            "a Role never grants a cluster-wide call"
        );
        let msg = Rbac::forbidden_message(&a("create", "", "pods", None));
        assert!(msg.contains("cannot create resource \"pods\""));
    }
}
