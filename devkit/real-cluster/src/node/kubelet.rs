//! The upstream kubelet of one real node: its configuration file and its
//! kubeconfig. Settings follow the test rig's needs, each with its reason.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;

/// The kubelet's port on its node address (the API server reaches it
/// through the egress proxy).
pub const KUBELET_PORT: u16 = 10250;

/// What one node's kubelet configuration needs.
pub struct Config<'a> {
    pub node_ip: Ipv4Addr,
    pub containerd_socket: &'a Path,
    /// The cgroup (in every v1 hierarchy) under which `kubepods` goes, so
    /// that each node's pods are apart and found again for cleanup.
    pub cgroup_root: &'a str,
    /// How long the node's Lease lasts (renewed at a quarter of it).
    pub lease_seconds: u32,
    /// Where the node's pod logs go (`podLogsDir`): one directory per node,
    /// since the nodes share a mount namespace and each kubelet removes
    /// the log directories of pods it does not know (upstream's
    /// `/var/log/pods` shared by two kubelets loses every log of the other
    /// node's pods: "failed to try resolving symlinks in path ...").
    pub pod_logs_dir: &'a Path,
}

/// The KubeletConfiguration (kubelet.config.k8s.io/v1beta1).
///
/// - `failCgroupV1: false`: from v1.35 the kubelet refuses cgroup v1
///   otherwise, and the machines of this rig are cgroup v1 hybrids.
/// - Authentication is anonymous and authorization AlwaysAllow: the kubelet
///   listens only inside the rig's namespace, and the API server (its only
///   client) presents no client certificate here.
/// - `resolvConf: ""`: pods get no DNS (there is none to reach).
/// - `localStorageCapacityIsolation`: ephemeral-storage limits are enforced
///   by the eviction manager (a death cause the tests provoke).
/// - Short status and lease periods, as the node agent uses for tests.
/// - `evictionHard` at small absolute amounts (upstream: nodefs under
///   10 %, imagefs under 15 % free): the nodes share this machine's disk and
///   memory, which a well-used build machine often has less of, and the
///   kubelet would then report `DiskPressure`, evict every pod (the
///   dispatcher's among them), taint the node and reject pods when it
///   restarts, a pressure no test asked for. A container's own
///   ephemeral-storage limit is enforced all the same.
pub fn config(c: &Config<'_>) -> String {
    format!(
        r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: {ip}
port: {KUBELET_PORT}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {{enabled: true}}
  webhook: {{enabled: false}}
authorization:
  mode: AlwaysAllow
cgroupDriver: cgroupfs
cgroupRoot: {root}
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://{sock}
resolvConf: ""
enforceNodeAllocatable: ["pods"]
localStorageCapacityIsolation: true
nodeStatusUpdateFrequency: 2s
nodeLeaseDurationSeconds: {lease}
evictionPressureTransitionPeriod: 5s
podLogsDir: {logs}
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "1Gi"
  nodefs.inodesFree: "1%"
  imagefs.available: "1Gi"
  imagefs.inodesFree: "1%"
serializeImagePulls: false
imageMinimumGCAge: 24h
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
"#,
        ip = c.node_ip,
        root = c.cgroup_root,
        sock = c.containerd_socket.display(),
        lease = c.lease_seconds,
        logs = c.pod_logs_dir.display(),
    )
}

/// A kubeconfig for a static token, to the API server at `server` (the
/// gateway address inside the node network).
pub fn kubeconfig(server: SocketAddr, ca_file: &Path, token: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Config
clusters:
- name: tcab
  cluster:
    server: https://{server}
    certificate-authority: {ca}
users:
- name: tcab
  user:
    token: {token}
contexts:
- name: tcab
  context: {{cluster: tcab, user: tcab}}
current-context: tcab
"#,
        ca = ca_file.display()
    )
}

/// kube-proxy's configuration: iptables mode, the pods' range, no
/// conntrack sysctls (they are the machine's, not the namespace's).
pub fn proxy_config(kubeconfig: &Path, node: &str) -> String {
    format!(
        r#"apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clusterCIDR: 10.202.0.0/16
hostnameOverride: {node}
bindAddress: 127.0.0.1
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
clientConnection:
  kubeconfig: {kc}
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
"#,
        kc = kubeconfig.display()
    )
}
