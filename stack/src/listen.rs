//! Accepting TCP connections on smoltcp, which has no `accept()`.
//!
//! A [`ListenPool`] keeps a few sockets listening on one endpoint and notices
//! when one of them leaves `Listen`: that socket *is* the new connection, and
//! a fresh listener is armed in its place. smoltcp resets a SYN that finds no
//! listening socket, and the node loop hands a whole batch of frames to
//! smoltcp at once, so a burst of connects larger than the pool would be
//! partly refused. The pool therefore also counts SYNs the role's ingress
//! shim sees ([`ListenPool::note_frame`]) and, on the role's poll that runs
//! before smoltcp processes the batch, arms one extra listener per SYN —
//! a listen backlog, bounded by `max_connections`.

use smoltcp::iface::{SocketHandle, SocketSet};
use smoltcp::socket::tcp;
use smoltcp::time::Duration;
use smoltcp::wire::IpListenEndpoint;

use crate::stats::Counters;

/// Sizes and bounds of a [`ListenPool`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenConfig {
    /// Listening sockets kept armed.
    pub listeners: usize,
    /// Most connections at once (accepted and not yet released, plus
    /// listeners); at the bound no listener is re-armed.
    pub max_connections: usize,
    /// Receive buffer per socket, bytes.
    pub rx_buffer: usize,
    /// Send buffer per socket, bytes.
    pub tx_buffer: usize,
    /// smoltcp's retransmission give-up timeout per socket.
    pub timeout: Duration,
}

/// Listening sockets on one endpoint of one interface.
#[derive(Debug)]
pub struct ListenPool {
    endpoint: IpListenEndpoint,
    cfg: ListenConfig,
    listening: Vec<SocketHandle>,
    active: usize,
    syns: usize,
    limit_counter: &'static str,
}

impl ListenPool {
    /// A pool for `endpoint`; `limit_counter` is bumped each time the
    /// connection bound stops a listener from being re-armed.
    pub fn new(
        endpoint: impl Into<IpListenEndpoint>,
        cfg: ListenConfig,
        limit_counter: &'static str,
    ) -> Self {
        Self {
            endpoint: endpoint.into(),
            cfg,
            listening: Vec::new(),
            active: 0,
            syns: 0,
            limit_counter,
        }
    }

    /// The TCP port listened on.
    pub fn port(&self) -> u16 {
        self.endpoint.port
    }

    /// Connections handed out and not yet released.
    pub fn active(&self) -> usize {
        self.active
    }

    /// Sockets listening now (a SYN beyond them is reset by smoltcp).
    pub fn listening(&self) -> usize {
        self.listening.len()
    }

    /// Look at a received frame (before smoltcp does): count it if it is a
    /// SYN to this pool's port.
    pub fn note_frame(&mut self, frame: &[u8]) {
        if tcp_syn_dst_port(frame) == Some(self.endpoint.port) {
            self.syns += 1;
        }
    }

    /// Sockets that left `Listen` since the last call (new connections, now
    /// the caller's); listeners re-armed, one extra per SYN noted since.
    pub fn accept(
        &mut self,
        sockets: &mut SocketSet<'static>,
        stats: &mut Counters,
    ) -> Vec<SocketHandle> {
        let mut new = Vec::new();
        self.listening.retain(|&h| {
            if sockets.get::<tcp::Socket>(h).state() == tcp::State::Listen {
                true
            } else {
                new.push(h);
                false
            }
        });
        self.active += new.len();
        let want = self.cfg.listeners + std::mem::take(&mut self.syns);
        while self.listening.len() < want {
            if self.active + self.listening.len() >= self.cfg.max_connections {
                stats.bump(self.limit_counter);
                break;
            }
            let mut s = tcp::Socket::new(
                tcp::SocketBuffer::new(vec![0; self.cfg.rx_buffer]),
                tcp::SocketBuffer::new(vec![0; self.cfg.tx_buffer]),
            );
            if s.listen(self.endpoint).is_err() {
                break;
            }
            s.set_nagle_enabled(false);
            s.set_timeout(Some(self.cfg.timeout));
            self.listening.push(sockets.add(s));
        }
        new
    }

    /// A connection handed out by [`Self::accept`] is gone.
    pub fn release(&mut self) {
        self.active = self.active.saturating_sub(1);
    }
}

/// The destination port of a TCP SYN (without ACK) in an Ethernet frame
/// whose upper layer directly follows the IP header.
pub fn tcp_syn_dst_port(frame: &[u8]) -> Option<u16> {
    let tcp = match frame.get(12..14)? {
        [0x08, 0x00] => {
            let ihl = usize::from(frame.get(14)? & 0x0f) * 4;
            (*frame.get(14 + 9)? == 6).then_some(14 + ihl)?
        }
        [0x86, 0xdd] => (*frame.get(14 + 6)? == 6).then_some(14 + 40)?,
        _ => return None,
    };
    let flags = *frame.get(tcp + 13)?;
    let port = frame.get(tcp + 2..tcp + 4)?;
    (flags & 0x12 == 0x02).then(|| u16::from_be_bytes([port[0], port[1]]))
}

#[cfg(test)]
mod test {
    use super::*;

    fn frame_v4(flags: u8, dst: u16) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 20];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[14 + 9] = 6;
        f[34 + 2..34 + 4].copy_from_slice(&dst.to_be_bytes());
        f[34 + 13] = flags;
        f
    }

    #[test]
    fn only_a_bare_syn_to_the_port_counts() {
        assert_eq!(tcp_syn_dst_port(&frame_v4(0x02, 80)), Some(80));
        assert_eq!(tcp_syn_dst_port(&frame_v4(0x12, 80)), None); // SYN-ACK
        assert_eq!(tcp_syn_dst_port(&frame_v4(0x10, 80)), None); // ACK
        let mut v6 = vec![0u8; 14 + 40 + 20];
        v6[12..14].copy_from_slice(&[0x86, 0xdd]);
        v6[14 + 6] = 6;
        v6[54 + 2..54 + 4].copy_from_slice(&8080u16.to_be_bytes());
        v6[54 + 13] = 0x02;
        assert_eq!(tcp_syn_dst_port(&v6), Some(8080));
        v6[14 + 6] = 17;
        assert_eq!(tcp_syn_dst_port(&v6), None);
        // Truncated frames never panic.
        for n in 0..v6.len() {
            let _ = tcp_syn_dst_port(&v6[..n]);
        }
    }

    #[test]
    fn a_pool_arms_a_listener_per_noted_syn_within_its_bound() {
        let cfg = ListenConfig {
            listeners: 2,
            max_connections: 5,
            rx_buffer: 1024,
            tx_buffer: 1024,
            timeout: Duration::from_secs(60),
        };
        let mut pool = ListenPool::new(80, cfg, "test.limit");
        let mut sockets = SocketSet::new(Vec::new());
        let mut stats = Counters::default();
        assert!(pool.accept(&mut sockets, &mut stats).is_empty());
        assert_eq!(sockets.iter().count(), 2);
        for _ in 0..10 {
            pool.note_frame(&frame_v4(0x02, 80));
        }
        pool.note_frame(&frame_v4(0x02, 81)); // another port: not ours
        pool.accept(&mut sockets, &mut stats);
        assert_eq!(sockets.iter().count(), 5, "bounded by max_connections");
        assert_eq!(stats.get("test.limit"), 1);
    }
}
