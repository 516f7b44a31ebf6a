//! Keep-alives to SFs (RFC 8677 §5.3, "nSFF2 may maintain the TCP
//! connection through keep-alive messages") against a kernel SF: nSFF1
//! keeps its idle connection to `ka1` (python's HTTP/1.1 server, which
//! never times a connection out) alive with TCP keep-alives every second,
//! the kernel answers each one (tshark sees probes and their ACKs), the
//! next request reuses the connection, and once `ka1`'s link is cut the
//! unanswered keep-alives lose it. Needs root (skips otherwise).
//!
//! ```text
//!   client (kernel) 10.0.1.10 ─┬─ cli ── nsff1 ── ... (the chain lab, common::chain)
//!   ka1 (kernel)    10.0.1.20 ─┘         10.0.1.1: www.example.com → ka1:80
//! ```

mod common;

use common::chain::{counter, curl, lab_file, Opts, TempDir};
use common::{have, lab_name, root_or_skip, text, wait_until, Lab};

const NSFF1: &str = r#"sf_keepalive_s = 1
health_interval_ms = 0
[[node.config.sf]]
fqdn = "www.example.com"
addr = "10.0.1.20"
"#;

fn ka1_host(dir: &str) -> String {
    format!(
        r#"
[[host]]
name = "ka1"
commands = [
  "cd {dir} && exec /usr/bin/python3 -c 'import http.server as h; h.SimpleHTTPRequestHandler.protocol_version = \"HTTP/1.1\"; h.ThreadingHTTPServer((\"10.0.1.20\", 80), h.SimpleHTTPRequestHandler).serve_forever()'",
]
wait_tcp = ["10.0.1.20:80"]
[[host.iface]]
segment = "cli"
addrs = ["10.0.1.20/24"]
"#
    )
}

/// Keep-alive probes (from nSFF1) and their ACKs (from ka1) tshark sees
/// on ka1's interface in `secs` seconds.
fn keepalives(lab: &Lab, secs: u32) -> (usize, usize) {
    let duration = format!("duration:{secs}");
    let out = lab.exec(
        "ka1",
        secs + 20,
        &[
            "tshark",
            "-n",
            "-i",
            "eth0",
            "-a",
            &duration,
            "-f",
            "tcp port 80",
            "-Y",
            "tcp.analysis.keep_alive or tcp.analysis.keep_alive_ack",
            "-T",
            "fields",
            "-e",
            "ip.src",
        ],
    );
    let t = text(&out);
    assert!(out.status.success(), "tshark: {t}");
    let from = |a: &str| t.lines().filter(|l| l.trim() == a).count();
    (from("10.0.1.1"), from("10.0.1.20"))
}

#[test]
fn a_kernel_sf_answers_keepalives_and_its_connection_is_reused_until_lost() {
    if !root_or_skip() {
        return;
    }
    if !have("tshark") || !have("python3") {
        eprintln!("skipping: needs tshark and python3");
        return;
    }
    let name = lab_name('k', 'a');
    let dir = TempDir(std::env::temp_dir().join(format!("svcroute-{name}")));
    std::fs::create_dir_all(&dir.0).unwrap();
    std::fs::write(dir.0.join("index.html"), "ka1\n").unwrap();
    let opts = Opts {
        nsff1: NSFF1,
        extra: ka1_host(&dir.0.to_string_lossy()),
        ..Opts::default()
    };
    let lab = Lab::up(&name, &lab_file(&name, &opts));

    let r = curl(&lab, "www.example.com", "/");
    assert_eq!((r.status, r.body.as_slice()), (200, &b"ka1\n"[..]), "{r:?}");
    assert_eq!(counter(&lab, "nsff1", "nsff.sf_connections"), 1);

    // Idle: nSFF1 probes every second, the kernel ACKs each probe.
    let (probes, acks) = keepalives(&lab, 5);
    assert!(
        probes >= 2 && acks >= 2,
        "{probes} keep-alives, {acks} ACKs in 5 s"
    );

    // The next request rides the kept connection.
    let r = curl(&lab, "www.example.com", "/");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(counter(&lab, "nsff1", "nsff.sf_reused"), 1);
    assert_eq!(counter(&lab, "nsff1", "nsff.sf_connections"), 1);

    // ka1's link cut: three unanswered keep-alives lose the connection.
    lab.verb("link", &["ka1:eth0", "down"]);
    assert!(
        wait_until(20, || counter(&lab, "nsff1", "nsff.sf_idle_lost") == 1),
        "the idle connection to a cut-off SF was not lost: {:?}",
        lab.stats("nsff1")
    );
    assert_eq!(counter(&lab, "nsff1", "nsff.sf_idle_expired"), 0);
    lab.down();
}
