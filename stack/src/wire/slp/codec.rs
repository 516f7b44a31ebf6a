//! The cursor codec every SLP structure is read and written with (STYLE.md 2,
//! after rustls `msgs/codec.rs` and quinn `coding.rs`).
//!
//! A [`Reader`] hands out sub-slices of one buffer and never reads past it:
//! every length read from the wire is checked against what is left, so no
//! allocation can be larger than the input. Structures whose extent is given
//! by a length field are parsed from a [`Reader::sub`] reader and finish with
//! [`Reader::expect_empty`], which rejects trailing bytes. Writing appends to
//! a `Vec<u8>` and cannot fail: every value that could not be encoded (a
//! string over 65535 octets, a list over its count field) is refused when the
//! value is constructed.

use core::fmt;
use core::ops::Deref;

use super::ParseError;
use crate::wire::Error;

/// A cursor over a received buffer.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    off: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `buf`.
    pub const fn new(buf: &'a [u8]) -> Self {
        Self { buf, off: 0 }
    }

    /// The next `n` octets, or [`ParseError::Truncated`] if fewer are left.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], ParseError> {
        if n > self.left() {
            return Err(ParseError::Truncated);
        }
        let out = &self.buf[self.off..self.off + n];
        self.off += n;
        Ok(out)
    }

    /// A reader over the next `n` octets, which this reader skips.
    pub fn sub(&mut self, n: usize) -> Result<Self, ParseError> {
        self.take(n).map(Reader::new)
    }

    /// Everything that is left.
    pub fn rest(&mut self) -> &'a [u8] {
        let out = &self.buf[self.off..];
        self.off = self.buf.len();
        out
    }

    /// Octets not yet read.
    pub const fn left(&self) -> usize {
        self.buf.len() - self.off
    }

    /// Octets read so far.
    pub const fn used(&self) -> usize {
        self.off
    }

    /// Whether anything is left.
    pub const fn any_left(&self) -> bool {
        self.left() > 0
    }

    /// [`ParseError::TrailingBytes`] unless everything has been read.
    pub const fn expect_empty(&self) -> Result<(), ParseError> {
        if self.any_left() {
            Err(ParseError::TrailingBytes)
        } else {
            Ok(())
        }
    }

    /// One octet.
    pub fn u8(&mut self) -> Result<u8, ParseError> {
        Ok(self.take(1)?[0])
    }

    /// A big-endian `u16`.
    pub fn u16(&mut self) -> Result<u16, ParseError> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    /// A big-endian 24-bit integer.
    pub fn u24(&mut self) -> Result<u32, ParseError> {
        let b = self.take(3)?;
        Ok(u32::from_be_bytes([0, b[0], b[1], b[2]]))
    }

    /// A big-endian `u32`.
    pub fn u32(&mut self) -> Result<u32, ParseError> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A big-endian `u64`.
    pub fn u64(&mut self) -> Result<u64, ParseError> {
        let mut a = [0; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_be_bytes(a))
    }

    /// A string with a `u16` length prefix; it must be UTF-8.
    pub fn str16(&mut self) -> Result<&'a str, ParseError> {
        let n = self.u16()?;
        self.str_of(usize::from(n))
    }

    /// `n` octets as a UTF-8 string.
    pub fn str_of(&mut self, n: usize) -> Result<&'a str, ParseError> {
        core::str::from_utf8(self.take(n)?).map_err(|_| ParseError::Utf8)
    }
}

/// Appends a big-endian `u16`.
pub fn put_u16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_be_bytes());
}

/// Appends the low 24 bits of `v`, big-endian.
pub fn put_u24(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_be_bytes()[1..]);
}

/// Appends a big-endian `u32`.
pub fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_be_bytes());
}

/// Appends a big-endian `u64`.
pub fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_be_bytes());
}

/// Appends `s` with a `u16` length prefix. Callers guarantee `s` fits (every
/// string type of this module is bounded at construction).
pub fn put_str16(out: &mut Vec<u8>, s: &str) {
    debug_assert!(s.len() <= usize::from(u16::MAX));
    put_u16(out, s.len() as u16);
    out.extend_from_slice(s.as_bytes());
}

/// Writes the length of everything appended after a placeholder: call
/// [`LengthSlot::reserve`] before the data and [`LengthSlot::set`] after.
#[derive(Debug)]
pub struct LengthSlot {
    at: usize,
    width: usize,
}

impl LengthSlot {
    /// Appends a zero placeholder of `width` octets (2 or 3).
    pub fn reserve(out: &mut Vec<u8>, width: usize) -> Self {
        let at = out.len();
        out.resize(at + width, 0);
        Self { at, width }
    }

    /// Writes `value` into the placeholder, big-endian.
    pub fn set(self, out: &mut [u8], value: usize) {
        let bytes = (value as u64).to_be_bytes();
        out[self.at..self.at + self.width].copy_from_slice(&bytes[8 - self.width..]);
    }
}

/// A UTF-8 string of at most 65535 octets: what fits a `u16` length prefix.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SlpString(String);

impl SlpString {
    /// Longest string a `u16` length prefix can frame.
    pub const MAX_LEN: usize = u16::MAX as usize;

    /// `s`, or [`Error::TooLong`] over [`SlpString::MAX_LEN`] octets.
    pub fn new(s: impl Into<String>) -> Result<Self, Error> {
        let s = s.into();
        if s.len() > Self::MAX_LEN {
            return Err(Error::TooLong);
        }
        Ok(Self(s))
    }

    /// The string.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The owned string.
    pub fn into_string(self) -> String {
        self.0
    }

    /// Reads a `u16`-prefixed UTF-8 string.
    pub fn read(r: &mut Reader<'_>) -> Result<Self, ParseError> {
        Ok(Self(r.str16()?.to_owned()))
    }

    /// Appends it with its `u16` length prefix.
    pub fn encode(&self, out: &mut Vec<u8>) {
        put_str16(out, &self.0);
    }

    /// Octets on the wire, prefix included.
    pub fn buffer_len(&self) -> usize {
        2 + self.0.len()
    }
}

impl Deref for SlpString {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SlpString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<&str> for SlpString {
    type Error = Error;

    fn try_from(s: &str) -> Result<Self, Error> {
        Self::new(s)
    }
}

impl TryFrom<String> for SlpString {
    type Error = Error;

    fn try_from(s: String) -> Result<Self, Error> {
        Self::new(s)
    }
}

/// A list with at most `MAX` elements: what fits its count field.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct List<T, const MAX: usize>(Vec<T>);

impl<T, const MAX: usize> List<T, MAX> {
    /// `items`, or [`Error::TooLong`] over `MAX` of them.
    pub fn new(items: Vec<T>) -> Result<Self, Error> {
        if items.len() > MAX {
            return Err(Error::TooLong);
        }
        Ok(Self(items))
    }

    /// Appends `item`, or [`Error::TooLong`] if the list is full.
    pub fn push(&mut self, item: T) -> Result<(), Error> {
        if self.0.len() >= MAX {
            return Err(Error::TooLong);
        }
        self.0.push(item);
        Ok(())
    }

    /// The elements.
    pub fn into_vec(self) -> Vec<T> {
        self.0
    }

    /// Reads `n` elements with `read`. No space is reserved up front: the
    /// buffer bounds the list, not the count field.
    pub(super) fn read_n(
        r: &mut Reader<'_>,
        n: usize,
        mut read: impl FnMut(&mut Reader<'_>) -> Result<T, ParseError>,
    ) -> Result<Self, ParseError> {
        debug_assert!(n <= MAX);
        let mut items = Vec::new();
        for _ in 0..n {
            items.push(read(r)?);
        }
        Ok(Self(items))
    }
}

impl<T, const MAX: usize> Default for List<T, MAX> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<T, const MAX: usize> Deref for List<T, MAX> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        &self.0
    }
}

impl<T, const MAX: usize> TryFrom<Vec<T>> for List<T, MAX> {
    type Error = Error;

    fn try_from(items: Vec<T>) -> Result<Self, Error> {
        Self::new(items)
    }
}

impl<'a, T, const MAX: usize> IntoIterator for &'a List<T, MAX> {
    type Item = &'a T;
    type IntoIter = core::slice::Iter<'a, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn reader_bounds() {
        let mut r = Reader::new(&[0x01, 0x02, 0x03, 0x00, 0x01, b'a']);
        assert_eq!(r.u24(), Ok(0x01_0203));
        assert_eq!(r.used(), 3);
        let mut s = r.sub(3).unwrap();
        assert_eq!(s.str16(), Ok("a"));
        s.expect_empty().unwrap();
        r.expect_empty().unwrap();
        assert_eq!(r.u8(), Err(ParseError::Truncated));
        assert_eq!(r.take(usize::MAX), Err(ParseError::Truncated));

        let mut r = Reader::new(&[0x00, 0x02, 0xff, 0xfe]);
        assert_eq!(r.str16(), Err(ParseError::Utf8));
        let mut r = Reader::new(&[0xff, 0xff, 0x00]);
        assert_eq!(r.str16(), Err(ParseError::Truncated));
        assert_eq!(
            Reader::new(&[1]).expect_empty(),
            Err(ParseError::TrailingBytes)
        );
    }

    #[test]
    fn bounded_values() {
        assert!(SlpString::new("x".repeat(0xffff)).is_ok());
        assert_eq!(SlpString::new("x".repeat(0x10000)), Err(Error::TooLong));
        let mut l = List::<u8, 2>::new(vec![1]).unwrap();
        l.push(2).unwrap();
        assert_eq!(l.push(3), Err(Error::TooLong));
        assert_eq!(List::<u8, 2>::new(vec![1, 2, 3]), Err(Error::TooLong));
        assert_eq!(&l[..], &[1, 2]);
    }

    #[test]
    fn writer() {
        let mut out = vec![0xa5];
        let slot = LengthSlot::reserve(&mut out, 3);
        put_u16(&mut out, 0x1234);
        put_u24(&mut out, 0x00ab_cdef);
        put_u32(&mut out, 0xdead_beef);
        put_u64(&mut out, 0x0102_0304_0506_0708);
        put_str16(&mut out, "hi");
        let n = out.len();
        slot.set(&mut out, n);
        assert_eq!(
            out,
            [
                0xa5, 0x00, 0x00, 0x19, 0x12, 0x34, 0xab, 0xcd, 0xef, 0xde, 0xad, 0xbe, 0xef, 1, 2,
                3, 4, 5, 6, 7, 8, 0x00, 0x02, b'h', b'i'
            ]
        );
    }
}
