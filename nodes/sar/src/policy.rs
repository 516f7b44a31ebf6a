//! How an instance is chosen among those serving a name (SPEC §2, draft
//! §3.5): the steering an announcement asks for, and the picks themselves
//! as functions over candidates — no tables, no clock.
//!
//! | announcement constraints              | steering                                      |
//! |---------------------------------------|-----------------------------------------------|
//! | none, or only a lifetime              | route, shortest path                          |
//! | metrics (capability, load, latency, preference), no mode+policy | route, constraint-based |
//! | mode+policy `routing/shortest` (or an unknown policy/mode) | route, shortest path       |
//! | `routing/min-metric`                  | route, lowest load then shortest path         |
//! | `*/random`, `*/round-robin`, `*/weighted` | schedule at the ingress (the policy is a scheduling one whatever the mode) |
//! | `scheduling/min-metric`               | schedule: lowest load                         |
//! | `*/app-metrics-cost`                  | schedule: SPEC §3 pairwise cost (an ingress decision) |
//! | `scheduling/shortest`                 | route, shortest path                          |
//!
//! *Route* picks are consistent hop by hop: every key after the path cost
//! is a per-instance constant, so a SAR on the best path picks the same
//! instance as the one before it (the ingress forwards to the next SAR).
//! *Schedule* picks are made once, at the client's ingress SAR, which
//! rewrites the destination to the chosen instance.
//!
//! Steering is per instance; a FIB entry sums its instances up in an
//! [`EntrySteering`]. When a name has both a scheduled set and routed
//! instances, the set counts as one site: every SAR routes over all the
//! instances (a scheduled one with its own path cost), and the ingress
//! schedules over the set only when one of its instances is the routing
//! winner. Since the ingress and the SARs after it rank the same
//! candidates by the same route policy, hop-by-hop consistency holds as
//! above.
//!
//! Ties always break on the lower instance address, then the lower origin
//! SAR, so every SAR with the same LSDB decides the same.

use core::cmp::Ordering;
use core::fmt;
use std::net::IpAddr;

use svcroute_stack::wire::igp::RouterId;
use svcroute_stack::wire::rosa::{Constraints, Mode, Policy};

/// An instance's announced metrics (constraint entries 2..=5).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Metrics {
    /// Capability: the weight of weighted round robin (absent: 1).
    pub capability: Option<u32>,
    /// Load, lower is better (absent: 0 for costs, worst for min-metric).
    pub load: Option<u32>,
    /// The instance's own latency, microseconds (absent: 0).
    pub latency_us: Option<u32>,
    /// Preference, higher is better (absent: 1).
    pub preference: Option<u32>,
}

impl Metrics {
    /// The metrics an announcement's constraints carry.
    pub fn of(c: &Constraints) -> Self {
        Self {
            capability: c.capability(),
            load: c.load(),
            latency_us: c.latency_us(),
            preference: c.preference(),
        }
    }

    /// Whether any metric is given (makes routing constraint-based).
    pub const fn any(&self) -> bool {
        self.capability.is_some()
            || self.load.is_some()
            || self.latency_us.is_some()
            || self.preference.is_some()
    }
}

/// How the best instance is found by routing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RoutePolicy {
    /// Shortest IGP path to the instance's SAR.
    Shortest,
    /// Multi-criteria: shortest extended path (IGP cost plus the
    /// instance's latency in cost units), then widest
    /// (capability / (load + 1)).
    Constrained,
    /// Lowest load, then shortest path.
    MinMetric,
}

/// Which scheduling policy the ingress applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SchedPolicy {
    /// Uniformly random, from the SAR's seeded generator.
    Random,
    /// Cycle through the instances in address order.
    RoundRobin,
    /// Smooth weighted round robin by capability.
    Weighted,
    /// Lowest load (then lowest latency, then address).
    MinMetric,
    /// SPEC §3 pairwise App-Metrics cost, lowest wins.
    AppMetricsCost,
}

/// Routing- or scheduling-based steering of one service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Steering {
    /// Every SAR routes towards the best instance (hop by hop).
    Route(RoutePolicy),
    /// The ingress picks an instance and sends the request straight to it.
    Schedule(SchedPolicy),
}

impl Steering {
    /// The steering an announcement's constraints ask for (module table).
    pub fn of(c: &Constraints) -> Self {
        match c.mode_policy() {
            None if Metrics::of(c).any() => Self::Route(RoutePolicy::Constrained),
            None => Self::Route(RoutePolicy::Shortest),
            Some((mode, policy)) => match policy {
                Policy::Random => Self::Schedule(SchedPolicy::Random),
                Policy::RoundRobin => Self::Schedule(SchedPolicy::RoundRobin),
                Policy::Weighted => Self::Schedule(SchedPolicy::Weighted),
                Policy::AppMetricsCost => Self::Schedule(SchedPolicy::AppMetricsCost),
                Policy::MinMetric if mode == Mode::Scheduling => {
                    Self::Schedule(SchedPolicy::MinMetric)
                }
                Policy::MinMetric if mode == Mode::Routing => Self::Route(RoutePolicy::MinMetric),
                _ => Self::Route(RoutePolicy::Shortest),
            },
        }
    }

    /// The routing policy a transit SAR (or a SAR that is not client
    /// facing) uses for this steering: scheduled services route by
    /// shortest path.
    pub const fn route_policy(self) -> RoutePolicy {
        match self {
            Self::Route(p) => p,
            Self::Schedule(_) => RoutePolicy::Shortest,
        }
    }
}

/// The steering of a whole FIB entry, from its instances' steering in
/// member order (every SAR holds the same members, so every SAR agrees).
/// Computed when the members change, so a request reads one field.
///
/// A *scheduled set* (the instances asking to be scheduled) counts as one
/// site for routing: with routed instances beside it, the ingress first
/// routes over every instance by path cost, and only when a scheduled
/// instance wins does it schedule, over the scheduled set alone. See
/// `Sar::resolve` and `docs/sar.md` ("Steering and policies").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EntrySteering {
    /// Every instance is routed, by the first one's policy.
    Route(RoutePolicy),
    /// Every instance is scheduled at the ingress, by the first one's
    /// policy.
    Schedule(SchedPolicy),
    /// A scheduled set and routed instances.
    Mixed {
        /// The first scheduled instance's policy, applied at the ingress
        /// over the scheduled set when one of it is the routing winner.
        schedule: SchedPolicy,
        /// How every SAR routes over all the instances (the ingress to
        /// choose between the set and the routed instances, the others
        /// hop by hop): the routed instances' policy when they agree on
        /// a path-first one (shortest or constraint-based), else
        /// shortest path.
        route: RoutePolicy,
    },
}

impl EntrySteering {
    /// The entry's steering from its instances' `steerings`, in member
    /// order; an empty entry routes by shortest path.
    pub fn of(steerings: impl IntoIterator<Item = Steering>) -> Self {
        let mut first: Option<Steering> = None;
        let mut schedule: Option<SchedPolicy> = None;
        // The routed instances' policy; `Err` once two disagree.
        let mut route: Option<Result<RoutePolicy, ()>> = None;
        for s in steerings {
            first.get_or_insert(s);
            match s {
                Steering::Schedule(p) => {
                    schedule.get_or_insert(p);
                }
                Steering::Route(p) => {
                    route = match route {
                        None => Some(Ok(p)),
                        Some(Ok(q)) if q == p => Some(Ok(q)),
                        Some(_) => Some(Err(())),
                    };
                }
            }
        }
        match (first, schedule, route) {
            (Some(Steering::Route(p)), None, _) => Self::Route(p),
            (Some(Steering::Schedule(p)), _, None) => Self::Schedule(p),
            (_, Some(schedule), Some(route)) => Self::Mixed {
                schedule,
                // Min-metric ranks load before path: a scheduled instance
                // announces no load (or one meant for its scheduler, and
                // absent counts as worst), so the set could never win on
                // being nearer. Path-first policies compare it fairly.
                route: match route {
                    Ok(p @ (RoutePolicy::Shortest | RoutePolicy::Constrained)) => p,
                    Ok(RoutePolicy::MinMetric) | Err(()) => RoutePolicy::Shortest,
                },
            },
            _ => Self::Route(RoutePolicy::Shortest),
        }
    }

    /// The routing policy of a request that is not scheduled here (at a
    /// SAR that is not the client's ingress, or at the ingress to choose
    /// between a scheduled set and routed instances).
    pub const fn route_policy(self) -> RoutePolicy {
        match self {
            Self::Route(p) | Self::Mixed { route: p, .. } => p,
            Self::Schedule(_) => RoutePolicy::Shortest,
        }
    }
}

/// `Route(Shortest)`, `Schedule(RoundRobin)`, or for a mixed entry
/// `Mixed(Schedule(RoundRobin), Route(Shortest))` (the control socket's
/// `fib`).
impl fmt::Display for EntrySteering {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Route(p) => write!(f, "Route({p:?})"),
            Self::Schedule(p) => write!(f, "Schedule({p:?})"),
            Self::Mixed { schedule, route } => {
                write!(f, "Mixed(Schedule({schedule:?}), Route({route:?}))")
            }
        }
    }
}

/// What a pick sees of one instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    /// The instance's address.
    pub addr: IpAddr,
    /// The SAR it announced at.
    pub origin: RouterId,
    /// IGP cost from this SAR to `origin`; `None`: unreachable (never picked).
    pub path_cost: Option<u64>,
    /// Its metrics.
    pub metrics: Metrics,
}

impl Candidate {
    fn tie(&self) -> (IpAddr, RouterId) {
        (self.addr, self.origin)
    }
}

/// Tunables of the picks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tuning {
    /// Microseconds of announced latency worth one IGP cost unit
    /// (constraint-based routing and the App-Metrics delay).
    pub latency_us_per_cost: u32,
    /// The App-Metrics load weight `w` in 0..=1 (SPEC §3).
    pub app_metrics_w: f64,
}

impl Default for Tuning {
    fn default() -> Self {
        Self {
            latency_us_per_cost: 100,
            app_metrics_w: 0.5,
        }
    }
}

/// The index of the best candidate by routing policy `p`; `None` if none
/// is reachable.
pub fn route(p: RoutePolicy, t: &Tuning, cands: impl Iterator<Item = Candidate>) -> Option<usize> {
    cands
        .enumerate()
        .filter(|(_, c)| c.path_cost.is_some())
        .min_by(|(_, a), (_, b)| route_order(p, t, a, b))
        .map(|(i, _)| i)
}

fn route_order(p: RoutePolicy, t: &Tuning, a: &Candidate, b: &Candidate) -> Ordering {
    let cost = |c: &Candidate| c.path_cost.unwrap_or(u64::MAX);
    match p {
        RoutePolicy::Shortest => cost(a).cmp(&cost(b)).then(a.tie().cmp(&b.tie())),
        RoutePolicy::MinMetric => load_key(a)
            .cmp(&load_key(b))
            .then(cost(a).cmp(&cost(b)))
            .then(a.tie().cmp(&b.tie())),
        RoutePolicy::Constrained => {
            let ext = |c: &Candidate| {
                let lat = u64::from(c.metrics.latency_us.unwrap_or(0));
                cost(c).saturating_add(lat.div_ceil(u64::from(t.latency_us_per_cost.max(1))))
            };
            ext(a)
                .cmp(&ext(b))
                .then(wider(a, b))
                .then(a.tie().cmp(&b.tie()))
        }
    }
}

/// `Less` if `a` is wider than `b`: capability/(load+1), compared exactly.
fn wider(a: &Candidate, b: &Candidate) -> Ordering {
    let cap = |c: &Candidate| u128::from(c.metrics.capability.unwrap_or(1));
    let load = |c: &Candidate| u128::from(c.metrics.load.unwrap_or(0)) + 1;
    (cap(b) * load(a)).cmp(&(cap(a) * load(b)))
}

fn load_key(c: &Candidate) -> u64 {
    c.metrics.load.map_or(u64::MAX, u64::from)
}

/// Scheduling state kept per FIB entry (client-facing SARs only use it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SchedState {
    /// Round robin: requests scheduled so far.
    pub rr_next: u64,
    /// Smooth WRR current weights, one per instance (same order).
    pub wrr_current: Vec<i64>,
}

impl SchedState {
    /// Forget the cycle position (the instance set changed).
    pub fn reset(&mut self, instances: usize) {
        self.rr_next = 0;
        self.wrr_current.clear();
        self.wrr_current.resize(instances, 0);
    }
}

/// Pick among `cands` (the FIB entry's instances, in their stable order)
/// by scheduling policy `p`: the index chosen, `None` if none is reachable.
/// `rng` is the SAR's seeded generator (only [`SchedPolicy::Random`] uses it).
pub fn schedule(
    p: SchedPolicy,
    t: &Tuning,
    state: &mut SchedState,
    rng: &mut Rng,
    cands: &[Candidate],
) -> Option<usize> {
    let n = cands.len();
    let up = |i: usize| cands[i].path_cost.is_some();
    match p {
        SchedPolicy::RoundRobin => {
            for _ in 0..n {
                // n ≤ u32::MAX instances per name.
                let i = (state.rr_next % n as u64) as usize;
                state.rr_next = state.rr_next.wrapping_add(1);
                if up(i) {
                    return Some(i);
                }
            }
            None
        }
        SchedPolicy::Random => {
            let live = (0..n).filter(|i| up(*i)).count();
            if live == 0 {
                return None;
            }
            let k = rng.below(live as u64) as usize;
            (0..n).filter(|i| up(*i)).nth(k)
        }
        SchedPolicy::Weighted => {
            if state.wrr_current.len() != n {
                state.reset(n);
            }
            let weight = |i: usize| {
                if up(i) {
                    i64::from(cands[i].metrics.capability.unwrap_or(1))
                } else {
                    0
                }
            };
            let total: i64 = (0..n).map(weight).sum();
            if total == 0 {
                // Every live instance announced capability 0: plain RR.
                return schedule(SchedPolicy::RoundRobin, t, state, rng, cands);
            }
            let mut best: Option<usize> = None;
            for i in 0..n {
                state.wrr_current[i] += weight(i);
                if weight(i) > 0 && best.is_none_or(|b| state.wrr_current[i] > state.wrr_current[b])
                {
                    best = Some(i);
                }
            }
            let b = best?;
            state.wrr_current[b] -= total;
            Some(b)
        }
        SchedPolicy::MinMetric => (0..n).filter(|i| up(*i)).min_by(|a, b| {
            let (ca, cb) = (&cands[*a], &cands[*b]);
            load_key(ca)
                .cmp(&load_key(cb))
                .then(ca.metrics.latency_us.cmp(&cb.metrics.latency_us))
                .then(ca.tie().cmp(&cb.tie()))
        }),
        SchedPolicy::AppMetricsCost => app_metrics_pick(t, cands),
    }
}

/// SPEC §3: score_i = w·(Load_i/CP_i)/mean_k(Load_k/CP_k) +
/// (1−w)·(Delay_i/Pref_i)/mean_k(Delay_k/Pref_k), lowest wins; Load + 1
/// avoids zero, Delay = IGP path cost + announced latency (in cost units)
/// + 1, CP and Pref default to 1 (0 counts as 1).
pub fn app_metrics_pick(t: &Tuning, cands: &[Candidate]) -> Option<usize> {
    let live: Vec<usize> = (0..cands.len())
        .filter(|i| cands[*i].path_cost.is_some())
        .collect();
    if live.is_empty() {
        return None;
    }
    let lp = |c: &Candidate| {
        let load = f64::from(c.metrics.load.unwrap_or(0)) + 1.0;
        load / f64::from(c.metrics.capability.unwrap_or(1).max(1))
    };
    let dp = |c: &Candidate| {
        let lat = u64::from(c.metrics.latency_us.unwrap_or(0))
            .div_ceil(u64::from(t.latency_us_per_cost.max(1)));
        let delay = c
            .path_cost
            .unwrap_or(0)
            .saturating_add(lat)
            .saturating_add(1) as f64;
        delay / f64::from(c.metrics.preference.unwrap_or(1).max(1))
    };
    let k = live.len() as f64;
    let mean_l = live.iter().map(|i| lp(&cands[*i])).sum::<f64>() / k;
    let mean_d = live.iter().map(|i| dp(&cands[*i])).sum::<f64>() / k;
    let w = t.app_metrics_w.clamp(0.0, 1.0);
    let score = |c: &Candidate| w * lp(c) / mean_l + (1.0 - w) * dp(c) / mean_d;
    live.into_iter().min_by(|a, b| {
        let (ca, cb) = (&cands[*a], &cands[*b]);
        score(ca)
            .total_cmp(&score(cb))
            .then(ca.tie().cmp(&cb.tie()))
    })
}

/// The SAR's deterministic generator (splitmix64), seeded from config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub const fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n` > 0), by Lemire's multiply-shift with
    /// rejection, so no index is favoured.
    pub fn below(&mut self, n: u64) -> u64 {
        loop {
            let m = u128::from(self.next_u64()) * u128::from(n);
            let low = m as u64;
            if low >= n.wrapping_neg() % n {
                return (m >> 64) as u64;
            }
        }
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1_u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use svcroute_stack::wire::rosa::Constraint;

    use super::*;

    fn cand(i: u8, cost: Option<u64>, m: Metrics) -> Candidate {
        Candidate {
            addr: IpAddr::from([0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, i]),
            origin: RouterId(u32::from(i)),
            path_cost: cost,
            metrics: m,
        }
    }

    fn cap(c: u32) -> Metrics {
        Metrics {
            capability: Some(c),
            ..Metrics::default()
        }
    }

    fn load(l: u32) -> Metrics {
        Metrics {
            load: Some(l),
            ..Metrics::default()
        }
    }

    fn run(p: SchedPolicy, cands: &[Candidate], n: usize) -> Vec<usize> {
        let mut st = SchedState::default();
        st.reset(cands.len());
        let mut rng = Rng::new(7);
        (0..n)
            .map(|_| schedule(p, &Tuning::default(), &mut st, &mut rng, cands).unwrap())
            .collect()
    }

    #[test]
    fn steering_table() {
        let mp = |m: u8, p: u8| {
            Constraints(vec![Constraint::ModePolicy {
                mode: Mode::from(m),
                policy: Policy::from(p),
            }])
        };
        assert_eq!(
            Steering::of(&Constraints::default()),
            Steering::Route(RoutePolicy::Shortest)
        );
        let life = Constraints(vec![Constraint::LifetimeS(30)]);
        assert_eq!(Steering::of(&life), Steering::Route(RoutePolicy::Shortest));
        let metrics = Constraints(vec![Constraint::Load(3)]);
        assert_eq!(
            Steering::of(&metrics),
            Steering::Route(RoutePolicy::Constrained)
        );
        assert_eq!(
            Steering::of(&mp(0, 0)),
            Steering::Route(RoutePolicy::Shortest)
        );
        assert_eq!(
            Steering::of(&mp(0, 4)),
            Steering::Route(RoutePolicy::MinMetric)
        );
        assert_eq!(
            Steering::of(&mp(1, 4)),
            Steering::Schedule(SchedPolicy::MinMetric)
        );
        assert_eq!(
            Steering::of(&mp(1, 1)),
            Steering::Schedule(SchedPolicy::Random)
        );
        assert_eq!(
            Steering::of(&mp(0, 2)),
            Steering::Schedule(SchedPolicy::RoundRobin)
        );
        assert_eq!(
            Steering::of(&mp(1, 3)),
            Steering::Schedule(SchedPolicy::Weighted)
        );
        assert_eq!(
            Steering::of(&mp(0, 5)),
            Steering::Schedule(SchedPolicy::AppMetricsCost)
        );
        assert_eq!(
            Steering::of(&mp(1, 0)),
            Steering::Route(RoutePolicy::Shortest)
        );
        assert_eq!(
            Steering::of(&mp(9, 9)),
            Steering::Route(RoutePolicy::Shortest)
        );
        assert_eq!(
            Steering::Schedule(SchedPolicy::Weighted).route_policy(),
            RoutePolicy::Shortest
        );
    }

    #[test]
    fn entry_steering_from_members() {
        use EntrySteering as E;
        use RoutePolicy::{Constrained, MinMetric, Shortest};
        use SchedPolicy::{RoundRobin, Weighted};
        let (r, s) = (Steering::Route, Steering::Schedule);
        assert_eq!(E::of([]), E::Route(Shortest));
        // Uniform entries: the first instance's policy, as before.
        assert_eq!(E::of([r(MinMetric), r(Shortest)]), E::Route(MinMetric));
        assert_eq!(E::of([s(Weighted), s(RoundRobin)]), E::Schedule(Weighted));
        // Mixed, whichever comes first: the first scheduled policy, and
        // the routed instances' path-first policy when they agree.
        let mixed = |route| E::Mixed {
            schedule: RoundRobin,
            route,
        };
        assert_eq!(E::of([r(Shortest), s(RoundRobin)]), mixed(Shortest));
        assert_eq!(
            E::of([s(RoundRobin), s(Weighted), r(Constrained)]),
            mixed(Constrained)
        );
        assert_eq!(
            E::of([r(Constrained), s(RoundRobin), r(Constrained)]),
            mixed(Constrained)
        );
        // Disagreeing or load-first routed instances: shortest path.
        assert_eq!(
            E::of([r(Constrained), s(RoundRobin), r(Shortest)]),
            mixed(Shortest)
        );
        assert_eq!(E::of([s(RoundRobin), r(MinMetric)]), mixed(Shortest));
        // Who routes what: transit SARs route scheduled entries by path.
        assert_eq!(E::Schedule(Weighted).route_policy(), Shortest);
        assert_eq!(mixed(Constrained).route_policy(), Constrained);
        assert_eq!(E::Route(MinMetric).route_policy(), MinMetric);
        assert_eq!(
            mixed(Shortest).to_string(),
            "Mixed(Schedule(RoundRobin), Route(Shortest))"
        );
        assert_eq!(E::Route(Shortest).to_string(), "Route(Shortest)");
        assert_eq!(E::Schedule(Weighted).to_string(), "Schedule(Weighted)");
    }

    #[test]
    fn round_robin_is_exact() {
        let cands = [
            cand(1, Some(1), Metrics::default()),
            cand(2, Some(9), Metrics::default()),
            cand(3, Some(0), Metrics::default()),
        ];
        let picks = run(SchedPolicy::RoundRobin, &cands, 300);
        // Exactly cyclic: 0 1 2 0 1 2 ...
        for (k, p) in picks.iter().enumerate() {
            assert_eq!(*p, k % 3);
        }
        // An unreachable instance is skipped, the others keep alternating.
        let cands = [cands[0], cand(2, None, Metrics::default()), cands[2]];
        let picks = run(SchedPolicy::RoundRobin, &cands, 10);
        assert_eq!(picks, [0, 2, 0, 2, 0, 2, 0, 2, 0, 2]);
    }

    #[test]
    fn smooth_wrr_exact_ratios() {
        // nginx's example: weights 5, 1, 1 give a a b a c a a per cycle.
        let cands = [
            cand(1, Some(1), cap(5)),
            cand(2, Some(1), cap(1)),
            cand(3, Some(1), cap(1)),
        ];
        let picks = run(SchedPolicy::Weighted, &cands, 7);
        assert_eq!(picks, [0, 0, 1, 0, 2, 0, 0]);
        // Exact ratios over every cycle of sum(weights) picks.
        let cands = [
            cand(1, Some(1), cap(3)),
            cand(2, Some(1), cap(2)),
            cand(3, Some(1), cap(5)),
            cand(4, Some(1), cap(0)),
        ];
        let picks = run(SchedPolicy::Weighted, &cands, 10 * 100);
        for cycle in picks.chunks(10) {
            let count = |i| cycle.iter().filter(|p| **p == i).count();
            assert_eq!([count(0), count(1), count(2), count(3)], [3, 2, 5, 0]);
        }
        // Capability absent counts as 1; all zero falls back to round robin.
        let cands = [
            cand(1, Some(1), Metrics::default()),
            cand(2, Some(1), cap(3)),
        ];
        let picks = run(SchedPolicy::Weighted, &cands, 400);
        assert_eq!(picks.iter().filter(|p| **p == 0).count(), 100);
        let cands = [cand(1, Some(1), cap(0)), cand(2, Some(1), cap(0))];
        assert_eq!(run(SchedPolicy::Weighted, &cands, 4), [0, 1, 0, 1]);
        // Unreachable instances get nothing.
        let cands = [cand(1, None, cap(5)), cand(2, Some(1), cap(1))];
        assert_eq!(run(SchedPolicy::Weighted, &cands, 3), [1, 1, 1]);
    }

    #[test]
    fn random_is_seeded_and_uniform() {
        let cands = [
            cand(1, Some(1), Metrics::default()),
            cand(2, Some(1), Metrics::default()),
            cand(3, None, Metrics::default()),
            cand(4, Some(1), Metrics::default()),
        ];
        let a = run(SchedPolicy::Random, &cands, 30_000);
        let b = run(SchedPolicy::Random, &cands, 30_000);
        assert_eq!(a, b, "same seed, same sequence");
        let count = |i| a.iter().filter(|p| **p == i).count();
        assert_eq!(count(2), 0, "unreachable never picked");
        for i in [0, 1, 3] {
            // Expected 10,000 each; this seed's draw is deterministic.
            assert!((9_500..=10_500).contains(&count(i)), "{i}: {}", count(i));
        }
        let mut r = Rng::new(1);
        for _ in 0..1000 {
            assert!(r.below(3) < 3);
            let u = r.unit();
            assert!((0.0..1.0).contains(&u));
        }
    }

    #[test]
    fn min_metric_follows_changes() {
        let mut cands = [
            cand(1, Some(1), load(50)),
            cand(2, Some(9), load(10)),
            cand(3, Some(1), Metrics::default()),
        ];
        assert_eq!(run(SchedPolicy::MinMetric, &cands, 3), [1, 1, 1]);
        cands[0].metrics = load(5);
        assert_eq!(run(SchedPolicy::MinMetric, &cands, 1), [0]);
        cands[0].path_cost = None;
        assert_eq!(run(SchedPolicy::MinMetric, &cands, 1), [1]);
        // Equal loads: lower latency, then lower address.
        let cands = [
            cand(
                1,
                Some(1),
                Metrics {
                    load: Some(1),
                    latency_us: Some(9),
                    ..Metrics::default()
                },
            ),
            cand(
                2,
                Some(1),
                Metrics {
                    load: Some(1),
                    latency_us: Some(3),
                    ..Metrics::default()
                },
            ),
        ];
        assert_eq!(run(SchedPolicy::MinMetric, &cands, 1), [1]);
        // As a routing policy: lowest load, then path.
        let cands = [
            cand(1, Some(1), load(5)),
            cand(2, Some(3), load(5)),
            cand(3, Some(0), load(6)),
        ];
        let best = route(
            RoutePolicy::MinMetric,
            &Tuning::default(),
            cands.iter().copied(),
        );
        assert_eq!(best, Some(0));
    }

    #[test]
    fn routing_picks() {
        let t = Tuning::default();
        let cands = [
            cand(3, Some(5), Metrics::default()),
            cand(1, Some(5), Metrics::default()),
            cand(2, Some(7), Metrics::default()),
            cand(4, None, Metrics::default()),
        ];
        // Shortest, ties on the lower address.
        let best = route(RoutePolicy::Shortest, &t, cands.iter().copied());
        assert_eq!(best, Some(1));
        assert_eq!(
            route(RoutePolicy::Shortest, &t, [cands[3]].into_iter()),
            None
        );
        // Constrained: latency joins the path cost (100 µs per unit)...
        let cands = [
            cand(
                1,
                Some(5),
                Metrics {
                    latency_us: Some(1_000),
                    ..Metrics::default()
                },
            ), // 5 + 10
            cand(
                2,
                Some(8),
                Metrics {
                    latency_us: Some(100),
                    ..Metrics::default()
                },
            ), // 8 + 1
            cand(3, Some(9), Metrics::default()), // 9
        ];
        let best = route(RoutePolicy::Constrained, &t, cands.iter().copied());
        assert_eq!(
            best,
            Some(1),
            "9 < 15; 9 ties 9, equally wide: lower address"
        );
        // ...then the widest: capability / (load + 1).
        let cands = [
            cand(
                1,
                Some(4),
                Metrics {
                    capability: Some(10),
                    load: Some(9),
                    ..Metrics::default()
                },
            ), // 1
            cand(
                2,
                Some(4),
                Metrics {
                    capability: Some(3),
                    load: Some(1),
                    ..Metrics::default()
                },
            ), // 1.5
            cand(
                3,
                Some(6),
                Metrics {
                    capability: Some(99),
                    load: Some(0),
                    ..Metrics::default()
                },
            ), // longer
        ];
        let best = route(RoutePolicy::Constrained, &t, cands.iter().copied());
        assert_eq!(best, Some(1));
    }

    #[test]
    fn app_metrics_cost() {
        let t = Tuning::default();
        // Equal delays: the lower load per capacity wins.
        let cands = [
            cand(
                1,
                Some(2),
                Metrics {
                    load: Some(99),
                    capability: Some(10),
                    ..Metrics::default()
                },
            ), // 10
            cand(
                2,
                Some(2),
                Metrics {
                    load: Some(49),
                    capability: Some(10),
                    ..Metrics::default()
                },
            ), // 5
        ];
        assert_eq!(app_metrics_pick(&t, &cands), Some(1));
        // w = 0: only delay/preference counts.
        let t0 = Tuning {
            app_metrics_w: 0.0,
            ..t
        };
        let cands = [
            cand(
                1,
                Some(9),
                Metrics {
                    load: Some(0),
                    preference: Some(10),
                    ..Metrics::default()
                },
            ), // 10/10
            cand(
                2,
                Some(1),
                Metrics {
                    load: Some(1000),
                    ..Metrics::default()
                },
            ), // 2/1
        ];
        assert_eq!(app_metrics_pick(&t0, &cands), Some(0));
        let t1 = Tuning {
            app_metrics_w: 1.0,
            ..t
        };
        assert_eq!(app_metrics_pick(&t1, &cands), Some(0));
        let cands = [
            cands[0],
            cand(
                2,
                Some(1),
                Metrics {
                    load: Some(0),
                    preference: Some(4),
                    ..Metrics::default()
                },
            ), // 2/4
        ];
        // Equal loads, w = 1: tie on score, lower address; w = 0: 0.5 < 1.
        assert_eq!(app_metrics_pick(&t1, &cands), Some(0));
        assert_eq!(app_metrics_pick(&t0, &cands), Some(1));
        assert_eq!(
            app_metrics_pick(&t, &[cand(1, None, Metrics::default())]),
            None
        );
    }
}
