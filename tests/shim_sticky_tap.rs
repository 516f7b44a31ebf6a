//! The UE's part of sticky service (draft 002 §4.3) over real TAPs, with
//! unmodified kernel programs on both ends: kernel host `ue` has one link,
//! the TUN of shim node `cs`; it downloads 12 MB with curl from a kernel
//! HTTP server `srv` (python) behind a plain SAR `r`. Needs root.
//!
//! ```text
//!   ue (curl, fd00:a::20 on the TUN) ═ cs ─ a ─┐
//!                                         b ─ r ─ s ─ srv (fd00:5::10, python, Sticky-Dst via IPV6_DSTOPTS)
//!   obs (fd00:a::99) ─ a                         └ nft: fd00:b::20 ⇄ fd00:a::20 (the egress's anchor, stood in)
//! ```
//!
//! The server's kernel puts a Sticky-Dst option in every packet of the
//! connection (`setsockopt(IPV6_DSTOPTS)`), naming fd00:5::1 for the first
//! half of the body and fd00:5::2 after: what an egress SAR in end-node mode
//! inserts. The test checks, on captures of both bridges and of the TUN:
//!
//! 1. the UE's later packets carry the option back, the latest one winning;
//! 2. the flow's label on the wire stays one value while the kernel's own
//!    label changes (Linux re-draws it when it sees the retransmissions a
//!    1.5 s ACK blackout, made with nftables, causes);
//! 3. after the UE's TAP is re-plugged to segment b and `ctl cs move
//!    fd00:b::20/64 fd00:b::1`, the UE's packets leave from fd00:b::20
//!    (label and option unchanged) and the download completes byte-exact.
//!
//! No sticky SAR is in this lab: the server's view of the moved UE is kept
//! by two stateless nftables rules in the server's namespace standing in for
//! the egress's translation of a moved UE's address back to the flow's
//! first one (`nodes/sar/src/sticky/anchor.rs`). The full path with the
//! SAR's own egress is the sticky lab's test.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use common::{have, root_or_skip, tshark_fields, wait_until, Lab};

const UE: &str = "fd00:a::20";
const MOVED: &str = "fd00:b::20";
const SRV: &str = "fd00:5::10";
const E1: &str = "fd00:5::1";
const E2: &str = "fd00:5::2";
const BODY: usize = 12_000_000;

/// The server: `/bytes/N` answers N bytes, byte i = i mod 251, paced at
/// about 1.3 MB/s; its socket carries a Sticky-Dst naming argv[1], then
/// argv[2] from half the body on.
const SERVER: &str = r#"
import socket, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

def dstopts(egress):
    # Destination Options header, 24 octets (Hdr Ext Len 2): option 0x1e,
    # 20 octets of data: type 1, len 18, AFI 2, reserved, the address.
    data = bytes([1, 18, 2, 0]) + socket.inet_pton(socket.AF_INET6, egress)
    return bytes([0, 2, 0x1e, len(data)]) + data

BLOCK = bytes(i % 251 for i in range(251 * 256))

class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        n = int(self.path.rsplit("/", 1)[1])
        s = self.connection
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_DSTOPTS, dstopts(sys.argv[1]))
        self.send_response(200)
        self.send_header("Content-Length", str(n))
        self.end_headers()
        sent, switched = 0, False
        while sent < n:
            if not switched and sent >= n // 2:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_DSTOPTS, dstopts(sys.argv[2]))
                switched = True
            chunk = BLOCK[: min(len(BLOCK), n - sent)]
            self.wfile.write(chunk)
            sent += len(chunk)
            time.sleep(0.05)  # about 1.3 MB/s: the flow outlasts the move
    def log_message(self, *a):
        pass

class S(ThreadingHTTPServer):
    address_family = socket.AF_INET6
    allow_reuse_address = True

S(("::", 8000), H).serve_forever()
"#;

/// The egress's anchor translation, stood in: the server keeps seeing the
/// address the flow started with. Loaded at the move (the egress starts
/// translating when the flow's packets come from a new address).
const ANCHOR: &str = "table ip6 svanchor {
  chain pre { type filter hook prerouting priority -300; ip6 saddr fd00:b::20 ip6 saddr set fd00:a::20; }
  chain out { type route hook output priority -300; ip6 daddr fd00:a::20 ip6 daddr set fd00:b::20; }
}
";

fn lab_text(name: &str, server: &Path) -> String {
    format!(
        r#"name = "{name}"

[[segment]]
name = "a"
[[segment]]
name = "b"
[[segment]]
name = "s"

[[node]]
name = "r"
role = "sar"
[[node.port]]
segment = "a"
addrs = ["fd00:a::1/64"]
[[node.port]]
segment = "b"
addrs = ["fd00:b::1/64"]
[[node.port]]
segment = "s"
addrs = ["fd00:5::1/64"]
[node.config]
router_id = 1

[[host]]
name = "ue"

[[node]]
name = "cs"
role = "shim"
tun_host = "ue"
[[node.port]]
segment = "a"
addrs = ["{UE}/64"]
gateways = ["fd00:a::1"]
[node.config]
names = ["service.org"]

[[host]]
name = "obs"
[[host.iface]]
segment = "a"
addrs = ["fd00:a::99/64"]
gateways = ["fd00:a::1"]

[[host]]
name = "srv"
commands = ["exec python3 {server} {E1} {E2}"]
wait_tcp = ["[{SRV}]:8000"]
[[host.iface]]
segment = "s"
addrs = ["{SRV}/64"]
gateways = ["fd00:5::1"]
"#,
        server = server.display()
    )
}

/// A capture in a namespace, stopped and reaped when dropped.
struct Capture {
    child: Child,
    file: PathBuf,
}

impl Capture {
    fn start(netns: &str, iface: &str, file: PathBuf) -> Self {
        let child = Command::new("ip")
            .args(["netns", "exec", netns, "tshark", "-q", "-i", iface, "-w"])
            .arg(&file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting tshark");
        let cap = Self { child, file };
        assert!(
            wait_until(30, || std::fs::metadata(&cap.file)
                .is_ok_and(|m| m.len() > 0)),
            "the capture on {iface} never started"
        );
        cap
    }

    fn holds(&self, filter: &str) -> bool {
        Command::new("timeout")
            .args(["-k", "5", "30", "tshark", "-r"])
            .arg(&self.file)
            .args(["-Y", filter])
            .stderr(Stdio::null())
            .output()
            .is_ok_and(|o| !o.stdout.is_empty())
    }

    /// Stop once `last` (a frame sent after all the test reads) is in the
    /// file: dumpcap loses its last batch on a signal.
    fn stop(mut self, last: &str) -> PathBuf {
        assert!(
            wait_until(30, || self.holds(last)),
            "the capture never showed {last:?}"
        );
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-INT", &pid]).status();
        assert!(
            wait_until(20, || self.child.try_wait().ok().flatten().is_some()),
            "tshark did not stop on SIGINT"
        );
        self.file.clone()
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A background command, killed and reaped when dropped.
struct Bg(Child);

impl Drop for Bg {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Rows of `fields` for frames matching `filter`, with the svcroute
/// dissector (Sticky-Dst) loaded.
fn rows(pcap: &Path, filter: &str, fields: &[&str]) -> Vec<Vec<String>> {
    let lua = format!(
        "lua_script:{}/wireshark/svcroute.lua",
        env!("CARGO_MANIFEST_DIR")
    );
    tshark_fields(pcap, filter, fields, &["-X", &lua])
}

fn label(hex: &str) -> u32 {
    u32::from_str_radix(hex.trim_start_matches("0x"), 16).expect("a flow label")
}

#[test]
fn a_kernel_ue_copies_sticky_dst_keeps_its_flow_label_and_survives_a_move() {
    if !root_or_skip() {
        return;
    }
    if !have("tshark") || !have("nft") || !have("curl") || !have("python3") {
        eprintln!("SKIP: needs tshark, nft, curl and python3");
        return;
    }
    let name = common::lab_name('u', 's');
    let dir = std::env::temp_dir().join(format!("svcroute-tests-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let server = dir.join("sticky_server.py");
    std::fs::write(&server, SERVER).unwrap();
    let rules = dir.join("anchor.nft");
    std::fs::write(&rules, ANCHOR).unwrap();
    let lab = Lab::up(&name, &lab_text(&name, &server));
    let ue_ns = format!("svl-{name}-ue");
    // Linux's defaults, made sure of: labels from the socket's hash, which
    // is re-drawn on RTO and on duplicate data (what pinning must survive).
    for s in ["net.ipv6.auto_flowlabels=1", "net.core.txrehash=1"] {
        lab.exec("ue", 5, &["sysctl", "-qw", s]);
    }

    let run = lab.run_dir();
    let cap_a = Capture::start(&lab.netns(), "br-a", run.join("a.pcapng"));
    let cap_b = Capture::start(&lab.netns(), "br-b", run.join("b.pcapng"));
    let cap_tun = Capture::start(&ue_ns, "rosa0", run.join("tun.pcapng"));

    // The download: slow enough to outlast the blackout and the move.
    let body = run.join("body");
    let url = format!("http://[{SRV}]:8000/bytes/{BODY}");
    let curl = Bg(Command::new(env!("CARGO_BIN_EXE_svcroute"))
        .args(["lab", "exec", "--lab", &name, "ue", "--"])
        .args(["timeout", "120", "curl", "-sS", "-o"])
        .arg(&body)
        .args(["-w", "%{http_code} %{size_download}", &url])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting curl"));

    // The shim learns the option from the server's first packets.
    let flow = |lab: &Lab| {
        let v = lab.ctl("cs", &["sticky"]);
        v["list"]
            .as_array()
            .and_then(|l| l.iter().find(|f| f["remote"] == SRV).cloned())
    };
    assert!(
        wait_until(20, || flow(&lab).is_some()),
        "the shim never saw a Sticky-Dst: {}",
        lab.ctl("cs", &["sticky"])
    );
    let f = flow(&lab).unwrap();
    let port = f["local_port"].as_u64().unwrap();
    let pinned = f["flow_label"].as_u64().unwrap() as u32;
    assert_eq!(f["egress"], E1, "{f}");

    // A 1.5 s blackout of the UE's ACKs: the server retransmits, and the
    // UE's kernel, seeing data twice, draws a new label for the socket.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let blackout = "add table inet svdrop
add chain inet svdrop out { type filter hook output priority 0; }
add rule inet svdrop out tcp dport 8000 drop
";
    let drop_rules = dir.join("drop.nft");
    std::fs::write(&drop_rules, blackout).unwrap();
    let out = lab.exec("ue", 10, &["nft", "-f", drop_rules.to_str().unwrap()]);
    assert!(out.status.success(), "nft: {}", common::text(&out));
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let out = lab.exec("ue", 10, &["nft", "delete", "table", "inet", "svdrop"]);
    assert!(out.status.success(), "nft: {}", common::text(&out));
    std::thread::sleep(std::time::Duration::from_millis(2500));

    // The move: the TAP goes to segment b's bridge, the shim is told; the
    // server side learns of it as the egress would (its stand-in's rules).
    let out = lab.exec("srv", 10, &["nft", "-f", rules.to_str().unwrap()]);
    assert!(out.status.success(), "nft: {}", common::text(&out));
    let out = common::run_bounded(
        10,
        "ip",
        &[
            "netns",
            "exec",
            &lab.netns(),
            "ip",
            "link",
            "set",
            "cs-0",
            "master",
            "br-b",
        ],
    );
    assert!(out.status.success(), "re-plug: {}", common::text(&out));
    let v = lab.ctl("cs", &["move", &format!("{MOVED}/64"), "fd00:b::1"]);
    assert_eq!(v["wire"], format!("{MOVED}/64"), "{v}");
    assert_eq!(v["kernel"], format!("{UE}/64"), "{v}");
    let v = lab.ctl("cs", &["status"]);
    assert_eq!(v["translating"], true, "{v}");
    assert_eq!(v["moves"], 1, "{v}");

    // The download goes on to its end, byte-exact.
    let mut curl = curl;
    assert!(
        wait_until(90, || curl.0.try_wait().ok().flatten().is_some()),
        "curl never finished"
    );
    let mut stdout = String::new();
    use std::io::Read as _;
    curl.0
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    let status = curl.0.wait().unwrap();
    assert!(status.success(), "curl: {status} {stdout}");
    assert_eq!(stdout.trim(), format!("200 {BODY}"));
    let got = std::fs::read(&body).unwrap();
    assert_eq!(got.len(), BODY);
    let bad = got
        .iter()
        .enumerate()
        .position(|(i, &b)| b != (i % 251) as u8);
    assert_eq!(bad, None, "the body differs from the pattern");

    // Markers after everything the checks read, one per capture.
    let out = lab.exec(
        "srv",
        10,
        &["ping", "-6", "-c", "2", "-W", "3", "fd00:a::99"],
    );
    assert!(out.status.success(), "{}", common::text(&out));
    let out = lab.exec("ue", 10, &["ping", "-6", "-c", "2", "-W", "3", SRV]);
    assert!(
        out.status.success(),
        "ping after the move: {}",
        common::text(&out)
    );
    let a = cap_a.stop("icmpv6.type == 129 && ipv6.src == fd00:a::99");
    let b = cap_b.stop(&format!("icmpv6.type == 129 && ipv6.dst == {MOVED}"));
    let tun = cap_tun.stop(&format!("icmpv6.type == 129 && ipv6.dst == {UE}"));

    let fields = ["frame.number", "ipv6.src", "ipv6.flow", "sticky.egress"];
    let up = |pcap: &Path, src: &str| {
        rows(
            pcap,
            &format!("ipv6.src == {src} && ipv6.dst == {SRV} && tcp.srcport == {port}"),
            &fields,
        )
    };
    let down = |pcap: &Path, dst: &str| {
        rows(
            pcap,
            &format!("ipv6.src == {SRV} && ipv6.dst == {dst} && tcp.dstport == {port}"),
            &fields,
        )
    };
    let before = up(&a, UE);
    let after = up(&b, MOVED);
    assert!(
        before.len() > 100,
        "{} packets before the move",
        before.len()
    );
    assert!(after.len() > 100, "{} packets after the move", after.len());

    // (1) The option comes back. On segment a: every UE packet after the
    // server's tenth option-carrying packet carries one too.
    let replies = down(&a, UE);
    let tenth: u64 = replies
        .iter()
        .filter(|r| !r[3].is_empty())
        .nth(9)
        .map(|r| r[0].parse().unwrap())
        .expect("the server's packets carry Sticky-Dst");
    let late: Vec<&Vec<String>> = before
        .iter()
        .filter(|r| r[0].parse::<u64>().unwrap() > tenth)
        .collect();
    assert!(late.len() > 50);
    let without: Vec<&&Vec<String>> = late.iter().filter(|r| r[3].is_empty()).collect();
    assert!(
        without.is_empty(),
        "UE packets without the option: {without:?}"
    );
    let egresses: BTreeSet<&str> = late.iter().map(|r| r[3].as_str()).collect();
    assert!(egresses.contains(E1), "{egresses:?}");
    // The latest option wins: once the server switched to E2, the UE did
    // too, and never went back (both segments, in order).
    let seq: Vec<&str> = late
        .iter()
        .map(|r| r[3].as_str())
        .chain(after.iter().map(|r| r[3].as_str()))
        .collect();
    let first_e2 = seq
        .iter()
        .position(|e| *e == E2)
        .expect("E2 never came back");
    assert!(seq[first_e2..].iter().all(|e| *e == E2), "{seq:?}");
    assert!(after.iter().rev().take(20).all(|r| r[3] == E2));

    // (2) One label on the wire, both segments: the shim's.
    let wire: BTreeSet<u32> = before.iter().chain(&after).map(|r| label(&r[2])).collect();
    assert_eq!(wire, BTreeSet::from([pinned]), "labels on the wire");
    assert_ne!(pinned, 0);
    // ...while the kernel's own label for the flow changed on the TUN.
    let kernel: BTreeSet<u32> = rows(
        &tun,
        &format!("ipv6.src == {UE} && ipv6.dst == {SRV} && tcp.srcport == {port}"),
        &fields,
    )
    .iter()
    .map(|r| label(&r[2]))
    .collect();
    assert!(
        kernel.len() >= 2,
        "the kernel never re-drew its label ({kernel:?}): the check of (2) proves nothing"
    );

    // (3) After the move: from the new address, back to it, nothing from
    // the old address on segment b; the shim translated both ways.
    assert!(after.iter().all(|r| r[1] == MOVED));
    assert!(down(&b, MOVED).len() > 100);
    assert!(up(&b, UE).is_empty());
    let stats = common::named(&lab.stats("cs"));
    for c in ["tun.translated_out", "tun.translated_in", "sticky.copied"] {
        assert!(stats.get(c).copied().unwrap_or(0) > 100, "{c}: {stats:?}");
    }
    assert_eq!(stats.get("tun.moves").copied(), Some(1));
    assert_eq!(
        stats.get("tun.move_probes").copied(),
        Some(1),
        "the connection's last ACK, again"
    );
    let drops: Vec<String> = lab
        .drops("cs")
        .into_keys()
        .filter(|k| k.starts_with("drop.tun.") || k.starts_with("drop.ipv6_"))
        .collect();
    assert!(drops.is_empty(), "{drops:?}");
    lab.down();
}
