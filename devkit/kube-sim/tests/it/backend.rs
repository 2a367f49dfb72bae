//! A tiny fake tcab backend on 127.0.0.1:0 that records what drivers and
//! publishers send, and can refuse a token from a given state on.

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One call received.
#[derive(Debug, Clone)]
pub struct Call {
    pub path: String,
    pub token: String,
    pub body: Value,
}

#[derive(Default)]
pub struct Behaviour {
    /// Answer 401 to status reports of this state (and later ones).
    pub refuse_from: Option<String>,
    /// Hold the answer to a `failed` status report this long.
    pub slow_failed: Option<Duration>,
    /// Answer 500 to the next N calls.
    pub fail_next: u32,
    /// Answer 500 to the first N reports of this state.
    pub fail_state: Option<(String, u32)>,
}

#[derive(Clone, Default)]
pub struct FakeBackend {
    pub calls: Arc<Mutex<Vec<Call>>>,
    pub behaviour: Arc<Mutex<Behaviour>>,
}

const ORDER: [&str; 6] = [
    "starting",
    "running",
    "validating",
    "storing",
    "succeeded",
    "failed",
];

async fn record(State(b): State<FakeBackend>, req: Request) -> axum::response::Response {
    let path = req.uri().path().to_string();
    let token = req
        .headers()
        .get("authorization")
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.strip_prefix("Bearer "))
        .unwrap_or("")
        .to_string();
    let bytes = axum::body::to_bytes(req.into_body(), 1 << 20)
        .await
        .unwrap_or_default();
    let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let state = body["state"].as_str().unwrap_or("").to_string();
    let (refuse, slow, fail) = {
        let mut beh = b.behaviour.lock().unwrap();
        let refuse = beh.refuse_from.as_ref().is_some_and(|from| {
            let pos = |s: &str| ORDER.iter().position(|x| *x == s).unwrap_or(99);
            !state.is_empty() && pos(&state) >= pos(from)
        });
        let mut fail = beh.fail_next > 0;
        if fail {
            beh.fail_next -= 1;
        }
        if let Some((st, n)) = beh.fail_state.as_mut()
            && *st == state
            && *n > 0
        {
            *n -= 1;
            fail = true;
        }
        (refuse, beh.slow_failed.filter(|_| state == "failed"), fail)
    };
    b.calls.lock().unwrap().push(Call {
        path: path.clone(),
        token,
        body,
    });
    if fail {
        return (StatusCode::INTERNAL_SERVER_ERROR, "{}").into_response();
    }
    if refuse {
        return (
            StatusCode::UNAUTHORIZED,
            r#"{"error":{"code":"unauthorized","message":"unauthorized"}}"#,
        )
            .into_response();
    }
    if let Some(d) = slow {
        tokio::time::sleep(d).await;
    }
    let id = path.split('/').nth(2).unwrap_or("").to_string();
    (
        StatusCode::OK,
        axum::Json(
            json!({"id": id, "state": if state.is_empty() { "running".into() } else { state }}),
        ),
    )
        .into_response()
}

impl FakeBackend {
    /// Starts it; returns it and its base URL.
    pub async fn start() -> (Self, String) {
        let b = FakeBackend::default();
        let app = axum::Router::new().fallback(record).with_state(b.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (b, url)
    }

    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    /// `"<path> <state>"` of each call, e.g. `/jobs/j1/status running`.
    pub fn summary(&self) -> Vec<String> {
        self.calls()
            .iter()
            .map(|c| {
                let what = c.body["state"]
                    .as_str()
                    .or(c.body["outcome"].as_str())
                    .unwrap_or("");
                format!("{} {what}", c.path).trim_end().to_string()
            })
            .collect()
    }
}
