//! A paced TCP forwarder on loopback: a node's network link to its registry at a
//! fixed bandwidth, so transfers cost what they would off the machine.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

/// A listener forwarding every connection to `upstream`, each direction paced to
/// `bytes_per_sec` (no burst credit). It lives until the process exits.
pub struct PacedLink {
    addr: SocketAddr,
}

impl PacedLink {
    /// Starts forwarding a fresh loopback port to `upstream`.
    pub fn start(upstream: SocketAddr, bytes_per_sec: u64) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the link");
        let addr = listener.local_addr().expect("the link's address");
        thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(server) = TcpStream::connect(upstream) else { continue };
                // Forward each read at once: the pacing is the link's only delay.
                let _ = (client.set_nodelay(true), server.set_nodelay(true));
                let (client2, server2) = (client.try_clone().expect("clone"), server.try_clone().expect("clone"));
                thread::spawn(move || pace(client, server, bytes_per_sec));
                thread::spawn(move || pace(server2, client2, bytes_per_sec));
            }
        });
        PacedLink { addr }
    }

    /// `host:port` of the link.
    pub fn host(&self) -> String {
        self.addr.to_string()
    }
}

/// Copies `from` to `to`, never faster than `rate` bytes a second.
fn pace(mut from: TcpStream, mut to: TcpStream, rate: u64) {
    let mut buf = vec![0u8; 16 * 1024];
    let mut next = Instant::now();
    while let Ok(n) = from.read(&mut buf) {
        if n == 0 || to.write_all(&buf[..n]).is_err() {
            break;
        }
        next = next.max(Instant::now()) + Duration::from_secs_f64(n as f64 / rate as f64);
        thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    let _ = to.shutdown(Shutdown::Write);
}
