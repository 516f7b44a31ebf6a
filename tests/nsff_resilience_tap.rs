//! The RFC 8677 chain's resilience over real TAPs: 100 concurrent kernel
//! curls by name, an SF killed and its name served by a second instance,
//! fabric links cut and restored, and the NR killed and restarted. Every
//! test brings up its own lab (the chain of `tests/nsff_tap.rs`); the labs
//! of this file run one at a time (each has seven node processes). Needs
//! root (skips otherwise).
//!
//! ```text
//!   client (kernel) 10.0.1.10 ── cli ── nsff1 ── n1 ── f1 ── fab ── f2 ── n2 ── nsff2 ── sfs ── sf2
//!                                       10.0.1.1 │     │                          10.0.2.1     10.0.2.10
//!                                        10.0.3.1 s1    nrs ── nr
//!                                                 │
//!                                       sf1 10.0.3.10 (failover lab only)
//! ```
//!
//! Links: f1 → NR 0, NR → f1 1, f1 → nSFF1 2, nSFF1 → f1 3, f2 → nSFF2 4,
//! nSFF2 → f2 5, f1 → f2 10, f2 → f1 11. Both switches send their link
//! events to the NR (f1 over 0, f2 over 11 and 0).

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;

use serde_json::Value;

use common::chain::{counter, counters, curl, lab_file, wait_names, wait_ok, Opts, TempDir, CHAIN};
use common::{lab_name, pid_of, root_or_skip, text, wait_until, Lab};

/// One lab of this file at a time.
static LABS: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    LABS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Every node of the lab answers ready with the pid it had in `pids`.
#[track_caller]
fn same_processes(lab: &Lab, pids: &BTreeMap<&str, u64>) {
    for (node, pid) in pids {
        assert_eq!(lab.assert_node_alive(node), *pid, "{node} was restarted");
    }
}

fn node_pids<'a>(lab: &Lab, nodes: &[&'a str]) -> BTreeMap<&'a str, u64> {
    nodes.iter().map(|n| (*n, pid_of(lab, n))).collect()
}

/// Body size of request `i` of the concurrent test: all different.
fn size(i: usize) -> usize {
    1000 + i * 1009
}

/// What is wrong with answer `i` (headers in `h<i>`, body in `b<i>`), if
/// anything.
fn check_answer(dir: &Path, i: usize) -> Option<String> {
    let read = |p: &str| std::fs::read(dir.join(format!("{p}{i}"))).unwrap_or_default();
    let head = String::from_utf8_lossy(&read("h")).into_owned();
    let body = read("b");
    let err = String::from_utf8_lossy(&read("e")).into_owned();
    let n = size(i);
    let status_ok = head.starts_with("HTTP/1.1 200");
    let instance_ok = head
        .lines()
        .any(|l| l.to_ascii_lowercase().trim() == "x-instance: sf2");
    let bad_byte = body
        .iter()
        .enumerate()
        .position(|(k, &b)| b != (k % 251) as u8);
    if status_ok && instance_ok && body.len() == n && bad_byte.is_none() {
        return None;
    }
    Some(format!(
        "request {i} (/bytes/{n}): {} bytes, first bad byte {bad_byte:?}, head {:?}, curl: {err:?}",
        body.len(),
        head.lines().next().unwrap_or("")
    ))
}

#[test]
fn a_hundred_concurrent_curls_by_name_each_get_their_own_body() {
    if !root_or_skip() {
        return;
    }
    let _one = one_at_a_time();
    let name = lab_name('r', 'c');
    let lab = Lab::up(&name, &lab_file(&name, &Opts::default()));
    // nSFF2's registration is in (no request has been made: the hundred
    // requests below find nSFF1's cache empty).
    wait_names(&lab, &[("www.example2.com", &[2])]);
    let before1 = counters(
        &lab,
        "nsff1",
        &["nsff.responses_remote", "nsff.txns_opened"],
    );
    let before2 = counter(&lab, "nsff2", "nsff.egress_responses");
    let before_sf = counter(&lab, "sf2", "http.requests");

    // 100 curls started at once, each /bytes/N with its own N.
    let dir =
        TempDir(std::env::temp_dir().join(format!("svcroute-nsffres-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let mut script = String::from("cd \"$1\" || exit 1\n");
    for i in 0..100 {
        script += &format!(
            "curl -sS -m 120 --resolve www.example2.com:80:10.0.1.1 -D h{i} -o b{i} \
             http://www.example2.com/bytes/{} 2>e{i} &\n",
            size(i)
        );
    }
    script += "wait\n";
    let path = dir.0.join("run.sh");
    std::fs::write(&path, script).unwrap();
    let d = dir.0.to_string_lossy().into_owned();
    let out = lab.exec("client", 180, &["sh", path.to_str().unwrap(), &d]);
    assert!(out.status.success(), "{}", text(&out));

    let bad: Vec<String> = (0..100).filter_map(|i| check_answer(&dir.0, i)).collect();
    assert!(
        bad.is_empty(),
        "{} of 100 failed:\n{}",
        bad.len(),
        bad.join("\n")
    );

    // Every request went over its own transaction to nSFF2's SF.
    let after1 = counters(
        &lab,
        "nsff1",
        &["nsff.responses_remote", "nsff.txns_opened"],
    );
    for (k, v) in &after1 {
        assert_eq!(v - before1[k], 100, "{k}: {before1:?} -> {after1:?}");
    }
    let delta2 = counter(&lab, "nsff2", "nsff.egress_responses") - before2;
    assert_eq!(delta2, 100, "nsff2 egress responses");
    assert_eq!(counter(&lab, "sf2", "http.requests") - before_sf, 100);
    // One resolution for all of them: the name was asked for once (plus
    // retries if the NR was slow), the other requests waited on it or hit
    // the cache.
    let cache = &lab.ctl("nsff1", &["cache"])["stats"];
    let asked = cache["requests"].as_u64().unwrap() - cache["retries"].as_u64().unwrap();
    assert_eq!(asked, 1, "path requests for one name: {cache}");
    assert_eq!(
        cache["hits"].as_u64().unwrap() + cache["misses"].as_u64().unwrap(),
        100
    );
    for node in CHAIN {
        lab.assert_node_alive(node);
    }
    lab.down();
}

#[test]
fn a_killed_sf_is_deregistered_and_its_name_served_by_the_other_instance() {
    if !root_or_skip() {
        return;
    }
    let _one = one_at_a_time();
    let name = lab_name('r', 'f');
    let opts = Opts {
        sf1: true,
        nsff1: "health_interval_ms = 500\nhealth_timeout_ms = 1000\nhealth_failures = 2\n",
        ..Opts::default()
    };
    let lab = Lab::up(&name, &lab_file(&name, &opts));
    wait_names(
        &lab,
        &[("www.example.com", &[1, 2]), ("www.example2.com", &[2])],
    );
    // Local first: nSFF1's own SF answers.
    for _ in 0..3 {
        let r = curl(&lab, "www.example.com", "/");
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(r.instance().as_deref(), Some("sf1"), "{r:?}");
    }
    let before = counters(
        &lab,
        "nsff1",
        &["nsff.sf_down", "nsff.deregistrations_sent", "nsff.sf_up"],
    );

    // SF1 dies.
    lab.verb("node", &["sf1", "kill"]);
    // Its health checks fail: nSFF1 marks it down and deregisters the name.
    let mut last = BTreeMap::new();
    let ok = wait_until(30, || {
        last = counters(
            &lab,
            "nsff1",
            &["nsff.sf_down", "nsff.deregistrations_sent"],
        );
        last.iter().all(|(k, v)| *v == before[k] + 1)
    });
    assert!(ok, "nsff1 never took SF1 down: {before:?} -> {last:?}");
    let sfs = lab.ctl("nsff1", &["sfs"]);
    assert_eq!(sfs["sfs"][0]["healthy"], false, "{sfs}");
    wait_names(
        &lab,
        &[("www.example.com", &[2]), ("www.example2.com", &[2])],
    );
    // The name now resolves to nSFF2's instance.
    for _ in 0..3 {
        let r = curl(&lab, "www.example.com", "/");
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(r.instance().as_deref(), Some("sf2"), "{r:?}");
    }

    // SF1 comes back: the first good probe registers it again and requests
    // are local again.
    lab.verb("node", &["sf1", "start"]);
    let ok = wait_until(30, || {
        counter(&lab, "nsff1", "nsff.sf_up") == before["nsff.sf_up"] + 1
    });
    assert!(ok, "nsff1 never saw SF1 up: {}", lab.ctl("nsff1", &["sfs"]));
    wait_names(
        &lab,
        &[("www.example.com", &[1, 2]), ("www.example2.com", &[2])],
    );
    for _ in 0..3 {
        let r = curl(&lab, "www.example.com", "/");
        assert_eq!(r.status, 200, "{r:?}\nnsff1: {}", lab.stats("nsff1"));
        assert_eq!(r.instance().as_deref(), Some("sf1"), "{r:?}");
    }
    // None of them went over a connection to the killed process (the new
    // one would have reset it: 502).
    assert_eq!(counter(&lab, "nsff1", "nsff.sf_closed_early"), 0);
    for node in CHAIN {
        lab.assert_node_alive(node);
    }
    lab.down();
}

#[test]
fn fabric_links_cut_fail_requests_cleanly_and_heal_without_restarts() {
    if !root_or_skip() {
        return;
    }
    let _one = one_at_a_time();
    let name = lab_name('r', 'l');
    // A transaction gives up after about 2.4 s without an answer (4 RTOs,
    // at most 1 s each), well inside curl's 20 s.
    let opts = Opts {
        nsff1: "[node.config.transport]\nrto_max_ms = 1000\nmax_retries = 4\n",
        ..Opts::default()
    };
    let lab = Lab::up(&name, &lab_file(&name, &opts));
    wait_names(&lab, &[("www.example2.com", &[2])]);
    wait_ok(&lab, 30, "www.example2.com", "sf2");
    let pids = node_pids(&lab, &CHAIN);

    // 1. The attachment link f2 ── nSFF2 (segment n2) is cut. nSFFs send no
    // hellos, so nobody notices: nSFF1 uses its cached path and the
    // transaction fails by its retry budget: 504, counted.
    let before = counters(
        &lab,
        "nsff1",
        &[
            "nsff.txn_lost",
            "nsff.txns_failed_timeout",
            "nsff.path_requests_sent",
        ],
    );
    lab.verb("link", &["n2", "down"]);
    let r = curl(&lab, "www.example2.com", "/");
    assert_eq!(r.status, 504, "{r:?}");
    assert!(r.body_text().starts_with("nsff: the transaction"), "{r:?}");
    assert_eq!(r.header("connection").as_deref(), Some("close"), "{r:?}");
    let after = counters(
        &lab,
        "nsff1",
        &[
            "nsff.txn_lost",
            "nsff.txns_failed_timeout",
            "nsff.path_requests_sent",
        ],
    );
    assert_eq!(
        after["nsff.txn_lost"],
        before["nsff.txn_lost"] + 1,
        "{after:?}"
    );
    assert_eq!(
        after["nsff.txns_failed_timeout"],
        before["nsff.txns_failed_timeout"] + 1,
        "{after:?}"
    );
    assert_eq!(
        after["nsff.path_requests_sent"], before["nsff.path_requests_sent"],
        "the cached path was used"
    );
    // Back up: the same cached path carries the next request.
    lab.verb("link", &["n2", "up"]);
    wait_ok(&lab, 30, "www.example2.com", "sf2");
    same_processes(&lab, &pids);

    // 2. The fabric link f1 ── f2 (segment fab) is cut. The switches miss
    // each other's hellos, f1 tells the NR both directions are down, the NR
    // flushes nSFF1's path (a type-1 update) and knows no way to nSFF2:
    // the request is answered 502 at once.
    lab.verb("link", &["fab", "down"]);
    let mut down = Value::Null;
    let ok = wait_until(30, || {
        down = lab.ctl("nr", &["links"])["down"].clone();
        down == serde_json::json!([10, 11])
    });
    assert!(ok, "NR link state: {down}");
    let ok = wait_until(30, || lab.ctl("nsff1", &["cache"])["entries"] == 0);
    assert!(ok, "nsff1 cache: {}", lab.ctl("nsff1", &["cache"]));
    let unknown = counter(&lab, "nsff1", "nsff.unknown_name");
    let r = curl(&lab, "www.example2.com", "/");
    assert_eq!(r.status, 502, "{r:?}");
    assert!(r.body_text().contains("unknown service name"), "{r:?}");
    assert_eq!(counter(&lab, "nsff1", "nsff.unknown_name"), unknown + 1);
    // Back up: hellos resume, the NR hears the links are up, the name
    // resolves again.
    lab.verb("link", &["fab", "up"]);
    let ok = wait_until(30, || {
        lab.ctl("nr", &["links"])["down"] == serde_json::json!([])
    });
    assert!(ok, "NR link state: {}", lab.ctl("nr", &["links"]));
    wait_ok(&lab, 30, "www.example2.com", "sf2");
    let r = curl(&lab, "www.example2.com", "/bytes/300000");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.body.len(), 300_000);
    assert!(r
        .body
        .iter()
        .enumerate()
        .all(|(k, &b)| b == (k % 251) as u8));
    same_processes(&lab, &pids);
    assert!(counter(&lab, "f1", "fwd.links_down") >= 1);
    assert!(counter(&lab, "nr", "nr.link_down") >= 2);
    assert!(counter(&lab, "nr", "nr.link_up") >= 2);
    lab.down();
}

#[test]
fn a_restarted_nr_flushes_caches_and_names_resolve_again() {
    if !root_or_skip() {
        return;
    }
    let _one = one_at_a_time();
    let name = lab_name('r', 'n');
    // Path requests give up after about 3 s (retries at 200, 600, 1400 ms).
    let opts = Opts {
        nsff1: "[node.config.cache]\nretry_ms = 200\nmax_retries = 3\n",
        nsff2_names: &["www.example3.com"],
        ..Opts::default()
    };
    let lab = Lab::up(&name, &lab_file(&name, &opts));
    wait_names(
        &lab,
        &[("www.example2.com", &[2]), ("www.example3.com", &[2])],
    );
    wait_ok(&lab, 30, "www.example2.com", "sf2");

    // The NR dies.
    lab.verb("node", &["nr", "kill"]);
    // A cached name needs no NR: it is still served.
    let sent = counter(&lab, "nsff1", "nsff.path_requests_sent");
    let r = curl(&lab, "www.example2.com", "/");
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.instance().as_deref(), Some("sf2"));
    assert_eq!(counter(&lab, "nsff1", "nsff.path_requests_sent"), sent);
    // A name nSFF1 never resolved: the NR does not answer, 504.
    let r = curl(&lab, "www.example3.com", "/");
    assert_eq!(r.status, 504, "{r:?}");
    assert!(
        r.body_text().contains("name resolver did not answer"),
        "{r:?}"
    );
    assert_eq!(counter(&lab, "nsff1", "nsff.nr_timeout"), 1);

    // The NR restarts with empty tables and announces ALL NODES: nSFF1
    // flushes its cache, nSFF2 registers its names again at once.
    let before1 = counters(&lab, "nsff1", &["nsff.path_updates", "nsff.cache_flushed"]);
    let regs2 = counter(&lab, "nsff2", "nsff.registrations_sent");
    eprintln!("f1 before the restart: {}", lab.stats("f1"));
    lab.verb("node", &["nr", "start"]);
    wait_names(
        &lab,
        &[("www.example2.com", &[2]), ("www.example3.com", &[2])],
    );
    let ok = wait_until(10, || {
        let c = counters(&lab, "nsff1", &["nsff.path_updates", "nsff.cache_flushed"]);
        c.iter().all(|(k, v)| *v > before1[k])
    });
    assert!(
        ok,
        "nsff1 never flushed: {}\nnr: {}\nf1: {}\nnsff2: {}",
        lab.stats("nsff1"),
        lab.stats("nr"),
        lab.stats("f1"),
        lab.stats("nsff2")
    );
    assert!(counter(&lab, "nsff2", "nsff.registrations_sent") > regs2);
    assert_eq!(lab.ctl("nsff1", &["cache"])["entries"], 0);
    // Both names resolve at the new NR and are served.
    let sent = counter(&lab, "nsff1", "nsff.path_requests_sent");
    for fqdn in ["www.example2.com", "www.example3.com"] {
        let r = curl(&lab, fqdn, "/");
        assert_eq!(r.status, 200, "{fqdn}: {r:?}");
        assert_eq!(r.instance().as_deref(), Some("sf2"));
    }
    assert!(counter(&lab, "nsff1", "nsff.path_requests_sent") >= sent + 2);
    assert!(counter(&lab, "nr", "nr.responses_found") >= 2);
    for node in CHAIN {
        lab.assert_node_alive(node);
    }
    lab.down();
}
