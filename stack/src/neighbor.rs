//! # Neighbour assist: link-layer resolution without smoltcp's one-second stalls
//!
//! smoltcp 0.14 rate-limits address resolution per *interface*, not per
//! neighbour: after it sends one ARP request or Neighbor Solicitation it sends
//! no other for a second (`iface::neighbor::Cache::SILENT_TIME`), and it learns
//! a neighbour's MAC only from ARP and NDP, never from the IP packets that
//! neighbour sends. A node that must reach several neighbours at once (an MDA
//! opening its mesh to three peers) waits a second per neighbour, and a node
//! that is resolving a peer cannot answer a new client for up to a second
//! (seen in CI: a restarted MDA missed a UA's first SrvRqst that way).
//!
//! [`Neighbors`] sits between the link and smoltcp, one per port:
//!
//! - **glean**: a unicast IPv4 or IPv6 packet from an on-link source tells us
//!   that source's MAC. Unless smoltcp was already told that binding within
//!   [`REFRESH`], the runtime puts a synthetic ARP reply (IPv4) or Neighbor
//!   Advertisement with the override flag (IPv6), *from* the neighbour *to*
//!   us, into smoltcp's receive queue just ahead of the packet. smoltcp fills
//!   its cache from it, so the answer to the packet leaves at once. Synthetic
//!   frames never reach the wire.
//! - **resolve**: a role about to talk to a neighbour calls
//!   [`Context::resolve`](crate::runtime::Context::resolve). If the MAC is
//!   known but smoltcp was not told, the assist tells it (synthetic frame);
//!   otherwise it sends an ARP request or NS of its own, at most one per
//!   neighbour per [`ASK_INTERVAL`]. smoltcp fills its cache from the reply
//!   like from the answer to its own request (it accepts any ARP reply or NA
//!   aimed at it).
//!
//! The table is bounded ([`MAX_ENTRIES`]; the least recently seen entry goes)
//! and only on-link sources (inside one of the port's prefixes) are learned.
//! Learning from traffic trusts the link exactly as far as ARP and NDP do.

use std::collections::BTreeMap;

use smoltcp::phy::ChecksumCapabilities;
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{
    ArpOperation, ArpPacket, ArpRepr, EthernetAddress, EthernetFrame, EthernetProtocol,
    EthernetRepr, Icmpv6Packet, Icmpv6Repr, IpAddress, IpCidr, IpProtocol, Ipv4Address,
    Ipv6Address, Ipv6Packet, Ipv6Repr, NdiscNeighborFlags, NdiscRepr,
};

/// How long a binding told to smoltcp counts as fresh (smoltcp keeps an
/// entry 60 s and extends it on traffic from the same MAC).
pub const REFRESH: Duration = Duration::from_secs(30);

/// Least time between two requests of ours for the same neighbour.
pub const ASK_INTERVAL: Duration = Duration::from_secs(1);

/// Most neighbours remembered per port.
pub const MAX_ENTRIES: usize = 1024;

use smoltcp::wire::ETHERNET_HEADER_LEN as ETH_LEN;

#[derive(Debug, Clone, Copy)]
struct Entry {
    mac: Option<EthernetAddress>,
    seen: Instant,
    told: Option<Instant>,
    asked: Option<Instant>,
}

/// What [`Neighbors::glean`] and [`Neighbors::resolve`] ask the runtime to do.
#[derive(Debug, PartialEq, Eq)]
pub enum Action {
    /// Nothing: smoltcp knows the binding, or there is nothing to learn.
    None,
    /// Put this frame into smoltcp's receive queue (ahead of the packet).
    ToStack(Vec<u8>),
    /// Send this request on the link.
    ToWire(Vec<u8>),
    /// A request for this neighbour went out less than [`ASK_INTERVAL`] ago.
    Waiting,
    /// No on-link next hop: not in any of the port's prefixes and no gateway
    /// of that family.
    OffLink,
}

/// The per-port neighbour table of the assist.
#[derive(Debug)]
pub struct Neighbors {
    mac: EthernetAddress,
    table: BTreeMap<IpAddress, Entry>,
}

impl Neighbors {
    /// An empty table for a port whose MAC is `mac`.
    pub fn new(mac: EthernetAddress) -> Self {
        Self {
            mac,
            table: BTreeMap::new(),
        }
    }

    /// The MAC last seen for `addr`, if any.
    pub fn lookup(&self, addr: &IpAddress) -> Option<EthernetAddress> {
        self.table.get(addr).and_then(|e| e.mac)
    }

    /// Number of neighbours remembered.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// Look at a frame smoltcp is about to receive on a port with addresses
    /// `addrs`: learn the sender's binding, and return the synthetic frame to
    /// queue ahead of it when smoltcp should be told.
    pub fn glean(&mut self, now: Instant, frame: &[u8], addrs: &[IpCidr]) -> Action {
        let Some(src_mac) = frame.get(6..12).map(EthernetAddress::from_bytes) else {
            return Action::None;
        };
        if !src_mac.is_unicast() || src_mac == self.mac {
            return Action::None;
        }
        match frame.get(12..14) {
            Some([0x08, 0x00]) => {
                let Some(ip) = frame.get(ETH_LEN..ETH_LEN + 20) else {
                    return Action::None;
                };
                if ip[0] >> 4 != 4 {
                    return Action::None;
                }
                let src = Ipv4Address::new(ip[12], ip[13], ip[14], ip[15]);
                self.learn_ip(now, IpAddress::Ipv4(src), src_mac, addrs)
            }
            Some([0x86, 0xdd]) => {
                let Some(ip) = frame.get(ETH_LEN..ETH_LEN + 40) else {
                    return Action::None;
                };
                if ip[0] >> 4 != 6 {
                    return Action::None;
                }
                let mut b = [0; 16];
                b.copy_from_slice(&ip[8..24]);
                let src = IpAddress::Ipv6(Ipv6Address::from(b));
                if is_ndp(frame) {
                    // smoltcp learns from NDP aimed at it by itself; remember
                    // the binding, tell smoltcp with the next ordinary packet.
                    self.note(now, src, src_mac, addrs, false);
                    return Action::None;
                }
                self.learn_ip(now, src, src_mac, addrs)
            }
            Some([0x08, 0x06]) => {
                let Some(Ok(ArpRepr::EthernetIpv4 {
                    source_hardware_addr,
                    source_protocol_addr,
                    target_protocol_addr,
                    ..
                })) = frame
                    .get(ETH_LEN..)
                    .and_then(|b| ArpPacket::new_checked(b).ok())
                    .map(|p| ArpRepr::parse(&p))
                else {
                    return Action::None;
                };
                let src = IpAddress::Ipv4(source_protocol_addr);
                // ARP aimed at one of our addresses fills smoltcp's cache.
                let aimed = addrs
                    .iter()
                    .any(|c| c.address() == IpAddress::Ipv4(target_protocol_addr));
                if source_hardware_addr.is_unicast() {
                    self.note(now, src, source_hardware_addr, addrs, aimed);
                }
                Action::None
            }
            _ => Action::None,
        }
    }

    /// Make sure smoltcp can reach `addr` (through a gateway in `gateways`
    /// when it is not on-link) without its per-interface rate limit.
    pub fn resolve(
        &mut self,
        now: Instant,
        addr: IpAddress,
        addrs: &[IpCidr],
        gateways: &[IpAddress],
    ) -> Action {
        if addr.is_multicast() || addr.is_unspecified() {
            return Action::None;
        }
        let hop = if on_link(&addr, addrs).is_some() {
            addr
        } else if let Some(gw) = gateways
            .iter()
            .find(|g| g.version() == addr.version() && on_link(g, addrs).is_some())
        {
            *gw
        } else {
            return Action::OffLink;
        };
        let Some(ours) = on_link(&hop, addrs) else {
            return Action::OffLink;
        };
        if addrs.iter().any(|c| c.address() == hop) {
            return Action::None;
        }
        let entry = self.entry(now, hop);
        if let Some(mac) = entry.mac {
            if entry.told.is_some_and(|t| now - t < REFRESH) {
                return Action::None;
            }
            entry.told = Some(now);
            return Action::ToStack(announce(hop, mac, ours, self.mac));
        }
        if entry.asked.is_some_and(|t| now - t < ASK_INTERVAL) {
            return Action::Waiting;
        }
        entry.asked = Some(now);
        Action::ToWire(request(hop, ours, self.mac))
    }

    fn learn_ip(
        &mut self,
        now: Instant,
        src: IpAddress,
        mac: EthernetAddress,
        addrs: &[IpCidr],
    ) -> Action {
        let Some(ours) = on_link(&src, addrs) else {
            return Action::None;
        };
        if !src.is_unicast() || addrs.iter().any(|c| c.address() == src) {
            return Action::None;
        }
        let entry = self.entry(now, src);
        let moved = entry.mac != Some(mac);
        entry.mac = Some(mac);
        entry.seen = now;
        if !moved && entry.told.is_some_and(|t| now - t < REFRESH) {
            return Action::None;
        }
        entry.told = Some(now);
        Action::ToStack(announce(src, mac, ours, self.mac))
    }

    fn note(
        &mut self,
        now: Instant,
        src: IpAddress,
        mac: EthernetAddress,
        addrs: &[IpCidr],
        told: bool,
    ) {
        if !src.is_unicast() || on_link(&src, addrs).is_none() {
            return;
        }
        let entry = self.entry(now, src);
        if entry.mac != Some(mac) {
            entry.told = None;
        }
        entry.mac = Some(mac);
        entry.seen = now;
        if told {
            entry.told = Some(now);
        }
    }

    fn entry(&mut self, now: Instant, addr: IpAddress) -> &mut Entry {
        if !self.table.contains_key(&addr) && self.table.len() >= MAX_ENTRIES {
            let oldest = self
                .table
                .iter()
                .min_by_key(|(_, e)| e.seen)
                .map(|(a, _)| *a);
            if let Some(a) = oldest {
                self.table.remove(&a);
            }
        }
        self.table.entry(addr).or_insert(Entry {
            mac: None,
            seen: now,
            told: None,
            asked: None,
        })
    }
}

/// Our address on the prefix that holds `addr`, if `addr` is on-link.
fn on_link(addr: &IpAddress, addrs: &[IpCidr]) -> Option<IpAddress> {
    addrs
        .iter()
        .find(|c| c.contains_addr(addr))
        .map(IpCidr::address)
}

/// Whether an IPv6 frame is ICMPv6 neighbour discovery (types 133–137)
/// right after the fixed header.
fn is_ndp(frame: &[u8]) -> bool {
    frame.get(ETH_LEN + 6) == Some(&58)
        && frame
            .get(ETH_LEN + 40)
            .is_some_and(|t| (133..=137).contains(t))
}

fn ethernet(
    src: EthernetAddress,
    dst: EthernetAddress,
    proto: EthernetProtocol,
    len: usize,
) -> Vec<u8> {
    let mut buf = vec![0; ETH_LEN + len];
    EthernetRepr {
        src_addr: src,
        dst_addr: dst,
        ethertype: proto,
    }
    .emit(&mut EthernetFrame::new_unchecked(&mut buf[..]));
    buf
}

/// A frame, as if from neighbour `ip`/`mac` to us (`ours`, `our_mac`),
/// that makes smoltcp store the binding: an ARP reply or an override NA.
fn announce(
    ip: IpAddress,
    mac: EthernetAddress,
    ours: IpAddress,
    our_mac: EthernetAddress,
) -> Vec<u8> {
    match (ip, ours) {
        (IpAddress::Ipv4(ip), IpAddress::Ipv4(ours)) => {
            let arp = ArpRepr::EthernetIpv4 {
                operation: ArpOperation::Reply,
                source_hardware_addr: mac,
                source_protocol_addr: ip,
                target_hardware_addr: our_mac,
                target_protocol_addr: ours,
            };
            let mut buf = ethernet(mac, our_mac, EthernetProtocol::Arp, arp.buffer_len());
            arp.emit(&mut ArpPacket::new_unchecked(&mut buf[ETH_LEN..]));
            buf
        }
        (IpAddress::Ipv6(ip), IpAddress::Ipv6(ours)) => ndisc(
            mac,
            our_mac,
            ip,
            ours,
            NdiscRepr::NeighborAdvert {
                flags: NdiscNeighborFlags::OVERRIDE,
                target_addr: ip,
                lladdr: Some(mac.into()),
            },
        ),
        // `on_link` pairs an address with ours of the same family.
        _ => Vec::new(),
    }
}

/// Our request for `ip`: a broadcast ARP request or a Neighbor Solicitation
/// to its solicited-node group.
fn request(ip: IpAddress, ours: IpAddress, our_mac: EthernetAddress) -> Vec<u8> {
    match (ip, ours) {
        (IpAddress::Ipv4(ip), IpAddress::Ipv4(ours)) => {
            let arp = ArpRepr::EthernetIpv4 {
                operation: ArpOperation::Request,
                source_hardware_addr: our_mac,
                source_protocol_addr: ours,
                target_hardware_addr: EthernetAddress([0; 6]),
                target_protocol_addr: ip,
            };
            let mut buf = ethernet(
                our_mac,
                EthernetAddress::BROADCAST,
                EthernetProtocol::Arp,
                arp.buffer_len(),
            );
            arp.emit(&mut ArpPacket::new_unchecked(&mut buf[ETH_LEN..]));
            buf
        }
        (IpAddress::Ipv6(ip), IpAddress::Ipv6(ours)) => {
            let t = ip.octets();
            let group = Ipv6Address::new(
                0xff02,
                0,
                0,
                0,
                0,
                1,
                0xff00 | u16::from(t[13]),
                u16::from_be_bytes([t[14], t[15]]),
            );
            let group_mac = EthernetAddress([0x33, 0x33, 0xff, t[13], t[14], t[15]]);
            ndisc(
                our_mac,
                group_mac,
                ours,
                group,
                NdiscRepr::NeighborSolicit {
                    target_addr: ip,
                    lladdr: Some(our_mac.into()),
                },
            )
        }
        _ => Vec::new(),
    }
}

fn ndisc(
    src_mac: EthernetAddress,
    dst_mac: EthernetAddress,
    src: Ipv6Address,
    dst: Ipv6Address,
    repr: NdiscRepr<'_>,
) -> Vec<u8> {
    let icmp = Icmpv6Repr::Ndisc(repr);
    let ip = Ipv6Repr {
        src_addr: src,
        dst_addr: dst,
        next_header: IpProtocol::Icmpv6,
        payload_len: icmp.buffer_len(),
        hop_limit: 255,
    };
    let mut buf = ethernet(
        src_mac,
        dst_mac,
        EthernetProtocol::Ipv6,
        ip.buffer_len() + icmp.buffer_len(),
    );
    let mut pkt = Ipv6Packet::new_unchecked(&mut buf[ETH_LEN..]);
    ip.emit(&mut pkt);
    icmp.emit(
        &src,
        &dst,
        &mut Icmpv6Packet::new_unchecked(pkt.payload_mut()),
        &ChecksumCapabilities::default(),
    );
    buf
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 1]);
    const PEER: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 2]);

    fn addrs() -> Vec<IpCidr> {
        vec![
            IpCidr::new(IpAddress::v4(10, 0, 0, 1), 24),
            IpCidr::new(IpAddress::v6(0xfd00, 0, 0, 0, 0, 0, 0, 1), 64),
        ]
    }

    fn t(ms: i64) -> Instant {
        Instant::from_millis(ms)
    }

    /// An Ethernet frame carrying a minimal IP header from `src` to `dst`.
    fn ip_frame(mac: EthernetAddress, src: IpAddress, dst: IpAddress) -> Vec<u8> {
        match (src, dst) {
            (IpAddress::Ipv4(s), IpAddress::Ipv4(d)) => {
                let mut f = ethernet(mac, US, EthernetProtocol::Ipv4, 20);
                f[ETH_LEN] = 0x45;
                f[ETH_LEN + 12..ETH_LEN + 16].copy_from_slice(&s.octets());
                f[ETH_LEN + 16..ETH_LEN + 20].copy_from_slice(&d.octets());
                f
            }
            (IpAddress::Ipv6(s), IpAddress::Ipv6(d)) => {
                let mut f = ethernet(mac, US, EthernetProtocol::Ipv6, 48);
                f[ETH_LEN] = 0x60;
                f[ETH_LEN + 6] = 17;
                f[ETH_LEN + 8..ETH_LEN + 24].copy_from_slice(&s.octets());
                f[ETH_LEN + 24..ETH_LEN + 40].copy_from_slice(&d.octets());
                f
            }
            _ => unreachable!(),
        }
    }

    #[test]
    fn an_ipv4_packet_from_a_new_neighbour_yields_an_arp_reply_to_us() {
        let mut n = Neighbors::new(US);
        let peer = IpAddress::v4(10, 0, 0, 7);
        let f = ip_frame(PEER, peer, IpAddress::v4(10, 0, 0, 1));
        let Action::ToStack(synth) = n.glean(t(0), &f, &addrs()) else {
            panic!("no synthetic frame");
        };
        let eth = EthernetFrame::new_checked(&synth[..]).unwrap();
        assert_eq!((eth.src_addr(), eth.dst_addr()), (PEER, US));
        assert_eq!(eth.ethertype(), EthernetProtocol::Arp);
        let arp = ArpRepr::parse(&ArpPacket::new_checked(eth.payload()).unwrap()).unwrap();
        assert_eq!(
            arp,
            ArpRepr::EthernetIpv4 {
                operation: ArpOperation::Reply,
                source_hardware_addr: PEER,
                source_protocol_addr: Ipv4Address::new(10, 0, 0, 7),
                target_hardware_addr: US,
                target_protocol_addr: Ipv4Address::new(10, 0, 0, 1),
            }
        );
        // Told once; again only after REFRESH or when the MAC moves.
        assert_eq!(n.glean(t(10), &f, &addrs()), Action::None);
        assert!(matches!(
            n.glean(t(10) + REFRESH, &f, &addrs()),
            Action::ToStack(_)
        ));
        let moved = ip_frame(
            EthernetAddress([2, 0, 0, 0, 0, 9]),
            peer,
            IpAddress::v4(10, 0, 0, 1),
        );
        assert!(matches!(
            n.glean(t(10) + REFRESH, &moved, &addrs()),
            Action::ToStack(_)
        ));
        assert_eq!(n.lookup(&peer), Some(EthernetAddress([2, 0, 0, 0, 0, 9])));
    }

    #[test]
    fn an_ipv6_packet_yields_a_valid_override_advertisement() {
        let mut n = Neighbors::new(US);
        let peer = Ipv6Address::new(0xfd00, 0, 0, 0, 0, 0, 0, 7);
        let ours = Ipv6Address::new(0xfd00, 0, 0, 0, 0, 0, 0, 1);
        let f = ip_frame(PEER, peer.into(), ours.into());
        let Action::ToStack(synth) = n.glean(t(0), &f, &addrs()) else {
            panic!("no synthetic frame");
        };
        let eth = EthernetFrame::new_checked(&synth[..]).unwrap();
        assert_eq!((eth.src_addr(), eth.dst_addr()), (PEER, US));
        let ip = Ipv6Packet::new_checked(eth.payload()).unwrap();
        let ip_repr = Ipv6Repr::parse(&ip).unwrap();
        assert_eq!((ip_repr.src_addr, ip_repr.dst_addr), (peer, ours));
        assert_eq!(ip_repr.hop_limit, 255);
        let icmp = Icmpv6Packet::new_checked(ip.payload()).unwrap();
        // Parsing verifies the checksum.
        let repr =
            Icmpv6Repr::parse(&peer, &ours, &icmp, &ChecksumCapabilities::default()).unwrap();
        assert_eq!(
            repr,
            Icmpv6Repr::Ndisc(NdiscRepr::NeighborAdvert {
                flags: NdiscNeighborFlags::OVERRIDE,
                target_addr: peer,
                lladdr: Some(PEER.into()),
            })
        );
    }

    #[test]
    fn off_link_own_multicast_and_malformed_sources_teach_nothing() {
        let mut n = Neighbors::new(US);
        let us = IpAddress::v4(10, 0, 0, 1);
        for f in [
            ip_frame(PEER, IpAddress::v4(10, 9, 0, 7), us),
            ip_frame(PEER, us, us),
            ip_frame(PEER, IpAddress::v4(0, 0, 0, 0), us),
            ip_frame(
                EthernetAddress([1, 0, 0x5e, 0, 0, 1]),
                IpAddress::v4(10, 0, 0, 7),
                us,
            ),
            ip_frame(US, IpAddress::v4(10, 0, 0, 7), us),
            ip_frame(PEER, IpAddress::v4(10, 0, 0, 7), us)[..20].to_vec(),
            vec![0; 5],
        ] {
            assert_eq!(n.glean(t(0), &f, &addrs()), Action::None, "{f:02x?}");
        }
        assert!(n.is_empty());
    }

    #[test]
    fn arp_aimed_at_us_is_remembered_as_told() {
        let mut n = Neighbors::new(US);
        let peer = IpAddress::v4(10, 0, 0, 7);
        let ours = IpAddress::v4(10, 0, 0, 1);
        let reply = announce(peer, PEER, ours, US);
        assert_eq!(n.glean(t(0), &reply, &addrs()), Action::None);
        assert_eq!(n.lookup(&peer), Some(PEER));
        // smoltcp read that reply itself: nothing to tell, nothing to ask.
        assert_eq!(
            n.glean(t(1), &ip_frame(PEER, peer, ours), &addrs()),
            Action::None
        );
        assert_eq!(n.resolve(t(2), peer, &addrs(), &[]), Action::None);
    }

    #[test]
    fn resolve_asks_once_per_interval_per_neighbour() {
        let mut n = Neighbors::new(US);
        let a = IpAddress::v4(10, 0, 0, 2);
        let b = IpAddress::v4(10, 0, 0, 3);
        let Action::ToWire(req) = n.resolve(t(0), a, &addrs(), &[]) else {
            panic!("no request");
        };
        let eth = EthernetFrame::new_checked(&req[..]).unwrap();
        assert_eq!(eth.dst_addr(), EthernetAddress::BROADCAST);
        let arp = ArpRepr::parse(&ArpPacket::new_checked(eth.payload()).unwrap()).unwrap();
        assert!(matches!(
            arp,
            ArpRepr::EthernetIpv4 {
                operation: ArpOperation::Request,
                target_protocol_addr,
                ..
            } if IpAddress::Ipv4(target_protocol_addr) == a
        ));
        // A second neighbour at the same instant is not held back.
        assert!(matches!(
            n.resolve(t(0), b, &addrs(), &[]),
            Action::ToWire(_)
        ));
        assert_eq!(n.resolve(t(500), a, &addrs(), &[]), Action::Waiting);
        assert!(matches!(
            n.resolve(t(1000), a, &addrs(), &[]),
            Action::ToWire(_)
        ));
        // Once the answer is seen, smoltcp has it: nothing more to do.
        let ours = IpAddress::v4(10, 0, 0, 1);
        assert_eq!(
            n.glean(t(1001), &announce(a, PEER, ours, US), &addrs()),
            Action::None
        );
        assert_eq!(n.resolve(t(1002), a, &addrs(), &[]), Action::None);
    }

    #[test]
    fn resolve_goes_through_the_gateway_and_solicits_ipv6() {
        let mut n = Neighbors::new(US);
        let far = IpAddress::v6(0xfd99, 0, 0, 0, 0, 0, 0, 5);
        assert_eq!(n.resolve(t(0), far, &addrs(), &[]), Action::OffLink);
        let gw = IpAddress::v6(0xfd00, 0, 0, 0, 0, 0, 0x12, 0x3456);
        let Action::ToWire(ns) = n.resolve(t(0), far, &addrs(), &[gw]) else {
            panic!("no solicitation");
        };
        let eth = EthernetFrame::new_checked(&ns[..]).unwrap();
        assert_eq!(
            eth.dst_addr(),
            EthernetAddress([0x33, 0x33, 0xff, 0x12, 0x34, 0x56])
        );
        let ip = Ipv6Packet::new_checked(eth.payload()).unwrap();
        let ip_repr = Ipv6Repr::parse(&ip).unwrap();
        assert_eq!(
            ip_repr.dst_addr,
            Ipv6Address::new(0xff02, 0, 0, 0, 0, 1, 0xff12, 0x3456)
        );
        let icmp = Icmpv6Packet::new_checked(ip.payload()).unwrap();
        let repr = Icmpv6Repr::parse(
            &ip_repr.src_addr,
            &ip_repr.dst_addr,
            &icmp,
            &ChecksumCapabilities::default(),
        )
        .unwrap();
        let IpAddress::Ipv6(gw6) = gw else {
            unreachable!()
        };
        assert_eq!(
            repr,
            Icmpv6Repr::Ndisc(NdiscRepr::NeighborSolicit {
                target_addr: gw6,
                lladdr: Some(US.into()),
            })
        );
        // A neighbour known from its traffic is told to smoltcp, not asked.
        let peer = IpAddress::v6(0xfd00, 0, 0, 0, 0, 0, 0, 9);
        n.note(t(0), peer, PEER, &addrs(), false);
        assert!(matches!(
            n.resolve(t(1), peer, &addrs(), &[]),
            Action::ToStack(_)
        ));
        assert_eq!(n.resolve(t(2), peer, &addrs(), &[]), Action::None);
    }

    #[test]
    fn the_table_is_bounded_and_drops_the_least_recently_seen() {
        let mut n = Neighbors::new(US);
        let wide = [IpCidr::new(IpAddress::v4(10, 0, 0, 1), 8)];
        for i in 0..(MAX_ENTRIES as u32 + 10) {
            let [_, b, c, d] = (0x0a00_0100 + i).to_be_bytes();
            let src = IpAddress::v4(10, b, c, d);
            let f = ip_frame(PEER, src, IpAddress::v4(10, 0, 0, 1));
            n.glean(t(i64::from(i)), &f, &wide);
        }
        assert_eq!(n.len(), MAX_ENTRIES);
        assert_eq!(n.lookup(&IpAddress::v4(10, 0, 1, 0)), None);
        assert!(n.lookup(&IpAddress::v4(10, 0, 1, 10)).is_some());
    }
}
