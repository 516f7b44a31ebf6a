//! The nsff node: [`Nsff`] runs the sans-IO [`Proxy`] (and the classic SFF
//! beside it) on the node's smoltcp stacks. Glue only:
//!
//! - **Connections**: the listening pools (`http_port`, `proxy_port`,
//!   `https_port` on `client_port`; `http_port`, `proxy_port` again on
//!   `sf_port` when that is another port) accept; each accepted socket gets
//!   a [`ConnId`] and goes to [`Proxy::accept`]. The proxy works on its
//!   connections through [`Conns`], implemented here over the sockets
//!   ([`SmolConns`]); released sockets are removed once their FIN (or
//!   reset) went out.
//! - **GFF in**: frames that parse as GFF ([`gff::parse_ethernet_frame`])
//!   and whose pathID holds our `link_in` bit go to [`Proxy::handle_gff`];
//!   other GFF frames are dropped (`nsff.gff_not_for_us`), malformed ones
//!   by their reason. The classic SFF sees every frame first. Everything
//!   else is checked with [`check_frame`], passes the transparent
//!   interceptor on the client port, and goes to smoltcp.
//! - **REST** (`sf_rest_port` on `sf_port`): the stack's REST server
//!   ([`SfRest`]) with [`Proxy::apply_rest`] as its handler.
//! - **Transparent interception** (`transparent`): the client port's
//!   interface accepts any destination (smoltcp `any_ip`); its frames pass
//!   an [`Interceptor`] first; accepted connections to foreign
//!   destinations are remembered for `ctl transparent`.
//! - **State file**: [`SfStore`] is the proxy's [`Persist`].

// The driver: sockets and, in its tests, the state file's directory.
#![allow(clippy::disallowed_types, clippy::disallowed_methods)]

use std::collections::VecDeque;

use serde_json::{json, Value};
use smoltcp::iface::SocketHandle;
use smoltcp::socket::tcp;
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{IpAddress, IpEndpoint, IpListenEndpoint};
use svcroute_stack::listen::{ListenConfig, ListenPool};
use svcroute_stack::runtime::{check_frame, Context, ControlReply, FrameContext, PortStack, Role};
use svcroute_stack::shim::Verdict;
use svcroute_stack::wire::gff;

use crate::classic::Classic;
use crate::config::{ConfigError, NsffConfig};
use crate::core::{ConnId, ConnectError, Conns, Dial, Persist, PoolId, Proxy, TcpState};
use crate::rest::SfRest;
use crate::store::SfStore;
use crate::transparent::{Filter, Interceptor};

/// TCP buffers of client and SF sockets.
const SOCK_BUF: usize = 64 * 1024;
/// Intercepted connections remembered for `ctl transparent`.
const RECENT_INTERCEPTS: usize = 32;
/// A released connection still not closed after this long is reset.
const CLOSING_LIMIT: Duration = Duration::from_secs(10);
/// An exchange with an SF that hears nothing back for this long (with
/// data outstanding) is reset.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(10);

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

/// The sockets behind the proxy's [`ConnId`]s.
#[derive(Debug, Default)]
struct ConnTable {
    /// By `ConnId`: (port index, socket).
    slots: Vec<Option<(usize, SocketHandle)>>,
    free: Vec<u32>,
    /// Released: closing, removed once closed (since, connection).
    closing: Vec<(Instant, ConnId)>,
    /// Reset in this poll. A socket removed at once never sends its reset,
    /// and the client waits on a dead connection: they move to
    /// `aborted_ready` at the next poll and are removed at the one after,
    /// with the interface run in between.
    aborted: Vec<ConnId>,
    /// Reset in an earlier poll: removed at the next one.
    aborted_ready: Vec<ConnId>,
}

impl ConnTable {
    fn insert(&mut self, port: usize, h: SocketHandle) -> ConnId {
        match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = Some((port, h));
                ConnId(i)
            }
            None => {
                // NOTE(truncation): never 2^32 sockets on one node.
                let i = self.slots.len() as u32;
                self.slots.push(Some((port, h)));
                ConnId(i)
            }
        }
    }

    fn get(&self, c: ConnId) -> (usize, SocketHandle) {
        // NOTE(unwrap): the proxy uses only IDs it holds (see `Conns`).
        self.slots[c.0 as usize].unwrap()
    }

    fn take(&mut self, c: ConnId) -> (usize, SocketHandle) {
        // NOTE(unwrap): the proxy uses only IDs it holds (see `Conns`).
        let s = self.slots[c.0 as usize].take().unwrap();
        self.free.push(c.0);
        s
    }
}

/// [`Conns`] over the node's sockets.
struct SmolConns<'a> {
    ports: &'a mut [PortStack],
    table: &'a mut ConnTable,
    pools: &'a mut [ListenPool],
    sf_port: usize,
}

impl SmolConns<'_> {
    fn sock(&self, c: ConnId) -> &tcp::Socket<'static> {
        let (p, h) = self.table.get(c);
        self.ports[p].sockets.get::<tcp::Socket>(h)
    }

    fn sock_mut(&mut self, c: ConnId) -> &mut tcp::Socket<'static> {
        let (p, h) = self.table.get(c);
        self.ports[p].sockets.get_mut::<tcp::Socket>(h)
    }
}

impl Conns for SmolConns<'_> {
    fn state(&self, c: ConnId) -> TcpState {
        self.sock(c).state()
    }

    fn can_recv(&self, c: ConnId) -> bool {
        self.sock(c).can_recv()
    }

    fn may_recv(&self, c: ConnId) -> bool {
        self.sock(c).may_recv()
    }

    fn can_send(&self, c: ConnId) -> bool {
        self.sock(c).can_send()
    }

    fn may_send(&self, c: ConnId) -> bool {
        self.sock(c).may_send()
    }

    fn recv(&mut self, c: ConnId, max: usize, into: &mut Vec<u8>) -> Option<usize> {
        // Straight from the socket's ring: no scratch buffer to clear on
        // every call.
        self.sock_mut(c)
            .recv(|buf| {
                let n = buf.len().min(max);
                into.extend_from_slice(&buf[..n]);
                (n, n)
            })
            .ok()
    }

    fn send(&mut self, c: ConnId, bytes: &[u8]) -> Option<usize> {
        self.sock_mut(c).send_slice(bytes).ok()
    }

    fn close(&mut self, c: ConnId) {
        self.sock_mut(c).close();
    }

    fn abort(&mut self, c: ConnId) {
        self.sock_mut(c).abort();
    }

    fn remote(&self, c: ConnId) -> Option<IpEndpoint> {
        self.sock(c).remote_endpoint()
    }

    fn connect(
        &mut self,
        to: (IpAddress, u16),
        local_port: u16,
        dial: Dial,
    ) -> Result<ConnId, ConnectError> {
        let ps = self
            .ports
            .get_mut(self.sf_port)
            .ok_or(ConnectError::NoPort)?;
        let mut s = match dial {
            Dial::Exchange => {
                let mut s = tcp::Socket::new(
                    tcp::SocketBuffer::new(vec![0; SOCK_BUF]),
                    tcp::SocketBuffer::new(vec![0; SOCK_BUF]),
                );
                s.set_nagle_enabled(false);
                s.set_timeout(Some(EXCHANGE_TIMEOUT));
                s
            }
            Dial::Probe { timeout } => {
                let mut s = tcp::Socket::new(
                    tcp::SocketBuffer::new(vec![0; 64]),
                    tcp::SocketBuffer::new(vec![0; 64]),
                );
                s.set_timeout(Some(timeout));
                s
            }
        };
        if let Err(e) = s.connect(ps.iface.context(), to, local_port) {
            if dial == Dial::Exchange {
                log::debug!("nsff: connect to SF {}:{}: {e}", to.0, to.1);
            }
            return Err(ConnectError::Connect);
        }
        let h = ps.sockets.add(s);
        Ok(self.table.insert(self.sf_port, h))
    }

    fn remove(&mut self, c: ConnId) {
        let (p, h) = self.table.take(c);
        self.ports[p].sockets.remove(h);
    }

    fn release(&mut self, now: Instant, c: ConnId) {
        self.sock_mut(c).close();
        self.table.closing.push((now, c));
    }

    fn discard(&mut self, c: ConnId, pool: Option<PoolId>) {
        self.sock_mut(c).abort();
        self.table.aborted.push(c);
        if let Some(p) = pool.and_then(|p| self.pools.get_mut(p.0)) {
            p.release();
        }
    }

    fn keep_alive(&mut self, c: ConnId, interval: Option<Duration>) {
        let s = self.sock_mut(c);
        s.set_keep_alive(interval);
        // smoltcp resets a connection whose peer is silent for the timeout
        // while keep-alives are on: give the peer three probes to answer.
        s.set_timeout(Some(interval.map_or(EXCHANGE_TIMEOUT, |i| i * 3)));
    }

    fn sweep(&mut self, now: Instant) {
        let mut closing = std::mem::take(&mut self.table.closing);
        closing.retain(|&(since, c)| {
            let s = self.sock_mut(c);
            let done = matches!(s.state(), tcp::State::Closed | tcp::State::TimeWait);
            if done || now - since > CLOSING_LIMIT {
                s.abort();
                self.remove(c);
                false
            } else {
                true
            }
        });
        self.table.closing = closing;
    }
}

/// The nsff role.
#[derive(Debug)]
pub struct Nsff {
    cfg: NsffConfig,
    pub(crate) core: Proxy,
    /// The SF registration REST server on `sf_port` (`sf_rest_port`).
    rest: Option<SfRest>,
    /// Listening pools on `client_port`: `http_port`, `proxy_port`,
    /// `https_port` (those that are not 0); then, when `sf_port` is
    /// another port, `http_port` and `proxy_port` on it (SFs send requests
    /// back there).
    pools: Vec<ListenPool>,
    /// Per pool: the port index it listens on.
    pool_port: Vec<usize>,
    /// Per pool: whether it is the TLS passthrough one.
    pool_tls: Vec<bool>,
    conns: ConnTable,
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
        let store = cfg
            .state_file
            .clone()
            .map(|p| Box::new(SfStore::new(p)) as Box<dyn Persist>);
        let core = Proxy::new(&cfg, store)?;
        let classic = Classic::new(cfg.nnlm()?, cfg.classic.clone());
        let transparent = cfg.interceptor()?;
        Ok(Self {
            core,
            rest: None,
            pools: Vec::new(),
            pool_tls: Vec::new(),
            pool_port: Vec::new(),
            conns: ConnTable::default(),
            classic,
            transparent,
            intercepted: VecDeque::new(),
            cfg,
        })
    }

    /// The transport endpoint (counters, for tests).
    pub fn endpoint(&self) -> &crate::transport::Endpoint {
        self.core.endpoint()
    }

    /// The path cache (for tests).
    pub fn cache(&self) -> &crate::cache::PathCache<u64> {
        self.core.cache()
    }

    /// The proxy core.
    pub fn proxy(&self) -> &Proxy {
        &self.core
    }

    /// Accept on every pool; remember intercepted connections.
    fn accept(&mut self, cx: &mut Context<'_>) -> bool {
        let mut any = false;
        for (pi, pool) in self.pools.iter_mut().enumerate() {
            let pidx = self.pool_port[pi];
            let ps = &mut cx.ports[pidx];
            for sock in pool.accept(&mut ps.sockets, cx.stats) {
                any = true;
                let is_tls = self.pool_tls.get(pi).copied().unwrap_or(false);
                let conn = self.conns.insert(pidx, sock);
                let id = self.core.accept(cx.now, conn, PoolId(pi), is_tls);
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
                                "nsff: intercepted {} -> {} (client {})",
                                socket_addr(client),
                                socket_addr(dst),
                                id.0
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
                cx.stats.bump(if is_tls {
                    "nsff.tls_accepted"
                } else {
                    "nsff.clients_accepted"
                });
            }
        }
        any
    }

    /// Serve the SF registration REST (`sf_rest_port` on `sf_port`).
    fn poll_rest(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(mut rest) = self.rest.take() else {
            return false;
        };
        let sp = self.cfg.sf_port();
        let now = cx.now;
        let mut removed = Vec::new();
        let any = match cx.ports.get_mut(sp) {
            Some(ps) => {
                let (out, core) = (&mut *cx.out, &mut self.core);
                rest.poll(now, &mut ps.sockets, cx.stats, |op, stats| {
                    core.apply_rest(now, op, out, stats, &mut removed)
                })
            }
            None => false,
        };
        self.rest = Some(rest);
        let mut io = SmolConns {
            ports: cx.ports,
            table: &mut self.conns,
            pools: &mut self.pools,
            sf_port: sp,
        };
        self.core.forget_sfs(now, removed, &mut io, cx.stats);
        any
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
}

/// `addr:port`, IPv6 in brackets.
fn socket_addr(e: IpEndpoint) -> std::net::SocketAddr {
    std::net::SocketAddr::new(crate::core::local::std_ip(e.addr), e.port)
}

impl Role for Nsff {
    fn name(&self) -> &'static str {
        "nsff"
    }

    fn start(&mut self, cx: &mut Context<'_>) {
        self.classic.learn_ports(cx);
        if let Some(p) = cx.ports.get(self.cfg.fabric_port) {
            let smoltcp::wire::HardwareAddress::Ethernet(m) = p.iface.hardware_addr();
            self.core.set_mac(m);
        } else {
            log::warn!("nsff: fabric_port {} does not exist", self.cfg.fabric_port);
        }
        let sp = self.cfg.sf_port();
        match cx.ports.get(sp) {
            // Fresh 4-tuples after a restart (RFC 6056).
            Some(p) => self.core.set_local_port(p.ephemeral_port(), true),
            None => self.core.set_local_port(49152, false),
        }
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
        self.poll(cx);
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> bool {
        // The interface ran since these were reset: their resets are out.
        for c in std::mem::take(&mut self.conns.aborted_ready) {
            let (p, h) = self.conns.take(c);
            if let Some(ps) = cx.ports.get_mut(p) {
                ps.sockets.remove(h);
            }
        }
        std::mem::swap(&mut self.conns.aborted, &mut self.conns.aborted_ready);
        let mut any = self.classic.poll(cx);
        any |= self.core.handle_timeout(cx.now, cx.out, cx.stats);
        any |= self.accept(cx);
        any |= self.poll_rest(cx);
        let mut io = SmolConns {
            ports: cx.ports,
            table: &mut self.conns,
            pools: &mut self.pools,
            sf_port: self.cfg.sf_port(),
        };
        any |= self.core.poll(cx.now, &mut io, cx.out, cx.stats);
        any
    }

    fn poll_at(&self, now: Instant) -> Option<Instant> {
        [
            self.core.poll_timeout(now),
            self.classic.poll_at(),
            self.rest.as_ref().and_then(SfRest::poll_at),
            // Reset sockets go once the interface has run.
            (!self.conns.aborted.is_empty() || !self.conns.aborted_ready.is_empty()).then_some(now),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn ingress(&mut self, cx: &mut FrameContext<'_>, port: usize, frame: &mut Vec<u8>) -> Verdict {
        if let Some(v) = self.classic.ingress(cx, port, frame) {
            return v;
        }
        let Some(g) = gff::parse_ethernet_frame(frame) else {
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
        let g = match g {
            Ok(g) => g,
            Err(e) => return Verdict::Drop(e.as_str()),
        };
        if !self.core.is_for_us(&g.repr.path_id) {
            return Verdict::Drop("nsff.gff_not_for_us");
        }
        cx.stats.bump("nsff.gff_received");
        self.core.handle_gff(
            cx.now,
            cx.stats,
            g.repr.msg_type,
            g.repr.path_id,
            &frame[g.payload],
        );
        self.core.flush_transport(cx.out);
        Verdict::Consume
    }

    fn validate_ingress(&self) -> bool {
        false
    }

    fn control(&mut self, cx: &mut Context<'_>, _id: u64, args: &[String]) -> ControlReply {
        let cmd = args.first().map(String::as_str).unwrap_or("");
        if let Some(v) = self.core.control(cmd, &self.cfg) {
            return ControlReply::Now(v);
        }
        let v = match cmd {
            "nnlm" => self.classic.control(cx.stats),
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
    use std::collections::BTreeMap;

    use smoltcp::wire::EthernetAddress;
    use svcroute_stack::http::{Decoded, Limits, RequestDecoder, RequestHead, ResponseDecoder};
    use svcroute_stack::shim::Outbox;
    use svcroute_stack::stats::Counters;
    use svcroute_stack::wire::gff::{MessageType, PathId};
    use svcroute_stack::wire::nr::{self, Fqdn, Tlv, Tlvs, ALL_NSFFS};

    use super::*;
    use crate::config::SfConfig;
    use crate::core::client::{origin_form, request_name, watch_response};
    use crate::core::local::LocalSf;
    use crate::core::refusal::error_response;
    use crate::core::{gff_frame, Timer};
    use crate::rest::{NewSf, Op, RestError};

    /// [`Proxy::apply_rest`] on the node's core.
    fn apply_rest(
        n: &mut Nsff,
        now: Instant,
        op: Op,
        out: &mut Outbox,
        stats: &mut Counters,
        removed: &mut Vec<LocalSf>,
    ) -> Result<(u16, Value), RestError> {
        n.core.apply_rest(now, op, out, stats, removed)
    }

    /// A registration round of the node's core.
    fn register(n: &mut Nsff, now: Instant, out: &mut Outbox, stats: &mut Counters) {
        let c = &mut n.core;
        c.local.register(now, &c.fabric, &mut c.timers, out, stats);
    }

    /// A registration round is due at once.
    fn register_now(n: &Nsff) -> bool {
        n.core.timers.is_due(Timer::Register, Instant::ZERO)
    }

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
                let Some(Ok(gff::EthernetGff {
                    repr,
                    payload: range,
                    ..
                })) = gff::parse_ethernet_frame(&f)
                else {
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
            apply_rest(n, now, op, out, &mut stats, &mut removed).map_err(|e| (e.status, e.field))
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
            n.core.local.http(&Fqdn::new("www.kern.example").unwrap()),
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
        assert_eq!(n.core.local.http(&kern), None);
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
        n.core.timers.stop(Timer::Register);
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
        assert!(!register_now(&n));
        assert_eq!(
            ingress(&mut n, &update(nr::UpdateKind::Unknown(9))),
            Verdict::Consume
        );
        assert!(!register_now(&n));
        // ALL NODES: register again at once.
        assert_eq!(
            ingress(&mut n, &update(nr::UpdateKind::NsffIds)),
            Verdict::Consume
        );
        assert!(register_now(&n));
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
            Verdict::Drop("nsff.gff_not_for_us")
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
        assert_eq!(n.core.local.sfs.len(), 1);
        let other = Fqdn::new("www.other.example").unwrap();
        for f in [&kern, &other] {
            let r = apply_rest(
                &mut n,
                now,
                add(f, 8000),
                &mut out,
                &mut stats,
                &mut removed,
            );
            assert_eq!(r.unwrap().0, 201);
        }
        let r = apply_rest(
            &mut n,
            now,
            Op::Remove(other),
            &mut out,
            &mut stats,
            &mut removed,
        );
        assert_eq!(r.unwrap().0, 204);
        drop(n);
        out.drain().for_each(drop);

        // The next process finds it, as a REST SF, and registers it.
        let mut n = Nsff::new(cfg.clone()).unwrap();
        assert_eq!(
            n.core.local.http(&kern),
            Some((IpAddress::v4(10, 0, 3, 20), 8000))
        );
        assert_eq!(
            n.core.local.tls(&kern),
            Some((IpAddress::v4(10, 0, 3, 20), 8443))
        );
        assert_eq!(n.core.local.sfs.len(), 2);
        assert!(n.core.local.sfs[1].rest);
        assert_eq!(n.core.local.restored, Some((1, 0)));
        register(&mut n, now, &mut out, &mut stats);
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
        assert_eq!(n.core.local.sfs.len(), 2);
        assert!(!n.core.local.sfs[1].rest);
        assert_eq!(n.core.local.restored, Some((0, 1)));

        // A save that fails refuses the change and leaves the table as it
        // was: here the state file's directory became a file.
        let mut n = Nsff::new(cfg.clone()).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::write(&dir, b"").unwrap();
        let r = apply_rest(
            &mut n,
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
        assert_eq!(n.core.local.sfs.len(), 2);
        let r = apply_rest(
            &mut n,
            now,
            Op::Remove(kern),
            &mut out,
            &mut stats,
            &mut removed,
        );
        assert_eq!(r.unwrap_err().status, 500);
        assert_eq!(n.core.local.sfs.len(), 2);
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
