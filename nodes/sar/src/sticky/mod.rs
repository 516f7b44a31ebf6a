// Over 800 lines: the engine that joins the ingress and egress halves of both drafts; its parts (table, sites, anchor, meter, tunnel) are already submodules.
//! # Sticky service and App-Metrics in the SAR (SPEC §3)
//!
//! Two drafts, one engine, sans-IO:
//! draft-dunbar-6man-5g-edge-compute-sticky-service-02 keeps a UE's flow
//! on the anycast site (egress, "A-ER") it started at, across the UE's
//! moves between ingresses; draft-dunbar-lsr-5g-edge-compute-ospf-ext-03
//! lets ingresses choose the site of a new flow by the load, capacity,
//! preference and delay the egresses advertise.
//!
//! ```text
//!   ingress (client side)                              egress (A-ER, anycast servers attached)
//!   UE ─► ACL? ─► Sticky-Dst ─► that egress            tunnel in ─► from a SAR? ─► decapsulate
//!              └► table (service+flow label / UE)         ─► meter (to) ─► flows: anchor, ingress
//!              └► miss: Sites::choose (App-Metrics)       ─► the server
//!          ─► tunnel (IPv6-in-IPv6 | GRE) ─────────────►
//!   UE ◄─ learn entry ◄─ decapsulate ◄─ tunnel ◄────── server's reply ─► meter (from)
//!                                                        ─► flows: dst back to the UE's address now
//!                                                        ─► Sticky-Dst inserted (end-node mode)
//!                                                        ─► tunnelled to the ingress (tunnel mode)
//!   IGP: App-Metrics LSAs (egress, each period) ─► Sites ; Sticky LSAs (ingress, every flood_s)
//!        ─► the group's tables (scenario 1), UE hand-overs (scenario 2); probes ─► RTT
//! ```
//!
//! [`Sticky`] decides; [`crate::datapath`]'s sticky steps
//! (`sticky_path.rs`) do the frame surgery. The core's IGP carries the
//! LSAs: [`Sticky::sync`] reads what changed and hands over what to
//! originate. Time is the `now` passed in; the table keeps whole seconds.
//!
//! - [`config`]: the `[sar.sticky]` section.
//! - [`table`]: the Sticky-Service-Table.
//! - [`sites`]: the egress sites and the choice of one.
//! - [`meter`]: the egress's App-Metrics.
//! - [`anchor`]: the egress's flows (replies, moved UEs).
//! - [`tunnel`]: IPv6-in-IPv6 and GRE.

pub mod anchor;
pub mod config;
pub mod meter;
pub mod sites;
pub mod table;
pub mod tunnel;

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::{IpAddr, Ipv6Addr};

use serde_json::{json, Value};
use smoltcp::time::{Duration, Instant};
use svcroute_stack::timer::TimerTable;
use svcroute_stack::timers;
use svcroute_stack::wire::auth::AuthCheck;
use svcroute_stack::wire::igp::{
    LsaBody, LsaKind, Message, Probe, RouterId, StickyEntry, StickyKey, MAX_STICKY,
};
use svcroute_stack::wire::sticky::StickyDst;

use crate::counters::{Counters, Tally};
use crate::igp::{Change, Key};
use crate::router::Prefix;
use crate::Sar;

use self::anchor::{Flow, FlowId, Flows, ToServer};
use self::config::{EgressSettings, StickySettings};
use self::meter::Meters;
use self::sites::Sites;
use self::table::{FlowKey, Origin, Table};
use self::tunnel::TunnelKind;

/// Most anycast addresses (sticky services) one SAR tracks.
pub const MAX_SERVICES: usize = 4096;
/// Entries a control answer lists at most.
const MAX_LISTED: usize = 1000;

timers! {
    /// The sticky engine's timers.
    enum Timer {
        /// Flood the table to the group (ingress).
        Flood,
        /// Drop expired entries and flows.
        Sweep,
        /// Probe the egress sites (ingress).
        Probe,
        /// The measurement period ends (egress).
        Period,
    }
}

/// Node time in whole seconds.
fn secs(now: Instant) -> u32 {
    (now.total_millis().max(0) / 1000) as u32
}

/// What an ingress does with a packet to a sticky service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Steer {
    /// Tunnel it to this egress.
    Tunnel {
        /// The egress address.
        to: Ipv6Addr,
        /// The tunnel it asks for.
        kind: TunnelKind,
    },
    /// Drop it, counting `reason`; `unreachable`: answer Destination
    /// Unreachable.
    Drop {
        /// `drop.sar.<reason>`.
        reason: &'static str,
        /// Send ICMPv6 no-route.
        unreachable: bool,
    },
}

/// The sticky engine. See the module docs.
#[derive(Debug)]
pub struct Sticky {
    cfg: StickySettings,
    me: Ipv6Addr,
    router_id: RouterId,
    key: Option<Key>,
    client_prefixes: Vec<Prefix>,
    services: Vec<Ipv6Addr>,
    service_idx: HashMap<Ipv6Addr, u16>,
    table: Option<Table>,
    sites: Sites,
    meters: Option<Meters>,
    flows: Option<Flows>,
    sars: HashSet<Ipv6Addr>,
    timers: TimerTable<Timer>,
    probe_seq: u32,
    probes: VecDeque<(Ipv6Addr, Vec<u8>)>,
    lsas: VecDeque<(u16, LsaBody)>,
    flooded_parts: u16,
    resync: bool,
    tally: Tally,
}

impl Sticky {
    /// The engine of SAR `router_id` at `me` (IGP `key`), whose
    /// client-facing prefixes are `client_prefixes`, starting at `now`.
    pub fn new(
        cfg: StickySettings,
        me: Ipv6Addr,
        router_id: RouterId,
        key: Option<Key>,
        client_prefixes: Vec<Prefix>,
        now: Instant,
    ) -> Self {
        let mut timers = TimerTable::default();
        let table = cfg.ingress.as_ref().map(|i| {
            timers.set(Timer::Flood, now + Duration::from_secs(i.flood_s));
            timers.set(Timer::Probe, now);
            Table::new(i.timer_s, i.max_entries)
        });
        let (meters, flows) = match &cfg.egress {
            Some(e) => {
                timers.set(
                    Timer::Period,
                    now + Duration::from_secs(u64::from(e.period_s)),
                );
                (
                    Some(Meters::new(e)),
                    Some(Flows::new(e.flow_timer_s, e.max_flows)),
                )
            }
            None => (None, None),
        };
        timers.set(Timer::Sweep, now + Duration::from_secs(1));
        let mut me_ = Self {
            cfg,
            me,
            router_id,
            key,
            client_prefixes,
            services: Vec::new(),
            service_idx: HashMap::new(),
            table,
            sites: Sites::default(),
            meters,
            flows,
            sars: HashSet::new(),
            timers,
            probe_seq: 0,
            probes: VecDeque::new(),
            lsas: VecDeque::new(),
            flooded_parts: 0,
            resync: true,
            tally: Tally::default(),
        };
        me_.originate_metrics();
        me_
    }

    /// The settings.
    pub const fn settings(&self) -> &StickySettings {
        &self.cfg
    }

    /// Whether `addr` is a sticky service ID (in the ACL).
    pub fn is_sticky(&self, addr: Ipv6Addr) -> bool {
        self.cfg.matches(addr)
    }

    /// Whether this SAR is an ingress.
    pub const fn is_ingress(&self) -> bool {
        self.table.is_some()
    }

    /// The egress settings, if this SAR is an egress.
    pub const fn egress(&self) -> Option<&EgressSettings> {
        self.cfg.egress.as_ref()
    }

    /// Whether the server of `anycast` is attached here.
    pub fn serves(&self, anycast: Ipv6Addr) -> bool {
        self.meters.as_ref().is_some_and(|m| m.serves(anycast))
    }

    /// Whether `addr` is the address of a SAR of the domain (a tunnel may
    /// come from it).
    pub fn is_sar(&self, addr: Ipv6Addr) -> bool {
        self.sars.contains(&addr)
    }

    /// The address an egress puts in Sticky-Dst: its proxy, or its own.
    pub fn option_addr(&self) -> Ipv6Addr {
        self.egress().and_then(|e| e.proxy).unwrap_or(self.me)
    }

    /// The site registry.
    pub const fn sites(&self) -> &Sites {
        &self.sites
    }

    /// The table (ingress).
    pub const fn table(&self) -> Option<&Table> {
        self.table.as_ref()
    }

    /// The flows (egress).
    pub const fn flows(&self) -> Option<&Flows> {
        self.flows.as_ref()
    }

    /// The counters since the last call.
    pub fn drain_counters(&mut self) -> Counters {
        let mut c = Counters::new();
        self.tally.drain_into(&mut c);
        c
    }

    /// The counters since start.
    pub fn counters(&self) -> &Counters {
        self.tally.total()
    }

    fn service(&mut self, anycast: Ipv6Addr) -> Option<u16> {
        if let Some(i) = self.service_idx.get(&anycast) {
            return Some(*i);
        }
        if self.services.len() >= MAX_SERVICES {
            self.tally.bump("drop.sar.sticky_services_full");
            return None;
        }
        let i = self.services.len() as u16;
        self.services.push(anycast);
        self.service_idx.insert(anycast, i);
        Some(i)
    }

    fn w(&self) -> f64 {
        self.cfg.ingress.as_ref().map_or(0.5, |i| i.w)
    }

    // ---- ingress --------------------------------------------------------

    /// A packet from UE `src` to sticky service `dst` with flow label
    /// `label`, carrying Sticky-Dst `opt` if any: where it goes (draft
    /// §4.4, §5.1).
    pub fn steer(
        &mut self,
        now: Instant,
        src: Ipv6Addr,
        dst: Ipv6Addr,
        label: u32,
        opt: Option<&StickyDst>,
    ) -> Steer {
        let Some(ingress) = self.cfg.ingress.clone() else {
            return Steer::Drop {
                reason: "sar.sticky_not_ingress",
                unreachable: false,
            };
        };
        let Some(service) = self.service(dst) else {
            return self.choose_only(dst);
        };
        let now_s = secs(now);
        let apn6 = opt.and_then(StickyDst::apn6);
        let required = apn6.is_some_and(|a| a.level >= 2);
        let mut keys: Vec<FlowKey> = Vec::with_capacity(2);
        if let Some(a) = apn6 {
            keys.push(FlowKey::Apn6 {
                service_id: a.service_id,
                flow_id: a.flow_id,
            });
        } else {
            if ingress.keys.flow_label && label != 0 {
                keys.push(FlowKey::Label(label));
            }
            if ingress.keys.ue {
                keys.push(FlowKey::Ue(src));
            }
        }
        // 1. The option names the egress (end-node mode).
        if let Some(IpAddr::V6(named)) = opt.and_then(StickyDst::egress_addr) {
            let egress = ingress
                .proxies
                .iter()
                .find(|(p, _)| *p == named)
                .map_or(named, |(_, e)| *e);
            let Some(site) = self.sites.by_addr(egress) else {
                return Steer::Drop {
                    reason: "sar.sticky_forged_egress",
                    unreachable: false,
                };
            };
            if self.sites.get(site).is_some_and(|s| s.serves(dst)) {
                self.tally.bump("sar.sticky_by_option");
                self.remember(service, &keys, site, Origin::Option, now_s);
                return self.tunnel_to(site);
            }
            return self.fail_over(service, dst, &keys, required, now_s);
        }
        // 2. The table.
        let table = self.table.as_mut().expect("an ingress has a table");
        let hit = keys.iter().find_map(|k| table.hit(service, *k, now_s));
        if let Some(e) = hit {
            if self.sites.get(e.site).is_some_and(|s| s.serves(dst)) {
                self.tally.bump("sar.sticky_table_hit");
                // The other keys of the flow follow the one that hit.
                self.remember(service, &keys, e.site, e.origin, now_s);
                return self.tunnel_to(e.site);
            }
            return self.fail_over(service, dst, &keys, required, now_s);
        }
        // 3. A first packet.
        let Some(site) = self.sites.choose(dst, ingress.w) else {
            return Steer::Drop {
                reason: "sar.sticky_no_site",
                unreachable: true,
            };
        };
        self.tally.bump("sar.sticky_new_flow");
        self.remember(service, &keys, site, Origin::Chosen, now_s);
        self.tunnel_to(site)
    }

    /// The sticky egress of a flow is gone (unreachable, or no longer
    /// serving): a preferred flow moves to the best site now, a required
    /// one is dropped.
    fn fail_over(
        &mut self,
        service: u16,
        dst: Ipv6Addr,
        keys: &[FlowKey],
        required: bool,
        now_s: u32,
    ) -> Steer {
        if required {
            return Steer::Drop {
                reason: "sar.sticky_required_egress_down",
                unreachable: true,
            };
        }
        let Some(site) = self.sites.choose(dst, self.w()) else {
            return Steer::Drop {
                reason: "sar.sticky_no_site",
                unreachable: true,
            };
        };
        self.tally.bump("sar.sticky_failover");
        self.remember(service, keys, site, Origin::Chosen, now_s);
        self.tunnel_to(site)
    }

    /// Steering without a service index (the service registry is full).
    fn choose_only(&mut self, dst: Ipv6Addr) -> Steer {
        match self.sites.choose(dst, self.w()) {
            Some(site) => self.tunnel_to(site),
            None => Steer::Drop {
                reason: "sar.sticky_no_site",
                unreachable: true,
            },
        }
    }

    /// Point the flow's `keys` at `site`; a table at its cap remembers no
    /// new flow (the packet still goes: counted, not dropped).
    fn remember(&mut self, service: u16, keys: &[FlowKey], site: u16, origin: Origin, now_s: u32) {
        let Some(table) = self.table.as_mut() else {
            return;
        };
        let timer = table.timer_s();
        for k in keys {
            if table
                .get(service, *k, now_s)
                .is_some_and(|e| e.site == site)
            {
                continue;
            }
            if table
                .insert(service, *k, site, origin, now_s, timer)
                .is_err()
            {
                self.tally.bump(if origin == Origin::Reply {
                    "sar.sticky_reply_not_learned_table_full"
                } else {
                    "sar.sticky_not_remembered_table_full"
                });
            }
        }
    }

    fn tunnel_to(&self, site: u16) -> Steer {
        match self.sites.get(site).and_then(|s| Some((s.addr?, s.tunnel))) {
            Some((to, kind)) => Steer::Tunnel { to, kind },
            None => Steer::Drop {
                reason: "sar.sticky_no_site",
                unreachable: true,
            },
        }
    }

    /// A reply from sticky service `anycast` to UE `ue` with flow label
    /// `label`, tunnelled by egress `egress` (draft §5.1): the egress is
    /// the flow's sticky egress from now on.
    pub fn learn_reply(
        &mut self,
        now: Instant,
        egress: Ipv6Addr,
        anycast: Ipv6Addr,
        ue: Ipv6Addr,
        label: u32,
    ) {
        let Some(keys) = self.cfg.ingress.as_ref().map(|i| i.keys) else {
            return;
        };
        let (Some(site), Some(service)) = (self.sites.by_addr(egress), self.service(anycast))
        else {
            return;
        };
        let mut k = Vec::with_capacity(2);
        if keys.ue {
            k.push(FlowKey::Ue(ue));
        }
        if keys.flow_label && label != 0 {
            k.push(FlowKey::Label(label));
        }
        self.tally.bump("sar.sticky_learned_from_reply");
        self.remember(service, &k, site, Origin::Reply, secs(now));
    }

    /// Scenario 2: UE `old` is now `new`, attached to `new_ingress` (a
    /// router ID or address): its entries are handed over. Returns how many.
    pub fn ue_moved(
        &mut self,
        now: Instant,
        old: Ipv6Addr,
        new: Ipv6Addr,
        new_ingress: &str,
        known: impl Fn(&str) -> bool,
    ) -> Result<usize, String> {
        if !known(new_ingress) {
            return Err(format!(
                "{new_ingress:?} is no SAR this IGP knows (router ID or address)"
            ));
        }
        let Some(table) = self.table.as_mut() else {
            return Err("not a sticky ingress ([sar.sticky.ingress])".into());
        };
        let moved = table.rekey_ue(old, new, secs(now));
        if moved.is_empty() {
            return Err(format!("no live entry keyed by UE {old}"));
        }
        self.tally.add("sar.sticky_handoff_out", moved.len() as u64);
        self.flood(now);
        Ok(moved.len())
    }

    // ---- egress ---------------------------------------------------------

    /// A packet of `len` octets from client `client` to the attached
    /// server of `id.anycast`, through `ingress` if it came in a tunnel.
    pub fn to_server(
        &mut self,
        now: Instant,
        id: FlowId,
        client: Ipv6Addr,
        ingress: Option<(Ipv6Addr, TunnelKind)>,
        len: usize,
    ) -> ToServer {
        if let Some(m) = self.meters.as_mut() {
            m.count(id.anycast, true, len);
        }
        let Some(flows) = self.flows.as_mut() else {
            return ToServer::Full;
        };
        let r = flows.to_server(id, client, ingress, secs(now));
        match r {
            ToServer::New => self.tally.bump("sar.sticky_egress_flow"),
            ToServer::Moved { .. } => self.tally.bump("sar.sticky_egress_moved_ue"),
            ToServer::Full => self.tally.bump("drop.sar.sticky_flows_full"),
            ToServer::Known => {}
        }
        r
    }

    /// A packet of `len` octets to the server of `anycast` that belongs to
    /// no transport flow we follow (not TCP or UDP): counted only.
    pub fn to_server_unflowed(&mut self, anycast: Ipv6Addr, len: usize) {
        if let Some(m) = self.meters.as_mut() {
            m.count(anycast, true, len);
        }
    }

    /// A reply of `len` octets from the server of `anycast` that belongs
    /// to no transport flow we follow: counted only.
    pub fn from_server_unflowed(&mut self, anycast: Ipv6Addr, len: usize) {
        if let Some(m) = self.meters.as_mut() {
            m.count(anycast, false, len);
        }
    }

    /// A reply of `len` octets from the attached server of `anycast`
    /// (`server_port`) to `client`:`client_port`: its flow, if known.
    #[allow(clippy::too_many_arguments)]
    pub fn from_server(
        &mut self,
        now: Instant,
        anycast: Ipv6Addr,
        proto: u8,
        server_port: u16,
        client: Ipv6Addr,
        client_port: u16,
        len: usize,
    ) -> Option<Flow> {
        if let Some(m) = self.meters.as_mut() {
            m.count(anycast, false, len);
        }
        self.flows.as_mut()?.from_server(
            anycast,
            proto,
            server_port,
            client,
            client_port,
            secs(now),
        )
    }

    /// `ctl metrics set capacity|preference <anycast> <value>`.
    pub fn set_metric(&mut self, what: &str, anycast: Ipv6Addr, value: u32) -> Result<(), String> {
        let Some(m) = self.meters.as_mut() else {
            return Err("not a sticky egress ([sar.sticky.egress])".into());
        };
        let Some(meter) = m.get_mut(anycast) else {
            return Err(format!("{anycast} is not served here"));
        };
        if value == 0 {
            return Err("the value must be at least 1".into());
        }
        match what {
            "capacity" => meter.site.capacity = value,
            "preference" => meter.site.preference = value,
            "cost" => meter.site.cost = Some(value),
            other => return Err(format!("{other:?}: say capacity, preference or cost")),
        }
        self.tally.bump("sar.sticky_metrics_set");
        self.originate_metrics();
        Ok(())
    }

    fn originate_metrics(&mut self) {
        let (Some(m), Some(e)) = (self.meters.as_ref(), self.cfg.egress.as_ref()) else {
            return;
        };
        self.lsas.push_back((0, LsaBody::AppMetrics(m.entries(e))));
        self.tally.bump("sar.app_metrics_originated");
    }

    // ---- probes ---------------------------------------------------------

    /// An RTT probe datagram to send: (destination, bytes) over UDP 7470.
    #[must_use]
    pub fn poll_probe(&mut self) -> Option<(Ipv6Addr, Vec<u8>)> {
        self.probes.pop_front()
    }

    /// A probe datagram (IGP type 4) from `from` at `now`.
    pub fn handle_probe(&mut self, now: Instant, from: Ipv6Addr, datagram: &[u8]) {
        let key = self.key.as_ref();
        let secret_for = |id: u8| key.filter(|k| k.id == id).map(|k| &k.secret[..]);
        let Ok((Message::Probe(p), check)) = Message::decode(datagram, secret_for) else {
            self.tally.bump("drop.sar.probe_malformed");
            return;
        };
        if self.key.is_some() && !matches!(check, AuthCheck::Good(_)) {
            self.tally.bump("drop.sar.probe_auth");
            return;
        }
        if p.reply {
            let now_us = now.total_micros().max(0) as u64;
            if p.sent_at_us > now_us {
                self.tally.bump("drop.sar.probe_from_the_future");
                return;
            }
            self.tally.bump("sar.probe_replies");
            self.sites.rtt_sample(p.router_id, now_us - p.sent_at_us);
            return;
        }
        let reply = Probe {
            router_id: self.router_id,
            reply: true,
            ..p
        };
        if let Ok(bytes) = self.encode(&Message::Probe(reply)) {
            self.tally.bump("sar.probes_answered");
            self.probes.push_back((from, bytes));
        }
    }

    fn encode(&self, m: &Message) -> Result<Vec<u8>, svcroute_stack::wire::Error> {
        m.encode(self.key.as_ref().map(|k| (k.id, &k.secret[..])))
    }

    fn send_probes(&mut self, now: Instant) {
        let now_us = now.total_micros().max(0) as u64;
        let targets: Vec<Ipv6Addr> = self
            .sites
            .list()
            .iter()
            .filter(|s| s.path_cost.is_some() && !s.offers.is_empty() && s.router != self.router_id)
            .filter_map(|s| s.addr)
            .collect();
        for to in targets {
            self.probe_seq = self.probe_seq.wrapping_add(1);
            let p = Message::Probe(Probe {
                router_id: self.router_id,
                seq: self.probe_seq,
                sent_at_us: now_us,
                reply: false,
            });
            if let Ok(bytes) = self.encode(&p) {
                self.tally.bump("sar.probes_sent");
                self.probes.push_back((to, bytes));
            }
        }
    }

    // ---- the IGP --------------------------------------------------------

    /// Read what changed in `core`'s LSDB and SPF; hand it what to
    /// originate. Call after every input to the core.
    pub fn sync(&mut self, now: Instant, core: &mut Sar) {
        let mut routes = std::mem::take(&mut self.resync);
        let mut metrics = Vec::new();
        let mut sticky = Vec::new();
        if routes {
            for l in core.igp().lsas(now) {
                match l.body.kind() {
                    LsaKind::AppMetrics => metrics.push(l.origin),
                    LsaKind::Sticky => sticky.push((l.origin, l.part)),
                    _ => {}
                }
            }
        }
        while let Some(c) = core.poll_sticky_change() {
            match c {
                Change::Routes => routes = true,
                Change::Lsa((o, LsaKind::AppMetrics, _)) => metrics.push(o),
                Change::Lsa((o, LsaKind::Sticky, p)) => sticky.push((o, p)),
                Change::Lsa(_) => {}
            }
        }
        if core.sticky_changes_overflowed() {
            self.resync = true;
        }
        for o in metrics {
            let entries: Vec<(Ipv6Addr, _)> = core
                .igp()
                .lsa(now, &(o, LsaKind::AppMetrics, 0))
                .and_then(|(l, _)| match &l.body {
                    LsaBody::AppMetrics(e) => Some(
                        e.iter()
                            .filter_map(|x| match x.anycast {
                                IpAddr::V6(a) => Some((a, x.metrics.clone())),
                                IpAddr::V4(_) => None,
                            })
                            .collect(),
                    ),
                    _ => None,
                })
                .unwrap_or_default();
            self.sites.set_offers(o, &entries);
            routes = true;
        }
        if routes {
            let table = core.igp().routes();
            self.sites
                .set_routes(|r| table.get(&r).map(|rt| (rt.addr, rt.cost)));
            self.sars = table.values().map(|r| r.addr).collect();
        }
        for (o, part) in sticky {
            if o != self.router_id {
                self.merge(now, core, o, part);
            }
        }
        while let Some((part, body)) = self.lsas.pop_front() {
            match body {
                LsaBody::AppMetrics(e) => core.originate_app_metrics(now, e),
                LsaBody::Sticky(e) => core.originate_sticky(now, part, e),
                _ => {}
            }
        }
    }

    /// A Sticky LSA from `origin`: entries from the group are merged
    /// (scenario 1); entries keyed by a UE on one of our client prefixes
    /// are a hand-over to us (scenario 2).
    fn merge(&mut self, now: Instant, core: &Sar, origin: RouterId, part: u16) {
        let Some(ingress) = self.cfg.ingress.as_ref() else {
            return;
        };
        let in_group = ingress.group.contains(&origin.0);
        let Some((lsa, _)) = core.igp().lsa(now, &(origin, LsaKind::Sticky, part)) else {
            return;
        };
        let LsaBody::Sticky(entries) = &lsa.body else {
            return;
        };
        let age = u32::from(lsa.age);
        let entries = entries.clone();
        let now_s = secs(now);
        for e in entries {
            let (IpAddr::V6(anycast), IpAddr::V6(egress)) = (e.service_id, e.egress) else {
                continue;
            };
            let (key, origin) = match e.key {
                StickyKey::FlowLabel(l) if in_group => (FlowKey::Label(l), Origin::Merged),
                StickyKey::Ue(IpAddr::V6(ue))
                    if self.client_prefixes.iter().any(|p| p.contains(ue)) =>
                {
                    (FlowKey::Ue(ue), Origin::Handoff)
                }
                StickyKey::Ue(IpAddr::V6(ue)) if in_group => (FlowKey::Ue(ue), Origin::Merged),
                _ => continue,
            };
            let left = e.remaining_s.saturating_sub(age);
            if left == 0 || !self.is_sticky(anycast) {
                continue;
            }
            let (Some(site), Some(service)) = (self.sites.by_addr(egress), self.service(anycast))
            else {
                self.tally.bump("drop.sar.sticky_merge_unknown_egress");
                continue;
            };
            let Some(table) = self.table.as_mut() else {
                return;
            };
            // What this ingress learned itself wins over what it is told.
            if table
                .get(service, key, now_s)
                .is_some_and(|x| x.origin != Origin::Merged && origin == Origin::Merged)
            {
                continue;
            }
            match table.insert(service, key, site, origin, now_s, left) {
                Ok(()) => self.tally.bump(if origin == Origin::Handoff {
                    "sar.sticky_handoff_in"
                } else {
                    "sar.sticky_merged"
                }),
                Err(_) => self.tally.bump("sar.sticky_not_merged_table_full"),
            }
        }
    }

    /// Flood our own entries (not the merged ones) to the group now.
    fn flood(&mut self, now: Instant) {
        let Some(ingress) = self.cfg.ingress.as_ref() else {
            return;
        };
        let Some(table) = self.table.as_ref() else {
            return;
        };
        let now_s = secs(now);
        let mut entries: Vec<StickyEntry> = Vec::new();
        for (service, key, e) in table.iter(now_s) {
            if entries.len() >= ingress.max_flooded {
                break;
            }
            if !e.origin.floods() {
                continue;
            }
            let Some(egress) = self.sites.get(e.site).and_then(|s| s.addr) else {
                continue;
            };
            let key = match key {
                FlowKey::Label(l) => StickyKey::FlowLabel(l),
                FlowKey::Ue(a) => StickyKey::Ue(IpAddr::V6(a)),
                FlowKey::Apn6 { .. } => continue,
            };
            entries.push(StickyEntry {
                service_id: IpAddr::V6(self.services[usize::from(service)]),
                key,
                egress: IpAddr::V6(egress),
                remaining_s: table.left_s(&e, now_s),
            });
        }
        entries.sort_by_key(|e| (e.service_id, e.egress, format!("{:?}", e.key)));
        let chunks: Vec<Vec<StickyEntry>> = entries.chunks(MAX_STICKY).map(<[_]>::to_vec).collect();
        let parts = chunks.len() as u16;
        for (i, c) in chunks.into_iter().enumerate() {
            self.lsas.push_back((i as u16, LsaBody::Sticky(c)));
        }
        // Parts no longer needed are flooded empty.
        for p in parts..self.flooded_parts {
            self.lsas.push_back((p, LsaBody::Sticky(Vec::new())));
        }
        self.flooded_parts = parts;
        self.tally.bump("sar.sticky_floods");
    }

    // ---- timers -------------------------------------------------------

    /// When [`Self::handle_timeout`] is next due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.next_timeout()
    }

    /// Run the timers due at `now` (spurious calls are harmless).
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(t) = self.timers.expire(now) {
            match t {
                Timer::Flood => {
                    self.flood(now);
                    if let Some(i) = &self.cfg.ingress {
                        self.timers
                            .set(Timer::Flood, now + Duration::from_secs(i.flood_s));
                    }
                }
                Timer::Probe => {
                    self.send_probes(now);
                    if let Some(i) = &self.cfg.ingress {
                        self.timers
                            .set(Timer::Probe, now + Duration::from_millis(i.probe_ms));
                    }
                }
                Timer::Period => {
                    if let Some(m) = self.meters.as_mut() {
                        m.roll();
                    }
                    self.originate_metrics();
                    if let Some(e) = &self.cfg.egress {
                        let at = now + Duration::from_secs(u64::from(e.period_s));
                        self.timers.set(Timer::Period, at);
                    }
                }
                Timer::Sweep => {
                    let now_s = secs(now);
                    let mut every = 60;
                    if let Some(t) = self.table.as_mut() {
                        let n = t.sweep(now_s);
                        self.tally.add("sar.sticky_expired", n as u64);
                        every = (t.timer_s() / 10).clamp(1, 60);
                    }
                    if let Some(f) = self.flows.as_mut() {
                        let n = f.sweep(now_s);
                        self.tally.add("sar.sticky_egress_flows_expired", n as u64);
                    }
                    self.timers
                        .set(Timer::Sweep, now + Duration::from_secs(u64::from(every)));
                }
            }
        }
    }

    // ---- control ------------------------------------------------------

    /// `ctl <sar> sticky`: the table (and, at an egress, the flows).
    pub fn table_json(&self, now: Instant) -> Value {
        let now_s = secs(now);
        let entries: Vec<Value> = self
            .table
            .iter()
            .flat_map(|t| t.iter(now_s).map(move |(s, k, e)| (t, s, k, e)))
            .take(MAX_LISTED)
            .map(|(t, s, k, e)| {
                let site = self.sites.get(e.site);
                json!({
                    "service": self.services.get(usize::from(s)).map(ToString::to_string),
                    "key": match k {
                        FlowKey::Label(l) => format!("flow-label {l:#07x}"),
                        FlowKey::Ue(a) => format!("ue {a}"),
                        FlowKey::Apn6 { service_id, flow_id } => format!("apn6 {service_id}/{flow_id}"),
                    },
                    "egress": site.and_then(|s| s.addr).map(|a| a.to_string()),
                    "egress_router": site.map(|s| s.router.0),
                    "origin": e.origin.as_str(),
                    "hits": e.hits,
                    "age_s": now_s.wrapping_sub(e.created),
                    "left_s": t.left_s(&e, now_s),
                })
            })
            .collect();
        let flows: Vec<Value> = self
            .flows
            .iter()
            .flat_map(|f| f.iter(now_s))
            .take(MAX_LISTED)
            .map(|(id, f)| {
                json!({
                    "anycast": id.anycast.to_string(),
                    "proto": id.proto,
                    "server_port": id.server_port,
                    "client_port": id.client_port,
                    "flow_label": format!("{:#07x}", id.label),
                    "anchor": f.anchor.to_string(),
                    "client": f.current.to_string(),
                    "ingress": f.ingress.map(|(a, _)| a.to_string()),
                    "idle_s": now_s.wrapping_sub(f.last),
                })
            })
            .collect();
        json!({
            "ingress": self.is_ingress(),
            "egress": self.egress().is_some(),
            "entries": self.table.as_ref().map_or(0, Table::len),
            "timer_s": self.table.as_ref().map(Table::timer_s),
            "table": entries,
            "flows": self.flows.as_ref().map_or(0, Flows::len),
            "flow_list": flows,
        })
    }

    /// `ctl <sar> sites`: every site's metrics, and its score here.
    pub fn sites_json(&self) -> Value {
        let w = self.w();
        let mut anycasts: Vec<Ipv6Addr> = self
            .sites
            .list()
            .iter()
            .flat_map(|s| s.offers.keys().copied())
            .collect();
        anycasts.sort();
        anycasts.dedup();
        let per: Vec<Value> = anycasts
            .iter()
            .map(|a| {
                let scores = self.sites.scores(*a, w);
                let best = scores
                    .iter()
                    .min_by(|x, y| x.score.total_cmp(&y.score))
                    .map(|s| s.site);
                let rows: Vec<Value> = self
                    .sites
                    .list()
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| s.offers.contains_key(a))
                    .map(|(i, s)| {
                        let o = s.offers[a];
                        let sc = scores.iter().find(|x| usize::from(x.site) == i);
                        json!({
                            "router": s.router.0,
                            "egress": s.addr.map(|x| x.to_string()),
                            "reachable": s.path_cost.is_some(),
                            "path_cost": s.path_cost,
                            "rtt_us": s.rtt_us,
                            "tunnel": s.tunnel.as_str(),
                            "load_index": o.load.map(|(_, l)| l),
                            "period_s": o.load.map(|(p, _)| p),
                            "capacity": o.capacity,
                            "preference": o.preference,
                            "aggregated_cost": o.cost,
                            "score": sc.map(|x| x.score),
                            "load_term": sc.and_then(|x| x.load_term),
                            "delay_term": sc.and_then(|x| x.delay_term),
                            "delay": sc.map(|x| x.delay),
                            "by": sc.map(|x| if x.by_cost { "path cost + aggregated cost" } else { "App-Metrics formula" }),
                            "chosen": best == Some(i as u16),
                            "why": if s.path_cost.is_none() { "unreachable" } else if best == Some(i as u16) { "lowest score" } else { "higher score" },
                        })
                    })
                    .collect();
                json!({ "anycast": a.to_string(), "sites": rows })
            })
            .collect();
        let meters: Vec<Value> = self
            .meters
            .iter()
            .flat_map(|m| m.sites.iter())
            .map(|m| {
                let weights = self.egress().map_or([0.25; 4], |e| e.weights);
                json!({
                    "anycast": m.site.anycast.to_string(),
                    "capacity": m.site.capacity,
                    "preference": m.site.preference,
                    "cost": m.site.cost,
                    "this_period": { "to_packets": m.current.to_packets, "from_packets": m.current.from_packets,
                                     "to_bytes": m.current.to_bytes, "from_bytes": m.current.from_bytes },
                    "last_period": { "to_packets": m.last.to_packets, "from_packets": m.last.from_packets,
                                     "to_bytes": m.last.to_bytes, "from_bytes": m.last.from_bytes },
                    "load_index": m.index(&weights),
                })
            })
            .collect();
        json!({ "w": w, "anycast": per, "attached": meters })
    }
}
