//! Generic Routing Encapsulation (RFC 2784), the base header only, as the
//! classic-SFF transport of NSH (SPEC §1.4: protocol type [`ProtocolType::Nsh`]).
//!
//! | field         | bits | notes                                                  |
//! |---------------|------|--------------------------------------------------------|
//! | C             | 1    | checksum present                                       |
//! | Reserved0     | 12   | bits 1–5 must be 0 (RFC 1701 key/sequence/routing: refused); bits 6–12 ignored |
//! | Ver           | 3    | 0                                                      |
//! | Protocol Type | 16   | an EtherType ([`ProtocolType`])                        |
//! | Checksum      | 16   | if C: RFC 1071 over header and payload                 |
//! | Reserved1     | 16   | if C: sent as 0, ignored                               |
//!
//! [`Repr::emit`] writes the header with a zero checksum: write the payload,
//! then call [`Packet::fill_checksum`]. The checksum covers the whole buffer
//! the view wraps, so wrap exactly the GRE packet.

use core::fmt;

use super::{Error, Result};
use crate::wire::checksum::ones_complement_sum;

/// IP protocol number of GRE.
pub const IP_PROTOCOL: u8 = 47;

open_enum! {
    /// The Protocol Type field: an EtherType, an open enum.
    ///
    /// `Unknown`: Any other value.
    pub enum ProtocolType: u16 {
        /// `0x0800`: IPv4.
        Ipv4 = 0x0800,
        /// `0x86DD`: IPv6.
        Ipv6 = 0x86dd,
        /// `0x6558`: transparent Ethernet bridging.
        Ethernet = 0x6558,
        /// `0x894F`: NSH.
        Nsh = 0x894f,
    }
}

impl fmt::Display for ProtocolType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Ipv4 => f.write_str("IPv4"),
            Self::Ipv6 => f.write_str("IPv6"),
            Self::Ethernet => f.write_str("Ethernet"),
            Self::Nsh => f.write_str("NSH"),
            Self::Unknown(v) => write!(f, "0x{v:04x}"),
        }
    }
}

// RFC 2784 §2.1:
//
//  0                   1                   2                   3
//  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
// |C|       Reserved0       | Ver |         Protocol Type         |
// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
// |      Checksum (optional)      |       Reserved1 (Optional)    |
// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
mod field {
    use core::ops::Range;

    pub(super) const FLAGS: Range<usize> = 0..2;
    pub(super) const PROTOCOL: Range<usize> = 2..4;
    pub(super) const CHECKSUM: Range<usize> = 4..6;
    pub(super) const RESERVED1: Range<usize> = 6..8;

    pub(super) const C_BIT: u16 = 0x8000;
    /// Reserved0 bits 1–5: RFC 1701's R, K, S, s and Recur's top bit.
    pub(super) const RFC1701_BITS: u16 = 0x7c00;
    pub(super) const VERSION: u16 = 0x0007;
}

/// Octets of the header without checksum.
pub const HEADER_LEN: usize = 4;

/// Octets of the header with checksum.
pub const HEADER_LEN_WITH_CHECKSUM: usize = 8;

/// A read/write view of a GRE packet (header and payload).
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

    /// Ensure no accessor panics: the buffer holds the header, checksum
    /// words included if C is set ([`Error::Truncated`] otherwise).
    /// Invalidated by [`Self::set_flags`].
    pub fn check_len(&self) -> Result<()> {
        let data = self.buffer.as_ref();
        if data.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if data.len() < self.header_len() {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Give the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The first 16 bits: C, Reserved0, Ver.
    pub fn flags(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::FLAGS];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// Whether the checksum is present (C).
    pub fn checksum_present(&self) -> bool {
        self.flags() & field::C_BIT != 0
    }

    /// The Ver field.
    pub fn version(&self) -> u8 {
        (self.flags() & field::VERSION) as u8
    }

    /// The Protocol Type.
    pub fn protocol_type(&self) -> ProtocolType {
        let b = &self.buffer.as_ref()[field::PROTOCOL];
        ProtocolType::from(u16::from_be_bytes([b[0], b[1]]))
    }

    /// The Checksum field, if present.
    pub fn checksum(&self) -> Option<u16> {
        self.checksum_present().then(|| {
            let b = &self.buffer.as_ref()[field::CHECKSUM];
            u16::from_be_bytes([b[0], b[1]])
        })
    }

    /// The header length: 4, or 8 with checksum.
    pub fn header_len(&self) -> usize {
        if self.checksum_present() {
            HEADER_LEN_WITH_CHECKSUM
        } else {
            HEADER_LEN
        }
    }

    /// Whether the checksum is right (true when there is none).
    pub fn verify_checksum(&self) -> bool {
        !self.checksum_present() || ones_complement_sum(self.buffer.as_ref(), 0) == 0xffff
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    /// The payload after the header.
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Set the first 16 bits: C, Reserved0, Ver.
    pub fn set_flags(&mut self, value: u16) {
        self.buffer.as_mut()[field::FLAGS].copy_from_slice(&value.to_be_bytes());
    }

    /// Set the Protocol Type.
    pub fn set_protocol_type(&mut self, value: ProtocolType) {
        self.buffer.as_mut()[field::PROTOCOL].copy_from_slice(&u16::from(value).to_be_bytes());
    }

    /// Set the Checksum field (C must be set).
    pub fn set_checksum(&mut self, value: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&value.to_be_bytes());
    }

    /// Set the Reserved1 field (C must be set).
    pub fn set_reserved1(&mut self, value: u16) {
        self.buffer.as_mut()[field::RESERVED1].copy_from_slice(&value.to_be_bytes());
    }

    /// The payload, mutably.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let start = self.header_len();
        &mut self.buffer.as_mut()[start..]
    }

    /// Compute and set the checksum over the whole buffer, if C is set.
    pub fn fill_checksum(&mut self) {
        if !self.checksum_present() {
            return;
        }
        self.set_checksum(0);
        let sum = ones_complement_sum(self.buffer.as_ref(), 0);
        self.set_checksum(!sum);
    }
}

/// A GRE header, high level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// What the payload is.
    pub protocol_type: ProtocolType,
    /// Whether to carry (or whether the packet carried) a checksum.
    pub checksum: bool,
}

impl Repr {
    /// Parse a header. [`Error::Malformed`] for Ver ≠ 0, any of Reserved0's
    /// bits 1–5 set (RFC 2784 §2.3), or a bad checksum.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Self> {
        packet.check_len()?;
        if packet.version() != 0 || packet.flags() & field::RFC1701_BITS != 0 {
            return Err(Error::Malformed);
        }
        if !packet.verify_checksum() {
            return Err(Error::Malformed);
        }
        Ok(Self {
            protocol_type: packet.protocol_type(),
            checksum: packet.checksum_present(),
        })
    }

    /// Octets of the header [`Self::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        if self.checksum {
            HEADER_LEN_WITH_CHECKSUM
        } else {
            HEADER_LEN
        }
    }

    /// Write the header at the start of `packet` (checksum zero: call
    /// [`Packet::fill_checksum`] once the payload is in place).
    ///
    /// # Panics
    /// If the buffer is shorter than [`Self::buffer_len`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_flags(if self.checksum { field::C_BIT } else { 0 });
        packet.set_protocol_type(self.protocol_type);
        if self.checksum {
            packet.set_checksum(0);
            packet.set_reserved1(0);
        }
    }
}

#[cfg(test)]
mod test {
    use proptest::prelude::*;

    use super::*;

    /// C set, protocol NSH, checksum over header and payload, payload
    /// `0x01 0x02 0x03`.
    static CSUM_BYTES: [u8; 11] = [
        0x80, 0x00, // C, reserved0 0, ver 0
        0x89, 0x4f, // protocol type NSH
        0xf2, 0xad, // checksum: !(0x8000 + 0x894f + 0x0102 + 0x0300) = !0x0d52 (folded)
        0x00, 0x00, // reserved1
        0x01, 0x02, 0x03, // payload
    ];

    /// No checksum, protocol NSH, payload `0xaa`.
    static PLAIN_BYTES: [u8; 5] = [0x00, 0x00, 0x89, 0x4f, 0xaa];

    #[test]
    fn golden_checksum() {
        let sum: u32 = 0x8000 + 0x894f + 0x0102 + 0x0300;
        let folded = (sum & 0xffff) + (sum >> 16);
        assert_eq!(folded, 0x0d52);
        assert_eq!(!(folded as u16), 0xf2ad);
    }

    #[test]
    fn test_deconstruct() {
        let p = Packet::new_checked(&CSUM_BYTES[..]).unwrap();
        assert!(p.checksum_present());
        assert_eq!(p.version(), 0);
        assert_eq!(p.protocol_type(), ProtocolType::Nsh);
        assert_eq!(p.checksum(), Some(0xf2ad));
        assert!(p.verify_checksum());
        assert_eq!(p.header_len(), 8);
        assert_eq!(p.payload(), &[1, 2, 3]);
        let p = Packet::new_checked(&PLAIN_BYTES[..]).unwrap();
        assert!(!p.checksum_present());
        assert_eq!(p.checksum(), None);
        assert!(p.verify_checksum());
        assert_eq!(p.payload(), &[0xaa]);
    }

    #[test]
    fn test_construct() {
        let mut bytes = vec![0xa5; 11];
        let mut p = Packet::new_unchecked(&mut bytes);
        p.set_flags(0x8000);
        p.set_protocol_type(ProtocolType::Nsh);
        p.set_reserved1(0);
        p.payload_mut().copy_from_slice(&[1, 2, 3]);
        p.fill_checksum();
        assert_eq!(bytes, CSUM_BYTES);
    }

    #[test]
    fn test_parse() {
        let p = Packet::new_checked(&CSUM_BYTES[..]).unwrap();
        assert_eq!(
            Repr::parse(&p),
            Ok(Repr {
                protocol_type: ProtocolType::Nsh,
                checksum: true
            })
        );
        let p = Packet::new_checked(&PLAIN_BYTES[..]).unwrap();
        assert_eq!(
            Repr::parse(&p),
            Ok(Repr {
                protocol_type: ProtocolType::Nsh,
                checksum: false
            })
        );
    }

    #[test]
    fn test_emit() {
        let repr = Repr {
            protocol_type: ProtocolType::Nsh,
            checksum: true,
        };
        let mut bytes = vec![0xa5; repr.buffer_len() + 3];
        let mut p = Packet::new_unchecked(&mut bytes);
        repr.emit(&mut p);
        p.payload_mut().copy_from_slice(&[1, 2, 3]);
        p.fill_checksum();
        assert_eq!(bytes, CSUM_BYTES);
        let repr = Repr {
            checksum: false,
            ..repr
        };
        let mut bytes = vec![0xa5; repr.buffer_len() + 1];
        let mut p = Packet::new_unchecked(&mut bytes);
        repr.emit(&mut p);
        p.payload_mut()[0] = 0xaa;
        p.fill_checksum(); // no-op
        assert_eq!(bytes, PLAIN_BYTES);
    }

    #[test]
    fn truncated_and_impossible() {
        assert_eq!(Packet::new_checked(&[][..]).unwrap_err(), Error::Truncated);
        assert_eq!(
            Packet::new_checked(&PLAIN_BYTES[..3]).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(
            Packet::new_checked(&CSUM_BYTES[..7]).unwrap_err(),
            Error::Truncated
        );
        // Bad checksum.
        let mut b = CSUM_BYTES;
        b[10] ^= 0x80;
        let p = Packet::new_checked(&b[..]).unwrap();
        assert!(!p.verify_checksum());
        assert_eq!(Repr::parse(&p), Err(Error::Malformed));
        // Version 1; key bit (RFC 1701).
        for flags in [0x0001_u16, 0x2000] {
            let mut b = PLAIN_BYTES;
            b[..2].copy_from_slice(&flags.to_be_bytes());
            let p = Packet::new_checked(&b[..]).unwrap();
            assert_eq!(Repr::parse(&p), Err(Error::Malformed));
        }
        // Bits 6-12 are ignored.
        let mut b = PLAIN_BYTES;
        b[..2].copy_from_slice(&0x03f8_u16.to_be_bytes());
        let p = Packet::new_checked(&b[..]).unwrap();
        assert!(Repr::parse(&p).is_ok());
    }

    #[test]
    fn unknown_survives() {
        let b = [0x00, 0x00, 0x12, 0x34];
        let repr = Repr::parse(&Packet::new_checked(&b[..]).unwrap()).unwrap();
        assert_eq!(repr.protocol_type, ProtocolType::Unknown(0x1234));
        let mut out = vec![0xa5; 4];
        repr.emit(&mut Packet::new_unchecked(&mut out));
        assert_eq!(out, b);
        for v in [0_u16, 0x0800, 0x86dd, 0x6558, 0x894f, 0xffff] {
            assert_eq!(u16::from(ProtocolType::from(v)), v);
        }
    }

    proptest! {
        #[test]
        fn emit_parse_round_trip(
            proto in any::<u16>(),
            checksum in any::<bool>(),
            payload in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let repr = Repr { protocol_type: ProtocolType::from(proto), checksum };
            let mut bytes = vec![0xa5; repr.buffer_len() + payload.len()];
            let mut p = Packet::new_unchecked(&mut bytes);
            repr.emit(&mut p);
            p.payload_mut().copy_from_slice(&payload);
            p.fill_checksum();
            let p = Packet::new_checked(&bytes[..]).unwrap();
            prop_assert_eq!(Repr::parse(&p), Ok(repr));
            prop_assert_eq!(p.payload(), &payload[..]);
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            crate::fuzz::gre(&bytes);
        }
    }
}
