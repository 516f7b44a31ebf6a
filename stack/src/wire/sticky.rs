//! The sticky-service option (IPv6 destination option `0x1E`, SPEC §3;
//! draft-dunbar-6man-5g-edge-compute-sticky-service-02 §4.2 and §6.1): its
//! data is a list of Sticky-Dst sub-TLVs.
//!
//! ```text
//! Sticky type 1, unicast sticky egress (draft §4.2):
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  Sticky-Type  |      Len      |      AFI      |   Reserved    |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  Sticky Egress address (IPv4: 4 octets, IPv6: 16 octets)      ~
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//!
//! Sticky type 2, APN6 application-aware sticky ID [ext] (draft §6.1):
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  Sticky-Type  |    Len = 4    | Sticky Level  |StickyServiceID|
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |   Reserved    |    Flow ID    |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! Len counts the octets after it. AFI is 1 (IPv4, Len 6) or 2 (IPv6,
//! Len 18); another AFI is [`Error::Malformed`], a Len that does not match
//! the AFI (or is not 4 for type 2) [`Error::BadLength`]. Reserved octets
//! are zero (else [`Error::Malformed`]) so a round trip reproduces the
//! octets. Other sticky types are kept verbatim ([`StickyTlv::Unknown`]).
//! An option carries one or more sub-TLVs back to back, at most 255 octets.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::ipv6opt::MAX_OPTION_DATA;
use super::{Error, Result};

/// AFI of an IPv4 sticky egress address.
pub const AFI_IPV4: u8 = 1;
/// AFI of an IPv6 sticky egress address.
pub const AFI_IPV6: u8 = 2;

open_enum! {
    /// The sticky type octet, an open enum.
    ///
    /// `Unknown`: Any other value.
    pub enum StickyType: u8 {
        /// 1: the unicast address of the sticky egress.
        Egress = 1,
        /// 2: the APN6 application-aware sticky ID **\[ext\]**.
        Apn6 = 2,
    }
}

mod field {
    #![allow(non_snake_case)]

    use core::ops::Range;

    pub(super) const TYPE: usize = 0;
    pub(super) const LENGTH: usize = 1;
    pub(super) const fn VALUE(length: u8) -> Range<usize> {
        2..2 + length as usize
    }
    // Type 1.
    pub(super) const AFI: usize = 2;
    pub(super) const RESERVED: usize = 3;
    pub(super) const ADDRESS: usize = 4;
    // Type 2.
    pub(super) const LEVEL: usize = 2;
    pub(super) const SERVICE_ID: usize = 3;
    pub(super) const APN6_RESERVED: usize = 4;
    pub(super) const FLOW_ID: usize = 5;
    pub(super) const APN6_LEN: u8 = 4;
}

/// A read/write view of one Sticky-Dst sub-TLV at the start of a buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubTlv<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> SubTlv<T> {
    /// Wrap a buffer without checking it; see [`Self::check_len`].
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// [`Self::new_unchecked`] followed by [`Self::check_len`].
    pub fn new_checked(buffer: T) -> Result<Self> {
        let tlv = Self::new_unchecked(buffer);
        tlv.check_len()?;
        Ok(tlv)
    }

    /// Ensure no accessor panics: the buffer holds the type, the length and
    /// the value it announces ([`Error::Truncated`]); for types 1 and 2 the
    /// value is long enough for their fixed fields ([`Error::BadLength`]).
    /// Trailing octets are allowed (the next sub-TLVs).
    pub fn check_len(&self) -> Result<()> {
        let data = self.buffer.as_ref();
        let Some(&len) = data.get(field::LENGTH) else {
            return Err(Error::Truncated);
        };
        if data.len() < field::VALUE(len).end {
            return Err(Error::Truncated);
        }
        let need = match StickyType::from(data[field::TYPE]) {
            StickyType::Egress => 2,
            StickyType::Apn6 => field::APN6_LEN,
            StickyType::Unknown(_) => 0,
        };
        if len < need {
            return Err(Error::BadLength);
        }
        Ok(())
    }

    /// Give the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The sticky type.
    pub fn sticky_type(&self) -> StickyType {
        StickyType::from(self.buffer.as_ref()[field::TYPE])
    }

    /// The Len field (octets after it).
    pub fn len(&self) -> u8 {
        self.buffer.as_ref()[field::LENGTH]
    }

    /// Whether Len is zero.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Octets the sub-TLV occupies: 2 + Len.
    pub fn total_len(&self) -> usize {
        field::VALUE(self.len()).end
    }

    /// Type 1: the AFI.
    pub fn afi(&self) -> u8 {
        self.buffer.as_ref()[field::AFI]
    }

    /// Type 1: the reserved octet.
    pub fn reserved(&self) -> u8 {
        self.buffer.as_ref()[field::RESERVED]
    }

    /// Type 2: the sticky level.
    pub fn level(&self) -> u8 {
        self.buffer.as_ref()[field::LEVEL]
    }

    /// Type 2: the sticky service ID.
    pub fn service_id(&self) -> u8 {
        self.buffer.as_ref()[field::SERVICE_ID]
    }

    /// Type 2: the reserved octet.
    pub fn apn6_reserved(&self) -> u8 {
        self.buffer.as_ref()[field::APN6_RESERVED]
    }

    /// Type 2: the flow ID.
    pub fn flow_id(&self) -> u8 {
        self.buffer.as_ref()[field::FLOW_ID]
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> SubTlv<&'a T> {
    /// The value (everything after Len), borrowed from the buffer.
    pub fn value(&self) -> &'a [u8] {
        &self.buffer.as_ref()[field::VALUE(self.len())]
    }

    /// Type 1: the address octets (after AFI and reserved).
    pub fn address(&self) -> &'a [u8] {
        &self.buffer.as_ref()[field::ADDRESS..self.total_len()]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> SubTlv<T> {
    /// Set the sticky type.
    pub fn set_sticky_type(&mut self, value: StickyType) {
        self.buffer.as_mut()[field::TYPE] = value.into();
    }

    /// Set Len.
    pub fn set_len(&mut self, value: u8) {
        self.buffer.as_mut()[field::LENGTH] = value;
    }

    /// Type 1: set the AFI.
    pub fn set_afi(&mut self, value: u8) {
        self.buffer.as_mut()[field::AFI] = value;
    }

    /// Type 1: set the reserved octet.
    pub fn set_reserved(&mut self, value: u8) {
        self.buffer.as_mut()[field::RESERVED] = value;
    }

    /// Type 1: the address octets, mutably.
    pub fn address_mut(&mut self) -> &mut [u8] {
        let end = self.total_len();
        &mut self.buffer.as_mut()[field::ADDRESS..end]
    }

    /// Type 2: set the sticky level.
    pub fn set_level(&mut self, value: u8) {
        self.buffer.as_mut()[field::LEVEL] = value;
    }

    /// Type 2: set the sticky service ID.
    pub fn set_service_id(&mut self, value: u8) {
        self.buffer.as_mut()[field::SERVICE_ID] = value;
    }

    /// Type 2: set the reserved octet.
    pub fn set_apn6_reserved(&mut self, value: u8) {
        self.buffer.as_mut()[field::APN6_RESERVED] = value;
    }

    /// Type 2: set the flow ID.
    pub fn set_flow_id(&mut self, value: u8) {
        self.buffer.as_mut()[field::FLOW_ID] = value;
    }

    /// The value, mutably.
    pub fn value_mut(&mut self) -> &mut [u8] {
        let range = field::VALUE(self.len());
        &mut self.buffer.as_mut()[range]
    }
}

/// The APN6 application-aware sticky ID (sticky type 2) **\[ext\]**.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Apn6Id {
    /// How strongly the application wants to stick.
    pub level: u8,
    /// The sticky service (anycast) ID.
    pub service_id: u8,
    /// The flow.
    pub flow_id: u8,
}

/// One Sticky-Dst sub-TLV, high level.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum StickyTlv {
    /// Type 1: the sticky egress (or a proxy for it).
    Egress(IpAddr),
    /// Type 2: the APN6 sticky ID **\[ext\]**.
    Apn6(Apn6Id),
    /// Any other type, kept verbatim (type not 1 or 2, value ≤ 253 octets).
    Unknown {
        /// The type octet.
        sticky_type: u8,
        /// The value after Len.
        value: Vec<u8>,
    },
}

impl StickyTlv {
    /// The sticky type.
    pub fn sticky_type(&self) -> StickyType {
        match self {
            Self::Egress(_) => StickyType::Egress,
            Self::Apn6(_) => StickyType::Apn6,
            Self::Unknown { sticky_type, .. } => StickyType::Unknown(*sticky_type),
        }
    }

    /// Parse one sub-TLV. Errors as [`SubTlv::check_len`], plus
    /// [`Error::Malformed`] for an unknown AFI or a non-zero reserved octet
    /// and [`Error::BadLength`] for a Len not matching the AFI or not 4 for
    /// type 2.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(tlv: &SubTlv<&T>) -> Result<Self> {
        tlv.check_len()?;
        match tlv.sticky_type() {
            StickyType::Egress => {
                if tlv.reserved() != 0 {
                    return Err(Error::Malformed);
                }
                let addr = tlv.address();
                let addr = match tlv.afi() {
                    AFI_IPV4 => <[u8; 4]>::try_from(addr).map(|a| IpAddr::V4(Ipv4Addr::from(a))),
                    AFI_IPV6 => <[u8; 16]>::try_from(addr).map(|a| IpAddr::V6(Ipv6Addr::from(a))),
                    _ => return Err(Error::Malformed),
                };
                addr.map(Self::Egress).map_err(|_| Error::BadLength)
            }
            StickyType::Apn6 => {
                if tlv.len() != field::APN6_LEN {
                    return Err(Error::BadLength);
                }
                if tlv.apn6_reserved() != 0 {
                    return Err(Error::Malformed);
                }
                Ok(Self::Apn6(Apn6Id {
                    level: tlv.level(),
                    service_id: tlv.service_id(),
                    flow_id: tlv.flow_id(),
                }))
            }
            StickyType::Unknown(sticky_type) => Ok(Self::Unknown {
                sticky_type,
                value: tlv.value().to_vec(),
            }),
        }
    }

    fn value_len(&self) -> usize {
        match self {
            Self::Egress(IpAddr::V4(_)) => 2 + 4,
            Self::Egress(IpAddr::V6(_)) => 2 + 16,
            Self::Apn6(_) => usize::from(field::APN6_LEN),
            Self::Unknown { value, .. } => value.len(),
        }
    }

    /// Octets [`Self::emit`] writes: 2 + Len.
    pub fn buffer_len(&self) -> usize {
        2 + self.value_len()
    }

    fn check(&self) -> Result<()> {
        match self {
            Self::Unknown { sticky_type, value } => {
                if !matches!(StickyType::from(*sticky_type), StickyType::Unknown(_)) {
                    return Err(Error::Malformed);
                }
                if value.len() > MAX_OPTION_DATA - 2 {
                    return Err(Error::TooLong);
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Write the sub-TLV at the start of `tlv`'s buffer.
    ///
    /// # Panics
    /// If the buffer is shorter than [`Self::buffer_len`] or (`Unknown`) the
    /// value is over 253 octets; [`StickyDst::to_bytes`] checks both.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, tlv: &mut SubTlv<T>) {
        tlv.set_sticky_type(self.sticky_type());
        // At most 253: see the panics note.
        tlv.set_len(self.value_len() as u8);
        match self {
            Self::Egress(addr) => {
                tlv.set_reserved(0);
                match addr {
                    IpAddr::V4(a) => {
                        tlv.set_afi(AFI_IPV4);
                        tlv.address_mut().copy_from_slice(&a.octets());
                    }
                    IpAddr::V6(a) => {
                        tlv.set_afi(AFI_IPV6);
                        tlv.address_mut().copy_from_slice(&a.octets());
                    }
                }
            }
            Self::Apn6(id) => {
                tlv.set_level(id.level);
                tlv.set_service_id(id.service_id);
                tlv.set_apn6_reserved(0);
                tlv.set_flow_id(id.flow_id);
            }
            Self::Unknown { value, .. } => tlv.value_mut().copy_from_slice(value),
        }
    }
}

/// The data of a sticky-service option: one or more sub-TLVs, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct StickyDst(pub Vec<StickyTlv>);

impl StickyDst {
    /// An option carrying the sticky egress `addr`.
    pub fn egress(addr: IpAddr) -> Self {
        Self(vec![StickyTlv::Egress(addr)])
    }

    /// Parse option data: [`Error::Truncated`] if empty or a sub-TLV is cut
    /// short, [`Error::TooLong`] over 255 octets, else as
    /// [`StickyTlv::parse`].
    pub fn parse(data: &[u8]) -> Result<Self> {
        if data.is_empty() {
            return Err(Error::Truncated);
        }
        if data.len() > MAX_OPTION_DATA {
            return Err(Error::TooLong);
        }
        let mut list = Vec::new();
        let mut rest = data;
        while !rest.is_empty() {
            let tlv = SubTlv::new_checked(rest)?;
            list.push(StickyTlv::parse(&tlv)?);
            rest = &rest[tlv.total_len()..];
        }
        Ok(Self(list))
    }

    /// The first sticky egress address.
    pub fn egress_addr(&self) -> Option<IpAddr> {
        self.0.iter().find_map(|t| match t {
            StickyTlv::Egress(a) => Some(*a),
            _ => None,
        })
    }

    /// The first APN6 sticky ID.
    pub fn apn6(&self) -> Option<Apn6Id> {
        self.0.iter().find_map(|t| match t {
            StickyTlv::Apn6(id) => Some(*id),
            _ => None,
        })
    }

    /// Octets the option data occupies.
    pub fn buffer_len(&self) -> usize {
        self.0.iter().map(StickyTlv::buffer_len).sum()
    }

    /// The option data: [`Error::Truncated`] for no sub-TLV,
    /// [`Error::TooLong`] over 255 octets, [`Error::Malformed`] for an
    /// `Unknown` with a known type.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        if self.0.is_empty() {
            return Err(Error::Truncated);
        }
        for t in &self.0 {
            t.check()?;
        }
        if self.buffer_len() > MAX_OPTION_DATA {
            return Err(Error::TooLong);
        }
        let mut out = vec![0; self.buffer_len()];
        let mut pos = 0;
        for t in &self.0 {
            t.emit(&mut SubTlv::new_unchecked(&mut out[pos..]));
            pos += t.buffer_len();
        }
        Ok(out)
    }
}

#[cfg(test)]
mod test {
    use proptest::prelude::*;

    use super::*;

    /// Egress fd00::a (IPv6), then the APN6 ID (level 2, service 7, flow 9),
    /// then an unknown type 0x77 with one octet.
    static OPTION_BYTES: [u8; 29] = [
        0x01, 0x12, 0x02, 0x00, // type 1, len 18, AFI IPv6, reserved
        0xfd, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, //
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0a, // fd00::a
        0x02, 0x04, 0x02, 0x07, 0x00, 0x09, // type 2, len 4, level, service, reserved, flow
        0x77, 0x01, 0xee, // unknown type 0x77, len 1
    ];

    /// Egress 10.1.2.3 (IPv4).
    static V4_BYTES: [u8; 8] = [0x01, 0x06, 0x01, 0x00, 10, 1, 2, 3];

    fn option() -> StickyDst {
        StickyDst(vec![
            StickyTlv::Egress("fd00::a".parse().unwrap()),
            StickyTlv::Apn6(Apn6Id {
                level: 2,
                service_id: 7,
                flow_id: 9,
            }),
            StickyTlv::Unknown {
                sticky_type: 0x77,
                value: vec![0xee],
            },
        ])
    }

    #[test]
    fn test_deconstruct() {
        let tlv = SubTlv::new_checked(&OPTION_BYTES[..]).unwrap();
        assert_eq!(tlv.sticky_type(), StickyType::Egress);
        assert_eq!(tlv.len(), 18);
        assert_eq!(tlv.total_len(), 20);
        assert_eq!(tlv.afi(), AFI_IPV6);
        assert_eq!(tlv.reserved(), 0);
        assert_eq!(tlv.address(), &OPTION_BYTES[4..20]);
        let tlv = SubTlv::new_checked(&OPTION_BYTES[20..]).unwrap();
        assert_eq!(tlv.sticky_type(), StickyType::Apn6);
        assert_eq!(
            (
                tlv.level(),
                tlv.service_id(),
                tlv.apn6_reserved(),
                tlv.flow_id()
            ),
            (2, 7, 0, 9)
        );
        let tlv = SubTlv::new_checked(&OPTION_BYTES[26..]).unwrap();
        assert_eq!(tlv.sticky_type(), StickyType::Unknown(0x77));
        assert_eq!(tlv.value(), &[0xee]);
        let tlv = SubTlv::new_checked(&V4_BYTES[..]).unwrap();
        assert_eq!(tlv.afi(), AFI_IPV4);
        assert_eq!(tlv.address(), &[10, 1, 2, 3]);
    }

    #[test]
    fn test_construct() {
        let mut bytes = vec![0xa5; OPTION_BYTES.len()];
        {
            let mut tlv = SubTlv::new_unchecked(&mut bytes[..]);
            tlv.set_sticky_type(StickyType::Egress);
            tlv.set_len(18);
            tlv.set_afi(AFI_IPV6);
            tlv.set_reserved(0);
            tlv.address_mut().copy_from_slice(&OPTION_BYTES[4..20]);
            let mut tlv = SubTlv::new_unchecked(&mut bytes[20..]);
            tlv.set_sticky_type(StickyType::Apn6);
            tlv.set_len(4);
            tlv.set_level(2);
            tlv.set_service_id(7);
            tlv.set_apn6_reserved(0);
            tlv.set_flow_id(9);
            let mut tlv = SubTlv::new_unchecked(&mut bytes[26..]);
            tlv.set_sticky_type(StickyType::Unknown(0x77));
            tlv.set_len(1);
            tlv.value_mut().copy_from_slice(&[0xee]);
        }
        assert_eq!(bytes, OPTION_BYTES);
    }

    #[test]
    fn test_parse() {
        let opt = StickyDst::parse(&OPTION_BYTES).unwrap();
        assert_eq!(opt, option());
        assert_eq!(opt.egress_addr(), Some("fd00::a".parse().unwrap()));
        assert_eq!(opt.apn6().unwrap().flow_id, 9);
        assert_eq!(
            StickyDst::parse(&V4_BYTES).unwrap(),
            StickyDst::egress("10.1.2.3".parse().unwrap())
        );
    }

    #[test]
    fn test_emit() {
        assert_eq!(option().buffer_len(), OPTION_BYTES.len());
        assert_eq!(option().to_bytes().unwrap(), OPTION_BYTES);
        let v4 = StickyDst::egress("10.1.2.3".parse().unwrap());
        assert_eq!(v4.to_bytes().unwrap(), V4_BYTES);
        let mut bytes = vec![0xa5; 8];
        StickyTlv::Egress("10.1.2.3".parse().unwrap())
            .emit(&mut SubTlv::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes, V4_BYTES);
    }

    #[test]
    fn truncated_at_every_octet() {
        assert_eq!(StickyDst::parse(&[]), Err(Error::Truncated));
        // Cuts inside the first two sub-TLVs fail; a cut at a boundary is a
        // shorter valid option.
        for cut in 1..OPTION_BYTES.len() {
            let r = StickyDst::parse(&OPTION_BYTES[..cut]);
            if cut == 20 || cut == 26 {
                assert!(r.is_ok(), "cut {cut}");
            } else {
                assert_eq!(r, Err(Error::Truncated), "cut {cut}");
            }
        }
    }

    #[test]
    fn impossible_and_over_long() {
        // AFI 3, AFI/len mismatch, non-zero reserved, APN6 of the wrong length.
        assert_eq!(
            StickyDst::parse(&[0x01, 0x06, 0x03, 0x00, 1, 2, 3, 4]),
            Err(Error::Malformed)
        );
        assert_eq!(
            StickyDst::parse(&[0x01, 0x06, 0x02, 0x00, 1, 2, 3, 4]),
            Err(Error::BadLength)
        );
        assert_eq!(
            StickyDst::parse(&[
                0x01, 0x12, 0x01, 0x00, 1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
            ]),
            Err(Error::BadLength)
        );
        assert_eq!(
            StickyDst::parse(&[0x01, 0x06, 0x01, 0x01, 1, 2, 3, 4]),
            Err(Error::Malformed)
        );
        assert_eq!(StickyDst::parse(&[0x01, 0x01, 0x01]), Err(Error::BadLength));
        assert_eq!(
            StickyDst::parse(&[0x02, 0x05, 0, 0, 0, 0, 0]),
            Err(Error::BadLength)
        );
        assert_eq!(
            StickyDst::parse(&[0x02, 0x03, 0, 0, 0]),
            Err(Error::BadLength)
        );
        assert_eq!(
            StickyDst::parse(&[0x02, 0x04, 0, 0, 1, 0]),
            Err(Error::Malformed)
        );
        // Over 255 octets.
        let mut big = vec![0x77, 0xfd];
        big.extend([0; 0xfd]);
        assert_eq!(big.len(), 255);
        assert!(StickyDst::parse(&big).is_ok());
        big.push(0x00);
        assert_eq!(StickyDst::parse(&big), Err(Error::TooLong));
        let too_big = StickyDst(vec![
            StickyTlv::Unknown {
                sticky_type: 0x77,
                value: vec![0; 0xfd],
            },
            StickyTlv::Apn6(Apn6Id {
                level: 0,
                service_id: 0,
                flow_id: 0,
            }),
        ]);
        assert_eq!(too_big.to_bytes(), Err(Error::TooLong));
        let bad = StickyDst(vec![StickyTlv::Unknown {
            sticky_type: 1,
            value: vec![],
        }]);
        assert_eq!(bad.to_bytes(), Err(Error::Malformed));
        assert_eq!(StickyDst(vec![]).to_bytes(), Err(Error::Truncated));
    }

    #[test]
    fn unknown_code_points_survive() {
        for v in 0..=0xff_u8 {
            assert_eq!(u8::from(StickyType::from(v)), v);
        }
        let bytes = [0x00, 0x00, 0xff, 0x02, 0xab, 0xcd];
        let opt = StickyDst::parse(&bytes).unwrap();
        assert_eq!(opt.0.len(), 2);
        assert_eq!(opt.0[1].sticky_type(), StickyType::Unknown(0xff));
        assert_eq!(opt.to_bytes().unwrap(), bytes);
    }

    fn arb_tlv() -> impl Strategy<Value = StickyTlv> {
        prop_oneof![
            any::<[u8; 4]>().prop_map(|a| StickyTlv::Egress(IpAddr::V4(a.into()))),
            any::<[u8; 16]>().prop_map(|a| StickyTlv::Egress(IpAddr::V6(a.into()))),
            any::<[u8; 3]>().prop_map(|[level, service_id, flow_id]| StickyTlv::Apn6(Apn6Id {
                level,
                service_id,
                flow_id
            })),
            (3_u8.., proptest::collection::vec(any::<u8>(), 0..20))
                .prop_map(|(sticky_type, value)| StickyTlv::Unknown { sticky_type, value }),
        ]
    }

    proptest! {
        #[test]
        fn emit_parse_round_trip(list in proptest::collection::vec(arb_tlv(), 1..8)) {
            let opt = StickyDst(list);
            let bytes = opt.to_bytes().unwrap();
            prop_assert_eq!(bytes.len(), opt.buffer_len());
            prop_assert_eq!(StickyDst::parse(&bytes).unwrap(), opt);
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            crate::fuzz::sticky(&bytes);
        }
    }
}
