//! The Generic Forwarding Format (RFC 8677 §6.1, Figure 9) and pathIDs, as
//! SPEC §1.1 profiles them.
//!
//! Between nSFFs, NRs and the `fwd` fabric, packets travel in IPv6 with next
//! header [`NEXT_HEADER`] (253, RFC 3692 experimental) and hop limit
//! [`HOP_LIMIT`]; the source address ‖ destination address is the 256-bit
//! [`PathId`], the OR of the link IDs along the path (LIPSIN style). The IPv6
//! payload is a GFF packet:
//!
//! | field  | bits       | notes                                                |
//! |--------|------------|------------------------------------------------------|
//! | Length | 12         | pathID length in bits; 256 here ([`PATH_ID_BITS`])    |
//! | Type   | 4          | [`MessageType`] **[ext: the RFC has no type]**         |
//! | PathID | Length     | a copy of src ‖ dst ([`Repr::check_addrs`])           |
//! | payload| rest       | per type: [`super::nsff`] (1, 2), [`super::nr`] (3–8) |
//!
//! Limits: the view ([`Packet`]) accepts any Length that is a whole number of
//! octets (up to 4088 bits); [`Repr`] only 256, the pathID our IPv6 addresses
//! can carry.

use core::fmt;
use core::net::Ipv6Addr;
use core::ops::{BitAnd, BitAndAssign, BitOr, BitOrAssign};

use super::{Error, Result};

/// IPv6 next header of GFF packets (RFC 3692 experimental value).
pub const NEXT_HEADER: u8 = 253;

/// Hop limit GFF packets start with.
pub const HOP_LIMIT: u8 = 64;

/// Bits in a pathID (and link IDs 0..=255).
pub const PATH_ID_BITS: usize = 256;

/// Octets in a pathID.
pub const PATH_ID_LEN: usize = PATH_ID_BITS / 8;

/// Octets [`Repr::emit`] writes: length/type and a 256-bit pathID.
pub const HEADER_LEN: usize = 2 + PATH_ID_LEN;

/// A 256-bit pathID: a set of link IDs 0..=255.
///
/// Bit `i` is in octet `i / 8`, mask `0x80 >> (i % 8)` (network bit order:
/// bit 0 is the first bit of the IPv6 source address, bit 255 the last bit
/// of the destination).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct PathId([u8; PATH_ID_LEN]);

impl PathId {
    /// The empty pathID: no links.
    pub const ZERO: Self = Self([0; PATH_ID_LEN]);

    /// A pathID from its 32 octets.
    pub const fn from_bytes(bytes: [u8; PATH_ID_LEN]) -> Self {
        Self(bytes)
    }

    /// A pathID from a slice; `None` unless it is exactly 32 octets.
    pub fn from_slice(bytes: &[u8]) -> Option<Self> {
        bytes.try_into().ok().map(Self)
    }

    /// The pathID carried by an IPv6 packet's source and destination.
    pub fn from_addrs(src: &Ipv6Addr, dst: &Ipv6Addr) -> Self {
        let mut b = [0; PATH_ID_LEN];
        b[..16].copy_from_slice(&src.octets());
        b[16..].copy_from_slice(&dst.octets());
        Self(b)
    }

    /// The IPv6 source and destination that carry this pathID.
    pub fn to_addrs(&self) -> (Ipv6Addr, Ipv6Addr) {
        let mut src = [0; 16];
        let mut dst = [0; 16];
        src.copy_from_slice(&self.0[..16]);
        dst.copy_from_slice(&self.0[16..]);
        (Ipv6Addr::from(src), Ipv6Addr::from(dst))
    }

    /// The pathID with link `link` only.
    pub const fn link(link: u8) -> Self {
        Self::ZERO.with(link)
    }

    /// This pathID plus link `link`.
    pub const fn with(mut self, link: u8) -> Self {
        self.0[link as usize / 8] |= 0x80 >> (link % 8);
        self
    }

    /// The 32 octets.
    pub const fn as_bytes(&self) -> &[u8; PATH_ID_LEN] {
        &self.0
    }

    /// Whether link `link` is set.
    pub const fn bit(&self, link: u8) -> bool {
        self.0[link as usize / 8] & (0x80 >> (link % 8)) != 0
    }

    /// Set link `link`.
    pub fn set_bit(&mut self, link: u8) {
        self.0[usize::from(link / 8)] |= 0x80 >> (link % 8);
    }

    /// Clear link `link`.
    pub fn clear_bit(&mut self, link: u8) {
        self.0[usize::from(link / 8)] &= !(0x80 >> (link % 8));
    }

    /// Whether every link of `other` is set here (the fabric's AND/CMP match:
    /// `self & other == other`).
    pub fn contains(&self, other: &Self) -> bool {
        self.0.iter().zip(&other.0).all(|(a, b)| a & b == *b)
    }

    /// Whether any link of `other` is set here.
    pub fn intersects(&self, other: &Self) -> bool {
        self.0.iter().zip(&other.0).any(|(a, b)| a & b != 0)
    }

    /// Whether no link is set.
    pub fn is_zero(&self) -> bool {
        self.0 == [0; PATH_ID_LEN]
    }

    /// Number of links set.
    pub fn count(&self) -> u32 {
        self.0.iter().map(|b| b.count_ones()).sum()
    }

    /// The links set, in increasing order.
    pub fn links(&self) -> impl Iterator<Item = u8> + '_ {
        (0..=u8::MAX).filter(|&i| self.bit(i))
    }
}

impl BitOr for PathId {
    type Output = Self;

    fn bitor(mut self, rhs: Self) -> Self {
        self |= rhs;
        self
    }
}

impl BitOrAssign for PathId {
    fn bitor_assign(&mut self, rhs: Self) {
        for (a, b) in self.0.iter_mut().zip(rhs.0) {
            *a |= b;
        }
    }
}

impl BitAnd for PathId {
    type Output = Self;

    fn bitand(mut self, rhs: Self) -> Self {
        self &= rhs;
        self
    }
}

impl BitAndAssign for PathId {
    fn bitand_assign(&mut self, rhs: Self) {
        for (a, b) in self.0.iter_mut().zip(rhs.0) {
            *a &= b;
        }
    }
}

impl fmt::Debug for PathId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PathId({self})")
    }
}

/// Hex, 64 digits.
impl fmt::Display for PathId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

open_enum! {
    /// The GFF Type field (4 bits) **\[ext\]**, an open enum.
    ///
    /// `Unknown`: Any other value (0, 9..=15). Only the low 4 bits go on the wire.
    pub enum MessageType: u8 {
        /// 1: nSFF-to-nSFF transport data ([`super::nsff`]).
        TransportData = 1,
        /// 2: nSFF-to-nSFF transport NACK ([`super::nsff`]).
        TransportNack = 2,
        /// 3: NR registration ([`super::nr`]).
        Registration = 3,
        /// 4: path request.
        PathRequest = 4,
        /// 5: path response.
        PathResponse = 5,
        /// 6: path update.
        PathUpdate = 6,
        /// 7: link event, fwd → NR **\[ext\]**.
        LinkEvent = 7,
        /// 8: link hello, fwd ↔ fwd and fwd ↔ nSFF **\[ext\]**.
        LinkHello = 8,
    }
}

impl fmt::Display for MessageType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TransportData => f.write_str("transport-data"),
            Self::TransportNack => f.write_str("transport-nack"),
            Self::Registration => f.write_str("registration"),
            Self::PathRequest => f.write_str("path-request"),
            Self::PathResponse => f.write_str("path-response"),
            Self::PathUpdate => f.write_str("path-update"),
            Self::LinkEvent => f.write_str("link-event"),
            Self::LinkHello => f.write_str("link-hello"),
            Self::Unknown(v) => write!(f, "{v}"),
        }
    }
}

// GFF, RFC 8677 Figure 9 with our type nibble:
//
//  0                   1                   2                   3
//  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
// |    Length (bits of pathID)    | Type  |     PathID ...        |
// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+                       +
// ~                  PathID (Length / 8 octets)                   ~
// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
// ~                            Payload                            ~
// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
mod field {
    #![allow(non_snake_case)]

    use core::ops::Range;

    pub(super) const LEN_TYPE: Range<usize> = 0..2;
    pub(super) const fn PATH_ID(bits: u16) -> Range<usize> {
        2..2 + bits as usize / 8
    }
}

/// A read/write view of a GFF packet (the IPv6 payload).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wrap a buffer without checking it; see [`Self::check_len`].
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// [`Self::new_unchecked`] followed by [`Self::check_len`].
    pub fn new_checked(buffer: T) -> Result<Self> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Ensure no accessor panics: the buffer holds the length/type octets
    /// and the whole pathID ([`Error::Truncated`]); the Length is a whole
    /// number of octets ([`Error::BadLength`]). Invalidated by
    /// [`Self::set_path_len`].
    pub fn check_len(&self) -> Result<()> {
        let data = self.buffer.as_ref();
        if data.len() < field::LEN_TYPE.end {
            return Err(Error::Truncated);
        }
        let bits = self.path_len();
        if bits % 8 != 0 {
            return Err(Error::BadLength);
        }
        if data.len() < field::PATH_ID(bits).end {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Give the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn word0(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::LEN_TYPE];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// The Length field: pathID bits.
    pub fn path_len(&self) -> u16 {
        self.word0() >> 4
    }

    /// The Type field.
    pub fn msg_type(&self) -> MessageType {
        MessageType::from((self.word0() & 0x0f) as u8)
    }

    /// Octets before the payload.
    pub fn header_len(&self) -> usize {
        field::PATH_ID(self.path_len()).end
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    /// The pathID octets.
    pub fn path_id(&self) -> &'a [u8] {
        &self.buffer.as_ref()[field::PATH_ID(self.path_len())]
    }

    /// The payload: everything after the pathID.
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn set_word0(&mut self, w: u16) {
        self.buffer.as_mut()[field::LEN_TYPE].copy_from_slice(&w.to_be_bytes());
    }

    /// Set the Length field (low 12 bits of `bits`).
    pub fn set_path_len(&mut self, bits: u16) {
        let w = (bits << 4) | (self.word0() & 0x0f);
        self.set_word0(w);
    }

    /// Set the Type field (low 4 bits).
    pub fn set_msg_type(&mut self, value: MessageType) {
        let w = (self.word0() & 0xfff0) | u16::from(u8::from(value) & 0x0f);
        self.set_word0(w);
    }

    /// The pathID octets, mutably.
    pub fn path_id_mut(&mut self) -> &mut [u8] {
        let range = field::PATH_ID(self.path_len());
        &mut self.buffer.as_mut()[range]
    }

    /// The payload, mutably.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let start = self.header_len();
        &mut self.buffer.as_mut()[start..]
    }
}

/// A GFF header, high level; the payload stays in the packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// What the payload is.
    pub msg_type: MessageType,
    /// The pathID.
    pub path_id: PathId,
}

impl Repr {
    /// Parse the header. [`Error::BadLength`] for a pathID other than 256 bits.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Self> {
        packet.check_len()?;
        let Some(path_id) = PathId::from_slice(packet.path_id()) else {
            return Err(Error::BadLength);
        };
        Ok(Self {
            msg_type: packet.msg_type(),
            path_id,
        })
    }

    /// Whether the pathID is the one the IPv6 header carries (SPEC §1.1:
    /// mismatch = drop); [`Error::Malformed`] otherwise.
    pub fn check_addrs(&self, src: &Ipv6Addr, dst: &Ipv6Addr) -> Result<()> {
        if self.path_id != PathId::from_addrs(src, dst) {
            return Err(Error::Malformed);
        }
        Ok(())
    }

    /// Octets [`Self::emit`] writes: [`HEADER_LEN`].
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Write the header at the start of `packet`; the payload follows it.
    ///
    /// # Panics
    /// If the buffer is shorter than [`Self::buffer_len`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_word0(((PATH_ID_BITS as u16) << 4) | u16::from(u8::from(self.msg_type) & 0x0f));
        packet.path_id_mut().copy_from_slice(&self.path_id.0);
    }
}

/// Octets of the Ethernet and IPv6 headers before a GFF header.
pub const GFF_OFFSET: usize = 14 + 40;

/// An Ethernet frame carrying a GFF packet (SPEC §1.1): IPv6 with source ‖
/// destination = `path`, next header 253, then the GFF header and `payload`
/// (cut at 65 535 − [`HEADER_LEN`] octets, the most an IPv6 payload length
/// can say). Every GFF speaker (fwd, nr, nsff) builds its frames here.
pub fn ethernet_frame(
    dst: smoltcp::wire::EthernetAddress,
    src: smoltcp::wire::EthernetAddress,
    path: PathId,
    msg_type: MessageType,
    hop_limit: u8,
    payload: &[u8],
) -> Vec<u8> {
    let payload = &payload[..payload.len().min(usize::from(u16::MAX) - HEADER_LEN)];
    let gff_len = HEADER_LEN + payload.len();
    let mut f = Vec::with_capacity(GFF_OFFSET + gff_len);
    f.extend_from_slice(&dst.0);
    f.extend_from_slice(&src.0);
    f.extend_from_slice(&[0x86, 0xdd]);
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    // At most u16::MAX: the payload was cut above.
    f.extend_from_slice(&(gff_len as u16).to_be_bytes());
    f.extend_from_slice(&[NEXT_HEADER, hop_limit]);
    f.extend_from_slice(path.as_bytes());
    f.resize(GFF_OFFSET + HEADER_LEN, 0);
    let repr = Repr {
        msg_type,
        path_id: path,
    };
    repr.emit(&mut Packet::new_unchecked(&mut f[GFF_OFFSET..]));
    f.extend_from_slice(payload);
    f
}

/// A GFF packet in an Ethernet frame, parsed ([`parse_ethernet_frame`]):
/// what a GFF speaker reads off a received frame, with no offsets of its
/// own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EthernetGff {
    /// The Ethernet destination.
    pub dst_mac: smoltcp::wire::EthernetAddress,
    /// The Ethernet source (a link hello's sender).
    pub src_mac: smoltcp::wire::EthernetAddress,
    /// The IPv6 hop limit.
    pub hop_limit: u8,
    /// The GFF header, its pathID checked against the IPv6 addresses.
    pub repr: Repr,
    /// Where the GFF payload sits in the frame.
    pub payload: core::ops::Range<usize>,
    /// Where the IPv6 packet ends (Ethernet may pad after it).
    pub ip_end: usize,
}

/// Why a frame that is IPv6 with next header 253 is no GFF packet we take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameError {
    /// Shorter than its IPv6 header or than its payload length says.
    Truncated,
    /// The GFF header does not parse (or is not 256 bits of pathID).
    Malformed,
    /// The GFF pathID is not the IPv6 source ‖ destination.
    PathMismatch,
}

impl FrameError {
    /// The drop reason (`drop.<role>_<reason>` is the caller's).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Truncated => "gff_truncated",
            Self::Malformed => "gff_malformed",
            Self::PathMismatch => "gff_path_mismatch",
        }
    }
}

/// The GFF packet in an Ethernet `frame`: `None` when the frame is not
/// IPv6 with next header [`NEXT_HEADER`] (not ours to judge; the IPv6
/// version nibble is not looked at), else the parsed view or why it is
/// refused.
pub fn parse_ethernet_frame(frame: &[u8]) -> Option<core::result::Result<EthernetGff, FrameError>> {
    use smoltcp::wire::{EthernetFrame, EthernetProtocol};
    let eth = EthernetFrame::new_checked(frame).ok()?;
    if eth.ethertype() != EthernetProtocol::Ipv6 || *eth.payload().get(6)? != NEXT_HEADER {
        return None;
    }
    Some(parse_ipv6(frame, eth.dst_addr(), eth.src_addr()))
}

fn parse_ipv6(
    frame: &[u8],
    dst_mac: smoltcp::wire::EthernetAddress,
    src_mac: smoltcp::wire::EthernetAddress,
) -> core::result::Result<EthernetGff, FrameError> {
    use smoltcp::wire::{EthernetFrame, Ipv6Packet};
    let ip_at = EthernetFrame::<&[u8]>::header_len();
    let ip = Ipv6Packet::new_checked(&frame[ip_at..]).map_err(|_| FrameError::Truncated)?;
    let start = ip_at + ip.header_len();
    let end = start + usize::from(ip.payload_len());
    let pkt = Packet::new_checked(&frame[start..end]).map_err(|_| FrameError::Malformed)?;
    let repr = Repr::parse(&pkt).map_err(|_| FrameError::Malformed)?;
    repr.check_addrs(&ip.src_addr(), &ip.dst_addr())
        .map_err(|_| FrameError::PathMismatch)?;
    Ok(EthernetGff {
        dst_mac,
        src_mac,
        hop_limit: ip.hop_limit(),
        repr,
        payload: start + pkt.header_len()..end,
        ip_end: end,
    })
}

#[cfg(test)]
mod test {
    use proptest::prelude::*;

    use super::*;

    /// Length 256 (0x100), type 4 (path request); pathID links 0, 15 and
    /// 255; payload `0xab 0xcd`.
    static PACKET_BYTES: [u8; 36] = [
        0x10, 0x04, // length 0x100 << 4 | type 4
        0x80, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // pathID = IPv6 source
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, //
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // IPv6 destination
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, //
        0xab, 0xcd, // payload
    ];

    fn path() -> PathId {
        PathId::link(0).with(15).with(255)
    }

    #[test]
    fn path_id_bits() {
        let p = path();
        assert!(p.bit(0) && p.bit(15) && p.bit(255));
        assert!(!p.bit(1) && !p.bit(254));
        assert_eq!(p.count(), 3);
        assert_eq!(p.links().collect::<Vec<_>>(), [0, 15, 255]);
        assert!(p.contains(&PathId::link(15)));
        assert!(p.contains(&(PathId::link(0) | PathId::link(255))));
        assert!(!p.contains(&PathId::link(1).with(0)));
        assert!(p.intersects(&PathId::link(1).with(0)));
        assert!(p.contains(&PathId::ZERO));
        assert_eq!(p & PathId::link(15).with(16), PathId::link(15));
        let mut q = p;
        q.clear_bit(15);
        q.set_bit(16);
        assert_eq!(q, PathId::link(0).with(16).with(255));
        let (src, dst) = p.to_addrs();
        assert_eq!(src, "8001::".parse::<Ipv6Addr>().unwrap());
        assert_eq!(dst, "::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(PathId::from_addrs(&src, &dst), p);
        assert_eq!(PathId::from_slice(&[0; 31]), None);
        assert!(PathId::ZERO.is_zero());
        assert_eq!(
            p.to_string(),
            "8001000000000000000000000000000000000000000000000000000000000001"
        );
    }

    #[test]
    fn test_deconstruct() {
        let packet = Packet::new_checked(&PACKET_BYTES[..]).unwrap();
        assert_eq!(packet.path_len(), 256);
        assert_eq!(packet.msg_type(), MessageType::PathRequest);
        assert_eq!(packet.header_len(), 34);
        assert_eq!(packet.path_id(), path().as_bytes());
        assert_eq!(packet.payload(), &[0xab, 0xcd]);
    }

    #[test]
    fn test_construct() {
        let mut bytes = vec![0xa5; 36];
        let mut packet = Packet::new_unchecked(&mut bytes);
        packet.set_path_len(256);
        packet.set_msg_type(MessageType::PathRequest);
        packet.path_id_mut().copy_from_slice(path().as_bytes());
        packet.payload_mut().copy_from_slice(&[0xab, 0xcd]);
        assert_eq!(bytes, PACKET_BYTES);
    }

    #[test]
    fn test_parse() {
        let repr = Repr::parse(&Packet::new_checked(&PACKET_BYTES[..]).unwrap()).unwrap();
        assert_eq!(
            repr,
            Repr {
                msg_type: MessageType::PathRequest,
                path_id: path(),
            }
        );
        let (src, dst) = path().to_addrs();
        assert_eq!(repr.check_addrs(&src, &dst), Ok(()));
        assert_eq!(repr.check_addrs(&dst, &src), Err(Error::Malformed));
    }

    #[test]
    fn test_emit() {
        let repr = Repr {
            msg_type: MessageType::PathRequest,
            path_id: path(),
        };
        let mut bytes = vec![0xa5; repr.buffer_len() + 2];
        let mut packet = Packet::new_unchecked(&mut bytes);
        repr.emit(&mut packet);
        packet.payload_mut().copy_from_slice(&[0xab, 0xcd]);
        assert_eq!(bytes, PACKET_BYTES);
    }

    #[test]
    fn truncated_and_impossible() {
        assert_eq!(Packet::new_checked(&[][..]).unwrap_err(), Error::Truncated);
        assert_eq!(
            Packet::new_checked(&PACKET_BYTES[..1]).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(
            Packet::new_checked(&PACKET_BYTES[..33]).unwrap_err(),
            Error::Truncated
        );
        // 12 bits: not whole octets.
        assert_eq!(
            Packet::new_checked(&[0x00, 0xc1, 0, 0][..]).unwrap_err(),
            Error::BadLength
        );
        // 16 bits: a valid view, but not our pathID.
        let short = [0x01, 0x01, 0xff, 0xff, 0x00];
        let packet = Packet::new_checked(&short[..]).unwrap();
        assert_eq!(packet.path_id(), &[0xff, 0xff]);
        assert_eq!(Repr::parse(&packet), Err(Error::BadLength));
    }

    #[test]
    fn unknown_survives() {
        let mut bytes = PACKET_BYTES;
        bytes[1] = 0x0f;
        let repr = Repr::parse(&Packet::new_checked(&bytes[..]).unwrap()).unwrap();
        assert_eq!(repr.msg_type, MessageType::Unknown(15));
        let mut out = vec![0xa5; bytes.len()];
        let mut packet = Packet::new_unchecked(&mut out);
        repr.emit(&mut packet);
        packet.payload_mut().copy_from_slice(&[0xab, 0xcd]);
        assert_eq!(out, bytes);
        for v in 0..=0xff_u8 {
            assert_eq!(u8::from(MessageType::from(v)), v);
        }
    }

    proptest! {
        #[test]
        fn emit_parse_round_trip(
            t in 0_u8..=0x0f,
            bytes in any::<[u8; 32]>(),
            payload in proptest::collection::vec(any::<u8>(), 0..16),
        ) {
            let repr = Repr { msg_type: MessageType::from(t), path_id: PathId::from_bytes(bytes) };
            let mut buf = vec![0xa5; repr.buffer_len() + payload.len()];
            let mut packet = Packet::new_unchecked(&mut buf);
            repr.emit(&mut packet);
            packet.payload_mut().copy_from_slice(&payload);
            let packet = Packet::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(Repr::parse(&packet).unwrap(), repr);
            prop_assert_eq!(packet.payload(), &payload[..]);
        }

        #[test]
        fn path_id_algebra(a in any::<[u8; 32]>(), b in any::<[u8; 32]>(), i in any::<u8>()) {
            let (a, b) = (PathId::from_bytes(a), PathId::from_bytes(b));
            prop_assert!((a | b).contains(&a));
            prop_assert!(a.contains(&(a & b)));
            prop_assert_eq!(a.contains(&b), a & b == b);
            prop_assert_eq!(a.with(i).bit(i), true);
            prop_assert_eq!((a | b).bit(i), a.bit(i) || b.bit(i));
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            crate::fuzz::gff(&bytes);
        }
    }

    #[test]
    fn ethernet_frames_carry_the_path_in_the_ipv6_addresses() {
        let path = PathId::ZERO.with(3).with(200);
        let mac = smoltcp::wire::EthernetAddress([2, 0, 0, 0, 0, 1]);
        let f = ethernet_frame(mac, mac, path, MessageType::LinkHello, 7, b"hi");
        assert_eq!(f.len(), GFF_OFFSET + HEADER_LEN + 2);
        assert_eq!(&f[12..14], &[0x86, 0xdd]);
        assert_eq!((f[14 + 6], f[14 + 7]), (NEXT_HEADER, 7));
        assert_eq!(&f[14 + 8..14 + 40], path.as_bytes());
        let p = Packet::new_checked(&f[GFF_OFFSET..]).unwrap();
        let r = Repr::parse(&p).unwrap();
        assert_eq!((r.msg_type, r.path_id), (MessageType::LinkHello, path));
        assert_eq!(&f[GFF_OFFSET + HEADER_LEN..], b"hi");
    }

    #[test]
    fn ethernet_frames_parse_through_the_view() {
        let a = smoltcp::wire::EthernetAddress([2, 0, 0, 0, 0, 1]);
        let mut f = ethernet_frame(
            smoltcp::wire::EthernetAddress::BROADCAST,
            a,
            path(),
            MessageType::PathRequest,
            7,
            &[0xab, 0xcd],
        );
        let g = parse_ethernet_frame(&f).unwrap().unwrap();
        assert_eq!((g.src_mac, g.hop_limit), (a, 7));
        assert_eq!(g.repr.path_id, path());
        assert_eq!(g.repr.msg_type, MessageType::PathRequest);
        assert_eq!(&f[g.payload.clone()], &[0xab, 0xcd]);
        assert_eq!(g.ip_end, f.len());
        // Ethernet padding after the IPv6 packet is not payload.
        f.extend_from_slice(&[0; 4]);
        assert_eq!(
            parse_ethernet_frame(&f).unwrap().unwrap().payload,
            g.payload
        );
        f.truncate(g.ip_end);

        let mut cut = f.clone();
        cut.truncate(g.ip_end - 1);
        assert_eq!(parse_ethernet_frame(&cut), Some(Err(FrameError::Truncated)));
        assert_eq!(
            parse_ethernet_frame(&f[..GFF_OFFSET - 1]),
            Some(Err(FrameError::Truncated))
        );
        let mut bad = f.clone();
        bad[GFF_OFFSET] = 0x0f; // pathID length 255 bits
        assert_eq!(parse_ethernet_frame(&bad), Some(Err(FrameError::Malformed)));
        let mut moved = f.clone();
        moved[14 + 8] ^= 0x80; // IPv6 source no longer the pathID
        assert_eq!(
            parse_ethernet_frame(&moved),
            Some(Err(FrameError::PathMismatch))
        );
        let mut udp = f.clone();
        udp[14 + 6] = 17;
        assert_eq!(parse_ethernet_frame(&udp), None);
        let mut v4 = f;
        v4[12..14].copy_from_slice(&[0x08, 0x00]);
        assert_eq!(parse_ethernet_frame(&v4), None);
        assert_eq!(parse_ethernet_frame(&[0; 20]), None);
    }
}
