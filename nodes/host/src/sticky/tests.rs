//! The UE's sticky behaviour traced frame by frame: what the server side
//! sends (with a Sticky-Dst), what the local stack sends next, and the
//! exact octets of the header the UE adds.

use std::net::Ipv6Addr;

use proptest::prelude::*;
use smoltcp::phy::ChecksumCapabilities;
use smoltcp::time::Instant;
use smoltcp::wire::{
    EthernetAddress, EthernetFrame, EthernetProtocol, EthernetRepr, IpAddress, IpProtocol,
    Ipv6Packet, Ipv6Repr, TcpControl, TcpPacket, TcpRepr, TcpSeqNumber, UdpPacket, UdpRepr,
};
use svcroute_stack::shim::edit;
use svcroute_stack::stats::Counters;
use svcroute_stack::wire::ipv6opt::{OptionRepr, OptionType, OwnedOption};

use super::*;

const UE: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xa, 0, 0, 0, 0, 0, 0x20);
const ANYCAST: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xaa08, 0, 0, 0, 0, 0, 0x4450);
const EGRESS1: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x5, 0, 0, 0, 0, 0, 0x1);
const EGRESS2: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x6, 0, 0, 0, 0, 0, 0x1);
const MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0xa, 0x20]);
const GW_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0xa, 0x01]);
const CPORT: u16 = 40000;

fn t(s: u64) -> Instant {
    Instant::from_secs(s as i64)
}

fn ue(cfg: StickyConfig) -> (UeSticky, Counters) {
    (UeSticky::new(&cfg, 7).unwrap(), Counters::default())
}

fn ip_frame(src: Ipv6Addr, dst: Ipv6Addr, proto: IpProtocol, len: usize) -> Vec<u8> {
    let mut f = vec![0; 14 + 40 + len];
    EthernetRepr {
        src_addr: MAC,
        dst_addr: GW_MAC,
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

/// TCP with `flags` (SYN 0x02, ACK 0x10, FIN 0x01, RST 0x04), checksum valid.
fn tcp(src: Ipv6Addr, dst: Ipv6Addr, sport: u16, dport: u16, flags: u8, data: &[u8]) -> Vec<u8> {
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
        ack_number: (flags & 0x10 != 0).then_some(TcpSeqNumber(5000)),
        window_len: 1024,
        window_scale: None,
        max_seg_size: None,
        sack_permitted: false,
        sack_ranges: [None; 3],
        timestamp: None,
        payload: data,
    };
    let mut f = ip_frame(src, dst, IpProtocol::Tcp, repr.buffer_len());
    repr.emit(
        &mut TcpPacket::new_unchecked(&mut f[54..]),
        &IpAddress::Ipv6(src),
        &IpAddress::Ipv6(dst),
        &ChecksumCapabilities::default(),
    );
    f
}

fn udp(src: Ipv6Addr, dst: Ipv6Addr, sport: u16, dport: u16, data: &[u8]) -> Vec<u8> {
    let repr = UdpRepr {
        src_port: sport,
        dst_port: dport,
    };
    let len = repr.header_len() + data.len();
    let mut f = ip_frame(src, dst, IpProtocol::Udp, len);
    repr.emit(
        &mut UdpPacket::new_unchecked(&mut f[54..]),
        &IpAddress::Ipv6(src),
        &IpAddress::Ipv6(dst),
        data.len(),
        |b| b.copy_from_slice(data),
        &ChecksumCapabilities::default(),
    );
    f
}

/// The option data of a Sticky-Dst naming `egress` (SPEC §3: type 1,
/// len 18, AFI 2, reserved 0, the address).
fn sticky_data(egress: Ipv6Addr) -> Vec<u8> {
    let mut d = vec![0x01, 18, 0x02, 0x00];
    d.extend_from_slice(&egress.octets());
    d
}

fn sticky_opt(egress: Ipv6Addr) -> OwnedOption {
    let data = sticky_data(egress);
    OwnedOption::from_repr(&OptionRepr::new(OptionType::Sticky, &data).unwrap()).unwrap()
}

/// The server's reply of the UE's flow (as the UE's stack will see it).
fn reply(flags: u8) -> Vec<u8> {
    tcp(ANYCAST, UE, 80, CPORT, flags, b"")
}

/// The UE's next packet of the flow.
fn ack() -> Vec<u8> {
    tcp(UE, ANYCAST, CPORT, 80, 0x10, b"GET / HTTP/1.1\r\n\r\n")
}

/// The Destination Options header directly before the upper layer.
fn dest_opts(frame: &[u8]) -> Option<Vec<u8>> {
    let l = edit::walk(frame).unwrap();
    l.dest_opts.map(|at| frame[at.range].to_vec())
}

#[track_caller]
fn assert_tcp_checksum_valid(frame: &[u8]) {
    let l = edit::walk(frame).unwrap();
    let tcp = TcpPacket::new_checked(&frame[l.upper_offset..l.ip_end]).unwrap();
    let (src, dst) = frame::ipv6_addrs(frame).unwrap();
    assert!(
        tcp.verify_checksum(&IpAddress::Ipv6(src), &IpAddress::Ipv6(dst)),
        "TCP checksum broken"
    );
}

#[test]
fn a_received_sticky_dst_rides_in_the_flows_later_packets() {
    let (mut s, mut st) = ue(StickyConfig::default());
    s.received(t(1), &reply(0x12), &[sticky_opt(EGRESS1)], &mut st);
    assert_eq!(st.get("sticky.flows"), 1);
    let mut f = ack();
    let plain_len = f.len();
    s.sending(t(1), &mut f, 64, &mut st);
    // Golden: next header TCP, length 2 (24 octets), option 0x1e of 20
    // octets: type 1, len 18, AFI 2, reserved, fd00:5::1. No padding.
    let mut golden = vec![6, 2, 0x1e, 20, 0x01, 18, 0x02, 0x00];
    golden.extend_from_slice(&EGRESS1.octets());
    assert_eq!(dest_opts(&f), Some(golden));
    assert_eq!(f.len(), plain_len + 24);
    let ip = Ipv6Packet::new_checked(&f[14..]).unwrap();
    assert_eq!(ip.next_header(), IpProtocol::Ipv6Opts);
    assert_eq!(usize::from(ip.payload_len()), f.len() - 54);
    assert_tcp_checksum_valid(&f);
    assert_eq!(st.get("sticky.copied"), 1);

    // Another flow of the UE (another local port) carries nothing.
    let mut other = tcp(UE, ANYCAST, CPORT + 1, 80, 0x10, b"x");
    s.sending(t(1), &mut other, 64, &mut st);
    assert_eq!(dest_opts(&other), None);
    // Nor does the same ports toward another address.
    let mut other = tcp(UE, EGRESS2, CPORT, 80, 0x10, b"x");
    s.sending(t(1), &mut other, 64, &mut st);
    assert_eq!(dest_opts(&other), None);
    assert_eq!(st.get("sticky.copied"), 1);
}

#[test]
fn the_latest_option_received_wins() {
    let (mut s, mut st) = ue(StickyConfig::default());
    s.received(t(1), &reply(0x12), &[sticky_opt(EGRESS1)], &mut st);
    // A reply without the option changes nothing.
    s.received(t(2), &reply(0x10), &[], &mut st);
    let mut f = ack();
    s.sending(t(2), &mut f, 64, &mut st);
    assert_eq!(dest_opts(&f).unwrap()[8..], EGRESS1.octets());
    s.received(t(3), &reply(0x10), &[sticky_opt(EGRESS2)], &mut st);
    assert_eq!(st.get("sticky.updated"), 1);
    assert_eq!(st.get("sticky.flows"), 1);
    let mut f = ack();
    s.sending(t(3), &mut f, 64, &mut st);
    assert_eq!(dest_opts(&f).unwrap()[8..], EGRESS2.octets());
    // The same option again is no update.
    s.received(t(4), &reply(0x10), &[sticky_opt(EGRESS2)], &mut st);
    assert_eq!(st.get("sticky.updated"), 1);
}

#[test]
fn the_option_merges_into_an_existing_header() {
    let (mut s, mut st) = ue(StickyConfig::default());
    s.received(t(1), &reply(0x12), &[sticky_opt(EGRESS1)], &mut st);
    let mut f = ack();
    let rosa = OptionRepr::new(OptionType::Rosa, &[0xaa, 0xbb]).unwrap();
    edit::insert_dest_opts(&mut f, &[rosa]).unwrap();
    s.sending(t(1), &mut f, 64, &mut st);
    // ROSA kept first, Sticky-Dst after it: 2 + 4 + 22 = 28, PadN(2) to 32.
    let mut golden = vec![6, 3, 0x3e, 2, 0xaa, 0xbb, 0x1e, 20, 0x01, 18, 0x02, 0x00];
    golden.extend_from_slice(&EGRESS1.octets());
    golden.extend_from_slice(&[0x01, 0x02, 0x00, 0x00]);
    assert_eq!(dest_opts(&f), Some(golden));
    assert_tcp_checksum_valid(&f);
    // A configured Sticky-Dst of its own is replaced by the copied one.
    let mut f = ack();
    let own = sticky_data(EGRESS2);
    edit::insert_dest_opts(
        &mut f,
        &[OptionRepr::new(OptionType::Sticky, &own).unwrap()],
    )
    .unwrap();
    s.sending(t(1), &mut f, 64, &mut st);
    let h = dest_opts(&f).unwrap();
    assert_eq!(h.len(), 24);
    assert_eq!(h[8..], EGRESS1.octets());
}

#[test]
fn udp_flows_copy_too() {
    let (mut s, mut st) = ue(StickyConfig::default());
    s.received(
        t(1),
        &udp(ANYCAST, UE, 7, CPORT, b"echo"),
        &[sticky_opt(EGRESS1)],
        &mut st,
    );
    let mut f = udp(UE, ANYCAST, CPORT, 7, b"next");
    s.sending(t(1), &mut f, 64, &mut st);
    assert_eq!(dest_opts(&f).unwrap()[8..], EGRESS1.octets());
    let l = edit::walk(&f).unwrap();
    let u = UdpPacket::new_checked(&f[l.upper_offset..l.ip_end]).unwrap();
    assert!(u.verify_checksum(&IpAddress::Ipv6(UE), &IpAddress::Ipv6(ANYCAST)));
}

#[test]
fn a_new_connection_on_the_5_tuple_starts_afresh() {
    let (mut s, mut st) = ue(StickyConfig::default());
    s.received(t(1), &reply(0x12), &[sticky_opt(EGRESS1)], &mut st);
    let mut syn = tcp(UE, ANYCAST, CPORT, 80, 0x02, b"");
    s.sending(t(2), &mut syn, 64, &mut st);
    assert_eq!(dest_opts(&syn), None, "a SYN is a new flow's first packet");
    assert_eq!(st.get("sticky.flows_reset"), 1);
    let mut f = ack();
    s.sending(t(2), &mut f, 64, &mut st);
    assert_eq!(dest_opts(&f), None);
    assert_eq!(s.flows(), 0);
}

#[test]
fn flows_are_bounded_and_expire() {
    let (mut s, mut st) = ue(StickyConfig {
        max_flows: 2,
        flow_idle_s: 10,
        flow_linger_s: 2,
        ..StickyConfig::default()
    });
    for p in 0..3 {
        let r = tcp(ANYCAST, UE, 80, CPORT + p, 0x12, b"");
        s.received(t(1), &r, &[sticky_opt(EGRESS1)], &mut st);
    }
    assert_eq!(s.flows(), 2);
    assert_eq!(st.get("sticky.flows"), 2);
    assert_eq!(st.get("sticky.flows_full"), 1);
    let mut f = tcp(UE, ANYCAST, CPORT + 2, 80, 0x10, b"");
    s.sending(t(1), &mut f, 64, &mut st);
    assert_eq!(dest_opts(&f), None, "the third flow was not remembered");

    // Flow CPORT closes (FIN both ways); CPORT+1 stays open and busy.
    let mut fin = tcp(UE, ANYCAST, CPORT, 80, 0x11, b"");
    s.sending(t(2), &mut fin, 64, &mut st);
    s.received(t(2), &tcp(ANYCAST, UE, 80, CPORT, 0x11, b""), &[], &mut st);
    assert_eq!(s.poll_timeout(), Some(t(2)));
    s.handle_timeout(t(3), &mut st);
    assert_eq!(s.flows(), 2, "a closed flow lingers");
    s.handle_timeout(t(4), &mut st);
    assert_eq!(s.flows(), 1, "then goes");
    let mut busy = tcp(UE, ANYCAST, CPORT + 1, 80, 0x10, b"");
    s.sending(t(10), &mut busy, 64, &mut st);
    s.handle_timeout(t(19), &mut st);
    assert_eq!(s.flows(), 1, "refreshed by traffic");
    s.handle_timeout(t(20), &mut st);
    assert_eq!(s.flows(), 0, "idle for flow_idle_s");
    assert_eq!(st.get("sticky.flows_expired"), 2);
    assert_eq!(s.poll_timeout(), None);
    // A spurious call is harmless.
    s.handle_timeout(t(21), &mut st);
}

#[test]
fn bad_options_are_not_copied() {
    let (mut s, mut st) = ue(StickyConfig::default());
    // AFI 3 is no address family.
    let mut bad = sticky_data(EGRESS1);
    bad[2] = 3;
    let bad = OwnedOption::from_repr(&OptionRepr::new(OptionType::Sticky, &bad).unwrap()).unwrap();
    s.received(t(1), &reply(0x12), &[bad], &mut st);
    // Two options: which one is meant is unknowable.
    s.received(
        t(1),
        &reply(0x12),
        &[sticky_opt(EGRESS1), sticky_opt(EGRESS2)],
        &mut st,
    );
    assert_eq!(st.get("sticky.malformed"), 2);
    assert_eq!(s.flows(), 0);
    // An option on a packet that is not TCP/UDP belongs to no flow.
    let icmp = ip_frame(ANYCAST, UE, IpProtocol::Icmpv6, 8);
    s.received(t(1), &icmp, &[sticky_opt(EGRESS1)], &mut st);
    assert_eq!(s.flows(), 0);
}

#[test]
fn an_option_that_does_not_fit_is_left_off() {
    let (mut s, mut st) = ue(StickyConfig::default());
    s.received(t(1), &reply(0x12), &[sticky_opt(EGRESS1)], &mut st);
    let mut f = ack();
    let before = f.clone();
    s.sending(t(1), &mut f, 23, &mut st);
    // Only the label changed.
    assert_eq!(f.len(), before.len());
    assert_eq!(f[18..], before[18..]);
    assert_eq!(st.get("sticky.too_big"), 1);
    assert_eq!(st.get("sticky.copied"), 0);
}

#[test]
fn copying_can_be_turned_off() {
    let (mut s, mut st) = ue(StickyConfig {
        copy: false,
        ..StickyConfig::default()
    });
    s.received(t(1), &reply(0x12), &[sticky_opt(EGRESS1)], &mut st);
    let mut f = ack();
    s.sending(t(1), &mut f, 64, &mut st);
    assert_eq!(dest_opts(&f), None);
    assert_eq!(s.flows(), 0);
    assert_ne!(flow_label_of(&f), Some(0), "labels are pinned still");
}

#[test]
fn flow_labels_are_stable_per_flow_and_keyed() {
    let (mut s, mut st) = ue(StickyConfig::default());
    let label = |s: &mut UeSticky, st: &mut Counters, mut f: Vec<u8>| {
        // The local stack's own label (e.g. Linux's txhash) is overwritten.
        f[15] = 0x0a;
        f[16] = 0xbc;
        f[17] = 0xde;
        s.sending(t(1), &mut f, 64, st);
        assert_eq!(f[14] >> 4, 6);
        assert_eq!(f[15] >> 4, 0x0, "traffic class kept");
        flow_label_of(&f).unwrap()
    };
    let a = label(&mut s, &mut st, ack());
    assert_ne!(a, 0);
    assert!(a <= 0xf_ffff);
    assert_eq!(
        a,
        label(&mut s, &mut st, tcp(UE, ANYCAST, CPORT, 80, 0x02, b"")),
        "SYN and data of one flow share the label"
    );
    assert_eq!(a, s.flow_label(IpProtocol::Tcp, UE, CPORT, ANYCAST, 80));
    let b = label(&mut s, &mut st, tcp(UE, ANYCAST, CPORT + 1, 80, 0x10, b""));
    assert_ne!(a, b, "another flow, another label");
    let u = label(&mut s, &mut st, udp(UE, ANYCAST, CPORT, 80, b""));
    assert_ne!(a, u, "the protocol is part of the flow");
    assert_eq!(st.get("sticky.labels_pinned"), 4);

    // Another seed, other labels; the configured seed beats the default.
    let (other, _) = ue(StickyConfig {
        flow_label_seed: Some(8),
        ..StickyConfig::default()
    });
    assert_ne!(a, other.flow_label(IpProtocol::Tcp, UE, CPORT, ANYCAST, 80));
    let same = UeSticky::new(
        &StickyConfig {
            flow_label_seed: Some(7),
            ..StickyConfig::default()
        },
        99,
    )
    .unwrap();
    assert_eq!(a, same.flow_label(IpProtocol::Tcp, UE, CPORT, ANYCAST, 80));

    // Traffic class bits survive.
    let mut f = ack();
    f[14] = 0x6b; // version 6, traffic class 0xb8
    f[15] = 0x80;
    s.sending(t(1), &mut f, 64, &mut st);
    assert_eq!(f[14], 0x6b);
    assert_eq!(f[15] & 0xf0, 0x80);

    // Off: the stack's label goes out unchanged; not TCP/UDP: untouched.
    let (mut off, mut st2) = ue(StickyConfig {
        pin_flow_labels: false,
        ..StickyConfig::default()
    });
    let mut f = ack();
    f[17] = 0x42;
    off.sending(t(1), &mut f, 64, &mut st2);
    assert_eq!(flow_label_of(&f), Some(0x42));
    let mut icmp = ip_frame(UE, ANYCAST, IpProtocol::Icmpv6, 8);
    let before = icmp.clone();
    s.sending(t(1), &mut icmp, 64, &mut st);
    assert_eq!(icmp, before);
}

#[test]
fn the_summary_lists_each_flow() {
    let (mut s, mut st) = ue(StickyConfig::default());
    s.received(t(1), &reply(0x12), &[sticky_opt(EGRESS1)], &mut st);
    let mut f = ack();
    s.sending(t(3), &mut f, 64, &mut st);
    let v = s.summary(t(5));
    assert_eq!(v["flows"], 1);
    let e = &v["list"][0];
    assert_eq!(e["egress"], EGRESS1.to_string());
    assert_eq!(e["remote"], ANYCAST.to_string());
    assert_eq!(e["local_port"], CPORT);
    assert_eq!(e["copied"], 1);
    assert_eq!(e["age_s"], 4);
    assert_eq!(e["idle_s"], 2);
    assert_eq!(e["flow_label"], flow_label_of(&f).unwrap());
}

#[test]
fn bad_config_names_the_key() {
    let e = UeSticky::new(
        &StickyConfig {
            max_flows: 0,
            ..StickyConfig::default()
        },
        1,
    )
    .unwrap_err();
    assert!(e.contains("`max_flows`"), "{e}");
    let e = StickyConfig {
        flow_idle_s: 0,
        ..StickyConfig::default()
    }
    .validate()
    .unwrap_err();
    assert!(e.contains("`flow_idle_s`"), "{e}");
}

proptest! {
    /// Arbitrary and mutated frames both ways: no panic; what is sent
    /// still walks, and is never shorter.
    #[test]
    fn arbitrary_frames_never_panic(
        bytes in proptest::collection::vec(any::<u8>(), 0..200),
        cut in 0usize..120,
        flip in 0usize..120,
        room in 0usize..64,
    ) {
        let (mut s, mut st) = ue(StickyConfig::default());
        s.received(t(1), &reply(0x12), &[sticky_opt(EGRESS1)], &mut st);
        s.received(t(1), &bytes, &[sticky_opt(EGRESS2)], &mut st);
        let mut f = bytes.clone();
        s.sending(t(1), &mut f, room, &mut st);
        let mut m = ack();
        if flip < m.len() {
            m[flip] ^= 0x5a;
        }
        m.truncate(m.len().min(cut.max(1) + 40));
        s.received(t(2), &m, &[sticky_opt(EGRESS1)], &mut st);
        let before = m.len();
        let walked = edit::walk(&m).is_ok();
        s.sending(t(2), &mut m, room, &mut st);
        prop_assert!(m.len() >= before);
        if walked {
            prop_assert!(edit::walk(&m).is_ok());
        }
        s.handle_timeout(t(400), &mut st);
    }
}
