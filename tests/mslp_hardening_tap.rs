//! The MDA against what adversarial and interoperability testing tried
//! (issue 12), over a real TAP from a kernel namespace. The client is
//! `tests/mslp/libslp_like.py`: it behaves like OpenSLP's libslp on the
//! wire (moves to TCP only for a UDP reply longer than 1,400 octets,
//! ignores OVERFLOW). Needs root and python3.

mod common;

use common::{have, lab_name, root_or_skip, Lab};
use serde_json::Value;

const CLIENT: &str = include_str!("mslp/libslp_like.py");

fn lab_file(name: &str) -> String {
    format!(
        r#"name = "{name}"
keys = "none"  # unkeyed on purpose: this test speaks to (or as) unkeyed nodes

[[segment]]
name = "lan0"

[[node]]
name = "mda1"
role = "mda"
[[node.port]]
segment = "lan0"
addrs = ["10.0.0.1/24"]
[node.config]
mesh = false
start_wait_ms = 100
max_connections = 4
listeners = 2
frame_timeout_ms = 3000
reply_budget = 20000
reply_budget_per_s = 100

[[host]]
name = "ua"
[[host.iface]]
segment = "lan0"
addrs = ["10.0.0.10/24"]
"#
    )
}

#[test]
fn libslp_gets_complete_answers_reflection_stays_bounded_and_abuse_is_counted() {
    if !root_or_skip() || !have("python3") {
        return;
    }
    let name = lab_name('m', 'h');
    let lab = Lab::up(&name, &lab_file(&name));
    let script = std::env::temp_dir().join(format!("svcroute-libslp-{}.py", std::process::id()));
    std::fs::write(&script, CLIENT).unwrap();
    let out = lab.exec(
        "ua",
        120,
        &[
            "python3",
            script.to_str().unwrap(),
            "10.0.0.1",
            "201",
            "60",
            "10",
        ],
    );
    let _ = std::fs::remove_file(&script);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "client failed: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_str(text.trim()).expect("one JSON line");
    let drops = lab.drops("mda1");
    let named = common::named(&lab.stats("mda1"));
    eprintln!("{r}\n{drops:?}");
    // slptool findsrvs printed 2 of 201, findsrvtypes 2 of 3.
    assert_eq!(r["findsrvs"], 201, "{r}");
    assert_eq!(r["findsrvs_tcp"], true, "libslp moved to TCP");
    assert_eq!(
        r["findsrvtypes"],
        serde_json::json!(["service:fax", "service:printer", "service:scanner"])
    );
    // Reflection: 60 requests from one address got at most the budget
    // (20000) plus twice each request.
    let (n, q, got) = (
        r["probe_replies"].as_u64().unwrap(),
        r["probe_request_len"].as_u64().unwrap(),
        r["probe_reply_bytes"].as_u64().unwrap(),
    );
    assert!(
        got <= 20_000 + 2 * q * (n + 2),
        "{got} octets for {n} requests of {q}"
    );
    assert!(
        named.get("mda.reply_budget_cut").copied().unwrap_or(0) > 0,
        "{named:?}"
    );
    // SLPv1: a v1 SrvRply with VER_NOT_SUPPORTED, counted.
    let v1: Vec<u64> = r["v1_reply"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert_eq!((v1[0], v1[1]), (1, 2));
    assert_eq!(&v1[10..14], &[0x12, 0x34, 0, 9]);
    assert_eq!(drops.get("drop.mda.slpv1"), Some(&1), "{drops:?}");
    // TCP framing: lengths 0 and 5 named as such; half a message then FIN
    // counted; a trickling frame closed at frame_timeout, not timeout_s.
    assert_eq!(drops.get("drop.mda.tcp_frame_short"), Some(&2), "{drops:?}");
    assert_eq!(drops.get("drop.mda.tcp_frame_too_big"), None);
    assert_eq!(
        drops.get("drop.mda.tcp_partial_frame"),
        Some(&1),
        "{drops:?}"
    );
    assert_eq!(
        drops.get("drop.mda.tcp_frame_timeout"),
        Some(&1),
        "{drops:?}"
    );
    let held = r["trickle_held_s"].as_f64().unwrap();
    assert!(held < 15.0, "the trickling frame held its slot {held} s");
    // The connection limit (4): every refused connection is counted.
    let seen = r["conns_refused_seen"].as_u64().unwrap();
    assert!(seen >= 6, "{r}");
    assert!(
        drops.get("drop.mda.conn_limit").copied().unwrap_or(0) >= seen,
        "{seen} refused, {drops:?}"
    );
    lab.down();
}
