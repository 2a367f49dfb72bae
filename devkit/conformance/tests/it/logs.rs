//! `pods/log`, as the lease-keeper reads a dead driver's log tail: the API
//! server's own checks and the empty log of a pod on no node
//! (`pkg/registry/core/pod/rest/log.go`, `strategy.go` `LogLocation`,
//! `ValidatePodLogOptions`), then the kubelet's
//! (`pkg/kubelet/server/server.go` `getContainerLogs`, `kubelet_pods.go`
//! `validateContainerLogStatus`), whose 400 text the API server passes on as
//! a `BadRequest` message.

use crate::common::{LOG_LINES, pod, pod_path, running, terminated};
use anyhow::Result;
use serde_json::json;
use std::time::Duration;
use tcab_conformance::cluster::WORKER;
use tcab_conformance::normalise;
use tcab_conformance::{Cluster, Outcome, differential};

/// An image reference the kubelet cannot parse (an uppercase path).
const INVALID_IMAGE: &str = "conformance/Not-Valid:1";

/// Reads the log of `pod` with `query` and records the answer under `key`.
async fn read_log(c: &Cluster, o: &mut Outcome, key: &str, pod: &str, query: &str) -> Result<()> {
    let a = c.get(&format!("{}/log{query}", pod_path(c, pod))).await?;
    o.answer(key, a.code, &a.body);
    Ok(())
}

/// A pod whose plain program writes `lines` log lines, then runs
/// `run_seconds` on the worker.
fn logging_pod(name: &str, lines: u32, run_seconds: u32) -> serde_json::Value {
    let mut p = pod(name, Some(WORKER), run_seconds);
    p["metadata"]["annotations"][LOG_LINES] = json!(lines.to_string());
    p
}

/// Containers that never ran: a pod on no node has no log (204 No Content:
/// the API server asks no kubelet, whatever the options); a container waiting on
/// an image the kubelet cannot parse is refused with the reason, and so is
/// `previous` (there is no earlier instance).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_ran() {
    differential("logs::never_ran", async |c: &Cluster, o: &mut Outcome| {
        c.create(&c.pods(), &pod("pending", None, 600)).await?;
        read_log(c, o, "pending", "pending", "").await?;
        read_log(c, o, "pending previous", "pending", "?previous=true").await?;
        read_log(c, o, "pending tailLines", "pending", "?tailLines=1").await?;
        let mut bad = pod("bad-image", Some(WORKER), 600);
        bad["spec"]["containers"][0]["image"] = json!(INVALID_IMAGE);
        c.create(&c.pods(), &bad).await?;
        // (a kubelet reports ContainerCreating before it looks at the image)
        let path = pod_path(c, "bad-image");
        let waiting = c
            .until(
                "bad-image waiting with InvalidImageName",
                Duration::from_secs(60),
                async || {
                    Ok(c.object(&path).await?.filter(|p| {
                        p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"]
                            == "InvalidImageName"
                    }))
                },
            )
            .await?;
        o.put("bad-image state", normalise::container_state(&waiting));
        read_log(c, o, "bad-image", "bad-image", "").await?;
        read_log(c, o, "bad-image previous", "bad-image", "?previous=true").await?;
        Ok(())
    })
    .await
}

/// Containers that ran: the whole log and its tail (`tailLines` as the
/// lease-keeper sends it, 0, more than there are, negative), `previous`
/// (never restarted: refused), a container the pod does not have; of a
/// finished pod, of a running one, and of a pod deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ran() {
    differential("logs::ran", async |c: &Cluster, o: &mut Outcome| {
        c.create(&c.pods(), &logging_pod("done", 5, 1)).await?;
        c.create(&c.pods(), &logging_pod("live", 3, 600)).await?;
        let done = terminated(c, "done").await?;
        o.put("done state", normalise::container_state(&done));
        for (key, query) in [
            ("done", ""),
            ("done tailLines=2", "?tailLines=2"),
            ("done tailLines=0", "?tailLines=0"),
            ("done tailLines=10", "?tailLines=10"),
            ("done tailLines=-1", "?tailLines=-1"),
            ("done previous", "?previous=true"),
            ("done container=other", "?container=other"),
            ("done container=main", "?container=main&tailLines=1"),
        ] {
            read_log(c, o, key, "done", query).await?;
        }
        running(c, "live").await?;
        // The program writes its lines as it starts, just after the
        // kubelet reports it running.
        let live_path = format!("{}/log", pod_path(c, "live"));
        c.until("live's three lines", Duration::from_secs(30), async || {
            let a = c.get(&live_path).await?;
            Ok(
                (a.code == 200 && a.body.as_str().is_some_and(|t| t.contains("line 3")))
                    .then_some(()),
            )
        })
        .await?;
        read_log(c, o, "live", "live", "").await?;
        read_log(c, o, "live tailLines=1", "live", "?tailLines=1").await?;
        read_log(c, o, "live previous", "live", "?previous=true").await?;
        // A finished pod goes at once (grace 0); its log with it.
        let a = c
            .delete(
                &pod_path(c, "done"),
                Some(&json!({"gracePeriodSeconds": 0})),
            )
            .await?;
        o.put("delete done", a.code);
        c.until("done gone", Duration::from_secs(30), async || {
            Ok(c.object(&pod_path(c, "done"))
                .await?
                .is_none()
                .then_some(()))
        })
        .await?;
        read_log(c, o, "deleted", "done", "").await?;
        Ok(())
    })
    .await
}
