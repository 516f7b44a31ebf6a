//! Network Service Header (RFC 8300), as SPEC §1.4 profiles it.
//!
//! NSH carries the service path (SPI, SI) of a packet along a service
//! function chain, plus metadata. It travels over Ethernet (EtherType
//! [`ETHERTYPE`]), GRE (protocol type [`ETHERTYPE`], see [`super::gre`]) and
//! VXLAN-GPE (next protocol 4, see [`super::vxlan_gpe`]).
//!
//! | field           | bits | notes                                            |
//! |-----------------|------|--------------------------------------------------|
//! | Ver             | 2    | 0; [`Repr::parse`] refuses others                 |
//! | O               | 1    | OAM packet                                        |
//! | U               | 1    | unassigned                                        |
//! | TTL             | 6    | starts at 63 ([`Ttl::MAX`]); the nSFF decrements  |
//! | Length          | 6    | whole NSH in 4-octet words: 6 for MD type 1, ≥ 2 for MD type 2 |
//! | U               | 4    | unassigned                                        |
//! | MD Type         | 4    | 1, 2; others kept opaque                          |
//! | Next Protocol   | 8    | [`NextProtocol`], incl. `0xFE` HTTP **\[ext\]**      |
//! | SPI             | 24   | [`Spi`]                                           |
//! | SI              | 8    | SFs decrement it                                  |
//!
//! MD type 1 adds 16 octets of fixed context; MD type 2 adds context headers
//! ([`ContextHeader`]): `class:16 type:8 U:1 len:7` and a value of `len`
//! octets padded with zeros to a multiple of 4.
//!
//! Unassigned (U) bits: RFC 8300 §2.2 says an originator sets them to zero
//! and transit nodes preserve them. [`Repr::emit`] originates, so it writes
//! zeros; a transit node edits the header in place through [`Packet`]'s
//! setters ([`Packet::set_ttl`], [`Packet::set_si`]), which keep every other
//! bit. Unknown MD types keep their metadata as opaque words
//! ([`Metadata::Unknown`]) so that they survive a round trip; deciding to
//! drop them (RFC 8300 §2.5) is the caller's job.

use core::fmt;

use super::{Error, Result};

/// EtherType (and GRE protocol type) of NSH.
pub const ETHERTYPE: u16 = 0x894f;

/// Octets of the base header plus the service path header.
pub const HEADER_LEN: usize = 8;

/// Octets of MD type 1 fixed context.
pub const MD1_CONTEXT_LEN: usize = 16;

/// Longest NSH: the length field is 6 bits of 4-octet words.
pub const MAX_LEN: usize = 0x3f * 4;

/// Most metadata octets of MD type 2 (or an unknown MD type).
pub const MAX_METADATA_LEN: usize = MAX_LEN - HEADER_LEN;

/// Most value octets of one MD type 2 context header (its length is 7 bits).
pub const MAX_CONTEXT_VALUE_LEN: usize = 0x7f;

open_enum! {
    /// The NSH Next Protocol field (RFC 8300 §11.2.5), an open enum.
    ///
    /// `Unknown`: Any other value (`0xFF` is "Experiment 2"). Construct through `From<u8>`.
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
        /// `0xFE` (RFC 8300's "Experiment 1"): an HTTP message follows **\[ext\]**.
        Http = 0xfe,
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
            Self::Http => f.write_str("HTTP"),
            Self::Unknown(v) => write!(f, "0x{v:02x}"),
        }
    }
}

open_enum! {
    /// The NSH MD Type field (4 bits), an open enum.
    ///
    /// `Unknown`: Any other value (0 reserved, 0xF experimental, the rest unassigned). Only the low 4 bits go on the wire.
    pub enum MdType: u8 {
        /// `0x1`: 16 octets of fixed context.
        Type1 = 0x1,
        /// `0x2`: variable context headers.
        Type2 = 0x2,
    }
}

/// A Service Path Identifier: 24 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Spi(u32);

impl Spi {
    /// Largest SPI.
    pub const MAX: u32 = 0x00ff_ffff;

    /// The SPI `value`, or `None` if it needs more than 24 bits.
    pub const fn new(value: u32) -> Option<Self> {
        if value > Self::MAX {
            return None;
        }
        Some(Self(value))
    }

    /// The SPI as a number.
    pub const fn value(self) -> u32 {
        self.0
    }
}

impl fmt::Display for Spi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// An NSH TTL: 6 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ttl(u8);

impl Ttl {
    /// Largest TTL, and the one a classifier starts with (RFC 8300 §2.2).
    pub const MAX: Self = Self(0x3f);

    /// The TTL `value`, or `None` if it needs more than 6 bits.
    pub const fn new(value: u8) -> Option<Self> {
        if value > Self::MAX.0 {
            return None;
        }
        Some(Self(value))
    }

    /// The TTL as a number.
    pub const fn value(self) -> u8 {
        self.0
    }

    /// One less, or `None` when the packet must be dropped (the result would be 0).
    pub const fn decremented(self) -> Option<Self> {
        if self.0 <= 1 {
            return None;
        }
        Some(Self(self.0 - 1))
    }
}

impl Default for Ttl {
    fn default() -> Self {
        Self::MAX
    }
}

// Base header and service path header, RFC 8300 §2.2 and §2.3:
//
//  0                   1                   2                   3
//  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
// |Ver|O|U|    TTL    |   Length  |U|U|U|U|MD Type| Next Protocol |
// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
// |          Service Path Identifier (SPI)        | Service Index |
// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
// |                                                               |
// ~              Context Headers (MD type 1: 16 octets)           ~
// |                                                               |
// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
mod field {
    #![allow(non_snake_case)]

    use core::ops::Range;

    /// Ver (2), O, U, the high 4 bits of TTL.
    pub(super) const VER_TTL: Range<usize> = 0..2;
    /// The low 4 bits of the second octet are U and MD Type.
    pub(super) const MD_TYPE: usize = 2;
    pub(super) const NEXT_PROTO: usize = 3;
    pub(super) const SPI: Range<usize> = 4..7;
    pub(super) const SI: usize = 7;
    pub(super) const fn METADATA(length_words: u8) -> Range<usize> {
        super::HEADER_LEN..length_words as usize * 4
    }

    pub(super) const VER_SHIFT: u16 = 14;
    pub(super) const O_BIT: u16 = 0x2000;
    pub(super) const TTL_SHIFT: u16 = 6;
    pub(super) const TTL_MASK: u16 = 0x0fc0;
    pub(super) const LEN_MASK: u16 = 0x003f;
}

// MD type 2 context header, RFC 8300 §2.5.1:
//
//  0                   1                   2                   3
//  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
// |          Metadata Class       |      Type     |U|    Length   |
// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
// |                   Variable-Length Metadata                    |
// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// Length: value octets, without the padding to a 4-octet boundary.
mod ctx_field {
    #![allow(non_snake_case)]

    use core::ops::Range;

    pub(super) const CLASS: Range<usize> = 0..2;
    pub(super) const TYPE: usize = 2;
    pub(super) const LENGTH: usize = 3;
    pub(super) const LEN_MASK: u8 = 0x7f;
    pub(super) const fn VALUE(len: u8) -> Range<usize> {
        4..4 + len as usize
    }
    /// The octets a context header with `len` value octets occupies.
    pub(super) const fn PADDED(len: usize) -> usize {
        4 + len.div_ceil(4) * 4
    }
}

/// A read/write view of an NSH at the start of a buffer; what follows the
/// header is the [`Self::payload`].
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

    /// Ensure no accessor panics: the buffer holds the 8 fixed octets
    /// ([`Error::Truncated`]), the Length field is at least 2 words
    /// ([`Error::BadLength`]), and the buffer holds the whole header it
    /// announces ([`Error::Truncated`]). Invalidated by [`Self::set_length`].
    pub fn check_len(&self) -> Result<()> {
        let data = self.buffer.as_ref();
        if data.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let words = self.length();
        if usize::from(words) * 4 < HEADER_LEN {
            return Err(Error::BadLength);
        }
        if data.len() < field::METADATA(words).end {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Give the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn word0(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::VER_TTL];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// The Ver field (2 bits).
    pub fn version(&self) -> u8 {
        (self.word0() >> field::VER_SHIFT) as u8
    }

    /// The O bit: an OAM packet.
    pub fn oam(&self) -> bool {
        self.word0() & field::O_BIT != 0
    }

    /// The TTL field (6 bits).
    pub fn ttl(&self) -> Ttl {
        Ttl(((self.word0() & field::TTL_MASK) >> field::TTL_SHIFT) as u8)
    }

    /// The Length field: the whole NSH in 4-octet words.
    pub fn length(&self) -> u8 {
        (self.word0() & field::LEN_MASK) as u8
    }

    /// The header length in octets: Length × 4.
    pub fn header_len(&self) -> usize {
        usize::from(self.length()) * 4
    }

    /// The MD Type field.
    pub fn md_type(&self) -> MdType {
        MdType::from(self.buffer.as_ref()[field::MD_TYPE] & 0x0f)
    }

    /// The Next Protocol field.
    pub fn next_protocol(&self) -> NextProtocol {
        NextProtocol::from(self.buffer.as_ref()[field::NEXT_PROTO])
    }

    /// The Service Path Identifier.
    pub fn spi(&self) -> Spi {
        let b = &self.buffer.as_ref()[field::SPI];
        Spi(u32::from_be_bytes([0, b[0], b[1], b[2]]))
    }

    /// The Service Index.
    pub fn si(&self) -> u8 {
        self.buffer.as_ref()[field::SI]
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    /// The metadata after the service path header (MD type 1 context,
    /// MD type 2 context headers, or opaque words).
    pub fn metadata(&self) -> &'a [u8] {
        &self.buffer.as_ref()[field::METADATA(self.length())]
    }

    /// Whatever follows the NSH in the buffer.
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn set_word0(&mut self, mask: u16, bits: u16) {
        let w = (self.word0() & !mask) | (bits & mask);
        self.buffer.as_mut()[field::VER_TTL].copy_from_slice(&w.to_be_bytes());
    }

    /// Set the Ver field (low 2 bits of `value`).
    pub fn set_version(&mut self, value: u8) {
        self.set_word0(0xc000, u16::from(value) << field::VER_SHIFT);
    }

    /// Set the O bit.
    pub fn set_oam(&mut self, value: bool) {
        self.set_word0(field::O_BIT, if value { field::O_BIT } else { 0 });
    }

    /// Set the TTL, keeping every other bit.
    pub fn set_ttl(&mut self, value: Ttl) {
        self.set_word0(field::TTL_MASK, u16::from(value.0) << field::TTL_SHIFT);
    }

    /// Set the Length field (low 6 bits of `value`).
    pub fn set_length(&mut self, value: u8) {
        self.set_word0(field::LEN_MASK, u16::from(value));
    }

    /// Set the MD Type field (low 4 bits), keeping the unassigned bits.
    pub fn set_md_type(&mut self, value: MdType) {
        let b = &mut self.buffer.as_mut()[field::MD_TYPE];
        *b = (*b & 0xf0) | (u8::from(value) & 0x0f);
    }

    /// Set the Next Protocol field.
    pub fn set_next_protocol(&mut self, value: NextProtocol) {
        self.buffer.as_mut()[field::NEXT_PROTO] = value.into();
    }

    /// Set the Service Path Identifier.
    pub fn set_spi(&mut self, value: Spi) {
        let b = value.0.to_be_bytes();
        self.buffer.as_mut()[field::SPI].copy_from_slice(&b[1..]);
    }

    /// Set the Service Index.
    pub fn set_si(&mut self, value: u8) {
        self.buffer.as_mut()[field::SI] = value;
    }

    /// The metadata, mutably.
    pub fn metadata_mut(&mut self) -> &mut [u8] {
        let range = field::METADATA(self.length());
        &mut self.buffer.as_mut()[range]
    }

    /// Whatever follows the NSH, mutably.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let start = self.header_len();
        &mut self.buffer.as_mut()[start..]
    }
}

/// One MD type 2 context header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ContextHeader<'a> {
    class: u16,
    ctx_type: u8,
    value: &'a [u8],
}

impl<'a> ContextHeader<'a> {
    /// A context header; [`Error::TooLong`] if `value` is over 127 octets.
    pub const fn new(class: u16, ctx_type: u8, value: &'a [u8]) -> Result<Self> {
        if value.len() > MAX_CONTEXT_VALUE_LEN {
            return Err(Error::TooLong);
        }
        Ok(Self {
            class,
            ctx_type,
            value,
        })
    }

    /// Parse the context header at the start of `data` (more may follow).
    /// [`Error::Truncated`] if `data` ends inside it or its padding.
    pub fn parse(data: &'a [u8]) -> Result<Self> {
        if data.len() < ctx_field::VALUE(0).end {
            return Err(Error::Truncated);
        }
        let len = data[ctx_field::LENGTH] & ctx_field::LEN_MASK;
        if data.len() < ctx_field::PADDED(usize::from(len)) {
            return Err(Error::Truncated);
        }
        let c = &data[ctx_field::CLASS];
        Ok(Self {
            class: u16::from_be_bytes([c[0], c[1]]),
            ctx_type: data[ctx_field::TYPE],
            value: &data[ctx_field::VALUE(len)],
        })
    }

    /// The Metadata Class.
    pub const fn class(&self) -> u16 {
        self.class
    }

    /// The Type (its high bit is "critical" in RFC 8300's MD type 2 registry).
    pub const fn ctx_type(&self) -> u8 {
        self.ctx_type
    }

    /// The value, without padding.
    pub const fn value(&self) -> &'a [u8] {
        self.value
    }

    /// Octets it occupies on the wire, padding included.
    pub const fn buffer_len(&self) -> usize {
        ctx_field::PADDED(self.value.len())
    }

    /// Write it at the start of `buf`, padding with zeros.
    ///
    /// # Panics
    /// If `buf` is shorter than [`Self::buffer_len`].
    pub fn emit(&self, buf: &mut [u8]) {
        buf[ctx_field::CLASS].copy_from_slice(&self.class.to_be_bytes());
        buf[ctx_field::TYPE] = self.ctx_type;
        // At most 127: checked by new (or read from 7 bits by parse).
        let len = self.value.len() as u8;
        buf[ctx_field::LENGTH] = len;
        buf[ctx_field::VALUE(len)].copy_from_slice(self.value);
        buf[ctx_field::VALUE(len).end..self.buffer_len()].fill(0);
    }
}

/// Iterator over MD type 2 context headers. Yields `Err` once for a header
/// that runs past the area, then stops.
#[derive(Debug, Clone)]
pub struct ContextIter<'a> {
    data: &'a [u8],
    pos: usize,
    failed: bool,
}

impl<'a> ContextIter<'a> {
    /// Iterate the context headers in `area` (an MD type 2 metadata area).
    pub const fn new(area: &'a [u8]) -> Self {
        Self {
            data: area,
            pos: 0,
            failed: false,
        }
    }

    /// Offset in the area of the header the next call to `next` returns.
    pub const fn position(&self) -> usize {
        self.pos
    }
}

impl<'a> Iterator for ContextIter<'a> {
    type Item = Result<ContextHeader<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.data.len() {
            return None;
        }
        match ContextHeader::parse(&self.data[self.pos..]) {
            Ok(h) => {
                self.pos += h.buffer_len();
                Some(Ok(h))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

impl core::iter::FusedIterator for ContextIter<'_> {}

/// The context headers of an MD type 2 NSH: either a validated wire area
/// ([`Repr::parse`]) or a list to emit ([`ContextHeaders::new`]); both at
/// most [`MAX_METADATA_LEN`] octets.
#[derive(Debug, Clone, Copy)]
pub struct ContextHeaders<'a>(Headers<'a>);

#[derive(Debug, Clone, Copy)]
enum Headers<'a> {
    Wire(&'a [u8]),
    List(&'a [ContextHeader<'a>]),
}

impl<'a> ContextHeaders<'a> {
    /// No context headers.
    pub const EMPTY: Self = Self(Headers::List(&[]));

    /// The headers in `list`, in order; [`Error::TooLong`] if they need more
    /// than [`MAX_METADATA_LEN`] octets.
    pub fn new(list: &'a [ContextHeader<'a>]) -> Result<Self> {
        let len: usize = list.iter().map(ContextHeader::buffer_len).sum();
        if len > MAX_METADATA_LEN {
            return Err(Error::TooLong);
        }
        Ok(Self(Headers::List(list)))
    }

    /// Validate a wire area: headers back to back, filling it exactly
    /// ([`Error::BadLength`] otherwise).
    fn from_wire(area: &'a [u8]) -> Result<Self> {
        if area.len() > MAX_METADATA_LEN {
            return Err(Error::TooLong);
        }
        for h in ContextIter::new(area) {
            h.map_err(|_| Error::BadLength)?;
        }
        Ok(Self(Headers::Wire(area)))
    }

    /// Iterate the headers.
    pub fn iter(&self) -> impl Iterator<Item = ContextHeader<'a>> + 'a {
        let (wire, list): (&'a [u8], &'a [ContextHeader<'a>]) = match self.0 {
            Headers::Wire(w) => (w, &[]),
            Headers::List(l) => (&[], l),
        };
        // A wire area was validated, so Err cannot occur.
        ContextIter::new(wire)
            .map_while(|h| h.ok())
            .chain(list.iter().copied())
    }

    /// Octets the headers occupy.
    pub fn buffer_len(&self) -> usize {
        match self.0 {
            Headers::Wire(w) => w.len(),
            Headers::List(l) => l.iter().map(ContextHeader::buffer_len).sum(),
        }
    }

    fn emit(&self, area: &mut [u8]) {
        match self.0 {
            Headers::Wire(w) => area.copy_from_slice(w),
            Headers::List(l) => {
                let mut pos = 0;
                for h in l {
                    h.emit(&mut area[pos..]);
                    pos += h.buffer_len();
                }
            }
        }
    }
}

impl PartialEq for ContextHeaders<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for ContextHeaders<'_> {}

/// Metadata of an unknown MD type, kept verbatim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UnknownMetadata<'a> {
    md_type: u8,
    data: &'a [u8],
}

impl<'a> UnknownMetadata<'a> {
    /// Metadata of MD type `md_type`. [`Error::Malformed`] if `md_type` is 1,
    /// 2 or over 15; [`Error::BadLength`] if `data` is not whole words;
    /// [`Error::TooLong`] over [`MAX_METADATA_LEN`] octets.
    pub const fn new(md_type: u8, data: &'a [u8]) -> Result<Self> {
        if md_type > 0x0f || md_type == 1 || md_type == 2 {
            return Err(Error::Malformed);
        }
        if data.len() % 4 != 0 {
            return Err(Error::BadLength);
        }
        if data.len() > MAX_METADATA_LEN {
            return Err(Error::TooLong);
        }
        Ok(Self { md_type, data })
    }

    /// The MD type.
    pub const fn md_type(&self) -> MdType {
        MdType::Unknown(self.md_type)
    }

    /// The metadata words.
    pub const fn data(&self) -> &'a [u8] {
        self.data
    }
}

/// The metadata of an NSH, by MD type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metadata<'a> {
    /// MD type 1: 16 octets of fixed context.
    Md1([u8; MD1_CONTEXT_LEN]),
    /// MD type 2: context headers (possibly none).
    Md2(ContextHeaders<'a>),
    /// Another MD type, kept verbatim.
    Unknown(UnknownMetadata<'a>),
}

impl Metadata<'_> {
    /// The MD type.
    pub const fn md_type(&self) -> MdType {
        match self {
            Self::Md1(_) => MdType::Type1,
            Self::Md2(_) => MdType::Type2,
            Self::Unknown(u) => u.md_type(),
        }
    }

    /// Octets the metadata occupies after the service path header.
    pub fn buffer_len(&self) -> usize {
        match self {
            Self::Md1(_) => MD1_CONTEXT_LEN,
            Self::Md2(h) => h.buffer_len(),
            Self::Unknown(u) => u.data.len(),
        }
    }
}

/// An NSH, high level. [`Self::emit`] originates a header (unassigned bits
/// zero, version 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr<'a> {
    /// The O bit.
    pub oam: bool,
    /// Time to live.
    pub ttl: Ttl,
    /// What follows the NSH.
    pub next_protocol: NextProtocol,
    /// Service Path Identifier.
    pub spi: Spi,
    /// Service Index.
    pub si: u8,
    /// MD type and metadata.
    pub metadata: Metadata<'a>,
}

impl<'a> Repr<'a> {
    /// Parse a header. [`Error::Malformed`] for a version other than 0;
    /// [`Error::BadLength`] if the Length disagrees with the MD type (6 words
    /// for MD type 1) or the context headers do not fill it exactly.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&'a T>) -> Result<Self> {
        packet.check_len()?;
        if packet.version() != 0 {
            return Err(Error::Malformed);
        }
        let area = packet.metadata();
        let metadata = match packet.md_type() {
            MdType::Type1 => {
                let Ok(ctx) = <[u8; MD1_CONTEXT_LEN]>::try_from(area) else {
                    return Err(Error::BadLength);
                };
                Metadata::Md1(ctx)
            }
            MdType::Type2 => Metadata::Md2(ContextHeaders::from_wire(area)?),
            MdType::Unknown(t) => Metadata::Unknown(UnknownMetadata::new(t, area)?),
        };
        Ok(Self {
            oam: packet.oam(),
            ttl: packet.ttl(),
            next_protocol: packet.next_protocol(),
            spi: packet.spi(),
            si: packet.si(),
            metadata,
        })
    }

    /// Octets [`Self::emit`] writes: the whole NSH, a multiple of 4.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.metadata.buffer_len()
    }

    /// Write the header at the start of `packet`.
    ///
    /// # Panics
    /// If the buffer is shorter than [`Self::buffer_len`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        let len = self.buffer_len();
        {
            let buf = packet.buffer.as_mut();
            buf[..3].fill(0);
        }
        packet.set_oam(self.oam);
        packet.set_ttl(self.ttl);
        // At most MAX_LEN octets: every metadata constructor bounds it.
        packet.set_length((len / 4) as u8);
        packet.set_md_type(self.metadata.md_type());
        packet.set_next_protocol(self.next_protocol);
        packet.set_spi(self.spi);
        packet.set_si(self.si);
        let area = packet.metadata_mut();
        match &self.metadata {
            Metadata::Md1(ctx) => area.copy_from_slice(ctx),
            Metadata::Md2(h) => h.emit(area),
            Metadata::Unknown(u) => area.copy_from_slice(u.data),
        }
    }
}

#[cfg(test)]
mod test {
    use proptest::prelude::*;

    use super::*;

    /// RFC 8300 layout, MD type 1: ver 0, O 0, TTL 63, length 6, MD type 1,
    /// next protocol IPv4; SPI 0x000123, SI 255; 16 octets of context.
    static MD1_BYTES: [u8; 24] = [
        0x0f, 0xc6, // 00 0 0 111111 000110: ver, O, U, TTL 63, length 6
        0x01, 0x01, // U 0000, MD type 1; next protocol IPv4
        0x00, 0x01, 0x23, 0xff, // SPI 0x000123, SI 255
        0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, // context
        0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f,
    ];

    /// MD type 2, O set, TTL 2, length 6, next protocol HTTP \[ext\]; SPI 42,
    /// SI 3; context headers (class 0x0101, type 0x81, 3 octets + 1 pad)
    /// and (class 0xffff, type 0x02, 4 octets).
    static MD2_BYTES: [u8; 24] = [
        0x20, 0x86, // 00 1 0 000010 000110: O, TTL 2, length 6
        0x02, 0xfe, // MD type 2; next protocol 0xFE (HTTP)
        0x00, 0x00, 0x2a, 0x03, // SPI 42, SI 3
        0x01, 0x01, 0x81, 0x03, 0xaa, 0xbb, 0xcc, 0x00, // class, type, len 3, value, pad
        0xff, 0xff, 0x02, 0x04, 0xde, 0xad, 0xbe, 0xef, // class, type, len 4, value
    ];

    static CTX: [u8; 16] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15];

    fn md1() -> Repr<'static> {
        Repr {
            oam: false,
            ttl: Ttl::MAX,
            next_protocol: NextProtocol::Ipv4,
            spi: Spi::new(0x123).unwrap(),
            si: 0xff,
            metadata: Metadata::Md1(CTX),
        }
    }

    static HEADERS: [ContextHeader<'static>; 2] = [
        ContextHeader {
            class: 0x0101,
            ctx_type: 0x81,
            value: &[0xaa, 0xbb, 0xcc],
        },
        ContextHeader {
            class: 0xffff,
            ctx_type: 0x02,
            value: &[0xde, 0xad, 0xbe, 0xef],
        },
    ];

    fn md2() -> Repr<'static> {
        Repr {
            oam: true,
            ttl: Ttl::new(2).unwrap(),
            next_protocol: NextProtocol::Http,
            spi: Spi::new(42).unwrap(),
            si: 3,
            metadata: Metadata::Md2(ContextHeaders::new(&HEADERS).unwrap()),
        }
    }

    #[test]
    fn test_deconstruct() {
        let packet = Packet::new_checked(&MD1_BYTES[..]).unwrap();
        assert_eq!(packet.version(), 0);
        assert!(!packet.oam());
        assert_eq!(packet.ttl(), Ttl::MAX);
        assert_eq!(packet.length(), 6);
        assert_eq!(packet.header_len(), 24);
        assert_eq!(packet.md_type(), MdType::Type1);
        assert_eq!(packet.next_protocol(), NextProtocol::Ipv4);
        assert_eq!(packet.spi().value(), 0x123);
        assert_eq!(packet.si(), 0xff);
        assert_eq!(packet.metadata(), &CTX);
        assert!(packet.payload().is_empty());

        let packet = Packet::new_checked(&MD2_BYTES[..]).unwrap();
        assert!(packet.oam());
        assert_eq!(packet.ttl().value(), 2);
        assert_eq!(packet.md_type(), MdType::Type2);
        assert_eq!(packet.next_protocol(), NextProtocol::Http);
        let hs: Vec<_> = ContextIter::new(packet.metadata())
            .collect::<Result<_>>()
            .unwrap();
        assert_eq!(hs, HEADERS);
        assert_eq!(hs[0].buffer_len(), 8);
    }

    #[test]
    fn test_construct() {
        let mut bytes = vec![0xa5; 24];
        let mut packet = Packet::new_unchecked(&mut bytes);
        packet.set_version(0);
        packet.set_oam(false);
        packet.set_ttl(Ttl::MAX);
        packet.set_length(6);
        packet.set_md_type(MdType::Type1);
        packet.set_next_protocol(NextProtocol::Ipv4);
        packet.set_spi(Spi::new(0x123).unwrap());
        packet.set_si(0xff);
        packet.metadata_mut().copy_from_slice(&CTX);
        // The unassigned bits keep the buffer's 0xa5 pattern (0x10 of the
        // first octet is clear in it; the third octet's high nibble is 0xa).
        assert_eq!(bytes[2], 0xa1);
        bytes[2] &= 0x0f;
        assert_eq!(bytes, MD1_BYTES);
    }

    #[test]
    fn test_parse() {
        let repr = Repr::parse(&Packet::new_checked(&MD1_BYTES[..]).unwrap()).unwrap();
        assert_eq!(repr, md1());
        assert_eq!(repr.buffer_len(), 24);
        let repr = Repr::parse(&Packet::new_checked(&MD2_BYTES[..]).unwrap()).unwrap();
        assert_eq!(repr, md2());
        let Metadata::Md2(h) = repr.metadata else {
            panic!("not MD type 2");
        };
        assert_eq!(h.iter().collect::<Vec<_>>(), HEADERS);
    }

    #[test]
    fn test_emit() {
        for (repr, want) in [(md1(), &MD1_BYTES), (md2(), &MD2_BYTES)] {
            let mut bytes = vec![0xa5; repr.buffer_len() + 2];
            repr.emit(&mut Packet::new_unchecked(&mut bytes));
            assert_eq!(&bytes[..24], want);
            assert_eq!(&bytes[24..], &[0xa5, 0xa5]);
        }
        // MD type 2 without context headers: length 2.
        let repr = Repr {
            metadata: Metadata::Md2(ContextHeaders::EMPTY),
            ..md2()
        };
        let mut bytes = vec![0xa5; repr.buffer_len()];
        repr.emit(&mut Packet::new_unchecked(&mut bytes));
        assert_eq!(bytes, [0x20, 0x82, 0x02, 0xfe, 0x00, 0x00, 0x2a, 0x03]);
    }

    #[test]
    fn transit_edits_keep_unassigned_bits() {
        let mut bytes = MD1_BYTES;
        bytes[0] |= 0x10;
        bytes[2] |= 0x50;
        let mut packet = Packet::new_checked(&mut bytes[..]).unwrap();
        let ttl = packet.ttl().decremented().unwrap();
        packet.set_ttl(ttl);
        packet.set_si(0xfe);
        assert_eq!(&bytes[..4], &[0x1f, 0x86, 0x51, 0x01]);
        assert_eq!(bytes[7], 0xfe);
        assert_eq!(Ttl::new(1).unwrap().decremented(), None);
        assert_eq!(Ttl::new(64), None);
        assert_eq!(Spi::new(0x0100_0000), None);
    }

    #[test]
    fn truncated_and_impossible() {
        assert_eq!(Packet::new_checked(&[][..]).unwrap_err(), Error::Truncated);
        assert_eq!(
            Packet::new_checked(&MD1_BYTES[..7]).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(
            Packet::new_checked(&MD1_BYTES[..23]).unwrap_err(),
            Error::Truncated
        );
        // Length 0 and 1 cannot hold the fixed header.
        for len in [0x00, 0x01] {
            let mut b = MD1_BYTES;
            b[1] = 0xc0 | len;
            assert_eq!(Packet::new_checked(&b[..]).unwrap_err(), Error::BadLength);
        }
        // MD type 1 with length 5 or 7.
        let mut b = [0_u8; 28];
        b[..24].copy_from_slice(&MD1_BYTES);
        for len in [0x05, 0x07] {
            b[1] = 0xc0 | len;
            let packet = Packet::new_checked(&b[..]).unwrap();
            assert_eq!(Repr::parse(&packet), Err(Error::BadLength));
        }
        // A context header running past the length.
        let mut b = MD2_BYTES;
        b[11] = 0x05; // 5 octets + 3 pad = 8: overlaps the next header
        let packet = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Repr::parse(&packet), Err(Error::BadLength));
        // Version 1.
        let mut b = MD1_BYTES;
        b[0] |= 0x40;
        let packet = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Repr::parse(&packet), Err(Error::Malformed));
        // Constructors.
        assert_eq!(
            ContextHeader::new(0, 0, &[0; 128]).unwrap_err(),
            Error::TooLong
        );
        let big = ContextHeader::new(0, 0, &[0; 127]).unwrap();
        assert_eq!(
            ContextHeaders::new(&[big, big]).unwrap_err(),
            Error::TooLong
        );
        assert_eq!(UnknownMetadata::new(1, &[]), Err(Error::Malformed));
        assert_eq!(UnknownMetadata::new(0x10, &[]), Err(Error::Malformed));
        assert_eq!(UnknownMetadata::new(0xf, &[0; 3]), Err(Error::BadLength));
    }

    #[test]
    fn unknown_survives() {
        // MD type 0xF (experimental), length 3: one opaque word; next protocol 0x77.
        let bytes = [0x0f, 0xc3, 0x0f, 0x77, 0x00, 0x00, 0x01, 0x09, 1, 2, 3, 4];
        let repr = Repr::parse(&Packet::new_checked(&bytes[..]).unwrap()).unwrap();
        assert_eq!(repr.metadata.md_type(), MdType::Unknown(0xf));
        assert_eq!(repr.next_protocol, NextProtocol::Unknown(0x77));
        let mut out = vec![0xa5; repr.buffer_len()];
        repr.emit(&mut Packet::new_unchecked(&mut out));
        assert_eq!(out, bytes);
        for v in 0..=0xff_u8 {
            assert_eq!(u8::from(NextProtocol::from(v)), v);
            assert_eq!(u8::from(MdType::from(v)), v);
        }
    }

    /// (class, type, value) of a context header.
    type RawContext = (u16, u8, Vec<u8>);

    fn arb_metadata() -> impl Strategy<Value = (u8, Vec<u8>, Vec<RawContext>)> {
        (
            0_u8..=0x0f,
            proptest::collection::vec(any::<u8>(), 0..=16),
            proptest::collection::vec(
                (
                    any::<u16>(),
                    any::<u8>(),
                    proptest::collection::vec(any::<u8>(), 0..=40),
                ),
                0..5,
            ),
        )
    }

    proptest! {
        #[test]
        fn emit_parse_round_trip(
            oam in any::<bool>(),
            ttl in 0_u8..=0x3f,
            next in any::<u8>(),
            spi in 0_u32..=Spi::MAX,
            si in any::<u8>(),
            (md_type, raw, ctx) in arb_metadata(),
        ) {
            let headers: Vec<_> = ctx
                .iter()
                .map(|(c, t, v)| ContextHeader::new(*c, *t, v).unwrap())
                .collect();
            let words = &raw[..raw.len() / 4 * 4];
            let metadata = match md_type {
                1 => Metadata::Md1(core::array::from_fn(|i| raw.get(i).copied().unwrap_or(0))),
                2 => Metadata::Md2(ContextHeaders::new(&headers).unwrap()),
                t => Metadata::Unknown(UnknownMetadata::new(t, words).unwrap()),
            };
            let repr = Repr {
                oam,
                ttl: Ttl::new(ttl).unwrap(),
                next_protocol: NextProtocol::from(next),
                spi: Spi::new(spi).unwrap(),
                si,
                metadata,
            };
            let mut bytes = vec![0xa5; repr.buffer_len()];
            repr.emit(&mut Packet::new_unchecked(&mut bytes));
            let packet = Packet::new_checked(&bytes[..]).unwrap();
            prop_assert_eq!(packet.header_len(), bytes.len());
            let parsed = Repr::parse(&packet).unwrap();
            prop_assert_eq!(parsed, repr);
            let mut again = vec![0x5a; parsed.buffer_len()];
            parsed.emit(&mut Packet::new_unchecked(&mut again));
            prop_assert_eq!(again, bytes);
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            crate::fuzz::nsh(&bytes);
        }
    }
}
