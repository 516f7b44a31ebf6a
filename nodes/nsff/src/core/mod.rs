//! The nSFF's HTTP proxy, sans-IO: [`Proxy`] holds no socket, reads no
//! clock and touches no file.
//!
//! ```text
//!  client ──TCP :80──▶ ingress nSFF ──GFF transport (txn)──▶ egress nSFF ──TCP──▶ SF
//!         ◀──────────                ◀──── RESPONSE ────────              ◀──────
//! ```
//!
//! Call order (the driver, `crate::driver`, does this):
//! 1. [`Proxy::new`] with the node file's `[nsff]` and a [`Persist`] for
//!    `state_file`; [`Proxy::set_mac`] and [`Proxy::set_local_port`] once
//!    the ports are known;
//! 2. [`Proxy::accept`] for every connection a listening pool accepted;
//! 3. [`Proxy::handle_gff`] for every GFF frame for us;
//! 4. on every wakeup [`Proxy::handle_timeout`] (the timers due), then the
//!    driver's accepts and REST, then [`Proxy::poll`], which pumps every
//!    connection through [`Conns`] and puts what goes to the fabric in the
//!    outbox; [`Proxy::poll_timeout`] says when it is next due.
//!
//! The rooms, each owning its state:
//! - [`client`]: client connections, the request pump (read, head, route
//!   in [`route`], relay, write);
//! - [`sf`]: exchanges with local SFs, idle connections kept for reuse;
//! - [`egress`]: transactions opened toward us, each one request;
//! - [`passthrough`]: TLS passthrough sessions, both sides (over the byte
//!   relay in [`relay`]);
//! - [`local`]: the local SF table, registrations at the NR, health, REST
//!   operations, the state file behind [`Persist`];
//! - [`refusal`]: every answer the nSFF gives instead of its SF's — the one
//!   map from failure to HTTP status or TLS alert;
//! - [`io`]: what the core asks of the driver's connections ([`Conns`]) and
//!   the IDs it names things by.
//!
//! Errors to the client: unknown name 502, NR silent 504, bad `Host` 400,
//! SFC misdirected 421, tables full 503, SF unreachable or broken 502,
//! transaction failed 504; the body says why, each is counted.

#[cfg(test)]
mod auth_tests;
pub mod client;
pub mod egress;
pub mod io;
pub mod local;
#[doc(hidden)]
pub mod model;
pub mod passthrough;
pub mod refusal;
mod relay;
pub mod route;
pub mod sf;

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Value};
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::EthernetAddress;
use svcroute_stack::http::Limits;
use svcroute_stack::shim::{Direction, Outbox};
use svcroute_stack::stats::Counters;
use svcroute_stack::timer::TimerTable;
use svcroute_stack::wire::auth::{self, Keyring, DEFAULT_MAX_SENDERS, DEFAULT_WINDOW, SENDER_NR};
use svcroute_stack::wire::gff::{self, MessageType, PathId};
use svcroute_stack::wire::nr::{self, NsffId, ALL_NSFFS};
use svcroute_stack::wire::nsff::Txn;

use crate::cache::{CacheEvent, CacheStats, PathCache, Unresolved};
use crate::classic::Nnlm;
use crate::config::{ConfigError, NsffConfig};
use crate::rest::{Op, RestError};
use crate::sfc::Classifier;
use crate::transport::{Endpoint, Event, Stats, TxnStats};

use self::client::{Client, Up};
use self::egress::Egress;
pub use self::io::{ClientId, ConnId, ConnectError, Conns, Dial, JobId, PoolId, TcpState};
pub use self::local::Persist;
use self::local::{LocalSf, LocalSfs};
use self::passthrough::{TlsSession, TlsStage};
use self::refusal::{Refusal, TlsRefusal};
use self::sf::SfConns;

/// Bytes buffered per direction of one proxied exchange before reading stops.
pub(crate) const BUF_HIGH: usize = 256 * 1024;
/// Bytes read per socket call.
pub(crate) const CHUNK: usize = 16 * 1024;

svcroute_stack::timers! {
    /// The proxy's own timers (per-connection deadlines live with the
    /// connections, the transport's and the cache's in their cores).
    pub enum Timer {
        /// The next round of registrations at the NR.
        Register,
    }
}

/// How the nSFF speaks on the fabric: its ID, its MAC and port there, the
/// pathID to the NR, and its fabric keys (`[[nsff.key]]`) with the clock
/// its sequence numbers come from.
#[derive(Debug)]
pub(crate) struct Fabric {
    pub(crate) me: NsffId,
    pub(crate) mac: EthernetAddress,
    pub(crate) port: usize,
    pub(crate) nr_path: PathId,
    /// Keys, sequence numbers and the replay guard (a cell: registrations
    /// are sent from places that only see `&Fabric`).
    pub(crate) ring: RefCell<Keyring>,
    /// The latest `now` seen, µs.
    pub(crate) clock_us: Cell<u64>,
}

impl Fabric {
    fn tick(&self, now: Instant) {
        let t = now.total_micros().max(0) as u64;
        self.clock_us.set(self.clock_us.get().max(t));
    }

    /// Seal an NR message (registration, path request) when keyed.
    pub(crate) fn seal_nr(&self, msg_type: MessageType, msg: &mut Vec<u8>) {
        nr::seal(
            &mut self.ring.borrow_mut(),
            self.clock_us.get(),
            msg_type,
            msg,
        );
    }

    /// The frame of a transport packet, sealed when keyed.
    fn transport_frame(&self, path: PathId, msg_type: MessageType, payload: &[u8]) -> Vec<u8> {
        let mut ring = self.ring.borrow_mut();
        if !ring.is_keyed() {
            return gff_frame(self.mac, path, msg_type, payload);
        }
        let mut p = payload.to_vec();
        ring.seal_trailer(self.clock_us.get(), u8::from(msg_type), &mut p);
        gff_frame(self.mac, path, msg_type, &p)
    }
}

/// The nSFF's HTTP proxy; see the module documentation.
#[derive(Debug)]
pub struct Proxy {
    pub(crate) fabric: Fabric,
    link_in: u8,
    /// `client_idle_timeout_s`.
    pub(crate) client_idle: Duration,
    /// `sfc_required`.
    pub(crate) sfc_required: bool,
    /// `sf_port` exists (set by the driver at start).
    pub(crate) has_sf_port: bool,
    /// Classifier rules (`[[nsff.classifier]]`).
    pub(crate) classifier: Classifier,
    /// The nNLM, for HTTP SFC decisions.
    pub(crate) nnlm: Nnlm,
    pub(crate) ep: Endpoint,
    pub(crate) cache: PathCache<u64>,
    pub(crate) local: LocalSfs,
    pub(crate) sf: SfConns,
    /// HTTP client connections, by client ID.
    clients: BTreeMap<ClientId, Client>,
    /// TLS passthrough sessions (client side), by client ID (the same IDs
    /// as `clients`: both wait on the cache).
    pub(crate) tls: BTreeMap<ClientId, TlsSession>,
    next_client: u64,
    pub(crate) egress: BTreeMap<Txn, Egress>,
    pub(crate) txn_client: BTreeMap<Txn, ClientId>,
    /// Transactions whose response a client already has in full by its
    /// HTTP framing while their end marker is still on the way: drained
    /// here so that they close, without holding up the client's next
    /// request.
    pub(crate) detached: BTreeSet<Txn>,
    pub(crate) timers: TimerTable<Timer>,
}

impl Proxy {
    /// A proxy for `cfg`; REST SFs are kept through `persist`.
    pub fn new(cfg: &NsffConfig, persist: Option<Box<dyn Persist>>) -> Result<Self, ConfigError> {
        cfg.validate()?;
        let me = cfg.id()?;
        let local = LocalSfs::new(cfg, persist)?;
        let keys = cfg.key_pairs()?;
        let mut transport = cfg.transport.clone();
        if !keys.is_empty() {
            // Room for the seal on every transport packet.
            transport.mtu = transport.mtu.saturating_sub(auth::TRAILER_LEN);
        }
        let mut ep = Endpoint::new(me, transport, cfg.first_txn)?;
        // The egress says when a request head is complete: unfinished ones
        // time out and are evicted first under pressure (issue 12).
        ep.track_heads(true);
        let classifier = cfg.classifier()?;
        let cache = PathCache::new(me, cfg.nr_path(), cfg.cache.clone(), None)?;
        let mut timers = TimerTable::default();
        // Register at the first poll.
        timers.set(Timer::Register, Instant::ZERO);
        Ok(Self {
            fabric: Fabric {
                me,
                mac: EthernetAddress([0x02, 0, 0, 0, 0, 0]),
                port: cfg.fabric_port,
                nr_path: cfg.nr_path(),
                ring: RefCell::new(
                    Keyring::new(keys, u16::from(me.value()), cfg.epoch_us).with_replay_limits(
                        cfg.replay_max_age_s,
                        DEFAULT_WINDOW,
                        DEFAULT_MAX_SENDERS,
                    ),
                ),
                clock_us: Cell::new(0),
            },
            link_in: cfg.link_in,
            client_idle: Duration::from_secs(cfg.client_idle_timeout_s),
            sfc_required: cfg.sfc_required,
            has_sf_port: true,
            classifier,
            nnlm: cfg.nnlm()?,
            ep,
            cache,
            local,
            sf: SfConns::new(
                Duration::from_secs(cfg.sf_idle_timeout_s),
                (cfg.sf_keepalive_s > 0).then(|| Duration::from_secs(cfg.sf_keepalive_s)),
            ),
            clients: BTreeMap::new(),
            tls: BTreeMap::new(),
            next_client: 1,
            egress: BTreeMap::new(),
            txn_client: BTreeMap::new(),
            detached: BTreeSet::new(),
            timers,
        })
    }

    /// The fabric port's MAC (the source of our GFF frames).
    pub fn set_mac(&mut self, mac: EthernetAddress) {
        self.fabric.mac = mac;
    }

    /// The first local port of connections from `sf_port` (fresh 4-tuples
    /// after a restart, RFC 6056), and whether that port exists.
    pub fn set_local_port(&mut self, port: u16, exists: bool) {
        self.sf.next_local_port = port;
        self.has_sf_port = exists;
    }

    /// The transport endpoint (counters, for tests).
    pub fn endpoint(&self) -> &Endpoint {
        &self.ep
    }

    /// The path cache (for tests).
    pub fn cache(&self) -> &PathCache<u64> {
        &self.cache
    }

    /// Whether a GFF frame's pathID is for us (holds our `link_in` bit).
    pub fn is_for_us(&self, path: &PathId) -> bool {
        path.bit(self.link_in)
    }

    /// A connection a pool accepted: an HTTP client, or a TLS passthrough
    /// session when `tls`.
    pub fn accept(&mut self, now: Instant, conn: ConnId, pool: PoolId, tls: bool) -> ClientId {
        let id = ClientId(self.next_client);
        self.next_client += 1;
        if tls {
            self.tls.insert(id, TlsSession::new(now, conn, pool));
        } else {
            self.clients.insert(id, Client::new(now, conn, pool));
        }
        id
    }

    /// Run the timers due at `now` (the registration round, the
    /// transport's and the cache's); a spurious call does nothing.
    pub fn handle_timeout(&mut self, now: Instant, out: &mut Outbox, stats: &mut Counters) -> bool {
        self.fabric.tick(now);
        self.local.count_restored(stats);
        let mut any = false;
        while let Some(t) = self.timers.expire(now) {
            match t {
                Timer::Register => {
                    self.local
                        .register(now, &self.fabric, &mut self.timers, out, stats);
                    any = true;
                }
            }
        }
        if self.ep.poll_timeout().is_some_and(|t| t <= now) {
            self.ep.handle_timeout(now);
        }
        if self.cache.poll_timeout().is_some_and(|t| t <= now) {
            self.cache.handle_timeout(now);
        }
        any
    }

    /// Health checks, then work on every connection until nothing moves
    /// (at most 8 rounds): transport and cache events, client connections,
    /// TLS sessions, egress transactions, health evidence, fabric output.
    /// Whether anything happened.
    pub fn poll(
        &mut self,
        now: Instant,
        io: &mut impl Conns,
        out: &mut Outbox,
        stats: &mut Counters,
    ) -> bool {
        self.fabric.tick(now);
        let mut drop_idle = Vec::new();
        let mut any = if self.has_sf_port {
            self.local.health_checks(
                now,
                io,
                &mut self.sf.next_local_port,
                &self.fabric,
                out,
                stats,
                &mut drop_idle,
            )
        } else {
            false
        };
        self.drop_idle(now, io, stats, &mut drop_idle);
        for _ in 0..8 {
            let mut round = self.events(now, io, stats);
            let ids: Vec<ClientId> = self.clients.keys().copied().collect();
            for id in ids {
                // Most held keep-alive connections have nothing to do:
                // leave them where they are (1,000 of them cost nSFF1 two
                // thirds of its request rate when each was pumped).
                if self
                    .clients
                    .get(&id)
                    .is_some_and(|c| c.quiet(now, self.client_idle, io))
                {
                    continue;
                }
                let Some(mut c) = self.clients.remove(&id) else {
                    continue;
                };
                let (a, alive) = self.pump_client(now, io, stats, id, &mut c);
                round |= a;
                if alive {
                    self.clients.insert(id, c);
                } else {
                    self.drop_client(now, io, stats, c);
                    round = true;
                }
            }
            let ids: Vec<ClientId> = self.tls.keys().copied().collect();
            for id in ids {
                let Some(mut t) = self.tls.remove(&id) else {
                    continue;
                };
                let (a, alive) = self.pump_tls(now, io, stats, id, &mut t);
                round |= a;
                if alive {
                    self.tls.insert(id, t);
                } else {
                    self.drop_tls(now, io, stats, t);
                    round = true;
                }
            }
            let txns: Vec<Txn> = self.egress.keys().copied().collect();
            for txn in txns {
                let Some(mut e) = self.egress.remove(&txn) else {
                    continue;
                };
                round |= self.pump_egress(now, io, stats, txn, &mut e);
                self.egress.insert(txn, e);
            }
            self.local
                .apply_evidence(now, &self.fabric, out, stats, &mut drop_idle);
            self.drop_idle(now, io, stats, &mut drop_idle);
            round |= self.flush(out, stats);
            if self.has_sf_port {
                self.sf.sweep(now, io, stats);
                io.sweep(now);
            }
            any |= round;
            if !round {
                break;
            }
        }
        any
    }

    fn drop_idle(
        &mut self,
        now: Instant,
        io: &mut impl Conns,
        stats: &mut Counters,
        targets: &mut Vec<(smoltcp::wire::IpAddress, u16)>,
    ) {
        for t in targets.drain(..) {
            if self.has_sf_port {
                self.sf.drop_idle(now, io, stats, t, true);
            }
        }
    }

    /// When [`Proxy::poll`] is next due: the registration round, the
    /// transport's and the cache's timers, the next health probe, and a
    /// look at client idle limits once a second while clients exist.
    pub fn poll_timeout(&self, now: Instant) -> Option<Instant> {
        let clients = (!self.clients.is_empty() || !self.tls.is_empty())
            .then(|| now + Duration::from_secs(1));
        [
            self.timers.get(Timer::Register),
            self.ep.poll_timeout(),
            self.cache.poll_timeout(),
            self.local.poll_timeout(),
            clients,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// A GFF packet for us (its pathID holds our `link_in` bit).
    pub fn handle_gff(
        &mut self,
        now: Instant,
        stats: &mut Counters,
        msg_type: MessageType,
        path: PathId,
        payload: &[u8],
    ) {
        self.fabric.tick(now);
        let clock = self.fabric.clock_us.get();
        match msg_type {
            MessageType::TransportData | MessageType::TransportNack => {
                let mut ring = self.fabric.ring.borrow_mut();
                let payload = match ring.unseal_trailer(clock, u8::from(msg_type), payload) {
                    Ok(p) => p,
                    Err(r) => {
                        stats.drop(&format!("nsff.transport_{}", r.suffix()));
                        return;
                    }
                };
                drop(ring);
                if self.ep.handle_packet(now, path, msg_type, payload).is_err() {
                    stats.bump("nsff.transport_rejected");
                }
            }
            MessageType::PathResponse | MessageType::PathUpdate => {
                let mut ring = self.fabric.ring.borrow_mut();
                let sealed = match nr::authenticate(&ring, msg_type, payload) {
                    Ok(s) => s,
                    Err(r) => {
                        stats.drop(&format!("nsff.nr_{}", r.suffix()));
                        return;
                    }
                };
                if let Some((sender, seq)) = sealed {
                    if sender != SENDER_NR {
                        stats.drop("nsff.nr_not_from_nr");
                        return;
                    }
                    if let Err(r) = ring.fresh(clock, sender, seq) {
                        stats.drop(&format!("nsff.nr_{}", r.suffix()));
                        return;
                    }
                }
                drop(ring);
                match nr::Repr::parse(msg_type, payload) {
                    Ok(nr::Repr::PathResponse(r)) => {
                        stats.bump("nsff.path_responses");
                        self.cache.handle_response(&r);
                    }
                    Ok(nr::Repr::PathUpdate(u)) => {
                        stats.bump("nsff.path_updates");
                        let n = self.cache.handle_update(&u);
                        stats.add("nsff.cache_flushed", n as u64);
                        // ALL NODES is an nSFF ID: in a list of link IDs
                        // 255 is just a link.
                        if u.kind == nr::UpdateKind::NsffIds
                            && u.ids.as_slice().contains(&ALL_NSFFS)
                        {
                            // The NR (re)started: register again now and
                            // put the configured paths back.
                            self.timers.set(Timer::Register, now);
                            if self.cache.prepopulate().is_err() {
                                stats.bump("nsff.prepopulate_failed");
                            }
                        }
                    }
                    _ => stats.drop("nsff.nr_malformed"),
                }
            }
            MessageType::LinkHello => stats.bump("nsff.hellos_ignored"),
            _ => stats.drop("nsff.gff_unexpected_type"),
        }
    }

    /// The transport's frames onto the fabric (after a GFF frame in).
    pub fn flush_transport(&mut self, out: &mut Outbox) {
        while let Some(t) = self.ep.poll_transmit() {
            out.inject(
                self.fabric.port,
                Direction::ToWire,
                self.fabric.transport_frame(t.path, t.msg_type, &t.payload),
            );
        }
    }

    /// Transport and cache output onto the fabric.
    fn flush(&mut self, out: &mut Outbox, stats: &mut Counters) -> bool {
        let mut any = false;
        while let Some(t) = self.ep.poll_transmit() {
            out.inject(
                self.fabric.port,
                Direction::ToWire,
                self.fabric.transport_frame(t.path, t.msg_type, &t.payload),
            );
            any = true;
        }
        while let Some((path, ty, mut payload)) = self.cache.poll_transmit() {
            self.fabric.seal_nr(ty, &mut payload);
            out.inject(
                self.fabric.port,
                Direction::ToWire,
                gff_frame(self.fabric.mac, path, ty, &payload),
            );
            stats.bump("nsff.path_requests_sent");
            any = true;
        }
        any
    }

    /// Transport and cache events: transactions opened toward us (egress),
    /// closed and failed; names resolved or not for waiting clients.
    fn events(&mut self, now: Instant, io: &mut impl Conns, stats: &mut Counters) -> bool {
        let mut any = false;
        while let Some(ev) = self.ep.poll_event() {
            any = true;
            match ev {
                Event::Opened { txn, .. } => {
                    stats.bump("nsff.txns_accepted");
                    self.egress.insert(txn, Egress::new());
                }
                Event::Closed { txn } => {
                    stats.bump("nsff.txns_closed");
                    if let Some(e) = self.egress.remove(&txn) {
                        if let Some(j) = e.job {
                            self.sf.remove(now, io, j);
                        }
                        if let Some(b) = e.tls.and_then(|p| p.b) {
                            self.release_end(now, io, b, false);
                        }
                    }
                }
                Event::Readable { txn } | Event::Finished { txn }
                    if self.detached.contains(&txn) =>
                {
                    self.drain_detached(now, stats, txn);
                }
                Event::Failed { txn, reason } => {
                    stats.bump(&format!("nsff.txns_failed_{}", reason.as_str()));
                    self.detached.remove(&txn);
                    if let Some(e) = self.egress.remove(&txn) {
                        if let Some(j) = e.job {
                            self.sf.remove(now, io, j);
                        }
                        if let Some(b) = e.tls.and_then(|p| p.b) {
                            stats.bump("nsff.egress_tls_lost");
                            self.release_end(now, io, b, true);
                        }
                    }
                }
                _ => {}
            }
        }
        while let Some(ev) = self.cache.poll_event() {
            any = true;
            match ev {
                CacheEvent::Resolved { route, waiters, .. } => {
                    for id in waiters.into_iter().map(ClientId) {
                        if let Some(mut t) = self.tls.remove(&id) {
                            if matches!(t.stage, TlsStage::Resolving(_)) {
                                self.open_tls(now, io, stats, &mut t, route);
                            }
                            self.tls.insert(id, t);
                            continue;
                        }
                        let Some(mut c) = self.clients.remove(&id) else {
                            continue;
                        };
                        if matches!(c.up, Up::Resolving) {
                            self.open(now, io, stats, id, &mut c, route);
                        }
                        self.clients.insert(id, c);
                    }
                }
                CacheEvent::Failed {
                    reason, waiters, ..
                } => {
                    let (why, counter) = match reason {
                        Unresolved::NotFound => (Refusal::UnknownName, "nsff.unknown_name"),
                        Unresolved::Timeout => (Refusal::NrTimeout, "nsff.nr_timeout"),
                    };
                    for id in waiters.into_iter().map(ClientId) {
                        if let Some(mut t) = self.tls.remove(&id) {
                            if matches!(t.stage, TlsStage::Resolving(_)) {
                                let (counter, why) = match reason {
                                    Unresolved::NotFound => {
                                        ("nsff.tls_unknown_name", TlsRefusal::UnknownName)
                                    }
                                    Unresolved::Timeout => {
                                        ("nsff.tls_nr_timeout", TlsRefusal::NrTimeout)
                                    }
                                };
                                stats.bump(counter);
                                self.refuse_tls(now, io, &mut t, why);
                            }
                            self.tls.insert(id, t);
                            continue;
                        }
                        stats.bump(counter);
                        let Some(mut c) = self.clients.remove(&id) else {
                            continue;
                        };
                        if matches!(c.up, Up::Resolving) {
                            self.refuse_client(now, io, &mut c, &why);
                        }
                        self.clients.insert(id, c);
                    }
                }
            }
        }
        any
    }

    /// Carry out one REST operation on the SF table (`sf_rest_port`); a
    /// removed SF lands in `removed` for [`Proxy::forget_sfs`].
    pub(crate) fn apply_rest(
        &mut self,
        now: Instant,
        op: Op,
        out: &mut Outbox,
        stats: &mut Counters,
        removed: &mut Vec<LocalSf>,
    ) -> Result<(u16, Value), RestError> {
        self.local
            .apply_rest(now, op, &self.fabric, &mut self.timers, out, stats, removed)
    }

    /// Let go of removed SFs' sockets: their probes, their idle
    /// connections. Exchanges in progress finish on their own connections.
    pub(crate) fn forget_sfs(
        &mut self,
        now: Instant,
        removed: Vec<LocalSf>,
        io: &mut impl Conns,
        stats: &mut Counters,
    ) {
        for sf in removed {
            if !self.has_sf_port {
                continue;
            }
            let target = LocalSfs::forget(sf, io);
            self.sf.drop_idle(now, io, stats, target, false);
        }
    }

    /// `ctl <node> cache|txns|sfs|tls`: the core's part of the node's
    /// control commands (`None`: not one of them).
    pub fn control(&self, cmd: &str, cfg: &NsffConfig) -> Option<Value> {
        Some(match cmd {
            "cache" => json!({
                "entries": self.cache.len(),
                "pending": self.cache.pending(),
                "stats": cache_json(self.cache.stats()),
            }),
            "txns" => json!({
                "live": self.ep.len(),
                "egress": self.egress.len(),
                "ingress": self.txn_client.len(),
                "stats": endpoint_json(self.ep.stats()),
                "totals": txn_json(&self.ep.totals()),
            }),
            "sfs" => json!({
                "nsff_id": self.fabric.me.value(),
                "sfs": self.local.sfs.iter().map(LocalSf::json).collect::<Vec<Value>>(),
                "max_sfs": cfg.max_sfs,
                "sf_rest_port": cfg.sf_rest_port,
                "tls_sessions": self.tls.len(),
                "clients": self.clients.len(),
                "sf_jobs": self.sf.jobs.len(),
            }),
            "tls" => self.tls_control(cfg.https_port),
            _ => return None,
        })
    }
}

/// Decoder limits of the proxy: heads are bounded, bodies are not. The
/// nSFF streams every body through and never holds one whole, so the
/// default 16 MiB body cap would only refuse large transfers (413 for a
/// request, 502 for a response).
pub(crate) fn streaming() -> Limits {
    Limits {
        max_body_bytes: u64::MAX,
        ..Limits::default()
    }
}

/// An Ethernet (broadcast) + IPv6 + GFF frame from `src` over `path`.
pub(crate) fn gff_frame(
    src: EthernetAddress,
    path: PathId,
    msg_type: MessageType,
    payload: &[u8],
) -> Vec<u8> {
    let bcast = EthernetAddress::BROADCAST;
    gff::ethernet_frame(bcast, src, path, msg_type, gff::HOP_LIMIT, payload)
}

fn cache_json(c: &CacheStats) -> Value {
    json!({
        "hits": c.hits, "misses": c.misses, "requests": c.requests, "retries": c.retries,
        "resolved": c.resolved, "not_found": c.not_found, "timeouts": c.timeouts,
        "evicted": c.evicted, "flushed": c.flushed, "updates": c.updates,
        "refused": c.refused, "unmatched": c.unmatched,
    })
}

fn txn_json(t: &TxnStats) -> Value {
    json!({
        "data_out": t.data_out, "retransmits": t.retransmits,
        "rto_retransmits": t.rto_retransmits, "rtos": t.rtos, "data_in": t.data_in,
        "duplicates": t.duplicates, "acks_out": t.acks_out, "acks_in": t.acks_in,
        "nacks_out": t.nacks_out, "nacks_in": t.nacks_in, "bytes_out": t.bytes_out,
        "bytes_in": t.bytes_in, "cwnd_grows": t.cwnd_grows, "cwnd_cuts": t.cwnd_cuts,
    })
}

fn endpoint_json(e: &Stats) -> Value {
    json!({
        "opened": e.opened, "accepted": e.accepted, "refused": e.refused,
        "completed": e.completed, "failed": e.failed, "bad_checksum": e.bad_checksum,
        "malformed": e.malformed, "unknown_txn": e.unknown_txn, "late_opens": e.late_opens,
        "out_of_window": e.out_of_window, "stale_acks": e.stale_acks,
        "nack_suppressed": e.nack_suppressed, "evicted": e.evicted,
        "head_timeouts": e.head_timeouts,
    })
}
