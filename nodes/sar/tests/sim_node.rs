//! Four `sar` nodes in the simulator, with smoltcp endpoints around them: a
//! client that reaches a service by name (a ROSA Service Request on its TCP
//! SYN), an instance that announces itself (HMAC-signed) and answers with a
//! Service Response, and a rogue that forges announcements.
//!
//! ```text
//!                          seg1 (cost 10)          seg2 (cost 10)
//!   C ── seg0 ── SAR1 ───────────────── SAR2 ───────────────── SAR3 ── seg3 ── I, R
//!   fd00::a      │  fd00:0:0:1::1/::2                fd00:0:0:2::2/::3  │      fd00:0:0:3::14 (I)
//!                │ seg4 (cost 20)                         seg5 (cost 20) │      fd00:0:0:3::42 (R)
//!                └──────────────────────── SAR4 ──────────────────────────┘
//! ```
//!
//! Addresses: host `h` on segment `s` is `fd00:0:0:s::h` with MAC
//! `02:00:00:00:s:h` (`sim::port`). Each SAR's own address is its
//! first port's. The client's transport talks to a virtual address `V` for
//! the service; its shim (in this file) sends the first packets to SAR1
//! with a Request and, once a Response names the instance, goes straight
//! there — SPEC §2.2 in miniature, so the SARs are tested against a peer
//! they did not write.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv6Addr};

use smoltcp::iface::SocketHandle;
use smoltcp::socket::{icmp, tcp, udp};
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{
    EthernetAddress, Icmpv6Packet, Icmpv6Repr, IpAddress, IpEndpoint, IpListenEndpoint, IpProtocol,
};
use svcroute_sar::igp::NeighborState;
use svcroute_sar::{SarConfig, SarNode};
use svcroute_stack::runtime::{Context, FrameContext, Node, PortConfig, Role};
use svcroute_stack::shim::edit::{self, AddrField};
use svcroute_stack::shim::{Direction, Verdict};
use svcroute_stack::sim::{self, NodeId, SegmentConfig, SegmentId, Sim, SimLink, SimPort};
use svcroute_stack::wire::igp::RouterId;
use svcroute_stack::wire::ipv6opt::{self, OptionRepr, OptionType};
use svcroute_stack::wire::rosa::{
    Constraint, Constraints, Entry, FlowPort, Message, MessageKind, ServiceName,
};

const SERVICE: &str = "svc.example/echo";
const KEY: &str = "000102030405060708090a0b0c0d0e0f";
const WRONG_KEY: &str = "ffeeddccbbaa99887766554433221100";
mod frames;
use frames::{insert_rosa, ipv6_addrs, ports_of, rosa_of};

const ETH: usize = 14;

type SarId = NodeId<Node<SimLink, SarNode>>;
type ClientId = NodeId<Node<SimLink, Client>>;
type InstanceId = NodeId<Node<SimLink, Instance>>;

fn a(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

fn v6(seg: u8, host: u8) -> Ipv6Addr {
    sim::ipv6(seg, host)
}

fn secret(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

/// The virtual address the client's transport uses for the service.
fn vaddr() -> Ipv6Addr {
    a("fd5e::1")
}

// ---- frame helpers -----------------------------------------------------

/// An announcement frame from `src` (MAC `mac`) to its SAR at `sar`
/// (MAC `sar_mac`), signed with `key` (hex).
fn announcement(
    mac: EthernetAddress,
    sar_mac: EthernetAddress,
    src: Ipv6Addr,
    sar: Ipv6Addr,
    service: &str,
    key: &str,
) -> Vec<u8> {
    let mut msg = Message {
        kind: MessageKind::Announcement,
        entries: vec![
            Entry::Service(service.parse().unwrap()),
            Entry::Constraint(Constraints(vec![Constraint::LifetimeS(30)])),
        ],
    };
    msg.sign(1, &secret(key), src).unwrap();
    let bytes = msg.to_bytes().unwrap();
    let opts = [OptionRepr::new(OptionType::Rosa, &bytes).unwrap()];
    let header = ipv6opt::Repr::new(IpProtocol::Ipv6NoNxt, &opts).unwrap();
    let mut f = vec![0; ETH + 40 + header.buffer_len()];
    f[0..6].copy_from_slice(&sar_mac.0);
    f[6..12].copy_from_slice(&mac.0);
    f[12..14].copy_from_slice(&[0x86, 0xdd]);
    f[ETH] = 0x60;
    f[ETH + 4..ETH + 6].copy_from_slice(&(header.buffer_len() as u16).to_be_bytes());
    f[ETH + 6] = 60;
    f[ETH + 7] = 64;
    f[ETH + 8..ETH + 24].copy_from_slice(&src.octets());
    f[ETH + 24..ETH + 40].copy_from_slice(&sar.octets());
    header.emit(&mut ipv6opt::Packet::new_unchecked(&mut f[ETH + 40..]));
    f
}

fn udp_socket(port: u16) -> udp::Socket<'static> {
    let buf = || udp::PacketBuffer::new(vec![udp::PacketMetadata::EMPTY; 8], vec![0; 8192]);
    let mut s = udp::Socket::new(buf(), buf());
    s.bind(port).unwrap();
    s
}

fn tcp_socket() -> tcp::Socket<'static> {
    tcp::Socket::new(
        tcp::SocketBuffer::new(vec![0; 4096]),
        tcp::SocketBuffer::new(vec![0; 4096]),
    )
}

// ---- the client --------------------------------------------------------

/// What the client saw of one TCP flow.
#[derive(Debug, Default)]
struct Flow {
    handle: Option<SocketHandle>,
    /// The Service Response that bound it.
    response: Option<(Ipv6Addr, Message)>,
    /// The instance it is bound to.
    instance: Option<Ipv6Addr>,
    sent: bool,
    echoed: Vec<u8>,
    /// Plain packets straight from the instance (affinity).
    direct_in: usize,
    /// Packets sent with a Request.
    requests_out: usize,
}

/// A client host: TCP flows to the service's virtual address, a UDP socket
/// and an echo socket for plain IPv6, and a small ROSA shim.
struct Client {
    ingress: Ipv6Addr,
    service: ServiceName,
    flows: BTreeMap<u16, Flow>,
    udp: Option<SocketHandle>,
    icmp: Option<SocketHandle>,
    /// Datagrams to send: (destination, hop limit, payload length).
    udp_out: Vec<(IpAddress, u8, usize)>,
    pings: Vec<Ipv6Addr>,
    pongs: Vec<Ipv6Addr>,
    /// ICMPv6 errors received: (source, type, code).
    errors: Vec<(Ipv6Addr, u8, u8)>,
}

impl Client {
    fn new(ingress: Ipv6Addr) -> Self {
        Self {
            ingress,
            service: SERVICE.parse().unwrap(),
            flows: BTreeMap::new(),
            udp: None,
            icmp: None,
            udp_out: Vec::new(),
            pings: Vec::new(),
            pongs: Vec::new(),
            errors: Vec::new(),
        }
    }

    fn connect(&mut self, sport: u16) {
        self.flows.insert(sport, Flow::default());
    }

    fn flow(&self, sport: u16) -> &Flow {
        &self.flows[&sport]
    }
}

impl Role for Client {
    fn name(&self) -> &'static str {
        "client"
    }

    fn start(&mut self, cx: &mut Context<'_>) {
        let p = &mut cx.ports[0];
        self.udp = Some(p.sockets.add(udp_socket(5000)));
        let buf = || icmp::PacketBuffer::new(vec![icmp::PacketMetadata::EMPTY; 8], vec![0; 4096]);
        let mut s = icmp::Socket::new(buf(), buf());
        s.bind(icmp::Endpoint::Ident(0x5a5a)).unwrap();
        self.icmp = Some(p.sockets.add(s));
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> bool {
        let mut any = false;
        let p = &mut cx.ports[0];
        for (sport, f) in &mut self.flows {
            let h = *f.handle.get_or_insert_with(|| {
                any = true;
                let mut s = tcp_socket();
                s.connect(
                    p.iface.context(),
                    IpEndpoint::new(IpAddress::Ipv6(vaddr()), 80),
                    *sport,
                )
                .unwrap();
                p.sockets.add(s)
            });
            let s = p.sockets.get_mut::<tcp::Socket>(h);
            if s.may_send() && !f.sent {
                s.send_slice(format!("hello {sport}").as_bytes()).unwrap();
                f.sent = true;
                any = true;
            }
            while s.can_recv() {
                s.recv(|b| {
                    f.echoed.extend_from_slice(b);
                    (b.len(), ())
                })
                .unwrap();
                any = true;
            }
        }
        if let Some(h) = self.udp {
            let s = p.sockets.get_mut::<udp::Socket>(h);
            for (dst, hops, len) in self.udp_out.drain(..) {
                s.set_hop_limit(Some(hops));
                s.send_slice(&vec![0x5a; len], (dst, 7)).unwrap();
                any = true;
            }
        }
        if let Some(h) = self.icmp {
            let s = p.sockets.get_mut::<icmp::Socket>(h);
            for dst in self.pings.drain(..) {
                let repr = Icmpv6Repr::EchoRequest {
                    ident: 0x5a5a,
                    seq_no: 1,
                    data: b"ping",
                };
                let buf = s.send(repr.buffer_len(), IpAddress::Ipv6(dst)).unwrap();
                let src = p.iface.ipv6_addr().unwrap();
                repr.emit(
                    &src,
                    &dst,
                    &mut Icmpv6Packet::new_unchecked(buf),
                    &Default::default(),
                );
                any = true;
            }
            while let Ok((data, from)) = s.recv() {
                if data.first() == Some(&129) {
                    if let IpAddress::Ipv6(f) = from {
                        self.pongs.push(f);
                    }
                }
                any = true;
            }
        }
        any
    }

    fn poll_at(&self, now: Instant) -> Option<Instant> {
        let idle = self.udp_out.is_empty()
            && self.pings.is_empty()
            && self.flows.values().all(|f| f.handle.is_some());
        (!idle).then_some(now)
    }

    fn egress(&mut self, _cx: &mut FrameContext<'_>, _port: usize, frame: &mut Vec<u8>) -> Verdict {
        let Some((_, dst)) = ipv6_addrs(frame) else {
            return Verdict::Pass;
        };
        if dst != vaddr() {
            return Verdict::Pass;
        }
        let Some((proto, sport, dport)) = ports_of(frame) else {
            return Verdict::Drop("client_not_a_flow");
        };
        let Some(flow) = self.flows.get_mut(&sport) else {
            return Verdict::Drop("client_unknown_flow");
        };
        match flow.instance {
            Some(i) => {
                edit::rewrite_addr(frame, AddrField::Dst, IpAddr::V6(i)).unwrap();
            }
            None => {
                edit::rewrite_addr(frame, AddrField::Dst, IpAddr::V6(self.ingress)).unwrap();
                let req = Message {
                    kind: MessageKind::Request,
                    entries: vec![
                        Entry::Service(self.service.clone()),
                        Entry::Port(FlowPort { proto, port: dport }),
                    ],
                };
                insert_rosa(frame, &req);
                flow.requests_out += 1;
            }
        }
        Verdict::Pass
    }

    fn ingress(
        &mut self,
        _cx: &mut FrameContext<'_>,
        _port: usize,
        frame: &mut Vec<u8>,
    ) -> Verdict {
        let Some((src, _)) = ipv6_addrs(frame) else {
            return Verdict::Pass;
        };
        if let Ok(layout) = edit::walk(frame) {
            if layout.upper_protocol == IpProtocol::Icmpv6 {
                let t = frame[layout.upper_offset];
                if t < 128 {
                    self.errors.push((src, t, frame[layout.upper_offset + 1]));
                }
            }
        }
        if let Some(msg) = rosa_of(frame) {
            edit::strip_dest_opts(frame).unwrap();
            if msg.kind == MessageKind::Response {
                let dport = msg.port().map(|p| p.port);
                if let Some((_, _, cport)) = ports_of(frame) {
                    if let Some(flow) = self.flows.get_mut(&cport) {
                        if dport == Some(80) {
                            flow.instance = msg.instance().and_then(|i| match i {
                                IpAddr::V6(i) => Some(i),
                                IpAddr::V4(_) => None,
                            });
                            flow.response = Some((src, msg));
                            edit::rewrite_addr(frame, AddrField::Src, IpAddr::V6(vaddr())).unwrap();
                        }
                    }
                }
            }
            return Verdict::Pass;
        }
        if let Some((_, _, cport)) = ports_of(frame) {
            if let Some(flow) = self.flows.get_mut(&cport) {
                if flow.instance == Some(src) {
                    flow.direct_in += 1;
                    edit::rewrite_addr(frame, AddrField::Src, IpAddr::V6(vaddr())).unwrap();
                }
            }
        }
        Verdict::Pass
    }
}

// ---- the instance ------------------------------------------------------

/// What the instance keeps of one client flow.
#[derive(Debug, Clone)]
struct Served {
    request: Message,
    /// The client's first plain packet arrived: answer directly.
    direct: bool,
    direct_in: usize,
}

/// A service instance: announces itself to its SAR, echoes TCP on port 80,
/// answers requests with a Service Response until the client goes direct.
/// `key` signs its announcements (a rogue uses the wrong one).
struct Instance {
    mac: EthernetAddress,
    addr: Ipv6Addr,
    sar: Ipv6Addr,
    sar_mac: EthernetAddress,
    service: String,
    /// More names announced with the same instance.
    more: Vec<String>,
    key: &'static str,
    next_announce: Instant,
    listeners: Vec<SocketHandle>,
    served: BTreeMap<(Ipv6Addr, u16), Served>,
    requests_in: usize,
}

impl Instance {
    fn new(seg: u8, host: u8, sar_host: u8, service: &str, key: &'static str) -> Self {
        Self {
            mac: sim::mac(seg, host),
            addr: v6(seg, host),
            sar: v6(seg, sar_host),
            sar_mac: sim::mac(seg, sar_host),
            service: service.into(),
            more: Vec::new(),
            key,
            next_announce: Instant::ZERO,
            listeners: Vec::new(),
            served: BTreeMap::new(),
            requests_in: 0,
        }
    }
}

impl Role for Instance {
    fn name(&self) -> &'static str {
        "instance"
    }

    fn start(&mut self, _cx: &mut Context<'_>) {}

    fn poll(&mut self, cx: &mut Context<'_>) -> bool {
        let mut any = false;
        if cx.now >= self.next_announce {
            for name in std::iter::once(&self.service).chain(&self.more) {
                let f = announcement(self.mac, self.sar_mac, self.addr, self.sar, name, self.key);
                cx.out.inject(0, Direction::ToWire, f);
            }
            self.next_announce = cx.now + Duration::from_secs(10);
            any = true;
        }
        let p = &mut cx.ports[0];
        // Keep two listeners armed; echo whatever arrives.
        self.listeners
            .retain(|h| p.sockets.get::<tcp::Socket>(*h).state() != tcp::State::Closed);
        let listening = self
            .listeners
            .iter()
            .filter(|h| p.sockets.get::<tcp::Socket>(**h).state() == tcp::State::Listen)
            .count();
        for _ in listening..2 {
            let mut s = tcp_socket();
            s.listen(IpListenEndpoint::from(80)).unwrap();
            self.listeners.push(p.sockets.add(s));
            any = true;
        }
        for h in &self.listeners {
            let s = p.sockets.get_mut::<tcp::Socket>(*h);
            while s.can_recv() && s.can_send() {
                let data = s.recv(|b| (b.len(), b.to_vec())).unwrap();
                s.send_slice(&data).unwrap();
                any = true;
            }
        }
        any
    }

    fn poll_at(&self, _now: Instant) -> Option<Instant> {
        Some(self.next_announce)
    }

    fn ingress(
        &mut self,
        _cx: &mut FrameContext<'_>,
        _port: usize,
        frame: &mut Vec<u8>,
    ) -> Verdict {
        let Some((src, _)) = ipv6_addrs(frame) else {
            return Verdict::Pass;
        };
        if let Some(msg) = rosa_of(frame) {
            edit::strip_dest_opts(frame).unwrap();
            if msg.kind != MessageKind::Request {
                return Verdict::Drop("instance_not_a_request");
            }
            let Some(IpAddr::V6(client)) = msg.client() else {
                return Verdict::Drop("instance_no_client");
            };
            let Some((_, sport, _)) = ports_of(frame) else {
                return Verdict::Drop("instance_not_a_flow");
            };
            self.requests_in += 1;
            edit::rewrite_addr(frame, AddrField::Src, IpAddr::V6(client)).unwrap();
            self.served.entry((client, sport)).or_insert(Served {
                request: msg,
                direct: false,
                direct_in: 0,
            });
            return Verdict::Pass;
        }
        if let Some((_, sport, _)) = ports_of(frame) {
            if let Some(s) = self.served.get_mut(&(src, sport)) {
                s.direct = true;
                s.direct_in += 1;
            }
        }
        Verdict::Pass
    }

    fn egress(&mut self, _cx: &mut FrameContext<'_>, _port: usize, frame: &mut Vec<u8>) -> Verdict {
        let (Some((_, dst)), Some((_, _, dport))) = (ipv6_addrs(frame), ports_of(frame)) else {
            return Verdict::Pass;
        };
        let Some(s) = self.served.get(&(dst, dport)) else {
            return Verdict::Pass;
        };
        if s.direct {
            return Verdict::Pass;
        }
        let r = &s.request;
        let mut entries = vec![Entry::Client(IpAddr::V6(dst))];
        entries.extend(r.ingress().map(Entry::Ingress));
        entries.extend(r.service().cloned().map(Entry::Service));
        entries.extend(r.port().map(Entry::Port));
        entries.push(Entry::Instance(IpAddr::V6(self.addr)));
        let resp = Message {
            kind: MessageKind::Response,
            entries,
        };
        edit::rewrite_addr(frame, AddrField::Dst, IpAddr::V6(self.sar)).unwrap();
        insert_rosa(frame, &resp);
        Verdict::Pass
    }
}

// ---- the topology ------------------------------------------------------

struct World {
    sim: Sim,
    sars: Vec<SarId>,
    client: ClientId,
    instance: InstanceId,
    rogue: InstanceId,
    seg1_ports: (SimPort, SimPort),
}

/// `[sar]` of a SAR whose neighbours are (port, segment, host, cost).
fn sar_config(id: u32, neighbors: &[(usize, u8, u8, u32)], extra: &str) -> SarConfig {
    let mut text = format!(
        "router_id = {id}\nannounce_keys = [{{ key_id = 1, secret = \"{KEY}\" }}]\n\
         igp_key = {{ key_id = 7, secret = \"{KEY}\" }}\n{extra}\n"
    );
    for (port, seg, host, cost) in neighbors {
        text.push_str(&format!(
            "[[neighbors]]\nport = {port}\naddr = \"{}\"\ncost = {cost}\n",
            v6(*seg, *host)
        ));
    }
    toml::from_str(&text).unwrap()
}

fn add_sar(
    sim: &mut Sim,
    name: &str,
    segs: &[(SegmentId, u8)],
    cfg: &SarConfig,
) -> (SarId, Vec<SimPort>) {
    let ports: Vec<(PortConfig, SimLink)> = segs.iter().map(|(s, h)| sim.port(*s, *h)).collect();
    let sim_ports = ports.iter().map(|(_, l)| l.port()).collect();
    let cfgs: Vec<PortConfig> = ports.iter().map(|(c, _)| c.clone()).collect();
    let role = SarNode::new(name, cfg, &cfgs).unwrap();
    (sim.add_role(name, ports, role), sim_ports)
}

fn world() -> World {
    let mut sim = Sim::new(7);
    let segs: Vec<SegmentId> = (0..6)
        .map(|_| sim.add_segment(SegmentConfig::default()))
        .collect();
    let (s1, s1p) = add_sar(
        &mut sim,
        "sar1",
        &[(segs[0], 1), (segs[1], 1), (segs[4], 1)],
        &sar_config(1, &[(1, 1, 2, 10), (2, 4, 4, 20)], ""),
    );
    let (s2, s2p) = add_sar(
        &mut sim,
        "sar2",
        &[(segs[1], 2), (segs[2], 2)],
        &sar_config(2, &[(0, 1, 1, 10), (1, 2, 3, 10)], "mtu = 1400"),
    );
    let (s3, _) = add_sar(
        &mut sim,
        "sar3",
        &[(segs[2], 3), (segs[3], 3), (segs[5], 3)],
        &sar_config(
            3,
            &[(0, 2, 2, 10), (2, 5, 4, 20)],
            "sag = \"fd00:0:0:3::99\"",
        ),
    );
    let (s4, _) = add_sar(
        &mut sim,
        "sar4",
        &[(segs[4], 4), (segs[5], 4)],
        &sar_config(4, &[(0, 4, 1, 20), (1, 5, 3, 20)], ""),
    );
    // The client: gateway SAR1 for IPv6 (the virtual prefix included) and IPv4.
    let (mut c, link) = sim.port(segs[0], 10);
    c.gateways = vec![IpAddress::Ipv6(v6(0, 1)), IpAddress::Ipv4(sim::ipv4(0, 1))];
    let client = sim.add_role("client", vec![(c, link)], Client::new(v6(0, 1)));
    let (mut i, link) = sim.port(segs[3], 20);
    i.gateways = vec![IpAddress::Ipv6(v6(3, 3))];
    let instance = sim.add_role(
        "instance",
        vec![(i, link)],
        Instance::new(3, 20, 3, SERVICE, KEY),
    );
    let (mut r, link) = sim.port(segs[3], 66);
    r.gateways = vec![IpAddress::Ipv6(v6(3, 3))];
    let mut rogue = Instance::new(3, 66, 3, SERVICE, WRONG_KEY);
    rogue.next_announce = Instant::from_secs(3);
    let rogue = sim.add_role("rogue", vec![(r, link)], rogue);
    World {
        sim,
        sars: vec![s1, s2, s3, s4],
        client,
        instance,
        rogue,
        seg1_ports: (s1p[1], s2p[0]),
    }
}

impl World {
    fn sar(&self, i: usize) -> &SarNode {
        self.sim.node(self.sars[i]).role()
    }

    fn stat(&self, i: usize, name: &str) -> u64 {
        self.sim.node(self.sars[i]).stats().get(name)
    }

    fn client(&mut self) -> &mut Client {
        self.sim.node_mut(self.client).role_mut()
    }

    fn client_ref(&self) -> &Client {
        self.sim.node(self.client).role()
    }

    /// Every SAR has a route to every other and all LSDBs are equal.
    fn converged(&self) -> bool {
        let now = self.sim.now();
        let digests: Vec<Option<u64>> = (0..4)
            .map(|i| self.sar(i).core().map(|c| c.igp().lsdb_digest(now)))
            .collect();
        digests.iter().all(|d| d.is_some() && *d == digests[0])
            && (0..4).all(|i| {
                self.sar(i)
                    .core()
                    .is_some_and(|c| c.igp().routes().len() == 4)
            })
    }

    /// The SAR every route of `sar` toward `to` leaves through.
    fn next_hop(&self, sar: usize, to: u32) -> Option<RouterId> {
        self.sar(sar)
            .core()?
            .igp()
            .routes()
            .get(&RouterId(to))
            .map(|r| r.next_hop)
    }

    #[track_caller]
    fn drive(&mut self, secs: u64, what: &str, until: impl FnMut(&Self) -> bool) {
        let mut until = until;
        let deadline = self.sim.now() + Duration::from_secs(secs);
        loop {
            if until(self) {
                return;
            }
            assert!(
                self.sim.now() < deadline,
                "{what}: not by {deadline} (now {})",
                self.sim.now()
            );
            self.sim.run_for(Duration::from_millis(20)).unwrap();
        }
    }
}

fn converge(w: &mut World) {
    w.drive(20, "IGP convergence", World::converged);
    // The instance's announcement has reached every SAR.
    w.drive(10, "announcement flooding", |w| {
        (0..4).all(|i| {
            w.sar(i)
                .core()
                .is_some_and(|c| !c.instances_of(&SERVICE.parse().unwrap()).is_empty())
        })
    });
}

#[test]
fn the_igp_converges_and_learns_every_prefix() {
    let mut w = world();
    converge(&mut w);
    for i in 0..4 {
        let core = w.sar(i).core().unwrap();
        assert!(
            core.igp()
                .neighbors()
                .iter()
                .all(|n| n.state == NeighborState::Full),
            "sar{}: {:?}",
            i + 1,
            core.igp().neighbors()
        );
    }
    // SAR1 reaches SAR3 through SAR2 (10 + 10 < 20 + 20), and routes the
    // instance's segment there.
    assert_eq!(w.next_hop(0, 3), Some(RouterId(2)));
    let hop = w.sar(0).table().lookup(v6(3, 20)).unwrap();
    assert_eq!((hop.port, hop.addr), (1, v6(1, 2)));
    // SAR3 originates `*` for its SAG; every SAR has it.
    for i in 0..4 {
        let core = w.sar(i).core().unwrap();
        let star: Vec<(IpAddr, u32)> = core
            .instances_of(&ServiceName::WILDCARD)
            .iter()
            .map(|(_, r)| (r.addr, r.origin.0))
            .collect();
        assert_eq!(
            star,
            vec![(IpAddr::V6(a("fd00:0:0:3::99")), 3)],
            "sar{}",
            i + 1
        );
    }
    // Every segment's prefix is in every SAR's table.
    for i in 0..4 {
        for seg in 0..6 {
            assert!(
                w.sar(i).table().lookup(v6(seg, 99)).is_some(),
                "sar{} has no route to segment {seg}",
                i + 1
            );
        }
    }
}

#[test]
fn a_request_reaches_an_instance_two_sars_away_and_affinity_traffic_is_routed() {
    let mut w = world();
    converge(&mut w);
    w.client().connect(40_000);
    w.drive(10, "echo over the flow", |w| {
        w.client_ref().flow(40_000).echoed == b"hello 40000"
    });
    let flow = w.client_ref().flow(40_000);
    // The response came back through the ingress, rewritten to the client,
    // with the instance filled in.
    let (from, resp) = flow.response.clone().expect("a Service Response");
    assert_eq!(from, v6(0, 1), "responses come from the ingress SAR");
    assert_eq!(resp.kind, MessageKind::Response);
    assert_eq!(resp.instance(), Some(IpAddr::V6(v6(3, 20))));
    assert_eq!(resp.client(), Some(IpAddr::V6(v6(0, 10))));
    assert_eq!(resp.ingress(), Some(IpAddr::V6(v6(0, 1))));
    assert_eq!(resp.service(), Some(&SERVICE.parse().unwrap()));
    assert_eq!(flow.instance, Some(v6(3, 20)));
    // Affinity: after the response, plain packets both ways.
    assert!(
        flow.direct_in > 0,
        "nothing came straight from the instance"
    );
    let inst = w.sim.node(w.instance).role();
    let served = &inst.served[&(v6(0, 10), 40_000)];
    assert!(served.direct && served.direct_in > 0, "{served:?}");
    // The instance saw the SAR-filled request: Client and Ingress.
    assert_eq!(served.request.client(), Some(IpAddr::V6(v6(0, 10))));
    assert_eq!(served.request.ingress(), Some(IpAddr::V6(v6(0, 1))));
    // Who did what: SAR1 → SAR2 → SAR3 → instance, and back.
    assert!(w.stat(0, "sar.request_to_next_sar") >= 1);
    assert!(w.stat(1, "sar.request_to_next_sar") >= 1);
    assert!(w.stat(2, "sar.request_deliver_local") >= 1);
    assert!(w.stat(2, "sar.response_to_ingress") >= 1);
    assert!(w.stat(0, "sar.response_to_client") >= 1);
    assert_eq!(w.stat(3, "sar.forwarded"), 0, "the backup path stays idle");
    assert!(w.stat(1, "sar.forwarded") >= 4);
    for i in 0..4 {
        let drops: Vec<(String, u64)> = w
            .sim
            .node(w.sars[i])
            .stats()
            .named
            .iter()
            .filter(|(k, _)| k.starts_with("drop.") && !k.contains("announce_auth"))
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        assert!(drops.is_empty(), "sar{}: {drops:?}", i + 1);
    }
    // The SAR's own stack answers echo from two SARs away: its replies
    // leave through the virtual gateway and are routed back.
    w.client().pings.push(v6(2, 3));
    w.client().pings.push(v6(5, 3));
    w.drive(5, "echo replies", |w| w.client_ref().pongs.len() == 2);
    assert!(w.stat(2, "sar.local_routed") >= 2);
}

#[test]
fn hop_limit_expiry_no_route_too_big_and_ipv4_are_answered_or_counted() {
    let mut w = world();
    converge(&mut w);
    // Hop limit 2: SAR1 makes it 1, SAR2 cannot forward it.
    w.client().udp_out.push((v6(3, 20).into(), 2, 10));
    w.drive(5, "time exceeded", |w| !w.client_ref().errors.is_empty());
    assert_eq!(w.client_ref().errors, vec![(v6(1, 2), 3, 0)]);
    assert_eq!(w.stat(1, "drop.sar.hop_limit_exceeded"), 1);
    assert_eq!(w.stat(1, "sar.icmp_time_exceeded"), 1);

    // Nobody routes fd00:99::/64.
    w.client().errors.clear();
    w.client().udp_out.push((a("fd00:99::1").into(), 64, 10));
    w.drive(5, "destination unreachable", |w| {
        !w.client_ref().errors.is_empty()
    });
    assert_eq!(w.client_ref().errors, vec![(v6(0, 1), 1, 0)]);
    assert_eq!(w.stat(0, "drop.sar.no_route"), 1);

    // SAR2's MTU is 1400: a 1450-octet datagram is too big there.
    w.client().errors.clear();
    w.client().udp_out.push((v6(3, 20).into(), 64, 1400));
    w.drive(5, "packet too big", |w| !w.client_ref().errors.is_empty());
    assert_eq!(w.client_ref().errors, vec![(v6(1, 2), 2, 0)]);
    assert_eq!(w.stat(1, "drop.sar.packet_too_big"), 1);

    // IPv4 is not routed, only counted.
    w.client()
        .udp_out
        .push((IpAddress::Ipv4(sim::ipv4(3, 20)), 64, 10));
    w.drive(5, "IPv4 dropped", |w| {
        w.stat(0, "drop.sar.ipv4_not_routed") == 1
    });
    assert!(w.client_ref().errors.len() == 1, "no ICMP for IPv4");
}

#[test]
fn forged_announcements_are_never_installed() {
    let mut w = world();
    converge(&mut w);
    // The rogue announces the same service and a new one with a wrong key.
    w.sim.node_mut(w.rogue).role_mut().service = "evil.example".into();
    w.drive(20, "the rogue's announcements", |w| {
        w.stat(2, "drop.sar.announce_auth_bad") >= 1
    });
    w.sim.node_mut(w.rogue).role_mut().service = SERVICE.into();
    w.sim.node_mut(w.rogue).role_mut().next_announce = w.sim.now();
    w.drive(5, "the second forgery", |w| {
        w.stat(2, "drop.sar.announce_auth_bad") >= 2
    });
    w.sim.run_for(Duration::from_secs(3)).unwrap();
    let evil: ServiceName = "evil.example".parse().unwrap();
    let svc: ServiceName = SERVICE.parse().unwrap();
    for i in 0..4 {
        let core = w.sar(i).core().unwrap();
        assert!(core.fib().get(&evil).is_none(), "sar{}", i + 1);
        let addrs: Vec<IpAddr> = core
            .instances_of(&svc)
            .iter()
            .map(|(_, r)| r.addr)
            .collect();
        assert_eq!(addrs, vec![IpAddr::V6(v6(3, 20))], "sar{}", i + 1);
    }
    // Requests still reach the real instance only.
    w.client().connect(40_001);
    w.drive(10, "echo", |w| {
        w.client_ref().flow(40_001).echoed == b"hello 40001"
    });
    assert_eq!(w.sim.node(w.rogue).role().requests_in, 0);
}

#[test]
fn a_link_failure_reroutes_requests_and_affinity_traffic() {
    let mut w = world();
    converge(&mut w);
    w.client().connect(40_000);
    w.drive(10, "first flow", |w| {
        w.client_ref().flow(40_000).echoed == b"hello 40000"
    });
    assert_eq!(w.stat(3, "sar.forwarded"), 0);

    // Cut SAR1 off from SAR2: after the dead interval the domain goes round
    // through SAR4.
    let (p1, p2) = w.seg1_ports;
    let cut = w.sim.partition(&[p1], &[p2]);
    w.drive(15, "re-route via SAR4", |w| {
        w.next_hop(0, 3) == Some(RouterId(4))
    });
    assert_eq!(w.next_hop(2, 1), Some(RouterId(4)));
    let hop = w.sar(0).table().lookup(v6(3, 20)).unwrap();
    assert_eq!((hop.port, hop.addr), (2, v6(4, 4)));

    w.client().connect(40_002);
    w.drive(10, "a flow over the new path", |w| {
        w.client_ref().flow(40_002).echoed == b"hello 40002"
    });
    assert!(w.stat(3, "sar.request_to_next_sar") >= 1);
    assert!(w.stat(3, "sar.forwarded") >= 4);
    let flow = w.client_ref().flow(40_002);
    assert_eq!(flow.instance, Some(v6(3, 20)));
    assert!(flow.direct_in > 0);

    // Healed: back to the cheaper path.
    w.sim.heal(cut);
    w.drive(15, "back via SAR2", |w| {
        w.next_hop(0, 3) == Some(RouterId(2))
    });
}

#[test]
fn an_lsa_larger_than_the_mtu_crosses_in_fragments() {
    let mut w = world();
    converge(&mut w);
    // 48 more names at SAR3: its services LSA outgrows a 1500-octet link.
    let names: Vec<String> = (0..48)
        .map(|i| format!("bulk{i:02}.example/a/rather/long/path/to/make/it/count"))
        .collect();
    {
        let inst = w.sim.node_mut(w.instance).role_mut();
        inst.more = names.clone();
        inst.next_announce = Instant::ZERO;
    }
    w.drive(10, "every name at SAR1", |w| {
        let core = w.sar(0).core().unwrap();
        names
            .iter()
            .all(|n| !core.instances_of(&n.parse().unwrap()).is_empty())
    });
    assert!(w.stat(2, "sar.igp_tx_fragmented") >= 1);
    assert!(w.stat(1, "sar.igp_rx_reassembled") >= 1);
    let lsa_len = w
        .sar(2)
        .core()
        .unwrap()
        .igp()
        .lsas(w.sim.now())
        .filter_map(|l| {
            svcroute_stack::wire::igp::Message::Lsa(l.clone())
                .encode(None)
                .ok()
                .map(|b| b.len())
        })
        .max()
        .unwrap();
    assert!(
        lsa_len > 1500,
        "the test needs an LSA over the MTU ({lsa_len})"
    );
    for i in 0..4 {
        let igp_drops: Vec<(String, u64)> = w
            .sim
            .node(w.sars[i])
            .stats()
            .named
            .iter()
            .filter(|(k, _)| k.starts_with("drop.sar.igp"))
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        assert!(igp_drops.is_empty(), "sar{}: {igp_drops:?}", i + 1);
    }
}
