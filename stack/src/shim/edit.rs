//! Frame surgery: generic edits of whole Ethernet frames.
//!
//! Frames are Ethernet II (up to two 802.1Q/802.1ad tags are skipped)
//! carrying IPv4 or IPv6, up to 64 KiB long (TAP offload super-frames).
//! Every function validates the headers it relies on first and either edits
//! the frame completely or returns an [`EditError`] with the frame untouched;
//! none panics on any input.
//!
//! - [`walk`] finds the IP header, the upper-layer protocol and its offset
//!   (walking IPv6 extension headers), and a Destination Options header
//!   placed directly before the upper layer.
//! - [`insert_dest_opts`] / [`strip_dest_opts`] add and remove our options
//!   header (SPEC §0); endpoints strip on ingress because smoltcp drops
//!   packets carrying a Destination Options header.
//! - [`rewrite_addr`] changes a source or destination address and keeps the
//!   IPv4 header checksum and the TCP/UDP/ICMPv6 checksum valid with an
//!   incremental update (RFC 1624), with or without extension headers.
//!
//! Not supported (a typed error, never a wrong edit): IPv6 jumbograms
//! (payload length 0 with a Jumbo Payload option reads as truncated),
//! options headers on fragments.

use core::fmt;
use core::ops::Range;
use std::net::IpAddr;

use smoltcp::wire::{IpProtocol, IpVersion};

use crate::wire::checksum::word;
pub use crate::wire::checksum::{checksum_update, ones_complement_sum};
use crate::wire::ipv6opt::{self, OptionRepr, OptionType, OwnedOption, UnknownAction};
use crate::wire::Error as WireError;

/// Why a frame could not be examined or edited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EditError {
    /// A header, or what a length field announces, runs past the frame.
    Truncated,
    /// The EtherType is neither IPv4 nor IPv6.
    NotIp,
    /// The operation needs the other IP version (e.g. an IPv6 edit on IPv4,
    /// or a new address of the wrong family).
    WrongVersion,
    /// A header field is impossible (version nibble, IHL, header order).
    Malformed,
    /// The packet is a fragment: its options header cannot be edited.
    Fragmented,
    /// The edit would make a header or the IP packet too long.
    TooLong,
    /// The Destination Options header is malformed.
    Options(WireError),
    /// The Destination Options header carries an option this codec does not
    /// know whose action bits say "discard" (RFC 8200 §4.2).
    UnknownOption {
        /// The option's type.
        option_type: u8,
        /// Offset of the option from the start of the IPv6 header, the
        /// pointer of an ICMPv6 Parameter Problem (code 2).
        pointer: usize,
    },
}

impl fmt::Display for EditError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated => f.write_str("truncated frame"),
            Self::NotIp => f.write_str("not an IP frame"),
            Self::WrongVersion => f.write_str("wrong IP version for this edit"),
            Self::Malformed => f.write_str("malformed IP header"),
            Self::Fragmented => f.write_str("fragment: options cannot be edited"),
            Self::TooLong => f.write_str("edit would exceed a length limit"),
            Self::Options(e) => write!(f, "bad destination options: {e}"),
            Self::UnknownOption {
                option_type,
                pointer,
            } => {
                write!(
                    f,
                    "unknown option 0x{option_type:02x} at {pointer} says discard"
                )
            }
        }
    }
}

impl std::error::Error for EditError {}

/// Where an IP packet is a fragment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fragment {
    /// Not a fragment.
    Whole,
    /// Offset 0 (or an IPv6 atomic fragment): the upper-layer header is here.
    First,
    /// A later fragment: what follows the IP headers is the middle of a datagram.
    Later,
}

/// Where a Destination Options header sits in a frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DestOptsAt {
    /// The header's octets in the frame.
    pub range: Range<usize>,
    /// Offset of the next-header octet that names it (60).
    pub named_at: usize,
}

/// What [`walk`] found in a frame. All offsets are from the frame's start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// IPv4 or IPv6.
    pub version: IpVersion,
    /// Offset of the IP header.
    pub ip_offset: usize,
    /// End of the IP packet per its length field (the frame may go on with
    /// Ethernet padding).
    pub ip_end: usize,
    /// The upper-layer protocol (first header that is not an IPv6 extension
    /// header; for a later fragment, the fragment header's next header).
    pub upper_protocol: IpProtocol,
    /// Offset of the upper-layer header (for a later fragment: of the data).
    pub upper_offset: usize,
    /// Offset of the octet naming [`Self::upper_protocol`] (IPv4 protocol,
    /// IPv6 next header of the fixed header or the last extension header).
    pub protocol_at: usize,
    /// A Destination Options header directly before the upper layer.
    pub dest_opts: Option<DestOptsAt>,
    /// Fragmentation state.
    pub fragment: Fragment,
    /// An IPv6 Routing header with Segments Left > 0: the destination field is
    /// not the final destination, so the upper-layer pseudo-header does not
    /// use it (RFC 8200 §8.1).
    pub routed: bool,
}

/// Which address of the IP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddrField {
    /// The source address.
    Src,
    /// The destination address.
    Dst,
}

/// Find the IP header, the upper layer and our options header in `frame`.
pub fn walk(frame: &[u8]) -> Result<Layout, EditError> {
    let (ethertype, ip) = ethernet(frame)?;
    match ethertype {
        ETHERTYPE_IPV4 => walk_ipv4(frame, ip),
        ETHERTYPE_IPV6 => walk_ipv6(frame, ip),
        _ => Err(EditError::NotIp),
    }
}

/// Insert a Destination Options header carrying `options` directly before
/// the upper-layer header of the IPv6 packet in `frame`, fixing the naming
/// next-header field and the payload length. The upper-layer checksum stays
/// valid: its pseudo-header does not cover extension headers.
///
/// If a Destination Options header is already there, it is **merged**: its
/// options whose type is not among the new ones are kept, in order, then the
/// new options follow; padding is redone. (So inserting a ROSA option again
/// replaces the old one.) An empty `options` with no header present changes
/// nothing.
///
/// Errors: [`EditError::Fragmented`] for a fragment, [`EditError::TooLong`]
/// if the header would exceed 2048 octets or the payload 65535, plus the
/// [`walk`] errors. The frame is untouched on error.
pub fn insert_dest_opts(frame: &mut Vec<u8>, options: &[OptionRepr<'_>]) -> Result<(), EditError> {
    let layout = walk(frame)?;
    if layout.version != IpVersion::Ipv6 {
        return Err(EditError::WrongVersion);
    }
    if layout.fragment != Fragment::Whole {
        return Err(EditError::Fragmented);
    }
    let (header, replace) = match &layout.dest_opts {
        Some(at) => {
            let existing = parse_dest_opts(&frame[at.range.clone()])?;
            let merged: Vec<OptionRepr<'_>> = existing
                .options()
                .filter(|old| {
                    !options
                        .iter()
                        .any(|new| new.option_type() == old.option_type())
                })
                .chain(options.iter().copied())
                .collect();
            (
                emit_dest_opts(layout.upper_protocol, &merged)?,
                at.range.clone(),
            )
        }
        None if options.is_empty() => return Ok(()),
        None => (
            emit_dest_opts(layout.upper_protocol, options)?,
            layout.upper_offset..layout.upper_offset,
        ),
    };
    let payload_len = ipv6_payload_len(frame, layout.ip_offset) - replace.len() + header.len();
    let Ok(payload_len) = u16::try_from(payload_len) else {
        return Err(EditError::TooLong);
    };
    if layout.dest_opts.is_none() {
        frame[layout.protocol_at] = IpProtocol::Ipv6Opts.into();
    }
    set_ipv6_payload_len(frame, layout.ip_offset, payload_len);
    frame.splice(replace, header);
    Ok(())
}

/// Remove the Destination Options header placed directly before the upper
/// layer and return the (non-padding) options it carried, owned; `Ok(None)`
/// if there is none (always so for IPv4). Fixes the naming next-header field
/// and the payload length; the upper-layer checksum stays valid.
///
/// The result is bounded: the header holds at most 2048 octets.
///
/// Errors: [`EditError::UnknownOption`] if it carries an option type other
/// than Pad1, PadN, Sticky and ROSA whose action bits are not "skip" (the
/// caller may answer with ICMPv6 Parameter Problem at `pointer`),
/// [`EditError::Options`] for a malformed header, [`EditError::Fragmented`]
/// if the header sits in a fragment, plus the [`walk`] errors. The frame is
/// untouched on error.
pub fn strip_dest_opts(frame: &mut Vec<u8>) -> Result<Option<Vec<OwnedOption>>, EditError> {
    let layout = walk(frame)?;
    let Some(at) = layout.dest_opts else {
        return Ok(None);
    };
    if layout.fragment != Fragment::Whole {
        return Err(EditError::Fragmented);
    }
    let bytes = &frame[at.range.clone()];
    let header = parse_dest_opts(bytes)?;
    let area = ipv6opt::Packet::new_unchecked(bytes).options();
    let area_offset = at.range.start + 2 - layout.ip_offset;
    let mut options = Vec::new();
    let mut iter = ipv6opt::OptionsIter::new(area);
    loop {
        let pos = iter.position();
        // parse_dest_opts validated the area: errors cannot occur.
        let Some(Ok(opt)) = iter.next() else { break };
        let kind = opt.option_type();
        if let OptionType::Unknown(option_type) = kind {
            if kind.unknown_action() != UnknownAction::Skip {
                return Err(EditError::UnknownOption {
                    option_type,
                    pointer: area_offset + pos,
                });
            }
        }
        options.extend(OwnedOption::from_repr(&opt));
    }
    let payload_len = ipv6_payload_len(frame, layout.ip_offset) - at.range.len();
    frame[at.named_at] = header.next_header().into();
    // payload_len only shrinks, so it still fits u16.
    set_ipv6_payload_len(frame, layout.ip_offset, payload_len as u16);
    frame.drain(at.range);
    Ok(Some(options))
}

/// Replace the source or destination address of the IP packet in `frame`
/// with `new` and return the old one.
///
/// Checksums are fixed incrementally (RFC 1624 eqn. 3): the IPv4 header
/// checksum, and the TCP, UDP or ICMPv6 checksum whenever its pseudo-header
/// covers the changed address. Not touched: IPv4 ICMP (no pseudo-header), a
/// later fragment (no upper-layer header), the destination of an IPv6 packet
/// with a Routing header with segments left (the pseudo-header holds the
/// final destination), and a zero UDP checksum — on IPv4 it means "none"; on
/// IPv6 it is invalid except in RFC 6935 tunnels, and either way the packet
/// goes on as its sender meant it rather than being given a checksum it
/// never had. A UDP checksum that becomes 0 is sent as `0xFFFF`.
///
/// Errors: [`EditError::WrongVersion`] if `new` is of the other family,
/// [`EditError::Truncated`] if the upper-layer header is cut short, plus the
/// [`walk`] errors. The frame is untouched on error.
pub fn rewrite_addr(frame: &mut [u8], field: AddrField, new: IpAddr) -> Result<IpAddr, EditError> {
    let layout = walk(frame)?;
    let ip = layout.ip_offset;
    let mut new_buf = [0_u8; 16];
    let (at, len) = match (layout.version, field, new) {
        (IpVersion::Ipv4, AddrField::Src, IpAddr::V4(a)) => {
            (ip + 12, put(&mut new_buf, &a.octets()))
        }
        (IpVersion::Ipv4, AddrField::Dst, IpAddr::V4(a)) => {
            (ip + 16, put(&mut new_buf, &a.octets()))
        }
        (IpVersion::Ipv6, AddrField::Src, IpAddr::V6(a)) => {
            (ip + 8, put(&mut new_buf, &a.octets()))
        }
        (IpVersion::Ipv6, AddrField::Dst, IpAddr::V6(a)) => {
            (ip + 24, put(&mut new_buf, &a.octets()))
        }
        _ => return Err(EditError::WrongVersion),
    };
    let addr = at..at + len;
    let new_bytes = &new_buf[..len];
    let mut old_buf = [0_u8; 16];
    let old_bytes = &mut old_buf[..len];
    old_bytes.copy_from_slice(&frame[addr.clone()]);
    let old = ip_addr(old_bytes);

    if let Some((c, zero_means_none)) = l4_checksum_at(&layout, field)? {
        let sum = u16::from_be_bytes([frame[c], frame[c + 1]]);
        if !(zero_means_none && sum == 0) {
            let mut sum = checksum_update(sum, old_bytes, new_bytes);
            if zero_means_none && sum == 0 {
                sum = 0xffff;
            }
            frame[c..c + 2].copy_from_slice(&sum.to_be_bytes());
        }
    }
    if layout.version == IpVersion::Ipv4 {
        let c = ip + 10;
        let sum = u16::from_be_bytes([frame[c], frame[c + 1]]);
        let sum = checksum_update(sum, old_bytes, new_bytes);
        frame[c..c + 2].copy_from_slice(&sum.to_be_bytes());
    }
    frame[addr].copy_from_slice(new_bytes);
    Ok(old)
}

use smoltcp::wire::{
    ETHERNET_HEADER_LEN as ETH_HEADER_LEN, IPV4_HEADER_LEN as IPV4_MIN_HEADER_LEN, IPV6_HEADER_LEN,
};
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const ETHERTYPE_VLAN: u16 = 0x8100;
const ETHERTYPE_QINQ: u16 = 0x88a8;
const VLAN_TAG_LEN: usize = 4;
const MAX_VLAN_TAGS: usize = 2;

/// The EtherType after any VLAN tags, and the offset of the payload.
fn ethernet(frame: &[u8]) -> Result<(u16, usize), EditError> {
    let mut at = ETH_HEADER_LEN - 2;
    for _ in 0..=MAX_VLAN_TAGS {
        let Some(t) = frame.get(at..at + 2) else {
            return Err(EditError::Truncated);
        };
        let ethertype = word(t);
        if ethertype != ETHERTYPE_VLAN && ethertype != ETHERTYPE_QINQ {
            return Ok((ethertype, at + 2));
        }
        at += VLAN_TAG_LEN;
    }
    Err(EditError::NotIp)
}

fn walk_ipv4(frame: &[u8], ip: usize) -> Result<Layout, EditError> {
    let Some(h) = frame.get(ip..ip + IPV4_MIN_HEADER_LEN) else {
        return Err(EditError::Truncated);
    };
    if h[0] >> 4 != 4 {
        return Err(EditError::Malformed);
    }
    let header_len = usize::from(h[0] & 0x0f) * 4;
    let total_len = usize::from(word(&h[2..4]));
    if header_len < IPV4_MIN_HEADER_LEN || total_len < header_len {
        return Err(EditError::Malformed);
    }
    let ip_end = ip + total_len;
    if ip_end > frame.len() {
        return Err(EditError::Truncated);
    }
    let flags_offset = word(&h[6..8]);
    let fragment = match (flags_offset & 0x1fff, flags_offset & 0x2000 != 0) {
        (0, false) => Fragment::Whole,
        (0, true) => Fragment::First,
        _ => Fragment::Later,
    };
    Ok(Layout {
        version: IpVersion::Ipv4,
        ip_offset: ip,
        ip_end,
        upper_protocol: IpProtocol::from(h[9]),
        upper_offset: ip + header_len,
        protocol_at: ip + 9,
        dest_opts: None,
        fragment,
        routed: false,
    })
}

fn walk_ipv6(frame: &[u8], ip: usize) -> Result<Layout, EditError> {
    let Some(h) = frame.get(ip..ip + IPV6_HEADER_LEN) else {
        return Err(EditError::Truncated);
    };
    if h[0] >> 4 != 6 {
        return Err(EditError::Malformed);
    }
    let ip_end = ip + IPV6_HEADER_LEN + usize::from(word(&h[4..6]));
    if ip_end > frame.len() {
        return Err(EditError::Truncated);
    }
    let mut next = h[6];
    let mut protocol_at = ip + 6;
    let mut at = ip + IPV6_HEADER_LEN;
    let mut dest_opts = None;
    let mut fragment = Fragment::Whole;
    let mut routed = false;
    // Every extension header is at least 8 octets long, so this ends.
    while is_ipv6_ext_header(next) {
        if next == 0x00 && at != ip + IPV6_HEADER_LEN {
            return Err(EditError::Malformed); // Hop-by-Hop only right after the fixed header
        }
        let Some(ext) = frame.get(at..ip_end).filter(|e| e.len() >= 8) else {
            return Err(EditError::Truncated);
        };
        let len = match next {
            0x2c => 8,                             // Fragment
            0x33 => (usize::from(ext[1]) + 2) * 4, // AH, RFC 4302 §2.2
            _ => (usize::from(ext[1]) + 1) * 8,    // RFC 8200 §4 format
        };
        if ext.len() < len {
            return Err(EditError::Truncated);
        }
        dest_opts = (next == 0x3c).then(|| DestOptsAt {
            range: at..at + len,
            named_at: protocol_at,
        });
        match next {
            0x2b => routed = ext[3] != 0,
            0x2c => {
                fragment = match (word(&ext[2..4]) >> 3, ext[3] & 0x01 != 0) {
                    (0, _) => Fragment::First,
                    _ => Fragment::Later,
                };
            }
            _ => {}
        }
        next = ext[0];
        protocol_at = at;
        at += len;
        if fragment == Fragment::Later {
            break; // the rest is the middle of a datagram
        }
    }
    Ok(Layout {
        version: IpVersion::Ipv6,
        ip_offset: ip,
        ip_end,
        upper_protocol: IpProtocol::from(next),
        upper_offset: at,
        protocol_at,
        dest_opts,
        fragment,
        routed,
    })
}

/// IPv6 extension headers we walk (RFC 8200 §4, RFC 7045): Hop-by-Hop,
/// Routing, Fragment, AH, Destination Options, Mobility, HIP, Shim6. ESP ends
/// the walk (what follows is encrypted); 253/254 count as upper layers, as
/// SPEC §1.1 carries GFF in next header 253.
fn is_ipv6_ext_header(next: u8) -> bool {
    matches!(next, 0x00 | 0x2b | 0x2c | 0x33 | 0x3c | 0x87 | 0x8b | 0x8c)
}

/// Where the upper-layer checksum covering `field` is, and whether it is UDP
/// (zero means "no checksum", a computed zero is sent as `0xFFFF`).
fn l4_checksum_at(layout: &Layout, field: AddrField) -> Result<Option<(usize, bool)>, EditError> {
    if layout.fragment == Fragment::Later || (layout.routed && field == AddrField::Dst) {
        return Ok(None);
    }
    let (offset, is_udp) = match (layout.version, layout.upper_protocol) {
        (_, IpProtocol::Tcp) => (16, false),
        (_, IpProtocol::Udp) => (6, true),
        (IpVersion::Ipv6, IpProtocol::Icmpv6) => (2, false),
        _ => return Ok(None),
    };
    let at = layout.upper_offset + offset;
    if at + 2 > layout.ip_end {
        return Err(EditError::Truncated);
    }
    Ok(Some((at, is_udp)))
}

fn parse_dest_opts(bytes: &[u8]) -> Result<ipv6opt::Repr<'_>, EditError> {
    let packet = ipv6opt::Packet::new_checked(bytes).map_err(EditError::Options)?;
    ipv6opt::Repr::parse(&packet).map_err(EditError::Options)
}

fn emit_dest_opts(next: IpProtocol, options: &[OptionRepr<'_>]) -> Result<Vec<u8>, EditError> {
    let repr = ipv6opt::Repr::new(next, options).map_err(|e| match e {
        WireError::TooLong => EditError::TooLong,
        e => EditError::Options(e),
    })?;
    let mut header = vec![0; repr.buffer_len()];
    repr.emit(&mut ipv6opt::Packet::new_unchecked(&mut header[..]));
    Ok(header)
}

/// The payload length of the IPv6 header at `ip` (walk checked it is there).
fn ipv6_payload_len(frame: &[u8], ip: usize) -> usize {
    usize::from(word(&frame[ip + 4..ip + 6]))
}

fn set_ipv6_payload_len(frame: &mut [u8], ip: usize, len: u16) {
    frame[ip + 4..ip + 6].copy_from_slice(&len.to_be_bytes());
}

/// Copy `src` to the start of `buf`, return its length.
fn put(buf: &mut [u8; 16], src: &[u8]) -> usize {
    buf[..src.len()].copy_from_slice(src);
    src.len()
}

/// An address from its 4 or 16 octets.
fn ip_addr(bytes: &[u8]) -> IpAddr {
    if let Ok(v4) = <[u8; 4]>::try_from(bytes) {
        return IpAddr::from(v4);
    }
    let mut v6 = [0; 16];
    for (o, b) in v6.iter_mut().zip(bytes) {
        *o = *b;
    }
    IpAddr::from(v6)
}

#[cfg(test)]
mod test {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use etherparse::{
        IpHeaders, IpNumber, Ipv4Header, Ipv6Extensions, Ipv6FlowLabel, Ipv6Header,
        Ipv6RawExtHeader, Ipv6RoutingExtensions, NetSlice, PacketBuilder, SlicedPacket,
    };
    use proptest::prelude::*;
    use smoltcp::wire::{IpAddress, Ipv4Packet, TcpPacket, UdpPacket};

    use super::*;

    const MAC_A: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x00, 0x01];
    const MAC_B: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x00, 0x02];
    const V6_A: [u8; 16] = [0xfd, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01];
    const V6_B: [u8; 16] = [0xfd, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02];
    const V6_C: [u8; 16] = [
        0xfd, 0x12, 0x34, 0x56, 0, 0, 0, 0, 0, 0, 0, 0, 0xab, 0xcd, 0, 0x03,
    ];
    const V4_A: [u8; 4] = [0x0a, 0x00, 0x00, 0x01];
    const V4_B: [u8; 4] = [0x0a, 0x00, 0x00, 0x02];
    const V4_C: [u8; 4] = [0x0a, 0x63, 0xfe, 0x07];
    const PAYLOAD: &[u8] = b"GET / HTTP/1.1\r\n\r\n";
    /// Sticky with 4 octets and ROSA with 3, padded with PadN(1) to 16 octets:
    /// the options area (without the first 2 octets) of our header.
    const AREA: [u8; 14] = [
        0x1e, 0x04, 0xde, 0xad, 0xbe, 0xef, 0x3e, 0x03, 0x01, 0x02, 0x03, 0x01, 0x01, 0x00,
    ];

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum L4 {
        Udp,
        Tcp,
        Icmp,
    }

    fn ours() -> [OptionRepr<'static>; 2] {
        [
            OptionRepr::new(OptionType::Sticky, &AREA[2..6]).unwrap(),
            OptionRepr::new(OptionType::Rosa, &AREA[8..11]).unwrap(),
        ]
    }

    fn v6(src: [u8; 16], dst: [u8; 16], exts: Ipv6Extensions) -> IpHeaders {
        let header = Ipv6Header {
            traffic_class: 0,
            flow_label: Ipv6FlowLabel::ZERO,
            payload_length: 0,
            next_header: IpNumber::UDP,
            hop_limit: 64,
            source: src,
            destination: dst,
        };
        IpHeaders::Ipv6(header, exts)
    }

    fn v4(src: [u8; 4], dst: [u8; 4]) -> IpHeaders {
        IpHeaders::Ipv4(
            Ipv4Header::new(0, 64, IpNumber::UDP, src, dst).unwrap(),
            Default::default(),
        )
    }

    fn raw_ext(payload: &[u8]) -> Ipv6RawExtHeader {
        Ipv6RawExtHeader::new_raw(IpNumber::UDP, payload).unwrap()
    }

    /// Hop-by-Hop (PadN 4) and a first Destination Options header (PadN 4).
    fn some_exts() -> Ipv6Extensions {
        Ipv6Extensions {
            hop_by_hop_options: Some(raw_ext(&[0x01, 0x04, 0, 0, 0, 0])),
            destination_options: Some(raw_ext(&[0x01, 0x04, 0, 0, 0, 0])),
            ..Default::default()
        }
    }

    fn build(ip: IpHeaders, l4: L4, payload: &[u8]) -> Vec<u8> {
        let b = PacketBuilder::ethernet2(MAC_A, MAC_B).ip(ip);
        let mut out = Vec::new();
        match l4 {
            L4::Udp => b.udp(0x1234, 0x0035).write(&mut out, payload),
            L4::Tcp => b
                .tcp(0x1234, 0x0050, 0xdead_beef, 0x4000)
                .write(&mut out, payload),
            L4::Icmp => b.icmpv6_echo_request(0x42, 0x07).write(&mut out, payload),
        }
        .unwrap();
        out
    }

    /// Verify every checksum with smoltcp, finding the upper layer with
    /// etherparse (independently of [`walk`]).
    #[track_caller]
    fn assert_checksums(frame: &[u8]) {
        let sliced = SlicedPacket::from_ethernet(frame).unwrap();
        let (src, dst, payload) = match sliced.net.unwrap() {
            NetSlice::Ipv6(ip) => {
                let h = ip.header();
                let (s, d) = (Ipv6Addr::from(h.source()), Ipv6Addr::from(h.destination()));
                (IpAddress::Ipv6(s), IpAddress::Ipv6(d), ip.payload().clone())
            }
            NetSlice::Ipv4(ip) => {
                assert!(Ipv4Packet::new_checked(&frame[14..])
                    .unwrap()
                    .verify_checksum());
                let h = ip.header();
                let (s, d) = (Ipv4Addr::from(h.source()), Ipv4Addr::from(h.destination()));
                (IpAddress::Ipv4(s), IpAddress::Ipv4(d), ip.payload().clone())
            }
            NetSlice::Arp(_) => panic!("not IP"),
        };
        let ok = match payload.ip_number {
            IpNumber::UDP => UdpPacket::new_checked(payload.payload)
                .unwrap()
                .verify_checksum(&src, &dst),
            IpNumber::TCP => TcpPacket::new_checked(payload.payload)
                .unwrap()
                .verify_checksum(&src, &dst),
            IpNumber::IPV6_ICMP => {
                let (IpAddress::Ipv6(s), IpAddress::Ipv6(d)) = (src, dst) else {
                    panic!()
                };
                smoltcp::wire::Icmpv6Packet::new_checked(payload.payload)
                    .unwrap()
                    .verify_checksum(&s, &d)
            }
            other => panic!("unexpected {other:?}"),
        };
        assert!(ok, "upper-layer checksum wrong");
    }

    #[test]
    fn walk_plain() {
        let frame = build(v6(V6_A, V6_B, Default::default()), L4::Udp, PAYLOAD);
        let l = walk(&frame).unwrap();
        assert_eq!(l.version, IpVersion::Ipv6);
        assert_eq!((l.ip_offset, l.upper_offset, l.protocol_at), (14, 54, 20));
        assert_eq!(l.upper_protocol, IpProtocol::Udp);
        assert_eq!(l.ip_end, frame.len());
        assert_eq!(
            (l.dest_opts, l.fragment, l.routed),
            (None, Fragment::Whole, false)
        );

        let frame = build(v4(V4_A, V4_B), L4::Tcp, PAYLOAD);
        let l = walk(&frame).unwrap();
        assert_eq!(l.version, IpVersion::Ipv4);
        assert_eq!((l.ip_offset, l.upper_offset, l.protocol_at), (14, 34, 23));
        assert_eq!(l.upper_protocol, IpProtocol::Tcp);
        assert_eq!(l.ip_end, frame.len());
    }

    #[test]
    fn walk_extension_chain() {
        // HBH, DO, Routing (segments left 1), DO, UDP.
        let mut routing = [0_u8; 22];
        routing[1] = 0x01; // type 0 (deprecated but well-formed), segments left 1
        let exts = Ipv6Extensions {
            routing: Some(Ipv6RoutingExtensions {
                routing: raw_ext(&routing),
                final_destination_options: Some(raw_ext(&AREA)),
            }),
            ..some_exts()
        };
        let frame = build(v6(V6_A, V6_B, exts), L4::Udp, PAYLOAD);
        let l = walk(&frame).unwrap();
        let upper = 54 + 8 + 8 + 24 + 16;
        assert_eq!(l.upper_offset, upper);
        assert_eq!(l.protocol_at, upper - 16);
        assert_eq!(l.upper_protocol, IpProtocol::Udp);
        assert_eq!(
            l.dest_opts,
            Some(DestOptsAt {
                range: upper - 16..upper,
                named_at: 54 + 16
            })
        );
        assert!(l.routed);
        // etherparse agrees on where UDP starts.
        let sliced = SlicedPacket::from_ethernet(&frame).unwrap();
        let ip_payload = sliced.net.unwrap().ip_payload_ref().unwrap().payload;
        assert_eq!(frame.len() - ip_payload.len(), upper);
    }

    #[test]
    fn walk_vlan_and_fragments() {
        let plain = build(v4(V4_A, V4_B), L4::Udp, PAYLOAD);
        let mut tagged = plain[..12].to_vec();
        tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x05]);
        tagged.extend_from_slice(&plain[12..]);
        assert_eq!(walk(&tagged).unwrap().upper_offset, 38);

        let mut frag = plain.clone();
        frag[14 + 6] = 0x20; // MF, offset 0
        assert_eq!(walk(&frag).unwrap().fragment, Fragment::First);
        frag[14 + 6] = 0x00;
        frag[14 + 7] = 0x10; // offset 16 × 8
        assert_eq!(walk(&frag).unwrap().fragment, Fragment::Later);

        let exts = Ipv6Extensions {
            fragment: Some(etherparse::Ipv6FragmentHeader::new(
                IpNumber::UDP,
                etherparse::IpFragOffset::try_new(0x10).unwrap(),
                true,
                0x1234,
            )),
            ..Default::default()
        };
        let frame = build(v6(V6_A, V6_B, exts), L4::Udp, PAYLOAD);
        let l = walk(&frame).unwrap();
        assert_eq!((l.fragment, l.upper_offset), (Fragment::Later, 62));
    }

    #[test]
    fn walk_errors() {
        let frame = build(v6(V6_A, V6_B, some_exts()), L4::Udp, PAYLOAD);
        assert_eq!(walk(&[]), Err(EditError::Truncated));
        assert_eq!(walk(&frame[..13]), Err(EditError::Truncated));
        assert_eq!(walk(&frame[..53]), Err(EditError::Truncated));
        // The payload length says more than the frame has.
        assert_eq!(walk(&frame[..frame.len() - 1]), Err(EditError::Truncated));
        let mut arp = frame.clone();
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(walk(&arp), Err(EditError::NotIp));
        let mut bad = frame.clone();
        bad[14] = 0x45;
        assert_eq!(walk(&bad), Err(EditError::Malformed));
        // An extension header running past the payload.
        let mut bad = frame.clone();
        bad[54 + 8 + 1] = 0x40;
        assert_eq!(walk(&bad), Err(EditError::Truncated));
        // Hop-by-Hop after the Destination Options header.
        let mut bad = frame.clone();
        bad[54 + 8] = 0x00;
        assert_eq!(walk(&bad), Err(EditError::Malformed));
        // IPv4 with IHL 4 / total length below IHL / beyond the frame.
        let v4f = build(v4(V4_A, V4_B), L4::Udp, PAYLOAD);
        let mut bad = v4f.clone();
        bad[14] = 0x44;
        assert_eq!(walk(&bad), Err(EditError::Malformed));
        let mut bad = v4f.clone();
        bad[16..18].copy_from_slice(&[0x00, 0x10]);
        assert_eq!(walk(&bad), Err(EditError::Malformed));
        let mut bad = v4f;
        bad[16..18].copy_from_slice(&[0xff, 0xff]);
        assert_eq!(walk(&bad), Err(EditError::Truncated));
    }

    #[test]
    fn insert_matches_reference() {
        for l4 in [L4::Udp, L4::Tcp, L4::Icmp] {
            for exts in [Ipv6Extensions::default(), some_exts()] {
                let mut frame = build(v6(V6_A, V6_B, exts.clone()), l4, PAYLOAD);
                let original = frame.clone();
                // The same packet with our header, built and checksummed by etherparse.
                let with = if exts.destination_options.is_some() {
                    // etherparse holds one DO before routing only; add a routing
                    // header so its second (final) DO slot sits before the upper layer.
                    continue;
                } else {
                    Ipv6Extensions {
                        destination_options: Some(raw_ext(&AREA)),
                        ..exts
                    }
                };
                let reference = build(v6(V6_A, V6_B, with), l4, PAYLOAD);
                insert_dest_opts(&mut frame, &ours()).unwrap();
                assert_eq!(frame, reference, "{l4:?}");
                assert_checksums(&frame);
                assert_eq!(strip_dest_opts(&mut frame).unwrap().unwrap().len(), 2);
                assert_eq!(frame, original);
            }
        }
    }

    #[test]
    fn insert_after_other_extension_headers() {
        for l4 in [L4::Udp, L4::Tcp, L4::Icmp] {
            let exts = some_exts();
            let mut frame = build(v6(V6_A, V6_B, exts.clone()), l4, PAYLOAD);
            let original = frame.clone();
            insert_dest_opts(&mut frame, &ours()).unwrap();
            // Merged into the existing DO header directly before the upper layer
            // (it held only padding).
            let l = walk(&frame).unwrap();
            let at = l.dest_opts.clone().unwrap();
            assert_eq!(at.range, 62..78);
            assert_eq!(frame[at.range.start + 2..at.range.end], AREA);
            assert_eq!(frame.len(), original.len() + 8);
            assert_checksums(&frame);
            let got = strip_dest_opts(&mut frame).unwrap().unwrap();
            assert_eq!(
                got.iter().map(OwnedOption::option_type).collect::<Vec<_>>(),
                [OptionType::Sticky, OptionType::Rosa]
            );
            // The padding-only header is gone too, so the frame shrank by 8.
            assert_eq!(frame.len(), original.len() - 8);
            assert_checksums(&frame);
            assert_eq!(walk(&frame).unwrap().upper_offset, 62);
        }
    }

    #[test]
    fn insert_merge_replaces_same_type() {
        let mut frame = build(v6(V6_A, V6_B, Default::default()), L4::Udp, PAYLOAD);
        let old = [
            OptionRepr::new(OptionType::Rosa, &[0x09]).unwrap(),
            OptionRepr::new(OptionType::from(0x1f), &[0x07, 0x07]).unwrap(),
        ];
        insert_dest_opts(&mut frame, &old).unwrap();
        insert_dest_opts(&mut frame, &ours()).unwrap();
        assert_checksums(&frame);
        let got = strip_dest_opts(&mut frame).unwrap().unwrap();
        let got: Vec<_> = got
            .iter()
            .map(|o| (o.option_type(), o.data().to_vec()))
            .collect();
        assert_eq!(
            got,
            [
                (OptionType::Unknown(0x1f), vec![0x07, 0x07]),
                (OptionType::Sticky, AREA[2..6].to_vec()),
                (OptionType::Rosa, AREA[8..11].to_vec()),
            ]
        );
        assert_eq!(
            frame,
            build(v6(V6_A, V6_B, Default::default()), L4::Udp, PAYLOAD)
        );
    }

    #[test]
    fn insert_errors_leave_frame() {
        let v4f = build(v4(V4_A, V4_B), L4::Udp, PAYLOAD);
        let mut f = v4f.clone();
        assert_eq!(
            insert_dest_opts(&mut f, &ours()),
            Err(EditError::WrongVersion)
        );
        assert_eq!(f, v4f);
        assert_eq!(strip_dest_opts(&mut f), Ok(None));

        let exts = Ipv6Extensions {
            fragment: Some(etherparse::Ipv6FragmentHeader::new(
                IpNumber::UDP,
                etherparse::IpFragOffset::ZERO,
                true,
                0x1234,
            )),
            ..Default::default()
        };
        let frag = build(v6(V6_A, V6_B, exts), L4::Udp, PAYLOAD);
        let mut f = frag.clone();
        assert_eq!(
            insert_dest_opts(&mut f, &ours()),
            Err(EditError::Fragmented)
        );
        assert_eq!(f, frag);

        // A 64 KiB super-frame: 65527 octets of IPv6 payload, no room for 16 more.
        let big = build(
            v6(V6_A, V6_B, Default::default()),
            L4::Udp,
            &vec![0x5a; 0xffff - 8 - 8],
        );
        let mut f = big.clone();
        assert_eq!(insert_dest_opts(&mut f, &ours()), Err(EditError::TooLong));
        assert_eq!(f, big);
        // ... but room for 8.
        let small = [OptionRepr::new(OptionType::Sticky, &[0x01]).unwrap()];
        insert_dest_opts(&mut f, &small).unwrap();
        assert_eq!(walk(&f).unwrap().ip_end, f.len());
        assert_eq!(ipv6_payload_len(&f, 14), 0xffff);
        assert_checksums(&f);

        // Option data over 255 octets never gets near the frame.
        assert_eq!(
            OptionRepr::new(OptionType::Sticky, &[0; 0x100]),
            Err(WireError::TooLong)
        );
        let list = [OptionRepr::new(OptionType::Sticky, &[0; 0xff]).unwrap(); 9];
        let mut f = frag.clone();
        f[54] = 0x11; // no longer a fragment
        f[20] = 0x11;
        let before = f.clone();
        assert_eq!(insert_dest_opts(&mut f, &list), Err(EditError::TooLong));
        assert_eq!(f, before);
    }

    #[test]
    fn strip_rejects_mandatory_unknown() {
        let base = build(v6(V6_A, V6_B, Default::default()), L4::Udp, PAYLOAD);
        let mut frame = base.clone();
        let opts = [
            OptionRepr::new(OptionType::Sticky, &[0x01]).unwrap(),
            OptionRepr::new(OptionType::from(0x5f), &[]).unwrap(), // 01: discard
        ];
        insert_dest_opts(&mut frame, &opts).unwrap();
        let before = frame.clone();
        assert_eq!(
            strip_dest_opts(&mut frame),
            Err(EditError::UnknownOption {
                option_type: 0x5f,
                pointer: 40 + 2 + 3
            })
        );
        assert_eq!(frame, before);

        // Non-zero PadN is malformed.
        let mut frame = base.clone();
        insert_dest_opts(
            &mut frame,
            &[OptionRepr::new(OptionType::Sticky, &[]).unwrap()],
        )
        .unwrap();
        frame[54 + 6] = 0x01; // inside PadN(0)
        let before = frame.clone();
        assert_eq!(
            strip_dest_opts(&mut frame),
            Err(EditError::Options(WireError::Malformed))
        );
        assert_eq!(frame, before);

        // No header: nothing to strip.
        let mut frame = base.clone();
        assert_eq!(strip_dest_opts(&mut frame), Ok(None));
        assert_eq!(frame, base);
    }

    #[test]
    fn rewrite_matches_rebuild() {
        for l4 in [L4::Udp, L4::Tcp, L4::Icmp] {
            for exts in [Ipv6Extensions::default(), some_exts()] {
                let mut frame = build(v6(V6_A, V6_B, exts.clone()), l4, PAYLOAD);
                let old = rewrite_addr(&mut frame, AddrField::Src, V6_C.into()).unwrap();
                assert_eq!(old, IpAddr::from(V6_A));
                assert_eq!(
                    frame,
                    build(v6(V6_C, V6_B, exts.clone()), l4, PAYLOAD),
                    "{l4:?}"
                );
                rewrite_addr(&mut frame, AddrField::Dst, V6_A.into()).unwrap();
                assert_eq!(
                    frame,
                    build(v6(V6_C, V6_A, exts.clone()), l4, PAYLOAD),
                    "{l4:?}"
                );
                assert_checksums(&frame);
            }
        }
        for l4 in [L4::Udp, L4::Tcp] {
            let mut frame = build(v4(V4_A, V4_B), l4, PAYLOAD);
            rewrite_addr(&mut frame, AddrField::Dst, V4_C.into()).unwrap();
            assert_eq!(frame, build(v4(V4_A, V4_C), l4, PAYLOAD));
            rewrite_addr(&mut frame, AddrField::Src, V4_B.into()).unwrap();
            assert_eq!(frame, build(v4(V4_B, V4_C), l4, PAYLOAD));
            assert_checksums(&frame);
        }
    }

    #[test]
    fn rewrite_udp_zero_checksums() {
        // IPv4: zero means "no checksum" and stays zero; the header checksum is fixed.
        let mut frame = build(v4(V4_A, V4_B), L4::Udp, PAYLOAD);
        frame[34 + 6..34 + 8].fill(0);
        rewrite_addr(&mut frame, AddrField::Src, V4_C.into()).unwrap();
        assert_eq!(frame[34 + 6..34 + 8], [0, 0]);
        assert!(Ipv4Packet::new_checked(&frame[14..])
            .unwrap()
            .verify_checksum());
        // IPv6: zero (invalid outside RFC 6935 tunnels) is left as the sender made it.
        let mut frame = build(v6(V6_A, V6_B, Default::default()), L4::Udp, PAYLOAD);
        frame[54 + 6..54 + 8].fill(0);
        rewrite_addr(&mut frame, AddrField::Dst, V6_C.into()).unwrap();
        assert_eq!(frame[54 + 6..54 + 8], [0, 0]);
    }

    #[test]
    fn rewrite_udp_computed_zero_is_sent_as_ffff() {
        // Choose the last payload word so the checksum with V6_C as source is 0.
        let mut payload = PAYLOAD.to_vec();
        payload.extend_from_slice(&[0, 0]);
        let probe = build(v6(V6_C, V6_B, Default::default()), L4::Udp, &payload);
        let c = u16::from_be_bytes([probe[60], probe[61]]);
        let n = payload.len();
        payload[n - 2..].copy_from_slice(&c.to_be_bytes());
        let want = build(v6(V6_C, V6_B, Default::default()), L4::Udp, &payload);
        assert_eq!(want[60..62], [0xff, 0xff]);
        let mut frame = build(v6(V6_A, V6_B, Default::default()), L4::Udp, &payload);
        rewrite_addr(&mut frame, AddrField::Src, V6_C.into()).unwrap();
        assert_eq!(frame, want);
    }

    #[test]
    fn rewrite_special_cases() {
        // Routing header with segments left: the pseudo-header holds the final
        // destination, so a destination rewrite leaves the UDP checksum alone.
        let mut routing = [0_u8; 22];
        routing[1] = 0x01;
        let exts = Ipv6Extensions {
            routing: Some(Ipv6RoutingExtensions {
                routing: raw_ext(&routing),
                final_destination_options: None,
            }),
            ..Default::default()
        };
        let mut frame = build(v6(V6_A, V6_B, exts), L4::Udp, PAYLOAD);
        let csum = 54 + 24 + 6;
        let before = frame[csum..csum + 2].to_vec();
        rewrite_addr(&mut frame, AddrField::Dst, V6_C.into()).unwrap();
        assert_eq!(frame[csum..csum + 2], before);
        rewrite_addr(&mut frame, AddrField::Src, V6_C.into()).unwrap();
        assert_ne!(frame[csum..csum + 2], before);

        // Wrong family.
        let base = build(v4(V4_A, V4_B), L4::Tcp, PAYLOAD);
        let mut frame = base.clone();
        assert_eq!(
            rewrite_addr(&mut frame, AddrField::Src, V6_C.into()),
            Err(EditError::WrongVersion)
        );
        assert_eq!(frame, base);

        // A TCP header cut short (IP total length shrunk to 20 + 10).
        let mut frame = base.clone();
        frame[16..18].copy_from_slice(&[0x00, 0x1e]);
        let before = frame.clone();
        assert_eq!(
            rewrite_addr(&mut frame, AddrField::Src, V4_C.into()),
            Err(EditError::Truncated)
        );
        assert_eq!(frame, before);

        // A later IPv4 fragment: only the header checksum changes with the address.
        let mut frame = base.clone();
        let flags = [frame[20], frame[21]];
        frame[20..22].copy_from_slice(&[0x00, 0x10]);
        let hc = u16::from_be_bytes([frame[24], frame[25]]);
        let hc = checksum_update(hc, &flags, &[0x00, 0x10]);
        frame[24..26].copy_from_slice(&hc.to_be_bytes());
        let before = frame.clone();
        rewrite_addr(&mut frame, AddrField::Src, V4_C.into()).unwrap();
        assert_eq!(frame[34..], before[34..]);
        assert!(Ipv4Packet::new_checked(&frame[14..])
            .unwrap()
            .verify_checksum());
    }

    fn naive_sum(data: &[u8], initial: u32) -> u16 {
        use crate::wire::checksum::fold;
        let mut sum = u64::from(initial);
        for c in data.chunks(2) {
            sum += u64::from(word(c));
        }
        fold(sum)
    }

    fn arb_l4() -> impl Strategy<Value = L4> {
        prop_oneof![Just(L4::Udp), Just(L4::Tcp), Just(L4::Icmp)]
    }

    fn arb_frame() -> impl Strategy<Value = Vec<u8>> {
        (
            any::<[u8; 16]>(),
            any::<[u8; 16]>(),
            any::<[u8; 4]>(),
            any::<[u8; 4]>(),
            arb_l4(),
            any::<bool>(),
            any::<bool>(),
            proptest::collection::vec(any::<u8>(), 0..300),
        )
            .prop_map(|(s6, d6, s4, d4, l4, ipv6, exts, payload)| {
                if ipv6 {
                    let exts = if exts {
                        some_exts()
                    } else {
                        Default::default()
                    };
                    build(v6(s6, d6, exts), l4, &payload)
                } else {
                    build(
                        v4(s4, d4),
                        if l4 == L4::Icmp { L4::Udp } else { l4 },
                        &payload,
                    )
                }
            })
    }

    proptest! {
        #[test]
        fn sum_matches_naive(
            data in proptest::collection::vec(any::<u8>(), 0..200),
            initial in any::<u32>(),
        ) {
            prop_assert_eq!(ones_complement_sum(&data, initial), naive_sum(&data, initial));
        }

        #[test]
        fn rewrite_matches_recomputation(
            s6 in any::<[u8; 16]>(), d6 in any::<[u8; 16]>(), n6 in any::<[u8; 16]>(),
            s4 in any::<[u8; 4]>(), d4 in any::<[u8; 4]>(), n4 in any::<[u8; 4]>(),
            l4 in arb_l4(),
            exts in any::<bool>(),
            dst in any::<bool>(),
            payload in proptest::collection::vec(any::<u8>(), 0..300),
        ) {
            let field = if dst { AddrField::Dst } else { AddrField::Src };
            let exts = if exts { some_exts() } else { Ipv6Extensions::default() };
            let mut frame = build(v6(s6, d6, exts.clone()), l4, &payload);
            rewrite_addr(&mut frame, field, n6.into()).unwrap();
            let (s, d) = if dst { (s6, n6) } else { (n6, d6) };
            prop_assert_eq!(&frame, &build(v6(s, d, exts), l4, &payload));

            let l4 = if l4 == L4::Icmp { L4::Udp } else { l4 };
            let mut frame = build(v4(s4, d4), l4, &payload);
            rewrite_addr(&mut frame, field, n4.into()).unwrap();
            let (s, d) = if dst { (s4, n4) } else { (n4, d4) };
            prop_assert_eq!(&frame, &build(v4(s, d), l4, &payload));
        }

        #[test]
        fn insert_strip_round_trip(
            frame in arb_frame(),
            raw in proptest::collection::vec(ipv6opt::test::arb_option(), 0..4),
        ) {
            let opts: Vec<_> = raw
                .iter()
                .map(|(t, d)| OptionRepr::new(OptionType::from(*t), d).unwrap())
                .collect();
            let mut edited = frame.clone();
            match insert_dest_opts(&mut edited, &opts) {
                Ok(()) => {
                    assert_checksums(&edited);
                    let had = walk(&frame).unwrap().dest_opts.is_some();
                    let mandatory = opts.iter().any(|o| {
                        matches!(o.option_type(), OptionType::Unknown(_))
                            && o.option_type().unknown_action() != UnknownAction::Skip
                    });
                    if mandatory {
                        let before = edited.clone();
                        let err = strip_dest_opts(&mut edited).unwrap_err();
                        let is_unknown = matches!(err, EditError::UnknownOption { .. });
                        prop_assert!(is_unknown);
                        prop_assert_eq!(edited, before);
                        return Ok(());
                    }
                    let got = strip_dest_opts(&mut edited).unwrap().unwrap_or_default();
                    let got: Vec<_> = got.iter().map(OwnedOption::as_repr).collect();
                    if !had {
                        prop_assert_eq!(got, opts);
                        prop_assert_eq!(edited, frame);
                    }
                }
                Err(e) => {
                    prop_assert_eq!(e, EditError::WrongVersion);
                    prop_assert_eq!(edited, frame);
                }
            }
        }

        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            crate::fuzz::shim_edit(&bytes);
        }

        #[test]
        fn mutated_frames_never_panic(
            frame in arb_frame(),
            selector in any::<u8>(),
            flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
            cut in any::<prop::sample::Index>(),
        ) {
            let mut bytes = vec![selector];
            bytes.extend_from_slice(&frame);
            for (at, v) in flips {
                let i = 1 + at.index(frame.len());
                bytes[i] = v;
            }
            crate::fuzz::shim_edit(&bytes);
            crate::fuzz::shim_edit(&bytes[..1 + cut.index(frame.len())]);
        }
    }
}
