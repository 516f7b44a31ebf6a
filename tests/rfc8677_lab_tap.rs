//! The shipped RFC 8677 example lab (`examples/labs/rfc8677.toml`), as a
//! user brings it up: both names answer through the chain from the kernel
//! `client` namespace (explicit proxy and by name), and when the direct
//! fabric link f1 - f2 is cut, its switches tell the NR, the NR tells nSFF1
//! (a path update of the link type), and the next requests re-resolve over
//! the detour f1 - f3 - f2 without the link being healed; healed, nSFF1 is
//! told again and goes back to the direct path. The generated `nr_links`
//! of nSFF2, f2 and f3 OR two link-disjoint paths to the NR, so during the
//! cut the control plane from nSFF2's side keeps working: its registrations
//! and f2's link events reach the NR over f3 (and, with the link up, every
//! message arrives twice and the NR ignores the copy). Plain `curl
//! http://www.example.com/` works through the lab's hosts file. The file
//! writes only the fwd ports' `link_ids` (the NR has `fabric = "auto"`): the
//! node files `lab up` wrote and the NR's `ctl links` show the fabric the lab
//! generated, and the chain working over it proves it. Needs root (skips
//! otherwise).

mod common;

use std::collections::BTreeMap;

use serde_json::{json, Value};

use common::{
    assert_nothing_of, delta, lab_name, named, root_or_skip, svcroute, text, wait_until,
    write_lab_file, DownOnDrop, Lab,
};

const LAB: &str = include_str!("../examples/labs/rfc8677.toml");

/// Requests for www.example2.com in each form (proxy, by name) while the
/// direct fabric link is cut.
const REQUESTS: u64 = 4;

/// nSFF2's `register_interval_ms` in this test.
const REGISTER_MS: u64 = 2000;

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

#[test]
fn the_example_chain_answers_both_names_and_reroutes_around_a_cut_link() {
    if !root_or_skip() {
        return;
    }
    let name = lab_name('x', 'r');
    // nSFF2 registers every 2 s instead of every 30 s: the NR must hear one
    // during the cut.
    let toml = LAB
        .replacen("name = \"rfc8677\"", &format!("name = \"{name}\""), 1)
        .replacen(
            "nsff_id = 2\n",
            &format!("nsff_id = 2\nregister_interval_ms = {REGISTER_MS}\n"),
            1,
        );
    assert!(
        toml.contains(&format!("name = \"{name}\"")) && toml.contains("register_interval_ms"),
        "the example's name or nsff_id = 2 line changed"
    );
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
        // Two link-disjoint paths to f1 where there are two: direct, and
        // over the third switch.
        ("nsff2", "nsff", json!([5, 11, 15, 13, 0])),
        ("f1", "fwd", json!([0])),
        ("f2", "fwd", json!([11, 15, 13, 0])),
        ("f3", "fwd", json!([13, 14, 11, 0])),
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
    let mut attach = view["nsffs"].clone();
    for row in attach.as_array_mut().into_iter().flatten() {
        row.as_object_mut().map(|r| r.remove("heard_ms"));
    }
    assert_eq!(
        attach,
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
            ("f1".into(), "f3".into(), 12),
            ("f2".into(), "f1".into(), 11),
            ("f2".into(), "f3".into(), 15),
            ("f3".into(), "f1".into(), 13),
            ("f3".into(), "f2".into(), 14),
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
    // What nSFF2, f2 and f3 send the NR arrives twice (over f2 - f1 and
    // f2 - f3 - f1, or f3 - f1 and f3 - f2 - f1), a few ms apart: the NR
    // acts on one and ignores the copy.
    let ok = wait_until(30, || nr_counter(&lab, "nr.duplicates_ignored") >= 1);
    assert!(ok, "no copy reached the NR: {}", lab.stats("nr"));

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

    // nSFF1 resolved www.example2.com over the direct link.
    assert_eq!(
        example2_paths(&lab),
        Some((json!([3, 4, 10]), json!([2, 5, 11]))),
        "{}",
        lab.ctl("nr", &["discovery"])
    );

    // Cutting the direct link. A switch reports a link down only once it
    // has seen it up (a hello heard), so first wait for every fabric port,
    // the detour's included.
    let all_up = |lab: &Lab| {
        [
            ("f1", "eth2"),
            ("f1", "eth3"),
            ("f2", "eth0"),
            ("f2", "eth2"),
            ("f3", "eth0"),
            ("f3", "eth1"),
        ]
        .iter()
        .all(|(node, port)| port_up(lab, node, port))
    };
    let ok = wait_until(30, || all_up(&lab));
    assert!(
        ok,
        "fabric not up: f1 {}; f2 {}; f3 {}",
        lab.ctl("f1", &["links"]),
        lab.ctl("f2", &["links"]),
        lab.ctl("f3", &["links"])
    );
    let down = |lab: &Lab| lab.ctl("nr", &["links"])["down"].clone();
    let ok = wait_until(30, || down(&lab) == json!([]));
    assert!(ok, "NR links before: {}", down(&lab));
    let nr_before = named(&lab.stats("nr"));
    let nsff1_before = named(&lab.stats("nsff1"));
    let f2_before = named(&lab.stats("f2"));
    lab.verb("link", &["fab", "down"]);

    // f1 and f2 report both directions (f2's reports over f3: their copy
    // over the cut link is lost); the NR sends nSFF1, whose paths hold
    // them, a type-1 update.
    let ok = wait_until(30, || down(&lab) == json!([10, 11]));
    assert!(
        ok,
        "NR links with the fabric down: {}; f1 {}; f2 {}; f1 links {}",
        down(&lab),
        lab.stats("f1"),
        lab.stats("f2"),
        lab.ctl("f1", &["links"])
    );
    let nr = delta(&nr_before, &named(&lab.stats("nr")));
    assert!(
        nr.get("nr.link_down").copied().unwrap_or(0) >= 2
            && nr.get("nr.updates_links").copied().unwrap_or(0) >= 1,
        "NR counters after the cut: {nr:?}"
    );
    // f2's two reports reached the NR too, over f3: as link events that
    // changed nothing any more, or, arriving within `dedup_ms` of f1's
    // byte-identical ones, as copies. With one path to the NR (or none
    // over f3) the NR hears f1's two alone, and no copy of anything.
    let mut f2 = BTreeMap::new();
    let mut nr = BTreeMap::new();
    let ok = wait_until(30, || {
        f2 = delta(&f2_before, &named(&lab.stats("f2")));
        nr = delta(&nr_before, &named(&lab.stats("nr")));
        let count = |k: &str| nr.get(k).copied().unwrap_or(0);
        f2.get("fwd.link_events_out").copied().unwrap_or(0) >= 2
            && count("nr.link_down") + count("nr.duplicates_ignored") >= 4
    });
    assert!(ok, "f2's link events at the NR: f2 {f2:?}; NR {nr:?}");
    // nSFF2's registrations keep reaching the NR: it hears nSFF2 after
    // having seen the cut, over f2 - f3 - f1.
    let heard_at_cut = heard_ms(&lab, 2);
    let regs2 = nsff2_registrations(&lab);
    let mut heard = heard_at_cut;
    let ok = wait_until(30, || {
        heard = heard_ms(&lab, 2);
        heard > heard_at_cut && nsff2_registrations(&lab) > regs2
    });
    assert!(
        ok,
        "NR last heard nSFF2 at {heard:?} ms (at the cut {heard_at_cut:?}); nsff2 sent {} \
         registrations (at the cut {regs2}); NR {}",
        nsff2_registrations(&lab),
        lab.stats("nr")
    );
    assert_eq!(down(&lab), json!([10, 11]), "the link healed by itself");
    // The update reaches nSFF1 and flushes its cached path; only requests
    // issued after that must succeed.
    let mut nsff1 = BTreeMap::new();
    let ok = wait_until(30, || {
        nsff1 = delta(&nsff1_before, &named(&lab.stats("nsff1")));
        nsff1.contains_key("nsff.path_updates") && nsff1.contains_key("nsff.cache_flushed")
    });
    assert!(ok, "nSFF1 counters after the cut: {nsff1:?}");

    // Without healing: every request answers, over f3.
    let f3_before = forwarded(&lab, "f3");
    for i in 0..REQUESTS {
        let r = curl(&lab, &proxy, "http://www.example2.com/");
        assert_eq!(r.0, 200, "request {i} over the detour: {r:?}");
        assert!(r.1.starts_with("instance=sf2"), "request {i}: {r:?}");
        let r = curl(&lab, &[], "http://www.example2.com/");
        assert_eq!(r.0, 200, "request {i} by name over the detour: {r:?}");
        assert!(r.1.starts_with("instance=sf2"), "request {i}: {r:?}");
    }
    assert_eq!(
        example2_paths(&lab),
        Some((json!([3, 4, 12, 14]), json!([2, 5, 13, 15]))),
        "{}",
        lab.ctl("nr", &["discovery"])
    );
    // Each transaction crosses f3 at least twice (request and response).
    let f3_detour = forwarded(&lab, "f3") - f3_before;
    assert!(
        f3_detour >= 2 * 2 * REQUESTS,
        "f3 forwarded {f3_detour} packets for {} transactions",
        2 * REQUESTS
    );
    assert_eq!(down(&lab), json!([10, 11]), "the link healed by itself");

    // Healed: the switches report it up, the NR tells nSFF1 its answer
    // changed (type 0), and new requests take the direct link again.
    let nr_before = named(&lab.stats("nr"));
    let nsff1_before = named(&lab.stats("nsff1"));
    lab.verb("link", &["fab", "up"]);
    let ok = wait_until(30, || down(&lab) == json!([]));
    assert!(ok, "NR links after: {}", down(&lab));
    let mut nsff1 = BTreeMap::new();
    let ok = wait_until(30, || {
        nsff1 = delta(&nsff1_before, &named(&lab.stats("nsff1")));
        nsff1.contains_key("nsff.path_updates")
    });
    let nr = delta(&nr_before, &named(&lab.stats("nr")));
    assert!(ok, "nSFF1 counters after healing: {nsff1:?}; NR {nr:?}");
    assert!(
        nr.get("nr.link_up").copied().unwrap_or(0) >= 2 && nr.contains_key("nr.updates_nsffs"),
        "NR counters after healing: {nr:?}"
    );
    let f3_before = forwarded(&lab, "f3");
    let mut r = (0, String::new());
    let ok = wait_until(30, || {
        r = curl(&lab, &proxy, "http://www.example2.com/");
        r.0 == 200
    });
    assert!(ok, "www.example2.com after the fabric came back: {r:?}");
    assert!(r.1.starts_with("instance=sf2"), "{r:?}");
    let r = curl(&lab, &[], "http://www.example.com/");
    assert_eq!((r.0, r.1.trim()), (200, "hello from sf1"), "{r:?}");
    assert_eq!(
        example2_paths(&lab),
        Some((json!([3, 4, 10]), json!([2, 5, 11]))),
        "{}",
        lab.ctl("nr", &["discovery"])
    );
    assert_eq!(
        forwarded(&lab, "f3"),
        f3_before,
        "f3 still forwards after the direct link came back"
    );
    lab.down();
}

/// The NR's counter `name`.
fn nr_counter(lab: &Lab, name: &str) -> u64 {
    named(&lab.stats("nr")).get(name).copied().unwrap_or(0)
}

/// When the NR last heard a registration or path request from nSFF `id`
/// (its clock, ms), from `ctl links`.
fn heard_ms(lab: &Lab, id: u64) -> Option<u64> {
    lab.ctl("nr", &["links"])["nsffs"]
        .as_array()?
        .iter()
        .find(|n| n["nsff"] == id)?["heard_ms"]
        .as_u64()
}

/// Registrations nSFF2 has sent.
fn nsff2_registrations(lab: &Lab) -> u64 {
    named(&lab.stats("nsff2"))
        .get("nsff.registrations_sent")
        .copied()
        .unwrap_or(0)
}

/// Whether `node`'s switch port `port` sees its link up.
fn port_up(lab: &Lab, node: &str, port: &str) -> bool {
    lab.ctl(node, &["links"])["links"]
        .as_array()
        .is_some_and(|l| l.iter().any(|p| p["port"] == port && p["state"] == "up"))
}

/// GFF packets switch `node` forwarded.
fn forwarded(lab: &Lab, node: &str) -> u64 {
    named(&lab.stats(node))
        .get("fwd.forwarded")
        .copied()
        .unwrap_or(0)
}

/// The (forward, reverse) links the NR last gave nSFF1 for an answer
/// served by nSFF2 (www.example2.com), from its discovery table.
fn example2_paths(lab: &Lab) -> Option<(Value, Value)> {
    lab.ctl("nr", &["discovery"])["discovery"]
        .as_array()?
        .iter()
        .find(|d| d["requester"] == 1 && d["serving"] == 2)
        .map(|d| (d["forward_links"].clone(), d["reverse_links"].clone()))
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
        // f2's third port has no link ID.
        (
            "link_ids = [11, 4, 15]",
            "link_ids = [11, 4]",
            "\"f2\" (fwd) port #3 (segment \"fab23\")",
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
