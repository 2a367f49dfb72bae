//! 429: what a throttled client reads. Three answers: kube-sim's `throttle`
//! fault rule, the fault proxy's same rule in front of the real API server,
//! and the real API Priority and Fairness (a zero-share level for one user,
//! `tcab_api_proxy::apf::ThrottleLevel`; `server/filters/priority-and-fairness.go`,
//! `apiserver/pkg/endpoints/handlers/responsewriters/errors.go` `TooManyRequests`).
//! On kube-sim both lines are its rule's answer: its 429 stands for APF's.

use anyhow::{Context, Result};
use reqwest::Method;
use serde_json::{Value, json};
use tcab_api_proxy::apf::ThrottleLevel;
use tcab_api_proxy::{ProxyOptions, UpstreamOptions};
use tcab_conformance::cluster::THROTTLED_USER;
use tcab_conformance::{Answer, Cluster, Outcome, differential};
use tcab_kube_sim::{AdminClient, ApiFaultMode, FaultRule};

/// What a 429 is made of: code, content type, body, `Retry-After`, which
/// APF headers it has.
fn throttled(a: &Answer) -> Value {
    let mut apf: Vec<String> = a
        .headers
        .keys()
        .map(|k| k.as_str().to_string())
        .filter(|k| k.starts_with("x-kubernetes-pf-"))
        .collect();
    apf.sort();
    json!({
        "code": a.code,
        "content-type": a.content_type,
        "body": a.body,
        // APF's is dynamic (`droppedRequests.GetRetryAfter`: 1 s, more
        // while rejections go on); the rules' is 1 s unless set
        "retry-after whole seconds >= 1": a
            .header("retry-after")
            .and_then(|s| s.parse::<u64>().ok())
            .is_some_and(|s| s >= 1),
        "apf headers": apf,
    })
}

fn rule(token: &str) -> FaultRule {
    FaultRule {
        token: Some(token.to_string()),
        seconds: Some(60.0),
        ..FaultRule::new(ApiFaultMode::Throttle)
    }
}

/// The first 429 of `n` overlapping GETs with `token` straight to the API.
async fn first_429(c: &Cluster, token: &str, n: usize) -> Result<Option<Answer>> {
    let path = c.pods();
    let calls = (0..n).map(|_| c.call_as(token, Method::GET, &path, None, ""));
    let answers = futures::future::join_all(calls).await;
    for a in answers {
        let a = a?;
        if a.code == 429 {
            return Ok(Some(a));
        }
    }
    Ok(None)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_requests() {
    differential(
        "throttle::too_many_requests",
        async |c: &Cluster, o: &mut Outcome| {
            if let Some(sim) = c.sim_handle() {
                let token = "conf-throttled-token";
                sim.admin().add_fault(&rule(token)).await?;
                let a = c.call_as(token, Method::GET, &c.pods(), None, "").await?;
                o.put("429 (fault rule)", throttled(&a));
                o.put("429 (APF)", throttled(&a));
                return Ok(());
            }
            let access = c.access().context("the real side")?;
            let token = access
                .identities
                .get(THROTTLED_USER)
                .context("the throttled user's token")?
                .token
                .clone();
            // the fault proxy's rule
            let ca = std::fs::read(&access.ca_cert)?;
            let proxy = tcab_api_proxy::spawn(ProxyOptions::new(UpstreamOptions {
                url: c.api_url().to_string(),
                ca_pem: Some(ca),
            }))
            .await?;
            AdminClient::new(&proxy.admin_url())
                .add_fault(&rule(&token))
                .await?;
            let r = reqwest::Client::new()
                .get(format!("{}{}", proxy.url(), c.pods()))
                .bearer_auth(&token)
                .send()
                .await?;
            let a = Answer {
                code: r.status().as_u16(),
                content_type: r
                    .headers()
                    .get("content-type")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_string(),
                headers: r.headers().clone(),
                body: Value::String(r.text().await?),
            };
            o.put("429 (fault rule)", throttled(&a));
            proxy.shutdown();
            // the real APF
            let admin = access.admin_client().await?;
            let level = ThrottleLevel::for_user(format!("{}-level", c.ns), THROTTLED_USER)
                .shares(0)
                .install(&admin)
                .await?;
            // A 429 needs two of the user's requests in the server at once:
            // on a loaded machine a round can be served one request at a
            // time, so rounds go on until one overlaps or the deadline.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            let mut seen = None;
            while seen.is_none() && std::time::Instant::now() < deadline {
                seen = first_429(c, &token, 48).await?;
            }
            level.remove(&admin).await?;
            let a = seen.context("APF never answered 429")?;
            o.put("429 (APF)", throttled(&a));
            Ok(())
        },
    )
    .await
}
