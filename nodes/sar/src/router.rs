//! The SAR's IPv6 routing table (SPEC §2.3: "an IPv6 router: forwards plain
//! IPv6 between its ports by its own routing table"), sans-IO.
//!
//! ```text
//!   connected  ── every port's IPv6 prefixes ───────────────┐
//!   static     ── [[sar.routes]] prefix via next hop ────────┼─► Table ── lookup(dst) ─► NextHop { port, addr }
//!   igp        ── other SARs' router-links prefixes, via the ┘     (longest prefix, then origin, then cost)
//!                 first hop of the SPF path
//! ```
//!
//! Longest prefix wins. For one prefix learnt several ways, a connected
//! route beats a static one, which beats an IGP one; among IGP routes the
//! lowest path cost wins, then the lowest router ID (so equal tables give
//! equal answers). The table is rebuilt whole whenever an input changes
//! (port set-up, SPF result, a router-links LSA): that is rare, and a
//! lookup stays one hash probe per prefix length present.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::Ipv6Addr;

use svcroute_stack::wire::igp::RouterId;

/// An IPv6 prefix: its address with the host bits cleared, and its length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Prefix {
    /// The network address (host bits zero).
    pub addr: Ipv6Addr,
    /// Prefix length, 0..=128.
    pub len: u8,
}

impl Prefix {
    /// The prefix of length `len` (clamped to 128) holding `addr`.
    pub fn new(addr: Ipv6Addr, len: u8) -> Self {
        let len = len.min(128);
        Self {
            addr: Ipv6Addr::from(u128::from(addr) & mask(len)),
            len,
        }
    }

    /// Whether `addr` is inside the prefix.
    pub fn contains(&self, addr: Ipv6Addr) -> bool {
        u128::from(addr) & mask(self.len) == u128::from(self.addr)
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

impl std::str::FromStr for Prefix {
    type Err = ();

    fn from_str(s: &str) -> Result<Self, ()> {
        let (a, l) = s.split_once('/').ok_or(())?;
        let addr: Ipv6Addr = a.parse().map_err(drop)?;
        let len: u8 = l.parse().map_err(drop)?;
        if len > 128 {
            return Err(());
        }
        Ok(Self::new(addr, len))
    }
}

const fn mask(len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        u128::MAX << (128 - len as u32)
    }
}

/// Where a route came from, in order of preference.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Origin {
    /// A prefix of one of our ports: the destination itself is the next hop.
    Connected,
    /// A configured route.
    Static,
    /// A prefix another SAR advertises in its router-links LSA.
    Igp {
        /// SPF path cost to that SAR.
        cost: u64,
        /// The SAR.
        router: RouterId,
    },
}

impl Origin {
    /// `connected`, `static` or `igp`.
    pub const fn as_str(&self) -> &'static str {
        match self {
            Self::Connected => "connected",
            Self::Static => "static",
            Self::Igp { .. } => "igp",
        }
    }
}

/// One route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Route {
    /// The destination prefix.
    pub prefix: Prefix,
    /// The port packets leave on.
    pub port: usize,
    /// The on-link next hop; `None` for connected prefixes (the
    /// destination is on the link).
    pub via: Option<Ipv6Addr>,
    /// Where the route came from.
    pub origin: Origin,
}

/// The answer of a lookup: leave on `port` toward on-link `addr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NextHop {
    /// The egress port.
    pub port: usize,
    /// The neighbour to hand the packet to (its MAC comes from the port's
    /// neighbour table).
    pub addr: Ipv6Addr,
}

/// The routing table. See the module docs.
#[derive(Debug, Clone, Default)]
pub struct Table {
    /// Prefix lengths present, longest first, each with its routes by
    /// network address.
    levels: Vec<(u8, HashMap<u128, Route>)>,
    len: usize,
}

impl Table {
    /// A table of `routes`; for a prefix given more than once the preferred
    /// route is kept (see the module docs).
    pub fn new(routes: impl IntoIterator<Item = Route>) -> Self {
        let mut by_prefix: BTreeMap<Prefix, Route> = BTreeMap::new();
        for r in routes {
            by_prefix
                .entry(r.prefix)
                .and_modify(|old| {
                    if (r.origin, r.port) < (old.origin, old.port) {
                        *old = r;
                    }
                })
                .or_insert(r);
        }
        let mut levels: BTreeMap<u8, HashMap<u128, Route>> = BTreeMap::new();
        let len = by_prefix.len();
        for (p, r) in by_prefix {
            levels
                .entry(p.len)
                .or_default()
                .insert(u128::from(p.addr), r);
        }
        Self {
            levels: levels.into_iter().rev().collect(),
            len,
        }
    }

    /// The route for `dst`, longest prefix first.
    pub fn route(&self, dst: Ipv6Addr) -> Option<&Route> {
        let d = u128::from(dst);
        self.levels
            .iter()
            .find_map(|(len, routes)| routes.get(&(d & mask(*len))))
    }

    /// Where to send a packet for `dst`.
    pub fn lookup(&self, dst: Ipv6Addr) -> Option<NextHop> {
        self.route(dst).map(|r| NextHop {
            port: r.port,
            addr: r.via.unwrap_or(dst),
        })
    }

    /// Number of prefixes.
    pub const fn len(&self) -> usize {
        self.len
    }

    /// Whether the table is empty.
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Every route, longest prefixes first, then by address.
    pub fn routes(&self) -> Vec<Route> {
        let mut out: Vec<Route> = self
            .levels
            .iter()
            .flat_map(|(_, m)| m.values().copied())
            .collect();
        out.sort_by_key(|r| (std::cmp::Reverse(r.prefix.len), r.prefix.addr));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Prefix {
        s.parse().unwrap()
    }

    fn a(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    fn route(prefix: &str, port: usize, via: Option<&str>, origin: Origin) -> Route {
        Route {
            prefix: p(prefix),
            port,
            via: via.map(a),
            origin,
        }
    }

    #[test]
    fn prefixes_clear_host_bits_and_parse_strictly() {
        assert_eq!(p("fd00:1::7/64"), p("fd00:1::/64"));
        assert_eq!(p("fd00:1::7/64").to_string(), "fd00:1::/64");
        assert!(p("::/0").contains(a("fd00::1")));
        assert!(p("fd00::1/128").contains(a("fd00::1")));
        assert!(!p("fd00::1/128").contains(a("fd00::2")));
        for bad in ["fd00::", "fd00::/129", "10.0.0.0/8", "x/3", "fd00::/-1"] {
            assert!(bad.parse::<Prefix>().is_err(), "{bad}");
        }
    }

    #[test]
    fn longest_prefix_wins_then_connected_static_igp_then_cost() {
        let t = Table::new([
            route("::/0", 2, Some("fd00:2::9"), Origin::Static),
            route("fd00:1::/64", 0, None, Origin::Connected),
            route(
                "fd00:1::/64",
                1,
                Some("fd00:12::2"),
                Origin::Igp {
                    cost: 1,
                    router: RouterId(2),
                },
            ),
            route(
                "fd00:9::/48",
                1,
                Some("fd00:12::2"),
                Origin::Igp {
                    cost: 20,
                    router: RouterId(2),
                },
            ),
            route(
                "fd00:9::/48",
                2,
                Some("fd00:13::3"),
                Origin::Igp {
                    cost: 10,
                    router: RouterId(3),
                },
            ),
            route("fd00:9:1::/64", 1, Some("fd00:12::2"), Origin::Static),
        ]);
        assert_eq!(t.len(), 4);
        let hop = |d: &str| t.lookup(a(d)).map(|h| (h.port, h.addr.to_string()));
        assert_eq!(hop("fd00:1::5"), Some((0, "fd00:1::5".into())));
        assert_eq!(hop("fd00:9::1"), Some((2, "fd00:13::3".into())));
        assert_eq!(hop("fd00:9:1::1"), Some((1, "fd00:12::2".into())));
        assert_eq!(hop("2001:db8::1"), Some((2, "fd00:2::9".into())));
        assert_eq!(t.routes()[0].prefix, p("fd00:1::/64"));
        assert_eq!(t.routes().last().unwrap().prefix, p("::/0"));
        let empty = Table::new([]);
        assert!(empty.is_empty());
        assert_eq!(empty.lookup(a("fd00::1")), None);
    }
}
