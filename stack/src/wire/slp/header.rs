//! The SLPv2 message header (RFC 2608 §8).
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |    Version    |  Function-ID  |            Length             |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! | Length, contd.|O|F|R|       reserved          |Next Ext Offset|
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  Next Extension Offset, contd.|              XID              |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |      Language Tag Length      |         Language Tag          \
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! Length and Next Extension Offset are not fields of [`Header`]: they are
//! computed when a [`Message`](super::Message) is emitted and checked when
//! one is parsed. The function ID follows from the message body.

use core::fmt;

use super::codec::{put_u16, Reader};
use super::ParseError;
use crate::wire::Error;

/// The only version this module speaks.
pub const VERSION: u8 = 2;

/// Octets of the header before the language tag.
pub const FIXED_LEN: usize = 14;

/// `OVERFLOW`: the message did not fit a datagram and was truncated.
const FLAG_OVERFLOW: u16 = 0x8000;
/// `FRESH`: set on every new SrvReg.
const FLAG_FRESH: u16 = 0x4000;
/// `REQUEST MCAST`: the request was multicast or broadcast.
const FLAG_MCAST: u16 = 0x2000;
const FLAGS_RESERVED: u16 = !(FLAG_OVERFLOW | FLAG_FRESH | FLAG_MCAST);

open_enum! {
    /// The Function-ID: which message follows (RFC 2608 §8, RFC 3528 §4.6).
    pub enum FunctionId: u8 {
        /// 1: Service Request.
        SrvRqst = 1,
        /// 2: Service Reply.
        SrvRply = 2,
        /// 3: Service Registration.
        SrvReg = 3,
        /// 4: Service Deregistration.
        SrvDeReg = 4,
        /// 5: Service Acknowledgment.
        SrvAck = 5,
        /// 6: Attribute Request.
        AttrRqst = 6,
        /// 7: Attribute Reply.
        AttrRply = 7,
        /// 8: DA Advertisement.
        DaAdvert = 8,
        /// 9: Service Type Request.
        SrvTypeRqst = 9,
        /// 10: Service Type Reply.
        SrvTypeRply = 10,
        /// 11: SA Advertisement.
        SaAdvert = 11,
        /// 12: Anti-entropy Request (RFC 3528 §4.6).
        AntiEtrpRqst = 12,
    }
}

/// The three header flags (RFC 2608 §8); the reserved bits are always zero.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Flags {
    /// `OVERFLOW` (0x8000): the message was truncated to fit a datagram.
    pub overflow: bool,
    /// `FRESH` (0x4000): a new registration, replacing any previous one.
    pub fresh: bool,
    /// `REQUEST MCAST` (0x2000): the request was multicast or broadcast.
    pub mcast: bool,
}

impl Flags {
    /// The 16-bit field.
    pub const fn bits(self) -> u16 {
        (if self.overflow { FLAG_OVERFLOW } else { 0 })
            | (if self.fresh { FLAG_FRESH } else { 0 })
            | (if self.mcast { FLAG_MCAST } else { 0 })
    }

    /// The flags in `bits`, ignoring reserved bits.
    pub const fn from_bits_truncate(bits: u16) -> Self {
        Self {
            overflow: bits & FLAG_OVERFLOW != 0,
            fresh: bits & FLAG_FRESH != 0,
            mcast: bits & FLAG_MCAST != 0,
        }
    }

    /// The flags in `bits`; [`ParseError::ReservedFlags`] if a reserved bit is set.
    pub const fn from_bits(bits: u16) -> Result<Self, ParseError> {
        if bits & FLAGS_RESERVED != 0 {
            return Err(ParseError::ReservedFlags(bits & FLAGS_RESERVED));
        }
        Ok(Self::from_bits_truncate(bits))
    }
}

/// A language tag, `1*8ALPHA *("-" 1*8ALNUM)` (RFC 2608 §8 with RFC 3066's
/// digits in subtags). Case is kept; comparisons ignore it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LangTag(String);

impl LangTag {
    /// `s` as a language tag; [`Error::Malformed`] if it does not follow the grammar.
    pub fn new(s: &str) -> Result<Self, Error> {
        if !Self::valid(s) {
            return Err(Error::Malformed);
        }
        Ok(Self(s.to_owned()))
    }

    /// `"en"`, the tag RFC 2608 §16 defaults to.
    pub fn en() -> Self {
        Self("en".to_owned())
    }

    /// The tag as sent.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The primary tag (`"en"` of `"en-US"`).
    pub fn primary(&self) -> &str {
        self.0.split('-').next().unwrap_or_default()
    }

    /// Whether two tags name the same language, ignoring the dialect part
    /// (RFC 2608 §8.1) and case.
    pub fn same_language(&self, other: &Self) -> bool {
        self.primary().eq_ignore_ascii_case(other.primary())
    }

    fn valid(s: &str) -> bool {
        let mut parts = s.split('-');
        let Some(first) = parts.next() else {
            return false;
        };
        let ok = |p: &str, alpha: bool| {
            (1..=8).contains(&p.len())
                && p.bytes()
                    .all(|b| b.is_ascii_alphabetic() || (!alpha && b.is_ascii_digit()))
        };
        ok(first, true) && parts.all(|p| ok(p, false))
    }
}

impl Default for LangTag {
    fn default() -> Self {
        Self::en()
    }
}

impl fmt::Display for LangTag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The header fields a sender chooses. Emitted by
/// [`Message::emit`](super::Message::emit) together with the function ID,
/// Length and Next Extension Offset it computes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Header {
    /// OVERFLOW, FRESH, REQUEST MCAST.
    pub flags: Flags,
    /// Transaction ID: replies copy the request's; 0 only in unsolicited DAAdverts.
    pub xid: u16,
    /// The language of the request; a reply carries the request's.
    pub lang: LangTag,
}

impl Header {
    /// A header with no flags.
    pub const fn new(xid: u16, lang: LangTag) -> Self {
        Self {
            flags: Flags {
                overflow: false,
                fresh: false,
                mcast: false,
            },
            xid,
            lang,
        }
    }

    /// Octets of the header on the wire.
    pub fn buffer_len(&self) -> usize {
        FIXED_LEN + self.lang.0.len()
    }

    /// Best effort for answering a message that did not parse: the function
    /// ID, flags (reserved bits dropped), XID and language tag, whatever the
    /// version, length and body say. `None` if even those are not there.
    pub fn peek(bytes: &[u8]) -> Option<(FunctionId, Self)> {
        let fixed = Fixed::read(&mut Reader::new(bytes)).ok()?;
        let lang = LangTag::new(fixed.lang).ok()?;
        let header = Self {
            flags: Flags::from_bits_truncate(fixed.flags),
            xid: fixed.xid,
            lang,
        };
        Some((FunctionId::from(fixed.function), header))
    }

    /// Appends the header. `len` is the whole message's, `neo` the offset of
    /// the first extension (0 for none); both fit 24 bits.
    pub(super) fn emit(&self, function: FunctionId, len: u32, neo: u32, out: &mut Vec<u8>) {
        out.push(VERSION);
        out.push(function.into());
        super::codec::put_u24(out, len);
        put_u16(out, self.flags.bits());
        super::codec::put_u24(out, neo);
        put_u16(out, self.xid);
        super::codec::put_str16(out, &self.lang.0);
    }
}

/// The header as it is on the wire, before any check.
#[derive(Debug, Clone, Copy)]
pub(super) struct Fixed<'a> {
    pub(super) version: u8,
    pub(super) function: u8,
    pub(super) length: u32,
    pub(super) flags: u16,
    pub(super) neo: u32,
    pub(super) xid: u16,
    pub(super) lang: &'a str,
}

impl<'a> Fixed<'a> {
    pub(super) fn read(r: &mut Reader<'a>) -> Result<Self, ParseError> {
        Ok(Self {
            version: r.u8()?,
            function: r.u8()?,
            length: r.u24()?,
            flags: r.u16()?,
            neo: r.u24()?,
            xid: r.u16()?,
            lang: r.str16()?,
        })
    }
}

/// For TCP framing: the length of the message that starts `prefix`, from its
/// Length field, or `None` until 5 octets are there. A value below
/// [`FIXED_LEN`] can never parse: close the stream.
pub fn frame_len(prefix: &[u8]) -> Option<usize> {
    let b = prefix.get(2..5)?;
    Some(u32::from_be_bytes([0, b[0], b[1], b[2]]) as usize)
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn function_ids() {
        for v in 0..=0xff_u8 {
            assert_eq!(u8::from(FunctionId::from(v)), v);
        }
        assert_eq!(FunctionId::from(12), FunctionId::AntiEtrpRqst);
        assert_eq!(FunctionId::from(13), FunctionId::Unknown(13));
    }

    #[test]
    fn flags() {
        let f = Flags {
            overflow: true,
            fresh: false,
            mcast: true,
        };
        assert_eq!(f.bits(), 0xa000);
        assert_eq!(Flags::from_bits(0xa000), Ok(f));
        assert_eq!(Flags::from_bits(0x4001), Err(ParseError::ReservedFlags(1)));
        assert!(Flags::from_bits_truncate(0x4001).fresh);
    }

    #[test]
    fn lang_tags() {
        for ok in [
            "en",
            "EN",
            "en-US",
            "zh-Hant",
            "es-419",
            "i-klingon",
            "abcdefgh",
        ] {
            assert!(LangTag::new(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "-",
            "en-",
            "1en",
            "abcdefghi",
            "en--us",
            "en_US",
            "en US",
            "é",
        ] {
            assert_eq!(LangTag::new(bad), Err(Error::Malformed), "{bad}");
        }
        let a = LangTag::new("en-US").unwrap();
        assert!(a.same_language(&LangTag::new("EN-gb").unwrap()));
        assert!(!a.same_language(&LangTag::new("de").unwrap()));
        assert_eq!(a.primary(), "en");
    }

    #[test]
    fn framing() {
        assert_eq!(frame_len(&[2, 1, 0, 0]), None);
        assert_eq!(frame_len(&[2, 1, 0x01, 0x02, 0x03]), Some(0x01_0203));
        assert_eq!(frame_len(&[2, 1, 0, 0, 0x2a, 0xff]), Some(0x2a));
    }

    #[test]
    fn peek_survives_bad_versions() {
        let bytes = [
            1, 99, 0, 0, 0x10, 0, 0, 0, 0, 0, 0x12, 0x34, 0, 2, b'e', b'n',
        ];
        let (f, h) = Header::peek(&bytes).unwrap();
        assert_eq!(f, FunctionId::Unknown(99));
        assert_eq!(h.xid, 0x1234);
        assert_eq!(h.lang.as_str(), "en");
        assert_eq!(Header::peek(&bytes[..15]), None);
    }
}
