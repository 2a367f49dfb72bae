//! Label and field selectors, parsed the way the API server parses them.
//!
//! A label selector is held and matched as kube-rs's typed
//! [`Selector`] of [`Expression`]s; kube-rs has no parser for the query
//! string form, so parsing (and its 400 errors) stays here. Field selectors
//! have no kube-rs counterpart and are entirely ours.

use kube::core::{Expression, Selector, SelectorExt};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// A parsed label selector: all expressions must hold. Empty matches all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector(pub Selector);

/// Why a selector did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unable to parse requirement: {0}")]
pub struct SelectorError(pub String);

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 317
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn valid_value(v: &str) -> bool {
    v.len() <= 63
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Splits on commas that are not inside parentheses.
fn split_top(s: &str) -> Result<Vec<&str>, SelectorError> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth < 0 {
                    return Err(SelectorError(format!("unbalanced ')' in {s:?}")));
                }
            }
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(SelectorError(format!("unbalanced '(' in {s:?}")));
    }
    parts.push(&s[start..]);
    Ok(parts)
}

fn parse_set(rest: &str, whole: &str) -> Result<BTreeSet<String>, SelectorError> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| SelectorError(format!("{whole:?}: expected '(' values ')'")))?;
    let mut values = BTreeSet::new();
    for v in inner.split(',') {
        let v = v.trim();
        if !valid_value(v) {
            return Err(SelectorError(format!("{whole:?}: invalid value {v:?}")));
        }
        values.insert(v.to_string());
    }
    Ok(values)
}

fn parse_requirement(part: &str) -> Result<Expression, SelectorError> {
    let p = part.trim();
    let err = |why: &str| SelectorError(format!("{p:?}: {why}"));
    if let Some(k) = p.strip_prefix('!') {
        let k = k.trim();
        return if valid_key(k) {
            Ok(Expression::DoesNotExist(k.into()))
        } else {
            Err(err("invalid key"))
        };
    }
    for (op, neg) in [("!=", true), ("==", false), ("=", false)] {
        if let Some((k, v)) = p.split_once(op) {
            let (k, v) = (k.trim(), v.trim());
            if !valid_key(k) {
                return Err(err("invalid key"));
            }
            if !valid_value(v) {
                return Err(err("invalid value"));
            }
            return Ok(if neg {
                Expression::NotEqual(k.into(), v.into())
            } else {
                Expression::Equal(k.into(), v.into())
            });
        }
    }
    // `key in (..)`, `key notin (..)`, or a bare `key`.
    let mut words = p.splitn(2, char::is_whitespace);
    let key = words.next().unwrap_or("").trim();
    let rest = words.next().unwrap_or("").trim();
    if rest.is_empty() {
        if let Some((k, r)) = key.split_once('(') {
            let _ = (k, r);
            return Err(err("expected an operator"));
        }
        return if valid_key(key) {
            Ok(Expression::Exists(key.into()))
        } else {
            Err(err("invalid key"))
        };
    }
    if !valid_key(key) {
        return Err(err("invalid key"));
    }
    if let Some(r) = rest.strip_prefix("notin") {
        return Ok(Expression::NotIn(key.into(), parse_set(r, p)?));
    }
    if let Some(r) = rest.strip_prefix("in") {
        return Ok(Expression::In(key.into(), parse_set(r, p)?));
    }
    Err(err("unknown operator"))
}

impl LabelSelector {
    /// Parses a `labelSelector` query value.
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        if s.trim().is_empty() {
            return Ok(LabelSelector::default());
        }
        split_top(s)?
            .into_iter()
            .map(parse_requirement)
            .collect::<Result<Selector, _>>()
            .map(LabelSelector)
    }

    /// Builds an equality selector from a `matchLabels` map.
    pub fn from_map(labels: &BTreeMap<String, String>) -> Self {
        LabelSelector(labels.clone().into_iter().collect())
    }

    /// Whether it selects every object (no requirement).
    pub fn selects_all(&self) -> bool {
        self.0.selects_all()
    }

    /// Whether an object (its `metadata.labels`) satisfies the selector.
    pub fn matches(&self, obj: &Value) -> bool {
        if self.0.selects_all() {
            return true;
        }
        let labels: BTreeMap<String, String> = obj["metadata"]["labels"]
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
            .collect();
        self.0.matches(&labels)
    }
}

/// One `fieldSelector` term: a JSON path, expected value and polarity.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FieldTerm {
    path: Vec<&'static str>,
    value: String,
    equal: bool,
}

/// A parsed field selector (metadata.name, metadata.namespace, and for pods
/// status.phase and spec.nodeName).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector(Vec<FieldTerm>);

impl FieldSelector {
    /// Parses a `fieldSelector` query value for the given resource.
    pub fn parse(s: &str, resource: &str) -> Result<Self, SelectorError> {
        let mut terms = Vec::new();
        if s.trim().is_empty() {
            return Ok(FieldSelector(terms));
        }
        for part in s.split(',') {
            let part = part.trim();
            let (field, value, equal) = if let Some((f, v)) = part.split_once("!=") {
                (f, v, false)
            } else if let Some((f, v)) = part.split_once("==") {
                (f, v, true)
            } else if let Some((f, v)) = part.split_once('=') {
                (f, v, true)
            } else {
                return Err(SelectorError(format!(
                    "invalid selector: {part:?}; expected field=value"
                )));
            };
            let path: Vec<&'static str> = match (field.trim(), resource) {
                ("metadata.name", _) => vec!["metadata", "name"],
                ("metadata.namespace", _) => vec!["metadata", "namespace"],
                ("status.phase", "pods") => vec!["status", "phase"],
                ("spec.nodeName", "pods") => vec!["spec", "nodeName"],
                ("spec.restartPolicy", "pods") => vec!["spec", "restartPolicy"],
                ("spec.schedulerName", "pods") => vec!["spec", "schedulerName"],
                ("spec.serviceAccountName", "pods") => vec!["spec", "serviceAccountName"],
                ("status.podIP", "pods") => vec!["status", "podIP"],
                ("status.successful", "jobs") => vec!["status", "succeeded"],
                ("spec.unschedulable", "nodes") => vec!["spec", "unschedulable"],
                ("type", "secrets") => vec!["type"],
                ("involvedObject.kind", "events") => vec!["involvedObject", "kind"],
                ("involvedObject.namespace", "events") => vec!["involvedObject", "namespace"],
                ("involvedObject.name", "events") => vec!["involvedObject", "name"],
                ("involvedObject.uid", "events") => vec!["involvedObject", "uid"],
                ("involvedObject.apiVersion", "events") => vec!["involvedObject", "apiVersion"],
                ("involvedObject.resourceVersion", "events") => {
                    vec!["involvedObject", "resourceVersion"]
                }
                ("involvedObject.fieldPath", "events") => vec!["involvedObject", "fieldPath"],
                ("reason", "events") => vec!["reason"],
                ("reportingComponent", "events") => vec!["reportingComponent"],
                ("source", "events") => vec!["source", "component"],
                ("type", "events") => vec!["type"],
                (other, _) => {
                    return Err(SelectorError(format!("field label not supported: {other}")));
                }
            };
            terms.push(FieldTerm {
                path,
                value: value.trim().to_string(),
                equal,
            });
        }
        Ok(FieldSelector(terms))
    }

    /// The single name this selector pins (`metadata.name=X`), if any.
    pub fn pinned_name(&self) -> Option<&str> {
        self.0
            .iter()
            .find(|t| t.equal && t.path == ["metadata", "name"])
            .map(|t| t.value.as_str())
    }

    /// Whether it selects every object (no term).
    pub fn selects_all(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether the object satisfies every term.
    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|t| {
            let mut v = obj;
            for p in &t.path {
                v = &v[*p];
            }
            let actual = match v {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            };
            (actual == t.value) == t.equal
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn obj(labels: &[(&str, &str)]) -> Value {
        let m: serde_json::Map<String, Value> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect();
        json!({"metadata": {"name": "a", "labels": m}})
    }

    #[test]
    fn every_operator() {
        let o = obj(&[
            ("app.kubernetes.io/managed-by", "tcab"),
            ("tcab.dev/job-kind", "run"),
        ]);
        let yes = [
            "",
            "app.kubernetes.io/managed-by=tcab",
            "app.kubernetes.io/managed-by==tcab",
            "tcab.dev/job-kind!=publish",
            "tcab.dev/job-kind in (run, publish)",
            "tcab.dev/job-kind notin (publish)",
            "tcab.dev/job-kind",
            "!tcab.dev/job-id",
            "missing!=x",
            "missing notin (x)",
            "app.kubernetes.io/managed-by=tcab,tcab.dev/job-kind in (run),!other",
        ];
        for s in yes {
            assert!(LabelSelector::parse(s).unwrap().matches(&o), "{s}");
        }
        let no = [
            "app.kubernetes.io/managed-by=x",
            "tcab.dev/job-kind in (publish)",
            "tcab.dev/job-kind notin (run,x)",
            "missing",
            "!tcab.dev/job-kind",
            "missing in (x)",
        ];
        for s in no {
            assert!(!LabelSelector::parse(s).unwrap().matches(&o), "{s}");
        }
    }

    #[test]
    fn parsed_selectors_are_kube_rs_selectors() {
        let s = LabelSelector::parse("a in (y, x), b!=c,!d, e==f").unwrap();
        assert_eq!(s.0.to_string(), "a in (x,y),b!=c,!d,e=f");
        let labels = BTreeMap::from([("app".to_string(), "x".to_string())]);
        let typed: Selector = k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
            match_labels: Some(labels.clone()),
            match_expressions: None,
        }
        .try_into()
        .unwrap();
        assert_eq!(LabelSelector::from_map(&labels).0, typed);
        assert!(LabelSelector::from_map(&labels).matches(&obj(&[("app", "x")])));
    }

    #[test]
    fn bad_selectors_are_errors() {
        for s in ["a in b", "a in (b", "=x", "a=b c", "a notin", "a)"] {
            assert!(LabelSelector::parse(s).is_err(), "{s}");
        }
    }

    #[test]
    fn field_selectors() {
        let o =
            json!({"metadata": {"name": "x", "namespace": "ns"}, "status": {"phase": "Running"}});
        let f = FieldSelector::parse("metadata.name=x", "pods").unwrap();
        assert!(f.matches(&o));
        assert_eq!(f.pinned_name(), Some("x"));
        assert!(
            !FieldSelector::parse("metadata.name!=x", "pods")
                .unwrap()
                .matches(&o)
        );
        assert!(
            FieldSelector::parse("status.phase==Running,metadata.namespace=ns", "pods")
                .unwrap()
                .matches(&o)
        );
        assert!(FieldSelector::parse("spec.foo=1", "pods").is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, rng_seed: proptest::test_runner::RngSeed::Fixed(4), ..ProptestConfig::default() })]
        #[test]
        fn equality_selectors_agree_with_a_map_lookup(
            labels in proptest::collection::btree_map("[a-c]", "[x-z]", 0..3),
            key in "[a-c]", value in "[x-z]",
        ) {
            let o = json!({"metadata": {"labels": labels}});
            let eq = LabelSelector::parse(&format!("{key}={value}")).unwrap().matches(&o);
            prop_assert_eq!(eq, labels.get(&key) == Some(&value));
            let ne = LabelSelector::parse(&format!("{key}!={value}")).unwrap().matches(&o);
            prop_assert_eq!(ne, !eq);
            let notin = LabelSelector::parse(&format!("{key} notin ({value})")).unwrap().matches(&o);
            prop_assert_eq!(notin, !eq);
            let exists = LabelSelector::parse(&key).unwrap().matches(&o);
            prop_assert_eq!(exists, labels.contains_key(&key));
        }
    }
}
