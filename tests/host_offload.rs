//! A host node on a TAP opened with virtio-net offloads: the kernel hands it
//! TCP super-frames with partial checksums, which the node must complete
//! before smoltcp checks them. Bulk data in both directions arrives whole
//! and byte-exact over both families. Needs root.

mod common;

use common::{lab_name, root_or_skip, Lab};

fn lab_file(name: &str) -> String {
    format!(
        r#"
name = "{name}"
[[segment]]
name = "lan0"
[[node]]
name = "h"
role = "host"
[[node.port]]
segment = "lan0"
addrs = ["10.0.0.2/24", "fd00::2/64"]
offload = true
[node.config]
tcp_rx_buffer = 1048576
max_body_bytes = 33554432
[[host]]
name = "cli"
[[host.iface]]
segment = "lan0"
addrs = ["10.0.0.10/24", "fd00::10/64"]
"#
    )
}

/// Send `n` bytes of a pattern to the discard port, then POST a body to
/// /echo and compare what comes back.
const CLIENT: &str = r#"
import socket, sys, hashlib, http.client
dst, n = sys.argv[1], int(sys.argv[2])
fam = socket.AF_INET6 if ":" in dst else socket.AF_INET
s = socket.create_connection((dst, 9), timeout=20)
chunk = bytes(range(256)) * 4096          # 1 MiB
sent = 0
while sent < n:
    s.sendall(chunk[: min(len(chunk), n - sent)])
    sent += min(len(chunk), n - sent)
s.shutdown(socket.SHUT_WR)
s.recv(1)                                   # wait for the node's FIN
s.close()
body = hashlib.sha256(b"x").digest() * 65536  # 2 MiB
c = http.client.HTTPConnection(dst, 80, timeout=20)
c.request("POST", "/echo", body)
r = c.getresponse()
back = r.read()
assert r.status == 200 and back == body, (r.status, len(back))
print(sent)
"#;

#[test]
fn bulk_tcp_through_an_offload_tap_arrives_byte_exact() {
    if !root_or_skip() {
        return;
    }
    let name = lab_name('f', 'a');
    let lab = Lab::up(&name, &lab_file(&name));
    let ports = lab.ctl("h", &["ports"]);
    assert_eq!(ports[0]["mtu"], 1500, "{ports}");
    let mut expect = 0u64;
    for dst in ["10.0.0.2", "fd00::2"] {
        let n = 64 << 20;
        let out = lab.exec("cli", 60, &["python3", "-c", CLIENT, dst, &n.to_string()]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{dst}: {text}");
        assert_eq!(text.trim(), n.to_string());
        expect += n;
        let stats = lab.stats("h");
        assert_eq!(stats["named"]["discard.bytes"], expect, "{stats:#}");
    }
    let stats = lab.stats("h");
    // Super-frames really arrived: far fewer frames than 1500-byte segments.
    let frames = stats["rx_frames"].as_u64().unwrap();
    assert!(
        frames < expect / 1500 / 2,
        "no offload? {frames} frames for {expect} bytes"
    );
    let drops: Vec<_> = stats["named"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| k.starts_with("drop."))
        .collect();
    assert!(drops.is_empty(), "{drops:?}");
    lab.down();
}
