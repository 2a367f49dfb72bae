//! The shared control plane across handles: one owner, gone after the last
//! user; a failed start answered to every attacher.

use crate::support::{built_or_skip, processes_mentioning};
use std::time::Duration;
use tcab_real_cluster::{ExtraArgs, Settings, SharedControlPlane, SharedError};
use tcab_testkit::wait::settled;

/// Settings no other test uses (the settings name the instance).
fn unique(settings: Settings) -> Settings {
    Settings {
        namespaces: vec![format!("only-{:08x}", rand::random::<u32>())],
        ..settings
    }
}

#[tokio::test]
async fn handles_share_one_control_plane_which_stops_after_the_last_goes() {
    if built_or_skip().is_none() {
        return;
    }
    let settings = unique(Settings::default());
    let first = SharedControlPlane::attach(settings.clone()).await.unwrap();
    let second = SharedControlPlane::attach(settings).await.unwrap();
    assert_eq!(first.api_url, second.api_url);
    let work_dir = first.work_dir.clone();
    assert_eq!(processes_mentioning(&work_dir).len(), 4);
    first.admin_client().await.unwrap();
    drop(first);
    drop(second);
    // The owner's idle grace (15 s), then its stop.
    settled(
        "the shared control plane gone",
        Duration::from_secs(45),
        async || match processes_mentioning(&work_dir).as_slice() {
            [] => Ok(()),
            left => Err(format!("{} processes left", left.len())),
        },
    )
    .await;
}

#[tokio::test]
async fn a_shared_start_that_fails_is_answered_to_every_attacher_with_the_owners_log() {
    if built_or_skip().is_none() {
        return;
    }
    let settings = unique(Settings {
        extra_args: ExtraArgs {
            apiserver: vec!["--no-such-flag".into()],
            ..ExtraArgs::default()
        },
        ..Settings::default()
    });
    let err = SharedControlPlane::attach(settings.clone())
        .await
        .unwrap_err();
    let SharedError::Owner { log, .. } = &err else {
        panic!("{err:?}")
    };
    assert!(log.contains("unknown flag: --no-such-flag"), "{log}");
    let again = tokio::time::Instant::now();
    let err = SharedControlPlane::attach(settings).await.unwrap_err();
    assert!(matches!(err, SharedError::Owner { .. }), "{err:?}");
    assert!(again.elapsed() < Duration::from_secs(2), "started again");
}
