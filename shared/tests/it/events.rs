//! The Events the binaries leave on Jobs, through `EventSender` against
//! kube-sim: created as `events.k8s.io/v1`, found by the Job's name as
//! `kubectl` finds them (core v1 Events, `involvedObject.name`); a create
//! that hangs or fails holds up neither the sender nor the Events after it,
//! and is counted with the other Kubernetes calls.

use k8s_openapi::api::core::v1::Event as CoreEvent;
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::ListParams;
use std::time::Duration;
use tcab_kube_sim::{ApiFaultMode, FaultRule, SimOptions, spawn};
use tcab_shared::WallClock;
use tcab_shared::config::Binary;
use tcab_shared::events::{EventSender, Notice, Reason, Regarding, Reporter};
use tcab_shared::kube_api::client_from;
use tcab_testkit::wait::until;

const NS: &str = "tcab";
const LIMIT: Duration = Duration::from_secs(10);

fn notice(job: &str, reason: Reason, note: &str) -> Notice {
    Notice::new(Regarding::job(NS, job, Some("uid-1")), reason, note)
}

/// The core v1 Events about the Job `job`, as `kubectl get events
/// --field-selector involvedObject.name=<job>` lists them.
async fn core_events_about(client: &kube::Client, job: &str) -> Vec<CoreEvent> {
    let events: Api<CoreEvent> = Api::namespaced(client.clone(), NS);
    let params = ListParams::default().fields(&format!("involvedObject.name={job}"));
    events.list(&params).await.expect("list events").items
}

/// The count of `kube_request_duration_seconds` for creating Events with
/// `outcome`, in this process's metrics.
fn create_event_calls(outcome: &str) -> f64 {
    let text = tcab_shared::metrics::Exporter::new(tcab_shared::metrics::common()).encode();
    let line = format!(
        "tcab_dispatcher_kube_request_duration_seconds_count{{call=\"create_event\",outcome=\"{outcome}\"}} "
    );
    text.lines()
        .find_map(|l| l.strip_prefix(&line))
        .map_or(0.0, |v| v.parse().expect("a number"))
}

#[tokio::test]
async fn an_event_on_a_job_is_found_by_its_name_and_a_hung_create_holds_up_nothing() {
    let sim = spawn(SimOptions {
        namespace: NS.into(),
        ..SimOptions::default()
    })
    .await
    .expect("kube-sim starts");
    let client = client_from(sim.kube_config(None).expect("config")).expect("client");
    let sender = EventSender::start(
        client.clone(),
        Reporter::new(Binary::LeaseKeeper, "tcab-dispatcher-abc"),
        WallClock::system(),
        Duration::from_secs(1),
    );

    sender.send(notice(
        "tcab-driver-1-aaaa0000",
        Reason::ReportedDead,
        "OOMKilled",
    ));
    let found = until("the Event listed as a core Event", LIMIT, || async {
        let found = core_events_about(&client, "tcab-driver-1-aaaa0000").await;
        (!found.is_empty()).then_some(found)
    })
    .await;
    let [event] = found.as_slice() else {
        panic!("one Event: {found:?}")
    };
    assert_eq!(event.reason.as_deref(), Some("ReportedDead"));
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(event.message.as_deref(), Some("OOMKilled"));
    assert_eq!(
        event.reporting_component.as_deref(),
        Some("tcab.dev/lease-keeper")
    );
    assert_eq!(
        event.reporting_instance.as_deref(),
        Some("tcab-dispatcher-abc")
    );
    assert_eq!(event.involved_object.kind.as_deref(), Some("Job"));
    assert_eq!(event.involved_object.uid.as_deref(), Some("uid-1"));
    assert!(event.event_time.is_some());
    // The same Event through the API it was created with.
    let v1: Api<Event> = Api::namespaced(client.clone(), NS);
    let listed = v1.list(&ListParams::default()).await.expect("list").items;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].note.as_deref(), Some("OOMKilled"));
    assert_eq!(
        listed[0].regarding.as_ref().and_then(|r| r.name.as_deref()),
        Some("tcab-driver-1-aaaa0000")
    );

    // Creates that never answer: the sender takes every notice at once,
    // each create gives up at its bound and is counted, and once the API
    // answers again the Events after them are created.
    let timeouts = create_event_calls("timeout");
    let admin = sim.admin();
    admin
        .add_fault(
            &FaultRule::new(ApiFaultMode::Hang)
                .verbs(["create"])
                .resources(["events"])
                .times(2),
        )
        .await
        .expect("a hang");
    for n in 0..2 {
        sender.send(notice(
            &format!("tcab-driver-hung-{n}"),
            Reason::DeletedStale,
            "x",
        ));
    }
    sender.send(notice(
        "tcab-driver-2-bbbb0000",
        Reason::SandboxReaped,
        "after",
    ));
    until("the Event after the hung ones", LIMIT, || async {
        let found = core_events_about(&client, "tcab-driver-2-bbbb0000").await;
        (!found.is_empty()).then_some(())
    })
    .await;
    assert_eq!(
        create_event_calls("timeout"),
        timeouts + 2.0,
        "each hung create counted"
    );
    for n in 0..2 {
        assert!(
            core_events_about(&client, &format!("tcab-driver-hung-{n}"))
                .await
                .is_empty(),
            "a hung create is not tried again"
        );
    }
}
