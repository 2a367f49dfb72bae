//! A tiny lease-keeper stand-in on 127.0.0.1:0: the token vault (records
//! Puts and Forgets, can refuse Puts) and the admission gate (answers a
//! settable status, per lane as the lease-keeper does).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tcab_proto::vault::admission_gate_server::{AdmissionGate, AdmissionGateServer};
use tcab_proto::vault::token_vault_server::{TokenVault, TokenVaultServer};
use tcab_proto::vault::*;
use tonic::{Request, Response, Status};

#[derive(Debug, Clone, PartialEq)]
pub struct Put {
    pub job_id: String,
    pub claim: String,
    pub token: String,
    pub lane: i32,
}

/// The key of one `Forget`: (job id, claim tag).
pub type Forgotten = (String, String);

struct Inner {
    status: RenewalStatus,
    puts: Vec<Put>,
    put_calls: u32,
    refuse_puts: bool,
    forgets: Vec<Forgotten>,
    gate_calls: u32,
}

#[derive(Clone)]
pub struct FakeGate {
    pub addr: SocketAddr,
    inner: Arc<Mutex<Inner>>,
}

#[derive(Clone)]
struct Svc(Arc<Mutex<Inner>>);

/// A lane whose last renewal call succeeded just now.
pub fn lane_renewed() -> LaneRenewal {
    LaneRenewal {
        enabled: true,
        renewed: true,
        age_ms: 5,
        failing: false,
        detail: String::new(),
    }
}

/// A status saying both lanes were renewed just now, with a current view.
pub fn renewed() -> RenewalStatus {
    RenewalStatus {
        runs: Some(lane_renewed()),
        publishes: Some(lane_renewed()),
        view_current: true,
        view_detail: String::new(),
    }
}

impl FakeGate {
    /// Starts with the gate open.
    pub async fn start() -> Self {
        let inner = Arc::new(Mutex::new(Inner {
            status: renewed(),
            puts: vec![],
            put_calls: 0,
            refuse_puts: false,
            forgets: vec![],
            gate_calls: 0,
        }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let svc = Svc(inner.clone());
        tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(TokenVaultServer::new(svc.clone()))
                .add_service(AdmissionGateServer::new(svc))
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
                .await
                .unwrap()
        });
        FakeGate { addr, inner }
    }

    pub fn set_status(&self, status: RenewalStatus) {
        self.inner.lock().unwrap().status = status;
    }

    pub fn refuse_puts(&self, refuse: bool) {
        self.inner.lock().unwrap().refuse_puts = refuse;
    }

    pub fn puts(&self) -> Vec<Put> {
        self.inner.lock().unwrap().puts.clone()
    }

    pub fn put_calls(&self) -> u32 {
        self.inner.lock().unwrap().put_calls
    }

    /// The keys forgotten, in order.
    pub fn forgets(&self) -> Vec<Forgotten> {
        self.inner.lock().unwrap().forgets.clone()
    }

    pub fn gate_calls(&self) -> u32 {
        self.inner.lock().unwrap().gate_calls
    }
}

/// An address nothing listens on.
pub async fn dead_addr() -> SocketAddr {
    tcab_testkit::http::closed_addr()
}

#[tonic::async_trait]
impl TokenVault for Svc {
    async fn put(&self, request: Request<PutRequest>) -> Result<Response<PutReply>, Status> {
        let mut inner = self.0.lock().unwrap();
        inner.put_calls += 1;
        if inner.refuse_puts {
            return Err(Status::unavailable("injected"));
        }
        let r = request.into_inner();
        let key = r.key.unwrap_or_default();
        inner.puts.push(Put {
            job_id: key.job_id,
            claim: key.claim,
            token: r.token,
            lane: r.lane,
        });
        Ok(Response::new(PutReply {}))
    }

    async fn forget(
        &self,
        request: Request<ForgetRequest>,
    ) -> Result<Response<ForgetReply>, Status> {
        let key = request.into_inner().key.unwrap_or_default();
        self.0.lock().unwrap().forgets.push((key.job_id, key.claim));
        Ok(Response::new(ForgetReply {}))
    }
}

#[tonic::async_trait]
impl AdmissionGate for Svc {
    async fn last_renewal(
        &self,
        _: Request<LastRenewalRequest>,
    ) -> Result<Response<RenewalStatus>, Status> {
        let mut inner = self.0.lock().unwrap();
        inner.gate_calls += 1;
        Ok(Response::new(inner.status.clone()))
    }
}
