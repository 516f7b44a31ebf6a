//! ROSA end to end over real TAPs (`examples/labs/rosa-small.toml`): a host-node
//! client reaches `service.org` by name, with no DNS, through two SAR
//! nodes; the far SAR's two instances are scheduled round robin per
//! transaction; a transaction stays on its instance (affinity: only its
//! first exchange takes the ROSA path through the SARs, the rest is routed
//! as plain IPv6); an instance that stops withdraws and is chosen no more.
//! tshark reads the client node's own capture: every SYN goes to the
//! ingress SAR with the ROSA option, every SYN-ACK arrives with it, and
//! every other segment goes to an instance as plain IPv6. Needs root.

mod common;

use common::{have, named, root_or_skip, run_bounded, tshark_fields, wait_until, Lab};
use serde_json::Value;

const LAB: &str = include_str!("../examples/labs/rosa-small.toml");

fn counter(lab: &Lab, node: &str, name: &str) -> u64 {
    named(&lab.stats(node)).get(name).copied().unwrap_or(0)
}

/// `ctl c get http://service.org/ ARGS`: the job's answers by instance.
fn get(lab: &Lab, args: &[&str]) -> (u64, Value) {
    let mut all = vec!["get", "http://service.org/"];
    all.extend_from_slice(args);
    let v = lab.ctl("c", &all);
    (v["ok"].as_u64().unwrap_or(0), v["instances"].clone())
}

fn instances_at_s1(lab: &Lab) -> u64 {
    lab.ctl("s1", &["instances"])["instances"]
        .as_u64()
        .unwrap_or(0)
}

#[test]
fn service_by_name_round_robin_affinity_and_withdrawal() {
    if !root_or_skip() {
        return;
    }
    let name = common::lab_name('r', 'o');
    let text = LAB
        .replacen("name = \"rosa-small\"", &format!("name = \"{name}\""), 1)
        .replacen(
            "name = \"c\"\nrole = \"host\"\n",
            "name = \"c\"\nrole = \"host\"\npcap = true\n",
            1,
        );
    assert!(text.contains("pcap = true"));
    let lab = Lab::up(&name, &text);

    // Both announcements crossed s2 and the IGP to the ingress SAR.
    assert!(
        wait_until(20, || instances_at_s1(&lab) == 2),
        "s1 never learnt both instances: {}",
        lab.ctl("s1", &["instances"])
    );

    // Four transactions (one connection each): round robin, two each.
    let before = counter(&lab, "s1", "sar.request_to_instance");
    let (ok, by) = get(&lab, &["-n", "4", "--close"]);
    assert_eq!(ok, 4, "{by}");
    assert_eq!(by["i1"].as_u64(), Some(2), "{by}");
    assert_eq!(by["i2"].as_u64(), Some(2), "{by}");

    // One keep-alive transaction of 20 requests never moves.
    let (ok, by) = get(&lab, &["-n", "20"]);
    assert_eq!(ok, 20, "{by}");
    let served: Vec<u64> = by
        .as_object()
        .unwrap()
        .values()
        .filter_map(Value::as_u64)
        .collect();
    assert_eq!(served, [20], "a transaction moved: {by}");

    // Affinity on the wire: the ingress SAR steered one request per
    // transaction (a retransmitted SYN may add one), everything else it
    // just routed.
    let steered = counter(&lab, "s1", "sar.request_to_instance") - before;
    let routed = counter(&lab, "s1", "sar.forwarded");
    assert!((5..=10).contains(&steered), "steered {steered}");
    assert!(routed > 5 * steered, "routed {routed}, steered {steered}");
    assert_eq!(
        counter(&lab, "c", "rosa.responses_received"),
        counter(&lab, "c", "rosa.client_flows"),
        "every flow bound by exactly one response"
    );

    if have("tshark") {
        check_the_wire(&lab);
    }

    // i2 stops (SIGTERM): it withdraws, and new transactions all go to i1.
    let pid = lab.ctl("i2", &["ping"])["pid"].as_u64().unwrap();
    assert!(run_bounded(10, "kill", &["-TERM", &pid.to_string()])
        .status
        .success());
    assert!(
        wait_until(10, || instances_at_s1(&lab) == 1),
        "the withdrawal did not reach s1: {}",
        lab.ctl("s1", &["instances"])
    );
    let (ok, by) = get(&lab, &["-n", "4", "--close"]);
    assert_eq!(ok, 4, "{by}");
    assert_eq!(by["i1"].as_u64(), Some(4), "{by}");
    lab.down();
}

/// The client's capture: (src, dst, syn, ack, option types) per TCP segment.
fn check_the_wire(lab: &Lab) {
    const INGRESS: &str = "fd00:a::1";
    const CLIENT: &str = "fd00:a::10";
    const INSTANCES: [&str; 2] = ["fd00:b::11", "fd00:b::12"];
    let rows = tshark_fields(
        &lab.run_dir().join("c.pcap"),
        "tcp",
        &[
            "ipv6.src",
            "ipv6.dst",
            "tcp.flags.syn",
            "tcp.flags.ack",
            "ipv6.opt.type",
        ],
        &[],
    );
    assert!(rows.len() > 50, "{} segments", rows.len());
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
                    INSTANCES.contains(&dst.as_str()) && !rosa,
                    "not affinity traffic: {r:?}"
                );
            }
            _ => {
                plain += 1;
                assert!(!rosa, "an option after the handshake: {r:?}");
            }
        }
    }
    assert!(syns >= 5 && synacks >= 5, "{syns} SYNs, {synacks} SYN-ACKs");
    assert!(plain > 40, "{plain} plain segments");
}
