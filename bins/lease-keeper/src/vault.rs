//! The token vault and the admission gate, served over gRPC on 127.0.0.1
//! beside the standard gRPC health service.
//!
//! The admitter `Put`s each claim's per-job token before it creates the Job;
//! the lease-keeper reads it back to present on a death report. Nothing here
//! is durable: a restart forgets every token, which leaves those jobs to
//! lost-driver detection. A token never reaches a log or `Debug` output.

use crate::gate::Gate;
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tcab_proto::vault::{
    self as pb,
    admission_gate_server::{AdmissionGate, AdmissionGateServer},
    token_vault_server::{TokenVault, TokenVaultServer},
};
use tcab_shared::cluster::{JobPhase, JobSummary};
use tcab_shared::tick::Shutdown;
use tcab_shared::{Lane, Secret};
use tokio::net::TcpListener;
use tokio::time::Instant;
use tonic::{Request, Response, Status};

/// What a token is stored under: the backend job id and the claim tag.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TokenKey {
    /// The backend job id.
    pub job_id: String,
    /// The claim tag (a short hash of the token, also in the Job's name and labels).
    pub claim: String,
}

impl TokenKey {
    /// A key from its parts.
    pub fn new(job_id: impl Into<String>, claim: impl Into<String>) -> Self {
        Self {
            job_id: job_id.into(),
            claim: claim.into(),
        }
    }
}

/// What the vault knows about one held token, without the token itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldClaim {
    /// Its key.
    pub key: TokenKey,
    /// The lane of the claim.
    pub lane: Lane,
    /// Order of the Puts: a later Put of the same job id has a larger number,
    /// so the highest one is the job's current claim.
    pub seq: u64,
}

/// The stored entry: the token and what pruning needs.
#[derive(Debug, Clone)]
struct Entry {
    token: Secret,
    lane: Lane,
    seq: u64,
    put_at: Instant,
    /// Whether the claim's Job has been seen in the cache.
    seen_job: bool,
}

/// Why a token was dropped by [`TokenStore::prune`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// Its Job completed: the driver or publisher reported for itself.
    JobSucceeded,
    /// Its publisher Job failed; publisher deaths take the lost path, which
    /// needs no token.
    PublisherFailed,
    /// Its Job was seen and is gone now.
    JobGone,
    /// No Job for it appeared within one lease length of the Put.
    NoJobAppeared,
}

impl DropReason {
    /// A short phrase for the log.
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::JobSucceeded => "its Job completed",
            DropReason::PublisherFailed => "its publisher Job failed (handled as lost)",
            DropReason::JobGone => "its Job no longer exists",
            DropReason::NoJobAppeared => "no Job appeared within one lease length",
        }
    }
}

/// What pruning decides for one token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenVerdict {
    /// Keep it; `seen_job` is whether its Job has been seen so far.
    Keep { seen_job: bool },
    /// Drop it, for this reason.
    Drop(DropReason),
}

/// Pure: whether to keep a token, given its Job in the cache (if any).
/// A failed driver Job keeps its token: the death step needs it and forgets
/// it once the death is handled.
pub fn judge_token(
    lane: Lane,
    seen_job: bool,
    put_at: Instant,
    job: Option<&JobSummary>,
    now: Instant,
    lease_length: Duration,
) -> TokenVerdict {
    match job {
        Some(job) => match (job.phase, lane) {
            (JobPhase::Live, _) | (JobPhase::Failed, Lane::Run) => {
                TokenVerdict::Keep { seen_job: true }
            }
            (JobPhase::Succeeded, _) => TokenVerdict::Drop(DropReason::JobSucceeded),
            (JobPhase::Failed, Lane::Publish) => TokenVerdict::Drop(DropReason::PublisherFailed),
        },
        None if seen_job => TokenVerdict::Drop(DropReason::JobGone),
        None if now.saturating_duration_since(put_at) >= lease_length => {
            TokenVerdict::Drop(DropReason::NoJobAppeared)
        }
        None => TokenVerdict::Keep { seen_job: false },
    }
}

#[derive(Debug, Default)]
struct Inner {
    entries: BTreeMap<TokenKey, Entry>,
    next_seq: u64,
}

/// The in-memory token store; cheap to clone, shared by the gRPC service and
/// the tick loop.
#[derive(Debug, Clone, Default)]
pub struct TokenStore {
    inner: Arc<Mutex<Inner>>,
}

impl TokenStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stores (or replaces) the token of one claim, put at `now`.
    pub fn put(&self, key: TokenKey, token: Secret, lane: Lane, now: Instant) {
        let mut inner = self.lock();
        inner.next_seq += 1;
        let seq = inner.next_seq;
        inner.entries.insert(
            key,
            Entry {
                token,
                lane,
                seq,
                put_at: now,
                seen_job: false,
            },
        );
    }

    /// The token of one claim, if held.
    pub fn get(&self, key: &TokenKey) -> Option<Secret> {
        self.lock().entries.get(key).map(|e| e.token.clone())
    }

    /// Drops the token of one claim; true when one was held.
    pub fn forget(&self, key: &TokenKey) -> bool {
        self.lock().entries.remove(key).is_some()
    }

    /// Every held claim, sorted by key (no tokens).
    pub fn held(&self) -> Vec<HeldClaim> {
        self.lock()
            .entries
            .iter()
            .map(|(key, e)| HeldClaim {
                key: key.clone(),
                lane: e.lane,
                seq: e.seq,
            })
            .collect()
    }

    /// How many tokens are held.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Whether no token is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Applies [`judge_token`] to every token against the cached Jobs and
    /// returns what was dropped, sorted by key. Call it only with a cache
    /// that has listed (an unlisted cache would look like "no Job").
    pub fn prune(
        &self,
        jobs: &[JobSummary],
        now: Instant,
        lease_length: Duration,
    ) -> Vec<(TokenKey, DropReason)> {
        let by_claim: HashMap<(&str, &str), &JobSummary> = jobs
            .iter()
            .filter_map(|j| Some(((j.job_id.as_deref()?, j.claim.as_deref()?), j)))
            .collect();
        let mut inner = self.lock();
        let mut dropped = Vec::new();
        inner.entries.retain(|key, entry| {
            let job = by_claim
                .get(&(key.job_id.as_str(), key.claim.as_str()))
                .copied();
            match judge_token(
                entry.lane,
                entry.seen_job,
                entry.put_at,
                job,
                now,
                lease_length,
            ) {
                TokenVerdict::Keep { seen_job } => {
                    entry.seen_job = seen_job;
                    true
                }
                TokenVerdict::Drop(reason) => {
                    dropped.push((key.clone(), reason));
                    false
                }
            }
        });
        dropped
    }
}

/// Errors of binding and serving the vault.
#[derive(Debug, thiserror::Error)]
pub enum VaultError {
    /// The configured address is not loopback and that was not allowed.
    #[error(
        "refusing to serve the token vault on non-loopback address {addr}; \
         set TCAB_DISPATCHER_VAULT_ALLOW_NON_LOOPBACK=true to allow it"
    )]
    NonLoopback {
        /// The refused address.
        addr: SocketAddr,
    },
    /// The address could not be bound.
    #[error("cannot bind the token vault on {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The bound listener's address could not be read.
    #[error("cannot read the token vault listener's address")]
    LocalAddr(#[source] std::io::Error),
    /// The gRPC server stopped with an error.
    #[error("the token vault server failed")]
    Serve(#[source] tonic::transport::Error),
}

/// Refuses a non-loopback address unless `allow_non_loopback`.
pub fn check_addr(addr: SocketAddr, allow_non_loopback: bool) -> Result<(), VaultError> {
    if addr.ip().is_loopback() || allow_non_loopback {
        Ok(())
    } else {
        Err(VaultError::NonLoopback { addr })
    }
}

/// Binds the vault's listener after [`check_addr`].
pub async fn bind(addr: SocketAddr, allow_non_loopback: bool) -> Result<TcpListener, VaultError> {
    check_addr(addr, allow_non_loopback)?;
    TcpListener::bind(addr)
        .await
        .map_err(|source| VaultError::Bind { addr, source })
}

/// Serves the token vault, the admission gate and the gRPC health service on
/// `listener` until `shutdown`. Returns an error if the server fails.
pub async fn serve(
    listener: TcpListener,
    store: TokenStore,
    gate: Gate,
    shutdown: Shutdown,
) -> Result<(), VaultError> {
    let service = VaultService { store, gate };
    let (reporter, health) = tcab_proto::tonic_health::server::health_reporter();
    reporter
        .set_serving::<TokenVaultServer<VaultService>>()
        .await;
    reporter
        .set_serving::<AdmissionGateServer<VaultService>>()
        .await;
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    tonic::transport::Server::builder()
        .add_service(health)
        .add_service(TokenVaultServer::new(service.clone()))
        .add_service(AdmissionGateServer::new(service))
        .serve_with_incoming_shutdown(incoming, async move { shutdown.wait().await })
        .await
        .map_err(VaultError::Serve)
}

/// The gRPC face of the store and the gate.
#[derive(Debug, Clone)]
pub struct VaultService {
    store: TokenStore,
    gate: Gate,
}

impl VaultService {
    /// A service over a store and a gate.
    pub fn new(store: TokenStore, gate: Gate) -> Self {
        Self { store, gate }
    }
}

fn key_of(key: Option<pb::ClaimKey>) -> Result<TokenKey, Status> {
    let key = key.ok_or_else(|| Status::invalid_argument("key is required"))?;
    if key.job_id.is_empty() {
        return Err(Status::invalid_argument("key.job_id must not be empty"));
    }
    if key.claim.is_empty() {
        return Err(Status::invalid_argument("key.claim must not be empty"));
    }
    Ok(TokenKey {
        job_id: key.job_id,
        claim: key.claim,
    })
}

fn lane_of(lane: i32) -> Result<Lane, Status> {
    match pb::Lane::try_from(lane) {
        Ok(pb::Lane::Run) => Ok(Lane::Run),
        Ok(pb::Lane::Publish) => Ok(Lane::Publish),
        _ => Err(Status::invalid_argument(
            "lane must be LANE_RUN or LANE_PUBLISH",
        )),
    }
}

#[tonic::async_trait]
impl TokenVault for VaultService {
    async fn put(
        &self,
        request: Request<pb::PutRequest>,
    ) -> Result<Response<pb::PutReply>, Status> {
        let req = request.into_inner();
        let key = key_of(req.key)?;
        let lane = lane_of(req.lane)?;
        if req.token.is_empty() {
            return Err(Status::invalid_argument("token must not be empty"));
        }
        tracing::debug!(job_id = %key.job_id, claim = %key.claim, %lane, "vault: token stored");
        self.store
            .put(key, Secret::new(req.token), lane, Instant::now());
        Ok(Response::new(pb::PutReply {}))
    }

    async fn get(
        &self,
        request: Request<pb::GetRequest>,
    ) -> Result<Response<pb::GetReply>, Status> {
        let key = key_of(request.into_inner().key)?;
        let reply = match self.store.get(&key) {
            Some(token) => pb::GetReply {
                found: true,
                token: token.expose().to_owned(),
            },
            None => pb::GetReply {
                found: false,
                token: String::new(),
            },
        };
        Ok(Response::new(reply))
    }

    async fn forget(
        &self,
        request: Request<pb::ForgetRequest>,
    ) -> Result<Response<pb::ForgetReply>, Status> {
        let key = key_of(request.into_inner().key)?;
        if self.store.forget(&key) {
            tracing::debug!(job_id = %key.job_id, claim = %key.claim, "vault: token forgotten on request");
        }
        Ok(Response::new(pb::ForgetReply {}))
    }
}

#[tonic::async_trait]
impl AdmissionGate for VaultService {
    async fn last_renewal(
        &self,
        _request: Request<pb::LastRenewalRequest>,
    ) -> Result<Response<pb::RenewalStatus>, Status> {
        Ok(Response::new(self.gate.status(Instant::now())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tcab_shared::cluster::JobPhase;

    fn summary(id: &str, claim: &str, lane: Lane, phase: JobPhase) -> JobSummary {
        JobSummary {
            name: tcab_shared::labels::job_name(lane, id, claim),
            lane,
            job_id: Some(id.into()),
            claim: Some(claim.into()),
            phase,
            failed_pods: 0,
            created_at: None,
        }
    }

    #[test]
    fn non_loopback_is_refused_unless_allowed() {
        let lo: SocketAddr = "127.0.0.1:50051".parse().unwrap();
        let lo6: SocketAddr = "[::1]:50051".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:50051".parse().unwrap();
        assert!(check_addr(lo, false).is_ok());
        assert!(check_addr(lo6, false).is_ok());
        let err = check_addr(any, false).unwrap_err();
        assert!(
            err.to_string()
                .contains("TCAB_DISPATCHER_VAULT_ALLOW_NON_LOOPBACK")
        );
        assert!(check_addr(any, true).is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn put_get_forget_and_current_claim_order() {
        let store = TokenStore::new();
        let now = Instant::now();
        store.put(TokenKey::new("a", "c2"), "tok-2".into(), Lane::Run, now);
        store.put(TokenKey::new("a", "c1"), "tok-1".into(), Lane::Run, now);
        assert_eq!(
            store.get(&TokenKey::new("a", "c1")).unwrap().expose(),
            "tok-1"
        );
        let held = store.held();
        assert_eq!(held.len(), 2);
        assert_eq!(held[0].key.claim, "c1");
        assert!(
            held[0].seq > held[1].seq,
            "the later Put has the larger seq"
        );
        assert!(
            !format!("{:?}", store).contains("tok-1"),
            "Debug hides tokens"
        );
        assert!(store.forget(&TokenKey::new("a", "c1")));
        assert!(
            !store.forget(&TokenKey::new("a", "c1")),
            "forgetting twice is fine"
        );
        assert_eq!(store.len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn prune_follows_the_jobs() {
        let lease = Duration::from_secs(120);
        let store = TokenStore::new();
        let t0 = Instant::now();
        for (id, lane) in [
            ("live", Lane::Run),
            ("done", Lane::Run),
            ("dead", Lane::Run),
            ("pubdead", Lane::Publish),
            ("vanish", Lane::Run),
            ("never", Lane::Run),
        ] {
            store.put(TokenKey::new(id, "c"), format!("t-{id}").into(), lane, t0);
        }
        let mut jobs = vec![
            summary("live", "c", Lane::Run, JobPhase::Live),
            summary("done", "c", Lane::Run, JobPhase::Succeeded),
            summary("dead", "c", Lane::Run, JobPhase::Failed),
            summary("pubdead", "c", Lane::Publish, JobPhase::Failed),
            summary("vanish", "c", Lane::Run, JobPhase::Live),
            // A Job of another claim of "never" does not count as its Job.
            summary("never", "other", Lane::Run, JobPhase::Live),
        ];
        let dropped = store.prune(&jobs, t0, lease);
        assert_eq!(
            dropped,
            vec![
                (TokenKey::new("done", "c"), DropReason::JobSucceeded),
                (TokenKey::new("pubdead", "c"), DropReason::PublisherFailed),
            ]
        );
        jobs.retain(|j| j.job_id.as_deref() != Some("vanish"));
        let dropped = store.prune(&jobs, t0 + Duration::from_secs(119), lease);
        assert_eq!(
            dropped,
            vec![(TokenKey::new("vanish", "c"), DropReason::JobGone)]
        );
        let dropped = store.prune(&jobs, t0 + lease, lease);
        assert_eq!(
            dropped,
            vec![(TokenKey::new("never", "c"), DropReason::NoJobAppeared)]
        );
        let left: Vec<_> = store.held().into_iter().map(|h| h.key.job_id).collect();
        assert_eq!(
            left,
            ["dead", "live"],
            "a failed driver keeps its token for the death report"
        );
    }

    #[test]
    fn a_token_without_a_job_is_kept_within_the_lease() {
        let t0 = Instant::now();
        let lease = Duration::from_secs(120);
        let verdict = judge_token(
            Lane::Run,
            false,
            t0,
            None,
            t0 + Duration::from_secs(60),
            lease,
        );
        assert_eq!(verdict, TokenVerdict::Keep { seen_job: false });
    }
}
