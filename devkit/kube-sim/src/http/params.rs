//! Request options as upstream decodes them: boolean query parameters,
//! `dryRun` and `fieldValidation` of writes, `DeleteOptions` (body or query)
//! with `preconditions`, the Eviction body, and `Warning` headers.
//!
//! Upstream: `staging/src/k8s.io/apimachinery/pkg/runtime/conversion.go`
//! (`Convert_Slice_string_To_bool`),
//! `staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/validation/validation.go`
//! (`ValidateCreateOptions`, `ValidateDeleteOptions`, `ValidateDryRun`,
//! `ValidateFieldValidation`: a bad value is a `422 Invalid` of the options
//! kind), `staging/src/k8s.io/apiserver/pkg/endpoints/handlers/delete.go`
//! (DeleteOptions from a non-empty body, else from the query),
//! `staging/src/k8s.io/apiserver/pkg/registry/rest/delete.go`
//! (`BeforeDelete`: preconditions checked first, a negative grace period
//! becomes 1), `pkg/registry/core/pod/storage/eviction.go`
//! (`propagateDryRun`) and `staging/src/k8s.io/apiserver/pkg/endpoints/filters/warning.go`
//! (`299 - "text"`).

use super::Query;
use crate::sim::Propagation;
use crate::status::ApiError;
use crate::store::Kind;
use crate::validation::{self, BadValue, FieldError, go_quote};
use axum::body::Bytes;
use axum::http::HeaderValue;
use axum::response::Response;
use serde_json::Value;

/// A boolean parameter's value: absent is false; present, anything but
/// `0` or (any case) `false` is true, an empty value included (shared with
/// the request-attribute parsing that tells a watch from a list).
pub use tcab_api_faults::request::parse_bool;

/// [`parse_bool`] of a query parameter.
pub(super) fn flag(q: &Query, key: &str) -> bool {
    parse_bool(q.get(key).map(String::as_str))
}

/// How unknown fields in a written object are treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldValidation {
    /// Dropped silently.
    Ignore,
    /// Dropped, each named in a `Warning` header (the default).
    Warn,
    /// The request fails.
    Strict,
}

fn options_invalid(kind: &str, errs: &[FieldError]) -> ApiError {
    validation::invalid("meta.k8s.io", kind, "", errs)
}

/// `ValidateDryRun`: only `All` is known.
fn dry_run_of(values: &[String], errs: &mut Vec<FieldError>) -> bool {
    if values.iter().any(|v| v != "All") {
        let rendered: Vec<String> = values.iter().map(|v| go_quote(v)).collect();
        errs.push(FieldError::not_supported(
            "dryRun",
            BadValue::Raw(format!("[]string{{{}}}", rendered.join(", "))),
            &["All"],
        ));
    }
    !values.is_empty()
}

/// `dryRun` and `fieldValidation` of a create, update or patch.
#[derive(Debug, Clone, Copy)]
pub(super) struct WriteOptions {
    pub dry_run: bool,
    pub field_validation: FieldValidation,
}

impl WriteOptions {
    /// Reads the query; `kind` names the options in errors (`CreateOptions`,
    /// `UpdateOptions`, `PatchOptions`).
    pub(super) fn from_query(q: &Query, kind: &str) -> Result<Self, ApiError> {
        let mut errs = Vec::new();
        let dry: Vec<String> = q.get("dryRun").cloned().into_iter().collect();
        let dry_run = dry_run_of(&dry, &mut errs);
        let field_validation = match q.get("fieldValidation").map(String::as_str) {
            None | Some("") | Some("Warn") => FieldValidation::Warn,
            Some("Ignore") => FieldValidation::Ignore,
            Some("Strict") => FieldValidation::Strict,
            Some(other) => {
                errs.push(FieldError::not_supported(
                    "fieldValidation",
                    BadValue::Str(other.to_string()),
                    &["", "Ignore", "Strict", "Warn"],
                ));
                FieldValidation::Warn
            }
        };
        if errs.is_empty() {
            Ok(WriteOptions {
                dry_run,
                field_validation,
            })
        } else {
            Err(options_invalid(kind, &errs))
        }
    }
}

/// `preconditions` of a delete.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Preconditions {
    /// The uid the object must have.
    pub uid: Option<String>,
    /// The resourceVersion the object must have.
    pub resource_version: Option<String>,
}

impl Preconditions {
    fn read(v: &Value) -> Result<Self, ApiError> {
        if v.is_null() {
            return Ok(Preconditions::default());
        }
        if !v.is_object() {
            return Err(ApiError::bad_request(
                "the DeleteOptions preconditions must be an object",
            ));
        }
        let s = |key: &str| -> Result<Option<String>, ApiError> {
            match &v[key] {
                Value::Null => Ok(None),
                Value::String(s) => Ok(Some(s.clone())),
                other => Err(ApiError::bad_request(format!(
                    "preconditions.{key} must be a string, got {other}"
                ))),
            }
        };
        Ok(Preconditions {
            uid: s("uid")?,
            resource_version: s("resourceVersion")?,
        })
    }

    /// `BeforeDelete`'s early check: `409 Conflict` naming the kind (as
    /// upstream does, `Pod` or `Job.batch`) when the object's uid or
    /// resourceVersion differs.
    pub fn check(&self, kind: Kind, obj: &Value) -> Result<(), ApiError> {
        let md = &obj["metadata"];
        let name = md["name"].as_str().unwrap_or("");
        if let Some(uid) = &self.uid {
            let actual = md["uid"].as_str().unwrap_or("");
            if uid != actual {
                return Err(ApiError::conflict(
                    kind.group(),
                    kind.kind(),
                    name,
                    &format!(
                        "the UID in the precondition ({uid}) does not match the UID in record ({actual}). The object might have been deleted and then recreated"
                    ),
                ));
            }
        }
        if let Some(rv) = &self.resource_version {
            let actual = md["resourceVersion"].as_str().unwrap_or("");
            if rv != actual {
                return Err(ApiError::conflict(
                    kind.group(),
                    kind.kind(),
                    name,
                    &format!(
                        "the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion in record ({actual}). The object might have been modified"
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// Options of a delete call.
#[derive(Debug, Default)]
pub(super) struct DeleteOpts {
    pub propagation: Option<Propagation>,
    pub grace: Option<i64>,
    pub preconditions: Preconditions,
    pub dry_run: bool,
}

fn string_list(v: &Value, what: &str) -> Result<Vec<String>, ApiError> {
    match v {
        Value::Null => Ok(Vec::new()),
        Value::Array(a) => a
            .iter()
            .map(|x| {
                x.as_str().map(str::to_string).ok_or_else(|| {
                    ApiError::bad_request(format!("{what} must be a list of strings"))
                })
            })
            .collect(),
        _ => Err(ApiError::bad_request(format!(
            "{what} must be a list of strings"
        ))),
    }
}

impl DeleteOpts {
    /// From the body when it is not empty (the query is then not read, as
    /// upstream), else from the query; validated as upstream
    /// (`422 Invalid` of kind DeleteOptions).
    pub(super) fn read(body: &Bytes, q: &Query) -> Result<Self, ApiError> {
        let (policy, orphan, grace, preconditions, dry) =
            if body.iter().all(u8::is_ascii_whitespace) {
                let grace = match q.get("gracePeriodSeconds") {
                    None => None,
                    Some(g) => Some(g.parse::<i64>().map_err(|e| {
                        ApiError::bad_request(format!("gracePeriodSeconds {g:?}: {e}"))
                    })?),
                };
                (
                    q.get("propagationPolicy").cloned(),
                    q.get("orphanDependents").map(|v| parse_bool(Some(v))),
                    grace,
                    Preconditions::default(),
                    q.get("dryRun").cloned().into_iter().collect(),
                )
            } else {
                Self::from_body(body)?
            };
        Self::validate(policy, orphan, grace, preconditions, dry)
    }

    #[allow(clippy::type_complexity)]
    fn from_body(
        body: &Bytes,
    ) -> Result<
        (
            Option<String>,
            Option<bool>,
            Option<i64>,
            Preconditions,
            Vec<String>,
        ),
        ApiError,
    > {
        let v: Value = serde_json::from_slice(body).map_err(|e| {
            ApiError::bad_request(format!("the DeleteOptions body is not valid JSON: {e}"))
        })?;
        Self::from_value(&v)
    }

    #[allow(clippy::type_complexity)]
    fn from_value(
        v: &Value,
    ) -> Result<
        (
            Option<String>,
            Option<bool>,
            Option<i64>,
            Preconditions,
            Vec<String>,
        ),
        ApiError,
    > {
        if !v.is_object() {
            return Err(ApiError::bad_request("DeleteOptions must be a JSON object"));
        }
        let policy = match &v["propagationPolicy"] {
            Value::Null => None,
            Value::String(s) => Some(s.clone()),
            other => {
                return Err(ApiError::bad_request(format!(
                    "propagationPolicy must be a string, got {other}"
                )));
            }
        };
        let orphan = match &v["orphanDependents"] {
            Value::Null => None,
            Value::Bool(b) => Some(*b),
            other => {
                return Err(ApiError::bad_request(format!(
                    "orphanDependents must be a boolean, got {other}"
                )));
            }
        };
        let grace = match &v["gracePeriodSeconds"] {
            Value::Null => None,
            g => Some(g.as_i64().ok_or_else(|| {
                ApiError::bad_request(format!("gracePeriodSeconds must be an integer, got {g}"))
            })?),
        };
        Ok((
            policy,
            orphan,
            grace,
            Preconditions::read(&v["preconditions"])?,
            string_list(&v["dryRun"], "dryRun")?,
        ))
    }

    fn validate(
        policy: Option<String>,
        orphan: Option<bool>,
        grace: Option<i64>,
        preconditions: Preconditions,
        dry: Vec<String>,
    ) -> Result<Self, ApiError> {
        let mut errs = Vec::new();
        if orphan.is_some() && policy.is_some() {
            errs.push(FieldError::invalid(
                "propagationPolicy",
                BadValue::Str(policy.clone().unwrap_or_default()),
                "orphanDependents and deletionPropagation cannot be both set",
            ));
        }
        let propagation = match policy.as_deref() {
            None => orphan.map(|o| {
                if o {
                    Propagation::Orphan
                } else {
                    Propagation::Background
                }
            }),
            Some("Orphan") => Some(Propagation::Orphan),
            Some("Background") => Some(Propagation::Background),
            Some("Foreground") => Some(Propagation::Foreground),
            Some(other) => {
                errs.push(FieldError::not_supported(
                    "propagationPolicy",
                    BadValue::Str(other.to_string()),
                    &["Foreground", "Background", "Orphan", "nil"],
                ));
                None
            }
        };
        let dry_run = dry_run_of(&dry, &mut errs);
        if !errs.is_empty() {
            return Err(options_invalid("DeleteOptions", &errs));
        }
        Ok(DeleteOpts {
            propagation,
            // BeforeDelete: a negative grace period counts as 1 second
            grace: grace.map(|g| if g < 0 { 1 } else { g }),
            preconditions,
            dry_run,
        })
    }
}

/// What an Eviction asks: its delete options, with the request's dryRun
/// carried into them (`propagateDryRun`).
#[derive(Debug, Default)]
pub(super) struct EvictionOpts {
    pub preconditions: Preconditions,
    pub dry_run: bool,
}

impl EvictionOpts {
    pub(super) fn read(body: &Bytes, name: &str, query_dry_run: bool) -> Result<Self, ApiError> {
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(EvictionOpts {
                preconditions: Preconditions::default(),
                dry_run: query_dry_run,
            });
        }
        let v: Value = serde_json::from_slice(body).map_err(|e| {
            ApiError::bad_request(format!("the Eviction body is not valid JSON: {e}"))
        })?;
        if let Some(n) = v["metadata"]["name"].as_str()
            && n != name
        {
            return Err(ApiError::bad_request(
                "name in URL does not match name in Eviction object",
            ));
        }
        let opts = &v["deleteOptions"];
        if opts.is_null() {
            return Ok(EvictionOpts {
                preconditions: Preconditions::default(),
                dry_run: query_dry_run,
            });
        }
        let (policy, orphan, grace, preconditions, dry) = DeleteOpts::from_value(opts)?;
        let body_dry = !dry.is_empty();
        if body_dry && query_dry_run && dry.iter().any(|d| d != "All") {
            return Err(ApiError::unknown_internal(format!(
                "Non-matching dry-run options in request and content: [All] and {dry:?}"
            )));
        }
        let d = DeleteOpts::validate(policy, orphan, grace, preconditions, dry)?;
        Ok(EvictionOpts {
            preconditions: d.preconditions,
            dry_run: d.dry_run || query_dry_run,
        })
    }
}

/// `Warning` headers, one per distinct text: `299 - "text"`.
pub(super) fn with_warnings(mut res: Response, warnings: &[String]) -> Response {
    let mut seen: Vec<&String> = Vec::new();
    for w in warnings {
        if seen.contains(&w) {
            continue;
        }
        seen.push(w);
        let ascii: String = w
            .chars()
            .map(|c| {
                if c.is_ascii() && !c.is_ascii_control() {
                    c
                } else {
                    '?'
                }
            })
            .collect();
        let text = format!("299 - {}", go_quote(&ascii));
        if let Ok(v) = HeaderValue::from_str(&text) {
            res.headers_mut().append("warning", v);
        }
    }
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> Query {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn booleans_parse_as_upstream() {
        assert!(!parse_bool(None));
        for t in ["true", "True", "TRUE", "1", "", "yes", "2"] {
            assert!(parse_bool(Some(t)), "{t:?}");
        }
        for f in ["false", "False", "FALSE", "0"] {
            assert!(!parse_bool(Some(f)), "{f:?}");
        }
    }

    #[test]
    fn write_options() {
        let o = WriteOptions::from_query(&q(&[]), "CreateOptions").unwrap();
        assert!(!o.dry_run);
        assert_eq!(o.field_validation, FieldValidation::Warn);
        let o = WriteOptions::from_query(
            &q(&[("dryRun", "All"), ("fieldValidation", "Strict")]),
            "CreateOptions",
        )
        .unwrap();
        assert!(o.dry_run);
        assert_eq!(o.field_validation, FieldValidation::Strict);
        let e = WriteOptions::from_query(&q(&[("dryRun", "Yes")]), "CreateOptions").unwrap_err();
        assert_eq!(e.code, 422);
        assert_eq!(
            e.message,
            "CreateOptions.meta.k8s.io \"\" is invalid: dryRun: Unsupported value: []string{\"Yes\"}: supported values: \"All\""
        );
        let e = WriteOptions::from_query(&q(&[("fieldValidation", "Loud")]), "PatchOptions")
            .unwrap_err();
        assert!(
            e.message
                .contains("fieldValidation: Unsupported value: \"Loud\""),
            "{}",
            e.message
        );
    }

    #[test]
    fn delete_options_body_or_query() {
        let body = Bytes::from(
            r#"{"preconditions": {"uid": "u1"}, "dryRun": ["All"], "gracePeriodSeconds": -3}"#,
        );
        // the query is not read when a body is sent
        let o = DeleteOpts::read(&body, &q(&[("propagationPolicy", "Nope")])).unwrap();
        assert_eq!(o.preconditions.uid.as_deref(), Some("u1"));
        assert!(o.dry_run);
        assert_eq!(o.grace, Some(1));
        let o = DeleteOpts::read(
            &Bytes::new(),
            &q(&[("dryRun", "All"), ("propagationPolicy", "Foreground")]),
        )
        .unwrap();
        assert!(o.dry_run);
        assert_eq!(o.propagation, Some(Propagation::Foreground));
        let e = DeleteOpts::read(
            &Bytes::from(r#"{"propagationPolicy": "Sideways"}"#),
            &q(&[]),
        )
        .unwrap_err();
        assert_eq!(e.code, 422);
        assert!(e.message.starts_with("DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Unsupported value: \"Sideways\""), "{}", e.message);
        let e = DeleteOpts::read(&Bytes::from(r#"{"dryRun": ["Maybe"]}"#), &q(&[])).unwrap_err();
        assert_eq!(e.code, 422);
    }

    #[test]
    fn preconditions_name_the_kind() {
        let pod =
            serde_json::json!({"metadata": {"name": "p", "uid": "u2", "resourceVersion": "7"}});
        let p = Preconditions {
            uid: Some("u1".into()),
            resource_version: None,
        };
        let e = p.check(Kind::Pod, &pod).unwrap_err();
        assert_eq!((e.code, e.reason), (409, "Conflict"));
        assert_eq!(
            e.message,
            "Operation cannot be fulfilled on Pod \"p\": the UID in the precondition (u1) does not match the UID in record (u2). The object might have been deleted and then recreated"
        );
        let p = Preconditions {
            uid: Some("u2".into()),
            resource_version: Some("6".into()),
        };
        let e = p.check(Kind::Job, &pod).unwrap_err();
        assert!(e.message.starts_with("Operation cannot be fulfilled on Job.batch \"p\": the ResourceVersion in the precondition (6)"), "{}", e.message);
        assert!(
            Preconditions {
                uid: Some("u2".into()),
                resource_version: Some("7".into())
            }
            .check(Kind::Pod, &pod)
            .is_ok()
        );
    }
}
