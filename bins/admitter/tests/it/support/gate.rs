//! A tiny lease-keeper stand-in on 127.0.0.1:0: the token vault (records
//! Puts and Forgets, can refuse Puts) and the admission gate (answers a
//! settable verdict per lane, as the lease-keeper judges it, and records the
//! maximum age each question came with).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tcab_proto::gate::GateVerdict;
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

/// One question to the gate: (lane, as on the wire; max age in ms).
pub type Asked = (i32, u64);

struct Inner {
    runs: GateVerdict,
    publishes: GateVerdict,
    asked: Vec<Asked>,
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

impl FakeGate {
    /// Starts with the gate open.
    pub async fn start() -> Self {
        let inner = Arc::new(Mutex::new(Inner {
            runs: GateVerdict::Open,
            publishes: GateVerdict::Open,
            asked: vec![],
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
                // As the lease-keeper serves it: TCP_NODELAY on each connection.
                .serve_with_incoming(
                    tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
                )
                .await
                .unwrap()
        });
        FakeGate { addr, inner }
    }

    /// What the gate answers for `lane` from now on.
    pub fn set_verdict(&self, lane: tcab_shared::Lane, verdict: GateVerdict) {
        let mut inner = self.inner.lock().unwrap();
        match lane {
            tcab_shared::Lane::Run => inner.runs = verdict,
            tcab_shared::Lane::Publish => inner.publishes = verdict,
        }
    }

    /// The same verdict for both lanes.
    pub fn set_both(&self, verdict: GateVerdict) {
        for lane in tcab_shared::Lane::ALL {
            self.set_verdict(lane, verdict.clone());
        }
    }

    /// Every question asked, in order.
    pub fn asked(&self) -> Vec<Asked> {
        self.inner.lock().unwrap().asked.clone()
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
    async fn verdict(
        &self,
        request: Request<VerdictRequest>,
    ) -> Result<Response<LaneGate>, Status> {
        let request = request.into_inner();
        let mut inner = self.0.lock().unwrap();
        inner.gate_calls += 1;
        inner.asked.push((request.lane, request.max_age_ms));
        let verdict = match Lane::try_from(request.lane) {
            Ok(Lane::Run) => &inner.runs,
            Ok(Lane::Publish) => &inner.publishes,
            _ => {
                return Err(Status::invalid_argument(
                    "lane must be LANE_RUN or LANE_PUBLISH",
                ));
            }
        };
        Ok(Response::new(verdict.to_wire()))
    }
}
