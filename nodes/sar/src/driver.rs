//! The `sar` node: the [`Sar`] core and the [`Forwarder`] on real ports
//! (STYLE.md 6: glue, no protocol decision here).
//!
//! ```text
//!   ingress shim (every frame) ─► DataPath::ingress ─► Verdict ─► Pass / Consume / Drop
//!   egress shim (smoltcp's frames) ─► Forwarder::local_egress (off-link: routed)
//!   role poll: UDP 7470 per SAR port ─► Sar::handle_igp; due timers ─► Sar::handle_timeout
//!              Sar::poll_transmit ─► UDP 7470 (or IPv6 fragments, Forwarder::send_fragmented)
//!              Forwarder::refresh_table (SPF, router links) ; role sag: DNS socket ↔ Gateway
//!              Forwarder::transmit: queued frames ─► wire (neighbour MAC known) or parked
//! ```
//!
//! # smoltcp's own traffic
//!
//! Packets for the node (NDP, echo, the IGP) go to the smoltcp interface of
//! the port owning the destination address. Each interface's IPv6 default
//! route points at [`VIRTUAL_GATEWAY`], which a synthetic Neighbor
//! Advertisement binds to the port's own MAC: whatever smoltcp sends off-link
//! (an echo reply to a host two SARs away) comes back through the egress shim
//! and is routed by the table, out of whichever port it needs.

use std::collections::{HashMap, VecDeque};
use std::net::Ipv6Addr;

use smoltcp::iface::SocketHandle;
use smoltcp::socket::udp;
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{IpAddress, IpListenEndpoint};
use svcroute_stack::runtime::{Context, ControlReply, FrameContext, PortConfig, Role};
use svcroute_stack::shim::Direction;
use svcroute_stack::shim::Verdict as ShimVerdict;
use svcroute_stack::timer::TimerTable;
use svcroute_stack::timers;
use svcroute_stack::wire::igp as wire_igp;

use crate::config::{ConfigError, Facing, SarConfig, Settings};
use crate::datapath::{export, export_sticky, DataPath};
pub use crate::forward::VIRTUAL_GATEWAY;
use crate::forward::{Forwarder, Verdict};
use crate::gateway::{announce_sag, export_gw};
use crate::icmp::IPV6_LEN;
use crate::igp::{LinkId, Transmit};
use crate::router::{Prefix, Table};
use crate::sag::{self, Gateway};
use crate::sticky::Sticky;
use crate::Sar;

/// How often the virtual gateway's binding is told to smoltcp again (its
/// neighbour cache keeps entries 60 s).
const GATEWAY_REFRESH: Duration = Duration::from_secs(20);
/// IGP datagrams waiting for room in a UDP socket.
const MAX_BACKLOG: usize = 4096;
/// When a full UDP socket is looked at again.
const BACKLOG_RETRY: Duration = Duration::from_millis(50);
/// UDP socket buffers of the IGP: datagrams and octets, each way.
const UDP_PACKETS: usize = 256;
const UDP_BYTES: usize = 512 * 1024;
/// IPv6 + UDP header octets in front of an IGP datagram.
const UDP6_OVERHEAD: usize = IPV6_LEN + 8;

timers! {
    /// The node's own timers (the core's and the forwarder's are theirs).
    enum Timer {
        /// Tell smoltcp the virtual gateway's binding again.
        GatewayRefresh,
        /// Announce `*` for the SAG again.
        SagAnnounce,
        /// Look at a full IGP UDP socket again.
        IgpBacklog,
    }
}

/// The `sar` role. See the module docs.
pub struct SarNode {
    pub(crate) s: Settings,
    pub(crate) core: Option<Sar>,
    pub(crate) fwd: Forwarder,
    link_of: HashMap<(usize, Ipv6Addr), LinkId>,
    udp: Vec<Option<SocketHandle>>,
    backlog: VecDeque<Transmit>,
    timers: TimerTable<Timer>,
    /// Role `sag`: the gateway, and its DNS socket (port, handle).
    pub(crate) gw: Option<Gateway>,
    dns: Option<(usize, SocketHandle)>,
    /// `[sar.sticky]`: the sticky engine, once started.
    pub(crate) sticky: Option<Sticky>,
}

impl std::fmt::Debug for SarNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SarNode")
            .field("name", &self.s.name)
            .field("router_id", &self.s.core.igp.router_id)
            .field("routes", &self.fwd.table().len())
            .field("parked", &self.fwd.parked())
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
        let link_of = s
            .neighbors
            .iter()
            .enumerate()
            .map(|(i, n)| ((n.port, n.addr), LinkId(i as u32)))
            .collect();
        Self {
            fwd: Forwarder::new(&s, Instant::ZERO),
            udp: vec![None; s.ports.len()],
            s,
            core: None,
            link_of,
            backlog: VecDeque::new(),
            timers: TimerTable::default(),
            gw: None,
            dns: None,
            sticky: None,
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

    /// The sticky engine, once started (`[sar.sticky]`).
    pub const fn sticky(&self) -> Option<&Sticky> {
        self.sticky.as_ref()
    }

    /// The settings.
    pub const fn settings(&self) -> &Settings {
        &self.s
    }

    /// The routing table.
    pub const fn table(&self) -> &Table {
        self.fwd.table()
    }

    /// Frames parked for neighbour resolution.
    pub const fn parked(&self) -> usize {
        self.fwd.parked()
    }

    /// The data path over this node's parts, for one frame or one batch.
    fn path<'a>(
        &'a mut self,
        now: Instant,
        stats: &'a mut svcroute_stack::stats::Counters,
        out: &'a mut svcroute_stack::shim::Outbox,
    ) -> DataPath<'a> {
        DataPath {
            s: &self.s,
            fwd: &mut self.fwd,
            core: self.core.as_mut(),
            gw: self.gw.as_mut(),
            sticky: self.sticky.as_mut(),
            link_of: &self.link_of,
            now,
            stats,
            out,
            rx_encap: false,
        }
    }

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
                        // Probes (type 4) come from any SAR, not only neighbours.
                        if data.get(1) == Some(&wire_igp::MSG_PROBE) {
                            match self.sticky.as_mut() {
                                Some(st) => st.handle_probe(cx.now, from, data),
                                None => cx.stats.drop("sar.probe_unconfigured"),
                            }
                            continue;
                        }
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
        self.timers.stop(Timer::IgpBacklog);
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
                self.fwd.send_fragmented(cx.stats, n, &t.bytes);
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
                    self.timers.set(Timer::IgpBacklog, cx.now + BACKLOG_RETRY);
                    break;
                }
                Err(udp::SendError::Unaddressable) => {
                    cx.stats.drop("sar.igp_unaddressable");
                    self.backlog.pop_front();
                }
            }
        }
        if let Some(core) = self.core.as_mut() {
            self.fwd.refresh_table(cx.now, core);
            if let Some(st) = self.sticky.as_mut() {
                st.sync(cx.now, core);
                export_sticky(st, cx.stats);
            }
            export(core, cx.stats);
        }
        any |= self.send_probes(cx);
        any
    }

    /// The sticky engine's RTT probes (and answers) over UDP 7470, routed
    /// like smoltcp's other off-link traffic.
    fn send_probes(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(st) = self.sticky.as_mut() else {
            return false;
        };
        let Some((port, h)) = self
            .udp
            .iter()
            .enumerate()
            .find_map(|(i, h)| h.map(|h| (i, h)))
        else {
            while st.poll_probe().is_some() {
                cx.stats.drop("sar.probe_no_socket");
            }
            return false;
        };
        let mut any = false;
        while let Some((to, bytes)) = st.poll_probe() {
            any = true;
            let sock = cx.ports[port].sockets.get_mut::<udp::Socket>(h);
            if sock
                .send_slice(&bytes, (IpAddress::Ipv6(to), wire_igp::PORT))
                .is_err()
            {
                cx.stats.drop("sar.probe_send_failed");
            }
        }
        any
    }

    /// Role `sag`: DNS answers in, queries out, gateway timers; what the
    /// gateway is done with, to the data path.
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
        let mut path = self.path(cx.now, cx.stats, cx.out);
        for d in done {
            path.finish(d);
        }
        any
    }

    /// Tell every port's smoltcp that the virtual gateway is at its own MAC.
    fn bind_gateway(&mut self, cx: &mut Context<'_>) {
        for (i, f) in self.fwd.gateway_adverts() {
            cx.out.inject(i, Direction::ToStack, f);
        }
        self.timers
            .set(Timer::GatewayRefresh, cx.now + GATEWAY_REFRESH);
    }

    /// Role `sag`: the gateway and its DNS socket, bound to our address on
    /// the port that holds it.
    fn start_gateway(&mut self, cx: &mut Context<'_>) {
        let Some(g) = self.s.gateway.as_ref() else {
            return;
        };
        let me = self.s.core.igp.address;
        self.gw = Some(Gateway::new(g, me, cx.now));
        let Some(port) = self.fwd.owner_of(me) else {
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

    /// Announce `*` for the SAG (if one is configured) and arm the next.
    fn announce_sag(&mut self, now: Instant) {
        let Some(core) = self.core.as_mut() else {
            return;
        };
        match announce_sag(&self.s, core, now) {
            Some(at) => self.timers.set(Timer::SagAnnounce, at),
            None => self.timers.stop(Timer::SagAnnounce),
        }
    }

    /// The UDP socket of the IGP on a SAR port.
    fn igp_socket() -> udp::Socket<'static> {
        let buf = || {
            udp::PacketBuffer::new(
                vec![udp::PacketMetadata::EMPTY; UDP_PACKETS],
                vec![0; UDP_BYTES],
            )
        };
        udp::Socket::new(buf(), buf())
    }
}

/// The runtime's verdict for the data path's.
const fn shim_verdict(v: Verdict) -> ShimVerdict {
    match v {
        Verdict::Deliver => ShimVerdict::Pass,
        Verdict::Forward | Verdict::Consume => ShimVerdict::Consume,
        Verdict::Drop(reason) => ShimVerdict::Drop(reason),
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
        if let Some(cfg) = self.s.sticky.clone() {
            core.watch_sticky();
            let clients = self
                .s
                .ports
                .iter()
                .filter(|p| p.facing == Facing::Clients)
                .flat_map(|p| p.v6.iter().map(|(a, l)| Prefix::new(*a, *l)))
                .collect();
            let key = self.s.core.igp.key.clone();
            let me = self.s.core.igp.address;
            let rid = self.s.core.igp.router_id;
            self.sticky = Some(Sticky::new(cfg, me, rid, key, clients, now));
        }
        self.core = Some(core);
        self.fwd.start(now);
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
                let mut sock = Self::igp_socket();
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
            self.fwd.table().len()
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
        if self.timers.is_due(Timer::GatewayRefresh, now) {
            self.bind_gateway(cx);
            any = true;
        }
        if self.timers.is_due(Timer::SagAnnounce, now) {
            self.announce_sag(now);
        }
        if let Some(st) = self.sticky.as_mut() {
            if st.poll_timeout().is_some_and(|t| t <= now) {
                st.handle_timeout(now);
                any = true;
            }
        }
        self.fwd.expire(now, cx.stats);
        any |= self.pump_gateway(cx);
        any |= self.pump(cx);
        let ports = &*cx.ports;
        let lookup = |port: usize, hop: Ipv6Addr| {
            ports
                .get(port)
                .and_then(|p| p.neighbors().lookup(&IpAddress::Ipv6(hop)))
        };
        let sent = self.fwd.transmit(now, cx.stats, lookup, cx.out);
        while let Some((port, hop)) = self.fwd.poll_resolve() {
            cx.resolve(port, IpAddress::Ipv6(hop));
        }
        any | sent
    }

    fn poll_at(&self, now: Instant) -> Option<Instant> {
        [
            self.fwd.poll_timeout(now),
            self.timers.next_timeout(),
            self.core.as_ref().and_then(Sar::poll_timeout),
            self.gw.as_ref().and_then(Gateway::poll_timeout),
            self.sticky.as_ref().and_then(Sticky::poll_timeout),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn validate_ingress(&self) -> bool {
        // A router forwards what it does not understand; frames for
        // smoltcp are checked on the way in (`forward::deliver_here`).
        false
    }

    fn ingress(
        &mut self,
        cx: &mut FrameContext<'_>,
        port: usize,
        frame: &mut Vec<u8>,
    ) -> ShimVerdict {
        let v = self.path(cx.now, cx.stats, cx.out).ingress(port, frame);
        shim_verdict(v)
    }

    fn egress(
        &mut self,
        cx: &mut FrameContext<'_>,
        port: usize,
        frame: &mut Vec<u8>,
    ) -> ShimVerdict {
        match self.fwd.local_egress(cx.stats, cx.out, port, frame) {
            Some(v) => shim_verdict(v),
            None => ShimVerdict::Pass,
        }
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
            Some("sticky") => ControlReply::Now(self.sticky_json(cx.now)),
            Some("sites") => ControlReply::Now(self.sites_json()),
            Some("metrics") => ControlReply::Now(self.metrics_cmd(&args[1..])),
            Some("ue-moved") => ControlReply::Now(self.ue_moved_cmd(cx.now, &args[1..])),
            Some("help") => ControlReply::Now(crate::control::help()),
            _ => ControlReply::Unknown,
        }
    }

    fn is_ready(&self) -> bool {
        self.core.is_some()
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv6Addr;

    use smoltcp::wire::IpProtocol;
    use svcroute_stack::shim::Outbox;
    use svcroute_stack::stats::Counters;
    use svcroute_stack::wire::ipv6opt::{self, OptionRepr, OptionType};
    use svcroute_stack::wire::rosa::{
        Constraint, Entry, Message, MessageKind, Mode, Policy, ServiceName,
    };

    use super::*;
    use crate::forward::addr_at;
    use crate::icmp::ETH_LEN;
    use crate::steer::tests::{announcement, settings};

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
    fn feed(node: &mut SarNode, frame: &[u8]) -> (ShimVerdict, Counters) {
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
        assert_eq!(feed(&mut node, &f).0, ShimVerdict::Consume);
        assert!(installed(&node, "ok.example"));

        // Action 01 (0x7f): dropped silently, before or after the ROSA option.
        let a = signed("a.example");
        for opts in [[other(0x7f), rosa(&a)], [rosa(&a), other(0x7f)]] {
            let (v, _) = feed(&mut node, &opts_frame(src, me, &opts));
            assert_eq!(v, ShimVerdict::Drop("sar.dest_opts_unknown_option"));
            assert!(node.fwd.pop_queued().is_none(), "no ICMPv6 for action 01");
        }
        assert!(!installed(&node, "a.example"));

        // Action 10 (0xbf) and 11 (0xff): dropped, Parameter Problem code 2
        // pointing at the option (IPv6 header 40 + 2 octets of the header).
        let b = signed("b.example");
        for t in [0xbf, 0xff] {
            let (v, stats) = feed(&mut node, &opts_frame(src, me, &[other(t), rosa(&b)]));
            assert_eq!(v, ShimVerdict::Drop("sar.dest_opts_unknown_option"));
            assert_eq!(stats.get("sar.icmp_parameter_problem"), 1);
            let err = node.fwd.pop_queued().expect("a Parameter Problem");
            let icmp = &err[ETH_LEN + IPV6_LEN..];
            assert_eq!((icmp[0], icmp[1]), (4, 2));
            assert_eq!(&icmp[4..8], &42_u32.to_be_bytes());
            assert_eq!(addr_at(&err, ETH_LEN + 24), src);
        }
        assert!(!installed(&node, "b.example"));

        // Two ROSA options, each good on its own.
        let (c, d) = (signed("c.example"), signed("d.example"));
        let v = feed(&mut node, &opts_frame(src, me, &[rosa(&c), rosa(&d)])).0;
        assert_eq!(v, ShimVerdict::Drop("sar.rosa_duplicate_option"));
        assert!(!installed(&node, "c.example") && !installed(&node, "d.example"));

        // A Service entry of 130 octets (one segment of 126).
        let mut long = vec![0x11, 0x01, 130, 0x00, 0x01, 0x00, 126];
        long.extend([b'a'; 126]);
        let f = opts_frame(src, me, &[rosa(&long)]);
        assert_eq!(
            feed(&mut node, &f).0,
            ShimVerdict::Drop("sar.rosa_name_too_long")
        );
        // A Service entry overrunning the option.
        let f = opts_frame(src, me, &[rosa(&[0x11, 0x01, 0x09, 0x00])]);
        assert_eq!(
            feed(&mut node, &f).0,
            ShimVerdict::Drop("sar.rosa_malformed")
        );

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
        assert_eq!(v, ShimVerdict::Drop("sar.rosa_unknown_entry"));
        assert!(!installed(&node, "e.example"));
    }

    /// An echo request to us, its Destination Options header (next header
    /// 58) carrying `opts`.
    fn echo_with(src: Ipv6Addr, dst: Ipv6Addr, opts: &[OptionRepr<'_>]) -> Vec<u8> {
        let header = ipv6opt::Repr::new(IpProtocol::Icmpv6, opts).unwrap();
        let mut f = opts_frame(src, dst, opts);
        let h = ETH_LEN + IPV6_LEN;
        header.emit(&mut ipv6opt::Packet::new_unchecked(&mut f[h..]));
        let echo = [128, 0, 0, 0, 0, 1, 0, 1];
        f.extend_from_slice(&echo);
        let len = (header.buffer_len() + echo.len()) as u16;
        f[ETH_LEN + 4..ETH_LEN + 6].copy_from_slice(&len.to_be_bytes());
        smoltcp::wire::Icmpv6Packet::new_unchecked(&mut f[h + header.buffer_len()..])
            .fill_checksum(&src, &dst);
        f
    }

    /// RFC 8200 §4.2 at the SAR for a packet to us without a ROSA option:
    /// padding and skippable unknown options are skipped and the packet
    /// handed to smoltcp without the header (smoltcp would drop it
    /// silently); a malformed Sticky-Dst is dropped and counted (issue 12).
    #[test]
    fn options_on_a_packet_for_us_are_skipped_or_counted() {
        let mut node = SarNode::with_settings(settings(""));
        node.core = Some(Sar::new(node.s.core.clone(), Instant::ZERO));
        let src: Ipv6Addr = "fd00:a::9".parse().unwrap();
        let me: Ipv6Addr = "fd00:a::1".parse().unwrap();
        let skip = OptionRepr::new(OptionType::from(0x1f), &[1, 2]).unwrap();
        for opts in [vec![OptionRepr::PadN(4)], vec![skip]] {
            let mut f = echo_with(src, me, &opts);
            let before = f.len();
            let mut stats = Counters::default();
            let mut out = Outbox::default();
            let mut cx = FrameContext {
                now: Instant::from_secs(1),
                stats: &mut stats,
                out: &mut out,
            };
            assert_eq!(node.ingress(&mut cx, 0, &mut f), ShimVerdict::Pass);
            assert_eq!(
                f[ETH_LEN + 6],
                58,
                "the header is gone: smoltcp sees the echo"
            );
            assert_eq!(f.len(), before - 8);
            assert_eq!(stats.get("sar.dest_opts_stripped"), 1);
        }
        // Sticky-Dst with AFI 3.
        let mut bad = vec![1, 18, 3, 0];
        bad.extend([0; 16]);
        let sticky = OptionRepr::new(OptionType::Sticky, &bad).unwrap();
        let (v, _) = feed(&mut node, &echo_with(src, me, &[sticky]));
        assert_eq!(v, ShimVerdict::Drop("sar.sticky_malformed"));
    }

    /// Two Destination Options headers with a ROSA option each: refused,
    /// not steered by the last one; a request with its last hop is
    /// refused before the core spends a round-robin slot on it (issue 12).
    #[test]
    fn two_rosa_headers_and_spent_hop_limits_are_refused_first() {
        let key = "a11ce5a11ce5a11ce5a11ce5a11ce5a1";
        let mut node = SarNode::with_settings(settings(&format!(
            "announce_keys = [{{ key_id = 1, secret = \"{key}\" }}]"
        )));
        let secret = node.s.announce_keys[&1].clone();
        let me: Ipv6Addr = "fd00:a::1".parse().unwrap();
        let client: Ipv6Addr = "fd00:a::77".parse().unwrap();
        // Two scheduled instances of rr.example, round robin.
        for i in ["fd00:a::21", "fd00:a::22"] {
            let inst: Ipv6Addr = i.parse().unwrap();
            let mut m = announcement(vec![
                Constraint::ModePolicy {
                    mode: Mode::Scheduling,
                    policy: Policy::RoundRobin,
                },
                Constraint::LifetimeS(60),
            ]);
            m.set(Entry::Service("rr.example".parse().unwrap()));
            m.sign(1, &secret, inst).unwrap();
            let b = m.to_bytes().unwrap();
            let f = opts_frame(inst, me, &[OptionRepr::new(OptionType::Rosa, &b).unwrap()]);
            assert_eq!(feed(&mut node, &f).0, ShimVerdict::Consume);
        }
        let req = Message {
            kind: MessageKind::Request,
            entries: vec![Entry::Service("rr.example".parse().unwrap())],
        }
        .to_bytes()
        .unwrap();
        let rosa = OptionRepr::new(OptionType::Rosa, &req).unwrap();
        // Hop limit 1: refused, Time Exceeded, no slot spent.
        let mut spent = opts_frame(client, me, &[rosa]);
        spent[ETH_LEN + 7] = 1;
        let (v, stats) = feed(&mut node, &spent);
        assert_eq!(v, ShimVerdict::Drop("sar.hop_limit_exceeded"));
        assert_eq!(stats.get("sar.icmp_time_exceeded"), 1);
        let err = node.fwd.pop_queued().expect("Time Exceeded");
        assert_eq!(err[ETH_LEN + IPV6_LEN], 3);
        // The next requests get the first instance, then the second.
        for want in ["fd00:a::21", "fd00:a::22"] {
            let (v, _) = feed(&mut node, &opts_frame(client, me, &[rosa]));
            assert_eq!(v, ShimVerdict::Consume);
            let f = node.fwd.pop_queued().expect("routed");
            assert_eq!(addr_at(&f, ETH_LEN + 24), want.parse::<Ipv6Addr>().unwrap());
        }
        // Two headers, each with the request: a first one prepended.
        let mut two = opts_frame(client, me, &[rosa]);
        let one = [rosa];
        let extra = ipv6opt::Repr::new(IpProtocol::Unknown(60), &one).unwrap();
        let mut hdr = vec![0; extra.buffer_len()];
        extra.emit(&mut ipv6opt::Packet::new_unchecked(&mut hdr[..]));
        two.splice(ETH_LEN + IPV6_LEN..ETH_LEN + IPV6_LEN, hdr.iter().copied());
        two[ETH_LEN + 6] = 60;
        let len = u16::from_be_bytes([two[ETH_LEN + 4], two[ETH_LEN + 5]]) + hdr.len() as u16;
        two[ETH_LEN + 4..ETH_LEN + 6].copy_from_slice(&len.to_be_bytes());
        let (v, _) = feed(&mut node, &two);
        assert_eq!(v, ShimVerdict::Drop("sar.rosa_duplicate_option"));
    }
}
