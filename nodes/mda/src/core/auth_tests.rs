//! SLP authentication at the MDA (RFC 2608 §7, §8.3, §8.5, §9.2, §9.3,
//! §10.3, §10.6, §12.5; RFC 3528 §8): SA updates with HMAC-SHA256 and
//! Ed25519 blocks, replies carrying them, signed DAAdverts, and peers that
//! must authenticate.

use ring::signature::{Ed25519KeyPair, KeyPair as _};
use smoltcp::time::Duration;
use smoltcp::wire::IpEndpoint;
use svcroute_stack::wire::slp::auth::{to_hex, Signed};
use svcroute_stack::wire::slp::{
    AttrList, AttrRply, Body, Bsd, DaAdvert, ErrorCode, Header, LangTag, Message, ScopeList,
    Signer, SrvRply, Verifier,
};

use super::tests::{
    ack, attr_rqst, cfg, da_url, dereg, drain, ip, reg, rqst, s, udp, with_body, with_header, LPR,
    LPR2, SA, T0, WALL,
};
use super::*;

/// Long after T0 (seconds since 1970; T0 is in 2023).
const LATER: u32 = 2_000_000_000;
const SECRET: &str = "hex:000102030405060708090a0b0c0d0e0f";

fn seed(n: u8) -> [u8; 32] {
    [n; 32]
}

fn public_hex(n: u8) -> String {
    let pair = Ed25519KeyPair::from_seed_unchecked(&seed(n)).unwrap();
    format!("hex:{}", to_hex(pair.public_key().as_ref()))
}

fn hmac_signer() -> Signer {
    Signer::new("sa-h", Bsd::HmacSha256, &(0..16).collect::<Vec<u8>>()).unwrap()
}

fn ed_signer() -> Signer {
    Signer::new("sa-e", Bsd::Ed25519, &seed(7)).unwrap()
}

/// SA keys "sa-h" (HMAC) and "sa-e" (Ed25519), and a peer-only key "mesh".
fn keys() -> Keys {
    Keys {
        verify: KeyList::new(vec![
            VerifyKey::new("sa-h", "hmac-sha256", SECRET, &[Admit::Sa]).unwrap(),
            VerifyKey::new("sa-e", "ed25519", &public_hex(7), &[Admit::Sa]).unwrap(),
            VerifyKey::new("mesh", "ed25519", &public_hex(9), &[Admit::Peer]).unwrap(),
        ])
        .unwrap(),
        sign: SignKeyList::new(vec![SignKey::new(
            "mesh",
            "ed25519",
            &format!("hex:{}", to_hex(&seed(9))),
        )
        .unwrap()])
        .unwrap(),
    }
}

#[test]
fn key_material_stays_out_of_debug_output() {
    let dbg = format!("{:?}", keys());
    assert!(dbg.contains("sa-h") && dbg.contains("mesh"), "{dbg}");
    assert!(!dbg.contains("0001020304"), "{dbg}");
    assert!(!dbg.contains(&to_hex(&seed(9))), "{dbg}");
}

fn secured(keys: Keys) -> Mda {
    let mut c = cfg(1, "x,y");
    c.keys = keys;
    let mut d = Mda::new(c, T0, &[]);
    d.handle_timeout(T0);
    drain(&mut d);
    d
}

/// `m` (a SrvReg or SrvDeReg) with URL blocks (and attribute blocks for a
/// SrvReg) by each signer, expiring at `expires`.
fn signed(m: Message, signers: &[&Signer], expires: u32) -> Message {
    with_body(m, |b| match b {
        Body::SrvReg(r) => {
            for sg in signers {
                let u = sg.sign(&Signed::Url(&r.entry.url), expires);
                r.entry.auths.push(u).unwrap();
                let a = sg.sign(&Signed::Attrs(&r.attrs), expires);
                r.attr_auths.push(a).unwrap();
            }
        }
        Body::SrvDeReg(r) => {
            for sg in signers {
                let u = sg.sign(&Signed::Url(&r.entry.url), expires);
                r.entry.auths.push(u).unwrap();
            }
        }
        _ => {}
    })
}

fn with_spi(m: Message, spi: &str) -> Message {
    with_body(m, |b| match b {
        Body::SrvRqst(r) => r.spi = s(spi),
        Body::AttrRqst(r) => r.spi = s(spi),
        _ => {}
    })
}

/// `m` from a UA over TCP (replies with blocks outgrow the UDP budget of
/// a small request); the one reply.
fn tcp(d: &mut Mda, m: &Message) -> Message {
    let conn = d.tcp_accepted(T0, IpEndpoint::new(ip(9), 5000)).unwrap();
    d.handle_tcp(T0, conn, &m.to_bytes());
    let (_, tx) = drain(d);
    d.tcp_closed(T0, conn);
    match tx.as_slice() {
        [Transmit::Tcp { bytes, .. }] => Message::parse(bytes).unwrap(),
        other => panic!("{other:?}"),
    }
}

fn srv_rply(d: &mut Mda, m: &Message) -> SrvRply {
    match tcp(d, m).body() {
        Body::SrvRply(r) => r.clone(),
        b => panic!("not a SrvRply: {b:?}"),
    }
}

#[test]
fn sa_updates_must_be_authenticated_with_the_right_codes() {
    let mut d = secured(keys());
    let (h, e) = (hmac_signer(), ed_signer());
    let count = |d: &Mda, k: &str| d.counters().get(k).copied().unwrap_or(0);
    // AUTHENTICATION_ABSENT: nothing signed, or only the URL.
    assert_eq!(
        ack(&mut d, T0, &reg(LPR, "(a=1)")),
        ErrorCode::AuthenticationAbsent
    );
    let url_only = with_body(signed(reg(LPR, "(a=1)"), &[&h], LATER), |b| {
        if let Body::SrvReg(r) = b {
            r.attr_auths = Default::default();
        }
    });
    assert_eq!(ack(&mut d, T0, &url_only), ErrorCode::AuthenticationAbsent);
    assert_eq!(count(&d, "drop.mda.auth_absent"), 2);
    // AUTHENTICATION_UNKNOWN: an SPI we have no SA key for (a peer key
    // does not admit SAs).
    let stranger = Signer::new("zz", Bsd::HmacSha256, &[1; 16]).unwrap();
    assert_eq!(
        ack(&mut d, T0, &signed(reg(LPR, "(a=1)"), &[&stranger], LATER)),
        ErrorCode::AuthenticationUnknown
    );
    let peer_key = Signer::new("mesh", Bsd::Ed25519, &seed(9)).unwrap();
    assert_eq!(
        ack(&mut d, T0, &signed(reg(LPR, "(a=1)"), &[&peer_key], LATER)),
        ErrorCode::AuthenticationUnknown
    );
    assert_eq!(count(&d, "drop.mda.auth_unknown_spi"), 2);
    // AUTHENTICATION_FAILED: the wrong secret, a changed attribute list, an
    // expired block, the wrong BSD for the SPI.
    let forger = Signer::new("sa-h", Bsd::HmacSha256, &[2; 16]).unwrap();
    assert_eq!(
        ack(&mut d, T0, &signed(reg(LPR, "(a=1)"), &[&forger], LATER)),
        ErrorCode::AuthenticationFailed
    );
    let tampered = with_body(signed(reg(LPR, "(a=1)"), &[&h], LATER), |b| {
        if let Body::SrvReg(r) = b {
            r.attrs = AttrList::parse("(a=2)").unwrap();
        }
    });
    assert_eq!(ack(&mut d, T0, &tampered), ErrorCode::AuthenticationFailed);
    let now = Clock {
        wall_us_at_zero: WALL,
    }
    .unix_secs(T0);
    assert_eq!(
        ack(&mut d, T0, &signed(reg(LPR, "(a=1)"), &[&h], now)),
        ErrorCode::AuthenticationFailed
    );
    let wrong_bsd = Signer::new("sa-e", Bsd::HmacSha256, &[7; 16]).unwrap();
    assert_eq!(
        ack(&mut d, T0, &signed(reg(LPR, "(a=1)"), &[&wrong_bsd], LATER)),
        ErrorCode::AuthenticationFailed
    );
    assert_eq!(count(&d, "drop.mda.auth_failed"), 2);
    assert_eq!(count(&d, "drop.mda.auth_expired"), 1);
    assert_eq!(count(&d, "drop.mda.auth_wrong_bsd"), 1);
    assert_eq!(d.registration_count(), 0, "nothing refused was stored");
    // Good blocks: accepted, HMAC for one service, both BSDs for another.
    assert_eq!(
        ack(&mut d, T0, &signed(reg(LPR, "(a=1)"), &[&h], LATER)),
        ErrorCode::Ok
    );
    assert_eq!(
        ack(&mut d, T0, &signed(reg(LPR2, "(b=2)"), &[&h, &e], LATER)),
        ErrorCode::Ok
    );
    // §8.3: a re-registration needs every SPI it was made with.
    assert_eq!(
        ack(&mut d, T0, &signed(reg(LPR2, "(b=3)"), &[&h], LATER)),
        ErrorCode::AuthenticationAbsent
    );
    assert_eq!(count(&d, "drop.mda.auth_missing_spi"), 1);
    // §9.3, §10.6: no incremental updates or partial deregistrations of
    // signed registrations.
    let inc = with_header(reg(LPR, "(c=1)"), |h| h.flags.fresh = false);
    assert_eq!(ack(&mut d, T0, &inc), ErrorCode::AuthenticationFailed);
    assert_eq!(
        ack(&mut d, T0, &signed(dereg(LPR, "a"), &[&h], LATER)),
        ErrorCode::AuthenticationFailed
    );
    assert_eq!(count(&d, "drop.mda.auth_incremental"), 2);
    // Deregistration: absent, missing an SPI, forged, then good.
    assert_eq!(
        ack(&mut d, T0, &dereg(LPR2, "")),
        ErrorCode::AuthenticationAbsent
    );
    assert_eq!(
        ack(&mut d, T0, &signed(dereg(LPR2, ""), &[&e], LATER)),
        ErrorCode::AuthenticationAbsent
    );
    assert_eq!(
        ack(&mut d, T0, &signed(dereg(LPR2, ""), &[&forger, &e], LATER)),
        ErrorCode::AuthenticationFailed
    );
    assert!(d.registration(LPR2, &LangTag::en()).unwrap().alive(T0));
    assert_eq!(
        ack(&mut d, T0, &signed(dereg(LPR2, ""), &[&h, &e], LATER)),
        ErrorCode::Ok
    );
    assert!(!d.registration(LPR2, &LangTag::en()).unwrap().alive(T0));
}

#[test]
fn replies_carry_the_blocks_of_the_spi_asked_for() {
    let mut d = secured(keys());
    let (h, e) = (hmac_signer(), ed_signer());
    let mut log = Vec::new();
    for m in [
        signed(reg(LPR, "(a=1),(b=x y)"), &[&h], LATER),
        signed(reg(LPR2, "(a=2)"), &[&h, &e], LATER),
    ] {
        d.handle_udp(T0, SA, &m.to_bytes(), false);
        let (ev, _) = drain(&mut d);
        log.extend(ev.into_iter().filter_map(|e| match e {
            Event::Persist(r) => Some(r),
            _ => None,
        }));
    }
    let check = |d: &mut Mda| {
        // No SPI: both services, no blocks.
        let all = srv_rply(d, &rqst("service:printer", "x", ""));
        assert_eq!(all.entries.len(), 2);
        assert!(all.entries.iter().all(|e| e.auths.is_empty()));
        // "sa-e": only the service signed with it, with that block only.
        let r = srv_rply(d, &with_spi(rqst("service:printer", "x", ""), "sa-e"));
        assert_eq!(r.entries.len(), 1);
        let entry = &r.entries[0];
        assert_eq!(entry.url.as_str(), LPR2);
        assert_eq!(entry.auths.len(), 1);
        let v = ed_signer().verifier();
        assert_eq!(
            v.verify(&Signed::Url(&entry.url), &entry.auths[0], 0),
            Ok(())
        );
        // "sa-h": both. Over UDP that is more than twice the request but
        // fits the path: whole, charged to the destination's reply budget.
        let ask = with_spi(rqst("service:printer", "x", ""), "sa-h");
        assert_eq!(srv_rply(d, &ask).entries.len(), 2);
        let r = udp(d, T0, &ask);
        assert!(!r[0].header().flags.overflow);
        // An SPI we cannot verify: AUTHENTICATION_UNKNOWN (§12.5).
        let r = srv_rply(d, &with_spi(rqst("service:printer", "x", ""), "zz"));
        assert_eq!(r.error, ErrorCode::AuthenticationUnknown);
        // AttrRqst with an SPI: the list as registered and its block.
        let a = tcp(d, &with_spi(attr_rqst(LPR, ""), "sa-h"));
        let Body::AttrRply(AttrRply {
            error,
            attrs,
            auths,
        }) = a.body()
        else {
            panic!("{a:?}")
        };
        assert_eq!(
            (*error, attrs.to_string().as_str()),
            (ErrorCode::Ok, "(a=1),(b=x y)")
        );
        let hv = Verifier::new("sa-h", Bsd::HmacSha256, &(0..16).collect::<Vec<u8>>()).unwrap();
        assert_eq!(hv.verify(&Signed::Attrs(attrs), &auths[0], 0), Ok(()));
        // §10.3: with an SPI, a tag list is AUTHENTICATION_FAILED; a
        // registration without a block for the SPI gives an empty reply.
        let a = udp(d, T0, &with_spi(attr_rqst(LPR, "a"), "sa-h"));
        assert_eq!(a[0].body().error(), Some(ErrorCode::AuthenticationFailed));
        let a = udp(d, T0, &with_spi(attr_rqst(LPR, ""), "sa-e"));
        assert!(
            matches!(a[0].body(), Body::AttrRply(r) if r.error.is_ok() && r.attrs.is_empty() && r.auths.is_empty())
        );
    };
    check(&mut d);
    // The blocks survive a restart from the log.
    let mut c = cfg(1, "x,y");
    c.keys = keys();
    let mut d2 = Mda::new(c, T0 + Duration::from_secs(1), &log);
    assert_eq!(d2.digest(), d.digest());
    check(&mut d2);
}

#[test]
fn without_sa_keys_unsigned_updates_pass_but_unknown_spis_do_not() {
    let mut k = keys();
    k.verify = KeyList::new(
        k.verify
            .keys()
            .iter()
            .filter(|k| !k.admits(Admit::Sa))
            .cloned()
            .collect(),
    )
    .unwrap();
    let mut d = secured(k);
    assert_eq!(ack(&mut d, T0, &reg(LPR, "(a=1)")), ErrorCode::Ok);
    let inc = with_header(reg(LPR, "(c=1)"), |h| h.flags.fresh = false);
    assert_eq!(ack(&mut d, T0, &inc), ErrorCode::Ok);
    // §12.5: the DA must not accept blocks of SPIs it is not configured for.
    assert_eq!(
        ack(&mut d, T0, &signed(reg(LPR2, ""), &[&hmac_signer()], LATER)),
        ErrorCode::AuthenticationUnknown
    );
}

/// Our DAAdvert: SPI list, a block per signing key when unsolicited, only
/// the requested one in a reply, cut down to no blocks over a tight UDP
/// budget and whole over TCP.
#[test]
fn da_adverts_are_signed() {
    let mut c = cfg(1, "x,y");
    c.keys = keys();
    let mut d = Mda::new(c, T0, &[]);
    d.handle_timeout(T0);
    let (_, tx) = drain(&mut d);
    let boot = tx
        .iter()
        .find_map(|t| match t {
            Transmit::Udp { bytes, .. } => Some(Message::parse(bytes).unwrap()),
            Transmit::Tcp { .. } => None,
        })
        .unwrap();
    let Body::DaAdvert(a) = boot.body() else {
        panic!("{boot:?}")
    };
    assert_eq!(a.spi_list.as_str(), "sa-h,sa-e,mesh");
    assert_eq!(a.auths.len(), 1);
    let v = Verifier::new("mesh", Bsd::Ed25519, &{
        let p = Ed25519KeyPair::from_seed_unchecked(&seed(9)).unwrap();
        p.public_key().as_ref().to_vec()
    })
    .unwrap();
    let now = Clock {
        wall_us_at_zero: WALL,
    }
    .unix_secs(T0);
    assert_eq!(v.verify(&Signed::da_advert(a), &a.auths[0], now), Ok(()));
    // DA discovery with our signing SPI, by TCP: the whole signed advert.
    let ask = with_spi(rqst("service:directory-agent", "x", ""), "mesh");
    let m = tcp(&mut d, &ask);
    let Body::DaAdvert(a) = m.body() else {
        panic!("{m:?}")
    };
    assert_eq!(a.auths.len(), 1);
    assert_eq!(v.verify(&Signed::da_advert(a), &a.auths[0], now), Ok(()));
    // By UDP it fits the path: whole (docs/mda.md, "Reply sizes"). With
    // the destination's reply budget spent, the request's budget cuts it:
    // OVERFLOW, no attributes, no block (it would no longer verify).
    let r = udp(&mut d, T0, &ask);
    assert!(!r[0].header().flags.overflow);
    let Body::DaAdvert(a) = r[0].body() else {
        panic!("{r:?}")
    };
    assert_eq!(a.auths.len(), 1);
    let mut d = Mda::new(
        Config {
            reply_budget: 0,
            ..d.config().clone()
        },
        T0,
        &[],
    );
    let r = udp(&mut d, T0, &ask);
    assert!(r[0].header().flags.overflow);
    let Body::DaAdvert(a) = r[0].body() else {
        panic!("{r:?}")
    };
    assert!(a.auths.is_empty() && a.attrs.is_empty());
    // No SPI: no block. An SPI we cannot sign with: AUTHENTICATION_UNKNOWN.
    let r = udp(&mut d, T0, &rqst("service:directory-agent", "x", ""));
    assert!(matches!(r[0].body(), Body::DaAdvert(a) if a.auths.is_empty()));
    let r = udp(
        &mut d,
        T0,
        &with_spi(rqst("service:directory-agent", "x", ""), "sa-h"),
    );
    assert_eq!(r[0].body().error(), Some(ErrorCode::AuthenticationUnknown));
}

/// A DAAdvert as MDA `last` sends it, signed by `signer` if any.
fn advert(last: u8, boot: u32, signer: Option<&Signer>) -> Message {
    let mut a = DaAdvert {
        boot_timestamp: boot,
        url: s(&da_url(last)),
        scopes: ScopeList::parse("x").unwrap(),
        attrs: AttrList::parse("mesh-enhanced").unwrap(),
        ..DaAdvert::default()
    };
    if let Some(sg) = signer {
        let b = sg.sign(&Signed::da_advert(&a), LATER);
        a.auths.push(b).unwrap();
    }
    Message::new(Header::new(0, LangTag::en()), Body::DaAdvert(a), vec![]).unwrap()
}

#[test]
fn peers_must_authenticate_their_adverts() {
    let good = Signer::new("mesh", Bsd::Ed25519, &seed(9)).unwrap();
    let forged = Signer::new("mesh", Bsd::Ed25519, &seed(8)).unwrap();
    let count = |d: &Mda, k: &str| d.counters().get(k).copied().unwrap_or(0);
    let mut d = secured(keys());
    let open = |d: &mut Mda, last: u8| {
        d.tcp_accepted(T0, IpEndpoint::new(ip(last), 40_000))
            .unwrap()
    };
    // Unsigned, and badly signed: the connection is closed, no peer.
    for (last, signer, why) in [
        (2, None, "drop.mda.advert_auth_absent"),
        (3, Some(&forged), "drop.mda.advert_auth_failed"),
    ] {
        let conn = open(&mut d, last);
        d.handle_tcp(T0, conn, &advert(last, 1, signer).to_bytes());
        let (ev, _) = drain(&mut d);
        assert!(ev.contains(&Event::Close(conn)), "{ev:?}");
        assert!(d.active_peers().is_empty());
        assert_eq!(count(&d, why), 1);
    }
    assert_eq!(count(&d, "drop.mda.peer_unauthenticated"), 2);
    // A good advert replayed on a connection from another address.
    let conn = open(&mut d, 5);
    d.handle_tcp(T0, conn, &advert(4, 1, Some(&good)).to_bytes());
    assert!(drain(&mut d).0.contains(&Event::Close(conn)));
    assert_eq!(count(&d, "drop.mda.advert_auth_addr"), 1);
    // Multicast adverts: unsigned ones are not learned, signed ones are.
    let from = IpEndpoint::new(ip(6), 427);
    d.handle_udp(T0, from, &advert(6, 1, None).to_bytes(), true);
    assert!(d.peers().is_empty());
    d.handle_udp(T0, from, &advert(6, 1, Some(&good)).to_bytes(), true);
    assert_eq!(d.peers().len(), 1);
    drain(&mut d);
    // A good advert on its own connection: peered, and we answer signed.
    let conn = open(&mut d, 2);
    d.handle_tcp(T0, conn, &advert(2, 1, Some(&good)).to_bytes());
    let (ev, tx) = drain(&mut d);
    assert!(ev.contains(&Event::PeerUp(da_url(2))), "{ev:?}");
    let ours = tx
        .iter()
        .find_map(|t| match t {
            Transmit::Tcp { bytes, .. } => match Message::parse(bytes).unwrap().body() {
                Body::DaAdvert(a) if a.url.as_str() == da_url(1) => Some(a.clone()),
                _ => None,
            },
            Transmit::Udp { .. } => None,
        })
        .unwrap();
    assert_eq!(ours.auths.len(), 1);
    // A forged shutdown advert (boot timestamp 0) tears nothing down; an
    // unsigned keepalive is ignored.
    d.handle_udp(
        T0,
        IpEndpoint::new(ip(2), 427),
        &advert(2, 0, None).to_bytes(),
        false,
    );
    d.handle_tcp(T0, conn, &advert(2, 1, None).to_bytes());
    assert_eq!(d.active_peers(), vec![da_url(2)]);
    assert_eq!(count(&d, "mda.peer_shutdown"), 0);
    assert_eq!(count(&d, "mda.keepalive_heard"), 0);
    d.handle_tcp(T0, conn, &advert(2, 1, Some(&good)).to_bytes());
    assert_eq!(count(&d, "mda.keepalive_heard"), 1);
    // The signed shutdown does.
    d.handle_tcp(T0, conn, &advert(2, 0, Some(&good)).to_bytes());
    assert!(d.active_peers().is_empty());
    assert_eq!(count(&d, "mda.peer_shutdown"), 1);
}

/// A static peer's unsigned (or cut short) UDP advert, the answer to our
/// probe, makes us connect by TCP, where the signed exchange decides.
#[test]
fn static_peers_are_authenticated_over_tcp() {
    let mut c = cfg(1, "x");
    c.keys = keys();
    c.peers = vec![ip(2)];
    let mut d = Mda::new(c, T0, &[]);
    d.handle_timeout(T0);
    drain(&mut d);
    d.handle_udp(
        T0,
        IpEndpoint::new(ip(2), 427),
        &advert(2, 1, None).to_bytes(),
        false,
    );
    let (ev, _) = drain(&mut d);
    assert!(
        ev.iter()
            .any(|e| matches!(e, Event::Connect { to, .. } if to.addr == ip(2))),
        "{ev:?}"
    );
    assert_eq!(d.counters()["mda.advert_retry_tcp"], 1);
    assert!(d.peers().is_empty(), "an unsigned advert is not learned");
    // Not for an address that is not a static peer.
    d.handle_udp(
        T0,
        IpEndpoint::new(ip(3), 427),
        &advert(3, 1, None).to_bytes(),
        false,
    );
    let (ev, _) = drain(&mut d);
    assert!(
        !ev.iter().any(|e| matches!(e, Event::Connect { .. })),
        "{ev:?}"
    );
}
