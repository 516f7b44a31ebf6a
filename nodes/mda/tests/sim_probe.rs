//! An MDA whose configured peers are down keeps probing: smoltcp sends a UDP
//! socket's datagrams in order, so a DAAdvert probe to a peer whose address
//! never resolves would hold back every later probe on that socket. The
//! driver flushes the stuck probe socket (counted) and probes go on; a peer
//! that comes up later still hears them and the two peer.

use smoltcp::time::Duration;
use svcroute_mda::driver::{Mda, MdaConfig, MemStore};
use svcroute_stack::sim::{ipv4, SegmentConfig, Sim};

const WALL: u64 = 3_900_000_000_000_000;

fn cfg(peers: &[&str]) -> MdaConfig {
    MdaConfig {
        scopes: "x".into(),
        peers: peers.iter().map(|p| (*p).to_owned()).collect(),
        start_wait_ms: 0,
        peer_retry_s: 1,
        ..MdaConfig::default()
    }
}

#[test]
fn probes_to_absent_peers_do_not_hold_back_the_others() {
    let mut sim = Sim::new(5);
    let seg = sim.add_segment(SegmentConfig::default());
    // 10.0.0.98 and .99 never exist; host 2 is a real MDA that knows nobody
    // and joins late, so only A's unicast probes can tell it about A.
    let late = ipv4(0, 2).to_string();
    let a_cfg = cfg(&["10.0.0.99", "10.0.0.98", &late]);
    let port = sim.port(seg, 1);
    let a = sim.add_role(
        "a",
        vec![port],
        Mda::new("a", a_cfg, Box::new(MemStore::default()), Vec::new(), WALL).unwrap(),
    );
    sim.run_for(Duration::from_secs(10)).unwrap();
    assert!(
        sim.node(a).stats().get("drop.mda.probe_unresolved") >= 1,
        "{:?}",
        sim.node(a).stats()
    );
    let port = sim.port(seg, 2);
    let b = sim.add_role(
        "b",
        vec![port],
        Mda::new(
            "b",
            MdaConfig {
                // No multicast DAAdverts reach B before it exists; it has no
                // static peers: only A's probes can start the peering.
                ..cfg(&[])
            },
            Box::new(MemStore::default()),
            Vec::new(),
            WALL,
        )
        .unwrap(),
    );
    sim.drive_bounded(Duration::from_secs(60), 5_000_000, |s| {
        let peered = |n: &svcroute_stack::runtime::Node<_, Mda>| {
            n.role()
                .core()
                .is_some_and(|c| c.peers().iter().any(|(_, _, up)| *up))
        };
        peered(s.node(a)) && peered(s.node(b))
    })
    .expect("A and B peer although A's first probes went to absent peers");
}
