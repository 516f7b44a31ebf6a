//! VXLAN Generic Protocol Extension (draft-ietf-nvo3-vxlan-gpe §3.3), the
//! classic-SFF transport of NSH over UDP port [`UDP_PORT`] (SPEC §1.4).
//!
//! | field         | bits | notes                                                 |
//! |---------------|------|-------------------------------------------------------|
//! | R R           | 2    | reserved, ignored                                     |
//! | Ver           | 2    | 0                                                     |
//! | I             | 1    | VNI valid: must be set                                |
//! | P             | 1    | next protocol present: must be set (else plain VXLAN) |
//! | B             | 1    | BUM traffic                                           |
//! | O             | 1    | OAM packet                                            |
//! | Reserved      | 16   | ignored                                               |
//! | Next Protocol | 8    | [`NextProtocol`]; 4 = NSH                             |
//! | VNI           | 24   | [`Vni`]                                               |
//! | Reserved      | 8    | ignored                                               |
//!
//! [`Repr::parse`] refuses version ≠ 0 and packets without I or P
//! ([`Error::Malformed`]); [`Repr::emit`] writes reserved fields as zero.

use core::fmt;

use super::{Error, Result};

/// IANA UDP port of VXLAN-GPE.
pub const UDP_PORT: u16 = 4790;

/// Octets of the header.
pub const HEADER_LEN: usize = 8;

open_enum! {
    /// The Next Protocol field, an open enum.
    ///
    /// `Unknown`: Any other value.
    pub enum NextProtocol: u8 {
        /// `0x01`: IPv4.
        Ipv4 = 0x01,
        /// `0x02`: IPv6.
        Ipv6 = 0x02,
        /// `0x03`: Ethernet.
        Ethernet = 0x03,
        /// `0x04`: NSH.
        Nsh = 0x04,
        /// `0x05`: MPLS.
        Mpls = 0x05,
    }
}

impl fmt::Display for NextProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Ipv4 => f.write_str("IPv4"),
            Self::Ipv6 => f.write_str("IPv6"),
            Self::Ethernet => f.write_str("Ethernet"),
            Self::Nsh => f.write_str("NSH"),
            Self::Mpls => f.write_str("MPLS"),
            Self::Unknown(v) => write!(f, "0x{v:02x}"),
        }
    }
}

/// A VXLAN Network Identifier: 24 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Vni(u32);

impl Vni {
    /// Largest VNI.
    pub const MAX: u32 = 0x00ff_ffff;

    /// The VNI `value`, or `None` if it needs more than 24 bits.
    pub const fn new(value: u32) -> Option<Self> {
        if value > Self::MAX {
            return None;
        }
        Some(Self(value))
    }

    /// The VNI as a number.
    pub const fn value(self) -> u32 {
        self.0
    }
}

// draft-ietf-nvo3-vxlan-gpe §3.3:
//
//  0                   1                   2                   3
//  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
// |R|R|Ver|I|P|B|O|       Reserved                |Next Protocol  |
// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
// |                VXLAN Network Identifier (VNI) |   Reserved    |
// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
mod field {
    use core::ops::Range;

    pub(super) const FLAGS: usize = 0;
    pub(super) const RESERVED0: Range<usize> = 1..3;
    pub(super) const NEXT_PROTO: usize = 3;
    pub(super) const VNI: Range<usize> = 4..7;
    pub(super) const RESERVED1: usize = 7;

    pub(super) const VER_MASK: u8 = 0x30;
    pub(super) const VER_SHIFT: u8 = 4;
}

/// Flag bit I: the VNI is valid.
pub const FLAG_I: u8 = 0x08;
/// Flag bit P: the Next Protocol field is present.
pub const FLAG_P: u8 = 0x04;
/// Flag bit B: BUM traffic.
pub const FLAG_B: u8 = 0x02;
/// Flag bit O: OAM packet.
pub const FLAG_O: u8 = 0x01;

/// A read/write view of a VXLAN-GPE header at the start of a buffer.
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

    /// Ensure no accessor panics: the buffer holds the 8-octet header
    /// ([`Error::Truncated`] otherwise).
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Give the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The flags octet.
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    /// The Ver field.
    pub fn version(&self) -> u8 {
        (self.flags() & field::VER_MASK) >> field::VER_SHIFT
    }

    /// The Next Protocol field.
    pub fn next_protocol(&self) -> NextProtocol {
        NextProtocol::from(self.buffer.as_ref()[field::NEXT_PROTO])
    }

    /// The VNI.
    pub fn vni(&self) -> Vni {
        let b = &self.buffer.as_ref()[field::VNI];
        Vni(u32::from_be_bytes([0, b[0], b[1], b[2]]))
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    /// Whatever follows the header.
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Set the flags octet (version included).
    pub fn set_flags(&mut self, value: u8) {
        self.buffer.as_mut()[field::FLAGS] = value;
    }

    /// Set both reserved fields to zero.
    pub fn clear_reserved(&mut self) {
        let buf = self.buffer.as_mut();
        buf[field::RESERVED0].fill(0);
        buf[field::RESERVED1] = 0;
    }

    /// Set the Next Protocol field.
    pub fn set_next_protocol(&mut self, value: NextProtocol) {
        self.buffer.as_mut()[field::NEXT_PROTO] = value.into();
    }

    /// Set the VNI.
    pub fn set_vni(&mut self, value: Vni) {
        let b = value.0.to_be_bytes();
        self.buffer.as_mut()[field::VNI].copy_from_slice(&b[1..]);
    }

    /// Whatever follows the header, mutably.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }
}

/// A VXLAN-GPE header, high level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// What follows.
    pub next_protocol: NextProtocol,
    /// The network identifier.
    pub vni: Vni,
    /// The B bit.
    pub bum: bool,
    /// The O bit.
    pub oam: bool,
}

impl Repr {
    /// Parse a header. [`Error::Malformed`] for version ≠ 0 or I or P clear.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Self> {
        packet.check_len()?;
        let flags = packet.flags();
        if packet.version() != 0 || flags & (FLAG_I | FLAG_P) != FLAG_I | FLAG_P {
            return Err(Error::Malformed);
        }
        Ok(Self {
            next_protocol: packet.next_protocol(),
            vni: packet.vni(),
            bum: flags & FLAG_B != 0,
            oam: flags & FLAG_O != 0,
        })
    }

    /// Octets [`Self::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Write the header at the start of `packet`.
    ///
    /// # Panics
    /// If the buffer is shorter than [`HEADER_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        let mut flags = FLAG_I | FLAG_P;
        if self.bum {
            flags |= FLAG_B;
        }
        if self.oam {
            flags |= FLAG_O;
        }
        packet.set_flags(flags);
        packet.clear_reserved();
        packet.set_next_protocol(self.next_protocol);
        packet.set_vni(self.vni);
    }
}

#[cfg(test)]
mod test {
    use proptest::prelude::*;

    use super::*;

    /// I and P set, next protocol NSH, VNI 0x123456, payload `0xee`.
    static PACKET_BYTES: [u8; 9] = [
        0x0c, // R R Ver=00 I=1 P=1 B=0 O=0
        0x00, 0x00, // reserved
        0x04, // next protocol NSH
        0x12, 0x34, 0x56, // VNI
        0x00, // reserved
        0xee, // payload
    ];

    fn repr() -> Repr {
        Repr {
            next_protocol: NextProtocol::Nsh,
            vni: Vni::new(0x12_3456).unwrap(),
            bum: false,
            oam: false,
        }
    }

    #[test]
    fn test_deconstruct() {
        let p = Packet::new_checked(&PACKET_BYTES[..]).unwrap();
        assert_eq!(p.flags(), FLAG_I | FLAG_P);
        assert_eq!(p.version(), 0);
        assert_eq!(p.next_protocol(), NextProtocol::Nsh);
        assert_eq!(p.vni().value(), 0x12_3456);
        assert_eq!(p.payload(), &[0xee]);
    }

    #[test]
    fn test_construct() {
        let mut bytes = vec![0xa5; 9];
        let mut p = Packet::new_unchecked(&mut bytes);
        p.set_flags(FLAG_I | FLAG_P);
        p.clear_reserved();
        p.set_next_protocol(NextProtocol::Nsh);
        p.set_vni(Vni::new(0x12_3456).unwrap());
        p.payload_mut()[0] = 0xee;
        assert_eq!(bytes, PACKET_BYTES);
    }

    #[test]
    fn test_parse() {
        let p = Packet::new_checked(&PACKET_BYTES[..]).unwrap();
        assert_eq!(Repr::parse(&p), Ok(repr()));
        // Reserved fields are ignored.
        let mut b = PACKET_BYTES;
        b[0] |= 0xc0;
        b[1] = 0xff;
        b[7] = 0xff;
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Repr::parse(&p), Ok(repr()));
    }

    #[test]
    fn test_emit() {
        let mut bytes = vec![0xa5; 9];
        let mut p = Packet::new_unchecked(&mut bytes);
        repr().emit(&mut p);
        p.payload_mut()[0] = 0xee;
        assert_eq!(bytes, PACKET_BYTES);
        let r = Repr {
            bum: true,
            oam: true,
            ..repr()
        };
        let mut bytes = [0xa5; 8];
        r.emit(&mut Packet::new_unchecked(&mut bytes));
        assert_eq!(bytes[0], 0x0f);
    }

    #[test]
    fn truncated_and_impossible() {
        assert_eq!(Packet::new_checked(&[][..]).unwrap_err(), Error::Truncated);
        assert_eq!(
            Packet::new_checked(&PACKET_BYTES[..7]).unwrap_err(),
            Error::Truncated
        );
        // Version 1, I clear, P clear.
        for flags in [0x1c, 0x04, 0x08] {
            let mut b = PACKET_BYTES;
            b[0] = flags;
            let p = Packet::new_checked(&b[..]).unwrap();
            assert_eq!(Repr::parse(&p), Err(Error::Malformed), "{flags:#x}");
        }
        assert_eq!(Vni::new(0x0100_0000), None);
    }

    #[test]
    fn unknown_survives() {
        let mut b = PACKET_BYTES;
        b[3] = 0x7e;
        let repr = Repr::parse(&Packet::new_checked(&b[..]).unwrap()).unwrap();
        assert_eq!(repr.next_protocol, NextProtocol::Unknown(0x7e));
        let mut out = vec![0xa5; 9];
        let mut p = Packet::new_unchecked(&mut out);
        repr.emit(&mut p);
        p.payload_mut()[0] = 0xee;
        assert_eq!(out, b);
        for v in 0..=0xff_u8 {
            assert_eq!(u8::from(NextProtocol::from(v)), v);
        }
    }

    proptest! {
        #[test]
        fn emit_parse_round_trip(
            next in any::<u8>(),
            vni in 0_u32..=Vni::MAX,
            bum in any::<bool>(),
            oam in any::<bool>(),
        ) {
            let repr = Repr { next_protocol: NextProtocol::from(next), vni: Vni::new(vni).unwrap(), bum, oam };
            let mut bytes = vec![0xa5; repr.buffer_len()];
            repr.emit(&mut Packet::new_unchecked(&mut bytes));
            prop_assert_eq!(Repr::parse(&Packet::new_checked(&bytes[..]).unwrap()), Ok(repr));
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            crate::fuzz::vxlan_gpe(&bytes);
        }
    }
}
