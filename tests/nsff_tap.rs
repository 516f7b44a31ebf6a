//! The nsff role over real TAPs: `curl` in a kernel namespace asks nSFF1 for
//! `www.example2.com` by name; nSFF1 resolves it at the NR and carries the
//! request over two fwd nodes to nSFF2, whose SF (a host-role node, instance
//! `sf2`) answers. An unknown name gets 502. Needs root (skips otherwise).
//!
//! ```text
//!   client (kernel) 10.0.1.10 ── cli ── nsff1 ── n1 ── f1 ── fab ── f2 ── n2 ── nsff2 ── sfs ── sf2
//!                                       10.0.1.1       │                          10.0.2.1     10.0.2.10
//!                                                      nrs ── nr
//! ```
//!
//! Links: f1 → NR 0, NR → f1 1, f1 → nSFF1 2, nSFF1 → f1 3, f2 → nSFF2 4,
//! nSFF2 → f2 5, f1 → f2 10, f2 → f1 11. The lab is `common::chain`'s.

mod common;

use common::chain::{curl, lab_file, Opts};
use common::{lab_name, root_or_skip, wait_until, Lab};

#[test]
fn curl_by_name_through_the_chain() {
    if !root_or_skip() {
        return;
    }
    let name = lab_name('n', 's');
    let lab = Lab::up(&name, &lab_file(&name, &Opts::default()));
    let mut last = None;
    let ok = wait_until(15, || {
        let r = curl(&lab, "www.example2.com", "/");
        let ok = r.status == 200;
        last = Some(r);
        ok
    });
    assert!(ok, "no 200 through the chain: {last:?}");
    let r = last.unwrap();
    assert_eq!(r.instance().as_deref(), Some("sf2"), "{r:?}");
    // A larger body, every byte checked (the SF's byte k is k % 251).
    let r = curl(&lab, "www.example2.com", "/bytes/1000000");
    assert_eq!(r.status, 200, "{}", r.head);
    assert_eq!(r.body.len(), 1_000_000);
    assert!(r
        .body
        .iter()
        .enumerate()
        .all(|(k, &b)| b == (k % 251) as u8));
    // Explicit proxy: the absolute-form target names the service.
    let out = lab.exec(
        "client",
        20,
        &[
            "curl",
            "-sS",
            "-i",
            "-m",
            "10",
            "-x",
            "http://10.0.1.1:3128",
            "http://www.example2.com/",
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(
        text.to_ascii_lowercase().contains("x-instance: sf2"),
        "{text}"
    );
    // Unknown name.
    let r = curl(&lab, "www.nowhere.example", "/");
    assert_eq!(r.status, 502, "{r:?}");
    assert!(r.body_text().contains("unknown service name"), "{r:?}");
    let v = lab.ctl("nsff1", &["txns"]);
    assert!(v.get("live").is_some(), "{v}");
    lab.down();
}

/// Hold `N` keep-alive connections to nSFF1 (one request each), let them
/// sit, send a second request on each, then wait past the idle limit: the
/// answers and the closes it prints are what the test checks.
const HOLD: &str = r#"
import socket, sys, time
n, idle, limit = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
req = b"GET /bytes/16 HTTP/1.1\r\nHost: www.example2.com\r\n\r\n"
def ask(s):
    s.sendall(req)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(4096)
        if not chunk:
            return "eof"
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    length = [int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length")][0]
    while len(body) < length:
        body += s.recv(4096)
    return head.split(b" ")[1].decode()
conns = [socket.create_connection(("10.0.1.1", 80), timeout=10) for _ in range(n)]
first = [ask(s) for s in conns]
time.sleep(idle)
second = [ask(s) for s in conns]
time.sleep(limit + 2)
closed = 0
for s in conns:
    s.settimeout(5)
    try:
        closed += s.recv(1) == b""
    except (ConnectionResetError, socket.timeout):
        closed += 1
print(first.count("200"), second.count("200"), closed)
"#;

/// Idle keep-alive connections are left alone until they have news: a
/// request after a pause is served on the same connection, and the idle
/// limit still closes them.
#[test]
fn held_keep_alive_connections_are_served_and_timed_out() {
    if !root_or_skip() {
        return;
    }
    let name = lab_name('n', 'k');
    let opts = Opts {
        nsff1: "client_idle_timeout_s = 3\n",
        ..Opts::default()
    };
    let lab = Lab::up(&name, &lab_file(&name, &opts));
    let ok = wait_until(15, || curl(&lab, "www.example2.com", "/").status == 200);
    assert!(ok, "no 200 through the chain");
    let out = lab.exec("client", 60, &["python3", "-c", HOLD, "50", "2", "3"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "50 50 50",
        "first answers, second answers, closed by the idle limit: {}",
        common::text(&out)
    );
    let stats = common::named(&lab.stats("nsff1"));
    assert_eq!(
        stats.get("nsff.clients_idle_closed"),
        Some(&50),
        "{stats:?}"
    );
    lab.down();
}
