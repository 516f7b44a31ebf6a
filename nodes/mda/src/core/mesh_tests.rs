//! The mesh of RFC 3528 with several cores wired together in memory: UDP
//! with a loss knob, TCP as reliable ordered pipes, partitions that silence
//! links (and reset the TCP ones crossing them when healed).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{IpAddress, IpEndpoint};
use svcroute_stack::wire::slp::{Attribute, Body, ErrorCode, LangTag, Message};

use super::tests::{cfg, da_url, dereg, ip, reg, rqst_fwd, with_body, with_header, T0};
use super::*;

#[derive(Debug)]
enum Wire {
    Udp {
        from: usize,
        to: IpEndpoint,
        bytes: Vec<u8>,
    },
    Tcp {
        to: usize,
        conn: ConnId,
        bytes: Vec<u8>,
    },
}

/// A TCP pipe: (node, its conn id) on both ends.
type End = (usize, ConnId);

struct Mesh {
    now: Instant,
    das: Vec<Mda>,
    logs: Vec<Vec<Record>>,
    links: BTreeMap<End, End>,
    blocked: BTreeSet<(usize, usize)>,
    dead: BTreeSet<End>,
    wire: VecDeque<Wire>,
    loss: f64,
    rng: u64,
    acks: Vec<(usize, ErrorCode)>,
}

const SA_PORT: u16 = 4000;

impl Mesh {
    /// `n` MDAs 10.0.0.1..n, each with every scope list in `scopes` and the
    /// others as static peers.
    fn new(scopes: &[&str], tweak: impl Fn(&mut Config)) -> Self {
        let n = scopes.len();
        let das = (0..n)
            .map(|i| Mda::new(Self::config(i, scopes, &tweak), T0, &[]))
            .collect();
        Self {
            now: T0,
            das,
            logs: vec![Vec::new(); n],
            links: BTreeMap::new(),
            blocked: BTreeSet::new(),
            dead: BTreeSet::new(),
            wire: VecDeque::new(),
            loss: 0.0,
            rng: 7,
            acks: Vec::new(),
        }
    }

    fn config(i: usize, scopes: &[&str], tweak: &impl Fn(&mut Config)) -> Config {
        let me = i as u8 + 1;
        let mut c = cfg(me, scopes[i]);
        c.peers = (0..scopes.len())
            .filter(|j| *j != i)
            .map(|j| ip(j as u8 + 1))
            .collect();
        c.keepalive = Duration::from_secs(20);
        c.timeout = Duration::from_secs(30);
        c.beat = Duration::from_secs(60);
        c.peer_retry = Duration::from_secs(5);
        tweak(&mut c);
        c
    }

    fn index(addr: IpAddress) -> Option<usize> {
        match addr {
            IpAddress::Ipv4(v4) => {
                let o = v4.octets();
                (o[0] == 10 && o[3] >= 1).then(|| usize::from(o[3]) - 1)
            }
            IpAddress::Ipv6(_) => None,
        }
    }

    fn cut(&self, a: usize, b: usize) -> bool {
        self.blocked.contains(&(a.min(b), a.max(b)))
    }

    fn lose(&mut self) -> bool {
        self.loss > 0.0 && (splitmix(&mut self.rng) as f64 / u64::MAX as f64) < self.loss
    }

    /// Collect outputs of node `i` onto the wire.
    fn collect(&mut self, i: usize) {
        while let Some(e) = self.das[i].poll_event() {
            match e {
                Event::Persist(r) => self.logs[i].push(r),
                Event::Connect { conn, to } => {
                    let peer = Self::index(to.addr).filter(|j| *j < self.das.len());
                    match peer {
                        Some(j) if !self.cut(i, j) => {
                            let from = IpEndpoint::new(ip(i as u8 + 1), 40_000 + conn.0 as u16);
                            match self.das[j].tcp_accepted(self.now, from) {
                                Some(cj) => {
                                    self.links.insert((i, conn), (j, cj));
                                    self.links.insert((j, cj), (i, conn));
                                    self.das[i].tcp_established(self.now, conn);
                                }
                                None => self.das[i].tcp_closed(self.now, conn),
                            }
                        }
                        _ => self.das[i].tcp_closed(self.now, conn),
                    }
                }
                Event::Close(conn) => {
                    if let Some(other) = self.links.remove(&(i, conn)) {
                        self.links.remove(&other);
                        self.dead.remove(&(i, conn));
                        self.dead.remove(&other);
                        // Data already queued still arrives (FIN after data).
                        self.wire.push_back(Wire::Tcp {
                            to: other.0,
                            conn: other.1,
                            bytes: Vec::new(),
                        });
                    }
                }
                Event::PeerUp(_) | Event::PeerDown(_) | Event::Reset(_) => {}
            }
        }
        while let Some(t) = self.das[i].poll_transmit() {
            match t {
                Transmit::Udp { to, bytes, .. } => {
                    self.wire.push_back(Wire::Udp { from: i, to, bytes });
                }
                Transmit::Tcp { conn, bytes } => {
                    if self.dead.contains(&(i, conn)) {
                        continue;
                    }
                    if let Some((j, cj)) = self.links.get(&(i, conn)).copied() {
                        self.wire.push_back(Wire::Tcp {
                            to: j,
                            conn: cj,
                            bytes,
                        });
                    }
                }
            }
        }
    }

    /// Deliver until nothing is in flight.
    fn settle(&mut self) {
        for i in 0..self.das.len() {
            self.collect(i);
        }
        let mut budget = 10_000_000;
        while let Some(w) = self.wire.pop_front() {
            budget -= 1;
            assert!(budget > 0, "mesh never settles");
            match w {
                Wire::Udp { from, to, bytes } => {
                    if to.port == SA_PORT {
                        if let Ok(m) = Message::parse(&bytes) {
                            if let Body::SrvAck(a) = m.body() {
                                self.acks.push((from, a.error));
                            }
                        }
                        continue;
                    }
                    let targets: Vec<usize> = match Self::index(to.addr) {
                        Some(j) if j < self.das.len() => vec![j],
                        _ => (0..self.das.len()).filter(|j| *j != from).collect(),
                    };
                    let mcast = targets.len() > 1;
                    let src = IpEndpoint::new(ip(from as u8 + 1), 427);
                    for j in targets {
                        if self.cut(from, j) || self.lose() {
                            continue;
                        }
                        self.das[j].handle_udp(self.now, src, &bytes, mcast);
                        self.collect(j);
                    }
                }
                Wire::Tcp { to, conn, bytes } => {
                    if bytes.is_empty() {
                        self.das[to].tcp_closed(self.now, conn);
                    } else if !self.dead.contains(&(to, conn)) {
                        self.das[to].handle_tcp(self.now, conn, &bytes);
                    }
                    self.collect(to);
                }
            }
        }
    }

    /// Run timers and traffic for `d` of virtual time.
    fn run(&mut self, d: Duration) {
        let end = self.now + d;
        loop {
            self.settle();
            let next = self.das.iter().filter_map(Mda::poll_timeout).min();
            match next {
                Some(t) if t <= end => {
                    self.now = self.now.max(t);
                    for i in 0..self.das.len() {
                        if self.das[i].poll_timeout().is_some_and(|t| t <= self.now) {
                            self.das[i].handle_timeout(self.now);
                        }
                    }
                }
                _ => break,
            }
        }
        self.now = end;
    }

    /// An SA at 10.0.0.200 sends `m` to MDA `i` by UDP; the ack must be OK.
    #[track_caller]
    fn sa(&mut self, i: usize, m: &Message) {
        let from = IpEndpoint::new(ip(200), SA_PORT);
        self.das[i].handle_udp(self.now, from, &m.to_bytes(), false);
        self.settle();
        let acks: Vec<_> = self.acks.drain(..).collect();
        assert_eq!(acks, vec![(i, ErrorCode::Ok)]);
    }

    fn partition(&mut self, a: &[usize], b: &[usize]) {
        for x in a {
            for y in b {
                self.blocked.insert((*x.min(y), *x.max(y)));
            }
        }
        let crossing: Vec<End> = self
            .links
            .iter()
            .filter(|(p, q)| self.cut(p.0, q.0))
            .map(|(p, _)| *p)
            .collect();
        self.dead.extend(crossing);
    }

    fn heal(&mut self) {
        self.blocked.clear();
        // The first segment across a healed partition meets a reset.
        let dead: Vec<End> = std::mem::take(&mut self.dead).into_iter().collect();
        for e in dead {
            if self.links.remove(&e).is_some() {
                self.das[e.0].tcp_closed(self.now, e.1);
            }
        }
    }

    fn digests(&self) -> Vec<u64> {
        self.das.iter().map(Mda::digest).collect()
    }

    #[track_caller]
    fn assert_converged(&self) {
        let d = self.digests();
        assert!(d.iter().all(|x| *x == d[0]), "digests differ: {d:x?}");
    }

    fn restart(&mut self, i: usize, scopes: &[&str], tweak: impl Fn(&mut Config)) {
        // Its connections die with it.
        let ends: Vec<End> = self.links.keys().filter(|e| e.0 == i).copied().collect();
        for e in ends {
            if let Some(o) = self.links.remove(&e) {
                self.links.remove(&o);
                self.das[o.0].tcp_closed(self.now, o.1);
            }
        }
        let c = Self::config(i, scopes, &tweak);
        self.das[i] = Mda::new(c, self.now, &self.logs[i]);
    }
}

fn splitmix(s: &mut u64) -> u64 {
    super::splitmix(s)
}

fn live(d: &Mda, url: &str) -> Option<String> {
    d.registration(url, &LangTag::en())
        .filter(|r| !r.deleted)
        .map(|r| r.attrs.to_string())
}

fn url(n: usize) -> String {
    format!("service:printer:lpr://p{n}")
}

#[test]
fn static_peers_mesh_up_with_one_connection_per_pair() {
    let mut m = Mesh::new(&["x"; 3], |_| {});
    m.run(Duration::from_secs(30));
    for (i, d) in m.das.iter().enumerate() {
        assert_eq!(d.active_peers().len(), 2, "MDA {i}: {:?}", d.connections());
        assert_eq!(d.connections().len(), 2, "MDA {i}: {:?}", d.connections());
    }
    // Every simultaneous pair was resolved by the lower address closing.
    let dup: u64 = m
        .das
        .iter()
        .map(|d| {
            d.counters()
                .get("mda.duplicate_closed")
                .copied()
                .unwrap_or(0)
        })
        .sum();
    assert!(dup >= 1, "the static peers dial each other at once");
    // Keepalives flow; nothing times out.
    m.run(Duration::from_secs(300));
    assert!(m.das[0].counters()["mda.keepalive_heard"] >= 20);
    assert_eq!(m.das[0].counters().get("mda.peer_timeout"), None);
}

#[test]
fn registration_is_forwarded_one_hop_and_acked_once() {
    let mut m = Mesh::new(&["x"; 3], |_| {});
    m.run(Duration::from_secs(30));
    m.sa(0, &rqst_fwd(reg(&url(1), "(a=1)"), 10));
    for d in &m.das {
        assert_eq!(live(d, &url(1)).as_deref(), Some("(a=1)"));
    }
    assert_eq!(m.das[0].counters()["mda.forwarded"], 2);
    for d in &m.das[1..] {
        assert_eq!(
            d.counters().get("mda.forwarded"),
            None,
            "Fwded is never re-forwarded"
        );
    }
    // Peers sent no SrvAck for the Fwded update (RFC 3528 §4.9).
    assert!(m.acks.is_empty());
    // A plain SA's registration (no MeshFwd) stays local.
    m.sa(1, &reg(&url(2), ""));
    assert!(live(&m.das[1], &url(2)).is_some());
    assert!(live(&m.das[0], &url(2)).is_none());
    // Summary vector: MDA 2 has seen MDA 1's accept.
    let a = m.das[0]
        .registration(&url(1), &LangTag::en())
        .unwrap()
        .accept
        .clone()
        .unwrap();
    assert_eq!(m.das[2].summary()[&da_url(1)], a.timestamp);
}

#[test]
fn scopes_decide_who_peers_and_who_gets_what() {
    // RFC 3528 Figure 1: MDA1 (x,y), MDA2 (x,y), MDA3 (y,z), MDA4 (z).
    let mut m = Mesh::new(&["x,y", "x,y", "y,z", "z"], |_| {});
    m.run(Duration::from_secs(30));
    assert_eq!(m.das[3].active_peers(), vec![da_url(3)]);
    assert_eq!(m.das[0].active_peers(), vec![da_url(2), da_url(3)]);
    let y = with_scopes(rqst_fwd(reg(&url(1), ""), 1), "y");
    m.sa(0, &y);
    let have: Vec<bool> = m.das.iter().map(|d| live(d, &url(1)).is_some()).collect();
    assert_eq!(have, [true, true, true, false]);
    let z = with_scopes(rqst_fwd(reg(&url(2), ""), 1), "z");
    m.sa(3, &z);
    let have: Vec<bool> = m.das.iter().map(|d| live(d, &url(2)).is_some()).collect();
    assert_eq!(have, [false, false, true, true]);
}

fn with_scopes(msg: Message, scopes: &str) -> Message {
    let (h, mut b, e) = msg.into_parts();
    match &mut b {
        Body::SrvReg(r) => r.scopes = ScopeList::parse(scopes).unwrap(),
        Body::SrvDeReg(r) => r.scopes = ScopeList::parse(scopes).unwrap(),
        _ => {}
    }
    Message::new(h, b, e).unwrap()
}

#[test]
fn newer_version_is_never_overwritten_by_an_older_one_arriving_later() {
    let mut m = Mesh::new(&["x"; 3], |_| {});
    m.run(Duration::from_secs(30));
    // MDA 1 and MDA 2 cannot talk; the SA registers v2 at MDA 2, then its
    // older v1 shows up (late, e.g. a retransmission) at MDA 1.
    m.partition(&[0], &[1]);
    m.sa(1, &rqst_fwd(reg(&url(1), "(v=2)"), 200));
    m.sa(0, &rqst_fwd(reg(&url(1), "(v=1)"), 100));
    m.run(Duration::from_secs(10));
    m.heal();
    m.run(Duration::from_secs(120));
    for d in &m.das {
        assert_eq!(live(d, &url(1)).as_deref(), Some("(v=2)"));
    }
    m.assert_converged();
}

#[test]
fn deregistration_is_not_resurrected_by_a_late_older_registration() {
    let mut m = Mesh::new(&["x"; 3], |_| {});
    m.run(Duration::from_secs(30));
    m.sa(0, &rqst_fwd(reg(&url(1), ""), 10));
    m.partition(&[2], &[0, 1]);
    m.sa(1, &rqst_fwd(dereg(&url(1), ""), 30));
    // A late, older SrvReg at the cut-off MDA.
    m.sa(2, &rqst_fwd(reg(&url(1), "late"), 20));
    assert!(live(&m.das[2], &url(1)).is_some());
    m.heal();
    m.run(Duration::from_secs(120));
    for d in &m.das {
        assert!(live(d, &url(1)).is_none());
        assert!(d.registration(&url(1), &LangTag::en()).unwrap().deleted);
    }
    m.assert_converged();
    // The tombstone goes when the registration would have expired.
    m.run(Duration::from_secs(400));
    assert!(m.das.iter().all(|d| d.registration_count() == 0));
}

#[test]
fn partition_detected_by_keepalive_timeout_then_anti_entropy_catches_up() {
    let mut m = Mesh::new(&["x"; 3], |_| {});
    m.run(Duration::from_secs(30));
    m.partition(&[2], &[0, 1]);
    for n in 0..20 {
        m.sa(n % 2, &rqst_fwd(reg(&url(n), ""), 1));
    }
    m.run(Duration::from_secs(60));
    assert!(m.das[2].counters()["mda.peer_timeout"] >= 1);
    assert!(m.das[2].active_peers().is_empty());
    assert_eq!(m.das[2].registration_count(), 0);
    m.heal();
    m.run(Duration::from_secs(60));
    assert_eq!(m.das[2].registration_count(), 20);
    assert!(m.das[2].counters()["mda.anti_entropy_done"] >= 1);
    m.assert_converged();
}

#[test]
fn shutdown_advert_tears_down_the_peering() {
    let mut m = Mesh::new(&["x"; 2], |_| {});
    m.run(Duration::from_secs(30));
    m.das[1].shutdown(m.now);
    m.settle();
    assert!(m.das[0].active_peers().is_empty());
    assert!(m.das[0].counters()["mda.peer_shutdown"] >= 1);
}

#[test]
fn converges_under_loss_partition_and_restart() {
    let scopes = ["x"; 5];
    let mut m = Mesh::new(&scopes, |_| {});
    m.loss = 0.2;
    m.run(Duration::from_secs(60));
    let mut v = 1;
    for n in 0..100 {
        m.sa(n % 5, &rqst_fwd(reg(&url(n), "(r=1)"), v));
        v += 1;
    }
    m.partition(&[0, 1], &[2, 3, 4]);
    for n in 0..100 {
        let at = (n * 7) % 5;
        let msg = match n % 3 {
            0 => rqst_fwd(dereg(&url(n), ""), v),
            1 => rqst_fwd(reg(&url(n), "(r=2)"), v),
            _ => rqst_fwd(reg(&url(n + 1000), "new"), v),
        };
        m.sa(at, &msg);
        v += 1;
    }
    m.run(Duration::from_secs(40));
    m.heal();
    // MDA 4 crashes, misses some updates, and comes back from its log.
    m.restart(4, &scopes, |_| {});
    m.sa(0, &rqst_fwd(reg(&url(5000), ""), v));
    m.run(Duration::from_secs(120));
    m.assert_converged();
    assert!(live(&m.das[4], &url(5000)).is_some());
    assert!(live(&m.das[2], &url(0)).is_none(), "deregistered");
    assert_eq!(live(&m.das[0], &url(1)).as_deref(), Some("(r=2)"));
}

// ---- incremental registrations and partial deregistrations -------------

impl Mesh {
    /// The SA sends `m` to MDA `i`; the code of its SrvAck.
    fn sa_code(&mut self, i: usize, m: &Message) -> ErrorCode {
        let from = IpEndpoint::new(ip(200), SA_PORT);
        self.das[i].handle_udp(self.now, from, &m.to_bytes(), false);
        self.settle();
        let acks: Vec<_> = self.acks.drain(..).collect();
        assert_eq!(acks.len(), 1, "{acks:?}");
        acks[0].1
    }
}

fn incr(url: &str, attrs: &str) -> Message {
    with_header(reg(url, attrs), |h| h.flags.fresh = false)
}

/// `m` with the longest lifetime, so nothing expires during a test.
fn forever(m: Message) -> Message {
    with_body(m, |b| {
        if let Body::SrvReg(r) = b {
            r.entry.lifetime = u16::MAX;
        }
    })
}

#[test]
fn incremental_updates_are_forwarded_one_hop() {
    let mut m = Mesh::new(&["x"; 3], |_| {});
    m.run(Duration::from_secs(30));
    m.sa(0, &rqst_fwd(reg(&url(1), "(a=1),(b=2)"), 10));
    m.sa(0, &rqst_fwd(incr(&url(1), "(b=3),(c=4)"), 20));
    m.sa(1, &rqst_fwd(dereg(&url(1), "a"), 30));
    for d in &m.das {
        assert_eq!(live(d, &url(1)).as_deref(), Some("(b=3),(c=4)"));
    }
    // MDA 1 accepted two, MDA 2 one; each went to both peers, once.
    assert_eq!(m.das[0].counters()["mda.forwarded"], 4);
    assert_eq!(m.das[1].counters()["mda.forwarded"], 2);
    assert_eq!(m.das[2].counters().get("mda.forwarded"), None);
    assert!(m.acks.is_empty());
    m.assert_converged();
}

#[test]
fn late_older_incremental_never_undoes_a_newer_one() {
    let mut m = Mesh::new(&["x"; 3], |_| {});
    m.run(Duration::from_secs(30));
    m.sa(0, &rqst_fwd(reg(&url(1), "(c=1)"), 10));
    m.partition(&[2], &[0, 1]);
    // The newer update reaches MDAs 1 and 2; the older one (a late
    // retransmission) reaches the cut-off MDA 3 only.
    m.sa(0, &rqst_fwd(incr(&url(1), "(c=new)"), 30));
    m.sa(2, &rqst_fwd(incr(&url(1), "(c=old),(d=1)"), 20));
    assert_eq!(live(&m.das[2], &url(1)).as_deref(), Some("(c=old),(d=1)"));
    m.run(Duration::from_secs(40));
    m.heal();
    m.run(Duration::from_secs(120));
    for d in &m.das {
        assert_eq!(live(d, &url(1)).as_deref(), Some("(d=1),(c=new)"));
    }
    m.assert_converged();
}

/// One SA operation of the model.
#[derive(Debug, Clone)]
enum Op {
    Fresh(String),
    Incr(String),
    Partial(String),
    Dereg,
}

/// What an MDA must show for `ops`: applied in version order (RFC 2608:
/// a fresh SrvReg replaces, an incremental one updates a live
/// registration, a partial SrvDeReg removes attributes of one, a complete
/// one deletes).
fn model(ops: &[(u64, Op)]) -> Option<String> {
    let mut ops = ops.to_vec();
    ops.sort_by_key(|(v, _)| *v);
    let mut st: Option<Vec<Attribute>> = None;
    for (_, op) in ops {
        st = match (op, st) {
            (Op::Fresh(a), _) => Some(AttrList::parse(&a).unwrap().attributes().to_vec()),
            (Op::Dereg, _) => None,
            (Op::Incr(a), Some(cur)) => Some(merge(&cur, &AttrList::parse(&a).unwrap())),
            (Op::Partial(t), Some(cur)) => {
                let tags = TagList::parse(&t).unwrap();
                Some(cur.into_iter().filter(|a| !tags.matches(a.tag())).collect())
            }
            (_, None) => None,
        };
    }
    st.map(|v| AttrList::new(v).unwrap().to_string())
}

/// Random fresh, incremental, partial and complete updates at random MDAs,
/// a third of them late (an older version than ones already sent), with
/// UDP loss, then a partition (updates cross it by anti-entropy only), then
/// a restart: every MDA ends up showing exactly the operations applied in
/// version order.
#[test]
fn random_updates_converge_to_the_version_order_result() {
    let scopes = ["x"; 4];
    let mut m = Mesh::new(&scopes, |_| {});
    m.loss = 0.2;
    m.run(Duration::from_secs(60));
    let mut rng = 0x5eed_u64;
    let urls: Vec<String> = (0..3).map(url).collect();
    let mut ops: BTreeMap<String, Vec<(u64, Op)>> = BTreeMap::new();
    let mut used = BTreeSet::new();
    let mut next_v = 10_000;
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    let check = |m: &Mesh, ops: &BTreeMap<String, Vec<(u64, Op)>>, when: &str| {
        m.assert_converged();
        for u in &urls {
            let want = model(ops.get(u).map_or(&[][..], Vec::as_slice));
            for (i, d) in m.das.iter().enumerate() {
                assert_eq!(live(d, u), want, "{when}: MDA {i}, {u}: {:?}", ops.get(u));
            }
        }
    };
    for round in 0..3 {
        if round == 1 {
            m.partition(&[0, 1], &[2, 3]);
        }
        if round == 2 {
            m.restart(3, &scopes, |_| {});
        }
        for _ in 0..80 {
            let mut pick = |n: u64| splitmix(&mut rng) % n;
            let u = &urls[pick(urls.len() as u64) as usize];
            next_v += 100;
            let v = loop {
                let v = if pick(3) == 0 {
                    next_v - 100 * (1 + pick(6)) - (1 + pick(99))
                } else {
                    next_v
                };
                if used.insert(v) {
                    break v;
                }
            };
            let tag = |p: &mut dyn FnMut(u64) -> u64| ["a", "b", "c"][p(3) as usize];
            let live_at: Vec<usize> = (0..scopes.len())
                .filter(|i| {
                    m.das[*i]
                        .registration(u, &LangTag::en())
                        .is_some_and(|r| r.alive(m.now))
                })
                .collect();
            let kind = pick(20);
            let (op, msg, at) = if kind < 3 || live_at.is_empty() {
                let a = format!(
                    "({}={}),({}={})",
                    tag(&mut pick),
                    pick(100),
                    tag(&mut pick),
                    pick(100)
                );
                (Op::Fresh(a.clone()), forever(reg(u, &a)), pick(4) as usize)
            } else if kind < 18 {
                let at = live_at[pick(live_at.len() as u64) as usize];
                if kind < 13 {
                    let a = format!("({}={})", tag(&mut pick), pick(100));
                    (Op::Incr(a.clone()), forever(incr(u, &a)), at)
                } else {
                    let t = ["a", "b,c", "c*", "b"][pick(4) as usize];
                    (Op::Partial(t.to_owned()), dereg(u, t), at)
                }
            } else {
                (Op::Dereg, dereg(u, ""), pick(4) as usize)
            };
            let code = m.sa_code(at, &rqst_fwd(msg, v));
            let name = match op {
                Op::Fresh(_) => "fresh",
                Op::Incr(_) => "incremental",
                Op::Partial(_) => "partial",
                Op::Dereg => "deregistration",
            };
            *counts.entry(name).or_insert(0) += 1;
            if code == ErrorCode::Ok {
                ops.entry(u.clone()).or_default().push((v, op));
            }
            if pick(4) == 0 {
                m.run(Duration::from_secs(1));
            }
        }
        m.run(Duration::from_secs(20));
        if round == 1 {
            m.heal();
        }
        m.run(Duration::from_secs(120));
        check(&m, &ops, &format!("round {round}"));
    }
    // Every kind of operation took part, and late ones were refused as stale.
    assert_eq!(counts.len(), 4, "{counts:?}");
    assert!(m
        .das
        .iter()
        .any(|d| d.counters().get("mda.stale_update").is_some()));
}

// ---- authentication ------------------------------------------------------

/// MDAs 1–3 sign with their own Ed25519 keys and admit each other; MDA 4
/// has no key. An SA signs with HMAC.
fn auth_keys(c: &mut Config) {
    use ring::signature::{Ed25519KeyPair, KeyPair as _};
    use svcroute_stack::wire::slp::auth::to_hex;
    let me: u8 = c.url.rsplit('.').next().unwrap().parse().unwrap();
    if me == 4 {
        return;
    }
    let mut verify = vec![VerifyKey::new(
        "sa",
        "hmac-sha256",
        "base64:AAECAwQFBgcICQoLDA0ODw==",
        &[Admit::Sa],
    )
    .unwrap()];
    for n in 1..=3_u8 {
        let pair = Ed25519KeyPair::from_seed_unchecked(&[n; 32]).unwrap();
        let public = format!("hex:{}", to_hex(pair.public_key().as_ref()));
        verify
            .push(VerifyKey::new(&format!("mda{n}"), "ed25519", &public, &[Admit::Peer]).unwrap());
    }
    c.keys = Keys {
        verify: KeyList::new(verify).unwrap(),
        sign: SignKeyList::new(vec![SignKey::new(
            &format!("mda{me}"),
            "ed25519",
            &format!("hex:{}", to_hex(&[me; 32])),
        )
        .unwrap()])
        .unwrap(),
    };
}

#[test]
fn only_authenticated_mdas_are_peered_and_signed_registrations_propagate() {
    use svcroute_stack::wire::slp::{Bsd, Signed, Signer};
    let mut m = Mesh::new(&["x"; 4], auth_keys);
    m.loss = 0.1;
    m.run(Duration::from_secs(120));
    for i in 0..3 {
        let mut want: Vec<String> = (1..=3)
            .filter(|n| *n != i + 1)
            .map(|n| da_url(n as u8))
            .collect();
        want.sort();
        assert_eq!(m.das[i].active_peers(), want, "MDA {}", i + 1);
        let refused = [
            "drop.mda.advert_auth_absent",
            "drop.mda.peer_unauthenticated",
        ]
        .iter()
        .map(|k| m.das[i].counters().get(k).copied().unwrap_or(0))
        .sum::<u64>();
        assert!(refused > 0, "MDA {} never refused MDA 4", i + 1);
    }
    // MDA 4 (no keys) would peer with anyone, but nobody keeps it.
    assert!(m.das[3].active_peers().is_empty());
    // A signed registration at MDA 1 reaches MDAs 2 and 3 with its blocks.
    let sa = Signer::new("sa", Bsd::HmacSha256, &(0..16).collect::<Vec<u8>>()).unwrap();
    let signed = with_body(rqst_fwd(reg(&url(1), "(a=1)"), 5), |b| {
        if let Body::SrvReg(r) = b {
            r.entry
                .auths
                .push(sa.sign(&Signed::Url(&r.entry.url), u32::MAX))
                .unwrap();
            r.attr_auths
                .push(sa.sign(&Signed::Attrs(&r.attrs), u32::MAX))
                .unwrap();
        }
    });
    m.sa(0, &signed);
    assert_ne!(m.sa_code(1, &rqst_fwd(reg(&url(2), ""), 5)), ErrorCode::Ok);
    for d in &m.das[..3] {
        let r = d.registration(&url(1), &LangTag::en()).unwrap();
        assert_eq!((r.url_auths.len(), r.attr_auths.len()), (1, 1));
        assert_eq!(
            sa.verifier()
                .verify(&Signed::Url(&r.url), &r.url_auths[0], 0),
            Ok(())
        );
    }
    assert!(m.das[3].registration(&url(1), &LangTag::en()).is_none());
    let d: Vec<u64> = m.das[..3].iter().map(Mda::digest).collect();
    assert!(d.iter().all(|x| *x == d[0]), "{d:x?}");
}
