//! A deterministic in-memory network of SAR cores for tests and
//! benchmarks: point-to-point links with a delay and seeded loss, virtual
//! time that jumps to the next event, no sockets and no clock.
//!
//! ```text
//!   Sim ── nodes: Vec<Sar> ── links: (a, LinkId) ↔ (b, LinkId), delay, up
//!       └─ queue of datagrams in flight, ordered by (arrival, sequence)
//! ```
//!
//! [`Sim::step`] delivers the next event (a datagram or a due timer) and
//! drains every core's transmits onto the links; [`Sim::run_until`] steps
//! until a time. A failed link ([`Sim::fail_link`]) silently drops what is
//! sent on it, so the neighbours notice by the dead interval; optionally
//! the driver's `link_down` is signalled too.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use smoltcp::time::{Duration, Instant};
use svcroute_stack::wire::igp::RouterId;

use crate::core::{Config, Sar};
use crate::igp::LinkId;
use crate::policy::Rng;

/// One simulated link between two SARs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimLink {
    /// One end: node index and its link ID.
    pub a: (usize, LinkId),
    /// The other end.
    pub b: (usize, LinkId),
    /// IGP cost configured at both ends.
    pub cost: u32,
    /// One-way delay.
    pub delay: Duration,
    /// Whether it carries datagrams.
    pub up: bool,
}

/// Counts of what the bus did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BusStats {
    /// Datagrams put on a link.
    pub sent: u64,
    /// Datagrams delivered.
    pub delivered: u64,
    /// Lost to the configured loss rate.
    pub lost: u64,
    /// Sent on a failed link.
    pub blackholed: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct InFlight {
    at: Instant,
    seq: u64,
    node: usize,
    link: LinkId,
    bytes: Vec<u8>,
}

/// The simulated network.
#[derive(Debug)]
pub struct Sim {
    /// The SAR cores, by index.
    pub nodes: Vec<Sar>,
    /// The links, by index.
    pub links: Vec<SimLink>,
    /// Loss probability per datagram, 0..1.
    pub loss: f64,
    /// What the bus did.
    pub stats: BusStats,
    now: Instant,
    queue: BinaryHeap<Reverse<InFlight>>,
    /// (node, link) → link index.
    ends: BTreeMap<(usize, LinkId), usize>,
    rng: Rng,
    seq: u64,
}

impl Sim {
    /// SARs from `configs`, all starting at time zero, with `loss` and a
    /// seeded generator.
    pub fn new(configs: Vec<Config>, loss: f64, seed: u64) -> Self {
        let now = Instant::ZERO;
        Self {
            nodes: configs.into_iter().map(|c| Sar::new(c, now)).collect(),
            links: Vec::new(),
            loss,
            stats: BusStats::default(),
            now,
            queue: BinaryHeap::new(),
            ends: BTreeMap::new(),
            rng: Rng::new(seed),
            seq: 0,
        }
    }

    /// `n` SARs with router IDs 1..=n and addresses `fd00::<id>`, each
    /// config adjusted by `tweak`.
    pub fn with_routers(n: usize, loss: f64, seed: u64, tweak: impl Fn(&mut Config)) -> Self {
        let configs = (0..n)
            .map(|i| {
                let id = i as u32 + 1;
                let mut c = Config::new(RouterId(id), router_addr(id));
                tweak(&mut c);
                c
            })
            .collect();
        Self::new(configs, loss, seed)
    }

    /// The virtual time.
    pub const fn now(&self) -> Instant {
        self.now
    }

    /// Connect nodes `a` and `b` (cost at both ends, one-way delay); the
    /// link's index. Both ends get `link_up` now.
    pub fn connect(&mut self, a: usize, b: usize, cost: u32, delay: Duration) -> usize {
        let idx = self.links.len();
        let la = LinkId(idx as u32 * 2);
        let lb = LinkId(idx as u32 * 2 + 1);
        self.links.push(SimLink {
            a: (a, la),
            b: (b, lb),
            cost,
            delay,
            up: true,
        });
        self.ends.insert((a, la), idx);
        self.ends.insert((b, lb), idx);
        let now = self.now;
        self.nodes[a].link_up(now, la, cost);
        self.nodes[b].link_up(now, lb, cost);
        self.drain();
        idx
    }

    /// Fail link `i` silently (datagrams vanish); with `notify`, both ends
    /// also get `link_down` (the driver saw the port go down).
    pub fn fail_link(&mut self, i: usize, notify: bool) {
        self.links[i].up = false;
        if notify {
            let now = self.now;
            let l = self.links[i];
            self.nodes[l.a.0].link_down(now, l.a.1);
            self.nodes[l.b.0].link_down(now, l.b.1);
            self.drain();
        }
    }

    /// Repair link `i` (both ends get `link_up` again).
    pub fn repair_link(&mut self, i: usize) {
        self.links[i].up = true;
        let now = self.now;
        let l = self.links[i];
        self.nodes[l.a.0].link_up(now, l.a.1, l.cost);
        self.nodes[l.b.0].link_up(now, l.b.1, l.cost);
        self.drain();
    }

    /// Inject a raw datagram as if node `from`'s neighbour on `link` sent
    /// it (for attacks and floods), delivered at once.
    pub fn inject(&mut self, node: usize, link: LinkId, bytes: &[u8]) {
        let now = self.now;
        self.nodes[node].handle_igp(now, link, bytes);
        self.drain();
    }

    /// Deliver the next event at or before `limit`; whether there was one.
    pub fn step(&mut self, limit: Instant) -> bool {
        let next_msg = self.queue.peek().map(|Reverse(m)| m.at);
        let next_timer = self.nodes.iter().filter_map(Sar::poll_timeout).min();
        let next = match (next_msg, next_timer) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => match a.or(b) {
                Some(t) => t,
                None => return false,
            },
        };
        if next > limit {
            return false;
        }
        self.now = self.now.max(next);
        let now = self.now;
        if next_msg == Some(next) {
            if let Some(Reverse(m)) = self.queue.pop() {
                self.stats.delivered += 1;
                self.nodes[m.node].handle_igp(now, m.link, &m.bytes);
            }
        } else {
            for n in &mut self.nodes {
                if n.poll_timeout().is_some_and(|t| t <= now) {
                    n.handle_timeout(now);
                }
            }
        }
        self.drain();
        true
    }

    /// Step until `t` (then the clock reads `t`).
    pub fn run_until(&mut self, t: Instant) {
        while self.step(t) {}
        self.now = self.now.max(t);
    }

    /// Step until `done(self)` holds, checking after every event, or until
    /// `deadline`: the time it first held.
    pub fn run_until_pred(
        &mut self,
        deadline: Instant,
        done: impl Fn(&Self) -> bool,
    ) -> Option<Instant> {
        if done(self) {
            return Some(self.now);
        }
        while self.step(deadline) {
            if done(self) {
                return Some(self.now);
            }
        }
        None
    }

    /// Datagrams in flight.
    pub fn in_flight(&self) -> usize {
        self.queue.len()
    }

    /// Run `f` on node `i` at the current time (announcements, decisions,
    /// a restart), then put what it sends on the links.
    pub fn with_node<R>(&mut self, i: usize, f: impl FnOnce(&mut Sar, Instant) -> R) -> R {
        let now = self.now;
        let r = f(&mut self.nodes[i], now);
        self.drain();
        r
    }

    /// Replace node `i` by a fresh core (a restart), keeping its links up.
    pub fn restart(&mut self, i: usize, cfg: Config) {
        let now = self.now;
        self.nodes[i] = Sar::new(cfg, now);
        for l in self.links.clone() {
            for (n, id) in [l.a, l.b] {
                if n == i && l.up {
                    self.nodes[i].link_up(now, id, l.cost);
                }
            }
        }
        self.drain();
    }

    /// All-pairs shortest distances over the links that are up (Floyd–
    /// Warshall): the reference the IGP's routes must match.
    pub fn reference_distances(&self) -> Vec<Vec<Option<u64>>> {
        let n = self.nodes.len();
        let mut d = vec![vec![None; n]; n];
        for (i, row) in d.iter_mut().enumerate() {
            row[i] = Some(0);
        }
        for l in self.links.iter().filter(|l| l.up) {
            let c = u64::from(l.cost.max(1));
            for (x, y) in [(l.a.0, l.b.0), (l.b.0, l.a.0)] {
                let e = &mut d[x][y];
                *e = Some(e.map_or(c, |v: u64| v.min(c)));
            }
        }
        for k in 0..n {
            for i in 0..n {
                for j in 0..n {
                    if let (Some(a), Some(b)) = (d[i][k], d[k][j]) {
                        if d[i][j].is_none_or(|v| a + b < v) {
                            d[i][j] = Some(a + b);
                        }
                    }
                }
            }
        }
        d
    }

    /// Whether the domain has converged: every node holds the same live
    /// LSDB, and every node's routes are exactly the reference shortest
    /// paths (cost, and the first hop with the lowest router ID among the
    /// neighbours on a shortest path).
    pub fn converged(&self) -> bool {
        let now = self.now;
        let Some(first) = self.nodes.first() else {
            return true;
        };
        let digest = first.igp().lsdb_digest(now);
        if self
            .nodes
            .iter()
            .any(|s| s.igp().lsdb_digest(now) != digest)
        {
            return false;
        }
        let d = self.reference_distances();
        for (i, s) in self.nodes.iter().enumerate() {
            let routes = s.igp().routes();
            for (j, dj) in d[i].iter().enumerate() {
                let rid = self.nodes[j].router_id();
                let got = routes.get(&rid);
                match (dj, got) {
                    (None, None) => {}
                    (Some(c), Some(r)) if r.cost == *c => {
                        if i == j {
                            continue;
                        }
                        let want = self
                            .links
                            .iter()
                            .filter(|l| l.up)
                            .filter_map(|l| {
                                let nb = if l.a.0 == i {
                                    l.b.0
                                } else if l.b.0 == i {
                                    l.a.0
                                } else {
                                    return None;
                                };
                                let via = d[nb][j]?;
                                (u64::from(l.cost.max(1)) + via == *c)
                                    .then(|| self.nodes[nb].router_id())
                            })
                            .min();
                        if want != Some(r.next_hop) {
                            return false;
                        }
                    }
                    _ => return false,
                }
            }
        }
        true
    }

    /// Move every core's transmits onto the links.
    fn drain(&mut self) {
        for i in 0..self.nodes.len() {
            while let Some(t) = self.nodes[i].poll_transmit() {
                self.stats.sent += 1;
                let Some(&li) = self.ends.get(&(i, t.to_neighbor)) else {
                    continue;
                };
                let l = self.links[li];
                if !l.up {
                    self.stats.blackholed += 1;
                    continue;
                }
                if self.loss > 0.0 && self.rng.unit() < self.loss {
                    self.stats.lost += 1;
                    continue;
                }
                let (node, link) = if l.a.0 == i && l.a.1 == t.to_neighbor {
                    l.b
                } else {
                    l.a
                };
                self.seq += 1;
                self.queue.push(Reverse(InFlight {
                    at: self.now + l.delay,
                    seq: self.seq,
                    node,
                    link,
                    bytes: t.bytes,
                }));
            }
        }
    }
}

/// A non-trivial ten-SAR topology: a ring with uneven costs and five
/// chords, `(a, b, cost)`.
pub const TEN_SARS: [(usize, usize, u32); 15] = [
    (0, 1, 1),
    (1, 2, 2),
    (2, 3, 1),
    (3, 4, 3),
    (4, 5, 1),
    (5, 6, 2),
    (6, 7, 1),
    (7, 8, 2),
    (8, 9, 1),
    (9, 0, 4),
    (0, 5, 7),
    (2, 7, 3),
    (1, 8, 5),
    (3, 6, 2),
    (4, 9, 6),
];

/// A simulation of `n` routers ([`Sim::with_routers`]) connected by
/// `edges`, link `k` with a one-way delay of `1 + k % 3` milliseconds.
pub fn build(
    n: usize,
    edges: &[(usize, usize, u32)],
    loss: f64,
    seed: u64,
    tweak: impl Fn(&mut Config),
) -> Sim {
    let mut sim = Sim::with_routers(n, loss, seed, tweak);
    for (k, (a, b, c)) in edges.iter().enumerate() {
        sim.connect(*a, *b, *c, Duration::from_millis(1 + k as u64 % 3));
    }
    sim
}

/// The address the simulation gives router `id`: `fd00::<id>`.
pub fn router_addr(id: u32) -> std::net::Ipv6Addr {
    std::net::Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, (id >> 16) as u16, id as u16)
}
