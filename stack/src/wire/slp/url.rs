//! URL entries (RFC 2608 §4.3) and authentication blocks (§9.2).
//!
//! ```text
//! URL entry:
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |   Reserved    |          Lifetime             |   URL Length  |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |URL len, contd.|            URL (variable length)              \
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |# of URL auths |            Auth. blocks (if any)              \
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//!
//! Authentication block:
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  Block Structure Descriptor   |  Authentication Block Length  |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                           Timestamp                           |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |     SLP SPI String Length     |         SLP SPI String        \
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |              Structured Authentication Block ...              \
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! The reserved octet of a URL entry is sent as 0 and ignored on receipt.
//! The authenticator is opaque here; [`super::auth`] says which octets it
//! signs and makes and checks it (SPEC §4: BSD 0x8001 HMAC-SHA256, 0x8002
//! Ed25519).

use super::codec::{put_u16, put_u32, List, Reader, SlpString};
use super::ParseError;
use crate::wire::Error;

/// Authentication blocks of one URL entry or message (count field: one octet).
pub type AuthBlocks = List<AuthBlock, 0xff>;

open_enum! {
    /// Block Structure Descriptor: the authenticator's format (RFC 2608 §9.2).
    pub enum Bsd: u16 {
        /// 0x0002: DSA with SHA-1 (RFC 2608 §9.2.2); not offered by svcroute.
        DsaSha1 = 0x0002,
        /// 0x8001 (private use): HMAC-SHA256 (SPEC §4).
        HmacSha256 = 0x8001,
        /// 0x8002 (private use): Ed25519 (SPEC §4).
        Ed25519 = 0x8002,
    }
}

/// An authentication block (RFC 2608 §9.2): at most 65535 octets in all.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AuthBlock {
    bsd: Bsd,
    timestamp: u32,
    spi: SlpString,
    data: Vec<u8>,
}

impl AuthBlock {
    /// Octets before the SPI string: BSD, length, timestamp, SPI length.
    pub const FIXED_LEN: usize = 10;

    /// A block; [`Error::TooLong`] if it would not fit its 16-bit length.
    pub fn new(bsd: Bsd, timestamp: u32, spi: SlpString, data: Vec<u8>) -> Result<Self, Error> {
        if Self::FIXED_LEN + spi.len() + data.len() > usize::from(u16::MAX) {
            return Err(Error::TooLong);
        }
        Ok(Self {
            bsd,
            timestamp,
            spi,
            data,
        })
    }

    /// The Block Structure Descriptor.
    pub const fn bsd(&self) -> Bsd {
        self.bsd
    }

    /// When the authenticator expires, seconds since 1970 (wrapping in 2106).
    pub const fn timestamp(&self) -> u32 {
        self.timestamp
    }

    /// The SLP SPI naming the key.
    pub const fn spi(&self) -> &SlpString {
        &self.spi
    }

    /// The structured authenticator.
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// Octets on the wire.
    pub fn buffer_len(&self) -> usize {
        Self::FIXED_LEN + self.spi.len() + self.data.len()
    }

    /// Reads one block.
    pub fn read(r: &mut Reader<'_>) -> Result<Self, ParseError> {
        let bsd = Bsd::from(r.u16()?);
        let len = usize::from(r.u16()?);
        if len < Self::FIXED_LEN {
            return Err(ParseError::BadLength);
        }
        let mut b = r.sub(len - 4)?;
        let timestamp = b.u32()?;
        let spi = SlpString::read(&mut b)?;
        let data = b.rest().to_vec();
        Ok(Self {
            bsd,
            timestamp,
            spi,
            data,
        })
    }

    /// Appends the block.
    pub fn encode(&self, out: &mut Vec<u8>) {
        put_u16(out, self.bsd.into());
        // NOTE: `new` bounds the length to 16 bits.
        put_u16(out, self.buffer_len() as u16);
        put_u32(out, self.timestamp);
        self.spi.encode(out);
        out.extend_from_slice(&self.data);
    }
}

/// Reads a one-octet count and that many blocks.
pub fn read_auths(r: &mut Reader<'_>) -> Result<AuthBlocks, ParseError> {
    let n = usize::from(r.u8()?);
    List::read_n(r, n, AuthBlock::read)
}

/// Appends a one-octet count and the blocks.
pub fn encode_auths(auths: &AuthBlocks, out: &mut Vec<u8>) {
    out.push(auths.len() as u8);
    for a in auths {
        a.encode(out);
    }
}

/// Octets of [`encode_auths`]'s output.
pub fn auths_len(auths: &AuthBlocks) -> usize {
    1 + auths.iter().map(AuthBlock::buffer_len).sum::<usize>()
}

/// A URL entry (RFC 2608 §4.3).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct UrlEntry {
    /// Seconds the URL may be cached (ignored in a SrvDeReg).
    pub lifetime: u16,
    /// The service URL.
    pub url: SlpString,
    /// URL authentication blocks.
    pub auths: AuthBlocks,
}

impl UrlEntry {
    /// An entry without authentication blocks.
    pub fn new(lifetime: u16, url: SlpString) -> Self {
        Self {
            lifetime,
            url,
            auths: AuthBlocks::default(),
        }
    }

    /// Octets on the wire.
    pub fn buffer_len(&self) -> usize {
        3 + self.url.buffer_len() + auths_len(&self.auths)
    }

    /// Reads one entry; the reserved octet is ignored.
    pub fn read(r: &mut Reader<'_>) -> Result<Self, ParseError> {
        let _reserved = r.u8()?;
        let lifetime = r.u16()?;
        let url = SlpString::read(r)?;
        let auths = read_auths(r)?;
        Ok(Self {
            lifetime,
            url,
            auths,
        })
    }

    /// Appends the entry, reserved octet 0.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(0);
        put_u16(out, self.lifetime);
        self.url.encode(out);
        encode_auths(&self.auths, out);
    }

    /// The service type of the URL (RFC 2608 §4, §4.1); see [`url_service_type`].
    pub fn service_type(&self) -> Option<&str> {
        url_service_type(&self.url)
    }
}

/// The service type a URL stands for (RFC 2608 §4.1): for `service:` URLs
/// everything before `://` (`service:printer:lpr` of
/// `service:printer:lpr://host`), for other schemes the scheme (`http`).
/// `None` if there is no scheme.
pub fn url_service_type(url: &str) -> Option<&str> {
    let lower = url
        .get(..8)
        .is_some_and(|p| p.eq_ignore_ascii_case("service:"));
    let end = if lower {
        url.find("://")?
    } else {
        url.find(':')?
    };
    (end > 0).then(|| &url[..end])
}

#[cfg(test)]
pub(super) mod test {
    use proptest::prelude::*;

    use super::*;

    /// Lifetime 0x1234, "service:x://a", one HMAC-SHA256 block with SPI "k1"
    /// and a 3-octet authenticator.
    static ENTRY: [u8; 34] = [
        0x00, // reserved
        0x12, 0x34, // lifetime
        0x00, 0x0d, // URL length 13
        b's', b'e', b'r', b'v', b'i', b'c', b'e', b':', b'x', b':', b'/', b'/', b'a',
        0x01, // one auth block
        0x80, 0x01, // BSD HMAC-SHA256
        0x00, 0x0f, // block length 15
        0x65, 0x43, 0x21, 0x00, // timestamp
        0x00, 0x02, b'k', b'1', // SPI
        0xaa, 0xbb, 0xcc, // authenticator
    ];

    fn entry() -> UrlEntry {
        let block = AuthBlock::new(
            Bsd::HmacSha256,
            0x6543_2100,
            SlpString::new("k1").unwrap(),
            vec![0xaa, 0xbb, 0xcc],
        )
        .unwrap();
        UrlEntry {
            lifetime: 0x1234,
            url: SlpString::new("service:x://a").unwrap(),
            auths: AuthBlocks::new(vec![block]).unwrap(),
        }
    }

    #[test]
    fn deconstruct() {
        let mut r = Reader::new(&ENTRY);
        let e = UrlEntry::read(&mut r).unwrap();
        r.expect_empty().unwrap();
        assert_eq!(e, entry());
        assert_eq!(e.auths[0].bsd(), Bsd::HmacSha256);
        assert_eq!(e.auths[0].spi().as_str(), "k1");
        assert_eq!(e.service_type(), Some("service:x"));
    }

    #[test]
    fn construct() {
        let mut out = vec![0xa5; 2];
        entry().encode(&mut out);
        assert_eq!(&out[2..], &ENTRY[..]);
        assert_eq!(entry().buffer_len(), ENTRY.len());
    }

    #[test]
    fn reserved_octet_ignored() {
        let mut bytes = ENTRY;
        bytes[0] = 0xff;
        assert_eq!(UrlEntry::read(&mut Reader::new(&bytes)), Ok(entry()));
    }

    #[test]
    fn truncated_everywhere() {
        for n in 0..ENTRY.len() {
            assert!(
                UrlEntry::read(&mut Reader::new(&ENTRY[..n])).is_err(),
                "{n}"
            );
        }
    }

    #[test]
    fn impossible_lengths() {
        let mut bytes = ENTRY;
        bytes[22] = 9; // block length below the fixed part
        assert_eq!(
            UrlEntry::read(&mut Reader::new(&bytes)),
            Err(ParseError::BadLength)
        );
        let mut bytes = ENTRY;
        bytes[22] = 10; // SPI no longer fits the block
        assert_eq!(
            UrlEntry::read(&mut Reader::new(&bytes)),
            Err(ParseError::Truncated)
        );
        let mut bytes = ENTRY;
        bytes[18] = 2; // two blocks announced, one there
        assert_eq!(
            UrlEntry::read(&mut Reader::new(&bytes)),
            Err(ParseError::Truncated)
        );
    }

    #[test]
    fn unknown_bsd_survives() {
        let mut bytes = ENTRY;
        bytes[19] = 0x12;
        let e = UrlEntry::read(&mut Reader::new(&bytes)).unwrap();
        assert_eq!(e.auths[0].bsd(), Bsd::Unknown(0x1201));
        let mut out = Vec::new();
        e.encode(&mut out);
        assert_eq!(out, bytes);
    }

    #[test]
    fn block_too_long() {
        let spi = SlpString::new("s").unwrap();
        assert!(AuthBlock::new(Bsd::Ed25519, 0, spi.clone(), vec![0; 0xffff - 11]).is_ok());
        assert_eq!(
            AuthBlock::new(Bsd::Ed25519, 0, spi, vec![0; 0xffff - 10]),
            Err(Error::TooLong)
        );
    }

    #[test]
    fn service_types_of_urls() {
        for (url, want) in [
            ("service:printer:lpr://host/q", Some("service:printer:lpr")),
            ("SERVICE:tftp://h:8080", Some("SERVICE:tftp")),
            ("http://www.srvloc.org", Some("http")),
            ("nfs://max.net/znoo", Some("nfs")),
            ("service:x", None),
            ("nourl", None),
            (":x", None),
        ] {
            assert_eq!(url_service_type(url), want, "{url}");
        }
    }

    proptest! {
        #[test]
        fn roundtrip(e in strategy::url_entry()) {
            let mut out = Vec::new();
            e.encode(&mut out);
            prop_assert_eq!(out.len(), e.buffer_len());
            let mut r = Reader::new(&out);
            prop_assert_eq!(UrlEntry::read(&mut r), Ok(e));
            prop_assert!(!r.any_left());
        }
    }

    pub(in crate::wire::slp) mod strategy {
        use proptest::prelude::*;

        use super::super::*;

        pub(in crate::wire::slp) fn slp_string(max: usize) -> impl Strategy<Value = SlpString> {
            proptest::string::string_regex(&format!("[ -~é]{{0,{max}}}"))
                .unwrap()
                .prop_map(|s| SlpString::new(s).unwrap())
        }

        pub(in crate::wire::slp) fn auth_block() -> impl Strategy<Value = AuthBlock> {
            (
                any::<u16>(),
                any::<u32>(),
                slp_string(8),
                proptest::collection::vec(any::<u8>(), 0..24),
            )
                .prop_map(|(bsd, ts, spi, data)| {
                    AuthBlock::new(Bsd::from(bsd), ts, spi, data).unwrap()
                })
        }

        pub(in crate::wire::slp) fn auths() -> impl Strategy<Value = AuthBlocks> {
            proptest::collection::vec(auth_block(), 0..3).prop_map(|v| AuthBlocks::new(v).unwrap())
        }

        pub(in crate::wire::slp) fn url_entry() -> impl Strategy<Value = UrlEntry> {
            (any::<u16>(), slp_string(40), auths()).prop_map(|(lifetime, url, auths)| UrlEntry {
                lifetime,
                url,
                auths,
            })
        }
    }
}
