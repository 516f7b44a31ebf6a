//! SLPv1 (RFC 2165), only as far as an SLPv2 agent needs to refuse it.
//!
//! RFC 2608 §3 asks an SLPv2 DA to answer SLPv1 requests with SLPv1
//! replies. We do not serve SLPv1; we answer its requests with the SLPv1
//! reply of the same request, carrying `VER_NOT_SUPPORTED` (9, the same
//! number in both versions) and nothing else.
//!
//! ```text
//!    0                   1                   2                   3
//!    0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//!   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//!   |    Version    |  Function-ID  |            Length             |
//!   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//!   |O|M|U|A|F| rsvd|    Dialect    |        Language Code          |
//!   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//!   |      Character Encoding       |          XID                  |
//!   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! Replies (RFC 2165 §5-§9): SrvRply and SrvTypeRply are an error code and
//! a count, AttrRply an error code and an attribute-list length, SrvAck an
//! error code.

use super::codec::{put_u16, Reader};
use super::ErrorCode;

/// SLPv1's version number.
pub const VERSION: u8 = 1;
/// Octets of the SLPv1 header.
pub const HEADER_LEN: usize = 12;

mod field {
    use core::ops::Range;

    pub(super) const VERSION: usize = 0;
    pub(super) const FUNCTION: usize = 1;
    pub(super) const LENGTH: Range<usize> = 2..4;
    pub(super) const LANG: Range<usize> = 6..8;
    pub(super) const ENCODING: Range<usize> = 8..10;
    pub(super) const XID: Range<usize> = 10..12;
}

/// The SLPv1 reply to `request` with error `VER_NOT_SUPPORTED`, or `None`
/// if `request` is not a whole SLPv1 request (a reply, an advert, a bad
/// length): those get no answer.
pub fn ver_not_supported(request: &[u8]) -> Option<Vec<u8>> {
    let mut r = Reader::new(request);
    let head = r.take(HEADER_LEN).ok()?;
    if head[field::VERSION] != VERSION {
        return None;
    }
    let len = u16::from_be_bytes([head[field::LENGTH.start], head[field::LENGTH.end - 1]]);
    if usize::from(len) != request.len() {
        return None;
    }
    // SrvRqst 1 → SrvRply 2, SrvReg 3 and SrvDeReg 4 → SrvAck 5, AttrRqst
    // 6 → AttrRply 7, SrvTypeRqst 9 → SrvTypeRply 10; the rest are not
    // requests.
    let (function, trailer) = match head[field::FUNCTION] {
        1 => (2, 2),
        3 | 4 => (5, 0),
        6 => (7, 2),
        9 => (10, 2),
        _ => return None,
    };
    let code = u16::from(ErrorCode::VerNotSupported);
    let total = HEADER_LEN + 2 + trailer;
    let mut out = Vec::with_capacity(total);
    out.push(VERSION);
    out.push(function);
    // NOTE: at most 16 octets, so the cast cannot truncate.
    put_u16(&mut out, total as u16);
    out.push(0); // flags
    out.push(0); // dialect
    out.extend_from_slice(&head[field::LANG]);
    out.extend_from_slice(&head[field::ENCODING]);
    out.extend_from_slice(&head[field::XID]);
    put_u16(&mut out, code);
    out.resize(total, 0);
    Some(out)
}

#[cfg(test)]
mod test {
    use proptest::prelude::*;

    use super::*;

    /// An SLPv1 SrvRqst (RFC 2165 §6): language "en", UTF-8 (106), XID
    /// 0x1234, previous responders "", request "service:x//".
    static SRV_RQST: [u8; 27] = [
        0x01, 0x01, 0x00, 0x1b, // version 1, SrvRqst, length 27
        0x00, 0x00, b'e', b'n', // flags, dialect, language
        0x00, 0x6a, 0x12, 0x34, // UTF-8, XID
        0x00, 0x00, // previous responders
        0x00, 0x0b, b's', b'e', b'r', b'v', b'i', b'c', b'e', b':', b'x', b'/', b'/',
    ];

    #[test]
    fn srv_rqst_gets_a_v1_srv_rply_with_ver_not_supported() {
        let reply = ver_not_supported(&SRV_RQST).unwrap();
        assert_eq!(
            reply,
            [
                0x01, 0x02, 0x00, 0x10, // v1 SrvRply, length 16
                0x00, 0x00, b'e', b'n', // flags, dialect, language
                0x00, 0x6a, 0x12, 0x34, // encoding and XID echoed
                0x00, 0x09, // VER_NOT_SUPPORTED
                0x00, 0x00, // no URL entries
            ]
        );
    }

    #[test]
    fn each_request_gets_its_reply_kind() {
        for (f, rf, len) in [(1, 2, 16), (3, 5, 14), (4, 5, 14), (6, 7, 16), (9, 10, 16)] {
            let mut b = SRV_RQST;
            b[1] = f;
            let r = ver_not_supported(&b).unwrap();
            assert_eq!((r[1], r.len()), (rf, len), "function {f}");
            assert_eq!(usize::from(u16::from_be_bytes([r[2], r[3]])), r.len());
        }
    }

    #[test]
    fn replies_adverts_and_broken_lengths_get_nothing() {
        for f in [2, 5, 7, 8, 10, 11, 0xff] {
            let mut b = SRV_RQST;
            b[1] = f;
            assert_eq!(ver_not_supported(&b), None, "function {f}");
        }
        let mut b = SRV_RQST;
        b[3] = 0x1c;
        assert_eq!(ver_not_supported(&b), None, "length beyond the datagram");
        assert_eq!(ver_not_supported(&SRV_RQST[..11]), None, "short header");
        let mut b = SRV_RQST;
        b[0] = 2;
        assert_eq!(ver_not_supported(&b), None, "not version 1");
    }

    proptest! {
        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Some(r) = ver_not_supported(&bytes) {
                prop_assert_eq!(r[0], VERSION);
                prop_assert_eq!(&r[10..12], &bytes[10..12]);
            }
        }
    }
}
