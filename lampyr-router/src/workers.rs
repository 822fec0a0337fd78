//! Serving threads: one single-threaded runtime per core, each accepting on its own
//! `SO_REUSEPORT` socket of every listener, so a connection and the upstream connections its
//! requests use live on one thread (no cross-thread wake-ups on the request path).
//!
//! The kernel spreads new connections over the threads' sockets by their addresses, as
//! nginx's `reuseport` does. Routing state ([`Router`]'s table, the backends) is shared by
//! every thread; each [`crate::HttpBackend`] keeps one connection pool per thread.

use std::io;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::sync::Arc;
use std::thread::JoinHandle;

use tokio::sync::watch;

use crate::server::{Exposure, Router};

/// One address every serving thread accepts on, and what it serves there.
#[derive(Clone)]
pub struct Listen {
    /// Address to bind; port 0 picks one port, shared by every thread.
    pub addr: SocketAddr,
    /// What the listener serves.
    pub exposure: Exposure,
    /// Certificates for HTTPS (from [`crate::tls::server_config`]); the listener is then
    /// [`Exposure::Public`] whatever `exposure` says.
    pub tls: Option<Arc<rustls::ServerConfig>>,
}

impl Listen {
    /// A plain-HTTP listener.
    pub fn plain(addr: SocketAddr, exposure: Exposure) -> Self {
        Listen { addr, exposure, tls: None }
    }
}

/// Why serving threads could not start.
#[derive(Debug, thiserror::Error)]
pub enum WorkersError {
    /// A listener's socket could not be made, bound or set listening.
    #[error("cannot listen on {addr}: {source} (is another process using the port?)")]
    Listen {
        /// The address asked for.
        addr: SocketAddr,
        /// Why.
        source: io::Error,
    },
    /// A thread or its runtime could not be started.
    #[error("cannot start serving thread {index}: {source}")]
    Thread {
        /// Which thread.
        index: usize,
        /// Why.
        source: io::Error,
    },
}

/// Running serving threads; [`Workers::stop`] drains and joins them (dropping this stops
/// them too, draining, without waiting for them).
pub struct Workers {
    threads: Vec<JoinHandle<()>>,
    stop: watch::Sender<bool>,
    addrs: Vec<SocketAddr>,
}

impl Workers {
    /// Binds every listener once per thread (all sockets listening before this returns) and
    /// starts `threads` threads named `name` serving them through `router`.
    pub fn start(router: &Arc<Router>, listens: &[Listen], threads: usize, name: &str) -> Result<Workers, WorkersError> {
        let threads = threads.max(1);
        let mut sockets: Vec<Vec<StdListener>> = (0..threads).map(|_| Vec::with_capacity(listens.len())).collect();
        let mut addrs = Vec::with_capacity(listens.len());
        for listen in listens {
            // The first bind settles port 0; the other threads bind the port it got.
            let first = reuse_port_listener(listen.addr).map_err(|source| WorkersError::Listen { addr: listen.addr, source })?;
            let addr = first.local_addr().map_err(|source| WorkersError::Listen { addr: listen.addr, source })?;
            sockets[0].push(first);
            for own in sockets.iter_mut().skip(1) {
                own.push(reuse_port_listener(addr).map_err(|source| WorkersError::Listen { addr, source })?);
            }
            addrs.push(addr);
        }
        let (stop, stopped) = watch::channel(false);
        let mut handles = Vec::with_capacity(threads);
        for (index, own) in sockets.into_iter().enumerate() {
            let (router, listens, stopped) = (Arc::clone(router), listens.to_vec(), stopped.clone());
            let handle = std::thread::Builder::new()
                .name(name.to_owned())
                .spawn(move || serve_thread(&router, &listens, own, stopped))
                .map_err(|source| WorkersError::Thread { index, source })?;
            handles.push(handle);
        }
        Ok(Workers { threads: handles, stop, addrs })
    }

    /// The bound address of each listener, in the order given.
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// Stops accepting, lets requests in flight finish (up to the router's drain timeout)
    /// and joins every thread.
    pub async fn stop(self) {
        self.stop.send_replace(true);
        let threads = self.threads;
        let joined = tokio::task::spawn_blocking(move || {
            for thread in threads {
                let _ = thread.join();
            }
        });
        let _ = joined.await;
    }
}

/// A non-blocking listening socket on `addr` with `SO_REUSEPORT` (and `SO_REUSEADDR`) set.
fn reuse_port_listener(addr: SocketAddr) -> io::Result<StdListener> {
    let socket = socket2::Socket::new(socket2::Domain::for_address(addr), socket2::Type::STREAM, Some(socket2::Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    Ok(socket.into())
}

/// One serving thread: a current-thread runtime serving its own sockets until `stopped`.
fn serve_thread(router: &Arc<Router>, listens: &[Listen], sockets: Vec<StdListener>, stopped: watch::Receiver<bool>) {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            tracing::error!(%error, "a serving thread cannot start its runtime; the other threads serve");
            return;
        }
    };
    runtime.block_on(async {
        let mut servers = Vec::with_capacity(sockets.len());
        for (listen, socket) in listens.iter().zip(sockets) {
            let listener = match tokio::net::TcpListener::from_std(socket) {
                Ok(listener) => listener,
                Err(error) => {
                    tracing::error!(%error, address = %listen.addr, "a serving thread cannot register its socket");
                    continue;
                }
            };
            let router = Arc::clone(router);
            let mut stopped = stopped.clone();
            let shutdown = async move {
                let _ = stopped.wait_for(|stop| *stop).await;
            };
            servers.push(match &listen.tls {
                None => tokio::spawn(router.serve_exposed(listener, listen.exposure, shutdown)),
                Some(tls) => tokio::spawn(router.serve_tls(listener, Arc::clone(tls), shutdown)),
            });
        }
        for server in servers {
            let _ = server.await;
        }
    });
}
