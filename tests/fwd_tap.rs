//! The fwd role over real TAPs: kernel namespaces at the edges send GFF
//! packets (AF_PACKET, python3) through a chain of two fwd nodes and receive
//! them at the far edge; a fabric segment taken down makes the neighbour declare
//! the link down and send a link event to the NR-side namespace. Needs root.
//!
//! ```text
//!   ha ── ea ── f1 ── fab ── f2 ── eb ── hb
//!        link 0 ▸    1 ▸ ◂ 2   │ 3 ▸
//!                              └── enr ── hn (stands in for the NR)
//!                                  4 ▸
//! ```

mod common;

use std::time::Duration;

use common::{lab_name, root_or_skip, run_bounded, Lab};

fn lab_file(name: &str) -> String {
    format!(
        r#"
name = "{name}"
keys = "none"  # unkeyed on purpose: this test speaks to (or as) unkeyed nodes
[[segment]]
name = "ea"
[[segment]]
name = "fab"
[[segment]]
name = "eb"
[[segment]]
name = "enr"

[[node]]
name = "f1"
role = "fwd"
[[node.port]]
segment = "ea"
[[node.port]]
segment = "fab"
[node.config]
node_id = 1
link_ids = [0, 1]
nr_links = [1, 4]

[[node]]
name = "f2"
role = "fwd"
[[node.port]]
segment = "fab"
[[node.port]]
segment = "eb"
[[node.port]]
segment = "enr"
[node.config]
node_id = 2
link_ids = [2, 3, 4]
nr_links = [4]

[[host]]
name = "ha"
[[host.iface]]
segment = "ea"
addrs = ["10.0.1.10/24"]
[[host]]
name = "hb"
[[host.iface]]
segment = "eb"
addrs = ["10.0.2.10/24"]
[[host]]
name = "hn"
[[host.iface]]
segment = "enr"
addrs = ["10.0.3.10/24"]
"#
    )
}

/// `gff.py send LINKS COUNT TAG` sends COUNT GFF transport-data packets with
/// the pathID of LINKS (comma-separated) out of eth0; `gff.py recv SECS TAG`
/// prints how many of TAG's packets arrived (and their hop limit and rate);
/// `gff.py events SECS` prints the link events (type 7) it sees.
const GFF_PY: &str = r#"
import socket, struct, sys, time
ETH_P_IPV6 = 0x86dd
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_IPV6))
s.bind(("eth0", ETH_P_IPV6))
mode = sys.argv[1]
if mode == "send":
    path = bytearray(32)
    for l in map(int, sys.argv[2].split(",")):
        path[l // 8] |= 0x80 >> (l % 8)
    count, tag = int(sys.argv[3]), sys.argv[4].encode()
    mac = s.getsockname()[4]
    gff = struct.pack("!H", (256 << 4) | 1) + bytes(path)
    for i in range(count):
        payload = gff + tag + struct.pack("!I", i)
        ip6 = struct.pack("!IHBB", 0x60000000, len(payload), 253, 64) + bytes(path)
        frame = b"\xff" * 6 + mac + struct.pack("!H", ETH_P_IPV6) + ip6 + payload
        while True:
            try:
                s.send(frame)
                break
            except BlockingIOError:
                time.sleep(0.0001)
    print("sent", count)
elif mode == "recv":
    secs, tag = float(sys.argv[2]), sys.argv[3].encode()
    s.settimeout(0.2)
    end = time.time() + secs
    seen, hops, first, last = set(), set(), None, None
    while time.time() < end:
        try:
            f = s.recv(2048)
        except socket.timeout:
            continue
        if len(f) < 88 or f[20] != 253 or (f[55] & 0x0f) != 1:
            continue
        if f[88:88 + len(tag)] != tag:
            continue
        seen.add(struct.unpack("!I", f[88 + len(tag):92 + len(tag)])[0])
        hops.add(f[21])
        now = time.time()
        first = first or now
        last = now
    rate = len(seen) / (last - first) if first and last > first else 0
    print(len(seen), sorted(hops), int(rate))
elif mode == "events":
    secs = float(sys.argv[2])
    s.settimeout(0.2)
    end = time.time() + secs
    while time.time() < end:
        try:
            f = s.recv(2048)
        except socket.timeout:
            continue
        if len(f) >= 90 and f[20] == 253 and (f[55] & 0x0f) == 7:
            print("event", f[88], f[89], flush=True)
"#;

/// Start `gff.py args` in `host` in the background and return its output.
fn spawn(lab: &Lab, host: &str, secs: u32, args: Vec<String>) -> std::thread::JoinHandle<String> {
    let bin = common::BIN.to_owned();
    let name = lab.name().to_owned();
    let host = host.to_owned();
    std::thread::spawn(move || {
        let secs_s = secs.to_string();
        let mut all = vec![
            "lab", "exec", "--lab", &name, &host, "--", "timeout", "-k", "3", &secs_s, "python3",
            "-c", GFF_PY,
        ];
        all.extend(args.iter().map(String::as_str));
        let out = run_bounded(secs + 10, &bin, &all);
        String::from_utf8_lossy(&out.stdout).into_owned()
    })
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn gff_packets_cross_a_chain_of_two_switches_and_a_dead_link_is_reported() {
    if !root_or_skip() {
        return;
    }
    let name = lab_name('f', 'w');
    let lab = Lab::up(&name, &lab_file(&name));
    lab.disable_bridge_netfilter();

    // Hellos bring the f1–f2 link up.
    assert!(common::wait_until(10, || {
        let l = lab.ctl("f2", &["links"]);
        l["links"][0]["state"] == "up"
    }));
    let l = lab.ctl("f2", &["links"]);
    assert_eq!(l["links"][0]["neighbour"]["node"], 1, "{l:#}");
    assert_eq!(l["links"][0]["neighbour"]["link_id"], 1, "{l:#}");

    // ha → hb over links 1 (f1 → f2) and 3 (f2 → hb); 0 (f1 → ha) is the
    // ingress port's own link and must not send anything back.
    let rx = spawn(&lab, "hb", 6, args(&["recv", "5", "unicast"]));
    let back = spawn(&lab, "ha", 6, args(&["recv", "5", "unicast"]));
    std::thread::sleep(Duration::from_millis(1000));
    let out = lab.exec(
        "ha",
        20,
        &["python3", "-c", GFF_PY, "send", "0,1,3", "200", "unicast"],
    );
    assert!(out.status.success());
    let got = rx.join().unwrap();
    // Two switches: hop limit 62.
    assert_eq!(
        got.split_whitespace().take(2).collect::<Vec<_>>(),
        ["200", "[62]"],
        "{got}"
    );
    assert!(back.join().unwrap().starts_with("0 "), "nothing back to ha");

    // Multicast: to hb and to hn at once (links 1, 3 | 1, 4).
    let rb = spawn(&lab, "hb", 6, args(&["recv", "5", "multi"]));
    let rn = spawn(&lab, "hn", 6, args(&["recv", "5", "multi"]));
    std::thread::sleep(Duration::from_millis(1000));
    let out = lab.exec(
        "ha",
        20,
        &["python3", "-c", GFF_PY, "send", "1,3,4", "50", "multi"],
    );
    assert!(out.status.success());
    assert!(rb.join().unwrap().starts_with("50 "));
    assert!(rn.join().unwrap().starts_with("50 "));
    let s = lab.stats("f2");
    assert_eq!(s["named"]["fwd.forwarded"], 250, "{s:#}");
    assert_eq!(s["named"]["fwd.copies"], 300, "{s:#}");

    // Benchmark (reported, not asserted): a burst through both switches.
    let rx = spawn(&lab, "hb", 12, args(&["recv", "10", "bench"]));
    std::thread::sleep(Duration::from_millis(1000));
    lab.exec(
        "ha",
        20,
        &["python3", "-c", GFF_PY, "send", "1,3", "100000", "bench"],
    );
    let got = rx.join().unwrap();
    let f1 = lab.stats("f1");
    let f2 = lab.stats("f2");
    eprintln!(
        "BENCH fwd chain (2 switches), 100000 sent: hb received / hop limits / packets per s: \
         {} ; f1 forwarded {} ; f2 forwarded {} ; f1 drops {:?} ; f2 drops {:?}",
        got.trim(),
        f1["named"]["fwd.forwarded"],
        f2["named"]["fwd.forwarded"],
        lab.drops("f1"),
        lab.drops("f2"),
    );

    // Cut the f1–f2 segment (`lab link fab down`: the bridge drops every
    // frame, the TAPs stay up): f2 hears no more hellos, declares the link
    // down within 3-4 s and tells the NR side (hn) about both directions.
    // (Not the TAP itself: a write to a down TAP fails with EIO, which stops
    // the node; see docs/fwd.md.)
    let events = spawn(&lab, "hn", 10, args(&["events", "9"]));
    std::thread::sleep(Duration::from_millis(500));
    lab.verb("link", &["fab", "down"]);
    assert!(common::wait_until(8, || {
        lab.ctl("f2", &["links"])["links"][0]["state"] == "down"
    }));
    let ev = events.join().unwrap();
    assert!(ev.contains("event 1 0"), "link 1 (f1 → f2) down: {ev}");
    assert!(ev.contains("event 2 0"), "link 2 (f2 → f1) down: {ev}");
    let s = lab.stats("f2");
    assert_eq!(s["named"]["fwd.links_down"], 1, "{s:#}");

    // Up again: the link recovers and the NR side hears that too.
    let events = spawn(&lab, "hn", 8, args(&["events", "6"]));
    std::thread::sleep(Duration::from_millis(500));
    lab.verb("link", &["fab", "up"]);
    assert!(common::wait_until(8, || {
        lab.ctl("f2", &["links"])["links"][0]["state"] == "up"
    }));
    let ev = events.join().unwrap();
    assert!(ev.contains("event 1 1"), "{ev}");
    lab.assert_node_alive("f1");
    lab.assert_node_alive("f2");
    lab.down();
}

/// `hello.py SENDER LINK COUNT`: COUNT link hellos (GFF type 8) claiming to
/// be node SENDER over link LINK, from eth0 with eth0's own MAC, 0.2 s apart.
const HELLO_PY: &str = r#"
import socket, struct, sys, time
sender, link, count = map(int, sys.argv[1:4])
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind(("eth0", 0))
mac = s.getsockname()[4]
path = bytearray(32)
path[link // 8] |= 0x80 >> (link % 8)
path = bytes(path)
for seq in range(count):
    gff = struct.pack("!H", (256 << 4) | 8) + path + struct.pack("!BBI", sender, link, 1000 + seq)
    ip6 = struct.pack("!IHBB", 0x60000000, len(gff), 253, 64) + path
    s.send(b"\xff" * 6 + mac + b"\x86\xdd" + ip6 + gff)
    time.sleep(0.2)
"#;

/// Issue 12: a host on the fabric segment sending link hellos that name f2
/// (from its own MAC) does not move f2's address at f1: f1 keeps sending
/// f2's frames to f2, and counts the spoofed hellos
/// (`drop.fwd.hello_mac_moved`).
#[test]
fn a_spoofed_hello_does_not_move_a_neighbours_mac() {
    if !root_or_skip() {
        return;
    }
    let name = lab_name('f', 's');
    let toml = lab_file(&name) + "\n[[host]]\nname = \"spy\"\n[[host.iface]]\nsegment = \"fab\"\n";
    let lab = Lab::up(&name, &toml);
    lab.disable_bridge_netfilter();
    let neighbour = |lab: &Lab| {
        let l = lab.ctl("f1", &["links"]);
        (
            l["links"][1]["state"].as_str().unwrap_or("").to_owned(),
            l["links"][1]["neighbour"]["mac"]
                .as_str()
                .unwrap_or("")
                .to_owned(),
        )
    };
    assert!(common::wait_until(10, || neighbour(&lab).0 == "up"));
    let (_, f2_mac) = neighbour(&lab);
    let out = lab.exec("spy", 20, &["python3", "-c", HELLO_PY, "2", "2", "10"]);
    assert!(out.status.success(), "{}", common::text(&out));
    assert_eq!(neighbour(&lab), ("up".to_owned(), f2_mac.clone()));
    let d = lab.drops("f1");
    assert!(
        d.get("drop.fwd.hello_mac_moved").copied().unwrap_or(0) >= 10,
        "{d:?}"
    );
    // Data for hb still crosses f2.
    let rx = spawn(&lab, "hb", 6, args(&["recv", "5", "after"]));
    std::thread::sleep(Duration::from_millis(1000));
    let out = lab.exec(
        "ha",
        20,
        &["python3", "-c", GFF_PY, "send", "0,1,3", "20", "after"],
    );
    assert!(out.status.success());
    assert!(
        rx.join().unwrap().starts_with("20 "),
        "f2 still gets f1's frames"
    );
    lab.down();
}
