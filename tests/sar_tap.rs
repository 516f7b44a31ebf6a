//! The `sar` router over real TAP devices: two SAR nodes between two kernel
//! namespaces. Kernel ping, traceroute and TCP (curl against python's
//! http.server) cross both SARs; NDP is spoken on both sides, the hop limit
//! is decremented, and the kernel sees the SARs' ICMPv6 errors. Needs root
//! (skips otherwise).
//!
//! ```text
//!   ha (kernel)          s1 (sar)                  s2 (sar)             hb (kernel)
//!   fd00:a::2 ── a ── fd00:a::1 | fd00:ab::1 ── l ── fd00:ab::2 | fd00:b::1 ── b ── fd00:b::2
//!   gw fd00:a::1                 IGP (UDP 7470, HMAC)                         gw fd00:b::1
//!                                                                             python3 -m http.server
//! ```

mod common;

use serde_json::Value;

use common::{have, named, root_or_skip, text, wait_until, Lab};

const KEY: &str = "00112233445566778899aabbccddeeff";

/// An ICMPv6 echo through the kernel's raw socket with a chosen hop limit:
/// prints `reply <from>` or `error <type> <code> <from>` (an error quoting
/// our probe), or exits 1 after three tries.
const PROBE: &str = r#"
import select, socket, struct, sys, time
dst, hops = sys.argv[1], int(sys.argv[2])
want = socket.inet_pton(socket.AF_INET6, dst)
s = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_UNICAST_HOPS, hops)
ident = 0x5352
for seq in range(3):
    s.sendto(struct.pack('!BBHHH', 128, 0, 0, ident, seq) + b'svcroute', (dst, 0))
    end = time.time() + 1.0
    while True:
        left = end - time.time()
        if left <= 0 or not select.select([s], [], [], left)[0]:
            break
        data, addr = s.recvfrom(4096)
        t, c = data[0], data[1]
        if t == 129 and struct.unpack('!H', data[4:6])[0] == ident:
            print('reply', addr[0].split('%')[0]); sys.exit(0)
        if t < 128 and data[8 + 24:8 + 40] == want:
            print('error', t, c, addr[0].split('%')[0]); sys.exit(0)
print('timeout'); sys.exit(1)
"#;

fn lab_toml(name: &str, www: &str) -> String {
    format!(
        r#"
name = "{name}"

[[segment]]
name = "a"
[[segment]]
name = "l"
[[segment]]
name = "b"

[[node]]
name = "s1"
role = "sar"
[[node.port]]
segment = "a"
addrs = ["fd00:a::1/64"]
[[node.port]]
segment = "l"
addrs = ["fd00:ab::1/64"]
[node.config]
router_id = 1
igp_key = {{ key_id = 1, secret = "{KEY}" }}
[[node.config.neighbors]]
port = 1
addr = "fd00:ab::2"
cost = 10

[[node]]
name = "s2"
role = "sar"
[[node.port]]
segment = "l"
addrs = ["fd00:ab::2/64"]
[[node.port]]
segment = "b"
addrs = ["fd00:b::1/64"]
[node.config]
router_id = 2
igp_key = {{ key_id = 1, secret = "{KEY}" }}
sar_ports = [0]
[[node.config.neighbors]]
port = 0
addr = "fd00:ab::1"
cost = 10

[[host]]
name = "ha"
[[host.iface]]
segment = "a"
addrs = ["fd00:a::2/64"]
gateways = ["fd00:a::1"]

[[host]]
name = "hb"
commands = ["mkdir -p {www} && head -c 3000000 /dev/zero > {www}/blob && cd {www} && exec python3 -m http.server 8080 --bind fd00:b::2"]
wait_tcp = ["[fd00:b::2]:8080"]
[[host.iface]]
segment = "b"
addrs = ["fd00:b::2/64"]
gateways = ["fd00:b::1"]
"#
    )
}

/// Run the probe from `host` toward `dst` with hop limit `hops`.
fn probe(lab: &Lab, host: &str, dst: &str, hops: u8) -> String {
    let out = lab.exec(host, 15, &["python3", "-c", PROBE, dst, &hops.to_string()]);
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn counter(lab: &Lab, node: &str, name: &str) -> u64 {
    named(&lab.stats(node)).get(name).copied().unwrap_or(0)
}

#[test]
fn kernel_ping_traceroute_and_tcp_cross_two_sars() {
    if !root_or_skip() {
        return;
    }
    let name = common::lab_name('s', 'a');
    let www = format!("/tmp/svcroute-{name}-www");
    let lab = Lab::up(&name, &lab_toml(&name, &www));

    // The IGP comes up and each SAR learns the other's prefixes.
    let learnt = |node: &str, prefix: &str| {
        let v = lab.ctl(node, &["routes"]);
        v["table"].as_array().is_some_and(|t| {
            t.iter()
                .any(|r| r["prefix"] == prefix && r["origin"] == "igp")
        })
    };
    assert!(
        wait_until(20, || learnt("s1", "fd00:b::/64")
            && learnt("s2", "fd00:a::/64")),
        "no IGP routes: s1 {} / s2 {}",
        lab.ctl("s1", &["routes"]),
        lab.ctl("s2", &["routes"])
    );
    let n = lab.ctl("s1", &["neighbors"]);
    assert_eq!(n[0]["state"], "full", "{n}");
    assert_eq!(n[0]["router_id"], 2, "{n}");
    // Both LSDBs settle to the same content.
    assert!(
        wait_until(10, || lab.ctl("s1", &["lsdb"])["digest"]
            == lab.ctl("s2", &["lsdb"])["digest"]),
        "LSDBs differ: {} / {}",
        lab.ctl("s1", &["lsdb"]),
        lab.ctl("s2", &["lsdb"])
    );
    for cmd in ["fib", "instances", "help"] {
        lab.ctl("s1", &[cmd]);
    }

    // Kernel ping across both SARs, both ways (NDP on every link).
    let p = probe(&lab, "ha", "fd00:b::2", 64);
    assert_eq!(p, "reply fd00:b::2");
    let p = probe(&lab, "hb", "fd00:a::2", 64);
    assert_eq!(p, "reply fd00:a::2");
    if have("ping") {
        let out = lab.exec(
            "ha",
            20,
            &["ping", "-6", "-c", "3", "-i", "0.2", "-W", "2", "fd00:b::2"],
        );
        assert!(out.status.success(), "{}", text(&out));
        assert!(text(&out).contains("3 received"), "{}", text(&out));
    }
    // The SARs' own addresses answer too, the far ones through the SAR's
    // routed replies (s2 answers fd00:b::1 from two hops away).
    for dst in ["fd00:a::1", "fd00:ab::1", "fd00:ab::2", "fd00:b::1"] {
        assert_eq!(probe(&lab, "ha", dst, 64), format!("reply {dst}"));
    }

    // Hop limit 1 dies at s1, 2 at s2: Time Exceeded from the port the
    // packet came in on.
    assert_eq!(probe(&lab, "ha", "fd00:b::2", 1), "error 3 0 fd00:a::1");
    assert_eq!(probe(&lab, "ha", "fd00:b::2", 2), "error 3 0 fd00:ab::2");
    assert_eq!(probe(&lab, "hb", "fd00:a::2", 2), "error 3 0 fd00:ab::1");
    // Nobody routes fd00:99::/64.
    assert_eq!(probe(&lab, "ha", "fd00:99::1", 64), "error 1 0 fd00:a::1");
    if have("ping") {
        let out = lab.exec(
            "ha",
            20,
            &["ping", "-6", "-c", "1", "-t", "1", "-W", "2", "fd00:b::2"],
        );
        assert!(
            text(&out).contains("Time exceeded"),
            "ping -t 1: {}",
            text(&out)
        );
    }
    if have("traceroute") {
        let out = lab.exec(
            "ha",
            30,
            &["traceroute", "-6", "-n", "-q", "1", "-w", "2", "fd00:b::2"],
        );
        let t = text(&out);
        let hops: Vec<&str> = t
            .lines()
            .skip(1)
            .filter_map(|l| l.split_whitespace().nth(1))
            .collect();
        assert_eq!(hops, ["fd00:a::1", "fd00:ab::2", "fd00:b::2"], "{t}");
    }

    // Kernel TCP across both SARs: a listing and 3 MB.
    let out = lab.exec(
        "ha",
        30,
        &[
            "curl",
            "-6",
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code} %{size_download}",
            "http://[fd00:b::2]:8080/blob",
        ],
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "200 3000000",
        "{}",
        text(&out)
    );
    let out = lab.exec(
        "ha",
        30,
        &["curl", "-6", "-s", "-i", "http://[fd00:b::2]:8080/"],
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("HTTP/1.0 200"),
        "{}",
        text(&out)
    );

    // What the SARs counted.
    for node in ["s1", "s2"] {
        assert!(counter(&lab, node, "sar.forwarded") > 2000, "{node}");
        assert!(counter(&lab, node, "sar.icmp_time_exceeded") >= 1, "{node}");
    }
    assert!(counter(&lab, "s1", "drop.sar.no_route") >= 1);
    assert!(counter(&lab, "s2", "sar.local_routed") >= 1);
    let drops: Vec<(String, u64)> = ["s1", "s2"]
        .iter()
        .flat_map(|n| lab.drops(n))
        .filter(|(k, _)| {
            // The probes' own drops, and the IGP's pacing of LSAs that
            // arrive within 500 ms of each other while adjacencies form
            // (real time decides whether that happens).
            !matches!(
                k.as_str(),
                "drop.sar.no_route"
                    | "drop.sar.hop_limit_exceeded"
                    | "drop.sar.igp_lsa_min_arrival"
            )
        })
        .collect();
    assert!(drops.is_empty(), "unexpected drops: {drops:?}");
    let ports: Value = lab.ctl("s1", &["ports"]);
    assert_eq!(ports.as_array().map(Vec::len), Some(2));

    lab.assert_node_alive("s1");
    lab.assert_node_alive("s2");
    lab.down();
    let _ = std::fs::remove_dir_all(&www);
}
