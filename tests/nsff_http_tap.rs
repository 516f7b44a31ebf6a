//! HTTP conformance at a running nSFF (issue 12), over real TAPs, on
//! `common::chain`'s lab: a kernel client talks to nSFF1 (10.0.1.1) with
//! curl and with raw bytes from python3.
//!
//! - One bad chunked request (an overflowing size, a non-hex size, data
//!   without its CRLF) gets one `400`, one `nsff.bad_request`, and the
//!   connection closes.
//! - Two `Host` lines are `400` (RFC 9112 §3.2), counted
//!   `nsff.duplicate_host`.
//! - An absolute-form request on the proxy port (3128) whose authority names
//!   the remote `www.example2.com` while its `Host` names nothing served
//!   anywhere reaches sf2: the authority replaces `Host` end to end (RFC 9112
//!   §3.2.2), so the far nSFF routes it by the authority too.
//!
//! Needs root and python3 (skips without root).

mod common;

use serde_json::Value;

use common::chain::{counter, lab_file, wait_ok, Opts};
use common::{lab_name, root_or_skip, Lab};

/// `raw.py HEX`: connect to nSFF1:80, send the bytes, read until the
/// server closes (or 5 s pass); print `{"closed": bool, "data": text}`.
const RAW_PY: &str = r#"
import json, socket, sys, time
s = socket.create_connection(("10.0.1.1", 80), timeout=5)
s.sendall(bytes.fromhex(sys.argv[1]))
data, closed, end = b"", False, time.time() + 5
while time.time() < end:
    try:
        b = s.recv(65536)
    except socket.timeout:
        break
    if not b:
        closed = True
        break
    data += b
print(json.dumps({"closed": closed, "data": data.decode("latin-1")}))
"#;

fn raw(lab: &Lab, bytes: &[u8]) -> (bool, String) {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let out = lab.exec("client", 20, &["python3", "-c", RAW_PY, &hex]);
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("raw.py: {e}: {}", common::text(&out)));
    (
        v["closed"].as_bool().unwrap_or(false),
        v["data"].as_str().unwrap_or("").to_owned(),
    )
}

#[test]
fn bad_chunks_duplicate_hosts_and_absolute_form_targets() {
    if !root_or_skip() {
        return;
    }
    let name = lab_name('h', 't');
    let lab = Lab::up(&name, &lab_file(&name, &Opts::default()));
    wait_ok(&lab, 30, "www.example2.com", "sf2");

    // One bad chunked request: one answer, one count, closed.
    let head = b"POST / HTTP/1.1\r\nHost: www.example2.com\r\nTransfer-Encoding: chunked\r\n\r\n";
    for body in [
        &b"FFFFFFFFFFFFFFFFFFFFFFFF\r\n"[..],
        b"zz\r\n",
        b"3\r\nabcXY",
    ] {
        let before = counter(&lab, "nsff1", "nsff.bad_request");
        let mut req = head.to_vec();
        req.extend_from_slice(body);
        let (closed, data) = raw(&lab, &req);
        let shown = String::from_utf8_lossy(body);
        assert_eq!(data.matches("HTTP/1.1 ").count(), 1, "{shown:?}: {data}");
        assert!(data.starts_with("HTTP/1.1 400 "), "{shown:?}: {data}");
        assert!(closed, "{shown:?}: the connection stays open");
        assert_eq!(
            counter(&lab, "nsff1", "nsff.bad_request") - before,
            1,
            "{shown:?}"
        );
    }

    // Two Host lines: 400 (RFC 9112 §3.2).
    let (closed, data) = raw(
        &lab,
        b"GET / HTTP/1.1\r\nHost: www.example2.com\r\nHost: www.example2.com\r\n\r\n",
    );
    assert!(data.starts_with("HTTP/1.1 400 "), "{data}");
    assert!(data.contains("more than one Host"), "{data}");
    assert!(closed);
    assert_eq!(counter(&lab, "nsff1", "nsff.duplicate_host"), 1);

    // Absolute form: the authority wins over Host, at the egress too.
    let out = lab.exec(
        "client",
        30,
        &[
            "curl",
            "-sS",
            "-i",
            "-m",
            "20",
            "-x",
            "http://10.0.1.1:3128",
            "-H",
            "Host: nowhere.example",
            "http://www.example2.com/",
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.starts_with("HTTP/1.1 200 "), "{text}");
    assert!(
        text.to_ascii_lowercase().contains("x-instance: sf2"),
        "{text}"
    );
    assert_eq!(counter(&lab, "nsff2", "nsff.egress_no_sf"), 0);
    lab.down();
}
