//! Unknown and mistyped fields in written objects, answered as upstream's
//! create, update and patch handlers do (see [`crate::schema`]).

use super::params::FieldValidation;
use crate::schema::{self, FieldPath};
use crate::status::ApiError;
use crate::store::Kind;
use crate::validation::{self, BadValue, FieldError};
use serde_json::Value;

fn cannot_handle(kind: Kind, why: &str) -> ApiError {
    ApiError::bad_request(format!(
        "{k} in version \"v1\" cannot be handled as a {k}: {why}",
        k = kind.kind()
    ))
}

fn strict_error(paths: &[FieldPath]) -> String {
    let list: Vec<String> = paths
        .iter()
        .map(|p| format!("unknown field \"{p}\""))
        .collect();
    format!("strict decoding error: {}", list.join(", "))
}

fn drop_fields(obj: &mut Value, paths: &[FieldPath], fv: FieldValidation) -> Vec<String> {
    for p in paths {
        p.remove_from(obj);
    }
    match fv {
        FieldValidation::Warn => paths
            .iter()
            .map(|p| format!("unknown field \"{p}\""))
            .collect(),
        _ => Vec::new(),
    }
}

/// A create or update body: a mistyped field is `400`; unknown fields fail
/// the request (`Strict`, `400`) or are removed from `obj` (with a warning
/// each for `Warn`). Returns the warnings.
pub(super) fn check_body(
    kind: Kind,
    obj: &mut Value,
    fv: FieldValidation,
) -> Result<Vec<String>, ApiError> {
    let unknown = schema::unknown_fields(kind, obj).map_err(|e| cannot_handle(kind, &e))?;
    if unknown.is_empty() {
        return Ok(Vec::new());
    }
    if fv == FieldValidation::Strict {
        return Err(cannot_handle(kind, &strict_error(&unknown)));
    }
    Ok(drop_fields(obj, &unknown, fv))
}

fn patch_invalid(next: &Value, why: String) -> ApiError {
    validation::invalid(
        "",
        "",
        "",
        &[FieldError::invalid(
            "patch",
            BadValue::Str(next.to_string()),
            why,
        )],
    )
}

/// A patched object: a mistyped field is `422` on `patch`; unknown fields
/// the patch brought fail the request (`Strict`, `422` on `patch`) or are
/// removed from `next` (with a warning each for `Warn`).
pub(super) fn check_patched(
    kind: Kind,
    patch: &Value,
    next: &mut Value,
    fv: FieldValidation,
) -> Result<Vec<String>, ApiError> {
    let unknown = schema::unknown_fields(kind, next).map_err(|e| patch_invalid(next, e))?;
    // A stored object never holds unknown fields; only the patch can bring them.
    let unknown: Vec<FieldPath> = unknown
        .into_iter()
        .filter(|p| p.present_in(patch))
        .collect();
    if unknown.is_empty() {
        return Ok(Vec::new());
    }
    if fv == FieldValidation::Strict {
        return Err(patch_invalid(next, strict_error(&unknown)));
    }
    Ok(drop_fields(next, &unknown, fv))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod() -> Value {
        json!({"metadata": {"name": "p"}, "spec": {"foo": 1, "containers": [{"name": "c", "image": "i", "bar": true}]}})
    }

    #[test]
    fn create_bodies() {
        let mut p = pod();
        let w = check_body(Kind::Pod, &mut p, FieldValidation::Warn).unwrap();
        assert_eq!(
            w,
            [
                "unknown field \"spec.containers[0].bar\"",
                "unknown field \"spec.foo\""
            ]
        );
        assert!(p["spec"].get("foo").is_none());
        let mut p = pod();
        assert!(
            check_body(Kind::Pod, &mut p, FieldValidation::Ignore)
                .unwrap()
                .is_empty()
        );
        assert!(p["spec"].get("foo").is_none());
        let e = check_body(Kind::Pod, &mut pod(), FieldValidation::Strict).unwrap_err();
        assert_eq!(e.code, 400);
        assert_eq!(
            e.message,
            "Pod in version \"v1\" cannot be handled as a Pod: strict decoding error: unknown field \"spec.containers[0].bar\", unknown field \"spec.foo\""
        );
        let e = check_body(
            Kind::Job,
            &mut json!({"spec": {"parallelism": "two"}}),
            FieldValidation::Ignore,
        )
        .unwrap_err();
        assert_eq!(e.code, 400);
        assert!(
            e.message.starts_with(
                "Job in version \"v1\" cannot be handled as a Job: json: spec.parallelism"
            ),
            "{}",
            e.message
        );
    }

    #[test]
    fn patched_objects() {
        let patch = json!({"spec": {"bogus": 1}});
        let mut next = json!({"metadata": {"name": "j"}, "spec": {"bogus": 1, "template": {}}});
        let e = check_patched(
            Kind::Job,
            &patch,
            &mut next.clone(),
            FieldValidation::Strict,
        )
        .unwrap_err();
        assert_eq!(e.code, 422);
        assert_eq!(e.to_status()["details"]["causes"][0]["field"], "patch");
        assert!(
            e.message
                .starts_with(" \"\" is invalid: patch: Invalid value: \"{"),
            "{}",
            e.message
        );
        assert!(
            e.message
                .ends_with("strict decoding error: unknown field \"spec.bogus\""),
            "{}",
            e.message
        );
        let w = check_patched(Kind::Job, &patch, &mut next, FieldValidation::Warn).unwrap();
        assert_eq!(w, ["unknown field \"spec.bogus\""]);
        assert!(next["spec"].get("bogus").is_none());
    }
}
