//! The typed schema of Jobs and Pods, as the API server's decoder knows it:
//! a body is decoded into the k8s-openapi types (Kubernetes 1.37 API, the
//! `latest` feature), and every field the types do not know is an unknown
//! field; a value of the wrong type is a decoding error.
//!
//! Upstream: the strict decoding of
//! `staging/src/k8s.io/apiserver/pkg/endpoints/handlers/{create,update,patch}.go`:
//! with `fieldValidation=Strict` unknown fields fail the request, with `Warn`
//! (the default) each is dropped and named in a `Warning` header, with
//! `Ignore` they are dropped silently. Dropped fields are removed from the
//! JSON before anything is stored. Duplicate fields in the JSON are not
//! detected (the JSON parser keeps the last).

use crate::quantity;
use crate::store::Kind;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;
use std::fmt;

/// One step of a field path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seg {
    /// An object key.
    Key(String),
    /// A list index.
    Index(usize),
}

/// A field path, shown as upstream does: `spec.containers[0].foo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldPath(pub Vec<Seg>);

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, s) in self.0.iter().enumerate() {
            match s {
                Seg::Key(k) if i == 0 => write!(f, "{k}")?,
                Seg::Key(k) => write!(f, ".{k}")?,
                Seg::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}

impl FieldPath {
    /// Whether the path exists in `v`.
    pub fn present_in(&self, v: &Value) -> bool {
        let mut cur = v;
        for s in &self.0 {
            cur = match (s, cur) {
                (Seg::Key(k), Value::Object(m)) => match m.get(k) {
                    Some(x) => x,
                    None => return false,
                },
                (Seg::Index(i), Value::Array(a)) => match a.get(*i) {
                    Some(x) => x,
                    None => return false,
                },
                _ => return false,
            };
        }
        true
    }

    /// Removes the field at the path from `v` (nothing when absent).
    pub fn remove_from(&self, v: &mut Value) {
        let Some((last, parents)) = self.0.split_last() else {
            return;
        };
        let mut cur = v;
        for s in parents {
            cur = match (s, cur) {
                (Seg::Key(k), Value::Object(m)) => match m.get_mut(k) {
                    Some(x) => x,
                    None => return,
                },
                (Seg::Index(i), Value::Array(a)) => match a.get_mut(*i) {
                    Some(x) => x,
                    None => return,
                },
                _ => return,
            };
        }
        if let (Seg::Key(k), Value::Object(m)) = (last, cur) {
            m.remove(k);
        }
    }
}

fn to_field_path(p: &serde_ignored::Path<'_>, out: &mut Vec<Seg>) {
    use serde_ignored::Path;
    match p {
        Path::Root => {}
        Path::Seq { parent, index } => {
            to_field_path(parent, out);
            out.push(Seg::Index(*index));
        }
        Path::Map { parent, key } => {
            to_field_path(parent, out);
            out.push(Seg::Key(key.clone()));
        }
        Path::Some { parent }
        | Path::NewtypeStruct { parent }
        | Path::NewtypeVariant { parent } => to_field_path(parent, out),
    }
}

fn decode<T: serde::de::DeserializeOwned>(obj: &Value) -> Result<Vec<FieldPath>, String> {
    let mut unknown = Vec::new();
    let mut track = serde_path_to_error::Track::new();
    let de = serde_path_to_error::Deserializer::new(obj, &mut track);
    let res: Result<T, _> = serde_ignored::deserialize(de, |p| {
        let mut segs = Vec::new();
        to_field_path(&p, &mut segs);
        unknown.push(FieldPath(segs));
    });
    match res {
        Ok(_) => Ok(unknown),
        Err(e) => {
            let path = track.path().to_string();
            Err(if path.is_empty() || path == "." {
                format!("json: {e}")
            } else {
                format!("json: {path}: {e}")
            })
        }
    }
}

/// Every quantity in container resources parses (the decoder parses them).
fn check_quantities(kind: Kind, obj: &Value) -> Result<(), String> {
    let spec = match kind {
        Kind::Job => &obj["spec"]["template"]["spec"],
        Kind::Pod => &obj["spec"],
        _ => return Ok(()),
    };
    for key in ["containers", "initContainers"] {
        for c in spec[key].as_array().into_iter().flatten() {
            for list in ["requests", "limits"] {
                for v in c["resources"][list]
                    .as_object()
                    .into_iter()
                    .flat_map(|m| m.values())
                {
                    let s = match v {
                        Value::String(s) => s.clone(),
                        Value::Number(n) => n.to_string(),
                        _ => continue,
                    };
                    quantity::parse(&s).map_err(|e| e.to_string())?;
                }
            }
        }
    }
    Ok(())
}

/// Decodes `obj` as `kind`: the unknown field paths, or the decoding
/// error's message.
pub fn unknown_fields(kind: Kind, obj: &Value) -> Result<Vec<FieldPath>, String> {
    let unknown = match kind {
        Kind::Job => decode::<Job>(obj)?,
        Kind::Pod => decode::<Pod>(obj)?,
        Kind::Node => decode::<k8s_openapi::api::core::v1::Node>(obj)?,
        Kind::Secret => decode::<k8s_openapi::api::core::v1::Secret>(obj)?,
        Kind::ServiceAccount => decode::<k8s_openapi::api::core::v1::ServiceAccount>(obj)?,
        Kind::Event => decode::<k8s_openapi::api::core::v1::Event>(obj)?,
        Kind::EventV1 => decode::<k8s_openapi::api::events::v1::Event>(obj)?,
    };
    check_quantities(kind, obj)?;
    Ok(unknown)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn finds_unknown_fields_with_paths() {
        let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "a", "bogus": 1},
            "spec": {"foo": null, "template": {"spec": {"containers": [{"name": "c", "image": "i", "imagee": "x",
                "resources": {"requests": {"cpu": 1}}}]}}}});
        let u: Vec<String> = unknown_fields(Kind::Job, &job)
            .unwrap()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            u,
            [
                "metadata.bogus",
                "spec.foo",
                "spec.template.spec.containers[0].imagee"
            ]
        );
        let mut j = job.clone();
        for p in unknown_fields(Kind::Job, &job).unwrap() {
            assert!(p.present_in(&j));
            p.remove_from(&mut j);
            assert!(!p.present_in(&j));
        }
        assert!(unknown_fields(Kind::Job, &j).unwrap().is_empty());
        assert_eq!(j["spec"]["template"]["spec"]["containers"][0]["image"], "i");
    }

    #[test]
    fn type_and_quantity_errors() {
        let e = unknown_fields(Kind::Job, &json!({"spec": {"backoffLimit": "x"}})).unwrap_err();
        assert!(
            e.starts_with("json: spec.backoffLimit: invalid type"),
            "{e}"
        );
        let e = unknown_fields(
            Kind::Pod,
            &json!({"spec": {"containers": [
            {"name": "c", "resources": {"limits": {"cpu": "1 core"}}}]}}),
        )
        .unwrap_err();
        assert!(
            e.starts_with("quantities must match the regular expression"),
            "{e}"
        );
        assert!(unknown_fields(Kind::Pod, &json!({"spec": {"containers": null}})).is_ok());
    }
}
