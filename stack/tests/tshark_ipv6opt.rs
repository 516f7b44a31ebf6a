//! Wireshark agrees with us: frames built with `wire::ipv6opt` and
//! `shim::edit` decode in tshark with the option types and lengths we meant,
//! and with good upper-layer checksums (after insertion and after an address
//! rewrite). Skips, saying so, when `tshark` is not on PATH (CI installs it).

use std::process::Command;

use etherparse::{IpHeaders, IpNumber, Ipv6Extensions, Ipv6FlowLabel, Ipv6Header, PacketBuilder};
use svcroute_stack::shim::edit::{self, AddrField};
use svcroute_stack::wire::ipv6opt::{OptionRepr, OptionType};

mod common;
use common::tshark_lines;

const SRC: [u8; 16] = [0xfd, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01];
const DST: [u8; 16] = [0xfd, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02];
const NEW_SRC: [u8; 16] = [
    0xfd, 0x99, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x12, 0x34, 0, 0x07,
];

fn frame(tcp: bool, port: u16) -> Vec<u8> {
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
        b.tcp(port, 0x9c41, 0x0102_0304, 0x2000)
            .write(&mut out, b"svcroute")
    } else {
        b.udp(port, 0x9c41).write(&mut out, b"svcroute")
    }
    .unwrap();
    out
}

#[test]
fn tshark_decodes_our_options() {
    if Command::new("tshark").arg("--version").output().is_err() {
        eprintln!("SKIP tshark_decodes_our_options: tshark not on PATH");
        return;
    }
    let sticky = [0xde, 0xad, 0xbe, 0xef];
    let rosa = [0x01, 0x02, 0x03];
    let opts = [
        OptionRepr::new(OptionType::Sticky, &sticky).unwrap(),
        OptionRepr::new(OptionType::Rosa, &rosa).unwrap(),
    ];
    // 1: UDP with our header. 2: the same with its source rewritten.
    // 3: TCP with our header. 4: TCP with a 3-octet Sticky option, which needs Pad1.
    let mut udp = frame(false, 0xc000);
    edit::insert_dest_opts(&mut udp, &opts).unwrap();
    let mut moved = udp.clone();
    edit::rewrite_addr(&mut moved, AddrField::Src, NEW_SRC.into()).unwrap();
    let mut tcp = frame(true, 0xc001);
    edit::insert_dest_opts(&mut tcp, &opts).unwrap();
    let mut pad1 = frame(true, 0xc002);
    let three = OptionRepr::new(OptionType::Sticky, &[0x5a; 3]).unwrap();
    edit::insert_dest_opts(&mut pad1, &[three]).unwrap();

    let lines = tshark_lines(
        "ipv6opt",
        &[udp, moved, tcp, pad1],
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
    eprintln!("{stdout}");
    assert_eq!(lines.len(), 4, "{stdout}");
    // Checksum status 1 = good; no expert info (malformed, bad checksum, ...).
    assert_eq!(lines[0], "0x1e,0x3e,0x01|4,3,1|17|1||", "UDP with options");
    assert_eq!(
        lines[1], "0x1e,0x3e,0x01|4,3,1|17|1||",
        "UDP with options, source rewritten"
    );
    assert_eq!(lines[2], "0x1e,0x3e,0x01|4,3,1|6||1|", "TCP with options");
    // Pad1 has no length field, so tshark lists one length only.
    assert_eq!(
        lines[3], "0x1e,0x00|3|6||1|",
        "TCP with one option and Pad1"
    );
}
