//! The backend's own record for outside checks (`GET /admin/history`): each
//! history entry carries the wall time, the call, the caller and the claim
//! tag of the token in effect; per-job calls refused for their token are
//! kept too. Served only with the test admin on.

use crate::support::*;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::time::{Duration, Instant};

/// The claim tag the dispatcher labels a Job with: 8 hex digits of SHA-256.
fn tag(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))[..8].to_owned()
}

async fn history(rig: &Rig, query: &str) -> Value {
    let a = rig.get(&format!("/admin/history{query}")).await;
    assert_eq!(a.status, StatusCode::OK, "{:?}", a.body);
    a.body
}

fn entries_of<'a>(dump: &'a Value, id: &str) -> Vec<&'a Value> {
    dump["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["job_id"] == id)
        .collect()
}

#[tokio::test]
async fn entries_carry_wall_time_call_caller_and_claim_and_refusals_are_kept() {
    let rig = Rig::start().await;
    let id = rig.enqueue("h", "m", None).await;
    // The claim comes from the dispatcher (its User-Agent).
    let claim = rig
        .http
        .post(format!("{}/jobs/next", rig.base))
        .bearer_auth(SERVICE)
        .header("user-agent", "tcab-dispatcher/9.9.9")
        .send()
        .await
        .unwrap();
    assert_eq!(claim.status(), StatusCode::OK);
    let token = claim.json::<Value>().await.unwrap()["job"]["token"]
        .as_str()
        .unwrap()
        .to_owned();
    // The test clock moves the backend's `at`, never the wall time.
    rig.advance(30.0).await;
    assert_eq!(
        rig.report(&id, &token, json!({"state": "starting"}))
            .await
            .status,
        StatusCode::OK
    );

    let dump = history(&rig, "").await;
    let mine = entries_of(&dump, &id);
    let states: Vec<&str> = mine.iter().map(|e| e["state"].as_str().unwrap()).collect();
    assert_eq!(states, ["queued", "dispatched", "starting"]);
    let (queued, dispatched, starting) = (mine[0], mine[1], mine[2]);
    assert_eq!(queued["call"], "POST /jobs");
    assert_eq!(queued["claim"], Value::Null, "a waiting job has no claim");
    assert_eq!(dispatched["call"], "POST /jobs/next");
    assert_eq!(dispatched["caller"], "tcab-dispatcher/9.9.9");
    assert_eq!(dispatched["claim"], tag(&token).as_str());
    assert_eq!(starting["call"], format!("POST /jobs/{id}/status").as_str());
    assert_eq!(starting["caller"], Value::Null, "no User-Agent sent");
    assert_eq!(starting["claim"], tag(&token).as_str());
    let start = start_time();
    assert_eq!(ts(&dispatched["at"]), start);
    assert_eq!(
        ts(&starting["at"]),
        start + jiff::SignedDuration::from_secs(30)
    );
    for e in &mine {
        assert_eq!(ts(&e["wall_at"]), start, "wall time ignores the test clock");
    }
    let seqs: Vec<i64> = mine.iter().map(|e| e["seq"].as_i64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    // `after` pages on.
    let later = history(&rig, &format!("?after={}", seqs[1])).await;
    assert_eq!(entries_of(&later, &id).len(), 1);
    assert!(dump["refused"].as_array().unwrap().is_empty());

    // A stale token is refused, and the refusal is kept with its claim tag.
    let stale = "tok_run_not-the-current-one";
    let a = rig.report(&id, stale, json!({"state": "running"})).await;
    assert_error(&a, StatusCode::UNAUTHORIZED, "unauthorized");
    let a = rig
        .post_as(
            &format!("/jobs/{id}/record"),
            stale,
            json!({"state_reached": "running", "record": {}}),
        )
        .await;
    assert_eq!(a.status, StatusCode::UNAUTHORIZED);
    let refused = history(&rig, "").await["refused"].clone();
    let refused = refused.as_array().unwrap();
    assert_eq!(refused.len(), 2, "{refused:?}");
    assert_eq!(refused[0]["job_id"], id.as_str());
    assert_eq!(refused[0]["claim"], tag(stale).as_str());
    assert_eq!(
        refused[0]["call"],
        format!("POST /jobs/{id}/status").as_str()
    );
    assert_eq!(
        refused[1]["call"],
        format!("POST /jobs/{id}/record").as_str()
    );
    assert_eq!(ts(&refused[0]["wall_at"]), start);
    assert_eq!(
        ts(&refused[0]["at"]),
        start + jiff::SignedDuration::from_secs(30)
    );
    assert_eq!(
        rig.state(&id).await,
        "starting",
        "a refusal changes nothing"
    );
}

#[tokio::test]
async fn a_stalled_claim_keeps_its_caller_and_is_listed_while_held() {
    let rig = Rig::start().await;
    let id = rig.enqueue("h", "m", None).await;
    let a = rig
        .post(
            "/admin/faults",
            json!({"paths": ["/jobs/next"], "mode": "stall", "seconds": 0.8}),
        )
        .await;
    assert_eq!(a.status, StatusCode::OK);
    let (http, base) = (rig.http.clone(), rig.base.clone());
    let claim = tokio::spawn(async move {
        http.post(format!("{base}/jobs/next"))
            .bearer_auth(SERVICE)
            .header("user-agent", "tcab-dispatcher/1")
            .send()
            .await
    });
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let status = rig.get("/admin/faults").await.body;
        if status["held"] == json!(["/jobs/next"]) {
            assert_eq!(status["rules"][0]["mode"], "stall");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the claim was never held: {status}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(claim.await.unwrap().unwrap().status(), StatusCode::OK);
    let status = rig.get("/admin/faults").await.body;
    assert_eq!(status["held"], json!([]));
    assert_eq!(status["stalled"], 1);
    let dump = history(&rig, "").await;
    let dispatched = entries_of(&dump, &id)
        .into_iter()
        .find(|e| e["state"] == "dispatched")
        .cloned()
        .expect("applied late");
    assert_eq!(dispatched["caller"], "tcab-dispatcher/1");
    assert_eq!(dispatched["call"], "POST /jobs/next");
}

#[tokio::test]
async fn bad_queries_are_refused_and_the_record_needs_the_test_admin() {
    let rig = Rig::start().await;
    for q in ["?after=-1", "?after=x", "?limit=", "?since=3"] {
        let a = rig.get(&format!("/admin/history{q}")).await;
        assert_error(&a, StatusCode::BAD_REQUEST, "bad_request");
    }
    let a = rig
        .call(
            Method::GET,
            "/admin/history",
            Some("not-the-service-token"),
            None,
        )
        .await;
    assert_eq!(a.status, StatusCode::UNAUTHORIZED);
    let plain = Rig::with(tcab_backend_sim::SimOptions::in_memory(SERVICE)).await;
    assert_eq!(
        plain.get("/admin/history").await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        plain.get("/admin/faults").await.status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn calls_are_counted_per_user_agent_and_route_and_reset() {
    let rig = Rig::start().await;
    let id = rig.enqueue("h", "m", None).await;
    for agent in ["tcab-admitter/1", "tcab-lease-keeper/1"] {
        let answer = rig
            .http
            .post(format!("{}/jobs/next", rig.base))
            .bearer_auth(SERVICE)
            .header("user-agent", agent)
            .send()
            .await
            .unwrap();
        assert!(answer.status().is_success(), "{}", answer.status());
    }
    let active = rig
        .http
        .get(format!("{}/jobs/active", rig.base))
        .bearer_auth(SERVICE)
        .header("user-agent", "tcab-lease-keeper/1")
        .send()
        .await
        .unwrap();
    assert_eq!(active.status(), StatusCode::OK);
    let counts = rig.get("/admin/calls").await;
    assert_eq!(counts.status, StatusCode::OK, "{:?}", counts.body);
    assert_eq!(
        counts.body["tcab-admitter/1"]["POST /jobs/next"], 1,
        "{}",
        counts.body
    );
    assert_eq!(counts.body["tcab-lease-keeper/1"]["POST /jobs/next"], 1);
    assert_eq!(counts.body["tcab-lease-keeper/1"]["GET /jobs/active"], 1);
    // Per-job routes are counted by their template, not their id; the admin
    // calls themselves are not counted.
    assert!(!counts.body.to_string().contains(&id), "{}", counts.body);
    assert!(
        !counts.body.to_string().contains("/admin/"),
        "{}",
        counts.body
    );
    // POST answers the counts and starts again from none.
    let taken = rig
        .call(Method::POST, "/admin/calls", Some(SERVICE), None)
        .await;
    assert_eq!(taken.body["tcab-admitter/1"]["POST /jobs/next"], 1);
    let after = rig.get("/admin/calls").await;
    assert_eq!(after.body, json!({}));
}
