//! Each permission of the chart's Role is needed, on the real control
//! plane's authorizer. The three binaries run as processes under the
//! golden Role (`charts/tcab-dispatcher/tests/role.golden.yaml`, which
//! `charts/check_chart.py` keeps equal to the chart's rendering); one
//! scenario takes each permission away in turn (per resource and verb),
//! replacing the Role in place through the admin client, drives the
//! behaviour that needs it, and checks both that the API server refused
//! exactly that request (403 in its audit log, for the dispatcher's user)
//! and, where the behaviour shows it, that the behaviour failed; then
//! restores the Role and sees the behaviour recover. Every permission of
//! the golden Role must have its phase here: a permission added to the
//! chart without one fails the test. Real cluster only (one SKIP line
//! without the control plane's binaries).

#[macro_use]
#[allow(unused_macros)]
mod common;

use common::chart::name_of;
use common::{ClusterKind, TestStack, job_finished, lines_with, run};
use jiff::Timestamp;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::fmt;
use std::time::Duration;
use tcab_devstack::timeline::Refusal;
use tcab_devstack::{Container, wait_for};
use tcab_kube_sim::{ApiFaultMode, FaultRule, WatchScope};

/// How long any one step may take.
const LIMIT: Duration = Duration::from_secs(60);

/// One permission of a Role: an API group, a resource (with its
/// subresource) and a verb.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Permission {
    group: String,
    resource: String,
    verb: String,
}

impl Permission {
    fn new(group: &str, resource: &str, verb: &str) -> Self {
        Permission {
            group: group.into(),
            resource: resource.into(),
            verb: verb.into(),
        }
    }

    /// Whether the API server refused this permission's request.
    fn refused_by(&self, r: &Refusal) -> bool {
        r.verb == self.verb && r.resource == self.resource
    }
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let group = if self.group.is_empty() {
            "core"
        } else {
            &self.group
        };
        write!(f, "{} {group}/{}", self.verb, self.resource)
    }
}

/// Every permission a Role's rules grant, one per group, resource and verb.
fn permissions(rules: &[PolicyRule]) -> BTreeSet<Permission> {
    let mut out = BTreeSet::new();
    for rule in rules {
        for group in rule.api_groups.iter().flatten() {
            for resource in rule.resources.iter().flatten() {
                for verb in &rule.verbs {
                    out.insert(Permission::new(group, resource, verb));
                }
            }
        }
    }
    out
}

/// `rules` without `p`: its verb taken out of the rule of its group and
/// resource (split off when the rule covers more), a rule left with no
/// verb dropped.
fn without(rules: &[PolicyRule], p: &Permission) -> Vec<PolicyRule> {
    let mut out = Vec::new();
    for rule in rules {
        let groups = rule.api_groups.clone().unwrap_or_default();
        let resources = rule.resources.clone().unwrap_or_default();
        if !(groups.contains(&p.group) && resources.contains(&p.resource)) {
            out.push(rule.clone());
            continue;
        }
        // The rest of the rule's resources keep every verb.
        let others: Vec<String> = resources
            .iter()
            .filter(|r| **r != p.resource)
            .cloned()
            .collect();
        if !others.is_empty() {
            out.push(PolicyRule {
                resources: Some(others),
                ..rule.clone()
            });
        }
        let verbs: Vec<String> = rule
            .verbs
            .iter()
            .filter(|v| **v != p.verb)
            .cloned()
            .collect();
        if !verbs.is_empty() {
            out.push(PolicyRule {
                resources: Some(vec![p.resource.clone()]),
                verbs,
                ..rule.clone()
            });
        }
    }
    out
}

/// The dispatcher's Role on the real control plane, replaced in place.
struct Rbac {
    roles: Api<Role>,
    reviews: Api<SubjectAccessReview>,
    name: String,
    golden: Vec<PolicyRule>,
    user: String,
    namespace: String,
    audit_log: std::path::PathBuf,
}

impl Rbac {
    async fn new(t: &TestStack) -> Rbac {
        let real = t.stack.real.as_ref().expect("a real cluster");
        let client = real.access.admin_client().await.expect("admin client");
        let ns = t.ns();
        let golden = tcab_devstack::real::golden_role(&ns).expect("the golden Role");
        Rbac {
            roles: Api::namespaced(client.clone(), &ns),
            reviews: Api::all(client),
            name: golden.metadata.name.clone().expect("the Role's name"),
            golden: golden.rules.unwrap_or_default(),
            user: real.dispatcher_user.clone(),
            namespace: ns,
            audit_log: real.access.audit_log.clone().expect("the audit log is on"),
        }
    }

    async fn set_rules(&self, rules: &[PolicyRule]) {
        let patch = json!({"rules": rules});
        self.roles
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("replacing the Role's rules");
    }

    /// Whether the authorizer grants `p` to the dispatcher now (a
    /// SubjectAccessReview: the authorizer's own answer, so a change of
    /// the Role is seen once the authorizer has it).
    async fn allows(&self, p: &Permission) -> anyhow::Result<bool> {
        let (resource, subresource) = match p.resource.split_once('/') {
            Some((r, s)) => (r.to_owned(), Some(s.to_owned())),
            None => (p.resource.clone(), None),
        };
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(self.user.clone()),
                resource_attributes: Some(ResourceAttributes {
                    namespace: Some(self.namespace.clone()),
                    group: Some(p.group.clone()),
                    resource: Some(resource),
                    subresource,
                    verb: Some(p.verb.clone()),
                    ..ResourceAttributes::default()
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let answer = self.reviews.create(&PostParams::default(), &review).await?;
        Ok(answer.status.is_some_and(|s| s.allowed))
    }

    async fn until_allowed(&self, p: &Permission, allowed: bool) {
        let what = format!(
            "the authorizer to {} {p}",
            if allowed { "grant" } else { "refuse" }
        );
        wait_for(&what, LIMIT, || async {
            Ok((self.allows(p).await? == allowed).then_some(()))
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    }

    /// The golden Role without `p`, once the authorizer refuses it.
    async fn take_away(&self, p: &Permission) {
        self.set_rules(&without(&self.golden, p)).await;
        self.until_allowed(p, false).await;
    }

    /// The golden Role again, once the authorizer grants `p` again;
    /// returns that instant: no request received after it is refused.
    async fn restore(&self, p: &Permission) -> Timestamp {
        self.set_rules(&self.golden).await;
        self.until_allowed(p, true).await;
        Timestamp::now()
    }

    /// The dispatcher's refused requests so far.
    fn refusals(&self) -> Vec<Refusal> {
        let text = tcab_devstack::timeline::read_audit_log(&self.audit_log, &[&self.namespace])
            .expect("the audit log");
        tcab_devstack::timeline::refusals(&text, &self.user)
    }

    /// Waits until the audit log shows `p` refused to each of `agents` (a
    /// binary's name, the start of its User-Agent) in a request received
    /// since `since`; every refusal of a request received since `from`
    /// (when the Role was last whole) must be of `p`, the one permission
    /// taken away.
    async fn refused(
        &self,
        t: &TestStack,
        p: &Permission,
        from: Timestamp,
        since: Timestamp,
        agents: &[&str],
    ) {
        let what = format!("{p} refused to {agents:?} in the audit log");
        let after = |r: &Refusal, at: Timestamp| r.received.is_some_and(|r| r >= at);
        let all = wait_for(&what, LIMIT, || async {
            let all = self.refusals();
            let each = agents.iter().all(|a| {
                all.iter()
                    .any(|r| after(r, since) && p.refused_by(r) && r.agent.starts_with(a))
            });
            Ok(each.then_some(all))
        })
        .await
        .unwrap_or_else(|e| t.fail(e));
        let other: Vec<String> = all
            .iter()
            .filter(|r| after(r, from) && !p.refused_by(r))
            .map(Refusal::to_string)
            .collect();
        assert!(other.is_empty(), "{p} taken away, yet refused: {other:?}");
    }
}

/// The only Job of a backend job.
async fn job_of(t: &TestStack, id: &str) -> Value {
    let jobs = t.jobs_of(id).await;
    match jobs.as_slice() {
        [job] => job.clone(),
        other => t.fail(format!("expected one Job of {id}, found {}", other.len())),
    }
}

/// Whether the sandbox of `id` is still there and not being deleted.
async fn sandbox_kept(t: &TestStack, id: &str) -> bool {
    t.sandboxes_of(id)
        .await
        .iter()
        .any(|p| p["metadata"]["deletionTimestamp"].is_null())
}

/// The run lane's live Jobs by the API: not finished, not being deleted.
async fn live_run_jobs(t: &TestStack) -> usize {
    t.stack
        .cluster
        .jobs(Some("tcab.dev/job-kind=run"))
        .await
        .expect("list jobs")
        .iter()
        .filter(|j| !job_finished(j) && j["metadata"]["deletionTimestamp"].is_null())
        .count()
}

/// The run lane's in-flight count as the admitter's view has it.
async fn admitter_in_flight(t: &TestStack) -> anyhow::Result<f64> {
    let scrape = t.stack.scrape(Container::Admitter).await?;
    scrape
        .value("tcab_dispatcher_lane_in_flight", &[("lane", "run")])
        .ok_or_else(|| anyhow::anyhow!("no tcab_dispatcher_lane_in_flight{{lane=run}}"))
}

/// Waits until the admitter counts `extra` more live runs than the API
/// shows.
async fn admitter_counts(t: &TestStack, extra: usize, what: &str) {
    wait_for(what, LIMIT, || async {
        let live = live_run_jobs(t).await;
        let counted = admitter_in_flight(t).await?;
        Ok((counted == (live + extra) as f64).then_some(()))
    })
    .await
    .unwrap_or_else(|e| t.fail(e));
}

/// Takes the driver of `id` down as an OOM kill would, once it runs.
async fn oom_kill_driver(t: &TestStack, id: &str) {
    let pod = t.running_driver(id, LIMIT).await;
    t.admin()
        .oom_kill(&t.ns(), &name_of(&pod))
        .await
        .unwrap_or_else(|e| t.fail(format!("oom kill: {e}")));
}

/// Waits until the death of run `id` is reported; returns the run.
async fn death_reported(t: &TestStack, id: &str) -> Value {
    t.run_until(id, "the death report", LIMIT, |j| j["state"] == "failed")
        .await
}

/// Takes away each permission of the chart's Role in turn, one scenario on
/// one stack: 5 hanging drivers with their sandboxes, then per permission
/// the behaviour that needs it (each phase's doc says which code path
/// makes the request), the 403 for exactly that request in the audit log,
/// the behaviour failing where it shows, and its recovery once the Role is
/// whole again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_permission_of_the_role_is_needed() {
    if tcab_real_cluster::built_or_skip().is_none() {
        return;
    }
    let started = tokio::time::Instant::now();
    let mut t = TestStack::start(ClusterKind::Real, |o| {
        o.max_inflight = 16;
        o.driver_grace_seconds = 2;
        // A pod that cannot pull its image is judged never to start at once.
        o.extra_env
            .push(("TCAB_DISPATCHER_START_GRACE_SECONDS".into(), "1".into()));
    })
    .await;
    t.expect_forbidden();
    let rbac = Rbac::new(&t).await;
    let golden = permissions(&rbac.golden);
    // When the Role was last whole: refusals of requests received since then
    // must all be of the permission taken away (none before the first).
    let mut whole = Timestamp::now();

    // Six drivers that never finish, each with its sandbox: the deaths
    // (and the orphaned Job) of the phases below.
    let hang = json!({"hang": true, "log_lines": 3});
    let cases = [
        "get-pods",
        "list-pods",
        "delete-pods",
        "log",
        "list-jobs",
        "create-events",
    ];
    let ids = t
        .stack
        .backend
        .enqueue_batch(cases.iter().map(|c| run(c, hang.clone())).collect())
        .await
        .expect("enqueue");
    let id = |case: &str| ids[cases.iter().position(|c| *c == case).expect("a case")].clone();
    for id in &ids {
        t.running_driver(id, LIMIT).await;
    }
    let mut proven = BTreeSet::new();
    let mut phase = |p: &Permission| {
        assert!(golden.contains(p), "{p} is not in the golden Role");
        proven.insert(p.clone());
        eprintln!("{:>5.1}s  without {p}", started.elapsed().as_secs_f64());
    };

    // get pods: each container's Job view reads a pod that outlived its Job
    // (a Job deleted with --cascade=orphan) until it finishes
    // (job_cache::read_standing). Refused, the view keeps the pod live
    // after it died: the admitter counts one run too many.
    let p = Permission::new("", "pods", "get");
    phase(&p);
    rbac.take_away(&p).await;
    let orphan = id("get-pods");
    let driver = name_of(&t.running_driver(&orphan, LIMIT).await);
    t.stack
        .cluster
        .delete_job(&name_of(&job_of(&t, &orphan).await), "Orphan")
        .await
        .expect("delete the Job with --cascade=orphan");
    wait_for("the Job gone, its pod running", LIMIT, || async {
        let gone = t.jobs_of(&orphan).await.is_empty();
        let running = t
            .own_pods(&orphan)
            .await
            .iter()
            .any(|p| name_of(p) == driver && p["status"]["phase"] == "Running");
        Ok((gone && running).then_some(()))
    })
    .await
    .unwrap_or_else(|e| t.fail(e));
    t.admin()
        .oom_kill(&t.ns(), &driver)
        .await
        .expect("oom kill the orphan");
    wait_for("the orphaned pod failed", LIMIT, || async {
        let pods = t.own_pods(&orphan).await;
        Ok(pods
            .iter()
            .any(|p| name_of(p) == driver && p["status"]["phase"] == "Failed")
            .then_some(()))
    })
    .await
    .unwrap_or_else(|e| t.fail(e));
    // A read refused after the pod failed, by each container's view.
    let failed = Timestamp::now();
    rbac.refused(
        &t,
        &p,
        whole,
        failed,
        &["tcab-admitter", "tcab-lease-keeper", "tcab-reaper"],
    )
    .await;
    admitter_counts(&t, 1, "the admitter to count the dead orphan as live").await;
    whole = rbac.restore(&p).await;
    admitter_counts(&t, 0, "the admitter to count the live runs only").await;

    // list pods: the lease-keeper lists a failed Job's pods for its death
    // report (inspect::newest_pod), the reaper lists the sandboxes of a
    // failed driver (run::Reaper::list). Refused: no death report, the
    // sandbox kept.
    let p = Permission::new("", "pods", "list");
    phase(&p);
    rbac.take_away(&p).await;
    let dead = id("list-pods");
    oom_kill_driver(&t, &dead).await;
    rbac.refused(&t, &p, whole, whole, &["tcab-lease-keeper", "tcab-reaper"])
        .await;
    assert_eq!(
        t.stack.backend.job(&dead).await.expect("run")["state"],
        "running",
        "no death report without the pod"
    );
    assert!(sandbox_kept(&t, &dead).await, "the sandbox is kept");
    whole = rbac.restore(&p).await;
    let job = death_reported(&t, &dead).await;
    let detail = job["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("OOMKilled") && detail.contains("last log lines"),
        "{detail}"
    );
    t.sandboxes_reaped(&dead, LIMIT).await;

    // delete pods: the reaper deletes a dead driver's sandbox
    // (run::Reaper::delete). Refused: the sandbox is kept.
    let p = Permission::new("", "pods", "delete");
    phase(&p);
    rbac.take_away(&p).await;
    let dead = id("delete-pods");
    oom_kill_driver(&t, &dead).await;
    rbac.refused(&t, &p, whole, whole, &["tcab-reaper"]).await;
    assert!(sandbox_kept(&t, &dead).await, "the sandbox is kept");
    whole = rbac.restore(&p).await;
    t.sandboxes_reaped(&dead, LIMIT).await;

    // get pods/log: the lease-keeper quotes the dead pod's log tail in the
    // death report (inspect::log_tail). Refused: the report goes without
    // it, saying why.
    let p = Permission::new("", "pods/log", "get");
    phase(&p);
    rbac.take_away(&p).await;
    let dead = id("log");
    oom_kill_driver(&t, &dead).await;
    let job = death_reported(&t, &dead).await;
    rbac.refused(&t, &p, whole, whole, &["tcab-lease-keeper"])
        .await;
    let detail = job["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("OOMKilled")
            && detail.contains("logs unreadable")
            && !detail.contains("last log lines"),
        "{detail}"
    );
    whole = rbac.restore(&p).await;

    // list batch/jobs: before deleting a dead driver's sandbox the reaper
    // confirms with a fresh list that no live Job has its job id
    // (run::Reaper::confirm); each container's Job view lists at start and
    // after a watch error. Refused: the sandbox is kept.
    let p = Permission::new("batch", "jobs", "list");
    phase(&p);
    rbac.take_away(&p).await;
    let dead = id("list-jobs");
    oom_kill_driver(&t, &dead).await;
    rbac.refused(&t, &p, whole, whole, &["tcab-reaper"]).await;
    death_reported(&t, &dead).await;
    assert!(sandbox_kept(&t, &dead).await, "the sandbox is kept");
    whole = rbac.restore(&p).await;
    t.sandboxes_reaped(&dead, LIMIT).await;

    // create batch/jobs: the admitter creates a claimed run's Job
    // (settle::settle; its dry run at start too). Refused: the claimed run
    // has no Job.
    let p = Permission::new("batch", "jobs", "create");
    phase(&p);
    rbac.take_away(&p).await;
    let claimed = t
        .stack
        .backend
        .enqueue_run(run("create", json!({"duration_ms": 200})))
        .await
        .expect("enqueue");
    rbac.refused(&t, &p, whole, whole, &["tcab-admitter"]).await;
    t.run_until(&claimed, "the run claimed", LIMIT, |j| {
        j["state"] != "queued"
    })
    .await;
    assert!(t.jobs_of(&claimed).await.is_empty(), "a Job without create");
    whole = rbac.restore(&p).await;

    // get batch/jobs: a create whose answer did not tell (here a 500 after
    // the API server made the Job) is settled by reading the Job
    // (settle::settle's Read). Refused, the admitter cannot read it and
    // creates again to learn from the 409 that it exists.
    let p = Permission::new("batch", "jobs", "get");
    phase(&p);
    rbac.take_away(&p).await;
    let from = t.stack.log(Container::Admitter).len();
    let rule = FaultRule::new(ApiFaultMode::Error500)
        .token(t.dispatcher_token())
        .verbs(["create"])
        .resources(["jobs"])
        .times(1)
        .after_applying();
    t.admin()
        .add_fault(&rule)
        .await
        .expect("a 500 after the create");
    let read = t
        .stack
        .backend
        .enqueue_run(run("get", json!({"duration_ms": 200})))
        .await
        .expect("enqueue");
    rbac.refused(&t, &p, whole, whole, &["tcab-admitter"]).await;
    let settled = wait_for("the unclear create settled", LIMIT, || async {
        let log = t.stack.log(Container::Admitter);
        let lines = lines_with(&log[from..], &["an unclear create settled"])
            .into_iter()
            .map(str::to_owned)
            .collect::<Vec<_>>();
        Ok((!lines.is_empty()).then_some(lines))
    })
    .await
    .unwrap_or_else(|e| t.fail(e));
    assert!(
        settled.iter().all(|l| l.contains("by=AlreadyExists")),
        "settled by a second create, not by the read: {settled:?}"
    );
    whole = rbac.restore(&p).await;
    t.run_until(&read, "the run done", LIMIT, |j| j["state"] == "succeeded")
        .await;

    // delete batch/jobs: the lease-keeper deletes the Job of a pod that can
    // never start (run::deaths::delete_ended), after reporting its death.
    // Refused: the Job stays.
    let p = Permission::new("batch", "jobs", "delete");
    phase(&p);
    rbac.take_away(&p).await;
    t.admin()
        .set_unpullable("tcab/driver:dev", true)
        .await
        .expect("unpullable");
    let stuck = t
        .stack
        .backend
        .enqueue_run(run("delete", json!({"hang": true})))
        .await
        .expect("enqueue");
    let job = death_reported(&t, &stuck).await;
    assert!(
        job["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("never started"),
        "{job}"
    );
    rbac.refused(&t, &p, whole, whole, &["tcab-lease-keeper"])
        .await;
    let left = job_of(&t, &stuck).await;
    assert!(
        left["metadata"]["deletionTimestamp"].is_null(),
        "the Job stays"
    );
    whole = rbac.restore(&p).await;
    wait_for("the Job deleted", LIMIT, || async {
        Ok(t.jobs_of(&stuck).await.is_empty().then_some(()))
    })
    .await
    .unwrap_or_else(|e| t.fail(e));
    t.admin()
        .set_unpullable("tcab/driver:dev", false)
        .await
        .expect("pullable");

    // list events: a Job that has had no pod for longer than the start
    // grace has the Job controller's FailedCreate Events read
    // (inspect::refusals). Here every driver pod is refused (the admitter
    // restarted with a driver ServiceAccount that does not exist).
    // Refused, the run waits, counted as a Job without a pod; with the Role
    // whole, it is failed with the API server's refusal.
    let p = Permission::new("", "events", "list");
    phase(&p);
    rbac.take_away(&p).await;
    t.stack.stop_container(Container::Admitter).await;
    t.stack.options.extra_env.push((
        "TCAB_DRIVER_SERVICE_ACCOUNT".into(),
        "no-such-account".into(),
    ));
    t.stack
        .start_container(Container::Admitter)
        .await
        .expect("the admitter restarts");
    let refused = t
        .stack
        .backend
        .enqueue_run(run("events", json!({"duration_ms": 200})))
        .await
        .expect("enqueue");
    rbac.refused(&t, &p, whole, whole, &["tcab-lease-keeper"])
        .await;
    // (At least: a claim of an earlier phase that lapsed may be claimed
    // again by the restarted admitter, and be refused too.)
    wait_for("the run counted without a pod", LIMIT, || async {
        let scrape = t.stack.scrape(Container::LeaseKeeper).await?;
        let waiting = scrape.value("tcab_dispatcher_jobs_without_pod", &[("lane", "run")]);
        Ok(waiting.is_some_and(|w| w >= 1.0).then_some(()))
    })
    .await
    .unwrap_or_else(|e| t.fail(e));
    assert_eq!(
        t.stack.backend.job(&refused).await.expect("run")["state"],
        "dispatched",
        "not failed without the refusal read"
    );
    whole = rbac.restore(&p).await;
    let job = death_reported(&t, &refused).await;
    let detail = job["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("refused to create the Job's pod")
            && detail.contains("serviceaccount \"no-such-account\" not found"),
        "{detail}"
    );

    // create events.k8s.io/events: the lease-keeper leaves an Event on a
    // Job it reports dead, the reaper on a Job whose sandbox it reaps
    // (tcab_shared::events, one writer per container). Refused: the death
    // is reported and the sandbox reaped all the same, the Event is
    // missing, and the refusal is counted as a failed create of an Event
    // and logged.
    let p = Permission::new("events.k8s.io", "events", "create");
    phase(&p);
    rbac.take_away(&p).await;
    let dead = id("create-events");
    oom_kill_driver(&t, &dead).await;
    death_reported(&t, &dead).await;
    rbac.refused(&t, &p, whole, whole, &["tcab-lease-keeper"])
        .await;
    wait_for("the refused Event counted and logged", LIMIT, || async {
        let scrape = t.stack.scrape(Container::LeaseKeeper).await?;
        let refused = scrape.value(
            "tcab_dispatcher_kube_request_duration_seconds_count",
            &[("call", "create_event"), ("outcome", "forbidden")],
        );
        let errors = scrape.value(
            "tcab_dispatcher_kube_api_errors_total",
            &[("verb", "create"), ("reason", "forbidden")],
        );
        let logged = !lines_with(
            &t.stack.log(Container::LeaseKeeper),
            &["cannot create an Event", "forbidden"],
        )
        .is_empty();
        let counted = refused.is_some_and(|n| n >= 1.0) && errors.is_some_and(|n| n >= 1.0);
        Ok((counted && logged).then_some(()))
    })
    .await
    .unwrap_or_else(|e| t.fail(e));
    let needle = format!("job {dead} ");
    let events = t.events("reason=ReportedDead").await;
    assert!(
        !events
            .iter()
            .any(|e| e["message"].as_str().is_some_and(|m| m.contains(&needle))),
        "an Event without create: {events:?}"
    );
    t.sandboxes_reaped(&dead, LIMIT).await;
    whole = rbac.restore(&p).await;

    // watch batch/jobs: each container's Job view watches (job_cache's
    // watch_jobs); the open watches are ended (as their timeout ends them)
    // and opened again. Refused, the views are not current: each container
    // answers /readyz with 503.
    let p = Permission::new("batch", "jobs", "watch");
    phase(&p);
    rbac.take_away(&p).await;
    let scope = WatchScope {
        resources: vec!["jobs".into()],
        token: Some(t.dispatcher_token()),
    };
    t.admin()
        .close_watches(&scope)
        .await
        .expect("close watches");
    rbac.refused(
        &t,
        &p,
        whole,
        whole,
        &["tcab-admitter", "tcab-lease-keeper", "tcab-reaper"],
    )
    .await;
    for c in Container::ALL {
        wait_for(&format!("{} not ready", c.binary()), LIMIT, || async {
            let (status, _) = t.stack.endpoint(c, "/readyz").await?;
            Ok((status == 503).then_some(()))
        })
        .await
        .unwrap_or_else(|e| t.fail(e));
    }
    whole = rbac.restore(&p).await;
    for c in Container::ALL {
        wait_for(&format!("{} ready again", c.binary()), LIMIT, || async {
            let (status, _) = t.stack.endpoint(c, "/readyz").await?;
            Ok((status == 200).then_some(()))
        })
        .await
        .unwrap_or_else(|e| t.fail(e));
    }

    // Every permission of the golden Role had its phase; whole again, the
    // Role meets no refusal.
    let missing: Vec<String> = golden
        .difference(&proven)
        .map(Permission::to_string)
        .collect();
    assert!(
        missing.is_empty(),
        "no phase proves these permissions of the chart's Role needed: {missing:?}"
    );
    let late: Vec<String> = rbac
        .refusals()
        .iter()
        .filter(|r| r.received.is_some_and(|at| at >= whole))
        .map(Refusal::to_string)
        .collect();
    assert!(late.is_empty(), "refused under the whole Role: {late:?}");
    eprintln!(
        "{:>5.1}s  every permission of the Role proven needed",
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn a_permission_is_taken_out_of_its_rule_alone() {
    let rule = |group: &str, resources: &[&str], verbs: &[&str]| PolicyRule {
        api_groups: Some(vec![group.into()]),
        resources: Some(resources.iter().map(|r| (*r).to_owned()).collect()),
        verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
        ..PolicyRule::default()
    };
    let rules = vec![
        rule("batch", &["jobs"], &["create", "get"]),
        rule("", &["pods", "pods/log"], &["get"]),
    ];
    let all = permissions(&rules);
    assert_eq!(all.len(), 4);
    for p in &all {
        let left = permissions(&without(&rules, p));
        let mut expected = all.clone();
        expected.remove(p);
        assert_eq!(left, expected, "without {p}");
    }
    let log = Permission::new("", "pods/log", "get");
    assert_eq!(
        without(&rules, &log)[1..],
        [rule("", &["pods"], &["get"])],
        "the rule keeps its other resource"
    );
}
