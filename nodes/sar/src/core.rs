// Over 800 lines: the FIB, the NHIB and the IGP are one state: every announcement and withdrawal updates all three together.
//! The SAR core: FIB, NHIB, policies and the IGP behind one sans-IO type.
//!
//! ```text
//!  driver ── handle_igp(now, link, datagram) / link_up / link_down ─►┐
//!         ── handle_timeout(now) ───────────────────────────────────►│
//!         ── decide(now, PacketView) ──► Action (requests, responses; │ Sar ─ Igp (LSDB, SPF)
//!               announcements and withdrawals are taken in: Consumed)│     ─ Fib<FibEntry> ─► Nhib
//!         ── handle_announcement(now, src, msg) ────────────────────►│     ─ local instances → services LSAs
//!         ◄── poll_transmit(): igp::Transmit { to_neighbor, bytes }
//!         ◄── poll_timeout()
//!         ◄── drain_counters()
//! ```
//!
//! # Call order
//!
//! After every input (`handle_*`, `link_*`, `decide`), the driver drains
//! [`Sar::poll_transmit`] and sends each datagram on its link, then waits
//! until [`Sar::poll_timeout`] or the next input. Time is only ever the
//! `now` passed in; randomness comes from [`Config::seed`].
//!
//! # Announcements
//!
//! An instance announces to its SAR (client port). With announcement keys
//! configured, anything without a good HMAC is dropped and counted before it
//! touches a table. The SAR keeps the instance for its lifetime
//! (constraint 6, else [`Config::default_lifetime_s`]; 0 withdraws), puts it
//! into one of its services-LSA parts and originates that part; every SAR
//! installs it from the LSA until `installed + lifetime − age`. The origin
//! re-originates a part when a member's refresh would otherwise let remote
//! copies expire (less than half a lifetime left) or when its constraints
//! change; a withdrawal or an expiry removes it at once here and
//! re-originates the part without it.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::net::{IpAddr, Ipv6Addr};

use smoltcp::time::{Duration, Instant};
use svcroute_stack::wire::auth::AuthCheck;
use svcroute_stack::wire::igp::{
    AppMetricsEntry, LsaBody, LsaKind, RouterId, ServiceAnnouncement, StickyEntry, MAX_SERVICES,
};
use svcroute_stack::wire::rosa::{Constraint, Constraints, Message, MessageKind, ServiceName};

use crate::counters::{Counters, Tally};
use crate::decide::{self, Action, AnnounceError, Choice, Classified, DropReason, PacketView};
use crate::fib::{Fib, NameHash};
use crate::igp::{Change, Igp, IgpConfig, LinkId, Transmit};
use crate::nhib::{InstanceId, InstanceKey, Nhib, LOCAL_PART};
use crate::policy::{
    self, Candidate, EntrySteering, Metrics, Rng, RoutePolicy, SchedState, Steering, Tuning,
};

/// Octets of LSA body a services part may fill (of the 16,000-octet
/// datagram), besides the [`MAX_SERVICES`] count.
const PART_BUDGET: usize = 14_000;

/// Configuration of the core.
#[derive(Debug, Clone)]
pub struct Config {
    /// The IGP: router ID, our address, prefixes, key, timers, LSDB cap.
    pub igp: IgpConfig,
    /// Other addresses of ours (ports), besides `igp.address`.
    pub addresses: Vec<IpAddr>,
    /// Clients attach here: requests from client ports are scheduled.
    pub client_facing: bool,
    /// Announcement keys (key ID → secret). Non-empty: every announcement
    /// and withdrawal must carry a good tag.
    pub announce_keys: BTreeMap<u8, Vec<u8>>,
    /// Lifetime of an announcement without a lifetime constraint, seconds.
    pub default_lifetime_s: u32,
    /// Longest lifetime accepted, seconds (longer ones are clamped).
    pub max_lifetime_s: u32,
    /// Most service names in the FIB.
    pub max_services: usize,
    /// Most instance rows in the NHIB.
    pub max_instances: usize,
    /// Most instances of one service.
    pub max_instances_per_service: usize,
    /// Most instances announced at this SAR.
    pub max_local_instances: usize,
    /// Policy tunables.
    pub tuning: Tuning,
    /// Seed of the random policy.
    pub seed: u64,
    /// How the FIB hashes names: SPEC §0's SHA-256 by default.
    pub fib_hash: NameHash,
}

impl Config {
    /// Defaults for SAR `router_id` at `address`.
    pub fn new(router_id: RouterId, address: Ipv6Addr) -> Self {
        Self {
            igp: IgpConfig::new(router_id, address),
            addresses: Vec::new(),
            client_facing: true,
            announce_keys: BTreeMap::new(),
            default_lifetime_s: 30,
            max_lifetime_s: 3600,
            max_services: 200_000,
            max_instances: 400_000,
            max_instances_per_service: 256,
            max_local_instances: 16_384,
            tuning: Tuning::default(),
            seed: u64::from(router_id.0),
            fib_hash: NameHash::Sha256,
        }
    }
}

/// A FIB entry: the instances serving a name, in (address, origin, part)
/// order, the steering they ask for, and the scheduling state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FibEntry {
    /// The instances, with what a pick needs of their NHIB rows copied in
    /// (one memory access per request instead of one per instance).
    pub members: Vec<Member>,
    /// The members' steering taken together (every SAR agrees on it),
    /// recomputed whenever a member comes, goes or changes its steering.
    pub steering: EntrySteering,
    /// Round-robin and WRR state, over the instances the ingress schedules
    /// over ([`FibEntry::scheduled`]).
    pub sched: SchedState,
}

impl FibEntry {
    /// An entry of one instance.
    fn new(member: Member) -> Self {
        let mut e = Self {
            members: vec![member],
            steering: EntrySteering::Route(RoutePolicy::Shortest),
            sched: SchedState::default(),
        };
        e.members_changed();
        e
    }

    /// The members the ingress schedules over, in member order: all of
    /// them for a scheduled entry, the scheduled set of a mixed one.
    pub fn scheduled(&self) -> impl Iterator<Item = &Member> {
        let mixed = matches!(self.steering, EntrySteering::Mixed { .. });
        self.members
            .iter()
            .filter(move |m| !mixed || matches!(m.steering, Steering::Schedule(_)))
    }

    /// After the members or their steering changed: the entry's steering,
    /// and a scheduling cycle started over for the new set.
    fn members_changed(&mut self) {
        self.steering = EntrySteering::of(self.members.iter().map(|m| m.steering));
        let n = self.scheduled().count();
        self.sched.reset(n);
    }
}

/// One instance of a FIB entry: its NHIB row and a copy of the fields the
/// picks read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member {
    /// The NHIB row.
    pub id: InstanceId,
    /// The instance's address.
    pub addr: IpAddr,
    /// The SAR it announced at.
    pub origin: RouterId,
    /// Its route slot in the NHIB.
    pub slot: u32,
    /// The LSA part it came in (orders members).
    pub part: u16,
    /// Its metrics.
    pub metrics: Metrics,
    /// Its steering.
    pub steering: Steering,
}

impl Member {
    #[inline]
    fn candidate(&self, nhib: &Nhib) -> Candidate {
        Candidate {
            addr: self.addr,
            origin: self.origin,
            path_cost: nhib.slot_cost(self.slot),
            metrics: self.metrics,
        }
    }

    fn order(&self) -> (IpAddr, RouterId, u16) {
        (self.addr, self.origin, self.part)
    }
}

/// What [`Sar::handle_announcement`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Announced {
    /// A new instance.
    Added,
    /// A known instance refreshed (metrics and lifetime updated).
    Refreshed,
    /// The instance is gone.
    Withdrawn,
    /// A withdrawal of an instance we did not have.
    Unknown,
}

#[derive(Debug, Clone)]
struct Local {
    constraints: Constraints,
    lifetime_s: u32,
    expires: Instant,
    /// The expiry the last originated LSA told the domain.
    flooded: Option<Instant>,
    part: u16,
    id: InstanceId,
}

#[derive(Debug, Clone, Default)]
struct Part {
    members: BTreeSet<(ServiceName, IpAddr)>,
    bytes: usize,
}

/// The Service Address Router core. See the module docs for the call order.
#[derive(Debug)]
pub struct Sar {
    cfg: Config,
    igp: Igp,
    fib: Fib<FibEntry>,
    nhib: Nhib,
    local: BTreeMap<(ServiceName, IpAddr), Local>,
    parts: Vec<Part>,
    /// Parts to originate at the end of this input.
    dirty: BTreeSet<u16>,
    /// What each remote services LSA installed.
    remote: HashMap<(RouterId, u16), Vec<InstanceId>>,
    rng: Rng,
    scratch: Vec<Candidate>,
    /// The member index of each `scratch` candidate (mixed entries).
    scratch_at: Vec<usize>,
    /// Changes the sticky engine reads ([`Sar::poll_sticky_change`]),
    /// recorded once [`Sar::watch_sticky`] was called.
    sticky_changes: Option<VecDeque<Change>>,
    sticky_overflow: bool,
    tally: Tally,
}

/// Changes kept for the sticky engine, at most; beyond, it rescans.
const MAX_STICKY_CHANGES: usize = 4096;

impl Sar {
    /// A SAR starting at `now`.
    pub fn new(cfg: Config, now: Instant) -> Self {
        let me = cfg.igp.router_id;
        let igp = Igp::new(cfg.igp.clone(), now);
        let mut sar = Self {
            fib: Fib::with_hash(cfg.max_services, cfg.fib_hash),
            nhib: Nhib::new(me, cfg.igp.address, cfg.max_instances),
            igp,
            local: BTreeMap::new(),
            parts: Vec::new(),
            dirty: BTreeSet::new(),
            remote: HashMap::new(),
            rng: Rng::new(cfg.seed ^ 0x7361_725f_726f_7361),
            scratch: Vec::new(),
            scratch_at: Vec::new(),
            sticky_changes: None,
            sticky_overflow: false,
            tally: Tally::default(),
            cfg,
        };
        sar.after(now);
        sar
    }

    // ---- getters ------------------------------------------------------

    /// The configuration.
    pub const fn config(&self) -> &Config {
        &self.cfg
    }

    /// Our router ID.
    pub const fn router_id(&self) -> RouterId {
        self.cfg.igp.router_id
    }

    /// Our (Ingress) address.
    pub const fn address(&self) -> Ipv6Addr {
        self.cfg.igp.address
    }

    /// Whether `addr` is one of ours.
    pub fn is_mine(&self, addr: IpAddr) -> bool {
        addr == IpAddr::V6(self.cfg.igp.address) || self.cfg.addresses.contains(&addr)
    }

    /// The IGP (neighbours, LSDB, routes).
    pub const fn igp(&self) -> &Igp {
        &self.igp
    }

    /// The FIB.
    pub const fn fib(&self) -> &Fib<FibEntry> {
        &self.fib
    }

    /// The NHIB.
    pub const fn nhib(&self) -> &Nhib {
        &self.nhib
    }

    /// Instances announced at this SAR: (name, address, expiry).
    pub fn local_instances(&self) -> impl Iterator<Item = (&ServiceName, IpAddr, Instant)> {
        self.local.iter().map(|((n, a), l)| (n, *a, l.expires))
    }

    /// The instances serving exactly `name`, with their rows.
    pub fn instances_of(&self, name: &ServiceName) -> Vec<(InstanceId, &crate::nhib::Instance)> {
        self.fib.get(name).map_or_else(Vec::new, |e| {
            e.members
                .iter()
                .filter_map(|m| Some((m.id, self.nhib.get(m.id)?)))
                .collect()
        })
    }

    /// Cumulative counters (the core's and the IGP's).
    pub fn counters(&self) -> Counters {
        let mut c = self.tally.total().clone();
        for (k, v) in self.igp.counters() {
            *c.entry(k).or_insert(0) += v;
        }
        c
    }

    /// Counter increments since the last call, for the node's counters.
    pub fn drain_counters(&mut self) -> Counters {
        let mut c = Counters::new();
        self.tally.drain_into(&mut c);
        self.igp.drain_counters_into(&mut c);
        c
    }

    // ---- outputs ------------------------------------------------------

    /// The next IGP datagram to send.
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.igp.poll_transmit()
    }

    /// When [`Sar::handle_timeout`] is next due.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        match (self.igp.poll_timeout(), self.nhib.next_expiry()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    // ---- inputs -------------------------------------------------------

    /// One IGP datagram from the neighbour on `from`.
    pub fn handle_igp(&mut self, now: Instant, from: LinkId, bytes: &[u8]) {
        self.igp.handle(now, from, bytes);
        self.after(now);
    }

    /// A link to a neighbour SAR is up (or its cost changed).
    pub fn link_up(&mut self, now: Instant, link: LinkId, cost: u32) {
        self.igp.link_up(now, link, cost);
        self.after(now);
    }

    /// A link is down.
    pub fn link_down(&mut self, now: Instant, link: LinkId) {
        self.igp.link_down(now, link);
        self.after(now);
    }

    /// Timers: the IGP's, and instance expiry. Spurious calls are harmless.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.igp.handle_timeout(now);
        for id in self.nhib.expired(now) {
            self.tally.bump("sar.instance_expired");
            self.drop_instance(id);
        }
        self.after(now);
    }

    /// Set our App-Metrics LSA (SPEC §3; flooded, read back from the LSDB).
    pub fn originate_app_metrics(&mut self, now: Instant, entries: Vec<AppMetricsEntry>) {
        self.igp.originate(now, 0, LsaBody::AppMetrics(entries));
        self.after(now);
    }

    /// Set part `part` of our sticky-table LSAs (SPEC §3, scenarios 1
    /// and 2).
    pub fn originate_sticky(&mut self, now: Instant, part: u16, entries: Vec<StickyEntry>) {
        self.igp.originate(now, part, LsaBody::Sticky(entries));
        self.after(now);
    }

    /// From now on, keep the changes the sticky engine reads: App-Metrics
    /// and Sticky LSAs, and SPF results.
    pub fn watch_sticky(&mut self) {
        self.sticky_changes.get_or_insert_with(VecDeque::new);
    }

    /// The next change for the sticky engine.
    #[must_use]
    pub fn poll_sticky_change(&mut self) -> Option<Change> {
        self.sticky_changes.as_mut()?.pop_front()
    }

    /// Whether changes were lost since the last call (too many between two
    /// reads): the sticky engine then rescans the LSDB.
    pub fn sticky_changes_overflowed(&mut self) -> bool {
        std::mem::take(&mut self.sticky_overflow)
    }

    /// Decide what to do with a packet carrying a ROSA option addressed to
    /// (or through) this SAR; announcements and withdrawals are taken into
    /// the tables here. See [`crate::decide`] for the table of actions.
    pub fn decide(&mut self, now: Instant, view: &PacketView<'_>) -> Action {
        let me = IpAddr::V6(self.cfg.igp.address);
        let action = match decide::classify(view, me, |a| self.is_mine(a)) {
            Classified::Done(a) => a,
            Classified::Control => match self.handle_announcement(now, view.src, view.rosa) {
                Ok(_) => Action::Consumed,
                Err(e) => Action::Drop(DropReason::Announce(e)),
            },
            Classified::Request {
                service,
                from_client,
                fill,
            } => {
                if from_client && !self.cfg.client_facing {
                    Action::Drop(DropReason::NotClientFacing)
                } else {
                    match self.resolve(service, from_client) {
                        Ok(c) => decide::request_action(&c, fill, view.src),
                        Err(e) => Action::Drop(e),
                    }
                }
            }
        };
        let counter = match action {
            // handle_announcement counted it.
            Action::Drop(DropReason::Announce(_)) => None,
            Action::ToInstance { .. } => Some("sar.request_to_instance"),
            Action::ToNextSar { .. } => Some("sar.request_to_next_sar"),
            Action::DeliverLocal { .. } => Some("sar.request_deliver_local"),
            Action::ResponseToIngress { .. } => Some("sar.response_to_ingress"),
            Action::ResponseToClient { .. } => Some("sar.response_to_client"),
            Action::Consumed => Some("sar.control_consumed"),
            Action::NotForUs => Some("sar.not_for_us"),
            Action::Drop(r) => Some(r.reason()),
        };
        if let Some(c) = counter {
            self.tally.bump(c);
        }
        self.after(now);
        action
    }

    /// FIB lookup (longest prefix with a reachable instance) and policy
    /// pick for `name`. `scheduling`: we are the client's ingress and may
    /// apply a scheduling policy; otherwise (a request from a SAR) route.
    /// Counts nothing (the hot path; [`Sar::decide`] counts).
    ///
    /// At the ingress, by the entry's [`EntrySteering`]:
    ///
    /// - `Schedule`: schedule over every reachable instance.
    /// - `Route`: route to the best reachable instance.
    /// - `Mixed`: route over every reachable instance (a scheduled one with
    ///   the path cost to its SAR): the scheduled set is one site. If a
    ///   routed instance wins, it is the choice, as for `Route`; if a
    ///   scheduled one does, schedule over the reachable scheduled set
    ///   only, with the entry's scheduling state.
    ///
    /// Elsewhere every entry is routed, by the same route policy the
    /// ingress of a mixed entry uses, so a SAR on the path to a routed
    /// winner picks that winner again: it is nearer to the winner by the
    /// cost of the hops already taken, and no nearer to any other
    /// instance than that.
    pub fn resolve(&mut self, name: &ServiceName, scheduling: bool) -> Result<Choice, DropReason> {
        let me = self.cfg.igp.router_id;
        let nhib = &self.nhib;
        let (_, entry) = self
            .fib
            .lookup_by_mut(name, |e| {
                e.members.iter().any(|m| nhib.slot_cost(m.slot).is_some())
            })
            .ok_or(DropReason::NoRoute)?;
        let (cand, slot, scheduled) = match (entry.steering, scheduling && self.cfg.client_facing) {
            (EntrySteering::Mixed { schedule, route }, true) => {
                let cands = entry.members.iter().map(|m| m.candidate(nhib));
                let i = policy::route(route, &self.cfg.tuning, cands).ok_or(DropReason::NoRoute)?;
                let m = &entry.members[i];
                if matches!(m.steering, Steering::Schedule(_)) {
                    // The scheduled set is the nearest site.
                    self.scratch.clear();
                    self.scratch_at.clear();
                    for (k, m) in entry.members.iter().enumerate() {
                        if matches!(m.steering, Steering::Schedule(_)) {
                            self.scratch.push(m.candidate(nhib));
                            self.scratch_at.push(k);
                        }
                    }
                    let j = policy::schedule(
                        schedule,
                        &self.cfg.tuning,
                        &mut entry.sched,
                        &mut self.rng,
                        &self.scratch,
                    )
                    .ok_or(DropReason::NoRoute)?;
                    (
                        self.scratch[j],
                        entry.members[self.scratch_at[j]].slot,
                        true,
                    )
                } else {
                    (m.candidate(nhib), m.slot, false)
                }
            }
            (EntrySteering::Schedule(p), true) => {
                self.scratch.clear();
                self.scratch
                    .extend(entry.members.iter().map(|m| m.candidate(nhib)));
                let i = policy::schedule(
                    p,
                    &self.cfg.tuning,
                    &mut entry.sched,
                    &mut self.rng,
                    &self.scratch,
                )
                .ok_or(DropReason::NoRoute)?;
                (self.scratch[i], entry.members[i].slot, true)
            }
            (s, _) => {
                // Routed at the ingress, or any request elsewhere.
                let cands = entry.members.iter().map(|m| m.candidate(nhib));
                let i = policy::route(s.route_policy(), &self.cfg.tuning, cands)
                    .ok_or(DropReason::NoRoute)?;
                let m = &entry.members[i];
                (m.candidate(nhib), m.slot, false)
            }
        };
        let local = cand.origin == me;
        let next_sar = if local || scheduled {
            None
        } else {
            let r = nhib.slot_route(slot).ok_or(DropReason::NoRoute)?;
            Some((r.next_hop, IpAddr::V6(r.next_hop_addr)))
        };
        Ok(Choice {
            instance: cand.addr,
            origin: cand.origin,
            scheduled,
            local,
            next_sar,
        })
    }

    /// An announcement or withdrawal from an instance attached here (a
    /// client port), from IPv6 source `src`. Refusals are counted.
    pub fn handle_announcement(
        &mut self,
        now: Instant,
        src: IpAddr,
        msg: &Message,
    ) -> Result<Announced, AnnounceError> {
        let r = self.announcement(now, src, msg);
        match r {
            Ok(a) => self.tally.bump(match a {
                Announced::Added => "sar.announce_added",
                Announced::Refreshed => "sar.announce_refreshed",
                Announced::Withdrawn => "sar.announce_withdrawn",
                Announced::Unknown => "sar.withdraw_unknown",
            }),
            Err(e) => self.tally.bump(e.reason()),
        }
        self.after(now);
        r
    }

    // ---- announcements ------------------------------------------------

    fn announcement(
        &mut self,
        now: Instant,
        src: IpAddr,
        msg: &Message,
    ) -> Result<Announced, AnnounceError> {
        if !self.cfg.announce_keys.is_empty() {
            let src6 = match src {
                IpAddr::V6(a) => a,
                IpAddr::V4(a) => a.to_ipv6_mapped(),
            };
            let keys = &self.cfg.announce_keys;
            match msg.verify(src6, |id| keys.get(&id).map(Vec::as_slice)) {
                AuthCheck::Good(_) => {}
                AuthCheck::Unsigned => return Err(AnnounceError::AuthMissing),
                AuthCheck::Bad(_) => return Err(AnnounceError::AuthBad),
                AuthCheck::UnknownKey(_) => return Err(AnnounceError::AuthUnknownKey),
            }
        }
        let name = msg.service().ok_or(AnnounceError::NoService)?.clone();
        let addr = msg.instance().unwrap_or(src);
        if addr.is_ipv4() {
            return Err(AnnounceError::Ipv4Instance);
        }
        let mut constraints = msg.constraints().cloned().unwrap_or_default();
        // The lifetime is ours to flood (as remaining seconds), not part of
        // the constraints every SAR compares.
        let lifetime = constraints
            .lifetime_s()
            .unwrap_or(self.cfg.default_lifetime_s)
            .min(self.cfg.max_lifetime_s);
        constraints
            .0
            .retain(|c| !matches!(c, Constraint::LifetimeS(_)));
        let key = (name, addr);
        if msg.kind == MessageKind::Withdrawal || lifetime == 0 {
            return Ok(if self.remove_local(&key) {
                Announced::Withdrawn
            } else {
                Announced::Unknown
            });
        }
        let expires = now + Duration::from_secs(u64::from(lifetime));
        let metrics = Metrics::of(&constraints);
        let steering = Steering::of(&constraints);
        if let Some(l) = self.local.get_mut(&key) {
            let changed = l.constraints != constraints;
            l.constraints = constraints;
            l.lifetime_s = lifetime;
            l.expires = expires;
            let (id, part) = (l.id, l.part);
            // Refresh the remote copies before they run out (see
            // `reoriginate_within`).
            let within = reoriginate_within(&self.cfg.igp, self.igp.routes().len(), lifetime);
            let stale = l.flooded.is_none_or(|f| expires > f && f < now + within);
            self.update_instance(id, metrics, steering, expires);
            if changed || stale {
                self.dirty.insert(part);
            }
            return Ok(Announced::Refreshed);
        }
        if self.local.len() >= self.cfg.max_local_instances {
            return Err(AnnounceError::LocalFull);
        }
        let bytes = key.0.as_wire().len() + constraints.buffer_len() + 48;
        let part = self.part_with_room(bytes);
        let ikey: InstanceKey = (self.router_id(), LOCAL_PART, key.0.clone(), addr);
        let id = self.add_instance(ikey, metrics, steering, expires)?;
        let p = &mut self.parts[usize::from(part)];
        p.members.insert(key.clone());
        p.bytes += bytes;
        self.dirty.insert(part);
        self.local.insert(
            key,
            Local {
                constraints,
                lifetime_s: lifetime,
                expires,
                flooded: None,
                part,
                id,
            },
        );
        Ok(Announced::Added)
    }

    fn part_with_room(&mut self, bytes: usize) -> u16 {
        let fits = |p: &Part| p.members.len() < MAX_SERVICES && p.bytes + bytes <= PART_BUDGET;
        if let Some(i) = self.parts.iter().position(fits) {
            return i as u16;
        }
        // max_local_instances / MAX_SERVICES parts at most (config keeps
        // this under u16::MAX, the local-part sentinel).
        self.parts.push(Part::default());
        (self.parts.len() - 1) as u16
    }

    /// Remove a local instance (withdrawal or expiry); whether it was there.
    fn remove_local(&mut self, key: &(ServiceName, IpAddr)) -> bool {
        let Some(l) = self.local.remove(key) else {
            return false;
        };
        let p = &mut self.parts[usize::from(l.part)];
        p.members.remove(key);
        p.bytes = p
            .bytes
            .saturating_sub(key.0.as_wire().len() + l.constraints.buffer_len() + 48);
        self.dirty.insert(l.part);
        self.remove_instance(l.id);
        true
    }

    /// Originate every dirty services part.
    fn originate_parts(&mut self, now: Instant) {
        for i in std::mem::take(&mut self.dirty) {
            let Some(p) = self.parts.get(usize::from(i)) else {
                continue;
            };
            let mut list = Vec::with_capacity(p.members.len());
            for key in &p.members {
                let Some(l) = self.local.get_mut(key) else {
                    continue;
                };
                let left = if l.expires > now {
                    (l.expires - now).secs()
                } else {
                    0
                };
                // Floor: remote copies never outlive ours.
                let lifetime_s = u32::try_from(left).unwrap_or(u32::MAX);
                l.flooded = Some(now + Duration::from_secs(u64::from(lifetime_s)));
                list.push(ServiceAnnouncement {
                    name: key.0.clone(),
                    instance: key.1,
                    constraints: l.constraints.clone(),
                    lifetime_s,
                });
            }
            self.igp.originate(now, i, LsaBody::Services(list));
        }
    }

    // ---- instance rows and FIB entries --------------------------------

    fn add_instance(
        &mut self,
        key: InstanceKey,
        metrics: Metrics,
        steering: Steering,
        expires: Instant,
    ) -> Result<InstanceId, AnnounceError> {
        let name = key.2.clone();
        if let Some(e) = self.fib.get(&name) {
            if e.members.len() >= self.cfg.max_instances_per_service {
                return Err(AnnounceError::ServiceFull);
            }
        } else if self.fib.len() >= self.fib.capacity() {
            return Err(AnnounceError::FibFull);
        }
        let (origin, part, addr) = (key.0, key.1, key.3);
        let id = self
            .nhib
            .insert(key, metrics, steering, expires)
            .map_err(|_| AnnounceError::NhibFull)?;
        let member = Member {
            id,
            addr,
            origin,
            slot: self.nhib.slot_of(id).unwrap_or(u32::MAX),
            part,
            metrics,
            steering,
        };
        if let Some(e) = self.fib.get_mut(&name) {
            let at = e.members.partition_point(|x| x.order() < member.order());
            e.members.insert(at, member);
            e.members_changed();
        } else {
            // Room was checked above.
            let _ = self.fib.insert(name, FibEntry::new(member));
        }
        Ok(id)
    }

    fn update_instance(
        &mut self,
        id: InstanceId,
        metrics: Metrics,
        steering: Steering,
        expires: Instant,
    ) {
        let Some((old_m, old_s)) = self.nhib.update(id, metrics, steering, expires) else {
            return;
        };
        if old_m == metrics && old_s == steering {
            return;
        }
        let Some(name) = self.nhib.get(id).map(|r| r.name.clone()) else {
            return;
        };
        if let Some(e) = self.fib.get_mut(&name) {
            if let Some(m) = e.members.iter_mut().find(|m| m.id == id) {
                m.metrics = metrics;
                m.steering = steering;
            }
            if old_s != steering {
                // The entry's steering, or the set scheduled over, may
                // have changed.
                e.members_changed();
            } else if old_m.capability != metrics.capability {
                // New weights: start the WRR cycle over.
                let n = e.scheduled().count();
                e.sched.wrr_current.clear();
                e.sched.wrr_current.resize(n, 0);
            }
        }
    }

    fn remove_instance(&mut self, id: InstanceId) {
        let Some(row) = self.nhib.remove(id) else {
            return;
        };
        let Some(e) = self.fib.get_mut(&row.name) else {
            return;
        };
        e.members.retain(|m| m.id != id);
        if e.members.is_empty() {
            self.fib.remove(&row.name);
            return;
        }
        e.members_changed();
    }

    /// An instance row expired (local or remote).
    fn drop_instance(&mut self, id: InstanceId) {
        let Some(row) = self.nhib.get(id) else {
            return;
        };
        if row.part == LOCAL_PART {
            let key = (row.name.clone(), row.addr);
            if !self.remove_local(&key) {
                self.remove_instance(id);
            }
            return;
        }
        let k = (row.origin, row.part);
        if let Some(list) = self.remote.get_mut(&k) {
            list.retain(|x| *x != id);
        }
        self.remove_instance(id);
    }

    // ---- IGP changes --------------------------------------------------

    /// After every input: take the IGP's changes into the tables, then
    /// originate the services parts that changed.
    fn after(&mut self, now: Instant) {
        self.originate_parts(now);
        while let Some(c) = self.igp.poll_change() {
            if let Some(q) = self.sticky_changes.as_mut() {
                let wanted = matches!(
                    c,
                    Change::Routes | Change::Lsa((_, LsaKind::AppMetrics | LsaKind::Sticky, _))
                );
                if wanted && q.back() != Some(&c) {
                    if q.len() >= MAX_STICKY_CHANGES {
                        q.clear();
                        self.sticky_overflow = true;
                    }
                    q.push_back(c);
                }
            }
            match c {
                Change::Routes => {
                    self.nhib.set_routes(self.igp.routes());
                    self.tally.bump("sar.routes_changed");
                }
                Change::Lsa((origin, LsaKind::Services, part)) => {
                    if origin != self.router_id() {
                        self.services_lsa(now, origin, part);
                    }
                }
                Change::Lsa(_) => {}
            }
        }
    }

    /// A remote services LSA changed: make the rows from it match.
    fn services_lsa(&mut self, now: Instant, origin: RouterId, part: u16) {
        let old = self.remote.remove(&(origin, part)).unwrap_or_default();
        let mut kept: Vec<InstanceId> = Vec::new();
        let mut fresh: Vec<(InstanceKey, Metrics, Steering, Instant)> = Vec::new();
        if let Some((lsa, at)) = self.igp.lsa(now, &(origin, LsaKind::Services, part)) {
            if let LsaBody::Services(list) = &lsa.body {
                for a in list {
                    let left = i64::from(a.lifetime_s) - i64::from(lsa.age);
                    if left <= 0 {
                        continue;
                    }
                    let expires = at + Duration::from_secs(left as u64);
                    if expires <= now {
                        continue;
                    }
                    let key = (origin, part, a.name.clone(), a.instance);
                    fresh.push((
                        key,
                        Metrics::of(&a.constraints),
                        Steering::of(&a.constraints),
                        expires,
                    ));
                }
            }
        }
        let mut seen: HashSet<InstanceId> = HashSet::new();
        for (key, m, s, exp) in fresh {
            if let Some(id) = self.nhib.find(&key) {
                if seen.insert(id) {
                    self.update_instance(id, m, s, exp);
                    kept.push(id);
                }
                continue;
            }
            match self.add_instance(key, m, s, exp) {
                Ok(id) => {
                    seen.insert(id);
                    kept.push(id);
                    self.tally.bump("sar.remote_instance_added");
                }
                Err(e) => self.tally.bump(e.reason()),
            }
        }
        for id in old {
            if !seen.contains(&id) {
                self.tally.bump("sar.remote_instance_removed");
                self.remove_instance(id);
            }
        }
        if !kept.is_empty() {
            self.remote.insert((origin, part), kept);
        }
    }
}

/// How long before what was flooded of a local instance runs out a refresh
/// of it re-originates its part, for an instance announcing `lifetime_s`
/// in a domain of `sars` SARs (ourselves included).
///
/// A refresh is the only moment the origin looks, and the next one comes
/// a third of a lifetime later (SPEC §2.2). A remote copy runs out a second
/// per flooding hop before ours (the LSA's age), and the new LSA may wait
/// up to `min_ls_interval` for its origination and `rxmt_interval` for a
/// retransmission (a neighbour ignores what arrives within
/// `min_ls_arrival`). So re-originate when what is left is less than one
/// refresh period plus that margin, with at most `sars − 1` hops to the
/// farthest SAR; and, for long lifetimes, whenever less than half of it is
/// left (one origination per ~2/3 lifetime). Without the margin a lifetime
/// under about 20 s let remote SARs drop a live instance between refreshes.
fn reoriginate_within(igp: &IgpConfig, sars: usize, lifetime_s: u32) -> Duration {
    let hops = sars.saturating_sub(1).max(1) as u64;
    let period = Duration::from_millis(u64::from(lifetime_s) * 1000 / 3);
    let margin = Duration::from_secs(hops) + igp.min_ls_interval + igp.rxmt_interval;
    Duration::from_millis(u64::from(lifetime_s) * 500).max(period + margin)
}
