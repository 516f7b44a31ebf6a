//! What the proxy core asks of the connections it works on, and the IDs it
//! names things by.
//!
//! The core holds no socket. It names each TCP connection by a [`ConnId`]
//! the driver hands out, and works on it through [`Conns`]: read what
//! arrived, write what fits, see its TCP state (connected, refused, closed
//! by the peer), open, close and reset. The node's driver implements
//! [`Conns`] over smoltcp sockets; tests and the fuzz target implement it
//! over a model.

use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{IpAddress, IpEndpoint};

/// The TCP state of a connection (smoltcp's names, RFC 9293's states).
pub use smoltcp::socket::tcp::State as TcpState;

/// A TCP connection the driver holds for the core.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnId(pub u32);

/// A client connection (HTTP or TLS passthrough) in the core.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClientId(pub u64);

/// An exchange with a local SF (or a canned answer) in the core.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JobId(pub u64);

/// A listening pool of the driver, by index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PoolId(pub usize);

/// How a new outgoing connection is set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dial {
    /// An exchange or relay toward a local SF: full buffers, no Nagle,
    /// given up after 10 s unanswered.
    Exchange,
    /// A health probe: tiny buffers, given up after `timeout`.
    Probe {
        /// The probe's deadline.
        timeout: Duration,
    },
}

/// Why a connection could not be opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectError {
    /// The SF-facing port does not exist.
    NoPort,
    /// The stack refused (no route, no free local port).
    Connect,
}

/// The connections the core works on (implemented by the driver).
///
/// Every method on a [`ConnId`] the core no longer holds (released with
/// [`Conns::release`] or [`Conns::discard`]) may panic: the core forgets
/// an ID as it gives it back.
pub trait Conns {
    /// Its TCP state.
    fn state(&self, c: ConnId) -> TcpState;
    /// Bytes are waiting to be read.
    fn can_recv(&self, c: ConnId) -> bool;
    /// The peer may still send (no FIN seen).
    fn may_recv(&self, c: ConnId) -> bool;
    /// There is room to write.
    fn can_send(&self, c: ConnId) -> bool;
    /// We may still send (not closed by us).
    fn may_send(&self, c: ConnId) -> bool;
    /// Append at most `max` waiting bytes to `into`: how many, `None` when
    /// the connection cannot be read.
    fn recv(&mut self, c: ConnId, max: usize, into: &mut Vec<u8>) -> Option<usize>;
    /// Write a prefix of `bytes`: how many, `None` when the connection
    /// cannot be written.
    fn send(&mut self, c: ConnId, bytes: &[u8]) -> Option<usize>;
    /// Send a FIN once what was written is out.
    fn close(&mut self, c: ConnId);
    /// Reset it now.
    fn abort(&mut self, c: ConnId);
    /// The peer's address and port.
    fn remote(&self, c: ConnId) -> Option<IpEndpoint>;
    /// Open a connection from the SF-facing port and `local_port` to `to`.
    fn connect(
        &mut self,
        to: (IpAddress, u16),
        local_port: u16,
        dial: Dial,
    ) -> Result<ConnId, ConnectError>;
    /// Forget it now (its socket goes; use only when it is closed or reset).
    fn remove(&mut self, c: ConnId);
    /// Forget it once its FIN went out: closed now, removed when it is
    /// closed or after 10 s (reset then).
    fn release(&mut self, now: Instant, c: ConnId);
    /// Reset it and forget it once the reset went out; `pool` (if any)
    /// gets its slot back.
    fn discard(&mut self, c: ConnId, pool: Option<PoolId>);
    /// TCP keep-alives on `c` every `interval` (`None`: none). With them
    /// on, a peer that answers none within three intervals resets the
    /// connection; off, the exchange's own timeout holds again.
    fn keep_alive(&mut self, c: ConnId, interval: Option<Duration>);
    /// Remove released connections whose FIN went out (or that took too
    /// long).
    fn sweep(&mut self, now: Instant);
}
