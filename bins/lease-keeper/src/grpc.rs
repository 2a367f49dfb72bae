//! The lease-keeper's gRPC face, served on 127.0.0.1 beside the standard
//! gRPC health service: the token vault (`Put` and `Forget`, no way to read
//! a token back) and the admission gate (`Verdict`: one lane's gate, judged
//! here and sent as a typed verdict).

use crate::gate::Gate;
use crate::tokens::{TokenKey, TokenStore};
use std::net::SocketAddr;
use std::time::Duration;
use tcab_proto::vault::{
    self as pb,
    admission_gate_server::{AdmissionGate, AdmissionGateServer},
    token_vault_server::{TokenVault, TokenVaultServer},
};
use tcab_shared::runtime::CancellationToken;
use tcab_shared::{Lane, Secret};
use tokio::net::TcpListener;
use tokio::time::Instant;
use tonic::{Request, Response, Status};

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
    shutdown: CancellationToken,
) -> Result<(), VaultError> {
    let service = VaultService { store, gate };
    let (reporter, health) = tcab_proto::tonic_health::server::health_reporter();
    reporter
        .set_serving::<TokenVaultServer<VaultService>>()
        .await;
    reporter
        .set_serving::<AdmissionGateServer<VaultService>>()
        .await;
    // TCP_NODELAY on every accepted connection: a unary answer is a HEADERS
    // frame, a DATA frame and the trailers, and when they leave in two
    // writes Nagle holds the second until the first is acknowledged, which
    // the admitter, waiting for the trailers, delays by its 40 ms delayed ACK.
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    tonic::transport::Server::builder()
        .add_service(health)
        .add_service(TokenVaultServer::new(service.clone()))
        .add_service(AdmissionGateServer::new(service))
        .serve_with_incoming_shutdown(incoming, shutdown.cancelled_owned())
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
    async fn verdict(
        &self,
        request: Request<pb::VerdictRequest>,
    ) -> Result<Response<pb::LaneGate>, Status> {
        let req = request.into_inner();
        let lane = lane_of(req.lane)?;
        let max_age = Duration::from_millis(req.max_age_ms);
        let verdict = self.gate.verdict(lane, Instant::now(), max_age);
        Ok(Response::new(verdict.to_wire()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
