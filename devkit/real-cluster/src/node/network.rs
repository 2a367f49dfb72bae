//! The node network: one network (and mount) namespace that the rig makes,
//! where real nodes (containerd, the kubelet, kube-proxy) and their pods
//! live, so that no address outside loopback or that namespace is ever used.
//!
//! - A holder process (`unshare --net --mount`, dying with us) owns the
//!   namespaces; everything else joins them with `nsenter`. Its private
//!   mount namespace gets a tmpfs on `/run/netns`, where containerd pins the
//!   pods' network namespaces, so they go when the holder's tree goes.
//! - Addresses: [`GATEWAY_IP`] on the namespace's loopback stands for the
//!   host's loopback: a listener there per forwarded port carries each
//!   connection to `127.0.0.1:<port>` on the host (the API server, a
//!   backend). Node `i` has `10.201.0.<i+1>`; its pods `10.202.<i+1>.0/24`
//!   on a bridge of their own.
//! - The API server reaches kubelets and pods (logs, pod proxy) through its
//!   egress selector: an HTTP CONNECT proxy on a Unix socket
//!   ([`NodeNetwork::egress_socket`]), which dials loopback on the host
//!   and the rig's ranges inside the namespace, and refuses any other
//!   address.

use std::fs::File;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinHandle;

use crate::process::Component;

/// The host's loopback as seen from inside the node network.
pub const GATEWAY_IP: Ipv4Addr = Ipv4Addr::new(10, 201, 255, 1);
/// The nodes' addresses: `10.201.0.0/16`.
pub const NODE_RANGE: (Ipv4Addr, u8) = (Ipv4Addr::new(10, 201, 0, 0), 16);
/// The pods' addresses: `10.202.0.0/16`, a /24 per node.
pub const POD_RANGE: (Ipv4Addr, u8) = (Ipv4Addr::new(10, 202, 0, 0), 16);
/// How long a connection into the namespace may take.
const DIAL_TIMEOUT: Duration = Duration::from_secs(5);

/// The address of node `index` (0-based).
pub fn node_ip(index: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 201, 0, (index + 1) as u8)
}

/// The pod subnet (a /24) of node `index`.
pub fn pod_subnet(index: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 202, (index + 1) as u8, 0)
}

fn in_range(ip: Ipv4Addr, (net, bits): (Ipv4Addr, u8)) -> bool {
    let mask = u32::MAX << (32 - bits);
    u32::from(ip) & mask == u32::from(net) & mask
}

/// Where the egress proxy may dial: `Host` for loopback, `Namespace` for
/// the rig's own ranges; anything else is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    Host,
    Namespace,
}

/// The route of a CONNECT target, or `None` for an address outside the rig.
pub fn route(ip: IpAddr) -> Option<Route> {
    match ip {
        IpAddr::V4(v4) if v4.is_loopback() => Some(Route::Host),
        IpAddr::V6(v6) if v6.is_loopback() => Some(Route::Host),
        IpAddr::V4(v4)
            if v4 == GATEWAY_IP || in_range(v4, NODE_RANGE) || in_range(v4, POD_RANGE) =>
        {
            Some(Route::Namespace)
        }
        _ => None,
    }
}

/// A request to the thread that lives inside the namespace.
enum Request {
    Bind(SocketAddr, mpsc::Sender<io::Result<TcpListener>>),
    Dial(SocketAddr, mpsc::Sender<io::Result<TcpStream>>),
}

/// Opens sockets inside the namespace: a socket belongs to the network
/// namespace of the thread that made it, so one thread joins the namespace
/// and makes them; they are then used from anywhere.
#[derive(Clone)]
pub struct Sockets {
    tx: mpsc::Sender<Request>,
}

impl Sockets {
    fn start(ns: File) -> io::Result<Sockets> {
        let (tx, rx) = mpsc::channel::<Request>();
        let (ready_tx, ready_rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("node-network".into())
            .spawn(move || {
                let joined = nix::sched::setns(ns.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET)
                    .map_err(io::Error::from);
                let ok = joined.is_ok();
                let _ = ready_tx.send(joined);
                if !ok {
                    return;
                }
                for req in rx {
                    match req {
                        Request::Bind(addr, reply) => {
                            let _ = reply.send(TcpListener::bind(addr));
                        }
                        // Dials are quick inside one machine; a slow one
                        // holds the others for at most DIAL_TIMEOUT.
                        Request::Dial(addr, reply) => {
                            let _ = reply.send(TcpStream::connect_timeout(&addr, DIAL_TIMEOUT));
                        }
                    }
                }
            })?;
        ready_rx
            .recv()
            .map_err(|_| io::Error::other("the node network thread ended"))??;
        Ok(Sockets { tx })
    }

    fn ask<T>(&self, make: impl FnOnce(mpsc::Sender<io::Result<T>>) -> Request) -> io::Result<T> {
        let (reply, answer) = mpsc::channel();
        let gone = || io::Error::other("the node network thread ended");
        self.tx.send(make(reply)).map_err(|_| gone())?;
        answer.recv().map_err(|_| gone())?
    }

    /// A listener inside the namespace.
    pub fn bind(&self, addr: SocketAddr) -> io::Result<tokio::net::TcpListener> {
        let l = self.ask(|r| Request::Bind(addr, r))?;
        l.set_nonblocking(true)?;
        tokio::net::TcpListener::from_std(l)
    }

    /// A connection made inside the namespace (blocking: call it from
    /// `spawn_blocking`).
    pub fn dial(&self, addr: SocketAddr) -> io::Result<tokio::net::TcpStream> {
        let s = self.ask(|r| Request::Dial(addr, r))?;
        s.set_nonblocking(true)?;
        tokio::net::TcpStream::from_std(s)
    }
}

/// Runs a command inside the namespaces of `pid` (`nsenter --net --mount`).
pub(crate) fn run_inside(pid: u32, args: &[&str]) -> io::Result<()> {
    let out = Command::new("nsenter")
        .args(["--target", &pid.to_string(), "--net", "--mount", "--"])
        .args(args)
        .output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "`{}` inside the node network: {}: {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// The node network of one control plane.
pub struct NodeNetwork {
    holder: Component,
    sockets: Sockets,
    egress_socket: PathBuf,
    tasks: Vec<JoinHandle<()>>,
    forwarded: Vec<u16>,
}

impl NodeNetwork {
    /// Makes the namespaces (the holder's log in `dir`), sets up loopback,
    /// the gateway address, forwarding and `/run/netns`, and serves the
    /// egress proxy on `dir/egress.sock`.
    pub async fn start(dir: &Path) -> io::Result<NodeNetwork> {
        std::fs::create_dir_all(dir)?;
        let holder = Component::spawn(
            "node-network",
            Path::new("unshare"),
            &[
                "--net".into(),
                "--mount".into(),
                "--propagation".into(),
                "private".into(),
                "--".into(),
                "sleep".into(),
                "infinity".into(),
            ],
            &dir.join("holder.log"),
        )?;
        let pid = holder.pid();
        // unshare execs sleep once the namespaces exist: wait for that.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let mine = std::fs::read_link("/proc/self/ns/net")?;
            let its = std::fs::read_link(format!("/proc/{pid}/ns/net"));
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            if its.is_ok_and(|n| n != mine) && comm.trim() == "sleep" {
                break;
            }
            if std::time::Instant::now() > deadline {
                return Err(io::Error::other(format!(
                    "`unshare --net --mount` did not make its namespaces within 5 s (see {})",
                    dir.join("holder.log").display()
                )));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let gateway = format!("{GATEWAY_IP}/32");
        for args in [
            &["ip", "link", "set", "lo", "up"][..],
            &["ip", "addr", "add", &gateway, "dev", "lo"],
            &["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"],
            &["mkdir", "-p", "/run/netns"],
            &[
                "mount",
                "-t",
                "tmpfs",
                "-o",
                "mode=0755",
                "tcab-netns",
                "/run/netns",
            ],
        ] {
            run_inside(pid, args)?;
        }
        let ns = File::open(format!("/proc/{pid}/ns/net"))?;
        let sockets = Sockets::start(ns)?;
        let egress_socket = dir.join("egress.sock");
        let _ = std::fs::remove_file(&egress_socket);
        let listener = tokio::net::UnixListener::bind(&egress_socket)?;
        let egress = tokio::spawn(serve_egress(listener, sockets.clone()));
        Ok(NodeNetwork {
            holder,
            sockets,
            egress_socket,
            tasks: vec![egress],
            forwarded: Vec::new(),
        })
    }

    /// The holder's PID: `nsenter --target <pid> --net --mount` joins the
    /// namespaces.
    pub fn pid(&self) -> u32 {
        self.holder.pid()
    }

    /// The Unix socket of the egress proxy.
    pub fn egress_socket(&self) -> &Path {
        &self.egress_socket
    }

    /// Makes `127.0.0.1:<port>` of the host reachable inside the namespace
    /// at `GATEWAY_IP:<port>`; returns that address.
    pub fn forward_host_port(&mut self, port: u16) -> io::Result<SocketAddr> {
        let addr = SocketAddr::from((GATEWAY_IP, port));
        if self.forwarded.contains(&port) {
            return Ok(addr);
        }
        let listener = self.sockets.bind(addr)?;
        self.tasks.push(tokio::spawn(async move {
            loop {
                let Ok((inside, _)) = listener.accept().await else {
                    continue;
                };
                tokio::spawn(async move {
                    if let Ok(host) =
                        tokio::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port)).await
                    {
                        pipe(inside, host).await;
                    }
                });
            }
        }));
        self.forwarded.push(port);
        Ok(addr)
    }

    /// Stops the proxy and forwarders and the holder (the namespaces go
    /// with their last process).
    pub async fn stop(&mut self) {
        for t in self.tasks.drain(..) {
            t.abort();
        }
        self.holder.stop(Duration::from_secs(2)).await;
        let _ = std::fs::remove_file(&self.egress_socket);
    }
}

impl Drop for NodeNetwork {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

async fn pipe(mut a: tokio::net::TcpStream, mut b: tokio::net::TcpStream) {
    let _ = tokio::io::copy_bidirectional(&mut a, &mut b).await;
}

/// The API server's egress selector for the `cluster` network: its
/// configuration file, pointing at our proxy's socket.
pub fn egress_config(socket: &Path) -> String {
    format!(
        "apiVersion: apiserver.k8s.io/v1beta1\nkind: EgressSelectorConfiguration\negressSelections:\n- name: cluster\n  connection:\n    proxyProtocol: HTTPConnect\n    transport:\n      uds:\n        udsName: {}\n",
        socket.display()
    )
}

/// Parses the head of a CONNECT request: the target address. Only IP
/// literals: the API server dials node and pod addresses.
pub fn parse_connect(head: &str) -> Result<SocketAddr, String> {
    let line = head.lines().next().unwrap_or("");
    let mut parts = line.split_whitespace();
    match (parts.next(), parts.next(), parts.next()) {
        (Some("CONNECT"), Some(target), Some(v)) if v.starts_with("HTTP/1.") => target
            .parse::<SocketAddr>()
            .map_err(|_| format!("CONNECT target {target:?} is not an IP address and port")),
        _ => Err(format!("not a CONNECT request: {line:?}")),
    }
}

async fn serve_egress(listener: tokio::net::UnixListener, sockets: Sockets) {
    loop {
        let Ok((conn, _)) = listener.accept().await else {
            continue;
        };
        let sockets = sockets.clone();
        tokio::spawn(async move {
            if let Err(e) = egress_one(conn, sockets).await {
                eprintln!("node network egress: {e}");
            }
        });
    }
}

async fn egress_one(mut conn: tokio::net::UnixStream, sockets: Sockets) -> io::Result<()> {
    // Read the head byte by byte up to the blank line: nothing after it
    // may be consumed (the TLS client speaks next).
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() > 8192 {
            conn.write_all(b"HTTP/1.1 431 Request Header Fields Too Large\r\n\r\n")
                .await?;
            return Ok(());
        }
        let b = conn.read_u8().await?;
        head.push(b);
    }
    let head = String::from_utf8_lossy(&head);
    let target = match parse_connect(&head) {
        Ok(t) => t,
        Err(why) => {
            conn.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").await?;
            return Err(io::Error::other(why));
        }
    };
    let upstream = match route(target.ip()) {
        Some(Route::Host) => tokio::net::TcpStream::connect(target).await,
        Some(Route::Namespace) => tokio::task::spawn_blocking(move || sockets.dial(target))
            .await
            .map_err(io::Error::other)?,
        None => {
            conn.write_all(b"HTTP/1.1 403 Forbidden\r\n\r\n").await?;
            return Err(io::Error::other(format!(
                "refused CONNECT to {target}: outside loopback and the node network"
            )));
        }
    };
    match upstream {
        Ok(mut up) => {
            conn.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .await?;
            let _ = tokio::io::copy_bidirectional(&mut conn, &mut up).await;
            Ok(())
        }
        Err(e) => {
            conn.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n").await?;
            Err(io::Error::other(format!("CONNECT to {target}: {e}")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_keep_traffic_on_loopback_and_the_rigs_ranges() {
        assert_eq!(route("127.0.0.1".parse().unwrap()), Some(Route::Host));
        assert_eq!(route("::1".parse().unwrap()), Some(Route::Host));
        assert_eq!(route("10.201.0.1".parse().unwrap()), Some(Route::Namespace));
        assert_eq!(route("10.202.3.7".parse().unwrap()), Some(Route::Namespace));
        assert_eq!(
            route("10.201.255.1".parse().unwrap()),
            Some(Route::Namespace)
        );
        for other in [
            "10.0.0.1",
            "10.203.0.1",
            "192.168.1.1",
            "172.16.0.1",
            "8.8.8.8",
        ] {
            assert_eq!(route(other.parse().unwrap()), None, "{other}");
        }
    }

    #[test]
    fn a_connect_head_names_an_ip_target() {
        let head = "CONNECT 10.201.0.1:10250 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
        assert_eq!(parse_connect(head), Ok("10.201.0.1:10250".parse().unwrap()));
        assert!(parse_connect("GET / HTTP/1.1\r\n\r\n").is_err());
        assert!(parse_connect("CONNECT node-1:10250 HTTP/1.1\r\n\r\n").is_err());
    }

    #[test]
    fn node_addresses_follow_the_index() {
        assert_eq!(node_ip(0), Ipv4Addr::new(10, 201, 0, 1));
        assert_eq!(pod_subnet(1), Ipv4Addr::new(10, 202, 2, 0));
        assert_eq!(route(IpAddr::V4(node_ip(4))), Some(Route::Namespace));
    }
}
