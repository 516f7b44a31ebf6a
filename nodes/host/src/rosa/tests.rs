//! The shim's flow state machines, traced frame by frame with frames built
//! by hand: what smoltcp would send, what the wire would bring, and the
//! exact octets of the options the shim puts on the wire.

use std::net::{IpAddr, Ipv6Addr};

use proptest::prelude::*;
use smoltcp::phy::ChecksumCapabilities;
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{
    EthernetAddress, EthernetFrame, EthernetProtocol, EthernetRepr, IpAddress, IpCidr, IpProtocol,
    Ipv6Packet, Ipv6Repr, TcpControl, TcpPacket, TcpRepr, TcpSeqNumber, UdpPacket, UdpRepr,
};
use svcroute_stack::shim::edit;
use svcroute_stack::shim::Verdict;
use svcroute_stack::stats::Counters;
use svcroute_stack::wire::ipv6opt::{OptionRepr, OptionType};
use svcroute_stack::wire::rosa::{
    Constraint, Entry, FlowPort, Message, MessageKind, Mode, Policy, ServiceName,
};

use super::*;

const CLIENT: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0x01);
const SAR: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0xfe);
const SI1: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0x11);
const SI2: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0x12);
const CLIENT_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 0x01]);
const SAR_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 0xfe]);
const SI1_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 0x11]);
const SI2_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 0x12]);
const CPORT: u16 = 49152;

fn t(ms: i64) -> Instant {
    Instant::from_millis(ms)
}

fn port(mac: EthernetAddress, addr: Ipv6Addr) -> PortInfo {
    PortInfo {
        mac,
        addrs: vec![IpCidr::new(IpAddress::Ipv6(addr), 64)],
        gateways: Vec::new(),
    }
}

fn service() -> ServiceName {
    "service.org".parse().unwrap()
}

/// A client shim whose ingress is the SAR, started, with the SAR's MAC known.
fn client(cfg: RosaConfig) -> (Shim, Counters) {
    let mut stats = Counters::default();
    let mut shim = Shim::new(Some(&RosaConfig {
        ingress: Some(SAR),
        ..cfg
    }))
    .unwrap();
    shim.start(t(0), vec![port(CLIENT_MAC, CLIENT)], &mut stats);
    shim.learn(t(0), 0, SAR, SAR_MAC);
    (shim, stats)
}

/// An instance shim of `service.org` (round robin) behind the SAR.
fn instance(addr: Ipv6Addr, mac: EthernetAddress, cfg: RosaConfig) -> (Shim, Counters) {
    let mut stats = Counters::default();
    let mut shim = Shim::new(Some(&RosaConfig {
        sar: Some(SAR),
        serve: vec![serve()],
        ..cfg
    }))
    .unwrap();
    shim.learn(t(0), 0, SAR, SAR_MAC);
    shim.start(t(0), vec![port(mac, addr)], &mut stats);
    (shim, stats)
}

fn serve() -> ServeConfig {
    ServeConfig {
        service: "service.org".into(),
        mode: Some("scheduling".into()),
        policy: Some("round-robin".into()),
        capability: Some(10),
        load: None,
        latency_us: None,
        preference: None,
        lifetime_s: 30,
        live_load_step: None,
    }
}

#[derive(Clone, Copy)]
struct Tcp {
    flags: u8,
    seq: u32,
    ack: u32,
}

const SYN_: Tcp = Tcp {
    flags: 0x02,
    seq: 1000,
    ack: 0,
};
const SYNACK: Tcp = Tcp {
    flags: 0x12,
    seq: 5000,
    ack: 1001,
};
const ACK_: Tcp = Tcp {
    flags: 0x10,
    seq: 1001,
    ack: 5001,
};

/// An Ethernet + IPv6 + TCP frame with a valid checksum and `payload`.
#[allow(clippy::too_many_arguments)]
fn tcp(
    src_mac: EthernetAddress,
    dst_mac: EthernetAddress,
    src: Ipv6Addr,
    dst: Ipv6Addr,
    sport: u16,
    dport: u16,
    seg: Tcp,
    payload: &[u8],
) -> Vec<u8> {
    let control = match seg.flags & 0x07 {
        0x02 => TcpControl::Syn,
        0x01 => TcpControl::Fin,
        0x04 => TcpControl::Rst,
        _ => TcpControl::None,
    };
    let repr = TcpRepr {
        src_port: sport,
        dst_port: dport,
        control,
        seq_number: TcpSeqNumber(seg.seq as i32),
        ack_number: (seg.flags & 0x10 != 0).then_some(TcpSeqNumber(seg.ack as i32)),
        window_len: 1024,
        window_scale: None,
        max_seg_size: None,
        sack_permitted: false,
        sack_ranges: [None; 3],
        timestamp: None,
        payload,
    };
    let len = repr.buffer_len();
    let mut f = ip_frame(src_mac, dst_mac, src, dst, IpProtocol::Tcp, len);
    repr.emit(
        &mut TcpPacket::new_unchecked(&mut f[54..]),
        &IpAddress::Ipv6(src),
        &IpAddress::Ipv6(dst),
        &ChecksumCapabilities::default(),
    );
    f
}

fn udp(
    src_mac: EthernetAddress,
    dst_mac: EthernetAddress,
    src: Ipv6Addr,
    dst: Ipv6Addr,
    sport: u16,
    dport: u16,
    payload: &[u8],
) -> Vec<u8> {
    let repr = UdpRepr {
        src_port: sport,
        dst_port: dport,
    };
    let mut f = ip_frame(
        src_mac,
        dst_mac,
        src,
        dst,
        IpProtocol::Udp,
        8 + payload.len(),
    );
    repr.emit(
        &mut UdpPacket::new_unchecked(&mut f[54..]),
        &IpAddress::Ipv6(src),
        &IpAddress::Ipv6(dst),
        payload.len(),
        |b| b.copy_from_slice(payload),
        &ChecksumCapabilities::default(),
    );
    f
}

fn ip_frame(
    src_mac: EthernetAddress,
    dst_mac: EthernetAddress,
    src: Ipv6Addr,
    dst: Ipv6Addr,
    proto: IpProtocol,
    len: usize,
) -> Vec<u8> {
    let mut f = vec![0; 54 + len];
    EthernetRepr {
        src_addr: src_mac,
        dst_addr: dst_mac,
        ethertype: EthernetProtocol::Ipv6,
    }
    .emit(&mut EthernetFrame::new_unchecked(&mut f[..]));
    Ipv6Repr {
        src_addr: src,
        dst_addr: dst,
        next_header: proto,
        payload_len: len,
        hop_limit: 64,
    }
    .emit(&mut Ipv6Packet::new_unchecked(&mut f[14..]));
    f
}

/// `frame` with a Destination Options header carrying `msg`.
fn with_rosa(mut frame: Vec<u8>, msg: &Message) -> Vec<u8> {
    let bytes = msg.to_bytes().unwrap();
    let opt = OptionRepr::new(OptionType::Rosa, &bytes).unwrap();
    edit::insert_dest_opts(&mut frame, &[opt]).unwrap();
    frame
}

fn msg(kind: MessageKind, entries: Vec<Entry>) -> Message {
    Message { kind, entries }
}

fn response(instance: Ipv6Addr) -> Message {
    msg(
        MessageKind::Response,
        vec![
            Entry::Client(CLIENT.into()),
            Entry::Ingress(SAR.into()),
            Entry::Service(service()),
            Entry::Port(FlowPort {
                proto: IpProtocol::Tcp,
                port: 80,
            }),
            Entry::Instance(instance.into()),
        ],
    )
}

fn request(client: Ipv6Addr, proto: IpProtocol, port: u16) -> Message {
    msg(
        MessageKind::Request,
        vec![
            Entry::Client(client.into()),
            Entry::Ingress(SAR.into()),
            Entry::Service(service()),
            Entry::Port(FlowPort { proto, port }),
        ],
    )
}

/// What the host does on ingress: strip the options, hand the ROSA one over.
#[track_caller]
fn ingress(shim: &mut Shim, stats: &mut Counters, now: Instant, frame: &mut Vec<u8>) -> Verdict {
    let opts = edit::strip_dest_opts(frame).unwrap().unwrap_or_default();
    let rosa = opts
        .iter()
        .find(|o| o.option_type() == OptionType::Rosa)
        .map(|o| o.data().to_vec());
    shim.ingress(now, 0, frame, rosa.as_deref(), stats)
}

/// What a frame looks like on the wire.
#[derive(Debug, PartialEq, Eq)]
struct Wire {
    dst_mac: EthernetAddress,
    src: Ipv6Addr,
    dst: Ipv6Addr,
    /// The ROSA message, if the frame carries one.
    rosa: Option<Message>,
}

/// Read a frame back, checking its transport checksum over its (possibly
/// rewritten) addresses.
#[track_caller]
fn wire(frame: &[u8]) -> Wire {
    let mut copy = frame.to_vec();
    let opts = edit::strip_dest_opts(&mut copy)
        .unwrap()
        .unwrap_or_default();
    let rosa = opts
        .iter()
        .find(|o| o.option_type() == OptionType::Rosa)
        .map(|o| Message::from_bytes(o.data()).unwrap());
    let ip = Ipv6Packet::new_checked(&copy[14..]).unwrap();
    let (src, dst) = (ip.src_addr(), ip.dst_addr());
    let (s, d) = (IpAddress::Ipv6(src), IpAddress::Ipv6(dst));
    let ok = match ip.next_header() {
        IpProtocol::Tcp => TcpPacket::new_checked(ip.payload())
            .unwrap()
            .verify_checksum(&s, &d),
        IpProtocol::Udp => UdpPacket::new_checked(ip.payload())
            .unwrap()
            .verify_checksum(&s, &d),
        other => panic!("unexpected {other}"),
    };
    assert!(ok, "bad transport checksum");
    Wire {
        dst_mac: EthernetAddress::from_bytes(&frame[0..6]),
        src,
        dst,
        rosa,
    }
}

/// The Destination Options header of a frame whose upper layer follows it.
fn dest_opts(frame: &[u8]) -> Vec<u8> {
    let at = edit::walk(frame).unwrap().dest_opts.unwrap().range;
    frame[at].to_vec()
}

fn virt_of(shim: &mut Shim) -> Ipv6Addr {
    shim.open(t(0), &service()).unwrap().virt
}

// --- client side ---------------------------------------------------------

#[test]
fn client_requests_until_the_response_then_sends_to_the_instance() {
    let (mut shim, mut stats) = client(RosaConfig::default());
    let v = virt_of(&mut shim);
    // smoltcp addressed the SYN to the virtual address via the ingress SAR.
    let syn = || tcp(CLIENT_MAC, SAR_MAC, CLIENT, v, CPORT, 80, SYN_, b"");

    let mut f = syn();
    assert_eq!(shim.egress(t(1), 0, &mut f, &mut stats), Verdict::Pass);
    // Golden: the Destination Options header before TCP, exactly.
    #[rustfmt::skip]
    let golden: Vec<u8> = [
        &[0x06, 0x07, 0x3e, 0x3b, 0x12][..],            // next TCP, 64 octets; ROSA, 59; v1 request
        &[0x02, 0x10], &CLIENT.octets(),                 // Client fd00::1
        &[0x03, 0x10], &SAR.octets(),                    // Ingress fd00::fe
        &[0x01, 0x0f, 0x00, 0x01, 0x00, 0x0b], b"service.org", // Service
        &[0x05, 0x03, 0x06, 0x00, 0x50],                 // Port TCP/80
        &[0x00],                                         // Pad1
    ].concat();
    assert_eq!(dest_opts(&f), golden);
    assert_eq!(
        wire(&f),
        Wire {
            dst_mac: SAR_MAC,
            src: CLIENT,
            dst: SAR,
            rosa: Some(request(CLIENT, IpProtocol::Tcp, 80)),
        }
    );

    // A retransmitted SYN still carries the request.
    let mut f = syn();
    assert_eq!(shim.egress(t(1001), 0, &mut f, &mut stats), Verdict::Pass);
    assert_eq!(wire(&f).rosa, Some(request(CLIENT, IpProtocol::Tcp, 80)));
    assert_eq!(stats.get("rosa.requests_sent"), 2);

    // The SYN-ACK comes back from the SAR with the response: smoltcp sees
    // it from the virtual address.
    let mut f = with_rosa(
        tcp(SAR_MAC, CLIENT_MAC, SAR, CLIENT, 80, CPORT, SYNACK, b""),
        &response(SI1),
    );
    assert_eq!(
        ingress(&mut shim, &mut stats, t(1002), &mut f),
        Verdict::Pass
    );
    let w = wire(&f);
    assert_eq!((w.src, w.dst, w.rosa), (v, CLIENT, None));
    assert_eq!(shim.bound_instance(IpProtocol::Tcp, CPORT), Some(SI1));

    // The handshake's ACK goes straight to the instance, plain. Its MAC is
    // not known yet: the frame waits while the driver resolves it.
    let mut f = tcp(CLIENT_MAC, SAR_MAC, CLIENT, v, CPORT, 80, ACK_, b"");
    assert_eq!(
        shim.egress(t(1003), 0, &mut f, &mut stats),
        Verdict::Consume
    );
    assert_eq!(shim.poll_resolve(), Some((0, SI1)));
    assert_eq!(shim.poll_resolve(), None);
    assert!(shim.poll_transmit().is_none());
    shim.learn(t(1004), 0, SI1, SI1_MAC);
    let (p, f) = shim.poll_transmit().unwrap();
    assert_eq!(p, 0);
    assert_eq!(
        wire(&f),
        Wire {
            dst_mac: SI1_MAC,
            src: CLIENT,
            dst: SI1,
            rosa: None,
        }
    );
    // From now on at once.
    let mut f = tcp(
        CLIENT_MAC,
        SAR_MAC,
        CLIENT,
        v,
        CPORT,
        80,
        ACK_,
        b"GET / HTTP/1.1\r\n\r\n",
    );
    assert_eq!(shim.egress(t(1005), 0, &mut f, &mut stats), Verdict::Pass);
    assert_eq!(wire(&f).dst, SI1);
    assert_eq!(wire(&f).dst_mac, SI1_MAC);

    // The instance answers directly: smoltcp sees the virtual address.
    let mut f = tcp(
        SI1_MAC,
        CLIENT_MAC,
        SI1,
        CLIENT,
        80,
        CPORT,
        ACK_,
        b"HTTP/1.1 200 OK\r\n",
    );
    assert_eq!(
        ingress(&mut shim, &mut stats, t(1006), &mut f),
        Verdict::Pass
    );
    assert_eq!((wire(&f).src, wire(&f).dst), (v, CLIENT));
    assert_eq!(stats.get("rosa.requests_sent"), 2);
    assert_eq!(stats.get("rosa.responses_received"), 1);
    assert_eq!(stats.drops(), 0, "{stats:?}");
}

/// Found by bench-rosa: the kernel reused a local port of a closed ROSA
/// flow for a plain connection to the same instance and port; the
/// instance's SYN-ACK was rewritten to come from the virtual address and
/// the kernel reset it, for as long as the old flow lingered.
#[test]
fn a_plain_connection_reusing_a_closed_flows_port_is_left_alone() {
    let (mut shim, mut stats) = client(RosaConfig::default());
    let v = virt_of(&mut shim);
    let bind = |shim: &mut Shim, stats: &mut Counters, at: i64| {
        let mut f = tcp(CLIENT_MAC, SAR_MAC, CLIENT, v, CPORT, 80, SYN_, b"");
        assert_eq!(shim.egress(t(at), 0, &mut f, stats), Verdict::Pass);
        let mut f = with_rosa(
            tcp(SAR_MAC, CLIENT_MAC, SAR, CLIENT, 80, CPORT, SYNACK, b""),
            &response(SI1),
        );
        assert_eq!(ingress(shim, stats, t(at + 1), &mut f), Verdict::Pass);
        assert_eq!(shim.bound_instance(IpProtocol::Tcp, CPORT), Some(SI1));
    };
    let plain_syn = || tcp(CLIENT_MAC, SAR_MAC, CLIENT, SI1, CPORT, 80, SYN_, b"");
    let plain_synack = || tcp(SI1_MAC, CLIENT_MAC, SI1, CLIENT, 80, CPORT, SYNACK, b"");

    // While the ROSA flow is open, its binding stays.
    bind(&mut shim, &mut stats, 1);
    let mut f = plain_syn();
    assert_eq!(shim.egress(t(3), 0, &mut f, &mut stats), Verdict::Pass);
    assert_eq!(stats.get("rosa.binding_released"), 0);

    // Closed (reset by the client): a plain SYN from the same port to the
    // same instance and port releases it, and the instance's answer
    // reaches the kernel as it is.
    let rst = Tcp {
        flags: 0x04,
        seq: 1001,
        ack: 0,
    };
    let mut f = tcp(CLIENT_MAC, SAR_MAC, CLIENT, v, CPORT, 80, rst, b"");
    let _ = shim.egress(t(4), 0, &mut f, &mut stats);
    let mut f = plain_syn();
    assert_eq!(shim.egress(t(5), 0, &mut f, &mut stats), Verdict::Pass);
    assert_eq!(wire(&f).dst, SI1);
    assert_eq!(stats.get("rosa.binding_released"), 1);
    let mut f = plain_synack();
    assert_eq!(ingress(&mut shim, &mut stats, t(6), &mut f), Verdict::Pass);
    assert_eq!((wire(&f).src, wire(&f).dst), (SI1, CLIENT));
    assert_eq!(stats.drops(), 0, "{stats:?}");
}

#[test]
fn a_late_duplicate_response_is_harmless_and_another_instance_is_reset() {
    let (mut shim, mut stats) = client(RosaConfig::default());
    let v = virt_of(&mut shim);
    shim.learn(t(0), 0, SI1, SI1_MAC);
    shim.learn(t(0), 0, SI2, SI2_MAC);
    let mut f = tcp(CLIENT_MAC, SAR_MAC, CLIENT, v, CPORT, 80, SYN_, b"");
    assert_eq!(shim.egress(t(1), 0, &mut f, &mut stats), Verdict::Pass);
    let synack = |i| {
        with_rosa(
            tcp(SAR_MAC, CLIENT_MAC, SAR, CLIENT, 80, CPORT, SYNACK, b""),
            &response(i),
        )
    };
    let mut f = synack(SI1);
    assert_eq!(ingress(&mut shim, &mut stats, t(2), &mut f), Verdict::Pass);

    // The same instance's SYN-ACK again (its retransmission crossed our
    // ACK): passed on as from the virtual address, affinity unchanged.
    let mut f = synack(SI1);
    assert_eq!(ingress(&mut shim, &mut stats, t(3), &mut f), Verdict::Pass);
    assert_eq!(wire(&f).src, v);
    assert_eq!(stats.get("rosa.responses_duplicate"), 1);
    assert_eq!(shim.bound_instance(IpProtocol::Tcp, CPORT), Some(SI1));

    // Another instance answering a retransmitted SYN the ingress scheduled
    // elsewhere: dropped, and that instance's half-open connection reset.
    let mut f = synack(SI2);
    assert_eq!(
        ingress(&mut shim, &mut stats, t(4), &mut f),
        Verdict::Drop("rosa.response_conflict")
    );
    assert_eq!(shim.bound_instance(IpProtocol::Tcp, CPORT), Some(SI1));
    let (_, rst) = shim.poll_transmit().unwrap();
    let w = wire(&rst);
    assert_eq!(
        (w.dst_mac, w.src, w.dst, w.rosa),
        (SI2_MAC, CLIENT, SI2, None)
    );
    let seg = TcpPacket::new_checked(&rst[54..]).unwrap();
    assert!(seg.rst() && !seg.ack());
    assert_eq!((seg.src_port(), seg.dst_port()), (CPORT, 80));
    assert_eq!(seg.seq_number(), TcpSeqNumber(SYNACK.ack as i32));

    // Still bound: the next segment goes to SI1.
    let mut f = tcp(CLIENT_MAC, SAR_MAC, CLIENT, v, CPORT, 80, ACK_, b"");
    assert_eq!(shim.egress(t(5), 0, &mut f, &mut stats), Verdict::Pass);
    assert_eq!(wire(&f).dst, SI1);
}

#[test]
fn every_udp_datagram_carries_the_request_until_a_response() {
    let (mut shim, mut stats) = client(RosaConfig::default());
    let v = virt_of(&mut shim);
    shim.learn(t(0), 0, SI2, SI2_MAC);
    let dgram = || udp(CLIENT_MAC, SAR_MAC, CLIENT, v, 40000, 7, b"ping");
    for i in 0..3 {
        let mut f = dgram();
        assert_eq!(shim.egress(t(i), 0, &mut f, &mut stats), Verdict::Pass);
        let w = wire(&f);
        assert_eq!(
            (w.dst, w.rosa),
            (SAR, Some(request(CLIENT, IpProtocol::Udp, 7)))
        );
    }
    let mut reply = msg(MessageKind::Response, response(SI2).entries);
    reply.set(Entry::Port(FlowPort {
        proto: IpProtocol::Udp,
        port: 7,
    }));
    let mut f = with_rosa(
        udp(SAR_MAC, CLIENT_MAC, SAR, CLIENT, 7, 40000, b"ping"),
        &reply,
    );
    assert_eq!(ingress(&mut shim, &mut stats, t(5), &mut f), Verdict::Pass);
    assert_eq!(wire(&f).src, v);
    let mut f = dgram();
    assert_eq!(shim.egress(t(6), 0, &mut f, &mut stats), Verdict::Pass);
    assert_eq!(
        wire(&f),
        Wire {
            dst_mac: SI2_MAC,
            src: CLIENT,
            dst: SI2,
            rosa: None
        }
    );
    assert_eq!(stats.get("rosa.requests_sent"), 3);
    // Another local port is another transaction: it asks again.
    let mut f = udp(CLIENT_MAC, SAR_MAC, CLIENT, v, 40001, 7, b"ping");
    assert_eq!(shim.egress(t(7), 0, &mut f, &mut stats), Verdict::Pass);
    assert_eq!(wire(&f).dst, SAR);
}

#[test]
fn client_refusals_are_counted_by_reason() {
    let (mut shim, mut stats) = client(RosaConfig {
        max_flows: 2,
        ..RosaConfig::default()
    });
    let v = virt_of(&mut shim);
    // Not a SYN, no flow: nothing to start a transaction with.
    let mut f = tcp(CLIENT_MAC, SAR_MAC, CLIENT, v, CPORT, 80, ACK_, b"");
    assert_eq!(
        shim.egress(t(1), 0, &mut f, &mut stats),
        Verdict::Drop("rosa.no_flow")
    );
    // A virtual address no name stands for.
    let other = Ipv6Addr::from(u128::from(v) ^ 1);
    let mut f = tcp(CLIENT_MAC, SAR_MAC, CLIENT, other, CPORT, 80, SYN_, b"");
    assert_eq!(
        shim.egress(t(1), 0, &mut f, &mut stats),
        Verdict::Drop("rosa.unknown_virtual")
    );
    // A first fragment of a big UDP datagram: no room for the option.
    let mut f = udp(CLIENT_MAC, SAR_MAC, CLIENT, v, 40000, 7, &[0; 64]);
    let frag = [17, 0, 0x00, 0x01, 0, 0, 0, 7]; // next UDP, offset 0, M, id 7
    f.splice(54..54, frag);
    f[14 + 6] = 44;
    let len = u16::from_be_bytes([f[18], f[19]]) + 8;
    f[18..20].copy_from_slice(&len.to_be_bytes());
    assert_eq!(
        shim.egress(t(1), 0, &mut f, &mut stats),
        Verdict::Drop("rosa.virtual_fragmented")
    );
    // The flow cap.
    for p in 0..2 {
        let mut f = tcp(CLIENT_MAC, SAR_MAC, CLIENT, v, CPORT + p, 80, SYN_, b"");
        assert_eq!(shim.egress(t(2), 0, &mut f, &mut stats), Verdict::Pass);
    }
    let mut f = tcp(CLIENT_MAC, SAR_MAC, CLIENT, v, CPORT + 2, 80, SYN_, b"");
    assert_eq!(
        shim.egress(t(2), 0, &mut f, &mut stats),
        Verdict::Drop("rosa.flows_full")
    );
    // A reset of a connection still requesting (an aborted connect).
    let rst = Tcp {
        flags: 0x04,
        ..SYN_
    };
    let mut f = tcp(CLIENT_MAC, SAR_MAC, CLIENT, v, CPORT, 80, rst, b"");
    assert_eq!(
        shim.egress(t(3), 0, &mut f, &mut stats),
        Verdict::Drop("rosa.unbound")
    );
    // Responses that match nothing, or contradict the packet.
    let resp = |m: &Message, sport, dport| {
        with_rosa(
            tcp(SAR_MAC, CLIENT_MAC, SAR, CLIENT, sport, dport, SYNACK, b""),
            m,
        )
    };
    let mut f = resp(&response(SI1), 80, CPORT + 7);
    assert_eq!(
        ingress(&mut shim, &mut stats, t(4), &mut f),
        Verdict::Drop("rosa.response_unmatched")
    );
    let mut f = resp(&response(SI1), 81, CPORT);
    assert_eq!(
        ingress(&mut shim, &mut stats, t(4), &mut f),
        Verdict::Drop("rosa.response_inconsistent")
    );
    let mut m = response(SI1);
    m.set(Entry::Service("other.org".parse().unwrap()));
    let mut f = resp(&m, 80, CPORT);
    assert_eq!(
        ingress(&mut shim, &mut stats, t(4), &mut f),
        Verdict::Drop("rosa.response_unmatched")
    );
    let mut m = response(SI1);
    m.remove(svcroute_stack::wire::rosa::EntryType::Instance);
    let mut f = resp(&m, 80, CPORT);
    assert_eq!(
        ingress(&mut shim, &mut stats, t(4), &mut f),
        Verdict::Drop("rosa.response_incomplete")
    );
    // The flow is still waiting for a real response.
    assert_eq!(shim.bound_instance(IpProtocol::Tcp, CPORT), None);
}

#[test]
fn malformed_rosa_options_are_dropped_never_a_panic() {
    let (mut shim, mut stats) = client(RosaConfig::default());
    let plain = tcp(SAR_MAC, CLIENT_MAC, SAR, CLIENT, 80, CPORT, SYNACK, b"");
    for data in [
        &[][..],
        &[0x23][..],             // version 2
        &[0x13, 0x02, 0x10][..], // Client entry cut short
        &[0x13, 0x01, 0x03, 0x00, 0x01, 0x00][..],
    ] {
        let mut f = plain.clone();
        assert_eq!(
            shim.ingress(t(1), 0, &mut f, Some(data), &mut stats),
            Verdict::Drop("rosa.malformed"),
            "{data:02x?}"
        );
    }
    let ann = msg(MessageKind::Announcement, vec![Entry::Instance(SI1.into())]);
    let mut f = with_rosa(plain.clone(), &ann);
    assert_eq!(
        ingress(&mut shim, &mut stats, t(1), &mut f),
        Verdict::Drop("rosa.unexpected_kind")
    );
    let mut f = with_rosa(plain.clone(), &msg(MessageKind::Unknown(9), Vec::new()));
    assert_eq!(
        ingress(&mut shim, &mut stats, t(1), &mut f),
        Verdict::Drop("rosa.unknown_kind")
    );
    // Not serving anything: a request is refused.
    let mut f = with_rosa(plain, &request(CLIENT, IpProtocol::Tcp, 80));
    assert_eq!(
        ingress(&mut shim, &mut stats, t(1), &mut f),
        Verdict::Drop("rosa.not_serving")
    );
}

#[test]
fn without_a_rosa_section_options_pass_untouched_until_a_job_opens_a_name() {
    let mut stats = Counters::default();
    let mut shim = Shim::new(None).unwrap();
    let gw = PortInfo {
        gateways: vec![IpAddress::Ipv6(SAR)],
        ..port(CLIENT_MAC, CLIENT)
    };
    shim.start(t(0), vec![gw], &mut stats);
    let plain = tcp(SAR_MAC, CLIENT_MAC, SAR, CLIENT, 80, CPORT, SYNACK, b"");
    let mut f = plain.clone();
    assert_eq!(
        shim.ingress(t(1), 0, &mut f, Some(&[0x11, 0x02, 0xaa]), &mut stats),
        Verdict::Pass
    );
    assert_eq!(f, plain);
    // `--rosa` without a section: the ingress is the IPv6 gateway.
    let target = shim.open(t(2), &service()).unwrap();
    assert_eq!((target.ingress, target.hop, target.port), (SAR, SAR, 0));
    shim.learn(t(2), 0, SAR, SAR_MAC);
    let mut f = tcp(
        CLIENT_MAC,
        SAR_MAC,
        CLIENT,
        target.virt,
        CPORT,
        80,
        SYN_,
        b"",
    );
    assert_eq!(shim.egress(t(3), 0, &mut f, &mut stats), Verdict::Pass);
    assert_eq!(wire(&f).dst, SAR);
    let mut f = plain.clone();
    assert_eq!(
        shim.ingress(t(4), 0, &mut f, Some(&[0x11, 0x02, 0xaa]), &mut stats),
        Verdict::Drop("rosa.malformed")
    );
}

#[test]
fn virtual_addresses_are_stable_per_name_and_inside_the_prefix() {
    let (mut a, _) = client(RosaConfig::default());
    let (mut b, _) = client(RosaConfig::default());
    let names = ["service.org", "service.org/video", "other.example"];
    let mut seen = Vec::new();
    for n in names {
        let name: ServiceName = n.parse().unwrap();
        let v = a.open(t(0), &name).unwrap().virt;
        assert_eq!(b.open(t(9), &name).unwrap().virt, v, "{n}");
        assert_eq!(a.open(t(1), &name).unwrap().virt, v, "{n}");
        assert_eq!(u128::from(v) >> 64, 0xfd5e_0000_0000_0000, "{v}");
        assert!(!seen.contains(&v));
        seen.push(v);
    }
    assert_eq!(
        a.open(t(0), &ServiceName::WILDCARD),
        Err(OpenError::Wildcard)
    );
    // A longer prefix leaves fewer host bits, still one address per name.
    let (mut c, _) = client(RosaConfig {
        virtual_prefix: "fd5e:1:2:3:4:5::/96".into(),
        ..RosaConfig::default()
    });
    let v = c.open(t(0), &service()).unwrap().virt;
    assert_eq!(
        u128::from(v) >> 32,
        u128::from(Ipv6Addr::new(0xfd5e, 1, 2, 3, 4, 5, 0, 0)) >> 32
    );
}

#[test]
fn the_name_table_is_bounded_and_evicts_only_unused_names() {
    let (mut shim, mut stats) = client(RosaConfig {
        max_services: 2,
        ..RosaConfig::default()
    });
    let a: ServiceName = "a.org".parse().unwrap();
    let b: ServiceName = "b.org".parse().unwrap();
    let c: ServiceName = "c.org".parse().unwrap();
    let va = shim.open(t(0), &a).unwrap().virt;
    let vb = shim.open(t(1), &b).unwrap().virt;
    // Both in use by a flow: a third name is refused.
    for v in [va, vb] {
        let mut f = tcp(CLIENT_MAC, SAR_MAC, CLIENT, v, CPORT, 80, SYN_, b"");
        assert_eq!(shim.egress(t(2), 0, &mut f, &mut stats), Verdict::Pass);
    }
    assert_eq!(shim.open(t(3), &c), Err(OpenError::Full(2)));
    // Once a's flow expired, a goes.
    let idle = Duration::from_secs(RosaConfig::default().flow_idle_s);
    let mut f = tcp(CLIENT_MAC, SAR_MAC, CLIENT, vb, CPORT, 80, SYN_, b"");
    let later = t(2) + idle - Duration::from_secs(2);
    assert_eq!(shim.egress(later, 0, &mut f, &mut stats), Verdict::Pass);
    shim.handle_timeout(t(2) + idle, &mut stats);
    assert_eq!(stats.get("rosa.client_flows_expired"), 1);
    assert!(shim.open(t(2) + idle, &c).is_ok());
    let mut f = tcp(CLIENT_MAC, SAR_MAC, CLIENT, va, CPORT, 80, SYN_, b"");
    assert_eq!(
        shim.egress(t(2) + idle, 0, &mut f, &mut stats),
        Verdict::Drop("rosa.unknown_virtual")
    );
}

#[test]
fn idle_and_closed_flows_expire() {
    let (mut shim, mut stats) = client(RosaConfig::default());
    let v = virt_of(&mut shim);
    shim.learn(t(0), 0, SI1, SI1_MAC);
    let mut f = tcp(CLIENT_MAC, SAR_MAC, CLIENT, v, CPORT, 80, SYN_, b"");
    assert_eq!(shim.egress(t(0), 0, &mut f, &mut stats), Verdict::Pass);
    let mut f = tcp(CLIENT_MAC, SAR_MAC, CLIENT, v, CPORT + 1, 80, SYN_, b"");
    assert_eq!(shim.egress(t(0), 0, &mut f, &mut stats), Verdict::Pass);
    let mut f = with_rosa(
        tcp(SAR_MAC, CLIENT_MAC, SAR, CLIENT, 80, CPORT + 1, SYNACK, b""),
        &response(SI1),
    );
    assert_eq!(ingress(&mut shim, &mut stats, t(1), &mut f), Verdict::Pass);
    // CPORT+1 closes: FIN both ways.
    let fin = Tcp {
        flags: 0x11,
        ..ACK_
    };
    let mut f = tcp(CLIENT_MAC, SAR_MAC, CLIENT, v, CPORT + 1, 80, fin, b"");
    assert_eq!(shim.egress(t(2), 0, &mut f, &mut stats), Verdict::Pass);
    let mut f = tcp(SI1_MAC, CLIENT_MAC, SI1, CLIENT, 80, CPORT + 1, fin, b"");
    assert_eq!(ingress(&mut shim, &mut stats, t(2), &mut f), Verdict::Pass);
    assert_eq!((shim.client_flows(), shim.bound_flows()), (2, 1));
    // The closed one lingers flow_linger_s, the open one flow_idle_s.
    let linger = RosaConfig::default().flow_linger_s as i64 * 1000;
    for ms in (0..=linger + 1000).step_by(500) {
        shim.handle_timeout(t(2 + ms), &mut stats);
    }
    assert_eq!((shim.client_flows(), shim.bound_flows()), (1, 0));
    let idle = RosaConfig::default().flow_idle_s as i64 * 1000;
    shim.handle_timeout(t(idle + 1), &mut stats);
    shim.handle_timeout(t(idle + 1001), &mut stats);
    assert_eq!(shim.client_flows(), 0);
    assert_eq!(shim.poll_timeout(), None, "nothing left to time");
}

// --- instance side -------------------------------------------------------

#[test]
fn instance_answers_via_its_sar_until_the_first_direct_packet() {
    let (mut shim, mut stats) = instance(SI1, SI1_MAC, RosaConfig::default());
    // The SAR rewrote the request (SAR → SI1) and set itself as source.
    let req = || {
        with_rosa(
            tcp(SAR_MAC, SI1_MAC, SAR, SI1, CPORT, 80, SYN_, b""),
            &request(CLIENT, IpProtocol::Tcp, 80),
        )
    };
    let mut f = req();
    assert_eq!(ingress(&mut shim, &mut stats, t(1), &mut f), Verdict::Pass);
    // smoltcp sees the client's SYN.
    let w = wire(&f);
    assert_eq!((w.src, w.dst, w.rosa), (CLIENT, SI1, None));

    // smoltcp answers the client; glean may have taught it the SAR's MAC
    // for the client — the shim addresses the SAR anyway.
    let synack = || tcp(SI1_MAC, SAR_MAC, SI1, CLIENT, 80, CPORT, SYNACK, b"");
    let mut f = synack();
    assert_eq!(shim.egress(t(2), 0, &mut f, &mut stats), Verdict::Pass);
    #[rustfmt::skip]
    let golden: Vec<u8> = [
        &[0x06, 0x0a, 0x3e, 0x4d, 0x13][..],             // next TCP, 88 octets; ROSA, 77; v1 response
        &[0x02, 0x10], &CLIENT.octets(),                 // Client
        &[0x03, 0x10], &SAR.octets(),                    // Ingress
        &[0x01, 0x0f, 0x00, 0x01, 0x00, 0x0b], b"service.org", // Service
        &[0x05, 0x03, 0x06, 0x00, 0x50],                 // Port TCP/80
        &[0x04, 0x10], &SI1.octets(),                    // Instance
        &[0x01, 0x05, 0, 0, 0, 0, 0],                    // PadN 5
    ].concat();
    assert_eq!(dest_opts(&f), golden);
    assert_eq!(
        wire(&f),
        Wire {
            dst_mac: SAR_MAC,
            src: SI1,
            dst: SAR,
            rosa: Some(response(SI1)),
        }
    );
    // Retransmitted SYN-ACK: still via the SAR.
    let mut f = synack();
    assert_eq!(shim.egress(t(1002), 0, &mut f, &mut stats), Verdict::Pass);
    assert_eq!(wire(&f).dst, SAR);
    // The client retransmitted its SYN meanwhile: the same flow, no harm.
    let mut f = req();
    assert_eq!(
        ingress(&mut shim, &mut stats, t(1003), &mut f),
        Verdict::Pass
    );
    assert_eq!(shim.instance_flows(), 1);

    // The client's first direct packet: plain, from the client itself.
    let mut f = tcp(CLIENT_MAC, SI1_MAC, CLIENT, SI1, CPORT, 80, ACK_, b"GET /");
    assert_eq!(
        ingress(&mut shim, &mut stats, t(1004), &mut f),
        Verdict::Pass
    );
    assert_eq!(wire(&f).src, CLIENT);
    assert_eq!(stats.get("rosa.instance_direct"), 1);
    // Answers now go straight to the client's own MAC, plain.
    let mut f = tcp(SI1_MAC, SAR_MAC, SI1, CLIENT, 80, CPORT, ACK_, b"HTTP/1.1");
    assert_eq!(shim.egress(t(1005), 0, &mut f, &mut stats), Verdict::Pass);
    assert_eq!(
        wire(&f),
        Wire {
            dst_mac: CLIENT_MAC,
            src: SI1,
            dst: CLIENT,
            rosa: None
        }
    );
    // A late request via the SAR does not undo it.
    let mut f = req();
    assert_eq!(
        ingress(&mut shim, &mut stats, t(1006), &mut f),
        Verdict::Pass
    );
    let mut f = tcp(SI1_MAC, SAR_MAC, SI1, CLIENT, 80, CPORT, ACK_, b"");
    assert_eq!(shim.egress(t(1007), 0, &mut f, &mut stats), Verdict::Pass);
    assert_eq!(wire(&f).dst, CLIENT);
    assert_eq!(stats.get("rosa.requests_received"), 3);
    assert_eq!(stats.get("rosa.responses_sent"), 2);
    // Other traffic is none of the shim's business.
    let mut f = tcp(SI1_MAC, SAR_MAC, SI1, CLIENT, 8080, CPORT, ACK_, b"");
    let before = f.clone();
    assert_eq!(shim.egress(t(1008), 0, &mut f, &mut stats), Verdict::Pass);
    assert_eq!(f, before);
    assert_eq!(stats.drops(), 0, "{stats:?}");
}

/// The Load constraint of an announcement frame.
fn announced_load(frame: &[u8]) -> Option<u32> {
    let ip = Ipv6Packet::new_checked(&frame[14..]).unwrap();
    let opts = svcroute_stack::wire::ipv6opt::Packet::new_checked(ip.payload()).unwrap();
    let data = opts
        .options_iter()
        .filter_map(Result::ok)
        .find(|o| o.option_type() == OptionType::Rosa)?
        .data()
        .to_vec();
    let m = Message::from_bytes(&data).unwrap();
    assert_eq!(m.kind, MessageKind::Announcement);
    m.constraints()?.0.iter().find_map(|c| match c {
        Constraint::Load(l) => Some(*l),
        _ => None,
    })
}

#[test]
fn live_load_follows_open_transactions_and_reannounces_on_a_step() {
    let mut stats = Counters::default();
    let mut shim = Shim::new(Some(&RosaConfig {
        sar: Some(SAR),
        serve: vec![ServeConfig {
            live_load_step: Some(2),
            ..serve()
        }],
        ..RosaConfig::default()
    }))
    .unwrap();
    shim.learn(t(0), 0, SAR, SAR_MAC);
    shim.start(t(0), vec![port(SI1_MAC, SI1)], &mut stats);
    let (_, a) = shim.poll_transmit().unwrap();
    assert_eq!(announced_load(&a), Some(0), "nothing open at start");
    let syn = |cport: u16| {
        with_rosa(
            tcp(SAR_MAC, SI1_MAC, SAR, SI1, cport, 80, SYN_, b""),
            &request(CLIENT, IpProtocol::Tcp, 80),
        )
    };
    // One transaction: below the step, no announcement.
    let mut f = syn(CPORT);
    assert_eq!(
        ingress(&mut shim, &mut stats, t(300), &mut f),
        Verdict::Pass
    );
    shim.handle_timeout(t(400), &mut stats);
    assert!(shim.poll_transmit().is_none());
    // A second: the step, announced at once with Load 2.
    let mut f = syn(CPORT + 1);
    assert_eq!(
        ingress(&mut shim, &mut stats, t(500), &mut f),
        Verdict::Pass
    );
    assert!(shim.poll_timeout().is_some_and(|at| at <= t(500)));
    shim.handle_timeout(t(500), &mut stats);
    let (_, a) = shim.poll_transmit().unwrap();
    assert_eq!(announced_load(&a), Some(2));
    // Two more within the gap: announced when the gap is over, not before.
    for k in 2..4 {
        let mut f = syn(CPORT + k);
        assert_eq!(
            ingress(&mut shim, &mut stats, t(550), &mut f),
            Verdict::Pass
        );
    }
    shim.handle_timeout(t(600), &mut stats);
    assert!(
        shim.poll_transmit().is_none(),
        "within 200 ms of the last one"
    );
    shim.handle_timeout(t(700), &mut stats);
    let (_, a) = shim.poll_transmit().unwrap();
    assert_eq!(announced_load(&a), Some(4));
    // Three of them reset by the instance: closed, the load falls to 1.
    let rst = Tcp {
        flags: 0x14,
        ..ACK_
    };
    for k in 0..3 {
        let mut f = tcp(SI1_MAC, SAR_MAC, SI1, CLIENT, 80, CPORT + k, rst, b"");
        assert_eq!(shim.egress(t(800), 0, &mut f, &mut stats), Verdict::Pass);
    }
    shim.handle_timeout(t(900), &mut stats);
    let (_, a) = shim.poll_transmit().unwrap();
    assert_eq!(announced_load(&a), Some(1));
    assert_eq!(stats.get("rosa.live_load_announcements"), 3);
    // The lifetime refresh carries the live value too.
    shim.handle_timeout(t(10_900), &mut stats);
    let (_, a) = shim.poll_transmit().unwrap();
    assert_eq!(announced_load(&a), Some(1));
}

#[test]
fn live_load_is_not_with_a_fixed_load_nor_zero() {
    for (serve, why) in [
        (
            ServeConfig {
                live_load_step: Some(1),
                load: Some(3),
                ..serve()
            },
            "not with `load`",
        ),
        (
            ServeConfig {
                live_load_step: Some(0),
                ..serve()
            },
            "at least 1",
        ),
    ] {
        let e = Shim::new(Some(&RosaConfig {
            sar: Some(SAR),
            serve: vec![serve],
            ..RosaConfig::default()
        }))
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("rosa.serve[0].live_load_step") && e.contains(why),
            "{e}"
        );
    }
}

#[test]
fn instance_refuses_requests_it_cannot_serve() {
    let (mut shim, mut stats) = instance(
        SI1,
        SI1_MAC,
        RosaConfig {
            max_flows: 1,
            ..RosaConfig::default()
        },
    );
    let deliver = |m: &Message, sport, dport, dst| {
        with_rosa(tcp(SAR_MAC, SI1_MAC, SAR, dst, sport, dport, SYN_, b""), m)
    };
    let mut other = request(CLIENT, IpProtocol::Tcp, 80);
    other.set(Entry::Service("other.org".parse().unwrap()));
    let mut incomplete = request(CLIENT, IpProtocol::Tcp, 80);
    incomplete.remove(svcroute_stack::wire::rosa::EntryType::Port);
    let mut v4_client = request(CLIENT, IpProtocol::Tcp, 80);
    v4_client.set(Entry::Client(IpAddr::from([10, 0, 0, 1])));
    for (m, dport, dst, why) in [
        (other, 80, SI1, "rosa.not_serving"),
        (incomplete, 80, SI1, "rosa.request_incomplete"),
        (v4_client, 80, SI1, "rosa.request_incomplete"),
        (
            request(CLIENT, IpProtocol::Tcp, 81),
            80,
            SI1,
            "rosa.request_inconsistent",
        ),
        (
            request(CLIENT, IpProtocol::Tcp, 80),
            80,
            SI2,
            "rosa.request_not_ours",
        ),
    ] {
        let mut f = deliver(&m, CPORT, dport, dst);
        assert_eq!(
            ingress(&mut shim, &mut stats, t(1), &mut f),
            Verdict::Drop(why)
        );
    }
    // A longer name under a served one is ours (the SAR matched a prefix).
    let mut sub = request(CLIENT, IpProtocol::Tcp, 80);
    sub.set(Entry::Service("service.org/video".parse().unwrap()));
    let mut f = deliver(&sub, CPORT, 80, SI1);
    assert_eq!(ingress(&mut shim, &mut stats, t(2), &mut f), Verdict::Pass);
    // The flow cap.
    let mut f = deliver(&request(CLIENT, IpProtocol::Tcp, 80), CPORT + 1, 80, SI1);
    assert_eq!(
        ingress(&mut shim, &mut stats, t(3), &mut f),
        Verdict::Drop("rosa.instance_flows_full")
    );
}

#[test]
fn instance_announces_at_start_every_third_lifetime_and_withdraws_at_stop() {
    let key = "00112233445566778899aabbccddeeff";
    let mut stats = Counters::default();
    let mut shim = Shim::new(Some(&RosaConfig {
        sar: Some(SAR),
        serve: vec![ServeConfig {
            lifetime_s: 30,
            ..serve()
        }],
        key_id: 7,
        key: Some(key.into()),
        ..RosaConfig::default()
    }))
    .unwrap();
    shim.start(t(0), vec![port(SI1_MAC, SI1)], &mut stats);
    // The SAR's MAC is unknown: the announcement waits for it.
    assert!(shim.poll_transmit().is_none());
    assert_eq!(shim.poll_resolve(), Some((0, SAR)));
    // The SAR answers the runtime's solicitation: a Neighbor Advertisement.
    let mut na = ip_frame(SAR_MAC, SI1_MAC, SAR, SI1, IpProtocol::Icmpv6, 32);
    na[54] = 136;
    na[58] = 0x60; // solicited, override
    na[62..78].copy_from_slice(&SAR.octets());
    na[78..86].copy_from_slice(&[2, 1, 2, 0, 0, 0, 0, 0xfe]);
    assert_eq!(
        shim.ingress(t(5), 0, &mut na, None, &mut stats),
        Verdict::Pass
    );
    let (p, ann) = shim.poll_transmit().unwrap();
    assert_eq!(p, 0);
    assert_eq!(EthernetAddress::from_bytes(&ann[0..6]), SAR_MAC);
    let ip = Ipv6Packet::new_checked(&ann[14..]).unwrap();
    assert_eq!((ip.src_addr(), ip.dst_addr()), (SI1, SAR));
    assert_eq!(ip.next_header(), IpProtocol::Ipv6Opts);
    // Destination Options with next header 59 (no upper layer).
    let opts = svcroute_stack::wire::ipv6opt::Packet::new_checked(ip.payload()).unwrap();
    assert_eq!(opts.next_header(), IpProtocol::Ipv6NoNxt);
    let data = opts
        .options_iter()
        .filter_map(Result::ok)
        .find(|o| o.option_type() == OptionType::Rosa)
        .unwrap()
        .data()
        .to_vec();
    let m = Message::from_bytes(&data).unwrap();
    assert_eq!(m.kind, MessageKind::Announcement);
    assert_eq!(m.instance(), Some(SI1.into()));
    assert_eq!(m.service(), Some(&service()));
    let c = m.constraints().unwrap();
    assert_eq!(
        c.0,
        vec![
            Constraint::ModePolicy {
                mode: Mode::Scheduling,
                policy: Policy::RoundRobin
            },
            Constraint::Capability(10),
            Constraint::LifetimeS(30),
        ]
    );
    let secret = crate::hex(key).unwrap();
    assert!(m
        .verify(SI1, |id| (id == 7).then_some(&secret[..]))
        .is_good());
    assert!(!m.verify(SI2, |_| Some(&secret[..])).is_good());

    // Every lifetime/3 = 10 s: nothing before, one at 10 s.
    assert_eq!(shim.poll_timeout(), Some(t(10_000)));
    shim.handle_timeout(t(9_999), &mut stats);
    assert!(shim.poll_transmit().is_none());
    shim.handle_timeout(t(10_000), &mut stats);
    let (_, again) = shim.poll_transmit().unwrap();
    assert_eq!(EthernetAddress::from_bytes(&again[0..6]), SAR_MAC);
    assert_eq!(stats.get("rosa.announcements_sent"), 2);

    shim.stop(&mut stats);
    let (_, wd) = shim.poll_transmit().unwrap();
    let ip = Ipv6Packet::new_checked(&wd[14..]).unwrap();
    let opts = svcroute_stack::wire::ipv6opt::Packet::new_checked(ip.payload()).unwrap();
    let data = opts
        .options_iter()
        .filter_map(Result::ok)
        .find(|o| o.option_type() == OptionType::Rosa)
        .unwrap()
        .data()
        .to_vec();
    let m = Message::from_bytes(&data).unwrap();
    assert_eq!(m.kind, MessageKind::Withdrawal);
    assert_eq!(
        (m.instance(), m.service()),
        (Some(SI1.into()), Some(&service()))
    );
    assert!(m.verify(SI1, |_| Some(&secret[..])).is_good());
    assert_eq!(shim.poll_timeout(), None, "no more announcements");
}

#[test]
fn parked_frames_give_up_after_the_park_timeout() {
    let (mut shim, mut stats) = client(RosaConfig::default());
    let v = virt_of(&mut shim);
    let mut f = tcp(CLIENT_MAC, SAR_MAC, CLIENT, v, CPORT, 80, SYN_, b"");
    assert_eq!(shim.egress(t(0), 0, &mut f, &mut stats), Verdict::Pass);
    let mut f = with_rosa(
        tcp(SAR_MAC, CLIENT_MAC, SAR, CLIENT, 80, CPORT, SYNACK, b""),
        &response(SI1),
    );
    assert_eq!(ingress(&mut shim, &mut stats, t(1), &mut f), Verdict::Pass);
    let mut f = tcp(CLIENT_MAC, SAR_MAC, CLIENT, v, CPORT, 80, ACK_, b"");
    assert_eq!(shim.egress(t(2), 0, &mut f, &mut stats), Verdict::Consume);
    assert_eq!(shim.poll_resolve(), Some((0, SI1)));
    // Asked again once a second while it waits.
    shim.handle_timeout(t(500), &mut stats);
    assert_eq!(shim.poll_resolve(), None);
    shim.handle_timeout(t(1002), &mut stats);
    assert_eq!(shim.poll_resolve(), Some((0, SI1)));
    shim.handle_timeout(t(2) + PARK_TIMEOUT, &mut stats);
    assert_eq!(stats.get("drop.rosa.next_hop_unresolved"), 1);
    shim.learn(t(4000), 0, SI1, SI1_MAC);
    assert!(shim.poll_transmit().is_none());
}

#[test]
fn config_errors_name_the_key() {
    let err = |c: RosaConfig| Shim::new(Some(&c)).err().unwrap().to_string();
    assert!(err(RosaConfig {
        virtual_prefix: "fd5e::1/64".into(),
        ..RosaConfig::default()
    })
    .contains("rosa.virtual_prefix"));
    assert!(err(RosaConfig {
        serve: vec![serve()],
        ..RosaConfig::default()
    })
    .contains("rosa.sar"));
    let bad_policy = ServeConfig {
        policy: Some("fastest".into()),
        ..serve()
    };
    assert!(err(RosaConfig {
        sar: Some(SAR),
        serve: vec![bad_policy],
        ..RosaConfig::default()
    })
    .contains("rosa.serve[0].policy"));
    let bad_name = ServeConfig {
        service: "a//b".into(),
        ..serve()
    };
    assert!(err(RosaConfig {
        sar: Some(SAR),
        serve: vec![bad_name],
        ..RosaConfig::default()
    })
    .contains("rosa.serve[0].service"));
    let short = ServeConfig {
        lifetime_s: 2,
        ..serve()
    };
    assert!(err(RosaConfig {
        sar: Some(SAR),
        serve: vec![short],
        ..RosaConfig::default()
    })
    .contains("lifetime_s"));
    assert!(err(RosaConfig {
        key: Some("abcd".into()),
        ..RosaConfig::default()
    })
    .contains("rosa.key"));
    assert!(err(RosaConfig {
        ingress: Some("fd5e::1".parse().unwrap()),
        ..RosaConfig::default()
    })
    .contains("rosa.ingress"));
    assert!(err(RosaConfig {
        max_flows: 0,
        ..RosaConfig::default()
    })
    .contains("rosa.max_flows"));
}

proptest! {
    /// Whatever arrives or leaves, the shim never panics, and a frame it
    /// passes on stays a frame it can walk.
    #[test]
    fn arbitrary_frames_never_panic(
        frames in proptest::collection::vec(
            (any::<bool>(), proptest::collection::vec(any::<u8>(), 0..200), any::<u8>()),
            1..40,
        )
    ) {
        let (mut shim, mut stats) = client(RosaConfig::default());
        let v = virt_of(&mut shim);
        let (mut inst, mut istats) = instance(SI1, SI1_MAC, RosaConfig::default());
        for (i, (dir, bytes, cut)) in frames.into_iter().enumerate() {
            let now = t(i as i64 * 10);
            // Mix real frames, mutated into garbage, with raw garbage.
            let base = match i % 4 {
                0 => tcp(CLIENT_MAC, SAR_MAC, CLIENT, v, CPORT, 80, SYN_, &bytes),
                1 => with_rosa(
                    tcp(SAR_MAC, CLIENT_MAC, SAR, CLIENT, 80, CPORT, SYNACK, &bytes),
                    &response(SI1),
                ),
                2 => with_rosa(
                    tcp(SAR_MAC, SI1_MAC, SAR, SI1, CPORT, 80, SYN_, &bytes),
                    &request(CLIENT, IpProtocol::Tcp, 80),
                ),
                _ => bytes.clone(),
            };
            let mut f = base;
            let n = usize::from(cut) % (f.len() + 1);
            if cut % 3 == 0 {
                f.truncate(n);
            } else if let Some(b) = f.get_mut(n) {
                *b ^= cut;
            }
            let rosa = (cut % 2 == 0).then_some(&bytes[..]);
            for (s, st) in [(&mut shim, &mut stats), (&mut inst, &mut istats)] {
                let mut g = f.clone();
                let verdict = if dir {
                    s.egress(now, 0, &mut g, st)
                } else {
                    s.ingress(now, 0, &mut g, rosa, st)
                };
                if verdict == Verdict::Pass && g != f {
                    prop_assert!(edit::walk(&g).is_ok());
                }
                s.handle_timeout(now, st);
                while s.poll_transmit().is_some() {}
                while s.poll_resolve().is_some() {}
            }
        }
    }
}
