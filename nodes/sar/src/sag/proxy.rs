//! The SAG's stateful proxy to non-ROSA servers (sans-IO: whole Ethernet
//! frames in, the same frames edited in place).
//!
//! ```text
//!  request  (SARi→SAG){Request: Client C, Ingress I, Service, Port}  C:cp → :sp
//!      ─► strip the option; src := SAG, sport := g (a proxy port), dst := server S
//!  server   (S→SAG) S:sp → SAG:g
//!      ─► src := SAG, sport := sp, dport := cp;
//!         until C's first direct packet: dst := I with a Service Response
//!         {Client C, Ingress I, Service, Port, Instance = SAG}
//!         (dst := C when we are the ingress), afterwards dst := C, plain
//!  client   (C→SAG) C:cp → SAG:sp, plain (C bound its flow to Instance = SAG)
//!      ─► src := SAG, sport := g, dst := S; the flow is now direct
//! ```
//!
//! A flow is keyed by (protocol, client, client port, service port) on the
//! client side and by (protocol, proxy port) on the server side; the proxy
//! port is unique per protocol among live flows.
//!
//! A TCP flow ends with its connection. The proxy sees every segment both
//! ways, so it follows each side's FIN and whether the other side
//! acknowledged it, and RSTs in either direction (in the window of the
//! side that receives them, so a blind one does not end the flow):
//!
//! ```text
//!   Open ── both FINs acknowledged ──► Closed(Fin) ─┐ kept `linger` after
//!     └──── an in-window RST ────────► Closed(Rst) ─┘ its last packet, then gone
//! ```
//!
//! A closed flow still translates (a retransmitted FIN or ACK, a late
//! RST) until it is gone; a new SYN from the same client port (another
//! initial sequence number) replaces it with a new flow and proxy port.
//! UDP flows, and TCP flows that never close, are forgotten after `idle`
//! without a packet. At `max_flows`, expired flows go first, then the
//! closed flow seen last longest ago, else the new flow is refused
//! (`drop.sag.flows_full`). Addresses are changed with
//! [`edit::rewrite_addr`], ports with an RFC 1624 update of the TCP/UDP
//! checksum ([`edit::checksum_update`]), so every checksum stays valid
//! without being recomputed.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};

use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{IpProtocol, TcpOption, TcpPacket};
use svcroute_stack::shim::edit::{self, AddrField, Fragment, Layout};
use svcroute_stack::wire::ipv6opt::{OptionRepr, OptionType};
use svcroute_stack::wire::rosa::{Entry, FlowPort, Message, MessageKind, ServiceName};

use crate::counters::{Counters, Tally};

/// Proxy limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyConfig {
    /// Most flows at once.
    pub max_flows: usize,
    /// A flow idle this long is forgotten.
    pub idle: Duration,
    /// A closed TCP flow is forgotten this long after its last packet.
    pub linger: Duration,
    /// Lowest proxy (SAG-side) port.
    pub port_min: u16,
    /// Highest proxy port.
    pub port_max: u16,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        Self {
            max_flows: 4096,
            idle: Duration::from_secs(120),
            linger: Duration::from_secs(DEFAULT_LINGER_S),
            port_min: 40_000,
            port_max: 59_999,
        }
    }
}

/// The default of [`ProxyConfig::linger`], in seconds: room for a few
/// retransmissions of the last FIN or ACK (RTOs of one second and more).
pub const DEFAULT_LINGER_S: u64 = 15;

/// The client side of a flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClientKey {
    /// TCP or UDP.
    pub proto: IpProtocol,
    /// The client's address (the request's Client entry).
    pub client: Ipv6Addr,
    /// The client's port.
    pub client_port: u16,
    /// The service port (the request's destination port).
    pub service_port: u16,
}

/// One proxied flow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flow {
    /// Its client side.
    pub key: ClientKey,
    /// The server.
    pub server: Ipv6Addr,
    /// Our port toward the server.
    pub proxy_port: u16,
    /// The client's ingress SAR (the request's Ingress entry).
    pub ingress: Ipv6Addr,
    /// The service name of the request.
    pub service: ServiceName,
    /// The client has sent to us directly: answers go plain.
    pub direct: bool,
    /// Last packet either way.
    pub last: Instant,
    /// Open, or closed and lingering.
    pub state: FlowState,
    /// What the proxy follows of the TCP connection (unused for UDP).
    tcp: Track,
}

/// Where a flow is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowState {
    /// Carrying traffic. UDP flows stay here until they are idle.
    Open,
    /// The TCP connection ended; the flow still translates until it has
    /// been quiet for [`ProxyConfig::linger`].
    Closed(CloseCause),
}

/// How a TCP connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseCause {
    /// Both sides sent a FIN and each was acknowledged.
    Fin,
    /// An RST, from either side.
    Rst,
}

/// What the proxy follows of one side of a TCP connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Half {
    /// The sequence number after the last octet (SYN and FIN count) this
    /// side sent; `None` before its first segment.
    nxt: Option<u32>,
    /// The window it last advertised, scaled.
    window: u32,
    /// The Window Scale option of its SYN (RFC 7323 §2.2).
    wscale: Option<u8>,
    /// The furthest acknowledgement it sent: where the other side's
    /// segments must start (about its RCV.NXT).
    acked: Option<u32>,
    /// The sequence number after its FIN, once it sent one.
    fin: Option<u32>,
    /// The other side acknowledged that FIN.
    fin_acked: bool,
}

/// Both sides of a TCP connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Track {
    /// The initial sequence number of the client's SYN.
    isn: Option<u32>,
    client: Half,
    server: Half,
}

/// Which end of the flow sent a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Client,
    Server,
}

/// What the proxy did with a packet addressed to the SAG.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Rewritten in place: route it.
    Forward,
    /// Not a proxied flow's: the SAG's own (deliver to its stack).
    NotOurs,
    /// Drop it (the counter, also counted in the proxy's tally).
    Drop(&'static str),
}

/// The request's facts the proxy needs (from its ROSA option).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The Client entry.
    pub client: Ipv6Addr,
    /// The Ingress entry.
    pub ingress: Ipv6Addr,
    /// The Service entry.
    pub service: ServiceName,
    /// The resolved server.
    pub server: Ipv6Addr,
}

/// The flow table. Call order: [`Self::request`] for a Service Request the
/// SAG proxies, [`Self::plain`] for any other TCP/UDP packet addressed to
/// the SAG, [`Self::expire`] at [`Self::poll_timeout`] (earlier or later
/// calls are harmless).
#[derive(Debug)]
pub struct Proxy {
    cfg: ProxyConfig,
    me: Ipv6Addr,
    flows: HashMap<(IpProtocol, u16), Flow>,
    by_client: HashMap<ClientKey, u16>,
    next_port: u16,
    tally: Tally,
}

impl Proxy {
    /// An empty table for the SAG at `me`.
    pub fn new(cfg: ProxyConfig, me: Ipv6Addr) -> Self {
        Self {
            next_port: cfg.port_min,
            cfg,
            me,
            flows: HashMap::new(),
            by_client: HashMap::new(),
            tally: Tally::default(),
        }
    }

    /// A Service Request (`frame`, an Ethernet frame addressed to us with
    /// its ROSA option) that goes to the non-ROSA server `req.server`:
    /// find or open its flow and rewrite it toward the server.
    pub fn request(&mut self, now: Instant, frame: &mut Vec<u8>, req: &Request) -> Verdict {
        let v = self.request_inner(now, frame, req);
        self.count(v, "sag.proxy_request")
    }

    /// Any other packet addressed to us: a server's answer on a proxy
    /// port, or a bound client's packet; else [`Verdict::NotOurs`].
    pub fn plain(&mut self, now: Instant, frame: &mut Vec<u8>) -> Verdict {
        let Ok(layout) = edit::walk(frame) else {
            return Verdict::NotOurs;
        };
        let Some((proto, sport, dport)) = ports(frame, &layout) else {
            return Verdict::NotOurs;
        };
        let src = addr(frame, layout.ip_offset + 8);
        let seg = segment(frame, &layout);
        if let Some(f) = self.flows.get(&(proto, dport)) {
            if f.server == src && f.key.service_port == sport {
                let v = self.server_to_client(now, frame, proto, dport);
                if let (Verdict::Forward, Some(seg)) = (v, seg) {
                    self.observe((proto, dport), End::Server, &seg);
                }
                return self.count(v, "sag.proxy_to_client");
            }
        }
        let key = ClientKey {
            proto,
            client: src,
            client_port: sport,
            service_port: dport,
        };
        if let Some(&port) = self.by_client.get(&key) {
            let v = self.client_to_server(now, frame, proto, port);
            if let (Verdict::Forward, Some(seg)) = (v, seg) {
                self.observe((proto, port), End::Client, &seg);
            }
            return self.count(v, "sag.proxy_to_server");
        }
        Verdict::NotOurs
    }

    /// Forget open flows idle for [`ProxyConfig::idle`] and closed ones
    /// quiet for [`ProxyConfig::linger`], freeing their proxy ports.
    pub fn expire(&mut self, now: Instant) {
        let cfg = &self.cfg;
        let by_client = &mut self.by_client;
        let mut idle = 0;
        self.flows.retain(|_, f| {
            let keep = f.last + cfg.limit(f.state) > now;
            if !keep {
                by_client.remove(&f.key);
                if f.state == FlowState::Open {
                    idle += 1;
                }
            }
            keep
        });
        // Closed flows were counted when they closed.
        self.tally.add("sag.proxy_flow_expired", idle);
    }

    /// When the next flow is due to be forgotten.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.flows
            .values()
            .map(|f| f.last + self.cfg.limit(f.state))
            .min()
    }

    /// The flows.
    pub fn flows(&self) -> impl Iterator<Item = &Flow> {
        self.flows.values()
    }

    /// Cumulative counters.
    pub const fn counters(&self) -> &Counters {
        self.tally.total()
    }

    /// Counter increments since the last call.
    pub fn drain_counters(&mut self) -> Counters {
        let mut c = Counters::new();
        self.tally.drain_into(&mut c);
        c
    }

    fn count(&mut self, v: Verdict, ok: &'static str) -> Verdict {
        match v {
            Verdict::Forward => self.tally.bump(ok),
            Verdict::Drop(r) => self.tally.bump(r),
            Verdict::NotOurs => {}
        }
        v
    }

    fn request_inner(&mut self, now: Instant, frame: &mut Vec<u8>, req: &Request) -> Verdict {
        let Ok(layout) = edit::walk(frame) else {
            return Verdict::Drop("drop.sag.proxy_malformed");
        };
        if layout.fragment != Fragment::Whole {
            return Verdict::Drop("drop.sag.proxy_malformed");
        }
        let Some((proto, sport, dport)) = ports(frame, &layout) else {
            return Verdict::Drop("drop.sag.proxy_not_tcp_udp");
        };
        let key = ClientKey {
            proto,
            client: req.client,
            client_port: sport,
            service_port: dport,
        };
        let seg = segment(frame, &layout);
        if let Some(&old) = self.by_client.get(&key) {
            if self.is_new_connection(old, key.proto, seg.as_ref()) {
                // The client reuses its port after the connection closed:
                // a new flow (and proxy port), not the lingering one.
                self.remove((key.proto, old));
                self.tally.bump("sag.proxy_flow_reopened");
            }
        }
        let port = match self.by_client.get(&key).copied() {
            Some(p) => p,
            None => match self.open(now, key, req) {
                Some(p) => p,
                None => return Verdict::Drop("drop.sag.flows_full"),
            },
        };
        let Some(f) = self.flows.get_mut(&(proto, port)) else {
            return Verdict::Drop("drop.sag.flows_full");
        };
        if f.service != req.service || f.server != req.server {
            // The client reuses a local port for another service while the
            // first flow lives (the kernel picks ports per destination).
            // The two are the same flow on the wire here: refuse the new
            // one rather than send it to the first one's server.
            return Verdict::Drop("drop.sag.proxy_key_clash");
        }
        // A new request on a known client flow (a retransmitted SYN, or
        // the next UDP datagram before the client bound): same flow.
        f.last = now;
        f.direct = false;
        let server = f.server;
        let orig = frame.clone();
        if edit::strip_dest_opts(frame).is_err()
            || edit::rewrite_addr(frame, AddrField::Src, IpAddr::V6(self.me)).is_err()
            || edit::rewrite_addr(frame, AddrField::Dst, IpAddr::V6(server)).is_err()
            || set_port(frame, Side::Src, port).is_none()
        {
            *frame = orig;
            return Verdict::Drop("drop.sag.proxy_edit_failed");
        }
        if let Some(seg) = seg {
            self.observe((proto, port), End::Client, &seg);
        }
        Verdict::Forward
    }

    /// A request on the client key of flow `port` opens a new TCP
    /// connection: the flow has closed and this SYN is not its first one
    /// again (another initial sequence number).
    fn is_new_connection(&self, port: u16, proto: IpProtocol, seg: Option<&Segment>) -> bool {
        let (Some(f), Some(seg)) = (self.flows.get(&(proto, port)), seg) else {
            return false;
        };
        matches!(f.state, FlowState::Closed(_)) && seg.syn && !seg.ack && f.tcp.isn != Some(seg.seq)
    }

    /// Forget one flow (its proxy port is free again).
    fn remove(&mut self, key: (IpProtocol, u16)) -> Option<Flow> {
        let f = self.flows.remove(&key)?;
        self.by_client.remove(&f.key);
        Some(f)
    }

    /// Follow a TCP segment the proxy forwarded on flow `key`: FINs and
    /// their acknowledgements, RSTs; close the flow when its connection
    /// ends.
    fn observe(&mut self, key: (IpProtocol, u16), from: End, seg: &Segment) {
        let Some(f) = self.flows.get_mut(&key) else {
            return;
        };
        if f.state != FlowState::Open {
            // Retransmissions and late RSTs of a closed flow: translated
            // (that is why it lingers), nothing more to learn.
            return;
        }
        let t = &mut f.tcp;
        let (me, peer) = match from {
            End::Client => (&mut t.client, &mut t.server),
            End::Server => (&mut t.server, &mut t.client),
        };
        if seg.rst {
            if !rst_acceptable(me, peer, seg) {
                // Not in the receiver's window: the endpoint will ignore
                // it too (RFC 5961 §3), so the flow lives on.
                self.tally.bump("sag.proxy_rst_ignored");
                return;
            }
            f.state = FlowState::Closed(CloseCause::Rst);
            self.tally.bump("sag.proxy_flow_closed_rst");
            return;
        }
        if seg.syn {
            if from == End::Client {
                t.isn.get_or_insert(seg.seq);
            }
            me.wscale = seg.wscale.map(|s| s.min(14));
        }
        let end = seg.seq.wrapping_add(seg.len);
        if me.nxt.is_none_or(|n| seq_gt(end, n)) {
            me.nxt = Some(end);
        }
        // Windows are scaled only once both SYNs offered it, and a SYN's
        // window never is (RFC 7323 §2.2).
        let shift = match (seg.syn, me.wscale, peer.wscale) {
            (false, Some(s), Some(_)) => s,
            _ => 0,
        };
        me.window = u32::from(seg.window) << shift;
        if seg.fin && me.fin.is_none() {
            me.fin = Some(end);
        }
        if seg.ack {
            if me.acked.is_none_or(|a| seq_gt(seg.ack_no, a)) {
                me.acked = Some(seg.ack_no);
            }
            if let Some(fin) = peer.fin {
                if !seq_gt(fin, seg.ack_no) {
                    peer.fin_acked = true;
                }
            }
        }
        if t.client.fin_acked && t.server.fin_acked {
            f.state = FlowState::Closed(CloseCause::Fin);
            self.tally.bump("sag.proxy_flow_closed_fin");
        }
    }

    fn open(&mut self, now: Instant, key: ClientKey, req: &Request) -> Option<u16> {
        if self.flows.len() >= self.cfg.max_flows {
            self.expire(now);
        }
        if self.flows.len() >= self.cfg.max_flows {
            // Cut the linger of the closed flow quiet the longest.
            let oldest = self
                .flows
                .iter()
                .filter(|(_, f)| f.state != FlowState::Open)
                .min_by_key(|(_, f)| f.last)
                .map(|(k, _)| *k)?;
            self.remove(oldest);
            self.tally.bump("sag.proxy_flow_linger_cut");
        }
        let span = u32::from(self.cfg.port_max - self.cfg.port_min) + 1;
        let mut port = None;
        for _ in 0..span {
            let p = self.next_port;
            self.next_port = if p >= self.cfg.port_max {
                self.cfg.port_min
            } else {
                p + 1
            };
            if !self.flows.contains_key(&(key.proto, p)) {
                port = Some(p);
                break;
            }
        }
        let port = port?;
        self.flows.insert(
            (key.proto, port),
            Flow {
                key,
                server: req.server,
                proxy_port: port,
                ingress: req.ingress,
                service: req.service.clone(),
                direct: false,
                last: now,
                state: FlowState::Open,
                tcp: Track::default(),
            },
        );
        self.by_client.insert(key, port);
        self.tally.bump("sag.proxy_flow_opened");
        Some(port)
    }

    fn server_to_client(
        &mut self,
        now: Instant,
        frame: &mut Vec<u8>,
        proto: IpProtocol,
        port: u16,
    ) -> Verdict {
        let me = self.me;
        let Some(f) = self.flows.get_mut(&(proto, port)) else {
            return Verdict::NotOurs;
        };
        f.last = now;
        let orig = frame.clone();
        let to = if f.direct || f.ingress == me {
            f.key.client
        } else {
            f.ingress
        };
        if !f.direct {
            let msg = Message {
                kind: MessageKind::Response,
                entries: vec![
                    Entry::Service(f.service.clone()),
                    Entry::Client(IpAddr::V6(f.key.client)),
                    Entry::Ingress(IpAddr::V6(f.ingress)),
                    Entry::Port(FlowPort {
                        proto,
                        port: f.key.service_port,
                    }),
                    Entry::Instance(IpAddr::V6(me)),
                ],
            };
            let inserted = msg
                .to_bytes()
                .ok()
                .and_then(|b| {
                    let opt = OptionRepr::new(OptionType::Rosa, &b).ok()?;
                    edit::insert_dest_opts(frame, &[opt]).ok()
                })
                .is_some();
            if !inserted {
                *frame = orig;
                return Verdict::Drop("drop.sag.proxy_edit_failed");
            }
        }
        if edit::rewrite_addr(frame, AddrField::Src, IpAddr::V6(me)).is_err()
            || edit::rewrite_addr(frame, AddrField::Dst, IpAddr::V6(to)).is_err()
            || set_port(frame, Side::Src, f.key.service_port).is_none()
            || set_port(frame, Side::Dst, f.key.client_port).is_none()
        {
            *frame = orig;
            return Verdict::Drop("drop.sag.proxy_edit_failed");
        }
        Verdict::Forward
    }

    fn client_to_server(
        &mut self,
        now: Instant,
        frame: &mut [u8],
        proto: IpProtocol,
        port: u16,
    ) -> Verdict {
        let me = self.me;
        let Some(f) = self.flows.get_mut(&(proto, port)) else {
            return Verdict::NotOurs;
        };
        f.last = now;
        if !f.direct {
            f.direct = true;
            self.tally.bump("sag.proxy_client_direct");
        }
        let server = f.server;
        let orig = frame.to_vec();
        if edit::rewrite_addr(frame, AddrField::Src, IpAddr::V6(me)).is_err()
            || edit::rewrite_addr(frame, AddrField::Dst, IpAddr::V6(server)).is_err()
            || set_port(frame, Side::Src, port).is_none()
        {
            frame.copy_from_slice(&orig);
            return Verdict::Drop("drop.sag.proxy_edit_failed");
        }
        Verdict::Forward
    }
}

impl ProxyConfig {
    /// How long a flow in `state` may go without a packet.
    const fn limit(&self, state: FlowState) -> Duration {
        match state {
            FlowState::Open => self.idle,
            FlowState::Closed(_) => self.linger,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Src,
    Dst,
}

/// The facts of a TCP segment the proxy follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Segment {
    seq: u32,
    ack_no: u32,
    syn: bool,
    ack: bool,
    fin: bool,
    rst: bool,
    window: u16,
    /// The Window Scale option (a SYN's).
    wscale: Option<u8>,
    /// Sequence space it takes: payload, SYN and FIN.
    len: u32,
}

/// The TCP segment of a whole packet, if it is one and well-formed.
fn segment(frame: &[u8], l: &Layout) -> Option<Segment> {
    if l.upper_protocol != IpProtocol::Tcp || l.fragment != Fragment::Whole {
        return None;
    }
    let p = TcpPacket::new_checked(frame.get(l.upper_offset..l.ip_end)?).ok()?;
    let mut wscale = None;
    let mut opts = p.options();
    while !opts.is_empty() {
        let Ok((rest, opt)) = TcpOption::parse(opts) else {
            break;
        };
        match opt {
            TcpOption::WindowScale(s) => wscale = Some(s),
            TcpOption::EndOfList => break,
            _ => {}
        }
        opts = rest;
    }
    Some(Segment {
        seq: p.seq_number().0 as u32,
        ack_no: p.ack_number().0 as u32,
        syn: p.syn(),
        ack: p.ack(),
        fin: p.fin(),
        rst: p.rst(),
        window: p.window_len(),
        wscale,
        len: p.segment_len() as u32,
    })
}

/// `a` is after `b` in sequence space (RFC 793 §3.3, modulo 2^32).
const fn seq_gt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

/// An RST from the side `me` would be taken by `peer` (RFC 5961 §3.2,
/// loosely, as the proxy sees `peer`'s state only through its segments):
/// its sequence number is in the window `peer` last advertised (at least
/// 64 KiB), from the last acknowledgement `peer` sent (or, before any,
/// from the point `me` reached). An RST before `me` sent anything answers
/// `peer`'s SYN and must acknowledge it (RFC 793, SYN-SENT).
fn rst_acceptable(me: &Half, peer: &Half, seg: &Segment) -> bool {
    let Some(from) = peer.acked.or(me.nxt) else {
        return seg.ack && peer.nxt == Some(seg.ack_no);
    };
    let window = peer.window.max(u32::from(u16::MAX));
    seg.seq.wrapping_sub(from) <= window
}

/// (protocol, source port, destination port) of a whole TCP or UDP packet.
fn ports(frame: &[u8], l: &Layout) -> Option<(IpProtocol, u16, u16)> {
    if l.fragment == Fragment::Later
        || !matches!(l.upper_protocol, IpProtocol::Tcp | IpProtocol::Udp)
    {
        return None;
    }
    let h = frame.get(l.upper_offset..l.upper_offset + 8)?;
    Some((
        l.upper_protocol,
        u16::from_be_bytes([h[0], h[1]]),
        u16::from_be_bytes([h[2], h[3]]),
    ))
}

/// Set a TCP/UDP port, fixing the checksum incrementally (a zero UDP
/// checksum is left alone; one that becomes zero is sent as 0xffff).
fn set_port(frame: &mut [u8], side: Side, new: u16) -> Option<()> {
    let l = edit::walk(frame).ok()?;
    let at = l.upper_offset
        + match side {
            Side::Src => 0,
            Side::Dst => 2,
        };
    let (c, udp) = match l.upper_protocol {
        IpProtocol::Tcp => (l.upper_offset + 16, false),
        IpProtocol::Udp => (l.upper_offset + 6, true),
        _ => return None,
    };
    if frame.len() < c + 2 || frame.len() < at + 2 {
        return None;
    }
    let old = [frame[at], frame[at + 1]];
    let new = new.to_be_bytes();
    let sum = u16::from_be_bytes([frame[c], frame[c + 1]]);
    if !(udp && sum == 0) {
        let mut s = edit::checksum_update(sum, &old, &new);
        if udp && s == 0 {
            s = 0xffff;
        }
        frame[c..c + 2].copy_from_slice(&s.to_be_bytes());
    }
    frame[at..at + 2].copy_from_slice(&new);
    Some(())
}

fn addr(frame: &[u8], at: usize) -> Ipv6Addr {
    let mut a = [0; 16];
    a.copy_from_slice(&frame[at..at + 16]);
    Ipv6Addr::from(a)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    const SAG: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xbc, 0, 0, 0, 0, 0, 2);
    const SARI: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xa, 0, 0, 0, 0, 0, 1);
    const CLIENT: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xa, 0, 0, 0, 0, 0, 0x10);
    const SERVER: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xe, 0, 0, 0, 0, 0, 0x80);

    /// An Ethernet frame: IPv6 `src → dst`, optional Destination Options
    /// header with a ROSA option `rosa`, then a TCP SYN `sport → dport`
    /// with a correct checksum.
    pub(crate) fn tcp(
        src: Ipv6Addr,
        dst: Ipv6Addr,
        sport: u16,
        dport: u16,
        rosa: Option<&Message>,
    ) -> Vec<u8> {
        segment_frame(
            (src, sport),
            (dst, dport),
            &Seg {
                flags: SYN,
                seq: 0x0102_0304,
                ..Seg::default()
            },
            rosa,
        )
    }

    const FIN: u8 = 0x01;
    const SYN: u8 = 0x02;
    const RST: u8 = 0x04;
    const ACK: u8 = 0x10;

    /// A TCP segment of a test: flags, numbers, payload.
    #[derive(Debug, Clone, Default)]
    struct Seg {
        flags: u8,
        seq: u32,
        ack: u32,
        /// A Window Scale option.
        wscale: Option<u8>,
        /// The window field (0xffff when 0).
        window: u16,
        data: &'static [u8],
    }

    /// An Ethernet frame: IPv6 `src → dst`, optional ROSA option, then the
    /// TCP segment `s` (window 0xffff) with a correct checksum.
    fn segment_frame(
        (src, sport): (Ipv6Addr, u16),
        (dst, dport): (Ipv6Addr, u16),
        s: &Seg,
        rosa: Option<&Message>,
    ) -> Vec<u8> {
        let mut tcp = vec![0u8; 20];
        tcp[0..2].copy_from_slice(&sport.to_be_bytes());
        tcp[2..4].copy_from_slice(&dport.to_be_bytes());
        tcp[4..8].copy_from_slice(&s.seq.to_be_bytes());
        tcp[8..12].copy_from_slice(&s.ack.to_be_bytes());
        tcp[12] = 5 << 4;
        tcp[13] = s.flags;
        let window = if s.window == 0 { 0xffff } else { s.window };
        tcp[14..16].copy_from_slice(&window.to_be_bytes());
        if let Some(ws) = s.wscale {
            tcp[12] = 6 << 4;
            tcp.extend_from_slice(&[0x01, 0x03, 0x03, ws]); // NOP, Window Scale
        }
        tcp.extend_from_slice(s.data);
        let sum = l4_sum(src, dst, 6, &tcp);
        tcp[16..18].copy_from_slice(&sum.to_be_bytes());
        let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x86, 0xdd];
        f.extend_from_slice(&[0x60, 0, 0, 0]);
        f.extend_from_slice(&(tcp.len() as u16).to_be_bytes());
        f.extend_from_slice(&[6, 64]);
        f.extend_from_slice(&src.octets());
        f.extend_from_slice(&dst.octets());
        f.extend_from_slice(&tcp);
        if let Some(m) = rosa {
            let b = m.to_bytes().unwrap();
            let opt = OptionRepr::new(OptionType::Rosa, &b).unwrap();
            edit::insert_dest_opts(&mut f, &[opt]).unwrap();
        }
        f
    }

    fn l4_sum(src: Ipv6Addr, dst: Ipv6Addr, proto: u8, l4: &[u8]) -> u16 {
        let mut pseudo = Vec::new();
        pseudo.extend_from_slice(&src.octets());
        pseudo.extend_from_slice(&dst.octets());
        pseudo.extend_from_slice(&(l4.len() as u32).to_be_bytes());
        pseudo.extend_from_slice(&[0, 0, 0, proto]);
        pseudo.extend_from_slice(l4);
        !edit::ones_complement_sum(&pseudo, 0)
    }

    /// The TCP checksum of `frame` verifies.
    #[track_caller]
    fn assert_checksum_ok(frame: &[u8]) {
        let l = edit::walk(frame).unwrap();
        let src = addr(frame, l.ip_offset + 8);
        let dst = addr(frame, l.ip_offset + 24);
        assert_eq!(l4_sum(src, dst, 6, &frame[l.upper_offset..l.ip_end]), 0);
    }

    pub(crate) fn request_msg() -> Message {
        Message {
            kind: MessageKind::Request,
            entries: vec![
                Entry::Service("example.net".parse().unwrap()),
                Entry::Client(IpAddr::V6(CLIENT)),
                Entry::Ingress(IpAddr::V6(SARI)),
                Entry::Port(FlowPort {
                    proto: IpProtocol::Tcp,
                    port: 80,
                }),
            ],
        }
    }

    fn req() -> Request {
        Request {
            client: CLIENT,
            ingress: SARI,
            service: "example.net".parse().unwrap(),
            server: SERVER,
        }
    }

    fn t(s: u64) -> Instant {
        Instant::from_secs(s as i64)
    }

    #[test]
    fn the_whole_translation_golden_frames() {
        let mut p = Proxy::new(ProxyConfig::default(), SAG);
        // 1. The request, as the ingress SAR routed it to us.
        let mut f = tcp(SARI, SAG, 51000, 80, Some(&request_msg()));
        assert_eq!(p.request(t(0), &mut f, &req()), Verdict::Forward);
        assert_eq!(
            f,
            tcp(SAG, SERVER, 40000, 80, None),
            "to the server, option gone"
        );
        assert_checksum_ok(&f);

        // 2. The server's SYN-ACK: to the ingress with a Service Response,
        //    Instance = the SAG.
        let mut f = tcp(SERVER, SAG, 80, 40000, None);
        assert_eq!(p.plain(t(0), &mut f), Verdict::Forward);
        let resp = Message {
            kind: MessageKind::Response,
            entries: vec![
                Entry::Service("example.net".parse().unwrap()),
                Entry::Client(IpAddr::V6(CLIENT)),
                Entry::Ingress(IpAddr::V6(SARI)),
                Entry::Port(FlowPort {
                    proto: IpProtocol::Tcp,
                    port: 80,
                }),
                Entry::Instance(IpAddr::V6(SAG)),
            ],
        };
        assert_eq!(f, tcp(SAG, SARI, 80, 51000, Some(&resp)));
        assert_checksum_ok(&f);

        // 3. The client's direct packet (affinity): to the server.
        let mut f = tcp(CLIENT, SAG, 51000, 80, None);
        assert_eq!(p.plain(t(1), &mut f), Verdict::Forward);
        assert_eq!(f, tcp(SAG, SERVER, 40000, 80, None));

        // 4. Now the server's packets go straight to the client, plain.
        let mut f = tcp(SERVER, SAG, 80, 40000, None);
        assert_eq!(p.plain(t(1), &mut f), Verdict::Forward);
        assert_eq!(f, tcp(SAG, CLIENT, 80, 51000, None));
        assert_checksum_ok(&f);

        // Not ours: another source on the proxy port, an unknown client
        // port, our own traffic.
        let mut f = tcp(CLIENT, SAG, 80, 40000, None);
        assert_eq!(p.plain(t(1), &mut f), Verdict::NotOurs);
        let mut f = tcp(CLIENT, SAG, 51001, 80, None);
        assert_eq!(p.plain(t(1), &mut f), Verdict::NotOurs);
        assert_eq!(p.counters().get("sag.proxy_flow_opened"), Some(&1));
        assert_eq!(p.counters().get("sag.proxy_client_direct"), Some(&1));
    }

    #[test]
    fn retransmitted_request_keeps_its_flow_and_a_sag_ingress_answers_the_client() {
        let mut p = Proxy::new(ProxyConfig::default(), SAG);
        let r = Request {
            ingress: SAG,
            ..req()
        };
        for _ in 0..2 {
            let mut f = tcp(CLIENT, SAG, 51000, 80, Some(&request_msg()));
            assert_eq!(p.request(t(0), &mut f, &r), Verdict::Forward);
            assert_eq!(f, tcp(SAG, SERVER, 40000, 80, None));
        }
        assert_eq!(p.flows().count(), 1);
        let mut f = tcp(SERVER, SAG, 80, 40000, None);
        assert_eq!(p.plain(t(0), &mut f), Verdict::Forward);
        let l = edit::walk(&f).unwrap();
        assert!(l.dest_opts.is_some(), "the response option is there");
        assert_eq!(addr(&f, l.ip_offset + 24), CLIENT, "we are the ingress");
    }

    #[test]
    fn a_reused_client_port_for_another_service_is_refused_not_misrouted() {
        let mut p = Proxy::new(ProxyConfig::default(), SAG);
        let mut f = tcp(CLIENT, SAG, 51000, 80, Some(&request_msg()));
        assert_eq!(p.request(t(0), &mut f, &req()), Verdict::Forward);
        let other = Request {
            service: "other.example".parse().unwrap(),
            server: "fd00:e::81".parse().unwrap(),
            ..req()
        };
        let mut f = tcp(CLIENT, SAG, 51000, 80, Some(&request_msg()));
        let before = f.clone();
        assert_eq!(
            p.request(t(1), &mut f, &other),
            Verdict::Drop("drop.sag.proxy_key_clash")
        );
        assert_eq!(f, before, "left as it was");
        assert_eq!(p.flows().count(), 1);
    }

    #[test]
    fn cap_idle_expiry_and_port_reuse() {
        let cfg = ProxyConfig {
            max_flows: 2,
            idle: Duration::from_secs(10),
            port_min: 40000,
            port_max: 40001,
            ..ProxyConfig::default()
        };
        let mut p = Proxy::new(cfg, SAG);
        for cport in [1, 2] {
            let mut f = tcp(SARI, SAG, cport, 80, Some(&request_msg()));
            assert_eq!(p.request(t(0), &mut f, &req()), Verdict::Forward);
        }
        let mut f = tcp(SARI, SAG, 3, 80, Some(&request_msg()));
        assert_eq!(
            p.request(t(5), &mut f, &req()),
            Verdict::Drop("drop.sag.flows_full")
        );
        assert_eq!(p.poll_timeout(), Some(t(10)));
        // Idle flows make room: the third flow reuses a freed port.
        let mut f = tcp(SARI, SAG, 3, 80, Some(&request_msg()));
        assert_eq!(p.request(t(10), &mut f, &req()), Verdict::Forward);
        assert_eq!(p.flows().count(), 1);
        assert_eq!(p.counters().get("sag.proxy_flow_expired"), Some(&2));
        assert_eq!(p.counters().get("drop.sag.flows_full"), Some(&1));
        // The expired flow's server answer is no longer translated.
        let mut f = tcp(SERVER, SAG, 80, 40001, None);
        assert_eq!(p.plain(t(10), &mut f), Verdict::NotOurs);
    }

    #[test]
    fn short_frames_are_not_proxied() {
        let mut f = tcp(SARI, SAG, 1, 80, None);
        f.truncate(14 + 40 + 4); // TCP header cut short
        let mut p = Proxy::new(ProxyConfig::default(), SAG);
        assert_eq!(p.plain(t(0), &mut f), Verdict::NotOurs);
        assert!(matches!(p.request(t(0), &mut f, &req()), Verdict::Drop(_)));
    }

    // ---- TCP flows that end with their connection ------------------

    const CPORT: u16 = 51000;
    const ISN: u32 = 1000;
    const SISN: u32 = 5000;

    fn seg(flags: u8, seq: u32, ack: u32) -> Seg {
        Seg {
            flags,
            seq,
            ack,
            ..Seg::default()
        }
    }

    /// The client's plain segment `s` to the SAG, translated.
    fn from_client(p: &mut Proxy, now: Instant, s: Seg) -> Verdict {
        let mut f = segment_frame((CLIENT, CPORT), (SAG, 80), &s, None);
        p.plain(now, &mut f)
    }

    /// The server's segment `s` to proxy port `port`, translated.
    fn from_server(p: &mut Proxy, now: Instant, port: u16, s: Seg) -> Verdict {
        let mut f = segment_frame((SERVER, 80), (SAG, port), &s, None);
        p.plain(now, &mut f)
    }

    /// The client's SYN (initial sequence number `isn`) as a request.
    fn syn_request(p: &mut Proxy, now: Instant, isn: u32, r: &Request) -> Verdict {
        let mut f = segment_frame(
            (SARI, CPORT),
            (SAG, 80),
            &seg(SYN, isn, 0),
            Some(&request_msg()),
        );
        p.request(now, &mut f, r)
    }

    /// Handshake and one exchange of data (3 octets up, 5 down): the
    /// flow's proxy port. Client next sends `ISN + 4`, server `SISN + 6`.
    #[track_caller]
    fn established(p: &mut Proxy, now: Instant) -> u16 {
        assert_eq!(syn_request(p, now, ISN, &req()), Verdict::Forward);
        let port = p.flows().next().unwrap().proxy_port;
        let fwd = Verdict::Forward;
        assert_eq!(
            from_server(p, now, port, seg(SYN | ACK, SISN, ISN + 1)),
            fwd
        );
        assert_eq!(from_client(p, now, seg(ACK, ISN + 1, SISN + 1)), fwd);
        let get = Seg {
            data: b"GET",
            ..seg(ACK, ISN + 1, SISN + 1)
        };
        assert_eq!(from_client(p, now, get), fwd);
        let ok = Seg {
            data: b"200ok",
            ..seg(ACK, SISN + 1, ISN + 4)
        };
        assert_eq!(from_server(p, now, port, ok), fwd);
        assert_eq!(p.flows().next().unwrap().state, FlowState::Open);
        port
    }

    fn state(p: &Proxy) -> Option<FlowState> {
        p.flows().next().map(|f| f.state)
    }

    fn count(p: &Proxy, name: &str) -> u64 {
        p.counters().get(name).copied().unwrap_or(0)
    }

    #[test]
    fn a_tcp_flow_closes_after_both_fins_are_acknowledged_either_side_first() {
        for client_first in [true, false] {
            let mut p = Proxy::new(ProxyConfig::default(), SAG);
            let port = established(&mut p, t(0));
            let (c, s) = (ISN + 4, SISN + 6);
            let fwd = Verdict::Forward;
            if client_first {
                assert_eq!(from_client(&mut p, t(1), seg(FIN | ACK, c, s)), fwd);
                assert_eq!(state(&p), Some(FlowState::Open), "half closed");
                assert_eq!(from_server(&mut p, t(1), port, seg(ACK, s, c + 1)), fwd);
                assert_eq!(
                    from_server(&mut p, t(1), port, seg(FIN | ACK, s, c + 1)),
                    fwd
                );
                assert_eq!(state(&p), Some(FlowState::Open), "last ACK outstanding");
                assert_eq!(from_client(&mut p, t(2), seg(ACK, c + 1, s + 1)), fwd);
            } else {
                assert_eq!(from_server(&mut p, t(1), port, seg(FIN | ACK, s, c)), fwd);
                // The client's FIN acknowledges the server's in passing.
                assert_eq!(from_client(&mut p, t(1), seg(FIN | ACK, c, s + 1)), fwd);
                assert_eq!(state(&p), Some(FlowState::Open), "last ACK outstanding");
                assert_eq!(from_server(&mut p, t(2), port, seg(ACK, s + 1, c + 1)), fwd);
            }
            assert_eq!(state(&p), Some(FlowState::Closed(CloseCause::Fin)));
            assert_eq!(count(&p, "sag.proxy_flow_closed_fin"), 1);
            // A retransmitted FIN still translates, and restarts the linger.
            assert_eq!(
                from_server(&mut p, t(5), port, seg(FIN | ACK, s, c + 1)),
                fwd
            );
            assert_eq!(p.poll_timeout(), Some(t(5 + DEFAULT_LINGER_S)));
            p.expire(t(5 + DEFAULT_LINGER_S - 1));
            assert_eq!(p.flows().count(), 1, "lingering");
            p.expire(t(5 + DEFAULT_LINGER_S));
            assert_eq!(p.flows().count(), 0, "gone after the linger");
            assert_eq!(count(&p, "sag.proxy_flow_expired"), 0, "not an idle end");
            assert_eq!(count(&p, "sag.proxy_flow_closed_fin"), 1, "counted once");
            // Gone: nothing of it translates any more.
            let late = from_server(&mut p, t(30), port, seg(ACK, s + 1, c + 1));
            assert_eq!(late, Verdict::NotOurs);
            assert_eq!(
                from_client(&mut p, t(30), seg(ACK, c + 1, s + 1)),
                Verdict::NotOurs
            );
        }
    }

    #[test]
    fn a_rst_from_either_side_closes_the_flow_and_a_late_one_still_translates() {
        let (c, s) = (ISN + 4, SISN + 6);
        for client_resets in [true, false] {
            let mut p = Proxy::new(ProxyConfig::default(), SAG);
            let port = established(&mut p, t(0));
            let v = if client_resets {
                from_client(&mut p, t(1), seg(RST | ACK, c, s))
            } else {
                from_server(&mut p, t(1), port, seg(RST, s, 0))
            };
            assert_eq!(v, Verdict::Forward, "the RST itself is translated");
            assert_eq!(state(&p), Some(FlowState::Closed(CloseCause::Rst)));
            // A late RST (the other side's answer to a segment in flight).
            let late = if client_resets {
                from_server(&mut p, t(2), port, seg(RST, s, 0))
            } else {
                from_client(&mut p, t(2), seg(RST, c, 0))
            };
            assert_eq!(late, Verdict::Forward);
            assert_eq!(count(&p, "sag.proxy_flow_closed_rst"), 1);
            p.expire(t(2 + DEFAULT_LINGER_S));
            assert_eq!(p.flows().count(), 0);
        }
    }

    #[test]
    fn a_rst_out_of_the_window_or_before_an_answer_does_not_end_the_flow() {
        let mut p = Proxy::new(ProxyConfig::default(), SAG);
        let port = established(&mut p, t(0));
        // A blind RST far from where the server is.
        let blind = from_server(&mut p, t(1), port, seg(RST, SISN + 0x1000_0000, 0));
        assert_eq!(
            blind,
            Verdict::Forward,
            "the endpoint decides; we only watch"
        );
        assert_eq!(state(&p), Some(FlowState::Open));
        assert_eq!(count(&p, "sag.proxy_rst_ignored"), 1);
        // One from before where the client's last ACK says it is.
        let early = from_server(&mut p, t(1), port, seg(RST, SISN, 0));
        assert_eq!(early, Verdict::Forward);
        assert_eq!(state(&p), Some(FlowState::Open));
        assert_eq!(count(&p, "sag.proxy_rst_ignored"), 2);
        // One at the client's RCV.NXT, though the server's last 5 octets
        // are not acknowledged yet: taken.
        let taken = from_server(&mut p, t(1), port, seg(RST, SISN + 1, 0));
        assert_eq!(taken, Verdict::Forward);
        assert_eq!(state(&p), Some(FlowState::Closed(CloseCause::Rst)));
        // A server refusing the SYN: RST+ACK acknowledging it closes.
        let mut p = Proxy::new(ProxyConfig::default(), SAG);
        assert_eq!(syn_request(&mut p, t(0), ISN, &req()), Verdict::Forward);
        let wrong = from_server(&mut p, t(0), 40000, seg(RST | ACK, 0, ISN + 7));
        assert_eq!(wrong, Verdict::Forward);
        assert_eq!(
            state(&p),
            Some(FlowState::Open),
            "does not acknowledge the SYN"
        );
        let refused = from_server(&mut p, t(0), 40000, seg(RST | ACK, 0, ISN + 1));
        assert_eq!(refused, Verdict::Forward);
        assert_eq!(state(&p), Some(FlowState::Closed(CloseCause::Rst)));
    }

    #[test]
    fn the_rst_window_is_scaled_only_when_both_syns_offer_it() {
        for (client_ws, accepted) in [(Some(7), true), (None, false)] {
            let mut p = Proxy::new(ProxyConfig::default(), SAG);
            let mut f = segment_frame(
                (SARI, CPORT),
                (SAG, 80),
                &Seg {
                    wscale: client_ws,
                    ..seg(SYN, ISN, 0)
                },
                Some(&request_msg()),
            );
            assert_eq!(p.request(t(0), &mut f, &req()), Verdict::Forward);
            let synack = Seg {
                wscale: Some(7),
                ..seg(SYN | ACK, SISN, ISN + 1)
            };
            assert_eq!(from_server(&mut p, t(0), 40000, synack), Verdict::Forward);
            // The client advertises 0x1000 << 7 = 512 KiB, if scaled.
            let ack = Seg {
                window: 0x1000,
                ..seg(ACK, ISN + 1, SISN + 1)
            };
            assert_eq!(from_client(&mut p, t(0), ack), Verdict::Forward);
            let far = from_server(&mut p, t(1), 40000, seg(RST, SISN + 1 + 300_000, 0));
            assert_eq!(far, Verdict::Forward);
            let closed = state(&p) == Some(FlowState::Closed(CloseCause::Rst));
            assert_eq!(closed, accepted, "client window scale {client_ws:?}");
        }
    }

    #[test]
    fn data_after_the_close_translates_while_lingering_then_is_not_ours() {
        let mut p = Proxy::new(ProxyConfig::default(), SAG);
        let port = established(&mut p, t(0));
        let (c, s) = (ISN + 4, SISN + 6);
        assert_eq!(from_client(&mut p, t(1), seg(RST, c, 0)), Verdict::Forward);
        let data = Seg {
            data: b"more",
            ..seg(ACK, c, s)
        };
        assert_eq!(from_client(&mut p, t(2), data.clone()), Verdict::Forward);
        assert_eq!(
            state(&p),
            Some(FlowState::Closed(CloseCause::Rst)),
            "data does not reopen a closed flow"
        );
        p.expire(t(2 + DEFAULT_LINGER_S));
        // To the SAG's own stack, which resets it.
        assert_eq!(from_client(&mut p, t(20), data), Verdict::NotOurs);
        assert_eq!(
            from_server(&mut p, t(20), port, seg(ACK, s, c)),
            Verdict::NotOurs
        );
    }

    #[test]
    fn a_new_syn_on_a_closed_flow_opens_a_new_one_even_for_another_service() {
        let mut p = Proxy::new(ProxyConfig::default(), SAG);
        let port = established(&mut p, t(0));
        assert_eq!(port, 40000);
        let (c, s) = (ISN + 4, SISN + 6);
        assert_eq!(from_client(&mut p, t(1), seg(RST, c, s)), Verdict::Forward);
        // The first SYN again (a stray retransmission): the same flow.
        assert_eq!(syn_request(&mut p, t(2), ISN, &req()), Verdict::Forward);
        assert_eq!(p.flows().count(), 1);
        assert_eq!(state(&p), Some(FlowState::Closed(CloseCause::Rst)));
        // A new connection from the same port to another service: a new
        // flow on the next proxy port, not a key clash.
        let other = Request {
            service: "other.example".parse().unwrap(),
            server: "fd00:e::81".parse().unwrap(),
            ..req()
        };
        assert_eq!(
            syn_request(&mut p, t(3), ISN + 9999, &other),
            Verdict::Forward
        );
        let flows: Vec<&Flow> = p.flows().collect();
        assert_eq!(flows.len(), 1, "the closed flow is replaced");
        assert_eq!(flows[0].proxy_port, 40001);
        assert_eq!(flows[0].state, FlowState::Open);
        assert_eq!(flows[0].server, other.server);
        assert_eq!(count(&p, "sag.proxy_flow_reopened"), 1);
        assert_eq!(count(&p, "drop.sag.proxy_key_clash"), 0);
        assert_eq!(count(&p, "sag.proxy_flow_opened"), 2);
        // The old proxy port is free: the old server's answers are not ours.
        assert_eq!(
            from_server(&mut p, t(3), port, seg(ACK, s, c)),
            Verdict::NotOurs
        );
        // While the new flow is open, another service on the port clashes.
        assert_eq!(
            syn_request(&mut p, t(4), ISN + 20000, &req()),
            Verdict::Drop("drop.sag.proxy_key_clash")
        );
    }

    #[test]
    fn a_closed_flows_port_is_reused_and_its_linger_is_cut_at_the_cap() {
        let cfg = ProxyConfig {
            max_flows: 1,
            port_min: 40000,
            port_max: 40000,
            ..ProxyConfig::default()
        };
        let mut p = Proxy::new(cfg, SAG);
        let port = established(&mut p, t(0));
        assert_eq!(
            from_client(&mut p, t(1), seg(RST, ISN + 4, 0)),
            Verdict::Forward
        );
        // Another client port at the cap: the lingering flow makes room,
        // and its port (the only one) serves the new flow.
        let mut f = segment_frame(
            (SARI, CPORT + 1),
            (SAG, 80),
            &seg(SYN, 77, 0),
            Some(&request_msg()),
        );
        assert_eq!(p.request(t(2), &mut f, &req()), Verdict::Forward);
        let flows: Vec<&Flow> = p.flows().collect();
        assert_eq!(flows.len(), 1);
        assert_eq!(
            (flows[0].proxy_port, flows[0].key.client_port),
            (port, CPORT + 1)
        );
        assert_eq!(count(&p, "sag.proxy_flow_linger_cut"), 1);
        // An open flow is never cut: the next one is refused.
        let mut f = segment_frame(
            (SARI, CPORT + 2),
            (SAG, 80),
            &seg(SYN, 88, 0),
            Some(&request_msg()),
        );
        assert_eq!(
            p.request(t(3), &mut f, &req()),
            Verdict::Drop("drop.sag.flows_full")
        );
    }

    #[test]
    fn udp_flows_end_by_idle_only() {
        let mut p = Proxy::new(ProxyConfig::default(), SAG);
        let mut f = tcp(SARI, SAG, CPORT, 53, Some(&request_msg()));
        // Make it UDP: next header 17, an 8-octet header with no checksum.
        let l = edit::walk(&f).unwrap();
        f[l.protocol_at] = 17;
        f.truncate(l.upper_offset + 8);
        let len = (f.len() - l.ip_offset - 40) as u16;
        f[l.ip_offset + 4..l.ip_offset + 6].copy_from_slice(&len.to_be_bytes());
        f[l.upper_offset + 4..l.upper_offset + 6].copy_from_slice(&8u16.to_be_bytes());
        f[l.upper_offset + 6..l.upper_offset + 8].copy_from_slice(&[0, 0]);
        assert_eq!(p.request(t(0), &mut f, &req()), Verdict::Forward);
        assert_eq!(state(&p), Some(FlowState::Open));
        assert_eq!(p.poll_timeout(), Some(t(120)));
        p.expire(t(120));
        assert_eq!(p.flows().count(), 0);
        assert_eq!(count(&p, "sag.proxy_flow_expired"), 1);
    }
}
