//! Transparent interception on the client port (RFC 8677 §4/§5: the nSFF
//! terminates HTTP "transparent on 80/443").
//!
//! A client whose route toward some destination goes through the nSFF (its
//! default gateway is the nSFF, say) connects to *any* address on
//! `http_port` or `https_port`; the nSFF terminates the connection as that
//! address and routes the request by name (`Host`, SNI) exactly as it does
//! for connections to its own addresses.
//!
//! ```text
//!  client ──SYN [fd00:99::7]:80──▶ client port (any_ip) ─▶ Interceptor::filter
//!                                        │ ours / our groups ────────▶ smoltcp (as before)
//!                                        │ foreign, in scope, TCP :80/:443 ─▶ smoltcp: the
//!                                        │     listener (addr None) answers as fd00:99::7
//!                                        └ anything else foreign ──▶ dropped, counted
//! ```
//!
//! smoltcp 0.14's `any_ip` is all or nothing: with it set,
//! `InterfaceInner::has_ip_addr` is true for *every* address, so the
//! interface would accept any unicast packet (answer pings and send TCP
//! resets for any address, ICMP port unreachables for UDP), answer ARP for
//! any IPv4 address and neighbour solicitations for any target. (The route
//! rule its doc describes, a route whose gateway is one of our addresses,
//! is not what decides: both branches of that check reject, and with
//! `any_ip` the check is never reached.) The nSFF is not a router and must
//! not claim its neighbours' addresses, so [`Interceptor::filter`] runs on
//! every frame of the client port before smoltcp sees it and lets through
//! only what smoltcp would have accepted without `any_ip`, plus TCP to the
//! intercepted ports of the intercepted destinations.
//!
//! ICMP echo to an intercepted address is **not** answered (dropped as
//! `nsff.transparent_not_tcp`): the nSFF stands in for a destination's web
//! ports only, and a ping that answered would claim the host is up.

use std::fmt;
use std::net::IpAddr;

use serde::de::{self, SeqAccess, Visitor};
use serde::ser::SerializeSeq;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use smoltcp::wire::{
    ArpPacket, ArpRepr, EthernetAddress, EthernetFrame, EthernetProtocol, Icmpv6Message,
    Icmpv6Packet, IpAddress, IpCidr, IpProtocol, Ipv4Address, Ipv4Cidr, Ipv4Packet, Ipv6Address,
    Ipv6Cidr, Ipv6Packet, TcpPacket, IPV6_LINK_LOCAL_ALL_NODES,
};

/// The `transparent` key of `[nsff]`: which destinations that are not the
/// nSFF's own the client port intercepts.
///
/// In a node file: `transparent = false` (the default: only connections
/// to our own addresses), `transparent = true` (any destination) or
/// `transparent = ["fd00:99::/32", "10.99.0.0/16"]` (those prefixes).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum TransparentConfig {
    /// No interception.
    #[default]
    Off,
    /// Every destination.
    Any,
    /// Destinations in these prefixes (`ADDR/LEN`, as written).
    Prefixes(Vec<String>),
}

/// Which destinations are intercepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Every destination.
    Any,
    /// Destinations in these prefixes (non-empty).
    Prefixes(Vec<IpCidr>),
}

impl Scope {
    /// Whether `addr` is intercepted.
    pub fn contains(&self, addr: IpAddress) -> bool {
        match self {
            Self::Any => true,
            Self::Prefixes(p) => p.iter().any(|c| c.contains_addr(&addr)),
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Any => f.write_str("any"),
            Self::Prefixes(p) => {
                for (i, c) in p.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{c}")?;
                }
                Ok(())
            }
        }
    }
}

impl TransparentConfig {
    /// The parsed scope, `None` when off; the first bad prefix is named.
    pub fn scope(&self) -> Result<Option<Scope>, String> {
        let list = match self {
            Self::Off => return Ok(None),
            Self::Any => return Ok(Some(Scope::Any)),
            Self::Prefixes(list) => list,
        };
        if list.is_empty() {
            return Err("an empty list intercepts nothing (write `false` to turn it off)".into());
        }
        list.iter()
            .map(|s| parse_cidr(s))
            .collect::<Result<Vec<_>, _>>()
            .map(|p| Some(Scope::Prefixes(p)))
    }
}

/// `ADDR/LEN` with no host bits set.
fn parse_cidr(s: &str) -> Result<IpCidr, String> {
    let bad = || format!("{s:?} is not a prefix (ADDR/LEN, e.g. \"10.99.0.0/16\")");
    let (a, len) = s.split_once('/').ok_or_else(bad)?;
    let len: u8 = len.parse().map_err(|_| bad())?;
    let host_bits =
        |net: String| format!("{s:?} has host bits set (the prefix is \"{net}/{len}\")");
    match a.parse::<IpAddr>().map_err(|_| bad())? {
        IpAddr::V4(v4) if len <= 32 => {
            let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            let net = Ipv4Address::from(u32::from(v4) & mask);
            if net != v4 {
                return Err(host_bits(net.to_string()));
            }
            Ok(IpCidr::Ipv4(Ipv4Cidr::new(v4, len)))
        }
        IpAddr::V6(v6) if len <= 128 => {
            let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            let net = Ipv6Address::from(u128::from(v6) & mask);
            if net != v6 {
                return Err(host_bits(net.to_string()));
            }
            Ok(IpCidr::Ipv6(Ipv6Cidr::new(v6, len)))
        }
        _ => Err(bad()),
    }
}

/// Unicast: not multicast, broadcast or unspecified (smoltcp's own test
/// is crate-private).
fn is_unicast(a: IpAddress) -> bool {
    match a {
        IpAddress::Ipv4(a) => !(a.is_broadcast() || a.is_multicast() || a.is_unspecified()),
        IpAddress::Ipv6(a) => !(a.is_multicast() || a.is_unspecified()),
    }
}

/// `ff02::1:ffXX:XXXX`, the solicited-node group of `a` (RFC 4291 §2.7.1).
fn solicited_node(a: Ipv6Address) -> Ipv6Address {
    let o = a.octets();
    let mut g = [0u8; 16];
    g[..2].copy_from_slice(&[0xff, 0x02]);
    g[11..13].copy_from_slice(&[0x01, 0xff]);
    g[13..].copy_from_slice(&o[13..]);
    Ipv6Address::from(g)
}

/// Skip IPv6 extension headers (Hop-by-Hop, Routing, Destination
/// Options; at most 8) to the upper-layer protocol and its octets. A
/// Fragment header ends the walk (only a first fragment would show the
/// upper layer, and smoltcp does not reassemble). `None`: a header runs
/// past the packet, or too many.
fn upper_layer(mut next: IpProtocol, mut rest: &[u8]) -> Option<(IpProtocol, &[u8])> {
    for _ in 0..8 {
        match next {
            IpProtocol::HopByHop | IpProtocol::Ipv6Route | IpProtocol::Ipv6Opts => {
                let len = (usize::from(*rest.get(1)?) + 1) * 8;
                next = IpProtocol::from(*rest.first()?);
                rest = rest.get(len..)?;
            }
            _ => return Some((next, rest)),
        }
    }
    None
}

impl Serialize for TransparentConfig {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Off => s.serialize_bool(false),
            Self::Any => s.serialize_bool(true),
            Self::Prefixes(list) => {
                let mut seq = s.serialize_seq(Some(list.len()))?;
                for p in list {
                    seq.serialize_element(p)?;
                }
                seq.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for TransparentConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = TransparentConfig;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("true, false or a list of prefixes like [\"10.99.0.0/16\"]")
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
                Ok(if v {
                    TransparentConfig::Any
                } else {
                    TransparentConfig::Off
                })
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut list = Vec::new();
                while let Some(s) = seq.next_element::<String>()? {
                    list.push(s);
                }
                Ok(TransparentConfig::Prefixes(list))
            }
        }
        d.deserialize_any(V)
    }
}

/// What [`Interceptor::filter`] decided about a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Filter {
    /// Not for a foreign address (ours, our groups, broadcast, ARP or NDP
    /// about us): smoltcp sees it as it would without interception.
    Ours,
    /// TCP to an intercepted port of an intercepted foreign destination:
    /// smoltcp sees it and a listener answers as that destination.
    Intercept,
    /// Dropped before smoltcp; the reason is a `drop.<reason>` counter.
    Drop(&'static str),
}

/// The client port's frame filter while interception is on (see the
/// module doc). Built from the config, then [`Self::bind`] to the port's
/// MAC and addresses before the first frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interceptor {
    scope: Scope,
    ports: Vec<u16>,
    mac: EthernetAddress,
    own: Vec<IpCidr>,
}

impl Interceptor {
    /// Intercept TCP to `ports` (the non-zero ones) of destinations in
    /// `scope`.
    pub fn new(scope: Scope, ports: &[u16]) -> Self {
        Self {
            scope,
            ports: ports.iter().copied().filter(|&p| p != 0).collect(),
            mac: EthernetAddress::BROADCAST,
            own: Vec::new(),
        }
    }

    /// The port's MAC and addresses (with prefix lengths: IPv4 subnet
    /// broadcasts stay ours).
    pub fn bind(&mut self, mac: EthernetAddress, own: &[IpCidr]) {
        self.mac = mac;
        self.own = own.to_vec();
    }

    /// Which destinations are intercepted.
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// The intercepted TCP ports.
    pub fn ports(&self) -> &[u16] {
        &self.ports
    }

    /// Whether `addr` is one of the port's own addresses.
    pub fn is_own(&self, addr: IpAddress) -> bool {
        self.own.iter().any(|c| c.address() == addr)
    }

    /// Decide about one received frame (Ethernet) of the client port.
    /// Never panics, whatever the bytes.
    pub fn filter(&self, frame: &[u8]) -> Filter {
        let Ok(eth) = EthernetFrame::new_checked(frame) else {
            return Filter::Drop("nsff.transparent_malformed");
        };
        match eth.ethertype() {
            EthernetProtocol::Arp => self.arp(eth.payload()),
            EthernetProtocol::Ipv4 => self.ipv4(eth.dst_addr(), eth.payload()),
            EthernetProtocol::Ipv6 => self.ipv6(eth.dst_addr(), eth.payload()),
            // smoltcp ignores the rest, as before.
            _ => Filter::Ours,
        }
    }

    fn arp(&self, payload: &[u8]) -> Filter {
        let repr = ArpPacket::new_checked(payload).and_then(|p| ArpRepr::parse(&p));
        match repr {
            Ok(ArpRepr::EthernetIpv4 {
                target_protocol_addr,
                ..
            }) if self.is_own(target_protocol_addr.into()) => Filter::Ours,
            // With any_ip smoltcp would answer for every address.
            Ok(_) => Filter::Drop("nsff.transparent_arp_not_ours"),
            Err(_) => Filter::Drop("nsff.transparent_malformed"),
        }
    }

    fn ipv4(&self, dst_mac: EthernetAddress, payload: &[u8]) -> Filter {
        let Ok(ip) = Ipv4Packet::new_checked(payload) else {
            return Filter::Drop("nsff.transparent_malformed");
        };
        let dst = ip.dst_addr();
        if self.is_own(dst.into()) || self.is_subnet_broadcast(dst) {
            return Filter::Ours;
        }
        if !is_unicast(dst.into()) {
            return self.group(dst.into());
        }
        if ip.more_frags() || ip.frag_offset() != 0 {
            // Only a first fragment holds the ports.
            return Filter::Drop("nsff.transparent_fragment");
        }
        self.foreign(dst_mac, dst.into(), ip.next_header(), ip.payload())
    }

    fn ipv6(&self, dst_mac: EthernetAddress, payload: &[u8]) -> Filter {
        let Ok(ip) = Ipv6Packet::new_checked(payload) else {
            return Filter::Drop("nsff.transparent_malformed");
        };
        // smoltcp answers a solicitation sent to any of our (solicited-
        // node or unicast) addresses, and with any_ip for every target. It
        // reads past a Hop-by-Hop header to find one, so look past
        // extension headers too.
        let Some((upper, l4)) = upper_layer(ip.next_header(), ip.payload()) else {
            return Filter::Drop("nsff.transparent_malformed");
        };
        let dst = ip.dst_addr();
        if upper == IpProtocol::Icmpv6 {
            if let Ok(icmp) = Icmpv6Packet::new_checked(l4) {
                if icmp.msg_type() == Icmpv6Message::NeighborSolicit {
                    let target = l4.get(8..24).and_then(|t| <[u8; 16]>::try_from(t).ok());
                    return match target {
                        Some(t) if self.is_own(Ipv6Address::from(t).into()) => {
                            self.ours_or_group(dst.into())
                        }
                        Some(_) => Filter::Drop("nsff.transparent_ns_not_ours"),
                        None => Filter::Drop("nsff.transparent_malformed"),
                    };
                }
            }
        }
        if self.is_own(dst.into()) || !is_unicast(dst.into()) {
            return self.ours_or_group(dst.into());
        }
        self.foreign(dst_mac, dst.into(), ip.next_header(), ip.payload())
    }

    /// A packet to a unicast address that is not ours.
    fn foreign(
        &self,
        dst_mac: EthernetAddress,
        dst: IpAddress,
        proto: IpProtocol,
        l4: &[u8],
    ) -> Filter {
        if dst_mac != self.mac {
            // Flooded or broadcast: not routed to us.
            return Filter::Drop("nsff.transparent_not_our_mac");
        }
        if !self.scope.contains(dst) {
            return Filter::Drop("nsff.transparent_not_intercepted");
        }
        if proto != IpProtocol::Tcp {
            return Filter::Drop("nsff.transparent_not_tcp");
        }
        let Ok(tcp) = TcpPacket::new_checked(l4) else {
            return Filter::Drop("nsff.transparent_malformed");
        };
        if !self.ports.contains(&tcp.dst_port()) {
            return Filter::Drop("nsff.transparent_port");
        }
        Filter::Intercept
    }

    /// Ours for our own address; else [`Self::group`].
    fn ours_or_group(&self, dst: IpAddress) -> Filter {
        if self.is_own(dst) {
            Filter::Ours
        } else {
            self.group(dst)
        }
    }

    /// A packet to a multicast (or the broadcast) address: ours only for
    /// the groups smoltcp takes without `any_ip` (the node joins no
    /// others): 255.255.255.255, all-systems 224.0.0.1, all-nodes ff02::1
    /// and the solicited-node groups of our IPv6 addresses. With `any_ip`
    /// smoltcp would take *every* group, answer a TCP SYN to one from the
    /// group's address and send ICMP errors for the rest.
    fn group(&self, dst: IpAddress) -> Filter {
        let ours = match dst {
            IpAddress::Ipv4(a) => a.is_broadcast() || a == Ipv4Address::new(224, 0, 0, 1),
            IpAddress::Ipv6(a) => {
                a == IPV6_LINK_LOCAL_ALL_NODES
                    || self.own.iter().any(|c| match c.address() {
                        IpAddress::Ipv6(o) => a == solicited_node(o),
                        IpAddress::Ipv4(_) => false,
                    })
            }
        };
        if ours {
            Filter::Ours
        } else {
            Filter::Drop("nsff.transparent_group_not_ours")
        }
    }

    fn is_subnet_broadcast(&self, dst: Ipv4Address) -> bool {
        self.own.iter().any(|c| match c {
            IpCidr::Ipv4(c) => c.broadcast() == Some(dst),
            IpCidr::Ipv6(_) => false,
        })
    }
}

#[cfg(test)]
mod tests {
    use smoltcp::phy::ChecksumCapabilities;
    use smoltcp::wire::{
        ArpOperation, EthernetRepr, Icmpv6Repr, IpRepr, Ipv4Repr, Ipv6Repr, NdiscRepr, TcpControl,
        TcpRepr, TcpSeqNumber,
    };

    use super::*;

    const OUR_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x01]);
    const CLIENT_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x10]);
    const CLIENT4: Ipv4Address = Ipv4Address::new(10, 0, 1, 10);
    const CLIENT6: Ipv6Address = Ipv6Address::new(0xfd00, 1, 0, 0, 0, 0, 0, 0x10);

    fn interceptor(scope: Scope) -> Interceptor {
        let mut i = Interceptor::new(scope, &[80, 0, 443]);
        i.bind(
            OUR_MAC,
            &[
                IpCidr::new(Ipv4Address::new(10, 0, 1, 1).into(), 24),
                IpCidr::new(Ipv6Address::new(0xfd00, 1, 0, 0, 0, 0, 0, 1).into(), 64),
            ],
        );
        i
    }

    fn prefixes() -> Scope {
        TransparentConfig::Prefixes(vec!["fd00:99::/32".into(), "10.99.0.0/16".into()])
            .scope()
            .unwrap()
            .unwrap()
    }

    fn ethernet(dst: EthernetAddress, ethertype: EthernetProtocol, payload: &[u8]) -> Vec<u8> {
        let repr = EthernetRepr {
            src_addr: CLIENT_MAC,
            dst_addr: dst,
            ethertype,
        };
        let mut f = vec![0xa5; repr.buffer_len() + payload.len()];
        let mut eth = EthernetFrame::new_unchecked(&mut f);
        repr.emit(&mut eth);
        eth.payload_mut().copy_from_slice(payload);
        f
    }

    /// A TCP SYN from the client to `dst:port`, in an Ethernet frame to `mac`.
    fn syn(mac: EthernetAddress, dst: IpAddress, port: u16) -> Vec<u8> {
        let tcp = TcpRepr {
            src_port: 40000,
            dst_port: port,
            control: TcpControl::Syn,
            seq_number: TcpSeqNumber(1),
            ack_number: None,
            window_len: 1000,
            window_scale: None,
            max_seg_size: None,
            sack_permitted: false,
            sack_ranges: [None; 3],
            timestamp: None,
            payload: &[],
        };
        let ip = match dst {
            IpAddress::Ipv4(d) => IpRepr::Ipv4(Ipv4Repr {
                src_addr: CLIENT4,
                dst_addr: d,
                next_header: IpProtocol::Tcp,
                payload_len: tcp.buffer_len(),
                hop_limit: 64,
            }),
            IpAddress::Ipv6(d) => IpRepr::Ipv6(Ipv6Repr {
                src_addr: CLIENT6,
                dst_addr: d,
                next_header: IpProtocol::Tcp,
                payload_len: tcp.buffer_len(),
                hop_limit: 64,
            }),
        };
        let mut buf = vec![0; ip.buffer_len()];
        let caps = ChecksumCapabilities::default();
        ip.emit(&mut buf[..], &caps);
        let hl = ip.header_len();
        tcp.emit(
            &mut TcpPacket::new_unchecked(&mut buf[hl..]),
            &ip.src_addr(),
            &ip.dst_addr(),
            &caps,
        );
        let ethertype = match dst {
            IpAddress::Ipv4(_) => EthernetProtocol::Ipv4,
            IpAddress::Ipv6(_) => EthernetProtocol::Ipv6,
        };
        ethernet(mac, ethertype, &buf)
    }

    fn icmpv6(dst: Ipv6Address, repr: &Icmpv6Repr<'_>) -> Vec<u8> {
        let ip = Ipv6Repr {
            src_addr: CLIENT6,
            dst_addr: dst,
            next_header: IpProtocol::Icmpv6,
            payload_len: repr.buffer_len(),
            hop_limit: 255,
        };
        let mut buf = vec![0; ip.buffer_len() + repr.buffer_len()];
        ip.emit(&mut Ipv6Packet::new_unchecked(&mut buf[..]));
        repr.emit(
            &CLIENT6,
            &dst,
            &mut Icmpv6Packet::new_unchecked(&mut buf[40..]),
            &ChecksumCapabilities::default(),
        );
        ethernet(OUR_MAC, EthernetProtocol::Ipv6, &buf)
    }

    fn arp_request(target: Ipv4Address) -> Vec<u8> {
        let repr = ArpRepr::EthernetIpv4 {
            operation: ArpOperation::Request,
            source_hardware_addr: CLIENT_MAC,
            source_protocol_addr: CLIENT4,
            target_hardware_addr: EthernetAddress([0; 6]),
            target_protocol_addr: target,
        };
        let mut buf = vec![0; repr.buffer_len()];
        repr.emit(&mut ArpPacket::new_unchecked(&mut buf[..]));
        ethernet(EthernetAddress::BROADCAST, EthernetProtocol::Arp, &buf)
    }

    fn v6(s: &str) -> IpAddress {
        IpAddress::Ipv6(s.parse().unwrap())
    }

    fn v4(s: &str) -> IpAddress {
        IpAddress::Ipv4(s.parse().unwrap())
    }

    #[test]
    fn web_ports_of_intercepted_destinations_are_let_in() {
        let i = interceptor(prefixes());
        for dst in [v6("fd00:99::7"), v4("10.99.0.7")] {
            assert_eq!(i.filter(&syn(OUR_MAC, dst, 80)), Filter::Intercept);
            assert_eq!(i.filter(&syn(OUR_MAC, dst, 443)), Filter::Intercept);
            let other = i.filter(&syn(OUR_MAC, dst, 8081));
            assert_eq!(other, Filter::Drop("nsff.transparent_port"));
            // The explicit proxy port is ours alone.
            let proxy = i.filter(&syn(OUR_MAC, dst, 3128));
            assert_eq!(proxy, Filter::Drop("nsff.transparent_port"));
            // Routed to someone else: a bridge flooded it.
            let flooded = i.filter(&syn(CLIENT_MAC, dst, 80));
            assert_eq!(flooded, Filter::Drop("nsff.transparent_not_our_mac"));
        }
        for dst in [v6("fd00:98::7"), v4("10.98.0.7")] {
            let out = i.filter(&syn(OUR_MAC, dst, 80));
            assert_eq!(out, Filter::Drop("nsff.transparent_not_intercepted"));
        }
        let any = interceptor(Scope::Any);
        assert_eq!(
            any.filter(&syn(OUR_MAC, v4("192.0.2.1"), 80)),
            Filter::Intercept
        );
    }

    #[test]
    fn our_own_traffic_is_untouched() {
        let i = interceptor(prefixes());
        // Every port of our own addresses: smoltcp decides, as before.
        for port in [80, 3128, 8080, 22] {
            assert_eq!(i.filter(&syn(OUR_MAC, v4("10.0.1.1"), port)), Filter::Ours);
            assert_eq!(i.filter(&syn(OUR_MAC, v6("fd00:1::1"), port)), Filter::Ours);
        }
        assert_eq!(i.filter(&syn(OUR_MAC, v4("10.0.1.255"), 80)), Filter::Ours);
        assert_eq!(
            i.filter(&arp_request(Ipv4Address::new(10, 0, 1, 1))),
            Filter::Ours
        );
        let ns = |target| {
            Icmpv6Repr::Ndisc(NdiscRepr::NeighborSolicit {
                target_addr: target,
                lladdr: None,
            })
        };
        let ours = Ipv6Address::new(0xfd00, 1, 0, 0, 0, 0, 0, 1);
        let f = icmpv6(solicited_node(ours), &ns(ours));
        assert_eq!(i.filter(&f), Filter::Ours);
    }

    #[test]
    fn foreign_addresses_are_not_claimed() {
        let i = interceptor(Scope::Any);
        // A neighbour's address: no ARP reply, no neighbour advertisement.
        let f = arp_request(Ipv4Address::new(10, 0, 1, 20));
        assert_eq!(i.filter(&f), Filter::Drop("nsff.transparent_arp_not_ours"));
        let theirs = Ipv6Address::new(0xfd00, 1, 0, 0, 0, 0, 0x100, 1);
        let ns = Icmpv6Repr::Ndisc(NdiscRepr::NeighborSolicit {
            target_addr: theirs,
            lladdr: None,
        });
        // Its solicited-node group is ours too (same low 24 bits).
        let f = icmpv6(solicited_node(theirs), &ns);
        assert_eq!(i.filter(&f), Filter::Drop("nsff.transparent_ns_not_ours"));
        // Ping to an intercepted address: not answered.
        let echo = Icmpv6Repr::EchoRequest {
            ident: 1,
            seq_no: 1,
            data: b"hi",
        };
        let f = icmpv6("fd00:99::7".parse().unwrap(), &echo);
        assert_eq!(i.filter(&f), Filter::Drop("nsff.transparent_not_tcp"));
    }

    #[test]
    fn a_solicitation_behind_a_hop_by_hop_header_is_still_checked() {
        let i = interceptor(Scope::Any);
        let theirs = Ipv6Address::new(0xfd00, 1, 0, 0, 0, 0, 0xabcd, 0x10);
        let ns = Icmpv6Repr::Ndisc(NdiscRepr::NeighborSolicit {
            target_addr: theirs,
            lladdr: None,
        });
        let plain = icmpv6(solicited_node(theirs), &ns);
        // Insert Hop-by-Hop (next header ICMPv6, PadN) before the ICMPv6
        // message; its checksum does not change.
        let mut f = plain[..14 + 40].to_vec();
        f.extend_from_slice(&[58, 0, 1, 4, 0, 0, 0, 0]);
        f.extend_from_slice(&plain[14 + 40..]);
        f[14 + 6] = 0; // next header: Hop-by-Hop
        let len = u16::from_be_bytes([f[14 + 4], f[14 + 5]]) + 8;
        f[14 + 4..14 + 6].copy_from_slice(&len.to_be_bytes());
        // smoltcp would answer it for `theirs` with our MAC.
        assert_eq!(i.filter(&f), Filter::Drop("nsff.transparent_ns_not_ours"));
        // Our own target, but to another node's group: smoltcp without
        // any_ip would not take it either.
        let ours = Ipv6Address::new(0xfd00, 1, 0, 0, 0, 0, 0, 1);
        let ns_ours = Icmpv6Repr::Ndisc(NdiscRepr::NeighborSolicit {
            target_addr: ours,
            lladdr: None,
        });
        let f2 = icmpv6(solicited_node(theirs), &ns_ours);
        assert_eq!(
            i.filter(&f2),
            Filter::Drop("nsff.transparent_group_not_ours")
        );
        // A header that runs past the packet.
        f[14 + 40 + 1] = 9;
        assert_eq!(i.filter(&f), Filter::Drop("nsff.transparent_malformed"));
    }

    #[test]
    fn only_the_groups_smoltcp_takes_without_any_ip_are_ours() {
        let i = interceptor(Scope::Any);
        for dst in ["ff02::1", "ff02::1:ff00:1"] {
            assert_eq!(i.filter(&syn(OUR_MAC, v6(dst), 80)), Filter::Ours, "{dst}");
        }
        for dst in ["255.255.255.255", "224.0.0.1", "10.0.1.255"] {
            assert_eq!(i.filter(&syn(OUR_MAC, v4(dst), 80)), Filter::Ours, "{dst}");
        }
        // With any_ip smoltcp would take every group: a SYN-ACK from
        // ff05::1234, port unreachables for mDNS.
        for dst in [
            v6("ff05::1234"),
            v6("ff02::fb"),
            v6("ff02::1:ff00:2"),
            v4("239.1.1.1"),
        ] {
            let f = i.filter(&syn(OUR_MAC, dst, 80));
            assert_eq!(f, Filter::Drop("nsff.transparent_group_not_ours"), "{dst}");
        }
    }

    #[test]
    fn fragments_and_garbage_never_pass_or_panic() {
        let i = interceptor(Scope::Any);
        let mut f = syn(OUR_MAC, v4("10.99.0.7"), 80);
        // More fragments (IPv4 flags at byte 6 of the header).
        f[14 + 6] |= 0x20;
        assert_eq!(i.filter(&f), Filter::Drop("nsff.transparent_fragment"));
        let full = syn(OUR_MAC, v6("fd00:99::7"), 80);
        for n in 0..full.len() {
            let v = i.filter(&full[..n]);
            assert_ne!(v, Filter::Intercept, "{n} bytes");
        }
        let mut x: u32 = 0x9e37_79b9;
        for _ in 0..2000 {
            let mut g = full.clone();
            for _ in 0..4 {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                let k = (x as usize) % g.len();
                g[k] = (x >> 8) as u8;
            }
            let _ = i.filter(&g);
        }
    }

    #[test]
    fn config_forms_and_errors() {
        let parse = |s: &str| -> Result<TransparentConfig, String> {
            serde_json::from_str(s).map_err(|e| e.to_string())
        };
        assert_eq!(parse("false"), Ok(TransparentConfig::Off));
        assert_eq!(parse("true"), Ok(TransparentConfig::Any));
        assert_eq!(TransparentConfig::Off.scope(), Ok(None));
        assert_eq!(TransparentConfig::Any.scope(), Ok(Some(Scope::Any)));
        let list = parse(r#"["fd00:99::/32", "10.99.0.0/16"]"#).unwrap();
        assert_eq!(
            list.scope().unwrap().unwrap().to_string(),
            "fd00:99::/32, 10.99.0.0/16"
        );
        assert_eq!(
            serde_json::to_string(&list).unwrap(),
            r#"["fd00:99::/32","10.99.0.0/16"]"#
        );
        assert_eq!(
            serde_json::to_string(&TransparentConfig::Any).unwrap(),
            "true"
        );
        let e = parse("\"yes\"").unwrap_err();
        assert!(e.contains("true, false or a list of prefixes"), "{e}");
        let err = |list: &[&str]| {
            TransparentConfig::Prefixes(list.iter().map(|s| (*s).to_owned()).collect())
                .scope()
                .unwrap_err()
        };
        assert!(err(&[]).starts_with("an empty list"));
        assert_eq!(
            err(&["10.99.0.0/16", "fd00:99::/200"]),
            "\"fd00:99::/200\" is not a prefix (ADDR/LEN, e.g. \"10.99.0.0/16\")"
        );
        assert!(err(&["10.99.0.0"]).starts_with("\"10.99.0.0\" is not a prefix"));
        assert!(err(&["www.example.com/8"]).starts_with("\"www.example.com/8\" is not"));
        assert_eq!(
            err(&["10.99.1.0/16"]),
            "\"10.99.1.0/16\" has host bits set (the prefix is \"10.99.0.0/16\")"
        );
    }
}
