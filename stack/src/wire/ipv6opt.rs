//! IPv6 options and the Destination Options header (RFC 8200 §4.2, §4.6).
//!
//! SPEC §0: our options travel in a Destination Options header placed directly
//! before the upper-layer header, padded to a multiple of 8 octets with
//! Pad1/PadN. We use two of RFC 4727's experimental option types, both with
//! action bits `00` ("skip if unknown"), so a kernel endpoint that does not
//! know them ignores them:
//!
//! | type   | act | chg | name                                  |
//! |--------|-----|-----|---------------------------------------|
//! | `0x00` | 00  | 0   | Pad1                                  |
//! | `0x01` | 00  | 0   | PadN                                  |
//! | `0x1E` | 00  | 0   | sticky service (never changes en route) |
//! | `0x3E` | 00  | 1   | ROSA (may change en route)            |
//!
//! Option data is opaque here; the roles define what they carry. An option
//! holds at most 255 data bytes ([`OptionData::new`] refuses more with
//! [`Error::TooLong`]; nothing is ever truncated), and a header at most
//! [`MAX_HEADER_LEN`] octets.
//!
//! Three layers, smoltcp style:
//! - [`Ipv6Option`] / [`OptionRepr`]: one TLV option;
//! - [`OptionsIter`]: the options area of an options header, option by option;
//! - [`Packet`] / [`Repr`]: the whole Destination Options header.
//!
//! Parsing is strict where RFC 4942 §2.1.9.5 asks (PadN content must be zero)
//! and lenient otherwise (padding may appear anywhere; unknown option types are
//! kept whatever their action bits — deciding to drop is the caller's job, see
//! [`OptionType::unknown_action`]). Emission is canonical: options back to
//! back, then at most 7 octets of trailing padding (Pad1 for one, PadN for
//! more), which is also what Linux accepts.

use core::fmt;

use smoltcp::wire::IpProtocol;

use super::{Error, Result};

/// Most data octets one option can carry: its length field is one octet.
pub const MAX_OPTION_DATA: usize = 0xff;

/// Longest options header: Hdr Ext Len 255 means (255 + 1) × 8 octets.
pub const MAX_HEADER_LEN: usize = 0x800;

open_enum! {
    /// IPv6 option type (RFC 8200 §4.2), an open enum: unknown values survive a
    /// round trip as [`OptionType::Unknown`].
    ///
    /// The two high-order bits say what a node that does not know the type does
    /// with the packet ([`OptionType::unknown_action`]); the third says whether
    /// the data may change en route ([`OptionType::may_change`]).
    ///
    /// `Unknown`: Any other type. Construct through `From<u8>` so known values map to their variant.
    pub enum OptionType: u8 {
        /// `0x00`: one octet of padding, no length or data field.
        Pad1 = 0x00,
        /// `0x01`: two or more octets of padding.
        PadN = 0x01,
        /// `0x1E` (RFC 4727 experimental): the sticky-service option, never changes en route.
        Sticky = 0x1e,
        /// `0x3E` (RFC 4727 experimental): the ROSA option, may change en route.
        Rosa = 0x3e,
    }
}

impl OptionType {
    /// What a node that does not recognise this type must do (RFC 8200 §4.2).
    pub const fn unknown_action(self) -> UnknownAction {
        match self.value() >> 6 {
            0b00 => UnknownAction::Skip,
            0b01 => UnknownAction::Discard,
            0b10 => UnknownAction::DiscardIcmp,
            _ => UnknownAction::DiscardIcmpUnlessMulticast,
        }
    }

    /// Whether the option data may change en route (the "chg" bit, `0x20`).
    pub const fn may_change(self) -> bool {
        self.value() & 0x20 != 0
    }

    /// Whether this is Pad1 or PadN.
    pub const fn is_padding(self) -> bool {
        matches!(self, Self::Pad1 | Self::PadN)
    }

    const fn value(self) -> u8 {
        match self {
            Self::Pad1 => 0x00,
            Self::PadN => 0x01,
            Self::Sticky => 0x1e,
            Self::Rosa => 0x3e,
            Self::Unknown(v) => v,
        }
    }
}

impl fmt::Display for OptionType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Pad1 => f.write_str("Pad1"),
            Self::PadN => f.write_str("PadN"),
            Self::Sticky => f.write_str("Sticky"),
            Self::Rosa => f.write_str("ROSA"),
            Self::Unknown(v) => write!(f, "0x{v:02x}"),
        }
    }
}

/// The action bits of an option type: what a node that does not recognise
/// the option does with the packet (RFC 8200 §4.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnknownAction {
    /// `00`: skip the option, keep processing the header.
    Skip,
    /// `01`: discard the packet silently.
    Discard,
    /// `10`: discard and send ICMPv6 Parameter Problem (code 2).
    DiscardIcmp,
    /// `11`: discard and send Parameter Problem unless the destination is multicast.
    DiscardIcmpUnlessMulticast,
}

/// Option data known to fit an option: at most [`MAX_OPTION_DATA`] octets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OptionData<'a>(&'a [u8]);

impl<'a> OptionData<'a> {
    /// Wrap `data`, or [`Error::TooLong`] if it is over 255 octets.
    pub const fn new(data: &'a [u8]) -> Result<Self> {
        if data.len() > MAX_OPTION_DATA {
            return Err(Error::TooLong);
        }
        Ok(Self(data))
    }

    /// The data octets.
    pub const fn as_bytes(&self) -> &'a [u8] {
        self.0
    }

    /// Number of data octets, as the option's length field carries it.
    pub const fn len(&self) -> u8 {
        self.0.len() as u8
    }

    /// Whether there is no data.
    pub const fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

// One option, RFC 8200 §4.2:
//
// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+- - - - - - - - -
// |  Option Type  |  Opt Data Len |  Option Data
// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+- - - - - - - - -
//
// Pad1 is the single octet 0x00, without length or data.
mod opt_field {
    #![allow(non_snake_case)]

    use core::ops::Range;

    pub(super) const TYPE: usize = 0;
    pub(super) const LENGTH: usize = 1;
    pub(super) const fn DATA(length: u8) -> Range<usize> {
        2..2 + length as usize
    }
}

/// A read/write view of one IPv6 option (TLV) at the start of a buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ipv6Option<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Option<T> {
    /// Wrap a buffer without checking it; see [`Self::check_len`].
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// [`Self::new_unchecked`] followed by [`Self::check_len`].
    pub fn new_checked(buffer: T) -> Result<Self> {
        let opt = Self::new_unchecked(buffer);
        opt.check_len()?;
        Ok(opt)
    }

    /// Ensure no accessor panics: the buffer holds the type octet and, unless
    /// this is Pad1, the length octet and all the data it announces
    /// ([`Error::Truncated`] otherwise). Trailing octets are allowed (the next
    /// options). Invalidated by [`Self::set_data_len`].
    pub fn check_len(&self) -> Result<()> {
        let data = self.buffer.as_ref();
        let Some(&kind) = data.get(opt_field::TYPE) else {
            return Err(Error::Truncated);
        };
        if OptionType::from(kind) == OptionType::Pad1 {
            return Ok(());
        }
        let Some(&len) = data.get(opt_field::LENGTH) else {
            return Err(Error::Truncated);
        };
        if data.len() < opt_field::DATA(len).end {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Give the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The option type.
    pub fn option_type(&self) -> OptionType {
        OptionType::from(self.buffer.as_ref()[opt_field::TYPE])
    }

    /// The Opt Data Len field; 0 for Pad1 (which has none).
    pub fn data_len(&self) -> u8 {
        if self.option_type() == OptionType::Pad1 {
            return 0;
        }
        self.buffer.as_ref()[opt_field::LENGTH]
    }

    /// Octets the whole option occupies: 1 for Pad1, else 2 + data length.
    pub fn total_len(&self) -> usize {
        if self.option_type() == OptionType::Pad1 {
            1
        } else {
            opt_field::DATA(self.data_len()).end
        }
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Ipv6Option<&'a T> {
    /// The option data, borrowed from the buffer (empty for Pad1).
    pub fn data(&self) -> &'a [u8] {
        if self.option_type() == OptionType::Pad1 {
            return &[];
        }
        &self.buffer.as_ref()[opt_field::DATA(self.data_len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Option<T> {
    /// Set the option type.
    pub fn set_option_type(&mut self, value: OptionType) {
        self.buffer.as_mut()[opt_field::TYPE] = value.into();
    }

    /// Set the Opt Data Len field (not for Pad1).
    pub fn set_data_len(&mut self, value: u8) {
        self.buffer.as_mut()[opt_field::LENGTH] = value;
    }

    /// The option data, mutably (empty for Pad1).
    pub fn data_mut(&mut self) -> &mut [u8] {
        if self.option_type() == OptionType::Pad1 {
            return &mut [];
        }
        let range = opt_field::DATA(self.data_len());
        &mut self.buffer.as_mut()[range]
    }
}

/// One IPv6 option, high level.
///
/// Build data options with [`OptionRepr::new`], which maps a type to its
/// variant; an `Unknown` holding a known type would not survive a round trip.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OptionRepr<'a> {
    /// One octet of padding.
    Pad1,
    /// Padding of 2 + n octets (n zero data octets).
    PadN(u8),
    /// Our sticky-service option (`0x1E`).
    Sticky(OptionData<'a>),
    /// Our ROSA option (`0x3E`).
    Rosa(OptionData<'a>),
    /// Any other option, kept verbatim.
    Unknown {
        /// The option type octet.
        option_type: u8,
        /// The option data.
        data: OptionData<'a>,
    },
}

impl<'a> OptionRepr<'a> {
    /// The option of type `option_type` carrying `data`.
    ///
    /// [`Error::TooLong`] if `data` is over 255 octets; [`Error::Malformed`]
    /// for Pad1 with data or PadN with non-zero data.
    pub fn new(option_type: OptionType, data: &'a [u8]) -> Result<Self> {
        let data = OptionData::new(data)?;
        Ok(match option_type {
            OptionType::Pad1 if data.is_empty() => Self::Pad1,
            OptionType::Pad1 => return Err(Error::Malformed),
            OptionType::PadN if data.as_bytes().iter().all(|&b| b == 0) => Self::PadN(data.len()),
            OptionType::PadN => return Err(Error::Malformed),
            OptionType::Sticky => Self::Sticky(data),
            OptionType::Rosa => Self::Rosa(data),
            OptionType::Unknown(v) => match OptionType::from(v) {
                OptionType::Unknown(v) => Self::Unknown {
                    option_type: v,
                    data,
                },
                known => return Self::new(known, data.as_bytes()),
            },
        })
    }

    /// Parse one option. [`Error::Truncated`] if the view is too short,
    /// [`Error::Malformed`] for PadN with non-zero content (RFC 4942 §2.1.9.5).
    pub fn parse<T: AsRef<[u8]> + ?Sized>(opt: &Ipv6Option<&'a T>) -> Result<Self> {
        opt.check_len()?;
        Self::new(opt.option_type(), opt.data())
    }

    /// The option type.
    pub const fn option_type(&self) -> OptionType {
        match *self {
            Self::Pad1 => OptionType::Pad1,
            Self::PadN(_) => OptionType::PadN,
            Self::Sticky(_) => OptionType::Sticky,
            Self::Rosa(_) => OptionType::Rosa,
            Self::Unknown { option_type, .. } => OptionType::Unknown(option_type),
        }
    }

    /// The option data (empty for padding).
    pub const fn data(&self) -> &'a [u8] {
        match *self {
            Self::Pad1 | Self::PadN(_) => &[],
            Self::Sticky(d) | Self::Rosa(d) | Self::Unknown { data: d, .. } => d.as_bytes(),
        }
    }

    /// Octets [`Self::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        match *self {
            Self::Pad1 => 1,
            Self::PadN(n) => opt_field::DATA(n).end,
            Self::Sticky(d) | Self::Rosa(d) | Self::Unknown { data: d, .. } => {
                opt_field::DATA(d.len()).end
            }
        }
    }

    /// Write the option at the start of `opt`.
    ///
    /// # Panics
    /// If the buffer is shorter than [`Self::buffer_len`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, opt: &mut Ipv6Option<T>) {
        let buf = opt.buffer.as_mut();
        match *self {
            Self::Pad1 => buf[opt_field::TYPE] = OptionType::Pad1.into(),
            Self::PadN(n) => {
                buf[opt_field::TYPE] = OptionType::PadN.into();
                buf[opt_field::LENGTH] = n;
                buf[opt_field::DATA(n)].fill(0);
            }
            Self::Sticky(d) | Self::Rosa(d) | Self::Unknown { data: d, .. } => {
                buf[opt_field::TYPE] = self.option_type().into();
                buf[opt_field::LENGTH] = d.len();
                buf[opt_field::DATA(d.len())].copy_from_slice(d.as_bytes());
            }
        }
    }
}

/// An owned copy of one data option, as [`crate::shim::edit::strip_dest_opts`]
/// hands them back. Never padding, data at most 255 octets.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OwnedOption {
    option_type: u8,
    data: Vec<u8>,
}

impl OwnedOption {
    /// Copy a data option; `None` for padding.
    pub fn from_repr(repr: &OptionRepr<'_>) -> Option<Self> {
        if repr.option_type().is_padding() {
            return None;
        }
        Some(Self {
            option_type: repr.option_type().into(),
            data: repr.data().to_vec(),
        })
    }

    /// The option type.
    pub fn option_type(&self) -> OptionType {
        OptionType::from(self.option_type)
    }

    /// The option data.
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// Borrow as an [`OptionRepr`] (e.g. to insert it again).
    pub fn as_repr(&self) -> OptionRepr<'_> {
        let data = OptionData(&self.data); // at most 255 octets: copied from an OptionRepr
        match self.option_type() {
            OptionType::Sticky => OptionRepr::Sticky(data),
            OptionType::Rosa => OptionRepr::Rosa(data),
            // Padding never gets here (see from_repr); keep it verbatim anyway.
            _ => OptionRepr::Unknown {
                option_type: self.option_type,
                data,
            },
        }
    }
}

/// Iterator over the options area of a Hop-by-Hop or Destination Options
/// header, padding included. Yields `Err` once for a malformed option, then
/// stops.
#[derive(Debug, Clone)]
pub struct OptionsIter<'a> {
    data: &'a [u8],
    pos: usize,
    failed: bool,
}

impl<'a> OptionsIter<'a> {
    /// Iterate the options in `area` (the header minus its first two octets).
    pub const fn new(area: &'a [u8]) -> Self {
        Self {
            data: area,
            pos: 0,
            failed: false,
        }
    }

    /// Offset in the area of the option the next call to `next` returns.
    pub const fn position(&self) -> usize {
        self.pos
    }
}

impl<'a> Iterator for OptionsIter<'a> {
    type Item = Result<OptionRepr<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.data.len() {
            return None;
        }
        let rest = &self.data[self.pos..];
        match OptionRepr::parse(&Ipv6Option::new_unchecked(rest)) {
            Ok(repr) => {
                self.pos += repr.buffer_len();
                Some(Ok(repr))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

impl core::iter::FusedIterator for OptionsIter<'_> {}

// Destination Options header, RFC 8200 §4.6:
//
// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
// |  Next Header  |  Hdr Ext Len  |                               |
// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+                               +
// |                                                               |
// .                                                               .
// .                            Options                            .
// .                                                               .
// |                                                               |
// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// Hdr Ext Len: length in 8-octet units, not counting the first 8 octets.
mod field {
    #![allow(non_snake_case)]

    use core::ops::Range;

    pub(super) const NXT_HDR: usize = 0;
    pub(super) const LENGTH: usize = 1;
    pub(super) const fn OPTIONS(length_field: u8) -> Range<usize> {
        2..(length_field as usize + 1) * 8
    }
}

/// A read/write view of a Destination Options header at the start of a
/// buffer (what follows it may be in the buffer too: see [`Self::payload`]).
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

    /// Ensure no accessor panics: the buffer holds the whole header its Hdr
    /// Ext Len announces ([`Error::Truncated`] otherwise). Invalidated by
    /// [`Self::set_hdr_ext_len`].
    pub fn check_len(&self) -> Result<()> {
        let data = self.buffer.as_ref();
        let Some(&len) = data.get(field::LENGTH) else {
            return Err(Error::Truncated);
        };
        if data.len() < field::OPTIONS(len).end {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Give the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The Next Header field.
    pub fn next_header(&self) -> IpProtocol {
        IpProtocol::from(self.buffer.as_ref()[field::NXT_HDR])
    }

    /// The Hdr Ext Len field (8-octet units beyond the first 8).
    pub fn hdr_ext_len(&self) -> u8 {
        self.buffer.as_ref()[field::LENGTH]
    }

    /// The header length in octets: (Hdr Ext Len + 1) × 8.
    pub fn header_len(&self) -> usize {
        field::OPTIONS(self.hdr_ext_len()).end
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    /// The options area (all options, padding included).
    pub fn options(&self) -> &'a [u8] {
        &self.buffer.as_ref()[field::OPTIONS(self.hdr_ext_len())]
    }

    /// Iterate the options area, padding included.
    pub fn options_iter(&self) -> OptionsIter<'a> {
        OptionsIter::new(self.options())
    }

    /// Whatever follows the header in the buffer.
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Set the Next Header field.
    pub fn set_next_header(&mut self, value: IpProtocol) {
        self.buffer.as_mut()[field::NXT_HDR] = value.into();
    }

    /// Set the Hdr Ext Len field.
    pub fn set_hdr_ext_len(&mut self, value: u8) {
        self.buffer.as_mut()[field::LENGTH] = value;
    }

    /// The options area, mutably.
    pub fn options_mut(&mut self) -> &mut [u8] {
        let range = field::OPTIONS(self.hdr_ext_len());
        &mut self.buffer.as_mut()[range]
    }
}

/// A Destination Options header, high level.
///
/// Two origins, one type: [`Repr::parse`] keeps the options area as it was on
/// the wire (so emitting it reproduces the exact octets), [`Repr::new`] takes
/// a list of options and emits them canonically padded. Equality compares the
/// next header and the sequence of non-padding options.
#[derive(Debug, Clone, Copy)]
pub struct Repr<'a> {
    next_header: IpProtocol,
    options: Options<'a>,
}

#[derive(Debug, Clone, Copy)]
enum Options<'a> {
    /// A validated options area, padding included.
    Wire(&'a [u8]),
    /// Options to emit back to back, then pad.
    List(&'a [OptionRepr<'a>]),
}

impl<'a> Repr<'a> {
    /// A header carrying `options` (in order) before `next_header`.
    /// [`Error::TooLong`] if it would exceed [`MAX_HEADER_LEN`].
    pub fn new(next_header: IpProtocol, options: &'a [OptionRepr<'a>]) -> Result<Self> {
        let repr = Self {
            next_header,
            options: Options::List(options),
        };
        if repr.buffer_len() > MAX_HEADER_LEN {
            return Err(Error::TooLong);
        }
        Ok(repr)
    }

    /// Parse a header: [`Error::Truncated`] if the buffer is shorter than the
    /// header, [`Error::BadLength`] if an option runs past the header's end,
    /// [`Error::Malformed`] for non-zero PadN content.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&'a T>) -> Result<Self> {
        packet.check_len()?;
        for opt in packet.options_iter() {
            opt.map_err(|e| {
                if e == Error::Truncated {
                    Error::BadLength
                } else {
                    e
                }
            })?;
        }
        Ok(Self {
            next_header: packet.next_header(),
            options: Options::Wire(packet.options()),
        })
    }

    /// The protocol of the header that follows.
    pub const fn next_header(&self) -> IpProtocol {
        self.next_header
    }

    /// Change the protocol of the header that follows.
    pub fn set_next_header(&mut self, value: IpProtocol) {
        self.next_header = value;
    }

    /// The options, padding left out.
    pub fn options(&self) -> ReprOptions<'a> {
        ReprOptions(match self.options {
            Options::Wire(area) => OptionsSource::Wire(OptionsIter::new(area)),
            Options::List(list) => OptionsSource::List(list.iter()),
        })
    }

    /// Octets [`Self::emit`] writes: a multiple of 8.
    pub fn buffer_len(&self) -> usize {
        match self.options {
            Options::Wire(area) => field::OPTIONS(0).start + area.len(),
            Options::List(list) => {
                let raw = field::OPTIONS(0).start
                    + list.iter().map(OptionRepr::buffer_len).sum::<usize>();
                raw.div_ceil(8) * 8
            }
        }
    }

    /// Write the header at the start of `packet`.
    ///
    /// # Panics
    /// If the buffer is shorter than [`Self::buffer_len`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        let len = self.buffer_len();
        packet.set_next_header(self.next_header);
        // len is a multiple of 8 in 8..=MAX_HEADER_LEN (new/parse checked it), so this fits.
        packet.set_hdr_ext_len((len / 8 - 1) as u8);
        let area = packet.options_mut();
        match self.options {
            Options::Wire(src) => area.copy_from_slice(src),
            Options::List(list) => {
                let mut pos = 0;
                for opt in list {
                    opt.emit(&mut Ipv6Option::new_unchecked(&mut area[pos..]));
                    pos += opt.buffer_len();
                }
                let pad = match area.len() - pos {
                    0 => None,
                    1 => Some(OptionRepr::Pad1),
                    n => Some(OptionRepr::PadN((n - 2) as u8)), // n is at most 7
                };
                if let Some(pad) = pad {
                    pad.emit(&mut Ipv6Option::new_unchecked(&mut area[pos..]));
                }
            }
        }
    }
}

impl PartialEq for Repr<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.next_header == other.next_header && self.options().eq(other.options())
    }
}

impl Eq for Repr<'_> {}

/// The non-padding options of a [`Repr`], see [`Repr::options`].
#[derive(Debug, Clone)]
pub struct ReprOptions<'a>(OptionsSource<'a>);

#[derive(Debug, Clone)]
enum OptionsSource<'a> {
    Wire(OptionsIter<'a>),
    List(core::slice::Iter<'a, OptionRepr<'a>>),
}

impl<'a> Iterator for ReprOptions<'a> {
    type Item = OptionRepr<'a>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let opt = match &mut self.0 {
                // A Wire area was validated by Repr::parse, so Err cannot occur;
                // it would end the iteration anyway.
                OptionsSource::Wire(it) => it.next()?.ok()?,
                OptionsSource::List(it) => *it.next()?,
            };
            if !opt.option_type().is_padding() {
                return Some(opt);
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod test {
    use proptest::prelude::*;

    use super::*;

    /// Next header UDP, Hdr Ext Len 1 (16 octets): Sticky with 4 octets,
    /// ROSA with 3 octets, Unknown 0x5F (discard if unknown) with 0 octets,
    /// then PadN(1) to reach 16.
    static HEADER_BYTES: [u8; 16] = [
        0x11, 0x01, // next header, hdr ext len
        0x1e, 0x04, 0xde, 0xad, 0xbe, 0xef, // sticky
        0x3e, 0x03, 0x01, 0x02, 0x03, // rosa
        0x5f, 0x00, // unknown
        0x00, // Pad1
    ];

    static STICKY_DATA: [u8; 4] = [0xde, 0xad, 0xbe, 0xef];
    static ROSA_DATA: [u8; 3] = [0x01, 0x02, 0x03];

    fn options() -> [OptionRepr<'static>; 3] {
        [
            OptionRepr::Sticky(OptionData(&STICKY_DATA)),
            OptionRepr::Rosa(OptionData(&ROSA_DATA)),
            OptionRepr::Unknown {
                option_type: 0x5f,
                data: OptionData(&[]),
            },
        ]
    }

    #[test]
    fn option_type_bits() {
        assert_eq!(OptionType::from(0x1e), OptionType::Sticky);
        assert_eq!(OptionType::from(0x3e), OptionType::Rosa);
        assert_eq!(OptionType::Sticky.unknown_action(), UnknownAction::Skip);
        assert_eq!(OptionType::Rosa.unknown_action(), UnknownAction::Skip);
        assert!(!OptionType::Sticky.may_change());
        assert!(OptionType::Rosa.may_change());
        assert_eq!(
            OptionType::from(0x5f).unknown_action(),
            UnknownAction::Discard
        );
        assert_eq!(
            OptionType::from(0x9e).unknown_action(),
            UnknownAction::DiscardIcmp
        );
        assert_eq!(
            OptionType::from(0xde).unknown_action(),
            UnknownAction::DiscardIcmpUnlessMulticast
        );
        for v in 0..=0xff_u8 {
            assert_eq!(u8::from(OptionType::from(v)), v);
        }
    }

    #[test]
    fn test_deconstruct() {
        let packet = Packet::new_checked(&HEADER_BYTES[..]).unwrap();
        assert_eq!(packet.next_header(), IpProtocol::Udp);
        assert_eq!(packet.hdr_ext_len(), 1);
        assert_eq!(packet.header_len(), 16);
        assert_eq!(packet.options(), &HEADER_BYTES[2..]);
        assert!(packet.payload().is_empty());

        let opt = Ipv6Option::new_checked(packet.options()).unwrap();
        assert_eq!(opt.option_type(), OptionType::Sticky);
        assert_eq!(opt.data_len(), 4);
        assert_eq!(opt.total_len(), 6);
        assert_eq!(opt.data(), &STICKY_DATA);

        let pad = Ipv6Option::new_checked(&HEADER_BYTES[15..]).unwrap();
        assert_eq!(pad.option_type(), OptionType::Pad1);
        assert_eq!(pad.data_len(), 0);
        assert_eq!(pad.total_len(), 1);
        assert!(pad.data().is_empty());

        let all: Vec<_> = packet.options_iter().collect::<Result<_>>().unwrap();
        let mut want = options().to_vec();
        want.push(OptionRepr::Pad1);
        assert_eq!(all, want);
    }

    #[test]
    fn test_construct() {
        let mut bytes = vec![0xa5; 16];
        let mut packet = Packet::new_unchecked(&mut bytes);
        packet.set_next_header(IpProtocol::Udp);
        packet.set_hdr_ext_len(1);
        {
            let area = packet.options_mut();
            let mut opt = Ipv6Option::new_unchecked(&mut area[..]);
            opt.set_option_type(OptionType::Sticky);
            opt.set_data_len(4);
            opt.data_mut().copy_from_slice(&STICKY_DATA);
            let mut opt = Ipv6Option::new_unchecked(&mut area[6..]);
            opt.set_option_type(OptionType::Rosa);
            opt.set_data_len(3);
            opt.data_mut().copy_from_slice(&ROSA_DATA);
            let mut opt = Ipv6Option::new_unchecked(&mut area[11..]);
            opt.set_option_type(OptionType::Unknown(0x5f));
            opt.set_data_len(0);
            let mut opt = Ipv6Option::new_unchecked(&mut area[13..]);
            opt.set_option_type(OptionType::Pad1);
            assert!(opt.data_mut().is_empty());
        }
        assert_eq!(bytes, HEADER_BYTES);
    }

    #[test]
    fn test_parse() {
        let packet = Packet::new_checked(&HEADER_BYTES[..]).unwrap();
        let repr = Repr::parse(&packet).unwrap();
        let opts = options();
        assert_eq!(repr, Repr::new(IpProtocol::Udp, &opts).unwrap());
        assert_eq!(repr.next_header(), IpProtocol::Udp);
        assert_eq!(repr.options().collect::<Vec<_>>(), opts.to_vec());
        assert_eq!(repr.buffer_len(), 16);
    }

    #[test]
    fn test_emit() {
        let opts = options();
        let repr = Repr::new(IpProtocol::Udp, &opts).unwrap();
        assert_eq!(repr.buffer_len(), 16);
        let mut bytes = vec![0xa5; repr.buffer_len()];
        repr.emit(&mut Packet::new_unchecked(&mut bytes));
        assert_eq!(bytes, HEADER_BYTES);

        // A parsed Repr emits the exact wire octets, padding placement included.
        let odd = [0x06, 0x00, 0x01, 0x00, 0x1e, 0x01, 0xaa, 0x00];
        let repr = Repr::parse(&Packet::new_checked(&odd[..]).unwrap()).unwrap();
        let mut out = vec![0xa5; repr.buffer_len()];
        repr.emit(&mut Packet::new_unchecked(&mut out));
        assert_eq!(out, odd);
    }

    #[test]
    fn emit_padding() {
        // 2 + 0 options = 2 → PadN(4); 2 + 5 = 7 → Pad1; 2 + 6 = 8 → none.
        let cases: [(&[u8], &[u8]); 3] = [
            (&[], &[0x3c, 0x00, 0x01, 0x04, 0x00, 0x00, 0x00, 0x00]),
            (
                &[0x01, 0x02, 0x03],
                &[0x3c, 0x00, 0x1e, 0x03, 0x01, 0x02, 0x03, 0x00],
            ),
            (
                &[0x01, 0x02, 0x03, 0x04],
                &[0x3c, 0x00, 0x1e, 0x04, 0x01, 0x02, 0x03, 0x04],
            ),
        ];
        for (data, want) in cases {
            let opts: Vec<_> = if data.is_empty() {
                vec![]
            } else {
                vec![OptionRepr::new(OptionType::Sticky, data).unwrap()]
            };
            let repr = Repr::new(IpProtocol::Ipv6Opts, &opts).unwrap();
            let mut bytes = vec![0xa5; repr.buffer_len()];
            repr.emit(&mut Packet::new_unchecked(&mut bytes));
            assert_eq!(bytes, want);
        }
    }

    #[test]
    fn too_long() {
        let data = [0_u8; 0x100];
        assert_eq!(OptionData::new(&data), Err(Error::TooLong));
        assert_eq!(
            OptionRepr::new(OptionType::Rosa, &data),
            Err(Error::TooLong)
        );
        assert!(OptionRepr::new(OptionType::Rosa, &data[..0xff]).is_ok());
        // 9 × 257 octets of options do not fit 2048.
        let big = OptionRepr::new(OptionType::Sticky, &data[..0xff]).unwrap();
        let list = [big; 9];
        assert_eq!(Repr::new(IpProtocol::Tcp, &list), Err(Error::TooLong));
        let fits = Repr::new(IpProtocol::Tcp, &list[..7]).unwrap();
        assert!(fits.buffer_len() <= MAX_HEADER_LEN);
    }

    #[test]
    fn truncated_and_impossible() {
        assert_eq!(Packet::new_checked(&[][..]).unwrap_err(), Error::Truncated);
        assert_eq!(
            Packet::new_checked(&[0x11][..]).unwrap_err(),
            Error::Truncated
        );
        // Hdr Ext Len 1 needs 16 octets.
        assert_eq!(
            Packet::new_checked(&HEADER_BYTES[..15]).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(
            Ipv6Option::new_checked(&[][..]).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(
            Ipv6Option::new_checked(&[0x1e][..]).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(
            Ipv6Option::new_checked(&[0x1e, 0x02, 0x00][..]).unwrap_err(),
            Error::Truncated
        );
        // An option overrunning the header.
        let bad = [0x11, 0x00, 0x1e, 0x05, 0x00, 0x00, 0x00, 0x00];
        let packet = Packet::new_checked(&bad[..]).unwrap();
        assert_eq!(Repr::parse(&packet), Err(Error::BadLength));
        // Non-zero PadN.
        let bad = [0x11, 0x00, 0x01, 0x04, 0x00, 0x00, 0x01, 0x00];
        let packet = Packet::new_checked(&bad[..]).unwrap();
        assert_eq!(Repr::parse(&packet), Err(Error::Malformed));
        assert_eq!(
            OptionRepr::new(OptionType::Pad1, &[0x00]),
            Err(Error::Malformed)
        );
        // The iterator reports once and stops.
        let mut it = OptionsIter::new(&[0x00, 0x1e, 0x09]);
        assert_eq!(it.next(), Some(Ok(OptionRepr::Pad1)));
        assert_eq!(it.position(), 1);
        assert_eq!(it.next(), Some(Err(Error::Truncated)));
        assert_eq!(it.next(), None);
    }

    #[test]
    fn unknown_survives() {
        let bytes = [0x3b, 0x00, 0xc7, 0x02, 0x12, 0x34, 0x1f, 0x00];
        let repr = Repr::parse(&Packet::new_checked(&bytes[..]).unwrap()).unwrap();
        assert_eq!(repr.next_header(), IpProtocol::Ipv6NoNxt);
        let opts: Vec<_> = repr.options().collect();
        assert_eq!(opts[0].option_type(), OptionType::Unknown(0xc7));
        assert_eq!(opts[0].data(), &[0x12, 0x34]);
        assert_eq!(opts[1].option_type(), OptionType::Unknown(0x1f));
        let rebuilt = Repr::new(IpProtocol::Ipv6NoNxt, &opts).unwrap();
        let mut out = vec![0xa5; rebuilt.buffer_len()];
        rebuilt.emit(&mut Packet::new_unchecked(&mut out));
        assert_eq!(out, bytes);
        // Owned copies come back as the same Repr.
        let owned: Vec<_> = opts.iter().filter_map(OwnedOption::from_repr).collect();
        let back: Vec<_> = owned.iter().map(OwnedOption::as_repr).collect();
        assert_eq!(back, opts);
        assert_eq!(OwnedOption::from_repr(&OptionRepr::Pad1), None);
    }

    pub(crate) fn arb_option() -> impl Strategy<Value = (u8, Vec<u8>)> {
        (
            prop_oneof![Just(0x1e_u8), Just(0x3e_u8), 0x02_u8..=0xff],
            proptest::collection::vec(any::<u8>(), 0..=0xff),
        )
    }

    proptest! {
        #[test]
        fn emit_parse_round_trip(
            next in any::<u8>(),
            raw in proptest::collection::vec(arb_option(), 0..8),
        ) {
            let opts: Vec<_> = raw
                .iter()
                .map(|(t, d)| OptionRepr::new(OptionType::from(*t), d).unwrap())
                .collect();
            let repr = Repr::new(IpProtocol::from(next), &opts).unwrap();
            prop_assert_eq!(repr.buffer_len() % 8, 0);
            let mut bytes = vec![0xa5; repr.buffer_len()];
            repr.emit(&mut Packet::new_unchecked(&mut bytes));
            let packet = Packet::new_checked(&bytes[..]).unwrap();
            prop_assert_eq!(packet.header_len(), bytes.len());
            let parsed = Repr::parse(&packet).unwrap();
            prop_assert_eq!(parsed, repr);
            prop_assert_eq!(parsed.options().collect::<Vec<_>>(), opts);
            let mut again = vec![0x5a; parsed.buffer_len()];
            parsed.emit(&mut Packet::new_unchecked(&mut again));
            prop_assert_eq!(again, bytes);
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            crate::fuzz::ipv6opt(&bytes);
        }
    }
}
