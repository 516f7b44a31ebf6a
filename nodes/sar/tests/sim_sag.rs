//! The SAG in the simulator: a client asks for a name no instance
//! announces, so its ingress SAR routes the request to the SAG (`*`), which
//! resolves the name with a DNS server and proxies the transaction to a
//! plain (non-ROSA) TCP server. Every node is a real core over smoltcp on
//! the in-memory bus; virtual time, seeded loss.
//!
//! ```text
//!   C ── seg0 ── SAR1 ── seg1 ── SAG ── seg2 ── D (DNS, AAAA from a table)
//!   fd00:0:0:0::a   ::1        ::1/::2       ::2   └──── S (TCP echo-ish server, port 80)
//! ```
//!
//! Addresses: host `h` on segment `s` is `fd00:0:0:s::h`. The SAG's own
//! address is its first port's (`fd00:0:0:1::2`); D and S use its seg2
//! address as their gateway. The client's transport talks to a virtual
//! address for the service; its shim (below) puts a Service Request on
//! the first packets toward SAR1 and, once a Service Response names the
//! instance (the SAG), sends plain packets there (SPEC §2.2 in
//! miniature). Each transaction: `GET <port>` up, `hello GET <port>` down,
//! the server closes, then the client.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv6Addr};

use simple_dns::rdata::{RData, AAAA};
use simple_dns::{Packet, ResourceRecord, CLASS, QTYPE, RCODE, TYPE};
use smoltcp::iface::SocketHandle;
use smoltcp::socket::{tcp, udp};
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{IpAddress, IpEndpoint, IpListenEndpoint};
use svcroute_sar::sag::proxy::{CloseCause, FlowState};
use svcroute_sar::sag::Gateway;
use svcroute_sar::{SarConfig, SarNode};
use svcroute_stack::runtime::{Context, FrameContext, Node, PortConfig, Role};
use svcroute_stack::shim::edit::{self, AddrField};
use svcroute_stack::shim::Verdict;
use svcroute_stack::sim::{self, NodeId, SegmentConfig, SegmentId, Sim, SimLink};
use svcroute_stack::wire::igp::RouterId;
use svcroute_stack::wire::rosa::{Entry, FlowPort, Message, MessageKind, ServiceName};

/// Announced by nobody: only the SAG's `*` serves it.
const SERVICE: &str = "example.net/index";
const KEY: &str = "000102030405060708090a0b0c0d0e0f";
mod frames;
use frames::{insert_rosa, ipv6_addrs, ports_of, rosa_of};

type SarId = NodeId<Node<SimLink, SarNode>>;
type ClientId = NodeId<Node<SimLink, Client>>;
type ServerId = NodeId<Node<SimLink, Server>>;
type DnsId = NodeId<Node<SimLink, Dns>>;

fn v6(seg: u8, host: u8) -> Ipv6Addr {
    sim::ipv6(seg, host)
}

/// The SAG's address (its first port's).
fn sag_addr() -> Ipv6Addr {
    v6(1, 2)
}

fn server_addr() -> Ipv6Addr {
    v6(2, 80)
}

fn dns_addr() -> Ipv6Addr {
    v6(2, 53)
}

/// The virtual address the client's transport uses for the service.
fn vaddr() -> Ipv6Addr {
    "fd5e::1".parse().unwrap()
}

// ---- frame helpers -----------------------------------------------------

fn tcp_socket() -> tcp::Socket<'static> {
    tcp::Socket::new(
        tcp::SocketBuffer::new(vec![0; 4096]),
        tcp::SocketBuffer::new(vec![0; 4096]),
    )
}

// ---- the client --------------------------------------------------------

/// One transaction of the client.
#[derive(Debug)]
struct Txn {
    sport: u16,
    /// Its socket, until a later transaction on the port replaces it.
    handle: Option<SocketHandle>,
    started: bool,
    sent: bool,
    got: Vec<u8>,
    /// The instance a Service Response bound it to, and where that came from.
    instance: Option<Ipv6Addr>,
    response_from: Option<Ipv6Addr>,
    /// Packets sent with a Service Request.
    requests_out: usize,
    /// Plain packets from the instance (affinity).
    direct_in: usize,
    /// Answered in full and closed both ways.
    done: bool,
}

impl Txn {
    fn expected(&self) -> Vec<u8> {
        format!("hello GET {}", self.sport).into_bytes()
    }
}

/// A client host: TCP transactions to the service's virtual address and a
/// small ROSA shim. A transaction on a port an earlier one used replaces
/// its socket (the client reuses the port).
struct Client {
    ingress: Ipv6Addr,
    service: ServiceName,
    txns: Vec<Txn>,
    /// Client port → the transaction using it now.
    active: BTreeMap<u16, usize>,
}

impl Client {
    fn start(&mut self, sport: u16) -> usize {
        self.txns.push(Txn {
            sport,
            handle: None,
            started: false,
            sent: false,
            got: Vec::new(),
            instance: None,
            response_from: None,
            requests_out: 0,
            direct_in: 0,
            done: false,
        });
        self.txns.len() - 1
    }

    fn active_txn(&mut self, sport: u16) -> Option<&mut Txn> {
        let i = *self.active.get(&sport)?;
        self.txns.get_mut(i)
    }
}

impl Role for Client {
    fn name(&self) -> &'static str {
        "client"
    }

    fn start(&mut self, _cx: &mut Context<'_>) {}

    fn poll(&mut self, cx: &mut Context<'_>) -> bool {
        let mut any = false;
        let p = &mut cx.ports[0];
        for i in 0..self.txns.len() {
            if !self.txns[i].started {
                let sport = self.txns[i].sport;
                if let Some(old) = self.active.insert(sport, i) {
                    if let Some(h) = self.txns[old].handle.take() {
                        p.sockets.remove(h);
                    }
                }
                let mut s = tcp_socket();
                s.connect(
                    p.iface.context(),
                    IpEndpoint::new(IpAddress::Ipv6(vaddr()), 80),
                    sport,
                )
                .unwrap();
                self.txns[i].handle = Some(p.sockets.add(s));
                self.txns[i].started = true;
                any = true;
            }
            let t = &mut self.txns[i];
            let Some(h) = t.handle else { continue };
            let s = p.sockets.get_mut::<tcp::Socket>(h);
            if s.may_send() && !t.sent {
                s.send_slice(format!("GET {}", t.sport).as_bytes()).unwrap();
                t.sent = true;
                any = true;
            }
            while s.can_recv() {
                s.recv(|b| {
                    t.got.extend_from_slice(b);
                    (b.len(), ())
                })
                .unwrap();
                any = true;
            }
            if s.state() == tcp::State::CloseWait {
                // The server answered and closed: so do we.
                s.close();
                any = true;
            }
            if !t.done
                && t.got == t.expected()
                && matches!(s.state(), tcp::State::TimeWait | tcp::State::Closed)
            {
                t.done = true;
                any = true;
            }
        }
        any
    }

    fn poll_at(&self, now: Instant) -> Option<Instant> {
        self.txns.iter().any(|t| !t.started).then_some(now)
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
        let (ingress, service) = (self.ingress, self.service.clone());
        let Some(t) = self.active_txn(sport) else {
            return Verdict::Drop("client_unknown_flow");
        };
        if let Some(i) = t.instance {
            edit::rewrite_addr(frame, AddrField::Dst, IpAddr::V6(i)).unwrap();
            return Verdict::Pass;
        }
        edit::rewrite_addr(frame, AddrField::Dst, IpAddr::V6(ingress)).unwrap();
        let req = Message {
            kind: MessageKind::Request,
            entries: vec![
                Entry::Service(service),
                Entry::Port(FlowPort { proto, port: dport }),
            ],
        };
        insert_rosa(frame, &req);
        t.requests_out += 1;
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
        let msg = rosa_of(frame);
        if msg.is_some() {
            edit::strip_dest_opts(frame).unwrap();
        }
        let Some((_, _, cport)) = ports_of(frame) else {
            return Verdict::Pass;
        };
        let Some(t) = self.active_txn(cport) else {
            return Verdict::Pass;
        };
        match msg {
            Some(m) if m.kind == MessageKind::Response => {
                if let Some(IpAddr::V6(i)) = m.instance() {
                    t.instance = Some(i);
                    t.response_from = Some(src);
                }
            }
            Some(_) => return Verdict::Pass,
            None if t.instance == Some(src) => t.direct_in += 1,
            None => return Verdict::Pass,
        }
        edit::rewrite_addr(frame, AddrField::Src, IpAddr::V6(vaddr())).unwrap();
        Verdict::Pass
    }
}

// ---- the plain server ----------------------------------------------------

/// Listening sockets the server keeps armed: more than the transactions
/// a test runs at once, or a burst of SYNs is answered with RSTs.
const LISTENERS: usize = 16;

/// A non-ROSA TCP server on port 80: answers `hello <request>` and closes.
#[derive(Default)]
struct Server {
    listeners: Vec<SocketHandle>,
    /// Transactions answered, by the peer they came from.
    served: BTreeMap<Ipv6Addr, usize>,
    /// Frames that carried a ROSA option (a plain server never sees one).
    rosa_in: usize,
}

impl Role for Server {
    fn name(&self) -> &'static str {
        "server"
    }

    fn start(&mut self, _cx: &mut Context<'_>) {}

    fn poll(&mut self, cx: &mut Context<'_>) -> bool {
        let mut any = false;
        let p = &mut cx.ports[0];
        self.listeners.retain(|h| {
            let closed = p.sockets.get::<tcp::Socket>(*h).state() == tcp::State::Closed;
            if closed {
                p.sockets.remove(*h);
            }
            !closed
        });
        let listening = self
            .listeners
            .iter()
            .filter(|h| p.sockets.get::<tcp::Socket>(**h).state() == tcp::State::Listen)
            .count();
        for _ in listening..LISTENERS {
            let mut s = tcp_socket();
            s.listen(IpListenEndpoint::from(80)).unwrap();
            self.listeners.push(p.sockets.add(s));
            any = true;
        }
        for h in &self.listeners {
            let s = p.sockets.get_mut::<tcp::Socket>(*h);
            if s.can_recv() && s.can_send() {
                let req = s.recv(|b| (b.len(), b.to_vec())).unwrap();
                s.send_slice(b"hello ").unwrap();
                s.send_slice(&req).unwrap();
                s.close();
                if let Some(IpEndpoint {
                    addr: IpAddress::Ipv6(peer),
                    ..
                }) = s.remote_endpoint()
                {
                    *self.served.entry(peer).or_default() += 1;
                }
                any = true;
            }
        }
        any
    }

    fn poll_at(&self, _now: Instant) -> Option<Instant> {
        None
    }

    fn ingress(
        &mut self,
        _cx: &mut FrameContext<'_>,
        _port: usize,
        frame: &mut Vec<u8>,
    ) -> Verdict {
        if rosa_of(frame).is_some() {
            self.rosa_in += 1;
        }
        Verdict::Pass
    }
}

// ---- the DNS server stand-in ----------------------------------------------

/// Answers AAAA questions from `table` (TTL 300); a name not in it is
/// NXDOMAIN, another type of a known name NODATA.
struct Dns {
    table: BTreeMap<String, Ipv6Addr>,
    socket: Option<SocketHandle>,
    /// Every question asked: (name, type).
    asked: Vec<(String, QTYPE)>,
}

impl Dns {
    fn answer(&mut self, query: &[u8]) -> Option<Vec<u8>> {
        let q = Packet::parse(query).ok()?;
        let question = q.questions.first()?.clone();
        let name = question.qname.to_string();
        self.asked.push((name.clone(), question.qtype));
        let mut r = Packet::new_reply(q.id());
        r.questions.push(question.clone());
        match self.table.get(&name) {
            None => *r.rcode_mut() = RCODE::NameError,
            Some(a) if question.qtype == QTYPE::TYPE(TYPE::AAAA) => {
                r.answers.push(ResourceRecord::new(
                    question.qname.clone(),
                    CLASS::IN,
                    300,
                    RData::AAAA(AAAA {
                        address: u128::from(*a),
                    }),
                ));
            }
            Some(_) => {}
        }
        r.build_bytes_vec().ok()
    }

    fn times_asked(&self, name: &str) -> usize {
        self.asked.iter().filter(|(n, _)| n == name).count()
    }
}

impl Role for Dns {
    fn name(&self) -> &'static str {
        "dns"
    }

    fn start(&mut self, cx: &mut Context<'_>) {
        let buf = || udp::PacketBuffer::new(vec![udp::PacketMetadata::EMPTY; 8], vec![0; 8192]);
        let mut s = udp::Socket::new(buf(), buf());
        s.bind(53).unwrap();
        self.socket = Some(cx.ports[0].sockets.add(s));
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(h) = self.socket else {
            return false;
        };
        let mut any = false;
        loop {
            let s = cx.ports[0].sockets.get_mut::<udp::Socket>(h);
            let Ok((data, meta)) = s.recv() else {
                break;
            };
            let (data, from) = (data.to_vec(), meta.endpoint);
            any = true;
            if let Some(reply) = self.answer(&data) {
                let s = cx.ports[0].sockets.get_mut::<udp::Socket>(h);
                s.send_slice(&reply, from).unwrap();
            }
        }
        any
    }

    fn poll_at(&self, _now: Instant) -> Option<Instant> {
        None
    }
}

// ---- the topology ------------------------------------------------------

struct World {
    sim: Sim,
    sar: SarId,
    sag: SarId,
    client: ClientId,
    server: ServerId,
    dns: DnsId,
}

/// A `[sar]` table (also a `[sag]` one) with one neighbour on `port`.
fn config(id: u32, port: usize, neighbor: Ipv6Addr, extra: &str) -> SarConfig {
    let text = format!(
        "router_id = {id}\nannounce_keys = [{{ key_id = 1, secret = \"{KEY}\" }}]\n\
         igp_key = {{ key_id = 7, secret = \"{KEY}\" }}\n{extra}\n\
         [[neighbors]]\nport = {port}\naddr = \"{neighbor}\"\ncost = 10\n"
    );
    toml::from_str(&text).unwrap()
}

fn ports(sim: &mut Sim, segs: &[(SegmentId, u8)]) -> (Vec<(PortConfig, SimLink)>, Vec<PortConfig>) {
    let ports: Vec<(PortConfig, SimLink)> = segs.iter().map(|(s, h)| sim.port(*s, *h)).collect();
    let cfgs = ports.iter().map(|(c, _)| c.clone()).collect();
    (ports, cfgs)
}

/// A host on `seg` whose gateway is `gw`.
fn host<R: Role + 'static>(
    sim: &mut Sim,
    name: &str,
    seg: SegmentId,
    h: u8,
    gw: Ipv6Addr,
    role: R,
) -> NodeId<Node<SimLink, R>> {
    let (mut c, link) = sim.port(seg, h);
    c.gateways = vec![IpAddress::Ipv6(gw)];
    sim.add_role(name, vec![(c, link)], role)
}

fn world(loss: f64, seed: u64) -> World {
    let mut sim = Sim::new(seed);
    let segs: Vec<SegmentId> = (0..3)
        .map(|_| {
            sim.add_segment(SegmentConfig {
                loss,
                ..SegmentConfig::default()
            })
        })
        .collect();
    let (p, cfgs) = ports(&mut sim, &[(segs[0], 1), (segs[1], 1)]);
    let role = SarNode::new("sar1", &config(1, 1, sag_addr(), ""), &cfgs).unwrap();
    let sar = sim.add_role("sar1", p, role);
    let (p, cfgs) = ports(&mut sim, &[(segs[1], 2), (segs[2], 2)]);
    let gateway = format!("[gateway]\ndns_server = \"{}\"", dns_addr());
    let role = SarNode::new_sag("sag", &config(2, 0, v6(1, 1), &gateway), &cfgs).unwrap();
    let sag = sim.add_role("sag", p, role);
    let client = Client {
        ingress: v6(0, 1),
        service: SERVICE.parse().unwrap(),
        txns: Vec::new(),
        active: BTreeMap::new(),
    };
    let client = host(&mut sim, "client", segs[0], 10, v6(0, 1), client);
    let server = host(&mut sim, "server", segs[2], 80, v6(2, 2), Server::default());
    let dns = Dns {
        table: [("example.net".to_owned(), server_addr())].into(),
        socket: None,
        asked: Vec::new(),
    };
    let dns = host(&mut sim, "dns", segs[2], 53, v6(2, 2), dns);
    World {
        sim,
        sar,
        sag,
        client,
        server,
        dns,
    }
}

impl World {
    fn gateway(&self) -> &Gateway {
        self.sim
            .node(self.sag)
            .role()
            .gateway()
            .expect("a started SAG")
    }

    /// A cumulative counter of the SAG's proxy.
    fn proxy(&self, name: &str) -> u64 {
        self.gateway()
            .proxy()
            .counters()
            .get(name)
            .copied()
            .unwrap_or(0)
    }

    fn client(&mut self) -> &mut Client {
        self.sim.node_mut(self.client).role_mut()
    }

    fn client_ref(&self) -> &Client {
        self.sim.node(self.client).role()
    }

    fn dns(&self) -> &Dns {
        self.sim.node(self.dns).role()
    }

    fn server(&self) -> &Server {
        self.sim.node(self.server).role()
    }

    /// The `drop.*` counters of a node, non-zero.
    fn drops(&self, id: SarId) -> Vec<(String, u64)> {
        self.sim
            .node(id)
            .stats()
            .named
            .iter()
            .filter(|(k, v)| k.starts_with("drop.") && **v > 0)
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    }

    /// Run in slices of 20 ms of virtual time until `until` holds; fail
    /// if it does not within `secs`.
    #[track_caller]
    fn drive(&mut self, secs: u64, what: &str, mut until: impl FnMut(&Self) -> bool) {
        let deadline = self.sim.now() + Duration::from_secs(secs);
        while !until(self) {
            assert!(
                self.sim.now() < deadline,
                "{what}: not by {deadline} (now {})",
                self.sim.now()
            );
            self.sim.run_for(Duration::from_millis(20)).unwrap();
        }
    }

    /// SAR1 has learned `*` (the SAG) and a route to the SAG by the IGP.
    fn converge(&mut self) {
        self.drive(30, "SAR1 learns `*`", |w| {
            w.sim.node(w.sar).role().core().is_some_and(|c| {
                c.igp().routes().contains_key(&RouterId(2))
                    && c.instances_of(&ServiceName::WILDCARD)
                        .iter()
                        .any(|(_, r)| r.addr == IpAddr::V6(sag_addr()))
            })
        });
    }

    /// Run transactions from `sports` at once until each is done.
    #[track_caller]
    fn transact(&mut self, sports: &[u16], secs: u64) -> Vec<usize> {
        let ids: Vec<usize> = sports.iter().map(|p| self.client().start(*p)).collect();
        let wanted = ids.clone();
        self.drive(secs, "transactions", move |w| {
            wanted.iter().all(|i| w.client_ref().txns[*i].done)
        });
        ids
    }

    /// Every flow of the SAG's proxy is gone (closed ones after their linger).
    fn no_flows(&self) -> bool {
        self.gateway().proxy().flows().next().is_none()
    }
}

#[test]
fn a_name_nobody_announces_is_served_through_the_sag_and_its_flow_ends_with_the_connection() {
    let mut w = world(0.0, 11);
    w.converge();

    // 1. The first transaction: the SAG asks DNS, proxies to the server.
    let first = w.transact(&[41_000], 30)[0];
    let t = &w.client_ref().txns[first];
    assert_eq!(t.got, t.expected());
    assert_eq!(t.instance, Some(sag_addr()), "bound to Instance = the SAG");
    assert_eq!(
        t.response_from,
        Some(v6(0, 1)),
        "the response via the ingress"
    );
    assert_eq!(t.requests_out, 1, "only the SYN carried the request");
    assert!(t.direct_in > 0, "affinity: plain packets from the SAG");
    assert_eq!(w.dns().times_asked("_rosa.example.net"), 1);
    assert_eq!(w.dns().times_asked("example.net"), 1);
    assert_eq!(w.dns().asked.len(), 2, "{:?}", w.dns().asked);
    assert_eq!(
        w.server().served,
        BTreeMap::from([(sag_addr(), 1)]),
        "the server saw the SAG, not the client"
    );
    // The close went through the SAG: the flow is closed, lingering.
    w.drive(5, "the flow closes", |w| {
        w.proxy("sag.proxy_flow_closed_fin") == 1
    });
    let flows: Vec<FlowState> = w.gateway().proxy().flows().map(|f| f.state).collect();
    assert_eq!(flows, vec![FlowState::Closed(CloseCause::Fin)]);

    // 2. The next transaction: from the cache, no question asked.
    let second = w.transact(&[41_001], 30)[0];
    assert!(w.client_ref().txns[second].done);
    assert_eq!(w.dns().asked.len(), 2, "cached: {:?}", w.dns().asked);
    assert!(w
        .gateway()
        .resolver()
        .counters()
        .get("sag.dns_cache_hit")
        .is_some());

    // 3. The first port again, while its old flow lingers: a new flow.
    let again = w.transact(&[41_000], 30)[0];
    let t = &w.client_ref().txns[again];
    assert_eq!(t.got, t.expected());
    assert_eq!(w.proxy("sag.proxy_flow_reopened"), 1);
    assert_eq!(w.proxy("drop.sag.proxy_key_clash"), 0);

    // After the linger every flow is gone, each ended by its FINs.
    w.drive(60, "every flow gone", World::no_flows);
    assert_eq!(w.proxy("sag.proxy_flow_opened"), 3);
    assert_eq!(w.proxy("sag.proxy_flow_closed_fin"), 3);
    assert_eq!(w.proxy("sag.proxy_flow_closed_rst"), 0);
    assert_eq!(w.proxy("sag.proxy_flow_expired"), 0, "none ended by idle");
    assert_eq!(w.server().served.get(&sag_addr()), Some(&3));
    assert_eq!(w.server().rosa_in, 0, "the server never sees the option");
    assert_eq!(w.drops(w.sag), vec![], "the SAG");
    assert_eq!(w.drops(w.sar), vec![], "SAR1");
}

#[test]
fn under_loss_every_transaction_completes_and_every_flow_closes() {
    const N: u16 = 12;
    let mut w = world(0.05, 5);
    w.converge();
    let sports: Vec<u16> = (0..N).map(|i| 42_000 + i).collect();
    let ids = w.transact(&sports, 300);
    for i in ids {
        let t = &w.client_ref().txns[i];
        assert_eq!(t.got, t.expected(), "port {}", t.sport);
        assert_eq!(t.instance, Some(sag_addr()), "port {}", t.sport);
    }
    // One resolution per name, however many queries the loss cost.
    let resolver = w.gateway().resolver().counters();
    let get = |k: &str| resolver.get(k).copied().unwrap_or(0);
    assert_eq!(get("sag.dns_cache_miss"), 2, "{resolver:?}");
    assert_eq!(
        get("sag.dns_query_aaaa"),
        2 + get("sag.dns_retry"),
        "{resolver:?}"
    );
    assert_eq!(w.server().served.get(&sag_addr()), Some(&usize::from(N)));
    // Every flow ends with its connection, none by idle timeout.
    w.drive(120, "every flow gone", World::no_flows);
    let opened = w.proxy("sag.proxy_flow_opened");
    let closed = w.proxy("sag.proxy_flow_closed_fin") + w.proxy("sag.proxy_flow_closed_rst");
    assert_eq!(opened, u64::from(N));
    assert_eq!(closed, opened);
    assert_eq!(w.proxy("sag.proxy_flow_expired"), 0);
    let lost: u64 = (0..3).map(|s| w.sim.stats(SegmentId(s)).lost).sum();
    assert!(lost > 0, "the loss was exercised");
}
