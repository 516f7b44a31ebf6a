//! nSFF-to-nSFF transport (RFC 8677 §6.1.2, Figures 10 and 11; SPEC §1.3):
//! the payloads of GFF types 1 (data) and 2 (NACK).
//!
//! Data, after RFC 8677's `seq`, `checksum` and `window`, carries **\[ext\]**
//! `txn` and `flags`; an OPEN packet (the first of a transaction in one
//! direction) then carries the origin nSFF and the reverse pathID so the
//! egress nSFF can answer:
//!
//! | field          | octets  | notes                                                  |
//! |----------------|---------|--------------------------------------------------------|
//! | seq            | 4       | per transaction and direction                          |
//! | checksum       | 2       | RFC 1071 over the whole packet with this field zero    |
//! | window         | 2       | packets the receiver allows in flight                  |
//! | txn            | 4       | [`Txn`]: origin nSFF ID << 24 \| counter **\[ext\]**     |
//! | flags          | 1       | bit0 OPEN, bit1 RESPONSE, others zero **\[ext\]**        |
//! | origin_nsff_id | 1       | OPEN only **\[ext\]**                                    |
//! | rev_len        | 1       | OPEN only: octets of reverse pathID (32) **\[ext\]**     |
//! | reverse pathID | rev_len | OPEN only **\[ext\]**                                    |
//! | data           | rest    | none = end of the transaction (RFC)                    |
//!
//! NACK: `txn:u32`, `count:u16`, `reserved:u16` (zero), then `count` ×
//! `seq:u32` and nothing else. Count 0 acknowledges the whole window.
//!
//! A data packet's checksum covers the whole buffer the [`DataPacket`] view
//! wraps: wrap exactly the GFF payload.

use core::fmt;

use super::gff::{PathId, PATH_ID_LEN};
use super::nr::NsffId;
use super::{Error, Result};
use crate::wire::checksum::ones_complement_sum;

/// A transaction ID: the originating nSFF in the top 8 bits, a counter in
/// the low 24.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Txn(u32);

impl Txn {
    /// Largest counter.
    pub const MAX_COUNTER: u32 = 0x00ff_ffff;

    /// The transaction `counter` of `origin` (counter taken modulo 2^24).
    pub const fn new(origin: NsffId, counter: u32) -> Self {
        Self(((origin.value() as u32) << 24) | (counter & Self::MAX_COUNTER))
    }

    /// The raw 32-bit value.
    pub const fn value(self) -> u32 {
        self.0
    }

    /// The originating nSFF's ID (255 for a foreign value).
    pub const fn origin(self) -> u8 {
        (self.0 >> 24) as u8
    }

    /// The counter.
    pub const fn counter(self) -> u32 {
        self.0 & Self::MAX_COUNTER
    }
}

impl From<u32> for Txn {
    fn from(value: u32) -> Self {
        Self(value)
    }
}

impl fmt::Display for Txn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.origin(), self.counter())
    }
}

// Transport data, RFC 8677 Figure 10 and our fields:
//
//  0                   1                   2                   3
//  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
// |                        Sequence Number                        |
// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
// |           Checksum            |          Window Size          |
// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
// |                      Transaction ID [ext]                     |
// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
// |  Flags [ext] | Origin (OPEN) | RevLen (OPEN) | Reverse (OPEN)~
// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
// ~                             Data                              ~
// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
mod data_field {
    #![allow(non_snake_case)]

    use core::ops::Range;

    pub(super) const SEQ: Range<usize> = 0..4;
    pub(super) const CHECKSUM: Range<usize> = 4..6;
    pub(super) const WINDOW: Range<usize> = 6..8;
    pub(super) const TXN: Range<usize> = 8..12;
    pub(super) const FLAGS: usize = 12;
    pub(super) const ORIGIN: usize = 13;
    pub(super) const REV_LEN: usize = 14;
    pub(super) const fn REVERSE(len: u8) -> Range<usize> {
        15..15 + len as usize
    }
    /// Header length without the OPEN prefix.
    pub(super) const FIXED_LEN: usize = 13;
}

/// Flag bit: first packet of a transaction in this direction.
pub const FLAG_OPEN: u8 = 0x01;
/// Flag bit: the packet travels on the response direction.
pub const FLAG_RESPONSE: u8 = 0x02;

/// Octets of a data header without the OPEN prefix.
pub const DATA_HEADER_LEN: usize = data_field::FIXED_LEN;

/// Octets of a data header with the OPEN prefix and a 256-bit reverse pathID.
pub const OPEN_HEADER_LEN: usize = data_field::REVERSE(PATH_ID_LEN as u8).end;

fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// A read/write view of a transport data packet filling a buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> DataPacket<T> {
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

    /// Ensure no accessor panics: the buffer holds the fixed header and, for
    /// an OPEN packet, the whole prefix ([`Error::Truncated`] otherwise).
    /// Invalidated by [`Self::set_flags`] and [`Self::set_rev_len`].
    pub fn check_len(&self) -> Result<()> {
        let data = self.buffer.as_ref();
        if data.len() < data_field::FIXED_LEN {
            return Err(Error::Truncated);
        }
        if self.flags() & FLAG_OPEN == 0 {
            return Ok(());
        }
        let Some(&len) = data.get(data_field::REV_LEN) else {
            return Err(Error::Truncated);
        };
        if data.len() < data_field::REVERSE(len).end {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Give the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The sequence number.
    pub fn seq(&self) -> u32 {
        be32(&self.buffer.as_ref()[data_field::SEQ])
    }

    /// The checksum field.
    pub fn checksum(&self) -> u16 {
        be16(&self.buffer.as_ref()[data_field::CHECKSUM])
    }

    /// The advertised window.
    pub fn window(&self) -> u16 {
        be16(&self.buffer.as_ref()[data_field::WINDOW])
    }

    /// The transaction ID.
    pub fn txn(&self) -> Txn {
        Txn(be32(&self.buffer.as_ref()[data_field::TXN]))
    }

    /// The flags octet.
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[data_field::FLAGS]
    }

    /// Whether the OPEN flag is set.
    pub fn is_open(&self) -> bool {
        self.flags() & FLAG_OPEN != 0
    }

    /// Whether the RESPONSE flag is set.
    pub fn is_response(&self) -> bool {
        self.flags() & FLAG_RESPONSE != 0
    }

    /// The origin nSFF octet (OPEN packets only).
    pub fn origin(&self) -> Option<u8> {
        self.is_open()
            .then(|| self.buffer.as_ref()[data_field::ORIGIN])
    }

    /// The header length: 13, or 15 + rev_len for an OPEN packet.
    pub fn header_len(&self) -> usize {
        if self.is_open() {
            data_field::REVERSE(self.buffer.as_ref()[data_field::REV_LEN]).end
        } else {
            data_field::FIXED_LEN
        }
    }

    /// Whether the checksum is right.
    pub fn verify_checksum(&self) -> bool {
        ones_complement_sum(self.buffer.as_ref(), 0) == 0xffff
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> DataPacket<&'a T> {
    /// The reverse pathID octets (OPEN packets only).
    pub fn reverse_path(&self) -> Option<&'a [u8]> {
        if !self.is_open() {
            return None;
        }
        let len = self.buffer.as_ref()[data_field::REV_LEN];
        Some(&self.buffer.as_ref()[data_field::REVERSE(len)])
    }

    /// The data after the header.
    pub fn data(&self) -> &'a [u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> DataPacket<T> {
    /// Set the sequence number.
    pub fn set_seq(&mut self, value: u32) {
        self.buffer.as_mut()[data_field::SEQ].copy_from_slice(&value.to_be_bytes());
    }

    /// Set the checksum field.
    pub fn set_checksum(&mut self, value: u16) {
        self.buffer.as_mut()[data_field::CHECKSUM].copy_from_slice(&value.to_be_bytes());
    }

    /// Set the advertised window.
    pub fn set_window(&mut self, value: u16) {
        self.buffer.as_mut()[data_field::WINDOW].copy_from_slice(&value.to_be_bytes());
    }

    /// Set the transaction ID.
    pub fn set_txn(&mut self, value: Txn) {
        self.buffer.as_mut()[data_field::TXN].copy_from_slice(&value.0.to_be_bytes());
    }

    /// Set the flags octet.
    pub fn set_flags(&mut self, value: u8) {
        self.buffer.as_mut()[data_field::FLAGS] = value;
    }

    /// Set the origin nSFF octet (OPEN packets).
    pub fn set_origin(&mut self, value: u8) {
        self.buffer.as_mut()[data_field::ORIGIN] = value;
    }

    /// Set the reverse pathID length (OPEN packets).
    pub fn set_rev_len(&mut self, value: u8) {
        self.buffer.as_mut()[data_field::REV_LEN] = value;
    }

    /// The reverse pathID octets, mutably (empty unless OPEN).
    pub fn reverse_path_mut(&mut self) -> &mut [u8] {
        if !self.is_open() {
            return &mut [];
        }
        let range = data_field::REVERSE(self.buffer.as_ref()[data_field::REV_LEN]);
        &mut self.buffer.as_mut()[range]
    }

    /// The data after the header, mutably.
    pub fn data_mut(&mut self) -> &mut [u8] {
        let start = self.header_len();
        &mut self.buffer.as_mut()[start..]
    }

    /// Compute and set the checksum over the whole buffer.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let sum = ones_complement_sum(self.buffer.as_ref(), 0);
        self.set_checksum(!sum);
    }
}

/// The OPEN prefix: who opened the transaction and how to answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Open {
    /// The ingress nSFF that opened it.
    pub origin: NsffId,
    /// pathID egress → origin.
    pub reverse: PathId,
}

/// A transport data header, high level; the data stays in the packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DataRepr {
    /// Sequence number.
    pub seq: u32,
    /// Advertised window.
    pub window: u16,
    /// Transaction.
    pub txn: Txn,
    /// The RESPONSE flag.
    pub response: bool,
    /// The OPEN flag and prefix.
    pub open: Option<Open>,
}

impl DataRepr {
    /// Parse a data packet. [`Error::Malformed`] for a bad checksum,
    /// reserved flags or origin 255; [`Error::BadLength`] for a reverse
    /// pathID other than 32 octets.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &DataPacket<&T>) -> Result<Self> {
        packet.check_len()?;
        if !packet.verify_checksum() {
            return Err(Error::Malformed);
        }
        if packet.flags() & !(FLAG_OPEN | FLAG_RESPONSE) != 0 {
            return Err(Error::Malformed);
        }
        let open = match (packet.origin(), packet.reverse_path()) {
            (Some(origin), Some(reverse)) => Some(Open {
                origin: NsffId::new(origin).ok_or(Error::Malformed)?,
                reverse: PathId::from_slice(reverse).ok_or(Error::BadLength)?,
            }),
            _ => None,
        };
        Ok(Self {
            seq: packet.seq(),
            window: packet.window(),
            txn: packet.txn(),
            response: packet.is_response(),
            open,
        })
    }

    /// Octets of the header.
    pub const fn header_len(&self) -> usize {
        if self.open.is_some() {
            OPEN_HEADER_LEN
        } else {
            DATA_HEADER_LEN
        }
    }

    /// Octets of a packet carrying `data_len` octets of data.
    pub const fn buffer_len(&self, data_len: usize) -> usize {
        self.header_len() + data_len
    }

    /// Write header and `data` into `packet`, whose buffer must be exactly
    /// [`Self::buffer_len`]`(data.len())` octets, and fill the checksum.
    ///
    /// # Panics
    /// If the buffer has another length.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut DataPacket<T>, data: &[u8]) {
        assert_eq!(packet.buffer.as_ref().len(), self.buffer_len(data.len()));
        packet.set_seq(self.seq);
        packet.set_window(self.window);
        packet.set_txn(self.txn);
        let mut flags = 0;
        if self.response {
            flags |= FLAG_RESPONSE;
        }
        if self.open.is_some() {
            flags |= FLAG_OPEN;
        }
        packet.set_flags(flags);
        if let Some(open) = &self.open {
            packet.set_origin(open.origin.value());
            packet.set_rev_len(PATH_ID_LEN as u8);
            packet
                .reverse_path_mut()
                .copy_from_slice(open.reverse.as_bytes());
        }
        packet.data_mut().copy_from_slice(data);
        packet.fill_checksum();
    }
}

// Transport NACK, RFC 8677 Figure 11 with our txn:
//
//  0                   1                   2                   3
//  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
// |                      Transaction ID [ext]                     |
// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
// |        Number of NACKs        |        Reserved [ext]         |
// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
// ~                 NACK sequence numbers (count × 4)             ~
// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
mod nack_field {
    #![allow(non_snake_case)]

    use core::ops::Range;

    pub(super) const TXN: Range<usize> = 0..4;
    pub(super) const COUNT: Range<usize> = 4..6;
    pub(super) const RESERVED: Range<usize> = 6..8;
    pub(super) const fn SEQS(count: u16) -> Range<usize> {
        8..8 + count as usize * 4
    }
}

/// Octets of a NACK before its sequence numbers.
pub const NACK_HEADER_LEN: usize = 8;

/// A read/write view of a transport NACK at the start of a buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NackPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> NackPacket<T> {
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

    /// Ensure no accessor panics: the buffer holds the header and `count`
    /// sequence numbers ([`Error::Truncated`] otherwise). Invalidated by
    /// [`Self::set_count`].
    pub fn check_len(&self) -> Result<()> {
        let data = self.buffer.as_ref();
        if data.len() < NACK_HEADER_LEN {
            return Err(Error::Truncated);
        }
        if data.len() < nack_field::SEQS(self.count()).end {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Give the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The transaction ID.
    pub fn txn(&self) -> Txn {
        Txn(be32(&self.buffer.as_ref()[nack_field::TXN]))
    }

    /// The number of NACKed sequence numbers.
    pub fn count(&self) -> u16 {
        be16(&self.buffer.as_ref()[nack_field::COUNT])
    }

    /// The reserved field.
    pub fn reserved(&self) -> u16 {
        be16(&self.buffer.as_ref()[nack_field::RESERVED])
    }

    /// Octets of the NACK: 8 + count × 4.
    pub fn total_len(&self) -> usize {
        nack_field::SEQS(self.count()).end
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> NackPacket<&'a T> {
    /// The sequence numbers.
    pub fn seqs(&self) -> Seqs<'a> {
        Seqs(SeqSource::Wire(
            &self.buffer.as_ref()[nack_field::SEQS(self.count())],
        ))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> NackPacket<T> {
    /// Set the transaction ID.
    pub fn set_txn(&mut self, value: Txn) {
        self.buffer.as_mut()[nack_field::TXN].copy_from_slice(&value.0.to_be_bytes());
    }

    /// Set the count.
    pub fn set_count(&mut self, value: u16) {
        self.buffer.as_mut()[nack_field::COUNT].copy_from_slice(&value.to_be_bytes());
    }

    /// Set the reserved field.
    pub fn set_reserved(&mut self, value: u16) {
        self.buffer.as_mut()[nack_field::RESERVED].copy_from_slice(&value.to_be_bytes());
    }

    /// Set the `i`th sequence number.
    ///
    /// # Panics
    /// If `i` is not below [`Self::count`].
    pub fn set_seq(&mut self, i: u16, value: u32) {
        let at = nack_field::SEQS(i).end;
        self.buffer.as_mut()[at..at + 4].copy_from_slice(&value.to_be_bytes());
    }
}

/// NACKed sequence numbers: from the wire or a list, at most 65535.
#[derive(Debug, Clone, Copy)]
pub struct Seqs<'a>(SeqSource<'a>);

#[derive(Debug, Clone, Copy)]
enum SeqSource<'a> {
    Wire(&'a [u8]),
    List(&'a [u32]),
}

impl<'a> Seqs<'a> {
    /// None: acknowledges the whole window.
    pub const EMPTY: Self = Self(SeqSource::List(&[]));

    /// The sequence numbers in `list`; [`Error::TooLong`] over 65535.
    pub const fn new(list: &'a [u32]) -> Result<Self> {
        if list.len() > u16::MAX as usize {
            return Err(Error::TooLong);
        }
        Ok(Self(SeqSource::List(list)))
    }

    /// How many.
    pub const fn len(&self) -> usize {
        match self.0 {
            SeqSource::Wire(w) => w.len() / 4,
            SeqSource::List(l) => l.len(),
        }
    }

    /// Whether there are none.
    pub const fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Iterate them.
    pub fn iter(&self) -> impl Iterator<Item = u32> + 'a {
        let (wire, list): (&'a [u8], &'a [u32]) = match self.0 {
            SeqSource::Wire(w) => (w, &[]),
            SeqSource::List(l) => (&[], l),
        };
        wire.chunks_exact(4).map(be32).chain(list.iter().copied())
    }
}

impl PartialEq for Seqs<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for Seqs<'_> {}

/// A transport NACK, high level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NackRepr<'a> {
    /// Transaction.
    pub txn: Txn,
    /// Missing sequence numbers; empty acknowledges the window.
    pub seqs: Seqs<'a>,
}

impl<'a> NackRepr<'a> {
    /// Parse a NACK that fills `packet`'s buffer. [`Error::Malformed`] for a
    /// non-zero reserved field, [`Error::BadLength`] for octets after the
    /// sequence numbers.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &NackPacket<&'a T>) -> Result<Self> {
        packet.check_len()?;
        if packet.reserved() != 0 {
            return Err(Error::Malformed);
        }
        if packet.buffer.as_ref().len() != packet.total_len() {
            return Err(Error::BadLength);
        }
        Ok(Self {
            txn: packet.txn(),
            seqs: packet.seqs(),
        })
    }

    /// Octets [`Self::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        NACK_HEADER_LEN + self.seqs.len() * 4
    }

    /// Write the NACK at the start of `packet`.
    ///
    /// # Panics
    /// If the buffer is shorter than [`Self::buffer_len`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut NackPacket<T>) {
        packet.set_txn(self.txn);
        // At most 65535: Seqs::new checked it (or it came from a u16).
        packet.set_count(self.seqs.len() as u16);
        packet.set_reserved(0);
        for (i, seq) in self.seqs.iter().enumerate() {
            packet.set_seq(i as u16, seq);
        }
    }
}

#[cfg(test)]
mod test {
    use proptest::prelude::*;

    use super::*;

    fn id(v: u8) -> NsffId {
        NsffId::new(v).unwrap()
    }

    /// Data, not OPEN: seq 1, window 8, txn 0x03000005 (nSFF 3, counter 5),
    /// RESPONSE, data "hi".
    static DATA_BYTES: [u8; 15] = [
        0x00, 0x00, 0x00, 0x01, // seq
        0x91, 0x89, // checksum: see golden_checksum
        0x00, 0x08, // window
        0x03, 0x00, 0x00, 0x05, // txn
        0x02, // flags: RESPONSE
        b'h', b'i', // data
    ];

    /// Data, OPEN: seq 0, window 4, txn 0x03000005, origin 3, rev_len 32,
    /// reverse pathID link 1, no data (so it also ends the transaction).
    fn open_bytes() -> Vec<u8> {
        let mut b = vec![
            0x00, 0x00, 0x00, 0x00, // seq
            0x00, 0x00, // checksum, filled below
            0x00, 0x04, // window
            0x03, 0x00, 0x00, 0x05, // txn
            0x01, // flags: OPEN
            0x03, // origin nSFF
            0x20, // rev_len 32
        ];
        b.extend_from_slice(PathId::link(1).as_bytes()); // 0x40 then 31 zeros
                                                         // Words: 0x0004 + 0x0300 + 0x0005 + 0x0103 + 0x2040 = 0x244c → !0x244c.
        b[4..6].copy_from_slice(&0xdbb3_u16.to_be_bytes());
        b
    }

    /// NACK: txn 0x03000005, seqs 2 and 0x01020304.
    static NACK_BYTES: [u8; 16] = [
        0x03, 0x00, 0x00, 0x05, // txn
        0x00, 0x02, 0x00, 0x00, // count 2, reserved
        0x00, 0x00, 0x00, 0x02, // seq
        0x01, 0x02, 0x03, 0x04, // seq
    ];

    fn data_repr() -> DataRepr {
        DataRepr {
            seq: 1,
            window: 8,
            txn: Txn::new(id(3), 5),
            response: true,
            open: None,
        }
    }

    fn open_repr() -> DataRepr {
        DataRepr {
            seq: 0,
            window: 4,
            txn: Txn::new(id(3), 5),
            response: false,
            open: Some(Open {
                origin: id(3),
                reverse: PathId::link(1),
            }),
        }
    }

    #[test]
    fn golden_checksum() {
        // 16-bit words at even offsets, checksum zero: seq 0x0000 0x0001,
        // window 0x0008, txn 0x0300 0x0005, flags|'h' 0x0268, 'i' padded 0x6900.
        let sum: u16 = [0x0001, 0x0008, 0x0300, 0x0005, 0x0268, 0x6900]
            .iter()
            .sum();
        assert_eq!(sum, 0x6e76);
        assert_eq!(!sum, 0x9189);
    }

    #[test]
    fn test_deconstruct() {
        let p = DataPacket::new_checked(&DATA_BYTES[..]).unwrap();
        assert_eq!(p.seq(), 1);
        assert_eq!(p.checksum(), 0x9189);
        assert!(p.verify_checksum());
        assert_eq!(p.window(), 8);
        assert_eq!(p.txn().origin(), 3);
        assert_eq!(p.txn().counter(), 5);
        assert!(!p.is_open() && p.is_response());
        assert_eq!(p.origin(), None);
        assert_eq!(p.reverse_path(), None);
        assert_eq!(p.header_len(), 13);
        assert_eq!(p.data(), b"hi");

        let b = open_bytes();
        let p = DataPacket::new_checked(&b[..]).unwrap();
        assert!(p.verify_checksum());
        assert_eq!(p.origin(), Some(3));
        assert_eq!(p.reverse_path(), Some(&PathId::link(1).as_bytes()[..]));
        assert_eq!(p.header_len(), OPEN_HEADER_LEN);
        assert!(p.data().is_empty());

        let n = NackPacket::new_checked(&NACK_BYTES[..]).unwrap();
        assert_eq!(n.txn().value(), 0x0300_0005);
        assert_eq!(n.count(), 2);
        assert_eq!(n.reserved(), 0);
        assert_eq!(n.seqs().iter().collect::<Vec<_>>(), [2, 0x0102_0304]);
    }

    #[test]
    fn test_construct() {
        let mut bytes = vec![0xa5; 15];
        let mut p = DataPacket::new_unchecked(&mut bytes);
        p.set_seq(1);
        p.set_window(8);
        p.set_txn(Txn::from(0x0300_0005));
        p.set_flags(FLAG_RESPONSE);
        p.data_mut().copy_from_slice(b"hi");
        assert!(p.reverse_path_mut().is_empty());
        p.fill_checksum();
        assert_eq!(bytes, DATA_BYTES);

        let mut bytes = vec![0xa5; 16];
        let mut n = NackPacket::new_unchecked(&mut bytes);
        n.set_txn(Txn::from(0x0300_0005));
        n.set_count(2);
        n.set_reserved(0);
        n.set_seq(0, 2);
        n.set_seq(1, 0x0102_0304);
        assert_eq!(bytes, NACK_BYTES);
    }

    #[test]
    fn test_parse() {
        let p = DataPacket::new_checked(&DATA_BYTES[..]).unwrap();
        assert_eq!(DataRepr::parse(&p), Ok(data_repr()));
        let b = open_bytes();
        let p = DataPacket::new_checked(&b[..]).unwrap();
        assert_eq!(DataRepr::parse(&p), Ok(open_repr()));
        let n = NackPacket::new_checked(&NACK_BYTES[..]).unwrap();
        let repr = NackRepr::parse(&n).unwrap();
        assert_eq!(repr.txn, Txn::from(0x0300_0005));
        assert_eq!(repr.seqs, Seqs::new(&[2, 0x0102_0304]).unwrap());
    }

    #[test]
    fn test_emit() {
        let repr = data_repr();
        let mut bytes = vec![0xa5; repr.buffer_len(2)];
        repr.emit(&mut DataPacket::new_unchecked(&mut bytes), b"hi");
        assert_eq!(bytes, DATA_BYTES);
        let repr = open_repr();
        let mut bytes = vec![0xa5; repr.buffer_len(0)];
        repr.emit(&mut DataPacket::new_unchecked(&mut bytes), b"");
        assert_eq!(bytes, open_bytes());
        let repr = NackRepr {
            txn: Txn::from(0x0300_0005),
            seqs: Seqs::new(&[2, 0x0102_0304]).unwrap(),
        };
        let mut bytes = vec![0xa5; repr.buffer_len()];
        repr.emit(&mut NackPacket::new_unchecked(&mut bytes));
        assert_eq!(bytes, NACK_BYTES);
    }

    #[test]
    fn truncated_and_impossible() {
        for cut in 0..13 {
            assert_eq!(
                DataPacket::new_checked(&DATA_BYTES[..cut]).unwrap_err(),
                Error::Truncated
            );
        }
        let b = open_bytes();
        for cut in 13..b.len() {
            assert_eq!(
                DataPacket::new_checked(&b[..cut]).unwrap_err(),
                Error::Truncated
            );
        }
        // Bad checksum; reserved flags (checksum fixed up); origin 255; rev_len 4.
        let mut b = DATA_BYTES;
        b[14] ^= 1;
        let p = DataPacket::new_checked(&b[..]).unwrap();
        assert_eq!(DataRepr::parse(&p), Err(Error::Malformed));
        let reparse = |mut bytes: Vec<u8>| {
            let mut p = DataPacket::new_unchecked(&mut bytes[..]);
            p.fill_checksum();
            DataRepr::parse(&DataPacket::new_checked(&bytes[..])?)
        };
        let mut b = DATA_BYTES.to_vec();
        b[12] = 0x04;
        assert_eq!(reparse(b), Err(Error::Malformed));
        let mut b = open_bytes();
        b[13] = 0xff;
        assert_eq!(reparse(b), Err(Error::Malformed));
        let mut b = open_bytes();
        b[14] = 4;
        assert_eq!(reparse(b), Err(Error::BadLength));
        // NACK: short, count past end, reserved, trailing.
        for cut in [0, 7, 15] {
            assert_eq!(
                NackPacket::new_checked(&NACK_BYTES[..cut]).unwrap_err(),
                Error::Truncated
            );
        }
        let mut b = NACK_BYTES;
        b[7] = 1;
        let n = NackPacket::new_checked(&b[..]).unwrap();
        assert_eq!(NackRepr::parse(&n), Err(Error::Malformed));
        let mut b = NACK_BYTES.to_vec();
        b.push(0);
        let n = NackPacket::new_checked(&b[..]).unwrap();
        assert_eq!(NackRepr::parse(&n), Err(Error::BadLength));
        assert_eq!(Seqs::new(&[0; 0x1_0000]), Err(Error::TooLong));
    }

    #[test]
    fn unknown_survives() {
        // No code points here but txn values from foreign origins.
        let t = Txn::from(0xff00_0001);
        assert_eq!(t.origin(), 0xff);
        assert_eq!(t.counter(), 1);
        assert_eq!(t.to_string(), "255/1");
        assert_eq!(Txn::new(id(1), 0x0100_0002).value(), 0x0100_0002);
        let repr = DataRepr {
            txn: t,
            ..data_repr()
        };
        let mut bytes = vec![0; repr.buffer_len(0)];
        repr.emit(&mut DataPacket::new_unchecked(&mut bytes), &[]);
        let p = DataPacket::new_checked(&bytes[..]).unwrap();
        assert_eq!(DataRepr::parse(&p).unwrap().txn, t);
    }

    proptest! {
        #[test]
        fn emit_parse_round_trip(
            seq in any::<u32>(),
            window in any::<u16>(),
            txn in any::<u32>(),
            response in any::<bool>(),
            open in proptest::option::of((0_u8..=254, any::<[u8; 32]>())),
            data in proptest::collection::vec(any::<u8>(), 0..64),
            nacks in proptest::collection::vec(any::<u32>(), 0..16),
        ) {
            let repr = DataRepr {
                seq,
                window,
                txn: Txn::from(txn),
                response,
                open: open.map(|(o, r)| Open { origin: id(o), reverse: PathId::from_bytes(r) }),
            };
            let mut bytes = vec![0xa5; repr.buffer_len(data.len())];
            repr.emit(&mut DataPacket::new_unchecked(&mut bytes), &data);
            let p = DataPacket::new_checked(&bytes[..]).unwrap();
            prop_assert_eq!(DataRepr::parse(&p), Ok(repr));
            prop_assert_eq!(p.data(), &data[..]);

            let repr = NackRepr { txn: Txn::from(txn), seqs: Seqs::new(&nacks).unwrap() };
            let mut bytes = vec![0xa5; repr.buffer_len()];
            repr.emit(&mut NackPacket::new_unchecked(&mut bytes));
            let n = NackPacket::new_checked(&bytes[..]).unwrap();
            let parsed = NackRepr::parse(&n).unwrap();
            prop_assert_eq!(parsed, repr);
            prop_assert_eq!(parsed.seqs.iter().collect::<Vec<_>>(), nacks);
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            crate::fuzz::nsff(&bytes);
        }
    }
}
