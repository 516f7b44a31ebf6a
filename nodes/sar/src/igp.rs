// Over 800 lines: one link-state machine: neighbours, LSDB, flooding and SPF share the database and its timers.
//! The SAR IGP **\[ext\]** (SPEC §2.3), sans-IO: a small link-state
//! protocol in the manner of OSPF over the messages of
//! [`svcroute_stack::wire::igp`].
//!
//! ```text
//!  driver ── link_up(now, link, cost) / link_down(now, link) ──►┐
//!         ── handle(now, link, datagram) ──────────────────────►│ Igp ── neighbours (per link)
//!         ── handle_timeout(now) ──────────────────────────────►│     ── LSDB (origin, kind, part) → LSA
//!         ── originate(now, kind, part, body) (services, ...) ─►│     ── own LSAs, SPF routes
//!         ◄── poll_transmit(): Transmit { to_neighbor, bytes }
//!         ◄── poll_change():   an LSA changed / the routes changed
//!         ◄── poll_timeout():  when handle_timeout is next due
//! ```
//!
//! - **Links and neighbours.** A link is point to point (the driver names
//!   it with a [`LinkId`]: a port and a peer address). Hellos go out every
//!   `hello_interval` (1 s) and on every neighbour state change; a hello
//!   echoes the neighbour's last hello with how long it was held, so the
//!   sender measures the RTT on its own clock (smoothed 7/8 like TCP's
//!   SRTT). States: `Down` → `Init` (heard it) → `Full` (it hears us: the
//!   echo names us). `Full` sends the neighbour our whole LSDB (reliably),
//!   and the link joins our router-links LSA. No hello for `dead_interval`
//!   (4 s), or `link_down`: `Down`.
//! - **Reliable flooding.** An LSA newer than our copy (higher seq; equal
//!   seq and MaxAge beats live) is installed, acknowledged, and sent to
//!   every other `Full` neighbour, where it stays on a retransmission list
//!   until acknowledged (`rxmt_interval`, 1 s). A duplicate is an implied
//!   acknowledgement (or is acknowledged); an older one is answered with our
//!   copy. A newer instance arriving within `min_ls_arrival` of the last is
//!   ignored without acknowledgement (the sender retransmits later), and we
//!   originate each of our LSAs at most once per `min_ls_interval`: a flood
//!   of changes is paced, not amplified. The LSDB holds at most `max_lsas`
//!   LSAs; more are acknowledged and dropped (counted).
//! - **Ages.** An LSA's age is its age on arrival plus the seconds since;
//!   every transmission adds 1. At [`Lsa::MAX_AGE_S`] it stops counting
//!   (routes and services drop it) and is removed a little later. We
//!   re-originate our own every `ls_refresh` (30 min). A copy of one of our
//!   own LSAs newer than ours (we restarted) makes us jump our sequence
//!   number past it and originate again.
//! - **Authentication.** With a key configured every message is signed and
//!   anything not carrying a good tag is dropped and counted.
//! - **SPF.** After the topology changed, Dijkstra ([`crate::spf`]) over the
//!   live router-links LSAs gives, per router, the cost, the first hop and
//!   the link to send on ([`Route`]).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::Ipv6Addr;

use smoltcp::time::{Duration, Instant};
use svcroute_stack::wire::auth::AuthCheck;
use svcroute_stack::wire::igp::{
    Hello, HelloEcho, Link, LsAck, Lsa, LsaBody, LsaHeader, LsaKind, Message, Prefix, RouterId,
    RouterLinks, MAX_ACKS,
};

use crate::counters::{Counters, Tally};
use crate::spf;

/// A point-to-point link to one neighbour SAR, named by the driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LinkId(pub u32);

/// A pre-shared key for IGP messages (SPEC §0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key {
    /// The key ID carried in the envelope.
    pub id: u8,
    /// The secret.
    pub secret: Vec<u8>,
}

/// Names an LSA: origin, body kind, part.
pub type LsaKey = (RouterId, LsaKind, u16);

/// Configuration of the IGP.
#[derive(Debug, Clone)]
pub struct IgpConfig {
    /// Our router ID, unique in the domain.
    pub router_id: RouterId,
    /// Our address (where other SARs send requests for us).
    pub address: Ipv6Addr,
    /// Prefixes we reach directly (carried in our router-links LSA).
    pub prefixes: Vec<Prefix>,
    /// Sign every message and accept only good tags.
    pub key: Option<Key>,
    /// Hello period (SPEC: 1 s).
    pub hello_interval: Duration,
    /// Neighbour dead after this long without a hello (SPEC: 4 s).
    pub dead_interval: Duration,
    /// Retransmit an unacknowledged LSA after this long.
    pub rxmt_interval: Duration,
    /// Originate each of our LSAs at most this often.
    pub min_ls_interval: Duration,
    /// Ignore a newer instance arriving sooner than this after the last.
    pub min_ls_arrival: Duration,
    /// Re-originate our LSAs this often (well below MaxAge).
    pub ls_refresh: Duration,
    /// Keep an LSA that reached MaxAge this long before removing it.
    pub max_age_hold: Duration,
    /// Most LSAs in the LSDB.
    pub max_lsas: usize,
    /// Most links.
    pub max_links: usize,
}

impl IgpConfig {
    /// SPEC defaults for `router_id` at `address`.
    pub const fn new(router_id: RouterId, address: Ipv6Addr) -> Self {
        Self {
            router_id,
            address,
            prefixes: Vec::new(),
            key: None,
            hello_interval: Duration::from_millis(svcroute_stack::wire::igp::HELLO_INTERVAL_MS),
            dead_interval: Duration::from_millis(svcroute_stack::wire::igp::DEAD_INTERVAL_MS),
            rxmt_interval: Duration::from_secs(1),
            min_ls_interval: Duration::from_secs(1),
            min_ls_arrival: Duration::from_millis(500),
            ls_refresh: Duration::from_secs(1800),
            max_age_hold: Duration::from_secs(60),
            max_lsas: 100_000,
            max_links: svcroute_stack::wire::igp::MAX_NEIGHBORS,
        }
    }
}

/// One IGP datagram for the driver to send on a link (UDP port 7470).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// The link (hence the neighbour) to send on.
    pub to_neighbor: LinkId,
    /// The encoded (and signed) message.
    pub bytes: Vec<u8>,
}

/// What changed, for the SAR core (and the driver's logs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// The LSA under this key was installed, replaced, aged out or removed:
    /// read it again with [`Igp::lsa`].
    Lsa(LsaKey),
    /// The SPF result changed: read [`Igp::routes`].
    Routes,
}

/// A neighbour's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NeighborState {
    /// Nothing heard (or dead).
    Down,
    /// Heard, but its hellos do not echo ours yet.
    Init,
    /// Two-way: LSDBs are synchronised, the link is in our LSA.
    Full,
}

/// What [`Igp::neighbors`] reports about a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NeighborInfo {
    /// The link.
    pub link: LinkId,
    /// Its configured cost.
    pub cost: u32,
    /// The neighbour's state.
    pub state: NeighborState,
    /// The neighbour's router ID, once heard.
    pub router_id: Option<RouterId>,
    /// Smoothed RTT in microseconds, once measured.
    pub srtt_us: Option<u64>,
    /// LSAs sent and not yet acknowledged.
    pub unacked: usize,
}

/// Where to send towards a router.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Route {
    /// Path cost.
    pub cost: u64,
    /// The router's address.
    pub addr: Ipv6Addr,
    /// The neighbour SAR the path leaves through (ourselves for us).
    pub next_hop: RouterId,
    /// That neighbour's address.
    pub next_hop_addr: Ipv6Addr,
    /// The link to it (`None` for ourselves).
    pub link: Option<LinkId>,
}

#[derive(Debug, Clone)]
struct Neighbor {
    cost: u32,
    state: NeighborState,
    router_id: Option<RouterId>,
    srtt_us: Option<u64>,
    last_heard: Instant,
    /// Its last hello: seq, sent_at_us, when we got it.
    last_hello: Option<(u32, u64, Instant)>,
    /// LSAs sent and awaiting acknowledgement: seq, when to resend.
    rxmt: BTreeMap<LsaKey, (u32, Instant)>,
    acks: Vec<LsaHeader>,
}

#[derive(Debug, Clone)]
struct Installed {
    lsa: Lsa,
    at: Instant,
    /// Consumers were told it reached MaxAge.
    dead: bool,
}

impl Installed {
    fn age(&self, now: Instant) -> u16 {
        let secs = (now - self.at).secs();
        let age = u64::from(self.lsa.age).saturating_add(secs);
        age.min(u64::from(Lsa::MAX_AGE_S)) as u16
    }

    fn live(&self, now: Instant) -> bool {
        self.age(now) < Lsa::MAX_AGE_S
    }

    /// When it reaches MaxAge.
    fn max_age_at(&self) -> Instant {
        let left = Lsa::MAX_AGE_S.saturating_sub(self.lsa.age);
        self.at + Duration::from_secs(u64::from(left))
    }
}

#[derive(Debug, Clone)]
struct Own {
    seq: u32,
    /// What to originate (router links are built at origination).
    body: Option<LsaBody>,
    last: Option<Instant>,
    pending: bool,
}

/// The link-state protocol of one SAR. See the module docs; after every
/// call the driver drains [`Igp::poll_transmit`] (and the SAR core
/// [`Igp::poll_change`]).
#[derive(Debug)]
pub struct Igp {
    cfg: IgpConfig,
    links: BTreeMap<LinkId, Neighbor>,
    lsdb: BTreeMap<LsaKey, Installed>,
    /// (when to look at it again, key): MaxAge, then removal.
    expiry: BTreeSet<(Instant, LsaKey)>,
    own: BTreeMap<(LsaKind, u16), Own>,
    /// Own LSAs waiting to be originated (`Own::pending`), by when they
    /// may go (`min_ls_interval` after the last origination).
    pending: BTreeSet<(Instant, LsaKind, u16)>,
    hello_seq: u32,
    next_hello: Instant,
    routes: BTreeMap<RouterId, Route>,
    spf_dirty: bool,
    transmits: VecDeque<Transmit>,
    changes: VecDeque<Change>,
    tally: Tally,
}

impl Igp {
    /// A router starting at `now` with no links: it originates its
    /// router-links LSA at once.
    pub fn new(cfg: IgpConfig, now: Instant) -> Self {
        let mut me = Self {
            next_hello: now + cfg.hello_interval,
            cfg,
            links: BTreeMap::new(),
            lsdb: BTreeMap::new(),
            expiry: BTreeSet::new(),
            own: BTreeMap::new(),
            pending: BTreeSet::new(),
            hello_seq: 0,
            routes: BTreeMap::new(),
            spf_dirty: true,
            transmits: VecDeque::new(),
            changes: VecDeque::new(),
            tally: Tally::default(),
        };
        me.schedule(LsaKind::RouterLinks, 0, None);
        me.flush(now);
        me
    }

    // ---- getters ------------------------------------------------------

    /// The configuration.
    pub const fn config(&self) -> &IgpConfig {
        &self.cfg
    }

    /// Our router ID.
    pub const fn router_id(&self) -> RouterId {
        self.cfg.router_id
    }

    /// The links and their neighbours.
    pub fn neighbors(&self) -> Vec<NeighborInfo> {
        self.links
            .iter()
            .map(|(l, n)| NeighborInfo {
                link: *l,
                cost: n.cost,
                state: n.state,
                router_id: n.router_id,
                srtt_us: n.srtt_us,
                unacked: n.rxmt.len(),
            })
            .collect()
    }

    /// The live LSA under `key` (not aged out), with when it was installed.
    pub fn lsa(&self, now: Instant, key: &LsaKey) -> Option<(&Lsa, Instant)> {
        let e = self.lsdb.get(key)?;
        e.live(now).then_some((&e.lsa, e.at))
    }

    /// Every live LSA, in key order.
    pub fn lsas(&self, now: Instant) -> impl Iterator<Item = &Lsa> {
        self.lsdb
            .values()
            .filter(move |e| e.live(now))
            .map(|e| &e.lsa)
    }

    /// Number of LSAs held (MaxAge ones awaiting removal included).
    pub fn lsdb_len(&self) -> usize {
        self.lsdb.len()
    }

    /// A digest of the live LSDB's (key, seq) set: equal digests, equal
    /// databases (ages differ between routers and are left out).
    pub fn lsdb_digest(&self, now: Instant) -> u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for (k, e) in &self.lsdb {
            if !e.live(now) {
                continue;
            }
            for x in [
                u64::from(k.0 .0),
                k.1 as u64,
                u64::from(k.2),
                u64::from(e.lsa.seq),
            ] {
                h ^= x;
                h = h.wrapping_mul(0x100_0000_01b3);
            }
        }
        h
    }

    /// The SPF result: router → route (ourselves included, cost 0).
    pub const fn routes(&self) -> &BTreeMap<RouterId, Route> {
        &self.routes
    }

    /// Cumulative counters.
    pub const fn counters(&self) -> &Counters {
        self.tally.total()
    }

    pub(crate) fn drain_counters_into(&mut self, out: &mut Counters) {
        self.tally.drain_into(out);
    }

    // ---- outputs ------------------------------------------------------

    /// The next datagram to send.
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmits.pop_front()
    }

    /// The next change to the LSDB or the routes.
    #[must_use]
    pub fn poll_change(&mut self) -> Option<Change> {
        self.changes.pop_front()
    }

    /// When [`Igp::handle_timeout`] is next due.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut t: Option<Instant> = None;
        let mut min = |x: Instant| t = Some(t.map_or(x, |t| t.min(x)));
        if !self.links.is_empty() {
            min(self.next_hello);
        }
        for n in self.links.values() {
            if n.router_id.is_some() {
                min(n.last_heard + self.cfg.dead_interval);
            }
            if let Some(due) = n.rxmt.values().map(|(_, d)| *d).min() {
                min(due);
            }
        }
        if let Some((at, _, _)) = self.pending.first() {
            min(*at);
        }
        for o in self.own.values() {
            if let (false, Some(l)) = (o.pending, o.last) {
                min(l + self.cfg.ls_refresh);
            }
        }
        if let Some((at, _)) = self.expiry.first() {
            min(*at);
        }
        t
    }

    // ---- inputs -------------------------------------------------------

    /// A link to a neighbour SAR is up with `cost` (≥ 1), or its cost
    /// changed. A hello goes out on it at once.
    pub fn link_up(&mut self, now: Instant, link: LinkId, cost: u32) {
        let cost = cost.max(1);
        if let Some(n) = self.links.get_mut(&link) {
            if n.cost != cost {
                n.cost = cost;
                if n.state == NeighborState::Full {
                    self.schedule(LsaKind::RouterLinks, 0, None);
                }
            }
        } else {
            if self.links.len() >= self.cfg.max_links {
                self.tally.bump("drop.sar.igp_links_full");
                return;
            }
            self.links.insert(
                link,
                Neighbor {
                    cost,
                    state: NeighborState::Down,
                    router_id: None,
                    srtt_us: None,
                    last_heard: now,
                    last_hello: None,
                    rxmt: BTreeMap::new(),
                    acks: Vec::new(),
                },
            );
            self.tally.bump("sar.igp_link_up");
            self.send_hello(now, link);
        }
        self.flush(now);
    }

    /// A link is down (the driver knows: port down, address gone).
    pub fn link_down(&mut self, now: Instant, link: LinkId) {
        let Some(n) = self.links.remove(&link) else {
            return;
        };
        self.tally.bump("sar.igp_link_down");
        if n.state == NeighborState::Full {
            self.schedule(LsaKind::RouterLinks, 0, None);
        }
        self.flush(now);
    }

    /// Set the content of one of our LSAs other than router links (service
    /// parts, App-Metrics, sticky entries) and originate it, paced by
    /// `min_ls_interval`. Router-links bodies are ignored (we build those).
    pub fn originate(&mut self, now: Instant, part: u16, body: LsaBody) {
        if body.kind() == LsaKind::RouterLinks {
            return;
        }
        self.schedule(body.kind(), part, Some(body));
        self.flush(now);
    }

    /// One datagram from the neighbour on `link`.
    pub fn handle(&mut self, now: Instant, link: LinkId, datagram: &[u8]) {
        if !self.links.contains_key(&link) {
            self.tally.bump("drop.sar.igp_unknown_link");
            return;
        }
        let key = self.cfg.key.as_ref();
        let secret_for = |id: u8| key.filter(|k| k.id == id).map(|k| &k.secret[..]);
        let Ok((msg, check)) = Message::decode(datagram, secret_for) else {
            self.tally.bump("drop.sar.igp_malformed");
            return;
        };
        if self.cfg.key.is_some() {
            let reason = match check {
                AuthCheck::Good(_) => None,
                AuthCheck::Unsigned => Some("drop.sar.igp_auth_missing"),
                AuthCheck::Bad(_) => Some("drop.sar.igp_auth_bad"),
                AuthCheck::UnknownKey(_) => Some("drop.sar.igp_auth_unknown_key"),
            };
            if let Some(r) = reason {
                self.tally.bump(r);
                return;
            }
        }
        match msg {
            Message::Hello(h) => self.on_hello(now, link, &h),
            Message::Lsa(l) => self.on_lsa(now, link, l),
            Message::LsAck(a) => self.on_ack(link, &a),
            // Probes are not link-scoped: the driver hands them to the
            // sticky engine before they get here.
            Message::Probe(_) => self.tally.bump("drop.sar.igp_probe_on_link"),
            Message::Unknown { .. } => self.tally.bump("drop.sar.igp_unknown_type"),
        }
        self.flush(now);
    }

    /// Timers: hellos, dead neighbours, retransmissions, originations,
    /// refreshes, MaxAge. Spurious calls are harmless.
    pub fn handle_timeout(&mut self, now: Instant) {
        if now >= self.next_hello {
            self.next_hello = now + self.cfg.hello_interval;
            let links: Vec<LinkId> = self.links.keys().copied().collect();
            for l in links {
                self.send_hello(now, l);
            }
        }
        let dead: Vec<LinkId> = self
            .links
            .iter()
            .filter(|(_, n)| n.router_id.is_some() && now >= n.last_heard + self.cfg.dead_interval)
            .map(|(l, _)| *l)
            .collect();
        for l in dead {
            self.tally.bump("sar.igp_neighbor_dead");
            self.neighbor_down(l);
        }
        self.retransmit(now);
        for (k, o) in &mut self.own {
            if let Some(l) = o.last {
                if !o.pending && now >= l + self.cfg.ls_refresh {
                    o.pending = true;
                    self.pending
                        .insert((l + self.cfg.min_ls_interval, k.0, k.1));
                    self.tally.bump("sar.igp_lsa_refresh");
                }
            }
        }
        while let Some(&(at, key)) = self.expiry.first() {
            if at > now {
                break;
            }
            self.expiry.pop_first();
            let Some(e) = self.lsdb.get_mut(&key) else {
                continue;
            };
            if e.live(now) {
                continue; // a stale index entry
            }
            if !e.dead {
                e.dead = true;
                self.tally.bump("sar.igp_lsa_max_age");
                self.changes.push_back(Change::Lsa(key));
                if key.1 == LsaKind::RouterLinks {
                    self.spf_dirty = true;
                }
                self.expiry.insert((now + self.cfg.max_age_hold, key));
            } else {
                self.lsdb.remove(&key);
                for n in self.links.values_mut() {
                    n.rxmt.remove(&key);
                }
            }
        }
        self.flush(now);
    }

    // ---- hellos and neighbours ----------------------------------------

    fn send_hello(&mut self, now: Instant, link: LinkId) {
        let Some(n) = self.links.get(&link) else {
            return;
        };
        self.hello_seq = self.hello_seq.wrapping_add(1);
        let neighbors = match (n.router_id, n.last_hello) {
            (Some(router_id), Some((seq, sent_at_us, rx))) => vec![HelloEcho {
                router_id,
                seq,
                sent_at_us,
                held_us: (now - rx).total_micros(),
            }],
            _ => Vec::new(),
        };
        let hello = Hello {
            router_id: self.cfg.router_id,
            seq: self.hello_seq,
            sent_at_us: now.total_micros().max(0) as u64,
            neighbors,
        };
        self.send(link, &Message::Hello(hello));
        self.tally.bump("sar.igp_hello_tx");
    }

    fn on_hello(&mut self, now: Instant, link: LinkId, h: &Hello) {
        if h.router_id == self.cfg.router_id {
            self.tally.bump("drop.sar.igp_own_router_id");
            return;
        }
        let me = self.cfg.router_id;
        let Some(n) = self.links.get(&link) else {
            return;
        };
        if n.router_id.is_some_and(|r| r != h.router_id) {
            // Another router on the link: start over with it.
            self.tally.bump("sar.igp_neighbor_changed");
            self.neighbor_down(link);
        }
        let Some(n) = self.links.get_mut(&link) else {
            return;
        };
        n.router_id = Some(h.router_id);
        n.last_heard = now;
        n.last_hello = Some((h.seq, h.sent_at_us, now));
        let echo = h.neighbors.iter().find(|e| e.router_id == me);
        if let Some(e) = echo {
            let now_us = now.total_micros().max(0) as u64;
            let rtt = now_us
                .checked_sub(e.sent_at_us)
                .and_then(|x| x.checked_sub(e.held_us));
            match rtt {
                Some(rtt) if rtt <= self.cfg.dead_interval.total_micros() => {
                    n.srtt_us = Some(n.srtt_us.map_or(rtt, |s| (7 * s + rtt) / 8));
                    self.tally.bump("sar.igp_rtt_samples");
                }
                _ => self.tally.bump("sar.igp_rtt_implausible"),
            }
        }
        let before = n.state;
        let after = match (before, echo.is_some()) {
            (_, true) => NeighborState::Full,
            (NeighborState::Full, false) => NeighborState::Init,
            (_, false) => NeighborState::Init,
        };
        if before == after {
            return;
        }
        n.state = after;
        if after == NeighborState::Full {
            self.tally.bump("sar.igp_adjacency_up");
            // Synchronise: everything we hold goes to it, reliably.
            let due = now + self.cfg.rxmt_interval;
            let keys: Vec<LsaKey> = self.lsdb.keys().copied().collect();
            for key in keys {
                if let Some(seq) = self.lsdb.get(&key).map(|e| e.lsa.seq) {
                    if let Some(n) = self.links.get_mut(&link) {
                        n.rxmt.insert(key, (seq, due));
                    }
                    self.send_lsa(now, link, &key);
                }
            }
        }
        if before == NeighborState::Full || after == NeighborState::Full {
            if before == NeighborState::Full {
                self.tally.bump("sar.igp_adjacency_lost");
                if let Some(n) = self.links.get_mut(&link) {
                    n.rxmt.clear();
                }
            }
            self.schedule(LsaKind::RouterLinks, 0, None);
        }
        // Tell it at once that we hear it (speeds up two-way).
        self.send_hello(now, link);
    }

    fn neighbor_down(&mut self, link: LinkId) {
        let Some(n) = self.links.get_mut(&link) else {
            return;
        };
        let was_full = n.state == NeighborState::Full;
        n.state = NeighborState::Down;
        n.router_id = None;
        n.last_hello = None;
        n.srtt_us = None;
        n.rxmt.clear();
        n.acks.clear();
        if was_full {
            self.schedule(LsaKind::RouterLinks, 0, None);
        }
    }

    // ---- flooding -----------------------------------------------------

    fn on_lsa(&mut self, now: Instant, link: LinkId, lsa: Lsa) {
        if self.links.get(&link).and_then(|n| n.router_id).is_none() {
            self.tally.bump("drop.sar.igp_lsa_unknown_neighbor");
            return;
        }
        let key = (lsa.origin, lsa.body.kind(), lsa.part);
        let header = lsa.header();
        let ours = self.lsdb.get(&key);
        let incoming_dead = lsa.age >= Lsa::MAX_AGE_S;
        let order = match ours {
            None => core::cmp::Ordering::Greater,
            Some(e) => lsa
                .seq
                .cmp(&e.lsa.seq)
                .then_with(|| match (incoming_dead, e.live(now)) {
                    (true, true) => core::cmp::Ordering::Greater,
                    _ => core::cmp::Ordering::Equal,
                }),
        };
        match order {
            core::cmp::Ordering::Greater => {
                if ours.is_none() && incoming_dead {
                    // Flushing something we never had: nothing to do.
                    self.ack(link, header);
                    return;
                }
                if lsa.origin == self.cfg.router_id {
                    // Ours from a previous life (or forged with the key):
                    // jump past it and originate ours again.
                    self.tally.bump("sar.igp_own_lsa_newer");
                    let o = self.own.entry((key.1, key.2)).or_insert(Own {
                        seq: 0,
                        body: None,
                        last: None,
                        pending: false,
                    });
                    o.seq = o.seq.max(lsa.seq);
                    if o.body.is_none() {
                        // Not ours any more: supersede with an empty body.
                        o.body = empty_body(key.1);
                    }
                    if o.pending {
                        let due = o
                            .last
                            .map_or(Instant::ZERO, |l| l + self.cfg.min_ls_interval);
                        self.pending.remove(&(due, key.1, key.2));
                    }
                    o.pending = true;
                    o.last = None;
                    self.pending.insert((Instant::ZERO, key.1, key.2));
                    self.ack(link, header);
                    return;
                }
                if let Some(e) = ours {
                    if now < e.at + self.cfg.min_ls_arrival {
                        self.tally.bump("drop.sar.igp_lsa_min_arrival");
                        return;
                    }
                } else if self.lsdb.len() >= self.cfg.max_lsas {
                    self.tally.bump("drop.sar.igp_lsdb_full");
                    self.ack(link, header);
                    return;
                }
                self.tally.bump("sar.igp_lsa_installed");
                self.ack(link, header);
                self.install(now, lsa, Some(link));
            }
            core::cmp::Ordering::Equal => {
                self.tally.bump("sar.igp_lsa_duplicate");
                let implied = self
                    .links
                    .get_mut(&link)
                    .and_then(|n| {
                        let hit = n.rxmt.get(&key).is_some_and(|(s, _)| *s == header.seq);
                        hit.then(|| n.rxmt.remove(&key))
                    })
                    .is_some();
                if !implied {
                    self.ack(link, header);
                }
            }
            core::cmp::Ordering::Less => {
                // It has an older copy: send it ours.
                self.tally.bump("sar.igp_lsa_older");
                self.send_lsa(now, link, &key);
            }
        }
    }

    fn on_ack(&mut self, link: LinkId, a: &LsAck) {
        let Some(n) = self.links.get_mut(&link) else {
            return;
        };
        if n.router_id != Some(a.router_id) {
            self.tally.bump("drop.sar.igp_ack_wrong_sender");
            return;
        }
        for h in &a.acks {
            let key = (h.origin, h.kind, h.part);
            if n.rxmt.get(&key).is_some_and(|(s, _)| *s == h.seq) {
                n.rxmt.remove(&key);
            }
        }
    }

    /// Install `lsa` (newer than ours) and flood it to every `Full`
    /// neighbour but `from`.
    fn install(&mut self, now: Instant, lsa: Lsa, from: Option<LinkId>) {
        let key = (lsa.origin, lsa.body.kind(), lsa.part);
        let seq = lsa.seq;
        let e = Installed {
            lsa,
            at: now,
            dead: false,
        };
        let dead_now = !e.live(now);
        self.expiry.insert((e.max_age_at(), key));
        self.lsdb.insert(key, e);
        if dead_now {
            if let Some(e) = self.lsdb.get_mut(&key) {
                e.dead = true;
            }
            self.expiry.insert((now + self.cfg.max_age_hold, key));
        }
        if key.1 == LsaKind::RouterLinks {
            self.spf_dirty = true;
        }
        self.changes.push_back(Change::Lsa(key));
        let due = now + self.cfg.rxmt_interval;
        let to: Vec<LinkId> = self
            .links
            .iter_mut()
            .filter_map(|(l, n)| {
                n.rxmt.remove(&key);
                (Some(*l) != from && n.state == NeighborState::Full).then_some(*l)
            })
            .collect();
        for l in to {
            if let Some(n) = self.links.get_mut(&l) {
                n.rxmt.insert(key, (seq, due));
            }
            self.send_lsa(now, l, &key);
        }
    }

    fn retransmit(&mut self, now: Instant) {
        let mut resend = Vec::new();
        for (l, n) in &mut self.links {
            let due: Vec<LsaKey> = n
                .rxmt
                .iter()
                .filter(|(_, (_, d))| *d <= now)
                .map(|(k, _)| *k)
                .collect();
            for key in due {
                match self.lsdb.get(&key) {
                    Some(e) if n.rxmt.get(&key).is_some_and(|(s, _)| *s == e.lsa.seq) => {
                        n.rxmt
                            .insert(key, (e.lsa.seq, now + self.cfg.rxmt_interval));
                        resend.push((*l, key));
                    }
                    _ => {
                        n.rxmt.remove(&key);
                    }
                }
            }
        }
        self.tally.add("sar.igp_retransmits", resend.len() as u64);
        for (l, key) in resend {
            self.send_lsa(now, l, &key);
        }
    }

    fn ack(&mut self, link: LinkId, h: LsaHeader) {
        if let Some(n) = self.links.get_mut(&link) {
            n.acks.push(h);
        }
    }

    fn send_lsa(&mut self, now: Instant, link: LinkId, key: &LsaKey) {
        let Some(e) = self.lsdb.get(key) else {
            return;
        };
        let mut lsa = e.lsa.clone();
        lsa.age = e.age(now).saturating_add(1).min(Lsa::MAX_AGE_S);
        self.send(link, &Message::Lsa(lsa));
        self.tally.bump("sar.igp_lsa_tx");
    }

    fn send(&mut self, link: LinkId, msg: &Message) {
        let key = self.cfg.key.as_ref().map(|k| (k.id, &k.secret[..]));
        match msg.encode(key) {
            Ok(bytes) => self.transmits.push_back(Transmit {
                to_neighbor: link,
                bytes,
            }),
            Err(_) => self.tally.bump("drop.sar.igp_encode"),
        }
    }

    // ---- origination --------------------------------------------------

    fn schedule(&mut self, kind: LsaKind, part: u16, body: Option<LsaBody>) {
        let o = self.own.entry((kind, part)).or_insert(Own {
            seq: 0,
            body: None,
            last: None,
            pending: false,
        });
        if body.is_some() {
            o.body = body;
        }
        if !o.pending {
            o.pending = true;
            let due = o
                .last
                .map_or(Instant::ZERO, |l| l + self.cfg.min_ls_interval);
            self.pending.insert((due, kind, part));
        }
    }

    fn originate_due(&mut self, now: Instant) {
        let mut due = Vec::new();
        while let Some(&(at, kind, part)) = self.pending.first() {
            if at > now {
                break;
            }
            self.pending.pop_first();
            due.push((kind, part));
        }
        for (kind, part) in due {
            let body = if kind == LsaKind::RouterLinks {
                Some(LsaBody::RouterLinks(self.router_links()))
            } else {
                self.own.get(&(kind, part)).and_then(|o| o.body.clone())
            };
            let Some(o) = self.own.get_mut(&(kind, part)) else {
                continue;
            };
            o.pending = false;
            o.last = Some(now);
            let Some(body) = body else {
                continue;
            };
            o.seq = o.seq.wrapping_add(1);
            let lsa = Lsa {
                origin: self.cfg.router_id,
                part,
                seq: o.seq,
                age: 0,
                body,
            };
            if Message::Lsa(lsa.clone()).encode(None).is_err() {
                self.tally.bump("drop.sar.igp_lsa_too_big");
                continue;
            }
            self.tally.bump("sar.igp_lsa_originated");
            self.install(now, lsa, None);
        }
    }

    fn router_links(&self) -> RouterLinks {
        let links = self
            .links
            .values()
            .filter(|n| n.state == NeighborState::Full)
            .filter_map(|n| {
                Some(Link {
                    neighbor: n.router_id?,
                    cost: n.cost,
                })
            })
            .collect();
        RouterLinks {
            address: self.cfg.address,
            links,
            prefixes: self.cfg.prefixes.clone(),
        }
    }

    /// End of every input: originate what is due, send acknowledgements,
    /// run SPF if the topology changed.
    fn flush(&mut self, now: Instant) {
        self.originate_due(now);
        let mut acks = Vec::new();
        for (l, n) in &mut self.links {
            if !n.acks.is_empty() {
                acks.push((*l, std::mem::take(&mut n.acks)));
            }
        }
        for (l, list) in acks {
            for chunk in list.chunks(MAX_ACKS) {
                let msg = Message::LsAck(LsAck {
                    router_id: self.cfg.router_id,
                    acks: chunk.to_vec(),
                });
                self.send(l, &msg);
            }
        }
        if self.spf_dirty {
            self.spf_dirty = false;
            self.run_spf(now);
        }
    }

    fn run_spf(&mut self, now: Instant) {
        let routers: BTreeMap<RouterId, &RouterLinks> = self
            .lsdb
            .iter()
            .filter(|(k, e)| k.1 == LsaKind::RouterLinks && k.2 == 0 && e.live(now))
            .filter_map(|(k, e)| match &e.lsa.body {
                LsaBody::RouterLinks(r) => Some((k.0, r)),
                _ => None,
            })
            .collect();
        let paths = spf::shortest_paths(self.cfg.router_id, &routers);
        let mut routes = BTreeMap::new();
        for (r, p) in &paths {
            let link = if *r == self.cfg.router_id {
                None
            } else {
                // The cheapest Full link to the first hop (lowest ID on ties).
                let best = self
                    .links
                    .iter()
                    .filter(|(_, n)| {
                        n.state == NeighborState::Full && n.router_id == Some(p.first_hop)
                    })
                    .min_by_key(|(l, n)| (n.cost, **l))
                    .map(|(l, _)| *l);
                let Some(l) = best else {
                    continue;
                };
                Some(l)
            };
            let next_hop_addr = paths.get(&p.first_hop).map_or(p.addr, |f| f.addr);
            routes.insert(
                *r,
                Route {
                    cost: p.cost,
                    addr: p.addr,
                    next_hop: p.first_hop,
                    next_hop_addr,
                    link,
                },
            );
        }
        self.tally.bump("sar.igp_spf_runs");
        if routes != self.routes {
            self.routes = routes;
            self.changes.push_back(Change::Routes);
        }
    }
}

/// An empty body of `kind` (router links are always built afresh).
const fn empty_body(kind: LsaKind) -> Option<LsaBody> {
    match kind {
        LsaKind::RouterLinks => None,
        LsaKind::Services => Some(LsaBody::Services(Vec::new())),
        LsaKind::AppMetrics => Some(LsaBody::AppMetrics(Vec::new())),
        LsaKind::Sticky => Some(LsaBody::Sticky(Vec::new())),
    }
}
