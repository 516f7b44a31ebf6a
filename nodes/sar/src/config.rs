// Over 800 lines: the [sar] section and every check of it against the node's ports are one room; each key's validation sits by its parse.
//! The `[sar]` section of a node file, and its validation against the
//! node's ports into [`Settings`], what the driver runs on.
//!
//! ```toml
//! [sar]
//! router_id = 1                    # required: unique in the domain, 1..=4294967295
//! router_name = "sar-a"            # optional label in logs and `ctl`; default: the node name
//! address = "fd00:a::1"            # the SAR's own (Ingress) address: one of its ports' IPv6
//!                                  #   addresses; default: the first port's first IPv6 address
//! sar_ports = [1]                  # ports facing other SARs (0-based [[port]] indexes); default:
//!                                  #   the ports named by [[sar.neighbors]]; all others face
//!                                  #   clients and instances
//! instance_ports = [0]             # client-facing ports that take announcements (instances
//!                                  #   are there); default: every port not in sar_ports.
//!                                  #   `svcroute lab` writes it from the topology
//! default_policy = "scheduling/round-robin"  # optional: mode/policy given to announcements
//!                                  #   made at this SAR that carry none
//! sag = "fd00:5::1"                # optional: announce `*` here with this SAG as its instance
//!                                  #   (role sag: implied, its own address)
//! gateway = { dns_server = "fd00:e::53" }  # role sag only: see crate::sag::GatewayConfig
//! fib_hash = "sha256"              # or "keyed" (SPEC §0 name hash, or a fast seeded one)
//! seed = 0                         # random policy / keyed hash seed; 0: the router ID
//! max_services = 200000            # FIB names
//! max_instances = 400000           # NHIB instance rows
//! max_instances_per_service = 256
//! max_local_instances = 16384      # instances announced at this SAR
//! max_lsas = 100000                # LSDB size
//! default_lifetime_s = 30          # announcement lifetime without a lifetime constraint
//! max_lifetime_s = 3600            # longer lifetimes are clamped
//! hello_ms = 1000                  # IGP hello interval
//! dead_ms = 4000                   # IGP dead interval (> hello_ms)
//! mtu = 1500                       # IP MTU of every port (Packet Too Big above it)
//! icmp_per_s = 100                 # ICMPv6 errors per second (0: none); bursts of icmp_burst
//! icmp_burst = 10
//! max_pending = 256                # packets parked while a next hop is resolved
//! resolve_timeout_ms = 3000        # then they are dropped (Address Unreachable)
//! announce_keys = [{ key_id = 1, secret = "00112233445566778899aabbccddeeff" }]
//! igp_key = { key_id = 1, secret = "00112233445566778899aabbccddeeff" }
//! [sar.sticky]                     # optional: sticky service and App-Metrics, see
//!                                  #   crate::sticky::config and docs/sticky.md
//!
//! [[sar.neighbors]]                # one per neighbour SAR (IGP adjacency over UDP 7470)
//! port = 1                         # the port it is on
//! addr = "fd00:12::2"              # its address on that link (inside one of the port's prefixes)
//! cost = 10                        # link cost, >= 1 (default 10)
//!
//! [[sar.routes]]                   # static routes (not flooded)
//! prefix = "fd00:99::/48"
//! via = "fd00:a::fe"               # on-link next hop; its port is the one whose prefix holds it
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv6Addr};

use serde::Deserialize;
use smoltcp::time::Duration;
use smoltcp::wire::{IpAddress, IpCidr};
use svcroute_stack::runtime::PortConfig;
use svcroute_stack::wire::igp::{Prefix as IgpPrefix, RouterId, MAX_NEIGHBORS, MAX_PREFIXES};
use svcroute_stack::wire::rosa::{Mode, Policy};

use crate::core::Config as CoreConfig;
use crate::fib::NameHash;
use crate::igp::{IgpConfig, Key};
use crate::router::{Origin, Prefix, Route};
use crate::sag::{GatewayConfig, GatewaySettings};
use crate::sticky::config::{StickyConfig, StickySettings};

/// Fewest octets in a secret.
pub const MIN_SECRET_LEN: usize = 16;

/// The `[sar]` section. Every key but `router_id` is optional; see the
/// module docs for the format and `docs/sar.md` for the meaning.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SarConfig {
    /// Router ID, unique in the SAR domain (required, non-zero).
    pub router_id: u32,
    /// A label for logs and `ctl` (default: the node name).
    pub router_name: Option<String>,
    /// The SAR's own address (default: the first port's first IPv6 address).
    pub address: Option<String>,
    /// Ports facing other SARs (default: the ports of `neighbors`).
    pub sar_ports: Option<Vec<usize>>,
    /// Client-facing ports announcements are taken on: the ports service
    /// instances are on (default: every port not in `sar_ports`). An
    /// announcement on another client port is dropped
    /// (`drop.sar.announcement_not_instance_port`), so a client cannot
    /// announce a name, even with the announcement key.
    pub instance_ports: Option<Vec<usize>>,
    /// IGP neighbours.
    pub neighbors: Vec<NeighborConfig>,
    /// Static routes.
    pub routes: Vec<StaticRoute>,
    /// Keys announcements must be signed with (empty: unsigned accepted).
    pub announce_keys: Vec<KeyConfig>,
    /// Key of the IGP (none: unsigned).
    pub igp_key: Option<KeyConfig>,
    /// `mode/policy` for announcements at this SAR that carry none.
    pub default_policy: Option<String>,
    /// A SAG this SAR originates `*` for.
    pub sag: Option<String>,
    /// Role `sag` only: the gateway's DNS resolver and proxy.
    pub gateway: Option<GatewayConfig>,
    /// Sticky service and App-Metrics (`[sar.sticky]`, SPEC §3).
    pub sticky: Option<StickyConfig>,
    /// `sha256` (SPEC §0) or `keyed`.
    pub fib_hash: String,
    /// Seed of the random policy and the keyed hash (0: the router ID).
    pub seed: u64,
    /// Most FIB names.
    pub max_services: usize,
    /// Most NHIB instance rows.
    pub max_instances: usize,
    /// Most instances of one service.
    pub max_instances_per_service: usize,
    /// Most instances announced here.
    pub max_local_instances: usize,
    /// Most LSAs.
    pub max_lsas: usize,
    /// Lifetime of announcements without one, seconds.
    pub default_lifetime_s: u32,
    /// Longest lifetime, seconds.
    pub max_lifetime_s: u32,
    /// IGP hello interval, milliseconds.
    pub hello_ms: u64,
    /// IGP dead interval, milliseconds.
    pub dead_ms: u64,
    /// IP MTU of every port.
    pub mtu: usize,
    /// ICMPv6 errors per second (0: none).
    pub icmp_per_s: u32,
    /// ICMPv6 error burst.
    pub icmp_burst: u32,
    /// Packets parked while their next hop is resolved.
    pub max_pending: usize,
    /// How long a parked packet waits, milliseconds.
    pub resolve_timeout_ms: u64,
}

impl Default for SarConfig {
    fn default() -> Self {
        Self {
            router_id: 0,
            router_name: None,
            address: None,
            sar_ports: None,
            instance_ports: None,
            neighbors: Vec::new(),
            routes: Vec::new(),
            announce_keys: Vec::new(),
            igp_key: None,
            default_policy: None,
            sag: None,
            gateway: None,
            sticky: None,
            fib_hash: "sha256".into(),
            seed: 0,
            max_services: 200_000,
            max_instances: 400_000,
            max_instances_per_service: 256,
            max_local_instances: 16_384,
            max_lsas: 100_000,
            default_lifetime_s: 30,
            max_lifetime_s: 3600,
            hello_ms: 1000,
            dead_ms: 4000,
            mtu: 1500,
            icmp_per_s: 100,
            icmp_burst: 10,
            max_pending: 256,
            resolve_timeout_ms: 3000,
        }
    }
}

/// One `[[sar.neighbors]]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NeighborConfig {
    /// The port (0-based `[[port]]` index).
    pub port: usize,
    /// The neighbour's address on that port's link.
    pub addr: String,
    /// Link cost (default 10).
    #[serde(default = "default_cost")]
    pub cost: u32,
}

const fn default_cost() -> u32 {
    10
}

/// One `[[sar.routes]]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StaticRoute {
    /// Destination prefix, `addr/len`.
    pub prefix: String,
    /// On-link next hop.
    pub via: String,
}

/// A pre-shared HMAC-SHA256 key (SPEC §0).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyConfig {
    /// Key ID carried in tags.
    pub key_id: u8,
    /// The secret, hex, at least 16 octets.
    pub secret: String,
}

/// A `[sar]` value the node cannot run with. Each names its key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// `router_id` missing or zero.
    #[error("key `router_id`: required, 1..=4294967295 (unique in the SAR domain)")]
    RouterId,
    /// A value that does not parse.
    #[error("key `{key}`: {value:?} is not {what}")]
    Parse {
        /// The key.
        key: &'static str,
        /// What was given.
        value: String,
        /// What it should be.
        what: &'static str,
    },
    /// A number out of range.
    #[error("key `{key}`: {value} is out of range ({range})")]
    Range {
        /// The key.
        key: &'static str,
        /// What was given.
        value: u64,
        /// The allowed range, in words.
        range: &'static str,
    },
    /// Something inconsistent with the node's ports.
    #[error("key `{key}`: {problem}")]
    Ports {
        /// The key.
        key: &'static str,
        /// What is wrong.
        problem: String,
    },
}

/// How a port faces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Facing {
    /// Clients and service instances.
    Clients,
    /// Other SARs (IGP on UDP 7470).
    Sars,
}

/// What the driver keeps of one port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortSettings {
    /// The port's name.
    pub name: String,
    /// Its MAC.
    pub mac: smoltcp::wire::EthernetAddress,
    /// Clients or SARs.
    pub facing: Facing,
    /// A client-facing port that takes announcements (`instance_ports`).
    pub instances: bool,
    /// Its IPv6 addresses with prefix lengths.
    pub v6: Vec<(Ipv6Addr, u8)>,
    /// Its IPv4 addresses.
    pub v4: Vec<std::net::Ipv4Addr>,
}

/// A neighbour SAR: [`crate::LinkId`] `n` is `neighbors[n]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Neighbor {
    /// Its port.
    pub port: usize,
    /// Its address on the link.
    pub addr: Ipv6Addr,
    /// The link's cost.
    pub cost: u32,
}

/// A validated `[sar]` section, with the ports it runs on.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The label.
    pub name: String,
    /// The core's configuration (address, prefixes, keys, caps, timers).
    pub core: CoreConfig,
    /// The ports.
    pub ports: Vec<PortSettings>,
    /// The neighbours.
    pub neighbors: Vec<Neighbor>,
    /// Connected and static routes.
    pub routes: Vec<Route>,
    /// Announcement keys (ID → secret), for the default policy's re-signing.
    pub announce_keys: BTreeMap<u8, Vec<u8>>,
    /// Mode and policy for announcements without one.
    pub default_policy: Option<(Mode, Policy)>,
    /// The SAG we originate `*` for.
    pub sag: Option<Ipv6Addr>,
    /// Role `sag`: we are the SAG (`sag` is our own address).
    pub gateway: Option<GatewaySettings>,
    /// Sticky service and App-Metrics.
    pub sticky: Option<StickySettings>,
    /// IP MTU of every port.
    pub mtu: usize,
    /// ICMPv6 errors per second.
    pub icmp_per_s: u32,
    /// ICMPv6 burst.
    pub icmp_burst: u32,
    /// Parked packets, at most.
    pub max_pending: usize,
    /// How long a packet stays parked.
    pub resolve_timeout: Duration,
}

impl SarConfig {
    /// Check every value against the node's `ports` (in `[[port]]` order)
    /// and build what the driver needs. `node` labels the router when
    /// `router_name` is not given.
    pub fn settings(&self, node: &str, ports: &[PortConfig]) -> Result<Settings, ConfigError> {
        if self.gateway.is_some() {
            return Err(ConfigError::Ports {
                key: "gateway",
                problem: "only a node of role `sag` has a gateway".into(),
            });
        }
        self.router_settings(node, ports)
    }

    /// [`Self::settings`] for role `sag`: a SAR that originates `*` for
    /// itself (`sag`, if given, must be its own `address`) and runs the
    /// gateway (`gateway`, defaults if absent).
    pub fn sag_settings(&self, node: &str, ports: &[PortConfig]) -> Result<Settings, ConfigError> {
        let mut s = self.router_settings(node, ports)?;
        let me = s.core.igp.address;
        if s.sag.is_some_and(|a| a != me) {
            return Err(ConfigError::Ports {
                key: "sag",
                problem: format!("a SAG originates `*` for itself: leave it out or give {me}"),
            });
        }
        s.sag = Some(me);
        // The way out of the domain: other SARs learn the SAG's static
        // routes (other domains' prefixes) as its prefixes.
        for r in s.routes.iter().filter(|r| r.origin == Origin::Static) {
            let p = IgpPrefix {
                addr: r.prefix.addr,
                len: r.prefix.len,
            };
            if !s.core.igp.prefixes.contains(&p) && s.core.igp.prefixes.len() < MAX_PREFIXES {
                s.core.igp.prefixes.push(p);
            }
        }
        let gw = self.gateway.clone().unwrap_or_default();
        s.gateway = Some(gw.settings(s.core.seed)?);
        Ok(s)
    }

    fn router_settings(&self, node: &str, ports: &[PortConfig]) -> Result<Settings, ConfigError> {
        if self.router_id == 0 {
            return Err(ConfigError::RouterId);
        }
        let port_settings: Vec<PortSettings> = ports
            .iter()
            .map(|p| PortSettings {
                name: p.name.clone(),
                mac: p.mac,
                facing: Facing::Clients,
                instances: true,
                v6: p
                    .addrs
                    .iter()
                    .filter_map(|c| match c {
                        IpCidr::Ipv6(c) => Some((c.address(), c.prefix_len())),
                        IpCidr::Ipv4(_) => None,
                    })
                    .collect(),
                v4: p
                    .addrs
                    .iter()
                    .filter_map(|c| match c {
                        IpCidr::Ipv4(c) => Some(c.address()),
                        IpCidr::Ipv6(_) => None,
                    })
                    .collect(),
            })
            .collect();
        let mut port_settings = port_settings;
        for (i, p) in ports.iter().enumerate() {
            if p.gateways.iter().any(|g| matches!(g, IpAddress::Ipv6(_))) {
                return Err(ConfigError::Ports {
                    key: "port.gateways",
                    problem: format!(
                        "port #{i} ({}) has an IPv6 gateway; a SAR routes by its own table: \
                         use [[sar.routes]] instead",
                        p.name
                    ),
                });
            }
        }

        // Neighbours.
        let mut neighbors = Vec::new();
        let mut seen = BTreeSet::new();
        for n in &self.neighbors {
            let addr = parse_v6("neighbors.addr", &n.addr)?;
            if n.port >= ports.len() {
                return Err(ConfigError::Ports {
                    key: "neighbors.port",
                    problem: format!("no port #{} (the node has {})", n.port, ports.len()),
                });
            }
            if !on_link(&port_settings, addr).contains(&n.port) {
                return Err(ConfigError::Ports {
                    key: "neighbors.addr",
                    problem: format!(
                        "{addr} is not inside a prefix of port #{} ({})",
                        n.port, ports[n.port].name
                    ),
                });
            }
            if n.cost == 0 {
                return Err(ConfigError::Range {
                    key: "neighbors.cost",
                    value: 0,
                    range: "1..=4294967295",
                });
            }
            if !seen.insert((n.port, addr)) {
                return Err(ConfigError::Ports {
                    key: "neighbors",
                    problem: format!("{addr} on port #{} is listed twice", n.port),
                });
            }
            neighbors.push(Neighbor {
                port: n.port,
                addr,
                cost: n.cost,
            });
        }
        if neighbors.len() > MAX_NEIGHBORS {
            return Err(ConfigError::Range {
                key: "neighbors",
                value: neighbors.len() as u64,
                range: "at most 64 neighbours",
            });
        }

        // Which ports face SARs.
        let sar_ports: BTreeSet<usize> = match &self.sar_ports {
            Some(list) => list.iter().copied().collect(),
            None => neighbors.iter().map(|n| n.port).collect(),
        };
        for &p in &sar_ports {
            let Some(ps) = port_settings.get_mut(p) else {
                return Err(ConfigError::Ports {
                    key: "sar_ports",
                    problem: format!("no port #{p} (the node has {})", ports.len()),
                });
            };
            ps.facing = Facing::Sars;
            ps.instances = false;
        }
        if let Some(list) = &self.instance_ports {
            for ps in &mut port_settings {
                ps.instances = false;
            }
            for &p in list {
                match port_settings.get_mut(p) {
                    Some(ps) if ps.facing == Facing::Clients => ps.instances = true,
                    Some(_) => {
                        return Err(ConfigError::Ports {
                            key: "instance_ports",
                            problem: format!("port #{p} faces SARs (sar_ports)"),
                        })
                    }
                    None => {
                        return Err(ConfigError::Ports {
                            key: "instance_ports",
                            problem: format!("no port #{p} (the node has {})", ports.len()),
                        })
                    }
                }
            }
        }
        if let Some(n) = neighbors.iter().find(|n| !sar_ports.contains(&n.port)) {
            return Err(ConfigError::Ports {
                key: "sar_ports",
                problem: format!(
                    "neighbour {} is on port #{}, which is not in sar_ports",
                    n.addr, n.port
                ),
            });
        }

        // Our address.
        let all_v6: Vec<Ipv6Addr> = port_settings
            .iter()
            .flat_map(|p| p.v6.iter().map(|(a, _)| *a))
            .collect();
        let address = match &self.address {
            Some(s) => {
                let a = parse_v6("address", s)?;
                if !all_v6.contains(&a) {
                    return Err(ConfigError::Ports {
                        key: "address",
                        problem: format!("{a} is not an address of any [[port]]"),
                    });
                }
                a
            }
            None => *port_settings
                .first()
                .and_then(|p| p.v6.first().map(|(a, _)| a))
                .or(all_v6.first())
                .ok_or_else(|| ConfigError::Ports {
                    key: "address",
                    problem: "no port has an IPv6 address".into(),
                })?,
        };

        // Routes: connected, then static.
        let mut routes: Vec<Route> = Vec::new();
        let mut prefixes: Vec<IgpPrefix> = Vec::new();
        for (i, p) in port_settings.iter().enumerate() {
            for (a, l) in &p.v6 {
                let prefix = Prefix::new(*a, *l);
                if a.is_unicast_link_local() {
                    continue;
                }
                routes.push(Route {
                    prefix,
                    port: i,
                    via: None,
                    origin: Origin::Connected,
                });
                let igp = IgpPrefix {
                    addr: prefix.addr,
                    len: prefix.len,
                };
                if !prefixes.contains(&igp) {
                    prefixes.push(igp);
                }
            }
        }
        if prefixes.len() > MAX_PREFIXES {
            prefixes.truncate(MAX_PREFIXES);
        }
        for r in &self.routes {
            let prefix: Prefix = r.prefix.parse().map_err(|()| ConfigError::Parse {
                key: "routes.prefix",
                value: r.prefix.clone(),
                what: "an IPv6 prefix addr/len",
            })?;
            let via = parse_v6("routes.via", &r.via)?;
            let Some(&port) = on_link(&port_settings, via).first() else {
                return Err(ConfigError::Ports {
                    key: "routes.via",
                    problem: format!("{via} is not inside a prefix of any port"),
                });
            };
            routes.push(Route {
                prefix,
                port,
                via: Some(via),
                origin: Origin::Static,
            });
        }

        let key = |k: &KeyConfig, name: &'static str| -> Result<Key, ConfigError> {
            Ok(Key {
                id: k.key_id,
                secret: parse_secret(name, &k.secret)?,
            })
        };
        let mut announce_keys = BTreeMap::new();
        for k in &self.announce_keys {
            let k = key(k, "announce_keys.secret")?;
            if announce_keys.insert(k.id, k.secret).is_some() {
                return Err(ConfigError::Ports {
                    key: "announce_keys",
                    problem: format!("key_id {} is listed twice", k.id),
                });
            }
        }
        let igp_key = self
            .igp_key
            .as_ref()
            .map(|k| key(k, "igp_key.secret"))
            .transpose()?;

        let default_policy = self
            .default_policy
            .as_deref()
            .map(parse_policy)
            .transpose()?;
        let sag = self
            .sag
            .as_deref()
            .map(|s| parse_v6("sag", s))
            .transpose()?;
        let fib_hash = match self.fib_hash.as_str() {
            "sha256" => NameHash::Sha256,
            "keyed" => NameHash::Keyed(if self.seed == 0 {
                u64::from(self.router_id)
            } else {
                self.seed
            }),
            other => {
                return Err(ConfigError::Parse {
                    key: "fib_hash",
                    value: other.into(),
                    what: "\"sha256\" or \"keyed\"",
                })
            }
        };
        range("hello_ms", self.hello_ms, 10, 60_000, "10..=60000")?;
        if self.dead_ms <= self.hello_ms || self.dead_ms > 600_000 {
            return Err(ConfigError::Range {
                key: "dead_ms",
                value: self.dead_ms,
                range: "more than hello_ms, at most 600000",
            });
        }
        range("mtu", self.mtu as u64, 1280, 65_535, "1280..=65535")?;
        range(
            "max_services",
            self.max_services as u64,
            1,
            10_000_000,
            "1..=10000000",
        )?;
        range(
            "max_instances",
            self.max_instances as u64,
            1,
            20_000_000,
            "1..=20000000",
        )?;
        range(
            "max_instances_per_service",
            self.max_instances_per_service as u64,
            1,
            65_536,
            "1..=65536",
        )?;
        // Local instances fill services-LSA parts of 64; part numbers stay
        // below u16::MAX (the local-part sentinel).
        range(
            "max_local_instances",
            self.max_local_instances as u64,
            1,
            1_000_000,
            "1..=1000000",
        )?;
        range(
            "max_lsas",
            self.max_lsas as u64,
            16,
            10_000_000,
            "16..=10000000",
        )?;
        range(
            "default_lifetime_s",
            u64::from(self.default_lifetime_s),
            1,
            u64::from(self.max_lifetime_s.max(1)),
            "1..=max_lifetime_s",
        )?;
        range(
            "max_lifetime_s",
            u64::from(self.max_lifetime_s),
            1,
            86_400,
            "1..=86400",
        )?;
        range(
            "max_pending",
            self.max_pending as u64,
            0,
            65_536,
            "0..=65536",
        )?;
        range(
            "resolve_timeout_ms",
            self.resolve_timeout_ms,
            100,
            60_000,
            "100..=60000",
        )?;
        range(
            "icmp_burst",
            u64::from(self.icmp_burst),
            1,
            10_000,
            "1..=10000",
        )?;

        let mut igp = IgpConfig::new(RouterId(self.router_id), address);
        igp.prefixes = prefixes;
        igp.key = igp_key;
        igp.hello_interval = Duration::from_millis(self.hello_ms);
        igp.dead_interval = Duration::from_millis(self.dead_ms);
        igp.max_lsas = self.max_lsas;
        let mut core = CoreConfig::new(RouterId(self.router_id), address);
        core.igp = igp;
        core.addresses = port_settings
            .iter()
            .flat_map(|p| {
                p.v6.iter()
                    .map(|(a, _)| IpAddr::V6(*a))
                    .chain(p.v4.iter().map(|a| IpAddr::V4(*a)))
            })
            .filter(|a| *a != IpAddr::V6(address))
            .collect();
        core.client_facing = port_settings.iter().any(|p| p.facing == Facing::Clients);
        core.announce_keys = announce_keys.clone();
        core.default_lifetime_s = self.default_lifetime_s;
        core.max_lifetime_s = self.max_lifetime_s;
        core.max_services = self.max_services;
        core.max_instances = self.max_instances;
        core.max_instances_per_service = self.max_instances_per_service;
        core.max_local_instances = self.max_local_instances;
        core.seed = if self.seed == 0 {
            u64::from(self.router_id)
        } else {
            self.seed
        };
        core.fib_hash = fib_hash;

        Ok(Settings {
            name: self.router_name.clone().unwrap_or_else(|| node.to_owned()),
            core,
            ports: port_settings,
            neighbors,
            routes,
            announce_keys,
            default_policy,
            sag,
            gateway: None,
            sticky: self
                .sticky
                .as_ref()
                .map(StickyConfig::settings)
                .transpose()?,
            mtu: self.mtu,
            icmp_per_s: self.icmp_per_s,
            icmp_burst: self.icmp_burst,
            max_pending: self.max_pending,
            resolve_timeout: Duration::from_millis(self.resolve_timeout_ms),
        })
    }
}

/// The ports with a prefix holding `addr`.
fn on_link(ports: &[PortSettings], addr: Ipv6Addr) -> Vec<usize> {
    ports
        .iter()
        .enumerate()
        .filter(|(_, p)| p.v6.iter().any(|(a, l)| Prefix::new(*a, *l).contains(addr)))
        .map(|(i, _)| i)
        .collect()
}

fn range(
    key: &'static str,
    v: u64,
    lo: u64,
    hi: u64,
    words: &'static str,
) -> Result<(), ConfigError> {
    if (lo..=hi).contains(&v) {
        Ok(())
    } else {
        Err(ConfigError::Range {
            key,
            value: v,
            range: words,
        })
    }
}

fn parse_v6(key: &'static str, s: &str) -> Result<Ipv6Addr, ConfigError> {
    s.parse::<Ipv6Addr>()
        .ok()
        .filter(|a| !a.is_multicast() && !a.is_unspecified())
        .ok_or_else(|| ConfigError::Parse {
            key,
            value: s.into(),
            what: "a unicast IPv6 address",
        })
}

fn parse_secret(key: &'static str, hex: &str) -> Result<Vec<u8>, ConfigError> {
    let bad = || ConfigError::Parse {
        key,
        value: "(secret not shown)".into(),
        what: "at least 16 octets of hex",
    };
    if hex.len() % 2 != 0 || hex.len() < 2 * MIN_SECRET_LEN {
        return Err(bad());
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| {
            hex.get(i..i + 2)
                .and_then(|b| u8::from_str_radix(b, 16).ok())
                .ok_or_else(bad)
        })
        .collect()
}

/// `mode/policy`: `routing/shortest`, `routing/min-metric`,
/// `scheduling/random`, `scheduling/round-robin`, `scheduling/weighted`,
/// `scheduling/min-metric`, `scheduling/app-metrics-cost`.
pub fn parse_policy(s: &str) -> Result<(Mode, Policy), ConfigError> {
    let p = match s {
        "routing/shortest" => (Mode::Routing, Policy::Shortest),
        "routing/min-metric" => (Mode::Routing, Policy::MinMetric),
        "scheduling/random" => (Mode::Scheduling, Policy::Random),
        "scheduling/round-robin" => (Mode::Scheduling, Policy::RoundRobin),
        "scheduling/weighted" => (Mode::Scheduling, Policy::Weighted),
        "scheduling/min-metric" => (Mode::Scheduling, Policy::MinMetric),
        "scheduling/app-metrics-cost" => (Mode::Scheduling, Policy::AppMetricsCost),
        _ => {
            return Err(ConfigError::Parse {
                key: "default_policy",
                value: s.into(),
                what: "one of routing/shortest, routing/min-metric, scheduling/random, \
                       scheduling/round-robin, scheduling/weighted, scheduling/min-metric, \
                       scheduling/app-metrics-cost",
            })
        }
    };
    Ok(p)
}

#[cfg(test)]
mod tests {
    use smoltcp::wire::EthernetAddress;

    use super::*;

    fn port(name: &str, addrs: &[&str]) -> PortConfig {
        PortConfig {
            name: name.into(),
            mac: EthernetAddress([2, 0, 0, 0, 0, 1]),
            addrs: addrs.iter().map(|a| a.parse().unwrap()).collect(),
            gateways: Vec::new(),
            mtu: 1500,
            max_burst: None,
            random_seed: None,
        }
    }

    fn ports() -> Vec<PortConfig> {
        vec![
            port("eth0", &["fd00:a::1/64", "10.0.0.1/24"]),
            port("eth1", &["fd00:ab::1/64"]),
        ]
    }

    fn parse(text: &str) -> SarConfig {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn a_full_section_validates_into_settings() {
        let c = parse(
            r#"
            router_id = 7
            address = "fd00:ab::1"
            default_policy = "scheduling/round-robin"
            sag = "fd00:5::1"
            announce_keys = [{ key_id = 1, secret = "00112233445566778899aabbccddeeff" }]
            igp_key = { key_id = 2, secret = "00112233445566778899aabbccddeeff00" }
            [[neighbors]]
            port = 1
            addr = "fd00:ab::2"
            [[routes]]
            prefix = "fd00:99::/48"
            via = "fd00:a::fe"
            "#,
        );
        let s = c.settings("s1", &ports()).unwrap();
        assert_eq!(s.name, "s1");
        assert_eq!(s.core.igp.router_id, RouterId(7));
        assert_eq!(
            s.core.igp.address,
            "fd00:ab::1".parse::<Ipv6Addr>().unwrap()
        );
        assert_eq!(s.core.igp.prefixes.len(), 2);
        assert_eq!(s.core.igp.key.as_ref().unwrap().secret.len(), 17);
        assert!(s.core.client_facing);
        assert_eq!(s.ports[0].facing, Facing::Clients);
        assert_eq!(s.ports[1].facing, Facing::Sars);
        assert_eq!(s.neighbors[0].cost, 10);
        assert_eq!(s.routes.len(), 3);
        assert_eq!(s.routes[2].port, 0);
        assert_eq!(
            s.default_policy,
            Some((Mode::Scheduling, Policy::RoundRobin))
        );
        assert_eq!(s.core.addresses.len(), 2);
    }

    /// `instance_ports`: by default every client port takes announcements;
    /// with the key, only those listed; a SAR port cannot be listed.
    #[test]
    fn instance_ports_narrow_where_announcements_are_taken() {
        let base = "router_id = 7\n[[neighbors]]\nport = 1\naddr = \"fd00:ab::2\"\n";
        let three = || {
            let mut p = ports();
            p.push(port("eth2", &["fd00:c::1/64"]));
            p
        };
        let s = parse(base).settings("s1", &three()).unwrap();
        assert_eq!(
            s.ports.iter().map(|p| p.instances).collect::<Vec<_>>(),
            [true, false, true]
        );
        let s = parse(&format!("instance_ports = [2]\n{base}"))
            .settings("s1", &three())
            .unwrap();
        assert_eq!(
            s.ports.iter().map(|p| p.instances).collect::<Vec<_>>(),
            [false, false, true]
        );
        for bad in ["instance_ports = [1]", "instance_ports = [9]"] {
            let e = parse(&format!("{bad}\n{base}"))
                .settings("s1", &three())
                .unwrap_err();
            assert!(e.to_string().contains("instance_ports"), "{e}");
        }
    }

    #[test]
    fn bad_values_name_their_key() {
        let cases = [
            ("", "router_id"),
            ("router_id = 1\naddress = \"fd00:9::1\"", "address"),
            ("router_id = 1\nsar_ports = [5]", "sar_ports"),
            (
                "router_id = 1\ndefault_policy = \"fastest\"",
                "default_policy",
            ),
            ("router_id = 1\nfib_hash = \"md5\"", "fib_hash"),
            ("router_id = 1\ndead_ms = 500", "dead_ms"),
            ("router_id = 1\nmtu = 1000", "mtu"),
            (
                "router_id = 1\nigp_key = { key_id = 1, secret = \"abcd\" }",
                "igp_key.secret",
            ),
            (
                "router_id = 1\n[[neighbors]]\nport = 0\naddr = \"fd00:ab::2\"",
                "neighbors.addr",
            ),
            (
                "router_id = 1\n[[neighbors]]\nport = 1\naddr = \"fd00:ab::2\"\ncost = 0",
                "neighbors.cost",
            ),
            (
                "router_id = 1\nsar_ports = [0]\n[[neighbors]]\nport = 1\naddr = \"fd00:ab::2\"",
                "sar_ports",
            ),
            (
                "router_id = 1\n[[routes]]\nprefix = \"fd00:99::/48\"\nvia = \"fd00:77::1\"",
                "routes.via",
            ),
            (
                "router_id = 1\n[[routes]]\nprefix = \"fd00:99::\"\nvia = \"fd00:a::2\"",
                "routes.prefix",
            ),
        ];
        for (text, key) in cases {
            let e = parse(text).settings("s", &ports()).unwrap_err();
            assert!(e.to_string().contains(&format!("`{key}`")), "{text}: {e}");
        }
        let mut gw = ports();
        gw[0].gateways = vec!["fd00:a::fe".parse().unwrap()];
        let e = parse("router_id = 1").settings("s", &gw).unwrap_err();
        assert!(e.to_string().contains("gateway"), "{e}");
        assert!(toml::from_str::<SarConfig>("router_id = 1\nrouterid = 2").is_err());
    }
}
