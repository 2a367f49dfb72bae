//! A listener with the connection-level faults of an API-server restart:
//! every open connection cut at once, and the port closed (connections
//! refused) for a while.
//!
//! [`FaultListener`] is what `axum::serve` accepts from. Each accepted
//! connection is wrapped in a [`FaultConn`] that fails its next read or write
//! (and wakes the connection to notice) once [`NetControl::cut`] names it;
//! hyper then drops the connection and every handler on it, so nothing is
//! left running for a connection that is gone.

use axum::extract::connect_info::Connected;
use axum::serve::{IncomingStream, Listener};
use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};

/// Which connection a request came on (axum `ConnectInfo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnTag {
    /// The server's number for the connection.
    pub id: u64,
    /// The client's address.
    pub peer: SocketAddr,
}

impl Connected<IncomingStream<'_, FaultListener>> for ConnTag {
    fn connect_info(stream: IncomingStream<'_, FaultListener>) -> Self {
        *stream.remote_addr()
    }
}

/// The listener's state, as the admin sets it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct NetState {
    /// The port is closed until then.
    down_until: Option<Instant>,
    /// Closed for good (the server stopped).
    stopped: bool,
}

/// Connection-level controls shared by the listener, the connections and
/// the admin endpoints.
#[derive(Debug)]
pub struct NetControl {
    state: watch::Sender<NetState>,
    conns: Mutex<HashMap<u64, Arc<Notify>>>,
    next_id: AtomicU64,
}

impl Default for NetControl {
    fn default() -> Self {
        NetControl {
            state: watch::Sender::new(NetState::default()),
            conns: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
        }
    }
}

impl NetControl {
    fn conns(&self) -> MutexGuard<'_, HashMap<u64, Arc<Notify>>> {
        self.conns.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Cuts every open connection except `keep`: each fails its next read
    /// or write, and hyper drops it with whatever it was serving. Returns
    /// how many were cut.
    pub fn cut(&self, keep: Option<u64>) -> usize {
        let conns = self.conns();
        let mut n = 0;
        for (id, cut) in conns.iter() {
            if Some(*id) != keep {
                cut.notify_one();
                n += 1;
            }
        }
        n
    }

    /// Closes the port (new connections are refused) for `d`, then opens it
    /// again on the same address.
    pub fn go_down(&self, d: Duration) {
        let until = Instant::now() + d;
        self.state.send_modify(|s| s.down_until = Some(until));
    }

    /// Closes the port for good and cuts every connection (the server stops).
    pub fn stop(&self) {
        self.state.send_modify(|s| s.stopped = true);
        self.cut(None);
    }

    /// Open connections now.
    pub fn open_connections(&self) -> usize {
        self.conns().len()
    }

    fn register(self: &Arc<Self>) -> (u64, Arc<Notify>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let cut = Arc::new(Notify::new());
        self.conns().insert(id, cut.clone());
        (id, cut)
    }
}

/// Accepts connections on the server's address, closing the port while an
/// admin-ordered downtime lasts.
pub struct FaultListener {
    addr: SocketAddr,
    listener: Option<TcpListener>,
    ctl: Arc<NetControl>,
    state: watch::Receiver<NetState>,
}

impl FaultListener {
    /// Wraps a bound listener; a downtime re-binds its address afterwards.
    pub fn new(listener: TcpListener, ctl: Arc<NetControl>) -> io::Result<Self> {
        let addr = listener.local_addr()?;
        let state = ctl.state.subscribe();
        Ok(FaultListener {
            addr,
            listener: Some(listener),
            ctl,
            state,
        })
    }
}

impl Listener for FaultListener {
    type Io = FaultConn;
    type Addr = ConnTag;

    async fn accept(&mut self) -> (FaultConn, ConnTag) {
        let mut bind_failures = 0u32;
        loop {
            let st = *self.state.borrow_and_update();
            if st.stopped {
                self.listener = None;
                // Nothing more is ever accepted; wait to be dropped.
                std::future::pending::<()>().await;
            }
            if let Some(until) = st.down_until
                && Instant::now() < until
            {
                // Closing the socket is what makes new connections refused.
                self.listener = None;
                tokio::select! {
                    _ = tokio::time::sleep_until(until.into()) => {}
                    _ = self.state.changed() => {}
                }
                continue;
            }
            if self.listener.is_none() {
                match TcpListener::bind(self.addr).await {
                    Ok(l) => {
                        bind_failures = 0;
                        self.listener = Some(l);
                    }
                    Err(e) => {
                        if bind_failures == 0 {
                            tracing::warn!(addr = %self.addr, error = %e, "re-opening the port after a restart failed; retrying");
                        }
                        bind_failures += 1;
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                }
            }
            let Some(listener) = self.listener.as_ref() else {
                continue;
            };
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((io, peer)) => {
                        let (id, cut) = self.ctl.register();
                        let conn = FaultConn {
                            io,
                            cut: Box::pin(cut.notified_owned()),
                            is_cut: false,
                            id,
                            ctl: self.ctl.clone(),
                        };
                        return (conn, ConnTag { id, peer });
                    }
                    Err(e) => {
                        // As axum's own listener: out of file descriptors and
                        // the like pass; wait a little and accept again.
                        tracing::debug!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
                _ = self.state.changed() => {}
            }
        }
    }

    fn local_addr(&self) -> io::Result<ConnTag> {
        Ok(ConnTag {
            id: 0,
            peer: self.addr,
        })
    }
}

/// One accepted connection; fails once cut.
pub struct FaultConn {
    io: TcpStream,
    cut: Pin<Box<tokio::sync::futures::OwnedNotified>>,
    is_cut: bool,
    id: u64,
    ctl: Arc<NetControl>,
}

impl Drop for FaultConn {
    fn drop(&mut self) {
        self.ctl.conns().remove(&self.id);
    }
}

impl FaultConn {
    /// Reads the first bytes without taking them (e.g. to tell a TLS
    /// handshake from plain HTTP); fails once the connection is cut.
    pub async fn peek(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        tokio::select! {
            n = self.io.peek(buf) => n,
            _ = self.cut.as_mut(), if !self.is_cut => {
                self.is_cut = true;
                Err(cut_error())
            }
        }
    }

    /// Whether the connection was cut (registers the waker otherwise).
    fn poll_cut(&mut self, cx: &mut Context<'_>) -> bool {
        if !self.is_cut && self.cut.as_mut().poll(cx).is_ready() {
            self.is_cut = true;
        }
        self.is_cut
    }
}

fn cut_error() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionReset,
        "connection cut: the API server restarted",
    )
}

impl AsyncRead for FaultConn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.poll_cut(cx) {
            return Poll::Ready(Err(cut_error()));
        }
        Pin::new(&mut this.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for FaultConn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.poll_cut(cx) {
            return Poll::Ready(Err(cut_error()));
        }
        Pin::new(&mut this.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.poll_cut(cx) {
            return Poll::Ready(Err(cut_error()));
        }
        Pin::new(&mut this.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.poll_cut(cx) {
            return Poll::Ready(Err(cut_error()));
        }
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}
