//! TUN mode, traced packet by packet through a real node loop (the
//! runtime's `Node` with the [`TunShim`] role) over two in-memory links: the
//! wire (port 0) and the kernel's TUN (port 1, whose link wraps and
//! unwraps like the real one). Time is virtual; nothing touches a device.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io;
use std::net::{IpAddr, Ipv6Addr};
use std::os::fd::RawFd;
use std::rc::Rc;

use smoltcp::phy::ChecksumCapabilities;
use smoltcp::time::Instant;
use smoltcp::wire::{
    EthernetAddress, EthernetFrame, EthernetProtocol, EthernetRepr, Icmpv6Packet, Icmpv6Repr,
    IpAddress, IpCidr, IpProtocol, Ipv6Packet, Ipv6Repr, NdiscNeighborFlags, NdiscRepr, TcpControl,
    TcpPacket, TcpRepr, TcpSeqNumber,
};
use svcroute_stack::phy::Link;
use svcroute_stack::runtime::{Node, PortConfig};
use svcroute_stack::shim::edit;
use svcroute_stack::wire::ipv6opt::{OptionRepr, OptionType};
use svcroute_stack::wire::rosa::{Entry, FlowPort, Message, MessageKind, ServiceName};

use super::tun::{self, TunConfig, TunShim, KERNEL, WIRE};
use super::PortInfo;

const CIP: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xa, 0, 0, 0, 0, 0, 0x10);
const SAR: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xa, 0, 0, 0, 0, 0, 0x1);
const SI1: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xb, 0, 0, 0, 0, 0, 0x11);
const CMAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0xa, 0x10]);
const SAR_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0xa, 0x01]);
const CPORT: u16 = 40000;

/// An in-memory link: frames the test puts in `rx`, frames the node sent
/// in `tx`.
#[derive(Clone, Default)]
struct Wire {
    rx: Rc<RefCell<VecDeque<Vec<u8>>>>,
    tx: Rc<RefCell<Vec<Vec<u8>>>>,
}

impl Link for Wire {
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        let Some(f) = self.rx.borrow_mut().pop_front() else {
            return Ok(None);
        };
        buf[..f.len()].copy_from_slice(&f);
        Ok(Some(f.len()))
    }
    fn send(&mut self, frame: &[u8]) -> io::Result<bool> {
        self.tx.borrow_mut().push(frame.to_vec());
        Ok(true)
    }
    fn max_frame(&self) -> usize {
        65_550
    }
    fn mtu(&self) -> usize {
        1500
    }
    fn raw_fd(&self) -> Option<RawFd> {
        None
    }
}

/// The kernel's side of the TUN: IP packets in and out, wrapped and
/// unwrapped by [`tun::wrap`] and [`tun::unwrap`] as the real link does.
#[derive(Clone, Default)]
struct Tun {
    from_kernel: Rc<RefCell<VecDeque<Vec<u8>>>>,
    to_kernel: Rc<RefCell<Vec<Vec<u8>>>>,
}

impl Link for Tun {
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        let Some(p) = self.from_kernel.borrow_mut().pop_front() else {
            return Ok(None);
        };
        buf[14..14 + p.len()].copy_from_slice(&p);
        tun::wrap(&mut buf[..14 + p.len()]);
        Ok(Some(14 + p.len()))
    }
    fn send(&mut self, frame: &[u8]) -> io::Result<bool> {
        let Some(p) = tun::unwrap(frame) else {
            return Ok(false);
        };
        self.to_kernel.borrow_mut().push(p.to_vec());
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

/// Port 0 or 1 of the shim node.
enum Either {
    Wire(Wire),
    Tun(Tun),
}

impl Link for Either {
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        match self {
            Self::Wire(w) => w.recv(buf),
            Self::Tun(t) => t.recv(buf),
        }
    }
    fn send(&mut self, frame: &[u8]) -> io::Result<bool> {
        match self {
            Self::Wire(w) => w.send(frame),
            Self::Tun(t) => t.send(frame),
        }
    }
    fn max_frame(&self) -> usize {
        65_550
    }
    fn mtu(&self) -> usize {
        match self {
            Self::Wire(w) => w.mtu(),
            Self::Tun(t) => t.mtu(),
        }
    }
    fn raw_fd(&self) -> Option<RawFd> {
        None
    }
}

struct Rig {
    node: Node<Either, TunShim>,
    wire: Wire,
    tun: Tun,
    virt: Ipv6Addr,
    now: Instant,
}

impl Rig {
    fn new() -> Self {
        Self::with(|_| {})
    }

    /// A rig whose `[shim]` keys `tweak` changed.
    fn with(tweak: impl FnOnce(&mut TunConfig)) -> Self {
        let wire_cfg = PortConfig {
            name: "eth0".into(),
            mac: CMAC,
            addrs: vec![IpCidr::new(IpAddress::Ipv6(CIP), 64)],
            gateways: vec![IpAddress::Ipv6(SAR)],
            mtu: 1500,
            max_burst: None,
            random_seed: Some(7),
        };
        let tun_cfg = PortConfig {
            name: "rosa0".into(),
            mac: EthernetAddress([2, 0, 0, 0, 0, 0xff]),
            addrs: Vec::new(),
            gateways: Vec::new(),
            mtu: tun::tun_mtu(1500),
            max_burst: None,
            random_seed: Some(8),
        };
        let mut cfg = TunConfig {
            names: vec!["service.org".into()],
            ingress: Some(SAR),
            netns: Some("svl-t-client".into()),
            ..TunConfig::default()
        };
        tweak(&mut cfg);
        let role = TunShim::new(
            &cfg,
            PortInfo {
                mac: CMAC,
                addrs: wire_cfg.addrs.clone(),
                gateways: wire_cfg.gateways.clone(),
            },
        )
        .unwrap();
        let virt = role.names()[0].1;
        let (wire, tun) = (Wire::default(), Tun::default());
        let node = Node::new(
            "cshim",
            vec![
                (wire_cfg, Either::Wire(wire.clone())),
                (tun_cfg, Either::Tun(tun.clone())),
            ],
            role,
            Instant::ZERO,
        );
        let mut rig = Self {
            node,
            wire,
            tun,
            virt,
            now: Instant::ZERO,
        };
        rig.poll();
        rig
    }

    /// Run the node until it is quiet at the current time.
    fn poll(&mut self) {
        for _ in 0..8 {
            if !self.node.poll(self.now).unwrap() {
                break;
            }
        }
    }

    fn wire_in(&mut self, frame: Vec<u8>) {
        self.wire.rx.borrow_mut().push_back(frame);
        self.poll();
    }

    fn kernel_out(&mut self, packet: Vec<u8>) {
        self.tun.from_kernel.borrow_mut().push_back(packet);
        self.poll();
    }

    /// What went onto the wire since the last call, MLD reports left out.
    fn sent(&mut self) -> Vec<Vec<u8>> {
        let all = std::mem::take(&mut *self.wire.tx.borrow_mut());
        all.into_iter().filter(|f| !is_icmp(f, &[143])).collect()
    }

    fn kernel_in(&mut self) -> Vec<Vec<u8>> {
        std::mem::take(&mut *self.tun.to_kernel.borrow_mut())
    }

    fn counter(&self, name: &str) -> u64 {
        self.node.stats().get(name)
    }
}

fn is_icmp(frame: &[u8], types: &[u8]) -> bool {
    let l = edit::walk(frame);
    l.is_ok_and(|l| {
        l.upper_protocol == IpProtocol::Icmpv6
            && frame.get(l.upper_offset).is_some_and(|t| types.contains(t))
    })
}

fn ethernet(src: EthernetAddress, dst: EthernetAddress, ip_len: usize) -> Vec<u8> {
    let mut f = vec![0; 14 + ip_len];
    EthernetRepr {
        src_addr: src,
        dst_addr: dst,
        ethertype: EthernetProtocol::Ipv6,
    }
    .emit(&mut EthernetFrame::new_unchecked(&mut f[..]));
    f
}

fn ndisc(
    src_mac: EthernetAddress,
    dst_mac: EthernetAddress,
    src: Ipv6Addr,
    dst: Ipv6Addr,
    repr: NdiscRepr<'_>,
) -> Vec<u8> {
    let icmp = Icmpv6Repr::Ndisc(repr);
    let ip = Ipv6Repr {
        src_addr: src,
        dst_addr: dst,
        next_header: IpProtocol::Icmpv6,
        payload_len: icmp.buffer_len(),
        hop_limit: 255,
    };
    let mut f = ethernet(src_mac, dst_mac, 40 + icmp.buffer_len());
    ip.emit(&mut Ipv6Packet::new_unchecked(&mut f[14..]));
    icmp.emit(
        &src,
        &dst,
        &mut Icmpv6Packet::new_unchecked(&mut f[54..]),
        &ChecksumCapabilities::default(),
    );
    f
}

/// The SAR's Neighbor Advertisement for itself, to the client.
fn sar_na() -> Vec<u8> {
    ndisc(
        SAR_MAC,
        CMAC,
        SAR,
        CIP,
        NdiscRepr::NeighborAdvert {
            flags: NdiscNeighborFlags::SOLICITED | NdiscNeighborFlags::ROUTER,
            target_addr: SAR,
            lladdr: Some(SAR_MAC.into()),
        },
    )
}

/// An IPv6 + TCP packet (no Ethernet header) with a valid checksum.
fn tcp_packet(
    src: Ipv6Addr,
    dst: Ipv6Addr,
    sport: u16,
    dport: u16,
    flags: u8,
    data: &[u8],
) -> Vec<u8> {
    let control = match flags & 0x07 {
        0x02 => TcpControl::Syn,
        0x01 => TcpControl::Fin,
        0x04 => TcpControl::Rst,
        _ => TcpControl::None,
    };
    let repr = TcpRepr {
        src_port: sport,
        dst_port: dport,
        control,
        seq_number: TcpSeqNumber(1000),
        ack_number: (flags & 0x10 != 0).then_some(TcpSeqNumber(5001)),
        window_len: 1024,
        window_scale: None,
        max_seg_size: None,
        sack_permitted: false,
        sack_ranges: [None; 3],
        timestamp: None,
        payload: data,
    };
    let mut p = vec![0; 40 + repr.buffer_len()];
    Ipv6Repr {
        src_addr: src,
        dst_addr: dst,
        next_header: IpProtocol::Tcp,
        payload_len: repr.buffer_len(),
        hop_limit: 64,
    }
    .emit(&mut Ipv6Packet::new_unchecked(&mut p[..]));
    repr.emit(
        &mut TcpPacket::new_unchecked(&mut p[40..]),
        &IpAddress::Ipv6(src),
        &IpAddress::Ipv6(dst),
        &ChecksumCapabilities::default(),
    );
    p
}

fn framed(src_mac: EthernetAddress, dst_mac: EthernetAddress, packet: &[u8]) -> Vec<u8> {
    let mut f = ethernet(src_mac, dst_mac, packet.len());
    f[14..].copy_from_slice(packet);
    f
}

fn service() -> ServiceName {
    "service.org".parse().unwrap()
}

/// The ROSA message of a frame's Destination Options header, if any.
fn rosa_of(frame: &[u8]) -> Option<Message> {
    let mut f = frame.to_vec();
    let opts = edit::strip_dest_opts(&mut f).ok()??;
    let o = opts.iter().find(|o| o.option_type() == OptionType::Rosa)?;
    Message::from_bytes(o.data()).ok()
}

fn addrs(packet: &[u8]) -> (Ipv6Addr, Ipv6Addr) {
    let p = Ipv6Packet::new_checked(packet).unwrap();
    (p.src_addr(), p.dst_addr())
}

/// A TCP packet's checksum holds (as the kernel checks it on the TUN).
fn tcp_checksum_ok(packet: &[u8]) -> bool {
    let (src, dst) = addrs(packet);
    let p = Ipv6Packet::new_checked(packet).unwrap();
    p.next_header() == IpProtocol::Tcp
        && TcpPacket::new_checked(p.payload())
            .unwrap()
            .verify_checksum(&IpAddress::Ipv6(src), &IpAddress::Ipv6(dst))
}

#[test]
fn wrap_and_unwrap_frame_ip_packets_by_version() {
    let v6 = tcp_packet(CIP, SAR, 1, 2, 0x02, b"");
    let mut f = vec![0xa5; 14 + v6.len()];
    f[14..].copy_from_slice(&v6);
    tun::wrap(&mut f);
    assert_eq!(&f[..14], &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x86, 0xdd]);
    assert_eq!(tun::unwrap(&f), Some(&v6[..]));

    let mut f = vec![0xa5; 14 + 20];
    f[14] = 0x45;
    tun::wrap(&mut f);
    assert_eq!(&f[12..14], &[0x08, 0x00]);
    assert_eq!(tun::unwrap(&f).map(<[u8]>::len), Some(20));

    // Not IP: EtherType 0 (the node drops it as unknown); short input is left alone.
    let mut f = vec![0xa5; 14 + 4];
    f[14] = 0x10;
    tun::wrap(&mut f);
    assert_eq!(&f[12..14], &[0, 0]);
    assert_eq!(tun::unwrap(&f), None);
    let mut short = vec![0xa5; 10];
    tun::wrap(&mut short);
    assert_eq!(short, vec![0xa5; 10]);
    assert_eq!(tun::unwrap(&[0; 14]), None);
    let arp = [&[0u8; 12][..], &[0x08, 0x06], &[0; 28]].concat();
    assert_eq!(tun::unwrap(&arp), None);
    assert_eq!(tun::tun_mtu(1500), 1284);
    assert_eq!(tun::tun_mtu(1300), 1280);
}

#[test]
fn the_hosts_file_maps_each_name_to_its_virtual_address() {
    let rig = Rig::new();
    let role = rig.node.role();
    assert_eq!(role.client(), (CIP, 64));
    assert_eq!(role.virtual_prefix(), ("fd5e::".parse().unwrap(), 64));
    let hosts = role.hosts();
    assert!(hosts.contains("::1\tlocalhost"), "{hosts}");
    assert!(
        hosts.contains(&format!("{}\tservice.org\n", rig.virt)),
        "{hosts}"
    );
    let (prefix, _) = role.virtual_prefix();
    assert_eq!(rig.virt.segments()[..4], prefix.segments()[..4]);
}

#[test]
fn bad_configs_name_the_key() {
    let port = PortInfo {
        mac: CMAC,
        addrs: vec![IpCidr::new(IpAddress::Ipv6(CIP), 64)],
        gateways: vec![IpAddress::Ipv6(SAR)],
    };
    let good = TunConfig {
        names: vec!["service.org".into()],
        netns: Some("ns".into()),
        ..TunConfig::default()
    };
    assert!(TunShim::new(&good, port.clone()).is_ok());
    let err = |cfg: TunConfig| TunShim::new(&cfg, port.clone()).unwrap_err().to_string();
    let e = err(TunConfig {
        names: vec!["service.org/video".into()],
        ..good.clone()
    });
    assert!(e.contains("names[0]") && e.contains("host name"), "{e}");
    let e = err(TunConfig {
        names: Vec::new(),
        ..good.clone()
    });
    assert!(e.contains("`names`"), "{e}");
    let e = err(TunConfig {
        netns: None,
        ..good.clone()
    });
    assert!(e.contains("`netns`"), "{e}");
    let e = err(TunConfig {
        tun: "a-very-long-tun-name".into(),
        ..good.clone()
    });
    assert!(e.contains("`tun`"), "{e}");
    let e = err(TunConfig {
        virtual_prefix: "fd5e::1/64".into(),
        ..good.clone()
    });
    assert!(
        e.contains("`virtual_prefix`") && !e.contains("rosa."),
        "{e}"
    );
    let e = err(TunConfig {
        names: vec!["a.org".into(), "a.org".into()],
        ..good.clone()
    });
    assert!(e.contains("names[1]") && e.contains("twice"), "{e}");
    let v4 = PortInfo {
        addrs: vec!["10.0.0.2/24".parse().unwrap()],
        ..port.clone()
    };
    let e = TunShim::new(&good, v4).unwrap_err().to_string();
    assert!(e.contains("global IPv6"), "{e}");
    let no_gateway = PortInfo {
        gateways: Vec::new(),
        ..port.clone()
    };
    let e = TunShim::new(&good, no_gateway).unwrap_err().to_string();
    assert!(
        e.contains("key `ingress`") && !e.contains("host.rosa"),
        "{e}"
    );
}

#[test]
fn the_wire_side_answers_neighbor_solicitations_for_the_client() {
    let mut rig = Rig::new();
    // At start it solicits the ingress SAR (the first SYN's next hop).
    let sent = rig.sent();
    assert!(
        sent.iter()
            .any(|f| is_icmp(f, &[135]) && f[14 + 40 + 8..14 + 40 + 24] == SAR.octets()),
        "no NS for the SAR at start"
    );
    let t = CIP.octets();
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
        SAR_MAC,
        EthernetAddress([0x33, 0x33, 0xff, t[13], t[14], t[15]]),
        SAR,
        group,
        NdiscRepr::NeighborSolicit {
            target_addr: CIP,
            lladdr: Some(SAR_MAC.into()),
        },
    );
    rig.wire_in(ns);
    let sent = rig.sent();
    let na: Vec<&Vec<u8>> = sent.iter().filter(|f| is_icmp(f, &[136])).collect();
    assert_eq!(na.len(), 1, "{sent:?}");
    let na = na[0];
    assert_eq!(&na[0..6], SAR_MAC.as_bytes());
    assert_eq!(&na[6..12], CMAC.as_bytes());
    assert_eq!(addrs(&na[14..]), (CIP, SAR));
    assert_eq!(&na[14 + 40 + 8..14 + 40 + 24], &CIP.octets());
    // Neighbour discovery is smoltcp's: the kernel never sees it.
    assert!(rig.kernel_in().is_empty());
}

#[test]
fn a_kernel_connection_is_requested_bound_then_direct() {
    let mut rig = Rig::new();
    let v = rig.virt;
    rig.sent();

    // The kernel's SYN to V waits for the SAR's MAC, then leaves with the
    // request, addressed to the ingress SAR.
    rig.kernel_out(tcp_packet(CIP, v, CPORT, 80, 0x02, b""));
    assert_eq!(rig.counter("rosa.parked"), 1);
    rig.wire_in(sar_na());
    let sent = rig.sent();
    assert_eq!(sent.len(), 1, "{sent:?}");
    let syn = &sent[0];
    assert_eq!(&syn[0..6], SAR_MAC.as_bytes());
    assert_eq!(&syn[6..12], CMAC.as_bytes());
    assert_eq!(addrs(&syn[14..]), (CIP, SAR));
    let req = rosa_of(syn).expect("a SYN with the ROSA option");
    assert_eq!(req.kind, MessageKind::Request);
    assert_eq!(req.service(), Some(&service()));
    assert_eq!(req.client(), Some(IpAddr::V6(CIP)));
    assert_eq!(req.port().map(|p| p.port), Some(80));
    assert_eq!(rig.counter("rosa.requests_sent"), 1);

    // The SYN-ACK comes back through the SAR with the response: the kernel
    // gets it from V, option stripped, checksum valid.
    let mut msg = Message::new(MessageKind::Response);
    msg.entries.extend([
        Entry::Client(IpAddr::V6(CIP)),
        Entry::Ingress(IpAddr::V6(SAR)),
        Entry::Service(service()),
        Entry::Port(FlowPort {
            proto: IpProtocol::Tcp,
            port: 80,
        }),
        Entry::Instance(IpAddr::V6(SI1)),
    ]);
    let bytes = msg.to_bytes().unwrap();
    let mut synack = framed(SAR_MAC, CMAC, &tcp_packet(SAR, CIP, 80, CPORT, 0x12, b""));
    edit::insert_dest_opts(
        &mut synack,
        &[OptionRepr::new(OptionType::Rosa, &bytes).unwrap()],
    )
    .unwrap();
    rig.wire_in(synack);
    let got = rig.kernel_in();
    assert_eq!(got.len(), 1);
    assert_eq!(addrs(&got[0]), (v, CIP));
    assert!(tcp_checksum_ok(&got[0]), "bad checksum after the rewrite");
    assert_eq!(rig.counter("rosa.responses_received"), 1);
    assert_eq!(rig.counter("tun.to_kernel"), 1);

    // The kernel's ACK goes straight to the instance, plain, via the gateway.
    rig.kernel_out(tcp_packet(
        CIP,
        v,
        CPORT,
        80,
        0x10,
        b"GET / HTTP/1.1\r\n\r\n",
    ));
    let sent = rig.sent();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(&sent[0][0..6], SAR_MAC.as_bytes());
    assert_eq!(addrs(&sent[0][14..]), (CIP, SI1));
    assert!(rosa_of(&sent[0]).is_none(), "an option after the handshake");
    assert!(tcp_checksum_ok(&sent[0][14..]));

    // The instance's answer comes plain and reaches the kernel from V.
    rig.wire_in(framed(
        SAR_MAC,
        CMAC,
        &tcp_packet(SI1, CIP, 80, CPORT, 0x18, b"HTTP/1.1 200 OK\r\n\r\n"),
    ));
    let got = rig.kernel_in();
    assert_eq!(got.len(), 1);
    assert_eq!(addrs(&got[0]), (v, CIP));
    assert!(tcp_checksum_ok(&got[0]));
    assert_eq!(rig.node.stats().drops(), 0, "{:?}", rig.node.stats());
}

#[test]
fn plain_traffic_is_routed_and_what_cannot_go_is_counted() {
    let mut rig = Rig::new();
    rig.wire_in(sar_na());
    rig.sent();

    // A plain packet to an on-link address goes to its own MAC.
    let plain = tcp_packet(CIP, SAR, CPORT, 22, 0x02, b"");
    rig.kernel_out(plain.clone());
    let sent = rig.sent();
    assert_eq!(sent.len(), 1);
    assert_eq!(&sent[0][0..6], SAR_MAC.as_bytes());
    // Unchanged but for the flow label, pinned (the kernel sent 0).
    assert_eq!(&sent[0][18..], &plain[4..]);
    let label = rig
        .node
        .role()
        .sticky()
        .flow_label(IpProtocol::Tcp, CIP, CPORT, SAR, 22);
    assert_eq!(crate::sticky::flow_label_of(&sent[0]), Some(label));
    assert_ne!(label, 0);
    assert_eq!(rig.counter("tun.plain"), 1);
    // ...and its answer reaches the kernel unchanged.
    let back = tcp_packet(SAR, CIP, 22, CPORT, 0x14, b"");
    rig.wire_in(framed(SAR_MAC, CMAC, &back));
    assert_eq!(rig.kernel_in(), vec![back]);

    // Router solicitations, IPv4, foreign sources: dropped and counted.
    let mut rs = tcp_packet(CIP, "ff02::2".parse().unwrap(), 1, 2, 0x02, b"");
    rs[6] = 58;
    rig.kernel_out(rs);
    // IPv4 header only: version/IHL, total length 20, TTL, protocol 59.
    let v4 = vec![
        0x45, 0, 0, 20, 0, 0, 0, 0, 64, 59, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
    ];
    rig.kernel_out(v4);
    rig.kernel_out(tcp_packet(
        "fd00:a::99".parse().unwrap(),
        rig.virt,
        1,
        80,
        0x02,
        b"",
    ));
    assert_eq!(rig.counter("drop.tun.multicast"), 1);
    assert_eq!(rig.counter("drop.tun.foreign_source"), 1);
    assert_eq!(
        rig.counter("drop.tun.not_ipv6"),
        1,
        "{:?}",
        rig.node.stats()
    );
    assert!(rig.sent().is_empty());

    // Not a SYN to a virtual address without a flow: the shim's drop.
    rig.kernel_out(tcp_packet(CIP, rig.virt, 5555, 80, 0x10, b""));
    assert_eq!(rig.counter("drop.rosa.no_flow"), 1);
    assert!(rig.sent().is_empty());
    let _ = (WIRE, KERNEL);
}

const ANYCAST: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xaa08, 0, 0, 0, 0, 0, 0x4450);
const EGRESS: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x5, 0, 0, 0, 0, 0, 0x1);
const MOVED: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xb, 0, 0, 0, 0, 0, 0x20);
const GW2: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xb, 0, 0, 0, 0, 0, 0x1);
const GW2_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0xb, 0x01]);

/// The Sticky-Dst data naming `egress` (type 1, len 18, AFI 2).
fn sticky_data(egress: Ipv6Addr) -> Vec<u8> {
    let mut d = vec![0x01, 18, 0x02, 0x00];
    d.extend_from_slice(&egress.octets());
    d
}

/// `packet` from `src_mac` to the shim, with a Sticky-Dst naming `egress`.
fn with_sticky(src_mac: EthernetAddress, packet: &[u8], egress: Ipv6Addr) -> Vec<u8> {
    let mut f = framed(src_mac, CMAC, packet);
    let data = sticky_data(egress);
    edit::insert_dest_opts(
        &mut f,
        &[OptionRepr::new(OptionType::Sticky, &data).unwrap()],
    )
    .unwrap();
    f
}

/// The Sticky-Dst data of a frame's Destination Options header.
fn sticky_of(frame: &[u8]) -> Option<Vec<u8>> {
    let mut f = frame.to_vec();
    let opts = edit::strip_dest_opts(&mut f).ok()??;
    let o = opts
        .iter()
        .find(|o| o.option_type() == OptionType::Sticky)?;
    Some(o.data().to_vec())
}

fn label(frame: &[u8]) -> u32 {
    crate::sticky::flow_label_of(frame).unwrap()
}

fn ctl(rig: &mut Rig, args: &[&str]) -> serde_json::Value {
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    let v = rig.node.control(rig.now, 1, &args).unwrap();
    rig.poll();
    v
}

/// The wire frame `sent` as the kernel's packet would be after it, for
/// comparing: the TCP checksum must hold over the packet that left.
fn left_ok(frame: &[u8]) -> bool {
    let mut f = frame.to_vec();
    let _ = edit::strip_dest_opts(&mut f);
    tcp_checksum_ok(&f[14..])
}

#[test]
fn the_kernels_later_packets_carry_the_sticky_dst_it_received() {
    let mut rig = Rig::new();
    rig.wire_in(sar_na());
    rig.sent();
    rig.kernel_out(tcp_packet(CIP, ANYCAST, CPORT, 80, 0x02, b""));
    let syn = rig.sent();
    assert_eq!(syn.len(), 1);
    assert_eq!(sticky_of(&syn[0]), None);
    let l = label(&syn[0]);
    assert_ne!(l, 0, "pinned: the kernel sent 0");

    // The server side's SYN-ACK names its sticky egress; the kernel gets
    // it without the header (its checksum still holds).
    let synack = tcp_packet(ANYCAST, CIP, 80, CPORT, 0x12, b"");
    rig.wire_in(with_sticky(SAR_MAC, &synack, EGRESS));
    assert_eq!(rig.kernel_in(), vec![synack]);
    assert_eq!(rig.counter("sticky.flows"), 1);

    // The kernel's next packets carry it, with the flow's label.
    for data in [&b""[..], b"GET / HTTP/1.1\r\n\r\n"] {
        // Linux re-draws the label on an RTO: whatever it sends is replaced.
        let mut p = tcp_packet(CIP, ANYCAST, CPORT, 80, 0x18, data);
        p[1] = 0x0b;
        p[2] = 0xee;
        p[3] = 0xf0;
        rig.kernel_out(p);
        let sent = rig.sent();
        assert_eq!(sent.len(), 1);
        assert_eq!(sticky_of(&sent[0]), Some(sticky_data(EGRESS)));
        assert_eq!(label(&sent[0]), l);
        assert!(left_ok(&sent[0]));
        assert_eq!(&sent[0][0..6], SAR_MAC.as_bytes());
    }
    assert_eq!(rig.counter("sticky.copied"), 2);
    // Another flow of the kernel's carries nothing.
    rig.kernel_out(tcp_packet(CIP, ANYCAST, CPORT + 1, 80, 0x10, b""));
    let sent = rig.sent();
    assert_eq!(sticky_of(&sent[0]), None);
    assert_ne!(label(&sent[0]), l);

    // What it lists.
    let v = ctl(&mut rig, &["sticky"]);
    assert_eq!(v["flows"], 1, "{v}");
    assert_eq!(v["list"][0]["egress"], EGRESS.to_string(), "{v}");
    assert_eq!(v["list"][0]["flow_label"], l, "{v}");
    let v = ctl(&mut rig, &["status"]);
    assert_eq!(v["sticky"]["flows"], 1, "{v}");

    // A packet the option would make too big for the wire goes without.
    rig.node.role_mut().set_wire_mtu(100);
    rig.kernel_out(tcp_packet(CIP, ANYCAST, CPORT, 80, 0x18, &[0; 40]));
    let sent = rig.sent();
    assert_eq!(sticky_of(&sent[0]), None);
    assert_eq!(rig.counter("sticky.too_big"), 1);
    assert_eq!(rig.node.stats().drops(), 0, "{:?}", rig.node.stats());
}

#[test]
fn with_copy_sticky_off_nothing_is_copied_and_labels_can_stay_the_kernels() {
    let mut rig = Rig::with(|c| {
        c.copy_sticky = false;
        c.pin_flow_labels = false;
    });
    rig.wire_in(sar_na());
    rig.sent();
    let synack = tcp_packet(ANYCAST, CIP, 80, CPORT, 0x12, b"");
    rig.wire_in(with_sticky(SAR_MAC, &synack, EGRESS));
    assert_eq!(rig.kernel_in(), vec![synack]);
    let mut p = tcp_packet(CIP, ANYCAST, CPORT, 80, 0x10, b"");
    p[3] = 0x77;
    rig.kernel_out(p.clone());
    let sent = rig.sent();
    assert_eq!(&sent[0][14..], &p[..]);
    assert_eq!(rig.counter("sticky.flows"), 0);
}

#[test]
fn after_a_move_the_wire_address_changes_and_the_kernel_keeps_its_own() {
    let mut rig = Rig::new();
    rig.wire_in(sar_na());
    rig.sent();
    rig.kernel_out(tcp_packet(CIP, ANYCAST, CPORT, 80, 0x02, b""));
    let l = label(&rig.sent()[0]);
    let synack = tcp_packet(ANYCAST, CIP, 80, CPORT, 0x12, b"");
    rig.wire_in(with_sticky(SAR_MAC, &synack, EGRESS));
    rig.kernel_in();
    // The kernel's last pure ACK of the connection (data carries none).
    let last_ack = tcp_packet(CIP, ANYCAST, CPORT, 80, 0x10, b"");
    rig.kernel_out(last_ack.clone());
    rig.kernel_out(tcp_packet(CIP, ANYCAST, CPORT, 80, 0x18, b"GET"));
    rig.sent();

    let v = ctl(&mut rig, &["move", "fd00:b::20/64", "fd00:b::1"]);
    assert_eq!(v["kernel"], "fd00:a::10/64", "{v}");
    assert_eq!(v["wire"], "fd00:b::20/64", "{v}");
    assert_eq!(v["gateway"], "fd00:b::1", "{v}");
    assert_eq!(v["ingress"], "fd00:b::1", "{v}");
    assert_eq!(v["translating"], true, "{v}");
    assert_eq!(v["moves"], 1, "{v}");
    // An unsolicited NA tells the new link where we are, and the new
    // gateway is solicited from the new address.
    let sent = rig.sent();
    let na = sent.iter().find(|f| is_icmp(f, &[136])).expect("no NA");
    assert_eq!(addrs(&na[14..]), (MOVED, "ff02::1".parse().unwrap()));
    assert_eq!(&na[14 + 40 + 8..14 + 40 + 24], &MOVED.octets());
    assert_eq!(
        na[14 + 40 + 4] & 0x60,
        0x20,
        "Override set, Solicited clear"
    );
    let ns = sent.iter().find(|f| is_icmp(f, &[135])).expect("no NS");
    assert_eq!(addrs(&ns[14..]).0, MOVED);
    assert_eq!(&ns[14 + 40 + 8..14 + 40 + 24], &GW2.octets());

    // The last ACK goes again (a probe that shows the far end the new
    // address), and the kernel's next packet: both wait for the new
    // gateway, then leave from the new address: same flow label, the
    // copied option, checksum fixed.
    assert_eq!(rig.counter("tun.move_probes"), 1);
    rig.kernel_out(tcp_packet(CIP, ANYCAST, CPORT, 80, 0x18, b"more"));
    assert!(rig.sent().iter().all(|f| is_icmp(f, &[135])));
    let gw_na = ndisc(
        GW2_MAC,
        CMAC,
        GW2,
        MOVED,
        NdiscRepr::NeighborAdvert {
            flags: NdiscNeighborFlags::SOLICITED | NdiscNeighborFlags::ROUTER,
            target_addr: GW2,
            lladdr: Some(GW2_MAC.into()),
        },
    );
    rig.wire_in(gw_na);
    let sent = rig.sent();
    assert_eq!(sent.len(), 2, "{sent:?}");
    for (f, payload) in sent.iter().zip([&b""[..], b"more"]) {
        assert_eq!(&f[0..6], GW2_MAC.as_bytes());
        let mut plain = f.clone();
        edit::strip_dest_opts(&mut plain).unwrap();
        assert_eq!(addrs(&plain[14..]), (MOVED, ANYCAST));
        assert!(tcp_checksum_ok(&plain[14..]));
        assert!(plain.ends_with(payload));
        assert_eq!(plain.len(), 14 + last_ack.len() + payload.len());
        assert_eq!(label(f), l);
        assert_eq!(sticky_of(f), Some(sticky_data(EGRESS)));
    }
    assert_eq!(rig.counter("tun.translated_out"), 2);

    // Answers to the new address reach the kernel at its own.
    let back = tcp_packet(ANYCAST, MOVED, 80, CPORT, 0x18, b"data");
    rig.wire_in(framed(GW2_MAC, CMAC, &back));
    let got = rig.kernel_in();
    assert_eq!(got.len(), 1);
    assert_eq!(addrs(&got[0]), (ANYCAST, CIP));
    assert!(tcp_checksum_ok(&got[0]));
    assert_eq!(rig.counter("tun.translated_in"), 1);
    // The old address is not ours on this link any more.
    rig.wire_in(framed(GW2_MAC, CMAC, &synack));
    assert!(rig.kernel_in().is_empty());

    // smoltcp answers for the new address.
    let t = MOVED.octets();
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
    rig.wire_in(ndisc(
        GW2_MAC,
        EthernetAddress([0x33, 0x33, 0xff, t[13], t[14], t[15]]),
        GW2,
        group,
        NdiscRepr::NeighborSolicit {
            target_addr: MOVED,
            lladdr: Some(GW2_MAC.into()),
        },
    ));
    let sent = rig.sent();
    let na = sent
        .iter()
        .find(|f| is_icmp(f, &[136]))
        .expect("no NA for the new address");
    assert_eq!(addrs(&na[14..]), (MOVED, GW2));

    // Moving back home ends the translation.
    let v = ctl(&mut rig, &["move", "fd00:a::10/64", "fd00:a::1"]);
    assert_eq!(v["translating"], false, "{v}");
    rig.sent();
    rig.wire_in(sar_na());
    rig.kernel_out(tcp_packet(CIP, ANYCAST, CPORT, 80, 0x10, b""));
    let sent = rig.sent();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(addrs(&sent[0][14..]).0, CIP);
    assert_eq!(rig.counter("tun.translated_out"), 2);
    assert_eq!(rig.counter("tun.moves"), 2);
    assert_eq!(rig.node.stats().drops(), 0, "{:?}", rig.node.stats());
}

#[test]
fn a_bad_move_is_refused_with_the_reason_and_changes_nothing() {
    let mut rig = Rig::new();
    for (args, why) in [
        (&["move"][..], "usage"),
        (&["move", "fd00:b::20/64"], "usage"),
        (&["move", "fd00:b::20", "fd00:b::1"], "address/prefix"),
        (&["move", "10.0.0.2/24", "10.0.0.1"], "not IPv6"),
        (&["move", "fe80::2/64", "fe80::1"], "global unicast"),
        (&["move", "fd5e::7/64", "fd5e::1"], "virtual prefix"),
        (&["move", "fd00:b::20/64", "fd00:c::1"], "on-link"),
        (&["move", "fd00:b::20/64", "fd00:b::20"], "on-link"),
        (&["move", "fd00:b::20/64", "nope"], "not an IPv6 address"),
        (
            &["move", "fd00:b::20/64", "fd00:b::1", "x"],
            "not an IPv6 address",
        ),
    ] {
        let v = ctl(&mut rig, args);
        let e = v["error"].as_str().unwrap_or_default();
        assert!(e.contains(why), "{args:?}: {v}");
    }
    let v = ctl(&mut rig, &["status"]);
    assert_eq!(v["wire"], "fd00:a::10/64", "{v}");
    assert_eq!(v["moves"], 0, "{v}");
}
