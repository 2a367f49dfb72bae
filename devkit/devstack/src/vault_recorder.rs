//! A recording of the admitter's calls to the lease-keeper's token vault,
//! for tests that check from outside the admitter when each claim's token
//! was handed over. The vault has no call to read a token back, and the
//! lease-keeper's metrics do not say when a `Put` arrived, so the recorder
//! stands between the two containers: a gRPC server on 127.0.0.1 serving the
//! vault and the admission gate, which forwards every call to the
//! lease-keeper and answers with the lease-keeper's own answer. It notes each
//! vault call (its key and lane, never its token) with the wall time it
//! arrived and the wall time its answer went back to the admitter, so the
//! times line up with the API server's audit log and the backend's history
//! (the same machine's clock).
//!
//! [`crate::Stack::record_vault_calls`] puts one in front of a stack's
//! lease-keeper.

use anyhow::Context;
use jiff::Timestamp;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tcab_proto::vault::{
    self as pb, admission_gate_client::AdmissionGateClient, admission_gate_server::AdmissionGate,
    admission_gate_server::AdmissionGateServer, token_vault_client::TokenVaultClient,
    token_vault_server::TokenVault, token_vault_server::TokenVaultServer,
};
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Response, Status};

/// Which vault call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VaultMethod {
    /// A claim's token handed over.
    Put,
    /// A claim's token dropped (no Job will exist for it).
    Forget,
}

/// One vault call, as the recorder saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VaultCall {
    /// `Put` or `Forget`.
    pub method: VaultMethod,
    /// The key's backend job id.
    pub job_id: String,
    /// The key's claim tag.
    pub claim: String,
    /// A `Put`'s lane (`LANE_RUN`, `LANE_PUBLISH`); empty for a `Forget`.
    pub lane: String,
    /// When the call reached the recorder.
    pub received: Timestamp,
    /// When the lease-keeper's answer went back to the admitter.
    pub answered: Timestamp,
    /// The lease-keeper's answer: `Ok`, or the gRPC code it failed with.
    pub outcome: Result<(), tonic::Code>,
}

/// A vault recorder serving on a port of 127.0.0.1 until it is dropped.
pub struct VaultRecorder {
    addr: SocketAddr,
    calls: Arc<Mutex<Vec<VaultCall>>>,
    task: tokio::task::JoinHandle<()>,
}

impl VaultRecorder {
    /// Serves on a free port of 127.0.0.1, forwarding to the vault at
    /// `upstream` (`127.0.0.1:<port>`), which need not be up yet (the
    /// admitter then sees it down, as it would without the recorder).
    pub async fn start(upstream: &str) -> anyhow::Result<VaultRecorder> {
        let channel = Endpoint::from_shared(format!("http://{upstream}"))
            .with_context(|| format!("the vault address {upstream}"))?
            .connect_timeout(Duration::from_secs(2))
            .timeout(Duration::from_secs(10))
            .tcp_nodelay(true)
            .connect_lazy();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding the vault recorder")?;
        let addr = listener
            .local_addr()
            .context("the vault recorder's address")?;
        let calls = Arc::new(Mutex::new(Vec::new()));
        let service = Forwarder {
            vault: TokenVaultClient::new(channel.clone()),
            gate: AdmissionGateClient::new(channel),
            calls: calls.clone(),
        };
        let incoming =
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
        let task = tokio::spawn(async move {
            let served = tonic::transport::Server::builder()
                .add_service(TokenVaultServer::new(service.clone()))
                .add_service(AdmissionGateServer::new(service))
                .serve_with_incoming(incoming)
                .await;
            if let Err(e) = served {
                eprintln!("the vault recorder stopped: {e}");
            }
        });
        Ok(VaultRecorder { addr, calls, task })
    }

    /// The address the admitter is to call (`127.0.0.1:<port>`).
    pub fn addr(&self) -> String {
        self.addr.to_string()
    }

    /// Every vault call so far, in the order they were answered.
    pub fn calls(&self) -> Vec<VaultCall> {
        self.calls.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The `Put`s of one claim (`job_id`, `claim`) that the lease-keeper
    /// accepted.
    pub fn puts_of(&self, job_id: &str, claim: &str) -> Vec<VaultCall> {
        self.calls()
            .into_iter()
            .filter(|c| {
                c.method == VaultMethod::Put
                    && c.job_id == job_id
                    && c.claim == claim
                    && c.outcome.is_ok()
            })
            .collect()
    }
}

impl Drop for VaultRecorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The recorder's gRPC face: each call forwarded, each vault call noted.
#[derive(Clone)]
struct Forwarder {
    vault: TokenVaultClient<Channel>,
    gate: AdmissionGateClient<Channel>,
    calls: Arc<Mutex<Vec<VaultCall>>>,
}

impl Forwarder {
    fn note<T>(
        &self,
        method: VaultMethod,
        key: Option<&pb::ClaimKey>,
        lane: String,
        received: Timestamp,
        answer: &Result<T, Status>,
    ) {
        let call = VaultCall {
            method,
            job_id: key.map(|k| k.job_id.clone()).unwrap_or_default(),
            claim: key.map(|k| k.claim.clone()).unwrap_or_default(),
            lane,
            received,
            answered: Timestamp::now(),
            outcome: answer.as_ref().map(drop).map_err(Status::code),
        };
        self.calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(call);
    }
}

#[tonic::async_trait]
impl TokenVault for Forwarder {
    async fn put(
        &self,
        request: Request<pb::PutRequest>,
    ) -> Result<Response<pb::PutReply>, Status> {
        let received = Timestamp::now();
        let put = request.into_inner();
        let key = put.key.clone();
        let lane = pb::Lane::try_from(put.lane)
            .map(|l| l.as_str_name().to_owned())
            .unwrap_or_else(|_| put.lane.to_string());
        let answer = self
            .vault
            .clone()
            .put(put)
            .await
            .map(|r| Response::new(r.into_inner()));
        self.note(VaultMethod::Put, key.as_ref(), lane, received, &answer);
        answer
    }

    async fn forget(
        &self,
        request: Request<pb::ForgetRequest>,
    ) -> Result<Response<pb::ForgetReply>, Status> {
        let received = Timestamp::now();
        let forget = request.into_inner();
        let key = forget.key.clone();
        let answer = self
            .vault
            .clone()
            .forget(forget)
            .await
            .map(|r| Response::new(r.into_inner()));
        self.note(
            VaultMethod::Forget,
            key.as_ref(),
            String::new(),
            received,
            &answer,
        );
        answer
    }
}

#[tonic::async_trait]
impl AdmissionGate for Forwarder {
    async fn verdict(
        &self,
        request: Request<pb::VerdictRequest>,
    ) -> Result<Response<pb::LaneGate>, Status> {
        self.gate
            .clone()
            .verdict(request.into_inner())
            .await
            .map(|r| Response::new(r.into_inner()))
    }
}
