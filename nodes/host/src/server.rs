//! The host's TCP services: the HTTP server and the discard sink.
//!
//! Connections are accepted through the stack's
//! [`ListenPool`](svcroute_stack::listen::ListenPool): a few listening
//! sockets per port plus one per SYN the shim saw, up to `max_connections`.
//!
//! What the HTTP server answers:
//!
//! | request | answer |
//! |---|---|
//! | `GET`/`HEAD` any path | 200, `body_size` bytes: `instance=<name>\n` then `x` filler |
//! | `GET /bytes/<n>` | 200, `n` bytes of the pattern [`pattern_byte`], streamed |
//! | `POST /echo` | 200, the request body back |
//! | `POST` any other path | 200, `received <n> bytes\n` |
//! | other methods | 405 with `Allow` |
//!
//! Every answer to a parsed request carries `X-Instance: <name>` and
//! `Server: svcroute-host` (framing errors are answered by `ServerConn`).

use std::rc::Rc;

use serde_json::{json, Value};
use smoltcp::iface::{SocketHandle, SocketSet};
use smoltcp::socket::tcp;
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{IpAddress, IpEndpoint, IpProtocol, IpVersion, Ipv4Address, Ipv6Address};
use svcroute_stack::http::{Body, Limits, ReceivedRequest, Response, ServerConn, ServerEvent};
use svcroute_stack::listen::{ListenConfig, ListenPool};
use svcroute_stack::runtime::Context;
use svcroute_stack::shim::edit;
use svcroute_stack::stats::Counters;

use crate::HostConfig;

/// Byte `i` of the body served by `GET /bytes/<n>`: a period-251 pattern, so
/// a client can check any slice of it without holding the whole body.
pub fn pattern_byte(i: u64) -> u8 {
    (i % 251) as u8
}

/// 64 KiB of the pattern plus one period, so any offset has a 64 KiB slice.
fn pattern_block() -> Rc<[u8]> {
    (0..(64 * 1024 + 251) as u64).map(pattern_byte).collect()
}

/// How often idle connections are looked for.
const SWEEP: Duration = Duration::from_secs(1);

fn pool(port: u16, cfg: &HostConfig) -> ListenPool {
    let lc = ListenConfig {
        listeners: cfg.listeners,
        max_connections: cfg.max_connections,
        rx_buffer: cfg.tcp_rx_buffer,
        tx_buffer: cfg.tcp_tx_buffer,
        timeout: Duration::from_secs(60),
    };
    ListenPool::new(port, lc, "tcp.connection_limit")
}

#[derive(Debug)]
struct Conn {
    handle: SocketHandle,
    http: ServerConn,
    /// The last time bytes moved either way (a request arrived, request
    /// bytes were waiting, or the peer took response bytes).
    last: Instant,
    /// The send queue after the last serve: a shorter one means the peer
    /// acknowledged response bytes.
    sent_queue: usize,
    /// Remaining bytes of a streamed `/bytes/<n>` body: (next offset, end).
    stream: Option<(u64, u64)>,
}

#[derive(Debug)]
struct PortServer {
    http: Option<ListenPool>,
    conns: Vec<Conn>,
    discard: Option<ListenPool>,
    sinks: Vec<SocketHandle>,
    /// Sockets closed by us, removed from the set once fully closed.
    closing: Vec<SocketHandle>,
    /// Connections still in SYN-RECEIVED (socket, client, our port). A
    /// retransmitted SYN of theirs must not reach smoltcp: it would hand it
    /// to another listening socket ahead of theirs, and the two half-open
    /// sockets, with different sequence numbers, would reset the handshake.
    half_open: Vec<(SocketHandle, IpEndpoint, u16)>,
}

/// The HTTP server and discard sink of every port.
#[derive(Debug)]
pub struct Server {
    cfg: HostConfig,
    instance: String,
    body: Rc<[u8]>,
    pattern: Rc<[u8]>,
    limits: Limits,
    ports: Vec<PortServer>,
    next_sweep: Option<Instant>,
    requests: u64,
}

impl Server {
    pub(crate) fn new(cfg: &HostConfig, instance: String) -> Self {
        let mut body = format!("instance={instance}\n").into_bytes();
        if cfg.body_size > body.len() {
            body.resize(cfg.body_size - 1, b'x');
            body.push(b'\n');
        } else {
            body.truncate(cfg.body_size);
        }
        Self {
            limits: Limits {
                max_head_bytes: cfg.max_header_bytes,
                max_body_bytes: cfg.max_body_bytes as u64,
                ..Limits::default()
            },
            cfg: cfg.clone(),
            instance,
            body: body.into(),
            pattern: pattern_block(),
            ports: Vec::new(),
            next_sweep: None,
            requests: 0,
        }
    }

    /// Requests answered so far.
    pub fn requests(&self) -> u64 {
        self.requests
    }

    /// The instance name served.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    pub(crate) fn start(&mut self, cx: &mut Context<'_>) {
        for _ in cx.ports.iter() {
            self.ports.push(PortServer {
                http: (self.cfg.http_port != 0).then(|| pool(self.cfg.http_port, &self.cfg)),
                conns: Vec::new(),
                discard: (self.cfg.discard_port != 0)
                    .then(|| pool(self.cfg.discard_port, &self.cfg)),
                sinks: Vec::new(),
                closing: Vec::new(),
                half_open: Vec::new(),
            });
        }
        self.poll(cx);
    }

    pub(crate) fn poll(&mut self, cx: &mut Context<'_>) -> bool {
        let now = cx.now;
        let sweep = self.next_sweep.is_some_and(|t| t <= now);
        if sweep || self.next_sweep.is_none() {
            self.next_sweep = Some(now + SWEEP);
        }
        let mut any = false;
        for (ps, port) in self.ports.iter_mut().zip(cx.ports.iter_mut()) {
            let sockets = &mut port.sockets;
            if let Some(pool) = &mut ps.http {
                for handle in pool.accept(sockets, cx.stats) {
                    cx.stats.bump("http.connections");
                    note_half_open(&mut ps.half_open, sockets, handle);
                    ps.conns.push(Conn {
                        handle,
                        http: ServerConn::new(self.limits),
                        last: now,
                        sent_queue: 0,
                        stream: None,
                    });
                    any = true;
                }
            }
            if let Some(pool) = &mut ps.discard {
                for h in pool.accept(sockets, cx.stats) {
                    cx.stats.bump("discard.connections");
                    note_half_open(&mut ps.half_open, sockets, h);
                    ps.sinks.push(h);
                    any = true;
                }
            }
            let mut i = 0;
            while i < ps.conns.len() {
                let c = &mut ps.conns[i];
                let sock = sockets.get_mut::<tcp::Socket>(c.handle);
                let site = Site {
                    body: &self.body,
                    pattern: &self.pattern,
                    instance: &self.instance,
                    max_generated: self.cfg.max_generated_body as u64,
                };
                // A long upload or download is not idle: only a connection
                // on which nothing moved for idle_timeout_s is.
                if sock.recv_queue() > 0 || sock.send_queue() < c.sent_queue {
                    c.last = now;
                }
                let (progress, closed) = serve(c, sock, now, &site, &mut self.requests, cx.stats);
                c.sent_queue = sock.send_queue();
                any |= progress;
                let idle = sweep && now - c.last > Duration::from_secs(self.cfg.idle_timeout_s);
                if closed || idle {
                    if idle {
                        cx.stats.bump("http.idle_closed");
                        sock.close();
                    }
                    ps.closing.push(c.handle);
                    ps.conns.swap_remove(i);
                    if let Some(pool) = &mut ps.http {
                        pool.release();
                    }
                    continue;
                }
                i += 1;
            }
            ps.sinks.retain(|&h| {
                let sock = sockets.get_mut::<tcp::Socket>(h);
                let mut n = 0;
                while sock.can_recv() {
                    match sock.recv(|b| (b.len(), b.len())) {
                        Ok(0) | Err(_) => break,
                        Ok(k) => n += k,
                    }
                }
                if n > 0 {
                    cx.stats.add("discard.bytes", n as u64);
                    any = true;
                }
                if !sock.may_recv() && sock.state() != tcp::State::SynReceived {
                    sock.close();
                    ps.closing.push(h);
                    if let Some(pool) = &mut ps.discard {
                        pool.release();
                    }
                    return false;
                }
                true
            });
            // Before any socket is removed: every handle here is valid.
            ps.half_open.retain(|&(h, ..)| {
                sockets.get::<tcp::Socket>(h).state() == tcp::State::SynReceived
            });
            ps.closing.retain(|&h| {
                let sock = sockets.get_mut::<tcp::Socket>(h);
                // A half-open connection reset by its peer goes back to
                // Listen (RFC 9293 §3.10.7.4): outside the pool, nobody
                // would serve the next connection it took. Close it.
                if sock.state() == tcp::State::Listen {
                    sock.close();
                }
                if sock.is_open() {
                    return true;
                }
                sockets.remove(h);
                false
            });
        }
        any
    }

    /// Note a SYN arriving on `port` (called by the ingress shim, before
    /// smoltcp sees it) so the next poll arms a listener for it. Returns
    /// `true` for a retransmitted SYN of a connection still in SYN-RECEIVED:
    /// the caller drops it (smoltcp would ignore it at that connection's
    /// socket anyway, and retransmits the SYN-ACK on its own timer).
    pub(crate) fn saw_syn(&mut self, port: usize, frame: &[u8]) -> bool {
        let Some(ps) = self.ports.get_mut(port) else {
            return false;
        };
        if !ps.half_open.is_empty() {
            if let Some((remote, local)) = syn_tuple(frame) {
                if ps
                    .half_open
                    .iter()
                    .any(|&(_, r, l)| r == remote && l == local)
                {
                    return true;
                }
            }
        }
        for pool in [&mut ps.http, &mut ps.discard].into_iter().flatten() {
            pool.note_frame(frame);
        }
        false
    }

    pub(crate) fn poll_at(&self, _now: Instant) -> Option<Instant> {
        self.ports
            .iter()
            .any(|p| !p.conns.is_empty())
            .then_some(self.next_sweep)
            .flatten()
    }

    /// Connections and requests, for `ctl server`.
    pub fn summary(&self) -> Value {
        json!({
            "instance": self.instance,
            "http_port": self.cfg.http_port,
            "discard_port": self.cfg.discard_port,
            "requests": self.requests,
            "connections": self.ports.iter().map(|p| p.conns.len()).sum::<usize>(),
            "sinks": self.ports.iter().map(|p| p.sinks.len()).sum::<usize>(),
        })
    }
}

/// What the server serves, borrowed for one connection's turn.
struct Site<'a> {
    body: &'a Rc<[u8]>,
    pattern: &'a Rc<[u8]>,
    instance: &'a str,
    max_generated: u64,
}

/// Drive one HTTP connection; returns (made progress, connection over).
/// Remember a new connection that is still in SYN-RECEIVED.
fn note_half_open(
    half_open: &mut Vec<(SocketHandle, IpEndpoint, u16)>,
    sockets: &SocketSet<'static>,
    h: SocketHandle,
) {
    let sock = sockets.get::<tcp::Socket>(h);
    if sock.state() != tcp::State::SynReceived {
        return;
    }
    if let (Some(remote), Some(local)) = (sock.remote_endpoint(), sock.local_endpoint()) {
        half_open.push((h, remote, local.port));
    }
}

/// The client endpoint and our port of a TCP SYN (without ACK).
fn syn_tuple(frame: &[u8]) -> Option<(IpEndpoint, u16)> {
    let l = edit::walk(frame).ok()?;
    if l.upper_protocol != IpProtocol::Tcp || l.fragment == edit::Fragment::Later {
        return None;
    }
    let tcp = frame.get(l.upper_offset..l.upper_offset + 14)?;
    if tcp[13] & 0x12 != 0x02 {
        return None;
    }
    let ip = l.ip_offset;
    let src = match l.version {
        IpVersion::Ipv4 => IpAddress::Ipv4(Ipv4Address::from(
            <[u8; 4]>::try_from(frame.get(ip + 12..ip + 16)?).ok()?,
        )),
        IpVersion::Ipv6 => IpAddress::Ipv6(Ipv6Address::from(
            <[u8; 16]>::try_from(frame.get(ip + 8..ip + 24)?).ok()?,
        )),
    };
    let sport = u16::from_be_bytes([tcp[0], tcp[1]]);
    let dport = u16::from_be_bytes([tcp[2], tcp[3]]);
    Some((IpEndpoint::new(src, sport), dport))
}

fn serve(
    c: &mut Conn,
    sock: &mut tcp::Socket<'_>,
    now: Instant,
    site: &Site<'_>,
    requests: &mut u64,
    stats: &mut Counters,
) -> (bool, bool) {
    let mut any = false;
    loop {
        if let Some((off, end)) = c.stream {
            any |= stream_pattern(c, sock, site.pattern, off, end);
            if c.stream.is_some() {
                return (any, false);
            }
        }
        match c.http.poll(sock) {
            ServerEvent::Request(req) => {
                any = true;
                c.last = now;
                *requests += 1;
                stats.bump("http.requests");
                let (resp, stream) = answer(&req, site);
                stats.bump(status_counter(resp.status));
                c.stream = stream;
                if c.http.respond(resp).is_err() {
                    // ServerConn handed out a request, so a response is due:
                    // this cannot happen; count rather than panic.
                    stats.drop("http_state");
                    return (any, true);
                }
            }
            ServerEvent::Error(e) => {
                any = true;
                stats.drop(match e.status() {
                    400 => "http_400_bad_request",
                    413 => "http_413_body_too_large",
                    431 => "http_431_header_too_large",
                    501 => "http_501_not_implemented",
                    505 => "http_505_version",
                    _ => "http_protocol_error",
                });
            }
            ServerEvent::Idle => return (any, false),
            ServerEvent::Closed => return (true, true),
        }
    }
}

fn stream_pattern(
    c: &mut Conn,
    sock: &mut tcp::Socket<'_>,
    pattern: &Rc<[u8]>,
    mut off: u64,
    end: u64,
) -> bool {
    let mut any = false;
    while off < end {
        let start = (off % 251) as usize;
        let len = ((end - off) as usize).min(64 * 1024);
        let n = c.http.write_body(sock, &pattern[start..start + len]);
        if n == 0 {
            break;
        }
        any = true;
        off += n as u64;
    }
    if off >= end && c.http.finish_body(sock) {
        c.stream = None;
    } else {
        c.stream = Some((off, end));
    }
    any
}

fn status_counter(status: u16) -> &'static str {
    match status {
        200..=299 => "http.status_2xx",
        300..=399 => "http.status_3xx",
        400..=499 => "http.status_4xx",
        _ => "http.status_5xx",
    }
}

/// The response to `req` and, for `/bytes/<n>`, the body to stream.
fn answer(req: &ReceivedRequest, site: &Site<'_>) -> (Response, Option<(u64, u64)>) {
    let h = &req.head;
    let path = h.target.split('?').next().unwrap_or("");
    let base = |status| {
        Response::new(status)
            .with_header("Server", "svcroute-host")
            .with_header("X-Instance", site.instance)
            .with_header("Content-Type", "text/plain")
    };
    match h.method.as_str() {
        "GET" | "HEAD" => match path.strip_prefix("/bytes/").map(str::parse::<u64>) {
            Some(Ok(0)) => (base(200), None),
            Some(Ok(n)) if n <= site.max_generated => (
                base(200).with_body(Body::Streamed { length: Some(n) }),
                (!h.is_head()).then_some((0, n)),
            ),
            Some(_) => (
                base(400).with_body(format!("bad length in {path}\n").into_bytes()),
                None,
            ),
            None => (base(200).with_body(Body::Shared(site.body.clone())), None),
        },
        "POST" if path == "/echo" => (base(200).with_body(req.body.clone()), None),
        "POST" => (
            base(200).with_body(format!("received {} bytes\n", req.body.len()).into_bytes()),
            None,
        ),
        _ => (
            base(405)
                .with_header("Allow", "GET, HEAD, POST")
                .with_body(&b"method not allowed\n"[..]),
            None,
        ),
    }
}

#[cfg(test)]
mod test {

    use smoltcp::phy::ChecksumCapabilities;
    use smoltcp::time::Duration;
    use smoltcp::wire::{
        EthernetAddress, EthernetFrame, EthernetProtocol, EthernetRepr, Ipv6Packet, Ipv6Repr,
        TcpControl, TcpPacket, TcpRepr, TcpSeqNumber,
    };
    use svcroute_stack::phy::Link;
    use svcroute_stack::sim::{self, SegmentConfig, Sim, SimLink};

    use super::*;
    use crate::{Host, HostConfig};

    const PROBE_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 9]);

    /// A raw TCP peer at fd00::9 talking to a host at fd00::2 port 80.
    struct Probe {
        link: SimLink,
    }

    /// A segment the probe received: (flags, seq, ack, payload length).
    type Seg = (TcpControl, i32, Option<i32>, usize);

    impl Probe {
        fn send(
            &mut self,
            sport: u16,
            control: TcpControl,
            seq: i32,
            ack: Option<i32>,
            data: &[u8],
        ) {
            let (src, dst) = (sim::ipv6(0, 9), sim::ipv6(0, 2));
            let tcp = TcpRepr {
                src_port: sport,
                dst_port: 80,
                control,
                seq_number: TcpSeqNumber(seq),
                ack_number: ack.map(TcpSeqNumber),
                window_len: 8192,
                window_scale: None,
                max_seg_size: None,
                sack_permitted: false,
                sack_ranges: [None; 3],
                timestamp: None,
                payload: data,
            };
            let mut f = vec![0; 54 + tcp.buffer_len()];
            EthernetRepr {
                src_addr: PROBE_MAC,
                dst_addr: sim::mac(0, 2),
                ethertype: EthernetProtocol::Ipv6,
            }
            .emit(&mut EthernetFrame::new_unchecked(&mut f[..]));
            Ipv6Repr {
                src_addr: src,
                dst_addr: dst,
                next_header: IpProtocol::Tcp,
                payload_len: tcp.buffer_len(),
                hop_limit: 64,
            }
            .emit(&mut Ipv6Packet::new_unchecked(&mut f[14..]));
            tcp.emit(
                &mut TcpPacket::new_unchecked(&mut f[54..]),
                &src.into(),
                &dst.into(),
                &ChecksumCapabilities::default(),
            );
            assert!(self.link.send(&f).unwrap());
        }

        /// TCP segments to `port` received since the last call.
        fn recv(&mut self, port: u16) -> Vec<Seg> {
            let mut out = Vec::new();
            let mut buf = vec![0; 2048];
            while let Some(n) = self.link.recv(&mut buf).unwrap() {
                let Ok(ip) = Ipv6Packet::new_checked(&buf[14..n]) else {
                    continue;
                };
                if ip.next_header() != IpProtocol::Tcp || ip.dst_addr() != sim::ipv6(0, 9) {
                    continue;
                }
                let t = TcpPacket::new_checked(ip.payload()).unwrap();
                if t.dst_port() != port {
                    continue;
                }
                let control = match (t.syn(), t.fin(), t.rst()) {
                    (true, ..) => TcpControl::Syn,
                    (_, true, _) => TcpControl::Fin,
                    (.., true) => TcpControl::Rst,
                    _ => TcpControl::None,
                };
                let ack = t.ack().then(|| t.ack_number().0);
                out.push((control, t.seq_number().0, ack, t.payload().len()));
            }
            out
        }
    }

    #[test]
    fn a_retransmitted_syn_never_opens_a_second_half_open_connection() {
        let mut sim = Sim::new(1);
        let lan = sim.add_segment(SegmentConfig::default());
        let port = sim.port(lan, 2);
        let h = sim.add_role(
            "h",
            vec![port],
            Host::new("h", HostConfig::default()).unwrap(),
        );
        let mut probe = Probe {
            link: sim.attach(lan),
        };
        sim.run_for(Duration::from_millis(10)).unwrap();
        probe.recv(0);

        probe.send(40000, TcpControl::Syn, 100, None, b"");
        sim.run_for(Duration::from_millis(10)).unwrap();
        let segs = probe.recv(40000);
        assert_eq!(segs.len(), 1, "{segs:?}");
        let (control, isn, ack, _) = segs[0];
        assert_eq!((control, ack), (TcpControl::Syn, Some(101)));

        // The SYN again, as if the SYN-ACK were lost: no second connection
        // (with another ISN) answers it.
        probe.send(40000, TcpControl::Syn, 100, None, b"");
        sim.run_for(Duration::from_millis(10)).unwrap();
        assert_eq!(probe.recv(40000), []);
        assert_eq!(sim.node(h).stats().get("drop.tcp_duplicate_syn"), 1);

        // The handshake completes with the first ISN and the request is served.
        let get = b"GET / HTTP/1.1\r\nHost: h\r\n\r\n";
        probe.send(40000, TcpControl::None, 101, Some(isn + 1), get);
        sim.run_for(Duration::from_millis(50)).unwrap();
        let segs = probe.recv(40000);
        assert!(segs.iter().any(|s| s.3 > 0), "{segs:?}");
        assert!(segs.iter().all(|s| s.0 != TcpControl::Rst), "{segs:?}");
        assert_eq!(sim.node(h).role().server().requests(), 1);
    }

    #[test]
    fn a_half_open_connection_reset_by_its_peer_leaves_no_stray_listener() {
        let mut sim = Sim::new(2);
        let lan = sim.add_segment(SegmentConfig::default());
        let port = sim.port(lan, 2);
        let cfg = HostConfig {
            listeners: 1,
            ..HostConfig::default()
        };
        let h = sim.add_role("h", vec![port], Host::new("h", cfg).unwrap());
        let mut probe = Probe {
            link: sim.attach(lan),
        };
        sim.run_for(Duration::from_millis(10)).unwrap();
        // Ten half-open connections, each reset by the peer (smoltcp puts
        // the socket back to Listen); then ten real ones, all served.
        for i in 0..10 {
            let sport = 41000 + i;
            probe.send(sport, TcpControl::Syn, 100, None, b"");
            sim.run_for(Duration::from_millis(10)).unwrap();
            assert_eq!(probe.recv(sport).len(), 1);
            probe.send(sport, TcpControl::Rst, 101, None, b"");
            sim.run_for(Duration::from_millis(10)).unwrap();
        }
        let get = b"GET / HTTP/1.1\r\nHost: h\r\n\r\n";
        for i in 0..10 {
            let sport = 42000 + i;
            probe.send(sport, TcpControl::Syn, 100, None, b"");
            sim.run_for(Duration::from_millis(10)).unwrap();
            let segs = probe.recv(sport);
            let isn = segs[0].1;
            probe.send(sport, TcpControl::None, 101, Some(isn + 1), get);
            sim.run_for(Duration::from_millis(50)).unwrap();
            let segs = probe.recv(sport);
            assert!(segs.iter().any(|s| s.3 > 0), "connection {i}: {segs:?}");
        }
        assert_eq!(sim.node(h).role().server().requests(), 10);
    }
}
