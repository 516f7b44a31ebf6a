//! A UE behind the TUN shim moves to another ingress in the middle of a
//! download, deterministically, with no root:
//!
//! ```text
//!   UE = [kernel stand-in: a host node, K = fd00:a::20] ═TUN═ [shim] ─ wire ─┬ segment a ─┐
//!                                                                           └ segment b ─┤ R ─ segment s ─ server host
//!   R: a router and a scripted egress (draft 002 §4.1, §5.1): inserts Sticky-Dst into the server's
//!      replies, and keeps a moved UE's flow on its first address, finding the flow by
//!      (proto, ports, flow label) as the SAR's egress does (nodes/sar/src/sticky/anchor.rs)
//! ```
//!
//! The kernel stand-in labels its packets the way Linux does: a label per
//! socket that it re-draws when the move's outage makes it retransmit (the
//! test bumps an epoch at the move). The UE's wire is re-plugged from
//! segment a to b and the shim told `move fd00:b::20/64 fd00:b::1`. With
//! the shim pinning flow labels the download completes byte-exact and the
//! egress translated the moved flow; without, the egress cannot find the
//! flow, the server resets it, and the download fails.

use std::cell::Cell;
use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::{IpAddr, Ipv6Addr};
use std::os::fd::RawFd;
use std::rc::Rc;

use smoltcp::phy::ChecksumCapabilities;
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{
    EthernetAddress, EthernetFrame, EthernetProtocol, EthernetRepr, Icmpv6Packet, Icmpv6Repr,
    IpAddress, IpCidr, IpProtocol, Ipv6Packet, Ipv6Repr, NdiscNeighborFlags, NdiscRepr,
};
use svcroute_host::rosa::tun::{self, TunConfig, TunShim};
use svcroute_host::rosa::PortInfo;
use svcroute_host::sticky::{flow_label_of, StickyConfig};
use svcroute_host::{Host, HostConfig};
use svcroute_stack::phy::Link;
use svcroute_stack::runtime::{Node, PortConfig};
use svcroute_stack::shim::edit::{self, AddrField};
use svcroute_stack::sim::{SegmentConfig, Sim, SimLink, SimNode};
use svcroute_stack::wire::ipv6opt::{self, OptionRepr, OptionType};

const K: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xa, 0, 0, 0, 0, 0, 0x20);
const SRV: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x5, 0, 0, 0, 0, 0, 0x10);
const R_ADDRS: [Ipv6Addr; 3] = [
    Ipv6Addr::new(0xfd00, 0xa, 0, 0, 0, 0, 0, 1),
    Ipv6Addr::new(0xfd00, 0xb, 0, 0, 0, 0, 0, 1),
    Ipv6Addr::new(0xfd00, 0x5, 0, 0, 0, 0, 0, 1),
];
const R_MACS: [EthernetAddress; 3] = [
    EthernetAddress([2, 0, 0, 0, 0xa, 1]),
    EthernetAddress([2, 0, 0, 0, 0xb, 1]),
    EthernetAddress([2, 0, 0, 0, 0x5, 1]),
];
const SHIM_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0xa, 0x20]);
const KERNEL_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0xee, 0x20]);
/// The TUN has no link layer: the kernel stand-in's "neighbour".
const TUN_PEER_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0xee, 0xfe]);
const BODY: usize = 3_000_000;

fn eth(src: EthernetAddress, dst: EthernetAddress, ip: &[u8]) -> Vec<u8> {
    let mut f = vec![0; 14 + ip.len()];
    EthernetRepr {
        src_addr: src,
        dst_addr: dst,
        ethertype: EthernetProtocol::Ipv6,
    }
    .emit(&mut EthernetFrame::new_unchecked(&mut f[..]));
    f[14..].copy_from_slice(ip);
    f
}

fn ndisc(src: Ipv6Addr, dst: Ipv6Addr, repr: NdiscRepr<'_>) -> Vec<u8> {
    let icmp = Icmpv6Repr::Ndisc(repr);
    let mut p = vec![0; 40 + icmp.buffer_len()];
    Ipv6Repr {
        src_addr: src,
        dst_addr: dst,
        next_header: IpProtocol::Icmpv6,
        payload_len: icmp.buffer_len(),
        hop_limit: 255,
    }
    .emit(&mut Ipv6Packet::new_unchecked(&mut p[..]));
    icmp.emit(
        &src,
        &dst,
        &mut Icmpv6Packet::new_unchecked(&mut p[40..]),
        &ChecksumCapabilities::default(),
    );
    p
}

/// (type, target) of an NS or NA right after the fixed header, and its
/// link-layer address option.
fn nd(ip: &[u8]) -> Option<(u8, Ipv6Addr, Option<EthernetAddress>)> {
    if ip.get(6) != Some(&58) || ip.len() < 64 {
        return None;
    }
    let t = ip[40];
    if t != 135 && t != 136 {
        return None;
    }
    let target = Ipv6Addr::from(<[u8; 16]>::try_from(&ip[48..64]).ok()?);
    let ll = (ip.len() >= 72 && (ip[64] == 1 || ip[64] == 2))
        .then(|| EthernetAddress::from_bytes(&ip[66..72]));
    Some((t, target, ll))
}

fn v6(ip: &[u8], at: usize) -> Ipv6Addr {
    Ipv6Addr::from(<[u8; 16]>::try_from(&ip[at..at + 16]).unwrap())
}

// ---------------------------------------------------------------- the UE

/// Queues between the kernel stand-in and the shim's TUN port.
#[derive(Clone, Default)]
struct Tun {
    /// IP packets the kernel sent.
    up: Rc<std::cell::RefCell<VecDeque<Vec<u8>>>>,
    /// Ethernet frames for the kernel stand-in's stack.
    down: Rc<std::cell::RefCell<VecDeque<Vec<u8>>>>,
    /// Linux re-draws a socket's label after an RTO: bumped at the move.
    epoch: Rc<Cell<u32>>,
}

/// The kernel stand-in's link: the TUN seen from the kernel. Neighbour
/// discovery is answered here (a TUN has none); every other frame leaves
/// as an IP packet, labelled per socket and epoch.
struct KernelLink(Tun);

impl Link for KernelLink {
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        let Some(f) = self.0.down.borrow_mut().pop_front() else {
            return Ok(None);
        };
        buf[..f.len()].copy_from_slice(&f);
        Ok(Some(f.len()))
    }
    fn send(&mut self, frame: &[u8]) -> io::Result<bool> {
        let ip = &frame[14..];
        if let Some((135, target, _)) = nd(ip) {
            let na = ndisc(
                target,
                v6(ip, 8),
                NdiscRepr::NeighborAdvert {
                    flags: NdiscNeighborFlags::SOLICITED | NdiscNeighborFlags::ROUTER,
                    target_addr: target,
                    lladdr: Some(TUN_PEER_MAC.into()),
                },
            );
            self.0
                .down
                .borrow_mut()
                .push_back(eth(TUN_PEER_MAC, KERNEL_MAC, &na));
            return Ok(true);
        }
        if frame[0] & 1 != 0 {
            return Ok(true); // MLD and the like: nothing to tell a TUN
        }
        let mut p = ip.to_vec();
        if matches!(p.get(6), Some(6 | 17)) && p.len() >= 44 {
            let ports = u32::from_be_bytes([p[40], p[41], p[42], p[43]]);
            let label = (ports.wrapping_mul(0x9e37_79b9)
                ^ self.0.epoch.get().wrapping_mul(0x85eb_ca6b))
                & 0xf_ffff
                | 1;
            p[1] = (p[1] & 0xf0) | (label >> 16) as u8;
            p[2] = (label >> 8) as u8;
            p[3] = label as u8;
        }
        self.0.up.borrow_mut().push_back(p);
        Ok(true)
    }
    fn max_frame(&self) -> usize {
        65_550
    }
    fn mtu(&self) -> usize {
        tun::tun_mtu(1500)
    }
    fn raw_fd(&self) -> Option<RawFd> {
        None
    }
}

/// The shim's wire: one of two segments, re-plugged by the test.
struct Replug {
    links: [SimLink; 2],
    on: Rc<Cell<usize>>,
}

/// The shim's ports: the wire, and the TUN (wrapping like the real one).
enum ShimLink {
    Wire(Replug),
    Tun(Tun),
}

impl Link for ShimLink {
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        match self {
            Self::Wire(r) => {
                let off = 1 - r.on.get();
                while r.links[off].recv(buf)?.is_some() {} // unplugged: lost
                r.links[r.on.get()].recv(buf)
            }
            Self::Tun(t) => {
                let Some(p) = t.up.borrow_mut().pop_front() else {
                    return Ok(None);
                };
                buf[14..14 + p.len()].copy_from_slice(&p);
                tun::wrap(&mut buf[..14 + p.len()]);
                Ok(Some(14 + p.len()))
            }
        }
    }
    fn send(&mut self, frame: &[u8]) -> io::Result<bool> {
        match self {
            Self::Wire(r) => r.links[r.on.get()].send(frame),
            Self::Tun(t) => {
                let Some(p) = tun::unwrap(frame) else {
                    return Ok(false);
                };
                t.down
                    .borrow_mut()
                    .push_back(eth(TUN_PEER_MAC, KERNEL_MAC, p));
                Ok(true)
            }
        }
    }
    fn max_frame(&self) -> usize {
        65_550
    }
    fn mtu(&self) -> usize {
        match self {
            Self::Wire(_) => 1500,
            Self::Tun(_) => tun::tun_mtu(1500),
        }
    }
    fn raw_fd(&self) -> Option<RawFd> {
        None
    }
}

/// The UE: the kernel stand-in and its shim, polled together.
struct Ue {
    kernel: Node<KernelLink, Host>,
    shim: Node<ShimLink, TunShim>,
    tun: Tun,
    plug: Rc<Cell<usize>>,
}

impl SimNode for Ue {
    fn poll(&mut self, now: Instant) -> io::Result<bool> {
        let mut any = false;
        for _ in 0..64 {
            let k = self.kernel.poll(now)?;
            let s = self.shim.poll(now)?;
            if !k && !s && self.tun.up.borrow().is_empty() && self.tun.down.borrow().is_empty() {
                break;
            }
            any = true;
        }
        Ok(any)
    }
    fn poll_at(&mut self, now: Instant) -> Option<Instant> {
        [self.kernel.poll_at(now), self.shim.poll_at(now)]
            .into_iter()
            .flatten()
            .min()
    }
    fn name(&self) -> &str {
        "ue"
    }
}

fn ue(sim: &mut Sim, a: SimLink, b: SimLink, pin: bool) -> Ue {
    let tun = Tun::default();
    let plug = Rc::new(Cell::new(0));
    let now = sim.now();
    let kernel_cfg = HostConfig {
        http_port: 0,
        udp_echo_port: 0,
        discard_port: 0,
        // A kernel neither copies Sticky-Dst nor keeps labels stable.
        sticky: StickyConfig {
            copy: false,
            pin_flow_labels: false,
            ..StickyConfig::default()
        },
        ..HostConfig::default()
    };
    let kernel = Node::new(
        "ue-kernel",
        vec![(
            PortConfig {
                name: "rosa0".into(),
                mac: KERNEL_MAC,
                addrs: vec![IpCidr::new(IpAddress::Ipv6(K), 64)],
                gateways: vec![IpAddress::Ipv6(R_ADDRS[0])],
                mtu: tun::tun_mtu(1500),
                max_burst: None,
                random_seed: Some(3),
            },
            KernelLink(tun.clone()),
        )],
        Host::new("ue-kernel", kernel_cfg).unwrap(),
        now,
    );
    let wire = PortConfig {
        name: "eth0".into(),
        mac: SHIM_MAC,
        addrs: vec![IpCidr::new(IpAddress::Ipv6(K), 64)],
        gateways: vec![IpAddress::Ipv6(R_ADDRS[0])],
        mtu: 1500,
        max_burst: None,
        random_seed: Some(4),
    };
    let role = TunShim::new(
        &TunConfig {
            names: vec!["service.org".into()],
            netns: Some("svl-sim-ue".into()),
            pin_flow_labels: pin,
            flow_label_seed: Some(0x5eed),
            ..TunConfig::default()
        },
        PortInfo {
            mac: SHIM_MAC,
            addrs: wire.addrs.clone(),
            gateways: wire.gateways.clone(),
        },
    )
    .unwrap();
    let tun_port = PortConfig {
        name: "tun".into(),
        mac: EthernetAddress([2, 0, 0, 0, 0xee, 0xff]),
        addrs: Vec::new(),
        gateways: Vec::new(),
        mtu: tun::tun_mtu(1500),
        max_burst: None,
        random_seed: Some(5),
    };
    let shim = Node::new(
        "ue-shim",
        vec![
            (
                wire,
                ShimLink::Wire(Replug {
                    links: [a, b],
                    on: plug.clone(),
                }),
            ),
            (tun_port, ShimLink::Tun(tun.clone())),
        ],
        role,
        now,
    );
    Ue {
        kernel,
        shim,
        tun,
        plug,
    }
}

// ---------------------------------------------- the router and egress

/// A flow as the egress knows it: (proto, client port, server port, label).
type FlowId = (u8, u16, u16, u32);

/// The router R with the egress's part of sticky service.
struct Router {
    links: [SimLink; 3],
    neighbors: HashMap<(usize, Ipv6Addr), EthernetAddress>,
    /// Flow → (anchor, current client address).
    flows: HashMap<FlowId, (Ipv6Addr, Ipv6Addr)>,
    /// (proto, client port, server port, anchor) → flow.
    by_anchor: HashMap<(u8, u16, u16, Ipv6Addr), FlowId>,
    /// Packets to the server whose source was translated to the anchor.
    translated: u64,
    /// UE packets to the server carrying a Sticky-Dst back.
    sticky_back: u64,
    /// Replies forwarded (with Sticky-Dst inserted).
    replies: u64,
}

impl Router {
    fn port_of(dst: Ipv6Addr) -> Option<usize> {
        R_ADDRS
            .iter()
            .position(|a| a.segments()[..4] == dst.segments()[..4])
    }

    fn handle(&mut self, port: usize, frame: &[u8]) -> io::Result<()> {
        if frame.get(12..14) != Some(&[0x86, 0xdd][..]) || frame.len() < 54 {
            return Ok(());
        }
        let src_mac = EthernetAddress::from_bytes(&frame[6..12]);
        let ip = &frame[14..];
        let (src, dst) = (v6(ip, 8), v6(ip, 24));
        if let Some((t, target, ll)) = nd(ip) {
            let mac = ll.unwrap_or(src_mac);
            if t == 136 {
                self.neighbors.insert((port, target), mac);
            } else if !src.is_unspecified() {
                self.neighbors.insert((port, src), mac);
                if target == R_ADDRS[port] {
                    let na = ndisc(
                        target,
                        src,
                        NdiscRepr::NeighborAdvert {
                            flags: NdiscNeighborFlags::SOLICITED
                                | NdiscNeighborFlags::ROUTER
                                | NdiscNeighborFlags::OVERRIDE,
                            target_addr: target,
                            lladdr: Some(R_MACS[port].into()),
                        },
                    );
                    self.links[port].send(&eth(R_MACS[port], mac, &na))?;
                }
            }
            return Ok(());
        }
        if dst.is_multicast() || R_ADDRS.contains(&dst) {
            return Ok(());
        }
        let Some(out) = Self::port_of(dst) else {
            return Ok(());
        };
        let mut f = frame.to_vec();
        if let Some(l) = edit::walk(&f).ok().filter(|l| {
            matches!(u8::from(l.upper_protocol), 6 | 17) && f.len() >= l.upper_offset + 4
        }) {
            let proto = u8::from(l.upper_protocol);
            let sport = u16::from_be_bytes([f[l.upper_offset], f[l.upper_offset + 1]]);
            let dport = u16::from_be_bytes([f[l.upper_offset + 2], f[l.upper_offset + 3]]);
            if dst == SRV {
                self.toward_server(&mut f, proto, sport, dport, src)?;
            } else if src == SRV {
                self.reply_of_server(&mut f, proto, sport, dport, dst)?;
            }
        }
        let dst = v6(&f[14..], 24);
        let out = Self::port_of(dst).unwrap_or(out);
        let Some(&mac) = self.neighbors.get(&(out, dst)) else {
            let t = dst.octets();
            let group = Ipv6Addr::new(
                0xff02,
                0,
                0,
                0,
                0,
                1,
                0xff00 | u16::from(t[13]),
                u16::from_be_bytes([t[14], t[15]]),
            );
            let ns = ndisc(
                R_ADDRS[out],
                group,
                NdiscRepr::NeighborSolicit {
                    target_addr: dst,
                    lladdr: Some(R_MACS[out].into()),
                },
            );
            let mcast = EthernetAddress([0x33, 0x33, 0xff, t[13], t[14], t[15]]);
            self.links[out].send(&eth(R_MACS[out], mcast, &ns))?;
            return Ok(()); // dropped; TCP retransmits
        };
        f[0..6].copy_from_slice(mac.as_bytes());
        f[6..12].copy_from_slice(R_MACS[out].as_bytes());
        self.links[out].send(&f)?;
        Ok(())
    }

    /// The egress, toward its server: remember the flow's first address,
    /// translate a moved UE's back to it.
    fn toward_server(
        &mut self,
        f: &mut [u8],
        proto: u8,
        sport: u16,
        dport: u16,
        src: Ipv6Addr,
    ) -> io::Result<()> {
        let id = (proto, sport, dport, flow_label_of(f).unwrap_or(0));
        let (anchor, current) = self.flows.entry(id).or_insert((src, src));
        *current = src;
        let anchor = *anchor;
        self.by_anchor.insert((proto, sport, dport, anchor), id);
        if src != anchor {
            edit::rewrite_addr(f, AddrField::Src, IpAddr::V6(anchor)).unwrap();
            self.translated += 1;
        }
        if sticky_of(f).is_some() {
            self.sticky_back += 1;
        }
        Ok(())
    }

    /// The egress, from its server: to the UE's address now, with the
    /// Sticky-Dst of this egress (end-node mode).
    fn reply_of_server(
        &mut self,
        f: &mut Vec<u8>,
        proto: u8,
        sport: u16,
        dport: u16,
        dst: Ipv6Addr,
    ) -> io::Result<()> {
        if let Some(id) = self.by_anchor.get(&(proto, dport, sport, dst)) {
            let (_, current) = self.flows[id];
            if current != dst {
                edit::rewrite_addr(f, AddrField::Dst, IpAddr::V6(current)).unwrap();
            }
        }
        let mut data = vec![0x01, 18, 0x02, 0x00];
        data.extend_from_slice(&R_ADDRS[2].octets());
        edit::insert_dest_opts(f, &[OptionRepr::new(OptionType::Sticky, &data).unwrap()]).unwrap();
        self.replies += 1;
        Ok(())
    }
}

fn sticky_of(f: &[u8]) -> Option<Vec<u8>> {
    let l = edit::walk(f).ok()?;
    let at = l.dest_opts?;
    let h = ipv6opt::Packet::new_checked(&f[at.range]).ok()?;
    h.options_iter().find_map(|o| match o {
        Ok(OptionRepr::Sticky(d)) => Some(d.as_bytes().to_vec()),
        _ => None,
    })
}

impl SimNode for Router {
    fn poll(&mut self, _now: Instant) -> io::Result<bool> {
        let mut any = false;
        let mut buf = vec![0; 65_550];
        for port in 0..3 {
            while let Some(n) = self.links[port].recv(&mut buf)? {
                any = true;
                let frame = buf[..n].to_vec();
                self.handle(port, &frame)?;
            }
        }
        Ok(any)
    }
    fn poll_at(&mut self, _now: Instant) -> Option<Instant> {
        None
    }
    fn name(&self) -> &str {
        "r"
    }
}

// ------------------------------------------------------------- the test

struct Run {
    result: serde_json::Value,
    translated: u64,
    sticky_back: u64,
    replies: u64,
    shim_stats: svcroute_stack::stats::Counters,
}

fn download_and_move(pin: bool) -> Run {
    let mut sim = Sim::new(9);
    let seg = |sim: &mut Sim| {
        sim.add_segment(SegmentConfig {
            delay: Duration::from_millis(1),
            ..SegmentConfig::default()
        })
    };
    let (a, b, s) = (seg(&mut sim), seg(&mut sim), seg(&mut sim));
    let r_links = [sim.attach(a), sim.attach(b), sim.attach(s)];
    let (ue_a, ue_b, srv_link) = (sim.attach(a), sim.attach(b), sim.attach(s));
    let r = sim.add_node(Router {
        links: r_links,
        neighbors: HashMap::new(),
        flows: HashMap::new(),
        by_anchor: HashMap::new(),
        translated: 0,
        sticky_back: 0,
        replies: 0,
    });
    let srv_port = PortConfig {
        name: "eth0".into(),
        mac: EthernetAddress([2, 0, 0, 0, 0x5, 0x10]),
        addrs: vec![IpCidr::new(IpAddress::Ipv6(SRV), 64)],
        gateways: vec![IpAddress::Ipv6(R_ADDRS[2])],
        mtu: 1500,
        max_burst: None,
        random_seed: Some(6),
    };
    sim.add_role(
        "srv",
        vec![(srv_port, srv_link)],
        Host::new("srv", HostConfig::default()).unwrap(),
    );
    let ue = ue(&mut sim, ue_a, ue_b, pin);
    let u = sim.add_node(ue);

    let args: Vec<String> = format!("get http://[{SRV}]/bytes/{BODY} --verify --timeout-ms 600000")
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    let now = sim.now();
    assert!(sim.node_mut(u).kernel.control(now, 1, &args).is_none());
    // Some of the body has come; then the UE moves.
    sim.drive_bounded(Duration::from_secs(60), 2_000_000, |s| {
        s.node(r).replies > 600
    })
    .unwrap();
    let now = sim.now();
    let ue = sim.node_mut(u);
    ue.plug.set(1);
    ue.tun.epoch.set(ue.tun.epoch.get() + 1);
    let args: Vec<String> = ["move", "fd00:b::20/64", "fd00:b::1"]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    let v = ue.shim.control(now, 2, &args).unwrap();
    assert_eq!(v["wire"], "fd00:b::20/64", "{v}");
    sim.drive_bounded(Duration::from_secs(600), 5_000_000, |s| {
        s.node(u).kernel.role().jobs_running() == 0
    })
    .unwrap();
    let ue = sim.node_mut(u);
    let (_, result) = ue.kernel.take_replies().pop().unwrap();
    let shim_stats = ue.shim.stats().clone();
    let router = sim.node(r);
    Run {
        result,
        translated: router.translated,
        sticky_back: router.sticky_back,
        replies: router.replies,
        shim_stats,
    }
}

#[test]
fn a_moving_ue_keeps_its_download_when_its_flow_label_is_pinned() {
    let run = download_and_move(true);
    assert_eq!(run.result["ok"], 1, "{:#}", run.result["errors"]);
    assert_eq!(run.result["body_bytes"], BODY, "{:#}", run.result);
    // The egress found the moved flow by its label and translated it.
    assert!(run.translated > 50, "{} translated", run.translated);
    assert!(run.replies > 2000);
    // The UE carried the egress's Sticky-Dst back, before and after.
    assert!(run.sticky_back > 100, "{} with Sticky-Dst", run.sticky_back);
    let st = &run.shim_stats;
    assert_eq!(st.get("tun.moves"), 1);
    assert!(st.get("tun.translated_out") > 50, "{st:?}");
    // The connection's last ACK went again from the new address at once.
    assert_eq!(st.get("tun.move_probes"), 1, "{st:?}");
    assert!(st.get("tun.translated_in") > 1000, "{st:?}");
    assert!(st.get("sticky.copied") > 100, "{st:?}");
}

#[test]
fn without_pinned_labels_the_egress_loses_the_moved_flow() {
    let run = download_and_move(false);
    assert_eq!(run.result["ok"], 0, "{:#}", run.result);
    assert_eq!(run.result["failed"], 1, "{:#}", run.result);
    // Only the replayed ACK (labelled before the kernel re-drew) was
    // recognised; none of the kernel's own packets after the move.
    assert_eq!(run.translated, run.shim_stats.get("tun.move_probes"));
    assert!(run.shim_stats.get("tun.translated_out") > run.translated);
}
