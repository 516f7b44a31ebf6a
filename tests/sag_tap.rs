//! The ROSA Service Access Gateway over real TAPs
//! (`examples/labs/rosa-sag.toml`): `example.net` is announced by no
//! instance of the domain, so the ingress SAR `s1` routes its requests by
//! `*` to the SAG `g`, which asks dnsmasq for the name's AAAA, proxies to
//! nginx with its own address, and answers through the ingress with
//! Instance = itself. Checked: the host-node client and a kernel curl (TUN
//! shim) get nginx's 200; the client never asks DNS; the SAG asks dnsmasq
//! once for two transactions within the TTL and again once it expired; a
//! prepopulated name is cached before any request; a name without address
//! is refused and counted; on the client's wire only the SYN and SYN-ACK
//! carry the ROSA option, every other segment is client ⇄ SAG, plain.
//! And `shop.example`, a service of a second ROSA domain, is reached
//! through both SAGs: `_rosa.shop.example` names the other domain's SAG
//! `g2`, which takes the request (SAG entry) as its ingress, and sends the
//! response back through `g`; the transaction then talks to the instance
//! directly. Needs root, dnsmasq and nginx.

mod common;

use std::sync::{Mutex, PoisonError};

use common::{have, named, root_or_skip, tshark_fields, wait_until, Lab};
use serde_json::Value;

const LAB: &str = include_str!("../examples/labs/rosa-sag.toml");
const INGRESS: &str = "fd00:a::1";
const CLIENT: &str = "fd00:a::10";
const SAG: &str = "fd00:ab::2";
const SERVER: &str = "fd00:e::80";
const I3: &str = "fd00:2:2::11";

fn counter(lab: &Lab, node: &str, name: &str) -> u64 {
    named(&lab.stats(node)).get(name).copied().unwrap_or(0)
}

/// The AAAA queries for `name` dnsmasq logged (its stderr is `dns.log`).
fn dns_queries(lab: &Lab, name: &str) -> usize {
    let log = std::fs::read_to_string(lab.run_dir().join("dns.log")).unwrap_or_default();
    let needle = format!("query[AAAA] {name} from {SAG}");
    log.lines().filter(|l| l.contains(&needle)).count()
}

/// The SAG's cache entry for `name`.
fn cached(lab: &Lab, name: &str) -> Option<Value> {
    lab.ctl("g", &["sag"])["cache"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)
        .cloned()
}

/// `ctl c get http://NAME/ ARGS`.
fn get(lab: &Lab, name: &str, args: &[&str]) -> Value {
    let url = format!("http://{name}/");
    let mut all = vec!["get", url.as_str()];
    all.extend_from_slice(args);
    lab.ctl("c", &all)
}

/// Removes a directory when dropped.
struct RemoveOnDrop(String);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The two tests run one after the other: each lab has ten processes.
static ONE_LAB_AT_A_TIME: Mutex<()> = Mutex::new(());

#[test]
fn example_net_through_the_sag_to_nginx_via_dnsmasq() {
    if !root_or_skip() {
        return;
    }
    let _one = ONE_LAB_AT_A_TIME
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if !have("dnsmasq") || !have("nginx") {
        eprintln!("SKIP: needs dnsmasq (package dnsmasq-base) and nginx");
        return;
    }
    let name = common::lab_name('s', 'g');
    let text = LAB.replace("rosa-sag", &name).replacen(
        "name = \"c\"\nrole = \"host\"\n",
        "name = \"c\"\nrole = \"host\"\npcap = true\n",
        1,
    );
    assert!(text.contains("pcap = true"));
    // nginx's files (its lab command writes them), however the test ends.
    let _web = RemoveOnDrop(format!("/tmp/svl-{name}-web"));
    let lab = Lab::up(&name, &text);

    // The SAG's `*` reached the ingress over the IGP.
    assert!(
        wait_until(20, || lab.ctl("s1", &["fib"])["fib"]
            .as_array()
            .is_some_and(|f| f.iter().any(|e| e["service"] == "*"))),
        "s1 never learnt `*`: {}",
        lab.ctl("s1", &["fib"])
    );
    // Prepopulated at start, before any request.
    assert!(
        wait_until(10, || cached(&lab, "pre.example.net")
            .is_some_and(|e| e["answer"] == SERVER)),
        "pre.example.net not prepopulated: {}",
        lab.ctl("g", &["sag"])
    );
    assert_eq!(dns_queries(&lab, "example.net"), 0);

    // Two transactions (two connections) within the 5 s TTL: one query.
    let v = get(&lab, "example.net", &["-n", "2", "--close"]);
    assert_eq!(v["ok"].as_u64(), Some(2), "{v}");
    assert_eq!(v["instances"]["nginx"].as_u64(), Some(2), "{v}");
    assert_eq!(v["status"]["200"].as_u64(), Some(2), "{v}");
    assert_eq!(dns_queries(&lab, "example.net"), 1, "cached for the TTL");
    // A keep-alive transaction of 10 requests: affinity through the SAG.
    let v = get(&lab, "example.net", &["-n", "10"]);
    assert_eq!(v["ok"].as_u64(), Some(10), "{v}");
    assert_eq!(dns_queries(&lab, "example.net"), 1, "cached for the TTL");

    // Once the TTL has run out, the next transaction asks again.
    assert!(
        wait_until(15, || cached(&lab, "example.net")
            .is_some_and(|e| e["live"] == false)),
        "example.net never expired: {}",
        lab.ctl("g", &["sag"])
    );
    let v = get(&lab, "example.net", &["-n", "1", "--close"]);
    assert_eq!(v["ok"].as_u64(), Some(1), "{v}");
    assert_eq!(
        dns_queries(&lab, "example.net"),
        2,
        "asked again after the TTL"
    );
    assert!(counter(&lab, "g", "sag.dns_cache_expired") >= 1);

    // A name without an address: refused and counted, nothing proxied.
    let flows = counter(&lab, "g", "sag.proxy_flow_opened");
    let v = get(&lab, "nx.example.net", &["-n", "1", "--timeout-ms", "1500"]);
    assert_eq!(v["ok"].as_u64(), Some(0), "{v}");
    assert!(counter(&lab, "g", "drop.sag.no_address") >= 1);
    assert_eq!(counter(&lab, "g", "sag.proxy_flow_opened"), flows);

    // The proxy's bookkeeping: each transaction turned direct.
    let direct = counter(&lab, "g", "sag.proxy_client_direct");
    assert!(direct >= 4, "{direct} flows went direct");
    assert!(counter(&lab, "g", "sag.proxy_to_server") > 4 * direct);
    assert!(counter(&lab, "g", "sag.proxy_to_client") > 4 * direct);
    assert!(counter(&lab, "s1", "sar.response_to_client") >= 4);
    // The four proxied connections have ended, and so have their flows:
    // by FIN (or RST), not by the idle timeout (120 s).
    let closed = || {
        counter(&lab, "g", "sag.proxy_flow_closed_fin")
            + counter(&lab, "g", "sag.proxy_flow_closed_rst")
    };
    assert!(
        wait_until(10, || closed() >= 4),
        "{}",
        lab.ctl("g", &["sag"])
    );
    assert_eq!(counter(&lab, "g", "sag.proxy_flow_expired"), 0);

    // Plain curl in the kernel client, through its TUN shim.
    let out = lab.exec(
        "client",
        20,
        &[
            "curl",
            "-sS",
            "-w",
            " %{http_code} %header{x-instance}",
            "http://example.net/",
        ],
    );
    assert!(out.status.success(), "curl failed: {}", common::text(&out));
    let said = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert_eq!(said, "hello from nginx 200 nginx");

    second_domain(&lab);

    if have("tshark") {
        check_the_wire(&lab);
    }

    let drops = lab.drops("g");
    let unexpected: Vec<_> = drops
        .iter()
        .filter(|(k, _)| {
            !benign(k)
                && !matches!(
                    k.as_str(),
                    "drop.sag.no_address" | "drop.sar.igp_unknown_neighbor"
                )
        })
        .collect();
    assert!(unexpected.is_empty(), "SAG drops: {drops:?}");
    let drops = lab.drops("g2");
    assert!(drops.keys().all(|k| benign(k)), "g2 drops: {drops:?}");
    lab.down();
}

/// Drops a loaded machine may show that say nothing about the SAG's work:
/// the IGP's pacing of LSAs arriving within 500 ms of each other while
/// adjacencies form (the LSA is sent again), and a DNS answer arriving
/// after its query was retried.
fn benign(counter: &str) -> bool {
    matches!(
        counter,
        "drop.sar.igp_lsa_min_arrival" | "drop.sag.dns_unexpected"
    )
}

/// `shop.example`, announced only in the second domain, through both SAGs.
fn second_domain(lab: &Lab) {
    // Learnt *and* reachable: until SPF has a path to i3's SAR, g2's FIB
    // falls back to `*` and refuses the hand-over (handover_no_instance).
    assert!(
        wait_until(20, || lab.ctl("g2", &["fib"])["fib"]
            .as_array()
            .is_some_and(|f| f.iter().any(|e| e["service"] == "shop.example"
                && e["instances"].as_array().is_some_and(|i| i
                    .iter()
                    .any(|m| m["reachable"] == true))))),
        "g2 never learnt a reachable shop.example: {}",
        lab.ctl("g2", &["fib"])
    );
    let v = get(lab, "shop.example", &["-n", "2", "--close"]);
    assert_eq!(v["ok"].as_u64(), Some(2), "{v}");
    assert_eq!(v["instances"]["i3"].as_u64(), Some(2), "{v}");
    let v = get(lab, "shop.example", &["-n", "10"]);
    assert_eq!(v["ok"].as_u64(), Some(10), "{v}");
    assert_eq!(v["instances"]["i3"].as_u64(), Some(10), "{v}");
    // One question for the other domain's SAG; none for the name itself.
    assert_eq!(dns_queries(lab, "_rosa.shop.example"), 1);
    assert_eq!(dns_queries(lab, "shop.example"), 0);
    assert!(counter(lab, "g", "sag.handover_out") >= 3);
    assert!(counter(lab, "g2", "sag.handover_in") >= 3);
    assert!(counter(lab, "g2", "sag.handover_back") >= 3);
    assert!(counter(lab, "g2", "sar.request_to_instance") >= 3);
    // The kernel client too.
    let out = lab.exec(
        "client",
        20,
        &[
            "curl",
            "-sS",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code} %header{x-instance}",
            "http://shop.example/",
        ],
    );
    assert!(out.status.success(), "curl failed: {}", common::text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "200 i3");
}

/// The client's capture: no DNS at all; SYNs to the ingress with the ROSA
/// option, SYN-ACKs with it; every other segment client ⇄ SAG, plain; the
/// refusal of a name without address answered with ICMPv6.
fn check_the_wire(lab: &Lab) {
    let pcap = lab.run_dir().join("c.pcap");
    let dns = tshark_fields(&pcap, "dns || udp.port == 53", &["frame.number"], &[]);
    assert!(dns.is_empty(), "the client asked DNS: {dns:?}");
    // The refused nx.example.net: Destination Unreachable (address
    // unreachable) from the SAG, to the client.
    let unreachable = tshark_fields(
        &pcap,
        "icmpv6.type == 1 && icmpv6.code == 3",
        &["ipv6.src", "ipv6.dst"],
        &[],
    );
    assert!(
        unreachable
            .iter()
            .any(|r| r[0].starts_with(SAG) && r[1].starts_with(CLIENT)),
        "no Destination Unreachable from the SAG: {unreachable:?}"
    );
    let rows = tshark_fields(
        &pcap,
        "tcp && !icmpv6",
        &[
            "ipv6.src",
            "ipv6.dst",
            "tcp.flags.syn",
            "tcp.flags.ack",
            "ipv6.opt.type",
        ],
        &[],
    );
    let (mut syns, mut synacks, mut plain) = (0, 0, 0);
    for r in &rows {
        let [src, dst, syn, ack, opts] = &r[..] else {
            panic!("{r:?}");
        };
        let rosa = opts.split(',').any(|t| t == "0x3e" || t == "62");
        let (syn, ack) = (syn == "1" || syn == "True", ack == "1" || ack == "True");
        match (src.as_str(), syn, ack) {
            (CLIENT, true, false) => {
                syns += 1;
                assert!(dst == INGRESS && rosa, "a SYN not steered: {r:?}");
            }
            (_, true, true) => {
                synacks += 1;
                assert!(
                    dst == CLIENT && rosa,
                    "a SYN-ACK without the response: {r:?}"
                );
            }
            (CLIENT, false, _) => {
                plain += 1;
                assert!(
                    (dst == SAG || dst == I3) && !rosa,
                    "not affinity traffic to the SAG or i3: {r:?}"
                );
            }
            _ => {
                plain += 1;
                assert!(
                    (src == SAG || src == I3) && !rosa,
                    "not from the SAG or i3: {r:?}"
                );
            }
        }
    }
    assert!(syns >= 4 && synacks >= 4, "{syns} SYNs, {synacks} SYN-ACKs");
    assert!(plain > 30, "{plain} plain segments");
}

/// The hand-over inside UDP 7471 (`udp_encap` at `g`): `shop.example` is
/// reached through both SAGs, and on the link between them no packet
/// carries the ROSA option outside UDP.
#[test]
fn shop_example_handed_over_inside_udp() {
    if !root_or_skip() {
        return;
    }
    if !have("dnsmasq") || !have("nginx") {
        eprintln!("SKIP: needs dnsmasq (package dnsmasq-base) and nginx");
        return;
    }
    let _one = ONE_LAB_AT_A_TIME
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let name = common::lab_name('s', 'u');
    let text = LAB
        .replace("rosa-sag", &name)
        .replacen(
            "prepopulate = [\"pre.example.net\"]\n",
            "prepopulate = [\"pre.example.net\"]\nudp_encap = true\n",
            1,
        )
        .replacen(
            "name = \"g2\"\nrole = \"sag\"\n",
            "name = \"g2\"\nrole = \"sag\"\npcap = true\n",
            1,
        );
    assert!(text.contains("udp_encap = true") && text.contains("pcap = true"));
    // nginx's files (its lab command writes them), however the test ends.
    let _web = RemoveOnDrop(format!("/tmp/svl-{name}-web"));
    let lab = Lab::up(&name, &text);
    assert!(
        wait_until(20, || lab.ctl("s1", &["fib"])["fib"]
            .as_array()
            .is_some_and(|f| f.iter().any(|e| e["service"] == "*"))),
        "s1 never learnt `*`"
    );
    second_domain(&lab);
    for (node, c) in [
        ("g", "sag.encap_tx"),
        ("g", "sag.encap_rx"),
        ("g2", "sag.encap_rx"),
        ("g2", "sag.encap_tx"),
    ] {
        assert!(counter(&lab, node, c) >= 3, "{node} {c}");
    }
    if have("tshark") {
        // g2's port on the link between the domains.
        let pcap = lab.run_dir().join("g2.pcap");
        let udp = tshark_fields(&pcap, "udp.port == 7471", &["frame.number"], &[]);
        assert!(udp.len() >= 6, "{} datagrams on UDP 7471", udp.len());
        // An ICMPv6 error quoting a request (a SAG refusing one that
        // came before the second domain converged, say) shows the quoted
        // option too: that is not a request or response outside UDP.
        let bare = tshark_fields(
            &pcap,
            "ipv6.opt.type == 0x3e && !icmpv6",
            &["frame.number"],
            &[],
        );
        assert!(bare.is_empty(), "the option outside UDP: {bare:?}");
    }
    for node in ["g", "g2"] {
        let drops = lab.drops(node);
        assert!(drops.keys().all(|k| benign(k)), "{node} drops: {drops:?}");
    }
    lab.down();
}
