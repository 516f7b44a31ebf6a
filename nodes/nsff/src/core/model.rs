//! A model of the driver's connections, for the stateful fuzz target
//! ([`fuzz_proxy`]) and tests: [`Conns`] over in-memory TCP connections
//! whose peers a test script drives (bytes, FINs, resets, accepted or
//! refused connects). It holds the core to the [`Conns`] contract: any use
//! of a connection the core gave back panics.

use std::collections::BTreeMap;

use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{IpAddress, IpEndpoint, Ipv4Address};
use svcroute_stack::shim::Outbox;
use svcroute_stack::stats::Counters;
use svcroute_stack::wire::gff::{MessageType, PathId};

use super::io::{ConnId, ConnectError, Conns, Dial, PoolId, TcpState};
use super::Proxy;
use crate::config::{NsffConfig, SfConfig};

/// One modelled connection.
#[derive(Debug, Clone)]
pub struct Conn {
    /// Its TCP state.
    pub state: TcpState,
    /// Bytes from the peer not yet read.
    pub rx: Vec<u8>,
    /// Bytes the core wrote.
    pub tx: Vec<u8>,
    /// Room left to write.
    pub room: usize,
    /// The peer sent its FIN.
    pub peer_fin: bool,
    /// Opened by the core (an SF connection or probe).
    pub outgoing: bool,
    /// The keep-alive interval the core set (`None`: off).
    pub keepalive: Option<Duration>,
    /// Where the core connected it (outgoing ones).
    pub to: Option<(IpAddress, u16)>,
}

/// Modelled connections, by ID; given-back ones are gone from `live`.
#[derive(Debug, Default)]
pub struct Model {
    /// Connections the core holds.
    pub live: BTreeMap<ConnId, Conn>,
    /// Connections released (closing) or discarded, no longer the core's.
    pub gone: BTreeMap<ConnId, Conn>,
    next: u32,
    /// The next connects fail.
    pub refuse_connects: bool,
}

impl Model {
    /// A connection accepted from a client.
    pub fn accept(&mut self) -> ConnId {
        self.add(TcpState::Established, false)
    }

    fn add(&mut self, state: TcpState, outgoing: bool) -> ConnId {
        let id = ConnId(self.next);
        self.next += 1;
        self.live.insert(
            id,
            Conn {
                state,
                rx: Vec::new(),
                tx: Vec::new(),
                room: 64 * 1024,
                peer_fin: false,
                outgoing,
                keepalive: None,
                to: None,
            },
        );
        id
    }

    #[track_caller]
    fn conn(&self, c: ConnId) -> &Conn {
        match self.live.get(&c) {
            Some(x) => x,
            None => panic!("the core used {c:?}, which it does not hold"),
        }
    }

    #[track_caller]
    fn conn_mut(&mut self, c: ConnId) -> &mut Conn {
        match self.live.get_mut(&c) {
            Some(x) => x,
            None => panic!("the core used {c:?}, which it does not hold"),
        }
    }

    fn give_back(&mut self, c: ConnId) {
        let x = self.live.remove(&c);
        assert!(x.is_some(), "the core gave back {c:?} twice");
        if let Some(x) = x {
            self.gone.insert(c, x);
        }
    }
}

impl Conns for Model {
    fn state(&self, c: ConnId) -> TcpState {
        self.conn(c).state
    }

    fn can_recv(&self, c: ConnId) -> bool {
        !self.conn(c).rx.is_empty()
    }

    fn may_recv(&self, c: ConnId) -> bool {
        let x = self.conn(c);
        !x.peer_fin
            && matches!(
                x.state,
                TcpState::Established | TcpState::FinWait1 | TcpState::FinWait2
            )
    }

    fn can_send(&self, c: ConnId) -> bool {
        self.may_send(c) && self.conn(c).room > 0
    }

    fn may_send(&self, c: ConnId) -> bool {
        matches!(
            self.conn(c).state,
            TcpState::Established | TcpState::CloseWait
        )
    }

    fn recv(&mut self, c: ConnId, max: usize, into: &mut Vec<u8>) -> Option<usize> {
        let may = self.may_recv(c);
        let x = self.conn_mut(c);
        if x.rx.is_empty() && !may {
            return None;
        }
        let n = x.rx.len().min(max);
        into.extend(x.rx.drain(..n));
        Some(n)
    }

    fn send(&mut self, c: ConnId, bytes: &[u8]) -> Option<usize> {
        if !self.may_send(c) {
            return None;
        }
        let x = self.conn_mut(c);
        let n = bytes.len().min(x.room);
        x.room -= n;
        x.tx.extend_from_slice(&bytes[..n]);
        Some(n)
    }

    fn close(&mut self, c: ConnId) {
        let x = self.conn_mut(c);
        x.state = match x.state {
            TcpState::Established | TcpState::SynReceived => TcpState::FinWait1,
            TcpState::CloseWait => TcpState::LastAck,
            TcpState::SynSent | TcpState::Listen => TcpState::Closed,
            s => s,
        };
    }

    fn abort(&mut self, c: ConnId) {
        self.conn_mut(c).state = TcpState::Closed;
    }

    fn remote(&self, c: ConnId) -> Option<IpEndpoint> {
        let _ = self.conn(c);
        Some(IpEndpoint::new(
            Ipv4Address::new(10, 0, 1, 10).into(),
            40000,
        ))
    }

    fn connect(
        &mut self,
        to: (IpAddress, u16),
        _local_port: u16,
        _dial: Dial,
    ) -> Result<ConnId, ConnectError> {
        if self.refuse_connects {
            return Err(ConnectError::Connect);
        }
        let c = self.add(TcpState::SynSent, true);
        self.conn_mut(c).to = Some(to);
        Ok(c)
    }

    fn remove(&mut self, c: ConnId) {
        self.give_back(c);
    }

    fn release(&mut self, _now: Instant, c: ConnId) {
        self.close(c);
        self.give_back(c);
    }

    fn discard(&mut self, c: ConnId, _pool: Option<PoolId>) {
        self.abort(c);
        self.give_back(c);
    }

    fn keep_alive(&mut self, c: ConnId, interval: Option<Duration>) {
        self.conn_mut(c).keepalive = interval;
    }

    fn sweep(&mut self, _now: Instant) {}
}

/// One local SF, `www.local.example` at 10.0.3.5 (HTTP 80, TLS 443),
/// health checks on: the proxy the fuzz target and the model tests run.
pub(crate) fn local_config() -> NsffConfig {
    NsffConfig {
        link_in: 2,
        link_out: 3,
        nr_links: vec![3, 0],
        sf: vec![SfConfig {
            fqdn: "www.local.example".into(),
            addr: core::net::Ipv4Addr::new(10, 0, 3, 5).into(),
            port: 80,
            tls_port: 443,
        }],
        ..NsffConfig::default()
    }
}

/// One step of a fuzz script.
#[derive(Debug, Clone)]
enum Step {
    /// A client connects (`tls`: on the passthrough port).
    Accept { tls: bool },
    /// The peer of live connection `i` (in ID order) sends bytes.
    Bytes { i: usize, data: Vec<u8> },
    /// ... sends its FIN.
    Fin { i: usize },
    /// ... resets.
    Reset { i: usize },
    /// ... (a connect in progress) is accepted.
    Connected { i: usize },
    /// ... reads what was written to it.
    Drain { i: usize },
    /// New connects fail from now (or work again).
    RefuseConnects(bool),
    /// A GFF message for us of type `t`.
    Gff { t: u8, payload: Vec<u8> },
    /// Time passes.
    Wait { ms: u16 },
}

/// Canned request and response fragments the scripts draw on, so that the
/// fuzzer gets past the head parsers quickly.
const SNIPPETS: [&[u8]; 8] = [
    b"GET / HTTP/1.1\r\nHost: www.local.example\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: www.remote.example\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: www.local.example\r\nTransfer-Encoding: chunked\r\n\r\n",
    b"5\r\nhello\r\n0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    b"HTTP/1.1 100 Continue\r\n\r\n",
    b"GET http://www.local.example/x HTTP/1.1\r\nHost: h\r\n\r\n",
    b"\x16\x03\x01\x00\x05\x01\x00\x00\x01\x00",
];

fn script(mut data: &[u8]) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut take = |n: usize| -> Option<Vec<u8>> {
        let n = n.min(data.len());
        let (a, b) = data.split_at(n);
        data = b;
        Some(a.to_vec())
    };
    while let Some(op) = take(1).and_then(|b| b.first().copied()) {
        let arg = take(1).and_then(|b| b.first().copied()).unwrap_or(0);
        let i = usize::from(arg & 0x0f);
        steps.push(match op % 10 {
            0 => Step::Accept { tls: arg & 1 == 1 },
            1 => Step::Bytes {
                i,
                data: SNIPPETS[usize::from(arg >> 4) % SNIPPETS.len()].to_vec(),
            },
            2 => {
                let n = usize::from(arg >> 3);
                Step::Bytes {
                    i: usize::from(arg & 0x07),
                    data: take(n).unwrap_or_default(),
                }
            }
            3 => Step::Fin { i },
            4 => Step::Reset { i },
            5 => Step::Connected { i },
            6 => Step::Drain { i },
            7 => Step::RefuseConnects(arg & 1 == 1),
            8 => Step::Gff {
                t: arg & 0x0f,
                payload: take(usize::from(arg >> 2)).unwrap_or_default(),
            },
            _ => Step::Wait {
                ms: u16::from(arg) * 40,
            },
        });
        if steps.len() >= 256 {
            break;
        }
    }
    steps
}

/// The body of the `nsff_proxy` fuzz target: a script of client and SF
/// connection events, fabric messages and time (decoded from `data`) run
/// against a [`Proxy`] with a local SF, over the [`Model`]. Never panics,
/// every poll ends, and the core only ever works on connections it holds
/// and gives each back once.
#[doc(hidden)]
pub fn fuzz_proxy(data: &[u8]) {
    let cfg = local_config();
    let Ok(mut p) = Proxy::new(&cfg, None) else {
        return;
    };
    let mut io = Model::default();
    let mut out = Outbox::default();
    let mut stats = Counters::default();
    let mut now = Instant::from_millis(0);
    let ours = PathId::ZERO.with(2);
    for step in script(data) {
        let pick = |io: &Model, i: usize| io.live.keys().nth(i % io.live.len().max(1)).copied();
        match step {
            Step::Accept { tls } => {
                let c = io.accept();
                p.accept(now, c, PoolId(usize::from(tls)), tls);
            }
            Step::Bytes { i, data } => {
                if let Some(c) = pick(&io, i) {
                    let x = io.conn_mut(c);
                    if !x.peer_fin && x.state != TcpState::Closed {
                        x.rx.extend_from_slice(&data);
                    }
                }
            }
            Step::Fin { i } => {
                if let Some(c) = pick(&io, i) {
                    let x = io.conn_mut(c);
                    x.peer_fin = true;
                    x.state = match x.state {
                        TcpState::Established => TcpState::CloseWait,
                        TcpState::FinWait1 | TcpState::FinWait2 => TcpState::TimeWait,
                        s => s,
                    };
                }
            }
            Step::Reset { i } => {
                if let Some(c) = pick(&io, i) {
                    io.conn_mut(c).state = TcpState::Closed;
                }
            }
            Step::Connected { i } => {
                if let Some(c) = pick(&io, i) {
                    let x = io.conn_mut(c);
                    if x.state == TcpState::SynSent {
                        x.state = TcpState::Established;
                    }
                }
            }
            Step::Drain { i } => {
                if let Some(c) = pick(&io, i) {
                    let x = io.conn_mut(c);
                    x.room += x.tx.len();
                    x.tx.clear();
                }
            }
            Step::RefuseConnects(r) => io.refuse_connects = r,
            Step::Gff { t, payload } => {
                p.handle_gff(now, &mut stats, MessageType::from(t), ours, &payload);
                p.flush_transport(&mut out);
            }
            Step::Wait { ms } => now += Duration::from_millis(u64::from(ms)),
        }
        p.handle_timeout(now, &mut out, &mut stats);
        p.poll(now, &mut io, &mut out, &mut stats);
        let _ = p.poll_timeout(now);
        out.drain().for_each(drop);
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Scripts a person would write: a local request answered, a remote
    /// one waiting on the NR, a refused connect, a TLS hello, resets.
    #[test]
    fn crafted_scripts_hold() {
        let scripts: [&[u8]; 5] = [
            // accept, GET local, connected (SF conn is #1), SF answers, drain, wait
            &[0, 0, 1, 0x00, 5, 1, 1, 0x41, 6, 0, 9, 50],
            // accept, chunked POST, body, SF connect refused, wait long
            &[0, 0, 1, 0x20, 1, 0x30, 4, 1, 9, 255, 9, 255],
            // accept, remote GET (waits for the NR), FIN, time passes
            &[0, 0, 1, 0x10, 3, 0, 9, 255, 9, 255, 9, 255],
            // TLS accept, hello bytes, reset
            &[0, 1, 1, 0x70, 4, 0, 9, 10],
            // connects refused; accept; local GET; an absolute-form one
            &[7, 1, 0, 0, 1, 0x00, 1, 0x60, 6, 0, 9, 100],
        ];
        for s in scripts {
            fuzz_proxy(s);
        }
    }

    /// The core alone, over the model: a request for a local SF is relayed
    /// on a new SF connection and the answer comes back to the client.
    #[test]
    fn a_local_request_is_relayed_without_sockets() {
        let cfg = NsffConfig {
            health_interval_ms: 0,
            ..local_config()
        };
        let mut p = Proxy::new(&cfg, None).unwrap();
        let (mut io, mut out, mut stats) =
            (Model::default(), Outbox::default(), Counters::default());
        let now = Instant::from_millis(0);
        let client = io.accept();
        p.accept(now, client, PoolId(0), false);
        io.conn_mut(client).rx.extend_from_slice(SNIPPETS[0]);
        p.poll(now, &mut io, &mut out, &mut stats);
        let sf = *io.live.keys().find(|c| io.live[c].outgoing).unwrap();
        assert_eq!(io.live[&sf].state, TcpState::SynSent);
        io.conn_mut(sf).state = TcpState::Established;
        p.poll(now, &mut io, &mut out, &mut stats);
        assert_eq!(io.live[&sf].tx, SNIPPETS[0]);
        io.conn_mut(sf).rx.extend_from_slice(SNIPPETS[4]);
        p.poll(now, &mut io, &mut out, &mut stats);
        assert_eq!(io.live[&client].tx, SNIPPETS[4]);
        assert_eq!(stats.get("nsff.responses_local"), 1);
        assert_eq!(stats.get("nsff.sf_connections"), 1);
    }

    /// One keep-alive GET on `client` answered by the SF: returns the SF
    /// connection it ran on.
    fn one_get(
        p: &mut Proxy,
        io: &mut Model,
        stats: &mut Counters,
        now: Instant,
        client: ConnId,
    ) -> ConnId {
        let mut out = Outbox::default();
        io.conn_mut(client).rx.extend_from_slice(SNIPPETS[0]);
        p.poll(now, io, &mut out, stats);
        let sf = *io.live.keys().rev().find(|c| io.live[c].outgoing).unwrap();
        if io.live[&sf].state == TcpState::SynSent {
            io.conn_mut(sf).state = TcpState::Established;
        }
        p.poll(now, io, &mut out, stats);
        io.conn_mut(sf).tx.clear();
        io.conn_mut(sf).rx.extend_from_slice(SNIPPETS[4]);
        p.poll(now, io, &mut out, stats);
        io.conn_mut(client).tx.clear();
        p.poll(now, io, &mut out, stats);
        sf
    }

    /// RFC 8677 §5.3's keep-alives: an SF connection between requests gets
    /// TCP keep-alives, keeps past the old 30 s, is reused without them,
    /// and is let go when it expires or the keep-alives lose it.
    #[test]
    fn an_idle_sf_connection_is_kept_alive_reused_and_let_go() {
        let mut p = local_proxy();
        let (mut io, mut out, mut stats) =
            (Model::default(), Outbox::default(), Counters::default());
        let mut now = Instant::from_millis(0);
        let client = io.accept();
        p.accept(now, client, PoolId(0), false);
        let sf = one_get(&mut p, &mut io, &mut stats, now, client);
        assert_eq!(stats.get("nsff.responses_local"), 1, "{stats:?}");
        assert_eq!(io.live[&sf].keepalive, Some(Duration::from_secs(10)));

        // 90 s later (past the 30 s that used to close it) it is reused,
        // with keep-alives off while it carries the exchange.
        now += Duration::from_secs(90);
        p.poll(now, &mut io, &mut out, &mut stats);
        assert!(io.live.contains_key(&sf), "the idle connection went");
        io.conn_mut(client).rx.extend_from_slice(SNIPPETS[0]);
        p.poll(now, &mut io, &mut out, &mut stats);
        assert_eq!(stats.get("nsff.sf_reused"), 1, "{stats:?}");
        assert_eq!(io.live[&sf].keepalive, None);
        io.conn_mut(sf).rx.extend_from_slice(SNIPPETS[4]);
        p.poll(now, &mut io, &mut out, &mut stats);
        p.poll(now, &mut io, &mut out, &mut stats);
        assert_eq!(stats.get("nsff.responses_local"), 2, "{stats:?}");
        assert_eq!(stats.get("nsff.sf_connections"), 1, "{stats:?}");
        assert_eq!(io.live[&sf].keepalive, Some(Duration::from_secs(10)));

        // Unanswered keep-alives reset it: let go, counted.
        io.conn_mut(sf).state = TcpState::Closed;
        p.poll(now, &mut io, &mut out, &mut stats);
        assert!(!io.live.contains_key(&sf));
        assert_eq!(stats.get("nsff.sf_idle_lost"), 1, "{stats:?}");

        // A new one idles out after sf_idle_timeout_s (300 s).
        io.conn_mut(client).tx.clear();
        let sf2 = one_get(&mut p, &mut io, &mut stats, now, client);
        assert_ne!(sf2, sf);
        now += Duration::from_secs(299);
        p.poll(now, &mut io, &mut out, &mut stats);
        assert!(io.live.contains_key(&sf2));
        now += Duration::from_secs(1);
        p.poll(now, &mut io, &mut out, &mut stats);
        assert!(!io.live.contains_key(&sf2));
        assert_eq!(stats.get("nsff.sf_idle_expired"), 1, "{stats:?}");
    }

    /// `sf_keepalive_s = 0`: no keep-alives are asked for.
    #[test]
    fn keepalives_can_be_turned_off() {
        let cfg = NsffConfig {
            health_interval_ms: 0,
            sf_keepalive_s: 0,
            ..local_config()
        };
        let mut p = Proxy::new(&cfg, None).unwrap();
        let (mut io, mut stats) = (Model::default(), Counters::default());
        let now = Instant::from_millis(0);
        let client = io.accept();
        p.accept(now, client, PoolId(0), false);
        let sf = one_get(&mut p, &mut io, &mut stats, now, client);
        assert_eq!(stats.get("nsff.responses_local"), 1, "{stats:?}");
        assert!(io.live.contains_key(&sf), "kept for reuse");
        assert_eq!(io.live[&sf].keepalive, None);
    }

    /// A local TLS relay is health evidence about its SF, as a proxied
    /// HTTP exchange is: a refused connect to the TLS port counts, and the
    /// SF's first bytes are a success.
    #[test]
    fn a_local_tls_relay_is_health_evidence() {
        let cfg = local_config();
        let mut p = Proxy::new(&cfg, None).unwrap();
        let (mut io, mut out, mut stats) =
            (Model::default(), Outbox::default(), Counters::default());
        let now = Instant::from_millis(0);
        let hello = crate::tls::tests::hello_for(&[(0, b"www.local.example")]);
        let session = |p: &mut Proxy, io: &mut Model, stats: &mut Counters| {
            let c = io.accept();
            p.accept(now, c, PoolId(1), true);
            io.conn_mut(c).rx.extend_from_slice(&hello);
            p.poll(now, io, &mut Outbox::default(), stats);
            let to_tls = |x: &Conn| x.to.is_some_and(|t| t.1 == 443);
            *io.live.iter().rev().find(|(_, x)| to_tls(x)).unwrap().0
        };
        // The SF's TLS port refuses.
        let sf = session(&mut p, &mut io, &mut stats);
        assert_eq!(stats.get("nsff.tls_sessions_local"), 1, "{stats:?}");
        io.conn_mut(sf).state = TcpState::Closed;
        p.poll(now, &mut io, &mut out, &mut stats);
        assert_eq!(stats.get("nsff.sf_refused"), 1, "{stats:?}");
        assert_eq!(stats.get("nsff.tls_upstream_lost"), 1, "{stats:?}");
        assert_eq!(p.local.sfs[0].json()["failed_probes"], 1);

        // It answers: a success, which clears the failure.
        let sf = session(&mut p, &mut io, &mut stats);
        io.conn_mut(sf).state = TcpState::Established;
        p.poll(now, &mut io, &mut out, &mut stats);
        assert_eq!(io.live[&sf].tx, hello);
        io.conn_mut(sf)
            .rx
            .extend_from_slice(b"\x16\x03\x03\x00\x01\x02");
        p.poll(now, &mut io, &mut out, &mut stats);
        assert_eq!(stats.get("nsff.sf_refused"), 1, "{stats:?}");
        assert_eq!(stats.get("nsff.tls_sessions_local"), 2, "{stats:?}");
        assert_eq!(p.local.sfs[0].json()["failed_probes"], 0, "no success seen");
    }

    fn local_proxy() -> Proxy {
        let cfg = NsffConfig {
            health_interval_ms: 0,
            ..local_config()
        };
        Proxy::new(&cfg, None).unwrap()
    }

    /// `request` from one client connection, the SF (if asked) accepting
    /// and answering `answer`: what the client got, whether its
    /// connection was closed by us, the counters, and what the SF got.
    fn exchange(request: &[u8], answer: &[u8]) -> (String, bool, Counters, Vec<u8>) {
        let mut p = local_proxy();
        let (mut io, mut out, mut stats) =
            (Model::default(), Outbox::default(), Counters::default());
        let mut now = Instant::from_millis(0);
        let client = io.accept();
        p.accept(now, client, PoolId(0), false);
        io.conn_mut(client).rx.extend_from_slice(request);
        let mut sf_got = Vec::new();
        for _ in 0..20 {
            p.poll(now, &mut io, &mut out, &mut stats);
            let sfs: Vec<ConnId> = io
                .live
                .keys()
                .filter(|c| io.live[c].outgoing)
                .copied()
                .collect();
            for c in sfs {
                let x = io.conn_mut(c);
                if x.state == TcpState::SynSent {
                    x.state = TcpState::Established;
                }
                if !x.tx.is_empty() {
                    sf_got.append(&mut x.tx);
                    x.rx.extend_from_slice(answer);
                }
            }
            now += Duration::from_millis(10);
        }
        let x = io
            .live
            .get(&client)
            .or_else(|| io.gone.get(&client))
            .unwrap();
        let closed = x.state != TcpState::Established;
        (
            String::from_utf8_lossy(&x.tx).into_owned(),
            closed,
            stats,
            sf_got,
        )
    }

    /// One bad chunked request: one 400, one count, then the connection
    /// closes (the decoder is poisoned; it used to answer again and again).
    #[test]
    fn a_bad_chunked_request_gets_one_answer_and_one_count() {
        let head =
            b"POST / HTTP/1.1\r\nHost: www.local.example\r\nTransfer-Encoding: chunked\r\n\r\n";
        for body in [&b"FFFFFFFFFFFFFFFFFFFFFF\r\n"[..], b"zz\r\n", b"3\r\nabcXY"] {
            let mut req = head.to_vec();
            req.extend_from_slice(body);
            let (got, closed, stats, _) = exchange(&req, b"");
            assert_eq!(got.matches("HTTP/1.1 400").count(), 1, "{got}");
            assert_eq!(got.matches("HTTP/1.1").count(), 1, "{got}");
            assert!(closed);
            assert_eq!(stats.get("nsff.bad_request"), 1);
        }
    }

    /// RFC 9112 §3.2: two Host lines are 400, and nothing reaches the SF.
    #[test]
    fn two_host_lines_are_400() {
        let req = b"GET / HTTP/1.1\r\nHost: www.local.example\r\nHost: www.local.example\r\n\r\n";
        let (got, closed, stats, sf_got) = exchange(req, SNIPPETS[4]);
        assert!(got.starts_with("HTTP/1.1 400 "), "{got}");
        assert!(got.contains("more than one Host"), "{got}");
        assert!(closed);
        assert!(sf_got.is_empty());
        assert_eq!(stats.get("nsff.duplicate_host"), 1);
    }

    /// RFC 9112 §3.2.2: the authority of an absolute-form target replaces
    /// `Host`, in what the SF gets too.
    #[test]
    fn the_absolute_form_authority_replaces_host() {
        let req = b"GET http://www.local.example/x HTTP/1.1\r\nHost: other.example\r\n\r\n";
        let (got, _, _, sf_got) = exchange(req, SNIPPETS[4]);
        assert!(got.starts_with("HTTP/1.1 200 "), "{got}");
        assert_eq!(
            String::from_utf8_lossy(&sf_got),
            "GET /x HTTP/1.1\r\nHost: www.local.example\r\n\r\n"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn random_scripts_hold(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            fuzz_proxy(&b);
        }
    }
}
