//! Pod specs (bare pods and Job templates): containers, env, envFrom,
//! volumes and their mounts, ports, resources, security contexts and the
//! enumerated fields, checked after defaulting as the API server does.
//!
//! Upstream: `pkg/apis/core/validation/validation.go` (`ValidatePodSpec`,
//! `validateContainers`, `ValidateEnv`, `validateEnvVarValueFrom`,
//! `validateObjectFieldSelector`, `ValidateEnvFrom`, `ValidateVolumes`,
//! `ValidateVolumeMounts`, `validateContainerPorts`,
//! `ValidateResourceRequirements`, `ValidatePodSecurityContext`,
//! `ValidatePodCreate`, `ValidatePodUpdate`), `pkg/apis/core/pods`
//! (`ConvertDownwardAPIFieldLabel`) and `pkg/api/pod/warnings.go`.

use super::meta::{
    dns1123_label, each_invalid, env_var_name, inclusive_range_error, name_is_dns_subdomain,
    port_name, qualified_name, validate_annotations, validate_labels,
};
use super::{BadValue, ErrorList, FieldError, go_quote, items, path, str_of};
use crate::quantity::{self, Quantity};
use serde_json::Value;
use std::collections::{BTreeSet, HashSet};

/// The JSON names of every volume source, in upstream's checking order.
const VOLUME_SOURCES: [&str; 29] = [
    "emptyDir",
    "hostPath",
    "gitRepo",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "secret",
    "nfs",
    "iscsi",
    "glusterfs",
    "flocker",
    "persistentVolumeClaim",
    "rbd",
    "cinder",
    "cephfs",
    "quobyte",
    "downwardAPI",
    "fc",
    "azureFile",
    "vsphereVolume",
    "azureDisk",
    "configMap",
    "photonPersistentDisk",
    "portworxVolume",
    "scaleIO",
    "projected",
    "storageos",
    "csi",
    "ephemeral",
    "image",
];

/// Field paths the downward API offers to env vars (sorted, as listed in
/// the NotSupported message).
const ENV_FIELD_PATHS: [&str; 9] = [
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.serviceAccountName",
    "status.hostIP",
    "status.hostIPs",
    "status.podIP",
    "status.podIPs",
];

/// Labels `ConvertDownwardAPIFieldLabel` knows for v1 pods.
const DOWNWARD_LABELS: [&str; 14] = [
    "metadata.annotations",
    "metadata.labels",
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.serviceAccountName",
    "spec.schedulerName",
    "status.phase",
    "status.hostIP",
    "status.hostIPs",
    "status.podIP",
    "status.podIPs",
];

const RESOURCE_FIELD_PATHS: [&str; 6] = [
    "limits.cpu",
    "limits.ephemeral-storage",
    "limits.memory",
    "requests.cpu",
    "requests.ephemeral-storage",
    "requests.memory",
];

/// Largest uid/gid accepted (`math.MaxInt32` in 1.31; see the README).
const MAX_ID: i64 = i32::MAX as i64;

const FILE_MODE_MSG: &str = "must be a number between 0 and 0777 (octal), both inclusive";

fn int_of(v: &Value) -> Option<i64> {
    v.as_i64()
}

/// `metadata.labels['key']` → (`metadata.labels`, `key`).
fn split_subscript(p: &str) -> Option<(&str, &str)> {
    let s = p.strip_suffix("']")?;
    let (path, sub) = s.split_once("['")?;
    (!path.is_empty()).then_some((path, sub))
}

fn validate_field_ref(fs: &Value, field: &str, errs: &mut ErrorList) {
    let api_version = str_of(fs, "apiVersion");
    let fp = str_of(fs, "fieldPath");
    if api_version.is_empty() {
        errs.push(FieldError::required(&path::child(field, "apiVersion"), ""));
        return;
    }
    if fp.is_empty() {
        errs.push(FieldError::required(&path::child(field, "fieldPath"), ""));
        return;
    }
    let fp_field = path::child(field, "fieldPath");
    let converted: Result<String, String> = if api_version != "v1" {
        Err(format!("unsupported pod version: {api_version}"))
    } else if let Some((p, _)) = split_subscript(fp) {
        if p == "metadata.annotations" || p == "metadata.labels" {
            Ok(fp.to_string())
        } else {
            Err(format!("field label does not support subscript: {fp}"))
        }
    } else if fp == "spec.host" {
        Ok("spec.nodeName".to_string())
    } else if DOWNWARD_LABELS.contains(&fp) {
        Ok(fp.to_string())
    } else {
        Err(format!("field label not supported: {fp}"))
    };
    let internal = match converted {
        Ok(p) => p,
        Err(e) => {
            errs.push(FieldError::invalid(
                &fp_field,
                BadValue::Str(fp.to_string()),
                format!("error converting fieldPath: {e}"),
            ));
            return;
        }
    };
    if let Some((p, sub)) = split_subscript(&internal) {
        match p {
            "metadata.annotations" => each_invalid(
                errs,
                field,
                &sub.to_lowercase(),
                qualified_name(&sub.to_lowercase()),
            ),
            "metadata.labels" => each_invalid(errs, field, sub, qualified_name(sub)),
            _ => errs.push(FieldError::invalid(
                field,
                BadValue::Str(p.to_string()),
                "does not support subscript",
            )),
        }
    } else if !ENV_FIELD_PATHS.contains(&internal.as_str()) {
        errs.push(FieldError::not_supported(
            &fp_field,
            BadValue::Str(internal),
            &ENV_FIELD_PATHS,
        ));
    }
}

/// `IsConfigMapKey`.
fn config_map_key(key: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if key.len() > 253 {
        errs.push(super::meta::max_len_error(253));
    }
    if key.is_empty()
        || !key
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_'))
    {
        errs.push(super::meta::regex_error(
            "a valid config key must consist of alphanumeric characters, '-', '_' or '.'",
            "[-._a-zA-Z0-9]+",
            &["key.name", "KEY_NAME", "key-name"],
        ));
    }
    match key {
        "." => errs.push("must not be '.'".into()),
        ".." => errs.push("must not be '..'".into()),
        k if k.starts_with("..") => errs.push("must not start with '..'".into()),
        _ => {}
    }
    errs
}

fn validate_key_selector(sel: &Value, field: &str, errs: &mut ErrorList) {
    let name = str_of(sel, "name");
    each_invalid(
        errs,
        &path::child(field, "name"),
        name,
        name_is_dns_subdomain(name, false),
    );
    let key = str_of(sel, "key");
    if key.is_empty() {
        errs.push(FieldError::required(&path::child(field, "key"), ""));
    } else {
        each_invalid(errs, &path::child(field, "key"), key, config_map_key(key));
    }
}

fn validate_env(env: &[Value], field: &str, errs: &mut ErrorList) {
    for (i, ev) in env.iter().enumerate() {
        let idx = path::index(field, i);
        let name = str_of(ev, "name");
        if name.is_empty() {
            errs.push(FieldError::required(&path::child(&idx, "name"), ""));
        } else {
            each_invalid(errs, &path::child(&idx, "name"), name, env_var_name(name));
        }
        let vf = &ev["valueFrom"];
        if vf.is_null() {
            continue;
        }
        let vf_field = path::child(&idx, "valueFrom");
        let mut sources = 0;
        if !vf["fieldRef"].is_null() {
            sources += 1;
            validate_field_ref(&vf["fieldRef"], &path::child(&vf_field, "fieldRef"), errs);
        }
        if !vf["resourceFieldRef"].is_null() {
            sources += 1;
            let rf = &vf["resourceFieldRef"];
            let rpath = path::child(&vf_field, "resourceFieldRef");
            let res = str_of(rf, "resource");
            if res.is_empty() {
                errs.push(FieldError::required(&path::child(&rpath, "resource"), ""));
            } else if !RESOURCE_FIELD_PATHS.contains(&res) {
                errs.push(FieldError::not_supported(
                    &path::child(&rpath, "resource"),
                    BadValue::Str(res.to_string()),
                    &RESOURCE_FIELD_PATHS,
                ));
            }
        }
        for key in ["configMapKeyRef", "secretKeyRef"] {
            if !vf[key].is_null() {
                sources += 1;
                validate_key_selector(&vf[key], &path::child(&vf_field, key), errs);
            }
        }
        let empty = BadValue::Str(String::new());
        if sources == 0 {
            errs.push(FieldError::invalid(
                &vf_field,
                empty,
                "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`",
            ));
        } else if !str_of(ev, "value").is_empty() {
            errs.push(FieldError::invalid(
                &vf_field,
                empty,
                "may not be specified when `value` is not empty",
            ));
        } else if sources > 1 {
            errs.push(FieldError::invalid(
                &vf_field,
                empty,
                "may not have more than one field specified at a time",
            ));
        }
    }
}

fn validate_env_from(env_from: &[Value], field: &str, errs: &mut ErrorList) {
    for (i, ev) in env_from.iter().enumerate() {
        let idx = path::index(field, i);
        let prefix = str_of(ev, "prefix");
        if !prefix.is_empty() {
            each_invalid(
                errs,
                &path::child(&idx, "prefix"),
                prefix,
                env_var_name(prefix),
            );
        }
        let mut sources = 0;
        for key in ["configMapRef", "secretRef"] {
            let src = &ev[key];
            if src.is_null() {
                continue;
            }
            sources += 1;
            let name_field = path::child(&path::child(&idx, key), "name");
            let name = str_of(src, "name");
            if name.is_empty() {
                errs.push(FieldError::required(&name_field, ""));
            } else {
                each_invalid(errs, &name_field, name, name_is_dns_subdomain(name, true));
            }
        }
        let empty = BadValue::Str(String::new());
        if sources == 0 {
            // upstream reports these on the list's path, not the item's
            errs.push(FieldError::invalid(
                field,
                empty,
                "must specify one of: `configMapRef` or `secretRef`",
            ));
        } else if sources > 1 {
            errs.push(FieldError::invalid(
                field,
                empty,
                "may not have more than one field specified at a time",
            ));
        }
    }
}

fn validate_mode(v: &Value, field: &str, errs: &mut ErrorList) {
    if let Some(m) = int_of(v)
        && !(0..=0o777).contains(&m)
    {
        errs.push(FieldError::invalid(field, BadValue::Int(m), FILE_MODE_MSG));
    }
}

/// `validateLocalDescendingPath`.
fn local_descending_path(p: &str, field: &str, errs: &mut ErrorList) {
    if p.starts_with('/') {
        errs.push(FieldError::invalid(
            field,
            BadValue::Str(p.to_string()),
            "must be a relative path",
        ));
    }
    if p.split('/').any(|seg| seg == "..") {
        errs.push(FieldError::invalid(
            field,
            BadValue::Str(p.to_string()),
            "must not contain '..'",
        ));
    }
}

fn validate_key_to_paths(items_v: &[Value], field: &str, errs: &mut ErrorList) {
    for (i, kp) in items_v.iter().enumerate() {
        let idx = path::index(field, i);
        if str_of(kp, "key").is_empty() {
            errs.push(FieldError::required(&path::child(&idx, "key"), ""));
        }
        let p = str_of(kp, "path");
        if p.is_empty() {
            errs.push(FieldError::required(&path::child(&idx, "path"), ""));
        } else {
            local_descending_path(p, &path::child(&idx, "path"), errs);
        }
        validate_mode(&kp["mode"], &path::child(&idx, "mode"), errs);
    }
}

fn validate_volume_source(vol: &Value, idx: &str, errs: &mut ErrorList) {
    let mut count = 0;
    for key in VOLUME_SOURCES {
        let src = &vol[key];
        if src.is_null() {
            continue;
        }
        let field = path::child(idx, key);
        if count > 0 {
            errs.push(FieldError::forbidden(
                &field,
                "may not specify more than 1 volume type",
            ));
            continue;
        }
        count += 1;
        match key {
            "secret" => {
                if str_of(src, "secretName").is_empty() {
                    errs.push(FieldError::required(&path::child(&field, "secretName"), ""));
                }
                validate_mode(
                    &src["defaultMode"],
                    &path::child(&field, "defaultMode"),
                    errs,
                );
                validate_key_to_paths(items(src, "items"), &path::child(&field, "items"), errs);
            }
            "configMap" => {
                let name = str_of(src, "name");
                if name.is_empty() {
                    errs.push(FieldError::required(&path::child(&field, "name"), ""));
                } else {
                    each_invalid(
                        errs,
                        &path::child(&field, "name"),
                        name,
                        name_is_dns_subdomain(name, false),
                    );
                }
                validate_mode(
                    &src["defaultMode"],
                    &path::child(&field, "defaultMode"),
                    errs,
                );
                validate_key_to_paths(items(src, "items"), &path::child(&field, "items"), errs);
            }
            "emptyDir" => {
                if let Some(q) = src["sizeLimit"]
                    .as_str()
                    .and_then(|s| quantity::parse(s).ok())
                    && q.is_negative()
                {
                    errs.push(FieldError::forbidden(
                        &path::child(&field, "sizeLimit"),
                        "SizeLimit field must be a valid resource quantity",
                    ));
                }
            }
            "hostPath" if str_of(src, "path").is_empty() => {
                errs.push(FieldError::required(&path::child(&field, "path"), ""));
            }
            "persistentVolumeClaim" if str_of(src, "claimName").is_empty() => {
                errs.push(FieldError::required(&path::child(&field, "claimName"), ""));
            }
            _ => {}
        }
    }
    if count == 0 {
        errs.push(FieldError::required(idx, "must specify a volume type"));
    }
}

/// `ValidateVolumes`: returns the names of the valid volumes.
fn validate_volumes(vols: &[Value], field: &str, errs: &mut ErrorList) -> HashSet<String> {
    let mut names = HashSet::new();
    for (i, vol) in vols.iter().enumerate() {
        let idx = path::index(field, i);
        let name_field = path::child(&idx, "name");
        let mut el = ErrorList::new();
        validate_volume_source(vol, &idx, &mut el);
        let name = str_of(vol, "name");
        if name.is_empty() {
            el.push(FieldError::required(&name_field, ""));
        } else {
            each_invalid(&mut el, &name_field, name, dns1123_label(name));
        }
        if names.contains(name) {
            el.push(FieldError::duplicate(
                &name_field,
                BadValue::Str(name.to_string()),
            ));
        }
        if el.is_empty() {
            names.insert(name.to_string());
        } else {
            errs.extend(el);
        }
    }
    names
}

fn validate_volume_mounts(
    mounts: &[Value],
    volumes: &HashSet<String>,
    field: &str,
    errs: &mut ErrorList,
) {
    let mut points = HashSet::new();
    for (i, m) in mounts.iter().enumerate() {
        let idx = path::index(field, i);
        let name = str_of(m, "name");
        if name.is_empty() {
            errs.push(FieldError::required(&path::child(&idx, "name"), ""));
        }
        if !volumes.contains(name) {
            errs.push(FieldError::not_found(
                &path::child(&idx, "name"),
                BadValue::Str(name.to_string()),
            ));
        }
        let mp = str_of(m, "mountPath");
        if mp.is_empty() {
            errs.push(FieldError::required(&path::child(&idx, "mountPath"), ""));
        }
        if !points.insert(mp.to_string()) {
            errs.push(FieldError::invalid(
                &path::child(&idx, "mountPath"),
                BadValue::Str(mp.to_string()),
                "must be unique",
            ));
        }
        let sub = str_of(m, "subPath");
        if !sub.is_empty() {
            local_descending_path(sub, &path::child(field, "subPath"), errs);
        }
    }
}

fn validate_ports(ports: &[Value], field: &str, errs: &mut ErrorList) {
    let mut names = HashSet::new();
    for (i, p) in ports.iter().enumerate() {
        let idx = path::index(field, i);
        let name = str_of(p, "name");
        if !name.is_empty() {
            let msgs = port_name(name);
            if !msgs.is_empty() {
                each_invalid(errs, &path::child(&idx, "name"), name, msgs);
            } else if !names.insert(name.to_string()) {
                errs.push(FieldError::duplicate(
                    &path::child(&idx, "name"),
                    BadValue::Str(name.to_string()),
                ));
            }
        }
        match int_of(&p["containerPort"]).unwrap_or(0) {
            0 => errs.push(FieldError::required(
                &path::child(&idx, "containerPort"),
                "",
            )),
            n if !(1..=65535).contains(&n) => errs.push(FieldError::invalid(
                &path::child(&idx, "containerPort"),
                BadValue::Int(n),
                inclusive_range_error(1, 65535),
            )),
            _ => {}
        }
        if let Some(h) = int_of(&p["hostPort"])
            && h != 0
            && !(1..=65535).contains(&h)
        {
            errs.push(FieldError::invalid(
                &path::child(&idx, "hostPort"),
                BadValue::Int(h),
                inclusive_range_error(1, 65535),
            ));
        }
        let proto = str_of(p, "protocol");
        if proto.is_empty() {
            errs.push(FieldError::required(&path::child(&idx, "protocol"), ""));
        } else if !["SCTP", "TCP", "UDP"].contains(&proto) {
            errs.push(FieldError::not_supported(
                &path::child(&idx, "protocol"),
                BadValue::Str(proto.to_string()),
                &["SCTP", "TCP", "UDP"],
            ));
        }
    }
}

fn is_native(name: &str) -> bool {
    !name.contains('/') || name.contains("kubernetes.io/")
}

fn is_hugepages(name: &str) -> bool {
    name.starts_with("hugepages-")
}

fn overcommit_allowed(name: &str) -> bool {
    is_native(name) && !is_hugepages(name)
}

fn validate_resource_name(name: &str, field: &str, errs: &mut ErrorList) {
    for m in qualified_name(name) {
        errs.push(FieldError::invalid(
            field,
            BadValue::Raw(name.to_string()),
            m,
        ));
    }
    if !name.contains('/') {
        if !matches!(name, "cpu" | "memory" | "ephemeral-storage") && !is_hugepages(name) {
            errs.push(FieldError::invalid(
                field,
                BadValue::Raw(name.to_string()),
                "must be a standard resource for containers",
            ));
        }
    } else if !is_native(name)
        && (name.starts_with("requests.")
            || !qualified_name(&format!("requests.{name}")).is_empty())
    {
        errs.push(FieldError::invalid(
            field,
            BadValue::Raw(name.to_string()),
            "doesn't follow extended resource name standard",
        ));
    }
}

fn validate_quantity_value(name: &str, q: &Quantity, field: &str, errs: &mut ErrorList) {
    if q.is_negative() {
        errs.push(FieldError::invalid(
            field,
            BadValue::Str(q.canonical()),
            "must be greater than or equal to 0",
        ));
    }
    if !is_native(name) && q.milli_value() % 1000 != 0 {
        errs.push(FieldError::invalid(
            field,
            BadValue::Raw(q.canonical()),
            "must be an integer",
        ));
    }
}

fn quantities(list: &Value) -> Vec<(String, Option<Quantity>)> {
    let mut out: Vec<(String, Option<Quantity>)> = list
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| {
                    let q = match v {
                        Value::String(s) => quantity::parse(s).ok(),
                        Value::Number(n) => quantity::parse(&n.to_string()).ok(),
                        _ => None,
                    };
                    (k.clone(), q)
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn validate_resources(res: &Value, field: &str, errs: &mut ErrorList) {
    let lim_path = path::child(field, "limits");
    let req_path = path::child(field, "requests");
    let limits = quantities(&res["limits"]);
    for (name, q) in &limits {
        let f = path::key(&lim_path, name);
        validate_resource_name(name, &f, errs);
        if let Some(q) = q {
            validate_quantity_value(name, q, &f, errs);
        }
    }
    for (name, q) in quantities(&res["requests"]) {
        let f = path::key(&req_path, &name);
        validate_resource_name(&name, &f, errs);
        let Some(q) = q else { continue };
        validate_quantity_value(&name, &q, &f, errs);
        match limits.iter().find(|(n, _)| *n == name) {
            Some((_, Some(limit))) => {
                if q != *limit && !overcommit_allowed(&name) {
                    errs.push(FieldError::invalid(
                        &req_path,
                        BadValue::Str(q.canonical()),
                        format!("must be equal to {name} limit of {limit}"),
                    ));
                } else if q > *limit {
                    errs.push(FieldError::invalid(
                        &req_path,
                        BadValue::Str(q.canonical()),
                        format!("must be less than or equal to {name} limit of {limit}"),
                    ));
                }
            }
            Some((_, None)) => {}
            None if !overcommit_allowed(&name) => errs.push(FieldError::required(
                &lim_path,
                "Limit must be set for non overcommitable resources",
            )),
            None => {}
        }
    }
}

fn validate_id(v: &Value, field: &str, errs: &mut ErrorList) {
    if let Some(id) = int_of(v)
        && !(0..=MAX_ID).contains(&id)
    {
        errs.push(FieldError::invalid(
            field,
            BadValue::Int(id),
            inclusive_range_error(0, MAX_ID),
        ));
    }
}

fn validate_container_security_context(sc: &Value, field: &str, errs: &mut ErrorList) {
    if sc.is_null() {
        return;
    }
    validate_id(&sc["runAsUser"], &path::child(field, "runAsUser"), errs);
    validate_id(&sc["runAsGroup"], &path::child(field, "runAsGroup"), errs);
    validate_seccomp_profile(
        &sc["seccompProfile"],
        &path::child(field, "seccompProfile"),
        errs,
    );
    if sc["allowPrivilegeEscalation"] == false {
        if sc["privileged"] == true {
            errs.push(FieldError::invalid(
                field,
                BadValue::Raw(sc.to_string()),
                "cannot set `allowPrivilegeEscalation` to false and `privileged` to true",
            ));
        }
        if items(&sc["capabilities"], "add")
            .iter()
            .any(|c| c == "CAP_SYS_ADMIN")
        {
            errs.push(FieldError::invalid(
                field,
                BadValue::Raw(sc.to_string()),
                "cannot set `allowPrivilegeEscalation` to false and `capabilities.Add` CAP_SYS_ADMIN",
            ));
        }
    }
}

/// The seccomp profile types the API accepts (`validateSeccompProfileType`).
const SECCOMP_TYPES: [&str; 3] = ["Localhost", "RuntimeDefault", "Unconfined"];

/// `validateSeccompProfileField` (pod and container contexts alike): a
/// known type; a `Localhost` profile names its file by a relative path, and
/// no other type may name one. (Upstream renders the whole profile, a Go
/// struct with a pointer, as the bad value of the last rule; it is JSON here.)
fn validate_seccomp_profile(sp: &Value, field: &str, errs: &mut ErrorList) {
    if sp.is_null() {
        return;
    }
    let kind = str_of(sp, "type");
    let type_field = path::child(field, "type");
    match kind {
        "" => errs.push(FieldError::required(
            &type_field,
            "type is required when seccompProfile is set",
        )),
        k if !SECCOMP_TYPES.contains(&k) => errs.push(FieldError::not_supported(
            &type_field,
            BadValue::Str(k.to_string()),
            &SECCOMP_TYPES,
        )),
        _ => {}
    }
    let profile = &sp["localhostProfile"];
    let profile_field = path::child(field, "localhostProfile");
    match (kind, profile.as_str()) {
        ("Localhost", None) => errs.push(FieldError::required(
            &profile_field,
            "must be set when seccomp type is Localhost",
        )),
        ("Localhost", Some(p)) => local_descending_path(p, &profile_field, errs),
        (_, _) if !profile.is_null() => errs.push(FieldError::invalid(
            &profile_field,
            BadValue::Raw(sp.to_string()),
            "can only be set when seccomp type is Localhost",
        )),
        _ => {}
    }
}

fn validate_pod_security_context(sc: &Value, field: &str, errs: &mut ErrorList) {
    if sc.is_null() {
        return;
    }
    validate_id(&sc["fsGroup"], &path::child(field, "fsGroup"), errs);
    validate_id(&sc["runAsUser"], &path::child(field, "runAsUser"), errs);
    validate_id(&sc["runAsGroup"], &path::child(field, "runAsGroup"), errs);
    for (i, g) in items(sc, "supplementalGroups").iter().enumerate() {
        validate_id(
            g,
            &path::index(&path::child(field, "supplementalGroups"), i),
            errs,
        );
    }
    if let Some(p) = sc["fsGroupChangePolicy"].as_str()
        && !["Always", "OnRootMismatch"].contains(&p)
    {
        errs.push(FieldError::not_supported(
            &path::child(field, "fsGroupChangePolicy"),
            BadValue::Str(p.to_string()),
            &["Always", "OnRootMismatch"],
        ));
    }
    validate_seccomp_profile(
        &sc["seccompProfile"],
        &path::child(field, "seccompProfile"),
        errs,
    );
}

/// Enumerated string field: Required when empty, NotSupported when unknown.
fn enum_field(v: &Value, field: &str, allowed: &[&str], errs: &mut ErrorList) {
    let s = v.as_str().unwrap_or("");
    if s.is_empty() {
        errs.push(FieldError::required(field, ""));
    } else if !allowed.contains(&s) {
        errs.push(FieldError::not_supported(
            field,
            BadValue::Str(s.to_string()),
            allowed,
        ));
    }
}

fn validate_containers(
    cs: &[Value],
    volumes: &HashSet<String>,
    field: &str,
    names: &mut HashSet<String>,
    errs: &mut ErrorList,
) {
    for (i, c) in cs.iter().enumerate() {
        let idx = path::index(field, i);
        let name_field = path::child(&idx, "name");
        let name = str_of(c, "name");
        if name.is_empty() {
            errs.push(FieldError::required(&name_field, ""));
        } else {
            each_invalid(errs, &name_field, name, dns1123_label(name));
        }
        if !names.insert(name.to_string()) {
            errs.push(FieldError::duplicate(
                &name_field,
                BadValue::Str(name.to_string()),
            ));
        }
        if str_of(c, "image").is_empty() {
            errs.push(FieldError::required(&path::child(&idx, "image"), ""));
        }
        match str_of(c, "terminationMessagePolicy") {
            "File" | "FallbackToLogsOnError" => {}
            "" => errs.push(FieldError::required(
                &path::child(&idx, "terminationMessagePolicy"),
                "must be 'File' or 'FallbackToLogsOnError'",
            )),
            other => errs.push(FieldError::invalid(
                &path::child(&idx, "terminationMessagePolicy"),
                BadValue::Str(other.to_string()),
                "must be 'File' or 'FallbackToLogsOnError'",
            )),
        }
        validate_ports(items(c, "ports"), &path::child(&idx, "ports"), errs);
        validate_env(items(c, "env"), &path::child(&idx, "env"), errs);
        validate_env_from(items(c, "envFrom"), &path::child(&idx, "envFrom"), errs);
        validate_volume_mounts(
            items(c, "volumeMounts"),
            volumes,
            &path::child(&idx, "volumeMounts"),
            errs,
        );
        enum_field(
            &c["imagePullPolicy"],
            &path::child(&idx, "imagePullPolicy"),
            &["Always", "IfNotPresent", "Never"],
            errs,
        );
        validate_resources(&c["resources"], &path::child(&idx, "resources"), errs);
        validate_container_security_context(
            &c["securityContext"],
            &path::child(&idx, "securityContext"),
            errs,
        );
    }
    // host ports may not collide across the containers
    let mut seen = BTreeSet::new();
    for (ci, c) in cs.iter().enumerate() {
        for (pi, p) in items(c, "ports").iter().enumerate() {
            let host = int_of(&p["hostPort"]).unwrap_or(0);
            if host == 0 {
                continue;
            }
            let key = format!("{}/{}/{host}", str_of(p, "protocol"), str_of(p, "hostIP"));
            if !seen.insert(key.clone()) {
                let f = path::index(&path::child(&path::index(field, ci), "ports"), pi);
                errs.push(FieldError::duplicate(
                    &path::child(&f, "hostPort"),
                    BadValue::Str(key),
                ));
            }
        }
    }
}

/// `ValidatePodSpec` on a defaulted spec at `field`.
pub fn validate_pod_spec(spec: &Value, field: &str, errs: &mut ErrorList) {
    let volumes = validate_volumes(items(spec, "volumes"), &path::child(field, "volumes"), errs);
    let containers = items(spec, "containers");
    let cfield = path::child(field, "containers");
    let mut names = HashSet::new();
    if containers.is_empty() {
        errs.push(FieldError::required(&cfield, ""));
    } else {
        validate_containers(containers, &volumes, &cfield, &mut names, errs);
    }
    let init = items(spec, "initContainers");
    if !init.is_empty() {
        validate_containers(
            init,
            &volumes,
            &path::child(field, "initContainers"),
            &mut names,
            errs,
        );
    }
    enum_field(
        &spec["restartPolicy"],
        &path::child(field, "restartPolicy"),
        &["Always", "OnFailure", "Never"],
        errs,
    );
    enum_field(
        &spec["dnsPolicy"],
        &path::child(field, "dnsPolicy"),
        &["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"],
        errs,
    );
    validate_labels(
        &spec["nodeSelector"],
        &path::child(field, "nodeSelector"),
        errs,
    );
    validate_pod_security_context(
        &spec["securityContext"],
        &path::child(field, "securityContext"),
        errs,
    );
    for key in ["serviceAccountName", "priorityClassName", "nodeName"] {
        let v = str_of(spec, key);
        if !v.is_empty() {
            each_invalid(
                errs,
                &path::child(field, key),
                v,
                name_is_dns_subdomain(v, false),
            );
        }
    }
    for key in ["hostname", "subdomain"] {
        let v = str_of(spec, key);
        if !v.is_empty() {
            each_invalid(errs, &path::child(field, key), v, dns1123_label(v));
        }
    }
    if let Some(d) = int_of(&spec["activeDeadlineSeconds"])
        && !(1..=i64::from(i32::MAX)).contains(&d)
    {
        errs.push(FieldError::invalid(
            &path::child(field, "activeDeadlineSeconds"),
            BadValue::Int(d),
            inclusive_range_error(1, i64::from(i32::MAX)),
        ));
    }
}

/// `ValidatePodTemplateSpec` (of a Job) at `field` (`spec.template`):
/// labels and annotations at `spec.template.labels`/`.annotations`, then the
/// pod spec.
pub fn validate_pod_template(tpl: &Value, field: &str, errs: &mut ErrorList) {
    let md = &tpl["metadata"];
    validate_labels(&md["labels"], &path::child(field, "labels"), errs);
    validate_annotations(&md["annotations"], &path::child(field, "annotations"), errs);
    validate_pod_spec(&tpl["spec"], &path::child(field, "spec"), errs);
}

/// `ValidatePodCreate`: metadata, the spec, and what only bare pods check.
pub fn validate_pod(pod: &Value) -> ErrorList {
    let mut errs = ErrorList::new();
    super::meta::validate_object_meta(&pod["metadata"], &mut errs);
    validate_pod_spec(&pod["spec"], "spec", &mut errs);
    pod_only(&pod["spec"], &mut errs);
    errs
}

fn pod_only(spec: &Value, errs: &mut ErrorList) {
    for key in ["containers", "initContainers"] {
        for (i, c) in items(spec, key).iter().enumerate() {
            let image = str_of(c, "image");
            if image.trim() != image {
                errs.push(FieldError::invalid(
                    &path::child(&path::index(&path::child("spec", key), i), "image"),
                    BadValue::Str(image.to_string()),
                    "must not have leading or trailing whitespace",
                ));
            }
        }
    }
}

/// `ValidatePodUpdate` (spec part): only container images,
/// `activeDeadlineSeconds`, added tolerations and a negative grace period
/// set to 1 may change.
pub fn validate_pod_update(new: &Value, old: &Value) -> ErrorList {
    let mut errs = ErrorList::new();
    super::meta::validate_object_meta_update(&new["metadata"], &old["metadata"], &mut errs);
    validate_pod_spec(&new["spec"], "spec", &mut errs);
    pod_only(&new["spec"], &mut errs);
    let (ns, os) = (&new["spec"], &old["spec"]);
    if let Some(d) = int_of(&ns["activeDeadlineSeconds"]) {
        if let Some(o) = int_of(&os["activeDeadlineSeconds"])
            && o < d
        {
            errs.push(FieldError::invalid(
                "spec.activeDeadlineSeconds",
                BadValue::Int(d),
                "must be less than or equal to previous value",
            ));
        }
    } else if !os["activeDeadlineSeconds"].is_null() {
        errs.push(FieldError::invalid(
            "spec.activeDeadlineSeconds",
            BadValue::Raw("null".into()),
            "must not update from a positive integer to nil value",
        ));
    }
    let mut munged = ns.clone();
    for key in ["containers", "initContainers"] {
        if items(&munged, key).len() != items(os, key).len() {
            errs.push(FieldError::forbidden(
                &path::child("spec", key),
                "pod updates may not add or remove containers",
            ));
            return errs;
        }
        if let Some(cs) = munged[key].as_array_mut() {
            for (i, c) in cs.iter_mut().enumerate() {
                c["image"] = os[key][i]["image"].clone();
            }
        }
    }
    for key in ["activeDeadlineSeconds", "tolerations"] {
        munged[key] = os[key].clone();
    }
    if int_of(&os["terminationGracePeriodSeconds"]).is_some_and(|g| g < 0)
        && munged["terminationGracePeriodSeconds"] == 1
    {
        munged["terminationGracePeriodSeconds"] = os["terminationGracePeriodSeconds"].clone();
    }
    let strip_nulls = |v: &Value| -> Value { strip_null_fields(v) };
    if strip_nulls(&munged) != strip_nulls(os) {
        let changed: Vec<String> = diff_keys(&strip_nulls(os), &strip_nulls(&munged));
        errs.push(FieldError::forbidden(
            "spec",
            format!(
                "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)\n  changed: {}",
                changed.join(", ")
            ),
        ));
    }
    errs
}

/// A copy without object fields set to null.
pub(crate) fn strip_null_fields(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), strip_null_fields(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(strip_null_fields).collect()),
        other => other.clone(),
    }
}

/// The top-level keys whose values differ.
pub(crate) fn diff_keys(a: &Value, b: &Value) -> Vec<String> {
    let mut keys: BTreeSet<&String> = BTreeSet::new();
    for m in [a, b].into_iter().filter_map(Value::as_object) {
        keys.extend(m.keys());
    }
    keys.into_iter()
        .filter(|k| a[k.as_str()] != b[k.as_str()])
        .map(|k| go_quote(k))
        .collect()
}

/// Upstream's warnings for a pod spec at `field` (`pkg/api/pod/warnings.go`):
/// a negative grace period is accepted with a warning.
pub fn warnings_for_pod_spec(spec: &Value, field: &str) -> Vec<String> {
    let mut w = Vec::new();
    if int_of(&spec["terminationGracePeriodSeconds"]).is_some_and(|g| g < 0) {
        w.push(format!(
            "{}: must be >= 0; negative values are invalid and will be treated as 1",
            path::child(field, "terminationGracePeriodSeconds")
        ));
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(c: Value) -> Value {
        json!({"restartPolicy": "Never", "dnsPolicy": "ClusterFirst", "containers": [c]})
    }

    fn container() -> Value {
        json!({"name": "driver", "image": "img:1", "imagePullPolicy": "IfNotPresent",
            "terminationMessagePolicy": "File"})
    }

    fn errors(spec: &Value) -> Vec<String> {
        let mut errs = ErrorList::new();
        validate_pod_spec(spec, "spec", &mut errs);
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_valid_driver_spec_passes() {
        let mut c = container();
        c["env"] = json!([{"name": "TCAB_JOB_ID", "value": "1"},
            {"name": "TCAB_DRIVER_POD_IP", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}}]);
        c["envFrom"] = json!([{"secretRef": {"name": "driver-secrets"}}]);
        c["volumeMounts"] =
            json!([{"name": "subscription", "mountPath": "/sub", "readOnly": true}]);
        c["resources"] =
            json!({"requests": {"cpu": "250m", "memory": "1Gi"}, "limits": {"cpu": "2"}});
        c["ports"] = json!([{"name": "http", "containerPort": 8080, "protocol": "TCP"}]);
        let mut s = spec(c);
        s["volumes"] = json!([{"name": "subscription", "secret": {"secretName": "sub", "optional": true, "defaultMode": 288}}]);
        s["securityContext"] = json!({"fsGroup": 1000});
        assert!(errors(&s).is_empty(), "{:?}", errors(&s));
    }

    #[test]
    fn each_rule_names_its_field() {
        let mut c = container();
        c["env"] = json!([{"name": "OK", "value": "1"}, {"name": "1BAD", "value": "x"},
            {"name": "IP", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.phase"}}},
            {"name": "X", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.nope"}}}]);
        c["envFrom"] = json!([{"prefix": "9x", "secretRef": {"name": "Bad_Name"}}, {}]);
        c["volumeMounts"] =
            json!([{"name": "missing", "mountPath": "/a"}, {"name": "v", "mountPath": "/a"}]);
        c["resources"] = json!({"requests": {"cpu": "2", "memory": "-1"}, "limits": {"cpu": "1"}});
        c["ports"] = json!([{"name": "p", "containerPort": 70000, "protocol": "TCP"}, {"name": "p", "containerPort": 1, "protocol": "ICMP"}]);
        let mut s = spec(c.clone());
        s["containers"] = json!([c.clone(), c]);
        s["volumes"] =
            json!([{"name": "v", "emptyDir": {}}, {"name": "v", "emptyDir": {}}, {"name": "w"}]);
        s["securityContext"] = json!({"fsGroup": -1});
        let errs = errors(&s);
        let has = |needle: &str| errs.iter().any(|e| e.contains(needle));
        for needle in [
            "spec.containers[0].env[1].name: Invalid value: \"1BAD\": a valid environment variable name",
            "spec.containers[0].env[2].valueFrom.fieldRef.fieldPath: Unsupported value: \"status.phase\": supported values: \"metadata.name\"",
            "spec.containers[0].env[3].valueFrom.fieldRef.fieldPath: Invalid value: \"status.nope\": error converting fieldPath: field label not supported: status.nope",
            "spec.containers[0].envFrom[0].prefix: Invalid value: \"9x\"",
            "spec.containers[0].envFrom[0].secretRef.name: Invalid value: \"Bad_Name\"",
            "spec.containers[0].envFrom: Invalid value: \"\": must specify one of: `configMapRef` or `secretRef`",
            "spec.containers[0].volumeMounts[0].name: Not found: \"missing\"",
            "spec.containers[0].volumeMounts[1].mountPath: Invalid value: \"/a\": must be unique",
            "spec.containers[0].resources.requests: Invalid value: \"2\": must be less than or equal to cpu limit of 1",
            "spec.containers[0].resources.requests[memory]: Invalid value: \"-1\": must be greater than or equal to 0",
            "spec.containers[0].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive",
            "spec.containers[0].ports[1].name: Duplicate value: \"p\"",
            "spec.containers[0].ports[1].protocol: Unsupported value: \"ICMP\": supported values: \"SCTP\", \"TCP\", \"UDP\"",
            "spec.containers[1].name: Duplicate value: \"driver\"",
            "spec.volumes[1].name: Duplicate value: \"v\"",
            "spec.volumes[2]: Required value: must specify a volume type",
            "spec.securityContext.fsGroup: Invalid value: -1: must be between 0 and 2147483647, inclusive",
        ] {
            assert!(has(needle), "missing {needle:?} in {errs:#?}");
        }
    }

    /// The securityContexts the dispatcher's defaults give (PodSecurity
    /// `restricted`) pass; a seccomp profile is checked as upstream checks it,
    /// in the pod's context and a container's alike.
    #[test]
    fn security_contexts_and_their_seccomp_profiles() {
        let mut c = container();
        c["securityContext"] = json!({"allowPrivilegeEscalation": false,
            "capabilities": {"drop": ["ALL"]}});
        let mut s = spec(c);
        s["securityContext"] =
            json!({"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}});
        assert!(errors(&s).is_empty(), "{:?}", errors(&s));
        s["securityContext"]["seccompProfile"] =
            json!({"type": "Localhost", "localhostProfile": "profiles/driver.json"});
        assert!(errors(&s).is_empty(), "{:?}", errors(&s));

        let cases: [(Value, &str); 5] = [
            (
                json!({"type": "Default"}),
                "seccompProfile.type: Unsupported value: \"Default\": supported values: \"Localhost\", \"RuntimeDefault\", \"Unconfined\"",
            ),
            (
                json!({}),
                "seccompProfile.type: Required value: type is required when seccompProfile is set",
            ),
            (
                json!({"type": "Localhost"}),
                "seccompProfile.localhostProfile: Required value: must be set when seccomp type is Localhost",
            ),
            (
                json!({"type": "Localhost", "localhostProfile": "/etc/p.json"}),
                "seccompProfile.localhostProfile: Invalid value: \"/etc/p.json\": must be a relative path",
            ),
            (
                json!({"type": "RuntimeDefault", "localhostProfile": "p.json"}),
                "seccompProfile.localhostProfile: Invalid value: ",
            ),
        ];
        for (profile, needle) in cases {
            for at in ["spec.securityContext", "spec.containers[0].securityContext"] {
                let mut s = spec(container());
                if at == "spec.securityContext" {
                    s["securityContext"] = json!({"seccompProfile": profile.clone()});
                } else {
                    s["containers"][0]["securityContext"] =
                        json!({"seccompProfile": profile.clone()});
                }
                let errs = errors(&s);
                let want = format!("{at}.{needle}");
                assert!(
                    errs.iter().any(|e| e.starts_with(&want)),
                    "missing {want:?} in {errs:#?}"
                );
            }
        }

        let mut c = container();
        c["securityContext"] = json!({"allowPrivilegeEscalation": false,
            "capabilities": {"add": ["CAP_SYS_ADMIN"]}});
        let errs = errors(&spec(c));
        assert!(
            errs.iter().any(|e| e.starts_with("spec.containers[0].securityContext: Invalid value: ")
                && e.ends_with("cannot set `allowPrivilegeEscalation` to false and `capabilities.Add` CAP_SYS_ADMIN")),
            "{errs:#?}"
        );
    }

    #[test]
    fn enums_and_required() {
        let mut c = container();
        c["imagePullPolicy"] = json!("Sometimes");
        c["name"] = json!("");
        c.as_object_mut().unwrap().remove("image");
        let mut s = spec(c);
        s["restartPolicy"] = json!("Rarely");
        let errs = errors(&s);
        assert!(
            errs.contains(&"spec.containers[0].name: Required value".to_string()),
            "{errs:?}"
        );
        assert!(errs.contains(&"spec.containers[0].image: Required value".to_string()));
        assert!(errs.contains(&"spec.containers[0].imagePullPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"IfNotPresent\", \"Never\"".to_string()));
        assert!(errs.contains(&"spec.restartPolicy: Unsupported value: \"Rarely\": supported values: \"Always\", \"OnFailure\", \"Never\"".to_string()));
        assert_eq!(
            errors(&json!({"restartPolicy": "Never", "dnsPolicy": "ClusterFirst"})),
            ["spec.containers: Required value"]
        );
    }

    #[test]
    fn pod_updates_change_only_images() {
        let old = json!({"metadata": {"name": "p"}, "spec": spec(container())});
        let mut new = old.clone();
        new["spec"]["containers"][0]["image"] = json!("img:2");
        assert!(validate_pod_update(&new, &old).is_empty());
        new["spec"]["restartPolicy"] = json!("OnFailure");
        let errs = validate_pod_update(&new, &old);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(errs[0].etype.reason(), "FieldValueForbidden");
        assert!(errs[0].detail.contains("\"restartPolicy\""));
    }

    #[test]
    fn negative_grace_is_a_warning() {
        let mut s = spec(container());
        s["terminationGracePeriodSeconds"] = json!(-5);
        assert!(errors(&s).is_empty());
        assert_eq!(
            warnings_for_pod_spec(&s, "spec.template.spec"),
            [
                "spec.template.spec.terminationGracePeriodSeconds: must be >= 0; negative values are invalid and will be treated as 1"
            ]
        );
    }
}
