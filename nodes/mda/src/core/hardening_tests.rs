//! What adversarial and interoperability testing found (issue 12), one
//! class per test: answers larger than the wire format, the language error,
//! registration validation, SLPv1, and TCP framing.

use smoltcp::time::Duration;
use svcroute_stack::wire::slp::{NamingAuthority, SrvTypeRqst};

use super::tests::*;
use super::*;

/// Send `m` on a fresh inbound connection; the one reply.
#[track_caller]
fn tcp_reply(d: &mut Mda, m: &Message) -> Message {
    let c = d.tcp_accepted(T0, SA).unwrap();
    d.tcp_data(T0, c, &m.to_bytes());
    let (_, tx) = drain(d);
    let [Transmit::Tcp { bytes, .. }] = tx.as_slice() else {
        panic!("{tx:?}")
    };
    Message::parse(bytes).unwrap()
}

fn type_reg(d: &mut Mda, url: &str, stype: &str, attrs: &str) -> ErrorCode {
    let m = with_body(reg(url, attrs), |b| {
        if let Body::SrvReg(r) = b {
            r.service_type = ServiceType::parse(stype).unwrap();
        }
    });
    ack(d, T0, &m)
}

#[test]
fn an_attr_rqst_by_type_beyond_65535_octets_is_cut_with_overflow() {
    let mut d = da();
    // 700 services, each with its own 100-octet attribute: 70 kB merged.
    let v = "v".repeat(96);
    for i in 0..700 {
        let url = format!("service:printer:lpr://h{i}");
        assert_eq!(
            ack(&mut d, T0, &reg(&url, &format!("(t{i:03}={v})"))),
            ErrorCode::Ok
        );
    }
    let m = tcp_reply(&mut d, &attr_rqst("service:printer:lpr", ""));
    assert!(m.header().flags.overflow, "cut, and says so");
    let Body::AttrRply(r) = m.body() else {
        panic!()
    };
    assert_eq!(r.error, ErrorCode::Ok);
    let n = r.attrs.attributes().len();
    assert!(
        n > 600 && n < 700,
        "{n} attributes: what fits 65,535 octets"
    );
    assert!(d.counters()["mda.reply_format_cut"] >= 1);
    // Over UDP: what fits the datagram, with OVERFLOW.
    let r = udp(&mut d, T0, &attr_rqst("service:printer:lpr", ""));
    assert!(r[0].header().flags.overflow);
    let Body::AttrRply(a) = r[0].body() else {
        panic!()
    };
    assert!(!a.attrs.is_empty());
}

#[test]
fn a_srv_type_rqst_beyond_65535_octets_is_cut_with_overflow() {
    let mut d = da();
    // 2,200 types of ~33 octets: 73 kB of types.
    for i in 0..2200 {
        let t = format!("service:type-number-{i:05}-padding");
        let url = format!("{t}://h");
        assert_eq!(type_reg(&mut d, &url, &t, ""), ErrorCode::Ok);
    }
    let ask = Message::new(
        Header::new(11, LangTag::en()),
        Body::SrvTypeRqst(SrvTypeRqst {
            pr_list: SlpString::default(),
            naming_authority: NamingAuthority::All,
            scopes: ScopeList::parse("x").unwrap(),
        }),
        vec![],
    )
    .unwrap();
    let m = tcp_reply(&mut d, &ask);
    assert!(m.header().flags.overflow);
    let Body::SrvTypeRply(r) = m.body() else {
        panic!()
    };
    let n = r.types.types().len();
    assert!(n > 1800 && n < 2200, "{n} types");
    let r = udp(&mut d, T0, &ask);
    assert!(r[0].header().flags.overflow);
}

#[test]
fn a_srv_rply_of_more_than_65535_urls_is_cut_with_overflow() {
    let mut d = Mda::new(
        Config {
            max_registrations: 70_000,
            ..cfg(1, "x,y")
        },
        T0,
        &[],
    );
    for i in 0..65_600 {
        d.handle_udp(
            T0,
            SA,
            &reg(&format!("service:printer:lpr://{i}"), "").to_bytes(),
            false,
        );
        drain(&mut d);
    }
    let m = tcp_reply(&mut d, &rqst("service:printer:lpr", "x", ""));
    assert!(m.header().flags.overflow);
    let Body::SrvRply(r) = m.body() else { panic!() };
    assert_eq!(r.entries.len(), 65_535);
    assert_eq!(d.counters()["mda.reply_format_cut"], 1);
}

#[test]
fn language_not_supported_only_when_the_type_has_no_data_in_that_language() {
    let mut d = da();
    assert_eq!(
        ack(&mut d, T0, &reg("service:printer:lpr://en", "(a=1)")),
        ErrorCode::Ok
    );
    let de = with_header(reg("service:printer:lpr://de", "(a=2)"), |h| {
        h.lang = LangTag::new("de").unwrap();
    });
    assert_eq!(ack(&mut d, T0, &de), ErrorCode::Ok);
    // Data in English, but no match: an empty answer, not an error.
    assert_eq!(
        urls(&mut d, T0, &rqst("service:printer", "x", "(a=3)")),
        (ErrorCode::Ok, vec![])
    );
    // No data in French at all: LANGUAGE_NOT_SUPPORTED (RFC 2608 §7).
    let fr = with_header(rqst("service:printer", "x", "(a=3)"), |h| {
        h.lang = LangTag::new("fr").unwrap();
    });
    assert_eq!(urls(&mut d, T0, &fr).0, ErrorCode::LanguageNotSupported);
}

#[test]
fn bad_registrations_are_refused_and_counted() {
    let mut d = da();
    assert_eq!(
        ack(&mut d, T0, &reg("", "")),
        ErrorCode::InvalidRegistration
    );
    assert_eq!(
        ack(&mut d, T0, &reg("nourl", "")),
        ErrorCode::InvalidRegistration
    );
    // A service: URL of another type than the SrvReg's.
    assert_eq!(
        type_reg(&mut d, "service:printer:lpr://p", "service:scanner", ""),
        ErrorCode::InvalidRegistration
    );
    // A generic URL may have any type (RFC 2608 §8.3).
    assert_eq!(
        type_reg(&mut d, "http://h/", "service:web", ""),
        ErrorCode::Ok
    );
    // A live registration keeps its type.
    assert_eq!(
        type_reg(&mut d, "http://h/", "service:other", ""),
        ErrorCode::InvalidRegistration
    );
    assert_eq!(
        ack(&mut d, T0, &dereg("", "")),
        ErrorCode::InvalidRegistration
    );
    assert_eq!(d.registration_count(), 1);
    let c = d.counters();
    for (k, n) in [
        ("drop.mda.reg_empty_url", 1),
        ("drop.mda.reg_url_no_scheme", 1),
        ("drop.mda.reg_type_mismatch", 1),
        ("drop.mda.reg_type_changed", 1),
        ("drop.mda.dereg_bad_url", 1),
    ] {
        assert_eq!(c.get(k), Some(&n), "{k}");
    }
    let r = urls(&mut d, T0, &rqst("service:web", "x", ""));
    assert_eq!(r, (ErrorCode::Ok, vec!["http://h/".to_owned()]));
}

/// An SLPv1 (RFC 2165) SrvRqst: language "en", UTF-8, XID 0x1234.
const V1_SRV_RQST: [u8; 27] = [
    0x01, 0x01, 0x00, 0x1b, 0x00, 0x00, b'e', b'n', 0x00, 0x6a, 0x12, 0x34, 0x00, 0x00, 0x00, 0x0b,
    b's', b'e', b'r', b'v', b'i', b'c', b'e', b':', b'x', b'/', b'/',
];

#[test]
fn slpv1_requests_get_a_v1_ver_not_supported() {
    let mut d = da();
    d.handle_udp(T0, SA, &V1_SRV_RQST, false);
    let (_, tx) = drain(&mut d);
    let [Transmit::Udp { bytes, to, .. }] = tx.as_slice() else {
        panic!("{tx:?}")
    };
    assert_eq!(*to, SA);
    assert_eq!((bytes[0], bytes[1]), (1, 2), "an SLPv1 SrvRply");
    assert_eq!(
        &bytes[10..14],
        &[0x12, 0x34, 0x00, 0x09],
        "XID, VER_NOT_SUPPORTED"
    );
    // Multicast: counted, not answered.
    d.handle_udp(T0, SA, &V1_SRV_RQST, true);
    assert!(drain(&mut d).1.is_empty());
    assert_eq!(d.counters()["drop.mda.slpv1"], 2);
}

#[test]
fn tcp_frames_are_assembled_and_bad_lengths_named() {
    let mut d = da();
    let q = rqst("service:printer", "x", "").to_bytes();
    // One request in three pieces, then two in one write.
    let c = d.tcp_accepted(T0, SA).unwrap();
    d.tcp_data(T0, c, &q[..3]);
    d.tcp_data(T0, c, &q[3..10]);
    assert!(drain(&mut d).1.is_empty());
    d.tcp_data(T0, c, &q[10..]);
    assert_eq!(drain(&mut d).1.len(), 1);
    d.tcp_data(T0, c, &[q.clone(), q.clone()].concat());
    assert_eq!(drain(&mut d).1.len(), 2);
    // Lengths 0 and 5 are shorter than a header: not "too big".
    for len in [0_u8, 5] {
        let c = d.tcp_accepted(T0, SA).unwrap();
        d.tcp_data(T0, c, &[2, 1, 0, 0, len, 0, 0]);
        let (ev, _) = drain(&mut d);
        assert!(ev.contains(&Event::Reset(c)), "length {len}: {ev:?}");
    }
    assert_eq!(d.counters()["drop.mda.tcp_frame_short"], 2);
    assert_eq!(d.counters().get("drop.mda.tcp_frame_too_big"), None);
    let c = d.tcp_accepted(T0, SA).unwrap();
    d.tcp_data(T0, c, &[2, 1, 0x10, 0, 0]);
    assert!(drain(&mut d).0.contains(&Event::Reset(c)));
    assert_eq!(d.counters()["drop.mda.tcp_frame_too_big"], 1);
}

#[test]
fn a_trickling_frame_does_not_hold_its_slot() {
    let mut d = da();
    let c = d.tcp_accepted(T0, SA).unwrap();
    // 60,000 octets announced, then one octet a second.
    let mut head = vec![2, 1, 0, 0xea, 0x60];
    head.resize(16, 0);
    d.tcp_data(T0, c, &head);
    let mut now = T0;
    let mut closed = false;
    for _ in 0..60 {
        now += Duration::from_secs(1);
        d.tcp_data(now, c, &[0]);
        if d.poll_timeout().is_some_and(|t| t <= now) {
            d.handle_timeout(now);
        }
        if drain(&mut d).0.contains(&Event::Reset(c)) {
            closed = true;
            break;
        }
    }
    assert!(closed, "closed long before timeout_s (300 s)");
    assert!(now - T0 <= Duration::from_secs(6), "{}", now - T0);
    assert_eq!(d.counters()["drop.mda.tcp_frame_timeout"], 1);
    // A connection that never sends goes too.
    let idle = d.tcp_accepted(now, SA).unwrap();
    d.handle_timeout(now + Duration::from_secs(5));
    assert!(drain(&mut d).0.contains(&Event::Reset(idle)));
}

#[test]
fn half_a_message_then_fin_is_counted() {
    let mut d = da();
    let q = rqst("service:printer", "x", "").to_bytes();
    let c = d.tcp_accepted(T0, SA).unwrap();
    d.tcp_data(T0, c, &q[..q.len() / 2]);
    d.tcp_closed(T0, c);
    assert_eq!(d.counters()["drop.mda.tcp_partial_frame"], 1);
    // A clean close is not.
    let c = d.tcp_accepted(T0, SA).unwrap();
    d.tcp_data(T0, c, &q);
    d.tcp_closed(T0, c);
    assert_eq!(d.counters()["drop.mda.tcp_partial_frame"], 1);
}
