//! The admitter's gRPC client of the lease-keeper's localhost services: the
//! token vault (`Put` each claim's per-job token before its Job exists,
//! `Forget` it when no Job will exist) and the admission gate (`Verdict`: the
//! lease-keeper judges a lane's gate and answers with a typed verdict, read
//! here into [`GateVerdict`] and acted on as given).
//!
//! The channel connects lazily, so a lease-keeper that is not up yet is not
//! a start-up error: it is a closed gate until it answers.

use std::net::SocketAddr;
use std::time::Duration;
use tcab_proto::gate::GateVerdict;
use tcab_proto::vault::admission_gate_client::AdmissionGateClient;
use tcab_proto::vault::token_vault_client::TokenVaultClient;
use tcab_proto::vault::{self as pb, ClaimKey, ForgetRequest, PutRequest, VerdictRequest};
use tcab_shared::retry::{Backoff, Retries};
use tcab_shared::{Lane, Secret};
use tonic::transport::{Channel, Endpoint};

/// How the vault client retries and times out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeeperClientSettings {
    /// Deadline of one call (and of connecting).
    pub call_timeout: Duration,
    /// How many times a `Put` is tried in all.
    pub put_attempts: u32,
    /// Pause before the first retry of a `Put`; doubled for each further one.
    pub put_retry_delay: Duration,
}

impl KeeperClientSettings {
    /// The retries of one `Put`: `put_attempts` in all (at least one), the
    /// pause doubling from `put_retry_delay`.
    fn put_retries(&self) -> Retries {
        Retries::new(
            Backoff::doubling(self.put_retry_delay, Duration::MAX),
            self.put_attempts.max(1) - 1,
        )
    }
}

impl Default for KeeperClientSettings {
    fn default() -> Self {
        KeeperClientSettings {
            call_timeout: Duration::from_secs(2),
            put_attempts: 3,
            put_retry_delay: Duration::from_millis(100),
        }
    }
}

/// A vault or gate call that failed.
#[derive(Debug, thiserror::Error)]
pub enum VaultError {
    /// The address does not make a gRPC endpoint.
    #[error("invalid vault address {addr}")]
    Address {
        /// The address given.
        addr: SocketAddr,
        /// Why tonic refused it.
        #[source]
        source: tonic::transport::Error,
    },
    /// A call failed (including "could not connect").
    #[error("vault {call} failed after {attempts} attempt(s): {code:?} {message}")]
    Call {
        /// The RPC.
        call: &'static str,
        /// Attempts made.
        attempts: u32,
        /// The gRPC status code of the last attempt.
        code: tonic::Code,
        /// Its message.
        message: String,
    },
}

/// Client of the token vault and the admission gate, over one lazy channel.
#[derive(Clone, Debug)]
pub struct KeeperClient {
    vault: TokenVaultClient<Channel>,
    gate: AdmissionGateClient<Channel>,
    settings: KeeperClientSettings,
}

impl KeeperClient {
    /// A client of `http://{addr}` that connects on first use.
    pub fn connect_lazy(
        addr: SocketAddr,
        settings: KeeperClientSettings,
    ) -> Result<Self, VaultError> {
        let endpoint = Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|source| VaultError::Address { addr, source })?
            .connect_timeout(settings.call_timeout)
            .timeout(settings.call_timeout);
        let channel = endpoint.connect_lazy();
        Ok(KeeperClient {
            vault: TokenVaultClient::new(channel.clone()),
            gate: AdmissionGateClient::new(channel),
            settings,
        })
    }

    /// Stores the per-job token of one claim, trying up to
    /// `put_attempts` times with a doubling pause between tries.
    pub async fn put(
        &self,
        lane: Lane,
        job_id: &str,
        claim: &str,
        token: &Secret,
    ) -> Result<(), VaultError> {
        let request = PutRequest {
            key: Some(ClaimKey {
                job_id: job_id.to_owned(),
                claim: claim.to_owned(),
            }),
            token: token.expose().to_owned(),
            lane: wire_lane(lane) as i32,
        };
        let mut retries = self.settings.put_retries();
        loop {
            let mut client = self.vault.clone();
            let Err(status) = client.put(request.clone()).await else {
                return Ok(());
            };
            let Some(pause) = retries.failed(None) else {
                return Err(VaultError::Call {
                    call: "Put",
                    attempts: retries.failures(),
                    code: status.code(),
                    message: status.message().to_owned(),
                });
            };
            let attempt = retries.failures();
            tracing::debug!(job_id, attempt, code = ?status.code(), "vault Put failed; retrying");
            tokio::time::sleep(pause).await;
        }
    }

    /// Drops the token of a claim whose Job will not exist (one try: the
    /// lease-keeper also drops a token that has no Job after a lease).
    pub async fn forget(&self, job_id: &str, claim: &str) -> Result<(), VaultError> {
        let mut client = self.vault.clone();
        client
            .forget(ForgetRequest {
                key: Some(ClaimKey {
                    job_id: job_id.to_owned(),
                    claim: claim.to_owned(),
                }),
            })
            .await
            .map(|_| ())
            .map_err(|status| VaultError::Call {
                call: "Forget",
                attempts: 1,
                code: status.code(),
                message: status.message().to_owned(),
            })
    }

    /// Asks the admission gate for the verdict of `lane`, whose last
    /// successful renewal may be at most `max_age` old. The answer is read
    /// into the typed verdict here (an answer that cannot be read is a closed
    /// gate); a call that fails is an error, for the caller to hold on.
    pub async fn verdict(&self, lane: Lane, max_age: Duration) -> Result<GateVerdict, VaultError> {
        let mut client = self.gate.clone();
        let request = VerdictRequest {
            lane: wire_lane(lane) as i32,
            max_age_ms: u64::try_from(max_age.as_millis()).unwrap_or(u64::MAX),
        };
        client
            .verdict(request)
            .await
            .map(|answer| GateVerdict::from_wire(answer.into_inner()))
            .map_err(|status| VaultError::Call {
                call: "Verdict",
                attempts: 1,
                code: status.code(),
                message: status.message().to_owned(),
            })
    }
}

fn wire_lane(lane: Lane) -> pb::Lane {
    match lane {
        Lane::Run => pb::Lane::Run,
        Lane::Publish => pb::Lane::Publish,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_put_is_tried_three_times_with_a_doubling_pause() {
        let mut retries = KeeperClientSettings::default().put_retries();
        let pauses: Vec<Duration> = std::iter::from_fn(|| retries.failed(None)).collect();
        assert_eq!(
            pauses,
            [Duration::from_millis(100), Duration::from_millis(200)]
        );
        assert_eq!(retries.failures(), 3, "three attempts in all");
        let once = KeeperClientSettings {
            put_attempts: 0,
            ..KeeperClientSettings::default()
        };
        assert_eq!(
            once.put_retries().failed(None),
            None,
            "one attempt at least"
        );
    }
}
