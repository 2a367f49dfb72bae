//! LIST: selectors, paging with continue tokens, Tables.

use super::{Query, View, ok, selectors};
use crate::objects;
use crate::status::ApiError;
use crate::store::Kind;
use crate::table;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

pub(super) fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

pub(super) fn unhex(s: &str) -> Option<String> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}

/// A continue token: the list's resourceVersion, then the last key sent.
pub(super) fn encode_continue(rv: u64, ns: &str, name: &str) -> String {
    hex(&format!("{rv}\u{0}{ns}\u{0}{name}"))
}

pub(super) fn decode_continue(token: &str) -> Option<(u64, String, String)> {
    let s = unhex(token)?;
    let mut parts = s.split('\u{0}');
    Some((
        parts.next()?.parse().ok()?,
        parts.next()?.to_string(),
        parts.next()?.to_string(),
    ))
}

pub(super) fn list(
    view: &View<'_>,
    kind: Kind,
    ns: Option<&str>,
    q: &Query,
) -> Result<Response, ApiError> {
    let sim = view.sim;
    let (label, field) = selectors(kind, q)?;
    let limit: Option<usize> = q
        .get("limit")
        .and_then(|l| l.parse().ok())
        .filter(|l| *l > 0);
    let after = match q.get("continue").filter(|c| !c.is_empty()) {
        Some(c) => Some(
            decode_continue(c).ok_or_else(|| ApiError::bad_request("invalid continue token"))?,
        ),
        None => None,
    };
    if q.get("resourceVersionMatch").map(String::as_str) == Some("Exact")
        && let Some(rv) = q.get("resourceVersion").and_then(|r| r.parse::<u64>().ok())
        && rv != sim.store.rv()
    {
        return Err(ApiError::expired_list());
    }
    let selects = |o: &serde_json::Value| label.matches(o) && field.matches(o);
    let everything = label.selects_all() && field.selects_all();
    let crate::store::Page { rv, items, more } = sim.store.list_page(
        kind,
        ns,
        after
            .as_ref()
            .map(|(rv, cns, cname)| (*rv, cns.as_str(), cname.as_str())),
        limit,
        (!everything).then_some(&selects as &dyn Fn(&serde_json::Value) -> bool),
    )?;
    let cont = match items.last() {
        Some(last) if more.is_some() => Some(encode_continue(
            rv,
            last["metadata"]["namespace"].as_str().unwrap_or(""),
            objects::name(last),
        )),
        _ => None,
    };
    let page = &items[..];
    if view.table {
        let t = table::table(
            &sim.clock,
            kind,
            page.iter().map(|a| &**a),
            rv,
            cont,
            view.include,
        );
        return Ok(ok(StatusCode::OK, &t));
    }
    let mut md = json!({"resourceVersion": rv.to_string()});
    // The API server counts what remains only for a list with no selector
    // (storage.PrepareContinueToken): a selected one has no count.
    if let Some(c) = cont {
        md["continue"] = json!(c);
        if everything {
            md["remainingItemCount"] = json!(more);
        }
    }
    // Serialize by hand so 10,000 items are not cloned into one Value.
    let mut out = String::with_capacity(page.len() * 1024 + 128);
    out.push_str(&format!(
        "{{\"kind\":\"{}List\",\"apiVersion\":\"{}\",\"metadata\":{},\"items\":[",
        kind.kind(),
        kind.api_version(),
        md
    ));
    for (i, item) in page.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&item.to_string());
    }
    out.push_str("]}");
    Ok(([(header::CONTENT_TYPE, "application/json")], out).into_response())
}

/// LIST of `events.k8s.io/v1` Events: the stored core Events selected by
/// the selectors read in their core names, each converted
/// ([`crate::events_v1`]). One page: `limit` and `continue` are not read.
pub(super) fn list_events_v1(
    view: &View<'_>,
    ns: Option<&str>,
    q: &Query,
) -> Result<Response, ApiError> {
    let mut core_q = q.clone();
    if let Some(fs) = q.get("fieldSelector") {
        core_q.insert(
            "fieldSelector".into(),
            crate::events_v1::core_field_selector(fs),
        );
    }
    let (label, field) = selectors(Kind::Event, &core_q)?;
    let (rv, stored) = view
        .sim
        .store
        .list(Kind::Event, ns, |o| label.matches(o) && field.matches(o));
    let items: Vec<serde_json::Value> = stored
        .iter()
        .map(|e| crate::events_v1::from_core(e))
        .collect();
    if view.table {
        let t = table::table(
            &view.sim.clock,
            Kind::EventV1,
            items.iter(),
            rv,
            None,
            view.include,
        );
        return Ok(ok(StatusCode::OK, &t));
    }
    Ok(ok(
        StatusCode::OK,
        &json!({"kind": "EventList", "apiVersion": crate::events_v1::API_VERSION,
            "metadata": {"resourceVersion": rv.to_string()}, "items": items}),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_round_trip() {
        let t = encode_continue(42, "ns", "job-1");
        assert_eq!(decode_continue(&t), Some((42, "ns".into(), "job-1".into())));
        assert_eq!(decode_continue("zz"), None);
    }
}
