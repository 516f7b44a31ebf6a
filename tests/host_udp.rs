//! The host's UDP echo over a real TAP: a kernel client (python's socket
//! module) gets every datagram back over IPv4 and IPv6, including ones the
//! node must fragment (IPv4); a datagram too big to echo whole is dropped and
//! counted (IPv4: reassembled, then refused; IPv6: its fragments are refused,
//! smoltcp cannot reassemble them), and echo goes on. Needs root.

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
[[host]]
name = "cli"
[[host.iface]]
segment = "lan0"
addrs = ["10.0.0.10/24", "fd00::10/64"]
"#
    )
}

const CLIENT: &str = r#"
import socket, sys
fam = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
s = socket.socket(fam, socket.SOCK_DGRAM)
s.settimeout(3)
got = 0
# IPv4: up to 1964 bytes, past the MTU, so the node reassembles the request
# and fragments its echo. IPv6: up to 1372 bytes (fragments are refused).
step = 10 if fam == socket.AF_INET else 7
for i in range(50):
    msg = (b"%04d" % i) * (1 + i * step)
    for attempt in range(3):
        s.sendto(msg, (sys.argv[1], 7))
        try:
            data, _ = s.recvfrom(4096)
        except socket.timeout:
            continue
        assert data == msg, (i, len(data), len(msg))
        got += 1
        break
# Too big for the echo's 2 KiB buffer: dropped, counted, no answer.
s.sendto(b"x" * 3000, (sys.argv[1], 7))
s.settimeout(0.5)
try:
    s.recvfrom(4096)
    print("unexpected echo of the big datagram")
    sys.exit(1)
except socket.timeout:
    pass
print(got)
"#;

#[test]
fn udp_echo_over_ipv4_and_ipv6() {
    if !root_or_skip() {
        return;
    }
    let name = lab_name('u', 'a');
    let lab = Lab::up(&name, &lab_file(&name));
    for dst in ["10.0.0.2", "fd00::2"] {
        let out = lab.exec("cli", 30, &["python3", "-c", CLIENT, dst]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{dst}: {text}");
        assert_eq!(text.trim(), "50", "{dst}: every datagram echoed");
    }
    let s = lab.stats("h");
    assert_eq!(s["named"]["drop.udp_echo_too_big"], 1, "{s:#}");
    // 3008 bytes of UDP in 1448-byte fragments.
    assert_eq!(s["named"]["drop.ipv6_fragment_unsupported"], 3, "{s:#}");
    assert!(
        s["named"]["udp_echo.datagrams"].as_u64().unwrap() >= 100,
        "{s:#}"
    );
    lab.down();
}
