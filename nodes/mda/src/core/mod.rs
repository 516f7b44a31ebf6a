// Over 800 lines: the DA's request handlers and the mesh share one state (Mda); splitting them by room (requests, registrations, mesh) is the next step of issue 14.
//! The sans-IO mesh-enhanced directory agent: RFC 2608 DA behaviour plus
//! the RFC 3528 mesh, with no sockets, clocks or files.
//!
//! ```text
//!  driver ── handle_udp(now, from, bytes, mcast) ──►┐
//!         ── handle_tcp(now, conn, frame) ─────────►│      ┌─ Store (states, tombstones, expiry)
//!         ── tcp_accepted / tcp_established ───────►│ Mda ─┼─ summary vector, accept clock
//!         ── tcp_closed / handle_timeout(now) ─────►│      └─ peers + peering connections
//!         ◄── poll_event():    Persist, Connect, Close, PeerUp/Down
//!         ◄── poll_transmit(): UDP datagram to an endpoint | TCP message on a connection
//!         ◄── poll_timeout():  when to call handle_timeout next
//! ```
//!
//! # Call order
//!
//! After every `handle_*`/`tcp_*` call, the driver **drains
//! [`Mda::poll_event`] before [`Mda::poll_transmit`]**: an
//! [`Event::Persist`] must be durable before the SrvAck it precedes goes
//! out (SPEC §4 durability). Events and transmits are queued in the order
//! they were decided, and every transmit that depends on a record is queued
//! after it. If persisting fails the driver must not send anything the core
//! queued since (it fails stop: see `docs/mda.md`).
//!
//! Connections are named by [`ConnId`]s the core allocates: for an inbound
//! connection the driver calls [`Mda::tcp_accepted`] and gets the id; for
//! an outbound one the core emits [`Event::Connect`] with the id, and the
//! driver answers with [`Mda::tcp_established`] or [`Mda::tcp_closed`].
//!
//! Time is injected (`now`); SLP timestamps (µs since 1900-01-01 UTC) are
//! `now` plus [`Config::wall_us_at_zero`]. Randomness (XIDs, the boot
//! advert's start wait) comes from [`Config::seed`].

mod auth;
mod index;
mod reply;
mod store;

#[cfg(test)]
mod auth_tests;
#[cfg(test)]
mod hardening_tests;
#[cfg(test)]
mod incremental_tests;
#[cfg(test)]
mod mesh_tests;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, VecDeque};
use std::net::IpAddr;

use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{IpAddress, IpEndpoint, Ipv4Address, Ipv6Address};
use svcroute_stack::timer::TimerTable;
use svcroute_stack::wire::slp::codec::List;
use svcroute_stack::wire::slp::{
    self, AcceptId, AntiEntropyType, AntiEtrpRqst, AttrList, AttrRply, AttrRqst, AttrValue,
    Attribute, AuthBlocks, Body, DaAdvert, ErrorCode, Extension, Flags, FunctionId, FwdId, Header,
    LangTag, MeshFwd, Message, ScopeList, ServiceType, Signed, SlpString, SrvAck, SrvDeReg, SrvReg,
    SrvRply, SrvRqst, SrvTypeRply, SrvTypeRqst, TagList, UrlEntry,
};

use auth::Refusal;
pub use auth::{Admit, KeyEntry, KeyList, Keys, SignKey, SignKeyEntry, SignKeyList, VerifyKey};
use reply::{Answer, Budgets};
use store::Store;
pub use store::{merge, Change, Clock, Key, Record, Reg, StateRecord, Update, UpdateRecord};

/// RFC 3111 link-local SVRLOC-DA group `FF02::123`: unsolicited DAAdverts
/// over IPv6 go here.
pub const MCAST_V6_DA: Ipv6Address = Ipv6Address::new(0xff02, 0, 0, 0, 0, 0, 0, 0x123);
/// RFC 3111 SVRLOC group `FF02::116` (requests) over IPv6.
pub const MCAST_V6_SVRLOC: Ipv6Address = Ipv6Address::new(0xff02, 0, 0, 0, 0, 0, 0, 0x116);

/// Configuration of the core (the driver's `MdaConfig` fills it).
#[derive(Debug, Clone)]
pub struct Config {
    /// Our DA URL, `service:directory-agent://<addr>`: also our accept DA URL.
    pub url: String,
    /// Our addresses (for the PRList and the duplicate-connection tiebreak;
    /// the first is the one compared).
    pub addrs: Vec<IpAddress>,
    /// Scopes served.
    pub scopes: ScopeList,
    /// Extra DAAdvert attributes (`mesh-enhanced` is added when `mesh`).
    pub attrs: AttrList,
    /// Mesh enhanced (RFC 3528); `false`: a plain RFC 2608 DA.
    pub mesh: bool,
    /// Statically configured peers (their DAAdvert is asked for by unicast).
    pub peers: Vec<IpAddress>,
    /// CONFIG_DA_KEEPALIVE (RFC 3528 §6: 200 s).
    pub keepalive: Duration,
    /// CONFIG_DA_TIMEOUT (RFC 3528 §6: 300 s).
    pub timeout: Duration,
    /// CONFIG_DA_BEAT: unsolicited DAAdvert period (RFC 2608 §13: 3 h).
    pub beat: Duration,
    /// CONFIG_START_WAIT: the boot DAAdvert goes out within this (RFC 2608: 3 s).
    pub start_wait: Duration,
    /// How often an unpeered known peer is asked for its DAAdvert.
    pub peer_retry: Duration,
    /// Most registration states (tombstones included).
    pub max_registrations: usize,
    /// Most peers with a peering connection.
    pub max_peers: usize,
    /// Most TCP connections at once (peers and clients).
    pub max_connections: usize,
    /// A UDP reply is at most request length × this (CVE-2023-29552).
    pub amplification_factor: usize,
    /// libslp's MTU (RFC 2608 §6.1's default, 1400): an answer cut to fit
    /// a datagram is made longer than this, so that a client that moves to
    /// TCP only for a reply longer than its MTU does.
    pub max_datagram: usize,
    /// The path's UDP payload over IPv4 (port MTU − 28): a reply up to
    /// this goes whole.
    pub udp_payload_v4: usize,
    /// The path's UDP payload over IPv6 (port MTU − 48).
    pub udp_payload_v6: usize,
    /// Reply-byte budget per destination address: the octets of UDP
    /// replies above request × `amplification_factor` it may get at once.
    pub reply_budget: usize,
    /// … and per second after that.
    pub reply_budget_per_s: usize,
    /// Most destination addresses whose budget is tracked.
    pub reply_budget_addrs: usize,
    /// Largest SLP message over TCP, octets.
    pub max_frame: usize,
    /// A TCP frame must be complete this long after its first octet, and
    /// an inbound connection's first message this long after the accept.
    pub frame_timeout: Duration,
    /// `min-refresh-interval` in seconds (0: none).
    pub min_refresh_s: u32,
    /// SLP time (µs since 1900-01-01 UTC) at `Instant::ZERO`.
    pub wall_us_at_zero: u64,
    /// Seed of the core's RNG.
    pub seed: u64,
    /// Keys: SA and peer authentication, DAAdvert signatures (see `auth`).
    pub keys: Keys,
}

impl Config {
    /// A configuration with RFC defaults for `url`, `addrs` and `scopes`.
    pub fn new(url: &str, addrs: Vec<IpAddress>, scopes: ScopeList) -> Self {
        Self {
            url: url.to_owned(),
            addrs,
            scopes,
            attrs: AttrList::default(),
            mesh: true,
            peers: Vec::new(),
            keepalive: Duration::from_secs(200),
            timeout: Duration::from_secs(300),
            beat: Duration::from_secs(10_800),
            start_wait: Duration::from_secs(3),
            peer_retry: Duration::from_secs(10),
            max_registrations: 1_000_000,
            max_peers: 64,
            max_connections: 256,
            amplification_factor: 2,
            max_datagram: slp::MAX_DATAGRAM,
            udp_payload_v4: 1500 - 28,
            udp_payload_v6: 1500 - 48,
            reply_budget: 65_536,
            reply_budget_per_s: 16_384,
            reply_budget_addrs: 4096,
            max_frame: 65_536,
            frame_timeout: Duration::from_secs(5),
            min_refresh_s: 0,
            wall_us_at_zero: 0,
            seed: 0,
            keys: Keys::default(),
        }
    }
}

svcroute_stack::timers! {
    /// The core's own timers (per-connection ones live with the connection).
    enum Timer {
        /// The unsolicited DAAdvert (CONFIG_DA_BEAT).
        Beat,
    }
}

svcroute_stack::timers! {
    /// A connection's timers.
    enum ConnTimer {
        /// Nothing heard for `timeout`: the connection goes.
        Idle,
        /// Our DAAdvert to the peer (CONFIG_DA_KEEPALIVE), once identified.
        Keepalive,
        /// An incomplete frame (or an inbound connection's first message)
        /// is late.
        Frame,
    }
}

/// A TCP connection, named by the core.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnId(pub u64);

/// Work for the driver's sockets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transmit {
    /// A datagram to `to`.
    Udp {
        /// Destination.
        to: IpEndpoint,
        /// One SLP message.
        bytes: Vec<u8>,
        /// A reply to a request (send it from port 427); `false` for what
        /// the MDA originates itself (DAAdverts, peer probes), which a
        /// driver may send from another socket so that an unreachable
        /// peer (its neighbour never resolving) cannot hold up replies.
        reply: bool,
    },
    /// One SLP message on a connection.
    Tcp {
        /// The connection.
        conn: ConnId,
        /// One SLP message.
        bytes: Vec<u8>,
    },
}

/// Things the driver must do or may want to know, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Make `record` durable before sending any transmit queued after it.
    Persist(Record),
    /// Open a TCP connection to `to`; answer with `tcp_established` or `tcp_closed`.
    Connect {
        /// The id the core gave it.
        conn: ConnId,
        /// Peer address, port 427.
        to: IpEndpoint,
    },
    /// Close a connection (after sending what was queued on it).
    Close(ConnId),
    /// Reset a connection now (a peer that broke the framing or is late
    /// with a frame: nothing queued on it is sent).
    Reset(ConnId),
    /// A peer relationship is up (its DAAdvert arrived on a connection).
    PeerUp(String),
    /// A peer relationship is down.
    PeerDown(String),
}

/// Where a message came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Src {
    Udp { from: IpEndpoint, mcast: bool },
    Tcp(ConnId),
}

impl Src {
    const fn is_mcast(self) -> bool {
        matches!(self, Self::Udp { mcast: true, .. })
    }
}

/// A known peer MDA (we have its DAAdvert).
#[derive(Debug, Clone)]
struct Peer {
    addr: IpAddress,
    scopes: ScopeList,
    /// Its DAAdvert, to forward to other peers (RFC 3528 §3.3).
    advert: DaAdvert,
    /// When to ask it for its DAAdvert again while not peered.
    next_retry: Instant,
}

#[derive(Debug, Clone)]
struct Conn {
    remote: IpEndpoint,
    initiated: bool,
    established: bool,
    /// The peer's DA URL once its DAAdvert arrived on this connection.
    peer: Option<String>,
    /// Idle (last DAAdvert from the peer, or open time + timeout),
    /// keepalive and frame deadlines.
    timers: TimerTable<ConnTimer>,
    /// Octets of a frame not yet complete.
    rx: Vec<u8>,
    /// We answered the peer's AntiEtrpRqst: new updates go here directly.
    synced: bool,
    closing: bool,
}

/// Named counters: `mda.*` events and `drop.mda.*` drops and refusals.
pub type Counters = BTreeMap<&'static str, u64>;

/// Outcome of applying an update to the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Apply {
    Installed,
    Stale,
}

/// The mesh-enhanced DA. See the module docs for the call order.
#[derive(Debug)]
pub struct Mda {
    cfg: Config,
    clock: Clock,
    boot_ts: u32,
    xid: u16,
    store: Store,
    summary: BTreeMap<String, u64>,
    accept_hwm: u64,
    peers: BTreeMap<String, Peer>,
    static_retry: Vec<(IpAddress, Instant)>,
    conns: BTreeMap<ConnId, Conn>,
    next_conn: u64,
    transmits: VecDeque<Transmit>,
    events: VecDeque<Event>,
    counters: Counters,
    fresh_counts: Counters,
    timers: TimerTable<Timer>,
    /// Reply-byte budgets per destination (reflection bound).
    budgets: Budgets,
    /// The `now` of the input being handled.
    now: Instant,
    stopped: bool,
}

impl Mda {
    /// A DA booting at `now` with the database rebuilt from `records` (a
    /// replayed log; empty for a fresh start). States that expired while
    /// it was down are dropped.
    pub fn new(cfg: Config, now: Instant, records: &[Record]) -> Self {
        let clock = Clock {
            wall_us_at_zero: cfg.wall_us_at_zero,
        };
        let mut rng = cfg.seed ^ 0x6d73_6c70_5f6d_6461;
        let start =
            Duration::from_micros(splitmix(&mut rng) % (cfg.start_wait.total_micros().max(1)));
        let static_retry = cfg.peers.iter().map(|a| (*a, now)).collect();
        let mut timers = TimerTable::default();
        timers.set(Timer::Beat, now + start);
        let budgets = Budgets::new(
            cfg.reply_budget,
            cfg.reply_budget_per_s,
            cfg.reply_budget_addrs,
        );
        let mut me = Self {
            boot_ts: clock.unix_secs(now).max(1),
            clock,
            xid: (splitmix(&mut rng) & 0xffff) as u16,
            store: Store::default(),
            summary: BTreeMap::new(),
            accept_hwm: 0,
            peers: BTreeMap::new(),
            static_retry,
            conns: BTreeMap::new(),
            next_conn: 1,
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            counters: Counters::new(),
            fresh_counts: Counters::new(),
            timers,
            budgets,
            now,
            stopped: false,
            cfg,
        };
        me.replay(now, records);
        me
    }

    fn replay(&mut self, now: Instant, records: &[Record]) {
        for r in records {
            match r {
                Record::State(s) => {
                    let Some((key, reg)) = s.to_reg(self.clock, now) else {
                        self.count("drop.mda.replay_bad_record");
                        continue;
                    };
                    let accepts = reg
                        .accept
                        .iter()
                        .chain(reg.updates.iter().map(|u| &u.accept));
                    for a in accepts {
                        self.note_summary(a);
                        if a.da_url.as_str() == self.cfg.url {
                            self.accept_hwm = self.accept_hwm.max(a.timestamp);
                        }
                    }
                    self.store.put(key, reg);
                }
                Record::Watermark {
                    accept_hwm,
                    summary,
                } => {
                    self.accept_hwm = self.accept_hwm.max(*accept_hwm);
                    for (u, t) in summary {
                        let e = self.summary.entry(u.clone()).or_insert(0);
                        *e = (*e).max(*t);
                    }
                }
            }
        }
        let gone = self.store.expire(now).len();
        if !records.is_empty() {
            self.count_n("mda.replayed_records", records.len() as u64);
            self.count_n("mda.replay_expired", gone as u64);
        }
    }

    // ---- getters ------------------------------------------------------

    /// The configuration.
    pub const fn config(&self) -> &Config {
        &self.cfg
    }

    /// The DA stateless boot timestamp (seconds since 1970; 0 after `shutdown`).
    pub const fn boot_timestamp(&self) -> u32 {
        self.boot_ts
    }

    /// Live and deleted states, in key order.
    pub fn registrations(&self) -> impl Iterator<Item = (&Key, &Reg)> {
        self.store.iter()
    }

    /// Number of states, tombstones included.
    pub fn registration_count(&self) -> usize {
        self.store.len()
    }

    /// The state under (url, lang).
    pub fn registration(&self, url: &str, lang: &LangTag) -> Option<&Reg> {
        self.store.get(&Key::new(url, lang))
    }

    /// The summary vector: accept DA URL → highest accept timestamp.
    pub const fn summary(&self) -> &BTreeMap<String, u64> {
        &self.summary
    }

    /// Peer URLs with an identified peering connection.
    pub fn active_peers(&self) -> Vec<String> {
        let mut v: Vec<String> = self.conns.values().filter_map(|c| c.peer.clone()).collect();
        v.sort();
        v.dedup();
        v
    }

    /// Known peers: URL, address, whether a peering connection is up.
    pub fn peers(&self) -> Vec<(String, IpAddress, bool)> {
        let active = self.active_peers();
        self.peers
            .iter()
            .map(|(u, p)| (u.clone(), p.addr, active.contains(u)))
            .collect()
    }

    /// Open connections: id, remote endpoint, initiated by us, peer URL.
    pub fn connections(&self) -> Vec<(ConnId, IpEndpoint, bool, Option<String>)> {
        self.conns
            .iter()
            .map(|(id, c)| (*id, c.remote, c.initiated, c.peer.clone()))
            .collect()
    }

    /// Cumulative counters.
    pub const fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Counter increments since the last call, for the node's `Counters`.
    pub fn drain_counters(&mut self) -> Counters {
        std::mem::take(&mut self.fresh_counts)
    }

    /// A digest of the live and deleted mesh-visible state (URL, language,
    /// version, deleted, attributes, scopes, auth blocks, and the versions
    /// and changes of incremental updates): equal digests mean equal
    /// databases, whatever the accept IDs.
    pub fn digest(&self) -> u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mut eat = |b: &[u8]| {
            for x in b {
                h ^= u64::from(*x);
                h = h.wrapping_mul(0x100_0000_01b3);
            }
            h ^= 0xff;
            h = h.wrapping_mul(0x100_0000_01b3);
        };
        for (k, r) in self.store.iter() {
            eat(k.url.as_bytes());
            eat(k.lang.as_bytes());
            eat(&r.version.to_be_bytes());
            eat(&[u8::from(r.deleted)]);
            eat(r.attrs.to_string().as_bytes());
            eat(r.scopes.to_string().as_bytes());
            let mut auths = Vec::new();
            slp::url::encode_auths(&r.url_auths, &mut auths);
            slp::url::encode_auths(&r.attr_auths, &mut auths);
            eat(&auths);
            for u in &r.updates {
                eat(&u.version.to_be_bytes());
                match &u.change {
                    Change::Add(a) => eat(format!("+{a}").as_bytes()),
                    Change::Remove(t) => eat(format!("-{}", t.as_raw()).as_bytes()),
                }
            }
        }
        h
    }

    /// Records that rebuild the current state: for log compaction.
    pub fn snapshot(&self) -> Vec<Record> {
        let mut v: Vec<Record> = self
            .store
            .iter()
            .map(|(_, r)| Record::State(Box::new(StateRecord::of(r, self.clock))))
            .collect();
        v.push(Record::Watermark {
            accept_hwm: self.accept_hwm,
            summary: self.summary.iter().map(|(u, t)| (u.clone(), *t)).collect(),
        });
        v
    }

    // ---- outputs ------------------------------------------------------

    /// The next datagram or TCP message to send. Drain
    /// [`Mda::poll_event`] first.
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmits.pop_front()
    }

    /// The next thing for the driver to do.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When [`Mda::handle_timeout`] is next due.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.stopped {
            return None;
        }
        let mut t = self.timers.next_timeout();
        let mut min = |x: Instant| t = Some(t.map_or(x, |t: Instant| t.min(x)));
        if let Some(e) = self.store.next_expiry() {
            min(e);
        }
        for c in self.conns.values() {
            if let Some(at) = c.timers.next_timeout() {
                min(at);
            }
        }
        if self.cfg.mesh {
            for (_, at) in &self.static_retry {
                min(*at);
            }
            for p in self.peers.values() {
                min(p.next_retry);
            }
        }
        t
    }

    // ---- inputs -------------------------------------------------------

    /// Timers: beat, expiry, keepalive, peer timeout, peer retries.
    /// Spurious calls are harmless.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.stopped {
            return;
        }
        let gone = self.store.expire(now);
        if !gone.is_empty() {
            self.count_n("mda.expired", gone.len() as u64);
        }
        self.now = now;
        while let Some(t) = self.timers.expire(now) {
            match t {
                Timer::Beat => {
                    self.timers.set(Timer::Beat, now + self.cfg.beat);
                    self.send_unsolicited_advert(now);
                }
            }
        }
        // Keepalives, idle and frame deadlines.
        let ids: Vec<ConnId> = self.conns.keys().copied().collect();
        for id in ids {
            while let Some(t) = self.conns.get_mut(&id).and_then(|c| c.timers.expire(now)) {
                if !self.on_conn_timer(now, id, t) {
                    break;
                }
            }
        }
        if self.cfg.mesh {
            self.retry_peers(now);
        }
    }

    /// A connection's timer `t` fired; whether the connection is still there.
    fn on_conn_timer(&mut self, now: Instant, id: ConnId, t: ConnTimer) -> bool {
        let Some(c) = self.conns.get(&id) else {
            return false;
        };
        match t {
            ConnTimer::Idle => {
                self.count(if c.peer.is_some() {
                    "mda.peer_timeout"
                } else {
                    "mda.conn_idle_timeout"
                });
                self.close_conn(now, id);
                false
            }
            ConnTimer::Frame => {
                // A frame that trickles (or a connection that never sends)
                // does not hold its slot until the idle timeout.
                self.count("drop.mda.tcp_frame_timeout");
                self.reset_conn(now, id);
                false
            }
            ConnTimer::Keepalive => {
                if c.peer.is_none() {
                    return true;
                }
                if let Some(c) = self.conns.get_mut(&id) {
                    c.timers.set(ConnTimer::Keepalive, now + self.cfg.keepalive);
                }
                let adv = self.own_advert(now, 0, LangTag::en());
                self.send_tcp(id, &adv);
                self.count("mda.keepalive_sent");
                true
            }
        }
    }

    /// Octets that arrived on connection `conn`: whole frames (RFC 2608
    /// §6.2: the header's Length) are handled as they complete. A Length
    /// shorter than a header, or longer than `max_frame`, closes the
    /// connection (counted); a frame must complete within `frame_timeout`.
    pub fn tcp_data(&mut self, now: Instant, conn: ConnId, bytes: &[u8]) {
        if self.stopped {
            return;
        }
        let Some(c) = self.conns.get_mut(&conn) else {
            self.count("drop.mda.unknown_conn");
            return;
        };
        if c.rx.is_empty() {
            // A new frame starts: its deadline runs from its first octet.
            c.timers.set(ConnTimer::Frame, now + self.cfg.frame_timeout);
        }
        c.rx.extend_from_slice(bytes);
        loop {
            let Some(c) = self.conns.get_mut(&conn) else {
                return;
            };
            let Some(len) = slp::frame_len(&c.rx) else {
                return;
            };
            if len < slp::header::FIXED_LEN {
                self.count("drop.mda.tcp_frame_short");
                self.reset_conn(now, conn);
                return;
            }
            if len > self.cfg.max_frame {
                self.count("drop.mda.tcp_frame_too_big");
                self.reset_conn(now, conn);
                return;
            }
            if c.rx.len() < len {
                return;
            }
            let frame: Vec<u8> = c.rx.drain(..len).collect();
            if c.rx.is_empty() {
                c.timers.stop(ConnTimer::Frame);
            } else {
                c.timers.set(ConnTimer::Frame, now + self.cfg.frame_timeout);
            }
            self.handle_tcp(now, conn, &frame);
        }
    }

    /// One UDP datagram from `from` to port 427; `mcast` if it was sent to a
    /// multicast group.
    pub fn handle_udp(&mut self, now: Instant, from: IpEndpoint, bytes: &[u8], mcast: bool) {
        if self.stopped {
            return;
        }
        self.count("mda.rx_udp");
        self.now = now;
        self.handle(now, Src::Udp { from, mcast }, bytes);
    }

    /// One framed SLP message on connection `conn`.
    pub fn handle_tcp(&mut self, now: Instant, conn: ConnId, bytes: &[u8]) {
        if self.stopped {
            return;
        }
        if !self.conns.contains_key(&conn) {
            self.count("drop.mda.unknown_conn");
            return;
        }
        self.count("mda.rx_tcp");
        self.now = now;
        if let Some(c) = self.conns.get_mut(&conn) {
            if c.rx.is_empty() {
                // A whole message came: nothing is late.
                c.timers.stop(ConnTimer::Frame);
            }
        }
        self.handle(now, Src::Tcp(conn), bytes);
    }

    /// An inbound connection from `remote` was accepted; its id, or `None`
    /// (and [`Event::Close`] is not needed: refuse it) at the connection cap.
    pub fn tcp_accepted(&mut self, now: Instant, remote: IpEndpoint) -> Option<ConnId> {
        if self.stopped || self.conns.len() >= self.cfg.max_connections {
            self.count("drop.mda.conn_limit");
            return None;
        }
        let id = self.alloc_conn();
        let mut conn = self.new_conn(now, remote, false);
        conn.established = true;
        // Its first message is due like a frame: a connection that never
        // sends does not hold its slot until the idle timeout.
        conn.timers
            .set(ConnTimer::Frame, now + self.cfg.frame_timeout);
        self.conns.insert(id, conn);
        self.count("mda.conn_accepted");
        Some(id)
    }

    /// An outbound connection from [`Event::Connect`] is up: we send our
    /// DAAdvert on it (RFC 3528 §3.2).
    pub fn tcp_established(&mut self, now: Instant, conn: ConnId) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        c.established = true;
        c.timers.set(ConnTimer::Idle, now + self.cfg.timeout);
        self.count("mda.conn_established");
        let adv = self.own_advert(now, 0, LangTag::en());
        self.send_tcp(conn, &adv);
    }

    /// A connection is gone (closed by either side, reset or failed).
    pub fn tcp_closed(&mut self, now: Instant, conn: ConnId) {
        let Some(c) = self.conns.remove(&conn) else {
            return;
        };
        self.count("mda.conn_closed");
        if !c.rx.is_empty() {
            // Half a message, then FIN (or a reset): it is lost.
            self.count("drop.mda.tcp_partial_frame");
        }
        self.after_close(now, c);
    }

    /// Going down: DAAdvert with boot timestamp 0 multicast and to every
    /// peer (RFC 2608 §12.2.1, RFC 3528 §3.5), then close every connection.
    pub fn shutdown(&mut self, now: Instant) {
        if self.stopped {
            return;
        }
        self.boot_ts = 0;
        self.send_unsolicited_advert(now);
        let ids: Vec<ConnId> = self.conns.keys().copied().collect();
        for id in ids {
            if self.conns.get(&id).is_some_and(|c| c.peer.is_some()) {
                let adv = self.own_advert(now, 0, LangTag::en());
                self.send_tcp(id, &adv);
            }
            self.events.push_back(Event::Close(id));
        }
        self.conns.clear();
        self.stopped = true;
    }

    // ---- dispatch -----------------------------------------------------

    fn handle(&mut self, now: Instant, src: Src, bytes: &[u8]) {
        if bytes.first() == Some(&slp::v1::VERSION) && self.on_v1(src, bytes) {
            return;
        }
        let msg = match Message::parse(bytes) {
            Ok(m) => m,
            Err(e) => {
                self.count(parse_reason(e));
                self.answer_parse_error(src, bytes, e.error_code());
                return;
            }
        };
        let function = msg.function();
        let (header, body, exts) = msg.into_parts();
        let mcast = src.is_mcast() || header.flags.mcast;
        let src = match src {
            Src::Udp { from, .. } => Src::Udp { from, mcast },
            s => s,
        };
        let req = Req {
            src,
            function,
            header,
            len: bytes.len(),
        };
        let mesh_fwd = exts.iter().find_map(|e| match e {
            Extension::MeshFwd(m) => Some(m.clone()),
            Extension::Unknown(_) => None,
        });
        match body {
            Body::SrvRqst(r) => self.on_srv_rqst(now, &req, &r),
            Body::SrvReg(r) => self.on_srv_reg(now, &req, r, mesh_fwd),
            Body::SrvDeReg(r) => self.on_srv_dereg(now, &req, r, mesh_fwd),
            Body::AttrRqst(r) => self.on_attr_rqst(now, &req, &r),
            Body::SrvTypeRqst(r) => self.on_srv_type_rqst(now, &req, &r),
            Body::DaAdvert(a) => self.on_da_advert(now, &req, a),
            Body::AntiEtrpRqst(r) => self.on_anti_entropy(now, &req, &r),
            Body::SrvAck(_) => {
                if self.peer_of(src).is_some() {
                    self.count("mda.anti_entropy_done");
                } else {
                    self.count("drop.mda.unexpected_reply");
                }
            }
            Body::SrvRply(_) | Body::AttrRply(_) | Body::SrvTypeRply(_) | Body::SaAdvert(_) => {
                self.count("drop.mda.unexpected_reply");
            }
        }
    }

    /// An SLPv1 message (RFC 2165): not served; a unicast request gets the
    /// SLPv1 reply with VER_NOT_SUPPORTED (RFC 2608 §3 asks a v2 DA to
    /// answer v1 requests in v1).
    /// Whether it was one (else it is answered as a v2 message of an
    /// unsupported version).
    fn on_v1(&mut self, src: Src, bytes: &[u8]) -> bool {
        let Some(reply) = slp::v1::ver_not_supported(bytes) else {
            return false;
        };
        self.count("drop.mda.slpv1");
        if src.is_mcast() {
            return true; // RFC 2608 §7: errors only for unicast requests.
        }
        match src {
            Src::Udp { from, .. } => self.transmits.push_back(Transmit::Udp {
                to: from,
                bytes: reply,
                reply: true,
            }),
            Src::Tcp(conn) => self
                .transmits
                .push_back(Transmit::Tcp { conn, bytes: reply }),
        }
        true
    }

    /// Answer a message that did not parse with the reply type its function
    /// calls for, unicast only (RFC 2608 §7); anything else is dropped.
    fn answer_parse_error(&mut self, src: Src, bytes: &[u8], code: ErrorCode) {
        let Some((function, mut header)) = Header::peek(bytes) else {
            return;
        };
        if src.is_mcast() || header.flags.mcast {
            return;
        }
        header.flags = Flags::default();
        let body = match function {
            FunctionId::SrvRqst => Body::SrvRply(SrvRply {
                error: code,
                ..SrvRply::default()
            }),
            FunctionId::SrvReg | FunctionId::SrvDeReg | FunctionId::AntiEtrpRqst => {
                Body::SrvAck(SrvAck { error: code })
            }
            FunctionId::AttrRqst => Body::AttrRply(AttrRply {
                error: code,
                ..AttrRply::default()
            }),
            FunctionId::SrvTypeRqst => Body::SrvTypeRply(SrvTypeRply {
                error: code,
                ..SrvTypeRply::default()
            }),
            _ => return,
        };
        let req = Req {
            src,
            function,
            header: header.clone(),
            len: bytes.len(),
        };
        self.reply(&req, body);
    }

    // ---- RFC 2608 requests --------------------------------------------

    fn on_srv_rqst(&mut self, now: Instant, req: &Req, r: &SrvRqst) {
        if req.src.is_mcast() && self.in_pr_list(&r.pr_list) {
            self.count("mda.pr_list_suppressed");
            return;
        }
        if r.service_type
            .as_str()
            .eq_ignore_ascii_case("service:directory-agent")
        {
            // DA discovery (RFC 2608 §12.1): empty scopes or a shared one.
            if !r.scopes.is_empty() && !r.scopes.intersects(&self.cfg.scopes) {
                return self.error(req, ErrorCode::ScopeNotSupported);
            }
            if !r.predicate.matches(&self.advert_attrs()) {
                return;
            }
            // RFC 2608 §8.5: only the block of the SPI asked for, if we can
            // sign with it; an SPI we cannot sign with is an error.
            let sign = if r.spi.is_empty() {
                Sign::None
            } else if self.cfg.keys.signer(&r.spi).is_some() {
                Sign::Spi(&r.spi)
            } else {
                return self.error(req, ErrorCode::AuthenticationUnknown);
            };
            self.count("mda.da_discovery");
            let body = self.own_advert_body(now, sign);
            return self.reply(req, body);
        }
        if r.service_type
            .as_str()
            .eq_ignore_ascii_case("service:service-agent")
        {
            // Only SAs answer SA discovery.
            return;
        }
        // RFC 2608 §8.2, §12.5: with an SPI, the URL entries signed by it,
        // each with that block; an SPI we cannot verify is an error.
        let spi = (!r.spi.is_empty()).then_some(r.spi.as_str());
        if spi.is_some_and(|s| !self.cfg.keys.knows(s)) {
            return self.error(req, ErrorCode::AuthenticationUnknown);
        }
        if !r.scopes.intersects(&self.cfg.scopes) {
            return self.error(req, ErrorCode::ScopeNotSupported);
        }
        self.count("mda.srv_rqst");
        // RFC 2608 §7: LANGUAGE_NOT_SUPPORTED only when the type has data in
        // the scopes, but none in the requested language.
        let mut entries = Vec::new();
        // The indexes narrow (docs/mda.md, "Queries"); each candidate is
        // checked like a scanned state.
        for reg in self.store.candidates(&r.service_type, r.predicate.filter()) {
            if !reg.alive(now)
                || !r.service_type.matches(&reg.service_type)
                || !reg.scopes.intersects(&r.scopes)
                || !reg.lang.same_language(&req.header.lang)
            {
                continue;
            }
            if !r.predicate.matches(&reg.attrs) {
                continue;
            }
            let mut entry = UrlEntry::new(reg.remaining(now), reg.url.clone());
            if let Some(spi) = spi {
                let Some(b) = auth::block_of(&reg.url_auths, spi) else {
                    continue;
                };
                entry.auths = list(vec![b.clone()]);
            }
            entries.push(entry);
        }
        if entries.is_empty() {
            let (mut this_lang, mut other_lang) = (false, false);
            for reg in self.store.candidates(&r.service_type, None) {
                if reg.alive(now)
                    && r.service_type.matches(&reg.service_type)
                    && reg.scopes.intersects(&r.scopes)
                {
                    if reg.lang.same_language(&req.header.lang) {
                        this_lang = true;
                    } else {
                        other_lang = true;
                    }
                }
            }
            if other_lang && !this_lang {
                return self.error(req, ErrorCode::LanguageNotSupported);
            }
            if req.src.is_mcast() {
                return; // RFC 2608 §8.1: no empty replies to multicast.
            }
        }
        self.answer(req, Answer::Urls(entries));
    }

    fn on_attr_rqst(&mut self, now: Instant, req: &Req, r: &AttrRqst) {
        if !r.spi.is_empty() && !self.cfg.keys.knows(&r.spi) {
            return self.error(req, ErrorCode::AuthenticationUnknown);
        }
        if !r.scopes.intersects(&self.cfg.scopes) {
            return self.error(req, ErrorCode::ScopeNotSupported);
        }
        if !r.spi.is_empty() {
            return self.on_signed_attr_rqst(now, req, r);
        }
        self.count("mda.attr_rqst");
        let by_url = r.url.contains("://");
        let stype = if by_url {
            None
        } else {
            match ServiceType::parse(&r.url) {
                Ok(t) => Some(t),
                Err(_) => return self.error(req, ErrorCode::ParseError),
            }
        };
        let mut other_lang = false;
        let mut found = false;
        let mut merged: Vec<(String, Vec<AttrValue>)> = Vec::new();
        for (_, reg) in self.store.iter() {
            if !reg.alive(now) || !reg.scopes.intersects(&r.scopes) {
                continue;
            }
            let hit = match &stype {
                None => reg.url.as_str() == r.url.as_str(),
                Some(t) => t.matches(&reg.service_type),
            };
            if !hit {
                continue;
            }
            if !reg.lang.same_language(&req.header.lang) {
                other_lang = true;
                continue;
            }
            found = true;
            for a in reg.attrs.select(&r.tags).attributes() {
                match merged.iter_mut().find(|(t, _)| a.has_tag(t)) {
                    Some((_, vals)) => {
                        for v in a.values() {
                            if !vals.contains(v) {
                                vals.push(v.clone());
                            }
                        }
                    }
                    None => merged.push((a.tag().to_owned(), a.values().to_vec())),
                }
            }
        }
        if !found {
            if other_lang {
                return self.error(req, ErrorCode::LanguageNotSupported);
            }
            if req.src.is_mcast() {
                return;
            }
        }
        let attrs: Vec<Attribute> = merged
            .into_iter()
            .filter_map(|(t, v)| Attribute::new(&t, v).ok())
            .collect();
        self.answer(req, Answer::Attrs(attrs));
    }

    /// An AttrRqst with an SPI (RFC 2608 §10.3): a full URL and no tag
    /// list, else AUTHENTICATION_FAILED; the registration's attribute list
    /// as registered with its block for the SPI.
    fn on_signed_attr_rqst(&mut self, now: Instant, req: &Req, r: &AttrRqst) {
        if !r.tags.is_empty() || !r.url.contains("://") {
            self.count("drop.mda.attr_rqst_auth_form");
            return self.error(req, ErrorCode::AuthenticationFailed);
        }
        self.count("mda.attr_rqst");
        let reg = self.store.iter().map(|(_, reg)| reg).find(|reg| {
            reg.alive(now)
                && reg.scopes.intersects(&r.scopes)
                && reg.url.as_str() == r.url.as_str()
                && reg.lang.same_language(&req.header.lang)
        });
        let signed = reg.and_then(|reg| {
            auth::block_of(&reg.attr_auths, &r.spi).map(|b| (reg.base_attrs.clone(), b.clone()))
        });
        let Some((attrs, block)) = signed else {
            if req.src.is_mcast() {
                return;
            }
            return self.reply(req, Body::AttrRply(AttrRply::default()));
        };
        let body = Body::AttrRply(AttrRply {
            error: ErrorCode::Ok,
            attrs,
            auths: list(vec![block]),
        });
        self.reply(req, body);
    }

    fn on_srv_type_rqst(&mut self, now: Instant, req: &Req, r: &SrvTypeRqst) {
        if !r.scopes.intersects(&self.cfg.scopes) {
            return self.error(req, ErrorCode::ScopeNotSupported);
        }
        self.count("mda.srv_type_rqst");
        let mut types: Vec<ServiceType> = Vec::new();
        for (_, reg) in self.store.iter() {
            if !reg.alive(now)
                || !reg.scopes.intersects(&r.scopes)
                || !r.naming_authority.admits(&reg.service_type)
            {
                continue;
            }
            if !types
                .iter()
                .any(|t| t.as_str().eq_ignore_ascii_case(reg.service_type.as_str()))
            {
                types.push(reg.service_type.clone());
            }
        }
        if types.is_empty() && req.src.is_mcast() {
            return;
        }
        self.answer(req, Answer::Types(types));
    }

    // ---- registrations ------------------------------------------------

    fn on_srv_reg(&mut self, now: Instant, req: &Req, r: SrvReg, fwd: Option<MeshFwd>) {
        if req.src.is_mcast() {
            self.count("drop.mda.mcast_registration");
            return;
        }
        if let Some(f) = &fwd {
            match f.fwd {
                FwdId::Fwded => return self.on_fwded_reg(now, req, r, f.clone()),
                FwdId::RqstFwd => {}
                FwdId::Unknown(_) => return self.nack(req, ErrorCode::ParseError, "bad_fwd_id"),
            }
        }
        if !r.scopes.is_subset_of(&self.cfg.scopes) || r.scopes.is_empty() {
            return self.nack(req, ErrorCode::ScopeNotSupported, "reg_scope");
        }
        if r.entry.lifetime == 0 {
            return self.nack(req, ErrorCode::InvalidRegistration, "reg_zero_lifetime");
        }
        let fresh = req.header.flags.fresh;
        // An incremental SrvReg of another type is INVALID_UPDATE below.
        if let Err(why) = check_url(&r.entry.url, fresh.then_some(&r.service_type)) {
            return self.nack(req, ErrorCode::InvalidRegistration, why);
        }
        // MeshFwd on an incremental SrvReg is our extension (docs/mda.md):
        // the update propagates with its own version timestamp.
        let version = fwd.as_ref().filter(|_| self.cfg.mesh).map(|f| f.version);
        let key = Key::new(&r.entry.url, &req.header.lang);
        let old = self.store.get(&key).cloned();
        let live_old = old.as_ref().filter(|o| o.alive(now));
        if let Err(why) = self
            .cfg
            .keys
            .check_reg(&r, fresh, live_old, self.clock.unix_secs(now))
        {
            return self.refuse(req, why);
        }
        let other_type = live_old.is_some_and(|o| {
            !o.service_type
                .as_str()
                .eq_ignore_ascii_case(r.service_type.as_str())
        });
        if fresh && other_type {
            // A live registration keeps its type: deregister it first.
            return self.nack(req, ErrorCode::InvalidRegistration, "reg_type_changed");
        }
        if let Some(o) = live_old {
            if self.cfg.min_refresh_s > 0
                && now < o.updated + Duration::from_secs(u64::from(self.cfg.min_refresh_s))
            {
                return self.nack(req, ErrorCode::RefreshRejected, "refresh_rejected");
            }
        }
        let expires = now + Duration::from_secs(u64::from(r.entry.lifetime));
        if !fresh {
            // Incremental (RFC 2608 §9.3): an update of the live registration.
            let Some(o) = live_old else {
                return self.nack(req, ErrorCode::InvalidUpdate, "incremental_unknown");
            };
            if !o
                .service_type
                .as_str()
                .eq_ignore_ascii_case(r.service_type.as_str())
            {
                return self.nack(req, ErrorCode::InvalidUpdate, "incremental_type");
            }
            if !(o.scopes.is_subset_of(&r.scopes) && r.scopes.is_subset_of(&o.scopes)) {
                return self.nack(req, ErrorCode::ScopeNotSupported, "incremental_scope");
            }
            let o = o.clone();
            let change = Change::Add(r.attrs);
            return match version {
                Some(v) => self.sa_update(now, req, key, o, change, r.entry.lifetime, v),
                None => {
                    if self.local_update(now, req, key, o, &change, Some(r.entry.lifetime)) {
                        self.count("mda.reg_incremental");
                    }
                }
            };
        }
        let mut reg = Reg::base(
            r.entry.url.clone(),
            req.header.lang.clone(),
            r.service_type.clone(),
            r.scopes.clone(),
            r.attrs.clone(),
            r.entry.lifetime,
            expires,
            now,
        );
        reg.url_auths = r.entry.auths.clone();
        reg.attr_auths = r.attr_auths.clone();
        reg.version = old.as_ref().map_or(0, |o| o.version);
        if old.is_none() && self.store.len() >= self.cfg.max_registrations {
            return self.nack(req, ErrorCode::DaBusyNow, "table_full");
        }
        if let Some(v) = version {
            if old.as_ref().is_some_and(|o| o.version >= v) {
                // Version resolution (RFC 3528 §4.2): an older or repeated
                // update changes nothing, but the SA still gets its ack.
                self.count("mda.stale_update");
                return self.ack(req, ErrorCode::Ok);
            }
            reg.version = v;
            reg.accept = Some(self.next_accept(now));
            // Newer incremental updates still apply on top of it.
            reg.updates = old.map(|o| o.updates).unwrap_or_default();
        }
        reg.settle();
        self.commit(key.clone(), reg);
        self.count("mda.registered");
        self.ack(req, ErrorCode::Ok);
        if version.is_some() {
            self.forward(now, &key, None);
        }
    }

    fn on_srv_dereg(&mut self, now: Instant, req: &Req, r: SrvDeReg, fwd: Option<MeshFwd>) {
        if req.src.is_mcast() {
            self.count("drop.mda.mcast_registration");
            return;
        }
        if let Some(f) = &fwd {
            match f.fwd {
                FwdId::Fwded => return self.on_fwded_dereg(now, req, r, f.clone()),
                FwdId::RqstFwd => {}
                FwdId::Unknown(_) => return self.nack(req, ErrorCode::ParseError, "bad_fwd_id"),
            }
        }
        if r.scopes.is_empty() || !r.scopes.is_subset_of(&self.cfg.scopes) {
            return self.nack(req, ErrorCode::ScopeNotSupported, "dereg_scope");
        }
        if check_url(&r.entry.url, None).is_err() {
            return self.nack(req, ErrorCode::InvalidRegistration, "dereg_bad_url");
        }
        let version = fwd.as_ref().filter(|_| self.cfg.mesh).map(|f| f.version);
        let key = Key::new(&r.entry.url, &req.header.lang);
        let old = self.store.get(&key).cloned();
        let live_old = old.as_ref().filter(|o| o.alive(now));
        if let Some(o) = live_old {
            if !(o.scopes.is_subset_of(&r.scopes) && r.scopes.is_subset_of(&o.scopes)) {
                return self.nack(req, ErrorCode::ScopeNotSupported, "dereg_scope_mismatch");
            }
        }
        if let Err(why) = self
            .cfg
            .keys
            .check_dereg(&r, live_old, self.clock.unix_secs(now))
        {
            return self.refuse(req, why);
        }
        if !r.tags.is_empty() {
            // Partial deregistration (RFC 2608 §10.6): drop the tagged attributes.
            let Some(o) = live_old else {
                return self.ack(req, ErrorCode::Ok);
            };
            if self.cfg.min_refresh_s > 0
                && now < o.updated + Duration::from_secs(u64::from(self.cfg.min_refresh_s))
            {
                return self.nack(req, ErrorCode::RefreshRejected, "refresh_rejected");
            }
            let o = o.clone();
            let lifetime = o.remaining(now);
            let change = Change::Remove(r.tags);
            return match version {
                Some(v) => self.sa_update(now, req, key, o, change, lifetime, v),
                None => {
                    if self.local_update(now, req, key, o, &change, None) {
                        self.count("mda.dereg_partial");
                    }
                }
            };
        }
        let Some(v) = version else {
            // Plain SLPv2: forget the service (a local tombstone, version kept).
            let Some(o) = live_old else {
                return self.ack(req, ErrorCode::Ok);
            };
            let mut reg = o.clone();
            reg.deleted = true;
            reg.accept = None;
            reg.base_attrs = AttrList::default();
            reg.url_auths = AuthBlocks::default();
            reg.attr_auths = AuthBlocks::default();
            reg.updates.clear();
            reg.settle();
            self.commit(key, reg);
            self.count("mda.deregistered");
            return self.ack(req, ErrorCode::Ok);
        };
        if old.as_ref().is_some_and(|o| o.version >= v) {
            self.count("mda.stale_update");
            return self.ack(req, ErrorCode::Ok);
        }
        if old.is_none() && self.store.len() >= self.cfg.max_registrations {
            return self.nack(req, ErrorCode::DaBusyNow, "table_full");
        }
        let mut tomb = self.tombstone(now, old.as_ref(), &r, &req.header.lang, v);
        tomb.accept = Some(self.next_accept(now));
        tomb.settle();
        self.commit(key.clone(), tomb);
        self.count("mda.deregistered");
        self.ack(req, ErrorCode::Ok);
        self.forward(now, &key, None);
    }

    /// An SA's incremental SrvReg or partial SrvDeReg with MeshFwd (our
    /// extension, docs/mda.md): installed as an [`Update`] of version `v`
    /// under a fresh accept ID and forwarded like a fresh SrvReg.
    #[allow(clippy::too_many_arguments)]
    fn sa_update(
        &mut self,
        now: Instant,
        req: &Req,
        key: Key,
        mut reg: Reg,
        change: Change,
        lifetime: u16,
        v: u64,
    ) {
        let mut update = Update {
            version: v,
            accept: AcceptId::default(),
            lifetime,
            expires: now + Duration::from_secs(u64::from(lifetime)),
            change,
        };
        if reg.version >= v || reg.updates.iter().any(|u| u.same(&update)) {
            // Older than the base, or a retransmission: nothing changes.
            self.count("mda.stale_update");
            return self.ack(req, ErrorCode::Ok);
        }
        update.accept = self.next_accept(now);
        let removal = matches!(update.change, Change::Remove(_));
        reg.updates.push(update.clone());
        reg.updated = now;
        reg.settle();
        self.commit(key.clone(), reg);
        self.count(if removal {
            "mda.dereg_partial"
        } else {
            "mda.reg_incremental"
        });
        self.ack(req, ErrorCode::Ok);
        self.forward(now, &key, Some(&update));
    }

    /// A plain SA's incremental SrvReg or partial SrvDeReg: applied to what
    /// the state shows, which becomes a local base (no accept ID, never
    /// propagated; its mesh updates are folded in). Whether it was applied.
    fn local_update(
        &mut self,
        now: Instant,
        req: &Req,
        key: Key,
        mut reg: Reg,
        change: &Change,
        lifetime: Option<u16>,
    ) -> bool {
        let attrs = match change {
            Change::Add(add) => merge(reg.attrs.attributes(), add),
            Change::Remove(tags) => reg
                .attrs
                .attributes()
                .iter()
                .filter(|a| !tags.matches(a.tag()))
                .cloned()
                .collect(),
        };
        let Ok(attrs) = AttrList::new(attrs) else {
            self.nack(req, ErrorCode::InvalidRegistration, "incremental_too_long");
            return false;
        };
        reg.base_attrs = attrs;
        if let Some(l) = lifetime {
            reg.base_lifetime = l;
            reg.base_expires = now + Duration::from_secs(u64::from(l));
        } else {
            reg.base_lifetime = reg.lifetime;
            reg.base_expires = reg.expires;
        }
        reg.updates.clear();
        reg.accept = None;
        reg.updated = now;
        reg.settle();
        self.commit(key, reg);
        self.ack(req, ErrorCode::Ok);
        true
    }

    /// A tombstone for `r`: it lives as long as the registration would have
    /// (or the SrvDeReg's lifetime, or 0xffff s, for an unknown one), and
    /// keeps the updates newer than `version`.
    fn tombstone(
        &self,
        now: Instant,
        old: Option<&Reg>,
        r: &SrvDeReg,
        lang: &LangTag,
        version: u64,
    ) -> Reg {
        let lifetime = match old.filter(|o| o.expires > now) {
            Some(o) => o.remaining(now),
            None if r.entry.lifetime > 0 => r.entry.lifetime,
            None => u16::MAX,
        };
        let service_type = old.map_or_else(
            || {
                slp::url::url_service_type(&r.entry.url)
                    .and_then(|t| ServiceType::parse(t).ok())
                    .unwrap_or_else(ServiceType::directory_agent)
            },
            |o| o.service_type.clone(),
        );
        let mut reg = Reg::base(
            r.entry.url.clone(),
            lang.clone(),
            service_type,
            r.scopes.clone(),
            AttrList::default(),
            lifetime,
            now + Duration::from_secs(u64::from(lifetime)),
            now,
        );
        reg.version = version;
        reg.deleted = true;
        reg.updates = old.map(|o| o.updates.clone()).unwrap_or_default();
        reg
    }

    fn on_fwded_reg(&mut self, now: Instant, req: &Req, r: SrvReg, f: MeshFwd) {
        if self.peer_of(req.src).is_none() || !self.cfg.mesh {
            self.count("drop.mda.fwded_not_from_peer");
            return;
        }
        self.note_summary(&f.accept);
        if !r.scopes.intersects(&self.cfg.scopes) || r.entry.lifetime == 0 {
            self.count("drop.mda.fwded_out_of_scope");
            return;
        }
        let key = Key::new(&r.entry.url, &req.header.lang);
        let old = self.store.get(&key).cloned();
        let expires = now + Duration::from_secs(u64::from(r.entry.lifetime));
        if !req.header.flags.fresh {
            let update = Update {
                version: f.version,
                accept: f.accept,
                lifetime: r.entry.lifetime,
                expires,
                change: Change::Add(r.attrs),
            };
            let pending = Reg::pending(
                r.entry.url,
                req.header.lang.clone(),
                r.service_type,
                r.scopes,
                now,
            );
            return self.install_update(key, old, pending, update);
        }
        if !self.admit_fwded(old.as_ref(), &f) {
            return;
        }
        let mut reg = Reg::base(
            r.entry.url,
            req.header.lang.clone(),
            r.service_type,
            r.scopes,
            r.attrs,
            r.entry.lifetime,
            expires,
            now,
        );
        reg.url_auths = r.entry.auths;
        reg.attr_auths = r.attr_auths;
        reg.version = f.version;
        reg.accept = Some(f.accept);
        reg.updates = old.map(|o| o.updates).unwrap_or_default();
        reg.settle();
        self.commit(key, reg);
        self.count("mda.fwded_installed");
    }

    /// Whether a forwarded (de)registration with `f` may replace `old`:
    /// not older than what we hold (counted by `resolve`), and room for a
    /// new URL.
    fn admit_fwded(&mut self, old: Option<&Reg>, f: &MeshFwd) -> bool {
        if self.resolve(old, f) == Apply::Stale {
            return false;
        }
        if old.is_none() && self.store.len() >= self.cfg.max_registrations {
            self.count("drop.mda.table_full");
            return false;
        }
        true
    }

    fn on_fwded_dereg(&mut self, now: Instant, req: &Req, r: SrvDeReg, f: MeshFwd) {
        if self.peer_of(req.src).is_none() || !self.cfg.mesh {
            self.count("drop.mda.fwded_not_from_peer");
            return;
        }
        self.note_summary(&f.accept);
        if !r.scopes.intersects(&self.cfg.scopes) {
            self.count("drop.mda.fwded_out_of_scope");
            return;
        }
        let key = Key::new(&r.entry.url, &req.header.lang);
        let old = self.store.get(&key).cloned();
        if !r.tags.is_empty() {
            // A partial deregistration carries the registration's remaining
            // lifetime, like every Fwded message.
            let lifetime = r.entry.lifetime.max(1);
            let update = Update {
                version: f.version,
                accept: f.accept,
                lifetime,
                expires: now + Duration::from_secs(u64::from(lifetime)),
                change: Change::Remove(r.tags.clone()),
            };
            let service_type = slp::url::url_service_type(&r.entry.url)
                .and_then(|t| ServiceType::parse(t).ok())
                .unwrap_or_else(ServiceType::directory_agent);
            let pending = Reg::pending(
                r.entry.url,
                req.header.lang.clone(),
                service_type,
                r.scopes,
                now,
            );
            return self.install_update(key, old, pending, update);
        }
        if !self.admit_fwded(old.as_ref(), &f) {
            return;
        }
        let mut tomb = self.tombstone(now, old.as_ref(), &r, &req.header.lang, f.version);
        if old.is_some() && r.entry.lifetime > 0 {
            tomb.base_lifetime = r.entry.lifetime;
            tomb.base_expires = now + Duration::from_secs(u64::from(r.entry.lifetime));
        }
        tomb.accept = Some(f.accept);
        tomb.settle();
        self.commit(key, tomb);
        self.count("mda.fwded_installed");
    }

    /// A Fwded incremental update: on top of the state under `key`, or of
    /// `pending` (a deleted state without base, shown once a base arrives)
    /// if there is none. Version resolution as for whole states: an update
    /// not newer than the base, or one already held, changes nothing.
    fn install_update(&mut self, key: Key, old: Option<Reg>, pending: Reg, update: Update) {
        let mut reg = match old {
            Some(o) => o,
            None => {
                if self.store.len() >= self.cfg.max_registrations {
                    self.count("drop.mda.table_full");
                    return;
                }
                let mut p = pending;
                p.deleted = true;
                p
            }
        };
        if reg.version >= update.version || reg.updates.iter().any(|u| u.same(&update)) {
            self.count("mda.stale_update");
            return;
        }
        reg.updates.push(update);
        reg.settle();
        self.commit(key, reg);
        self.count("mda.fwded_installed");
    }

    /// Version resolution (RFC 3528 §4.2): a mesh update installs only over
    /// an older version.
    fn resolve(&mut self, old: Option<&Reg>, f: &MeshFwd) -> Apply {
        if old.is_some_and(|o| o.version >= f.version) {
            self.count("mda.stale_update");
            return Apply::Stale;
        }
        Apply::Installed
    }

    fn commit(&mut self, key: Key, reg: Reg) {
        self.events
            .push_back(Event::Persist(Record::State(Box::new(StateRecord::of(
                &reg, self.clock,
            )))));
        self.store.put(key, reg);
    }

    /// A fresh accept ID: strictly after every earlier one, even if the
    /// clock stepped back (RFC 3528 §1.2, SPEC §4).
    fn next_accept(&mut self, now: Instant) -> AcceptId {
        let ts = self.clock.slp_us(now).max(self.accept_hwm + 1);
        self.accept_hwm = ts;
        let id = AcceptId {
            timestamp: ts,
            da_url: self.url_string(),
        };
        self.note_summary(&id);
        id
    }

    fn note_summary(&mut self, a: &AcceptId) {
        if a.timestamp == 0 || a.da_url.is_empty() {
            return;
        }
        let e = self
            .summary
            .entry(a.da_url.as_str().to_owned())
            .or_insert(0);
        *e = (*e).max(a.timestamp);
    }

    /// Direct forwarding (RFC 3528 §4.8): one hop, to every synced peer
    /// connection whose peer shares a scope with the registration; the
    /// state's base, or one of its incremental updates.
    fn forward(&mut self, now: Instant, key: &Key, update: Option<&Update>) {
        let Some(reg) = self.store.get(key) else {
            return;
        };
        let msg = match update {
            None => self.state_message(now, reg),
            Some(u) => self.update_message(now, reg, u),
        };
        let Some(msg) = msg else {
            return;
        };
        let bytes = msg.to_bytes();
        let targets: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| c.synced && !c.closing)
            .filter(|(_, c)| {
                c.peer
                    .as_ref()
                    .and_then(|u| self.peers.get(u))
                    .is_some_and(|p| p.scopes.intersects(&reg.scopes))
            })
            .map(|(id, _)| *id)
            .collect();
        for id in targets {
            self.transmits.push_back(Transmit::Tcp {
                conn: id,
                bytes: bytes.clone(),
            });
            self.count("mda.forwarded");
        }
    }

    /// A state's base as the Fwded SrvReg (with its auth blocks) or
    /// SrvDeReg that propagates it.
    fn state_message(&self, now: Instant, reg: &Reg) -> Option<Message> {
        let accept = reg.accept.clone()?;
        let life = reg.remaining(now).max(1);
        let mut header = Header::new(0, reg.lang.clone());
        let body = if reg.deleted {
            Body::SrvDeReg(SrvDeReg {
                scopes: reg.scopes.clone(),
                entry: UrlEntry::new(life, reg.url.clone()),
                tags: TagList::default(),
            })
        } else {
            header.flags.fresh = true;
            let mut entry = UrlEntry::new(life, reg.url.clone());
            entry.auths = reg.url_auths.clone();
            Body::SrvReg(SrvReg {
                entry,
                service_type: reg.service_type.clone(),
                scopes: reg.scopes.clone(),
                attrs: reg.base_attrs.clone(),
                attr_auths: reg.attr_auths.clone(),
            })
        };
        let ext = Extension::MeshFwd(MeshFwd {
            fwd: FwdId::Fwded,
            version: reg.version,
            accept,
        });
        Message::new(header, body, vec![ext]).ok()
    }

    /// An incremental update as the Fwded incremental SrvReg or partial
    /// SrvDeReg that propagates it (URL-entry lifetime: the update's
    /// remaining lifetime).
    fn update_message(&self, now: Instant, reg: &Reg, u: &Update) -> Option<Message> {
        let life = if u.expires > now {
            u16::try_from((u.expires - now).total_micros().div_ceil(1_000_000)).unwrap_or(u16::MAX)
        } else {
            1
        }
        .max(1);
        let header = Header::new(0, reg.lang.clone());
        let entry = UrlEntry::new(life, reg.url.clone());
        let body = match &u.change {
            Change::Add(attrs) => Body::SrvReg(SrvReg {
                entry,
                service_type: reg.service_type.clone(),
                scopes: reg.scopes.clone(),
                attrs: attrs.clone(),
                attr_auths: AuthBlocks::default(),
            }),
            Change::Remove(tags) => Body::SrvDeReg(SrvDeReg {
                scopes: reg.scopes.clone(),
                entry,
                tags: tags.clone(),
            }),
        };
        let ext = Extension::MeshFwd(MeshFwd {
            fwd: FwdId::Fwded,
            version: u.version,
            accept: u.accept.clone(),
        });
        Message::new(header, body, vec![ext]).ok()
    }

    // ---- mesh ---------------------------------------------------------

    fn on_anti_entropy(&mut self, now: Instant, req: &Req, r: &AntiEtrpRqst) {
        let Src::Tcp(conn) = req.src else {
            self.count("drop.mda.anti_entropy_over_udp");
            return;
        };
        let Some(peer) = self.peer_of(req.src) else {
            self.count("drop.mda.anti_entropy_not_peer");
            return self.ack(req, ErrorCode::MsgNotSupported);
        };
        let peer_scopes = self
            .peers
            .get(&peer)
            .map_or_else(ScopeList::default, |p| p.scopes.clone());
        let listed = |url: &str| {
            r.accept_ids
                .iter()
                .find(|a| a.da_url.as_str() == url)
                .map(|a| a.timestamp)
        };
        let wanted = |a: &AcceptId| match (listed(&a.da_url), r.kind) {
            (Some(t), _) => a.timestamp > t,
            (None, AntiEntropyType::Complete) => true,
            (None, _) => false,
        };
        // Every base and incremental update the peer lacks: each carries
        // its own accept ID.
        let mut ops: Vec<(&AcceptId, &Reg, Option<&Update>)> = Vec::new();
        for (_, reg) in self.store.iter() {
            if reg.expires <= now || !reg.scopes.intersects(&peer_scopes) {
                continue;
            }
            if let Some(a) = reg.accept.as_ref().filter(|a| wanted(a)) {
                ops.push((a, reg, None));
            }
            for u in reg.updates.iter().filter(|u| wanted(&u.accept)) {
                ops.push((&u.accept, reg, Some(u)));
            }
        }
        // RFC 3528 §4.7: increasing accept-ID order.
        ops.sort_by(|a, b| a.0.cmp(b.0).then(a.1.url.cmp(&b.1.url)));
        let msgs: Vec<Vec<u8>> = ops
            .iter()
            .filter_map(|(_, reg, u)| match u {
                None => self.state_message(now, reg),
                Some(u) => self.update_message(now, reg, u),
            })
            .map(|m| m.to_bytes())
            .collect();
        let n = msgs.len() as u64;
        for bytes in msgs {
            self.transmits.push_back(Transmit::Tcp { conn, bytes });
        }
        self.count_n("mda.anti_entropy_sent", n);
        self.count("mda.anti_entropy_answered");
        // The SrvAck closes it (RFC 3528 §4.9: MUST reply to an AntiEtrpRqst).
        self.ack(req, ErrorCode::Ok);
        if let Some(c) = self.conns.get_mut(&conn) {
            c.synced = true;
        }
    }

    fn on_da_advert(&mut self, now: Instant, req: &Req, a: DaAdvert) {
        if a.url.as_str() == self.cfg.url {
            return;
        }
        let on_conn = match req.src {
            Src::Tcp(c) => Some(c),
            Src::Udp { .. } => None,
        };
        let url = a.url.as_str().to_owned();
        // RFC 3528 §8: with peer keys, only authenticated DAAdverts count.
        let authentic = self.cfg.keys.check_advert(&a, self.clock.unix_secs(now));
        if a.boot_timestamp == 0 {
            if let Err(why) = authentic {
                self.count(why);
                return;
            }
            // RFC 3528 §3.5: the peer is going down.
            self.count("mda.peer_shutdown");
            self.peers.remove(&url);
            let ids: Vec<ConnId> = self
                .conns
                .iter()
                .filter(|(_, c)| c.peer.as_deref() == Some(url.as_str()))
                .map(|(id, _)| *id)
                .collect();
            for id in ids {
                self.close_conn(now, id);
            }
            return;
        }
        // A DAAdvert cut short over UDP (RFC 2608 §6.1) lost its attributes
        // and blocks: a static peer is asked again over TCP, where the whole
        // advert is exchanged.
        if let Src::Udp { from, .. } = req.src {
            let unverified = authentic.is_err() || req.header.flags.overflow;
            if unverified && self.cfg.mesh && self.cfg.peers.contains(&from.addr) {
                if let Err(why) = authentic {
                    self.count(why);
                }
                self.count("mda.advert_retry_tcp");
                self.connect_to(now, from.addr);
                return;
            }
        }
        let mesh_peer = self.cfg.mesh
            && a.attrs.is_mesh_enhanced()
            && a.scopes.intersects(&self.cfg.scopes)
            && a.error.is_ok();
        if !mesh_peer {
            self.count("mda.advert_ignored");
            return;
        }
        // Which connection is it on, and is it the connection's own peer?
        if let Some(conn) = on_conn {
            let Some(c) = self.conns.get(&conn) else {
                return;
            };
            if let Err(why) = authentic {
                let unidentified = c.peer.is_none();
                self.count(why);
                if unidentified {
                    // Not peered (RFC 3528 §8): the connection goes.
                    self.count("drop.mda.peer_unauthenticated");
                    self.close_conn(now, conn);
                }
                return;
            }
            match &c.peer {
                Some(p) if *p == url => {
                    if let Some(c) = self.conns.get_mut(&conn) {
                        c.timers.set(ConnTimer::Idle, now + self.cfg.timeout);
                    }
                    self.learn(now, &a, None);
                    self.count("mda.keepalive_heard");
                    return;
                }
                Some(_) => {
                    // A forwarded peer's DAAdvert (RFC 3528 §3.3).
                    self.count("mda.advert_forwarded_in");
                    self.learn(now, &a, None);
                    self.maybe_connect(now, &url);
                    return;
                }
                None => {}
            }
            let remote = c.remote.addr;
            // With peer keys, a signed advert must come from its own address:
            // a replayed one on another connection is refused.
            if self.cfg.keys.peer_required() && url_addr(&url) != Some(remote) {
                self.count("drop.mda.advert_auth_addr");
                self.count("drop.mda.peer_unauthenticated");
                self.close_conn(now, conn);
                return;
            }
            self.identify(now, conn, &a, remote);
            return;
        }
        if let Err(why) = authentic {
            self.count(why);
            return;
        }
        self.count("mda.advert_heard");
        self.learn(now, &a, None);
        self.maybe_connect(now, &url);
    }

    /// The first DAAdvert on a connection names its peer (RFC 3528 §3.2).
    fn identify(&mut self, now: Instant, conn: ConnId, a: &DaAdvert, remote: IpAddress) {
        let url = a.url.as_str().to_owned();
        let already = self.active_peers();
        if !already.contains(&url) && already.len() >= self.cfg.max_peers {
            self.count("drop.mda.peer_limit");
            self.close_conn(now, conn);
            return;
        }
        self.learn(now, a, Some(remote));
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        c.peer = Some(url.clone());
        c.timers.set(ConnTimer::Idle, now + self.cfg.timeout);
        c.timers.set(ConnTimer::Keepalive, now + self.cfg.keepalive);
        let initiated = c.initiated;
        if !initiated {
            // Our DAAdvert answers theirs on a connection they opened.
            let adv = self.own_advert(now, 0, LangTag::en());
            self.send_tcp(conn, &adv);
        }
        self.count("mda.peer_identified");
        if !already.contains(&url) {
            self.events.push_back(Event::PeerUp(url.clone()));
        }
        // Duplicate pair (RFC 3528 §3.2, SPEC §4): the side with the lower
        // address closes the connection it initiated.
        if !initiated && self.lower_than(remote) {
            let mine: Vec<ConnId> = self
                .conns
                .iter()
                .filter(|(id, c)| **id != conn && c.initiated && self.conn_is_to(c, &url, remote))
                .map(|(id, _)| *id)
                .collect();
            for id in mine {
                self.count("mda.duplicate_closed");
                self.close_conn(now, id);
            }
        }
        self.send_peer_adverts(now, conn, &url);
        self.send_anti_entropy_rqst(conn);
    }

    fn conn_is_to(&self, c: &Conn, url: &str, remote: IpAddress) -> bool {
        c.peer.as_deref() == Some(url) || (c.peer.is_none() && c.remote.addr == remote)
    }

    fn lower_than(&self, remote: IpAddress) -> bool {
        self.cfg
            .addrs
            .first()
            .is_some_and(|me| addr_key(*me) < addr_key(remote))
    }

    /// Tell the peer at `conn` about our other peers it shares scopes with
    /// (RFC 3528 §3.3): active peers, and accept DAs of states we hold.
    fn send_peer_adverts(&mut self, _now: Instant, conn: ConnId, to: &str) {
        let Some(target) = self.peers.get(to).map(|p| p.scopes.clone()) else {
            return;
        };
        let active = self.active_peers();
        let accept_das: Vec<String> = self.summary.keys().cloned().collect();
        let adverts: Vec<DaAdvert> = self
            .peers
            .iter()
            .filter(|(u, p)| {
                u.as_str() != to
                    && p.scopes.intersects(&target)
                    && (active.contains(u) || accept_das.contains(u))
            })
            .map(|(_, p)| p.advert.clone())
            .collect();
        for a in adverts {
            if let Ok(m) = Message::new(Header::new(0, LangTag::en()), Body::DaAdvert(a), vec![]) {
                self.send_tcp(conn, &m);
                self.count("mda.advert_forwarded_out");
            }
        }
    }

    fn send_anti_entropy_rqst(&mut self, conn: ConnId) {
        let ids: Vec<AcceptId> = self
            .summary
            .iter()
            .filter_map(|(u, t)| {
                Some(AcceptId {
                    timestamp: *t,
                    da_url: SlpString::new(u.clone()).ok()?,
                })
            })
            .collect();
        let xid = self.next_xid();
        let body = Body::AntiEtrpRqst(AntiEtrpRqst {
            kind: AntiEntropyType::Complete,
            accept_ids: List::new(ids).unwrap_or_default(),
        });
        if let Ok(m) = Message::new(Header::new(xid, LangTag::en()), body, vec![]) {
            self.send_tcp(conn, &m);
            self.count("mda.anti_entropy_requested");
        }
    }

    /// Remember a peer from its DAAdvert.
    fn learn(&mut self, now: Instant, a: &DaAdvert, remote: Option<IpAddress>) {
        let url = a.url.as_str().to_owned();
        let addr = remote.or_else(|| url_addr(&url));
        let Some(addr) = addr else {
            self.count("drop.mda.advert_bad_url");
            return;
        };
        let is_new = !self.peers.contains_key(&url);
        if is_new && self.peers.len() >= self.cfg.max_peers.saturating_mul(4) {
            self.count("drop.mda.peer_table_full");
            return;
        }
        let next_retry = self
            .peers
            .get(&url)
            .map_or(now + self.cfg.peer_retry, |p| p.next_retry);
        self.peers.insert(
            url,
            Peer {
                addr,
                scopes: a.scopes.clone(),
                advert: a.clone(),
                next_retry,
            },
        );
        // A static peer is known now; retries go through the peer table.
        self.static_retry.retain(|(s, _)| *s != addr);
    }

    /// Connect to a known peer unless a connection to it exists.
    fn maybe_connect(&mut self, now: Instant, url: &str) {
        let Some(p) = self.peers.get(url) else {
            return;
        };
        let addr = p.addr;
        if self.conns.values().any(|c| c.peer.as_deref() == Some(url)) {
            return;
        }
        self.connect_to(now, addr);
    }

    /// Open a peering connection to `addr` unless we have initiated one.
    fn connect_to(&mut self, now: Instant, addr: IpAddress) {
        let exists = self.conns.values().any(|c| {
            (c.initiated && c.remote.addr == addr)
                || c.peer
                    .as_ref()
                    .and_then(|u| self.peers.get(u))
                    .is_some_and(|p| p.addr == addr)
        });
        if exists {
            return;
        }
        if self.active_peers().len() >= self.cfg.max_peers {
            self.count("drop.mda.peer_limit");
            return;
        }
        if self.conns.len() >= self.cfg.max_connections {
            self.count("drop.mda.conn_limit");
            return;
        }
        let id = self.alloc_conn();
        let to = IpEndpoint::new(addr, slp::PORT);
        let conn = self.new_conn(now, to, true);
        self.conns.insert(id, conn);
        self.events.push_back(Event::Connect { conn: id, to });
        self.count("mda.connect");
    }

    /// Ask unpeered known peers (static or learned) for their DAAdvert.
    fn retry_peers(&mut self, now: Instant) {
        let active = self.active_peers();
        let mut asks: Vec<IpAddress> = Vec::new();
        for (addr, at) in &mut self.static_retry {
            if now >= *at {
                *at = now + self.cfg.peer_retry;
                asks.push(*addr);
            }
        }
        for (url, p) in &mut self.peers {
            if now >= p.next_retry {
                p.next_retry = now + self.cfg.peer_retry;
                if !active.contains(url) {
                    asks.push(p.addr);
                }
            }
        }
        for addr in asks {
            let xid = self.next_xid();
            let body = Body::SrvRqst(SrvRqst {
                pr_list: SlpString::default(),
                service_type: ServiceType::directory_agent(),
                scopes: self.cfg.scopes.clone(),
                predicate: slp::Predicate::default(),
                spi: SlpString::default(),
            });
            if let Ok(m) = Message::new(Header::new(xid, LangTag::en()), body, vec![]) {
                self.transmits.push_back(Transmit::Udp {
                    to: IpEndpoint::new(addr, slp::PORT),
                    bytes: m.to_bytes(),
                    reply: false,
                });
                self.count("mda.peer_probe");
            }
        }
    }

    fn close_conn(&mut self, now: Instant, id: ConnId) {
        let Some(c) = self.conns.remove(&id) else {
            return;
        };
        self.events.push_back(Event::Close(id));
        self.after_close(now, c);
    }

    fn reset_conn(&mut self, now: Instant, id: ConnId) {
        let Some(c) = self.conns.remove(&id) else {
            return;
        };
        self.transmits
            .retain(|t| !matches!(t, Transmit::Tcp { conn, .. } if *conn == id));
        self.events.push_back(Event::Reset(id));
        self.after_close(now, c);
    }

    fn after_close(&mut self, now: Instant, c: Conn) {
        let Some(url) = c.peer else {
            return;
        };
        let others: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, o)| o.peer.as_deref() == Some(url.as_str()))
            .map(|(id, _)| *id)
            .collect();
        if others.is_empty() {
            self.count("mda.peer_down");
            self.events.push_back(Event::PeerDown(url.clone()));
            if let Some(p) = self.peers.get_mut(&url) {
                p.next_retry = now + self.cfg.peer_retry;
            }
        } else {
            // What went over the closed twin may be lost: sync again.
            for id in others {
                self.send_anti_entropy_rqst(id);
            }
        }
    }

    // ---- replies and adverts -----------------------------------------

    fn advert_attrs(&self) -> AttrList {
        let mut attrs = self.cfg.attrs.attributes().to_vec();
        if self.cfg.mesh && !self.cfg.attrs.is_mesh_enhanced() {
            if let Ok(k) = Attribute::keyword(slp::attr::MESH_ENHANCED) {
                attrs.push(k);
            }
        }
        if self.cfg.min_refresh_s > 0 {
            let v = i32::try_from(self.cfg.min_refresh_s).unwrap_or(i32::MAX);
            if let Ok(a) =
                Attribute::new(slp::attr::MIN_REFRESH_INTERVAL, vec![AttrValue::Integer(v)])
            {
                attrs.push(a);
            }
        }
        AttrList::new(attrs).unwrap_or_default()
    }

    /// Our DAAdvert at `now`, with the blocks `sign` asks for (RFC 2608
    /// §8.5, §9.2.1): its SPI list is every SPI we can verify.
    fn own_advert_body(&self, now: Instant, sign: Sign<'_>) -> Body {
        let mut a = DaAdvert {
            error: ErrorCode::Ok,
            boot_timestamp: self.boot_ts,
            url: self.url_string(),
            scopes: self.cfg.scopes.clone(),
            attrs: self.advert_attrs(),
            spi_list: SlpString::new(self.cfg.keys.spi_list()).unwrap_or_default(),
            auths: List::default(),
        };
        // Valid through a beat and two peer timeouts: a stored advert
        // forwarded to other peers (RFC 3528 §3.3) is refreshed by every
        // keepalive, and a multicast one by every beat.
        let validity = self.cfg.beat.max(self.cfg.timeout * 2).secs();
        let expires = self
            .clock
            .unix_secs(now)
            .saturating_add(u32::try_from(validity).unwrap_or(u32::MAX));
        let blocks: Vec<_> = match sign {
            Sign::None => Vec::new(),
            Sign::All => self
                .cfg
                .keys
                .signers()
                .map(|s| s.sign(&Signed::da_advert(&a), expires))
                .collect(),
            Sign::Spi(spi) => self
                .cfg
                .keys
                .signer(spi)
                .map(|s| s.sign(&Signed::da_advert(&a), expires))
                .into_iter()
                .collect(),
        };
        a.auths = list(blocks);
        Body::DaAdvert(a)
    }

    /// Our DAAdvert with every block we can make: for peers and multicast.
    fn own_advert(&self, now: Instant, xid: u16, lang: LangTag) -> Message {
        let body = self.own_advert_body(now, Sign::All);
        Message::new(Header::new(xid, lang), body.clone(), vec![])
            .or_else(|_| Message::new(Header::new(xid, LangTag::en()), body, vec![]))
            .unwrap_or_else(|_| {
                // NOTE(unwrap): an empty SrvAck always encodes.
                Message::new(Header::default(), Body::SrvAck(SrvAck::default()), vec![]).unwrap()
            })
    }

    fn send_unsolicited_advert(&mut self, now: Instant) {
        let bytes = self.own_advert(now, 0, LangTag::en()).to_bytes();
        let mut dests: Vec<IpEndpoint> = Vec::new();
        if self
            .cfg
            .addrs
            .iter()
            .any(|a| matches!(a, IpAddress::Ipv4(_)))
        {
            let [a, b, c, d] = slp::MCAST_V4;
            dests.push(IpEndpoint::new(
                Ipv4Address::new(a, b, c, d).into(),
                slp::PORT,
            ));
        }
        if self
            .cfg
            .addrs
            .iter()
            .any(|a| matches!(a, IpAddress::Ipv6(_)))
        {
            dests.push(IpEndpoint::new(MCAST_V6_DA.into(), slp::PORT));
        }
        if self.cfg.mesh {
            for p in &self.cfg.peers {
                dests.push(IpEndpoint::new(*p, slp::PORT));
            }
        }
        for to in dests {
            self.transmits.push_back(Transmit::Udp {
                to,
                bytes: bytes.clone(),
                reply: false,
            });
        }
        self.count("mda.advert_sent");
    }

    fn error(&mut self, req: &Req, code: ErrorCode) {
        self.count(error_counter(code));
        if req.src.is_mcast() {
            return; // RFC 2608 §7: errors only for unicast requests.
        }
        let body = match req.function {
            FunctionId::SrvRqst => Body::SrvRply(SrvRply {
                error: code,
                ..SrvRply::default()
            }),
            FunctionId::AttrRqst => Body::AttrRply(AttrRply {
                error: code,
                ..AttrRply::default()
            }),
            FunctionId::SrvTypeRqst => Body::SrvTypeRply(SrvTypeRply {
                error: code,
                ..SrvTypeRply::default()
            }),
            _ => Body::SrvAck(SrvAck { error: code }),
        };
        self.reply(req, body);
    }

    fn ack(&mut self, req: &Req, code: ErrorCode) {
        self.reply(req, Body::SrvAck(SrvAck { error: code }));
    }

    /// Refuse an SA's update for authentication (RFC 2608 §7).
    fn refuse(&mut self, req: &Req, why: Refusal) {
        self.count(why.counter());
        self.ack(req, why.code());
    }

    fn nack(&mut self, req: &Req, code: ErrorCode, reason: &'static str) {
        self.count(match reason {
            "reg_scope" => "drop.mda.reg_scope",
            "reg_zero_lifetime" => "drop.mda.reg_zero_lifetime",
            "incremental_too_long" => "drop.mda.incremental_too_long",
            "incremental_unknown" => "drop.mda.incremental_unknown",
            "incremental_type" => "drop.mda.incremental_type",
            "incremental_scope" => "drop.mda.incremental_scope",
            "refresh_rejected" => "drop.mda.refresh_rejected",
            "table_full" => "drop.mda.table_full",
            "dereg_scope" => "drop.mda.dereg_scope",
            "dereg_scope_mismatch" => "drop.mda.dereg_scope_mismatch",
            "bad_fwd_id" => "drop.mda.bad_fwd_id",
            "reg_empty_url" => "drop.mda.reg_empty_url",
            "reg_url_no_scheme" => "drop.mda.reg_url_no_scheme",
            "reg_type_mismatch" => "drop.mda.reg_type_mismatch",
            "reg_type_changed" => "drop.mda.reg_type_changed",
            "dereg_bad_url" => "drop.mda.dereg_bad_url",
            _ => "drop.mda.refused",
        });
        self.ack(req, code);
    }

    /// Send a reply that is not a list answer (an error, an ack, a
    /// DAAdvert) to `req`'s source. Over UDP: whole up to the path's
    /// payload, and above request × `amplification_factor` only while the
    /// destination's reply budget lasts (CVE-2023-29552); else cut with
    /// OVERFLOW (RFC 2608 §7).
    fn reply(&mut self, req: &Req, body: Body) {
        let mut header = Header::new(req.header.xid, req.header.lang.clone());
        let Src::Udp { from, .. } = req.src else {
            if let Src::Tcp(conn) = req.src {
                if let Ok(m) = Message::new(header, body, vec![]) {
                    self.send_tcp(conn, &m);
                }
            }
            return;
        };
        let Ok(mut m) = Message::new(header.clone(), body, vec![]) else {
            self.count("drop.mda.reply_unencodable");
            return;
        };
        let len = m.buffer_len().min(self.udp_payload(from.addr));
        let budget = self.udp_budget(req, from, len);
        if m.buffer_len() > budget {
            header.flags.overflow = true;
            let (_, body, _) = m.into_parts();
            let Some(cut) = truncate(header.clone(), body, budget) else {
                self.count("drop.mda.reply_over_budget");
                return;
            };
            self.count("mda.reply_truncated");
            m = cut;
        }
        self.transmits.push_back(Transmit::Udp {
            to: from,
            bytes: m.to_bytes(),
            reply: true,
        });
    }

    /// The most octets a UDP reply of `len` to `from` may have: the path's
    /// payload if the reply is no longer than request ×
    /// `amplification_factor` or the destination's budget has it; else
    /// request × `amplification_factor` (counted).
    fn udp_budget(&mut self, req: &Req, from: IpEndpoint, len: usize) -> usize {
        let payload = self.udp_payload(from.addr);
        let plain = req.len.saturating_mul(self.cfg.amplification_factor.max(1));
        let len = len.min(reply::MAX_CUT);
        if len <= plain || self.budgets.take(self.now, from.addr, len) {
            return payload.max(len);
        }
        self.count("mda.reply_budget_cut");
        plain.min(payload)
    }

    fn udp_payload(&self, to: IpAddress) -> usize {
        match to {
            IpAddress::Ipv4(_) => self.cfg.udp_payload_v4,
            IpAddress::Ipv6(_) => self.cfg.udp_payload_v6,
        }
    }

    /// Send a list answer to `req`'s source, cut to whole items: to what
    /// the wire format carries (over TCP too: more than 65,535 URL entries,
    /// or a list over 65,535 octets), and over UDP to the path's payload
    /// (past libslp's MTU, so that it moves to TCP) and the destination's
    /// reply budget. A cut answer has OVERFLOW set.
    fn answer(&mut self, req: &Req, answer: Answer) {
        let mut header = Header::new(req.header.xid, req.header.lang.clone());
        let lens = answer.item_lens();
        let mut prefix = Vec::with_capacity(lens.len() + 1);
        prefix.push(header.buffer_len() + answer.fixed_len());
        for l in &lens {
            let last = prefix[prefix.len() - 1];
            prefix.push(last + l);
        }
        let total = |k: usize| prefix[k];
        let all = answer.len();
        let format = answer.format_max(&lens);
        if format < all {
            self.count("mda.reply_format_cut");
        }
        let n = match req.src {
            Src::Tcp(_) => format,
            Src::Udp { from, .. } => {
                let payload = self.udp_payload(from.addr);
                let k = reply::udp_items(total, format, payload, self.cfg.max_datagram);
                let budget = self.udp_budget(req, from, total(k));
                if total(k) > budget {
                    reply::fit(total, k, budget)
                } else {
                    k
                }
            }
        };
        if n < all {
            header.flags.overflow = true;
            if n < format {
                self.count("mda.reply_truncated");
            }
        }
        let Ok(m) = Message::new(header, answer.body(n), vec![]) else {
            self.count("drop.mda.reply_unencodable");
            return;
        };
        match req.src {
            Src::Tcp(conn) => self.send_tcp(conn, &m),
            Src::Udp { from, .. } => self.transmits.push_back(Transmit::Udp {
                to: from,
                bytes: m.to_bytes(),
                reply: true,
            }),
        }
    }

    fn send_tcp(&mut self, conn: ConnId, m: &Message) {
        self.transmits.push_back(Transmit::Tcp {
            conn,
            bytes: m.to_bytes(),
        });
    }

    // ---- small helpers ------------------------------------------------

    fn peer_of(&self, src: Src) -> Option<String> {
        match src {
            Src::Tcp(c) => self.conns.get(&c).and_then(|c| c.peer.clone()),
            Src::Udp { .. } => None,
        }
    }

    fn in_pr_list(&self, pr: &str) -> bool {
        pr.split(',').any(|a| {
            a.trim()
                .parse::<IpAddr>()
                .is_ok_and(|ip| self.cfg.addrs.contains(&IpAddress::from(ip)))
        })
    }

    fn url_string(&self) -> SlpString {
        SlpString::new(self.cfg.url.clone()).unwrap_or_default()
    }

    /// A connection to or from `remote`, not yet established, idle timer
    /// running.
    fn new_conn(&self, now: Instant, remote: IpEndpoint, initiated: bool) -> Conn {
        let mut timers = TimerTable::default();
        timers.set(ConnTimer::Idle, now + self.cfg.timeout);
        Conn {
            remote,
            initiated,
            established: false,
            peer: None,
            timers,
            rx: Vec::new(),
            synced: false,
            closing: false,
        }
    }

    fn alloc_conn(&mut self) -> ConnId {
        let id = ConnId(self.next_conn);
        self.next_conn += 1;
        id
    }

    fn next_xid(&mut self) -> u16 {
        self.xid = self.xid.wrapping_add(1);
        if self.xid == 0 {
            self.xid = 1;
        }
        self.xid
    }

    fn count(&mut self, name: &'static str) {
        self.count_n(name, 1);
    }

    fn count_n(&mut self, name: &'static str, n: u64) {
        if n == 0 {
            return;
        }
        *self.counters.entry(name).or_insert(0) += n;
        *self.fresh_counts.entry(name).or_insert(0) += n;
    }
}

/// Which blocks our DAAdvert carries.
#[derive(Debug, Clone, Copy)]
enum Sign<'a> {
    /// None (a SrvRqst without SPI).
    None,
    /// One per signing key (peers, multicast).
    All,
    /// The one of this SPI (a SrvRqst with it).
    Spi(&'a str),
}

/// The request being answered.
#[derive(Debug)]
struct Req {
    src: Src,
    function: FunctionId,
    header: Header,
    len: usize,
}

/// A reply that is not a list answer cut to `budget` octets: a DAAdvert
/// loses its attributes and blocks; anything else fits or is dropped.
fn truncate(header: Header, body: Body, budget: usize) -> Option<Message> {
    let fits = |b: Body| {
        Message::new(header.clone(), b, vec![])
            .ok()
            .filter(|m| m.buffer_len() <= budget)
    };
    match body {
        Body::DaAdvert(mut a) => {
            // Without its attributes a block no longer verifies: both go.
            a.attrs = AttrList::default();
            a.auths = List::default();
            fits(Body::DaAdvert(a))
        }
        other => fits(other),
    }
}

/// Whether `url` is a URL an SA may (de)register: not empty, with a scheme
/// (RFC 2608 §4), and for a `service:` URL of `service_type` (RFC 2608
/// §8.3: the registration's type is the URL's). The counter's reason.
fn check_url(url: &str, service_type: Option<&ServiceType>) -> Result<(), &'static str> {
    if url.is_empty() {
        return Err("reg_empty_url");
    }
    let Some(of_url) = slp::url::url_service_type(url) else {
        return Err("reg_url_no_scheme");
    };
    let service_url = of_url
        .get(..8)
        .is_some_and(|p| p.eq_ignore_ascii_case("service:"));
    match service_type {
        Some(t) if service_url && !of_url.eq_ignore_ascii_case(t.as_str()) => {
            Err("reg_type_mismatch")
        }
        _ => Ok(()),
    }
}

fn list<T, const MAX: usize>(mut v: Vec<T>) -> List<T, MAX> {
    v.truncate(MAX);
    // NOTE(unwrap): truncated to MAX just above.
    List::new(v).unwrap()
}

/// The host of a `service:directory-agent://<host>[:port]` URL.
fn url_addr(url: &str) -> Option<IpAddress> {
    let rest = url.split_once("://")?.1;
    let host = rest.split('/').next()?;
    let host = if let Some(h) = host.strip_prefix('[') {
        h.split(']').next()?
    } else {
        match host.rsplit_once(':') {
            Some((h, p)) if !h.contains(':') && p.bytes().all(|b| b.is_ascii_digit()) => h,
            _ => host,
        }
    };
    host.parse::<IpAddr>().ok().map(IpAddress::from)
}

/// Addresses ordered numerically, IPv4 below IPv6.
fn addr_key(a: IpAddress) -> (u8, [u8; 16]) {
    match a {
        IpAddress::Ipv4(v4) => {
            let mut b = [0; 16];
            b[..4].copy_from_slice(&v4.octets());
            (4, b)
        }
        IpAddress::Ipv6(v6) => (6, v6.octets()),
    }
}

fn splitmix(s: &mut u64) -> u64 {
    *s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *s;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn parse_reason(e: slp::ParseError) -> &'static str {
    use slp::ParseError as P;
    match e {
        P::Truncated => "drop.mda.parse_truncated",
        P::TrailingBytes => "drop.mda.parse_trailing",
        P::BadLength | P::Length { .. } => "drop.mda.parse_length",
        P::Version(_) => "drop.mda.parse_version",
        P::Function(_) => "drop.mda.parse_function",
        P::ReservedFlags(_) => "drop.mda.parse_flags",
        P::LanguageTag => "drop.mda.parse_lang",
        P::Utf8 => "drop.mda.parse_utf8",
        P::Syntax(_) => "drop.mda.parse_syntax",
        P::InvalidRegistration(_) => "drop.mda.invalid_registration",
        P::ExtensionOffset => "drop.mda.parse_extension",
        P::OptionNotUnderstood(_) => "drop.mda.option_not_understood",
    }
}

fn error_counter(code: ErrorCode) -> &'static str {
    match code {
        ErrorCode::ScopeNotSupported => "drop.mda.scope_not_supported",
        ErrorCode::LanguageNotSupported => "drop.mda.language_not_supported",
        ErrorCode::AuthenticationUnknown => "drop.mda.authentication_unknown",
        ErrorCode::ParseError => "drop.mda.parse_error",
        _ => "drop.mda.error_reply",
    }
}
