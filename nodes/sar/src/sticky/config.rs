//! The `[sar.sticky]` section of a SAR's node file, and its validation
//! into [`StickySettings`].
//!
//! ```toml
//! [sar.sticky]
//! acl = ["fd00:aa08::/64"]        # sticky service IDs: anycast prefixes (or addresses)
//!
//! [sar.sticky.ingress]            # this SAR is an ingress (a 5G site's router)
//! timer_s = 300                   # a sticky-table entry lives this long after its last packet
//! max_entries = 100000            # table cap; beyond it new flows are not remembered (counted)
//! keys = "flow-label"             # "flow-label" (scenario 1), "ue" (scenario 2: every flow of
//!                                 #   a UE to a service sticks together) or "both"
//! group = [2]                     # neighbouring ingress group (router IDs), scenario 1
//! flood_s = 10                    # how often the table is flooded to the group
//! max_flooded = 4096              # entries per flood, at most
//! proxies = [{ proxy = "fd00:ff::1", egress = "fd00:1::1" }]  # proxy Sticky Egress → egress
//! w = 0.5                         # App-Metrics weight of load vs delay (SPEC §3)
//! probe_ms = 1000                 # RTT probes to every egress site
//!
//! [sar.sticky.egress]             # this SAR is an A-ER with anycast servers attached
//! sites = [{ anycast = "fd00:aa08::4450", capacity = 100, preference = 10 }]
//! insert_option = true            # end-node mode: put Sticky-Dst in the servers' replies
//! tunnel_replies = true           # tunnel mode: replies go back in a tunnel to the ingress
//! tunnel = "ipip"                 # or "gre": what ingresses must use towards us
//! proxy = "fd00:ff::1"            # a proxy Sticky Egress address for the option (default: ours)
//! period_s = 3600                 # measurement period (labs: seconds)
//! weights = [0.25, 0.25, 0.25, 0.25]  # w1..w4 of the load index (sum 1)
//! advertise = "sub-tlvs"          # or "aggregated-cost" (draft §4)
//! max_flows = 100000              # flows remembered for replies and moved UEs
//! flow_timer_s = 300
//! ```
//!
//! A site with `cost` advertises that fixed aggregated cost (soft
//! anchoring: every egress advertises every location-preferred address
//! L1..Ln, its own cheapest).

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv6Addr};

use serde::Deserialize;

use super::tunnel::TunnelKind;
use crate::config::ConfigError;
use crate::router::Prefix;

/// Most ACL prefixes.
pub const MAX_ACL: usize = 64;
/// Most sites one egress serves.
pub const MAX_SITES: usize = 64;

/// The `[sar.sticky]` section.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StickyConfig {
    /// Sticky service IDs: anycast prefixes, `addr/len` or an address.
    pub acl: Vec<String>,
    /// Present: this SAR is an ingress.
    pub ingress: Option<IngressConfig>,
    /// Present: this SAR is an egress (A-ER).
    pub egress: Option<EgressConfig>,
}

/// `[sar.sticky.ingress]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IngressConfig {
    /// Entry timer, seconds.
    pub timer_s: u64,
    /// Table cap.
    pub max_entries: usize,
    /// `flow-label`, `ue` or `both`.
    pub keys: String,
    /// Neighbouring ingress group: router IDs.
    pub group: Vec<u32>,
    /// Flood interval, seconds.
    pub flood_s: u64,
    /// Entries per flood.
    pub max_flooded: usize,
    /// Proxy Sticky Egress addresses and the egresses they stand for.
    pub proxies: Vec<ProxyConfig>,
    /// Weight of load against delay.
    pub w: f64,
    /// Probe interval, milliseconds.
    pub probe_ms: u64,
}

impl Default for IngressConfig {
    fn default() -> Self {
        Self {
            timer_s: 300,
            max_entries: 100_000,
            keys: "flow-label".into(),
            group: Vec::new(),
            flood_s: 10,
            max_flooded: 4096,
            proxies: Vec::new(),
            w: 0.5,
            probe_ms: 1000,
        }
    }
}

/// One proxy translation.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProxyConfig {
    /// The proxy address found in Sticky-Dst.
    pub proxy: String,
    /// The egress's routable address.
    pub egress: String,
}

/// `[sar.sticky.egress]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EgressConfig {
    /// The anycast servers attached here.
    pub sites: Vec<SiteConfig>,
    /// Insert Sticky-Dst into replies that lack it.
    pub insert_option: bool,
    /// Tunnel replies to the ingress the flow came through.
    pub tunnel_replies: bool,
    /// `ipip` or `gre`.
    pub tunnel: String,
    /// Proxy Sticky Egress address for the option.
    pub proxy: Option<String>,
    /// Measurement period, seconds.
    pub period_s: u64,
    /// w1..w4.
    pub weights: [f64; 4],
    /// `sub-tlvs` or `aggregated-cost`.
    pub advertise: String,
    /// Flows remembered.
    pub max_flows: usize,
    /// Flow timer, seconds.
    pub flow_timer_s: u64,
}

impl Default for EgressConfig {
    fn default() -> Self {
        Self {
            sites: Vec::new(),
            insert_option: true,
            tunnel_replies: true,
            tunnel: "ipip".into(),
            proxy: None,
            period_s: 3600,
            weights: [0.25; 4],
            advertise: "sub-tlvs".into(),
            max_flows: 100_000,
            flow_timer_s: 300,
        }
    }
}

/// One attached anycast server.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SiteConfig {
    /// The anycast address it serves.
    pub anycast: String,
    /// Capacity Index (default 1).
    #[serde(default = "one")]
    pub capacity: u32,
    /// Preference Index (default 1).
    #[serde(default = "one")]
    pub preference: u32,
    /// A fixed aggregated cost (soft anchoring).
    pub cost: Option<u32>,
}

const fn one() -> u32 {
    1
}

/// Which keys the ingress's table uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keys {
    /// Service ID + flow label (scenario 1).
    pub flow_label: bool,
    /// Service ID + UE address (scenario 2).
    pub ue: bool,
}

/// Validated ingress settings.
#[derive(Debug, Clone, PartialEq)]
pub struct IngressSettings {
    /// Entry timer, seconds.
    pub timer_s: u32,
    /// Table cap.
    pub max_entries: usize,
    /// Keys.
    pub keys: Keys,
    /// Group router IDs.
    pub group: BTreeSet<u32>,
    /// Flood interval, seconds.
    pub flood_s: u64,
    /// Entries per flood.
    pub max_flooded: usize,
    /// Proxy → egress.
    pub proxies: Vec<(Ipv6Addr, Ipv6Addr)>,
    /// Load weight.
    pub w: f64,
    /// Probe interval, milliseconds.
    pub probe_ms: u64,
}

/// How an egress advertises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advertise {
    /// The draft's §5.3 sub-TLVs (load, raw load, capacity, preference).
    SubTlvs,
    /// The draft's §4 aggregated cost.
    AggregatedCost,
}

/// One validated site.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Site {
    /// The anycast address.
    pub anycast: Ipv6Addr,
    /// Capacity Index.
    pub capacity: u32,
    /// Preference Index.
    pub preference: u32,
    /// Fixed aggregated cost.
    pub cost: Option<u32>,
}

/// Validated egress settings.
#[derive(Debug, Clone, PartialEq)]
pub struct EgressSettings {
    /// Sites.
    pub sites: Vec<Site>,
    /// End-node mode.
    pub insert_option: bool,
    /// Tunnel mode.
    pub tunnel_replies: bool,
    /// The tunnel ingresses use towards us.
    pub tunnel: TunnelKind,
    /// The address put in Sticky-Dst (ours or a proxy).
    pub proxy: Option<Ipv6Addr>,
    /// Measurement period, seconds.
    pub period_s: u32,
    /// w1..w4.
    pub weights: [f64; 4],
    /// Sub-TLVs or aggregated cost.
    pub advertise: Advertise,
    /// Flows remembered.
    pub max_flows: usize,
    /// Flow timer, seconds.
    pub flow_timer_s: u32,
}

/// A validated `[sar.sticky]`.
#[derive(Debug, Clone, PartialEq)]
pub struct StickySettings {
    /// The ACL.
    pub acl: Vec<Prefix>,
    /// Ingress behaviour.
    pub ingress: Option<IngressSettings>,
    /// Egress behaviour.
    pub egress: Option<EgressSettings>,
}

impl StickySettings {
    /// Whether `addr` is a sticky service ID.
    pub fn matches(&self, addr: Ipv6Addr) -> bool {
        self.acl.iter().any(|p| p.contains(addr))
    }
}

fn addr6(key: &'static str, s: &str) -> Result<Ipv6Addr, ConfigError> {
    s.parse().map_err(|_| ConfigError::Parse {
        key,
        value: s.into(),
        what: "an IPv6 address",
    })
}

fn range(key: &'static str, value: u64, ok: bool, what: &'static str) -> Result<(), ConfigError> {
    if ok {
        Ok(())
    } else {
        Err(ConfigError::Range {
            key,
            value,
            range: what,
        })
    }
}

impl StickyConfig {
    /// Check every value.
    pub fn settings(&self) -> Result<StickySettings, ConfigError> {
        if self.acl.is_empty() {
            return Err(ConfigError::Ports {
                key: "sticky.acl",
                problem: "give at least one sticky service prefix".into(),
            });
        }
        if self.acl.len() > MAX_ACL {
            return Err(ConfigError::Ports {
                key: "sticky.acl",
                problem: format!("at most {MAX_ACL} prefixes"),
            });
        }
        let acl = self
            .acl
            .iter()
            .map(|p| {
                let bad = || ConfigError::Parse {
                    key: "sticky.acl",
                    value: p.clone(),
                    what: "an IPv6 prefix addr/len or address",
                };
                let (a, len) = match p.split_once('/') {
                    Some((a, l)) => (a, l.parse::<u8>().map_err(|_| bad())?),
                    None => (p.as_str(), 128),
                };
                let a: Ipv6Addr = a.parse().map_err(|_| bad())?;
                if len > 128 {
                    return Err(bad());
                }
                Ok(Prefix::new(a, len))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if self.ingress.is_none() && self.egress.is_none() {
            return Err(ConfigError::Ports {
                key: "sticky",
                problem: "give [sar.sticky.ingress], [sar.sticky.egress] or both".into(),
            });
        }
        let ingress = self
            .ingress
            .as_ref()
            .map(IngressConfig::settings)
            .transpose()?;
        let egress = self.egress.as_ref().map(|e| e.settings(&acl)).transpose()?;
        Ok(StickySettings {
            acl,
            ingress,
            egress,
        })
    }
}

impl IngressConfig {
    fn settings(&self) -> Result<IngressSettings, ConfigError> {
        range(
            "sticky.ingress.timer_s",
            self.timer_s,
            (1..=86_400).contains(&self.timer_s),
            "1..=86400",
        )?;
        range(
            "sticky.ingress.max_entries",
            self.max_entries as u64,
            (1..=16_000_000).contains(&self.max_entries),
            "1..=16000000",
        )?;
        range(
            "sticky.ingress.flood_s",
            self.flood_s,
            (1..=3600).contains(&self.flood_s),
            "1..=3600",
        )?;
        range(
            "sticky.ingress.max_flooded",
            self.max_flooded as u64,
            self.max_flooded <= 65_536,
            "0..=65536",
        )?;
        range(
            "sticky.ingress.probe_ms",
            self.probe_ms,
            (10..=60_000).contains(&self.probe_ms),
            "10..=60000",
        )?;
        if !(0.0..=1.0).contains(&self.w) {
            return Err(ConfigError::Parse {
                key: "sticky.ingress.w",
                value: self.w.to_string(),
                what: "a weight in 0..=1",
            });
        }
        let keys = match self.keys.as_str() {
            "flow-label" => Keys {
                flow_label: true,
                ue: false,
            },
            "ue" => Keys {
                flow_label: false,
                ue: true,
            },
            "both" => Keys {
                flow_label: true,
                ue: true,
            },
            other => {
                return Err(ConfigError::Parse {
                    key: "sticky.ingress.keys",
                    value: other.into(),
                    what: "\"flow-label\", \"ue\" or \"both\"",
                })
            }
        };
        let proxies = self
            .proxies
            .iter()
            .map(|p| {
                Ok((
                    addr6("sticky.ingress.proxies.proxy", &p.proxy)?,
                    addr6("sticky.ingress.proxies.egress", &p.egress)?,
                ))
            })
            .collect::<Result<Vec<_>, ConfigError>>()?;
        if self.group.contains(&0) {
            return Err(ConfigError::Range {
                key: "sticky.ingress.group",
                value: 0,
                range: "router IDs 1..=4294967295",
            });
        }
        Ok(IngressSettings {
            timer_s: self.timer_s as u32,
            max_entries: self.max_entries,
            keys,
            group: self.group.iter().copied().collect(),
            flood_s: self.flood_s,
            max_flooded: self.max_flooded,
            proxies,
            w: self.w,
            probe_ms: self.probe_ms,
        })
    }
}

impl EgressConfig {
    fn settings(&self, acl: &[Prefix]) -> Result<EgressSettings, ConfigError> {
        if self.sites.is_empty() || self.sites.len() > MAX_SITES {
            return Err(ConfigError::Ports {
                key: "sticky.egress.sites",
                problem: format!("give 1..={MAX_SITES} attached anycast servers"),
            });
        }
        let mut sites = Vec::new();
        for s in &self.sites {
            let anycast = addr6("sticky.egress.sites.anycast", &s.anycast)?;
            if !acl.iter().any(|p| p.contains(anycast)) {
                return Err(ConfigError::Ports {
                    key: "sticky.egress.sites.anycast",
                    problem: format!("{anycast} is not in sticky.acl"),
                });
            }
            if sites.iter().any(|x: &Site| x.anycast == anycast) {
                return Err(ConfigError::Ports {
                    key: "sticky.egress.sites.anycast",
                    problem: format!("{anycast} is listed twice"),
                });
            }
            range(
                "sticky.egress.sites.capacity",
                u64::from(s.capacity),
                s.capacity >= 1,
                ">= 1",
            )?;
            range(
                "sticky.egress.sites.preference",
                u64::from(s.preference),
                s.preference >= 1,
                ">= 1",
            )?;
            sites.push(Site {
                anycast,
                capacity: s.capacity,
                preference: s.preference,
                cost: s.cost,
            });
        }
        let tunnel = match self.tunnel.as_str() {
            "ipip" => TunnelKind::Ipip,
            "gre" => TunnelKind::Gre,
            other => {
                return Err(ConfigError::Parse {
                    key: "sticky.egress.tunnel",
                    value: other.into(),
                    what: "\"ipip\" or \"gre\"",
                })
            }
        };
        let advertise = match self.advertise.as_str() {
            "sub-tlvs" => Advertise::SubTlvs,
            "aggregated-cost" => Advertise::AggregatedCost,
            other => {
                return Err(ConfigError::Parse {
                    key: "sticky.egress.advertise",
                    value: other.into(),
                    what: "\"sub-tlvs\" or \"aggregated-cost\"",
                })
            }
        };
        range(
            "sticky.egress.period_s",
            self.period_s,
            (1..=86_400).contains(&self.period_s),
            "1..=86400",
        )?;
        let sum: f64 = self.weights.iter().sum();
        if self.weights.iter().any(|w| !(0.0..=1.0).contains(w)) || (sum - 1.0).abs() > 1e-6 {
            return Err(ConfigError::Parse {
                key: "sticky.egress.weights",
                value: format!("{:?}", self.weights),
                what: "four weights in 0..=1 that sum to 1",
            });
        }
        range(
            "sticky.egress.max_flows",
            self.max_flows as u64,
            (1..=16_000_000).contains(&self.max_flows),
            "1..=16000000",
        )?;
        range(
            "sticky.egress.flow_timer_s",
            self.flow_timer_s,
            (1..=86_400).contains(&self.flow_timer_s),
            "1..=86400",
        )?;
        let proxy = self
            .proxy
            .as_deref()
            .map(|p| addr6("sticky.egress.proxy", p))
            .transpose()?;
        Ok(EgressSettings {
            sites,
            insert_option: self.insert_option,
            tunnel_replies: self.tunnel_replies,
            tunnel,
            proxy,
            period_s: self.period_s as u32,
            weights: self.weights,
            advertise,
            max_flows: self.max_flows,
            flow_timer_s: self.flow_timer_s as u32,
        })
    }
}

/// `addr` as an IPv6 address (IPv4-mapped for an IPv4 one).
pub fn to_v6(addr: IpAddr) -> Ipv6Addr {
    match addr {
        IpAddr::V6(a) => a,
        IpAddr::V4(a) => a.to_ipv6_mapped(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<StickySettings, ConfigError> {
        toml::from_str::<StickyConfig>(s).unwrap().settings()
    }

    #[test]
    fn defaults_and_errors_name_the_key() {
        let s = parse(
            "acl = [\"fd00:aa::/64\"]\n[ingress]\n[egress]\nsites = [{ anycast = \"fd00:aa::1\" }]",
        )
        .unwrap();
        let i = s.ingress.unwrap();
        assert_eq!(
            (i.timer_s, i.flood_s, i.keys.flow_label, i.keys.ue),
            (300, 10, true, false)
        );
        let e = s.egress.unwrap();
        assert_eq!(
            (e.period_s, e.tunnel, e.advertise),
            (3600, TunnelKind::Ipip, Advertise::SubTlvs)
        );
        assert!(s.acl[0].contains("fd00:aa::9".parse().unwrap()));

        for (text, key) in [
            ("acl = []\n[ingress]", "sticky.acl"),
            ("acl = [\"nope\"]\n[ingress]", "sticky.acl"),
            ("acl = [\"fd00::/64\"]", "sticky"),
            ("acl = [\"fd00::/64\"]\n[ingress]\nkeys = \"mac\"", "sticky.ingress.keys"),
            ("acl = [\"fd00::/64\"]\n[ingress]\ntimer_s = 0", "sticky.ingress.timer_s"),
            ("acl = [\"fd00::/64\"]\n[ingress]\nw = 2.0", "sticky.ingress.w"),
            ("acl = [\"fd00::/64\"]\n[egress]", "sticky.egress.sites"),
            (
                "acl = [\"fd00::/64\"]\n[egress]\nsites = [{ anycast = \"fd01::1\" }]",
                "sticky.egress.sites.anycast",
            ),
            (
                "acl = [\"fd00::/64\"]\n[egress]\nsites = [{ anycast = \"fd00::1\" }]\nweights = [0.5, 0.5, 0.5, 0.0]",
                "sticky.egress.weights",
            ),
            (
                "acl = [\"fd00::/64\"]\n[egress]\nsites = [{ anycast = \"fd00::1\" }]\ntunnel = \"vxlan\"",
                "sticky.egress.tunnel",
            ),
        ] {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.contains(&format!("`{key}`")), "{text}: {err}");
        }
    }
}
