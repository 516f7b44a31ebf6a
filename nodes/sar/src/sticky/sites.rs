//! The egress sites an ingress can steer to, and the choice among them
//! for a new flow (SPEC §3; draft-dunbar-lsr-5g-edge-compute-ospf-ext
//! §3.3, §4, §6).
//!
//! ```text
//!   App-Metrics LSA of router R ─► Site R: address, tunnel, per anycast:
//!                                   load index, capacity, preference, aggregated cost
//!   SPF ─────────────────────────► reachable, path cost
//!   probes (IGP type 4) ─────────► RTT ingress → egress (smoothed)
//!
//!   choose(anycast): among reachable sites advertising it
//!     every one has an aggregated cost ─► lowest path cost + aggregated cost
//!     else ─► lowest score_i = w·(Load_i/CP_i)/mean(Load/CP) + (1−w)·(Delay_i/Pref_i)/mean(Delay/Pref)
//!             Load = index + 1; Delay = RTT µs, or path cost × 1000 while any RTT is unmeasured
//!   ties: lowest router ID
//! ```
//!
//! A site keeps its index for the node's life (entries of the sticky
//! table hold it), so the registry only grows, up to [`MAX_SITES`]; a site
//! that stops advertising or becomes unreachable stays, marked so.

use std::collections::{BTreeMap, HashMap};
use std::net::Ipv6Addr;

use svcroute_stack::wire::appmetrics::AppMetrics;
use svcroute_stack::wire::igp::RouterId;

use super::tunnel::TunnelKind;

/// Most sites in the registry.
pub const MAX_SITES: usize = 4096;

/// What a site advertises for one anycast address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Offer {
    /// Aggregated Load Index and its period, if advertised.
    pub load: Option<(u32, u32)>,
    /// Capacity Index (1 if absent).
    pub capacity: u32,
    /// Preference Index (1 if absent).
    pub preference: u32,
    /// Aggregated cost, if advertised.
    pub cost: Option<u32>,
}

impl Offer {
    /// The offer in App-Metrics sub-TLVs.
    pub fn of(m: &AppMetrics) -> Self {
        Self {
            load: m.aggregated_load(),
            capacity: m.capacity().unwrap_or(1).max(1),
            preference: m.preference().unwrap_or(1).max(1),
            cost: m.aggregated_cost(),
        }
    }
}

/// One egress site.
#[derive(Debug, Clone, PartialEq)]
pub struct Site {
    /// The egress SAR.
    pub router: RouterId,
    /// Its address (the tunnel's far end), from SPF.
    pub addr: Option<Ipv6Addr>,
    /// The path cost to it, when reachable.
    pub path_cost: Option<u64>,
    /// The tunnel it asks for.
    pub tunnel: TunnelKind,
    /// Smoothed RTT from here, microseconds, once probed.
    pub rtt_us: Option<u64>,
    /// What it offers, by anycast address (empty: it advertises nothing).
    pub offers: BTreeMap<Ipv6Addr, Offer>,
}

impl Site {
    /// Whether new flows may go here for `anycast`.
    pub fn serves(&self, anycast: Ipv6Addr) -> bool {
        self.path_cost.is_some() && self.offers.contains_key(&anycast)
    }
}

/// How a candidate scored.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scored {
    /// The site's index.
    pub site: u16,
    /// Its score (lower is better).
    pub score: f64,
    /// The load term (`None` in aggregated-cost mode).
    pub load_term: Option<f64>,
    /// The delay term.
    pub delay_term: Option<f64>,
    /// The delay used, microseconds (or cost units × 1000).
    pub delay: f64,
    /// Whether the score came from aggregated costs.
    pub by_cost: bool,
}

/// The registry. See the module docs.
#[derive(Debug, Clone, Default)]
pub struct Sites {
    list: Vec<Site>,
    by_router: HashMap<RouterId, u16>,
    by_addr: HashMap<Ipv6Addr, u16>,
    /// The winner per anycast address, until something changes.
    cache: HashMap<Ipv6Addr, Option<u16>>,
}

impl Sites {
    /// Every site, by index.
    pub fn list(&self) -> &[Site] {
        &self.list
    }

    /// A site by index.
    pub fn get(&self, i: u16) -> Option<&Site> {
        self.list.get(usize::from(i))
    }

    /// The site whose egress address is `addr`.
    pub fn by_addr(&self, addr: Ipv6Addr) -> Option<u16> {
        self.by_addr.get(&addr).copied()
    }

    /// The site of router `r`.
    pub fn by_router(&self, r: RouterId) -> Option<u16> {
        self.by_router.get(&r).copied()
    }

    /// The site of router `r`, created if new (`None` when the registry
    /// is full).
    pub fn entry(&mut self, r: RouterId) -> Option<u16> {
        if let Some(i) = self.by_router.get(&r) {
            return Some(*i);
        }
        if self.list.len() >= MAX_SITES {
            return None;
        }
        let i = self.list.len() as u16;
        self.list.push(Site {
            router: r,
            addr: None,
            path_cost: None,
            tunnel: TunnelKind::Ipip,
            rtt_us: None,
            offers: BTreeMap::new(),
        });
        self.by_router.insert(r, i);
        Some(i)
    }

    /// Router `r` advertises `entries` (anycast, App-Metrics), or nothing.
    pub fn set_offers(&mut self, r: RouterId, entries: &[(Ipv6Addr, AppMetrics)]) {
        let Some(i) = self.entry(r) else {
            return;
        };
        let s = &mut self.list[usize::from(i)];
        s.offers = entries.iter().map(|(a, m)| (*a, Offer::of(m))).collect();
        s.tunnel = entries
            .iter()
            .find_map(|(_, m)| m.tunnel())
            .and_then(|c| TunnelKind::from_code(c as u16))
            .unwrap_or_default();
        self.cache.clear();
    }

    /// The SPF result: every site's address and path cost (`None`:
    /// unreachable).
    pub fn set_routes(&mut self, route: impl Fn(RouterId) -> Option<(Ipv6Addr, u64)>) {
        self.by_addr.clear();
        for (i, s) in self.list.iter_mut().enumerate() {
            match route(s.router) {
                Some((addr, cost)) => {
                    s.addr = Some(addr);
                    s.path_cost = Some(cost);
                    self.by_addr.insert(addr, i as u16);
                }
                None => {
                    s.path_cost = None;
                    if let Some(a) = s.addr {
                        self.by_addr.insert(a, i as u16);
                    }
                }
            }
        }
        self.cache.clear();
    }

    /// A new RTT sample for router `r`'s site (smoothed 7/8 old + 1/8 new).
    pub fn rtt_sample(&mut self, r: RouterId, rtt_us: u64) {
        let Some(i) = self.by_router.get(&r) else {
            return;
        };
        let s = &mut self.list[usize::from(*i)];
        s.rtt_us = Some(match s.rtt_us {
            Some(old) => (old * 7 + rtt_us) / 8,
            None => rtt_us,
        });
        self.cache.clear();
    }

    /// The site a new flow to `anycast` goes to.
    pub fn choose(&mut self, anycast: Ipv6Addr, w: f64) -> Option<u16> {
        if let Some(c) = self.cache.get(&anycast) {
            return *c;
        }
        let best = self
            .scores(anycast, w)
            .into_iter()
            .min_by(|a, b| {
                a.score.total_cmp(&b.score).then_with(|| {
                    let ra = self.list[usize::from(a.site)].router;
                    let rb = self.list[usize::from(b.site)].router;
                    ra.cmp(&rb)
                })
            })
            .map(|s| s.site);
        self.cache.insert(anycast, best);
        best
    }

    /// The score of every site that may take a new flow to `anycast`.
    pub fn scores(&self, anycast: Ipv6Addr, w: f64) -> Vec<Scored> {
        let cands: Vec<(u16, &Site, Offer)> = self
            .list
            .iter()
            .enumerate()
            .filter(|(_, s)| s.serves(anycast))
            .map(|(i, s)| (i as u16, s, s.offers[&anycast]))
            .collect();
        if cands.is_empty() {
            return Vec::new();
        }
        let path = |s: &Site| s.path_cost.unwrap_or(u64::MAX / 4) as f64;
        if cands.iter().all(|(_, _, o)| o.cost.is_some()) {
            return cands
                .iter()
                .map(|(i, s, o)| Scored {
                    site: *i,
                    score: path(s) + f64::from(o.cost.unwrap_or(0)),
                    load_term: None,
                    delay_term: None,
                    delay: path(s),
                    by_cost: true,
                })
                .collect();
        }
        let all_rtt = cands.iter().all(|(_, s, _)| s.rtt_us.is_some());
        let delay = |s: &Site| match (all_rtt, s.rtt_us) {
            (true, Some(r)) => r.max(1) as f64,
            _ => path(s) * 1000.0 + 1.0,
        };
        let lp =
            |o: &Offer| (f64::from(o.load.map_or(0, |(_, l)| l)) + 1.0) / f64::from(o.capacity);
        let dp = |s: &Site, o: &Offer| delay(s) / f64::from(o.preference);
        let k = cands.len() as f64;
        let mean_l = cands.iter().map(|(_, _, o)| lp(o)).sum::<f64>() / k;
        let mean_d = cands.iter().map(|(_, s, o)| dp(s, o)).sum::<f64>() / k;
        let w = w.clamp(0.0, 1.0);
        cands
            .iter()
            .map(|(i, s, o)| {
                let l = w * lp(o) / mean_l;
                let d = (1.0 - w) * dp(s, o) / mean_d;
                Scored {
                    site: *i,
                    score: l + d,
                    load_term: Some(l),
                    delay_term: Some(d),
                    delay: delay(s),
                    by_cost: false,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use svcroute_stack::wire::appmetrics::Metric;

    use super::*;

    fn metrics(load: u32, cp: u32, pref: u32) -> AppMetrics {
        AppMetrics::new(vec![
            Metric::AggregatedLoad {
                period_s: 10,
                index: load,
            },
            Metric::Capacity(cp),
            Metric::Preference(pref),
        ])
        .unwrap()
    }

    fn a(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    /// Three sites; hand-computed scores with w = 0.5:
    /// Load/CP = 100/10 = 10, 301/10 = 30.1, 51/5 = 10.2 (mean 16.7667);
    /// Delay/Pref = 1000/1, 2000/1, 1000/1 (mean 1333.33).
    #[test]
    fn the_formula_scores_as_spec_section_3_says() {
        let any = a("fd00:aa::1");
        let mut s = Sites::default();
        for (r, load, cp) in [(1, 99, 10), (2, 300, 10), (3, 50, 5)] {
            s.set_offers(RouterId(r), &[(any, metrics(load, cp, 1))]);
        }
        s.set_routes(|r| Some((Ipv6Addr::from(u128::from(r.0)), 10)));
        for (r, rtt) in [(1, 1000), (2, 2000), (3, 1000)] {
            s.rtt_sample(RouterId(r), rtt);
        }
        let sc = s.scores(any, 0.5);
        let want = [
            0.5 * 10.0 / 16.7667 + 0.5 * 1000.0 / 1333.333,
            0.5 * 30.1 / 16.7667 + 0.5 * 2000.0 / 1333.333,
            0.5 * 10.2 / 16.7667 + 0.5 * 1000.0 / 1333.333,
        ];
        for (got, want) in sc.iter().zip(want) {
            assert!((got.score - want).abs() < 1e-3, "{got:?} vs {want}");
        }
        assert_eq!(s.choose(any, 0.5), Some(0));
        // w = 0: delay and preference alone; sites 0 and 2 tie, router 1 wins.
        s.cache.clear();
        assert_eq!(s.choose(any, 0.0), Some(0));
        // Site 0 loaded: the next cheapest takes new flows.
        s.set_offers(RouterId(1), &[(any, metrics(900, 10, 1))]);
        assert_eq!(s.choose(any, 0.5), Some(2));
        // Site 2 unreachable: only 0 and 1 remain.
        s.set_routes(|r| (r.0 != 3).then(|| (Ipv6Addr::from(u128::from(r.0)), 10)));
        assert_eq!(s.choose(any, 0.5), Some(1));
        assert!(!s.get(2).unwrap().serves(any));
    }

    #[test]
    fn aggregated_costs_route_by_path_plus_cost() {
        let l1 = a("fd00:aa::11");
        let mut s = Sites::default();
        let cost = |c| AppMetrics::new(vec![Metric::AggregatedCost(c), Metric::Tunnel(2)]).unwrap();
        s.set_offers(RouterId(1), &[(l1, cost(10))]);
        s.set_offers(RouterId(2), &[(l1, cost(30))]);
        s.set_routes(|r| {
            Some((
                Ipv6Addr::from(u128::from(r.0)),
                if r.0 == 1 { 25 } else { 10 },
            ))
        });
        // 25 + 10 < 10 + 30.
        assert_eq!(s.choose(l1, 0.5), Some(0));
        assert_eq!(s.get(0).unwrap().tunnel, TunnelKind::Gre);
        // The preferred site fails: the next cheapest.
        s.set_routes(|r| (r.0 == 2).then(|| (Ipv6Addr::from(u128::from(r.0)), 10)));
        assert_eq!(s.choose(l1, 0.5), Some(1));
        assert_eq!(
            s.by_addr(Ipv6Addr::from(1_u128)),
            Some(0),
            "a gone site is still known"
        );
    }
}
