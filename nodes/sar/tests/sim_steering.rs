//! Per-instance steering: one name served by a scheduled set and a routed
//! instance, on four SAR cores shaped like the ROSA example lab
//! (`examples/labs/rosa.toml`), in virtual time.
//!
//! ```text
//!   client ─ S1 ──── [10] ──── S2 ── SET[0], SET[1]  svc.org  scheduling/round-robin
//!            │ ╲               │
//!          [15]  ╲ [30]      [10]
//!            │     ╲           │
//!            S4 ──── [10] ──── S3 ── ROUTED[k]       svc.org  routing/shortest
//! ```
//!
//! The scheduled set counts as one site: an ingress nearer to it than to
//! the routed instance schedules over the set (round robin, exactly over
//! the set), one nearer to the routed instance routes to it, and SARs that
//! are not the ingress always route. Each case runs with the routed
//! instance's address below and above the set's, since the old per-name
//! rule let the lowest address decide for all.

use std::net::IpAddr;

use smoltcp::time::Duration;
use smoltcp::wire::IpProtocol;
use svcroute_sar::sim::{router_addr, Sim};
use svcroute_sar::{Action, EntrySteering, PacketView, PortKind, RoutePolicy, SchedPolicy};
use svcroute_stack::wire::igp::RouterId;
use svcroute_stack::wire::rosa::{
    Constraint, Constraints, Entry, FlowPort, Message, MessageKind, Mode, Policy,
};

const NAME: &str = "svc.org";
const CLIENT: &str = "fd01::c";
const SET: [&str; 2] = ["fd02::b:11", "fd02::b:12"];
/// The routed instance's address below the set's, and above it.
const ROUTED: [&str; 2] = ["fd02::a:11", "fd02::d:11"];

/// Node indices (router ID = index + 1).
const S1: usize = 0;
const S2: usize = 1;
const S3: usize = 2;
const S4: usize = 3;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// The four SARs, converged; the index of link S1 ─ S2.
fn square() -> (Sim, usize) {
    let mut sim = Sim::with_routers(4, 0.0, 1, |_| {});
    let ms = Duration::from_millis(1);
    let l12 = sim.connect(S1, S2, 10, ms);
    sim.connect(S2, S3, 10, ms);
    sim.connect(S3, S4, 10, ms);
    sim.connect(S1, S4, 15, ms);
    sim.connect(S1, S3, 30, ms);
    settle(&mut sim);
    (sim, l12)
}

#[track_caller]
fn settle(sim: &mut Sim) {
    let deadline = sim.now() + Duration::from_secs(60);
    sim.run_until_pred(deadline, Sim::converged)
        .unwrap_or_else(|| panic!("no convergence by {deadline}"));
    // Services LSAs flood after the routes settle.
    sim.run_until(sim.now() + Duration::from_secs(2));
}

fn mode_policy(mode: Mode, policy: Policy) -> Vec<Constraint> {
    vec![Constraint::ModePolicy { mode, policy }]
}

fn control(sim: &mut Sim, node: usize, kind: MessageKind, inst: &str, c: Vec<Constraint>) {
    let mut entries = vec![
        Entry::Instance(ip(inst)),
        Entry::Service(NAME.parse().unwrap()),
    ];
    if !c.is_empty() {
        entries.push(Entry::Constraint(Constraints(c)));
    }
    let m = Message { kind, entries };
    sim.with_node(node, |s, now| s.handle_announcement(now, ip(inst), &m))
        .expect("announcement taken");
}

/// The set at S2 (round robin) and the routed instance `routed` at S3.
fn mixed(routed: &str) -> (Sim, usize) {
    let (mut sim, l12) = square();
    for i in SET {
        let rr = mode_policy(Mode::Scheduling, Policy::RoundRobin);
        control(&mut sim, S2, MessageKind::Announcement, i, rr);
    }
    let shortest = mode_policy(Mode::Routing, Policy::Shortest);
    control(&mut sim, S3, MessageKind::Announcement, routed, shortest);
    settle(&mut sim);
    (sim, l12)
}

fn request() -> Message {
    Message {
        kind: MessageKind::Request,
        entries: vec![
            Entry::Client(ip(CLIENT)),
            Entry::Ingress(IpAddr::V6(router_addr(1))),
            Entry::Service(NAME.parse().unwrap()),
            Entry::Port(FlowPort {
                proto: IpProtocol::Tcp,
                port: 443,
            }),
        ],
    }
}

/// A request arriving at `at` on `port` from `src`: the action.
fn decide(sim: &mut Sim, at: usize, port: PortKind, src: IpAddr) -> Action {
    let m = request();
    let v = PacketView {
        src,
        dst: IpAddr::V6(sim.nodes[at].address()),
        rosa: &m,
        port,
    };
    sim.with_node(at, |s, now| s.decide(now, &v))
}

/// Where a client's request entering at `ingress` ends up: the SARs it
/// visits and the final action.
fn follow(sim: &mut Sim, ingress: usize) -> (Vec<usize>, Action) {
    let mut path = vec![ingress];
    let (mut at, mut port, mut src) = (ingress, PortKind::Client, ip(CLIENT));
    for _ in 0..10 {
        match decide(sim, at, port, src) {
            Action::ToNextSar { router, sar, .. } => {
                src = IpAddr::V6(sim.nodes[at].address());
                assert_eq!(sar, IpAddr::V6(router_addr(router.0)));
                (at, port) = (router.0 as usize - 1, PortKind::Sar);
                path.push(at);
            }
            other => return (path, other),
        }
    }
    panic!("request loops: {path:?}");
}

/// The instance a request entering at `ingress` is scheduled to (sent
/// straight there by the ingress).
#[track_caller]
fn scheduled_from(sim: &mut Sim, ingress: usize) -> IpAddr {
    match follow(sim, ingress) {
        (
            path,
            Action::ToInstance {
                instance, origin, ..
            },
        ) => {
            assert_eq!((path, origin), (vec![ingress], RouterId(2)));
            instance
        }
        other => panic!("not scheduled: {other:?}"),
    }
}

/// A request entering at `ingress` is routed along `path` and delivered
/// to `instance` by the last SAR of it.
#[track_caller]
fn assert_routed(sim: &mut Sim, ingress: usize, path: &[usize], instance: &str) {
    let (p, a) = follow(sim, ingress);
    assert_eq!(p, path, "{a:?}");
    match a {
        Action::DeliverLocal { instance: i, .. } => assert_eq!(i, ip(instance)),
        other => panic!("not delivered: {other:?}"),
    }
}

/// `n` requests at `ingress` go round robin over exactly the set.
#[track_caller]
fn assert_round_robin(sim: &mut Sim, ingress: usize, n: usize) {
    let picks: Vec<IpAddr> = (0..n).map(|_| scheduled_from(sim, ingress)).collect();
    let first = SET
        .iter()
        .position(|s| ip(s) == picks[0])
        .expect("in the set");
    for (k, p) in picks.iter().enumerate() {
        assert_eq!(*p, ip(SET[(first + k) % 2]), "{picks:?}");
    }
}

#[test]
fn every_sar_sees_a_mixed_entry() {
    for routed in ROUTED {
        let (sim, _) = mixed(routed);
        for s in &sim.nodes {
            let e = s.fib().get(&NAME.parse().unwrap()).expect("learnt");
            assert_eq!(e.members.len(), 3);
            assert_eq!(
                e.steering,
                EntrySteering::Mixed {
                    schedule: SchedPolicy::RoundRobin,
                    route: RoutePolicy::Shortest,
                },
                "at {:?}",
                s.router_id()
            );
            assert_eq!(
                e.steering.to_string(),
                "Mixed(Schedule(RoundRobin), Route(Shortest))"
            );
            // The scheduling state covers the set only.
            assert_eq!(e.scheduled().count(), 2);
        }
    }
}

#[test]
fn an_ingress_nearer_the_scheduled_set_schedules_over_it_only() {
    for routed in ROUTED {
        let (mut sim, _) = mixed(routed);
        // S1: the set at 10, the routed instance at 20.
        assert_round_robin(&mut sim, S1, 9);
        // S2 itself: the set is attached (0), delivered locally in turn.
        let local: Vec<IpAddr> = (0..4)
            .map(|_| match follow(&mut sim, S2) {
                (p, Action::DeliverLocal { instance, .. }) if p == [S2] => instance,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(local, [ip(SET[0]), ip(SET[1]), ip(SET[0]), ip(SET[1])]);
    }
}

#[test]
fn an_ingress_nearer_the_routed_instance_routes_to_it() {
    for routed in ROUTED {
        let (mut sim, l12) = mixed(routed);
        // S4: the routed instance at 10, the set at 20 (S4 → S3 → S2).
        assert_routed(&mut sim, S4, &[S4, S3], routed);
        assert_routed(&mut sim, S3, &[S3], routed);
        // Cut S1 ─ S2: from S1 the set is at 35, the routed instance at 25
        // over S4; heal it and the set is nearer again.
        sim.fail_link(l12, true);
        settle(&mut sim);
        assert_routed(&mut sim, S1, &[S1, S4, S3], routed);
        sim.repair_link(l12);
        settle(&mut sim);
        assert_round_robin(&mut sim, S1, 4);
    }
}

#[test]
fn a_sar_that_is_not_the_ingress_routes() {
    for routed in ROUTED {
        let (mut sim, _) = mixed(routed);
        // S1 asked by a SAR (not the ingress): no scheduling, the nearest
        // instance by path, the set's lower-addressed one at S2.
        let from = IpAddr::V6(router_addr(4));
        match decide(&mut sim, S1, PortKind::Sar, from) {
            Action::ToNextSar {
                router, instance, ..
            } => assert_eq!((router, instance), (RouterId(2), ip(SET[0]))),
            other => panic!("{other:?}"),
        }
        // S4 asked by a SAR: the routed instance, the same pick as S4 as
        // an ingress makes, so the hops agree.
        let from = IpAddr::V6(router_addr(1));
        match decide(&mut sim, S4, PortKind::Sar, from) {
            Action::ToNextSar {
                router, instance, ..
            } => assert_eq!((router, instance), (RouterId(3), ip(routed))),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn without_the_set_the_routed_instance_serves_and_without_it_the_set() {
    for routed in ROUTED {
        // The set withdrawn: routed to the one instance left, from S1 too.
        let (mut sim, _) = mixed(routed);
        for i in SET {
            control(&mut sim, S2, MessageKind::Withdrawal, i, vec![]);
        }
        settle(&mut sim);
        assert_eq!(
            sim.nodes[S1]
                .fib()
                .get(&NAME.parse().unwrap())
                .unwrap()
                .steering,
            EntrySteering::Route(RoutePolicy::Shortest)
        );
        assert_routed(&mut sim, S1, &[S1, S2, S3], routed);

        // The routed instance withdrawn: scheduled, even from S4 (nearer
        // S3), exactly round robin.
        let (mut sim, _) = mixed(routed);
        control(&mut sim, S3, MessageKind::Withdrawal, routed, vec![]);
        settle(&mut sim);
        assert_eq!(
            sim.nodes[S4]
                .fib()
                .get(&NAME.parse().unwrap())
                .unwrap()
                .steering,
            EntrySteering::Schedule(SchedPolicy::RoundRobin)
        );
        assert_round_robin(&mut sim, S4, 6);
    }
}

#[test]
fn an_unreachable_set_leaves_the_routed_instance() {
    for routed in ROUTED {
        // S2 cut off: its instances stay in the FIB (their LSAs live on)
        // but are unreachable, so the mixed entry routes to S3.
        let (mut sim, l12) = mixed(routed);
        sim.fail_link(l12, true);
        let l23 = sim
            .links
            .iter()
            .position(|l| (l.a.0, l.b.0) == (S2, S3))
            .unwrap();
        sim.fail_link(l23, true);
        sim.run_until(sim.now() + Duration::from_secs(5));
        let e = sim.nodes[S1].fib().get(&NAME.parse().unwrap()).unwrap();
        assert!(matches!(e.steering, EntrySteering::Mixed { .. }));
        assert_routed(&mut sim, S1, &[S1, S4, S3], routed);
        assert_routed(&mut sim, S4, &[S4, S3], routed);
    }
}
