//! The UE's part of sticky service (draft 002 §4.3) in the host role, on a
//! simulated segment: a server host puts a Sticky-Dst option into every
//! packet it sends (what an egress SAR in end-node mode adds to an anycast
//! server's replies), and the client host's later packets of each flow
//! carry it back, with one stable non-zero flow label per flow. What the
//! server received is recorded as it came off the wire.

use std::net::Ipv6Addr;

use smoltcp::time::{Duration, Instant};
use svcroute_host::sticky::{flow_label_of, StickyConfig};
use svcroute_host::{Host, HostConfig, OptionConfig};
use svcroute_stack::runtime::{Context, ControlReply, FrameContext, Role};
use svcroute_stack::shim::{edit, Verdict};
use svcroute_stack::sim::{self, SegmentConfig, Sim};
use svcroute_stack::wire::ipv6opt::{self, OptionRepr};

/// The Sticky-Dst the server side sends: sticky egress fd00:5::1.
const STICKY: &str = "01120200fd000005000000000000000000000001";

/// A role wrapper that records every frame it receives, before the role.
struct Recorder<R> {
    inner: R,
    received: Vec<(Instant, Vec<u8>)>,
}

impl<R: Role> Role for Recorder<R> {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn start(&mut self, cx: &mut Context<'_>) {
        self.inner.start(cx);
    }
    fn poll(&mut self, cx: &mut Context<'_>) -> bool {
        self.inner.poll(cx)
    }
    fn poll_at(&self, now: Instant) -> Option<Instant> {
        self.inner.poll_at(now)
    }
    fn ingress(&mut self, cx: &mut FrameContext<'_>, port: usize, frame: &mut Vec<u8>) -> Verdict {
        self.received.push((cx.now, frame.clone()));
        self.inner.ingress(cx, port, frame)
    }
    fn egress(&mut self, cx: &mut FrameContext<'_>, port: usize, frame: &mut Vec<u8>) -> Verdict {
        self.inner.egress(cx, port, frame)
    }
    fn header_reserve(&self) -> usize {
        self.inner.header_reserve()
    }
    fn control(&mut self, cx: &mut Context<'_>, id: u64, args: &[String]) -> ControlReply {
        self.inner.control(cx, id, args)
    }
}

/// One TCP segment the server received: its client port, SYN flag, flow
/// label and the Sticky-Dst data it carried.
#[derive(Debug)]
struct Seen {
    port: u16,
    syn: bool,
    label: u32,
    sticky: Option<Vec<u8>>,
}

fn read(frame: &[u8]) -> Option<Seen> {
    let l = edit::walk(frame).ok()?;
    if l.upper_protocol != smoltcp::wire::IpProtocol::Tcp {
        return None;
    }
    let tcp = frame.get(l.upper_offset..l.upper_offset + 14)?;
    let sticky = l.dest_opts.and_then(|at| {
        let h = ipv6opt::Packet::new_checked(&frame[at.range]).ok()?;
        h.options_iter().find_map(|o| match o {
            Ok(OptionRepr::Sticky(d)) => Some(d.as_bytes().to_vec()),
            _ => None,
        })
    });
    Some(Seen {
        port: u16::from_be_bytes([tcp[0], tcp[1]]),
        syn: tcp[13] & 0x02 != 0,
        label: flow_label_of(frame)?,
        sticky,
    })
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// Five downloads over two keep-alive connections from client `c` (with
/// `sticky`) to server `s`; what `s` received.
fn download(sticky: StickyConfig) -> Vec<Seen> {
    let mut sim = Sim::new(5);
    let lan = sim.add_segment(SegmentConfig {
        loss: 0.02,
        ..SegmentConfig::default()
    });
    let server = HostConfig {
        insert_options: vec![OptionConfig {
            option_type: 0x1e,
            data: STICKY.into(),
        }],
        ..HostConfig::default()
    };
    let port = sim.port(lan, 2);
    let s = sim.add_role(
        "s",
        vec![port],
        Recorder {
            inner: Host::new("s", server).unwrap(),
            received: Vec::new(),
        },
    );
    let client = HostConfig {
        sticky,
        ..HostConfig::default()
    };
    let port = sim.port(lan, 1);
    let c = sim.add_role("c", vec![port], Host::new("c", client).unwrap());
    let server_addr: Ipv6Addr = sim::ipv6(0, 2);
    let args: Vec<String> =
        format!("get http://[{server_addr}]/bytes/200000 -n 5 -c 2 --verify --timeout-ms 600000")
            .split_whitespace()
            .map(str::to_owned)
            .collect();
    let now = sim.now();
    assert!(sim.node_mut(c).control(now, 1, &args).is_none());
    sim.drive_bounded(Duration::from_secs(3600), 2_000_000, |s| {
        s.node(c).role().jobs_running() == 0
    })
    .unwrap();
    let (_, result) = sim.node_mut(c).take_replies().pop().unwrap();
    assert_eq!(result["ok"], 5, "{result:#}");
    sim.node(s)
        .role()
        .received
        .iter()
        .filter_map(|(_, f)| read(f))
        .collect()
}

#[test]
fn the_client_copies_the_servers_sticky_dst_and_keeps_each_flows_label() {
    let seen = download(StickyConfig::default());
    let mut ports: Vec<u16> = seen.iter().map(|s| s.port).collect();
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(ports.len(), 2, "two connections: {ports:?}");
    let want = hex(STICKY);
    let mut labels = Vec::new();
    for p in ports {
        let flow: Vec<&Seen> = seen.iter().filter(|s| s.port == p).collect();
        // The first SYN goes before anything was received: no option.
        assert!(flow[0].syn && flow[0].sticky.is_none(), "{:?}", flow[0]);
        // Every packet after the handshake carries the server's option.
        let later: Vec<&&Seen> = flow.iter().filter(|s| !s.syn).collect();
        assert!(later.len() > 20, "{} packets", later.len());
        for s in &later {
            assert_eq!(s.sticky.as_deref(), Some(&want[..]), "{s:?}");
        }
        // One non-zero label for the whole flow (smoltcp itself sends 0).
        assert_ne!(flow[0].label, 0);
        assert!(flow.iter().all(|s| s.label == flow[0].label), "{flow:?}");
        labels.push(flow[0].label);
    }
    assert_ne!(labels[0], labels[1], "each flow its own label");
}

#[test]
fn without_copying_and_pinning_the_client_sends_neither() {
    let seen = download(StickyConfig {
        copy: false,
        pin_flow_labels: false,
        ..StickyConfig::default()
    });
    assert!(seen.len() > 40);
    assert!(seen.iter().all(|s| s.sticky.is_none() && s.label == 0));
}
