//! Incremental registrations and partial deregistrations in the mesh, on
//! one core: an SA's updates with MeshFwd (our extension), Fwded updates
//! from a peer in every arrival order, anti-entropy answers carrying them,
//! and the log. The result must always be the operations applied in
//! version order.

use smoltcp::wire::IpEndpoint;
use svcroute_stack::wire::slp::{
    AcceptId, AntiEntropyType, AntiEtrpRqst, AttrList, Body, DaAdvert, ErrorCode, Extension, FwdId,
    Header, LangTag, MeshFwd, Message, ScopeList,
};

use smoltcp::time::Duration;

use super::tests::{
    ack, attr_rqst, attrs, cfg, da, da_url, dereg, drain, ip, reg, rqst_fwd, s, with_body,
    with_header, LPR, SA, T0,
};
use super::*;

fn incr(url: &str, attrs: &str) -> Message {
    with_header(reg(url, attrs), |h| h.flags.fresh = false)
}

fn shown(d: &Mda, url: &str) -> Option<String> {
    d.registration(url, &LangTag::en())
        .filter(|r| !r.deleted)
        .map(|r| r.attrs.to_string())
}

/// Send `m` from the SA; its SrvAck's code, and the records persisted.
#[track_caller]
fn send(d: &mut Mda, m: &Message) -> (ErrorCode, Vec<Record>) {
    d.handle_udp(T0, SA, &m.to_bytes(), false);
    let (ev, tx) = drain(d);
    let code = match tx.as_slice() {
        [Transmit::Udp { bytes, .. }] => Message::parse(bytes).unwrap().body().error().unwrap(),
        other => panic!("not one reply: {other:?}"),
    };
    let records = ev
        .into_iter()
        .filter_map(|e| match e {
            Event::Persist(r) => Some(r),
            _ => None,
        })
        .collect();
    (code, records)
}

/// An SA's updates at one MDA, arriving out of version order: what shows
/// is always the operations applied in version order.
#[test]
fn sa_updates_apply_in_version_order_whatever_the_arrival() {
    let mut d = da();
    let mut log = Vec::new();
    let mut send = |d: &mut Mda, m: Message| {
        let (code, records) = send(d, &m);
        log.extend(records);
        code
    };
    let ok = ErrorCode::Ok;
    assert_eq!(
        send(&mut d, rqst_fwd(reg(LPR, "(a=1),(b=2),(c=3)"), 10)),
        ok
    );
    assert_eq!(send(&mut d, rqst_fwd(incr(LPR, "(c=30)"), 30)), ok);
    assert_eq!(shown(&d, LPR).as_deref(), Some("(a=1),(b=2),(c=30)"));
    // A late, older update: applied before the newer one, which still wins c.
    assert_eq!(send(&mut d, rqst_fwd(incr(LPR, "(c=20),(d=4)"), 20)), ok);
    assert_eq!(shown(&d, LPR).as_deref(), Some("(a=1),(b=2),(d=4),(c=30)"));
    assert_eq!(send(&mut d, rqst_fwd(dereg(LPR, "a"), 25)), ok);
    assert_eq!(shown(&d, LPR).as_deref(), Some("(b=2),(d=4),(c=30)"));
    assert_eq!(
        attrs(&mut d, T0, &attr_rqst(LPR, "")),
        (ok, "(b=2),(d=4),(c=30)".into())
    );
    // Older than the base, or repeated: acknowledged, nothing changes.
    let before = d.digest();
    assert_eq!(send(&mut d, rqst_fwd(dereg(LPR, "b"), 5)), ok);
    assert_eq!(send(&mut d, rqst_fwd(incr(LPR, "(c=30)"), 30)), ok);
    assert_eq!(d.digest(), before);
    assert_eq!(d.counters()["mda.stale_update"], 2);
    // A fresh registration newer than the base but older than two updates:
    // it replaces the base and the update before it; the newer ones stay.
    assert_eq!(send(&mut d, rqst_fwd(reg(LPR, "(e=5),(a=9)"), 22)), ok);
    assert_eq!(shown(&d, LPR).as_deref(), Some("(e=5),(c=30)"));
    let r = d.registration(LPR, &LangTag::en()).unwrap();
    assert_eq!(r.version, 22);
    assert_eq!(
        r.updates.iter().map(|u| u.version).collect::<Vec<_>>(),
        [25, 30]
    );
    // Every accepted operation has its own, increasing accept ID.
    let mut ids: Vec<&AcceptId> = r.updates.iter().map(|u| &u.accept).collect();
    ids.push(r.accept.as_ref().unwrap());
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 3);
    assert_eq!(d.counters()["mda.reg_incremental"], 2);
    assert_eq!(d.counters()["mda.dereg_partial"], 1);
    // A deregistration newer than all of it hides it; the log rebuilds it.
    assert_eq!(send(&mut d, rqst_fwd(dereg(LPR, ""), 40)), ok);
    assert_eq!(shown(&d, LPR), None);
    let d2 = Mda::new(cfg(1, "x,y"), T0, &log);
    assert_eq!(d2.digest(), d.digest());
    let (a, b) = (
        d2.registration(LPR, &LangTag::en()).unwrap(),
        d.registration(LPR, &LangTag::en()).unwrap(),
    );
    assert_eq!(
        (a.deleted, a.version, &a.accept, &a.updates, a.expires),
        (b.deleted, b.version, &b.accept, &b.updates, b.expires)
    );
}

#[test]
fn restart_rebuilds_updates_from_the_log() {
    let mut d = da();
    let mut log = Vec::new();
    for m in [
        rqst_fwd(reg(LPR, "(a=1),(b=2)"), 10),
        rqst_fwd(incr(LPR, "(b=3),(c=4)"), 20),
        rqst_fwd(dereg(LPR, "a"), 15),
    ] {
        let (code, records) = send(&mut d, &m);
        assert_eq!(code, ErrorCode::Ok);
        log.extend(records);
    }
    assert_eq!(shown(&d, LPR).as_deref(), Some("(b=3),(c=4)"));
    let d2 = Mda::new(cfg(1, "x,y"), T0, &log);
    assert_eq!(shown(&d2, LPR).as_deref(), Some("(b=3),(c=4)"));
    assert_eq!(d2.digest(), d.digest());
    assert_eq!(d2.summary(), d.summary());
    // A newer update after the restart gets a later accept ID.
    let mut d2 = d2;
    assert_eq!(
        ack(&mut d2, T0, &rqst_fwd(incr(LPR, "(z=1)"), 30)),
        ErrorCode::Ok
    );
    let r = d2.registration(LPR, &LangTag::en()).unwrap();
    let newest = r.updates.last().unwrap().accept.timestamp;
    assert!(r.updates.iter().all(|u| u.accept.timestamp <= newest));
    assert!(newest > r.accept.as_ref().unwrap().timestamp);
}

#[test]
fn plain_updates_of_a_mesh_state_stay_local() {
    let mut d = da();
    assert_eq!(
        ack(&mut d, T0, &rqst_fwd(reg(LPR, "(a=1)"), 10)),
        ErrorCode::Ok
    );
    assert_eq!(
        ack(&mut d, T0, &rqst_fwd(incr(LPR, "(b=2)"), 20)),
        ErrorCode::Ok
    );
    // No MeshFwd: applied to what shows, kept locally (RFC 3528 §5: a
    // non-MSA registers with every DA itself).
    assert_eq!(ack(&mut d, T0, &incr(LPR, "(c=3)")), ErrorCode::Ok);
    let r = d.registration(LPR, &LangTag::en()).unwrap();
    assert_eq!(r.attrs.to_string(), "(a=1),(b=2),(c=3)");
    assert!(r.accept.is_none() && r.updates.is_empty());
    assert_eq!(r.version, 10);
    assert_eq!(ack(&mut d, T0, &dereg(LPR, "b")), ErrorCode::Ok);
    assert_eq!(shown(&d, LPR).as_deref(), Some("(a=1),(c=3)"));
    // A newer mesh update still installs over the local base.
    assert_eq!(
        ack(&mut d, T0, &rqst_fwd(incr(LPR, "(d=4)"), 30)),
        ErrorCode::Ok
    );
    assert_eq!(shown(&d, LPR).as_deref(), Some("(a=1),(c=3),(d=4)"));
}

/// An identified peering connection from MDA `last` (its DAAdvert in
/// scope x), everything we send on it drained.
fn peer(d: &mut Mda, last: u8) -> ConnId {
    let conn = d
        .tcp_accepted(T0, IpEndpoint::new(ip(last), 40_000))
        .unwrap();
    let adv = DaAdvert {
        boot_timestamp: 1,
        url: s(&da_url(last)),
        scopes: ScopeList::parse("x").unwrap(),
        attrs: AttrList::parse("mesh-enhanced").unwrap(),
        ..DaAdvert::default()
    };
    let m = Message::new(Header::new(0, LangTag::en()), Body::DaAdvert(adv), vec![]).unwrap();
    d.handle_tcp(T0, conn, &m.to_bytes());
    drain(d);
    assert_eq!(d.active_peers(), vec![da_url(last)]);
    conn
}

/// `m` as MDA 2 forwards it: Fwded, version `v`, accepted at `ts`.
fn fwded(m: Message, v: u64, ts: u64) -> Message {
    let (h, b, _) = m.into_parts();
    let ext = Extension::MeshFwd(MeshFwd {
        fwd: FwdId::Fwded,
        version: v,
        accept: AcceptId {
            timestamp: ts,
            da_url: s(&da_url(2)),
        },
    });
    Message::new(h, b, vec![ext]).unwrap()
}

/// Heap's algorithm: every permutation of `0..n`.
fn permutations(n: usize) -> Vec<Vec<usize>> {
    fn go(k: usize, a: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
        if k == 1 {
            out.push(a.clone());
            return;
        }
        for i in 0..k {
            go(k - 1, a, out);
            let j = if k % 2 == 0 { i } else { 0 };
            a.swap(j, k - 1);
        }
    }
    let mut a: Vec<usize> = (0..n).collect();
    let mut out = Vec::new();
    go(n, &mut a, &mut out);
    out
}

/// Fwded operations from a peer, in every arrival order (including updates
/// before their base): the same state, the version-order result.
#[test]
fn fwded_updates_converge_in_every_arrival_order() {
    let ops = [
        fwded(reg(LPR, "(a=1),(b=2),(c=3)"), 10, 100),
        fwded(incr(LPR, "(c=20),(d=4)"), 20, 200),
        fwded(dereg(LPR, "a,d"), 30, 300),
        fwded(incr(LPR, "(d=40),(e=5)"), 40, 400),
        // Older than the base: must not count, whenever it arrives.
        fwded(incr(LPR, "(a=0)"), 5, 50),
    ];
    let want = "(b=2),(c=20),(d=40),(e=5)";
    let mut digests = Vec::new();
    for order in permutations(ops.len()) {
        let mut d = da();
        let conn = peer(&mut d, 2);
        for i in &order {
            d.handle_tcp(T0, conn, &ops[*i].to_bytes());
            let (_, tx) = drain(&mut d);
            assert!(tx.is_empty(), "a peer gets no SrvAck for Fwded (§4.9)");
        }
        assert_eq!(shown(&d, LPR).as_deref(), Some(want), "order {order:?}");
        digests.push(d.digest());
        assert_eq!(d.summary()[&da_url(2)], 400);
    }
    assert!(digests.iter().all(|x| *x == digests[0]));
    // Updates alone (their base never came): stored, shown nowhere.
    let mut d = da();
    let conn = peer(&mut d, 2);
    d.handle_tcp(T0, conn, &ops[1].to_bytes());
    assert_eq!(shown(&d, LPR), None);
    assert_eq!(d.registration_count(), 1);
    // A newer deregistration: hidden, and the updates before it go.
    d.handle_tcp(T0, conn, &ops[0].to_bytes());
    d.handle_tcp(T0, conn, &fwded(dereg(LPR, ""), 35, 350).to_bytes());
    d.handle_tcp(T0, conn, &ops[3].to_bytes());
    assert_eq!(shown(&d, LPR), None);
    let r = d.registration(LPR, &LangTag::en()).unwrap();
    assert!(r.deleted);
    assert_eq!(
        r.updates.iter().map(|u| u.version).collect::<Vec<_>>(),
        [40]
    );
}

/// An anti-entropy answer carries every base and update the requester
/// lacks, in increasing accept-ID order, as Fwded messages.
#[test]
fn anti_entropy_sends_updates_in_accept_order() {
    let mut d = da();
    for (m, now) in [
        (rqst_fwd(reg(LPR, "(a=1)"), 10), 0),
        (rqst_fwd(incr(LPR, "(b=2)"), 20), 1),
        (rqst_fwd(dereg(LPR, "a"), 30), 2),
    ] {
        let at = T0 + Duration::from_secs(now);
        assert_eq!(ack(&mut d, at, &m), ErrorCode::Ok);
    }
    let r = d.registration(LPR, &LangTag::en()).unwrap().clone();
    let conn = peer(&mut d, 2);
    let ask = |d: &mut Mda, ids: Vec<AcceptId>| -> Vec<Message> {
        let body = Body::AntiEtrpRqst(AntiEtrpRqst {
            kind: AntiEntropyType::Complete,
            accept_ids: List::new(ids).unwrap(),
        });
        let m = Message::new(Header::new(77, LangTag::en()), body, vec![]).unwrap();
        d.handle_tcp(T0, conn, &m.to_bytes());
        drain(d)
            .1
            .into_iter()
            .map(|t| match t {
                Transmit::Tcp { bytes, .. } => Message::parse(&bytes).unwrap(),
                Transmit::Udp { .. } => panic!("UDP in an anti-entropy answer"),
            })
            .collect()
    };
    let all = ask(&mut d, vec![]);
    let kinds: Vec<(FunctionId, bool, u64)> = all
        .iter()
        .map(|m| {
            (
                m.function(),
                m.header().flags.fresh,
                m.mesh_fwd().map_or(0, |f| f.version),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            (FunctionId::SrvReg, true, 10),
            (FunctionId::SrvReg, false, 20),
            (FunctionId::SrvDeReg, false, 30),
            (FunctionId::SrvAck, false, 0),
        ]
    );
    let accepts: Vec<u64> = all[..3]
        .iter()
        .map(|m| m.mesh_fwd().unwrap().accept.timestamp)
        .collect();
    assert!(accepts.windows(2).all(|w| w[0] < w[1]), "{accepts:?}");
    assert!(all[..3]
        .iter()
        .all(|m| m.mesh_fwd().unwrap().fwd == FwdId::Fwded));
    match all[2].body() {
        Body::SrvDeReg(x) => assert_eq!(x.tags.as_raw(), "a"),
        b => panic!("{b:?}"),
    }
    // With the base's accept ID already known, only the updates come.
    let known = r.accept.clone().unwrap();
    let rest = ask(&mut d, vec![known]);
    assert_eq!(rest.len(), 3, "{rest:?}");
    assert!(rest[..2].iter().all(|m| !m.header().flags.fresh));
    // Applying the answer at another MDA rebuilds the same state.
    let mut e = Mda::new(cfg(3, "x"), T0, &[]);
    let c = peer(&mut e, 1);
    for m in &all[..3] {
        // As MDA 1's messages: re-label the accept DA.
        let f = m.mesh_fwd().unwrap().clone();
        let (h, b, _) = m.clone().into_parts();
        let m = Message::new(h, b, vec![Extension::MeshFwd(f)]).unwrap();
        e.handle_tcp(T0, c, &m.to_bytes());
    }
    drain(&mut e);
    assert_eq!(shown(&e, LPR), shown(&d, LPR));
    assert_eq!(e.digest(), d.digest());
}

#[test]
fn updates_lifetimes_follow_the_newest_incremental() {
    let mut d = da();
    let long = with_body_lifetime(rqst_fwd(reg(LPR, "(a=1)"), 10), 1000);
    assert_eq!(ack(&mut d, T0, &long), ErrorCode::Ok);
    let short = with_body_lifetime(rqst_fwd(incr(LPR, "(b=2)"), 20), 100);
    assert_eq!(ack(&mut d, T0, &short), ErrorCode::Ok);
    let r = d.registration(LPR, &LangTag::en()).unwrap();
    assert_eq!(r.lifetime, 100);
    assert_eq!(r.remaining(T0), 100);
    // A partial deregistration does not change it.
    assert_eq!(
        ack(&mut d, T0, &rqst_fwd(dereg(LPR, "a"), 30)),
        ErrorCode::Ok
    );
    assert_eq!(d.registration(LPR, &LangTag::en()).unwrap().lifetime, 100);
    d.handle_timeout(T0 + Duration::from_secs(101));
    assert_eq!(d.registration_count(), 0);
    assert_eq!(d.counters()["mda.expired"], 1);
}

fn with_body_lifetime(m: Message, lifetime: u16) -> Message {
    with_body(m, |b| match b {
        Body::SrvReg(r) => r.entry.lifetime = lifetime,
        Body::SrvDeReg(r) => r.entry.lifetime = lifetime,
        _ => {}
    })
}
