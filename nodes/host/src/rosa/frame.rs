//! Frame helpers of the ROSA shim: what it reads of a frame (the transport
//! flow, TCP flags, neighbour discovery bindings) and the frames it builds
//! itself (announcements, withdrawals, TCP resets).
//!
//! Every reader validates with [`edit::walk`] first and returns `None` for
//! anything it does not understand; nothing here panics on any input.

use std::net::Ipv6Addr;

use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    EthernetAddress, EthernetFrame, EthernetProtocol, EthernetRepr, Icmpv6Packet, Icmpv6Repr,
    IpAddress, IpProtocol, IpVersion, Ipv6Packet, Ipv6Repr, NdiscNeighborFlags, NdiscRepr,
    TcpControl, TcpPacket, TcpRepr, TcpSeqNumber,
};
use svcroute_stack::shim::edit::{self, Fragment};
use svcroute_stack::wire::ipv6opt::{self, OptionRepr};

// Host frames carry no VLAN tag: the Ethernet II header is always 14 octets.
pub(crate) use smoltcp::wire::{ETHERNET_HEADER_LEN as ETH_LEN, IPV6_HEADER_LEN as IPV6_LEN};

/// TCP flag bits (RFC 9293 §3.1).
pub(crate) const FIN: u8 = 0x01;
pub(crate) const SYN: u8 = 0x02;
pub(crate) const RST: u8 = 0x04;
pub(crate) const ACK: u8 = 0x10;

/// Hop limit of the frames the shim builds.
const HOP_LIMIT: u8 = 64;

/// The transport flow of an IPv6 TCP or UDP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Flow {
    /// Source address.
    pub(crate) src: Ipv6Addr,
    /// Destination address.
    pub(crate) dst: Ipv6Addr,
    /// TCP or UDP.
    pub(crate) proto: IpProtocol,
    /// Source port.
    pub(crate) sport: u16,
    /// Destination port.
    pub(crate) dport: u16,
    /// TCP flags (0 for UDP).
    pub(crate) flags: u8,
    /// TCP acknowledgement number (0 for UDP).
    pub(crate) ack: u32,
}

impl Flow {
    /// Whether this is TCP with `flag` set.
    pub(crate) fn tcp_has(&self, flag: u8) -> bool {
        self.proto == IpProtocol::Tcp && self.flags & flag != 0
    }
}

/// TCP teardown seen on a flow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Close {
    fin_out: bool,
    fin_in: bool,
    rst: bool,
}

impl Close {
    pub(crate) fn saw(&mut self, f: &Flow, outgoing: bool) {
        if f.proto != IpProtocol::Tcp {
            return;
        }
        if f.flags & RST != 0 {
            self.rst = true;
        }
        if f.flags & FIN != 0 {
            if outgoing {
                self.fin_out = true;
            } else {
                self.fin_in = true;
            }
        }
    }

    pub(crate) fn closed(&self) -> bool {
        self.rst || (self.fin_out && self.fin_in)
    }
}

/// The flow of a whole (unfragmented) IPv6 TCP or UDP packet, else `None`.
pub(crate) fn flow(frame: &[u8]) -> Option<Flow> {
    if frame.get(12..14) != Some(&[0x86, 0xdd][..]) {
        return None;
    }
    let layout = edit::walk(frame).ok()?;
    if layout.version != IpVersion::Ipv6 || layout.fragment != Fragment::Whole {
        return None;
    }
    let min = match layout.upper_protocol {
        IpProtocol::Tcp => 20,
        IpProtocol::Udp => 8,
        _ => return None,
    };
    let l4 = frame.get(layout.upper_offset..layout.ip_end)?;
    if l4.len() < min {
        return None;
    }
    let ip = layout.ip_offset;
    let (flags, ack) = if layout.upper_protocol == IpProtocol::Tcp {
        (l4[13], u32::from_be_bytes([l4[8], l4[9], l4[10], l4[11]]))
    } else {
        (0, 0)
    };
    Some(Flow {
        src: addr_at(frame, ip + 8)?,
        dst: addr_at(frame, ip + 24)?,
        proto: layout.upper_protocol,
        sport: u16::from_be_bytes([l4[0], l4[1]]),
        dport: u16::from_be_bytes([l4[2], l4[3]]),
        flags,
        ack,
    })
}

/// The IPv6 source and destination of an IPv6 frame, if it is one.
pub(crate) fn ipv6_addrs(frame: &[u8]) -> Option<(Ipv6Addr, Ipv6Addr)> {
    if frame.get(12..14) != Some(&[0x86, 0xdd][..]) || frame.get(ETH_LEN)? >> 4 != 6 {
        return None;
    }
    Some((addr_at(frame, ETH_LEN + 8)?, addr_at(frame, ETH_LEN + 24)?))
}

/// A binding told by neighbour discovery: a Neighbor Solicitation's source
/// and its Source Link-Layer Address option, or a Neighbor Advertisement's
/// target and its Target Link-Layer Address option (else the frame's source
/// MAC). NDP messages follow the fixed IPv6 header directly (RFC 4861 §4).
pub(crate) fn ndp_binding(frame: &[u8]) -> Option<(Ipv6Addr, EthernetAddress)> {
    let (src, _) = ipv6_addrs(frame)?;
    if *frame.get(ETH_LEN + 6)? != 58 {
        return None;
    }
    let icmp = frame.get(ETH_LEN + IPV6_LEN..)?;
    let (kind, wanted) = match icmp.first()? {
        135 => (135, 1), // NS: Source Link-Layer Address
        136 => (136, 2), // NA: Target Link-Layer Address
        _ => return None,
    };
    let target = Ipv6Addr::from(<[u8; 16]>::try_from(icmp.get(8..24)?).ok()?);
    let mut lladdr = None;
    let mut at = 24;
    while let Some(&[t, len]) = icmp.get(at..at + 2) {
        let end = at + usize::from(len) * 8;
        if len == 0 || end > icmp.len() {
            break;
        }
        if t == wanted && len == 1 {
            lladdr = Some(EthernetAddress::from_bytes(&icmp[at + 2..at + 8]));
        }
        at = end;
    }
    let binding = if kind == 135 {
        (!src.is_unspecified()).then_some(src)?;
        (src, lladdr?)
    } else {
        (
            target,
            lladdr.unwrap_or_else(|| EthernetAddress::from_bytes(&frame[6..12])),
        )
    };
    binding.1.is_unicast().then_some(binding)
}

/// The source MAC of a frame.
pub(crate) fn src_mac(frame: &[u8]) -> Option<EthernetAddress> {
    frame.get(6..12).map(EthernetAddress::from_bytes)
}

/// Set the destination MAC of a frame (at least 14 octets long).
pub(crate) fn set_dst_mac(frame: &mut [u8], mac: EthernetAddress) {
    if let Some(d) = frame.get_mut(0..6) {
        d.copy_from_slice(mac.as_bytes());
    }
}

/// A frame carrying only a ROSA option (announcement, withdrawal): IPv6
/// from `src` to `dst` with a Destination Options header and no upper layer
/// (next header 59). The destination MAC is left zero for the caller to
/// route. `None` if `rosa` is over 255 octets.
pub(crate) fn control_frame(
    src_mac: EthernetAddress,
    src: Ipv6Addr,
    dst: Ipv6Addr,
    rosa: &[u8],
) -> Option<Vec<u8>> {
    let opts = [OptionRepr::new(ipv6opt::OptionType::Rosa, rosa).ok()?];
    let header = ipv6opt::Repr::new(IpProtocol::Ipv6NoNxt, &opts).ok()?;
    let ext_len = header.buffer_len();
    let mut frame = vec![0; ETH_LEN + IPV6_LEN + ext_len];
    ethernet(&mut frame, src_mac);
    let ip = Ipv6Repr {
        src_addr: src,
        dst_addr: dst,
        next_header: IpProtocol::Ipv6Opts,
        payload_len: ext_len,
        hop_limit: HOP_LIMIT,
    };
    ip.emit(&mut Ipv6Packet::new_unchecked(&mut frame[ETH_LEN..]));
    header.emit(&mut ipv6opt::Packet::new_unchecked(
        &mut frame[ETH_LEN + IPV6_LEN..],
    ));
    Some(frame)
}

/// A TCP reset from `src`:`sport` to `dst`:`dport` with sequence number
/// `seq` (RFC 9293 §3.10.7.3: the acknowledgement number of the segment
/// it answers). The destination MAC is left zero for the caller to route.
pub(crate) fn tcp_reset(
    src_mac: EthernetAddress,
    src: Ipv6Addr,
    dst: Ipv6Addr,
    sport: u16,
    dport: u16,
    seq: u32,
) -> Vec<u8> {
    let tcp = TcpRepr {
        src_port: sport,
        dst_port: dport,
        control: TcpControl::Rst,
        seq_number: TcpSeqNumber(seq as i32),
        ack_number: None,
        window_len: 0,
        window_scale: None,
        max_seg_size: None,
        sack_permitted: false,
        sack_ranges: [None; 3],
        timestamp: None,
        payload: &[],
    };
    let mut frame = vec![0; ETH_LEN + IPV6_LEN + tcp.header_len()];
    ethernet(&mut frame, src_mac);
    let ip = Ipv6Repr {
        src_addr: src,
        dst_addr: dst,
        next_header: IpProtocol::Tcp,
        payload_len: tcp.header_len(),
        hop_limit: HOP_LIMIT,
    };
    ip.emit(&mut Ipv6Packet::new_unchecked(&mut frame[ETH_LEN..]));
    tcp.emit(
        &mut TcpPacket::new_unchecked(&mut frame[ETH_LEN + IPV6_LEN..]),
        &IpAddress::Ipv6(src),
        &IpAddress::Ipv6(dst),
        &ChecksumCapabilities::default(),
    );
    frame
}

/// An unsolicited Neighbor Advertisement of `addr` at `mac` to all nodes
/// (RFC 4861 §7.2.6: Override set, Solicited clear, the Target Link-Layer
/// Address option), to announce an address that just appeared on a link.
pub(crate) fn unsolicited_na(mac: EthernetAddress, addr: Ipv6Addr) -> Vec<u8> {
    let all_nodes = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
    let icmp = Icmpv6Repr::Ndisc(NdiscRepr::NeighborAdvert {
        flags: NdiscNeighborFlags::OVERRIDE,
        target_addr: addr,
        lladdr: Some(mac.into()),
    });
    let mut frame = vec![0; ETH_LEN + IPV6_LEN + icmp.buffer_len()];
    EthernetRepr {
        src_addr: mac,
        dst_addr: EthernetAddress([0x33, 0x33, 0, 0, 0, 1]),
        ethertype: EthernetProtocol::Ipv6,
    }
    .emit(&mut EthernetFrame::new_unchecked(&mut frame[..]));
    Ipv6Repr {
        src_addr: addr,
        dst_addr: all_nodes,
        next_header: IpProtocol::Icmpv6,
        payload_len: icmp.buffer_len(),
        hop_limit: 255,
    }
    .emit(&mut Ipv6Packet::new_unchecked(&mut frame[ETH_LEN..]));
    icmp.emit(
        &addr,
        &all_nodes,
        &mut Icmpv6Packet::new_unchecked(&mut frame[ETH_LEN + IPV6_LEN..]),
        &ChecksumCapabilities::default(),
    );
    frame
}

fn ethernet(frame: &mut [u8], src_mac: EthernetAddress) {
    EthernetRepr {
        src_addr: src_mac,
        dst_addr: EthernetAddress([0; 6]),
        ethertype: EthernetProtocol::Ipv6,
    }
    .emit(&mut EthernetFrame::new_unchecked(frame));
}

fn addr_at(frame: &[u8], at: usize) -> Option<Ipv6Addr> {
    let b: [u8; 16] = frame.get(at..at + 16)?.try_into().ok()?;
    Some(Ipv6Addr::from(b))
}
