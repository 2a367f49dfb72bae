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

/// The discovery path of a kind's group-version: `api/v1` or `apis/batch/v1`.
fn gv_path(kind: Kind) -> String {
    if kind.group().is_empty() {
        format!("api/{}", kind.info().version)
    } else {
        format!("apis/{}", kind.api_version())
    }
}

/// `GET /openapi/v3`.
pub fn root() -> Value {
    let mut paths = serde_json::Map::new();
    for kind in Kind::ALL {
        let p = gv_path(kind);
        paths.insert(
            p.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash=kube-sim-1")}),
        );
    }
    json!({ "paths": paths })
}

fn query_param(name: &str) -> Value {
    json!({"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": true}})
}

/// `GET /openapi/v3/<gv>` (e.g. `api/v1`, `apis/batch/v1`): the PATCH
/// operation of every kind served there; `None` for a group-version the sim
/// does not serve.
pub fn group_version(gv: &str) -> Option<Value> {
    let kinds: Vec<Kind> = Kind::ALL
        .into_iter()
        .filter(|k| gv_path(*k) == gv)
        .collect();
    if kinds.is_empty() {
        return None;
    }
    let params = json!([
        query_param("dryRun"),
        query_param("fieldManager"),
        query_param("fieldValidation"),
        {"name": "force", "in": "query", "schema": {"type": "boolean", "uniqueItems": true}},
    ]);
    let mut paths = serde_json::Map::new();
    for kind in kinds {
        let gvk =
            json!({"group": kind.group(), "version": kind.info().version, "kind": kind.kind()});
        let item = if kind.namespaced() {
            format!(
                "/{gv}/namespaces/{{namespace}}/{}/{{name}}",
                kind.resource()
            )
        } else {
            format!("/{gv}/{}/{{name}}", kind.resource())
        };
        let scope = if kind.namespaced() { "Namespaced" } else { "" };
        let mut path_params = vec![
            json!({"name": "name", "in": "path", "required": true, "schema": {"type": "string"}}),
        ];
        if kind.namespaced() {
            path_params.push(json!({"name": "namespace", "in": "path", "required": true, "schema": {"type": "string"}}));
        }
        paths.insert(
            item,
            json!({
                "parameters": path_params,
                "patch": {
                    "operationId": format!("patch{scope}{}", kind.kind()),
                    "parameters": params,
                    "responses": {"200": {"description": "OK"}},
                    "x-kubernetes-action": "patch",
                    "x-kubernetes-group-version-kind": gvk,
                },
            }),
        );
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.32.0-kube-sim"},
        "paths": paths,
        "components": {},
    }))
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
        let doc = group_version("apis/batch/v1").unwrap();
        assert!(group_version("apis/apps/v1").is_none());
        let core = group_version("api/v1").unwrap();
        assert!(core["paths"]["/api/v1/nodes/{name}"]["patch"].is_object());
        assert!(
            core["paths"]["/api/v1/namespaces/{namespace}/secrets/{name}"]["patch"].is_object()
        );
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
