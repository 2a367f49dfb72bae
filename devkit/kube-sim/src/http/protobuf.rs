//! The Kubernetes protobuf encoding, read only and only for the kinds
//! kubectl's typed `create` commands send that way (`kubectl create secret`,
//! `kubectl create serviceaccount`): the `k8s\0` envelope around a
//! `runtime.Unknown`, whose `raw` bytes are the object (field numbers from
//! k8s.io/api/core/v1/generated.proto and apimachinery's meta/v1). Other
//! kinds sent as protobuf get 415.

use crate::status::ApiError;
use crate::store::Kind;
use serde_json::{Map, Value, json};

/// The protobuf media type.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

const MAGIC: &[u8] = b"k8s\0";

#[derive(Debug, Clone, Copy)]
enum Wire<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

fn malformed() -> ApiError {
    ApiError::bad_request("the protobuf request body is malformed")
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    fn varint(&mut self) -> Result<u64, ApiError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *self.buf.get(self.pos).ok_or_else(malformed)?;
            self.pos += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(malformed())
    }

    /// The next field: (number, value); `None` at the end.
    fn field(&mut self) -> Result<Option<(u64, Wire<'a>)>, ApiError> {
        if self.pos >= self.buf.len() {
            return Ok(None);
        }
        let tag = self.varint()?;
        let value = match tag & 7 {
            0 => Wire::Varint(self.varint()?),
            1 => {
                self.pos += 8;
                Wire::Fixed
            }
            2 => {
                let len = usize::try_from(self.varint()?).map_err(|_| malformed())?;
                let end = self.pos.checked_add(len).ok_or_else(malformed)?;
                let b = self.buf.get(self.pos..end).ok_or_else(malformed)?;
                self.pos = end;
                Wire::Bytes(b)
            }
            5 => {
                self.pos += 4;
                Wire::Fixed
            }
            _ => return Err(malformed()),
        };
        if self.pos > self.buf.len() {
            return Err(malformed());
        }
        Ok(Some((tag >> 3, value)))
    }
}

fn text(w: Wire<'_>) -> Result<String, ApiError> {
    match w {
        Wire::Bytes(b) => String::from_utf8(b.to_vec()).map_err(|_| malformed()),
        _ => Err(malformed()),
    }
}

fn bytes(w: Wire<'_>) -> Result<&[u8], ApiError> {
    match w {
        Wire::Bytes(b) => Ok(b),
        _ => Err(malformed()),
    }
}

/// A map entry (key = 1, value = 2).
fn entry(w: Wire<'_>) -> Result<(String, Vec<u8>), ApiError> {
    let mut r = Reader::new(bytes(w)?);
    let (mut k, mut v) = (String::new(), Vec::new());
    while let Some((n, f)) = r.field()? {
        match n {
            1 => k = text(f)?,
            2 => v = bytes(f)?.to_vec(),
            _ => {}
        }
    }
    Ok((k, v))
}

fn insert_nonempty(m: &mut Map<String, Value>, k: &str, v: String) {
    if !v.is_empty() {
        m.insert(k.into(), json!(v));
    }
}

fn owner_reference(w: Wire<'_>) -> Result<Value, ApiError> {
    let mut r = Reader::new(bytes(w)?);
    let mut o = Map::new();
    while let Some((n, f)) = r.field()? {
        match (n, f) {
            (1, f) => insert_nonempty(&mut o, "kind", text(f)?),
            (3, f) => insert_nonempty(&mut o, "name", text(f)?),
            (4, f) => insert_nonempty(&mut o, "uid", text(f)?),
            (5, f) => insert_nonempty(&mut o, "apiVersion", text(f)?),
            (6, Wire::Varint(v)) => {
                o.insert("controller".into(), json!(v != 0));
            }
            (7, Wire::Varint(v)) => {
                o.insert("blockOwnerDeletion".into(), json!(v != 0));
            }
            _ => {}
        }
    }
    Ok(Value::Object(o))
}

fn object_meta(w: Wire<'_>) -> Result<Value, ApiError> {
    let mut r = Reader::new(bytes(w)?);
    let mut md = Map::new();
    let (mut labels, mut annotations) = (Map::new(), Map::new());
    let (mut finalizers, mut owners) = (Vec::new(), Vec::new());
    while let Some((n, f)) = r.field()? {
        match n {
            1 => insert_nonempty(&mut md, "name", text(f)?),
            2 => insert_nonempty(&mut md, "generateName", text(f)?),
            3 => insert_nonempty(&mut md, "namespace", text(f)?),
            11 | 12 => {
                let (k, v) = entry(f)?;
                let v = String::from_utf8(v).map_err(|_| malformed())?;
                if n == 11 {
                    &mut labels
                } else {
                    &mut annotations
                }
                .insert(k, json!(v));
            }
            13 => owners.push(owner_reference(f)?),
            14 => finalizers.push(json!(text(f)?)),
            _ => {}
        }
    }
    if !labels.is_empty() {
        md.insert("labels".into(), Value::Object(labels));
    }
    if !annotations.is_empty() {
        md.insert("annotations".into(), Value::Object(annotations));
    }
    if !finalizers.is_empty() {
        md.insert("finalizers".into(), json!(finalizers));
    }
    if !owners.is_empty() {
        md.insert("ownerReferences".into(), json!(owners));
    }
    Ok(Value::Object(md))
}

fn encode_b64(data: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in data.chunks(3) {
        let n = u32::from(c[0]) << 16
            | u32::from(*c.get(1).unwrap_or(&0)) << 8
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn secret(raw: &[u8]) -> Result<Value, ApiError> {
    let mut r = Reader::new(raw);
    let mut s = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {}});
    let (mut data, mut string_data) = (Map::new(), Map::new());
    while let Some((n, f)) = r.field()? {
        match (n, f) {
            (1, f) => s["metadata"] = object_meta(f)?,
            (2, f) => {
                let (k, v) = entry(f)?;
                data.insert(k, json!(encode_b64(&v)));
            }
            (3, f) => {
                let t = text(f)?;
                if !t.is_empty() {
                    s["type"] = json!(t);
                }
            }
            (4, f) => {
                let (k, v) = entry(f)?;
                string_data.insert(k, json!(String::from_utf8(v).map_err(|_| malformed())?));
            }
            (5, Wire::Varint(v)) => s["immutable"] = json!(v != 0),
            _ => {}
        }
    }
    if !data.is_empty() {
        s["data"] = Value::Object(data);
    }
    if !string_data.is_empty() {
        s["stringData"] = Value::Object(string_data);
    }
    Ok(s)
}

fn name_ref(w: Wire<'_>) -> Result<Value, ApiError> {
    let mut r = Reader::new(bytes(w)?);
    let mut o = Map::new();
    while let Some((n, f)) = r.field()? {
        match n {
            1 => insert_nonempty(&mut o, "kind", text(f)?),
            2 => insert_nonempty(&mut o, "namespace", text(f)?),
            3 => insert_nonempty(&mut o, "name", text(f)?),
            _ => {}
        }
    }
    Ok(Value::Object(o))
}

fn local_ref(w: Wire<'_>) -> Result<Value, ApiError> {
    let mut r = Reader::new(bytes(w)?);
    let mut o = Map::new();
    while let Some((n, f)) = r.field()? {
        if n == 1 {
            insert_nonempty(&mut o, "name", text(f)?);
        }
    }
    Ok(Value::Object(o))
}

fn service_account(raw: &[u8]) -> Result<Value, ApiError> {
    let mut r = Reader::new(raw);
    let mut sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {}});
    let (mut secrets, mut pulls) = (Vec::new(), Vec::new());
    while let Some((n, f)) = r.field()? {
        match (n, f) {
            (1, f) => sa["metadata"] = object_meta(f)?,
            (2, f) => secrets.push(name_ref(f)?),
            (3, f) => pulls.push(local_ref(f)?),
            (4, Wire::Varint(v)) => sa["automountServiceAccountToken"] = json!(v != 0),
            _ => {}
        }
    }
    if !secrets.is_empty() {
        sa["secrets"] = json!(secrets);
    }
    if !pulls.is_empty() {
        sa["imagePullSecrets"] = json!(pulls);
    }
    Ok(sa)
}

/// Decodes a protobuf request body of `kind` into the object's JSON.
pub fn decode(kind: Kind, body: &[u8]) -> Result<Value, ApiError> {
    let unsupported = || {
        ApiError::unsupported_media(&format!(
            "{MEDIA_TYPE} for {} (the sim reads protobuf only for secrets and serviceaccounts)",
            kind.resource()
        ))
    };
    if !matches!(kind, Kind::Secret | Kind::ServiceAccount) {
        return Err(unsupported());
    }
    let envelope = body.strip_prefix(MAGIC).ok_or_else(malformed)?;
    let mut r = Reader::new(envelope);
    let mut raw: &[u8] = &[];
    let mut type_kind = String::new();
    while let Some((n, f)) = r.field()? {
        match n {
            1 => {
                let mut t = Reader::new(bytes(f)?);
                while let Some((m, g)) = t.field()? {
                    if m == 2 {
                        type_kind = text(g)?;
                    }
                }
            }
            2 => raw = bytes(f)?,
            _ => {}
        }
    }
    if !type_kind.is_empty() && type_kind != kind.kind() {
        return Err(ApiError::bad_request(format!(
            "the kind {type_kind:?} does not match the resource {}",
            kind.resource()
        )));
    }
    match kind {
        Kind::Secret => secret(raw),
        _ => service_account(raw),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The body `kubectl create secret generic harness --from-literal=API_KEY=x
    /// --from-literal=B=yy` sends (kubectl v1.32).
    const SECRET: &[u8] = b"k8s\x00\x0a\x0c\x0a\x02v1\x12\x06Secret\x12\x32\x0a\x17\x0a\x07harness\x12\x00\x1a\x00\x22\x00\x2a\x00\x32\x00\x38\x00\x42\x00\x12\x0c\x0a\x07API_KEY\x12\x01x\x12\x07\x0a\x01B\x12\x02yy\x1a\x00\x1a\x00\x22\x00";
    /// The body of `kubectl create serviceaccount runner`.
    const SA: &[u8] = b"k8s\x00\x0a\x14\x0a\x02v1\x12\x0eServiceAccount\x12\x18\x0a\x16\x0a\x06runner\x12\x00\x1a\x00\x22\x00\x2a\x00\x32\x00\x38\x00\x42\x00\x1a\x00\x22\x00";

    #[test]
    fn reads_what_kubectl_sends() {
        let s = decode(Kind::Secret, SECRET).unwrap();
        assert_eq!(s["metadata"], json!({"name": "harness"}));
        assert_eq!(s["data"], json!({"API_KEY": "eA==", "B": "eXk="}));
        assert!(s.get("type").is_none());
        let sa = decode(Kind::ServiceAccount, SA).unwrap();
        assert_eq!(sa["metadata"], json!({"name": "runner"}));
        assert_eq!(decode(Kind::Pod, SA).unwrap_err().code, 415);
        assert_eq!(decode(Kind::Secret, &SECRET[..20]).unwrap_err().code, 400);
        assert_eq!(decode(Kind::Secret, b"junk").unwrap_err().code, 400);
        assert_eq!(decode(Kind::Secret, SA).unwrap_err().code, 400);
    }
}
