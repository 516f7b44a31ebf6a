//! Transparent interception over real TAPs (RFC 8677 §4/§5: the nSFF
//! terminates HTTP "transparent on 80/443"). The kernel client's default
//! routes go via nSFF1, which intercepts `fd00:99::/32` and `10.99.0.0/16`
//! (`transparent = [...]`). `curl --resolve www.example2.com:80:[fd00:99::7]`
//! — an address nobody owns — is answered through the chain by the SF
//! behind nSFF2, and curl's socket really talked to fd00:99::7
//! (`%{remote_ip}`); the same over IPv4 (10.99.0.7), for HTTPS by SNI
//! (curl verifies the SF's certificate), and for a name served by an SF
//! local to nSFF1. What is not intercepted is dropped and counted: another
//! port of an intercepted address (8081, and the explicit proxy port
//! 3128), a destination outside the prefixes, a ping to an intercepted
//! address, and ARP for a neighbour's address (nSFF1 claims no address
//! but its own). Needs root, `openssl`, `curl`, `ping` and
//! `/usr/bin/python3` (skips otherwise).
//!
//! ```text
//!   client (kernel) 10.0.1.10, fd00:1::10 ── cli ── nsff1 ── n1 ── f1 ── fab ── f2 ── n2 ── nsff2 ── sfs ── tls2 10.0.2.20
//!   default via 10.0.1.1, fd00:1::1          │   10.0.1.1, fd00:1::1 │                            10.0.2.1    (www.example2.com)
//!                             tls1 10.0.1.20 ┘  (transparent)        nrs ── nr
//!                             (www.example.com, local at nSFF1)
//! ```
//!
//! The lab is `common::chain`'s with `Opts::tls` and `Opts::gateway`.

mod common;

use std::collections::BTreeMap;
use std::process::Output;

use common::chain::{counters, curl, lab_file, wait_names, Opts, TempDir};
use common::{delta, have, lab_name, root_or_skip, run_bounded, text, wait_until, Lab};

/// nSFF1's counters the test looks at.
const NSFF1: [&str; 8] = [
    "nsff.transparent_accepted",
    "nsff.clients_accepted",
    "nsff.tls_accepted",
    "drop.nsff.transparent_port",
    "drop.nsff.transparent_not_intercepted",
    "drop.nsff.transparent_not_tcp",
    "drop.nsff.transparent_arp_not_ours",
    "drop.nsff.transparent_ns_not_ours",
];

/// What curl got: body, the address its socket was connected to, status
/// (0: no HTTP answer), and its exit status.
#[derive(Debug)]
struct Got {
    body: Vec<u8>,
    remote_ip: String,
    status: u16,
    ok: bool,
    stderr: String,
}

/// `curl <url>` in the client namespace with `--resolve <resolve>` and
/// `extra` arguments.
fn fetch(lab: &Lab, url: &str, resolve: &str, extra: &[&str]) -> Got {
    let mut args = vec![
        "curl",
        "-sS",
        "-m",
        "20",
        "--connect-timeout",
        "3",
        "--resolve",
        resolve,
        "-w",
        "\n%{remote_ip} %{http_code}",
    ];
    args.extend_from_slice(extra);
    args.push(url);
    let out: Output = lab.exec("client", 30, &args);
    let raw = out.stdout;
    let cut = raw.iter().rposition(|&b| b == b'\n').unwrap_or(0);
    let tail = String::from_utf8_lossy(&raw[(cut + 1).min(raw.len())..]).into_owned();
    let (ip, code) = tail.trim().split_once(' ').unwrap_or(("", ""));
    Got {
        body: raw[..cut].to_vec(),
        remote_ip: ip.to_owned(),
        status: code.parse().unwrap_or(0),
        ok: out.status.success(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `name` at `addr` (a bracketed IPv6 literal or IPv4) over HTTP or HTTPS.
fn get(lab: &Lab, cert: &str, https: bool, name: &str, addr: &str, path: &str) -> Got {
    let (scheme, port) = if https { ("https", 443) } else { ("http", 80) };
    let url = format!("{scheme}://{name}{path}");
    let resolve = format!("{name}:{port}:{addr}");
    let cacert: &[&str] = if https { &["--cacert", cert] } else { &[] };
    fetch(lab, &url, &resolve, cacert)
}

#[track_caller]
fn assert_answer(g: &Got, remote_ip: &str, body: &[u8]) {
    assert!(g.ok, "curl failed: {g:?}");
    assert_eq!(g.status, 200, "{g:?}");
    assert_eq!(g.body, body, "{g:?}");
    // The client's socket was connected to the address it asked for.
    assert_eq!(g.remote_ip, remote_ip, "{g:?}");
}

/// A self-signed certificate for both names and the hosts' document roots.
fn make_dir(dir: &std::path::Path) {
    for host in ["tls1", "tls2"] {
        std::fs::create_dir_all(dir.join(host)).expect("creating the document roots");
        std::fs::write(dir.join(host).join("who.txt"), format!("{host}\n")).expect("who.txt");
    }
    let path = |f: &str| dir.join(f).to_str().expect("UTF-8 temp dir").to_owned();
    let (key, cert) = (path("key.pem"), path("cert.pem"));
    let out = run_bounded(
        30,
        "openssl",
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-keyout",
            &key,
            "-out",
            &cert,
            "-days",
            "2",
            "-nodes",
            "-subj",
            "/CN=www.example2.com",
            "-addext",
            "subjectAltName=DNS:www.example2.com,DNS:www.example.com",
        ],
    );
    assert!(out.status.success(), "openssl req: {}", text(&out));
}

#[test]
fn any_destination_on_80_and_443_is_served_by_name() {
    if !root_or_skip() {
        return;
    }
    if !["openssl", "curl", "ping"].iter().all(|c| have(c))
        || !std::path::Path::new("/usr/bin/python3").exists()
    {
        eprintln!("SKIP: needs openssl, curl, ping and /usr/bin/python3");
        return;
    }
    let dir = TempDir(std::env::temp_dir().join(format!("svcroute-tp-{}", std::process::id())));
    make_dir(&dir.0);
    let cert = dir.0.join("cert.pem").to_string_lossy().into_owned();
    let name = lab_name('n', 'x');
    let opts = Opts {
        tls: Some(dir.0.to_string_lossy().into_owned()),
        gateway: true,
        nsff1: "transparent = [\"fd00:99::/32\", \"10.99.0.0/16\"]\n",
        ..Opts::default()
    };
    let lab = Lab::up(&name, &lab_file(&name, &opts));
    wait_names(
        &lab,
        &[("www.example2.com", &[2]), ("www.example.com", &[1])],
    );
    let v = lab.ctl("nsff1", &["transparent"]);
    assert_eq!(v["enabled"], true, "{v}");
    assert_eq!(v["scope"], "fd00:99::/32, 10.99.0.0/16", "{v}");
    assert_eq!(v["ports"], serde_json::json!([80, 443]), "{v}");

    // HTTP to an address nobody owns, through the chain (the first request
    // may race the fabric coming up).
    let mut last = None;
    let ok = wait_until(20, || {
        let g = get(
            &lab,
            &cert,
            false,
            "www.example2.com",
            "[fd00:99::7]",
            "/who.txt",
        );
        let ok = g.status == 200;
        last = Some(g);
        ok
    });
    assert!(ok, "no answer by way of fd00:99::7: {last:?}");
    assert_answer(&last.unwrap(), "fd00:99::7", b"tls2\n");

    let before = counters(&lab, "nsff1", &NSFF1);
    let cases = [
        (
            false,
            "www.example2.com",
            "[fd00:99::7]",
            "fd00:99::7",
            "tls2\n",
        ),
        (
            false,
            "www.example2.com",
            "10.99.0.7",
            "10.99.0.7",
            "tls2\n",
        ),
        (
            true,
            "www.example2.com",
            "[fd00:99::7]",
            "fd00:99::7",
            "tls2\n",
        ),
        (true, "www.example2.com", "10.99.3.4", "10.99.3.4", "tls2\n"),
        // A name served by an SF local to nSFF1.
        (
            false,
            "www.example.com",
            "[fd00:99:1::80]",
            "fd00:99:1::80",
            "tls1\n",
        ),
        (true, "www.example.com", "10.99.0.7", "10.99.0.7", "tls1\n"),
    ];
    for (https, host, addr, ip, body) in cases {
        let g = get(&lab, &cert, https, host, addr, "/who.txt");
        assert_answer(&g, ip, body.as_bytes());
    }
    // nSFF1's own address is served as before, and is not "intercepted".
    let r = curl(&lab, "www.example2.com", "/who.txt");
    assert_eq!(
        (r.status, r.body.as_slice()),
        (200, &b"tls2\n"[..]),
        "{r:?}"
    );
    let d = delta(&before, &counters(&lab, "nsff1", &NSFF1));
    assert_eq!(d.get("nsff.transparent_accepted"), Some(&6), "{d:?}");
    assert_eq!(d.get("nsff.clients_accepted"), Some(&4), "{d:?}");
    assert_eq!(d.get("nsff.tls_accepted"), Some(&3), "{d:?}");

    // `ctl transparent` names the original destinations.
    let v = lab.ctl("nsff1", &["transparent"]);
    let recent: Vec<(String, bool)> = v["recent"]
        .as_array()
        .expect("recent is a list")
        .iter()
        .map(|e| {
            let dst = e["original_dst"].as_str().unwrap_or_default().to_owned();
            (dst, e["tls"] == true)
        })
        .collect();
    for want in [
        ("[fd00:99::7]:80", false),
        ("10.99.0.7:80", false),
        ("[fd00:99::7]:443", true),
        ("10.99.3.4:443", true),
        ("[fd00:99:1::80]:80", false),
    ] {
        assert!(
            recent.iter().any(|(d, t)| (d.as_str(), *t) == want),
            "{want:?} not in {v}"
        );
    }
    assert!(
        v["recent"]
            .as_array()
            .is_some_and(|a| a.iter().all(|e| e["client"]
                .as_str()
                .is_some_and(|c| c.starts_with("10.0.1.10:") || c.starts_with("[fd00:1::10]:")))),
        "{v}"
    );

    // Not intercepted: refused without an answer, each drop counted.
    let before = counters(&lab, "nsff1", &NSFF1);
    let refused = |url: &str, resolve: &str| {
        let g = fetch(&lab, url, resolve, &[]);
        assert!(!g.ok && g.status == 0, "{url} via {resolve}: {g:?}");
        assert!(
            g.stderr.contains("timed out") || g.stderr.contains("Failed to connect"),
            "{g:?}"
        );
    };
    refused(
        "http://www.example2.com:8081/",
        "www.example2.com:8081:[fd00:99::7]",
    );
    refused(
        "http://www.example2.com:3128/",
        "www.example2.com:3128:10.99.0.7",
    );
    refused("http://www.example2.com/", "www.example2.com:80:10.98.0.7");
    refused(
        "http://www.example2.com/",
        "www.example2.com:80:[fd00:98::7]",
    );
    for cmd in [
        &["ping", "-c", "1", "-W", "2", "fd00:99::7"][..],
        &["ping", "-c", "1", "-W", "2", "10.99.0.7"],
        // On-link, nobody's: nSFF1 must not answer the ARP request for it.
        &["ping", "-c", "1", "-W", "2", "10.0.1.99"],
        &["ping", "-c", "1", "-W", "2", "fd00:1::99"],
    ] {
        let out = lab.exec("client", 10, cmd);
        assert!(!out.status.success(), "{cmd:?} answered: {}", text(&out));
    }
    let after = counters(&lab, "nsff1", &NSFF1);
    let d = delta(&before, &after);
    let moved = |k: &str, at_least: u64| {
        assert!(
            d.get(k).copied().unwrap_or(0) >= at_least,
            "{k} moved too little: {d:?}"
        );
    };
    moved("drop.nsff.transparent_port", 2);
    moved("drop.nsff.transparent_not_intercepted", 2);
    moved("drop.nsff.transparent_not_tcp", 2);
    moved("drop.nsff.transparent_arp_not_ours", 1);
    moved("drop.nsff.transparent_ns_not_ours", 1);
    assert_eq!(d.get("nsff.transparent_accepted"), None, "{d:?}");
    // The client's neighbour table has no entry pointing at nSFF1 for
    // anything but nSFF1's own addresses and no entry at all for the
    // foreign ones (they are reached via the gateway).
    let neigh = lab.exec("client", 10, &["ip", "neigh", "show"]);
    let neigh = text(&neigh);
    let macs: BTreeMap<&str, &str> = neigh
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let ip = w.next()?;
            let mac = l.split("lladdr ").nth(1)?.split_whitespace().next()?;
            Some((ip, mac))
        })
        .collect();
    let gw = macs.get("10.0.1.1").copied();
    assert!(gw.is_some(), "{neigh}");
    for (ip, mac) in &macs {
        if Some(*mac) == gw {
            assert!(
                ["10.0.1.1", "fd00:1::1"].contains(ip),
                "{ip} at nSFF1: {neigh}"
            );
        }
    }
    lab.down();
}
