//! `lab move`: re-plug a kernel host's veth or a shim node's TAP into another
//! segment's bridge, as a UE moving between 5G sites does (draft
//! dunbar-6man-5g-edge-compute-sticky-service §3: the UE gets a new address
//! on the new segment).
//!
//! The new address keeps the port's interface identifier (the host bits of
//! its first address) under the new segment's prefix; the gateway is the
//! new segment's router. Both can be given instead (`--addr`, `--gateway`).
//! A kernel host's interface is re-addressed in its namespace; a `shim`
//! node is told through its control socket (`move ADDR/LEN GATEWAY`), and
//! its kernel host keeps its TUN address: the shim translates. Other nodes
//! cannot change their addresses at run time and are refused.

use std::net::IpAddr;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};

use super::exec::{find_target, Target};
use super::file::Lab;
use super::netns;

/// What `lab move` was asked.
pub(super) struct MoveArgs<'a> {
    /// The lab, if given.
    pub(super) lab: Option<&'a str>,
    /// `NAME` or `NAME:PORT` (a port index or interface name).
    pub(super) target: &'a str,
    /// The segment to plug into.
    pub(super) segment: &'a str,
    /// The new addresses (`ADDR/LEN`), instead of the derived ones.
    pub(super) addrs: &'a [String],
    /// The new gateways, instead of the new segment's routers.
    pub(super) gateways: Vec<IpAddr>,
}

/// An interface address `ADDR/LEN`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cidr {
    addr: IpAddr,
    len: u8,
}

impl std::str::FromStr for Cidr {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (a, l) = s
            .split_once('/')
            .ok_or_else(|| format!("{s:?} is not ADDR/LEN"))?;
        let addr: IpAddr = a
            .parse()
            .map_err(|_| format!("{a:?} is not an IP address"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let len: u8 = l
            .parse()
            .ok()
            .filter(|&n| n <= max)
            .ok_or_else(|| format!("{l:?} is not a prefix length 0..={max}"))?;
        Ok(Self { addr, len })
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// The address as a 128-bit integer and its width (32 or 128).
fn bits(a: IpAddr) -> (u128, u32) {
    match a {
        IpAddr::V4(v) => (u32::from(v) as u128, 32),
        IpAddr::V6(v) => (u128::from(v), 128),
    }
}

fn from_bits(v: u128, like: IpAddr) -> IpAddr {
    match like {
        IpAddr::V4(_) => IpAddr::V4((v as u32).into()),
        IpAddr::V6(_) => IpAddr::V6(v.into()),
    }
}

/// The mask of the first `len` of `width` bits.
fn mask(len: u8, width: u32) -> u128 {
    let host = width - u32::from(len);
    let all = if width == 128 {
        u128::MAX
    } else {
        (1u128 << width) - 1
    };
    if host >= 128 {
        0
    } else {
        all & !((1u128 << host) - 1)
    }
}

/// `old`'s host bits under `router`'s prefix, and `router` as the gateway.
/// `router` is an address of another port on the new segment.
fn derive(old: Cidr, router: Cidr) -> Option<(Cidr, IpAddr)> {
    if old.addr.is_ipv4() != router.addr.is_ipv4() {
        return None;
    }
    let (o, w) = bits(old.addr);
    let (r, _) = bits(router.addr);
    let m = mask(router.len, w);
    let new = from_bits((r & m) | (o & !m & mask(w as u8, w)), old.addr);
    (new != router.addr).then_some((
        Cidr {
            addr: new,
            len: router.len,
        },
        router.addr,
    ))
}

/// The router of `segment` for family `v4`: the first address there of a
/// routing node (sar, sag, nsff), else of any node port or host interface,
/// other than the port that moves.
fn segment_router(lab: &Lab, segment: &str, v4: bool, moving: (&str, usize)) -> Option<Cidr> {
    let parse = |a: &String| a.parse::<Cidr>().ok().filter(|c| c.addr.is_ipv4() == v4);
    let node_addrs = |routers: bool| {
        lab.nodes
            .iter()
            .filter(move |n| routers == matches!(n.role.as_str(), "sar" | "sag" | "nsff"))
            .flat_map(|n| n.ports.iter().enumerate().map(move |(i, p)| (n, i, p)))
            .filter(|(n, i, p)| p.segment == segment && (n.name.as_str(), *i) != moving)
            .flat_map(|(_, _, p)| p.addrs.iter())
    };
    let host_addrs = lab
        .hosts
        .iter()
        .flat_map(|h| h.ifaces.iter().enumerate().map(move |(i, f)| (h, i, f)))
        .filter(|(h, i, f)| f.segment == segment && (h.name.as_str(), *i) != moving)
        .flat_map(|(_, _, f)| f.addrs.iter());
    node_addrs(true)
        .chain(node_addrs(false))
        .chain(host_addrs)
        .find_map(parse)
}

/// A port named by index or by its interface name, among `names`.
fn port_index(target: &str, port: Option<&str>, names: &[String]) -> Result<usize> {
    match port {
        None if names.len() == 1 => Ok(0),
        None => bail!(
            "{target:?} has {} ports ({}): say which, as {target}:PORT",
            names.len(),
            names.join(", ")
        ),
        Some(p) => {
            if let Some(i) = names.iter().position(|n| n == p) {
                return Ok(i);
            }
            match p.parse::<usize>() {
                Ok(i) if i < names.len() => Ok(i),
                _ => bail!("{target:?} has no port {p:?} (ports: {})", names.join(", ")),
            }
        }
    }
}

pub(super) fn lab_move(a: &MoveArgs<'_>) -> Result<()> {
    let (name, port) = match a.target.split_once(':') {
        Some((n, p)) => (n, Some(p)),
        None => (a.target, None),
    };
    let (mut st, target) = find_target(a.lab, name)?;
    let lab = &st.lab;
    let seg = lab
        .segments
        .iter()
        .find(|s| s.name == a.segment)
        .with_context(|| {
            format!(
                "lab {} has no segment {:?} (segments: {})",
                lab.name,
                a.segment,
                lab.segments
                    .iter()
                    .map(|s| s.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })?
        .clone();
    let addrs: Vec<Cidr> = a
        .addrs
        .iter()
        .map(|s| {
            s.parse::<Cidr>()
                .map_err(|e| anyhow::anyhow!("--addr: {e}"))
        })
        .collect::<Result<_>>()?;
    // The leg to re-plug (in the lab namespace), its old addresses, and
    // whether it had a gateway.
    let (index, leg, old, had_gateway) = match &target {
        Target::Host(_) => {
            let h = lab.hosts.iter().find(|h| h.name == name).expect("found");
            let names: Vec<String> = h.ifaces.iter().map(|f| f.name.clone()).collect();
            if names.is_empty() {
                bail!("host {name:?} has no interface on a segment (a TUN host moves with its shim node)");
            }
            let i = port_index(name, port, &names)?;
            let f = &h.ifaces[i];
            (i, f.peer.clone(), f.addrs.clone(), !f.gateways.is_empty())
        }
        Target::Node => {
            let n = lab.nodes.iter().find(|n| n.name == name).expect("found");
            if n.role != "shim" {
                bail!(
                    "node {name:?} (role {}) cannot change its address at run time; \
                     lab move takes kernel hosts and shim nodes",
                    n.role
                );
            }
            let names: Vec<String> = (0..n.ports.len()).map(|i| format!("eth{i}")).collect();
            let i = port_index(name, port, &names)?;
            let p = &n.ports[i];
            (
                i,
                p.peer.clone().unwrap_or_else(|| p.tap.clone()),
                p.addrs.clone(),
                true,
            )
        }
    };
    let old: Vec<Cidr> = old
        .iter()
        .map(|s| s.parse::<Cidr>())
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow::anyhow!("{name}: its address {e} (from the lab plan)"))?;
    let router = |v4: bool| segment_router(lab, &seg.name, v4, (name, index));
    let new: Vec<Cidr> = if addrs.is_empty() {
        old.iter()
            .map(|&o| {
                let fam = if o.addr.is_ipv4() { "IPv4" } else { "IPv6" };
                let r = router(o.addr.is_ipv4()).with_context(|| {
                    format!(
                        "segment {:?} has no {fam} address to take a prefix from: give --addr",
                        seg.name
                    )
                })?;
                derive(o, r)
                    .map(|d| d.0)
                    .with_context(|| format!("{o} under {r}'s prefix is {r} itself: give --addr"))
            })
            .collect::<Result<_>>()?
    } else {
        addrs
    };
    // One gateway per family the port now has, if it had gateways.
    let gateways: Vec<IpAddr> = if !a.gateways.is_empty() {
        a.gateways.clone()
    } else if had_gateway {
        let mut v4 = new.iter().map(|c| c.addr.is_ipv4()).collect::<Vec<_>>();
        v4.dedup();
        v4.into_iter()
            .filter_map(|f| router(f).map(|r| r.addr))
            .collect()
    } else {
        Vec::new()
    };

    // Re-plug: the leg leaves its bridge and joins the new one.
    netns::ip_in(&lab.netns, &["link", "set", &leg, "nomaster"])?;
    netns::ip_in(&lab.netns, &["link", "set", &leg, "master", &seg.bridge])?;

    // Re-address.
    match &target {
        Target::Host(ns) => {
            let h = lab.hosts.iter().find(|h| h.name == name).expect("found");
            let dev = h.ifaces[index].name.clone();
            netns::ip_in(ns, &["addr", "flush", "dev", &dev, "scope", "global"])?;
            for c in &new {
                let s = c.to_string();
                let mut args = vec!["addr", "add", s.as_str(), "dev", &dev];
                if c.addr.is_ipv6() {
                    args.push("nodad");
                }
                netns::ip_in(ns, &args)?;
            }
            for g in &gateways {
                let fam = if g.is_ipv4() { "-4" } else { "-6" };
                let gs = g.to_string();
                netns::ip_in(
                    ns,
                    &[fam, "route", "replace", "default", "via", &gs, "dev", &dev],
                )?;
            }
        }
        Target::Node => {
            let c = new.iter().find(|c| c.addr.is_ipv6());
            let g = gateways.iter().find(|g| g.is_ipv6());
            let (Some(c), Some(g)) = (c, g) else {
                bail!("shim {name:?}: no address or gateway on segment {:?}: give --addr and --gateway", seg.name);
            };
            let sock = st.dir().join(format!("{name}.sock"));
            let args = vec!["move".to_owned(), c.to_string(), g.to_string()];
            let v = svcroute_stack::ctl::request(&sock, &args, Duration::from_secs(5))
                .with_context(|| format!("telling {name} its new address"))?;
            if let Some(e) = v.get("error").and_then(|e| e.as_str()) {
                bail!(
                    "{name} refused the move: {e} (its port is on {} now)",
                    seg.name
                );
            }
        }
    }

    // The plan follows, so `status` shows where the port is.
    let shown: Vec<String> = new.iter().map(Cidr::to_string).collect();
    match &target {
        Target::Host(_) => {
            let h = st
                .lab
                .hosts
                .iter_mut()
                .find(|h| h.name == name)
                .expect("found");
            let f = &mut h.ifaces[index];
            f.segment = seg.name.clone();
            f.bridge = seg.bridge.clone();
            f.addrs = shown.clone();
            f.gateways = gateways.clone();
        }
        Target::Node => {
            let n = st
                .lab
                .nodes
                .iter_mut()
                .find(|n| n.name == name)
                .expect("found");
            let p = &mut n.ports[index];
            p.segment = seg.name.clone();
            p.bridge = seg.bridge.clone();
            p.addrs = shown.clone();
            for h in &mut st.lab.hosts {
                if let Some(t) = h.tun.as_mut().filter(|t| t.node == name) {
                    t.segment = seg.name.clone();
                }
            }
        }
    }
    st.save()?;
    // Cuts and loss are kept by link name: written again for the port's
    // new bridge, they follow it.
    let imps = super::impair::load(&st);
    if !imps.is_empty() {
        super::impair::apply(&st, &imps)?;
    }
    super::out(&format!(
        "{} moved to segment {}{}{}\n",
        a.target,
        seg.name,
        if shown.is_empty() {
            String::new()
        } else {
            format!(" as {}", shown.join(", "))
        },
        if gateways.is_empty() {
            String::new()
        } else {
            let g: Vec<String> = gateways.iter().map(IpAddr::to_string).collect();
            format!(" via {}", g.join(", "))
        }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(s: &str) -> Cidr {
        s.parse().unwrap()
    }

    #[test]
    fn the_interface_id_moves_under_the_new_prefix() {
        let (a, g) = derive(c("fd00:a::20/64"), c("fd00:b::1/64")).unwrap();
        assert_eq!(
            (a.to_string(), g.to_string()),
            ("fd00:b::20/64".into(), "fd00:b::1".into())
        );
        let (a, g) = derive(c("10.0.1.10/24"), c("10.0.7.1/24")).unwrap();
        assert_eq!(
            (a.to_string(), g.to_string()),
            ("10.0.7.10/24".into(), "10.0.7.1".into())
        );
        // The new segment's prefix length rules.
        let (a, _) = derive(c("10.1.2.3/16"), c("10.9.9.1/24")).unwrap();
        assert_eq!(a.to_string(), "10.9.9.3/24");
        let (a, _) = derive(c("fd00:a::1:20/64"), c("fd00:b::1/112")).unwrap();
        assert_eq!(a.to_string(), "fd00:b::20/112");
    }

    #[test]
    fn no_derivation_across_families_or_onto_the_router() {
        assert_eq!(derive(c("10.0.1.10/24"), c("fd00:b::1/64")), None);
        assert_eq!(derive(c("fd00:a::1/64"), c("fd00:b::1/64")), None);
    }

    #[test]
    fn bad_addresses_are_named() {
        for (s, why) in [
            ("fd00::1", "not ADDR/LEN"),
            ("x/64", "not an IP address"),
            ("10.0.0.1/33", "0..=32"),
            ("fd00::1/129", "0..=128"),
        ] {
            let e = s.parse::<Cidr>().unwrap_err();
            assert!(e.contains(why), "{s}: {e}");
        }
    }

    #[test]
    fn ports_by_index_or_name() {
        let one = vec!["eth0".to_owned()];
        let two = vec!["eth0".to_owned(), "eth1".to_owned()];
        assert_eq!(port_index("h", None, &one).unwrap(), 0);
        assert_eq!(port_index("h", Some("eth1"), &two).unwrap(), 1);
        assert_eq!(port_index("h", Some("1"), &two).unwrap(), 1);
        assert!(port_index("h", None, &two)
            .unwrap_err()
            .to_string()
            .contains("h:PORT"));
        assert!(port_index("h", Some("eth5"), &two)
            .unwrap_err()
            .to_string()
            .contains("no port"));
    }
}
