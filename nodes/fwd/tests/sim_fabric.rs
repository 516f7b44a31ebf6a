//! A fabric of three fwd nodes in the simulator, with endpoints that send
//! and receive GFF packets along computed pathIDs.
//!
//! ```text
//!            link 0 ▸            link 1 ▸ / ◂ 3           link 4 ▸ / ◂ 6
//!   A ─── s0 ─── F1 ──────── s1 ──────── F2 ──────── s2 ──────── F3 ─── s3 ─── B
//!                 │ link 2 ▸ / ◂ 8                    │ link 5 ▸              link 7 ▸
//!                 └──────────────── s4 ─────────────────────────── F3
//!                                                     s5
//!                                                     │
//!                                                     NR
//! ```
//!
//! Port order and outgoing link IDs: F1 = [s0: 0, s1: 1, s4: 2],
//! F2 = [s1: 3, s2: 4, s5: 5], F3 = [s2: 6, s3: 7, s4: 8].

use smoltcp::time::{Duration, Instant};
use smoltcp::wire::EthernetAddress;
use svcroute_fwd::core::gff_frame;
use svcroute_fwd::{Fwd, FwdConfig};
use svcroute_stack::runtime::{Context, FrameContext, Node, PortConfig, Role};
use svcroute_stack::shim::{Direction, Verdict};
use svcroute_stack::sim::{self, NodeId, SegmentConfig, Sim, SimLink, SimPort};
use svcroute_stack::wire::gff::{self, MessageType, PathId};
use svcroute_stack::wire::nr::{self, LinkState};

/// A GFF packet an endpoint received.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Got {
    msg_type: MessageType,
    path: PathId,
    hop_limit: u8,
    payload: Vec<u8>,
}

/// A test endpoint on one port: sends queued GFF frames, records GFF
/// packets it receives, ignores everything else.
#[derive(Default)]
struct Endpoint {
    outbox: Vec<Vec<u8>>,
    got: Vec<Got>,
}

impl Endpoint {
    fn data(&self) -> impl Iterator<Item = &Got> {
        self.got
            .iter()
            .filter(|g| g.msg_type == MessageType::TransportData)
    }

    fn link_events(&self) -> Vec<(u8, LinkState)> {
        self.got
            .iter()
            .filter_map(|g| match nr::Repr::parse(g.msg_type, &g.payload) {
                Ok(nr::Repr::LinkEvent(e)) => Some((e.link_id, e.state)),
                _ => None,
            })
            .collect()
    }
}

impl Role for Endpoint {
    fn name(&self) -> &'static str {
        "endpoint"
    }

    fn start(&mut self, _cx: &mut Context<'_>) {}

    fn poll(&mut self, cx: &mut Context<'_>) -> bool {
        let any = !self.outbox.is_empty();
        for f in self.outbox.drain(..) {
            cx.out.inject(0, Direction::ToWire, f);
        }
        any
    }

    fn poll_at(&self, now: Instant) -> Option<Instant> {
        (!self.outbox.is_empty()).then_some(now)
    }

    fn validate_ingress(&self) -> bool {
        false
    }

    fn ingress(
        &mut self,
        _cx: &mut FrameContext<'_>,
        _port: usize,
        frame: &mut Vec<u8>,
    ) -> Verdict {
        if frame.len() >= 54 && frame[12..14] == [0x86, 0xdd] && frame[20] == gff::NEXT_HEADER {
            if let Ok(p) = gff::Packet::new_checked(&frame[54..]) {
                if let Ok(r) = gff::Repr::parse(&p) {
                    self.got.push(Got {
                        msg_type: r.msg_type,
                        path: r.path_id,
                        hop_limit: frame[21],
                        payload: p.payload().to_vec(),
                    });
                }
            }
        }
        Verdict::Consume
    }

    fn egress(
        &mut self,
        _cx: &mut FrameContext<'_>,
        _port: usize,
        _frame: &mut Vec<u8>,
    ) -> Verdict {
        Verdict::Consume
    }
}

type FwdNode = NodeId<Node<SimLink, Fwd>>;
type EpNode = NodeId<Node<SimLink, Endpoint>>;

struct Fabric {
    sim: Sim,
    f: [FwdNode; 3],
    a: EpNode,
    b: EpNode,
    nr: EpNode,
    /// F1's and F2's attachments to s1 (to partition it).
    s1: (SimPort, SimPort),
}

fn port(sim: &mut Sim, seg: sim::SegmentId, host: u8) -> (PortConfig, SimLink) {
    let subnet = seg.0 as u8;
    let cfg = PortConfig {
        addrs: Vec::new(),
        ..sim::port_config(&format!("s{subnet}"), subnet, host)
    };
    (cfg, sim.attach(seg))
}

fn fwd(
    sim: &mut Sim,
    name: &str,
    id: u8,
    ports: Vec<(PortConfig, SimLink)>,
    links: [u8; 3],
    nr: &[u8],
) -> FwdNode {
    let cfg = FwdConfig {
        node_id: id,
        link_ids: links.to_vec(),
        nr_links: nr.to_vec(),
        ..FwdConfig::default()
    };
    let macs: Vec<EthernetAddress> = ports.iter().map(|(c, _)| c.mac).collect();
    sim.add_role(name, ports, Fwd::new(&cfg, &macs).unwrap())
}

fn fabric(seed: u64) -> Fabric {
    let mut sim = Sim::new(seed);
    let s: Vec<_> = (0..6)
        .map(|_| sim.add_segment(SegmentConfig::default()))
        .collect();
    let f1 = vec![
        port(&mut sim, s[0], 1),
        port(&mut sim, s[1], 1),
        port(&mut sim, s[4], 1),
    ];
    let f2 = vec![
        port(&mut sim, s[1], 2),
        port(&mut sim, s[2], 2),
        port(&mut sim, s[5], 2),
    ];
    let f3 = vec![
        port(&mut sim, s[2], 3),
        port(&mut sim, s[3], 3),
        port(&mut sim, s[4], 3),
    ];
    let s1 = (f1[1].1.port(), f2[0].1.port());
    let a = port(&mut sim, s[0], 10);
    let b = port(&mut sim, s[3], 11);
    let nr = port(&mut sim, s[5], 12);
    // Link events to the NR: F1 around the F1–F2 link (2, 6, 5).
    let f = [
        fwd(&mut sim, "f1", 1, f1, [0, 1, 2], &[2, 6, 5]),
        fwd(&mut sim, "f2", 2, f2, [3, 4, 5], &[5]),
        fwd(&mut sim, "f3", 3, f3, [6, 7, 8], &[6, 5]),
    ];
    let a = sim.add_role("a", vec![a], Endpoint::default());
    let b = sim.add_role("b", vec![b], Endpoint::default());
    let nr = sim.add_role("nr", vec![nr], Endpoint::default());
    Fabric {
        sim,
        f,
        a,
        b,
        nr,
        s1,
    }
}

fn path(links: &[u8]) -> PathId {
    links.iter().fold(PathId::ZERO, |p, &l| p.with(l))
}

impl Fabric {
    fn send(&mut self, from: EpNode, path: PathId, payload: &[u8]) {
        let frame = gff_frame(
            EthernetAddress::BROADCAST,
            sim::mac(0, 99),
            path,
            MessageType::TransportData,
            gff::HOP_LIMIT,
            payload,
        );
        self.sim.node_mut(from).role_mut().outbox.push(frame);
    }

    fn ep(&self, id: EpNode) -> &Endpoint {
        self.sim.node(id).role()
    }

    fn settle(&mut self) {
        self.sim.run_for(Duration::from_millis(200)).unwrap();
    }

    fn stat(&self, f: usize, name: &str) -> u64 {
        self.sim.node(self.f[f]).stats().get(name)
    }
}

#[test]
fn packets_follow_their_pathid_and_multicast_by_or() {
    let mut t = fabric(1);
    t.settle();
    // A → B through F1, F2, F3: links 1, 4, 7.
    let via_f2 = path(&[1, 4, 7]);
    for i in 0..10u8 {
        t.send(t.a, via_f2, &[i; 100]);
    }
    t.settle();
    let got: Vec<_> = t.ep(t.b).data().cloned().collect();
    assert_eq!(got.len(), 10);
    for (i, g) in got.iter().enumerate() {
        assert_eq!(g.path, via_f2);
        assert_eq!(g.payload, vec![i as u8; 100]);
        assert_eq!(g.hop_limit, gff::HOP_LIMIT - 3, "three switches");
    }
    // A → B over the shortcut: links 2, 7; one switch fewer.
    t.send(t.a, path(&[2, 7]), b"short");
    t.settle();
    let g = t.ep(t.b).data().last().unwrap().clone();
    assert_eq!(
        (g.payload.as_slice(), g.hop_limit),
        (&b"short"[..], gff::HOP_LIMIT - 2)
    );
    assert_eq!(t.stat(1, "fwd.forwarded"), 10, "F2 was not on the shortcut");

    // Multicast: (A → B) | (A → NR) = links 1, 4, 7 | 1, 5.
    t.send(t.a, via_f2 | path(&[1, 5]), b"both");
    t.settle();
    assert_eq!(t.ep(t.b).data().filter(|g| g.payload == b"both").count(), 1);
    assert_eq!(
        t.ep(t.nr).data().filter(|g| g.payload == b"both").count(),
        1
    );
    // F2 made two copies of that one packet.
    assert_eq!(t.stat(1, "fwd.copies"), 10 + 2);

    // The ingress port's own link in the pathID does not send it back.
    t.send(t.a, path(&[0, 1, 4, 7]), b"not back");
    t.settle();
    assert_eq!(
        t.ep(t.b)
            .data()
            .filter(|g| g.payload == b"not back")
            .count(),
        1
    );

    // Loop-free: nothing ever came back to A, nothing reached the NR but
    // the multicast copy, and B saw each packet exactly once.
    assert_eq!(t.ep(t.a).data().count(), 0);
    assert_eq!(t.ep(t.nr).data().count(), 1);
    assert_eq!(t.ep(t.b).data().count(), 13);
    for f in 0..3 {
        assert_eq!(t.sim.node(t.f[f]).stats().drops(), 0, "f{}", f + 1);
    }
}

#[test]
fn a_looping_pathid_dies_at_the_hop_limit() {
    let mut t = fabric(2);
    // F1 → F2 → F3 → F1 → ...: links 1, 4, 8 form a cycle.
    t.send(t.a, path(&[1, 4, 8]), b"loop");
    t.settle();
    let forwarded: u64 = (0..3).map(|f| t.stat(f, "fwd.forwarded")).sum();
    let dropped: u64 = (0..3).map(|f| t.stat(f, "drop.fwd.hop_limit")).sum();
    assert_eq!(forwarded, u64::from(gff::HOP_LIMIT) - 1);
    assert_eq!(dropped, 1);
    assert_eq!(t.ep(t.b).data().count(), 0);
}

#[test]
fn a_partitioned_link_goes_down_and_the_nr_hears_of_it() {
    let mut t = fabric(3);
    // Hellos bring every fabric link up (the endpoints send none).
    t.sim.run_for(Duration::from_millis(1500)).unwrap();
    let up = |t: &Fabric, f: usize, p: usize| {
        t.sim.node(t.f[f]).role().core().ports()[p].status.as_str()
    };
    assert_eq!(
        [up(&t, 0, 1), up(&t, 0, 2), up(&t, 1, 0), up(&t, 1, 1)],
        ["up"; 4]
    );
    assert_eq!([up(&t, 0, 0), up(&t, 1, 2)], ["unknown"; 2]);
    assert!(t.ep(t.nr).link_events().is_empty());

    let cut = t.sim.partition(&[t.s1.0], &[t.s1.1]);
    let start = t.sim.now();
    t.sim
        .drive_bounded(Duration::from_secs(10), 1_000_000, |s| {
            let ev = s.node(t.nr).role().link_events();
            ev.contains(&(1, LinkState::Down)) && ev.contains(&(3, LinkState::Down))
        })
        .unwrap();
    let took = t.sim.now() - start;
    assert!(
        took >= Duration::from_secs(2) && took <= Duration::from_secs(4),
        "{took}"
    );
    assert_eq!(up(&t, 0, 1), "down");
    assert_eq!(up(&t, 1, 0), "down");
    t.settle();
    // F2 reported directly, F1 around the cut link through F3: each told
    // both directions.
    let mut ev = t.ep(t.nr).link_events();
    ev.sort_by_key(|e| e.0);
    assert_eq!(
        ev,
        [
            (1, LinkState::Down),
            (1, LinkState::Down),
            (3, LinkState::Down),
            (3, LinkState::Down)
        ]
    );
    // `ctl links` shows it.
    let now = t.sim.now();
    let links = t
        .sim
        .node_mut(t.f[1])
        .control(now, 1, &["links".to_owned()])
        .unwrap();
    assert_eq!(links["links"][0]["state"], "down", "{links:#}");
    assert_eq!(links["links"][0]["neighbour"]["node"], 1, "{links:#}");
    assert_eq!(links["links"][1]["state"], "up", "{links:#}");

    // Healed: up again, and the NR hears that too.
    t.sim.heal(cut);
    t.sim
        .drive_bounded(Duration::from_secs(5), 1_000_000, |s| {
            s.node(t.nr)
                .role()
                .link_events()
                .iter()
                .filter(|e| e.1 == LinkState::Up)
                .count()
                == 4
        })
        .unwrap();
    assert_eq!(up(&t, 0, 1), "up");
    assert_eq!(t.stat(0, "fwd.links_down") + t.stat(1, "fwd.links_down"), 2);
}

#[test]
fn the_same_seed_gives_the_same_run() {
    let run = |seed| {
        let mut t = fabric(seed);
        t.sim.run_for(Duration::from_millis(1500)).unwrap();
        t.send(t.a, path(&[1, 4, 7]) | path(&[1, 5]), b"x");
        t.sim.partition(&[t.s1.0], &[t.s1.1]);
        t.sim.run_for(Duration::from_secs(5)).unwrap();
        t.sim.trace_hash()
    };
    assert_eq!(run(9), run(9));
}
