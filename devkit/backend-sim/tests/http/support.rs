//! A running sim and a small client for the tests.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use std::sync::Arc;
use tcab_backend_sim::{ManualClock, SimHandle, SimOptions, spawn};

pub const SERVICE: &str = "service-token-for-tests";

/// The instant every test's clock starts at.
pub fn start_time() -> jiff::Timestamp {
    "2026-11-29T17:00:00Z".parse().unwrap()
}

/// A sim on 127.0.0.1:0 with a manual clock and the test-clock endpoint.
pub struct Rig {
    pub sim: SimHandle,
    pub http: reqwest::Client,
    pub base: String,
}

/// One answer: status and JSON body (Null when empty).
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub body: Value,
}

impl Rig {
    pub async fn start() -> Rig {
        let mut opts = SimOptions::in_memory(SERVICE);
        opts.enable_test_clock = true;
        opts.clock = Arc::new(ManualClock::new(start_time()));
        Rig::with(opts).await
    }

    pub async fn with(opts: SimOptions) -> Rig {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let sim = spawn(opts).await.expect("sim starts");
        let base = sim.url();
        Rig {
            sim,
            http: reqwest::Client::new(),
            base,
        }
    }

    pub async fn call(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> Answer {
        let mut req = self.http.request(method, format!("{}{}", self.base, path));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.expect("request reaches the sim");
        let status = resp.status();
        let bytes = resp.bytes().await.expect("body");
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|e| panic!("non-JSON body {bytes:?}: {e}"))
        };
        Answer { status, body }
    }

    /// A POST with a raw (possibly malformed) body.
    pub async fn post_raw(&self, path: &str, token: &str, body: &'static str) -> Answer {
        let resp = self
            .http
            .post(format!("{}{}", self.base, path))
            .bearer_auth(token)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        let status = resp.status();
        let body = resp.json().await.unwrap_or(Value::Null);
        Answer { status, body }
    }

    pub async fn get(&self, path: &str) -> Answer {
        self.call(Method::GET, path, Some(SERVICE), None).await
    }

    pub async fn post(&self, path: &str, body: Value) -> Answer {
        self.call(Method::POST, path, Some(SERVICE), Some(body))
            .await
    }

    pub async fn post_as(&self, path: &str, token: &str, body: Value) -> Answer {
        self.call(Method::POST, path, Some(token), Some(body)).await
    }

    /// Enqueues one run; answers its id.
    pub async fn enqueue(&self, harness: &str, model: &str, jam: Option<&str>) -> String {
        let a = self
            .post(
                "/jobs",
                json!({"harness": harness, "model": model, "case": "c", "jam": jam,
                       "launch_request": {"case": "c"}}),
            )
            .await;
        assert_eq!(a.status, StatusCode::CREATED, "{:?}", a.body);
        a.body["id"].as_str().unwrap().to_string()
    }

    /// Claims a run: Some((id, token, whole job object)) or None on 204.
    pub async fn claim(&self) -> Option<(String, String, Value)> {
        let a = self
            .call(Method::POST, "/jobs/next", Some(SERVICE), None)
            .await;
        match a.status {
            StatusCode::NO_CONTENT => None,
            StatusCode::OK => {
                let job = a.body["job"].clone();
                Some((
                    job["id"].as_str().unwrap().to_string(),
                    job["token"].as_str().unwrap().to_string(),
                    job,
                ))
            }
            other => panic!("claim answered {other}: {:?}", a.body),
        }
    }

    pub async fn claim_publish(&self) -> Option<(String, String, Value)> {
        let a = self
            .call(Method::POST, "/publish-jobs/next", Some(SERVICE), None)
            .await;
        match a.status {
            StatusCode::NO_CONTENT => None,
            StatusCode::OK => {
                let job = a.body["publish_job"].clone();
                Some((
                    job["id"].as_str().unwrap().to_string(),
                    job["token"].as_str().unwrap().to_string(),
                    job,
                ))
            }
            other => panic!("publish claim answered {other}: {:?}", a.body),
        }
    }

    /// Reports a state with the per-job token; answers the status.
    pub async fn report(&self, id: &str, token: &str, body: Value) -> Answer {
        self.post_as(&format!("/jobs/{id}/status"), token, body)
            .await
    }

    pub async fn job(&self, id: &str) -> Value {
        let a = self.get(&format!("/jobs/{id}")).await;
        assert_eq!(a.status, StatusCode::OK, "{:?}", a.body);
        a.body
    }

    pub async fn state(&self, id: &str) -> String {
        self.job(id).await["state"].as_str().unwrap().to_string()
    }

    /// Moves the backend clock through the test-clock endpoint.
    pub async fn advance(&self, seconds: f64) {
        let a = self
            .post("/admin/clock/advance", json!({"seconds": seconds}))
            .await;
        assert_eq!(a.status, StatusCode::OK, "{:?}", a.body);
    }
}

/// Asserts an error answer: the status and the contract's error shape.
pub fn assert_error(a: &Answer, status: StatusCode, code: &str) {
    assert_eq!(a.status, status, "body: {:?}", a.body);
    assert_eq!(a.body["error"]["code"], code, "body: {:?}", a.body);
    assert!(a.body["error"]["message"].is_string(), "body: {:?}", a.body);
}

/// Parses an RFC 3339 field.
pub fn ts(v: &Value) -> jiff::Timestamp {
    v.as_str()
        .unwrap_or_else(|| panic!("not a timestamp string: {v:?}"))
        .parse()
        .unwrap()
}
