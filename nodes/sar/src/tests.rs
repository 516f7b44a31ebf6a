//! Single-SAR traces: announcements in, decisions out.

use std::net::{IpAddr, Ipv6Addr};

use smoltcp::time::{Duration, Instant};
use smoltcp::wire::IpProtocol;
use svcroute_stack::wire::igp::RouterId;
use svcroute_stack::wire::rosa::{
    Constraint, Constraints, Entry, FlowPort, Message, MessageKind, Mode, Policy,
};

use crate::*;

const T0: Instant = Instant::from_millis_const(100_000);
const ME: &str = "fd00::1";
const CLIENT: &str = "fd01::c";

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn sar_with(tweak: impl FnOnce(&mut Config)) -> Sar {
    let mut cfg = Config::new(RouterId(1), ME.parse().unwrap());
    tweak(&mut cfg);
    Sar::new(cfg, T0)
}

fn sar() -> Sar {
    sar_with(|_| {})
}

fn announcement(kind: MessageKind, name: &str, instance: &str, c: Vec<Constraint>) -> Message {
    let mut entries = vec![
        Entry::Instance(ip(instance)),
        Entry::Service(name.parse().unwrap()),
    ];
    if !c.is_empty() {
        entries.push(Entry::Constraint(Constraints(c)));
    }
    Message { kind, entries }
}

fn mp(mode: Mode, policy: Policy) -> Constraint {
    Constraint::ModePolicy { mode, policy }
}

/// Announce through `decide`, as the driver would; asserts it was taken.
#[track_caller]
fn announce(sar: &mut Sar, now: Instant, name: &str, instance: &str, c: Vec<Constraint>) {
    let m = announcement(MessageKind::Announcement, name, instance, c);
    let v = PacketView {
        src: ip(instance),
        dst: ip(ME),
        rosa: &m,
        port: PortKind::Client,
    };
    assert_eq!(sar.decide(now, &v), Action::Consumed);
}

fn request(name: &str) -> Message {
    Message {
        kind: MessageKind::Request,
        entries: vec![
            Entry::Client(ip(CLIENT)),
            Entry::Ingress(ip(ME)),
            Entry::Service(name.parse().unwrap()),
            Entry::Port(FlowPort {
                proto: IpProtocol::Tcp,
                port: 80,
            }),
        ],
    }
}

fn ask(sar: &mut Sar, now: Instant, name: &str) -> Action {
    let m = request(name);
    sar.decide(
        now,
        &PacketView {
            src: ip(CLIENT),
            dst: ip(ME),
            rosa: &m,
            port: PortKind::Client,
        },
    )
}

/// The instance a request for `name` goes to (it is local here).
#[track_caller]
fn pick(sar: &mut Sar, now: Instant, name: &str) -> IpAddr {
    match ask(sar, now, name) {
        Action::DeliverLocal { instance, .. } => instance,
        other => panic!("expected local delivery, got {other:?}"),
    }
}

#[test]
fn announce_then_longest_prefix_then_wildcard() {
    let mut s = sar();
    assert_eq!(
        ask(&mut s, T0, "svc.org/video"),
        Action::Drop(DropReason::NoRoute)
    );
    announce(&mut s, T0, "svc.org/video", "fd02::9", vec![]);
    announce(&mut s, T0, "svc.org", "fd02::8", vec![]);
    // A request without Client/Ingress gets them filled in.
    let m = Message {
        kind: MessageKind::Request,
        entries: vec![Entry::Service("svc.org/video/4k".parse().unwrap())],
    };
    let v = PacketView {
        src: ip(CLIENT),
        dst: ip(ME),
        rosa: &m,
        port: PortKind::Client,
    };
    assert_eq!(
        s.decide(T0, &v),
        Action::DeliverLocal {
            instance: ip("fd02::9"),
            fill: Fill {
                client: Some(ip(CLIENT)),
                ingress: Some(ip(ME)),
            },
        }
    );
    assert_eq!(pick(&mut s, T0, "svc.org/audio"), ip("fd02::8"));
    assert_eq!(
        ask(&mut s, T0, "other.net"),
        Action::Drop(DropReason::NoRoute)
    );
    // The SAG originates `*`: everything unknown goes there.
    announce(&mut s, T0, "*", "fd02::5a", vec![]);
    assert_eq!(pick(&mut s, T0, "other.net/x"), ip("fd02::5a"));
    assert_eq!(pick(&mut s, T0, "svc.org/video"), ip("fd02::9"));
    let c = s.counters();
    assert_eq!(c["sar.announce_added"], 3);
    assert_eq!(c["drop.sar.no_route"], 2);
    assert_eq!(c["sar.request_deliver_local"], 4);
}

#[test]
fn round_robin_exact_through_the_fib() {
    let mut s = sar();
    let rr = || vec![mp(Mode::Scheduling, Policy::RoundRobin)];
    // Announced out of order: the cycle is in address order.
    for a in ["fd02::3", "fd02::1", "fd02::2"] {
        announce(&mut s, T0, "rr.org", a, rr());
    }
    let picks: Vec<IpAddr> = (0..300).map(|_| pick(&mut s, T0, "rr.org/x")).collect();
    for (k, p) in picks.iter().enumerate() {
        let want = ["fd02::1", "fd02::2", "fd02::3"][k % 3];
        assert_eq!(*p, ip(want), "pick {k}");
    }
}

#[test]
fn weighted_by_capability_and_follows_new_capabilities() {
    let mut s = sar();
    let w = |cap| {
        vec![
            mp(Mode::Scheduling, Policy::Weighted),
            Constraint::Capability(cap),
        ]
    };
    announce(&mut s, T0, "w.org", "fd02::1", w(3));
    announce(&mut s, T0, "w.org", "fd02::2", w(1));
    let count = |s: &mut Sar, n| {
        let mut c = [0; 2];
        for _ in 0..n {
            let p = pick(s, T0, "w.org");
            c[usize::from(p == ip("fd02::2"))] += 1;
        }
        c
    };
    assert_eq!(count(&mut s, 400), [300, 100]);
    // Re-orchestrated: capabilities change, the ratio follows exactly.
    announce(&mut s, T0, "w.org", "fd02::2", w(4));
    assert_eq!(count(&mut s, 700), [300, 400]);
}

#[test]
fn min_metric_follows_metric_changes() {
    let mut s = sar();
    let m = |load| {
        vec![
            mp(Mode::Scheduling, Policy::MinMetric),
            Constraint::Load(load),
        ]
    };
    announce(&mut s, T0, "m.org", "fd02::1", m(50));
    announce(&mut s, T0, "m.org", "fd02::2", m(10));
    for _ in 0..5 {
        assert_eq!(pick(&mut s, T0, "m.org"), ip("fd02::2"));
    }
    announce(&mut s, T0, "m.org", "fd02::1", m(5));
    assert_eq!(pick(&mut s, T0, "m.org"), ip("fd02::1"));
    announce(&mut s, T0, "m.org", "fd02::2", m(1));
    assert_eq!(pick(&mut s, T0, "m.org"), ip("fd02::2"));
}

#[test]
fn random_is_seeded() {
    let run = |seed| {
        let mut s = sar_with(|c| c.seed = seed);
        for a in ["fd02::1", "fd02::2", "fd02::3"] {
            announce(
                &mut s,
                T0,
                "r.org",
                a,
                vec![mp(Mode::Scheduling, Policy::Random)],
            );
        }
        (0..3000)
            .map(|_| pick(&mut s, T0, "r.org"))
            .collect::<Vec<_>>()
    };
    let a = run(1);
    assert_eq!(a, run(1));
    assert_ne!(a, run(2));
    for inst in ["fd02::1", "fd02::2", "fd02::3"] {
        let n = a.iter().filter(|p| **p == ip(inst)).count();
        assert!((850..=1150).contains(&n), "{inst}: {n}");
    }
}

#[test]
fn lifetime_expiry_and_refresh() {
    let mut s = sar();
    let life = |secs| vec![Constraint::LifetimeS(secs)];
    announce(&mut s, T0, "l.org", "fd02::1", life(10));
    announce(&mut s, T0, "l.org", "fd02::2", life(20));
    assert_eq!(
        s.poll_timeout().map(|t| t <= T0 + Duration::from_secs(10)),
        Some(true)
    );
    // fd02::1 stops announcing: it is chosen until its lifetime ends, never after.
    let t = T0 + Duration::from_millis(9_999);
    s.handle_timeout(t);
    assert_eq!(pick(&mut s, t, "l.org"), ip("fd02::1"));
    let t = T0 + Duration::from_secs(10);
    s.handle_timeout(t);
    assert_eq!(pick(&mut s, t, "l.org"), ip("fd02::2"));
    assert_eq!(s.counters()["sar.instance_expired"], 1);
    // fd02::2 refreshes before its end and stays.
    let t = T0 + Duration::from_secs(15);
    announce(&mut s, t, "l.org", "fd02::2", life(20));
    let t = T0 + Duration::from_secs(30);
    s.handle_timeout(t);
    assert_eq!(pick(&mut s, t, "l.org"), ip("fd02::2"));
    let t = T0 + Duration::from_secs(35);
    s.handle_timeout(t);
    assert_eq!(ask(&mut s, t, "l.org"), Action::Drop(DropReason::NoRoute));
    assert!(s.fib().is_empty());
    assert!(s.nhib().is_empty());
    assert_eq!(s.local_instances().count(), 0);
    // No lifetime constraint: the configured default (30 s).
    announce(&mut s, t, "l.org", "fd02::3", vec![]);
    s.handle_timeout(t + Duration::from_secs(29));
    assert_eq!(
        pick(&mut s, t + Duration::from_secs(29), "l.org"),
        ip("fd02::3")
    );
    s.handle_timeout(t + Duration::from_secs(30));
    assert!(s.fib().is_empty());
}

#[test]
fn withdrawal_is_immediate() {
    let mut s = sar();
    announce(&mut s, T0, "w.org", "fd02::1", vec![]);
    announce(&mut s, T0, "w.org", "fd02::2", vec![]);
    assert_eq!(pick(&mut s, T0, "w.org"), ip("fd02::1"));
    let m = announcement(MessageKind::Withdrawal, "w.org", "fd02::1", vec![]);
    assert_eq!(
        s.handle_announcement(T0, ip("fd02::1"), &m),
        Ok(Announced::Withdrawn)
    );
    assert_eq!(pick(&mut s, T0, "w.org"), ip("fd02::2"));
    // Twice: nothing to withdraw; lifetime 0 withdraws too.
    assert_eq!(
        s.handle_announcement(T0, ip("fd02::1"), &m),
        Ok(Announced::Unknown)
    );
    let m = announcement(
        MessageKind::Announcement,
        "w.org",
        "fd02::2",
        vec![Constraint::LifetimeS(0)],
    );
    assert_eq!(
        s.handle_announcement(T0, ip("fd02::2"), &m),
        Ok(Announced::Withdrawn)
    );
    assert_eq!(ask(&mut s, T0, "w.org"), Action::Drop(DropReason::NoRoute));
    let c = s.counters();
    assert_eq!(
        (c["sar.announce_withdrawn"], c["sar.withdraw_unknown"]),
        (2, 1)
    );
}

#[test]
fn hmac_refusals_never_install() {
    let secret = b"announce-secret".to_vec();
    let mut s = sar_with(|c| {
        c.announce_keys.insert(3, secret.clone());
    });
    let src: Ipv6Addr = "fd02::9".parse().unwrap();
    let base = announcement(MessageKind::Announcement, "a.org", "fd02::9", vec![]);
    let try_it = |s: &mut Sar, m: &Message, from: Ipv6Addr| {
        let v = PacketView {
            src: IpAddr::V6(from),
            dst: ip(ME),
            rosa: m,
            port: PortKind::Client,
        };
        s.decide(T0, &v)
    };
    let refused = |e| Action::Drop(DropReason::Announce(e));
    // Missing.
    assert_eq!(
        try_it(&mut s, &base, src),
        refused(AnnounceError::AuthMissing)
    );
    // Forged: signed with another secret.
    let mut forged = base.clone();
    forged.sign(3, b"guess", src).unwrap();
    assert_eq!(
        try_it(&mut s, &forged, src),
        refused(AnnounceError::AuthBad)
    );
    // Unknown key ID.
    let mut other = base.clone();
    other.sign(4, &secret, src).unwrap();
    assert_eq!(
        try_it(&mut s, &other, src),
        refused(AnnounceError::AuthUnknownKey)
    );
    // Good tag, but replayed from another source address.
    let mut good = base.clone();
    good.sign(3, &secret, src).unwrap();
    let elsewhere = "fd02::66".parse().unwrap();
    assert_eq!(
        try_it(&mut s, &good, elsewhere),
        refused(AnnounceError::AuthBad)
    );
    // A signed withdrawal with a bad tag does not remove anything either.
    assert!(s.fib().is_empty() && s.nhib().is_empty());
    assert_eq!(try_it(&mut s, &good, src), Action::Consumed);
    assert_eq!(pick(&mut s, T0, "a.org"), ip("fd02::9"));
    let mut w = announcement(MessageKind::Withdrawal, "a.org", "fd02::9", vec![]);
    w.sign(3, b"guess", src).unwrap();
    assert_eq!(try_it(&mut s, &w, src), refused(AnnounceError::AuthBad));
    assert_eq!(pick(&mut s, T0, "a.org"), ip("fd02::9"));
    let c = s.counters();
    assert_eq!(c["drop.sar.announce_auth_missing"], 1);
    assert_eq!(c["drop.sar.announce_auth_bad"], 3);
    assert_eq!(c["drop.sar.announce_auth_unknown_key"], 1);
    assert_eq!(c["sar.announce_added"], 1);
}

#[test]
fn caps_hold_under_an_announcement_flood() {
    let mut s = sar_with(|c| {
        c.max_services = 100;
        c.max_instances_per_service = 3;
        c.max_local_instances = 150;
    });
    for i in 0..1000 {
        let m = announcement(
            MessageKind::Announcement,
            &format!("flood{i}.org"),
            "fd02::1",
            vec![],
        );
        let _ = s.handle_announcement(T0, ip("fd02::1"), &m);
    }
    assert_eq!(s.fib().len(), 100);
    assert_eq!(s.counters()["drop.sar.fib_full"], 900);
    // Existing names still take refreshes; new instances of them too, up
    // to the per-service cap.
    for k in 2..=5 {
        let m = announcement(
            MessageKind::Announcement,
            "flood0.org",
            &format!("fd02::{k}"),
            vec![],
        );
        let _ = s.handle_announcement(T0, ip("fd02::1"), &m);
    }
    assert_eq!(s.instances_of(&"flood0.org".parse().unwrap()).len(), 3);
    assert_eq!(s.counters()["drop.sar.service_instances_full"], 2);
    // The local-instance cap.
    let mut s = sar_with(|c| c.max_local_instances = 10);
    for i in 0..20 {
        let m = announcement(
            MessageKind::Announcement,
            &format!("x{i}.org"),
            "fd02::1",
            vec![],
        );
        let _ = s.handle_announcement(T0, ip("fd02::1"), &m);
    }
    assert_eq!(s.fib().len(), 10);
    assert_eq!(s.counters()["drop.sar.local_instances_full"], 10);
    // The NHIB cap.
    let mut s = sar_with(|c| c.max_instances = 5);
    for i in 0..8 {
        let m = announcement(
            MessageKind::Announcement,
            "y.org",
            &format!("fd02::{}", i + 1),
            vec![],
        );
        let _ = s.handle_announcement(T0, ip("fd02::1"), &m);
    }
    assert_eq!(s.nhib().len(), 5);
    assert_eq!(s.counters()["drop.sar.nhib_full"], 3);
}

#[test]
fn ports_and_roles() {
    let mut s = sar_with(|c| c.client_facing = false);
    announce(&mut s, T0, "p.org", "fd02::1", vec![]);
    assert_eq!(
        ask(&mut s, T0, "p.org"),
        Action::Drop(DropReason::NotClientFacing)
    );
    // From a SAR port it is routed (here: delivered to the local instance).
    let m = request("p.org");
    let v = PacketView {
        src: ip("fd00::2"),
        dst: ip(ME),
        rosa: &m,
        port: PortKind::Sar,
    };
    assert_eq!(
        s.decide(T0, &v),
        Action::DeliverLocal {
            instance: ip("fd02::1"),
            fill: Fill::default()
        }
    );
    // Announcements are not taken from SAR ports.
    let m = announcement(MessageKind::Announcement, "q.org", "fd02::1", vec![]);
    let v = PacketView {
        src: ip("fd00::2"),
        dst: ip(ME),
        rosa: &m,
        port: PortKind::Sar,
    };
    assert_eq!(
        s.decide(T0, &v),
        Action::Drop(DropReason::AnnouncementFromSar)
    );
    // Responses: we are the Ingress.
    let mut m = request("p.org");
    m.kind = MessageKind::Response;
    m.set(Entry::Instance(ip("fd02::1")));
    let v = PacketView {
        src: ip("fd02::1"),
        dst: ip(ME),
        rosa: &m,
        port: PortKind::Client,
    };
    assert_eq!(
        s.decide(T0, &v),
        Action::ResponseToClient { client: ip(CLIENT) }
    );
    assert_eq!(s.counters()["sar.response_to_client"], 1);
    let drained = s.drain_counters();
    assert_eq!(drained["sar.response_to_client"], 1);
    assert!(s.drain_counters().is_empty());
}

/// An IPv4 instance is refused: no SAR can steer a request to it (issue 12:
/// it used to be installed and flooded domain-wide).
#[test]
fn an_ipv4_instance_is_refused_and_counted() {
    let mut s = sar();
    let m = announcement(MessageKind::Announcement, "v4.org", "10.0.0.9", vec![]);
    let v = PacketView {
        src: ip("fd02::9"),
        dst: ip(ME),
        rosa: &m,
        port: PortKind::Client,
    };
    assert_eq!(
        s.decide(T0, &v),
        Action::Drop(DropReason::Announce(AnnounceError::Ipv4Instance))
    );
    assert!(s.fib().is_empty() && s.nhib().is_empty());
    assert_eq!(s.counters()["drop.sar.announce_ipv4_instance"], 1);
    assert!(s
        .igp()
        .lsas(T0)
        .all(|l| l.body.kind() != svcroute_stack::wire::igp::LsaKind::Services));
}
