//! Wireshark agrees with us on the classic SFC encapsulations: NSH built
//! with `wire::nsh` (MD types 1 and 2) directly over Ethernet, over GRE
//! (`wire::gre`, with checksum) in IPv4 and over VXLAN-GPE (`wire::vxlan_gpe`)
//! in UDP 4790 decodes in tshark with the fields we meant, good checksums and
//! no expert info. Skips, saying so, when `tshark` is not on PATH.

use std::io::Write;
use std::process::Command;

use etherparse::{IpNumber, PacketBuilder};
use svcroute_stack::wire::{gre, nsh, vxlan_gpe};

mod common;
use common::pcap;

const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];

/// An inner IPv4/UDP packet (what the SF chain carries).
fn inner_ipv4() -> Vec<u8> {
    let mut out = Vec::new();
    PacketBuilder::ipv4([10, 1, 0, 1], [10, 1, 0, 2], 64)
        .udp(0x1234, 0x5678)
        .write(&mut out, b"svcroute")
        .unwrap();
    out
}

/// An inner IPv6/UDP packet.
fn inner_ipv6() -> Vec<u8> {
    let src = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01];
    let dst = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02];
    let mut out = Vec::new();
    PacketBuilder::ipv6(src, dst, 64)
        .udp(0x1234, 0x5678)
        .write(&mut out, b"svcroute")
        .unwrap();
    out
}

/// NSH followed by `inner`.
fn nsh_packet(repr: &nsh::Repr<'_>, inner: &[u8]) -> Vec<u8> {
    let mut out = vec![0; repr.buffer_len() + inner.len()];
    let mut p = nsh::Packet::new_unchecked(&mut out[..]);
    repr.emit(&mut p);
    p.payload_mut().copy_from_slice(inner);
    out
}

fn ethernet(ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&MAC_B);
    out.extend_from_slice(&MAC_A);
    out.extend_from_slice(&ethertype.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

fn frames() -> Vec<Vec<u8>> {
    let md1 = nsh::Repr {
        oam: false,
        ttl: nsh::Ttl::MAX,
        next_protocol: nsh::NextProtocol::Ipv4,
        spi: nsh::Spi::new(0x00_0123).unwrap(),
        si: 255,
        metadata: nsh::Metadata::Md1([
            0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d,
            0x0e, 0x0f,
        ]),
    };
    let ctx = [
        nsh::ContextHeader::new(0x0101, 0x01, &[0xaa, 0xbb, 0xcc]).unwrap(),
        nsh::ContextHeader::new(0xfff6, 0x02, &[0xde, 0xad, 0xbe, 0xef]).unwrap(),
    ];
    let md2 = nsh::Repr {
        oam: false,
        ttl: nsh::Ttl::new(10).unwrap(),
        next_protocol: nsh::NextProtocol::Ipv6,
        spi: nsh::Spi::new(0xab_cdef).unwrap(),
        si: 3,
        metadata: nsh::Metadata::Md2(nsh::ContextHeaders::new(&ctx).unwrap()),
    };

    // 1, 2: NSH over Ethernet.
    let eth_md1 = ethernet(nsh::ETHERTYPE, &nsh_packet(&md1, &inner_ipv4()));
    let eth_md2 = ethernet(nsh::ETHERTYPE, &nsh_packet(&md2, &inner_ipv6()));

    // 3: Ethernet / IPv4 / GRE (checksum) / NSH MD1 / IPv4.
    let inner = nsh_packet(&md1, &inner_ipv4());
    let g = gre::Repr {
        protocol_type: gre::ProtocolType::Nsh,
        checksum: true,
    };
    let mut grep = vec![0; g.buffer_len() + inner.len()];
    let mut p = gre::Packet::new_unchecked(&mut grep[..]);
    g.emit(&mut p);
    p.payload_mut().copy_from_slice(&inner);
    p.fill_checksum();
    let mut over_gre = Vec::new();
    PacketBuilder::ethernet2(MAC_A, MAC_B)
        .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
        .write(&mut over_gre, IpNumber(gre::IP_PROTOCOL), &grep)
        .unwrap();

    // 4: Ethernet / IPv4 / UDP 4790 / VXLAN-GPE / NSH MD2 / IPv6.
    let inner = nsh_packet(&md2, &inner_ipv6());
    let v = vxlan_gpe::Repr {
        next_protocol: vxlan_gpe::NextProtocol::Nsh,
        vni: vxlan_gpe::Vni::new(0x00_1234).unwrap(),
        bum: false,
        oam: false,
    };
    let mut vx = vec![0; v.buffer_len() + inner.len()];
    let mut p = vxlan_gpe::Packet::new_unchecked(&mut vx[..]);
    v.emit(&mut p);
    p.payload_mut().copy_from_slice(&inner);
    let mut over_vxlan = Vec::new();
    PacketBuilder::ethernet2(MAC_A, MAC_B)
        .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
        .udp(0xc000, vxlan_gpe::UDP_PORT)
        .write(&mut over_vxlan, &vx)
        .unwrap();

    vec![eth_md1, eth_md2, over_gre, over_vxlan]
}

#[test]
fn tshark_decodes_our_sfc_encapsulations() {
    if Command::new("tshark").arg("--version").output().is_err() {
        eprintln!("SKIP tshark_decodes_our_sfc_encapsulations: tshark not on PATH");
        return;
    }
    let path = std::env::temp_dir().join(format!("svcroute-sfc-{}.pcap", std::process::id()));
    std::fs::File::create(&path)
        .and_then(|mut f| f.write_all(&pcap(&frames())))
        .unwrap();
    // Wireshark's view alone: no personal plugin (wireshark/svcroute.lua).
    let out = Command::new("tshark")
        .env(
            "HOME",
            std::env::temp_dir().join("svcroute-tshark-no-plugins"),
        )
        .arg("-r")
        .arg(&path)
        .args(["-o", "udp.check_checksum:TRUE"])
        .args(["-T", "fields", "-E", "separator=|", "-E", "aggregator=,"])
        .args(["-e", "nsh.spi", "-e", "nsh.si", "-e", "nsh.ttl"])
        .args([
            "-e",
            "nsh.length",
            "-e",
            "nsh.mdtype",
            "-e",
            "nsh.nextproto",
        ])
        .args(["-e", "nsh.metadataclass", "-e", "nsh.metadatalen"])
        .args(["-e", "gre.proto", "-e", "gre.checksum.status"])
        .args(["-e", "vxlan.next_proto", "-e", "vxlan.vni"])
        .args(["-e", "udp.dstport", "-e", "_ws.expert"])
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&path);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{stdout}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{stdout}");
    // spi|si|ttl|length|mdtype|nextproto|md class|md len|gre proto|gre csum
    // (1 = good)|vxlan np|vni|udp dport (the inner packet's last: it decoded)|
    // expert info (none: nothing malformed).
    assert_eq!(
        lines[0], "291|255|0x003f|6|1|1|||||||22136|",
        "NSH MD type 1 over Ethernet"
    );
    assert_eq!(
        lines[1], "11259375|3|0x000a|6|2|2|257,65526|0x03,0x04|||||22136|",
        "NSH MD type 2 over Ethernet"
    );
    assert_eq!(
        lines[2], "291|255|0x003f|6|1|1|||0x894f|1|||22136|",
        "GRE with checksum, NSH MD type 1"
    );
    assert_eq!(
        lines[3], "11259375|3|0x000a|6|2|2|257,65526|0x03,0x04|||4|4660|4790,22136|",
        "VXLAN-GPE, NSH MD type 2"
    );
}
