//! The SAR's IPv6 forwarder, sans-IO (SPEC §2.3: "an IPv6 router").
//!
//! [`Forwarder`] owns what plain IPv6 forwarding needs: the routing table
//! ([`crate::router::Table`]), the queue of routed frames waiting for their
//! next hop's MAC, the frames parked while a next hop is resolved, the
//! ICMPv6 error rate limiter and the reassembly of fragmented IGP
//! datagrams. It reads no socket and no clock: the data path
//! ([`crate::datapath`]) hands it frames with `now`, and the driver drains
//! its queue with [`Forwarder::transmit`], giving it a look at the ports'
//! neighbour tables, then asks for the next hops it still misses
//! ([`Forwarder::poll_resolve`]).
//!
//! ```text
//!   route(frame) ── hop limit, source/destination checks, lookup, MTU ──► outq ─┐
//!       └─ refused ─► icmp_error (rate-limited) ──────────────────────────► outq ─┤
//!   transmit(neighbors) ─ MAC known ─► Outbox (ToWire)  ◄──────────────────────┘
//!                       └ unknown ─► parked (bounded) ─ resolved ─► Outbox
//!                                                      └ timed out ─► Address Unreachable
//!   local_egress(frame): smoltcp's packets to off-link destinations (sent to
//!   the virtual gateway, whose MAC is the port's own) ─► routed like the rest
//! ```

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::{Ipv4Addr, Ipv6Addr};

use smoltcp::phy::ChecksumCapabilities;
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{
    EthernetAddress, EthernetFrame, EthernetProtocol, EthernetRepr, Icmpv6Packet, Icmpv6Repr,
    IpProtocol, Ipv6Packet, Ipv6Repr, NdiscNeighborFlags, NdiscRepr,
};
use svcroute_stack::runtime::check_frame;
use svcroute_stack::shim::{Direction, Outbox};
use svcroute_stack::stats::Counters;
use svcroute_stack::wire::igp::{self as wire_igp, LsaBody, LsaKind, RouterId};

use crate::config::{Neighbor, PortSettings, Settings};
use crate::frag::{self, Datagram, FragError, Reassembler};
use crate::icmp::{self, ErrorKind, RateLimit, ETH_LEN, IPV6_LEN};
use crate::router::{Origin, Prefix, Route, Table};
use crate::Sar;

/// The gateway every port's smoltcp sends off-link packets to; bound to the
/// port's own MAC, so the egress shim gets them back to route.
pub const VIRTUAL_GATEWAY: Ipv6Addr =
    Ipv6Addr::new(0xfe80, 0, 0, 0, 0xffff, 0xffff, 0xffff, 0xfffe);

/// Least time between two resolutions of one parked next hop.
const ASK_INTERVAL: Duration = Duration::from_secs(1);
/// Link-local neighbours whose MAC is remembered.
const MAX_LINK_LOCAL: usize = 256;

/// What the data path did with a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Routed: queued toward its next hop ([`Forwarder::transmit`]).
    Forward,
    /// For this node: hand it to the smoltcp of the port it came in on.
    Deliver,
    /// Taken: handled here (a control message, a fragment, a frame handed
    /// to another port's smoltcp or to the gateway).
    Consume,
    /// Discarded, counted as `drop.<reason>`.
    Drop(&'static str),
}

/// A routed frame on its way to the wire, waiting for its next hop's MAC.
#[derive(Debug)]
struct Out {
    port: usize,
    hop: Ipv6Addr,
    frame: Vec<u8>,
}

/// Frames waiting for one next hop's neighbour resolution.
#[derive(Debug, Default)]
struct Parked {
    frames: VecDeque<(Vec<u8>, Instant)>,
    asked: Option<Instant>,
}

/// Fingerprint of what the IGP part of the routing table is built from.
type TableKey = Vec<(RouterId, crate::igp::Route, Option<u32>)>;

/// The IPv6 forwarder. See the module docs.
#[derive(Debug)]
pub struct Forwarder {
    ports: Vec<PortSettings>,
    neighbors: Vec<Neighbor>,
    static_routes: Vec<Route>,
    address: Ipv6Addr,
    router_id: RouterId,
    mtu: usize,
    max_pending: usize,
    resolve_timeout: Duration,
    own6: HashMap<Ipv6Addr, usize>,
    own4: Vec<Ipv4Addr>,
    table: Table,
    table_key: Option<TableKey>,
    outq: VecDeque<Out>,
    parked: BTreeMap<(usize, Ipv6Addr), Parked>,
    parked_len: usize,
    icmp_per_s: u32,
    icmp_burst: u32,
    icmp: RateLimit,
    reasm: Reassembler,
    frag_id: u32,
    /// MACs of link-local sources seen per port (bounded), for smoltcp's
    /// answers to them.
    link_local: HashMap<(usize, Ipv6Addr), EthernetAddress>,
    /// Next hops to solicit, for [`Self::poll_resolve`].
    resolve: VecDeque<(usize, Ipv6Addr)>,
}

impl Forwarder {
    /// A forwarder for the ports, routes and limits of `s`, at `now`.
    pub fn new(s: &Settings, now: Instant) -> Self {
        let mut own6 = HashMap::new();
        let mut own4 = Vec::new();
        for (i, p) in s.ports.iter().enumerate() {
            for (a, _) in &p.v6 {
                own6.entry(*a).or_insert(i);
            }
            own4.extend(p.v4.iter().copied());
        }
        Self {
            ports: s.ports.clone(),
            neighbors: s.neighbors.clone(),
            static_routes: s.routes.clone(),
            address: s.core.igp.address,
            router_id: s.core.igp.router_id,
            mtu: s.mtu,
            max_pending: s.max_pending,
            resolve_timeout: s.resolve_timeout,
            own6,
            own4,
            table: Table::new(s.routes.iter().copied()),
            table_key: None,
            outq: VecDeque::new(),
            parked: BTreeMap::new(),
            parked_len: 0,
            icmp_per_s: s.icmp_per_s,
            icmp_burst: s.icmp_burst,
            icmp: RateLimit::new(s.icmp_per_s, s.icmp_burst, now),
            reasm: Reassembler::default(),
            frag_id: 0,
            link_local: HashMap::new(),
            resolve: VecDeque::new(),
        }
    }

    /// Start the ICMPv6 error budget afresh at `now` (the node starts).
    pub fn start(&mut self, now: Instant) {
        self.icmp = RateLimit::new(self.icmp_per_s, self.icmp_burst, now);
    }

    /// The routing table.
    pub const fn table(&self) -> &Table {
        &self.table
    }

    /// The oldest frame queued for [`Self::transmit`] (tests look at it).
    #[cfg(test)]
    pub(crate) fn pop_queued(&mut self) -> Option<Vec<u8>> {
        self.outq.pop_front().map(|o| o.frame)
    }

    /// Frames parked for neighbour resolution.
    pub const fn parked(&self) -> usize {
        self.parked_len
    }

    /// The port that holds our address `addr`, if it is ours.
    pub fn owner_of(&self, addr: Ipv6Addr) -> Option<usize> {
        self.own6.get(&addr).copied()
    }

    /// Whether `addr` is one of our IPv4 addresses.
    pub fn is_own4(&self, addr: Ipv4Addr) -> bool {
        self.own4.contains(&addr)
    }

    /// The IP MTU of every port.
    pub const fn mtu(&self) -> usize {
        self.mtu
    }

    /// When [`Self::transmit`] or [`Self::expire`] next has work without
    /// new input.
    pub fn poll_timeout(&self, now: Instant) -> Option<Instant> {
        if !self.outq.is_empty() {
            return Some(now);
        }
        let deadlines = self.parked.values().flat_map(|p| {
            [
                p.frames.front().map(|(_, d)| *d),
                p.asked.map(|t| t + ASK_INTERVAL),
            ]
        });
        deadlines
            .chain([self.reasm.next_deadline()])
            .flatten()
            .min()
    }

    /// Forward an IPv6 packet by the table. `orig` is the packet as it
    /// arrived when the SAR rewrote it (ICMPv6 errors quote and answer
    /// that), `growth` what the rewrite added.
    pub fn route(
        &mut self,
        now: Instant,
        stats: &mut Counters,
        in_port: usize,
        frame: &mut Vec<u8>,
        orig: Option<&[u8]>,
        growth: usize,
    ) -> Verdict {
        let hop_limit = frame[ETH_LEN + 7];
        let src = addr_at(frame, ETH_LEN + 8);
        let dst = addr_at(frame, ETH_LEN + 24);
        if src.is_multicast() || src.is_unspecified() || src.is_loopback() {
            return Verdict::Drop("sar.bad_source");
        }
        if dst.is_unspecified() || dst.is_loopback() {
            return Verdict::Drop("sar.bad_destination");
        }
        let about = orig.unwrap_or(&frame[..]);
        if src.is_unicast_link_local() {
            self.icmp_error(now, stats, ErrorKind::BeyondScope, in_port, about);
            return Verdict::Drop("sar.link_local_source");
        }
        if hop_limit <= 1 {
            self.icmp_error(now, stats, ErrorKind::HopLimitExceeded, in_port, about);
            return Verdict::Drop("sar.hop_limit_exceeded");
        }
        let Some(nh) = self.table.lookup(dst) else {
            self.icmp_error(now, stats, ErrorKind::NoRoute, in_port, about);
            return Verdict::Drop("sar.no_route");
        };
        if frame.len() - ETH_LEN > self.mtu {
            let mtu = self.mtu.saturating_sub(growth).max(icmp::MIN_MTU) as u32;
            let about = orig.unwrap_or(&frame[..]);
            self.icmp_error(now, stats, ErrorKind::PacketTooBig { mtu }, in_port, about);
            return Verdict::Drop("sar.packet_too_big");
        }
        frame[ETH_LEN + 7] = hop_limit - 1;
        stats.bump("sar.forwarded");
        self.outq.push_back(Out {
            port: nh.port,
            hop: nh.addr,
            frame: std::mem::take(frame),
        });
        Verdict::Forward
    }

    /// Send the ICMPv6 error `kind` about `frame` (an Ethernet frame as it
    /// arrived on `in_port`), rate-limited; the source is `in_port`'s
    /// address, so a traceroute sees the interface it came in on.
    pub fn icmp_error(
        &mut self,
        now: Instant,
        stats: &mut Counters,
        kind: ErrorKind,
        in_port: usize,
        frame: &[u8],
    ) {
        let Some(to) = icmp::may_answer(frame) else {
            return;
        };
        if self.own6.contains_key(&to) {
            return;
        }
        if !self.icmp.allow(now) {
            stats.drop("sar.icmp_rate_limited");
            return;
        }
        let from = self.ports[in_port]
            .v6
            .iter()
            .map(|(a, _)| *a)
            .find(|a| !a.is_unicast_link_local())
            .unwrap_or(self.address);
        let Some(err) = frame
            .get(ETH_LEN..)
            .and_then(|ip| icmp::error_frame(kind, from, ip))
        else {
            return;
        };
        let Some(nh) = self.table.lookup(to) else {
            stats.drop("sar.icmp_no_route");
            return;
        };
        stats.bump(kind.counter());
        self.outq.push_back(Out {
            port: nh.port,
            hop: nh.addr,
            frame: err,
        });
    }

    /// A packet for our address owned by port `owner`, arrived on `port`:
    /// to that port's smoltcp.
    pub fn deliver(
        &self,
        out: &mut Outbox,
        port: usize,
        owner: usize,
        frame: &mut Vec<u8>,
    ) -> Verdict {
        if owner == port {
            return deliver_here(frame);
        }
        if let Err(reason) = check_frame(frame) {
            return Verdict::Drop(reason);
        }
        frame[0..6].copy_from_slice(&self.ports[owner].mac.0);
        out.inject(owner, Direction::ToStack, std::mem::take(frame));
        Verdict::Consume
    }

    /// Remember the MAC of a link-local source on `port` (at most
    /// [`MAX_LINK_LOCAL`], an arbitrary one makes room).
    pub fn learn_link_local(&mut self, port: usize, src: Ipv6Addr, frame: &[u8]) {
        let mac = EthernetAddress::from_bytes(&frame[6..12]);
        if !mac.is_unicast() {
            return;
        }
        if self.link_local.len() >= MAX_LINK_LOCAL && !self.link_local.contains_key(&(port, src)) {
            if let Some(k) = self.link_local.keys().next().copied() {
                self.link_local.remove(&k);
            }
        }
        self.link_local.insert((port, src), mac);
    }

    /// One fragment of a UDP datagram to us: the whole datagram once every
    /// fragment is in.
    pub fn reassemble(
        &mut self,
        now: Instant,
        frame: &[u8],
    ) -> Result<Option<Datagram>, FragError> {
        self.reasm.push(now, frame)
    }

    /// Drop reassemblies that timed out, counting them.
    pub fn expire(&mut self, now: Instant, stats: &mut Counters) {
        let expired = self.reasm.expire(now);
        if expired > 0 {
            stats.add("drop.sar.igp_reassembly_timeout", expired as u64);
        }
    }

    /// An IGP datagram larger than the link MTU, in IPv6 fragments from our
    /// address on the neighbour's link, through the routed-frame queue.
    pub fn send_fragmented(&mut self, stats: &mut Counters, n: Neighbor, bytes: &[u8]) {
        let src = self.ports[n.port]
            .v6
            .iter()
            .find(|(a, l)| Prefix::new(*a, *l).contains(n.addr))
            .map(|(a, _)| *a);
        let Some(src) = src else {
            stats.drop("sar.igp_unaddressable");
            return;
        };
        self.frag_id = self.frag_id.wrapping_add(1);
        let id = self.frag_id ^ self.router_id.0.rotate_left(16);
        let frames = frag::fragment_udp(
            src,
            n.addr,
            wire_igp::PORT,
            wire_igp::PORT,
            bytes,
            self.mtu,
            id,
        );
        if frames.is_empty() {
            stats.drop("sar.igp_too_big");
            return;
        }
        stats.bump("sar.igp_tx");
        stats.bump("sar.igp_tx_fragmented");
        for frame in frames {
            self.outq.push_back(Out {
                port: n.port,
                hop: n.addr,
                frame,
            });
        }
    }

    /// Rebuild the routing table if the SPF result or a router-links LSA
    /// of `core` changed.
    pub fn refresh_table(&mut self, now: Instant, core: &Sar) {
        let igp = core.igp();
        let key: TableKey = igp
            .routes()
            .iter()
            .map(|(r, route)| {
                let seq = igp
                    .lsa(now, &(*r, LsaKind::RouterLinks, 0))
                    .map(|(l, _)| l.seq);
                (*r, *route, seq)
            })
            .collect();
        if self.table_key.as_ref() == Some(&key) {
            return;
        }
        let me = core.router_id();
        let mut routes = self.static_routes.clone();
        for (rid, route) in igp.routes() {
            if *rid == me {
                continue;
            }
            let Some(n) = route
                .link
                .and_then(|l| self.neighbors.get(l.0 as usize))
                .copied()
            else {
                continue;
            };
            let Some((lsa, _)) = igp.lsa(now, &(*rid, LsaKind::RouterLinks, 0)) else {
                continue;
            };
            let LsaBody::RouterLinks(rl) = &lsa.body else {
                continue;
            };
            let origin = Origin::Igp {
                cost: route.cost,
                router: *rid,
            };
            let prefixes = rl
                .prefixes
                .iter()
                .map(|p| Prefix::new(p.addr, p.len))
                .chain([Prefix::new(rl.address, 128)]);
            for prefix in prefixes {
                routes.push(Route {
                    prefix,
                    port: n.port,
                    via: Some(n.addr),
                    origin,
                });
            }
        }
        self.table = Table::new(routes);
        self.table_key = Some(key);
    }

    /// Routed frames to the wire once their next hop's MAC is known
    /// (`lookup(port, hop)`: the port's neighbour table); parked ones
    /// retried, to be solicited again ([`Self::poll_resolve`]), or timed
    /// out. Returns whether anything moved.
    pub fn transmit(
        &mut self,
        now: Instant,
        stats: &mut Counters,
        lookup: impl Fn(usize, Ipv6Addr) -> Option<EthernetAddress>,
        out: &mut Outbox,
    ) -> bool {
        let mut any = false;
        for _ in 0..2 {
            while let Some(o) = self.outq.pop_front() {
                any = true;
                match lookup(o.port, o.hop) {
                    Some(mac) => self.emit(out, o.port, mac, o.frame),
                    None => self.park(now, stats, o),
                }
            }
            let keys: Vec<(usize, Ipv6Addr)> = self.parked.keys().copied().collect();
            for k in keys {
                let mac = lookup(k.0, k.1);
                let Some(mut parked) = self.parked.remove(&k) else {
                    continue;
                };
                if let Some(mac) = mac {
                    any = true;
                    self.parked_len -= parked.frames.len();
                    for (f, _) in parked.frames {
                        self.emit(out, k.0, mac, f);
                    }
                    continue;
                }
                while parked.frames.front().is_some_and(|(_, d)| *d <= now) {
                    let Some((f, _)) = parked.frames.pop_front() else {
                        break;
                    };
                    any = true;
                    self.parked_len -= 1;
                    stats.drop("sar.neighbor_unresolved");
                    self.icmp_error(now, stats, ErrorKind::AddressUnreachable, k.0, &f);
                }
                if parked.frames.is_empty() {
                    continue;
                }
                if parked.asked.is_none_or(|t| now >= t + ASK_INTERVAL) {
                    parked.asked = Some(now);
                    self.resolve.push_back(k);
                }
                self.parked.insert(k, parked);
            }
            if self.outq.is_empty() {
                break;
            }
        }
        any
    }

    /// A next hop (port, address) whose MAC [`Self::transmit`] is waiting
    /// for: the driver sends its Neighbor Solicitation.
    #[must_use]
    pub fn poll_resolve(&mut self) -> Option<(usize, Ipv6Addr)> {
        self.resolve.pop_front()
    }

    fn park(&mut self, now: Instant, stats: &mut Counters, o: Out) {
        if self.parked_len >= self.max_pending {
            stats.drop("sar.pending_full");
            return;
        }
        let deadline = now + self.resolve_timeout;
        let entry = self.parked.entry((o.port, o.hop)).or_default();
        entry.frames.push_back((o.frame, deadline));
        self.parked_len += 1;
        stats.bump("sar.parked");
        if entry.asked.is_none() {
            entry.asked = Some(now);
            self.resolve.push_back((o.port, o.hop));
        }
    }

    fn emit(&self, out: &mut Outbox, port: usize, mac: EthernetAddress, mut frame: Vec<u8>) {
        frame[0..6].copy_from_slice(&mac.0);
        frame[6..12].copy_from_slice(&self.ports[port].mac.0);
        out.inject(port, Direction::ToWire, frame);
    }

    /// The frames that tell every port's smoltcp the virtual gateway is at
    /// the port's own MAC, with their ports.
    pub fn gateway_adverts(&self) -> impl Iterator<Item = (usize, Vec<u8>)> + '_ {
        self.ports
            .iter()
            .enumerate()
            .filter_map(|(i, p)| Some((i, gateway_advert(p.mac, p.v6.first().map(|(a, _)| *a))?)))
    }

    /// A frame smoltcp sends on `port`: passed (`None`) unless it goes to
    /// the virtual gateway (an off-link destination: routed like the rest)
    /// or solicits it (smoltcp forgot the binding: told again).
    pub fn local_egress(
        &mut self,
        stats: &mut Counters,
        out: &mut Outbox,
        port: usize,
        frame: &mut Vec<u8>,
    ) -> Option<Verdict> {
        let me = self.ports.get(port)?;
        if frame.len() < ETH_LEN || frame[0..6] != me.mac.0 {
            if is_gateway_solicit(frame) {
                if let Some(f) = gateway_advert(me.mac, me.v6.first().map(|(a, _)| *a)) {
                    out.inject(port, Direction::ToStack, f);
                }
                return Some(Verdict::Consume);
            }
            return None;
        }
        // Sent to the virtual gateway: an off-link destination to route.
        if frame.len() < ETH_LEN + IPV6_LEN || frame[12..14] != [0x86, 0xdd] {
            return Some(Verdict::Drop("sar.local_unroutable"));
        }
        let dst = addr_at(frame, ETH_LEN + 24);
        if let Some(&owner) = self.own6.get(&dst) {
            frame[0..6].copy_from_slice(&self.ports[owner].mac.0);
            out.inject(owner, Direction::ToStack, std::mem::take(frame));
            return Some(Verdict::Consume);
        }
        if dst.is_unicast_link_local() {
            // On-link by definition, on the port that sent it (smoltcp
            // routes it to the gateway: a port has no link-local prefix).
            // An NA answering a kernel's NS sent from its link-local
            // address while its global one is tentative, for one: its MAC
            // is the one that NS came from.
            let Some(mac) = self.link_local.get(&(port, dst)).copied() else {
                return Some(Verdict::Drop("sar.local_link_local"));
            };
            stats.bump("sar.local_link_local");
            frame[0..6].copy_from_slice(&mac.0);
            return None;
        }
        let Some(nh) = self.table.lookup(dst) else {
            return Some(Verdict::Drop("sar.local_no_route"));
        };
        stats.bump("sar.local_routed");
        self.outq.push_back(Out {
            port: nh.port,
            hop: nh.addr,
            frame: std::mem::take(frame),
        });
        Some(Verdict::Forward)
    }
}

/// Hand a frame to this port's smoltcp after the structural checks the
/// runtime would have made (the SAR turns them off to forward what it does
/// not parse).
pub fn deliver_here(frame: &[u8]) -> Verdict {
    match check_frame(frame) {
        Ok(()) => Verdict::Deliver,
        Err(reason) => Verdict::Drop(reason),
    }
}

/// A Neighbor Advertisement, as if from the virtual gateway, binding it to
/// `mac` (the port's own) in smoltcp's cache; to `ours`, the port's address.
pub(crate) fn gateway_advert(mac: EthernetAddress, ours: Option<Ipv6Addr>) -> Option<Vec<u8>> {
    let ours = ours?;
    let icmp = Icmpv6Repr::Ndisc(NdiscRepr::NeighborAdvert {
        flags: NdiscNeighborFlags::OVERRIDE,
        target_addr: VIRTUAL_GATEWAY,
        lladdr: Some(mac.into()),
    });
    let ip = Ipv6Repr {
        src_addr: VIRTUAL_GATEWAY,
        dst_addr: ours,
        next_header: IpProtocol::Icmpv6,
        payload_len: icmp.buffer_len(),
        hop_limit: 255,
    };
    let mut buf = vec![0; ETH_LEN + ip.buffer_len() + icmp.buffer_len()];
    EthernetRepr {
        src_addr: mac,
        dst_addr: mac,
        ethertype: EthernetProtocol::Ipv6,
    }
    .emit(&mut EthernetFrame::new_unchecked(&mut buf[..]));
    let mut pkt = Ipv6Packet::new_unchecked(&mut buf[ETH_LEN..]);
    ip.emit(&mut pkt);
    icmp.emit(
        &VIRTUAL_GATEWAY,
        &ours,
        &mut Icmpv6Packet::new_unchecked(pkt.payload_mut()),
        &ChecksumCapabilities::default(),
    );
    Some(buf)
}

/// Whether smoltcp solicits the virtual gateway.
pub(crate) fn is_gateway_solicit(frame: &[u8]) -> bool {
    frame.get(12..14) == Some(&[0x86, 0xdd][..])
        && frame.get(ETH_LEN + 6) == Some(&58)
        && frame.get(ETH_LEN + IPV6_LEN) == Some(&135)
        && frame.get(ETH_LEN + IPV6_LEN + 8..ETH_LEN + IPV6_LEN + 24)
            == Some(&VIRTUAL_GATEWAY.octets()[..])
}

/// The IPv6 address at `at` (callers checked the length).
pub(crate) fn addr_at(frame: &[u8], at: usize) -> Ipv6Addr {
    let mut b = [0; 16];
    b.copy_from_slice(&frame[at..at + 16]);
    Ipv6Addr::from(b)
}

#[cfg(test)]
mod tests {
    use smoltcp::wire::EthernetFrame;

    use super::*;

    #[test]
    fn the_gateway_advert_is_a_valid_override_na_and_its_solicit_is_recognised() {
        let mac = EthernetAddress([2, 0, 0, 0, 0, 1]);
        let ours: Ipv6Addr = "fd00::1".parse().unwrap();
        let f = gateway_advert(mac, Some(ours)).unwrap();
        let eth = EthernetFrame::new_checked(&f[..]).unwrap();
        assert_eq!(eth.dst_addr(), mac);
        let ip = Ipv6Packet::new_checked(eth.payload()).unwrap();
        let repr = Ipv6Repr::parse(&ip).unwrap();
        assert_eq!(repr.hop_limit, 255);
        let icmp = Icmpv6Packet::new_checked(ip.payload()).unwrap();
        let parsed = Icmpv6Repr::parse(
            &repr.src_addr,
            &repr.dst_addr,
            &icmp,
            &ChecksumCapabilities::default(),
        )
        .unwrap();
        assert!(matches!(
            parsed,
            Icmpv6Repr::Ndisc(NdiscRepr::NeighborAdvert { target_addr, .. })
                if target_addr == VIRTUAL_GATEWAY
        ));
        assert!(gateway_advert(mac, None).is_none());
        // A solicitation for the gateway (same layout, type 135) is ours.
        let mut ns = f.clone();
        ns[ETH_LEN + IPV6_LEN] = 135;
        assert!(is_gateway_solicit(&ns));
        assert!(!is_gateway_solicit(&f));
        assert!(!is_gateway_solicit(&ns[..40]));
    }
}
