// Over 800 lines: the shim is one state machine (transactions by client, bound and instance key, name cache, announcer) whose tables every packet path reads and writes together.
//! The shim's state machine (see the module essay in [`super`]).

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::net::{IpAddr, Ipv6Addr};

use serde_json::{json, Value};
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{EthernetAddress, IpAddress, IpCidr, IpProtocol};
use svcroute_stack::shim::edit::{self, AddrField, Fragment};
use svcroute_stack::shim::Verdict;
use svcroute_stack::stats::Counters;
use svcroute_stack::wire::ipv6opt::{OptionRepr, OptionType};
use svcroute_stack::wire::rosa::{Constraint, Entry, FlowPort, Message, MessageKind, ServiceName};

use super::config::{mask, RosaConfig, Settings};
use super::frame::{self, Close, Flow, ACK, SYN};
use super::neighbor::{Hop, NextHops, Sent};
use crate::ConfigError;

/// How often idle flows are looked for.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(1);

/// What the shim needs to know of a port (taken from smoltcp at start).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortInfo {
    /// The port's MAC address.
    pub mac: EthernetAddress,
    /// Its addresses, with prefix length: what is on-link, and what is ours.
    pub addrs: Vec<IpCidr>,
    /// Its default gateways.
    pub gateways: Vec<IpAddress>,
}

impl PortInfo {
    fn on_link(&self, a: Ipv6Addr) -> bool {
        let a = IpAddress::Ipv6(a);
        self.addrs.iter().any(|c| c.contains_addr(&a))
    }

    fn owns(&self, a: Ipv6Addr) -> bool {
        self.addrs.iter().any(|c| c.address() == IpAddress::Ipv6(a))
    }

    fn gateway(&self) -> Option<Ipv6Addr> {
        self.gateways.iter().find_map(|g| match g {
            IpAddress::Ipv6(g) if self.on_link(*g) => Some(*g),
            _ => None,
        })
    }

    /// The on-link next hop toward `dst`: itself, or the IPv6 gateway.
    fn next_hop(&self, dst: Ipv6Addr) -> Option<Ipv6Addr> {
        if self.on_link(dst) {
            Some(dst)
        } else {
            self.gateway()
        }
    }

    /// The first global (not link-local) IPv6 address.
    fn global_v6(&self) -> Option<Ipv6Addr> {
        self.addrs.iter().find_map(|c| match c.address() {
            IpAddress::Ipv6(a) if !a.is_unicast_link_local() && !a.is_multicast() => Some(a),
            _ => None,
        })
    }
}

/// Where a client reaches a service: the virtual address standing for its
/// name, the port to open connections on, and the next hop toward the
/// ingress SAR (worth resolving before the first packet).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    /// The virtual address (connect to it).
    pub virt: Ipv6Addr,
    /// The port index.
    pub port: usize,
    /// The ingress SAR.
    pub ingress: Ipv6Addr,
    /// The on-link next hop toward the ingress.
    pub hop: Ipv6Addr,
}

/// Why [`Shim::open`] refused a service name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    /// No ingress SAR configured and no IPv6 gateway.
    #[error("no ingress SAR: set [host.rosa] ingress or give a port an IPv6 gateway")]
    NoIngress,
    /// The ingress is neither on a port's link nor behind a gateway.
    #[error(
        "no route to the ingress SAR {0}: no port is on its link and none has an IPv6 gateway"
    )]
    NoRoute(Ipv6Addr),
    /// The wildcard `*` names no service.
    #[error("`*` is not a service a client can open")]
    Wildcard,
    /// Another name already has this virtual address.
    #[error("{0} hashes to the virtual address of {1}; use a longer virtual_prefix host part")]
    Collision(ServiceName, ServiceName),
    /// `max_services` names are in use by open flows.
    #[error("{0} service names are in use (max_services)")]
    Full(usize),
}

/// The ROSA endpoint shim of a host, sans-IO.
///
/// **Call order.** [`Shim::start`] once with the ports; then, per frame,
/// [`Shim::ingress`] (after the Destination Options header was stripped,
/// with the ROSA option data it carried) and [`Shim::egress`] (after
/// smoltcp, before the wire). After every call, and after
/// [`Shim::handle_timeout`] at [`Shim::poll_timeout`], drain
/// [`Shim::poll_transmit`] onto the wire and [`Shim::poll_resolve`] into
/// the runtime's neighbour assist, feeding what it knows back with
/// [`Shim::learn`]. [`Shim::stop`] queues the withdrawals. Time is the
/// `now` passed in; spurious timeouts are harmless.
#[derive(Debug)]
pub struct Shim {
    s: Settings,
    configured: bool,
    ports: Vec<PortInfo>,
    names: Names,
    client: HashMap<ClientKey, ClientFlow>,
    /// Bound client flows by what the instance's packets carry.
    bound: HashMap<BoundKey, Ipv6Addr>,
    instance: HashMap<InstanceKey, InstanceFlow>,
    hops: NextHops,
    transmit: VecDeque<(usize, Vec<u8>)>,
    resolve: VecDeque<Hop>,
    announcer: Option<Announcer>,
    next_sweep: Option<Instant>,
}

/// A client flow: one transport flow of ours toward a virtual address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct ClientKey {
    proto: u8,
    virt: Ipv6Addr,
    remote_port: u16,
    local_port: u16,
}

/// How an instance's packets of a bound client flow look.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct BoundKey {
    proto: u8,
    instance: Ipv6Addr,
    remote_port: u16,
    local_port: u16,
}

/// An instance flow: a client's transport flow to one of our services.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct InstanceKey {
    proto: u8,
    local_port: u16,
    client: Ipv6Addr,
    client_port: u16,
}

/// Client side: until the first Service Response, requests; then affinity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bind {
    /// Every packet goes to the ingress SAR with a Service Request.
    Requesting,
    /// Every packet goes straight to this instance, plain.
    Bound(Ipv6Addr),
}

#[derive(Debug)]
struct ClientFlow {
    port: usize,
    ingress: Ipv6Addr,
    bind: Bind,
    last: Instant,
    close: Close,
}

/// Instance side: until the client's first direct packet, responses via
/// our SAR; then direct.
#[derive(Debug)]
enum Via {
    /// Answer with this Service Response (Instance added per packet).
    Sar(Box<Message>),
    /// Answer directly, plain.
    Direct,
}

#[derive(Debug)]
struct InstanceFlow {
    port: usize,
    /// The `serve` entry the request was for.
    serve: usize,
    via: Via,
    last: Instant,
    close: Close,
}

/// Service names with a virtual address.
#[derive(Debug, Default)]
struct Names {
    by_virt: HashMap<Ipv6Addr, NameEntry>,
    by_name: HashMap<ServiceName, Ipv6Addr>,
}

#[derive(Debug)]
struct NameEntry {
    name: ServiceName,
    /// Client flows toward it.
    flows: usize,
    used: Instant,
}

#[derive(Debug)]
struct Announcer {
    port: usize,
    addr: Ipv6Addr,
    sar: Ipv6Addr,
    /// Next announcement of each `serve` entry.
    due: Vec<Instant>,
    /// The Load last announced for each live-load entry.
    load: Vec<u32>,
    /// The last announcement of each entry (live load waits
    /// [`LIVE_LOAD_GAP`] between two).
    sent: Vec<Option<Instant>>,
}

/// Live load: the shortest time between two announcements of one entry,
/// and how often the open transactions are counted.
const LIVE_LOAD_GAP: Duration = Duration::from_millis(200);

impl Shim {
    /// The shim for `cfg` (`None`: no `[host.rosa]` section; the shim then
    /// acts only for service names a client job opens).
    pub fn new(cfg: Option<&RosaConfig>) -> Result<Self, ConfigError> {
        let configured = cfg.is_some();
        let s = cfg.cloned().unwrap_or_default().settings()?;
        Ok(Self {
            s,
            configured,
            ports: Vec::new(),
            names: Names::default(),
            client: HashMap::new(),
            bound: HashMap::new(),
            instance: HashMap::new(),
            hops: NextHops::default(),
            transmit: VecDeque::new(),
            resolve: VecDeque::new(),
            announcer: None,
            next_sweep: None,
        })
    }

    /// Whether `[host.rosa]` is configured.
    pub fn configured(&self) -> bool {
        self.configured
    }

    /// Whether an ingress SAR is configured (service URLs then use ROSA
    /// without `--rosa`).
    pub fn has_ingress(&self) -> bool {
        self.s.ingress.is_some()
    }

    /// The virtual prefix.
    pub fn virtual_prefix(&self) -> (Ipv6Addr, u8) {
        (self.s.prefix, self.s.prefix_len)
    }

    /// The port and next hop through which the virtual prefix is reached:
    /// the port the configured ingress is on-link to, if any.
    pub fn virtual_route(&self) -> Option<(usize, Ipv6Addr)> {
        let ingress = self.s.ingress?;
        let port = self.ports.iter().position(|p| p.on_link(ingress))?;
        Some((port, ingress))
    }

    /// Take the ports and arm the first announcements.
    pub fn start(&mut self, now: Instant, ports: Vec<PortInfo>, stats: &mut Counters) {
        self.ports = ports;
        let Some(sar) = self.s.sar.filter(|_| !self.s.serve.is_empty()) else {
            return;
        };
        let port = self.port_toward(sar);
        let addr = self
            .s
            .instance_addr
            .or_else(|| self.ports.get(port).and_then(PortInfo::global_v6));
        let Some(addr) = addr else {
            log::warn!("rosa: no IPv6 address to announce as the instance; not announcing");
            stats.bump("rosa.no_instance_addr");
            return;
        };
        self.announcer = Some(Announcer {
            port,
            addr,
            sar,
            due: vec![now; self.s.serve.len()],
            load: vec![0; self.s.serve.len()],
            sent: vec![None; self.s.serve.len()],
        });
        self.handle_timeout(now, stats);
    }

    /// Withdraw every announced service (the node is stopping).
    pub fn stop(&mut self, stats: &mut Counters) {
        let Some(a) = self.announcer.take() else {
            return;
        };
        for i in 0..self.s.serve.len() {
            let Some(mut f) = self.control(&a, MessageKind::Withdrawal, i) else {
                stats.drop("rosa.announce_encode");
                continue;
            };
            // No time is left to resolve a next hop: send only what can go now.
            let hop = self.ports.get(a.port).and_then(|p| p.next_hop(a.sar));
            match hop.and_then(|h| self.hops.lookup((a.port, h))) {
                Some(mac) => {
                    frame::set_dst_mac(&mut f, mac);
                    self.transmit.push_back((a.port, f));
                    stats.bump("rosa.withdrawals_sent");
                }
                None => stats.drop("rosa.withdrawal_unresolved"),
            }
        }
    }

    /// A virtual address for `name`, registering it: client jobs connect
    /// to it.
    pub fn open(&mut self, now: Instant, name: &ServiceName) -> Result<Target, OpenError> {
        if name.is_wildcard() {
            return Err(OpenError::Wildcard);
        }
        let port = match self.s.ingress {
            Some(ing) => self.port_toward(ing),
            None => self
                .ports
                .iter()
                .position(|p| p.gateway().is_some())
                .ok_or(OpenError::NoIngress)?,
        };
        let ingress = self.ingress_for(port).ok_or(OpenError::NoIngress)?;
        let hop = self
            .ports
            .get(port)
            .and_then(|p| p.next_hop(ingress))
            .ok_or(OpenError::NoRoute(ingress))?;
        let virt = self.register(now, name)?;
        Ok(Target {
            virt,
            port,
            ingress,
            hop,
        })
    }

    /// Look at a frame received on `port`, after its Destination Options
    /// header was stripped; `rosa` is the ROSA option data it carried.
    pub fn ingress(
        &mut self,
        now: Instant,
        port: usize,
        frame: &mut [u8],
        rosa: Option<&[u8]>,
        stats: &mut Counters,
    ) -> Verdict {
        if !self.active() {
            return Verdict::Pass;
        }
        let Some(data) = rosa else {
            self.learn_from(now, port, frame);
            return self.ingress_plain(now, frame, stats);
        };
        let Ok(msg) = Message::from_bytes(data) else {
            return Verdict::Drop("rosa.malformed");
        };
        match msg.kind {
            MessageKind::Request => self.ingress_request(now, port, frame, &msg, stats),
            MessageKind::Response => self.ingress_response(now, port, frame, &msg, stats),
            MessageKind::Announcement | MessageKind::Withdrawal => {
                Verdict::Drop("rosa.unexpected_kind")
            }
            MessageKind::Unknown(_) => Verdict::Drop("rosa.unknown_kind"),
        }
    }

    /// Look at a frame smoltcp sends on `port`.
    pub fn egress(
        &mut self,
        now: Instant,
        port: usize,
        frame: &mut Vec<u8>,
        stats: &mut Counters,
    ) -> Verdict {
        if !self.active() {
            return Verdict::Pass;
        }
        let Some((_, dst)) = frame::ipv6_addrs(frame) else {
            return Verdict::Pass;
        };
        if mask(dst, self.s.prefix_len) == self.s.prefix {
            let Some(f) = frame::flow(frame) else {
                let fragment = edit::walk(frame).is_ok_and(|l| l.fragment != Fragment::Whole);
                return Verdict::Drop(if fragment {
                    // No room for the option in a fragment (nor would the
                    // instance's runtime take IPv6 fragments).
                    "rosa.virtual_fragmented"
                } else {
                    "rosa.virtual_not_transport"
                });
            };
            return self.egress_client(now, port, frame, f, stats);
        }
        if self.instance.is_empty() && self.bound.is_empty() {
            return Verdict::Pass;
        }
        let Some(f) = frame::flow(frame) else {
            return Verdict::Pass;
        };
        if f.proto == IpProtocol::Tcp && f.tcp_has(SYN) && !f.tcp_has(ACK) {
            self.forget_closed_binding(&f, stats);
        }
        let key = InstanceKey {
            proto: f.proto.into(),
            local_port: f.sport,
            client: f.dst,
            client_port: f.dport,
        };
        if self.instance.contains_key(&key) {
            return self.egress_instance(now, port, frame, f, key, stats);
        }
        Verdict::Pass
    }

    /// A plain connection (not through a virtual address) opens from a local
    /// port that a closed, lingering ROSA flow bound to the same instance
    /// and port: the instance's answers are this connection's now, not the
    /// old flow's, so forget that binding (else they would be rewritten to
    /// come from the virtual address and the transport would reset them).
    fn forget_closed_binding(&mut self, f: &Flow, stats: &mut Counters) {
        let bk = BoundKey {
            proto: f.proto.into(),
            instance: f.dst,
            remote_port: f.dport,
            local_port: f.sport,
        };
        let Some(&virt) = self.bound.get(&bk) else {
            return;
        };
        let key = ClientKey {
            proto: bk.proto,
            virt,
            remote_port: f.dport,
            local_port: f.sport,
        };
        if self.client.get(&key).is_some_and(|c| c.close.closed()) {
            self.bound.remove(&bk);
            stats.bump("rosa.binding_released");
        }
    }

    /// The port moved (TUN mode, `move`): its addresses and gateways are
    /// now `info`, and the ingress SAR of new requests is `ingress`. What
    /// the shim knew of the old link's neighbours is forgotten.
    pub fn moved(&mut self, port: usize, info: PortInfo, ingress: Option<Ipv6Addr>) {
        if let Some(p) = self.ports.get_mut(port) {
            *p = info;
        }
        if ingress.is_some() {
            self.s.ingress = ingress;
        }
        self.hops.forget_bindings();
    }

    /// Learn that `addr` is at `mac` on `port` (the driver's neighbour
    /// table answering [`Shim::poll_resolve`]); parked frames for it go out.
    pub fn learn(&mut self, now: Instant, port: usize, addr: Ipv6Addr, mac: EthernetAddress) {
        let ready = self.hops.learn(now, (port, addr), mac);
        self.transmit.extend(ready);
    }

    /// Do what is due at `now`: announcements, flow expiry, parked frames.
    pub fn handle_timeout(&mut self, now: Instant, stats: &mut Counters) {
        if let Some(mut a) = self.announcer.take() {
            for i in 0..a.due.len() {
                let live = self.s.serve[i]
                    .live_step
                    .map(|step| (step, self.open_transactions(i)));
                let moved = live.is_some_and(|(step, n)| n.abs_diff(a.load[i]) >= step)
                    && a.sent[i].is_none_or(|t| now >= t + LIVE_LOAD_GAP);
                if a.due[i] > now && !moved {
                    continue;
                }
                if moved {
                    stats.bump("rosa.live_load_announcements");
                }
                if let Some((_, n)) = live {
                    a.load[i] = n;
                }
                a.due[i] = now + self.s.serve[i].lifetime / 3;
                a.sent[i] = Some(now);
                match self.control(&a, MessageKind::Announcement, i) {
                    Some(f) => {
                        stats.bump("rosa.announcements_sent");
                        self.send_built(now, a.port, a.sar, f, stats);
                    }
                    None => stats.drop("rosa.announce_encode"),
                }
            }
            self.announcer = Some(a);
        }
        if self.next_sweep.is_some_and(|t| t <= now) {
            self.next_sweep = None;
            self.sweep(now, stats);
        }
        if self.next_sweep.is_none() && !(self.client.is_empty() && self.instance.is_empty()) {
            self.next_sweep = Some(now + SWEEP_INTERVAL);
        }
        for _ in 0..self.hops.expire(now) {
            stats.drop("rosa.next_hop_unresolved");
        }
        self.resolve.extend(self.hops.due_for_resolution(now));
    }

    /// Transactions open now (not closed) for `serve` entry `i`.
    fn open_transactions(&self, i: usize) -> u32 {
        let n = self
            .instance
            .values()
            .filter(|f| f.serve == i && !f.close.closed())
            .count();
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// When [`Shim::handle_timeout`] is next due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let announce = self
            .announcer
            .as_ref()
            .and_then(|a| a.due.iter().min().copied());
        // Live load is counted every LIVE_LOAD_GAP.
        let live = self.announcer.as_ref().and_then(|a| {
            (0..a.due.len())
                .filter(|i| self.s.serve[*i].live_step.is_some())
                .map(|i| a.sent[i].map_or(Instant::ZERO, |t| t + LIVE_LOAD_GAP))
                .min()
        });
        let announce = announce.into_iter().chain(live).min();
        let sweep = if self.client.is_empty() && self.instance.is_empty() {
            None
        } else {
            // Arm the sweep on the next call if nothing armed it yet.
            Some(self.next_sweep.unwrap_or(Instant::ZERO))
        };
        [announce, sweep, self.hops.next_timeout()]
            .into_iter()
            .flatten()
            .min()
    }

    /// A frame to send on a port's wire.
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<(usize, Vec<u8>)> {
        self.transmit.pop_front()
    }

    /// A next hop (port, address) whose link-layer address is wanted.
    #[must_use]
    pub fn poll_resolve(&mut self) -> Option<(usize, Ipv6Addr)> {
        self.resolve.pop_front()
    }

    /// Tables, for `ctl NODE rosa`.
    pub fn summary(&self) -> Value {
        let names: Vec<Value> = self
            .names
            .by_virt
            .iter()
            .map(|(v, e)| json!({ "service": e.name.to_string(), "virtual": v.to_string(), "flows": e.flows }))
            .collect();
        let client: Vec<Value> = self
            .client
            .iter()
            .take(64)
            .map(|(k, f)| {
                json!({
                    "port": f.port,
                    "proto": k.proto,
                    "virtual": k.virt.to_string(),
                    "remote_port": k.remote_port,
                    "local_port": k.local_port,
                    "ingress": f.ingress.to_string(),
                    "instance": match f.bind { Bind::Requesting => Value::Null, Bind::Bound(i) => json!(i.to_string()) },
                    "closed": f.close.closed(),
                })
            })
            .collect();
        let instance: Vec<Value> = self
            .instance
            .iter()
            .take(64)
            .map(|(k, f)| {
                json!({
                    "port": f.port,
                    "proto": k.proto,
                    "local_port": k.local_port,
                    "client": k.client.to_string(),
                    "client_port": k.client_port,
                    "direct": matches!(f.via, Via::Direct),
                    "closed": f.close.closed(),
                })
            })
            .collect();
        json!({
            "configured": self.configured,
            "virtual_prefix": format!("{}/{}", self.s.prefix, self.s.prefix_len),
            "ingress": self.s.ingress.map(|a| a.to_string()),
            "sar": self.s.sar.map(|a| a.to_string()),
            "instance": self.announcer.as_ref().map(|a| a.addr.to_string()),
            "serve": self.s.serve.iter().map(|s| s.name.to_string()).collect::<Vec<_>>(),
            "live_load": self.announcer.as_ref().map(|a| {
                self.s
                    .serve
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| s.live_step.is_some())
                    .map(|(i, s)| (s.name.to_string(), json!({ "open": self.open_transactions(i), "announced": a.load[i] })))
                    .collect::<serde_json::Map<_, _>>()
            }),
            "names": names,
            "client_flows": self.client.len(),
            "client_flows_bound": self.bound.len(),
            "instance_flows": self.instance.len(),
            "parked": self.hops.parked(),
            "next_hops": self.hops.len(),
            "client": client,
            "instance_side": instance,
        })
    }

    /// Client flows tracked (requesting or bound).
    pub fn client_flows(&self) -> usize {
        self.client.len()
    }

    /// Client flows bound to an instance.
    pub fn bound_flows(&self) -> usize {
        self.bound.len()
    }

    /// Instance flows tracked.
    pub fn instance_flows(&self) -> usize {
        self.instance.len()
    }

    /// The instance the client flow of `proto` from local port
    /// `local_port` is bound to, if it is.
    pub fn bound_instance(&self, proto: IpProtocol, local_port: u16) -> Option<Ipv6Addr> {
        let proto = u8::from(proto);
        self.client.iter().find_map(|(k, f)| match f.bind {
            Bind::Bound(i) if k.local_port == local_port && k.proto == proto => Some(i),
            _ => None,
        })
    }
}

/// Inner workings.
impl Shim {
    /// Whether packets need looking at: configured, or a client job opened
    /// a name. Otherwise ROSA options are only counted, as before the shim.
    fn active(&self) -> bool {
        self.configured || !self.names.by_virt.is_empty()
    }

    /// The port toward `addr`: on-link, else with an IPv6 gateway, else 0.
    fn port_toward(&self, addr: Ipv6Addr) -> usize {
        self.ports
            .iter()
            .position(|p| p.on_link(addr))
            .or_else(|| self.ports.iter().position(|p| p.gateway().is_some()))
            .unwrap_or(0)
    }

    fn ingress_for(&self, port: usize) -> Option<Ipv6Addr> {
        self.s
            .ingress
            .or_else(|| self.ports.get(port).and_then(PortInfo::gateway))
    }

    fn register(&mut self, now: Instant, name: &ServiceName) -> Result<Ipv6Addr, OpenError> {
        if let Some(&v) = self.names.by_name.get(name) {
            if let Some(e) = self.names.by_virt.get_mut(&v) {
                e.used = now;
            }
            return Ok(v);
        }
        let host_bits = 128 - u32::from(self.s.prefix_len);
        let host_mask = if host_bits >= 128 {
            u128::MAX
        } else {
            (1_u128 << host_bits) - 1
        };
        let mut host = u128::from(name.name_hash()) & host_mask;
        if host == 0 {
            host = 1; // not the subnet-router anycast address
        }
        let virt = Ipv6Addr::from(u128::from(self.s.prefix) | host);
        if let Some(e) = self.names.by_virt.get(&virt) {
            return Err(OpenError::Collision(name.clone(), e.name.clone()));
        }
        if self.names.by_virt.len() >= self.s.max_services {
            let idle = self
                .names
                .by_virt
                .iter()
                .filter(|(_, e)| e.flows == 0)
                .min_by_key(|(&v, e)| (e.used, v))
                .map(|(v, _)| *v);
            let Some(old) = idle else {
                return Err(OpenError::Full(self.s.max_services));
            };
            if let Some(e) = self.names.by_virt.remove(&old) {
                self.names.by_name.remove(&e.name);
            }
        }
        self.names.by_virt.insert(
            virt,
            NameEntry {
                name: name.clone(),
                flows: 0,
                used: now,
            },
        );
        self.names.by_name.insert(name.clone(), virt);
        Ok(virt)
    }

    /// Learn link-layer bindings from evidence no router rewrote:
    /// neighbour discovery, and plain packets from on-link sources.
    fn learn_from(&mut self, now: Instant, port: usize, frame: &[u8]) {
        let Some(p) = self.ports.get(port) else {
            return;
        };
        let binding = frame::ndp_binding(frame).or_else(|| {
            let (src, _) = frame::ipv6_addrs(frame)?;
            Some((src, frame::src_mac(frame)?))
        });
        let Some((ip, mac)) = binding else {
            return;
        };
        if !p.on_link(ip) || p.owns(ip) || !mac.is_unicast() || mac == p.mac {
            return;
        }
        self.learn(now, port, ip, mac);
    }

    fn ingress_plain(&mut self, now: Instant, frame: &mut [u8], stats: &mut Counters) -> Verdict {
        if self.bound.is_empty() && self.instance.is_empty() {
            return Verdict::Pass;
        }
        let Some(f) = frame::flow(frame) else {
            return Verdict::Pass;
        };
        let proto: u8 = f.proto.into();
        let bk = BoundKey {
            proto,
            instance: f.src,
            remote_port: f.sport,
            local_port: f.dport,
        };
        if let Some(&virt) = self.bound.get(&bk) {
            let key = ClientKey {
                proto,
                virt,
                remote_port: f.sport,
                local_port: f.dport,
            };
            if let Some(flow) = self.client.get_mut(&key) {
                flow.last = now;
                flow.close.saw(&f, false);
            }
            // Affinity traffic from the instance: smoltcp sees it from the
            // virtual address it talks to.
            return rewrite(frame, AddrField::Src, virt);
        }
        let key = InstanceKey {
            proto,
            local_port: f.dport,
            client: f.src,
            client_port: f.sport,
        };
        if let Some(flow) = self.instance.get_mut(&key) {
            flow.last = now;
            flow.close.saw(&f, false);
            if matches!(flow.via, Via::Sar(_)) {
                flow.via = Via::Direct;
                stats.bump("rosa.instance_direct");
            }
        }
        Verdict::Pass
    }

    /// A Service Request delivered to us as the chosen instance.
    fn ingress_request(
        &mut self,
        now: Instant,
        port: usize,
        frame: &mut [u8],
        msg: &Message,
        stats: &mut Counters,
    ) -> Verdict {
        if self.s.serve.is_empty() {
            return Verdict::Drop("rosa.not_serving");
        }
        let Some(f) = frame::flow(frame) else {
            return Verdict::Drop("rosa.request_not_transport");
        };
        let (Some(IpAddr::V6(client)), Some(ingress), Some(service), Some(fp)) =
            (msg.client(), msg.ingress(), msg.service(), msg.port())
        else {
            return Verdict::Drop("rosa.request_incomplete");
        };
        // The most specific serve entry the request falls under.
        let Some(serve) = self
            .s
            .serve
            .iter()
            .enumerate()
            .filter(|(_, s)| s.name.is_prefix_of(service))
            .max_by_key(|(_, s)| s.name.segment_count())
            .map(|(i, _)| i)
        else {
            return Verdict::Drop("rosa.not_serving");
        };
        if fp.proto != f.proto || fp.port != f.dport {
            return Verdict::Drop("rosa.request_inconsistent");
        }
        if !self.ports.get(port).is_some_and(|p| p.owns(f.dst)) {
            return Verdict::Drop("rosa.request_not_ours");
        }
        let key = InstanceKey {
            proto: f.proto.into(),
            local_port: f.dport,
            client,
            client_port: f.sport,
        };
        let mut response = Message::new(MessageKind::Response);
        response.entries.extend([
            Entry::Client(IpAddr::V6(client)),
            Entry::Ingress(ingress),
            Entry::Service(service.clone()),
            Entry::Port(fp),
        ]);
        if let Some(sag) = msg.sag() {
            response.entries.push(Entry::Sag(sag));
        }
        let fresh = f.tcp_has(SYN) && !f.tcp_has(ACK);
        match self.instance.get_mut(&key) {
            // A new connection on a flow that was closed: start over.
            Some(flow) if fresh && flow.close.closed() => {
                *flow = InstanceFlow {
                    port,
                    serve,
                    via: Via::Sar(Box::new(response)),
                    last: now,
                    close: Close::default(),
                };
                stats.bump("rosa.instance_flows");
            }
            Some(flow) => {
                flow.last = now;
                if let Via::Sar(r) = &mut flow.via {
                    **r = response;
                }
                stats.bump("rosa.requests_repeated");
            }
            None => {
                if self.instance.len() >= self.s.max_flows {
                    return Verdict::Drop("rosa.instance_flows_full");
                }
                self.instance.insert(
                    key,
                    InstanceFlow {
                        port,
                        serve,
                        via: Via::Sar(Box::new(response)),
                        last: now,
                        close: Close::default(),
                    },
                );
                stats.bump("rosa.instance_flows");
                self.arm_sweep(now);
            }
        }
        if let Some(flow) = self.instance.get_mut(&key) {
            flow.close.saw(&f, false);
        }
        stats.bump("rosa.requests_received");
        // smoltcp talks to the client, whoever delivered the request.
        rewrite(frame, AddrField::Src, client)
    }

    /// A Service Response for one of our client flows.
    fn ingress_response(
        &mut self,
        now: Instant,
        port: usize,
        frame: &mut [u8],
        msg: &Message,
        stats: &mut Counters,
    ) -> Verdict {
        let Some(f) = frame::flow(frame) else {
            return Verdict::Drop("rosa.response_not_transport");
        };
        let (Some(service), Some(IpAddr::V6(instance)), Some(fp)) =
            (msg.service(), msg.instance(), msg.port())
        else {
            return Verdict::Drop("rosa.response_incomplete");
        };
        let Some(&virt) = self.names.by_name.get(service) else {
            return Verdict::Drop("rosa.response_unmatched");
        };
        let client_ok = msg.client() == Some(IpAddr::V6(f.dst));
        if fp.proto != f.proto || fp.port != f.sport || !client_ok {
            return Verdict::Drop("rosa.response_inconsistent");
        }
        let proto: u8 = f.proto.into();
        let key = ClientKey {
            proto,
            virt,
            remote_port: f.sport,
            local_port: f.dport,
        };
        let Some(flow) = self.client.get_mut(&key) else {
            return Verdict::Drop("rosa.response_unmatched");
        };
        match flow.bind {
            Bind::Requesting => {
                flow.bind = Bind::Bound(instance);
                self.bound.insert(
                    BoundKey {
                        proto,
                        instance,
                        remote_port: f.sport,
                        local_port: f.dport,
                    },
                    virt,
                );
                stats.bump("rosa.responses_received");
            }
            Bind::Bound(i) if i == instance => stats.bump("rosa.responses_duplicate"),
            Bind::Bound(_) => {
                // Another instance answered a retransmitted request (the
                // ingress scheduled it elsewhere). The transaction stays
                // where it is; the other instance's half-open connection
                // is reset so it stops answering.
                if f.tcp_has(SYN) && f.tcp_has(ACK) {
                    if let Some(mac) = self.ports.get(port).map(|p| p.mac) {
                        let rst = frame::tcp_reset(mac, f.dst, instance, f.dport, f.sport, f.ack);
                        stats.bump("rosa.conflict_resets");
                        self.send_built(now, port, instance, rst, stats);
                    }
                }
                return Verdict::Drop("rosa.response_conflict");
            }
        }
        flow.last = now;
        flow.close.saw(&f, false);
        rewrite(frame, AddrField::Src, virt)
    }

    fn egress_client(
        &mut self,
        now: Instant,
        port: usize,
        frame: &mut Vec<u8>,
        f: Flow,
        stats: &mut Counters,
    ) -> Verdict {
        let ingress = self.ingress_for(port);
        let Some(entry) = self.names.by_virt.get_mut(&f.dst) else {
            return Verdict::Drop("rosa.unknown_virtual");
        };
        entry.used = now;
        let key = ClientKey {
            proto: f.proto.into(),
            virt: f.dst,
            remote_port: f.dport,
            local_port: f.sport,
        };
        let opens = f.proto != IpProtocol::Tcp || (f.tcp_has(SYN) && !f.tcp_has(ACK));
        if !self.client.contains_key(&key) {
            if !opens {
                return Verdict::Drop("rosa.no_flow");
            }
            if self.client.len() >= self.s.max_flows {
                return Verdict::Drop("rosa.flows_full");
            }
            let Some(ingress) = ingress else {
                return Verdict::Drop("rosa.no_ingress");
            };
            entry.flows += 1;
            self.client.insert(
                key,
                ClientFlow {
                    port,
                    ingress,
                    bind: Bind::Requesting,
                    last: now,
                    close: Close::default(),
                },
            );
            stats.bump("rosa.client_flows");
            self.arm_sweep(now);
        }
        // NOTE(unwrap): present, inserted above if it was not.
        let flow = self.client.get_mut(&key).unwrap();
        if opens && f.proto == IpProtocol::Tcp && flow.close.closed() {
            // The local port is reused for a new connection: a new transaction.
            if let Bind::Bound(i) = flow.bind {
                self.bound.remove(&BoundKey {
                    proto: key.proto,
                    instance: i,
                    remote_port: key.remote_port,
                    local_port: key.local_port,
                });
            }
            flow.bind = Bind::Requesting;
            flow.close = Close::default();
        }
        flow.last = now;
        flow.close.saw(&f, true);
        match flow.bind {
            Bind::Requesting => {
                if f.proto == IpProtocol::Tcp && !f.tcp_has(SYN) {
                    // e.g. the reset of an aborted connect: no instance to tell.
                    return Verdict::Drop("rosa.unbound");
                }
                let ingress = flow.ingress;
                let name = self.names.by_virt.get(&f.dst).map(|e| e.name.clone());
                let Some(name) = name else {
                    return Verdict::Drop("rosa.unknown_virtual");
                };
                let mut msg = Message::new(MessageKind::Request);
                msg.entries.extend([
                    Entry::Client(IpAddr::V6(f.src)),
                    Entry::Ingress(IpAddr::V6(ingress)),
                    Entry::Service(name),
                    Entry::Port(FlowPort {
                        proto: f.proto,
                        port: f.dport,
                    }),
                ]);
                if let Err(v) = insert_rosa(frame, &msg) {
                    return v;
                }
                if let v @ Verdict::Drop(_) = rewrite(frame, AddrField::Dst, ingress) {
                    return v;
                }
                stats.bump("rosa.requests_sent");
                self.route(now, port, ingress, frame, stats)
            }
            Bind::Bound(instance) => {
                if let v @ Verdict::Drop(_) = rewrite(frame, AddrField::Dst, instance) {
                    return v;
                }
                self.route(now, port, instance, frame, stats)
            }
        }
    }

    fn egress_instance(
        &mut self,
        now: Instant,
        port: usize,
        frame: &mut Vec<u8>,
        f: Flow,
        key: InstanceKey,
        stats: &mut Counters,
    ) -> Verdict {
        let Some(flow) = self.instance.get_mut(&key) else {
            return Verdict::Pass;
        };
        flow.last = now;
        flow.close.saw(&f, true);
        match &flow.via {
            Via::Sar(response) => {
                let Some(sar) = self.s.sar else {
                    return Verdict::Drop("rosa.no_sar");
                };
                let mut msg = (**response).clone();
                msg.set(Entry::Instance(IpAddr::V6(f.src)));
                if let Err(v) = insert_rosa(frame, &msg) {
                    return v;
                }
                if let v @ Verdict::Drop(_) = rewrite(frame, AddrField::Dst, sar) {
                    return v;
                }
                stats.bump("rosa.responses_sent");
                self.route(now, port, sar, frame, stats)
            }
            // smoltcp may have learned the client's MAC from a request the
            // SAR delivered (the runtime gleans after our source rewrite):
            // address the frame to the client's own next hop.
            Via::Direct => self.route(now, port, f.dst, frame, stats),
        }
    }

    /// Address a frame smoltcp sent to the next hop toward `dst`, or park it.
    fn route(
        &mut self,
        now: Instant,
        port: usize,
        dst: Ipv6Addr,
        frame: &mut Vec<u8>,
        stats: &mut Counters,
    ) -> Verdict {
        let Some(hop) = self.ports.get(port).and_then(|p| p.next_hop(dst)) else {
            return Verdict::Drop("rosa.no_route");
        };
        match self.hops.send(now, (port, hop), frame) {
            Sent::Ready => Verdict::Pass,
            Sent::Parked => {
                stats.bump("rosa.parked");
                self.resolve.extend(self.hops.due_for_resolution(now));
                Verdict::Consume
            }
            Sent::Full => Verdict::Drop("rosa.parked_full"),
        }
    }

    /// Send a frame the shim built itself toward `dst`.
    fn send_built(
        &mut self,
        now: Instant,
        port: usize,
        dst: Ipv6Addr,
        mut frame: Vec<u8>,
        stats: &mut Counters,
    ) {
        match self.route(now, port, dst, &mut frame, stats) {
            Verdict::Pass => self.transmit.push_back((port, frame)),
            Verdict::Drop(reason) => stats.drop(reason),
            Verdict::Consume => {}
        }
    }

    /// An announcement or withdrawal frame for `serve[i]`.
    fn control(&self, a: &Announcer, kind: MessageKind, i: usize) -> Option<Vec<u8>> {
        let serve = self.s.serve.get(i)?;
        let mut msg = Message::new(kind);
        msg.entries.push(Entry::Instance(IpAddr::V6(a.addr)));
        msg.entries.push(Entry::Service(serve.name.clone()));
        if kind == MessageKind::Announcement {
            let mut c = serve.constraints.clone();
            if serve.live_step.is_some() {
                c.0.push(Constraint::Load(a.load.get(i).copied().unwrap_or(0)));
            }
            msg.entries.push(Entry::Constraint(c));
        }
        if let Some((key_id, secret)) = &self.s.key {
            msg.sign(*key_id, secret, a.addr).ok()?;
        }
        let bytes = msg.to_bytes().ok()?;
        let mac = self.ports.get(a.port)?.mac;
        frame::control_frame(mac, a.addr, a.sar, &bytes)
    }

    fn arm_sweep(&mut self, now: Instant) {
        if self.next_sweep.is_none() {
            self.next_sweep = Some(now + SWEEP_INTERVAL);
        }
    }

    /// Forget idle flows: open ones after `flow_idle_s`, closed ones after
    /// `flow_linger_s`.
    fn sweep(&mut self, now: Instant, stats: &mut Counters) {
        let (idle, linger) = (self.s.flow_idle, self.s.flow_linger);
        let limit = |c: &Close| if c.closed() { linger } else { idle };
        let (bound, names) = (&mut self.bound, &mut self.names);
        let mut expired = 0;
        self.client.retain(|k, f| {
            if now - f.last < limit(&f.close) {
                return true;
            }
            if let Bind::Bound(instance) = f.bind {
                bound.remove(&BoundKey {
                    proto: k.proto,
                    instance,
                    remote_port: k.remote_port,
                    local_port: k.local_port,
                });
            }
            if let Some(e) = names.by_virt.get_mut(&k.virt) {
                e.flows = e.flows.saturating_sub(1);
            }
            expired += 1;
            false
        });
        stats.add("rosa.client_flows_expired", expired);
        let before = self.instance.len();
        self.instance.retain(|_, f| now - f.last < limit(&f.close));
        stats.add(
            "rosa.instance_flows_expired",
            (before - self.instance.len()) as u64,
        );
    }
}

/// Insert (or replace) the ROSA option carrying `msg`.
fn insert_rosa(frame: &mut Vec<u8>, msg: &Message) -> Result<(), Verdict> {
    let too_long = |_| Verdict::Drop("rosa.option_too_long");
    let bytes = msg.to_bytes().map_err(too_long)?;
    let opt = OptionRepr::new(OptionType::Rosa, &bytes).map_err(too_long)?;
    edit::insert_dest_opts(frame, &[opt]).map_err(|_| Verdict::Drop("rosa.insert_failed"))
}

/// Rewrite an address (checksums fixed incrementally); `Pass` or a drop.
fn rewrite(frame: &mut [u8], field: AddrField, to: Ipv6Addr) -> Verdict {
    match edit::rewrite_addr(frame, field, IpAddr::V6(to)) {
        Ok(_) => Verdict::Pass,
        Err(_) => Verdict::Drop("rosa.rewrite_failed"),
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} via ingress {} (port {})",
            self.virt, self.ingress, self.port
        )
    }
}
