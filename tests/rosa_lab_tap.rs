//! The shipped ROSA example lab (`examples/labs/rosa.toml`), as a user
//! brings it up (only its name and nginx's directory changed): four SARs in
//! a square with a diagonal, a SAG with dnsmasq and nginx, and a second
//! ROSA domain behind its own SAG. Checked, over real TAPs:
//!
//! - `service.org` is served by a scheduled set (`i1`, `i2` behind `s2`,
//!   round robin) and a routed instance (`i3` behind `s3`); the ingress
//!   `s1` holds one mixed FIB entry for the three;
//! - plain `curl http://service.org/` in the TUN-served kernel `client`
//!   answers from an instance, and new connections take turns over the
//!   scheduled set only, the nearer site (10, against 20 for `i3`);
//! - the host-node client `c` gets `service.org` (the scheduled set),
//!   `service.org/video` (`i3` alone, routed hop by hop through `s2`), and
//!   `foo.com` (`f1`, also from a kernel curl);
//! - `curl http://example.net/` gets nginx's page through the SAG `g`;
//! - `shop.example`, a service of the second domain, answers through both
//!   SAGs, for both clients;
//! - cutting the SAR link `s1` ─ `s2` (`lab link l down`) re-routes: once the
//!   IGP has converged `s1` routes the scheduled set's prefix over `s4`;
//!   `i3` is now the nearer site (25, against 35 for the set), so
//!   `service.org` is routed to it over `s4`, as are the requests for
//!   `service.org/video`; healing the link brings the route back, and
//!   `service.org` goes back to the scheduled set;
//! - the last phase stops `i1` and `i2` (SIGTERM: they withdraw): `s1`'s
//!   entry keeps `i3` alone, and both clients' `service.org` is answered
//!   by `i3`, routed.
//!
//! Behaviour only, never timing: every wait is a generous `wait_until`.
//! Needs root, dnsmasq and nginx (skips otherwise).

mod common;

use std::collections::BTreeMap;

use common::{have, named, root_or_skip, run_bounded, wait_until, Lab};
use serde_json::Value;

const LAB: &str = include_str!("../examples/labs/rosa.toml");
/// nginx's files, as the lab's `web` command names them.
const WEB_DIR: &str = "/tmp/svl-rosa-web";
const SCHEDULED: [&str; 2] = ["i1", "i2"];
/// `s1`'s steering of `service.org`: the scheduled set beside `i3`.
const MIXED: &str = "Mixed(Schedule(RoundRobin), Route(Shortest))";

fn counter(lab: &Lab, node: &str, name: &str) -> u64 {
    named(&lab.stats(node)).get(name).copied().unwrap_or(0)
}

/// `ctl c get http://NAME/ ARGS`: (ok, answers by instance).
fn get(lab: &Lab, url: &str, args: &[&str]) -> (u64, Value) {
    let mut all = vec!["get", url];
    all.extend_from_slice(args);
    let v = lab.ctl("c", &all);
    (v["ok"].as_u64().unwrap_or(0), v["instances"].clone())
}

/// `curl http://NAME/` in the kernel client: (HTTP status, `X-Instance`,
/// body), or `None` if curl failed.
fn curl(lab: &Lab, name: &str) -> Option<(String, String, String)> {
    let url = format!("http://{name}/");
    let out = lab.exec(
        "client",
        15,
        &[
            "curl",
            "-sS",
            "-m",
            "8",
            "-w",
            "\n%{http_code} %header{x-instance}",
            &url,
        ],
    );
    if !out.status.success() {
        return None;
    }
    let all = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, tail) = all.rsplit_once('\n')?;
    let (code, instance) = tail.trim().split_once(' ').unwrap_or((tail.trim(), ""));
    Some((code.to_owned(), instance.to_owned(), body.to_owned()))
}

/// The FIB entry of `service` at `node`.
fn fib_entry(lab: &Lab, node: &str, service: &str) -> Option<Value> {
    lab.ctl(node, &["fib"])["fib"]
        .as_array()?
        .iter()
        .find(|e| e["service"] == service)
        .cloned()
}

/// How many reachable instances `node` has for `service`.
fn reachable(lab: &Lab, node: &str, service: &str) -> usize {
    fib_entry(lab, node, service)
        .and_then(|e| {
            e["instances"]
                .as_array()
                .map(|a| a.iter().filter(|i| i["reachable"] == true).count())
        })
        .unwrap_or(0)
}

/// The IGP path costs from `node` to `service`'s reachable instances.
fn costs(lab: &Lab, node: &str, service: &str) -> Vec<u64> {
    fib_entry(lab, node, service)
        .and_then(|e| {
            e["instances"].as_array().map(|a| {
                a.iter()
                    .filter(|i| i["reachable"] == true)
                    .filter_map(|i| i["cost"].as_u64())
                    .collect()
            })
        })
        .unwrap_or_default()
}

/// The next hop of `node`'s route for `prefix`.
fn via(lab: &Lab, node: &str, prefix: &str) -> Option<String> {
    lab.ctl(node, &["routes"])["table"]
        .as_array()?
        .iter()
        .find(|r| r["prefix"] == prefix)
        .and_then(|r| r["via"].as_str().map(str::to_owned))
}

/// Whether every IGP adjacency of `node` is full.
fn all_full(lab: &Lab, node: &str) -> bool {
    let v = lab.ctl(node, &["neighbors"]);
    let Some(n) = v.as_array().or_else(|| v["neighbors"].as_array()) else {
        return false;
    };
    !n.is_empty() && n.iter().all(|x| x["state"] == "full")
}

/// `n` kernel curls of `service.org`: every one 200 from the scheduled set;
/// the answers by instance.
fn curls_of_the_scheduled_set(lab: &Lab, n: usize) -> BTreeMap<String, u32> {
    let mut by = BTreeMap::<String, u32>::new();
    for _ in 0..n {
        let (code, instance, _) = curl(lab, "service.org").expect("curl service.org failed");
        assert_eq!(code, "200", "instance {instance:?}");
        assert!(
            SCHEDULED.contains(&instance.as_str()),
            "{instance:?} is not in the scheduled set"
        );
        *by.entry(instance).or_default() += 1;
    }
    by
}

/// Removes a directory when dropped.
struct RemoveOnDrop(String);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn the_example_lab_serves_every_name_and_reroutes_around_a_cut_link() {
    if !root_or_skip() {
        return;
    }
    if !have("dnsmasq") || !have("nginx") || !have("curl") {
        eprintln!("SKIP: needs dnsmasq (package dnsmasq-base), nginx and curl");
        return;
    }
    let name = common::lab_name('r', 'l');
    let web_dir = format!("/tmp/svl-{name}-web");
    let toml = LAB
        .replacen("name = \"rosa\"", &format!("name = \"{name}\""), 1)
        .replace(WEB_DIR, &web_dir);
    assert!(
        toml.contains(&web_dir) && !toml.contains(WEB_DIR),
        "the example's name or nginx directory changed"
    );
    let _web = RemoveOnDrop(web_dir);
    let lab = Lab::up(&name, &toml);

    // The IGP carried every name to the ingress: the scheduled set and the
    // routed instance (in address order: i1, i2, i3), foo.com and the
    // SAG's `*`, each at the cost of its shortest path over the whole
    // square (every adjacency up); shop.example is in the second domain
    // only.
    let converged = || {
        costs(&lab, "s1", "service.org") == [10, 10, 20]
            && costs(&lab, "s1", "service.org/video") == [20]
            && costs(&lab, "s1", "foo.com") == [15]
            && costs(&lab, "s1", "*") == [25]
            && ["s1", "s2", "s3", "s4", "g"]
                .iter()
                .all(|n| all_full(&lab, n))
    };
    assert!(
        wait_until(40, converged),
        "the domain never converged: {} {}",
        lab.ctl("s1", &["fib"]),
        lab.ctl("s1", &["neighbors"])
    );
    let steering = |service: &str| {
        fib_entry(&lab, "s1", service)
            .and_then(|e| e["steering"].as_str().map(str::to_owned))
            .unwrap_or_default()
    };
    assert_eq!(steering("service.org"), MIXED);
    assert_eq!(steering("service.org/video"), "Route(Shortest)");
    assert!(
        wait_until(30, || reachable(&lab, "g2", "shop.example") == 1),
        "g2 never learnt shop.example: {}",
        lab.ctl("g2", &["fib"])
    );
    assert_eq!(reachable(&lab, "s1", "shop.example"), 0);

    // The kernel client: six connections, six transactions, in turn over
    // the scheduled set, the nearer site; never i3 (round robin is exact
    // per request; a retransmitted SYN is one more request, so allow one
    // off).
    let by = curls_of_the_scheduled_set(&lab, 6);
    assert!(
        SCHEDULED
            .iter()
            .all(|i| by.get(*i).copied().unwrap_or(0) >= 2),
        "not round robin over the scheduled set: {by:?}"
    );

    // The host-node client: the scheduled set, the routed instance (hop by
    // hop: s1 → s2 → s3, delivered by s3), foo.com.
    let (ok, by) = get(&lab, "http://service.org/", &["-n", "4", "--close"]);
    assert_eq!(ok, 4, "{by}");
    assert_eq!(
        (by["i1"].as_u64(), by["i2"].as_u64()),
        (Some(2), Some(2)),
        "{by}"
    );
    let video = ["--service", "service.org/video", "-n", "2", "--close"];
    let (s2_before, s3_before) = (
        counter(&lab, "s2", "sar.request_to_next_sar"),
        counter(&lab, "s3", "sar.request_deliver_local"),
    );
    let (ok, by) = get(&lab, "http://service.org/video", &video);
    assert_eq!((ok, by["i3"].as_u64()), (2, Some(2)), "{by}");
    assert!(counter(&lab, "s2", "sar.request_to_next_sar") >= s2_before + 2);
    assert!(counter(&lab, "s3", "sar.request_deliver_local") >= s3_before + 2);
    let (ok, by) = get(&lab, "http://foo.com/", &["-n", "2", "--close"]);
    assert_eq!((ok, by["f1"].as_u64()), (2, Some(2)), "{by}");
    let (code, instance, _) = curl(&lab, "foo.com").expect("curl foo.com failed");
    assert_eq!((code.as_str(), instance.as_str()), ("200", "f1"));

    // example.net: no instance in the domain; `*` to the SAG, dnsmasq, nginx.
    let (code, instance, body) = curl(&lab, "example.net").expect("curl example.net failed");
    assert_eq!(
        (code.as_str(), instance.as_str(), body.as_str()),
        ("200", "nginx", "hello from nginx")
    );
    let (ok, by) = get(&lab, "http://example.net/", &["-n", "2", "--close"]);
    assert_eq!((ok, by["nginx"].as_u64()), (2, Some(2)), "{by}");
    assert!(counter(&lab, "g", "sag.request") >= 3);

    // shop.example: handed from g to the second domain's SAG g2, which
    // schedules it to i4; both clients.
    let (ok, by) = get(&lab, "http://shop.example/", &["-n", "2", "--close"]);
    assert_eq!((ok, by["i4"].as_u64()), (2, Some(2)), "{by}");
    let (code, instance, _) = curl(&lab, "shop.example").expect("curl shop.example failed");
    assert_eq!((code.as_str(), instance.as_str()), ("200", "i4"));
    assert!(counter(&lab, "g", "sag.handover_out") >= 3);
    assert!(counter(&lab, "g2", "sag.handover_in") >= 3);
    assert!(counter(&lab, "g2", "sag.handover_back") >= 3);

    // Cut s1 ─ s2. Once the dead interval has passed and the IGP has
    // re-converged, s1 routes the scheduled set's segment over s4.
    assert_eq!(
        via(&lab, "s1", "fd00:b::/64").as_deref(),
        Some("fd00:ab::2")
    );
    lab.verb("link", &["l", "down"]);
    assert!(
        wait_until(40, || via(&lab, "s1", "fd00:b::/64").as_deref()
            == Some("fd00:14::4")),
        "s1 never re-routed around the cut: {}",
        lab.ctl("s1", &["routes"])
    );
    // s2's way back to the clients converges alike. The set is now at 35
    // (over s4 and s3), i3 at 25 (over s4): i3 is the nearer site, and
    // service.org is routed to it, s1 → s4 → s3, like service.org/video.
    assert!(
        wait_until(40, || via(&lab, "s2", "fd00:a::/64").as_deref()
            == Some("fd00:23::3")),
        "s2 never re-routed around the cut: {}",
        lab.ctl("s2", &["routes"])
    );
    assert!(
        wait_until(40, || costs(&lab, "s1", "service.org") == [35, 35, 25]),
        "s1's costs never followed the cut: {}",
        lab.ctl("s1", &["fib"])
    );
    assert_eq!(steering("service.org"), MIXED);
    assert!(
        wait_until(40, || curl(&lab, "service.org")
            .is_some_and(|(c, _, _)| c == "200")),
        "service.org never answered after the cut"
    );
    for _ in 0..3 {
        let (code, instance, _) = curl(&lab, "service.org").expect("curl service.org failed");
        assert_eq!((code.as_str(), instance.as_str()), ("200", "i3"));
    }
    let s4_before = counter(&lab, "s4", "sar.request_to_next_sar");
    let (ok, by) = get(&lab, "http://service.org/", &["-n", "2", "--close"]);
    assert_eq!((ok, by["i3"].as_u64()), (2, Some(2)), "{by}");
    let (ok, by) = get(&lab, "http://service.org/video", &video);
    assert_eq!((ok, by["i3"].as_u64()), (2, Some(2)), "{by}");
    assert!(counter(&lab, "s4", "sar.request_to_next_sar") >= s4_before + 4);

    // Heal: the adjacency comes back and with it the shorter route.
    lab.verb("link", &["l", "up"]);
    assert!(
        wait_until(40, || via(&lab, "s1", "fd00:b::/64").as_deref()
            == Some("fd00:ab::2")
            && all_full(&lab, "s1")
            && all_full(&lab, "s2")),
        "the route never came back: {} {}",
        lab.ctl("s1", &["routes"]),
        lab.ctl("s1", &["neighbors"])
    );
    // The set is the nearer site again: scheduled, never i3.
    assert!(
        wait_until(40, || costs(&lab, "s1", "service.org") == [10, 10, 20]),
        "s1's costs never came back: {}",
        lab.ctl("s1", &["fib"])
    );
    assert!(
        wait_until(40, || curl(&lab, "service.org")
            .is_some_and(|(c, _, _)| c == "200")),
        "service.org never answered after the heal"
    );
    curls_of_the_scheduled_set(&lab, 2);
    let (ok, by) = get(&lab, "http://service.org/", &["-n", "2", "--close"]);
    assert_eq!(ok, 2, "{by}");
    assert!(
        by.as_object()
            .is_some_and(|m| m.keys().all(|k| SCHEDULED.contains(&k.as_str()))),
        "not the scheduled set after the heal: {by}"
    );

    // The set stops (SIGTERM: each host withdraws what it serves). s1's
    // entry keeps i3 alone, and service.org is routed to it, for both
    // clients.
    for node in SCHEDULED {
        let pid = lab.ctl(node, &["ping"])["pid"]
            .as_u64()
            .unwrap_or_else(|| panic!("no pid from {node}"));
        assert!(run_bounded(10, "kill", &["-TERM", &pid.to_string()])
            .status
            .success());
    }
    let only_i3 = || {
        fib_entry(&lab, "s1", "service.org").is_some_and(|e| {
            e["instances"].as_array().is_some_and(|a| {
                a.len() == 1 && a[0]["addr"] == "fd00:d::11" && a[0]["reachable"] == true
            })
        })
    };
    assert!(
        wait_until(20, only_i3),
        "the set's withdrawals never reached s1: {}",
        lab.ctl("s1", &["fib"])
    );
    assert_eq!(steering("service.org"), "Route(Shortest)");
    let s2_before = counter(&lab, "s2", "sar.request_to_next_sar");
    for _ in 0..3 {
        let (code, instance, _) = curl(&lab, "service.org").expect("curl service.org failed");
        assert_eq!((code.as_str(), instance.as_str()), ("200", "i3"));
    }
    let (ok, by) = get(&lab, "http://service.org/", &["-n", "2", "--close"]);
    assert_eq!((ok, by["i3"].as_u64()), (2, Some(2)), "{by}");
    // Routed hop by hop, s1 → s2 → s3.
    assert!(counter(&lab, "s2", "sar.request_to_next_sar") >= s2_before + 5);

    // The kernel client's shim: every flow bound by one response.
    let flows = counter(&lab, "cs", "rosa.client_flows");
    assert!(flows >= 12, "{flows} flows");
    let shim_drops: Vec<String> = lab
        .drops("cs")
        .into_keys()
        .filter(|k| k.starts_with("drop.rosa."))
        .collect();
    assert!(shim_drops.is_empty(), "{shim_drops:?}");
    // No request refused or mangled by a SAG. (A DNS answer that arrives
    // after its query was re-sent, on a loaded machine, is
    // `dns_unexpected`: harmless.)
    for sag in ["g", "g2"] {
        let drops: Vec<String> = lab
            .drops(sag)
            .into_keys()
            .filter(|k| k.starts_with("drop.sag.") && k != "drop.sag.dns_unexpected")
            .collect();
        assert!(drops.is_empty(), "{sag}: {drops:?}");
    }

    let netns_dir = format!("/etc/netns/svl-{name}-client");
    lab.down();
    assert!(
        !std::path::Path::new(&netns_dir).exists(),
        "{netns_dir} left behind"
    );
}
