//! The `sar` node: the [`Sar`] core on real ports (STYLE.md 6: a thin
//! driver, no protocol decision here).
//!
//! ```text
//!   ingress shim (every frame)                       role poll
//!   ───────────────────────────                      ─────────
//!   ARP, multicast, IPv4 to us ─► smoltcp            UDP 7470 per SAR port ─► Sar::handle_igp
//!   IPv6 to one of our addresses                     due timers            ─► Sar::handle_timeout
//!     ├ ROSA option ─► Sar::decide ─► rewrite        Sar::poll_transmit    ─► UDP 7470
//!     │   (shim::edit) ─► route ──────────┐          SPF / router links    ─► routing table
//!     └ else ─► that port's smoltcp       │          queued frames: neighbour MAC known ─► wire
//!   IPv6 to others ─► route ──────────────┤            unknown ─► cx.resolve, parked (bounded,
//!     hop limit, MTU, ICMPv6 errors       │            timed out with Address Unreachable)
//!   IPv4 to others ─► dropped, counted    ▼
//!                                    queue ─► (poll) Ethernet MACs ─► ToWire
//!   egress shim: smoltcp's packets to off-link destinations leave through a
//!   virtual gateway (its MAC is the port's own) and are routed like the rest
//!   IGP datagrams over the link MTU: sent and reassembled as IPv6 fragments
//!   here ([`crate::frag`]), since smoltcp 0.14 does neither
//! ```
//!
//! # Routing
//!
//! [`crate::router::Table`]: connected prefixes of every port, static routes,
//! and the prefixes in other SARs' router-links LSAs (plus their addresses)
//! via the first hop of the SPF path. It is rebuilt when the SPF result or a
//! router-links LSA changes.
//!
//! # smoltcp's own traffic
//!
//! Packets for the node (NDP, echo, the IGP) go to the smoltcp interface of
//! the port owning the destination address. Each interface's IPv6 default
//! route points at [`VIRTUAL_GATEWAY`], which a synthetic Neighbor
//! Advertisement binds to the port's own MAC: whatever smoltcp sends off-link
//! (an echo reply to a host two SARs away) comes back through the egress shim
//! and is routed by the table, out of whichever port it needs.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde_json::{json, Value};
use smoltcp::iface::SocketHandle;
use smoltcp::phy::ChecksumCapabilities;
use smoltcp::socket::udp;
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{
    EthernetAddress, EthernetFrame, EthernetProtocol, EthernetRepr, Icmpv6Packet, Icmpv6Repr,
    IpAddress, IpListenEndpoint, IpProtocol, Ipv6Packet, Ipv6Repr, NdiscNeighborFlags, NdiscRepr,
};
use svcroute_stack::runtime::{check_frame, Context, ControlReply, FrameContext, PortConfig, Role};
use svcroute_stack::shim::edit::{self, AddrField, Fragment, Layout};
use svcroute_stack::shim::{Direction, Outbox, Verdict};
use svcroute_stack::stats::Counters;
use svcroute_stack::wire::auth::AuthCheck;
use svcroute_stack::wire::igp::{self as wire_igp, LsaBody, LsaKind, RouterId};
use svcroute_stack::wire::ipv6opt::{self, OptionRepr, OptionType, UnknownAction};
use svcroute_stack::wire::rosa::{Constraint, Entry, Message, MessageKind, ServiceName};
use svcroute_stack::wire::Error as WireError;

use crate::decide::{Action, DropReason, Fill, PacketView, PortKind};
use crate::frag::{self, Reassembler};
use crate::icmp::{self, ErrorKind, RateLimit, ETH_LEN, IPV6_LEN};
use crate::igp::{LinkId, NeighborState, Transmit};
use crate::node_config::{ConfigError, Facing, Neighbor, SarConfig, Settings};
use crate::router::{Origin, Prefix, Route, Table};
use crate::sag::{self, encap, proxy, Done, Gateway, Taken};
use crate::Sar;

/// The gateway every port's smoltcp sends off-link packets to; bound to the
/// port's own MAC, so the egress shim gets them back to route.
pub const VIRTUAL_GATEWAY: Ipv6Addr =
    Ipv6Addr::new(0xfe80, 0, 0, 0, 0xffff, 0xffff, 0xffff, 0xfffe);

/// How often the virtual gateway's binding is told to smoltcp again (its
/// neighbour cache keeps entries 60 s).
const GATEWAY_REFRESH: Duration = Duration::from_secs(20);
/// Least time between two resolutions of one parked next hop.
const ASK_INTERVAL: Duration = Duration::from_secs(1);
/// IGP datagrams waiting for room in a UDP socket.
const MAX_BACKLOG: usize = 4096;
/// When a full UDP socket is looked at again.
const BACKLOG_RETRY: Duration = Duration::from_millis(50);
/// UDP socket buffers of the IGP: datagrams and octets, each way.
const UDP_PACKETS: usize = 256;
const UDP_BYTES: usize = 512 * 1024;
/// IPv6 + UDP header octets in front of an IGP datagram.
const UDP6_OVERHEAD: usize = IPV6_LEN + 8;
/// Link-local neighbours whose MAC is remembered.
const MAX_LINK_LOCAL: usize = 256;
/// Entries a control answer lists at most.
const MAX_LISTED: usize = 10_000;

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

/// The `sar` role. See the module docs.
pub struct SarNode {
    s: Settings,
    core: Option<Sar>,
    own6: HashMap<Ipv6Addr, usize>,
    own4: Vec<Ipv4Addr>,
    link_of: HashMap<(usize, Ipv6Addr), LinkId>,
    udp: Vec<Option<SocketHandle>>,
    backlog: VecDeque<Transmit>,
    table: Table,
    table_key: Option<TableKey>,
    outq: VecDeque<Out>,
    parked: BTreeMap<(usize, Ipv6Addr), Parked>,
    parked_len: usize,
    icmp: RateLimit,
    gateway_at: Instant,
    sag_at: Option<Instant>,
    backlog_at: Option<Instant>,
    reasm: Reassembler,
    frag_id: u32,
    /// Role `sag`: the gateway, and its DNS socket (port, handle).
    gw: Option<Gateway>,
    dns: Option<(usize, SocketHandle)>,
    /// MACs of link-local sources seen per port (bounded), for smoltcp's
    /// answers to them.
    link_local: HashMap<(usize, Ipv6Addr), EthernetAddress>,
    /// The packet being handled came inside UDP 7471 (role `sag`).
    rx_encap: bool,
}

impl std::fmt::Debug for SarNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SarNode")
            .field("name", &self.s.name)
            .field("router_id", &self.s.core.igp.router_id)
            .field("routes", &self.table.len())
            .field("parked", &self.parked_len)
            .finish_non_exhaustive()
    }
}

impl SarNode {
    /// A SAR from its `[sar]` section, for a node named `node` whose ports
    /// are `ports` (in `[[port]]` order). Every value is checked here.
    pub fn new(node: &str, cfg: &SarConfig, ports: &[PortConfig]) -> Result<Self, ConfigError> {
        Ok(Self::with_settings(cfg.settings(node, ports)?))
    }

    /// A SAR from validated settings.
    pub fn with_settings(s: Settings) -> Self {
        let mut own6 = HashMap::new();
        let mut own4 = Vec::new();
        for (i, p) in s.ports.iter().enumerate() {
            for (a, _) in &p.v6 {
                own6.entry(*a).or_insert(i);
            }
            own4.extend(p.v4.iter().copied());
        }
        let link_of = s
            .neighbors
            .iter()
            .enumerate()
            .map(|(i, n)| ((n.port, n.addr), LinkId(i as u32)))
            .collect();
        let table = Table::new(s.routes.iter().copied());
        Self {
            icmp: RateLimit::new(s.icmp_per_s, s.icmp_burst, Instant::ZERO),
            udp: vec![None; s.ports.len()],
            s,
            core: None,
            own6,
            own4,
            link_of,
            backlog: VecDeque::new(),
            table,
            table_key: None,
            outq: VecDeque::new(),
            parked: BTreeMap::new(),
            parked_len: 0,
            gateway_at: Instant::ZERO,
            sag_at: None,
            backlog_at: None,
            reasm: Reassembler::default(),
            frag_id: 0,
            gw: None,
            dns: None,
            link_local: HashMap::new(),
            rx_encap: false,
        }
    }

    /// A SAG (role `sag`): a SAR that originates `*` for itself and serves
    /// what reaches it from DNS, its proxy and other domains' SAGs.
    pub fn new_sag(node: &str, cfg: &SarConfig, ports: &[PortConfig]) -> Result<Self, ConfigError> {
        Ok(Self::with_settings(cfg.sag_settings(node, ports)?))
    }

    /// The gateway, for a SAG once started.
    pub const fn gateway(&self) -> Option<&Gateway> {
        self.gw.as_ref()
    }

    /// The core, once started.
    pub const fn core(&self) -> Option<&Sar> {
        self.core.as_ref()
    }

    /// The settings.
    pub const fn settings(&self) -> &Settings {
        &self.s
    }

    /// The routing table.
    pub const fn table(&self) -> &Table {
        &self.table
    }

    /// Frames parked for neighbour resolution.
    pub const fn parked(&self) -> usize {
        self.parked_len
    }

    // ---- the data path ---------------------------------------------------

    fn ipv6(&mut self, cx: &mut FrameContext<'_>, port: usize, frame: &mut Vec<u8>) -> Verdict {
        let Some(h) = frame.get(ETH_LEN..ETH_LEN + IPV6_LEN) else {
            return Verdict::Drop("malformed_truncated");
        };
        if h[0] >> 4 != 6 {
            return Verdict::Drop("malformed_ipv6");
        }
        let end = ETH_LEN + IPV6_LEN + usize::from(u16::from_be_bytes([h[4], h[5]]));
        if end > frame.len() {
            return Verdict::Drop("malformed_truncated");
        }
        frame.truncate(end); // Ethernet padding
        let src = addr_at(frame, ETH_LEN + 8);
        if src.is_unicast_link_local() {
            self.learn_link_local(port, src, frame);
        }
        let dst = addr_at(frame, ETH_LEN + 24);
        if dst.is_multicast() {
            return pass(frame);
        }
        if let Some(&owner) = self.own6.get(&dst) {
            if self.gw.is_some() && encap::is_encapsulated(frame) {
                return self.decapsulate(cx, port, frame);
            }
            if self.s.ports[port].facing == Facing::Sars
                && frame[ETH_LEN + 6] == u8::from(IpProtocol::Ipv6Frag)
                && frame.get(ETH_LEN + IPV6_LEN) == Some(&u8::from(IpProtocol::Udp))
            {
                return self.reassemble(cx, port, frame);
            }
            let Ok(layout) = edit::walk(frame) else {
                return Verdict::Drop("malformed_ipv6");
            };
            if let Some(v) = self.rosa(cx, port, frame, &layout) {
                return v;
            }
            if let Some(gw) = self.gw.as_mut() {
                let v = gw.plain(cx.now, frame);
                export_gw(gw, cx.stats);
                match v {
                    proxy::Verdict::Forward => {
                        return self.route(cx.now, cx.stats, port, frame, None, 0);
                    }
                    // Counted by the proxy.
                    proxy::Verdict::Drop(_) => return Verdict::Consume,
                    proxy::Verdict::NotOurs => {}
                }
            }
            return self.deliver(cx.out, port, owner, frame);
        }
        if dst.is_unicast_link_local() {
            return Verdict::Drop("sar.link_local_destination");
        }
        self.route(cx.now, cx.stats, port, frame, None, 0)
    }

    /// Role `sag`: a request or response another domain's SAG sent inside
    /// UDP 7471: handled as if it had come as it is inside.
    fn decapsulate(
        &mut self,
        cx: &mut FrameContext<'_>,
        port: usize,
        frame: &mut Vec<u8>,
    ) -> Verdict {
        if self.rx_encap {
            return Verdict::Drop("sag.encap_nested");
        }
        match encap::decapsulate(frame) {
            Ok((inner, _)) => {
                cx.stats.bump("sag.encap_rx");
                *frame = inner;
                self.rx_encap = true;
                let v = self.ipv6(cx, port, frame);
                self.rx_encap = false;
                v
            }
            Err(e) => Verdict::Drop(e.reason()),
        }
    }

    /// Remember the MAC of a link-local source on `port` (at most
    /// [`MAX_LINK_LOCAL`], an arbitrary one makes room).
    fn learn_link_local(&mut self, port: usize, src: Ipv6Addr, frame: &[u8]) {
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

    /// A fragment of a UDP datagram to us on a SAR port: an IGP datagram
    /// too big for the link, which smoltcp could not reassemble.
    fn reassemble(&mut self, cx: &mut FrameContext<'_>, port: usize, frame: &[u8]) -> Verdict {
        let d = match self.reasm.push(cx.now, frame) {
            Ok(Some(d)) => d,
            Ok(None) => return Verdict::Consume,
            Err(e) => return Verdict::Drop(e.reason()),
        };
        if d.dport != wire_igp::PORT {
            return Verdict::Drop("sar.igp_reassembled_other_port");
        }
        let Some(&link) = self.link_of.get(&(port, d.src)) else {
            return Verdict::Drop("sar.igp_unknown_neighbor");
        };
        let Some(core) = self.core.as_mut() else {
            return Verdict::Consume;
        };
        cx.stats.bump("sar.igp_rx_reassembled");
        core.handle_igp(cx.now, link, &d.payload);
        export(core, cx.stats);
        Verdict::Consume
    }

    /// A packet for one of our addresses: to the smoltcp of the port that
    /// owns it.
    fn deliver(&self, out: &mut Outbox, port: usize, owner: usize, frame: &mut Vec<u8>) -> Verdict {
        if owner == port {
            return pass(frame);
        }
        if let Err(reason) = check_frame(frame) {
            return Verdict::Drop(reason);
        }
        frame[0..6].copy_from_slice(&self.s.ports[owner].mac.0);
        out.inject(owner, Direction::ToStack, std::mem::take(frame));
        Verdict::Consume
    }

    /// Forward an IPv6 packet by the table. `orig` is the packet as it
    /// arrived when the SAR rewrote it (ICMPv6 errors quote and answer
    /// that), `growth` what the rewrite added.
    fn route(
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
        if frame.len() - ETH_LEN > self.s.mtu {
            let mtu = self.s.mtu.saturating_sub(growth).max(icmp::MIN_MTU) as u32;
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
        Verdict::Consume
    }

    /// Send the ICMPv6 error `kind` about `frame` (an Ethernet frame as it
    /// arrived on `in_port`), rate-limited; the source is `in_port`'s
    /// address, so a traceroute sees the interface it came in on.
    fn icmp_error(
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
        let from = self.s.ports[in_port]
            .v6
            .iter()
            .map(|(a, _)| *a)
            .find(|a| !a.is_unicast_link_local())
            .unwrap_or(self.s.core.igp.address);
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

    /// A packet for us carrying a ROSA option: the core decides, the shim
    /// edits. `None`: no ROSA option, deliver it to smoltcp.
    fn rosa(
        &mut self,
        cx: &mut FrameContext<'_>,
        port: usize,
        frame: &mut Vec<u8>,
        layout: &Layout,
    ) -> Option<Verdict> {
        let at = layout.dest_opts.as_ref()?;
        let data = match rosa_option(&frame[at.range.clone()], at.range.start - ETH_LEN) {
            Ok(found) => found?,
            Err(refusal) => {
                if let OptionRefusal::Unrecognized {
                    pointer,
                    icmp: true,
                } = refusal
                {
                    let kind = ErrorKind::UnrecognizedOption { pointer };
                    self.icmp_error(cx.now, cx.stats, kind, port, frame);
                }
                return Some(Verdict::Drop(refusal.reason()));
            }
        };
        let core = self.core.as_mut()?;
        if layout.fragment != Fragment::Whole {
            return Some(Verdict::Drop("sar.rosa_fragment"));
        }
        let mut msg = match Message::from_bytes(&data) {
            Ok(m) => m,
            // Inside an option (≤ 255 octets) only a name can be too long.
            Err(WireError::TooLong) => return Some(Verdict::Drop("sar.rosa_name_too_long")),
            Err(_) => return Some(Verdict::Drop("sar.rosa_malformed")),
        };
        // The codec keeps unknown entry types (so they survive a round
        // trip); a SAR refuses them: it cannot know what an entry it does
        // not understand would ask of it, and an announcement is installed
        // only whole.
        if msg
            .entries
            .iter()
            .any(|e| matches!(e, Entry::Unknown { .. }))
        {
            return Some(Verdict::Drop("sar.rosa_unknown_entry"));
        }
        let src = addr_at(frame, ETH_LEN + 8);
        let dst = addr_at(frame, ETH_LEN + 24);
        let mut kind = match self.s.ports[port].facing {
            Facing::Clients => PortKind::Client,
            Facing::Sars => PortKind::Sar,
        };
        if let Some(m) = with_default_policy(&self.s, src, &msg) {
            msg = m;
        }
        if let Some(gw) = self.gw.as_mut() {
            let encap = self.rx_encap;
            match take_handover(gw, cx.now, frame, &mut msg, self.s.core.igp.address, encap) {
                Ok(true) => kind = PortKind::Client,
                Ok(false) => {}
                Err(reason) => {
                    export_gw(gw, cx.stats);
                    return Some(Verdict::Drop(reason));
                }
            }
            export_gw(gw, cx.stats);
        }
        let view = PacketView {
            src: IpAddr::V6(src),
            dst: IpAddr::V6(dst),
            rosa: &msg,
            port: kind,
        };
        let action = core.decide(cx.now, &view);
        export(core, cx.stats);
        let me = IpAddr::V6(core.address());
        if let Some(v) = self.hand_to_gateway(cx, port, frame, &msg, &action, me) {
            return Some(v);
        }
        let (target, fill) = match action {
            Action::Consumed => return Some(Verdict::Consume),
            Action::Drop(reason) => {
                if reason == DropReason::NoRoute && msg.kind == MessageKind::Request {
                    self.icmp_error(cx.now, cx.stats, ErrorKind::NoRoute, port, frame);
                }
                // The core counted it (drop.sar.<reason>).
                return Some(Verdict::Consume);
            }
            Action::NotForUs => return Some(self.route(cx.now, cx.stats, port, frame, None, 0)),
            Action::ToInstance { instance, fill, .. } | Action::DeliverLocal { instance, fill } => {
                (instance, fill)
            }
            Action::ToNextSar { sar, fill, .. } => (sar, fill),
            Action::ResponseToIngress { ingress } => (ingress, Fill::default()),
            Action::ResponseToClient { client } => {
                if let Some(v) = self.give_back(cx, port, frame, &msg, me) {
                    return Some(v);
                }
                (client, Fill::default())
            }
        };
        Some(self.rewrite(cx, port, frame, &msg, fill, target, me, false))
    }

    /// Fill the option's entries, set destination `target` and source `me`,
    /// and route the result (inside UDP 7471 to `target` if `encap`).
    #[allow(clippy::too_many_arguments)]
    fn rewrite(
        &mut self,
        cx: &mut FrameContext<'_>,
        port: usize,
        frame: &mut Vec<u8>,
        msg: &Message,
        fill: Fill,
        target: IpAddr,
        me: IpAddr,
        encap: bool,
    ) -> Verdict {
        let IpAddr::V6(target6) = target else {
            return Verdict::Drop("sar.rosa_ipv4_target");
        };
        if self.own6.contains_key(&target6) {
            return Verdict::Drop("sar.rosa_target_is_us");
        }
        let orig = frame.clone();
        if fill != Fill::default() {
            let mut m = msg.clone();
            if let Some(c) = fill.client {
                m.set(Entry::Client(c));
            }
            if let Some(i) = fill.ingress {
                m.set(Entry::Ingress(i));
            }
            let Ok(bytes) = m.to_bytes() else {
                return Verdict::Drop("sar.rosa_too_long");
            };
            let Ok(opt) = OptionRepr::new(OptionType::Rosa, &bytes) else {
                return Verdict::Drop("sar.rosa_too_long");
            };
            if edit::insert_dest_opts(frame, &[opt]).is_err() {
                return Verdict::Drop("sar.rosa_edit_failed");
            }
        }
        if edit::rewrite_addr(frame, AddrField::Dst, target).is_err()
            || edit::rewrite_addr(frame, AddrField::Src, me).is_err()
        {
            *frame = orig;
            return Verdict::Drop("sar.rosa_edit_failed");
        }
        cx.stats.bump("sar.rosa_rewritten");
        if let (true, IpAddr::V6(me6)) = (encap, me) {
            let Some(f) = encap::encapsulate(frame, me6, target6) else {
                *frame = orig;
                return Verdict::Drop("sag.encap_too_big");
            };
            cx.stats.bump("sag.encap_tx");
            *frame = f;
        }
        let growth = frame.len().saturating_sub(orig.len());
        self.route(cx.now, cx.stats, port, frame, Some(&orig), growth)
    }

    /// A SAG's request whose FIB pick is `*`, that is us: the gateway
    /// takes it. `None`: not such a request.
    fn hand_to_gateway(
        &mut self,
        cx: &mut FrameContext<'_>,
        port: usize,
        frame: &mut Vec<u8>,
        msg: &Message,
        action: &Action,
        me: IpAddr,
    ) -> Option<Verdict> {
        let gw = self.gw.as_mut()?;
        let (Action::ToInstance { instance, fill, .. } | Action::DeliverLocal { instance, fill }) =
            *action
        else {
            return None;
        };
        if instance != me || msg.kind != MessageKind::Request {
            return None;
        }
        let client = fill.client.or(msg.client());
        let ingress = fill.ingress.or(msg.ingress());
        let (Some(IpAddr::V6(client)), Some(IpAddr::V6(ingress)), Some(service)) =
            (client, ingress, msg.service())
        else {
            cx.stats.drop("sag.not_ipv6");
            return Some(Verdict::Consume);
        };
        let taken = Taken {
            port,
            frame: std::mem::take(frame),
            client,
            ingress,
            service: service.clone(),
            msg: msg.clone(),
            stage: sag::Stage::default(),
        };
        let done = gw.handle_request(cx.now, taken);
        export_gw(gw, cx.stats);
        if let Some(d) = done {
            self.finish(cx.now, cx.stats, d);
        }
        Some(Verdict::Consume)
    }

    /// Role `sag`: the response to a request another domain's SAG handed
    /// us (its SAG entry is not ours): back to that SAG, with the client's
    /// own Ingress again. `None`: not such a response.
    fn give_back(
        &mut self,
        cx: &mut FrameContext<'_>,
        port: usize,
        frame: &mut Vec<u8>,
        msg: &Message,
        me: IpAddr,
    ) -> Option<Verdict> {
        let gw = self.gw.as_mut()?;
        let sag = msg.sag().filter(|s| *s != me)?;
        let key = flow_key(frame, msg, false);
        let back = key.and_then(|k| gw.handover_back(cx.now, &k));
        export_gw(gw, cx.stats);
        let Some(back) = back else {
            if key.is_none() {
                cx.stats.drop("sag.handover_malformed");
            }
            return Some(Verdict::Consume);
        };
        let fill = Fill {
            client: None,
            ingress: Some(back.ingress),
        };
        Some(self.rewrite(cx, port, frame, msg, fill, sag, me, back.encap))
    }

    /// A request the gateway is done with: routed toward its server, or
    /// refused with Destination Unreachable (address unreachable) to its
    /// client.
    fn finish(&mut self, now: Instant, stats: &mut Counters, d: Done) {
        let Done {
            mut taken,
            result,
            encap_to,
        } = d;
        match result {
            Ok(()) => {
                if let Some(to) = encap_to {
                    let me = self.s.core.igp.address;
                    let Some(f) = encap::encapsulate(&taken.frame, me, to) else {
                        stats.drop("sag.encap_too_big");
                        return;
                    };
                    stats.bump("sag.encap_tx");
                    taken.frame = f;
                }
                // Queued on the routed-frame queue; a refusal is counted.
                let _ = self.route(now, stats, taken.port, &mut taken.frame, None, 0);
            }
            Err(_) => {
                let mut about = taken.frame;
                if edit::rewrite_addr(&mut about, AddrField::Src, IpAddr::V6(taken.client)).is_ok()
                {
                    self.icmp_error(
                        now,
                        stats,
                        ErrorKind::AddressUnreachable,
                        taken.port,
                        &about,
                    );
                }
            }
        }
    }

    /// Role `sag`: DNS answers in, queries out, gateway timers.
    fn pump_gateway(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(gw) = self.gw.as_mut() else {
            return false;
        };
        let mut any = false;
        let mut done = Vec::new();
        if let Some((port, h)) = self.dns {
            let server = self.s.gateway.as_ref().and_then(|g| g.dns_server);
            let sock = cx.ports[port].sockets.get_mut::<udp::Socket>(h);
            for _ in 0..UDP_PACKETS {
                match sock.recv() {
                    Ok((data, meta)) => {
                        any = true;
                        let from = (meta.endpoint.addr, meta.endpoint.port);
                        if server.is_some_and(|(a, p)| from == (IpAddress::Ipv6(a), p)) {
                            done.extend(gw.handle_dns(cx.now, data));
                        } else {
                            cx.stats.drop("sag.dns_not_from_server");
                        }
                    }
                    Err(udp::RecvError::Truncated) => cx.stats.drop("sag.dns_truncated"),
                    Err(udp::RecvError::Exhausted) => break,
                }
            }
            while let Some(q) = gw.poll_dns() {
                any = true;
                let Some((a, p)) = server else { break };
                match sock.send_slice(&q, (IpAddress::Ipv6(a), p)) {
                    Ok(()) => cx.stats.bump("sag.dns_tx"),
                    // The retry timer asks again.
                    Err(_) => cx.stats.drop("sag.dns_send_failed"),
                }
            }
        }
        if gw.poll_timeout().is_some_and(|t| t <= cx.now) {
            any = true;
            done.extend(gw.handle_timeout(cx.now));
        }
        export_gw(gw, cx.stats);
        for d in done {
            self.finish(cx.now, cx.stats, d);
        }
        any
    }

    fn sag_json(&self, now: Instant) -> Value {
        let Some(gw) = &self.gw else {
            return json!({ "error": "not a SAG (role sag)" });
        };
        let r = gw.resolver();
        let mut cache: Vec<Value> = r
            .cache()
            .take(MAX_LISTED)
            .map(|(name, c)| {
                let answer = match c.answer {
                    sag::dns::Answer::V6(a) => a.to_string(),
                    sag::dns::Answer::V4Only(a) => format!("ipv4-only {a}"),
                    sag::dns::Answer::NoAddress => "no address".into(),
                    sag::dns::Answer::Failed => "failed".into(),
                };
                json!({
                    "name": name,
                    "answer": answer,
                    "ttl_s": (c.expires - now.min(c.expires)).secs(),
                    "live": c.expires > now,
                })
            })
            .collect();
        cache.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
        let flows: Vec<Value> = gw
            .proxy()
            .flows()
            .take(MAX_LISTED)
            .map(|f| {
                json!({
                    "proto": format!("{}", f.key.proto),
                    "client": format!("[{}]:{}", f.key.client, f.key.client_port),
                    "service_port": f.key.service_port,
                    "service": display_name(&f.service),
                    "server": f.server.to_string(),
                    "proxy_port": f.proxy_port,
                    "ingress": f.ingress.to_string(),
                    "direct": f.direct,
                    "state": match f.state {
                        proxy::FlowState::Open => "open",
                        proxy::FlowState::Closed(proxy::CloseCause::Fin) => "closed_fin",
                        proxy::FlowState::Closed(proxy::CloseCause::Rst) => "closed_rst",
                    },
                    "idle_ms": (now - f.last).total_millis(),
                })
            })
            .collect();
        let handovers: Vec<Value> = gw
            .handovers()
            .take(MAX_LISTED)
            .map(|(k, h)| {
                json!({
                    "proto": format!("{}", k.proto),
                    "client": format!("[{}]:{}", k.client, k.client_port),
                    "service_port": k.service_port,
                    "ingress": h.ingress.to_string(),
                    "sag": h.sag.to_string(),
                    "udp": h.encap,
                    "idle_ms": (now - h.last).total_millis(),
                })
            })
            .collect();
        json!({
            "dns_server": self.s.gateway.as_ref().and_then(|g| g.dns_server).map(|(a, p)| format!("[{a}]:{p}")),
            "handovers": handovers,
            "cached": cache.len(),
            "cache": cache,
            "resolving": r.pending(),
            "waiting": gw.waiting(),
            "flows": flows.len(),
            "flow_list": flows,
        })
    }

    // ---- the poll side ---------------------------------------------------

    /// IGP datagrams from the SAR ports' UDP sockets into the core.
    fn read_igp(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(core) = self.core.as_mut() else {
            return false;
        };
        let mut any = false;
        for (port, h) in self.udp.iter().enumerate() {
            let Some(h) = *h else { continue };
            let Some(p) = cx.ports.get_mut(port) else {
                continue;
            };
            let sock = p.sockets.get_mut::<udp::Socket>(h);
            for _ in 0..UDP_PACKETS {
                match sock.recv() {
                    Ok((data, meta)) => {
                        any = true;
                        let IpAddress::Ipv6(from) = meta.endpoint.addr else {
                            cx.stats.drop("sar.igp_not_ipv6");
                            continue;
                        };
                        match self.link_of.get(&(port, from)) {
                            Some(&link) => core.handle_igp(cx.now, link, data),
                            None => cx.stats.drop("sar.igp_unknown_neighbor"),
                        }
                    }
                    Err(udp::RecvError::Truncated) => cx.stats.drop("sar.igp_truncated"),
                    Err(udp::RecvError::Exhausted) => break,
                }
            }
        }
        any
    }

    /// The core's datagrams into the UDP sockets; the routing table after
    /// SPF; the core's counters into the node's.
    fn pump(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(core) = self.core.as_mut() else {
            return false;
        };
        let mut any = false;
        while let Some(t) = core.poll_transmit() {
            any = true;
            if self.backlog.len() >= MAX_BACKLOG {
                cx.stats.drop("sar.igp_backlog_full");
                continue;
            }
            self.backlog.push_back(t);
        }
        self.backlog_at = None;
        while let Some(t) = self.backlog.front() {
            let Some(n) = self.s.neighbors.get(t.to_neighbor.0 as usize).copied() else {
                self.backlog.pop_front();
                continue;
            };
            if t.bytes.len() + UDP6_OVERHEAD > self.s.mtu {
                // smoltcp 0.14 does not fragment IPv6: we do.
                let Some(t) = self.backlog.pop_front() else {
                    break;
                };
                self.send_fragmented(cx.stats, n, &t.bytes);
                continue;
            }
            let Some(h) = self.udp.get(n.port).copied().flatten() else {
                self.backlog.pop_front();
                continue;
            };
            cx.resolve(n.port, IpAddress::Ipv6(n.addr));
            let sock = cx.ports[n.port].sockets.get_mut::<udp::Socket>(h);
            match sock.send_slice(&t.bytes, (IpAddress::Ipv6(n.addr), wire_igp::PORT)) {
                Ok(()) => {
                    cx.stats.bump("sar.igp_tx");
                    self.backlog.pop_front();
                }
                Err(udp::SendError::BufferFull) => {
                    self.backlog_at = Some(cx.now + BACKLOG_RETRY);
                    break;
                }
                Err(udp::SendError::Unaddressable) => {
                    cx.stats.drop("sar.igp_unaddressable");
                    self.backlog.pop_front();
                }
            }
        }
        self.refresh_table(cx.now);
        if let Some(core) = self.core.as_mut() {
            export(core, cx.stats);
        }
        any
    }

    /// An IGP datagram larger than the link MTU, in IPv6 fragments from our
    /// address on the neighbour's link, through the routed-frame queue.
    fn send_fragmented(&mut self, stats: &mut Counters, n: Neighbor, bytes: &[u8]) {
        let src = self.s.ports[n.port]
            .v6
            .iter()
            .find(|(a, l)| Prefix::new(*a, *l).contains(n.addr))
            .map(|(a, _)| *a);
        let Some(src) = src else {
            stats.drop("sar.igp_unaddressable");
            return;
        };
        self.frag_id = self.frag_id.wrapping_add(1);
        let id = self.frag_id ^ self.s.core.igp.router_id.0.rotate_left(16);
        let frames = frag::fragment_udp(
            src,
            n.addr,
            wire_igp::PORT,
            wire_igp::PORT,
            bytes,
            self.s.mtu,
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
    /// changed.
    fn refresh_table(&mut self, now: Instant) {
        let Some(core) = self.core.as_ref() else {
            return;
        };
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
        let mut routes = self.s.routes.clone();
        for (rid, route) in igp.routes() {
            if *rid == me {
                continue;
            }
            let Some(n) = route
                .link
                .and_then(|l| self.s.neighbors.get(l.0 as usize))
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

    /// Routed frames to the wire once their next hop's MAC is known; parked
    /// ones retried, resolved again, or timed out.
    fn send_out(&mut self, cx: &mut Context<'_>) -> bool {
        let mut any = false;
        for _ in 0..2 {
            while let Some(o) = self.outq.pop_front() {
                any = true;
                let hop = IpAddress::Ipv6(o.hop);
                match cx
                    .ports
                    .get(o.port)
                    .and_then(|p| p.neighbors().lookup(&hop))
                {
                    Some(mac) => self.emit(cx.out, o.port, mac, o.frame),
                    None => self.park(cx, o),
                }
            }
            let now = cx.now;
            let keys: Vec<(usize, Ipv6Addr)> = self.parked.keys().copied().collect();
            for k in keys {
                let mac = cx
                    .ports
                    .get(k.0)
                    .and_then(|p| p.neighbors().lookup(&IpAddress::Ipv6(k.1)));
                let Some(mut parked) = self.parked.remove(&k) else {
                    continue;
                };
                if let Some(mac) = mac {
                    any = true;
                    self.parked_len -= parked.frames.len();
                    for (f, _) in parked.frames {
                        self.emit(cx.out, k.0, mac, f);
                    }
                    continue;
                }
                while parked.frames.front().is_some_and(|(_, d)| *d <= now) {
                    let Some((f, _)) = parked.frames.pop_front() else {
                        break;
                    };
                    any = true;
                    self.parked_len -= 1;
                    cx.stats.drop("sar.neighbor_unresolved");
                    self.icmp_error(now, cx.stats, ErrorKind::AddressUnreachable, k.0, &f);
                }
                if parked.frames.is_empty() {
                    continue;
                }
                if parked.asked.is_none_or(|t| now >= t + ASK_INTERVAL) {
                    parked.asked = Some(now);
                    cx.resolve(k.0, IpAddress::Ipv6(k.1));
                }
                self.parked.insert(k, parked);
            }
            if self.outq.is_empty() {
                break;
            }
        }
        any
    }

    fn park(&mut self, cx: &mut Context<'_>, o: Out) {
        if self.parked_len >= self.s.max_pending {
            cx.stats.drop("sar.pending_full");
            return;
        }
        let deadline = cx.now + self.s.resolve_timeout;
        let entry = self.parked.entry((o.port, o.hop)).or_default();
        entry.frames.push_back((o.frame, deadline));
        self.parked_len += 1;
        cx.stats.bump("sar.parked");
        if entry.asked.is_none() {
            entry.asked = Some(cx.now);
            cx.resolve(o.port, IpAddress::Ipv6(o.hop));
        }
    }

    fn emit(&self, out: &mut Outbox, port: usize, mac: EthernetAddress, mut frame: Vec<u8>) {
        frame[0..6].copy_from_slice(&mac.0);
        frame[6..12].copy_from_slice(&self.s.ports[port].mac.0);
        out.inject(port, Direction::ToWire, frame);
    }

    /// Tell every port's smoltcp that the virtual gateway is at its own MAC.
    fn bind_gateway(&mut self, cx: &mut Context<'_>) {
        for (i, p) in self.s.ports.iter().enumerate() {
            if let Some(f) = gateway_advert(p.mac, p.v6.first().map(|(a, _)| *a)) {
                cx.out.inject(i, Direction::ToStack, f);
            }
        }
        self.gateway_at = cx.now + GATEWAY_REFRESH;
    }

    /// Role `sag`: the gateway and its DNS socket, bound to our address on
    /// the port that holds it.
    fn start_gateway(&mut self, cx: &mut Context<'_>) {
        let Some(g) = self.s.gateway.as_ref() else {
            return;
        };
        let me = self.s.core.igp.address;
        self.gw = Some(Gateway::new(g, me, cx.now));
        let Some(&port) = self.own6.get(&me) else {
            return;
        };
        let Some(stack) = cx.ports.get_mut(port) else {
            return;
        };
        let buf =
            || udp::PacketBuffer::new(vec![udp::PacketMetadata::EMPTY; 64], vec![0; 64 * 1024]);
        let mut sock = udp::Socket::new(buf(), buf());
        let bound = sock.bind(IpListenEndpoint {
            addr: Some(IpAddress::Ipv6(me)),
            port: sag::DNS_LOCAL_PORT,
        });
        if bound.is_err() {
            log::error!("{}: cannot bind UDP {}", self.s.name, sag::DNS_LOCAL_PORT);
            return;
        }
        self.dns = Some((port, stack.sockets.add(sock)));
    }

    /// Announce `*` with the configured SAG as its instance, as if the SAG
    /// had announced it here (signed with our first announcement key).
    fn announce_sag(&mut self, now: Instant) {
        let (Some(sag), Some(core)) = (self.s.sag, self.core.as_mut()) else {
            return;
        };
        let lifetime = self.s.core.default_lifetime_s.max(3);
        let mut msg = Message {
            kind: MessageKind::Announcement,
            entries: vec![
                Entry::Service(ServiceName::WILDCARD),
                Entry::Instance(IpAddr::V6(sag)),
                Entry::Constraint(svcroute_stack::wire::rosa::Constraints(vec![
                    Constraint::LifetimeS(lifetime),
                ])),
            ],
        };
        if let Some((id, secret)) = self.s.announce_keys.iter().next() {
            if msg.sign(*id, secret, sag).is_err() {
                log::warn!("{}: cannot sign the SAG announcement", self.s.name);
            }
        }
        if let Err(e) = core.handle_announcement(now, IpAddr::V6(sag), &msg) {
            log::warn!("{}: SAG announcement refused: {e:?}", self.s.name);
        }
        self.sag_at = Some(now + Duration::from_secs(u64::from(lifetime / 3).max(1)));
    }

    // ---- control ---------------------------------------------------------

    fn fib_json(&self) -> Value {
        let Some(core) = &self.core else {
            return json!([]);
        };
        let nhib = core.nhib();
        let list: Vec<Value> = core
            .fib()
            .iter()
            .take(MAX_LISTED)
            .map(|(name, e)| {
                json!({
                    "service": display_name(name),
                    "steering": e.steering.to_string(),
                    "instances": e.members.iter().map(|m| json!({
                        "addr": m.addr.to_string(),
                        "origin": m.origin.0,
                        "reachable": nhib.slot_cost(m.slot).is_some(),
                        "cost": nhib.slot_cost(m.slot),
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        json!({ "services": core.fib().len(), "fib": list })
    }

    fn instances_json(&self, now: Instant) -> Value {
        let Some(core) = &self.core else {
            return json!([]);
        };
        let me = core.router_id();
        let list: Vec<Value> = core
            .nhib()
            .iter()
            .take(MAX_LISTED)
            .map(|(_, i)| {
                json!({
                    "service": display_name(&i.name),
                    "addr": i.addr.to_string(),
                    "origin": i.origin.0,
                    "local": i.origin == me,
                    "expires_in_s": if i.expires > now { (i.expires - now).secs() } else { 0 },
                    "steering": format!("{:?}", i.steering),
                    "capability": i.metrics.capability,
                    "load": i.metrics.load,
                    "latency_us": i.metrics.latency_us,
                    "preference": i.metrics.preference,
                })
            })
            .collect();
        json!({ "instances": core.nhib().len(), "list": list })
    }

    fn neighbors_json(&self, names: &[String]) -> Value {
        let Some(core) = &self.core else {
            return json!([]);
        };
        let list: Vec<Value> = core
            .igp()
            .neighbors()
            .iter()
            .map(|n| {
                let cfg = self.s.neighbors.get(n.link.0 as usize);
                json!({
                    "link": n.link.0,
                    "port": cfg.and_then(|c| names.get(c.port)),
                    "addr": cfg.map(|c| c.addr.to_string()),
                    "cost": n.cost,
                    "state": match n.state {
                        NeighborState::Down => "down",
                        NeighborState::Init => "init",
                        NeighborState::Full => "full",
                    },
                    "router_id": n.router_id.map(|r| r.0),
                    "srtt_us": n.srtt_us,
                    "unacked": n.unacked,
                })
            })
            .collect();
        Value::Array(list)
    }

    fn routes_json(&self, names: &[String]) -> Value {
        let table: Vec<Value> = self
            .table
            .routes()
            .iter()
            .map(|r| {
                let mut v = json!({
                    "prefix": r.prefix.to_string(),
                    "port": names.get(r.port),
                    "via": r.via.map(|a| a.to_string()),
                    "origin": r.origin.as_str(),
                });
                if let Origin::Igp { cost, router } = r.origin {
                    v["cost"] = json!(cost);
                    v["router"] = json!(router.0);
                }
                v
            })
            .collect();
        let sars: Vec<Value> = self
            .core
            .iter()
            .flat_map(|c| c.igp().routes().iter())
            .map(|(rid, r)| {
                json!({
                    "router": rid.0,
                    "addr": r.addr.to_string(),
                    "cost": r.cost,
                    "next_hop": r.next_hop.0,
                    "next_hop_addr": r.next_hop_addr.to_string(),
                    "link": r.link.map(|l| l.0),
                })
            })
            .collect();
        json!({ "table": table, "sars": sars })
    }

    fn lsdb_json(&self, now: Instant) -> Value {
        let Some(core) = &self.core else {
            return json!([]);
        };
        let igp = core.igp();
        let list: Vec<Value> = igp
            .lsas(now)
            .take(MAX_LISTED)
            .map(|l| {
                let body = match &l.body {
                    LsaBody::RouterLinks(rl) => json!({
                        "address": rl.address.to_string(),
                        "links": rl.links.iter().map(|k| json!({"neighbor": k.neighbor.0, "cost": k.cost})).collect::<Vec<_>>(),
                        "prefixes": rl.prefixes.iter().map(|p| format!("{}/{}", p.addr, p.len)).collect::<Vec<_>>(),
                    }),
                    LsaBody::Services(s) => json!({
                        "services": s.iter().map(|a| json!({
                            "service": display_name(&a.name),
                            "instance": a.instance.to_string(),
                            "lifetime_s": a.lifetime_s,
                        })).collect::<Vec<_>>(),
                    }),
                    LsaBody::AppMetrics(e) => json!({ "app_metrics": e.len() }),
                    LsaBody::Sticky(e) => json!({ "sticky": e.len() }),
                };
                json!({
                    "origin": l.origin.0,
                    "kind": format!("{:?}", l.body.kind()),
                    "part": l.part,
                    "seq": l.seq,
                    "age": l.age,
                    "body": body,
                })
            })
            .collect();
        json!({
            "lsas": igp.lsdb_len(),
            "digest": format!("{:016x}", igp.lsdb_digest(now)),
            "list": list,
        })
    }
}

impl Role for SarNode {
    fn name(&self) -> &'static str {
        if self.s.gateway.is_some() {
            "sag"
        } else {
            "sar"
        }
    }

    fn start(&mut self, cx: &mut Context<'_>) {
        let now = cx.now;
        let mut core = Sar::new(self.s.core.clone(), now);
        for (i, n) in self.s.neighbors.iter().enumerate() {
            core.link_up(now, LinkId(i as u32), n.cost);
        }
        self.core = Some(core);
        self.icmp = RateLimit::new(self.s.icmp_per_s, self.s.icmp_burst, now);
        for (i, p) in self.s.ports.iter().enumerate() {
            let Some(stack) = cx.ports.get_mut(i) else {
                continue;
            };
            let routes = stack.iface.routes_mut();
            routes.remove_default_ipv6_route();
            if routes.add_default_ipv6_route(VIRTUAL_GATEWAY).is_err() {
                log::warn!(
                    "{}: port {}: no room for the default route",
                    self.s.name,
                    p.name
                );
            }
            if p.facing == Facing::Sars {
                let rx = udp::PacketBuffer::new(
                    vec![udp::PacketMetadata::EMPTY; UDP_PACKETS],
                    vec![0; UDP_BYTES],
                );
                let tx = udp::PacketBuffer::new(
                    vec![udp::PacketMetadata::EMPTY; UDP_PACKETS],
                    vec![0; UDP_BYTES],
                );
                let mut sock = udp::Socket::new(rx, tx);
                let bound = sock.bind(IpListenEndpoint {
                    addr: None,
                    port: wire_igp::PORT,
                });
                if bound.is_err() {
                    log::error!("{}: port {}: cannot bind UDP 7470", self.s.name, p.name);
                    continue;
                }
                self.udp[i] = Some(stack.sockets.add(sock));
            }
        }
        self.bind_gateway(cx);
        self.start_gateway(cx);
        self.announce_sag(now);
        self.pump(cx);
        self.pump_gateway(cx);
        log::info!(
            "{}: SAR router {} at {} up: {} ports, {} neighbours, {} routes",
            self.s.name,
            self.s.core.igp.router_id.0,
            self.s.core.igp.address,
            self.s.ports.len(),
            self.s.neighbors.len(),
            self.table.len()
        );
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> bool {
        let now = cx.now;
        let mut any = self.read_igp(cx);
        if let Some(core) = self.core.as_mut() {
            if core.poll_timeout().is_some_and(|t| t <= now) {
                core.handle_timeout(now);
                any = true;
            }
        }
        if now >= self.gateway_at {
            self.bind_gateway(cx);
            any = true;
        }
        if self.sag_at.is_some_and(|t| now >= t) {
            self.announce_sag(now);
        }
        let expired = self.reasm.expire(now);
        if expired > 0 {
            cx.stats
                .add("drop.sar.igp_reassembly_timeout", expired as u64);
        }
        any |= self.pump_gateway(cx);
        any |= self.pump(cx);
        any |= self.send_out(cx);
        any
    }

    fn poll_at(&self, now: Instant) -> Option<Instant> {
        if !self.outq.is_empty() {
            return Some(now);
        }
        let mut at = Some(self.gateway_at);
        let mut min = |t: Option<Instant>| {
            if let Some(t) = t {
                at = Some(at.map_or(t, |a| a.min(t)));
            }
        };
        min(self.core.as_ref().and_then(Sar::poll_timeout));
        min(self.sag_at);
        min(self.gw.as_ref().and_then(Gateway::poll_timeout));
        min(self.backlog_at);
        min(self.reasm.next_deadline());
        for p in self.parked.values() {
            min(p.frames.front().map(|(_, d)| *d));
            min(p.asked.map(|t| t + ASK_INTERVAL));
        }
        at
    }

    fn validate_ingress(&self) -> bool {
        // A router forwards what it does not understand; frames for
        // smoltcp are checked on the way in (`pass`).
        false
    }

    fn ingress(&mut self, cx: &mut FrameContext<'_>, port: usize, frame: &mut Vec<u8>) -> Verdict {
        match u16::from_be_bytes([frame[12], frame[13]]) {
            0x86dd => self.ipv6(cx, port, frame),
            0x0806 => pass(frame),
            0x0800 => {
                let dst = frame
                    .get(ETH_LEN + 16..ETH_LEN + 20)
                    .map(|b| Ipv4Addr::new(b[0], b[1], b[2], b[3]));
                match dst {
                    Some(d) if d.is_broadcast() || d.is_multicast() || self.own4.contains(&d) => {
                        pass(frame)
                    }
                    Some(_) => Verdict::Drop("sar.ipv4_not_routed"),
                    None => Verdict::Drop("malformed_truncated"),
                }
            }
            0x8100 | 0x88a8 => Verdict::Drop("vlan_unsupported"),
            _ => Verdict::Drop("unknown_ethertype"),
        }
    }

    fn egress(&mut self, cx: &mut FrameContext<'_>, port: usize, frame: &mut Vec<u8>) -> Verdict {
        let Some(me) = self.s.ports.get(port) else {
            return Verdict::Pass;
        };
        if frame.len() < ETH_LEN || frame[0..6] != me.mac.0 {
            if is_gateway_solicit(frame) {
                // smoltcp forgot the binding: tell it again.
                if let Some(f) = gateway_advert(me.mac, me.v6.first().map(|(a, _)| *a)) {
                    cx.out.inject(port, Direction::ToStack, f);
                }
                return Verdict::Consume;
            }
            return Verdict::Pass;
        }
        // Sent to the virtual gateway: an off-link destination to route.
        if frame.len() < ETH_LEN + IPV6_LEN || frame[12..14] != [0x86, 0xdd] {
            return Verdict::Drop("sar.local_unroutable");
        }
        let dst = addr_at(frame, ETH_LEN + 24);
        if let Some(&owner) = self.own6.get(&dst) {
            frame[0..6].copy_from_slice(&self.s.ports[owner].mac.0);
            cx.out
                .inject(owner, Direction::ToStack, std::mem::take(frame));
            return Verdict::Consume;
        }
        if dst.is_unicast_link_local() {
            // On-link by definition, on the port that sent it (smoltcp
            // routes it to the gateway: a port has no link-local prefix).
            // An NA answering a kernel's NS sent from its link-local
            // address while its global one is tentative, for one: its MAC
            // is the one that NS came from.
            let Some(mac) = self.link_local.get(&(port, dst)).copied() else {
                return Verdict::Drop("sar.local_link_local");
            };
            cx.stats.bump("sar.local_link_local");
            frame[0..6].copy_from_slice(&mac.0);
            return Verdict::Pass;
        }
        let Some(nh) = self.table.lookup(dst) else {
            return Verdict::Drop("sar.local_no_route");
        };
        cx.stats.bump("sar.local_routed");
        self.outq.push_back(Out {
            port: nh.port,
            hop: nh.addr,
            frame: std::mem::take(frame),
        });
        Verdict::Consume
    }

    fn control(&mut self, cx: &mut Context<'_>, _id: u64, args: &[String]) -> ControlReply {
        let names: Vec<String> = cx.ports.iter().map(|p| p.name.clone()).collect();
        match args.first().map(String::as_str) {
            Some("fib") => ControlReply::Now(self.fib_json()),
            Some("instances") => ControlReply::Now(self.instances_json(cx.now)),
            Some("neighbors") => ControlReply::Now(self.neighbors_json(&names)),
            Some("routes") => ControlReply::Now(self.routes_json(&names)),
            Some("lsdb") => ControlReply::Now(self.lsdb_json(cx.now)),
            Some("sag") => ControlReply::Now(self.sag_json(cx.now)),
            Some("help") => ControlReply::Now(json!({
                "commands": {
                    "ping": "liveness and readiness",
                    "stats": "counters: sar.* events, drop.sar.* drops by reason",
                    "ports": "ports, MACs, addresses",
                    "fib": "service names and their instances",
                    "instances": "NHIB instance rows (metrics, origin, expiry)",
                    "neighbors": "IGP neighbours: state, RTT, cost",
                    "routes": "the IPv6 routing table and the route to every SAR",
                    "lsdb": "the IGP link-state database",
                    "sag": "role sag: DNS cache, names being resolved, proxied flows",
                }
            })),
            _ => ControlReply::Unknown,
        }
    }

    fn is_ready(&self) -> bool {
        self.core.is_some()
    }
}

/// Why the Destination Options header of a packet for us is refused
/// before the core sees its ROSA option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OptionRefusal {
    /// The header or one of its options does not parse.
    Malformed,
    /// Two ROSA options: which one would count is ambiguous (as two Service
    /// entries would be, docs/wire/rosa.md).
    Duplicate,
    /// An option we do not know whose action bits say discard (RFC 8200
    /// §4.2); `icmp`: answer Parameter Problem code 2 at `pointer` (bits
    /// `10`, and `11`, since the destination is our unicast address).
    Unrecognized { pointer: u32, icmp: bool },
}

impl OptionRefusal {
    /// The drop reason (`drop.sar.*`).
    const fn reason(self) -> &'static str {
        match self {
            Self::Malformed => "sar.rosa_malformed",
            Self::Duplicate => "sar.rosa_duplicate_option",
            Self::Unrecognized { .. } => "sar.dest_opts_unknown_option",
        }
    }
}

/// The ROSA option data in `hdr`, a Destination Options header that starts
/// `offset` octets into an IPv6 packet addressed to us; `Ok(None)` if it
/// has none. We are the destination, so RFC 8200 §4.2 applies to every
/// option: one we do not know whose action bits are not "skip" discards
/// the packet, whichever position it has.
fn rosa_option(hdr: &[u8], offset: usize) -> Result<Option<Vec<u8>>, OptionRefusal> {
    let hdr = ipv6opt::Packet::new_checked(hdr).map_err(|_| OptionRefusal::Malformed)?;
    let mut options = hdr.options_iter();
    let mut found = None;
    loop {
        // The options area starts 2 octets into the header.
        let pointer = u32::try_from(offset + 2 + options.position()).unwrap_or(u32::MAX);
        let Some(opt) = options.next() else {
            break;
        };
        match opt.map_err(|_| OptionRefusal::Malformed)? {
            OptionRepr::Rosa(d) => {
                if found.replace(d.as_bytes().to_vec()).is_some() {
                    return Err(OptionRefusal::Duplicate);
                }
            }
            OptionRepr::Unknown { option_type, .. } => {
                match OptionType::from(option_type).unknown_action() {
                    UnknownAction::Skip => {}
                    UnknownAction::Discard => {
                        return Err(OptionRefusal::Unrecognized {
                            pointer,
                            icmp: false,
                        })
                    }
                    UnknownAction::DiscardIcmp | UnknownAction::DiscardIcmpUnlessMulticast => {
                        return Err(OptionRefusal::Unrecognized {
                            pointer,
                            icmp: true,
                        })
                    }
                }
            }
            OptionRepr::Pad1 | OptionRepr::PadN(_) | OptionRepr::Sticky(_) => {}
        }
    }
    Ok(found)
}

/// Hand a frame to smoltcp after the structural checks the runtime would
/// have made (this role turns them off to forward what it does not parse).
fn pass(frame: &[u8]) -> Verdict {
    match check_frame(frame) {
        Ok(()) => Verdict::Pass,
        Err(reason) => Verdict::Drop(reason),
    }
}

/// Role `sag`: a request another domain's SAG handed over (a SAG entry not
/// ours) makes us its ingress. Its Ingress entry is remembered and removed,
/// so the core fills in ours and schedules as for a client of ours.
/// `Ok(true)`: taken so; `Ok(false)`: not such a request.
fn take_handover(
    gw: &mut Gateway,
    now: Instant,
    frame: &[u8],
    msg: &mut Message,
    me: Ipv6Addr,
    encap: bool,
) -> Result<bool, &'static str> {
    let me = IpAddr::V6(me);
    let Some(sag) = msg.sag().filter(|s| *s != me) else {
        return Ok(false);
    };
    if msg.kind != MessageKind::Request || msg.ingress() == Some(me) {
        return Ok(false);
    }
    let (Some(key), Some(ingress)) = (flow_key(frame, msg, true), msg.ingress()) else {
        return Err("sag.handover_malformed");
    };
    gw.handover_in(now, key, ingress, sag, encap)
        .ok_or("sag.handovers_full")?;
    msg.remove(svcroute_stack::wire::rosa::EntryType::Ingress);
    Ok(true)
}

/// The client's flow of a request (`request`: the client's port is the
/// source port) or of a response (the destination port).
fn flow_key(frame: &[u8], msg: &Message, request: bool) -> Option<sag::HandoverKey> {
    let port = msg.port()?;
    let l = edit::walk(frame).ok()?;
    if l.fragment == Fragment::Later || l.upper_protocol != port.proto {
        return None;
    }
    let at = l.upper_offset + if request { 0 } else { 2 };
    let b = frame.get(at..at + 2)?;
    Some(sag::HandoverKey {
        client: msg.client()?,
        proto: port.proto,
        client_port: u16::from_be_bytes([b[0], b[1]]),
        service_port: port.port,
    })
}

/// The gateway's counters since the last call, into the node's.
fn export_gw(gw: &mut Gateway, stats: &mut Counters) {
    for (k, v) in gw.drain_counters() {
        stats.add(k, v);
    }
}

/// The core's counters since the last call, into the node's.
fn export(core: &mut Sar, stats: &mut Counters) {
    for (k, v) in core.drain_counters() {
        stats.add(k, v);
    }
}

/// An announcement at this SAR without a mode+policy gets the configured
/// default; a good tag is re-made with the same key (the SAR holds it).
fn with_default_policy(s: &Settings, src: Ipv6Addr, msg: &Message) -> Option<Message> {
    let (mode, policy) = s.default_policy?;
    if msg.kind != MessageKind::Announcement
        || msg.constraints().and_then(|c| c.mode_policy()).is_some()
    {
        return None;
    }
    let key = if s.announce_keys.is_empty() {
        None
    } else {
        match msg.verify(src, |id| s.announce_keys.get(&id).map(Vec::as_slice)) {
            AuthCheck::Good(id) => Some(id),
            // The core refuses it and counts why.
            _ => return None,
        }
    };
    let mut m = msg.clone();
    let mut c = m.constraints().cloned().unwrap_or_default();
    c.0.insert(0, Constraint::ModePolicy { mode, policy });
    m.set(Entry::Constraint(c));
    if let Some(id) = key {
        m.sign(id, s.announce_keys.get(&id)?, src).ok()?;
    }
    m.check().ok()?;
    Some(m)
}

/// A Neighbor Advertisement, as if from the virtual gateway, binding it to
/// `mac` (the port's own) in smoltcp's cache; to `ours`, the port's address.
fn gateway_advert(mac: EthernetAddress, ours: Option<Ipv6Addr>) -> Option<Vec<u8>> {
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
fn is_gateway_solicit(frame: &[u8]) -> bool {
    frame.get(12..14) == Some(&[0x86, 0xdd][..])
        && frame.get(ETH_LEN + 6) == Some(&58)
        && frame.get(ETH_LEN + IPV6_LEN) == Some(&135)
        && frame.get(ETH_LEN + IPV6_LEN + 8..ETH_LEN + IPV6_LEN + 24)
            == Some(&VIRTUAL_GATEWAY.octets()[..])
}

/// The IPv6 address at `at` (callers checked the length).
fn addr_at(frame: &[u8], at: usize) -> Ipv6Addr {
    let mut b = [0; 16];
    b.copy_from_slice(&frame[at..at + 16]);
    Ipv6Addr::from(b)
}

fn display_name(name: &ServiceName) -> String {
    if name.is_wildcard() {
        "*".into()
    } else {
        name.to_string()
    }
}

#[cfg(test)]
mod tests {
    use svcroute_stack::wire::rosa::{Constraints, Mode, Policy};

    use super::*;

    fn settings(extra: &str) -> Settings {
        let cfg: SarConfig = toml::from_str(&format!("router_id = 1\n{extra}")).unwrap();
        let port = PortConfig {
            name: "eth0".into(),
            mac: EthernetAddress([2, 0, 0, 0, 0, 1]),
            addrs: vec!["fd00:a::1/64".parse().unwrap()],
            gateways: Vec::new(),
            mtu: 1500,
            max_burst: None,
            random_seed: None,
        };
        cfg.settings("s1", &[port]).unwrap()
    }

    fn announcement(constraints: Vec<Constraint>) -> Message {
        Message {
            kind: MessageKind::Announcement,
            entries: vec![
                Entry::Service("svc.example".parse().unwrap()),
                Entry::Constraint(Constraints(constraints)),
            ],
        }
    }

    #[test]
    fn the_default_policy_fills_announcements_without_one_and_re_signs() {
        let key = "00112233445566778899aabbccddeeff";
        let s = settings(&format!(
            "default_policy = \"scheduling/weighted\"\n\
             announce_keys = [{{ key_id = 3, secret = \"{key}\" }}]"
        ));
        let secret = s.announce_keys[&3].clone();
        let src: Ipv6Addr = "fd00:a::9".parse().unwrap();
        let mut m = announcement(vec![Constraint::Capability(5)]);
        m.sign(3, &secret, src).unwrap();
        let out = with_default_policy(&s, src, &m).expect("filled in");
        let c = out.constraints().unwrap();
        assert_eq!(c.mode_policy(), Some((Mode::Scheduling, Policy::Weighted)));
        assert_eq!(c.capability(), Some(5));
        assert_eq!(
            out.verify(src, |id| s.announce_keys.get(&id).map(Vec::as_slice)),
            AuthCheck::Good(3)
        );
        // A policy of its own is kept; a bad tag is left for the core to refuse.
        let mut own = announcement(vec![Constraint::ModePolicy {
            mode: Mode::Routing,
            policy: Policy::Shortest,
        }]);
        own.sign(3, &secret, src).unwrap();
        assert_eq!(with_default_policy(&s, src, &own), None);
        let mut forged = announcement(Vec::new());
        forged.sign(3, b"not the secret at all", src).unwrap();
        assert_eq!(with_default_policy(&s, src, &forged), None);
        // No default configured: nothing changes.
        assert_eq!(with_default_policy(&settings(""), src, &m), None);
    }

    /// An Ethernet frame from `src` to `dst` whose Destination Options
    /// header (next header 59) carries `opts`.
    fn opts_frame(src: Ipv6Addr, dst: Ipv6Addr, opts: &[OptionRepr<'_>]) -> Vec<u8> {
        let header = ipv6opt::Repr::new(IpProtocol::Ipv6NoNxt, opts).unwrap();
        let mut f = vec![0; ETH_LEN + IPV6_LEN + header.buffer_len()];
        f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 9]);
        f[12..14].copy_from_slice(&[0x86, 0xdd]);
        f[ETH_LEN] = 0x60;
        f[ETH_LEN + 4..ETH_LEN + 6].copy_from_slice(&(header.buffer_len() as u16).to_be_bytes());
        f[ETH_LEN + 6] = 60;
        f[ETH_LEN + 7] = 64;
        f[ETH_LEN + 8..ETH_LEN + 24].copy_from_slice(&src.octets());
        f[ETH_LEN + 24..ETH_LEN + 40].copy_from_slice(&dst.octets());
        header.emit(&mut ipv6opt::Packet::new_unchecked(
            &mut f[ETH_LEN + IPV6_LEN..],
        ));
        f
    }

    /// A started node (its core, without ports) and what `ingress` made of
    /// `frame` on port 0.
    fn feed(node: &mut SarNode, frame: &[u8]) -> (Verdict, Counters) {
        if node.core.is_none() {
            node.core = Some(Sar::new(node.s.core.clone(), Instant::ZERO));
        }
        let mut stats = Counters::default();
        let mut out = Outbox::default();
        let mut cx = FrameContext {
            now: Instant::from_secs(1),
            stats: &mut stats,
            out: &mut out,
        };
        let mut f = frame.to_vec();
        let v = node.ingress(&mut cx, 0, &mut f);
        (v, stats)
    }

    fn installed(node: &SarNode, name: &str) -> bool {
        let name: ServiceName = name.parse().unwrap();
        node.core.as_ref().unwrap().fib().get(&name).is_some()
    }

    /// RFC 8200 §4.2 at the SAR (the destination of announcements): a
    /// Destination Options header with an option we do not know whose
    /// action bits say discard is dropped, whatever the ROSA option next to
    /// it says (here a well-signed announcement); two ROSA options are
    /// ambiguous; an over-long name has its own counter.
    #[test]
    fn unknown_mandatory_options_and_duplicate_rosa_options_are_refused() {
        let key = "a11ce5a11ce5a11ce5a11ce5a11ce5a1";
        let mut node = SarNode::with_settings(settings(&format!(
            "announce_keys = [{{ key_id = 1, secret = \"{key}\" }}]"
        )));
        let secret = node.s.announce_keys[&1].clone();
        let src: Ipv6Addr = "fd00:a::9".parse().unwrap();
        let me: Ipv6Addr = "fd00:a::1".parse().unwrap();
        let signed = |name: &str| {
            let mut m = announcement(vec![Constraint::LifetimeS(60)]);
            m.set(Entry::Service(name.parse().unwrap()));
            m.sign(1, &secret, src).unwrap();
            m.to_bytes().unwrap()
        };
        fn rosa(data: &[u8]) -> OptionRepr<'_> {
            OptionRepr::new(OptionType::Rosa, data).unwrap()
        }
        fn other(t: u8) -> OptionRepr<'static> {
            OptionRepr::new(OptionType::from(t), &[0, 0]).unwrap()
        }

        // Skippable neighbours (0x1f, sticky) leave a good announcement alone.
        let ok = signed("ok.example");
        let f = opts_frame(src, me, &[other(0x1f), rosa(&ok)]);
        assert_eq!(feed(&mut node, &f).0, Verdict::Consume);
        assert!(installed(&node, "ok.example"));

        // Action 01 (0x7f): dropped silently, before or after the ROSA option.
        let a = signed("a.example");
        for opts in [[other(0x7f), rosa(&a)], [rosa(&a), other(0x7f)]] {
            let (v, _) = feed(&mut node, &opts_frame(src, me, &opts));
            assert_eq!(v, Verdict::Drop("sar.dest_opts_unknown_option"));
            assert!(node.outq.is_empty(), "no ICMPv6 for action 01");
        }
        assert!(!installed(&node, "a.example"));

        // Action 10 (0xbf) and 11 (0xff): dropped, Parameter Problem code 2
        // pointing at the option (IPv6 header 40 + 2 octets of the header).
        let b = signed("b.example");
        for t in [0xbf, 0xff] {
            let (v, stats) = feed(&mut node, &opts_frame(src, me, &[other(t), rosa(&b)]));
            assert_eq!(v, Verdict::Drop("sar.dest_opts_unknown_option"));
            assert_eq!(stats.get("sar.icmp_parameter_problem"), 1);
            let err = node.outq.pop_front().expect("a Parameter Problem").frame;
            let icmp = &err[ETH_LEN + IPV6_LEN..];
            assert_eq!((icmp[0], icmp[1]), (4, 2));
            assert_eq!(&icmp[4..8], &42_u32.to_be_bytes());
            assert_eq!(addr_at(&err, ETH_LEN + 24), src);
        }
        assert!(!installed(&node, "b.example"));

        // Two ROSA options, each good on its own.
        let (c, d) = (signed("c.example"), signed("d.example"));
        let v = feed(&mut node, &opts_frame(src, me, &[rosa(&c), rosa(&d)])).0;
        assert_eq!(v, Verdict::Drop("sar.rosa_duplicate_option"));
        assert!(!installed(&node, "c.example") && !installed(&node, "d.example"));

        // A Service entry of 130 octets (one segment of 126).
        let mut long = vec![0x11, 0x01, 130, 0x00, 0x01, 0x00, 126];
        long.extend([b'a'; 126]);
        let f = opts_frame(src, me, &[rosa(&long)]);
        assert_eq!(
            feed(&mut node, &f).0,
            Verdict::Drop("sar.rosa_name_too_long")
        );
        // A Service entry overrunning the option.
        let f = opts_frame(src, me, &[rosa(&[0x11, 0x01, 0x09, 0x00])]);
        assert_eq!(feed(&mut node, &f).0, Verdict::Drop("sar.rosa_malformed"));

        // An unknown entry type, even in a correctly signed announcement.
        let mut m = announcement(vec![Constraint::LifetimeS(60)]);
        m.set(Entry::Service("e.example".parse().unwrap()));
        m.entries.push(Entry::Unknown {
            entry_type: 0x42,
            value: vec![0xaa, 0xbb],
        });
        m.sign(1, &secret, src).unwrap();
        let e = m.to_bytes().unwrap();
        let v = feed(&mut node, &opts_frame(src, me, &[rosa(&e)])).0;
        assert_eq!(v, Verdict::Drop("sar.rosa_unknown_entry"));
        assert!(!installed(&node, "e.example"));
    }

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
