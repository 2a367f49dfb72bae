//! A minimal OpenAPI v3 discovery, enough for kubectl to learn that Jobs and
//! Pods take the `fieldValidation` (and `dryRun`) query parameters: kubectl
//! then sends `fieldValidation` on create and apply and prints the server's
//! warnings, instead of validating on its side against a schema the sim does
//! not serve.
//!
//! Upstream shape: `GET /openapi/v3` lists one document per group-version
//! (`{"paths": {"apis/batch/v1": {"serverRelativeURL": ...}}}`); kubectl's
//! `queryParamVerifierV3` (`staging/src/k8s.io/cli-runtime/pkg/resource/query_param_verifier_v3.go`)
//! looks for a PATCH operation whose `x-kubernetes-group-version-kind` is the
//! object's and whose parameters name `fieldValidation`. Only those
//! operations are described here; there are no schemas.

use crate::store::Kind;
use serde_json::{Value, json};

fn gv_path(kind: Kind) -> &'static str {
    match kind {
        Kind::Pod => "api/v1",
        Kind::Job => "apis/batch/v1",
    }
}

/// `GET /openapi/v3`.
pub fn root() -> Value {
    let mut paths = serde_json::Map::new();
    for kind in [Kind::Pod, Kind::Job] {
        let p = gv_path(kind);
        paths.insert(
            p.to_string(),
            json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash=kube-sim-1")}),
        );
    }
    json!({ "paths": paths })
}

fn query_param(name: &str) -> Value {
    json!({"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": true}})
}

/// `GET /openapi/v3/api/v1` (Pods) or `/openapi/v3/apis/batch/v1` (Jobs).
pub fn group_version(kind: Kind) -> Value {
    let (group, version) = match kind {
        Kind::Pod => ("", "v1"),
        Kind::Job => ("batch", "v1"),
    };
    let gvk = json!({"group": group, "version": version, "kind": kind.kind()});
    let params = json!([
        query_param("dryRun"),
        query_param("fieldManager"),
        query_param("fieldValidation"),
        {"name": "force", "in": "query", "schema": {"type": "boolean", "uniqueItems": true}},
    ]);
    let item = format!(
        "/{}/namespaces/{{namespace}}/{}/{{name}}",
        gv_path(kind),
        kind.resource()
    );
    let op = |id: &str| {
        json!({
            "operationId": id,
            "parameters": params,
            "responses": {"200": {"description": "OK"}},
            "x-kubernetes-action": "patch",
            "x-kubernetes-group-version-kind": gvk,
        })
    };
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.32.0-kube-sim"},
        "paths": {
            item: {
                "parameters": [
                    {"name": "name", "in": "path", "required": true, "schema": {"type": "string"}},
                    {"name": "namespace", "in": "path", "required": true, "schema": {"type": "string"}},
                ],
                "patch": op(&format!("patchNamespaced{}", kind.kind())),
            }
        },
        "components": {},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_patch_operations_name_field_validation() {
        assert_eq!(
            root()["paths"]["apis/batch/v1"]["serverRelativeURL"],
            "/openapi/v3/apis/batch/v1?hash=kube-sim-1"
        );
        let doc = group_version(Kind::Job);
        let op = &doc["paths"]["/apis/batch/v1/namespaces/{namespace}/jobs/{name}"]["patch"];
        assert_eq!(op["x-kubernetes-group-version-kind"]["kind"], "Job");
        assert!(
            op["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["name"] == "fieldValidation")
        );
    }
}
