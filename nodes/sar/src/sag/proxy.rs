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
//! port is unique per protocol among live flows. Flows idle for `idle` are
//! forgotten; at `max_flows` idle ones go first, else the new flow is
//! refused (`drop.sag.flows_full`). Addresses are changed with
//! [`edit::rewrite_addr`], ports with an RFC 1624 update of the TCP/UDP
//! checksum ([`edit::checksum_update`]), so every checksum stays valid
//! without being recomputed.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};

use smoltcp::time::{Duration, Instant};
use smoltcp::wire::IpProtocol;
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
            port_min: 40_000,
            port_max: 59_999,
        }
    }
}

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
/// the SAG, [`Self::expire`] at [`Self::poll_timeout`].
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
        if let Some(f) = self.flows.get(&(proto, dport)) {
            if f.server == src && f.key.service_port == sport {
                let v = self.server_to_client(now, frame, proto, dport);
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
            return self.count(v, "sag.proxy_to_server");
        }
        Verdict::NotOurs
    }

    /// Forget flows idle for the configured time.
    pub fn expire(&mut self, now: Instant) {
        let idle = self.cfg.idle;
        let before = self.flows.len();
        let by_client = &mut self.by_client;
        self.flows.retain(|_, f| {
            let keep = f.last + idle > now;
            if !keep {
                by_client.remove(&f.key);
            }
            keep
        });
        self.tally
            .add("sag.proxy_flow_expired", (before - self.flows.len()) as u64);
    }

    /// When the next flow goes idle.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.flows.values().map(|f| f.last + self.cfg.idle).min()
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
        Verdict::Forward
    }

    fn open(&mut self, now: Instant, key: ClientKey, req: &Request) -> Option<u16> {
        if self.flows.len() >= self.cfg.max_flows {
            self.expire(now);
            if self.flows.len() >= self.cfg.max_flows {
                return None;
            }
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Src,
    Dst,
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
        let mut tcp = vec![0u8; 20];
        tcp[0..2].copy_from_slice(&sport.to_be_bytes());
        tcp[2..4].copy_from_slice(&dport.to_be_bytes());
        tcp[4..8].copy_from_slice(&0x0102_0304u32.to_be_bytes());
        tcp[12] = 5 << 4;
        tcp[13] = 0x02; // SYN
        tcp[14..16].copy_from_slice(&0xffffu16.to_be_bytes());
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
}
