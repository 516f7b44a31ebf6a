//! SLP authentication (RFC 2608 §9.2) with svcroute's block structure
//! descriptors (SPEC §4): the octets an authentication block vouches for,
//! and making and checking blocks with BSD 0x8001 HMAC-SHA256 and 0x8002
//! Ed25519.
//!
//! RFC 2608 §9.2.1 signs these components, as one buffer in this order
//! (strings with their `u16` length prefix, as on the wire):
//!
//! ```text
//! URL            | SPI | URL |                                             timestamp u32 |
//! attribute list | SPI | <attr-list> |                                     timestamp u32 |
//! DAAdvert       | SPI | boot timestamp u32 | URL | <attr-list> | <scope-list> | <SPI list> | timestamp u32 |
//! SAAdvert       | SPI | URL | <attr-list> | <scope-list> |                 timestamp u32 |
//! ```
//!
//! The SPI is the block's own; the timestamp is the block's, the time the
//! authenticator expires (seconds since 1970-01-01, RFC 2608 §9.2). The
//! Structured Authentication Block (the authenticator) is:
//!
//! | BSD | authenticator |
//! |---|---|
//! | 0x8001 HMAC-SHA256 | HMAC-SHA256 of the octets under the SPI's pre-shared secret, truncated to 16 octets (SPEC §0, [`crate::wire::auth`]) |
//! | 0x8002 Ed25519 | the 64-octet Ed25519 signature (RFC 8032) of the octets |
//!
//! RFC 2608's DSA-SHA1 (0x0002) is not offered: [`Signer`] and [`Verifier`]
//! refuse it, so such blocks never verify here.
//!
//! What RFC 2608 leaves **uncovered**: the header (function, flags, XID,
//! language tag), a URL entry's lifetime, a SrvReg's service type and scope
//! list, a SrvDeReg's tag list, a DAAdvert's error code, and extensions (so
//! a MeshFwd version timestamp is not signed). A captured signed URL block
//! also verifies for a SrvDeReg of the same URL until it expires: the
//! timestamp is the only replay bound.
//!
//! Key material as configured is text: `hex:…`, `base64:…` or `file:PATH`
//! ([`key_from_text`]).

use core::fmt;

use ring::signature::{self, Ed25519KeyPair, KeyPair as _, UnparsedPublicKey};

use super::attr::AttrList;
use super::codec::{put_u32, SlpString};
use super::msg::{DaAdvert, SaAdvert};
use super::scope::{Scope, ScopeList};
use super::url::{AuthBlock, Bsd};
use crate::wire::auth::{AuthTag, AUTH_TAG_LEN};

/// Octets of an Ed25519 public key, seed, and signature.
const ED25519_KEY_LEN: usize = 32;
const ED25519_SIG_LEN: usize = 64;

/// Shortest HMAC-SHA256 secret we accept (half the hash length).
pub const MIN_HMAC_SECRET: usize = 16;

/// Longest SPI a key may have (octets).
pub const MAX_SPI_LEN: usize = 255;

/// What an authentication block vouches for (RFC 2608 §9.2.1).
#[derive(Debug, Clone, Copy)]
pub enum Signed<'a> {
    /// A URL (URL entries of SrvReg, SrvDeReg, SrvRply).
    Url(&'a SlpString),
    /// An attribute list (SrvReg, AttrRply).
    Attrs(&'a AttrList),
    /// A DAAdvert's fields.
    DaAdvert {
        /// DA stateless boot timestamp.
        boot_timestamp: u32,
        /// The DA's URL.
        url: &'a SlpString,
        /// Its attributes.
        attrs: &'a AttrList,
        /// Its scopes.
        scopes: &'a ScopeList,
        /// The SPIs it can verify.
        spi_list: &'a SlpString,
    },
    /// An SAAdvert's fields.
    SaAdvert {
        /// The SA's URL.
        url: &'a SlpString,
        /// Its attributes.
        attrs: &'a AttrList,
        /// Its scopes.
        scopes: &'a ScopeList,
    },
}

impl<'a> Signed<'a> {
    /// The signed fields of `a`.
    pub const fn da_advert(a: &'a DaAdvert) -> Self {
        Self::DaAdvert {
            boot_timestamp: a.boot_timestamp,
            url: &a.url,
            attrs: &a.attrs,
            scopes: &a.scopes,
            spi_list: &a.spi_list,
        }
    }

    /// The signed fields of `a`.
    pub const fn sa_advert(a: &'a SaAdvert) -> Self {
        Self::SaAdvert {
            url: &a.url,
            attrs: &a.attrs,
            scopes: &a.scopes,
        }
    }

    /// The octets a block with `spi` and `timestamp` signs.
    pub fn bytes(&self, spi: &SlpString, timestamp: u32) -> Vec<u8> {
        let mut out = Vec::new();
        spi.encode(&mut out);
        match self {
            Self::Url(url) => url.encode(&mut out),
            Self::Attrs(attrs) => attrs.encode(&mut out),
            Self::DaAdvert {
                boot_timestamp,
                url,
                attrs,
                scopes,
                spi_list,
            } => {
                put_u32(&mut out, *boot_timestamp);
                url.encode(&mut out);
                attrs.encode(&mut out);
                scopes.encode(&mut out);
                spi_list.encode(&mut out);
            }
            Self::SaAdvert { url, attrs, scopes } => {
                url.encode(&mut out);
                attrs.encode(&mut out);
                scopes.encode(&mut out);
            }
        }
        put_u32(&mut out, timestamp);
        out
    }
}

/// The BSD named in configuration: `hmac-sha256` (0x8001) or `ed25519`
/// (0x8002), any case.
pub fn bsd_from_name(name: &str) -> Option<Bsd> {
    match name.to_ascii_lowercase().as_str() {
        "hmac-sha256" => Some(Bsd::HmacSha256),
        "ed25519" => Some(Bsd::Ed25519),
        _ => None,
    }
}

/// The configuration name of a BSD we offer.
pub const fn bsd_name(bsd: Bsd) -> &'static str {
    match bsd {
        Bsd::HmacSha256 => "hmac-sha256",
        Bsd::Ed25519 => "ed25519",
        Bsd::DsaSha1 => "dsa-sha1",
        Bsd::Unknown(_) => "unknown",
    }
}

/// Whether `spi` is a well-formed SLP SPI: the grammar of a `<scope-val>`
/// (RFC 2608 §9.2), so never empty and never holding a comma.
pub fn spi_ok(spi: &str) -> bool {
    Scope::parse(spi).is_ok()
}

/// The SPIs of a DAAdvert's SLP SPI list (comma separated; empty: none).
pub fn spi_list(list: &str) -> impl Iterator<Item = &str> {
    list.split(',').filter(|s| !s.is_empty())
}

/// Why key material was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyError {
    /// The SPI does not follow the `<scope-val>` grammar.
    Spi(String),
    /// A BSD svcroute does not sign or verify with.
    Bsd(Bsd),
    /// An HMAC secret shorter than [`MIN_HMAC_SECRET`] octets.
    HmacTooShort(usize),
    /// Not an Ed25519 private key (a 32-octet seed or a PKCS#8 document).
    Ed25519Private,
    /// Not an Ed25519 public key (32 octets).
    Ed25519Public(usize),
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Spi(s) => write!(
                f,
                "SPI {s:?} is not an SLP SPI (1 to {MAX_SPI_LEN} octets of a scope-like name, \
                 without , ( ) \\ ! < = > ~ ; * +)"
            ),
            Self::Bsd(b) => write!(
                f,
                "BSD {:#06x} is not offered (hmac-sha256 or ed25519)",
                u16::from(*b)
            ),
            Self::HmacTooShort(n) => write!(
                f,
                "an HMAC-SHA256 secret needs at least {MIN_HMAC_SECRET} octets, this one has {n}"
            ),
            Self::Ed25519Private => {
                f.write_str("not an Ed25519 private key (a 32-octet seed or a PKCS#8 document)")
            }
            Self::Ed25519Public(n) => {
                write!(f, "an Ed25519 public key has 32 octets, this one has {n}")
            }
        }
    }
}

impl std::error::Error for KeyError {}

/// Why a block did not verify.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VerifyError {
    /// The block names another SPI than the key's.
    Spi,
    /// The block's BSD is not the key's.
    Bsd,
    /// The authenticator does not match the signed octets.
    Authenticator,
    /// The block's timestamp is not after now: it expired.
    Expired,
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Spi => "the block names another SPI",
            Self::Bsd => "the block's BSD is not the key's",
            Self::Authenticator => "the authenticator does not match",
            Self::Expired => "the authenticator expired",
        })
    }
}

impl std::error::Error for VerifyError {}

enum SigningKey {
    Hmac(Vec<u8>),
    Ed25519(Ed25519KeyPair),
}

/// A key that makes authentication blocks for one SPI.
pub struct Signer {
    spi: SlpString,
    key: SigningKey,
}

impl fmt::Debug for Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Signer")
            .field("spi", &self.spi.as_str())
            .field("bsd", &bsd_name(self.bsd()))
            .finish_non_exhaustive()
    }
}

fn checked_spi(spi: &str) -> Result<SlpString, KeyError> {
    if !spi_ok(spi) || spi.len() > MAX_SPI_LEN {
        return Err(KeyError::Spi(spi.to_owned()));
    }
    SlpString::new(spi).map_err(|_| KeyError::Spi(spi.to_owned()))
}

impl Signer {
    /// A signer for `spi` with BSD `bsd`: `key` is the HMAC secret, or the
    /// Ed25519 private key (32-octet seed or PKCS#8 v1/v2 document).
    pub fn new(spi: &str, bsd: Bsd, key: &[u8]) -> Result<Self, KeyError> {
        let spi = checked_spi(spi)?;
        let key = match bsd {
            Bsd::HmacSha256 => {
                if key.len() < MIN_HMAC_SECRET {
                    return Err(KeyError::HmacTooShort(key.len()));
                }
                SigningKey::Hmac(key.to_vec())
            }
            Bsd::Ed25519 => {
                let pair = if key.len() == ED25519_KEY_LEN {
                    Ed25519KeyPair::from_seed_unchecked(key)
                } else {
                    Ed25519KeyPair::from_pkcs8_maybe_unchecked(key)
                };
                SigningKey::Ed25519(pair.map_err(|_| KeyError::Ed25519Private)?)
            }
            other => return Err(KeyError::Bsd(other)),
        };
        Ok(Self { spi, key })
    }

    /// The SPI.
    pub const fn spi(&self) -> &SlpString {
        &self.spi
    }

    /// The BSD of the blocks it makes.
    pub const fn bsd(&self) -> Bsd {
        match self.key {
            SigningKey::Hmac(_) => Bsd::HmacSha256,
            SigningKey::Ed25519(_) => Bsd::Ed25519,
        }
    }

    /// The verifier for its blocks (the secret, or the public key).
    pub fn verifier(&self) -> Verifier {
        let key = match &self.key {
            SigningKey::Hmac(s) => VerifyingKey::Hmac(s.clone()),
            SigningKey::Ed25519(pair) => {
                let mut pk = [0; ED25519_KEY_LEN];
                pk.copy_from_slice(pair.public_key().as_ref());
                VerifyingKey::Ed25519(pk)
            }
        };
        Verifier {
            spi: self.spi.clone(),
            key,
        }
    }

    /// The authenticator of `octets` (no block around it).
    fn authenticator(&self, octets: &[u8]) -> Vec<u8> {
        match &self.key {
            SigningKey::Hmac(secret) => AuthTag::sign(0, secret, &[octets]).tag.to_vec(),
            SigningKey::Ed25519(pair) => pair.sign(octets).as_ref().to_vec(),
        }
    }

    /// A block for `what`, valid until `expires` (seconds since 1970).
    pub fn sign(&self, what: &Signed<'_>, expires: u32) -> AuthBlock {
        let data = self.authenticator(&what.bytes(&self.spi, expires));
        // NOTE(unwrap): the SPI is at most MAX_SPI_LEN octets and the
        // authenticator at most 64, far below a block's 65535.
        AuthBlock::new(self.bsd(), expires, self.spi.clone(), data).unwrap()
    }
}

#[derive(Clone)]
enum VerifyingKey {
    Hmac(Vec<u8>),
    Ed25519([u8; ED25519_KEY_LEN]),
}

/// A key that checks authentication blocks of one SPI.
#[derive(Clone)]
pub struct Verifier {
    spi: SlpString,
    key: VerifyingKey,
}

impl fmt::Debug for Verifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Verifier")
            .field("spi", &self.spi.as_str())
            .field("bsd", &bsd_name(self.bsd()))
            .finish_non_exhaustive()
    }
}

impl Verifier {
    /// A verifier for `spi` with BSD `bsd`: `key` is the HMAC secret, or the
    /// Ed25519 public key (32 octets).
    pub fn new(spi: &str, bsd: Bsd, key: &[u8]) -> Result<Self, KeyError> {
        let spi = checked_spi(spi)?;
        let key = match bsd {
            Bsd::HmacSha256 => {
                if key.len() < MIN_HMAC_SECRET {
                    return Err(KeyError::HmacTooShort(key.len()));
                }
                VerifyingKey::Hmac(key.to_vec())
            }
            Bsd::Ed25519 => {
                let pk: [u8; ED25519_KEY_LEN] = key
                    .try_into()
                    .map_err(|_| KeyError::Ed25519Public(key.len()))?;
                VerifyingKey::Ed25519(pk)
            }
            other => return Err(KeyError::Bsd(other)),
        };
        Ok(Self { spi, key })
    }

    /// The SPI.
    pub const fn spi(&self) -> &SlpString {
        &self.spi
    }

    /// The BSD of the blocks it checks.
    pub const fn bsd(&self) -> Bsd {
        match self.key {
            VerifyingKey::Hmac(_) => Bsd::HmacSha256,
            VerifyingKey::Ed25519(_) => Bsd::Ed25519,
        }
    }

    /// Whether `block` is a good, unexpired block of this key for `what`
    /// at `now` (seconds since 1970).
    pub fn verify(
        &self,
        what: &Signed<'_>,
        block: &AuthBlock,
        now: u32,
    ) -> Result<(), VerifyError> {
        if block.spi() != &self.spi {
            return Err(VerifyError::Spi);
        }
        if block.bsd() != self.bsd() {
            return Err(VerifyError::Bsd);
        }
        let octets = what.bytes(&self.spi, block.timestamp());
        let good = match &self.key {
            VerifyingKey::Hmac(secret) => {
                let Ok(tag) = <[u8; AUTH_TAG_LEN]>::try_from(block.data()) else {
                    return Err(VerifyError::Authenticator);
                };
                AuthTag::sign(0, secret, &[&octets]).ct_eq(&AuthTag { key_id: 0, tag })
            }
            VerifyingKey::Ed25519(pk) => {
                block.data().len() == ED25519_SIG_LEN
                    && UnparsedPublicKey::new(&signature::ED25519, pk)
                        .verify(&octets, block.data())
                        .is_ok()
            }
        };
        if !good {
            return Err(VerifyError::Authenticator);
        }
        // The timestamp is signed, so it is checked after the authenticator.
        if block.timestamp() <= now {
            return Err(VerifyError::Expired);
        }
        Ok(())
    }
}

/// Why key text was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyTextError {
    /// Neither `hex:`, `base64:` nor `file:`.
    Prefix,
    /// Not an even number of hex digits.
    Hex,
    /// Not standard base64 (padding optional).
    Base64,
    /// Decodes to nothing.
    Empty,
    /// The file could not be read.
    File(String),
}

impl fmt::Display for KeyTextError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Prefix => f.write_str("key text must start with hex:, base64: or file:"),
            Self::Hex => f.write_str("not an even number of hex digits after hex:"),
            Self::Base64 => f.write_str("not standard base64 after base64:"),
            Self::Empty => f.write_str("the key is empty"),
            Self::File(e) => write!(f, "cannot read the key file: {e}"),
        }
    }
}

impl std::error::Error for KeyTextError {}

/// Key octets from configuration text:
///
/// - `hex:00ff…`: hex digits (any case);
/// - `base64:AAEC…`: standard base64, `=` padding optional;
/// - `file:PATH`: the file's octets; if the file holds text starting with
///   `hex:` or `base64:` (surrounding white space ignored), that text is
///   decoded instead. A relative path is relative to the working directory.
pub fn key_from_text(text: &str) -> Result<Vec<u8>, KeyTextError> {
    let out = if let Some(h) = text.strip_prefix("hex:") {
        decode_hex(h.trim()).ok_or(KeyTextError::Hex)?
    } else if let Some(b) = text.strip_prefix("base64:") {
        decode_base64(b.trim()).ok_or(KeyTextError::Base64)?
    } else if let Some(path) = text.strip_prefix("file:") {
        let raw = std::fs::read(path).map_err(|e| KeyTextError::File(format!("{path}: {e}")))?;
        let inner = core::str::from_utf8(&raw).ok().map(str::trim);
        match inner {
            Some(t) if t.starts_with("hex:") || t.starts_with("base64:") => {
                return key_from_text(t);
            }
            _ => raw,
        }
    } else {
        return Err(KeyTextError::Prefix);
    };
    if out.is_empty() {
        return Err(KeyTextError::Empty);
    }
    Ok(out)
}

/// Fresh key material from the system's random source: an Ed25519 seed,
/// or an HMAC secret (32 octets either way). `None` if the source fails.
pub fn random_key() -> Option<[u8; 32]> {
    use ring::rand::SecureRandom as _;
    let mut k = [0; 32];
    ring::rand::SystemRandom::new().fill(&mut k).ok()?;
    Some(k)
}

/// The Ed25519 public key of a private key (32-octet seed or PKCS#8).
pub fn ed25519_public(private: &[u8]) -> Result<[u8; 32], KeyError> {
    let signer = Signer::new("k", Bsd::Ed25519, private)?;
    match signer.verifier().key {
        VerifyingKey::Ed25519(pk) => Ok(pk),
        VerifyingKey::Hmac(_) => Err(KeyError::Ed25519Private),
    }
}

/// `s` as lower-case hex digits.
pub fn to_hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    s.as_bytes()
        .chunks(2)
        .map(|p| {
            let d = |c: u8| char::from(c).to_digit(16);
            Some((d(p[0])? * 16 + d(p[1])?) as u8)
        })
        .collect()
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 (RFC 4648 §4) with `=` padding.
pub fn to_base64(b: &[u8]) -> String {
    let mut out = String::with_capacity(b.len().div_ceil(3) * 4);
    for chunk in b.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0_u32, |acc, (i, x)| acc | (u32::from(*x) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(B64[((n >> (18 - 6 * i)) & 0x3f) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn decode_base64(s: &str) -> Option<Vec<u8>> {
    let s = s.trim_end_matches('=');
    if s.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let mut acc = 0_u32;
    let mut bits = 0;
    for c in s.bytes() {
        let v = B64.iter().position(|x| *x == c)? as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    // Leftover bits must be zero (canonical encoding).
    (acc == 0).then_some(out)
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::wire::slp::codec::List;
    use crate::wire::slp::{Body, Header, LangTag, Message, ServiceType, SrvReg, UrlEntry};

    fn s(v: &str) -> SlpString {
        SlpString::new(v).unwrap()
    }

    /// RFC 8032 §7.1 TEST 1: secret key (seed) and public key.
    const RFC8032_SEED: [u8; 32] = [
        0x9d, 0x61, 0xb1, 0x9d, 0xef, 0xfd, 0x5a, 0x60, 0xba, 0x84, 0x4a, 0xf4, 0x92, 0xec, 0x2c,
        0xc4, 0x44, 0x49, 0xc5, 0x69, 0x7b, 0x32, 0x69, 0x19, 0x70, 0x3b, 0xac, 0x03, 0x1c, 0xae,
        0x7f, 0x60,
    ];
    const RFC8032_PUBLIC: [u8; 32] = [
        0xd7, 0x5a, 0x98, 0x01, 0x82, 0xb1, 0x0a, 0xb7, 0xd5, 0x4b, 0xfe, 0xd3, 0xc9, 0x64, 0x07,
        0x3a, 0x0e, 0xe1, 0x72, 0xf3, 0xda, 0xa6, 0x23, 0x25, 0xaf, 0x02, 0x1a, 0x68, 0xf7, 0x07,
        0x51, 0x1a,
    ];
    const SECRET: &[u8] = b"0123456789abcdef";
    const TS: u32 = 0x6543_2100;

    /// The URL of the golden blocks: SPI "k1", "service:x://a", 0x65432100.
    static URL_SIGNED: [u8; 23] = [
        0x00, 0x02, b'k', b'1', // SPI
        0x00, 0x0d, b's', b'e', b'r', b'v', b'i', b'c', b'e', b':', b'x', b':', b'/', b'/',
        b'a', // URL
        0x65, 0x43, 0x21, 0x00, // timestamp
    ];

    #[test]
    fn url_octets() {
        let url = s("service:x://a");
        assert_eq!(Signed::Url(&url).bytes(&s("k1"), TS), URL_SIGNED);
    }

    #[test]
    fn attr_list_octets() {
        let attrs = AttrList::parse("(a=1),kw").unwrap();
        assert_eq!(
            Signed::Attrs(&attrs).bytes(&s("k1"), 1),
            [
                0x00, 0x02, b'k', b'1', // SPI
                0x00, 0x08, b'(', b'a', b'=', b'1', b')', b',', b'k', b'w', // attr-list
                0x00, 0x00, 0x00, 0x01, // timestamp
            ]
        );
    }

    #[test]
    fn da_advert_octets() {
        let a = DaAdvert {
            boot_timestamp: 0x0102_0304,
            url: s("service:directory-agent://1"),
            scopes: ScopeList::parse("x,y").unwrap(),
            attrs: AttrList::parse("m").unwrap(),
            spi_list: s("k1,k2"),
            ..DaAdvert::default()
        };
        let mut want = vec![0x00, 0x02, b'k', b'1', 0x01, 0x02, 0x03, 0x04, 0x00, 0x1b];
        want.extend_from_slice(b"service:directory-agent://1");
        want.extend_from_slice(&[0x00, 0x01, b'm']); // attr-list before scope-list
        want.extend_from_slice(&[0x00, 0x03, b'x', b',', b'y']);
        want.extend_from_slice(&[0x00, 0x05, b'k', b'1', b',', b'k', b'2']);
        want.extend_from_slice(&[0xaa, 0xbb, 0xcc, 0xdd]);
        assert_eq!(Signed::da_advert(&a).bytes(&s("k1"), 0xaabb_ccdd), want);
    }

    #[test]
    fn sa_advert_octets() {
        let a = SaAdvert {
            url: s("service:service-agent://2"),
            scopes: ScopeList::parse("x").unwrap(),
            attrs: AttrList::parse("").unwrap(),
            ..SaAdvert::default()
        };
        let mut want = vec![0x00, 0x01, b'k', 0x00, 0x19];
        want.extend_from_slice(b"service:service-agent://2");
        want.extend_from_slice(&[0x00, 0x00, 0x00, 0x01, b'x', 0, 0, 0, 9]);
        assert_eq!(Signed::sa_advert(&a).bytes(&s("k"), 9), want);
    }

    /// BSD 0x8001 over [`URL_SIGNED`] with secret "0123456789abcdef", as a
    /// whole block. The tag was computed independently (Python `hmac`).
    static HMAC_BLOCK: [u8; 28] = [
        0x80, 0x01, // BSD HMAC-SHA256
        0x00, 0x1c, // block length 28
        0x65, 0x43, 0x21, 0x00, // timestamp
        0x00, 0x02, b'k', b'1', // SPI
        0xc0, 0xc0, 0x63, 0xae, 0x20, 0xbb, 0xdf, 0x46, 0x8f, 0x62, 0xe1, 0x11, 0x99, 0x6e, 0xcb,
        0x27, // tag
    ];

    /// BSD 0x8002 over [`URL_SIGNED`] with the RFC 8032 TEST 1 key; the
    /// signature was computed independently (Python `cryptography`).
    static ED25519_SIG: [u8; 64] = [
        0xfb, 0x81, 0x84, 0x17, 0xc8, 0xbe, 0xb0, 0xb3, 0x72, 0x3a, 0x88, 0x41, 0x98, 0xbe, 0xe4,
        0xa2, 0xc9, 0xac, 0x7e, 0x65, 0xef, 0x57, 0xcf, 0x66, 0xcb, 0xf6, 0x38, 0xc2, 0xe2, 0xe8,
        0x4f, 0xeb, 0xc3, 0x20, 0x06, 0xa9, 0x47, 0x4b, 0x37, 0x70, 0xc0, 0x7d, 0xa2, 0xa9, 0xec,
        0x22, 0xcf, 0x5f, 0xaa, 0x1d, 0x3d, 0x1c, 0x76, 0x2d, 0x51, 0x6e, 0x20, 0x9e, 0x51, 0x5b,
        0x55, 0x2c, 0x0b, 0x09,
    ];

    fn block_bytes(b: &AuthBlock) -> Vec<u8> {
        let mut out = vec![0xa5; 2];
        b.encode(&mut out);
        assert_eq!(&out[..2], [0xa5; 2]);
        out.split_off(2)
    }

    #[test]
    fn hmac_golden() {
        let signer = Signer::new("k1", Bsd::HmacSha256, SECRET).unwrap();
        let url = s("service:x://a");
        let block = signer.sign(&Signed::Url(&url), TS);
        assert_eq!(block_bytes(&block), HMAC_BLOCK);
        let v = Verifier::new("k1", Bsd::HmacSha256, SECRET).unwrap();
        assert_eq!(v.verify(&Signed::Url(&url), &block, TS - 1), Ok(()));
        // Parse the golden block back and verify it.
        let parsed =
            AuthBlock::read(&mut crate::wire::slp::codec::Reader::new(&HMAC_BLOCK)).unwrap();
        assert_eq!(parsed, block);
    }

    #[test]
    fn ed25519_golden() {
        let signer = Signer::new("k1", Bsd::Ed25519, &RFC8032_SEED).unwrap();
        let v = signer.verifier();
        assert_eq!(v.bsd(), Bsd::Ed25519);
        let VerifyingKey::Ed25519(pk) = &v.key else {
            panic!("not ed25519")
        };
        assert_eq!(pk, &RFC8032_PUBLIC);
        let url = s("service:x://a");
        let block = signer.sign(&Signed::Url(&url), TS);
        let mut want = vec![
            0x80, 0x02, 0x00, 0x4c, 0x65, 0x43, 0x21, 0x00, 0x00, 0x02, b'k', b'1',
        ];
        want.extend_from_slice(&ED25519_SIG);
        assert_eq!(block_bytes(&block), want);
        let public = Verifier::new("k1", Bsd::Ed25519, &RFC8032_PUBLIC).unwrap();
        assert_eq!(public.verify(&Signed::Url(&url), &block, 0), Ok(()));
    }

    #[test]
    fn ed25519_rfc8032_test_1() {
        // The empty message of RFC 8032 §7.1 TEST 1: the primitive itself.
        let pair = Ed25519KeyPair::from_seed_unchecked(&RFC8032_SEED).unwrap();
        let sig = pair.sign(b"");
        assert_eq!(
            to_hex(sig.as_ref()),
            "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e06522490155\
             5fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
        );
    }

    /// Every single-bit flip of the signed octets or of the authenticator
    /// fails verification, for both BSDs.
    #[test]
    fn every_bit_flip_fails() {
        for (bsd, key) in [
            (Bsd::HmacSha256, SECRET.to_vec()),
            (Bsd::Ed25519, RFC8032_SEED.to_vec()),
        ] {
            let signer = Signer::new("k1", bsd, &key).unwrap();
            let v = signer.verifier();
            let good = signer.sign_octets_for_test(&URL_SIGNED);
            assert!(v.check_octets_for_test(&URL_SIGNED, &good));
            for bit in 0..URL_SIGNED.len() * 8 {
                let mut m = URL_SIGNED;
                m[bit / 8] ^= 1 << (bit % 8);
                assert!(
                    !v.check_octets_for_test(&m, &good),
                    "{bsd:?}: message bit {bit}"
                );
            }
            for bit in 0..good.len() * 8 {
                let mut a = good.clone();
                a[bit / 8] ^= 1 << (bit % 8);
                assert!(
                    !v.check_octets_for_test(&URL_SIGNED, &a),
                    "{bsd:?}: authenticator bit {bit}"
                );
            }
        }
    }

    impl Signer {
        fn sign_octets_for_test(&self, octets: &[u8]) -> Vec<u8> {
            self.authenticator(octets)
        }
    }

    impl Verifier {
        fn check_octets_for_test(&self, octets: &[u8], auth: &[u8]) -> bool {
            match &self.key {
                VerifyingKey::Hmac(secret) => {
                    <[u8; AUTH_TAG_LEN]>::try_from(auth).is_ok_and(|tag| {
                        AuthTag::sign(0, secret, &[octets]).ct_eq(&AuthTag { key_id: 0, tag })
                    })
                }
                VerifyingKey::Ed25519(pk) => UnparsedPublicKey::new(&signature::ED25519, pk)
                    .verify(octets, auth)
                    .is_ok(),
            }
        }
    }

    /// A signed SrvReg (URL block and attribute block, both BSDs): flipping
    /// any bit the RFC 2608 §9.2.1 octets cover, or of a block, makes the
    /// message fail to parse or to verify; only uncovered fields (header,
    /// lifetime, service type, scopes) can change and still verify.
    #[test]
    fn signed_srv_reg_bit_flips() {
        for (bsd, key) in [
            (Bsd::HmacSha256, SECRET.to_vec()),
            (Bsd::Ed25519, RFC8032_SEED.to_vec()),
        ] {
            let signer = Signer::new("k1", bsd, &key).unwrap();
            let v = signer.verifier();
            let url = s("service:x://a");
            let attrs = AttrList::parse("(a=1),(b=xy)").unwrap();
            let mut entry = UrlEntry::new(300, url.clone());
            entry
                .auths
                .push(signer.sign(&Signed::Url(&url), TS))
                .unwrap();
            let reg = SrvReg {
                entry,
                service_type: ServiceType::parse("service:x").unwrap(),
                scopes: ScopeList::parse("s").unwrap(),
                attr_auths: List::new(vec![signer.sign(&Signed::Attrs(&attrs), TS)]).unwrap(),
                attrs,
            };
            let mut h = Header::new(7, LangTag::en());
            h.flags.fresh = true;
            let bytes = Message::new(h, Body::SrvReg(reg), vec![])
                .unwrap()
                .to_bytes();
            let verifies = |b: &[u8]| -> bool {
                let Ok(m) = Message::parse(b) else {
                    return false;
                };
                let Body::SrvReg(r) = m.body() else {
                    return false;
                };
                r.entry.auths.len() == 1
                    && r.attr_auths.len() == 1
                    && v.verify(&Signed::Url(&r.entry.url), &r.entry.auths[0], 0)
                        .is_ok()
                    && v.verify(&Signed::Attrs(&r.attrs), &r.attr_auths[0], 0)
                        .is_ok()
            };
            assert!(verifies(&bytes));
            // Layout: header 16 (lang "en"), reserved 1, lifetime 2, then
            // the URL (2 + 13), # URL auths, the URL block, service type
            // (2 + 9), scopes (2 + 1), attr-list, # attr auths, attr block.
            let url_at = 16 + 3;
            let block_len = 12 + if bsd == Bsd::HmacSha256 { 16 } else { 64 };
            let url_block = url_at + 15 + 1;
            let stype = url_block + block_len;
            let attrs_at = stype + 11 + 3;
            let mut uncovered: Vec<usize> = (0..url_at).collect(); // header, reserved, lifetime
            uncovered.extend(stype..attrs_at); // service type, scopes
            let mut passed = Vec::new();
            for bit in 0..bytes.len() * 8 {
                let mut b = bytes.clone();
                b[bit / 8] ^= 1 << (bit % 8);
                if verifies(&b) {
                    passed.push(bit / 8);
                }
            }
            passed.dedup();
            for at in &passed {
                assert!(
                    uncovered.contains(at),
                    "{bsd:?}: flipping octet {at} still verifies"
                );
            }
            // The lifetime is one of them (RFC 2608 does not sign it).
            assert!(passed.contains(&17) && passed.contains(&18), "{passed:?}");
        }
    }

    #[test]
    fn refusals() {
        let url = s("service:x://a");
        let signer = Signer::new("k1", Bsd::HmacSha256, SECRET).unwrap();
        let block = signer.sign(&Signed::Url(&url), TS);
        let v = signer.verifier();
        assert_eq!(
            v.verify(&Signed::Url(&url), &block, TS),
            Err(VerifyError::Expired)
        );
        let other = Verifier::new("k2", Bsd::HmacSha256, SECRET).unwrap();
        assert_eq!(
            other.verify(&Signed::Url(&url), &block, 0),
            Err(VerifyError::Spi)
        );
        let ed = Signer::new("k1", Bsd::Ed25519, &RFC8032_SEED)
            .unwrap()
            .verifier();
        assert_eq!(
            ed.verify(&Signed::Url(&url), &block, 0),
            Err(VerifyError::Bsd)
        );
        let wrong = Verifier::new("k1", Bsd::HmacSha256, b"fedcba9876543210").unwrap();
        assert_eq!(
            wrong.verify(&Signed::Url(&url), &block, 0),
            Err(VerifyError::Authenticator)
        );
        let other_url = s("service:x://b");
        assert_eq!(
            v.verify(&Signed::Url(&other_url), &block, 0),
            Err(VerifyError::Authenticator)
        );
        // A truncated authenticator.
        let short =
            AuthBlock::new(Bsd::HmacSha256, TS, s("k1"), block.data()[..15].to_vec()).unwrap();
        assert_eq!(
            v.verify(&Signed::Url(&url), &short, 0),
            Err(VerifyError::Authenticator)
        );
    }

    #[test]
    fn keys_are_checked() {
        assert_eq!(
            Signer::new("k1", Bsd::HmacSha256, b"short").unwrap_err(),
            KeyError::HmacTooShort(5)
        );
        assert_eq!(
            Signer::new("k1", Bsd::DsaSha1, SECRET).unwrap_err(),
            KeyError::Bsd(Bsd::DsaSha1)
        );
        assert_eq!(
            Signer::new("k1", Bsd::Ed25519, &[1; 31]).unwrap_err(),
            KeyError::Ed25519Private
        );
        assert_eq!(
            Verifier::new("k1", Bsd::Ed25519, &[1; 33]).unwrap_err(),
            KeyError::Ed25519Public(33)
        );
        assert!(matches!(
            Verifier::new("a,b", Bsd::HmacSha256, SECRET),
            Err(KeyError::Spi(_))
        ));
        assert!(matches!(
            Verifier::new("", Bsd::HmacSha256, SECRET),
            Err(KeyError::Spi(_))
        ));
        // A PKCS#8 document works as well as a seed.
        let rng = ring::rand::SystemRandom::new();
        let doc = Ed25519KeyPair::generate_pkcs8(&rng).unwrap();
        assert!(Signer::new("k1", Bsd::Ed25519, doc.as_ref()).is_ok());
        assert_eq!(ed25519_public(&RFC8032_SEED), Ok(RFC8032_PUBLIC));
        assert_ne!(random_key(), random_key());
        assert_eq!(bsd_from_name("HMAC-SHA256"), Some(Bsd::HmacSha256));
        assert_eq!(bsd_from_name("ed25519"), Some(Bsd::Ed25519));
        assert_eq!(bsd_from_name("dsa"), None);
        assert_eq!(spi_list("a,b").collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(spi_list("").count(), 0);
        let dbg = format!("{:?}", Signer::new("k1", Bsd::HmacSha256, SECRET).unwrap());
        assert!(!dbg.contains("0123"), "{dbg}");
    }

    #[test]
    fn key_text() {
        assert_eq!(key_from_text("hex:00FFa5"), Ok(vec![0, 0xff, 0xa5]));
        assert_eq!(key_from_text("hex:0"), Err(KeyTextError::Hex));
        assert_eq!(key_from_text("hex:zz"), Err(KeyTextError::Hex));
        assert_eq!(key_from_text("hex:"), Err(KeyTextError::Empty));
        assert_eq!(key_from_text("base64:AAEC"), Ok(vec![0, 1, 2]));
        assert_eq!(key_from_text("base64:AAE="), Ok(vec![0, 1]));
        assert_eq!(key_from_text("base64:AAE"), Ok(vec![0, 1]));
        assert_eq!(key_from_text("base64:AAF="), Err(KeyTextError::Base64));
        assert_eq!(key_from_text("base64:A"), Err(KeyTextError::Base64));
        assert_eq!(key_from_text("base64:A*=="), Err(KeyTextError::Base64));
        assert_eq!(key_from_text("00ff"), Err(KeyTextError::Prefix));
        assert!(matches!(
            key_from_text("file:/nonexistent/svcroute-key"),
            Err(KeyTextError::File(e)) if e.contains("/nonexistent/svcroute-key")
        ));
        for n in 0..40 {
            let b: Vec<u8> = (0..n).map(|i| (i * 37 + 11) as u8).collect();
            assert_eq!(decode_base64(&to_base64(&b)), Some(b.clone()), "{n}");
            assert_eq!(decode_hex(&to_hex(&b)), Some(b));
        }
        assert_eq!(to_base64(b"foobar"), "Zm9vYmFy");
        assert_eq!(to_base64(b"fo"), "Zm8=");
        // Files: raw octets, or key text inside.
        let dir = std::env::temp_dir().join(format!("svcroute-keytext-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let raw = dir.join("raw");
        std::fs::write(&raw, [1, 2, 3]).unwrap();
        assert_eq!(
            key_from_text(&format!("file:{}", raw.display())),
            Ok(vec![1, 2, 3])
        );
        let text = dir.join("text");
        std::fs::write(&text, "hex:0a0b\n").unwrap();
        assert_eq!(
            key_from_text(&format!("file:{}", text.display())),
            Ok(vec![10, 11])
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
