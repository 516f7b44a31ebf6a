//! The nr role over a real TAP: a kernel namespace registers names through
//! the REST API with curl (201, collision → 409, `GET /names`), then a
//! python3 AF_PACKET script plays nSFF 1 and sends a GFF path request;
//! the path response it receives carries the serving nSFF and the forward
//! and reverse pathIDs of the configured fabric. Needs root (skips otherwise).
//!
//! ```text
//!   client (kernel) 10.0.0.10 fd00::10 ─┬─ lan0 (bridge)
//!   nr     (node)   10.0.0.1  fd00::1  ─┘
//!   logical fabric (config only): NR (in 0, out 1) and nSFF 1 (in 2, out 3)
//!   on f1; nSFF 2 (in 4, out 5) on f2; f1 → f2 link 10, f2 → f1 link 11.
//! ```

mod common;

use std::collections::BTreeMap;

use serde_json::Value;
use svcroute_stack::wire::gff::{MessageType, PathId};
use svcroute_stack::wire::nr::{hash_fqdn, Repr};

use common::{root_or_skip, Lab};

fn lab_file(name: &str) -> String {
    format!(
        r#"name = "{name}"
keys = "none"  # unkeyed on purpose: this test speaks to (or as) unkeyed nodes

[[segment]]
name = "lan0"

[[node]]
name = "nr"
role = "nr"
[[node.port]]
segment = "lan0"
addrs = ["10.0.0.1/24", "fd00::1/64"]
[node.config]
max_names = 3
[node.config.self_attach]
at = "f1"
link_in = 0
link_out = 1
[[node.config.attach]]
nsff = 1
at = "f1"
link_in = 2
link_out = 3
[[node.config.attach]]
nsff = 2
at = "f2"
link_in = 4
link_out = 5
[[node.config.link]]
from = "f1"
to = "f2"
id = 10
[[node.config.link]]
from = "f2"
to = "f1"
id = 11

[[host]]
name = "client"
[[host.iface]]
segment = "lan0"
addrs = ["10.0.0.10/24", "fd00::10/64"]
"#
    )
}

/// `curl` from the client: (status, body).
fn curl(lab: &Lab, args: &[&str]) -> (u16, String) {
    let mut cmd = vec!["curl", "-gsS", "-m", "10", "-w", "\n%{http_code}"];
    cmd.extend_from_slice(args);
    let out = lab.exec("client", 20, &cmd);
    assert!(out.status.success(), "curl {args:?} failed");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').expect("status line");
    (code.trim().parse().expect("status"), body.to_owned())
}

fn register(lab: &Lab, base: &str, fqdn: &str, nsff: u8) -> (u16, String) {
    let body = format!("{{\"fqdn\":\"{fqdn}\",\"nsff_id\":{nsff}}}");
    curl(
        lab,
        &[
            "-X",
            "POST",
            "-H",
            "Content-Type: application/json",
            "-d",
            &body,
            &format!("{base}/register"),
        ],
    )
}

/// Plays nSFF 1 on eth0: sends a GFF path request for `hash` over pathID
/// {3, 0} (nSFF1 → f1 → NR) until a GFF frame with its own bit 2 arrives;
/// prints that frame's GFF type and payload in hex.
const NSFF: &str = r#"
import socket, struct, sys, time
hash_ = int(sys.argv[1])
def pid(bits):
    b = bytearray(32)
    for i in bits:
        b[i // 8] |= 0x80 >> (i % 8)
    return bytes(b)
def bit(p, i):
    return p[i // 8] & (0x80 >> (i % 8)) != 0
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x86dd))
s.bind(("eth0", 0))
mac = bytes.fromhex(open("/sys/class/net/eth0/address").read().strip().replace(":", ""))
path = pid([3, 0])
gff = struct.pack("!H", (256 << 4) | 4) + path + struct.pack("!HB", hash_, 1)
ip = struct.pack("!IHBB", 0x60000000, len(gff), 253, 64) + path
frame = b"\xff" * 6 + mac + b"\x86\xdd" + ip + gff
s.settimeout(0.2)
end = time.time() + 10
while time.time() < end:
    s.send(frame)
    stop = time.time() + 0.5
    while time.time() < stop:
        try:
            f = s.recv(4096)
        except socket.timeout:
            break
        if len(f) < 88 or f[12:14] != b"\x86\xdd" or f[20] != 253:
            continue
        plen = struct.unpack("!H", f[18:20])[0]
        g = f[54:54 + plen]
        if not bit(g[2:34], 2):
            continue
        t = struct.unpack("!H", g[0:2])[0] & 0xf
        if t == 6 and g[34:37] == b"\x00\x01\xff":
            continue  # the NR's start-up ALL NODES
        print(t, g[2:34].hex(), g[34:].hex())
        sys.exit(0)
sys.exit("no answer")
"#;

fn path(links: &[u8]) -> PathId {
    links.iter().fold(PathId::ZERO, |p, &l| p.with(l))
}

#[test]
fn rest_registration_and_a_gff_path_request_from_a_kernel_namespace() {
    if !root_or_skip() {
        return;
    }
    let name = common::lab_name('r', 'a');
    let lab = Lab::up(&name, &lab_file(&name));

    // REST over both families.
    let (status, body) = register(&lab, "http://10.0.0.1:8080", "www.example2.com", 2);
    assert_eq!(status, 201, "{body}");
    let (status, _) = register(&lab, "http://[fd00::1]:8080", "www.example2.com", 2);
    assert_eq!(status, 200, "registering again is a refresh");
    // A name with the same 16-bit hash: refused with 409.
    let mut seen = BTreeMap::new();
    let (a, b) = (0..)
        .find_map(|i| {
            let n = format!("n{i}.example");
            seen.insert(hash_fqdn(&n), n.clone()).map(|old| (old, n))
        })
        .unwrap();
    assert_eq!(register(&lab, "http://10.0.0.1:8080", &a, 1).0, 201);
    let (status, body) = register(&lab, "http://10.0.0.1:8080", &b, 1);
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("nr.hash_collision"), "{body}");
    // Bad input and the table cap (max_names = 3).
    assert_eq!(register(&lab, "http://10.0.0.1:8080", "bad name", 1).0, 400);
    assert_eq!(
        register(&lab, "http://10.0.0.1:8080", "x.example", 255).0,
        400
    );
    assert_eq!(
        register(&lab, "http://10.0.0.1:8080", "x.example", 1).0,
        201
    );
    assert_eq!(
        register(&lab, "http://10.0.0.1:8080", "y.example", 1).0,
        507
    );
    let (status, body) = curl(&lab, &["http://10.0.0.1:8080/names"]);
    assert_eq!(status, 200);
    let names: Value = serde_json::from_str(&body).expect("JSON");
    let names = names.as_array().expect("array");
    assert_eq!(names.len(), 3, "{body}");
    assert!(names
        .iter()
        .any(|n| n["fqdn"] == "www.example2.com" && n["nsff_ids"] == serde_json::json!([2])));
    // Delete one and the table shrinks.
    let (status, _) = curl(
        &lab,
        &["-X", "DELETE", "http://10.0.0.1:8080/register/x.example/1"],
    );
    assert_eq!(status, 204);
    let v = lab.ctl("nr", &["names"]);
    assert_eq!(v["names"].as_array().map(Vec::len), Some(2), "{v}");

    // A GFF path request from the kernel side.
    let hash = hash_fqdn("www.example2.com");
    let out = lab.exec("client", 20, &["python3", "-c", NSFF, &hash.to_string()]);
    assert!(out.status.success(), "nSFF script failed");
    let line = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let parts: Vec<&str> = line.split(' ').collect();
    assert_eq!(parts.len(), 3, "{line}");
    assert_eq!(parts[0], "5", "a path response: {line}");
    assert_eq!(parts[1], path(&[1, 2]).to_string(), "NR → f1 → nSFF1");
    let payload = hex(parts[2]);
    let Ok(Repr::PathResponse(r)) = Repr::parse(MessageType::PathResponse, &payload) else {
        panic!("not a path response: {line}");
    };
    assert_eq!(r.hash, hash);
    let res = r.resolution.expect("found");
    assert_eq!(res.serving.value(), 2);
    assert_eq!(res.forward, path(&[3, 10, 4]));
    assert_eq!(r.tlvs.reverse_path(), Some(path(&[5, 11, 2])));

    let d = lab.ctl("nr", &["discovery"]);
    assert_eq!(d["discovery"][0]["requester"], 1, "{d}");
    assert_eq!(d["discovery"][0]["serving"], 2, "{d}");
    let stats = lab.stats("nr");
    assert_eq!(stats["named"]["nr.requests"], 1, "{stats}");
    assert_eq!(stats["named"]["drop.nr.hash_collision"], 1, "{stats}");
    assert_eq!(stats["named"]["drop.nr.names_full"], 1, "{stats}");
    lab.down();
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex"))
        .collect()
}

/// `send.py TYPE BITS PAYLOAD_HEX`: one GFF frame of TYPE over the pathID
/// with BITS (comma-separated) from eth0, broadcast.
const SEND_GFF: &str = r#"
import socket, struct, sys
t, bits, payload = int(sys.argv[1]), [int(b) for b in sys.argv[2].split(",")], bytes.fromhex(sys.argv[3])
p = bytearray(32)
for i in bits:
    p[i // 8] |= 0x80 >> (i % 8)
p = bytes(p)
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind(("eth0", 0))
mac = bytes.fromhex(open("/sys/class/net/eth0/address").read().strip().replace(":", ""))
gff = struct.pack("!H", (256 << 4) | t) + p + payload
ip = struct.pack("!IHBB", 0x60000000, len(gff), 253, 64) + p
s.send(b"\xff" * 6 + mac + b"\x86\xdd" + ip + gff)
"#;

/// Whether the NR's fabric model has link `id` up.
fn link_up(lab: &Lab, id: u64) -> Option<bool> {
    let v = lab.ctl("nr", &["links"]);
    v["links"]
        .as_array()?
        .iter()
        .find(|l| l["id"].as_u64() == Some(id))
        .and_then(|l| l["up"].as_bool())
}

/// Issue 12: one forged "link down" (any host on the NR's segment can send
/// one to an unkeyed NR) no longer keeps the link down for good: nobody
/// repeats it (switches repeat a down link's events every
/// `link_refresh_ms`), so it expires after `link_down_ttl_ms`.
#[test]
fn a_forged_link_down_expires_when_no_switch_repeats_it() {
    if !root_or_skip() {
        return;
    }
    let name = common::lab_name('r', 'f');
    let toml = lab_file(&name).replace(
        "max_names = 3\n",
        "max_names = 3\nlink_down_ttl_ms = 2000\n",
    );
    let lab = Lab::up(&name, &toml);
    assert!(common::wait_until(10, || link_up(&lab, 10) == Some(true)));
    let out = lab.exec(
        "client",
        10,
        &["python3", "-c", SEND_GFF, "7", "3,0", "0a00"],
    );
    assert!(out.status.success(), "{}", common::text(&out));
    assert!(
        common::wait_until(5, || link_up(&lab, 10) == Some(false)),
        "the forged event took the link down"
    );
    assert!(
        common::wait_until(10, || link_up(&lab, 10) == Some(true)),
        "still down: {}",
        lab.ctl("nr", &["links"])
    );
    let s = lab.stats("nr");
    assert_eq!(s["named"]["nr.link_down_expired"], 1, "{s:#}");
    lab.down();
}
