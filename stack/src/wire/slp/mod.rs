//! SLPv2 (RFC 2608) with mSLP's additions (RFC 3528): the messages an MDA,
//! SA and UA exchange over UDP and TCP port 427 (SPEC §4).
//!
//! SLP is length-prefixed and string-heavy, so this module uses a cursor
//! codec (STYLE.md 2) rather than smoltcp-style views: a
//! [`codec::Reader`] that never reads past its buffer and rejects trailing
//! bytes, and infallible encoding into a `Vec<u8>`. Everything that would
//! not encode (a string over 65535 octets, a list over its count field, a
//! message over 2^24 − 1 octets) is refused when the value is constructed.
//!
//! ```text
//!   bytes ── Message::parse ──► Message { Header, Body, [Extension] }
//!                                  │        │        └─ ext: MeshFwd 0x0006, unknown kept
//!                                  │        └─ msg: SrvRqst … SAAdvert, AntiEtrpRqst
//!                                  │             ├─ url: URL entries, auth blocks
//!                                  │             │    └─ auth: signed octets, HMAC-SHA256 / Ed25519
//!                                  │             ├─ scope: scope lists, service types
//!                                  │             ├─ attr: attribute and tag lists
//!                                  │             └─ filter: predicates (LDAPv3 filters)
//!                                  └─ header: flags, XID, language tag
//!   Err(ParseError) ── ErrorCode::from ──► the code a DA answers with
//! ```
//!
//! Parsing is strict about structure (lengths, counts, extension chains,
//! the string grammars of RFC 2608 §5, §6.4, §9.4 and RFC 2254) and keeps
//! every string as sent, so a parsed message re-emits octet for octet except
//! where RFC 2608 lets a sender be sloppy: the reserved octet of URL entries
//! and error replies cut short after the error code (§7) are emitted in
//! canonical form. See `docs/wire/slp.md`.
//!
//! A role answering a message that failed to parse gets the XID and
//! language from [`Header::peek`] and the code from
//! [`ParseError::error_code`].

pub mod attr;
pub mod auth;
pub mod codec;
mod error;
pub mod ext;
pub mod filter;
pub mod header;
pub mod msg;
pub mod scope;
mod text;
pub mod url;
pub mod v1;

pub use attr::{AttrList, AttrValue, Attribute, TagList};
pub use auth::{Signed, Signer, Verifier};
pub use codec::SlpString;
pub use error::{ErrorCode, ParseError, Registration, Syntax};
pub use ext::{AcceptId, Extension, FwdId, MeshFwd, UnknownExt};
pub use filter::{Filter, Predicate};
pub use header::{frame_len, Flags, FunctionId, Header, LangTag};
pub use msg::{
    AntiEntropyType, AntiEtrpRqst, AttrRply, AttrRqst, Body, DaAdvert, Message, SaAdvert, SrvAck,
    SrvDeReg, SrvReg, SrvRply, SrvRqst, SrvTypeRply, SrvTypeRqst,
};
pub use scope::{NamingAuthority, Scope, ScopeList, ServiceType, ServiceTypeList};
pub use text::fold;
pub use url::{AuthBlock, AuthBlocks, Bsd, UrlEntry};

/// The SLP port, UDP and TCP (RFC 2608 §6.1).
pub const PORT: u16 = 427;

/// The administratively scoped IPv4 group SLP requests go to (RFC 2608 §6.1).
pub const MCAST_V4: [u8; 4] = [239, 255, 255, 253];

/// Largest UDP payload SLP sends by default (RFC 2608 §6.1).
pub const MAX_DATAGRAM: usize = 1400;

#[cfg(test)]
mod test {
    use proptest::prelude::*;

    use super::codec::List;
    use super::*;

    fn s(v: &str) -> SlpString {
        SlpString::new(v).unwrap()
    }

    fn header(xid: u16) -> Header {
        Header::new(xid, LangTag::en())
    }

    fn msg(header: Header, body: Body) -> Message {
        Message::new(header, body, Vec::new()).unwrap()
    }

    /// Parses `bytes` to `want`, and emits `want` (after 0xa5 filler) back to `bytes`.
    #[track_caller]
    fn golden(bytes: &[u8], want: &Message) {
        assert_eq!(Message::parse(bytes).as_ref(), Ok(want));
        let mut out = vec![0xa5; 3];
        want.emit(&mut out);
        assert_eq!(&out[..3], [0xa5; 3]);
        assert_eq!(&out[3..], bytes);
        assert_eq!(want.buffer_len(), bytes.len());
        assert_eq!(frame_len(bytes), Some(bytes.len()));
        // Cut short anywhere: an error, never a panic.
        for n in 0..bytes.len() {
            assert!(Message::parse(&bytes[..n]).is_err(), "prefix of {n}");
        }
        // One more octet: the Length field disagrees.
        let mut long = bytes.to_vec();
        long.push(0);
        assert!(matches!(
            Message::parse(&long),
            Err(ParseError::Length { .. })
        ));
        // One more octet that the Length field covers: trailing bytes.
        long[4] += 1;
        if bytes[4] < 0xff && (bytes[7], bytes[8], bytes[9]) == (0, 0, 0) {
            assert_eq!(Message::parse(&long), Err(ParseError::TrailingBytes));
        }
    }

    const DA_URL: &[u8] = b"service:directory-agent://10.0.0.1";
    const LPR_URL: &[u8] = b"service:printer:lpr://h";

    fn srv_rqst() -> Message {
        let mut h = header(0x1234);
        h.flags.mcast = true;
        msg(
            h,
            Body::SrvRqst(SrvRqst {
                pr_list: SlpString::default(),
                service_type: ServiceType::parse("service:printer").unwrap(),
                scopes: ScopeList::default_scope(),
                predicate: Predicate::new("(x=1)").unwrap(),
                spi: SlpString::default(),
            }),
        )
    }

    #[test]
    fn golden_srv_rqst() {
        // RFC 2608 §8 header, §8.1 body.
        let bytes = [
            &[0x02, 0x01][..],   // version 2, function SrvRqst
            &[0x00, 0x00, 0x35], // length 53
            &[0x20, 0x00],       // flags: REQUEST MCAST
            &[0x00, 0x00, 0x00], // next extension offset: none
            &[0x12, 0x34],       // XID
            &[0x00, 0x02],
            b"en",         // language tag
            &[0x00, 0x00], // <PRList>: empty
            &[0x00, 0x0f],
            b"service:printer",
            &[0x00, 0x07],
            b"DEFAULT", // <scope-list>
            &[0x00, 0x05],
            b"(x=1)",      // <predicate>
            &[0x00, 0x00], // <SLP SPI>: none
        ]
        .concat();
        golden(&bytes, &srv_rqst());
        let m = Message::parse(&bytes).unwrap();
        let Body::SrvRqst(r) = m.body() else {
            panic!("not a SrvRqst")
        };
        assert!(r.predicate.matches(&AttrList::parse("(x=1)").unwrap()));
        assert!(m.header().flags.mcast);
    }

    fn srv_rply() -> Message {
        let entry = UrlEntry::new(3600, SlpString::new("service:printer:lpr://h").unwrap());
        msg(
            header(0x1234),
            Body::SrvRply(SrvRply {
                error: ErrorCode::Ok,
                entries: List::new(vec![entry]).unwrap(),
            }),
        )
    }

    #[test]
    fn golden_srv_rply() {
        // RFC 2608 §8.2 with one §4.3 URL entry.
        let bytes = [
            &[0x02, 0x02, 0x00, 0x00, 0x31][..], // SrvRply, length 49
            &[0x00, 0x00, 0x00, 0x00, 0x00],     // flags, next extension offset
            &[0x12, 0x34, 0x00, 0x02],
            b"en",         // XID, language tag
            &[0x00, 0x00], // error: none
            &[0x00, 0x01], // one URL entry:
            &[0x00],       //   reserved
            &[0x0e, 0x10], //   lifetime 3600
            &[0x00, 0x17],
            LPR_URL, //   URL
            &[0x00], //   no auth blocks
        ]
        .concat();
        golden(&bytes, &srv_rply());
    }

    fn srv_reg() -> Message {
        let mut h = header(0x0001);
        h.flags.fresh = true;
        msg(
            h,
            Body::SrvReg(SrvReg {
                entry: UrlEntry::new(0xffff, SlpString::new("service:printer:lpr://h").unwrap()),
                service_type: ServiceType::parse("service:printer:lpr").unwrap(),
                scopes: ScopeList::default_scope(),
                attrs: AttrList::parse("(q=3),x-ok").unwrap(),
                attr_auths: List::default(),
            }),
        )
    }

    #[test]
    fn golden_srv_reg() {
        // RFC 2608 §8.3.
        let bytes = [
            &[0x02, 0x03, 0x00, 0x00, 0x58][..], // SrvReg, length 88
            &[0x40, 0x00],                       // flags: FRESH
            &[0x00, 0x00, 0x00],                 // no extensions
            &[0x00, 0x01, 0x00, 0x02],
            b"en",               // XID 1, "en"
            &[0x00, 0xff, 0xff], // URL entry: reserved, lifetime 65535
            &[0x00, 0x17],
            LPR_URL,
            &[0x00], //   URL, no auths
            &[0x00, 0x13],
            b"service:printer:lpr",
            &[0x00, 0x07],
            b"DEFAULT",
            &[0x00, 0x0a],
            b"(q=3),x-ok", // <attr-list>
            &[0x00],       // no attribute auths
        ]
        .concat();
        golden(&bytes, &srv_reg());
    }

    #[test]
    fn golden_srv_ack() {
        // RFC 2608 §8.4.
        let bytes = [
            &[0x02, 0x05, 0x00, 0x00, 0x12][..], // SrvAck, length 18
            &[0x00, 0x00, 0x00, 0x00, 0x00],
            &[0x00, 0x01, 0x00, 0x02],
            b"en",
            &[0x00, 0x0d], // INVALID_UPDATE
        ]
        .concat();
        let want = msg(
            header(1),
            Body::SrvAck(SrvAck {
                error: ErrorCode::InvalidUpdate,
            }),
        );
        golden(&bytes, &want);
    }

    fn da_advert() -> Message {
        let mesh = Attribute::keyword(attr::MESH_ENHANCED).unwrap();
        msg(
            header(0),
            Body::DaAdvert(DaAdvert {
                error: ErrorCode::Ok,
                boot_timestamp: 0x5f5e_1000,
                url: SlpString::new("service:directory-agent://10.0.0.1").unwrap(),
                scopes: ScopeList::default_scope(),
                attrs: AttrList::new(vec![mesh]).unwrap(),
                spi_list: SlpString::default(),
                auths: List::default(),
            }),
        )
    }

    #[test]
    fn golden_da_advert() {
        // RFC 2608 §8.5, with RFC 3528's `mesh-enhanced` keyword.
        let bytes = [
            &[0x02, 0x08, 0x00, 0x00, 0x55][..], // DAAdvert, length 85
            &[0x00, 0x00, 0x00, 0x00, 0x00],
            &[0x00, 0x00, 0x00, 0x02],
            b"en",                     // XID 0: unsolicited
            &[0x00, 0x00],             // error: none
            &[0x5f, 0x5e, 0x10, 0x00], // stateless boot timestamp
            &[0x00, 0x22],
            DA_URL,
            &[0x00, 0x07],
            b"DEFAULT",
            &[0x00, 0x0d],
            b"mesh-enhanced", // <attr-list>
            &[0x00, 0x00],    // <SLP SPI List>: empty
            &[0x00],          // no auth blocks
        ]
        .concat();
        golden(&bytes, &da_advert());
        let m = Message::parse(&bytes).unwrap();
        let Body::DaAdvert(da) = m.body() else {
            panic!("not a DAAdvert")
        };
        assert!(da.attrs.is_mesh_enhanced());
    }

    fn attr_rqst() -> Message {
        msg(
            header(0x0203),
            Body::AttrRqst(AttrRqst {
                pr_list: SlpString::default(),
                url: SlpString::new("service:printer:lpr://h").unwrap(),
                scopes: ScopeList::default_scope(),
                tags: TagList::parse("q,x-*").unwrap(),
                spi: SlpString::default(),
            }),
        )
    }

    #[test]
    fn golden_attr_rqst() {
        // RFC 2608 §10.3.
        let bytes = [
            &[0x02, 0x06, 0x00, 0x00, 0x3d][..], // AttrRqst, length 61
            &[0x00, 0x00, 0x00, 0x00, 0x00],
            &[0x02, 0x03, 0x00, 0x02],
            b"en",
            &[0x00, 0x00], // <PRList>
            &[0x00, 0x17],
            LPR_URL, // URL
            &[0x00, 0x07],
            b"DEFAULT",
            &[0x00, 0x05],
            b"q,x-*",      // <tag-list>
            &[0x00, 0x00], // <SLP SPI>
        ]
        .concat();
        golden(&bytes, &attr_rqst());
    }

    fn anti_etrp() -> Message {
        let id = AcceptId {
            timestamp: 0x1112_1314_1516_1718,
            da_url: SlpString::new("service:directory-agent://10.0.0.1").unwrap(),
        };
        msg(
            header(9),
            Body::AntiEtrpRqst(AntiEtrpRqst {
                kind: AntiEntropyType::Complete,
                accept_ids: List::new(vec![id]).unwrap(),
            }),
        )
    }

    #[test]
    fn golden_anti_etrp_rqst() {
        // RFC 3528 §4.6 Figure 8, with one §4.1 Figure 6 accept ID entry.
        let bytes = [
            &[0x02, 0x0c, 0x00, 0x00, 0x40][..], // AntiEtrpRqst (12), length 64
            &[0x00, 0x00, 0x00, 0x00, 0x00],
            &[0x00, 0x09, 0x00, 0x02],
            b"en",
            &[0x00, 0x02], // anti-entropy type: complete
            &[0x00, 0x01], // one accept ID entry:
            &[0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18], // accept timestamp
            &[0x00, 0x22],
            DA_URL, //   accept DA URL
        ]
        .concat();
        golden(&bytes, &anti_etrp());
    }

    fn dereg_with_mesh_fwd() -> Message {
        let fwd = MeshFwd {
            fwd: FwdId::RqstFwd,
            version: 0x42,
            accept: AcceptId::default(),
        };
        Message::new(
            header(5),
            Body::SrvDeReg(SrvDeReg {
                scopes: ScopeList::default_scope(),
                entry: UrlEntry::new(0, SlpString::new("service:x://h").unwrap()),
                tags: TagList::default(),
            }),
            vec![Extension::MeshFwd(fwd)],
        )
        .unwrap()
    }

    #[test]
    fn golden_srv_dereg_with_mesh_fwd() {
        // RFC 2608 §10.6 and §9.1; RFC 3528 §4.3 Figure 7 (RqstFwd from an MSA).
        let bytes = [
            &[0x02, 0x04, 0x00, 0x00, 0x46][..], // SrvDeReg, length 70
            &[0x00, 0x00],                       // flags
            &[0x00, 0x00, 0x2e],                 // first extension at 46
            &[0x00, 0x05, 0x00, 0x02],
            b"en",
            &[0x00, 0x07],
            b"DEFAULT",
            &[0x00, 0x00, 0x00, 0x00, 0x0d],
            b"service:x://h",
            &[0x00],                      // URL entry
            &[0x00, 0x00],                // <tag-list>: empty
            &[0x00, 0x06],                // extension MeshFwd
            &[0x00, 0x00, 0x00],          // last extension
            &[0x01],                      // Fwd-ID RqstFwd
            &[0, 0, 0, 0, 0, 0, 0, 0x42], // version timestamp
            &[0, 0, 0, 0, 0, 0, 0, 0],    // accept timestamp 0
            &[0x00, 0x00],                // accept DA URL: none yet
        ]
        .concat();
        golden(&bytes, &dereg_with_mesh_fwd());
        let m = Message::parse(&bytes).unwrap();
        assert_eq!(m.mesh_fwd().unwrap().fwd, FwdId::RqstFwd);
    }

    #[test]
    fn header_errors() {
        let good = srv_ack_bytes();
        let mut b = good.clone();
        b[0] = 1;
        assert_eq!(Message::parse(&b), Err(ParseError::Version(1)));
        assert_eq!(
            Message::parse(&b).unwrap_err().error_code(),
            ErrorCode::VerNotSupported
        );
        let mut b = good.clone();
        b[1] = 13;
        assert_eq!(Message::parse(&b), Err(ParseError::Function(13)));
        assert_eq!(
            Message::parse(&b).unwrap_err().error_code(),
            ErrorCode::MsgNotSupported
        );
        // The role can still answer: XID and language survive.
        let (f, h) = Header::peek(&b).unwrap();
        assert_eq!(
            (f, h.xid, h.lang.as_str()),
            (FunctionId::Unknown(13), 1, "en")
        );
        let mut b = good.clone();
        b[6] = 0x01;
        assert_eq!(Message::parse(&b), Err(ParseError::ReservedFlags(0x0001)));
        let mut b = good.clone();
        b[14] = b'1';
        assert_eq!(Message::parse(&b), Err(ParseError::LanguageTag));
        // Length field larger or smaller than the datagram.
        let mut b = good.clone();
        b[4] = 0x13;
        assert_eq!(
            Message::parse(&b),
            Err(ParseError::Length {
                declared: 0x13,
                actual: 0x12
            })
        );
        // Extension offset into the header, or past the end.
        let mut b = good.clone();
        b[9] = 0x05;
        assert_eq!(Message::parse(&b), Err(ParseError::ExtensionOffset));
        let mut b = good;
        b[9] = 0x10;
        assert_eq!(Message::parse(&b), Err(ParseError::ExtensionOffset));
    }

    fn srv_ack_bytes() -> Vec<u8> {
        msg(header(1), Body::SrvAck(SrvAck::default())).to_bytes()
    }

    #[test]
    fn srv_reg_validity() {
        // Empty language tag: INVALID_REGISTRATION for a SrvReg, PARSE_ERROR otherwise.
        let reg = srv_reg().to_bytes();
        let mut b = reg[..12].to_vec();
        b.extend_from_slice(&[0, 0]);
        b.extend_from_slice(&reg[16..]);
        b[4] -= 2;
        assert_eq!(
            Message::parse(&b),
            Err(ParseError::InvalidRegistration(Registration::NoLanguageTag))
        );
        b[1] = 0x01;
        assert_eq!(Message::parse(&b), Err(ParseError::LanguageTag));
        // Mixed value types.
        let Body::SrvReg(mut r) = srv_reg().body().clone() else {
            unreachable!()
        };
        r.attrs = AttrList::parse("(x=4,true)").unwrap();
        assert_eq!(
            Message::new(header(1), Body::SrvReg(r), vec![]),
            Err(crate::wire::Error::Malformed)
        );
        let mut b = srv_reg().to_bytes();
        let at = b.windows(10).position(|w| w == b"(q=3),x-ok").unwrap();
        b[at..at + 10].copy_from_slice(b"(x=4,true)");
        let e = Message::parse(&b).unwrap_err();
        assert_eq!(e, ParseError::InvalidRegistration(Registration::MixedTypes));
        assert_eq!(e.error_code(), ErrorCode::InvalidRegistration);
    }

    #[test]
    fn omitted_service_type_is_a_parse_error() {
        let mut b = Vec::new();
        b.extend_from_slice(&[0x02, 0x01, 0x00, 0x00, 0x1a, 0, 0, 0, 0, 0, 0, 7, 0, 2]);
        b.extend_from_slice(b"en");
        b.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(
            Message::parse(&b),
            Err(ParseError::Syntax(Syntax::ServiceType))
        );
        assert_eq!(
            Message::parse(&b).unwrap_err().error_code(),
            ErrorCode::ParseError
        );
    }

    #[test]
    fn short_error_replies() {
        // RFC 2608 §7: a reply may stop after a non-zero error code.
        for function in [2_u8, 7, 8, 10] {
            let mut b = vec![0x02, function, 0x00, 0x00, 0x12, 0, 0, 0, 0, 0, 0, 7, 0, 2];
            b.extend_from_slice(b"en");
            b.extend_from_slice(&[0x00, 0x04]); // SCOPE_NOT_SUPPORTED
            let m = Message::parse(&b).unwrap();
            assert_eq!(m.body().error(), Some(ErrorCode::ScopeNotSupported));
            // Emitted in full, which parses back the same.
            let full = m.to_bytes();
            assert!(full.len() > b.len());
            assert_eq!(Message::parse(&full), Ok(m));
            // Error 0 cut short is truncated.
            b[17] = 0;
            assert_eq!(Message::parse(&b), Err(ParseError::Truncated));
        }
    }

    #[test]
    fn unknown_extensions() {
        let m = Message::new(
            header(3),
            Body::SrvAck(SrvAck::default()),
            vec![
                Extension::Unknown(UnknownExt::new(0x8001, vec![1, 2, 3]).unwrap()),
                Extension::MeshFwd(MeshFwd {
                    fwd: FwdId::Fwded,
                    version: 1,
                    accept: AcceptId {
                        timestamp: 2,
                        da_url: s("service:directory-agent://10.0.0.2"),
                    },
                }),
            ],
        )
        .unwrap();
        let b = m.to_bytes();
        assert_eq!(&b[7..10], [0, 0, 0x12]); // after the 18-octet SrvAck
        assert_eq!(&b[0x12..0x17], [0x80, 0x01, 0, 0, 0x1a]);
        assert_eq!(Message::parse(&b), Ok(m));
        // A mandatory one we do not know.
        let mut b = srv_ack_bytes();
        b.extend_from_slice(&[0x40, 0x02, 0, 0, 0]);
        b[4] = 0x17;
        b[9] = 0x12;
        assert_eq!(
            Message::parse(&b),
            Err(ParseError::OptionNotUnderstood(0x4002))
        );
        assert_eq!(
            Message::parse(&b).unwrap_err().error_code(),
            ErrorCode::OptionNotUnderstood
        );
    }

    #[test]
    fn every_message_type_emits_and_parses() {
        let msgs = sample_messages();
        assert_eq!(msgs.len(), 13);
        for m in msgs {
            let b = m.to_bytes();
            assert_eq!(b[1], u8::from(m.function()));
            assert_eq!(Message::parse(&b).as_ref(), Ok(&m), "{:?}", m.function());
            for n in 0..b.len() {
                assert!(Message::parse(&b[..n]).is_err());
            }
        }
    }

    /// One message of each type (and one with extensions), for the tests here
    /// and the fuzz corpus.
    pub(crate) fn sample_messages() -> Vec<Message> {
        let auth = AuthBlock::new(Bsd::Ed25519, 0x6000_0000, s("mda-key"), vec![0x5a; 64]).unwrap();
        let auths = List::new(vec![auth]).unwrap();
        let scopes = ScopeList::parse("DEFAULT,lab").unwrap();
        vec![
            srv_rqst(),
            srv_rply(),
            srv_reg(),
            msg(
                header(4),
                Body::SrvDeReg(SrvDeReg {
                    scopes: scopes.clone(),
                    entry: UrlEntry {
                        lifetime: 0,
                        url: s("service:printer:lpr://h"),
                        auths: auths.clone(),
                    },
                    tags: TagList::parse("q").unwrap(),
                }),
            ),
            msg(header(5), Body::SrvAck(SrvAck::default())),
            attr_rqst(),
            msg(
                header(7),
                Body::AttrRply(AttrRply {
                    error: ErrorCode::Ok,
                    attrs: AttrList::parse(r"(q=3),(name=a\2cb),x-ok").unwrap(),
                    auths: auths.clone(),
                }),
            ),
            da_advert(),
            msg(
                header(9),
                Body::SrvTypeRqst(SrvTypeRqst {
                    pr_list: s("10.0.0.7"),
                    naming_authority: NamingAuthority::All,
                    scopes: scopes.clone(),
                }),
            ),
            msg(
                header(10),
                Body::SrvTypeRply(SrvTypeRply {
                    error: ErrorCode::Ok,
                    types: ServiceTypeList::parse("service:printer:lpr,service:x.one").unwrap(),
                }),
            ),
            msg(
                header(11),
                Body::SaAdvert(SaAdvert {
                    url: s("service:service-agent://10.0.0.9"),
                    scopes,
                    attrs: AttrList::parse("(service-type=printer)").unwrap(),
                    auths,
                }),
            ),
            anti_etrp(),
            dereg_with_mesh_fwd(),
        ]
    }

    mod strategy {
        use proptest::prelude::*;

        use super::super::attr::test::strategy as attr;
        use super::super::codec::List;
        use super::super::scope::test::strategy as scope;
        use super::super::url::test::strategy as url;
        use super::super::*;

        fn predicate() -> impl Strategy<Value = Predicate> {
            prop_oneof![
                Just(""),
                Just("(a=1)"),
                Just("(&(q<=3)(speed>=1000))"),
                Just("(!(x=*bob*))"),
            ]
            .prop_map(|p| Predicate::new(p).unwrap())
        }

        fn error() -> impl Strategy<Value = ErrorCode> {
            (0_u16..20).prop_map(ErrorCode::from)
        }

        fn accept_id() -> impl Strategy<Value = AcceptId> {
            (any::<u64>(), url::slp_string(40))
                .prop_map(|(timestamp, da_url)| AcceptId { timestamp, da_url })
        }

        fn body() -> impl Strategy<Value = Body> {
            let s = || url::slp_string(20);
            prop_oneof![
                (
                    s(),
                    scope::service_type(),
                    scope::scope_list(),
                    predicate(),
                    s()
                )
                    .prop_map(|(pr_list, service_type, scopes, predicate, spi)| {
                        Body::SrvRqst(SrvRqst {
                            pr_list,
                            service_type,
                            scopes,
                            predicate,
                            spi,
                        })
                    }),
                (error(), proptest::collection::vec(url::url_entry(), 0..3)).prop_map(
                    |(error, v)| Body::SrvRply(SrvRply {
                        error,
                        entries: List::new(v).unwrap()
                    })
                ),
                (
                    url::url_entry(),
                    scope::service_type(),
                    scope::scope_list(),
                    attr::attr_list(),
                    url::auths()
                )
                    .prop_filter("consistent types", |t| t.3.check_types().is_ok())
                    .prop_map(
                        |(entry, service_type, scopes, attrs, attr_auths)| {
                            Body::SrvReg(SrvReg {
                                entry,
                                service_type,
                                scopes,
                                attrs,
                                attr_auths,
                            })
                        }
                    ),
                (scope::scope_list(), url::url_entry(), attr::tag_list()).prop_map(
                    |(scopes, entry, tags)| Body::SrvDeReg(SrvDeReg {
                        scopes,
                        entry,
                        tags
                    })
                ),
                error().prop_map(|error| Body::SrvAck(SrvAck { error })),
                (s(), s(), scope::scope_list(), attr::tag_list(), s()).prop_map(
                    |(pr_list, url, scopes, tags, spi)| Body::AttrRqst(AttrRqst {
                        pr_list,
                        url,
                        scopes,
                        tags,
                        spi
                    })
                ),
                (error(), attr::attr_list(), url::auths()).prop_map(|(error, attrs, auths)| {
                    Body::AttrRply(AttrRply {
                        error,
                        attrs,
                        auths,
                    })
                }),
                (
                    error(),
                    any::<u32>(),
                    s(),
                    scope::scope_list(),
                    attr::attr_list(),
                    s(),
                    url::auths()
                )
                    .prop_map(
                        |(error, boot_timestamp, url, scopes, attrs, spi_list, auths)| {
                            Body::DaAdvert(DaAdvert {
                                error,
                                boot_timestamp,
                                url,
                                scopes,
                                attrs,
                                spi_list,
                                auths,
                            })
                        }
                    ),
                (s(), scope::naming_authority(), scope::scope_list()).prop_map(
                    |(pr_list, naming_authority, scopes)| Body::SrvTypeRqst(SrvTypeRqst {
                        pr_list,
                        naming_authority,
                        scopes
                    })
                ),
                (error(), scope::service_types())
                    .prop_map(|(error, types)| Body::SrvTypeRply(SrvTypeRply { error, types })),
                (s(), scope::scope_list(), attr::attr_list(), url::auths()).prop_map(
                    |(url, scopes, attrs, auths)| Body::SaAdvert(SaAdvert {
                        url,
                        scopes,
                        attrs,
                        auths
                    })
                ),
                (any::<u16>(), proptest::collection::vec(accept_id(), 0..3)).prop_map(
                    |(kind, v)| Body::AntiEtrpRqst(AntiEtrpRqst {
                        kind: AntiEntropyType::from(kind),
                        accept_ids: List::new(v).unwrap()
                    })
                ),
            ]
        }

        fn extension() -> impl Strategy<Value = Extension> {
            prop_oneof![
                (any::<u8>(), any::<u64>(), accept_id()).prop_map(|(fwd, version, accept)| {
                    Extension::MeshFwd(MeshFwd {
                        fwd: FwdId::from(fwd),
                        version,
                        accept,
                    })
                }),
                (
                    prop_oneof![0_u16..6, 7_u16..0x4000, 0x8000_u16..=0xffff],
                    proptest::collection::vec(any::<u8>(), 0..8)
                )
                    .prop_map(|(id, data)| Extension::Unknown(UnknownExt::new(id, data).unwrap())),
            ]
        }

        fn header() -> impl Strategy<Value = Header> {
            (
                any::<(bool, bool, bool)>(),
                any::<u16>(),
                "[a-zA-Z]{1,8}(-[a-zA-Z0-9]{1,8}){0,2}",
            )
                .prop_map(|((overflow, fresh, mcast), xid, lang)| Header {
                    flags: Flags {
                        overflow,
                        fresh,
                        mcast,
                    },
                    xid,
                    lang: LangTag::new(&lang).unwrap(),
                })
        }

        pub(super) fn message() -> impl Strategy<Value = Message> {
            (
                header(),
                body(),
                proptest::collection::vec(extension(), 0..3),
            )
                .prop_map(|(h, b, e)| Message::new(h, b, e).unwrap())
        }
    }

    proptest! {
        #[test]
        fn roundtrip(m in strategy::message()) {
            let b = m.to_bytes();
            prop_assert_eq!(b.len(), m.buffer_len());
            prop_assert_eq!(frame_len(&b), Some(b.len()));
            prop_assert_eq!(Message::parse(&b), Ok(m));
        }

        #[test]
        fn fuzz_body_on_mutations(m in strategy::message(), at in any::<usize>(), v in any::<u8>()) {
            let mut b = m.to_bytes();
            let i = at % b.len();
            b[i] = v;
            crate::fuzz::slp(&b);
            b.truncate(i);
            crate::fuzz::slp(&b);
        }
    }

    /// The fuzz body over a deterministic corpus: random octets, and seeds
    /// with octets flipped, cut, or inserted.
    #[test]
    fn fuzz_corpus() {
        let mut x = 0x5eed_5150_u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let seeds: Vec<Vec<u8>> = sample_messages().iter().map(Message::to_bytes).collect();
        let mut parsed = 0;
        for i in 0..4000 {
            let mut b = seeds[i % seeds.len()].clone();
            match next() % 4 {
                0 => {
                    let n = (next() % 64) as usize;
                    b = (0..n).map(|_| next() as u8).collect();
                }
                1 => {
                    let j = (next() as usize) % b.len();
                    b[j] = next() as u8;
                }
                2 => b.truncate((next() as usize) % b.len()),
                _ => {
                    let j = (next() as usize) % b.len();
                    b.insert(j, next() as u8);
                }
            }
            crate::fuzz::slp(&b);
            parsed += usize::from(Message::parse(&b).is_ok());
        }
        assert!(parsed > 100, "only {parsed} inputs parsed");
        for seed in &seeds {
            crate::fuzz::slp(seed);
        }

        // Attribute lists and filters: the tables' strings, then mutations.
        let filters = filter::test::CASES;
        for i in 0..4000 {
            let (f, a, _) = filters[i % filters.len()];
            let mut input = vec![f.len() as u8];
            input.extend_from_slice(f.as_bytes());
            input.extend_from_slice(a.as_bytes());
            if i >= filters.len() {
                let j = 1 + (next() as usize) % (input.len() - 1);
                match next() % 3 {
                    0 => input[j] = b"()&|!=*<>~\\,ab1 "[(next() % 16) as usize],
                    1 => input.truncate(j),
                    _ => input.insert(j, next() as u8),
                }
            }
            crate::fuzz::slp_filter(&input);
            crate::fuzz::slp_attr(&input[1..]);
            crate::fuzz::slp_attr(a.as_bytes());
        }
    }
}
