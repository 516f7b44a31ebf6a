//! The shipped RFC 8677 example lab (`examples/labs/rfc8677.toml`), as a
//! user brings it up: both names answer through the chain from the kernel
//! `client` namespace (explicit proxy and by name), and its switches tell
//! the NR when the fabric link goes down and comes back. Plain `curl
//! http://www.example.com/` works through the lab's hosts file. Needs root (skips
//! otherwise).

mod common;

use std::collections::BTreeMap;

use serde_json::{json, Value};

use common::{lab_name, root_or_skip, run_bounded, text, wait_until, Lab};

const LAB: &str = include_str!("../examples/labs/rfc8677.toml");

/// `curl` from the client namespace with `extra` arguments: (status, body).
fn curl(lab: &Lab, extra: &[&str], url: &str) -> (u16, String) {
    let mut args = vec!["curl", "-sS", "-m", "15", "-w", "\n%{http_code}"];
    args.extend_from_slice(extra);
    args.push(url);
    let out = lab.exec("client", 25, &args);
    let all = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = all.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_owned())
}

/// The NR's name table: FQDN → nSFF IDs.
fn names(lab: &Lab) -> BTreeMap<String, Value> {
    lab.ctl("nr", &["names"])["names"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|n| {
                    (
                        n["fqdn"].as_str().unwrap_or("").to_owned(),
                        n["nsff_ids"].clone(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn link_set(lab: &Lab, dev: &str, state: &str) {
    let out = run_bounded(10, "ip", &["-n", &lab.netns(), "link", "set", dev, state]);
    assert!(
        out.status.success(),
        "ip link set {dev} {state}: {}",
        text(&out)
    );
}

#[test]
fn the_example_chain_answers_both_names_and_reports_fabric_links() {
    if !root_or_skip() {
        return;
    }
    let name = lab_name('x', 'r');
    let toml = LAB.replacen("name = \"rfc8677\"", &format!("name = \"{name}\""), 1);
    assert_ne!(toml, LAB, "the example's name line changed");
    let lab = Lab::up(&name, &toml);

    let want = [
        ("www.example.com", json!([1])),
        ("www.example2.com", json!([2])),
    ];
    let mut last = BTreeMap::new();
    let ok = wait_until(45, || {
        last = names(&lab);
        want.iter().all(|(f, ids)| last.get(*f) == Some(ids))
    });
    assert!(ok, "NR names: {last:?}");

    // Explicit proxy, both names: SF1 (kernel) behind nSFF1, SF2 (host
    // node) across the fabric behind nSFF2.
    let proxy = ["-x", "http://10.0.1.1:3128"];
    let mut r = (0, String::new());
    let ok = wait_until(30, || {
        r = curl(&lab, &proxy, "http://www.example.com/");
        r.0 == 200
    });
    assert!(ok, "www.example.com via the proxy: {r:?}");
    assert_eq!(r.1.trim(), "hello from sf1");
    let r = curl(&lab, &proxy, "http://www.example2.com/");
    assert_eq!(r.0, 200, "{r:?}");
    assert!(r.1.starts_with("instance=sf2"), "{r:?}");
    // Plain curl by name, as the example's header shows: the lab's hosts
    // file names nSFF1 for both, and nSFF1 routes by the Host header.
    let r = curl(&lab, &[], "http://www.example.com/");
    assert_eq!((r.0, r.1.trim()), (200, "hello from sf1"), "{r:?}");
    let r = curl(&lab, &[], "http://www.example2.com/");
    assert_eq!(r.0, 200, "{r:?}");
    assert!(r.1.starts_with("instance=sf2"), "{r:?}");

    // The switches' link events reach the NR (the example's nr_links).
    let links = |lab: &Lab| lab.ctl("nr", &["links"])["down"].clone();
    let ok = wait_until(30, || links(&lab) == json!([]));
    assert!(ok, "NR links before: {}", links(&lab));
    link_set(&lab, "br-fab", "down");
    let ok = wait_until(30, || links(&lab) == json!([10, 11]));
    assert!(ok, "NR links with the fabric down: {}", links(&lab));
    link_set(&lab, "br-fab", "up");
    let ok = wait_until(30, || links(&lab) == json!([]));
    assert!(ok, "NR links after: {}", links(&lab));
    let mut r = (0, String::new());
    let ok = wait_until(30, || {
        r = curl(&lab, &proxy, "http://www.example2.com/");
        r.0 == 200
    });
    assert!(ok, "www.example2.com after the fabric came back: {r:?}");
    lab.down();
}
