//! Ten SAR cores on the in-memory bus (virtual time, seeded loss): the IGP
//! converges to identical LSDBs and exact shortest paths, RTTs are measured,
//! a link failure re-converges and requests re-route, announcements travel
//! with their lifetimes and withdrawals, authentication keeps outsiders
//! out, a restarted SAR takes its LSAs back, and a flood of LSAs stays
//! bounded.

use std::net::{IpAddr, Ipv6Addr};

use smoltcp::time::{Duration, Instant};
use smoltcp::wire::IpProtocol;
use svcroute_sar::igp::{Key, NeighborState};
use svcroute_sar::sim::{build, router_addr, Sim, TEN_SARS};
use svcroute_sar::{Action, Config, LinkId, PacketView, PortKind, Sar};
use svcroute_stack::wire::igp::{
    self, Hello, HelloEcho, Lsa, LsaBody, LsaKind, Message as IgpMessage, RouterId,
    ServiceAnnouncement,
};
use svcroute_stack::wire::rosa::{
    Constraint, Constraints, Entry, FlowPort, Message, MessageKind, Mode, Policy,
};

const CLIENT: &str = "fd01::c";

fn secs(s: u64) -> Instant {
    Instant::ZERO + Duration::from_secs(s)
}

fn ten(loss: f64, seed: u64) -> Sim {
    build(10, &TEN_SARS, loss, seed, |_| {})
}

#[track_caller]
fn converge(sim: &mut Sim, within: Duration) -> Instant {
    let deadline = sim.now() + within;
    sim.run_until_pred(deadline, Sim::converged)
        .unwrap_or_else(|| panic!("no convergence by {deadline}"))
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn instance_addr(node: usize, k: u16) -> IpAddr {
    IpAddr::V6(Ipv6Addr::new(0xfd02, 0, 0, 0, 0, 0, node as u16, k))
}

fn announce(sim: &mut Sim, node: usize, name: &str, inst: IpAddr, c: Vec<Constraint>) {
    let mut entries = vec![Entry::Instance(inst), Entry::Service(name.parse().unwrap())];
    if !c.is_empty() {
        entries.push(Entry::Constraint(Constraints(c)));
    }
    let m = Message {
        kind: MessageKind::Announcement,
        entries,
    };
    sim.with_node(node, |s, now| s.handle_announcement(now, inst, &m))
        .expect("announcement taken");
}

fn withdraw(sim: &mut Sim, node: usize, name: &str, inst: IpAddr) {
    let m = Message {
        kind: MessageKind::Withdrawal,
        entries: vec![Entry::Instance(inst), Entry::Service(name.parse().unwrap())],
    };
    sim.with_node(node, |s, now| s.handle_announcement(now, inst, &m))
        .expect("withdrawal taken");
}

fn request(name: &str) -> Message {
    Message {
        kind: MessageKind::Request,
        entries: vec![
            Entry::Client(ip(CLIENT)),
            Entry::Ingress(IpAddr::V6(router_addr(1))),
            Entry::Service(name.parse().unwrap()),
            Entry::Port(FlowPort {
                proto: IpProtocol::Tcp,
                port: 443,
            }),
        ],
    }
}

fn node_of(r: RouterId) -> usize {
    r.0 as usize - 1
}

/// Where a request entering at `ingress` ends up: the SARs it visits and
/// the final action (delivery or a scheduled instance).
fn follow(sim: &mut Sim, ingress: usize, name: &str) -> (Vec<usize>, Action) {
    let m = request(name);
    let mut path = vec![ingress];
    let mut src = ip(CLIENT);
    let mut port = PortKind::Client;
    let mut at = ingress;
    for _ in 0..20 {
        let dst = IpAddr::V6(sim.nodes[at].address());
        let v = PacketView {
            src,
            dst,
            rosa: &m,
            port,
        };
        let a = sim.with_node(at, |s, now| s.decide(now, &v));
        match a {
            Action::ToNextSar { router, sar, .. } => {
                assert_eq!(sar, IpAddr::V6(router_addr(router.0)));
                src = dst;
                port = PortKind::Sar;
                at = node_of(router);
                path.push(at);
            }
            other => return (path, other),
        }
    }
    panic!("request loops: {path:?}");
}

/// The cost of a path of nodes in the simulation's topology.
fn path_cost(sim: &Sim, path: &[usize]) -> u64 {
    path.windows(2)
        .map(|w| {
            sim.links
                .iter()
                .filter(|l| {
                    l.up && ((l.a.0, l.b.0) == (w[0], w[1]) || (l.b.0, l.a.0) == (w[0], w[1]))
                })
                .map(|l| u64::from(l.cost))
                .min()
                .expect("consecutive SARs are neighbours")
        })
        .sum()
}

#[test]
fn ten_sars_converge_under_loss_with_exact_paths_and_rtts() {
    for seed in [1, 2, 3] {
        let mut sim = ten(0.2, seed);
        converge(&mut sim, Duration::from_secs(120));
        // Every LSDB holds the ten router-links LSAs, identically.
        for s in &sim.nodes {
            let routers = s
                .igp()
                .lsas(sim.now())
                .filter(|l| l.body.kind() == LsaKind::RouterLinks)
                .count();
            assert_eq!(routers, 10);
        }
        // RTT = twice the one-way delay, exactly: the echo carries the
        // time the neighbour held our hello.
        sim.run_until(sim.now() + Duration::from_secs(5));
        for (k, l) in sim.links.clone().iter().enumerate() {
            let want = 2 * (1 + k as u64 % 3) * 1000;
            for (node, link) in [l.a, l.b] {
                let n = sim.nodes[node]
                    .igp()
                    .neighbors()
                    .into_iter()
                    .find(|n| n.link == link)
                    .unwrap();
                assert_eq!(n.state, NeighborState::Full);
                assert_eq!(n.srtt_us, Some(want), "link {k} at node {node}");
            }
        }
        assert!(sim.stats.lost > 0, "the loss rate was exercised");
        assert!(sim
            .nodes
            .iter()
            .all(|s| s.counters().contains_key("sar.igp_retransmits")));
    }
}

#[test]
fn requests_follow_shortest_paths_and_reroute_after_a_link_failure() {
    let mut sim = ten(0.05, 7);
    converge(&mut sim, Duration::from_secs(60));
    // svc.org at node 7 (and a second instance at node 4).
    announce(&mut sim, 7, "svc.org", instance_addr(7, 1), vec![]);
    announce(&mut sim, 4, "svc.org", instance_addr(4, 1), vec![]);
    sim.run_until(sim.now() + Duration::from_secs(10));
    let d = sim.reference_distances();
    // From every ingress: delivered at the nearer origin, along a
    // shortest path, hop by hop.
    for (ingress, di) in d.iter().enumerate() {
        let (path, action) = follow(&mut sim, ingress, "svc.org/video");
        let last = *path.last().unwrap();
        let nearest = if di[4] <= di[7] { 4 } else { 7 };
        // Equal distances tie on the lower instance address: node 4's.
        assert_eq!(last, nearest, "from {ingress}: {path:?}");
        assert_eq!(
            action,
            Action::DeliverLocal {
                instance: instance_addr(last, 1),
                fill: svcroute_sar::Fill::default()
            }
        );
        assert_eq!(Some(path_cost(&sim, &path)), di[last], "{path:?}");
    }
    // From 0, the path to node 4 is 0-1-2-3-4 (7) vs 0-5-4 (8), and node 7
    // is at 0-1-2-7 (6): it goes to 7 via 1 and 2.
    let (path, _) = follow(&mut sim, 0, "svc.org");
    assert_eq!(path, [0, 1, 2, 7]);
    // Link 2-7 fails silently: the neighbours notice by the dead interval,
    // the domain re-converges, and requests re-route.
    let l27 = TEN_SARS.iter().position(|e| (e.0, e.1) == (2, 7)).unwrap();
    sim.fail_link(l27, false);
    let t_fail = sim.now();
    let t = converge(&mut sim, Duration::from_secs(60));
    assert!(t > t_fail);
    for s in [2, 7] {
        let lost = s_links(&sim.nodes[s]);
        assert!(!lost.contains(&RouterId(if s == 2 { 8 } else { 3 })));
    }
    let (path, _) = follow(&mut sim, 0, "svc.org");
    let d = sim.reference_distances();
    // Now: 0-1-2-3-4 (7) vs 0-1-2-3-6-7 (9) and others: node 4 wins.
    assert_eq!(*path.last().unwrap(), 4);
    assert_eq!(Some(path_cost(&sim, &path)), d[0][4]);
    // The link comes back: the old path returns.
    sim.repair_link(l27);
    converge(&mut sim, Duration::from_secs(60));
    assert_eq!(follow(&mut sim, 0, "svc.org").0, [0, 1, 2, 7]);
}

/// The router IDs a SAR's own router-links LSA lists.
fn s_links(s: &Sar) -> Vec<RouterId> {
    s.igp()
        .lsas(Instant::ZERO)
        .find_map(|l| match &l.body {
            LsaBody::RouterLinks(r) if l.origin == s.router_id() => {
                Some(r.links.iter().map(|l| l.neighbor).collect())
            }
            _ => None,
        })
        .unwrap_or_default()
}

#[test]
fn scheduling_at_the_ingress_is_exact_across_the_domain() {
    let mut sim = ten(0.0, 1);
    converge(&mut sim, Duration::from_secs(30));
    let rr = || {
        vec![Constraint::ModePolicy {
            mode: Mode::Scheduling,
            policy: Policy::RoundRobin,
        }]
    };
    for node in [3, 6, 9] {
        announce(&mut sim, node, "rr.org", instance_addr(node, 1), rr());
    }
    sim.run_until(sim.now() + Duration::from_secs(5));
    // The ingress sends straight to each instance in turn.
    let mut seen = Vec::new();
    for _ in 0..9 {
        let (path, a) = follow(&mut sim, 0, "rr.org");
        assert_eq!(path, [0]);
        let Action::ToInstance {
            instance, origin, ..
        } = a
        else {
            panic!("{a:?}");
        };
        assert_eq!(instance, instance_addr(node_of(origin), 1));
        seen.push(node_of(origin));
    }
    assert_eq!(seen, [3, 6, 9, 3, 6, 9, 3, 6, 9]);
    // Weighted by capability, announced remotely: exact ratio 2:1.
    let w = |c| {
        vec![
            Constraint::ModePolicy {
                mode: Mode::Scheduling,
                policy: Policy::Weighted,
            },
            Constraint::Capability(c),
        ]
    };
    announce(&mut sim, 5, "w.org", instance_addr(5, 1), w(2));
    announce(&mut sim, 8, "w.org", instance_addr(8, 1), w(1));
    sim.run_until(sim.now() + Duration::from_secs(5));
    let mut count = [0; 10];
    for _ in 0..300 {
        if let (_, Action::ToInstance { origin, .. }) = follow(&mut sim, 0, "w.org") {
            count[node_of(origin)] += 1;
        }
    }
    assert_eq!((count[5], count[8]), (200, 100));
}

/// The SAR holding the nearest of the instances at `origins` (one instance
/// per origin, `instance_addr(origin, 1)`), seen from `ingress`; ties go to
/// the lower address, i.e. the lower node.
fn nearest(sim: &Sim, ingress: usize, origins: &[usize]) -> usize {
    let d = sim.reference_distances();
    *origins
        .iter()
        .min_by_key(|o| (d[ingress][**o], **o))
        .unwrap()
}

#[track_caller]
fn assert_all_pick(sim: &mut Sim, name: &str, origins: &[usize]) {
    for ingress in 0..10 {
        let got = *follow(sim, ingress, name).0.last().unwrap();
        assert_eq!(
            got,
            nearest(sim, ingress, origins),
            "from {ingress} at {}",
            sim.now()
        );
    }
}

#[test]
fn lifetimes_and_withdrawals_travel() {
    let mut sim = ten(0.0, 3);
    converge(&mut sim, Duration::from_secs(30));
    let life = |s| vec![Constraint::LifetimeS(s)];
    // Two instances of l.org: node 1's (short lifetime) and node 6's.
    announce(&mut sim, 1, "l.org", instance_addr(1, 1), life(9));
    announce(&mut sim, 6, "l.org", instance_addr(6, 1), life(600));
    let t_last = sim.now();
    sim.run_until(t_last + Duration::from_secs(2));
    assert_all_pick(&mut sim, "l.org", &[1, 6]);
    // Node 1's instance keeps announcing every lifetime/3 for a while...
    for k in 1..=6 {
        sim.run_until(t_last + Duration::from_secs(3 * k));
        announce(&mut sim, 1, "l.org", instance_addr(1, 1), life(9));
        assert_all_pick(&mut sim, "l.org", &[1, 6]);
    }
    // ...then stops: every SAR stops choosing it within one lifetime. (A
    // remote copy's lifetime counts from origination: each flooding hop
    // adds a second of LSA age, so far SARs let go up to a second per hop
    // early, never late.)
    let stopped = sim.now();
    sim.run_until(stopped + Duration::from_millis(4_900));
    assert_all_pick(&mut sim, "l.org", &[1, 6]);
    sim.run_until(stopped + Duration::from_millis(8_900));
    assert_eq!(*follow(&mut sim, 1, "l.org").0.last().unwrap(), 1);
    sim.run_until(stopped + Duration::from_secs(9));
    assert_all_pick(&mut sim, "l.org", &[6]);
    // A withdrawal: gone at its SAR at once, everywhere within the
    // origination pacing and flooding.
    announce(&mut sim, 2, "l.org", instance_addr(2, 1), vec![]);
    sim.run_until(sim.now() + Duration::from_secs(3));
    assert_all_pick(&mut sim, "l.org", &[2, 6]);
    withdraw(&mut sim, 2, "l.org", instance_addr(2, 1));
    // Its SAR no longer delivers to it (the next SAR may not know yet: a
    // request it would send back is dropped as a loop, not delivered).
    let (path, a) = follow(&mut sim, 2, "l.org");
    assert!(path.len() > 1, "{path:?} {a:?}");
    sim.run_until(sim.now() + Duration::from_millis(1_100));
    assert_all_pick(&mut sim, "l.org", &[6]);
    // The wildcard: the SAG behind node 9 originates `*`.
    announce(&mut sim, 9, "*", ip("fd05::5a"), vec![]);
    sim.run_until(sim.now() + Duration::from_secs(2));
    let (path, a) = follow(&mut sim, 0, "unknown.net/page");
    assert_eq!(path, [0, 9]);
    assert!(matches!(a, Action::DeliverLocal { instance, .. } if instance == ip("fd05::5a")));
}

/// An instance that refreshes every lifetime/3 (SPEC §2.2) stays installed
/// at every SAR, also with a short lifetime: its SAR re-originates early
/// enough for the second of age each hop adds, the origination pacing and
/// one retransmission. (Lifetimes of 3 and 6 s used to lapse at remote SARs
/// between refreshes: re-origination waited for less than half a lifetime
/// to be left.) A SAR `d` hops away keeps a copy `lifetime − d` seconds, so
/// 3 s is tried on a pair only.
#[test]
fn short_lifetimes_never_lapse_at_remote_sars_while_refreshed() {
    let name: svcroute_stack::wire::rosa::ServiceName = "short.org".parse().unwrap();
    for (sars, lifetime) in [(2, 3), (2, 6), (4, 6), (4, 9), (4, 15), (4, 30)] {
        let mut sim = Sim::with_routers(sars, 0.0, 11, |_| {});
        for i in 0..sars - 1 {
            sim.connect(i, i + 1, 10, Duration::from_millis(2));
        }
        converge(&mut sim, Duration::from_secs(30));
        // An odd phase against the IGP's own timers.
        sim.run_until(sim.now() + Duration::from_millis(370));
        let inst = instance_addr(0, 1);
        let life = vec![Constraint::LifetimeS(lifetime)];
        let period = Duration::from_millis(u64::from(lifetime) * 1000 / 3);
        announce(&mut sim, 0, "short.org", inst, life.clone());
        let start = sim.now();
        let mut next = start + period;
        sim.run_until(start + Duration::from_millis(200));
        while sim.now() < start + Duration::from_secs(90) {
            sim.run_until((sim.now() + Duration::from_millis(50)).min(next));
            if sim.now() >= next {
                announce(&mut sim, 0, "short.org", inst, life.clone());
                next += period;
            }
            for (i, s) in sim.nodes.iter().enumerate() {
                assert!(
                    !s.instances_of(&name).is_empty(),
                    "{sars} SARs, lifetime {lifetime} s: SAR {i} lost the instance at {}",
                    sim.now()
                );
            }
        }
        for (i, s) in sim.nodes.iter().enumerate() {
            let c = s.counters();
            assert_eq!(c.get("sar.instance_expired"), None, "SAR {i}: {c:?}");
            assert_eq!(c.get("sar.remote_instance_removed"), None, "SAR {i}");
        }
    }
}

#[test]
fn keys_keep_outsiders_out() {
    let key = |secret: &[u8]| Key {
        id: 1,
        secret: secret.to_vec(),
    };
    // Nodes 0..8 share a key; node 9 has another one.
    let mut sim = build(10, &TEN_SARS, 0.0, 5, |c| {
        c.igp.key = Some(key(if c.igp.router_id.0 == 10 {
            b"wrong"
        } else {
            b"domain-secret"
        }));
    });
    announce(&mut sim, 9, "evil.org", instance_addr(9, 1), vec![]);
    sim.run_until(secs(30));
    for (i, s) in sim.nodes.iter().enumerate() {
        let origins: Vec<RouterId> = s.igp().lsas(sim.now()).map(|l| l.origin).collect();
        if i == 9 {
            assert!(origins.iter().all(|o| *o == RouterId(10)));
            continue;
        }
        assert!(
            !origins.contains(&RouterId(10)),
            "node {i} took node 9's LSAs"
        );
        assert_eq!(origins.len(), 9, "node {i}");
        assert!(s.fib().get(&"evil.org".parse().unwrap()).is_none());
    }
    // Node 9's neighbours (0, 8, 4) counted its messages as bad.
    for i in [0, 4, 8] {
        assert!(sim.nodes[i].counters()["drop.sar.igp_auth_bad"] > 0);
    }
    // An unsigned datagram is refused too.
    let hello = IgpMessage::Hello(Hello {
        router_id: RouterId(66),
        seq: 1,
        sent_at_us: 0,
        neighbors: vec![],
    })
    .encode(None)
    .unwrap();
    let link = sim.links[0].a.1;
    sim.inject(0, link, &hello);
    assert_eq!(sim.nodes[0].counters()["drop.sar.igp_auth_missing"], 1);
    let c = sim.nodes[0].counters();
    assert!(!c.contains_key("drop.sar.igp_malformed"));
    sim.inject(0, link, &[1, 2, 3]);
    assert_eq!(sim.nodes[0].counters()["drop.sar.igp_malformed"], 1);
}

#[test]
fn a_restarted_sar_takes_its_lsas_back() {
    let mut sim = ten(0.0, 9);
    converge(&mut sim, Duration::from_secs(30));
    announce(
        &mut sim,
        4,
        "r.org",
        instance_addr(4, 1),
        vec![Constraint::LifetimeS(3600)],
    );
    // Churn: node 4's router-links LSA gets a high sequence number.
    for _ in 0..5 {
        sim.fail_link(4, true);
        sim.run_until(sim.now() + Duration::from_secs(2));
        sim.repair_link(4);
        sim.run_until(sim.now() + Duration::from_secs(2));
    }
    converge(&mut sim, Duration::from_secs(30));
    let old_seq = |sim: &Sim| {
        sim.nodes[0]
            .igp()
            .lsa(sim.now(), &(RouterId(5), LsaKind::RouterLinks, 0))
            .map(|(l, _)| l.seq)
    };
    let before = old_seq(&sim).unwrap();
    assert!(before > 5);
    // Node 4 restarts with fresh state (sequence numbers from 1): it jumps
    // past its old LSAs, and its old services part is emptied everywhere.
    let cfg = Config::new(RouterId(5), router_addr(5));
    sim.restart(4, cfg);
    converge(&mut sim, Duration::from_secs(30));
    assert!(old_seq(&sim).unwrap() > before);
    assert!(sim.nodes[4].counters()["sar.igp_own_lsa_newer"] >= 1);
    for s in &sim.nodes {
        assert!(s.fib().get(&"r.org".parse().unwrap()).is_none());
    }
}

/// A rogue neighbour of node 0 (it has the key, or there is none) floods
/// LSAs: the LSDB cap holds, a rapidly re-originated LSA is paced, and the
/// domain's traffic stays proportional to what was installed.
#[test]
fn an_lsa_flood_is_bounded() {
    let mut sim = build(10, &TEN_SARS, 0.0, 11, |c| c.igp.max_lsas = 200);
    converge(&mut sim, Duration::from_secs(30));
    let rogue = LinkId(1_000);
    let now = sim.now();
    sim.with_node(0, |s, now| s.link_up(now, rogue, 1));
    let me = sim.nodes[0].router_id();
    let hello = IgpMessage::Hello(Hello {
        router_id: RouterId(666),
        seq: 1,
        sent_at_us: 0,
        neighbors: vec![HelloEcho {
            router_id: me,
            seq: 1,
            sent_at_us: now.total_micros() as u64,
            held_us: 0,
        }],
    })
    .encode(None)
    .unwrap();
    sim.inject(0, rogue, &hello);
    let full = sim.nodes[0]
        .igp()
        .neighbors()
        .into_iter()
        .any(|n| n.link == rogue && n.state == NeighborState::Full);
    assert!(full);
    let sent_before = sim.stats.sent;
    // 5,000 distinct services parts from origin 666.
    for part in 0..5_000_u16 {
        let lsa = IgpMessage::Lsa(Lsa {
            origin: RouterId(666),
            part,
            seq: 1,
            age: 0,
            body: LsaBody::Services(vec![ServiceAnnouncement {
                name: format!("flood{part}.org").parse().unwrap(),
                instance: instance_addr(0, part),
                constraints: Constraints::default(),
                lifetime_s: 600,
            }]),
        })
        .encode(None)
        .unwrap();
        sim.inject(0, rogue, &lsa);
    }
    // One LSA re-originated 1,000 times in a burst.
    for seq in 2..1_002 {
        let lsa = IgpMessage::Lsa(Lsa {
            origin: RouterId(666),
            part: 0,
            seq,
            age: 0,
            body: LsaBody::Services(vec![]),
        })
        .encode(None)
        .unwrap();
        sim.inject(0, rogue, &lsa);
    }
    sim.run_until(sim.now() + Duration::from_secs(20));
    for s in &sim.nodes {
        assert!(s.igp().lsdb_len() <= 200, "{}", s.igp().lsdb_len());
        assert!(s.fib().len() <= 200);
    }
    let c = sim.nodes[0].counters();
    // 10 router LSAs + what fit: the rest refused and counted.
    let installed = c["sar.igp_lsa_installed"];
    assert!(c["drop.sar.igp_lsdb_full"] >= 5_000 - 200);
    assert!(c["drop.sar.igp_lsa_min_arrival"] >= 990, "{c:?}");
    // Traffic: each installed LSA crosses each of the 15 links about once
    // each way (plus acks, hellos and retransmissions of the 20 s).
    let sent = sim.stats.sent - sent_before;
    assert!(
        sent < installed * 15 * 2 * 3 + 20 * 30 * 2,
        "{sent} for {installed}"
    );
    // The honest domain still agrees on its topology.
    assert!(sim.nodes.iter().all(|s| s.igp().routes().len() == 10));
    let _ = igp::PORT;
}
