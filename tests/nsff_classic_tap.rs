//! The classic SFF of the nsff role over real TAPs. A kernel classifier
//! crafts NSH packets with scapy's NSH layer (`scapy.contrib.nsh`, an
//! encoder independent of ours) and sends them to the nSFF; the next hop, a
//! second kernel namespace, captures with tshark, whose NSH and VXLAN-GPE
//! dissectors (again not ours) read what arrived. Needs root, tshark and
//! python3-scapy (`scripts/setup`); skips otherwise.
//!
//! ```text
//!   cls (kernel)  ── in ──  nsff  ── out ──  nh (kernel, tshark)
//!   10.0.1.10               10.0.1.1 | 10.0.2.1      10.0.2.10
//!   fd00:1::10              fd00:1::1 | fd00:2::1    fd00:2::10
//! ```
//!
//! nNLM: SPI 100 / SI 255 → 10.0.2.10 over VXLAN-GPE (VNI 7);
//! SPI 200 / SI 254 → fd00:2::10 over plain Ethernet (its MAC by ND).

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use common::{have, lab_name, named, root_or_skip, run_bounded, tshark_fields, Lab, BIN};

/// The interpreter with Debian's python3-scapy (another python may shadow
/// it on PATH).
const PYTHON: &str = "/usr/bin/python3";

fn lab_file(name: &str) -> String {
    format!(
        r#"name = "{name}"
keys = "none"  # unkeyed on purpose: this test speaks to (or as) unkeyed nodes
[[segment]]
name = "in"
[[segment]]
name = "out"

[[node]]
name = "nsff"
role = "nsff"
[[node.port]]
segment = "in"
addrs = ["10.0.1.1/24", "fd00:1::1/64"]
[[node.port]]
segment = "out"
addrs = ["10.0.2.1/24", "fd00:2::1/64"]
[node.config]
http_port = 0
proxy_port = 0
health_interval_ms = 0
[[node.config.nnlm]]
spi = 100
si = 255
next_hop = "10.0.2.10"
te = "vxlan-gpe"
vni = 7
[[node.config.nnlm]]
spi = 200
si = 254
next_hop = "fd00:2::10"
te = "ethernet"
[[node.config.nnlm]]
spi = 300
si = 1
next_hop = "www.example.com"
te = "http"

[[host]]
name = "cls"
[[host.iface]]
segment = "in"
addrs = ["10.0.1.10/24", "fd00:1::10/64"]

[[host]]
name = "nh"
[[host.iface]]
segment = "out"
addrs = ["10.0.2.10/24", "fd00:2::10/64"]
"#
    )
}

/// `send.py ENCAP DST SPI SI TTL:TAG...`: one packet per TTL:TAG, in
/// order, each an NSH (MD type 1, context 00..0f, next protocol IPv4) that
/// scapy builds around an inner IPv4/UDP packet whose payload is TAG.
/// ENCAP `vxlan-gpe`: VXLAN-GPE (VNI 100) in a kernel UDP socket to
/// DST:4790; `gre`: GRE in a raw IP socket (protocol 47) to DST. Prints
/// `TAG HEX` per packet, HEX being what follows the outer IP (UDP payload
/// or GRE packet).
const SEND_PY: &str = r#"
import socket, sys
from scapy.all import raw, IP, UDP, Raw, GRE
from scapy.layers.vxlan import VXLAN
from scapy.contrib.nsh import NSH
encap, dst, spi, si = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
fam = socket.AF_INET6 if ":" in dst else socket.AF_INET
if encap == "gre":
    s = socket.socket(fam, socket.SOCK_RAW, 47)
else:
    s = socket.socket(fam, socket.SOCK_DGRAM)
for arg in sys.argv[5:]:
    ttl, tag = arg.split(":", 1)
    inner = IP(src="10.9.0.1", dst="10.9.0.2") / UDP(sport=1111, dport=2222) / Raw(tag.encode())
    nsh = NSH(ttl=int(ttl), mdtype=1, nextproto=1, spi=spi, si=si, context_header=bytes(range(16)))
    if encap == "gre":
        b = raw(GRE(proto=0x894F) / nsh / inner)
        s.sendto(b, (dst, 0))
    else:
        b = raw(VXLAN(flags=0x0C, NextProtocol=4, vni=100) / nsh / inner)
        s.sendto(b, (dst, 4790))
    print(tag, b.hex(), flush=True)
"#;

/// Whether the tools the test needs are there; prints a SKIP line if not.
fn tools_or_skip() -> bool {
    if !have("tshark") {
        eprintln!("SKIP: tshark not installed (scripts/setup installs it)");
        return false;
    }
    let scapy = run_bounded(30, PYTHON, &["-c", "from scapy.contrib.nsh import NSH"]);
    if !scapy.status.success() {
        eprintln!("SKIP: {PYTHON} has no scapy NSH layer (scripts/setup installs python3-scapy)");
        return false;
    }
    true
}

/// A tshark capture in host `host` of the lab, running until it has seen
/// `count` frames matching `filter`.
struct Capture {
    child: Child,
    pcap: std::path::PathBuf,
}

impl Capture {
    /// Start it and return once tshark says it is capturing.
    fn start(lab: &Lab, host: &str, filter: &str, count: u32, file: &str) -> Self {
        let pcap = lab.run_dir().join(file);
        let pcap_s = pcap.to_str().expect("UTF-8 run dir").to_owned();
        let count_s = count.to_string();
        let mut child = Command::new(BIN)
            .args(["lab", "exec", "--lab", lab.name(), host, "--"])
            .args(["timeout", "-k", "3", "60", "tshark", "-n", "-i", "eth0"])
            .args(["-f", filter, "-c", &count_s, "-w", &pcap_s])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting tshark");
        let stderr = child.stderr.take().expect("piped stderr");
        let mut lines = BufReader::new(stderr).lines();
        let mut seen = Vec::new();
        loop {
            match lines.next() {
                Some(Ok(l)) if l.contains("Capturing on") => break,
                Some(Ok(l)) => seen.push(l),
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("tshark in {host} did not start: {seen:?}");
                }
            }
        }
        // Keep draining stderr so tshark never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        Self { child, pcap }
    }

    /// Wait until tshark has its `count` frames (or its 60 s bound ran out).
    fn finish(mut self) -> std::path::PathBuf {
        let status = self.child.wait().expect("waiting for tshark");
        assert!(
            status.success(),
            "tshark ended with {status}: too few frames arrived"
        );
        self.pcap.clone()
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        // A failed test: do not leave `lab exec` behind (tshark itself is
        // bounded by its timeout).
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Run `send.py` in `cls`; the hex it printed per tag.
#[track_caller]
fn send(lab: &Lab, encap: &str, dst: &str, spi: u32, si: u8, packets: &[&str]) -> Vec<String> {
    let (spi, si) = (spi.to_string(), si.to_string());
    let mut cmd = vec![PYTHON, "-c", SEND_PY, encap, dst, &spi, &si];
    cmd.extend_from_slice(packets);
    let out = lab.exec("cls", 30, &cmd);
    assert!(
        out.status.success(),
        "send.py failed: {}",
        common::text(&out)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once(' ').map(|(_, hex)| hex.to_owned()))
        .collect()
}

/// `hex` of an NSH (and what follows) with its TTL set to `ttl`.
fn with_ttl(hex: &str, ttl: u16) -> String {
    let word = u16::from_str_radix(&hex[..4], 16).expect("hex");
    let word = (word & !0x0fc0) | (ttl << 6);
    format!("{word:04x}{}", &hex[4..])
}

fn counters(lab: &Lab) -> std::collections::BTreeMap<String, u64> {
    named(&lab.stats("nsff"))
}

/// A tshark number, decimal or `0x` hex.
fn num(s: &str) -> u64 {
    let s = s.split(',').next().unwrap_or_default();
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    }
    .unwrap_or_else(|_| panic!("not a number: {s:?}"))
}

/// tshark's bytes as plain hex (it may group them with `:` or `,`).
fn unhex(s: &str) -> String {
    s.chars().filter(char::is_ascii_hexdigit).collect()
}

fn hex_of(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn vxlan_gpe_over_ipv4_is_forwarded_with_ttl_decremented() {
    if !root_or_skip() || !tools_or_skip() {
        return;
    }
    let name = lab_name('c', 'v');
    let lab = Lab::up(&name, &lab_file(&name));

    let cap = Capture::start(&lab, "nh", "udp dst port 4790", 2, "nh-vxlan.pcap");
    // In this order, on one path: a packet whose TTL runs out here, one for
    // a path the nNLM does not have, one for an HTTP row, then two that go.
    // Had any of the first three been forwarded, it would be among the two
    // frames the capture stops at.
    send(&lab, "vxlan-gpe", "10.0.1.1", 100, 255, &["1:ttl-runs-out"]);
    send(
        &lab,
        "vxlan-gpe",
        "10.0.1.1",
        999,
        255,
        &["63:no-such-path"],
    );
    send(&lab, "vxlan-gpe", "10.0.1.1", 300, 1, &["63:http-row"]);
    let sent = send(
        &lab,
        "vxlan-gpe",
        "10.0.1.1",
        100,
        255,
        &["5:classic-one", "63:classic-two"],
    );
    assert_eq!(sent.len(), 2);
    let pcap = cap.finish();

    let rows = tshark_fields(
        &pcap,
        "nsh",
        &[
            "ip.src",
            "ip.dst",
            "udp.dstport",
            "vxlan.next_proto",
            "vxlan.vni",
            "nsh.ttl",
            "nsh.spi",
            "nsh.si",
            "nsh.contextheader",
            "udp.payload",
        ],
        &[],
    );
    assert_eq!(rows.len(), 2, "{rows:?}");
    for (r, (tag, ttl, hex)) in rows
        .iter()
        .zip([("classic-one", 4, &sent[0]), ("classic-two", 62, &sent[1])])
    {
        let [src, dst, dport, next, vni, nttl, spi, si, ctx, payloads] = &r[..] else {
            panic!("{r:?}");
        };
        // Outer: from the nSFF to the next hop, UDP 4790; inner untouched.
        assert_eq!(src, "10.0.2.1,10.9.0.1", "{r:?}");
        assert_eq!(dst, "10.0.2.10,10.9.0.2", "{r:?}");
        assert_eq!(num(dport), 4790, "{r:?}");
        assert_eq!(num(next), 4, "VXLAN-GPE next protocol NSH: {r:?}");
        assert_eq!(num(vni), 7, "the row's VNI: {r:?}");
        assert_eq!(num(nttl), u64::from(ttl), "TTL decremented: {r:?}");
        assert_eq!(num(spi), 100, "{r:?}");
        assert_eq!(num(si), 255, "the SFF leaves the SI alone: {r:?}");
        assert_eq!(unhex(ctx), "000102030405060708090a0b0c0d0e0f", "{r:?}");
        // UDP payloads: the outer one (VXLAN-GPE), then the inner packet's.
        let mut payloads = payloads.split(',');
        let out = unhex(payloads.next().unwrap_or_default());
        assert_eq!(payloads.next().map(unhex), Some(hex_of(tag)), "{r:?}");
        // Byte for byte: everything after the VXLAN-GPE header is what
        // scapy sent, but for the TTL.
        assert_eq!(out[16..], with_ttl(&hex[16..], ttl), "{tag}");
    }

    let c = counters(&lab);
    let get = |k: &str| c.get(k).copied().unwrap_or(0);
    assert_eq!(get("drop.nsff.classic_ttl"), 1, "{c:?}");
    assert_eq!(get("drop.nsff.classic_no_route"), 1, "{c:?}");
    assert_eq!(get("drop.nsff.classic_not_classic"), 1, "{c:?}");
    assert_eq!(get("nsff.classic_forwarded"), 2, "{c:?}");
    assert_eq!(get("nsff.classic_in_vxlan_gpe"), 2, "{c:?}");
    assert_eq!(get("nsff.classic_out_vxlan_gpe"), 2, "{c:?}");
    assert_eq!(get("drop.nsff.classic_malformed"), 0, "{c:?}");
    let v = lab.ctl("nsff", &["nnlm"]);
    assert_eq!(v["rows"].as_array().map(Vec::len), Some(3), "{v}");
    assert_eq!(v["counters"]["drop.nsff.classic_ttl"], 1, "{v}");
    assert_eq!(v["waiting"], 0, "{v}");
    lab.down();
}

#[test]
fn gre_over_ipv6_goes_out_as_nsh_over_ethernet() {
    if !root_or_skip() || !tools_or_skip() {
        return;
    }
    let name = lab_name('c', 'g');
    let lab = Lab::up(&name, &lab_file(&name));

    let cap = Capture::start(&lab, "nh", "ether proto 0x894f", 1, "nh-eth.pcap");
    send(&lab, "gre", "fd00:1::1", 200, 254, &["1:ttl-runs-out"]);
    let sent = send(&lab, "gre", "fd00:1::1", 200, 254, &["9:over-ethernet"]);
    let pcap = cap.finish();

    let rows = tshark_fields(
        &pcap,
        "nsh",
        &["eth.type", "nsh.ttl", "nsh.spi", "nsh.si", "udp.payload"],
        &[],
    );
    assert_eq!(rows.len(), 1, "{rows:?}");
    let [etype, ttl, spi, si, data] = &rows[0][..] else {
        panic!("{rows:?}");
    };
    assert_eq!(num(etype), 0x894f, "{rows:?}");
    assert_eq!(num(ttl), 8, "{rows:?}");
    assert_eq!(num(spi), 200, "{rows:?}");
    assert_eq!(num(si), 254, "{rows:?}");
    assert_eq!(unhex(data), hex_of("over-ethernet"), "{rows:?}");
    // The frame's payload is the NSH scapy sent (after its 4-octet GRE
    // header), TTL one less.
    let raw = raw_frame_hex(&pcap);
    assert_eq!(raw[28..], with_ttl(&sent[0][8..], 8));

    let c = counters(&lab);
    let get = |k: &str| c.get(k).copied().unwrap_or(0);
    assert_eq!(get("drop.nsff.classic_ttl"), 1, "{c:?}");
    assert_eq!(get("nsff.classic_in_gre"), 1, "{c:?}");
    assert_eq!(get("nsff.classic_out_ethernet"), 1, "{c:?}");
    assert_eq!(get("nsff.classic_forwarded"), 1, "{c:?}");
    lab.down();
}

/// The first frame of `pcap` as hex (tshark's `-x` dump, offsets and ASCII
/// column dropped).
fn raw_frame_hex(pcap: &std::path::Path) -> String {
    let p = pcap.to_str().expect("UTF-8 path");
    let out = run_bounded(60, "tshark", &["-r", p, "-c", "1", "-x", "-Y", "nsh"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let mut hex = String::new();
    for line in text.lines() {
        // "0000  02 00 ... 16 octets  ascii"
        let Some((off, rest)) = line.split_once("  ") else {
            continue;
        };
        if off.len() != 4 || !off.bytes().all(|b| b.is_ascii_hexdigit()) {
            continue;
        }
        for tok in rest.split(' ').take(16) {
            if tok.len() == 2 && tok.bytes().all(|b| b.is_ascii_hexdigit()) {
                hex.push_str(tok);
            } else {
                break;
            }
        }
    }
    hex
}
