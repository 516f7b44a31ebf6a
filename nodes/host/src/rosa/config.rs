//! The `[host.rosa]` section and its validation.

use std::net::Ipv6Addr;
use std::str::FromStr;

use serde::Deserialize;
use smoltcp::time::Duration;
use svcroute_stack::wire::rosa::{Constraint, Constraints, Mode, Policy, ServiceName};

use crate::ConfigError;

/// The `[host.rosa]` section: the ROSA endpoint shim (SPEC §2.2). Its
/// presence turns the shim on for every packet; without it, only client
/// jobs started with `--rosa` use it (see `docs/shim.md`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RosaConfig {
    /// The ingress SAR that client requests go to (default: the port's
    /// IPv6 gateway). With it set, `get http://NAME/` uses ROSA.
    pub ingress: Option<Ipv6Addr>,
    /// Prefix of the local virtual addresses standing for service names.
    pub virtual_prefix: String,
    /// This instance's own SAR: announcements and responses go there.
    /// Required with `serve`.
    pub sar: Option<Ipv6Addr>,
    /// The address announced as the Instance (default: the first global
    /// IPv6 address of the port toward `sar`).
    pub instance_addr: Option<Ipv6Addr>,
    /// Services this host is an instance of.
    pub serve: Vec<ServeConfig>,
    /// Key ID of the announcement key.
    pub key_id: u8,
    /// HMAC-SHA256 secret (hex) signing announcements and withdrawals.
    pub key: Option<String>,
    /// Most transport flows tracked, client and instance side each.
    pub max_flows: usize,
    /// Most service names with a virtual address at once.
    pub max_services: usize,
    /// An open flow idle this long is forgotten.
    pub flow_idle_s: u64,
    /// A closed (FIN both ways, or RST) flow is forgotten this long after
    /// its last packet.
    pub flow_linger_s: u64,
}

impl Default for RosaConfig {
    fn default() -> Self {
        Self {
            ingress: None,
            virtual_prefix: "fd5e::/64".into(),
            sar: None,
            instance_addr: None,
            serve: Vec::new(),
            key_id: 1,
            key: None,
            max_flows: 4096,
            max_services: 256,
            flow_idle_s: 300,
            flow_linger_s: 15,
        }
    }
}

/// One `serve` entry: a service this host is an instance of, and the
/// constraints it announces (SPEC §2.1 Constraint entry).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServeConfig {
    /// The service name, e.g. `service.org` or `service.org/video`.
    pub service: String,
    /// `routing` or `scheduling` (with `policy`).
    #[serde(default)]
    pub mode: Option<String>,
    /// `shortest`, `random`, `round-robin`, `weighted`, `min-metric` or
    /// `app-metrics-cost` (with `mode`).
    #[serde(default)]
    pub policy: Option<String>,
    /// Capability (weight of weighted round robin).
    #[serde(default)]
    pub capability: Option<u32>,
    /// Load (lower is better).
    #[serde(default)]
    pub load: Option<u32>,
    /// Latency, µs.
    #[serde(default)]
    pub latency_us: Option<u32>,
    /// Preference.
    #[serde(default)]
    pub preference: Option<u32>,
    /// Lifetime of an announcement, s; re-announced every third of it.
    #[serde(default = "default_lifetime")]
    pub lifetime_s: u32,
    /// Live load: announce as Load the transactions open for this service
    /// now, re-announced as soon as it moved by this many since the last
    /// announcement (not with `load`).
    #[serde(default)]
    pub live_load_step: Option<u32>,
}

fn default_lifetime() -> u32 {
    30
}

/// Shortest and longest announcement lifetime, s.
pub const LIFETIME_RANGE: (u32, u32) = (3, 86_400);

/// A checked `[host.rosa]`.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) ingress: Option<Ipv6Addr>,
    pub(crate) prefix: Ipv6Addr,
    pub(crate) prefix_len: u8,
    pub(crate) sar: Option<Ipv6Addr>,
    pub(crate) instance_addr: Option<Ipv6Addr>,
    pub(crate) serve: Vec<Serve>,
    pub(crate) key: Option<(u8, Vec<u8>)>,
    pub(crate) max_flows: usize,
    pub(crate) max_services: usize,
    pub(crate) flow_idle: Duration,
    pub(crate) flow_linger: Duration,
}

/// A checked `serve` entry.
#[derive(Debug, Clone)]
pub(crate) struct Serve {
    pub(crate) name: ServiceName,
    pub(crate) constraints: Constraints,
    pub(crate) lifetime: Duration,
    /// `live_load_step`: the announced Load is the open transactions.
    pub(crate) live_step: Option<u32>,
}

impl RosaConfig {
    /// Check every key; the error names the key.
    pub(crate) fn settings(&self) -> Result<Settings, ConfigError> {
        let bad = |key: &str, why: String| ConfigError::Rosa(format!("key `rosa.{key}`: {why}"));
        let (prefix, prefix_len) = parse_prefix(&self.virtual_prefix).ok_or_else(|| {
            bad(
                "virtual_prefix",
                format!(
                    "{:?} is not an IPv6 prefix of length 8..=120 with zero host bits",
                    self.virtual_prefix
                ),
            )
        })?;
        let in_prefix = |a: Ipv6Addr| mask(a, prefix_len) == prefix;
        for (key, addr) in [
            ("ingress", self.ingress),
            ("sar", self.sar),
            ("instance_addr", self.instance_addr),
        ] {
            let Some(a) = addr else { continue };
            if a.is_unspecified() || a.is_multicast() || a.is_loopback() || in_prefix(a) {
                return Err(bad(
                    key,
                    format!("{a} must be a unicast address outside virtual_prefix"),
                ));
            }
        }
        if !self.serve.is_empty() && self.sar.is_none() {
            return Err(bad(
                "sar",
                "required with `serve`: announcements and responses go to it".into(),
            ));
        }
        let mut serve = Vec::new();
        for (i, s) in self.serve.iter().enumerate() {
            let key = |k: &str| format!("serve[{i}].{k}");
            let name = ServiceName::from_str(&s.service)
                .ok()
                .filter(|n| !n.is_wildcard())
                .ok_or_else(|| {
                    bad(
                        &key("service"),
                        format!(
                            "{:?} is not a service name (segments of visible ASCII joined by '/')",
                            s.service
                        ),
                    )
                })?;
            if serve.iter().any(|o: &Serve| o.name == name) {
                return Err(bad(&key("service"), format!("{name} is served twice")));
            }
            let (lo, hi) = LIFETIME_RANGE;
            if !(lo..=hi).contains(&s.lifetime_s) {
                return Err(bad(
                    &key("lifetime_s"),
                    format!("{} is out of range {lo}..={hi}", s.lifetime_s),
                ));
            }
            let mut list = Vec::new();
            match (&s.mode, &s.policy) {
                (None, None) => {}
                (Some(m), Some(p)) => list.push(Constraint::ModePolicy {
                    mode: parse_mode(m).ok_or_else(|| {
                        bad(&key("mode"), format!("{m:?} is not routing or scheduling"))
                    })?,
                    policy: parse_policy(p).ok_or_else(|| {
                        bad(
                            &key("policy"),
                            format!("{p:?} is not one of {}", POLICIES.join(", ")),
                        )
                    })?,
                }),
                (Some(_), None) => {
                    return Err(bad(&key("policy"), "required with `mode`".into()));
                }
                (None, Some(_)) => {
                    return Err(bad(&key("mode"), "required with `policy`".into()));
                }
            }
            match (s.live_load_step, s.load) {
                (Some(0), _) => {
                    return Err(bad(&key("live_load_step"), "must be at least 1".into()));
                }
                (Some(_), Some(_)) => {
                    return Err(bad(
                        &key("live_load_step"),
                        "the announced load is measured: not with `load`".into(),
                    ));
                }
                _ => {}
            }
            list.extend(s.capability.map(Constraint::Capability));
            list.extend(s.load.map(Constraint::Load));
            list.extend(s.latency_us.map(Constraint::LatencyUs));
            list.extend(s.preference.map(Constraint::Preference));
            list.push(Constraint::LifetimeS(s.lifetime_s));
            serve.push(Serve {
                name,
                constraints: Constraints(list),
                lifetime: Duration::from_secs(s.lifetime_s.into()),
                live_step: s.live_load_step,
            });
        }
        let key = match &self.key {
            None => None,
            Some(hex) => {
                let secret = crate::hex(hex)
                    .filter(|k| (16..=64).contains(&k.len()))
                    .ok_or_else(|| bad("key", "must be 16..=64 bytes as hex".into()))?;
                Some((self.key_id, secret))
            }
        };
        let check = |k: &str, v: u64, lo: u64, hi: u64| {
            if (lo..=hi).contains(&v) {
                Ok(())
            } else {
                Err(bad(k, format!("{v} is out of range {lo}..={hi}")))
            }
        };
        check("max_flows", self.max_flows as u64, 1, 1 << 20)?;
        check("max_services", self.max_services as u64, 1, 65_536)?;
        check("flow_idle_s", self.flow_idle_s, 1, 86_400)?;
        check("flow_linger_s", self.flow_linger_s, 1, 3600)?;
        Ok(Settings {
            ingress: self.ingress,
            prefix,
            prefix_len,
            sar: self.sar,
            instance_addr: self.instance_addr,
            serve,
            key,
            max_flows: self.max_flows,
            max_services: self.max_services,
            flow_idle: Duration::from_secs(self.flow_idle_s),
            flow_linger: Duration::from_secs(self.flow_linger_s),
        })
    }
}

const POLICIES: [&str; 6] = [
    "shortest",
    "random",
    "round-robin",
    "weighted",
    "min-metric",
    "app-metrics-cost",
];

fn parse_mode(s: &str) -> Option<Mode> {
    match s {
        "routing" => Some(Mode::Routing),
        "scheduling" => Some(Mode::Scheduling),
        _ => None,
    }
}

fn parse_policy(s: &str) -> Option<Policy> {
    Some(match s {
        "shortest" => Policy::Shortest,
        "random" => Policy::Random,
        "round-robin" => Policy::RoundRobin,
        "weighted" => Policy::Weighted,
        "min-metric" => Policy::MinMetric,
        "app-metrics-cost" => Policy::AppMetricsCost,
        _ => return None,
    })
}

/// `addr/len` with zero host bits and 8 ≤ len ≤ 120.
fn parse_prefix(s: &str) -> Option<(Ipv6Addr, u8)> {
    let (a, l) = s.split_once('/')?;
    let addr: Ipv6Addr = a.parse().ok()?;
    let len: u8 = l.parse().ok()?;
    ((8..=120).contains(&len) && mask(addr, len) == addr).then_some((addr, len))
}

/// `addr` with everything after the first `len` bits cleared.
pub(crate) fn mask(addr: Ipv6Addr, len: u8) -> Ipv6Addr {
    let bits = u128::from(addr);
    let m = if len == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(len.min(128)))
    };
    Ipv6Addr::from(bits & m)
}
