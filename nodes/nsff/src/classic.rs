// Over 800 lines: the classic SFF's pipeline (decap, TTL, lookup, encap) is one pure function over bytes with its three encapsulations; the nNLM and the MAC wait sit beside it.
//! The classic SFF (SPEC §1.4 "classic next hops"; RFC 8300 §4, RFC 8677's
//! backward-compatible mode): NSH packets in, looked up in the nNLM by
//! (SPI, SI), out toward the row's next hop in the row's transport
//! encapsulation (TE), with the NSH TTL decremented.
//!
//! ```text
//!  frame ─► decap ──────────► NSH ─► TTL − 1 ─► nNLM (SPI, SI) ─► encap ─► frame
//!           Ethernet 0x894F          ≤ 1: drop   no row: drop      Ethernet 0x894F
//!           IPv4/6 GRE 0x894F                    http/end: drop    IPv4/6 GRE 0x894F
//!           IPv4/6 UDP 4790 GPE                                    IPv4/6 UDP 4790 GPE
//! ```
//!
//! - [`process`] is the whole per-packet pipeline as a pure function over
//!   bytes: a frame and a description of this node's ports in, an
//!   [`Outcome`] out (not ours, a counted [`DropReason`], or a [`Forward`]:
//!   the frame to send and the link-layer hop it needs).
//! - [`Classic`] is the small stateful part around it in the node: frames
//!   whose next hop's MAC is not known yet wait (bounded, with a deadline)
//!   while the runtime's neighbour assist resolves it.
//!
//! The SFF edits nothing in the NSH but the TTL (set in place, so
//! unassigned bits, the O bit, metadata of any MD type and the payload go
//! through byte for byte). It never decrements the SI: RFC 8300 §2.3 gives
//! that to SFs. See `docs/nsff.md` "Classic SFF" for every interpretation.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use smoltcp::phy::ChecksumCapabilities;
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{
    EthernetAddress, IpAddress, IpCidr, IpProtocol, Ipv4Packet, Ipv4Repr, Ipv6Packet, Ipv6Repr,
    UdpPacket, UdpRepr,
};
use svcroute_stack::neighbor::ASK_INTERVAL;
use svcroute_stack::runtime::{Context, FrameContext};
use svcroute_stack::shim::{Direction, Outbox, Verdict};
use svcroute_stack::stats::Counters;
use svcroute_stack::wire::gre;
use svcroute_stack::wire::nr::Fqdn;
use svcroute_stack::wire::nsh::{self, MdType, Spi};
use svcroute_stack::wire::vxlan_gpe::{self, Vni};

/// Most rows of the nNLM (it only comes from config).
pub const MAX_ROWS: usize = 65_536;

use smoltcp::wire::{
    ETHERNET_HEADER_LEN as ETH_LEN, IPV4_HEADER_LEN as IPV4_LEN, IPV6_HEADER_LEN as IPV6_LEN,
    UDP_HEADER_LEN as UDP_LEN,
};
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
/// Hop limit / TTL of the outer IP header we originate.
const OUTER_HOP_LIMIT: u8 = 64;
/// UDP source ports of VXLAN-GPE we send: `0xc000 | (SPI & 0x3fff)`.
const SRC_PORT_BASE: u16 = 0xc000;

/// A transport encapsulation (SPEC §1.4 "TE").
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Te {
    /// NSH over UDP 4790 (VXLAN-GPE, next protocol 4).
    VxlanGpe,
    /// NSH over GRE (RFC 2784, protocol type 0x894F).
    Gre,
    /// NSH directly over Ethernet (EtherType 0x894F).
    Ethernet,
    /// An HTTP message to a name (the HTTP path of the nSFF).
    Http,
    /// No encapsulation: the chain ends here.
    None,
}

impl Te {
    /// The config spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::VxlanGpe => "vxlan-gpe",
            Self::Gre => "gre",
            Self::Ethernet => "ethernet",
            Self::Http => "http",
            Self::None => "none",
        }
    }

    /// Parse the config spelling.
    pub fn parse(s: &str) -> Option<Self> {
        [
            Self::VxlanGpe,
            Self::Gre,
            Self::Ethernet,
            Self::Http,
            Self::None,
        ]
        .into_iter()
        .find(|t| t.as_str() == s)
    }

    /// Whether the classic SFF forwards over it.
    pub const fn is_classic(self) -> bool {
        matches!(self, Self::VxlanGpe | Self::Gre | Self::Ethernet)
    }
}

impl fmt::Display for Te {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The next hop of an nNLM row (SPEC §1.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NextHop {
    /// An IPv4 address (a classic SFF or SF).
    Ipv4(Ipv4Addr),
    /// An IPv6 address.
    Ipv6(Ipv6Addr),
    /// A MAC address on the row's port.
    Mac(EthernetAddress),
    /// A name, optionally with a path (`www.example.com/img`).
    Name {
        /// The service name.
        fqdn: Fqdn,
        /// The path, starting with `/`, if any.
        path: Option<String>,
    },
    /// The name is the request's own (`Host` / URI).
    HttpService,
    /// The end of the chain.
    End,
}

impl NextHop {
    /// Parse the config spelling, in this order: `http-service`, `end`, an
    /// IPv4 or IPv6 address, a MAC (`02:00:00:00:00:01`), a name with an
    /// optional `/path`.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "http-service" => return Ok(Self::HttpService),
            "end" => return Ok(Self::End),
            _ => {}
        }
        if let Ok(a) = s.parse::<Ipv4Addr>() {
            return Ok(Self::Ipv4(a));
        }
        if let Ok(a) = s.parse::<Ipv6Addr>() {
            return Ok(Self::Ipv6(a));
        }
        if let Some(m) = parse_mac(s) {
            if !m.is_unicast() {
                return Err(format!("{s:?} is not a unicast MAC"));
            }
            return Ok(Self::Mac(m));
        }
        let (name, path) = match s.find('/') {
            Some(i) => (&s[..i], Some(s[i..].to_owned())),
            None => (s, None),
        };
        let fqdn = Fqdn::new(name).map_err(|_| {
            format!(
                "{s:?} is neither an IPv4/IPv6 address, a MAC, a name (with an optional \
                 /path), `http-service` nor `end`"
            )
        })?;
        Ok(Self::Name { fqdn, path })
    }

    fn ip(&self) -> Option<IpAddress> {
        match *self {
            Self::Ipv4(a) => Some(IpAddress::Ipv4(a)),
            Self::Ipv6(a) => Some(IpAddress::Ipv6(a)),
            _ => None,
        }
    }
}

impl fmt::Display for NextHop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Ipv4(a) => write!(f, "{a}"),
            Self::Ipv6(a) => write!(f, "{a}"),
            Self::Mac(m) => write!(f, "{m}"),
            Self::Name { fqdn, path } => {
                write!(f, "{}{}", fqdn.as_str(), path.as_deref().unwrap_or(""))
            }
            Self::HttpService => f.write_str("http-service"),
            Self::End => f.write_str("end"),
        }
    }
}

/// One nNLM row's action: where (SPI, SI) goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// Next hop.
    pub next_hop: NextHop,
    /// Encapsulation toward it.
    pub te: Te,
    /// Egress port; `None`: the port the IP next hop is on-link on (or has
    /// a gateway of its family). A MAC next hop needs one.
    pub port: Option<usize>,
    /// VNI of VXLAN-GPE.
    pub vni: Vni,
}

/// A row that makes no sense, with the key to blame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowError {
    /// The config key.
    pub key: &'static str,
    /// Why.
    pub why: String,
}

impl Row {
    /// Build a row from its config fields and check that they fit together.
    pub fn new(
        next_hop: &str,
        te: &str,
        port: Option<usize>,
        vni: Option<u32>,
    ) -> Result<Self, RowError> {
        let err = |key, why: String| RowError { key, why };
        let next_hop = NextHop::parse(next_hop).map_err(|w| err("next_hop", w))?;
        let te = Te::parse(te).ok_or_else(|| {
            err(
                "te",
                format!("{te:?}: expected vxlan-gpe, gre, ethernet, http or none"),
            )
        })?;
        let fits = match te {
            Te::VxlanGpe | Te::Gre => matches!(next_hop, NextHop::Ipv4(_) | NextHop::Ipv6(_)),
            Te::Ethernet => matches!(
                next_hop,
                NextHop::Ipv4(_) | NextHop::Ipv6(_) | NextHop::Mac(_)
            ),
            Te::Http => matches!(next_hop, NextHop::Name { .. } | NextHop::HttpService),
            Te::None => next_hop == NextHop::End,
        };
        if !fits {
            let want = match te {
                Te::VxlanGpe | Te::Gre => "an IPv4 or IPv6 next_hop",
                Te::Ethernet => "an IPv4, IPv6 or MAC next_hop",
                Te::Http => "a name or http-service next_hop",
                Te::None => "next_hop = \"end\"",
            };
            return Err(err("te", format!("te {te} needs {want}, not {next_hop}")));
        }
        if matches!(next_hop, NextHop::Mac(_)) && port.is_none() {
            return Err(err("port", "a MAC next_hop needs the egress `port`".into()));
        }
        if port.is_some() && !te.is_classic() {
            return Err(err("port", format!("te {te} takes no `port`")));
        }
        let vni = match vni {
            None => Vni::default(),
            Some(_) if te != Te::VxlanGpe => {
                return Err(err("vni", format!("te {te} takes no `vni`")));
            }
            Some(v) => Vni::new(v).ok_or_else(|| err("vni", format!("{v} is over 24 bits")))?,
        };
        Ok(Self {
            next_hop,
            te,
            port,
            vni,
        })
    }
}

/// The nNLM: (SPI, SI) → [`Row`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Nnlm {
    rows: BTreeMap<(Spi, u8), Row>,
}

impl Nnlm {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add a row; `false` (and nothing changes) if (SPI, SI) already has
    /// one or the table holds [`MAX_ROWS`].
    pub fn insert(&mut self, spi: Spi, si: u8, row: Row) -> bool {
        if self.rows.len() >= MAX_ROWS || self.rows.contains_key(&(spi, si)) {
            return false;
        }
        self.rows.insert((spi, si), row);
        true
    }

    /// The row of (SPI, SI).
    pub fn get(&self, spi: Spi, si: u8) -> Option<&Row> {
        self.rows.get(&(spi, si))
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Every row in (SPI, SI) order.
    pub fn iter(&self) -> impl Iterator<Item = (Spi, u8, &Row)> {
        self.rows.iter().map(|(&(spi, si), r)| (spi, si, r))
    }
}

/// Settings of the classic SFF (`[nsff.classic]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClassicConfig {
    /// IP MTU of the egress links; a bigger re-encapsulated packet is
    /// dropped (`drop.nsff.classic_too_big`). Default 1500.
    pub mtu: usize,
    /// Packets waiting for a next hop's MAC, over all next hops. Default 256.
    pub max_pending: usize,
    /// A packet waits this long for its next hop's MAC, ms. Default 1000.
    pub resolve_timeout_ms: u64,
}

impl Default for ClassicConfig {
    fn default() -> Self {
        Self {
            mtu: 1500,
            max_pending: 256,
            resolve_timeout_ms: 1000,
        }
    }
}

impl ClassicConfig {
    /// The key whose value is out of range, if any.
    pub fn invalid_key(&self) -> Option<&'static str> {
        if self.mtu < 1280 || self.mtu > 65_535 {
            return Some("mtu");
        }
        if self.max_pending == 0 {
            return Some("max_pending");
        }
        if self.resolve_timeout_ms == 0 {
            return Some("resolve_timeout_ms");
        }
        None
    }
}

/// What the pipeline knows of one port of this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortView {
    /// The port's MAC.
    pub mac: EthernetAddress,
    /// Its addresses with prefixes.
    pub addrs: Vec<IpCidr>,
    /// Its default gateways.
    pub gateways: Vec<IpAddress>,
}

impl PortView {
    fn owns(&self, addr: IpAddress) -> bool {
        self.addrs.iter().any(|c| c.address() == addr)
    }

    fn on_link(&self, addr: IpAddress) -> Option<IpCidr> {
        self.addrs
            .iter()
            .find(|c| c.contains_addr(&addr) && c.address() != addr)
            .copied()
    }

    /// The link-layer hop toward `addr` from this port, and our source
    /// address for it.
    fn route(&self, addr: IpAddress) -> Option<(IpAddress, IpAddress)> {
        if let Some(c) = self.on_link(addr) {
            return Some((addr, c.address()));
        }
        let gw = self
            .gateways
            .iter()
            .copied()
            .find(|g| g.version() == addr.version() && self.on_link(*g).is_some())?;
        Some((gw, self.on_link(gw)?.address()))
    }
}

/// How an NSH packet arrived or leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encap {
    /// Ethernet, EtherType 0x894F.
    Ethernet,
    /// IPv4 or IPv6, GRE protocol type 0x894F.
    Gre,
    /// IPv4 or IPv6, UDP 4790, VXLAN-GPE next protocol NSH.
    VxlanGpe,
}

impl Encap {
    /// Counter suffix and doc spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Ethernet => "ethernet",
            Self::Gre => "gre",
            Self::VxlanGpe => "vxlan_gpe",
        }
    }
}

/// Why the classic SFF dropped a packet. Each has its own counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// A broken TE or NSH header (the tag says which).
    Malformed(&'static str),
    /// NSH over Ethernet to another MAC.
    NotForUs,
    /// NSH TTL ≤ 1 on arrival.
    Ttl,
    /// No nNLM row for (SPI, SI).
    NoRoute,
    /// The row is for the HTTP path (TE `http`) or ends the chain (`none`).
    NotClassic,
    /// No egress port, source address or route toward the next hop.
    NoEgress,
    /// The re-encapsulated packet exceeds the MTU.
    TooBig,
}

impl DropReason {
    /// The node counter it bumps.
    pub const fn counter(self) -> &'static str {
        match self {
            Self::Malformed(_) => "drop.nsff.classic_malformed",
            Self::NotForUs => "drop.nsff.classic_not_for_us",
            Self::Ttl => "drop.nsff.classic_ttl",
            Self::NoRoute => "drop.nsff.classic_no_route",
            Self::NotClassic => "drop.nsff.classic_not_classic",
            Self::NoEgress => "drop.nsff.classic_no_egress",
            Self::TooBig => "drop.nsff.classic_too_big",
        }
    }
}

/// Where a forwarded frame goes at the link layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum L2Hop {
    /// This MAC: the frame is complete.
    Mac(EthernetAddress),
    /// The MAC of this on-link address (the next hop or its gateway): fill
    /// octets 0..6 of the frame once known.
    Ip(IpAddress),
}

/// A frame to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forward {
    /// Egress port.
    pub port: usize,
    /// Its link-layer destination.
    pub hop: L2Hop,
    /// The whole Ethernet frame (destination MAC zero for [`L2Hop::Ip`]).
    pub frame: Vec<u8>,
    /// How it arrived.
    pub from: Encap,
    /// How it leaves.
    pub to: Encap,
}

/// The verdict of [`process`] on one frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Not a classic NSH packet for this node: the rest of the node's
    /// pipeline takes it.
    NotClassic,
    /// Drop it and count the reason.
    Drop(DropReason),
    /// Send this.
    Forward(Forward),
}

/// The classic SFF on one frame received on `in_port`: decapsulate, check
/// and decrement the TTL, look (SPI, SI) up, re-encapsulate. Pure; never
/// panics on any input.
pub fn process(
    table: &Nnlm,
    ports: &[PortView],
    mtu: usize,
    in_port: usize,
    frame: &[u8],
) -> Outcome {
    let Some(me) = ports.get(in_port) else {
        return Outcome::NotClassic;
    };
    let (from, nsh_bytes) = match decap(me, frame) {
        Ok(Some(d)) => d,
        Ok(None) => return Outcome::NotClassic,
        Err(r) => return Outcome::Drop(r),
    };
    match forward(table, ports, mtu, from, nsh_bytes) {
        Ok(f) => Outcome::Forward(f),
        Err(r) => Outcome::Drop(r),
    }
}

/// The NSH (with what follows it) of a classic packet for `me`, and how it
/// came; `Ok(None)` if the frame is not one.
pub fn decap<'a>(me: &PortView, frame: &'a [u8]) -> Result<Option<(Encap, &'a [u8])>, DropReason> {
    use DropReason::Malformed;
    let Some(body) = frame.get(ETH_LEN..) else {
        return Ok(None);
    };
    match u16::from_be_bytes([frame[12], frame[13]]) {
        nsh::ETHERTYPE => {
            if frame[..6] != me.mac.0 {
                return Err(DropReason::NotForUs);
            }
            Ok(Some((Encap::Ethernet, body)))
        }
        ETHERTYPE_IPV4 => {
            let Ok(ip) = Ipv4Packet::new_checked(body) else {
                return Ok(None);
            };
            let (src, dst) = (
                IpAddress::Ipv4(ip.src_addr()),
                IpAddress::Ipv4(ip.dst_addr()),
            );
            let payload = ip.payload();
            if !me.owns(dst) || !is_ours(ip.next_header(), payload) {
                return Ok(None);
            }
            if ip.more_frags() || ip.frag_offset() != 0 {
                return Err(Malformed("fragment"));
            }
            if !ip.verify_checksum() {
                return Err(Malformed("ipv4_checksum"));
            }
            inner(ip.next_header(), src, dst, payload).map(Some)
        }
        ETHERTYPE_IPV6 => {
            let Ok(ip) = Ipv6Packet::new_checked(body) else {
                return Ok(None);
            };
            let (src, dst) = (
                IpAddress::Ipv6(ip.src_addr()),
                IpAddress::Ipv6(ip.dst_addr()),
            );
            let payload = ip.payload();
            if !me.owns(dst) || !is_ours(ip.next_header(), payload) {
                return Ok(None);
            }
            if ip.next_header() == IpProtocol::Udp && payload.get(6..8).is_some_and(|c| c == [0, 0])
            {
                // RFC 8200 §8.1: a zero UDP checksum is not allowed over IPv6.
                return Err(Malformed("udp_checksum"));
            }
            inner(ip.next_header(), src, dst, payload).map(Some)
        }
        _ => Ok(None),
    }
}

/// Whether an IP payload to us is a classic TE: GRE, or UDP to port 4790.
fn is_ours(proto: IpProtocol, payload: &[u8]) -> bool {
    match proto {
        IpProtocol::Unknown(gre::IP_PROTOCOL) => true,
        IpProtocol::Udp => payload
            .get(2..4)
            .is_some_and(|p| u16::from_be_bytes([p[0], p[1]]) == vxlan_gpe::UDP_PORT),
        _ => false,
    }
}

fn inner(
    proto: IpProtocol,
    src: IpAddress,
    dst: IpAddress,
    payload: &[u8],
) -> Result<(Encap, &[u8]), DropReason> {
    use DropReason::Malformed;
    if proto == IpProtocol::Udp {
        let udp = UdpPacket::new_checked(payload).map_err(|_| Malformed("udp"))?;
        if udp.checksum() != 0 && !udp.verify_checksum(&src, &dst) {
            return Err(Malformed("udp_checksum"));
        }
        let gpe =
            vxlan_gpe::Packet::new_checked(udp.payload()).map_err(|_| Malformed("vxlan_gpe"))?;
        let repr = vxlan_gpe::Repr::parse(&gpe).map_err(|_| Malformed("vxlan_gpe"))?;
        if repr.next_protocol != vxlan_gpe::NextProtocol::Nsh {
            return Err(Malformed("vxlan_gpe_not_nsh"));
        }
        return Ok((Encap::VxlanGpe, gpe.payload()));
    }
    let g = gre::Packet::new_checked(payload).map_err(|_| Malformed("gre"))?;
    let repr = gre::Repr::parse(&g).map_err(|_| Malformed("gre"))?;
    if repr.protocol_type != gre::ProtocolType::Nsh {
        return Err(Malformed("gre_not_nsh"));
    }
    Ok((Encap::Gre, g.payload()))
}

/// TTL, lookup and re-encapsulation of one NSH packet (`nsh_bytes`: the
/// NSH and its payload).
pub fn forward(
    table: &Nnlm,
    ports: &[PortView],
    mtu: usize,
    from: Encap,
    nsh_bytes: &[u8],
) -> Result<Forward, DropReason> {
    use DropReason::Malformed;
    let pkt = nsh::Packet::new_checked(nsh_bytes).map_err(|_| Malformed("nsh"))?;
    nsh::Repr::parse(&pkt).map_err(|_| Malformed("nsh"))?;
    if pkt.md_type() == MdType::Unknown(0) {
        // RFC 8300 §2.5: MD type 0x0 is reserved.
        return Err(Malformed("nsh_md_type"));
    }
    // RFC 8300 §2.2: the TTL is decremented before the lookup.
    let ttl = pkt.ttl().decremented().ok_or(DropReason::Ttl)?;
    let row = table.get(pkt.spi(), pkt.si()).ok_or(DropReason::NoRoute)?;
    if !row.te.is_classic() {
        return Err(DropReason::NotClassic);
    }
    let spi = pkt.spi();
    let (port, hop, src_ip) = egress(row, ports)?;
    let me = &ports[port];
    let mut inner = nsh_bytes.to_vec();
    nsh::Packet::new_unchecked(&mut inner[..]).set_ttl(ttl);
    let dst_mac = match hop {
        L2Hop::Mac(m) => m,
        L2Hop::Ip(_) => EthernetAddress([0; 6]),
    };
    let (to, frame) = match (row.te, row.next_hop.ip(), src_ip) {
        (Te::Ethernet, _, _) => (
            Encap::Ethernet,
            eth_frame(dst_mac, me.mac, nsh::ETHERTYPE, &inner),
        ),
        (Te::Gre, Some(dst), Some(src)) => {
            let mut g = vec![0; gre::HEADER_LEN + inner.len()];
            let repr = gre::Repr {
                protocol_type: gre::ProtocolType::Nsh,
                checksum: false,
            };
            repr.emit(&mut gre::Packet::new_unchecked(&mut g[..]));
            g[gre::HEADER_LEN..].copy_from_slice(&inner);
            (
                Encap::Gre,
                ip_frame(
                    dst_mac,
                    me.mac,
                    src,
                    dst,
                    IpProtocol::Unknown(gre::IP_PROTOCOL),
                    &g,
                ),
            )
        }
        (Te::VxlanGpe, Some(dst), Some(src)) => {
            let mut g = vec![0; vxlan_gpe::HEADER_LEN + inner.len()];
            let repr = vxlan_gpe::Repr {
                next_protocol: vxlan_gpe::NextProtocol::Nsh,
                vni: row.vni,
                bum: false,
                oam: false,
            };
            repr.emit(&mut vxlan_gpe::Packet::new_unchecked(&mut g[..]));
            g[vxlan_gpe::HEADER_LEN..].copy_from_slice(&inner);
            let mut u = vec![0; UDP_LEN + g.len()];
            let udp = UdpRepr {
                src_port: SRC_PORT_BASE | (spi.value() as u16 & 0x3fff),
                dst_port: vxlan_gpe::UDP_PORT,
            };
            udp.emit(
                &mut UdpPacket::new_unchecked(&mut u[..]),
                &src,
                &dst,
                g.len(),
                |p| p.copy_from_slice(&g),
                &ChecksumCapabilities::default(),
            );
            (
                Encap::VxlanGpe,
                ip_frame(dst_mac, me.mac, src, dst, IpProtocol::Udp, &u),
            )
        }
        // Row::new admits no other combination.
        _ => return Err(DropReason::NoEgress),
    };
    if frame.len() < ETH_LEN {
        return Err(DropReason::NoEgress);
    }
    if frame.len() - ETH_LEN > mtu {
        return Err(DropReason::TooBig);
    }
    Ok(Forward {
        port,
        hop,
        frame,
        from,
        to,
    })
}

/// Egress port, link-layer hop and (for IP TEs) our source address.
fn egress(row: &Row, ports: &[PortView]) -> Result<(usize, L2Hop, Option<IpAddress>), DropReason> {
    if let NextHop::Mac(m) = row.next_hop {
        let port = row
            .port
            .filter(|&p| p < ports.len())
            .ok_or(DropReason::NoEgress)?;
        return Ok((port, L2Hop::Mac(m), None));
    }
    let dst = row.next_hop.ip().ok_or(DropReason::NoEgress)?;
    // The row's port, else the first on-link one, else the first with a
    // gateway of the family.
    let port = row
        .port
        .or_else(|| ports.iter().position(|p| p.on_link(dst).is_some()))
        .or_else(|| ports.iter().position(|p| p.route(dst).is_some()))
        .ok_or(DropReason::NoEgress)?;
    let view = ports.get(port).ok_or(DropReason::NoEgress)?;
    let (hop, src) = view.route(dst).ok_or(DropReason::NoEgress)?;
    // Ethernet TE to an IP next hop: the MAC of the next hop itself, which
    // must be on-link (a gateway's MAC would deliver NSH to the router).
    if row.te == Te::Ethernet {
        if view.on_link(dst).is_none() {
            return Err(DropReason::NoEgress);
        }
        return Ok((port, L2Hop::Ip(dst), None));
    }
    Ok((port, L2Hop::Ip(hop), Some(src)))
}

fn eth_frame(dst: EthernetAddress, src: EthernetAddress, ethertype: u16, body: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(ETH_LEN + body.len());
    f.extend_from_slice(&dst.0);
    f.extend_from_slice(&src.0);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(body);
    f
}

fn ip_frame(
    dst_mac: EthernetAddress,
    src_mac: EthernetAddress,
    src: IpAddress,
    dst: IpAddress,
    proto: IpProtocol,
    payload: &[u8],
) -> Vec<u8> {
    match (src, dst) {
        (IpAddress::Ipv4(s), IpAddress::Ipv4(d)) => {
            let mut b = vec![0; IPV4_LEN + payload.len()];
            let repr = Ipv4Repr {
                src_addr: s,
                dst_addr: d,
                next_header: proto,
                payload_len: payload.len(),
                hop_limit: OUTER_HOP_LIMIT,
            };
            repr.emit(
                &mut Ipv4Packet::new_unchecked(&mut b[..]),
                &ChecksumCapabilities::default(),
            );
            b[IPV4_LEN..].copy_from_slice(payload);
            eth_frame(dst_mac, src_mac, ETHERTYPE_IPV4, &b)
        }
        (IpAddress::Ipv6(s), IpAddress::Ipv6(d)) => {
            let mut b = vec![0; IPV6_LEN + payload.len()];
            let repr = Ipv6Repr {
                src_addr: s,
                dst_addr: d,
                next_header: proto,
                payload_len: payload.len(),
                hop_limit: OUTER_HOP_LIMIT,
            };
            repr.emit(&mut Ipv6Packet::new_unchecked(&mut b[..]));
            b[IPV6_LEN..].copy_from_slice(payload);
            eth_frame(dst_mac, src_mac, ETHERTYPE_IPV6, &b)
        }
        // route() picks the source from the destination's family.
        _ => Vec::new(),
    }
}

fn parse_mac(s: &str) -> Option<EthernetAddress> {
    let mut m = [0u8; 6];
    let mut parts = s.split([':', '-']);
    for b in &mut m {
        let p = parts.next()?;
        if p.len() != 2 {
            return None;
        }
        *b = u8::from_str_radix(p, 16).ok()?;
    }
    parts.next().is_none().then_some(EthernetAddress(m))
}

/// Frames waiting for one next hop's MAC.
#[derive(Debug, Default)]
struct Parked {
    frames: VecDeque<(Forward, Instant)>,
    asked: Option<Instant>,
}

/// The classic SFF inside the nsff node.
///
/// Call order: [`Self::learn_ports`] once at start; [`Self::ingress`] for
/// every received frame (it answers `None` for frames that are not classic
/// NSH packets for us); [`Self::poll`] on every node poll (it sends what
/// waits for a MAC, asks the neighbour assist, expires what waited too
/// long); [`Self::poll_at`] before the node sleeps.
#[derive(Debug)]
pub struct Classic {
    table: Nnlm,
    cfg: ClassicConfig,
    ports: Vec<PortView>,
    /// From ingress, not yet looked up in the neighbour table.
    fresh: VecDeque<Forward>,
    parked: BTreeMap<(usize, IpAddress), Parked>,
    waiting: usize,
}

impl Classic {
    /// A classic SFF over `table`.
    pub fn new(table: Nnlm, cfg: ClassicConfig) -> Self {
        Self {
            table,
            cfg,
            ports: Vec::new(),
            fresh: VecDeque::new(),
            parked: BTreeMap::new(),
            waiting: 0,
        }
    }

    /// The table.
    pub fn table(&self) -> &Nnlm {
        &self.table
    }

    /// Take note of the node's ports (MACs, addresses, gateways).
    pub fn learn_ports(&mut self, cx: &Context<'_>) {
        let ports = cx
            .ports
            .iter()
            .map(|p| {
                let smoltcp::wire::HardwareAddress::Ethernet(mac) = p.iface.hardware_addr();
                PortView {
                    mac,
                    addrs: p.iface.ip_addrs().to_vec(),
                    gateways: p.gateways.clone(),
                }
            })
            .collect();
        self.set_ports(ports);
    }

    /// Set the node's ports (what [`Self::learn_ports`] does from a
    /// [`Context`]).
    pub fn set_ports(&mut self, ports: Vec<PortView>) {
        self.ports = ports;
        for (spi, si, row) in self.table.iter() {
            if row.port.is_some_and(|p| p >= self.ports.len()) {
                log::warn!("nsff: nnlm row spi {spi} si {si}: port does not exist");
            }
        }
    }

    /// Handle a received frame if it is a classic NSH packet for us.
    pub fn ingress(
        &mut self,
        cx: &mut FrameContext<'_>,
        port: usize,
        frame: &[u8],
    ) -> Option<Verdict> {
        match process(&self.table, &self.ports, self.cfg.mtu, port, frame) {
            Outcome::NotClassic => None,
            Outcome::Drop(r) => {
                if let DropReason::Malformed(why) = r {
                    log::debug!("nsff: classic packet on port {port} dropped: malformed {why}");
                }
                cx.stats.bump(r.counter());
                Some(Verdict::Consume)
            }
            Outcome::Forward(f) => {
                cx.stats
                    .bump(&format!("nsff.classic_in_{}", f.from.as_str()));
                match f.hop {
                    L2Hop::Mac(_) => send(cx.out, cx.stats, f),
                    L2Hop::Ip(_) if self.waiting >= self.cfg.max_pending => {
                        cx.stats.bump("drop.nsff.classic_pending_full");
                    }
                    L2Hop::Ip(_) => {
                        self.waiting += 1;
                        self.fresh.push_back(f);
                    }
                }
                Some(Verdict::Consume)
            }
        }
    }

    /// Send what can go, ask for the MACs still missing, expire the rest.
    #[must_use]
    pub fn poll(&mut self, cx: &mut Context<'_>) -> bool {
        let mut any = false;
        while let Some(f) = self.fresh.pop_front() {
            any = true;
            let L2Hop::Ip(ip) = f.hop else {
                self.waiting -= 1;
                send(cx.out, cx.stats, f);
                continue;
            };
            match cx.ports.get(f.port).and_then(|p| p.neighbors().lookup(&ip)) {
                Some(mac) => {
                    self.waiting -= 1;
                    send(cx.out, cx.stats, with_mac(f, mac));
                }
                None => {
                    let deadline = cx.now + Duration::from_millis(self.cfg.resolve_timeout_ms);
                    let key = (f.port, ip);
                    self.parked
                        .entry(key)
                        .or_default()
                        .frames
                        .push_back((f, deadline));
                    cx.stats.bump("nsff.classic_parked");
                }
            }
        }
        let keys: Vec<(usize, IpAddress)> = self.parked.keys().copied().collect();
        for key in keys {
            let Some(mut parked) = self.parked.remove(&key) else {
                continue;
            };
            if let Some(mac) = cx
                .ports
                .get(key.0)
                .and_then(|p| p.neighbors().lookup(&key.1))
            {
                any = true;
                for (f, _) in parked.frames {
                    self.waiting -= 1;
                    send(cx.out, cx.stats, with_mac(f, mac));
                }
                continue;
            }
            while parked.frames.front().is_some_and(|(_, d)| *d <= cx.now) {
                parked.frames.pop_front();
                self.waiting -= 1;
                any = true;
                cx.stats.bump("drop.nsff.classic_unresolved");
            }
            if parked.frames.is_empty() {
                continue;
            }
            if parked.asked.is_none_or(|t| cx.now >= t + ASK_INTERVAL) {
                parked.asked = Some(cx.now);
                cx.resolve(key.0, key.1);
            }
            self.parked.insert(key, parked);
        }
        any
    }

    /// When [`Self::poll`] is next due without I/O.
    pub fn poll_at(&self) -> Option<Instant> {
        if !self.fresh.is_empty() {
            return Some(Instant::from_millis(0));
        }
        self.parked
            .values()
            .flat_map(|p| {
                let deadline = p.frames.front().map(|(_, d)| *d);
                let ask = p.asked.map(|t| t + ASK_INTERVAL);
                deadline.into_iter().chain(ask)
            })
            .min()
    }

    /// The `nnlm` control answer.
    pub fn control(&self, stats: &Counters) -> Value {
        let rows: Vec<Value> = self
            .table
            .iter()
            .map(|(spi, si, r)| {
                json!({
                    "spi": spi.value(),
                    "si": si,
                    "next_hop": r.next_hop.to_string(),
                    "te": r.te.as_str(),
                    "port": r.port,
                    "vni": (r.te == Te::VxlanGpe).then_some(r.vni.value()),
                })
            })
            .collect();
        let counters: BTreeMap<&str, u64> = stats
            .named
            .iter()
            .filter(|(k, _)| k.starts_with("nsff.classic_") || k.starts_with("drop.nsff.classic_"))
            .map(|(k, &v)| (k.as_str(), v))
            .collect();
        json!({
            "rows": rows,
            "waiting": self.waiting,
            "counters": counters,
        })
    }
}

fn with_mac(mut f: Forward, mac: EthernetAddress) -> Forward {
    f.frame[..6].copy_from_slice(&mac.0);
    f.hop = L2Hop::Mac(mac);
    f
}

fn send(out: &mut Outbox, stats: &mut Counters, f: Forward) {
    stats.bump("nsff.classic_forwarded");
    stats.bump(&format!("nsff.classic_out_{}", f.to.as_str()));
    out.inject(f.port, Direction::ToWire, f.frame);
}

/// The body of the `nsff_classic` fuzz target: [`process`] on `data` (its
/// first octet picks the arrival port) with a table that has a row of
/// every kind, on two ports with IPv4 and IPv6 addresses and a gateway.
/// Never panics; a forwarded frame fits the MTU and leaves by a real port.
#[doc(hidden)]
pub fn fuzz_process(data: &[u8]) {
    let Some((&pick, frame)) = data.split_first() else {
        return;
    };
    let cidr = |s: &str| s.parse::<IpCidr>().ok();
    let ports: Vec<PortView> = [
        (0x10, ["10.0.1.1/24", "fd00:1::1/64"], None),
        (0x11, ["10.0.2.1/24", "fd00:2::1/64"], Some("10.0.2.254")),
    ]
    .into_iter()
    .map(|(m, addrs, gw)| PortView {
        mac: EthernetAddress([0x02, 0, 0, 0, 0, m]),
        addrs: addrs.iter().filter_map(|a| cidr(a)).collect(),
        gateways: gw
            .and_then(|g| g.parse::<Ipv4Addr>().ok())
            .map(IpAddress::Ipv4)
            .into_iter()
            .collect(),
    })
    .collect();
    let mut table = Nnlm::new();
    let rows: [(u32, u8, &str, &str, Option<usize>); 7] = [
        (100, 255, "10.0.2.10", "vxlan-gpe", None),
        (101, 255, "fd00:2::20", "gre", None),
        (102, 255, "02:00:00:00:00:5f", "ethernet", Some(1)),
        (103, 255, "10.9.9.9", "vxlan-gpe", None),
        (104, 255, "fd00:1::30", "ethernet", None),
        (400, 255, "www.example.com", "http", None),
        (401, 255, "end", "none", None),
    ];
    for (spi, si, hop, te, port) in rows {
        if let (Some(spi), Ok(row)) = (Spi::new(spi), Row::new(hop, te, port, Some(7))) {
            table.insert(spi, si, row);
        }
    }
    let mtu = 1500;
    if let Outcome::Forward(f) = process(&table, &ports, mtu, usize::from(pick % 2), frame) {
        assert!(f.port < ports.len(), "{f:?}");
        assert!(f.frame.len() <= 14 + mtu, "{}", f.frame.len());
    }
}

#[cfg(test)]
mod test {
    use proptest::prelude::*;

    use super::*;

    const MAC0: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x01]);
    const MAC1: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x02]);
    const SF_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x5f]);

    /// Made with scapy (`scapy.contrib.nsh`, an independent encoder): a
    /// classifier 10.0.1.10 sends VXLAN-GPE (VNI 100) to us at 10.0.1.1:
    /// NSH MD type 1, TTL 5, next protocol IPv4, SPI 100, SI 255, context
    /// 00..0f, payload `E inner payload!`.
    static GOLDEN_IN: [u8; 89] = [
        0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0xaa, 0x08, 0x00, 0x45,
        0x00, 0x00, 0x4b, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x24, 0x98, 0x0a, 0x00, 0x01, 0x0a,
        0x0a, 0x00, 0x01, 0x01, 0x30, 0x39, 0x12, 0xb6, 0x00, 0x37, 0x0c, 0xf4, 0x0c, 0x00, 0x00,
        0x04, 0x00, 0x00, 0x64, 0x00, 0x01, 0x46, 0x01, 0x01, 0x00, 0x00, 0x64, 0xff, 0x00, 0x01,
        0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x45,
        0x69, 0x6e, 0x6e, 0x65, 0x72, 0x20, 0x70, 0x61, 0x79, 0x6c, 0x6f, 0x61, 0x64, 0x21,
    ];

    /// The same, as scapy says it must leave toward 10.0.2.10 (row: SPI
    /// 100, SI 255 → vxlan-gpe, VNI 7): outer IPv4 from 10.0.2.1 (DF, ID
    /// 0, TTL 64), UDP 0xc064 → 4790, VNI 7, NSH TTL 4, SI still 255,
    /// everything else unchanged. Destination MAC still zero: it is
    /// filled once the neighbour is resolved.
    static GOLDEN_OUT: [u8; 89] = [
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x08, 0x00, 0x45,
        0x00, 0x00, 0x4b, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x22, 0x98, 0x0a, 0x00, 0x02, 0x01,
        0x0a, 0x00, 0x02, 0x0a, 0xc0, 0x64, 0x12, 0xb6, 0x00, 0x37, 0xd8, 0x08, 0x0c, 0x00, 0x00,
        0x04, 0x00, 0x00, 0x07, 0x00, 0x01, 0x06, 0x01, 0x01, 0x00, 0x00, 0x64, 0xff, 0x00, 0x01,
        0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x45,
        0x69, 0x6e, 0x6e, 0x65, 0x72, 0x20, 0x70, 0x61, 0x79, 0x6c, 0x6f, 0x61, 0x64, 0x21,
    ];

    /// scapy again: NSH straight over Ethernet to our MAC. O bit and the
    /// unassigned bit after it set, TTL 63, MD type 2 with one context
    /// header (class 0x0101, type 0x81, `deadbeef`), next protocol IPv6,
    /// SPI 0xabcdef, SI 7.
    static GOLDEN2_IN: [u8; 39] = [
        0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0xaa, 0x89, 0x4f, 0x3f,
        0xc4, 0x02, 0x02, 0xab, 0xcd, 0xef, 0x07, 0x01, 0x01, 0x81, 0x04, 0xde, 0xad, 0xbe, 0xef,
        0x60, 0x76, 0x36, 0x20, 0x69, 0x6e, 0x6e, 0x65, 0x72,
    ];

    /// Out over GRE (no checksum) in IPv6 to fd00:2::20: TTL 62, the O and
    /// unassigned bits and the metadata kept.
    static GOLDEN2_OUT: [u8; 83] = [
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x86, 0xdd, 0x60,
        0x00, 0x00, 0x00, 0x00, 0x1d, 0x2f, 0x40, 0xfd, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0xfd, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x20, 0x00, 0x00, 0x89, 0x4f, 0x3f, 0x84,
        0x02, 0x02, 0xab, 0xcd, 0xef, 0x07, 0x01, 0x01, 0x81, 0x04, 0xde, 0xad, 0xbe, 0xef, 0x60,
        0x76, 0x36, 0x20, 0x69, 0x6e, 0x6e, 0x65, 0x72,
    ];

    fn cidr(s: &str) -> IpCidr {
        s.parse().unwrap()
    }

    /// Port 0 faces the classifier (10.0.1.1/24, fd00:1::1/64), port 1 the
    /// next hops (10.0.2.1/24, fd00:2::1/64, gateway 10.0.2.254).
    fn ports() -> Vec<PortView> {
        vec![
            PortView {
                mac: MAC0,
                addrs: vec![cidr("10.0.1.1/24"), cidr("fd00:1::1/64")],
                gateways: vec![],
            },
            PortView {
                mac: MAC1,
                addrs: vec![cidr("10.0.2.1/24"), cidr("fd00:2::1/64")],
                gateways: vec![IpAddress::Ipv4(Ipv4Addr::new(10, 0, 2, 254))],
            },
        ]
    }

    fn row(next_hop: &str, te: &str, port: Option<usize>, vni: Option<u32>) -> Row {
        Row::new(next_hop, te, port, vni).unwrap()
    }

    fn spi(v: u32) -> Spi {
        Spi::new(v).unwrap()
    }

    /// SPI 100 → vxlan-gpe 10.0.2.10 (VNI 7); 0xabcdef/7 → gre fd00:2::20;
    /// 300 → ethernet to SF_MAC on port 1; 301 → ethernet to 10.0.2.30;
    /// 302 → vxlan-gpe fd00:2::30; 303 → gre 10.0.2.31; 400 → http;
    /// 401 → end; 500 → vxlan-gpe 10.9.9.9 (through the gateway).
    fn table() -> Nnlm {
        let mut t = Nnlm::new();
        assert!(t.insert(spi(100), 255, row("10.0.2.10", "vxlan-gpe", None, Some(7))));
        assert!(t.insert(spi(0xabcdef), 7, row("fd00:2::20", "gre", None, None)));
        assert!(t.insert(
            spi(300),
            9,
            row("02:00:00:00:00:5f", "ethernet", Some(1), None)
        ));
        assert!(t.insert(spi(301), 9, row("10.0.2.30", "ethernet", None, None)));
        assert!(t.insert(spi(302), 9, row("fd00:2::30", "vxlan-gpe", None, None)));
        assert!(t.insert(spi(303), 9, row("10.0.2.31", "gre", None, None)));
        assert!(t.insert(spi(400), 9, row("www.example.com/x", "http", None, None)));
        assert!(t.insert(spi(401), 9, row("end", "none", None, None)));
        assert!(t.insert(spi(500), 9, row("10.9.9.9", "vxlan-gpe", None, None)));
        assert!(!t.insert(spi(500), 9, row("10.9.9.8", "gre", None, None)));
        t
    }

    #[track_caller]
    fn run(frame: &[u8]) -> Outcome {
        process(&table(), &ports(), 1500, 0, frame)
    }

    #[track_caller]
    fn forwarded(frame: &[u8]) -> Forward {
        match run(frame) {
            Outcome::Forward(f) => f,
            other => panic!("not forwarded: {other:?}"),
        }
    }

    /// An NSH (MD type 1, next protocol IPv4) of SPI/SI/TTL with `payload`.
    fn nsh_bytes(spi_: u32, si: u8, ttl: u8, payload: &[u8]) -> Vec<u8> {
        let repr = nsh::Repr {
            oam: false,
            ttl: nsh::Ttl::new(ttl).unwrap(),
            next_protocol: nsh::NextProtocol::Ipv4,
            spi: spi(spi_),
            si,
            metadata: nsh::Metadata::Md1([0x11; 16]),
        };
        let mut b = vec![0; repr.buffer_len()];
        repr.emit(&mut nsh::Packet::new_unchecked(&mut b[..]));
        b.extend_from_slice(payload);
        b
    }

    /// `nsh` as a classifier on port 0's segment would send it to us.
    fn wrap(encap: Encap, v6: bool, nsh: &[u8]) -> Vec<u8> {
        let peer = EthernetAddress([0x02, 0, 0, 0, 0, 0xaa]);
        let (src, dst) = if v6 {
            (
                IpAddress::Ipv6("fd00:1::10".parse().unwrap()),
                IpAddress::Ipv6("fd00:1::1".parse().unwrap()),
            )
        } else {
            (
                IpAddress::Ipv4(Ipv4Addr::new(10, 0, 1, 10)),
                IpAddress::Ipv4(Ipv4Addr::new(10, 0, 1, 1)),
            )
        };
        match encap {
            Encap::Ethernet => eth_frame(MAC0, peer, nsh::ETHERTYPE, nsh),
            Encap::Gre => {
                let mut g = vec![0, 0, 0x89, 0x4f];
                g.extend_from_slice(nsh);
                ip_frame(MAC0, peer, src, dst, IpProtocol::Unknown(47), &g)
            }
            Encap::VxlanGpe => {
                let mut u = vec![0x30, 0x39, 0x12, 0xb6, 0, 0, 0, 0];
                u.extend_from_slice(&[0x0c, 0, 0, 0x04, 0, 0, 0x64, 0]);
                u.extend_from_slice(nsh);
                let len = u.len() as u16;
                u[4..6].copy_from_slice(&len.to_be_bytes());
                UdpPacket::new_unchecked(&mut u[..]).fill_checksum(&src, &dst);
                ip_frame(MAC0, peer, src, dst, IpProtocol::Udp, &u)
            }
        }
    }

    /// The NSH (and payload) a forwarded frame carries, as the next hop
    /// would take it off the wire.
    fn unwrap_out(f: &Forward) -> Vec<u8> {
        let me = PortView {
            mac: match f.hop {
                L2Hop::Mac(m) => m,
                L2Hop::Ip(_) => EthernetAddress([0; 6]),
            },
            addrs: vec![
                cidr("10.0.2.10/24"),
                cidr("10.0.2.31/24"),
                cidr("10.9.9.9/8"),
                cidr("fd00:2::20/64"),
                cidr("fd00:2::30/64"),
            ],
            gateways: vec![],
        };
        match decap(&me, &f.frame) {
            Ok(Some((enc, b))) => {
                assert_eq!(enc, f.to);
                b.to_vec()
            }
            other => panic!("the next hop cannot take it: {other:?}"),
        }
    }

    #[test]
    fn golden_vxlan_gpe_in_and_out() {
        let f = forwarded(&GOLDEN_IN);
        assert_eq!(f.port, 1);
        assert_eq!(
            f.hop,
            L2Hop::Ip(IpAddress::Ipv4(Ipv4Addr::new(10, 0, 2, 10)))
        );
        assert_eq!((f.from, f.to), (Encap::VxlanGpe, Encap::VxlanGpe));
        assert_eq!(f.frame, GOLDEN_OUT);
    }

    #[test]
    fn golden_ethernet_in_gre_over_ipv6_out() {
        let f = forwarded(&GOLDEN2_IN);
        assert_eq!(f.port, 1);
        assert_eq!(
            f.hop,
            L2Hop::Ip(IpAddress::Ipv6("fd00:2::20".parse().unwrap()))
        );
        assert_eq!((f.from, f.to), (Encap::Ethernet, Encap::Gre));
        assert_eq!(f.frame, GOLDEN2_OUT);
    }

    #[test]
    fn every_te_in_and_out() {
        let payload = b"\x45 the inner packet";
        let rows = [
            (300, Encap::Ethernet, L2Hop::Mac(SF_MAC)),
            (
                301,
                Encap::Ethernet,
                L2Hop::Ip(IpAddress::Ipv4(Ipv4Addr::new(10, 0, 2, 30))),
            ),
            (
                302,
                Encap::VxlanGpe,
                L2Hop::Ip(IpAddress::Ipv6("fd00:2::30".parse().unwrap())),
            ),
            (
                303,
                Encap::Gre,
                L2Hop::Ip(IpAddress::Ipv4(Ipv4Addr::new(10, 0, 2, 31))),
            ),
            // Off-link: through the gateway, addressed to the next hop.
            (
                500,
                Encap::VxlanGpe,
                L2Hop::Ip(IpAddress::Ipv4(Ipv4Addr::new(10, 0, 2, 254))),
            ),
        ];
        for (spi_, to, hop) in rows {
            let nsh = nsh_bytes(spi_, 9, 10, payload);
            for from in [Encap::Ethernet, Encap::Gre, Encap::VxlanGpe] {
                for v6 in [false, true] {
                    let f = forwarded(&wrap(from, v6, &nsh));
                    assert_eq!((f.from, f.to, f.hop, f.port), (from, to, hop, 1), "{spi_}");
                    assert_eq!(&f.frame[6..12], &MAC1.0);
                    let out = unwrap_out(&f);
                    let p = nsh::Packet::new_checked(&out[..]).unwrap();
                    assert_eq!(p.ttl().value(), 9);
                    assert_eq!((p.spi(), p.si()), (spi(spi_), 9));
                    assert_eq!(p.payload(), payload);
                    // Only the TTL changed.
                    let mut want = nsh.clone();
                    nsh::Packet::new_unchecked(&mut want[..]).set_ttl(nsh::Ttl::new(9).unwrap());
                    assert_eq!(out, want);
                }
            }
        }
    }

    #[test]
    fn ttl_one_or_zero_is_dropped_two_goes_out_as_one() {
        for ttl in [0, 1] {
            let frame = wrap(Encap::VxlanGpe, false, &nsh_bytes(100, 255, ttl, b"x"));
            assert_eq!(run(&frame), Outcome::Drop(DropReason::Ttl));
            // Before the lookup: an unknown path with TTL 1 is a TTL drop too.
            let frame = wrap(Encap::Gre, true, &nsh_bytes(7777, 1, ttl, b"x"));
            assert_eq!(run(&frame), Outcome::Drop(DropReason::Ttl));
        }
        let f = forwarded(&wrap(Encap::Ethernet, false, &nsh_bytes(100, 255, 2, b"x")));
        assert_eq!(
            nsh::Packet::new_checked(&unwrap_out(&f)[..])
                .unwrap()
                .ttl()
                .value(),
            1
        );
    }

    #[test]
    fn unknown_spi_or_si_and_non_classic_rows() {
        for (spi_, si) in [(101, 255), (100, 254), (0, 0)] {
            let frame = wrap(Encap::VxlanGpe, false, &nsh_bytes(spi_, si, 63, b"x"));
            assert_eq!(
                run(&frame),
                Outcome::Drop(DropReason::NoRoute),
                "{spi_} {si}"
            );
        }
        for spi_ in [400, 401] {
            let frame = wrap(Encap::Gre, false, &nsh_bytes(spi_, 9, 63, b"x"));
            assert_eq!(run(&frame), Outcome::Drop(DropReason::NotClassic));
        }
    }

    #[test]
    fn not_ours_is_left_alone() {
        // Another address of the segment, another UDP port, plain TCP, ARP.
        let mut f = GOLDEN_IN;
        f[33] = 0x02; // 10.0.1.2
        assert_eq!(run(&f), Outcome::NotClassic);
        let mut f = GOLDEN_IN;
        f[37] = 0xb5; // port 4789
        assert_eq!(run(&f), Outcome::NotClassic);
        let mut f = GOLDEN_IN;
        f[23] = 6;
        assert_eq!(run(&f), Outcome::NotClassic);
        let mut f = GOLDEN_IN;
        f[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(run(&f), Outcome::NotClassic);
        // On a port we do not know.
        assert_eq!(
            process(&table(), &ports(), 1500, 9, &GOLDEN_IN),
            Outcome::NotClassic
        );
        // NSH over Ethernet to another MAC (a flooded frame).
        let mut f = GOLDEN2_IN;
        f[5] = 0x77;
        assert_eq!(run(&f), Outcome::Drop(DropReason::NotForUs));
    }

    #[test]
    fn malformed_is_dropped_by_reason() {
        use DropReason::Malformed;
        let cases: [(usize, u8, &str); 9] = [
            (24, 0x99, "ipv4_checksum"),
            (41, 0x01, "udp_checksum"),
            (42, 0x08, "vxlan_gpe"),         // P clear
            (45, 0x01, "vxlan_gpe_not_nsh"), // next protocol IPv4 (checksum fixed below)
            (50, 0x41, "nsh"),               // NSH version 1
            (51, 0x05, "nsh"),               // MD type 1 with length 5
            (52, 0x00, "nsh_md_type"),       // MD type 0
            (20, 0x20, "fragment"),          // MF
            (21, 0x01, "fragment"),          // offset 1 (DF stays)
        ];
        for (at, v, why) in cases {
            let mut f = GOLDEN_IN;
            f[at] = if at == 20 { f[at] | v } else { v };
            if (42..).contains(&at) {
                refill_udp(&mut f);
            }
            if at == 20 || at == 21 {
                refill_ipv4(&mut f);
            }
            assert_eq!(
                run(&f),
                Outcome::Drop(Malformed(why)),
                "octet {at} = {v:#x}"
            );
        }
        // GRE: a bad checksum, another protocol type, RFC 1701 bits.
        let nsh = nsh_bytes(303, 9, 63, b"x");
        let mut g = vec![0x80, 0, 0x89, 0x4f, 0, 0, 0, 0];
        g.extend_from_slice(&nsh);
        g[4] = 0x12;
        let src = IpAddress::Ipv4(Ipv4Addr::new(10, 0, 1, 10));
        let dst = IpAddress::Ipv4(Ipv4Addr::new(10, 0, 1, 1));
        let f = ip_frame(MAC0, MAC1, src, dst, IpProtocol::Unknown(47), &g);
        assert_eq!(run(&f), Outcome::Drop(Malformed("gre")));
        let mut g = vec![0, 0, 0x08, 0x00];
        g.extend_from_slice(&nsh);
        let f = ip_frame(MAC0, MAC1, src, dst, IpProtocol::Unknown(47), &g);
        assert_eq!(run(&f), Outcome::Drop(Malformed("gre_not_nsh")));
        g[..4].copy_from_slice(&[0x20, 0, 0x89, 0x4f]);
        let f = ip_frame(MAC0, MAC1, src, dst, IpProtocol::Unknown(47), &g);
        assert_eq!(run(&f), Outcome::Drop(Malformed("gre")));
        // IPv6 with a zero UDP checksum (RFC 8200 §8.1).
        let mut f = wrap(Encap::VxlanGpe, true, &nsh);
        f[14 + 40 + 6..14 + 40 + 8].fill(0);
        assert_eq!(run(&f), Outcome::Drop(Malformed("udp_checksum")));
    }

    fn refill_udp(f: &mut [u8]) {
        let src = IpAddress::Ipv4(Ipv4Addr::new(10, 0, 1, 10));
        let dst = IpAddress::Ipv4(Ipv4Addr::new(10, 0, 1, 1));
        UdpPacket::new_unchecked(&mut f[34..]).fill_checksum(&src, &dst);
    }

    fn refill_ipv4(f: &mut [u8]) {
        Ipv4Packet::new_unchecked(&mut f[14..]).fill_checksum();
    }

    #[test]
    fn too_big_and_no_egress() {
        let frame = wrap(
            Encap::Ethernet,
            false,
            &nsh_bytes(100, 255, 63, &[0; 1500 - 24]),
        );
        // 1476 octets of NSH + 8 + 8 + 20: over 1500.
        assert_eq!(run(&frame), Outcome::Drop(DropReason::TooBig));
        let frame = wrap(
            Encap::Ethernet,
            false,
            &nsh_bytes(303, 9, 63, &[0; 1500 - 24 - 24]),
        );
        assert!(matches!(run(&frame), Outcome::Forward(_)));
        // No port toward the next hop: only port 0, without a gateway.
        let one = &ports()[..1];
        let frame = wrap(Encap::Gre, false, &nsh_bytes(100, 255, 63, b"x"));
        assert_eq!(
            process(&table(), one, 1500, 0, &frame),
            Outcome::Drop(DropReason::NoEgress)
        );
        // A MAC row whose port does not exist.
        let frame = wrap(Encap::Gre, false, &nsh_bytes(300, 9, 63, b"x"));
        assert_eq!(
            process(&table(), one, 1500, 0, &frame),
            Outcome::Drop(DropReason::NoEgress)
        );
    }

    #[test]
    fn truncated_input_never_panics_nor_forwards_a_broken_header() {
        for full in [&GOLDEN_IN[..], &GOLDEN2_IN[..]] {
            for cut in 0..full.len() {
                let out = run(&full[..cut]);
                // Ethernet has no length field: a cut payload still goes;
                // a cut NSH header never does.
                if cut < full.len() - 9 {
                    assert!(!matches!(out, Outcome::Forward(_)), "cut {cut}: {out:?}");
                }
            }
        }
        for f in [
            wrap(Encap::Gre, true, &nsh_bytes(100, 255, 63, b"x")),
            wrap(Encap::VxlanGpe, true, &nsh_bytes(100, 255, 63, b"x")),
        ] {
            for cut in 0..f.len() {
                assert!(!matches!(run(&f[..cut]), Outcome::Forward(_)), "cut {cut}");
            }
        }
    }

    #[test]
    fn rows_are_checked_key_by_key() {
        let bad = |nh: &str, te: &str, port: Option<usize>, vni: Option<u32>| {
            Row::new(nh, te, port, vni).unwrap_err().key
        };
        assert_eq!(bad("10.0.0.1", "vxlan", None, None), "te");
        assert_eq!(bad("not a name!", "gre", None, None), "next_hop");
        assert_eq!(
            bad("ff:ff:ff:ff:ff:ff", "ethernet", Some(0), None),
            "next_hop"
        );
        assert_eq!(bad("02:00:00:00:00:01", "gre", Some(0), None), "te");
        assert_eq!(bad("02:00:00:00:00:01", "ethernet", None, None), "port");
        assert_eq!(bad("www.example.com", "vxlan-gpe", None, None), "te");
        assert_eq!(bad("10.0.0.1", "http", None, None), "te");
        assert_eq!(bad("10.0.0.1", "none", None, None), "te");
        assert_eq!(bad("end", "none", Some(1), None), "port");
        assert_eq!(bad("10.0.0.1", "gre", None, Some(1)), "vni");
        assert_eq!(bad("10.0.0.1", "vxlan-gpe", None, Some(1 << 24)), "vni");
        // Keywords first, then addresses, MACs, names.
        assert_eq!(NextHop::parse("end"), Ok(NextHop::End));
        assert_eq!(NextHop::parse("http-service"), Ok(NextHop::HttpService));
        assert_eq!(
            NextHop::parse("fd00::1"),
            Ok(NextHop::Ipv6("fd00::1".parse().unwrap()))
        );
        assert_eq!(
            NextHop::parse("02-00-00-00-00-5f"),
            Ok(NextHop::Mac(SF_MAC))
        );
        let NextHop::Name { fqdn, path } = NextHop::parse("WWW.Example.com/a/b").unwrap() else {
            panic!("not a name");
        };
        assert_eq!(
            (fqdn.as_str(), path.as_deref()),
            ("www.example.com", Some("/a/b"))
        );
        assert_eq!(
            row("02:00:00:00:00:5f", "ethernet", Some(1), None)
                .next_hop
                .to_string(),
            "02-00-00-00-00-5f"
        );
    }

    #[test]
    fn ingress_sends_queues_and_counts() {
        let mut c = Classic::new(
            table(),
            ClassicConfig {
                max_pending: 1,
                ..ClassicConfig::default()
            },
        );
        c.set_ports(ports());
        let mut stats = Counters::default();
        let mut out = Outbox::default();
        let mut cx = FrameContext {
            now: Instant::from_millis(0),
            stats: &mut stats,
            out: &mut out,
        };
        let consumed = Some(Verdict::Consume);
        // A MAC next hop: out at once.
        let f = wrap(Encap::Gre, false, &nsh_bytes(300, 9, 63, b"x"));
        assert_eq!(c.ingress(&mut cx, 0, &f), consumed);
        // An IP next hop: waits for poll; one fits, the next is refused.
        assert_eq!(c.ingress(&mut cx, 0, &GOLDEN_IN), consumed);
        assert_eq!(c.ingress(&mut cx, 0, &GOLDEN_IN), consumed);
        assert_eq!(c.poll_at(), Some(Instant::from_millis(0)));
        // Drops are consumed and counted; other frames are not ours.
        let f = wrap(Encap::VxlanGpe, false, &nsh_bytes(100, 255, 1, b"x"));
        assert_eq!(c.ingress(&mut cx, 0, &f), consumed);
        let f = wrap(Encap::VxlanGpe, false, &nsh_bytes(5, 5, 9, b"x"));
        assert_eq!(c.ingress(&mut cx, 0, &f), consumed);
        let mut f = GOLDEN_IN;
        f[23] = 6;
        assert_eq!(c.ingress(&mut cx, 0, &f), None);
        let sent: Vec<_> = out.drain().collect();
        assert_eq!(sent.len(), 1);
        assert_eq!((sent[0].0, sent[0].1), (1, Direction::ToWire));
        assert_eq!(&sent[0].2[..12], &[SF_MAC.0, MAC1.0].concat()[..]);
        for (k, v) in [
            ("nsff.classic_forwarded", 1),
            ("nsff.classic_out_ethernet", 1),
            ("nsff.classic_in_gre", 1),
            ("nsff.classic_in_vxlan_gpe", 2),
            ("drop.nsff.classic_pending_full", 1),
            ("drop.nsff.classic_ttl", 1),
            ("drop.nsff.classic_no_route", 1),
        ] {
            assert_eq!(stats.get(k), v, "{k}");
        }
        let v = c.control(&stats);
        assert_eq!(v["waiting"], 1);
        assert_eq!(v["rows"].as_array().unwrap().len(), 9);
        assert_eq!(v["rows"][0]["vni"], 7);
        assert_eq!(v["counters"]["drop.nsff.classic_ttl"], 1);
    }

    proptest! {
        /// Whatever goes in (any TE, IPv4 or IPv6, any MD, any TTL 2..=63,
        /// any payload), the next hop takes the same NSH off the wire with
        /// the TTL one less and nothing else changed; twice through, two less.
        #[test]
        fn round_trip_through_two_sffs(
            from in prop_oneof![Just(Encap::Ethernet), Just(Encap::Gre), Just(Encap::VxlanGpe)],
            v6 in any::<bool>(),
            row_spi in prop_oneof![Just(300_u32), Just(301), Just(302), Just(303)],
            ttl in 3_u8..=63,
            md in prop_oneof![Just(1_u8), Just(2), Just(0xf)],
            meta in proptest::collection::vec(any::<u8>(), 0..8),
            payload in proptest::collection::vec(any::<u8>(), 0..200),
        ) {
            let words: Vec<u8> = meta.iter().copied().chain([0; 4]).take(meta.len().div_ceil(4) * 4).collect();
            let headers = [nsh::ContextHeader::new(0x0102, 3, &meta).unwrap()];
            let metadata = match md {
                1 => nsh::Metadata::Md1([7; 16]),
                2 => nsh::Metadata::Md2(nsh::ContextHeaders::new(&headers).unwrap()),
                t => nsh::Metadata::Unknown(nsh::UnknownMetadata::new(t, &words).unwrap()),
            };
            let repr = nsh::Repr {
                oam: md == 2,
                ttl: nsh::Ttl::new(ttl).unwrap(),
                next_protocol: nsh::NextProtocol::Ethernet,
                spi: spi(row_spi),
                si: 9,
                metadata,
            };
            let mut nsh = vec![0; repr.buffer_len()];
            repr.emit(&mut nsh::Packet::new_unchecked(&mut nsh[..]));
            nsh.extend_from_slice(&payload);
            let f = forwarded(&wrap(from, v6, &nsh));
            let out = unwrap_out(&f);
            let mut want = nsh.clone();
            nsh::Packet::new_unchecked(&mut want[..]).set_ttl(nsh::Ttl::new(ttl - 1).unwrap());
            prop_assert_eq!(&out, &want);
            // A second SFF (the same table) takes the output as its input.
            let again = forwarded(&wrap(f.to, v6, &out));
            nsh::Packet::new_unchecked(&mut want[..]).set_ttl(nsh::Ttl::new(ttl - 2).unwrap());
            prop_assert_eq!(unwrap_out(&again), want);
        }

        #[test]
        fn random_frames_never_panic(
            bytes in proptest::collection::vec(any::<u8>(), 0..160),
            base in 0_usize..4,
            at in any::<usize>(),
        ) {
            // Random bytes, and valid frames with random bytes spliced in.
            let _ = run(&bytes);
            let valid = [
                GOLDEN_IN.to_vec(),
                GOLDEN2_IN.to_vec(),
                wrap(Encap::Gre, true, &nsh_bytes(100, 255, 63, b"x")),
                wrap(Encap::VxlanGpe, true, &nsh_bytes(302, 9, 63, b"xy")),
            ];
            let mut f = valid[base].clone();
            let at = at % f.len();
            let end = (at + bytes.len()).min(f.len());
            f[at..end].copy_from_slice(&bytes[..end - at]);
            let _ = run(&f);
            f.truncate(at);
            let _ = run(&f);
        }
    }
}
