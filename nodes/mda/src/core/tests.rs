//! The DA without the mesh, as protocol traces: an SA or UA sends one
//! message, the test asserts exactly what comes back.

use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{IpAddress, IpEndpoint, Ipv4Address};
use svcroute_stack::wire::slp::codec::List;
use svcroute_stack::wire::slp::{
    AcceptId, AttrList, AttrRqst, Body, ErrorCode, Extension, FwdId, Header, LangTag, MeshFwd,
    Message, NamingAuthority, Predicate, ScopeList, ServiceType, SlpString, SrvDeReg, SrvReg,
    SrvRqst, SrvTypeRqst, TagList, UrlEntry,
};

use svcroute_stack::wire::slp::scope::AuthorityName;

use super::*;

pub(super) const T0: Instant = Instant::from_micros_const(1_000_000_000);
pub(super) const WALL: u64 = 3_900_000_000_000_000; // ~2023 in µs since 1900

pub(super) fn ip(last: u8) -> IpAddress {
    IpAddress::Ipv4(Ipv4Address::new(10, 0, 0, last))
}

pub(super) fn da_url(last: u8) -> String {
    format!("service:directory-agent://10.0.0.{last}")
}

pub(super) fn cfg(last: u8, scopes: &str) -> Config {
    Config {
        start_wait: Duration::ZERO,
        wall_us_at_zero: WALL,
        seed: u64::from(last),
        ..Config::new(
            &da_url(last),
            vec![ip(last)],
            ScopeList::parse(scopes).unwrap(),
        )
    }
}

/// A DA at T0 with its boot DAAdvert already sent and drained.
pub(super) fn da() -> Mda {
    let mut d = Mda::new(cfg(1, "x,y"), T0, &[]);
    d.handle_timeout(T0);
    drain(&mut d);
    d
}

pub(super) const SA: IpEndpoint = IpEndpoint {
    addr: IpAddress::Ipv4(Ipv4Address::new(10, 0, 0, 9)),
    port: 4000,
};

pub(super) fn drain(d: &mut Mda) -> (Vec<Event>, Vec<Transmit>) {
    let mut ev = Vec::new();
    while let Some(e) = d.poll_event() {
        ev.push(e);
    }
    let mut tx = Vec::new();
    while let Some(t) = d.poll_transmit() {
        tx.push(t);
    }
    (ev, tx)
}

pub(super) fn s(v: &str) -> SlpString {
    SlpString::new(v).unwrap()
}

/// Template SrvReg: fresh, scope `x`, lifetime 300, language `en`.
pub(super) fn reg(url: &str, attrs: &str) -> Message {
    let mut h = Header::new(7, LangTag::en());
    h.flags.fresh = true;
    Message::new(
        h,
        Body::SrvReg(SrvReg {
            entry: UrlEntry::new(300, s(url)),
            service_type: ServiceType::parse("service:printer:lpr").unwrap(),
            scopes: ScopeList::parse("x").unwrap(),
            attrs: AttrList::parse(attrs).unwrap(),
            attr_auths: List::default(),
        }),
        vec![],
    )
    .unwrap()
}

/// `m` with a RqstFwd MeshFwd of `version`.
pub(super) fn rqst_fwd(m: Message, version: u64) -> Message {
    let (h, b, _) = m.into_parts();
    let ext = Extension::MeshFwd(MeshFwd {
        fwd: FwdId::RqstFwd,
        version,
        accept: AcceptId::default(),
    });
    Message::new(h, b, vec![ext]).unwrap()
}

pub(super) fn with_header(m: Message, f: impl FnOnce(&mut Header)) -> Message {
    let (mut h, b, e) = m.into_parts();
    f(&mut h);
    Message::new(h, b, e).unwrap()
}

pub(super) fn with_body(m: Message, f: impl FnOnce(&mut Body)) -> Message {
    let (h, mut b, e) = m.into_parts();
    f(&mut b);
    Message::new(h, b, e).unwrap()
}

pub(super) fn dereg(url: &str, tags: &str) -> Message {
    Message::new(
        Header::new(8, LangTag::en()),
        Body::SrvDeReg(SrvDeReg {
            scopes: ScopeList::parse("x").unwrap(),
            entry: UrlEntry::new(0, s(url)),
            tags: TagList::parse(tags).unwrap(),
        }),
        vec![],
    )
    .unwrap()
}

pub(super) fn rqst(stype: &str, scopes: &str, pred: &str) -> Message {
    Message::new(
        Header::new(9, LangTag::en()),
        Body::SrvRqst(SrvRqst {
            pr_list: SlpString::default(),
            service_type: ServiceType::parse(stype).unwrap(),
            scopes: ScopeList::parse(scopes).unwrap(),
            predicate: Predicate::new(pred).unwrap(),
            spi: SlpString::default(),
        }),
        vec![],
    )
    .unwrap()
}

pub(super) fn attr_rqst(url: &str, tags: &str) -> Message {
    Message::new(
        Header::new(10, LangTag::en()),
        Body::AttrRqst(AttrRqst {
            pr_list: SlpString::default(),
            url: s(url),
            scopes: ScopeList::parse("x").unwrap(),
            tags: TagList::parse(tags).unwrap(),
            spi: SlpString::default(),
        }),
        vec![],
    )
    .unwrap()
}

/// Send `m` by unicast UDP from the SA at `now`; the replies, parsed.
#[track_caller]
pub(super) fn udp(d: &mut Mda, now: Instant, m: &Message) -> Vec<Message> {
    udp_bytes(d, now, &m.to_bytes(), false)
}

#[track_caller]
pub(super) fn udp_bytes(d: &mut Mda, now: Instant, b: &[u8], mcast: bool) -> Vec<Message> {
    d.handle_udp(now, SA, b, mcast);
    let (_, tx) = drain(d);
    tx.into_iter()
        .map(|t| match t {
            Transmit::Udp { to, bytes, .. } => {
                assert_eq!(to, SA);
                Message::parse(&bytes).unwrap()
            }
            Transmit::Tcp { .. } => panic!("TCP transmit to a UDP request"),
        })
        .collect()
}

/// The single SrvAck's code.
#[track_caller]
pub(super) fn ack(d: &mut Mda, now: Instant, m: &Message) -> ErrorCode {
    let r = udp(d, now, m);
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(r[0].header().xid, m.header().xid);
    match r[0].body() {
        Body::SrvAck(a) => a.error,
        b => panic!("not a SrvAck: {b:?}"),
    }
}

#[track_caller]
pub(super) fn urls(d: &mut Mda, now: Instant, m: &Message) -> (ErrorCode, Vec<String>) {
    let r = udp(d, now, m);
    match r.as_slice() {
        [] => (ErrorCode::Ok, vec!["<no reply>".into()]),
        [one] => match one.body() {
            Body::SrvRply(r) => (
                r.error,
                r.entries
                    .iter()
                    .map(|e| e.url.as_str().to_owned())
                    .collect(),
            ),
            b => panic!("not a SrvRply: {b:?}"),
        },
        _ => panic!("several replies"),
    }
}

#[track_caller]
pub(super) fn attrs(d: &mut Mda, now: Instant, m: &Message) -> (ErrorCode, String) {
    let r = udp(d, now, m);
    match r[0].body() {
        Body::AttrRply(r) => (r.error, r.attrs.to_string()),
        b => panic!("not an AttrRply: {b:?}"),
    }
}

pub(super) const LPR: &str = "service:printer:lpr://h1";
pub(super) const LPR2: &str = "service:printer:lpr://h2";

#[test]
fn boot_advert_is_unsolicited_mesh_enhanced_multicast() {
    let mut d = Mda::new(cfg(1, "x,y"), T0, &[]);
    assert_eq!(d.poll_timeout(), Some(T0));
    d.handle_timeout(T0);
    let (_, tx) = drain(&mut d);
    let [Transmit::Udp { to, bytes, .. }] = tx.as_slice() else {
        panic!("{tx:?}")
    };
    assert_eq!(
        to.addr,
        IpAddress::Ipv4(Ipv4Address::new(239, 255, 255, 253))
    );
    let m = Message::parse(bytes).unwrap();
    assert_eq!(m.header().xid, 0);
    let Body::DaAdvert(a) = m.body() else {
        panic!()
    };
    assert!(a.attrs.is_mesh_enhanced());
    assert_eq!(a.boot_timestamp, d.boot_timestamp());
    assert!(a.boot_timestamp > 1_600_000_000, "{}", a.boot_timestamp);
    // Next one a beat later.
    assert_eq!(d.poll_timeout(), Some(T0 + Duration::from_secs(10_800)));
}

#[test]
fn register_find_and_deregister() {
    let mut d = da();
    assert_eq!(ack(&mut d, T0, &reg(LPR, "(q=3),color")), ErrorCode::Ok);
    assert_eq!(ack(&mut d, T0, &reg(LPR2, "(q=1)")), ErrorCode::Ok);
    let r = rqst("service:printer", "x", "");
    assert_eq!(
        urls(&mut d, T0, &r),
        (ErrorCode::Ok, vec![LPR.into(), LPR2.into()])
    );
    let r = rqst("service:printer:lpr", "x", "(q>=2)");
    assert_eq!(urls(&mut d, T0, &r), (ErrorCode::Ok, vec![LPR.into()]));
    let r = rqst("service:printer", "x", "(&(color=*)(q=3))");
    assert_eq!(urls(&mut d, T0, &r).1, vec![LPR.to_owned()]);
    assert_eq!(ack(&mut d, T0, &dereg(LPR, "")), ErrorCode::Ok);
    let r = rqst("service:printer", "x", "");
    assert_eq!(urls(&mut d, T0, &r).1, vec![LPR2.to_owned()]);
    assert_eq!(d.counters()["mda.registered"], 2);
}

#[test]
fn every_registration_is_persisted_before_its_ack() {
    let mut d = da();
    d.handle_udp(T0, SA, &reg(LPR, "a").to_bytes(), false);
    let (ev, tx) = drain(&mut d);
    assert!(
        matches!(ev.as_slice(), [Event::Persist(Record::State(s))] if s.url == LPR && !s.deleted)
    );
    assert_eq!(tx.len(), 1);
    // A refused one persists nothing.
    d.handle_udp(
        T0,
        SA,
        &with_body(reg(LPR, "a"), |b| {
            if let Body::SrvReg(r) = b {
                r.entry.lifetime = 0;
            }
        })
        .to_bytes(),
        false,
    );
    let (ev, _) = drain(&mut d);
    assert!(ev.is_empty());
}

#[test]
fn incremental_registration_merges_attributes() {
    let mut d = da();
    assert_eq!(
        ack(&mut d, T0, &reg(LPR, "(a=1),(b=2),(c=3)")),
        ErrorCode::Ok
    );
    let inc = with_header(reg(LPR, "(c=30),(d=40)"), |h| h.flags.fresh = false);
    assert_eq!(ack(&mut d, T0, &inc), ErrorCode::Ok);
    assert_eq!(
        attrs(&mut d, T0, &attr_rqst(LPR, "")),
        (ErrorCode::Ok, "(a=1),(b=2),(c=30),(d=40)".into())
    );
    // RFC 2608 §9.3 errors.
    let unknown = with_header(reg(LPR2, "(c=30)"), |h| h.flags.fresh = false);
    assert_eq!(ack(&mut d, T0, &unknown), ErrorCode::InvalidUpdate);
    let other_type = with_body(inc.clone(), |b| {
        if let Body::SrvReg(r) = b {
            r.service_type = ServiceType::parse("service:printer:ipp").unwrap();
        }
    });
    assert_eq!(ack(&mut d, T0, &other_type), ErrorCode::InvalidUpdate);
    let other_scopes = with_body(inc, |b| {
        if let Body::SrvReg(r) = b {
            r.scopes = ScopeList::parse("x,y").unwrap();
        }
    });
    assert_eq!(ack(&mut d, T0, &other_scopes), ErrorCode::ScopeNotSupported);
}

#[test]
fn partial_deregistration_removes_tagged_attributes() {
    let mut d = da();
    assert_eq!(
        ack(&mut d, T0, &reg(LPR, "(a=1),(ab=2),(c=3)")),
        ErrorCode::Ok
    );
    assert_eq!(ack(&mut d, T0, &dereg(LPR, "a*")), ErrorCode::Ok);
    assert_eq!(attrs(&mut d, T0, &attr_rqst(LPR, "")).1, "(c=3)");
    assert_eq!(attrs(&mut d, T0, &attr_rqst(LPR, "c,zz")).1, "(c=3)");
}

#[test]
fn registration_error_codes() {
    let mut d = da();
    let z = with_body(reg(LPR, ""), |b| {
        if let Body::SrvReg(r) = b {
            r.scopes = ScopeList::parse("z").unwrap();
        }
    });
    assert_eq!(ack(&mut d, T0, &z), ErrorCode::ScopeNotSupported);
    let zero = with_body(reg(LPR, ""), |b| {
        if let Body::SrvReg(r) = b {
            r.entry.lifetime = 0;
        }
    });
    assert_eq!(ack(&mut d, T0, &zero), ErrorCode::InvalidRegistration);
    // MeshFwd on an incremental update of an unknown service: INVALID_UPDATE
    // as without it; a partial deregistration of nothing is a no-op.
    let inc = with_header(rqst_fwd(reg(LPR, ""), 5), |h| h.flags.fresh = false);
    assert_eq!(ack(&mut d, T0, &inc), ErrorCode::InvalidUpdate);
    let part = rqst_fwd(dereg(LPR, "a"), 5);
    assert_eq!(ack(&mut d, T0, &part), ErrorCode::Ok);
    assert_eq!(d.registration_count(), 0);
    // Deregistration with another scope list than the registration's.
    assert_eq!(ack(&mut d, T0, &reg(LPR, "")), ErrorCode::Ok);
    let wide = with_body(dereg(LPR, ""), |b| {
        if let Body::SrvDeReg(r) = b {
            r.scopes = ScopeList::parse("x,y").unwrap();
        }
    });
    assert_eq!(ack(&mut d, T0, &wide), ErrorCode::ScopeNotSupported);
    // Unparseable: mixed attribute types (INVALID_REGISTRATION), bad version.
    let r = udp_bytes(&mut d, T0, &mixed_types(), false);
    assert!(matches!(r[0].body(), Body::SrvAck(a) if a.error == ErrorCode::InvalidRegistration));
    let mut v1 = reg(LPR2, "").to_bytes();
    v1[0] = 1;
    let r = udp_bytes(&mut d, T0, &v1, false);
    assert!(matches!(r[0].body(), Body::SrvAck(a) if a.error == ErrorCode::VerNotSupported));
    assert_eq!(d.counters()["drop.mda.parse_version"], 1);
    let mut junk = reg(LPR2, "").to_bytes();
    junk.truncate(20);
    let r = udp_bytes(&mut d, T0, &junk, false);
    assert!(
        matches!(r[0].body(), Body::SrvAck(a) if a.error == ErrorCode::ParseError),
        "{r:?}"
    );
}

fn mixed_types() -> Vec<u8> {
    let mut b = reg(LPR2, "(x=12345)").to_bytes();
    let at = b.windows(9).position(|w| w == b"(x=12345)").unwrap();
    // `1` is an integer, `yes` a string: mixed.
    b[at..at + 9].copy_from_slice(b"(x=1,yes)");
    b
}

#[test]
fn table_cap_refuses_with_da_busy_now() {
    let mut c = cfg(1, "x");
    c.max_registrations = 2;
    let mut d = Mda::new(c, T0, &[]);
    assert_eq!(ack(&mut d, T0, &reg(LPR, "")), ErrorCode::Ok);
    assert_eq!(ack(&mut d, T0, &reg(LPR2, "")), ErrorCode::Ok);
    assert_eq!(
        ack(&mut d, T0, &reg("service:printer:lpr://h3", "")),
        ErrorCode::DaBusyNow
    );
    // A refresh of an existing one still works.
    assert_eq!(ack(&mut d, T0, &reg(LPR, "")), ErrorCode::Ok);
    assert_eq!(d.counters()["drop.mda.table_full"], 1);
}

#[test]
fn min_refresh_interval() {
    let mut c = cfg(1, "x");
    c.min_refresh_s = 60;
    let mut d = Mda::new(c, T0, &[]);
    assert_eq!(ack(&mut d, T0, &reg(LPR, "")), ErrorCode::Ok);
    assert_eq!(
        ack(&mut d, T0 + Duration::from_secs(10), &reg(LPR, "")),
        ErrorCode::RefreshRejected
    );
    assert_eq!(
        ack(&mut d, T0 + Duration::from_secs(61), &reg(LPR, "")),
        ErrorCode::Ok
    );
}

#[test]
fn lifetimes_expire() {
    let mut d = da();
    assert_eq!(ack(&mut d, T0, &reg(LPR, "")), ErrorCode::Ok);
    let later = T0 + Duration::from_secs(100);
    let r = udp(&mut d, later, &rqst("service:printer", "x", ""));
    let Body::SrvRply(rp) = r[0].body() else {
        panic!()
    };
    assert_eq!(rp.entries[0].lifetime, 200);
    assert_eq!(d.poll_timeout(), Some(T0 + Duration::from_secs(300)));
    d.handle_timeout(T0 + Duration::from_secs(300));
    assert_eq!(d.registration_count(), 0);
    assert_eq!(d.counters()["mda.expired"], 1);
}

#[test]
fn scopes_and_languages() {
    let mut d = da();
    assert_eq!(ack(&mut d, T0, &reg(LPR, "")), ErrorCode::Ok);
    let z = rqst("service:printer", "z", "");
    assert_eq!(urls(&mut d, T0, &z).0, ErrorCode::ScopeNotSupported);
    // Scope y is ours but holds nothing: an empty reply.
    assert_eq!(
        urls(&mut d, T0, &rqst("service:printer", "y", "")),
        (ErrorCode::Ok, vec![])
    );
    // Registered in English only: German asks get LANGUAGE_NOT_SUPPORTED.
    let de = with_header(rqst("service:printer", "x", ""), |h| {
        h.lang = LangTag::new("de").unwrap();
    });
    assert_eq!(urls(&mut d, T0, &de).0, ErrorCode::LanguageNotSupported);
    let en_us = with_header(rqst("service:printer", "x", ""), |h| {
        h.lang = LangTag::new("en-US").unwrap();
    });
    assert_eq!(urls(&mut d, T0, &en_us).1, vec![LPR.to_owned()]);
    // The same URL registered in German is a separate registration.
    let de_reg = with_header(reg(LPR, "(farbe=rot)"), |h| {
        h.lang = LangTag::new("de").unwrap();
    });
    assert_eq!(ack(&mut d, T0, &de_reg), ErrorCode::Ok);
    assert_eq!(urls(&mut d, T0, &de).1, vec![LPR.to_owned()]);
    let de_attrs = with_header(attr_rqst(LPR, ""), |h| h.lang = LangTag::new("de").unwrap());
    assert_eq!(attrs(&mut d, T0, &de_attrs).1, "(farbe=rot)");
    let fr = with_header(attr_rqst(LPR, ""), |h| h.lang = LangTag::new("fr").unwrap());
    assert_eq!(attrs(&mut d, T0, &fr).0, ErrorCode::LanguageNotSupported);
}

#[test]
fn multicast_requests_get_no_errors_and_no_empty_replies() {
    let mut d = da();
    let mc = |m: Message| with_header(m, |h| h.flags.mcast = true).to_bytes();
    assert!(udp_bytes(&mut d, T0, &mc(rqst("service:printer", "z", "")), true).is_empty());
    assert!(udp_bytes(&mut d, T0, &mc(rqst("service:printer", "x", "")), true).is_empty());
    let mut junk = mc(rqst("service:printer", "x", ""));
    junk.truncate(junk.len() - 1);
    junk[4] -= 1;
    assert!(udp_bytes(&mut d, T0, &junk, true).is_empty());
    // PRList holding our address: silence.
    assert_eq!(ack(&mut d, T0, &reg(LPR, "")), ErrorCode::Ok);
    let pr = with_body(rqst("service:printer", "x", ""), |b| {
        if let Body::SrvRqst(r) = b {
            r.pr_list = s("10.0.0.7,10.0.0.1");
        }
    });
    assert!(udp_bytes(&mut d, T0, &mc(pr), true).is_empty());
    assert_eq!(
        udp_bytes(&mut d, T0, &mc(rqst("service:printer", "x", "")), true).len(),
        1
    );
}

#[test]
fn da_discovery_and_spi() {
    let mut d = da();
    let r = udp(&mut d, T0, &rqst("service:directory-agent", "", ""));
    let Body::DaAdvert(a) = r[0].body() else {
        panic!("{r:?}")
    };
    assert_eq!(r[0].header().xid, 9);
    assert_eq!(a.url.as_str(), da_url(1));
    assert!(udp(&mut d, T0, &rqst("service:directory-agent", "z", ""))
        .iter()
        .all(|m| m.body().error() == Some(ErrorCode::ScopeNotSupported)));
    assert!(
        udp(
            &mut d,
            T0,
            &rqst("service:directory-agent", "x", "(mesh-enhanced=*)")
        )
        .len()
            == 1
    );
    let spi = with_body(rqst("service:printer", "x", ""), |b| {
        if let Body::SrvRqst(r) = b {
            r.spi = s("mykey");
        }
    });
    assert_eq!(urls(&mut d, T0, &spi).0, ErrorCode::AuthenticationUnknown);
}

#[test]
fn attr_rqst_by_service_type_merges_and_filters() {
    let mut d = da();
    assert_eq!(ack(&mut d, T0, &reg(LPR, "(q=1),(loc=a)")), ErrorCode::Ok);
    assert_eq!(ack(&mut d, T0, &reg(LPR2, "(q=2),(loc=a)")), ErrorCode::Ok);
    assert_eq!(
        attrs(&mut d, T0, &attr_rqst("service:printer", "")).1,
        "(q=1,2),(loc=a)"
    );
    assert_eq!(
        attrs(&mut d, T0, &attr_rqst("service:printer:lpr", "q")).1,
        "(q=1,2)"
    );
    assert_eq!(
        attrs(&mut d, T0, &attr_rqst("service:printer:lpr://nope", "")).1,
        ""
    );
}

#[test]
fn srv_type_rqst_by_naming_authority() {
    // A generous amplification budget: two types outgrow 2 × the request.
    let mut d = Mda::new(
        Config {
            amplification_factor: 10,
            ..cfg(1, "x,y")
        },
        T0,
        &[],
    );
    assert_eq!(ack(&mut d, T0, &reg(LPR, "")), ErrorCode::Ok);
    let acme = with_body(reg("service:scanner.acme://s", ""), |b| {
        if let Body::SrvReg(r) = b {
            r.service_type = ServiceType::parse("service:scanner.acme").unwrap();
        }
    });
    assert_eq!(ack(&mut d, T0, &acme), ErrorCode::Ok);
    let ask = |na: NamingAuthority| {
        Message::new(
            Header::new(11, LangTag::en()),
            Body::SrvTypeRqst(SrvTypeRqst {
                pr_list: SlpString::default(),
                naming_authority: na,
                scopes: ScopeList::parse("x").unwrap(),
            }),
            vec![],
        )
        .unwrap()
    };
    let types = |d: &mut Mda, na| {
        let r = udp(d, T0, &ask(na));
        let Body::SrvTypeRply(t) = r[0].body() else {
            panic!()
        };
        t.types
            .types()
            .iter()
            .map(|t| t.as_str().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        types(&mut d, NamingAuthority::Iana),
        ["service:printer:lpr"]
    );
    assert_eq!(d.registration_count(), 2);
    assert_eq!(types(&mut d, NamingAuthority::All).len(), 2);
    let acme_na = NamingAuthority::Named(AuthorityName::new("acme").unwrap());
    assert_eq!(types(&mut d, acme_na), ["service:scanner.acme"]);
}

#[test]
fn udp_replies_fit_the_path_and_reflection_is_bounded_per_destination() {
    let mut d = Mda::new(
        Config {
            reply_budget: 6000,
            reply_budget_per_s: 100,
            ..cfg(1, "x,y")
        },
        T0,
        &[],
    );
    for i in 0..200 {
        let url = format!("service:printer:lpr://h{i:03}");
        assert_eq!(ack(&mut d, T0, &reg(&url, "")), ErrorCode::Ok);
    }
    let q = rqst("service:printer", "x", "");
    let qlen = q.buffer_len();
    let reply = |d: &mut Mda, from: IpEndpoint| {
        d.handle_udp(T0, from, &q.to_bytes(), false);
        let (_, tx) = drain(d);
        let [Transmit::Udp { bytes, to, .. }] = tx.as_slice() else {
            panic!("{tx:?}")
        };
        assert_eq!(*to, from);
        bytes.clone()
    };
    // 200 entries do not fit a datagram: whole entries up to the path's
    // UDP payload, past libslp's 1400 octets (it then asks over TCP), and
    // OVERFLOW for the others.
    let bytes = reply(&mut d, SA);
    assert!(bytes.len() > 1400 && bytes.len() <= 1472, "{}", bytes.len());
    let m = Message::parse(&bytes).unwrap();
    assert!(m.header().flags.overflow);
    let Body::SrvRply(r) = m.body() else { panic!() };
    assert!(!r.entries.is_empty() && r.entries.len() < 200);
    // Over TCP the whole answer comes back.
    let c = d.tcp_accepted(T0, SA).unwrap();
    d.handle_tcp(T0, c, &q.to_bytes());
    let (_, tx) = drain(&mut d);
    let [Transmit::Tcp { bytes, .. }] = tx.as_slice() else {
        panic!()
    };
    let m = Message::parse(bytes).unwrap();
    assert!(!m.header().flags.overflow);
    let Body::SrvRply(r) = m.body() else { panic!() };
    assert_eq!(r.entries.len(), 200);
    assert!(d.counters()["mda.reply_truncated"] >= 1);
    // Reflection: the destination's budget (6000 octets) is spent after
    // four such replies; then replies are held to 2 × the request, still
    // with OVERFLOW, and counted. Another destination has its own budget.
    let sizes: Vec<usize> = (0..8).map(|_| reply(&mut d, SA).len()).collect();
    let total: usize = sizes.iter().sum();
    assert!(
        total <= 6000 + 8 * 2 * qlen,
        "{sizes:?}: the budget bounds what one address gets"
    );
    assert!(sizes[7] <= 2 * qlen, "{sizes:?}");
    assert!(
        Message::parse(&reply(&mut d, SA))
            .unwrap()
            .header()
            .flags
            .overflow
    );
    assert!(d.counters()["mda.reply_budget_cut"] >= 4);
    let other = IpEndpoint::new(ip(42), 4000);
    assert!(reply(&mut d, other).len() > 1400);
}

#[test]
fn fwded_messages_from_non_peers_are_dropped() {
    let mut d = da();
    let m = with_body(rqst_fwd(reg(LPR, ""), 5), |_| {});
    let (h, b, _) = m.into_parts();
    let fwded = Message::new(
        h,
        b,
        vec![Extension::MeshFwd(MeshFwd {
            fwd: FwdId::Fwded,
            version: 5,
            accept: AcceptId {
                timestamp: 9,
                da_url: s(&da_url(2)),
            },
        })],
    )
    .unwrap();
    assert!(udp(&mut d, T0, &fwded).is_empty());
    assert_eq!(d.registration_count(), 0);
    assert_eq!(d.counters()["drop.mda.fwded_not_from_peer"], 1);
}

#[test]
fn plain_da_ignores_mesh_and_stores_locally() {
    let mut c = cfg(1, "x");
    c.mesh = false;
    let mut d = Mda::new(c, T0, &[]);
    assert_eq!(ack(&mut d, T0, &rqst_fwd(reg(LPR, ""), 5)), ErrorCode::Ok);
    assert!(d
        .registration(LPR, &LangTag::en())
        .unwrap()
        .accept
        .is_none());
    let r = udp(&mut d, T0, &rqst("service:directory-agent", "", ""));
    let Body::DaAdvert(a) = r[0].body() else {
        panic!()
    };
    assert!(!a.attrs.is_mesh_enhanced());
}

#[test]
fn accept_timestamps_strictly_increase_when_the_clock_steps_back() {
    let mut d = da();
    assert_eq!(ack(&mut d, T0, &rqst_fwd(reg(LPR, ""), 1)), ErrorCode::Ok);
    let a1 = d
        .registration(LPR, &LangTag::en())
        .unwrap()
        .accept
        .clone()
        .unwrap();
    // The wall clock steps back an hour: a new core time base says so.
    let back = T0 - Duration::from_secs(3600);
    assert_eq!(
        ack(&mut d, back, &rqst_fwd(reg(LPR2, ""), 1)),
        ErrorCode::Ok
    );
    let a2 = d
        .registration(LPR2, &LangTag::en())
        .unwrap()
        .accept
        .clone()
        .unwrap();
    assert!(a2.timestamp > a1.timestamp);
    assert_eq!(a1.timestamp, WALL + T0.total_micros() as u64);
    // And after a restart from the log, too.
    let recs: Vec<Record> = d.snapshot();
    let mut d2 = Mda::new(cfg(1, "x,y"), back, &recs);
    assert_eq!(
        ack(
            &mut d2,
            back,
            &rqst_fwd(reg("service:printer:lpr://h3", ""), 1)
        ),
        ErrorCode::Ok
    );
    let a3 = d2
        .registration("service:printer:lpr://h3", &LangTag::en())
        .unwrap()
        .accept
        .clone()
        .unwrap();
    assert!(a3.timestamp > a2.timestamp);
}

#[test]
fn version_resolution_for_sa_updates() {
    let mut d = da();
    assert_eq!(
        ack(&mut d, T0, &rqst_fwd(reg(LPR, "(v=2)"), 20)),
        ErrorCode::Ok
    );
    // An older version arriving later: acknowledged, ignored.
    assert_eq!(
        ack(&mut d, T0, &rqst_fwd(reg(LPR, "(v=1)"), 10)),
        ErrorCode::Ok
    );
    assert_eq!(attrs(&mut d, T0, &attr_rqst(LPR, "")).1, "(v=2)");
    assert_eq!(d.counters()["mda.stale_update"], 1);
    // Deregistration leaves a tombstone; an older SrvReg cannot resurrect it.
    assert_eq!(
        ack(&mut d, T0, &rqst_fwd(dereg(LPR, ""), 30)),
        ErrorCode::Ok
    );
    assert!(d.registration(LPR, &LangTag::en()).unwrap().deleted);
    assert_eq!(
        ack(&mut d, T0, &rqst_fwd(reg(LPR, "(v=2)"), 25)),
        ErrorCode::Ok
    );
    assert_eq!(
        urls(&mut d, T0, &rqst("service:printer", "x", "")).1,
        Vec::<String>::new()
    );
    // A newer one does.
    assert_eq!(
        ack(&mut d, T0, &rqst_fwd(reg(LPR, "(v=4)"), 40)),
        ErrorCode::Ok
    );
    assert_eq!(
        urls(&mut d, T0, &rqst("service:printer", "x", "")).1,
        vec![LPR.to_owned()]
    );
}

#[test]
fn restart_from_records_restores_state() {
    let mut d = da();
    let mut log = Vec::new();
    for m in [
        rqst_fwd(reg(LPR, "(a=1)"), 1),
        rqst_fwd(reg(LPR2, ""), 1),
        rqst_fwd(dereg(LPR2, ""), 2),
    ] {
        d.handle_udp(T0, SA, &m.to_bytes(), false);
        let (ev, _) = drain(&mut d);
        log.extend(ev.into_iter().filter_map(|e| match e {
            Event::Persist(r) => Some(r),
            _ => None,
        }));
    }
    assert_eq!(log.len(), 3);
    let d2 = Mda::new(cfg(1, "x,y"), T0 + Duration::from_secs(5), &log);
    assert_eq!(d2.digest(), d.digest());
    assert_eq!(d2.summary(), d.summary());
    // Long after every lifetime: nothing comes back.
    let d3 = Mda::new(cfg(1, "x,y"), T0 + Duration::from_secs(1000), &log);
    assert_eq!(d3.registration_count(), 0);
}
