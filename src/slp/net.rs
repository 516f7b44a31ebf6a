//! The client's transport: SLP requests over the kernel's UDP and TCP
//! sockets (RFC 2608 §6.1–6.3, §12.3).
//!
//! - Unicast UDP: retransmitted after `retry`, doubling each time, until a
//!   reply or `max` (CONFIG_RETRY / CONFIG_RETRY_MAX). A reply with the
//!   OVERFLOW flag is asked again over TCP with the same XID.
//! - TCP: one request per connection, one framed reply (the Length field).
//! - Multicast convergence: the request goes out with a growing previous
//!   responder list until a round brings no new responder, the list no
//!   longer fits a datagram, or `max` (CONFIG_MC_MAX) is over.
//!
//! This is a driver (it waits on real sockets), so it reads the clock; the
//! functions that do say so with `#[allow(clippy::disallowed_methods)]`.

use std::io::{self, Read as _, Write as _};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use anyhow::anyhow;
use svcroute_stack::wire::slp::{
    frame_len, header::FIXED_LEN, Body, FunctionId, Header, Message, SlpString, MAX_DATAGRAM,
};

/// Largest datagram we read (a reply may be up to a full UDP payload).
const RECV_BUF: usize = 65_535;

/// Retransmission timing.
#[derive(Debug, Clone, Copy)]
pub(super) struct Timing {
    /// First retransmission after this (CONFIG_RETRY, 2 s).
    pub(super) retry: Duration,
    /// Give up after this (CONFIG_RETRY_MAX / CONFIG_MC_MAX, 15 s).
    pub(super) max: Duration,
}

/// How a request leaves.
#[derive(Debug, Clone)]
pub(super) struct Net {
    pub(super) timing: Timing,
    /// Local address to send from (also picks the IPv4 multicast interface).
    pub(super) bind: Option<IpAddr>,
    /// Unicast requests over TCP from the start.
    pub(super) force_tcp: bool,
    /// IPv4 multicast TTL.
    pub(super) ttl: u32,
}

/// A reply that matched the request (XID and function).
#[derive(Debug, Clone)]
pub(super) struct Reply {
    /// Who answered (source address of the datagram, or the TCP peer).
    pub(super) from: SocketAddr,
    pub(super) msg: Message,
    /// The reply came over TCP.
    pub(super) tcp: bool,
    /// A UDP reply had the OVERFLOW flag set (and was asked again over TCP).
    pub(super) overflow: bool,
    /// The TCP retry failed; this is the truncated UDP reply.
    pub(super) truncated: bool,
}

/// Why a unicast exchange produced no reply.
#[derive(Debug)]
pub(super) enum NetError {
    /// Nothing (matching) came back in time.
    NoReply(String),
    /// A socket error, or a broken TCP reply.
    Other(anyhow::Error),
}

impl std::fmt::Display for NetError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NoReply(s) => f.write_str(s),
            Self::Other(e) => write!(f, "{e:#}"),
        }
    }
}

/// What a datagram or frame turned out to be.
enum Received {
    /// A matching reply.
    Reply(Box<Message>),
    /// A matching reply with OVERFLOW that did not parse (cut short).
    CutOverflow,
    /// Not ours, or garbage.
    Ignore,
}

fn classify(bytes: &[u8], xid: u16, expect: &[FunctionId]) -> Received {
    match Message::parse(bytes) {
        Ok(m) if m.header().xid == xid && expect.contains(&m.function()) => {
            Received::Reply(Box::new(m))
        }
        Ok(m) => {
            log::debug!(
                "ignoring {:?} with XID {} (want {:?} with XID {xid})",
                m.function(),
                m.header().xid,
                expect
            );
            Received::Ignore
        }
        Err(e) => match Header::peek(bytes) {
            Some((f, h)) if h.xid == xid && expect.contains(&f) && h.flags.overflow => {
                Received::CutOverflow
            }
            _ => {
                log::debug!("ignoring a reply that does not parse: {e}");
                Received::Ignore
            }
        },
    }
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

/// A `Body` with its previous responder list replaced (multicast requests).
fn with_pr_list(body: &Body, pr: &SlpString) -> Body {
    let mut b = body.clone();
    match &mut b {
        Body::SrvRqst(r) => r.pr_list = pr.clone(),
        Body::AttrRqst(r) => r.pr_list = pr.clone(),
        Body::SrvTypeRqst(r) => r.pr_list = pr.clone(),
        _ => {}
    }
    b
}

impl Net {
    fn udp_socket(&self, to: &SocketAddr) -> io::Result<UdpSocket> {
        let local = match (self.bind, to) {
            (Some(ip), _) => SocketAddr::new(ip, 0),
            (None, SocketAddr::V4(_)) => SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
            (None, SocketAddr::V6(_)) => SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0),
        };
        UdpSocket::bind(local)
    }

    /// One request to one agent, UDP (retransmitted; TCP on overflow) or TCP.
    /// Requests that do not fit a datagram go over TCP (RFC 2608 §6.2).
    #[allow(clippy::disallowed_methods)] // driver: deadlines on real sockets
    pub(super) fn unicast(
        &self,
        to: SocketAddr,
        req: &Message,
        expect: &[FunctionId],
    ) -> Result<Reply, NetError> {
        let deadline = Instant::now() + self.timing.max;
        let bytes = req.to_bytes();
        let xid = req.header().xid;
        if self.force_tcp || bytes.len() > MAX_DATAGRAM {
            return self.tcp(to, &bytes, xid, expect, deadline);
        }
        let (reply, cut) = self.udp(to, &bytes, xid, expect, deadline)?;
        let reply = match reply {
            Some(msg) if !cut && !msg.header().flags.overflow => {
                return Ok(Reply {
                    from: to,
                    msg,
                    tcp: false,
                    overflow: false,
                    truncated: false,
                })
            }
            r => r,
        };
        // RFC 2608 §6.1: retransmit over TCP, same XID. The TCP exchange gets
        // at least one more CONFIG_RETRY_MAX-bounded chance of its own.
        log::info!("{to}: reply has OVERFLOW set, asking again over TCP");
        let tcp_deadline = deadline.max(Instant::now() + self.timing.retry);
        match self.tcp(to, &bytes, xid, expect, tcp_deadline) {
            Ok(mut r) => {
                r.overflow = true;
                Ok(r)
            }
            Err(e) => match reply {
                Some(msg) => {
                    log::warn!("{to}: TCP retry after OVERFLOW failed ({e}); using the truncated UDP reply");
                    Ok(Reply {
                        from: to,
                        msg,
                        tcp: false,
                        overflow: true,
                        truncated: true,
                    })
                }
                None => Err(NetError::Other(anyhow!(
                    "{to}: UDP reply truncated (OVERFLOW) and the TCP retry failed: {e}"
                ))),
            },
        }
    }

    /// UDP with retransmission. `Ok((Some(m), false))` for a reply,
    /// `Ok((None, true))` for an overflowed reply that did not parse.
    #[allow(clippy::disallowed_methods)] // driver: deadlines on real sockets
    fn udp(
        &self,
        to: SocketAddr,
        bytes: &[u8],
        xid: u16,
        expect: &[FunctionId],
        deadline: Instant,
    ) -> Result<(Option<Message>, bool), NetError> {
        let other = |e: io::Error| NetError::Other(anyhow!("UDP to {to}: {e}"));
        let sock = self.udp_socket(&to).map_err(other)?;
        // Connected: only the agent's datagrams come in.
        sock.connect(to).map_err(other)?;
        let mut buf = vec![0_u8; RECV_BUF];
        let mut wait = self.timing.retry;
        let mut sends = 0_u32;
        let mut refused = false;
        let start = Instant::now();
        loop {
            match sock.send(bytes) {
                Ok(_) => sends += 1,
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => refused = true,
                Err(e) => return Err(other(e)),
            }
            let round_end = (Instant::now() + wait).min(deadline);
            loop {
                let now = Instant::now();
                if now >= round_end {
                    break;
                }
                sock.set_read_timeout(Some(round_end - now))
                    .map_err(other)?;
                match sock.recv(&mut buf) {
                    Ok(n) => match classify(&buf[..n], xid, expect) {
                        Received::Reply(m) => return Ok((Some(*m), false)),
                        Received::CutOverflow => return Ok((None, true)),
                        Received::Ignore => {}
                    },
                    Err(e) if is_timeout(&e) => break,
                    // ICMP port unreachable from an earlier send: the agent
                    // may come up; keep retransmitting (RFC 2608 §12.3).
                    Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                        refused = true;
                        std::thread::sleep(round_end.saturating_duration_since(Instant::now()));
                        break;
                    }
                    Err(e) => return Err(other(e)),
                }
            }
            if Instant::now() >= deadline {
                return Err(NetError::NoReply(format!(
                    "no reply from {to} over UDP after {} ({sends} transmissions{})",
                    secs(start.elapsed()),
                    if refused { "; port unreachable" } else { "" }
                )));
            }
            wait = wait.saturating_mul(2);
            log::debug!("{to}: no reply yet, retransmitting (next wait {wait:?})");
        }
    }

    /// One request over a fresh TCP connection; one framed reply.
    #[allow(clippy::disallowed_methods)] // driver: deadlines on real sockets
    fn tcp(
        &self,
        to: SocketAddr,
        bytes: &[u8],
        xid: u16,
        expect: &[FunctionId],
        deadline: Instant,
    ) -> Result<Reply, NetError> {
        let left = || deadline.saturating_duration_since(Instant::now());
        let fail = |what: &str, e: io::Error| {
            if is_timeout(&e) {
                NetError::NoReply(format!("no reply from {to} over TCP: {what} timed out"))
            } else {
                NetError::Other(anyhow!("TCP to {to}: {what}: {e}"))
            }
        };
        if left().is_zero() {
            return Err(NetError::NoReply(format!("no time left for TCP to {to}")));
        }
        // `bind` is not applied to TCP: std has no bind-before-connect, and
        // the kernel picks the source address for the route anyway.
        let mut s = TcpStream::connect_timeout(&to, left()).map_err(|e| fail("connect", e))?;
        s.set_nodelay(true).ok();
        s.set_write_timeout(Some(left().max(Duration::from_millis(1))))
            .map_err(|e| fail("connect", e))?;
        s.write_all(bytes).map_err(|e| fail("send", e))?;
        let frame = read_frame(&mut s, left).map_err(|e| fail("receive", e))?;
        // The initiating agent closes the connection (RFC 2608 §6.2).
        drop(s);
        match classify(&frame, xid, expect) {
            Received::Reply(msg) => Ok(Reply {
                from: to,
                msg: *msg,
                tcp: true,
                overflow: false,
                truncated: false,
            }),
            _ => Err(NetError::Other(match Message::parse(&frame) {
                Err(e) => anyhow!("TCP reply from {to} does not parse: {e}"),
                Ok(m) => anyhow!(
                    "TCP reply from {to} is a {:?} with XID {}, want {:?} with XID {xid}",
                    m.function(),
                    m.header().xid,
                    expect
                ),
            })),
        }
    }

    /// Multicast convergence (RFC 2608 §6.3): every distinct responder's
    /// first matching reply. Replies carrying an error code are dropped
    /// (errors are for unicast only, §7) but their senders still join the
    /// previous responder list. An OVERFLOW reply is asked again over TCP
    /// from its sender.
    #[allow(clippy::disallowed_methods)] // driver: deadlines on real sockets
    pub(super) fn multicast(
        &self,
        group: SocketAddr,
        req: &Message,
        expect: &[FunctionId],
    ) -> Result<Vec<Reply>, NetError> {
        let other = |e: io::Error| NetError::Other(anyhow!("multicast to {group}: {e}"));
        let sock = self.udp_socket(&group).map_err(other)?;
        if group.is_ipv4() {
            sock.set_multicast_ttl_v4(self.ttl).map_err(other)?;
            sock.set_multicast_loop_v4(true).map_err(other)?;
            // Lets --group name a broadcast address too (RFC 2608 §6.1).
            sock.set_broadcast(true).map_err(other)?;
        }
        let start = Instant::now();
        let deadline = start + self.timing.max;
        let xid = req.header().xid;
        let mut header = req.header().clone();
        header.flags.mcast = true;
        let mut responders: Vec<IpAddr> = Vec::new();
        let mut replies: Vec<Reply> = Vec::new();
        let mut overflowed: Vec<usize> = Vec::new();
        let mut wait = self.timing.retry;
        let mut buf = vec![0_u8; RECV_BUF];
        loop {
            let pr = responders
                .iter()
                .map(IpAddr::to_string)
                .collect::<Vec<_>>()
                .join(",");
            let pr = SlpString::new(pr).map_err(|e| NetError::Other(anyhow!("PRList: {e}")))?;
            let m = Message::new(
                header.clone(),
                with_pr_list(req.body(), &pr),
                req.extensions().to_vec(),
            )
            .map_err(|e| NetError::Other(anyhow!("request: {e}")))?;
            let bytes = m.to_bytes();
            if bytes.len() > MAX_DATAGRAM {
                if responders.is_empty() {
                    return Err(NetError::Other(anyhow!(
                        "the request is {} octets, too long to multicast (max {MAX_DATAGRAM})",
                        bytes.len()
                    )));
                }
                log::debug!("previous responder list no longer fits a datagram: converged");
                break;
            }
            sock.send_to(&bytes, group).map_err(other)?;
            let round_end = (Instant::now() + wait).min(deadline);
            let mut new = 0_usize;
            loop {
                let now = Instant::now();
                if now >= round_end {
                    break;
                }
                sock.set_read_timeout(Some(round_end - now))
                    .map_err(other)?;
                let (n, from) = match sock.recv_from(&mut buf) {
                    Ok(x) => x,
                    Err(e) if is_timeout(&e) => break,
                    Err(e) => return Err(other(e)),
                };
                if responders.contains(&from.ip()) {
                    continue;
                }
                let (msg, cut) = match classify(&buf[..n], xid, expect) {
                    Received::Reply(m) => (Some(*m), false),
                    Received::CutOverflow => (None, true),
                    Received::Ignore => continue,
                };
                responders.push(from.ip());
                new += 1;
                if msg
                    .as_ref()
                    .and_then(|m| m.body().error())
                    .is_some_and(|e| !e.is_ok())
                {
                    log::debug!("{from}: multicast reply with an error code, dropped");
                    continue;
                }
                let overflow = cut || msg.as_ref().is_some_and(|m| m.header().flags.overflow);
                if overflow {
                    overflowed.push(replies.len());
                }
                replies.push(Reply {
                    from,
                    // Placeholder until the TCP retry below fills it in.
                    msg: msg.unwrap_or_else(|| req.clone()),
                    tcp: false,
                    overflow,
                    truncated: cut,
                });
            }
            if Instant::now() >= deadline {
                break;
            }
            if !replies.is_empty() && new == 0 {
                log::debug!("no new responder this round: converged");
                break;
            }
            wait = wait.saturating_mul(2);
        }
        // OVERFLOW: ask each such responder again, unicast over TCP, same XID.
        let tcp_deadline = Instant::now() + self.timing.max;
        let mut cut_and_failed = Vec::new();
        for i in overflowed {
            let to = replies[i].from;
            match self.tcp(to, &req.to_bytes(), xid, expect, tcp_deadline) {
                Ok(mut r) => {
                    r.overflow = true;
                    replies[i] = r;
                }
                Err(e) if replies[i].truncated => {
                    log::warn!("{to}: reply cut short (OVERFLOW) and TCP retry failed: {e}");
                    cut_and_failed.push(i);
                }
                Err(e) => {
                    log::warn!(
                        "{to}: TCP retry after OVERFLOW failed ({e}); using the truncated reply"
                    );
                    replies[i].truncated = true;
                }
            }
        }
        for i in cut_and_failed.into_iter().rev() {
            replies.remove(i);
        }
        Ok(replies)
    }
}

/// Reads one SLP message from a stream: 5 octets, then the rest of Length.
/// `left` bounds every read.
fn read_frame(s: &mut TcpStream, left: impl Fn() -> Duration) -> io::Result<Vec<u8>> {
    let timed_out = || io::Error::new(io::ErrorKind::TimedOut, "deadline");
    let mut head = [0_u8; 5];
    let mut got = 0;
    while got < head.len() {
        let l = left();
        if l.is_zero() {
            return Err(timed_out());
        }
        s.set_read_timeout(Some(l))?;
        match s.read(&mut head[got..])? {
            0 => return Err(io::ErrorKind::UnexpectedEof.into()),
            n => got += n,
        }
    }
    let len = frame_len(&head).unwrap_or(0);
    if len < FIXED_LEN {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("SLP Length field {len} is shorter than a header"),
        ));
    }
    let mut frame = head.to_vec();
    // Grows with what arrives, never by what the Length field claims.
    let mut chunk = [0_u8; 16 * 1024];
    while frame.len() < len {
        let l = left();
        if l.is_zero() {
            return Err(timed_out());
        }
        s.set_read_timeout(Some(l))?;
        let want = (len - frame.len()).min(chunk.len());
        match s.read(&mut chunk[..want])? {
            0 => return Err(io::ErrorKind::UnexpectedEof.into()),
            n => frame.extend_from_slice(&chunk[..n]),
        }
    }
    Ok(frame)
}
