//! The shipped RFC 8677 example lab (`examples/labs/rfc8677.toml`), as a
//! user brings it up: both names answer through the chain from the kernel
//! `client` namespace (explicit proxy and by name), and its switches tell
//! the NR when the fabric link goes down and comes back. Plain `curl
//! http://www.example.com/` works through the lab's hosts file. The file
//! writes only the fwd ports' `link_ids` (the NR has `fabric = "auto"`): the
//! node files `lab up` wrote and the NR's `ctl links` show the fabric the lab
//! generated, and the chain working over it proves it. Needs root (skips
//! otherwise).

mod common;

use std::collections::BTreeMap;

use serde_json::{json, Value};

use common::{
    assert_nothing_of, lab_name, root_or_skip, run_bounded, svcroute, text, wait_until,
    write_lab_file, DownOnDrop, Lab,
};

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

    // The generated fabric, in the node files `lab up` wrote...
    let node_file = |node: &str| {
        let path = lab.run_dir().join(format!("{node}.toml"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
        let v: toml::Table = toml::from_str(&text).unwrap_or_else(|e| panic!("{path:?}: {e}"));
        (text, v)
    };
    let (nr_text, nr_file) = node_file("nr");
    assert!(
        nr_text.contains("# [nr] self_attach, attach, link: generated")
            && nr_file["nr"].get("fabric").is_none(),
        "{nr_text}"
    );
    let as_json = |v: &toml::Value| serde_json::to_value(v).unwrap();
    assert_eq!(
        as_json(&nr_file["nr"]["self_attach"]),
        json!({"at": "f1", "link_in": 0, "link_out": 1})
    );
    for (node, key, want) in [
        ("nsff1", "nsff", json!([3, 0])),
        ("nsff2", "nsff", json!([5, 11, 0])),
        ("f1", "fwd", json!([0])),
        ("f2", "fwd", json!([11, 0])),
    ] {
        let (text, v) = node_file(node);
        assert_eq!(as_json(&v[key]["nr_links"]), want, "{node}: {text}");
    }
    // ... and as the running NR sees it.
    let view = lab.ctl("nr", &["links"]);
    assert_eq!(
        view["nr"],
        json!({"at": "f1", "link_in": 0, "link_out": 1}),
        "{view}"
    );
    assert_eq!(
        view["nsffs"],
        json!([
            {"nsff": 1, "at": "f1", "link_in": 2, "link_out": 3},
            {"nsff": 2, "at": "f2", "link_in": 4, "link_out": 5},
        ]),
        "{view}"
    );
    let links: Vec<(String, String, u64)> = view["links"]
        .as_array()
        .unwrap_or_else(|| panic!("{view}"))
        .iter()
        .map(|l| {
            (
                l["from"].as_str().unwrap_or("").to_owned(),
                l["to"].as_str().unwrap_or("").to_owned(),
                l["id"].as_u64().unwrap_or(999),
            )
        })
        .collect();
    assert_eq!(
        links,
        [
            ("f1".into(), "f2".into(), 10),
            ("f2".into(), "f1".into(), 11)
        ],
        "{view}"
    );

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

    // The switches' link events reach the NR (the example's nr_links). A
    // switch reports a link down only once it has seen it up (a hello
    // heard), so first wait for both ends of the fabric link.
    let fab_up = |lab: &Lab, node: &str, port: &str| {
        lab.ctl(node, &["links"])["links"]
            .as_array()
            .is_some_and(|l| l.iter().any(|p| p["port"] == port && p["state"] == "up"))
    };
    let ok = wait_until(30, || {
        fab_up(&lab, "f1", "eth2") && fab_up(&lab, "f2", "eth0")
    });
    assert!(
        ok,
        "fabric link not up: f1 {}; f2 {}",
        lab.ctl("f1", &["links"]),
        lab.ctl("f2", &["links"])
    );
    let links = |lab: &Lab| lab.ctl("nr", &["links"])["down"].clone();
    let ok = wait_until(30, || links(&lab) == json!([]));
    assert!(ok, "NR links before: {}", links(&lab));
    link_set(&lab, "br-fab", "down");
    let ok = wait_until(30, || links(&lab) == json!([10, 11]));
    assert!(
        ok,
        "NR links with the fabric down: {}; f1 {}; f2 {}; f1 links {}",
        links(&lab),
        lab.stats("f1"),
        lab.stats("f2"),
        lab.ctl("f1", &["links"])
    );
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

/// A fabric the lab cannot derive (`fabric = "auto"`) stops `lab up` before
/// anything exists, naming node, port and line.
#[test]
fn an_inconsistent_fabric_creates_nothing() {
    if !root_or_skip() {
        return;
    }
    let name = lab_name('x', 'f');
    let _guard = DownOnDrop(name.clone());
    let renamed = LAB.replacen("name = \"rfc8677\"", &format!("name = \"{name}\""), 1);
    for (from, to, want) in [
        // f2's second port has no link ID.
        (
            "link_ids = [11, 4]",
            "link_ids = [11]",
            "\"f2\" (fwd) port #2 (segment \"n2\")",
        ),
        // nSFF1 claims a link_in its fwd port does not send.
        (
            "nsff_id = 1\n",
            "nsff_id = 1\nlink_in = 7\n",
            "\"nsff1\" [node.config] key `link_in`",
        ),
    ] {
        let toml = renamed.replacen(from, to, 1);
        assert_ne!(toml, renamed, "{from:?} is no longer in the example");
        let file = write_lab_file(&name, &toml);
        let out = svcroute(&["lab", "up", file.to_str().unwrap()]);
        let msg = text(&out);
        assert!(!out.status.success(), "{msg}");
        assert!(msg.contains(want) && msg.contains("line "), "{msg}");
        assert_nothing_of(&name);
    }
}
