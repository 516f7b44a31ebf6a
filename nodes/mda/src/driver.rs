//! The MDA on the node's own smoltcp stack: a thin [`Role`] that feeds
//! [`core::Mda`](crate::core::Mda) from a UDP socket and TCP sockets on port
//! 427 and executes what it hands back (STYLE.md 6).
//!
//! Per poll: accept new connections (a listener pool: smoltcp has no
//! `accept`), notice outbound connections coming up or failing, read UDP
//! datagrams and TCP frames (framed with [`slp::frame_len`], bounded per
//! connection), run due timers, then drain the core: **events first** —
//! every [`Event::Persist`] goes through the [`Persist`] hook before any
//! transmit queued after it — then transmits. A persist failure makes the
//! driver fail stop: it sends nothing more and reports not ready.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::rc::Rc;

use serde_json::{json, Value};
use smoltcp::iface::SocketHandle;
use smoltcp::socket::{tcp, udp};
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{IpAddress, IpListenEndpoint, Ipv4Address};
use svcroute_stack::listen::{ListenConfig, ListenPool};
use svcroute_stack::runtime::{Context, ControlReply, FrameContext, Role};
use svcroute_stack::shim::Verdict;
use svcroute_stack::wire::slp::{self, AttrList, ScopeList};

pub use crate::config::{ConfigError, MdaConfig};
use crate::core::{self, ConnId, Event, Record, Transmit};

/// How long the probe socket may hold an unsendable datagram (its peer's
/// address does not resolve) before it is flushed.
const PROBE_STUCK: Duration = Duration::from_secs(3);

/// Where accepted updates become durable before their SrvAck goes out.
pub trait Persist {
    /// Make `record` durable (fsync) before returning.
    fn persist(&mut self, record: &Record) -> io::Result<()>;

    /// Make every record of `records` durable, in order, before returning:
    /// one sync for the lot where the store can (the driver hands over all
    /// the updates of one poll before it sends their acknowledgements).
    fn persist_batch(&mut self, records: &[Record]) -> io::Result<()> {
        records.iter().try_for_each(|r| self.persist(r))
    }

    /// Whether the store would like to be compacted (its log grew long).
    fn wants_compaction(&self) -> bool {
        false
    }

    /// Replace everything persisted so far by `snapshot`, the whole current
    /// state (durably, before returning).
    fn compact(&mut self, _snapshot: &[Record]) -> io::Result<()> {
        Ok(())
    }
}

/// An in-memory [`Persist`] for tests: the records, shared.
#[derive(Debug, Clone, Default)]
pub struct MemStore(pub Rc<RefCell<Vec<Record>>>);

impl Persist for MemStore {
    fn persist(&mut self, record: &Record) -> io::Result<()> {
        self.0.borrow_mut().push(record.clone());
        Ok(())
    }
}

#[derive(Debug)]
struct ConnState {
    handle: SocketHandle,
    tx: VecDeque<u8>,
    outbound: bool,
    established: bool,
    close_when_sent: bool,
}

/// The `mda` role.
pub struct Mda {
    name: String,
    cfg: MdaConfig,
    scopes: ScopeList,
    attrs: AttrList,
    peers: Vec<IpAddress>,
    wall_us_at_zero: u64,
    records: Vec<Record>,
    persist: Box<dyn Persist>,
    core: Option<core::Mda>,
    udp: Option<SocketHandle>,
    /// Sends what the MDA originates (and reads the answers to probes).
    probe: Option<SocketHandle>,
    listen: ListenPool,
    conns: BTreeMap<ConnId, ConnState>,
    closing: Vec<SocketHandle>,
    next_port: u16,
    failed: bool,
    down: bool,
    multicast_joined: bool,
    /// Since when the probe socket has held an unsent datagram.
    probe_stuck_since: Option<Instant>,
    /// SYNs to port 427 seen since the last poll.
    syns: usize,
}

impl Mda {
    /// An MDA named `name` that replays `records` (its log) at start.
    /// `wall_us_at_zero` is the SLP time (µs since 1900-01-01 UTC) at
    /// `Instant::ZERO` of the node's clock: see [`wall_us_at_zero_now`].
    pub fn new(
        name: &str,
        cfg: MdaConfig,
        persist: Box<dyn Persist>,
        records: Vec<Record>,
        wall_us_at_zero: u64,
    ) -> Result<Self, ConfigError> {
        let scopes =
            ScopeList::parse(&cfg.scopes).map_err(|_| ConfigError::Scopes(cfg.scopes.clone()))?;
        let attrs =
            AttrList::parse(&cfg.attrs).map_err(|_| ConfigError::Attrs(cfg.attrs.clone()))?;
        let peers = cfg
            .peers
            .iter()
            .map(|p| {
                p.parse::<std::net::IpAddr>()
                    .map(IpAddress::from)
                    .map_err(|_| ConfigError::Peer(p.clone()))
            })
            .collect::<Result<_, _>>()?;
        let mut seed = cfg.seed;
        if seed == 0 {
            seed = name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
            });
        }
        Ok(Self {
            name: name.to_owned(),
            next_port: 49_152,
            cfg: MdaConfig { seed, ..cfg },
            scopes,
            attrs,
            peers,
            wall_us_at_zero,
            records,
            persist,
            core: None,
            udp: None,
            probe: None,
            listen: ListenPool::new(
                slp::PORT,
                ListenConfig {
                    listeners: cfg.listeners.max(1),
                    max_connections: cfg.max_connections,
                    rx_buffer: cfg.tcp_buffer,
                    tx_buffer: cfg.tcp_buffer,
                    // As new_tcp: smoltcp gives up on unacknowledged data.
                    timeout: Duration::from_secs(cfg.timeout_s.max(1)),
                },
                "mda.connection_limit",
            ),
            conns: BTreeMap::new(),
            closing: Vec::new(),
            failed: false,
            down: false,
            multicast_joined: false,
            probe_stuck_since: None,
            syns: 0,
        })
    }

    /// The core, once started.
    pub const fn core(&self) -> Option<&core::Mda> {
        self.core.as_ref()
    }

    /// Whether the IPv4/IPv6 SLP multicast groups were joined.
    pub const fn multicast_joined(&self) -> bool {
        self.multicast_joined
    }

    /// Simulate a crash (tests): from now on the node neither receives nor
    /// sends anything and its role does nothing.
    pub fn crash(&mut self) {
        self.down = true;
    }

    fn core_config(&self, cx: &Context<'_>) -> core::Config {
        let addrs: Vec<IpAddress> = cx
            .ports
            .first()
            .map(|p| p.iface.ip_addrs().iter().map(|c| c.address()).collect())
            .unwrap_or_default();
        let url = self.cfg.url.clone().unwrap_or_else(|| match addrs.first() {
            Some(IpAddress::Ipv6(a)) => format!("service:directory-agent://[{a}]"),
            Some(a) => format!("service:directory-agent://{a}"),
            None => "service:directory-agent://0.0.0.0".into(),
        });
        let c = &self.cfg;
        core::Config {
            url,
            addrs,
            scopes: self.scopes.clone(),
            attrs: self.attrs.clone(),
            mesh: c.mesh,
            peers: self.peers.clone(),
            keepalive: Duration::from_secs(c.keepalive_s),
            timeout: Duration::from_secs(c.timeout_s),
            beat: Duration::from_secs(c.beat_s),
            start_wait: Duration::from_millis(c.start_wait_ms),
            peer_retry: Duration::from_secs(c.peer_retry_s),
            max_registrations: c.max_registrations,
            max_peers: c.max_peers,
            max_connections: c.max_connections,
            amplification_factor: c.amplification_factor,
            max_datagram: slp::MAX_DATAGRAM,
            reply_budget: c.reply_budget,
            reply_budget_per_s: c.reply_budget_per_s,
            reply_budget_addrs: c.reply_budget_addrs,
            max_frame: c.max_frame,
            frame_timeout: Duration::from_millis(c.frame_timeout_ms.max(1)),
            // An Ethernet path of MTU 1500.
            udp_payload_v4: 1500 - 28,
            udp_payload_v6: 1500 - 48,
            min_refresh_s: c.min_refresh_s,
            wall_us_at_zero: self.wall_us_at_zero,
            seed: c.seed,
            keys: core::Keys {
                verify: c.keys.clone(),
                sign: c.sign_keys.clone(),
            },
        }
    }

    fn arm_listeners(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(port) = cx.ports.first_mut() else {
            return false;
        };
        let Some(core) = self.core.as_mut() else {
            return false;
        };
        let mut any = false;
        let syns = std::mem::take(&mut self.syns);
        let fresh = self.listen.accept(&mut port.sockets, cx.stats);
        // smoltcp resets a SYN that finds no listener: at the connection
        // limit, every SYN beyond the listeners armed is a refused
        // connection.
        let refused = syns.saturating_sub(self.listen.listening());
        if refused > 0 && self.listen.active() + self.listen.listening() >= self.cfg.max_connections
        {
            cx.stats.add("drop.mda.conn_limit", refused as u64);
        }
        for h in fresh {
            let remote = port.sockets.get::<tcp::Socket>(h).remote_endpoint();
            any = true;
            let id = remote.and_then(|r| core.tcp_accepted(cx.now, r));
            match id {
                Some(id) => {
                    self.conns.insert(
                        id,
                        ConnState {
                            handle: h,
                            tx: VecDeque::new(),
                            outbound: false,
                            established: true,
                            close_when_sent: false,
                        },
                    );
                }
                None => {
                    port.sockets.get_mut::<tcp::Socket>(h).abort();
                    self.closing.push(h);
                    self.listen.release();
                }
            }
        }
        any
    }

    /// Datagrams to port 427, and the answers to our probes (DAAdverts sent
    /// back to the probe socket's port).
    fn read_udp(&mut self, cx: &mut Context<'_>) -> bool {
        let (Some(port), Some(core)) = (cx.ports.first_mut(), self.core.as_mut()) else {
            return false;
        };
        let mut any = false;
        for h in [self.udp, self.probe].into_iter().flatten() {
            let sock = port.sockets.get_mut::<udp::Socket>(h);
            for _ in 0..256 {
                match sock.recv() {
                    Ok((data, meta)) => {
                        let mcast = meta.local_address.is_some_and(|a| a.is_multicast());
                        core.handle_udp(cx.now, meta.endpoint, data, mcast);
                        any = true;
                    }
                    Err(udp::RecvError::Truncated) => cx.stats.drop("mda.udp_truncated"),
                    Err(udp::RecvError::Exhausted) => break,
                }
            }
        }
        any
    }

    fn read_tcp(&mut self, cx: &mut Context<'_>) -> bool {
        let (Some(port), Some(core)) = (cx.ports.first_mut(), self.core.as_mut()) else {
            return false;
        };
        let mut any = false;
        let mut gone = Vec::new();
        for (id, c) in &mut self.conns {
            let sock = port.sockets.get_mut::<tcp::Socket>(c.handle);
            if c.outbound && !c.established {
                match sock.state() {
                    tcp::State::Established => {
                        c.established = true;
                        core.tcp_established(cx.now, *id);
                        any = true;
                    }
                    tcp::State::SynSent => continue,
                    _ => {
                        gone.push(*id);
                        continue;
                    }
                }
            }
            // The core frames the stream (bounded by `max_frame`, with a
            // deadline per frame); here only octets move.
            while sock.can_recv() {
                let got = sock.recv(|b| (b.len(), b.to_vec()));
                match got {
                    Ok(v) if !v.is_empty() => {
                        core.tcp_data(cx.now, *id, &v);
                        any = true;
                    }
                    _ => break,
                }
            }
            let ended = !sock.is_open()
                || (!sock.may_recv()
                    && !matches!(sock.state(), tcp::State::SynReceived | tcp::State::SynSent));
            if ended {
                gone.push(*id);
            }
        }
        for id in gone {
            if let Some(c) = self.conns.remove(&id) {
                if !c.outbound {
                    self.listen.release();
                }
                let sock = port.sockets.get_mut::<tcp::Socket>(c.handle);
                sock.close();
                self.closing.push(c.handle);
                core.tcp_closed(cx.now, id);
                any = true;
            }
        }
        any
    }

    /// Events first (persist before acks), then transmits.
    fn drain(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(core) = self.core.as_mut() else {
            return false;
        };
        let mut any = false;
        let mut batch = Vec::new();
        while let Some(e) = core.poll_event() {
            any = true;
            match e {
                Event::Persist(r) => {
                    if !self.failed {
                        batch.push(r);
                    }
                }
                Event::Connect { conn, to } => {
                    // A mesh opens to several peers at once: resolve each
                    // without smoltcp's one-per-second limit.
                    cx.resolve(0, to.addr);
                    let Some(port) = cx.ports.first_mut() else {
                        continue;
                    };
                    let mut s = new_tcp(&self.cfg);
                    self.next_port = if self.next_port >= 65_000 {
                        49_152
                    } else {
                        self.next_port + 1
                    };
                    let local = IpListenEndpoint {
                        addr: None,
                        port: self.next_port,
                    };
                    if s.connect(port.iface.context(), to, local).is_err() {
                        cx.stats.drop("mda.connect_failed");
                        core.tcp_closed(cx.now, conn);
                        continue;
                    }
                    let handle = port.sockets.add(s);
                    self.conns.insert(
                        conn,
                        ConnState {
                            handle,
                            tx: VecDeque::new(),
                            outbound: true,
                            established: false,
                            close_when_sent: false,
                        },
                    );
                }
                Event::Close(conn) => {
                    if let Some(c) = self.conns.get_mut(&conn) {
                        c.close_when_sent = true;
                    }
                }
                Event::Reset(conn) => {
                    let (Some(c), Some(port)) = (self.conns.remove(&conn), cx.ports.first_mut())
                    else {
                        continue;
                    };
                    if !c.outbound {
                        self.listen.release();
                    }
                    port.sockets.get_mut::<tcp::Socket>(c.handle).abort();
                    self.closing.push(c.handle);
                }
                Event::PeerUp(u) => log::info!("{}: peer up {u}", self.name),
                Event::PeerDown(u) => log::info!("{}: peer down {u}", self.name),
            }
        }
        // Every update of this poll becomes durable, with one sync, before
        // any of their acknowledgements (queued below) goes out.
        if !batch.is_empty() {
            if let Err(err) = self.persist.persist_batch(&batch) {
                log::error!("{}: persisting failed, failing stop: {err}", self.name);
                cx.stats.bump("mda.persist_failed");
                self.failed = true;
            } else {
                cx.stats.add("mda.persist_batches", 1);
                if self.persist.wants_compaction() {
                    // Everything persisted so far is in the state; the
                    // snapshot replaces the log durably.
                    match self.persist.compact(&core.snapshot()) {
                        Ok(()) => cx.stats.bump("mda.compactions"),
                        Err(err) => {
                            log::error!("{}: compaction failed, failing stop: {err}", self.name);
                            cx.stats.bump("mda.persist_failed");
                            self.failed = true;
                        }
                    }
                }
            }
        }
        while let Some(t) = core.poll_transmit() {
            any = true;
            if self.failed {
                cx.stats.drop("mda.failed_stop");
                continue;
            }
            match t {
                Transmit::Udp { to, bytes, reply } => {
                    if !reply {
                        cx.resolve(0, to.addr);
                    }
                    let h = if reply { self.udp } else { self.probe };
                    let (Some(h), Some(port)) = (h, cx.ports.first_mut()) else {
                        continue;
                    };
                    let sock = port.sockets.get_mut::<udp::Socket>(h);
                    if sock.send_slice(&bytes, to).is_err() {
                        cx.stats.drop("mda.udp_tx_full");
                    }
                }
                Transmit::Tcp { conn, bytes } => {
                    if let Some(c) = self.conns.get_mut(&conn) {
                        if c.tx.len() + bytes.len() > self.cfg.max_backlog {
                            cx.stats.drop("mda.tcp_backlog_full");
                            c.close_when_sent = true;
                            c.tx.clear();
                            continue;
                        }
                        c.tx.extend(bytes);
                    }
                }
            }
        }
        for (k, n) in core.drain_counters() {
            cx.stats.add(k, n);
        }
        any
    }

    /// smoltcp sends a UDP socket's datagrams in order, so a probe to a peer
    /// whose address never resolves (it is down) would hold back every later
    /// probe. After [`PROBE_STUCK`] with a datagram queued, drop what the
    /// probe socket holds (counted) and rebind it.
    fn unstick_probe(&mut self, cx: &mut Context<'_>) {
        let (Some(h), Some(port)) = (self.probe, cx.ports.first_mut()) else {
            return;
        };
        let sock = port.sockets.get_mut::<udp::Socket>(h);
        if sock.send_queue() == 0 {
            self.probe_stuck_since = None;
            return;
        }
        let since = *self.probe_stuck_since.get_or_insert(cx.now);
        if cx.now - since < PROBE_STUCK {
            return;
        }
        let endpoint = sock.endpoint();
        sock.close();
        if sock.bind(endpoint).is_err() {
            log::error!("{}: cannot rebind the probe socket", self.name);
        }
        self.probe_stuck_since = None;
        cx.stats.drop("mda.probe_unresolved");
    }

    fn flush_tcp(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(port) = cx.ports.first_mut() else {
            return false;
        };
        let mut any = false;
        let mut done = Vec::new();
        for (id, c) in &mut self.conns {
            let sock = port.sockets.get_mut::<tcp::Socket>(c.handle);
            while !c.tx.is_empty() && sock.can_send() {
                let (a, _) = c.tx.as_slices();
                match sock.send_slice(a) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        c.tx.drain(..n);
                        any = true;
                    }
                }
            }
            if c.close_when_sent && c.tx.is_empty() {
                sock.close();
                done.push(*id);
            }
        }
        for id in done {
            if let Some(c) = self.conns.remove(&id) {
                if !c.outbound {
                    self.listen.release();
                }
                self.closing.push(c.handle);
            }
        }
        self.closing.retain(|&h| {
            if port.sockets.get::<tcp::Socket>(h).is_open() {
                return true;
            }
            port.sockets.remove(h);
            false
        });
        any
    }

    fn registrations_json(&self) -> Value {
        let Some(core) = &self.core else {
            return json!([]);
        };
        Value::Array(
            core.registrations()
                .map(|(k, r)| {
                    json!({
                        "url": k.url,
                        "lang": r.lang.as_str(),
                        "type": r.service_type.as_str(),
                        "scopes": r.scopes.to_string(),
                        "attrs": r.attrs.to_string(),
                        "lifetime": r.lifetime,
                        "version": r.version,
                        "accept": r.accept.as_ref().map(|a| json!({"ts": a.timestamp, "da": a.da_url.as_str()})),
                        "deleted": r.deleted,
                    })
                })
                .collect(),
        )
    }
}

fn new_tcp(cfg: &MdaConfig) -> tcp::Socket<'static> {
    let mut s = tcp::Socket::new(
        tcp::SocketBuffer::new(vec![0; cfg.tcp_buffer]),
        tcp::SocketBuffer::new(vec![0; cfg.tcp_buffer]),
    );
    s.set_nagle_enabled(false);
    // smoltcp gives up on a connection whose data goes unacknowledged
    // this long; the mesh then reconnects and anti-entropy repairs.
    s.set_timeout(Some(Duration::from_secs(cfg.timeout_s.max(1))));
    s
}

/// SLP time (µs since 1900-01-01 UTC) now: the `wall_us_at_zero` of a node
/// whose clock starts at `Instant::ZERO` now, as `stack::runtime::run`'s
/// does (it starts counting when called, just after the node is built). A
/// driver helper for the binary.
#[allow(clippy::disallowed_methods)]
pub fn wall_us_at_zero_now() -> u64 {
    /// µs from 1900-01-01 to 1970-01-01.
    const EPOCH_1970_US: u64 = 2_208_988_800 * 1_000_000;
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64);
    EPOCH_1970_US + wall
}

impl Role for Mda {
    fn name(&self) -> &'static str {
        "mda"
    }

    fn start(&mut self, cx: &mut Context<'_>) {
        let cfg = self.core_config(cx);
        let records = std::mem::take(&mut self.records);
        self.core = Some(core::Mda::new(cfg, cx.now, &records));
        let Some(port) = cx.ports.first_mut() else {
            return;
        };
        // Not the ports a previous incarnation used: peers may still hold
        // those connections as established and drop our new SYNs.
        self.next_port = port.ephemeral_port();
        let mk =
            || udp::PacketBuffer::new(vec![udp::PacketMetadata::EMPTY; 128], vec![0; 128 * 1500]);
        let mut sock = udp::Socket::new(mk(), mk());
        if sock.bind(slp::PORT).is_err() {
            log::error!("{}: cannot bind UDP {}", self.name, slp::PORT);
        }
        self.udp = Some(port.sockets.add(sock));
        let mut probe = udp::Socket::new(mk(), mk());
        if probe
            .bind(self.next_port.wrapping_sub(1).max(1024))
            .is_err()
        {
            log::error!("{}: cannot bind the probe socket", self.name);
        }
        self.probe = Some(port.sockets.add(probe));
        let [a, b, c, d] = slp::MCAST_V4;
        let groups = [
            IpAddress::Ipv4(Ipv4Address::new(a, b, c, d)),
            IpAddress::Ipv6(core::MCAST_V6_DA),
            IpAddress::Ipv6(core::MCAST_V6_SVRLOC),
        ];
        let mut ok = true;
        for g in groups {
            if let Err(e) = port.iface.join_multicast_group(g) {
                log::warn!("{}: cannot join {g}: {e:?}", self.name);
                ok = false;
            }
        }
        self.multicast_joined = ok;
        self.arm_listeners(cx);
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> bool {
        if self.down {
            return false;
        }
        let mut any = self.arm_listeners(cx);
        any |= self.read_udp(cx);
        any |= self.read_tcp(cx);
        if let Some(core) = self.core.as_mut() {
            if core.poll_timeout().is_some_and(|t| t <= cx.now) {
                core.handle_timeout(cx.now);
                any = true;
            }
        }
        any |= self.drain(cx);
        any |= self.flush_tcp(cx);
        self.unstick_probe(cx);
        any
    }

    fn poll_at(&self, _now: Instant) -> Option<Instant> {
        if self.down {
            return None;
        }
        let core = self.core.as_ref().and_then(core::Mda::poll_timeout);
        let unstick = self.probe_stuck_since.map(|t| t + PROBE_STUCK);
        match (core, unstick) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn ingress(
        &mut self,
        _cx: &mut FrameContext<'_>,
        _port: usize,
        frame: &mut Vec<u8>,
    ) -> Verdict {
        if self.down {
            return Verdict::Drop("mda.down");
        }
        // A listener per SYN before smoltcp sees the batch (stack::listen).
        self.listen.note_frame(frame);
        if svcroute_stack::listen::tcp_syn_dst_port(frame) == Some(slp::PORT) {
            self.syns += 1;
        }
        Verdict::Pass
    }

    fn egress(
        &mut self,
        _cx: &mut FrameContext<'_>,
        _port: usize,
        _frame: &mut Vec<u8>,
    ) -> Verdict {
        if self.down {
            return Verdict::Drop("mda.down");
        }
        Verdict::Pass
    }

    fn control(&mut self, _cx: &mut Context<'_>, _id: u64, args: &[String]) -> ControlReply {
        let Some(core) = &self.core else {
            return ControlReply::Now(json!({"error": "not started"}));
        };
        match args.first().map(String::as_str) {
            Some("registrations") => ControlReply::Now(self.registrations_json()),
            Some("peers") => ControlReply::Now(Value::Array(
                core.peers()
                    .into_iter()
                    .map(|(u, a, up)| json!({"url": u, "addr": a.to_string(), "up": up}))
                    .collect(),
            )),
            Some("summary") => ControlReply::Now(json!({
                "url": core.config().url,
                "boot_timestamp": core.boot_timestamp(),
                "registrations": core.registration_count(),
                "digest": format!("{:016x}", core.digest()),
                "summary_vector": core.summary(),
                "connections": core.connections().len(),
                "multicast": self.multicast_joined,
            })),
            _ => ControlReply::Unknown,
        }
    }

    fn is_ready(&self) -> bool {
        self.core.is_some() && !self.failed && !self.down
    }

    fn stop(&mut self, cx: &mut Context<'_>) {
        if let Some(core) = self.core.as_mut() {
            core.shutdown(cx.now);
        }
        self.drain(cx);
        self.flush_tcp(cx);
    }
}

#[cfg(test)]
mod clock_test {
    /// The SLP clock of a node started now reads today's date, not 1970
    /// plus its uptime (as it once did: every boot timestamp was ~1 s).
    #[test]
    #[allow(clippy::disallowed_methods)]
    fn slp_time_at_start_is_the_wall_clock() {
        let unix_s = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let slp_s = super::wall_us_at_zero_now() / 1_000_000;
        assert!(
            slp_s.abs_diff(unix_s + 2_208_988_800) <= 5,
            "{slp_s} vs {unix_s}"
        );
    }
}
