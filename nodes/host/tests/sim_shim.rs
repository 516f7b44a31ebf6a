//! The shim's consume and inject verdicts on a multi-port node: a two-port
//! repeater whose role takes every frame off one port's wire (consume) and
//! puts it on the other's (inject), so two host nodes on different simulated
//! segments exchange HTTP through it; a third verdict, drop, is counted by
//! reason.

use smoltcp::time::Duration;
use svcroute_host::{Host, HostConfig};
use svcroute_stack::runtime::{Context, FrameContext, PortConfig, Role};
use svcroute_stack::shim::{Direction, Verdict};
use svcroute_stack::sim::{self, SegmentConfig, Sim};

/// Repeats frames between its two ports; drops frames of `drop_ethertype`.
struct Repeater {
    drop_ethertype: u16,
}

impl Role for Repeater {
    fn name(&self) -> &'static str {
        "repeater"
    }

    fn start(&mut self, _cx: &mut Context<'_>) {}

    fn poll(&mut self, _cx: &mut Context<'_>) -> bool {
        false
    }

    fn validate_ingress(&self) -> bool {
        false
    }

    fn ingress(&mut self, cx: &mut FrameContext<'_>, port: usize, frame: &mut Vec<u8>) -> Verdict {
        if u16::from_be_bytes([frame[12], frame[13]]) == self.drop_ethertype {
            return Verdict::Drop("repeater.filtered");
        }
        cx.stats.bump("repeater.frames");
        cx.out
            .inject(1 - port, Direction::ToWire, std::mem::take(frame));
        Verdict::Consume
    }
}

fn port(name: &str, subnet: u8, host: u8) -> PortConfig {
    PortConfig {
        addrs: Vec::new(),
        ..sim::port_config(name, subnet, host)
    }
}

#[test]
fn a_repeater_joins_two_segments_by_consume_and_inject() {
    let mut sim = Sim::new(11);
    let left = sim.add_segment(SegmentConfig {
        loss: 0.05,
        ..SegmentConfig::default()
    });
    let right = sim.add_segment(SegmentConfig {
        loss: 0.05,
        ..SegmentConfig::default()
    });
    // Both hosts are in 10.0.0.0/24 (subnet 0): the repeater makes one L2.
    let a_port = (sim::port_config("eth0", 0, 1), sim.attach(left));
    let b_port = (sim::port_config("eth0", 0, 2), sim.attach(right));
    let r_ports = vec![
        (port("left", 0, 250), sim.attach(left)),
        (port("right", 0, 251), sim.attach(right)),
    ];
    // 0x88b5 (IEEE local experimental) frames are filtered.
    let r = sim.add_role(
        "r",
        r_ports,
        Repeater {
            drop_ethertype: 0x88b5,
        },
    );
    let cfg = HostConfig {
        instance: Some("b".into()),
        ..HostConfig::default()
    };
    sim.add_role("b", vec![b_port], Host::new("b", cfg).unwrap());
    let a = sim.add_role(
        "a",
        vec![a_port],
        Host::new("a", HostConfig::default()).unwrap(),
    );

    let args: Vec<String> =
        "get http://10.0.0.2/bytes/20000 -n 20 -c 2 --verify --timeout-ms 300000"
            .split_whitespace()
            .map(str::to_owned)
            .collect();
    let now = sim.now();
    assert!(sim.node_mut(a).control(now, 1, &args).is_none());
    sim.drive_bounded(Duration::from_secs(3600), 2_000_000, |s| {
        s.node(a).role().jobs_running() == 0
    })
    .unwrap();
    let (_, result) = sim.node_mut(a).take_replies().pop().unwrap();
    assert_eq!(result["ok"], 20, "{result:#}");
    assert_eq!(
        result["first_response"]["headers"]["x-instance"], "b",
        "{result:#}"
    );

    let stats = sim.node(r).stats();
    assert!(stats.get("repeater.frames") > 100, "{stats:?}");
    // Every frame repeated went out of the other port.
    assert_eq!(stats.tx_frames, stats.get("repeater.frames"), "{stats:?}");
    assert_eq!(stats.drops(), 0, "{stats:?}");
}

#[test]
fn the_drop_verdict_is_counted_by_reason() {
    let mut sim = Sim::new(3);
    let left = sim.add_segment(SegmentConfig::default());
    let right = sim.add_segment(SegmentConfig::default());
    let probe = sim.attach(left);
    let r_ports = vec![
        (port("left", 0, 250), sim.attach(left)),
        (port("right", 0, 251), sim.attach(right)),
    ];
    let r = sim.add_role(
        "r",
        r_ports,
        Repeater {
            drop_ethertype: 0x88b5,
        },
    );
    let mut frame = vec![0xff; 6];
    frame.extend_from_slice(&[0x02, 0, 0, 0, 0, 9, 0x88, 0xb5]);
    frame.resize(60, 0);
    let mut probe = probe;
    for _ in 0..3 {
        use svcroute_stack::phy::Link;
        assert!(probe.send(&frame).unwrap());
    }
    sim.run_for(Duration::from_millis(100)).unwrap();
    let stats = sim.node(r).stats();
    assert_eq!(stats.get("drop.repeater.filtered"), 3, "{stats:?}");
    assert_eq!(stats.get("repeater.frames"), 0, "{stats:?}");
}
