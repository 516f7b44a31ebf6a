//! The NR node on a simulated segment with two test roles playing nSFFs:
//! registration, path request → response, deregistration → path update to
//! exactly the nSFF that resolved the name, a link event → type-1 update.
//!
//! One L2 segment stands in for the fabric (the pathID is carried, not
//! forwarded on): every node sees every GFF frame and keeps those whose
//! pathID holds its own `link_in` bit, as behind a real fwd node.
//!
//! ```text
//!   logical fabric:  NR (in 0, out 1) ─┐         ┌─ nSFF 2 (in 4, out 5)
//!                    nSFF 1 (in 2, out 3) ─ f1 ─10─▶ f2
//!                                           f1 ◀─11─ f2
//!   simulated:       NR 10.0.0.1, nSFF1 .2, nSFF2 .3 on one segment
//! ```

use smoltcp::time::Duration;
use smoltcp::wire::EthernetAddress;
use svcroute_nr::config::{AttachConfig, LinkConfig, NsffAttachConfig};
use svcroute_nr::core::{path_request, registration};
use svcroute_nr::driver::{gff_frame, ANNOUNCE_FALLBACK};
use svcroute_nr::{Nr, NrConfig};
use svcroute_stack::runtime::{Context, FrameContext, Role};
use svcroute_stack::shim::{Direction, Verdict};
use svcroute_stack::sim::{SegmentConfig, Sim};
use svcroute_stack::wire::gff::{self, MessageType, PathId};
use svcroute_stack::wire::nr::{Fqdn, NsffId, Repr, UpdateKind, ALL_NSFFS};

/// A stand-in nSFF: sends what the test queues, keeps GFF frames for it.
struct FakeNsff {
    link_in: u8,
    mac: EthernetAddress,
    queue: Vec<(PathId, MessageType, Vec<u8>)>,
    got: Vec<(PathId, MessageType, Vec<u8>)>,
}

impl FakeNsff {
    fn new(link_in: u8) -> Self {
        Self {
            link_in,
            mac: EthernetAddress([0x02, 0, 0, 0, 0, 0]),
            queue: Vec::new(),
            got: Vec::new(),
        }
    }

    fn send(&mut self, path: PathId, t: MessageType, payload: Vec<u8>) {
        self.queue.push((path, t, payload));
    }

    /// Received messages other than the NR's start-up ALL NODES.
    fn messages(&self) -> Vec<(PathId, Repr<'_>)> {
        self.got
            .iter()
            .map(|(p, t, b)| (*p, Repr::parse(*t, b).unwrap()))
            .filter(|(_, r)| !matches!(r, Repr::PathUpdate(u) if u.ids.as_slice() == [ALL_NSFFS]))
            .collect()
    }

    fn all_nodes_seen(&self) -> usize {
        self.got.len() - self.messages().len()
    }
}

impl Role for FakeNsff {
    fn name(&self) -> &'static str {
        "fake-nsff"
    }

    fn start(&mut self, cx: &mut Context<'_>) {
        let smoltcp::wire::HardwareAddress::Ethernet(m) = cx.ports[0].iface.hardware_addr();
        self.mac = m;
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> bool {
        let any = !self.queue.is_empty();
        for (p, t, b) in self.queue.drain(..) {
            let f = gff_frame(self.mac, EthernetAddress::BROADCAST, p, t, &b);
            cx.out.inject(0, Direction::ToWire, f);
        }
        any
    }

    fn ingress(
        &mut self,
        _cx: &mut FrameContext<'_>,
        _port: usize,
        frame: &mut Vec<u8>,
    ) -> Verdict {
        if frame.get(12..14) != Some(&[0x86, 0xdd][..]) || frame.get(20) != Some(&253) {
            return Verdict::Pass;
        }
        let pkt = gff::Packet::new_checked(&frame[54..]).unwrap();
        let repr = gff::Repr::parse(&pkt).unwrap();
        if repr.path_id.bit(self.link_in) {
            self.got
                .push((repr.path_id, repr.msg_type, pkt.payload().to_vec()));
        }
        Verdict::Consume
    }

    fn validate_ingress(&self) -> bool {
        false
    }
}

fn config() -> NrConfig {
    NrConfig {
        self_attach: Some(AttachConfig {
            at: "f1".into(),
            link_in: 0,
            link_out: 1,
        }),
        attach: vec![
            NsffAttachConfig {
                nsff: 1,
                at: "f1".into(),
                link_in: 2,
                link_out: 3,
            },
            NsffAttachConfig {
                nsff: 2,
                at: "f2".into(),
                link_in: 4,
                link_out: 5,
            },
        ],
        links: vec![
            LinkConfig {
                from: "f1".into(),
                to: "f2".into(),
                id: 10,
            },
            LinkConfig {
                from: "f2".into(),
                to: "f1".into(),
                id: 11,
            },
        ],
        ..NrConfig::default()
    }
}

fn path(links: &[u8]) -> PathId {
    links.iter().fold(PathId::ZERO, |p, &l| p.with(l))
}

#[test]
fn register_resolve_deregister_and_link_failure_over_a_segment() {
    let mut sim = Sim::new(7);
    let lan = sim.add_segment(SegmentConfig::default());
    let p = sim.port(lan, 1);
    let nr = sim.add_role("nr", vec![p], Nr::new(config()).unwrap());
    let p = sim.port(lan, 2);
    let n1 = sim.add_role("nsff1", vec![p], FakeNsff::new(2));
    let p = sim.port(lan, 3);
    let n2 = sim.add_role("nsff2", vec![p], FakeNsff::new(4));
    let limit = Duration::from_secs(5);

    // The NR announces its (re)start to every nSFF.
    sim.drive_bounded(limit, 10_000, |s| {
        s.node(n1).role().all_nodes_seen() == 1 && s.node(n2).role().all_nodes_seen() == 1
    })
    .unwrap();

    // nSFF2 registers www.example2.com: nSFF2 → f2 → f1 → NR.
    let name = Fqdn::new("www.example2.com").unwrap();
    let to_nr_from_2 = path(&[5, 11, 0]);
    sim.node_mut(n2).role_mut().send(
        to_nr_from_2,
        MessageType::Registration,
        registration(false, &name, NsffId::new(2).unwrap()),
    );
    sim.drive_bounded(limit, 10_000, |s| {
        !s.node(nr).role().core().names().is_empty()
    })
    .unwrap();

    // nSFF1 asks; the answer comes over NR → f1 → nSFF1.
    sim.node_mut(n1).role_mut().send(
        path(&[3, 0]),
        MessageType::PathRequest,
        path_request(name.hash(), NsffId::new(1).unwrap()),
    );
    sim.drive_bounded(limit, 10_000, |s| !s.node(n1).role().messages().is_empty())
        .unwrap();
    {
        let m = sim.node(n1).role().messages();
        let (p, Repr::PathResponse(r)) = &m[0] else {
            panic!("{m:?}");
        };
        assert_eq!(*p, path(&[1, 2]));
        let res = r.resolution.unwrap();
        assert_eq!(res.serving.value(), 2);
        assert_eq!(res.forward, path(&[3, 10, 4]));
        assert_eq!(r.tlvs.reverse_path(), Some(path(&[5, 11, 2])));
        assert_eq!(r.tlvs.fqdn(), Some("www.example2.com"));
    }

    // f1 → f2 fails (a fwd node's link event): nSFF1's path used it.
    sim.node_mut(n2)
        .role_mut()
        .send(path(&[5, 11, 0]), MessageType::LinkEvent, vec![10, 0]);
    sim.drive_bounded(limit, 10_000, |s| s.node(n1).role().messages().len() == 2)
        .unwrap();
    {
        let m = sim.node(n1).role().messages();
        let (p, Repr::PathUpdate(u)) = &m[1] else {
            panic!("{m:?}");
        };
        assert_eq!(*p, path(&[1, 2]));
        assert_eq!((u.kind, u.ids.as_slice()), (UpdateKind::LinkIds, &[10][..]));
    }
    // Unreachable now: not found.
    sim.node_mut(n1).role_mut().send(
        path(&[3, 0]),
        MessageType::PathRequest,
        path_request(name.hash(), NsffId::new(1).unwrap()),
    );
    sim.drive_bounded(limit, 10_000, |s| s.node(n1).role().messages().len() == 3)
        .unwrap();
    assert!(matches!(
        sim.node(n1).role().messages()[2].1,
        Repr::PathResponse(r) if r.resolution.is_none()
    ));

    // Back up, resolve again, then nSFF2 deregisters: nSFF1 (and only it)
    // is told to drop what it got from nSFF2.
    sim.node_mut(n2)
        .role_mut()
        .send(path(&[5, 11, 0]), MessageType::LinkEvent, vec![10, 1]);
    sim.drive_bounded(limit, 10_000, |s| {
        s.node(nr).role().core().fabric().down_links().is_zero()
    })
    .unwrap();
    sim.node_mut(n1).role_mut().send(
        path(&[3, 0]),
        MessageType::PathRequest,
        path_request(name.hash(), NsffId::new(1).unwrap()),
    );
    sim.drive_bounded(limit, 10_000, |s| s.node(n1).role().messages().len() == 4)
        .unwrap();
    assert!(matches!(
        sim.node(n1).role().messages()[3].1,
        Repr::PathResponse(r) if r.resolution.is_some()
    ));
    sim.node_mut(n2).role_mut().send(
        to_nr_from_2,
        MessageType::Registration,
        registration(true, &name, NsffId::new(2).unwrap()),
    );
    sim.drive_bounded(limit, 10_000, |s| s.node(n1).role().messages().len() == 5)
        .unwrap();
    {
        let m = sim.node(n1).role().messages();
        let (p, Repr::PathUpdate(u)) = &m[4] else {
            panic!("{m:?}");
        };
        assert_eq!(*p, path(&[1, 2]));
        assert_eq!((u.kind, u.ids.as_slice()), (UpdateKind::NsffIds, &[2][..]));
    }
    sim.run_for(Duration::from_secs(1)).unwrap();
    assert!(
        sim.node(n2).role().messages().is_empty(),
        "nSFF2 was never affected"
    );
    let stats = sim.node(nr).stats();
    assert_eq!(stats.get("nr.registrations"), 1);
    assert_eq!(stats.get("nr.deregistrations"), 1);
    assert_eq!(stats.get("nr.requests"), 3);
    assert_eq!(stats.get("nr.updates_links"), 1);
    assert_eq!(stats.get("nr.updates_nsffs"), 1);
    assert_eq!(
        stats.drops(),
        stats.get("drop.nr.gff_not_for_us"),
        "{stats:?}"
    );
}

#[test]
fn the_start_announcement_waits_until_the_fabric_is_heard() {
    let mut sim = Sim::new(8);
    let lan = sim.add_segment(SegmentConfig::default());
    let p = sim.port(lan, 1);
    let nr_port = p.1.port();
    let nr = sim.add_role("nr", vec![p], Nr::new(config()).unwrap());
    let p = sim.port(lan, 2);
    let n1_port = p.1.port();
    let n1 = sim.add_role("nsff1", vec![p], FakeNsff::new(2));
    let p = sim.port(lan, 3);
    let n2_port = p.1.port();
    let n2 = sim.add_role("nsff2", vec![p], FakeNsff::new(4));

    // The NR's link is still coming up (a restarted process's TAP joining
    // its bridge): nothing gets through for a while.
    let cut = sim.partition(&[nr_port], &[n1_port, n2_port]);
    sim.run_for(Duration::from_secs(1)).unwrap();
    sim.heal(cut);
    // The first frame the NR hears (here a registration; behind a fwd node,
    // its hello) shows the link works: now the nSFFs hear of the restart.
    let name = Fqdn::new("www.example2.com").unwrap();
    sim.node_mut(n2).role_mut().send(
        path(&[5, 11, 0]),
        MessageType::Registration,
        registration(false, &name, NsffId::new(2).unwrap()),
    );
    sim.drive_bounded(Duration::from_millis(500), 10_000, |s| {
        s.node(n1).role().all_nodes_seen() == 1 && s.node(n2).role().all_nodes_seen() == 1
    })
    .unwrap();
    assert_eq!(sim.node(nr).role().core().names().len(), 1);
    // Once: the fallback is off.
    sim.run_for(Duration::from_secs(5)).unwrap();
    assert_eq!(sim.node(n1).role().all_nodes_seen(), 1);
    assert_eq!(sim.node(nr).stats().get("nr.updates_all_nodes"), 1);
}

#[test]
fn without_a_word_from_the_fabric_the_announcement_goes_after_the_fallback_and_again_when_heard() {
    let mut sim = Sim::new(9);
    let lan = sim.add_segment(SegmentConfig::default());
    let p = sim.port(lan, 1);
    let nr_port = p.1.port();
    let nr = sim.add_role("nr", vec![p], Nr::new(config()).unwrap());
    let p = sim.port(lan, 2);
    let n1_port = p.1.port();
    let n1 = sim.add_role("nsff1", vec![p], FakeNsff::new(2));
    let updates = |s: &Sim| s.node(nr).stats().get("nr.updates_all_nodes");
    // The NR hears nothing: the announcement goes out after the fallback
    // (and is lost here).
    let cut = sim.partition(&[nr_port], &[n1_port]);
    sim.run_for(ANNOUNCE_FALLBACK - Duration::from_millis(1))
        .unwrap();
    assert_eq!(updates(&sim), 0);
    sim.run_for(Duration::from_millis(2)).unwrap();
    assert_eq!(updates(&sim), 1);
    // The first frame heard repeats it, once.
    sim.heal(cut);
    let name = Fqdn::new("www.example.com").unwrap();
    for _ in 0..2 {
        sim.node_mut(n1).role_mut().send(
            path(&[3, 0]),
            MessageType::Registration,
            registration(false, &name, NsffId::new(1).unwrap()),
        );
        sim.run_for(Duration::from_millis(100)).unwrap();
    }
    assert_eq!(sim.node(n1).role().all_nodes_seen(), 1);
    assert_eq!(updates(&sim), 2);
}
