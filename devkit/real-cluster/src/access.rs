//! How to reach a running control plane, as plain data: the API URL, the CA,
//! a token and kubeconfig per identity. This is what a node agent or any
//! other process is given; nothing here holds a process.

use crate::pki;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, Node, ServiceAccount};
use kube::api::{Api, PostParams};
use kube::config::{
    AuthInfo, Cluster, Context, KubeConfigOptions, Kubeconfig, NamedAuthInfo, NamedCluster,
    NamedContext,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The taint a Node carries until the node lifecycle controller has seen it Ready.
pub const NOT_READY_TAINT: &str = "node.kubernetes.io/not-ready";

/// One identity: who it is, its bearer token and a kubeconfig using it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Credential {
    pub user: String,
    pub groups: Vec<String>,
    pub token: String,
    pub kubeconfig: PathBuf,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential")
            .field("user", &self.user)
            .field("groups", &self.groups)
            .field("token", &"<redacted>")
            .field("kubeconfig", &self.kubeconfig)
            .finish()
    }
}

/// Everything needed to talk to the control plane.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Access {
    /// `https://127.0.0.1:<port>` (the serving certificate also names
    /// `localhost`).
    pub api_url: String,
    /// The CA of the API server's serving certificate (PEM), also its client CA.
    pub ca_cert: PathBuf,
    /// That CA's key, for [`Access::client_cert_kubeconfig`].
    pub ca_key: PathBuf,
    /// Where the keys, kubeconfigs and logs are.
    pub work_dir: PathBuf,
    /// `admin` in `system:masters`.
    pub admin: Credential,
    pub controller_manager: Credential,
    pub scheduler: Credential,
    /// Per node name: `system:node:<name>` in `system:nodes`.
    pub nodes: BTreeMap<String, Credential>,
    /// Per name: the settings' extra identities.
    pub identities: BTreeMap<String, Credential>,
    /// The API server's static token file (CSV `token,user,uid,"groups"`).
    pub token_file: PathBuf,
    /// The API server's audit log (JSON lines), when it writes one.
    #[serde(default)]
    pub audit_log: Option<PathBuf>,
    /// The rest of the node agent's ready line (e.g. `admin
    /// http://127.0.0.1:PORT`), when the launcher runs the agent.
    pub node_agent_ready: Option<String>,
    /// The shared owner's control socket (see [`Access::restart_apiserver`],
    /// [`Access::pause_controller_manager`]),
    /// for a control plane shared through [`crate::shared_with`].
    #[serde(default)]
    pub control_socket: Option<PathBuf>,
}

/// The node agent's view: what it needs to play the nodes. Plain data, so
/// the agent's crate need not know this one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeAccess {
    pub api_url: String,
    pub ca_cert: PathBuf,
    /// The API server's token file, CSV `token,user,uid,"groups"`: node
    /// `<name>`'s row is user `system:node:<name>`.
    pub token_file: PathBuf,
    /// Node name to bearer token.
    pub tokens: BTreeMap<String, String>,
}

/// A client or a kubeconfig could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("reading the kubeconfig {}", path.display())]
    Kubeconfig {
        path: PathBuf,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("building a client")]
    Build(#[source] kube::Error),
    #[error("writing {}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the API refused {what}")]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("TokenRequest for {namespace}/{service_account} answered no token")]
    NoToken {
        namespace: String,
        service_account: String,
    },
    #[error("making a client certificate")]
    Pki(#[from] pki::PkiError),
}

/// A wait did not end well.
#[derive(Debug, thiserror::Error)]
pub enum WaitError {
    #[error("timed out after {after:?} waiting for {what}; last seen: {last_seen}")]
    Timeout {
        what: String,
        after: Duration,
        last_seen: String,
    },
    #[error(transparent)]
    Client(#[from] ClientError),
}

impl Access {
    /// A new kube-rs client for the admin (`system:masters`). Each call makes
    /// a fresh one, so it belongs to the caller's tokio runtime.
    pub async fn admin_client(&self) -> Result<kube::Client, ClientError> {
        client_from_kubeconfig(&self.admin.kubeconfig).await
    }

    /// The node agent's view of this control plane.
    pub fn node_access(&self) -> NodeAccess {
        NodeAccess {
            api_url: self.api_url.clone(),
            ca_cert: self.ca_cert.clone(),
            token_file: self.token_file.clone(),
            tokens: self
                .nodes
                .iter()
                .map(|(name, c)| (name.clone(), c.token.clone()))
                .collect(),
        }
    }

    /// Writes a kubeconfig for this API with a bearer token, `namespace` as
    /// its default.
    pub fn write_token_kubeconfig(
        &self,
        path: &Path,
        token: &str,
        namespace: &str,
    ) -> Result<(), ClientError> {
        let user = AuthInfo {
            token: Some(token.to_owned().into()),
            ..AuthInfo::default()
        };
        write_kubeconfig(path, &self.api_url, &self.ca_cert, user, namespace)
    }

    /// A kubeconfig (written to `path`) for ServiceAccount
    /// `namespace/service_account`, with a token from the TokenRequest API
    /// valid for a day. The way to run something as a Role (the dispatcher as
    /// the chart's): bind the Role to that ServiceAccount. The ServiceAccount
    /// must exist.
    pub async fn service_account_kubeconfig(
        &self,
        namespace: &str,
        service_account: &str,
        path: &Path,
    ) -> Result<PathBuf, ClientError> {
        let client = self.admin_client().await?;
        let sas: Api<ServiceAccount> = Api::namespaced(client, namespace);
        let request = TokenRequest {
            spec: Some(TokenRequestSpec {
                expiration_seconds: Some(24 * 3600),
                ..TokenRequestSpec::default()
            }),
            ..TokenRequest::default()
        };
        let answer = sas
            .create_token_request(service_account, &PostParams::default(), &request)
            .await
            .map_err(|source| ClientError::Api {
                what: format!("a token for {namespace}/{service_account}"),
                source,
            })?;
        let token = answer
            .status
            .and_then(|s| s.token)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| ClientError::NoToken {
                namespace: namespace.into(),
                service_account: service_account.into(),
            })?;
        self.write_token_kubeconfig(path, &token, namespace)?;
        Ok(path.to_owned())
    }

    /// A kubeconfig (written to `path`, with the certificate and key beside
    /// it) authenticating as `user` in `groups` by a client certificate from
    /// the control plane's CA: any identity at any time, e.g. a node not
    /// named at start (`system:node:<name>` in `system:nodes`).
    pub fn client_cert_kubeconfig(
        &self,
        user: &str,
        groups: &[String],
        path: &Path,
    ) -> Result<PathBuf, ClientError> {
        let minted = pki::mint_client_cert(&self.ca_key, user, groups)?;
        let cert = path.with_extension("crt");
        let key = path.with_extension("key");
        for (file, text) in [(&cert, &minted.cert_pem), (&key, &minted.key_pem)] {
            std::fs::write(file, text).map_err(|source| ClientError::Write {
                path: file.clone(),
                source,
            })?;
        }
        let auth = AuthInfo {
            client_certificate: Some(cert.display().to_string()),
            client_key: Some(key.display().to_string()),
            ..AuthInfo::default()
        };
        write_kubeconfig(path, &self.api_url, &self.ca_cert, auth, "default")?;
        Ok(path.to_owned())
    }

    /// Creates `namespace` (an existing one is fine) and waits until its
    /// `default` ServiceAccount exists: a test's own namespace, ready for
    /// Jobs.
    pub async fn create_namespace(
        &self,
        namespace: &str,
        limit: Duration,
    ) -> Result<(), WaitError> {
        let client = self.admin_client().await?;
        create_namespace(&client, namespace).await?;
        wait_for_default_service_account(&client, namespace, limit).await
    }

    /// The first `http://` or `https://` URL of the node agent's ready line
    /// (its admin API, for tcab-node-agent).
    pub fn node_agent_url(&self) -> Option<&str> {
        self.node_agent_ready
            .as_deref()?
            .split_whitespace()
            .find(|w| w.starts_with("http://") || w.starts_with("https://"))
            // `admin http://127.0.0.1:PORT; nodes: ...`
            .map(|w| w.trim_end_matches([';', ',']))
    }

    /// Restarts the API server of a shared control plane (see
    /// `ControlPlane::restart_apiserver`) by asking its owner process, and
    /// returns how long the API was away. Every test of the binary meets the
    /// restart: only a binary whose tests run one at a time should do this.
    pub async fn restart_apiserver(&self) -> Result<Duration, crate::RestartError> {
        use crate::RestartError;
        let path = self.control_socket.as_ref().ok_or(RestartError::NoOwner)?;
        crate::shared::ask_owner(path, crate::shared::RESTART_APISERVER)
            .await
            .map_err(|source| RestartError::Owner {
                path: path.clone(),
                source,
            })?
            .map_err(RestartError::Refused)
    }

    /// Pauses the controller-manager of a shared control plane (see
    /// `ControlPlane::pause_controller_manager`) by asking its owner
    /// process. Every test of the binary meets the pause: only a binary
    /// whose tests run one at a time should do this, and it must resume it
    /// ([`Access::resume_controller_manager`]) however the test ends.
    pub async fn pause_controller_manager(&self) -> Result<Duration, crate::PauseError> {
        self.ask_owner_about_the_controller_manager(
            crate::shared::PAUSE_CONTROLLER_MANAGER,
            "pause kube-controller-manager",
        )
        .await
    }

    /// Resumes the controller-manager of a shared control plane (see
    /// `ControlPlane::resume_controller_manager`) by asking its owner
    /// process; a no-op when it runs.
    pub async fn resume_controller_manager(&self) -> Result<Duration, crate::PauseError> {
        self.ask_owner_about_the_controller_manager(
            crate::shared::RESUME_CONTROLLER_MANAGER,
            "resume kube-controller-manager",
        )
        .await
    }

    async fn ask_owner_about_the_controller_manager(
        &self,
        request: &str,
        what: &'static str,
    ) -> Result<Duration, crate::PauseError> {
        use crate::PauseError;
        let path = self
            .control_socket
            .as_ref()
            .ok_or(PauseError::NoOwner(what))?;
        crate::shared::ask_owner(path, request)
            .await
            .map_err(|source| PauseError::Owner {
                what,
                path: path.clone(),
                source,
            })?
            .map_err(|why| PauseError::Refused { what, why })
    }

    /// Waits until every named Node is Ready with the not-ready taint
    /// removed (what the node lifecycle controller does once it has seen it
    /// Ready). The nodes are played by a node agent the caller started with
    /// [`Access::node_access`].
    pub async fn wait_for_nodes(&self, names: &[String], limit: Duration) -> Result<(), WaitError> {
        let client = self.admin_client().await?;
        let nodes: Api<Node> = Api::all(client);
        let what = format!(
            "nodes {} Ready without the {NOT_READY_TAINT} taint",
            names.join(", ")
        );
        poll(&what, limit, async || nodes_ready(&nodes, names).await).await
    }
}

/// `Ok` when every named Node is Ready without the not-ready taint, else
/// what each other one is at.
pub(crate) async fn nodes_ready(nodes: &Api<Node>, names: &[String]) -> Result<(), String> {
    let mut pending = Vec::new();
    for name in names {
        match nodes.get_opt(name).await {
            Ok(Some(node)) => {
                if let Some(why) = node_not_ready(&node) {
                    pending.push(format!("{name}: {why}"));
                }
            }
            Ok(None) => pending.push(format!("{name}: not registered")),
            Err(e) => pending.push(format!("{name}: {e}")),
        }
    }
    if pending.is_empty() {
        Ok(())
    } else {
        Err(pending.join("; "))
    }
}

/// Why a Node is not ready for pods yet, or `None` when it is.
pub fn node_not_ready(node: &Node) -> Option<String> {
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.status.as_str());
    if ready != Some("True") {
        return Some(format!("Ready is {}", ready.unwrap_or("missing")));
    }
    let tainted = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key == NOT_READY_TAINT));
    tainted.then(|| format!("still tainted {NOT_READY_TAINT}"))
}

pub(crate) async fn create_namespace(
    client: &kube::Client,
    namespace: &str,
) -> Result<(), ClientError> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns = Namespace {
        metadata: kube::api::ObjectMeta {
            name: Some(namespace.into()),
            ..Default::default()
        },
        ..Namespace::default()
    };
    match namespaces.create(&PostParams::default(), &ns).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(source) => Err(ClientError::Api {
            what: format!("creating namespace {namespace}"),
            source,
        }),
    }
}

pub(crate) async fn wait_for_default_service_account(
    client: &kube::Client,
    namespace: &str,
    limit: Duration,
) -> Result<(), WaitError> {
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    poll(
        &format!("the default ServiceAccount in {namespace}"),
        limit,
        async || match sas.get_opt("default").await {
            Ok(Some(_)) => Ok(()),
            Ok(None) => Err("not there yet".to_owned()),
            Err(e) => Err(e.to_string()),
        },
    )
    .await
}

/// Polls `check` until it is `Ok`, for at most `limit`; a timeout carries
/// the last `Err` (what was seen instead).
pub(crate) async fn poll<T>(
    what: &str,
    limit: Duration,
    mut check: impl AsyncFnMut() -> Result<T, String>,
) -> Result<T, WaitError> {
    let start = tokio::time::Instant::now();
    loop {
        match check().await {
            Ok(value) => return Ok(value),
            Err(seen) if start.elapsed() >= limit => {
                return Err(WaitError::Timeout {
                    what: what.to_owned(),
                    after: limit,
                    last_seen: seen,
                });
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

pub(crate) async fn client_from_kubeconfig(path: &Path) -> Result<kube::Client, ClientError> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let kubeconfig = Kubeconfig::read_from(path).map_err(|source| ClientError::Kubeconfig {
        path: path.to_owned(),
        source,
    })?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|source| ClientError::Kubeconfig {
            path: path.to_owned(),
            source,
        })?;
    kube::Client::try_from(config).map_err(ClientError::Build)
}

/// Writes a kubeconfig with one cluster, one user and one context.
pub(crate) fn write_kubeconfig(
    path: &Path,
    api_url: &str,
    ca_cert: &Path,
    user: AuthInfo,
    namespace: &str,
) -> Result<(), ClientError> {
    const NAME: &str = "tcab-real-cluster";
    let config = Kubeconfig {
        api_version: Some("v1".into()),
        kind: Some("Config".into()),
        clusters: vec![NamedCluster {
            name: NAME.into(),
            cluster: Some(Cluster {
                server: Some(api_url.into()),
                certificate_authority: Some(ca_cert.display().to_string()),
                ..Cluster::default()
            }),
            ..NamedCluster::default()
        }],
        auth_infos: vec![NamedAuthInfo {
            name: NAME.into(),
            auth_info: Some(user),
            ..NamedAuthInfo::default()
        }],
        contexts: vec![NamedContext {
            name: NAME.into(),
            context: Some(Context {
                cluster: NAME.into(),
                user: Some(NAME.into()),
                namespace: Some(namespace.into()),
                ..Context::default()
            }),
            ..NamedContext::default()
        }],
        current_context: Some(NAME.into()),
        ..Kubeconfig::default()
    };
    let write_err = |source| ClientError::Write {
        path: path.to_owned(),
        source,
    };
    let text = serde_saphyr::to_string(&config)
        .map_err(|e| write_err(std::io::Error::other(e.to_string())))?;
    std::fs::write(path, text).map_err(write_err)
}
