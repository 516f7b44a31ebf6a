//! The egress's App-Metrics (draft-dunbar-lsr-5g-edge-compute-ospf-ext
//! §3.2, §5.3): packets and octets to and from each attached anycast
//! server, counted per measurement period, turned into the load index
//! `w1·ToPackets + w2·FromPackets + w3·ToBytes + w4·FromBytes` at the
//! period's end and advertised with the site's capacity and preference —
//! or, in the aggregated-cost variant (§4), as one cost.
//!
//! ```text
//!   to/from packet ─► count(site) ─► period ends ─► last = counts, counts = 0
//!                                                     └► entries(): one AppMetricsEntry per site
//! ```
//!
//! The aggregated cost **\[ext\]** (the draft asks only for a "consistent
//! algorithm") is `ceil(1000 · (index + 1) / (capacity · preference))`, so
//! more load raises it and more capacity or preference lowers it; a site
//! configured with a fixed `cost` (soft anchoring) advertises that.

use std::net::{IpAddr, Ipv6Addr};

use svcroute_stack::wire::appmetrics::{AppMetrics, Metric, RawLoad};
use svcroute_stack::wire::igp::AppMetricsEntry;

use super::config::{Advertise, EgressSettings, Site};

/// Counters of one period.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Packets to the server.
    pub to_packets: u64,
    /// Packets from the server.
    pub from_packets: u64,
    /// Octets to the server.
    pub to_bytes: u64,
    /// Octets from the server.
    pub from_bytes: u64,
}

/// One site's meter.
#[derive(Debug, Clone, PartialEq)]
pub struct Meter {
    /// The site (capacity and preference may change at run time).
    pub site: Site,
    /// This period so far.
    pub current: Counts,
    /// The last complete period.
    pub last: Counts,
}

impl Meter {
    /// The load index of the last complete period.
    pub fn index(&self, w: &[f64; 4]) -> u32 {
        let c = self.last;
        let v = w[0] * c.to_packets as f64
            + w[1] * c.from_packets as f64
            + w[2] * c.to_bytes as f64
            + w[3] * c.from_bytes as f64;
        v.round().clamp(0.0, f64::from(u32::MAX)) as u32
    }

    /// The aggregated cost it advertises.
    pub fn cost(&self, w: &[f64; 4]) -> u32 {
        if let Some(c) = self.site.cost {
            return c;
        }
        let load = u64::from(self.index(w)) + 1;
        let div = u64::from(self.site.capacity.max(1)) * u64::from(self.site.preference.max(1));
        (load * 1000).div_ceil(div).min(u64::from(u32::MAX)) as u32
    }
}

/// Every attached site's meter.
#[derive(Debug, Clone, PartialEq)]
pub struct Meters {
    /// By site, in config order.
    pub sites: Vec<Meter>,
}

impl Meters {
    /// Meters for the configured sites, all at zero.
    pub fn new(cfg: &EgressSettings) -> Self {
        Self {
            sites: cfg
                .sites
                .iter()
                .map(|s| Meter {
                    site: *s,
                    current: Counts::default(),
                    last: Counts::default(),
                })
                .collect(),
        }
    }

    /// The meter of anycast `addr`, if it is served here.
    pub fn get_mut(&mut self, addr: Ipv6Addr) -> Option<&mut Meter> {
        self.sites.iter_mut().find(|m| m.site.anycast == addr)
    }

    /// Whether `addr` is served here.
    pub fn serves(&self, addr: Ipv6Addr) -> bool {
        self.sites.iter().any(|m| m.site.anycast == addr)
    }

    /// A packet of `len` octets to (`to`) or from the server of `addr`.
    pub fn count(&mut self, addr: Ipv6Addr, to: bool, len: usize) {
        let Some(m) = self.get_mut(addr) else {
            return;
        };
        let c = &mut m.current;
        if to {
            c.to_packets += 1;
            c.to_bytes += len as u64;
        } else {
            c.from_packets += 1;
            c.from_bytes += len as u64;
        }
    }

    /// The period ended.
    pub fn roll(&mut self) {
        for m in &mut self.sites {
            m.last = std::mem::take(&mut m.current);
        }
    }

    /// What the egress floods: one entry per site.
    pub fn entries(&self, cfg: &EgressSettings) -> Vec<AppMetricsEntry> {
        let tunnel = Metric::Tunnel(u32::from(cfg.tunnel.code()));
        self.sites
            .iter()
            .map(|m| {
                let list = if cfg.advertise == Advertise::AggregatedCost || m.site.cost.is_some() {
                    vec![Metric::AggregatedCost(m.cost(&cfg.weights)), tunnel.clone()]
                } else {
                    let l = m.last;
                    vec![
                        Metric::AggregatedLoad {
                            period_s: cfg.period_s,
                            index: m.index(&cfg.weights),
                        },
                        Metric::RawLoad(RawLoad {
                            period_s: cfg.period_s,
                            to_packets: l.to_packets,
                            from_packets: l.from_packets,
                            to_bytes: l.to_bytes,
                            from_bytes: l.from_bytes,
                        }),
                        Metric::Capacity(m.site.capacity),
                        Metric::Preference(m.site.preference),
                        tunnel.clone(),
                    ]
                };
                AppMetricsEntry {
                    anycast: IpAddr::V6(m.site.anycast),
                    // NOTE(unwrap): at most 5 fixed-size sub-TLVs, far under the caps.
                    metrics: AppMetrics::new(list).expect("within the caps"),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sticky::tunnel::TunnelKind;

    fn cfg(advertise: Advertise, cost: Option<u32>) -> EgressSettings {
        EgressSettings {
            sites: vec![Site {
                anycast: "fd00:aa::1".parse().unwrap(),
                capacity: 4,
                preference: 5,
                cost,
            }],
            insert_option: true,
            tunnel_replies: true,
            tunnel: TunnelKind::Gre,
            proxy: None,
            period_s: 10,
            weights: [0.1, 0.2, 0.3, 0.4],
            advertise,
            max_flows: 10,
            flow_timer_s: 300,
        }
    }

    #[test]
    fn the_index_weighs_the_last_period() {
        let c = cfg(Advertise::SubTlvs, None);
        let mut m = Meters::new(&c);
        let a: Ipv6Addr = "fd00:aa::1".parse().unwrap();
        for _ in 0..10 {
            m.count(a, true, 100);
        }
        for _ in 0..20 {
            m.count(a, false, 1000);
        }
        m.count("fd00:aa::2".parse().unwrap(), true, 5);
        assert_eq!(
            m.sites[0].index(&c.weights),
            0,
            "nothing measured until the period ends"
        );
        m.roll();
        // 0.1·10 + 0.2·20 + 0.3·1000 + 0.4·20000 = 8305.
        assert_eq!(m.sites[0].index(&c.weights), 8305);
        let e = m.entries(&c);
        assert_eq!(e[0].metrics.aggregated_load(), Some((10, 8305)));
        assert_eq!(e[0].metrics.raw_load().unwrap().from_bytes, 20_000);
        assert_eq!(
            (e[0].metrics.capacity(), e[0].metrics.preference()),
            (Some(4), Some(5))
        );
        assert_eq!(e[0].metrics.tunnel(), Some(2));
        m.roll();
        assert_eq!(m.sites[0].index(&c.weights), 0, "an idle period reads zero");
    }

    #[test]
    fn aggregated_cost_variant_and_fixed_costs() {
        let c = cfg(Advertise::AggregatedCost, None);
        let mut m = Meters::new(&c);
        m.sites[0].last.to_packets = 1000; // index 100
                                           // ceil(1000 · 101 / 20) = 5050.
        assert_eq!(m.entries(&c)[0].metrics.aggregated_cost(), Some(5050));
        assert_eq!(m.entries(&c)[0].metrics.aggregated_load(), None);
        let fixed = cfg(Advertise::SubTlvs, Some(30));
        assert_eq!(
            Meters::new(&fixed).entries(&fixed)[0]
                .metrics
                .aggregated_cost(),
            Some(30)
        );
    }
}
