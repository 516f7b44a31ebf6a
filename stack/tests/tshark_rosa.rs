//! Wireshark agrees with us on the ROSA (`0x3E`) and sticky-service (`0x1E`)
//! options built by `wire::rosa` and `wire::sticky`: each frame decodes as an
//! IPv6 Destination Options header with the option types and lengths we
//! meant, the upper-layer checksums are good and nothing is malformed
//! (tshark does not know our option data, and need not). Also one SAR IGP
//! datagram (`wire::igp`) on UDP port 7470. Skips, saying so, when `tshark`
//! is not on PATH (CI installs it).

use std::process::Command;

use etherparse::{IpHeaders, IpNumber, Ipv6Extensions, Ipv6FlowLabel, Ipv6Header, PacketBuilder};
use smoltcp::wire::IpProtocol;
use svcroute_stack::shim::edit;
use svcroute_stack::wire::igp;
use svcroute_stack::wire::ipv6opt::{OptionRepr, OptionType};
use svcroute_stack::wire::rosa::{
    Constraint, Constraints, Entry, FlowPort, Message, MessageKind, Mode, Policy,
};
use svcroute_stack::wire::sticky::{Apn6Id, StickyDst, StickyTlv};

mod common;
use common::tshark_lines;

const SRC: [u8; 16] = [0xfd, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01];
const DST: [u8; 16] = [0xfd, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02];

/// Each frame gets its own source port so tshark sees distinct flows (no
/// suspected retransmissions).
fn frame(tcp: bool, port: u16, payload: &[u8]) -> Vec<u8> {
    static NEXT: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(0xc000);
    let sport = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let header = Ipv6Header {
        traffic_class: 0,
        flow_label: Ipv6FlowLabel::ZERO,
        payload_length: 0,
        next_header: IpNumber::UDP,
        hop_limit: 64,
        source: SRC,
        destination: DST,
    };
    let b = PacketBuilder::ethernet2([0x02, 0, 0, 0, 0, 0x01], [0x02, 0, 0, 0, 0, 0x02])
        .ip(IpHeaders::Ipv6(header, Ipv6Extensions::default()));
    let mut out = Vec::new();
    if tcp {
        b.tcp(sport, port, 0x0102_0304, 0x2000)
            .write(&mut out, payload)
    } else {
        b.udp(sport, port).write(&mut out, payload)
    }
    .unwrap();
    out
}

fn message(kind: MessageKind) -> Message {
    let mut msg = Message::new(kind);
    match kind {
        MessageKind::Announcement | MessageKind::Withdrawal => {
            msg.set(Entry::Instance("fd00::1".parse().unwrap()));
            msg.set(Entry::Service("service.org/video".parse().unwrap()));
            msg.set(Entry::Constraint(Constraints(vec![
                Constraint::ModePolicy {
                    mode: Mode::Scheduling,
                    policy: Policy::RoundRobin,
                },
                Constraint::LifetimeS(30),
            ])));
            msg.sign(1, b"secret", SRC.into()).unwrap();
        }
        _ => {
            msg.set(Entry::Client("fd00::1".parse().unwrap()));
            msg.set(Entry::Ingress("fd00::100".parse().unwrap()));
            msg.set(Entry::Service("service.org".parse().unwrap()));
            msg.set(Entry::Port(FlowPort {
                proto: IpProtocol::Tcp,
                port: 80,
            }));
            if kind == MessageKind::Response {
                msg.set(Entry::Instance("fd00::2".parse().unwrap()));
            }
        }
    }
    msg
}

/// What tshark lists for `ipv6.opt.type` and `ipv6.opt.length` for a header
/// holding options of these data lengths, padding included (Pad1 has no
/// length field).
fn expected(opts: &[(u8, usize)]) -> (String, String) {
    let mut types: Vec<String> = opts.iter().map(|(t, _)| format!("0x{t:02x}")).collect();
    let mut lens: Vec<String> = opts.iter().map(|(_, l)| l.to_string()).collect();
    let raw = 2 + opts.iter().map(|(_, l)| 2 + l).sum::<usize>();
    match (8 - raw % 8) % 8 {
        0 => {}
        1 => types.push("0x00".into()),
        n => {
            types.push("0x01".into());
            lens.push((n - 2).to_string());
        }
    }
    (types.join(","), lens.join(","))
}

#[test]
fn tshark_decodes_rosa_and_sticky_options() {
    if Command::new("tshark").arg("--version").output().is_err() {
        eprintln!("SKIP tshark_decodes_rosa_and_sticky_options: tshark not on PATH");
        return;
    }
    let mut frames = Vec::new();
    let mut want = Vec::new();

    // One frame per ROSA message kind: requests and responses on TCP,
    // announcements and withdrawals on UDP.
    for kind in [
        MessageKind::Announcement,
        MessageKind::Request,
        MessageKind::Response,
        MessageKind::Withdrawal,
    ] {
        let data = message(kind).to_bytes().unwrap();
        let tcp = matches!(kind, MessageKind::Request | MessageKind::Response);
        let mut f = frame(tcp, 80, b"rosa");
        let opt = OptionRepr::new(OptionType::Rosa, &data).unwrap();
        edit::insert_dest_opts(&mut f, &[opt]).unwrap();
        frames.push(f);
        let (t, l) = expected(&[(0x3e, data.len())]);
        let proto = if tcp { 6 } else { 17 };
        let sums = if tcp { "|1" } else { "1|" };
        want.push(format!("{t}|{l}|{proto}|{sums}|"));
    }

    // Sticky (IPv6 egress) with a ROSA response, on TCP.
    let sticky6 = StickyDst::egress("fd00::a".parse().unwrap())
        .to_bytes()
        .unwrap();
    let rosa = message(MessageKind::Response).to_bytes().unwrap();
    let mut f = frame(true, 443, b"both");
    let opts = [
        OptionRepr::new(OptionType::Sticky, &sticky6).unwrap(),
        OptionRepr::new(OptionType::Rosa, &rosa).unwrap(),
    ];
    edit::insert_dest_opts(&mut f, &opts).unwrap();
    frames.push(f);
    let (t, l) = expected(&[(0x1e, sticky6.len()), (0x3e, rosa.len())]);
    want.push(format!("{t}|{l}|6||1|"));

    // Sticky with an IPv4 egress and the APN6 ID, on UDP.
    let sticky = StickyDst(vec![
        StickyTlv::Egress("10.0.0.7".parse().unwrap()),
        StickyTlv::Apn6(Apn6Id {
            level: 1,
            service_id: 2,
            flow_id: 3,
        }),
    ])
    .to_bytes()
    .unwrap();
    let mut f = frame(false, 5000, b"sticky");
    let opt = OptionRepr::new(OptionType::Sticky, &sticky).unwrap();
    edit::insert_dest_opts(&mut f, &[opt]).unwrap();
    frames.push(f);
    let (t, l) = expected(&[(0x1e, sticky.len())]);
    want.push(format!("{t}|{l}|17|1||"));

    // A signed IGP hello on UDP 7470, no options.
    let hello = igp::Message::Hello(igp::Hello {
        router_id: igp::RouterId(1),
        seq: 1,
        sent_at_us: 1_000_000,
        neighbors: vec![],
    })
    .encode(Some((1, b"igp")))
    .unwrap();
    frames.push(frame(false, igp::PORT, &hello));
    want.push("|||1||".to_string());

    let lines = tshark_lines(
        "rosa",
        &frames,
        &[
            "ipv6.opt.type",
            "ipv6.opt.length",
            "ipv6.dstopts.nxt",
            "udp.checksum.status",
            "tcp.checksum.status",
            "_ws.expert",
        ],
    );
    let stdout = lines.join("\n");
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    assert_eq!(lines.len(), want.len(), "{stdout}");
    // Checksum status 1 = good; the last field (expert info: malformed,
    // bad checksum, ...) must be empty.
    for (i, (got, want)) in lines.iter().zip(&want).enumerate() {
        assert_eq!(got, want, "frame {}", i + 1);
    }
}
