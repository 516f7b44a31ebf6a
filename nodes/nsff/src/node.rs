//! The nsff role: [`Nsff`], an HTTP-terminating name-based forwarder.
//!
//! ```text
//!  client ──TCP :80──▶ ingress nSFF ──GFF transport (txn)──▶ egress nSFF ──TCP──▶ SF
//!         ◀──────────                ◀──── RESPONSE ────────              ◀──────
//! ```
//!
//! - **Client side** (`client_port`, [`ListenPool`] on `http_port`): each
//!   request is framed with a [`RequestDecoder`]; the raw bytes (head and
//!   body, chunked or not) are forwarded unchanged. The service name is the
//!   `Host` header without its port (the implicit name of SPEC §1.4), or on
//!   the explicit proxy port an absolute-form target's authority. A name
//!   served by a local SF goes straight to it; any other is resolved through
//!   the [`PathCache`] (a path request to the NR, the request waits) and
//!   sent over one transport transaction per request. The transaction's
//!   response stream is copied back to the client socket: that is the
//!   socket ↔ request mapping. Keep-alive: after a response ends, the next
//!   request on the connection is decoded.
//! - **Egress** (a transaction `Opened` toward us): the request bytes are
//!   decoded up to the head, the SF is chosen by `Host`, a smoltcp TCP
//!   connection to it (an idle one reused, else a new one) carries the request, and the SF's response (framed
//!   with a [`ResponseDecoder`]) goes back on the same transaction.
//! - **TLS passthrough** (`https_port`, 443): a connection's ClientHello is
//!   read ([`tls::peek`]) until its SNI names the service; the name is
//!   routed like a `Host` (local SF's `tls_port`, or one transaction for
//!   the whole TCP session), and the bytes, the hello first, are relayed
//!   unmodified both ways by a `relay::Pipe`, FINs passed on as half-closes.
//!   The egress knows such a transaction by its first octet (0x16, a TLS
//!   handshake record, which no HTTP request starts with), reads the same
//!   hello and relays to its SF's `tls_port`. Refusals are one fatal TLS
//!   alert and a close.
//! - **NR**: every local SF's FQDN is registered (GFF 3 with the FQDN TLV)
//!   at start, again after 1, 2, 4, ... s (doubling up to
//!   `register_interval_ms`: the fabric and the NR may come up after us, and
//!   registrations are not acknowledged), then every
//!   `register_interval_ms`, and at once after a path
//!   update for ALL NODES (an NR restart). Path responses feed the cache;
//!   path updates flush it.
//! - **HTTP SFC** ([`sfc`]): before a request is routed by its name, its
//!   (SPI, SI) comes from an `NSH` header or a classifier rule, and the
//!   nNLM row picks the name (a name or `http-service` row; `end` routes
//!   by `Host` without NSH; anything else, or no classification when
//!   required, is 421). The SF that gets it gets `NSH`; a remote one is
//!   named to the egress by `NSH-Next-Hop`. SFs send requests back to the
//!   nSFF's SF-facing address (listening there too when `sf_port` is
//!   another port).
//! - **SF registration REST** ([`crate::rest`], `sf_rest_port` on
//!   `sf_port`): SFs added over REST join the same table as config ones
//!   (registered, health-checked); removed ones are deregistered.
//! - **Transparent interception** ([`crate::transparent`], `transparent`):
//!   the client port's interface accepts any destination (smoltcp
//!   `any_ip`), and its frames pass an [`Interceptor`] first, which lets
//!   in only TCP to `http_port`/`https_port` of intercepted destinations
//!   besides our own traffic. The listeners (`addr: None`) answer as the
//!   original destination; routing stays by name. `ctl transparent` lists
//!   recent intercepted connections with their original destination.
//! - **GFF in**: frames whose pathID holds our `link_in` bit are consumed;
//!   other GFF frames are dropped (`nsff_gff_not_for_us`). Everything else
//!   is checked with [`check_frame`] and goes to smoltcp.
//!
//! Errors to the client: unknown name 502, NR silent 504, bad `Host` 400,
//! SFC misdirected 421,
//! tables full 503, SF unreachable or broken 502, transaction failed 504;
//! the body says why, each is counted.

use std::collections::{BTreeMap, VecDeque};

use serde_json::{json, Value};
use smoltcp::iface::SocketHandle;
use smoltcp::socket::tcp;
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{EthernetAddress, IpAddress, IpEndpoint, IpListenEndpoint};
use svcroute_stack::http::{
    Decoded, Framing, Limits, RequestDecoder, RequestHead, ResponseDecoder,
};
use svcroute_stack::listen::{ListenConfig, ListenPool};
use svcroute_stack::runtime::{check_frame, Context, ControlReply, FrameContext, Role};
use svcroute_stack::shim::{Direction, Outbox, Verdict};
use svcroute_stack::stats::Counters;
use svcroute_stack::wire::gff::{self, MessageType, PathId};
use svcroute_stack::wire::nr::{self, Fqdn, NsffId, Registration, Tlv, Tlvs, ALL_NSFFS};
use svcroute_stack::wire::nsff::Txn;

use crate::cache::{CacheEvent, CacheStats, Lookup, PathCache, Route, Unresolved};
use crate::classic::Classic;
use crate::config::{ConfigError, NsffConfig, SfConfig};
use crate::health::{Change, Failure, Health, Policy, ProbeResult};
use crate::relay::{End, Pipe, Side};
use crate::rest::{NewSf, Op, RestError, SfRest};
use crate::sfc::{self, Classified, Classifier, Decision, NshHeader};
use crate::store::SfStore;
use crate::tls::{self, Alert, Peek};
use crate::transparent::{Filter, Interceptor};
use crate::transport::{Endpoint, Event, Stats, TxnStats};

const ETH_LEN: usize = 14;
const IPV6_LEN: usize = 40;
const ETHERTYPE_IPV6: [u8; 2] = [0x86, 0xdd];
/// Bytes buffered per direction of one proxied exchange before reading stops.
const BUF_HIGH: usize = 256 * 1024;
/// Bytes read per socket call.
const CHUNK: usize = 16 * 1024;
/// TCP buffers of client and SF sockets.
const SOCK_BUF: usize = 64 * 1024;
/// Idle SF connections kept for reuse, over all SFs.
const MAX_IDLE_SF: usize = 256;
/// An idle SF connection is closed after this long.
const IDLE_SF_TIMEOUT: Duration = Duration::from_secs(30);
/// The first gap between registrations, ms; it doubles up to
/// `register_interval_ms`.
const REGISTER_FIRST_GAP_MS: u64 = 1000;
/// Intercepted connections remembered for `ctl transparent`.
const RECENT_INTERCEPTS: usize = 32;

/// A connection accepted for a destination that is not ours.
#[derive(Debug, Clone, Copy)]
struct Intercepted {
    at: Instant,
    client: IpEndpoint,
    /// The address and port the client connected to.
    original_dst: IpEndpoint,
    tls: bool,
}

impl Intercepted {
    fn json(&self) -> Value {
        json!({
            "at_ms": self.at.total_millis(),
            "client": socket_addr(self.client).to_string(),
            "original_dst": socket_addr(self.original_dst).to_string(),
            "tls": self.tls,
        })
    }
}

/// What a proxied exchange said about its SF (passive health evidence,
/// see [`crate::health`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Evidence {
    /// A response head came back: the SF is alive.
    Answered,
    /// A new connection to it, started at `started`, was refused or timed
    /// out before it was established.
    Refused { started: Instant },
}

/// A local SF exchange: request bytes in, response bytes out.
#[derive(Debug)]
struct SfJob {
    /// The connection to the SF; `None` for a canned (error) response.
    sock: Option<SocketHandle>,
    req: Vec<u8>,
    req_done: bool,
    rbuf: Vec<u8>,
    dec: ResponseDecoder,
    resp: Vec<u8>,
    resp_done: bool,
    /// The response head being decoded is a 1xx.
    interim: bool,
    /// The SF it talks to.
    target: Option<(IpAddress, u16)>,
    /// The request lets the connection stay open.
    req_keep_alive: bool,
    /// The response ended cleanly and keeps the connection open: the socket
    /// can carry the next request.
    reusable: bool,
    /// The response ends by close or says `Connection: close`: the client
    /// connection must close after it.
    close_client: bool,
    /// When its connection was opened, if it is a new one not yet seen
    /// established (a reused one proves nothing about connecting).
    connecting_since: Option<Instant>,
    /// A response head was seen.
    answered: bool,
    /// Health evidence not yet handed to the node.
    evidence: Option<Evidence>,
}

impl SfJob {
    fn canned(status: u16, why: &str) -> Self {
        Self {
            sock: None,
            req: Vec::new(),
            req_done: true,
            rbuf: Vec::new(),
            dec: ResponseDecoder::new(streaming()),
            resp: error_response(status, why),
            resp_done: true,
            interim: false,
            target: None,
            req_keep_alive: false,
            reusable: false,
            close_client: false,
            connecting_since: None,
            answered: false,
            evidence: None,
        }
    }

    /// Move bytes between the buffers and the SF socket.
    fn pump(
        &mut self,
        sockets: &mut smoltcp::iface::SocketSet<'static>,
        stats: &mut Counters,
    ) -> bool {
        let Some(h) = self.sock else {
            return false;
        };
        if self.resp_done {
            return false;
        }
        let mut any = false;
        let s = sockets.get_mut::<tcp::Socket>(h);
        match s.state() {
            tcp::State::SynSent => {}
            tcp::State::Closed => {
                // Reset or timed out while connecting: refused.
                if let Some(started) = self.connecting_since.take() {
                    self.evidence = Some(Evidence::Refused { started });
                }
            }
            _ => self.connecting_since = None,
        }
        if !self.req.is_empty() && s.can_send() {
            if let Ok(n) = s.send_slice(&self.req) {
                self.req.drain(..n);
                any |= n > 0;
            }
        }
        let mut tmp = [0u8; CHUNK];
        while self.resp.len() < BUF_HIGH && s.can_recv() {
            match s.recv_slice(&mut tmp) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    self.rbuf.extend_from_slice(&tmp[..n]);
                    any = true;
                }
            }
        }
        let mut budget = 1024;
        while (!self.rbuf.is_empty() || self.dec.framing().is_some()) && !self.resp_done {
            budget -= 1;
            if budget == 0 {
                break;
            }
            match self.dec.decode(&self.rbuf) {
                Ok((n, ev)) => {
                    if let Decoded::Head(h) = &ev {
                        if !std::mem::replace(&mut self.answered, true) {
                            self.evidence = Some(Evidence::Answered);
                        }
                        // 1xx (but 101) is interim: its End is not the response's.
                        self.interim = (100..200).contains(&h.status) && h.status != 101;
                        if !self.interim {
                            self.close_client =
                                !h.keep_alive() || self.dec.framing() == Some(Framing::UntilClose);
                            self.reusable = h.keep_alive()
                                && self.req_keep_alive
                                && self.dec.framing() != Some(Framing::UntilClose)
                                && h.status != 101;
                        }
                    }
                    let end = matches!(ev, Decoded::End) && !std::mem::take(&mut self.interim);
                    let more = matches!(ev, Decoded::NeedMore);
                    self.resp.extend(self.rbuf.drain(..n));
                    if end {
                        self.resp_done = true;
                        // Reusable only if nothing else came and the whole
                        // request went out.
                        self.reusable &= self.rbuf.is_empty()
                            && self.req.is_empty()
                            && self.req_done
                            && s.state() == tcp::State::Established;
                        if !self.reusable {
                            s.close();
                        }
                        return true;
                    }
                    if more {
                        break;
                    }
                }
                Err(e) => {
                    self.reusable = false;
                    stats.bump("nsff.sf_bad_response");
                    if self.resp.is_empty() {
                        self.resp = error_response(502, &format!("bad response from SF: {e}"));
                    }
                    self.resp_done = true;
                }
            }
        }
        if !self.resp_done && !s.may_recv() && self.rbuf.is_empty() {
            let state = s.state();
            let ended = if state == tcp::State::Closed || state == tcp::State::SynSent {
                false
            } else {
                self.dec.finish().unwrap_or(false)
            };
            if !ended
                && matches!(
                    state,
                    tcp::State::Closed
                        | tcp::State::CloseWait
                        | tcp::State::LastAck
                        | tcp::State::TimeWait
                        | tcp::State::Closing
                )
            {
                stats.bump("nsff.sf_closed_early");
                if self.resp.is_empty() {
                    self.resp = error_response(502, "service function unreachable or closed");
                }
            }
            if ended || state != tcp::State::SynSent && state != tcp::State::Established {
                self.resp_done = true;
                any = true;
            }
        }
        if self.resp_done {
            self.reusable = false;
            s.close();
        }
        any
    }
}

/// One local SF, from config or registered over REST.
#[derive(Debug)]
struct LocalSf {
    fqdn: Fqdn,
    addr: IpAddress,
    port: u16,
    tls_port: u16,
    /// Registered over REST (else from `[[nsff.sf]]`).
    rest: bool,
    health: Health,
    /// The health probe's connection while one is in flight.
    probe: Option<SocketHandle>,
}

impl LocalSf {
    /// As kept in the state file.
    fn config(&self) -> SfConfig {
        SfConfig {
            fqdn: self.fqdn.as_str().to_owned(),
            addr: std_ip(self.addr),
            port: self.port,
            tls_port: self.tls_port,
        }
    }

    fn json(&self) -> Value {
        json!({
            "fqdn": self.fqdn.as_str(), "addr": self.addr.to_string(), "port": self.port,
            "tls_port": self.tls_port, "source": if self.rest { "rest" } else { "config" },
            "healthy": self.health.is_up(), "failed_probes": self.health.failures(),
        })
    }
}

/// What a client connection's current request goes to.
#[derive(Debug)]
enum Up {
    /// Between requests.
    Idle,
    /// Head seen, name being resolved.
    Resolving,
    /// Over a transaction. `finished`: the request has ended there;
    /// `final_head`: the final (not 1xx) response head has arrived.
    Remote {
        txn: Txn,
        finished: bool,
        final_head: bool,
    },
    /// To a local SF job (or a canned answer).
    Local { job: u64 },
}

/// One client connection.
#[derive(Debug)]
struct Client {
    /// Watches the remote response's heads (framing, keep-alive).
    rdec: ResponseDecoder,
    /// Last time anything moved on this connection.
    active: Instant,
    /// Index of the pool it came from.
    pool: usize,
    /// Index of the port its socket is on.
    port: usize,
    sock: SocketHandle,
    dec: RequestDecoder,
    inbuf: Vec<u8>,
    /// Bytes of the current request not yet handed upstream.
    msg: Vec<u8>,
    msg_done: bool,
    up: Up,
    /// Response bytes not yet written to the socket.
    wbuf: Vec<u8>,
    close_after: bool,
}

/// An egress transaction.
#[derive(Debug)]
struct Egress {
    dec: RequestDecoder,
    held: Vec<u8>,
    scanned: usize,
    /// The request's last byte arrived (by its framing).
    req_complete: bool,
    req_eof: bool,
    job: Option<u64>,
    finished: bool,
    /// A TLS passthrough transaction (its first octet was a handshake
    /// record): the transaction (`a`) relayed to the SF's TLS port (`b`).
    tls: Option<Pipe>,
}

/// A TLS passthrough session on `https_port`: the client connection (`a`
/// of the pipe) relayed, once its ClientHello named the service, to a
/// local SF's TLS port or over one transaction (`b`).
#[derive(Debug)]
struct TlsSession {
    /// Index of the pool it came from.
    pool: usize,
    pipe: Pipe,
    stage: TlsStage,
    /// Last time anything moved.
    active: Instant,
}

/// Where a TLS session is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum TlsStage {
    /// Reading the ClientHello.
    Hello,
    /// The SNI name is being resolved at the NR.
    Resolving(Fqdn),
    /// Relaying to a local SF (`Local`) or over a transaction.
    Relay { name: Fqdn, local: bool },
    /// Refused or cut: an alert (if any) goes out, the client's bytes are
    /// dropped, the connection closes.
    Closing,
    /// Both directions ended cleanly (counted once).
    Done,
}

/// The nsff role.
#[derive(Debug)]
pub struct Nsff {
    cfg: NsffConfig,
    me: NsffId,
    /// Local SFs: config ones first, then REST ones in registration order.
    sfs: Vec<LocalSf>,
    /// The SF registration REST server on `sf_port` (`sf_rest_port`).
    rest: Option<SfRest>,
    /// Where REST SFs are kept across restarts (`state_file`).
    store: Option<SfStore>,
    /// SFs restored from the state file and dropped at start, for the
    /// counters at the first poll: (restored, dropped).
    restored: Option<(u64, u64)>,
    /// Classifier rules (`[[nsff.classifier]]`).
    classifier: Classifier,
    ep: Endpoint,
    cache: PathCache<u64>,
    mac: EthernetAddress,
    /// Listening pools on `client_port`: `http_port`, `proxy_port`,
    /// `https_port` (those that are not 0); then, when `sf_port` is
    /// another port, `http_port` and `proxy_port` on it (SFs send requests
    /// back there).
    pools: Vec<ListenPool>,
    /// Per pool: the port index it listens on.
    pool_port: Vec<usize>,
    /// Per pool: whether it is the TLS passthrough one.
    pool_tls: Vec<bool>,
    /// TLS passthrough sessions (client side), by client ID (the same IDs
    /// as `clients`: both wait on the cache).
    tls: BTreeMap<u64, TlsSession>,
    clients: BTreeMap<u64, Client>,
    next_client: u64,
    jobs: BTreeMap<u64, SfJob>,
    next_job: u64,
    egress: BTreeMap<Txn, Egress>,
    txn_client: BTreeMap<Txn, u64>,
    /// Transactions whose response a client already has in full by its
    /// HTTP framing while their end marker is still on the way: drained
    /// here so that they close, without holding up the client's next
    /// request.
    detached: std::collections::BTreeSet<Txn>,
    next_register: Option<Instant>,
    register_now: bool,
    /// The gap before the next registration round, ms.
    register_gap_ms: u64,
    next_local_port: u16,
    /// SF sockets closing (since, handle), on `sf_port`.
    closing: Vec<(Instant, SocketHandle)>,
    /// Client sockets aborted in this poll (port, handle). A socket removed
    /// at once never sends its reset, and the client waits on a dead
    /// connection: they move to `aborted_ready` at the next poll and are
    /// removed at the one after, with the interface run in between.
    aborted: Vec<(usize, SocketHandle)>,
    /// Aborted in an earlier poll: removed at the next one.
    aborted_ready: Vec<(usize, SocketHandle)>,
    /// Open SF connections between requests: (SF, handle, idle since).
    idle: Vec<((IpAddress, u16), SocketHandle, Instant)>,
    /// Health evidence from proxied exchanges, by SF address and port,
    /// applied at the end of the poll.
    evidence: Vec<((IpAddress, u16), Evidence)>,
    /// The classic SFF (NSH over Ethernet, GRE, VXLAN-GPE).
    classic: Classic,
    /// The client port's filter while transparent interception is on.
    transparent: Option<Interceptor>,
    /// The last intercepted connections, oldest first.
    intercepted: VecDeque<Intercepted>,
}

impl Nsff {
    /// An nSFF for `cfg`.
    pub fn new(cfg: NsffConfig) -> Result<Self, ConfigError> {
        cfg.validate()?;
        let me = cfg.id()?;
        let mut sfs: Vec<LocalSf> = cfg
            .sfs()?
            .into_iter()
            .zip(&cfg.sf)
            .map(|((fqdn, a, port), c)| LocalSf {
                fqdn,
                addr: IpAddress::from(a),
                port,
                tls_port: c.tls_port,
                rest: false,
                health: Health::new(),
                probe: None,
            })
            .collect();
        let store = cfg.state_file.clone().map(SfStore::new);
        let restored = match &store {
            Some(st) => {
                let saved = st
                    .load()
                    .map_err(|e| ConfigError::StateFile(e.to_string()))?;
                Some(restore(&mut sfs, saved, cfg.max_sfs, st)?)
            }
            None => None,
        };
        let ep = Endpoint::new(me, cfg.transport.clone(), cfg.first_txn)?;
        let classifier = cfg.classifier()?;
        let cache = PathCache::new(me, cfg.nr_path(), cfg.cache.clone(), None)?;
        let classic = Classic::new(cfg.nnlm()?, cfg.classic.clone());
        let transparent = cfg.interceptor()?;
        Ok(Self {
            me,
            sfs,
            rest: None,
            store,
            restored,
            classifier,
            ep,
            cache,
            mac: EthernetAddress([0x02, 0, 0, 0, 0, 0]),
            pools: Vec::new(),
            pool_tls: Vec::new(),
            pool_port: Vec::new(),
            tls: BTreeMap::new(),
            clients: BTreeMap::new(),
            next_client: 1,
            jobs: BTreeMap::new(),
            next_job: 1,
            egress: BTreeMap::new(),
            txn_client: BTreeMap::new(),
            detached: std::collections::BTreeSet::new(),
            next_register: None,
            register_now: true,
            register_gap_ms: REGISTER_FIRST_GAP_MS,
            next_local_port: 49152,
            closing: Vec::new(),
            aborted: Vec::new(),
            aborted_ready: Vec::new(),
            idle: Vec::new(),
            evidence: Vec::new(),
            classic,
            transparent,
            intercepted: VecDeque::new(),
            cfg,
        })
    }

    /// The transport endpoint (counters, for tests).
    pub fn endpoint(&self) -> &Endpoint {
        &self.ep
    }

    /// The path cache (for tests).
    pub fn cache(&self) -> &PathCache<u64> {
        &self.cache
    }

    /// A healthy local SF serving `fqdn`.
    fn local_sf(&self, fqdn: &Fqdn) -> Option<(IpAddress, u16)> {
        self.sfs
            .iter()
            .find(|s| &s.fqdn == fqdn && s.health.is_up())
            .map(|s| (s.addr, s.port))
    }

    /// A healthy local SF serving `fqdn`: its address and TLS port.
    fn local_sf_tls(&self, fqdn: &Fqdn) -> Option<(IpAddress, u16)> {
        self.sfs
            .iter()
            .find(|s| &s.fqdn == fqdn && s.health.is_up())
            .map(|s| (s.addr, s.tls_port))
    }

    /// Send a (de)registration of `fqdn` to the NR.
    fn send_registration(&self, fqdn: &Fqdn, deregister: bool, out: &mut Outbox) {
        let tlvs = [Tlv::Fqdn(fqdn.as_str())];
        let repr = nr::Repr::Registration(Registration {
            deregister,
            hash: fqdn.hash(),
            nsff_id: self.me,
            tlvs: Tlvs::new(&tlvs).unwrap_or(Tlvs::EMPTY),
        });
        let mut b = vec![0; repr.buffer_len()];
        repr.emit(&mut b);
        out.inject(
            self.cfg.fabric_port,
            Direction::ToWire,
            gff_frame(self.mac, self.cfg.nr_path(), MessageType::Registration, &b),
        );
    }

    /// Send our registrations (healthy SFs only).
    fn register(&mut self, now: Instant, out: &mut Outbox, stats: &mut Counters) {
        for sf in &self.sfs {
            if sf.health.is_up() {
                self.send_registration(&sf.fqdn, false, out);
                stats.bump("nsff.registrations_sent");
            }
        }
        self.register_now = false;
        // Soon again at first: a registration sent before the fabric or the
        // NR was up is lost, and nothing says so.
        let gap = self.register_gap_ms.min(self.cfg.register_interval_ms);
        self.register_gap_ms = gap.saturating_mul(2);
        self.next_register = Some(now + Duration::from_millis(gap));
    }

    /// How local SFs are checked (`health_*` keys).
    fn health_policy(&self) -> Policy {
        Policy {
            interval: Duration::from_millis(self.cfg.health_interval_ms),
            timeout: Duration::from_millis(self.cfg.health_timeout_ms),
            failures: self.cfg.health_failures,
        }
    }

    /// Active health checks: a TCP connect to each SF that nothing proved
    /// alive in the last `health_interval_ms` (see [`crate::health`]).
    /// `health_failures` counted failures in a row deregister the name at
    /// the NR (and local requests for it are resolved elsewhere); the first
    /// success after that registers it again.
    fn health_checks(&mut self, cx: &mut Context<'_>) -> bool {
        if self.cfg.health_interval_ms == 0 {
            return false;
        }
        let policy = self.health_policy();
        let sp = self.cfg.sf_port();
        let mut any = false;
        for i in 0..self.sfs.len() {
            let Some(ps) = cx.ports.get_mut(sp) else {
                return false;
            };
            let sf = &mut self.sfs[i];
            if let Some(sock) = sf.probe {
                let s = ps.sockets.get_mut::<tcp::Socket>(sock);
                let state = s.state();
                let ok = state == tcp::State::Established;
                let expired = sf
                    .health
                    .probe_deadline(&policy)
                    .is_some_and(|t| cx.now >= t);
                if !ok && state != tcp::State::Closed && !expired {
                    continue;
                }
                s.abort();
                ps.sockets.remove(sock);
                sf.probe = None;
                any = true;
                if !ok {
                    cx.stats.bump("nsff.health_failures");
                }
                match sf.health.probe_done(cx.now, ok, &policy) {
                    Some(ProbeResult::Connected(change)) => self.health_change(cx, i, change),
                    Some(ProbeResult::Failed(f)) => self.failure_verdict(cx, i, f),
                    None => {}
                }
            } else if sf.health.poll_probe(cx.now) {
                let local = self.next_local_port;
                self.next_local_port = if local == u16::MAX { 49152 } else { local + 1 };
                let mut s = tcp::Socket::new(
                    tcp::SocketBuffer::new(vec![0; 64]),
                    tcp::SocketBuffer::new(vec![0; 64]),
                );
                s.set_timeout(Some(policy.timeout));
                if s.connect(ps.iface.context(), (sf.addr, sf.port), local)
                    .is_ok()
                {
                    sf.probe = Some(ps.sockets.add(s));
                    sf.health.probe_started(cx.now);
                    cx.stats.bump("nsff.health_probes");
                } else {
                    // Our side could not even try: not the SF's fault.
                    sf.health.probe_not_started(cx.now, &policy);
                    cx.stats.bump("nsff.health_probes_not_started");
                }
                any = true;
            }
        }
        any
    }

    /// Feed what proxied exchanges said about their SFs into every local
    /// SF at that address and port (several names may share one).
    fn apply_evidence(&mut self, cx: &mut Context<'_>) {
        if self.cfg.health_interval_ms == 0 {
            // Health checks off: nothing would ever bring an SF back.
            self.evidence.clear();
            return;
        }
        if self.evidence.is_empty() {
            return;
        }
        let policy = self.health_policy();
        for (target, ev) in std::mem::take(&mut self.evidence) {
            if matches!(ev, Evidence::Refused { .. }) {
                cx.stats.bump("nsff.sf_refused");
            }
            for i in 0..self.sfs.len() {
                if (self.sfs[i].addr, self.sfs[i].port) != target {
                    continue;
                }
                match ev {
                    Evidence::Answered => {
                        let change = self.sfs[i].health.handle_success(cx.now, &policy);
                        self.health_change(cx, i, change);
                    }
                    Evidence::Refused { started } => {
                        let f = self.sfs[i].health.handle_failure(cx.now, started, &policy);
                        self.failure_verdict(cx, i, f);
                    }
                }
            }
        }
    }

    /// Act on failure evidence about SF `i`: count what was discounted,
    /// drop its idle connections unless it answered meanwhile, and take it
    /// down if that was the last straw.
    fn failure_verdict(&mut self, cx: &mut Context<'_>, i: usize, f: Failure) {
        match f {
            Failure::Overtaken => {
                // It answered another exchange since: alive, connections too.
                cx.stats.bump("nsff.health_failures_overtaken");
                return;
            }
            Failure::SameIncident => cx.stats.bump("nsff.health_failures_same_incident"),
            Failure::Counted | Failure::Down => {}
        }
        // The SF took no new connection: its idle keep-alive connections
        // are dead, or stale once it restarts (the new process resets them
        // on first use, failing that request). The next requests connect
        // afresh.
        let target = (self.sfs[i].addr, self.sfs[i].port);
        if let Some(ps) = cx.ports.get_mut(self.cfg.sf_port()) {
            let (idle, closing) = (&mut self.idle, &mut self.closing);
            idle.retain(|&(t, sock, _)| {
                if t != target {
                    return true;
                }
                ps.sockets.get_mut::<tcp::Socket>(sock).close();
                closing.push((cx.now, sock));
                cx.stats.bump("nsff.sf_idle_dropped");
                false
            });
        }
        self.health_change(cx, i, f.change());
    }

    /// Register or deregister SF `i`'s name after its health changed.
    fn health_change(&mut self, cx: &mut Context<'_>, i: usize, change: Option<Change>) {
        let sf = &self.sfs[i];
        match change {
            None => {}
            Some(Change::Up) => {
                cx.stats.bump("nsff.sf_up");
                log::info!(
                    "nsff: SF {} at {}:{} is up, registering",
                    sf.fqdn,
                    sf.addr,
                    sf.port
                );
                self.send_registration(&sf.fqdn, false, cx.out);
                cx.stats.bump("nsff.registrations_sent");
            }
            Some(Change::Down) => {
                cx.stats.bump("nsff.sf_down");
                log::warn!(
                    "nsff: SF {} at {}:{} is down, deregistering",
                    sf.fqdn,
                    sf.addr,
                    sf.port
                );
                self.send_registration(&sf.fqdn, true, cx.out);
                cx.stats.bump("nsff.deregistrations_sent");
            }
        }
    }

    /// Serve the SF registration REST (`sf_rest_port` on `sf_port`).
    fn poll_rest(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(mut rest) = self.rest.take() else {
            return false;
        };
        let sp = self.cfg.sf_port();
        let mut removed = Vec::new();
        let now = cx.now;
        let any = match cx.ports.get_mut(sp) {
            Some(ps) => {
                let out = &mut *cx.out;
                rest.poll(now, &mut ps.sockets, cx.stats, |op, stats| {
                    self.apply_rest(now, op, out, stats, &mut removed)
                })
            }
            None => false,
        };
        self.rest = Some(rest);
        for sf in removed {
            self.forget_sf(cx, sf);
        }
        any
    }

    /// Carry out one REST operation on the SF table.
    fn apply_rest(
        &mut self,
        now: Instant,
        op: Op,
        out: &mut Outbox,
        stats: &mut Counters,
        removed: &mut Vec<LocalSf>,
    ) -> Result<(u16, Value), RestError> {
        let conflict = |reason: String| RestError {
            status: 409,
            field: Some("fqdn"),
            reason,
        };
        match op {
            Op::List => Ok((
                200,
                json!({
                    "nsff_id": self.me.value(),
                    "max_sfs": self.cfg.max_sfs,
                    "sfs": self.sfs.iter().map(LocalSf::json).collect::<Vec<Value>>(),
                }),
            )),
            Op::Show(fqdn) => self
                .sfs
                .iter()
                .find(|s| s.fqdn == fqdn)
                .map(|s| (200, s.json()))
                .ok_or_else(|| RestError::new(404, format!("no local SF {fqdn}"))),
            Op::Add(NewSf {
                fqdn,
                addr,
                port,
                tls_port,
            }) => {
                let addr = IpAddress::from(addr);
                if let Some(e) = self.sfs.iter().find(|s| s.fqdn == fqdn) {
                    if !e.rest {
                        return Err(conflict(format!(
                            "{fqdn} is configured in the node file ([[nsff.sf]])"
                        )));
                    }
                    if (e.addr, e.port, e.tls_port) != (addr, port, tls_port) {
                        return Err(conflict(format!(
                            "{fqdn} is already registered at {}:{}; DELETE it first",
                            e.addr, e.port
                        )));
                    }
                    // The same SF again (it restarted, say): refresh.
                    stats.bump("nsff.rest_sf_refreshed");
                    if e.health.is_up() {
                        self.send_registration(&fqdn, false, out);
                        stats.bump("nsff.registrations_sent");
                    }
                    return Ok((200, e.json()));
                }
                if let Some(e) = self.sfs.iter().find(|s| s.fqdn.hash() == fqdn.hash()) {
                    return Err(conflict(format!(
                        "{fqdn} has the same 16-bit name hash as local SF {} (RFC 8677)",
                        e.fqdn
                    )));
                }
                if self.sfs.len() >= self.cfg.max_sfs {
                    return Err(RestError::new(
                        507,
                        format!("this nSFF has max_sfs = {} local SFs", self.cfg.max_sfs),
                    ));
                }
                let sf = LocalSf {
                    fqdn,
                    addr,
                    port,
                    tls_port,
                    rest: true,
                    health: Health::new(),
                    probe: None,
                };
                self.save_rest_sfs(Some(&sf), None, stats)?;
                let fqdn = &sf.fqdn;
                log::info!("nsff: REST registered SF {fqdn} at {addr}:{port}");
                self.send_registration(fqdn, false, out);
                stats.bump("nsff.registrations_sent");
                // Registrations are not acknowledged: repeat soon, as at start.
                self.register_gap_ms = REGISTER_FIRST_GAP_MS;
                self.next_register = Some(now + Duration::from_millis(REGISTER_FIRST_GAP_MS));
                stats.bump("nsff.rest_sf_added");
                let v = sf.json();
                self.sfs.push(sf);
                Ok((201, v))
            }
            Op::Remove(fqdn) => {
                let Some(i) = self.sfs.iter().position(|s| s.fqdn == fqdn) else {
                    return Err(RestError::new(404, format!("no local SF {fqdn}")));
                };
                if !self.sfs[i].rest {
                    return Err(conflict(format!(
                        "{fqdn} is configured in the node file ([[nsff.sf]]), not removable over REST"
                    )));
                }
                self.save_rest_sfs(None, Some(&fqdn), stats)?;
                let sf = self.sfs.remove(i);
                log::info!("nsff: REST removed SF {fqdn}");
                self.send_registration(&fqdn, true, out);
                stats.bump("nsff.deregistrations_sent");
                stats.bump("nsff.rest_sf_removed");
                removed.push(sf);
                Ok((204, Value::Null))
            }
        }
    }

    /// Save the REST SFs as they are after a change (`add` appended,
    /// `remove` left out) before it is made: if the state file cannot be
    /// written, the change is refused (500) and nothing changes.
    fn save_rest_sfs(
        &self,
        add: Option<&LocalSf>,
        remove: Option<&Fqdn>,
        stats: &mut Counters,
    ) -> Result<(), RestError> {
        let Some(store) = &self.store else {
            return Ok(());
        };
        let sfs: Vec<SfConfig> = self
            .sfs
            .iter()
            .filter(|s| s.rest && Some(&s.fqdn) != remove)
            .chain(add)
            .map(LocalSf::config)
            .collect();
        store.save(&sfs).map_err(|e| {
            stats.bump("nsff.state_write_errors");
            log::error!("nsff: {e}");
            RestError::new(500, format!("not saved, nothing changed: {e}"))
        })
    }

    /// Let go of a removed SF's sockets: its probe, its idle connections.
    /// Exchanges in progress finish on their own connections.
    fn forget_sf(&mut self, cx: &mut Context<'_>, sf: LocalSf) {
        let Some(ps) = cx.ports.get_mut(self.cfg.sf_port()) else {
            return;
        };
        if let Some(sock) = sf.probe {
            ps.sockets.get_mut::<tcp::Socket>(sock).abort();
            ps.sockets.remove(sock);
        }
        let target = (sf.addr, sf.port);
        let (idle, closing) = (&mut self.idle, &mut self.closing);
        idle.retain(|&(t, sock, _)| {
            if t != target {
                return true;
            }
            ps.sockets.get_mut::<tcp::Socket>(sock).close();
            closing.push((cx.now, sock));
            false
        });
    }

    /// Transport and cache output onto the fabric.
    fn flush(&mut self, out: &mut Outbox, stats: &mut Counters) -> bool {
        let mut any = false;
        while let Some(t) = self.ep.poll_transmit() {
            out.inject(
                self.cfg.fabric_port,
                Direction::ToWire,
                gff_frame(self.mac, t.path, t.msg_type, &t.payload),
            );
            any = true;
        }
        while let Some((path, ty, payload)) = self.cache.poll_transmit() {
            out.inject(
                self.cfg.fabric_port,
                Direction::ToWire,
                gff_frame(self.mac, path, ty, &payload),
            );
            stats.bump("nsff.path_requests_sent");
            any = true;
        }
        any
    }

    fn new_job(&mut self, job: SfJob) -> u64 {
        let id = self.next_job;
        self.next_job += 1;
        self.jobs.insert(id, job);
        id
    }

    /// A job toward the local SF at (addr, port), or a canned 502.
    fn connect_sf(
        &mut self,
        cx: &mut Context<'_>,
        addr: IpAddress,
        port: u16,
        req: &RequestHead,
    ) -> u64 {
        let p = self.cfg.sf_port();
        let head = req.is_head();
        let mut dec = ResponseDecoder::new(streaming());
        dec.set_head_request(head);
        let mut job = SfJob {
            sock: None,
            req: Vec::new(),
            req_done: false,
            rbuf: Vec::new(),
            dec,
            resp: Vec::new(),
            resp_done: false,
            interim: false,
            target: Some((addr, port)),
            req_keep_alive: req.keep_alive(),
            reusable: false,
            close_client: false,
            connecting_since: None,
            answered: false,
            evidence: None,
        };
        // An idle connection to the same SF, if one is still open.
        if let Some(ps) = cx.ports.get_mut(p) {
            while let Some(i) = self.idle.iter().position(|e| e.0 == (addr, port)) {
                let (_, h, _) = self.idle.swap_remove(i);
                let s = ps.sockets.get_mut::<tcp::Socket>(h);
                if s.state() == tcp::State::Established && s.may_send() && !s.can_recv() {
                    cx.stats.bump("nsff.sf_reused");
                    job.sock = Some(h);
                    return self.new_job(job);
                }
                s.close();
                self.closing.push((cx.now, h));
            }
        }
        let h = match self.connect_tcp(cx, addr, port) {
            Ok(h) => h,
            Err(ConnectError::NoPort) => {
                cx.stats.bump("nsff.sf_failed");
                return self.new_job(SfJob::canned(502, "no port toward the service function"));
            }
            Err(ConnectError::Connect) => {
                cx.stats.bump("nsff.sf_connect_error");
                return self.new_job(SfJob::canned(502, "cannot connect to the service function"));
            }
        };
        cx.stats.bump("nsff.sf_connections");
        job.sock = Some(h);
        job.connecting_since = Some(cx.now);
        self.new_job(job)
    }

    /// Remove SF sockets that finished closing (or took too long).
    fn sweep(&mut self, cx: &mut Context<'_>) {
        let Some(ps) = cx.ports.get_mut(self.cfg.sf_port()) else {
            return;
        };
        let now = cx.now;
        let closing = &mut self.closing;
        self.idle.retain(|&(_, h, since)| {
            let s = ps.sockets.get_mut::<tcp::Socket>(h);
            let ok = s.state() == tcp::State::Established && !s.can_recv();
            if ok && now - since < IDLE_SF_TIMEOUT {
                true
            } else {
                s.close();
                closing.push((now, h));
                false
            }
        });
        self.closing.retain(|&(since, h)| {
            let s = ps.sockets.get_mut::<tcp::Socket>(h);
            let done = matches!(s.state(), tcp::State::Closed | tcp::State::TimeWait);
            if done || now - since > Duration::from_secs(10) {
                s.abort();
                ps.sockets.remove(h);
                false
            } else {
                true
            }
        });
    }

    fn remove_job(&mut self, cx: &mut Context<'_>, id: u64) {
        if let Some(j) = self.jobs.remove(&id) {
            if let (Some(h), Some(ps)) = (j.sock, cx.ports.get_mut(self.cfg.sf_port())) {
                let s = ps.sockets.get_mut::<tcp::Socket>(h);
                if let (true, Some(t)) = (j.reusable && j.resp.is_empty(), j.target) {
                    if s.state() == tcp::State::Established && self.idle.len() < MAX_IDLE_SF {
                        self.idle.push((t, h, cx.now));
                        return;
                    }
                }
                if s.state() == tcp::State::Closed || s.state() == tcp::State::TimeWait {
                    ps.sockets.remove(h);
                } else {
                    // Let the FIN go out; swept in `sweep`.
                    s.close();
                    self.closing.push((cx.now, h));
                }
            }
        }
    }

    /// Route a client request whose head just arrived (its bytes are at
    /// the start of `c.msg`): classify it (SPI, SI), look the nNLM up, and
    /// send it on to the name that gives (see [`sfc`]).
    fn route(&mut self, cx: &mut Context<'_>, id: u64, c: &mut Client, head: &RequestHead) {
        let name = request_name(head);
        let class = match head.headers.get(sfc::NSH_HEADER) {
            Some(v) => match NshHeader::parse(v) {
                Ok(n) => {
                    cx.stats.bump("nsff.classified_header");
                    Classified::Header(n)
                }
                Err(e) => {
                    cx.stats.bump("nsff.sfc_bad_nsh_header");
                    self.canned(c, 400, &e.to_string());
                    return;
                }
            },
            None => {
                let src = cx.ports[c.port]
                    .sockets
                    .get::<tcp::Socket>(c.sock)
                    .remote_endpoint()
                    .map(|e| std_ip(e.addr));
                match self
                    .classifier
                    .classify(src, name.as_ref(), request_path(head))
                {
                    Some(n) => {
                        cx.stats.bump("nsff.classified_rule");
                        Classified::Rule(n)
                    }
                    None => Classified::None,
                }
            }
        };
        let table = self.classic.table();
        let decision = sfc::decide(table, class, name.as_ref(), self.cfg.sfc_required);
        let (fqdn, nsh) = match decision {
            Decision::Unclassified | Decision::End(_) => {
                if matches!(decision, Decision::End(_)) {
                    cx.stats.bump("nsff.sfc_end");
                } else if class == Classified::None {
                    cx.stats.bump("nsff.unclassified");
                }
                let Some(fqdn) = name else {
                    cx.stats.bump("nsff.bad_host");
                    self.canned(c, 400, "no usable Host header: it names the service");
                    return;
                };
                (fqdn, None)
            }
            Decision::ToName {
                fqdn,
                nsh,
                implicit,
            } => {
                cx.stats.bump(if implicit {
                    "nsff.sfc_http_service"
                } else {
                    "nsff.sfc_to_name"
                });
                (fqdn, Some(nsh))
            }
            Decision::NoName(_) => {
                cx.stats.bump("nsff.bad_host");
                self.canned(
                    c,
                    400,
                    "the nNLM row is http-service but the request has no usable Host",
                );
                return;
            }
            Decision::Misdirected(m) => {
                cx.stats.bump("nsff.misdirected_421");
                cx.stats.bump(m.counter());
                self.canned(c, 421, &m.to_string());
                return;
            }
        };
        cx.stats.bump("nsff.requests");
        let local = self.local_sf(&fqdn);
        // The NSH header goes to the SF that gets the request (here, or at
        // the egress, told by the next-hop header); a request routed by its
        // own name carries neither. Whatever the sender put there is gone.
        let mut add = Vec::new();
        if let Some(n) = nsh {
            add.push(("NSH", n.to_string()));
            if local.is_none() {
                add.push(("NSH-Next-Hop", fqdn.as_str().to_owned()));
                cx.stats.bump("nsff.sfc_remote");
            } else {
                cx.stats.bump("nsff.sfc_nsh_added");
            }
        }
        let _ = sfc::edit_head(&mut c.msg, &[sfc::NSH_HEADER, sfc::NEXT_HOP_HEADER], &add);
        if let Some((addr, port)) = local {
            cx.stats.bump("nsff.requests_local");
            let job = self.connect_sf(cx, addr, port, head);
            c.up = Up::Local { job };
            return;
        }
        match self.cache.resolve(cx.now, &fqdn, id) {
            Lookup::Hit(route) => self.open(cx, id, c, route),
            Lookup::Pending => {
                cx.stats.bump("nsff.requests_waiting");
                c.up = Up::Resolving;
            }
            Lookup::Refused => {
                cx.stats.bump("nsff.resolve_refused");
                self.canned(c, 503, "too many names being resolved");
            }
        }
    }

    fn open(&mut self, cx: &mut Context<'_>, id: u64, c: &mut Client, route: Route) {
        if route.serving == self.me {
            // The NR says we serve it, but no local SF has that name.
            cx.stats.bump("nsff.served_here_unknown");
            self.canned(
                c,
                502,
                "the name resolves to this nSFF but no local SF serves it",
            );
            return;
        }
        match self.ep.open(cx.now, route.forward, route.reverse) {
            Ok(txn) => {
                cx.stats.bump("nsff.txns_opened");
                self.txn_client.insert(txn, id);
                c.up = Up::Remote {
                    txn,
                    finished: false,
                    final_head: false,
                };
            }
            Err(_) => {
                cx.stats.bump("nsff.txns_refused");
                self.canned(c, 503, "too many transactions");
            }
        }
    }

    /// Answer the current request with an error and close afterwards.
    fn canned(&mut self, c: &mut Client, status: u16, why: &str) {
        let job = self.new_job(SfJob::canned(status, why));
        c.up = Up::Local { job };
        c.close_after = true;
        c.msg.clear();
        c.inbuf.clear();
        c.msg_done = true;
    }

    /// Work on one client connection; `false` when it is gone.
    /// Whether [`Self::pump_client`] would do nothing for `c` now: an idle
    /// keep-alive connection (no request in progress, nothing buffered
    /// either way), established, with no new bytes, and within its idle
    /// limit. Anything else (bytes, the peer's FIN, a reset, the limit)
    /// makes it not quiet.
    fn quiet(&self, cx: &Context<'_>, c: &Client) -> bool {
        let limit = Duration::from_secs(self.cfg.client_idle_timeout_s);
        if !matches!(c.up, Up::Idle)
            || c.close_after
            || c.msg_done
            || !c.inbuf.is_empty()
            || !c.msg.is_empty()
            || !c.wbuf.is_empty()
            || cx.now - c.active >= limit
        {
            return false;
        }
        cx.ports.get(c.port).is_some_and(|p| {
            let s = p.sockets.get::<tcp::Socket>(c.sock);
            s.state() == tcp::State::Established && !s.can_recv()
        })
    }

    fn pump_client(&mut self, cx: &mut Context<'_>, id: u64, c: &mut Client) -> (bool, bool) {
        let cp = c.port;
        let mut any = false;
        for _ in 0..64 {
            let mut progress = false;
            // Read.
            {
                let s = cx.ports[cp].sockets.get_mut::<tcp::Socket>(c.sock);
                while !c.close_after
                    && c.inbuf.len() < BUF_HIGH
                    && c.msg.len() < BUF_HIGH
                    && s.can_recv()
                {
                    // Straight from the socket's ring: no scratch buffer
                    // to clear on every call.
                    let inbuf = &mut c.inbuf;
                    let took = s.recv(|buf| {
                        let n = buf.len().min(CHUNK);
                        inbuf.extend_from_slice(&buf[..n]);
                        (n, n)
                    });
                    match took {
                        Ok(0) | Err(_) => break,
                        Ok(_) => progress = true,
                    }
                }
            }
            // Decode the current request.
            while !c.msg_done
                && (!c.inbuf.is_empty() || c.dec.framing().is_some())
                && c.msg.len() < BUF_HIGH
            {
                match c.dec.decode(&c.inbuf) {
                    Ok((n, ev)) => {
                        let ev = match ev {
                            Decoded::Head(h) => Some(Some(h)),
                            Decoded::End => Some(None),
                            Decoded::NeedMore | Decoded::Closed | Decoded::Data(_) => None,
                        };
                        c.msg.extend(c.inbuf.drain(..n));
                        progress |= n > 0;
                        match ev {
                            Some(Some(h)) => {
                                if !h.keep_alive() {
                                    c.close_after = true;
                                }
                                c.rdec.set_head_request(h.is_head());
                                if h.target.starts_with("http://") {
                                    // Explicit proxy: the SF gets origin-form.
                                    origin_form(&mut c.msg, &h.target);
                                    cx.stats.bump("nsff.absolute_form");
                                }
                                self.route(cx, id, c, &h);
                            }
                            Some(None) => c.msg_done = true,
                            None if n == 0 => break,
                            None => {}
                        }
                    }
                    Err(e) => {
                        cx.stats.bump("nsff.bad_request");
                        self.canned(c, e.status(), &format!("bad request: {e}"));
                        progress = true;
                    }
                }
            }
            // Upstream.
            match c.up {
                Up::Idle | Up::Resolving => {}
                Up::Remote {
                    txn,
                    mut finished,
                    mut final_head,
                } => {
                    if !c.msg.is_empty() {
                        // A complete request takes its end marker along
                        // (one window, not two: docs/bench.md).
                        let last = c.msg_done;
                        let sent = if last {
                            self.ep.send_last(cx.now, txn, &c.msg)
                        } else {
                            self.ep.send(cx.now, txn, &c.msg)
                        };
                        if let Ok(n) = sent {
                            c.msg.drain(..n);
                            progress |= n > 0;
                            finished |= last && c.msg.is_empty();
                        }
                    }
                    if c.msg_done && c.msg.is_empty() && !finished {
                        let _ = self.ep.finish(cx.now, txn);
                        finished = true;
                        progress = true;
                    }
                    c.up = Up::Remote {
                        txn,
                        finished,
                        final_head,
                    };
                    let mut tmp = [0u8; CHUNK];
                    while c.wbuf.len() < BUF_HIGH {
                        match self.ep.recv(cx.now, txn, &mut tmp) {
                            Ok(Some(0)) => {
                                cx.stats.bump("nsff.responses_remote");
                                self.txn_client.remove(&txn);
                                c.up = Up::Idle;
                                c.msg_done = false;
                                c.rdec = ResponseDecoder::new(streaming());
                                progress = true;
                                break;
                            }
                            Ok(Some(n)) => {
                                let w = watch_response(&mut c.rdec, &mut final_head, &tmp[..n]);
                                // Bytes after the response's framing would
                                // answer the client's next request.
                                let keep = w.end.unwrap_or(n);
                                c.wbuf.extend_from_slice(&tmp[..keep]);
                                if keep < n {
                                    cx.stats.add("nsff.bytes_after_response", (n - keep) as u64);
                                }
                                c.close_after |= w.close;
                                progress = true;
                                if w.complete && finished {
                                    // The client has the whole response:
                                    // its next request need not wait for
                                    // the end marker (docs/nsff.md).
                                    cx.stats.bump("nsff.responses_remote");
                                    self.txn_client.remove(&txn);
                                    self.detached.insert(txn);
                                    self.drain_detached(cx, txn);
                                    if self.detached.contains(&txn) {
                                        cx.stats.bump("nsff.responses_before_end");
                                    }
                                    c.up = Up::Idle;
                                    c.msg_done = false;
                                    c.rdec = ResponseDecoder::new(streaming());
                                    break;
                                }
                                c.up = Up::Remote {
                                    txn,
                                    finished,
                                    final_head,
                                };
                            }
                            Ok(None) => break,
                            Err(_) => {
                                // The transaction failed; the event handler
                                // already counted it.
                                cx.stats.bump("nsff.txn_lost");
                                self.txn_client.remove(&txn);
                                if c.wbuf.is_empty() {
                                    let job = self.new_job(SfJob::canned(
                                        504,
                                        "the transaction to the serving nSFF failed",
                                    ));
                                    c.up = Up::Local { job };
                                } else {
                                    c.up = Up::Idle;
                                }
                                c.close_after = true;
                                c.msg_done = true;
                                progress = true;
                                break;
                            }
                        }
                    }
                }
                Up::Local { job } => {
                    if let Some(j) = self.jobs.get_mut(&job) {
                        if j.sock.is_some() && !j.resp_done {
                            // At most BUF_HIGH queued toward the SF: the
                            // rest waits in `msg`, whose limit stops the
                            // reads (the client's window closes).
                            if j.req.len() < BUF_HIGH {
                                j.req.append(&mut c.msg);
                            }
                            j.req_done = c.msg_done && c.msg.is_empty();
                        } else {
                            // A canned answer, or the SF answered before
                            // the request ended: the rest goes nowhere.
                            c.msg.clear();
                        }
                        if let Some(ps) = cx.ports.get_mut(self.cfg.sf_port()) {
                            progress |= j.pump(&mut ps.sockets, cx.stats);
                        }
                        if let (Some(ev), Some(t)) = (j.evidence.take(), j.target) {
                            self.evidence.push((t, ev));
                        }
                        if !j.resp.is_empty() && c.wbuf.len() < BUF_HIGH {
                            c.wbuf.append(&mut j.resp);
                            progress = true;
                        }
                        if j.close_client {
                            c.close_after = true;
                        }
                        let done = j.resp_done && j.resp.is_empty();
                        if done && (c.msg_done || c.close_after) {
                            cx.stats.bump("nsff.responses_local");
                            self.remove_job(cx, job);
                            c.up = Up::Idle;
                            c.msg_done = false;
                            progress = true;
                        }
                    } else {
                        c.up = Up::Idle;
                    }
                }
            }
            // Write.
            let s = cx.ports[cp].sockets.get_mut::<tcp::Socket>(c.sock);
            if !c.wbuf.is_empty() && s.can_send() {
                if let Ok(n) = s.send_slice(&c.wbuf) {
                    c.wbuf.drain(..n);
                    progress |= n > 0;
                }
            }
            any |= progress;
            if progress {
                c.active = cx.now;
            }
            if !progress {
                break;
            }
        }
        let s = cx.ports[cp].sockets.get_mut::<tcp::Socket>(c.sock);
        let idle = matches!(c.up, Up::Idle) && c.wbuf.is_empty();
        // The peer's FIN (a fresh connection is SynReceived, not closing).
        let peer_done = s.state() == tcp::State::CloseWait;
        if idle && (c.close_after || peer_done && c.inbuf.is_empty()) {
            s.close();
        }
        // An idle keep-alive connection (waiting for a request, or a client
        // that stopped reading) is dropped after `client_idle_timeout_s`.
        let limit = Duration::from_secs(self.cfg.client_idle_timeout_s);
        let waiting = matches!(c.up, Up::Idle) || !c.wbuf.is_empty();
        if waiting && cx.now - c.active >= limit {
            cx.stats.bump("nsff.clients_idle_closed");
            s.abort();
        }
        let gone = matches!(s.state(), tcp::State::Closed | tcp::State::TimeWait);
        (any, !gone)
    }

    /// Read a detached transaction (its client has the whole response) up
    /// to its end marker, so that it closes; forget it then, or when it
    /// failed. Bytes after the response's framing are dropped and counted.
    fn drain_detached(&mut self, cx: &mut Context<'_>, txn: Txn) {
        let mut tmp = [0u8; 512];
        loop {
            match self.ep.recv(cx.now, txn, &mut tmp) {
                Ok(Some(0)) | Err(_) => {
                    self.detached.remove(&txn);
                    return;
                }
                Ok(Some(n)) => cx.stats.add("nsff.bytes_after_response", n as u64),
                Ok(None) => return,
            }
        }
    }

    fn drop_client(&mut self, cx: &mut Context<'_>, c: Client) {
        match c.up {
            Up::Remote { txn, .. } => {
                self.ep.abort(txn);
                self.txn_client.remove(&txn);
            }
            Up::Local { job } => self.remove_job(cx, job),
            Up::Idle | Up::Resolving => {}
        }
        let ps = &mut cx.ports[c.port];
        ps.sockets.get_mut::<tcp::Socket>(c.sock).abort();
        self.aborted.push((c.port, c.sock));
        if let Some(p) = self.pools.get_mut(c.pool) {
            p.release();
        }
        cx.stats.bump("nsff.clients_closed");
    }

    fn pump_egress(&mut self, cx: &mut Context<'_>, txn: Txn, e: &mut Egress) -> bool {
        if e.tls.is_some() {
            return self.pump_egress_tls(cx, e);
        }
        let mut any = false;
        let mut tmp = [0u8; CHUNK];
        while !e.req_eof && e.held.len() < BUF_HIGH {
            match self.ep.recv(cx.now, txn, &mut tmp) {
                Ok(Some(0)) => {
                    e.req_eof = true;
                    any = true;
                }
                Ok(Some(n)) => {
                    e.held.extend_from_slice(&tmp[..n]);
                    any = true;
                }
                Ok(None) | Err(_) => break,
            }
        }
        if e.job.is_none() && e.held.first().copied().is_some_and(tls::is_tls_start) {
            // No request line starts with a TLS handshake record: this
            // transaction is a passthrough session (see `docs/nsff.md`).
            let mut p = Pipe::new(End::Txn(txn));
            p.ab = std::mem::take(&mut e.held);
            p.a_eof = e.req_eof;
            e.tls = Some(p);
            return self.pump_egress_tls(cx, e) || any;
        }
        if e.job.is_none() && !e.held.is_empty() {
            // Find the head (the bytes stay in `held`; `scanned` of them
            // went through the decoder already).
            while let Some(input) = e.held.get(e.scanned..) {
                match e.dec.decode(input) {
                    Ok((n, Decoded::Head(h))) => {
                        e.scanned += n;
                        let name = match h.headers.get(sfc::NEXT_HOP_HEADER) {
                            // The ingress chose the SF by the nNLM: deliver
                            // to it (with the NSH header, without this one).
                            Some(v) => {
                                cx.stats.bump("nsff.egress_sfc");
                                if let Some(d) =
                                    sfc::edit_head(&mut e.held, &[sfc::NEXT_HOP_HEADER], &[])
                                {
                                    e.scanned = e.scanned.saturating_add_signed(d);
                                }
                                std::str::from_utf8(v)
                                    .ok()
                                    .and_then(|v| Fqdn::new(&v.trim().to_ascii_lowercase()).ok())
                            }
                            None => request_name(&h),
                        };
                        let sf = name.as_ref().and_then(|n| self.local_sf(n));
                        e.job = Some(match sf {
                            Some((addr, port)) => {
                                cx.stats.bump("nsff.egress_requests");
                                self.connect_sf(cx, addr, port, &h)
                            }
                            None => {
                                cx.stats.bump("nsff.egress_no_sf");
                                self.new_job(SfJob::canned(
                                    502,
                                    "no local service function for that name",
                                ))
                            }
                        });
                        any = true;
                        break;
                    }
                    Ok((n, Decoded::NeedMore)) => {
                        e.scanned += n;
                        break;
                    }
                    Ok((n, _)) => {
                        e.scanned += n;
                        if n == 0 {
                            break;
                        }
                    }
                    Err(err) => {
                        cx.stats.bump("nsff.egress_bad_request");
                        e.job =
                            Some(self.new_job(SfJob::canned(400, &format!("bad request: {err}"))));
                        break;
                    }
                }
            }
        }
        let Some(jid) = e.job else {
            if e.req_eof {
                // Ended before a head.
                e.job = Some(self.new_job(SfJob::canned(400, "empty request")));
            }
            return any;
        };
        let Some(j) = self.jobs.get_mut(&jid) else {
            return any;
        };
        if j.sock.is_some() && !j.resp_done {
            // Decode the rest to know where the request ends (the end
            // marker of the transaction may come a window later).
            while !e.req_complete {
                let Some(input) = e.held.get(e.scanned..) else {
                    break;
                };
                match e.dec.decode(input) {
                    Ok((n, ev)) => {
                        e.scanned += n;
                        match ev {
                            Decoded::End => e.req_complete = true,
                            Decoded::NeedMore => break,
                            _ if n == 0 => break,
                            _ => {}
                        }
                    }
                    Err(_) => break,
                }
            }
            // At most BUF_HIGH queued toward the SF; `held` has its own
            // limit, which stops reading the transaction.
            if j.req.len() < BUF_HIGH {
                j.req.append(&mut e.held);
                e.scanned = 0;
            }
            j.req_done = (e.req_eof || e.req_complete) && e.held.is_empty();
        } else {
            e.held.clear();
            e.scanned = 0;
        }
        if let Some(ps) = cx.ports.get_mut(self.cfg.sf_port()) {
            any |= j.pump(&mut ps.sockets, cx.stats);
        }
        if let (Some(ev), Some(t)) = (j.evidence.take(), j.target) {
            self.evidence.push((t, ev));
        }
        let mut ended = false;
        if !j.resp.is_empty() {
            // A complete response takes its end marker along (one window).
            let sent = if j.resp_done {
                self.ep.send_last(cx.now, txn, &j.resp)
            } else {
                self.ep.send(cx.now, txn, &j.resp)
            };
            if let Ok(n) = sent {
                j.resp.drain(..n);
                any |= n > 0;
                ended = j.resp_done && j.resp.is_empty();
            }
        }
        if j.resp_done && j.resp.is_empty() && !e.finished {
            if !ended {
                let _ = self.ep.finish(cx.now, txn);
            }
            e.finished = true;
            cx.stats.bump("nsff.egress_responses");
            self.remove_job(cx, jid);
            any = true;
        }
        any
    }

    fn events(&mut self, cx: &mut Context<'_>) -> bool {
        let mut any = false;
        while let Some(ev) = self.ep.poll_event() {
            any = true;
            match ev {
                Event::Opened { txn, .. } => {
                    cx.stats.bump("nsff.txns_accepted");
                    self.egress.insert(
                        txn,
                        Egress {
                            dec: RequestDecoder::new(streaming()),
                            held: Vec::new(),
                            scanned: 0,
                            req_complete: false,
                            req_eof: false,
                            job: None,
                            finished: false,
                            tls: None,
                        },
                    );
                }
                Event::Closed { txn } => {
                    cx.stats.bump("nsff.txns_closed");
                    if let Some(e) = self.egress.remove(&txn) {
                        if let Some(j) = e.job {
                            self.remove_job(cx, j);
                        }
                        if let Some(b) = e.tls.and_then(|p| p.b) {
                            self.release_end(cx, b, false);
                        }
                    }
                }
                Event::Readable { txn } | Event::Finished { txn }
                    if self.detached.contains(&txn) =>
                {
                    self.drain_detached(cx, txn);
                }
                Event::Failed { txn, reason } => {
                    cx.stats
                        .bump(&format!("nsff.txns_failed_{}", reason.as_str()));
                    self.detached.remove(&txn);
                    if let Some(e) = self.egress.remove(&txn) {
                        if let Some(j) = e.job {
                            self.remove_job(cx, j);
                        }
                        if let Some(b) = e.tls.and_then(|p| p.b) {
                            cx.stats.bump("nsff.egress_tls_lost");
                            self.release_end(cx, b, true);
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
                    for id in waiters {
                        if let Some(mut t) = self.tls.remove(&id) {
                            if matches!(t.stage, TlsStage::Resolving(_)) {
                                self.open_tls(cx, &mut t, route);
                            }
                            self.tls.insert(id, t);
                            continue;
                        }
                        let Some(mut c) = self.clients.remove(&id) else {
                            continue;
                        };
                        if matches!(c.up, Up::Resolving) {
                            self.open(cx, id, &mut c, route);
                        }
                        self.clients.insert(id, c);
                    }
                }
                CacheEvent::Failed {
                    reason, waiters, ..
                } => {
                    let (status, why, counter) = match reason {
                        Unresolved::NotFound => (502, "unknown service name", "nsff.unknown_name"),
                        Unresolved::Timeout => {
                            (504, "name resolver did not answer", "nsff.nr_timeout")
                        }
                    };
                    for id in waiters {
                        if let Some(mut t) = self.tls.remove(&id) {
                            if matches!(t.stage, TlsStage::Resolving(_)) {
                                let (counter, alert) = match reason {
                                    Unresolved::NotFound => {
                                        ("nsff.tls_unknown_name", Alert::UnrecognizedName)
                                    }
                                    Unresolved::Timeout => {
                                        ("nsff.tls_nr_timeout", Alert::InternalError)
                                    }
                                };
                                cx.stats.bump(counter);
                                self.refuse_tls(cx, &mut t, Some(alert));
                            }
                            self.tls.insert(id, t);
                            continue;
                        }
                        cx.stats.bump(counter);
                        let Some(mut c) = self.clients.remove(&id) else {
                            continue;
                        };
                        if matches!(c.up, Up::Resolving) {
                            self.canned(&mut c, status, why);
                        }
                        self.clients.insert(id, c);
                    }
                }
            }
        }
        any
    }

    fn handle_gff(&mut self, now: Instant, stats: &mut Counters, repr: &gff::Repr, payload: &[u8]) {
        match repr.msg_type {
            MessageType::TransportData | MessageType::TransportNack => {
                if self
                    .ep
                    .handle_packet(now, repr.path_id, repr.msg_type, payload)
                    .is_err()
                {
                    stats.bump("nsff.transport_rejected");
                }
            }
            MessageType::PathResponse | MessageType::PathUpdate => {
                match nr::Repr::parse(repr.msg_type, payload) {
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
                            self.register_now = true;
                            if self.cache.prepopulate().is_err() {
                                stats.bump("nsff.prepopulate_failed");
                            }
                        }
                    }
                    _ => stats.drop("nsff_nr_malformed"),
                }
            }
            MessageType::LinkHello => stats.bump("nsff.hellos_ignored"),
            _ => stats.drop("nsff_gff_unexpected_type"),
        }
    }
}

/// TLS passthrough (SPEC §1.3: one TCP session = one transaction in each
/// direction; §1.4: the ClientHello's SNI names the service).
impl Nsff {
    /// Work on one TLS session; `(progress, alive)`.
    fn pump_tls(&mut self, cx: &mut Context<'_>, id: u64, t: &mut TlsSession) -> (bool, bool) {
        let mut any = false;
        for _ in 0..64 {
            let limit = if t.stage == TlsStage::Hello {
                tls::MAX_BUFFER
            } else {
                BUF_HIGH
            };
            let (up, down) = (t.pipe.ab_bytes, t.pipe.ba_bytes);
            let moved = t.pipe.pump(cx.now, cx.ports, &mut self.ep, limit);
            if matches!(t.stage, TlsStage::Relay { .. } | TlsStage::Done) {
                cx.stats.add("nsff.tls_bytes_up", t.pipe.ab_bytes - up);
                cx.stats.add("nsff.tls_bytes_down", t.pipe.ba_bytes - down);
            }
            let mut progress = match moved {
                Ok(p) => p,
                Err(Side::A) => {
                    // The client reset the connection (or it never came up).
                    if !matches!(t.stage, TlsStage::Closing | TlsStage::Done) {
                        cx.stats.bump("nsff.tls_client_reset");
                    }
                    if let Some(b) = t.pipe.b.take() {
                        self.release_end(cx, b, true);
                    }
                    return (true, false);
                }
                Err(Side::B) => {
                    // The SF reset or was unreachable, or the transaction
                    // failed.
                    cx.stats.bump("nsff.tls_upstream_lost");
                    self.refuse_tls(cx, t, Some(Alert::InternalError));
                    true
                }
            };
            if t.stage == TlsStage::Hello {
                match tls::peek(&t.pipe.ab) {
                    Peek::NeedMore => {
                        if t.pipe.a_eof {
                            cx.stats.bump("nsff.tls_truncated");
                            self.refuse_tls(cx, t, None);
                            progress = true;
                        }
                    }
                    Peek::Refused(r) => {
                        cx.stats.bump(&format!("nsff.tls_{}", r.as_str()));
                        self.refuse_tls(cx, t, r.alert());
                        progress = true;
                    }
                    Peek::Name { name, .. } => {
                        cx.stats.bump("nsff.tls_sessions");
                        self.route_tls(cx, id, t, name);
                        progress = true;
                    }
                }
            }
            if matches!(t.stage, TlsStage::Relay { .. }) && t.pipe.done() {
                cx.stats.bump("nsff.tls_completed");
                t.stage = TlsStage::Done;
            }
            any |= progress;
            if progress {
                t.active = cx.now;
            } else {
                break;
            }
        }
        let End::Tcp { port, sock } = t.pipe.a else {
            return (any, false);
        };
        let s = cx.ports[port].sockets.get_mut::<tcp::Socket>(sock);
        // Nothing either way for `client_idle_timeout_s`: closed.
        let limit = Duration::from_secs(self.cfg.client_idle_timeout_s);
        if cx.now - t.active >= limit {
            cx.stats.bump("nsff.tls_idle_closed");
            s.abort();
        }
        let gone = matches!(s.state(), tcp::State::Closed | tcp::State::TimeWait);
        (any, !gone)
    }

    /// The ClientHello named `name`: a local SF's TLS port, or the name
    /// is resolved like an HTTP request's and one transaction opened.
    fn route_tls(&mut self, cx: &mut Context<'_>, id: u64, t: &mut TlsSession, name: Fqdn) {
        if let Some((addr, port)) = self.local_sf_tls(&name) {
            match self.connect_tcp(cx, addr, port) {
                Ok(sock) => {
                    cx.stats.bump("nsff.tls_sessions_local");
                    t.pipe.b = Some(End::Tcp {
                        port: self.cfg.sf_port(),
                        sock,
                    });
                    t.stage = TlsStage::Relay { name, local: true };
                }
                Err(_) => {
                    cx.stats.bump("nsff.tls_sf_failed");
                    self.refuse_tls(cx, t, Some(Alert::InternalError));
                }
            }
            return;
        }
        match self.cache.resolve(cx.now, &name, id) {
            Lookup::Hit(route) => {
                t.stage = TlsStage::Resolving(name);
                self.open_tls(cx, t, route);
            }
            Lookup::Pending => {
                cx.stats.bump("nsff.tls_waiting");
                t.stage = TlsStage::Resolving(name);
            }
            Lookup::Refused => {
                cx.stats.bump("nsff.tls_resolve_refused");
                self.refuse_tls(cx, t, Some(Alert::InternalError));
            }
        }
    }

    /// The name of a resolving session resolved: one transaction carries
    /// the whole session.
    fn open_tls(&mut self, cx: &mut Context<'_>, t: &mut TlsSession, route: Route) {
        let TlsStage::Resolving(name) = &t.stage else {
            return;
        };
        let name = name.clone();
        if route.serving == self.me {
            cx.stats.bump("nsff.tls_served_here_unknown");
            self.refuse_tls(cx, t, Some(Alert::UnrecognizedName));
            return;
        }
        match self.ep.open(cx.now, route.forward, route.reverse) {
            Ok(txn) => {
                cx.stats.bump("nsff.tls_sessions_remote");
                t.pipe.b = Some(End::Txn(txn));
                t.stage = TlsStage::Relay { name, local: false };
            }
            Err(_) => {
                cx.stats.bump("nsff.tls_txns_refused");
                self.refuse_tls(cx, t, Some(Alert::InternalError));
            }
        }
    }

    /// End a session without (or without more of) its upstream: `alert`
    /// to the client if no upstream byte reached it yet and then a FIN;
    /// otherwise the TLS stream cannot end cleanly and the client gets a
    /// reset.
    fn refuse_tls(&mut self, cx: &mut Context<'_>, t: &mut TlsSession, alert: Option<Alert>) {
        let record = alert.map(Alert::record);
        let (b, clean) = t.pipe.cut(record.as_ref().map(|r| &r[..]));
        if let Some(b) = b {
            self.release_end(cx, b, true);
        }
        t.stage = TlsStage::Closing;
        if !clean {
            if let End::Tcp { port, sock } = t.pipe.a {
                cx.ports[port].sockets.get_mut::<tcp::Socket>(sock).abort();
            }
        }
    }

    fn drop_tls(&mut self, cx: &mut Context<'_>, mut t: TlsSession) {
        if let Some(b) = t.pipe.b.take() {
            let done = t.pipe.done();
            self.release_end(cx, b, !done);
        }
        if let End::Tcp { port, sock } = t.pipe.a {
            cx.ports[port].sockets.get_mut::<tcp::Socket>(sock).abort();
            self.aborted.push((port, sock));
        }
        if let Some(p) = self.pools.get_mut(t.pool) {
            p.release();
        }
        cx.stats.bump("nsff.tls_closed");
    }

    /// Let go of a relay end: a transaction is forgotten if `abort` (else it
    /// lingers in the endpoint); a connection is reset and removed if
    /// `abort`, else closed and swept once its FIN went out.
    fn release_end(&mut self, cx: &mut Context<'_>, end: End, abort: bool) {
        match end {
            End::Tcp { port, sock } => {
                let Some(ps) = cx.ports.get_mut(port) else {
                    return;
                };
                let s = ps.sockets.get_mut::<tcp::Socket>(sock);
                if abort || matches!(s.state(), tcp::State::Closed | tcp::State::TimeWait) {
                    s.abort();
                    ps.sockets.remove(sock);
                } else {
                    s.close();
                    self.closing.push((cx.now, sock));
                }
            }
            End::Txn(txn) => {
                if abort {
                    self.ep.abort(txn);
                }
            }
        }
    }

    /// An egress transaction that carries a TLS session: read its
    /// ClientHello, connect to the SF that serves the SNI name on its TLS
    /// port, then relay.
    fn pump_egress_tls(&mut self, cx: &mut Context<'_>, e: &mut Egress) -> bool {
        let Some(mut p) = e.tls.take() else {
            return false;
        };
        let mut any = false;
        for _ in 0..64 {
            let hello = p.b.is_none() && !p.cut;
            let limit = if hello { tls::MAX_BUFFER } else { BUF_HIGH };
            let mut progress = match p.pump(cx.now, cx.ports, &mut self.ep, limit) {
                Ok(x) => x,
                Err(Side::A) => {
                    // The transaction is gone (its Failed event cleans up).
                    if let Some(b) = p.b.take() {
                        cx.stats.bump("nsff.egress_tls_lost");
                        self.release_end(cx, b, true);
                    }
                    p.cut = true;
                    p.a_eof = true;
                    p.a_fin = true;
                    break;
                }
                Err(Side::B) => {
                    cx.stats.bump("nsff.egress_tls_sf_lost");
                    let record = Alert::InternalError.record();
                    if let (Some(b), _) = p.cut(Some(&record)) {
                        self.release_end(cx, b, true);
                    }
                    true
                }
            };
            if hello {
                let refused = match tls::peek(&p.ab) {
                    Peek::NeedMore if p.a_eof => Some(("nsff.egress_tls_truncated".into(), None)),
                    Peek::NeedMore => None,
                    Peek::Refused(r) => {
                        Some((format!("nsff.egress_tls_{}", r.as_str()), r.alert()))
                    }
                    Peek::Name { name, .. } => match self.local_sf_tls(&name) {
                        Some((addr, port)) => match self.connect_tcp(cx, addr, port) {
                            Ok(sock) => {
                                cx.stats.bump("nsff.egress_tls_sessions");
                                p.b = Some(End::Tcp {
                                    port: self.cfg.sf_port(),
                                    sock,
                                });
                                progress = true;
                                None
                            }
                            Err(_) => Some((
                                "nsff.egress_tls_sf_failed".into(),
                                Some(Alert::InternalError),
                            )),
                        },
                        None => Some((
                            "nsff.egress_tls_no_sf".into(),
                            Some(Alert::UnrecognizedName),
                        )),
                    },
                };
                if let Some((counter, alert)) = refused {
                    cx.stats.bump(&counter);
                    let record = alert.map(Alert::record);
                    let _ = p.cut(record.as_ref().map(|r| &r[..]));
                    progress = true;
                }
            }
            any |= progress;
            if !progress {
                break;
            }
        }
        e.tls = Some(p);
        any
    }

    /// A new connection from `sf_port` to (addr, port).
    fn connect_tcp(
        &mut self,
        cx: &mut Context<'_>,
        addr: IpAddress,
        port: u16,
    ) -> Result<SocketHandle, ConnectError> {
        let local = self.next_local_port;
        self.next_local_port = if local == u16::MAX { 49152 } else { local + 1 };
        let ps = cx
            .ports
            .get_mut(self.cfg.sf_port())
            .ok_or(ConnectError::NoPort)?;
        let mut s = tcp::Socket::new(
            tcp::SocketBuffer::new(vec![0; SOCK_BUF]),
            tcp::SocketBuffer::new(vec![0; SOCK_BUF]),
        );
        s.set_nagle_enabled(false);
        s.set_timeout(Some(Duration::from_secs(10)));
        if let Err(e) = s.connect(ps.iface.context(), (addr, port), local) {
            log::debug!("nsff: connect to SF {addr}:{port}: {e}");
            return Err(ConnectError::Connect);
        }
        Ok(ps.sockets.add(s))
    }

    /// `ctl <node> transparent`.
    fn transparent_control(&self) -> Value {
        let Some(t) = &self.transparent else {
            return json!({ "enabled": false });
        };
        json!({
            "enabled": true,
            "scope": t.scope().to_string(),
            "ports": t.ports(),
            "recent": self.intercepted.iter().map(Intercepted::json).collect::<Vec<Value>>(),
        })
    }

    /// `ctl <node> tls`.
    fn tls_control(&self) -> Value {
        let stage = |s: &TlsStage| match s {
            TlsStage::Hello => ("hello", None),
            TlsStage::Resolving(n) => ("resolving", Some(n.as_str().to_owned())),
            TlsStage::Relay { name, local: true } => ("local", Some(name.as_str().to_owned())),
            TlsStage::Relay { name, .. } => ("remote", Some(name.as_str().to_owned())),
            TlsStage::Closing => ("closing", None),
            TlsStage::Done => ("done", None),
        };
        let sessions: Vec<Value> = self
            .tls
            .iter()
            .map(|(id, t)| {
                let (st, name) = stage(&t.stage);
                let txn = match t.pipe.b {
                    Some(End::Txn(txn)) => Some(txn.value()),
                    _ => None,
                };
                json!({
                    "id": id, "stage": st, "name": name, "txn": txn,
                    "bytes_up": t.pipe.ab_bytes, "bytes_down": t.pipe.ba_bytes,
                })
            })
            .collect();
        let egress: Vec<Value> = self
            .egress
            .iter()
            .filter_map(|(txn, e)| {
                let p = e.tls.as_ref()?;
                Some(json!({
                    "txn": txn.value(), "connected": p.b.is_some(), "cut": p.cut,
                    "bytes_to_sf": p.ab_bytes, "bytes_from_sf": p.ba_bytes,
                }))
            })
            .collect();
        json!({
            "https_port": self.cfg.https_port,
            "sessions": sessions,
            "egress": egress,
        })
    }
}

/// Why [`Nsff::connect_tcp`] failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ConnectError {
    /// `sf_port` does not exist.
    NoPort,
    /// smoltcp refused (no route, no free local port).
    Connect,
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
        "nack_suppressed": e.nack_suppressed,
    })
}

/// Decoder limits of the proxy: heads are bounded, bodies are not. The
/// nSFF streams every body through and never holds one whole, so the
/// default 16 MiB body cap would only refuse large transfers (413 for a
/// request, 502 for a response).
fn streaming() -> Limits {
    Limits {
        max_body_bytes: u64::MAX,
        ..Limits::default()
    }
}

/// Feed response bytes to `dec` to see its final head: whether the client
/// connection must close after the response (it says `Connection: close`,
/// its body ends by close, or it is broken), and whether the final response
/// is complete by its own framing. `final_head` carries between calls that
/// the final (not 1xx) head has been seen.
fn watch_response(dec: &mut ResponseDecoder, final_head: &mut bool, mut bytes: &[u8]) -> Watched {
    let mut w = Watched::default();
    let mut seen = 0;
    loop {
        let Ok((n, ev)) = dec.decode(bytes) else {
            w.close = true;
            return w;
        };
        match &ev {
            Decoded::Head(h) => {
                let interim = (100..200).contains(&h.status) && h.status != 101;
                if !interim && (!h.keep_alive() || dec.framing() == Some(Framing::UntilClose)) {
                    w.close = true;
                }
                // 101 hands the connection over: never "complete".
                *final_head = !interim && h.status != 101;
            }
            Decoded::End if *final_head => {
                *final_head = false;
                w.complete = true;
                w.end.get_or_insert(seen + n);
            }
            _ => {}
        }
        seen += n;
        bytes = &bytes[n..];
        // `End` may come after the last body byte, consuming nothing: ask
        // once more; `NeedMore` says everything was seen.
        let ended = matches!(ev, Decoded::End);
        if matches!(ev, Decoded::NeedMore) || n == 0 && !ended {
            return w;
        }
    }
}

/// What [`watch_response`] saw in a remote response's bytes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Watched {
    /// The client connection must close after this response.
    close: bool,
    /// The final response ended, by its own framing.
    complete: bool,
    /// Where in the bytes it ended: what follows is not the client's.
    end: Option<usize>,
}

/// Replace the absolute-form `target` in the request line at the start of
/// `head` by its origin form (the path, `/` if none).
fn origin_form(head: &mut Vec<u8>, target: &str) {
    let line_end = head
        .windows(2)
        .position(|w| w == b"\r\n")
        .unwrap_or(head.len());
    let Some(at) = head[..line_end]
        .windows(target.len())
        .position(|w| w == target.as_bytes())
    else {
        return;
    };
    let rest = target.strip_prefix("http://").unwrap_or(target);
    let path = rest.find('/').map_or("/", |i| &rest[i..]);
    head.splice(at..at + target.len(), path.bytes());
}

/// The path of a request's target (absolute-form: after the authority).
fn request_path(h: &RequestHead) -> &str {
    match h.target.strip_prefix("http://") {
        Some(rest) => rest.find('/').map_or("/", |i| &rest[i..]),
        None => &h.target,
    }
}

/// `addr:port`, IPv6 in brackets.
fn socket_addr(e: IpEndpoint) -> std::net::SocketAddr {
    std::net::SocketAddr::new(std_ip(e.addr), e.port)
}

/// Append the SFs saved in the state file to `sfs` (the config ones) as
/// REST SFs: (restored, dropped). One the node file now configures (by
/// name or name hash) or beyond `max_sfs` is dropped with a warning: the
/// node file wins, and the state file forgets it at the next change. A
/// name that is not an FQDN means the file is not ours to trust: an error.
fn restore(
    sfs: &mut Vec<LocalSf>,
    saved: Vec<SfConfig>,
    max_sfs: usize,
    store: &SfStore,
) -> Result<(u64, u64), ConfigError> {
    let (mut restored, mut dropped) = (0, 0);
    for c in saved {
        let fqdn = Fqdn::new(&c.fqdn.to_ascii_lowercase()).map_err(|_| {
            ConfigError::StateFile(format!("{}: bad fqdn {:?}", store.path().display(), c.fqdn))
        })?;
        let clash = sfs
            .iter()
            .find(|s| s.fqdn == fqdn || s.fqdn.hash() == fqdn.hash());
        if let Some(e) = clash {
            log::warn!(
                "nsff: {}: SF {fqdn} dropped, it clashes with {} ({})",
                store.path().display(),
                e.fqdn,
                if e.rest {
                    "saved twice"
                } else {
                    "in the node file"
                }
            );
            dropped += 1;
            continue;
        }
        if sfs.len() >= max_sfs {
            log::warn!(
                "nsff: {}: SF {fqdn} dropped, max_sfs = {max_sfs} reached",
                store.path().display()
            );
            dropped += 1;
            continue;
        }
        log::info!(
            "nsff: restored REST SF {fqdn} at {}:{} from {}",
            c.addr,
            c.port,
            store.path().display()
        );
        sfs.push(LocalSf {
            fqdn,
            addr: IpAddress::from(c.addr),
            port: c.port,
            tls_port: c.tls_port,
            rest: true,
            health: Health::new(),
            probe: None,
        });
        restored += 1;
    }
    Ok((restored, dropped))
}

fn std_ip(a: IpAddress) -> std::net::IpAddr {
    match a {
        IpAddress::Ipv4(a) => std::net::IpAddr::V4(a),
        IpAddress::Ipv6(a) => std::net::IpAddr::V6(a),
    }
}

/// The service a request names: the authority of an absolute-form target
/// (explicit proxy), else the `Host` header; without port, lowercased.
fn request_name(h: &RequestHead) -> Option<Fqdn> {
    let target = h
        .target
        .strip_prefix("http://")
        .map(|rest| rest.split('/').next().unwrap_or(rest));
    let host = match target {
        Some(t) => t,
        None => std::str::from_utf8(h.headers.get("host")?).ok()?,
    };
    let name = strip_port(host.trim()).to_ascii_lowercase();
    Fqdn::new(&name).ok()
}

fn strip_port(h: &str) -> &str {
    if h.starts_with('[') {
        return h;
    }
    match h.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => h,
    }
}

/// A complete error response with a plain-text body saying why.
fn error_response(status: u16, why: &str) -> Vec<u8> {
    let reason = match status {
        400 => "Bad Request",
        413 => "Content Too Large",
        421 => "Misdirected Request",
        431 => "Request Header Fields Too Large",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Error",
    };
    let body = format!("nsff: {why}\n");
    format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn parse_gff(frame: &[u8]) -> Option<Result<(gff::Repr, core::ops::Range<usize>), &'static str>> {
    if frame.get(12..14)? != ETHERTYPE_IPV6 || *frame.get(ETH_LEN + 6)? != gff::NEXT_HEADER {
        return None;
    }
    let Some(ip) = frame.get(ETH_LEN..ETH_LEN + IPV6_LEN) else {
        return Some(Err("gff_truncated"));
    };
    let plen = usize::from(u16::from_be_bytes([ip[4], ip[5]]));
    let start = ETH_LEN + IPV6_LEN;
    let Some(body) = frame.get(start..start + plen) else {
        return Some(Err("gff_truncated"));
    };
    let Ok(pkt) = gff::Packet::new_checked(body) else {
        return Some(Err("gff_malformed"));
    };
    let Ok(repr) = gff::Repr::parse(&pkt) else {
        return Some(Err("gff_malformed"));
    };
    let mut src = [0; 16];
    let mut dst = [0; 16];
    src.copy_from_slice(&ip[8..24]);
    dst.copy_from_slice(&ip[24..40]);
    if repr.check_addrs(&src.into(), &dst.into()).is_err() {
        return Some(Err("gff_path_mismatch"));
    }
    Some(Ok((repr, start + pkt.header_len()..start + plen)))
}

/// An Ethernet (broadcast) + IPv6 + GFF frame from `src` over `path`.
fn gff_frame(src: EthernetAddress, path: PathId, msg_type: MessageType, payload: &[u8]) -> Vec<u8> {
    let bcast = EthernetAddress::BROADCAST;
    gff::ethernet_frame(bcast, src, path, msg_type, gff::HOP_LIMIT, payload)
}

impl Role for Nsff {
    fn name(&self) -> &'static str {
        "nsff"
    }

    fn start(&mut self, cx: &mut Context<'_>) {
        self.classic.learn_ports(cx);
        if let Some(p) = cx.ports.get(self.cfg.fabric_port) {
            let smoltcp::wire::HardwareAddress::Ethernet(m) = p.iface.hardware_addr();
            self.mac = m;
        } else {
            log::warn!("nsff: fabric_port {} does not exist", self.cfg.fabric_port);
        }
        if let Some(p) = cx.ports.get(self.cfg.sf_port()) {
            // Fresh 4-tuples after a restart (RFC 6056).
            self.next_local_port = p.ephemeral_port();
        }
        let sp = self.cfg.sf_port();
        let mut listen: Vec<(usize, u16, bool)> = Vec::new();
        if self.cfg.client_port < cx.ports.len() {
            let cp = self.cfg.client_port;
            listen.extend(self.cfg.listen_ports().into_iter().map(|(p, t)| (cp, p, t)));
        } else {
            log::warn!("nsff: client_port {} does not exist", self.cfg.client_port);
        }
        if sp != self.cfg.client_port && sp < cx.ports.len() {
            // SFs send requests back (the next SI) to their SF-facing address.
            listen.extend(
                self.cfg
                    .listen_ports()
                    .into_iter()
                    .filter(|&(_, t)| !t)
                    .map(|(p, t)| (sp, p, t)),
            );
        }
        if self.cfg.sf_rest_port != 0 && sp < cx.ports.len() {
            self.rest = Some(SfRest::new(self.cfg.sf_rest_port));
        }
        match (
            &mut self.transparent,
            cx.ports.get_mut(self.cfg.client_port),
        ) {
            (Some(t), Some(p)) => {
                let smoltcp::wire::HardwareAddress::Ethernet(mac) = p.iface.hardware_addr();
                t.bind(mac, p.iface.ip_addrs());
                // Every destination reaches smoltcp's listeners; the
                // interceptor in `ingress` keeps out all but what we take.
                p.iface.set_any_ip(true);
                log::info!(
                    "nsff: transparent interception on {}: {} tcp {:?}",
                    p.name,
                    t.scope(),
                    t.ports()
                );
            }
            (Some(_), None) => self.transparent = None,
            (None, _) => {}
        }
        {
            for (pidx, port, is_tls) in listen {
                self.pool_tls.push(is_tls);
                self.pool_port.push(pidx);
                self.pools.push(ListenPool::new(
                    IpListenEndpoint { addr: None, port },
                    ListenConfig {
                        listeners: self.cfg.listeners,
                        max_connections: self.cfg.max_clients,
                        rx_buffer: SOCK_BUF,
                        tx_buffer: SOCK_BUF,
                        timeout: Duration::from_secs(60),
                    },
                    "nsff.client_limit",
                ));
            }
        }
        self.poll(cx);
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> bool {
        // The interface ran since these were aborted: their resets are out.
        for (port, h) in self.aborted_ready.drain(..) {
            if let Some(ps) = cx.ports.get_mut(port) {
                ps.sockets.remove(h);
            }
        }
        std::mem::swap(&mut self.aborted, &mut self.aborted_ready);
        if let Some((restored, dropped)) = self.restored.take() {
            cx.stats.add("nsff.state_sfs_restored", restored);
            cx.stats.add("nsff.state_sfs_dropped", dropped);
        }
        let mut any = self.classic.poll(cx);
        if self.register_now || self.next_register.is_some_and(|t| t <= cx.now) {
            self.register(cx.now, cx.out, cx.stats);
            any = true;
        }
        if self.ep.poll_timeout().is_some_and(|t| t <= cx.now) {
            self.ep.handle_timeout(cx.now);
        }
        if self.cache.poll_timeout().is_some_and(|t| t <= cx.now) {
            self.cache.handle_timeout(cx.now);
        }
        for (pi, pool) in self.pools.iter_mut().enumerate() {
            let pidx = self.pool_port[pi];
            let ps = &mut cx.ports[pidx];
            for sock in pool.accept(&mut ps.sockets, cx.stats) {
                let id = self.next_client;
                self.next_client += 1;
                any = true;
                let is_tls = self.pool_tls.get(pi).copied().unwrap_or(false);
                if let Some(t) = self
                    .transparent
                    .as_ref()
                    .filter(|_| pidx == self.cfg.client_port)
                {
                    let s = ps.sockets.get::<tcp::Socket>(sock);
                    if let (Some(client), Some(dst)) = (s.remote_endpoint(), s.local_endpoint()) {
                        if !t.is_own(dst.addr) {
                            cx.stats.bump("nsff.transparent_accepted");
                            log::debug!(
                                "nsff: intercepted {} -> {} (client {id})",
                                socket_addr(client),
                                socket_addr(dst)
                            );
                            if self.intercepted.len() == RECENT_INTERCEPTS {
                                self.intercepted.pop_front();
                            }
                            self.intercepted.push_back(Intercepted {
                                at: cx.now,
                                client,
                                original_dst: dst,
                                tls: is_tls,
                            });
                        }
                    }
                }
                if is_tls {
                    cx.stats.bump("nsff.tls_accepted");
                    let a = End::Tcp { port: pidx, sock };
                    self.tls.insert(
                        id,
                        TlsSession {
                            pool: pi,
                            pipe: Pipe::new(a),
                            stage: TlsStage::Hello,
                            active: cx.now,
                        },
                    );
                    continue;
                }
                cx.stats.bump("nsff.clients_accepted");
                self.clients.insert(
                    id,
                    Client {
                        pool: pi,
                        port: pidx,
                        sock,
                        dec: RequestDecoder::new(streaming()),
                        inbuf: Vec::new(),
                        msg: Vec::new(),
                        msg_done: false,
                        up: Up::Idle,
                        wbuf: Vec::new(),
                        close_after: false,
                        active: cx.now,
                        rdec: ResponseDecoder::new(streaming()),
                    },
                );
            }
        }
        any |= self.poll_rest(cx);
        any |= self.health_checks(cx);
        for _ in 0..8 {
            let mut round = self.events(cx);
            let ids: Vec<u64> = self.clients.keys().copied().collect();
            for id in ids {
                // Most held keep-alive connections have nothing to do:
                // leave them where they are (1,000 of them cost nSFF1 two
                // thirds of its request rate when each was pumped).
                if self.clients.get(&id).is_some_and(|c| self.quiet(cx, c)) {
                    continue;
                }
                let Some(mut c) = self.clients.remove(&id) else {
                    continue;
                };
                let (a, alive) = self.pump_client(cx, id, &mut c);
                round |= a;
                if alive {
                    self.clients.insert(id, c);
                } else {
                    self.drop_client(cx, c);
                    round = true;
                }
            }
            let ids: Vec<u64> = self.tls.keys().copied().collect();
            for id in ids {
                let Some(mut t) = self.tls.remove(&id) else {
                    continue;
                };
                let (a, alive) = self.pump_tls(cx, id, &mut t);
                round |= a;
                if alive {
                    self.tls.insert(id, t);
                } else {
                    self.drop_tls(cx, t);
                    round = true;
                }
            }
            let txns: Vec<Txn> = self.egress.keys().copied().collect();
            for txn in txns {
                let Some(mut e) = self.egress.remove(&txn) else {
                    continue;
                };
                round |= self.pump_egress(cx, txn, &mut e);
                self.egress.insert(txn, e);
            }
            self.apply_evidence(cx);
            round |= self.flush(cx.out, cx.stats);
            self.sweep(cx);
            any |= round;
            if !round {
                break;
            }
        }
        any
    }

    fn poll_at(&self, now: Instant) -> Option<Instant> {
        // Client idle checks: at most once a second while clients exist.
        let clients = (!self.clients.is_empty() || !self.tls.is_empty())
            .then(|| now + Duration::from_secs(1));
        let policy = self.health_policy();
        let health = self
            .sfs
            .iter()
            .filter_map(|s| s.health.poll_at(&policy))
            .min()
            .filter(|_| self.cfg.health_interval_ms != 0);
        [
            self.ep.poll_timeout(),
            self.cache.poll_timeout(),
            self.next_register,
            health,
            clients,
            self.classic.poll_at(),
            self.rest.as_ref().and_then(SfRest::poll_at),
            // Aborted sockets go once the interface has run.
            (!self.aborted.is_empty() || !self.aborted_ready.is_empty()).then_some(now),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn ingress(&mut self, cx: &mut FrameContext<'_>, port: usize, frame: &mut Vec<u8>) -> Verdict {
        if let Some(v) = self.classic.ingress(cx, port, frame) {
            return v;
        }
        let Some(g) = parse_gff(frame) else {
            if let Err(reason) = check_frame(frame) {
                return Verdict::Drop(reason);
            }
            if port == self.cfg.client_port {
                if let Some(Filter::Drop(reason)) =
                    self.transparent.as_ref().map(|t| t.filter(frame))
                {
                    return Verdict::Drop(reason);
                }
            }
            for (p, _) in self
                .pools
                .iter_mut()
                .zip(&self.pool_port)
                .filter(|&(_, &pp)| pp == port)
            {
                p.note_frame(frame);
            }
            if port == self.cfg.sf_port() {
                if let Some(r) = &mut self.rest {
                    r.note_frame(frame);
                }
            }
            return Verdict::Pass;
        };
        let (repr, payload) = match g {
            Ok(g) => g,
            Err(reason) => return Verdict::Drop(reason),
        };
        if !repr.path_id.bit(self.cfg.link_in) {
            return Verdict::Drop("nsff_gff_not_for_us");
        }
        cx.stats.bump("nsff.gff_received");
        self.handle_gff(cx.now, cx.stats, &repr, &frame[payload]);
        while let Some(t) = self.ep.poll_transmit() {
            cx.out.inject(
                self.cfg.fabric_port,
                Direction::ToWire,
                gff_frame(self.mac, t.path, t.msg_type, &t.payload),
            );
        }
        Verdict::Consume
    }

    fn validate_ingress(&self) -> bool {
        false
    }

    fn control(&mut self, cx: &mut Context<'_>, _id: u64, args: &[String]) -> ControlReply {
        let cmd = args.first().map(String::as_str).unwrap_or("");
        let v = match cmd {
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
                "nsff_id": self.me.value(),
                "sfs": self.sfs.iter().map(LocalSf::json).collect::<Vec<Value>>(),
                "max_sfs": self.cfg.max_sfs,
                "sf_rest_port": self.cfg.sf_rest_port,
                "tls_sessions": self.tls.len(),
                "clients": self.clients.len(),
                "sf_jobs": self.jobs.len(),
            }),
            "nnlm" => self.classic.control(cx.stats),
            "tls" => self.tls_control(),
            "transparent" => self.transparent_control(),
            "help" => json!({
                "commands": [
                    "cache: FQDN cache size, pending resolutions, counters",
                    "txns: transport transactions and counters",
                    "sfs: local service functions, client connections, SF exchanges",
                    "nnlm: the nNLM rows, classic SFF counters, packets waiting for a MAC",
                    "tls: TLS passthrough sessions (client side and egress)",
                    "transparent: interception scope and ports, recent intercepted connections",
                    "help: this list (and the node commands ping, stats, ports)",
                ],
            }),
            _ => return ControlReply::Unknown,
        };
        ControlReply::Now(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(bytes: &[u8]) -> RequestHead {
        let mut d = RequestDecoder::new(Limits::default());
        match d.decode(bytes) {
            Ok((_, Decoded::Head(h))) => h,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn name_from_host_or_absolute_target() {
        let h = head(b"GET / HTTP/1.1\r\nHost: WWW.Example2.com:8080\r\n\r\n");
        assert_eq!(request_name(&h).unwrap().as_str(), "www.example2.com");
        let h = head(b"GET http://svc.example.org:80/x HTTP/1.1\r\nHost: other.example\r\n\r\n");
        assert_eq!(request_name(&h).unwrap().as_str(), "svc.example.org");
        let h = head(b"GET / HTTP/1.1\r\nHost: [fd00::1]:80\r\n\r\n");
        assert!(request_name(&h).is_none());
        let h = head(b"GET / HTTP/1.0\r\n\r\n");
        assert!(request_name(&h).is_none());
    }

    #[test]
    fn watched_responses_say_when_the_client_must_close() {
        let w = |b: &[u8]| {
            watch_response(&mut ResponseDecoder::new(Limits::default()), &mut false, b).close
        };
        assert!(!w(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"));
        assert!(w(
            b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok"
        ));
        assert!(w(b"HTTP/1.0 200 OK\r\n\r\nuntil close"));
        assert!(w(b"HTTP/1.1 200 OK\r\n\r\nuntil close"));
        assert!(!w(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n"
        ));
        assert!(w(b"garbage\r\n\r\n"));
        // Split anywhere: the same answer.
        let r = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok";
        for cut in 0..r.len() {
            let mut d = ResponseDecoder::new(Limits::default());
            let mut f = false;
            let a = watch_response(&mut d, &mut f, &r[..cut]);
            let b = watch_response(&mut d, &mut f, &r[cut..]);
            assert!(a.close || b.close, "cut {cut}");
            assert!(!a.complete && b.complete, "cut {cut}");
        }
    }

    #[test]
    fn watched_responses_say_where_they_end() {
        let first = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".as_slice();
        let chunked =
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n".as_slice();
        for r in [first, chunked] {
            let mut extra = r.to_vec();
            extra.extend_from_slice(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nforge");
            let mut d = ResponseDecoder::new(Limits::default());
            let w = watch_response(&mut d, &mut false, &extra);
            assert!(w.complete);
            assert_eq!(w.end, Some(r.len()), "{}", String::from_utf8_lossy(r));
        }
        // Not complete yet: no end.
        let mut d = ResponseDecoder::new(Limits::default());
        assert_eq!(
            watch_response(&mut d, &mut false, &first[..first.len() - 1]).end,
            None
        );
    }

    #[test]
    fn watched_responses_say_when_they_are_complete() {
        let w = |parts: &[&[u8]]| {
            let mut d = ResponseDecoder::new(Limits::default());
            let mut f = false;
            parts
                .iter()
                .map(|p| watch_response(&mut d, &mut f, p).complete)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            w(&[b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nok", b"ok"]),
            [false, true]
        );
        assert_eq!(
            w(&[b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"]),
            [true]
        );
        // An interim response is not the answer.
        assert_eq!(
            w(&[
                b"HTTP/1.1 100 Continue\r\n\r\n",
                b"HTTP/1.1 204 No Content\r\n\r\n"
            ]),
            [false, true]
        );
        // A body delimited by close ends only with the transaction.
        assert_eq!(w(&[b"HTTP/1.1 200 OK\r\n\r\nuntil close"]), [false]);
        assert_eq!(
            w(&[b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n"]),
            [false]
        );
    }

    #[test]
    fn absolute_form_becomes_origin_form() {
        let mut m = b"GET http://a.example:80/x?y HTTP/1.1\r\nHost: a.example\r\n\r\n".to_vec();
        origin_form(&mut m, "http://a.example:80/x?y");
        assert_eq!(m, b"GET /x?y HTTP/1.1\r\nHost: a.example\r\n\r\n");
        let mut m = b"GET http://a.example HTTP/1.1\r\n\r\n".to_vec();
        origin_form(&mut m, "http://a.example");
        assert_eq!(m, b"GET / HTTP/1.1\r\n\r\n");
    }

    #[test]
    fn error_responses_are_complete_messages() {
        let r = error_response(502, "unknown service name");
        let mut d = ResponseDecoder::new(Limits::default());
        let (n, ev) = d.decode(&r).unwrap();
        let Decoded::Head(h) = ev else {
            panic!("{ev:?}")
        };
        assert_eq!(h.status, 502);
        assert!(!h.keep_alive());
        let (_, ev) = d.decode(&r[n..]).unwrap();
        assert_eq!(ev, Decoded::Data(&b"nsff: unknown service name\n"[..]));
    }

    #[test]
    fn bad_config_is_refused() {
        let cfg = NsffConfig {
            nsff_id: 255,
            ..NsffConfig::default()
        };
        assert!(Nsff::new(cfg).is_err());
        let cfg = NsffConfig {
            sf: vec![SfConfig {
                fqdn: "bad name".into(),
                addr: std::net::Ipv4Addr::LOCALHOST.into(),
                port: 80,
                tls_port: 443,
            }],
            ..NsffConfig::default()
        };
        assert!(matches!(Nsff::new(cfg), Err(ConfigError::Fqdn(_))));
    }

    /// The (de)registrations in `out`: (deregister, FQDN).
    fn registrations(out: &mut Outbox) -> Vec<(bool, String)> {
        out.drain()
            .filter_map(|(_, _, f)| {
                let Some(Ok((repr, range))) = parse_gff(&f) else {
                    return None;
                };
                match nr::Repr::parse(repr.msg_type, &f[range]) {
                    Ok(nr::Repr::Registration(r)) => {
                        let name = r.tlvs.iter().find_map(|t| match t {
                            Tlv::Fqdn(n) => Some(n.to_owned()),
                            _ => None,
                        })?;
                        Some((r.deregister, name))
                    }
                    _ => None,
                }
            })
            .collect()
    }

    #[test]
    fn rest_operations_on_the_sf_table() {
        let mut n = Nsff::new(NsffConfig {
            max_sfs: 3,
            sf: vec![SfConfig {
                fqdn: "www.conf.example".into(),
                addr: "10.0.3.5".parse().unwrap(),
                port: 80,
                tls_port: 443,
            }],
            ..NsffConfig::default()
        })
        .unwrap();
        let mut out = Outbox::default();
        let mut stats = Counters::default();
        let mut removed = Vec::new();
        let now = Instant::from_millis(0);
        let mut op = |n: &mut Nsff, op: Op, out: &mut Outbox| {
            n.apply_rest(now, op, out, &mut stats, &mut removed)
                .map_err(|e| (e.status, e.field))
        };
        let add = |fqdn: &str, addr: &str, port: u16| {
            Op::Add(NewSf {
                fqdn: Fqdn::new(fqdn).unwrap(),
                addr: addr.parse().unwrap(),
                port,
                tls_port: 443,
            })
        };
        let (st, v) = op(&mut n, add("www.kern.example", "10.0.3.20", 8000), &mut out).unwrap();
        assert_eq!(st, 201);
        assert_eq!(v["source"], "rest");
        assert_eq!(v["port"], 8000);
        assert_eq!(
            registrations(&mut out),
            [(false, "www.kern.example".into())]
        );
        assert_eq!(
            n.local_sf(&Fqdn::new("www.kern.example").unwrap()),
            Some((IpAddress::v4(10, 0, 3, 20), 8000))
        );
        // The same again: 200 and registered again; another address: 409.
        let (st, _) = op(&mut n, add("www.kern.example", "10.0.3.20", 8000), &mut out).unwrap();
        assert_eq!(st, 200);
        assert_eq!(registrations(&mut out).len(), 1);
        assert_eq!(
            op(&mut n, add("www.kern.example", "10.0.3.21", 8000), &mut out),
            Err((409, Some("fqdn")))
        );
        // A config SF can be neither replaced nor removed over REST.
        assert_eq!(
            op(&mut n, add("www.conf.example", "10.0.3.5", 80), &mut out),
            Err((409, Some("fqdn")))
        );
        let conf = Fqdn::new("www.conf.example").unwrap();
        assert_eq!(
            op(&mut n, Op::Remove(conf), &mut out),
            Err((409, Some("fqdn")))
        );
        // Two names with one 16-bit hash cannot both be local.
        let mut seen = BTreeMap::new();
        let (a, b) = (0..)
            .find_map(|i| {
                let f = Fqdn::new(&format!("s{i}.example")).unwrap();
                seen.insert(f.hash(), f.clone()).map(|old| (old, f))
            })
            .unwrap();
        assert_eq!(
            op(&mut n, add(a.as_str(), "10.0.3.30", 80), &mut out)
                .unwrap()
                .0,
            201
        );
        assert_eq!(
            op(&mut n, add(b.as_str(), "10.0.3.31", 80), &mut out),
            Err((409, Some("fqdn")))
        );
        // max_sfs = 3: the table is full.
        assert_eq!(
            op(&mut n, add("www.more.example", "10.0.3.40", 80), &mut out),
            Err((507, None))
        );
        // List, show, remove.
        let (_, v) = op(&mut n, Op::List, &mut out).unwrap();
        let names: Vec<&str> = v["sfs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["fqdn"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["www.conf.example", "www.kern.example", a.as_str()]);
        let kern = Fqdn::new("www.kern.example").unwrap();
        assert_eq!(
            op(&mut n, Op::Show(kern.clone()), &mut out).unwrap().1["addr"],
            "10.0.3.20"
        );
        registrations(&mut out);
        assert_eq!(
            op(&mut n, Op::Remove(kern.clone()), &mut out).unwrap().0,
            204
        );
        assert_eq!(registrations(&mut out), [(true, "www.kern.example".into())]);
        assert_eq!(n.local_sf(&kern), None);
        assert_eq!(
            op(&mut n, Op::Remove(kern.clone()), &mut out),
            Err((404, None))
        );
        assert_eq!(op(&mut n, Op::Show(kern), &mut out), Err((404, None)));
        // Room again.
        assert_eq!(
            op(&mut n, add("www.more.example", "10.0.3.40", 80), &mut out)
                .unwrap()
                .0,
            201
        );
        assert_eq!(removed.len(), 1);
        assert_eq!(stats.get("nsff.rest_sf_added"), 3);
        assert_eq!(stats.get("nsff.rest_sf_removed"), 1);
        assert_eq!(stats.get("nsff.rest_sf_refreshed"), 1);
    }

    fn ingress(n: &mut Nsff, frame: &[u8]) -> Verdict {
        let mut stats = Counters::default();
        let mut out = Outbox::default();
        let mut cx = FrameContext {
            now: Instant::from_millis(0),
            stats: &mut stats,
            out: &mut out,
        };
        n.ingress(&mut cx, 0, &mut frame.to_vec())
    }

    fn node() -> Nsff {
        Nsff::new(NsffConfig {
            link_in: 2,
            link_out: 3,
            nr_links: vec![3, 0],
            ..NsffConfig::default()
        })
        .unwrap()
    }

    #[test]
    fn only_an_all_nodes_update_means_the_nr_restarted() {
        let mut n = node();
        n.register_now = false;
        let mac = EthernetAddress([2, 0, 0, 0, 0, 1]);
        let ours = PathId::ZERO.with(2).with(5);
        let update = |kind| {
            let m = nr::Repr::PathUpdate(nr::PathUpdate {
                kind,
                ids: nr::Ids::new(&[7, ALL_NSFFS]).unwrap(),
                tlvs: Tlvs::new(&[]).unwrap(),
            });
            let mut b = vec![0; m.buffer_len()];
            m.emit(&mut b);
            gff_frame(mac, ours, MessageType::PathUpdate, &b)
        };
        // Link 255 went down: flush what crossed it, nothing more.
        assert_eq!(
            ingress(&mut n, &update(nr::UpdateKind::LinkIds)),
            Verdict::Consume
        );
        assert!(!n.register_now);
        assert_eq!(
            ingress(&mut n, &update(nr::UpdateKind::Unknown(9))),
            Verdict::Consume
        );
        assert!(!n.register_now);
        // ALL NODES: register again at once.
        assert_eq!(
            ingress(&mut n, &update(nr::UpdateKind::NsffIds)),
            Verdict::Consume
        );
        assert!(n.register_now);
    }

    #[test]
    fn bad_gff_frames_are_dropped_by_reason() {
        let mut n = node();
        let mac = EthernetAddress([2, 0, 0, 0, 0, 1]);
        let ours = PathId::ZERO.with(2).with(5);
        let good = gff_frame(mac, ours, MessageType::PathUpdate, &[]);
        // Not for us.
        let other = gff_frame(mac, PathId::ZERO.with(7), MessageType::TransportData, &[1]);
        assert_eq!(
            ingress(&mut n, &other),
            Verdict::Drop("nsff_gff_not_for_us")
        );
        // Truncated IPv6 payload.
        assert_eq!(ingress(&mut n, &good[..60]), Verdict::Drop("gff_truncated"));
        // Addresses disagree with the GFF copy of the pathID.
        let mut bad = good.clone();
        bad[14 + 8] ^= 0xff;
        assert_eq!(ingress(&mut n, &bad), Verdict::Drop("gff_path_mismatch"));
        // A malformed NR message for us is consumed and counted, never a panic.
        assert_eq!(ingress(&mut n, &good), Verdict::Consume);
        let garbage = gff_frame(mac, ours, MessageType::TransportData, &[0xff; 7]);
        assert_eq!(ingress(&mut n, &garbage), Verdict::Consume);
    }

    #[test]
    fn random_bytes_after_the_ipv6_header_never_panic() {
        let mut n = node();
        let mac = EthernetAddress([2, 0, 0, 0, 0, 1]);
        let ours = PathId::ZERO.with(2);
        let mut x: u64 = 0x1234_5678;
        for len in 0..400usize {
            let mut payload = vec![0u8; len % 97];
            for b in &mut payload {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = x as u8;
            }
            for t in 0..16u8 {
                let mut f = gff_frame(mac, ours, MessageType::from(t), &payload);
                let cut = len % (f.len() + 1);
                let _ = ingress(&mut n, &f[..cut.max(54).min(f.len())]);
                if let Some(b) = f.get_mut(54 + len % 40) {
                    *b ^= x as u8;
                }
                let _ = ingress(&mut n, &f);
            }
        }
    }

    /// REST SFs survive a restart through `state_file`; the node file wins
    /// a clash; a corrupt file stops the node naming it; a save that fails
    /// refuses the change.
    #[test]
    fn rest_sfs_are_kept_in_the_state_file() {
        let dir = std::env::temp_dir().join(format!("svcroute-nsff-node-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("sfs.json");
        let conf = SfConfig {
            fqdn: "www.conf.example".into(),
            addr: "10.0.3.5".parse().unwrap(),
            port: 80,
            tls_port: 443,
        };
        let cfg = NsffConfig {
            sf: vec![conf.clone()],
            state_file: Some(path.clone()),
            ..NsffConfig::default()
        };
        let kern = Fqdn::new("www.kern.example").unwrap();
        let mut out = Outbox::default();
        let mut stats = Counters::default();
        let mut removed = Vec::new();
        let now = Instant::from_millis(0);
        let add = |fqdn: &Fqdn, port: u16| {
            Op::Add(NewSf {
                fqdn: fqdn.clone(),
                addr: "10.0.3.20".parse().unwrap(),
                port,
                tls_port: 8443,
            })
        };

        // Nothing saved yet: only the config SF.
        let mut n = Nsff::new(cfg.clone()).unwrap();
        assert_eq!(n.sfs.len(), 1);
        let other = Fqdn::new("www.other.example").unwrap();
        for f in [&kern, &other] {
            let r = n.apply_rest(now, add(f, 8000), &mut out, &mut stats, &mut removed);
            assert_eq!(r.unwrap().0, 201);
        }
        let r = n.apply_rest(now, Op::Remove(other), &mut out, &mut stats, &mut removed);
        assert_eq!(r.unwrap().0, 204);
        drop(n);
        out.drain().for_each(drop);

        // The next process finds it, as a REST SF, and registers it.
        let mut n = Nsff::new(cfg.clone()).unwrap();
        assert_eq!(n.local_sf(&kern), Some((IpAddress::v4(10, 0, 3, 20), 8000)));
        assert_eq!(
            n.local_sf_tls(&kern),
            Some((IpAddress::v4(10, 0, 3, 20), 8443))
        );
        assert_eq!(n.sfs.len(), 2);
        assert!(n.sfs[1].rest);
        assert_eq!(n.restored, Some((1, 0)));
        n.register(now, &mut out, &mut stats);
        assert_eq!(
            registrations(&mut out),
            [
                (false, "www.conf.example".into()),
                (false, "www.kern.example".into())
            ]
        );

        // The node file now configures that name itself: it wins.
        let mut both = cfg.clone();
        both.sf.push(SfConfig {
            fqdn: "www.kern.example".into(),
            ..conf
        });
        let n = Nsff::new(both).unwrap();
        assert_eq!(n.sfs.len(), 2);
        assert!(!n.sfs[1].rest);
        assert_eq!(n.restored, Some((0, 1)));

        // A save that fails refuses the change and leaves the table as it
        // was: here the state file's directory became a file.
        let mut n = Nsff::new(cfg.clone()).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::write(&dir, b"").unwrap();
        let r = n.apply_rest(
            now,
            add(&Fqdn::new("www.new.example").unwrap(), 80),
            &mut out,
            &mut stats,
            &mut removed,
        );
        let e = r.unwrap_err();
        assert_eq!(e.status, 500);
        assert!(
            e.reason.contains(&path.display().to_string()),
            "{}",
            e.reason
        );
        assert_eq!(n.sfs.len(), 2);
        let r = n.apply_rest(now, Op::Remove(kern), &mut out, &mut stats, &mut removed);
        assert_eq!(r.unwrap_err().status, 500);
        assert_eq!(n.sfs.len(), 2);
        assert_eq!(stats.get("nsff.state_write_errors"), 2);
        std::fs::remove_file(&dir).unwrap();

        // A corrupt file stops the node, naming the file and the problem.
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(&path, b"{\"version\": 1, \"sfs\": [").unwrap();
        let e = Nsff::new(cfg.clone()).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!(
                "nsff.state_file: {} is not a valid nSFF state file",
                path.display()
            )),
            "{e}"
        );
        std::fs::write(
            &path,
            b"{\"version\": 1, \"sfs\": [{\"fqdn\": \"bad name!\", \"addr\": \"10.0.3.2\"}]}",
        )
        .unwrap();
        let e = Nsff::new(cfg).unwrap_err().to_string();
        assert!(e.contains("bad fqdn \"bad name!\""), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
