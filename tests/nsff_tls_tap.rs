//! TLS SNI passthrough over real TAPs: kernel `curl` in the client
//! namespace asks nSFF1 (port 443) for `https://www.example2.com/`; nSFF1
//! reads the SNI of the ClientHello, resolves the name at the NR and carries
//! the whole TCP session over one transaction to nSFF2, which connects to
//! the SF's TLS port: a kernel `openssl s_server` with a certificate made
//! at test start. curl verifies that certificate (`--cacert`), so nothing
//! in between terminated TLS. `www.example.com` is served the same way by
//! an SF local to nSFF1. An unknown name, a ClientHello without SNI and
//! plain HTTP on 443 are refused and counted. Needs root, `openssl` and
//! `curl` (skips otherwise).
//!
//! ```text
//!   client (kernel) 10.0.1.10 ── cli ── nsff1 ── n1 ── f1 ── fab ── f2 ── n2 ── nsff2 ── sfs ── tls2 10.0.2.20
//!                                 │     10.0.1.1       │                          10.0.2.1     (www.example2.com)
//!                  tls1 10.0.1.20 ┘                    nrs ── nr
//!                  (www.example.com, local at nSFF1)
//! ```
//!
//! The lab is `common::chain`'s with `Opts::tls`.

mod common;

use std::process::Output;

use common::chain::{counter, counters, curl, lab_file, wait_names, Opts, TempDir};
use common::{delta, have, lab_name, named, root_or_skip, run_bounded, text, wait_until, Lab};

/// The counters the test looks at.
const NSFF1: [&str; 10] = [
    "nsff.tls_accepted",
    "nsff.tls_sessions",
    "nsff.tls_sessions_remote",
    "nsff.tls_sessions_local",
    "nsff.tls_completed",
    "nsff.tls_unknown_name",
    "nsff.tls_no_sni",
    "nsff.tls_not_tls",
    "nsff.tls_upstream_lost",
    "nsff.tls_client_reset",
];

/// `curl --cacert` for `https://<name><path>` at nSFF1's port 443.
fn https(lab: &Lab, cert: &str, name: &str, path: &str) -> Output {
    let url = format!("https://{name}{path}");
    let resolve = format!("{name}:443:10.0.1.1");
    lab.exec(
        "client",
        30,
        &[
            "curl",
            "-sS",
            "-m",
            "20",
            "--cacert",
            cert,
            "--resolve",
            &resolve,
            &url,
        ],
    )
}

/// Make the self-signed certificate (both names) and the document roots.
fn make_dir(dir: &std::path::Path) {
    for host in ["tls1", "tls2"] {
        std::fs::create_dir_all(dir.join(host)).expect("creating the document roots");
        std::fs::write(dir.join(host).join("who.txt"), format!("{host}\n")).expect("who.txt");
    }
    // 1 MB that a TLS record boundary cannot line up with: byte k = k % 251.
    let big: Vec<u8> = (0..1_000_000u32).map(|k| (k % 251) as u8).collect();
    std::fs::write(dir.join("tls2").join("big.bin"), &big).expect("big.bin");
    let key = dir.join("key.pem");
    let cert = dir.join("cert.pem");
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
            key.to_str().expect("UTF-8 temp dir"),
            "-out",
            cert.to_str().expect("UTF-8 temp dir"),
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
fn https_by_sni_through_the_chain() {
    if !root_or_skip() {
        return;
    }
    if !have("openssl") || !have("curl") || !std::path::Path::new("/usr/bin/python3").exists() {
        eprintln!("SKIP: needs openssl, curl and /usr/bin/python3");
        return;
    }
    let dir = TempDir(std::env::temp_dir().join(format!("svcroute-tls-{}", std::process::id())));
    make_dir(&dir.0);
    let cert = dir.0.join("cert.pem").to_string_lossy().into_owned();
    let name = lab_name('n', 't');
    let opts = Opts {
        tls: Some(dir.0.to_string_lossy().into_owned()),
        ..Opts::default()
    };
    let lab = Lab::up(&name, &lab_file(&name, &opts));
    wait_names(
        &lab,
        &[("www.example2.com", &[2]), ("www.example.com", &[1])],
    );

    // HTTPS by name through the chain (the first may race the fabric).
    let mut last = None;
    let ok = wait_until(20, || {
        let out = https(&lab, &cert, "www.example2.com", "/who.txt");
        let ok = out.status.success() && out.stdout == b"tls2\n";
        last = Some(text(&out));
        ok
    });
    assert!(ok, "no HTTPS answer from tls2: {last:?}");

    let before = counters(&lab, "nsff1", &NSFF1);
    let before2 = named(&lab.stats("nsff2"));
    // Again, and a 1 MB body, every byte checked.
    let out = https(&lab, &cert, "www.example2.com", "/who.txt");
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(out.stdout, b"tls2\n");
    let out = https(&lab, &cert, "www.example2.com", "/big.bin");
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(out.stdout.len(), 1_000_000);
    assert!(out
        .stdout
        .iter()
        .enumerate()
        .all(|(k, &b)| b == (k % 251) as u8));
    // The local SF at nSFF1.
    let out = https(&lab, &cert, "www.example.com", "/who.txt");
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(out.stdout, b"tls1\n");
    // The certificate the client saw is the SF's own.
    let fp = |cmd: &str| {
        let out = lab.exec("client", 30, &["sh", "-c", cmd]);
        assert!(out.status.success(), "{cmd}: {}", text(&out));
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    let seen = fp(
        "openssl s_client -connect 10.0.1.1:443 -servername www.example2.com </dev/null 2>/dev/null \
         | openssl x509 -noout -fingerprint -sha256",
    );
    let made = fp(&format!(
        "openssl x509 -in {cert} -noout -fingerprint -sha256"
    ));
    assert!(made.starts_with("sha256 Fingerprint=") || made.starts_with("SHA256 Fingerprint="));
    assert_eq!(seen, made);
    // HTTP by name reaches the same SF (its port 80).
    let r = curl(&lab, "www.example2.com", "/who.txt");
    assert_eq!(
        (r.status, r.body.as_slice()),
        (200, &b"tls2\n"[..]),
        "{r:?}"
    );

    // Unknown name: the handshake fails with unrecognized_name.
    let out = https(&lab, &cert, "www.nowhere.example", "/");
    assert_eq!(out.status.code(), Some(35), "{}", text(&out));
    assert!(
        text(&out).contains("unrecognized name"),
        "curl should report the alert: {}",
        text(&out)
    );
    // A ClientHello without SNI.
    let out = lab.exec(
        "client",
        30,
        &[
            "sh",
            "-c",
            "openssl s_client -connect 10.0.1.1:443 -noservername </dev/null",
        ],
    );
    assert!(!out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("missing extension"), "{}", text(&out));
    // Plain HTTP on 443: closed without an answer.
    let out = lab.exec(
        "client",
        30,
        &["curl", "-sS", "-m", "10", "http://10.0.1.1:443/"],
    );
    assert!(!out.status.success(), "{}", text(&out));
    assert!(out.stdout.is_empty(), "{}", text(&out));

    // Each session counted once, by how it ended.
    let after = counters(&lab, "nsff1", &NSFF1);
    let d = delta(&before, &after);
    let want: &[(&str, u64)] = &[
        ("nsff.tls_accepted", 7),
        ("nsff.tls_sessions", 5),
        ("nsff.tls_sessions_remote", 3),
        ("nsff.tls_sessions_local", 1),
        ("nsff.tls_unknown_name", 1),
        ("nsff.tls_no_sni", 1),
        ("nsff.tls_not_tls", 1),
    ];
    for (k, v) in want {
        assert_eq!(d.get(*k).copied().unwrap_or(0), *v, "{k}: {d:?}");
    }
    assert_eq!(d.get("nsff.tls_upstream_lost"), None, "{d:?}");
    assert_eq!(d.get("nsff.tls_client_reset"), None, "{d:?}");
    // Every session that relayed (the warm-up too) ended cleanly both ways.
    let ok = wait_until(10, || {
        let c = counters(&lab, "nsff1", &NSFF1);
        c["nsff.tls_completed"] == c["nsff.tls_sessions_remote"] + c["nsff.tls_sessions_local"]
    });
    assert!(ok, "{:?}", counters(&lab, "nsff1", &NSFF1));
    let d2 = delta(&before2, &named(&lab.stats("nsff2")));
    assert_eq!(
        d2.get("nsff.egress_tls_sessions").copied(),
        Some(3),
        "{d2:?}"
    );
    assert!(
        !d2.contains_key("nsff.egress_tls_sf_lost") && !d2.contains_key("nsff.egress_tls_no_sf"),
        "{d2:?}"
    );
    // Relayed bytes: the 1 MB body and more went down, the hellos up.
    let b = counters(&lab, "nsff1", &["nsff.tls_bytes_down", "nsff.tls_bytes_up"]);
    assert!(b["nsff.tls_bytes_down"] > 1_000_000, "{b:?}");
    assert!(b["nsff.tls_bytes_up"] > 500, "{b:?}");
    // `ctl tls` shows a session while it is open: an s_client that holds
    // its connection until its input ends (8 s).
    std::thread::scope(|sc| {
        let held = sc.spawn(|| {
            lab.exec(
                "client",
                30,
                &[
                    "sh",
                    "-c",
                    "sleep 8 | openssl s_client -connect 10.0.1.1:443 \
                     -servername www.example2.com >/dev/null 2>&1",
                ],
            )
        });
        let mut last = None;
        let seen = wait_until(8, || {
            let v = lab.ctl("nsff1", &["tls"]);
            let open = v["sessions"].as_array().is_some_and(|a| {
                a.iter().any(|s| {
                    s["stage"] == "remote"
                        && s["name"] == "www.example2.com"
                        && s["bytes_down"].as_u64() > Some(500)
                })
            });
            last = Some(v);
            open
        });
        let v = last.expect("ctl tls answered");
        assert!(seen, "no open session in ctl tls: {v}");
        assert_eq!(v["https_port"], 443, "{v}");
        eprintln!("ctl nsff1 tls: {v:#}");
        let v2 = lab.ctl("nsff2", &["tls"]);
        eprintln!("ctl nsff2 tls: {v2:#}");
        assert!(
            v2["egress"]
                .as_array()
                .is_some_and(|a| a.iter().any(|e| e["connected"] == true)),
            "{v2}"
        );
        let out = held.join().expect("s_client thread");
        assert!(out.status.success(), "{}", text(&out));
    });

    // A TLS relay is health evidence too: with tls1's servers stopped,
    // the kernel refuses the relay's connect to its TLS port, and nSFF1
    // counts that against tls1 as it would a refused HTTP connect.
    let out = https(&lab, &cert, "www.example.com", "/who.txt");
    assert!(out.status.success(), "{}", text(&out));
    let refused = counter(&lab, "nsff1", "nsff.sf_refused");
    lab.verb("host", &["tls1", "stop"]);
    let out = https(&lab, &cert, "www.example.com", "/who.txt");
    assert!(!out.status.success(), "a stopped SF answered");
    assert_eq!(
        counter(&lab, "nsff1", "nsff.sf_refused"),
        refused + 1,
        "{:?}",
        lab.stats("nsff1")
    );
    lab.down();
}
